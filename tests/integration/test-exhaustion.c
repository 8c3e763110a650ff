/* test-exhaustion.c: clients that try to exhaust the daemon, against the real sandboxd-fake.
 * Unauthenticated 64 MiB uploads are answered at their head, before their bodies are read,
 * and cost the daemon no memory; an authorised 64 MiB file write streams to the guest agent
 * (sandbox-guestd's test mode, run by the fake backend) in a bounded amount of memory; one
 * client holding thousands of connections locks out neither the unix socket nor another
 * address; a full listener closes its oldest idle unauthenticated connection for a new one;
 * over-long raw bodies and HTTP versions other than 1.0 and 1.1 are refused.
 *
 * Memory is the daemon's own VmRSS and VmHWM from /proc/PID/status (the peak reset through
 * /proc/PID/clear_refs before the part measured). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "harness.h"
#include "util.h"

#define TOKEN "exhaustion-test-token-0123456789"
#define UPLOAD_SIZE (64u << 20)   /* the raw body limit */
#define UPLOADS 16                /* unauthenticated uploads at once */
#define RSS_SLACK_KIB (16u << 10) /* what the daemon may grow by under them */
#define FLOOD 2000                /* connections one client holds */
#define DEFAULT_PER_CLIENT 128    /* --max-connections-per-client's default */
#define DEFAULT_PER_LISTENER 1024 /* --max-connections' default */

static char dir[256];

/* ---- helpers ---- */

/* A field of /proc/PID/status in KiB ("VmRSS", "VmHWM"), which must be there. */
static long
proc_kib(pid_t pid, const char *field)
{
	long v = harness_proc_kib(pid, field);

	assert_true(v > 0);
	return v;
}

static void
write_token(void)
{
	char path[300];
	int fd;

	snprintf(path, sizeof(path), "%s/token", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, TOKEN "\n", strlen(TOKEN) + 1), (ssize_t)strlen(TOKEN) + 1);
	close(fd);
}

/* sandboxd-fake on a unix socket and 127.0.0.1:port with the token, plus extra flags. */
static void
start(struct daemon_proc *p, int port, const char *const *extra, const char *const *env)
{
	char listen[64], tok[300];
	const char *args[24];
	size_t n = 0;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(tok, sizeof(tok), "%s/token", dir);
	args[n++] = "--listen";
	args[n++] = listen;
	args[n++] = "--token-file";
	args[n++] = tok;
	for (size_t i = 0; extra && extra[i]; i++) {
		assert_true(n < ARRAY_SIZE(args) - 1);
		args[n++] = extra[i];
	}
	args[n] = NULL;
	assert_int_equal(harness_start(p, harness_binary("SANDBOXD_FAKE"), args, env), 0);
}

static void
stop(struct daemon_proc *p)
{
	int rc = harness_stop(p, SIGTERM);

	harness_cleanup(p);
	/* a clean exit also means no sanitizer report at shutdown */
	assert_int_equal(rc, 0);
}

/* A TCP connection to 127.0.0.1:port from the address from (NULL: any), or -1. */
static int
tcp_from(const char *from, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
		                  .sin_port = htons((uint16_t)port),
		                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (from) {
		struct sockaddr_in me = { .sin_family = AF_INET };
		assert_int_equal(inet_pton(AF_INET, from, &me.sin_addr), 1);
		if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
			close(fd);
			return -1;
		}
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int
status_of(const char *resp)
{
	int status = -1;

	if (resp)
		sscanf(resp, "HTTP/1.1 %d", &status);
	return status;
}

static void
send_str(int fd, const char *s)
{
	assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* Reads one answer's head from fd (up to the blank line), waiting at most timeout_ms; the
 * status, or -1 when none came (the connection closed, or the time ran out). */
static int
read_status(int fd, int timeout_ms, char *buf, size_t size)
{
	uint64_t end = now_mono_ms() + (uint64_t)timeout_ms;
	size_t len = 0;

	buf[0] = '\0';
	while (!strstr(buf, "\r\n\r\n") && len < size - 1) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = now_mono_ms();
		ssize_t k;

		if (now >= end || poll(&pfd, 1, (int)(end - now)) != 1)
			return -1;
		k = recv(fd, buf + len, size - 1 - len, 0);
		if (k <= 0)
			return -1;
		len += (size_t)k;
		buf[len] = '\0';
	}
	return status_of(buf);
}

/* GET /v1/health on fd (keep-alive); its status. */
static int
health_on(int fd)
{
	char buf[4096];

	send_str(fd, "GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n");
	return read_status(fd, 15000, buf, sizeof(buf));
}

/* Whether the server closed fd within timeout_ms (end of file, or a reset). */
static bool
closed_by_server(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&pfd, 1, timeout_ms) != 1)
		return false;
	return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* The test process holds FLOOD sockets and more: raise its descriptor limit. */
static bool
raise_nofile(rlim_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return false;
	if (rl.rlim_cur >= want)
		return true;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
		return false;
	rl.rlim_cur = want;
	return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

/* ---- (a) unauthenticated uploads ---- */

struct upload {
	int fd;
	size_t sent;
	bool send_ended; /* the server stopped taking bytes (closed, reset) */
	char resp[4096];
	size_t resp_len;
};

/* Sixteen clients without a credential each announce a 64 MiB file write and push its bytes,
 * all but the last one (a body never complete, held open). Each is told 401 at its head,
 * before the body, and the connection is closed with the body unread; the daemon's memory
 * stays within 16 MiB of what it was idle, its peak included. Before the server judged heads,
 * it read every body whole first: RSS grew by about a GiB and no answer came. */
static void
test_unauthenticated_uploads(void **state)
{
	struct daemon_proc p;
	int port = harness_free_port();
	static struct upload up[UPLOADS];
	static char chunk[65536];
	char head[512], *resp = NULL;
	long idle, under, peak = -1;
	bool peak_ok;
	uint64_t deadline;

	start(&p, port, NULL, NULL);
	/* warm-up: the path once, answered, so the idle reading holds what it uses */
	snprintf(head, sizeof(head),
	         "PUT /v1/sandboxes/sbx_0000000000000000/files?path=/x HTTP/1.1\r\n"
	         "Host: localhost\r\nContent-Type: application/octet-stream\r\n"
	         "Content-Length: %u\r\n\r\n",
	         UPLOAD_SIZE);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(harness_request(&(struct harness_req){ .port = port,
		                                                        .method = "GET",
		                                                        .path = "/v1/health" },
		                                 NULL),
		                 200);
	}
	usleep(200000);
	idle = proc_kib(p.pid, "VmRSS");
	peak_ok = harness_reset_peak(p.pid);

	for (int i = 0; i < UPLOADS; i++) {
		up[i] = (struct upload){ .fd = tcp_from(NULL, port) };
		assert_true(up[i].fd >= 0);
		send_str(up[i].fd, head);
		assert_int_equal(fcntl(up[i].fd, F_SETFL, O_NONBLOCK), 0);
	}
	/* push bodies and read answers until every client has its answer and either sent all
	 * but the last byte or was cut off */
	deadline = now_mono_ms() + 120000;
	for (;;) {
		struct pollfd pfd[UPLOADS];
		bool busy = false;

		for (int i = 0; i < UPLOADS; i++) {
			bool want_send = !up[i].send_ended && up[i].sent < UPLOAD_SIZE - 1;
			bool want_read = !strstr(up[i].resp, "\r\n\r\n");
			pfd[i] = (struct pollfd){ .fd = up[i].fd,
				                  .events = (short)((want_send ? POLLOUT : 0) |
				                                    (want_read ? POLLIN : 0)) };
			busy |= want_send || want_read;
			if (!want_send && !want_read)
				pfd[i].fd = -1;
		}
		if (!busy || now_mono_ms() > deadline)
			break;
		if (poll(pfd, UPLOADS, 1000) < 0)
			break;
		for (int i = 0; i < UPLOADS; i++) {
			struct upload *u = &up[i];
			if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
				ssize_t k = recv(u->fd, u->resp + u->resp_len,
				                 sizeof(u->resp) - 1 - u->resp_len, 0);
				if (k > 0) {
					u->resp_len += (size_t)k;
					u->resp[u->resp_len] = '\0';
				} else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
					/* nothing more will come: stop waiting for it */
					u->send_ended = true;
					if (!strstr(u->resp, "\r\n\r\n"))
						snprintf(u->resp, sizeof(u->resp),
						         "closed\r\n\r\n");
				}
			}
			if (!u->send_ended && (pfd[i].revents & POLLOUT)) {
				size_t n = MIN(sizeof(chunk), UPLOAD_SIZE - 1 - u->sent);
				ssize_t k = send(u->fd, chunk, n, MSG_NOSIGNAL);
				if (k > 0)
					u->sent += (size_t)k;
				else if (k < 0 && errno != EAGAIN && errno != EINTR)
					u->send_ended = true; /* reset: the server closed it */
			}
		}
	}
	/* measured while every client still holds its socket */
	under = proc_kib(p.pid, "VmRSS");
	if (peak_ok)
		peak = proc_kib(p.pid, "VmHWM");
	print_message("daemon RSS idle %ld KiB, under %d unauthenticated uploads %ld KiB, peak "
	              "%ld KiB\n",
	              idle, UPLOADS, under, peak);
	for (int i = 0; i < UPLOADS; i++) {
		struct upload *u = &up[i];
		if (status_of(u->resp) != 401)
			fail_msg("upload %d (%zu bytes sent): no 401 at its head: '%.60s'", i,
			         u->sent, u->resp);
		assert_non_null(strstr(u->resp, "\r\nConnection: close\r\n"));
		/* the server closed it with the body unread, long before all of it was sent */
		if (!u->send_ended && !closed_by_server(u->fd, 10000))
			fail_msg("upload %d: still open after its 401 (%zu bytes sent)", i,
			         u->sent);
		assert_true(u->sent < UPLOAD_SIZE - 1);
	}
	assert_true(under - idle < (long)RSS_SLACK_KIB);
	if (peak_ok)
		assert_true(peak - idle < (long)RSS_SLACK_KIB);
	for (int i = 0; i < UPLOADS; i++)
		close(up[i].fd);
	/* and the daemon serves as before */
	assert_int_equal(harness_request(&(struct harness_req){ .port = port,
	                                                        .method = "GET",
	                                                        .path = "/v1/health" },
	                                 &resp),
	                 200);
	free(resp);
	stop(&p);
}

/* Heads answered before their bodies: a JSON route without a credential (401), a raw route
 * with one but no such sandbox (404) or a method the path does not take (405), a raw body
 * over 64 MiB (413, R-A9), a login body over 64 KiB (413: what needs no credential may not
 * hold a MiB); and HTTP/1.2 and HTTP/1.9 (400: only 1.0 and 1.1 are spoken).
 * Only the head is sent: each answer comes without a byte of its body. */
static void
test_early_answers(void **state)
{
	static const struct {
		const char *head;
		int status;
		const char *code;
	} cases[] = {
		{ "POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
		  "application/json\r\nContent-Length: 1000\r\n\r\n",
		  401, "unauthorized" },
		{ "PUT /v1/sandboxes/sbx_0000000000000000/files?path=/x HTTP/1.1\r\nHost: "
		  "localhost\r\nAuthorization: Bearer " TOKEN "\r\nContent-Length: 1000000\r\n\r\n",
		  404, "not_found" },
		{ "POST /v1/sandboxes/sbx_0000000000000000/files?path=/x HTTP/1.1\r\nHost: "
		  "localhost\r\nAuthorization: Bearer " TOKEN "\r\nContent-Length: 1000000\r\n\r\n",
		  405, "invalid_request" },
		{ "PUT /v1/sandboxes/sbx_0000000000000000/files?path=/x HTTP/1.1\r\nHost: "
		  "localhost\r\nAuthorization: Bearer " TOKEN
		  "\r\nContent-Length: 67108865\r\n\r\n",
		  413, "invalid_request" },
		{ "POST /v1/sandboxes/sbx_0000000000000000/processes/1/stdin HTTP/1.1\r\nHost: "
		  "localhost\r\nContent-Length: 67108865\r\n\r\n",
		  413, "invalid_request" },
		{ "PUT /v1/sandboxes/sbx_0000000000000000/files?path=/x HTTP/1.1\r\nHost: "
		  "localhost\r\nAuthorization: Bearer " TOKEN
		  "\r\nTransfer-Encoding: chunked\r\n\r\n",
		  404, "not_found" },
		{ "PUT /v1/sandboxes/sbx_0000000000000000/files?path=/x HTTP/1.1\r\nHost: "
		  "evil.example\r\nContent-Length: 1000000\r\n\r\n",
		  403, "forbidden_origin" },
		{ "POST /v1/auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
		  "application/json\r\nContent-Length: 65537\r\n\r\n",
		  413, "invalid_request" },
		{ "GET /v1/health HTTP/1.2\r\nHost: localhost\r\n\r\n", 400, "invalid_request" },
		{ "GET /v1/health HTTP/1.9\r\nHost: localhost\r\n\r\n", 400, "invalid_request" },
	};
	struct daemon_proc p;
	int port = harness_free_port();

	start(&p, port, NULL, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int fd = tcp_from(NULL, port);
		char *resp = NULL, want[64];
		size_t len = 0;

		assert_true(fd >= 0);
		send_str(fd, cases[i].head);
		/* the whole answer, and the server's close, with no body sent (a server waiting
		 * for the body would answer only after its 60 s) */
		if (harness_stream_read(fd, 15000, NULL, &resp, &len) != 1)
			fail_msg("case %zu: not answered and closed: '%.80s'", i, resp ? resp : "");
		if (status_of(resp) != cases[i].status)
			fail_msg("case %zu: expected %d: '%.80s'", i, cases[i].status, resp);
		assert_non_null(strstr(resp, "\r\nConnection: close\r\n"));
		snprintf(want, sizeof(want), "\"code\":\"%s\"", cases[i].code);
		if (!strstr(resp, want))
			fail_msg("case %zu: no %s in '%s'", i, want, resp);
		free(resp);
		close(fd);
	}
	stop(&p);
}

/* ---- (b) an authorised 64 MiB write ---- */

static const char *
guestd_or_skip(void)
{
	const char *g = getenv("SANDBOX_GUESTD");

	if (!g || access(g, X_OK) < 0) {
		harness_skip_case(
		        "SANDBOX_GUESTD is not set to sandbox-guestd (run through ctest)");
		return NULL;
	}
	return g;
}

/* The fake backend's agent process (sandbox-guestd in test mode, listening under the
 * daemon's state directory), or -1. */
static pid_t
agent_pid(const struct daemon_proc *p)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = -1;

	assert_non_null(d);
	while (found < 0 && (e = readdir(d))) {
		char path[300], cmd[4096];
		size_t n;
		FILE *f;
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		n = fread(cmd, 1, sizeof(cmd) - 1, f);
		fclose(f);
		for (size_t i = 0; i < n; i++)
			if (cmd[i] == '\0')
				cmd[i] = ' ';
		cmd[n] = '\0';
		if (strstr(cmd, "--port ") && strstr(cmd, p->state))
			found = (pid_t)strtol(e->d_name, NULL, 10);
	}
	closedir(d);
	return found;
}

/* A fake sandbox with an agent, running; its id in id. */
static void
running_sandbox(struct daemon_proc *p, char *id, size_t size)
{
	json_t *j = harness_json(p->sock, "POST", "/v1/sandboxes", "{\"image\":\"busybox\"}", 201);
	uint64_t deadline = now_mono_ms() + 30000;

	snprintf(id, size, "%s", harness_str(j, "id"));
	json_decref(j);
	for (;;) {
		char path[64];
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
		j = harness_json(p->sock, "GET", path, NULL, 200);
		if (strcmp(harness_str(j, "state"), "running") == 0) {
			json_decref(j);
			return;
		}
		json_decref(j);
		if (now_mono_ms() > deadline)
			fail_msg("sandbox %s did not come up", id);
		usleep(50000);
	}
}

/* Sends head then body on a new TCP connection (all of it, as fast as the server reads) and
 * returns the answer's status. */
static int
put_tcp(int port, const char *head, const void *body, size_t len, char *resp, size_t size)
{
	int fd = tcp_from(NULL, port);
	const char *b = body;
	int status;

	assert_true(fd >= 0);
	send_str(fd, head);
	while (len > 0) {
		ssize_t k = send(fd, b, MIN(len, (size_t)(1u << 20)), MSG_NOSIGNAL);
		if (k <= 0)
			break;
		b += k;
		len -= (size_t)k;
	}
	status = read_status(fd, 60000, resp, size);
	close(fd);
	return status;
}

/* Entries of a directory, dot files (a write's temporary file) included. */
static int
entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

static bool
file_equals(const char *path, const void *data, size_t len)
{
	char *got = NULL;
	size_t got_len = 0;
	FILE *f = fopen(path, "rb");
	bool same;

	if (!f)
		return false;
	got = malloc(len + 1);
	assert_non_null(got);
	got_len = fread(got, 1, len + 1, f);
	fclose(f);
	same = got_len == len && memcmp(got, data, len) == 0;
	free(got);
	return same;
}

/* An authorised 64 MiB file write over TCP lands whole (the fake's agent is sandbox-guestd in
 * test mode, writing on this machine), while the daemon's peak memory rises by less than
 * 16 MiB: the body goes on to the agent in pieces, the connection read only as fast as the
 * agent takes them. Before, the daemon held the body whole and queued it whole for the agent
 * (about 128 MiB). A chunked body, whose length comes only at its end, lands as well; one cut
 * off halfway leaves no file behind, nor a temporary one; stdin streams the same way. */
static void
test_authorised_write(void **state)
{
	const char *guestd = guestd_or_skip();
	struct daemon_proc p;
	int port = harness_free_port();
	char env_agent[600], head[1024], resp[4096], target[400], path[600], id[64];
	static unsigned char data[UPLOAD_SIZE];
	long idle, peak;

	if (!guestd)
		return;
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", guestd);
	start(&p, port, NULL, (const char *const[]){ env_agent, NULL });
	running_sandbox(&p, id, sizeof(id));
	snprintf(target, sizeof(target), "%s/out", p.dir);
	assert_int_equal(mkdir(target, 0700), 0);

	for (size_t i = 0; i < UPLOAD_SIZE; i++)
		data[i] = (unsigned char)((i * 2654435761u) >> 13);

	/* warm-up: a small write, answered */
	snprintf(head, sizeof(head),
	         "PUT /v1/sandboxes/%s/files?path=%s/warm HTTP/1.1\r\nHost: localhost\r\n"
	         "Authorization: Bearer " TOKEN "\r\nContent-Type: application/octet-stream\r\n"
	         "Content-Length: 65536\r\nConnection: close\r\n\r\n",
	         id, target);
	assert_int_equal(put_tcp(port, head, data, 65536, resp, sizeof(resp)), 204);
	usleep(200000);
	idle = proc_kib(p.pid, "VmRSS");
	if (!harness_reset_peak(p.pid)) {
		stop(&p);
		harness_skip_case("cannot reset the daemon's peak RSS (/proc/PID/clear_refs)");
		return;
	}

	snprintf(head, sizeof(head),
	         "PUT /v1/sandboxes/%s/files?path=%s/big.bin HTTP/1.1\r\nHost: localhost\r\n"
	         "Authorization: Bearer " TOKEN "\r\nContent-Type: application/octet-stream\r\n"
	         "Content-Length: %u\r\nConnection: close\r\n\r\n",
	         id, target, UPLOAD_SIZE);
	if (put_tcp(port, head, data, UPLOAD_SIZE, resp, sizeof(resp)) != 204)
		fail_msg("the 64 MiB write: '%s'", resp);
	peak = proc_kib(p.pid, "VmHWM");
	print_message("daemon RSS before an authorised 64 MiB write %ld KiB, peak during it %ld "
	              "KiB (+%ld KiB)\n",
	              idle, peak, peak - idle);
	snprintf(path, sizeof(path), "%s/big.bin", target);
	assert_true(file_equals(path, data, UPLOAD_SIZE));
	assert_true(peak - idle < (long)RSS_SLACK_KIB);

	/* backpressure: with the agent stopped, the daemon stops reading the client once about
	 * 1 MiB waits for the agent, so the client cannot push the 32 MiB it announced, and the
	 * daemon holds no more than that; the agent going on lets the rest through */
	{
		pid_t agent = agent_pid(&p);
		size_t total = 32u << 20, sent = 0;
		long held;
		int fd = tcp_from(NULL, port);

		assert_true(agent > 0);
		assert_int_equal(kill(agent, SIGSTOP), 0);
		snprintf(head, sizeof(head),
		         "PUT /v1/sandboxes/%s/files?path=%s/held.bin HTTP/1.1\r\nHost: "
		         "localhost\r\n"
		         "Authorization: Bearer " TOKEN "\r\nContent-Length: %zu\r\n"
		         "Connection: close\r\n\r\n",
		         id, target, total);
		send_str(fd, head);
		assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
		for (;;) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			ssize_t k;
			/* two seconds without taking a byte: it stopped reading */
			if (sent == total || poll(&pfd, 1, 2000) != 1)
				break;
			k = send(fd, data + sent, MIN(total - sent, (size_t)(256u << 10)),
			         MSG_NOSIGNAL);
			assert_true(k > 0 || errno == EAGAIN);
			if (k > 0)
				sent += (size_t)k;
		}
		held = proc_kib(p.pid, "VmRSS");
		print_message("with the agent stopped: %zu of %zu bytes taken, daemon RSS %ld KiB "
		              "(+%ld KiB)\n",
		              sent, total, held, held - idle);
		assert_true(sent < total);
		assert_true(held - idle < (long)RSS_SLACK_KIB);
		assert_int_equal(kill(agent, SIGCONT), 0);
		assert_int_equal(fcntl(fd, F_SETFL, 0), 0);
		while (sent < total) {
			ssize_t k = send(fd, data + sent, total - sent, MSG_NOSIGNAL);
			assert_true(k > 0);
			sent += (size_t)k;
		}
		assert_int_equal(read_status(fd, 60000, resp, sizeof(resp)), 204);
		close(fd);
		snprintf(path, sizeof(path), "%s/held.bin", target);
		assert_true(file_equals(path, data, total));
		assert_int_equal(unlink(path), 0);
	}
	/* chunked: three chunks, the length known only at the end */
	{
		int fd = tcp_from(NULL, port);
		snprintf(head, sizeof(head),
		         "PUT /v1/sandboxes/%s/files?path=%s/chunked.bin HTTP/1.1\r\nHost: "
		         "localhost\r\nAuthorization: Bearer " TOKEN "\r\n"
		         "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
		         id, target);
		send_str(fd, head);
		send_str(fd, "6\r\nhello \r\n8\r\nchunked \r\n5\r\nworld\r\n0\r\n\r\n");
		assert_int_equal(read_status(fd, 30000, resp, sizeof(resp)), 204);
		close(fd);
		snprintf(path, sizeof(path), "%s/chunked.bin", target);
		assert_true(file_equals(path, "hello chunked world", 19));
	}
	/* a chunked body past 64 MiB: 413 once it passes, and the write is given up */
	{
		int fd = tcp_from(NULL, port);
		char size_line[32];
		snprintf(head, sizeof(head),
		         "PUT /v1/sandboxes/%s/files?path=%s/toolarge.bin HTTP/1.1\r\nHost: "
		         "localhost\r\nAuthorization: Bearer " TOKEN "\r\n"
		         "Transfer-Encoding: chunked\r\n\r\n",
		         id, target);
		send_str(fd, head);
		snprintf(size_line, sizeof(size_line), "%x\r\n", 1u << 20);
		for (unsigned i = 0; i <= UPLOAD_SIZE >> 20; i++) {
			/* one chunk of 1 MiB after another: the 65th goes past the limit */
			if (send(fd, size_line, strlen(size_line), MSG_NOSIGNAL) < 0 ||
			    send(fd, data, 1u << 20, MSG_NOSIGNAL) != (ssize_t)(1u << 20) ||
			    send(fd, "\r\n", 2, MSG_NOSIGNAL) != 2)
				break; /* the server closed it after its answer */
		}
		assert_int_equal(read_status(fd, 30000, resp, sizeof(resp)), 413);
		close(fd);
		for (uint64_t end = now_mono_ms() + 30000; entries(target) != 3;) {
			if (now_mono_ms() > end)
				fail_msg("the refused write left %d entries in %s, not 3",
				         entries(target), target);
			usleep(20000);
		}
	}
	/* cut off halfway: no file, and no temporary file beside where it would be */
	{
		int fd = tcp_from(NULL, port);
		snprintf(
		        head, sizeof(head),
		        "PUT /v1/sandboxes/%s/files?path=%s/cut.bin HTTP/1.1\r\nHost: localhost\r\n"
		        "Authorization: Bearer " TOKEN "\r\nContent-Length: %u\r\n\r\n",
		        id, target, 4u << 20);
		send_str(fd, head);
		assert_int_equal(send(fd, data, 2u << 20, MSG_NOSIGNAL), (ssize_t)(2u << 20));
		/* the bytes reached the agent (its temporary file grew) before the cut */
		for (uint64_t end = now_mono_ms() + 30000; entries(target) < 4;) {
			if (now_mono_ms() > end)
				fail_msg("no temporary file appeared for the cut write");
			usleep(20000);
		}
		close(fd);
		for (uint64_t end = now_mono_ms() + 30000; entries(target) != 3;) {
			if (now_mono_ms() > end)
				fail_msg("the cut write left %d entries in %s, not 3",
				         entries(target), target);
			usleep(20000);
		}
		snprintf(path, sizeof(path), "%s/cut.bin", target);
		assert_int_equal(access(path, F_OK), -1);
	}
	/* stdin: 8 MiB through a process that counts it */
	{
		char body[512], *out = NULL;
		json_t *j;
		int pid;

		snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
		snprintf(body, sizeof(body), "{\"argv\":[\"sh\",\"-c\",\"wc -c > %s/count\"]}",
		         target);
		j = harness_json(p.sock, "POST", path, body, 201);
		pid = (int)json_integer_value(json_object_get(j, "pid"));
		json_decref(j);
		snprintf(head, sizeof(head),
		         "POST /v1/sandboxes/%s/processes/%d/stdin?close=1 HTTP/1.1\r\nHost: "
		         "localhost\r\nAuthorization: Bearer " TOKEN "\r\nContent-Length: %u\r\n"
		         "Connection: close\r\n\r\n",
		         id, pid, 8u << 20);
		assert_int_equal(put_tcp(port, head, data, 8u << 20, resp, sizeof(resp)), 204);
		snprintf(path, sizeof(path), "%s/count", target);
		for (uint64_t end = now_mono_ms() + 30000;;) {
			free(out);
			out = NULL;
			if (harness_file_contains(path, "\n")) {
				FILE *f = fopen(path, "r");
				long n = -1;
				assert_non_null(f);
				assert_int_equal(fscanf(f, "%ld", &n), 1);
				fclose(f);
				assert_int_equal(n, 8l << 20);
				break;
			}
			if (now_mono_ms() > end)
				fail_msg("the process never counted its stdin");
			usleep(20000);
		}
	}
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	stop(&p);
}

/* The same streaming over TLS, where decrypted bytes can wait unseen by epoll while the
 * connection is paused: 8 MiB through curl over https land whole. */
static void
test_authorised_write_tls(void **state)
{
	const char *guestd = guestd_or_skip();
	struct daemon_proc p;
	int port = harness_free_port();
	char env_agent[600], cert[300], key[300], ca[300], src[400], url[600], target[400];
	char id[64], *out = NULL;
	static unsigned char data[8u << 20];
	FILE *f;

	if (!guestd)
		return;
	if (access("/usr/bin/curl", X_OK) < 0 || access("/usr/bin/openssl", X_OK) < 0) {
		harness_skip_case("no /usr/bin/curl or /usr/bin/openssl");
		return;
	}
	assert_int_equal(harness_make_certs(dir, "", false), 0);
	snprintf(cert, sizeof(cert), "%s/server.pem", dir);
	snprintf(key, sizeof(key), "%s/server.key", dir);
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", guestd);
	start(&p, port, (const char *const[]){ "--tls-cert", cert, "--tls-key", key, NULL },
	      (const char *const[]){ env_agent, NULL });
	running_sandbox(&p, id, sizeof(id));
	snprintf(target, sizeof(target), "%s/tls.bin", p.dir);
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)((i * 40503u) >> 7);
	snprintf(src, sizeof(src), "%s/tls-src.bin", dir);
	f = fopen(src, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, sizeof(data), f), sizeof(data));
	fclose(f);
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/v1/sandboxes/%s/files?path=%s", port, id,
	         target);
	{
		const char *args[] = { "-sS",
			               "--max-time",
			               "120",
			               "--cacert",
			               ca,
			               "-H",
			               "Authorization: Bearer " TOKEN,
			               "-H",
			               "Content-Type: application/octet-stream",
			               "-T",
			               src,
			               "-w",
			               "%{http_code}",
			               url,
			               NULL };
		assert_int_equal(harness_run("/usr/bin/curl", args, NULL, &out), 0);
	}
	if (strcmp(out, "204") != 0)
		fail_msg("PUT over TLS: '%s'", out);
	free(out);
	assert_true(file_equals(target, data, sizeof(data)));
	unlink(src);
	stop(&p);
}

/* ---- (c) one client holding thousands of connections ---- */

/* Opens FLOOD connections from 127.0.0.1 and holds them; returns how many the server
 * closed (it takes those it has no room for, and closes them). The server works through
 * the backlog at its own pace (slowly on a loaded machine): the count is taken again until
 * it reaches want or stops growing for 3 s. */
static int
flood(int port, int *fds, int want)
{
	static bool seen[FLOOD];
	int closed = 0, idle_ms = 0;

	for (int i = 0; i < FLOOD; i++) {
		seen[i] = false;
		fds[i] = tcp_from("127.0.0.1", port);
		if (fds[i] < 0)
			fail_msg("connection %d of the flood: %s", i, strerror(errno));
	}
	while (closed < want && idle_ms < 3000) {
		int before = closed;
		for (int i = 0; i < FLOOD; i++)
			if (!seen[i] && closed_by_server(fds[i], 0)) {
				seen[i] = true;
				closed++;
			}
		idle_ms = closed > before ? 0 : idle_ms + 100;
		if (closed < want)
			usleep(100000);
	}
	return closed;
}

static void
expect_served(struct daemon_proc *p, int port)
{
	int fd;

	/* the operator's unix socket */
	assert_int_equal(harness_http(p->sock, "GET", "/v1/health", NULL, NULL), 200);
	/* another address on loopback */
	fd = tcp_from("127.0.0.2", port);
	if (fd < 0)
		fail_msg("connect from 127.0.0.2: %s", strerror(errno));
	assert_int_equal(health_on(fd), 200);
	close(fd);
}

/* With the defaults (1024 per listener, 128 per client): one client's 2000 connections get
 * it 128, and the unix socket and 127.0.0.2 are answered. Before, the 1024 connections the
 * client got were every listener's: the unix socket was refused too. */
static void
test_flood_per_client(void **state)
{
	static int fds[FLOOD];
	struct daemon_proc p;
	int port = harness_free_port(), closed;

	if (!raise_nofile(FLOOD + 512)) {
		harness_skip_case("cannot hold %d descriptors (RLIMIT_NOFILE)", FLOOD + 512);
		return;
	}
	start(&p, port, NULL, NULL);
	closed = flood(port, fds, FLOOD - DEFAULT_PER_CLIENT);
	print_message("%d of %d connections from one client closed at once\n", closed, FLOOD);
	assert_true(closed >= FLOOD - DEFAULT_PER_CLIENT);
	expect_served(&p, port);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	stop(&p);
}

/* The preview listener (--preview-listen) has the same budgets: one client's 2000 connections,
 * each stopped half-way through an upgrade's head, get it 128 (the rest are closed at once),
 * the API and another address are still answered there, and a request head that never ends is
 * answered 431 and closed after at most the head limit (not read on forever). */
static void
test_preview_listener_budgets(void **state)
{
	static int fds[FLOOD];
	static char line[4096];
	struct daemon_proc p;
	int port = harness_free_port(), pport = harness_free_port(), closed, fd;
	char listen[64], buf[4096];
	size_t sent = 0;

	if (!raise_nofile(FLOOD + 512)) {
		harness_skip_case("cannot hold %d descriptors (RLIMIT_NOFILE)", FLOOD + 512);
		return;
	}
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", pport);
	start(&p, port, (const char *const[]){ "--preview-listen", listen, NULL }, NULL);
	closed = flood(pport, fds, FLOOD - DEFAULT_PER_CLIENT);
	print_message("%d of %d preview connections from one client closed at once\n", closed,
	              FLOOD);
	assert_true(closed >= FLOOD - DEFAULT_PER_CLIENT);
	/* the ones kept stop half-way through a WebSocket upgrade's head */
	for (int i = 0; i < FLOOD; i++)
		(void)send(fds[i],
		           "GET /ws HTTP/1.1\r\nHost: p-0123456789abcdef-3000.localhost\r\n"
		           "Connection: Upgrade\r\nUpgr",
		           84, MSG_NOSIGNAL);
	expect_served(&p, port);
	/* another client of the preview listener: its own page */
	fd = tcp_from("127.0.0.2", pport);
	assert_true(fd >= 0);
	send_str(fd, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
	assert_int_equal(read_status(fd, 15000, buf, sizeof(buf)), 404);
	close(fd);
	/* a head that never ends */
	fd = tcp_from("127.0.0.2", pport);
	assert_true(fd >= 0);
	send_str(fd, "GET / HTTP/1.1\r\nHost: p-0123456789abcdef-3000.localhost\r\n");
	memset(line, 'a', sizeof(line));
	memcpy(line, "X-Endless: ", 11);
	line[sizeof(line) - 2] = '\r';
	line[sizeof(line) - 1] = '\n';
	while (sent < (64u << 20)) {
		ssize_t k = send(fd, line, sizeof(line), MSG_NOSIGNAL);
		if (k <= 0)
			break;
		sent += (size_t)k;
	}
	print_message("the preview listener took %zu bytes of an endless head\n", sent);
	assert_true(sent < (8u << 20));
	assert_int_equal(read_status(fd, 15000, buf, sizeof(buf)), 431);
	close(fd);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	stop(&p);
}

/* With no per-client limit the client fills the TCP listener (1024): the unix socket, a
 * budget of its own, still answers, and so does 127.0.0.2, for whom the listener closes its
 * oldest idle unauthenticated connection. */
static void
test_flood_listener_budget(void **state)
{
	static int fds[FLOOD];
	const char *args[] = { "--max-connections-per-client", "0", NULL };
	struct daemon_proc p;
	int port = harness_free_port();

	if (!raise_nofile(FLOOD + 512)) {
		harness_skip_case("cannot hold %d descriptors (RLIMIT_NOFILE)", FLOOD + 512);
		return;
	}
	start(&p, port, args, NULL);
	(void)flood(port, fds, FLOOD - DEFAULT_PER_LISTENER);
	expect_served(&p, port);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	stop(&p);
}

/* ---- (d) which connection makes room ---- */

/* A listener of 4: c1 authenticates a request and stays, c2, c3 and c4 connect and wait.
 * c5 comes: c2, the oldest idle connection that never authenticated, is closed for it; c1
 * (older, but authenticated), c3, c4 and c5 are served. Before, c5 was refused. */
static void
test_oldest_idle_unauthenticated_goes(void **state)
{
	const char *args[] = { "--max-connections", "4", "--max-connections-per-client", "0",
		               NULL };
	struct daemon_proc p;
	int port = harness_free_port();
	int c[6];
	char buf[4096];

	start(&p, port, args, NULL);
	c[1] = tcp_from(NULL, port);
	assert_true(c[1] >= 0);
	send_str(c[1], "GET /v1/whoami HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " TOKEN
	               "\r\n\r\n");
	assert_int_equal(read_status(c[1], 15000, buf, sizeof(buf)), 200);
	for (int i = 2; i <= 4; i++) {
		c[i] = tcp_from(NULL, port);
		assert_true(c[i] >= 0);
		/* accepted before the next one connects (each its own moment) */
		usleep(50000);
	}
	assert_false(closed_by_server(c[2], 200));
	c[5] = tcp_from(NULL, port);
	assert_true(c[5] >= 0);
	assert_true(closed_by_server(c[2], 10000));
	for (int i = 1; i <= 5; i++)
		if (i != 2)
			assert_int_equal(health_on(c[i]), 200);
	for (int i = 1; i <= 5; i++)
		close(c[i]);
	stop(&p);
}

/* ---- budgets that fit the descriptors ---- */

/* Under a hard descriptor limit of 1500, the two listeners (the unix socket and TCP) cannot
 * each hold 1024 beside the 1024 descriptors kept for the rest: sandboxd says so and gives each
 * (1500 - 1024) / 2 = 238. 300 idle connections from one client then leave the 62 oldest
 * closed for the newest, and the unix socket still has room. */
static void
test_budgets_fit_fd_limit(void **state)
{
	static const char *const launcher[] = { "/usr/bin/prlimit", "--nofile=1500:1500", NULL };
	const char *args[] = { "--max-connections-per-client", "0", NULL };
	enum {
		N = 300,
		BUDGET = 238
	};
	static int fds[N];
	struct daemon_proc p;
	int port = harness_free_port();

	if (access(launcher[0], X_OK) < 0) {
		harness_skip_case("no %s to lower the daemon's descriptor limit", launcher[0]);
		return;
	}
	harness_set_launcher(launcher);
	start(&p, port, args, NULL);
	harness_set_launcher(NULL);
	assert_true(harness_file_contains(p.log, "each holds at most 238 connections"));
	for (int i = 0; i < N; i++) {
		fds[i] = tcp_from(NULL, port);
		assert_true(fds[i] >= 0);
	}
	/* the last connection's arrival closed the (N - BUDGET)th oldest, and those before it */
	assert_true(closed_by_server(fds[N - BUDGET - 1], 10000));
	for (int i = 0; i < N - BUDGET - 1; i++)
		assert_true(closed_by_server(fds[i], 1000));
	for (int i = N - BUDGET; i < N; i++)
		assert_false(closed_by_server(fds[i], 0));
	assert_int_equal(harness_http(p.sock, "GET", "/v1/health", NULL, NULL), 200);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	stop(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unauthenticated_uploads),
		cmocka_unit_test(test_early_answers),
		cmocka_unit_test(test_authorised_write),
		cmocka_unit_test(test_authorised_write_tls),
		cmocka_unit_test(test_flood_per_client),
		cmocka_unit_test(test_preview_listener_budgets),
		cmocka_unit_test(test_flood_listener_budget),
		cmocka_unit_test(test_oldest_idle_unauthenticated_goes),
		cmocka_unit_test(test_budgets_fit_fd_limit),
	};
	int failed;

	signal(SIGPIPE, SIG_IGN);
	if (harness_tmpdir(dir, sizeof(dir)) < 0)
		return 1;
	write_token();
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	{
		char cmd[400];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		(void)system(cmd);
	}
	return harness_exit_code(failed);
}
