/* test-cli.c: sandbox-cli against a real sandboxd-fake, as a user runs it: contexts and their
 * files, doctor over the unix socket, TCP with a token and https with a private CA, the
 * sandbox verbs with their tables and --json, the network flags and verb against the
 * server's policy, the exit codes scripts rely on, the messages that say what to do, and the
 * live event stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define TOKEN "cli-test-token-0123456789abcdef"

extern char **environ;

static struct daemon_proc sbxd;
static const char *cli_bin;
static char home[256];    /* $HOME of every CLI run: the real config is never touched */
static char unix_ep[320]; /* unix://<socket> */
static char tcp_ep[64];   /* http://127.0.0.1:<port> */
static char token_file[320];

#define CLI(out, ...) cli_run(NULL, out, (const char *const[]){ __VA_ARGS__, NULL })
#define CLI_ENV(env, out, ...) cli_run(env, out, (const char *const[]){ __VA_ARGS__, NULL })

/* Runs sandbox-cli; returns its exit code and its output (stdout and stderr; caller frees). */
static int
cli_run(const char *const *env, char **out, const char *const *args)
{
	return harness_run_checked(cli_bin, args, env, out);
}

/* The line of out that holds needle starts with prefix. */
static void
expect_line(const char *out, const char *needle, const char *prefix)
{
	const char *p = strstr(out, needle), *start;

	if (!p)
		fail_msg("expected '%s' in the output:\n%s", needle, out);
	for (start = p; start > out && start[-1] != '\n'; start--)
		;
	if (strncmp(start, prefix, strlen(prefix)) != 0)
		fail_msg("the line with '%s' should start with '%s':\n%s", needle, prefix, out);
}

static json_t *
parse_json(const char *text)
{
	json_error_t err;
	json_t *j = json_loads(text, 0, &err);

	if (!j)
		fail_msg("not JSON (%s):\n%s", err.text, text);
	return j;
}

static const char *
str(const json_t *j, const char *key)
{
	return json_string_value(json_object_get(j, key));
}

/* create prints the id and nothing else: "sbx_<16 hex>\n". */
static void
expect_id_line(const char *out, char id[static 32])
{
	size_t n = strlen(out);

	if (n != 21 || strncmp(out, "sbx_", 4) != 0 || out[20] != '\n' ||
	    strspn(out + 4, "0123456789abcdef") != 16)
		fail_msg("create should print only the id, printed:\n%s", out);
	memcpy(id, out, 20);
	id[20] = '\0';
}

static void
create(const char *name, char id[static 32])
{
	char *out;

	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--name", name), 0);
	expect_id_line(out, id);
	free(out);
}

static json_t *
inspect(const char *ref)
{
	char *out;
	json_t *j;

	assert_int_equal(CLI(&out, "inspect", ref, "--endpoint", unix_ep, "--json"), 0);
	j = parse_json(out);
	free(out);
	return j;
}

static void
write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static int
setup(void **state)
{
	char listen[32];
	int port = harness_free_port();
	const char *extra[] = { "--listen", listen, "--token-file", token_file, NULL };

	cli_bin = harness_binary("SANDBOX_CLI");
	if (harness_tmpdir(home, sizeof(home)) < 0 || port <= 0)
		return -1;
	/* the CLI's environment is this process's: a private home, nothing inherited that
	 * would pick another server or credential */
	setenv("HOME", home, 1);
	unsetenv("XDG_CONFIG_HOME");
	unsetenv("SANDBOX_CONTEXT");
	unsetenv("SANDBOX_ENDPOINT");
	unsetenv("SANDBOX_TOKEN");
	unsetenv("SANDBOX_CA");
	snprintf(token_file, sizeof(token_file), "%s/token", home);
	write_file(token_file, TOKEN "\n", 0600);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(tcp_ep, sizeof(tcp_ep), "http://127.0.0.1:%d", port);
	if (harness_start(&sbxd, harness_binary("SANDBOXD_FAKE"), extra, NULL) < 0)
		return -1;
	snprintf(unix_ep, sizeof(unix_ep), "unix://%s", sbxd.sock);
	return 0;
}

static int
teardown(void **state)
{
	int rc = harness_stop(&sbxd, SIGTERM);

	harness_cleanup(&sbxd);
	if (harness_rmtree(home) < 0)
		return -1;
	return rc == 0 ? 0 : -1;
}

static void
test_contexts(void **state)
{
	char path[400], loose[320], *out;
	struct stat st;

	assert_int_equal(CLI(&out, "context", "ls"), 0);
	harness_expect_in(out, "No contexts");
	free(out);

	/* a token file others can read is refused, and nothing is written */
	snprintf(loose, sizeof(loose), "%s/loose-token", home);
	write_file(loose, TOKEN "\n", 0644);
	assert_int_equal(CLI(&out, "context", "add", "bad", tcp_ep, "--token-file", loose), 2);
	harness_expect_in(out, "chmod 600");
	free(out);
	snprintf(path, sizeof(path), "%s/.config/sandbox-cli/config.json", home);
	assert_int_equal(access(path, F_OK), -1);

	assert_int_equal(CLI(&out, "context", "add", "local", unix_ep), 0);
	free(out);
	assert_int_equal(CLI(&out, "context", "add", "tcp", tcp_ep, "--token-file", token_file), 0);
	free(out);
	/* the same name twice is refused */
	assert_int_equal(CLI(&out, "context", "add", "tcp", tcp_ep), 2);
	harness_expect_in(out, "already");
	free(out);

	/* the config is private and holds a copy of the token */
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	snprintf(loose, sizeof(loose), "%s/.config/sandbox-cli", home);
	assert_int_equal(stat(loose, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_true(harness_file_contains(path, TOKEN));

	/* ls shows the contexts, never the token */
	assert_int_equal(CLI(&out, "context", "ls"), 0);
	harness_expect_in(out, "local");
	harness_expect_in(out, tcp_ep);
	harness_expect_not_in(out, TOKEN);
	free(out);

	/* the current context is used without --endpoint, with its token */
	assert_int_equal(CLI(&out, "context", "use", "tcp"), 0);
	free(out);
	assert_int_equal(CLI(&out, "context", "ls"), 0);
	expect_line(out, "tcp", "*");
	expect_line(out, "local", " ");
	free(out);
	assert_int_equal(CLI(&out, "doctor"), 0);
	harness_expect_in(out, tcp_ep);
	harness_expect_in(out, "context 'tcp'");
	harness_expect_in(out, "operator");
	free(out);
	/* --context picks another one for one command; SANDBOX_CONTEXT too */
	assert_int_equal(CLI(&out, "--context", "local", "doctor"), 0);
	harness_expect_in(out, unix_ep);
	free(out);
	assert_int_equal(
	        CLI_ENV(((const char *const[]){ "SANDBOX_CONTEXT=local", NULL }), &out, "doctor"),
	        0);
	harness_expect_in(out, unix_ep);
	free(out);
	assert_int_equal(CLI(&out, "--context", "nosuch", "doctor"), 2);
	harness_expect_in(out, "no context named 'nosuch'");
	free(out);

	/* the current context's token never goes to an --endpoint typed on the command
	 * line */
	assert_int_equal(CLI(&out, "--endpoint", tcp_ep, "list"), 4);
	free(out);

	/* removing the current context leaves none current */
	assert_int_equal(CLI(&out, "context", "rm", "tcp"), 0);
	free(out);
	assert_int_equal(CLI(&out, "context", "ls"), 0);
	harness_expect_not_in(out, "tcp");
	harness_expect_in(out, "No context is current");
	free(out);
	assert_int_equal(CLI(&out, "context", "rm", "tcp"), 2);
	free(out);
	assert_int_equal(CLI(&out, "context", "rm", "local"), 0);
	free(out);

	/* $XDG_CONFIG_HOME is where the config goes when it is set */
	{
		char xdg[300], env[320];
		snprintf(xdg, sizeof(xdg), "%s/xdg", home);
		snprintf(env, sizeof(env), "XDG_CONFIG_HOME=%s", xdg);
		assert_int_equal(CLI_ENV(((const char *const[]){ env, NULL }), &out, "context",
		                         "add", "x", unix_ep),
		                 0);
		free(out);
		snprintf(path, sizeof(path), "%s/sandbox-cli/config.json", xdg);
		assert_int_equal(access(path, F_OK), 0);
	}
}

static void
test_doctor(void **state)
{
	char env_token[128], *out;
	json_t *j;

	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "doctor"), 0);
	harness_expect_in(out, "sandboxd");
	harness_expect_in(out, "fake");
	harness_expect_in(out, "operator");
	harness_expect_in(out, "ceiling");
	free(out);

	/* TCP with the token from a file or from the environment */
	assert_int_equal(CLI(&out, "doctor", "--endpoint", tcp_ep, "--token-file", token_file), 0);
	harness_expect_in(out, tcp_ep);
	harness_expect_in(out, "operator");
	free(out);
	snprintf(env_token, sizeof(env_token), "SANDBOX_TOKEN=%s", TOKEN);
	assert_int_equal(CLI_ENV(((const char *const[]){ env_token, NULL }), &out, "--endpoint",
	                         tcp_ep, "doctor"),
	                 0);
	free(out);

	/* no token, a wrong token: exit 4 and what to do */
	assert_int_equal(CLI(&out, "--endpoint", tcp_ep, "doctor"), 4);
	harness_expect_in(out, "unauthorized");
	harness_expect_in(out, "--token-file");
	free(out);
	assert_int_equal(
	        CLI_ENV(((const char *const[]){ "SANDBOX_TOKEN=wrong-token-wrong-token", NULL }),
	                &out, "--endpoint", tcp_ep, "doctor"),
	        4);
	harness_expect_in(out, "refused the token");
	harness_expect_not_in(out, "wrong-token-wrong-token");
	free(out);

	/* --json: one object with what the server said */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "--json", "doctor"), 0);
	j = parse_json(out);
	assert_string_equal(str(json_object_get(j, "capabilities"), "backend"), "fake");
	assert_string_equal(str(json_object_get(j, "whoami"), "user"), "operator");
	json_decref(j);
	free(out);
}

static void
test_create_list_inspect(void **state)
{
	char id[32], *out;
	json_t *j, *list, *sb;
	size_t i;
	bool found = false;

	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--name", "lister", "--label",
	                     "team=blue", "--label", "tier=web", "--env", "GREETING=hello",
	                     "--cpus", "1", "--memory", "256"),
	                 0);
	expect_id_line(out, id);
	free(out);

	/* the table */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "list"), 0);
	harness_expect_in(out, "ID");
	harness_expect_in(out, "NAME");
	harness_expect_in(out, "STATE");
	harness_expect_in(out, "AGE");
	harness_expect_in(out, id);
	harness_expect_in(out, "lister");
	harness_expect_in(out, "running");
	harness_expect_in(out, "256M");
	free(out);

	/* label filters */
	assert_int_equal(CLI(&out, "list", "--label", "team=blue", "--endpoint", unix_ep), 0);
	harness_expect_in(out, "lister");
	free(out);
	assert_int_equal(CLI(&out, "list", "--label", "team=blue", "--label", "tier=db",
	                     "--endpoint", unix_ep),
	                 0);
	harness_expect_not_in(out, "lister");
	free(out);

	/* --json is the server's list */
	assert_int_equal(CLI(&out, "list", "--json", "--endpoint", unix_ep), 0);
	j = parse_json(out);
	list = json_object_get(j, "sandboxes");
	assert_true(json_is_array(list));
	json_array_foreach (list, i, sb)
		found = found || (str(sb, "id") && strcmp(str(sb, "id"), id) == 0);
	assert_true(found);
	json_decref(j);
	free(out);

	/* inspect: pretty JSON by name, the same object by id; env values never shown */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "inspect", "lister"), 0);
	harness_expect_in(out, "\n  \"id\": ");
	harness_expect_in(out, "GREETING");
	harness_expect_not_in(out, "hello");
	j = parse_json(out);
	assert_string_equal(str(j, "id"), id);
	assert_string_equal(str(j, "state"), "running");
	assert_string_equal(str(json_object_get(j, "labels"), "team"), "blue");
	json_decref(j);
	free(out);

	/* create --json prints the object */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--json", "--name", "jsonic"),
	                 0);
	j = parse_json(out);
	assert_string_equal(str(j, "name"), "jsonic");
	assert_string_equal(str(j, "state"), "running");
	json_decref(j);
	free(out);
}

static void
test_stop_start_kill(void **state)
{
	char id[32], *out;
	json_t *j;

	create("cycler", id);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "stop", "cycler"), 0);
	harness_expect_in(out, "stopped");
	free(out);
	j = inspect(id);
	assert_string_equal(str(j, "state"), "stopped");
	json_decref(j);

	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "start", id), 0);
	harness_expect_in(out, "running");
	free(out);
	j = inspect("cycler");
	assert_string_equal(str(j, "state"), "running");
	json_decref(j);

	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "kill", "cycler"), 0);
	free(out);
	j = inspect(id);
	assert_string_equal(str(j, "state"), "terminated");
	json_decref(j);
	/* killing it again succeeds; starting it does not */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "kill", id), 0);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "start", id), 6);
	harness_expect_in(out, "conflict");
	free(out);

	/* list hides it, table and JSON; --all and --state terminated show it, with why */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "list"), 0);
	harness_expect_not_in(out, id);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "list", "--json"), 0);
	harness_expect_not_in(out, id);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "list", "--all"), 0);
	harness_expect_in(out, id);
	harness_expect_in(out, "terminated");
	harness_expect_in(out, "REASON");
	harness_expect_in(out, "deleted");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "list", "-a", "--json"), 0);
	harness_expect_in(out, id);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "list", "--state", "terminated"), 0);
	harness_expect_in(out, id);
	harness_expect_not_in(out, "running");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "list", "--state", "running"), 0);
	harness_expect_not_in(out, id);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "list", "--state", "gone"), 2);
	harness_expect_in(out, "sandbox-cli: invalid_request: unknown state 'gone'");
	free(out);
}

/* snapshot create|ls|schedule|rm, and a fork with create --snapshot. */
static void
test_snapshots(void **state)
{
	char id[32], snap[32], fork[32], *out;
	json_t *j;

	create("snapped", id);
	/* create prints the snapshot's id alone */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "snapshot", "create", "snapped"), 0);
	assert_int_equal(strlen(out), 22);
	assert_true(strncmp(out, "snap_", 5) == 0);
	memcpy(snap, out, 21);
	snap[21] = '\0';
	free(out);
	assert_int_equal(
	        CLI(&out, "--endpoint", unix_ep, "snapshot", "create", "snapped", "--kind", "ram"),
	        2);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "snapshot", "ls", "--sandbox", id), 0);
	expect_line(out, snap, snap);
	harness_expect_in(out, "memory");
	harness_expect_in(out, "KIND");
	free(out);
	/* a fork */
	assert_int_equal(
	        CLI(&out, "--endpoint", unix_ep, "create", "--snapshot", snap, "--name", "forked"),
	        0);
	expect_id_line(out, fork);
	free(out);
	j = inspect("forked");
	assert_string_equal(str(j, "snapshot_id"), snap);
	json_decref(j);
	assert_int_equal(
	        CLI(&out, "--endpoint", unix_ep, "create", "--snapshot", snap, "--cpus", "2"), 2);
	harness_expect_in(out, "invalid_request");
	free(out);
	/* a schedule */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "snapshot", "schedule", "snapped",
	                     "--every", "3600", "--keep", "2"),
	                 0);
	harness_expect_in(out, "a snapshot every 3600 s, the newest 2 kept");
	free(out);
	assert_int_equal(
	        CLI(&out, "--endpoint", unix_ep, "snapshot", "schedule", "snapped", "--every", "0"),
	        0);
	harness_expect_in(out, "no scheduled snapshots");
	free(out);
	/* removed, once */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "snapshot", "rm", snap), 0);
	harness_expect_in(out, "removed");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "snapshot", "rm", snap), 5);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "kill", "snapped", "forked"), 0);
	free(out);
}

static void
test_exit_codes(void **state)
{
	char id[32], nope[320], *out;

	/* 6: a name in use */
	create("taken", id);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--name", "taken"), 6);
	harness_expect_in(out, "sandbox-cli: conflict: ");
	free(out);

	/* 2: out of the server's limits, and usage errors */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--cpus", "999"), 2);
	harness_expect_in(out, "sandbox-cli: invalid_request: ");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--cpus", "many"), 2);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "inspect"), 2);
	harness_expect_in(out, "--help");
	free(out);
	assert_int_equal(CLI(&out, "frobnicate"), 2);
	free(out);
	assert_int_equal(CLI(&out, "list", "--bogus"), 2);
	harness_expect_in(out, "--bogus");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", "ftp://example.com", "list"), 2);
	free(out);

	/* 5: not found */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "inspect", "no-such-sandbox"), 5);
	harness_expect_in(out, "sandbox-cli: not_found: ");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "kill", "sbx_0000000000000000"), 5);
	free(out);
	/* the server quotes the ref back; its escape sequence must not reach the terminal */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "inspect", "\x1b[2Jgotcha"), 5);
	harness_expect_in(out, "?[2Jgotcha");
	harness_expect_not_in(out, "\x1b");
	free(out);

	/* 3: nothing listens there */
	snprintf(nope, sizeof(nope), "unix://%s/no.sock", home);
	assert_int_equal(CLI(&out, "--endpoint", nope, "list"), 3);
	harness_expect_in(out, "cannot reach");
	harness_expect_in(out, "is sandboxd running?");
	free(out);
	/* a user who is not root is told how to reach a shared server instead */
	if (geteuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0) {
		char gone[64];
		snprintf(gone, sizeof(gone), "unix:///tmp/sbx-none-%d.sock", (int)getpid());
		const char *const args[] = { "--reuid=65534",  "--regid=65534",
			                     "--clear-groups", cli_bin,
			                     "--endpoint",     gone,
			                     "list",           NULL };
		const char *const env[] = { "HOME=/nonexistent", NULL };
		assert_int_equal(harness_run_checked("/usr/bin/setpriv", args, env, &out), 3);
		harness_expect_in(out, "no sandboxd of yours runs there");
		harness_expect_in(out, "sandbox-cli context add shared http://127.0.0.1:7070 "
		                       "--token-file FILE");
		free(out);
	}
	{
		char ep[64];
		snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", harness_free_port());
		assert_int_equal(CLI(&out, "--endpoint", ep, "doctor"), 3);
		harness_expect_in(out, "cannot reach");
		free(out);
	}

	/* 1: the sandbox failed to boot; its id is still printed, the reason too */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--image", "fake/fail-boot"),
	                 1);
	harness_expect_in(out, "sbx_");
	harness_expect_in(out, "failed");
	harness_expect_in(out, "fail-boot");
	free(out);

	/* help is exit 0 and mentions the exit codes */
	assert_int_equal(CLI(&out, "--help"), 0);
	harness_expect_in(out, "Exit codes");
	free(out);
	assert_int_equal(CLI(&out, "create", "--help"), 0);
	harness_expect_in(out, "--no-wait");
	free(out);
}

static void
test_events(void **state)
{
	char id[32], *out;
	json_t *j;

	create("eventful", id);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "stop", "eventful"), 0);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "events", "eventful"), 0);
	harness_expect_in(out, "TIME");
	harness_expect_in(out, "sandbox.created");
	harness_expect_in(out, "image ");
	harness_expect_in(out, "sandbox.started");
	harness_expect_in(out, "sandbox.stopped");
	free(out);
	/* the server's answer as it is: flat records, oldest first */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "events", id, "--json"), 0);
	j = parse_json(out);
	assert_int_equal(json_array_size(json_object_get(j, "events")), 3);
	assert_string_equal(str(json_array_get(json_object_get(j, "events"), 0), "sandbox"), id);
	json_decref(j);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "events", "no-such-sandbox"), 5);
	free(out);
}

static void
test_metrics(void **state)
{
	char id[32], *out;
	json_t *j;

	create("measured", id);
	/* a sample is taken as it starts */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "metrics", "measured"), 0);
	harness_expect_in(out, "TIME");
	harness_expect_in(out, "MEMORY");
	harness_expect_in(out, "NET OUT");
	harness_expect_in(out, "0.00s");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "metrics", id, "--json"), 0);
	j = parse_json(out);
	assert_true(json_array_size(json_object_get(j, "samples")) >= 1);
	json_decref(j);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "metrics", "no-such-sandbox"), 5);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "metrics"), 2);
	free(out);
}

/* node: the capacity as a table, then the cordon; node cordon makes create fail with the
 * server's reason and what to do, node uncordon undoes it. */
static void
test_node(void **state)
{
	char id[32], *out;
	json_t *j;

	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "node"), 0);
	expect_line(out, "ALLOCATED", "RESOURCE");
	expect_line(out, "4096", "cpus");
	expect_line(out, "16384G", "memory"); /* the harness's --capacity-memory-mb 16777216 */
	harness_expect_in(out, "cordoned:  no\n");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "node", "cordon"), 0);
	harness_expect_in(out, "cordoned");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--name", "refused"), 1);
	harness_expect_in(out, "unavailable: this node is cordoned");
	harness_expect_in(out, "sandbox-cli node uncordon");
	harness_expect_not_in(out, "try again later");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "node", "--json"), 0);
	j = parse_json(out);
	assert_true(json_is_true(json_object_get(j, "cordoned")));
	json_decref(j);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "node"), 0);
	harness_expect_in(out, "cordoned:  yes");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "node", "uncordon"), 0);
	free(out);
	create("after-uncordon", id);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "kill", id), 0);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "node", "drain"), 2);
	free(out);
}

/* volume create, ls and rm; create --volume attaches one (shown by inspect); a second writer
 * and a delete while attached are refused with the server's reason (exit 6). */
static void
test_volumes(void **state)
{
	char id[32], *out;
	json_t *j, *v;

	assert_int_equal(
	        CLI(&out, "--endpoint", unix_ep, "volume", "create", "--size", "32", "cli-data"),
	        0);
	assert_string_equal(out, "cli-data\n");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "volume", "ls"), 0);
	expect_line(out, "SIZE", "NAME");
	expect_line(out, "32.0 MiB", "cli-data");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--name", "with-vol",
	                     "--volume", "cli-data:/mnt/data"),
	                 0);
	expect_id_line(out, id);
	free(out);
	j = inspect(id);
	v = json_array_get(json_object_get(j, "volumes"), 0);
	assert_string_equal(str(v, "path"), "/mnt/data");
	assert_true(json_is_false(json_object_get(v, "read_only")));
	json_decref(j);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "volume", "ls"), 0);
	expect_line(out, id, "cli-data");
	free(out);
	assert_int_equal(
	        CLI(&out, "--endpoint", unix_ep, "create", "--volume", "cli-data:/mnt/data:ro"), 6);
	harness_expect_in(out, "one writer");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "volume", "rm", "cli-data"), 6);
	harness_expect_in(out, "delete the sandbox first");
	free(out);
	/* an empty name is refused before any call (it would DELETE /v1/volumes/ itself) */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "volume", "rm", "cli-data", ""), 2);
	harness_expect_in(out, "an empty name");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--volume", "cli-data"), 2);
	harness_expect_in(out, "NAME:PATH[:ro]");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "kill", id), 0);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "volume", "rm", "cli-data"), 0);
	harness_expect_in(out, "removed cli-data");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "volume", "ls", "--json"), 0);
	j = parse_json(out);
	assert_int_equal(json_array_size(json_object_get(j, "volumes")), 0);
	json_decref(j);
	free(out);
}

/* Starts sandbox-cli in the background with its output going to path. */
static pid_t
spawn_bg(const char *path, const char *const *args)
{
	posix_spawn_file_actions_t fa;
	const char *argv[16];
	size_t n = 0;
	pid_t pid;

	argv[n++] = cli_bin;
	for (size_t i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	assert_int_equal(posix_spawn(&pid, cli_bin, &fa, NULL, (char *const *)argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

/* Waits up to ms for the process to exit; its exit code, or -1 if it is still running. */
static int
wait_exit(pid_t pid, int ms)
{
	int status;

	for (int i = 0; i < ms / 10; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		usleep(10000);
	}
	return -1;
}

static void
stop_bg(pid_t pid)
{
	if (wait_exit(pid, 0) == -1) {
		kill(pid, SIGTERM);
		if (wait_exit(pid, 5000) == -1) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
	}
}

static void
test_follow_stream(void **state)
{
	char path[320], id[32] = "", name[32];
	bool seen = false;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/follow.out", home);
	pid = spawn_bg(path, (const char *const[]){ "--endpoint", unix_ep, "events", "--follow",
	                                            "--json", NULL });
	/* the follower may not be subscribed yet when the first sandbox is made: make
	 * another until one shows up (each one that does proves the stream works) */
	for (int attempt = 0; attempt < 10 && !seen; attempt++) {
		snprintf(name, sizeof(name), "followed-%d", attempt);
		create(name, id);
		for (int i = 0; i < 100 && !seen; i++) {
			seen = harness_file_contains(path, id);
			if (!seen)
				usleep(20000);
		}
	}
	assert_int_equal(wait_exit(pid, 0), -1); /* still following */
	stop_bg(pid);
	if (!seen)
		fail_msg("events --follow --json never printed sandbox %s", id);
	/* every line is one event object */
	{
		char *text = NULL, *line, *save = NULL;
		size_t len;
		FILE *f = fopen(path, "r");
		assert_non_null(f);
		text = calloc(1, 1 << 20);
		len = fread(text, 1, (1 << 20) - 1, f);
		fclose(f);
		assert_true(len > 0);
		for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			json_t *ev = parse_json(line);
			assert_non_null(str(ev, "type"));
			assert_non_null(str(ev, "sandbox_id"));
			json_decref(ev);
		}
		free(text);
	}
}

static void
test_follow_one_sandbox(void **state)
{
	char path[320], id[32], other[32], *out;
	pid_t pid;
	int rc;

	/* REF --follow prints the history, then that sandbox's new events, and ends when it
	 * is terminated */
	create("watched", id);
	snprintf(path, sizeof(path), "%s/follow-one.out", home);
	pid = spawn_bg(path, (const char *const[]){ "--endpoint", unix_ep, "events", "watched",
	                                            "--follow", NULL });
	for (int i = 0; i < 500 && !harness_file_contains(path, "sandbox.started"); i++)
		usleep(10000);
	create("bystander", other);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "stop", "watched"), 0);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "kill", "watched"), 0);
	free(out);
	rc = wait_exit(pid, 10000);
	if (rc == -1)
		stop_bg(pid);
	assert_int_equal(rc, 0);
	/* the trail, then what the stream carried on with: the stop and the end */
	assert_true(harness_file_contains(path, "sandbox.created"));
	assert_true(harness_file_contains(path, "sandbox.stopped"));
	assert_true(harness_file_contains(path, "sandbox.terminated  request"));
	assert_false(harness_file_contains(path, other));
	assert_false(harness_file_contains(path, "bystander"));
}

/* The network of a sandbox as `network REF --json` prints it. */
static json_t *
network_of(const char *ep, const char *ref)
{
	char *out;
	json_t *j;

	assert_int_equal(CLI(&out, "--endpoint", ep, "network", ref, "--json"), 0);
	j = parse_json(out);
	free(out);
	return j;
}

/* The first entry of a JSON array of strings, or "". */
static const char *
first(const json_t *arr)
{
	const char *s = json_string_value(json_array_get(arr, 0));

	return s ? s : "";
}

static void
test_network_flags(void **state)
{
	char id[32], *out;
	json_t *j;

	/* what the CLI can tell alone is a usage error, and nothing is sent */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--name", "netusage",
	                     "--network", "none", "--allow", "example.org"),
	                 2);
	harness_expect_in(out, "--allow goes only with --network allowlist");
	free(out);
	/* the order of the flags does not matter */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--name", "netusage", "--allow",
	                     "example.org", "--network", "open"),
	                 2);
	harness_expect_in(out, "--allow goes only with --network allowlist");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--name", "netusage",
	                     "--network", "wide-open"),
	                 2);
	harness_expect_in(out, "--network takes none, allowlist or open, not 'wide-open'");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "run", "--network", "none", "--allow",
	                     "example.org", "--", "true"),
	                 2);
	harness_expect_in(out, "sandbox-cli: run: --allow goes only");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--deny", ""), 2);
	harness_expect_in(out, "--deny needs a host name");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "inspect", "netusage"), 5);
	free(out);

	/* the flags become the request's network, as typed: the server's 400 quotes them
	 * back from where they went (allow or deny, in order) */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--network", "allowlist",
	                     "--allow", "a.example.org", "--allow", "https://example.org/x"),
	                 2);
	harness_expect_in(out, "sandbox-cli: invalid_request: 'network.allow' entry 1: "
	                       "'https://example.org/x'");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--network", "open", "--deny",
	                     "example.org:443"),
	                 2);
	harness_expect_in(out, "'network.deny' entry 0: 'example.org:443'");
	free(out);

	/* --network none is granted and shown */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "create", "--name", "netnone",
	                     "--network", "none"),
	                 0);
	expect_id_line(out, id);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "network", "netnone"), 0);
	assert_string_equal(out, "mode:   none\nallow:  none\ndeny:   none\n");
	free(out);
	j = network_of(unix_ep, id);
	assert_string_equal(str(j, "mode"), "none");
	assert_int_equal(json_array_size(json_object_get(j, "allow")), 0);
	assert_int_equal(json_array_size(json_object_get(j, "deny")), 0);
	json_decref(j);

	/* the network verb: the same usage errors, then the server's answers */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "network"), 2);
	harness_expect_in(out, "needs one REF");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "network", "netnone", "--network", "open",
	                     "--allow", "example.org"),
	                 2);
	harness_expect_in(out, "sandbox-cli: network: --allow goes only");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "network", "netnone", "--network",
	                     "allowlist", "--allow", "example.org/path"),
	                 2);
	harness_expect_in(out, "'network.allow' entry 0: 'example.org/path'");
	free(out);
	/* an update to what it has is no change, and is answered */
	assert_int_equal(
	        CLI(&out, "--endpoint", unix_ep, "network", "netnone", "--network", "none"), 0);
	assert_string_equal(out, "mode:   none\nallow:  none\ndeny:   none\n");
	free(out);
	assert_int_equal(
	        CLI(&out, "--endpoint", unix_ep, "network", "no-such-sandbox", "--network", "none"),
	        5);
	harness_expect_in(out, "sandbox-cli: not_found: ");
	free(out);
	/* a terminated sandbox cannot change; it is still shown by its id */
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "kill", "netnone"), 0);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "network", id, "--network", "none"), 6);
	harness_expect_in(out, "sandbox-cli: conflict: ");
	harness_expect_in(out, "terminated");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", unix_ep, "network", id), 0);
	harness_expect_in(out, "mode:   none\n");
	free(out);

	/* help */
	assert_int_equal(CLI(&out, "--help"), 0);
	harness_expect_in(out, "  network ");
	free(out);
	assert_int_equal(CLI(&out, "network", "--help"), 0);
	harness_expect_in(out, "--deny NAME");
	harness_expect_in(out, "whole new policy");
	free(out);
	assert_int_equal(CLI(&out, "run", "--help"), 0);
	harness_expect_in(out, "--allow NAME");
	free(out);
}

/* Against a server whose policy file asks for ceiling allowlist and may_allow
 * [*.example.org, example.com]: what it grants comes back normalised, what it refuses is
 * exit 4 with its reason. A server that cannot enforce egress lowers the ceiling to none; then
 * every allowlist is refused, and the test checks that instead. */
static void
test_network_policy(void **state)
{
	char policy[320], id[32], *out;
	const char *extra[] = { "--policy", policy, NULL };
	struct daemon_proc pd;
	const char *ceiling;
	bool update;
	char ep[320];
	json_t *caps, *j;

	snprintf(policy, sizeof(policy), "%s/policy.yaml", home);
	write_file(policy,
	           "network:\n"
	           "  default: {mode: none}\n"
	           "  ceiling: allowlist\n"
	           "  may_allow: [\"*.example.org\", example.com]\n",
	           0600);
	assert_int_equal(harness_start(&pd, harness_binary("SANDBOXD_FAKE"), extra, NULL), 0);
	snprintf(ep, sizeof(ep), "unix://%s", pd.sock);
	caps = harness_json(pd.sock, "GET", "/v1/capabilities", NULL, 200);
	assert_non_null(caps);
	ceiling = harness_str(json_object_get(caps, "network"), "ceiling");
	update = json_is_true(
	        json_object_get(json_object_get(caps, "capabilities"), "network_policy_update"));
	assert_non_null(ceiling);

	if (strcmp(ceiling, "none") == 0) {
		fprintf(stderr, "note: the server's ceiling is none (it cannot enforce egress); "
		                "checking that allowlists are refused\n");
		assert_int_equal(CLI(&out, "--endpoint", ep, "create", "--name", "netrefused",
		                     "--allow", "www.example.org"),
		                 4);
		harness_expect_in(out, "sandbox-cli: refused: ");
		harness_expect_in(out, "ceiling");
		free(out);
		assert_int_equal(CLI(&out, "--endpoint", ep, "inspect", "netrefused"), 5);
		free(out);
		/* the positive control: what the ceiling allows */
		assert_int_equal(CLI(&out, "--endpoint", ep, "create", "--name", "netok",
		                     "--network", "none"),
		                 0);
		free(out);
		assert_int_equal(CLI(&out, "--endpoint", ep, "network", "netok", "--allow",
		                     "www.example.org"),
		                 4);
		harness_expect_in(out, "ceiling");
		free(out);
		j = network_of(ep, "netok");
		assert_string_equal(str(j, "mode"), "none");
		json_decref(j);
		goto out;
	}

	/* granted, normalised (lowercase, no trailing dot, one of each, sorted) */
	assert_int_equal(CLI(&out, "--endpoint", ep, "create", "--name", "netallow", "--allow",
	                     "WWW.Example.org.", "--allow", "www.example.org", "--allow",
	                     "api.example.org", "--deny", "Gist.Example.org."),
	                 0);
	expect_id_line(out, id);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", ep, "network", "netallow"), 0);
	harness_expect_in(out, "mode:   allowlist\n");
	harness_expect_in(out, "allow:  api.example.org, www.example.org\n");
	harness_expect_in(out, "gist.example.org");
	free(out);
	j = network_of(ep, id);
	assert_string_equal(str(j, "mode"), "allowlist");
	assert_int_equal(json_array_size(json_object_get(j, "allow")), 2);
	assert_string_equal(first(json_object_get(j, "allow")), "api.example.org");
	json_decref(j);
	/* beyond may_allow: refused with the server's reason, nothing made */
	assert_int_equal(CLI(&out, "--endpoint", ep, "create", "--name", "netoutside", "--allow",
	                     "example.net"),
	                 4);
	harness_expect_in(out, "sandbox-cli: refused: ");
	harness_expect_in(out, "example.net");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", ep, "inspect", "netoutside"), 5);
	free(out);
	/* a wildcard needs an equal or broader one in may_allow */
	assert_int_equal(CLI(&out, "--endpoint", ep, "create", "--allow", "*.example.com"), 4);
	harness_expect_in(out, "*.example.com");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", ep, "create", "--allow", "*.api.example.org"), 0);
	free(out);

	/* an update beyond the policy is refused and leaves the old policy */
	assert_int_equal(
	        CLI(&out, "--endpoint", ep, "network", "netallow", "--allow", "example.net"), 4);
	harness_expect_in(out, "example.net");
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", ep, "network", "netallow", "--network", "open"),
	                 4);
	free(out);
	j = network_of(ep, "netallow");
	assert_int_equal(json_array_size(json_object_get(j, "allow")), 2);
	json_decref(j);
	if (!update) {
		fprintf(stderr, "note: the server cannot change a running sandbox's network\n");
		assert_int_equal(CLI(&out, "--endpoint", ep, "network", "netallow", "--allow",
		                     "example.com"),
		                 1);
		harness_expect_in(out, "unsupported");
		free(out);
		goto out;
	}
	/* and one within it applies, and is what the verb prints */
	assert_int_equal(CLI(&out, "--endpoint", ep, "network", "netallow", "--allow",
	                     "Example.COM", "--deny", "x.example.com"),
	                 0);
	harness_expect_in(out, "mode:   allowlist\nallow:  example.com\n");
	harness_expect_in(out, "x.example.com");
	free(out);
	j = network_of(ep, id);
	assert_string_equal(first(json_object_get(j, "allow")), "example.com");
	json_decref(j);
	assert_int_equal(
	        CLI(&out, "--endpoint", ep, "network", "netallow", "--network", "none", "--json"),
	        0);
	j = parse_json(out);
	assert_string_equal(str(j, "mode"), "none");
	json_decref(j);
	free(out);
out:
	json_decref(caps);
	assert_int_equal(harness_stop(&pd, SIGTERM), 0);
	harness_cleanup(&pd);
}

static void
test_https_private_ca(void **state)
{
	char dir[320], cert[400], key[400], ca[400], listen[32], ep[64];
	char *out;
	const char *extra[] = { "--socket",     "none",     "--listen",   listen,
		                "--token-file", token_file, "--tls-cert", cert,
		                "--tls-key",    key,        NULL };
	struct daemon_proc tls;
	int port = harness_free_port();

	if (system("openssl version >/dev/null 2>&1") != 0)
		harness_skip_case("openssl is not installed; https with --ca is untested");
	snprintf(dir, sizeof(dir), "%s/pki", home);
	assert_int_equal(mkdir(dir, 0700), 0);
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	snprintf(cert, sizeof(cert), "%s/server.pem", dir);
	snprintf(key, sizeof(key), "%s/server.key", dir);
	assert_int_equal(harness_make_certs(dir, "", false), 0);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(ep, sizeof(ep), "https://localhost:%d", port);
	assert_int_equal(harness_start(&tls, harness_binary("SANDBOXD_FAKE"), extra, NULL), 0);

	/* verification is always on: without the CA the certificate is refused */
	assert_int_equal(CLI(&out, "--endpoint", ep, "--token-file", token_file, "doctor"), 3);
	harness_expect_in(out, "TLS");
	harness_expect_in(out, "--ca");
	free(out);
	assert_int_equal(
	        CLI(&out, "--endpoint", ep, "--token-file", token_file, "--ca", ca, "doctor"), 0);
	harness_expect_in(out, "fake");
	free(out);
	/* and through a context that keeps the CA */
	assert_int_equal(
	        CLI(&out, "context", "add", "secure", ep, "--token-file", token_file, "--ca", ca),
	        0);
	free(out);
	assert_int_equal(CLI(&out, "--context", "secure", "list"), 0);
	free(out);
	assert_int_equal(CLI(&out, "context", "rm", "secure"), 0);
	free(out);

	harness_stop(&tls, SIGTERM);
	harness_cleanup(&tls);
}

/* R-S7: text from a sandbox with a newline and an erase-screen sequence in it (a file name in
 * its audit trail, an argument in its process list) reaches the CLI's tables escaped, each row
 * one line, no escape byte raw on the terminal. The fake's agent (sandbox-guestd on this host)
 * makes the files and processes real. */
static void
test_hostile_text_escaped(void **state)
{
	static const char hostile[] = "evil\n\x1b[2J";
	const char *guestd = getenv("SANDBOX_GUESTD");
	char ep[320], dir[320], local[340], target[400], id[32], follow[340];
	pid_t pid;
	struct daemon_proc p;
	char *out;

	if (!guestd || access(guestd, X_OK) < 0)
		harness_skip_case(
		        "SANDBOX_GUESTD is not set to sandbox-guestd (run through ctest)");
	assert_int_equal(harness_start_fake_agent(&p, guestd, NULL, NULL), 0);
	snprintf(ep, sizeof(ep), "unix://%s", p.sock);
	snprintf(dir, sizeof(dir), "%s/files", p.dir);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(local, sizeof(local), "%s/plain", p.dir);
	write_file(local, "x\n", 0644);
	snprintf(target, sizeof(target), "hostile:%s/%s", dir, hostile);

	assert_int_equal(CLI(&out, "--endpoint", ep, "create", "--name", "hostile"), 0);
	expect_id_line(out, id);
	free(out);
	/* every sandbox's stream, followed as text meanwhile */
	snprintf(follow, sizeof(follow), "%s/follow-all.out", p.dir);
	pid = spawn_bg(follow,
	               (const char *const[]){ "--endpoint", ep, "events", "--follow", NULL });
	usleep(500000);
	assert_int_equal(CLI(&out, "--endpoint", ep, "cp", local, target), 0);
	free(out);
	assert_int_equal(CLI(&out, "--endpoint", ep, "exec", "hostile", "--", "/bin/true", hostile),
	                 0);
	free(out);
	/* the stream's process and file events read as text, in their records' words */
	for (int i = 0; i < 250 && !harness_file_contains(follow, "process.exited"); i++)
		usleep(20000);
	stop_bg(pid);
	assert_int_equal(read_file_max(follow, 1u << 20, &out, NULL), 0);
	harness_expect_in(out, "file.written");
	harness_expect_in(out, "evil\\n\\x1b[2J (2 bytes)");
	harness_expect_in(out, "process.started");
	harness_expect_in(out, "process.exited");
	harness_expect_not_in(out, "{\"");
	assert_null(strchr(out, '\x1b'));
	free(out);

	/* the audit trail: the file's path in the file.written row, escaped on its one line */
	assert_int_equal(CLI(&out, "--endpoint", ep, "events", "hostile"), 0);
	expect_line(out, "evil\\n\\x1b[2J", "20");
	harness_expect_in(out, "file.written");
	assert_null(strchr(out, '\x1b'));
	assert_null(strstr(out, "\n[2J"));
	free(out);

	/* the process list: the argument, escaped, in its row */
	assert_int_equal(CLI(&out, "--endpoint", ep, "ps", "hostile"), 0);
	harness_expect_in(out, "/bin/true");
	harness_expect_in(out, "\\x1b[2J");
	assert_null(strchr(out, '\x1b'));
	assert_null(strstr(out, "\n[2J"));
	free(out);

	assert_int_equal(CLI(&out, "--endpoint", ep, "kill", "hostile"), 0);
	free(out);
	harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
}

static int
pf_connect(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
		                   .sin_port = htons((uint16_t)port),
		                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	for (int i = 0; i < 100; i++) {
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0)
			return fd;
		usleep(50000);
	}
	fail_msg("nothing listens on 127.0.0.1:%d", port);
	return -1;
}

/* Everything until EOF (a reset ends it too), at most size-1 bytes. */
static size_t
pf_read_all(int fd, char *out, size_t size)
{
	size_t n = 0;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t k;
		assert_int_equal(poll(&pfd, 1, 20000), 1);
		k = read(fd, out + n, size - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	out[n] = '\0';
	return n;
}

/* port-forward on the fake backend whose agent runs here: the sandbox's 127.0.0.1 is ours, so a
 * listener of this test is the "guest's" server. */
static void
test_port_forward(void **state)
{
	const char *guestd = getenv("SANDBOX_GUESTD");
	char ep[320], outpath[340], spec1[32], spec2[32], buf[256], id[32];
	struct daemon_proc p;
	int lfd, gport, local = harness_free_port(), local2 = harness_free_port(), dead, fd;
	pid_t server, pf;
	char *out;

	if (!guestd || access(guestd, X_OK) < 0)
		harness_skip_case(
		        "SANDBOX_GUESTD is not set to sandbox-guestd (run through ctest)");
	assert_int_equal(harness_start_fake_agent(&p, guestd, NULL, NULL), 0);
	snprintf(ep, sizeof(ep), "unix://%s", p.sock);
	assert_int_equal(CLI(&out, "--endpoint", ep, "create", "--name", "pf"), 0);
	expect_id_line(out, id);
	free(out);

	/* the "guest's" server: reads to EOF, answers, closes (a half-close each way) */
	lfd = harness_tcp_listen(&gport);
	server = fork();
	assert_true(server >= 0);
	if (server == 0) {
		for (;;) {
			int c = accept(lfd, NULL, NULL);
			char in[256], reply[300];
			size_t n = 0;
			ssize_t k;
			if (c < 0)
				_exit(1);
			while (n < sizeof(in) - 1 && (k = read(c, in + n, sizeof(in) - 1 - n)) > 0)
				n += (size_t)k;
			in[n] = '\0';
			snprintf(reply, sizeof(reply), "echo:%s", in);
			(void)!write(c, reply, strlen(reply));
			close(c);
		}
	}
	close(lfd);
	dead = harness_free_port(); /* a port nothing will listen on */

	snprintf(spec1, sizeof(spec1), "%d:%d", local, gport);
	snprintf(spec2, sizeof(spec2), "%d:%d", local2, dead);
	snprintf(outpath, sizeof(outpath), "%s/pf.out", p.dir);
	pf = spawn_bg(outpath, (const char *const[]){ "--endpoint", ep, "port-forward", "pf", spec1,
	                                              spec2, NULL });
	fd = pf_connect(local);
	assert_int_equal(write(fd, "hi", 2), 2);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	pf_read_all(fd, buf, sizeof(buf));
	assert_string_equal(buf, "echo:hi");
	close(fd);
	/* nothing listens: that connection closes, the server's word is on stderr, and
	 * forwarding goes on */
	fd = pf_connect(local2);
	assert_int_equal(pf_read_all(fd, buf, sizeof(buf)), 0);
	close(fd);
	fd = pf_connect(local);
	assert_int_equal(write(fd, "again", 5), 5);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	pf_read_all(fd, buf, sizeof(buf));
	assert_string_equal(buf, "echo:again");
	close(fd);
	/* Ctrl-C stops it cleanly */
	kill(pf, SIGINT);
	assert_int_equal(wait_exit(pf, 5000), 0);
	assert_int_equal(read_file_max(outpath, 1u << 20, &out, NULL), 0);
	{
		_cleanup_free_ char *l1 =
		        strdup_printf("Forwarding from 127.0.0.1:%d -> %d", local, gport);
		_cleanup_free_ char *l2 =
		        strdup_printf("nothing listens on 127.0.0.1:%d in the sandbox", dead);
		harness_expect_in(out, l1);
		harness_expect_in(out, l2);
	}
	free(out);
	/* a sandbox that is not there (or someone else's): 404, exit 5, nothing listens */
	assert_int_equal(CLI(&out, "--endpoint", ep, "port-forward", "nope", spec1), 5);
	harness_expect_in(out, "not_found");
	free(out);

	kill(server, SIGKILL);
	waitpid(server, NULL, 0);
	assert_int_equal(CLI(&out, "--endpoint", ep, "kill", "pf"), 0);
	free(out);
	harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_contexts),
		cmocka_unit_test(test_doctor),
		cmocka_unit_test(test_create_list_inspect),
		cmocka_unit_test(test_stop_start_kill),
		cmocka_unit_test(test_exit_codes),
		cmocka_unit_test(test_snapshots),
		cmocka_unit_test(test_events),
		cmocka_unit_test(test_metrics),
		cmocka_unit_test(test_node),
		cmocka_unit_test(test_volumes),
		cmocka_unit_test(test_network_flags),
		cmocka_unit_test(test_network_policy),
		cmocka_unit_test(test_follow_stream),
		cmocka_unit_test(test_follow_one_sandbox),
		cmocka_unit_test(test_https_private_ca),
		cmocka_unit_test(test_hostile_text_escaped),
		cmocka_unit_test(test_port_forward),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
