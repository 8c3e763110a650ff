/* test-lifecycle.c: lifecycle paths a user meets that need the fake backend's help to
 * provoke: a boot that fails, a VM that dies on its own and is started again, a delete while
 * booting, a stop while booting, lifetimes and idle timeouts; terminated sandboxes in the list
 * until --forget-after. Each failure carries its reason in the sandbox and in the event stream,
 * and nothing is left half-made. */
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

#ifndef MAX
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#endif

static bool
streq_safe(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

static struct daemon_proc p;

static int
setup(void **state)
{
	return harness_start(&p, harness_binary("SANDBOXD_FAKE"), NULL, NULL);
}

static int
teardown(void **state)
{
	int rc = harness_stop(&p, SIGTERM);

	harness_cleanup(&p);
	return rc == 0 ? 0 : -1;
}

/* Polls GET until the sandbox reaches want (or 10 s pass); returns the object. */
static json_t *
await_state(const char *id, const char *want)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	for (int i = 0; i < 200; i++) {
		json_t *j = harness_json(p.sock, "GET", path, NULL, 200);
		if (streq_safe(harness_str(j, "state"), want))
			return j;
		json_decref(j);
		usleep(50000);
	}
	fail_msg("sandbox %s never reached %s", id, want);
	return NULL;
}

/* How many of id's audit records have this type (and needle in them, unless NULL). */
static int
count_events(const char *id, const char *type, const char *needle)
{
	char path[128];
	json_t *j, *ev;
	size_t i;
	int found = 0;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", id);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	json_array_foreach (json_object_get(j, "events"), i, ev) {
		char *text = json_dumps(ev, JSON_COMPACT);
		if (streq_safe(harness_str(ev, "type"), type) && (!needle || strstr(text, needle)))
			found++;
		free(text);
	}
	json_decref(j);
	return found;
}

static bool
has_event(const char *id, const char *type, const char *needle)
{
	return count_events(id, type, needle) > 0;
}

static void
test_failed_boot(void **state)
{
	json_t *j = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"image\":\"fake/fail-boot\"}",
	                         201);

	/* the create answers with the failure and its reason, and the record stays for
	 * inspection until it is deleted */
	assert_string_equal(harness_str(j, "state"), "failed");
	assert_non_null(strstr(harness_str(j, "reason"), "failed to boot"));
	assert_true(has_event(harness_str(j, "id"), "sandbox.failed", "failed to boot"));
	{
		char path[128];
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(j, "id"));
		json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
		json_t *g = harness_json(p.sock, "GET", path, NULL, 200);
		assert_string_equal(harness_str(g, "state"), "terminated");
		json_decref(g);
	}
	json_decref(j);
}

static void
test_vm_dies_on_its_own(void **state)
{
	json_t *j = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"image\":\"fake/crash\"}",
	                         201),
	       *g;

	assert_string_equal(harness_str(j, "state"), "running");
	g = await_state(harness_str(j, "id"), "failed");
	assert_non_null(strstr(harness_str(g, "reason"), "crashed"));
	assert_true(has_event(harness_str(j, "id"), "sandbox.failed", "crashed"));
	json_decref(g);
	json_decref(j);
}

/* A VM that died keeps its layer: POST …/start boots it again (failed -> starting -> running,
 * in restart mode). One whose first boot failed has no layer: its start is 409, saying so, and
 * it stays failed. */
static void
test_failed_sandbox_starts_again(void **state)
{
	json_t *j = harness_json(p.sock, "POST", "/v1/sandboxes",
	                         "{\"image\":\"fake/crash\",\"name\":\"crashes\"}", 201),
	       *g, *e;
	const char *id = harness_str(j, "id");
	char path[128], calls[400], line[128];

	g = await_state(id, "failed");
	json_decref(g);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", id);
	g = harness_json(p.sock, "POST", path, NULL, 200);
	assert_string_equal(harness_str(g, "state"), "running");
	assert_null(harness_str(g, "reason"));
	json_decref(g);
	/* the backend was asked to boot the kept layer, not to make a new one */
	snprintf(calls, sizeof(calls), "%s/fake/calls.log", p.state);
	snprintf(line, sizeof(line), "restart %s", id);
	assert_true(harness_file_contains(calls, line));
	/* its second start in the audit trail, after the failure */
	assert_int_equal(count_events(id, "sandbox.started", NULL), 2);
	assert_true(has_event(id, "sandbox.failed", "crashed"));
	/* it stays up (the fake crashes only after a first boot) */
	usleep(600000);
	g = harness_json(p.sock, "GET", "/v1/sandboxes/crashes", NULL, 200);
	assert_string_equal(harness_str(g, "state"), "running");
	json_decref(g);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	json_decref(j);

	j = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"image\":\"fake/fail-boot\"}", 201);
	id = harness_str(j, "id");
	assert_string_equal(harness_str(j, "state"), "failed");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", id);
	e = harness_json(p.sock, "POST", path, NULL, 409);
	assert_string_equal(harness_str(json_object_get(e, "error"), "code"), "conflict");
	assert_non_null(
	        strstr(harness_str(json_object_get(e, "error"), "message"), "disk is gone"));
	json_decref(e);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	g = harness_json(p.sock, "GET", path, NULL, 200);
	assert_string_equal(harness_str(g, "state"), "failed");
	assert_non_null(strstr(harness_str(g, "reason"), "failed to boot"));
	json_decref(g);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	json_decref(j);
}

static void
test_delete_and_stop_while_booting(void **state)
{
	json_t *j = harness_json(p.sock, "POST", "/v1/sandboxes",
	                         "{\"image\":\"fake/slow\",\"wait\":false,\"name\":\"slow\"}", 201);
	char path[128], calls[400];
	json_t *e;

	assert_string_equal(harness_str(j, "state"), "starting");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", harness_str(j, "id"));
	e = harness_json(p.sock, "POST", path, NULL, 409);
	assert_string_equal(harness_str(json_object_get(e, "error"), "code"), "conflict");
	json_decref(e);
	/* deleting cancels the boot: 204, terminated, and the name is free at once */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(j, "id"));
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	e = harness_json(p.sock, "GET", path, NULL, 200);
	assert_string_equal(harness_str(e, "state"), "terminated");
	json_decref(e);
	json_decref(harness_json(p.sock, "POST", "/v1/sandboxes", "{\"name\":\"slow\"}", 201));
	snprintf(calls, sizeof(calls), "%s/fake/calls.log", p.state);
	{
		char line[128];
		snprintf(line, sizeof(line), "destroy %s", harness_str(j, "id"));
		assert_true(harness_file_contains(calls, line));
	}
	json_decref(j);
}

static void
test_lifetime_and_idle_timeout(void **state)
{
	json_t *a = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"lifetime_secs\":1}", 201);
	json_t *b = harness_json(p.sock, "POST", "/v1/sandboxes",
	                         "{\"idle_timeout_secs\":1,\"idle_action\":\"stop\"}", 201);
	json_t *g;

	assert_non_null(harness_str(a, "expires_at"));
	g = await_state(harness_str(a, "id"), "terminated");
	assert_non_null(strstr(harness_str(g, "reason"), "lifetime"));
	json_decref(g);
	/* idle: stopped, its disk kept (test-idle.c has the rest) */
	g = await_state(harness_str(b, "id"), "stopped");
	assert_non_null(strstr(harness_str(g, "reason"), "idle"));
	json_decref(g);
	json_decref(a);
	json_decref(b);
}

static const char *list_state(const char *sock, const char *query, const char *id);

/* The unfiltered list is served from a cache: every change must show in the next one. */
static void
test_list_follows_every_change(void **state)
{
	json_t *a = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"name\":\"cached\"}", 201);
	char path[128];
	char *list = NULL;

	assert_int_equal(harness_http(p.sock, "GET", "/v1/sandboxes", NULL, &list), 200);
	assert_non_null(strstr(list, "\"name\":\"cached\""));
	free(list);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(a, "id"));
	json_decref(harness_json(p.sock, "PATCH", path, "{\"name\":\"renamed-cached\"}", 200));
	assert_int_equal(harness_http(p.sock, "GET", "/v1/sandboxes", NULL, &list), 200);
	assert_null(strstr(list, "\"name\":\"cached\""));
	assert_non_null(strstr(list, "\"name\":\"renamed-cached\""));
	free(list);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", harness_str(a, "id"));
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	assert_int_equal(harness_http(p.sock, "GET", "/v1/sandboxes", NULL, &list), 200);
	assert_non_null(strstr(list, "\"state\":\"stopped\""));
	free(list);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(a, "id"));
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	assert_string_equal(list_state(p.sock, "", harness_str(a, "id")), "terminated");
	json_decref(a);
}

/* The state of id in GET /v1/sandboxes<query> (a static buffer), or NULL when it is not in
 * the list. */
static const char *
list_state(const char *sock, const char *query, const char *id)
{
	static char state[32];
	char path[128];
	json_t *j, *sb;
	size_t i;
	const char *found = NULL;

	snprintf(path, sizeof(path), "/v1/sandboxes%s", query);
	j = harness_json(sock, "GET", path, NULL, 200);
	json_array_foreach (json_object_get(j, "sandboxes"), i, sb)
		if (streq_safe(harness_str(sb, "id"), id)) {
			snprintf(state, sizeof(state), "%s", harness_str(sb, "state"));
			found = state;
		}
	json_decref(j);
	return found;
}

/* A terminated sandbox stays in the list (state terminated, with its reason, newest first)
 * and answers GET by id; ?state= selects; its name is free at once. */
static void
test_terminated_sandboxes_are_listed(void **state)
{
	json_t *old = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"name\":\"older\"}", 201);
	json_t *a = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"name\":\"ended\"}", 201);
	json_t *list, *sb, *again;
	const char *id = harness_str(a, "id");
	char path[128];
	size_t i;
	int at = -1, older_at = -1;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	list = harness_json(p.sock, "GET", "/v1/sandboxes", NULL, 200);
	json_array_foreach (json_object_get(list, "sandboxes"), i, sb) {
		if (streq_safe(harness_str(sb, "id"), id)) {
			at = (int)i;
			assert_string_equal(harness_str(sb, "state"), "terminated");
			assert_string_equal(harness_str(sb, "reason"), "deleted");
			assert_string_equal(harness_str(sb, "name"), "ended");
		}
		if (streq_safe(harness_str(sb, "id"), harness_str(old, "id")))
			older_at = (int)i;
	}
	json_decref(list);
	assert_true(at >= 0 && older_at >= 0 && at < older_at); /* newest first */
	assert_string_equal(list_state(p.sock, "?state=terminated", id), "terminated");
	assert_null(list_state(p.sock, "?state=terminated", harness_str(old, "id")));
	assert_null(list_state(p.sock, "?state=running", id));
	assert_string_equal(list_state(p.sock, "?state=running&state=terminated", id),
	                    "terminated");
	assert_string_equal(list_state(p.sock, "?state=terminated&label=nothing=here", id) ?: "-",
	                    "-");
	json_decref(harness_json(p.sock, "GET", "/v1/sandboxes?state=Running", NULL, 400));
	json_decref(harness_json(p.sock, "GET", "/v1/sandboxes?status=running", NULL, 400));
	/* the name is free: a new sandbox takes it, and the name finds the new one */
	again = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"name\":\"ended\"}", 201);
	sb = harness_json(p.sock, "GET", "/v1/sandboxes/ended", NULL, 200);
	assert_string_equal(harness_str(sb, "id"), harness_str(again, "id"));
	json_decref(sb);
	sb = harness_json(p.sock, "GET", path, NULL, 200);
	assert_string_equal(harness_str(sb, "state"), "terminated");
	json_decref(sb);
	json_decref(again);
	json_decref(old);
	json_decref(a);
}

/* After --forget-after a terminated sandbox is gone: from the list, by id, with its events;
 * while the daemon runs (the housekeeping timer), and at its start. */
static void
test_terminated_sandboxes_are_forgotten(void **state)
{
	const char *soon[] = { "--forget-after", "1s", NULL };
	const char *at_once[] = { "--forget-after", "0", NULL };
	struct daemon_proc q;
	char path[128], events[160];
	json_t *a, *e;
	bool gone = false;

	/* running: it goes within a housekeeping tick or two of the second it may stay */
	assert_int_equal(harness_start(&q, harness_binary("SANDBOXD_FAKE"), soon, NULL), 0);
	a = harness_json(q.sock, "POST", "/v1/sandboxes", "{}", 201);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(a, "id"));
	snprintf(events, sizeof(events), "/v1/sandboxes/%s/events", harness_str(a, "id"));
	json_decref(harness_json(q.sock, "DELETE", path, NULL, 204));
	for (int i = 0; i < 300 && !gone; i++) {
		char *body = NULL;
		gone = harness_http(q.sock, "GET", path, NULL, &body) == 404;
		free(body);
		if (!gone)
			usleep(50000);
	}
	if (!gone)
		fail_msg("sandbox %s was never forgotten with --forget-after 1s",
		         harness_str(a, "id"));
	assert_null(list_state(q.sock, "", harness_str(a, "id")));
	e = harness_json(q.sock, "GET", events, NULL, 404);
	assert_string_equal(harness_str(json_object_get(e, "error"), "code"), "not_found");
	json_decref(e);
	json_decref(a);

	/* at the start: a daemon that keeps them a day, then one that keeps them no time */
	assert_int_equal(harness_stop(&q, SIGTERM), 0);
	assert_int_equal(harness_restart(&q, harness_binary("SANDBOXD_FAKE"), NULL, NULL), 0);
	a = harness_json(q.sock, "POST", "/v1/sandboxes", "{}", 201);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(a, "id"));
	json_decref(harness_json(q.sock, "DELETE", path, NULL, 204));
	assert_int_equal(harness_stop(&q, SIGTERM), 0);
	assert_int_equal(harness_restart(&q, harness_binary("SANDBOXD_FAKE"), NULL, NULL), 0);
	assert_string_equal(list_state(q.sock, "", harness_str(a, "id")), "terminated");
	assert_int_equal(harness_stop(&q, SIGTERM), 0);
	assert_int_equal(harness_restart(&q, harness_binary("SANDBOXD_FAKE"), at_once, NULL), 0);
	assert_null(list_state(q.sock, "", harness_str(a, "id")));
	json_decref(harness_json(q.sock, "GET", path, NULL, 404));
	assert_true(harness_file_contains(q.log, "forgot 1 sandbox(es)"));
	json_decref(a);
	assert_int_equal(harness_stop(&q, SIGTERM), 0);
	harness_cleanup(&q);
}

static long
num(json_t *node, const char *group, const char *key)
{
	json_t *g = group ? json_object_get(node, group) : node;
	json_t *v = json_object_get(g, key);

	assert_true(json_is_integer(v));
	return (long)json_integer_value(v);
}

/* GET /v1/node: what active sandboxes hold is counted as they start and stop, and free is
 * capacity less that (never below zero). */
static void
test_node_counts_what_sandboxes_hold(void **state)
{
	json_t *before = harness_json(p.sock, "GET", "/v1/node", NULL, 200), *after, *a, *b;
	long cap_cpus = num(before, "capacity", "cpus"),
	     cap_mem = num(before, "capacity", "memory_mb");
	char path[128];

	assert_true(cap_cpus >= 1 && cap_mem > 0);
	assert_true(json_is_false(json_object_get(before, "cordoned")));
	a = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"cpus\":1,\"memory_mb\":256}", 201);
	b = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"cpus\":2,\"memory_mb\":512}", 201);
	after = harness_json(p.sock, "GET", "/v1/node", NULL, 200);
	assert_int_equal(num(after, "allocated", "sandboxes"),
	                 num(before, "allocated", "sandboxes") + 2);
	assert_int_equal(num(after, "allocated", "cpus"), num(before, "allocated", "cpus") + 3);
	assert_int_equal(num(after, "allocated", "memory_mb"),
	                 num(before, "allocated", "memory_mb") + 768);
	assert_int_equal(num(after, NULL, "running"), num(before, NULL, "running") + 2);
	assert_int_equal(num(after, "free", "cpus"),
	                 MAX(0, cap_cpus - num(after, "allocated", "cpus")));
	assert_int_equal(num(after, "free", "memory_mb"),
	                 MAX(0, cap_mem - num(after, "allocated", "memory_mb")));
	json_decref(after);
	/* a stopped sandbox holds nothing */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", harness_str(b, "id"));
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	after = harness_json(p.sock, "GET", "/v1/node", NULL, 200);
	assert_int_equal(num(after, "allocated", "sandboxes"),
	                 num(before, "allocated", "sandboxes") + 1);
	assert_int_equal(num(after, "allocated", "cpus"), num(before, "allocated", "cpus") + 1);
	assert_int_equal(num(after, NULL, "running"), num(before, NULL, "running") + 1);
	json_decref(after);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(a, "id"));
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(b, "id"));
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	after = harness_json(p.sock, "GET", "/v1/node", NULL, 200);
	assert_int_equal(num(after, "allocated", "sandboxes"),
	                 num(before, "allocated", "sandboxes"));
	json_decref(after);
	json_decref(before);
	json_decref(a);
	json_decref(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_failed_boot),
		cmocka_unit_test(test_vm_dies_on_its_own),
		cmocka_unit_test(test_failed_sandbox_starts_again),
		cmocka_unit_test(test_delete_and_stop_while_booting),
		cmocka_unit_test(test_lifetime_and_idle_timeout),
		cmocka_unit_test(test_list_follows_every_change),
		cmocka_unit_test(test_terminated_sandboxes_are_listed),
		cmocka_unit_test(test_terminated_sandboxes_are_forgotten),
		cmocka_unit_test(test_node_counts_what_sandboxes_hold),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
