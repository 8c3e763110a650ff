/* test-matcher.c: egress/matcher.c, a sandbox's network policy compiled for the egress
 * worker: a table of policies and hosts, each decided with the rule that decided it, and what
 * a policy the worker should never get (not an object, an unknown mode, lists that are not
 * arrays of strings) compiles into. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "matcher.h"
#include "util.h"

static json_t *
parse(const char *text)
{
	json_error_t e;
	json_t *v = json_loads(text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);

	if (!v)
		fail_msg("test case JSON '%s': %s", text, e.text);
	return v;
}

/* ---- decisions ---- */

#define ALLOW_EX "{\"mode\":\"allowlist\",\"allow\":[\"example.com\"],\"deny\":[]}"
#define ALLOW_WILD                                                                                 \
	"{\"mode\":\"allowlist\",\"allow\":[\"*.example.com\"],\"deny\":[\"bad.example.com\"]}"
#define OPEN_DENY "{\"mode\":\"open\",\"allow\":[],\"deny\":[\"*.ads.net\",\"tracker.io\"]}"

static const struct allows_case {
	const char *net, *host;
	bool want;
	const char *reason;
} allows_cases[] = {
	{ ALLOW_EX, "example.com", true, "on the allow list" },
	{ ALLOW_EX, "EXAMPLE.COM.", true, "on the allow list" },
	{ ALLOW_EX, "www.example.com", false, "not on the allow list" },
	{ ALLOW_EX, "1.2.3.4", false, "not a host name" },
	{ ALLOW_EX, "example.com:443", false, "not a host name" },
	{ ALLOW_EX, "", false, "not a host name" },
	{ ALLOW_WILD, "a.b.example.com", true, "on the allow list" },
	{ ALLOW_WILD, "example.com", false, "not on the allow list" },
	{ ALLOW_WILD, "badexample.com", false, "not on the allow list" },
	{ ALLOW_WILD, "bad.example.com", false, "on the deny list" },
	{ ALLOW_WILD, "x.bad.example.com", true, "on the allow list" },
	{ ALLOW_WILD, "*.example.com", false, "a wildcard is not a host" },
	/* deny wins over allow, wildcards included */
	{ "{\"mode\":\"allowlist\",\"allow\":[\"bad.example.com\"],\"deny\":[\"*.example.com\"]}",
	  "bad.example.com", false, "on the deny list" },
	{ "{\"mode\":\"allowlist\",\"allow\":[\"*.example.com\"],\"deny\":[\"*.example.com\"]}",
	  "a.example.com", false, "on the deny list" },
	/* open: everything but the deny list */
	{ OPEN_DENY, "x.ads.net", false, "on the deny list" },
	{ OPEN_DENY, "Tracker.IO", false, "on the deny list" },
	{ OPEN_DENY, "ads.net", true, "network mode open" },
	{ OPEN_DENY, "example.org", true, "network mode open" },
	{ OPEN_DENY, "1.2.3.4", true, "network mode open" },
	{ OPEN_DENY, "[2001:db8::1]", true, "network mode open" },
	{ OPEN_DENY, "exa mple.org", false, "not a host name" },
	{ "{\"mode\":\"none\",\"allow\":[],\"deny\":[]}", "example.com", false,
	  "network mode none" },
	/* an allow list never means everything */
	{ "{\"mode\":\"allowlist\",\"allow\":[\"*\"],\"deny\":[]}", "example.com", false,
	  "not on the allow list" },
	/* "*" denies every name; what is not a string grants nothing */
	{ "{\"mode\":\"open\",\"allow\":[],\"deny\":[\"*\"]}", "example.com", false,
	  "on the deny list" },
	{ "{\"mode\":\"open\",\"allow\":[],\"deny\":[\"*\"]}", "10.0.0.1", true,
	  "network mode open" },
	{ "{\"mode\":\"allowlist\",\"allow\":[5,null,\"example.com\"],\"deny\":[]}", "example.com",
	  true, "on the allow list" },
	/* what netpolicy_resolve did not make is refused whole: a deny list that is not all
	 * names refuses every name, even one an entry before the odd one matches */
	{ "{\"mode\":\"allowlist\",\"allow\":[\"example.com\"],\"deny\":[\"example.com\",5]}",
	  "example.com", false, "malformed network policy" },
	{ "{\"mode\":\"none\",\"deny\":[5]}", "example.com", false, "network mode none" },
	{ "{\"mode\":\"bogus\",\"allow\":[\"example.com\"]}", "example.com", false,
	  "malformed network policy" },
	{ "{\"mode\":\"open\",\"deny\":\"x.com\"}", "example.com", false,
	  "malformed network policy" },
	{ "{\"mode\":\"open\",\"deny\":[5]}", "example.com", false, "malformed network policy" },
	{ "{\"allow\":[\"example.com\"]}", "example.com", false, "malformed network policy" },
	{ "null", "example.com", false, "no network policy" },
};

/* The decision as the worker makes it: net compiled, host decided. */
static bool
allows(const char *net_text, const char *host, const char **ret_reason)
{
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	json_t *net = parse(net_text);

	assert_int_equal(matcher_new(net, &m), 0);
	json_decref(net);
	return matcher_allows(m, host, ret_reason);
}

static void
test_allows(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(allows_cases); i++) {
		const struct allows_case *c = &allows_cases[i];
		const char *reason = NULL;
		bool got = allows(c->net, c->host, &reason);

		if (got != c->want)
			fail_msg("%s, host '%s': %s (%s), want %s", c->net, c->host,
			         got ? "allowed" : "refused", reason,
			         c->want ? "allowed" : "refused");
		assert_non_null(reason);
		if (!streq(reason, c->reason))
			fail_msg("%s, host '%s': reason '%s', want '%s'", c->net, c->host, reason,
			         c->reason);
	}
	assert_false(matcher_allows(NULL, "example.com", NULL));
	assert_false(allows("{\"mode\":\"open\",\"allow\":[],\"deny\":[]}", NULL, NULL));
}

/* Every name of long lists is found, and no other: exact names, wildcards of every depth,
 * and a host below none of them. */
static void
test_long_lists(void **state)
{
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	json_t *net = json_pack("{s:s, s:[], s:[]}", "mode", "allowlist", "allow", "deny");
	json_t *allow = json_object_get(net, "allow"), *deny = json_object_get(net, "deny");
	char name[64];
	const char *reason;

	(void)state;
	for (int i = 0; i < MATCHER_LIST_MAX; i++) {
		snprintf(name, sizeof(name), "%sh%03d.example.com", i % 2 ? "*." : "", i);
		json_array_append_new(allow, json_string(name));
		snprintf(name, sizeof(name), "%sd%03d.example.com", i % 2 ? "*." : "", i);
		json_array_append_new(deny, json_string(name));
	}
	assert_int_equal(matcher_new(net, &m), 0);
	json_decref(net);
	for (int i = 0; i < MATCHER_LIST_MAX; i++) {
		snprintf(name, sizeof(name), "%sh%03d.example.com", i % 2 ? "x.y." : "", i);
		if (!matcher_allows(m, name, &reason))
			fail_msg("'%s' refused: %s", name, reason);
		/* a wildcard's own domain is not below it */
		snprintf(name, sizeof(name), "h%03d.example.com", i);
		assert_int_equal(matcher_allows(m, name, NULL), i % 2 == 0);
		snprintf(name, sizeof(name), "%sd%03d.example.com", i % 2 ? "a." : "", i);
		assert_false(matcher_allows(m, name, &reason));
		assert_string_equal(reason, "on the deny list");
	}
	assert_false(matcher_allows(m, "example.com", &reason));
	assert_string_equal(reason, "not on the allow list");
	assert_false(matcher_allows(m, "h000.example.com.evil.net", NULL));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allows),
		cmocka_unit_test(test_long_lists),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
