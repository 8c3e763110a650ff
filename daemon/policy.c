/* policy.c: embedded defaults and the "tighten, never loosen" checks; see policy.h. */
#include <stdarg.h>
#include "policy.h"
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
	for (int i = 0; i < _NET_MODE_MAX; i++)
		if (s && streq(s, net_mode_names[i]))
			return (enum net_mode)i;
	return _NET_MODE_INVALID;
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
	p->network.ceiling = NET_NONE;
	p->network.may_allow = json_array();
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
	json_decref(p->network.default_allow);
	json_decref(p->network.default_deny);
	json_decref(p->network.may_allow);
	*p = (struct policy){ 0 };
}

void
policy_cap_network(struct policy *p, enum net_mode enforceable)
{
	if (p->network.ceiling > enforceable)
		p->network.ceiling = enforceable;
	if (p->network.default_mode > enforceable)
		p->network.default_mode = enforceable;
}

void
api_err_set(struct api_err *e, int status, const char *code, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

static json_t *
network_object(enum net_mode mode, json_t *allow, json_t *deny)
{
	return json_pack("{s:s, s:o, s:o}", "mode", net_mode_to_string(mode), "allow",
	                 allow ? allow : json_array(), "deny", deny ? deny : json_array());
}

int
policy_resolve_network(const struct policy *p, const json_t *req, json_t **ret, struct api_err *err)
{
	const json_t *jmode, *jallow, *jdeny;
	enum net_mode mode = p->network.default_mode;
	const char *key;
	json_t *v, *out;

	if (!req || json_is_null(req)) {
		out = network_object(
		        mode,
		        mode == NET_ALLOWLIST ? json_deep_copy(p->network.default_allow) : NULL,
		        mode == NET_NONE ? NULL : json_deep_copy(p->network.default_deny));
		if (!out)
			return -ENOMEM;
		*ret = out;
		return 0;
	}
	if (!json_is_object(req)) {
		api_err_set(err, 400, "invalid_request", "'network' must be an object");
		return -EINVAL;
	}
	json_object_foreach ((json_t *)req, key, v) {
		if (!streq(key, "mode") && !streq(key, "allow") && !streq(key, "deny")) {
			api_err_set(err, 400, "invalid_request", "unknown field 'network.%.64s'",
			            key);
			return -EINVAL;
		}
	}
	jmode = json_object_get(req, "mode");
	if (jmode && !json_is_null(jmode)) {
		if (!json_is_string(jmode)) {
			api_err_set(err, 400, "invalid_request", "'network.mode' must be a string");
			return -EINVAL;
		}
		mode = net_mode_from_string(json_string_value(jmode));
		if (mode == _NET_MODE_INVALID) {
			api_err_set(err, 400, "invalid_request",
			            "unknown network mode '%.32s': use none, allowlist or open",
			            json_string_value(jmode));
			return -EINVAL;
		}
	}
	jallow = json_object_get(req, "allow");
	jdeny = json_object_get(req, "deny");
	if (jallow && !json_is_null(jallow) && mode != NET_ALLOWLIST) {
		api_err_set(err, 400, "invalid_request",
		            "'network.allow' goes only with mode allowlist");
		return -EINVAL;
	}
	if (jdeny && !json_is_null(jdeny) && mode == NET_NONE) {
		api_err_set(err, 400, "invalid_request",
		            "'network.deny' has no meaning with mode none");
		return -EINVAL;
	}
	if (mode > p->network.ceiling) {
		api_err_set(err, 403, "refused",
		            "network mode '%s' is above this server's ceiling '%s'",
		            net_mode_to_string(mode), net_mode_to_string(p->network.ceiling));
		return -EPERM;
	}
	/* Modes above "none" are only reachable once a ceiling allows them, which needs host
	 * egress enforcement; name lists are checked there. */
	out = network_object(mode, NULL, NULL);
	if (!out)
		return -ENOMEM;
	*ret = out;
	return 0;
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
