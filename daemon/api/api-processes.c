/* api-processes.c: processes in a sandbox: run (wait for the result), start, list, follow
 * output (NDJSON), stdin, signals, and the interactive attach over sbx-stream/1 or WebSocket.
 * Everything goes through the sandbox's guest agent (daemon/vm/agent.h) and the process hubs
 * (daemon/core/proc.h). */
#include <signal.h>
#include <strings.h>
#include <wslay/wslay.h>
#include "activity.h"
#include "api-internal.h"
#include "base64.h"
#include "events.h"
#include "log.h"
#include "proc.h"
#include "records.h"
#include "request.h"
#include "sandboxd.h"
#include "server.h"
#include "strv.h"
#include "util.h"

#define RUN_STREAM_MAX (8u << 20)
#define STREAM_LOW (256u << 10)
#define EXITED_KEEP 64
#define ATTACH_FRAME_MAX (1u << 20)

/* ---- shared ---- */

struct agent *
api_sandbox_agent(struct api_call *call, struct sandbox **ret_sb)
{
	struct sandbox *sb = api_lookup_live(call);
	struct backend *b = call->d->backend;
	struct agent *a;

	if (!sb) {
		api_reply_absent(call);
		return NULL;
	}
	if (sb->state != SANDBOX_RUNNING) {
		api_reply_err(call->c, ERR_CONFLICT, "sandbox '%s' is %s; it must be running",
		              sb->id, sandbox_state_to_string(sb->state));
		return NULL;
	}
	a = b && b->ops->agent ? b->ops->agent(b, sb) : NULL;
	if (!a) {
		api_reply_err(call->c, ERR_UNSUPPORTED,
		              "this server's backend runs no processes or files");
		return NULL;
	}
	if (!agent_ready(a)) {
		api_reply_err(call->c, ERR_UNAVAILABLE,
		              "the agent of sandbox '%s' is reconnecting; try again", sb->id);
		return NULL;
	}
	activity_request(sb);
	*ret_sb = sb;
	return a;
}

static struct proc *
sandbox_proc(struct api_call *call, struct sandbox **ret_sb)
{
	struct sandbox *sb = NULL;
	struct proc *p;
	uint64_t pid;

	if (!api_sandbox_agent(call, &sb))
		return NULL;
	if (parse_u64(call->sub, &pid) < 0 || pid == 0 || pid > UINT32_MAX ||
	    !(p = proc_find(sb, (uint32_t)pid))) {
		api_reply_err(call->c, ERR_NOT_FOUND, "process '%s' not found in sandbox '%s'",
		              call->sub, call->ref);
		return NULL;
	}
	*ret_sb = sb;
	return p;
}

static void
record_started(struct sandboxd *d, struct sandbox *sb, uint32_t pid, const struct exec_request *x)
{
	proc_audit_started(d, sb, pid, x->argv, x->cwd, x->env, x->keep);
}

/* An exec the guest refused: a missing program or a bad cwd is the request's fault. */
static void
reply_exec_error(struct conn *c, const struct agent_result *res)
{
	const char *msg = res->message ? res->message : strerror(res->err);

	switch (res->err) {
	case ENOENT:
	case ENOTDIR:
	case EACCES:
	case ENOEXEC:
	case EISDIR:
	case E2BIG:
	case EINVAL:
		api_reply_err(c, ERR_INVALID, "%s", msg);
		break;
	case ECONNRESET:
		api_reply_err(c, ERR_UNAVAILABLE, "the sandbox stopped: %s", msg);
		break;
	default:
		api_reply_err(c, ERR_INTERNAL, "starting the process failed: %s", msg);
	}
}

/* Frees the oldest exited processes nobody reads beyond EXITED_KEEP. */
static void
collect_exited(struct sandbox *sb)
{
	struct list_node *n, *tmp;
	unsigned exited = 0;

	LIST_FOREACH (n, &sb->procs)
		if (!list_entry(n, struct proc, link)->running)
			exited++;
	LIST_FOREACH_SAFE (n, tmp, &sb->procs) {
		struct proc *p = list_entry(n, struct proc, link);
		if (exited <= EXITED_KEEP)
			break;
		if (p->running || !list_empty(&p->readers))
			continue;
		proc_discard(p);
		exited--;
	}
}

/* Where an operation's sandbox pointer lives, for the waiter that clears it when the sandbox
 * leaves memory first (the slot it held goes with it). */
static void
forget_sandbox(struct sandbox_waiter *w, struct sandbox *sb _unused_, bool gone)
{
	if (!gone)
		return;
	*(struct sandbox **)w->data = NULL;
	sandbox_remove_waiter(w);
}

static void
watch_sandbox(struct sandbox_waiter *w, struct sandbox **sbp)
{
	*w = (struct sandbox_waiter){ .fn = forget_sandbox, .data = sbp };
	list_init(&w->link);
	sandbox_add_waiter(*sbp, w);
}

/* ---- run ---- */

/* A run holds what its process printed (each stream up to RUN_STREAM_MAX) until it ends; then
 * its answer, {exit_code, stdout, stderr, truncated, timed_out, oom}, goes out with its
 * Content-Length as fast as the client reads it: the head, each stream's base64 made a piece
 * at a time from the bytes held (never the whole answer in memory), the tail. So a run costs
 * about one copy of its output, given back as its answer goes. */
#define RUN_PIECE (48u << 10) /* output bytes base64'd at a time (a multiple of 3) */

enum run_part {
	RUN_HEAD,
	RUN_STDOUT,
	RUN_MIDDLE,
	RUN_STDERR,
	RUN_TAIL,
	RUN_DONE,
};

struct run_op {
	struct sandboxd *d;
	struct conn *c; /* NULL once the client left */
	struct sandbox *sb;
	struct agent *agent;
	struct agent_req *req;
	struct proc *p;
	struct proc_reader reader;
	struct exec_request x;
	struct buf out[3]; /* by stream: [1] stdout, [2] stderr */
	bool truncated, killed;
	bool slot;                  /* holds a run slot of sb (proc_slot_take) */
	struct sandbox_waiter gone; /* sb is NULL once it left memory (its answer may outlast it) */
	/* the answer, once the process ended */
	char head[64], tail[96];
	struct buf piece; /* one piece of base64, its room reserved before the answer starts */
	enum run_part part;
	size_t sent; /* of the part's output bytes */
	bool in_send;
};

static void
run_free(struct run_op *op)
{
	proc_reader_remove(&op->reader);
	/* a run's process is nobody else's: once it is over (or nobody waits), forget it; a
	 * process still running after its client left was killed and goes when it exits */
	if (op->p && (!op->p->running || !op->c))
		proc_discard(op->p);
	if (op->c) {
		conn_on_close(op->c, NULL, NULL);
		conn_on_drain(op->c, NULL, NULL);
	}
	if (op->slot && op->sb)
		proc_slot_put(op->sb, PROC_SLOT_RUN);
	sandbox_remove_waiter(&op->gone);
	buf_free(&op->out[1]);
	buf_free(&op->out[2]);
	buf_free(&op->piece);
	exec_request_done(&op->x);
	free(op);
}

static void
run_kill(struct run_op *op)
{
	/* the process's agent: the run's may be gone with a suspend */
	if (op->p && op->p->running && !op->killed && op->p->agent) {
		op->killed = true;
		(void)agent_signal(op->p->agent, op->p->pid, SIGKILL);
	}
}

static void
run_output(struct proc_reader *r, int stream, const void *bytes, size_t len)
{
	struct run_op *op = r->data_ptr;
	struct buf *b = &op->out[stream == 2 ? 2 : 1];
	size_t room = RUN_STREAM_MAX - b->len;

	if (len > room) {
		op->truncated = true;
		len = room;
	}
	if (len && buf_append(b, bytes, len) < 0)
		op->truncated = true; /* out of memory: what is held is answered */
}

static size_t
base64_length(size_t n)
{
	return (n + 2) / 3 * 4;
}

/* Queues the answer's next pieces while the client keeps up; ends it once all is out. The
 * connection's close hook only forgets it while this runs: the run is freed here. */
static void
run_send(struct run_op *op)
{
	op->in_send = true;
	while (op->c && op->part < RUN_DONE && conn_backlog(op->c) < STREAM_LOW) {
		struct buf *out = &op->out[op->part == RUN_STDOUT ? 1 : 2];
		const char *text = NULL;
		size_t n;

		switch (op->part) {
		case RUN_HEAD:
			text = op->head;
			break;
		case RUN_MIDDLE:
			text = "\",\"stderr\":\"";
			break;
		case RUN_TAIL:
			text = op->tail;
			break;
		case RUN_STDOUT:
		case RUN_STDERR:
			n = MIN(out->len - op->sent, (size_t)RUN_PIECE);
			if (n == 0) {
				buf_free(out); /* given back as soon as it is sent */
				op->sent = 0;
				op->part++;
				continue;
			}
			/* into the room reserved: this cannot fail */
			buf_reset(&op->piece);
			(void)base64_encode(&op->piece, out->data + op->sent, n);
			op->sent += n;
			break;
		case RUN_DONE:
			break;
		}
		if (text) {
			op->part++;
			(void)conn_stream_write(op->c, text, strlen(text));
		} else {
			(void)conn_stream_write(op->c, op->piece.data, op->piece.len);
		}
	}
	if (op->c && op->part == RUN_DONE) {
		conn_on_close(op->c, NULL, NULL);
		conn_on_drain(op->c, NULL, NULL);
		conn_stream_end(op->c);
		op->c = NULL;
	}
	op->in_send = false;
	if (!op->c)
		run_free(op);
}

static void
run_drained(struct conn *c _unused_, void *data)
{
	run_send(data);
}

static void
run_answer_gone(struct conn *c _unused_, void *data)
{
	struct run_op *op = data;

	op->c = NULL;
	if (!op->in_send)
		run_free(op);
}

static void
run_exited(struct proc_reader *r, int code)
{
	struct run_op *op = r->data_ptr;
	struct proc *p = op->p;
	size_t len;

	r->p = NULL; /* told once; run_free must not touch the reader list again */
	if (!op->c) {
		run_free(op);
		return;
	}
	snprintf(op->head, sizeof(op->head), "{\"exit_code\":%d,\"stdout\":\"", code);
	snprintf(op->tail, sizeof(op->tail), "\",\"truncated\":%s,\"timed_out\":%s,\"oom\":%s}",
	         op->truncated ? "true" : "false", p && p->timed_out ? "true" : "false",
	         p && p->oom ? "true" : "false");
	/* the process is over: the guest and the hub let go of it now, the answer goes on */
	proc_discard(p);
	op->p = NULL;
	buf_init(&op->piece, base64_length(RUN_PIECE));
	if (buf_reserve(&op->piece, base64_length(RUN_PIECE)) < 0) {
		api_reply_err(op->c, ERR_INTERNAL, "out of memory for the answer");
		op->c = NULL;
		run_free(op);
		return;
	}
	len = strlen(op->head) + base64_length(op->out[1].len) + strlen("\",\"stderr\":\"") +
	      base64_length(op->out[2].len) + strlen(op->tail);
	op->in_send = true;
	conn_on_close(op->c, run_answer_gone, op);
	if (conn_stream_start_sized(op->c, 200, "application/json", len) >= 0)
		conn_on_drain(op->c, run_drained, op);
	run_send(op);
}

static void
run_client_gone(struct conn *c _unused_, void *data)
{
	struct run_op *op = data;

	/* a run is synchronous: nobody waits for it any more */
	op->c = NULL;
	if (op->req)
		return; /* run_started will see it */
	run_kill(op);
}

static void
run_started(void *data, const struct agent_result *res)
{
	struct run_op *op = data;
	int r;

	op->req = NULL;
	if (res->err) {
		if (op->c)
			reply_exec_error(op->c, res);
		op->c = NULL;
		run_free(op);
		return;
	}
	r = proc_new(op->d, op->sb, op->agent, res->pid, op->x.argv, false, false, now_unix_ms(),
	             &op->p);
	if (r < 0) {
		(void)agent_signal(op->agent, res->pid, SIGKILL);
		if (op->c)
			api_reply_err(op->c, ERR_INTERNAL, "could not follow the process: %s",
			              strerror(-r));
		op->c = NULL;
		run_free(op);
		return;
	}
	op->p->run = true;
	/* a run's stdin is what the request gave, then end of input */
	(void)agent_stdin(op->agent, res->pid, op->x.stdin_data.data, op->x.stdin_data.len, true);
	/* the audit record once the guest has its frames (a database write takes a while, and
	 * the guest waits for the ATTACH to report the exit) */
	agent_flush(op->agent);
	record_started(op->d, op->sb, res->pid, &op->x);
	if (!op->c)
		run_kill(op);
	else if (op->x.timeout_secs && proc_set_timeout(op->p, op->x.timeout_secs) < 0)
		log_warning("sandbox '%s': process %u: no timer for its timeout", op->sb->id,
		            op->p->pid);
	op->reader =
	        (struct proc_reader){ .data = run_output, .exited = run_exited, .data_ptr = op };
	proc_reader_add(op->p, &op->reader, 0);
}

/* The agent of a sandbox a process may start in: never one without its environment's values
 * (a restart that could not restore them ended it; this is the guard that no process runs
 * with a secret silently missing). NULL after answering. */
static struct agent *
exec_agent(struct api_call *call, struct sandbox **ret_sb)
{
	struct agent *a = api_sandbox_agent(call, ret_sb);

	if (!a)
		return NULL;
	for (size_t i = 0; i < (*ret_sb)->nenv; i++)
		if (!(*ret_sb)->env[i].value) {
			api_reply_err(call->c, ERR_CONFLICT,
			              "sandbox '%s' lost the value of its environment variable "
			              "'%s' at a restart of sandboxd; processes cannot start in it",
			              (*ret_sb)->id, (*ret_sb)->env[i].name);
			return NULL;
		}
	return a;
}

static struct agent_req *
start_exec(struct agent *a, struct sandbox *sb, struct exec_request *x, bool tty, bool keep,
           agent_done_fn done, void *data)
{
	char **env = sandbox_env_strv(sb, x->env); /* exec_agent checked its values */
	struct agent_exec_spec spec = {
		.argv = x->argv,
		.env = env,
		.cwd = x->cwd,
		.tty = tty,
		.rows = x->rows,
		.cols = x->cols,
		.keep = keep,
	};
	struct agent_req *r = env ? agent_exec(a, &spec, done, data) : NULL;

	strv_free_erase(env);
	return r;
}

void
api_process_run(struct api_call *call)
{
	struct sandbox *sb = NULL;
	struct agent *a = exec_agent(call, &sb);
	struct run_op *op;
	struct err err = {};
	int r;

	if (!a)
		return;
	op = calloc(1, sizeof(*op));
	if (!op) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	op->d = call->d;
	op->c = call->c;
	op->sb = sb;
	watch_sandbox(&op->gone, &op->sb);
	op->agent = a;
	list_init(&op->reader.link);
	buf_init(&op->out[1], RUN_STREAM_MAX);
	buf_init(&op->out[2], RUN_STREAM_MAX);
	r = request_decode_exec(call->body, false, &op->x, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		op->c = NULL;
		run_free(op);
		return;
	}
	r = proc_slot_take(call->d, sb, PROC_SLOT_RUN, &err);
	if (r < 0) {
		/* a run ends by itself, soon or at its timeout: come back */
		api_reply_err_headers(call->c, err.kind, "Retry-After: 1\r\n", "%s", err.message);
		op->c = NULL;
		run_free(op);
		return;
	}
	op->slot = true;
	op->req = start_exec(a, sb, &op->x, false, false, run_started, op);
	if (!op->req) {
		api_reply_err(call->c, ERR_UNAVAILABLE, "the sandbox's agent is not connected");
		op->c = NULL;
		run_free(op);
		return;
	}
	conn_on_close(call->c, run_client_gone, op);
}

/* ---- start a process ---- */

struct start_op {
	struct sandboxd *d;
	struct conn *c;
	struct sandbox *sb;
	struct agent *agent;
	struct exec_request x;
	bool slot; /* holds a process slot of sb until it started (then it counts as running) */
	struct sandbox_waiter gone;
};

static void
start_op_free(struct start_op *op)
{
	if (op->c)
		conn_on_close(op->c, NULL, NULL);
	if (op->slot && op->sb)
		proc_slot_put(op->sb, PROC_SLOT_PROCESS);
	sandbox_remove_waiter(&op->gone);
	exec_request_done(&op->x);
	free(op);
}

static void
start_client_gone(struct conn *c _unused_, void *data)
{
	struct start_op *op = data;

	op->c = NULL; /* the process starts anyway; it is listed */
}

static void
start_done(void *data, const struct agent_result *res)
{
	struct start_op *op = data;
	struct proc *p = NULL;
	int r;

	if (res->err) {
		if (op->c)
			reply_exec_error(op->c, res);
		start_op_free(op);
		return;
	}
	r = proc_new(op->d, op->sb, op->agent, res->pid, op->x.argv, op->x.tty, op->x.keep,
	             now_unix_ms(), &p);
	if (r < 0) {
		(void)agent_signal(op->agent, res->pid, SIGKILL);
		if (op->c)
			api_reply_err(op->c, ERR_INTERNAL, "could not follow the process: %s",
			              strerror(-r));
		start_op_free(op);
		return;
	}
	if (op->x.has_stdin)
		(void)agent_stdin(op->agent, res->pid, op->x.stdin_data.data, op->x.stdin_data.len,
		                  false);
	if (op->x.timeout_secs && proc_set_timeout(p, op->x.timeout_secs) < 0)
		log_warning("sandbox '%s': process %u: no timer for its timeout", op->sb->id,
		            p->pid);
	collect_exited(op->sb);
	/* with --keep-sandboxes, a kept process's command line goes in the sandbox's record: the
	 * guest lists only its program to the next sandboxd */
	if (op->x.keep && (r = records_save(op->d, op->sb)) < 0)
		log_warning("sandbox '%s': process %u: cannot write its record: %s; after a "
		            "restart it is listed by its program alone",
		            op->sb->id, p->pid, strerror(-r));
	if (op->c)
		api_reply_json(op->c, 201, proc_to_json(p));
	/* the audit record after the answer (a database write takes a while) */
	record_started(op->d, op->sb, res->pid, &op->x);
	start_op_free(op);
}

void
api_process_create(struct api_call *call)
{
	struct sandbox *sb = NULL;
	struct agent *a = exec_agent(call, &sb);
	struct start_op *op;
	struct err err = {};
	int r;

	if (!a)
		return;
	op = calloc(1, sizeof(*op));
	if (!op) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	op->d = call->d;
	op->c = call->c;
	op->sb = sb;
	watch_sandbox(&op->gone, &op->sb);
	op->agent = a;
	r = request_decode_exec(call->body, true, &op->x, &err);
	if (r >= 0)
		r = proc_slot_take(call->d, sb, PROC_SLOT_PROCESS, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		op->c = NULL;
		start_op_free(op);
		return;
	}
	op->slot = true;
	if (!start_exec(a, sb, &op->x, op->x.tty, op->x.keep, start_done, op)) {
		api_reply_err(call->c, ERR_UNAVAILABLE, "the sandbox's agent is not connected");
		op->c = NULL;
		start_op_free(op);
		return;
	}
	conn_on_close(call->c, start_client_gone, op);
}

void
api_process_list(struct api_call *call)
{
	struct sandbox *sb = NULL;
	struct list_node *n;
	json_t *arr;

	if (!api_sandbox_agent(call, &sb))
		return;
	arr = json_array();
	LIST_FOREACH (n, &sb->procs)
		json_array_append_new(arr, proc_to_json(list_entry(n, struct proc, link)));
	api_reply_json(call->c, 200, json_pack("{s:o}", "processes", arr ? arr : json_array()));
}

void
api_process_get(struct api_call *call)
{
	struct sandbox *sb = NULL;
	struct proc *p = sandbox_proc(call, &sb);

	if (p)
		api_reply_json(call->c, 200, proc_to_json(p));
}

/* ---- stdin and signals ---- */

/* A stdin body going on to the guest as it arrives (never held whole): the connection is read
 * only as fast as the guest takes it. What came before a client gave up stays sent. */
struct stdin_op {
	struct conn *c;
	struct agent_req *up;
	bool eof; /* ?close=1: end the process's input after the body */
};

static void
stdin_op_free(struct stdin_op *op)
{
	if (op->c)
		conn_on_close(op->c, NULL, NULL);
	agent_upload_abort(op->up);
	free(op);
}

/* The session with the guest ended under the upload (the agent freed it). */
static void
stdin_session_gone(void *data, const struct agent_result *res _unused_)
{
	struct stdin_op *op = data;

	op->up = NULL;
	if (op->c)
		api_reply_err(op->c, ERR_UNAVAILABLE, "the sandbox's agent is not connected");
	op->c = NULL; /* the answer let go of the connection's hooks */
	stdin_op_free(op);
}

static void
stdin_client_gone(struct conn *c _unused_, void *data)
{
	struct stdin_op *op = data;

	op->c = NULL;
	stdin_op_free(op);
}

static void
stdin_drained(void *data)
{
	struct stdin_op *op = data;

	conn_body_resume(op->c);
}

static void
stdin_data(struct conn *c, const void *bytes, size_t len, void *data)
{
	struct stdin_op *op = data;
	int r = agent_upload_data(op->up, bytes, len);

	if (r < 0) {
		api_reply_err(c, ERR_UNAVAILABLE, "the sandbox's agent is not connected");
		op->c = NULL;
		stdin_op_free(op);
		return;
	}
	if (r > 0) {
		/* the guest is behind: read no more until it caught up */
		conn_body_pause(c);
		agent_upload_wait(op->up, stdin_drained);
	}
}

static void
stdin_end(struct conn *c, void *data)
{
	struct stdin_op *op = data;
	int r = agent_upload_end(op->up, op->eof);

	op->up = NULL; /* ended, whatever it returned */
	if (r < 0)
		api_reply_err(c, ERR_UNAVAILABLE, "the sandbox's agent is not connected");
	else
		conn_reply(c, 204, NULL, NULL, 0, NULL);
	op->c = NULL;
	stdin_op_free(op);
}

/* Takes the body as it arrives (api_head). */
static void
stdin_stream(struct api_call *call, struct proc *p, bool eof)
{
	struct stdin_op *op = calloc(1, sizeof(*op));

	if (op)
		op->up = agent_stdin_begin(p->agent, p->pid, stdin_session_gone, op);
	if (!op || !op->up) {
		free(op);
		api_reply_err(call->c, ERR_UNAVAILABLE, "the sandbox's agent is not connected");
		return;
	}
	op->c = call->c;
	op->eof = eof;
	conn_on_close(call->c, stdin_client_gone, op);
	(void)conn_body_take(call->c, stdin_data, stdin_end, op);
}

void
api_process_stdin(struct api_call *call)
{
	struct sandbox *sb = NULL;
	struct proc *p = sandbox_proc(call, &sb);
	char key[16], value[16];
	size_t pos = 0;
	bool eof = false;
	int r;

	if (!p)
		return;
	while ((r = http_query_next(call->req->query, &pos, key, sizeof(key), value,
	                            sizeof(value))) > 0) {
		if (!streq(key, "close") || (!streq(value, "1") && !streq(value, "0"))) {
			api_reply_err(call->c, ERR_INVALID, "the only query parameter is close=1");
			return;
		}
		eof = streq(value, "1");
	}
	if (!p->running) {
		api_reply_err(call->c, ERR_CONFLICT, "process %u has exited", p->pid);
		return;
	}
	if (call->body_follows) {
		stdin_stream(call, p, eof);
		return;
	}
	if (agent_stdin(p->agent, p->pid, call->req->body.data, call->req->body.len, eof) < 0) {
		api_reply_err(call->c, ERR_UNAVAILABLE, "the sandbox's agent is not connected");
		return;
	}
	conn_reply(call->c, 204, NULL, NULL, 0, NULL);
}

static const struct {
	const char *name;
	int signo;
} signals[] = {
	{ "INT", SIGINT },   { "TERM", SIGTERM }, { "KILL", SIGKILL }, { "HUP", SIGHUP },
	{ "QUIT", SIGQUIT }, { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "WINCH", SIGWINCH },
};

static int
signal_number(const char *name)
{
	if (strncasecmp(name, "SIG", 3) == 0)
		name += 3;
	for (size_t i = 0; i < ARRAY_SIZE(signals); i++)
		if (strcasecmp(name, signals[i].name) == 0)
			return signals[i].signo;
	return -1;
}

void
api_process_signal(struct api_call *call)
{
	struct sandbox *sb = NULL;
	struct proc *p = sandbox_proc(call, &sb);
	json_t *v;
	int signo;

	if (!p)
		return;
	v = json_object_get(call->body, "signal");
	if (json_object_size(call->body) != 1 || !json_is_string(v) ||
	    (signo = signal_number(json_string_value(v))) < 0) {
		api_reply_err(call->c, ERR_INVALID,
		              "the body must be {\"signal\": one of INT, TERM, KILL, HUP, QUIT, "
		              "USR1, USR2, WINCH}");
		return;
	}
	if (!p->running) {
		api_reply_err(call->c, ERR_CONFLICT, "process %u has exited", p->pid);
		return;
	}
	if (agent_signal(p->agent, p->pid, signo) < 0) {
		api_reply_err(call->c, ERR_UNAVAILABLE, "the sandbox's agent is not connected");
		return;
	}
	conn_reply(call->c, 204, NULL, NULL, 0, NULL);
}

/* ---- output as NDJSON ---- */

struct out_stream {
	struct proc_reader reader;
	struct conn *c;
	struct loop *loop;
	bool released;
};

/* Lets go of the stream: its reader at once, its memory after the current callbacks (one
 * of them may be running on it: a write that closed the connection, say). */
static void
out_release(struct out_stream *s)
{
	if (s->released)
		return;
	s->released = true;
	s->c = NULL;
	proc_reader_remove(&s->reader);
	if (loop_defer(s->loop, free, s) < 0)
		log_warning("output stream: leaking it: out of memory");
}

static void
out_line(struct out_stream *s, struct buf *line)
{
	if (line->len && conn_stream_write(s->c, line->data, line->len) < 0)
		s->c = NULL;
}

static void
out_data(struct proc_reader *r, int stream, const void *bytes, size_t len)
{
	struct out_stream *s = r->data_ptr;
	_cleanup_buf_ struct buf line = BUF_INIT(1u << 20);

	if (!s->c)
		return;
	(void)buf_printf(&line, "{\"stream\":\"%s\",\"data\":\"",
	                 stream == 2 ? "stderr" : "stdout");
	(void)base64_encode(&line, bytes, len);
	(void)buf_puts(&line, "\"}\n");
	out_line(s, &line);
}

static void
out_dropped(struct proc_reader *r, uint64_t count)
{
	struct out_stream *s = r->data_ptr;
	_cleanup_buf_ struct buf line = BUF_INIT(128);

	if (!s->c)
		return;
	(void)buf_printf(&line, "{\"dropped\":%llu}\n", (unsigned long long)count);
	out_line(s, &line);
}

static void
out_exited(struct proc_reader *r, int code)
{
	struct out_stream *s = r->data_ptr;
	_cleanup_buf_ struct buf line = BUF_INIT(128);
	struct conn *c = s->c;

	if (c) {
		/* a timeout's end says so: {"exit_code":-1,"timed_out":true} */
		(void)buf_printf(&line, "{\"exit_code\":%d%s}\n", code,
		                 code == PROC_TIMED_OUT ? ",\"timed_out\":true" : "");
		out_line(s, &line);
		if (s->c) {
			conn_on_close(c, NULL, NULL);
			conn_on_drain(c, NULL, NULL);
			conn_stream_end(c);
		}
	}
	out_release(s);
}

static bool
out_ready(struct proc_reader *r)
{
	struct out_stream *s = r->data_ptr;

	return s->c && conn_backlog(s->c) < STREAM_LOW;
}

static void
out_drained(struct conn *c _unused_, void *data)
{
	struct out_stream *s = data;

	proc_pump(&s->reader);
}

static void
out_closed(struct conn *c _unused_, void *data)
{
	out_release(data);
}

void
api_process_output(struct api_call *call)
{
	struct sandbox *sb = NULL;
	struct proc *p = sandbox_proc(call, &sb);
	struct out_stream *s;

	if (!p)
		return;
	s = calloc(1, sizeof(*s));
	if (!s) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	s->c = call->c;
	s->loop = call->d->loop;
	s->reader = (struct proc_reader){ .data = out_data,
		                          .dropped = out_dropped,
		                          .exited = out_exited,
		                          .ready = out_ready,
		                          .data_ptr = s };
	list_init(&s->reader.link);
	conn_on_close(call->c, out_closed, s);
	if (conn_stream_start(call->c, 200, "application/x-ndjson") < 0)
		return; /* closed: out_closed freed s */
	conn_on_drain(call->c, out_drained, s);
	/* replayed from the oldest byte still held, then followed */
	proc_reader_add(p, &s->reader, 0);
}

/* ---- attach: sbx-stream/1 and WebSocket ---- */

struct attach {
	struct proc_reader reader;
	struct conn *c;
	struct loop *loop;
	uint32_t pid;
	bool ws;
	bool released;
	wslay_event_context_ptr ctx;
	struct buf in; /* sbx-stream/1 frames being assembled, or WebSocket bytes */
	/* its i frames go on as an upload: the connection is read no faster than the process
	 * takes its stdin (agent.h) */
	struct agent_req *up;
	bool stdin_waiting; /* paused until the upload may go on */
};

static void
attach_free(void *data)
{
	struct attach *at = data;

	if (at->ctx)
		wslay_event_context_free(at->ctx);
	buf_free(&at->in);
	free(at);
}

/* The connection owns the attachment: when it closes, the reader goes at once and the
 * memory after the current callbacks (one of them may be writing to it). */
static void
attach_release(struct attach *at)
{
	if (at->released)
		return;
	at->released = true;
	at->c = NULL;
	agent_upload_abort(at->up); /* what it sent stays sent */
	at->up = NULL;
	proc_reader_remove(&at->reader);
	if (loop_defer(at->loop, attach_free, at) < 0)
		log_warning("attach: leaking it: out of memory");
}

/* Sends one frame: type, u32 length, payload (a WebSocket binary message each). */
static int
attach_send(struct attach *at, char type, const void *payload, size_t len)
{
	_cleanup_buf_ struct buf f = BUF_INIT(ATTACH_FRAME_MAX + 5);
	uint8_t h[5];

	h[0] = (uint8_t)type;
	h[1] = (uint8_t)(len >> 24);
	h[2] = (uint8_t)(len >> 16);
	h[3] = (uint8_t)(len >> 8);
	h[4] = (uint8_t)len;
	if (!at->c || buf_append(&f, h, 5) < 0 || buf_append(&f, payload, len) < 0)
		return -EPIPE;
	if (at->ws) {
		struct wslay_event_msg msg = { .opcode = WSLAY_BINARY_FRAME,
			                       .msg = (const uint8_t *)f.data,
			                       .msg_length = f.len };
		if (wslay_event_queue_msg(at->ctx, &msg) != 0 || wslay_event_send(at->ctx) != 0)
			return -EPIPE;
		return 0;
	}
	return conn_raw_write(at->c, f.data, f.len);
}

static void
attach_data(struct proc_reader *r, int stream, const void *bytes, size_t len)
{
	struct attach *at = r->data_ptr;

	if (attach_send(at, stream == 2 ? 'E' : 'o', bytes, len) < 0 && at->c)
		conn_raw_close(at->c); /* its close hook lets go of us */
}

static void
attach_dropped(struct proc_reader *r, uint64_t count)
{
	struct attach *at = r->data_ptr;
	uint8_t p[8];

	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(count >> (56 - 8 * i));
	(void)attach_send(at, 'd', p, sizeof(p));
}

static void
attach_exited(struct proc_reader *r, int code)
{
	struct attach *at = r->data_ptr;
	uint8_t p[4] = { (uint8_t)((uint32_t)code >> 24), (uint8_t)((uint32_t)code >> 16),
		         (uint8_t)((uint32_t)code >> 8), (uint8_t)code };

	/* x is the last frame; then the connection closes (and its close hook frees us) */
	(void)attach_send(at, 'x', p, sizeof(p));
	if (at->c) {
		if (at->ws) {
			(void)wslay_event_queue_close(at->ctx, WSLAY_CODE_NORMAL_CLOSURE, NULL, 0);
			(void)wslay_event_send(at->ctx);
		}
		if (at->c)
			conn_raw_close(at->c);
	}
}

static bool
attach_ready(struct proc_reader *r)
{
	struct attach *at = r->data_ptr;

	return at->c && conn_backlog(at->c) < STREAM_LOW;
}

/* The session with the guest ended under the upload (the agent freed it); the next i frame
 * begins another, or finds the agent gone. */
static void
attach_stdin_gone(void *data, const struct agent_result *res _unused_)
{
	struct attach *at = data;

	at->up = NULL;
	if (at->stdin_waiting && at->c) {
		at->stdin_waiting = false;
		conn_raw_resume(at->c);
	}
}

static void
attach_stdin_drained(void *data)
{
	struct attach *at = data;

	at->stdin_waiting = false;
	if (at->c)
		conn_raw_resume(at->c);
}

/* The agent of the attached process now: none while its sandbox is suspended (a resume
 * brings another), nor once it exited. */
static struct agent *
attach_agent(const struct attach *at)
{
	return at->reader.p ? at->reader.p->agent : NULL;
}

/* Bytes of an i frame. Frames already read still go on while the connection is paused: the
 * agent holds them, one read's worth at most. */
static int
attach_stdin(struct attach *at, const uint8_t *p, size_t len)
{
	int r;

	if (!at->up && attach_agent(at))
		at->up = agent_stdin_begin(attach_agent(at), at->pid, attach_stdin_gone, at);
	if (!at->up)
		return -ENOTCONN;
	r = agent_upload_data(at->up, p, len);
	if (r > 0 && !at->stdin_waiting && at->c) {
		at->stdin_waiting = true;
		conn_raw_pause(at->c);
		agent_upload_wait(at->up, attach_stdin_drained);
	}
	return r < 0 ? r : 0;
}

/* One client frame: i stdin, e end of input, s signal name, r resize (u16 rows, u16 cols). */
static int
attach_frame(struct attach *at, uint8_t type, const uint8_t *p, size_t len)
{
	struct agent *a = attach_agent(at);
	char name[16];
	int signo;

	if (!a)
		return -ENOTCONN;
	switch (type) {
	case 'i':
		return attach_stdin(at, p, len);
	case 'e': /* behind the bytes the window still holds back */
		return agent_stdin(a, at->pid, NULL, 0, true) < 0 ? -EPIPE : 0;
	case 's':
		if (len == 0 || len >= sizeof(name))
			return -EINVAL;
		memcpy(name, p, len);
		name[len] = '\0';
		signo = signal_number(name);
		return signo < 0 ? -EINVAL : agent_signal(a, at->pid, signo);
	case 'r':
		if (len != 4 || !((p[0] << 8 | p[1]) > 0) || !((p[2] << 8 | p[3]) > 0))
			return -EINVAL;
		return agent_resize(a, at->pid, (unsigned short)(p[0] << 8 | p[1]),
		                    (unsigned short)(p[2] << 8 | p[3]));
	default:
		return -EINVAL;
	}
}

/* sbx-stream/1: frames straight on the connection. */
static void
attach_raw_in(struct conn *c, const void *bytes, size_t len, void *ctx)
{
	struct attach *at = ctx;

	if (buf_append(&at->in, bytes, len) < 0) {
		conn_raw_close(c);
		return;
	}
	while (buf_avail(&at->in) >= 5) {
		const uint8_t *h = (const uint8_t *)buf_head(&at->in);
		uint32_t n =
		        (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
		if (n > ATTACH_FRAME_MAX) {
			conn_raw_close(c);
			return;
		}
		if (buf_avail(&at->in) < 5 + (size_t)n)
			return;
		if (attach_frame(at, h[0], h + 5, n) < 0) {
			conn_raw_close(c);
			return;
		}
		buf_consume(&at->in, 5 + (size_t)n);
	}
}

static ssize_t
ws_recv(wslay_event_context_ptr ctx, uint8_t *out, size_t len, int flags _unused_, void *user)
{
	struct attach *at = user;
	size_t avail = buf_avail(&at->in);

	if (avail == 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	len = MIN(len, avail);
	memcpy(out, buf_head(&at->in), len);
	buf_consume(&at->in, len);
	return (ssize_t)len;
}

static ssize_t
ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags _unused_,
        void *user)
{
	struct attach *at = user;

	if (!at->c || conn_raw_write(at->c, data, len) < 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return (ssize_t)len;
}

static int
ws_genmask(wslay_event_context_ptr ctx _unused_, uint8_t *buf, size_t len, void *user _unused_)
{
	return random_bytes(buf, len) < 0 ? -1 : 0;
}

static void
ws_msg(wslay_event_context_ptr ctx _unused_, const struct wslay_event_on_msg_recv_arg *arg,
       void *user)
{
	struct attach *at = user;
	uint32_t n;

	if (arg->opcode != WSLAY_BINARY_FRAME)
		return; /* text frames carry nothing here; close and ping are handled by wslay */
	if (arg->msg_length < 5)
		goto bad;
	n = (uint32_t)arg->msg[1] << 24 | (uint32_t)arg->msg[2] << 16 | (uint32_t)arg->msg[3] << 8 |
	    arg->msg[4];
	if (n != arg->msg_length - 5 || attach_frame(at, arg->msg[0], arg->msg + 5, n) < 0)
		goto bad;
	return;
bad:
	(void)wslay_event_queue_close(at->ctx, WSLAY_CODE_PROTOCOL_ERROR, NULL, 0);
}

static void
attach_ws_in(struct conn *c, const void *bytes, size_t len, void *ctx)
{
	struct attach *at = ctx;

	if (buf_append(&at->in, bytes, len) < 0 || wslay_event_recv(at->ctx) != 0 ||
	    wslay_event_send(at->ctx) != 0) {
		conn_raw_close(c);
		return;
	}
	if (!wslay_event_want_read(at->ctx) && !wslay_event_want_write(at->ctx))
		conn_raw_close(c); /* the close handshake is done */
}

static void
attach_closed(struct conn *c _unused_, void *data)
{
	/* detaching never stops the process */
	attach_release(data);
}

static void
attach_drained(struct conn *c _unused_, void *data)
{
	struct attach *at = data;

	proc_pump(&at->reader);
}

static const struct wslay_event_callbacks ws_callbacks = {
	.recv_callback = ws_recv,
	.send_callback = ws_send,
	.genmask_callback = ws_genmask,
	.on_msg_recv_callback = ws_msg,
};

/* The Sec-WebSocket-Accept value for a client's key (RFC 6455). */
static int
ws_accept(const char *key, char out[64])
{
	static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
	unsigned char md[SHA_DIGEST_LENGTH];
	_cleanup_free_ char *s = strdup_printf("%s%s", key, guid);
	_cleanup_buf_ struct buf text = BUF_INIT(63);

	if (!s || strlen(key) != 24)
		return -EINVAL;
	SHA1((const unsigned char *)s, strlen(s), md);
	if (base64_encode(&text, md, sizeof(md)) < 0)
		return -ENOMEM;
	memcpy(out, text.data, text.len + 1);
	return 0;
}

void
api_process_attach(struct api_call *call)
{
	const char *upgrade = http_req_header(call->req, "upgrade");
	struct sandbox *sb = NULL;
	struct proc *p;
	struct attach *at;
	char accept[64], headers[256];
	bool ws;
	int r;

	/* only a handshake (Connection: Upgrade) upgrades: the cookie's CSRF check of ?csrf=
	 * applies to handshakes, and an Upgrade header alone must not skip it */
	if (!call->req->upgrade || !upgrade ||
	    (strcasecmp(upgrade, "websocket") && strcasecmp(upgrade, "sbx-stream/1"))) {
		api_reply_err(call->c, ERR_INVALID,
		              "attach needs 'Upgrade: sbx-stream/1' or a WebSocket handshake");
		return;
	}
	ws = strcasecmp(upgrade, "websocket") == 0;
	if (ws) {
		const char *key = http_req_header(call->req, "sec-websocket-key");
		const char *version = http_req_header(call->req, "sec-websocket-version");
		if (!key || !version || !streq(version, "13") || ws_accept(key, accept) < 0) {
			api_reply_err(
			        call->c, ERR_INVALID,
			        "a WebSocket handshake needs Sec-WebSocket-Key and version 13");
			return;
		}
	}
	p = sandbox_proc(call, &sb);
	if (!p)
		return;
	at = calloc(1, sizeof(*at));
	if (!at) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	at->c = call->c;
	at->loop = call->d->loop;
	at->pid = p->pid;
	at->ws = ws;
	buf_init(&at->in, ATTACH_FRAME_MAX + 4096);
	list_init(&at->reader.link);
	at->reader = (struct proc_reader){ .data = attach_data,
		                           .dropped = attach_dropped,
		                           .exited = attach_exited,
		                           .ready = attach_ready,
		                           .data_ptr = at };
	list_init(&at->reader.link);
	if (ws && wslay_event_context_server_init(&at->ctx, &ws_callbacks, at) != 0) {
		attach_free(at);
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	if (ws)
		wslay_event_config_set_max_recv_msg_length(at->ctx, ATTACH_FRAME_MAX + 5);
	if (ws)
		snprintf(
		        headers, sizeof(headers),
		        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n",
		        accept);
	else
		snprintf(headers, sizeof(headers),
		         "Upgrade: sbx-stream/1\r\nConnection: Upgrade\r\n");
	conn_on_close(call->c, attach_closed, at);
	r = conn_upgrade(call->c, headers, ws ? attach_ws_in : attach_raw_in, at);
	if (r < 0)
		return; /* closed: attach_closed freed it */
	conn_on_drain(call->c, attach_drained, at);
	/* replay what the guest still holds, then follow; detaching never stops it */
	proc_reader_add(p, &at->reader, 0);
}
