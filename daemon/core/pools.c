/* pools.c: warm pools; see pools.h.
 *
 * Nothing here waits: a pool is brought to its size by creating sandboxes through
 * lifecycle_create (they boot as any other, with sb->pooled set), and housekeeping notices
 * the ones that failed each second, ends them and backs the pool off.
 *
 * A claim answers at once; its refill does not run in the claim. Starting a VM costs the loop
 * a few tens of milliseconds (its layer is made, its VMM forked), which would hold up every
 * claim behind it in a burst. So a claim (re)arms the refill timer, which fires once claims
 * have been quiet for REFILL_QUIET_MS, and each firing starts at most one sandbox and comes
 * back REFILL_PACE_MS later while a pool is short: the loop is never taken for more than one
 * start at a time, and claims in between are answered between them. */
#include <limits.h>
#include "pools.h"
#include "egress.h"
#include "events.h"
#include "lifecycle.h"
#include "log.h"
#include "netpolicy.h"
#include "records.h"
#include "sandboxd.h"
#include "util.h"

#define POOL_BACKOFF_MIN_MS 1000u
#define POOL_BACKOFF_MAX_MS (5u * 60u * 1000u)
#define REFILL_QUIET_MS 100u /* after the last claim, before the refill starts */
#define REFILL_PACE_MS 20u   /* between two starts of a refill */

/* What sandboxd knows of one pool of the policy beyond its image and size. */
struct pool_state {
	unsigned failures;    /* boots that failed in a row */
	uint64_t retry_at_ms; /* monotonic: no new sandbox before then (after a failure) */
	bool short_said;      /* the log said the node has no room for it (until it has) */
};

struct pools {
	struct pool_state *st; /* one per d->policy.pools */
	struct loop_timer refill;
	bool timer; /* refill is initialised */
};

static void
refill_fired(struct loop_timer *t _unused_, void *data)
{
	struct sandboxd *d = data;

	if (pools_tend_some(d, 1))
		(void)loop_timer_arm(&d->pools->refill, REFILL_PACE_MS, 0);
}

int
pools_init(struct sandboxd *d)
{
	d->pools = calloc(1, sizeof(*d->pools));
	if (!d->pools)
		return -ENOMEM;
	if (d->policy.n_pools > 0) {
		d->pools->st = calloc(d->policy.n_pools, sizeof(*d->pools->st));
		if (!d->pools->st) {
			free(d->pools);
			d->pools = NULL;
			return -ENOMEM;
		}
		d->pools->timer = loop_timer_init(d->loop, &d->pools->refill, refill_fired, d) >= 0;
	}
	return 0;
}

void
pools_done(struct sandboxd *d)
{
	if (!d->pools)
		return;
	if (d->pools->timer)
		loop_timer_done(&d->pools->refill);
	free(d->pools->st);
	free(d->pools);
	d->pools = NULL;
}

const char *
pools_image(const struct sandboxd *d, size_t i)
{
	return d->policy.pools[i].image ?: d->policy.default_image;
}

/* The pool a pooled sandbox belongs to (the first of its image), or -1. */
static ssize_t
pool_of(const struct sandboxd *d, const struct sandbox *sb)
{
	for (size_t i = 0; i < d->policy.n_pools; i++)
		if (streq(pools_image(d, i), sb->image))
			return (ssize_t)i;
	return -1;
}

/* Whether a pooled sandbox still counts towards its pool's size: booting or waiting, not
 * failed and not being ended. */
static bool
filling(const struct sandbox *sb)
{
	return sb->pooled && sb->op != SANDBOX_OP_DESTROY &&
	       (sb->state == SANDBOX_PENDING || sb->state == SANDBOX_STARTING ||
	        sb->state == SANDBOX_RUNNING);
}

/* Whether a pooled sandbox waits for a claim: it runs and nothing is under way. */
static bool
waiting(const struct sandbox *sb)
{
	return sb->pooled && sb->state == SANDBOX_RUNNING && sb->op == SANDBOX_OP_NONE;
}

unsigned
pools_waiting(const struct sandboxd *d, const char *image)
{
	struct list_node *n;
	unsigned count = 0;

	LIST_FOREACH (n, &d->reg.all) {
		const struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (waiting(sb) && (!image || streq(sb->image, image)))
			count++;
	}
	return count;
}

json_t *
pools_json(const struct sandboxd *d)
{
	json_t *pools = json_object();

	for (size_t i = 0; pools && i < d->policy.n_pools; i++) {
		const char *image = pools_image(d, i);
		if (json_object_set_new(pools, image, json_integer(pools_waiting(d, image))) < 0) {
			json_decref(pools);
			return NULL;
		}
	}
	return pools;
}

/* Whether the node has room for one more sandbox of the default sizes beside every sandbox
 * that holds CPUs and memory (and every one that is not terminated, for the disk). */
static bool
node_has_room(const struct sandboxd *d)
{
	uint64_t cpus = d->policy.defaults.cpus, mem = d->policy.defaults.memory_mb;
	uint64_t disk = d->policy.defaults.disk_mb;
	struct list_node *n;

	LIST_FOREACH (n, &d->reg.all) {
		const struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		disk += sb->disk_mb;
		if (sb->state == SANDBOX_STOPPED || sb->state == SANDBOX_FAILED ||
		    sb->state == SANDBOX_TERMINATED)
			continue;
		cpus += sb->cpus;
		mem += sb->memory_mb;
	}
	return cpus <= d->node.cpus && mem <= d->node.memory_mb && disk <= d->node.disk_mb;
}

/* A boot of pool i failed: it waits before it tries again, longer after each failure. */
static void
pool_failed(struct sandboxd *d, size_t i, const struct sandbox *sb)
{
	struct pool_state *st = &d->pools->st[i];
	unsigned delay = POOL_BACKOFF_MIN_MS;

	for (unsigned k = 0; k < st->failures && delay < POOL_BACKOFF_MAX_MS; k++)
		delay *= 2;
	delay = MIN(delay, POOL_BACKOFF_MAX_MS);
	st->failures++;
	st->retry_at_ms = now_mono_ms() + delay;
	log_warning("pool '%s': sandbox '%s' failed (%s); the pool tries again in %u s",
	            pools_image(d, i), sb->id, sb->reason ? sb->reason : "no reason", delay / 1000);
}

/* Creates one sandbox for pool i: the default sizes, no timeouts, network none. */
static int
spawn(struct sandboxd *d, size_t i)
{
	_cleanup_(sandbox_freep) struct sandbox *sb = sandbox_new();
	json_t *none = json_pack("{s:s}", "mode", "none"), *net = NULL;
	struct err err = {};
	char hex[17];
	int r;

	if (!sb || !none || random_hex(hex, 8) < 0) {
		json_decref(none);
		return -ENOMEM;
	}
	snprintf(sb->id, sizeof(sb->id), "sbx_%s", hex);
	sb->pooled = true;
	sb->owner = strdup("");
	sb->image = strdup(pools_image(d, i));
	if (!sb->owner || !sb->image) {
		json_decref(none);
		return -ENOMEM;
	}
	sb->cpus = d->policy.defaults.cpus;
	sb->memory_mb = d->policy.defaults.memory_mb;
	sb->disk_mb = d->policy.defaults.disk_mb;
	r = netpolicy_resolve(&d->policy, none, &net, &err);
	json_decref(none);
	if (r < 0) {
		log_error("pool '%s': its network cannot be none: %s", sb->image, err.message);
		return r;
	}
	json_decref(sb->network);
	sb->network = net;
	r = lifecycle_create(d, sb, &err);
	if (r < 0) {
		log_warning("pool '%s': cannot create a sandbox: %s", sb->image, err.message);
		return r;
	}
	TAKE_PTR(sb); /* the registry's */
	return 0;
}

void
pools_tend(struct sandboxd *d)
{
	(void)pools_tend_some(d, UINT_MAX);
}

bool
pools_tend_some(struct sandboxd *d, unsigned most)
{
	uint64_t now = now_mono_ms();
	struct list_node *n, *tmp;
	bool short_of = false;

	if (!d->pools || d->policy.n_pools == 0 || !d->backend)
		return false;
	/* failed ones go, and their pool backs off; one that runs resets its pool's count */
	LIST_FOREACH_SAFE (n, tmp, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		ssize_t i = sb->pooled ? pool_of(d, sb) : -1;
		struct err err = {};

		if (!sb->pooled || sb->op == SANDBOX_OP_DESTROY)
			continue;
		if (sb->state == SANDBOX_RUNNING && i >= 0) {
			d->pools->st[i].failures = 0;
		} else if (sb->state == SANDBOX_FAILED || sb->state == SANDBOX_STOPPED) {
			if (i >= 0)
				pool_failed(d, (size_t)i, sb);
			(void)lifecycle_delete(d, sb, SANDBOX_END_REQUEST, &err);
		} else if (i < 0 && sb->state != SANDBOX_TERMINATED) {
			(void)lifecycle_delete(d, sb, SANDBOX_END_REQUEST, &err);
		}
	}
	if (d->shutting_down || d->node.cordoned)
		return false;
	for (size_t i = 0; i < d->policy.n_pools; i++) {
		struct pool_state *st = &d->pools->st[i];
		const char *image = pools_image(d, i);
		unsigned have = 0;

		if (now < st->retry_at_ms)
			continue;
		LIST_FOREACH (n, &d->reg.all) {
			const struct sandbox *sb = list_entry(n, struct sandbox, by_created);
			if (filling(sb) && streq(sb->image, image))
				have++;
		}
		for (; have < d->policy.pools[i].size; have++) {
			if (most == 0) {
				short_of = true; /* the next call goes on */
				break;
			}
			if (!node_has_room(d)) {
				if (!st->short_said)
					log_info("pool '%s': %u of %u sandboxes; the node has no "
					         "room "
					         "for more",
					         image, have, d->policy.pools[i].size);
				st->short_said = true;
				break;
			}
			st->short_said = false;
			if (spawn(d, i) < 0) {
				st->failures++;
				st->retry_at_ms =
				        now + POOL_BACKOFF_MIN_MS * MIN(st->failures, 300u);
				break;
			}
			most--;
		}
	}
	return short_of;
}

bool
pools_claimable(const struct sandboxd *d, const json_t *body, const struct sandbox *req)
{
	const json_t *volumes = json_object_get(body, "volumes");
	static const char *const boot_fixed[] = { "snapshot_id", "snapshot_every_secs",
		                                  "snapshot_keep", "agent" };

	if (!d->pools || d->policy.n_pools == 0 || req->agent_run)
		return false;
	if (req->cpus != d->policy.defaults.cpus ||
	    req->memory_mb != d->policy.defaults.memory_mb ||
	    req->disk_mb != d->policy.defaults.disk_mb)
		return false;
	if (volumes && !json_is_null(volumes) && json_array_size(volumes) > 0)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(boot_fixed); i++) {
		const json_t *v = json_object_get(body, boot_fixed[i]);
		if (v && !json_is_null(v))
			return false;
	}
	return true;
}

/* Exchanges what a claim binds between a pooled sandbox and the request: done twice, it is
 * undone. */
static void
swap_binding(struct sandbox *a, struct sandbox *b)
{
#define SWAP_FIELD(f)                                                                              \
	do {                                                                                       \
		__typeof__(a->f) t_ = a->f;                                                        \
		a->f = b->f;                                                                       \
		b->f = t_;                                                                         \
	} while (0)
	SWAP_FIELD(owner);
	SWAP_FIELD(name);
	SWAP_FIELD(labels);
	SWAP_FIELD(network);
	SWAP_FIELD(env);
	SWAP_FIELD(nenv);
	SWAP_FIELD(idle_timeout_secs);
	SWAP_FIELD(idle_action);
	SWAP_FIELD(lifetime_secs);
	SWAP_FIELD(bound_to_client);
#undef SWAP_FIELD
}

/* The oldest pooled sandbox that waits and was booted as req would be. */
static struct sandbox *
find_waiting(struct sandboxd *d, const struct sandbox *req)
{
	struct sandbox *found = NULL;
	struct list_node *n;

	LIST_FOREACH (n, &d->reg.all) { /* newest first: the last match is the oldest */
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (waiting(sb) && streq(sb->image, req->image) && sb->cpus == req->cpus &&
		    sb->memory_mb == req->memory_mb && sb->disk_mb == req->disk_mb)
			found = sb;
	}
	return found;
}

int
pools_claim(struct sandboxd *d, struct sandbox *req, struct sandbox **ret, struct err *err)
{
	struct sandbox *sb;
	int64_t old_created, old_active, old_attended;
	json_t *data;
	int r;

	if (!d->pools || d->shutting_down || !(sb = find_waiting(d, req)))
		return 0;
	if (req->name && registry_find_name(&d->reg, req->name, req->owner))
		return err_set(err, -EEXIST, ERR_CONFLICT, "the name '%s' is already in use",
		               req->name);
	old_created = sb->created_at;
	old_active = sb->last_active;
	old_attended = sb->last_attended;
	swap_binding(sb, req);
	sb->pooled = false;
	sb->created_at = sb->last_active = sb->last_attended = now_unix_ms();
	/* with --keep-sandboxes, its record (the env values) is on disk before its row */
	r = records_save(d, sb);
	if (r < 0) {
		log_error("sandbox '%s': cannot write its record for --keep-sandboxes: %s", sb->id,
		          strerror(-r));
		err_set(err, r, ERR_INTERNAL,
		        "could not keep the sandbox's record for --keep-sandboxes: %s",
		        strerror(-r));
		goto undo;
	}
	data = lifecycle_created_data(sb);
	if (data && json_object_set_new(data, "reason", json_string("pool")) < 0) {
		json_decref(data);
		data = NULL;
	}
	r = data ? sandbox_commit(d, sb, true, "created", data) : -ENOMEM;
	if (r < 0) {
		records_remove(d, sb->id);
		if (r == -EEXIST)
			err_set(err, r, ERR_CONFLICT, "the name '%s' is already in use", sb->name);
		else
			err_set(err, r, ERR_INTERNAL, "could not record the sandbox: %s",
			        strerror(-r));
		goto undo;
	}
	/* created now: it lists before every sandbox made while it waited */
	registry_make_newest(&d->reg, sb);
	/* its tap and the worker's rules had the pool's network (none): they follow now, as
	 * after a PATCH of the network */
	egress_update(d, sb);
	log_info("sandbox '%s': claimed from the pool of '%s' by '%s'", sb->id, sb->image,
	         sb->owner);
	*ret = sb;
	/* the pool fills again behind it, once a burst of claims is answered */
	if (d->pools->timer)
		(void)loop_timer_arm(&d->pools->refill, REFILL_QUIET_MS, 0);
	else
		pools_tend(d);
	return 1;
undo:
	swap_binding(sb, req);
	sb->pooled = true;
	sb->created_at = old_created;
	sb->last_active = old_active;
	sb->last_attended = old_attended;
	(void)sandbox_refresh_json(sb);
	return r;
}

unsigned
pools_make_room(struct sandboxd *d, unsigned cpus, unsigned memory_mb, uint64_t disk_mb)
{
	uint64_t c = cpus, m = memory_mb, k = disk_mb;
	struct list_node *n, *tmp;
	unsigned ended = 0;

	LIST_FOREACH (n, &d->reg.all) {
		const struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (sb->pooled && sb->op == SANDBOX_OP_DESTROY)
			continue; /* on its way out */
		k += sb->disk_mb;
		if (sb->state == SANDBOX_STOPPED || sb->state == SANDBOX_FAILED ||
		    sb->state == SANDBOX_TERMINATED)
			continue;
		c += sb->cpus;
		m += sb->memory_mb;
	}
	/* the newest first: those still booting, before those that wait */
	LIST_FOREACH_SAFE (n, tmp, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		struct err err = {};

		if (c <= d->node.cpus && m <= d->node.memory_mb && k <= d->node.disk_mb)
			break;
		if (!filling(sb))
			continue;
		if (lifecycle_delete(d, sb, SANDBOX_END_REQUEST, &err) < 0)
			continue;
		c -= sb->cpus;
		m -= sb->memory_mb;
		k -= sb->disk_mb;
		ended++;
	}
	if (ended)
		log_info("pools: %u pooled sandbox(es) ended to make room for a create", ended);
	return ended;
}
