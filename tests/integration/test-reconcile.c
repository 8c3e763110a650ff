/* test-reconcile.c: the reconciler on the fake backend, with --reconcile-interval 1: a running
 * sandbox whose VM vanished without sandboxd seeing it, and a start that never finishes, are
 * failed with the reason (in the sandbox, its events and the log); a layer no sandbox owns is
 * removed, with a node event on the live stream; a healthy running sandbox is never touched.
 * The fake's VMs are files (tests/fake/fake-backend.c): deleting one is a VMM that vanished,
 * planting one is a stray layer. Stray VMMs and taps need real ones: tests/vm. */
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

static struct daemon_proc p;

static int
setup(void **state)
{
	(void)state;
	/* a start is stuck after twice (boot + stop timeout): 2 s here */
	return harness_start(&p, harness_binary("SANDBOXD_FAKE"),
	                     (const char *const[]){ "--reconcile-interval", "1", "--boot-timeout",
	                                            "1", "--stop-timeout", "0", NULL },
	                     NULL);
}

static int
teardown(void **state)
{
	int rc;

	(void)state;
	rc = harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
	return rc == 0 ? 0 : -1;
}

static bool
streq_safe(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

/* Polls GET until the sandbox reaches want (or 15 s pass: several periods); returns it. */
static json_t *
await_state(const char *id, const char *want)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	for (int i = 0; i < 300; i++) {
		json_t *j = harness_json(p.sock, "GET", path, NULL, 200);
		if (streq_safe(harness_str(j, "state"), want))
			return j;
		json_decref(j);
		usleep(50000);
	}
	fail_msg("sandbox %s never became %s", id, want);
	return NULL;
}

static void
fake_file(const char *id, char *out, size_t size)
{
	snprintf(out, size, "%s/fake/%s", p.state, id);
}

static bool
called(const char *op, const char *id)
{
	char calls[400], line[128];

	snprintf(calls, sizeof(calls), "%s/fake/calls.log", p.state);
	snprintf(line, sizeof(line), "%s %s", op, id);
	return harness_file_contains(calls, line);
}

static void
test_vanished_vm_and_stuck_start_fail_healthy_one_untouched(void **state)
{
	json_t *healthy =
	        harness_json(p.sock, "POST", "/v1/sandboxes", "{\"name\":\"healthy\"}", 201);
	json_t *lost = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"name\":\"lost\"}", 201);
	json_t *stuck = harness_json(p.sock, "POST", "/v1/sandboxes",
	                             "{\"image\":\"fake/hang\",\"wait\":false}", 201);
	char path[400];
	json_t *g, *before, *after;

	(void)state;
	assert_string_equal(harness_str(healthy, "state"), "running");
	assert_string_equal(harness_str(stuck, "state"), "starting");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", harness_str(healthy, "id"));
	before = harness_json(p.sock, "GET", path, NULL, 200);

	/* its VMM vanished: nothing told sandboxd */
	fake_file(harness_str(lost, "id"), path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	g = await_state(harness_str(lost, "id"), "failed");
	assert_non_null(strstr(harness_str(g, "reason"), "its VM is gone"));
	assert_non_null(strstr(harness_str(g, "reason"), "found by the reconciler"));
	json_decref(g);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", harness_str(lost, "id"));
	g = harness_json(p.sock, "GET", path, NULL, 200);
	{
		char *text = json_dumps(g, JSON_COMPACT);
		assert_non_null(strstr(text, "\"type\":\"sandbox.failed\""));
		assert_non_null(strstr(text, "found by the reconciler"));
		free(text);
	}
	json_decref(g);

	/* a start that never finishes is put right once it is past its bound, the backend told to
	 * let go of it */
	g = await_state(harness_str(stuck, "id"), "failed");
	assert_non_null(strstr(harness_str(g, "reason"), "it was starting for"));
	assert_non_null(strstr(harness_str(g, "reason"), "never finished"));
	json_decref(g);
	assert_true(called("abandon", harness_str(stuck, "id")));
	snprintf(path, sizeof(path), "sandbox '%s': it was starting for", harness_str(stuck, "id"));
	assert_true(harness_file_contains(p.log, path));

	/* the healthy one: still running, nothing asked of the backend about it, no new event */
	sleep(2);
	g = harness_json(p.sock, "GET", "/v1/sandboxes/healthy", NULL, 200);
	assert_string_equal(harness_str(g, "state"), "running");
	assert_null(harness_str(g, "reason"));
	json_decref(g);
	assert_false(called("abandon", harness_str(healthy, "id")));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", harness_str(healthy, "id"));
	after = harness_json(p.sock, "GET", path, NULL, 200);
	assert_true(
	        json_equal(json_object_get(before, "events"), json_object_get(after, "events")));
	fake_file(harness_str(healthy, "id"), path, sizeof(path));
	assert_true(harness_file_contains(path, "running"));
	json_decref(before);
	json_decref(after);
	json_decref(healthy);
	json_decref(lost);
	json_decref(stuck);
}

static void
test_stray_layer_is_removed_with_an_event(void **state)
{
	static const char stray[] = "sbx_00000000000000aa";
	json_t *kept = harness_json(p.sock, "POST", "/v1/sandboxes", "{}", 201);
	char path[400], kept_path[400], *seen = NULL;
	size_t n = 0;
	FILE *f;
	int fd;
	bool gone = false;

	(void)state;
	/* a stopped sandbox's layer is its own, whoever runs it */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", harness_str(kept, "id"));
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	fd = harness_stream_open(p.sock, "GET", "/v1/events/stream", NULL);
	assert_true(fd >= 0);
	fake_file(stray, path, sizeof(path));
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("stopped", f);
	fclose(f);
	for (int i = 0; i < 100 && !gone; i++) {
		gone = access(path, F_OK) != 0;
		if (!gone)
			usleep(100000);
	}
	assert_true(gone);
	(void)harness_stream_read(fd, 5000, stray, &seen, &n);
	close(fd);
	assert_non_null(seen);
	assert_non_null(strstr(seen, "reconciler.removed"));
	assert_non_null(strstr(seen, "\"what\":\"layer\""));
	assert_non_null(strstr(seen, stray));
	free(seen);
	snprintf(path, sizeof(path), "reconciler: removed the layer of '%s'", stray);
	assert_true(harness_file_contains(p.log, path));
	fake_file(harness_str(kept, "id"), kept_path, sizeof(kept_path));
	assert_true(harness_file_contains(kept_path, "stopped"));
	json_decref(kept);
}

/* The period is at least a second. */
static void
test_interval_zero_is_refused(void **state)
{
	char *out = NULL;

	(void)state;
	assert_int_not_equal(
	        harness_run_checked(harness_binary("SANDBOXD_FAKE"),
	                            (const char *const[]){ "--reconcile-interval", "0", NULL },
	                            NULL, &out),
	        0);
	harness_expect_in(out, "--reconcile-interval '0' must be 1 to 86400");
	free(out);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_interval_zero_is_refused),
		cmocka_unit_test(test_vanished_vm_and_stuck_start_fail_healthy_one_untouched),
		cmocka_unit_test(test_stray_layer_is_removed_with_an_event),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
