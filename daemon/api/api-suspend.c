/* api-suspend.c: POST /v1/sandboxes/{ref}/suspend and …/resume, the idle action "suspend", and
 * wake on use: a request that needs the guest (processes, files, attach, tunnel) of a
 * suspended sandbox resumes it first and goes on once it runs, as a read of a stopped
 * sandbox's files starts it (api-files.c). */
#include "activity.h"
#include "api-internal.h"
#include "lifecycle.h"
#include "log.h"
#include "sandboxd.h"
#include "server.h"
#include "suspend.h"
#include "util.h"

int
api_check_idle_action(struct sandboxd *d, enum sandbox_idle_action a, struct err *err)
{
	if (a == SANDBOX_IDLE_SUSPEND && !suspend_offered(d))
		return err_set(err, -EINVAL, ERR_INVALID,
		               "'idle_action' \"suspend\" is not offered: this server cannot "
		               "suspend sandboxes (capability 'suspend'); use \"stop\" (the "
		               "default: its disk is kept) or \"terminate\"");
	return 0;
}

static void
suspend_or_resume(struct api_call *call, bool suspend)
{
	struct sandbox *sb;
	struct err err = {};
	int r;

	if (!suspend_offered(call->d)) {
		api_unsupported(call);
		return;
	}
	if (call->body && json_object_size(call->body) > 0) {
		api_reply_err(call->c, ERR_INVALID, "unknown field in the body");
		return;
	}
	sb = api_lookup_live(call);
	if (!sb) {
		api_reply_absent(call);
		return;
	}
	activity_request(sb);
	r = suspend ? lifecycle_suspend(call->d, sb, &err) : lifecycle_resume(call->d, sb, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	api_sandbox_wait(call, sb, suspend ? WAIT_SUSPEND : WAIT_RESUME);
}

void
api_sandbox_suspend(struct api_call *call)
{
	suspend_or_resume(call, true);
}

void
api_sandbox_resume(struct api_call *call)
{
	suspend_or_resume(call, false);
}

/* ---- wake on use ---- */

/* A request held until its sandbox runs again. It holds a copy of the call (the request and
 * the connection stay the server's: the connection waits for this answer). */
struct held {
	struct api_call call;
	api_handler_fn fn;
	struct sandbox *sb;         /* NULL once it left memory */
	struct sandbox_waiter seen; /* its state changes */
	bool resumed;               /* the resume was asked for: suspended again means it failed */
	bool deferred;              /* step() is to run after this batch of events */
	bool freed;                 /* let go of while deferred: step() frees it */
};

static bool
suspended_state(enum sandbox_state s)
{
	return s == SANDBOX_SUSPENDED || s == SANDBOX_SUSPENDING || s == SANDBOX_RESUMING;
}

static void
held_free(struct held *h)
{
	if (h->call.c)
		conn_on_close(h->call.c, NULL, NULL);
	sandbox_remove_waiter(&h->seen);
	json_decref(h->call.body);
	h->call.body = NULL;
	h->sb = NULL;
	if (h->deferred) {
		h->freed = true;
		return;
	}
	free(h);
}

static void
held_client_gone(struct conn *c _unused_, void *data)
{
	struct held *h = data;

	/* the resume goes on without it (the idle timeout suspends the sandbox again) */
	h->call.c = NULL;
	held_free(h);
}

/* Moves a held request on by its sandbox's state: waits while it suspends or resumes, asks
 * for the resume once it is suspended, and hands the request to its handler in any other
 * state (running: served; else the handler answers as for that state). */
static void
step(struct held *h)
{
	struct sandbox *sb = h->sb;
	struct api_call call;
	api_handler_fn fn;
	struct err err = {};
	int r;

	if (sb && (sb->state == SANDBOX_SUSPENDING || sb->state == SANDBOX_RESUMING))
		return;
	if (sb && sb->state == SANDBOX_SUSPENDED && sb->op == SANDBOX_OP_NONE) {
		if (h->resumed) {
			api_reply_err(h->call.c, ERR_UNAVAILABLE,
			              "sandbox '%s' could not be resumed: %s", sb->id,
			              sb->reason ? sb->reason : "its restore failed");
			held_free(h);
			return;
		}
		h->resumed = true;
		log_info("sandbox '%s': resuming it for a request that needs its guest", sb->id);
		r = lifecycle_resume(h->call.d, sb, &err);
		if (r < 0) {
			api_reply_failure(h->call.c, r, &err);
			held_free(h);
		}
		return;
	}
	/* the handler takes over the connection and the request */
	call = h->call;
	fn = h->fn;
	h->call.body = NULL; /* the call's now */
	conn_on_close(call.c, NULL, NULL);
	h->call.c = NULL;
	held_free(h);
	fn(&call);
	json_decref(call.body);
}

static void
step_deferred(void *data)
{
	struct held *h = data;

	h->deferred = false;
	if (h->freed) {
		free(h);
		return;
	}
	step(h);
}

/* Every state change: the next step after this batch of events, once every waiter was told
 * (a resume or a handler must not change the state its other waiters are being told of). */
static void
on_sandbox(struct sandbox_waiter *w, struct sandbox *sb _unused_, bool gone)
{
	struct held *h = w->data;

	if (gone) {
		sandbox_remove_waiter(w);
		h->sb = NULL;
	}
	if (h->deferred)
		return;
	h->deferred = true;
	if (loop_defer(h->call.d->loop, step_deferred, h) < 0) {
		h->deferred = false;
		api_reply_err(h->call.c, ERR_INTERNAL, "out of memory");
		held_free(h);
	}
}

bool
api_needs_resume(struct api_call *call)
{
	struct sandbox *sb = api_lookup_live(call);

	return sb && suspended_state(sb->state) && sb->op != SANDBOX_OP_DESTROY;
}

bool
api_resume_first(struct api_call *call, api_handler_fn fn)
{
	struct sandbox *sb = api_lookup_live(call);
	struct held *h;

	if (!sb || !suspended_state(sb->state) || sb->op == SANDBOX_OP_DESTROY)
		return false;
	h = calloc(1, sizeof(*h));
	if (!h) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return true;
	}
	h->call = *call;
	json_incref(h->call.body);
	h->fn = fn;
	h->sb = sb;
	h->seen = (struct sandbox_waiter){ .fn = on_sandbox, .data = h };
	list_init(&h->seen.link);
	sandbox_add_waiter(sb, &h->seen);
	conn_on_close(call->c, held_client_gone, h);
	activity_request(sb);
	step(h);
	return true;
}
