/* test-cli-agent.c: `sandbox-cli agent` and `sandbox-cli secret` against a real sandboxd-fake
 * whose agent is sandbox-guestd in its test mode (SANDBOXD_FAKE_AGENT): a sandbox's processes
 * run on this host. No model is reachable here, so stub scripts named claude, codex, gemini and
 * opencode stand in for the real agents (found through the PATH the create's env gives the
 * guest): each writes down how it was started and whether its credential reached it, then
 * waits like an interactive agent. The tests assert the launch, not an answer: the sandbox's
 * allowlist holds the agent's hosts, its env names the credential, a kept TTY process runs the
 * agent with the table's command line; a missing credential is refused before anything is
 * made; a saved secret stands in for it; values never show up in a log, the audit file or an
 * answer; and nobody else sees or uses them. The egress that would enforce the allowlist needs
 * root and a network namespace (tests/egress): here the API's answer is what is checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

static struct daemon_proc sbxd;
static const char *cli_bin;
static char ep[340];       /* unix://<socket> */
static char stubs[320];    /* the stub agents */
static char path_env[400]; /* --env PATH=<stubs>:/usr/bin:/bin */

/* The secret values: each must never appear anywhere but in the guest's environment. */
#define KEY_ANTHROPIC "sk-ant-test-7f3a9c1e5b"
#define KEY_OPENAI "sk-openai-test-2d8e4b6a0c"
#define KEY_GEMINI "gm-test-9b1d3f5e7a"
#define KEY_SAVED "sk-openai-saved-4c6e8a0b2d"

static const struct {
	const char *name, *var, *value;
	const char *hosts[4];
} agents[] = {
	{ "claude", "ANTHROPIC_API_KEY", KEY_ANTHROPIC, { "api.anthropic.com" } },
	{ "codex", "OPENAI_API_KEY", KEY_OPENAI, { "api.openai.com" } },
	{ "gemini", "GEMINI_API_KEY", KEY_GEMINI, { "generativelanguage.googleapis.com" } },
	{ "opencode",
	  "ANTHROPIC_API_KEY",
	  KEY_ANTHROPIC,
	  { "api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com",
	    "models.dev" } },
};

#define CLI_ENV(env, out, ...)                                                                     \
	harness_run_checked(cli_bin, (const char *const[]){ __VA_ARGS__, NULL }, env, out)

static void
write_stub(const char *name)
{
	_cleanup_free_ char *path = strdup_printf("%s/%s", stubs, name);
	/* "<name> <args...>" and each credential variable that is set, with its value (the
	 * guest may hold it; the test checks the right value arrived, not just some), then
	 * wait: an interactive agent runs until someone ends it */
	_cleanup_free_ char *text = strdup_printf(
	        "#!/bin/sh\n"
	        "{ echo \"argv: %s $*\"; for v in ANTHROPIC_API_KEY OPENAI_API_KEY GEMINI_API_KEY; "
	        "do eval \"x=\\${$v:-}\"; [ -n \"$x\" ] && echo \"has $v=$x\"; done; } "
	        "> \"%s/ran-%s.$$\"\n"
	        "echo \"stub %s started\"\n"
	        "exec sleep 600\n",
	        name, stubs, name, name);
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(path, 0755), 0);
}

static int
setup(void **state)
{
	const char *guestd = harness_need_guestd();

	(void)state;
	/* hermetic: no credential of the person running the tests */
	unsetenv("ANTHROPIC_API_KEY");
	unsetenv("CLAUDE_CODE_OAUTH_TOKEN");
	unsetenv("OPENAI_API_KEY");
	unsetenv("GEMINI_API_KEY");
	unsetenv("GOOGLE_API_KEY");
	cli_bin = harness_binary("SANDBOX_CLI");
	if (harness_start_fake_agent(&sbxd, guestd, NULL, NULL) < 0)
		return -1;
	snprintf(ep, sizeof(ep), "unix://%s", sbxd.sock);
	snprintf(stubs, sizeof(stubs), "%s/stubs", sbxd.dir);
	assert_int_equal(mkdir(stubs, 0755), 0);
	for (size_t i = 0; i < ARRAY_SIZE(agents); i++)
		write_stub(agents[i].name);
	snprintf(path_env, sizeof(path_env), "PATH=%s:/usr/bin:/bin", stubs);
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	harness_delete_all(sbxd.sock);
	harness_cleanup(&sbxd);
	return 0;
}

static bool
array_has(const json_t *a, const char *s)
{
	size_t i;
	json_t *v;

	json_array_foreach (a, i, v)
		if (json_is_string(v) && streq(json_string_value(v), s))
			return true;
	return false;
}

/* The file a stub wrote once it ran (its pid in the name), read whole; waits up to 5 s. */
static char *
stub_record(const char *name)
{
	_cleanup_free_ char *cmd = strdup_printf("cat %s/ran-%s.* 2>/dev/null", stubs, name);
	for (int i = 0; i < 250; i++) {
		char *out = NULL;
		const char *args[] = { "-c", cmd, NULL };
		if (harness_run("/bin/sh", args, NULL, &out) == 0 && out && *out)
			return out;
		free(out);
		usleep(20000);
	}
	fail_msg("stub %s never ran", name);
	return NULL;
}

static void
clear_stub_records(void)
{
	_cleanup_free_ char *cmd = strdup_printf("rm -f %s/ran-*", stubs);
	const char *args[] = { "-c", cmd, NULL };

	assert_int_equal(harness_run("/bin/sh", args, NULL, NULL), 0);
}

/* "sbx_<16 hex> <pid>\n", what --detach prints. */
static void
parse_detached(const char *out, char id[static 32], long *pid)
{
	if (sscanf(out, "%31s %ld", id, pid) != 2 || strncmp(id, "sbx_", 4) != 0 || *pid <= 0)
		fail_msg("--detach should print the sandbox's id and the agent's pid, printed:\n%s",
		         out);
}

/* The sandbox's agent runs pid as a kept TTY process whose argv is want (NULL-terminated). */
static void
expect_agent_process(const char *id, long pid, const char *const *want)
{
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s/processes", id);
	json_t *j = harness_json(sbxd.sock, "GET", path, NULL, 200), *p, *found = NULL;
	size_t i, n = 0;

	json_array_foreach (json_object_get(j, "processes"), i, p)
		if (json_integer_value(json_object_get(p, "pid")) == pid)
			found = p;
	if (!found)
		fail_msg("process %ld is not in the sandbox's list", pid);
	assert_true(json_is_true(json_object_get(found, "tty")));
	assert_true(json_is_true(json_object_get(found, "keep")));
	assert_string_equal(harness_str(found, "state"), "running");
	for (; want[n]; n++)
		assert_string_equal(
		        json_string_value(json_array_get(json_object_get(found, "argv"), n)),
		        want[n]);
	assert_int_equal(json_array_size(json_object_get(found, "argv")), n);
	json_decref(j);
}

/* Every agent: with its credential in the environment, --detach leaves a sandbox whose
 * allowlist holds the agent's hosts and whose env names the credential, with the agent running
 * as a kept TTY process; the stub saw the key. */
static void
test_all_four_detach(void **state)
{
	(void)state;
	for (size_t k = 0; k < ARRAY_SIZE(agents); k++) {
		_cleanup_free_ char *var = strdup_printf("%s=%s", agents[k].var, agents[k].value);
		_cleanup_free_ char *path = NULL, *rec = NULL, *has = NULL, *line = NULL;
		const char *env[] = { var, NULL };
		const char *argv[] = { agents[k].name, NULL };
		char id[32], *out = NULL;
		json_t *sb, *net, *a;
		long pid;

		clear_stub_records();
		assert_int_equal(CLI_ENV(env, &out, "--endpoint", ep, "agent", agents[k].name,
		                         "--detach", "--env", path_env),
		                 0);
		parse_detached(out, id, &pid);
		free(out);
		path = strdup_printf("/v1/sandboxes/%s", id);
		sb = harness_json(sbxd.sock, "GET", path, NULL, 200);
		net = json_object_get(sb, "network");
		assert_string_equal(harness_str(net, "mode"), "allowlist");
		for (size_t h = 0; h < ARRAY_SIZE(agents[k].hosts) && agents[k].hosts[h]; h++)
			if (!array_has(json_object_get(net, "allow"), agents[k].hosts[h]))
				fail_msg("%s's allowlist lacks %s", agents[k].name,
				         agents[k].hosts[h]);
		assert_true(array_has(json_object_get(sb, "env_names"), agents[k].var));
		a = json_object_get(sb, "agent");
		assert_string_equal(harness_str(a, "name"), agents[k].name);
		assert_string_equal(harness_str(a, "state"), "running");
		assert_int_equal(json_integer_value(json_object_get(a, "pid")), pid);
		assert_true(json_is_null(json_object_get(a, "task")));
		json_decref(sb);
		expect_agent_process(id, pid, argv);
		rec = stub_record(agents[k].name);
		has = strdup_printf("has %s=%s\n", agents[k].var, agents[k].value);
		harness_expect_in(rec, has);
		/* interactive: the table's command line alone */
		line = strdup_printf("argv: %s \n", argv[0]);
		if (!strstr(rec, line))
			fail_msg("%s should run without arguments:\n%s", agents[k].name, rec);
	}
}

/* Without the variable and without a saved secret: exit 2 naming it, and nothing made (the
 * list is as before, the fake backend was never asked to start anything). */
static void
test_missing_credential(void **state)
{
	_cleanup_free_ char *calls = strdup_printf("%s/fake/calls.log", sbxd.state);
	json_t *before = harness_json(sbxd.sock, "GET", "/v1/sandboxes", NULL, 200), *after;
	char *out = NULL, *log_before = NULL, *log_after = NULL;

	(void)state;
	(void)read_file_max(calls, 1u << 20, &log_before, NULL);
	for (size_t k = 0; k < ARRAY_SIZE(agents); k++) {
		assert_int_equal(CLI_ENV(NULL, &out, "--endpoint", ep, "agent", agents[k].name,
		                         "--detach", "--env", path_env),
		                 2);
		harness_expect_in(out, agents[k].var);
		harness_expect_in(out, "sandbox-cli secret set");
		harness_expect_not_in(out, "sbx_");
		free(out);
	}
	after = harness_json(sbxd.sock, "GET", "/v1/sandboxes", NULL, 200);
	assert_int_equal(json_array_size(json_object_get(after, "sandboxes")),
	                 json_array_size(json_object_get(before, "sandboxes")));
	(void)read_file_max(calls, 1u << 20, &log_after, NULL);
	assert_string_equal(log_after ? log_after : "", log_before ? log_before : "");
	free(log_before);
	free(log_after);
	json_decref(before);
	json_decref(after);
}

/* A saved secret stands in for the variable; a task runs the headless command line with the
 * agent's own arguments before the task. */
static void
test_saved_secret_and_task(void **state)
{
	const char *set_env[] = { "OPENAI_API_KEY=" KEY_SAVED, NULL };
	const char *want[] = {
		"codex", "exec", "--full-auto", "--model", "o9", "fix the test", NULL
	};
	_cleanup_free_ char *path = NULL, *rec = NULL;
	char id[32], *out = NULL;
	json_t *sb, *list;
	long pid;

	(void)state;
	clear_stub_records();
	assert_int_equal(
	        CLI_ENV(set_env, &out, "--endpoint", ep, "secret", "set", "OPENAI_API_KEY"), 0);
	harness_expect_not_in(out, KEY_SAVED);
	free(out);
	assert_int_equal(CLI_ENV(NULL, &out, "--endpoint", ep, "secret", "ls"), 0);
	harness_expect_in(out, "OPENAI_API_KEY");
	harness_expect_not_in(out, KEY_SAVED);
	free(out);
	list = harness_json(sbxd.sock, "GET", "/v1/secrets", NULL, 200);
	assert_int_equal(json_array_size(json_object_get(list, "secrets")), 1);
	assert_null(json_object_get(json_array_get(json_object_get(list, "secrets"), 0), "value"));
	json_decref(list);

	/* not in our environment now: the saved one is used */
	assert_int_equal(CLI_ENV(NULL, &out, "--endpoint", ep, "agent", "codex", "fix the test",
	                         "--detach", "--env", path_env, "--", "--model", "o9"),
	                 0);
	parse_detached(out, id, &pid);
	free(out);
	path = strdup_printf("/v1/sandboxes/%s", id);
	sb = harness_json(sbxd.sock, "GET", path, NULL, 200);
	assert_true(array_has(json_object_get(sb, "env_names"), "OPENAI_API_KEY"));
	assert_string_equal(harness_str(json_object_get(sb, "agent"), "task"), "fix the test");
	json_decref(sb);
	expect_agent_process(id, pid, want);
	rec = stub_record("codex");
	harness_expect_in(rec, "has OPENAI_API_KEY=" KEY_SAVED "\n");
	harness_expect_in(rec, "argv: codex exec --full-auto --model o9 fix the test");

	assert_int_equal(CLI_ENV(NULL, &out, "--endpoint", ep, "secret", "rm", "OPENAI_API_KEY"),
	                 0);
	free(out);
	assert_int_equal(CLI_ENV(NULL, &out, "--endpoint", ep, "secret", "rm", "OPENAI_API_KEY"),
	                 5);
	free(out);
	/* gone: the create is refused again */
	assert_int_equal(CLI_ENV(NULL, &out, "--endpoint", ep, "agent", "codex", "--detach"), 2);
	harness_expect_in(out, "OPENAI_API_KEY");
	free(out);
}

/* What the API refuses: an unknown agent, network mode none, a repo with a password in it. */
static void
test_refusals(void **state)
{
	static const char *const bodies[] = {
		"{\"agent\":{\"name\":\"cursor\"},\"env\":{\"X\":\"1\"}}",
		"{\"agent\":{\"name\":\"claude\"},\"env\":{\"ANTHROPIC_API_KEY\":\"k\"},"
		"\"network\":{\"mode\":\"none\"}}",
		"{\"agent\":{\"name\":\"claude\",\"repo\":\"https://u:pw@git.example/x.git\"},"
		"\"env\":{\"ANTHROPIC_API_KEY\":\"k\"}}",
		"{\"agent\":{\"name\":\"claude\",\"task\":\"\"},\"env\":{\"ANTHROPIC_API_KEY\":"
		"\"k\"}}",
		"{\"agent\":{\"name\":\"claude\",\"extra\":1},\"env\":{\"ANTHROPIC_API_KEY\":\"k\"}"
		"}",
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++) {
		json_t *j = harness_json(sbxd.sock, "POST", "/v1/sandboxes", bodies[i], 400);
		assert_string_equal(harness_str(json_object_get(j, "error"), "code"),
		                    "invalid_request");
		json_decref(j);
	}
}

/* A repo: its host joins the allowlist (not subject to may_allow, like the agent's own), and a
 * clone that fails fails the agent with git's words (no git server is reachable here); the
 * create answers once that is known. */
static void
test_repo_clone_failure(void **state)
{
	json_t *sb, *a;

	(void)state;
	sb = harness_json_timeout(
	        sbxd.sock, "POST", "/v1/sandboxes",
	        "{\"agent\":{\"name\":\"claude\",\"repo\":\"https://git.invalid/nothing.git\"},"
	        "\"env\":{\"ANTHROPIC_API_KEY\":\"" KEY_ANTHROPIC "\"}}",
	        30000, 201);
	a = json_object_get(sb, "agent");
	assert_string_equal(harness_str(a, "state"), "failed");
	harness_expect_in(harness_str(a, "message"), "git clone failed");
	assert_true(json_is_null(json_object_get(a, "pid")));
	assert_true(
	        array_has(json_object_get(json_object_get(sb, "network"), "allow"), "git.invalid"));
	assert_true(array_has(json_object_get(json_object_get(sb, "network"), "allow"),
	                      "api.anthropic.com"));
	json_decref(sb);
}

/* No value anywhere but in the guest: not in the daemon's log, the audit file, an API answer
 * or the events. */
static void
test_values_never_shown(void **state)
{
	static const char *const values[] = { KEY_ANTHROPIC, KEY_OPENAI, KEY_GEMINI, KEY_SAVED };
	_cleanup_free_ char *audit = strdup_printf("%s/audit/events.jsonl", sbxd.state);
	json_t *list = harness_json(sbxd.sock, "GET", "/v1/sandboxes", NULL, 200), *sb;
	char *log = NULL, *trail = NULL, *answers;
	size_t i;

	(void)state;
	assert_int_equal(read_file_max(sbxd.log, 64u << 20, &log, NULL), 0);
	assert_int_equal(read_file_max(audit, 64u << 20, &trail, NULL), 0);
	harness_expect_in(trail, "process.started");
	answers = json_dumps(list, 0);
	json_array_foreach (json_object_get(list, "sandboxes"), i, sb) {
		_cleanup_free_ char *p1 =
		        strdup_printf("/v1/sandboxes/%s/events", harness_str(sb, "id"));
		_cleanup_free_ char *p2 =
		        strdup_printf("/v1/sandboxes/%s/processes", harness_str(sb, "id"));
		char *body = NULL, *joined;
		harness_http(sbxd.sock, "GET", p1, NULL, &body);
		joined = strdup_printf("%s%s", answers, body ? body : "");
		free(body);
		body = NULL;
		harness_http(sbxd.sock, "GET", p2, NULL, &body);
		free(answers);
		answers = strdup_printf("%s%s", joined, body ? body : "");
		free(joined);
		free(body);
	}
	for (i = 0; i < ARRAY_SIZE(values); i++) {
		harness_expect_not_in(log, values[i]);
		harness_expect_not_in(trail, values[i]);
		harness_expect_not_in(answers, values[i]);
	}
	free(answers);
	free(log);
	free(trail);
	json_decref(list);
}

/* Two users: alice's secrets are hers alone. bob neither lists them, removes them, nor
 * launches with them. */
static void
test_secrets_are_per_user(void **state)
{
	char hdr[2][700];
	const char *who[] = { "alice@example.com", "bob@example.com" };
	json_t *j;
	char *msg;

	(void)state;
	for (int i = 0; i < 2; i++) {
		_cleanup_free_ char *body =
		        strdup_printf("{\"email\":\"%s\",\"password\":\"correct horse "
		                      "battery\",\"role\":\"user\"}",
		                      who[i]);
		_cleanup_free_ char *login = strdup_printf(
		        "{\"email\":\"%s\",\"password\":\"correct horse battery\"}", who[i]);
		char *head = NULL, *cookie, *semi;

		json_decref(harness_json(sbxd.sock, "POST", "/v1/users", body, 201));
		j = harness_json_headers(sbxd.sock, NULL, "POST", "/v1/auth/login", login, 200,
		                         &head);
		cookie = harness_header(head, "Set-Cookie");
		assert_non_null(cookie);
		semi = strchr(cookie, ';');
		if (semi)
			*semi = '\0';
		snprintf(hdr[i], sizeof(hdr[i]), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", cookie,
		         harness_str(j, "csrf_token"));
		free(cookie);
		free(head);
		json_decref(j);
	}
	j = harness_json_headers(sbxd.sock, hdr[0], "PUT", "/v1/secrets/ANTHROPIC_API_KEY",
	                         "{\"value\":\"" KEY_ANTHROPIC "\"}", 200, NULL);
	assert_string_equal(harness_str(j, "name"), "ANTHROPIC_API_KEY");
	assert_null(json_object_get(j, "value"));
	json_decref(j);
	j = harness_json_headers(sbxd.sock, hdr[0], "GET", "/v1/secrets", NULL, 200, NULL);
	assert_int_equal(json_array_size(json_object_get(j, "secrets")), 1);
	json_decref(j);
	/* bob sees none, cannot remove alice's, and cannot launch on it */
	j = harness_json_headers(sbxd.sock, hdr[1], "GET", "/v1/secrets", NULL, 200, NULL);
	assert_int_equal(json_array_size(json_object_get(j, "secrets")), 0);
	json_decref(j);
	json_decref(harness_json_headers(sbxd.sock, hdr[1], "DELETE",
	                                 "/v1/secrets/ANTHROPIC_API_KEY", NULL, 404, NULL));
	j = harness_json_headers(sbxd.sock, hdr[1], "POST", "/v1/sandboxes",
	                         "{\"agent\":{\"name\":\"claude\"}}", 400, NULL);
	msg = (char *)harness_str(json_object_get(j, "error"), "message");
	harness_expect_in(msg, "claude needs ANTHROPIC_API_KEY");
	json_decref(j);
	/* the operator (another owner too) has none of alice's either */
	j = harness_json(sbxd.sock, "GET", "/v1/secrets", NULL, 200);
	for (size_t i = 0; i < json_array_size(json_object_get(j, "secrets")); i++)
		assert_string_not_equal(
		        harness_str(json_array_get(json_object_get(j, "secrets"), i), "name"),
		        "ANTHROPIC_API_KEY");
	json_decref(j);
	/* alice launches on it */
	j = harness_json_headers(
	        sbxd.sock, hdr[0], "POST", "/v1/sandboxes",
	        "{\"agent\":{\"name\":\"claude\"},\"env\":{\"PATH\":\"/usr/bin:/bin\"}}", 201,
	        NULL);
	assert_true(array_has(json_object_get(j, "env_names"), "ANTHROPIC_API_KEY"));
	json_decref(j);
}

/* The agent object outlives its sandbox's end (GET by id of a terminated one) and, with
 * --keep-sandboxes, a restart of sandboxd: the same agent, the same pid, still followed. */
static void
test_kept_across_restart(void **state)
{
	const char *env[] = { "ANTHROPIC_API_KEY=" KEY_ANTHROPIC, NULL };
	static char env_agent[600];
	const char *denv[] = { env_agent, NULL };
	const char *keep[] = { "--keep-sandboxes", NULL };
	const char *argv[] = { "claude", NULL };
	_cleanup_free_ char *path = NULL;
	char id[32], *out = NULL;
	json_t *sb;
	long pid;

	(void)state;
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", getenv("SANDBOX_GUESTD"));
	/* an ended one keeps its agent object */
	assert_int_equal(CLI_ENV(env, &out, "--endpoint", ep, "agent", "claude", "--detach",
	                         "--env", path_env),
	                 0);
	parse_detached(out, id, &pid);
	free(out);
	path = strdup_printf("/v1/sandboxes/%s", id);
	json_decref(harness_json(sbxd.sock, "DELETE", path, NULL, 204));
	sb = harness_json(sbxd.sock, "GET", path, NULL, 200);
	assert_string_equal(harness_str(sb, "state"), "terminated");
	assert_string_equal(harness_str(json_object_get(sb, "agent"), "name"), "claude");
	json_decref(sb);
	free(path);

	/* across a restart with --keep-sandboxes */
	assert_int_equal(harness_stop(&sbxd, SIGTERM), 0);
	assert_int_equal(harness_restart(&sbxd, harness_binary("SANDBOXD_FAKE"), keep, denv), 0);
	assert_int_equal(CLI_ENV(env, &out, "--endpoint", ep, "agent", "claude", "--detach",
	                         "--env", path_env),
	                 0);
	parse_detached(out, id, &pid);
	free(out);
	assert_int_equal(harness_stop(&sbxd, SIGTERM), 0);
	assert_int_equal(harness_restart(&sbxd, harness_binary("SANDBOXD_FAKE"), keep, denv), 0);
	path = strdup_printf("/v1/sandboxes/%s", id);
	sb = harness_json(sbxd.sock, "GET", path, NULL, 200);
	assert_string_equal(harness_str(sb, "state"), "running");
	assert_string_equal(harness_str(json_object_get(sb, "agent"), "state"), "running");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(sb, "agent"), "pid")),
	                 pid);
	json_decref(sb);
	/* the guest lists it again; the record gives back its whole command line */
	for (int i = 0; i < 100; i++) {
		_cleanup_free_ char *pp = strdup_printf("/v1/sandboxes/%s/processes", id);
		json_t *j = harness_json(sbxd.sock, "GET", pp, NULL, 200);
		size_t n = json_array_size(json_object_get(j, "processes"));
		json_decref(j);
		if (n)
			break;
		usleep(50000);
	}
	expect_agent_process(id, pid, argv);
	/* the agent ends: its sandbox says so, with the code */
	{
		_cleanup_free_ char *sp =
		        strdup_printf("/v1/sandboxes/%s/processes/%ld/signal", id, pid);
		json_decref(harness_json(sbxd.sock, "POST", sp, "{\"signal\":\"SIGTERM\"}", 204));
	}
	for (int i = 0; i < 100; i++) {
		sb = harness_json(sbxd.sock, "GET", path, NULL, 200);
		if (streq(harness_str(json_object_get(sb, "agent"), "state") ?: "", "exited"))
			break;
		json_decref(sb);
		sb = NULL;
		usleep(50000);
	}
	assert_non_null(sb);
	assert_int_equal(
	        json_integer_value(json_object_get(json_object_get(sb, "agent"), "exit_code")),
	        128 + 15);
	json_decref(sb);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_four_detach),
		cmocka_unit_test(test_missing_credential),
		cmocka_unit_test(test_saved_secret_and_task),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_repo_clone_failure),
		cmocka_unit_test(test_secrets_are_per_user),
		cmocka_unit_test(test_values_never_shown),
		cmocka_unit_test(test_kept_across_restart),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
