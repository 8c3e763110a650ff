/* test-pools.c: warm pools against sandboxd-fake (its agent too, where ctest gives it): the
 * policy's `pools: [{size: 2}]` keeps two sandboxes booted that no one sees (GET /v1/node and
 * /metrics count them, every list leaves them out, the node's capacity holds them); a create
 * that asks for nothing a boot fixes is a claim: answered at once, audited with reason "pool",
 * its name, labels, timeouts, owner and env bound, and the pool fills again; a create with its
 * own memory boots as before; a create that needs the room pooled sandboxes hold gets it; a
 * restart of sandboxd discards what was pooled, with --keep-sandboxes too. The fake boots take
 * 1.5 s, so a claim is told from a boot by the time its answer takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define BOOT_MS 1500

static struct daemon_proc d;
static int metrics_port;
static bool have_agent;
static char policy_dir[256], policy[300], addr[64], env_agent[512];

static const char *const env_agent_on[] = { env_agent, "SANDBOXD_FAKE_BOOT_MS=1500", NULL };
static const char *const env_plain[] = { "SANDBOXD_FAKE_BOOT_MS=1500", NULL };

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

static const char *const *
env(void)
{
	return have_agent ? env_agent_on : env_plain;
}

/* The daemon's arguments, with --keep-sandboxes or without. */
static const char *const *
args(bool keep)
{
	static const char *a[16];
	size_t n = 0;

	a[n++] = "--capacity-cpus";
	a[n++] = "3";
	a[n++] = "--capacity-memory-mb";
	a[n++] = "4096";
	a[n++] = "--capacity-disk-mb";
	a[n++] = "100000";
	a[n++] = "--metrics-listen";
	a[n++] = addr;
	a[n++] = "--policy";
	a[n++] = policy;
	if (keep)
		a[n++] = "--keep-sandboxes";
	a[n] = NULL;
	return a;
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
	FILE *f;

	have_agent = guestd && access(guestd, X_OK) == 0;
	metrics_port = harness_free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", metrics_port);
	if (harness_tmpdir(policy_dir, sizeof(policy_dir)) < 0)
		return -1;
	snprintf(policy, sizeof(policy), "%s/policy.yaml", policy_dir);
	f = fopen(policy, "w");
	if (!f)
		return -1;
	fputs("pools:\n  - {size: 2}\n", f);
	fclose(f);
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", guestd ?: "");
	if (harness_start(&d, harness_binary("SANDBOXD_FAKE"), args(false), env()) < 0)
		return -1;
	make_account(&alice);
	make_account(&boss);
	return 0;
}

static int
teardown(void **state)
{
	harness_stop(&d, SIGTERM);
	harness_cleanup(&d);
	unlink(policy);
	rmdir(policy_dir);
	return 0;
}

/* After each case: no sandbox of anyone's left. */
static int
case_teardown(void **state)
{
	harness_delete_all(d.sock);
	return 0;
}

static long
num(const json_t *obj, const char *group, const char *key)
{
	const json_t *g = group ? json_object_get(obj, group) : obj;
	const json_t *v = json_object_get(g, key);

	if (!json_is_integer(v))
		fail_msg("%s%s%s is not a number", group ?: "", group ? "." : "", key);
	return (long)json_integer_value(v);
}

static long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Waits (up to timeout_ms) until GET /v1/node says want sandboxes wait in the pool; returns
 * the node object then (caller decrefs). */
static json_t *
wait_pooled(long want, int timeout_ms)
{
	long until = now_ms() + timeout_ms;
	json_t *n;

	for (;;) {
		n = harness_json(d.sock, "GET", "/v1/node", NULL, 200);
		if (num(n, NULL, "pooled") == want)
			return n;
		if (now_ms() > until)
			fail_msg("the pool did not reach %ld in %d ms (pooled %ld)", want,
			         timeout_ms, num(n, NULL, "pooled"));
		json_decref(n);
		usleep(100000);
	}
}

/* The fake's VMs: the ids of the files in STATE/fake named like a sandbox, as one string. */
static char *
fake_vms(void)
{
	_cleanup_free_ char *dir = strdup_printf("%s/fake", d.state);
	char *out = strdup("");
	DIR *dd = opendir(dir);
	struct dirent *e;

	assert_non_null(dd);
	while ((e = readdir(dd))) {
		char *more;
		if (strncmp(e->d_name, "sbx_", 4) != 0 || strchr(e->d_name, '.'))
			continue;
		more = strdup_printf("%s%s ", out, e->d_name);
		free(out);
		out = more;
	}
	closedir(dd);
	return out;
}

/* How many sandboxes hdrs (NULL: the operator) lists, terminated ones too. */
static size_t
listed(const char *hdrs)
{
	json_t *l = harness_json_headers(d.sock, hdrs, "GET", "/v1/sandboxes", NULL, 200, NULL);
	size_t n = json_array_size(json_object_get(l, "sandboxes"));

	json_decref(l);
	return n;
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

/* The sandbox.created record of ref (as hdrs sees it). */
static json_t *
created_record(const char *hdrs, const char *ref)
{
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s/events", ref);
	json_t *j = harness_json_headers(d.sock, hdrs, "GET", path, NULL, 200, NULL), *e, *found;
	size_t i;

	found = NULL;
	json_array_foreach (json_object_get(j, "events"), i, e)
		if (!found && harness_str(e, "type") &&
		    strcmp(harness_str(e, "type"), "sandbox.created") == 0)
			found = json_incref(e);
	json_decref(j);
	assert_non_null(found);
	return found;
}

static void
test_pool_fills_and_hides(void **state)
{
	json_t *n = wait_pooled(2, 15000);
	_cleanup_free_ char *m = NULL, *vms = NULL;

	/* the node counts them: in pools and pooled, and in what is allocated */
	assert_int_equal(num(json_object_get(n, "pools"), NULL, "sandbox-base"), 2);
	assert_int_equal(num(n, "allocated", "cpus"), 2);
	assert_int_equal(num(n, "allocated", "memory_mb"), 1024);
	assert_int_equal(num(n, "free", "cpus"), 1);
	assert_int_equal(num(n, "allocated", "sandboxes"), 0);
	assert_int_equal(num(n, NULL, "running"), 0);
	json_decref(n);
	/* and two VMs run for them */
	vms = fake_vms();
	assert_int_equal(strlen(vms), 2 * strlen("sbx_0123456789abcdef "));
	/* no one sees them: not the operator, an admin or a user */
	assert_int_equal(listed(NULL), 0);
	assert_int_equal(listed(boss.hkey), 0);
	assert_int_equal(listed(alice.hkey), 0);
	{
		char id[32], path[64];
		snprintf(id, sizeof(id), "%.20s", vms);
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
		json_decref(harness_json(d.sock, "GET", path, NULL, 404));
		json_decref(harness_json(d.sock, "DELETE", path, NULL, 404));
	}
	/* metrics: the pool's gauge, and no sandbox by state */
	m = scrape();
	assert_int_equal(sample(m, "sandboxd_pool_sandboxes{image=\"sandbox-base\"}"), 2);
	assert_int_equal(sample(m, "sandboxd_sandboxes{state=\"running\"}"), 0);
	assert_int_equal(sample(m, "sandboxd_free_cpus"), 1);
}

static void
test_create_is_a_claim(void **state)
{
	_cleanup_free_ char *before = NULL, *after = NULL, *path = NULL, *needle = NULL;
	json_t *n = wait_pooled(2, 15000), *sb, *rec, *names;
	long t0, took;
	char id[32];

	json_decref(n);
	before = fake_vms();
	t0 = now_ms();
	sb = harness_json_headers(
	        d.sock, alice.hkey, "POST", "/v1/sandboxes",
	        "{\"name\":\"warm\",\"labels\":{\"team\":\"a\"},"
	        "\"env\":{\"GREETING\":\"hello pool\"},\"idle_timeout_secs\":600}",
	        201, NULL);
	took = now_ms() - t0;
	/* it ran already: no boot was waited for */
	assert_string_equal(harness_str(sb, "state"), "running");
	if (took >= BOOT_MS)
		fail_msg("a claim took %ld ms, as long as a boot (%d ms)", took, BOOT_MS);
	snprintf(id, sizeof(id), "%s", harness_str(sb, "id"));
	needle = strdup_printf("%s ", id);
	assert_non_null(strstr(before, needle)); /* one of the pool's VMs */
	/* what the create asked for is bound to it */
	assert_string_equal(harness_str(sb, "name"), "warm");
	assert_string_equal(harness_str(sb, "owner"), alice.email);
	assert_string_equal(harness_str(json_object_get(sb, "labels"), "team"), "a");
	assert_int_equal(num(sb, NULL, "idle_timeout_secs"), 600);
	names = json_object_get(sb, "env_names");
	assert_int_equal(json_array_size(names), 1);
	assert_string_equal(json_string_value(json_array_get(names, 0)), "GREETING");
	json_decref(sb);
	/* the audit trail says it came from a pool */
	rec = created_record(alice.hkey, "warm");
	assert_string_equal(harness_str(rec, "reason"), "pool");
	assert_string_equal(harness_str(rec, "name"), "warm");
	assert_string_equal(harness_str(rec, "sandbox"), id);
	json_decref(rec);
	/* alice lists it, by its name */
	assert_int_equal(listed(alice.hkey), 1);
	/* its processes get its environment */
	if (have_agent) {
		json_t *r;
		path = strdup_printf("/v1/sandboxes/%s/run", id);
		r = harness_json_headers(d.sock, alice.hkey, "POST", path,
		                         "{\"argv\":[\"printenv\",\"GREETING\"]}", 200, NULL);
		assert_int_equal(num(r, NULL, "exit_code"), 0);
		assert_string_equal(harness_str(r, "stdout"), "aGVsbG8gcG9vbAo="); /* hello pool */
		json_decref(r);
	}
	/* the pool fills again behind it, and alice's sandbox is not among those pooled */
	n = wait_pooled(2, 15000);
	assert_int_equal(num(n, "allocated", "sandboxes"), 1);
	assert_int_equal(num(n, "allocated", "cpus"), 3);
	json_decref(n);
	assert_true(harness_file_contains(d.log, "claimed from the pool of 'sandbox-base'"));
	after = fake_vms();
	assert_int_equal(strlen(after), 3 * strlen("sbx_0123456789abcdef "));
}

static void
test_fixed_create_boots(void **state)
{
	_cleanup_free_ char *before = NULL, *needle = NULL;
	json_t *n = wait_pooled(2, 15000), *sb, *rec;
	long t0, took;

	json_decref(n);
	before = fake_vms();
	t0 = now_ms();
	sb = harness_json_headers(d.sock, alice.hkey, "POST", "/v1/sandboxes",
	                          "{\"name\":\"cold\",\"memory_mb\":256}", 201, NULL);
	took = now_ms() - t0;
	assert_string_equal(harness_str(sb, "state"), "running");
	assert_int_equal(num(sb, NULL, "memory_mb"), 256);
	if (took < BOOT_MS - 100)
		fail_msg("a create with its own memory took %ld ms: no boot (%d ms)", took,
		         BOOT_MS);
	needle = strdup_printf("%s ", harness_str(sb, "id"));
	assert_null(strstr(before, needle));
	rec = created_record(alice.hkey, "cold");
	assert_null(json_object_get(rec, "reason"));
	json_decref(rec);
	json_decref(sb);
	/* the pool was left alone */
	n = wait_pooled(2, 5000);
	json_decref(n);
	/* a claim now is the newest: it lists before the cold one (newest first), though its
	 * VM booted before */
	sb = harness_json_headers(d.sock, alice.hkey, "POST", "/v1/sandboxes",
	                          "{\"name\":\"claimed-after-cold\"}", 201, NULL);
	rec = created_record(alice.hkey, "claimed-after-cold");
	assert_string_equal(harness_str(rec, "reason"), "pool");
	json_decref(rec);
	json_decref(sb);
	n = harness_json_headers(d.sock, alice.hkey, "GET", "/v1/sandboxes", NULL, 200, NULL);
	assert_string_equal(harness_str(json_array_get(json_object_get(n, "sandboxes"), 0), "name"),
	                    "claimed-after-cold");
	json_decref(n);
}

static void
test_pooled_give_way_to_a_create(void **state)
{
	json_t *n = wait_pooled(2, 15000), *sb;
	char path[64];

	json_decref(n);
	/* 2 cpus, with 1 of the node's 3 free: only with a pooled sandbox's room */
	sb = harness_json_headers(d.sock, alice.hkey, "POST", "/v1/sandboxes",
	                          "{\"cpus\":2,\"memory_mb\":256}", 201, NULL);
	assert_string_equal(harness_str(sb, "state"), "running");
	assert_true(harness_file_contains(d.log, "ended to make room for a create"));
	n = harness_json(d.sock, "GET", "/v1/node", NULL, 200);
	assert_true(num(n, NULL, "pooled") <= 1);
	assert_true(num(n, "allocated", "cpus") <= 3);
	json_decref(n);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(sb, "id"));
	json_decref(sb);
	json_decref(harness_json(d.sock, "DELETE", path, NULL, 204));
	/* with the room back, the pool fills again */
	n = wait_pooled(2, 15000);
	json_decref(n);
}

/* Stops sandboxd (keep: with --keep-sandboxes), starts it again, and checks that what was
 * pooled is gone: no VM of it runs, no list shows it (terminated or not), and the pool filled
 * again with new sandboxes. */
static void
restart_discards(bool keep)
{
	_cleanup_free_ char *old = NULL, *now = NULL;
	json_t *n = wait_pooled(2, 15000);
	size_t shown = listed(NULL); /* the terminated ones of the cases before */
	char *save = NULL;

	json_decref(n);
	old = fake_vms();
	assert_int_equal(harness_stop(&d, SIGTERM), 0);
	assert_int_equal(harness_restart(&d, harness_binary("SANDBOXD_FAKE"), args(keep), env()),
	                 0);
	n = wait_pooled(2, 15000);
	json_decref(n);
	assert_int_equal(listed(NULL), shown);
	now = fake_vms();
	for (char *id = strtok_r(old, " ", &save); id; id = strtok_r(NULL, " ", &save)) {
		_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s", id);
		if (strstr(now, id))
			fail_msg("the pooled sandbox %s outlived the restart", id);
		json_decref(harness_json(d.sock, "GET", path, NULL, 404));
	}
	assert_int_equal(strlen(now), 2 * strlen("sbx_0123456789abcdef "));
}

static void
test_restart_discards_pooled(void **state)
{
	/* without --keep-sandboxes, the shutdown ends them with the rest */
	restart_discards(false);
	/* with it, their VMs run on, and the next sandboxd's sweep ends them (no row owns them) */
	restart_discards(true);
	restart_discards(true);
	assert_true(harness_file_contains(d.log, "reconciler: removed the layer of 'sbx_"));
	/* and from there to a sandboxd without it */
	restart_discards(false);
	assert_true(harness_file_contains(d.log, "reconciler: removed the layer of 'sbx_"));
}

/* A claimed sandbox is an ordinary one from then on: with --keep-sandboxes its record (its env
 * values) was written at the claim, and a restart takes it back, env and all. */
static void
test_claimed_survives_a_keep_restart(void **state)
{
	_cleanup_free_ char *record = NULL;
	json_t *n, *sb;
	char id[32];

	assert_int_equal(harness_stop(&d, SIGTERM), 0);
	assert_int_equal(harness_restart(&d, harness_binary("SANDBOXD_FAKE"), args(true), env()),
	                 0);
	n = wait_pooled(2, 15000);
	json_decref(n);
	sb = harness_json_headers(d.sock, alice.hkey, "POST", "/v1/sandboxes",
	                          "{\"name\":\"kept\",\"env\":{\"GREETING\":\"hello pool\"}}", 201,
	                          NULL);
	snprintf(id, sizeof(id), "%s", harness_str(sb, "id"));
	json_decref(sb);
	record = strdup_printf("%s/records/%s.json", d.state, id);
	assert_true(harness_file_contains(record, "hello pool"));

	assert_int_equal(harness_stop(&d, SIGTERM), 0);
	assert_int_equal(harness_restart(&d, harness_binary("SANDBOXD_FAKE"), args(true), env()),
	                 0);
	assert_true(harness_file_contains(d.log, "1 sandbox(es) taken back"));
	sb = harness_json_headers(d.sock, alice.hkey, "GET", "/v1/sandboxes/kept", NULL, 200, NULL);
	assert_string_equal(harness_str(sb, "id"), id);
	assert_string_equal(harness_str(sb, "state"), "running");
	json_decref(sb);
	if (have_agent) {
		_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s/run", id);
		json_t *r = NULL;
		/* its agent answers again once it is connected */
		for (int i = 0; i < 50; i++) {
			char *body = NULL;
			int st = harness_http_headers(d.sock, "POST", path, alice.hkey,
			                              "{\"argv\":[\"printenv\",\"GREETING\"]}",
			                              NULL, &body);
			if (st == 200) {
				r = json_loads(body, 0, NULL);
				free(body);
				break;
			}
			free(body);
			usleep(100000);
		}
		assert_non_null(r);
		assert_string_equal(harness_str(r, "stdout"), "aGVsbG8gcG9vbAo=");
		json_decref(r);
	}
	n = wait_pooled(2, 15000);
	json_decref(n);
	/* back to a sandboxd without --keep-sandboxes */
	assert_int_equal(harness_stop(&d, SIGTERM), 0);
	assert_int_equal(harness_restart(&d, harness_binary("SANDBOXD_FAKE"), args(false), env()),
	                 0);
}

/* Counts the lines of a log that hold needle. */
static int
count_lines(const char *path, const char *needle)
{
	char line[4096];
	FILE *f = fopen(path, "r");
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* A pool whose sandboxes fail to boot does not spin: each failure is ended and said, and the
 * pool waits longer before the next (1 s, 2 s, 4 s, ...). None of it is anyone's to see. */
static void
test_failing_pool_backs_off(void **state)
{
	struct daemon_proc f;
	char dir[256], path[300];
	const char *const a[] = { "--policy", path, NULL };
	int created;
	FILE *pf;

	assert_int_equal(harness_tmpdir(dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/policy.yaml", dir);
	pf = fopen(path, "w");
	assert_non_null(pf);
	fputs("pools:\n  - {image: fake/fail-boot, size: 2}\n", pf);
	fclose(pf);
	assert_int_equal(harness_start(&f, harness_binary("SANDBOXD_FAKE"), a, NULL), 0);
	sleep(4);
	created = count_lines(f.log, "created for the pool of 'fake/fail-boot'");
	/* 2 at once, then after 1 s and 2 s at most 2 more each: 6, with a second's slack 8 */
	if (created < 2 || created > 8)
		fail_msg("a failing pool made %d sandboxes in 4 s", created);
	assert_true(harness_file_contains(f.log, "the pool tries again in 1 s"));
	assert_true(harness_file_contains(f.log, "the pool tries again in 2 s"));
	{
		json_t *n = harness_json(f.sock, "GET", "/v1/node", NULL, 200);
		assert_int_equal(num(n, NULL, "pooled"), 0);
		json_decref(n);
		n = harness_json(f.sock, "GET", "/v1/sandboxes", NULL, 200);
		assert_int_equal(json_array_size(json_object_get(n, "sandboxes")), 0);
		json_decref(n);
	}
	harness_stop(&f, SIGTERM);
	harness_cleanup(&f);
	unlink(path);
	rmdir(dir);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_pool_fills_and_hides, case_teardown),
		cmocka_unit_test_teardown(test_create_is_a_claim, case_teardown),
		cmocka_unit_test_teardown(test_fixed_create_boots, case_teardown),
		cmocka_unit_test_teardown(test_pooled_give_way_to_a_create, case_teardown),
		cmocka_unit_test_teardown(test_restart_discards_pooled, case_teardown),
		cmocka_unit_test_teardown(test_claimed_survives_a_keep_restart, case_teardown),
		cmocka_unit_test(test_failing_pool_backs_off),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
