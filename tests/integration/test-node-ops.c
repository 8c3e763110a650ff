/* test-node-ops.c: the node as an operator and a gateway meet it, against sandboxd-fake with its
 * agent (so processes and files are real): GET /v1/node reports the capacity the flags gave,
 * what is free, the labels and pools, the same totals to a user; a create or a start past the
 * capacity is 503 before anything is made; POST /v1/node/cordon (operator and admins) makes
 * creates 503 while running sandboxes, their processes and files carry on, and uncordoning
 * restores; /metrics shows all of it, moving as it changes, with no user in any series. */
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

static struct daemon_proc d;
static int metrics_port;
static bool have_agent;
static char policy_dir[256];

struct who {
	const char *email, *password, *role;
	char hkey[256]; /* "Authorization: Bearer sbk_...\r\n" */
};

static struct who alice = { .email = "alice@example.com",
	                    .password = "alice-password-1",
	                    .role = "user" };
static struct who boss = { .email = "boss@example.com",
	                   .password = "boss-password-333",
	                   .role = "admin" };

static const char *
err_code(const json_t *j)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), "code"));
}

static const char *
err_message(const json_t *j)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), "message")) ?: "";
}

/* An error answer with this status and code whose message holds each of the needles. */
static void
expect_error(const char *hdrs, const char *method, const char *path, const char *body, int status,
             const char *code, const char *const *needles)
{
	json_t *j = harness_json_headers(d.sock, hdrs, method, path, body, status, NULL);

	if (!err_code(j) || strcmp(err_code(j), code) != 0)
		fail_msg("%s %s: expected code %s, got %s", method, path, code,
		         err_code(j) ?: "(none)");
	for (size_t i = 0; needles && needles[i]; i++)
		if (!strstr(err_message(j), needles[i]))
			fail_msg("%s %s: the message '%s' does not say '%s'", method, path,
			         err_message(j), needles[i]);
	json_decref(j);
}

/* The operator makes w, w signs in and makes an API key. */
static void
make_account(struct who *w)
{
	_cleanup_free_ char *body =
	        strdup_printf("{\"email\":\"%s\",\"password\":\"%s\",\"role\":\"%s\"}", w->email,
	                      w->password, w->role);
	_cleanup_free_ char *login =
	        strdup_printf("{\"email\":\"%s\",\"password\":\"%s\"}", w->email, w->password);
	char *head = NULL, *cookie, *semi, hsess[600];
	json_t *j;

	json_decref(harness_json(d.sock, "POST", "/v1/users", body, 201));
	j = harness_json_headers(d.sock, NULL, "POST", "/v1/auth/login", login, 200, &head);
	cookie = harness_header(head, "Set-Cookie");
	assert_non_null(cookie);
	semi = strchr(cookie, ';');
	if (semi)
		*semi = '\0';
	snprintf(hsess, sizeof(hsess), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", cookie,
	         harness_str(j, "csrf_token"));
	free(cookie);
	free(head);
	json_decref(j);
	j = harness_json_headers(d.sock, hsess, "POST", "/v1/keys", "{\"name\":\"t\"}", 201, NULL);
	snprintf(w->hkey, sizeof(w->hkey), "Authorization: Bearer %s\r\n", harness_str(j, "key"));
	json_decref(j);
}

static int
setup(void **state)
{
	const char *guestd = getenv("SANDBOX_GUESTD");
	char addr[64], policy[300], env_agent[512];
	FILE *f;

	have_agent = guestd && access(guestd, X_OK) == 0;
	metrics_port = harness_free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", metrics_port);
	/* a policy file without pools (test-pools has them): every sandbox here is one a
	 * create made */
	if (harness_tmpdir(policy_dir, sizeof(policy_dir)) < 0)
		return -1;
	snprintf(policy, sizeof(policy), "%s/policy.yaml", policy_dir);
	f = fopen(policy, "w");
	if (!f)
		return -1;
	fputs("defaults:\n  cpus: 1\n", f);
	fclose(f);
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", guestd ?: "");
	{
		const char *args[] = { "--capacity-cpus",
			               "3",
			               "--capacity-memory-mb",
			               "2048",
			               "--capacity-disk-mb",
			               "10000",
			               "--node-label",
			               "region=west",
			               "--node-label",
			               "disk=nvme",
			               "--metrics-listen",
			               addr,
			               "--policy",
			               policy,
			               NULL };
		const char *env[] = { env_agent, NULL };
		if (harness_start(&d, harness_binary("SANDBOXD_FAKE"), args,
		                  have_agent ? env : NULL) < 0)
			return -1;
	}
	make_account(&alice);
	make_account(&boss);
	return 0;
}

static int
teardown(void **state)
{
	char policy[300];

	harness_stop(&d, SIGTERM);
	harness_cleanup(&d);
	snprintf(policy, sizeof(policy), "%s/policy.yaml", policy_dir);
	unlink(policy);
	rmdir(policy_dir);
	return 0;
}

/* After each case, whether it passed or not: no sandbox left, the node uncordoned. */
static int
case_teardown(void **state)
{
	char *out = NULL;

	harness_delete_all(d.sock);
	harness_http(d.sock, "POST", "/v1/node/cordon", "{\"cordoned\":false}", &out);
	free(out);
	return 0;
}

static long
num(const json_t *node, const char *group, const char *key)
{
	const json_t *g = group ? json_object_get(node, group) : node;
	const json_t *v = json_object_get(g, key);

	if (!json_is_integer(v))
		fail_msg("GET /v1/node: %s%s%s is not a number", group ?: "", group ? "." : "",
		         key);
	return (long)json_integer_value(v);
}

static json_t *
node(void)
{
	return harness_json(d.sock, "GET", "/v1/node", NULL, 200);
}

/* The ids of every sandbox listed, terminated ones too, as one string. */
static char *
list_ids(void)
{
	json_t *l = harness_json(d.sock, "GET", "/v1/sandboxes", NULL, 200), *sb;
	char *out = strdup("");
	size_t i;

	json_array_foreach (json_object_get(l, "sandboxes"), i, sb) {
		char *more = strdup_printf("%s%s ", out, harness_str(sb, "id"));
		free(out);
		out = more;
	}
	json_decref(l);
	assert_non_null(out);
	return out;
}

static json_t *
create(const char *body)
{
	return harness_json(d.sock, "POST", "/v1/sandboxes", body, 201);
}

static void delete (const char *id)
{
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s", id);

	json_decref(harness_json(d.sock, "DELETE", path, NULL, 204));
}

static void
test_node_describes_itself(void **state)
{
	json_t *n = node(), *as_user;
	char *a, *b;

	assert_int_equal(num(n, "capacity", "cpus"), 3);
	assert_int_equal(num(n, "capacity", "memory_mb"), 2048);
	assert_int_equal(num(n, "capacity", "disk_mb"), 10000);
	assert_int_equal(num(n, "free", "cpus"), 3);
	assert_int_equal(num(n, "free", "memory_mb"), 2048);
	assert_int_equal(num(n, "free", "disk_mb"), 10000);
	assert_int_equal(num(n, "allocated", "disk_mb"), 0);
	assert_int_equal(num(n, NULL, "running"), 0);
	assert_int_equal(num(n, NULL, "pooled"), 0);
	assert_string_equal(harness_str(json_object_get(n, "labels"), "region"), "west");
	assert_string_equal(harness_str(json_object_get(n, "labels"), "disk"), "nvme");
	assert_int_equal(json_object_size(json_object_get(n, "labels")), 2);
	/* no pools: an empty object */
	assert_true(json_is_object(json_object_get(n, "pools")));
	assert_int_equal(json_object_size(json_object_get(n, "pools")), 0);
	assert_true(json_is_array(json_object_get(n, "images")));
	assert_true(json_is_false(json_object_get(n, "cordoned")));

	/* a user sees the same totals, and nothing that says whose sandboxes hold what */
	json_decref(create("{\"name\":\"ops-box\"}"));
	json_decref(n);
	n = node();
	as_user = harness_json_headers(d.sock, alice.hkey, "GET", "/v1/node", NULL, 200, NULL);
	a = json_dumps(n, JSON_SORT_KEYS);
	b = json_dumps(as_user, JSON_SORT_KEYS);
	assert_string_equal(a, b);
	harness_expect_not_in(b, "operator");
	harness_expect_not_in(b, "ops-box");
	free(a);
	free(b);
	json_decref(as_user);
	delete ("ops-box");
	json_decref(n);
}

static void
test_capacity_refuses_before_anything_is_made(void **state)
{
	json_t *a = create("{\"cpus\":2,\"memory_mb\":512,\"disk_mb\":4096}"), *b, *n;
	_cleanup_free_ char *before = list_ids(), *after = NULL, *stop = NULL, *start = NULL;
	char id[64];

	snprintf(id, sizeof(id), "%s", harness_str(a, "id"));

	/* each resource, with what is asked and what is free */
	expect_error(NULL, "POST", "/v1/sandboxes", "{\"cpus\":2}", 503, "unavailable",
	             (const char *const[]){ "asks for 2 cpus", "1 of the node's 3", NULL });
	expect_error(
	        NULL, "POST", "/v1/sandboxes", "{\"cpus\":1,\"memory_mb\":1600}", 503,
	        "unavailable",
	        (const char *const[]){ "1600 MiB of memory", "1536 MiB of the node's 2048", NULL });
	expect_error(
	        NULL, "POST", "/v1/sandboxes", "{\"cpus\":1,\"memory_mb\":256,\"disk_mb\":6000}",
	        503, "unavailable",
	        (const char *const[]){ "6000 MiB of disk", "5904 MiB of the node's 10000", NULL });
	/* without waiting too, and for a user as for the operator */
	expect_error(NULL, "POST", "/v1/sandboxes", "{\"cpus\":2,\"wait\":false}", 503,
	             "unavailable", NULL);
	expect_error(alice.hkey, "POST", "/v1/sandboxes", "{\"cpus\":2}", 503, "unavailable", NULL);
	/* nothing was made, not even half */
	after = list_ids();
	assert_string_equal(before, after);
	n = node();
	assert_int_equal(num(n, "free", "cpus"), 1);
	assert_int_equal(num(n, "free", "memory_mb"), 1536);
	assert_int_equal(num(n, "free", "disk_mb"), 5904);
	json_decref(n);

	/* a stopped sandbox gives its cpus and memory back, and keeps its disk */
	stop = strdup_printf("/v1/sandboxes/%s/stop", id);
	start = strdup_printf("/v1/sandboxes/%s/start", id);
	json_decref(harness_json(d.sock, "POST", stop, NULL, 200));
	n = node();
	assert_int_equal(num(n, "free", "cpus"), 3);
	assert_int_equal(num(n, "free", "memory_mb"), 2048);
	assert_int_equal(num(n, "free", "disk_mb"), 5904);
	json_decref(n);
	b = create("{\"cpus\":2,\"memory_mb\":256,\"disk_mb\":1024}");
	/* now a start past the capacity is refused, and the sandbox stays stopped */
	expect_error(NULL, "POST", start, NULL, 503, "unavailable",
	             (const char *const[]){ "asks for 2 cpus", "1 of the node's 3", NULL });
	json_decref(a);
	{
		_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s", id);
		a = harness_json(d.sock, "GET", path, NULL, 200);
		assert_string_equal(harness_str(a, "state"), "stopped");
		json_decref(a);
	}
	delete (harness_str(b, "id"));
	a = harness_json(d.sock, "POST", start, NULL, 200);
	assert_string_equal(harness_str(a, "state"), "running");
	json_decref(a);
	json_decref(b);
	delete (id);
	n = node();
	assert_int_equal(num(n, "free", "disk_mb"), 10000);
	json_decref(n);
}

static void
cordon(const char *hdrs, bool on)
{
	json_t *j = harness_json_headers(d.sock, hdrs, "POST", "/v1/node/cordon",
	                                 on ? "{\"cordoned\":true}" : "{\"cordoned\":false}", 200,
	                                 NULL);

	/* the answer is the node as it is now */
	assert_true(json_is_boolean(json_object_get(j, "cordoned")));
	assert_int_equal(json_is_true(json_object_get(j, "cordoned")), on);
	assert_int_equal(num(j, "capacity", "cpus"), 3);
	json_decref(j);
}

static void
test_cordon_stops_new_sandboxes_only(void **state)
{
	_cleanup_free_ char *before = NULL, *after = NULL, *procs = NULL, *proc = NULL, *run = NULL,
	                    *stop = NULL, *start = NULL;
	json_t *a, *p, *n;
	char id[64];
	long pid;

	if (!have_agent) {
		harness_skip_case(
		        "SANDBOX_GUESTD is not set to sandbox-guestd (run through ctest)");
		return;
	}
	a = create("{\"cpus\":1,\"memory_mb\":256,\"disk_mb\":1024}");
	snprintf(id, sizeof(id), "%s", harness_str(a, "id"));
	json_decref(a);
	procs = strdup_printf("/v1/sandboxes/%s/processes", id);
	run = strdup_printf("/v1/sandboxes/%s/run", id);
	stop = strdup_printf("/v1/sandboxes/%s/stop", id);
	start = strdup_printf("/v1/sandboxes/%s/start", id);
	p = harness_json(d.sock, "POST", procs, "{\"argv\":[\"sleep\",\"60\"]}", 201);
	pid = num(p, NULL, "pid");
	json_decref(p);
	proc = strdup_printf("%s/%ld", procs, pid);

	/* only the operator and admins: a user is refused, and nothing changes */
	expect_error(alice.hkey, "POST", "/v1/node/cordon", "{\"cordoned\":true}", 403, "refused",
	             (const char *const[]){ "operator", NULL });
	expect_error(NULL, "POST", "/v1/node/cordon", "{\"cordoned\":\"yes\"}", 400,
	             "invalid_request", NULL);
	expect_error(NULL, "POST", "/v1/node/cordon", "{\"cordoned\":true,\"why\":\"x\"}", 400,
	             "invalid_request", (const char *const[]){ "why", NULL });
	expect_error(NULL, "POST", "/v1/node/cordon", NULL, 400, "invalid_request", NULL);
	n = node();
	assert_true(json_is_false(json_object_get(n, "cordoned")));
	json_decref(n);

	cordon(NULL, true);
	assert_true(harness_file_contains(d.log, "node: cordoned by the operator"));
	n = node();
	assert_true(json_is_true(json_object_get(n, "cordoned")));
	json_decref(n);
	/* new sandboxes are refused, anyone's, and none is made */
	before = list_ids();
	expect_error(NULL, "POST", "/v1/sandboxes", "{}", 503, "unavailable",
	             (const char *const[]){ "cordoned", NULL });
	expect_error(alice.hkey, "POST", "/v1/sandboxes", "{\"wait\":false}", 503, "unavailable",
	             (const char *const[]){ "cordoned", NULL });
	after = list_ids();
	assert_string_equal(before, after);
	/* the sandbox already here carries on: its process runs, new ones start */
	p = harness_json(d.sock, "GET", proc, NULL, 200);
	assert_string_equal(harness_str(p, "state"), "running");
	json_decref(p);
	p = harness_json(d.sock, "POST", run, "{\"argv\":[\"echo\",\"still here\"]}", 200);
	assert_int_equal(num(p, NULL, "exit_code"), 0);
	assert_string_equal(harness_str(p, "stdout"), "c3RpbGwgaGVyZQo="); /* "still here\n" */
	json_decref(p);
	/* and it may stop and start again: it is no new placement */
	p = harness_json(d.sock, "POST", stop, NULL, 200);
	assert_string_equal(harness_str(p, "state"), "stopped");
	json_decref(p);
	p = harness_json(d.sock, "POST", start, NULL, 200);
	assert_string_equal(harness_str(p, "state"), "running");
	json_decref(p);
	/* cordoning twice is no error */
	cordon(NULL, true);

	/* an admin uncordons: creates work again */
	cordon(boss.hkey, false);
	assert_true(harness_file_contains(d.log, "node: uncordoned by boss@example.com"));
	a = create("{\"cpus\":1,\"memory_mb\":256,\"disk_mb\":1024}");
	delete (harness_str(a, "id"));
	json_decref(a);
	delete (id);
}

/* GET /metrics on the metrics listener: the body. */
static char *
scrape(void)
{
	const struct harness_req rq = { .port = metrics_port,
		                        .method = "GET",
		                        .path = "/metrics",
		                        .host = "127.0.0.1",
		                        .timeout_ms = 5000 };
	char *resp = NULL, *body;

	assert_int_equal(harness_request(&rq, &resp), 200);
	body = strstr(resp, "\r\n\r\n");
	assert_non_null(body);
	body = strdup(body + 4);
	free(resp);
	return body;
}

/* The value of the sample "series" (name and labels as written), or -1 when it is absent. */
static long
sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *line = text; line && *line;
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL)
		if (strncmp(line, series, n) == 0 && line[n] == ' ')
			return strtol(line + n + 1, NULL, 10);
	return -1;
}

static void
test_metrics_show_the_node(void **state)
{
	static const char *const families[] = {
		"# TYPE sandboxd_processes_running gauge",
		"# TYPE sandboxd_capacity_cpus gauge",
		"# TYPE sandboxd_capacity_memory_mb gauge",
		"# TYPE sandboxd_capacity_disk_mb gauge",
		"# TYPE sandboxd_free_cpus gauge",
		"# TYPE sandboxd_free_memory_mb gauge",
		"# TYPE sandboxd_free_disk_mb gauge",
		"# TYPE sandboxd_pool_sandboxes gauge",
		"# TYPE sandboxd_cordoned gauge",
		"# TYPE sandboxd_creates_total counter",
		"# TYPE sandboxd_create_duration_seconds histogram",
	};
	_cleanup_free_ char *m = scrape(), *procs = NULL;
	long created = sample(m, "sandboxd_creates_total{code=\"201\"}"),
	     refused = MAX(0, sample(m, "sandboxd_creates_total{code=\"503\"}")),
	     count = sample(m, "sandboxd_create_duration_seconds_count"), running;
	json_t *a, *p;
	char id[64];

	for (size_t i = 0; i < ARRAY_SIZE(families); i++)
		harness_expect_in(m, families[i]);
	assert_int_equal(sample(m, "sandboxd_capacity_cpus"), 3);
	assert_int_equal(sample(m, "sandboxd_capacity_memory_mb"), 2048);
	assert_int_equal(sample(m, "sandboxd_capacity_disk_mb"), 10000);
	assert_int_equal(sample(m, "sandboxd_free_cpus"), 3);
	assert_int_equal(sample(m, "sandboxd_pool_sandboxes{image=\"sandbox-base\"}"), -1);
	assert_int_equal(sample(m, "sandboxd_cordoned"), 0);
	assert_true(created >= 0 && count >= created);
	assert_int_equal(sample(m, "sandboxd_create_duration_seconds_bucket{le=\"+Inf\"}"), count);
	running = sample(m, "sandboxd_sandboxes{state=\"running\"}");

	/* a user's create moves the counter, the histogram, what is free and what runs */
	a = harness_json_headers(d.sock, alice.hkey, "POST", "/v1/sandboxes",
	                         "{\"cpus\":2,\"memory_mb\":512,\"disk_mb\":2000}", 201, NULL);
	snprintf(id, sizeof(id), "%s", harness_str(a, "id"));
	json_decref(a);
	free(m);
	m = scrape();
	assert_int_equal(sample(m, "sandboxd_creates_total{code=\"201\"}"), created + 1);
	assert_int_equal(sample(m, "sandboxd_create_duration_seconds_count"), count + 1);
	assert_int_equal(sample(m, "sandboxd_create_duration_seconds_bucket{le=\"+Inf\"}"),
	                 count + 1);
	assert_int_equal(sample(m, "sandboxd_free_cpus"), 1);
	assert_int_equal(sample(m, "sandboxd_free_memory_mb"), 1536);
	assert_int_equal(sample(m, "sandboxd_free_disk_mb"), 8000);
	assert_int_equal(sample(m, "sandboxd_sandboxes{state=\"running\"}"), running + 1);
	/* no series names a user */
	harness_expect_not_in(m, "alice");
	harness_expect_not_in(m, "@");

	if (have_agent) {
		procs = strdup_printf("/v1/sandboxes/%s/processes", id);
		p = harness_json(d.sock, "POST", procs, "{\"argv\":[\"sleep\",\"60\"]}", 201);
		json_decref(p);
		free(m);
		m = scrape();
		assert_int_equal(sample(m, "sandboxd_processes_running"), 1);
	}

	/* the cordon flips its gauge, and a refused create is counted under its status */
	cordon(NULL, true);
	free(m);
	m = scrape();
	assert_int_equal(sample(m, "sandboxd_cordoned"), 1);
	expect_error(NULL, "POST", "/v1/sandboxes", "{}", 503, "unavailable", NULL);
	free(m);
	m = scrape();
	assert_int_equal(sample(m, "sandboxd_creates_total{code=\"503\"}"), refused + 1);
	assert_int_equal(sample(m, "sandboxd_creates_total{code=\"201\"}"), created + 1);
	assert_int_equal(sample(m, "sandboxd_create_duration_seconds_count"), count + 2);
	cordon(NULL, false);
	free(m);
	m = scrape();
	assert_int_equal(sample(m, "sandboxd_cordoned"), 0);
	delete (id);
	free(m);
	m = scrape();
	assert_int_equal(sample(m, "sandboxd_free_cpus"), 3);
	assert_int_equal(sample(m, "sandboxd_processes_running"), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_node_describes_itself, case_teardown),
		cmocka_unit_test_teardown(test_capacity_refuses_before_anything_is_made,
		                          case_teardown),
		cmocka_unit_test_teardown(test_cordon_stops_new_sandboxes_only, case_teardown),
		cmocka_unit_test_teardown(test_metrics_show_the_node, case_teardown),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
