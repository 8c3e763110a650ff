/* netname.h: the names egress is decided by, as a network policy writes them: DNS names and
 * wildcards of one leading label ("*.example.com"), normalised one way, and whether a pattern
 * matches a host. Pure functions: sandboxd checks what a request or the policy file names
 * with them (daemon/net/netpolicy.c), the egress worker decides each host with them through
 * its compiled policy (matcher.h). */
#pragma once

#include <stdbool.h>

#define NETNAME_MAX 253       /* a DNS name */
#define NETNAME_SHOWN_SIZE 64 /* a name quoted back in a message: 60 bytes, "...", NUL */

/* Normalises one list entry: lowercase, a trailing dot stripped. An entry is a DNS name
 * ("example.com") or a wildcard of one leading label ("*.example.com", which matches every
 * name below example.com and not example.com itself). Refused (-EINVAL, *ret_error says
 * why, for a 400; -ENOMEM when that cannot be made): a scheme ("https://"), a port, a path,
 * a user, an IP literal (v4 or v6), a bare "*", a "*" anywhere but the whole first label,
 * empty labels, labels over 63 bytes or characters outside [a-z0-9-_], a name over 253
 * bytes. out gets the normal form, and is written only on success. */
int netname_normalise(const char *in, char out[static NETNAME_MAX + 1], char **ret_error);

/* Whether pattern (a normal-form entry) matches host (a normal-form name): an exact name
 * matches only itself; "*.example.com" matches "a.example.com" and "a.b.example.com", not
 * "example.com". "*" (which only a server's may_allow holds) matches everything. */
bool netname_match(const char *pattern, const char *host);

/* s as a message may quote it: at most 60 bytes, each byte that is not printable ASCII
 * replaced by '?' and "..." after a cut, because it is whatever a client sent and messages
 * reach logs and terminals. */
void netname_shown(const char *s, char out[static NETNAME_SHOWN_SIZE]);
