/* policy.c: embedded defaults and the "tighten, never loosen" checks; see policy.h. */
#include "policy.h"
#include "strv.h"
#include "util.h"

static const char *const net_mode_names[_NET_MODE_MAX] = {
	[NET_NONE] = "none",
	[NET_ALLOWLIST] = "allowlist",
	[NET_OPEN] = "open",
};

const char *
net_mode_to_string(enum net_mode m)
{
	return m >= 0 && m < _NET_MODE_MAX ? net_mode_names[m] : "invalid";
}

enum net_mode
net_mode_from_string(const char *s)
{
	int i = name_index(net_mode_names, _NET_MODE_MAX, s);

	return i < 0 ? _NET_MODE_INVALID : (enum net_mode)i;
}

int
policy_init_defaults(struct policy *p, unsigned host_cpus)
{
	*p = (struct policy){ 0 };
	p->default_image = strdup("sandbox-base");
	p->defaults.cpus = 1;
	p->defaults.memory_mb = 512;
	p->defaults.disk_mb = 4096;
	p->limits.max_cpus = host_cpus > 0 ? host_cpus : 1;
	p->limits.max_memory_mb = 16384;
	p->limits.max_disk_mb = 65536;
	p->limits.min_snapshot_every_secs = 300;
	p->limits.max_snapshot_keep = 10;
	p->network.default_mode = NET_NONE;
	p->network.default_allow = json_array();
	p->network.default_deny = json_array();
	/* lowered at startup to what the backend enforces: none without egress */
	p->network.ceiling = NET_ALLOWLIST;
	p->network.may_allow = json_pack("[s]", "*");
	if (!p->default_image || !p->network.default_allow || !p->network.default_deny ||
	    !p->network.may_allow) {
		policy_done(p);
		return -ENOMEM;
	}
	return 0;
}

void
policy_done(struct policy *p)
{
	free(p->default_image);
	strv_free(p->images);
	for (size_t i = 0; i < p->n_pools; i++)
		free(p->pools[i].image);
	free(p->pools);
	json_decref(p->network.default_allow);
	json_decref(p->network.default_deny);
	json_decref(p->network.may_allow);
	*p = (struct policy){ 0 };
}

bool
policy_image_allowed(const struct policy *p, const char *image)
{
	if (!p->n_images)
		return true;
	for (size_t i = 0; i < p->n_images; i++)
		if (streq(p->images[i], image))
			return true;
	return false;
}

void
policy_cap_network(struct policy *p, enum net_mode enforceable)
{
	if (p->network.ceiling > enforceable)
		p->network.ceiling = enforceable;
	if (p->network.default_mode > enforceable)
		p->network.default_mode = enforceable;
	/* an allow list only means something under allowlist, a deny list not under none (a
	 * request repeating the default it was shown must not be refused) */
	if (p->network.default_mode < NET_ALLOWLIST)
		json_array_clear(p->network.default_allow);
	if (p->network.default_mode == NET_NONE)
		json_array_clear(p->network.default_deny);
}

json_t *
policy_network_json(const struct policy *p)
{
	return json_pack("{s:{s:s, s:O, s:O}, s:s, s:O}", "default", "mode",
	                 net_mode_to_string(p->network.default_mode), "allow",
	                 p->network.default_allow, "deny", p->network.default_deny, "ceiling",
	                 net_mode_to_string(p->network.ceiling), "may_allow", p->network.may_allow);
}

json_t *
policy_limits_json(const struct policy *p)
{
	return json_pack("{s:i, s:i, s:I, s:I, s:I, s:I, s:i}", "max_cpus", (int)p->limits.max_cpus,
	                 "max_memory_mb", (int)p->limits.max_memory_mb, "max_disk_mb",
	                 (json_int_t)p->limits.max_disk_mb, "max_idle_timeout_secs",
	                 (json_int_t)p->limits.max_idle_timeout_secs, "max_lifetime_secs",
	                 (json_int_t)p->limits.max_lifetime_secs, "min_snapshot_every_secs",
	                 (json_int_t)p->limits.min_snapshot_every_secs, "max_snapshot_keep",
	                 (int)p->limits.max_snapshot_keep);
}
