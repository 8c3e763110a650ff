/* test-metrics.c: --metrics-listen serves Prometheus text at /metrics on loopback and nothing
 * else there (no API, no credential), refuses any address but loopback, and counts sandboxes
 * by state as they change. Egress counters appear only where egress runs (tests/egress). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"

static char *
get(int port, const char *path)
{
	const struct harness_req rq = {
		.port = port, .method = "GET", .path = path, .host = "127.0.0.1", .timeout_ms = 5000
	};
	char *resp = NULL;

	assert_true(harness_request(&rq, &resp) > 0);
	return resp;
}

static void
test_metrics(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc d;
	char addr[64], *out = NULL;
	int port = harness_free_port();
	json_t *sb;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	{
		const char *args[] = { "--metrics-listen", addr, NULL };
		assert_int_equal(harness_start(&d, bin, args, NULL), 0);
	}
	out = get(port, "/metrics");
	harness_expect_in(out, "HTTP/1.1 200");
	harness_expect_in(out, "# TYPE sandboxd_sandboxes gauge");
	harness_expect_in(out, "sandboxd_sandboxes{state=\"running\"} 0");
	harness_expect_in(out, "sandboxd_egress_enabled 0");
	free(out);

	sb = harness_json(d.sock, "POST", "/v1/sandboxes", "{}", 201);
	json_decref(sb);
	out = get(port, "/metrics");
	harness_expect_in(out, "sandboxd_sandboxes{state=\"running\"} 1");
	free(out);

	/* the API is not served there, with or without a token */
	out = get(port, "/v1/sandboxes");
	harness_expect_in(out, "HTTP/1.1 404");
	harness_expect_not_in(out, "sbx_");
	free(out);
	sb = harness_json(d.sock, "GET", "/v1/capabilities", NULL, 200);
	assert_true(json_is_true(json_object_get(json_object_get(sb, "capabilities"), "metrics")));
	json_decref(sb);
	assert_int_equal(harness_stop(&d, SIGTERM), 0);
	harness_cleanup(&d);

	/* no credential: only loopback */
	{
		const char *args[] = { "--socket", "/tmp/sbx-metrics-never.sock",
			               "--metrics-listen", "0.0.0.0:9100", NULL };
		assert_int_not_equal(harness_run(bin, args, NULL, &out), 0);
		harness_expect_in(out, "--metrics-listen '0.0.0.0:9100' must be a loopback");
		free(out);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metrics),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
