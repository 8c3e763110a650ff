/* test-vm-idle.c: the idle timeout on real microVMs. A guest busy on its CPU, unwatched and
 * silent, is not idle (its VMM's CPU time, read on the host, says it works); once it is
 * done, the sandbox stops and keeps its files. idle_action terminate ends it instead, and an
 * open output stream keeps a silent one running. A stopped sandbox's file is read back from
 * its disk by booting it, and it is stopped again after --read-grace. (sandbox-cli run's
 * binding on real VMs is in tests/cli/test-cli-vm.c.) */
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

static int
setup(void **state)
{
	return harness_start_vm(&p, (const char *const[]){ "--read-grace", "3", NULL }, NULL);
}

static int
teardown(void **state)
{
	int del = harness_delete_all(p.sock);
	int rc = harness_stop(&p, SIGTERM);

	harness_cleanup(&p);
	return rc == 0 && del == 0 ? 0 : -1;
}

static void
create(const char *body, char id[static 64])
{
	json_t *j = harness_json_timeout(p.sock, "POST", "/v1/sandboxes", body, 120000, 201);

	if (!streq(harness_str(j, "state") ?: "", "running"))
		fail_msg("the sandbox did not boot: %s", harness_str(j, "reason"));
	snprintf(id, 64, "%s", harness_str(j, "id"));
	json_decref(j);
}

/* GET of the sandbox: reading it is not activity. */
static json_t *
get_sandbox(const char *id)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	return harness_json(p.sock, "GET", path, NULL, 200);
}

static const char *
state_of(json_t *j)
{
	return harness_str(j, "state") ?: "";
}

/* Polls (GET, every 500 ms) until the sandbox reaches want, up to limit_s. */
static json_t *
await_state(const char *id, const char *want, int limit_s)
{
	for (int i = 0; i < limit_s * 2; i++) {
		json_t *j = get_sandbox(id);
		if (streq(state_of(j), want))
			return j;
		json_decref(j);
		usleep(500000);
	}
	fail_msg("sandbox %s was not %s within %d s", id, want, limit_s);
	return NULL;
}

static long
start_process(const char *id, const char *body)
{
	char path[128];
	json_t *j;
	long pid;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	j = harness_json(p.sock, "POST", path, body, 201);
	pid = (long)json_integer_value(json_object_get(j, "pid"));
	json_decref(j);
	assert_true(pid > 0);
	return pid;
}

/* Writes a file as the guest's own processes do: POST …/run. */
static void
write_file(const char *id, const char *guest_path, const char *text)
{
	char path[128], body[512];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	snprintf(body, sizeof(body),
	         "{\"argv\":[\"sh\",\"-c\",\"printf '%%s\\\\n' \\\"$0\\\" > %s\",\"%s\"]}",
	         guest_path, text);
	j = harness_json_timeout(p.sock, "POST", path, body, 60000, 200);
	assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), 0);
	json_decref(j);
}

static char *
get_file(const char *id, const char *guest_path)
{
	char path[256], *body = NULL;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/files?path=%s", id, guest_path);
	assert_int_equal(harness_http(p.sock, "GET", path, NULL, &body), 200);
	return body;
}

/* The Done-when of issue 14: idle_timeout_secs 5, a busy loop for 30 s, unwatched and silent:
 * still running at its end; then nothing for 5 s (and the check's own window): stopped, and
 * the files written before are there when it starts again. */
static void
test_busy_guest_is_not_idle_and_its_files_survive(void **state)
{
	char id[64], path[160], *text;
	json_t *j;

	create("{\"idle_timeout_secs\":5,\"idle_action\":\"stop\"}", id);
	write_file(id, "/sandbox/home/work.txt", "the work of an afternoon");
	/* the daemon kills the loop after 30 s: nothing but its CPU speaks for the sandbox */
	start_process(id, "{\"argv\":[\"sh\",\"-c\",\"while :; do :; done\"],\"timeout_secs\":30}");
	for (int i = 0; i < 6; i++) {
		sleep(5);
		j = get_sandbox(id);
		if (!streq(state_of(j), "running"))
			fail_msg("a busy sandbox was taken for idle after %d s: %s (%s)",
			         (i + 1) * 5, state_of(j), harness_str(j, "reason") ?: "");
		json_decref(j);
	}
	/* the loop ends at 30 s; 5 s of nothing, then the next window of the check */
	j = await_state(id, "stopped", 60);
	assert_non_null(strstr(harness_str(j, "reason"), "idle"));
	json_decref(j);

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", id);
	json_decref(harness_json_timeout(p.sock, "POST", path, NULL, 120000, 200));
	text = get_file(id, "/sandbox/home/work.txt");
	assert_string_equal(text, "the work of an afternoon\n");
	free(text);
}

/* idle_action terminate: the sandbox ends, disk and all. */
static void
test_idle_action_terminate(void **state)
{
	char id[64];
	json_t *j;

	create("{\"idle_timeout_secs\":3,\"idle_action\":\"terminate\"}", id);
	j = await_state(id, "terminated", 60);
	assert_non_null(strstr(harness_str(j, "reason"), "idle"));
	json_decref(j);
}

/* A silent, idle process whose output stream a client holds open: the stream keeps the
 * sandbox running past its idle timeout; the process ends on its own (exit 0, not the 137 of
 * a stop). */
static void
test_open_stream_keeps_it_running(void **state)
{
	char id[64], path[160], *buf = NULL;
	size_t len = 0;
	long pid;
	int fd;

	create("{\"idle_timeout_secs\":3,\"idle_action\":\"stop\"}", id);
	pid = start_process(id, "{\"argv\":[\"sleep\",\"15\"]}");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%ld/output", id, pid);
	fd = harness_stream_open(p.sock, "GET", path, NULL);
	assert_true(fd >= 0);
	(void)harness_stream_read(fd, 60000, "exit_code", &buf, &len);
	if (!strstr(buf ?: "", "{\"exit_code\":0}"))
		fail_msg("the process did not end on its own:\n%s", buf ?: "");
	free(buf);
	close(fd);
	json_decref(await_state(id, "stopped", 60));
}

/* A file written in a sandbox that was then stopped (the guest synced it on the way down) is
 * read back: the read boots it, its guest answers, and it is stopped again, saying why. */
static void
test_stopped_sandbox_file_is_read_back(void **state)
{
	char id[64], path[160], *body = NULL;
	json_t *j;

	create("{}", id);
	write_file(id, "/sandbox/home/kept.txt", "written before the stop");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", id);
	json_decref(harness_json_timeout(p.sock, "POST", path, NULL, 120000, 200));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/files?path=/sandbox/home/kept.txt", id);
	assert_int_equal(harness_http_timeout(p.sock, "GET", path, NULL, 120000, &body), 200);
	assert_string_equal(body, "written before the stop\n");
	free(body);
	j = await_state(id, "stopped", 60);
	assert_non_null(strstr(harness_str(j, "reason") ?: "", "started to read its files"));
	json_decref(j);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_busy_guest_is_not_idle_and_its_files_survive),
		cmocka_unit_test(test_idle_action_terminate),
		cmocka_unit_test(test_open_stream_keeps_it_running),
		cmocka_unit_test(test_stopped_sandbox_file_is_read_back),
	};

	harness_vm_bundle(); /* skips (77) when there is no bundle */
	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
