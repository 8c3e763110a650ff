/* matcher.h: one sandbox's network policy compiled for the egress worker. sandboxd sends each
 * sandbox's {mode, allow, deny} (as daemon/net/netpolicy.c resolves it: normalised names);
 * the worker compiles it once per "set" into sorted name sets, and the proxy and the DNS stub
 * decide every connection and query against that, without reading JSON again. Pure (no I/O,
 * no globals); a table of cases tests it (tests/unit/test-netpolicy.c) and the netpolicy fuzz
 * target checks it against the lists it was compiled from. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include "macro.h"
#include "netname.h"

/* The most names in one allow or deny list sandboxd sends: the worker's control line is
 * sized for two such lists (worker.c). */
#define MATCHER_LIST_MAX 256

struct matcher;

/* Compiles net, a {mode, allow, deny} object, into *ret (the caller's, freed with
 * matcher_free()). A net that is not such an object as netpolicy_resolve makes it (not an
 * object, an unknown mode, a list that is not an array) still compiles, into a matcher that
 * refuses every host and says why: a policy is never half-read. -ENOMEM only. */
int matcher_new(const json_t *net, struct matcher **ret);
/* NULL-safe; returns NULL. */
struct matcher *matcher_free(struct matcher *m);
DEFINE_FREEP(struct matcher, matcher_free)

/* The decision for one connection or query to host: allowed when the mode is open and no
 * deny entry matches, or the mode is allowlist and an allow entry matches and no deny entry
 * does. Deny wins, wildcards included. host is normalised first, so "EXAMPLE.com." is
 * example.com; a host that is not a name is refused, except an IP literal (v4, v6, "[v6]") in
 * mode open, which a deny list cannot name. A deny list holding something that is not a
 * string refuses every name; a bare "*" on an allow list grants nothing. A NULL m refuses
 * everything ("no network policy"). *ret_reason (static text, when wanted) says which rule
 * decided. */
bool matcher_allows(const struct matcher *m, const char *host, const char **ret_reason);
