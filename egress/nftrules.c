/* nftrules.c: the text of the one `nft -f -` transaction that replaces table inet sandboxd
 * (docs/architecture.md, "Egress"). Sandboxes are elements of one set of (tap, guest address)
 * pairs, so the rules stay the same few lines however many sandboxes run, and a guest is only ever
 * recognised on its own tap with its own address: anything else a tap sends is dropped. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include "nftrules.h"
#include "util.h"

#define TAP_SUFFIX_MAX 12 /* IFNAMSIZ 16: NUL, and the 3 bytes of the prefix */
/* Flows one guest may have in the host's conntrack table at once (redirected ones: the rest
 * are dropped before they are kept). The table is the whole host's (nf_conntrack_max, often
 * 262144): a guest opening flows as fast as it can (a DNS query from a new port each time is
 * kept 30 s) would fill it, and then the host drops every new connection, its own included.
 * 8192 is 270 lookups a second for 30 s; a closed TCP connection no longer counts. The
 * count starts afresh with each table written (the set is the table's), which bounds what a
 * guest holds by this much per rewrite, not by more. */
#define FLOWS_PER_GUEST 8192

static bool
tap_ok(const char tap[static 16])
{
	size_t plen = strlen(NFTRULES_TAP_PREFIX), n;

	if (!memchr(tap, '\0', 16) || !str_has_prefix(tap, NFTRULES_TAP_PREFIX))
		return false;
	n = strlen(tap + plen);
	if (n < 1 || n > TAP_SUFFIX_MAX)
		return false;
	for (size_t i = plen; tap[i]; i++)
		if (!((tap[i] >= 'a' && tap[i] <= 'z') || (tap[i] >= '0' && tap[i] <= '9')))
			return false;
	return true;
}

/* One end of a point-to-point /30: neither its network nor its broadcast address, and not in
 * 0/8, 127/8 or 224/3, where no link address can live. */
static bool
link_addr_ok(uint32_t a)
{
	uint32_t first = a >> 24, low = a & 3;

	return first != 0 && first != 127 && first < 224 && low != 0 && low != 3;
}

static bool
sandbox_ok(const struct nft_sandbox *s)
{
	uint32_t h = ntohl(s->host_addr), g = ntohl(s->guest_addr);

	return tap_ok(s->tap) && link_addr_ok(h) && link_addr_ok(g) && h != g &&
	       (h & ~3u) == (g & ~3u);
}

static bool
sandboxes_clash(const struct nft_sandbox *a, const struct nft_sandbox *b)
{
	/* Each /30 holds exactly the host's and the guest's address, so two sandboxes share an
	 * address exactly when they share the /30. */
	return streq(a->tap, b->tap) || (ntohl(a->host_addr) & ~3u) == (ntohl(b->host_addr) & ~3u);
}

static int
validate(const struct nft_sandbox *v, size_t n, const struct nft_config *c)
{
	if (!c || (n > 0 && !v) || c->proxy_port == 0 || c->dns_port == 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!sandbox_ok(&v[i]))
			return -EINVAL;
		for (size_t j = 0; j < i; j++)
			if (sandboxes_clash(&v[i], &v[j]))
				return -EINVAL;
	}
	return 0;
}

/* Two sets of the same sandboxes: guests (tap, guest address), what a guest may send from;
 * links (tap, guest address, host address), where it may send DNS. */
static int
put_guests(struct buf *b, const struct nft_sandbox *v, size_t n)
{
	int r;

	for (int set = 0; set < 2; set++) {
		r = buf_printf(b, "\tset %s {\n\t\ttype ifname . ipv4_addr%s\n",
		               set == 0 ? "guests" : "links", set == 0 ? "" : " . ipv4_addr");
		/* An empty set takes no elements line: nft refuses `elements = { }`. */
		for (size_t i = 0; r >= 0 && i < n; i++) {
			char guest[INET_ADDRSTRLEN], host[INET_ADDRSTRLEN];
			struct in_addr g = { .s_addr = v[i].guest_addr },
			               h = { .s_addr = v[i].host_addr };

			if (!inet_ntop(AF_INET, &g, guest, sizeof(guest)) ||
			    !inet_ntop(AF_INET, &h, host, sizeof(host)))
				return -EINVAL;
			r = buf_printf(b, "%s\"%s\" . %s%s%s%s",
			               i == 0 ? "\t\telements = { " : "\t\t\t", v[i].tap, guest,
			               set == 0 ? "" : " . ", set == 0 ? "" : host,
			               i + 1 < n ? ",\n" : " }\n");
		}
		if (r >= 0)
			r = buf_puts(b, "\t}\n");
		if (r < 0)
			return r;
	}
	return 0;
}

int
nftrules_build(const struct nft_sandbox *v, size_t n, const struct nft_config *c, struct buf *out)
{
	_cleanup_buf_ struct buf b = BUF_INIT(out ? out->max : 0);
	int r;

	if (!out)
		return -EINVAL;
	r = validate(v, n, c);
	if (r < 0)
		return r;

	/* "add" makes the "delete" valid when the table does not exist yet; all three apply in
	 * one transaction, so there is no moment without the table, and no other table (the
	 * machine's own firewall, Docker's, another tool's) is touched. */
	r = buf_puts(&b, "add table " NFTRULES_TABLE "\n"
	                 "delete table " NFTRULES_TABLE "\n"
	                 "table " NFTRULES_TABLE " {\n"
	                 "\tcounter " NFTRULES_COUNTER_TAP " {\n\t}\n"
	                 "\tcounter " NFTRULES_COUNTER_PORT " {\n\t}\n"
	                 "\tcounter " NFTRULES_COUNTER_FORWARD " {\n\t}\n");
	if (r >= 0)
		r = put_guests(&b, v, n);
	/* each guest's count of flows kept for it (filled by the guest chain's ct count) */
	if (r >= 0)
		r = buf_puts(&b, "\tset flows {\n\t\ttype ipv4_addr\n\t\tsize 65535\n"
		                 "\t\tflags dynamic\n\t}\n");
	/* redirect sends a guest's packet to the primary address of the interface it came in
	 * on: the host side of that sandbox's own /30, whatever address the guest aimed at.
	 * Only a guest on its own tap with its own source is redirected at all. Web traffic to
	 * any address goes to the proxy (which decides by name, never by that address); DNS only
	 * when sent to the host side of its own link, its resolver: a query to any other server
	 * is dropped, so a guest that hard-codes one learns at once that it cannot. */
	if (r >= 0)
		r = buf_printf(
		        &b,
		        "\tchain prerouting {\n"
		        "\t\ttype nat hook prerouting priority dstnat; policy accept;\n"
		        "\t\tiifname . ip saddr @guests tcp dport { 80, 443 } redirect to :%u\n"
		        "\t\tiifname . ip saddr . ip daddr @links udp dport 53 redirect to :%u\n"
		        "\t}\n",
		        c->proxy_port, c->dns_port);
	/* A drop here is final whatever other tables accept. Whatever a tap sends that is not
	 * from a known (tap, address) pair is dropped: a spoofed source, an unknown tap, and
	 * all IPv6 (`ip saddr` matches IPv4 only). A known guest reaches the host only through
	 * the redirect (ct status dnat), so dialling the proxy port directly fails too; its
	 * replies are accepted only after the pair check, so no guest can slip packets into
	 * another's connections with that guest's address. The pair is checked here and in
	 * prerouting alike: either alone stops a spoofed source, and a later edit to one of
	 * them does not open the host. The
	 * proxy and DNS ports take nothing from other interfaces but loopback, so other
	 * machines cannot use them even when the worker listens on every address. */
	if (r >= 0)
		r = buf_printf(
		        &b,
		        "\tchain input {\n"
		        "\t\ttype filter hook input priority filter; policy accept;\n"
		        "\t\tiifname . ip saddr @guests goto guest\n"
		        "\t\tiifname \"" NFTRULES_TAP_PREFIX
		        "*\" counter name \"" NFTRULES_COUNTER_TAP "\" drop\n"
		        "\t\tiifname != \"lo\" tcp dport %u counter name \"" NFTRULES_COUNTER_PORT
		        "\" drop\n"
		        "\t\tiifname != \"lo\" udp dport %u counter name \"" NFTRULES_COUNTER_PORT
		        "\" drop\n"
		        "\t}\n"
		        "\tchain guest {\n"
		        "\t\tct state established,related accept\n"
		        "\t\tct status dnat ct state new add @flows { ip saddr ct count over %u } "
		        "counter name \"" NFTRULES_COUNTER_TAP "\" drop\n"
		        "\t\tct status dnat tcp dport %u accept\n"
		        "\t\tct status dnat udp dport %u accept\n"
		        "\t\tcounter name \"" NFTRULES_COUNTER_TAP "\" drop\n"
		        "\t}\n",
		        c->proxy_port, c->dns_port, FLOWS_PER_GUEST, c->proxy_port, c->dns_port);
	/* Sandboxes never reach each other or anything beyond the host, even where the host
	 * forwards for others (ip_forward set by Docker or a VPN). Ingress is closed too: the
	 * host itself opens nothing into a tap; only the answers to what a guest sent
	 * (the proxy's and the DNS stub's, and errors about them) go out of one. */
	if (r >= 0)
		r = buf_puts(&b, "\tchain forward {\n"
		                 "\t\ttype filter hook forward priority filter; policy accept;\n"
		                 "\t\tiifname \"" NFTRULES_TAP_PREFIX
		                 "*\" counter name \"" NFTRULES_COUNTER_FORWARD "\" drop\n"
		                 "\t\toifname \"" NFTRULES_TAP_PREFIX
		                 "*\" counter name \"" NFTRULES_COUNTER_FORWARD "\" drop\n"
		                 "\t}\n"
		                 "\tchain output {\n"
		                 "\t\ttype filter hook output priority filter; policy accept;\n"
		                 "\t\toifname \"" NFTRULES_TAP_PREFIX
		                 "*\" ct state established,related accept\n"
		                 "\t\toifname \"" NFTRULES_TAP_PREFIX
		                 "*\" counter name \"" NFTRULES_COUNTER_FORWARD "\" drop\n"
		                 "\t}\n"
		                 "}\n");
	/* Appended whole or not at all: a caller never feeds nft half a transaction. */
	if (r >= 0)
		r = buf_append(out, b.data, b.len);
	return r < 0 ? r : 0;
}
