/* test-run-limits.c: what runs and processes may take from sandboxd, against the real
 * sandboxd-fake whose agent is sandbox-guestd in test mode (real processes on this machine).
 * Concurrent runs and processes are bounded per sandbox and per user (429 with Retry-After for a
 * run, 409 for a process), and the counts go down as they end; forty runs printing 8 MiB each at
 * once cost the daemon about one copy of their output, given back when they end; a timeout is
 * exit code -1 with timed_out everywhere it shows, and the CLI's 124; reserved environment
 * names are refused on both routes (R-P7).
 *
 * Memory is the daemon's own VmRSS and VmHWM (/proc/PID/status). Under ASan the daemon runs with
 * a small quarantine: the default one (256 MiB) would keep what the daemon frees resident and
 * hide whether it gave it back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "base64.h"
#include "harness.h"
#include "util.h"

#define RUNS 40                     /* runs at once in the memory test */
#define RUN_OUTPUT (8u << 20)       /* what each prints: the daemon's cap per stream */
#define RING_KIB 1024               /* the process hub's ring, per process */
#define PEAK_SLACK_KIB (32u << 10)  /* beyond one copy of the output and the rings */
#define AFTER_SLACK_KIB (32u << 10) /* what may stay after they all ended */
#define ASAN_DAEMON "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:quarantine_size_mb=16"
#define WAIT_MS 60000
#define DRAIN_EVERY_MS 10000 /* how often a slow client reads what it was sent */

static const char *guestd;

/* ---- helpers ---- */

static bool
need_guestd(void)
{
	guestd = getenv("SANDBOX_GUESTD");
	if (!guestd || access(guestd, X_OK) < 0) {
		harness_skip_case(
		        "SANDBOX_GUESTD is not set to sandbox-guestd (run through ctest)");
		return false;
	}
	return true;
}

/* sandboxd-fake on a unix socket, its sandboxes' agent sandbox-guestd, plus extra flags. */
static void
start(struct daemon_proc *p, const char *const *extra)
{
	char agent[600];

	snprintf(agent, sizeof(agent), "SANDBOXD_FAKE_AGENT=%s", guestd);
	assert_int_equal(harness_start(p, harness_binary("SANDBOXD_FAKE"), extra,
	                               (const char *const[]){ agent, ASAN_DAEMON, NULL }),
	                 0);
}

static void
stop(struct daemon_proc *p)
{
	int rc = harness_stop(p, SIGTERM);

	harness_cleanup(p);
	/* a clean exit also means no sanitizer report at shutdown */
	assert_int_equal(rc, 0);
}

static const char *
path_of(char *buf, size_t size, const char *id, const char *suffix)
{
	snprintf(buf, size, "/v1/sandboxes/%s%s", id, suffix);
	return buf;
}

/* A running sandbox with an agent; its id in id. */
static void
running_sandbox(struct daemon_proc *p, char *id, size_t size)
{
	json_t *j = harness_json(p->sock, "POST", "/v1/sandboxes", "{\"image\":\"busybox\"}", 201);
	uint64_t deadline = now_mono_ms() + WAIT_MS;
	char path[96];

	snprintf(id, size, "%s", harness_str(j, "id"));
	json_decref(j);
	for (;;) {
		j = harness_json(p->sock, "GET", path_of(path, sizeof(path), id, ""), NULL, 200);
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

/* How many of the sandbox's listed processes run now. */
static int
running_processes(struct daemon_proc *p, const char *id)
{
	char path[96];
	json_t *j = harness_json(p->sock, "GET", path_of(path, sizeof(path), id, "/processes"),
	                         NULL, 200),
	       *e;
	size_t i;
	int n = 0;

	json_array_foreach (json_object_get(j, "processes"), i, e)
		n += strcmp(harness_str(e, "state"), "running") == 0;
	json_decref(j);
	return n;
}

/* Waits until the sandbox has want running processes. */
static void
wait_running(struct daemon_proc *p, const char *id, int want)
{
	uint64_t deadline = now_mono_ms() + WAIT_MS;
	int n;

	while ((n = running_processes(p, id)) != want) {
		if (now_mono_ms() > deadline)
			fail_msg("sandbox %s: %d processes run, not %d", id, n, want);
		usleep(20000);
	}
}

/* Sends POST …/run with body on a connection of its own and returns it, unread. */
static int
run_open(struct daemon_proc *p, const char *id, const char *body)
{
	char path[96];
	int fd = harness_request_open(&(struct harness_req){
	        .sock = p->sock,
	        .method = "POST",
	        .path = path_of(path, sizeof(path), id, "/run"),
	        .body = body,
	});

	assert_true(fd >= 0);
	return fd;
}

/* A request expected to be refused: its status, and that the message names the flag. */
static void
expect_refused(struct daemon_proc *p, const char *path, const char *body, int status,
               const char *code, const char *flag, bool retry_after)
{
	char *head = NULL, *resp = NULL, want[64], *ra;
	uint64_t secs = 0;
	int got = harness_http_headers(p->sock, "POST", path, NULL, body, &head, &resp);

	if (got != status)
		fail_msg("POST %s %s: expected %d, got %d: %s", path, body, status, got, resp);
	snprintf(want, sizeof(want), "\"code\":\"%s\"", code);
	harness_expect_in(resp, want);
	harness_expect_in(resp, flag);
	ra = harness_header(head, "retry-after");
	if (retry_after && (!ra || parse_u64(ra, &secs) < 0 || secs < 1))
		fail_msg("POST %s: a 429 without Retry-After: %s", path, head);
	free(ra);
	free(head);
	free(resp);
}

/* ---- limits ---- */

/* With two runs and two processes per sandbox, three of each per user: a third run in a
 * sandbox is 429 with Retry-After naming --max-runs-per-sandbox, a run past the user's three
 * (in another sandbox of theirs) names --max-runs-per-user; processes the same with 409 and
 * their flags. Runs and processes count apart. When a run's client leaves (its process is
 * killed) and when a process exits, their slots come back; an exited process still listed
 * does not count. Before, nothing bounded them. */
static void
test_runs_and_processes_are_bounded(void **state)
{
	const char *args[] = { "--max-runs-per-sandbox",
		               "2",
		               "--max-runs-per-user",
		               "3",
		               "--max-processes-per-sandbox",
		               "2",
		               "--max-processes-per-user",
		               "3",
		               NULL };
	const char *sleep_body = "{\"argv\":[\"sleep\",\"600\"]}";
	struct daemon_proc p;
	char a[64], b[64], path[96], sig[128];
	int held[3];
	json_t *j;
	long long pa1;
	uint64_t deadline;
	int status;

	if (!need_guestd())
		return;
	start(&p, args);
	running_sandbox(&p, a, sizeof(a));
	running_sandbox(&p, b, sizeof(b));

	/* two runs under way in a, one in b: the user's three */
	held[0] = run_open(&p, a, sleep_body);
	held[1] = run_open(&p, a, sleep_body);
	wait_running(&p, a, 2);
	expect_refused(&p, path_of(path, sizeof(path), a, "/run"), "{\"argv\":[\"true\"]}", 429,
	               "rate_limited", "--max-runs-per-sandbox", true);
	held[2] = run_open(&p, b, sleep_body);
	wait_running(&p, b, 1);
	expect_refused(&p, path_of(path, sizeof(path), b, "/run"), "{\"argv\":[\"true\"]}", 429,
	               "rate_limited", "--max-runs-per-user", true);

	/* runs are not processes: two of those start in a, one in b */
	path_of(path, sizeof(path), a, "/processes");
	j = harness_json(p.sock, "POST", path, sleep_body, 201);
	pa1 = json_integer_value(json_object_get(j, "pid"));
	json_decref(j);
	json_decref(harness_json(p.sock, "POST", path, sleep_body, 201));
	expect_refused(&p, path, sleep_body, 409, "conflict", "--max-processes-per-sandbox", false);
	path_of(path, sizeof(path), b, "/processes");
	json_decref(harness_json(p.sock, "POST", path, sleep_body, 201));
	expect_refused(&p, path, sleep_body, 409, "conflict", "--max-processes-per-user", false);

	/* a run whose client left is killed; its slot comes back once it ended */
	close(held[0]);
	deadline = now_mono_ms() + WAIT_MS;
	path_of(path, sizeof(path), a, "/run");
	while ((status = harness_http(p.sock, "POST", path, "{\"argv\":[\"true\"]}", NULL)) !=
	       200) {
		assert_int_equal(status, 429);
		if (now_mono_ms() > deadline)
			fail_msg("the slot of a run whose client left never came back");
		usleep(50000);
	}

	/* a process that exited gives its slot back, though it is still listed */
	snprintf(sig, sizeof(sig), "/v1/sandboxes/%s/processes/%lld/signal", a, pa1);
	assert_int_equal(harness_http(p.sock, "POST", sig, "{\"signal\":\"KILL\"}", NULL), 204);
	wait_running(&p, a, 2); /* the other process and the run still held */
	path_of(path, sizeof(path), a, "/processes");
	json_decref(harness_json(p.sock, "POST", path,
	                         "{\"argv\":[\"sleep\",\"600\"],\"keep\":true}", 201));
	/* a kept one counts too while it runs */
	expect_refused(&p, path, sleep_body, 409, "conflict", "--max-processes-per-sandbox", false);

	close(held[1]);
	close(held[2]);
	json_decref(harness_json(p.sock, "DELETE", path_of(path, sizeof(path), a, ""), NULL, 204));
	json_decref(harness_json(p.sock, "DELETE", path_of(path, sizeof(path), b, ""), NULL, 204));
	stop(&p);
}

/* R-P7: a reserved environment name (the loader's and the shell's, and SANDBOXD_*) is 403 on
 * a run and on a process as on a create, beside a good one too, and nothing starts. */
static void
test_reserved_env_on_run_and_processes(void **state)
{
	static const char *const reserved[] = {
		"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",      "BASH_ENV",
		"ENV",        "SHELLOPTS",       "BASHOPTS",      "PS4",
		"IFS",        "GLOBIGNORE",      "SANDBOXD_AGENT"
	};
	struct daemon_proc p;
	char id[64], run[96], procs[96], body[256];

	if (!need_guestd())
		return;
	start(&p, NULL);
	running_sandbox(&p, id, sizeof(id));
	path_of(run, sizeof(run), id, "/run");
	path_of(procs, sizeof(procs), id, "/processes");
	for (size_t i = 0; i < ARRAY_SIZE(reserved); i++) {
		char *resp = NULL;
		snprintf(body, sizeof(body),
		         "{\"argv\":[\"true\"],\"env\":{\"GOOD\":\"1\",\"%s\":\"/tmp/x.so\"}}",
		         reserved[i]);
		assert_int_equal(harness_http(p.sock, "POST", run, body, &resp), 403);
		harness_expect_in(resp, "\"code\":\"refused\"");
		harness_expect_in(resp, reserved[i]);
		free(resp);
		assert_int_equal(harness_http(p.sock, "POST", procs, body, &resp), 403);
		harness_expect_in(resp, "\"code\":\"refused\"");
		free(resp);
	}
	/* nothing started: no process listed, no process.started in the audit trail */
	assert_int_equal(running_processes(&p, id), 0);
	{
		char *resp = NULL;
		assert_int_equal(harness_http(p.sock, "GET",
		                              path_of(run, sizeof(run), id, "/events"), NULL,
		                              &resp),
		                 200);
		harness_expect_not_in(resp, "process.started");
		free(resp);
	}
	json_decref(harness_json(p.sock, "DELETE", path_of(run, sizeof(run), id, ""), NULL, 204));
	stop(&p);
}

/* ---- memory ---- */

struct answer {
	int fd;
	char *data; /* NUL-terminated */
	size_t len;
	bool begun, closed;
	uint64_t drained; /* when it was last read */
};

/* Reads what the socket holds of an answer now (at most 1 MiB: the others wait their turn), as
 * a slow client does now and then. 0 when the server closed it (the answer is whole), 1 when
 * it is open. */
static int
trickle(struct answer *a)
{
	char buf[65536];
	ssize_t k = 0;

	for (int i = 0; i < 16 && (k = recv(a->fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0; i++) {
		a->data = realloc(a->data, a->len + (size_t)k + 1);
		assert_non_null(a->data);
		memcpy(a->data + a->len, buf, (size_t)k);
		a->len += (size_t)k;
		a->data[a->len] = '\0';
	}
	a->drained = now_mono_ms();
	return k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR) ? 0 : 1;
}

/* Forty runs at once (the per-sandbox limit raised to let them), each printing 8 MiB, whose
 * clients read only now and then until every run has ended: the daemon holds about one copy of
 * their output (40 x 8 MiB) and the process hubs' rings, not their base64 answers on top; and once
 * they are all answered, its memory is back near where it was. Every answer is whole. Before,
 * each run built its whole answer in memory and queued it whole: the peak here went to
 * 450-480 MiB above idle (ASan and a release build), against 336-360 MiB now. */
static void
test_concurrent_runs_memory(void **state)
{
	const char *args[] = { "--max-runs-per-sandbox", "40", NULL };
	static struct answer ans[RUNS];
	struct daemon_proc p;
	char id[64], body[128], path[96];
	long idle, peak, after, bound;
	uint64_t deadline;
	int ready = 0;

	if (!need_guestd())
		return;
	start(&p, args);
	running_sandbox(&p, id, sizeof(id));
	/* warm-up: a few runs, answered, so the idle reading holds what serving them uses */
	path_of(path, sizeof(path), id, "/run");
	for (int i = 0; i < 3; i++)
		json_decref(harness_json(p.sock, "POST", path,
		                         "{\"argv\":[\"head\",\"-c\",\"65536\",\"/dev/zero\"]}",
		                         200));
	usleep(300000);
	idle = harness_proc_kib(p.pid, "VmRSS");
	if (idle < 0 || !harness_reset_peak(p.pid)) {
		stop(&p);
		harness_skip_case("cannot read or reset the daemon's memory (/proc/PID)");
		return;
	}

	snprintf(body, sizeof(body), "{\"argv\":[\"head\",\"-c\",\"%u\",\"/dev/zero\"]}",
	         RUN_OUTPUT);
	for (int i = 0; i < RUNS; i++)
		ans[i] = (struct answer){ .fd = run_open(&p, id, body) };
	/* an answer begins once its run has ended: wait until every one has begun, reading what
	 * the socket holds of each every few seconds meanwhile (a client that reads nothing for
	 * 30 s is dropped) */
	deadline = now_mono_ms() + 4 * WAIT_MS;
	while (ready < RUNS) {
		struct pollfd pfd[RUNS];
		for (int i = 0; i < RUNS; i++)
			pfd[i] = (struct pollfd){ .fd = ans[i].fd, .events = POLLIN };
		if (now_mono_ms() > deadline)
			fail_msg("%d of %d runs answered", ready, RUNS);
		assert_true(poll(pfd, RUNS, 1000) >= 0);
		for (int i = 0; i < RUNS; i++) {
			if (!(pfd[i].revents & POLLIN))
				continue;
			if (!ans[i].begun) {
				ans[i].begun = true;
				ans[i].drained = now_mono_ms();
				ready++;
			}
			if (now_mono_ms() - ans[i].drained > DRAIN_EVERY_MS)
				(void)trickle(&ans[i]);
		}
		usleep(200000);
	}
	/* now every client reads its answer to its end, all at once (one waiting for the
	 * others would be dropped after 30 s) */
	deadline = now_mono_ms() + 4 * WAIT_MS;
	for (int left = RUNS; left > 0;) {
		struct pollfd pfd[RUNS];
		for (int i = 0; i < RUNS; i++)
			pfd[i] = (struct pollfd){ .fd = ans[i].closed ? -1 : ans[i].fd,
				                  .events = POLLIN };
		if (now_mono_ms() > deadline)
			fail_msg("%d of %d answers did not end", left, RUNS);
		assert_true(poll(pfd, RUNS, 1000) >= 0);
		for (int i = 0; i < RUNS; i++)
			if (pfd[i].revents && trickle(&ans[i]) == 0) {
				ans[i].closed = true;
				left--;
			}
	}
	for (int i = 0; i < RUNS; i++) {
		struct answer *a = &ans[i];
		const char *blank;
		json_t *j;
		_cleanup_buf_ struct buf out = BUF_INIT(RUN_OUTPUT + 16);
		const json_t *s;

		if (strncmp(a->data, "HTTP/1.1 200 ", 13) != 0)
			fail_msg("run %d: '%.200s'", i, a->data);
		blank = strstr(a->data, "\r\n\r\n");
		assert_non_null(blank);
		j = json_loadb(blank + 4, a->len - (size_t)(blank + 4 - a->data), 0, NULL);
		if (!j)
			fail_msg("run %d: the answer is not JSON (%zu bytes)", i, a->len);
		assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), 0);
		assert_true(json_is_false(json_object_get(j, "truncated")));
		assert_true(json_is_false(json_object_get(j, "timed_out")));
		assert_true(json_is_false(json_object_get(j, "oom")));
		assert_int_equal(json_string_length(json_object_get(j, "stderr")), 0);
		s = json_object_get(j, "stdout");
		assert_int_equal(base64_decode(&out, json_string_value(s), json_string_length(s)),
		                 0);
		assert_int_equal(out.len, RUN_OUTPUT);
		for (size_t k = 0; k < out.len; k++)
			if (out.data[k] != 0)
				fail_msg("run %d: byte %zu of its output is not what it printed", i,
				         k);
		json_decref(j);
		free(a->data);
		close(a->fd);
	}
	peak = harness_proc_kib(p.pid, "VmHWM");
	usleep(500000);
	after = harness_proc_kib(p.pid, "VmRSS");
	bound = (long)RUNS * (RUN_OUTPUT / 1024 + RING_KIB) + (long)PEAK_SLACK_KIB;
	print_message("daemon RSS idle %ld KiB; %d runs of %u bytes at once: peak %ld KiB (+%ld "
	              "KiB, bound +%ld KiB); after %ld KiB (+%ld KiB)\n",
	              idle, RUNS, RUN_OUTPUT, peak, peak - idle, bound, after, after - idle);
	assert_true(peak - idle < bound);
	assert_true(after - idle < (long)AFTER_SLACK_KIB);
	json_decref(harness_json(p.sock, "DELETE", path_of(path, sizeof(path), id, ""), NULL, 204));
	stop(&p);
}

/* Reads one answer on a kept connection: its head, then exactly Content-Length bytes of
 * body (caller frees). */
static char *
read_answer(int fd, size_t *ret_body_len)
{
	char *data = NULL, *blank, *cl;
	size_t len = 0, want;
	uint64_t n = 0;

	if (harness_stream_read(fd, WAIT_MS, "\r\n\r\n", &data, &len) != 0)
		fail_msg("no answer on the kept connection: '%s'", data ? data : "");
	blank = strstr(data, "\r\n\r\n");
	cl = strstr(data, "Content-Length: ");
	if (!cl || cl > blank || sscanf(cl + 16, "%" SCNu64, &n) != 1)
		fail_msg("an answer without Content-Length: '%.300s'", data);
	want = (size_t)(blank + 4 - data) + (size_t)n;
	while (len < want) {
		char *more = NULL;
		size_t more_len = 0;
		if (harness_stream_read(fd, 1000, NULL, &more, &more_len) < 0 || more_len == 0)
			fail_msg("the answer ended %zu bytes short", want - len);
		data = realloc(data, len + more_len + 1);
		assert_non_null(data);
		memcpy(data + len, more, more_len + 1);
		len += more_len;
		free(more);
	}
	if (len != want)
		fail_msg("%zu bytes after the answer's body", len - want);
	*ret_body_len = (size_t)n;
	return data;
}

/* A run's answer, sent in pieces as the client reads it, has its Content-Length, and the
 * connection goes on to the next request (keep-alive) as after any answer. */
static void
test_run_answer_keeps_the_connection(void **state)
{
	struct daemon_proc p;
	char id[64], req[512], *ans;
	size_t body_len;
	int fd;

	if (!need_guestd())
		return;
	start(&p, NULL);
	running_sandbox(&p, id, sizeof(id));
	fd = harness_connect(p.sock, 0);
	assert_true(fd >= 0);
	for (int i = 0; i < 2; i++) {
		const char *body =
		        i == 0 ? "{\"argv\":[\"head\",\"-c\",\"1000000\",\"/dev/zero\"]}"
		               : "{\"argv\":[\"sh\",\"-c\",\"echo hi; echo ho >&2; exit 3\"]}";
		json_t *j;
		snprintf(req, sizeof(req),
		         "POST /v1/sandboxes/%s/run HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
		         "application/json\r\nContent-Length: %zu\r\n\r\n%s",
		         id, strlen(body), body);
		assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
		ans = read_answer(fd, &body_len);
		assert_non_null(strstr(ans, "HTTP/1.1 200 "));
		assert_non_null(strstr(ans, "Connection: keep-alive\r\n"));
		j = json_loads(strstr(ans, "\r\n\r\n") + 4, 0, NULL);
		assert_non_null(j);
		if (i == 0) {
			assert_int_equal(json_string_length(json_object_get(j, "stdout")),
			                 (1000000 + 2) / 3 * 4);
		} else {
			assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), 3);
			assert_string_equal(harness_str(j, "stdout"), "aGkK");
			assert_string_equal(harness_str(j, "stderr"), "aG8K");
		}
		json_decref(j);
		free(ans);
	}
	close(fd);
	stop(&p);
}

/* ---- timeouts ---- */

/* API v1: what its timeout_secs ended reports exit code -1 and timed_out true, in the run's
 * answer, the process object, the last line of its output, the audit trail's process.exited;
 * and sandbox-cli exec exits 124 (as timeout(1)) and says why. A user's SIGKILL stays 137. */
static void
test_timeouts_are_minus_one(void **state)
{
	struct daemon_proc p;
	char id[64], path[128], home[300], endpoint[400], *out = NULL, *resp = NULL;
	json_t *j, *e;
	long long pid;
	uint64_t deadline;
	size_t i;
	int minus, killed;

	if (!need_guestd())
		return;
	start(&p, NULL);
	running_sandbox(&p, id, sizeof(id));

	j = harness_json(p.sock, "POST", path_of(path, sizeof(path), id, "/run"),
	                 "{\"argv\":[\"sleep\",\"30\"],\"timeout_secs\":1}", 200);
	assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), -1);
	assert_true(json_is_true(json_object_get(j, "timed_out")));
	json_decref(j);

	j = harness_json(p.sock, "POST", path_of(path, sizeof(path), id, "/processes"),
	                 "{\"argv\":[\"sleep\",\"30\"],\"timeout_secs\":1}", 201);
	pid = json_integer_value(json_object_get(j, "pid"));
	assert_true(json_is_null(json_object_get(j, "timed_out"))); /* while it runs */
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld/output", id, pid);
	assert_int_equal(harness_http(p.sock, "GET", path, NULL, &resp), 200);
	harness_expect_in(resp, "{\"exit_code\":-1,\"timed_out\":true}\n");
	free(resp);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld", id, pid);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	assert_string_equal(harness_str(j, "state"), "exited");
	assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), -1);
	assert_true(json_is_true(json_object_get(j, "timed_out")));
	json_decref(j);

	/* the user's own SIGKILL is 137, and no timeout */
	j = harness_json(p.sock, "POST", path_of(path, sizeof(path), id, "/processes"),
	                 "{\"argv\":[\"sleep\",\"30\"],\"timeout_secs\":600}", 201);
	pid = json_integer_value(json_object_get(j, "pid"));
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld/signal", id, pid);
	assert_int_equal(harness_http(p.sock, "POST", path, "{\"signal\":\"KILL\"}", NULL), 204);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld/output", id, pid);
	assert_int_equal(harness_http(p.sock, "GET", path, NULL, &resp), 200);
	harness_expect_in(resp, "{\"exit_code\":137}\n");
	free(resp);

	/* the audit trail: two process.exited at -1 (the run's and the process's), one at 137 */
	deadline = now_mono_ms() + WAIT_MS;
	for (;;) {
		minus = killed = 0;
		j = harness_json(p.sock, "GET", path_of(path, sizeof(path), id, "/events"), NULL,
		                 200);
		json_array_foreach (json_object_get(j, "events"), i, e) {
			if (strcmp(harness_str(e, "type"), "process.exited") != 0)
				continue;
			minus += json_integer_value(json_object_get(e, "exit_code")) == -1;
			killed += json_integer_value(json_object_get(e, "exit_code")) == 137;
		}
		json_decref(j);
		if ((minus == 2 && killed == 1) || now_mono_ms() > deadline)
			break;
		usleep(50000);
	}
	if (minus != 2 || killed != 1)
		fail_msg("the audit trail has %d process.exited at -1 and %d at 137, not 2 and 1",
		         minus, killed);

	/* the CLI: exit 124, and a word on stderr */
	snprintf(home, sizeof(home), "HOME=%s", p.dir);
	snprintf(endpoint, sizeof(endpoint), "SANDBOX_ENDPOINT=unix://%s", p.sock);
	assert_int_equal(harness_run_checked(harness_binary("SANDBOX_CLI"),
	                                     (const char *const[]){ "exec", id, "--timeout", "1",
	                                                            "--", "sleep", "30", NULL },
	                                     (const char *const[]){ home, endpoint, NULL }, &out),
	                 124);
	harness_expect_in(out, "timeout");
	free(out);

	json_decref(harness_json(p.sock, "DELETE", path_of(path, sizeof(path), id, ""), NULL, 204));
	stop(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runs_and_processes_are_bounded),
		cmocka_unit_test(test_timeouts_are_minus_one),
		cmocka_unit_test(test_run_answer_keeps_the_connection),
		cmocka_unit_test(test_reserved_env_on_run_and_processes),
		cmocka_unit_test(test_concurrent_runs_memory),
	};
	int failed;

	signal(SIGPIPE, SIG_IGN);
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	return harness_exit_code(failed);
}
