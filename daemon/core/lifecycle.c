/* lifecycle.c: see lifecycle.h.
 *
 * Restart mode vs provision mode (seed 000): start after a stop boots the writable layer the
 * stop kept, so files survive and memory and processes do not; the first start provisions a
 * fresh layer. Which one runs is chosen here (SANDBOX_OP_RESTART vs SANDBOX_OP_START), and
 * the backend implements each. */
#include "events.h"
#include "lifecycle.h"
#include "agent.h"
#include "images.h"
#include "log.h"
#include "proc.h"
#include "sandboxd.h"
#include "store.h"
#include "util.h"

/* The backend that runs sb, or NULL when this sandboxd cannot drive it. */
static struct backend *
backend_for(struct sandboxd *d, const struct sandbox *sb)
{
	if (!d->backend || !streq(d->backend->ops->name, sb->backend))
		return NULL;
	return d->backend;
}

static void fail(struct sandboxd *d, struct sandbox *sb, const char *fmt, ...) _printf_(3, 4);

static void
fail(struct sandboxd *d, struct sandbox *sb, const char *fmt, ...)
{
	char reason[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	sb->op = SANDBOX_OP_NONE;
	proc_clear(sb); /* its processes are gone with its VM */
	if (sb->state != SANDBOX_FAILED && sb->state != SANDBOX_TERMINATED)
		(void)sandbox_set_state(d, sb, SANDBOX_FAILED, reason);
}

static int
begin(struct sandboxd *d, struct sandbox *sb, enum sandbox_op op, enum sandbox_state via)
{
	struct backend *b = backend_for(d, sb);
	int r;

	r = sandbox_set_state(d, sb, via, NULL);
	if (r < 0)
		return r;
	if (op == SANDBOX_OP_STOP)
		proc_clear(sb); /* a stop ends every process (restart mode keeps only files) */
	sb->op = op;
	switch (op) {
	case SANDBOX_OP_START:
		r = b->ops->start(b, sb);
		break;
	case SANDBOX_OP_RESTART:
		r = b->ops->restart(b, sb);
		break;
	case SANDBOX_OP_STOP:
		r = b->ops->stop(b, sb);
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0)
		fail(d, sb, "the backend could not begin: %s", strerror(-r));
	return 0;
}

/* A sandbox whose image is being installed: it stays pending, then boots or fails. Held by
 * id, since the sandbox may be deleted meanwhile. */
struct image_wait {
	struct image_waiter w;
	struct sandboxd *d;
	char id[SANDBOX_ID_MAX + 1];
};

static void
image_ready(struct image_waiter *w, const struct image *img, int error, const char *why)
{
	struct image_wait *iw = w->data;
	struct sandbox *sb = error == -ECANCELED ? NULL : registry_get(&iw->d->reg, iw->id);

	if (sb && sb->state == SANDBOX_PENDING && sb->op == SANDBOX_OP_NONE) {
		if (img)
			(void)begin(iw->d, sb, SANDBOX_OP_START, SANDBOX_STARTING);
		else
			fail(iw->d, sb, "%s", why ? why : strerror(-error));
	}
	free(iw);
}

/* Boots sb now, or once its image is installed. */
static void
start_when_image_ready(struct sandboxd *d, struct sandbox *sb)
{
	struct image_wait *iw;
	struct api_err err;
	int r;

	if (!d->backend->ops->boots_images || images_installed(d, sb->image)) {
		(void)begin(d, sb, SANDBOX_OP_START, SANDBOX_STARTING);
		return;
	}
	iw = calloc(1, sizeof(*iw));
	if (!iw) {
		fail(d, sb, "sandboxd ran out of memory");
		return;
	}
	list_init(&iw->w.link);
	iw->w.fn = image_ready;
	iw->w.data = iw;
	iw->d = d;
	snprintf(iw->id, sizeof(iw->id), "%s", sb->id);
	r = images_install(d, sb->image, &iw->w, &err);
	if (r != 0) {
		free(iw);
		if (r > 0)
			(void)begin(d, sb, SANDBOX_OP_START, SANDBOX_STARTING);
		else
			fail(d, sb, "%s", err.message);
		return;
	}
	log_info("sandbox '%s': waits for image '%s'", sb->id, sb->image);
}

int
lifecycle_create(struct sandboxd *d, struct sandbox *sb, struct api_err *err)
{
	json_t *data;
	int r;

	if (!d->backend) {
		api_err_set(err, 501, "unsupported",
		            "this sandboxd has no VM backend built in, so it cannot run sandboxes");
		return -EOPNOTSUPP;
	}
	if (sb->name && registry_find_name(&d->reg, sb->name, sb->owner)) {
		api_err_set(err, 409, "conflict", "the name '%s' is already in use", sb->name);
		return -EEXIST;
	}
	free(sb->backend);
	sb->backend = strdup(d->backend->ops->name);
	if (!sb->backend)
		return -ENOMEM;
	sb->state = SANDBOX_PENDING;
	sb->created_at = sb->last_active = now_unix_ms();
	data = json_pack("{s:s, s:i, s:i, s:I, s:O, s:O}", "image", sb->image, "cpus",
	                 (int)sb->cpus, "memory_mb", (int)sb->memory_mb, "disk_mb",
	                 (json_int_t)sb->disk_mb, "network", sb->network, "labels", sb->labels);
	if (data) {
		json_t *names = json_array();
		for (size_t i = 0; names && i < sb->nenv; i++)
			json_array_append_new(names, json_string(sb->env[i].name));
		json_object_set_new(data, "env_names", names ? names : json_array());
	}
	r = data ? sandbox_commit(d, sb, true, "created", data) : -ENOMEM;
	if (r == -EEXIST) {
		api_err_set(err, 409, "conflict", "the name '%s' is already in use", sb->name);
		return r;
	}
	if (r < 0) {
		api_err_set(err, 500, "internal", "could not record the sandbox: %s", strerror(-r));
		return r;
	}
	r = registry_add(&d->reg, sb);
	if (r < 0) {
		/* the row exists; fail it so it is not taken for a live one later */
		(void)sandbox_set_state(d, sb, SANDBOX_FAILED, "sandboxd ran out of memory");
		api_err_set(err, 500, "internal", "out of memory");
		return r;
	}
	log_info("sandbox '%s': created for '%s' (image '%s', %u cpus, %u MiB)", sb->id, sb->owner,
	         sb->image, sb->cpus, sb->memory_mb);
	start_when_image_ready(d, sb);
	return 0;
}

/* stop and start: where each may begin, where it is already done or on its way, and how it
 * goes through the backend. */
struct move {
	enum sandbox_op op;
	enum sandbox_state via;
	unsigned from; /* states it may begin from */
	unsigned done; /* states where there is nothing to do */
	const char *refusal;
};

#define STATE_BIT(s) (1u << (s))

static const struct move move_stop = {
	.op = SANDBOX_OP_STOP,
	.via = SANDBOX_STOPPING,
	.from = STATE_BIT(SANDBOX_RUNNING) | STATE_BIT(SANDBOX_SUSPENDED),
	.done = STATE_BIT(SANDBOX_STOPPED) | STATE_BIT(SANDBOX_STOPPING),
	.refusal = "only a running sandbox stops",
};

static const struct move move_start = {
	.op = SANDBOX_OP_RESTART, /* restart mode: the layer the stop kept boots again */
	.via = SANDBOX_STARTING,
	.from = STATE_BIT(SANDBOX_STOPPED),
	.done = STATE_BIT(SANDBOX_RUNNING) | STATE_BIT(SANDBOX_STARTING),
	.refusal = "only a stopped sandbox starts",
};

static int
move(struct sandboxd *d, struct sandbox *sb, const struct move *m, struct api_err *err)
{
	lifecycle_touch(sb);
	if (m->done & STATE_BIT(sb->state))
		return 0; /* already there, or on its way */
	if (!(m->from & STATE_BIT(sb->state))) {
		api_err_set(err, 409, "conflict", "sandbox '%s' is %s; %s", sb->id,
		            sandbox_state_to_string(sb->state), m->refusal);
		return -EBUSY;
	}
	if (!backend_for(d, sb)) {
		api_err_set(err, 503, "unavailable",
		            "the backend '%s' of sandbox '%s' is not available", sb->backend,
		            sb->id);
		return -ENODEV;
	}
	return begin(d, sb, m->op, m->via);
}

int
lifecycle_stop(struct sandboxd *d, struct sandbox *sb, struct api_err *err)
{
	return move(d, sb, &move_stop, err);
}

int
lifecycle_start(struct sandboxd *d, struct sandbox *sb, struct api_err *err)
{
	return move(d, sb, &move_start, err);
}

static void
terminated(struct sandboxd *d, struct sandbox *sb, const char *why)
{
	sb->op = SANDBOX_OP_NONE;
	proc_clear(sb);
	if (sandbox_set_state(d, sb, SANDBOX_TERMINATED, why) == 0)
		registry_drop(d, sb);
}

int
lifecycle_delete(struct sandboxd *d, struct sandbox *sb, const char *why, struct api_err *err)
{
	struct backend *b = backend_for(d, sb);
	char *reason;
	int r;

	if (sb->state == SANDBOX_TERMINATED || sb->op == SANDBOX_OP_DESTROY)
		return 0;
	if (!b) {
		/* nothing this sandboxd could have started is left to end */
		terminated(d, sb, why);
		return 0;
	}
	reason = strdup(why);
	if (!reason) {
		api_err_set(err, 500, "internal", "out of memory");
		return -ENOMEM;
	}
	proc_clear(sb);
	/* the reason is recorded when the destroy completes */
	free(sb->pending_reason);
	sb->pending_reason = reason;
	sb->op = SANDBOX_OP_DESTROY;
	r = b->ops->destroy(b, sb);
	if (r < 0) {
		sb->op = SANDBOX_OP_NONE;
		log_error("sandbox '%s': destroy failed: %s", sb->id, strerror(-r));
		api_err_set(err, 500, "internal", "could not end sandbox '%s': %s", sb->id,
		            strerror(-r));
		return r;
	}
	return 0;
}

void
lifecycle_backend_done(struct sandboxd *d, struct sandbox *sb, int error, const char *reason)
{
	enum sandbox_op op = sb->op;

	sb->op = SANDBOX_OP_NONE;
	switch (op) {
	case SANDBOX_OP_START:
	case SANDBOX_OP_RESTART:
		if (error < 0)
			fail(d, sb, "%s", reason ? reason : strerror(-error));
		else
			(void)sandbox_set_state(d, sb, SANDBOX_RUNNING, NULL);
		break;
	case SANDBOX_OP_STOP:
		if (error < 0)
			fail(d, sb, "stopping failed: %s", reason ? reason : strerror(-error));
		else
			(void)sandbox_set_state(d, sb, SANDBOX_STOPPED, NULL);
		break;
	case SANDBOX_OP_DESTROY:
		if (error < 0 && sb->state == SANDBOX_FAILED) {
			/* already failed: record why the removal failed too, and tell the waiters
			 */
			char *why = strdup_printf("could not be removed: %s",
			                          reason ? reason : strerror(-error));
			if (why) {
				free(sb->reason);
				sb->reason = why;
			}
			(void)sandbox_commit(d, sb, false, "destroy_failed",
			                     json_pack("{s:s?}", "reason", sb->reason));
			sandbox_notify_waiters(sb);
		} else if (error < 0) {
			fail(d, sb, "could not be removed: %s", reason ? reason : strerror(-error));
		} else {
			_cleanup_free_ char *why = TAKE_PTR(sb->pending_reason);
			terminated(d, sb, why ? why : "deleted");
		}
		break;
	case SANDBOX_OP_NONE:
		log_error("sandbox '%s': the backend completed an operation that was not under way",
		          sb->id);
		break;
	}
}

void
lifecycle_backend_lost(struct sandboxd *d, struct sandbox *sb, const char *reason)
{
	if (sb->op == SANDBOX_OP_DESTROY)
		return; /* it is being ended anyway */
	fail(d, sb, "%s", reason);
}

struct adopt_ps {
	struct sandboxd *d;
	char id[SANDBOX_ID_MAX + 1];
};

static void
adopt_proc(void *data, const struct agent_proc_info *info)
{
	struct adopt_ps *a = data;
	struct sandbox *sb = registry_get(&a->d->reg, a->id);
	struct backend *b = a->d->backend;
	char *argv[2] = { (char *)info->argv0, NULL };
	struct proc *p;

	if (!sb || sb->state != SANDBOX_RUNNING || proc_find(sb, info->pid))
		return;
	if (proc_new(a->d, sb, b->ops->agent(b, sb), info->pid, argv, info->tty, info->keep,
	             (int64_t)info->started_ms, &p) < 0)
		log_warning("sandbox '%s': cannot follow process %u again", sb->id, info->pid);
}

static void
adopt_done(void *data, const struct agent_result *res)
{
	struct adopt_ps *a = data;

	if (res->err)
		log_warning("sandbox '%s': listing its processes failed: %s", a->id,
		            res->message ? res->message : strerror(res->err));
	free(a);
}

void
lifecycle_agent_ready(struct sandboxd *d, struct sandbox *sb)
{
	struct backend *b = backend_for(d, sb);
	struct agent *agent = b && b->ops->agent ? b->ops->agent(b, sb) : NULL;
	struct adopt_ps *a;

	/* a stop that a restart of sandboxd interrupted goes on now */
	if (sb->state == SANDBOX_STOPPING && sb->op == SANDBOX_OP_NONE && b) {
		int r;
		sb->op = SANDBOX_OP_STOP;
		r = b->ops->stop(b, sb);
		if (r < 0)
			fail(d, sb, "stopping failed after a restart: %s", strerror(-r));
		return;
	}
	/* processes started since this sandboxd runs are known already; the guest's own list
	 * matters after a restart of sandboxd (kept processes run on) */
	if (!agent || !list_empty(&sb->procs) || sb->procs_listed)
		return;
	sb->procs_listed = true;
	a = calloc(1, sizeof(*a));
	if (!a)
		return;
	a->d = d;
	snprintf(a->id, sizeof(a->id), "%s", sb->id);
	if (!agent_ps(agent, adopt_proc, adopt_done, a))
		free(a);
}

void
lifecycle_touch(struct sandbox *sb)
{
	sb->last_active = now_unix_ms();
}

struct recover_counts {
	struct sandboxd *d;
	unsigned taken_back, failed, kept;
};

/* Decides what one stored sandbox becomes now that sandboxd runs again. */
static void
recover_one(struct sandboxd *d, struct sandbox *sb, struct recover_counts *c)
{
	struct backend *b = backend_for(d, sb);
	enum backend_status st;
	int r;

	if (sb->state == SANDBOX_FAILED) {
		c->kept++;
		return;
	}
	if (!b) {
		fail(d, sb, "its backend '%s' is not available in this sandboxd", sb->backend);
		c->failed++;
		return;
	}
	r = b->ops->status(b, sb, &st);
	if (r < 0) {
		fail(d, sb, "its VM could not be checked after a restart: %s", strerror(-r));
		c->failed++;
		return;
	}
	switch (sb->state) {
	case SANDBOX_PENDING:
	case SANDBOX_STARTING:
		if (st == BACKEND_RUNNING) {
			/* its VM came up (or is coming up) meanwhile: supervise it again */
			r = b->ops->adopt ? b->ops->adopt(b, sb) : 0;
			if (r < 0) {
				fail(d, sb, "its VM could not be taken back: %s", strerror(-r));
				c->failed++;
				return;
			}
			if (sb->state == SANDBOX_PENDING)
				(void)sandbox_set_state(d, sb, SANDBOX_STARTING, NULL);
			(void)sandbox_set_state(d, sb, SANDBOX_RUNNING, NULL);
			c->taken_back++;
		} else {
			fail(d, sb, "sandboxd restarted before it finished starting");
			c->failed++;
		}
		return;
	case SANDBOX_RUNNING:
	case SANDBOX_SUSPENDED:
		if (st == BACKEND_RUNNING) {
			r = b->ops->adopt ? b->ops->adopt(b, sb) : 0;
			if (r < 0) {
				fail(d, sb, "its VM could not be taken back: %s", strerror(-r));
				c->failed++;
				return;
			}
			c->taken_back++;
		} else {
			fail(d, sb, "its VM ended while sandboxd was not running");
			c->failed++;
		}
		return;
	case SANDBOX_STOPPING:
		if (st == BACKEND_STOPPED) {
			(void)sandbox_set_state(d, sb, SANDBOX_STOPPED, NULL);
			c->kept++;
		} else if (st == BACKEND_RUNNING) {
			/* supervise it again; the stop goes on once its agent answers, so the
			 * guest still syncs its disk (lifecycle_agent_ready) */
			r = b->ops->adopt ? b->ops->adopt(b, sb) : 0;
			if (r < 0)
				fail(d, sb, "stopping failed after a restart: %s", strerror(-r));
			c->taken_back++;
		} else {
			fail(d, sb, "its disk was gone after sandboxd restarted");
			c->failed++;
		}
		return;
	case SANDBOX_STOPPED:
		if (st == BACKEND_STOPPED) {
			c->kept++;
		} else {
			fail(d, sb,
			     st == BACKEND_GONE ? "its disk was gone after sandboxd restarted"
			                        : "a VM was running for it while it was stopped");
			c->failed++;
		}
		return;
	default:
		return;
	}
}

static int
recover_add(struct sandbox *sb, void *data)
{
	struct recover_counts *c = data;
	int r = registry_add(&c->d->reg, sb);

	if (r < 0)
		sandbox_free(sb);
	return r;
}

int
lifecycle_recover(struct sandboxd *d)
{
	struct recover_counts c = { .d = d };
	struct list_node *n, *tmp;
	int r;

	r = sandbox_load_live(d->store, recover_add, &c);
	if (r < 0)
		return r;
	LIST_FOREACH_SAFE (n, tmp, &d->reg.all)
		recover_one(d, list_entry(n, struct sandbox, by_created), &c);
	if (d->backend && d->backend->ops->recovered)
		d->backend->ops->recovered(d->backend);
	if (d->reg.count > 0)
		log_info("after the restart: %u sandbox(es) taken back, %u kept stopped or failed, "
		         "%u failed now",
		         c.taken_back, c.kept, c.failed);
	return 0;
}

void
lifecycle_housekeeping(struct sandboxd *d, int64_t now_ms)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		int64_t exp = sandbox_expires_at(sb);
		struct api_err err;

		if (sb->op == SANDBOX_OP_DESTROY || sb->state == SANDBOX_TERMINATED)
			continue;
		if (exp && now_ms >= exp)
			(void)lifecycle_delete(d, sb, "its lifetime ended", &err);
		else if (sb->idle_timeout_secs && sb->state == SANDBOX_RUNNING &&
		         now_ms - sb->last_active >= (int64_t)sb->idle_timeout_secs * 1000)
			(void)lifecycle_delete(d, sb, "it was idle past its idle timeout", &err);
	}
}
