/* test-persistence.c: nothing a client was told succeeded is lost when sandboxd is killed
 * with SIGKILL and started again; sandboxes whose VMs still run are taken back, and the ones
 * whose VMs vanished while sandboxd was down are marked failed with the reason, and those whose
 * network a narrowed policy no longer permits are ended (or refused a start). Runs the real
 * daemon with the test-only fake backend, whose "VMs" are files that outlive the daemon the
 * way a real QEMU process does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

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

static void
test_kill_and_restart(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char ids[5][32], path[400], st[32], reason[256];
	json_t *j;

	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
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

	assert_int_equal(harness_restart(&p, bin, NULL, NULL), 0);
	assert_true(harness_file_contains(p.log, "after the restart:"));

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

	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
	j = harness_json(p.sock, "POST", "/v1/sandboxes", "{}", 201);
	snprintf(id, sizeof(id), "%s", harness_str(j, "id"));
	json_decref(j);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_true(harness_file_contains(p.log, "shutting down; sandboxes keep running"));
	assert_int_equal(harness_restart(&p, bin, NULL, NULL), 0);
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
	const char *args[] = { "--policy", policy, NULL };
	json_t *j;

	(void)state;
	/* a first start makes the directory the policy file goes in */
	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	snprintf(policy, sizeof(policy), "%s/policy.yaml", p.dir);
	write_policy(policy, "[\"example.org\", \"pypi.org\"]");
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_and_restart),
		cmocka_unit_test(test_sigterm_keeps_sandboxes),
		cmocka_unit_test(test_streams_end_cleanly_and_replay),
		cmocka_unit_test(test_narrowed_policy_ends_wider_sandboxes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
