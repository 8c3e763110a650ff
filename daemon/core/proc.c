/* proc.c: process hubs; see proc.h. */
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <signal.h>
#include "activity.h"
#include "agents.h"
#include "events.h"
#include "log.h"
#include "proc.h"
#include "sandboxd.h"
#include "strv.h"
#include "util.h"

#define ACK_STEP (128u << 10)

static struct proc *
from_sub(struct agent_sub *s)
{
	return s->data;
}

/* The acknowledgement the guest may have: everything when nobody reads, else what the
 * slowest reader has taken (the guest then runs at most one window ahead of it, and the ring
 * holds that window). */
static void
update_ack(struct proc *p)
{
	uint64_t target = ring_end(&p->ring);
	struct list_node *n;

	LIST_FOREACH (n, &p->readers) {
		struct proc_reader *r = list_entry(n, struct proc_reader, link);
		if (r->offset < target)
			target = MAX(r->offset, ring_start(&p->ring));
	}
	if (target <= p->acked)
		return;
	/* acknowledge in steps, and always when the guest would otherwise stall */
	if (p->agent && (target - p->acked >= ACK_STEP || target == ring_end(&p->ring))) {
		if (agent_ack(p->agent, p->pid, target) >= 0)
			p->acked = target;
	}
}

void
proc_pump(struct proc_reader *r)
{
	struct proc *p = r->p;

	if (!p)
		return;
	if (r->offset < ring_start(&p->ring)) {
		uint64_t n = ring_start(&p->ring) - r->offset;
		r->offset = ring_start(&p->ring);
		if (r->dropped)
			r->dropped(r, n);
	}
	while (r->offset < ring_end(&p->ring) && (!r->ready || r->ready(r))) {
		const uint8_t *data;
		uint8_t stream;
		/* the longest run of one stream that is contiguous in the ring */
		size_t n = ring_peek(&p->ring, r->offset, 64u << 10, &stream, &data);

		r->offset += n;
		r->data(r, stream, data, n);
		if (!r->p)
			return; /* the reader went away in its callback */
	}
	if (!p->running && r->offset >= ring_end(&p->ring) && !r->told_exit) {
		/* the last word: the reader has nothing more to get, so it leaves the list first,
		 * and may free itself in the callback; nothing touches it after */
		r->told_exit = true;
		list_remove(&r->link);
		r->p = NULL;
		update_ack(p);
		if (r->exited)
			r->exited(r, p->exit_code);
		return;
	}
	update_ack(p);
}

static void
pump_all(struct proc *p)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &p->readers)
		proc_pump(list_entry(n, struct proc_reader, link));
	update_ack(p);
}

static void
on_output(struct agent_sub *s, int stream, uint64_t offset, const void *bytes, size_t len)
{
	struct proc *p = from_sub(s);
	const uint8_t *b = bytes;
	uint64_t end = ring_end(&p->ring);

	/* the agent checked continuity; the first bytes after a (re)attach may repeat what we
	 * hold, so keep only what is new */
	if (offset + len <= end)
		return;
	if (offset < end) {
		b += end - offset;
		len -= (size_t)(end - offset);
	} else if (offset > end)
		ring_skip(&p->ring, offset); /* a gap (output dropped while nobody was attached) */
	/* out of memory, the bytes still count: readers are told they were dropped */
	(void)ring_write(&p->ring, (uint8_t)stream, b, len);
	activity_inside(p->sb); /* output: it is at work, watched or not */
	pump_all(p);
}

static void
on_dropped(struct agent_sub *s, uint64_t count)
{
	struct proc *p = from_sub(s);

	/* the guest's ring started later than we asked: those bytes are gone for everyone */
	ring_skip(&p->ring, s->next_offset);
	(void)count;
	pump_all(p);
}

static void
on_exited(struct agent_sub *s, int code, uint64_t end)
{
	struct proc *p = from_sub(s);
	struct sandboxd *d = p->d;
	struct sandbox *sb = p->sb;
	uint32_t pid = p->pid;

	p->running = false;
	p->oom = s->oom;
	/* what our SIGKILL ended is a timeout (API v1: exit code -1), not a signal's 128 + 9;
	 * one that exited on its own as the timer fired keeps its own code */
	p->timed_out = p->timeout_killed && code == 128 + SIGKILL && !p->oom;
	p->exit_code = p->timed_out ? PROC_TIMED_OUT : code;
	activity_inside(sb); /* the idle timeout counts from its end */
	(void)end;
	if (p->oom)
		log_info("sandbox '%s': process %u was ended by the guest's OOM killer (%u MiB)",
		         sb->id, pid, sb->memory_mb);
	else if (p->timed_out)
		log_debug("sandbox '%s': process %u was ended by its timeout", sb->id, pid);
	else
		log_debug("sandbox '%s': process %u exited with %d", sb->id, pid, code);
	/* readers (a run's answer among them) first; the database write after */
	pump_all(p);
	(void)sandbox_event(d, sb, "process.exited",
	                    json_pack("{s:I, s:i, s:I, s:b, s:b}", "pid", (json_int_t)pid,
	                              "exit_code", p->exit_code, "duration_ms",
	                              (json_int_t)MAX(now_unix_ms() - p->started_at, 0), "oom",
	                              p->oom, "timed_out", p->timed_out));
	/* the sandbox's agent, if this was it, has exited */
	agents_proc_exited(d, sb, pid, p->exit_code);
}

void
proc_audit_started(struct sandboxd *d, struct sandbox *sb, uint32_t pid, char *const *argv,
                   const char *cwd, char *const *env, bool keep)
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	char hex[2 * SHA256_DIGEST_LENGTH + 1];
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	json_t *env_names = json_array();
	size_t n = 0;

	if (!ctx || !env_names) {
		EVP_MD_CTX_free(ctx);
		json_decref(env_names);
		return;
	}
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	/* the arguments after the program, each with its NUL: printf '%s\\0' ARGS | sha256sum */
	for (; argv[n]; n++)
		if (n > 0)
			EVP_DigestUpdate(ctx, argv[n], strlen(argv[n]) + 1);
	EVP_DigestFinal_ex(ctx, md, NULL);
	EVP_MD_CTX_free(ctx);
	for (size_t i = 0; i < sizeof(md); i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	/* "K=V": the name only */
	for (size_t i = 0; env && env[i]; i++) {
		const char *eq = strchr(env[i], '=');
		(void)json_array_append_new(
		        env_names,
		        json_stringn(env[i], eq ? (size_t)(eq - env[i]) : strlen(env[i])));
	}
	(void)sandbox_event(d, sb, "process.started",
	                    json_pack("{s:I, s:s, s:I, s:s, s:s, s:o, s:b}", "pid", (json_int_t)pid,
	                              "program", argv[0], "arg_count", (json_int_t)n - 1,
	                              "args_sha256", hex, "cwd", cwd ? cwd : PROC_HOME, "env_names",
	                              env_names, "keep", keep));
}

int
proc_new(struct sandboxd *d, struct sandbox *sb, struct agent *agent, uint32_t pid,
         char *const *argv, bool tty, bool keep, int64_t started_at, struct proc **ret)
{
	struct proc *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return -ENOMEM;
	ring_init(&p->ring, PROC_RING);
	if (strv_copy(argv, strv_length(argv), &p->argv) < 0)
		goto oom;
	p->d = d;
	p->sb = sb;
	p->agent = agent;
	p->pid = pid;
	p->tty = tty;
	p->keep = keep;
	p->running = true;
	p->started_at = started_at;
	list_init(&p->readers);
	list_init(&p->sub.link);
	p->sub = (struct agent_sub){ .pid = pid,
		                     .output = on_output,
		                     .dropped = on_dropped,
		                     .exited = on_exited,
		                     .data = p };
	list_init(&p->sub.link);
	r = agent_attach(agent, &p->sub, 0);
	if (r < 0) {
		p->sb = NULL;
		list_init(&p->link);
		proc_free(p);
		return r;
	}
	p->sub_attached = true;
	list_push_back(&sb->procs, &p->link);
	/* a process of its own runs in it: it stays up, even if a read of its files woke it */
	sb->woken_for_files = false;
	*ret = p;
	return 0;
oom:
	list_init(&p->link);
	list_init(&p->readers);
	proc_free(p);
	return -ENOMEM;
}

static void
free_memory(void *data)
{
	struct proc *p = data;

	strv_free(p->argv);
	ring_free(&p->ring);
	free(p);
}

/* Lets go of the guest and the sandbox's list (the agent is alive now; it may not be when a
 * deferred free runs). */
static void
unhook(struct proc *p)
{
	if (p->timer_on) {
		loop_timer_done(&p->timer);
		p->timer_on = false;
	}
	if (p->sub_attached && p->agent) {
		agent_detach(p->agent, &p->sub);
		p->sub_attached = false;
	}
	list_remove(&p->link);
}

void
proc_free(struct proc *p)
{
	struct list_node *n, *tmp;

	if (!p || p->freeing)
		return;
	p->freeing = true;
	if (p->running) {
		p->running = false;
		p->exit_code = 137; /* the VM goes away under it */
	}
	/* readers hear the end (once) and are let go */
	LIST_FOREACH_SAFE (n, tmp, &p->readers) {
		struct proc_reader *r = list_entry(n, struct proc_reader, link);
		list_remove(&r->link);
		r->p = NULL;
		if (!r->told_exit) {
			r->told_exit = true;
			if (r->exited)
				r->exited(r, p->exit_code);
		}
	}
	unhook(p);
	/* its timer may be in the loop's current batch of events: free after it */
	if (loop_defer(p->d->loop, free_memory, p) < 0)
		free_memory(p);
}

void
proc_discard(struct proc *p)
{
	struct list_node *n, *tmp;

	if (!p || p->freeing)
		return;
	p->freeing = true;
	if (!p->running && p->agent)
		(void)agent_release(p->agent, p->pid);
	LIST_FOREACH_SAFE (n, tmp, &p->readers) {
		struct proc_reader *r = list_entry(n, struct proc_reader, link);
		list_remove(&r->link);
		r->p = NULL;
	}
	unhook(p);
	/* callers may be inside this process's own callbacks: free it after them */
	if (loop_defer(p->d->loop, free_memory, p) < 0)
		log_warning("process %u: leaking its memory: out of memory", p->pid);
}

static void
timeout_fired(struct loop_timer *t _unused_, void *data)
{
	struct proc *p = data;

	if (!p->running)
		return;
	if (!p->agent) {
		p->timeout_due = true; /* its sandbox is suspended: the kill goes once it resumes */
		return;
	}
	if (agent_signal(p->agent, p->pid, SIGKILL) >= 0)
		p->timeout_killed = true;
}

int
proc_set_timeout(struct proc *p, uint64_t secs)
{
	int r;

	if (!p->timer_on) {
		r = loop_timer_init(p->d->loop, &p->timer, timeout_fired, p);
		if (r < 0)
			return r;
		p->timer_on = true;
	}
	return loop_timer_arm(&p->timer, secs * 1000, 0);
}

struct proc *
proc_find(struct sandbox *sb, uint32_t pid)
{
	struct list_node *n;

	LIST_FOREACH (n, &sb->procs) {
		struct proc *p = list_entry(n, struct proc, link);
		if (p->pid == pid)
			return p;
	}
	return NULL;
}

void
proc_clear(struct sandbox *sb)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &sb->procs)
		proc_free(list_entry(n, struct proc, link));
}

void
proc_reader_add(struct proc *p, struct proc_reader *r, uint64_t from)
{
	r->p = p;
	r->offset = from;
	r->told_exit = false;
	list_push_back(&p->readers, &r->link);
	proc_pump(r);
}

void
proc_reader_remove(struct proc_reader *r)
{
	struct proc *p = r->p;

	if (!p)
		return;
	list_remove(&r->link);
	r->p = NULL;
	update_ack(p);
}

/* ---- slots: the limits on runs and processes ---- */

static unsigned *
slot_counter(struct sandbox *sb, enum proc_slot kind)
{
	return kind == PROC_SLOT_RUN ? &sb->run_slots : &sb->proc_slots;
}

unsigned
proc_slot_count(const struct sandbox *sb, enum proc_slot kind)
{
	unsigned n = kind == PROC_SLOT_RUN ? sb->run_slots : sb->proc_slots;
	struct list_node *l;

	/* a run's process is its run's; a process started is counted while it runs */
	if (kind == PROC_SLOT_PROCESS)
		LIST_FOREACH (l, &sb->procs) {
			const struct proc *p = list_entry(l, struct proc, link);
			n += p->running && !p->run;
		}
	return n;
}

static bool
same_owner(const struct sandbox *a, const struct sandbox *b)
{
	return a->owner && b->owner ? streq(a->owner, b->owner) : a->owner == b->owner;
}

/* What a refusal says, by kind: the thing counted, the flags that raise the limits, and what
 * the caller can do. */
static const struct {
	const char *what;
	const char *sandbox_flag, *user_flag;
	const char *then;
	enum err_kind kind;
	int error;
} slot_refusals[] = {
	[PROC_SLOT_RUN] = { .what = "runs under way",
	                    .sandbox_flag = "--max-runs-per-sandbox",
	                    .user_flag = "--max-runs-per-user",
	                    .then = "retry when one has ended",
	                    .kind = ERR_RATE_LIMITED,
	                    .error = EAGAIN },
	[PROC_SLOT_PROCESS] = { .what = "processes running or starting",
	                        .sandbox_flag = "--max-processes-per-sandbox",
	                        .user_flag = "--max-processes-per-user",
	                        .then = "end one first (POST .../signal)",
	                        .kind = ERR_CONFLICT,
	                        .error = EBUSY },
};

int
proc_slot_take(struct sandboxd *d, struct sandbox *sb, enum proc_slot kind, struct err *err)
{
	const unsigned per_sandbox = kind == PROC_SLOT_RUN ? d->opts->max_runs_per_sandbox
	                                                   : d->opts->max_processes_per_sandbox;
	const unsigned per_user = kind == PROC_SLOT_RUN ? d->opts->max_runs_per_user
	                                                : d->opts->max_processes_per_user;
	unsigned here = proc_slot_count(sb, kind), owner = 0;
	struct list_node *n;

	if (per_sandbox && here >= per_sandbox)
		return err_set(err, -slot_refusals[kind].error, slot_refusals[kind].kind,
		               "limit reached: sandbox '%s' has %u %s, at most %u (the operator "
		               "sets it with %s); %s",
		               sb->id, here, slot_refusals[kind].what, per_sandbox,
		               slot_refusals[kind].sandbox_flag, slot_refusals[kind].then);
	if (per_user) {
		LIST_FOREACH (n, &d->reg.all) {
			const struct sandbox *o = list_entry(n, struct sandbox, by_created);
			if (same_owner(o, sb))
				owner += proc_slot_count(o, kind);
		}
		if (owner >= per_user)
			return err_set(
			        err, -slot_refusals[kind].error, slot_refusals[kind].kind,
			        "limit reached: the sandboxes of '%s' have %u %s together, at "
			        "most %u per user (the operator sets it with %s); %s",
			        sb->owner ? sb->owner : "?", owner, slot_refusals[kind].what,
			        per_user, slot_refusals[kind].user_flag, slot_refusals[kind].then);
	}
	(*slot_counter(sb, kind))++;
	return 0;
}

void
proc_slot_put(struct sandbox *sb, enum proc_slot kind)
{
	unsigned *n = slot_counter(sb, kind);

	if (*n > 0)
		(*n)--;
}

json_t *
proc_to_json(const struct proc *p)
{
	json_t *argv = json_array();
	char started[32];

	for (size_t i = 0; argv && p->argv[i]; i++)
		json_array_append_new(argv, json_string(p->argv[i]));
	format_rfc3339(p->started_at, started);
	return json_pack("{s:I, s:b, s:b, s:o, s:s, s:o, s:o, s:o, s:s}", "pid", (json_int_t)p->pid,
	                 "tty", p->tty, "keep", p->keep, "argv", argv ? argv : json_array(),
	                 "state", p->running ? "running" : "exited", "exit_code",
	                 p->running ? json_null() : json_integer(p->exit_code), "oom",
	                 p->running ? json_null() : json_boolean(p->oom), "timed_out",
	                 p->running ? json_null() : json_boolean(p->timed_out), "started_at",
	                 started);
}

void
proc_detach_all(struct sandbox *sb)
{
	struct list_node *n;

	LIST_FOREACH (n, &sb->procs) {
		struct proc *p = list_entry(n, struct proc, link);
		if (p->sub_attached && p->agent)
			agent_detach(p->agent, &p->sub);
		p->sub_attached = false;
		p->agent = NULL;
	}
}

void
proc_attach_all(struct sandbox *sb, struct agent *agent)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &sb->procs) {
		struct proc *p = list_entry(n, struct proc, link);
		if (p->agent)
			continue;
		p->agent = agent;
		/* an exited one is only released; a running one goes on from the next byte the
		 * ring wants (the guest kept what was not acknowledged) */
		if (p->running && agent_attach(agent, &p->sub, ring_end(&p->ring)) >= 0)
			p->sub_attached = true;
		if (p->running && p->timeout_due) {
			p->timeout_due = false;
			if (agent_signal(agent, p->pid, SIGKILL) >= 0)
				p->timeout_killed = true;
		}
		update_ack(p);
	}
}
