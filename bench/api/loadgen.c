/* loadgen.c: the closed-loop HTTP/1.1 load generator of bench/api/run.sh: N keep-alive
 * connections (unix, TCP or TLS), one request in flight on each; prints req/s, latency and the
 * server's CPU time per request. Standalone: includes nothing from the project. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define HEADERS_MAX 8
#define HEAD_MAX 8192
#define READ_BUF (256u << 10)
#define REQUEST_MAX 4096
#define ERRORS_MAX 1000 /* give up when this many fail and nothing succeeds */

enum transport {
	T_UNIX,
	T_TCP,
	T_TLS,
};

enum phase {
	P_CONNECTING,
	P_HANDSHAKE,
	P_SENDING,
	P_HEAD,
	P_BODY,
};

struct conn {
	int fd;
	SSL *ssl;
	enum phase phase;
	uint32_t events; /* what epoll waits for now */
	size_t sent;
	char head[HEAD_MAX];
	size_t head_len;
	uint64_t body_left;
	uint64_t body_len;
	int status;
	bool close_after;
	uint64_t started_ns;
};

struct opts {
	enum transport transport;
	const char *target;
	char host[256];
	char port[16];
	char path[108]; /* sun_path */
	unsigned conns;
	double duration_s, warmup_s;
	const char *url_path;
	const char *headers[HEADERS_MAX];
	unsigned n_headers;
	long long expect_body; /* -1: any */
	long server_pid;       /* 0: none */
};

struct stats {
	uint64_t requests, errors, non2xx, bad_length, reconnects, body_bytes;
	uint32_t *lat_us;
	size_t n_lat, cap_lat;
	uint64_t lat_sum_us;
};

static struct opts o = {
	.conns = 50,
	.duration_s = 5,
	.warmup_s = 1,
	.url_path = "/v1/sandboxes",
	.expect_body = -1,
};
static struct stats st;
static struct addrinfo *tcp_addr;
static SSL_CTX *tls_ctx;
static char request[REQUEST_MAX];
static size_t request_len;
static int epfd = -1;
static uint64_t measure_from_ns, measure_to_ns;

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void
die(const char *what)
{
	fprintf(stderr, "loadgen: %s\n", what);
	exit(1);
}

static void
usage(void)
{
	fprintf(stderr,
	        "usage: loadgen [-c CONNS] [-d SECONDS] [-w WARMUP] [-p PATH] [-H 'Name: "
	        "value']...\n"
	        "               [-b BODY_BYTES] [-P SERVER_PID] "
	        "unix:PATH|tcp:HOST:PORT|tls:HOST:PORT\n"
	        "\n"
	        "  -c  connections, one request in flight on each (default 50)\n"
	        "  -d  seconds measured (default 5), after -w seconds of warm-up (default 1)\n"
	        "  -p  request path (default /v1/sandboxes); Host is always 'localhost'\n"
	        "  -H  an extra request header (at most %d)\n"
	        "  -b  the body length every response must have (else it counts as bad)\n"
	        "  -P  a server pid whose CPU time over the measured seconds is reported\n",
	        HEADERS_MAX);
	exit(2);
}

static double
parse_double(const char *s, const char *what)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || v < 0)
		die(what);
	return v;
}

static long long
parse_ll(const char *s, long long min, long long max, const char *what)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		die(what);
	return v;
}

static void
parse_target(const char *t)
{
	const char *rest, *colon;
	size_t n;

	if (strncmp(t, "unix:", 5) == 0) {
		o.transport = T_UNIX;
		if (strlen(t + 5) == 0 || strlen(t + 5) >= sizeof(o.path))
			die("unix: the socket path is empty or too long");
		snprintf(o.path, sizeof(o.path), "%s", t + 5);
		return;
	}
	if (strncmp(t, "tcp:", 4) == 0) {
		o.transport = T_TCP;
		rest = t + 4;
	} else if (strncmp(t, "tls:", 4) == 0) {
		o.transport = T_TLS;
		rest = t + 4;
	} else {
		usage();
	}
	colon = strrchr(rest, ':');
	if (!colon || colon == rest || !colon[1])
		die("the target needs HOST:PORT");
	n = (size_t)(colon - rest);
	if (n >= sizeof(o.host) || strlen(colon + 1) >= sizeof(o.port))
		die("the target's host or port is too long");
	snprintf(o.host, sizeof(o.host), "%.*s", (int)n, rest);
	snprintf(o.port, sizeof(o.port), "%s", colon + 1);
}

static void
build_request(void)
{
	int n = snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: localhost\r\n",
	                 o.url_path);

	for (unsigned i = 0; i < o.n_headers && n > 0 && (size_t)n < sizeof(request); i++)
		n += snprintf(request + n, sizeof(request) - (size_t)n, "%s\r\n", o.headers[i]);
	if (n > 0 && (size_t)n < sizeof(request))
		n += snprintf(request + n, sizeof(request) - (size_t)n, "\r\n");
	if (n <= 0 || (size_t)n >= sizeof(request))
		die("the request does not fit in 4 KiB");
	request_len = (size_t)n;
}

static void
set_events(struct conn *c, uint32_t ev)
{
	struct epoll_event e = { .events = ev, .data.ptr = c };

	if (c->events == ev)
		return;
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &e) < 0)
		die("epoll_ctl(MOD) failed");
	c->events = ev;
}

static void
conn_reset(struct conn *c)
{
	if (c->ssl) {
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

static void
conn_open(struct conn *c)
{
	struct epoll_event e = { .events = EPOLLOUT, .data.ptr = c };
	int r;

	c->phase = P_CONNECTING;
	c->head_len = 0;
	if (o.transport == T_UNIX) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		memcpy(sa.sun_path, o.path, strlen(o.path));
		c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			die("socket() failed");
		r = connect(c->fd, (struct sockaddr *)&sa, sizeof(sa));
	} else {
		int one = 1;
		c->fd = socket(tcp_addr->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			die("socket() failed");
		(void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		r = connect(c->fd, tcp_addr->ai_addr, tcp_addr->ai_addrlen);
	}
	if (r < 0 && errno != EINPROGRESS && errno != EAGAIN) {
		fprintf(stderr, "loadgen: connect to '%s' failed: %s\n", o.target, strerror(errno));
		exit(1);
	}
	c->events = EPOLLOUT;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &e) < 0)
		die("epoll_ctl(ADD) failed");
}

static void
conn_fail(struct conn *c)
{
	st.errors++;
	if (st.errors >= ERRORS_MAX && st.requests == 0) {
		fprintf(stderr, "loadgen: %" PRIu64 " failures and no response from '%s'\n",
		        st.errors, o.target);
		exit(1);
	}
	conn_reset(c);
	conn_open(c);
}

static void
start_request(struct conn *c)
{
	c->phase = P_SENDING;
	c->sent = 0;
	c->head_len = 0;
	c->started_ns = now_ns();
	set_events(c, EPOLLOUT);
}

static void
record_latency(uint64_t ns)
{
	uint64_t us = ns / 1000;

	if (st.n_lat == st.cap_lat) {
		size_t cap = st.cap_lat ? st.cap_lat * 2 : 65536;
		uint32_t *p = realloc(st.lat_us, cap * sizeof(*p));
		if (!p)
			die("out of memory");
		st.lat_us = p;
		st.cap_lat = cap;
	}
	st.lat_us[st.n_lat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	st.lat_sum_us += us;
}

static void
response_done(struct conn *c)
{
	uint64_t t = now_ns();

	if (t >= measure_from_ns && t < measure_to_ns) {
		st.requests++;
		st.body_bytes += c->body_len;
		if (c->status < 200 || c->status > 299)
			st.non2xx++;
		if (o.expect_body >= 0 && c->body_len != (uint64_t)o.expect_body)
			st.bad_length++;
		record_latency(t - c->started_ns);
	}
	if (c->close_after) {
		st.reconnects++;
		conn_reset(c);
		conn_open(c);
		return;
	}
	start_request(c);
}

/* Parses the head in c->head (complete, ending in an empty line). 0, or -1 if unusable. */
static int
parse_head(struct conn *c)
{
	char *line, *end, *v;
	long long len = -1;

	c->head[c->head_len] = '\0';
	if (strncmp(c->head, "HTTP/1.", 7) != 0 || c->head_len < 12)
		return -1;
	c->status = (int)strtol(c->head + 9, NULL, 10);
	c->close_after = strncmp(c->head, "HTTP/1.0", 8) == 0;
	line = strstr(c->head, "\r\n");
	while (line && line[2] != '\r') {
		line += 2;
		end = strstr(line, "\r\n");
		if (!end)
			return -1;
		v = memchr(line, ':', (size_t)(end - line));
		if (v) {
			size_t name_len = (size_t)(v - line);
			v++;
			while (*v == ' ' || *v == '\t')
				v++;
			if (name_len == 14 && strncasecmp(line, "content-length", 14) == 0) {
				char *num_end;
				errno = 0;
				len = strtoll(v, &num_end, 10);
				if (errno || num_end == v || len < 0)
					return -1;
			} else if (name_len == 10 && strncasecmp(line, "connection", 10) == 0) {
				if (strncasecmp(v, "close", 5) == 0)
					c->close_after = true;
				else if (strncasecmp(v, "keep-alive", 10) == 0)
					c->close_after = false;
			} else if (name_len == 17 &&
			           strncasecmp(line, "transfer-encoding", 17) == 0) {
				return -1; /* chunked answers are not what this measures */
			}
		}
		line = end;
	}
	if (len < 0)
		return -1;
	c->body_len = c->body_left = (uint64_t)len;
	return 0;
}

/* Feeds received bytes to the response parser. 0, or -1 on a protocol error. */
static int
feed(struct conn *c, const char *p, size_t n)
{
	while (n > 0) {
		if (c->phase == P_HEAD) {
			size_t from = c->head_len >= 3 ? c->head_len - 3 : 0;
			size_t take = HEAD_MAX - 1 - c->head_len;
			char *eoh;

			if (take == 0)
				return -1;
			if (take > n)
				take = n;
			memcpy(c->head + c->head_len, p, take);
			c->head_len += take;
			c->head[c->head_len] = '\0';
			eoh = memmem(c->head + from, c->head_len - from, "\r\n\r\n", 4);
			if (!eoh) {
				p += take;
				n -= take;
				continue;
			}
			/* bytes copied past the head belong to the body */
			size_t head_end = (size_t)(eoh - c->head) + 4;
			size_t extra = c->head_len - head_end;
			p += take - extra;
			n -= take - extra;
			c->head_len = head_end;
			if (parse_head(c) < 0)
				return -1;
			c->phase = P_BODY;
			if (c->body_left == 0) {
				if (n > 0)
					return -1; /* nothing is pipelined: extra bytes are wrong */
				response_done(c);
				return 0;
			}
			continue;
		}
		if (c->phase != P_BODY)
			return -1;
		size_t k = n < c->body_left ? n : (size_t)c->body_left;
		c->body_left -= k;
		p += k;
		n -= k;
		if (c->body_left == 0) {
			if (n > 0)
				return -1;
			response_done(c);
			return 0;
		}
	}
	return 0;
}

/* The TLS error of an I/O call, folded into what the loop does next: 0 retry on
 * events, -1 fail the connection. */
static int
tls_retry(struct conn *c, int k)
{
	switch (SSL_get_error(c->ssl, k)) {
	case SSL_ERROR_WANT_READ:
		set_events(c, EPOLLIN);
		return 0;
	case SSL_ERROR_WANT_WRITE:
		set_events(c, EPOLLOUT);
		return 0;
	default:
		ERR_clear_error();
		return -1;
	}
}

static void
on_connected(struct conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
		conn_fail(c);
		return;
	}
	if (o.transport != T_TLS) {
		start_request(c);
		return;
	}
	c->ssl = SSL_new(tls_ctx);
	if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1)
		die("SSL_new failed");
	SSL_set_tlsext_host_name(c->ssl, "localhost");
	SSL_set_connect_state(c->ssl);
	c->phase = P_HANDSHAKE;
}

static void
do_handshake(struct conn *c)
{
	int k = SSL_do_handshake(c->ssl);

	if (k == 1) {
		start_request(c);
		return;
	}
	if (tls_retry(c, k) < 0)
		conn_fail(c);
}

static void
do_send(struct conn *c)
{
	while (c->sent < request_len) {
		const char *p = request + c->sent;
		size_t n = request_len - c->sent;
		ssize_t k;

		if (c->ssl) {
			int r = SSL_write(c->ssl, p, (int)n);
			if (r <= 0) {
				if (tls_retry(c, r) < 0)
					conn_fail(c);
				return;
			}
			k = r;
		} else {
			k = send(c->fd, p, n, MSG_NOSIGNAL);
			if (k < 0) {
				if (errno == EAGAIN || errno == EINTR)
					return;
				conn_fail(c);
				return;
			}
		}
		c->sent += (size_t)k;
	}
	c->phase = P_HEAD;
	set_events(c, EPOLLIN);
}

static void
do_recv(struct conn *c)
{
	static char buf[READ_BUF];

	for (;;) {
		ssize_t k;

		if (c->ssl) {
			int r = SSL_read(c->ssl, buf, sizeof(buf));
			if (r <= 0) {
				if (tls_retry(c, r) < 0)
					conn_fail(c);
				return;
			}
			k = r;
		} else {
			k = read(c->fd, buf, sizeof(buf));
			if (k < 0 && (errno == EAGAIN || errno == EINTR))
				return;
			if (k <= 0) {
				conn_fail(c);
				return;
			}
		}
		if (c->phase != P_HEAD && c->phase != P_BODY) {
			conn_fail(c); /* bytes nobody asked for */
			return;
		}
		if (feed(c, buf, (size_t)k) < 0) {
			conn_fail(c);
			return;
		}
		if (c->phase == P_SENDING || c->phase == P_CONNECTING) {
			if (c->phase == P_SENDING)
				do_send(c);
			return;
		}
	}
}

static void
on_event(struct conn *c, uint32_t ev)
{
	switch (c->phase) {
	case P_CONNECTING:
		if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			break; /* a stale event of the socket this one replaced */
		on_connected(c);
		if (c->phase == P_HANDSHAKE)
			do_handshake(c);
		else if (c->phase == P_SENDING)
			do_send(c);
		break;
	case P_HANDSHAKE:
		do_handshake(c);
		if (c->phase == P_SENDING)
			do_send(c);
		break;
	case P_SENDING:
		do_send(c);
		break;
	case P_HEAD:
	case P_BODY:
		do_recv(c);
		break;
	}
}

/* utime + stime of a process in microseconds, or -1. */
static long long
process_cpu_us(long pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, stime;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
	                 &stime) != 2)
		return -1;
	return (long long)((ut + stime) * 1000000ull / (unsigned long long)sysconf(_SC_CLK_TCK));
}

/* The whole machine's busy and stolen CPU time in microseconds, from /proc/stat; 0 if
 * unreadable. What is neither this process nor the server is other work: noise. */
static void
machine_cpu_us(long long *ret_busy, long long *ret_steal)
{
	unsigned long long v[8] = { 0 };
	long long hz = sysconf(_SC_CLK_TCK);
	FILE *f = fopen("/proc/stat", "re");

	*ret_busy = *ret_steal = 0;
	if (!f)
		return;
	/* user nice system idle iowait irq softirq steal */
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
	           &v[4], &v[5], &v[6], &v[7]) == 8 &&
	    hz > 0) {
		*ret_busy = (long long)((v[0] + v[1] + v[2] + v[5] + v[6]) * 1000000ull /
		                        (unsigned long long)hz);
		*ret_steal = (long long)(v[7] * 1000000ull / (unsigned long long)hz);
	}
	fclose(f);
}

static long long
self_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
	       ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static uint32_t
percentile(double q)
{
	size_t i;

	if (st.n_lat == 0)
		return 0;
	i = (size_t)(q * (double)(st.n_lat - 1) + 0.5);
	return st.lat_us[i];
}

int
main(int argc, char **argv)
{
	struct conn *conns;
	struct epoll_event evs[256];
	long long srv0 = -1, srv1 = -1, self0 = 0, self1;
	long long busy0 = 0, busy1, steal0 = 0, steal1;
	bool measuring = false;
	double secs;
	int opt;

	while ((opt = getopt(argc, argv, "c:d:w:p:H:b:P:h")) != -1) {
		switch (opt) {
		case 'c':
			o.conns = (unsigned)parse_ll(optarg, 1, 10000, "-c: 1 to 10000");
			break;
		case 'd':
			o.duration_s = parse_double(optarg, "-d: seconds, > 0");
			break;
		case 'w':
			o.warmup_s = parse_double(optarg, "-w: seconds, >= 0");
			break;
		case 'p':
			if (optarg[0] != '/')
				die("-p: the path starts with '/'");
			o.url_path = optarg;
			break;
		case 'H':
			if (o.n_headers == HEADERS_MAX || !strchr(optarg, ':'))
				die("-H: 'Name: value', at most 8 of them");
			o.headers[o.n_headers++] = optarg;
			break;
		case 'b':
			o.expect_body = parse_ll(optarg, 0, LLONG_MAX, "-b: a byte count");
			break;
		case 'P':
			o.server_pid = (long)parse_ll(optarg, 1, INT_MAX, "-P: a pid");
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1 || o.duration_s <= 0)
		usage();
	o.target = argv[optind];
	parse_target(o.target);
	build_request();
	signal(SIGPIPE, SIG_IGN);

	if (o.transport != T_UNIX) {
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
		int r = getaddrinfo(o.host, o.port, &hints, &tcp_addr);
		if (r != 0) {
			fprintf(stderr, "loadgen: '%s': %s\n", o.target, gai_strerror(r));
			return 1;
		}
	}
	if (o.transport == T_TLS) {
		/* a benchmark against a self-signed certificate: no verification */
		tls_ctx = SSL_CTX_new(TLS_client_method());
		if (!tls_ctx)
			die("SSL_CTX_new failed");
		SSL_CTX_set_verify(tls_ctx, SSL_VERIFY_NONE, NULL);
	}
	epfd = epoll_create1(EPOLL_CLOEXEC);
	conns = calloc(o.conns, sizeof(*conns));
	if (epfd < 0 || !conns)
		die("out of memory");

	uint64_t t0 = now_ns();
	measure_from_ns = t0 + (uint64_t)(o.warmup_s * 1e9);
	measure_to_ns = measure_from_ns + (uint64_t)(o.duration_s * 1e9);
	for (unsigned i = 0; i < o.conns; i++) {
		conns[i].fd = -1;
		conn_open(&conns[i]);
	}
	for (;;) {
		uint64_t t = now_ns();
		int n, timeout_ms;

		if (!measuring && t >= measure_from_ns) {
			measuring = true;
			self0 = self_cpu_us();
			machine_cpu_us(&busy0, &steal0);
			if (o.server_pid)
				srv0 = process_cpu_us(o.server_pid);
		}
		if (t >= measure_to_ns)
			break;
		timeout_ms = (int)((measure_to_ns - t) / 1000000) + 1;
		if (!measuring && (measure_from_ns - t) / 1000000 + 1 < (uint64_t)timeout_ms)
			timeout_ms = (int)((measure_from_ns - t) / 1000000) + 1;
		n = epoll_wait(epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), timeout_ms);
		if (n < 0 && errno != EINTR)
			die("epoll_wait failed");
		for (int i = 0; i < n; i++)
			on_event(evs[i].data.ptr, evs[i].events);
	}
	self1 = self_cpu_us();
	machine_cpu_us(&busy1, &steal1);
	if (o.server_pid)
		srv1 = process_cpu_us(o.server_pid);
	secs = o.duration_s;
	qsort(st.lat_us, st.n_lat, sizeof(*st.lat_us), cmp_u32);
	printf("rps=%.0f requests=%" PRIu64 " seconds=%.2f mean_us=%.0f p50_us=%" PRIu32
	       " p99_us=%" PRIu32 " max_us=%" PRIu32 " body_bytes=%.0f errors=%" PRIu64
	       " non2xx=%" PRIu64 " bad_length=%" PRIu64 " reconnects=%" PRIu64
	       " client_cpu_us_per_req=%.1f",
	       (double)st.requests / secs, st.requests, secs,
	       st.n_lat ? (double)st.lat_sum_us / (double)st.n_lat : 0.0, percentile(0.50),
	       percentile(0.99), percentile(1.0),
	       st.requests ? (double)st.body_bytes / (double)st.requests : 0.0, st.errors,
	       st.non2xx, st.bad_length, st.reconnects,
	       st.requests ? (double)(self1 - self0) / (double)st.requests : 0.0);
	if (o.server_pid && srv0 >= 0 && srv1 >= 0)
		printf(" server_cpu_us_per_req=%.1f server_cpu_share=%.2f",
		       st.requests ? (double)(srv1 - srv0) / (double)st.requests : 0.0,
		       (double)(srv1 - srv0) / (secs * 1e6));
	/* in CPUs, averaged over the measured seconds; tick-based, so +-0.01 or so */
	printf(" other_cpu_share=%.2f steal_share=%.2f",
	       (double)((busy1 - busy0) - (self1 - self0) - (srv0 >= 0 ? srv1 - srv0 : 0)) /
	               (secs * 1e6),
	       (double)(steal1 - steal0) / (secs * 1e6));
	printf("\n");
	for (unsigned i = 0; i < o.conns; i++)
		conn_reset(&conns[i]);
	free(conns);
	free(st.lat_us);
	if (tcp_addr)
		freeaddrinfo(tcp_addr);
	SSL_CTX_free(tls_ctx);
	close(epfd);
	return 0;
}
