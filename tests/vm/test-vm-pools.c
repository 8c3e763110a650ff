/* test-vm-pools.c: warm pools on real VMs (the product sandboxd, QEMU), with egress in network
 * namespaces of the test's own (tests/egress/netns.sh): with `pools: [{size: 2}]` two VMs boot
 * and wait; a create is a claim (answered at once, audited with reason "pool"), its processes
 * get the env it asked for, and the network policy it asked for holds in the guest (an allowed
 * name resolves, another does not), though the VM booted with none; the pool is back at 2
 * shortly after. A create with its own memory boots cold, for comparison (both times are
 * printed). Root only (taps, nftables, namespaces). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "egressnet.h"
#include "harness.h"
#include "util.h"

static struct daemon_proc d;
static char netns[24], policy_dir[256], policy[300];

/* busybox nslookup, as tests/egress reads it: the stub answers an allowed name with the host
 * side of the link (10.200.x), and NXDOMAIN otherwise */
#define ALLOWED_RESOLVES "nslookup allowed.test | grep -A1 '^Name:' | grep -q 'Address: 10.200.'"
#define OTHER_RESOLVES "nslookup other.test | grep -q '^Name:'"
#define OTHER_NXDOMAIN "nslookup other.test | grep -q NXDOMAIN"

static long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int
setup(void **state)
{
	const char *args[] = { "--egress", "on", "--policy", policy, NULL };
	FILE *f;

	if (geteuid() != 0) {
		fprintf(stderr, "skip: the pool's network is checked with egress, which needs root "
		                "(taps, nftables, namespaces)\n");
		exit(77);
	}
	(void)harness_vm_bundle();
	if (harness_tmpdir(policy_dir, sizeof(policy_dir)) < 0)
		return -1;
	snprintf(policy, sizeof(policy), "%s/policy.yaml", policy_dir);
	f = fopen(policy, "w");
	if (!f)
		return -1;
	fputs("pools:\n  - {size: 2}\n", f);
	fclose(f);
	snprintf(netns, sizeof(netns), "sbxtp%d", (int)(getpid() % 100000));
	if (egressnet_up(EGRESS_SRC, netns) < 0) {
		fprintf(stderr, "skip: cannot make network namespaces here\n");
		egressnet_down();
		unlink(policy);
		rmdir(policy_dir);
		exit(77);
	}
	return harness_start_vm(&d, args, NULL);
}

static int
teardown(void **state)
{
	harness_delete_all(d.sock);
	harness_stop(&d, SIGTERM); /* without --keep-sandboxes: the pooled VMs end with it */
	harness_cleanup(&d);
	egressnet_down();
	unlink(policy);
	rmdir(policy_dir);
	return 0;
}

static long
num(const json_t *obj, const char *key)
{
	const json_t *v = json_object_get(obj, key);

	if (!json_is_integer(v))
		fail_msg("'%s' is not a number", key);
	return (long)json_integer_value(v);
}

/* Waits up to timeout_ms for GET /v1/node to say want sandboxes wait in the pool. */
static void
wait_pooled(long want, int timeout_ms)
{
	long until = now_ms() + timeout_ms, have;
	json_t *n;

	for (;;) {
		n = harness_json(d.sock, "GET", "/v1/node", NULL, 200);
		have = num(n, "pooled");
		json_decref(n);
		if (have == want)
			return;
		if (now_ms() > until) {
			harness_print_log_tail(&d, 40);
			fail_msg("the pool did not reach %ld in %d ms (pooled %ld)", want,
			         timeout_ms, have);
		}
		usleep(200000);
	}
}

/* Runs sh -c script in the sandbox; its exit code. */
static int
run_sh(const char *id, const char *script, char **ret_stdout)
{
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s/run", id);
	json_t *body = json_pack("{s:[s,s,s]}", "argv", "sh", "-c", script), *res;
	char *text = json_dumps(body, JSON_COMPACT);
	int code;

	json_decref(body);
	res = harness_json_timeout(d.sock, "POST", path, text, 60000, 200);
	free(text);
	code = (int)json_integer_value(json_object_get(res, "exit_code"));
	if (ret_stdout)
		*ret_stdout = strdup(harness_str(res, "stdout") ?: "");
	json_decref(res);
	return code;
}

/* The script's exit code once it is 0, trying for up to timeout_ms (the table follows a
 * network change in the background); else the last one. */
static int
run_until_ok(const char *id, const char *script, int timeout_ms)
{
	long until = now_ms() + timeout_ms;
	int code;

	while ((code = run_sh(id, script, NULL)) != 0 && now_ms() < until)
		usleep(300000);
	return code;
}

static void
test_claim_binds_env_and_network(void **state)
{
	json_t *sb, *ev, *e, *created = NULL;
	_cleanup_free_ char *events = NULL, *out = NULL;
	long t0, claim_ms, cold_ms;
	char id[64], cold[64];
	size_t i;

	/* two VMs boot (TCG: a while) and wait */
	wait_pooled(2, 300000);

	t0 = now_ms();
	sb = harness_json_timeout(
	        d.sock, "POST", "/v1/sandboxes",
	        "{\"name\":\"warm\",\"env\":{\"GREETING\":\"hello pool\"},"
	        "\"network\":{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\"]}}",
	        300000, 201);
	claim_ms = now_ms() - t0;
	assert_string_equal(harness_str(sb, "state"), "running");
	snprintf(id, sizeof(id), "%s", harness_str(sb, "id"));
	json_decref(sb);

	/* the audit trail says it was claimed from the pool */
	events = strdup_printf("/v1/sandboxes/%s/events", id);
	ev = harness_json(d.sock, "GET", events, NULL, 200);
	json_array_foreach (json_object_get(ev, "events"), i, e)
		if (!created && strcmp(harness_str(e, "type") ?: "", "sandbox.created") == 0)
			created = e;
	assert_non_null(created);
	assert_string_equal(harness_str(created, "reason"), "pool");
	json_decref(ev);

	/* its processes have the env it asked for */
	assert_int_equal(run_sh(id, "printenv GREETING", &out), 0);
	assert_string_equal(out, "aGVsbG8gcG9vbAo="); /* "hello pool\n" */

	/* and the network it asked for, though it booted with none: the allowed name resolves,
	 * another does not */
	assert_int_equal(run_until_ok(id, ALLOWED_RESOLVES, 20000), 0);
	assert_int_not_equal(run_sh(id, OTHER_RESOLVES, NULL), 0);
	assert_int_equal(run_sh(id, OTHER_NXDOMAIN, NULL), 0);

	/* the pool is back at 2 */
	wait_pooled(2, 300000);

	/* a create with its own memory boots, for comparison */
	t0 = now_ms();
	sb = harness_json_timeout(d.sock, "POST", "/v1/sandboxes", "{\"memory_mb\":256}", 300000,
	                          201);
	cold_ms = now_ms() - t0;
	assert_string_equal(harness_str(sb, "state"), "running");
	snprintf(cold, sizeof(cold), "%s", harness_str(sb, "id"));
	json_decref(sb);
	fprintf(stderr, "test-vm-pools: a claim answered in %ld ms, a cold boot in %ld ms\n",
	        claim_ms, cold_ms);
	if (claim_ms * 4 > cold_ms)
		fail_msg("a claim (%ld ms) is not much faster than a boot (%ld ms)", claim_ms,
		         cold_ms);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_claim_binds_env_and_network),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
