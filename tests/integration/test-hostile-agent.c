/* test-hostile-agent.c: R-I7, the host <-> guest protocol treats the guest as hostile. A guest
 * agent that sends an oversized frame, a malformed one or bytes without end gets its channel
 * closed (the sandbox fails, saying it was a protocol violation), and the daemon's memory stays
 * flat: nothing the guest announces is allocated before it is checked.
 *
 * The guest here is tests/fake/hostile-agent, run by the fake backend in place of sandbox-guestd
 * (SANDBOXD_FAKE_AGENT): the real agent never breaks the protocol, so only a stand-in can.
 * Each sandbox's name tells it how to misbehave (see hostile-agent.c). */
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <jansson.h>
#include "harness.h"
#include "util.h"

#define WAIT_MS 60000
#define RSS_SLACK_KIB (16u << 10) /* what the daemon may grow by, its peak included */
#define TUNNELS_TRIED 70          /* opens of a tunnel whose guest never answers */
/* a small quarantine under ASan, so that what the daemon frees does not stay resident */
#define ASAN_DAEMON "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:quarantine_size_mb=4"

/* Creates a sandbox named name; its id in id. */
static void
create(const struct daemon_proc *p, const char *name, char *id, size_t id_size)
{
	char body[128];
	json_t *j;

	snprintf(body, sizeof(body), "{\"image\":\"busybox\",\"name\":\"%s\"}", name);
	j = harness_json(p->sock, "POST", "/v1/sandboxes", body, 201);
	snprintf(id, id_size, "%s", harness_str(j, "id"));
	json_decref(j);
}

/* Waits until sandbox id is in state want (running or failed); its reason (if any) in
 * reason. */
static void
wait_state(const struct daemon_proc *p, const char *id, const char *want, char *reason,
           size_t reason_size)
{
	char path[96];
	json_t *j;
	uint64_t deadline = now_mono_ms() + WAIT_MS;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	for (;;) {
		j = harness_json(p->sock, "GET", path, NULL, 200);
		if (strcmp(harness_str(j, "state"), want) == 0) {
			snprintf(reason, reason_size, "%s",
			         harness_str(j, "reason") ? harness_str(j, "reason") : "");
			json_decref(j);
			return;
		}
		if (now_mono_ms() > deadline)
			fail_msg("sandbox %s is %s, not %s", id, harness_str(j, "state"), want);
		json_decref(j);
		usleep(50000);
	}
}

static void
delete_sandbox(const struct daemon_proc *p, const char *id)
{
	char path[96];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p->sock, "DELETE", path, NULL, 204));
}

/* Starts sandboxd-fake with hostile-agent as its agent; false (the case skipped) without
 * it. */
static bool
start_hostile(struct daemon_proc *p)
{
	const char *agent = getenv("HOSTILE_AGENT");
	char env_agent[600];

	if (!agent || access(agent, X_OK) < 0) {
		harness_skip_case("HOSTILE_AGENT is not set to hostile-agent (run through ctest)");
		return false;
	}
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", agent);
	assert_int_equal(harness_start(p, harness_binary("SANDBOXD_FAKE"), NULL,
	                               (const char *const[]){ env_agent, ASAN_DAEMON, NULL }),
	                 0);
	return true;
}

/* The daemon's RSS now, with its peak reset to it; -1 (the daemon stopped, the case
 * skipped) when /proc cannot tell. */
static long
idle_rss(struct daemon_proc *p)
{
	long idle = harness_proc_kib(p->pid, "VmRSS");

	if (idle < 0 || !harness_reset_peak(p->pid)) {
		harness_stop(p, SIGTERM);
		harness_cleanup(p);
		harness_skip_case("cannot read or reset the daemon's memory (/proc/PID)");
		return -1;
	}
	return idle;
}

/* Each misbehaviour after an honest handshake: a run makes the agent answer with it, the
 * channel is closed at once (the run is told the sandbox went away, the sandbox fails with
 * "protocol violation"); a flood before the handshake is read and dropped until the connect
 * deadline gives up on it. Meanwhile the agent pushed a header announcing 4 GiB and two floods
 * of 256 MiB, and the daemon's RSS, its peak included, grew by less than 16 MiB. */
static void
test_hostile_agent(void **state)
{
	static const char *const after_handshake[] = { "oversized", "overmax", "badtype", "badexit",
		                                       "endless" };
	struct daemon_proc p;
	char id[64], reason[512], path[96], *resp = NULL;
	long idle, peak, now;
	int status;

	if (!start_hostile(&p))
		return;

	/* warm-up with an honest one: a sandbox, a refused run, its removal */
	create(&p, "honest", id, sizeof(id));
	wait_state(&p, id, "running", reason, sizeof(reason));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	assert_int_equal(harness_http(p.sock, "POST", path, "{\"argv\":[\"x\"]}", NULL), 400);
	delete_sandbox(&p, id);
	usleep(300000);
	idle = idle_rss(&p);
	if (idle < 0)
		return;

	for (size_t i = 0; i < ARRAY_SIZE(after_handshake); i++) {
		create(&p, after_handshake[i], id, sizeof(id));
		wait_state(&p, id, "running", reason, sizeof(reason));
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
		status = harness_http(p.sock, "POST", path, "{\"argv\":[\"x\"]}", &resp);
		if (status != 503)
			fail_msg("%s: the run was answered %d, not 503: %s", after_handshake[i],
			         status, resp);
		free(resp);
		wait_state(&p, id, "failed", reason, sizeof(reason));
		if (!strstr(reason, "protocol violation"))
			fail_msg("%s: the sandbox failed, but not for a protocol violation: '%s'",
			         after_handshake[i], reason);
		now = harness_proc_kib(p.pid, "VmRSS");
		print_message("%s: '%s'; daemon RSS +%ld KiB\n", after_handshake[i], reason,
		              now - idle);
		delete_sandbox(&p, id);
	}

	/* a flood where the session should start: nothing of it is kept, and it never becomes
	 * a session */
	create(&p, "flood", id, sizeof(id));
	wait_state(&p, id, "failed", reason, sizeof(reason));
	harness_expect_in(reason, "did not complete the handshake in time");
	delete_sandbox(&p, id);

	peak = harness_proc_kib(p.pid, "VmHWM");
	now = harness_proc_kib(p.pid, "VmRSS");
	print_message("daemon RSS idle %ld KiB, peak %ld KiB (+%ld KiB), now %ld KiB\n", idle, peak,
	              peak - idle, now);
	assert_true(peak - idle < (long)RSS_SLACK_KIB);
	/* and it serves as before */
	assert_int_equal(harness_http(p.sock, "GET", "/v1/health", NULL, NULL), 200);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* ---- tunnels ---- */

static bool
readable(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, timeout_ms) == 1;
}

/* Sends a tunnel request for port 8080 of id on a new connection. */
static int
tunnel_send(const struct daemon_proc *p, const char *id)
{
	int fd = harness_connect(p->sock, 0);
	_cleanup_free_ char *req = strdup_printf(
	        "GET /v1/sandboxes/%s/tunnel?port=8080 HTTP/1.1\r\nHost: localhost\r\n"
	        "Connection: Upgrade\r\nUpgrade: sbx-tunnel/1\r\n\r\n",
	        id);

	assert_true(fd >= 0);
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	return fd;
}

/* Reads an answer's head (byte by byte: nothing of the tunnel's bytes with it) into head;
 * returns its status, or -1 when none came within timeout_ms. */
static int
read_head(int fd, int timeout_ms, char *head, size_t size)
{
	size_t n = 0;
	int status = -1;

	while (n < size - 1 && !(n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0)) {
		if (!readable(fd, timeout_ms) || read(fd, head + n, 1) != 1)
			return -1;
		n++;
	}
	head[n] = '\0';
	return sscanf(head, "HTTP/1.1 %d", &status) == 1 ? status : -1;
}

/* Opens a tunnel to port 8080 of id: the status, the connection in *ret_fd. */
static int
tunnel_open(const struct daemon_proc *p, const char *id, int *ret_fd, char *head, size_t size)
{
	*ret_fd = tunnel_send(p, id);
	return read_head(*ret_fd, WAIT_MS, head, size);
}

/* Reads until the daemon closes the connection (EOF or a reset), dropping what comes. */
static void
expect_closed(int fd, const char *what)
{
	char chunk[65536];

	for (;;) {
		ssize_t k;
		if (!readable(fd, WAIT_MS))
			fail_msg("%s: the tunnel's connection stayed open", what);
		k = read(fd, chunk, sizeof(chunk));
		if (k <= 0)
			return;
	}
}

/* The honest sandbox's tunnel carries bytes both ways and ends cleanly. */
static void
echo_works(const struct daemon_proc *p, const char *id)
{
	char head[2048], buf[16];
	int fd, status = tunnel_open(p, id, &fd, head, sizeof(head));
	size_t got = 0;

	if (status != 101)
		fail_msg("the honest sandbox's tunnel was answered %d: %s", status, head);
	assert_int_equal(write(fd, "ping", 4), 4);
	while (got < 4) {
		ssize_t k;
		assert_true(readable(fd, WAIT_MS));
		k = read(fd, buf + got, sizeof(buf) - got);
		assert_true(k > 0);
		got += (size_t)k;
	}
	assert_memory_equal(buf, "ping", 4);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	assert_true(readable(fd, WAIT_MS));
	assert_int_equal(read(fd, buf, sizeof(buf)), 0);
	close(fd);
}

static void
expect_state(const struct daemon_proc *p, const char *id, const char *want)
{
	char path[96];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	j = harness_json(p->sock, "GET", path, NULL, 200);
	if (strcmp(harness_str(j, "state"), want) != 0)
		fail_msg("sandbox %s is %s, not %s", id, harness_str(j, "state"), want);
	json_decref(j);
}

/* A guest that breaks the tunnel part of the protocol: each violation closes its channel (the
 * sandbox fails for it, the daemon logs what the guest did, the tunnel's client is closed or
 * answered 503), while an honest sandbox's tunnel goes on working; a guest that never
 * acknowledges stdin holds the client back; one that never answers a tunnel's open holds at
 * most 64 of them, each answered at the connect timeout, and the rest are refused at once.
 * Nothing of it makes the daemon grow. */
static void
test_hostile_tunnels(void **state)
{
	static const struct {
		const char *mode;
		int status;      /* of the tunnel request */
		const char *why; /* in the failed sandbox's reason and the log */
	} violations[] = {
		{ "nopid", 503, "an EXEC's success without a PID" },
		{ "ackmore", 101, "STDIN_ACK for bytes never sent" },
		{ "ackback", 101, "STDIN_ACK for bytes never sent, or going backwards" },
		{ "wrongoffset", 101, "OUTPUT at the wrong offset" },
		{ "exittwice", 101, "EXIT twice" },
		{ "floodtun", 101, "OUTPUT beyond the window" },
	};
	struct daemon_proc p;
	char honest[64], id[64], reason[512], head[2048];
	static char chunk[65536];
	int fds[TUNNELS_TRIED], fd, status;
	long idle, peak, now, before;
	size_t sent = 0, refused = 0;

	if (!start_hostile(&p))
		return;
	create(&p, "echo", honest, sizeof(honest));
	wait_state(&p, honest, "running", reason, sizeof(reason));
	echo_works(&p, honest);
	usleep(300000);
	idle = idle_rss(&p);
	if (idle < 0)
		return;

	for (size_t i = 0; i < ARRAY_SIZE(violations); i++) {
		create(&p, violations[i].mode, id, sizeof(id));
		wait_state(&p, id, "running", reason, sizeof(reason));
		status = tunnel_open(&p, id, &fd, head, sizeof(head));
		if (status != violations[i].status)
			fail_msg("%s: the tunnel was answered %d, not %d: %s", violations[i].mode,
			         status, violations[i].status, head);
		if (status == 101 && strncmp(violations[i].mode, "ack", 3) == 0)
			assert_int_equal(write(fd, "hello", 5), 5);
		/* floodtun: the client reads nothing, so nothing is acknowledged */
		wait_state(&p, id, "failed", reason, sizeof(reason));
		if (!strstr(reason, "protocol violation") || !strstr(reason, violations[i].why))
			fail_msg("%s: the sandbox failed for '%s'", violations[i].mode, reason);
		if (!harness_file_contains(p.log, violations[i].why))
			fail_msg("%s: the daemon's log does not say '%s'", violations[i].mode,
			         violations[i].why);
		expect_closed(fd, violations[i].mode);
		close(fd);
		now = harness_proc_kib(p.pid, "VmRSS");
		print_message("%s: '%s'; daemon RSS +%ld KiB\n", violations[i].mode, reason,
		              now - idle);
		delete_sandbox(&p, id);
		echo_works(&p, honest); /* another sandbox is unaffected */
	}

	/* frames for handles nobody follows are ignored: no violation, the tunnel works */
	create(&p, "strays", id, sizeof(id));
	wait_state(&p, id, "running", reason, sizeof(reason));
	echo_works(&p, id);
	expect_state(&p, id, "running");
	delete_sandbox(&p, id);

	/* a guest that never acknowledges stdin: the client is held back (its bytes wait in
	 * its own socket), and the daemon holds about the window */
	create(&p, "noack", id, sizeof(id));
	wait_state(&p, id, "running", reason, sizeof(reason));
	assert_int_equal(tunnel_open(&p, id, &fd, head, sizeof(head)), 101);
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	memset(chunk, 'n', sizeof(chunk));
	before = harness_proc_kib(p.pid, "VmRSS");
	for (uint64_t deadline = now_mono_ms() + 3000;
	     now_mono_ms() < deadline && sent < (256u << 20);) {
		ssize_t k = send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL);
		if (k > 0)
			sent += (size_t)k;
		else
			usleep(20000);
	}
	now = harness_proc_kib(p.pid, "VmRSS");
	print_message("noack: the client got %zu bytes in; daemon RSS +%ld KiB\n", sent,
	              now - before);
	/* the window itself went through (it is 1 MiB: the tunnel carries, then holds back) */
	if (sent < (1u << 20))
		fail_msg("only %zu bytes went into the tunnel before it held back", sent);
	if (sent >= (16u << 20))
		fail_msg("the client could send %zu bytes to a guest that acknowledges none", sent);
	expect_state(&p, id, "running");
	close(fd);
	delete_sandbox(&p, id);

	/* a guest that never answers a tunnel's open */
	create(&p, "slowopen", id, sizeof(id));
	wait_state(&p, id, "running", reason, sizeof(reason));
	for (size_t i = 0; i < TUNNELS_TRIED; i++)
		fds[i] = tunnel_send(&p, id);
	usleep(2000000); /* every open has reached the guest, or been refused */
	for (size_t i = 0; i < TUNNELS_TRIED; i++) {
		if (!readable(fds[i], 0))
			continue;
		status = read_head(fds[i], 1000, head, sizeof(head));
		if (status != 503)
			fail_msg("slowopen: a tunnel was answered %d: %s", status, head);
		refused++;
		close(fds[i]);
		fds[i] = -1;
	}
	if (refused != TUNNELS_TRIED - 64)
		fail_msg("slowopen: %zu of %d tunnels were refused at once, not %d", refused,
		         TUNNELS_TRIED, TUNNELS_TRIED - 64);
	echo_works(&p, honest); /* meanwhile, another sandbox's tunnels open */
	/* the rest hear at the connect timeout (15 s) that the sandbox did not connect */
	for (size_t i = 0; i < TUNNELS_TRIED; i++) {
		if (fds[i] < 0)
			continue;
		status = read_head(fds[i], 30000, head, sizeof(head));
		if (status != 503)
			fail_msg("slowopen: a waiting tunnel was answered %d: %s", status, head);
		close(fds[i]);
	}
	harness_expect_in(head, "Connection: close");
	/* the guest still owes its 64 answers: more opens are refused at once */
	fd = tunnel_send(&p, id);
	assert_int_equal(read_head(fd, 5000, head, sizeof(head)), 503);
	close(fd);
	expect_state(&p, id, "running");
	delete_sandbox(&p, id);

	peak = harness_proc_kib(p.pid, "VmHWM");
	now = harness_proc_kib(p.pid, "VmRSS");
	print_message("daemon RSS idle %ld KiB, peak %ld KiB (+%ld KiB), now %ld KiB\n", idle, peak,
	              peak - idle, now);
	assert_true(peak - idle < (long)RSS_SLACK_KIB);
	echo_works(&p, honest);
	delete_sandbox(&p, honest);
	assert_int_equal(harness_http(p.sock, "GET", "/v1/health", NULL, NULL), 200);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile_agent),
		cmocka_unit_test(test_hostile_tunnels),
	};

	signal(SIGPIPE, SIG_IGN);
	return harness_exit_code(cmocka_run_group_tests(tests, NULL, NULL));
}
