/* api-files.c: files in a sandbox: read, write (creating parent directories), remove, and list
 * a directory. Paths are absolute guest paths, checked here and never resolved on the host;
 * the bytes travel through the sandbox's guest agent. A write's body goes on to the guest as
 * it arrives, never held whole: the connection is read only as fast as the guest takes it.
 *
 * A read or a listing of a stopped or failed sandbox starts it as POST …/start would, waits
 * until it runs and asks its agent: its disk is only ever read by its own guest, never mounted
 * or parsed on the host, whose bytes a hostile guest controls. Reads that come meanwhile share
 * that boot, and housekeeping stops it again once nothing else uses it (lifecycle_wake). */
#include "activity.h"
#include "agent.h"
#include "api-internal.h"
#include "events.h"
#include "lifecycle.h"
#include "request.h"
#include "sandboxd.h"
#include "server.h"
#include "util.h"

struct file_op {
	struct sandboxd *d;
	struct conn *c;
	struct sandbox *sb;         /* NULL once it left memory */
	struct sandbox_waiter seen; /* its state changes: moves a waiting read on, clears sb */
	struct principal who;       /* the caller, for the start a read may make */
	struct agent_req *req;
	char *path;
	struct buf data; /* a read's bytes */
	json_t *entries; /* a listing */
	size_t written;
	void (*ask)(struct file_op *op, struct agent *a); /* a read's request, once it runs */
	bool waiting;   /* a read waiting for its sandbox to run */
	bool woke;      /* it started the sandbox, or waited for a start: a failure is final */
	bool deferred;  /* a start is to be asked for after this batch of events (wake_later) */
	bool freed;     /* let go of while deferred: the deferred call frees it */
	bool uploading; /* a write whose body is still coming: giving up drops the file */
};

static void
op_free(struct file_op *op)
{
	if (op->c)
		conn_on_close(op->c, NULL, NULL);
	sandbox_remove_waiter(&op->seen);
	if (op->sb)
		op->sb->file_ops--;
	op->sb = NULL;
	op->waiting = false;
	free(op->path);
	op->path = NULL;
	buf_free(&op->data);
	json_decref(op->entries);
	op->entries = NULL;
	if (op->deferred) {
		op->freed = true;
		return;
	}
	free(op);
}

static void
op_client_gone(struct conn *c _unused_, void *data)
{
	struct file_op *op = data;

	/* the guest finishes what it started (a write lands whole or not at all): a write
	 * whose body did not all come is given up, one that did still lands; a read waiting
	 * for a boot lets the boot go on (housekeeping stops the sandbox again) */
	op->c = NULL;
	if (op->uploading)
		agent_upload_abort(op->req);
	else
		agent_cancel(op->req);
	op_free(op);
}

static void
finish(struct file_op *op)
{
	op->c = NULL;
	op_free(op);
}

static void on_sandbox(struct sandbox_waiter *w, struct sandbox *sb, bool gone);

/* Whether this server's backend serves files at all (a stopped sandbox has no agent to ask). */
static bool
serves_files(struct sandboxd *d)
{
	struct backend_caps caps = { 0 };

	if (!d->backend || !d->backend->ops->agent)
		return false;
	d->backend->ops->caps(d->backend, &caps);
	return caps.files;
}

/* What a sandbox in a state its files cannot be reached in answers. */
static void
refuse_state(struct api_call *call, const struct sandbox *sb, bool read)
{
	const char *state = sandbox_state_to_string(sb->state);

	if (!read && (sb->state == SANDBOX_STOPPED || sb->state == SANDBOX_FAILED))
		api_reply_err(call->c, ERR_CONFLICT,
		              "sandbox '%s' is %s; its files can be read, but are changed only "
		              "while it runs: start it first (POST /v1/sandboxes/%s/start)",
		              sb->id, state, sb->id);
	else if (read)
		api_reply_err(call->c, ERR_CONFLICT,
		              "sandbox '%s' is %s; its files are read while it runs, or once it is "
		              "stopped or failed",
		              sb->id, state);
	else
		api_reply_err(call->c, ERR_CONFLICT, "sandbox '%s' is %s; it must be running",
		              sb->id, state);
}

/* The file operation's target, or an answer already given. A write needs its sandbox
 * running; a read (read) may find it starting, stopping, stopped or failed too. */
static struct file_op *
begin(struct api_call *call, bool read)
{
	static const unsigned read_states = 1u << SANDBOX_RUNNING | 1u << SANDBOX_STARTING |
	                                    1u << SANDBOX_STOPPING | 1u << SANDBOX_STOPPED |
	                                    1u << SANDBOX_FAILED;
	struct sandbox *sb = NULL;
	char key[16], value[4097 + 1];
	struct file_op *op;
	size_t pos = 0;
	bool have = false;
	int r;

	while ((r = http_query_next(call->req->query, &pos, key, sizeof(key), value,
	                            sizeof(value))) > 0) {
		if (!streq(key, "path") || have) {
			api_reply_err(call->c, ERR_INVALID,
			              "the only query parameter is path=<absolute path>");
			return NULL;
		}
		have = true;
	}
	if (r < 0 || !have || !request_path_valid(value)) {
		api_reply_err(call->c, ERR_INVALID,
		              "path must be an absolute guest path without '..' or NUL");
		return NULL;
	}
	sb = api_lookup_live(call);
	if (!sb) {
		api_reply_absent(call);
		return NULL;
	}
	if (sb->state != SANDBOX_RUNNING && !(read && (read_states & 1u << sb->state))) {
		refuse_state(call, sb, read);
		return NULL;
	}
	if (!serves_files(call->d)) {
		api_reply_err(call->c, ERR_UNSUPPORTED,
		              "this server's backend runs no processes or files");
		return NULL;
	}
	op = calloc(1, sizeof(*op));
	if (!op || !(op->path = strdup(value))) {
		free(op);
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	op->d = call->d;
	op->c = call->c;
	op->sb = sb;
	op->who = call->who;
	buf_init(&op->data, API_FILE_MAX);
	op->seen = (struct sandbox_waiter){ .fn = on_sandbox, .data = op };
	list_init(&op->seen.link);
	sandbox_add_waiter(sb, &op->seen);
	sb->file_ops++; /* activity while it is under way */
	activity_request(sb);
	conn_on_close(call->c, op_client_gone, op);
	return op;
}

/* sb's agent, ready to be asked; otherwise answers and lets go of op. */
static struct agent *
op_agent(struct file_op *op)
{
	struct backend *b = op->d->backend;
	struct agent *a = b->ops->agent(b, op->sb);

	if (!a || !agent_ready(a)) {
		api_reply_err(op->c, ERR_UNAVAILABLE,
		              "the agent of sandbox '%s' is reconnecting; try again", op->sb->id);
		finish(op);
		return NULL;
	}
	return a;
}

/* ---- a read of a sandbox that is not running ---- */

/* Its sandbox runs: the read is asked. */
static void
go(struct file_op *op)
{
	struct agent *a;

	op->waiting = false;
	a = op_agent(op);
	if (!a)
		return;
	activity_request(op->sb);
	op->ask(op, a);
}

static void settle(struct file_op *op, bool may_wake);

/* Starts the sandbox as POST …/start would, with its checks and answers, on behalf of the
 * caller. Not from a waiter: the start changes the state its other waiters are being told
 * of (wake_later). */
static void
wake(struct file_op *op)
{
	struct api_call call = { .d = op->d, .c = op->c, .who = op->who };
	int r;

	snprintf(call.ref, sizeof(call.ref), "%s", op->sb->id);
	op->woke = true;
	op->waiting = false; /* on_sandbox leaves it alone until the start has begun */
	r = api_sandbox_wake(&call, op->sb);
	if (r < 0) {
		finish(op); /* answered */
		return;
	}
	op->waiting = true;
	settle(op, false);
}

static void
wake_deferred(void *data)
{
	struct file_op *op = data;

	op->deferred = false;
	if (op->freed) {
		free(op);
		return;
	}
	settle(op, true);
}

/* A stop it waited for is done: the start is asked for after this batch of events, once
 * every waiter was told the sandbox stopped (a POST …/stop waiting for it among them). */
static void
wake_later(struct file_op *op)
{
	op->deferred = true;
	if (loop_defer(op->d->loop, wake_deferred, op) < 0) {
		op->deferred = false;
		api_reply_err(op->c, ERR_INTERNAL, "out of memory");
		finish(op);
	}
}

/* Moves a read on by its sandbox's state: asks once it runs, starts it when it is stopped or
 * failed (may_wake: now, else after this batch), waits while it starts or stops, and gives up
 * once a start it waited for ended otherwise. */
static void
settle(struct file_op *op, bool may_wake)
{
	struct sandbox *sb = op->sb;

	switch (sb->state) {
	case SANDBOX_RUNNING:
		go(op);
		return;
	case SANDBOX_STARTING:
		op->woke = true; /* whoever started it: one boot serves every read */
		return;
	case SANDBOX_STOPPING:
		return;
	case SANDBOX_STOPPED:
	case SANDBOX_FAILED:
		if (op->woke)
			break;
		if (may_wake)
			wake(op);
		else
			wake_later(op);
		return;
	default:
		break;
	}
	if (sb->state == SANDBOX_FAILED)
		api_reply_err(op->c, ERR_UNAVAILABLE,
		              "sandbox '%s' could not be started to read its files: %s", sb->id,
		              sb->reason ? sb->reason : "it failed");
	else
		api_reply_err(op->c, ERR_CONFLICT,
		              "sandbox '%s' became %s before its files could be read", sb->id,
		              sandbox_state_to_string(sb->state));
	finish(op);
}

static void
on_sandbox(struct sandbox_waiter *w, struct sandbox *sb _unused_, bool gone)
{
	struct file_op *op = w->data;

	if (gone) {
		sandbox_remove_waiter(w);
		op->sb = NULL;
		if (op->waiting) {
			api_reply_err(op->c, ERR_CONFLICT,
			              "the sandbox ended before its files could be read");
			finish(op);
		}
		return;
	}
	if (op->waiting && !op->deferred)
		settle(op, false);
}

/* A read or a listing: asked now if its sandbox runs, else once it does. */
static void
read_begin(struct api_call *call, void (*ask)(struct file_op *op, struct agent *a))
{
	struct file_op *op = begin(call, true);

	if (!op)
		return;
	op->ask = ask;
	op->waiting = true;
	settle(op, true);
}

/* Maps the guest's errno to the API's answer. Returns true when it answered an error. */
static bool
reply_failure(struct file_op *op, const struct agent_result *res)
{
	const char *m = res->message ? res->message : strerror(res->err);

	if (!res->err)
		return false;
	switch (res->err) {
	case ENOENT:
		api_reply_err(op->c, ERR_NOT_FOUND, "'%s': no such file or directory", op->path);
		break;
	case ENOTEMPTY:
	case EEXIST:
		api_reply_err(op->c, ERR_CONFLICT, "'%s': directory not empty", op->path);
		break;
	case EBUSY: /* a mount point */
		api_reply_err(op->c, ERR_CONFLICT, "'%s' is a mount point; it cannot be removed",
		              op->path);
		break;
	case ENOSPC:
	case EDQUOT:
		api_reply_err(op->c, ERR_NO_SPACE,
		              "'%s': the sandbox's disk is full; remove files in it, or give a "
		              "new sandbox a larger disk_mb",
		              op->path);
		break;
	case EFBIG:
		api_reply_err(op->c, ERR_INVALID, "'%s' is larger than %u bytes", op->path,
		              API_FILE_MAX);
		break;
	case EISDIR:
	case ENOTDIR:
	case EINVAL:
	case ENAMETOOLONG:
	case ELOOP:
		api_reply_err(op->c, ERR_INVALID, "'%s': %s", op->path, m);
		break;
	case EACCES:
	case EPERM:
	case EROFS:
		api_reply_err(op->c, ERR_REFUSED, "'%s': %s", op->path, m);
		break;
	case ECONNRESET:
		api_reply_err(op->c, ERR_UNAVAILABLE, "the sandbox stopped: %s", m);
		break;
	default:
		api_reply_err(op->c, ERR_INTERNAL, "'%s': %s", op->path, m);
	}
	return true;
}

/* After asking the agent: its answer is waited for, or it is said it could not be asked. */
static void
started(struct file_op *op)
{
	if (op->req)
		return;
	api_reply_err(op->c, ERR_UNAVAILABLE,
	              "the sandbox's agent cannot take this now; try again");
	finish(op);
}

static void
read_chunk(void *data, const void *bytes, size_t len)
{
	struct file_op *op = data;

	if (buf_append(&op->data, bytes, len) < 0)
		agent_cancel(op->req); /* a hostile guest sending more than asked */
}

static void
read_done(void *data, const struct agent_result *res)
{
	struct file_op *op = data;

	op->req = NULL;
	if (op->c && !reply_failure(op, res)) {
		if (res->size != op->data.len) {
			api_reply_err(op->c, ERR_INTERNAL, "'%s': the guest sent %zu of %llu bytes",
			              op->path, op->data.len, (unsigned long long)res->size);
		} else {
			conn_reply(op->c, 200, "application/octet-stream", op->data.data,
			           op->data.len, NULL);
			if (op->sb)
				(void)sandbox_event(op->d, op->sb, "file.read",
				                    json_pack("{s:s, s:I}", "path", op->path,
				                              "bytes", (json_int_t)op->data.len));
		}
	}
	finish(op);
}

static void
ask_read(struct file_op *op, struct agent *a)
{
	op->req = agent_read_file(a, op->path, API_FILE_MAX, read_chunk, read_done, op);
	started(op);
}

void
api_file_read(struct api_call *call)
{
	read_begin(call, ask_read);
}

static void
write_done(void *data, const struct agent_result *res)
{
	struct file_op *op = data;

	/* the guest's answer; before the body's end only a refusal (the rest is not read) */
	op->req = NULL;
	op->uploading = false;
	if (op->c && !reply_failure(op, res)) {
		conn_reply(op->c, 204, NULL, NULL, 0, NULL);
		if (op->sb)
			(void)sandbox_event(op->d, op->sb, "file.written",
			                    json_pack("{s:s, s:I}", "path", op->path, "bytes",
			                              (json_int_t)op->written));
	}
	finish(op);
}

/* The upload could not go on: the guest drops what it had, the client is told. */
static void
write_failed(struct file_op *op)
{
	agent_upload_abort(op->req);
	op->req = NULL;
	op->uploading = false;
	api_reply_err(op->c, ERR_UNAVAILABLE,
	              "the sandbox's agent cannot take this now; try again");
	finish(op);
}

static void
write_drained(void *data)
{
	struct file_op *op = data;

	conn_body_resume(op->c);
}

/* Sends bytes on; -1 when the upload failed (answered, op is gone). */
static int
write_bytes(struct file_op *op, const void *bytes, size_t len)
{
	int r = agent_upload_data(op->req, bytes, len);

	if (r < 0) {
		write_failed(op);
		return -1;
	}
	op->written += len;
	if (r > 0) {
		/* the guest is behind: read no more until it caught up */
		conn_body_pause(op->c);
		agent_upload_wait(op->req, write_drained);
	}
	return 0;
}

static void
write_data(struct conn *c _unused_, const void *bytes, size_t len, void *data)
{
	(void)write_bytes(data, bytes, len);
}

static void
write_end(struct conn *c _unused_, void *data)
{
	struct file_op *op = data;

	if (agent_upload_end(op->req, true) < 0) {
		write_failed(op);
		return;
	}
	op->uploading = false; /* the guest has it all: write_done answers */
}

void
api_file_write(struct api_call *call)
{
	const struct http_request *req = call->req;
	const char *ct = http_req_header(req, "content-type");
	struct file_op *op;
	struct agent *a;
	uint64_t size;

	if (ct && strncmp(ct, "application/octet-stream", 24) != 0) {
		api_reply_err(call->c, ERR_INVALID,
		              "a file body must be sent as Content-Type: application/octet-stream");
		return;
	}
	op = begin(call, false);
	if (!op || !(a = op_agent(op)))
		return;
	/* a chunked body tells its length only at its end: the guest is told the most it may
	 * be, and where it ended */
	size = !call->body_follows ? req->body.len
	       : req->chunked      ? API_FILE_MAX
	                           : req->content_length;
	op->req = agent_write_begin(a, op->path, 0644, size, call->body_follows && req->chunked,
	                            write_done, op);
	if (!op->req) {
		started(op); /* answers and lets go of op */
		return;
	}
	op->uploading = true;
	if (call->body_follows) {
		(void)conn_body_take(call->c, write_data, write_end, op);
		return;
	}
	/* no body to wait for (empty, or read whole) */
	if (req->body.len > 0 && write_bytes(op, req->body.data, req->body.len) < 0)
		return;
	write_end(call->c, op);
}

static void
remove_done(void *data, const struct agent_result *res)
{
	struct file_op *op = data;

	op->req = NULL;
	if (op->c && !reply_failure(op, res)) {
		conn_reply(op->c, 204, NULL, NULL, 0, NULL);
		/* the size of what went, as the guest saw it (a directory, or an agent from
		 * before it said: 0) */
		if (op->sb)
			(void)sandbox_event(op->d, op->sb, "file.removed",
			                    json_pack("{s:s, s:I}", "path", op->path, "bytes",
			                              (json_int_t)res->size));
	}
	finish(op);
}

void
api_file_remove(struct api_call *call)
{
	struct file_op *op = begin(call, false);
	struct agent *a;

	if (!op)
		return;
	/* "/" (or "//"): what the guest would answer (EBUSY), said plainly and at once */
	if (strspn(op->path, "/") == strlen(op->path)) {
		api_reply_err(call->c, ERR_CONFLICT,
		              "'%s' is the sandbox's root directory; it cannot be removed",
		              op->path);
		finish(op);
		return;
	}
	a = op_agent(op);
	if (!a)
		return;
	op->req = agent_remove(a, op->path, remove_done, op);
	started(op);
}

static void
list_entry_cb(void *data, const struct agent_dirent *e)
{
	struct file_op *op = data;
	static const struct {
		char t;
		const char *name;
	} types[] = { { 'f', "file" }, { 'd', "dir" }, { 'l', "link" }, { 'o', "other" } };
	const char *type = "other";
	json_t *j;

	if (json_array_size(op->entries) >= 100000)
		return;
	for (size_t i = 0; i < ARRAY_SIZE(types); i++)
		if (types[i].t == e->type)
			type = types[i].name;
	j = json_pack("{s:s, s:s, s:I}", "name", e->name, "type", type, "size",
	              (json_int_t)MIN(e->size, (uint64_t)INT64_MAX));
	if (j) /* a name that is not UTF-8 cannot be listed in JSON; it is skipped */
		json_array_append_new(op->entries, j);
}

static void
list_done(void *data, const struct agent_result *res)
{
	struct file_op *op = data;

	op->req = NULL;
	if (op->c && !reply_failure(op, res))
		api_reply_json(op->c, 200, json_pack("{s:O}", "entries", op->entries));
	finish(op);
}

static void
ask_list(struct file_op *op, struct agent *a)
{
	op->entries = json_array();
	op->req = op->entries ? agent_list(a, op->path, list_entry_cb, list_done, op) : NULL;
	started(op);
}

void
api_dir_list(struct api_call *call)
{
	read_begin(call, ask_list);
}
