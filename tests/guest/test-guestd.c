/* test-guestd.c: sandbox-guestd end to end in test mode. The agent listens on a unix socket in
 * a private directory and this test is the host: the handshake (stale bytes before AP_MAGIC
 * included), EXEC with pipes and a PTY, output streams and replay, the ACK window, stdin,
 * signals, resizes, KEEP across a reconnect, PS, the file requests, and tunnels (EXEC with
 * PORT) to a listener of this test's on 127.0.0.1. The binary is
 * $SANDBOX_GUESTD (or argv[1]); without one the test is skipped (77). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "agentproto.h"
#include "buf.h"
#include "frame.h"
#include "harness.h"
#include "tlv.h"

#define TIMEOUT_MS 20000

static const char *guestd;
static char dir[256], sock[300], home[300], logpath[300];
static pid_t agent = -1;
static uint32_t next_req = 1000;
/* FEATURES in the HELLO: a current host's by default */
static uint32_t hello_features = AP_FEAT_STDIN_WINDOW;

struct conn {
	int fd;
	struct frame_decoder dec;
	struct frame f;   /* the last frame read */
	uint8_t *payload; /* its payload (a copy) */
};

/* --- the agent and connections --- */

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void
dump_log(void)
{
	char line[512];
	FILE *f = fopen(logpath, "r");

	if (!f)
		return;
	fprintf(stderr, "--- agent log ---\n");
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

static void
stop_agent(void)
{
	if (agent <= 0)
		return;
	kill(agent, SIGTERM);
	waitpid(agent, NULL, 0);
	agent = -1;
}

/* Starts the agent on socket path with extra arguments (NULL-terminated); its pid, or -1. */
static pid_t
start_agent(const char *path, const char *const *extra)
{
	const char *args[16] = { guestd, "--port", path, "--home", home };
	size_t n = 5;
	struct stat st;
	uint64_t deadline;
	pid_t pid;

	for (; extra && *extra && n < 15; extra++)
		args[n++] = *extra;
	args[n] = NULL;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(guestd, (char *const *)args);
		_exit(127);
	}
	deadline = now_ms() + 10000;
	while (stat(path, &st) < 0) {
		if (now_ms() > deadline || waitpid(pid, NULL, WNOHANG) == pid) {
			dump_log();
			kill(pid, SIGKILL);
			return -1;
		}
		usleep(10000);
	}
	if ((st.st_mode & 0777) != 0600) {
		fprintf(stderr, "socket mode %o, want 0600\n", st.st_mode & 0777);
		kill(pid, SIGKILL);
		return -1;
	}
	return pid;
}

static int
setup(void **state)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/test-guestd-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		return -1;
	snprintf(sock, sizeof(sock), "%s/agent.sock", dir);
	snprintf(home, sizeof(home), "%s/home", dir);
	snprintf(logpath, sizeof(logpath), "%s/agent.log", dir);
	if (mkdir(home, 0700) < 0)
		return -1;
	atexit(stop_agent);
	agent = start_agent(sock, NULL);
	return agent > 0 ? 0 : -1;
}

static int
teardown(void **state)
{
	char cmd[600];
	int status = 0;

	if (agent > 0) {
		kill(agent, SIGTERM);
		waitpid(agent, &status, 0);
		agent = -1;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "agent ended with status 0x%x\n", status);
			dump_log();
			return -1;
		}
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void
send_frame(struct conn *c, uint8_t type, uint8_t flags, uint32_t chan, const void *p, size_t len)
{
	struct buf b = BUF_INIT(AP_FRAME_MAX + 64);

	assert_int_equal(frame_put(&b, type, flags, chan, p, len), 0);
	assert_int_equal(send(c->fd, b.data, b.len, MSG_NOSIGNAL), (ssize_t)b.len);
	buf_free(&b);
}

static void
send_tlvs(struct conn *c, uint8_t type, uint32_t chan, struct buf *tlvs)
{
	send_frame(c, type, 0, chan, tlvs->data, tlvs->len);
	buf_free(tlvs);
}

/* Reads the next frame into c->f; false on timeout or EOF. */
static bool
next_frame(struct conn *c, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		uint8_t chunk[65536];
		struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
		ssize_t n;
		int r = frame_decoder_next(&c->dec, &c->f, NULL);

		assert_true(r >= 0);
		if (r == 1) {
			free(c->payload);
			c->payload = malloc(c->f.len + 1);
			memcpy(c->payload, c->f.payload, c->f.len);
			c->f.payload = c->payload;
			return true;
		}
		if (now_ms() >= deadline)
			return false;
		if (poll(&pfd, 1, (int)(deadline - now_ms())) <= 0)
			continue;
		n = recv(c->fd, chunk, sizeof(chunk), 0);
		if (n <= 0)
			return false;
		assert_int_equal(frame_decoder_feed(&c->dec, chunk, (size_t)n), 0);
	}
}

/* The next frame of this type and channel, skipping others. */
static void
expect(struct conn *c, uint8_t type, uint32_t chan)
{
	uint64_t deadline = now_ms() + TIMEOUT_MS;

	while (now_ms() < deadline) {
		if (!next_frame(c, (int)(deadline - now_ms())))
			break;
		if (c->f.type == type && c->f.chan == chan)
			return;
	}
	dump_log();
	fail_msg("no frame 0x%02x on channel %u", type, chan);
}

static bool
find_tlv(const struct frame *f, uint16_t tag, struct tlv *ret)
{
	struct tlv_reader rd;

	tlv_reader_init(&rd, f->payload, f->len);
	while (tlv_next(&rd, ret) == 1)
		if (ret->tag == tag)
			return true;
	return false;
}

static uint64_t
tlv_uint(const struct frame *f, uint16_t tag)
{
	struct tlv t;
	uint64_t v = 0;

	assert_true(find_tlv(f, tag, &t));
	assert_true(t.len == 1 || t.len == 2 || t.len == 4 || t.len == 8);
	for (uint32_t i = 0; i < t.len; i++)
		v = v << 8 | t.val[i];
	return v;
}

/* A copy of a string TLV (caller frees), or NULL. */
static char *
tlv_string(const struct frame *f, uint16_t tag)
{
	struct tlv t;
	char *s;

	if (!find_tlv(f, tag, &t))
		return NULL;
	s = malloc(t.len + 1);
	memcpy(s, t.val, t.len);
	s[t.len] = '\0';
	return s;
}

/* Connects to path, sends junk, AP_MAGIC and a HELLO, and checks the HELLO_ACK. */
static void
conn_open_at(struct conn *c, const char *path, const void *junk, size_t junk_len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct buf hello = BUF_INIT(4096);
	uint8_t nonce[AP_NONCE_LEN];
	uint64_t deadline = now_ms() + 10000;
	struct tlv t;
	char *version;

	memset(c, 0, sizeof(*c));
	assert_true(strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	for (;;) {
		c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(c->fd >= 0);
		if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		close(c->fd);
		assert_true(now_ms() < deadline);
		usleep(10000);
	}
	frame_decoder_init(&c->dec, AP_FRAME_MAX, true);
	for (size_t i = 0; i < sizeof(nonce); i++)
		nonce[i] = (uint8_t)rand();
	assert_int_equal(tlv_put(&hello, AP_T_NONCE, nonce, sizeof(nonce)), 0);
	assert_int_equal(tlv_put_u64(&hello, AP_T_TIME_NS, (uint64_t)time(NULL) * 1000000000u), 0);
	assert_int_equal(tlv_put_str(&hello, AP_T_ENV, "PATH=/usr/local/bin:/usr/bin:/bin"), 0);
	assert_int_equal(tlv_put_str(&hello, AP_T_ENV, "IMAGE_VAR=image"), 0);
	/* the identity a VM's guest applies (PID 1 only): taken, and changes nothing here */
	assert_int_equal(tlv_put_str(&hello, AP_T_NET, "10.200.0.2/30,10.200.0.1"), 0);
	assert_int_equal(tlv_put(&hello, AP_T_MAC, "\x52\x54\x0a\xc8\x00\x02", 6), 0);
	assert_int_equal(tlv_put_str(&hello, AP_T_MACHINE_ID, "0123456789abcdef0123456789abcdef"),
	                 0);
	assert_int_equal(tlv_put_str(&hello, AP_T_VOLUME, "/dev/vdc\t/sandbox/data\trw"), 0);
	if (hello_features)
		assert_int_equal(tlv_put_u32(&hello, AP_T_FEATURES, hello_features), 0);
	if (junk_len)
		assert_int_equal(send(c->fd, junk, junk_len, MSG_NOSIGNAL), (ssize_t)junk_len);
	assert_int_equal(send(c->fd, AP_MAGIC, AP_MAGIC_LEN, MSG_NOSIGNAL), AP_MAGIC_LEN);
	send_tlvs(c, AP_HELLO, 0, &hello);
	expect(c, AP_HELLO_ACK, 0);
	assert_true(find_tlv(&c->f, AP_T_NONCE, &t));
	assert_int_equal(t.len, AP_NONCE_LEN);
	assert_memory_equal(t.val, nonce, AP_NONCE_LEN);
	version = tlv_string(&c->f, AP_T_VERSION);
	assert_non_null(version);
	assert_true(strncmp(version, "sandbox-guestd ", 15) == 0);
	free(version);
	assert_int_equal(tlv_uint(&c->f, AP_T_MOUNTED), 0);
	assert_true(find_tlv(&c->f, AP_T_BOOT_ID, &t));
	assert_true(find_tlv(&c->f, AP_T_UPTIME_MS, &t));
	/* whatever the host announced, the agent says what it does */
	assert_int_equal(tlv_uint(&c->f, AP_T_FEATURES) & AP_FEAT_STDIN_WINDOW,
	                 AP_FEAT_STDIN_WINDOW);
}

static void
conn_open(struct conn *c, const void *junk, size_t junk_len)
{
	conn_open_at(c, sock, junk, junk_len);
}

static void
conn_close(struct conn *c)
{
	close(c->fd);
	frame_decoder_done(&c->dec);
	free(c->payload);
	c->payload = NULL;
}

/* --- requests --- */

struct exec_opts {
	const char *const *argv;
	const char *const *env;
	const char *cwd;
	bool tty, keep;
	uint16_t rows, cols;
};

/* EXEC: the handle (> 0), or -errno with the MESSAGE in *ret_msg (caller frees). */
static int
exec_proc(struct conn *c, const struct exec_opts *o, char **ret_msg)
{
	struct buf b = BUF_INIT(AP_FRAME_MAX);
	uint32_t req = next_req++;
	int err;

	for (const char *const *a = o->argv; *a; a++)
		assert_int_equal(tlv_put_str(&b, AP_T_ARG, *a), 0);
	for (const char *const *e = o->env; e && *e; e++)
		assert_int_equal(tlv_put_str(&b, AP_T_ENV, *e), 0);
	if (o->cwd)
		assert_int_equal(tlv_put_str(&b, AP_T_CWD, o->cwd), 0);
	if (o->tty)
		assert_int_equal(tlv_put_u8(&b, AP_T_TTY, 1), 0);
	if (o->keep)
		assert_int_equal(tlv_put_u8(&b, AP_T_KEEP, 1), 0);
	if (o->rows)
		assert_int_equal(tlv_put_u16(&b, AP_T_ROWS, o->rows), 0);
	if (o->cols)
		assert_int_equal(tlv_put_u16(&b, AP_T_COLS, o->cols), 0);
	send_tlvs(c, AP_EXEC, req, &b);
	expect(c, AP_RESULT, req);
	err = (int)tlv_uint(&c->f, AP_T_ERRNO);
	if (ret_msg)
		*ret_msg = tlv_string(&c->f, AP_T_MESSAGE);
	if (err)
		return -err;
	return (int)tlv_uint(&c->f, AP_T_PID);
}

static int
run(struct conn *c, const char *const *argv, bool keep)
{
	struct exec_opts o = { .argv = argv, .keep = keep };
	int pid = exec_proc(c, &o, NULL);

	assert_true(pid > 0);
	return pid;
}

static void
send_u64(struct conn *c, uint8_t type, uint32_t chan, uint64_t v)
{
	uint8_t p[8];

	be64_put(p, v);
	send_frame(c, type, 0, chan, p, sizeof(p));
}

static void
send_signal(struct conn *c, uint32_t pid, uint32_t sig)
{
	uint8_t p[4];

	be32_put(p, sig);
	send_frame(c, AP_SIGNAL, 0, pid, p, sizeof(p));
}

/* What ATTACH brought back. */
struct capture {
	struct buf all, out, err;
	uint64_t next;    /* the offset the next OUTPUT must start at */
	uint64_t dropped; /* sum of DROPPED */
	bool exited;
	int32_t code;
	uint64_t end;
};

static void
capture_init(struct capture *cap)
{
	memset(cap, 0, sizeof(*cap));
	buf_init(&cap->all, 64u << 20);
	buf_init(&cap->out, 64u << 20);
	buf_init(&cap->err, 64u << 20);
}

static void
capture_done(struct capture *cap)
{
	buf_free(&cap->all);
	buf_free(&cap->out);
	buf_free(&cap->err);
}

/* Reads pid's frames (ACKing every OUTPUT) until needle shows up in the output, or until EXIT
 * when needle is NULL. */
static void
collect(struct conn *c, uint32_t pid, struct capture *cap, const char *needle)
{
	uint64_t deadline = now_ms() + TIMEOUT_MS;

	while (!cap->exited && !(needle && cap->all.data && strstr(cap->all.data, needle))) {
		const uint8_t *p;

		if (now_ms() >= deadline || !next_frame(c, (int)(deadline - now_ms()))) {
			dump_log();
			fail_msg("process %u: timed out; output so far: '%s'", pid,
			         cap->all.data ? cap->all.data : "");
		}
		if (c->f.chan != pid)
			continue;
		p = c->f.payload;
		switch (c->f.type) {
		case AP_DROPPED:
			assert_int_equal(c->f.len, 8);
			cap->dropped += be64_get(p);
			cap->next += be64_get(p);
			break;
		case AP_OUTPUT:
			assert_true(c->f.len > 9);
			assert_true(c->f.len - 9 <= 65536);
			assert_int_equal(be64_get(p + 1), cap->next);
			assert_true(p[0] == AP_STDOUT || p[0] == AP_STDERR);
			assert_int_equal(buf_append(&cap->all, p + 9, c->f.len - 9), 0);
			assert_int_equal(buf_append(p[0] == AP_STDOUT ? &cap->out : &cap->err,
			                            p + 9, c->f.len - 9),
			                 0);
			cap->next += c->f.len - 9;
			send_u64(c, AP_ACK, pid, cap->next);
			break;
		case AP_EXIT:
			assert_int_equal(c->f.len, 12);
			cap->exited = true;
			cap->code = (int32_t)be32_get(p);
			cap->end = be64_get(p + 4);
			assert_int_equal(cap->end, cap->next);
			break;
		case AP_STDIN_ACK: /* at any time */
			break;
		default:
			fail_msg("unexpected frame 0x%02x for process %u", c->f.type, pid);
		}
	}
}

/* ATTACH from 0 and read to EXIT. */
static void
attach_collect(struct conn *c, uint32_t pid, struct capture *cap)
{
	capture_init(cap);
	send_u64(c, AP_ATTACH, pid, 0);
	collect(c, pid, cap, NULL);
}

static int
ps_state(struct conn *c, uint32_t pid, int32_t *ret_code)
{
	uint32_t req = next_req++;
	int state = 0;

	send_frame(c, AP_PS, 0, req, NULL, 0);
	for (;;) {
		uint64_t deadline = now_ms() + TIMEOUT_MS;
		assert_true(next_frame(c, (int)(deadline - now_ms())));
		if (c->f.chan != req)
			continue;
		if (c->f.type == AP_RESULT)
			break;
		assert_int_equal(c->f.type, AP_PROC);
		if (tlv_uint(&c->f, AP_T_PID) == pid) {
			state = (int)tlv_uint(&c->f, AP_T_STATE);
			if (state == AP_PROC_EXITED && ret_code)
				*ret_code = (int32_t)tlv_uint(&c->f, AP_T_EXIT_CODE);
		}
	}
	assert_int_equal(tlv_uint(&c->f, AP_T_ERRNO), 0);
	return state;
}

static void
wait_exited(struct conn *c, uint32_t pid)
{
	uint64_t deadline = now_ms() + TIMEOUT_MS;

	while (ps_state(c, pid, NULL) != AP_PROC_EXITED) {
		assert_true(now_ms() < deadline);
		usleep(20000);
	}
}

static void
release(struct conn *c, uint32_t pid)
{
	send_frame(c, AP_RELEASE, 0, pid, NULL, 0);
}

/* --- tests --- */

static void
test_handshake_and_ping(void **state)
{
	static const char junk[] = "stale bytes \xff\x01\x02 from an old client" AP_MAGIC "\x7f";
	struct conn c;
	uint32_t req = next_req++;

	/* stale bytes (even a stray magic followed by garbage) before the real session start */
	conn_open(&c, junk, sizeof(junk) - 1);
	send_frame(&c, AP_PING, 0, req, NULL, 0);
	expect(&c, AP_RESULT, req);
	assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), 0);
	conn_close(&c);
}

static void
test_exec_streams(void **state)
{
	static const char *const argv[] = { "sh", "-c", "echo out; echo err >&2; exit 3", NULL };
	struct capture cap;
	struct conn c;
	int pid;

	conn_open(&c, NULL, 0);
	pid = run(&c, argv, false);
	attach_collect(&c, (uint32_t)pid, &cap);
	assert_string_equal(cap.out.data, "out\n");
	assert_string_equal(cap.err.data, "err\n");
	assert_int_equal(cap.code, 3);
	assert_int_equal(cap.end, 8);
	assert_int_equal(cap.dropped, 0);
	/* a second ATTACH after the exit replays everything, then EXIT at once */
	capture_done(&cap);
	attach_collect(&c, (uint32_t)pid, &cap);
	assert_string_equal(cap.out.data, "out\n");
	assert_string_equal(cap.err.data, "err\n");
	assert_int_equal(cap.code, 3);
	capture_done(&cap);
	/* from a later offset */
	capture_init(&cap);
	send_u64(&c, AP_ATTACH, (uint32_t)pid, 4);
	cap.next = 4;
	collect(&c, (uint32_t)pid, &cap, NULL);
	assert_string_equal(cap.all.data, "err\n");
	capture_done(&cap);
	release(&c, (uint32_t)pid);
	conn_close(&c);
}

static void
test_exec_environment(void **state)
{
	static const char *const argv[] = { "sh", "-c", "echo $IMAGE_VAR $REQ_VAR $HOME $USER $PWD",
		                            NULL };
	static const char *const env[] = { "REQ_VAR=req", "IMAGE_VAR=override", NULL };
	struct exec_opts o = { .argv = argv, .env = env, .cwd = "/" };
	struct capture cap;
	struct conn c;
	char want[600];
	int pid;

	conn_open(&c, NULL, 0);
	pid = exec_proc(&c, &o, NULL);
	assert_true(pid > 0);
	attach_collect(&c, (uint32_t)pid, &cap);
	snprintf(want, sizeof(want), "override req %s sandbox /\n", home);
	assert_string_equal(cap.out.data, want);
	assert_int_equal(cap.code, 0);
	capture_done(&cap);
	release(&c, (uint32_t)pid);
	conn_close(&c);
}

static void
test_exec_failures(void **state)
{
	static const char *const missing[] = { "no-such-command-xyz", NULL };
	static const char *const missing_path[] = { "/no/such/file", NULL };
	static const char *const ok[] = { "true", NULL };
	char file[400];
	struct conn c;
	char *msg = NULL;
	int r;

	conn_open(&c, NULL, 0);
	{
		struct exec_opts o = { .argv = missing };
		r = exec_proc(&c, &o, &msg);
		assert_int_equal(r, -ENOENT);
		assert_string_equal(msg, "'no-such-command-xyz': command not found");
		free(msg);
	}
	{
		struct exec_opts o = { .argv = missing_path };
		r = exec_proc(&c, &o, &msg);
		assert_int_equal(r, -ENOENT);
		assert_string_equal(msg, "'/no/such/file': No such file or directory");
		free(msg);
	}
	{
		struct exec_opts o = { .argv = ok, .cwd = "/no/such/dir" };
		r = exec_proc(&c, &o, &msg);
		assert_int_equal(r, -ENOENT);
		assert_string_equal(msg, "cwd '/no/such/dir': No such file or directory");
		free(msg);
	}
	{
		struct exec_opts o = { .argv = ok, .cwd = file };
		snprintf(file, sizeof(file), "%s/plain-file", dir);
		close(open(file, O_WRONLY | O_CREAT, 0644));
		r = exec_proc(&c, &o, &msg);
		assert_int_equal(r, -ENOTDIR);
		assert_non_null(strstr(msg, "cwd '"));
		free(msg);
	}
	{
		/* a malformed EXEC (no ARG) is EINVAL */
		uint32_t req = next_req++;
		struct buf b = BUF_INIT(64);
		assert_int_equal(tlv_put_u8(&b, AP_T_TTY, 1), 0);
		send_tlvs(&c, AP_EXEC, req, &b);
		expect(&c, AP_RESULT, req);
		assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), EINVAL);
		/* a TLV running past the payload, too */
		req = next_req++;
		send_frame(&c, AP_EXEC, 0, req, "\x00\x0f\x00\x00\x00\x09sh", 8);
		expect(&c, AP_RESULT, req);
		assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), EINVAL);
	}
	conn_close(&c);
}

static void
test_tty_size_and_resize(void **state)
{
	static const char *const stty[] = { "stty", "size", NULL };
	static const char *const winch[] = {
		"sh", "-c", "trap 'stty size' WINCH; echo ready; while :; do sleep 0.05; done", NULL
	};
	struct capture cap;
	struct conn c;
	uint8_t rs[4];
	int pid;

	conn_open(&c, NULL, 0);
	{
		struct exec_opts o = { .argv = stty, .tty = true, .rows = 33, .cols = 101 };
		pid = exec_proc(&c, &o, NULL);
		assert_true(pid > 0);
		attach_collect(&c, (uint32_t)pid, &cap);
		assert_string_equal(cap.all.data, "33 101\r\n");
		assert_int_equal(cap.err.len, 0);
		assert_int_equal(cap.code, 0);
		capture_done(&cap);
		release(&c, (uint32_t)pid);
	}
	{
		struct exec_opts o = { .argv = winch, .tty = true };
		pid = exec_proc(&c, &o, NULL);
		assert_true(pid > 0);
		capture_init(&cap);
		send_u64(&c, AP_ATTACH, (uint32_t)pid, 0);
		collect(&c, (uint32_t)pid, &cap, "ready");
		be16_put(rs, 40);
		be16_put(rs + 2, 120);
		send_frame(&c, AP_RESIZE, 0, (uint32_t)pid, rs, sizeof(rs));
		collect(&c, (uint32_t)pid, &cap, "40 120");
		send_signal(&c, (uint32_t)pid, SIGKILL);
		collect(&c, (uint32_t)pid, &cap, NULL);
		assert_int_equal(cap.code, 128 + SIGKILL);
		capture_done(&cap);
		release(&c, (uint32_t)pid);
	}
	conn_close(&c);
}

static void
test_stdin_and_signal(void **state)
{
	static const char *const cat[] = { "cat", NULL };
	static const char *const sleeper[] = { "sleep", "30", NULL };
	static const char *const tty_cat[] = { "sh", "-c", "cat; echo done", NULL };
	struct capture cap;
	struct conn c;
	int pid;

	conn_open(&c, NULL, 0);
	pid = run(&c, cat, false);
	send_frame(&c, AP_STDIN, 0, (uint32_t)pid, "hello ", 6);
	send_frame(&c, AP_STDIN, AP_F_EOF, (uint32_t)pid, "world\n", 6);
	attach_collect(&c, (uint32_t)pid, &cap);
	assert_string_equal(cap.out.data, "hello world\n");
	assert_int_equal(cap.code, 0);
	capture_done(&cap);
	release(&c, (uint32_t)pid);

	pid = run(&c, sleeper, false);
	send_signal(&c, (uint32_t)pid, SIGTERM);
	attach_collect(&c, (uint32_t)pid, &cap);
	assert_int_equal(cap.code, 143);
	capture_done(&cap);
	release(&c, (uint32_t)pid);

	/* with a TTY, EOF is the terminal's VEOF: a pending line is ended, then cat ends */
	{
		struct exec_opts o = { .argv = tty_cat, .tty = true };
		pid = exec_proc(&c, &o, NULL);
		assert_true(pid > 0);
		send_frame(&c, AP_STDIN, AP_F_EOF, (uint32_t)pid, "abc", 3);
		attach_collect(&c, (uint32_t)pid, &cap);
		assert_non_null(strstr(cap.all.data, "done"));
		assert_int_equal(cap.code, 0);
		capture_done(&cap);
		release(&c, (uint32_t)pid);
	}
	conn_close(&c);
}

/* Checks that the output is "0\n1\n2\n..." from 0 without a gap; returns the count. */
static int
count_lines(const char *s)
{
	int n = 0;

	while (*s) {
		char want[16];
		int k = snprintf(want, sizeof(want), "%d\n", n);
		if (strncmp(s, want, (size_t)k) != 0)
			break;
		s += k;
		n++;
	}
	return n;
}

static void
test_keep_across_reconnect(void **state)
{
	static const char *const ticker[] = {
		"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo $i; i=$((i+1)); sleep 0.02; done",
		NULL
	};
	static const char *const sleeper[] = { "sleep", "60", NULL };
	struct capture cap;
	struct conn c;
	int kept, doomed, n1, n2;
	int32_t code = -1;

	conn_open(&c, NULL, 0);
	kept = run(&c, ticker, true);
	doomed = run(&c, sleeper, false);
	capture_init(&cap);
	send_u64(&c, AP_ATTACH, (uint32_t)kept, 0);
	collect(&c, (uint32_t)kept, &cap, "3\n");
	capture_done(&cap);
	conn_close(&c); /* the host goes away */
	usleep(300000);

	conn_open(&c, NULL, 0);
	assert_int_equal(ps_state(&c, (uint32_t)kept, NULL), AP_PROC_RUNNING);
	wait_exited(&c, (uint32_t)doomed);
	assert_int_equal(ps_state(&c, (uint32_t)doomed, &code), AP_PROC_EXITED);
	assert_int_equal(code, 128 + SIGKILL);
	/* the replay starts at 0 and the numbers run on without a gap */
	capture_init(&cap);
	send_u64(&c, AP_ATTACH, (uint32_t)kept, 0);
	collect(&c, (uint32_t)kept, &cap, "20\n");
	n1 = count_lines(cap.all.data);
	assert_true(n1 >= 20);
	collect(&c, (uint32_t)kept, &cap, "40\n");
	n2 = count_lines(cap.all.data);
	assert_true(n2 > n1);
	assert_int_equal(cap.dropped, 0);
	send_signal(&c, (uint32_t)kept, SIGKILL);
	collect(&c, (uint32_t)kept, &cap, NULL);
	assert_int_equal(cap.code, 128 + SIGKILL);
	assert_int_equal(cap.end, cap.all.len);
	assert_true(count_lines(cap.all.data) >= n2);
	assert_int_equal(strlen(cap.all.data), cap.all.len); /* and nothing but the numbers: */
	{
		char want[16];
		int k = snprintf(want, sizeof(want), "%d\n", count_lines(cap.all.data) - 1);
		assert_memory_equal(cap.all.data + cap.all.len - (size_t)k, want, (size_t)k);
	}
	capture_done(&cap);
	release(&c, (uint32_t)kept);
	release(&c, (uint32_t)doomed);
	conn_close(&c);
}

static void
test_dropped_while_detached(void **state)
{
	static const char *const big[] = { "head", "-c", "3000000", "/dev/zero", NULL };
	struct capture cap;
	struct conn c;
	int pid;

	conn_open(&c, NULL, 0);
	pid = run(&c, big, false);
	wait_exited(&c, (uint32_t)pid);
	attach_collect(&c, (uint32_t)pid, &cap);
	assert_int_equal(cap.dropped, 3000000 - AP_RING);
	assert_int_equal(cap.all.len, AP_RING);
	assert_int_equal(cap.end, 3000000);
	assert_int_equal(cap.code, 0);
	capture_done(&cap);
	release(&c, (uint32_t)pid);
	conn_close(&c);
}

static void
test_backpressure(void **state)
{
	static const char *const big[] = { "sh", "-c", "read go; head -c 8388608 /dev/urandom",
		                           NULL };
	uint64_t received = 0, acked = 0, deadline;
	bool exited = false, stalled_checked = false;
	struct conn c;
	int pid;

	conn_open(&c, NULL, 0);
	pid = run(&c, big, false);
	send_u64(&c, AP_ATTACH, (uint32_t)pid, 0);
	send_frame(&c, AP_STDIN, 0, (uint32_t)pid, "go\n", 3);
	deadline = now_ms() + 60000;
	while (!exited) {
		assert_true(now_ms() < deadline);
		if (!next_frame(&c, 500)) {
			/* nothing more while a whole window is unacknowledged: the agent waits */
			if (received - acked < AP_WINDOW)
				continue;
			stalled_checked = true;
			acked = received;
			send_u64(&c, AP_ACK, (uint32_t)pid, acked);
			continue;
		}
		if (c.f.chan != (uint32_t)pid || c.f.type == AP_STDIN_ACK)
			continue;
		assert_int_not_equal(c.f.type, AP_DROPPED);
		if (c.f.type == AP_EXIT) {
			assert_int_equal(be32_get(c.f.payload), 0);
			assert_int_equal(be64_get(c.f.payload + 4), received);
			exited = true;
			continue;
		}
		assert_int_equal(c.f.type, AP_OUTPUT);
		assert_int_equal(be64_get(c.f.payload + 1), received);
		received += c.f.len - 9;
		assert_true(received - acked <= AP_WINDOW);
		/* hold back ACKs for the first window to see the agent stop, then ACK as we go */
		if (stalled_checked || received > 3 * AP_WINDOW) {
			acked = received;
			send_u64(&c, AP_ACK, (uint32_t)pid, acked);
		}
	}
	assert_true(stalled_checked);
	assert_int_equal(received, 8388608);
	release(&c, (uint32_t)pid);
	conn_close(&c);
}

/* How many lines of the agent's log have needle. */
static int
log_count(const char *needle)
{
	char line[1024];
	int n = 0;
	FILE *f = fopen(logpath, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* Sends n bytes (a counting pattern) to pid's stdin in 64 KiB frames. */
static void
send_stdin(struct conn *c, uint32_t pid, size_t n, bool eof)
{
	static uint8_t piece[65536];

	for (size_t i = 0; i < sizeof(piece); i++)
		piece[i] = (uint8_t)(i * 7);
	do {
		size_t k = MIN(n, sizeof(piece));
		send_frame(c, AP_STDIN, eof && k == n ? AP_F_EOF : 0, pid, piece, k);
		n -= k;
	} while (n > 0);
}

/* Reads pid's frames for ms (or, ms 0, until EXIT once attached): the last STDIN_ACK, checked to
 * grow and to stay within sent. The output goes into cap (ACKed). */
static uint64_t
stdin_acks(struct conn *c, uint32_t pid, uint64_t sent, int ms, struct capture *cap)
{
	uint64_t deadline = now_ms() + (uint64_t)(ms ? ms : TIMEOUT_MS), acked = 0;

	while (now_ms() < deadline && !cap->exited) {
		const uint8_t *p;

		if (!next_frame(c, (int)(deadline - now_ms())))
			break;
		if (c->f.chan != pid)
			continue;
		p = c->f.payload;
		if (c->f.type == AP_STDIN_ACK) {
			assert_int_equal(c->f.len, 8);
			assert_true(be64_get(p) > acked);
			acked = be64_get(p);
			assert_true(acked <= sent);
		} else if (c->f.type == AP_OUTPUT) {
			assert_int_equal(buf_append(&cap->all, p + 9, c->f.len - 9), 0);
			cap->next += c->f.len - 9;
			send_u64(c, AP_ACK, pid, cap->next);
		} else if (c->f.type == AP_EXIT) {
			cap->exited = true;
			cap->code = (int32_t)be32_get(p);
		}
	}
	if (!ms && !cap->exited) {
		dump_log();
		fail_msg("process %u: no EXIT; output so far: '%s'", pid,
		         cap->all.data ? cap->all.data : "");
	}
	return acked;
}

/* STDIN_ACK for a process: it counts what the process took (never what is only queued), reaches
 * every byte sent once the process read them, and starts again at 0 in a new session while an
 * earlier session's bytes are still written. A host that overruns its window is logged as a
 * protocol violation and nothing is lost; one without FEATURES keeps the old behaviour. */
static void
test_stdin_acks(void **state)
{
	/* reads nothing for a while: meanwhile only the pipe takes some */
	static const char *const slow[] = { "sh", "-c", "sleep 2; exec wc -c", NULL };
	struct capture cap;
	struct conn c;
	uint64_t acked;
	int pid;

	conn_open(&c, NULL, 0);
	pid = run(&c, slow, false);
	send_stdin(&c, (uint32_t)pid, 1u << 20, false);
	capture_init(&cap);
	acked = stdin_acks(&c, (uint32_t)pid, 1u << 20, 700, &cap);
	assert_true(acked <= 256u << 10); /* the pipe's, at most */
	send_frame(&c, AP_STDIN, AP_F_EOF, (uint32_t)pid, NULL, 0);
	send_u64(&c, AP_ATTACH, (uint32_t)pid, 0);
	assert_int_equal(stdin_acks(&c, (uint32_t)pid, 1u << 20, 0, &cap), 1u << 20);
	assert_string_equal(cap.all.data, "1048576\n");
	capture_done(&cap);
	release(&c, (uint32_t)pid);

	/* a host past its window: logged, and every byte still arrives */
	assert_int_equal(log_count("beyond the window"), 0);
	pid = run(&c, slow, false);
	send_stdin(&c, (uint32_t)pid, AP_STDIN_WINDOW + (1u << 20), true);
	capture_init(&cap);
	send_u64(&c, AP_ATTACH, (uint32_t)pid, 0);
	acked = stdin_acks(&c, (uint32_t)pid, AP_STDIN_WINDOW + (1u << 20), 0, &cap);
	assert_int_equal(acked, AP_STDIN_WINDOW + (1u << 20));
	assert_int_equal(strtoull(cap.all.data, NULL, 10), AP_STDIN_WINDOW + (1u << 20));
	assert_int_equal(log_count("protocol violation from the host: process"), 1);
	assert_int_equal(log_count("beyond the window"), 1);
	capture_done(&cap);
	release(&c, (uint32_t)pid);

	/* a kept process across sessions: the new session's ACK counts its own bytes only */
	{
		struct exec_opts o = { .argv = slow, .keep = true };
		pid = exec_proc(&c, &o, NULL);
		assert_true(pid > 0);
	}
	send_stdin(&c, (uint32_t)pid, 100000, false);
	conn_close(&c);
	conn_open(&c, NULL, 0);
	send_stdin(&c, (uint32_t)pid, 50000, true);
	capture_init(&cap);
	send_u64(&c, AP_ATTACH, (uint32_t)pid, 0);
	acked = stdin_acks(&c, (uint32_t)pid, 50000, 0, &cap);
	assert_int_equal(acked, 50000);
	assert_string_equal(cap.all.data, "150000\n");
	capture_done(&cap);
	release(&c, (uint32_t)pid);
	conn_close(&c);

	/* a host from before FEATURES: stdin unbounded as it was, the queue keeps 16 MiB and the
	 * rest is dropped with a warning (not a violation: that host knows no window) */
	hello_features = 0;
	conn_open(&c, NULL, 0);
	hello_features = AP_FEAT_STDIN_WINDOW;
	assert_int_equal(log_count("stdin queue full"), 0);
	pid = run(&c, slow, false);
	send_stdin(&c, (uint32_t)pid, 20u << 20, true);
	capture_init(&cap);
	send_u64(&c, AP_ATTACH, (uint32_t)pid, 0);
	(void)stdin_acks(&c, (uint32_t)pid, 20u << 20, 0, &cap);
	assert_true(strtoull(cap.all.data, NULL, 10) < 20u << 20);
	assert_true(log_count("stdin queue full") > 0);
	assert_int_equal(log_count("protocol violation from the host: process"), 1);
	capture_done(&cap);
	release(&c, (uint32_t)pid);
	conn_close(&c);
}

static uint64_t
cpu_ticks(pid_t pid)
{
	char path[64], text[1024], *p;
	unsigned long utime = 0, stime = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(text, sizeof(text), f));
	fclose(f);
	p = strrchr(text, ')');
	assert_non_null(p);
	/* fields 14 and 15, counted after the command name's closing parenthesis (field 2) */
	assert_int_equal(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
	                        &utime, &stime),
	                 2);
	return utime + stime;
}

/* A TTY process ends while its window is full and stdin is still queued: the agent waits
 * for the ACK without spinning on the master's hang-up, then delivers the rest and EXIT. */
static void
test_tty_hangup_while_throttled(void **state)
{
	static const char *const big[] = { "sh", "-c", "stty -echo; exec head -c 1049000 /dev/zero",
		                           NULL };
	static uint8_t input[200000];
	struct exec_opts o = { .argv = big, .tty = true };
	uint64_t received = 0, before, deadline;
	bool sent_input = false;
	struct conn c;
	int pid;

	conn_open(&c, NULL, 0);
	pid = exec_proc(&c, &o, NULL);
	assert_true(pid > 0);
	send_u64(&c, AP_ATTACH, (uint32_t)pid, 0);
	memset(input, 'x', sizeof(input));
	/* take a full window without acknowledging it; the input (more than the terminal
	 * takes, and not echoed) goes once head runs */
	while (received < AP_WINDOW) {
		assert_true(next_frame(&c, TIMEOUT_MS));
		if (c.f.chan == (uint32_t)pid && c.f.type == AP_OUTPUT)
			received += c.f.len - 9;
		if (received && !sent_input) {
			send_frame(&c, AP_STDIN, 0, (uint32_t)pid, input, sizeof(input));
			sent_input = true;
		}
	}
	usleep(300000); /* head puts the rest into the terminal and exits */
	before = cpu_ticks(agent);
	usleep(1000000);
	assert_true(cpu_ticks(agent) - before < 30); /* a spinning agent burns ~100 a second */
	send_u64(&c, AP_ACK, (uint32_t)pid, received);
	deadline = now_ms() + TIMEOUT_MS;
	for (;;) {
		assert_true(now_ms() < deadline);
		assert_true(next_frame(&c, TIMEOUT_MS));
		if (c.f.chan != (uint32_t)pid)
			continue;
		if (c.f.type == AP_EXIT) {
			assert_int_equal(be32_get(c.f.payload), 0);
			assert_int_equal(be64_get(c.f.payload + 4), received);
			break;
		}
		assert_int_equal(c.f.type, AP_OUTPUT);
		received += c.f.len - 9;
		send_u64(&c, AP_ACK, (uint32_t)pid, received);
	}
	assert_int_equal(received, 1049000);
	release(&c, (uint32_t)pid);
	conn_close(&c);
}

/* --- files --- */

static int
file_request(struct conn *c, uint8_t type, const char *path, const uint64_t *size,
             const uint32_t *mode, uint32_t *ret_req)
{
	struct buf b = BUF_INIT(8192);
	uint32_t req = next_req++;

	assert_int_equal(tlv_put_str(&b, AP_T_PATH, path), 0);
	if (size)
		assert_int_equal(tlv_put_u64(&b, AP_T_SIZE, *size), 0);
	if (mode)
		assert_int_equal(tlv_put_u32(&b, AP_T_MODE, *mode), 0);
	send_tlvs(c, type, req, &b);
	if (ret_req) {
		*ret_req = req;
		return 0;
	}
	expect(c, AP_RESULT, req);
	return (int)tlv_uint(&c->f, AP_T_ERRNO);
}

static int
write_file(struct conn *c, const char *path, const uint8_t *data, size_t len, uint32_t mode)
{
	uint64_t size = len;
	uint32_t req;

	file_request(c, AP_FILE_WRITE, path, &size, &mode, &req);
	for (size_t off = 0; off < len;) {
		size_t n = len - off < 50000 ? len - off : 50000;
		send_frame(c, AP_FILE_DATA, 0, req, data + off, n);
		off += n;
	}
	expect(c, AP_RESULT, req);
	return (int)tlv_uint(&c->f, AP_T_ERRNO);
}

/* FILE_READ into *ret (caller frees): the errno of the RESULT. */
static int
read_file(struct conn *c, const char *path, uint64_t limit, struct buf *ret)
{
	uint32_t req;
	int err;

	buf_init(ret, 64u << 20);
	file_request(c, AP_FILE_READ, path, &limit, NULL, &req);
	for (;;) {
		assert_true(next_frame(c, TIMEOUT_MS));
		if (c->f.chan != req)
			continue;
		if (c->f.type == AP_RESULT)
			break;
		assert_int_equal(c->f.type, AP_FILE_DATA);
		assert_true(c->f.len <= 65536);
		assert_int_equal(buf_append(ret, c->f.payload, c->f.len), 0);
	}
	err = (int)tlv_uint(&c->f, AP_T_ERRNO);
	if (!err)
		assert_int_equal(tlv_uint(&c->f, AP_T_SIZE), ret->len);
	return err;
}

static void
test_files(void **state)
{
	static uint8_t data[300000];
	char path[400], d[400], sub[400], link[400];
	struct buf got;
	struct conn c;
	struct stat st;
	uint32_t req;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 31 + i / 7);
	data[0] = data[100] = data[sizeof(data) - 1] = 0;
	snprintf(d, sizeof(d), "%s/files", dir);
	snprintf(path, sizeof(path), "%s/files/new/deeper/blob.bin", dir);

	conn_open(&c, NULL, 0);
	/* a write creates its parents, and lands whole with its mode */
	assert_int_equal(write_file(&c, path, data, sizeof(data), 0600), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, sizeof(data));
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(read_file(&c, path, sizeof(data), &got), 0);
	assert_int_equal(got.len, sizeof(data));
	assert_memory_equal(got.data, data, sizeof(data));
	buf_free(&got);
	/* overwrite with an empty file, default mode */
	{
		uint64_t zero = 0;
		file_request(&c, AP_FILE_WRITE, path, &zero, NULL, &req);
		expect(&c, AP_RESULT, req);
		assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), 0);
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(st.st_size, 0);
		assert_int_equal(st.st_mode & 07777, 0644);
	}
	assert_int_equal(write_file(&c, path, data, 1000, 0644), 0);
	/* read errors */
	assert_int_equal(read_file(&c, path, 999, &got), EFBIG);
	buf_free(&got);
	assert_int_equal(read_file(&c, "/no/such/file", 100, &got), ENOENT);
	buf_free(&got);
	assert_int_equal(read_file(&c, d, 100, &got), EISDIR);
	buf_free(&got);
	/* paths the host should never send */
	assert_int_equal(read_file(&c, "relative/path", 100, &got), EINVAL);
	buf_free(&got);
	assert_int_equal(read_file(&c, "/tmp/../etc/passwd", 100, &got), EINVAL);
	buf_free(&got);
	/* a listing, sorted, with types and sizes */
	snprintf(sub, sizeof(sub), "%s/files/b-file", dir);
	assert_int_equal(write_file(&c, sub, (const uint8_t *)"12345", 5, 0644), 0);
	snprintf(link, sizeof(link), "%s/files/a-link", dir);
	assert_int_equal(symlink("b-file", link), 0);
	file_request(&c, AP_FILE_LIST, d, NULL, NULL, &req);
	{
		static const char *const names[] = { "a-link", "b-file", "new" };
		static const uint8_t types[] = { 'l', 'f', 'd' };
		size_t i = 0;
		for (;;) {
			char *name;
			assert_true(next_frame(&c, TIMEOUT_MS));
			if (c.f.chan != req)
				continue;
			if (c.f.type == AP_RESULT)
				break;
			assert_int_equal(c.f.type, AP_DIRENT);
			assert_true(i < 3);
			name = tlv_string(&c.f, AP_T_NAME);
			assert_string_equal(name, names[i]);
			free(name);
			assert_int_equal(tlv_uint(&c.f, AP_T_FTYPE), types[i]);
			if (types[i] == 'f')
				assert_int_equal(tlv_uint(&c.f, AP_T_SIZE), 5);
			i++;
		}
		assert_int_equal(i, 3);
		assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), 0);
	}
	assert_int_equal(file_request(&c, AP_FILE_LIST, sub, NULL, NULL, NULL), ENOTDIR);
	assert_int_equal(file_request(&c, AP_FILE_LIST, "/no/such/dir", NULL, NULL, NULL), ENOENT);
	/* removal */
	snprintf(sub, sizeof(sub), "%s/files/new", dir);
	assert_int_equal(file_request(&c, AP_FILE_REMOVE, sub, NULL, NULL, NULL), ENOTEMPTY);
	assert_int_equal(file_request(&c, AP_FILE_REMOVE, path, NULL, NULL, NULL), 0);
	assert_int_equal(file_request(&c, AP_FILE_REMOVE, path, NULL, NULL, NULL), ENOENT);
	snprintf(sub, sizeof(sub), "%s/files/new/deeper", dir);
	assert_int_equal(file_request(&c, AP_FILE_REMOVE, sub, NULL, NULL, NULL), 0);
	assert_int_equal(file_request(&c, AP_FILE_REMOVE, link, NULL, NULL, NULL), 0);
	assert_int_equal(stat(sub, &st), -1);
	/* a write into a path under a file fails, and more data than SIZE is refused */
	snprintf(sub, sizeof(sub), "%s/files/b-file/x", dir);
	assert_int_equal(write_file(&c, sub, data, 10, 0644), ENOTDIR);
	{
		uint64_t two = 2;
		snprintf(sub, sizeof(sub), "%s/files/short", dir);
		file_request(&c, AP_FILE_WRITE, sub, &two, NULL, &req);
		send_frame(&c, AP_FILE_DATA, 0, req, "abc", 3);
		expect(&c, AP_RESULT, req);
		assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), EINVAL);
		assert_int_equal(stat(sub, &st), -1);
	}
	/* a write abandoned by a disconnect leaves nothing behind */
	{
		uint64_t ten = 10;
		char *out;
		snprintf(sub, sizeof(sub), "%s/files/partial", dir);
		file_request(&c, AP_FILE_WRITE, sub, &ten, NULL, &req);
		send_frame(&c, AP_FILE_DATA, 0, req, "abc", 3);
		conn_close(&c);
		conn_open(&c, NULL, 0);
		file_request(&c, AP_FILE_LIST, d, NULL, NULL, &req);
		for (;;) {
			assert_true(next_frame(&c, TIMEOUT_MS));
			if (c.f.chan != req)
				continue;
			if (c.f.type == AP_RESULT)
				break;
			out = tlv_string(&c.f, AP_T_NAME);
			assert_null(strstr(out, "partial")); /* nor its temporary file */
			free(out);
		}
	}
	conn_close(&c);
}

/* Whether dir holds an entry whose name contains part (dot files included). */
static bool
dir_has(const char *d, const char *part)
{
	DIR *dh = opendir(d);
	struct dirent *e;
	bool found = false;

	assert_non_null(dh);
	while ((e = readdir(dh)))
		found |= strstr(e->d_name, part) != NULL;
	closedir(dh);
	return found;
}

/* FILE_DATA flags from the host: EOF ends a write's data before its SIZE (a body whose length
 * was known only at its end: SIZE was its most), ABORT gives a write up (the client went) and
 * leaves nothing behind; a write that never ends keeps its temporary file until then. */
static void
test_file_write_eof_abort(void **state)
{
	char d[300], path[400];
	uint64_t most = 1u << 20;
	struct buf got;
	struct conn c;
	struct stat st;
	uint32_t req;

	snprintf(d, sizeof(d), "%s/flags", dir);
	assert_int_equal(mkdir(d, 0700), 0);
	conn_open(&c, NULL, 0);
	/* EOF on the last piece of data */
	snprintf(path, sizeof(path), "%s/eof.txt", d);
	file_request(&c, AP_FILE_WRITE, path, &most, NULL, &req);
	send_frame(&c, AP_FILE_DATA, 0, req, "hello ", 6);
	send_frame(&c, AP_FILE_DATA, AP_F_EOF, req, "world", 5);
	expect(&c, AP_RESULT, req);
	assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), 0);
	assert_int_equal(tlv_uint(&c.f, AP_T_SIZE), 11);
	assert_int_equal(read_file(&c, path, 100, &got), 0);
	assert_int_equal(got.len, 11);
	assert_memory_equal(got.data, "hello world", 11);
	buf_free(&got);
	/* EOF alone, after the data */
	snprintf(path, sizeof(path), "%s/eof-empty-frame.txt", d);
	file_request(&c, AP_FILE_WRITE, path, &most, NULL, &req);
	send_frame(&c, AP_FILE_DATA, 0, req, "abc", 3);
	send_frame(&c, AP_FILE_DATA, AP_F_EOF, req, NULL, 0);
	expect(&c, AP_RESULT, req);
	assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 3);
	/* EOF with no data at all: an empty file */
	snprintf(path, sizeof(path), "%s/eof-nothing.txt", d);
	file_request(&c, AP_FILE_WRITE, path, &most, NULL, &req);
	send_frame(&c, AP_FILE_DATA, AP_F_EOF, req, NULL, 0);
	expect(&c, AP_RESULT, req);
	assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 0);
	/* ABORT halfway: ECANCELED, no file, no temporary file; an existing file stays */
	snprintf(path, sizeof(path), "%s/eof.txt", d);
	file_request(&c, AP_FILE_WRITE, path, &most, NULL, &req);
	send_frame(&c, AP_FILE_DATA, 0, req, "partial", 7);
	send_frame(&c, AP_FILE_DATA, AP_F_ABORT, req, NULL, 0);
	expect(&c, AP_RESULT, req);
	assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), ECANCELED);
	assert_false(dir_has(d, ".sbx-"));
	assert_int_equal(read_file(&c, path, 100, &got), 0);
	assert_memory_equal(got.data, "hello world", 11);
	buf_free(&got);
	snprintf(path, sizeof(path), "%s/aborted.txt", d);
	file_request(&c, AP_FILE_WRITE, path, &most, NULL, &req);
	send_frame(&c, AP_FILE_DATA, 0, req, "partial", 7);
	assert_int_equal(file_request(&c, AP_FILE_LIST, d, NULL, NULL, NULL), 0);
	assert_true(dir_has(d, ".aborted.txt.sbx-")); /* under way: its temporary file */
	send_frame(&c, AP_FILE_DATA, AP_F_ABORT, req, NULL, 0);
	expect(&c, AP_RESULT, req);
	assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), ECANCELED);
	assert_int_equal(stat(path, &st), -1);
	assert_false(dir_has(d, "aborted"));
	/* an exact SIZE still ends the write by itself */
	snprintf(path, sizeof(path), "%s/exact.txt", d);
	assert_int_equal(write_file(&c, path, (const uint8_t *)"12345", 5, 0644), 0);
	conn_close(&c);
}

static void
test_ps_and_unknown(void **state)
{
	static const char *const sleeper[] = { "sleep", "30", NULL };
	static const char *const quick[] = { "true", NULL };
	struct conn c;
	uint32_t req = next_req++;
	int a, b, seen = 0;

	conn_open(&c, NULL, 0);
	a = run(&c, sleeper, true);
	b = run(&c, quick, false);
	wait_exited(&c, (uint32_t)b);
	send_frame(&c, AP_PS, 0, req, NULL, 0);
	for (;;) {
		assert_true(next_frame(&c, TIMEOUT_MS));
		if (c.f.chan != req)
			continue;
		if (c.f.type == AP_RESULT)
			break;
		assert_int_equal(c.f.type, AP_PROC);
		if (tlv_uint(&c.f, AP_T_PID) == (uint64_t)a) {
			char *arg = tlv_string(&c.f, AP_T_ARG);
			assert_string_equal(arg, "sleep");
			free(arg);
			assert_int_equal(tlv_uint(&c.f, AP_T_STATE), AP_PROC_RUNNING);
			assert_int_equal(tlv_uint(&c.f, AP_T_KEEP), 1);
			assert_int_equal(tlv_uint(&c.f, AP_T_TTY), 0);
			assert_true(tlv_uint(&c.f, AP_T_STARTED_MS) > 1500000000000ull);
			seen++;
		}
		if (tlv_uint(&c.f, AP_T_PID) == (uint64_t)b) {
			assert_int_equal(tlv_uint(&c.f, AP_T_STATE), AP_PROC_EXITED);
			assert_int_equal(tlv_uint(&c.f, AP_T_EXIT_CODE), 0);
			assert_int_equal(tlv_uint(&c.f, AP_T_SIZE), 0);
			seen++;
		}
	}
	assert_int_equal(seen, 2);
	/* handles are never reused */
	assert_true(b > a);
	/* a frame type the guest only sends is ignored, and the session goes on */
	send_frame(&c, AP_RESULT, 0, 5, NULL, 0);
	send_frame(&c, AP_ATTACH, 0, 99999, "\0\0\0\0\0\0\0\0", 8); /* unknown handle */
	req = next_req++;
	send_frame(&c, AP_PING, 0, req, NULL, 0);
	expect(&c, AP_RESULT, req);
	send_signal(&c, (uint32_t)a, SIGKILL);
	wait_exited(&c, (uint32_t)a);
	release(&c, (uint32_t)a);
	release(&c, (uint32_t)b);
	conn_close(&c);
}

/* --- tunnels --- */

/* EXEC with PORT: the handle, or -errno. */
static int
open_tunnel(struct conn *c, uint16_t port)
{
	struct buf b = BUF_INIT(64);
	uint32_t req = next_req++;
	int err;

	assert_int_equal(tlv_put_u16(&b, AP_T_PORT, port), 0);
	send_tlvs(c, AP_EXEC, req, &b);
	expect(c, AP_RESULT, req);
	err = (int)tlv_uint(&c->f, AP_T_ERRNO);
	return err ? -err : (int)tlv_uint(&c->f, AP_T_PID);
}

/* Reads exactly n bytes from fd (blocking) into out. */
static void
read_exactly(int fd, char *out, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t k;
		assert_int_equal(poll(&pfd, 1, TIMEOUT_MS), 1);
		k = read(fd, out + got, n - got);
		assert_true(k > 0);
		got += (size_t)k;
	}
}

static bool
reads_eof(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char ch;

	return poll(&pfd, 1, TIMEOUT_MS) == 1 && read(fd, &ch, 1) == 0;
}

static void
test_tunnel(void **state)
{
	struct capture cap;
	struct conn c;
	int port, lfd = harness_tcp_listen(&port), peer, t, seen = 0;
	uint32_t req;
	char got[16] = { 0 };

	conn_open(&c, NULL, 0);
	t = open_tunnel(&c, port);
	assert_true(t > 0);
	peer = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(peer >= 0);

	/* host to guest: STDIN reaches the socket, and STDIN_ACK counts what it took */
	send_frame(&c, AP_STDIN, 0, (uint32_t)t, "ping", 4);
	read_exactly(peer, got, 4);
	assert_string_equal(got, "ping");
	expect(&c, AP_STDIN_ACK, (uint32_t)t);
	assert_int_equal(c.f.len, 8);
	assert_int_equal(be64_get(c.f.payload), 4);

	/* guest to host: OUTPUT once attached */
	assert_int_equal(write(peer, "pong", 4), 4);
	capture_init(&cap);
	send_u64(&c, AP_ATTACH, (uint32_t)t, 0);
	collect(&c, (uint32_t)t, &cap, "pong");

	/* the host's EOF half-closes: the peer reads EOF and can still answer */
	send_frame(&c, AP_STDIN, AP_F_EOF, (uint32_t)t, "!", 1);
	memset(got, 0, sizeof(got));
	read_exactly(peer, got, 1);
	assert_string_equal(got, "!");
	assert_true(reads_eof(peer));
	assert_int_equal(write(peer, "late", 4), 4);
	collect(&c, (uint32_t)t, &cap, "late");
	/* the peer's EOF: EXIT 0 after the last byte */
	close(peer);
	collect(&c, (uint32_t)t, &cap, NULL);
	assert_string_equal(cap.out.data, "ponglate");
	assert_int_equal(cap.code, 0);
	assert_int_equal(cap.dropped, 0);
	capture_done(&cap);

	/* a tunnel is not a process: PS does not list it */
	req = next_req++;
	send_frame(&c, AP_PS, 0, req, NULL, 0);
	for (;;) {
		assert_true(next_frame(&c, TIMEOUT_MS));
		if (c.f.chan != req)
			continue;
		if (c.f.type == AP_RESULT)
			break;
		seen += tlv_uint(&c.f, AP_T_PID) == (uint64_t)t;
	}
	assert_int_equal(seen, 0);
	release(&c, (uint32_t)t);

	/* the guest's side is not read while detached: more than the ring holds arrives whole */
	t = open_tunnel(&c, port);
	assert_true(t > 0);
	peer = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(peer >= 0);
	{
		pid_t writer = fork();
		assert_true(writer >= 0);
		if (writer == 0) {
			static char chunk[65536];
			for (int i = 0; i < 48; i++) { /* 3 MiB */
				memset(chunk, 'a' + i % 26, sizeof(chunk));
				if (write(peer, chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk))
					_exit(1);
			}
			_exit(0);
		}
		close(peer);
		usleep(300000); /* the writer fills the socket's buffers meanwhile */
		attach_collect(&c, (uint32_t)t, &cap);
		assert_int_equal(cap.dropped, 0);
		assert_int_equal(cap.out.len, 48u * 65536u);
		assert_int_equal(cap.out.data[47u * 65536u], 'a' + 47 % 26);
		assert_int_equal(cap.code, 0);
		capture_done(&cap);
		assert_int_equal(waitpid(writer, NULL, 0), writer);
	}
	release(&c, (uint32_t)t);

	/* the end of the session closes its tunnels */
	t = open_tunnel(&c, port);
	assert_true(t > 0);
	peer = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(peer >= 0);
	conn_close(&c);
	assert_true(reads_eof(peer));
	close(peer);

	/* nothing listens: ECONNREFUSED, and no handle */
	close(lfd);
	conn_open(&c, NULL, 0);
	assert_int_equal(open_tunnel(&c, port), -ECONNREFUSED);
	/* a PORT of 0 is malformed */
	{
		struct buf b = BUF_INIT(64);
		req = next_req++;
		assert_int_equal(tlv_put_u16(&b, AP_T_PORT, 0), 0);
		send_tlvs(&c, AP_EXEC, req, &b);
		expect(&c, AP_RESULT, req);
		assert_int_equal(tlv_uint(&c.f, AP_T_ERRNO), EINVAL);
	}
	conn_close(&c);
}

/* As root with --uid/--gid, processes and written files belong to that user. */
static void
test_switch_ids(void **state)
{
	static const char *const ids[] = { "sh", "-c", "id -u; id -g; id -G", NULL };
	static const char *const extra[] = { "--uid", "65534", "--gid", "65534", NULL };
	char path[400], file[400], *msg = NULL;
	struct capture cap;
	struct conn c;
	struct stat st;
	pid_t other;
	int pid, status;

	if (geteuid() != 0)
		harness_skip_case("switching the uid and gid of a process needs root");
	snprintf(path, sizeof(path), "%s/ids.sock", dir);
	other = start_agent(path, extra);
	assert_true(other > 0);
	conn_open_at(&c, path, NULL, 0);
	{
		/* the home directory sits in a 0700 directory of root's */
		struct exec_opts o = { .argv = ids };
		assert_int_equal(exec_proc(&c, &o, &msg), -EACCES);
		assert_non_null(strstr(msg, "Permission denied"));
		free(msg);
	}
	{
		struct exec_opts o = { .argv = ids, .cwd = "/" };
		pid = exec_proc(&c, &o, NULL);
		assert_true(pid > 0);
		attach_collect(&c, (uint32_t)pid, &cap);
		assert_string_equal(cap.out.data, "65534\n65534\n65534\n");
		capture_done(&cap);
	}
	/* files are written as that user: a directory of root's that others may only
	 * traverse refuses them */
	assert_int_equal(chmod(dir, 0711), 0);
	snprintf(file, sizeof(file), "%s/rootonly", dir);
	assert_int_equal(write_file(&c, file, (const uint8_t *)"x", 1, 0640), EACCES);
	assert_int_equal(stat(file, &st), -1);
	snprintf(file, sizeof(file), "%s/owned", dir);
	assert_int_equal(mkdir(file, 0700), 0);
	assert_int_equal(chown(file, 65534, 65534), 0);
	snprintf(file, sizeof(file), "%s/owned/sub/file", dir);
	assert_int_equal(write_file(&c, file, (const uint8_t *)"x", 1, 0640), 0);
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(st.st_uid, 65534);
	assert_int_equal(st.st_gid, 65534);
	snprintf(file, sizeof(file), "%s/owned/sub", dir);
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(st.st_uid, 65534);
	conn_close(&c);
	kill(other, SIGTERM);
	assert_int_equal(waitpid(other, &status, 0), other);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handshake_and_ping),
		cmocka_unit_test(test_exec_streams),
		cmocka_unit_test(test_exec_environment),
		cmocka_unit_test(test_exec_failures),
		cmocka_unit_test(test_tty_size_and_resize),
		cmocka_unit_test(test_stdin_and_signal),
		cmocka_unit_test(test_stdin_acks),
		cmocka_unit_test(test_keep_across_reconnect),
		cmocka_unit_test(test_dropped_while_detached),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_tty_hangup_while_throttled),
		cmocka_unit_test(test_files),
		cmocka_unit_test(test_file_write_eof_abort),
		cmocka_unit_test(test_ps_and_unknown),
		cmocka_unit_test(test_tunnel),
		cmocka_unit_test(test_switch_ids),
	};

	guestd = argc > 1 ? argv[1] : getenv("SANDBOX_GUESTD");
	if (!guestd || !*guestd) {
		fprintf(stderr, "test-guestd: set SANDBOX_GUESTD (or pass the binary): skipped\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
