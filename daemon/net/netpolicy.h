/* netpolicy.h: what a sandbox's network may be: lists of names normalised, and a request's
 * network checked against the server's policy ("tighten, never loosen", never clamped) into
 * the {mode, allow, deny} that the egress worker compiles and decides by (egress/matcher.h).
 * The names and their grammar are egress/netname.h's. Pure functions (no I/O, no global
 * state), used by the API and the policy file's loader. A table of cases tests them
 * (tests/unit/test-netpolicy.c) and a fuzz target feeds them hostile names and requests
 * (fuzz/fuzz-netpolicy.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include "error.h"
#include "matcher.h"
#include "netname.h"
#include "policy.h"

/* names in one allow or deny list: what the worker's control line is sized for */
#define NETPOLICY_LIST_MAX MATCHER_LIST_MAX

/* Normalises a JSON array of names into a new array: each normalised, duplicates removed,
 * sorted. -EINVAL with *ret_error naming the entry (and its index) for a non-string or a
 * refused name, or a list over NETPOLICY_LIST_MAX. */
int netpolicy_normalise_list(const json_t *names, json_t **ret, char **ret_error);

/* Whether wide covers every name narrow (a normal-form entry) can match: "*" (which only
 * may_allow may hold: anything) covers everything; "*.example.com" covers "a.example.com",
 * "*.a.example.com" and itself, not "example.com"; a name covers only itself. */
bool netpolicy_covers(const char *wide, const char *narrow);

/* Resolves a request's "network" value against the policy into a normalised
 * {mode, allow, deny}; NULL or absent means the policy's default. The rules (docs/api.md):
 * an unknown mode or a malformed name is invalid; a mode above the ceiling is refused;
 * "allow": [] is refused (it would be silently "nothing"); "allow": null or absent means the
 * default list; every name added to allow must be in the default allow list or within
 * may_allow (a wildcard only by "*" or an equal or broader wildcard there); deny may name
 * anything (it only tightens). Never clamps: what cannot be granted is refused. */
int netpolicy_resolve(const struct policy *p, const json_t *req, json_t **ret, struct err *err);
/* netpolicy_resolve with the names of also_allow (an array of names; NULL: none) granted as
 * though may_allow held them too: what the server grants a sandbox whatever may_allow says
 * (an agent's API hosts). */
int netpolicy_resolve_also(const struct policy *p, const json_t *also_allow, const json_t *req,
                           json_t **ret, struct err *err);

/* Whether a sandbox's network as it was granted (a netpolicy_resolve result, kept with the
 * sandbox) is still within the policy, which may have changed since (the policy file is read
 * at each start of sandboxd): its mode at most the ceiling, each allowed name in the default
 * allow list or within may_allow, and each name on the default deny list denied. 0, or -EPERM
 * with err (ERR_REFUSED) naming the first thing the policy no longer permits; -EINVAL
 * (ERR_INTERNAL) for a value that is not a granted network. */
int netpolicy_permits(const struct policy *p, const json_t *net, struct err *err);
/* netpolicy_permits with also_allow as in netpolicy_resolve_also. */
int netpolicy_permits_also(const struct policy *p, const json_t *also_allow, const json_t *net,
                           struct err *err);
