/* test-suspend.c: suspend and resume on the fake backend, whose agent is sandbox-guestd in test
 * mode (its processes run here, frozen with SIGSTOP while "suspended"): the states a user sees
 * (running -> suspending -> suspended -> resuming -> running), the audit trail, the 409s from
 * other states, a process that carries on counting where it was, stop and delete of a
 * suspended sandbox, a resume that fails and leaves it suspended, the idle action "suspend"
 * (the default where the backend can), wake on use (a run, a file read, a process list resume
 * it first), and --keep-sandboxes across a restart of sandboxd (suspended it stays, and resumes
 * with its kept process; without the flag it ends). That a real VM does the same is
 * tests/vm/test-vm-suspend.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

static struct daemon_proc p;
static char home[256]; /* the files the guest writes live under it */
static char env_agent[600];

static int
setup(void **state)
{
	const char *guestd = harness_need_guestd();

	(void)state;
	if (harness_tmpdir(home, sizeof(home)) < 0)
		return -1;
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", guestd);
	return harness_start_fake_agent(&p, guestd, NULL, NULL);
}

static int
teardown(void **state)
{
	int rc;

	(void)state;
	(void)harness_delete_all(p.sock);
	rc = harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
	if (harness_rmtree(home) < 0)
		return -1;
	return rc == 0 ? 0 : -1;
}

static json_t *
get_sandbox(const char *sock, const char *id)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	return harness_json(sock, "GET", path, NULL, 200);
}

static void
expect_state(const char *sock, const char *id, const char *want)
{
	json_t *j = get_sandbox(sock, id);

	if (!streq(harness_str(j, "state") ?: "", want))
		fail_msg("sandbox %s is %s, expected %s", id, harness_str(j, "state"), want);
	json_decref(j);
}

/* Polls until the sandbox reaches want (or 30 s pass); returns the object. */
static json_t *
await_state(const char *sock, const char *id, const char *want)
{
	for (int i = 0; i < 300; i++) {
		json_t *j = get_sandbox(sock, id);
		if (streq(harness_str(j, "state") ?: "", want))
			return j;
		json_decref(j);
		usleep(100000);
	}
	fail_msg("sandbox %s never reached %s", id, want);
	return NULL;
}

static void
create(const char *sock, const char *body, char id[static 64])
{
	json_t *j = harness_json(sock, "POST", "/v1/sandboxes", body, 201);

	assert_string_equal(harness_str(j, "state"), "running");
	snprintf(id, 64, "%s", harness_str(j, "id"));
	json_decref(j);
}

/* POST …/verb answers want (200: with the sandbox in want_state). */
static void
post(const char *sock, const char *id, const char *verb, int want, const char *want_state)
{
	char path[128];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, verb);
	j = harness_json(sock, "POST", path, NULL, want);
	if (want_state)
		assert_string_equal(harness_str(j, "state"), want_state);
	json_decref(j);
}

static long
start_process(const char *sock, const char *id, const char *body)
{
	char path[128];
	json_t *j;
	long pid;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	j = harness_json(sock, "POST", path, body, 201);
	pid = (long)json_integer_value(json_object_get(j, "pid"));
	json_decref(j);
	assert_true(pid > 0);
	return pid;
}

/* How many lines the counter wrote to path so far (its last count + 1). */
static long
count_lines(const char *path)
{
	_cleanup_free_ char *text = NULL;
	long n = 0;

	if (read_file_max(path, 1 << 20, &text, NULL) < 0)
		return 0;
	for (const char *c = text; *c; c++)
		n += *c == '\n';
	return n;
}

/* Waits (up to 10 s) until the counter at path wrote more than n lines. */
static void
await_count(const char *path, long n)
{
	for (int i = 0; i < 200 && count_lines(path) <= n; i++)
		usleep(50000);
	if (count_lines(path) <= n)
		fail_msg("the counter stayed at %ld lines", count_lines(path));
}

/* The lines of path are 0, 1, 2, ... with none missing or repeated. */
static void
expect_consecutive(const char *path)
{
	_cleanup_free_ char *text = NULL;
	long want = 0;
	char *save = NULL;

	assert_int_equal(read_file_max(path, 1 << 20, &text, NULL), 0);
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		uint64_t v;
		if (parse_u64(line, &v) < 0 || v != (uint64_t)want)
			fail_msg("the counter wrote %s where %ld was due", line, want);
		want++;
	}
}

/* Whether the sandbox's audit trail has a record of type. */
static bool
has_record(const char *sock, const char *id, const char *type)
{
	char path[128];
	bool found = false;
	json_t *j, *ev;
	size_t i;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", id);
	j = harness_json(sock, "GET", path, NULL, 200);
	json_array_foreach (json_object_get(j, "events"), i, ev)
		found = found || streq(harness_str(ev, "type") ?: "", type);
	json_decref(j);
	return found;
}

static char *
fake_file(const struct daemon_proc *d, const char *id)
{
	char path[512];
	_cleanup_free_ char *text = NULL;

	snprintf(path, sizeof(path), "%s/fake/%s", d->state, id);
	if (read_file_max(path, 64, &text, NULL) < 0)
		return strdup("");
	return TAKE_PTR(text);
}

/* A process counting (a line a tick into a file) is frozen while its sandbox is suspended and
 * carries on from its count after the resume: nothing lost, nothing repeated. The states and
 * the audit trail say what happened; the backend holds the VM as suspended. */
static void
test_suspend_resume_keeps_the_counter(void **state)
{
	char id[64], file[400], body[800], *text;
	long before, frozen, pid;
	json_t *j;

	(void)state;
	snprintf(file, sizeof(file), "%s/count-%d", home, (int)getpid());
	create(p.sock, "{}", id);
	snprintf(body, sizeof(body),
	         "{\"argv\":[\"sh\",\"-c\",\"i=0; while :; do echo $i >> %s; i=$((i+1)); "
	         "sleep 0.1; done\"]}",
	         file);
	pid = start_process(p.sock, id, body);
	usleep(500000);

	post(p.sock, id, "suspend", 200, "suspended");
	text = fake_file(&p, id);
	assert_string_equal(text, "suspended");
	free(text);
	before = count_lines(file);
	assert_true(before > 0);
	usleep(600000);
	frozen = count_lines(file);
	assert_int_equal(frozen, before); /* frozen, not running on */
	/* there already: the same answer; a start is not a resume */
	post(p.sock, id, "suspend", 200, "suspended");
	post(p.sock, id, "start", 409, NULL);
	/* suspended: given (it counts), not running */
	j = harness_json(p.sock, "GET", "/v1/node", NULL, 200);
	assert_int_equal(
	        json_integer_value(json_object_get(json_object_get(j, "allocated"), "sandboxes")),
	        1);
	assert_int_equal(
	        json_integer_value(json_object_get(json_object_get(j, "allocated"), "running")), 0);
	json_decref(j);

	post(p.sock, id, "resume", 200, "running");
	post(p.sock, id, "resume", 200, "running");
	await_count(file, frozen + 2);
	expect_consecutive(file);
	/* the process is the same one, still running */
	snprintf(body, sizeof(body), "/v1/sandboxes/%s/processes/%ld", id, pid);
	j = harness_json(p.sock, "GET", body, NULL, 200);
	assert_string_equal(harness_str(j, "state"), "running");
	json_decref(j);

	assert_true(has_record(p.sock, id, "sandbox.suspended"));
	assert_true(has_record(p.sock, id, "sandbox.resumed"));
	assert_true(harness_file_contains(p.log, "running -> suspending"));
	assert_true(harness_file_contains(p.log, "suspending -> suspended"));
	assert_true(harness_file_contains(p.log, "suspended -> resuming"));
	assert_true(harness_file_contains(p.log, "resuming -> running"));
	snprintf(body, sizeof(body), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p.sock, "DELETE", body, NULL, 204));
}

/* The states it cannot be suspended or resumed from answer 409 (one there already: 200); a stop of
 * a suspended sandbox drops its memory (stopped, disk kept), a delete ends it; a sandbox nobody has
 * is 404. */
static void
test_conflicts_stop_and_delete(void **state)
{
	char id[64], path[128];
	char *text;

	(void)state;
	create(p.sock, "{}", id);
	post(p.sock, id, "resume", 200, "running"); /* running already: nothing to do */
	post(p.sock, id, "stop", 200, "stopped");
	post(p.sock, id, "suspend", 409, NULL);
	post(p.sock, id, "resume", 409, NULL);
	post(p.sock, id, "start", 200, "running");
	post(p.sock, id, "suspend", 200, "suspended");
	post(p.sock, id, "stop", 200, "stopped");
	text = fake_file(&p, id);
	assert_string_equal(text, "stopped");
	free(text);
	post(p.sock, id, "start", 200, "running");
	post(p.sock, id, "suspend", 200, "suspended");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	expect_state(p.sock, id, "terminated");
	post(p.sock, "sbx_0123456789abcdef", "suspend", 404, NULL);
}

/* A resume that cannot restore leaves it suspended with the reason (503), its state kept for
 * another try; a stop still works. */
static void
test_failed_resume_stays_suspended(void **state)
{
	char id[64];
	json_t *j;

	(void)state;
	create(p.sock, "{\"image\":\"fake/fail-resume\"}", id);
	post(p.sock, id, "suspend", 200, "suspended");
	post(p.sock, id, "resume", 503, NULL);
	j = get_sandbox(p.sock, id);
	assert_string_equal(harness_str(j, "state"), "suspended");
	assert_non_null(strstr(harness_str(j, "reason") ?: "", "resuming failed"));
	json_decref(j);
	post(p.sock, id, "stop", 200, "stopped");
}

/* Idle past its timeout, a sandbox suspends by default (the fake can) and says why; a request
 * that needs its guest (a run, a file read, a process list) resumes it first and is served. */
static void
test_idle_suspends_and_use_wakes(void **state)
{
	char id[64], path[512], file[400], body[600];
	char *text = NULL;
	json_t *j;

	(void)state;
	snprintf(file, sizeof(file), "%s/woken-%d", home, (int)getpid());
	create(p.sock, "{\"idle_timeout_secs\":1}", id);
	j = get_sandbox(p.sock, id);
	assert_string_equal(harness_str(j, "idle_action"), "suspend");
	json_decref(j);
	j = await_state(p.sock, id, "suspended");
	assert_non_null(strstr(harness_str(j, "reason") ?: "", "idle"));
	json_decref(j);
	assert_true(has_record(p.sock, id, "sandbox.suspended"));
	assert_true(harness_file_contains(p.log, "its idle timeout; suspending it"));

	/* a run resumes it */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	snprintf(body, sizeof(body), "{\"argv\":[\"sh\",\"-c\",\"echo woken > %s\"]}", file);
	j = harness_json(p.sock, "POST", path, body, 200);
	assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), 0);
	json_decref(j);
	expect_state(p.sock, id, "running");

	/* a file read does */
	post(p.sock, id, "suspend", 200, "suspended");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/files?path=%s", id, file);
	assert_int_equal(harness_http(p.sock, "GET", path, NULL, &text), 200);
	assert_string_equal(text, "woken\n");
	free(text);
	expect_state(p.sock, id, "running");

	/* a process list does */
	post(p.sock, id, "suspend", 200, "suspended");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	json_decref(harness_json(p.sock, "GET", path, NULL, 200));
	expect_state(p.sock, id, "running");
	assert_true(harness_file_contains(p.log, "resuming it for a request that needs its guest"));

	/* a PATCH of a suspended one changes it and leaves it suspended */
	post(p.sock, id, "suspend", 200, "suspended");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	j = harness_json(p.sock, "PATCH", path, "{\"idle_action\":\"stop\"}", 200);
	assert_string_equal(harness_str(j, "state"), "suspended");
	json_decref(j);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
}

/* With --keep-sandboxes a suspended sandbox stays suspended across a restart of sandboxd and
 * resumes after it, its kept process running on and followed again; without the flag, a stop
 * of sandboxd ends it like any other. */
static void
test_keep_sandboxes_restart(void **state)
{
	static const char *const keep[] = { "--keep-sandboxes", NULL };
	const char *bin = harness_binary("SANDBOXD_FAKE");
	const char *const env[] = { env_agent, NULL };
	struct daemon_proc k = { 0 };
	char id[64], file[400], body[800], *text;
	long before, pid;
	json_t *j;

	(void)state;
	snprintf(file, sizeof(file), "%s/kept-%d", home, (int)getpid());
	assert_int_equal(harness_start(&k, bin, keep, env), 0);
	create(k.sock, "{}", id);
	snprintf(body, sizeof(body),
	         "{\"argv\":[\"sh\",\"-c\",\"i=0; while :; do echo $i >> %s; i=$((i+1)); "
	         "sleep 0.1; done\"],\"keep\":true}",
	         file);
	pid = start_process(k.sock, id, body);
	usleep(400000);
	post(k.sock, id, "suspend", 200, "suspended");
	before = count_lines(file);

	assert_int_equal(harness_stop(&k, SIGTERM), 0);
	assert_int_equal(harness_restart(&k, bin, keep, env), 0);
	expect_state(k.sock, id, "suspended");
	text = fake_file(&k, id);
	assert_string_equal(text, "suspended");
	free(text);
	assert_int_equal(count_lines(file), before);

	post(k.sock, id, "resume", 200, "running");
	/* the kept process is listed again once the guest answered, and counts on */
	for (int i = 0; i < 100; i++) {
		bool found = false;
		json_t *e;
		size_t n;
		snprintf(body, sizeof(body), "/v1/sandboxes/%s/processes", id);
		j = harness_json(k.sock, "GET", body, NULL, 200);
		json_array_foreach (json_object_get(j, "processes"), n, e)
			found = found || json_integer_value(json_object_get(e, "pid")) == pid;
		json_decref(j);
		if (found)
			break;
		assert_true(i < 99);
		usleep(50000);
	}
	await_count(file, before + 2);
	expect_consecutive(file);

	/* without the flag: ended at the stop */
	post(k.sock, id, "suspend", 200, "suspended");
	assert_int_equal(harness_stop(&k, SIGTERM), 0);
	assert_int_equal(harness_restart(&k, bin, NULL, env), 0);
	expect_state(k.sock, id, "terminated");
	assert_int_equal(harness_stop(&k, SIGTERM), 0);
	harness_cleanup(&k);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_suspend_resume_keeps_the_counter),
		cmocka_unit_test(test_conflicts_stop_and_delete),
		cmocka_unit_test(test_failed_resume_stays_suspended),
		cmocka_unit_test(test_idle_suspends_and_use_wakes),
		cmocka_unit_test(test_keep_sandboxes_restart),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
