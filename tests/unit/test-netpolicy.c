/* test-netpolicy.c: daemon/net/netpolicy.c, the network policy engine, as tables of cases: names
 * normalised or refused (with the reason), patterns matched, wildcards covering, hosts
 * decided, and requests resolved against policies whose ceiling is open, allowlist and none
 * (status, code and a piece of the message for each refusal). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "api-error.h"
#include "netpolicy.h"
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

static void
assert_json_equal(const json_t *got, const char *want, const char *what)
{
	json_t *w = parse(want);

	if (!json_equal(got, w)) {
		char *g = json_dumps(got, JSON_SORT_KEYS | JSON_ENCODE_ANY);

		fail_msg("%s: got %s, want %s", what, g, want);
	}
	json_decref(w);
}

/* ---- names ---- */

#define LABEL63 "abcdefghij0123456789abcdefghij0123456789abcdefghij0123456789abc"
/* 4 x 63 + 3 dots = 255: cut to 253 and 254 below */
#define NAME255 LABEL63 "." LABEL63 "." LABEL63 "." LABEL63

static const struct name_case {
	const char *in;
	const char *out; /* NULL: refused */
	const char *error;
} name_cases[] = {
	{ "example.com", "example.com", NULL },
	{ "Example.COM", "example.com", NULL },
	{ "example.com.", "example.com", NULL },
	{ "*.Example.com.", "*.example.com", NULL },
	{ "localhost", "localhost", NULL },
	{ "_dmarc.example.com", "_dmarc.example.com", NULL },
	{ "xn--bcher-kva.example", "xn--bcher-kva.example", NULL },
	{ "a-b.c-d.io", "a-b.c-d.io", NULL },
	{ "1.2.3.4.example.com", "1.2.3.4.example.com", NULL },
	{ "0x1f.com", "0x1f.com", NULL },
	{ LABEL63 ".com", LABEL63 ".com", NULL },
	{ "a" LABEL63 ".com", NULL, "a label longer than 63 bytes" },
	{ "", NULL, "an empty name" },
	{ "https://example.com", NULL, "a URL is not a name" },
	{ "https://example.com/path", NULL, "a URL is not a name" },
	{ "example.com/path", NULL, "a path is not allowed" },
	{ "user@example.com", NULL, "a user part is not allowed" },
	{ "example.com:8080", NULL, "a port is not allowed" },
	{ "[::1]", NULL, "an IP address is not a name" },
	{ "::1", NULL, "an IP address is not a name" },
	{ "fe80::1%eth0", NULL, "an IP address is not a name" },
	{ "192.168.0.1", NULL, "an IP address is not a name" },
	{ "10.0.0.1.", NULL, "an IP address is not a name" },
	{ "127.1", NULL, "an IP address is not a name" },
	{ "0x7f000001", NULL, "an IP address is not a name" },
	{ "0177.0.0.1", NULL, "an IP address is not a name" },
	{ "*.0.0.1", NULL, "an IP address is not a name" },
	{ "example.123", NULL, "an IP address is not a name" },
	{ "*", NULL, "a bare '*' is not allowed" },
	{ "*.", NULL, "a bare '*' is not allowed" },
	{ "*example.com", NULL, "'*' may only be the whole first label" },
	{ "a.*.example.com", NULL, "'*' may only be the whole first label" },
	{ "**.example.com", NULL, "'*' may only be the whole first label" },
	{ "*.*.example.com", NULL, "'*' may only be the whole first label" },
	{ "example.*", NULL, "'*' may only be the whole first label" },
	{ "example..com", NULL, "an empty label" },
	{ ".example.com", NULL, "an empty label" },
	{ "example.com..", NULL, "an empty label" },
	{ ".", NULL, "an empty label" },
	{ "exa mple.com", NULL, "' ' is not allowed in a name" },
	{ "example.com?x=1", NULL, "'?' is not allowed in a name" },
	{ "b\xc3\xbc"
	  "cher.de",
	  NULL, "byte 0xc3 is not allowed" },
	/* what a client sent is quoted back printable only */
	{ "ex\tample.com", NULL, "'ex?ample.com': byte 0x09" },
	{ "ex\\ample.com", NULL, "'\\' is not allowed" },
};

static void
test_normalise_name(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(name_cases); i++) {
		const struct name_case *c = &name_cases[i];
		char out[NETPOLICY_NAME_MAX + 1] = "untouched", again[NETPOLICY_NAME_MAX + 1];
		char *error = NULL;
		int r = netpolicy_normalise_name(c->in, out, &error);

		if (c->out) {
			if (r < 0)
				fail_msg("'%s' refused: %s", c->in, error);
			assert_string_equal(out, c->out);
			/* the normal form is a fixed point */
			assert_int_equal(netpolicy_normalise_name(out, again, NULL), 0);
			assert_string_equal(again, out);
			continue;
		}
		if (r != -EINVAL)
			fail_msg("'%s' normalised to '%s', want refused (%s)", c->in, out,
			         c->error);
		assert_non_null(error);
		if (!strstr(error, c->error))
			fail_msg("'%s': error '%s' lacks '%s'", c->in, error, c->error);
		assert_string_equal(out, "untouched");
		free(error);
	}
}

static void
test_name_lengths(void **state)
{
	char in[300], out[NETPOLICY_NAME_MAX + 1];
	char *error = NULL;

	(void)state;
	/* 253 bytes, then 253 with a trailing dot: the longest names */
	snprintf(in, sizeof(in), "%.253s", NAME255);
	assert_int_equal(netpolicy_normalise_name(in, out, NULL), 0);
	assert_int_equal(strlen(out), 253);
	snprintf(in, sizeof(in), "%.253s.", NAME255);
	assert_int_equal(netpolicy_normalise_name(in, out, NULL), 0);
	assert_int_equal(strlen(out), 253);
	snprintf(in, sizeof(in), "%.254s", NAME255);
	assert_int_equal(netpolicy_normalise_name(in, out, &error), -EINVAL);
	assert_non_null(strstr(error, "longer than 253 bytes"));
	free(error);
	/* a long message is cut, not the buffer overrun */
	snprintf(in, sizeof(in), "%s.x", NAME255);
	error = NULL;
	assert_int_equal(netpolicy_normalise_name(in, out, &error), -EINVAL);
	assert_non_null(strstr(error, "...': longer than 253 bytes"));
	free(error);
	/* no error wanted is fine */
	assert_int_equal(netpolicy_normalise_name("*", out, NULL), -EINVAL);
	assert_int_equal(netpolicy_normalise_name(NULL, out, NULL), -EINVAL);
}

static const struct list_case {
	const char *in;
	const char *out; /* NULL: refused */
	const char *error;
} list_cases[] = {
	{ "[]", "[]", NULL },
	{ "[\"b.com\", \"A.com\", \"a.com.\"]", "[\"a.com\", \"b.com\"]", NULL },
	{ "[\"Gist.GitHub.com.\", \"gist.github.com\"]", "[\"gist.github.com\"]", NULL },
	{ "[\"x.com\", \"a.x.com\", \"*.x.com\"]", "[\"*.x.com\", \"a.x.com\", \"x.com\"]", NULL },
	{ "\"example.com\"", NULL, "must be an array of names" },
	{ "null", NULL, "must be an array of names" },
	{ "[\"ok.com\", 5]", NULL, "entry 1 is not a string" },
	{ "[\"ok.com\", \"https://x.com\"]", NULL,
	  "entry 1: 'https://x.com': a URL is not a name" },
	{ "[\"ok.com\", \"*\"]", NULL, "entry 1: '*': a bare '*'" },
};

static void
test_normalise_list(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(list_cases); i++) {
		const struct list_case *c = &list_cases[i];
		json_t *in = parse(c->in), *out = NULL;
		char *error = NULL;
		int r = netpolicy_normalise_list(in, &out, &error);

		if (c->out) {
			if (r < 0)
				fail_msg("%s refused: %s", c->in, error);
			assert_json_equal(out, c->out, c->in);
		} else {
			assert_int_equal(r, -EINVAL);
			assert_null(out);
			if (!strstr(error, c->error))
				fail_msg("%s: error '%s' lacks '%s'", c->in, error, c->error);
		}
		free(error);
		json_decref(out);
		json_decref(in);
	}
}

static void
test_list_limit(void **state)
{
	json_t *names = json_array(), *out = NULL;
	char name[32], *error = NULL;

	(void)state;
	for (int i = 0; i < NETPOLICY_LIST_MAX; i++) {
		snprintf(name, sizeof(name), "h%d.example.com", i);
		json_array_append_new(names, json_string(name));
	}
	assert_int_equal(netpolicy_normalise_list(names, &out, &error), 0);
	assert_int_equal(json_array_size(out), NETPOLICY_LIST_MAX);
	json_decref(out);
	out = NULL;
	json_array_append_new(names, json_string("one-more.example.com"));
	assert_int_equal(netpolicy_normalise_list(names, &out, &error), -EINVAL);
	assert_null(out);
	assert_non_null(strstr(error, "holds 257 names, over the limit of 256"));
	free(error);
	json_decref(names);
}

/* ---- matching ---- */

static const struct pair_case {
	const char *a, *b;
	bool want;
} match_cases[] = {
	{ "example.com", "example.com", true },
	{ "example.com", "www.example.com", false },
	{ "example.com", "example.co", false },
	{ "example.com", "EXAMPLE.com", false }, /* hosts arrive normalised */
	{ "*.example.com", "a.example.com", true },
	{ "*.example.com", "a.b.example.com", true },
	{ "*.example.com", "example.com", false },
	{ "*.example.com", "badexample.com", false },
	{ "*.example.com", "xexample.com", false },
	{ "*.example.com", ".example.com", false },
	{ "*.example.com", "example.com.evil.net", false },
	{ "*", "anything.example", true },
}, covers_cases[] = {
	{ "*", "*.example.com", true },
	{ "*", "example.com", true },
	{ "*.example.com", "a.example.com", true },
	{ "*.example.com", "*.a.example.com", true },
	{ "*.example.com", "*.example.com", true },
	{ "*.example.com", "example.com", false },
	{ "*.example.com", "*.badexample.com", false },
	{ "*.a.example.com", "*.example.com", false },
	{ "*.a.example.com", "b.example.com", false },
	{ "example.com", "example.com", true },
	{ "example.com", "a.example.com", false },
	{ "example.com", "*.example.com", false },
	{ "*.com", "*", false },
	{ "example.com", "*", false },
};

static void
test_match(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(match_cases); i++)
		if (netpolicy_match(match_cases[i].a, match_cases[i].b) != match_cases[i].want)
			fail_msg("match('%s', '%s') should be %s", match_cases[i].a,
			         match_cases[i].b, match_cases[i].want ? "true" : "false");
}

static void
test_covers(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(covers_cases); i++)
		if (netpolicy_covers(covers_cases[i].a, covers_cases[i].b) != covers_cases[i].want)
			fail_msg("covers('%s', '%s') should be %s", covers_cases[i].a,
			         covers_cases[i].b, covers_cases[i].want ? "true" : "false");
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
	/* what this engine did not make is refused whole */
	{ "{\"mode\":\"bogus\",\"allow\":[\"example.com\"]}", "example.com", false,
	  "malformed network policy" },
	{ "{\"mode\":\"open\",\"deny\":\"x.com\"}", "example.com", false,
	  "malformed network policy" },
	{ "{\"mode\":\"open\",\"deny\":[5]}", "example.com", false, "malformed network policy" },
	{ "{\"allow\":[\"example.com\"]}", "example.com", false, "malformed network policy" },
	{ "null", "example.com", false, "no network policy" },
};

static void
test_allows(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(allows_cases); i++) {
		const struct allows_case *c = &allows_cases[i];
		json_t *net = parse(c->net);
		const char *reason = NULL;
		bool got = netpolicy_allows(net, c->host, &reason);

		if (got != c->want)
			fail_msg("%s, host '%s': %s (%s), want %s", c->net, c->host,
			         got ? "allowed" : "refused", reason,
			         c->want ? "allowed" : "refused");
		assert_non_null(reason);
		if (!streq(reason, c->reason))
			fail_msg("%s, host '%s': reason '%s', want '%s'", c->net, c->host, reason,
			         c->reason);
		json_decref(net);
	}
	assert_false(netpolicy_allows(NULL, "example.com", NULL));
}

/* ---- resolving requests ---- */

enum {
	P_OPEN,
	P_ALLOW,
	P_NONE,
	_P_MAX
};

static struct policy policies[_P_MAX];

static void
set_network(struct policy *p, enum net_mode def, enum net_mode ceiling, const char *allow,
            const char *deny, const char *may)
{
	assert_int_equal(policy_init_defaults(p, 4), 0);
	json_decref(p->network.default_allow);
	json_decref(p->network.default_deny);
	json_decref(p->network.may_allow);
	p->network.default_mode = def;
	p->network.ceiling = ceiling;
	p->network.default_allow = parse(allow);
	p->network.default_deny = parse(deny);
	p->network.may_allow = parse(may);
}

static int
setup_policies(void **state)
{
	(void)state;
	/* the server's lists as an operator wrote them: not yet normalised */
	set_network(&policies[P_OPEN], NET_ALLOWLIST, NET_OPEN,
	            "[\"Example.com.\", \"*.github.com\", \"pypi.org\"]", "[\"evil.github.com\"]",
	            "[\"*.example.org\", \"docs.python.org\"]");
	set_network(&policies[P_ALLOW], NET_ALLOWLIST, NET_ALLOWLIST,
	            "[\"pypi.org\", \"files.pythonhosted.org\"]", "[\"ads.example.com\"]",
	            "[\"*\"]");
	set_network(&policies[P_NONE], NET_NONE, NET_NONE, "[]", "[]", "[]");
	return 0;
}

static int
teardown_policies(void **state)
{
	(void)state;
	for (int i = 0; i < _P_MAX; i++)
		policy_done(&policies[i]);
	return 0;
}

#define OPEN_DEFAULT                                                                               \
	"{\"mode\":\"allowlist\",\"allow\":[\"*.github.com\",\"example.com\",\"pypi.org\"],"       \
	"\"deny\":[\"evil.github.com\"]}"
#define ALLOW_DEFAULT                                                                              \
	"{\"mode\":\"allowlist\",\"allow\":[\"files.pythonhosted.org\",\"pypi.org\"],"             \
	"\"deny\":[\"ads.example.com\"]}"
#define NONE_NET "{\"mode\":\"none\",\"allow\":[],\"deny\":[]}"

static const struct resolve_case {
	int policy;
	const char *req;  /* NULL: no "network" at all */
	const char *want; /* NULL: refused */
	int status;
	const char *code, *message;
} resolve_cases[] = {
	/* ceiling open, default allowlist */
	{ P_OPEN, NULL, OPEN_DEFAULT, 0, NULL, NULL },
	{ P_OPEN, "null", OPEN_DEFAULT, 0, NULL, NULL },
	{ P_OPEN, "{}", OPEN_DEFAULT, 0, NULL, NULL },
	{ P_OPEN, "{\"mode\":null,\"allow\":null,\"deny\":null}", OPEN_DEFAULT, 0, NULL, NULL },
	{ P_OPEN, "{\"mode\":\"allowlist\"}", OPEN_DEFAULT, 0, NULL, NULL },
	{ P_OPEN, "{\"mode\":\"open\"}",
	  "{\"mode\":\"open\",\"allow\":[],\"deny\":[\"evil.github.com\"]}", 0, NULL, NULL },
	{ P_OPEN, "{\"mode\":\"none\"}", NONE_NET, 0, NULL, NULL },
	{ P_OPEN, "{\"mode\":\"bogus\"}", NULL, 400, "invalid_request",
	  "unknown network mode 'bogus'" },
	{ P_OPEN, "{\"mode\":\"Open\"}", NULL, 400, "invalid_request", "unknown network mode" },
	{ P_OPEN, "{\"mode\":5}", NULL, 400, "invalid_request", "'network.mode' must be a string" },
	{ P_OPEN, "[]", NULL, 400, "invalid_request", "'network' must be an object" },
	{ P_OPEN, "\"open\"", NULL, 400, "invalid_request", "'network' must be an object" },
	{ P_OPEN, "{\"mode\":\"open\",\"extra\":1}", NULL, 400, "invalid_request",
	  "unknown field 'network.extra'" },
	{ P_OPEN, "{\"mode\":\"open\",\"ex\\ntra\":1}", NULL, 400, "invalid_request",
	  "unknown field 'network.ex?tra'" },
	{ P_OPEN, "{\"allow\":[]}", NULL, 403, "refused", "'network.allow' is empty" },
	{ P_OPEN, "{\"allow\":[\"EXAMPLE.com.\"]}",
	  "{\"mode\":\"allowlist\",\"allow\":[\"example.com\"],\"deny\":[\"evil.github.com\"]}", 0,
	  NULL, NULL },
	/* within a default wildcard: a narrowing of the default list */
	{ P_OPEN, "{\"allow\":[\"api.github.com\", \"*.api.github.com\", \"*.github.com\"]}",
	  "{\"mode\":\"allowlist\",\"allow\":[\"*.api.github.com\",\"*.github.com\","
	  "\"api.github.com\"],\"deny\":[\"evil.github.com\"]}",
	  0, NULL, NULL },
	{ P_OPEN, "{\"allow\":[\"github.com\"]}", NULL, 403, "refused",
	  "'github.com' is neither in this server's default allow list nor within its "
	  "may_allow" },
	/* within may_allow */
	{ P_OPEN, "{\"allow\":[\"a.example.org\", \"*.b.example.org\", \"docs.python.org.\"]}",
	  "{\"mode\":\"allowlist\",\"allow\":[\"*.b.example.org\",\"a.example.org\","
	  "\"docs.python.org\"],\"deny\":[\"evil.github.com\"]}",
	  0, NULL, NULL },
	{ P_OPEN, "{\"allow\":[\"example.org\"]}", NULL, 403, "refused",
	  "'example.org' is neither" },
	{ P_OPEN, "{\"allow\":[\"*.org\"]}", NULL, 403, "refused",
	  "wildcard '*.org' is refused: this server's may_allow holds neither '*' nor an equal "
	  "or broader wildcard" },
	{ P_OPEN, "{\"allow\":[\"*.python.org\"]}", NULL, 403, "refused",
	  "wildcard '*.python.org'" },
	{ P_OPEN, "{\"allow\":[\"pypi.org\", \"evil.net\"]}", NULL, 403, "refused",
	  "'evil.net' is neither" },
	{ P_OPEN, "{\"allow\":[\"https://example.com/path\"]}", NULL, 400, "invalid_request",
	  "'network.allow' entry 0: 'https://example.com/path': a URL is not a name" },
	{ P_OPEN, "{\"allow\":[\"pypi.org\", \"example.com:443\"]}", NULL, 400, "invalid_request",
	  "'network.allow' entry 1: 'example.com:443': a port is not allowed" },
	{ P_OPEN, "{\"allow\":[\"10.0.0.1\"]}", NULL, 400, "invalid_request",
	  "an IP address is not a name" },
	{ P_OPEN, "{\"allow\":[\"*\"]}", NULL, 400, "invalid_request",
	  "a bare '*' is not allowed" },
	{ P_OPEN, "{\"allow\":\"example.com\"}", NULL, 400, "invalid_request",
	  "'network.allow' must be an array of names" },
	{ P_OPEN, "{\"allow\":[1]}", NULL, 400, "invalid_request",
	  "'network.allow' entry 0 is not a string" },
	{ P_OPEN, "{\"mode\":\"open\",\"allow\":[\"example.com\"]}", NULL, 400, "invalid_request",
	  "'network.allow' goes only with mode allowlist" },
	{ P_OPEN, "{\"mode\":\"none\",\"allow\":[\"example.com\"]}", NULL, 400, "invalid_request",
	  "'network.allow' goes only with mode allowlist" },
	{ P_OPEN, "{\"mode\":\"none\",\"deny\":[\"x.com\"]}", NULL, 400, "invalid_request",
	  "'network.deny' has no meaning with mode none" },
	/* deny adds to the server's list: it may only tighten */
	{ P_OPEN, "{\"mode\":\"open\",\"deny\":[\"Gist.GitHub.com.\",\"gist.github.com\"]}",
	  "{\"mode\":\"open\",\"allow\":[],\"deny\":[\"evil.github.com\",\"gist.github.com\"]}", 0,
	  NULL, NULL },
	{ P_OPEN, "{\"mode\":\"open\",\"deny\":[]}",
	  "{\"mode\":\"open\",\"allow\":[],\"deny\":[\"evil.github.com\"]}", 0, NULL, NULL },
	{ P_OPEN, "{\"deny\":[\"*.github.com\", \"anything.net\"]}",
	  "{\"mode\":\"allowlist\",\"allow\":[\"*.github.com\",\"example.com\",\"pypi.org\"],"
	  "\"deny\":[\"*.github.com\",\"anything.net\",\"evil.github.com\"]}",
	  0, NULL, NULL },
	{ P_OPEN, "{\"mode\":\"open\",\"deny\":[\"http://x.com\"]}", NULL, 400, "invalid_request",
	  "'network.deny' entry 0: 'http://x.com': a URL is not a name" },

	/* ceiling allowlist, may_allow "*" */
	{ P_ALLOW, NULL, ALLOW_DEFAULT, 0, NULL, NULL },
	{ P_ALLOW, "{\"mode\":\"open\"}", NULL, 403, "refused",
	  "network mode 'open' is above this server's ceiling 'allowlist'" },
	{ P_ALLOW, "{\"mode\":\"open\",\"deny\":[\"x.com\"]}", NULL, 403, "refused",
	  "above this server's ceiling" },
	{ P_ALLOW, "{\"mode\":\"none\"}", NONE_NET, 0, NULL, NULL },
	{ P_ALLOW, "{\"allow\":[\"anything.net\", \"*.corp.example\"]}",
	  "{\"mode\":\"allowlist\",\"allow\":[\"*.corp.example\",\"anything.net\"],"
	  "\"deny\":[\"ads.example.com\"]}",
	  0, NULL, NULL },
	{ P_ALLOW, "{\"allow\":[]}", NULL, 403, "refused", "would reach nothing" },
	{ P_ALLOW, "{\"allow\":[\"*.*.com\"]}", NULL, 400, "invalid_request",
	  "'*' may only be the whole first label" },
	/* malformed is 400 before above the ceiling is 403 */
	{ P_ALLOW, "{\"mode\":\"open\",\"deny\":[\"bad name\"]}", NULL, 400, "invalid_request",
	  "'network.deny' entry 0: 'bad name'" },
	{ P_ALLOW, "{\"mode\":\"open\",\"allow\":[\"x.com\"]}", NULL, 400, "invalid_request",
	  "goes only with mode allowlist" },

	/* ceiling none */
	{ P_NONE, NULL, NONE_NET, 0, NULL, NULL },
	{ P_NONE, "{}", NONE_NET, 0, NULL, NULL },
	{ P_NONE, "{\"mode\":\"none\"}", NONE_NET, 0, NULL, NULL },
	{ P_NONE, "{\"mode\":\"allowlist\",\"allow\":[\"example.com\"]}", NULL, 403, "refused",
	  "network mode 'allowlist' is above this server's ceiling 'none'" },
	{ P_NONE, "{\"mode\":\"allowlist\"}", NULL, 403, "refused",
	  "network mode 'allowlist' is above this server's ceiling 'none'" },
	{ P_NONE, "{\"mode\":\"open\"}", NULL, 403, "refused",
	  "network mode 'open' is above this server's ceiling 'none'" },
	{ P_NONE, "{\"allow\":[\"example.com\"]}", NULL, 400, "invalid_request",
	  "'network.allow' goes only with mode allowlist" },
	{ P_NONE, "{\"deny\":[\"example.com\"]}", NULL, 400, "invalid_request",
	  "'network.deny' has no meaning with mode none" },
};

static void
test_resolve(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(resolve_cases); i++) {
		const struct resolve_case *c = &resolve_cases[i];
		json_t *req = c->req ? parse(c->req) : NULL, *out = NULL;
		struct err err = {};
		int r = netpolicy_resolve(&policies[c->policy], req, &out, &err);
		char what[512];

		snprintf(what, sizeof(what), "case %zu (policy %d) %s", i, c->policy,
		         c->req ? c->req : "(absent)");
		if (c->want) {
			if (r < 0)
				fail_msg("%s: refused %d %s: %s", what, api_error_status(err.kind),
				         api_error_code(err.kind), err.message);
			assert_int_equal(err.kind, ERR_NONE);
			assert_json_equal(out, c->want, what);
		} else {
			if (r >= 0)
				fail_msg("%s: accepted, want %d %s", what, c->status, c->code);
			assert_int_equal(r, c->status == 403 ? -EPERM : -EINVAL);
			assert_null(out);
			/* what the API answers for it */
			if (api_error_status(err.kind) != c->status ||
			    !streq(api_error_code(err.kind), c->code) ||
			    !strstr(err.message, c->message))
				fail_msg("%s: got %d %s '%s', want %d %s '...%s...'", what,
				         api_error_status(err.kind), api_error_code(err.kind),
				         err.message, c->status, c->code, c->message);
		}
		json_decref(out);
		json_decref(req);
	}
}

/* What resolve grants is what allows then lets through: the request's names, nothing of the
 * default list it replaced, and never what the server denies. */
static void
test_resolve_then_allows(void **state)
{
	json_t *req = parse("{\"allow\":[\"*.github.com\"]}"), *net = NULL;
	struct err err = {};

	(void)state;
	assert_int_equal(netpolicy_resolve(&policies[P_OPEN], req, &net, &err), 0);
	assert_true(netpolicy_allows(net, "api.github.com", NULL));
	assert_false(netpolicy_allows(net, "evil.github.com", NULL));
	assert_false(netpolicy_allows(net, "pypi.org", NULL));
	assert_false(netpolicy_allows(net, "github.com", NULL));
	json_decref(net);
	json_decref(req);
}

static void
test_resolve_deny_limit(void **state)
{
	json_t *req = json_pack("{s:s, s:[]}", "mode", "open", "deny"), *deny, *net = NULL;
	struct err err = {};
	char name[32];

	(void)state;
	deny = json_object_get(req, "deny");
	for (int i = 0; i < NETPOLICY_LIST_MAX; i++) {
		snprintf(name, sizeof(name), "h%d.example.net", i);
		json_array_append_new(deny, json_string(name));
	}
	/* 256 of the request's own and the server's one */
	assert_int_equal(netpolicy_resolve(&policies[P_OPEN], req, &net, &err), -EINVAL);
	assert_null(net);
	assert_int_equal(err.kind, ERR_INVALID);
	assert_non_null(strstr(err.message, "holds 257 names, over the limit of 256"));
	/* the server's own entry named again is no extra */
	json_array_set_new(deny, 0, json_string("evil.github.com"));
	assert_int_equal(netpolicy_resolve(&policies[P_OPEN], req, &net, &err), 0);
	assert_int_equal(json_array_size(json_object_get(net, "deny")), NETPOLICY_LIST_MAX);
	json_decref(net);
	json_decref(req);
}

/* A server list that holds what a request could not is the server's bug: 500, never a
 * sandbox with it. */
static void
test_resolve_bad_policy(void **state)
{
	struct policy p;
	struct err err = {};
	json_t *net = NULL;

	(void)state;
	set_network(&p, NET_ALLOWLIST, NET_OPEN, "[\"https://x.com\"]", "[]", "[]");
	assert_int_equal(netpolicy_resolve(&p, NULL, &net, &err), -EINVAL);
	assert_null(net);
	assert_int_equal(err.kind, ERR_INTERNAL);
	assert_non_null(strstr(err.message, "default allow list: entry 0: 'https://x.com'"));
	policy_done(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normalise_name),
		cmocka_unit_test(test_name_lengths),
		cmocka_unit_test(test_normalise_list),
		cmocka_unit_test(test_list_limit),
		cmocka_unit_test(test_match),
		cmocka_unit_test(test_covers),
		cmocka_unit_test(test_allows),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_resolve_then_allows),
		cmocka_unit_test(test_resolve_deny_limit),
		cmocka_unit_test(test_resolve_bad_policy),
	};

	return cmocka_run_group_tests(tests, setup_policies, teardown_policies);
}
