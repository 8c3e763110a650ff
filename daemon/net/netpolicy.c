/* netpolicy.c: the network policy engine (see netpolicy.h): list entries normalised and
 * checked, a request's network resolved against the policy, one decision per host. Pure (no
 * I/O, no globals), so the API, the egress proxy and the DNS stub decide alike. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "netpolicy.h"
#include "util.h"

#define LABEL_MAX 63
#define SHOWN_MAX 60 /* bytes of a refused entry quoted back in a message */

typedef char name_t[NETPOLICY_NAME_MAX + 1];

/* A refused entry as a message quotes it: bounded and printable ASCII only, because it is
 * whatever a client sent and messages reach logs and terminals. */
static void
shown(const char *s, char out[static SHOWN_MAX + 4])
{
	size_t i, n = 0;

	for (i = 0; s[i] && n < SHOWN_MAX; i++) {
		unsigned char c = (unsigned char)s[i];
		out[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	if (s[i]) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
}

static int refuse(char **ret_error, const char *in, const char *fmt, ...) _printf_(3, 4);

/* -EINVAL with "'entry': why" in *ret_error (when wanted); -ENOMEM if that cannot be made. */
static int
refuse(char **ret_error, const char *in, const char *fmt, ...)
{
	char s[SHOWN_MAX + 4], why[192];
	va_list ap;

	if (!ret_error)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	shown(in, s);
	*ret_error = strdup_printf("'%s': %s", s, why);
	return *ret_error ? -EINVAL : -ENOMEM;
}

static bool
name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int
netpolicy_normalise_name(const char *in, char out[static NETPOLICY_NAME_MAX + 1], char **ret_error)
{
	name_t buf;
	const char *colon;
	size_t len, start, end;

	if (!in || !*in) {
		if (!ret_error)
			return -EINVAL;
		*ret_error = strdup("an empty name");
		return *ret_error ? -EINVAL : -ENOMEM;
	}
	/* The forms people paste from a browser or a config file each get their own reason,
	 * before the character check would name a ':' or '/' less helpfully. */
	if (strstr(in, "://"))
		return refuse(ret_error, in, "a URL is not a name: give the host name alone");
	if (strchr(in, '@'))
		return refuse(ret_error, in,
		              "a user part is not allowed: give the host name alone");
	if (strchr(in, '/'))
		return refuse(ret_error, in, "a path is not allowed: give the host name alone");
	colon = strchr(in, ':');
	if (colon) {
		if (in[0] == '[' || strchr(colon + 1, ':'))
			return refuse(ret_error, in,
			              "an IP address is not a name: egress is decided by name");
		return refuse(ret_error, in, "a port is not allowed: give the name alone");
	}

	len = strnlen(in, NETPOLICY_NAME_MAX + 2);
	if (len > NETPOLICY_NAME_MAX + 1)
		return refuse(ret_error, in, "longer than %d bytes", NETPOLICY_NAME_MAX);
	for (size_t i = 0; i < len; i++)
		buf[i] = in[i] >= 'A' && in[i] <= 'Z' ? (char)(in[i] - 'A' + 'a') : in[i];
	if (buf[len - 1] == '.')
		len--;
	if (len > NETPOLICY_NAME_MAX)
		return refuse(ret_error, in, "longer than %d bytes", NETPOLICY_NAME_MAX);
	buf[len] = '\0';
	if (streq(buf, "*"))
		return refuse(ret_error, in,
		              "a bare '*' is not allowed: name the hosts, or a domain as "
		              "'*.example.com'");

	for (start = 0; start <= len; start = end + 1) {
		end = start;
		while (end < len && buf[end] != '.')
			end++;
		if (end == start)
			return refuse(ret_error, in, "an empty label");
		if (end - start > LABEL_MAX)
			return refuse(ret_error, in, "a label longer than %d bytes", LABEL_MAX);
		for (size_t i = start; i < end; i++) {
			unsigned char c = (unsigned char)buf[i];

			if (c == '*') {
				if (start == 0 && end == 1)
					continue;
				return refuse(ret_error, in,
				              "'*' may only be the whole first label, as in "
				              "'*.example.com'");
			}
			if (name_char((char)c))
				continue;
			if (c >= 0x20 && c < 0x7f)
				return refuse(ret_error, in,
				              "'%c' is not allowed in a name (letters, digits, '-' "
				              "and '_')",
				              c);
			return refuse(ret_error, in,
			              "byte 0x%02x is not allowed in a name (an international "
			              "name goes in its xn-- form)",
			              c);
		}
		if (end == len && label_is_number(buf + start, end - start))
			return refuse(ret_error, in,
			              "an IP address is not a name: egress is decided by name");
	}
	memcpy(out, buf, len + 1);
	return 0;
}

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
		else if ((r = netpolicy_normalise_name(json_string_value(e), v[i], &why)) < 0) {
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
netpolicy_match(const char *pattern, const char *host)
{
	size_t sl, hl;

	if (!pattern || !host)
		return false;
	/* Only may_allow holds "*"; a deny list that somehow held it should deny everything,
	 * so it matches all (netpolicy_allows ignores it on an allow list). */
	if (streq(pattern, "*"))
		return true;
	if (pattern[0] == '*' && pattern[1] == '.') {
		/* the suffix keeps its dot, so "*.example.com" never matches "badexample.com" */
		sl = strlen(pattern + 1);
		hl = strlen(host);
		return hl > sl && streq(host + hl - sl, pattern + 1);
	}
	return streq(pattern, host);
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
	return wide[0] == '*' && wide[1] == '.' && netpolicy_match(wide, narrow);
}

/* Whether host is a literal address (what the proxy may be asked to dial in open mode). */
static bool
ip_literal(const char *host)
{
	unsigned char a[16];
	char v6[64];
	size_t n = strlen(host);

	if (inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1)
		return true;
	if (n < 3 || n - 2 >= sizeof(v6) || host[0] != '[' || host[n - 1] != ']')
		return false;
	memcpy(v6, host + 1, n - 2);
	v6[n - 2] = '\0';
	return inet_pton(AF_INET6, v6, a) == 1;
}

static bool
decide(const json_t *net, const char *host, const char **ret_reason)
{
	const json_t *allow, *deny, *e;
	enum net_mode mode;
	name_t h;
	size_t i;

	if (!json_is_object(net)) {
		*ret_reason = "no network policy";
		return false;
	}
	mode = net_mode_from_string(json_string_value(json_object_get(net, "mode")));
	allow = json_object_get(net, "allow");
	deny = json_object_get(net, "deny");
	/* a policy this engine did not make is refused whole, never half-read */
	if (mode == _NET_MODE_INVALID || (allow && !json_is_array(allow)) ||
	    (deny && !json_is_array(deny))) {
		*ret_reason = "malformed network policy";
		return false;
	}
	if (mode == NET_NONE) {
		*ret_reason = "network mode none";
		return false;
	}
	if (!host || netpolicy_normalise_name(host, h, NULL) < 0) {
		/* open means anything the proxy would dial, addresses too: a deny list names
		 * hosts and cannot see one */
		if (mode == NET_OPEN && host && ip_literal(host)) {
			*ret_reason = "network mode open";
			return true;
		}
		*ret_reason = "not a host name";
		return false;
	}
	if (h[0] == '*') {
		*ret_reason = "a wildcard is not a host";
		return false;
	}
	json_array_foreach (deny, i, e) {
		if (!json_is_string(e)) {
			*ret_reason = "malformed network policy";
			return false;
		}
		if (netpolicy_match(json_string_value(e), h)) {
			*ret_reason = "on the deny list";
			return false;
		}
	}
	if (mode == NET_OPEN) {
		*ret_reason = "network mode open";
		return true;
	}
	json_array_foreach (allow, i, e) {
		const char *s = json_string_value(e);

		/* an allow list never says "everything": resolve does not make one that does */
		if (s && !streq(s, "*") && netpolicy_match(s, h)) {
			*ret_reason = "on the allow list";
			return true;
		}
	}
	*ret_reason = "not on the allow list";
	return false;
}

bool
netpolicy_allows(const json_t *net, const char *host, const char **ret_reason)
{
	const char *reason;
	bool ok = decide(net, host, &reason);

	if (ret_reason)
		*ret_reason = reason;
	return ok;
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

/* may_allow as normal-form entries, "*" kept as itself. */
static int
policy_may_allow(const json_t *names, name_t **ret_v, size_t *ret_n, struct err *err)
{
	_cleanup_free_ name_t *v = NULL;
	size_t i, n = json_array_size(names);
	json_t *e;
	int r;

	v = calloc(MAX(n, 1), sizeof(*v));
	if (!v)
		return -ENOMEM;
	json_array_foreach (names, i, e) {
		_cleanup_free_ char *why = NULL;
		const char *s = json_string_value(e);

		if (s && streq(s, "*")) {
			memcpy(v[i], "*", 2);
			continue;
		}
		r = s ? netpolicy_normalise_name(s, v[i], &why) : -EINVAL;
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
				char s[SHOWN_MAX + 4];

				shown(key, s);
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
			char s[SHOWN_MAX + 4];

			shown(json_string_value(jmode), s);
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
	/* An empty list would serve a sandbox that reaches nothing while it asked for an
	 * allowlist; null (or no key) is how a request asks for the default list. */
	if (jallow && nallow == 0)
		return err_set(
		        err, -EPERM, ERR_REFUSED,
		        "'network.allow' is empty, which would reach nothing: use mode none, "
		        "or leave 'allow' out (or null) for the default list");

	r = policy_list(p->network.default_allow, "default allow list", &def_allow, &ndef_allow,
	                err);
	if (r < 0)
		return r;
	r = policy_list(p->network.default_deny, "default deny list", &def_deny, &ndef_deny, err);
	if (r < 0)
		return r;
	r = policy_may_allow(p->network.may_allow, &may, &nmay, err);
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
