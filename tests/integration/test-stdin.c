/* test-stdin.c: a process's stdin is lossless however slowly the process reads it, against the
 * real sandboxd-fake whose agent is sandbox-guestd in test mode (real processes on this
 * machine). 64 MiB go to a process that reads nothing for 3 s and then everything (`sleep 3;
 * cat > in.bin`), which prints the count and the SHA-256 of what it got: through a streamed
 * POST …/stdin, through attach's i frames (sbx-stream/1), and through `sandbox-cli exec` with
 * the file piped to it. Each arrives whole, and the daemon's peak memory meanwhile rises by
 * less than RSS_SLACK_KIB: the guest acknowledges stdin as the process takes it, the daemon
 * keeps at most a window of it in flight and reads its client no faster. Before, the guest
 * queued 16 MiB per process and dropped the rest, and every path still answered success.
 *
 * Memory is the daemon's own VmRSS and VmHWM from /proc/PID/status (the peak reset through
 * /proc/PID/clear_refs before the part measured), as in test-exhaustion. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include <openssl/sha.h>
#include "base64.h"
#include "buf.h"
#include "frame.h"
#include "harness.h"
#include "util.h"

#define DATA_SIZE (64u << 20)
#define RSS_SLACK_KIB (16u << 10) /* what the daemon may grow by while it streams */
#define WAIT_MS 120000
#define SLOW_READER                                                                                \
	"sleep 3; cat > in-%s.bin; wc -c < in-%s.bin; sha256sum < in-%s.bin; rm in-%s.bin"

static const char *guestd;
static unsigned char data[DATA_SIZE];
static char want[128]; /* what the reader prints for the whole of data */

static long
proc_kib(pid_t pid, const char *field)
{
	long v = harness_proc_kib(pid, field);

	assert_true(v > 0);
	return v;
}

static int
setup(void **state)
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	int n;

	(void)state;
	guestd = getenv("SANDBOX_GUESTD");
	if (!guestd || access(guestd, X_OK) < 0) {
		fprintf(stderr, "skip: SANDBOX_GUESTD is not set to sandbox-guestd (run through "
		                "ctest)\n");
		exit(77);
	}
	for (size_t i = 0; i < DATA_SIZE; i++)
		data[i] = (unsigned char)((i * 2654435761u) >> 13);
	SHA256(data, DATA_SIZE, md);
	n = snprintf(want, sizeof(want), "%u\n", DATA_SIZE);
	for (size_t i = 0; i < sizeof(md); i++)
		n += snprintf(want + n, sizeof(want) - (size_t)n, "%02x", md[i]);
	snprintf(want + n, sizeof(want) - (size_t)n, "  -\n");
	return 0;
}

/* sandboxd-fake with its agent; old_agent: one that stands in for an agent from before
 * FEATURES (it announces none and acknowledges no process's stdin). */
static void
start_agent(struct daemon_proc *p, bool old_agent)
{
	char agent[600];

	snprintf(agent, sizeof(agent), "SANDBOXD_FAKE_AGENT=%s", guestd);
	assert_int_equal(
	        harness_start(p, harness_binary("SANDBOXD_FAKE"), NULL,
	                      (const char *const[]){ agent,
	                                             old_agent ? "SANDBOX_GUESTD_FEATURES=0" : NULL,
	                                             NULL }),
	        0);
}

static void
start(struct daemon_proc *p)
{
	start_agent(p, false);
}

static void
stop(struct daemon_proc *p)
{
	int rc;

	harness_delete_all(p->sock);
	rc = harness_stop(p, SIGTERM);
	harness_cleanup(p);
	/* a clean exit also means no sanitizer report at shutdown */
	assert_int_equal(rc, 0);
}

/* A running sandbox; its id in id. */
static void
running_sandbox(struct daemon_proc *p, char *id, size_t size)
{
	json_t *j = harness_json(p->sock, "POST", "/v1/sandboxes", "{\"image\":\"busybox\"}", 201);
	uint64_t deadline = now_mono_ms() + WAIT_MS;
	char path[96];

	snprintf(id, size, "%s", harness_str(j, "id"));
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	for (;;) {
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

/* Starts the slow reader (its file named after tag); its pid. */
static long
start_reader(struct daemon_proc *p, const char *id, const char *tag)
{
	char path[96], cmd[256];
	json_t *body, *j;
	char *text;
	long pid;

	snprintf(cmd, sizeof(cmd), SLOW_READER, tag, tag, tag, tag);
	body = json_pack("{s:[s,s,s]}", "argv", "sh", "-c", cmd);
	text = json_dumps(body, JSON_COMPACT);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	j = harness_json(p->sock, "POST", path, text, 201);
	pid = (long)json_integer_value(json_object_get(j, "pid"));
	assert_true(pid > 0);
	json_decref(j);
	json_decref(body);
	free(text);
	return pid;
}

/* The process's stdout, from its NDJSON output once it exited (exit code 0). */
static char *
reader_output(struct daemon_proc *p, const char *id, long pid)
{
	struct buf out = BUF_INIT(1u << 20);
	char path[128], *text = NULL, *line, *save = NULL;
	size_t len = 0;
	int fd;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%ld/output", id, pid);
	fd = harness_stream_open(p->sock, "GET", path, NULL);
	assert_true(fd >= 0);
	(void)harness_stream_read(fd, WAIT_MS, "\"exit_code\"", &text, &len);
	close(fd);
	assert_non_null(text);
	harness_expect_in(text, "{\"exit_code\":0}");
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_t *j = json_loads(line, 0, NULL);
		const char *d = j ? json_string_value(json_object_get(j, "data")) : NULL;
		const char *s = j ? json_string_value(json_object_get(j, "stream")) : NULL;
		if (d && s && strcmp(s, "stdout") == 0)
			assert_int_equal(base64_decode(&out, d, strlen(d)), 0);
		json_decref(j);
	}
	free(text);
	assert_int_equal(buf_putc(&out, '\0'), 0);
	return buf_steal(&out);
}

/* Resets the daemon's peak; its RSS now (0 when the kernel cannot reset the peak). */
static long
measure_begin(struct daemon_proc *p)
{
	long idle = proc_kib(p->pid, "VmRSS");

	return harness_reset_peak(p->pid) ? idle : 0;
}

static void
measure_end(struct daemon_proc *p, long idle, const char *what)
{
	long peak;

	if (!idle)
		return; /* no peak to read */
	peak = proc_kib(p->pid, "VmHWM");
	print_message("%s: daemon RSS before %ld KiB, peak %ld KiB (+%ld KiB)\n", what, idle, peak,
	              peak - idle);
	assert_true(peak - idle < (long)RSS_SLACK_KIB);
}

/* Sends all of bytes on a non-blocking fd, handing what comes back meanwhile to in() (may be
 * NULL); false when the peer stopped taking bytes for 60 s. */
static bool
send_all(int fd, const void *bytes, size_t len, void (*in)(int fd, void *ctx), void *ctx)
{
	const uint8_t *b = bytes;

	while (len > 0) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT | (in ? POLLIN : 0) };
		ssize_t k;

		if (poll(&pfd, 1, 60000) != 1)
			return false;
		if ((pfd.revents & POLLIN) && in)
			in(fd, ctx);
		if (!(pfd.revents & POLLOUT))
			continue;
		k = send(fd, b, len, MSG_NOSIGNAL);
		if (k < 0 && errno == EAGAIN)
			continue;
		assert_true(k > 0);
		b += k;
		len -= (size_t)k;
	}
	return true;
}

/* POST …/stdin?close=1 with all of data, streamed (Content-Length, no JSON) to a new slow
 * reader: the answer's head in resp; the reader's output (caller frees). */
static char *
post_stdin(struct daemon_proc *p, const char *id, char *resp, size_t size)
{
	char head[512];
	long pid = start_reader(p, id, "post");
	size_t n = 0;
	int fd = harness_connect(p->sock, 0);

	assert_true(fd >= 0);
	resp[0] = '\0';
	snprintf(head, sizeof(head),
	         "POST /v1/sandboxes/%s/processes/%ld/stdin?close=1 HTTP/1.1\r\nHost: localhost\r\n"
	         "Content-Type: application/octet-stream\r\nContent-Length: %u\r\n"
	         "Connection: close\r\n\r\n",
	         id, pid, DATA_SIZE);
	assert_int_equal(send(fd, head, strlen(head), MSG_NOSIGNAL), (ssize_t)strlen(head));
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	if (!send_all(fd, data, DATA_SIZE, NULL, NULL))
		fail_msg("POST …/stdin: the daemon stopped taking the body");
	for (uint64_t end = now_mono_ms() + WAIT_MS; now_mono_ms() < end && n < size - 1;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t k;
		if (poll(&pfd, 1, 1000) != 1)
			continue;
		k = recv(fd, resp + n, size - 1 - n, 0);
		if (k <= 0)
			break;
		n += (size_t)k;
		resp[n] = '\0';
	}
	close(fd);
	return reader_output(p, id, pid);
}

/* POST …/stdin?close=1 with 64 MiB: 204, and every byte reaches the process. */
static void
test_post_stdin(void **state)
{
	struct daemon_proc p;
	char id[64], resp[4096];
	char *got;
	long idle;

	(void)state;
	start(&p);
	running_sandbox(&p, id, sizeof(id));
	idle = measure_begin(&p);
	got = post_stdin(&p, id, resp, sizeof(resp));
	harness_expect_in(resp, "HTTP/1.1 204");
	assert_string_equal(got, want);
	measure_end(&p, idle, "POST …/stdin of 64 MiB");
	free(got);
	stop(&p);
}

/* What the attach test reads back: sbx-stream/1 frames. */
struct attach_in {
	struct buf raw; /* bytes not yet a whole frame */
	struct buf out; /* o frames' payloads */
	bool exited;
	uint32_t code;
};

static void
attach_read(int fd, void *ctx)
{
	struct attach_in *a = ctx;
	char chunk[65536];
	ssize_t k = recv(fd, chunk, sizeof(chunk), 0);

	if (k <= 0)
		return;
	assert_int_equal(buf_append(&a->raw, chunk, (size_t)k), 0);
	while (buf_avail(&a->raw) >= 5) {
		const uint8_t *h = (const uint8_t *)buf_head(&a->raw);
		uint32_t n = be32_get(h + 1);
		if (buf_avail(&a->raw) < 5 + (size_t)n)
			break;
		if (h[0] == 'o')
			assert_int_equal(buf_append(&a->out, h + 5, n), 0);
		if (h[0] == 'x') {
			assert_int_equal(n, 4);
			a->exited = true;
			a->code = be32_get(h + 5);
		}
		buf_consume(&a->raw, 5 + (size_t)n);
	}
}

/* attach (sbx-stream/1): 64 MiB in i frames of 64 KiB, then e; the output comes back on the
 * same connection in o frames, then x. */
static void
test_attach_stdin(void **state)
{
	static uint8_t frame[5 + 65536];
	struct attach_in a = { .raw = BUF_INIT(8u << 20), .out = BUF_INIT(1u << 20) };
	struct daemon_proc p;
	char id[64], head[512], resp[1024] = "";
	long pid, idle;
	size_t n = 0;
	int fd;

	(void)state;
	start(&p);
	running_sandbox(&p, id, sizeof(id));
	pid = start_reader(&p, id, "attach");
	idle = measure_begin(&p);
	fd = harness_connect(p.sock, 0);
	assert_true(fd >= 0);
	snprintf(head, sizeof(head),
	         "GET /v1/sandboxes/%s/processes/%ld/attach HTTP/1.1\r\nHost: localhost\r\n"
	         "Connection: Upgrade\r\nUpgrade: sbx-stream/1\r\n\r\n",
	         id, pid);
	assert_int_equal(send(fd, head, strlen(head), MSG_NOSIGNAL), (ssize_t)strlen(head));
	/* the head, byte by byte: frames may follow it at once */
	while (!strstr(resp, "\r\n\r\n") && n < sizeof(resp) - 1) {
		assert_int_equal(recv(fd, resp + n, 1, 0), 1);
		resp[++n] = '\0';
	}
	harness_expect_in(resp, "HTTP/1.1 101");
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	frame[0] = 'i';
	be32_put(frame + 1, 65536);
	for (size_t off = 0; off < DATA_SIZE; off += 65536) {
		memcpy(frame + 5, data + off, 65536);
		if (!send_all(fd, frame, sizeof(frame), attach_read, &a))
			fail_msg("attach: the daemon stopped taking stdin at %zu bytes", off);
	}
	assert_true(send_all(fd, "e\0\0\0\0", 5, attach_read, &a));
	for (uint64_t end = now_mono_ms() + WAIT_MS; !a.exited && now_mono_ms() < end;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, 1000) == 1)
			attach_read(fd, &a);
	}
	close(fd);
	assert_true(a.exited);
	assert_int_equal(a.code, 0);
	assert_int_equal(buf_putc(&a.out, '\0'), 0);
	assert_string_equal(a.out.data, want);
	measure_end(&p, idle, "attach with 64 MiB of i frames");
	buf_free(&a.raw);
	buf_free(&a.out);
	stop(&p);
}

/* sandbox-cli exec SBX -- sh -c READER < a 64 MiB file: its output is the reader's, whole. */
static void
test_cli_exec_stdin(void **state)
{
	struct daemon_proc p;
	char id[64], ep[340], cmd[256], in_path[400], out_path[400];
	char *got = NULL;
	size_t len = 0;
	long idle;
	pid_t child;
	int status = -1, fd;
	uint64_t deadline;

	(void)state;
	start(&p);
	running_sandbox(&p, id, sizeof(id));
	snprintf(ep, sizeof(ep), "unix://%s", p.sock);
	snprintf(cmd, sizeof(cmd), SLOW_READER, "cli", "cli", "cli", "cli");
	snprintf(in_path, sizeof(in_path), "%s/stdin.bin", p.dir);
	snprintf(out_path, sizeof(out_path), "%s/stdout.txt", p.dir);
	fd = open(in_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, DATA_SIZE), (ssize_t)DATA_SIZE);
	close(fd);
	idle = measure_begin(&p);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		int in = open(in_path, O_RDONLY), out = open(out_path, O_WRONLY | O_CREAT, 0600);
		const char *cli = harness_binary("SANDBOX_CLI");
		if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0)
			_exit(126);
		execl(cli, cli, "--endpoint", ep, "exec", id, "--", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	deadline = now_mono_ms() + WAIT_MS;
	while (waitpid(child, &status, WNOHANG) == 0) {
		if (now_mono_ms() > deadline) {
			kill(child, SIGKILL);
			waitpid(child, &status, 0);
			fail_msg("sandbox-cli exec did not end in %d s", WAIT_MS / 1000);
		}
		usleep(50000);
	}
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	fd = open(out_path, O_RDONLY);
	assert_true(fd >= 0);
	got = calloc(1, 4096);
	assert_non_null(got);
	for (ssize_t k; (k = read(fd, got + len, 4095 - len)) > 0;)
		len += (size_t)k;
	close(fd);
	assert_string_equal(got, want);
	measure_end(&p, idle, "sandbox-cli exec with 64 MiB piped");
	free(got);
	unlink(in_path);
	stop(&p);
}

/* An agent from before FEATURES (a VM an older sandboxd started, adopted with
 * --keep-sandboxes) never acknowledges a process's stdin: the daemon says so and sends stdin as
 * it did, unbounded, rather than waiting forever for a window to open. That agent keeps 16 MiB
 * and drops the rest, as it always did: less than the whole arrives, but the upload ends. */
static void
test_old_agent_no_stall(void **state)
{
	struct daemon_proc p;
	char id[64], resp[4096];
	char *got;
	unsigned long count;

	(void)state;
	start_agent(&p, true);
	running_sandbox(&p, id, sizeof(id));
	got = post_stdin(&p, id, resp, sizeof(resp));
	harness_expect_in(resp, "HTTP/1.1 204");
	count = strtoul(got, NULL, 10);
	print_message("an old agent's process got %lu of %u bytes\n", count, DATA_SIZE);
	assert_true(count >= 16u << 20 && count < DATA_SIZE);
	assert_true(harness_file_contains(p.log, "does not acknowledge stdin"));
	free(got);
	stop(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_post_stdin),
		cmocka_unit_test(test_attach_stdin),
		cmocka_unit_test(test_cli_exec_stdin),
		cmocka_unit_test(test_old_agent_no_stall),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, NULL));
}
