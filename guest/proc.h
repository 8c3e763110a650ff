/* proc.h: the processes sandbox-guestd runs for sandboxd: EXEC (direct exec with a PTY or
 * three pipes, as the sandbox user), the output ring and its ATTACH/ACK window, stdin,
 * signals, window sizes, reaping and PS. Processes belong to the guest, not to a session. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "buf.h"
#include "list.h"
#include "loop.h"
#include "ring.h"

struct agent;
struct frame;

struct proc_fd {
	int fd; /* -1 when unused or closed */
	struct loop_source src;
	bool eof;
};

struct proc {
	struct list_node node;
	struct agent *agent;
	uint32_t id; /* the handle the host uses (chan), from 1 */
	pid_t pid;   /* also its process group and session */
	char *arg0;
	bool tty, keep;
	bool reaped; /* waitpid() collected it; exit_code is set */
	int exit_code;
	/* the kernel's OOM killer ended it (or the one of its processes that took its exit):
	 * it ended with 137, the host did not send it a SIGKILL, and the guest's count of OOM
	 * kills rose while it ran */
	bool oom;
	bool host_killed;         /* the host sent its group a SIGKILL */
	uint64_t oom_kills_start; /* /proc/vmstat oom_kill when it started */
	int64_t started_ms;
	struct proc_fd out, err, in; /* with a TTY, out is the master and err, in are unused */
	struct ring ring;
	struct buf stdin_q;
	bool stdin_eof; /* pipes: close stdin once the queue is written */

	/* a tunnel (guest/tunnel.c): no process, out and in are the same TCP socket (in a dup of
	 * it); reaped is set from the start and exit_code says how the socket's read side ended */
	bool tunnel;

	/* STDIN_ACK (lib/agentproto.h, Stdin), counted in this session: the bytes of STDIN frames
	 * received, and those that left the queue (written, or thrown away once the reader was
	 * gone): received less what is queued, never going back (bytes the guest adds, a TTY's
	 * end-of-file character or an earlier session's rest, at most delay it) */
	bool stdin_ack_due; /* a STDIN_ACK to send */
	uint64_t stdin_received;
	uint64_t stdin_written;
	bool stdin_overrun; /* the host sent past its window (logged once) */

	/* while attached: the host has all bytes below acked, bytes below sent are on the way */
	bool attached;
	bool exit_sent;
	uint64_t drop; /* a DROPPED to send first (0: none) */
	uint64_t sent, acked;
};

/* EXEC: parses, starts the process and answers RESULT (PID, or ERRNO and MESSAGE). */
void proc_exec(struct agent *a, uint32_t chan, const void *payload, size_t len);
/* STDIN, SIGNAL, RESIZE, ATTACH, DETACH, ACK, RELEASE: chan is the handle. Frames for an
 * unknown handle or with a malformed payload are logged and ignored (no request to answer). */
void proc_frame(struct agent *a, const struct frame *f);
/* A tunnel over the connected socket fd (taken, non-blocking): its handle, or -ENOMEM. */
int proc_add_tunnel(struct agent *a, int fd, uint32_t *ret_id);
/* PS: one PROC per process (tunnels are not listed), then RESULT. */
void proc_ps(struct agent *a, uint32_t chan);

/* Adds at most one frame of p's output (or its DROPPED or EXIT) to the queue; false when
 * there is nothing to send now. */
bool proc_pump(struct proc *p);
/* Collects every child that ended (orphans too). */
void proc_reap(struct agent *a);
/* The session ended: close every tunnel, detach everything else and SIGKILL the process group
 * of every running process started without KEEP. */
void proc_session_end(struct agent *a);
/* Sends sig to the process group of every process still running (test mode teardown). */
void proc_signal_all(struct agent *a, int sig);
/* Whether every process was reaped. */
bool proc_all_reaped(const struct agent *a);
/* Frees every process (at exit; running ones are not killed). */
void proc_free_all(struct agent *a);
