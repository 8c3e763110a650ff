/* netpolicy.h: the network policy engine: names in allow and deny lists, how a request's
 * network is checked against the server's policy ("tighten, never loosen", never clamped),
 * and whether a host name is allowed by a sandbox's network. Pure functions (no I/O, no
 * global state): the API uses them to check requests, the egress proxy and DNS stub to
 * decide each connection and query. A table of cases tests them (tests/unit/test-netpolicy.c)
 * and a fuzz target feeds them hostile names (fuzz/fuzz-netpolicy.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include "error.h"
#include "policy.h"

#define NETPOLICY_NAME_MAX 253 /* a DNS name */
#define NETPOLICY_LIST_MAX 256 /* names in one allow or deny list */

/* Normalises one list entry: lowercase, a trailing dot stripped. An entry is a DNS name
 * ("example.com") or a wildcard of one leading label ("*.example.com", which matches every
 * name below example.com and not example.com itself). Refused (-EINVAL, *ret_error says
 * why, for an invalid request): a scheme ("https://"), a port, a path, a user, an IP literal (v4 or
 * v6), a bare "*", a "*" anywhere but the whole first label, empty labels, labels over 63 bytes or
 * characters outside [a-z0-9-_], a name over 253 bytes. out gets the normal form
 * (NETPOLICY_NAME_MAX + 1 bytes). */
int netpolicy_normalise_name(const char *in, char out[static NETPOLICY_NAME_MAX + 1],
                             char **ret_error);

/* Normalises a JSON array of names into a new array: each normalised, duplicates removed,
 * sorted. -EINVAL with *ret_error naming the entry (and its index) for a non-string or a
 * refused name, or a list over NETPOLICY_LIST_MAX. */
int netpolicy_normalise_list(const json_t *names, json_t **ret, char **ret_error);

/* Whether pattern (a normal-form entry) matches host (a normal-form name): an exact name
 * matches only itself; "*.example.com" matches "a.example.com" and "a.b.example.com", not
 * "example.com". */
bool netpolicy_match(const char *pattern, const char *host);

/* Whether wide covers every name narrow (a normal-form entry) can match: "*" (which only
 * may_allow may hold: anything) covers everything; "*.example.com" covers "a.example.com",
 * "*.a.example.com" and itself, not "example.com"; a name covers only itself. */
bool netpolicy_covers(const char *wide, const char *narrow);

/* The decision for one connection or query of a sandbox whose network object is net
 * ({mode, allow, deny}, normalised): allowed when the mode is open and no deny entry
 * matches, or the mode is allowlist and an allow entry matches and no deny entry does.
 * Deny wins, wildcards included. *ret_reason (static text) says which rule decided. */
bool netpolicy_allows(const json_t *net, const char *host, const char **ret_reason);
/* (Added by the implementation.) host is normalised first, so "EXAMPLE.com." is example.com;
 * a host that is not a name is refused, except an IP literal (v4, v6, "[v6]") in mode open,
 * which a deny list cannot name. A net that is not {mode, allow, deny} as resolve makes it
 * (an unknown mode, a list that is not an array of strings) is refused whole; a bare "*" on
 * an allow list grants nothing. */

/* Resolves a request's "network" value against the policy into a normalised
 * {mode, allow, deny}; NULL or absent means the policy's default. The rules (docs/api.md):
 * an unknown mode or a malformed name is invalid; a mode above the ceiling is refused;
 * "allow": [] is refused (it would be silently "nothing"); "allow": null or absent means the
 * default list; every name added to allow must be in the default allow list or within
 * may_allow (a wildcard only by "*" or an equal or broader wildcard there); deny may name
 * anything (it only tightens). Never clamps: what cannot be granted is refused. */
int netpolicy_resolve(const struct policy *p, const json_t *req, json_t **ret, struct err *err);
