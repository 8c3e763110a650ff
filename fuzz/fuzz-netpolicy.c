/* fuzz-netpolicy.c: the network policy's names (egress/netname.c), a request's network
 * resolved (daemon/net/netpolicy.c) and the worker's compiled matcher (egress/matcher.c) fed
 * hostile names and network requests. The first byte picks ('n', 'l', 'm', 'r', 'R' in the seeds,
 * any other byte by its value modulo 5): 'n' one name normalised; 'l' a JSON array normalised as a
 * list; 'm' two names (split at a NUL) matched, covered and decided; 'r' and 'R' a JSON "network"
 * value resolved against a fixed policy (ceiling open; may_allow narrow for 'r', "*" for 'R').
 * Invariants: a normal form is a fixed point, a list comes back sorted and unique, whatever resolve
 * grants is covered by the default list or may_allow and keeps the server's deny list, no host a
 * deny entry matches is ever allowed, and what the matcher allows an entry of its lists matches. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz.h"
#include "matcher.h"
#include "netpolicy.h"
#include "util.h"

#define INPUT_MAX 8192

/* A normal-form entry: a fixed point of normalisation, lowercase, no trailing dot. */
static void
check_normal(const char *name)
{
	char again[NETNAME_MAX + 1];
	size_t n = strlen(name);

	FUZZ_CHECK(n > 0 && n <= NETNAME_MAX);
	FUZZ_CHECK(name[n - 1] != '.');
	FUZZ_CHECK(!streq(name, "*"));
	FUZZ_CHECK(netname_normalise(name, again, NULL) == 0);
	FUZZ_CHECK(streq(again, name));
	FUZZ_CHECK(netpolicy_covers(name, name));
	if (name[0] != '*')
		FUZZ_CHECK(netname_match(name, name));
}

static void
check_sorted_normal(const json_t *list)
{
	const char *prev = NULL;
	json_t *e;
	size_t i;

	FUZZ_CHECK(json_is_array(list));
	FUZZ_CHECK(json_array_size(list) <= NETPOLICY_LIST_MAX);
	json_array_foreach (list, i, e) {
		FUZZ_CHECK(json_is_string(e));
		check_normal(json_string_value(e));
		FUZZ_CHECK(!prev || strcmp(prev, json_string_value(e)) < 0);
		prev = json_string_value(e);
	}
}

/* A host a normal-form entry matches: itself, or a name just below a wildcard's domain. */
static void
host_of(const char *entry, char out[static NETNAME_MAX + 1])
{
	if (entry[0] == '*' && strlen(entry) < NETNAME_MAX)
		snprintf(out, NETNAME_MAX + 1, "z%s", entry + 1);
	else
		snprintf(out, NETNAME_MAX + 1, "%s", entry);
}

/* The decision as the worker makes it: net compiled, host decided. */
static bool
allows(const json_t *net, const char *host, const char **ret_reason)
{
	struct matcher *m = NULL;
	bool ok;

	FUZZ_CHECK(matcher_new(net, &m) == 0);
	ok = matcher_allows(m, host, ret_reason);
	matcher_free(m);
	return ok;
}

/* What the matcher decides agrees with the lists: nothing a deny entry matches, nothing under
 * none, and under an allowlist only what an allow entry matches. */
static void
check_allows(const json_t *net, const char *host)
{
	char h[NETNAME_MAX + 1];
	enum net_mode mode;
	const char *reason = NULL;
	bool matched = false;
	json_t *e;
	size_t i;

	if (!allows(net, host, &reason)) {
		FUZZ_CHECK(reason != NULL);
		return;
	}
	FUZZ_CHECK(reason != NULL);
	mode = net_mode_from_string(json_string_value(json_object_get(net, "mode")));
	FUZZ_CHECK(mode == NET_ALLOWLIST || mode == NET_OPEN);
	if (netname_normalise(host, h, NULL) < 0) {
		FUZZ_CHECK(mode == NET_OPEN); /* an address, only in open mode */
		return;
	}
	json_array_foreach (json_object_get(net, "deny"), i, e)
		FUZZ_CHECK(!netname_match(json_string_value(e), h));
	if (mode == NET_OPEN)
		return;
	json_array_foreach (json_object_get(net, "allow"), i, e)
		matched = matched || netname_match(json_string_value(e), h);
	FUZZ_CHECK(matched);
}

static void
fuzz_name(const char *s)
{
	char out[NETNAME_MAX + 1];
	char *error = NULL;
	int r = netname_normalise(s, out, &error);

	if (r == 0)
		check_normal(out);
	else
		FUZZ_CHECK(r == -EINVAL && error && *error);
	free(error);
}

static void
fuzz_list(const char *s, size_t n)
{
	json_t *in = json_loadb(s, n, JSON_DECODE_ANY, NULL), *out = NULL, *again = NULL;
	char *error = NULL;
	int r;

	if (!in)
		return;
	r = netpolicy_normalise_list(in, &out, &error);
	if (r == 0) {
		check_sorted_normal(out);
		FUZZ_CHECK(json_array_size(out) <= json_array_size(in));
		FUZZ_CHECK(netpolicy_normalise_list(out, &again, NULL) == 0);
		FUZZ_CHECK(json_equal(out, again));
	} else
		FUZZ_CHECK(r == -EINVAL && out == NULL && error && *error);
	free(error);
	json_decref(again);
	json_decref(out);
	json_decref(in);
}

static void
fuzz_pair(const char *a, const char *b)
{
	char na[NETNAME_MAX + 1], nb[NETNAME_MAX + 1], x[NETNAME_MAX + 1];
	bool ga = netname_normalise(a, na, NULL) == 0;
	bool gb = netname_normalise(b, nb, NULL) == 0;
	json_t *net;

	/* raw, as a hostile host would arrive */
	(void)netname_match(a, b);
	(void)netpolicy_covers(a, b);
	if (ga && gb) {
		if (netpolicy_covers(na, nb)) {
			/* whatever narrow matches, wide matches */
			host_of(nb, x);
			if (netname_match(nb, x))
				FUZZ_CHECK(netname_match(na, x));
			if (na[0] != '*' && nb[0] != '*')
				FUZZ_CHECK(streq(na, nb));
		}
		if (nb[0] != '*' && netname_match(na, nb))
			FUZZ_CHECK(netpolicy_covers(na, nb));
		if (na[0] != '*' && nb[0] != '*')
			FUZZ_CHECK(netname_match(na, nb) == streq(na, nb));
	}
	net = json_pack("{s:s, s:[s?], s:[s?]}", "mode", "allowlist", "allow", ga ? na : NULL,
	                "deny", gb ? nb : NULL);
	if (net) {
		check_allows(net, a);
		check_allows(net, b);
		if (ga) {
			host_of(na, x);
			check_allows(net, x);
		}
		json_decref(net);
	}
	net = json_pack("{s:s, s:[], s:[s?]}", "mode", "open", "allow", "deny", ga ? na : NULL);
	if (net) {
		check_allows(net, b);
		check_allows(net, a);
		json_decref(net);
	}
}

static json_t *
parse(const char *text)
{
	json_t *v = json_loads(text, 0, NULL);

	if (!v)
		abort();
	return v;
}

static bool
covered(const json_t *list, const char *name)
{
	json_t *e;
	size_t i;

	json_array_foreach (list, i, e)
		if (netpolicy_covers(json_string_value(e), name))
			return true;
	return false;
}

static void
fuzz_resolve(const char *s, size_t n, bool may_all)
{
	static struct policy p;
	static json_t *def_allow, *def_deny, *may;
	json_t *req = json_loadb(s, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
	json_t *out = NULL, *again = NULL, *e;
	struct err err = {};
	enum net_mode mode;
	char x[NETNAME_MAX + 1];
	size_t i;
	int r;

	if (!def_allow) {
		/* as the operator wrote them; the normal forms below are what resolve checks */
		p.network.default_mode = NET_ALLOWLIST;
		p.network.ceiling = NET_OPEN;
		p.network.default_allow =
		        parse("[\"Example.com.\", \"*.github.com\", \"pypi.org\"]");
		p.network.default_deny = parse("[\"evil.github.com\", \"*.ads.example.org\"]");
		def_allow = parse("[\"example.com\", \"*.github.com\", \"pypi.org\"]");
		def_deny = parse("[\"evil.github.com\", \"*.ads.example.org\"]");
		may = parse("[\"*.example.org\", \"docs.python.org\", \"*.io\"]");
	}
	p.network.may_allow = may_all ? parse("[\"*\"]") : json_incref(may);
	if (!req && n > 0)
		goto out;
	r = netpolicy_resolve(&p, req, &out, &err);
	if (r < 0) {
		FUZZ_CHECK(out == NULL);
		FUZZ_CHECK(err.kind == ERR_INVALID || err.kind == ERR_REFUSED);
		FUZZ_CHECK(err.message[0] != '\0');
		goto out;
	}
	FUZZ_CHECK(err.kind == ERR_NONE);
	mode = net_mode_from_string(json_string_value(json_object_get(out, "mode")));
	FUZZ_CHECK(mode != _NET_MODE_INVALID && mode <= p.network.ceiling);
	FUZZ_CHECK(json_object_size(out) == 3);
	check_sorted_normal(json_object_get(out, "allow"));
	check_sorted_normal(json_object_get(out, "deny"));
	if (mode != NET_ALLOWLIST)
		FUZZ_CHECK(json_array_size(json_object_get(out, "allow")) == 0);
	else
		FUZZ_CHECK(json_array_size(json_object_get(out, "allow")) > 0);
	/* granted only what the default list or may_allow covers */
	json_array_foreach (json_object_get(out, "allow"), i, e) {
		const char *a = json_string_value(e);

		FUZZ_CHECK(covered(def_allow, a) || covered(p.network.may_allow, a));
		host_of(a, x);
		check_allows(out, x);
		check_allows(out, a);
	}
	/* the server's deny list is never dropped */
	if (mode == NET_NONE)
		FUZZ_CHECK(json_array_size(json_object_get(out, "deny")) == 0);
	else
		json_array_foreach (def_deny, i, e) {
			bool kept = false;
			json_t *d;
			size_t j;

			json_array_foreach (json_object_get(out, "deny"), j, d)
				kept = kept || json_equal(d, e);
			FUZZ_CHECK(kept);
		}
	json_array_foreach (json_object_get(out, "deny"), i, e) {
		host_of(json_string_value(e), x);
		FUZZ_CHECK(!allows(out, x, NULL));
	}
	/* an allowlist resolved is a request that resolves to itself */
	if (mode == NET_ALLOWLIST) {
		FUZZ_CHECK(netpolicy_resolve(&p, out, &again, &err) == 0);
		FUZZ_CHECK(json_equal(out, again));
	}
out:
	json_decref(p.network.may_allow);
	p.network.may_allow = NULL;
	json_decref(again);
	json_decref(out);
	json_decref(req);
}

static int
pick(uint8_t b)
{
	static const char letters[] = "nlmrR";
	const char *l = b ? strchr(letters, b) : NULL;

	return l ? (int)(l - letters) : b % 5;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;
	size_t n;

	if (size < 1 || size > INPUT_MAX)
		return 0;
	n = size - 1;
	s = malloc(n + 2);
	if (!s)
		return 0;
	memcpy(s, data + 1, n);
	s[n] = s[n + 1] = '\0';
	switch (pick(data[0])) {
	case 0:
		fuzz_name(s);
		break;
	case 1:
		fuzz_list(s, n);
		break;
	case 2:
		/* the second name starts after the first NUL (or is empty) */
		fuzz_pair(s, s + strlen(s) + (strlen(s) < n ? 1 : 0));
		break;
	default:
		fuzz_resolve(s, n, pick(data[0]) == 4);
		break;
	}
	free(s);
	return 0;
}
