/* tunbench.c: the client and the server of bench/tunnel/run.sh (built with cc; a static build of
 * the same file can run as the server inside a guest). Standalone: libc only.
 *
 *   tunbench serve PORT
 *       Listens on 127.0.0.1:PORT, one forked child per connection. A connection starts with
 *       8 bytes (host order): N. N = UINT64_MAX: echo every byte back until EOF. Otherwise it
 *       sends N bytes while reading until the client's EOF, then 8 bytes (the count it read)
 *       and closes: that count arrives only once every byte of both ways was delivered.
 *
 *   tunbench client TARGET OP ARG [-P PID]...
 *       TARGET: tcp:HOST:PORT (the server directly, or a port-forward's local port),
 *       unix:SOCKET:SANDBOX:GUESTPORT or http:HOST:PORT:SANDBOX:GUESTPORT (GET …/tunnel with
 *       sbx-tunnel/1 through sandboxd; $TUNBENCH_TOKEN, if set, as the bearer token).
 *       OP: up ARG MiB (client to server), down ARG MiB, both ARG MiB each way at once,
 *       ping ARG rounds of a 1-byte ping-pong (after 100 unmeasured). -P samples the resident
 *       memory (statm) of PID every 5 ms while the bytes flow, and its CPU time around them.
 *       Prints one line of KEY=VALUE words; exit 1 with a message on any failure (a short
 *       count included). Times are CLOCK_MONOTONIC, from the first byte of the request (the
 *       8 bytes) after the connection (and the tunnel) is open; open_ms is that opening. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUF (256u << 10)
#define MAXPIDS 4
#define ECHO UINT64_MAX

static char sendbuf[BUF], recvbuf[BUF];

static void
die(const char *fmt, ...)
{
	va_list ap;

	fputs("tunbench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t k = write(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			(void)poll(&pfd, 1, -1);
			continue;
		}
		if (k <= 0)
			die("write: %s", k < 0 ? strerror(errno) : "0");
		c += k;
		n -= (size_t)k;
	}
}

static size_t
read_some(int fd, void *p, size_t n)
{
	for (;;) {
		ssize_t k = read(fd, p, n);
		if (k >= 0)
			return (size_t)k;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };
			(void)poll(&pfd, 1, -1);
			continue;
		}
		die("read: %s", strerror(errno));
	}
}

static void
read_all(int fd, void *p, size_t n)
{
	char *c = p;

	while (n > 0) {
		size_t k = read_some(fd, c, n);
		if (k == 0)
			die("read: EOF with %zu bytes still expected", n);
		c += k;
		n -= k;
	}
}

/* ---- memory and CPU of other processes ---- */

struct watch {
	int n;
	pid_t pid[MAXPIDS];
	long rss0[MAXPIDS], peak[MAXPIDS]; /* KiB */
	long ticks0[MAXPIDS], ticks[MAXPIDS];
	double last;
};

static long
rss_kib(pid_t pid)
{
	char path[64];
	long size, res = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	if (fscanf(f, "%ld %ld", &size, &res) != 2)
		res = -1;
	fclose(f);
	return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static long
cpu_ticks(pid_t pid)
{
	char path[64], line[1024], *p;
	unsigned long ut, st;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	p = fgets(line, sizeof(line), f);
	fclose(f);
	if (!p || !(p = strrchr(line, ')')))
		return -1;
	/* after ") ": state(3) ... utime(14) stime(15) */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

static void
watch_start(struct watch *w)
{
	for (int i = 0; i < w->n; i++) {
		w->rss0[i] = w->peak[i] = rss_kib(w->pid[i]);
		w->ticks0[i] = cpu_ticks(w->pid[i]);
	}
	w->last = now();
}

static void
watch_sample(struct watch *w, bool force)
{
	double t = now();

	if (!force && t - w->last < 0.005)
		return;
	w->last = t;
	for (int i = 0; i < w->n; i++) {
		long r = rss_kib(w->pid[i]);
		if (r > w->peak[i])
			w->peak[i] = r;
	}
}

static void
watch_stop(struct watch *w)
{
	watch_sample(w, true);
	for (int i = 0; i < w->n; i++)
		w->ticks[i] = cpu_ticks(w->pid[i]) - w->ticks0[i];
}

static void
watch_print(const struct watch *w)
{
	double hz = (double)sysconf(_SC_CLK_TCK);

	for (int i = 0; i < w->n; i++)
		printf(" pid%d_rss0_kib=%ld pid%d_rss_peak_kib=%ld pid%d_cpu_ms=%.0f", i,
		       w->rss0[i], i, w->peak[i], i, (double)w->ticks[i] * 1000 / hz);
}

/* ---- moving bytes ---- */

/* Sends to_send bytes (then shuts the write side when shut), reads until EOF at the same time.
 * Returns the count read; *tail gets the last 8 bytes read. */
static uint64_t
xfer(int fd, uint64_t to_send, bool shut, uint64_t *tail, struct watch *w)
{
	uint64_t sent = 0, got = 0;
	bool wdone = false, eof = false;
	unsigned char last[8] = { 0 };
	int flags = fcntl(fd, F_GETFL);

	(void)fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	if (to_send == 0) {
		wdone = true;
		if (shut)
			(void)shutdown(fd, SHUT_WR);
	}
	while (!wdone || !eof) {
		struct pollfd pfd = { .fd = fd,
			              .events =
			                      (short)((eof ? 0 : POLLIN) | (wdone ? 0 : POLLOUT)) };
		int r = poll(&pfd, 1, w && w->n ? 5 : -1);
		if (r < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (w)
			watch_sample(w, false);
		if (r <= 0)
			continue;
		if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t k = read(fd, recvbuf, BUF);
			if (k < 0 && errno != EAGAIN && errno != EINTR)
				die("read: %s", strerror(errno));
			if (k == 0)
				eof = true;
			if (k > 0) {
				got += (uint64_t)k;
				if (k >= 8) {
					memcpy(last, recvbuf + k - 8, 8);
				} else {
					memmove(last, last + k, 8 - (size_t)k);
					memcpy(last + 8 - k, recvbuf, (size_t)k);
				}
			}
		}
		if (!wdone && (pfd.revents & (POLLOUT | POLLERR))) {
			size_t n = to_send - sent < BUF ? (size_t)(to_send - sent) : BUF;
			ssize_t k = write(fd, sendbuf, n);
			if (k < 0 && errno != EAGAIN && errno != EINTR)
				die("write: %s (after %llu of %llu bytes)", strerror(errno),
				    (unsigned long long)sent, (unsigned long long)to_send);
			if (k > 0)
				sent += (uint64_t)k;
			if (sent == to_send) {
				wdone = true;
				if (shut)
					(void)shutdown(fd, SHUT_WR);
			}
		}
	}
	(void)fcntl(fd, F_SETFL, flags);
	memcpy(tail, last, 8);
	return got;
}

static void
nodelay(int fd)
{
	int one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- the server ---- */

static void
serve_one(int fd)
{
	uint64_t n, got, tail;

	read_all(fd, &n, sizeof(n));
	if (n == ECHO) {
		for (;;) {
			size_t k = read_some(fd, recvbuf, BUF);
			if (k == 0)
				break;
			write_all(fd, recvbuf, k);
		}
		_exit(0);
	}
	got = xfer(fd, n, false, &tail, NULL);
	write_all(fd, &got, sizeof(got));
	_exit(0);
}

static _Noreturn void
serve(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
		                   .sin_port = htons((uint16_t)port),
		                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	signal(SIGCHLD, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 64) < 0)
		die("listen on 127.0.0.1:%d: %s", port, strerror(errno));
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			die("accept: %s", strerror(errno));
		}
		nodelay(fd);
		pid_t pid = fork();
		if (pid == 0) {
			close(lfd);
			serve_one(fd);
		}
		close(fd);
	}
}

/* ---- the client ---- */

static int
tcp_connect(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	int fd, e = getaddrinfo(host, port, &hints, &ai);

	if (e)
		die("%s:%s: %s", host, port, gai_strerror(e));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		die("connect to %s:%s: %s", host, port, strerror(errno));
	freeaddrinfo(ai);
	nodelay(fd);
	return fd;
}

static int
unix_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (strlen(path) >= sizeof(sa.sun_path))
		die("socket path too long: %s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect to %s: %s", path, strerror(errno));
	return fd;
}

/* GET …/tunnel, then the answer's head byte by byte, so no tunnel byte is read with it */
static void
tunnel_open(int fd, const char *sbx, const char *port)
{
	const char *tok = getenv("TUNBENCH_TOKEN");
	char req[1024], head[4096];
	size_t n = 0;
	int status = 0;

	snprintf(req, sizeof(req),
	         "GET /v1/sandboxes/%s/tunnel?port=%s HTTP/1.1\r\nHost: localhost\r\n"
	         "%s%s%sConnection: Upgrade\r\nUpgrade: sbx-tunnel/1\r\n\r\n",
	         sbx, port, tok && *tok ? "Authorization: Bearer " : "", tok && *tok ? tok : "",
	         tok && *tok ? "\r\n" : "");
	write_all(fd, req, strlen(req));
	while (n < sizeof(head) - 1 && !(n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0)) {
		if (read_some(fd, head + n, 1) != 1)
			die("the tunnel's answer ended after %zu bytes", n);
		n++;
	}
	head[n] = '\0';
	if (sscanf(head, "HTTP/1.1 %d", &status) != 1 || status != 101)
		die("the tunnel was not opened: %.200s", head);
}

static int
open_target(const char *target)
{
	char *t = strdup(target), *f[6];
	int n = 0, fd;

	for (char *s = t, *c; n < 6 && (c = strsep(&s, ":"));)
		f[n++] = c;
	if (n == 3 && strcmp(f[0], "tcp") == 0)
		fd = tcp_connect(f[1], f[2]);
	else if (n == 4 && strcmp(f[0], "unix") == 0) {
		fd = unix_connect(f[1]);
		tunnel_open(fd, f[2], f[3]);
	} else if (n == 5 && strcmp(f[0], "http") == 0) {
		fd = tcp_connect(f[1], f[2]);
		tunnel_open(fd, f[3], f[4]);
	} else
		die("bad target %s", target);
	free(t);
	return fd;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int
client(int argc, char **argv)
{
	const char *target = argv[2], *op = argv[3];
	long arg = strtol(argv[4], NULL, 10);
	struct watch w = { 0 };
	double t0, t1, open_ms;
	uint64_t got, tail, bytes, up = 0, down = 0;
	int fd;

	for (int i = 5; i + 1 < argc && w.n < MAXPIDS; i += 2)
		if (strcmp(argv[i], "-P") == 0)
			w.pid[w.n++] = (pid_t)atoi(argv[i + 1]);
	if (arg <= 0)
		die("bad count %s", argv[4]);
	signal(SIGPIPE, SIG_IGN);
	memset(sendbuf, 'x', sizeof(sendbuf));

	t0 = now();
	fd = open_target(target);
	t1 = now();
	open_ms = (t1 - t0) * 1000;

	if (strcmp(op, "ping") == 0) {
		uint64_t echo = ECHO;
		int rounds = (int)arg, warm = 100;
		double *rtt = calloc((size_t)rounds, sizeof(double)), sum = 0;
		char c = 'p';

		if (!rtt)
			die("out of memory");
		write_all(fd, &echo, sizeof(echo));
		watch_start(&w);
		for (int i = -warm; i < rounds; i++) {
			double a = now();
			write_all(fd, &c, 1);
			read_all(fd, &c, 1);
			if (i >= 0) {
				rtt[i] = (now() - a) * 1e6;
				sum += rtt[i];
			}
		}
		watch_stop(&w);
		qsort(rtt, (size_t)rounds, sizeof(double), cmp_double);
		printf("op=ping rounds=%d open_ms=%.2f p50_us=%.1f p90_us=%.1f p99_us=%.1f "
		       "max_us=%.1f mean_us=%.1f",
		       rounds, open_ms, rtt[rounds / 2], rtt[rounds * 9 / 10],
		       rtt[rounds * 99 / 100], rtt[rounds - 1], sum / rounds);
		watch_print(&w);
		putchar('\n');
		close(fd);
		return 0;
	}

	bytes = (uint64_t)arg << 20;
	if (strcmp(op, "up") == 0)
		up = bytes;
	else if (strcmp(op, "down") == 0)
		down = bytes;
	else if (strcmp(op, "both") == 0)
		up = down = bytes;
	else
		die("bad op %s", op);
	watch_start(&w);
	t0 = now();
	write_all(fd, &down, sizeof(down));
	got = xfer(fd, up, true, &tail, &w);
	t1 = now();
	watch_stop(&w);
	if (got != down + 8 || tail != up)
		die("%s %s: received %llu bytes (want %llu), the server counted %llu (want %llu)",
		    op, target, (unsigned long long)got, (unsigned long long)down + 8,
		    (unsigned long long)tail, (unsigned long long)up);
	printf("op=%s mib=%ld open_ms=%.2f secs=%.3f mibps=%.1f", op, arg, open_ms, t1 - t0,
	       (double)(up + down) / 1048576.0 / (t1 - t0));
	watch_print(&w);
	putchar('\n');
	close(fd);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "serve") == 0)
		serve(atoi(argv[2]));
	if (argc >= 5 && strcmp(argv[1], "client") == 0)
		return client(argc, argv);
	fprintf(stderr, "usage: tunbench serve PORT\n"
	                "       tunbench client TARGET up|down|both|ping N [-P PID]...\n");
	return 2;
}
