/* vmbench.c: the measuring client of bench/vm/run.sh. It times sandboxd's API (create to
 * first exec, exec round trips, 64 MiB of output as NDJSON or over sbx-stream/1) and, as the
 * baseline, a bare QEMU it starts itself, spoken to over the agent's virtio-serial socket with
 * the guest protocol (sbx-agent/1, documented in lib/agentproto.h and lib/frame.h).
 * Standalone: includes nothing from the project; the few frame and TLV helpers are below. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IO_TIMEOUT_MS 120000 /* one operation; a boot under TCG takes seconds */
#define READ_BUF (1u << 20)
#define MAX_PIDS 8

/* ---- small things ---- */

static pid_t vmm_pid;           /* the bare QEMU, killed on any exit */
static const char *vmm_pidfile; /* where its pid is written for the script's cleanup */

static void
kill_vmm(void)
{
	if (vmm_pid > 0) {
		kill(vmm_pid, SIGKILL);
		(void)waitpid(vmm_pid, NULL, 0);
		vmm_pid = 0;
		if (vmm_pidfile)
			(void)unlink(vmm_pidfile);
	}
}

static void
on_signal(int sig)
{
	if (vmm_pid > 0)
		kill(vmm_pid, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void
die(const char *fmt, ...)
{
	va_list ap;

	fputs("vmbench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	kill_vmm();
	exit(1);
}

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double
ms(uint64_t a, uint64_t b)
{
	return (double)(b - a) / 1e6;
}

static long long
parse_ll(const char *s, long long min, long long max, const char *what)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		die("bad %s '%s'", what, s);
	return v;
}

static void
write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			if (errno == EAGAIN) {
				struct pollfd pfd = { .fd = fd, .events = POLLOUT };
				(void)poll(&pfd, 1, 1000);
				continue;
			}
			die("write: %s", strerror(errno));
		}
		c += w;
		n -= (size_t)w;
	}
}

/* Reads what is there (at least one byte), waiting up to IO_TIMEOUT_MS; 0 at EOF. */
static size_t
read_some(int fd, void *p, size_t n)
{
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r = read(fd, p, n);
		if (r >= 0)
			return (size_t)r;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			die("read: %s", strerror(errno));
		r = poll(&pfd, 1, IO_TIMEOUT_MS);
		if (r == 0)
			die("no answer in %d s", IO_TIMEOUT_MS / 1000);
	}
}

static int
unix_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		die("socket path too long: %s", path);
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* A growable byte buffer with a read position. */
struct buf {
	uint8_t *p;
	size_t off, len, cap;
};

static void
buf_reserve(struct buf *b, size_t more)
{
	if (b->off && b->off == b->len)
		b->off = b->len = 0;
	if (b->len + more <= b->cap)
		return;
	if (b->off) { /* compact first */
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + more <= b->cap)
			return;
	}
	while (b->cap < b->len + more)
		b->cap = b->cap ? b->cap * 2 : 4096;
	b->p = realloc(b->p, b->cap);
	if (!b->p)
		die("out of memory");
}

static void
buf_add(struct buf *b, const void *p, size_t n)
{
	buf_reserve(b, n);
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static size_t
buf_avail(const struct buf *b)
{
	return b->len - b->off;
}

/* Reads more from fd into b; false at EOF. */
static bool
buf_fill(struct buf *b, int fd)
{
	size_t n;

	buf_reserve(b, READ_BUF);
	n = read_some(fd, b->p + b->len, b->cap - b->len);
	b->len += n;
	return n > 0;
}

/* ---- CPU accounting: what other work on the machine took during a measurement ---- */

struct cpu_mark {
	uint64_t wall_ns;
	uint64_t machine_busy; /* clock ticks, all CPUs */
	uint64_t ours;         /* clock ticks of the tracked processes and this one */
	uint64_t pid_ticks[MAX_PIDS];
};

static pid_t tracked[MAX_PIDS];
static size_t n_tracked;

static uint64_t
machine_busy(void)
{
	unsigned long long v[10] = { 0 };
	uint64_t total = 0;
	FILE *f = fopen("/proc/stat", "re");

	if (!f)
		return 0;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
	           &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]) < 8) {
		fclose(f);
		return 0;
	}
	fclose(f);
	for (int i = 0; i < 8; i++) /* guest time is already inside user */
		total += v[i];
	return total - v[3] - v[4]; /* not idle, not iowait */
}

/* utime + stime + cutime + cstime of a process, in clock ticks; 0 when it is gone. */
static uint64_t
pid_ticks(pid_t pid)
{
	char path[64], text[1024], *p;
	unsigned long long ut, st;
	long long cut, cst;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	text[n] = '\0';
	p = strrchr(text, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld",
	                 &ut, &st, &cut, &cst) != 4)
		return 0;
	return ut + st + (uint64_t)(cut > 0 ? cut : 0) + (uint64_t)(cst > 0 ? cst : 0);
}

static uint64_t
self_ticks(void)
{
	struct rusage a, b;
	long hz = sysconf(_SC_CLK_TCK);
	double s;

	getrusage(RUSAGE_SELF, &a);
	getrusage(RUSAGE_CHILDREN, &b);
	s = (double)(a.ru_utime.tv_sec + a.ru_stime.tv_sec + b.ru_utime.tv_sec +
	             b.ru_stime.tv_sec) +
	    (double)(a.ru_utime.tv_usec + a.ru_stime.tv_usec + b.ru_utime.tv_usec +
	             b.ru_stime.tv_usec) /
	            1e6;
	return (uint64_t)(s * (double)hz);
}

static void
track(pid_t pid)
{
	for (size_t i = 0; i < n_tracked; i++)
		if (tracked[i] == pid)
			return;
	if (n_tracked < MAX_PIDS)
		tracked[n_tracked++] =
		        pid; /* its baseline is 0: it started during the measurement */
}

static void
cpu_mark(struct cpu_mark *m)
{
	m->wall_ns = now_ns();
	m->machine_busy = machine_busy();
	m->ours = self_ticks();
	for (size_t i = 0; i < MAX_PIDS; i++)
		m->pid_ticks[i] = i < n_tracked ? pid_ticks(tracked[i]) : 0;
}

/* " other_cpu=X cpu_ms=A,B": the average number of CPUs that work other than ours kept busy
 * between the marks, and the CPU time of each tracked process (sandboxd, QEMU) in order. */
static void
print_cpu(const struct cpu_mark *a, size_t n_at_a)
{
	struct cpu_mark b;
	uint64_t ours, busy;
	double hz = (double)sysconf(_SC_CLK_TCK), wall, other;

	cpu_mark(&b);
	ours = b.ours - a->ours;
	for (size_t i = 0; i < n_tracked; i++) {
		uint64_t before = i < n_at_a ? a->pid_ticks[i] : 0;
		ours += b.pid_ticks[i] > before ? b.pid_ticks[i] - before : 0;
	}
	busy = b.machine_busy - a->machine_busy;
	wall = (double)(b.wall_ns - a->wall_ns) / 1e9;
	other = wall > 0 ? ((double)busy - (double)ours) / hz / wall : 0;
	printf(" other_cpu=%.2f cpu_ms=", other < 0 ? 0 : other);
	for (size_t i = 0; i < n_tracked; i++) {
		uint64_t before = i < n_at_a ? a->pid_ticks[i] : 0;
		uint64_t d = b.pid_ticks[i] > before ? b.pid_ticks[i] - before : 0;
		printf("%s%.0f", i ? "," : "", (double)d * 1000 / hz);
	}
	if (!n_tracked)
		printf("-");
}

/* ---- statistics ---- */

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least q of them at or below it. */
static uint64_t
quantile(const uint64_t *sorted, size_t n, double q)
{
	size_t k = (size_t)((double)n * q + 0.999999);

	if (k == 0)
		k = 1;
	return sorted[k > n ? n - 1 : k - 1];
}

static void
print_samples(uint64_t *ns, size_t n)
{
	double sum = 0;

	qsort(ns, n, sizeof(*ns), cmp_u64);
	for (size_t i = 0; i < n; i++)
		sum += (double)ns[i];
	printf(" n=%zu median_us=%.0f p90_us=%.0f p99_us=%.0f min_us=%.0f max_us=%.0f mean_us=%.0f",
	       n, (double)quantile(ns, n, 0.5) / 1e3, (double)quantile(ns, n, 0.9) / 1e3,
	       (double)quantile(ns, n, 0.99) / 1e3, (double)ns[0] / 1e3, (double)ns[n - 1] / 1e3,
	       sum / (double)n / 1e3);
	/* every sample, so that batches can be pooled */
	printf(" samples_us=");
	for (size_t i = 0; i < n; i++)
		printf("%s%.0f", i ? "," : "", (double)ns[i] / 1e3);
}

/* ---- HTTP/1.1 over sandboxd's unix socket ---- */

struct http {
	const char *sock;
	int fd;
	struct buf in;
	int status;
	long long content_length; /* -1: chunked or none */
	bool chunked;
};

static void
http_open(struct http *h, const char *sock)
{
	memset(h, 0, sizeof(*h));
	h->sock = sock;
	h->fd = unix_connect(sock);
	if (h->fd < 0)
		die("connect %s: %s", sock, strerror(errno));
}

static void
http_close(struct http *h)
{
	if (h->fd >= 0)
		close(h->fd);
	h->fd = -1;
	free(h->in.p);
	h->in = (struct buf){ 0 };
}

static void
http_send(struct http *h, const char *method, const char *path, const char *ctype, const void *body,
          size_t len, const char *extra)
{
	char head[1024];
	int n;

	n = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: localhost\r\n%s", method, path,
	             extra ? extra : "");
	if (body)
		n += snprintf(head + n, sizeof(head) - (size_t)n,
		              "Content-Type: %s\r\nContent-Length: %zu\r\n", ctype, len);
	n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
	if (n <= 0 || (size_t)n >= sizeof(head))
		die("request head too long");
	write_all(h->fd, head, (size_t)n);
	if (body && len)
		write_all(h->fd, body, len);
}

/* Reads the status line and headers. */
static void
http_head(struct http *h)
{
	uint8_t *end;
	char *line, *next;

	while (!(end = memmem(h->in.p + h->in.off, buf_avail(&h->in), "\r\n\r\n", 4)))
		if (!buf_fill(&h->in, h->fd))
			die("the server closed the connection before answering");
	*end = '\0';
	line = (char *)h->in.p + h->in.off;
	if (sscanf(line, "HTTP/1.%*d %d", &h->status) != 1)
		die("bad status line: %.80s", line);
	h->content_length = -1;
	h->chunked = false;
	for (line = strstr(line, "\r\n"); line; line = next) {
		line += 2;
		next = strstr(line, "\r\n");
		if (next)
			*next = '\0';
		if (strncasecmp(line, "content-length:", 15) == 0)
			h->content_length = strtoll(line + 15, NULL, 10);
		else if (strncasecmp(line, "transfer-encoding:", 18) == 0 &&
		         strcasestr(line, "chunked"))
			h->chunked = true;
	}
	h->in.off = (size_t)(end + 4 - h->in.p);
}

/* Streams the body to fn (in pieces); for a complete body collect it with body_collect. */
typedef bool (*body_fn)(void *ctx, const uint8_t *p, size_t n); /* false: stop reading */

static void
http_body(struct http *h, body_fn fn, void *ctx)
{
	if (!h->chunked) {
		long long left = h->content_length;
		while (left > 0) {
			size_t n;
			if (!buf_avail(&h->in) && !buf_fill(&h->in, h->fd))
				die("the body ended early");
			n = buf_avail(&h->in);
			if ((long long)n > left)
				n = (size_t)left;
			if (!fn(ctx, h->in.p + h->in.off, n))
				return;
			h->in.off += n;
			left -= (long long)n;
		}
		return;
	}
	for (;;) {
		uint8_t *crlf;
		unsigned long long size;
		while (!(crlf = memmem(h->in.p + h->in.off, buf_avail(&h->in), "\r\n", 2)))
			if (!buf_fill(&h->in, h->fd))
				die("the chunked body ended early");
		size = strtoull((char *)h->in.p + h->in.off, NULL, 16);
		h->in.off = (size_t)(crlf + 2 - h->in.p);
		if (size == 0) {
			while (buf_avail(&h->in) < 2)
				if (!buf_fill(&h->in, h->fd))
					return;
			h->in.off += 2;
			return;
		}
		while (size > 0) {
			size_t n;
			if (!buf_avail(&h->in) && !buf_fill(&h->in, h->fd))
				die("the chunked body ended early");
			n = buf_avail(&h->in);
			if (n > size)
				n = (size_t)size;
			if (!fn(ctx, h->in.p + h->in.off, n))
				return;
			h->in.off += n;
			size -= n;
		}
		while (buf_avail(&h->in) < 2)
			if (!buf_fill(&h->in, h->fd))
				die("the chunked body ended early");
		h->in.off += 2;
	}
}

static bool
body_collect(void *ctx, const uint8_t *p, size_t n)
{
	buf_add(ctx, p, n);
	return true;
}

/* One request with a complete answer: returns the status, the body NUL-terminated in *out. */
static int
http_call(struct http *h, const char *method, const char *path, const char *ctype, const void *body,
          size_t len, struct buf *out)
{
	out->off = out->len = 0;
	http_send(h, method, path, ctype, body, len, NULL);
	http_head(h);
	http_body(h, body_collect, out);
	buf_add(out, "", 1);
	return h->status;
}

/* The string value of "key":"..." in a JSON text (no escapes expected). */
static bool
json_str(const char *json, const char *key, char *out, size_t outlen)
{
	char pat[64];
	const char *p, *e;

	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	p = strstr(json, pat);
	if (!p)
		return false;
	p += strlen(pat);
	e = strchr(p, '"');
	if (!e || (size_t)(e - p) >= outlen)
		return false;
	memcpy(out, p, (size_t)(e - p));
	out[e - p] = '\0';
	return true;
}

static bool
json_int(const char *json, const char *key, long long *out)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	if (!p)
		return false;
	*out = strtoll(p + strlen(pat), NULL, 10);
	return true;
}

static void
run_true(struct http *h, const char *id, struct buf *out)
{
	static const char body[] = "{\"argv\":[\"true\"]}";
	char path[256];
	long long code = -1;
	int st;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	st = http_call(h, "POST", path, "application/json", body, strlen(body), out);
	if (st != 200 || !json_int((char *)out->p, "exit_code", &code) || code != 0)
		die("run true: HTTP %d: %s", st, (char *)out->p);
}

/* When a process started, in ms after the CLOCK_BOOTTIME instant t0, from its start time in
 * /proc (clock ticks since boot: a resolution of 10 ms at the usual 100 Hz); -1 if gone. */
static double
start_offset_ms(pid_t pid, const struct timespec *t0)
{
	char path[64], text[1024], *p;
	unsigned long long start;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	text[n] = '\0';
	p = strrchr(text, ')');
	if (!p || sscanf(p + 2,
	                 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
	                 "%*d %llu",
	                 &start) != 1)
		return -1;
	return (double)start * 1000 / (double)sysconf(_SC_CLK_TCK) -
	       ((double)t0->tv_sec * 1000 + (double)t0->tv_nsec / 1e6);
}

/* api-boot SOCK [VMS_DIR]: POST /v1/sandboxes (it answers once the sandbox runs), then POST
 * …/run true on the same connection. */
static int
cmd_api_boot(int argc, char **argv)
{
	static const char body[] = "{}";
	struct http h;
	struct buf out = { 0 };
	char id[64], state[32];
	struct cpu_mark m;
	struct timespec boot0;
	double spawn_ms = -1;
	size_t n0;
	uint64_t t0, t1, t2;
	int st;

	if (argc < 1)
		die("api-boot SOCK [VMS_DIR]");
	n0 = n_tracked;
	cpu_mark(&m);
	clock_gettime(CLOCK_BOOTTIME, &boot0);
	t0 = now_ns();
	http_open(&h, argv[0]);
	st = http_call(&h, "POST", "/v1/sandboxes", "application/json", body, strlen(body), &out);
	t1 = now_ns();
	if (st != 201 || !json_str((char *)out.p, "id", id, sizeof(id)) ||
	    !json_str((char *)out.p, "state", state, sizeof(state)) ||
	    strcmp(state, "running") != 0)
		die("create: HTTP %d: %s", st, (char *)out.p);
	run_true(&h, id, &out);
	t2 = now_ns();
	if (argc > 1) { /* its VMM, for the CPU accounting */
		char path[PATH_MAX];
		FILE *f;
		int pid = 0;
		snprintf(path, sizeof(path), "%s/%s/vm.json", argv[1], id);
		f = fopen(path, "re");
		if (f && fscanf(f, "{\"pid\":%d", &pid) == 1 && pid > 0) {
			track(pid);
			spawn_ms = start_offset_ms(pid, &boot0);
		}
		if (f)
			fclose(f);
	}
	printf("id=%s create_ms=%.1f first_run_ms=%.1f total_ms=%.1f qemu_started_ms=%.0f", id,
	       ms(t0, t1), ms(t1, t2), ms(t0, t2), spawn_ms);
	print_cpu(&m, n0);
	printf("\n");
	http_close(&h);
	free(out.p);
	return 0;
}

/* api-exec SOCK ID N: N × POST …/run true on one keep-alive connection. */
static int
cmd_api_exec(int argc, char **argv)
{
	struct http h;
	struct buf out = { 0 };
	struct cpu_mark m;
	uint64_t *ns;
	size_t n;

	if (argc != 3)
		die("api-exec SOCK ID N");
	n = (size_t)parse_ll(argv[2], 1, 1000000, "count");
	ns = calloc(n, sizeof(*ns));
	if (!ns)
		die("out of memory");
	http_open(&h, argv[0]);
	run_true(&h, argv[1], &out); /* warm-up, not counted */
	cpu_mark(&m);
	for (size_t i = 0; i < n; i++) {
		uint64_t t = now_ns();
		run_true(&h, argv[1], &out);
		ns[i] = now_ns() - t;
	}
	printf("what=run_true");
	print_samples(ns, n);
	print_cpu(&m, n_tracked);
	printf("\n");
	http_close(&h);
	free(out.p);
	free(ns);
	return 0;
}

/* The guest command of the output measurements: waits for a line on stdin (so that nothing
 * is written before the reader is there), then writes the bytes. */
static char stream_cmd[160];
static bool stream_dd; /* -d: dd with 64 KiB blocks instead of head */

static void
set_stream_cmd(unsigned long long bytes)
{
	if (stream_dd)
		snprintf(stream_cmd, sizeof(stream_cmd),
		         "read x; exec dd if=/dev/zero bs=65536 count=%llu 2>/dev/null",
		         bytes / 65536);
	else
		snprintf(stream_cmd, sizeof(stream_cmd), "read x; exec head -c %llu /dev/zero",
		         bytes);
}

/* NDJSON lines of GET …/output: counts the decoded bytes of each data line. */
struct ndjson {
	struct buf line;
	unsigned long long bytes;
	long long exit_code;
	bool done, dropped;
	uint64_t first_ns;
};

static void
ndjson_line(struct ndjson *s, const char *l, size_t n)
{
	const char *d = memmem(l, n, "\"data\":\"", 8);

	if (d) {
		const char *b = d + 8, *e = memchr(b, '"', n - (size_t)(b - l));
		size_t len;
		if (!e)
			die("bad output line");
		len = (size_t)(e - b);
		if (len % 4)
			die("bad base64 length %zu", len);
		s->bytes +=
		        len / 4 * 3 - (len && b[len - 1] == '=') - (len > 1 && b[len - 2] == '=');
		if (!s->first_ns)
			s->first_ns = now_ns();
	} else if (memmem(l, n, "\"exit_code\":", 12)) {
		char tmp[64];
		snprintf(tmp, sizeof(tmp), "%.*s", (int)(n < 63 ? n : 63), l);
		json_int(tmp, "exit_code", &s->exit_code);
		s->done = true;
	} else if (memmem(l, n, "\"dropped\":", 10)) {
		s->dropped = true;
	}
}

static bool
ndjson_feed(void *ctx, const uint8_t *p, size_t n)
{
	struct ndjson *s = ctx;

	while (n) {
		const uint8_t *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) : n;
		if (nl && !buf_avail(&s->line)) {
			ndjson_line(s, (const char *)p, k); /* a whole line in place: no copy */
		} else {
			buf_add(&s->line, p, k);
			if (nl) {
				ndjson_line(s, (const char *)s->line.p + s->line.off,
				            buf_avail(&s->line));
				s->line.off = s->line.len = 0;
			}
		}
		if (!nl)
			break;
		p += k + 1;
		n -= k + 1;
	}
	return !s->done;
}

/* POST …/processes with the stream command; returns the pid. */
static long long
api_start_stream(struct http *h, const char *id, struct buf *out)
{
	char path[256], body[256];
	long long pid = 0;
	int st;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	snprintf(body, sizeof(body), "{\"argv\":[\"sh\",\"-c\",\"%s\"]}", stream_cmd);
	st = http_call(h, "POST", path, "application/json", body, strlen(body), out);
	if (st != 201 || !json_int((char *)out->p, "pid", &pid) || pid <= 0)
		die("start: HTTP %d: %s", st, (char *)out->p);
	return pid;
}

static void
print_stream(const char *how, unsigned long long bytes, uint64_t t_go, uint64_t t_first,
             uint64_t t_end)
{
	double s = (double)(t_end - t_go) / 1e9;

	printf("what=%s bytes=%llu ms=%.1f first_byte_ms=%.1f mb_s=%.1f", how, bytes,
	       ms(t_go, t_end), ms(t_go, t_first), (double)bytes / 1e6 / s);
}

/* api-stream SOCK ID BYTES ndjson|attach */
static int
cmd_api_stream(int argc, char **argv)
{
	struct http h, o;
	struct buf out = { 0 };
	unsigned long long want;
	struct cpu_mark m;
	char path[256];
	long long pid;
	bool attach;
	uint64_t t_go, t_end;

	if (argc != 4 || (strcmp(argv[3], "ndjson") && strcmp(argv[3], "attach")))
		die("api-stream SOCK ID BYTES ndjson|attach");
	want = (unsigned long long)parse_ll(argv[2], 1, 1ll << 40, "bytes");
	attach = strcmp(argv[3], "attach") == 0;
	set_stream_cmd(want);
	http_open(&h, argv[0]);
	pid = api_start_stream(&h, argv[1], &out);
	http_open(&o, argv[0]);
	if (!attach) {
		struct ndjson s = { .exit_code = -1 };
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld/output", argv[1],
		         pid);
		http_send(&o, "GET", path, NULL, NULL, 0, NULL);
		http_head(&o);
		if (o.status != 200)
			die("output: HTTP %d", o.status);
		cpu_mark(&m);
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld/stdin", argv[1], pid);
		t_go = now_ns();
		if (http_call(&h, "POST", path, "application/octet-stream", "go\n", 3, &out) != 204)
			die("stdin: HTTP %d: %s", h.status, (char *)out.p);
		http_body(&o, ndjson_feed, &s);
		t_end = now_ns();
		if (!s.done || s.exit_code != 0 || s.dropped || s.bytes != want)
			die("output: %llu of %llu bytes, exit %lld%s", s.bytes, want, s.exit_code,
			    s.dropped ? ", bytes dropped" : "");
		print_stream("api_ndjson", s.bytes, t_go, s.first_ns, t_end);
		free(s.line.p);
	} else {
		static const uint8_t go[] = { 'i', 0, 0, 0, 3, 'g', 'o', '\n' };
		unsigned long long got = 0;
		uint64_t t_first = 0;
		int code = -1;
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld/attach", argv[1],
		         pid);
		http_send(&o, "GET", path, NULL, NULL, 0,
		          "Upgrade: sbx-stream/1\r\nConnection: Upgrade\r\n");
		http_head(&o);
		if (o.status != 101)
			die("attach: HTTP %d", o.status);
		cpu_mark(&m);
		t_go = now_ns();
		write_all(o.fd, go, sizeof(go));
		while (code < 0) {
			uint8_t *f;
			uint32_t len;
			while (buf_avail(&o.in) < 5)
				if (!buf_fill(&o.in, o.fd))
					die("attach: closed before the exit frame");
			f = o.in.p + o.in.off;
			len = (uint32_t)f[1] << 24 | (uint32_t)f[2] << 16 | (uint32_t)f[3] << 8 |
			      f[4];
			if (f[0] == 'o' || f[0] == 'E') {
				/* count bytes as they come, without waiting for whole frames */
				size_t have = buf_avail(&o.in) - 5, take = have < len ? have : len;
				if (!t_first)
					t_first = now_ns();
				got += take;
				o.in.off += 5 + take;
				len -= (uint32_t)take;
				while (len) {
					size_t n;
					if (!buf_avail(&o.in) && !buf_fill(&o.in, o.fd))
						die("attach: closed inside a frame");
					n = buf_avail(&o.in) < len ? buf_avail(&o.in) : len;
					got += n;
					o.in.off += n;
					len -= (uint32_t)n;
				}
				continue;
			}
			while (buf_avail(&o.in) < 5 + (size_t)len)
				if (!buf_fill(&o.in, o.fd))
					die("attach: closed inside a frame");
			f = o.in.p + o.in.off;
			if (f[0] == 'x' && len == 4)
				code = (int)((uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 |
				             (uint32_t)f[7] << 8 | f[8]);
			else if (f[0] == 'd')
				die("attach: bytes dropped");
			o.in.off += 5 + len;
		}
		t_end = now_ns();
		if (code != 0 || got != want)
			die("attach: %llu of %llu bytes, exit %d", got, want, code);
		print_stream("api_attach", got, t_go, t_first, t_end);
	}
	print_cpu(&m, n_tracked);
	printf("\n");
	http_close(&o);
	http_close(&h);
	free(out.p);
	return 0;
}

/* ---- the guest protocol (lib/agentproto.h, lib/frame.h) ---- */

#define AP_MAGIC "\xffSBXAGT1"
#define AP_MAGIC_LEN 8
#define FRAME_HEADER 12
#define FRAME_MAX (1u << 20)
enum {
	AP_HELLO = 0x01,
	AP_EXEC = 0x02,
	AP_STDIN = 0x03,
	AP_ATTACH = 0x06,
	AP_ACK = 0x08,
	AP_RELEASE = 0x09,
	AP_HELLO_ACK = 0x81,
	AP_RESULT = 0x82,
	AP_OUTPUT = 0x83,
	AP_DROPPED = 0x84,
	AP_EXIT = 0x85,
	AP_F_EOF = 1,
	T_NONCE = 1,
	T_TIME_NS = 2,
	T_ENTROPY = 3,
	T_HOSTNAME = 4,
	T_ROOT_DEV = 5,
	T_UPPER_DEV = 6,
	T_UID = 8,
	T_GID = 9,
	T_HOME = 10,
	T_MOUNTED = 14,
	T_ARG = 15,
	T_TTY = 17,
	T_KEEP = 20,
	T_ERRNO = 21,
	T_PID = 23,
};

static void
put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void
put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint32_t
get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t
get64(const uint8_t *p)
{
	return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static void
tlv(struct buf *b, uint16_t tag, const void *v, size_t len)
{
	uint8_t h[6] = { (uint8_t)(tag >> 8), (uint8_t)tag };

	put32(h + 2, (uint32_t)len);
	buf_add(b, h, sizeof(h));
	buf_add(b, v, len);
}

static void
tlv_str(struct buf *b, uint16_t tag, const char *s)
{
	tlv(b, tag, s, strlen(s));
}

static void
tlv_u32(struct buf *b, uint16_t tag, uint32_t v)
{
	uint8_t p[4];

	put32(p, v);
	tlv(b, tag, p, 4);
}

/* Finds tag in a TLV list: its value and length, or NULL. */
static const uint8_t *
tlv_find(const uint8_t *p, size_t n, uint16_t tag, uint32_t *len)
{
	while (n >= 6) {
		uint16_t t = (uint16_t)(p[0] << 8 | p[1]);
		uint32_t l = get32(p + 2);
		if (l > n - 6)
			return NULL;
		if (t == tag) {
			*len = l;
			return p + 6;
		}
		p += 6 + l;
		n -= 6 + l;
	}
	return NULL;
}

struct chan {
	int fd;
	struct buf in, out;
	uint32_t next_req;
};

static void
frame(struct buf *out, uint8_t type, uint8_t flags, uint32_t chan, const void *p, size_t len)
{
	uint8_t h[FRAME_HEADER] = { type, flags, 0, 0 };

	put32(h + 4, chan);
	put32(h + 8, (uint32_t)len);
	buf_add(out, h, sizeof(h));
	if (len)
		buf_add(out, p, len);
}

static void
chan_flush(struct chan *c)
{
	write_all(c->fd, c->out.p + c->out.off, buf_avail(&c->out));
	c->out.off = c->out.len = 0;
}

struct rframe {
	uint8_t type;
	uint32_t chan;
	const uint8_t *p;
	uint32_t len;
};

/* The next whole frame (valid until the next call). */
static void
chan_next(struct chan *c, struct rframe *f)
{
	const uint8_t *h;

	while (buf_avail(&c->in) < FRAME_HEADER)
		if (!buf_fill(&c->in, c->fd))
			die("the agent closed the channel");
	h = c->in.p + c->in.off;
	f->type = h[0];
	f->chan = get32(h + 4);
	f->len = get32(h + 8);
	if (f->len > FRAME_MAX)
		die("frame of %u bytes", f->len);
	while (buf_avail(&c->in) < FRAME_HEADER + (size_t)f->len)
		if (!buf_fill(&c->in, c->fd))
			die("the agent closed the channel inside a frame");
	f->p = c->in.p + c->in.off + FRAME_HEADER;
	c->in.off += FRAME_HEADER + f->len;
}

/* Connects, sends AP_MAGIC + HELLO as sandboxd does, and waits for the HELLO_ACK echoing the
 * nonce; the root is mounted when it answers. Retries the connect every 10 ms. */
static void
chan_open(struct chan *c, const char *sock, uint64_t deadline_ns, uint64_t *t_conn, uint64_t *t_ack)
{
	uint8_t nonce[16], entropy[32], tns[8];
	struct buf p = { 0 };
	struct timespec rt;
	const uint8_t *m;
	uint32_t len;

	memset(c, 0, sizeof(*c));
	c->next_req = 1;
	while ((c->fd = unix_connect(sock)) < 0) {
		if (now_ns() > deadline_ns)
			die("the agent socket %s did not open: %s", sock, strerror(errno));
		if (vmm_pid > 0 && waitpid(vmm_pid, NULL, WNOHANG) == vmm_pid) {
			vmm_pid = 0;
			die("QEMU exited before its agent socket opened (see its log)");
		}
		usleep(10000);
	}
	*t_conn = now_ns();
	if (getrandom(nonce, sizeof(nonce), 0) != sizeof(nonce) ||
	    getrandom(entropy, sizeof(entropy), 0) != sizeof(entropy))
		die("getrandom");
	clock_gettime(CLOCK_REALTIME, &rt);
	put64(tns, (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec);
	tlv(&p, T_NONCE, nonce, sizeof(nonce));
	tlv(&p, T_TIME_NS, tns, sizeof(tns));
	tlv(&p, T_ENTROPY, entropy, sizeof(entropy));
	tlv_str(&p, T_HOSTNAME, "bare");
	tlv_str(&p, T_ROOT_DEV, "/dev/vda");
	tlv_str(&p, T_UPPER_DEV, "/dev/vdb");
	tlv_u32(&p, T_UID, 1001);
	tlv_u32(&p, T_GID, 1001);
	tlv_str(&p, T_HOME, "/sandbox/home");
	buf_add(&c->out, AP_MAGIC, AP_MAGIC_LEN);
	frame(&c->out, AP_HELLO, 0, 0, p.p, p.len);
	free(p.p);
	chan_flush(c);
	/* everything before the guest's AP_MAGIC is stale */
	for (;;) {
		while (!(
		        m = memmem(c->in.p + c->in.off, buf_avail(&c->in), AP_MAGIC, AP_MAGIC_LEN)))
			if (!buf_fill(&c->in, c->fd))
				die("the agent closed the channel before its HELLO_ACK");
		c->in.off = (size_t)(m - c->in.p) + AP_MAGIC_LEN;
		struct rframe f;
		const uint8_t *v;
		chan_next(c, &f);
		if (f.type != AP_HELLO_ACK)
			continue;
		v = tlv_find(f.p, f.len, T_NONCE, &len);
		if (!v || len != sizeof(nonce) || memcmp(v, nonce, sizeof(nonce)) != 0)
			continue;
		v = tlv_find(f.p, f.len, T_MOUNTED, &len);
		if (!v || len != 1 || v[0] != 1)
			die("the guest did not mount its root");
		break;
	}
	*t_ack = now_ns();
}

/* EXEC argv; returns the guest pid from the RESULT. */
static uint32_t
chan_exec(struct chan *c, const char *const *argv)
{
	struct buf p = { 0 };
	uint32_t req = c->next_req++, len;
	uint8_t zero = 0;
	struct rframe f;
	const uint8_t *v;

	for (size_t i = 0; argv[i]; i++)
		tlv_str(&p, T_ARG, argv[i]);
	tlv(&p, T_TTY, &zero, 1);
	tlv(&p, T_KEEP, &zero, 1);
	frame(&c->out, AP_EXEC, 0, req, p.p, p.len);
	free(p.p);
	chan_flush(c);
	for (;;) {
		chan_next(c, &f);
		if (f.type == AP_RESULT && f.chan == req)
			break;
	}
	v = tlv_find(f.p, f.len, T_ERRNO, &len);
	if (v && len == 4 && get32(v) != 0)
		die("EXEC %s: errno %u", argv[0], get32(v));
	v = tlv_find(f.p, f.len, T_PID, &len);
	if (!v || len != 4)
		die("EXEC %s: no pid in the RESULT", argv[0]);
	return get32(v);
}

static void
chan_u64(struct chan *c, uint8_t type, uint32_t pid, uint64_t v)
{
	uint8_t p[8];

	put64(p, v);
	frame(&c->out, type, 0, pid, p, sizeof(p));
}

/* What sandboxd does for POST …/run: EXEC, RESULT, ATTACH from 0, stdin closed, then OUTPUT
 * until EXIT, then RELEASE (sent with the next request, as sandboxd's goes with the next
 * frames it writes). */
static void
chan_run_true(struct chan *c)
{
	static const char *const argv[] = { "true", NULL };
	uint32_t pid = chan_exec(c, argv);
	struct rframe f;

	chan_u64(c, AP_ATTACH, pid, 0);
	frame(&c->out, AP_STDIN, AP_F_EOF, pid, NULL, 0);
	chan_flush(c);
	for (;;) {
		chan_next(c, &f);
		if (f.type == AP_EXIT && f.chan == pid)
			break;
	}
	if (f.len < 4 || get32(f.p) != 0)
		die("true exited with %d", f.len >= 4 ? (int)get32(f.p) : -1);
	frame(&c->out, AP_RELEASE, 0, pid, NULL, 0);
}

/* The raw channel: the stream command's output read straight off the agent socket, ACKing
 * what was read after every read(). */
static void
chan_stream(struct chan *c, unsigned long long want, struct cpu_mark *m)
{
	const char *argv[] = { "sh", "-c", stream_cmd, NULL };
	uint32_t pid = chan_exec(c, argv);
	unsigned long long got = 0, acked = 0;
	uint64_t t_go, t_first = 0, t_end;
	int code = -1;

	chan_u64(c, AP_ATTACH, pid, 0);
	chan_flush(c);
	cpu_mark(m);
	t_go = now_ns();
	frame(&c->out, AP_STDIN, 0, pid, "go\n", 3);
	chan_flush(c);
	while (code < 0) {
		struct rframe f;
		chan_next(c, &f);
		if (f.type == AP_OUTPUT && f.chan == pid && f.len >= 9) {
			if (get64(f.p + 1) != got)
				die("output at offset %llu, expected %llu",
				    (unsigned long long)get64(f.p + 1), got);
			if (!t_first)
				t_first = now_ns();
			got += f.len - 9;
		} else if (f.type == AP_DROPPED && f.chan == pid) {
			die("the guest dropped output");
		} else if (f.type == AP_EXIT && f.chan == pid && f.len >= 12) {
			code = (int)get32(f.p);
			if (get64(f.p + 4) != got)
				die("EXIT at %llu after %llu bytes",
				    (unsigned long long)get64(f.p + 4), got);
		}
		/* acknowledge what was read: whenever the last read() is consumed, and every
		 * 128 KiB (sandboxd's step) */
		if (got > acked && (!buf_avail(&c->in) || got - acked >= (128u << 10))) {
			chan_u64(c, AP_ACK, pid, got);
			chan_flush(c);
			acked = got;
		}
	}
	t_end = now_ns();
	if (code != 0 || got != want)
		die("raw stream: %llu of %llu bytes, exit %d", got, want, code);
	frame(&c->out, AP_RELEASE, 0, pid, NULL, 0);
	chan_flush(c);
	print_stream("raw_channel", got, t_go, t_first, t_end);
}

static void
read_mem(pid_t pid, const char *label)
{
	char path[64], line[256];
	long long rss = -1, pss = -1, anon = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	f = fopen(path, "re");
	if (!f)
		die("%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "Rss: %lld", &rss);
		sscanf(line, "Pss: %lld", &pss);
		sscanf(line, "Anonymous: %lld", &anon);
	}
	fclose(f);
	printf("%s rss_kib=%lld pss_kib=%lld anon_kib=%lld\n", label, rss, pss, anon);
}

static void
run_quiet(char *const *argv)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("%s failed", argv[0]);
}

/* n × what sandboxd's POST …/run does, after one not counted. */
static void
bare_exec(struct chan *c, long long n)
{
	uint64_t *ns = calloc((size_t)n, sizeof(*ns));
	struct cpu_mark m;

	if (!ns)
		die("out of memory");
	chan_run_true(c); /* warm-up, not counted */
	cpu_mark(&m);
	for (long long k = 0; k < n; k++) {
		uint64_t t = now_ns();
		chan_run_true(c);
		ns[k] = now_ns() - t;
	}
	chan_flush(c);
	printf("phase=exec what=raw_run_true");
	print_samples(ns, (size_t)n);
	print_cpu(&m, n_tracked);
	printf("\n");
	fflush(stdout);
	free(ns);
}

static void
bare_stream(struct chan *c, unsigned long long bytes)
{
	struct cpu_mark m;

	set_stream_cmd(bytes);
	printf("phase=stream ");
	chan_stream(c, bytes, &m);
	print_cpu(&m, n_tracked);
	printf("\n");
	fflush(stdout);
}

/* bare [options] -- QEMU ARGV...: the baseline. */
static int
cmd_bare(int argc, char **argv)
{
	const char *sock = NULL, *blank = NULL, *upper = NULL, *log = NULL, *dir = NULL;
	unsigned long long stream = 0;
	long long uid = -1, exec_n = 0;
	double hold = 0;
	bool serve = false;
	char **qargv = NULL;
	struct cpu_mark m;
	struct chan c;
	uint64_t t0, t_layer, t_spawn, t_conn, t_ack, t_exit;
	int i;

	for (i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--") == 0) {
			qargv = argv + i + 1;
			break;
		}
		if (!v)
			die("%s needs a value", a);
		i++;
		if (strcmp(a, "--sock") == 0)
			sock = v;
		else if (strcmp(a, "--dir") == 0)
			dir = v;
		else if (strcmp(a, "--blank") == 0)
			blank = v;
		else if (strcmp(a, "--upper") == 0)
			upper = v;
		else if (strcmp(a, "--log") == 0)
			log = v;
		else if (strcmp(a, "--pidfile") == 0)
			vmm_pidfile = v;
		else if (strcmp(a, "--uid") == 0)
			uid = parse_ll(v, 1, 65534, "uid");
		else if (strcmp(a, "--exec") == 0)
			exec_n = parse_ll(v, 0, 1000000, "exec count");
		else if (strcmp(a, "--stream") == 0)
			stream = (unsigned long long)parse_ll(v, 0, 1ll << 40, "stream bytes");
		else if (strcmp(a, "--serve") == 0)
			serve = strcmp(v, "0") != 0;
		else if (strcmp(a, "--hold") == 0)
			hold = (double)parse_ll(v, 0, 3600, "hold seconds");
		else
			die("unknown option %s", a);
	}
	if (!qargv || !qargv[0] || !sock || !dir || !blank || !upper || !log)
		die("bare --dir DIR --sock SOCK --blank BLANK --upper UPPER --log LOG [--uid UID] "
		    "[--pidfile F] [--exec N] [--stream BYTES] [--hold S] [--serve 1] -- QEMU "
		    "ARGS...");
	cpu_mark(&m);
	t0 = now_ns();
	/* a fresh writable layer, as sandboxd makes one for every new sandbox */
	{
		char *const img[] = { "qemu-img",    "create",      "-q",  "-f",
			              "qcow2",       "-F",          "raw", "-b",
			              (char *)blank, (char *)upper, NULL };
		run_quiet(img);
		if (uid > 0 && (chown(upper, (uid_t)uid, (gid_t)uid) < 0 || chmod(upper, 0600) < 0))
			die("chown %s: %s", upper, strerror(errno));
	}
	t_layer = now_ns();
	t_spawn = now_ns();
	vmm_pid = fork();
	if (vmm_pid < 0)
		die("fork: %s", strerror(errno));
	if (vmm_pid == 0) {
		/* the marker by which run.sh's cleanup finds a bare QEMU it started */
		char marker[PATH_MAX + 32];
		char *const envp[] = { "PATH=/usr/bin:/bin", marker, NULL };
		int null = open("/dev/null", O_RDWR),
		    lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		snprintf(marker, sizeof(marker), "SANDBOXD_VMBENCH_DIR=%s", dir);
		setsid();
		if (null < 0 || lfd < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 ||
		    dup2(lfd, 2) < 0 || chdir(dir) < 0)
			_exit(126);
		if (uid > 0 &&
		    (setgroups(0, NULL) < 0 || setresgid((gid_t)uid, (gid_t)uid, (gid_t)uid) < 0 ||
		     setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0 ||
		     prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0))
			_exit(126);
		execve(qargv[0], qargv, envp);
		_exit(127);
	}
	if (vmm_pidfile) {
		FILE *f = fopen(vmm_pidfile, "we");
		if (f) {
			fprintf(f, "%d\n", (int)vmm_pid);
			fclose(f);
		}
	}
	track(vmm_pid);
	chan_open(&c, sock, t_spawn + (uint64_t)IO_TIMEOUT_MS * 1000000u, &t_conn, &t_ack);
	chan_run_true(&c);
	t_exit = now_ns();
	chan_flush(&c);
	printf("phase=boot qemu_pid=%d layer_ms=%.1f connect_ms=%.1f agent_ready_ms=%.1f "
	       "first_run_ms=%.1f total_ms=%.1f total_without_layer_ms=%.1f",
	       (int)vmm_pid, ms(t0, t_layer), ms(t_spawn, t_conn), ms(t_spawn, t_ack),
	       ms(t_ack, t_exit), ms(t0, t_exit), ms(t_spawn, t_exit));
	print_cpu(&m, 0);
	printf("\n");
	fflush(stdout);
	if (hold > 0) {
		uint64_t until = t_ack + (uint64_t)(hold * 1e9);
		while (now_ns() < until) {
			uint64_t left = until - now_ns();
			struct timespec ts = { .tv_sec = (time_t)(left / 1000000000u),
				               .tv_nsec = (long)(left % 1000000000u) };
			nanosleep(&ts, NULL);
		}
		read_mem(vmm_pid, "phase=mem");
		fflush(stdout);
	}
	if (exec_n > 0)
		bare_exec(&c, exec_n);
	if (stream > 0)
		bare_stream(&c, stream);
	/* --serve: further measurements on request, one line each ("exec N", "stream BYTES",
	 * "quit"); the end of stdin is a quit, so the VM never outlives whoever asked */
	while (serve) {
		char cmd[128];
		long long v;
		if (!fgets(cmd, sizeof(cmd), stdin) || strncmp(cmd, "quit", 4) == 0)
			break;
		if (sscanf(cmd, "exec %lld", &v) == 1 && v > 0)
			bare_exec(&c, v);
		else if (sscanf(cmd, "stream %lld", &v) == 1 && v > 0)
			bare_stream(&c, (unsigned long long)v);
		else
			die("unknown request: %s", cmd);
	}
	close(c.fd);
	kill_vmm();
	return 0;
}

int
main(int argc, char **argv)
{
	int i = 1;

	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* -P PID: a process (sandboxd) whose CPU time counts as ours in other_cpu */
	for (;;) {
		if (i + 1 < argc && strcmp(argv[i], "-P") == 0) {
			track((pid_t)parse_ll(argv[i + 1], 1, INT_MAX, "pid"));
			i += 2;
		} else if (i < argc && strcmp(argv[i], "-d") == 0) {
			stream_dd = true;
			i++;
		} else {
			break;
		}
	}
	if (i >= argc)
		goto usage;
	if (strcmp(argv[i], "api-boot") == 0)
		return cmd_api_boot(argc - i - 1, argv + i + 1);
	if (strcmp(argv[i], "api-exec") == 0)
		return cmd_api_exec(argc - i - 1, argv + i + 1);
	if (strcmp(argv[i], "api-stream") == 0)
		return cmd_api_stream(argc - i - 1, argv + i + 1);
	if (strcmp(argv[i], "bare") == 0)
		return cmd_bare(argc - i - 1, argv + i + 1);
usage:
	fprintf(stderr,
	        "usage: vmbench [-P PID]... COMMAND ...\n"
	        "  api-boot SOCK [VMS_DIR]          create a sandbox, then run true in it\n"
	        "  api-exec SOCK ID N               N runs of true (median, p99)\n"
	        "  api-stream SOCK ID BYTES ndjson|attach\n"
	        "                                   BYTES of output through the API\n"
	        "  bare --dir D --sock S --blank B --upper U --log L [--uid U] [--pidfile F]\n"
	        "       [--exec N] [--stream BYTES] [--hold S] [--serve 1] -- QEMU ARGS...\n"
	        "                                   the same with a QEMU started here; --serve:\n"
	        "                                   then 'exec N', 'stream BYTES', 'quit' on "
	        "stdin\n"
	        "  -P PID  a process whose CPU time is ours, not other work (sandboxd)\n");
	return 2;
}
