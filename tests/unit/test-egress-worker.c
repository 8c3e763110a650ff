/* test-egress-worker.c: the egress worker process (egress/worker.h). First its pure parts (the
 * chunked-body reader that says where the next request starts, the addresses never dialled),
 * then, as root, the real `sandboxd egress-worker` in a network and mount namespace of this
 * test's own (nothing outside changes): a bind-mounted /etc/hosts says what names resolve to
 * (and a DNS server on 127.0.0.1 knows only names the resolver's search domain would make),
 * an "internet" namespace behind a veth holds an HTTP server and openssl s_server, and the
 * test is the guest (192.0.2.2, on lo) and sandboxd (the control channel). Every refusal has
 * an allowed control next to it, and the upstream server's list of Hosts it saw shows that a
 * refused request never reached it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "dns.h"
#include "egress.h"
#include "harness.h"
#include "netpolicy.h"
#include "worker-internal.h"
#include "util.h"

/* ---- the chunked-body reader ---- */

static void
test_chunked(void **state)
{
	static const char body[] = "5\r\nhello\r\n6;name=\"v\"\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
	static const char next[] = "GET / HTTP/1.1\r\n";
	char in[256];
	size_t n = strlen(body), used = 0;
	const char *why = NULL;
	(void)state;

	/* whole: the body ends exactly where the next request starts */
	snprintf(in, sizeof(in), "%s%s", body, next);
	struct chunked s = CHUNKED_INIT;
	assert_int_equal(chunked_scan(&s, (const uint8_t *)in, strlen(in), &used, &why),
	                 CHUNKED_DONE);
	assert_int_equal(used, n);

	/* split at every byte, and fed a byte at a time: the same end */
	for (size_t cut = 0; cut <= n; cut++) {
		struct chunked t = CHUNKED_INIT;
		enum chunked_result r = CHUNKED_MORE;
		size_t total = 0;

		used = 0;
		if (cut > 0) {
			r = chunked_scan(&t, (const uint8_t *)in, cut, &used, &why);
			total = used;
		}
		if (r != CHUNKED_DONE) {
			assert_int_equal(r, CHUNKED_MORE);
			assert_int_equal(used, cut);
			r = chunked_scan(&t, (const uint8_t *)in + cut, strlen(in) - cut, &used,
			                 &why);
			total += used;
		}
		assert_int_equal(r, CHUNKED_DONE);
		assert_int_equal(total, n);
	}
	{
		struct chunked t = CHUNKED_INIT;
		enum chunked_result r = CHUNKED_MORE;
		size_t i = 0;

		for (; i < strlen(in) && r == CHUNKED_MORE; i++)
			r = chunked_scan(&t, (const uint8_t *)in + i, 1, &used, &why);
		assert_int_equal(r, CHUNKED_DONE);
		assert_int_equal(i, n);
	}
	/* the empty body */
	struct chunked e = CHUNKED_INIT;
	assert_int_equal(chunked_scan(&e, (const uint8_t *)"0\r\n\r\nG", 6, &used, &why),
	                 CHUNKED_DONE);
	assert_int_equal(used, 5);
}

static void
test_chunked_refused(void **state)
{
	/* what two readers could split differently, so a request could hide in a body */
	static const char *const bad[] = {
		"5\nhello\r\n0\r\n\r\n",        /* bare LF after the size */
		"5\r\nhello\n0\r\n\r\n",        /* bare LF after the data */
		"5\r\nhelloX\r\n0\r\n\r\n",     /* data longer than its size */
		" 5\r\nhello\r\n0\r\n\r\n",     /* whitespace before the size */
		"5 \r\nhello\r\n0\r\n\r\n",     /* and after it */
		"+5\r\nhello\r\n0\r\n\r\n",     /* a sign */
		"0x5\r\nhello\r\n0\r\n\r\n",    /* a prefix */
		"g\r\n",                        /* not hexadecimal */
		"1000000000000000\r\n",         /* 16 digits */
		"5;a\nb\r\nhello\r\n0\r\n\r\n", /* bare LF in an extension */
		"5;a\rb\r\nhello\r\n0\r\n\r\n", /* bare CR in an extension */
		"0\r\n folded: x\r\n\r\n",      /* a folded trailer */
		"0\r\nX: a\nY: b\r\n\r\n",      /* bare LF in a trailer */
		"0\r\n\rX",                     /* CR without LF at the end */
		"\r\n",                         /* no size at all */
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct chunked s = CHUNKED_INIT;
		const char *why = NULL;
		size_t used = 0;

		if (chunked_scan(&s, (const uint8_t *)bad[i], strlen(bad[i]), &used, &why) !=
		    CHUNKED_INVALID)
			fail_msg("accepted chunked body %zu", i);
		assert_non_null(why);
	}
	/* the largest size allowed still parses (15 hex digits) and wants its data */
	struct chunked s = CHUNKED_INIT;
	const char *why = NULL;
	size_t used;
	assert_int_equal(
	        chunked_scan(&s, (const uint8_t *)"fffffffffffffff\r\nab", 19, &used, &why),
	        CHUNKED_MORE);
}

/* ---- addresses never dialled ---- */

static bool
refused(const char *a)
{
	struct sockaddr_storage ss = {};

	if (inet_pton(AF_INET, a, &((struct sockaddr_in *)&ss)->sin_addr) == 1)
		ss.ss_family = AF_INET;
	else {
		assert_int_equal(inet_pton(AF_INET6, a, &((struct sockaddr_in6 *)&ss)->sin6_addr),
		                 1);
		ss.ss_family = AF_INET6;
	}
	return proxy_addr_refused((struct sockaddr *)&ss);
}

static void
test_addresses(void **state)
{
	static const char *const no[] = {
		"127.0.0.1",
		"127.255.255.254",
		"0.0.0.0",
		"0.1.2.3",
		"10.0.0.1",
		"10.200.0.1",
		"172.16.0.1",
		"172.31.255.255",
		"192.168.1.1",
		"169.254.169.254",
		"169.254.0.1",
		"100.64.0.1",
		"100.127.255.255",
		"224.0.0.1",
		"239.255.255.250",
		"240.0.0.1",
		"255.255.255.255",
		"::",
		"::1",
		"fc00::1",
		"fd12:3456::1",
		"fe80::1",
		"fec0::1",
		"ff02::1",
		"::ffff:127.0.0.1",
		"::ffff:10.1.2.3",
		"::ffff:169.254.169.254",
		"::127.0.0.1",
		"::8.8.8.8",
		"64:ff9b::7f00:1",
		"64:ff9b::a9fe:a9fe",
		"64:ff9b:1::808:808",
		"2002:7f00:1::1",
		"2002:c0a8:101::1",
		"::ffff:0:7f00:1",
		/* special-purpose ranges no public service lives in (IANA: not globally
		 * reachable), some of them used inside networks */
		"192.0.0.1",
		"192.0.0.170",
		"198.18.0.1",
		"198.19.255.255",
		"::ffff:198.18.0.1",
		"100::1",
		/* Teredo carries its client's IPv4 address, inverted: 10.0.0.1 here */
		"2001:0:4136:e378:8000:63bf:f5ff:fffe",
	};
	static const char *const yes[] = {
		"93.184.215.14",
		"8.8.8.8",
		"1.1.1.1",
		"198.51.100.10",
		"203.0.113.5",
		"172.15.255.255",
		"172.32.0.1",
		"192.169.0.1",
		"100.63.255.255",
		"100.128.0.1",
		"223.255.255.255",
		"11.0.0.1",
		"2606:2800:220:1::1",
		"2001:4860:4860::8888",
		"::ffff:8.8.8.8",
		"64:ff9b::808:808",
		"2002:808:808::1",
		"192.0.1.1",
		"198.17.255.255",
		"198.20.0.1",
		"2001:0:4136:e378:8000:63bf:f7f7:f7f7", /* Teredo, client 8.8.8.8 */
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(no); i++)
		if (!refused(no[i]))
			fail_msg("%s would be dialled", no[i]);
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++)
		if (refused(yes[i]))
			fail_msg("%s would be refused", yes[i]);
}

/* ---- what sandboxd takes of the worker's decisions ---- */

#define SBX "sbx_0123456789abcdef"

/* The decision line, as json, with key set to value (a JSON text; NULL: the key removed). */
static json_t *
decision_with(const char *base, const char *key, const char *value)
{
	json_t *m = json_loads(base, 0, NULL);

	assert_non_null(m);
	if (key && value)
		assert_int_equal(
		        json_object_set_new(
		                m, key, json_loads(value, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL)),
		        0);
	else if (key)
		assert_int_equal(json_object_del(m, key), 0);
	return m;
}

static void
test_decision_lines(void **state)
{
	static const char conn[] =
	        "{\"op\":\"egress\",\"id\":\"" SBX "\",\"via\":\"tls\",\"name\":\"example.org\","
	        "\"port\":443,\"verdict\":\"allowed\",\"reason\":\"on the allow list\","
	        "\"addr\":\"93.184.215.14\",\"bytes_out\":517,\"bytes_in\":4096,\"cut\":false}";
	static const char dns[] = "{\"op\":\"egress\",\"id\":\"" SBX "\",\"via\":\"dns\","
	                          "\"name\":\"x.example.net\",\"port\":53,\"verdict\":\"denied\","
	                          "\"reason\":\"not on the allow list\"}";
	/* what a subverted worker could send instead: each is refused whole */
	static const struct {
		const char *base, *key, *value;
	} bad[] = {
		{ conn, "id", "\"sbx-test\"" },
		{ conn, "id", "\"sbx_0123456789abcdef\\nerror: forged\"" },
		{ conn, "id", "\"sbx_../../0123456789abcdef\"" },
		{ conn, "id", NULL },
		{ conn, "via", "\"smtp\"" },
		{ conn, "verdict", "\"maybe\"" },
		{ conn, "verdict", "true" },
		{ conn, "name", "\"example.org\\nsandboxd: error: forged\"" },
		{ conn, "name", "\"Example.org\"" },
		{ conn, "name", "\"a b\"" },
		{ conn, "name", "\"\"" },
		{ conn, "name", "42" },
		{ conn, "port", "0" },
		{ conn, "port", "70000" },
		{ conn, "port", "\"443\"" },
		{ conn, "reason", "\"\\u001b[2J\"" },
		{ conn, "reason", "\"ok\\nforged line\"" },
		{ conn, "reason", NULL },
		{ conn, "addr", "\"not an address\"" },
		{ conn, "addr", "{}" },
		{ conn, "addr", NULL },
		{ conn, "bytes_out", "-1" },
		{ conn, "bytes_in", "1.5" },
		{ conn, "bytes_in", NULL },
		{ conn, "cut", "\"yes\"" },
		{ conn, "cut", NULL },
		{ dns, "name", "\"x.example.net\\u0000y\"" },
	};
	_cleanup_free_ char *long_name = malloc(300), *long_reason = malloc(300);
	const char *id = NULL;
	bool allowed = false, is_dns = true;
	json_t *m, *d;
	(void)state;

	/* a connection's: its documented fields, nothing else, whatever else the line holds */
	m = decision_with(conn, "extra", "{\"big\":[1,2,3]}");
	d = egress_decision_data(m, &id, &allowed, &is_dns);
	assert_non_null(d);
	assert_string_equal(id, SBX);
	assert_true(allowed);
	assert_false(is_dns);
	assert_int_equal(json_object_size(d), 9);
	assert_null(json_object_get(d, "op"));
	assert_null(json_object_get(d, "id"));
	assert_null(json_object_get(d, "extra"));
	assert_string_equal(json_string_value(json_object_get(d, "addr")), "93.184.215.14");
	assert_int_equal(json_integer_value(json_object_get(d, "bytes_in")), 4096);
	json_decref(d);
	json_decref(m);
	/* without a name (TLS without SNI) or an address (refused before dialling), over IPv6 */
	m = decision_with(conn, "name", "null");
	json_object_set_new(m, "addr", json_null());
	d = egress_decision_data(m, &id, &allowed, &is_dns);
	assert_non_null(d);
	assert_true(json_is_null(json_object_get(d, "name")));
	json_decref(d);
	json_object_set_new(m, "addr", json_string("2606:2800:220:1::1"));
	d = egress_decision_data(m, &id, &allowed, &is_dns);
	assert_non_null(d);
	json_decref(d);
	json_decref(m);
	/* a DNS query's: no address or bytes */
	m = decision_with(dns, NULL, NULL);
	d = egress_decision_data(m, &id, &allowed, &is_dns);
	assert_non_null(d);
	assert_false(allowed);
	assert_true(is_dns);
	assert_int_equal(json_object_size(d), 5);
	json_decref(d);
	json_decref(m);

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		m = decision_with(bad[i].base, bad[i].key, bad[i].value);
		d = egress_decision_data(m, &id, &allowed, &is_dns);
		if (d)
			fail_msg("taken: case %zu (%s)", i, bad[i].key);
		json_decref(m);
	}
	/* a name longer than a DNS name, a reason longer than the worker writes */
	assert_non_null(long_name);
	assert_non_null(long_reason);
	memset(long_name, 'a', 299);
	long_name[299] = '\0';
	memset(long_reason, 'r', 299);
	long_reason[299] = '\0';
	m = decision_with(conn, NULL, NULL);
	json_object_set_new(m, "name", json_string(long_name));
	assert_null(egress_decision_data(m, &id, &allowed, &is_dns));
	json_object_set_new(m, "name", json_string("example.org"));
	json_object_set_new(m, "reason", json_string(long_reason));
	assert_null(egress_decision_data(m, &id, &allowed, &is_dns));
	json_decref(m);
}

/* sandboxd logs at most 20 lines a second about decisions, then says how many it held back. */
static void
test_decision_log_rate(void **state)
{
	struct egress_lograte r = {};
	uint64_t missed = 99;
	unsigned shown = 0;
	(void)state;

	for (unsigned i = 0; i < 1000; i++) {
		if (egress_lograte_take(&r, 5000 + i / 2, &missed))
			shown++;
		if (i > 0)
			assert_int_equal(missed, 0);
	}
	assert_int_equal(shown, 20);
	/* the next second: allowed again, and told what the last one left out */
	assert_true(egress_lograte_take(&r, 6000, &missed));
	assert_int_equal(missed, 980);
	assert_true(egress_lograte_take(&r, 6001, &missed));
	assert_int_equal(missed, 0);
}

/* ---- the worker in namespaces ---- */

#define PROXY "192.0.2.1"
#define PROXY_PORT 3128
#define DNS_PORT 5353
/* the worker's fd limit: room for more connections than one sandbox may hold (6 fds each,
 * worker.c's FDS_PER_CONN, and its 64 reserved) */
#define WORKER_NOFILE 8192
#define GUEST "192.0.2.2"
#define STRANGER "192.0.2.3" /* an address no "set" names */
#define SERVER "198.51.100.10"
#define SERVER2 "198.51.100.11"
#define OWN "198.51.100.1"     /* this namespace's end of the veth */
#define ANYIP "198.51.100.200" /* routed to this host by a local route, on no interface */
#define FRESH "198.51.100.201" /* an address this host gets during a test */
#define SILENT "198.51.100.99" /* on the veth's subnet, but nobody's: a dial never answers */
#define HANDSHAKE_MS 1500
#define WAIT_MS 5000

/* The policy as netpolicy_resolve makes it (normalised, sorted). */
#define ALLOW                                                                                      \
	"\"*.wild.test\",\"loop.allowed.test\",\"mixed.allowed.test\",\"own.allowed.test\","       \
	"\"tls.allowed.test\",\"www.allowed.test\""
#define POLICY(allow)                                                                              \
	"{\"op\":\"set\",\"id\":\"sbx-test\",\"guest\":\"" GUEST "\",\"host\":\"" PROXY            \
	"\",\"network\":{\"mode\":\"allowlist\",\"allow\":[" allow                                 \
	"],\"deny\":[\"bad.wild.test\"]}}\n"

static const char hosts_file[] =
        "127.0.0.1 localhost\n" SERVER " www.allowed.test tls.allowed.test unlisted.test "
        "good.wild.test bad.wild.test other.wild.test\n"
        "127.0.0.1 loop.allowed.test mixed.allowed.test\n" SERVER2 " mixed.allowed.test\n" OWN
        " own.allowed.test\n" ANYIP " anyip.allowed.test\n" FRESH " fresh.allowed.test\n" SILENT
        " slow.allowed.test\n";

/* What the namespace's DNS server (127.0.0.1, the resolver's search domain corp.test) knows:
 * only names that a search domain makes of two names the DNS does not know. */
static const char *const searched_names[] = { "searched.test.corp.test", "single.corp.test" };

/* The namespace's resolver: that DNS server, with a search domain. */
static const char resolv_conf[] = "nameserver 127.0.0.1\nsearch corp.test\noptions timeout:1 "
                                  "attempts:1\n";

struct env {
	bool usable;
	char dir[256];
	char log[300];
	pid_t inet; /* the internet namespace's servers (a process group) */
	pid_t worker;
	int ctl;
	char in[1 << 16];
	size_t in_len;
	json_t *pending[64]; /* events read while looking for another */
	size_t n_pending;
	int trap; /* a listener on this namespace's port 80: what the proxy must never reach */
	SSL_CTX *tls;
};

static struct env E = { .ctl = -1, .trap = -1 };
static bool ns_skipped;

static int sh(const char *fmt, ...) _printf_(1, 2);
static int
sh(const char *fmt, ...)
{
	_cleanup_free_ char *cmd = NULL;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&cmd, fmt, ap);
	va_end(ap);
	assert_true(r >= 0);
	r = system(cmd);
	return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

static int
write_text(const char *dir, const char *name, const char *text)
{
	_cleanup_free_ char *path = strdup_printf("%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		return -1;
	/* readable by the worker once it is nobody */
	if (fchmod(fd, 0644) < 0 || write_all(fd, text, strlen(text)) < 0) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* Bind-mounts dir/name over /etc/name (in this test's mount namespace only). */
static int
over_etc(const char *dir, const char *name)
{
	_cleanup_free_ char *src = strdup_printf("%s/%s", dir, name);
	_cleanup_free_ char *dst = strdup_printf("/etc/%s", name);

	return mount(src, dst, NULL, MS_BIND, NULL);
}

/* ---- the upstream HTTP server (in the internet namespace) ---- */

static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static char seen[8192]; /* every Host served, space-separated */

static ssize_t
read_head(int fd, char *buf, size_t max, size_t *have)
{
	for (;;) {
		char *end = memmem(buf, *have, "\r\n\r\n", 4);
		ssize_t n;

		if (end)
			return end + 4 - buf;
		if (*have == max)
			return -1;
		n = read(fd, buf + *have, max - *have);
		if (n <= 0)
			return -1;
		*have += (size_t)n;
	}
}

/* Reads n bytes of body (some may be in buf already); returns how many there were. */
static bool
take(int fd, char *buf, size_t *have, size_t n, char *out)
{
	while (*have < n) {
		ssize_t k = read(fd, buf + *have, 65536 - *have);

		if (k <= 0)
			return false;
		*have += (size_t)k;
		if (*have == 65536 && *have < n) {
			/* a large body is counted, not kept */
			n -= *have;
			*have = 0;
			out = NULL;
		}
	}
	if (out)
		memcpy(out, buf, n);
	memmove(buf, buf + n, *have - n);
	*have -= n;
	return true;
}

static bool
take_line(int fd, char *buf, size_t *have, char *line, size_t max)
{
	for (;;) {
		char *nl = memmem(buf, *have, "\r\n", 2);
		ssize_t k;

		if (nl) {
			size_t n = (size_t)(nl - buf);

			if (n >= max)
				return false;
			memcpy(line, buf, n);
			line[n] = '\0';
			memmove(buf, nl + 2, *have - n - 2);
			*have -= n + 2;
			return true;
		}
		k = read(fd, buf + *have, 65536 - *have);
		if (k <= 0)
			return false;
		*have += (size_t)k;
	}
}

static void *
serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char *buf = malloc(65536);
	size_t have = 0;

	while (buf) {
		char host[256] = "", path[256] = "", method[16] = "", line[512];
		char *head, *p, *resp = NULL;
		uint64_t body = 0, clen = 0;
		bool chunked = false, close_after = false;
		ssize_t hl = read_head(fd, buf, 65536, &have);

		if (hl < 0)
			break;
		head = strndup(buf, (size_t)hl);
		memmove(buf, buf + hl, have - (size_t)hl);
		have -= (size_t)hl;
		sscanf(head, "%15s %255s", method, path);
		if ((p = strcasestr(head, "\r\nHost: ")))
			sscanf(p + 8, "%255[^\r:]", host);
		if ((p = strcasestr(head, "\r\nContent-Length: ")))
			clen = strtoull(p + 18, NULL, 10);
		chunked = strcasestr(head, "\r\nTransfer-Encoding: chunked") != NULL;
		close_after = strcasestr(head, "\r\nConnection: close") != NULL;
		free(head);
		pthread_mutex_lock(&seen_lock);
		if (strlen(seen) + strlen(host) + 2 < sizeof(seen)) {
			memcpy(seen + strlen(seen), host, strlen(host) + 1);
			memcpy(seen + strlen(seen), " ", 2);
		}
		pthread_mutex_unlock(&seen_lock);

		if (clen > 0 && !take(fd, buf, &have, clen, NULL))
			break;
		body = clen;
		while (chunked) {
			unsigned long long size;

			if (!take_line(fd, buf, &have, line, sizeof(line)) ||
			    sscanf(line, "%llx", &size) != 1)
				goto out;
			if (size == 0) {
				while (take_line(fd, buf, &have, line, sizeof(line)) && line[0])
					;
				break;
			}
			if (!take(fd, buf, &have, size + 2, NULL))
				goto out;
			body += size;
		}

		if (streq(path, "/halfclose")) {
			/* answers only once the guest has finished sending */
			char c;

			while (have == 0 && read(fd, &c, 1) > 0)
				;
			resp = strdup_printf("HTTP/1.1 200 OK\r\nContent-Length: 18\r\nConnection: "
			                     "close\r\n\r\ngot eof after head");
			close_after = true;
		} else if (streq(path, "/seen")) {
			pthread_mutex_lock(&seen_lock);
			resp = strdup_printf("HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s",
			                     strlen(seen), seen);
			pthread_mutex_unlock(&seen_lock);
		} else if (str_has_prefix(path, "/big/")) {
			size_t n = strtoull(path + 5, NULL, 10), off = 0;
			char chunk[65536];
			_cleanup_free_ char *h =
			        strdup_printf("HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", n);

			memset(chunk, 'x', sizeof(chunk));
			if (write_all(fd, h, strlen(h)) < 0)
				break;
			while (off < n) {
				size_t k = MIN(sizeof(chunk), n - off);

				if (write_all(fd, chunk, k) < 0)
					goto out;
				off += k;
			}
			continue;
		} else {
			struct sockaddr_in me;
			socklen_t ml = sizeof(me);
			_cleanup_free_ char *b = NULL;

			getsockname(fd, (struct sockaddr *)&me, &ml);
			b = strdup_printf("host=%s path=%s body=%llu port=%u\n", host, path,
			                  (unsigned long long)body, ntohs(me.sin_port));

			resp = strdup_printf("HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s",
			                     strlen(b), b);
		}
		if (!resp || write_all(fd, resp, strlen(resp)) < 0) {
			free(resp);
			break;
		}
		free(resp);
		if (close_after)
			break;
	}
out:
	free(buf);
	close(fd);
	return NULL;
}

/* The internet namespace's process: waits for its veth, configures it, starts openssl
 * s_server and serves HTTP until killed. */
_noreturn_ static void
internet(int ready, int go)
{
	int lfd[2], one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET };
	char c;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (unshare(CLONE_NEWNET) < 0 || write(ready, "n", 1) != 1 || read(go, &c, 1) != 1)
		_exit(1);
	if (sh("ip link set lo up && ip addr add %s/24 dev sbxtv1 && ip addr add %s/24 dev "
	       "sbxtv1 && ip link set sbxtv1 up",
	       SERVER, SERVER2) != 0)
		_exit(1);
	if (fork() == 0) {
		_cleanup_free_ char *cert = strdup_printf("%s/server.pem", E.dir);
		_cleanup_free_ char *key = strdup_printf("%s/server.key", E.dir);
		int null = open("/dev/null", O_RDWR);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		execlp("openssl", "openssl", "s_server", "-accept", SERVER ":443", "-cert", cert,
		       "-key", key, "-www", "-quiet", NULL);
		_exit(127);
	}
	/* HTTP on 80, and on 8080 for a redirected guest's other port */
	for (int i = 0; i < 2; i++) {
		lfd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		setsockopt(lfd[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		a.sin_port = htons(i == 0 ? 80 : 8080);
		if (lfd[i] < 0 || bind(lfd[i], (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    listen(lfd[i], 128) < 0)
			_exit(1);
	}
	/* ready once s_server answers too */
	for (int i = 0; i < 100; i++) {
		struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(443) };
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int r;

		inet_pton(AF_INET, SERVER, &s.sin_addr);
		r = connect(fd, (struct sockaddr *)&s, sizeof(s));
		close(fd);
		if (r == 0)
			break;
		usleep(50000);
	}
	if (write(ready, "r", 1) != 1)
		_exit(1);
	for (;;) {
		struct pollfd pf[2] = { { .fd = lfd[0], .events = POLLIN },
			                { .fd = lfd[1], .events = POLLIN } };
		pthread_t t;
		int fd;

		if (poll(pf, 2, -1) <= 0)
			continue;
		fd = accept4(pf[0].revents ? lfd[0] : lfd[1], NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd) == 0)
			pthread_detach(t);
		else
			close(fd);
	}
}

/* ---- the namespace's DNS server (127.0.0.1:53, for the worker's resolver) ---- */

static void *
dns_server(void *arg)
{
	int fd = (int)(intptr_t)arg;

	for (;;) {
		uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		struct dns_query q;
		enum dns_verdict v = DNS_REFUSE;
		struct in_addr a;
		ssize_t n = recvfrom(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&from, &fl);

		if (n < 0 || dns_parse_query(pkt, (size_t)n, &q) < 0)
			continue;
		for (size_t i = 0; i < ARRAY_SIZE(searched_names); i++)
			if (streq(q.name, searched_names[i]))
				v = DNS_ALLOW;
		inet_pton(AF_INET, SERVER, &a);
		n = (ssize_t)dns_build_answer(&q, pkt, v, a.s_addr, out);
		(void)sendto(fd, out, (size_t)n, 0, (struct sockaddr *)&from, fl);
	}
	return NULL;
}

static int
start_dns_server(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(53) };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	pthread_t t;

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    pthread_create(&t, NULL, dns_server, (void *)(intptr_t)fd) != 0) {
		safe_close(fd);
		return -1;
	}
	pthread_detach(t);
	return 0;
}

/* ---- the control channel ---- */

static void
ctl_send(const char *line)
{
	assert_int_equal(write_all(E.ctl, line, strlen(line)), 0);
}

/* The next line from the worker, or NULL after ms. */
static json_t *
ctl_line(int ms)
{
	uint64_t deadline = now_mono_ms() + (uint64_t)ms;

	for (;;) {
		char *nl = memchr(E.in, '\n', E.in_len);
		struct pollfd pf = { .fd = E.ctl, .events = POLLIN };
		uint64_t now = now_mono_ms();
		ssize_t n;

		if (nl) {
			size_t len = (size_t)(nl - E.in);
			json_t *j = json_loadb(E.in, len, 0, NULL);

			assert_non_null(j);
			memmove(E.in, nl + 1, E.in_len - len - 1);
			E.in_len -= len + 1;
			return j;
		}
		if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) <= 0)
			return NULL;
		n = read(E.ctl, E.in + E.in_len, sizeof(E.in) - E.in_len);
		if (n <= 0)
			return NULL;
		E.in_len += (size_t)n;
	}
}

static const char *
jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

/* The next decision about name (NULL: one without a name) and via, waiting up to ms;
 * decisions about others are kept for later. NULL when none came. */
static json_t *
event_for(const char *via, const char *name, int ms)
{
	uint64_t deadline = now_mono_ms() + (uint64_t)ms;

	for (;;) {
		for (size_t i = 0; i < E.n_pending; i++) {
			json_t *e = E.pending[i];
			const char *n = jstr(e, "name");

			if (streq(jstr(e, "via"), via) && (name ? n && streq(n, name) : !n)) {
				memmove(E.pending + i, E.pending + i + 1,
				        (E.n_pending - i - 1) * sizeof(json_t *));
				E.n_pending--;
				return e;
			}
		}
		uint64_t now = now_mono_ms();
		json_t *e = now < deadline ? ctl_line((int)(deadline - now)) : NULL;

		if (!e)
			return NULL;
		if (!streq(jstr(e, "op"), "egress")) {
			json_decref(e);
			continue;
		}
		assert_true(E.n_pending < ARRAY_SIZE(E.pending));
		E.pending[E.n_pending++] = e;
	}
}

/* Asserts the decision about name and returns it (caller decrefs). */
static json_t *
expect_event(const char *via, const char *name, const char *verdict, const char *reason)
{
	json_t *e = event_for(via, name, WAIT_MS);

	if (!e)
		fail_msg("no %s decision about %s", via, name ? name : "(no name)");
	assert_string_equal(jstr(e, "id"), "sbx-test");
	assert_string_equal(jstr(e, "verdict"), verdict);
	if (reason)
		assert_string_equal(jstr(e, "reason"), reason);
	return e;
}

/* Fails on any decision not asked for, including those arriving within a moment. */
static void
expect_no_events(void)
{
	json_t *e;

	while ((e = ctl_line(150))) {
		if (streq(jstr(e, "op"), "egress") && E.n_pending < ARRAY_SIZE(E.pending))
			E.pending[E.n_pending++] = e;
		else
			json_decref(e);
	}
	for (size_t i = 0; i < E.n_pending; i++) {
		char *s = json_dumps(E.pending[i], JSON_COMPACT);

		fail_msg("unexpected decision %s", s);
	}
}

static uint64_t
jint(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	assert_true(json_is_integer(v));
	return (uint64_t)json_integer_value(v);
}

/* ---- the guest's side ---- */

static int
guest_socket(const char *src, int type)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct timeval tv = { .tv_sec = WAIT_MS / 1000 };
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, src, &a.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

/* A connection to the proxy from src, as a redirected guest connection arrives. */
static int
dial_proxy(const char *src)
{
	struct sockaddr_in p = { .sin_family = AF_INET, .sin_port = htons(PROXY_PORT) };
	int fd = guest_socket(src, SOCK_STREAM);

	inet_pton(AF_INET, PROXY, &p.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&p, sizeof(p)), 0);
	return fd;
}

static void
send_str(int fd, const char *s)
{
	assert_int_equal(write_all(fd, s, strlen(s)), 0);
}

/* Everything until the other side closes (or WAIT_MS); -1 on a timeout. */
static ssize_t
read_all(int fd, char *out, size_t max)
{
	size_t n = 0;

	for (;;) {
		ssize_t k = read(fd, out + n, max - 1 - n);

		if (k == 0 || (k < 0 && errno == ECONNRESET))
			break;
		if (k < 0)
			return -1;
		n += (size_t)k;
		if (n == max - 1)
			break;
	}
	out[n] = '\0';
	return (ssize_t)n;
}

/* One response with a Content-Length (a kept-alive connection); its length, 0 at EOF. What
 * arrived beyond it (a pipelined request's answer, read in the same read()) is kept for the
 * next call on the same fd. */
static size_t
read_response(int fd, char *out, size_t max)
{
	static char carry[4096];
	static size_t n_carry;
	static int carry_fd = -1;
	size_t n = 0;

	if (carry_fd == fd && n_carry > 0 && n_carry < max) {
		memcpy(out, carry, n_carry);
		n = n_carry;
		out[n] = '\0';
	}
	n_carry = 0;
	for (;;) {
		char *end = memmem(out, n, "\r\n\r\n", 4);
		ssize_t k;

		if (end) {
			char *cl = strcasestr(out, "Content-Length: ");
			size_t want;

			assert_non_null(cl);
			want = (size_t)(end + 4 - out) + strtoull(cl + 16, NULL, 10);
			if (n >= want) {
				assert_true(n - want < sizeof(carry));
				memcpy(carry, out + want, n - want);
				n_carry = n - want;
				carry_fd = fd;
				out[want] = '\0';
				return want;
			}
		}
		k = read(fd, out + n, max - 1 - n);
		if (k == 0 || (k < 0 && errno == ECONNRESET))
			return 0;
		assert_true(k > 0);
		n += (size_t)k;
		out[n] = '\0';
	}
}

/* An HTTP exchange with Connection: close; the whole response. */
static char *
http_get(const char *host, const char *path, ssize_t *ret_len)
{
	char *out = malloc(1 << 16);
	_cleanup_free_ char *req = strdup_printf(
	        "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host);
	int fd = dial_proxy(GUEST);
	ssize_t n;

	assert_non_null(out);
	send_str(fd, req);
	n = read_all(fd, out, 1 << 16);
	close(fd);
	if (ret_len)
		*ret_len = n;
	return out;
}

/* A request for host from the guest passes: the server's answer names host, and the proxy
 * reports it allowed (for this reason, when one is given). */
static void
expect_get_allowed(const char *host, const char *reason)
{
	_cleanup_free_ char *want = strdup_printf("host=%s", host);
	ssize_t n;
	char *r = http_get(host, "/", &n);

	harness_expect_in(r, want);
	free(r);
	json_decref(expect_event("http", host, "allowed", reason));
}

static SSL *
tls_connect(int fd, const char *sni)
{
	SSL *s = SSL_new(E.tls);

	assert_non_null(s);
	SSL_set_fd(s, fd);
	if (sni) {
		SSL_set_tlsext_host_name(s, sni);
		SSL_set1_host(s, sni);
	}
	if (SSL_connect(s) != 1) {
		ERR_clear_error();
		SSL_free(s);
		return NULL;
	}
	return s;
}

/* A request for host from the guest is answered at once by the proxy itself: status ("403
 * Forbidden", "502 Bad Gateway"), a page naming host and the reason (one starting with reason),
 * the guest's side closed after it; the proxy reports it (denied; allowed_too: allowed, for a
 * server that did not answer) with the very reason the page gave, and no address. Returns the
 * decision. */
static json_t *
expect_get_answered(const char *host, const char *status, const char *reason, bool allowed_too)
{
	_cleanup_free_ char *head = strdup_printf("HTTP/1.1 %s\r\n", status);
	_cleanup_free_ char *name = strdup_printf("'%s': %s", host, reason), *page = NULL;
	ssize_t n;
	char *r = http_get(host, "/", &n);
	const char *body;
	json_t *e;

	if (n <= 0 || !str_has_prefix(r, head) || !strstr(r, name))
		fail_msg("%s: expected a %s naming \"%s\", got %zd bytes: %.*s", host, status, name,
		         n, (int)MAX(n, (ssize_t)0), r);
	harness_expect_in(r, "\r\nConnection: close\r\n");
	body = strstr(r, "\r\n\r\n");
	assert_non_null(body);
	e = expect_event("http", host, allowed_too ? "allowed" : "denied", NULL);
	if (!str_has_prefix(jstr(e, "reason"), reason))
		fail_msg("%s: reason '%s', expected '%s...'", host, jstr(e, "reason"), reason);
	page = strdup_printf("sandboxd egress: '%s': %s\n", host, jstr(e, "reason"));
	assert_string_equal(body + 4, page);
	assert_true(json_is_null(json_object_get(e, "addr")));
	free(r);
	return e;
}

/* A request for host from the guest is refused by the policy, at once: a 403 naming host and
 * this reason, nothing dialled; the proxy reports it denied for this reason. */
static void
expect_get_denied(const char *host, const char *reason)
{
	json_t *e = expect_get_answered(host, "403 Forbidden", reason, false);

	assert_string_equal(jstr(e, "reason"), reason);
	assert_int_equal(jint(e, "bytes_out"), 0);
	json_decref(e);
}

/* A request for host from the guest, whose name the policy allows but which cannot be taken
 * anywhere: a 502 naming host and the reason (see expect_get_answered()). */
static void
expect_get_bad_gateway(const char *host, const char *reason, bool allowed_too)
{
	json_decref(expect_get_answered(host, "502 Bad Gateway", reason, allowed_too));
}

/* A TLS connection from the guest naming sni is closed at once, no handshake done (the guard
 * below would turn a proxy keeping it open into a failure, not a hang), and the proxy reports it
 * denied for reason. Returns the decision. */
static json_t *
expect_tls_closed(const char *sni, const char *reason)
{
	struct timeval tv = { .tv_sec = 20 };
	int fd = dial_proxy(GUEST);
	ssize_t k;
	json_t *e;

	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_null(tls_connect(fd, sni));
	k = read(fd, (char[1]){ 0 }, 1);
	if (!(k == 0 || (k < 0 && errno == ECONNRESET)))
		fail_msg("%s: expected the connection closed, got %zd (%s)",
		         sni ? sni : "(no name)", k, k < 0 ? strerror(errno) : "bytes");
	close(fd);
	e = expect_event("tls", sni, "denied", reason);
	assert_true(json_is_null(json_object_get(e, "addr")));
	return e;
}

static char *
hosts_seen(void)
{
	ssize_t n;
	char *r = http_get("www.allowed.test", "/seen", &n);
	json_decref(expect_event("http", "www.allowed.test", "allowed", NULL));
	return r;
}

static bool
trap_reached(void)
{
	int fd = accept4(E.trap, NULL, NULL, SOCK_CLOEXEC); /* E.trap is non-blocking */

	if (fd >= 0) {
		close(fd);
		return true;
	}
	return false;
}

/* ---- setup ---- */

static int
start_internet(void)
{
	int ready[2], go[2];
	char c;
	struct pollfd pf;

	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
		return -1;
	E.inet = fork();
	if (E.inet < 0)
		return -1;
	if (E.inet == 0) {
		setpgid(0, 0);
		internet(ready[1], go[0]);
	}
	setpgid(E.inet, E.inet);
	if (read(ready[0], &c, 1) != 1)
		return -1;
	if (sh("ip link add sbxtv0 type veth peer name sbxtv1 netns %d && ip addr add %s/24 "
	       "dev sbxtv0 && ip link set sbxtv0 up",
	       (int)E.inet, OWN) != 0)
		return -1;
	if (write(go[1], "g", 1) != 1)
		return -1;
	pf = (struct pollfd){ .fd = ready[0], .events = POLLIN };
	if (poll(&pf, 1, 10000) != 1 || read(ready[0], &c, 1) != 1 || c != 'r')
		return -1;
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	close(go[1]);
	return 0;
}

static int
start_worker(void)
{
	const char *bin = harness_binary("SANDBOXD");
	int sv[2];
	json_t *j;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	E.worker = fork();
	if (E.worker < 0)
		return -1;
	if (E.worker == 0) {
		int log = open(E.log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		if (log < 0 || dup2(log, 2) < 0 || dup2(sv[1], 3) < 0)
			_exit(127);
		/* the worker's connection cap follows its fd limit (raised to the hard one); a
		 * machine whose hard limit is low (2048: a cap of 330) would keep test_caps from
		 * reaching the per-sandbox cap first. As root it can be raised, as sandboxd's
		 * systemd unit does (LimitNOFILE); where it cannot, test_caps says so and skips */
		{
			struct rlimit rl;

			if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
			    rl.rlim_max < WORKER_NOFILE) {
				rl.rlim_cur = rl.rlim_max = WORKER_NOFILE;
				(void)setrlimit(RLIMIT_NOFILE, &rl);
			}
		}
		execl(bin, bin, "egress-worker", "--control-fd", "3", "--proxy-listen",
		      PROXY ":3128", "--dns-listen", PROXY ":5353", "--uid", "65534", "--gid",
		      "65534", "--handshake-timeout-ms", "1500", NULL);
		_exit(127);
	}
	close(sv[1]);
	E.ctl = sv[0];
	j = ctl_line(10000);
	if (!j || !streq(jstr(j, "op"), "ready")) {
		json_decref(j);
		return -1;
	}
	json_decref(j);
	return 0;
}

static void
show_log(void)
{
	_cleanup_free_ char *text = NULL;
	size_t n;

	if (E.log[0] && read_file_max(E.log, 1 << 20, &text, &n) >= 0)
		fprintf(stderr, "--- the worker's log ---\n%s--- end ---\n", text);
}

static int
setup_ns(void **state)
{
	struct sockaddr_in t = { .sin_family = AF_INET, .sin_port = htons(80) };
	int one = 1;
	(void)state;

	if (geteuid() != 0) {
		fprintf(stderr, "skip: the worker's namespace tests need root\n");
		return 0;
	}
	(void)harness_binary("SANDBOXD");
	if (unshare(CLONE_NEWNET | CLONE_NEWNS) < 0) {
		fprintf(stderr, "skip: cannot create network and mount namespaces: %s\n",
		        strerror(errno));
		return 0;
	}
	assert_int_equal(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
	assert_int_equal(harness_tmpdir(E.dir, sizeof(E.dir)), 0);
	assert_int_equal(chmod(E.dir, 0755), 0);
	snprintf(E.log, sizeof(E.log), "%s/worker.log", E.dir);
	assert_int_equal(write_text(E.dir, "hosts", hosts_file), 0);
	/* the DNS server here knows only names a search domain makes (searched_names): a name
	 * not in hosts fails at once, unless the search domain were appended */
	assert_int_equal(write_text(E.dir, "resolv.conf", resolv_conf), 0);
	assert_int_equal(write_text(E.dir, "nsswitch.conf", "hosts: files dns\n"), 0);
	if (over_etc(E.dir, "hosts") < 0 || over_etc(E.dir, "resolv.conf") < 0 ||
	    (access("/etc/nsswitch.conf", F_OK) == 0 && over_etc(E.dir, "nsswitch.conf") < 0)) {
		fprintf(stderr, "skip: cannot bind-mount over /etc/hosts: %s\n", strerror(errno));
		return 0;
	}
	if (sh("ip link set lo up && ip addr add %s/32 dev lo && ip addr add %s/32 dev lo && "
	       "ip addr add %s/32 dev lo",
	       PROXY, GUEST, STRANGER) != 0) {
		fprintf(stderr, "skip: cannot configure the namespace's lo\n");
		return 0;
	}
	if (start_dns_server() < 0) {
		fprintf(stderr, "skip: cannot serve DNS on 127.0.0.1:53 here\n");
		return 0;
	}
	assert_int_equal(harness_make_certs(E.dir, ",DNS:tls.allowed.test", false), 0);
	if (start_internet() < 0) {
		fprintf(stderr, "skip: cannot start the internet namespace (veth, openssl)\n");
		return 0;
	}
	E.trap = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	setsockopt(E.trap, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(E.trap, (struct sockaddr *)&t, sizeof(t)), 0);
	assert_int_equal(listen(E.trap, 16), 0);
	if (start_worker() < 0) {
		show_log();
		fail_msg("the worker did not start");
	}
	ctl_send(POLICY(ALLOW));

	E.tls = SSL_CTX_new(TLS_client_method());
	assert_non_null(E.tls);
	_cleanup_free_ char *ca = strdup_printf("%s/ca.pem", E.dir);
	assert_int_equal(SSL_CTX_load_verify_locations(E.tls, ca, NULL), 1);
	SSL_CTX_set_verify(E.tls, SSL_VERIFY_PEER, NULL);
	E.usable = true;
	return 0;
}

static int
teardown_ns(void **state)
{
	(void)state;
	if (E.worker > 0) {
		E.ctl = safe_close(E.ctl);
		kill(E.worker, SIGKILL);
		waitpid(E.worker, NULL, 0);
	}
	if (E.inet > 0) {
		kill(-E.inet, SIGKILL);
		waitpid(E.inet, NULL, 0);
	}
	E.trap = safe_close(E.trap);
	SSL_CTX_free(E.tls);
	for (size_t i = 0; i < E.n_pending; i++)
		json_decref(E.pending[i]);
	if (E.dir[0])
		sh("rm -rf '%s'", E.dir);
	return 0;
}

#define NEED_NS()                                                                                  \
	do {                                                                                       \
		if (!E.usable) {                                                                   \
			ns_skipped = true;                                                         \
			skip();                                                                    \
		}                                                                                  \
	} while (0)

/* ---- the proxy ---- */

static void
test_http_allowed_and_denied(void **state)
{
	static const char req[] =
	        "GET /hello HTTP/1.1\r\nHost: www.allowed.test\r\nConnection: close\r\n\r\n";
	char out[4096];
	ssize_t n;
	json_t *e;
	int fd;
	(void)state;
	NEED_NS();

	/* allowed: both ways, every byte counted */
	fd = dial_proxy(GUEST);
	send_str(fd, req);
	n = read_all(fd, out, sizeof(out));
	close(fd);
	assert_true(n > 0);
	harness_expect_in(out, "host=www.allowed.test path=/hello body=0");
	e = expect_event("http", "www.allowed.test", "allowed", "on the allow list");
	assert_int_equal(jint(e, "port"), 80);
	assert_string_equal(jstr(e, "addr"), SERVER);
	assert_int_equal(jint(e, "bytes_out"), strlen(req));
	assert_int_equal(jint(e, "bytes_in"), (uint64_t)n);
	assert_true(json_is_false(json_object_get(e, "cut")));
	json_decref(e);

	/* unlisted (it resolves to the same server): the guest is told why at once, in a 403
	 * naming the name and the reason its decision records; nothing reaches the server */
	expect_get_denied("unlisted.test", "not on the allow list");

	/* a wildcard allows, a deny entry under it wins */
	expect_get_allowed("good.wild.test", "on the allow list");
	expect_get_denied("bad.wild.test", "on the deny list");
	/* a wildcard's own domain is not under it */
	expect_get_denied("wild.test", "not on the allow list");

	/* a sandbox whose mode became none (its traffic is no longer redirected, but a
	 * connection may come before the table says so) */
	ctl_send("{\"op\":\"set\",\"id\":\"sbx-test\",\"guest\":\"" GUEST "\",\"host\":\"" PROXY
	         "\",\"network\":{\"mode\":\"none\"}}\n");
	expect_get_denied("www.allowed.test", "network mode none");
	ctl_send(POLICY(ALLOW));

	/* no Host at all */
	fd = dial_proxy(GUEST);
	send_str(fd, "GET / HTTP/1.1\r\n\r\n");
	assert_int_equal(read_all(fd, out, sizeof(out)), 0);
	close(fd);
	json_decref(expect_event("http", NULL, "denied", NULL));

	char *r = hosts_seen();
	harness_expect_in(r, "www.allowed.test");
	harness_expect_in(r, "good.wild.test");
	harness_expect_not_in(r, "unlisted.test");
	harness_expect_not_in(r, "bad.wild.test");
	free(r);
	expect_no_events();
}

static void
test_unknown_source(void **state)
{
	char out[256];
	int fd;
	uint64_t t0;
	(void)state;
	NEED_NS();

	/* a source no "set" names is closed at once, whatever it sends, and not reported */
	t0 = now_mono_ms();
	fd = dial_proxy(STRANGER);
	(void)!write(fd, "GET / HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n", 42);
	assert_true(read_all(fd, out, sizeof(out)) <= 0);
	close(fd);
	assert_true(now_mono_ms() - t0 < HANDSHAKE_MS);

	/* the same from the guest passes */
	expect_get_allowed("www.allowed.test", NULL);
	expect_no_events();
}

static void
test_tls(void **state)
{
	char out[8192];
	size_t n = 0;
	json_t *e;
	SSL *s;
	int fd, k;
	(void)state;
	NEED_NS();

	/* with the name: a verified handshake with the server behind it, and its answer */
	fd = dial_proxy(GUEST);
	s = tls_connect(fd, "tls.allowed.test");
	assert_non_null(s);
	assert_int_equal(SSL_write(s, "GET / HTTP/1.0\r\n\r\n", 18), 18);
	while ((k = SSL_read(s, out + n, (int)(sizeof(out) - 1 - n))) > 0)
		n += (size_t)k;
	out[n] = '\0';
	assert_true(str_has_prefix(out, "HTTP/1.0 200 ok"));
	SSL_free(s);
	close(fd);
	e = expect_event("tls", "tls.allowed.test", "allowed", "on the allow list");
	assert_int_equal(jint(e, "port"), 443);
	assert_string_equal(jstr(e, "addr"), SERVER);
	assert_true(jint(e, "bytes_out") > 200); /* a ClientHello and more */
	assert_true(jint(e, "bytes_in") > n);    /* the certificate and the answer */
	json_decref(e);

	/* without SNI: no name, no connection */
	fd = dial_proxy(GUEST);
	s = tls_connect(fd, NULL);
	assert_null(s);
	close(fd);
	e = expect_event("tls", NULL, "denied", "no hostname");
	assert_true(json_is_null(json_object_get(e, "name")));
	json_decref(e);

	/* a name the policy does not list, though its server is the same, or one it denies:
	 * closed at once (nothing the guest would trust can be said), the reason recorded */
	e = expect_tls_closed("unlisted.test", "not on the allow list");
	assert_int_equal(jint(e, "port"), 443);
	assert_int_equal(jint(e, "bytes_in"), 0);
	json_decref(e);
	json_decref(expect_tls_closed("bad.wild.test", "on the deny list"));
	expect_no_events();
}

static void
test_keep_alive(void **state)
{
	static const char chunked[] = "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
	char out[4096];
	json_t *e;
	int fd;
	(void)state;
	NEED_NS();

	fd = dial_proxy(GUEST);
	/* the same Host again and again, with bodies of both kinds between */
	send_str(fd, "GET /1 HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n");
	assert_true(read_response(fd, out, sizeof(out)) > 0);
	harness_expect_in(out, "path=/1 body=0");
	send_str(fd,
	         "POST /2 HTTP/1.1\r\nHost: WWW.allowed.test.\r\nContent-Length: 5\r\n\r\nhello");
	assert_true(read_response(fd, out, sizeof(out)) > 0);
	harness_expect_in(out, "path=/2 body=5");
	send_str(
	        fd,
	        "POST /3 HTTP/1.1\r\nHost: www.allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n");
	send_str(fd, chunked);
	assert_true(read_response(fd, out, sizeof(out)) > 0);
	harness_expect_in(out, "path=/3 body=11");
	/* pipelined: two heads in one write */
	send_str(fd, "GET /4 HTTP/1.1\r\nHost: www.allowed.test\r\n\r\nGET /5 HTTP/1.1\r\nHost: "
	             "www.allowed.test\r\n\r\n");
	assert_true(read_response(fd, out, sizeof(out)) > 0);
	harness_expect_in(out, "path=/4");
	assert_true(read_response(fd, out, sizeof(out)) > 0);
	harness_expect_in(out, "path=/5");

	/* another Host, one the policy allows, on the same connection: refused, closed */
	send_str(fd, "GET /6 HTTP/1.1\r\nHost: other.wild.test\r\n\r\n");
	assert_int_equal(read_response(fd, out, sizeof(out)), 0);
	close(fd);
	json_decref(
	        expect_event("http", "other.wild.test", "denied", "second host on one connection"));
	e = expect_event("http", "www.allowed.test", "allowed", "on the allow list");
	assert_true(json_is_false(json_object_get(e, "cut")));
	json_decref(e);

	/* a body whose framing could be read two ways ends the connection too */
	fd = dial_proxy(GUEST);
	send_str(fd, "POST /7 HTTP/1.1\r\nHost: www.allowed.test\r\nTransfer-Encoding: "
	             "chunked\r\n\r\n5\nhello\r\n0\r\n\r\n");
	assert_int_equal(read_response(fd, out, sizeof(out)), 0);
	close(fd);
	json_decref(expect_event("http", "www.allowed.test", "denied", NULL));
	json_decref(expect_event("http", "www.allowed.test", "allowed", NULL));

	char *r = hosts_seen();
	harness_expect_not_in(r, "other.wild.test");
	free(r);
	expect_no_events();
}

static void
test_refused_addresses(void **state)
{
	char *r;
	ssize_t n;
	json_t *e;
	(void)state;
	NEED_NS();

	/* a name with a loopback and a public address: only the public one is dialled */
	r = http_get("mixed.allowed.test", "/", &n);
	harness_expect_in(r, "host=mixed.allowed.test");
	free(r);
	e = expect_event("http", "mixed.allowed.test", "allowed", NULL);
	assert_string_equal(jstr(e, "addr"), SERVER2);
	json_decref(e);

	/* an allowed name resolving only to 127.0.0.1, or to this host's own address, where a
	 * listener waits: refused before any dial */
	expect_get_bad_gateway("loop.allowed.test", "resolves only to refused addresses", false);
	expect_get_bad_gateway("own.allowed.test", "resolves only to refused addresses", false);
	assert_false(trap_reached());

	/* an allowed name that does not resolve: a denial (nothing left the host), said to the
	 * guest at once, nothing dialled; over TLS the connection is closed at once */
	ctl_send(POLICY(ALLOW ",\"nowhere.test\""));
	expect_get_bad_gateway("nowhere.test", "the name does not resolve", false);
	json_decref(expect_tls_closed("nowhere.test", "the name does not resolve"));
	ctl_send(POLICY(ALLOW));
	expect_no_events();
}

/* Lines of the worker's log holding text. */
static unsigned
log_lines_with(const char *text)
{
	_cleanup_free_ char *log = NULL;
	unsigned n = 0;
	size_t len;

	assert_int_equal(read_file_max(E.log, 1u << 24, &log, &len), 0);
	for (const char *p = log; (p = strstr(p, text)); p += strlen(text))
		n++;
	return n;
}

/* A guest decides how often a name resolving to a refused address is asked for: the log says
 * so within the rate of denials (20 a second), not once per connection. */
static void
test_refused_log_rate(void **state)
{
	const unsigned tries = 200;
	unsigned before;
	uint64_t t0, secs;
	(void)state;
	NEED_NS();

	before = log_lines_with("127.0.0.1");
	t0 = now_mono_ms();
	for (unsigned i = 0; i < tries; i++) {
		expect_get_bad_gateway("loop.allowed.test", "resolves only to refused addresses",
		                       false);
	}
	secs = (now_mono_ms() - t0) / 1000 + 1;
	/* the control: it is logged at all, with the address */
	assert_true(log_lines_with("127.0.0.1") > before);
	if (log_lines_with("127.0.0.1") - before > 20 * (secs + 1))
		fail_msg("%u lines about 127.0.0.1 for %u tries in %llu s",
		         log_lines_with("127.0.0.1") - before, tries, (unsigned long long)secs);
	expect_no_events();
}

/* What answers on this host itself is never dialled, however the name leads there: an address
 * routed here without being any interface's (a local route), or one the host got a moment ago.
 * The trap listens on port 80 of every address of this namespace. */
static void
test_local_routes(void **state)
{
	(void)state;
	NEED_NS();

	ctl_send(POLICY(ALLOW ",\"anyip.allowed.test\",\"fresh.allowed.test\""));
	assert_int_equal(sh("ip route add local " ANYIP "/32 dev lo"), 0);
	expect_get_bad_gateway("anyip.allowed.test", "resolves only to refused addresses", false);
	assert_false(trap_reached());

	/* the control: a name of the internet passes (and the host's addresses were just
	 * looked at); then the host gets one more, and a name resolving to it is refused */
	expect_get_allowed("www.allowed.test", NULL);
	assert_int_equal(sh("ip addr add " FRESH "/32 dev lo"), 0);
	expect_get_bad_gateway("fresh.allowed.test", "resolves only to refused addresses", false);
	assert_false(trap_reached());

	assert_int_equal(
	        sh("ip route del local " ANYIP "/32 dev lo && ip addr del " FRESH "/32 dev lo"), 0);
	ctl_send(POLICY(ALLOW));
	expect_no_events();
}

/* The proxy resolves exactly the name it decided on: the resolver's search domain (corp.test,
 * where searched.test.corp.test and single.corp.test exist) never turns an allowed name that
 * does not resolve into another name that does. */
static void
test_no_search_domains(void **state)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
	char addr[INET_ADDRSTRLEN], *r;
	(void)state;
	NEED_NS();

	/* the control: the DNS server does answer the longer names */
	assert_int_equal(getaddrinfo("searched.test.corp.test", NULL, &hints, &res), 0);
	inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, addr, sizeof(addr));
	freeaddrinfo(res);
	assert_string_equal(addr, SERVER);

	ctl_send(POLICY(ALLOW ",\"searched.test\",\"single\""));
	expect_get_bad_gateway("searched.test", "the name does not resolve", false);
	expect_get_bad_gateway("single", "the name does not resolve", false);

	r = hosts_seen();
	harness_expect_not_in(r, "searched.test");
	harness_expect_not_in(r, "single");
	free(r);
	ctl_send(POLICY(ALLOW));
	expect_no_events();
}

/* The proxy's threads resolve with the resolv.conf of the moment, whichever of them runs the
 * connection and however many it ran before: a name only the DNS server knows stops resolving
 * when resolv.conf names another server, and resolves again when it is put back. */
static void
test_resolv_conf_change(void **state)
{
	static const char other[] = "nameserver 127.0.0.9\noptions timeout:1 attempts:1\n";
	char *r;
	ssize_t n;
	json_t *e;
	(void)state;
	NEED_NS();

	ctl_send(POLICY(ALLOW ",\"single.corp.test\""));
	for (int round = 0; round < 2; round++) {
		/* a few, so that every waiting thread runs one */
		for (int i = 0; i < 4; i++) {
			r = http_get("single.corp.test", "/", &n);
			harness_expect_in(r, "host=single.corp.test");
			free(r);
			e = expect_event("http", "single.corp.test", "allowed",
			                 "on the allow list");
			assert_string_equal(jstr(e, "addr"), SERVER);
			json_decref(e);
		}
		if (round == 1)
			break;
		assert_int_equal(write_text(E.dir, "resolv.conf", other), 0);
		for (int i = 0; i < 4; i++)
			expect_get_bad_gateway("single.corp.test", "the name ", false);
		assert_int_equal(write_text(E.dir, "resolv.conf", resolv_conf), 0);
	}
	ctl_send(POLICY(ALLOW));
	expect_no_events();
}

/* A tightening cuts a connection it no longer allows while that connection is still dialling
 * (its address never answers: nobody replies to ARP on the veth), at once rather than when the
 * dial gives up, and nothing was sent anywhere. */
static void
test_cut_while_dialling(void **state)
{
	char out[256];
	uint64_t t0;
	json_t *e;
	int fd;
	(void)state;
	NEED_NS();

	ctl_send(POLICY(ALLOW ",\"slow.allowed.test\""));
	fd = dial_proxy(GUEST);
	send_str(fd, "GET / HTTP/1.1\r\nHost: slow.allowed.test\r\n\r\n");
	/* still dialling: no decision yet (a failed dial would be one) */
	assert_null(event_for("http", "slow.allowed.test", 500));
	t0 = now_mono_ms();
	ctl_send(POLICY(ALLOW));
	assert_int_equal(read_all(fd, out, sizeof(out)), 0);
	assert_true(now_mono_ms() - t0 < 1000);
	close(fd);
	e = expect_event("http", "slow.allowed.test", "allowed", NULL);
	assert_true(json_is_true(json_object_get(e, "cut")));
	assert_true(json_is_null(json_object_get(e, "addr")));
	assert_int_equal(jint(e, "bytes_out"), 0);
	json_decref(e);
	expect_no_events();
}

/* A "set" giving a sandbox the guest address another one holds contradicts what the worker
 * knows, and sandboxd never means it: neither policy can then be trusted for that address, so
 * both sandboxes are forgotten and their connections cut, rather than the traffic of one being
 * decided (and reported) by the other's policy. */
static void
test_guest_clash(void **state)
{
	char out[4096];
	ssize_t n;
	json_t *e;
	int fd;
	(void)state;
	NEED_NS();

	fd = dial_proxy(GUEST);
	send_str(fd, "GET /a HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n");
	assert_true(read_response(fd, out, sizeof(out)) > 0);
	ctl_send("{\"op\":\"set\",\"id\":\"sbx-clash\",\"guest\":\"" GUEST "\",\"host\":\"" PROXY
	         "\",\"network\":{\"mode\":\"allowlist\",\"allow\":[\"unlisted.test\"],"
	         "\"deny\":[]}}\n");
	assert_int_equal(read_response(fd, out, sizeof(out)), 0);
	close(fd);
	e = expect_event("http", "www.allowed.test", "allowed", NULL);
	assert_true(json_is_true(json_object_get(e, "cut")));
	json_decref(e);
	/* the address is nobody's now: closed at once, decided by neither policy */
	free(http_get("unlisted.test", "/", &n));
	assert_true(n <= 0);
	free(http_get("www.allowed.test", "/", &n));
	assert_true(n <= 0);
	expect_no_events();

	/* sandboxd's next set for it is taken (the other one was not kept either) */
	ctl_send(POLICY(ALLOW));
	expect_get_allowed("www.allowed.test", NULL);
	expect_no_events();
}

/* The worker's CPU time so far (user and system), in ms. */
static uint64_t
worker_cpu_ms(void)
{
	_cleanup_free_ char *path = strdup_printf("/proc/%d/stat", (int)E.worker), *text = NULL;
	unsigned long long ut = 0, st = 0;
	size_t n;
	char *p;

	assert_int_equal(read_file_max(path, 1 << 16, &text, &n), 0);
	p = strrchr(text, ')'); /* after the command, which may hold spaces */
	assert_non_null(p);
	assert_int_equal(
	        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st),
	        2);
	return (ut + st) * 1000 / (uint64_t)sysconf(_SC_CLK_TCK);
}

/* A later request head sent a line at a time (4000 lines, each read apart) costs the worker
 * about what it costs sent whole: it is read once it can be whole, not parsed again for every
 * line (that was ~600 ms of the worker's CPU here for 16 KiB, a guest's to make on each of its
 * connections). Served all the same; a bad line in one is still refused, at its end. */
static void
test_trickled_head(void **state)
{
	char out[4096];
	uint64_t cpu;
	json_t *e;
	int fd;
	(void)state;
	NEED_NS();

	fd = dial_proxy(GUEST);
	send_str(fd, "GET /1 HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n");
	assert_true(read_response(fd, out, sizeof(out)) > 0);
	cpu = worker_cpu_ms();
	/* nearly 16 KiB of head in 4-byte pieces: long lines (each piece re-judges the line so
	 * far) and fewer than the 64 fields a head may have */
	send_str(fd, "GET /2 HTTP/1.1\r\nHost: www.allowed.test\r\na: ");
	for (int i = 0; i < 3800; i++) {
		send_str(fd, i % 70 == 69 ? "\r\na:" : "aaaa");
		usleep(100);
	}
	send_str(fd, "\r\n\r\n");
	assert_true(read_response(fd, out, sizeof(out)) > 0);
	harness_expect_in(out, "path=/2");
	cpu = worker_cpu_ms() - cpu;
	if (cpu > 200)
		fail_msg("the worker took %llu ms of CPU for one trickled head",
		         (unsigned long long)cpu);

	send_str(fd, "GET /3 HTTP/1.1\r\nHost: www.allowed.test\r\n");
	for (int i = 0; i < 50; i++) {
		send_str(fd, i == 25 ? "notaheader\r\n" : "a:\r\n");
		usleep(100);
	}
	send_str(fd, "\r\n");
	assert_int_equal(read_response(fd, out, sizeof(out)), 0);
	close(fd);
	json_decref(expect_event("http", NULL, "denied", "a header line without ':'"));
	e = expect_event("http", "www.allowed.test", "allowed", NULL);
	assert_true(json_is_false(json_object_get(e, "cut")));
	json_decref(e);
	expect_no_events();
}

static void
test_handshake_timeout(void **state)
{
	char out[4096];
	uint64_t t0, took;
	int fd, fd2;
	(void)state;
	NEED_NS();

	/* nothing sent, or half a head: closed after the timeout, quietly */
	t0 = now_mono_ms();
	fd = dial_proxy(GUEST);
	fd2 = dial_proxy(GUEST);
	send_str(fd2, "GET / HTTP/1.1\r\nHo");
	assert_true(read_all(fd, out, sizeof(out)) == 0);
	took = now_mono_ms() - t0;
	assert_true(took >= HANDSHAKE_MS - 100 && took < HANDSHAKE_MS + 2000);
	assert_true(read_all(fd2, out, sizeof(out)) == 0);
	close(fd);
	close(fd2);

	/* a slow guest within the timeout passes */
	fd = dial_proxy(GUEST);
	usleep(HANDSHAKE_MS * 1000 / 2);
	send_str(fd, "GET /slow HTTP/1.1\r\nHost: www.allowed.test\r\nConnection: close\r\n\r\n");
	assert_true(read_all(fd, out, sizeof(out)) > 0);
	harness_expect_in(out, "path=/slow");
	close(fd);
	json_decref(expect_event("http", "www.allowed.test", "allowed", NULL));
	/* and the two silent ones were no decisions */
	expect_no_events();
}

static void
test_half_close(void **state)
{
	char out[4096];
	json_t *e;
	int fd;
	(void)state;
	NEED_NS();

	/* the guest is done sending; the server answers only then, and the answer arrives */
	fd = dial_proxy(GUEST);
	send_str(fd, "GET /halfclose HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n");
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	assert_true(read_all(fd, out, sizeof(out)) > 0);
	harness_expect_in(out, "got eof after head");
	close(fd);
	e = expect_event("http", "www.allowed.test", "allowed", NULL);
	assert_int_equal(jint(e, "bytes_in"), strlen(out));
	json_decref(e);
	expect_no_events();
}

static void
test_bulk(void **state)
{
	static const size_t size = 32u << 20;
	_cleanup_free_ char *buf = NULL, *req = NULL, *up = NULL;
	uint64_t got = 0;
	json_t *e;
	int fd;
	(void)state;
	NEED_NS(); /* before anything is allocated: skip() leaves without cleanups */

	buf = malloc(1 << 16);
	assert_non_null(buf);
	req = strdup_printf("GET /big/%zu HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n", size);

	/* a large download through the pipes, then a large upload on the same connection */
	fd = dial_proxy(GUEST);
	send_str(fd, req);
	for (uint64_t want = 0; want == 0 || got < want;) {
		/* the head is kept until it is whole, the body only counted */
		ssize_t k = read(fd, buf + (want ? 0 : got), want ? 1 << 16 : (1 << 16) - 1 - got);
		char *end;

		assert_true(k > 0);
		got += (uint64_t)k;
		if (want)
			continue;
		buf[got] = '\0';
		if ((end = memmem(buf, got, "\r\n\r\n", 4))) {
			char *cl = strcasestr(buf, "Content-Length: ");

			assert_non_null(cl);
			want = (uint64_t)(end + 4 - buf) + strtoull(cl + 16, NULL, 10);
		}
	}
	assert_true(got == size + strlen("HTTP/1.1 200 OK\r\nContent-Length: 33554432\r\n\r\n"));
	up = malloc(4u << 20);
	assert_non_null(up);
	memset(up, 'u', 4u << 20);
	_cleanup_free_ char *post = strdup_printf(
	        "POST /up HTTP/1.1\r\nHost: www.allowed.test\r\nContent-Length: %u\r\n\r\n",
	        4u << 20);
	send_str(fd, post);
	assert_int_equal(write_all(fd, up, 4u << 20), 0);
	assert_true(read_response(fd, buf, 1 << 16) > 0);
	harness_expect_in(buf, "body=4194304");
	close(fd);
	e = expect_event("http", "www.allowed.test", "allowed", NULL);
	assert_int_equal(jint(e, "bytes_in"), got + strlen(buf));
	assert_int_equal(jint(e, "bytes_out"), strlen(req) + strlen(post) + (4u << 20));
	json_decref(e);
	expect_no_events();
}

/* A thread of the proxy keeps its (empty) pipes for its next connection. One that ends with
 * bytes still in its pipe (the guest stopped reading a large answer, then reset the
 * connection) must carry none of them into another: every later connection, whichever
 * thread runs it, gets its own answer and nothing else. */
static void
test_leftover_bytes(void **state)
{
	static const char req[] = "GET /big/8388608 HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n";
	struct sockaddr_in p = { .sin_family = AF_INET, .sin_port = htons(PROXY_PORT) };
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	int small = 4096, mss = 1400, fd;
	json_t *e;
	(void)state;
	NEED_NS();

	/* a small window and segments: the answer stalls with the proxy's pipe full before the
	 * proxy has moved enough for the pipe to be grown (a grown one is never kept) */
	fd = guest_socket(GUEST, SOCK_STREAM);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss)), 0);
	inet_pton(AF_INET, PROXY, &p.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&p, sizeof(p)), 0);
	send_str(fd, req);
	usleep(500000);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	close(fd); /* unread bytes: a reset */
	e = expect_event("http", "www.allowed.test", "allowed", NULL);
	assert_true(jint(e, "bytes_in") > 0);
	assert_true(jint(e, "bytes_in") < (256u << 10));
	json_decref(e);

	/* more connections than threads wait in the pool (64), one at a time: the thread that
	 * ran the one above runs some of them */
	for (int i = 0; i < 70; i++) {
		ssize_t n;
		char *r = http_get("www.allowed.test", "/after", &n);

		if (!str_has_prefix(r, "HTTP/1.1 200 OK\r\n"))
			fail_msg("connection %d got another's bytes: '%.40s'", i, r);
		harness_expect_in(r, "path=/after");
		free(r);
		e = expect_event("http", "www.allowed.test", "allowed", NULL);
		assert_int_equal(jint(e, "bytes_in"), (uint64_t)n);
		json_decref(e);
	}
	expect_no_events();
}

static void
test_tightening(void **state)
{
	char out[4096];
	json_t *e;
	int a, b;
	(void)state;
	NEED_NS();

	/* two open connections; the policy then drops one of their names */
	a = dial_proxy(GUEST);
	send_str(a, "GET /a HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n");
	assert_true(read_response(a, out, sizeof(out)) > 0);
	b = dial_proxy(GUEST);
	send_str(b, "GET /b HTTP/1.1\r\nHost: good.wild.test\r\n\r\n");
	assert_true(read_response(b, out, sizeof(out)) > 0);

	ctl_send(POLICY("\"*.wild.test\""));
	assert_int_equal(read_response(a, out, sizeof(out)), 0); /* cut: EOF, nothing sent */
	e = expect_event("http", "www.allowed.test", "allowed", NULL);
	assert_true(json_is_true(json_object_get(e, "cut")));
	json_decref(e);
	close(a);
	/* the other is still allowed and still works */
	send_str(b, "GET /b2 HTTP/1.1\r\nHost: good.wild.test\r\n\r\n");
	assert_true(read_response(b, out, sizeof(out)) > 0);
	harness_expect_in(out, "path=/b2");
	/* and a new connection to the dropped name is denied */
	expect_get_denied("www.allowed.test", "not on the allow list");

	/* removing the sandbox cuts the rest */
	ctl_send("{\"op\":\"remove\",\"id\":\"sbx-test\"}\n");
	assert_int_equal(read_response(b, out, sizeof(out)), 0);
	close(b);
	e = expect_event("http", "good.wild.test", "allowed", NULL);
	assert_true(json_is_true(json_object_get(e, "cut")));
	json_decref(e);

	ctl_send(POLICY(ALLOW));
	expect_get_allowed("www.allowed.test", NULL);
	expect_no_events();
}

/* ---- the DNS stub ---- */

/* A query for name and type from src; the answer's length, or -1 when none came. */
static ssize_t
dns_ask(const char *src, const char *name, uint16_t type, uint8_t *ans, int timeout_ms)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(DNS_PORT) };
	uint8_t q[300] = { 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0 };
	size_t n = 12;
	const char *p = name;
	int fd = guest_socket(src, SOCK_DGRAM);
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	ssize_t k = -1;

	while (*p) {
		const char *dot = strchr(p, '.');
		size_t l = dot ? (size_t)(dot - p) : strlen(p);

		q[n++] = (uint8_t)l;
		memcpy(q + n, p, l);
		n += l;
		p += l + (dot ? 1 : 0);
	}
	q[n++] = 0;
	q[n++] = (uint8_t)(type >> 8);
	q[n++] = (uint8_t)type;
	q[n++] = 0;
	q[n++] = 1;
	inet_pton(AF_INET, PROXY, &to.sin_addr);
	assert_int_equal(sendto(fd, q, n, 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)n);
	if (poll(&pf, 1, timeout_ms) == 1)
		k = recv(fd, ans, 512, 0);
	close(fd);
	if (k >= 0) {
		assert_true(k >= (ssize_t)n);
		assert_int_equal(ans[0], 0x12);
		assert_int_equal(ans[1], 0x34);
		assert_memory_equal(ans + 12, q + 12, n - 12); /* the question, echoed */
	}
	return k;
}

#define RCODE(a) ((a)[3] & 0x0f)
#define ANCOUNT(a) (((a)[6] << 8) | (a)[7])

static void
test_dns(void **state)
{
	uint8_t a[512];
	ssize_t n;
	size_t q;
	(void)state;
	NEED_NS();

	/* allowed, A: the host side of the guest's link, TTL 30 */
	n = dns_ask(GUEST, "www.allowed.test", 1, a, WAIT_MS);
	assert_true(n > 0);
	assert_int_equal(RCODE(a), 0);
	assert_int_equal(ANCOUNT(a), 1);
	q = 12 + strlen("www.allowed.test") + 2 + 4;
	/* the record: name (a pointer), type A, class IN, TTL, length 4, the address */
	assert_int_equal((size_t)n, q + 16);
	assert_int_equal(a[q + 2], 0);
	assert_int_equal(a[q + 3], 1);
	assert_int_equal((a[q + 6] << 24) | (a[q + 7] << 16) | (a[q + 8] << 8) | a[q + 9], 30);
	char addr[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, a + q + 12, addr, sizeof(addr));
	assert_string_equal(addr, PROXY);
	json_decref(expect_event("dns", "www.allowed.test", "allowed", "on the allow list"));

	/* allowed, AAAA: an empty answer */
	n = dns_ask(GUEST, "www.allowed.test", 28, a, WAIT_MS);
	assert_true(n > 0);
	assert_int_equal(RCODE(a), 0);
	assert_int_equal(ANCOUNT(a), 0);
	json_decref(expect_event("dns", "www.allowed.test", "allowed", NULL));

	/* unlisted, and under a denied wildcard: NXDOMAIN */
	n = dns_ask(GUEST, "unlisted.test", 1, a, WAIT_MS);
	assert_true(n > 0);
	assert_int_equal(RCODE(a), 3);
	assert_int_equal(ANCOUNT(a), 0);
	json_decref(expect_event("dns", "unlisted.test", "denied", "not on the allow list"));
	n = dns_ask(GUEST, "bad.wild.test", 1, a, WAIT_MS);
	assert_int_equal(RCODE(a), 3);
	json_decref(expect_event("dns", "bad.wild.test", "denied", "on the deny list"));

	/* from an address no sandbox has: no answer at all (the guest's got one just now) */
	assert_int_equal(dns_ask(STRANGER, "www.allowed.test", 1, a, 1000), -1);
	assert_true(dns_ask(GUEST, "www.allowed.test", 1, a, WAIT_MS) > 0);
	json_decref(expect_event("dns", "www.allowed.test", "allowed", NULL));
	expect_no_events();

	/* a query right after sandboxd sent the sandbox's "set" is decided by it, not dropped as
	 * coming from no known guest (the first query of a booting guest) */
	for (int i = 0; i < 20; i++) {
		ctl_send("{\"op\":\"remove\",\"id\":\"sbx-test\"}\n");
		ctl_send(POLICY(ALLOW));
		n = dns_ask(GUEST, "www.allowed.test", 1, a, 1000);
		if (n <= 0)
			fail_msg("round %d: no answer to a query sent after the set", i);
		assert_int_equal(RCODE(a), 0);
		json_decref(expect_event("dns", "www.allowed.test", "allowed", NULL));
	}
	expect_no_events();
}

/* Asks the stub for name (type A) until the answer's rcode is want: a policy just sent takes
 * effect once the worker has read it, which nothing reports. Each answer's decision is taken. */
static void
dns_until(const char *name, int want)
{
	uint64_t deadline = now_mono_ms() + WAIT_MS;
	uint8_t a[512];

	for (;;) {
		assert_true(dns_ask(GUEST, name, 1, a, WAIT_MS) > 0);
		json_decref(expect_event("dns", name, RCODE(a) ? "denied" : "allowed", NULL));
		if (RCODE(a) == want)
			return;
		if (now_mono_ms() > deadline)
			fail_msg("the stub still answers %s with rcode %d", name, RCODE(a));
		usleep(50000);
	}
}

/* A query for what no host name can be (a newline and an erase-screen sequence in its first
 * label) is refused (FORMERR) and reported as a denial without a name; the worker's one log
 * line about it quotes what was asked with those bytes escaped, never raw (R-S7). */
static void
test_dns_hostile_name(void **state)
{
	static const char label[] = "evil\n\x1b[2J";
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(DNS_PORT) };
	uint8_t q[64] = { 0x56, 0x78, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0 }, a[512];
	_cleanup_free_ char *log = NULL;
	struct pollfd pf;
	size_t n = 12, len;
	const char *line;
	json_t *e;
	int fd;
	(void)state;
	NEED_NS();

	q[n++] = sizeof(label) - 1;
	memcpy(q + n, label, sizeof(label) - 1);
	n += sizeof(label) - 1;
	memcpy(q + n, "\4test\0\0\1\0\1", 10);
	n += 10;
	fd = guest_socket(GUEST, SOCK_DGRAM);
	pf = (struct pollfd){ .fd = fd, .events = POLLIN };
	inet_pton(AF_INET, PROXY, &to.sin_addr);
	assert_int_equal(sendto(fd, q, n, 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)n);
	assert_int_equal(poll(&pf, 1, WAIT_MS), 1);
	assert_int_equal(recv(fd, a, sizeof(a), 0), 12);
	close(fd);
	assert_int_equal(RCODE(a), 1);
	e = expect_event("dns", NULL, "denied", "not a host name");
	assert_true(json_is_null(json_object_get(e, "name")));
	json_decref(e);

	assert_int_equal(read_file_max(E.log, 1u << 24, &log, &len), 0);
	line = strstr(log, "dns \"evil");
	if (!line) {
		show_log();
		fail_msg("no log line about the query");
	}
	harness_expect_in(line, "dns \"evil\\n\\x1b[2J.test\" port 53 (not a host name)\n");
	/* the whole line: from its start to its end, no raw byte of the name */
	while (line > log && line[-1] != '\n')
		line--;
	assert_true(str_has_prefix(line, "sandboxd-egress: egress denied: "));
	assert_null(memchr(log, '\x1b', len));
	assert_null(strstr(log, "\n[2J"));
	expect_no_events();
}

/* The largest policy a request can hold (netpolicy: 256 names of 253 bytes to allow and as many
 * to deny, ~130 KiB as a set line) reaches the worker whole and takes effect. */
static void
test_largest_policy(void **state)
{
	_cleanup_buf_ struct buf line = BUF_INIT(1u << 20);
	char names[2][NETPOLICY_LIST_MAX][NETNAME_MAX + 1];
	uint8_t a[512];
	(void)state;
	NEED_NS();

	/* 253 bytes each: four labels, the first saying which name it is */
	for (int l = 0; l < 2; l++)
		for (int i = 0; i < NETPOLICY_LIST_MAX; i++)
			snprintf(names[l][i], sizeof(names[l][i]), "%c%03d%s.%s.%s.%s",
			         l ? 'd' : 'a', i,
			         "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
			         "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy",
			         "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
			         "wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww");
	assert_int_equal(strlen(names[0][0]), NETNAME_MAX);
	assert_int_equal(buf_puts(&line, "{\"op\":\"set\",\"id\":\"sbx-test\",\"guest\":\"" GUEST
	                                 "\",\"host\":\"" PROXY
	                                 "\",\"network\":{\"mode\":\"allowlist\",\"allow\":["),
	                 0);
	for (int l = 0; l < 2; l++) {
		for (int i = 0; i < NETPOLICY_LIST_MAX; i++)
			assert_int_equal(buf_printf(&line, "%s\"%s\"", i ? "," : "", names[l][i]),
			                 0);
		assert_int_equal(buf_puts(&line, l ? "]}}\n" : "],\"deny\":["), 0);
	}
	assert_true(line.len > 128u * 1024);
	ctl_send(line.data);

	/* the last name allowed resolves, once the worker has read the line (nothing says when);
	 * the control: one the policy before named no longer does */
	dns_until(names[0][NETPOLICY_LIST_MAX - 1], 0);
	assert_true(dns_ask(GUEST, "www.allowed.test", 1, a, WAIT_MS) > 0);
	assert_int_equal(RCODE(a), 3);
	json_decref(expect_event("dns", "www.allowed.test", "denied", NULL));

	ctl_send(POLICY(ALLOW));
	dns_until("www.allowed.test", 0);
	expect_no_events();
}

/* As the host's nftables table sends them: the guest dials some address and port, the proxy
 * learns the port from the redirect and dials the name, never the address. */
static void
test_redirected(void **state)
{
	struct sockaddr_in to = { .sin_family = AF_INET };
	char out[4096];
	json_t *e;
	SSL *s;
	int fd;
	(void)state;
	NEED_NS();

	if (sh("printf '%%s\\n' 'table ip sbxtest {' ' chain out {' '  type nat hook output "
	       "priority -100; policy accept;' '  ip saddr %s tcp dport { 80, 443, 8080 } dnat to "
	       "%s:%d' ' }' '}' | nft -f -",
	       GUEST, PROXY, PROXY_PORT) != 0) {
		fprintf(stderr, "skip: cannot load a nat rule with nft here\n");
		ns_skipped = true;
		skip();
	}

	/* port 8080 of some address: the server's 8080, found by the Host */
	fd = guest_socket(GUEST, SOCK_STREAM);
	inet_pton(AF_INET, "198.51.100.99", &to.sin_addr);
	to.sin_port = htons(8080);
	assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	send_str(fd, "GET /r HTTP/1.1\r\nHost: www.allowed.test\r\nConnection: close\r\n\r\n");
	assert_true(read_all(fd, out, sizeof(out)) > 0);
	harness_expect_in(out, "host=www.allowed.test path=/r body=0 port=8080");
	close(fd);
	e = expect_event("http", "www.allowed.test", "allowed", NULL);
	assert_int_equal(jint(e, "port"), 8080);
	assert_string_equal(jstr(e, "addr"), SERVER);
	json_decref(e);

	/* TLS to the server's own address and port: through the proxy all the same */
	fd = guest_socket(GUEST, SOCK_STREAM);
	inet_pton(AF_INET, SERVER, &to.sin_addr);
	to.sin_port = htons(443);
	assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	s = tls_connect(fd, "tls.allowed.test");
	assert_non_null(s);
	SSL_free(s);
	close(fd);
	e = expect_event("tls", "tls.allowed.test", "allowed", NULL);
	assert_int_equal(jint(e, "port"), 443);
	json_decref(e);

	/* the allowed server's address with an unlisted name: the name decides */
	fd = guest_socket(GUEST, SOCK_STREAM);
	to.sin_port = htons(80);
	assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	send_str(fd, "GET / HTTP/1.1\r\nHost: unlisted.test\r\n\r\n");
	assert_true(read_all(fd, out, sizeof(out)) > 0);
	close(fd);
	assert_string_equal(out, "HTTP/1.1 403 Forbidden\r\n"
	                         "Content-Type: text/plain; charset=us-ascii\r\n"
	                         "Content-Length: 56\r\n"
	                         "Cache-Control: no-store\r\n"
	                         "Connection: close\r\n\r\n"
	                         "sandboxd egress: 'unlisted.test': not on the allow list\n");
	json_decref(expect_event("http", "unlisted.test", "denied", "not on the allow list"));
	assert_int_equal(sh("nft delete table ip sbxtest"), 0);
	expect_no_events();
}

/* sandboxd stops reading: decisions are dropped and counted, connections never wait. */
static void
test_backpressure(void **state)
{
	static const unsigned sent = 20000;
	uint8_t q[64] = { 0x12, 0x34, 0x01, 0x00, 0,   1,   0,   0,   0,   0,   0,   0,
		          3,    'w',  'w',  'w',  7,   'a', 'l', 'l', 'o', 'w', 'e', 'd',
		          4,    't',  'e',  's',  't', 0,   0,   1,   0,   1 };
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(DNS_PORT) };
	uint64_t events = 0, dropped = 0;
	char *r;
	ssize_t n;
	json_t *j;
	int fd;
	(void)state;
	NEED_NS();

	fd = guest_socket(GUEST, SOCK_DGRAM);
	inet_pton(AF_INET, PROXY, &to.sin_addr);
	for (unsigned i = 0; i < sent; i++) {
		assert_int_equal(sendto(fd, q, 34, 0, (struct sockaddr *)&to, sizeof(to)), 34);
		if (i % 200 == 199)
			usleep(2000);
	}
	close(fd);
	/* the proxy still serves while nobody reads its decisions */
	r = http_get("www.allowed.test", "/", &n);
	harness_expect_in(r, "host=www.allowed.test");
	free(r);

	while ((j = ctl_line(1000))) {
		if (streq(jstr(j, "op"), "dropped"))
			dropped += jint(j, "count");
		else if (streq(jstr(j, "op"), "egress"))
			events++;
		json_decref(j);
	}
	assert_true(dropped > 0);
	/* a query the kernel dropped is no decision at all; the rest are counted once */
	assert_true(events + dropped <= sent + 1);
	assert_true(events >= 4096);
	/* and it carries on */
	assert_true(dns_ask(GUEST, "www.allowed.test", 1, (uint8_t[512]){ 0 }, WAIT_MS) > 0);
	json_decref(expect_event("dns", "www.allowed.test", "allowed", NULL));
	expect_no_events();
}

/* The worker's threads (main, DNS, the proxy's pool) */
static unsigned
worker_threads(void)
{
	_cleanup_free_ char *path = strdup_printf("/proc/%d/status", (int)E.worker);
	_cleanup_free_ char *status = NULL;
	const char *t;
	size_t n;

	assert_int_equal(read_file_max(path, 1 << 16, &status, &n), 0);
	t = strstr(status, "\nThreads:");
	assert_non_null(t);
	return (unsigned)strtoul(t + 9, NULL, 10);
}

/* Many connections open at once, each with its own answer, while sandboxd updates the policy;
 * the pool grows for them and, once they are gone, keeps no more than 64 threads waiting. */
static void
test_many_at_once(void **state)
{
	enum {
		N = 150
	};
	static int fds[N];
	char out[4096];
	unsigned before;
	json_t *e;
	(void)state;
	NEED_NS();

	before = worker_threads();
	for (int i = 0; i < N; i++) {
		_cleanup_free_ char *req = strdup_printf(
		        "GET /halfclose HTTP/1.1\r\nHost: www.allowed.test\r\nX-N: %d\r\n\r\n", i);

		fds[i] = dial_proxy(GUEST);
		send_str(fds[i], req);
		if (i % 50 == 25) /* a policy update while they run, cutting none of them */
			ctl_send(POLICY(ALLOW ",\"more.allowed.test\""));
	}
	/* each one is held by a thread until the guest is done sending */
	for (int i = 0; i < 100 && worker_threads() < before + N - 1; i++)
		usleep(20000);
	assert_true(worker_threads() >= N);
	for (int i = 0; i < N; i++)
		assert_int_equal(shutdown(fds[i], SHUT_WR), 0);
	for (int i = 0; i < N; i++) {
		ssize_t n = read_all(fds[i], out, sizeof(out));
		if (n <= 0) {
			/* say which, and what the worker decided, before failing */
			fprintf(stderr, "connection %d of %d: %s\n", i, N,
			        n < 0 ? strerror(errno) : "closed with no answer");
			for (json_t *d; (d = ctl_line(200));) {
				char *text = json_dumps(d, JSON_COMPACT);
				fprintf(stderr, "  worker: %s\n", text ? text : "?");
				free(text);
				json_decref(d);
			}
			fail();
		}
		harness_expect_in(out, "got eof after head");
		close(fds[i]);
	}
	for (int i = 0; i < N; i++) {
		e = expect_event("http", "www.allowed.test", "allowed", NULL);
		assert_true(json_is_false(json_object_get(e, "cut")));
		json_decref(e);
	}
	/* the pool shrinks back: 64 waiting, the main and the DNS thread, one on its way out */
	for (int i = 0; i < 100 && worker_threads() > 64 + 3; i++)
		usleep(20000);
	assert_true(worker_threads() <= 64 + 3);
	ctl_send(POLICY(ALLOW));
	expect_no_events();
}

/* The cap on all connections the worker said it keeps (its "ready" log line), or 0. */
static unsigned
worker_max_conns(void)
{
	_cleanup_free_ char *log = NULL;
	unsigned max = 0;
	const char *at;
	size_t n;

	if (read_file_max(E.log, 1u << 24, &log, &n) < 0 || !(at = strstr(log, ", at most ")) ||
	    sscanf(at, ", at most %u connections", &max) != 1)
		return 0;
	return max;
}

/* One sandbox cannot hold more than its share of the proxy's connections. */
static void
test_caps(void **state)
{
	static int fds[WORKER_CONNS_PER_SANDBOX];
	char out[256];
	unsigned max;
	json_t *e;
	int fd;
	(void)state;
	NEED_NS();

	/* the cap on all of them must be above one sandbox's, or it is the one met */
	max = worker_max_conns();
	if (max <= WORKER_CONNS_PER_SANDBOX) {
		fprintf(stderr,
		        "skip: the worker keeps at most %u connections (its fd limit, which could "
		        "not be raised to %u), not more than one sandbox's %u\n",
		        max, WORKER_NOFILE, WORKER_CONNS_PER_SANDBOX);
		ns_skipped = true;
		skip();
	}

	/* silent connections up to the cap (each one a thread in the handshake) */
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		fds[i] = dial_proxy(GUEST);
	fd = dial_proxy(GUEST);
	assert_true(read_all(fd, out, sizeof(out)) <= 0);
	close(fd);
	e = expect_event("http", NULL, "denied", NULL);
	assert_true(str_has_prefix(jstr(e, "reason"), "too many connections"));
	json_decref(e);
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		close(fds[i]);

	/* once they are gone (their threads see EOF), a connection passes again */
	for (int i = 0;; i++) {
		ssize_t n;

		free(http_get("www.allowed.test", "/", &n));
		if (n > 0)
			break;
		json_decref(expect_event("http", NULL, "denied", NULL));
		assert_true(i < 20);
		usleep(100000);
	}
	json_decref(expect_event("http", "www.allowed.test", "allowed", NULL));
	expect_no_events();
}

/* ---- the process ---- */

static void
test_process(void **state)
{
	const char *bin;
	_cleanup_free_ char *status_path = NULL, *status = NULL, *out = NULL, *log = NULL;
	size_t n;
	int st;
	(void)state;
	NEED_NS();
	bin = harness_binary("SANDBOXD");

	/* it dropped root, for good */
	status_path = strdup_printf("/proc/%d/status", (int)E.worker);
	assert_int_equal(read_file_max(status_path, 1 << 16, &status, &n), 0);
	harness_expect_in(status, "Uid:\t65534\t65534\t65534\t65534");
	harness_expect_in(status, "Gid:\t65534\t65534\t65534\t65534");
	harness_expect_in(status, "NoNewPrivs:\t1");
	harness_expect_in(status, "CapEff:\t0000000000000000");

	/* as root without --uid it refuses to run */
	const char *const args[] = {
		"egress-worker", "--control-fd", "1",           "--proxy-listen",
		"127.0.0.1:1",   "--dns-listen", "127.0.0.1:1", NULL
	};
	assert_true(harness_run(bin, args, NULL, &out) != 0);
	harness_expect_in(out, "refusing to run as root");

	/* it ends when sandboxd goes away, cleanly */
	E.ctl = safe_close(E.ctl);
	for (int i = 0; i < 100 && waitpid(E.worker, &st, WNOHANG) == 0; i++)
		usleep(50000);
	kill(E.worker, SIGKILL);
	assert_int_equal(waitpid(E.worker, &st, 0) == E.worker || errno == ECHILD, 1);
	E.worker = 0;
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(read_file_max(E.log, 1 << 20, &log, &n), 0);
	if (strstr(log, "Sanitizer") || strstr(log, "runtime error:")) {
		show_log();
		fail_msg("the worker's log holds a sanitizer report");
	}
}

int
main(void)
{
	const struct CMUnitTest pure[] = {
		cmocka_unit_test(test_chunked),           cmocka_unit_test(test_chunked_refused),
		cmocka_unit_test(test_addresses),         cmocka_unit_test(test_decision_lines),
		cmocka_unit_test(test_decision_log_rate),
	};
	const struct CMUnitTest ns[] = {
		cmocka_unit_test(test_http_allowed_and_denied),
		cmocka_unit_test(test_unknown_source),
		cmocka_unit_test(test_tls),
		cmocka_unit_test(test_keep_alive),
		cmocka_unit_test(test_trickled_head),
		cmocka_unit_test(test_refused_addresses),
		cmocka_unit_test(test_refused_log_rate),
		cmocka_unit_test(test_local_routes),
		cmocka_unit_test(test_no_search_domains),
		cmocka_unit_test(test_resolv_conf_change),
		cmocka_unit_test(test_cut_while_dialling),
		cmocka_unit_test(test_guest_clash),
		cmocka_unit_test(test_handshake_timeout),
		cmocka_unit_test(test_half_close),
		cmocka_unit_test(test_bulk),
		cmocka_unit_test(test_leftover_bytes),
		cmocka_unit_test(test_tightening),
		cmocka_unit_test(test_dns),
		cmocka_unit_test(test_dns_hostile_name),
		cmocka_unit_test(test_largest_policy),
		cmocka_unit_test(test_redirected),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_many_at_once),
		cmocka_unit_test(test_caps),
		cmocka_unit_test(test_process),
	};
	int r;

	signal(SIGPIPE, SIG_IGN); /* writing to what the proxy closed is part of the test */
	r = cmocka_run_group_tests_name("egress worker: parts", pure, NULL, NULL);
	r += cmocka_run_group_tests_name("egress worker: the process", ns, setup_ns, teardown_ns);
	if (r != 0)
		show_log();
	/* the namespace half did not run (not root, no namespaces): skipped (77), not passed */
	return r == 0 && ns_skipped ? 77 : r;
}
