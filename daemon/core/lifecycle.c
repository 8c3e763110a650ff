/* lifecycle.c: see lifecycle.h.
 *
 * Restart mode vs provision mode: start after a stop boots the writable layer the
 * stop kept, so files survive and memory and processes do not; the first start provisions a
 * fresh layer. Which one runs is chosen here (SANDBOX_OP_RESTART vs SANDBOX_OP_START), and
 * the backend implements each. A failed sandbox starts in restart mode too, when its layer
 * outlived what failed (a VMM that died keeps it; a first boot that failed leaves none). */
#include <net/if.h>
#include "events.h"
#include "lifecycle.h"
#include "activity.h"
#include "agent.h"
#include "agents.h"
#include "egress.h"
#include "ended.h"
#include "images.h"
#include "log.h"
#include "netpolicy.h"
#include "proc.h"
#include "reconcile.h"
#include "records.h"
#include "samples.h"
#include "sandboxd.h"
#include "snapshots.h"
#include "store.h"
#include "suspend.h"
#include "util.h"
#include "volumes.h"

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
	snapshots_abort(d, sb, reason); /* a snapshot being written never completes */
	sb->op = SANDBOX_OP_NONE;
	sb->woken_for_files = false;
	sb->stopping = SANDBOX_STOP_REQUEST; /* a stop sandboxd began is over too */
	agents_vm_gone(d, sb);
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
	/* an agent's own hosts are on its list whatever may_allow says */
	json_t *own =
	        sb->agent_run ? agent_own_hosts(sb->agent_run->kind, sb->agent_run->repo) : NULL;
	struct err err = {};
	int r;

	if (sb->agent_run && !own)
		return false; /* *ret_why NULL: out of memory */
	r = netpolicy_permits_also(&d->policy, own, sb->network, &err);
	json_decref(own);
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

void
lifecycle_vm_gone(struct sandboxd *d, struct sandbox *sb)
{
	vm_gone(d, sb);
}

void
lifecycle_fail(struct sandboxd *d, struct sandbox *sb, const char *reason)
{
	fail(d, sb, "%s", reason);
}

struct backend *
lifecycle_backend(struct sandboxd *d, const struct sandbox *sb)
{
	return backend_for(d, sb);
}

bool
lifecycle_network_permitted(struct sandboxd *d, const struct sandbox *sb, char **ret_why)
{
	return network_permitted(d, sb, ret_why);
}

int
lifecycle_slot_take(struct sandboxd *d, struct sandbox *sb)
{
	return slot_take(d, sb);
}

/* op could not begin (or its launch failed) with error: a resume is decided as one that could
 * not restore is (suspend.c: suspended again while the backend still holds its saved state,
 * which a launch never touched), anything else fails sb. */
static void
begin_failed(struct sandboxd *d, struct sandbox *sb, enum sandbox_op op, int error,
             const char *what)
{
	char why[256];

	if (op == SANDBOX_OP_RESUME) {
		snprintf(why, sizeof(why), "%s: %s", what, strerror(-error));
		sb->op = SANDBOX_OP_NONE;
		suspend_backend_done(d, sb, op, error, why);
		return;
	}
	fail(d, sb, "%s: %s", what, strerror(-error));
}

/* What sb's VM is launched with, but for its network. Its machine id lives until the next
 * launch_fill (a launch is borrowed for the one call it is handed to). */
static void
launch_fill(const struct sandbox *sb, const struct image *img, struct vm_launch *ret)
{
	static char machine_id[SANDBOX_MACHINE_ID_LEN + 1];

	sandbox_machine_id(sb->id, machine_id);
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
		.machine_id = machine_id,
	};
}

/* Starts sb's VM through the backend, on the tap (owned from now on; -1: no network) of link.
 * The image is looked up again: a boot that waited for the table may find it removed. */
static int
boot_launch(struct sandboxd *d, struct backend *b, struct sandbox *sb, enum sandbox_op op, int tap,
            const struct egress_link *link)
{
	_cleanup_close_ int net = tap;
	_cleanup_free_ char *snapshot = NULL;
	const struct image *img = NULL;
	struct volumes_launch vols;
	struct vm_launch l;
	int r;

	if (b->ops->boots_images && !(img = images_installed(d, sb->image))) {
		log_warning("sandbox '%s': image '%s' is not installed", sb->id, sb->image);
		vm_gone(d, sb);
		return -ENOENT;
	}
	launch_fill(sb, img, &l);
	if (net >= 0) {
		l.has_net = true;
		l.net = (struct vm_net){ .tap_fd = net,
			                 .guest_addr = link->guest_addr,
			                 .host_addr = link->host_addr };
	}
	/* a fork's first boot begins from its snapshot */
	if (op == SANDBOX_OP_START && sb->snapshot_id) {
		snapshot = snapshot_dir(d, sb->snapshot_id);
		if (!snapshot) {
			vm_gone(d, sb);
			return -ENOMEM;
		}
		l.snapshot_dir = snapshot;
	}
	r = volumes_launch_fill(d, sb, &vols, &l);
	/* a resume is launched as a restart is (slot, tap, egress), its VMM restoring: with the
	 * same drives, which its saved devices expect */
	if (r >= 0 && op == SANDBOX_OP_START)
		r = b->ops->start(b, sb, &l);
	else if (r >= 0 && op == SANDBOX_OP_RESUME)
		r = b->ops->resume(b, sb, &l);
	else if (r >= 0)
		r = b->ops->restart(b, sb, &l);
	volumes_launch_done(&vols);
	if (r < 0)
		vm_gone(d, sb);
	return r;
}

/* A boot whose tap is made and whose link waits for the table (egress_attach): held by id,
 * since the sandbox may be deleted meanwhile. */
struct boot_wait {
	struct sandboxd *d;
	char id[SANDBOX_ID_MAX + 1];
	enum sandbox_op op;
	int tap;
	struct egress_link link;
};

/* The table has the link (the VM starts now), or nft failed (the sandbox fails before any VM
 * runs: R-E12, nothing is left half-made), or the wait was cancelled (a delete, or sandboxd
 * stopping: the tap goes). */
static void
boot_net_ready(void *data, int error, const char *why)
{
	struct boot_wait *bw = data;
	struct sandbox *sb = error == -ECANCELED ? NULL : registry_get(&bw->d->reg, bw->id);
	struct backend *b = sb ? backend_for(bw->d, sb) : NULL;
	int r;

	if (sb && b && (sb->state == SANDBOX_STARTING || sb->state == SANDBOX_RESUMING) &&
	    sb->op == bw->op) {
		if (error < 0) {
			log_error("sandbox '%s': not started: its network rules could not be "
			          "installed (%s)",
			          sb->id, why ? why : strerror(-error));
			vm_gone(bw->d, sb);
			fail(bw->d, sb,
			     "its network could not be set up on this host (%s); nothing was "
			     "started",
			     why ? why : strerror(-error));
		} else {
			r = boot_launch(bw->d, b, sb, bw->op, TAKE_FD(bw->tap), &bw->link);
			if (r < 0)
				begin_failed(bw->d, sb, bw->op, r, "the backend could not begin");
		}
	}
	safe_close(bw->tap);
	free(bw);
}

/* Boots sb's VM (a start or a restart) on its image's disk, in a slot, and with egress on the
 * link of that slot, whose tap is made here and handed over. With egress the worker knows its
 * policy, and the table redirects its link, before the VM starts: the boot goes on once nft
 * has written the table (boot_net_ready). */
static int
boot(struct sandboxd *d, struct backend *b, struct sandbox *sb, enum sandbox_op op)
{
	_cleanup_close_ int tap = -1;
	struct egress_link link;
	struct boot_wait *bw;
	int r;

	if (b->ops->boots_images && !images_installed(d, sb->image)) {
		log_warning("sandbox '%s': image '%s' is not installed", sb->id, sb->image);
		return -ENOENT; /* it is installed first: only a removal can race this */
	}
	r = slot_take(d, sb);
	if (r < 0)
		return r;
	if (!egress_enabled(d) || !sb->has_slot)
		return boot_launch(d, b, sb, op, -1, NULL);
	if ((r = egress_link_for_slot(d, sb->slot, &link)) < 0 ||
	    (r = egress_tap_open(&link, &tap)) < 0) {
		log_error("sandbox '%s': cannot create its network device: %s", sb->id,
		          strerror(-r));
		vm_gone(d, sb);
		return r;
	}
	bw = calloc(1, sizeof(*bw));
	if (!bw) {
		vm_gone(d, sb);
		return -ENOMEM;
	}
	*bw = (struct boot_wait){ .d = d, .op = op, .tap = TAKE_FD(tap), .link = link };
	snprintf(bw->id, sizeof(bw->id), "%s", sb->id);
	r = egress_attach(d, sb, &link, boot_net_ready, bw);
	if (r > 0)
		return 0; /* boot_net_ready has bw now */
	tap = TAKE_FD(bw->tap);
	free(bw);
	if (r < 0) {
		vm_gone(d, sb);
		return r;
	}
	return boot_launch(d, b, sb, op, TAKE_FD(tap), &link);
}

/* Moves sb to via (with reason, or none) and begins op through the backend. */
int
lifecycle_begin(struct sandboxd *d, struct sandbox *sb, enum sandbox_op op, enum sandbox_state via,
                const char *reason)
{
	struct backend *b = backend_for(d, sb);
	int r;

	r = sandbox_set_state(d, sb, via, reason);
	if (r < 0)
		return r;
	if (op == SANDBOX_OP_STOP) {
		agents_vm_gone(d, sb);
		proc_clear(sb); /* a stop ends every process (restart mode keeps only files) */
	}
	sb->op = op;
	switch (op) {
	case SANDBOX_OP_START:
	case SANDBOX_OP_RESTART:
	case SANDBOX_OP_RESUME:
		r = boot(d, b, sb, op);
		break;
	case SANDBOX_OP_STOP:
		r = b->ops->stop(b, sb);
		break;
	case SANDBOX_OP_SUSPEND:
		r = suspend_begin(d, b, sb);
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0)
		begin_failed(d, sb, op, r, "the backend could not begin");
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
			(void)lifecycle_begin(iw->d, sb, SANDBOX_OP_START, SANDBOX_STARTING, NULL);
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
		(void)lifecycle_begin(d, sb, SANDBOX_OP_START, SANDBOX_STARTING, NULL);
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
			(void)lifecycle_begin(d, sb, SANDBOX_OP_START, SANDBOX_STARTING, NULL);
		else
			fail(d, sb, "%s", err.message);
		return;
	}
	log_info("sandbox '%s': waits for image '%s'", sb->id, sb->image);
}

json_t *
lifecycle_created_data(const struct sandbox *sb)
{
	json_t *data, *names;

	data = json_pack("{s:s?, s:s, s:i, s:i, s:I, s:O, s:O, s:s?, s:O}", "name", sb->name,
	                 "image", sb->image, "cpus", (int)sb->cpus, "memory_mb", (int)sb->memory_mb,
	                 "disk_mb", (json_int_t)sb->disk_mb, "network", sb->network, "labels",
	                 sb->labels, "snapshot", sb->snapshot_id, "volumes", sb->volumes);
	if (!data)
		return NULL;
	names = json_array();
	for (size_t i = 0; names && i < sb->nenv; i++)
		json_array_append_new(names, json_string(sb->env[i].name));
	json_object_set_new(data, "env_names", names ? names : json_array());
	return data;
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
	if (d->shutting_down)
		return err_set(err, -ESHUTDOWN, ERR_UNAVAILABLE,
		               "sandboxd is shutting down, ending its sandboxes");
	if (sb->name && registry_find_name(&d->reg, sb->name, sb->owner))
		return err_set(err, -EEXIST, ERR_CONFLICT, "the name '%s' is already in use",
		               sb->name);
	/* checked here, where it joins the registry: no other create slips in between */
	r = volumes_check_attach(d, sb, err);
	if (r < 0)
		return r;
	free(sb->backend);
	sb->backend = strdup(d->backend->ops->name);
	if (!sb->backend)
		return -ENOMEM;
	sb->state = SANDBOX_PENDING;
	sb->created_at = sb->last_active = sb->last_attended = now_unix_ms();
	data = lifecycle_created_data(sb);
	/* with --keep-sandboxes, its record is on disk before anyone is told it exists: a
	 * restart never finds it without its environment values (a pooled one has none, and a
	 * restart discards it: its claim writes the record) */
	r = sb->pooled ? 0 : records_save(d, sb);
	if (r < 0) {
		json_decref(data);
		log_error("sandbox '%s': cannot write its record for --keep-sandboxes: %s", sb->id,
		          strerror(-r));
		return err_set(err, r, ERR_INTERNAL,
		               "could not keep the sandbox's record for --keep-sandboxes: %s",
		               strerror(-r));
	}
	r = data ? sandbox_commit(d, sb, true, "created", data) : -ENOMEM;
	if (r < 0)
		records_remove(d, sb->id);
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
	if (sb->pooled)
		log_info("sandbox '%s': created for the pool of '%s' (%u cpus, %u MiB)", sb->id,
		         sb->image, sb->cpus, sb->memory_mb);
	else
		log_info("sandbox '%s': created for '%s' (image '%s', %u cpus, %u MiB)", sb->id,
		         sb->owner, sb->image, sb->cpus, sb->memory_mb);
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
	const char *reason; /* of the move to via; NULL: none */
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
	.op = SANDBOX_OP_RESTART, /* restart mode: the layer the stop (or the crash) kept */
	.via = SANDBOX_STARTING,
	.from = STATE_BIT(SANDBOX_STOPPED) | STATE_BIT(SANDBOX_FAILED),
	.done = STATE_BIT(SANDBOX_RUNNING) | STATE_BIT(SANDBOX_STARTING),
	.refusal = "only a stopped or failed sandbox starts",
};

/* A start to read its files: the same, saying why. */
static const struct move move_wake = {
	.op = SANDBOX_OP_RESTART,
	.via = SANDBOX_STARTING,
	.from = STATE_BIT(SANDBOX_STOPPED) | STATE_BIT(SANDBOX_FAILED),
	.done = STATE_BIT(SANDBOX_RUNNING) | STATE_BIT(SANDBOX_STARTING),
	.refusal = "only a stopped or failed sandbox starts",
	.reason = "started to read its files",
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

/* A failed sandbox starts again only from its layer: the backend says what is left of it. A
 * VM that still runs for it (one sandboxd does not supervise: it was found running while its
 * sandbox was stopped) is ended first, so that no two VMs share the layer. */
static int
failed_startable(struct sandboxd *d, struct backend *b, struct sandbox *sb, struct err *err)
{
	struct backend_found found;
	int r = b->ops->status(b, sb, &found);

	if (r < 0)
		return err_set(err, r, ERR_INTERNAL,
		               "sandbox '%s': what is left of its VM cannot be checked: %s", sb->id,
		               strerror(-r));
	if (found.status == BACKEND_GONE)
		return err_set(err, -ENOENT, ERR_CONFLICT,
		               "sandbox '%s' is failed and its disk is gone (it failed before its "
		               "first boot completed, or its disk was removed): it cannot start "
		               "again, only be deleted",
		               sb->id);
	if (found.status == BACKEND_RUNNING) {
		log_warning("sandbox '%s': ending the VM that still ran for it before it starts",
		            sb->id);
		if (b->ops->abandon)
			b->ops->abandon(b, sb);
		vm_gone(d, sb);
	}
	return 0;
}

static int
move(struct sandboxd *d, struct sandbox *sb, const struct move *m, struct err *err)
{
	_cleanup_free_ char *why = NULL;
	struct backend *b = backend_for(d, sb);
	int r;

	activity_request(sb);
	if (sb->op == SANDBOX_OP_DESTROY)
		return err_set(err, -EBUSY, ERR_CONFLICT, "sandbox '%s' is being deleted", sb->id);
	if (sb->op == SANDBOX_OP_SNAPSHOT)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s': a snapshot of it is being written; try again once it "
		               "is done",
		               sb->id);
	if (m->done & STATE_BIT(sb->state))
		return 0; /* already there, or on its way */
	if (!(m->from & STATE_BIT(sb->state)))
		return err_set(err, -EBUSY, ERR_CONFLICT, "sandbox '%s' is %s; %s", sb->id,
		               sandbox_state_to_string(sb->state), m->refusal);
	if (!b)
		return err_set(err, -ENODEV, ERR_UNAVAILABLE,
		               "the backend '%s' of sandbox '%s' is not available", sb->backend,
		               sb->id);
	if (m->op == SANDBOX_OP_RESTART && !network_permitted(d, sb, &why))
		return why ? start_refused(d, sb, why, err) : -ENOMEM;
	if (sb->state == SANDBOX_FAILED && (r = failed_startable(d, b, sb, err)) < 0)
		return r;
	return lifecycle_begin(d, sb, m->op, m->via, m->reason);
}

int
lifecycle_stop(struct sandboxd *d, struct sandbox *sb, struct err *err)
{
	return move(d, sb, &move_stop, err);
}

int
lifecycle_start(struct sandboxd *d, struct sandbox *sb, struct err *err)
{
	/* started by its user: it stays up, whoever woke it to read its files */
	sb->woken_for_files = false;
	return move(d, sb, &move_start, err);
}

int
lifecycle_wake(struct sandboxd *d, struct sandbox *sb, struct err *err)
{
	int r;

	if (sb->state != SANDBOX_STOPPED && sb->state != SANDBOX_FAILED)
		return move(d, sb, &move_start, err); /* up, or on its way: nothing to mark */
	r = move(d, sb, &move_wake, err);
	if (r >= 0 && sb->state == SANDBOX_STARTING) {
		log_info("sandbox '%s': starting it to read its files; it stops again after %u s "
		         "without other activity",
		         sb->id, d->opts->read_grace_secs);
		sb->woken_for_files = true;
	}
	return r;
}

/* The reason a terminated sandbox shows, for each thing that ends one. */
static const char *const end_reasons[_SANDBOX_END_MAX] = {
	[SANDBOX_END_REQUEST] = "deleted",
	[SANDBOX_END_IDLE] = "it was idle past its idle timeout",
	[SANDBOX_END_LIFETIME] = "its lifetime ended",
	[SANDBOX_END_POLICY] = "its network is no longer permitted by the policy",
	[SANDBOX_END_SHUTDOWN] = "sandboxd stopped, without --keep-sandboxes",
	[SANDBOX_END_RECORD] = "its record could not be read after a restart of sandboxd",
	[SANDBOX_END_CLIENT] = "its client went away",
};

/* While sandboxd shuts down without --keep-sandboxes: once no sandbox is still being ended,
 * the loop quits. */
static void
shutdown_progress(struct sandboxd *d)
{
	struct list_node *n;

	if (!d->shutting_down)
		return;
	LIST_FOREACH (n, &d->reg.all)
		if (list_entry(n, struct sandbox, by_created)->op == SANDBOX_OP_DESTROY)
			return;
	loop_quit(d->loop, 0);
}

/* sb ended for sb->end. */
static void
terminated(struct sandboxd *d, struct sandbox *sb)
{
	sb->op = SANDBOX_OP_NONE;
	agents_vm_gone(d, sb);
	proc_clear(sb);
	/* its environment values leave the disk with it, before the state change tells anyone
	 * (a DELETE is answered from there); should that change fail, the next start of
	 * sandboxd ends a sandbox it has no record of */
	records_remove(d, sb->id);
	if (sandbox_set_state(d, sb, SANDBOX_TERMINATED,
	                      sb->end_why ? sb->end_why : end_reasons[sb->end]) == 0) {
		if (!sb->pooled)              /* a pooled one was never anyone's to list */
			ended_add(d, sb->id); /* listed until --forget-after */
		registry_drop(d, sb);
	}
	shutdown_progress(d);
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
	agents_vm_gone(d, sb);
	proc_clear(sb);
	snapshots_abort(d, sb, "its sandbox is being deleted");
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

/* A stop completed; one sandboxd made on its own says why while it stays stopped. */
static void
stopped(struct sandboxd *d, struct sandbox *sb)
{
	_cleanup_free_ char *why = NULL;

	if (sb->stopping == SANDBOX_STOP_IDLE)
		why = strdup_printf(
		        "stopped after %llu s idle, its idle timeout; its disk is kept: "
		        "start it to carry on",
		        (unsigned long long)sb->idle_timeout_secs);
	else if (sb->stopping == SANDBOX_STOP_READ)
		why = strdup_printf("started to read its files; stopped again after %u s without "
		                    "other activity",
		                    d->opts->read_grace_secs);
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
		sb->woken_for_files = false;
		if (error < 0)
			fail(d, sb, "stopping failed: %s", reason ? reason : strerror(-error));
		else
			stopped(d, sb);
		sb->stopping = SANDBOX_STOP_REQUEST;
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
		shutdown_progress(d);
		break;

	case SANDBOX_OP_SUSPEND:
	case SANDBOX_OP_RESUME:
		suspend_backend_done(d, sb, op, error, reason);
		break;

	case SANDBOX_OP_SNAPSHOT:
		snapshots_written(d, sb, error, reason);
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
	char *argv0[2] = { (char *)info->argv0, NULL };
	char *const *argv = argv0;
	struct proc *p;

	if (!sb || sb->state != SANDBOX_RUNNING || proc_find(sb, info->pid))
		return;
	/* the guest lists the program alone; the record has the whole command line */
	for (size_t i = 0; i < sb->nkept; i++)
		if (sb->kept[i].pid == info->pid && info->argv0 &&
		    streq(sb->kept[i].argv[0], info->argv0))
			argv = sb->kept[i].argv;
	if (proc_new(a->d, sb, b->ops->agent(b, sb), info->pid, argv, info->tty, info->keep,
	             (int64_t)info->started_ms, &p) < 0)
		log_warning("sandbox '%s': cannot follow process %u again", sb->id, info->pid);
}

static void
adopt_done(void *data, const struct agent_result *res)
{
	struct adopt_ps *a = data;
	struct sandbox *sb = registry_get(&a->d->reg, a->id);

	if (res->err)
		log_warning("sandbox '%s': listing its processes failed: %s", a->id,
		            res->message ? res->message : strerror(res->err));
	else if (sb) {
		sandbox_kept_clear(sb); /* what the record named is followed now, or gone */
		agents_procs_listed(a->d, sb);
	}
	free(a);
}

void
lifecycle_abandon(struct sandboxd *d, struct sandbox *sb, const char *reason)
{
	struct backend *b = backend_for(d, sb);

	if (sb->state == SANDBOX_FAILED || sb->state == SANDBOX_TERMINATED ||
	    sb->op == SANDBOX_OP_DESTROY)
		return;
	if (b && b->ops->abandon)
		b->ops->abandon(b, sb);
	vm_gone(d, sb);
	fail(d, sb, "%s", reason);
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
	/* after a resume, the hubs follow their processes through this agent again */
	if (agent && sb->state == SANDBOX_RUNNING)
		proc_attach_all(sb, agent);
	/* processes started since this sandboxd runs are known already; the guest's own list
	 * matters after a restart of sandboxd (kept processes run on) */
	if (agent && list_empty(&sb->procs) && !sb->procs_listed) {
		sb->procs_listed = true;
		a = calloc(1, sizeof(*a));
		if (a) {
			a->d = d;
			snprintf(a->id, sizeof(a->id), "%s", sb->id);
			if (!agent_ps(agent, adopt_proc, adopt_done, a))
				free(a);
		}
	}
	/* the agent its create asked for starts once the sandbox first runs (after the list
	 * asked for above, which the guest answers first: it never shows the agent's process) */
	if (agent && sb->state == SANDBOX_RUNNING)
		agents_ready(d, sb, agent);
}

static int take_back(struct sandboxd *d, struct backend *b, struct sandbox *sb,
                     const struct backend_found *f);

int
lifecycle_take_back(struct sandboxd *d, struct backend *b, struct sandbox *sb,
                    const struct backend_found *f)
{
	return take_back(d, b, sb, f);
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
	struct volumes_launch vols;
	struct egress_link link;
	struct vm_launch l;
	int r;

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
		/* running already: its link goes into the table as soon as nft runs */
		(void)egress_attach(d, sb, &link, NULL, NULL);
	}
	launch_fill(sb, images_installed(d, sb->image), &l);
	if (net) {
		/* its addresses for the guest's handshake; the VM has its tap */
		l.has_net = true;
		l.net = (struct vm_net){ .tap_fd = -1,
			                 .guest_addr = link.guest_addr,
			                 .host_addr = link.host_addr };
	}
	r = volumes_launch_fill(d, sb, &vols, &l);
	if (r >= 0)
		r = b->ops->adopt(b, sb, &l);
	volumes_launch_done(&vols);
	return r;
}

struct recover_counts {
	struct sandboxd *d;
	unsigned taken_back, failed, kept, ended;
	unsigned unrecorded; /* ended: no usable record (--keep-sandboxes) */
	unsigned left_over;  /* ended: sandboxd runs without --keep-sandboxes */
};

/* Ends a sandbox found at a start that is not to be taken back, for end with the reason why
 * (taken). The backend looks first, so that it knows the VM it is to end. */
static void
end_found(struct sandboxd *d, struct sandbox *sb, enum sandbox_end end, char *why)
{
	struct backend *b = backend_for(d, sb);
	struct backend_found found;
	struct err err = {};

	free(sb->end_why);
	sb->end_why = why;
	if (b && b->ops->status(b, sb, &found) == 0 && found.status == BACKEND_RUNNING &&
	    found.has_slot) {
		/* its VMM holds that slot until it is gone */
		sb->has_slot = true;
		sb->slot = found.slot;
	}
	if (lifecycle_delete(d, sb, end, &err) < 0)
		fail(d, sb, "%s", err.message);
}

/* With --keep-sandboxes: gives sb its environment values (and its kept processes' command
 * lines) from its record. A sandbox whose values cannot be had is never taken back without
 * them: it is ended, with the reason, and counted. One that has no environment needs no
 * record. Returns whether it may be taken back. */
static bool
restored(struct sandboxd *d, struct sandbox *sb, struct recover_counts *c)
{
	_cleanup_free_ char *why = NULL;
	struct record rec = { 0 };
	char *reason;
	int r;

	r = records_load(d, sb->id, &rec, &why);
	if (r == -ENOENT && sb->nenv == 0)
		return true;
	if (r >= 0)
		r = record_apply(&rec, sb, &why);
	record_done(&rec);
	if (r >= 0)
		return true;
	if (r == -ENOENT)
		reason = strdup_printf("it has no record (records/%s.json) after a restart of "
		                       "sandboxd, so its environment values are lost",
		                       sb->id);
	else
		reason = strdup_printf("its record (records/%s.json) could not be read after a "
		                       "restart of sandboxd (%s), so its environment values are "
		                       "lost",
		                       sb->id, why ? why : strerror(-r));
	log_warning("sandbox '%s': not taken back: %s; ending it", sb->id,
	            reason ? reason : "its record could not be read");
	end_found(d, sb, SANDBOX_END_RECORD, reason);
	c->unrecorded++;
	return false;
}

/* Without --keep-sandboxes: a sandbox an earlier sandboxd left (it crashed, was killed, or
 * ran with the flag) is ended, never taken back with its environment values missing. */
static void
end_left_over(struct sandboxd *d, struct sandbox *sb, struct recover_counts *c)
{
	log_warning("sandbox '%s' (%s) was left by an earlier sandboxd; ending it: this one runs "
	            "without --keep-sandboxes",
	            sb->id, sandbox_state_to_string(sb->state));
	end_found(d, sb, SANDBOX_END_SHUTDOWN,
	          strdup("left by an earlier sandboxd; this one runs without --keep-sandboxes, "
	                 "so it takes no sandbox back (environment values are kept across "
	                 "restarts only with the flag)"));
	c->left_over++;
}

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
	if (st == BACKEND_RUNNING && sb->state != SANDBOX_STOPPED &&
	    sb->state != SANDBOX_SUSPENDED && ended_by_policy(d, sb, c))
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
	case SANDBOX_SUSPENDED:
	case SANDBOX_SUSPENDING:
	case SANDBOX_RESUMING:
		if (suspend_recover(d, b, sb, &found) < 0)
			c->failed++;
		else if (sb->state == SANDBOX_RUNNING)
			c->taken_back++;
		else
			c->kept++;
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
	LIST_FOREACH_SAFE (n, tmp, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (!d->opts->keep_sandboxes)
			end_left_over(d, sb, &c);
		else if (restored(d, sb, &c))
			recover_one(d, sb, &c);
	}
	if (c.left_over) {
		log_info("after the restart: %u sandbox(es) an earlier sandboxd left ended: this "
		         "one runs without --keep-sandboxes",
		         c.left_over);
	} else if (d->reg.count > 0) {
		char ended[64] = "", unrecorded[64] = "";
		if (c.ended)
			snprintf(ended, sizeof(ended), ", %u ended (network no longer permitted)",
			         c.ended);
		if (c.unrecorded)
			snprintf(unrecorded, sizeof(unrecorded), ", %u ended (no usable record)",
			         c.unrecorded);
		log_info("after the restart: %u sandbox(es) taken back, %u kept stopped or failed, "
		         "%u failed now%s%s",
		         c.taken_back, c.kept, c.failed, ended, unrecorded);
	}
	r = (int)records_sweep(d);
	if (r > 0)
		log_info("records: deleted %d that no sandbox has", r);
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
	if (sb->idle_action == SANDBOX_IDLE_SUSPEND && suspend_idle(d, sb))
		return;
	why = strdup_printf("idle for %llu s, its idle timeout: stopping, its disk kept",
	                    (unsigned long long)sb->idle_timeout_secs);
	log_info("sandbox '%s': idle for %llu s, its idle timeout; stopping it, its disk kept",
	         sb->id, (unsigned long long)sb->idle_timeout_secs);
	sb->stopping = SANDBOX_STOP_IDLE;
	if (lifecycle_begin(d, sb, SANDBOX_OP_STOP, SANDBOX_STOPPING, why) < 0)
		sb->stopping = SANDBOX_STOP_REQUEST;
}

/* sb was started only to read its files (lifecycle_wake), and nothing else used it for
 * --read-grace: it goes back to stopped, its disk kept as before. */
static void
read_quiet(struct sandboxd *d, struct sandbox *sb)
{
	unsigned grace = d->opts->read_grace_secs;
	_cleanup_free_ char *why = strdup_printf(
	        "started to read its files; stopping it again after %u s without other activity",
	        grace);

	log_info("sandbox '%s': started to read its files, and nothing else used it for %u s; "
	         "stopping it again, its disk kept",
	         sb->id, grace);
	sb->woken_for_files = false;
	sb->stopping = SANDBOX_STOP_READ;
	if (lifecycle_begin(d, sb, SANDBOX_OP_STOP, SANDBOX_STOPPING, why) < 0)
		sb->stopping = SANDBOX_STOP_REQUEST;
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
lifecycle_shutdown(struct sandboxd *d, const char *signame)
{
	struct list_node *n, *tmp;

	if (d->opts->keep_sandboxes || d->shutting_down) {
		log_info("%s: shutting down; %s", signame,
		         d->opts->keep_sandboxes ? "sandboxes keep running (--keep-sandboxes)"
		                                 : "not waiting for the sandboxes still ending");
		loop_quit(d->loop, 0);
		return;
	}
	log_info("%s: shutting down; ending %zu sandbox(es): sandboxd runs without "
	         "--keep-sandboxes",
	         signame, d->reg.count);
	LIST_FOREACH_SAFE (n, tmp, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		struct err err = {};
		if (lifecycle_delete(d, sb, SANDBOX_END_SHUTDOWN, &err) < 0)
			log_warning("sandbox '%s': cannot end it at the shutdown: %s", sb->id,
			            err.message);
	}
	/* only now: one ended at once (its backend is not in this build) must not quit the
	 * loop while the others are still to be asked */
	d->shutting_down = true;
	d->shutdown_deadline = now_unix_ms() + LIFECYCLE_SHUTDOWN_MS;
	shutdown_progress(d);
}

void
lifecycle_housekeeping(struct sandboxd *d, int64_t now_ms)
{
	unsigned grace = d->opts->client_grace_secs;
	struct list_node *n, *tmp;

	if (d->shutting_down) {
		if (now_ms >= d->shutdown_deadline) {
			log_warning("shutting down: sandboxes still ending after %d s; stopping "
			            "anyway",
			            LIFECYCLE_SHUTDOWN_MS / 1000);
			loop_quit(d->loop, 0);
		}
		return;
	}
	LIST_FOREACH_SAFE (n, tmp, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		int64_t exp = sandbox_expires_at(sb);
		bool up = sb->state == SANDBOX_RUNNING && sb->op == SANDBOX_OP_NONE;
		bool idles = sb->idle_timeout_secs && up;
		bool woken = sb->woken_for_files && up;
		bool watched;

		if (sb->op == SANDBOX_OP_DESTROY || sb->state == SANDBOX_TERMINATED)
			continue;
		if (exp && now_ms >= exp) {
			struct err err = {};
			(void)lifecycle_delete(d, sb, SANDBOX_END_LIFETIME, &err);
			continue;
		}
		if (!idles && !woken && !sb->bound_to_client)
			continue;
		watched = activity_watched(d, sb, now_ms);
		if (sb->bound_to_client && !watched && activity_client_gone(sb, now_ms, grace))
			client_gone(d, sb, grace);
		else if (woken && !watched && activity_quiet(sb, now_ms, d->opts->read_grace_secs))
			read_quiet(d, sb);
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
		.owns = reconcile_owns,
		.swept = reconcile_swept,
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
