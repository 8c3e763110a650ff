/* pools.h: warm pools (the policy file's `pools: [{image, size}]`): for each pool, `size`
 * sandboxes of its image booted ahead and waiting, no one's yet, so that a create asking for
 * nothing fixed at boot beyond the image is a claim rather than a boot.
 *
 * A pooled sandbox is an ordinary sandbox in the registry with sb->pooled set and owner "":
 * it has no store row, no events and no audit records (sandbox_commit writes nothing for it),
 * no record for --keep-sandboxes, and no list, lookup or name finds it. Its resources count
 * against the node's capacity. It boots with the policy's default sizes, no timeouts and the
 * network mode none (with egress, a tap whose traffic goes nowhere). A claim binds the
 * request's owner, name, labels, env, timeouts and network to it (the egress worker and the
 * table follow as after a PATCH of the network), inserts its row with a "created" event
 * whose reason is "pool", and the pool fills again behind it. A restart discards what was
 * pooled: no row names it, so the backend's sweep ends its VM (with --keep-sandboxes too);
 * without --keep-sandboxes the shutdown ends it with the others. A pool whose boots fail
 * waits longer after each failure before it tries again (1 s doubling to 5 min). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "error.h"

struct sandboxd;
struct sandbox;

/* Sets up the pools of d->policy (nothing to fill yet). -ENOMEM. */
int pools_init(struct sandboxd *d);
void pools_done(struct sandboxd *d);

/* Brings every pool to its size: ends the pooled sandboxes that failed (the pool backs off),
 * and creates new ones while the node has room, it is not cordoned and sandboxd is not
 * shutting down. Called after the startup and by housekeeping; a claim arms a paced refill
 * (pools.c) instead. */
void pools_tend(struct sandboxd *d);
/* The same, starting at most `most` sandboxes: true when a pool is still short because of that
 * limit (the refill timer calls it with 1 and comes back). */
bool pools_tend_some(struct sandboxd *d, unsigned most);

/* Whether a create (its body, decoded into req) may be a claim: it asks for nothing a boot
 * fixes beyond the image: the default cpus, memory and disk, no volumes, no snapshot (to fork
 * from or on a schedule) and no agent. */
bool pools_claimable(const struct sandboxd *d, const json_t *body, const struct sandbox *req);

/* Claims a waiting pooled sandbox of req's image for req (a create that pools_claimable
 * allowed; req keeps what it was and the caller frees it): binds req's owner, name, labels,
 * env, timeouts and network to it and records it as created (reason "pool"). 1 with *ret the
 * claimed sandbox (running; the registry owns it), 0 when none waits (create it the usual
 * way), or -errno with err (a name in use: ERR_CONFLICT; the record or the row could not be
 * written). */
int pools_claim(struct sandboxd *d, struct sandbox *req, struct sandbox **ret, struct err *err);

/* A create of these sizes that the node has room for beside every sandbox but the pooled
 * ones: pooled sandboxes (booting ones first) are ended until it fits beside them too (a pool
 * is a cache; it never refuses a create). Returns how many were ended. */
unsigned pools_make_room(struct sandboxd *d, unsigned cpus, unsigned memory_mb, uint64_t disk_mb);

/* How many pooled sandboxes wait (run, unclaimed) for image; NULL: all pools together. */
unsigned pools_waiting(const struct sandboxd *d, const char *image);
/* {image: waiting} for every image the policy pools (GET /v1/node). NULL: out of memory. */
json_t *pools_json(const struct sandboxd *d);
/* The image of pool i of the policy (the default image for a pool that names none). */
const char *pools_image(const struct sandboxd *d, size_t i);
