/* test-netpolicy.c: daemon/net/netpolicy.c, what a request's network may be, as tables of
 * cases: lists normalised or refused, wildcards covering names, and requests resolved against
 * policies whose ceiling is open, allowlist and none (status, code and a piece of the message
 * for each refusal), then decided by the worker's matcher. */
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

/* ---- covering ---- */

static const struct pair_case {
	const char *a, *b;
	bool want;
} covers_cases[] = {
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
test_covers(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(covers_cases); i++)
		if (netpolicy_covers(covers_cases[i].a, covers_cases[i].b) != covers_cases[i].want)
			fail_msg("covers('%s', '%s') should be %s", covers_cases[i].a,
			         covers_cases[i].b, covers_cases[i].want ? "true" : "false");
}

/* ---- resolving requests ---- */

enum {
	P_OPEN,
	P_ALLOW,
	P_NONE,
	P_EMPTY,
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
	/* the embedded policy's network: an empty default allow list */
	set_network(&policies[P_EMPTY], NET_NONE, NET_ALLOWLIST, "[]", "[]", "[\"*\"]");
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

	/* ceiling allowlist, an empty default allow list: an allowlist must name something,
	 * whether the request said "allow": [] or left allow out */
	{ P_EMPTY, NULL, NONE_NET, 0, NULL, NULL },
	{ P_EMPTY, "{\"mode\":\"allowlist\"}", NULL, 403, "refused",
	  "gets this server's default allow list, which is empty and would reach nothing" },
	{ P_EMPTY, "{\"mode\":\"allowlist\",\"allow\":null}", NULL, 403, "refused",
	  "default allow list, which is empty" },
	{ P_EMPTY, "{\"mode\":\"allowlist\",\"deny\":[\"x.example\"]}", NULL, 403, "refused",
	  "default allow list, which is empty" },
	{ P_EMPTY, "{\"mode\":\"allowlist\",\"allow\":[]}", NULL, 403, "refused",
	  "is empty, which would reach nothing: name what the sandbox may reach, or use mode "
	  "none" },
	{ P_EMPTY, "{\"mode\":\"allowlist\",\"allow\":[\"example.com\"]}",
	  "{\"mode\":\"allowlist\",\"allow\":[\"example.com\"],\"deny\":[]}", 0, NULL, NULL },
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

/* What resolve grants is what the matcher then lets through: the request's names, nothing of the
 * default list it replaced, and never what the server denies. */
static void
test_resolve_then_allows(void **state)
{
	json_t *req = parse("{\"allow\":[\"*.github.com\"]}"), *net = NULL;
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	struct err err = {};

	(void)state;
	assert_int_equal(netpolicy_resolve(&policies[P_OPEN], req, &net, &err), 0);
	assert_int_equal(matcher_new(net, &m), 0);
	assert_true(matcher_allows(m, "api.github.com", NULL));
	assert_false(matcher_allows(m, "evil.github.com", NULL));
	assert_false(matcher_allows(m, "pypi.org", NULL));
	assert_false(matcher_allows(m, "github.com", NULL));
	json_decref(net);
	json_decref(req);
}

/* Names the server grants on top of may_allow (an agent's API hosts): granted to this call
 * only, and checked again only with them. */
static void
test_resolve_also_allow(void **state)
{
	json_t *req = parse("{\"allow\":[\"pypi.org\", \"evil.net\"]}"), *net = NULL;
	json_t *also = parse("[\"evil.net\"]");
	struct err err = {};

	(void)state;
	assert_int_equal(netpolicy_resolve(&policies[P_OPEN], req, &net, &err), -EPERM);
	assert_null(net);
	assert_int_equal(netpolicy_resolve_also(&policies[P_OPEN], also, req, &net, &err), 0);
	assert_json_equal(json_object_get(net, "allow"), "[\"evil.net\",\"pypi.org\"]", "allow");
	err = (struct err){};
	assert_int_equal(netpolicy_permits(&policies[P_OPEN], net, &err), -EPERM);
	assert_non_null(strstr(err.message, "'evil.net' is neither"));
	assert_int_equal(netpolicy_permits_also(&policies[P_OPEN], also, net, &err), 0);
	/* may_allow is the policy's own still: nothing of also stays in it */
	assert_int_equal(netpolicy_permits(&policies[P_OPEN], net, &err), -EPERM);
	json_decref(net);
	json_decref(also);
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

/* A network granted earlier, checked against the policy as it is now (at a restart of
 * sandboxd, and at each start of a stopped sandbox): what a request would be refused is no
 * longer permitted, with the same words. */
static const struct permits_case {
	int policy;
	const char *net;
	const char *refusal; /* NULL: permitted */
} permits_cases[] = {
	{ P_OPEN, OPEN_DEFAULT, NULL },
	{ P_OPEN, NONE_NET, NULL },
	{ P_OPEN, "{\"mode\":\"open\",\"allow\":[],\"deny\":[\"evil.github.com\"]}", NULL },
	/* within may_allow, and narrower than a default wildcard */
	{ P_OPEN,
	  "{\"mode\":\"allowlist\",\"allow\":[\"a.example.org\",\"api.github.com\"],"
	  "\"deny\":[\"evil.github.com\"]}",
	  NULL },
	/* a broader deny covers the server's name */
	{ P_OPEN, "{\"mode\":\"allowlist\",\"allow\":[\"pypi.org\"],\"deny\":[\"*.github.com\"]}",
	  NULL },
	/* granted under a wider may_allow */
	{ P_OPEN,
	  "{\"mode\":\"allowlist\",\"allow\":[\"anything.net\"],\"deny\":[\"evil.github.com\"]}",
	  "'anything.net' is neither in this server's default allow list nor within its "
	  "may_allow" },
	{ P_OPEN, "{\"mode\":\"allowlist\",\"allow\":[\"*.org\"],\"deny\":[\"evil.github.com\"]}",
	  "'*.org' is neither" },
	/* granted before the server denied a name */
	{ P_OPEN, "{\"mode\":\"allowlist\",\"allow\":[\"pypi.org\"],\"deny\":[]}",
	  "this server's default deny list holds 'evil.github.com', which the sandbox's network "
	  "does not deny" },
	{ P_OPEN, "{\"mode\":\"open\",\"allow\":[],\"deny\":[\"x.com\"]}",
	  "default deny list holds 'evil.github.com'" },
	/* the ceiling came down */
	{ P_ALLOW, "{\"mode\":\"open\",\"allow\":[],\"deny\":[\"ads.example.com\"]}",
	  "network mode 'open' is above this server's ceiling 'allowlist'" },
	{ P_ALLOW,
	  "{\"mode\":\"allowlist\",\"allow\":[\"*.corp.example\"],\"deny\":[\"ads.example.com\"]}",
	  NULL },
	{ P_NONE, ALLOW_DEFAULT, "network mode 'allowlist' is above this server's ceiling 'none'" },
	{ P_NONE, NONE_NET, NULL },
};

static void
test_permits(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(permits_cases); i++) {
		const struct permits_case *c = &permits_cases[i];
		json_t *net = parse(c->net);
		struct err err = {};
		int r = netpolicy_permits(&policies[c->policy], net, &err);

		if (!c->refusal && r < 0)
			fail_msg("case %zu %s: refused: %s", i, c->net, err.message);
		if (c->refusal) {
			if (r != -EPERM)
				fail_msg("case %zu %s: got %d, want refused", i, c->net, r);
			assert_int_equal(err.kind, ERR_REFUSED);
			if (!strstr(err.message, c->refusal))
				fail_msg("case %zu: '%s' lacks '%s'", i, err.message, c->refusal);
		}
		json_decref(net);
	}
}

/* What was stored is not a network sandboxd granted: the server's fault, never a pass. */
static void
test_permits_bad_network(void **state)
{
	static const char *const bad[] = {
		"{}", "{\"mode\":\"wide\",\"allow\":[],\"deny\":[]}",
		"{\"mode\":\"allowlist\",\"allow\":[\"a b\"],\"deny\":[]}",
		"{\"mode\":\"allowlist\",\"deny\":[]}"
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		json_t *net = parse(bad[i]);
		struct err err = {};

		assert_int_equal(netpolicy_permits(&policies[P_OPEN], net, &err), -EINVAL);
		assert_int_equal(err.kind, ERR_INTERNAL);
		json_decref(net);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normalise_list),
		cmocka_unit_test(test_list_limit),
		cmocka_unit_test(test_covers),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_resolve_then_allows),
		cmocka_unit_test(test_resolve_also_allow),
		cmocka_unit_test(test_resolve_deny_limit),
		cmocka_unit_test(test_resolve_bad_policy),
		cmocka_unit_test(test_permits),
		cmocka_unit_test(test_permits_bad_network),
	};

	return cmocka_run_group_tests(tests, setup_policies, teardown_policies);
}
