/* nftgen.c: prints the `nft -f -` transaction sandboxd writes (egress/nftrules.c) for one
 * sandbox, so that bench/egress/run.sh measures the very table sandboxd uses rather than a
 * copy that could drift from it. Linked with egresscore; run.sh builds it.
 *   nftgen TAP HOST_ADDR GUEST_ADDR PROXY_PORT DNS_PORT */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nftrules.h"
#include "util.h"

static int
port_arg(const char *s, uint16_t *ret)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end || v == 0 || v > 65535)
		return -EINVAL;
	*ret = (uint16_t)v;
	return 0;
}

int
main(int argc, char **argv)
{
	_cleanup_buf_ struct buf out = BUF_INIT(64 * 1024);
	struct nft_sandbox sb = { 0 };
	struct nft_config c;
	struct in_addr h, g;
	int r;

	if (argc != 6 || strlen(argv[1]) >= sizeof(sb.tap) ||
	    inet_pton(AF_INET, argv[2], &h) != 1 || inet_pton(AF_INET, argv[3], &g) != 1 ||
	    port_arg(argv[4], &c.proxy_port) < 0 || port_arg(argv[5], &c.dns_port) < 0) {
		fprintf(stderr, "usage: nftgen TAP HOST_ADDR GUEST_ADDR PROXY_PORT DNS_PORT\n");
		return 2;
	}
	memcpy(sb.tap, argv[1], strlen(argv[1]) + 1);
	sb.host_addr = h.s_addr;
	sb.guest_addr = g.s_addr;
	r = nftrules_build(&sb, 1, &c, &out);
	if (r < 0) {
		fprintf(stderr, "nftgen: nftrules_build: %s\n", strerror(-r));
		return 1;
	}
	fputs(out.data, stdout);
	return fflush(stdout) == 0 ? 0 : 1;
}
