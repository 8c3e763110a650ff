/* test-hostile.c: bad and hostile clients against the real daemon: oversized heads and
 * bodies, smuggling shapes, hostile Host and Origin headers, slow and idle clients, and a
 * connection flood. Each gets the documented answer, and none of them stalls the others. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"

static struct daemon_proc p;

static int
setup(void **state)
{
	const char *args[] = { "--max-connections", "64", "--allowed-host", "fd00::1", NULL };

	return harness_start(&p, harness_binary("SANDBOXD_FAKE"), args, NULL);
}

static int
teardown(void **state)
{
	int rc = harness_stop(&p, SIGTERM);

	harness_cleanup(&p);
	/* a clean exit also means no sanitizer report at shutdown */
	return rc == 0 ? 0 : -1;
}

static int
status_of(const char *resp)
{
	int status = -1;

	if (resp)
		sscanf(resp, "HTTP/1.1 %d", &status);
	return status;
}

/* Sends raw bytes and returns the status of the (first) answer, checking the error shape. */
static int
send_raw(const char *req, size_t len, const char *code)
{
	char *resp = NULL;
	int status;

	assert_true(harness_raw(p.sock, 0, req, len, &resp, 15000) >= 0);
	status = status_of(resp);
	if (code) {
		char want[64];
		snprintf(want, sizeof(want), "\"code\":\"%s\"", code);
		if (!strstr(resp, want))
			fail_msg("expected code %s in:\n%s", code, resp);
	}
	free(resp);
	return status;
}

#define RAW(s, code) send_raw((s), sizeof(s) - 1, (code))

static void
test_smuggling_shapes(void **state)
{
	assert_int_equal(RAW("GET /v1/health HTTP/1.1\nHost: localhost\n\n", "invalid_request"),
	                 400);
	assert_int_equal(
	        RAW("GET /v1/health HTTP/1.1\r\nHost: localhost\r\nX-A: 1\r\n  folded\r\n\r\n",
	            "invalid_request"),
	        400);
	assert_int_equal(
	        RAW("POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n"
	            "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	            "invalid_request"),
	        400);
	assert_int_equal(
	        RAW("POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n"
	            "Content-Length: 3\r\n\r\n{}",
	            "invalid_request"),
	        400);
	assert_int_equal(RAW("GET /v1/health HTTP/1.1\r\nHost: localhost\r\nX-A: a\0b\r\n\r\n",
	                     "invalid_request"),
	                 400);
	assert_int_equal(
	        RAW("GET /v1/health HTTP/1.1\r\nHo st: localhost\r\n\r\n", "invalid_request"), 400);
	assert_int_equal(RAW("GET /v1/health HTTP/1.1\r\nHost: localhost\r\nHost: evil\r\n\r\n",
	                     "invalid_request"),
	                 400);
	assert_int_equal(RAW("GET /v1/health HTTP/1.1\r\n\r\n", "invalid_request"), 400);
	assert_int_equal(RAW("POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\n"
	                     "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	                     "invalid_request"),
	                 400);
}

static void
test_oversized(void **state)
{
	size_t big = 20000, n;
	char *req = malloc(big + 256);
	char *body;

	/* a 20 KB header: 431 */
	n = (size_t)snprintf(req, 256, "GET /v1/health HTTP/1.1\r\nHost: localhost\r\nX-Big: ");
	memset(req + n, 'a', big);
	memcpy(req + n + big, "\r\n\r\n", 4);
	assert_int_equal(send_raw(req, n + big + 4, "invalid_request"), 431);
	free(req);

	/* a JSON body of 1 MiB + 1: 413, refused from the announced length alone */
	n = (1u << 20) + 1;
	body = malloc(n + 256);
	{
		int h = snprintf(body, 256,
		                 "POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\n"
		                 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
		                 n);
		memset(body + h, ' ', n);
		assert_int_equal(send_raw(body, (size_t)h + n, "invalid_request"), 413);
	}
	/* the same size sent chunked, with no length announced: still 413 */
	{
		int h = snprintf(
		        body, 256,
		        "POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\n"
		        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
		        "%zx\r\n",
		        n);
		memset(body + h, ' ', n);
		memcpy(body + h + n, "\r\n0\r\n\r\n", 7);
		assert_int_equal(send_raw(body, (size_t)h + n + 7, "invalid_request"), 413);
	}
	free(body);
	/* nothing was created by any of it */
	{
		char *list = NULL;
		assert_int_equal(harness_http(p.sock, "GET", "/v1/sandboxes", NULL, &list), 200);
		assert_string_equal(list, "{\"sandboxes\":[]}");
		free(list);
	}
}

static void
test_host_and_origin_guard(void **state)
{
	char *list = NULL;

	/* DNS rebinding: a name the server does not answer for */
	assert_int_equal(
	        RAW("GET /v1/health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
	            "forbidden_origin"),
	        403);
	/* a cross-origin "simple" POST (text/plain skips the CORS preflight) */
	assert_int_equal(RAW("POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\n"
	                     "Origin: https://evil.example\r\nContent-Type: text/plain\r\n"
	                     "Connection: close\r\n"
	                     "Content-Length: 2\r\n\r\n{}",
	                     "forbidden_origin"),
	                 403);
	assert_int_equal(RAW("GET /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\nOrigin: null\r\n"
	                     "Connection: close\r\n\r\n",
	                     "forbidden_origin"),
	                 403);
	/* an --allowed-host IPv6 address, in a Host header as it must be written */
	assert_int_equal(RAW("GET /v1/health HTTP/1.1\r\nHost: [fd00::1]:7443\r\n"
	                     "Connection: close\r\n\r\n",
	                     NULL),
	                 200);
	assert_int_equal(RAW("GET /v1/health HTTP/1.1\r\nHost: [fd00::2]:7443\r\n"
	                     "Connection: close\r\n\r\n",
	                     "forbidden_origin"),
	                 403);
	/* the same origin is fine */
	assert_int_equal(RAW("GET /v1/health HTTP/1.1\r\nHost: localhost:7443\r\n"
	                     "Origin: http://localhost:7443\r\nConnection: close\r\n\r\n",
	                     NULL),
	                 200);
	assert_int_equal(harness_http(p.sock, "GET", "/v1/sandboxes", NULL, &list), 200);
	assert_string_equal(list, "{\"sandboxes\":[]}");
	free(list);
}

static void
test_pipelining_and_keep_alive(void **state)
{
	static const char two[] =
	        "GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n"
	        "GET /v1/whoami HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
	char *resp = NULL;
	char *second;

	assert_true(harness_raw(p.sock, 0, two, sizeof(two) - 1, &resp, 5000) > 0);
	assert_int_equal(status_of(resp), 200);
	assert_non_null(strstr(resp, "{\"status\":\"ok\"}"));
	second = strstr(resp + 1, "HTTP/1.1 200");
	assert_non_null(second);
	assert_non_null(strstr(second, "\"user\":\"operator\""));
	free(resp);
}

static int
connect_unix(void)
{
	int fd = harness_connect(p.sock, 0);

	assert_true(fd >= 0);
	return fd;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
test_slow_clients_do_not_stall_others(void **state)
{
	enum {
		SLOW = 40
	};
	int fds[SLOW];
	char buf[512];
	double t0;

	/* 40 clients send half a request head and stop (slowloris) */
	for (int i = 0; i < SLOW; i++) {
		fds[i] = connect_unix();
		assert_int_equal(write(fds[i], "GET /v1/health HTTP/1.1\r\nHo", 27), 27);
	}
	/* others are served meanwhile, at once */
	for (int i = 0; i < 20; i++)
		assert_int_equal(harness_http(p.sock, "GET", "/v1/health", NULL, NULL), 200);
	/* the stalled ones are told 408 and closed within the head timeout (10 s) */
	t0 = now_s();
	for (int i = 0; i < SLOW; i++) {
		struct pollfd pfd = { .fd = fds[i], .events = POLLIN };
		ssize_t n;
		assert_int_equal(poll(&pfd, 1, 15000), 1);
		n = read(fds[i], buf, sizeof(buf) - 1);
		assert_true(n > 0);
		buf[n] = '\0';
		assert_non_null(strstr(buf, "HTTP/1.1 408"));
		close(fds[i]);
	}
	assert_true(now_s() - t0 < 15);
}

static void
test_connection_cap(void **state)
{
	/* the daemon runs with --max-connections 64: a flood past it is shed at once, and the
	 * server serves again as soon as the flood goes */
	enum {
		FLOOD = 80
	};
	int fds[FLOOD];
	int shed = 0;
	char c;

	for (int i = 0; i < FLOOD; i++)
		fds[i] = connect_unix();
	usleep(300000);
	for (int i = 0; i < FLOOD; i++) {
		struct pollfd pfd = { .fd = fds[i], .events = POLLIN };
		if (poll(&pfd, 1, 0) == 1 && read(fds[i], &c, 1) == 0)
			shed++;
	}
	assert_true(shed >= FLOOD - 64);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	usleep(200000);
	assert_int_equal(harness_http(p.sock, "GET", "/v1/health", NULL, NULL), 200);
}

static void
test_unknown_paths_and_methods(void **state)
{
	char *body = NULL;

	assert_int_equal(harness_http(p.sock, "GET", "/v1/nope", NULL, &body), 404);
	assert_non_null(strstr(body, "\"code\":\"not_found\""));
	free(body);
	/* a path that exists with other methods: 405, saying which */
	{
		static const char put[] = "PUT /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\n"
		                          "Connection: close\r\n\r\n";
		char *resp = NULL;
		assert_true(harness_raw(p.sock, 0, put, sizeof(put) - 1, &resp, 5000) > 0);
		assert_int_equal(status_of(resp), 405);
		assert_non_null(strstr(resp, "\r\nAllow: GET, POST\r\n"));
		assert_non_null(strstr(resp, "\"code\":\"invalid_request\""));
		free(resp);
	}
	/* a path of the contract this server does not offer yet: 501, not 404 */
	assert_int_equal(harness_http(p.sock, "GET", "/v1/volumes", NULL, &body), 501);
	assert_non_null(strstr(body, "\"code\":\"unsupported\""));
	free(body);
	/* offered by the fake backend: a sandbox that does not exist is not found */
	assert_int_equal(harness_http(p.sock, "POST", "/v1/sandboxes/x/suspend", NULL, &body), 404);
	free(body);
	{
		char path[400];
		memset(path, 'a', sizeof(path));
		memcpy(path, "/v1/sandboxes/", 14);
		path[sizeof(path) - 1] = '\0';
		assert_int_equal(harness_http(p.sock, "GET", path, NULL, &body), 400);
		assert_non_null(strstr(body, "longer than 255 bytes"));
		free(body);
	}
	assert_int_equal(harness_http(p.sock, "GET", "/v1/sandboxes/%00x", NULL, &body), 400);
	free(body);
	/* what the client sent comes back in messages only as safe text */
	assert_int_equal(harness_http(p.sock, "GET", "/v1/sandboxes/%1b%5b2Jx%0a", NULL, &body),
	                 404);
	assert_null(strchr(body, '\x1b'));
	assert_null(strstr(body, "\\u001b"));
	assert_non_null(strstr(body, "sandbox '?[2Jx?' not found"));
	free(body);
	/* a JSON body that is not an object, and one with an unknown field named */
	assert_int_equal(harness_http(p.sock, "POST", "/v1/sandboxes", "[1]", &body), 400);
	free(body);
	assert_int_equal(harness_http(p.sock, "POST", "/v1/sandboxes", "{\"bogus\":1}", &body),
	                 400);
	assert_non_null(strstr(body, "unknown field \\\"bogus\\\""));
	free(body);
}

static long
rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static void
test_memory_stays_bounded(void **state)
{
	/* A second daemon, without ASan's quarantine (which would keep every freed block
	 * resident and hide nothing but the answer). 200 refused 1 MiB bodies, 200 oversized
	 * heads and 500 abandoned connections must leave its memory where it was, give or take
	 * allocator slack; anything that kept them would grow by hundreds of MiB. */
	const char *env[] = { "ASAN_OPTIONS=quarantine_size_mb=0:detect_leaks=1", NULL };
	struct daemon_proc q;
	size_t n = (1u << 20) + 1;
	char *body = malloc(n + 256);
	long before, after;
	int h;

	assert_int_equal(harness_start(&q, harness_binary("SANDBOXD_FAKE"), NULL, env), 0);
	/* warm up: one of each, so lazily allocated state is counted in "before" */
	h = snprintf(body, 256,
	             "POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\n"
	             "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	             "%zx\r\n",
	             n);
	memset(body + h, ' ', n);
	memcpy(body + h + n, "\r\n0\r\n\r\n", 7);
	for (int i = 0; i < 3; i++) {
		char *resp = NULL;
		assert_true(harness_raw(q.sock, 0, body, (size_t)h + n + 7, &resp, 10000) > 0);
		free(resp);
	}
	before = rss_kib(q.pid);
	for (int i = 0; i < 200; i++) {
		char *resp = NULL;
		assert_true(harness_raw(q.sock, 0, body, (size_t)h + n + 7, &resp, 10000) > 0);
		assert_int_equal(status_of(resp), 413);
		free(resp);
	}
	{
		size_t big = 20000;
		char *req = malloc(big + 256);
		size_t k = (size_t)snprintf(req, 256, "GET /v1/health HTTP/1.1\r\nHost: x\r\nX: ");
		memset(req + k, 'a', big);
		for (int i = 0; i < 200; i++) {
			char *resp = NULL;
			assert_true(harness_raw(q.sock, 0, req, k + big, &resp, 10000) > 0);
			free(resp);
		}
		free(req);
	}
	for (int i = 0; i < 500; i++) {
		char *resp = NULL;
		(void)harness_raw(q.sock, 0, "GET /v1/hea", 11, &resp, 0);
		free(resp);
	}
	usleep(300000);
	after = rss_kib(q.pid);
	print_message("daemon RSS: %ld KiB before, %ld KiB after\n", before, after);
	assert_true(before > 0 && after > 0);
	assert_true(after - before < 32 * 1024);
	assert_int_equal(harness_http(q.sock, "GET", "/v1/health", NULL, NULL), 200);
	free(body);
	assert_int_equal(harness_stop(&q, SIGTERM), 0);
	harness_cleanup(&q);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_smuggling_shapes),
		cmocka_unit_test(test_oversized),
		cmocka_unit_test(test_host_and_origin_guard),
		cmocka_unit_test(test_pipelining_and_keep_alive),
		cmocka_unit_test(test_unknown_paths_and_methods),
		cmocka_unit_test(test_connection_cap),
		cmocka_unit_test(test_slow_clients_do_not_stall_others),
		cmocka_unit_test(test_memory_stays_bounded),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
