/* cases-network.c: conformance cases for a sandbox's network policy (docs/api.md, "The
 * network"; docs/egress.md, "The server's policy"): modes and the ceiling, allow and deny lists
 * with their name rules, may_allow and wildcards, live updates with PATCH, and
 * that sandboxes cannot reach each other. What the server's policy makes
 * meaningless (a ceiling below allowlist, a may_allow of "*") is skipped with the reason, read from
 * GET /v1/capabilities. */
#include <stdlib.h>
#include <string.h>
#include "base64.h"
#include "cases.h"
#include "conf.h"
#include "util.h"

/* ---- the server's network policy, from its capabilities ---- */

static const json_t *
caps_network(void)
{
	return json_object_get(conf_caps(), "network");
}

static const char *
ceiling(void)
{
	return conf_str(caps_network(), "ceiling");
}

static int
ceiling_rank(void)
{
	return conf_net_mode_rank(ceiling());
}

/* Skips the case unless a request may ask for mode allowlist. */
static void
need_allowlist(void)
{
	if (ceiling_rank() < conf_net_mode_rank("allowlist")) {
		print_message("skip: the network ceiling is '%s': no request may ask for an "
		              "allowlist here\n",
		              ceiling());
		skip();
	}
}

static const json_t *
may_allow(void)
{
	return json_object_get(caps_network(), "may_allow");
}

static const json_t *
default_allow(void)
{
	return json_object_get(json_object_get(caps_network(), "default"), "allow");
}

/* The name rules: "*.example.com" matches every name below example.com, not
 * example.com itself; a name matches only itself. */
static bool
matches(const char *pattern, const char *host)
{
	size_t np, nh = strlen(host);

	if (pattern[0] != '*' || pattern[1] != '.')
		return streq(pattern, host);
	np = strlen(pattern + 1); /* ".example.com" */
	return nh > np && streq(host + nh - np, pattern + 1);
}

/* Whether an entry of the default list or of may_allow lets a request add narrow: "*" lets
 * anything; a wildcard lets itself, narrower wildcards and names below it; a name only
 * itself. */
static bool
covers(const char *wide, const char *narrow)
{
	if (streq(wide, "*") || streq(wide, narrow))
		return true;
	return wide[0] == '*' && wide[1] == '.' && matches(wide, narrow);
}

static bool
listed_covers(const json_t *list, const char *name)
{
	const json_t *v;
	size_t i;

	json_array_foreach ((json_t *)list, i, v)
		if (json_is_string(v) && covers(json_string_value(v), name))
			return true;
	return false;
}

/* Whether a request may add name to its allow list. */
static bool
grantable(const char *name)
{
	return listed_covers(default_allow(), name) || listed_covers(may_allow(), name);
}

static bool
may_allow_anything(void)
{
	return conf_index_of(may_allow(), "*") >= 0;
}

/* A name (normal form) this server lets a request add, or NULL when there is none. */
static const char *
grantable_name(void)
{
	const json_t *lists[] = { may_allow(), default_allow() };
	const json_t *v;
	size_t i;

	for (size_t l = 0; l < ARRAY_SIZE(lists); l++)
		json_array_foreach ((json_t *)lists[l], i, v) {
			const char *s = json_string_value(v);
			if (!s)
				continue;
			if (streq(s, "*"))
				return "example.com";
			if (s[0] == '*' && s[1] == '.')
				return conf_fmt("www.%s", s + 2);
			return s;
		}
	return NULL;
}

/* A name no entry of the default list or may_allow covers, or NULL (may_allow "*"). */
static const char *
outside_name(void)
{
	static const char *const tlds[] = { "invalid", "test", "example", "localhost" };

	for (size_t i = 0; i < ARRAY_SIZE(tlds); i++) {
		const char *n = conf_fmt("cf-outside-%s.conformance.%s", conf_run_id(), tlds[i]);
		if (!grantable(n))
			return n;
	}
	return NULL;
}

/* The network object of an allowlist this server grants, with extra members (",\"deny\":[...]"
 * or ""): the default list where it holds a name ({"mode":"allowlist"} alone), else a name a
 * request may add; NULL when the server grants no allowlist at all (the default list is
 * empty and a request may add nothing). */
static const char *
granted_allowlist(const char *extra)
{
	const char *name;

	if (json_array_size(default_allow()) > 0)
		return conf_fmt("{\"mode\":\"allowlist\"%s}", extra);
	name = grantable_name();
	return name ? conf_fmt("{\"mode\":\"allowlist\",\"allow\":[\"%s\"]%s}", name, extra) : NULL;
}

/* Skips the case when no allowlist is granted here at all. */
static const char *
need_granted_allowlist(const char *extra)
{
	const char *net = granted_allowlist(extra);

	if (!net) {
		print_message("skip: the default allow list is empty and may_allow holds nothing: "
		              "no allowlist can be granted here\n");
		skip();
	}
	return net;
}

/* ---- checks on a sandbox's network ---- */

static const json_t *
network_of(const json_t *sb)
{
	const json_t *net = json_object_get(sb, "network");

	if (!json_is_object(net))
		fail_msg("sandbox '%s' has no network object", conf_str(sb, "id"));
	return net;
}

static const char *
dump(const json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	return conf_keep(s ? s : strdup("(nothing)"));
}

/* A list in normal form: strings, lowercase, no trailing dot, sorted, each once. */
static void
assert_normal_list(const json_t *net, const char *key)
{
	const json_t *list = json_object_get(net, key), *v;
	const char *prev = NULL;
	size_t i;

	if (!json_is_array(list))
		fail_msg("network.%s is not an array: %s", key, dump(net));
	json_array_foreach ((json_t *)list, i, v) {
		const char *s = json_string_value(v);
		if (!s || !*s)
			fail_msg("network.%s[%zu] is not a name: %s", key, i, dump(net));
		for (const char *p = s; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				fail_msg("network.%s keeps '%s' in upper case: %s", key, s,
				         dump(net));
		if (s[strlen(s) - 1] == '.')
			fail_msg("network.%s keeps the trailing dot of '%s': %s", key, s,
			         dump(net));
		if (prev && strcmp(prev, s) >= 0)
			fail_msg("network.%s is not sorted and free of duplicates ('%s' before "
			         "'%s'): %s",
			         key, prev, s, dump(net));
		prev = s;
	}
}

/* The request's network, as the create body that asks for it. */
static const char *
net_body(const char *net_json)
{
	return conf_fmt("{\"network\":%s}", net_json);
}

static const char *
sandbox_path(const char *ref)
{
	return conf_fmt("/v1/sandboxes/%s", ref);
}

/* A request that must fail with want_status/want_code; returns the error body. */
static json_t *
expect_error(const char *method, const char *path, const char *body, long want_status,
             const char *want_code)
{
	json_t *j;
	long status = conf_request(method, path, body, &j);

	if (status != want_status)
		fail_msg("%s %s %s: expected %ld %s, got %ld: %s", method, path, body ? body : "",
		         want_status, want_code, status, dump(j));
	conf_assert_error(status, j, want_status, want_code);
	return j;
}

/* Two JSON arrays of strings hold the same strings (in any order). */
static bool
same_names(const json_t *a, const json_t *b)
{
	const json_t *v;
	size_t i;

	if (json_array_size(a) != json_array_size(b))
		return false;
	json_array_foreach ((json_t *)a, i, v)
		if (!json_is_string(v) || conf_index_of(b, json_string_value(v)) < 0)
			return false;
	return true;
}

/* What GET says the sandbox's network is now. */
static json_t *
current_network(const char *id)
{
	return json_incref((json_t *)network_of(conf_get(id)));
}

/* A PATCH that must be refused with want_status/want_code and leave the network as it was. */
static void
patch_refused(const char *id, const json_t *before, const char *body, long want_status,
              const char *want_code)
{
	json_t *now;

	expect_error("PATCH", sandbox_path(id), body, want_status, want_code);
	now = conf_keep_json(current_network(id));
	if (!json_equal(now, (json_t *)before))
		fail_msg("PATCH %s was refused but changed the network from %s to %s", body,
		         dump(before), dump(now));
}

/* ---- modes ---- */

/* An unknown mode, allow without allowlist, and unknown fields are 400. */
void
case_invalid_network_is_rejected(void **state)
{
	static const char *const bad[] = {
		"{\"network\":{\"mode\":\"bogus\"}}",
		"{\"network\":{\"mode\":\"OPEN\"}}",
		"{\"network\":{\"mode\":\"none\",\"allow\":[\"example.com\"]}}",
		"{\"network\":{\"mode\":\"open\",\"allow\":[\"example.com\"]}}",
		"{\"network\":{\"mode\":\"none\",\"bogus\":1}}",
		"{\"network\":{\"mode\":1}}",
		"{\"network\":\"open\"}",
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		conf_create_refused(bad[i], 400, "invalid_request");
	/* the positive control: a well-formed network within any ceiling */
	assert_string_equal(
	        conf_str(network_of(conf_create("{\"network\":{\"mode\":\"none\"}}")), "mode"),
	        "none");
}

/* A mode above capabilities.network.ceiling is 403 refused; tightening is allowed. */
void
case_network_above_ceiling_is_refused(void **state)
{
	static const char *const modes[] = { "none", "allowlist", "open" };
	int top = ceiling_rank();

	if (top < 0)
		fail_msg("capabilities.network.ceiling is '%s', not none, allowlist or open",
		         ceiling());
	for (int m = top + 1; m < (int)ARRAY_SIZE(modes); m++) {
		const char *name = conf_name("net");
		conf_create_refused(
		        conf_fmt("{\"name\":\"%s\",\"network\":{\"mode\":\"%s\"}}", name, modes[m]),
		        403, "refused");
		expect_error("GET", sandbox_path(name), NULL, 404, "not_found");
	}
	for (int m = 0; m <= top; m++) {
		/* an allowlist needs names: the default list's, or one the request may add */
		const char *net =
		        m == 1 ? granted_allowlist("") : conf_fmt("{\"mode\":\"%s\"}", modes[m]);
		json_t *sb;
		if (!net) {
			print_message("note: no allowlist can be granted here (no names); mode "
			              "allowlist was not tried\n");
			continue;
		}
		sb = conf_create(net_body(net));
		assert_string_equal(conf_str(network_of(sb), "mode"), modes[m]);
	}
	if (top >= 2) {
		print_message("skip: the ceiling is open; no mode is above it\n");
		skip();
	}
}

/* ---- allow lists ---- */

/* An allowlist that ends up empty reaches nothing and is refused 403, whether the request
 * said "allow": [] or left allow out (or null) over an empty default list; on create and on
 * PATCH. Over a default list that holds names, leaving allow out is granted that list. */
void
case_empty_allowlist_is_refused(void **state)
{
	static const char *const defaulted[] = {
		"{\"mode\":\"allowlist\"}",
		"{\"mode\":\"allowlist\",\"allow\":null}",
		"{\"mode\":\"allowlist\",\"deny\":[\"cf-deny.example.com\"]}",
	};
	bool empty_default = json_array_size(default_allow()) == 0;
	const char *granted, *id, *name;
	json_t *before, *j;

	need_allowlist();
	name = conf_name("empty");
	conf_create_refused(
	        conf_fmt("{\"name\":\"%s\",\"network\":{\"mode\":\"allowlist\",\"allow\":[]}}",
	                 name),
	        403, "refused");
	expect_error("GET", sandbox_path(name), NULL, 404, "not_found");
	for (size_t i = 0; i < ARRAY_SIZE(defaulted); i++) {
		if (empty_default) {
			name = conf_name("empty");
			conf_create_refused(
			        conf_fmt("{\"name\":\"%s\",\"network\":%s}", name, defaulted[i]),
			        403, "refused");
			expect_error("GET", sandbox_path(name), NULL, 404, "not_found");
		} else {
			/* the default list, which holds names, is granted */
			assert_string_equal(
			        conf_str(network_of(conf_create(net_body(defaulted[i]))), "mode"),
			        "allowlist");
		}
	}
	/* PATCH the same ways, on a sandbox whose network is granted */
	granted = granted_allowlist("");
	j = conf_create(net_body(granted ? granted : "{\"mode\":\"none\"}"));
	id = conf_str(j, "id");
	before = conf_keep_json(json_deep_copy(network_of(j)));
	patch_refused(id, before, "{\"network\":{\"mode\":\"allowlist\",\"allow\":[]}}", 403,
	              "refused");
	if (empty_default)
		for (size_t i = 0; i < ARRAY_SIZE(defaulted); i++)
			patch_refused(id, before, conf_fmt("{\"network\":%s}", defaulted[i]), 403,
			              "refused");
	if (!empty_default)
		print_message("note: the default allow list holds names, so an absent allow was "
		              "granted it; the refusal over an empty default list was not tried\n");
}

/* "allow": null and an absent allow both mean the server's default list. */
void
case_allow_null_or_absent_is_the_default_list(void **state)
{
	static const char *const nets[] = {
		"{\"mode\":\"allowlist\"}",
		"{\"mode\":\"allowlist\",\"allow\":null}",
	};
	const json_t *def = default_allow();

	need_allowlist();
	if (!json_is_array(def))
		fail_msg("capabilities.network.default.allow is not an array: %s",
		         dump(caps_network()));
	if (json_array_size(def) == 0) {
		/* an empty default list ends up an empty allowlist: refused */
		for (size_t i = 0; i < ARRAY_SIZE(nets); i++)
			conf_create_refused(net_body(nets[i]), 403, "refused");
		print_message("note: the default allow list is empty, so both were refused "
		              "(empty_allowlist_is_refused)\n");
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(nets); i++) {
		const json_t *net = network_of(conf_create(net_body(nets[i])));
		assert_string_equal(conf_str(net, "mode"), "allowlist");
		if (!same_names(json_object_get(net, "allow"), def))
			fail_msg("network %s got allow %s; the default list is %s", nets[i],
			         dump(json_object_get(net, "allow")), dump(def));
	}
}

/* A name the request adds must be in the default list or within may_allow. */
void
case_names_outside_may_allow_are_refused(void **state)
{
	const char *outside, *inside, *name;
	json_t *j;

	need_allowlist();
	outside = outside_name();
	if (!outside) {
		print_message("skip: may_allow is \"*\": a request may add any name\n");
		skip();
	}
	name = conf_name("outside");
	j = conf_create_refused(
	        conf_fmt(
	                "{\"name\":\"%s\",\"network\":{\"mode\":\"allowlist\",\"allow\":[\"%s\"]}}",
	                name, outside),
	        403, "refused");
	if (!strstr(conf_error_message(j), outside))
		fail_msg("the refusal does not name '%s': '%s'", outside, conf_error_message(j));
	expect_error("GET", sandbox_path(name), NULL, 404, "not_found");
	/* one refused name refuses the whole list, even next to a grantable one */
	inside = grantable_name();
	if (inside)
		conf_create_refused(net_body(conf_fmt("{\"mode\":\"allowlist\",\"allow\":[\"%s\","
		                                      "\"%s\"]}",
		                                      inside, outside)),
		                    403, "refused");
	/* the positive control: what the policy grants */
	if (!inside) {
		print_message("note: neither may_allow nor the default list holds a name: no "
		              "allowlist is granted here, so there is no positive control\n");
		return;
	}
	j = conf_create(net_body(conf_fmt("{\"mode\":\"allowlist\",\"allow\":[\"%s\"]}", inside)));
	if (conf_index_of(json_object_get(network_of(j), "allow"), inside) < 0)
		fail_msg("allow [\"%s\"] was granted but is not in the sandbox's list: %s", inside,
		         dump(network_of(j)));
}

/* A wildcard is allowed only by "*" or an equal or broader wildcard in may_allow (or
 * the default list); a name there does not allow a wildcard below it. */
void
case_wildcards_need_an_equal_or_broader_wildcard(void **state)
{
	const json_t *lists[] = { may_allow(), default_allow() }, *v;
	bool refused_one = false, granted_one = false;
	size_t i;

	need_allowlist();
	if (json_array_size(may_allow()) == 0 && json_array_size(default_allow()) == 0) {
		print_message("skip: may_allow and the default list are empty: no name, let "
		              "alone a wildcard, may be added\n");
		skip();
	}
	if (may_allow_anything()) {
		/* "*" allows every wildcard: only the granting side can be checked */
		const char *w = conf_fmt("*.cf-%s.example.com", conf_run_id());
		json_t *sb = conf_create(
		        net_body(conf_fmt("{\"mode\":\"allowlist\",\"allow\":[\"%s\"]}", w)));
		assert_int_equal(conf_index_of(json_object_get(network_of(sb), "allow"), w), 0);
		print_message("skip: may_allow is \"*\": every wildcard is allowed, none can be "
		              "refused\n");
		skip();
	}
	for (size_t l = 0; l < ARRAY_SIZE(lists); l++)
		json_array_foreach ((json_t *)lists[l], i, v) {
			const char *e = json_string_value(v), *narrower, *parent;
			if (!e)
				continue;
			if (e[0] == '*' && e[1] == '.') {
				/* itself and a narrower wildcard are allowed */
				narrower = conf_fmt("*.cf.%s", e + 2);
				conf_create(net_body(
				        conf_fmt("{\"mode\":\"allowlist\",\"allow\":[\"%s\","
				                 "\"%s\"]}",
				                 e, narrower)));
				granted_one = true;
				/* a broader one is not, unless something else covers it */
				parent = strchr(e + 2, '.');
				if (parent && strchr(parent + 1, '.') &&
				    !grantable(conf_fmt("*%s", parent))) {
					conf_create_refused(
					        net_body(conf_fmt("{\"mode\":\"allowlist\","
					                          "\"allow\":[\"*%s\"]}",
					                          parent)),
					        403, "refused");
					refused_one = true;
				}
			} else if (!grantable(conf_fmt("*.%s", e))) {
				/* a name allows itself, not the names below it */
				conf_create_refused(
				        net_body(conf_fmt("{\"mode\":\"allowlist\",\"allow\":[\"*."
				                          "%s\"]}",
				                          e)),
				        403, "refused");
				conf_create(net_body(conf_fmt(
				        "{\"mode\":\"allowlist\",\"allow\":[\"%s\"]}", e)));
				refused_one = granted_one = true;
			}
		}
	/* a wildcard outside everything */
	{
		const char *outside = outside_name();
		if (outside && !grantable(conf_fmt("*.%s", outside))) {
			conf_create_refused(
			        net_body(conf_fmt("{\"mode\":\"allowlist\",\"allow\":[\"*.%s\"]}",
			                          outside)),
			        403, "refused");
			refused_one = true;
		}
	}
	if (!granted_one) {
		print_message("skip: neither may_allow nor the default list holds an entry a "
		              "wildcard could be granted by (one was refused: %s)\n",
		              refused_one ? "yes" : "no");
		skip();
	}
}

/* ---- names ---- */

/* Names are lowercased, their trailing dot stripped, deduplicated and sorted. */
void
case_network_names_are_normalised(void **state)
{
	const json_t *net;
	const char *name;
	json_t *sb;

	need_allowlist();
	sb = conf_create(net_body(need_granted_allowlist(
	        ",\"deny\":[\"Gist.GitHub.com.\",\"gist.github.com\",\"a.example.com\"]")));
	net = network_of(sb);
	assert_normal_list(net, "deny");
	assert_normal_list(net, "allow");
	if (conf_index_of(json_object_get(net, "deny"), "gist.github.com") < 0 ||
	    conf_index_of(json_object_get(net, "deny"), "a.example.com") < 0)
		fail_msg("deny [\"Gist.GitHub.com.\",\"gist.github.com\",\"a.example.com\"] came "
		         "back as %s",
		         dump(json_object_get(net, "deny")));
	/* GET tells the same */
	if (!json_equal((json_t *)net, (json_t *)network_of(conf_get(conf_str(sb, "id")))))
		fail_msg("GET shows another network than the create answered: %s",
		         dump(network_of(conf_get(conf_str(sb, "id")))));

	/* an allowed name, written in capitals with a dot, and again as it is */
	name = grantable_name();
	if (!name) {
		print_message("note: no name may be added to an allow list here; only deny was "
		              "checked\n");
		return;
	}
	{
		char *upper = conf_fmt("%s.", name);
		for (char *p = upper; *p; p++)
			if (*p >= 'a' && *p <= 'z')
				*p = (char)(*p - 'a' + 'A');
		net = network_of(conf_create(net_body(conf_fmt(
		        "{\"mode\":\"allowlist\",\"allow\":[\"%s\",\"%s\"]}", upper, name))));
		assert_normal_list(net, "allow");
		if (json_array_size(json_object_get(net, "allow")) != 1 ||
		    conf_index_of(json_object_get(net, "allow"), name) != 0)
			fail_msg("allow [\"%s\",\"%s\"] came back as %s; expected [\"%s\"]", upper,
			         name, dump(json_object_get(net, "allow")), name);
	}
}

/* A scheme, a port, a path, an IP literal or a bare "*" is not a name: 400, in allow
 * and in deny. */
void
case_malformed_network_names_are_rejected(void **state)
{
	static const char *const bad[] = {
		"https://example.com/path",
		"https://example.com",
		"example.com:443",
		"example.com/path",
		"192.0.2.1",
		"::1",
		"[2001:db8::1]",
		"*",
		"",
		"exa mple.com",
		"*.*.example.com",
		"www.*.example.com",
	};
	static const char *const keys[] = { "allow", "deny" };

	need_allowlist();
	for (size_t k = 0; k < ARRAY_SIZE(keys); k++)
		for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
			conf_create_refused(net_body(conf_fmt("{\"mode\":\"allowlist\",\"%s\":"
			                                      "[\"%s\"]}",
			                                      keys[k], bad[i])),
			                    400, "invalid_request");
	/* the positive control: a good name in deny (deny only tightens) */
	conf_create(net_body(need_granted_allowlist(",\"deny\":[\"example.com\"]")));
}

/* ---- live updates ---- */

/* PATCH network follows the create rules (400 for what is malformed, 403 for what the
 * policy refuses); a refused update leaves the old policy (and the other fields) in place; a
 * terminated sandbox cannot change (409) and a missing one is 404. */
void
case_network_update_follows_the_same_rules(void **state)
{
	static const char *const modes[] = { "none", "allowlist", "open" };
	static const char *const malformed[] = {
		"{\"network\":{\"mode\":\"bogus\"}}",
		"{\"network\":{\"mode\":\"none\",\"allow\":[\"example.com\"]}}",
		"{\"network\":{\"mode\":\"open\",\"allow\":[\"example.com\"]}}",
		"{\"network\":{\"mode\":\"none\",\"bogus\":1}}",
		"{\"network\":\"open\"}",
	};
	const char *rich = ceiling_rank() >= conf_net_mode_rank("allowlist")
	                           ? granted_allowlist(",\"deny\":[\"cf-deny.example.com\"]")
	                           : NULL;
	bool allowlist = rich != NULL;
	const char *id, *name, *outside;
	json_t *sb, *before, *same, *j;

	/* start from the richest policy the server grants */
	sb = conf_create(net_body(rich ? rich : "{\"mode\":\"none\"}"));
	id = conf_str(sb, "id");
	name = conf_str(sb, "name");
	before = conf_keep_json(current_network(id));

	for (size_t i = 0; i < ARRAY_SIZE(malformed); i++)
		patch_refused(id, before, malformed[i], 400, "invalid_request");
	if (allowlist) {
		patch_refused(id, before,
		              "{\"network\":{\"mode\":\"allowlist\",\"allow\":[\"https://example."
		              "com/path\"]}}",
		              400, "invalid_request");
		patch_refused(id, before,
		              "{\"network\":{\"mode\":\"allowlist\",\"deny\":[\"192.0.2.1\"]}}",
		              400, "invalid_request");
		patch_refused(id, before, "{\"network\":{\"mode\":\"allowlist\",\"allow\":[]}}",
		              403, "refused");
		if (json_array_size(default_allow()) == 0)
			patch_refused(id, before, "{\"network\":{\"mode\":\"allowlist\"}}", 403,
			              "refused");
		outside = outside_name();
		if (outside)
			patch_refused(id, before,
			              conf_fmt("{\"network\":{\"mode\":\"allowlist\",\"allow\":"
			                       "[\"%s\"]}}",
			                       outside),
			              403, "refused");
	}
	for (int m = ceiling_rank() + 1; m < (int)ARRAY_SIZE(modes); m++) {
		patch_refused(id, before, conf_fmt("{\"network\":{\"mode\":\"%s\"}}", modes[m]),
		              403, "refused");
		/* one refused field changes nothing: the label next to it is not applied */
		patch_refused(id, before,
		              conf_fmt("{\"labels\":{\"cf-patched\":\"1\"},\"network\":{\"mode\":"
		                       "\"%s\"}}",
		                       modes[m]),
		              403, "refused");
		if (*conf_str(json_object_get(conf_get(id), "labels"), "cf-patched"))
			fail_msg("a refused PATCH applied its labels");
	}

	/* the positive control: the policy it has, asked for again, is granted */
	same = json_deep_copy(before);
	conf_keep_json(same);
	if (json_array_size(json_object_get(same, "allow")) == 0)
		json_object_del(same, "allow"); /* [] would be refused */
	if (streq(conf_str(same, "mode"), "none"))
		json_object_del(same, "deny");
	assert_int_equal(conf_request("PATCH", sandbox_path(id),
	                              conf_fmt("{\"network\":%s}", dump(same)), &j),
	                 200);
	if (!json_equal((json_t *)network_of(j), before))
		fail_msg("PATCH with the sandbox's own network %s changed it to %s", dump(same),
		         dump(network_of(j)));

	/* and a real change, tightening to none, where the server can make one */
	if (allowlist) {
		long status = conf_request("PATCH", sandbox_path(id),
		                           "{\"network\":{\"mode\":\"none\"}}", &j);
		if (conf_capability("network_policy_update")) {
			if (status != 200)
				fail_msg("PATCH network mode none (tightening) answered %ld: %s",
				         status, dump(j));
			assert_string_equal(conf_str(network_of(j), "mode"), "none");
			assert_string_equal(conf_str(network_of(conf_get(id)), "mode"), "none");
		} else {
			conf_assert_error(status, j, 501, "unsupported");
			if (!json_equal(conf_keep_json(current_network(id)), before))
				fail_msg("an unsupported network update changed the network");
		}
	}

	/* a terminated sandbox cannot change: 409 by its id, 404 by its (freed) name */
	assert_int_equal(conf_request("DELETE", sandbox_path(id), NULL, NULL), 204);
	expect_error("PATCH", sandbox_path(id), "{\"network\":{\"mode\":\"none\"}}", 409,
	             "conflict");
	expect_error("PATCH", sandbox_path(name), "{\"network\":{\"mode\":\"none\"}}", 404,
	             "not_found");
	expect_error("PATCH", sandbox_path(conf_random_id()), "{\"network\":{\"mode\":\"none\"}}",
	             404, "not_found");
}

/* ---- isolation between sandboxes ---- */

#define PORT 9999
#define PORT_HEX "270F"

/* POST …/run with argv sh -c script; returns the exit code and stdout (owned by the case). */
static long long
sh(const char *id, const char *script, const char **ret_out)
{
	json_t *argv = json_pack("[s, s, s]", "sh", "-c", script), *body, *j;
	_cleanup_buf_ struct buf out = BUF_INIT(1 << 20);
	const json_t *b64;
	long status;

	body = json_pack("{s:o, s:i}", "argv", argv, "timeout_secs", 60);
	if (!body)
		fail_msg("out of memory");
	conf_keep_json(body);
	status = conf_request("POST", conf_fmt("/v1/sandboxes/%s/run", id), dump(body), &j);
	if (status != 200 || !json_is_integer(json_object_get(j, "exit_code")))
		fail_msg("POST run %s in %s: expected 200 with an exit_code, got %ld: %s", script,
		         id, status, dump(j));
	b64 = json_object_get(j, "stdout");
	if (ret_out) {
		if (!json_is_string(b64) ||
		    base64_decode(&out, json_string_value(b64), json_string_length(b64)) < 0)
			fail_msg("run %s: stdout is not base64: %s", script, dump(j));
		*ret_out = conf_keep(out.data ? buf_steal(&out) : strdup(""));
	}
	return json_integer_value(json_object_get(j, "exit_code"));
}

/* The guest's first IPv4 address other than loopback ("" when it has none), from ip(8) or,
 * without it, the kernel's table of local addresses. */
static const char *
guest_address(const char *id)
{
	static const char script[] =
	        "a=$(ip -o -f inet addr show 2>/dev/null | awk '$2 != \"lo\" { split($4, x, "
	        "\"/\"); print x[1]; exit }')\n"
	        "[ -n \"$a\" ] || a=$(awk '/32 host LOCAL/ { if (p !~ /^127\\./) { print p; exit "
	        "} } { p = $2 }' /proc/net/fib_trie 2>/dev/null)\n"
	        "echo \"$a\"\n";
	const char *out;
	char *a;
	size_t n;

	if (sh(id, script, &out) != 0)
		fail_msg("finding the address of %s failed", id);
	a = conf_fmt("%s", out);
	n = strcspn(a, "\r\n");
	a[n] = '\0';
	if (*a && strspn(a, "0123456789.") != n)
		fail_msg("sandbox %s: '%s' is not an IPv4 address", id, a);
	return a;
}

/* Starts `nc -l -p PORT` in the sandbox, which writes what it receives to file, and waits
 * until it listens. */
static void
listen_in(const char *id, const char *file)
{
	const char *cmd = conf_fmt("nc -l -p %d </dev/null >%s 2>&1", PORT, file);
	json_t *argv = json_pack("[s, s, s]", "sh", "-c", cmd), *body, *j;
	long status;

	body = conf_keep_json(json_pack("{s:o}", "argv", argv));
	status = conf_request("POST", conf_fmt("/v1/sandboxes/%s/processes", id), dump(body), &j);
	if (status != 201 || !json_is_integer(json_object_get(j, "pid")))
		fail_msg("starting %s in %s: expected 201 with a pid, got %ld: %s", cmd, id, status,
		         dump(j));
	conf_defer_request("POST",
	                   conf_fmt("/v1/sandboxes/%s/processes/%lld/signal", id,
	                            (long long)json_integer_value(json_object_get(j, "pid"))),
	                   "{\"signal\":\"KILL\"}");
	if (sh(id,
	       "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do "
	       "grep -qE ':" PORT_HEX " [0-9A-F]+:0000 0A' /proc/net/tcp /proc/net/tcp6 "
	       "2>/dev/null && exit 0; sleep 0.5; done; exit 1",
	       NULL) != 0)
		fail_msg("'%s' in %s is not listening after 10 s", cmd, id);
}

/* Sends marker to addr:PORT from the sandbox with nc; returns nc's exit code. */
static long long
probe(const char *id, const char *addr, const char *marker)
{
	return sh(id, conf_fmt("echo %s | timeout 15 nc -w 3 %s %d", marker, addr, PORT), NULL);
}

/* Whether the listener's file in the sandbox holds marker (waiting up to 5 s for it). */
static bool
received(const char *id, const char *file, const char *marker)
{
	return sh(id,
	          conf_fmt("for i in 1 2 3 4 5 6 7 8 9 10; do grep -q %s %s && exit 0; "
	                   "sleep 0.5; done; exit 1",
	                   marker, file),
	          NULL) == 0;
}

/* With networking on, neither sandbox can open a connection to the other, in either
 * direction, while each can reach its own listener on the same address (the control that
 * proves the listener and the address were real). */
void
case_sandboxes_cannot_reach_each_other(void **state)
{
	const char *file = conf_fmt("/tmp/cf-%s-nc", conf_run_id());
	const char *ids[2], *addrs[2], *names[2] = { "a", "b" };

	conf_need_capability("processes");
	if (ceiling_rank() < conf_net_mode_rank("allowlist")) {
		print_message("skip: the network ceiling is '%s': sandboxes have no network to "
		              "reach each other over\n",
		              ceiling());
		skip();
	}
	for (int i = 0; i < 2; i++)
		ids[i] = conf_str(conf_create(net_body(need_granted_allowlist(""))), "id");
	for (int i = 0; i < 2; i++) {
		addrs[i] = guest_address(ids[i]);
		if (!*addrs[i]) {
			print_message(
			        "skip: sandbox %s has no address besides loopback: no network "
			        "to probe\n",
			        ids[i]);
			skip();
		}
	}
	if (streq(addrs[0], addrs[1])) {
		/* each on a link of its own with the same address: the other's address is
		 * its own, so there is nothing to aim at */
		print_message("skip: both sandboxes have the address %s\n", addrs[0]);
		skip();
	}
	for (int i = 0; i < 2; i++)
		listen_in(ids[i], file);
	/* each tries the other: nothing may arrive */
	for (int i = 0; i < 2; i++) {
		int other = 1 - i;
		const char *marker = conf_fmt("cf-from-%s-%s", names[i], conf_run_id());
		long long rc = probe(ids[i], addrs[other], marker);
		if (received(ids[other], file, marker))
			fail_msg("sandbox %s (%s) reached sandbox %s on %s:%d", names[i], ids[i],
			         names[other], addrs[other], PORT);
		if (rc == 0)
			fail_msg("nc from sandbox %s to sandbox %s (%s:%d) succeeded", names[i],
			         names[other], addrs[other], PORT);
	}
	/* the control: each reaches its own listener on its own address */
	for (int i = 0; i < 2; i++) {
		const char *marker = conf_fmt("cf-self-%s-%s", names[i], conf_run_id());
		long long rc = probe(ids[i], addrs[i], marker);
		if (rc != 0 || !received(ids[i], file, marker))
			fail_msg(
			        "the control failed: nc in sandbox %s to its own %s:%d (exit %lld) "
			        "did not reach its listener",
			        names[i], addrs[i], PORT, rc);
	}
}
