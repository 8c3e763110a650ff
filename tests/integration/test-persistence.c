/* test-persistence.c: nothing a client was told succeeded is lost when sandboxd is killed
 * with SIGKILL and started again; with --keep-sandboxes, sandboxes whose VMs still run are
 * taken back with their environment values and kept processes, the ones whose VMs vanished
 * while sandboxd was down are marked failed with the reason, those whose network a narrowed
 * policy no longer permits are ended (or refused a start), and those whose record is missing
 * or corrupt are ended rather than run without their secrets; records others could read
 * refuse the start. Without the flag, a stop of sandboxd ends every sandbox, and a start ends
 * what a crash left. Runs the real daemon with the test-only fake backend, whose "VMs" are
 * files (and, with SANDBOXD_FAKE_AGENT, sandbox-guestd in test mode) that outlive the daemon
 * the way a real QEMU process does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base64.h"
#include "buf.h"
#include "harness.h"
#include "util.h"

static const char *const keep[] = { "--keep-sandboxes", NULL };

static void
get_state(struct daemon_proc *p, const char *id, char *state, size_t n, char *reason, size_t rn)
{
	char path[128];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	j = harness_json(p->sock, "GET", path, NULL, 200);
	snprintf(state, n, "%s", harness_str(j, "state"));
	if (reason)
		snprintf(reason, rn, "%s",
		         harness_str(j, "reason") ? harness_str(j, "reason") : "");
	json_decref(j);
}

/* Whether the sandbox's record (--keep-sandboxes) is there: then it is 0600, owned by us, in a
 * 0700 directory; not there within 5 s when !present. */
static void
expect_record(const struct daemon_proc *p, const char *id, bool present)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/records", p->state);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	snprintf(path, sizeof(path), "%s/records/%s.json", p->state, id);
	if (!present) {
		/* it goes when the sandbox's end completes, which may follow the answer */
		for (int i = 0; i < 250 && access(path, F_OK) == 0; i++)
			usleep(20000);
		assert_int_equal(access(path, F_OK), -1);
		return;
	}
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_uid, geteuid());
}

/* Waits up to 5 s for the sandbox to reach state want; returns its reason ("" when none). */
static void
wait_state(struct daemon_proc *p, const char *id, const char *want, char *reason, size_t rn)
{
	char st[32];

	for (int i = 0; i < 250; i++) {
		get_state(p, id, st, sizeof(st), reason, rn);
		if (strcmp(st, want) == 0)
			return;
		usleep(20000);
	}
	fail_msg("sandbox %s is %s, not %s", id, st, want);
}

/* The audit record sandbox.terminated of id, with its reason ("request", "shutdown", ...). */
static bool
ended_for(struct daemon_proc *p, const char *id, const char *end)
{
	char path[128], needle[64];
	json_t *j, *e;
	size_t i;
	bool found = false;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", id);
	snprintf(needle, sizeof(needle), "%s", end);
	j = harness_json(p->sock, "GET", path, NULL, 200);
	json_array_foreach (json_object_get(j, "events"), i, e)
		if (strcmp(harness_str(e, "type"), "sandbox.terminated") == 0 &&
		    harness_str(e, "reason") && strcmp(harness_str(e, "reason"), needle) == 0)
			found = true;
	json_decref(j);
	return found;
}

static char *
create_id(struct daemon_proc *p, const char *body, char *id, size_t n)
{
	json_t *j = harness_json(p->sock, "POST", "/v1/sandboxes", body, 201);

	assert_string_equal(harness_str(j, "state"), "running");
	snprintf(id, n, "%s", harness_str(j, "id"));
	json_decref(j);
	return id;
}

static void
test_kill_and_restart(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char ids[5][32], path[400], st[32], reason[256];
	json_t *j;

	assert_int_equal(harness_start(&p, bin, keep, NULL), 0);
	for (int i = 0; i < 5; i++) {
		char body[256];
		snprintf(body, sizeof(body),
		         "{\"name\":\"keep-%d\",\"labels\":{\"n\":\"%d\"},\"env\":{\"K\":\"v\"}}",
		         i, i);
		j = harness_json(p.sock, "POST", "/v1/sandboxes", body, 201);
		assert_string_equal(harness_str(j, "state"), "running");
		snprintf(ids[i], sizeof(ids[i]), "%s", harness_str(j, "id"));
		json_decref(j);
	}
	/* 1 stopped, 2 deleted, 3 renamed, 4's VM will vanish while sandboxd is down */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", ids[1]);
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", ids[2]);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", ids[3]);
	json_decref(harness_json(p.sock, "PATCH", path, "{\"name\":\"renamed\"}", 200));

	/* a create still booting (wait:false, slow image) when the daemon dies */
	j = harness_json(p.sock, "POST", "/v1/sandboxes",
	                 "{\"image\":\"fake/slow\",\"wait\":false}", 201);
	char booting[32];
	snprintf(booting, sizeof(booting), "%s", harness_str(j, "id"));
	json_decref(j);

	assert_int_equal(harness_stop(&p, SIGKILL), 128 + SIGKILL);
	snprintf(path, sizeof(path), "%s/fake/%s", p.state, ids[4]);
	assert_int_equal(unlink(path), 0);

	assert_int_equal(harness_restart(&p, bin, keep, NULL), 0);
	assert_true(harness_file_contains(p.log, "after the restart:"));
	/* their records are there, the deleted one's is not */
	expect_record(&p, ids[0], true);
	expect_record(&p, ids[2], false);

	get_state(&p, ids[0], st, sizeof(st), NULL, 0);
	assert_string_equal(st, "running");
	get_state(&p, ids[1], st, sizeof(st), NULL, 0);
	assert_string_equal(st, "stopped");
	get_state(&p, ids[2], st, sizeof(st), NULL, 0);
	assert_string_equal(st, "terminated");
	get_state(&p, ids[3], st, sizeof(st), NULL, 0);
	assert_string_equal(st, "running");
	j = harness_json(p.sock, "GET", "/v1/sandboxes/renamed", NULL, 200);
	assert_string_equal(harness_str(j, "id"), ids[3]);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "labels"), "n")),
	                    "3");
	assert_string_equal(json_string_value(json_array_get(json_object_get(j, "env_names"), 0)),
	                    "K");
	json_decref(j);
	get_state(&p, ids[4], st, sizeof(st), reason, sizeof(reason));
	assert_string_equal(st, "failed");
	assert_non_null(strstr(reason, "ended while sandboxd was not running"));
	get_state(&p, booting, st, sizeof(st), reason, sizeof(reason));
	assert_string_equal(st, "failed");
	assert_non_null(strstr(reason, "before it finished starting"));

	/* the list holds the live ones and the terminated one (until --forget-after), and the
	 * events survived too */
	j = harness_json(p.sock, "GET", "/v1/sandboxes", NULL, 200);
	assert_int_equal(json_array_size(json_object_get(j, "sandboxes")), 6);
	json_decref(j);
	j = harness_json(p.sock, "GET", "/v1/sandboxes?state=terminated", NULL, 200);
	assert_int_equal(json_array_size(json_object_get(j, "sandboxes")), 1);
	assert_string_equal(harness_str(json_array_get(json_object_get(j, "sandboxes"), 0), "id"),
	                    ids[2]);
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", ids[1]);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	{
		static const char *const trail[] = { "sandbox.created", "sandbox.started",
			                             "sandbox.stopped" };
		json_t *events = json_object_get(j, "events");
		assert_int_equal(json_array_size(events), sizeof(trail) / sizeof(trail[0]));
		for (size_t i = 0; i < sizeof(trail) / sizeof(trail[0]); i++)
			assert_string_equal(harness_str(json_array_get(events, i), "type"),
			                    trail[i]);
	}
	json_decref(j);

	/* the taken-back sandboxes keep working */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", ids[1]);
	j = harness_json(p.sock, "POST", path, NULL, 200);
	assert_string_equal(harness_str(j, "state"), "running");
	json_decref(j);
	/* and a name freed by a delete before the crash can be used again */
	j = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"name\":\"keep-2\"}", 201);
	assert_string_not_equal(harness_str(j, "id"), ids[2]);
	json_decref(j);

	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

static void
test_sigterm_keeps_sandboxes(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char id[32], st[32];
	json_t *j;

	assert_int_equal(harness_start(&p, bin, keep, NULL), 0);
	assert_true(harness_file_contains(p.log, "; sandboxes kept across restarts "
	                                         "(--keep-sandboxes)"));
	j = harness_json(p.sock, "POST", "/v1/sandboxes", "{}", 201);
	snprintf(id, sizeof(id), "%s", harness_str(j, "id"));
	json_decref(j);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_true(harness_file_contains(p.log, "shutting down; sandboxes keep running "
	                                         "(--keep-sandboxes)"));
	assert_int_equal(harness_restart(&p, bin, keep, NULL), 0);
	assert_true(harness_file_contains(p.log, "1 sandbox(es) taken back"));
	get_state(&p, id, st, sizeof(st), NULL, 0);
	assert_string_equal(st, "running");
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

static void
test_streams_end_cleanly_and_replay(void **state)
{
	static const char sub[] = "GET /v1/events/stream HTTP/1.1\r\nHost: localhost\r\n"
	                          "Last-Event-ID: 0\r\n\r\n";
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char *resp = NULL;
	json_t *j;
	pid_t reader;
	int pipefd[2];

	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
	j = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"name\":\"replayed\"}", 201);
	json_decref(j);
	/* a subscriber replaying from the start, then reading until the server closes */
	assert_int_equal(pipe(pipefd), 0);
	reader = fork();
	if (reader == 0) {
		ssize_t n = harness_raw(p.sock, 0, sub, sizeof(sub) - 1, &resp, 5000);
		if (n > 0)
			(void)!write(pipefd[1], resp, (size_t)n);
		_exit(0);
	}
	close(pipefd[1]);
	usleep(500000);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	{
		char buf[65536];
		size_t got = 0;
		ssize_t n;
		while ((n = read(pipefd[0], buf + got, sizeof(buf) - 1 - got)) > 0)
			got += (size_t)n;
		buf[got] = '\0';
		waitpid(reader, NULL, 0);
		close(pipefd[0]);
		/* replayed events carry the sandbox object like live ones */
		assert_non_null(strstr(buf, "event: created"));
		assert_non_null(strstr(buf, "\"sandbox\":{\"id\":\"sbx_"));
		assert_non_null(strstr(buf, "\"name\":\"replayed\""));
		/* a shutdown ends the chunked stream properly: a client can tell it from a crash */
		assert_true(got >= 5);
		assert_string_equal(buf + got - 5, "0\r\n\r\n");
	}
	harness_cleanup(&p);
}

static void
write_policy(const char *path, const char *may_allow)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fprintf(f,
	        "network:\n  default:\n    mode: none\n  ceiling: allowlist\n"
	        "  may_allow: %s\n",
	        may_allow);
	assert_int_equal(fclose(f), 0);
}

/* Whether the sandbox's audit trail holds a record of type that mentions needle. */
static bool
has_event(struct daemon_proc *p, const char *id, const char *type, const char *needle)
{
	char path[128];
	json_t *j, *e;
	size_t i;
	bool found = false;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", id);
	j = harness_json(p->sock, "GET", path, NULL, 200);
	json_array_foreach (json_object_get(j, "events"), i, e) {
		char *data = json_dumps(e, JSON_COMPACT);
		if (strcmp(json_string_value(json_object_get(e, "type")), type) == 0 && data &&
		    strstr(data, needle))
			found = true;
		free(data);
	}
	json_decref(j);
	return found;
}

/* R-L4: the policy file is read at each start of sandboxd, and what a sandbox was granted
 * before is held to it: narrowing may_allow and restarting ends the running sandbox whose
 * allowlist it no longer permits (terminated with the reason, in the log and the events), and
 * refuses to start the stopped one (403 refused, naming the name); a sandbox within the new
 * policy is taken back and starts as before. */
static void
test_narrowed_policy_ends_wider_sandboxes(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char policy[400], wide[32], stopped[32], narrow[32], path[512], st[32], reason[256];
	char *body = NULL;
	const char *args[] = { "--policy", policy, NULL, NULL };
	json_t *j;

	(void)state;
	/* a first start makes the directory the policy file goes in */
	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	snprintf(policy, sizeof(policy), "%s/policy.yaml", p.dir);
	write_policy(policy, "[\"example.org\", \"pypi.org\"]");
	args[2] = "--keep-sandboxes";
	assert_int_equal(harness_restart(&p, bin, args, NULL), 0);
	j = harness_json(p.sock, "POST", "/v1/sandboxes",
	                 "{\"name\":\"wide\",\"network\":{\"mode\":\"allowlist\","
	                 "\"allow\":[\"example.org\"]}}",
	                 201);
	snprintf(wide, sizeof(wide), "%s", harness_str(j, "id"));
	json_decref(j);
	j = harness_json(p.sock, "POST", "/v1/sandboxes",
	                 "{\"name\":\"stopped\",\"network\":{\"mode\":\"allowlist\","
	                 "\"allow\":[\"example.org\"]}}",
	                 201);
	snprintf(stopped, sizeof(stopped), "%s", harness_str(j, "id"));
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", stopped);
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	j = harness_json(p.sock, "POST", "/v1/sandboxes",
	                 "{\"name\":\"narrow\",\"network\":{\"mode\":\"allowlist\","
	                 "\"allow\":[\"pypi.org\"]}}",
	                 201);
	snprintf(narrow, sizeof(narrow), "%s", harness_str(j, "id"));
	json_decref(j);

	/* the operator narrows the policy: example.org is no longer granted */
	assert_int_equal(harness_stop(&p, SIGKILL), 128 + SIGKILL);
	write_policy(policy, "[\"pypi.org\"]");
	assert_int_equal(harness_restart(&p, bin, args, NULL), 0);

	/* the running one is ended, disk and all, with the reason */
	for (int i = 0; i < 100; i++) {
		get_state(&p, wide, st, sizeof(st), reason, sizeof(reason));
		if (strcmp(st, "terminated") == 0)
			break;
		usleep(20000);
	}
	assert_string_equal(st, "terminated");
	assert_string_equal(reason, "its network is no longer permitted by this server's policy: "
	                            "'example.org' is neither in this server's default allow "
	                            "list nor within its may_allow");
	assert_true(has_event(&p, wide, "sandbox.terminated", "\"reason\":\"policy\""));
	assert_true(harness_file_contains(p.log, "not taken back: its network is no longer "
	                                         "permitted"));
	assert_true(harness_file_contains(p.log, "1 ended (network no longer permitted)"));
	snprintf(path, sizeof(path), "%s/fake/calls.log", p.state);
	{
		char line[80];
		snprintf(line, sizeof(line), "destroy %s", wide);
		assert_true(harness_file_contains(path, line));
	}
	/* the one within the new policy is taken back */
	get_state(&p, narrow, st, sizeof(st), NULL, 0);
	assert_string_equal(st, "running");

	/* the stopped one is refused a start, and stays as it was */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", stopped);
	assert_int_equal(harness_http(p.sock, "POST", path, NULL, &body), 403);
	harness_expect_in(body, "\"code\":\"refused\"");
	harness_expect_in(body, "cannot start: its network is no longer permitted by this "
	                        "server's policy: 'example.org' is neither");
	free(body);
	get_state(&p, stopped, st, sizeof(st), NULL, 0);
	assert_string_equal(st, "stopped");
	/* the audit trail has API.md's record types only; the refusal is in the log */
	assert_true(harness_file_contains(p.log, "start refused: its network is no longer"));
	/* narrowed to what the policy grants, it starts */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", stopped);
	json_decref(harness_json(p.sock, "PATCH", path,
	                         "{\"network\":{\"mode\":\"allowlist\",\"allow\":[\"pypi.org\"]}}",
	                         200));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", stopped);
	j = harness_json(p.sock, "POST", path, NULL, 200);
	assert_string_equal(harness_str(j, "state"), "running");
	json_decref(j);

	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* Without --keep-sandboxes, SIGTERM ends every sandbox, running or stopped (the backend is
 * asked to destroy each, and each is terminated with end "shutdown"), and writes no record;
 * sandboxd exits 0 once they are ended. The next start finds nothing to take back. */
static void
test_sigterm_without_keep_ends_sandboxes(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char a[32], b[32], path[512], reason[256], line[80];

	(void)state;
	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
	assert_false(harness_file_contains(p.log, "--keep-sandboxes)"));
	create_id(&p, "{\"name\":\"a\",\"env\":{\"K\":\"v\"}}", a, sizeof(a));
	create_id(&p, "{\"name\":\"b\"}", b, sizeof(b));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", b);
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	snprintf(path, sizeof(path), "%s/records", p.state);
	assert_int_equal(access(path, F_OK), -1);

	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_true(harness_file_contains(p.log, "shutting down; ending 2 sandbox(es): sandboxd "
	                                         "runs without --keep-sandboxes"));
	snprintf(path, sizeof(path), "%s/fake/calls.log", p.state);
	snprintf(line, sizeof(line), "destroy %s", a);
	assert_true(harness_file_contains(path, line));
	snprintf(line, sizeof(line), "destroy %s", b);
	assert_true(harness_file_contains(path, line));
	/* their "VMs" are gone */
	snprintf(path, sizeof(path), "%s/fake/%s", p.state, a);
	assert_int_equal(access(path, F_OK), -1);

	assert_int_equal(harness_restart(&p, bin, NULL, NULL), 0);
	assert_false(harness_file_contains(p.log, "after the restart:"));
	get_state(&p, a, line, sizeof(line), reason, sizeof(reason));
	assert_string_equal(line, "terminated");
	assert_string_equal(reason, "sandboxd stopped, without --keep-sandboxes");
	assert_true(ended_for(&p, a, "shutdown"));
	assert_true(ended_for(&p, b, "shutdown"));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* Without --keep-sandboxes, a sandbox found at a start (the earlier sandboxd was killed, or
 * ran with the flag) is ended with the reason, never taken back without its environment
 * values; and every record an earlier run kept is deleted. */
static void
test_start_without_keep_ends_what_was_left(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char a[32], b[32], path[512], reason[256];

	(void)state;
	/* a kill -9 of a sandboxd without the flag */
	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
	create_id(&p, "{\"env\":{\"ANTHROPIC_API_KEY\":\"sk-lost\"}}", a, sizeof(a));
	assert_int_equal(harness_stop(&p, SIGKILL), 128 + SIGKILL);
	assert_int_equal(harness_restart(&p, bin, NULL, NULL), 0);
	wait_state(&p, a, "terminated", reason, sizeof(reason));
	assert_non_null(strstr(reason, "left by an earlier sandboxd; this one runs without "
	                               "--keep-sandboxes, so it takes no sandbox back"));
	assert_true(ended_for(&p, a, "shutdown"));
	assert_true(harness_file_contains(p.log, "was left by an earlier sandboxd; ending it: this "
	                                         "one runs without --keep-sandboxes"));
	assert_true(harness_file_contains(p.log, "after the restart: 1 sandbox(es) an earlier "
	                                         "sandboxd left ended"));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);

	/* a run with the flag kept one, with its record; a start without it ends it and
	 * deletes every record */
	assert_int_equal(harness_restart(&p, bin, keep, NULL), 0);
	create_id(&p, "{\"env\":{\"K\":\"kept-then-dropped\"}}", b, sizeof(b));
	expect_record(&p, b, true);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_equal(harness_restart(&p, bin, NULL, NULL), 0);
	assert_true(harness_file_contains(p.log, "records: deleted 1 an earlier run with "
	                                         "--keep-sandboxes kept"));
	snprintf(path, sizeof(path), "%s/records", p.state);
	assert_int_equal(access(path, F_OK), -1);
	wait_state(&p, b, "terminated", reason, sizeof(reason));
	assert_true(ended_for(&p, b, "shutdown"));
	assert_false(harness_file_contains(p.log, "kept-then-dropped"));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* POST …/run; returns the exit code, and stdout decoded (caller frees). */
static int
run(struct daemon_proc *p, const char *id, const char *argv_json, char **out)
{
	char path[128], body[512];
	struct buf b = BUF_INIT(1u << 20);
	const char *b64;
	json_t *r;
	int code;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	snprintf(body, sizeof(body), "{\"argv\":%s}", argv_json);
	r = harness_json(p->sock, "POST", path, body, 200);
	code = (int)json_integer_value(json_object_get(r, "exit_code"));
	b64 = harness_str(r, "stdout");
	assert_non_null(b64);
	assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
	*out = buf_steal(&b);
	json_decref(r);
	return code;
}

/* The process pid of sandbox id as listed, once the agent answers again after the restart
 * and the guest's list came back (or NULL). */
static json_t *
listed_proc(struct daemon_proc *p, const char *id, long long pid)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	for (int i = 0; i < 200; i++) {
		char *text = NULL;
		json_t *l = NULL, *e;
		size_t k;
		if (harness_http(p->sock, "GET", path, NULL, &text) == 200)
			l = json_loads(text, 0, NULL);
		free(text);
		json_array_foreach (json_object_get(l, "processes"), k, e)
			if (json_integer_value(json_object_get(e, "pid")) == pid) {
				json_incref(e);
				json_decref(l);
				return e;
			}
		json_decref(l);
		usleep(50000);
	}
	return NULL;
}

/* Issue 14: with --keep-sandboxes, a restart of sandboxd (SIGTERM, then kill -9) keeps a
 * sandbox's secret: a new exec sees ANTHROPIC_API_KEY as it was given at create, never empty;
 * a kept process started before runs on, is listed with its whole command line, and its
 * output replays. The value is on disk only in the record (0600), never in the log. */
/* Its daemon: the fake's agents outlive it (as VMs do), so a failed case's are ended here by
 * their marker (harness_cleanup). */
static struct daemon_proc keep_daemon;

static int
end_keep_daemon(void **state)
{
	(void)state;
	if (keep_daemon.dir[0])
		harness_cleanup(&keep_daemon);
	memset(&keep_daemon, 0, sizeof(keep_daemon));
	return 0;
}

static void
test_keep_restores_env_and_kept_processes(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE"), *guestd = getenv("SANDBOX_GUESTD");
	static const char script[] = "echo started; while :; do sleep 0.2; done";
	struct daemon_proc *kp = &keep_daemon;
	char env_agent[600], secret[64], body[256], id[32], path[512], *out = NULL, *data = NULL;
	const char *const *env = (const char *const[]){ env_agent, NULL };
	long long pid;
	json_t *j;

	(void)state;
	if (!guestd || access(guestd, X_OK) < 0) {
		harness_skip_case(
		        "SANDBOX_GUESTD is not set to sandbox-guestd (run through ctest)");
		return;
	}
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", guestd);
	assert_int_equal(random_hex(secret, 12), 0);
	memmove(secret + 8, secret, 25);
	memcpy(secret, "sk-test-", 8);
	assert_int_equal(harness_start(kp, bin, keep, env), 0);
	snprintf(body, sizeof(body), "{\"name\":\"agent\",\"env\":{\"ANTHROPIC_API_KEY\":\"%s\"}}",
	         secret);
	create_id(kp, body, id, sizeof(id));
	expect_record(kp, id, true);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	snprintf(body, sizeof(body), "{\"argv\":[\"sh\",\"-c\",\"%s\",\"job\"],\"keep\":true}",
	         script);
	j = harness_json(kp->sock, "POST", path, body, 201);
	pid = json_integer_value(json_object_get(j, "pid"));
	json_decref(j);
	assert_true(pid > 0);

	for (int round = 0; round < 2; round++) {
		json_t *proc;
		char *expect_argv = NULL;
		int sig = round == 0 ? SIGTERM : SIGKILL;

		usleep(300000);
		assert_int_equal(harness_stop(kp, sig), sig == SIGTERM ? 0 : 128 + SIGKILL);
		assert_int_equal(harness_restart(kp, bin, keep, env), 0);
		assert_true(harness_file_contains(kp->log, "1 sandbox(es) taken back"));
		/* the kept process, listed again (once the agent answers) with its whole command
		 * line */
		proc = listed_proc(kp, id, pid);
		assert_non_null(proc);
		/* a new exec gets the sandbox's environment, values and all */
		assert_int_equal(run(kp, id, "[\"printenv\",\"ANTHROPIC_API_KEY\"]", &out), 0);
		assert_int_equal(strncmp(out, secret, strlen(secret)), 0);
		assert_string_equal(out + strlen(secret), "\n");
		free(out);
		assert_string_equal(harness_str(proc, "state"), "running");
		expect_argv = json_dumps(json_object_get(proc, "argv"), JSON_COMPACT);
		assert_string_equal(expect_argv,
		                    "[\"sh\",\"-c\",\"echo started; while :; do sleep 0.2; "
		                    "done\",\"job\"]");
		free(expect_argv);
		json_decref(proc);
		/* its output replays from the start ("started\n" is c3RhcnRlZAo=) */
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld/output", id, pid);
		{
			int fd = harness_stream_open(kp->sock, "GET", path, NULL);
			size_t n = 0;
			assert_true(fd >= 0);
			(void)harness_stream_read(fd, 15000, "c3RhcnRlZAo=", &data, &n);
			close(fd);
			assert_non_null(strstr(data, "c3RhcnRlZAo="));
			free(data);
			data = NULL;
		}
	}
	/* the secret is in the record alone: never in the log */
	assert_false(harness_file_contains(kp->log, secret));
	snprintf(path, sizeof(path), "%s/records/%s.json", kp->state, id);
	assert_true(harness_file_contains(path, secret));
	/* the record goes with its sandbox */
	snprintf(body, sizeof(body), "/v1/sandboxes/%s", id);
	json_decref(harness_json(kp->sock, "DELETE", body, NULL, 204));
	expect_record(kp, id, false);
	assert_int_equal(harness_stop(kp, SIGTERM), 0);
}

/* A records directory or a record others could read (or another uid's) refuses the start,
 * naming the file and what to do; put right, the start goes on and takes the sandbox back. */
static void
test_open_records_refuse_the_start(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char id[32], dir[400], file[480], st[32];

	(void)state;
	assert_int_equal(harness_start(&p, bin, keep, NULL), 0);
	create_id(&p, "{\"env\":{\"K\":\"v\"}}", id, sizeof(id));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	snprintf(dir, sizeof(dir), "%s/records", p.state);
	snprintf(file, sizeof(file), "%s/%s.json", dir, id);

	assert_int_equal(chmod(file, 0644), 0);
	assert_int_equal(harness_restart(&p, bin, keep, NULL), -1);
	assert_int_not_equal(harness_stop(&p, SIGTERM), 0);
	assert_true(harness_file_contains(p.log, "is open to group or others (mode 0644); it "
	                                         "holds environment values: run 'chmod 600"));
	assert_true(harness_file_contains(p.log, "; refusing to start"));
	assert_int_equal(chmod(file, 0600), 0);

	assert_int_equal(chmod(dir, 0750), 0);
	assert_int_equal(harness_restart(&p, bin, keep, NULL), -1);
	assert_int_not_equal(harness_stop(&p, SIGTERM), 0);
	assert_true(harness_file_contains(p.log, "the records directory '"));
	assert_true(harness_file_contains(p.log, "(mode 0750); it holds environment values: run "
	                                         "'chmod 700"));
	assert_int_equal(chmod(dir, 0700), 0);

	if (geteuid() == 0) {
		/* another uid's record is refused too */
		assert_int_equal(chown(file, 65534, 65534), 0);
		assert_int_equal(harness_restart(&p, bin, keep, NULL), -1);
		assert_int_not_equal(harness_stop(&p, SIGTERM), 0);
		assert_true(
		        harness_file_contains(p.log, "belongs to uid 65534, not to sandboxd's"));
		assert_int_equal(chown(file, 0, 0), 0);
	}

	assert_int_equal(harness_restart(&p, bin, keep, NULL), 0);
	get_state(&p, id, st, sizeof(st), NULL, 0);
	assert_string_equal(st, "running");
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* With --keep-sandboxes, a sandbox whose values cannot be had is ended with the reason (end
 * "record") and sandboxd serves on: a corrupt record (its bytes, a secret among them, never in
 * the log), a record missing for a sandbox with an environment. One without an environment
 * needs none, and is taken back; a record no sandbox has is deleted. */
static void
test_bad_records_end_their_sandboxes(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char corrupt[32], missing[32], plain[32], path[512], reason[400], st[32];
	FILE *f;

	(void)state;
	assert_int_equal(harness_start(&p, bin, keep, NULL), 0);
	create_id(&p, "{\"env\":{\"K\":\"v\"}}", corrupt, sizeof(corrupt));
	create_id(&p, "{\"env\":{\"K\":\"v\"}}", missing, sizeof(missing));
	create_id(&p, "{}", plain, sizeof(plain));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);

	snprintf(path, sizeof(path), "%s/records/%s.json", p.state, corrupt);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"version\":1,\"id\":\"sk-corrupt-secret-value\",\"env\":[", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/records/%s.json", p.state, missing);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/records/%s.json", p.state, plain);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/records/sbx_00000000000000ff.json", p.state);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{}", f);
	fclose(f);
	chmod(path, 0600);

	assert_int_equal(harness_restart(&p, bin, keep, NULL), 0);
	wait_state(&p, corrupt, "terminated", reason, sizeof(reason));
	assert_non_null(strstr(reason, "its record (records/"));
	assert_non_null(strstr(reason, "could not be read after a restart of sandboxd (it is not "
	                               "JSON"));
	assert_non_null(strstr(reason, "so its environment values are lost"));
	assert_true(ended_for(&p, corrupt, "record"));
	wait_state(&p, missing, "terminated", reason, sizeof(reason));
	assert_non_null(strstr(reason, "it has no record (records/"));
	assert_true(ended_for(&p, missing, "record"));
	get_state(&p, plain, st, sizeof(st), NULL, 0);
	assert_string_equal(st, "running");
	assert_true(harness_file_contains(p.log, "1 sandbox(es) taken back, 0 kept stopped or "
	                                         "failed, 0 failed now, 2 ended (no usable "
	                                         "record)"));
	assert_true(harness_file_contains(p.log, "records: deleted 1 that no sandbox has"));
	assert_int_equal(access(path, F_OK), -1);
	assert_false(harness_file_contains(p.log, "sk-corrupt-secret-value"));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_and_restart),
		cmocka_unit_test(test_sigterm_keeps_sandboxes),
		cmocka_unit_test(test_sigterm_without_keep_ends_sandboxes),
		cmocka_unit_test(test_start_without_keep_ends_what_was_left),
		cmocka_unit_test_teardown(test_keep_restores_env_and_kept_processes,
		                          end_keep_daemon),
		cmocka_unit_test(test_open_records_refuse_the_start),
		cmocka_unit_test(test_bad_records_end_their_sandboxes),
		cmocka_unit_test(test_streams_end_cleanly_and_replay),
		cmocka_unit_test(test_narrowed_policy_ends_wider_sandboxes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
