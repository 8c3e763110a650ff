/* matcher.c: a sandbox's network policy compiled into sorted name sets and decided host by
 * host (see matcher.h). A host is looked up by itself among the exact names, then by each of
 * its parent domains among the wildcards, so a decision costs a few binary searches however
 * long the lists are. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "matcher.h"
#include "util.h"

enum mode {
	MODE_NONE,
	MODE_ALLOWLIST,
	MODE_OPEN,
};

/* The names of one list. */
struct nameset {
	char **exact; /* names, sorted */
	size_t n_exact;
	char **below; /* the domains of the "*.domain" entries, each with its leading dot, sorted */
	size_t n_below;
	bool all; /* "*": only a deny list heeds it */
};

struct matcher {
	const char *refusal; /* non-NULL: every host is refused for this reason */
	enum mode mode;
	bool deny_malformed; /* the deny list holds something that is not a string */
	struct nameset allow, deny;
};

static void
nameset_done(struct nameset *s)
{
	for (size_t i = 0; i < s->n_exact; i++)
		free(s->exact[i]);
	for (size_t i = 0; i < s->n_below; i++)
		free(s->below[i]);
	free(s->exact);
	free(s->below);
}

struct matcher *
matcher_free(struct matcher *m)
{
	if (!m)
		return NULL;
	nameset_done(&m->allow);
	nameset_done(&m->deny);
	free(m);
	return NULL;
}

static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Fills s from the strings of list (an array or NULL); *ret_other says whether it held
 * something else. */
static int
nameset_fill(struct nameset *s, const json_t *list, bool *ret_other)
{
	size_t i, n = json_array_size(list);
	json_t *e;

	*ret_other = false;
	if (n == 0)
		return 0;
	s->exact = calloc(n, sizeof(*s->exact));
	s->below = calloc(n, sizeof(*s->below));
	if (!s->exact || !s->below)
		return -ENOMEM;
	json_array_foreach (list, i, e) {
		const char *name = json_string_value(e);
		bool wildcard;
		char *copy;

		if (!name) {
			*ret_other = true;
			continue;
		}
		if (streq(name, "*")) {
			s->all = true;
			continue;
		}
		/* "*.example.com" is kept as ".example.com": what a host's parent domain,
		 * dot included, must equal */
		wildcard = name[0] == '*' && name[1] == '.';
		copy = strdup(wildcard ? name + 1 : name);
		if (!copy)
			return -ENOMEM;
		if (wildcard)
			s->below[s->n_below++] = copy;
		else
			s->exact[s->n_exact++] = copy;
	}
	qsort(s->exact, s->n_exact, sizeof(*s->exact), cmp_names);
	qsort(s->below, s->n_below, sizeof(*s->below), cmp_names);
	return 0;
}

static enum mode
mode_from_string(const char *s, bool *ret_ok)
{
	static const char *const names[] = {
		[MODE_NONE] = "none",
		[MODE_ALLOWLIST] = "allowlist",
		[MODE_OPEN] = "open",
	};

	for (size_t i = 0; s && i < ARRAY_SIZE(names); i++)
		if (streq(s, names[i])) {
			*ret_ok = true;
			return (enum mode)i;
		}
	*ret_ok = false;
	return MODE_NONE;
}

int
matcher_new(const json_t *net, struct matcher **ret)
{
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	const json_t *allow, *deny;
	bool other, ok;
	int r;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	if (!json_is_object(net)) {
		m->refusal = "no network policy";
		goto out;
	}
	m->mode = mode_from_string(json_string_value(json_object_get(net, "mode")), &ok);
	allow = json_object_get(net, "allow");
	deny = json_object_get(net, "deny");
	/* a policy netpolicy_resolve did not make is refused whole, never half-read */
	if (!ok || (allow && !json_is_array(allow)) || (deny && !json_is_array(deny))) {
		m->refusal = "malformed network policy";
		goto out;
	}
	if (m->mode == MODE_NONE)
		goto out;
	r = nameset_fill(&m->deny, deny, &m->deny_malformed);
	if (r < 0)
		return r;
	/* an allow list never says "everything", and what is not a name on it grants nothing */
	if (m->mode == MODE_ALLOWLIST) {
		r = nameset_fill(&m->allow, allow, &other);
		if (r < 0)
			return r;
		m->allow.all = false;
	}
out:
	*ret = TAKE_PTR(m);
	return 0;
}

static bool
sorted_has(char *const *v, size_t n, const char *s)
{
	return n > 0 && bsearch(&s, v, n, sizeof(*v), cmp_names) != NULL;
}

/* Whether an entry of s matches host (a normal-form name, not a wildcard). */
static bool
nameset_matches(const struct nameset *s, const char *host)
{
	if (s->all || sorted_has(s->exact, s->n_exact, host))
		return true;
	/* each parent domain, from its dot: "a.b.example.com" tries ".b.example.com",
	 * ".example.com", ".com" (a host never starts with a dot, so the name itself is not
	 * one) */
	for (const char *d = strchr(host, '.'); d && s->n_below > 0; d = strchr(d + 1, '.'))
		if (sorted_has(s->below, s->n_below, d))
			return true;
	return false;
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
decide(const struct matcher *m, const char *host, const char **ret_reason)
{
	char h[NETNAME_MAX + 1];

	if (!m) {
		*ret_reason = "no network policy";
		return false;
	}
	if (m->refusal) {
		*ret_reason = m->refusal;
		return false;
	}
	if (m->mode == MODE_NONE) {
		*ret_reason = "network mode none";
		return false;
	}
	if (!host || netname_normalise(host, h, NULL) < 0) {
		/* open means anything the proxy would dial, addresses too: a deny list names
		 * hosts and cannot see one */
		if (m->mode == MODE_OPEN && host && ip_literal(host)) {
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
	if (m->deny_malformed) {
		*ret_reason = "malformed network policy";
		return false;
	}
	if (nameset_matches(&m->deny, h)) {
		*ret_reason = "on the deny list";
		return false;
	}
	if (m->mode == MODE_OPEN) {
		*ret_reason = "network mode open";
		return true;
	}
	if (nameset_matches(&m->allow, h)) {
		*ret_reason = "on the allow list";
		return true;
	}
	*ret_reason = "not on the allow list";
	return false;
}

bool
matcher_allows(const struct matcher *m, const char *host, const char **ret_reason)
{
	const char *reason;
	bool ok = decide(m, host, &reason);

	if (ret_reason)
		*ret_reason = reason;
	return ok;
}
