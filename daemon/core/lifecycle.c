/* lifecycle.c: see lifecycle.h.
 *
 * Restart mode vs provision mode: start after a stop boots the writable layer the
 * stop kept, so files survive and memory and processes do not; the first start provisions a
 * fresh layer. Which one runs is chosen here (SANDBOX_OP_RESTART vs SANDBOX_OP_START), and
 * the backend implements each. */
#include <net/if.h>
#include "events.h"
#include "lifecycle.h"
#include "activity.h"
#include "agent.h"
#include "egress.h"
#include "ended.h"
#include "images.h"
#include "log.h"
#include "netpolicy.h"
#include "proc.h"
#include "samples.h"
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

/* Whether the policy as it is now still permits sb's network. The policy file is read at
 * each start of sandboxd, so what a sandbox was granted at its create (or PATCH) may have been
 * narrowed since: a VM taken back after a restart, and each start of a stopped sandbox, get
 * only what the policy permits now. Otherwise *ret_why says what it no longer permits. */
static bool
network_permitted(struct sandboxd *d, const struct sandbox *sb, char **ret_why)
{
	struct err err = {};
	int r = netpolicy_permits(&d->policy, sb->network, &err);

	if (r >= 0)
		return true;
	*ret_why = strdup_printf("its network is no longer permitted by this server's policy: %s",
	                         err.message[0] ? err.message : strerror(-r));
	return false;
}

/* Takes a slot for sb's VM (see struct vm_launch), unless it holds one or the backend uses
 * none: the lowest that no sandbox holds, below the backend's count and, with egress, the
 * number of links in --egress-subnet. */
static int
slot_take(struct sandboxd *d, struct sandbox *sb)
{
	unsigned n = d->backend->slots;
	_cleanup_free_ bool *used = NULL;
	struct list_node *it;

	if (n == 0 || sb->has_slot)
		return 0;
	if (egress_enabled(d))
		n = MIN(n, egress_slots(d));
	used = calloc(n, sizeof(*used));
	if (!used)
		return -ENOMEM;
	LIST_FOREACH (it, &d->reg.all) {
		const struct sandbox *o = list_entry(it, struct sandbox, by_created);
		if (o->has_slot && o->slot < n)
			used[o->slot] = true;
	}
	for (unsigned i = 0; i < n; i++)
		if (!used[i]) {
			sb->has_slot = true;
			sb->slot = i;
			return 0;
		}
	return -EUSERS;
}

/* sb's VM is gone (or never came up): its policy leaves the worker and the table (its tap
 * went with its VMM), and its slot is free again. Idempotent. */
static void
vm_gone(struct sandboxd *d, struct sandbox *sb)
{
	egress_detach(d, sb);
	sb->has_slot = false;
}

/* What sb's VM is launched with, but for its network. */
static void
launch_fill(const struct sandbox *sb, const struct image *img, struct vm_launch *ret)
{
	*ret = (struct vm_launch){
		.id = sb->id,
		.hostname = sb->name ? sb->name : sb->id,
		.root_disk = img ? img->disk : NULL,
		.env = img ? img->env : NULL,
		.cpus = sb->cpus,
		.memory_mb = sb->memory_mb,
		.disk_mb = sb->disk_mb,
		.slot = sb->slot,
		.net = { .tap_fd = -1 },
	};
}

/* Boots sb's VM (a start or a restart) on its image's disk, in a slot, and with egress on the
 * link of that slot, whose tap is made here and handed over. */
static int
boot(struct sandboxd *d, struct backend *b, struct sandbox *sb, enum sandbox_op op)
{
	const struct image *img = NULL;
	_cleanup_close_ int tap = -1;
	struct egress_link link;
	struct vm_launch l;
	int r;

	if (b->ops->boots_images) {
		img = images_installed(d, sb->image);
		if (!img) {
			log_warning("sandbox '%s': image '%s' is not installed", sb->id, sb->image);
			return -ENOENT; /* it is installed first: only a removal can race this */
		}
	}
	r = slot_take(d, sb);
	if (r < 0)
		return r;
	launch_fill(sb, img, &l);
	if (egress_enabled(d) && sb->has_slot) {
		if ((r = egress_link_for_slot(d, sb->slot, &link)) < 0 ||
		    (r = egress_tap_open(&link, &tap)) < 0) {
			log_error("sandbox '%s': cannot create its network device: %s", sb->id,
			          strerror(-r));
			vm_gone(d, sb);
			return r;
		}
		l.has_net = true;
		l.net = (struct vm_net){ .tap_fd = tap,
			                 .guest_addr = link.guest_addr,
			                 .host_addr = link.host_addr };
	}
	r = op == SANDBOX_OP_START ? b->ops->start(b, sb, &l) : b->ops->restart(b, sb, &l);
	if (r < 0) {
		vm_gone(d, sb);
		return r;
	}
	/* the worker knows its policy before the guest can send anything */
	if (l.has_net)
		egress_attach(d, sb, &link);
	return 0;
}

/* Moves sb to via (with reason, or none) and begins op through the backend. */
static int
begin(struct sandboxd *d, struct sandbox *sb, enum sandbox_op op, enum sandbox_state via,
      const char *reason)
{
	struct backend *b = backend_for(d, sb);
	int r;

	r = sandbox_set_state(d, sb, via, reason);
	if (r < 0)
		return r;
	if (op == SANDBOX_OP_STOP)
		proc_clear(sb); /* a stop ends every process (restart mode keeps only files) */
	sb->op = op;
	switch (op) {
	case SANDBOX_OP_START:
	case SANDBOX_OP_RESTART:
		r = boot(d, b, sb, op);
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
			(void)begin(iw->d, sb, SANDBOX_OP_START, SANDBOX_STARTING, NULL);
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
	struct err err = {};
	int r;

	if (!d->backend->ops->boots_images || images_installed(d, sb->image)) {
		(void)begin(d, sb, SANDBOX_OP_START, SANDBOX_STARTING, NULL);
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
			(void)begin(d, sb, SANDBOX_OP_START, SANDBOX_STARTING, NULL);
		else
			fail(d, sb, "%s", err.message);
		return;
	}
	log_info("sandbox '%s': waits for image '%s'", sb->id, sb->image);
}

int
lifecycle_create(struct sandboxd *d, struct sandbox *sb, struct err *err)
{
	json_t *data;
	int r;

	if (!d->backend)
		return err_set(
		        err, -EOPNOTSUPP, ERR_UNSUPPORTED,
		        "this sandboxd has no VM backend built in, so it cannot run sandboxes");
	if (sb->name && registry_find_name(&d->reg, sb->name, sb->owner))
		return err_set(err, -EEXIST, ERR_CONFLICT, "the name '%s' is already in use",
		               sb->name);
	free(sb->backend);
	sb->backend = strdup(d->backend->ops->name);
	if (!sb->backend)
		return -ENOMEM;
	sb->state = SANDBOX_PENDING;
	sb->created_at = sb->last_active = sb->last_attended = now_unix_ms();
	data = json_pack("{s:s?, s:s, s:i, s:i, s:I, s:O, s:O}", "name", sb->name, "image",
	                 sb->image, "cpus", (int)sb->cpus, "memory_mb", (int)sb->memory_mb,
	                 "disk_mb", (json_int_t)sb->disk_mb, "network", sb->network, "labels",
	                 sb->labels);
	if (data) {
		json_t *names = json_array();
		for (size_t i = 0; names && i < sb->nenv; i++)
			json_array_append_new(names, json_string(sb->env[i].name));
		json_object_set_new(data, "env_names", names ? names : json_array());
	}
	r = data ? sandbox_commit(d, sb, true, "created", data) : -ENOMEM;
	if (r == -EEXIST)
		return err_set(err, r, ERR_CONFLICT, "the name '%s' is already in use", sb->name);
	if (r < 0)
		return err_set(err, r, ERR_INTERNAL, "could not record the sandbox: %s",
		               strerror(-r));
	r = registry_add(&d->reg, sb);
	if (r < 0) {
		/* the row exists; fail it so it is not taken for a live one later */
		(void)sandbox_set_state(d, sb, SANDBOX_FAILED, "sandboxd ran out of memory");
		return err_set(err, r, ERR_INTERNAL, "out of memory");
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

/* A start the policy refuses (network_permitted): said in the log and in the sandbox's
 * events as well as to the client, since it is the operator's policy that changed under an
 * existing sandbox, not a request that asked for too much. */
static int
start_refused(struct sandboxd *d, struct sandbox *sb, const char *why, struct err *err)
{
	log_warning("sandbox '%s': start refused: %s", sb->id, why);
	(void)sandbox_commit(d, sb, false, "start_refused", json_pack("{s:s}", "reason", why));
	return err_set(err, -EPERM, ERR_REFUSED, "sandbox '%s' cannot start: %s", sb->id, why);
}

static int
move(struct sandboxd *d, struct sandbox *sb, const struct move *m, struct err *err)
{
	_cleanup_free_ char *why = NULL;

	activity_request(sb);
	if (m->done & STATE_BIT(sb->state))
		return 0; /* already there, or on its way */
	if (!(m->from & STATE_BIT(sb->state)))
		return err_set(err, -EBUSY, ERR_CONFLICT, "sandbox '%s' is %s; %s", sb->id,
		               sandbox_state_to_string(sb->state), m->refusal);
	if (!backend_for(d, sb))
		return err_set(err, -ENODEV, ERR_UNAVAILABLE,
		               "the backend '%s' of sandbox '%s' is not available", sb->backend,
		               sb->id);
	if (m->op == SANDBOX_OP_RESTART && !network_permitted(d, sb, &why))
		return why ? start_refused(d, sb, why, err) : -ENOMEM;
	return begin(d, sb, m->op, m->via, NULL);
}

int
lifecycle_stop(struct sandboxd *d, struct sandbox *sb, struct err *err)
{
	return move(d, sb, &move_stop, err);
}

int
lifecycle_start(struct sandboxd *d, struct sandbox *sb, struct err *err)
{
	return move(d, sb, &move_start, err);
}

/* The reason a terminated sandbox shows, for each thing that ends one. */
static const char *const end_reasons[_SANDBOX_END_MAX] = {
	[SANDBOX_END_REQUEST] = "deleted",
	[SANDBOX_END_IDLE] = "it was idle past its idle timeout",
	[SANDBOX_END_LIFETIME] = "its lifetime ended",
	[SANDBOX_END_POLICY] = "its network is no longer permitted by the policy",
	[SANDBOX_END_CLIENT] = "its client went away",
};

/* sb ended for sb->end. */
static void
terminated(struct sandboxd *d, struct sandbox *sb)
{
	sb->op = SANDBOX_OP_NONE;
	proc_clear(sb);
	if (sandbox_set_state(d, sb, SANDBOX_TERMINATED,
	                      sb->end_why ? sb->end_why : end_reasons[sb->end]) == 0) {
		ended_add(d, sb->id); /* listed until --forget-after */
		registry_drop(d, sb);
	}
}

int
lifecycle_delete(struct sandboxd *d, struct sandbox *sb, enum sandbox_end why, struct err *err)
{
	struct backend *b = backend_for(d, sb);
	int r;

	if (sb->state == SANDBOX_TERMINATED || sb->op == SANDBOX_OP_DESTROY)
		return 0;
	/* recorded when the destroy completes */
	sb->end = why >= 0 && why < _SANDBOX_END_MAX ? why : SANDBOX_END_REQUEST;
	if (!b) {
		/* nothing this sandboxd could have started is left to end */
		terminated(d, sb);
		return 0;
	}
	proc_clear(sb);
	sb->op = SANDBOX_OP_DESTROY;
	r = b->ops->destroy(b, sb);
	if (r < 0) {
		sb->op = SANDBOX_OP_NONE;
		log_error("sandbox '%s': destroy failed: %s", sb->id, strerror(-r));
		return err_set(err, r, ERR_INTERNAL, "could not end sandbox '%s': %s", sb->id,
		               strerror(-r));
	}
	return 0;
}

/* A stop completed; one its idle timeout made says so while it stays stopped. */
static void
stopped(struct sandboxd *d, struct sandbox *sb)
{
	_cleanup_free_ char *why = NULL;

	if (sb->stopping_idle)
		why = strdup_printf(
		        "stopped after %llu s idle, its idle timeout; its disk is kept: "
		        "start it to carry on",
		        (unsigned long long)sb->idle_timeout_secs);
	(void)sandbox_set_state(d, sb, SANDBOX_STOPPED, why);
}

/* The backend's done event: the operation under way (sb->op) finished. error is 0 or
 * -errno; reason says what went wrong, for the sandbox's record. */
static void
on_backend_done(void *ctx, struct sandbox *sb, int error, const char *reason)
{
	struct sandboxd *d = ctx;
	enum sandbox_op op = sb->op;

	sb->op = SANDBOX_OP_NONE;
	switch (op) {
	case SANDBOX_OP_START:
	case SANDBOX_OP_RESTART:
		if (error < 0) {
			vm_gone(d, sb);
			fail(d, sb, "%s", reason ? reason : strerror(-error));
		} else if (sandbox_set_state(d, sb, SANDBOX_RUNNING, NULL) == 0) {
			/* a fresh boot has its first sample at once */
			samples_take(d, sb, true);
		}
		break;
	case SANDBOX_OP_STOP:
		vm_gone(d, sb);
		if (error < 0)
			fail(d, sb, "stopping failed: %s", reason ? reason : strerror(-error));
		else
			stopped(d, sb);
		sb->stopping_idle = false;
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
			vm_gone(d, sb);
			terminated(d, sb);
		}
		break;
	case SANDBOX_OP_NONE:
		log_error("sandbox '%s': the backend completed an operation that was not under way",
		          sb->id);
		break;
	}
}

/* The backend's lost event: sb's VM ended on its own. The backend frees the VM's agent only
 * after this returns. */
static void
on_backend_lost(void *ctx, struct sandbox *sb, const char *reason)
{
	struct sandboxd *d = ctx;

	vm_gone(d, sb);
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

/* The backend's agent_ready event: the agent of a running sandbox (re)connected. The first
 * time after sandboxd started, the processes the guest kept are listed and followed again. */
static void
on_agent_ready(void *ctx, struct sandbox *sb)
{
	struct sandboxd *d = ctx;
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

/* Takes back a VM found running after a restart of sandboxd, but only on the network it was
 * started with: turning egress on or off between runs ends the sandboxes started the other
 * way, and one whose tap is gone, or whose link is not in --egress-subnet any more, is not
 * taken back either. Those are ended (nothing is left running that no policy governs) and
 * their sandbox fails. */
static int
take_back(struct sandboxd *d, struct backend *b, struct sandbox *sb, const struct backend_found *f)
{
	bool net = egress_enabled(d);
	struct egress_link link;
	struct vm_launch l;

	if (!b->ops->adopt)
		return 0;
	if (f->net != net) {
		log_warning("sandbox '%s': started with egress %s, now it is %s: not taken back",
		            sb->id, f->net ? "on" : "off", f->net ? "off" : "on");
		b->ops->abandon(b, sb);
		return -EPROTO;
	}
	if (net) {
		if (!f->has_slot || egress_link_for_slot(d, f->slot, &link) < 0 ||
		    if_nametoindex(link.tap) == 0) {
			log_warning("sandbox '%s': its network device is gone: not taken back",
			            sb->id);
			b->ops->abandon(b, sb);
			return -ENODEV;
		}
		/* booted on another --egress-subnet: its guest would send from an address the
		 * table and the worker no longer know */
		if (link.guest_addr != f->guest_addr) {
			log_warning(
			        "sandbox '%s': its link is not in --egress-subnet any more: not "
			        "taken back",
			        sb->id);
			b->ops->abandon(b, sb);
			return -EADDRNOTAVAIL;
		}
		egress_attach(d, sb, &link);
	}
	launch_fill(sb, images_installed(d, sb->image), &l);
	return b->ops->adopt(b, sb, &l);
}

struct recover_counts {
	struct sandboxd *d;
	unsigned taken_back, failed, kept, ended;
};

/* A sandbox whose VM runs is taken back only while the policy permits its network
 * (network_permitted): one it no longer permits is ended, disk and all, with the reason, and
 * counted. Returns whether it was. */
static bool
ended_by_policy(struct sandboxd *d, struct sandbox *sb, struct recover_counts *c)
{
	_cleanup_free_ char *why = NULL;
	struct err err = {};

	if (network_permitted(d, sb, &why))
		return false;
	log_warning("sandbox '%s': not taken back: %s; ending it", sb->id,
	            why ? why : "its network is no longer permitted");
	free(sb->end_why);
	sb->end_why = TAKE_PTR(why);
	if (lifecycle_delete(d, sb, SANDBOX_END_POLICY, &err) < 0)
		fail(d, sb, "%s", err.message);
	c->ended++;
	return true;
}

/* Takes a running VM back (take_back); a failure fails the sandbox and is counted. */
static bool
took_back(struct sandboxd *d, struct backend *b, struct sandbox *sb,
          const struct backend_found *found, struct recover_counts *c)
{
	int r = take_back(d, b, sb, found);

	if (r < 0) {
		fail(d, sb, "its VM could not be taken back: %s", strerror(-r));
		c->failed++;
		return false;
	}
	return true;
}

/* Decides what one stored sandbox becomes now that sandboxd runs again. */
static void
recover_one(struct sandboxd *d, struct sandbox *sb, struct recover_counts *c)
{
	struct backend *b = backend_for(d, sb);
	struct backend_found found;
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
	r = b->ops->status(b, sb, &found);
	if (r < 0) {
		fail(d, sb, "its VM could not be checked after a restart: %s", strerror(-r));
		c->failed++;
		return;
	}
	st = found.status;
	/* a VMM runs in that slot, whatever becomes of its sandbox */
	if (st == BACKEND_RUNNING && found.has_slot) {
		sb->has_slot = true;
		sb->slot = found.slot;
	}
	if (st == BACKEND_RUNNING && sb->state != SANDBOX_STOPPED && ended_by_policy(d, sb, c))
		return;
	switch (sb->state) {
	case SANDBOX_PENDING:
	case SANDBOX_STARTING:
		if (st == BACKEND_RUNNING) {
			/* its VM came up (or is coming up) meanwhile: supervise it again */
			if (!took_back(d, b, sb, &found, c))
				return;
			if (sb->state == SANDBOX_PENDING)
				(void)sandbox_set_state(d, sb, SANDBOX_STARTING, NULL);
			(void)sandbox_set_state(d, sb, SANDBOX_RUNNING, NULL);
			samples_take(d, sb, false);
			c->taken_back++;
		} else {
			fail(d, sb, "sandboxd restarted before it finished starting");
			c->failed++;
		}
		return;
	case SANDBOX_RUNNING:
	case SANDBOX_SUSPENDED:
		if (st == BACKEND_RUNNING) {
			if (!took_back(d, b, sb, &found, c))
				return;
			samples_take(d, sb, false);
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
			 * guest still syncs its disk (on_agent_ready) */
			r = take_back(d, b, sb, &found);
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
	if (d->reg.count > 0) {
		char ended[64] = "";
		if (c.ended)
			snprintf(ended, sizeof(ended), ", %u ended (network no longer permitted)",
			         c.ended);
		log_info("after the restart: %u sandbox(es) taken back, %u kept stopped or failed, "
		         "%u failed now%s",
		         c.taken_back, c.kept, c.failed, ended);
	}
	return 0;
}

/* sb was idle for its idle timeout: it stops, its disk kept, unless its idle_action says to
 * end it. */
static void
idle_out(struct sandboxd *d, struct sandbox *sb)
{
	_cleanup_free_ char *why = NULL;
	struct err err = {};

	if (sb->idle_action == SANDBOX_IDLE_TERMINATE) {
		log_info("sandbox '%s': idle for %llu s, its idle timeout; ending it, as its "
		         "idle_action says",
		         sb->id, (unsigned long long)sb->idle_timeout_secs);
		(void)lifecycle_delete(d, sb, SANDBOX_END_IDLE, &err);
		return;
	}
	why = strdup_printf("idle for %llu s, its idle timeout: stopping, its disk kept",
	                    (unsigned long long)sb->idle_timeout_secs);
	log_info("sandbox '%s': idle for %llu s, its idle timeout; stopping it, its disk kept",
	         sb->id, (unsigned long long)sb->idle_timeout_secs);
	sb->stopping_idle = true;
	if (begin(d, sb, SANDBOX_OP_STOP, SANDBOX_STOPPING, why) < 0)
		sb->stopping_idle = false;
}

/* sb was bound to its client, which is gone: it ends as the client's own delete would have
 * ended it. */
static void
client_gone(struct sandboxd *d, struct sandbox *sb, unsigned grace)
{
	struct err err = {};

	log_info("sandbox '%s': bound to its client, which went away (no request or stream for "
	         "%u s); ending it",
	         sb->id, grace);
	free(sb->end_why);
	sb->end_why = strdup_printf("its client went away: it was bound to it, and nothing asked "
	                            "for it or held a stream of it for %u s",
	                            grace);
	(void)lifecycle_delete(d, sb, SANDBOX_END_CLIENT, &err);
}

void
lifecycle_housekeeping(struct sandboxd *d, int64_t now_ms)
{
	unsigned grace = d->opts->client_grace_secs;
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		int64_t exp = sandbox_expires_at(sb);
		bool idles = sb->idle_timeout_secs && sb->state == SANDBOX_RUNNING &&
		             sb->op == SANDBOX_OP_NONE;
		bool watched;

		if (sb->op == SANDBOX_OP_DESTROY || sb->state == SANDBOX_TERMINATED)
			continue;
		if (exp && now_ms >= exp) {
			struct err err = {};
			(void)lifecycle_delete(d, sb, SANDBOX_END_LIFETIME, &err);
			continue;
		}
		if (!idles && !sb->bound_to_client)
			continue;
		watched = activity_watched(d, sb, now_ms);
		if (sb->bound_to_client && !watched && activity_client_gone(sb, now_ms, grace))
			client_gone(d, sb, grace);
		else if (idles && !watched && activity_idle(d, sb, now_ms))
			idle_out(d, sb);
	}
}

void
lifecycle_backend_config(struct sandboxd *d, struct backend_config *ret)
{
	static const struct backend_events events = {
		.done = on_backend_done,
		.agent_ready = on_agent_ready,
		.lost = on_backend_lost,
	};
	const struct options *o = d->opts;

	*ret = (struct backend_config){
		.loop = d->loop,
		.events = &events,
		.ctx = d,
		.state_dir = o->state_dir,
		.accel = o->accel,
		.kernel = o->kernel,
		.initrd = o->initrd,
		.agent = o->agent,
		.boot_timeout_secs = o->boot_timeout_secs,
		.stop_timeout_secs = o->stop_timeout_secs,
		.egress = o->egress && geteuid() == 0,
		.allow_unconfined = o->allow_unconfined,
	};
}

int
lifecycle_backend_started(struct sandboxd *d)
{
	struct backend *b = d->backend;
	int r;

	if (b->builtin_disk && (r = images_add_builtin(d, "busybox", b->builtin_disk)) < 0)
		return r;
	/* the worker runs as the backend's spare uid, which none of its VMMs gets */
	if (b->cfg.egress && b->spare_uid && (r = egress_start(d, b->spare_uid)) < 0)
		return r;
	return 0;
}
