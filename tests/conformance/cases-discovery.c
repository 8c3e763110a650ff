/* cases-discovery.c: conformance cases for discovery: what GET /v1/capabilities and
 * GET /v1/whoami describe (docs/api.md, "Discovery"). */
#include "cases.h"
#include "conf.h"
#include "util.h"

static void
assert_member_type(const json_t *obj, const char *where, const char *key, json_type type)
{
	const json_t *v = json_object_get(obj, key);

	if (!v)
		fail_msg("%s has no '%s'", where, key);
	if (json_typeof(v) != type)
		fail_msg("%s.%s has the wrong JSON type", where, key);
}

void
case_capabilities_describe_the_server(void **state)
{
	static const char *const flags[] = {
		"network_policy_update",
		"suspend",
		"memory_snapshot",
		"disk_snapshot",
		"egress_allowlist",
		"egress_open",
		"tunnel",
		"volumes",
		"metrics",
		"audit",
		"images",
	};
	static const char *const limits[] = {
		"max_cpus",          "max_memory_mb",
		"max_disk_mb",       "max_idle_timeout_secs",
		"max_lifetime_secs", "min_snapshot_every_secs",
		"max_snapshot_keep",
	};
	json_t *caps = conf_caps(), *c, *l, *net, *def;
	int ceiling;

	assert_string_equal(conf_str(caps, "api_version"), "v1");
	assert_member_type(caps, "capabilities", "backend", JSON_STRING);
	assert_true(*conf_str(caps, "backend"));

	assert_member_type(caps, "capabilities", "capabilities", JSON_OBJECT);
	c = json_object_get(caps, "capabilities");
	for (size_t i = 0; i < ARRAY_SIZE(flags); i++)
		if (!json_is_boolean(json_object_get(c, flags[i])))
			fail_msg("capabilities.%s is missing or not true/false", flags[i]);

	assert_member_type(caps, "capabilities", "limits", JSON_OBJECT);
	l = json_object_get(caps, "limits");
	for (size_t i = 0; i < ARRAY_SIZE(limits); i++) {
		assert_member_type(l, "limits", limits[i], JSON_INTEGER);
		assert_true(json_integer_value(json_object_get(l, limits[i])) >= 0);
	}
	assert_true(json_integer_value(json_object_get(l, "max_cpus")) >= 1);
	assert_true(json_integer_value(json_object_get(l, "max_memory_mb")) >= 1);

	assert_member_type(caps, "capabilities", "network", JSON_OBJECT);
	net = json_object_get(caps, "network");
	assert_member_type(net, "network", "default", JSON_OBJECT);
	def = json_object_get(net, "default");
	assert_member_type(def, "network.default", "allow", JSON_ARRAY);
	assert_member_type(def, "network.default", "deny", JSON_ARRAY);
	assert_member_type(net, "network", "may_allow", JSON_ARRAY);
	ceiling = conf_net_mode_rank(conf_str(net, "ceiling"));
	if (ceiling < 0)
		fail_msg("network.ceiling '%s' is not none, allowlist or open",
		         conf_str(net, "ceiling"));
	if (conf_net_mode_rank(conf_str(def, "mode")) < 0)
		fail_msg("network.default.mode '%s' is not none, allowlist or open",
		         conf_str(def, "mode"));
	/* A default the ceiling would refuse is incoherent */
	assert_true(conf_net_mode_rank(conf_str(def, "mode")) <= ceiling);
	/* A ceiling never offers what the server cannot enforce */
	if (ceiling >= conf_net_mode_rank("allowlist"))
		assert_true(json_is_true(json_object_get(c, "egress_allowlist")));
	if (ceiling >= conf_net_mode_rank("open"))
		assert_true(json_is_true(json_object_get(c, "egress_open")));
}

void
case_whoami_names_the_caller(void **state)
{
	json_t *j, *scopes, *s;
	size_t i;

	assert_int_equal(conf_request("GET", "/v1/whoami", NULL, &j), 200);
	assert_true(*conf_str(j, "user"));
	assert_true(*conf_str(j, "role"));
	scopes = json_object_get(j, "scopes");
	assert_true(json_is_array(scopes));
	json_array_foreach (scopes, i, s)
		assert_true(json_is_string(s));
}

/* A route of a capability the server does not offer answers 501 unsupported with a message
 * naming the capability as GET /v1/capabilities names it, never 404 (even for a sandbox that
 * does not exist, and whatever body or Upgrade the request carries). */
void
case_unoffered_capabilities_answer_501(void **state)
{
	static const struct {
		const char *capability, *also; /* also: a second name that may be meant instead */
		const char *method, *path, *body;
		bool upgrade; /* Upgrade: sbx-tunnel/1 */
	} routes[] = {
		{ "tunnel", NULL, "GET", "{ref}/tunnel?port=8080", NULL, true },
		{ "tunnel", NULL, "GET", "{ref}/tunnel?port=8080", NULL, false },
		{ "suspend", NULL, "POST", "{ref}/suspend", NULL, false },
		{ "suspend", NULL, "POST", "{ref}/resume", NULL, false },
		{ "volumes", NULL, "GET", "/v1/volumes", NULL, false },
		{ "volumes", NULL, "POST", "/v1/volumes", "{\"name\":\"cf-vol\",\"size_mb\":64}",
		  false },
		{ "volumes", NULL, "DELETE", "/v1/volumes/cf-vol", NULL, false },
		{ "disk_snapshot", "memory_snapshot", "GET", "/v1/snapshots", NULL, false },
		{ "disk_snapshot", "memory_snapshot", "POST", "{ref}/snapshots", "{}", false },
		{ "disk_snapshot", "memory_snapshot", "DELETE",
		  "/v1/snapshots/snap_0123456789abcdef", NULL, false },
	};
	const char *id = conf_random_id();
	unsigned checked = 0;

	for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
		/* "{ref}/...": a path under a sandbox that does not exist */
		const char *path = str_has_prefix(routes[i].path, "{ref}")
		                           ? conf_fmt("/v1/sandboxes/%s%s", id, routes[i].path + 5)
		                           : routes[i].path;
		const char *message, *code;
		long status;
		json_t *j;

		if (conf_capability(routes[i].capability) ||
		    (routes[i].also && conf_capability(routes[i].also)))
			continue; /* offered: what it answers is its own cases' business */
		if (routes[i].upgrade) {
			struct conf_upgrade up;
			if (conf_upgrade(path, CONF_AUTH_TOKEN,
			                 (const char *const[]){ "Upgrade: sbx-tunnel/1",
			                                        "Connection: Upgrade", NULL },
			                 &up))
				fail_msg("GET %s was upgraded although capabilities.%s is false",
				         path, routes[i].capability);
			status = up.status;
			j = up.json;
		} else {
			status = conf_request(routes[i].method, path, routes[i].body, &j);
		}
		code = conf_str(json_object_get(j, "error"), "code");
		message = conf_error_message(j);
		if (status != 501 || !streq(code, "unsupported"))
			fail_msg("%s %s%s: capabilities.%s is false, so expected 501 unsupported; "
			         "got %ld %s",
			         routes[i].method, path, routes[i].upgrade ? " (Upgrade)" : "",
			         routes[i].capability, status, code);
		if (!strstr(message, routes[i].capability) &&
		    !(routes[i].also && strstr(message, routes[i].also)))
			fail_msg("%s %s: the message does not name the capability '%s': '%s'",
			         routes[i].method, path, routes[i].capability, message);
		checked++;
	}
	if (checked == 0) {
		print_message("skip: this server offers every capability these routes belong to\n");
		skip();
	}
}
