/* egress.h: sandboxd's side of egress enforcement (docs/egress.md): the ports
 * bound at startup, the unprivileged egress worker (egress/worker.h) started, fed every
 * sandbox's policy and supervised, the nftables table inet sandboxd kept in step with the
 * sandboxes' links, and the worker's decisions turned into events and counters. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct sandboxd;
struct sandbox;

/* One sandbox's link: its tap on the host and the two ends of its /30. */
struct egress_link {
	char tap[16];
	uint32_t host_addr;  /* network order */
	uint32_t guest_addr; /* network order */
};

/* What the worker decided since sandboxd started (for metrics). */
struct egress_counters {
	uint64_t allowed, denied;         /* proxied connections */
	uint64_t dns_allowed, dns_denied; /* DNS queries */
	uint64_t bytes_out, bytes_in;     /* through allowed connections, once they ended */
	uint64_t dropped;                 /* decisions the worker could not send */
	uint64_t suppressed;              /* decisions over a sandbox's event rate, not recorded */
};

/* Starts egress (as root with --egress on): finds nft (PATH, then the sbin directories),
 * binds the proxy and DNS ports (a busy one stops startup, naming the port and its flag),
 * writes the empty table, starts the worker as uid (the caller's unprivileged uid) and waits
 * for it to be ready. Any of these failing stops startup (fail closed): logged and returned. */
int egress_start(struct sandboxd *d, uid_t uid);
/* Stops the worker; the table stays (running VMs keep their rules until the next sandboxd
 * rewrites them). NULL-safe, idempotent. */
void egress_stop(struct sandboxd *d);
bool egress_enabled(const struct sandboxd *d);
/* While egress runs: removes the taps named like ours (sbxN) that no VMM holds, as its start
 * does, telling fn (may be NULL) each one's name. Returns how many were removed. */
unsigned egress_sweep_taps(struct sandboxd *d, void (*fn)(struct sandboxd *d, const char *tap));

/* NULL while egress is off. */
const struct egress_counters *egress_counters(const struct sandboxd *d);

/* The link of a sandbox slot (0-based) in --egress-subnet: tap sbx<slot>, host .4k+1,
 * guest .4k+2. -ERANGE past the subnet; egress_slots() says how many there are. */
int egress_link_for_slot(const struct sandboxd *d, unsigned slot, struct egress_link *ret);
unsigned egress_slots(const struct sandboxd *d);
/* Creates the tap of a link (not persistent: it lives while an fd on it is open), its host
 * side addressed and up, IPv6 off; returns the fd for the VMM. -errno (-EBUSY: a device of
 * that name exists). */
int egress_tap_open(const struct egress_link *link, int *ret_fd);

/* How the wait of egress_attach ended: 0, the table as nft applied it redirects the sandbox's
 * link; -EIO, nft failed (why says so briefly, for the sandbox's reason: nft's own output
 * goes to the log only), and the link is not in the table; -ECANCELED, the sandbox was detached
 * or egress stopped first (why NULL; nothing of the sandbox may be touched then). */
typedef void (*egress_ready_fn)(void *data, int error, const char *why);

/* A sandbox's link is up (its tap made for a boot, or its VM taken back) or gone (its VM
 * ended): the worker learns its policy at once, and the table its link (only while its mode is
 * not none), through nft in the background. With ready, a boot waits for the table (fail
 * closed: its VM starts only once its traffic is redirected, and a table that cannot be written
 * fails the boot): egress_attach returns 1, and ready(data, ...) is called exactly once, from
 * the loop, never from within egress_attach. 0: nothing to wait for (mode none, or no ready);
 * -ENOMEM: the sandbox is not attached (it reaches nothing). */
int egress_attach(struct sandboxd *d, struct sandbox *sb, const struct egress_link *link,
                  egress_ready_fn ready, void *data);
void egress_detach(struct sandboxd *d, struct sandbox *sb);
/* sb->network changed (PATCH): the worker and the table follow, tighter first. */
void egress_update(struct sandboxd *d, struct sandbox *sb);

/* What sandboxd takes of one {"op":"egress"} line from the worker (egress/worker.h). The
 * worker parses what guests send and could be subverted, so nothing in the line is taken on
 * trust: the id must be a sandbox id, via, verdict and port one of theirs, the name null or
 * DNS characters, the reason short printable ASCII, and a connection's addr an address (or
 * null), its byte counts non-negative and cut a boolean. Returns the event's data, a new
 * object of exactly those fields (no op or id), with *ret_id (pointing into msg),
 * *ret_allowed and *ret_dns set; NULL when the line is not such a decision. */
json_t *egress_decision_data(const json_t *msg, const char **ret_id, bool *ret_allowed,
                             bool *ret_dns);

/* Lines about what guests (or the worker) caused are logged at most 20 a second, all
 * sandboxes together: a guest decides how many denials there are, and the log is the host's.
 * Returns whether a line may be logged at now_ms; *ret_missed is how many were held back in
 * an earlier second, to be said once. */
struct egress_lograte {
	uint64_t second, logged, missed;
};
bool egress_lograte_take(struct egress_lograte *r, uint64_t now_ms, uint64_t *ret_missed);
