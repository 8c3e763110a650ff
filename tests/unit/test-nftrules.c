/* test-nftrules.c: egress/nftrules.c, the host's nftables table for sandboxes. What it refuses
 * to build, then, as root, the text loaded by the real nft into network namespaces this test
 * creates (never the machine's own ruleset) and traffic sent through it: a host namespace
 * with two sandbox taps (veth ends named like taps) and an ordinary interface, two guests
 * and another machine. Every listener answers with its own marker, so a probe tells which
 * one it reached (redirected or not), and every probe that must be dropped has a control
 * just before it that would have got an answer. Listeners and clients are sockets this
 * process opens inside the namespaces (setns), so nothing outlives the test but the
 * namespaces, which teardown deletes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "harness.h"
#include "nftrules.h"
#include "util.h"

#define PROXY_PORT 3128
#define DNS_PORT 7353
#define PROBE_MS 1000

/* ---- what nftrules_build refuses ---- */

static uint32_t
addr(const char *s)
{
	struct in_addr a;

	assert_int_equal(inet_pton(AF_INET, s, &a), 1);
	return a.s_addr;
}

static struct nft_sandbox
sbx(const char *tap, const char *host, const char *guest)
{
	struct nft_sandbox s = { .host_addr = addr(host), .guest_addr = addr(guest) };

	assert_true(strlen(tap) < sizeof(s.tap));
	memcpy(s.tap, tap, strlen(tap));
	return s;
}

static const struct nft_config config = { .proxy_port = PROXY_PORT, .dns_port = DNS_PORT };

/* Builds into a buffer that already holds text; on failure the text must be untouched. */
static int
build_keep(const struct nft_sandbox *v, size_t n, const struct nft_config *c)
{
	_cleanup_buf_ struct buf out = BUF_INIT(1 << 20);
	int r;

	assert_int_equal(buf_puts(&out, "before\n"), 0);
	r = nftrules_build(v, n, c, &out);
	if (r < 0)
		assert_string_equal(out.data, "before\n");
	else
		assert_true(str_has_prefix(out.data, "before\nadd table inet sandboxd\n"));
	return r;
}

static void
test_refused(void **state)
{
	static const char *const bad_taps[] = {
		"eth0", "sbx", "sbxA", "sbx-1", "sbx_1", "sbx 1", "SBX1", "tap1",
	};
	struct nft_sandbox two[2], one = sbx("sbx1", "10.1.0.1", "10.1.0.2");
	struct nft_config c = config;
	(void)state;

	assert_int_equal(build_keep(&one, 1, &config), 0);
	assert_int_equal(build_keep(NULL, 0, &config), 0);
	/* twelve characters after the prefix is the most an interface name holds */
	one = sbx("sbx123456789012", "10.1.0.1", "10.1.0.2");
	assert_int_equal(build_keep(&one, 1, &config), 0);

	for (size_t i = 0; i < ARRAY_SIZE(bad_taps); i++) {
		one = sbx(bad_taps[i], "10.1.0.1", "10.1.0.2");
		if (build_keep(&one, 1, &config) != -EINVAL)
			fail_msg("tap name '%s' accepted", bad_taps[i]);
	}
	/* a name filling all 16 bytes without its NUL */
	one = sbx("sbx1", "10.1.0.1", "10.1.0.2");
	memset(one.tap, 'a', sizeof(one.tap));
	memcpy(one.tap, "sbx", 3);
	assert_int_equal(build_keep(&one, 1, &config), -EINVAL);

	/* the guest outside the host's /30, the same address twice, the /30's network and
	 * broadcast addresses, and addresses no link has */
	static const char *const bad_pairs[][2] = {
		{ "10.1.0.1", "10.1.0.5" }, { "10.1.0.1", "10.1.1.2" },
		{ "10.1.0.1", "10.1.0.1" }, { "10.1.0.1", "10.1.0.0" },
		{ "10.1.0.1", "10.1.0.3" }, { "10.1.0.0", "10.1.0.1" },
		{ "10.1.0.3", "10.1.0.2" }, { "127.0.0.1", "127.0.0.2" },
		{ "0.0.0.1", "0.0.0.2" },   { "224.0.0.1", "224.0.0.2" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad_pairs); i++) {
		one = sbx("sbx1", bad_pairs[i][0], bad_pairs[i][1]);
		if (build_keep(&one, 1, &config) != -EINVAL)
			fail_msg("host %s guest %s accepted", bad_pairs[i][0], bad_pairs[i][1]);
	}
	/* the guest may be either usable end of the /30 */
	one = sbx("sbx1", "10.1.0.2", "10.1.0.1");
	assert_int_equal(build_keep(&one, 1, &config), 0);

	/* two sandboxes on one tap, or sharing the /30 (and so an address) */
	two[0] = sbx("sbx1", "10.1.0.1", "10.1.0.2");
	two[1] = sbx("sbx2", "10.1.0.5", "10.1.0.6");
	assert_int_equal(build_keep(two, 2, &config), 0);
	two[1] = sbx("sbx1", "10.1.0.5", "10.1.0.6");
	assert_int_equal(build_keep(two, 2, &config), -EINVAL);
	two[1] = sbx("sbx2", "10.1.0.2", "10.1.0.1");
	assert_int_equal(build_keep(two, 2, &config), -EINVAL);

	c.proxy_port = 0;
	assert_int_equal(build_keep(&one, 1, &c), -EINVAL);
	c = config;
	c.dns_port = 0;
	assert_int_equal(build_keep(&one, 1, &c), -EINVAL);
	assert_int_equal(build_keep(&one, 1, NULL), -EINVAL);
	assert_int_equal(build_keep(NULL, 1, &config), -EINVAL);
}

/* A buffer too small for the whole text gets none of it. */
static void
test_too_big(void **state)
{
	_cleanup_buf_ struct buf out = BUF_INIT(200);
	(void)state;

	assert_int_equal(buf_puts(&out, "x"), 0);
	assert_int_equal(nftrules_build(NULL, 0, &config, &out), -ENOBUFS);
	assert_string_equal(out.data, "x");
}

/* ---- namespaces ---- */

struct listener {
	int fd;
	bool tcp;
	const char *marker;
};

struct net {
	bool usable;
	char dir[256];
	char ns[5][32]; /* H, G, G2, O for traffic; N for loading */
	int self_ns;
	struct listener l[12];
	size_t n_l;
	char answer[64];
};

enum {
	NS_H,
	NS_G,
	NS_G2,
	NS_O,
	NS_N
};

/* Runs a shell command line; returns its exit status, printing its output when it is not 0
 * unless quiet. */
static int sh_(bool quiet, char **ret_out, const char *fmt, ...) _printf_(3, 4);
static int
sh_(bool quiet, char **ret_out, const char *fmt, ...)
{
	_cleanup_free_ char *cmd = NULL, *out = NULL;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&cmd, fmt, ap);
	va_end(ap);
	assert_true(r >= 0);
	r = harness_run("/bin/sh", (const char *const[]){ "-c", cmd, NULL }, NULL, &out);
	if (r != 0 && !quiet)
		fprintf(stderr, "`%s` exited %d: %s\n", cmd, r, out ? out : "");
	if (ret_out)
		*ret_out = TAKE_PTR(out);
	return r;
}
#define sh(...) sh_(false, NULL, __VA_ARGS__)
#define sh_quiet(...) sh_(true, NULL, __VA_ARGS__)

/* nft with these arguments in namespace i; its exit status, its output in *ret_out. */
static int nft_(struct net *t, int i, char **ret_out, const char *fmt, ...) _printf_(4, 5);
static int
nft_(struct net *t, int i, char **ret_out, const char *fmt, ...)
{
	_cleanup_free_ char *args = NULL;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&args, fmt, ap);
	va_end(ap);
	assert_true(r >= 0);
	return sh_(false, ret_out, "ip netns exec %s nft %s", t->ns[i], args);
}
#define nft(t, i, ...) nft_(t, i, NULL, __VA_ARGS__)

/* Builds the table for these sandboxes and loads it into namespace i: checked first, then
 * for real. */
static void
load(struct net *t, int i, const struct nft_sandbox *v, size_t n)
{
	_cleanup_buf_ struct buf text = BUF_INIT(1 << 20);
	_cleanup_free_ char *path = strdup_printf("%s/rules.nft", t->dir);

	assert_int_equal(nftrules_build(v, n, &config, &text), 0);
	assert_int_equal(write_file_atomic(path, text.data, text.len, 0600), 0);
	assert_int_equal(nft(t, i, "-c -f %s", path), 0);
	assert_int_equal(nft(t, i, "-f %s", path), 0);
}

/* The packets a named counter of the table has counted in namespace i. */
static long
counter(struct net *t, int i, const char *name)
{
	_cleanup_free_ char *out = NULL;
	const char *p;

	assert_int_equal(nft_(t, i, &out, "list counter %s %s", NFTRULES_TABLE, name), 0);
	p = strstr(out, "packets ");
	assert_non_null(p);
	return strtol(p + strlen("packets "), NULL, 10);
}

static int
count_str(const char *s, const char *needle)
{
	int n = 0;

	for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* A socket in namespace i: this thread enters it, opens the socket and comes back. */
static int
socket_in(struct net *t, int i, int family, int type, int proto)
{
	_cleanup_free_ char *path = strdup_printf("/run/netns/%s", t->ns[i]);
	_cleanup_close_ int nsfd = open(path, O_RDONLY | O_CLOEXEC);
	int fd;

	assert_true(nsfd >= 0);
	assert_int_equal(setns(nsfd, CLONE_NEWNET), 0);
	fd = socket(family, type | SOCK_CLOEXEC, proto);
	assert_int_equal(setns(t->self_ns, CLONE_NEWNET), 0);
	assert_true(fd >= 0);
	return fd;
}

static socklen_t
sockaddr_of(const char *ip, int port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *a = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, ip, &a->sin_addr) == 1) {
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		return sizeof(*a);
	}
	assert_int_equal(inet_pton(AF_INET6, ip, &a6->sin6_addr), 1);
	a6->sin6_family = AF_INET6;
	a6->sin6_port = htons((uint16_t)port);
	return sizeof(*a6);
}

/* A listener on every address of namespace i (IPv4 and IPv6 for tcp6). */
static void
listen_in(struct net *t, int i, const char *proto, int port, const char *marker)
{
	bool tcp = !streq(proto, "udp"), six = streq(proto, "tcp6");
	struct sockaddr_storage ss;
	socklen_t len = sockaddr_of(six ? "::" : "0.0.0.0", port, &ss);
	int fd = socket_in(t, i, six ? AF_INET6 : AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0),
	    zero = 0;

	assert_true(t->n_l < ARRAY_SIZE(t->l));
	if (six)
		assert_int_equal(setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)), 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&ss, len), 0);
	if (tcp)
		assert_int_equal(listen(fd, 8), 0);
	t->l[t->n_l++] = (struct listener){ .fd = fd, .tcp = tcp, .marker = marker };
}

/* Answers whatever reached the listeners within ms: a connection gets the listener's marker
 * and is closed, a datagram gets the marker back. Returns how many were answered. */
static int
serve(struct net *t, int ms)
{
	struct pollfd p[ARRAY_SIZE(t->l)];
	int served = 0;

	for (size_t i = 0; i < t->n_l; i++)
		p[i] = (struct pollfd){ .fd = t->l[i].fd, .events = POLLIN };
	if (poll(p, t->n_l, ms) <= 0)
		return 0;
	for (size_t i = 0; i < t->n_l; i++) {
		struct sockaddr_storage from;
		socklen_t flen = sizeof(from);
		const char *m = t->l[i].marker;
		char dgram[512];

		if (!(p[i].revents & POLLIN))
			continue;
		if (t->l[i].tcp) {
			_cleanup_close_ int c = accept4(t->l[i].fd, NULL, NULL, SOCK_CLOEXEC);

			if (c >= 0 && write_all(c, m, strlen(m)) == 0)
				served++;
		} else if (recvfrom(t->l[i].fd, dgram, sizeof(dgram), 0, (struct sockaddr *)&from,
		                    &flen) >= 0 &&
		           sendto(t->l[i].fd, m, strlen(m), 0, (struct sockaddr *)&from, flen) >=
		                   0) {
			served++;
		}
	}
	return served;
}

/* Reads the answer on a probe's socket into t->answer: the marker, "refused" or "timeout". */
static const char *
answer(struct net *t, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, PROBE_MS) <= 0)
		return "timeout";
	n = recv(fd, t->answer, sizeof(t->answer) - 1, 0);
	if (n < 0)
		return errno == ECONNREFUSED ? "refused" : strerror(errno);
	t->answer[n] = '\0';
	return t->answer;
}

static void
bind_src(int fd, const char *src)
{
	struct sockaddr_storage ss;
	socklen_t len;

	if (!src)
		return;
	len = sockaddr_of(src, 0, &ss);
	assert_int_equal(bind(fd, (struct sockaddr *)&ss, len), 0);
}

/* A TCP connection from namespace i (from address src when not NULL) to dst:port: which
 * listener answered, or "refused", or "timeout". */
static const char *
tcp_probe(struct net *t, int i, const char *src, const char *dst, int port)
{
	struct sockaddr_storage ss;
	socklen_t len = sockaddr_of(dst, port, &ss);
	_cleanup_close_ int fd = socket_in(t, i, ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	socklen_t elen = sizeof(int);
	int err = 0;

	bind_src(fd, src);
	if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS)
		return strerror(errno);
	if (poll(&p, 1, PROBE_MS) <= 0)
		return "timeout";
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen), 0);
	if (err)
		return err == ECONNREFUSED ? "refused" : strerror(err);
	serve(t, PROBE_MS);
	return answer(t, fd);
}

/* A UDP datagram from namespace i to dst:port on a connected socket, so only an answer from
 * dst:port itself counts (the redirect must be undone on the way back): the marker, "refused",
 * "timeout" when no listener heard it, "one-way" when one did but its answer never came. */
static const char *
udp_probe(struct net *t, int i, const char *dst, int port)
{
	struct sockaddr_storage ss;
	socklen_t len = sockaddr_of(dst, port, &ss);
	_cleanup_close_ int fd = socket_in(t, i, ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	const char *a;

	assert_int_equal(connect(fd, (struct sockaddr *)&ss, len), 0);
	assert_int_equal(send(fd, "?", 1, 0), 1);
	if (serve(t, PROBE_MS) == 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		/* an ICMP port unreachable shows as an error on the socket */
		return poll(&p, 1, 0) > 0 ? answer(t, fd) : "timeout";
	}
	a = answer(t, fd);
	return streq(a, "timeout") ? "one-way" : a;
}

static uint16_t
icmp_sum(const void *data, size_t n)
{
	const uint8_t *b = data;
	uint32_t s = 0;

	for (size_t i = 0; i + 1 < n; i += 2)
		s += (uint32_t)(b[i] << 8 | b[i + 1]);
	if (n & 1)
		s += (uint32_t)b[n - 1] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return htons((uint16_t)~s);
}

/* An ICMP echo request from namespace i to dst: "reply" or "timeout". */
static const char *
ping_probe(struct net *t, int i, const char *dst)
{
	struct sockaddr_storage ss;
	socklen_t len = sockaddr_of(dst, 0, &ss);
	_cleanup_close_ int fd = socket_in(t, i, AF_INET, SOCK_RAW | SOCK_NONBLOCK, IPPROTO_ICMP);
	uint16_t id = (uint16_t)getpid();
	struct icmphdr req = { .type = ICMP_ECHO, .un.echo.id = htons(id), .un.echo.sequence = 1 };
	uint64_t deadline = now_mono_ms() + PROBE_MS;

	req.checksum = icmp_sum(&req, sizeof(req));
	assert_int_equal(sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&ss, len),
	                 (ssize_t)sizeof(req));
	for (uint64_t now; (now = now_mono_ms()) < deadline;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint8_t pkt[1500];
		struct iphdr ip;
		struct icmphdr reply;
		ssize_t n;

		if (poll(&p, 1, (int)(deadline - now)) <= 0)
			break;
		n = recv(fd, pkt, sizeof(pkt), 0);
		if (n < (ssize_t)sizeof(ip))
			continue;
		memcpy(&ip, pkt, sizeof(ip));
		if (n < (ssize_t)(ip.ihl * 4u + sizeof(reply)))
			continue;
		memcpy(&reply, pkt + ip.ihl * 4, sizeof(reply));
		if (reply.type == ICMP_ECHOREPLY && ntohs(reply.un.echo.id) == id &&
		    ip.saddr == ((struct sockaddr_in *)&ss)->sin_addr.s_addr)
			return "reply";
	}
	return "timeout";
}

static void
net_free(struct net *t)
{
	for (size_t i = 0; i < t->n_l; i++)
		safe_close(t->l[i].fd);
	t->n_l = 0;
	for (size_t i = 0; i < ARRAY_SIZE(t->ns); i++)
		if (t->ns[i][0]) {
			sh("ip netns del %s", t->ns[i]);
			t->ns[i][0] = '\0';
		}
	if (t->dir[0])
		sh("rm -rf %s", t->dir);
	safe_close(t->self_ns);
	free(t);
}

/* Root, ip netns and nft, or the namespace tests are skipped (saying why). */
static bool namespace_skipped; /* a test needing namespaces could not run */

static struct net *
net_new(void)
{
	struct net *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	t->self_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	assert_true(t->self_ns >= 0);
	assert_int_equal(harness_tmpdir(t->dir, sizeof(t->dir)), 0);
	if (geteuid() != 0) {
		fprintf(stderr, "skip: nftables in network namespaces needs root\n");
		return t;
	}
	snprintf(t->ns[NS_N], sizeof(t->ns[NS_N]), "sbxnft%d-n", (int)getpid());
	if (sh_quiet("ip netns add %s && ip netns exec %s nft list ruleset", t->ns[NS_N],
	             t->ns[NS_N]) != 0) {
		fprintf(stderr, "skip: cannot create a network namespace and run nft in it\n");
		sh_quiet("ip netns del %s", t->ns[NS_N]);
		t->ns[NS_N][0] = '\0';
		return t;
	}
	t->usable = true;
	return t;
}

static int
setup_net(void **state)
{
	*state = net_new();
	return 0;
}

static int
teardown_net(void **state)
{
	net_free(*state);
	return 0;
}

/* ---- loading ---- */

static void
test_load(void **state)
{
	struct net *t = *state;
	struct nft_sandbox a[2] = { sbx("sbxa1", "10.9.0.1", "10.9.0.2"),
		                    sbx("sbxa2", "10.9.0.5", "10.9.0.6") };
	struct nft_sandbox b = sbx("sbxb", "10.9.0.9", "10.9.0.10");
	_cleanup_free_ char *list = NULL, *tables = NULL;

	if (!t->usable) {
		namespace_skipped = true;
		skip();
	}
	/* someone else's tables, one of them with our name in another family */
	assert_int_equal(nft(t, NS_N,
	                     "'add table inet other; add chain inet other c { type filter "
	                     "hook input priority 0; policy accept; }; add table ip sandboxd'"),
	                 0);

	load(t, NS_N, NULL, 0);
	load(t, NS_N, a, 2);
	load(t, NS_N, a, 2);
	assert_int_equal(nft_(t, NS_N, &list, "list table %s", NFTRULES_TABLE), 0);
	assert_int_equal(count_str(list, "chain prerouting {"), 1);
	assert_int_equal(count_str(list, "chain input {"), 1);
	assert_int_equal(count_str(list, "chain forward {"), 1);
	assert_int_equal(count_str(list, "chain output {"), 1);
	assert_int_equal(count_str(list, "set guests {"), 1);
	assert_int_equal(count_str(list, "set links {"), 1);
	assert_int_equal(count_str(list, "goto guest"), 1);
	/* once in each set; with the host side of its link in links */
	assert_int_equal(count_str(list, "\"sbxa1\" . 10.9.0.2"), 2);
	assert_int_equal(count_str(list, "\"sbxa2\" . 10.9.0.6"), 2);
	assert_int_equal(count_str(list, "\"sbxa1\" . 10.9.0.2 . 10.9.0.1"), 1);
	assert_int_equal(count_str(list, "\"sbxa2\" . 10.9.0.6 . 10.9.0.5"), 1);
	free(list);

	/* replaced, not merged: the first sandboxes are gone */
	load(t, NS_N, &b, 1);
	assert_int_equal(nft_(t, NS_N, &list, "list table %s", NFTRULES_TABLE), 0);
	assert_int_equal(count_str(list, "chain input {"), 1);
	assert_int_equal(count_str(list, "\"sbxb\" . 10.9.0.10"), 2);
	assert_null(strstr(list, "sbxa"));

	assert_int_equal(nft_(t, NS_N, &tables, "list tables"), 0);
	assert_int_equal(count_str(tables, "table inet other\n"), 1);
	assert_int_equal(count_str(tables, "table ip sandboxd\n"), 1);
	assert_int_equal(count_str(tables, "table inet sandboxd\n"), 1);
	assert_int_equal(nft(t, NS_N, "list chain inet other c"), 0);
}

/* ---- traffic ----
 *
 *   G  eth0 10.77.0.2/30 (and 10.77.9.9, spoofed), fd77::2 -- sbxtest1 10.77.0.1, fd77::1  H
 *   G2 eth0 10.77.0.6/30                                   -- sbxtest2 10.77.0.5           H
 *   O  eth0 10.77.1.2/24, fd78::2                          -- eth1 10.77.1.1, fd78::1      H
 *
 * H forwards (ip_forward=1) and has no rp_filter, so only the rules stand in the way. */

static void
load_traffic_rules(struct net *t)
{
	struct nft_sandbox v[2] = { sbx("sbxtest1", "10.77.0.1", "10.77.0.2"),
		                    sbx("sbxtest2", "10.77.0.5", "10.77.0.6") };

	load(t, NS_H, v, 2);
}

static int
setup_traffic(void **state)
{
	struct net *t = net_new();
	const char *h = t->ns[NS_H], *g = t->ns[NS_G], *g2 = t->ns[NS_G2], *o = t->ns[NS_O];
	int r = 0;

	*state = t;
	if (!t->usable)
		return 0;
	snprintf(t->ns[NS_H], sizeof(t->ns[0]), "sbxnft%d-h", (int)getpid());
	snprintf(t->ns[NS_G], sizeof(t->ns[0]), "sbxnft%d-g", (int)getpid());
	snprintf(t->ns[NS_G2], sizeof(t->ns[0]), "sbxnft%d-g2", (int)getpid());
	snprintf(t->ns[NS_O], sizeof(t->ns[0]), "sbxnft%d-o", (int)getpid());
	for (int i = NS_H; i <= NS_O; i++)
		r |= sh("ip netns add %s && ip -n %s link set lo up", t->ns[i], t->ns[i]);
	r |= sh("ip netns exec %s sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward; "
	        "for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 >$f; done'",
	        h);
	r |= sh("ip -n %s link add sbxtest1 type veth peer name eth0 netns %s", h, g);
	r |= sh("ip -n %s link add sbxtest2 type veth peer name eth0 netns %s", h, g2);
	r |= sh("ip -n %s link add eth1 type veth peer name eth0 netns %s", h, o);
	r |= sh("ip -n %s addr add 10.77.0.1/30 dev sbxtest1 && "
	        "ip -n %s -6 addr add fd77::1/64 dev sbxtest1 nodad && "
	        "ip -n %s addr add 10.77.0.5/30 dev sbxtest2 && "
	        "ip -n %s addr add 10.77.1.1/24 dev eth1 && "
	        "ip -n %s -6 addr add fd78::1/64 dev eth1 nodad && "
	        "ip -n %s link set sbxtest1 up && ip -n %s link set sbxtest2 up && "
	        "ip -n %s link set eth1 up && "
	        "ip -n %s route add 10.77.9.9/32 dev sbxtest1",
	        h, h, h, h, h, h, h, h, h);
	r |= sh("ip -n %s addr add 10.77.0.2/30 dev eth0 && ip -n %s addr add 10.77.9.9/32 dev "
	        "eth0 && "
	        "ip -n %s -6 addr add fd77::2/64 dev eth0 nodad && ip -n %s link set eth0 up && "
	        "ip -n %s route add default via 10.77.0.1",
	        g, g, g, g, g);
	r |= sh("ip -n %s addr add 10.77.0.6/30 dev eth0 && ip -n %s link set eth0 up && "
	        "ip -n %s route add default via 10.77.0.5",
	        g2, g2, g2);
	r |= sh("ip -n %s addr add 10.77.1.2/24 dev eth0 && "
	        "ip -n %s -6 addr add fd78::2/64 dev eth0 nodad && ip -n %s link set eth0 up && "
	        "ip -n %s route add 10.77.0.0/24 via 10.77.1.1",
	        o, o, o, o);
	if (r != 0)
		return -1; /* teardown still runs and deletes what was made */

	listen_in(t, NS_H, "tcp", PROXY_PORT, "proxy");
	listen_in(t, NS_H, "udp", DNS_PORT, "dns");
	/* what a probe would reach if it were not redirected or dropped */
	listen_in(t, NS_H, "tcp", 80, "host80");
	listen_in(t, NS_H, "tcp6", 22, "ssh");
	listen_in(t, NS_H, "udp", 443, "quic");
	listen_in(t, NS_H, "udp", 53, "host53");
	listen_in(t, NS_G, "tcp", 8080, "guest");
	listen_in(t, NS_G, "udp", 8080, "guest-udp");
	listen_in(t, NS_O, "udp", 5000, "other-udp");
	load_traffic_rules(t);
	return 0;
}

static int
teardown_traffic(void **state)
{
	net_free(*state);
	return 0;
}

#define assert_probe(probe, want) assert_string_equal((probe), (want))

/* tcp/80 and tcp/443 to any address reach the proxy, udp/53 to the host side of the guest's
 * own link the DNS stub (to any other server it is dropped); the answers come back from
 * where the guest sent them. */
static void
test_redirect(void **state)
{
	struct net *t = *state;

	if (!t->usable) {
		namespace_skipped = true;
		skip();
	}
	assert_probe(tcp_probe(t, NS_G, NULL, "10.77.0.1", 80), "proxy");
	assert_probe(tcp_probe(t, NS_G, NULL, "10.77.0.1", 443), "proxy");
	assert_probe(tcp_probe(t, NS_G, NULL, "192.0.2.1", 80), "proxy");
	assert_probe(tcp_probe(t, NS_G, NULL, "192.0.2.1", 443), "proxy");
	assert_probe(udp_probe(t, NS_G, "10.77.0.1", 53), "dns");
	assert_probe(udp_probe(t, NS_G, "192.0.2.53", 53), "timeout");
	/* nor through the other sandbox's resolver address */
	assert_probe(udp_probe(t, NS_G, "10.77.0.5", 53), "timeout");
	/* the second sandbox is redirected to the host side of its own link */
	assert_probe(tcp_probe(t, NS_G2, NULL, "198.51.100.7", 443), "proxy");
	assert_probe(udp_probe(t, NS_G2, "10.77.0.5", 53), "dns");
}

/* Nothing but the redirected ports: not the proxy port itself, not ssh, not QUIC, not ping. */
static void
test_tap_drops(void **state)
{
	struct net *t = *state;
	long before;

	if (!t->usable) {
		namespace_skipped = true;
		skip();
	}
	before = counter(t, NS_H, NFTRULES_COUNTER_TAP);

	assert_probe(tcp_probe(t, NS_G, NULL, "10.77.0.1", 80), "proxy");
	assert_probe(tcp_probe(t, NS_G, NULL, "10.77.0.1", PROXY_PORT), "timeout");
	assert_probe(udp_probe(t, NS_G, "10.77.0.1", 53), "dns");
	assert_probe(udp_probe(t, NS_G, "10.77.0.1", DNS_PORT), "timeout");

	assert_probe(tcp_probe(t, NS_O, NULL, "10.77.1.1", 22), "ssh");
	assert_probe(tcp_probe(t, NS_G, NULL, "10.77.0.1", 22), "timeout");

	assert_probe(udp_probe(t, NS_O, "10.77.1.1", 443), "quic");
	assert_probe(udp_probe(t, NS_G, "10.77.0.1", 443), "timeout");

	assert_probe(ping_probe(t, NS_O, "10.77.1.1"), "reply");
	assert_probe(ping_probe(t, NS_G, "10.77.0.1"), "timeout");

	assert_true(counter(t, NS_H, NFTRULES_COUNTER_TAP) >= before + 5);
}

/* Empties the listener on this port of namespace H of what queued up. */
static void
drain(struct net *t, int port)
{
	for (size_t i = 0; i < t->n_l; i++) {
		struct sockaddr_in a;
		socklen_t al = sizeof(a);
		char buf[512];

		if (getsockname(t->l[i].fd, (struct sockaddr *)&a, &al) < 0 ||
		    ntohs(a.sin_port) != port || t->l[i].tcp)
			continue;
		while (recv(t->l[i].fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0)
			;
	}
}

/* Each flow a guest opens to the host stays in the host's conntrack table (a DNS query 30 s),
 * and the table is the whole host's (nf_conntrack_max): one guest may hold only so many at
 * once, its next ones dropped, while other guests are served. A DNS flood from distinct
 * source ports fills the guest's share. */
static void
test_flow_cap(void **state)
{
	struct net *t = *state;
	const int flows = 8192 + 800;
	struct sockaddr_storage dst;
	socklen_t dlen = sockaddr_of("10.77.0.1", 53, &dst);
	long before;

	if (!t->usable) {
		namespace_skipped = true;
		skip();
	}

	assert_probe(udp_probe(t, NS_G, "10.77.0.1", 53), "dns");
	before = counter(t, NS_H, NFTRULES_COUNTER_TAP);
	for (int i = 0; i < flows; i++) {
		_cleanup_close_ int fd = socket_in(t, NS_G, AF_INET, SOCK_DGRAM, 0);
		struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = htons(20000 + i) };

		assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
		assert_int_equal(sendto(fd, "?", 1, 0, (struct sockaddr *)&dst, dlen), 1);
		if (i % 256 == 0)
			drain(t, DNS_PORT);
	}
	drain(t, DNS_PORT);
	/* over its share: its new flows go nowhere, DNS or web */
	assert_true(counter(t, NS_H, NFTRULES_COUNTER_TAP) >= before + 700);
	assert_probe(udp_probe(t, NS_G, "10.77.0.1", 53), "timeout");
	assert_probe(tcp_probe(t, NS_G, NULL, "192.0.2.1", 80), "timeout");
	/* the other guest is served */
	assert_probe(udp_probe(t, NS_G2, "10.77.0.5", 53), "dns");
	assert_probe(tcp_probe(t, NS_G2, NULL, "192.0.2.1", 80), "proxy");

	/* the later tests start from an empty count (a table written anew counts afresh) */
	load_traffic_rules(t);
	assert_probe(udp_probe(t, NS_G, "10.77.0.1", 53), "dns");
}

/* A guest sending from an address that is not its own is dropped, redirected port or not. */
static void
test_spoofed_source(void **state)
{
	struct net *t = *state;
	long before;

	if (!t->usable) {
		namespace_skipped = true;
		skip();
	}
	before = counter(t, NS_H, NFTRULES_COUNTER_TAP);
	assert_probe(tcp_probe(t, NS_G, "10.77.0.2", "10.77.0.1", 80), "proxy");
	/* H routes 10.77.9.9 back through this tap: only the rules stop the connection */
	assert_probe(tcp_probe(t, NS_G, "10.77.9.9", "10.77.0.1", 80), "timeout");
	assert_true(counter(t, NS_H, NFTRULES_COUNTER_TAP) > before);

	/* the other sandbox's address on this tap is just as foreign (its answer would go out
	 * of the other tap, so the drop counter is what tells) */
	before = counter(t, NS_H, NFTRULES_COUNTER_TAP);
	assert_int_equal(sh("ip -n %s addr add 10.77.0.6/32 dev eth0", t->ns[NS_G]), 0);
	assert_probe(tcp_probe(t, NS_G, "10.77.0.6", "10.77.0.5", 80), "timeout");
	assert_int_equal(sh("ip -n %s addr del 10.77.0.6/32 dev eth0", t->ns[NS_G]), 0);
	assert_true(counter(t, NS_H, NFTRULES_COUNTER_TAP) > before);
}

/* IPv6 from a tap is dropped (the listener answers IPv6 from elsewhere). */
static void
test_ipv6(void **state)
{
	struct net *t = *state;

	if (!t->usable) {
		namespace_skipped = true;
		skip();
	}
	assert_probe(tcp_probe(t, NS_O, NULL, "fd78::1", 22), "ssh");
	assert_probe(tcp_probe(t, NS_G, NULL, "fd77::1", 22), "timeout");
	assert_probe(tcp_probe(t, NS_G, NULL, "fd77::1", 80), "timeout");
}

/* Other machines cannot use the proxy or the DNS stub; the host itself can, over loopback. */
static void
test_other_machines(void **state)
{
	struct net *t = *state;
	long before;

	if (!t->usable) {
		namespace_skipped = true;
		skip();
	}
	before = counter(t, NS_H, NFTRULES_COUNTER_PORT);
	assert_probe(tcp_probe(t, NS_H, NULL, "127.0.0.1", PROXY_PORT), "proxy");
	assert_probe(udp_probe(t, NS_H, "127.0.0.1", DNS_PORT), "dns");
	assert_probe(tcp_probe(t, NS_O, NULL, "10.77.1.1", 22), "ssh");
	assert_probe(tcp_probe(t, NS_O, NULL, "10.77.1.1", PROXY_PORT), "timeout");
	assert_probe(tcp_probe(t, NS_O, NULL, "10.77.0.1", PROXY_PORT), "timeout");
	assert_probe(udp_probe(t, NS_O, "10.77.1.1", 443), "quic");
	assert_probe(udp_probe(t, NS_O, "10.77.1.1", DNS_PORT), "timeout");
	assert_true(counter(t, NS_H, NFTRULES_COUNTER_PORT) >= before + 3);
}

/* Nothing is forwarded to or from a tap, though the host forwards: the controls run with the
 * table removed, then the same probes with it back. A TCP exchange needs both directions, so
 * one-way UDP tells the rule for packets into a tap from the one for packets out of it. */
static void
test_forward(void **state)
{
	struct net *t = *state;
	long before;

	if (!t->usable) {
		namespace_skipped = true;
		skip();
	}
	assert_probe(tcp_probe(t, NS_G2, NULL, "10.77.0.5", 80), "proxy");
	assert_int_equal(nft(t, NS_H, "delete table %s", NFTRULES_TABLE), 0);
	assert_probe(tcp_probe(t, NS_G2, NULL, "10.77.0.2", 8080), "guest");
	assert_probe(udp_probe(t, NS_O, "10.77.0.2", 8080), "guest-udp");
	assert_probe(udp_probe(t, NS_G, "10.77.1.2", 5000), "other-udp");

	load_traffic_rules(t);
	before = counter(t, NS_H, NFTRULES_COUNTER_FORWARD);
	assert_probe(tcp_probe(t, NS_G2, NULL, "10.77.0.2", 8080), "timeout");
	assert_probe(udp_probe(t, NS_O, "10.77.0.2", 8080), "timeout");
	assert_probe(udp_probe(t, NS_G, "10.77.1.2", 5000), "timeout");
	assert_true(counter(t, NS_H, NFTRULES_COUNTER_FORWARD) >= before + 3);
}

/* Ingress is closed: the host itself cannot open a connection into a sandbox, while
 * the answers to what a guest sends still reach it. The control runs with the table removed. */
static void
test_ingress(void **state)
{
	struct net *t = *state;
	long before;

	if (!t->usable) {
		namespace_skipped = true;
		skip();
	}
	assert_int_equal(nft(t, NS_H, "delete table %s", NFTRULES_TABLE), 0);
	assert_probe(tcp_probe(t, NS_H, NULL, "10.77.0.2", 8080), "guest");
	assert_probe(udp_probe(t, NS_H, "10.77.0.2", 8080), "guest-udp");

	load_traffic_rules(t);
	before = counter(t, NS_H, NFTRULES_COUNTER_FORWARD);
	/* dropped on the way out: TCP's SYN never leaves, a datagram's sender hears EPERM */
	assert_probe(tcp_probe(t, NS_H, NULL, "10.77.0.2", 8080), "timeout");
	{
		struct sockaddr_storage ss;
		socklen_t len = sockaddr_of("10.77.0.2", 8080, &ss);
		_cleanup_close_ int fd = socket_in(t, NS_H, AF_INET, SOCK_DGRAM, 0);
		assert_int_equal(connect(fd, (struct sockaddr *)&ss, len), 0);
		assert_int_equal(send(fd, "?", 1, 0), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(serve(t, 200), 0);
	}
	assert_true(counter(t, NS_H, NFTRULES_COUNTER_FORWARD) >= before + 2);
	/* what the guest sends is still answered */
	assert_probe(tcp_probe(t, NS_G, NULL, "10.77.0.1", 443), "proxy");
	assert_probe(udp_probe(t, NS_G, "10.77.0.1", 53), "dns");
}

int
main(void)
{
	const struct CMUnitTest pure[] = {
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_too_big),
		cmocka_unit_test_setup_teardown(test_load, setup_net, teardown_net),
	};
	const struct CMUnitTest traffic[] = {
		cmocka_unit_test(test_redirect),       cmocka_unit_test(test_tap_drops),
		cmocka_unit_test(test_spoofed_source), cmocka_unit_test(test_ipv6),
		cmocka_unit_test(test_other_machines), cmocka_unit_test(test_forward),
		cmocka_unit_test(test_ingress),        cmocka_unit_test(test_flow_cap),
	};
	int r;

	r = cmocka_run_group_tests_name("nftrules", pure, NULL, NULL);
	r += cmocka_run_group_tests_name("nftrules traffic", traffic, setup_traffic,
	                                 teardown_traffic);
	/* the nftables half did not run (not root, no namespaces): say skipped (77), not passed */
	return r == 0 && namespace_skipped ? 77 : r;
}
