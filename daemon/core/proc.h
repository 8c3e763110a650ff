/* proc.h: processes of a sandbox as sandboxd sees them. Each has a hub: one attachment to the
 * guest (agent_sub) feeding a ring of the newest PROC_RING bytes of output (lib/ring.h, the
 * same ring the guest keeps: the stream of every byte and offsets from the start), from which any
 * number of readers (run, NDJSON output, attach) take their own position. Acknowledgements to the
 * guest follow the slowest reader, so a reader that keeps up never loses a byte and a stalled one
 * stalls the process rather than losing output; with no reader, everything is acknowledged and the
 * ring keeps the newest bytes. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "agent.h"
#include "error.h"
#include "list.h"
#include "ring.h"

#define PROC_RING (1u << 20)

struct sandboxd;
struct sandbox;
struct proc;

struct proc_reader {
	struct list_node link;
	struct proc *p;
	uint64_t offset; /* the next byte it wants */
	bool told_exit;
	/* callbacks: data in order, at most as much as ready() allows; exited() comes last and
	 * is the only one in which the reader may free itself */
	void (*data)(struct proc_reader *r, int stream, const void *bytes, size_t len);
	void (*dropped)(struct proc_reader *r, uint64_t count);
	void (*exited)(struct proc_reader *r, int code);
	/* whether it takes more now (NULL: always); a reader that said no calls proc_pump()
	 * when it can take more again */
	bool (*ready)(struct proc_reader *r);
	void *data_ptr;
};

/* Where a process runs when its request names no cwd: the sandbox user's home. */
#define PROC_HOME "/sandbox/home"

struct proc {
	struct list_node link; /* in the sandbox's list */
	struct sandboxd *d;
	struct sandbox *sb;
	struct agent *agent;
	uint32_t pid;
	char **argv;
	bool tty, keep;
	bool run; /* a run's (POST …/run): counted as a run, not as a process */
	bool running;
	int exit_code; /* PROC_TIMED_OUT when its timeout ended it */
	bool oom;      /* it ended because the guest ran out of memory (its OOM killer; code 137) */
	bool timeout_killed; /* its timeout passed while it ran, and it was sent SIGKILL */
	bool timed_out;      /* ... and it died of that SIGKILL: exit_code is PROC_TIMED_OUT */
	int64_t started_at;  /* unix ms */
	struct agent_sub sub;
	struct ring ring; /* its end: every byte the guest sent */
	uint64_t acked;
	struct list_node readers;
	bool sub_attached;
	bool freeing;
	struct loop_timer timer; /* its timeout, if it has one */
	bool timer_on;
	bool timeout_due; /* its timeout passed while its sandbox was suspended */
};

/* A process the guest started (or reported after a restart). Attaches to its output from
 * from (0 for a new one). The sandbox's list owns it. */
int proc_new(struct sandboxd *d, struct sandbox *sb, struct agent *agent, uint32_t pid,
             char *const *argv, bool tty, bool keep, int64_t started_at, struct proc **ret);
/* Unlinks and frees; readers are told the process ended (exit code 137 when it was running:
 * the sandbox is stopping or ending). */
void proc_free(struct proc *p);
/* Forgets a process nobody needs any more (a finished run): the guest releases it, readers are
 * dropped without a word, and the memory goes after the current callbacks return. */
void proc_discard(struct proc *p);
/* The exit code of a process its timeout ended (API v1: never the signal's 137). */
#define PROC_TIMED_OUT (-1)
/* Kills the process (SIGKILL) after secs; when it dies of that, it exits PROC_TIMED_OUT with
 * timed_out set. */
int proc_set_timeout(struct proc *p, uint64_t secs);
struct proc *proc_find(struct sandbox *sb, uint32_t pid);
/* Ends and frees every process of a sandbox (it stops or ends). */
void proc_clear(struct sandbox *sb);
/* A suspend: the hubs let go of the agent (which may go with the VMM) but keep their rings,
 * readers and offsets; the guest's processes are frozen, not ended. p->agent is NULL until
 * proc_attach_all. */
void proc_detach_all(struct sandbox *sb);
/* After a resume: the hubs take agent and attach again from where their rings end (output
 * goes on from the acknowledged offsets); a timeout that passed meanwhile kills now.
 * Idempotent. */
void proc_attach_all(struct sandbox *sb, struct agent *agent);

/* Starts reading from offset (0: from the oldest byte the ring still holds). */
void proc_reader_add(struct proc *p, struct proc_reader *r, uint64_t from);
void proc_reader_remove(struct proc_reader *r);
/* Delivers what a reader can take now; called again when a reader that was full drains. */
void proc_pump(struct proc_reader *r);

/* What a sandbox may hold at once (--max-runs-per-sandbox and the other three; 0: no limit):
 * a run counts from its request until its answer is out (or its client left and it ended); a
 * process from its request until it exits, a kept one too. Runs and processes count apart. */
enum proc_slot {
	PROC_SLOT_RUN,
	PROC_SLOT_PROCESS,
};
/* Takes a slot of kind in sb for a new run or process, counted against the sandbox's limit and
 * its owner's across their sandboxes. Returns 0 (give it back with proc_slot_put once the run
 * is over, or once the process started or failed to), or -EAGAIN for a run (ERR_RATE_LIMITED)
 * and -EBUSY for a process (ERR_CONFLICT), with err naming the limit and the flag that raises
 * it. */
int proc_slot_take(struct sandboxd *d, struct sandbox *sb, enum proc_slot kind, struct err *err);
void proc_slot_put(struct sandbox *sb, enum proc_slot kind);
/* What sb holds of kind now: slots taken, and for processes those running besides. */
unsigned proc_slot_count(const struct sandbox *sb, enum proc_slot kind);

/* The audit record of a process started: the program, how many arguments, a SHA-256 over each
 * argument followed by a NUL, its cwd (NULL: the home) and the names of env ("K=V", the
 * variables the request set; may be NULL); never the arguments or the values themselves (an
 * agent's prompt is one). */
void proc_audit_started(struct sandboxd *d, struct sandbox *sb, uint32_t pid, char *const *argv,
                        const char *cwd, char *const *env, bool keep);

/* The API form: {pid, tty, argv, state, exit_code, oom, timed_out, started_at, keep}. */
json_t *proc_to_json(const struct proc *p);
