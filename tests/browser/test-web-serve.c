/* test-web-serve.c: the dashboard's files as sandboxd-fake serves them, over TCP and the unix
 * socket, without a credential: the page and every file it loads (found by following
 * index.html and the modules' imports), their types and security headers, HEAD, the refusals
 * (404 for an unknown file, 405, the Host guard), and that everything else is still the API's.
 * No browser needed: tests/browser/test-dashboard.c drives Chromium. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define CSP                                                                                        \
	"Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self' "        \
	"'unsafe-inline'; connect-src 'self'; img-src 'self' data:; font-src 'self'; "             \
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n"

static struct daemon_proc d;
static int port;
static char tokdir[256];

static int
setup(void **state)
{
	static const char secret[] = "web-serve-test-token-0123456789\n";
	char token[300], addr[64];

	if (harness_tmpdir(tokdir, sizeof(tokdir)) < 0)
		return -1;
	snprintf(token, sizeof(token), "%s/token", tokdir);
	if (write_file_atomic(token, secret, sizeof(secret) - 1, 0600) < 0)
		return -1;
	port = harness_free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	{
		const char *args[] = { "--listen", addr, "--token-file", token, NULL };
		return harness_start(&d, harness_binary("SANDBOXD_FAKE"), args, NULL);
	}
}

static int
teardown(void **state)
{
	char token[300];
	int rc = harness_stop(&d, SIGTERM);

	harness_cleanup(&d);
	snprintf(token, sizeof(token), "%s/token", tokdir);
	unlink(token);
	rmdir(tokdir);
	return rc == 0 ? 0 : -1;
}

/* One request on its own connection (TCP, or the socket when sock is set); the whole answer. */
static char *
req(const char *sock, const char *method, const char *path, const char *headers)
{
	char host[32], *resp = NULL;

	snprintf(host, sizeof(host), "127.0.0.1:%d", port);
	assert_true(harness_request(&(struct harness_req){ .sock = sock,
	                                                   .port = port,
	                                                   .method = method,
	                                                   .path = path,
	                                                   .host = host,
	                                                   .headers = headers,
	                                                   .timeout_ms = 10000 },
	                            &resp) > 0);
	return resp;
}

static const char *
body_of(const char *resp)
{
	const char *b = strstr(resp, "\r\n\r\n");

	assert_non_null(b);
	return b + 4;
}

static long
content_length(const char *resp)
{
	const char *h = strstr(resp, "Content-Length: ");

	assert_non_null(h);
	return strtol(h + 16, NULL, 10);
}

/* GET path: 200 with type and the dashboard's headers, the body whole; returns the body. */
static char *
get_file(const char *path, const char *type)
{
	char *resp = req(NULL, "GET", path, NULL), *body;
	char want[128];

	if (!strstr(resp, "HTTP/1.1 200 OK\r\n"))
		fail_msg("GET %s: %.200s", path, resp);
	snprintf(want, sizeof(want), "Content-Type: %s\r\n", type);
	harness_expect_in(resp, want);
	harness_expect_in(resp, CSP);
	harness_expect_in(resp, "X-Frame-Options: DENY\r\n");
	harness_expect_in(resp, "Referrer-Policy: no-referrer\r\n");
	harness_expect_in(resp, "X-Content-Type-Options: nosniff\r\n");
	assert_int_equal(content_length(resp), (long)strlen(body_of(resp)));
	/* nothing is fetched from anywhere but sandboxd */
	harness_expect_not_in(body_of(resp), "sourceMappingURL");
	body = strdup(body_of(resp));
	free(resp);
	return body;
}

static const char *
type_of(const char *name)
{
	size_t n = strlen(name);

	if (n > 4 && strcmp(name + n - 4, ".css") == 0)
		return "text/css; charset=utf-8";
	return "text/javascript; charset=utf-8";
}

/* Fetches every "/assets/..." (or, in a module, "./x.js") that text names, and what those
 * name in turn; returns how many files there were. */
static int
follow(const char *text, const char *quote_prefix, char seen[][64], int nseen)
{
	for (const char *p = text; (p = strstr(p, quote_prefix)); p += strlen(quote_prefix)) {
		const char *start = p + strlen(quote_prefix), *end = strpbrk(start, "'\"");
		char name[64], path[96];
		bool dup = false;
		char *body;

		if (!end || end - start >= (long)sizeof(name) || end == start)
			continue;
		memcpy(name, start, (size_t)(end - start));
		name[end - start] = '\0';
		for (int i = 0; i < nseen; i++)
			dup = dup || strcmp(seen[i], name) == 0;
		if (dup)
			continue;
		assert_true(nseen < 32);
		snprintf(seen[nseen++], sizeof(seen[0]), "%s", name);
		snprintf(path, sizeof(path), "/assets/%s", name);
		body = get_file(path, type_of(name));
		/* static imports, and the terminal's modules, loaded when a terminal opens */
		if (strstr(name, ".js") || strstr(name, ".mjs")) {
			nseen = follow(body, "from './", seen, nseen);
			nseen = follow(body, "import('./", seen, nseen);
		}
		free(body);
	}
	return nseen;
}

static void
test_page_and_assets(void **state)
{
	char seen[32][64];
	char *page = get_file("/", "text/html; charset=utf-8"), *again;
	int n;

	harness_expect_in(page, "<script type=\"module\" src=\"/assets/app.js\"></script>");
	/* no inline script: every <script has a src */
	for (const char *p = page; (p = strstr(p, "<script")); p++)
		assert_true(strncmp(p, "<script type=\"module\" src=\"/assets/", 35) == 0);
	harness_expect_not_in(page, "http://");
	harness_expect_not_in(page, "https://");
	n = follow(page, "\"/assets/", seen, 0);
	/* app.css, xterm.css, app.js and its modules, xterm.js and the fit addon */
	assert_true(n >= 8);
	again = get_file("/index.html", "text/html; charset=utf-8");
	assert_string_equal(page, again);
	free(again);
	/* the query is not part of the name */
	again = get_file("/?from=bookmark", "text/html; charset=utf-8");
	free(again);
	free(page);

	/* the socket serves it too, without a credential being needed */
	{
		char *resp = req(d.sock, "GET", "/assets/app.css", NULL);
		harness_expect_in(resp, "HTTP/1.1 200 OK\r\n");
		free(resp);
	}
}

static void
test_head(void **state)
{
	char text[512], *resp = NULL, *get = req(NULL, "GET", "/assets/xterm.mjs", NULL);
	long len = content_length(get);
	const char *second;

	/* GET's headers and no body: the next answer on the connection follows the blank line */
	snprintf(text, sizeof(text),
	         "HEAD /assets/xterm.mjs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
	         "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n",
	         port, port);
	assert_true(harness_raw(NULL, port, text, strlen(text), &resp, 10000) > 0);
	assert_true(len > 100000);
	assert_int_equal(content_length(resp), len);
	harness_expect_in(resp, "Content-Type: text/javascript; charset=utf-8\r\n");
	second = body_of(resp);
	if (strncmp(second, "HTTP/1.1 200 OK\r\n", 17) != 0)
		fail_msg("after the HEAD's headers: %.80s", second);
	harness_expect_in(second, "{\"status\":\"ok\"}");
	free(resp);
	free(get);
}

static void
test_refusals(void **state)
{
	static const char *unknown[] = { "/assets/nope.js",  "/assets/",
		                         "/assets/%61pp.js", "/assets/../index.html",
		                         "/assets/app.js/x", "/assets/index.html" };
	char *resp;

	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		resp = req(NULL, "GET", unknown[i], NULL);
		if (!strstr(resp, "HTTP/1.1 404 Not Found\r\n"))
			fail_msg("GET %s: %.120s", unknown[i], resp);
		harness_expect_in(resp, "{\"error\":{\"code\":\"not_found\"");
		free(resp);
	}
	resp = req(NULL, "POST", "/", NULL); /* with Content-Length: 0 */
	harness_expect_in(resp, "HTTP/1.1 405 Method Not Allowed\r\n");
	harness_expect_in(resp, "Allow: GET, HEAD\r\n");
	free(resp);
	resp = req(NULL, "DELETE", "/assets/app.js", NULL);
	harness_expect_in(resp, "HTTP/1.1 405 Method Not Allowed\r\n");
	free(resp);
	/* the Host guard runs first */
	{
		char text[256], *r = NULL;
		snprintf(text, sizeof(text),
		         "GET / HTTP/1.1\r\nHost: rebind.example\r\nConnection: close\r\n\r\n");
		assert_true(harness_raw(NULL, port, text, strlen(text), &r, 10000) > 0);
		harness_expect_in(r, "HTTP/1.1 403 Forbidden\r\n");
		harness_expect_in(r, "forbidden_origin");
		harness_expect_not_in(r, "<html");
		free(r);
	}
	/* any other path is the API's, and needs a credential */
	resp = req(NULL, "GET", "/favicon.ico", NULL);
	harness_expect_in(resp, "HTTP/1.1 401 Unauthorized\r\n");
	free(resp);
	resp = req(NULL, "GET", "/v1/whoami", NULL);
	harness_expect_in(resp, "HTTP/1.1 401 Unauthorized\r\n");
	free(resp);
}

/* The page's files are kept by the browser and asked about again on every visit: an ETag,
 * "no-cache", and a bodiless 304 while they are unchanged. API answers are never stored. */
static void
test_revalidation(void **state)
{
	char *resp = req(NULL, "GET", "/assets/app.js", NULL), *again;
	char etag[64] = "", hdr[128];
	const char *p = strstr(resp, "ETag: ");

	harness_expect_in(resp, "Cache-Control: no-cache\r\n");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "ETag: %63[^\r]", etag), 1);
	assert_true(etag[0] == '"' && strlen(etag) == 18);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-None-Match: %s\r\n", etag);
	again = req(NULL, "GET", "/assets/app.js", hdr);
	harness_expect_in(again, "HTTP/1.1 304 Not Modified\r\n");
	harness_expect_in(again, etag);
	assert_string_equal(body_of(again), "");
	free(again);
	/* another file's tag is no match */
	again = req(NULL, "GET", "/assets/app.css", hdr);
	harness_expect_in(again, "HTTP/1.1 200 OK\r\n");
	free(again);
	again = req(NULL, "GET", "/v1/health", NULL);
	harness_expect_in(again, "Cache-Control: no-store\r\n");
	harness_expect_not_in(again, "ETag");
	free(again);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_page_and_assets),
		cmocka_unit_test(test_head),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_revalidation),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
