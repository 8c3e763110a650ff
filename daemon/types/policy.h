/* policy.h: what the server allows. A request may tighten the policy, never loosen it, and
 * is never clamped silently: out of limits is invalid, above the network ceiling refused.
 * The embedded defaults are used until the operator's policy file (--policy) is read. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

enum net_mode {
	NET_NONE,      /* no network at all */
	NET_ALLOWLIST, /* only the names on the allow list (and not on deny) */
	NET_OPEN,      /* anything the egress proxy would dial */
	_NET_MODE_MAX,
	_NET_MODE_INVALID = -1,
};

const char *net_mode_to_string(enum net_mode m);
enum net_mode net_mode_from_string(const char *s);

struct policy_pool {
	char *image; /* NULL: the default image */
	unsigned size;
};

struct policy {
	char *default_image;
	/* the images that may be installed or run, exactly as written; none: any image */
	char **images;
	size_t n_images;
	struct policy_pool *pools;
	size_t n_pools;
	struct {
		unsigned cpus, memory_mb;
		uint64_t disk_mb, idle_timeout_secs, lifetime_secs;
	} defaults;
	struct {
		unsigned max_cpus, max_memory_mb;
		uint64_t max_disk_mb;
		uint64_t max_idle_timeout_secs; /* 0: unbounded */
		uint64_t max_lifetime_secs;     /* 0: unbounded */
		uint64_t min_snapshot_every_secs;
		unsigned max_snapshot_keep;
	} limits;
	struct {
		enum net_mode default_mode;
		json_t *default_allow; /* array of names */
		json_t *default_deny;
		enum net_mode ceiling; /* the most a request (or the backend) may get */
		json_t *may_allow;
	} network;
};

/* Fills the embedded defaults. host_cpus bounds max_cpus. -ENOMEM. */
int policy_init_defaults(struct policy *p, unsigned host_cpus);
void policy_done(struct policy *p);
/* Whether the policy permits image: no images list, or on it as written. */
bool policy_image_allowed(const struct policy *p, const char *image);

/* Lowers the ceiling to what the backend can enforce (never raises it). */
void policy_cap_network(struct policy *p, enum net_mode enforceable);

/* The "network" object for /v1/capabilities. */
json_t *policy_network_json(const struct policy *p);
json_t *policy_limits_json(const struct policy *p);
