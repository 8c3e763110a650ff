/* egbench.c: the programs of bench/egress/run.sh, one binary with four verbs. Standalone:
 * includes nothing from the project (it must measure the worker, not share code with it).
 *
 *   egbench serve --addr A --tls P[,P] --http P[,P] --cert F --key F
 *       the "server" namespace's origin: TLS on each --tls port (a thread per connection:
 *       GET /N sends N bytes, /N?rate=R paces them at R bytes/s) and plain HTTP on each
 *       --http port (one epoll thread: any request gets a 2-byte answer, then the server
 *       closes). Built to outrun every path it is measured through.
 *   egbench conns --to A:P --host NAME [--absolute] [-n 1000] [-c 8]
 *       N short HTTP connections, C in flight, a new TCP connection and one request each;
 *       --absolute sends the absolute-form request an explicit proxy takes. Prints the rate
 *       and, per connection, connect() to first byte of the answer.
 *   egbench hold --to A:P --sni NAME --path P [-n N] [--proxy A:P]
 *       N concurrent HTTPS downloads (a thread each; through an explicit proxy with CONNECT
 *       when --proxy): all connect and shake hands first, then all send their request at
 *       once; prints "ready" once every one has its first body byte, "done" at the end.
 *   egbench drive --worker SANDBOXD --uid U --gid G --guest A --host A --allow NAME
 *                 --pidfile F [--log F]
 *       runs `SANDBOXD egress-worker` on a control socketpair as sandboxd would: sends the
 *       "set" line for the guest, drains the decision lines, counts them; writes the worker's
 *       pid to F once it said "ready". SIGTERM closes the control channel (the worker exits). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define HEAD_MAX 8192
#define CHUNK (64u << 10)
#define THREAD_STACK (256u << 10)

static void
die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("egbench: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void
parse_addr(const char *s, struct sockaddr_in *ret)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	char *end;
	unsigned long port;

	if (!colon || (size_t)(colon - s) >= sizeof(host))
		die("'%s': not ADDR:PORT", s);
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	port = strtoul(colon + 1, &end, 10);
	memset(ret, 0, sizeof(*ret));
	ret->sin_family = AF_INET;
	ret->sin_port = htons((uint16_t)port);
	if (*end || port == 0 || port > 65535 || inet_pton(AF_INET, host, &ret->sin_addr) != 1)
		die("'%s': not ADDR:PORT", s);
}

static unsigned long
num_arg(const char *s)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || end == s)
		die("'%s': not a number", s);
	return v;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static uint32_t
pct(const uint32_t *v, size_t n, double p)
{
	size_t i;

	if (n == 0)
		return 0;
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static double
cpu_ms_self(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* ---- serve ---- */

static SSL_CTX *srv_ctx;
static uint8_t payload[CHUNK];

static int
listen_on(const char *addr, unsigned port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd, one = 1;

	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		die("'%s': not an IPv4 address", addr);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("bind %s:%u: %s", addr, port, strerror(errno));
	if (listen(fd, 4096) < 0)
		die("listen: %s", strerror(errno));
	return fd;
}

/* Reads a request head over TLS; returns the target's N and rate (0: as fast as possible). */
static int
tls_read_request(SSL *ssl, uint64_t *ret_n, uint64_t *ret_rate)
{
	char head[HEAD_MAX + 1];
	size_t len = 0;
	char *p, *q;

	while (!memmem(head, len, "\r\n\r\n", 4)) {
		int n;

		if (len == HEAD_MAX)
			return -1;
		n = SSL_read(ssl, head + len, (int)(HEAD_MAX - len));
		if (n <= 0)
			return -1;
		len += (size_t)n;
	}
	head[len] = '\0';
	if (strncmp(head, "GET /", 5) != 0)
		return -1;
	p = head + 5;
	*ret_n = strtoull(p, &q, 10);
	*ret_rate = 0;
	if (*q == '?' && strncmp(q, "?rate=", 6) == 0)
		*ret_rate = strtoull(q + 6, &q, 10);
	return 0;
}

static void *
tls_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	SSL *ssl = SSL_new(srv_ctx);
	uint64_t n, rate, sent = 0, t0;
	char hdr[256];
	int hl;

	if (!ssl || !SSL_set_fd(ssl, fd) || SSL_accept(ssl) <= 0 ||
	    tls_read_request(ssl, &n, &rate) < 0)
		goto out;
	hl = snprintf(hdr, sizeof(hdr),
	              "HTTP/1.1 200 OK\r\nContent-Length: %" PRIu64
	              "\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
	              n);
	if (SSL_write(ssl, hdr, hl) <= 0)
		goto out;
	t0 = now_ns();
	while (sent < n) {
		size_t k = n - sent < CHUNK ? (size_t)(n - sent) : CHUNK;

		if (rate) {
			/* one 16 KiB record at a time, at the pace asked for */
			uint64_t due = t0 + (uint64_t)((double)sent * 1e9 / (double)rate);
			uint64_t now = now_ns();

			if (k > 16384)
				k = 16384;
			if (due > now) {
				struct timespec ts = { .tv_sec =
					                       (time_t)((due - now) / 1000000000u),
					               .tv_nsec =
					                       (long)((due - now) % 1000000000u) };
				nanosleep(&ts, NULL);
			}
		}
		if (SSL_write(ssl, payload, (int)k) <= 0)
			goto out;
		sent += k;
	}
	SSL_shutdown(ssl);
out:
	SSL_free(ssl);
	close(fd);
	return NULL;
}

static void *
tls_listener(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	pthread_attr_t attr;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, THREAD_STACK);
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), one = 1;
		pthread_t t;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				usleep(10000);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (pthread_create(&t, &attr, tls_conn, (void *)(intptr_t)fd) != 0)
			close(fd);
	}
	return NULL;
}

struct hconn {
	int fd;
	bool listener;
	size_t len;
	char buf[2048];
};

static const char http_answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: "
                                  "text/plain\r\nConnection: close\r\n\r\nok";

/* One thread for every plain HTTP port: short connections, an answer each, closed by us. */
static void
http_loop(int *lfds, size_t n)
{
	struct epoll_event ev, evs[256];
	int ep = epoll_create1(EPOLL_CLOEXEC);

	for (size_t i = 0; i < n; i++) {
		struct hconn *l = calloc(1, sizeof(*l));

		l->fd = lfds[i];
		l->listener = true;
		fcntl(l->fd, F_SETFL, O_NONBLOCK);
		ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = l };
		epoll_ctl(ep, EPOLL_CTL_ADD, l->fd, &ev);
	}
	for (;;) {
		int k = epoll_wait(ep, evs, 256, -1);

		for (int i = 0; i < k; i++) {
			struct hconn *c = evs[i].data.ptr;

			if (c->listener) {
				for (;;) {
					int fd = accept4(c->fd, NULL, NULL,
					                 SOCK_CLOEXEC | SOCK_NONBLOCK);
					struct hconn *h;

					if (fd < 0)
						break;
					h = calloc(1, sizeof(*h));
					if (!h) {
						close(fd);
						continue;
					}
					h->fd = fd;
					ev = (struct epoll_event){ .events = EPOLLIN,
						                   .data.ptr = h };
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				}
				continue;
			}
			for (;;) {
				ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);

				if (r < 0 && errno == EAGAIN)
					break;
				if (r <= 0 || (c->len += (size_t)r) == sizeof(c->buf)) {
					c->len = 0; /* gone, or a head too long: drop */
					goto close;
				}
				if (memmem(c->buf, c->len, "\r\n\r\n", 4)) {
					/* the answer fits any socket buffer: one write */
					(void)!write(c->fd, http_answer, sizeof(http_answer) - 1);
					goto close;
				}
			}
			continue;
		close:
			close(c->fd); /* epoll forgets it */
			free(c);
		}
	}
}

static size_t
ports(char *list, int *fds, size_t max, const char *addr)
{
	char *save = NULL;
	size_t n = 0;

	for (char *s = strtok_r(list, ",", &save); s && n < max; s = strtok_r(NULL, ",", &save))
		fds[n++] = listen_on(addr, (unsigned)num_arg(s));
	return n;
}

static int
cmd_serve(int argc, char **argv)
{
	const char *addr = "0.0.0.0", *cert = NULL, *key = NULL;
	char *tls = NULL, *http = NULL;
	int tfds[8], hfds[8];
	size_t nt = 0, nh = 0;

	for (int i = 0; i < argc; i++) {
		if (i + 1 >= argc)
			die("serve: '%s' needs a value", argv[i]);
		if (!strcmp(argv[i], "--addr"))
			addr = argv[++i];
		else if (!strcmp(argv[i], "--tls"))
			tls = argv[++i];
		else if (!strcmp(argv[i], "--http"))
			http = argv[++i];
		else if (!strcmp(argv[i], "--cert"))
			cert = argv[++i];
		else if (!strcmp(argv[i], "--key"))
			key = argv[++i];
		else
			die("serve: unknown option '%s'", argv[i]);
	}
	signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 2654435761u >> 13);
	if (tls) {
		if (!cert || !key)
			die("serve: --tls needs --cert and --key");
		srv_ctx = SSL_CTX_new(TLS_server_method());
		if (!srv_ctx || SSL_CTX_use_certificate_chain_file(srv_ctx, cert) != 1 ||
		    SSL_CTX_use_PrivateKey_file(srv_ctx, key, SSL_FILETYPE_PEM) != 1)
			die("serve: cannot load %s / %s", cert, key);
		nt = ports(tls, tfds, 8, addr);
	}
	if (http)
		nh = ports(http, hfds, 8, addr);
	for (size_t i = 0; i < nt; i++) {
		pthread_t t;

		if (pthread_create(&t, NULL, tls_listener, (void *)(intptr_t)tfds[i]) != 0)
			die("serve: pthread_create failed");
	}
	printf("serving\n");
	fflush(stdout);
	if (nh)
		http_loop(hfds, nh);
	for (;;)
		pause();
	return 0;
}

/* ---- conns ---- */

struct cconn {
	int fd;
	size_t sent, got;
	uint64_t t0, t_first;
	char head[16];
	size_t head_len;
};

static int
cmd_conns(int argc, char **argv)
{
	struct sockaddr_in to;
	const char *target = NULL, *host = NULL;
	bool absolute = false;
	unsigned long n = 1000, c = 8, started = 0, done = 0, ok = 0, errors = 0;
	char req[512];
	int rl, ep;
	uint32_t *ttfb, *total;
	struct cconn *cs;
	uint64_t t_start, t_end;
	double cpu0;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--absolute")) {
			absolute = true;
			continue;
		}
		if (i + 1 >= argc)
			die("conns: '%s' needs a value", argv[i]);
		if (!strcmp(argv[i], "--to"))
			target = argv[++i];
		else if (!strcmp(argv[i], "--host"))
			host = argv[++i];
		else if (!strcmp(argv[i], "-n"))
			n = num_arg(argv[++i]);
		else if (!strcmp(argv[i], "-c"))
			c = num_arg(argv[++i]);
		else
			die("conns: unknown option '%s'", argv[i]);
	}
	if (!target || !host || n == 0 || c == 0)
		die("conns: --to ADDR:PORT --host NAME [-n N] [-c C] [--absolute]");
	parse_addr(target, &to);
	if (c > n)
		c = n;
	rl = snprintf(req, sizeof(req),
	              "GET %s%s/ HTTP/1.1\r\nHost: %s\r\nUser-Agent: egbench\r\n\r\n",
	              absolute ? "http://" : "", absolute ? host : "", host);
	ttfb = calloc(n, sizeof(*ttfb));
	total = calloc(n, sizeof(*total));
	cs = calloc(c, sizeof(*cs));
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (!ttfb || !total || !cs || ep < 0)
		die("conns: out of memory");
	cpu0 = cpu_ms_self();
	t_start = now_ns();

	/* slot i's connection: opened, then driven by epoll until the server closes */
	for (unsigned long i = 0; i < c; i++)
		cs[i].fd = -1;
	for (;;) {
		struct epoll_event evs[64];
		int k;

		for (unsigned long i = 0; i < c && started < n; i++) {
			struct cconn *s = &cs[i];
			struct epoll_event ev = { .events = EPOLLOUT | EPOLLIN, .data.u64 = i };

			if (s->fd >= 0)
				continue;
			*s = (struct cconn){ .fd = -1 };
			s->t0 = now_ns();
			s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			if (s->fd < 0)
				die("conns: socket: %s", strerror(errno));
			if (connect(s->fd, (struct sockaddr *)&to, sizeof(to)) < 0 &&
			    errno != EINPROGRESS)
				die("conns: connect: %s", strerror(errno));
			epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
			started++;
		}
		if (done == n)
			break;
		k = epoll_wait(ep, evs, 64, 10000);
		if (k == 0)
			die("conns: nothing moved for 10 s (%lu of %lu done)", done, n);
		for (int j = 0; j < k; j++) {
			struct cconn *s = &cs[evs[j].data.u64];
			bool fail = false, end = false;

			if (s->fd < 0)
				continue;
			if (s->sent < (size_t)rl && (evs[j].events & (EPOLLOUT | EPOLLERR))) {
				ssize_t w = send(s->fd, req + s->sent, (size_t)rl - s->sent,
				                 MSG_NOSIGNAL);

				if (w < 0 && errno != EAGAIN)
					fail = true;
				else if (w > 0 && (s->sent += (size_t)w) == (size_t)rl) {
					struct epoll_event ev = { .events = EPOLLIN,
						                  .data.u64 = evs[j].data.u64 };

					epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev);
				}
			}
			while (!fail && !end && (evs[j].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
				char b[4096];
				ssize_t r = read(s->fd, b, sizeof(b));

				if (r < 0 && errno == EAGAIN)
					break;
				if (r < 0) {
					fail = true;
					break;
				}
				if (r == 0) {
					end = true;
					break;
				}
				if (s->got == 0)
					s->t_first = now_ns();
				if (s->head_len < sizeof(s->head)) {
					size_t m = sizeof(s->head) - s->head_len;

					m = (size_t)r < m ? (size_t)r : m;
					memcpy(s->head + s->head_len, b, m);
					s->head_len += m;
				}
				s->got += (size_t)r;
			}
			if (!fail && !end)
				continue;
			if (end && s->head_len >= 12 && !memcmp(s->head, "HTTP/1.", 7) &&
			    !memcmp(s->head + 8, " 200", 4)) {
				ttfb[ok] = (uint32_t)((s->t_first - s->t0) / 1000);
				total[ok] = (uint32_t)((now_ns() - s->t0) / 1000);
				ok++;
			} else
				errors++;
			close(s->fd);
			s->fd = -1;
			done++;
		}
	}
	t_end = now_ns();
	qsort(ttfb, ok, sizeof(*ttfb), cmp_u32);
	qsort(total, ok, sizeof(*total), cmp_u32);
	printf("n=%lu c=%lu ok=%lu errors=%lu elapsed_ms=%.1f rate=%.0f ttfb_p50_us=%u "
	       "ttfb_p90_us=%u ttfb_p99_us=%u total_p50_us=%u client_cpu_ms=%.0f\n",
	       n, c, ok, errors, (double)(t_end - t_start) / 1e6,
	       (double)ok * 1e9 / (double)(t_end - t_start), pct(ttfb, ok, 0.5), pct(ttfb, ok, 0.9),
	       pct(ttfb, ok, 0.99), pct(total, ok, 0.5), cpu_ms_self() - cpu0);
	return errors ? 1 : 0;
}

/* ---- hold ---- */

struct hold {
	struct sockaddr_in to;
	bool via_proxy;
	const char *sni, *path;
	SSL_CTX *ctx;
	unsigned long n;
	atomic_ulong ready, failed, finished;
	atomic_ullong bytes;
	/* every download asks only once all are connected, so that all of them are in flight
	 * together for as long as the pace makes each one last */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned long arrived;
};

static struct hold H = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void
hold_arrive(bool failed)
{
	pthread_mutex_lock(&H.lock);
	if (failed)
		atomic_fetch_add(&H.failed, 1);
	else
		H.arrived++;
	pthread_cond_broadcast(&H.cond);
	while (!failed && H.arrived + atomic_load(&H.failed) < H.n)
		pthread_cond_wait(&H.cond, &H.lock);
	pthread_mutex_unlock(&H.lock);
}

static int
connect_via(int fd)
{
	char req[512], resp[HEAD_MAX];
	size_t len = 0;
	int rl;

	if (connect(fd, (struct sockaddr *)&H.to, sizeof(H.to)) < 0)
		return -1;
	if (!H.via_proxy)
		return 0;
	rl = snprintf(req, sizeof(req), "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", H.sni,
	              H.sni);
	if (write(fd, req, (size_t)rl) != rl)
		return -1;
	/* byte by byte: nothing of the tunnel's own bytes may be read here */
	while (len < sizeof(resp) && !(len >= 4 && !memcmp(resp + len - 4, "\r\n\r\n", 4))) {
		if (read(fd, resp + len, 1) != 1)
			return -1;
		len++;
	}
	return len >= 12 && !memcmp(resp + 8, " 200", 4) ? 0 : -1;
}

static void *
hold_conn(void *arg)
{
	char buf[CHUNK], req[512];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rl, r;
	SSL *ssl = NULL;
	bool first = true, arrived = false;

	(void)arg;
	if (fd < 0 || connect_via(fd) < 0)
		goto fail;
	ssl = SSL_new(H.ctx);
	if (!ssl || !SSL_set_fd(ssl, fd) || !SSL_set_tlsext_host_name(ssl, H.sni) ||
	    SSL_connect(ssl) <= 0)
		goto fail;
	hold_arrive(false);
	arrived = true;
	rl = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", H.path, H.sni);
	if (SSL_write(ssl, req, rl) <= 0)
		goto fail;
	while ((r = SSL_read(ssl, buf, sizeof(buf))) > 0) {
		if (first) {
			first = false;
			atomic_fetch_add(&H.ready, 1);
		}
		atomic_fetch_add(&H.bytes, (unsigned long long)r);
	}
	if (first)
		goto fail;
	atomic_fetch_add(&H.finished, 1);
	SSL_free(ssl);
	close(fd);
	return NULL;
fail:
	if (arrived)
		atomic_fetch_add(&H.failed, 1);
	else
		hold_arrive(true);
	SSL_free(ssl);
	if (fd >= 0)
		close(fd);
	return NULL;
}

static int
cmd_hold(int argc, char **argv)
{
	const char *target = NULL, *proxy = NULL;
	unsigned long n = 50;
	pthread_attr_t attr;
	pthread_t *ts;
	bool said = false;

	for (int i = 0; i < argc; i++) {
		if (i + 1 >= argc)
			die("hold: '%s' needs a value", argv[i]);
		if (!strcmp(argv[i], "--to"))
			target = argv[++i];
		else if (!strcmp(argv[i], "--proxy"))
			proxy = argv[++i];
		else if (!strcmp(argv[i], "--sni"))
			H.sni = argv[++i];
		else if (!strcmp(argv[i], "--path"))
			H.path = argv[++i];
		else if (!strcmp(argv[i], "-n"))
			n = num_arg(argv[++i]);
		else
			die("hold: unknown option '%s'", argv[i]);
	}
	if (!(target || proxy) || !H.sni || !H.path || n == 0)
		die("hold: --to ADDR:PORT|--proxy ADDR:PORT --sni NAME --path P [-n N]");
	parse_addr(proxy ? proxy : target, &H.to);
	H.n = n;
	H.via_proxy = proxy != NULL;
	signal(SIGPIPE, SIG_IGN);
	H.ctx = SSL_CTX_new(TLS_client_method());
	if (!H.ctx)
		die("hold: SSL_CTX_new failed");
	SSL_CTX_set_verify(H.ctx, SSL_VERIFY_NONE, NULL);
	ts = calloc(n, sizeof(*ts));
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, THREAD_STACK);
	for (unsigned long i = 0; i < n; i++)
		if (pthread_create(&ts[i], &attr, hold_conn, NULL) != 0)
			die("hold: pthread_create: thread %lu", i);
	for (;;) {
		unsigned long r = atomic_load(&H.ready), f = atomic_load(&H.failed),
		              d = atomic_load(&H.finished);

		if (!said && r + f >= n) {
			printf("ready n=%lu ok=%lu failed=%lu\n", n, r, f);
			fflush(stdout);
			said = true;
		}
		if (d + f >= n)
			break;
		usleep(10000);
	}
	for (unsigned long i = 0; i < n; i++)
		pthread_join(ts[i], NULL);
	printf("done n=%lu finished=%lu failed=%lu bytes=%llu\n", n,
	       (unsigned long)atomic_load(&H.finished), (unsigned long)atomic_load(&H.failed),
	       (unsigned long long)atomic_load(&H.bytes));
	return atomic_load(&H.failed) ? 1 : 0;
}

/* ---- drive ---- */

static volatile sig_atomic_t stop;

static void
on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int
cmd_drive(int argc, char **argv)
{
	const char *worker = NULL, *uid = NULL, *gid = NULL, *guest = NULL, *host = NULL;
	const char *allow = NULL, *pidfile = NULL, *logpath = NULL;
	const char *proxy_listen = "0.0.0.0:3128", *dns_listen = "0.0.0.0:7353";
	unsigned long allowed = 0, denied = 0, dropped = 0, lines = 0;
	char line[65536], fdarg[16], set[1024];
	size_t len = 0;
	int sv[2], st;
	bool ready = false;
	FILE *log = NULL;
	pid_t pid;
	struct sigaction sa = { .sa_handler = on_term };

	for (int i = 0; i < argc; i++) {
		if (i + 1 >= argc)
			die("drive: '%s' needs a value", argv[i]);
		if (!strcmp(argv[i], "--worker"))
			worker = argv[++i];
		else if (!strcmp(argv[i], "--uid"))
			uid = argv[++i];
		else if (!strcmp(argv[i], "--gid"))
			gid = argv[++i];
		else if (!strcmp(argv[i], "--guest"))
			guest = argv[++i];
		else if (!strcmp(argv[i], "--host"))
			host = argv[++i];
		else if (!strcmp(argv[i], "--allow"))
			allow = argv[++i];
		else if (!strcmp(argv[i], "--pidfile"))
			pidfile = argv[++i];
		else if (!strcmp(argv[i], "--log"))
			logpath = argv[++i];
		else if (!strcmp(argv[i], "--proxy-listen"))
			proxy_listen = argv[++i];
		else if (!strcmp(argv[i], "--dns-listen"))
			dns_listen = argv[++i];
		else
			die("drive: unknown option '%s'", argv[i]);
	}
	if (!worker || !uid || !gid || !guest || !host || !allow || !pidfile)
		die("drive: --worker --uid --gid --guest --host --allow --pidfile are needed");
	if (logpath && !(log = fopen(logpath, "we")))
		die("drive: %s: %s", logpath, strerror(errno));
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* the worker's end is inherited (no CLOEXEC); ours is not */
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		die("drive: socketpair: %s", strerror(errno));
	fcntl(sv[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
	pid = fork();
	if (pid < 0)
		die("drive: fork: %s", strerror(errno));
	if (pid == 0) {
		execl(worker, worker, "egress-worker", "--control-fd", fdarg, "--proxy-listen",
		      proxy_listen, "--dns-listen", dns_listen, "--uid", uid, "--gid", gid,
		      (char *)NULL);
		fprintf(stderr, "egbench: drive: exec %s: %s\n", worker, strerror(errno));
		_exit(127);
	}
	close(sv[1]);
	snprintf(set, sizeof(set),
	         "{\"op\":\"set\",\"id\":\"sbx-bench\",\"guest\":\"%s\",\"host\":\"%s\","
	         "\"network\":{\"mode\":\"allowlist\",\"allow\":[\"%s\"],\"deny\":[]}}\n",
	         guest, host, allow);
	while (!stop) {
		struct pollfd pf = { .fd = sv[0], .events = POLLIN };
		ssize_t r;
		char *nl;

		if (poll(&pf, 1, -1) < 0)
			continue;
		r = read(sv[0], line + len, sizeof(line) - 1 - len);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			fprintf(stderr, "egbench: drive: the worker closed the control channel\n");
			break;
		}
		len += (size_t)r;
		line[len] = '\0';
		while ((nl = memchr(line, '\n', len))) {
			size_t l = (size_t)(nl - line) + 1;

			*nl = '\0';
			lines++;
			if (log)
				fprintf(log, "%s\n", line);
			if (strstr(line, "\"op\":\"ready\"") && !ready) {
				FILE *pf2;

				ready = true;
				if (write(sv[0], set, strlen(set)) != (ssize_t)strlen(set))
					die("drive: cannot send the set line");
				/* after the set line: a connection from now on is decided */
				usleep(100000);
				pf2 = fopen(pidfile, "we");
				if (!pf2)
					die("drive: %s: %s", pidfile, strerror(errno));
				fprintf(pf2, "%d\n", (int)pid);
				fclose(pf2);
			} else if (strstr(line, "\"verdict\":\"allowed\""))
				allowed++;
			else if (strstr(line, "\"verdict\":\"denied\""))
				denied++;
			else if (strstr(line, "\"op\":\"dropped\""))
				dropped += strtoul(strstr(line, "\"count\":") + 8, NULL, 10);
			memmove(line, line + l, len - l);
			len -= l;
		}
		if (len == sizeof(line) - 1)
			len = 0;
	}
	close(sv[0]);
	for (int i = 0; i < 50 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(100000);
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	if (log)
		fclose(log);
	fprintf(stderr, "egbench: drive: lines=%lu allowed=%lu denied=%lu dropped=%lu\n", lines,
	        allowed, denied, dropped);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc < 2)
		die("usage: egbench serve|conns|hold|drive ...");
	if (!strcmp(argv[1], "serve"))
		return cmd_serve(argc - 2, argv + 2);
	if (!strcmp(argv[1], "conns"))
		return cmd_conns(argc - 2, argv + 2);
	if (!strcmp(argv[1], "hold"))
		return cmd_hold(argc - 2, argv + 2);
	if (!strcmp(argv[1], "drive"))
		return cmd_drive(argc - 2, argv + 2);
	die("unknown verb '%s'", argv[1]);
}
