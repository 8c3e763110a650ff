/* reconcile.c: the reconciler; see reconcile.h. It only looks and acts through what the
 * lifecycle, the backend and egress offer: the backend finds its own strays (by the marker
 * and the names it gives), egress its taps; nothing here guesses at what is whose. */
#include "egress.h"
#include "events.h"
#include "lifecycle.h"
#include "log.h"
#include "reconcile.h"
#include "sandboxd.h"
#include "store.h"
#include "util.h"

#define DEFAULT_BOOT_TIMEOUT_SECS 60 /* the backend's, when --boot-timeout is not given */

/* How each kind of stray is told in the log: before, its name, after. */
static const struct {
	const char *what, *before, *after;
} swept_lines[] = {
	{ "vmm", "ended stray VMM (pid ",
	  "): it carries this state directory's marker and no sandbox runs it" },
	{ "cgroup", "removed cgroup '", "' of a VMM that is gone" },
	{ "layer", "removed the layer of '", "': no sandbox owns it" },
	{ "tap", "removed tap '", "' that no VMM held" },
};

bool
reconcile_owns(void *ctx, const char *id)
{
	struct sandboxd *d = ctx;
	struct sandbox *sb = NULL;
	bool live;
	int r;

	if (registry_get(&d->reg, id))
		return true;
	/* a row the registry lacks (one this version could not read) keeps its layer; only a
	 * sandbox the store does not know, or knows as ended, owns nothing */
	r = sandbox_load(d->store, id, &sb);
	if (r == -ENOENT)
		return false;
	if (r < 0)
		return true;
	live = sb->state != SANDBOX_TERMINATED;
	sandbox_free(sb);
	return live;
}

void
reconcile_swept(void *ctx, const char *what, const char *name)
{
	struct sandboxd *d = ctx;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(swept_lines) && !streq(swept_lines[i].what, what); i++)
		;
	if (i < ARRAY_SIZE(swept_lines))
		log_info("reconciler: %s%s%s", swept_lines[i].before, name, swept_lines[i].after);
	else
		log_info("reconciler: removed %s '%s' that no sandbox owned", what, name);
	if (streq(what, "vmm"))
		d->reconcile.vmms++;
	/* the operator's and admins' streams: a stray belongs to no sandbox */
	events_broadcast_node(d, "reconciler.removed",
	                      json_pack("{s:s, s:s}", "what", what, "name", name));
}

static void
tap_swept(struct sandboxd *d, const char *tap)
{
	reconcile_swept(d, "tap", tap);
}

/* How long a start or a stop may take before it counts as one that never finished: twice what
 * the backend's own timeouts allow for a boot and a stop together (a stop taken back after a
 * restart waits for the agent first), so that they always act first. */
static uint64_t
stuck_after_ms(const struct sandboxd *d)
{
	const struct options *o = d->opts;
	uint64_t boot = o->boot_timeout_secs ? o->boot_timeout_secs : DEFAULT_BOOT_TIMEOUT_SECS;

	return 2 * (boot + o->stop_timeout_secs) * 1000;
}

/* Puts one sandbox right if it needs it. A sandbox loaded at startup is timed from then. */
static void
reconcile_sandbox(struct sandboxd *d, struct sandbox *sb, uint64_t now)
{
	struct backend *b = d->backend;
	char reason[256];

	if (sb->op == SANDBOX_OP_DESTROY || !b || !streq(b->ops->name, sb->backend))
		return;
	if (sb->state_since == 0) {
		sb->state_since = now;
		return;
	}
	switch (sb->state) {
	case SANDBOX_RUNNING: /* a suspended one has no VMM to check */
		if (sb->op != SANDBOX_OP_NONE || !b->ops->check || b->ops->check(b, sb) != -ESRCH)
			return;
		snprintf(reason, sizeof(reason),
		         "its VM is gone: its VMM ended without sandboxd seeing it (found by the "
		         "reconciler)");
		break;
	case SANDBOX_STARTING:
	case SANDBOX_STOPPING:
	case SANDBOX_SUSPENDING:
	case SANDBOX_RESUMING:
		if (now - sb->state_since < stuck_after_ms(d))
			return;
		snprintf(reason, sizeof(reason),
		         "it was %s for %llu s and never finished (found by the reconciler)",
		         sandbox_state_to_string(sb->state),
		         (unsigned long long)((now - sb->state_since) / 1000));
		break;
	default:
		return;
	}
	log_warning("reconciler: sandbox '%s': %s", sb->id, reason);
	lifecycle_abandon(d, sb, reason);
}

/* What the backend and egress find that no sandbox owns. */
static void
sweep(struct sandboxd *d)
{
	if (d->backend && d->backend->ops->sweep)
		d->backend->ops->sweep(d->backend);
	(void)egress_sweep_taps(d, tap_swept);
}

void
reconcile_run(struct sandboxd *d)
{
	uint64_t now = now_mono_ms();
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &d->reg.all)
		reconcile_sandbox(d, list_entry(n, struct sandbox, by_created), now);
	sweep(d);
}

static void
on_timer(struct loop_timer *t _unused_, void *data)
{
	reconcile_run(data);
}

int
reconcile_start(struct sandboxd *d)
{
	uint64_t period = (uint64_t)d->opts->reconcile_interval_secs * 1000;
	int r;

	/* the sandboxes were just looked at (lifecycle_recover); egress swept its taps */
	d->reconcile.vmms = 0;
	if (d->backend && d->backend->ops->sweep)
		d->backend->ops->sweep(d->backend);
	if (d->reconcile.vmms)
		log_info("after the restart: %u stray VMM(s) ended", d->reconcile.vmms);
	r = loop_timer_init(d->loop, &d->reconcile.timer, on_timer, d);
	if (r < 0)
		return r;
	return loop_timer_arm(&d->reconcile.timer, period, period);
}

void
reconcile_stop(struct sandboxd *d)
{
	if (d->reconcile.timer.src.loop)
		loop_timer_done(&d->reconcile.timer);
}
