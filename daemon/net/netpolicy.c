/* netpolicy.c: what a request's network may be (see netpolicy.h): lists of names normalised
 * and checked, wildcards covering names, a request's network resolved against the policy.
 * Pure (no I/O, no globals); the names themselves are egress/netname.c's, so what the API
 * accepts is what the worker's matcher reads. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "netpolicy.h"
#include "util.h"

typedef char name_t[NETNAME_MAX + 1];

static int
names_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Sorts v and drops duplicates; returns how many remain. */
static size_t
sort_unique(name_t *v, size_t n)
{
	size_t k = 0;

	if (n > 1)
		qsort(v, n, sizeof(*v), names_cmp);
	for (size_t i = 0; i < n; i++)
		if (k == 0 || !streq(v[k - 1], v[i])) {
			if (k != i)
				memcpy(v[k], v[i], sizeof(*v));
			k++;
		}
	return k;
}

/* The entries of a JSON array, each normalised, sorted and unique, into a new array of
 * name_t (room for json_array_size() of them, at least one). */
static int
collect(const json_t *names, name_t **ret_v, size_t *ret_n, char **ret_error)
{
	_cleanup_free_ name_t *v = NULL;
	size_t i, n;
	json_t *e;
	int r;

	if (!json_is_array(names)) {
		*ret_error = strdup("must be an array of names");
		return *ret_error ? -EINVAL : -ENOMEM;
	}
	n = json_array_size(names);
	if (n > NETPOLICY_LIST_MAX) {
		*ret_error = strdup_printf("holds %zu names, over the limit of %d", n,
		                           NETPOLICY_LIST_MAX);
		return *ret_error ? -EINVAL : -ENOMEM;
	}
	v = calloc(MAX(n, 1), sizeof(*v));
	if (!v)
		return -ENOMEM;
	json_array_foreach (names, i, e) {
		_cleanup_free_ char *why = NULL;

		if (!json_is_string(e))
			*ret_error = strdup_printf("entry %zu is not a string", i);
		else if (json_string_length(e) != strlen(json_string_value(e)))
			*ret_error = strdup_printf("entry %zu holds a NUL byte", i);
		else if ((r = netname_normalise(json_string_value(e), v[i], &why)) < 0) {
			if (r != -EINVAL)
				return r;
			*ret_error = strdup_printf("entry %zu: %s", i, why);
		} else
			continue;
		return *ret_error ? -EINVAL : -ENOMEM;
	}
	*ret_n = sort_unique(v, n);
	*ret_v = TAKE_PTR(v);
	return 0;
}

static json_t *
names_json(const name_t *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_string(v[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

int
netpolicy_normalise_list(const json_t *names, json_t **ret, char **ret_error)
{
	_cleanup_free_ name_t *v = NULL;
	_cleanup_free_ char *why = NULL;
	json_t *out;
	size_t n;
	int r;

	r = collect(names, &v, &n, &why);
	if (r < 0) {
		if (r == -EINVAL && ret_error)
			*ret_error = TAKE_PTR(why);
		return r;
	}
	out = names_json(v, n);
	if (!out)
		return -ENOMEM;
	*ret = out;
	return 0;
}

bool
netpolicy_covers(const char *wide, const char *narrow)
{
	if (!wide || !narrow)
		return false;
	if (streq(wide, "*") || streq(wide, narrow))
		return true;
	/* "*.example.com" matching "*.a.example.com" as a name means every name below
	 * a.example.com is below example.com too */
	return wide[0] == '*' && wide[1] == '.' && netname_match(wide, narrow);
}

/* One of the server's own lists, normalised; a bad entry there is the server's fault (the
 * policy file's loader checks them), so internal. */
static int
policy_list(const json_t *names, const char *what, name_t **ret_v, size_t *ret_n, struct err *err)
{
	_cleanup_free_ char *why = NULL;
	int r;

	if (!names) {
		*ret_v = calloc(1, sizeof(name_t));
		*ret_n = 0;
		return *ret_v ? 0 : -ENOMEM;
	}
	r = collect(names, ret_v, ret_n, &why);
	if (r == -EINVAL)
		err_set(err, r, ERR_INTERNAL, "the server's network %s: %s", what, why);
	return r;
}

/* may_allow as normal-form entries, "*" kept as itself, followed by the names the caller
 * grants on top of it (also_allow, NULL for none). */
static int
policy_may_allow(const json_t *names, const json_t *also_allow, name_t **ret_v, size_t *ret_n,
                 struct err *err)
{
	_cleanup_free_ name_t *v = NULL;
	size_t nnames = json_array_size(names), n = nnames + json_array_size(also_allow);

	v = calloc(MAX(n, 1), sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *why = NULL;
		const char *s =
		        json_string_value(i < nnames ? json_array_get(names, i)
		                                     : json_array_get(also_allow, i - nnames));
		int r;

		if (s && streq(s, "*")) {
			memcpy(v[i], "*", 2);
			continue;
		}
		r = s ? netname_normalise(s, v[i], &why) : -EINVAL;
		if (r == -EINVAL)
			err_set(err, r, ERR_INTERNAL, "the server's network may_allow: %s",
			        why ? why : "an entry is not a string");
		if (r < 0)
			return r;
	}
	*ret_n = n;
	*ret_v = TAKE_PTR(v);
	return 0;
}

/* A name the request adds is granted when it is within the default allow list (so only a
 * narrowing of it) or within may_allow. */
static bool
granted(const name_t *def, size_t ndef, const name_t *may, size_t nmay, const char *name)
{
	for (size_t i = 0; i < ndef; i++)
		if (netpolicy_covers(def[i], name))
			return true;
	for (size_t i = 0; i < nmay; i++)
		if (netpolicy_covers(may[i], name))
			return true;
	return false;
}

/* A request's list, or an invalid request naming the field. */
static int
request_list(const json_t *names, const char *field, name_t **ret_v, size_t *ret_n, struct err *err)
{
	_cleanup_free_ char *why = NULL;
	int r = collect(names, ret_v, ret_n, &why);

	if (r == -EINVAL)
		err_set(err, r, ERR_INVALID, "'network.%s' %s", field, why);
	return r;
}

int
netpolicy_resolve(const struct policy *p, const json_t *req, json_t **ret, struct err *err)
{
	return netpolicy_resolve_also(p, NULL, req, ret, err);
}

int
netpolicy_resolve_also(const struct policy *p, const json_t *also_allow, const json_t *req,
                       json_t **ret, struct err *err)
{
	_cleanup_free_ name_t *allow = NULL, *deny = NULL, *def_allow = NULL, *def_deny = NULL,
	                      *may = NULL, *all_deny = NULL;
	size_t nallow = 0, ndeny = 0, ndef_allow = 0, ndef_deny = 0, nmay = 0, nall_deny = 0;
	const json_t *jmode = NULL, *jallow = NULL, *jdeny = NULL;
	enum net_mode mode = p->network.default_mode;
	json_t *v, *out;
	const char *key;
	int r;

	if (req && !json_is_null(req)) {
		if (!json_is_object(req))
			return err_set(err, -EINVAL, ERR_INVALID, "'network' must be an object");
		json_object_foreach ((json_t *)req, key, v) {
			if (!streq(key, "mode") && !streq(key, "allow") && !streq(key, "deny")) {
				char s[NETNAME_SHOWN_SIZE];

				netname_shown(key, s);
				return err_set(err, -EINVAL, ERR_INVALID,
				               "unknown field 'network.%s'", s);
			}
		}
		jmode = json_object_get(req, "mode");
		jallow = json_object_get(req, "allow");
		jdeny = json_object_get(req, "deny");
	}
	if (jmode && !json_is_null(jmode)) {
		if (!json_is_string(jmode))
			return err_set(err, -EINVAL, ERR_INVALID,
			               "'network.mode' must be a string");
		mode = net_mode_from_string(json_string_value(jmode));
		if (mode == _NET_MODE_INVALID) {
			char s[NETNAME_SHOWN_SIZE];

			netname_shown(json_string_value(jmode), s);
			return err_set(err, -EINVAL, ERR_INVALID,
			               "unknown network mode '%.32s': use none, allowlist or open",
			               s);
		}
	}
	if (json_is_null(jallow))
		jallow = NULL;
	if (json_is_null(jdeny))
		jdeny = NULL;
	if (jallow && mode != NET_ALLOWLIST)
		return err_set(err, -EINVAL, ERR_INVALID,
		               "'network.allow' goes only with mode allowlist");
	if (jdeny && mode == NET_NONE)
		return err_set(err, -EINVAL, ERR_INVALID,
		               "'network.deny' has no meaning with mode none");
	/* what is malformed is invalid before what the policy refuses is refused */
	if (jallow && (r = request_list(jallow, "allow", &allow, &nallow, err)) < 0)
		return r;
	if (jdeny && (r = request_list(jdeny, "deny", &deny, &ndeny, err)) < 0)
		return r;
	if (mode > p->network.ceiling)
		return err_set(err, -EPERM, ERR_REFUSED,
		               "network mode '%s' is above this server's ceiling '%s'",
		               net_mode_to_string(mode), net_mode_to_string(p->network.ceiling));
	r = policy_list(p->network.default_allow, "default allow list", &def_allow, &ndef_allow,
	                err);
	if (r < 0)
		return r;
	/* An empty list would serve a sandbox that reaches nothing while it asked for an
	 * allowlist; null (or no key) is how a request asks for the default list, which must
	 * not be empty either. */
	if (jallow && nallow == 0)
		return err_set(err, -EPERM, ERR_REFUSED,
		               "'network.allow' is empty, which would reach nothing: name what the "
		               "sandbox may reach, or use mode none%s",
		               ndef_allow ? ", or leave 'allow' out (or null) for the default list"
		                          : "");
	if (mode == NET_ALLOWLIST && !jallow && ndef_allow == 0)
		return err_set(err, -EPERM, ERR_REFUSED,
		               "mode allowlist without 'network.allow' gets this server's default "
		               "allow list, which is empty and would reach nothing: name what the "
		               "sandbox may reach in 'network.allow', or use mode none");
	r = policy_list(p->network.default_deny, "default deny list", &def_deny, &ndef_deny, err);
	if (r < 0)
		return r;
	r = policy_may_allow(p->network.may_allow, also_allow, &may, &nmay, err);
	if (r < 0)
		return r;

	for (size_t i = 0; i < nallow; i++) {
		if (granted(def_allow, ndef_allow, may, nmay, allow[i]))
			continue;
		if (allow[i][0] == '*')
			err_set(err, -EPERM, ERR_REFUSED,
			        "'network.allow': wildcard '%s' is refused: this server's "
			        "may_allow holds neither '*' nor an equal or broader wildcard",
			        allow[i]);
		else
			err_set(err, -EPERM, ERR_REFUSED,
			        "'network.allow': '%s' is neither in this server's default "
			        "allow list nor within its may_allow",
			        allow[i]);
		return -EPERM;
	}

	/* (allow is refused above unless the mode is allowlist, so nallow is 0 otherwise) */
	if (mode == NET_ALLOWLIST && !jallow) {
		free(allow);
		allow = TAKE_PTR(def_allow);
		nallow = ndef_allow;
	}
	/* the request's deny list adds to the server's: replacing it would loosen */
	if (mode != NET_NONE) {
		all_deny = calloc(ndef_deny + ndeny + 1, sizeof(name_t));
		if (!all_deny)
			return -ENOMEM;
		if (ndef_deny > 0)
			memcpy(all_deny, def_deny, ndef_deny * sizeof(name_t));
		if (ndeny > 0)
			memcpy(all_deny + ndef_deny, deny, ndeny * sizeof(name_t));
		nall_deny = sort_unique(all_deny, ndef_deny + ndeny);
		if (nall_deny > NETPOLICY_LIST_MAX)
			return err_set(
			        err, -EINVAL, ERR_INVALID,
			        "'network.deny' with this server's default deny list holds %zu "
			        "names, over the limit of %d",
			        nall_deny, NETPOLICY_LIST_MAX);
	}

	out = json_pack("{s:s, s:o, s:o}", "mode", net_mode_to_string(mode), "allow",
	                names_json(allow, nallow), "deny", names_json(all_deny, nall_deny));
	if (!out)
		return -ENOMEM;
	*ret = out;
	return 0;
}

int
netpolicy_permits(const struct policy *p, const json_t *net, struct err *err)
{
	return netpolicy_permits_also(p, NULL, net, err);
}

int
netpolicy_permits_also(const struct policy *p, const json_t *also_allow, const json_t *net,
                       struct err *err)
{
	_cleanup_free_ name_t *allow = NULL, *deny = NULL, *def_allow = NULL, *def_deny = NULL,
	                      *may = NULL;
	size_t nallow = 0, ndeny = 0, ndef_allow = 0, ndef_deny = 0, nmay = 0;
	const json_t *jallow = json_object_get(net, "allow"), *jdeny = json_object_get(net, "deny");
	const char *mode_text = json_string_value(json_object_get(net, "mode"));
	enum net_mode mode = mode_text ? net_mode_from_string(mode_text) : _NET_MODE_INVALID;
	_cleanup_free_ char *why = NULL;
	int r;

	if (mode == _NET_MODE_INVALID || !json_is_array(jallow) || !json_is_array(jdeny))
		return err_set(err, -EINVAL, ERR_INTERNAL,
		               "the sandbox's network is not one sandboxd granted");
	if (mode > p->network.ceiling)
		return err_set(err, -EPERM, ERR_REFUSED,
		               "network mode '%s' is above this server's ceiling '%s'",
		               net_mode_to_string(mode), net_mode_to_string(p->network.ceiling));
	if (mode == NET_NONE)
		return 0; /* nothing reachable is always within the policy */
	if ((r = collect(jallow, &allow, &nallow, &why)) < 0 ||
	    (r = collect(jdeny, &deny, &ndeny, &why)) < 0) {
		if (r == -EINVAL)
			err_set(err, r, ERR_INTERNAL, "the sandbox's network: %s", why);
		return r;
	}
	r = policy_list(p->network.default_allow, "default allow list", &def_allow, &ndef_allow,
	                err);
	if (r >= 0)
		r = policy_list(p->network.default_deny, "default deny list", &def_deny, &ndef_deny,
		                err);
	if (r >= 0)
		r = policy_may_allow(p->network.may_allow, also_allow, &may, &nmay, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < nallow; i++)
		if (!granted(def_allow, ndef_allow, may, nmay, allow[i]))
			return err_set(err, -EPERM, ERR_REFUSED,
			               "'%s' is neither in this server's default allow list nor "
			               "within its may_allow",
			               allow[i]);
	/* a name the server denies now, which the sandbox was granted before */
	for (size_t i = 0; i < ndef_deny; i++) {
		bool denied = false;
		for (size_t j = 0; j < ndeny && !denied; j++)
			denied = netpolicy_covers(deny[j], def_deny[i]);
		if (!denied)
			return err_set(err, -EPERM, ERR_REFUSED,
			               "this server's default deny list holds '%s', which the "
			               "sandbox's network does not deny",
			               def_deny[i]);
	}
	return 0;
}
