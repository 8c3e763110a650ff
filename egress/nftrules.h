/* nftrules.h: the host's nftables ruleset for sandboxes' egress (docs/architecture.md,
 * "Egress"). One table, `inet sandboxd`, replaced as a whole in one `nft -f -` transaction
 * (never assuming it is the only table on the machine): a guest's tcp/80 and tcp/443 are
 * redirected to the egress proxy, and its udp/53 sent to the host side of its own link to the
 * DNS stub; everything else from a sandbox's tap is dropped (other ports, other UDP
 * including QUIC, ICMP, IPv6); nothing is forwarded to or from a tap; the proxy and DNS
 * ports accept only redirected traffic (a guest cannot reach them directly, and neither can
 * other machines). Pure: builds the text; running nft is the caller's. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include "buf.h"

#define NFTRULES_TAP_PREFIX "sbx"      /* every sandbox tap's name starts so (IFNAMSIZ: 15) */
#define NFTRULES_TABLE "inet sandboxd" /* family and name, as nft's commands take them */
/* Named counters in the table (`nft list counter inet sandboxd NAME`), for tests and metrics:
 * what taps sent that was dropped at the host, what other interfaces sent to the proxy or DNS
 * port, and what was refused forwarding to or from a tap or opening into one from the host. */
#define NFTRULES_COUNTER_TAP "tap_drop"
#define NFTRULES_COUNTER_PORT "port_drop"
#define NFTRULES_COUNTER_FORWARD "forward_drop"

struct nft_sandbox {
	char tap[16];        /* interface name, NFTRULES_TAP_PREFIX followed by [a-z0-9] */
	uint32_t host_addr;  /* the host side of the sandbox's /30, network order */
	uint32_t guest_addr; /* the guest's address in it, network order */
};

struct nft_config {
	uint16_t proxy_port; /* where the egress proxy listens (tcp) */
	uint16_t dns_port;   /* where the DNS stub listens (udp) */
};

/* Appends the whole transaction for these sandboxes (n may be 0: the table with no sandbox
 * rules, still dropping whatever a stray tap sends) to out. -EINVAL for a tap name that is
 * not prefix + [a-z0-9]{1,12}, a guest address outside the host's /30, a port 0 or two
 * sandboxes sharing a tap or an address; -ENOMEM. (Added: also -EINVAL for a /30's network or
 * broadcast address, host == guest, or an address in 0/8, 127/8 or 224/3; -ENOBUFS when out's
 * max is too small. On any failure out is left as it was.) */
int nftrules_build(const struct nft_sandbox *v, size_t n, const struct nft_config *c,
                   struct buf *out);
