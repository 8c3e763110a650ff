/* test-files-stopped.c: reading the files of a sandbox that is not running, on the fake backend
 * whose agent is sandbox-guestd in test mode (its files are real ones here, under a directory
 * of the test's own). A read or a listing of a stopped sandbox, or of a failed one whose disk
 * outlived its crash, boots it, answers from its guest, and the sandbox is stopped again once
 * nothing else used it for --read-grace, saying why; reads that come during that boot share
 * it; a start by its user or a process of its own keeps it up; writes and removals stay 409;
 * a boot that fails is 503 with its reason; another user's sandbox stays 404 and is not
 * booted. That a real VM's disk is read back the
 * same way is tests/vm/test-vm-idle.c's. */
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
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define GRACE "2" /* --read-grace */
#define GRACE_S 2

static struct daemon_proc p;
static char home[256];   /* the files the guest reads and writes live under it */
static char guestd[300]; /* the fake's agent: a copy, so that a test can take it away */

static int
setup(void **state)
{
	const char *agent = harness_need_guestd();
	char cmd[1024];

	if (harness_tmpdir(home, sizeof(home)) < 0)
		return -1;
	snprintf(guestd, sizeof(guestd), "%s/sandbox-guestd", home);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", agent, guestd);
	if (system(cmd) != 0)
		return -1;
	/* a boot of a second lets two reads meet while it is under way */
	return harness_start_fake_agent(
	        &p, guestd, (const char *const[]){ "--read-grace", GRACE, NULL },
	        (const char *const[]){ "SANDBOXD_FAKE_BOOT_MS=1000", NULL });
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

static char *
state_of(const char *id)
{
	json_t *j = get_sandbox(id);
	char *s = strdup(harness_str(j, "state") ?: "");

	json_decref(j);
	return s;
}

/* Polls until the sandbox reaches want (or 30 s pass); returns the object. A GET of the
 * sandbox is no activity: it does not keep a sandbox up. */
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

static void
create(const char *body, char id[static 64])
{
	json_t *j = harness_json(p.sock, "POST", "/v1/sandboxes", body, 201);

	snprintf(id, 64, "%s", harness_str(j, "id"));
	json_decref(j);
}

static void
post(const char *id, const char *verb, const char *want_state)
{
	char path[128];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, verb);
	j = harness_json(p.sock, "POST", path, NULL, 200);
	assert_string_equal(harness_str(j, "state"), want_state);
	json_decref(j);
}

/* A request for a file (kind "files") or a listing ("dirs") of the sandbox. */
static char *
file_path(const char *id, const char *kind, const char *path)
{
	return strdup_printf("/v1/sandboxes/%s/%s?path=%s", id, kind, path);
}

/* PUT bytes as the file at path; returns the status. */
static int
put_file(const char *id, const char *path, const char *bytes)
{
	_cleanup_free_ char *req =
	        strdup_printf("PUT /v1/sandboxes/%s/files?path=%s HTTP/1.1\r\nHost: localhost\r\n"
	                      "Content-Type: application/octet-stream\r\nContent-Length: %zu\r\n"
	                      "Connection: close\r\n\r\n%s",
	                      id, path, strlen(bytes), bytes);
	char *resp = NULL;
	int status = -1;

	if (harness_raw(p.sock, 0, req, strlen(req), &resp, 30000) > 0)
		sscanf(resp, "HTTP/1.1 %d", &status);
	free(resp);
	return status;
}

/* The types of the sandbox's audit records after the first skip, file records left out,
 * joined by spaces, each with its reason ("sandbox.stopped:read"). Caller frees. */
static char *
trail_after(const char *id, int skip)
{
	char path[128];
	_cleanup_buf_ struct buf out = BUF_INIT(1u << 20);
	json_t *j, *ev;
	size_t i;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", id);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	json_array_foreach (json_object_get(j, "events"), i, ev) {
		const char *type = harness_str(ev, "type") ?: "";
		if ((int)i < skip || str_has_prefix(type, "file."))
			continue;
		(void)buf_printf(&out, "%s%s", out.len ? " " : "", type);
		if (harness_str(ev, "reason"))
			(void)buf_printf(&out, ":%s", harness_str(ev, "reason"));
	}
	json_decref(j);
	return strndup(out.data ?: "", out.len);
}

/* How many audit records the sandbox has. */
static int
trail_length(const char *id)
{
	char path[128];
	json_t *j;
	int n;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", id);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	n = (int)json_array_size(json_object_get(j, "events"));
	json_decref(j);
	return n;
}

/* How many times the fake was asked to boot the sandbox's layer again. */
static int
restarts(const char *id)
{
	_cleanup_free_ char *calls = strdup_printf("%s/fake/calls.log", p.state);
	_cleanup_free_ char *line = strdup_printf("restart %s\n", id);
	_cleanup_free_ char *text = NULL;
	int n = 0;

	assert_int_equal(read_file_max(calls, 1u << 20, &text, NULL), 0);
	for (const char *s = text; (s = strstr(s, line)); s += strlen(line))
		n++;
	return n;
}

/* A stopped sandbox's file and directory are read from its guest, booted for them; once
 * nothing else used it for the grace it is stopped again, and says so in its reason, its
 * audit trail and the log. */
static void
test_read_of_a_stopped_sandbox(void **state)
{
	_cleanup_free_ char *dir = strdup_printf("%s/stopped", home);
	_cleanup_free_ char *file = strdup_printf("%s/notes.txt", dir);
	_cleanup_free_ char *url = NULL, *body = NULL, *trail = NULL;
	const char *bytes = "written before the stop\n\x01\xfe\n";
	char id[64];
	json_t *j;
	int mark;

	create("{}", id);
	assert_int_equal(put_file(id, file, bytes), 204);
	post(id, "stop", "stopped");
	mark = trail_length(id);

	url = file_path(id, "files", file);
	assert_int_equal(harness_http(p.sock, "GET", url, NULL, &body), 200);
	assert_string_equal(body, bytes);
	/* it runs for the read, then goes back */
	j = await_state(id, "stopped");
	assert_non_null(strstr(harness_str(j, "reason") ?: "", "started to read its files"));
	assert_non_null(strstr(harness_str(j, "reason") ?: "", "stopped again"));
	json_decref(j);
	trail = trail_after(id, mark);
	assert_string_equal(trail, "sandbox.started sandbox.stopped:read");
	assert_true(harness_file_contains(p.log, "starting it to read its files"));
	assert_true(harness_file_contains(p.log, "nothing else used it for " GRACE " s"));

	/* a listing too */
	free(url);
	free(body);
	body = NULL;
	url = file_path(id, "dirs", dir);
	j = harness_json(p.sock, "GET", url, NULL, 200);
	assert_string_equal(harness_str(json_array_get(json_object_get(j, "entries"), 0), "name"),
	                    "notes.txt");
	json_decref(j);
	json_decref(await_state(id, "stopped"));

	/* a file that is not there is 404, as in a running sandbox */
	free(url);
	url = file_path(id, "files", "/nonexistent/sandboxd-test");
	json_decref(harness_json(p.sock, "GET", url, NULL, 404));
	json_decref(await_state(id, "stopped"));
}

/* Writes and removals do not boot it: 409, saying to start it, and it stays stopped. So do
 * processes. */
static void
test_writes_to_a_stopped_sandbox_stay_409(void **state)
{
	_cleanup_free_ char *file = strdup_printf("%s/refused.txt", home);
	_cleanup_free_ char *url = NULL, *st = NULL;
	char id[64], path[128];
	json_t *j;

	create("{}", id);
	post(id, "stop", "stopped");
	assert_int_equal(put_file(id, file, "no"), 409);
	url = file_path(id, "files", file);
	j = harness_json(p.sock, "DELETE", url, NULL, 409);
	assert_non_null(strstr(harness_str(json_object_get(j, "error"), "message"), "start it"));
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	json_decref(harness_json(p.sock, "POST", path, "{\"argv\":[\"true\"]}", 409));
	st = state_of(id);
	assert_string_equal(st, "stopped");
	assert_int_equal(restarts(id), 0);
	assert_int_equal(access(file, F_OK), -1);
}

/* Reads that come while the boot is under way wait for that same boot. */
static void
test_concurrent_reads_share_one_boot(void **state)
{
	_cleanup_free_ char *file = strdup_printf("%s/shared.txt", home);
	_cleanup_free_ char *url = NULL;
	char id[64];
	int fd[3];

	create("{}", id);
	assert_int_equal(put_file(id, file, "one boot\n"), 204);
	post(id, "stop", "stopped");
	url = file_path(id, "files", file);
	for (int i = 0; i < 3; i++) {
		fd[i] = harness_request_open(
		        &(struct harness_req){ .sock = p.sock, .method = "GET", .path = url });
		assert_true(fd[i] >= 0);
	}
	for (int i = 0; i < 3; i++) {
		char *buf = NULL;
		size_t len = 0;
		(void)harness_stream_read(fd[i], 30000, NULL, &buf, &len);
		if (!str_has_prefix(buf ?: "", "HTTP/1.1 200") ||
		    !strstr(buf, "\r\n\r\none boot\n"))
			fail_msg("read %d: %s", i, buf ?: "(nothing)");
		free(buf);
		close(fd[i]);
	}
	assert_int_equal(restarts(id), 1);
	json_decref(await_state(id, "stopped"));
}

/* Started by its user, or running a process of its own, it is not stopped again. */
static void
test_a_start_or_a_process_keeps_it_up(void **state)
{
	_cleanup_free_ char *file = strdup_printf("%s/kept.txt", home);
	_cleanup_free_ char *url = NULL, *body = NULL, *st = NULL;
	char id[64], other[64], path[128];

	create("{}", id);
	create("{}", other);
	assert_int_equal(put_file(id, file, "kept\n"), 204);
	post(id, "stop", "stopped");
	post(other, "stop", "stopped");

	url = file_path(id, "files", file);
	assert_int_equal(harness_http(p.sock, "GET", url, NULL, &body), 200);
	post(id, "start", "running");

	free(url);
	free(body);
	body = NULL;
	url = file_path(other, "files", file);
	assert_int_equal(harness_http(p.sock, "GET", url, NULL, &body), 200);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", other);
	json_decref(harness_json(p.sock, "POST", path, "{\"argv\":[\"true\"]}", 200));

	/* well past the grace, neither was asked anything */
	sleep(3 * GRACE_S + 1);
	st = state_of(id);
	assert_string_equal(st, "running");
	free(st);
	st = state_of(other);
	assert_string_equal(st, "running");
}

/* A failed sandbox whose disk outlived the crash is read the same way, and ends stopped, not
 * failed. One whose disk never was answers 409 as its start would. */
static void
test_read_of_a_failed_sandbox(void **state)
{
	_cleanup_free_ char *file = strdup_printf("%s/before-the-crash.txt", home);
	_cleanup_free_ char *url = NULL, *body = NULL;
	char id[64], never[64];
	json_t *j;
	FILE *f;

	create("{\"image\":\"fake/crash\"}", id);
	json_decref(await_state(id, "failed"));
	/* what its guest wrote before it crashed (the fake's guest files are this machine's) */
	f = fopen(file, "w");
	assert_non_null(f);
	fputs("survived\n", f);
	fclose(f);
	url = file_path(id, "files", file);
	assert_int_equal(harness_http(p.sock, "GET", url, NULL, &body), 200);
	assert_string_equal(body, "survived\n");
	j = await_state(id, "stopped");
	assert_non_null(strstr(harness_str(j, "reason") ?: "", "started to read its files"));
	json_decref(j);

	create("{\"image\":\"fake/fail-boot\"}", never);
	json_decref(await_state(never, "failed"));
	free(url);
	url = file_path(never, "files", file);
	j = harness_json(p.sock, "GET", url, NULL, 409);
	assert_non_null(
	        strstr(harness_str(json_object_get(j, "error"), "message"), "cannot start again"));
	json_decref(j);
	json_decref(await_state(never, "failed"));
}

/* A boot that fails answers 503 with its reason, as a failed start says it: the fake boots
 * once its agent answers, and here its agent cannot run. */
static void
test_a_boot_that_fails_is_503(void **state)
{
	_cleanup_free_ char *away = strdup_printf("%s.away", guestd);
	_cleanup_free_ char *url = NULL, *body = NULL;
	char id[64];
	json_t *j;
	int status;

	create("{}", id);
	post(id, "stop", "stopped");
	assert_int_equal(rename(guestd, away), 0);
	url = file_path(id, "files", "/etc/hostname");
	status = harness_http(p.sock, "GET", url, NULL, &body);
	assert_int_equal(rename(away, guestd), 0); /* before anything can fail */
	assert_int_equal(status, 503);
	assert_non_null(strstr(body, "could not be started to read its files"));
	assert_non_null(strstr(body, "agent did not come up"));
	j = get_sandbox(id);
	assert_string_equal(harness_str(j, "state"), "failed");
	json_decref(j);
}

/* Another user's stopped sandbox is 404 to a read, exactly as one that does not exist, and
 * is not booted. */
static void
test_another_users_sandbox_is_404(void **state)
{
	_cleanup_free_ char *url = NULL, *head = NULL, *cookie = NULL, *hdr = NULL, *mine = NULL,
	                    *none = NULL, *st = NULL;
	char id[64];
	json_t *j;

	create("{}", id); /* the operator's */
	post(id, "stop", "stopped");
	json_decref(harness_json(p.sock, "POST", "/v1/users",
	                         "{\"email\":\"bob@example.com\",\"password\":\"bob-password-22\","
	                         "\"role\":\"user\"}",
	                         201));
	j = harness_json_headers(p.sock, NULL, "POST", "/v1/auth/login",
	                         "{\"email\":\"bob@example.com\",\"password\":\"bob-password-22\"}",
	                         200, &head);
	json_decref(j);
	cookie = harness_header(head, "Set-Cookie");
	assert_non_null(cookie);
	cookie[strcspn(cookie, ";")] = '\0';
	hdr = strdup_printf("Cookie: %s\r\n", cookie);

	url = file_path(id, "files", "/etc/hostname");
	assert_int_equal(harness_http_headers(p.sock, "GET", url, hdr, NULL, NULL, &mine), 404);
	free(url);
	url = file_path("sbx_00000000000000ff", "files", "/etc/hostname");
	assert_int_equal(harness_http_headers(p.sock, "GET", url, hdr, NULL, NULL, &none), 404);
	/* the same answer but for the name asked for */
	assert_non_null(strstr(mine, "\"not_found\""));
	assert_non_null(strstr(none, "\"not_found\""));
	free(url);
	url = file_path(id, "dirs", "/");
	assert_int_equal(harness_http_headers(p.sock, "GET", url, hdr, NULL, NULL, NULL), 404);
	st = state_of(id);
	assert_string_equal(st, "stopped");
	assert_int_equal(restarts(id), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_of_a_stopped_sandbox),
		cmocka_unit_test(test_writes_to_a_stopped_sandbox_stay_409),
		cmocka_unit_test(test_concurrent_reads_share_one_boot),
		cmocka_unit_test(test_a_start_or_a_process_keeps_it_up),
		cmocka_unit_test(test_read_of_a_failed_sandbox),
		cmocka_unit_test(test_a_boot_that_fails_is_503),
		cmocka_unit_test(test_another_users_sandbox_is_404),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
