/* test-idle.c: what the idle timeout and a client-bound sandbox do, on the fake backend whose
 * agent is sandbox-guestd in test mode (its processes run here): an idle sandbox stops with
 * its disk kept and says why (its reason, the audit trail, the live stream, the log), or ends
 * when its idle_action says terminate; a process writing output, a stream of one of its
 * processes and an event stream for it keep it running; a sandbox bound to its client ends
 * once no stream or request of it came for --client-grace, and sandbox-cli run binds its
 * sandbox unless --keep. The VMM's CPU counts too: that needs a real VM (tests/vm). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define GRACE "2" /* --client-grace */
#define GRACE_S 2

extern char **environ;

static struct daemon_proc p;
static char home[256];

static int
setup(void **state)
{
	const char *guestd = harness_need_guestd();

	if (harness_tmpdir(home, sizeof(home)) < 0)
		return -1;
	setenv("HOME", home, 1);
	unsetenv("SANDBOX_CONTEXT");
	unsetenv("SANDBOX_ENDPOINT");
	unsetenv("SANDBOX_TOKEN");
	return harness_start_fake_agent(
	        &p, guestd, (const char *const[]){ "--client-grace", GRACE, NULL }, NULL);
}

static int
teardown(void **state)
{
	int rc;

	(void)harness_delete_all(p.sock);
	rc = harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
	if (harness_rmtree(home) < 0)
		return -1;
	return rc == 0 ? 0 : -1;
}

static json_t *
get_sandbox(const char *id)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	return harness_json(p.sock, "GET", path, NULL, 200);
}

static bool
is_state(const char *id, const char *want)
{
	json_t *j = get_sandbox(id);
	bool yes = streq(harness_str(j, "state") ?: "", want);

	json_decref(j);
	return yes;
}

/* Polls until the sandbox reaches want (or 30 s pass); returns the object. */
static json_t *
await_state(const char *id, const char *want)
{
	for (int i = 0; i < 300; i++) {
		json_t *j = get_sandbox(id);
		if (streq(harness_str(j, "state") ?: "", want))
			return j;
		json_decref(j);
		usleep(100000);
	}
	fail_msg("sandbox %s never reached %s", id, want);
	return NULL;
}

/* The sandbox's audit record of type, as compact JSON (caller frees), or NULL. */
static char *
audit_record(const char *id, const char *type)
{
	char path[128], *found = NULL;
	json_t *j, *ev;
	size_t i;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", id);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	json_array_foreach (json_object_get(j, "events"), i, ev)
		if (!found && streq(harness_str(ev, "type") ?: "", type))
			found = json_dumps(ev, JSON_COMPACT);
	json_decref(j);
	return found;
}

static void
create(const char *body, char id[static 64])
{
	json_t *j = harness_json(p.sock, "POST", "/v1/sandboxes", body, 201);

	assert_string_equal(harness_str(j, "state"), "running");
	snprintf(id, 64, "%s", harness_str(j, "id"));
	json_decref(j);
}

/* Starts argv (a JSON array) in the sandbox without reading its output; returns its pid. */
static long
start_process(const char *id, const char *argv_json)
{
	char path[128], body[512];
	json_t *j;
	long pid;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	snprintf(body, sizeof(body), "{\"argv\":%s}", argv_json);
	j = harness_json(p.sock, "POST", path, body, 201);
	pid = (long)json_integer_value(json_object_get(j, "pid"));
	json_decref(j);
	assert_true(pid > 0);
	return pid;
}

/* Waits (up to 60 s) until process pid of the sandbox has exited; returns its exit code.
 * Each GET is a request about the sandbox, which is activity: callers that must not touch
 * it read the process's output stream instead. */
static long
await_exit(const char *id, long pid)
{
	char path[160];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%ld", id, pid);
	for (int i = 0; i < 600; i++) {
		json_t *j = harness_json(p.sock, "GET", path, NULL, 200);
		if (!streq(harness_str(j, "state") ?: "", "running")) {
			long code = (long)json_integer_value(json_object_get(j, "exit_code"));
			json_decref(j);
			return code;
		}
		json_decref(j);
		usleep(100000);
	}
	fail_msg("process %ld of %s never exited", pid, id);
	return -1;
}

/* ---- the idle timeout ---- */

/* Idle past its timeout, a sandbox stops with its disk kept, and says so everywhere a user
 * looks: its reason, the audit trail, the live stream and the log; it starts again. */
static void
test_idle_stops_and_keeps_the_disk(void **state)
{
	char id[64], path[160], *rec, *buf = NULL;
	size_t len = 0;
	json_t *j;
	int fd;

	/* the stream of every sandbox watches none of them: it does not keep this one up */
	fd = harness_stream_open(p.sock, "GET", "/v1/events/stream", NULL);
	assert_true(fd >= 0);
	create("{\"idle_timeout_secs\":1,\"idle_action\":\"stop\"}", id);
	j = get_sandbox(id);
	assert_string_equal(harness_str(j, "idle_action"), "stop");
	json_decref(j);
	j = await_state(id, "stopped");
	assert_non_null(strstr(harness_str(j, "reason"), "idle"));
	assert_non_null(strstr(harness_str(j, "reason"), "disk is kept"));
	json_decref(j);

	rec = audit_record(id, "sandbox.stopped");
	assert_non_null(rec);
	assert_non_null(strstr(rec, "\"reason\":\"idle\""));
	free(rec);
	assert_null(audit_record(id, "sandbox.terminated"));
	(void)harness_stream_read(fd, 5000, "\"stop\":\"idle\"", &buf, &len);
	if (!strstr(buf ?: "", "\"to\":\"stopped\""))
		fail_msg("the live stream did not say it stopped for idleness:\n%s", buf ?: "");
	free(buf);
	close(fd);
	assert_true(harness_file_contains(p.log, "its idle timeout; stopping it, its disk kept"));

	/* stopped, not ended: it starts again */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", id);
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	assert_true(is_state(id, "running"));
}

/* idle_action terminate ends it, disk and all, as before; where the backend suspends (the
 * fake does), "suspend" is the default (test-suspend.c has what it does). */
static void
test_idle_action_terminate(void **state)
{
	char id[64], *rec;
	json_t *j;

	create("{}", id);
	j = get_sandbox(id);
	assert_string_equal(harness_str(j, "idle_action"), "suspend");
	json_decref(j);

	create("{\"idle_timeout_secs\":1,\"idle_action\":\"terminate\"}", id);
	j = await_state(id, "terminated");
	assert_non_null(strstr(harness_str(j, "reason"), "idle"));
	json_decref(j);
	rec = audit_record(id, "sandbox.terminated");
	assert_non_null(rec);
	assert_non_null(strstr(rec, "\"reason\":\"idle\""));
	free(rec);
	assert_null(audit_record(id, "sandbox.stopped"));
}

/* A PATCH sets the action too. */
static void
test_patch_idle_action(void **state)
{
	char id[64], path[128];
	json_t *j;

	create("{}", id);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	j = harness_json(p.sock, "PATCH", path, "{\"idle_action\":\"terminate\"}", 200);
	assert_string_equal(harness_str(j, "idle_action"), "terminate");
	json_decref(j);
	j = harness_json(p.sock, "PATCH", path, "{\"idle_action\":\"later\"}", 400);
	json_decref(j);
	j = get_sandbox(id);
	assert_string_equal(harness_str(j, "idle_action"), "terminate");
	json_decref(j);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
}

/* A process that writes output is at work, though nobody watches it: the sandbox runs until
 * it ends (exit 0, not killed by a stop), then idles out. */
static void
test_output_keeps_it_running(void **state)
{
	char id[64];
	long pid;

	create("{\"idle_timeout_secs\":2,\"idle_action\":\"stop\"}", id);
	pid = start_process(
	        id, "[\"sh\",\"-c\",\"for i in 1 2 3 4 5 6 7 8; do echo tick; sleep 1; done\"]");
	/* nothing about the sandbox is asked meanwhile (a GET counts as activity) */
	sleep(9);
	assert_int_equal(await_exit(id, pid), 0);
	json_decref(await_state(id, "stopped"));
}

/* A silent process with its output stream open: the stream keeps the sandbox running; once
 * it ends, the sandbox idles out. */
static void
test_open_stream_keeps_it_running(void **state)
{
	char id[64], path[160], *buf = NULL;
	size_t len = 0;
	long pid;
	int fd;

	create("{\"idle_timeout_secs\":1,\"idle_action\":\"stop\"}", id);
	pid = start_process(id, "[\"sleep\",\"5\"]");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%ld/output", id, pid);
	fd = harness_stream_open(p.sock, "GET", path, NULL);
	assert_true(fd >= 0);
	/* a stop would end it with 137 */
	(void)harness_stream_read(fd, 20000, "exit_code", &buf, &len);
	if (!strstr(buf ?: "", "{\"exit_code\":0}"))
		fail_msg("the process did not end on its own:\n%s", buf ?: "");
	free(buf);
	close(fd);
	json_decref(await_state(id, "stopped"));
}

/* An event stream for the sandbox keeps it running; one for another does not. */
static void
test_event_stream_for_it_keeps_it_running(void **state)
{
	char id[64], path[160], *buf = NULL;
	size_t len = 0;
	json_t *j;
	int fd;

	j = harness_json(p.sock, "GET", "/v1/events/stream?sandbox=sbx_00000000000000ff", NULL,
	                 404);
	json_decref(j);
	create("{\"idle_timeout_secs\":1,\"idle_action\":\"stop\"}", id);
	snprintf(path, sizeof(path), "/v1/events/stream?sandbox=%s", id);
	fd = harness_stream_open(p.sock, "GET", path, NULL);
	assert_true(fd >= 0);
	(void)harness_stream_read(fd, 4000, NULL, &buf, &len);
	assert_true(is_state(id, "running"));
	close(fd);
	free(buf);
	json_decref(await_state(id, "stopped"));
}

/* ---- a sandbox bound to its client ---- */

/* Bound: a lifetime of a day; it runs while a stream of it is open, and ends once none was
 * for the grace, with the reason; unbinding it (PATCH) keeps it. */
static void
test_bound_sandbox_ends_when_its_client_goes(void **state)
{
	char id[64], kept[64], path[160], *rec, *buf = NULL;
	size_t len = 0;
	json_t *j;
	long pid;
	int fd;

	j = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"bound_to_client\":true}", 201);
	assert_true(json_is_true(json_object_get(j, "bound_to_client")));
	assert_int_equal(json_integer_value(json_object_get(j, "lifetime_secs")), 86400);
	snprintf(id, sizeof(id), "%s", harness_str(j, "id"));
	json_decref(j);
	create("{\"bound_to_client\":true}", kept);

	pid = start_process(id, "[\"sleep\",\"600\"]");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%ld/output", id, pid);
	fd = harness_stream_open(p.sock, "GET", path, NULL);
	assert_true(fd >= 0);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", kept);
	j = harness_json(p.sock, "PATCH", path, "{\"bound_to_client\":false}", 200);
	assert_false(json_is_true(json_object_get(j, "bound_to_client")));
	json_decref(j);
	/* twice the grace with the stream open */
	(void)harness_stream_read(fd, 2 * GRACE_S * 1000 + 500, NULL, &buf, &len);
	free(buf);
	assert_true(is_state(id, "running"));
	/* the client goes */
	close(fd);
	j = await_state(id, "terminated");
	assert_non_null(strstr(harness_str(j, "reason"), "client went away"));
	json_decref(j);
	rec = audit_record(id, "sandbox.terminated");
	assert_non_null(strstr(rec, "\"reason\":\"client\""));
	free(rec);
	assert_true(is_state(kept, "running"));
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
}

/* ---- sandbox-cli run ---- */

static pid_t
spawn_cli(const char *const *args)
{
	const char *argv[32];
	char endpoint[320];
	size_t n = 0;
	pid_t pid;
	posix_spawn_file_actions_t fa;

	snprintf(endpoint, sizeof(endpoint), "unix://%s", p.sock);
	argv[n++] = harness_binary("SANDBOX_CLI");
	argv[n++] = "--endpoint";
	argv[n++] = endpoint;
	for (size_t i = 0; args[i] && n < ARRAY_SIZE(argv) - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, (char **)argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

/* The id of the newest sandbox once its process runs (up to 30 s). */
static void
await_running_process(char id[static 64])
{
	for (int i = 0; i < 300; i++) {
		json_t *list =
		        harness_json(p.sock, "GET", "/v1/sandboxes?state=running", NULL, 200);
		json_t *sb = json_array_get(json_object_get(list, "sandboxes"), 0);
		char path[160];
		json_t *procs;
		bool found = false;

		if (sb) {
			snprintf(id, 64, "%s", harness_str(sb, "id"));
			snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
			procs = harness_json(p.sock, "GET", path, NULL, 200);
			found = json_array_size(json_object_get(procs, "processes")) > 0;
			json_decref(procs);
		}
		json_decref(list);
		if (found)
			return;
		usleep(100000);
	}
	fail_msg("sandbox-cli run never got its process running");
}

/* A run whose client is killed (kill -9: it cannot clean up) leaves no sandbox behind; with
 * --keep, the sandbox stays. */
static void
test_cli_run_killed(void **state)
{
	char id[64], kept[64];
	json_t *j;
	pid_t cli;

	assert_int_equal(harness_delete_all(p.sock), 0);
	cli = spawn_cli((const char *const[]){ "run", "--", "sleep", "600", NULL });
	await_running_process(id);
	j = get_sandbox(id);
	assert_true(json_is_true(json_object_get(j, "bound_to_client")));
	assert_int_equal(json_integer_value(json_object_get(j, "lifetime_secs")), 86400);
	json_decref(j);
	assert_int_equal(kill(cli, SIGKILL), 0);
	assert_int_equal(waitpid(cli, NULL, 0), cli);
	j = await_state(id, "terminated");
	assert_non_null(strstr(harness_str(j, "reason"), "client went away"));
	json_decref(j);

	cli = spawn_cli((const char *const[]){ "run", "--keep", "--", "sleep", "600", NULL });
	await_running_process(kept);
	j = get_sandbox(kept);
	assert_false(json_is_true(json_object_get(j, "bound_to_client")));
	assert_int_equal(json_integer_value(json_object_get(j, "lifetime_secs")), 0);
	json_decref(j);
	assert_int_equal(kill(cli, SIGKILL), 0);
	assert_int_equal(waitpid(cli, NULL, 0), cli);
	sleep(2 * GRACE_S + 1);
	assert_true(is_state(kept, "running"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_stops_and_keeps_the_disk),
		cmocka_unit_test(test_idle_action_terminate),
		cmocka_unit_test(test_patch_idle_action),
		cmocka_unit_test(test_output_keeps_it_running),
		cmocka_unit_test(test_open_stream_keeps_it_running),
		cmocka_unit_test(test_event_stream_for_it_keeps_it_running),
		cmocka_unit_test(test_bound_sandbox_ends_when_its_client_goes),
		cmocka_unit_test(test_cli_run_killed),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
