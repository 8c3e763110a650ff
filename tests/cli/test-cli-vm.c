/* test-cli-vm.c: sandbox-cli's process and file verbs against the product sandboxd and real
 * microVMs: run (the guest's kernel, exit codes, stdin, the sandbox removed or kept, and
 * removed by the server when the CLI is killed), exec,
 * ps, attach with its replay, cp both ways, and the raw terminal of shell and --tty driven
 * through a pseudo-terminal as a person would, the upgraded connection over https, and
 * port-forward to a guest's busybox httpd answering a local curl. One
 * shared sandbox keeps the boots few. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <openssl/sha.h>
#include "harness.h"
#include "util.h"

#define SBX "t" /* the shared sandbox */
#define TIMEOUT_S 120

extern char **environ;

static struct daemon_proc sbxd;
static const char *cli_bin;
static char home[256];
static char endpoint[320];
static char https_ep[64]; /* empty when openssl is not installed */
static char token_file[320], ca_file[320];

/* ---- running the CLI ---- */

struct result {
	int rc;
	struct buf out, err;
};

static void
result_done(struct result *r)
{
	buf_free(&r->out);
	buf_free(&r->err);
}

static const char *
text(const struct buf *b)
{
	return b->data ? b->data : "";
}

static void
no_sanitizer_report(const char *what, const char *err)
{
	if (strstr(err, "Sanitizer") || strstr(err, "runtime error:"))
		fail_msg("sandbox-cli %s: sanitizer report:\n%s", what, err);
}

/* argv for the CLI: the binary, --endpoint, then args. */
static void
build_argv(const char **argv, size_t max, const char *const *args)
{
	size_t n = 0;

	argv[n++] = cli_bin;
	argv[n++] = "--endpoint";
	argv[n++] = endpoint;
	for (size_t i = 0; args[i] && n < max - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
}

/* Starts the CLI with stdin (-1: /dev/null) and pipes for stdout and stderr. */
static pid_t
spawn_cli(const char *const *args, int in_fd, int *ret_out, int *ret_err)
{
	posix_spawn_file_actions_t fa;
	const char *argv[64];
	int out[2], err[2];
	pid_t pid;

	build_argv(argv, ARRAY_SIZE(argv), args);
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	assert_int_equal(pipe2(err, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	if (in_fd >= 0)
		posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
	else
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_adddup2(&fa, err[1], 2);
	assert_int_equal(posix_spawn(&pid, cli_bin, &fa, NULL, (char **)argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(out[1]);
	close(err[1]);
	*ret_out = out[0];
	*ret_err = err[0];
	return pid;
}

static int
wait_exit(pid_t pid)
{
	int status;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs the CLI to the end, feeding it in (in_len bytes; NULL: /dev/null as stdin). */
static void
cli_io(struct result *res, const void *in, size_t in_len, const char *const *args)
{
	uint64_t deadline = now_mono_ms() + TIMEOUT_S * 1000;
	int in_pipe[2] = { -1, -1 }, out_fd, err_fd;
	size_t in_off = 0;
	pid_t pid;

	*res = (struct result){ .out = BUF_INIT(64u << 20), .err = BUF_INIT(1u << 20) };
	if (in)
		assert_int_equal(pipe2(in_pipe, O_CLOEXEC), 0);
	pid = spawn_cli(args, in ? in_pipe[0] : -1, &out_fd, &err_fd);
	if (in) {
		close(in_pipe[0]);
		fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
		if (in_len == 0)
			in_pipe[1] = safe_close(in_pipe[1]);
	}
	while (out_fd >= 0 || err_fd >= 0) {
		struct pollfd pfd[3] = { { .fd = out_fd, .events = POLLIN },
			                 { .fd = err_fd, .events = POLLIN },
			                 { .fd = in_pipe[1], .events = POLLOUT } };
		char chunk[65536];

		if (now_mono_ms() > deadline) {
			kill(pid, SIGKILL);
			fail_msg("sandbox-cli %s: no end within %d s; stderr:\n%s", args[0],
			         TIMEOUT_S, text(&res->err));
		}
		assert_true(poll(pfd, 3, 1000) >= 0);
		for (int i = 0; i < 2; i++) {
			int *fd = i ? &err_fd : &out_fd;
			ssize_t n;
			if (!pfd[i].revents)
				continue;
			n = read(*fd, chunk, sizeof(chunk));
			if (n <= 0)
				*fd = safe_close(*fd);
			else
				assert_int_equal(
				        buf_append(i ? &res->err : &res->out, chunk, (size_t)n), 0);
		}
		if (pfd[2].revents & POLLOUT) {
			ssize_t n = write(in_pipe[1], (const char *)in + in_off, in_len - in_off);
			if (n > 0)
				in_off += (size_t)n;
			if (in_off == in_len || (n < 0 && errno != EAGAIN))
				in_pipe[1] = safe_close(in_pipe[1]);
		} else if (pfd[2].revents) {
			in_pipe[1] = safe_close(in_pipe[1]);
		}
	}
	safe_close(in_pipe[1]);
	res->rc = wait_exit(pid);
	no_sanitizer_report(args[0], text(&res->err));
}

#define RUN(res, ...) cli_io(res, NULL, 0, (const char *const[]){ __VA_ARGS__, NULL })
#define RUN_IN(res, in, len, ...) cli_io(res, in, len, (const char *const[]){ __VA_ARGS__, NULL })

static void
expect_in(const char *where, const struct buf *b, const char *needle)
{
	if (!strstr(text(b), needle))
		fail_msg("expected '%s' in %s:\n%s", needle, where, text(b));
}

/* Reads fd into b until needle shows up; fails after timeout_s. */
static void
read_until(int fd, struct buf *b, const char *needle, int timeout_s)
{
	uint64_t deadline = now_mono_ms() + (uint64_t)timeout_s * 1000;

	while (!strstr(text(b), needle)) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		char chunk[4096];
		ssize_t n;

		if (now_mono_ms() > deadline)
			fail_msg("waited %d s for '%s'; got:\n%s", timeout_s, needle, text(b));
		if (poll(&pfd, 1, 200) <= 0)
			continue;
		n = read(fd, chunk, sizeof(chunk));
		if (n <= 0)
			fail_msg("the output ended before '%s'; got:\n%s", needle, text(b));
		assert_int_equal(buf_append(b, chunk, (size_t)n), 0);
	}
}

/* Reads fd to its end into b. */
static void
read_rest(int fd, struct buf *b)
{
	char chunk[4096];
	ssize_t n;

	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		assert_int_equal(buf_append(b, chunk, (size_t)n), 0);
	close(fd);
}

/* A process's pid from "sandbox-cli attach SBX PID" in a hint. */
static unsigned
hinted_pid(const char *err)
{
	const char *p = strstr(err, "sandbox-cli attach " SBX " ");

	if (!p)
		fail_msg("no 'sandbox-cli attach " SBX " PID' hint in:\n%s", err);
	return (unsigned)strtoul(p + strlen("sandbox-cli attach " SBX " "), NULL, 10);
}

/* The row of `ps SBX` for pid, or fails. Caller frees. */
static char *
ps_row(unsigned pid)
{
	struct result r;
	char start[32];
	const char *line;
	char *row;

	RUN(&r, "ps", SBX);
	assert_int_equal(r.rc, 0);
	expect_in("ps", &r.out, "PID  STATE");
	snprintf(start, sizeof(start), "\n%u ", pid);
	line = strstr(text(&r.out), start);
	if (!line)
		fail_msg("process %u is not listed:\n%s", pid, text(&r.out));
	row = strndup(line + 1, strcspn(line + 1, "\n"));
	result_done(&r);
	return row;
}

/* ---- the daemon and the shared sandbox ---- */

/* A private CA, a certificate for localhost and a token, so that the daemon also serves
 * https; without openssl, https_ep stays empty and the https case is skipped. */
static char listen_arg[32], cert_file[320], key_file[320];
/* 127.0.0.1:1: a registry the operator named where nothing listens */
/* --client-grace 5: a run whose client died is ended 5 s later (30 by default) */
static const char *tls_args[] = { "--listen",    listen_arg,       "--token-file",
	                          token_file,    "--tls-cert",     cert_file,
	                          "--tls-key",   key_file,         "--insecure-registry",
	                          "127.0.0.1:1", "--client-grace", "5",
	                          NULL };
static const char *plain_args[] = { "--insecure-registry", "127.0.0.1:1", "--client-grace", "5",
	                            NULL };
#define CLIENT_GRACE_S 5

static int
make_tls_files(void)
{
	int port = harness_free_port();
	FILE *f;

	if (system("openssl version >/dev/null 2>&1") != 0 || port <= 0)
		return 0;
	if (harness_make_certs(home, "", false) < 0)
		return -1;
	snprintf(token_file, sizeof(token_file), "%s/token", home);
	snprintf(ca_file, sizeof(ca_file), "%s/ca.pem", home);
	snprintf(cert_file, sizeof(cert_file), "%s/server.pem", home);
	snprintf(key_file, sizeof(key_file), "%s/server.key", home);
	f = fopen(token_file, "w");
	if (!f || fputs("cli-vm-test-token-0123456789abcdef\n", f) < 0 || fclose(f) != 0 ||
	    chmod(token_file, 0600) < 0)
		return -1;
	snprintf(listen_arg, sizeof(listen_arg), "127.0.0.1:%d", port);
	snprintf(https_ep, sizeof(https_ep), "https://localhost:%d", port);
	return 0;
}

static int
setup(void **state)
{
	struct result r;

	cli_bin = harness_binary("SANDBOX_CLI");
	if (harness_tmpdir(home, sizeof(home)) < 0)
		return -1;
	setenv("HOME", home, 1);
	unsetenv("XDG_CONFIG_HOME");
	unsetenv("SANDBOX_CONTEXT");
	unsetenv("SANDBOX_ENDPOINT");
	unsetenv("SANDBOX_TOKEN");
	unsetenv("SANDBOX_CA");
	setenv("TERM", "xterm", 1);
	if (make_tls_files() < 0)
		return -1;
	if (harness_start_vm(&sbxd, https_ep[0] ? tls_args : plain_args, NULL) < 0)
		return -1;
	snprintf(endpoint, sizeof(endpoint), "unix://%s", sbxd.sock);
	RUN(&r, "create", "--name", SBX);
	if (r.rc != 0) {
		fprintf(stderr, "create failed (%d):\n%s", r.rc, text(&r.err));
		result_done(&r);
		return -1;
	}
	result_done(&r);
	return 0;
}

static int
teardown(void **state)
{
	struct result r;
	char cmd[320];
	int rc, strays;

	RUN(&r, "kill", SBX);
	result_done(&r);
	rc = harness_stop(&sbxd, SIGTERM);
	strays = harness_kill_vmms(sbxd.state);
	if (rc != 0 || strays > 0) {
		/* say why: a sanitizer's report, else the end of the log */
		_cleanup_free_ char *log = NULL;
		const char *from;
		size_t len = 0;
		(void)read_file_max(sbxd.log, 16u << 20, &log, &len);
		from = log ? strstr(log, "ERROR: AddressSanitizer") : NULL;
		if (log && !from)
			from = log + (len > 4000 ? len - 4000 : 0);
		fprintf(stderr,
		        "sandboxd ended with %d, %d VMM(s) left behind; its log:\n%.4000s\n", rc,
		        strays, from ? from : "(none)");
	}
	harness_cleanup(&sbxd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
	if (!getenv("HARNESS_KEEP") && system(cmd) != 0)
		return -1;
	return rc == 0 && strays == 0 ? 0 : -1;
}

/* Only the shared sandbox is left. */
static void
expect_only_shared_sandbox(void)
{
	struct result r;
	json_t *j, *list;

	RUN(&r, "list", "--json");
	assert_int_equal(r.rc, 0);
	j = json_loads(text(&r.out), 0, NULL);
	list = json_object_get(j, "sandboxes");
	if (json_array_size(list) != 1)
		fail_msg("only '" SBX "' should be left:\n%s", text(&r.out));
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "name")),
	                    SBX);
	json_decref(j);
	result_done(&r);
}

/* ---- run ---- */

static void
test_run_prints_the_guest_kernel_and_removes_the_sandbox(void **state)
{
	struct utsname u;
	struct result r;

	assert_int_equal(uname(&u), 0);
	RUN(&r, "run", "--", "uname", "-r");
	assert_int_equal(r.rc, 0);
	/* a kernel release, and not the host's */
	assert_true(r.out.len > 2 && r.out.data[0] >= '0' && r.out.data[0] <= '9');
	assert_int_equal(r.out.data[r.out.len - 1], '\n');
	r.out.data[r.out.len - 1] = '\0';
	if (streq(r.out.data, u.release))
		fail_msg("run printed the host's kernel '%s'", u.release);
	assert_string_equal(text(&r.err), "");
	result_done(&r);
	expect_only_shared_sandbox();
}

static void
test_run_exit_code_stdin_and_keep(void **state)
{
	static const char in[] = "line one\n\0binary\0\xff\xfe\nlast";
	struct result r;

	/* the command's exit code is ours; a piped stdin reaches it byte for byte and ends */
	RUN_IN(&r, in, sizeof(in) - 1, "run", "--keep", "--name", "kept", "--", "sh", "-c",
	       "cat; exit 7");
	assert_int_equal(r.rc, 7);
	assert_int_equal(r.out.len, sizeof(in) - 1);
	assert_memory_equal(r.out.data, in, sizeof(in) - 1);
	/* --keep: the sandbox stays, and stderr says which it is */
	expect_in("stderr", &r.err, "sandbox sbx_");
	expect_in("stderr", &r.err, "is kept");
	result_done(&r);
	RUN(&r, "kill", "kept");
	assert_int_equal(r.rc, 0);
	result_done(&r);

	/* a command that cannot start: the CLI's own exit code, and no sandbox left */
	RUN(&r, "run", "--", "no-such-program");
	assert_int_equal(r.rc, 2);
	expect_in("stderr", &r.err, "no-such-program");
	result_done(&r);
	expect_only_shared_sandbox();
}

/* The id of the running sandbox other than the shared one whose process runs (up to 120 s:
 * a boot under TCG). */
static void
await_run_sandbox(char id[static 64])
{
	for (int i = 0; i < 600; i++) {
		json_t *list = harness_json(sbxd.sock, "GET", "/v1/sandboxes?state=running", NULL,
		                            200),
		       *sb;
		bool found = false;
		size_t k;

		json_array_foreach (json_object_get(list, "sandboxes"), k, sb) {
			char path[160];
			json_t *procs;
			if (streq(harness_str(sb, "name") ?: "", SBX))
				continue;
			snprintf(id, 64, "%s", harness_str(sb, "id"));
			snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
			procs = harness_json(sbxd.sock, "GET", path, NULL, 200);
			found = json_array_size(json_object_get(procs, "processes")) > 0;
			json_decref(procs);
		}
		json_decref(list);
		if (found)
			return;
		usleep(200000);
	}
	fail_msg("sandbox-cli run never got its process running");
}

static const char *
state_of(const char *id)
{
	static char state[32];
	char path[160];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	j = harness_json(sbxd.sock, "GET", path, NULL, 200);
	snprintf(state, sizeof(state), "%s", harness_str(j, "state") ?: "");
	json_decref(j);
	return state;
}

/* The Done-when of issue 14: a run whose client is killed (SIGKILL: it cannot remove its
 * sandbox) leaves no sandbox behind within a minute; with --keep, the sandbox stays. */
static void
test_run_killed_leaves_nothing(void **state)
{
	const char *const bound[] = { "run", "--", "sleep", "600", NULL };
	const char *const kept[] = { "run", "--keep", "--name", "kept-run",
		                     "--",  "sleep",  "600",    NULL };
	char id[64];
	int out, err, i;
	pid_t pid;

	pid = spawn_cli(bound, -1, &out, &err);
	await_run_sandbox(id);
	assert_int_equal(kill(pid, SIGKILL), 0);
	wait_exit(pid);
	close(out);
	close(err);
	for (i = 0; i < 120 && !streq(state_of(id), "terminated"); i++)
		usleep(500000);
	if (i == 120)
		fail_msg("the sandbox of a killed run is %s a minute later", state_of(id));
	expect_only_shared_sandbox();

	pid = spawn_cli(kept, -1, &out, &err);
	await_run_sandbox(id);
	assert_int_equal(kill(pid, SIGKILL), 0);
	wait_exit(pid);
	close(out);
	close(err);
	sleep(2 * CLIENT_GRACE_S + 2);
	assert_string_equal(state_of(id), "running");
	{
		struct result r;
		RUN(&r, "kill", "kept-run");
		assert_int_equal(r.rc, 0);
		result_done(&r);
	}
	expect_only_shared_sandbox();
}

/* ---- exec ---- */

static void
test_exec_streams_stdin_cwd_env_and_exit_codes(void **state)
{
	size_t big_len = 300u << 10;
	_cleanup_free_ char *big = malloc(big_len);
	struct result r;

	/* stdout and stderr stay apart */
	RUN(&r, "exec", SBX, "--", "sh", "-c", "echo out; echo err >&2; exit 3");
	assert_int_equal(r.rc, 3);
	assert_string_equal(text(&r.out), "out\n");
	assert_string_equal(text(&r.err), "err\n");
	result_done(&r);

	/* binary stdin, more than one frame and one window, comes back whole */
	assert_non_null(big);
	for (size_t i = 0; i < big_len; i++)
		big[i] = (char)(i * 7 + i / 251);
	RUN_IN(&r, big, big_len, "exec", SBX, "--", "cat");
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.out.len, big_len);
	assert_memory_equal(r.out.data, big, big_len);
	result_done(&r);

	/* --cwd, --env, and a signal's 128+N */
	RUN(&r, "exec", SBX, "--cwd", "/etc", "--env", "GREETING=hi there", "--", "sh", "-c",
	    "pwd; echo \"$GREETING\"");
	assert_int_equal(r.rc, 0);
	assert_string_equal(text(&r.out), "/etc\nhi there\n");
	result_done(&r);
	RUN(&r, "exec", SBX, "--", "sh", "-c", "kill -9 $$");
	assert_int_equal(r.rc, 137);
	result_done(&r);
	/* a timeout is 124, as timeout(1) says it, and said */
	RUN(&r, "exec", SBX, "--timeout", "1", "--", "sleep", "30");
	assert_int_equal(r.rc, 124);
	assert_non_null(strstr(text(&r.err), "timeout"));
	result_done(&r);

	/* a terminal-less stdin that is empty ends the command's input at once */
	RUN(&r, "exec", SBX, "--", "wc", "-c");
	assert_int_equal(r.rc, 0);
	assert_string_equal(text(&r.out), "0\n");
	result_done(&r);

	/* a missing sandbox or program */
	RUN(&r, "exec", "nope", "--", "true");
	assert_int_equal(r.rc, 5);
	result_done(&r);
	RUN(&r, "exec", SBX, "--cwd", "/no/such/dir", "--", "true");
	assert_int_equal(r.rc, 2);
	result_done(&r);
}

/* 32 MiB piped into a process that reads nothing for 3 s: the guest's agent acknowledges stdin
 * as the process takes it and sandboxd waits for that, so all of it arrives (its SHA-256 checked
 * in the guest). Before, the agent kept 16 MiB and dropped the rest, and exec still exited 0. */
static void
test_exec_stdin_to_a_slow_reader_is_whole(void **state)
{
	size_t len = 32u << 20;
	_cleanup_free_ char *data = malloc(len);
	unsigned char md[SHA256_DIGEST_LENGTH];
	char want[128];
	struct result r;
	int n;

	assert_non_null(data);
	for (size_t i = 0; i < len; i++)
		data[i] = (char)((i * 2654435761u) >> 13);
	SHA256((const unsigned char *)data, len, md);
	n = snprintf(want, sizeof(want), "%zu\n", len);
	for (size_t i = 0; i < sizeof(md); i++)
		n += snprintf(want + n, sizeof(want) - (size_t)n, "%02x", md[i]);
	snprintf(want + n, sizeof(want) - (size_t)n, "  -\n");
	RUN_IN(&r, data, len, "exec", SBX, "--", "sh", "-c",
	       "sleep 3; cat > in.bin; wc -c < in.bin; sha256sum < in.bin; rm in.bin");
	assert_int_equal(r.rc, 0);
	assert_string_equal(text(&r.out), want);
	result_done(&r);
}

static void
test_ctrl_c_is_forwarded_then_detaches(void **state)
{
	struct buf out = BUF_INIT(1u << 20), err = BUF_INIT(1u << 20);
	const char *const args[] = { "exec",
		                     SBX,
		                     "--",
		                     "sh",
		                     "-c",
		                     "trap 'echo got INT; exit 5' INT; echo ready; "
		                     "while :; do sleep 1; done",
		                     NULL };
	const char *const stubborn[] = { "exec", SBX,  "--",
		                         "sh",   "-c", "trap '' INT; echo ready; sleep 60",
		                         NULL };
	int out_fd, err_fd;
	unsigned pid;
	char *row;
	pid_t p;

	/* the first Ctrl-C reaches the command */
	p = spawn_cli(args, -1, &out_fd, &err_fd);
	read_until(out_fd, &out, "ready\n", 60);
	kill(p, SIGINT);
	read_rest(out_fd, &out);
	read_rest(err_fd, &err);
	assert_int_equal(wait_exit(p), 5);
	assert_string_equal(text(&out), "ready\ngot INT\n");
	no_sanitizer_report("exec", text(&err));
	buf_reset(&out);
	buf_reset(&err);

	/* one that ignores it: the second Ctrl-C leaves, and the command runs on */
	p = spawn_cli(stubborn, -1, &out_fd, &err_fd);
	read_until(out_fd, &out, "ready\n", 60);
	kill(p, SIGINT);
	usleep(300 * 1000);
	kill(p, SIGINT);
	read_rest(out_fd, &out);
	read_rest(err_fd, &err);
	assert_int_equal(wait_exit(p), 130);
	no_sanitizer_report("exec", text(&err));
	pid = hinted_pid(text(&err));
	row = ps_row(pid);
	if (!strstr(row, "running"))
		fail_msg("process %u should still run: %s", pid, row);
	free(row);
	buf_free(&out);
	buf_free(&err);
}

/* ---- ps and attach ---- */

static void
test_attach_replays_what_happened_meanwhile(void **state)
{
	struct buf out = BUF_INIT(1u << 20), err = BUF_INIT(1u << 20);
	const char *const args[] = {
		"exec", "--keep", SBX, "--", "sh", "-c", "echo one; sleep 1; echo two; sleep 30",
		NULL
	};
	const char *const again[] = { "attach", SBX, NULL };
	int out_fd, err_fd;
	unsigned pid;
	char *row;
	pid_t p;

	/* the first client goes away after "one" */
	p = spawn_cli(args, -1, &out_fd, &err_fd);
	read_until(out_fd, &out, "one\n", 60);
	kill(p, SIGTERM);
	read_rest(out_fd, &out);
	read_rest(err_fd, &err);
	assert_int_equal(wait_exit(p), 128 + SIGTERM);
	no_sanitizer_report("exec", text(&err));
	assert_string_equal(text(&out), "one\n");
	pid = hinted_pid(text(&err));

	/* ps lists it, kept and running */
	row = ps_row(pid);
	if (!strstr(row, "running") || !strstr(row, "yes") ||
	    !strstr(row, "sh -c 'echo one; sleep 1; echo two; sleep 30'"))
		fail_msg("ps row of process %u: %s", pid, row);
	free(row);
	sleep(2);

	/* attach (the newest running process) replays both lines, then Ctrl-C detaches */
	buf_reset(&out);
	buf_reset(&err);
	p = spawn_cli(again, -1, &out_fd, &err_fd);
	read_until(out_fd, &out, "two\n", 60);
	assert_string_equal(text(&out), "one\ntwo\n");
	kill(p, SIGINT);
	read_rest(out_fd, &out);
	read_rest(err_fd, &err);
	assert_int_equal(wait_exit(p), 0);
	no_sanitizer_report("attach", text(&err));
	assert_int_equal(hinted_pid(text(&err)), pid);
	row = ps_row(pid);
	if (!strstr(row, "running"))
		fail_msg("detaching stopped process %u: %s", pid, row);
	free(row);
	buf_free(&out);
	buf_free(&err);
}

/* ---- cp ---- */

/* run --image naming a registry the server cannot reach: it says so, and does not send the
 * user off to try again later (waiting gives the server no route); nothing is left */
static void
test_run_unreachable_registry(void **state)
{
	struct result r;

	RUN(&r, "run", "--image", "127.0.0.1:1/cli/nowhere:1", "--", "true");
	assert_int_equal(r.rc, 1);
	expect_in("stderr", &r.err, "sandbox-cli: unavailable: registry 127.0.0.1:1");
	expect_in("stderr", &r.err, "trying again will not help until that changes");
	if (strstr(text(&r.err), "try again later"))
		fail_msg("the hint sends the user off to try again later:\n%s", text(&r.err));
	result_done(&r);
	RUN(&r, "list", "--all");
	assert_int_equal(r.rc, 0);
	if (strstr(text(&r.out), "nowhere"))
		fail_msg("a sandbox was left: %s", text(&r.out));
	result_done(&r);
}

static void
test_cp_both_ways(void **state)
{
	char local[320], back[320], dir[320];
	size_t len = 200u << 10;
	_cleanup_free_ char *data = malloc(len), *got = NULL;
	size_t got_len = 0;
	struct result r;
	FILE *f;

	assert_non_null(data);
	for (size_t i = 0; i < len; i++)
		data[i] = (char)(i % 253);
	snprintf(local, sizeof(local), "%s/data.bin", home);
	snprintf(back, sizeof(back), "%s/back.bin", home);
	snprintf(dir, sizeof(dir), "%s/into", home);
	f = fopen(local, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	fclose(f);

	/* a local file in (parent directories are made), and back out */
	RUN(&r, "cp", local, SBX ":/sandbox/home/new/dir/data.bin");
	assert_int_equal(r.rc, 0);
	result_done(&r);
	RUN(&r, "cp", SBX ":/sandbox/home/new/dir/data.bin", back);
	assert_int_equal(r.rc, 0);
	result_done(&r);
	assert_int_equal(read_file_max(back, 1u << 20, &got, &got_len), 0);
	assert_int_equal(got_len, len);
	assert_memory_equal(got, data, len);

	/* stdin in, stdout out; a local directory gets the file under its own name */
	RUN_IN(&r, "a\0b\n", 4, "cp", "-", SBX ":/tmp/small");
	assert_int_equal(r.rc, 0);
	result_done(&r);
	RUN(&r, "cp", SBX ":/tmp/small", "-");
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.out.len, 4);
	assert_memory_equal(r.out.data, "a\0b\n", 4);
	result_done(&r);
	assert_int_equal(mkdir(dir, 0700), 0);
	RUN(&r, "cp", SBX ":/tmp/small", dir);
	assert_int_equal(r.rc, 0);
	result_done(&r);
	snprintf(back, sizeof(back), "%s/into/small", home);
	assert_int_equal(access(back, F_OK), 0);

	/* what goes wrong: a missing file (5), directories (2), no sandbox side (2) */
	RUN(&r, "cp", SBX ":/no/such/file", back);
	assert_int_equal(r.rc, 5);
	expect_in("stderr", &r.err, "not_found");
	result_done(&r);
	RUN(&r, "cp", SBX ":/etc", back);
	assert_int_equal(r.rc, 2);
	expect_in("stderr", &r.err, "is a directory");
	result_done(&r);
	RUN(&r, "cp", dir, SBX ":/tmp/x");
	assert_int_equal(r.rc, 2);
	expect_in("stderr", &r.err, "is a directory");
	result_done(&r);
	RUN(&r, "cp", local, back);
	assert_int_equal(r.rc, 2);
	result_done(&r);

	/* ls: the directory the copy made, sorted by name; a name with an escape sequence and a
	 * newline in it (a hostile guest's) is printed escaped (\x1b, \n as text), on one line */
	RUN_IN(&r, "x", 1, "cp", "-", SBX ":/sandbox/home/new/dir/evil\033[2J\nname");
	assert_int_equal(r.rc, 0);
	result_done(&r);
	RUN(&r, "ls", SBX ":/sandbox/home/new/dir");
	assert_int_equal(r.rc, 0);
	expect_in("ls", &r.out, "TYPE  SIZE    NAME\n");
	expect_in("ls", &r.out, "file  204800  data.bin\n");
	expect_in("ls", &r.out, "file  1       evil\\x1b[2J\\nname\n");
	assert_null(memchr(r.out.data, '\033', r.out.len));
	result_done(&r);
	RUN(&r, "ls", SBX);
	assert_int_equal(r.rc, 0);
	expect_in("ls of the home directory", &r.out, "dir   ");
	expect_in("ls of the home directory", &r.out, "  new\n");
	result_done(&r);
	RUN(&r, "ls", SBX ":/no/such/dir");
	assert_int_equal(r.rc, 5);
	expect_in("stderr", &r.err, "not_found");
	result_done(&r);
}

/* ---- https ---- */

static void
test_exec_over_https(void **state)
{
	size_t len = 1u << 20;
	_cleanup_free_ char *data = NULL;
	struct result r;

	if (!https_ep[0])
		harness_skip_case("openssl is not installed; attach over https is untested");
	/* the upgraded connection is TLS, with the token and the private CA of every request */
	data = malloc(len);
	assert_non_null(data);
	for (size_t i = 0; i < len; i++)
		data[i] = (char)(i * 13 + i / 509);
	RUN_IN(&r, data, len, "exec", SBX, "--endpoint", https_ep, "--token-file", token_file,
	       "--ca", ca_file, "--", "sh", "-c", "cat; echo done >&2; exit 9");
	assert_int_equal(r.rc, 9);
	assert_int_equal(r.out.len, len);
	assert_memory_equal(r.out.data, data, len);
	assert_string_equal(text(&r.err), "done\n");
	result_done(&r);
	/* the token is needed there too */
	RUN(&r, "exec", SBX, "--endpoint", https_ep, "--ca", ca_file, "--", "true");
	assert_int_equal(r.rc, 4);
	result_done(&r);
}

/* ---- the raw terminal ---- */

struct term {
	pid_t pid;
	int master;
	struct buf screen;
};

static void
term_start(struct term *t, unsigned short rows, unsigned short cols, const char *const *args)
{
	struct winsize ws = { .ws_row = rows, .ws_col = cols };
	const char *argv[64];

	build_argv(argv, ARRAY_SIZE(argv), args);
	t->screen = (struct buf)BUF_INIT(4u << 20);
	t->pid = forkpty(&t->master, NULL, NULL, &ws);
	assert_true(t->pid >= 0);
	if (t->pid == 0) {
		execve(cli_bin, (char **)argv, environ);
		_exit(127);
	}
}

/* Waits until the screen shows needle (after what was seen before). */
static void
term_expect(struct term *t, const char *needle)
{
	uint64_t deadline = now_mono_ms() + 60000;

	while (!strstr(text(&t->screen), needle)) {
		struct pollfd pfd = { .fd = t->master, .events = POLLIN };
		char chunk[4096];
		ssize_t n;

		if (now_mono_ms() > deadline)
			fail_msg("the terminal never showed '%s':\n%s", needle, text(&t->screen));
		if (poll(&pfd, 1, 200) <= 0)
			continue;
		n = read(t->master, chunk, sizeof(chunk));
		if (n <= 0)
			fail_msg("the terminal closed before '%s':\n%s", needle, text(&t->screen));
		assert_int_equal(buf_append(&t->screen, chunk, (size_t)n), 0);
	}
}

static void
term_type(struct term *t, const char *keys)
{
	/* the screen so far is forgotten: what follows is the answer to these keys */
	buf_reset(&t->screen);
	assert_int_equal(write(t->master, keys, strlen(keys)), (ssize_t)strlen(keys));
}

static void
term_resize(struct term *t, unsigned short rows, unsigned short cols)
{
	struct winsize ws = { .ws_row = rows, .ws_col = cols };

	/* the kernel tells the foreground process group (sandbox-cli) with SIGWINCH */
	assert_int_equal(ioctl(t->master, TIOCSWINSZ, &ws), 0);
}

/* Reads the terminal to its end and returns the exit code. */
static int
term_end(struct term *t)
{
	char chunk[4096];
	ssize_t n;
	int rc;

	while ((n = read(t->master, chunk, sizeof(chunk))) > 0)
		assert_int_equal(buf_append(&t->screen, chunk, (size_t)n), 0);
	rc = wait_exit(t->pid);
	close(t->master);
	no_sanitizer_report("(terminal)", text(&t->screen));
	return rc;
}

static void
test_shell_refuses_a_non_terminal(void **state)
{
	struct result r;

	RUN(&r, "shell", SBX);
	assert_int_equal(r.rc, 2);
	expect_in("stderr", &r.err, "needs a terminal");
	result_done(&r);
}

static void
test_shell_in_a_terminal(void **state)
{
	const char *const shell[] = { "shell", SBX, NULL };
	char attach_pid[16], *row;
	struct term t = { 0 };
	unsigned pid;

	term_start(&t, 30, 100, shell);
	term_expect(&t, "$ ");
	/* the window size is the terminal's, and follows it */
	term_type(&t, "stty size\r");
	term_expect(&t, "30 100\r\n");
	term_expect(&t, "$ ");
	term_resize(&t, 40, 120);
	usleep(300 * 1000);
	term_type(&t, "stty size\r");
	term_expect(&t, "40 120\r\n");
	term_expect(&t, "$ ");
	/* colours pass as they are */
	term_type(&t, "printf '\\033[31mred\\033[0m\\n'\r");
	term_expect(&t, "\033[31mred\033[0m\r\n");
	/* Ctrl-C is a key for the guest: it stops the guest's sleep, not sandbox-cli */
	term_type(&t, "sleep 30\r");
	term_expect(&t, "sleep 30\r\n");
	usleep(500 * 1000);
	term_type(&t, "\003");
	term_expect(&t, "$ ");
	term_type(&t, "echo status=$?\r");
	term_expect(&t, "status=130\r\n");
	term_expect(&t, "$ ");
	/* Ctrl-] detaches; the shell keeps running */
	term_type(&t, "\035");
	assert_int_equal(term_end(&t), 0);
	expect_in("the terminal", &t.screen, "come back with: sandbox-cli attach " SBX " ");
	pid = hinted_pid(text(&t.screen));
	buf_free(&t.screen);
	row = ps_row(pid);
	if (!strstr(row, "running") || !strstr(row, "/bin/sh -l"))
		fail_msg("the shell should still run after a detach: %s", row);
	free(row);

	/* attach again: the replay shows what happened, and the shell takes keys again */
	snprintf(attach_pid, sizeof(attach_pid), "%u", pid);
	term_start(&t, 30, 100, (const char *const[]){ "attach", SBX, attach_pid, NULL });
	term_expect(&t, "status=130");
	term_type(&t, "exit 4\r");
	assert_int_equal(term_end(&t), 4);
	buf_free(&t.screen);
	row = ps_row(pid);
	if (!strstr(row, "exited") || !strstr(row, " 4 "))
		fail_msg("the shell should have exited with 4: %s", row);
	free(row);
}

static void
test_exec_tty(void **state)
{
	const char *const args[] = { "exec", "-t", SBX, "--", "sh", "-c", "stty size; tty; exit 3",
		                     NULL };
	struct term t = { 0 };
	struct result r;

	term_start(&t, 33, 99, args);
	assert_int_equal(term_end(&t), 3);
	expect_in("the terminal", &t.screen, "33 99\r\n/dev/pts/");
	buf_free(&t.screen);

	/* without a terminal, --tty is refused */
	RUN(&r, "exec", "--tty", SBX, "--", "true");
	assert_int_equal(r.rc, 2);
	expect_in("stderr", &r.err, "--tty needs a terminal");
	result_done(&r);
}

/* A guest web server (busybox httpd on 8080) answers a local curl through port-forward, and a
 * connection to a port nothing listens on in the guest is closed while forwarding goes on. */
static void
test_port_forward_reaches_a_guest_server(void **state)
{
	int local = harness_free_port(), local2 = harness_free_port(), out_fd, err_fd;
	char spec1[32], spec2[32], line[256] = "";
	_cleanup_free_ char *cmd = NULL, *cmd2 = NULL;
	struct result r;
	size_t n = 0;
	FILE *curl;
	pid_t pid;

	RUN(&r, "exec", SBX, "--", "sh", "-c",
	    "mkdir -p /tmp/www && echo hello-through-the-tunnel > /tmp/www/index.html && "
	    "busybox httpd -p 127.0.0.1:8080 -h /tmp/www");
	assert_int_equal(r.rc, 0);
	result_done(&r);
	snprintf(spec1, sizeof(spec1), "%d:8080", local);
	snprintf(spec2, sizeof(spec2), "%d:8081", local2);
	pid = spawn_cli((const char *const[]){ "port-forward", SBX, spec1, spec2, NULL }, -1,
	                &out_fd, &err_fd);
	/* "Forwarding from 127.0.0.1:L -> 8080" once it listens */
	while (n < sizeof(line) - 1 && !strstr(line, "-> 8081")) {
		ssize_t k = read(out_fd, line + n, sizeof(line) - 1 - n);
		assert_true(k > 0);
		n += (size_t)k;
		line[n] = '\0';
	}
	cmd = strdup_printf("curl -sS --max-time 60 http://127.0.0.1:%d/index.html", local);
	curl = popen(cmd, "r");
	assert_non_null(curl);
	n = fread(line, 1, sizeof(line) - 1, curl);
	line[n] = '\0';
	assert_int_equal(pclose(curl), 0);
	assert_string_equal(line, "hello-through-the-tunnel\n");
	/* nothing on 8081 in the guest: curl's connection closes without an answer */
	cmd2 = strdup_printf("curl -sS --max-time 60 http://127.0.0.1:%d/ 2>/dev/null", local2);
	assert_true(system(cmd2) != 0);
	/* and 8080 still answers */
	curl = popen(cmd, "r");
	assert_non_null(curl);
	n = fread(line, 1, sizeof(line) - 1, curl);
	line[n] = '\0';
	assert_int_equal(pclose(curl), 0);
	assert_string_equal(line, "hello-through-the-tunnel\n");
	kill(pid, SIGINT);
	assert_int_equal(wait_exit(pid), 0);
	n = 0;
	{
		char err[4096];
		ssize_t k;
		while (n < sizeof(err) - 1 && (k = read(err_fd, err + n, sizeof(err) - 1 - n)) > 0)
			n += (size_t)k;
		err[n] = '\0';
		harness_expect_in(err, "nothing listens on 127.0.0.1:8081 in the sandbox");
		no_sanitizer_report("port-forward", err);
	}
	close(out_fd);
	close(err_fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_prints_the_guest_kernel_and_removes_the_sandbox),
		cmocka_unit_test(test_run_exit_code_stdin_and_keep),
		cmocka_unit_test(test_run_killed_leaves_nothing),
		cmocka_unit_test(test_exec_streams_stdin_cwd_env_and_exit_codes),
		cmocka_unit_test(test_exec_stdin_to_a_slow_reader_is_whole),
		cmocka_unit_test(test_ctrl_c_is_forwarded_then_detaches),
		cmocka_unit_test(test_attach_replays_what_happened_meanwhile),
		cmocka_unit_test(test_cp_both_ways),
		cmocka_unit_test(test_port_forward_reaches_a_guest_server),
		cmocka_unit_test(test_run_unreachable_registry),
		cmocka_unit_test(test_exec_over_https),
		cmocka_unit_test(test_shell_refuses_a_non_terminal),
		cmocka_unit_test(test_shell_in_a_terminal),
		cmocka_unit_test(test_exec_tty),
	};

	harness_vm_bundle(); /* skips (77) when there is no bundle */
	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
