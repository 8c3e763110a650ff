/* test-httphead.c: egress/httphead.c, the proxy's reader of a guest's HTTP/1.x request heads
 * (over lib/http-head.c), as a table of heads (accepted ones with every field checked, refused
 * ones with a piece of the reason), then fed byte by byte, pipelined, at the size and field
 * limits, and in the request smuggling shapes a second parser behind the proxy could read
 * differently. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "httphead.h"
#include "util.h"

#define IN(s) .in = (s), .len = sizeof(s) - 1

static const struct head_case {
	const char *in;
	size_t len;
	enum httphead_result want;
	const char *why; /* INVALID: a piece of the reason */
	const char *method, *host;
	unsigned port;
	bool chunked, has_length;
	uint64_t body_len;
	bool keep_alive;
} head_cases[] = {
	/* accepted */
	{ IN("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "example.com", .keep_alive = true },
	{ IN("GET /a?b=c HTTP/1.1\r\nHost: Example.COM.\r\nUser-Agent: curl/8\r\n\r\n"),
	  HTTPHEAD_DONE, .method = "GET", .host = "example.com", .keep_alive = true },
	{ IN("GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "example.com", .port = 8080, .keep_alive = true },
	{ IN("GET / HTTP/1.1\r\nhOsT:\texample.com \t\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "example.com", .keep_alive = true },
	{ IN("GET / HTTP/1.1\r\nHost:example.com\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "example.com", .keep_alive = true },
	{ IN("GET / HTTP/1.1\r\nHost: localhost:65535\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "localhost", .port = 65535, .keep_alive = true },
	{ IN("GET / HTTP/1.1\r\nHost: 1.2.3.4.nip.io\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "1.2.3.4.nip.io", .keep_alive = true },
	{ IN("GET / HTTP/1.1\r\nHost: 0x1f.com\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "0x1f.com", .keep_alive = true },
	{ IN("POST /up HTTP/1.1\r\nHost: a.io\r\nContent-Length: 42\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "POST", .host = "a.io", .has_length = true, .body_len = 42,
	  .keep_alive = true },
	{ IN("PUT /x HTTP/1.1\r\nContent-Length: 0\r\nHost: a.io\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "PUT", .host = "a.io", .has_length = true, .keep_alive = true },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: 18446744073709551615\r\n\r\n"),
	  HTTPHEAD_DONE, .method = "POST", .host = "a.io", .has_length = true,
	  .body_len = UINT64_MAX, .keep_alive = true },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: 007\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "POST", .host = "a.io", .has_length = true, .body_len = 7, .keep_alive = true },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding: chunked\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "POST", .host = "a.io", .chunked = true, .keep_alive = true },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\ntransfer-encoding: CHUNKED\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "POST", .host = "a.io", .chunked = true, .keep_alive = true },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\nConnection: close\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "GET", .host = "a.io" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\nConnection: Upgrade, CLOSE\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "GET", .host = "a.io" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"),
	  HTTPHEAD_DONE, .method = "GET", .host = "a.io" },
	{ IN("GET / HTTP/1.0\r\nHost: a.io\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "a.io" },
	{ IN("GET / HTTP/1.0\r\nHost: a.io\r\nConnection: Keep-Alive\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "GET", .host = "a.io", .keep_alive = true },
	{ IN("GET / HTTP/1.0\r\nHost: a.io\r\nConnection: , keep-alive ,\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "GET", .host = "a.io", .keep_alive = true },
	{ IN("GET http://a.io/x HTTP/1.1\r\nHost: a.io\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "a.io", .keep_alive = true },
	{ IN("GET HTTP://A.IO.:80?q HTTP/1.1\r\nHost: a.io\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "GET", .host = "a.io", .keep_alive = true },
	{ IN("GET http://a.io HTTP/1.1\r\nHost: a.io:80\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "a.io", .port = 80, .keep_alive = true },
	{ IN("OPTIONS * HTTP/1.1\r\nHost: a.io\r\n\r\n"), HTTPHEAD_DONE, .method = "OPTIONS",
	  .host = "a.io", .keep_alive = true },
	{ IN("M-SEARCH.15char / HTTP/1.1\r\nHost: a.io\r\n\r\n"), HTTPHEAD_DONE,
	  .method = "M-SEARCH.15char", .host = "a.io", .keep_alive = true },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\nX-Empty:\r\nX-Utf8: caf\xc3\xa9\r\n\r\n"),
	  HTTPHEAD_DONE, .method = "GET", .host = "a.io", .keep_alive = true },
	{ IN("GET / HTTP/1.1\r\nHost: _srv.a-b.io\r\n\r\n"), HTTPHEAD_DONE, .method = "GET",
	  .host = "_srv.a-b.io", .keep_alive = true },

	/* prefixes that may still become a head */
	{ IN(""), HTTPHEAD_NEED_MORE },
	{ IN("GE"), HTTPHEAD_NEED_MORE },
	{ IN("GET / HTTP/1."), HTTPHEAD_NEED_MORE },
	{ IN("GET http:"), HTTPHEAD_NEED_MORE },
	{ IN("GET / HTTP/1.1\r"), HTTPHEAD_NEED_MORE },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\n"), HTTPHEAD_NEED_MORE },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\n\r"), HTTPHEAD_NEED_MORE },
	{ IN("POST / HTTP/1.1\r\nTransfer-Encoding: chu"), HTTPHEAD_NEED_MORE },

	/* refused: the request line */
	{ IN("\r\nGET / HTTP/1.1\r\nHost: a.io\r\n\r\n"), HTTPHEAD_INVALID, "empty line" },
	{ IN("CONNECT a.io:443 HTTP/1.1\r\nHost: a.io:443\r\n\r\n"), HTTPHEAD_INVALID, "CONNECT" },
	{ IN("connect a.io:80 HTTP/1.1\r\n"), HTTPHEAD_INVALID, "CONNECT" },
	{ IN("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), HTTPHEAD_INVALID, "HTTP/2" },
	{ IN("PRI *"), HTTPHEAD_INVALID, "HTTP/2" },
	{ IN("GET * HTTP/1.1\r\nHost: a.io\r\n\r\n"), HTTPHEAD_INVALID, "only for OPTIONS" },
	{ IN("OPTIONS *x HTTP/1.1\r\n"), HTTPHEAD_INVALID, "neither a path" },
	{ IN("GET / HTTP/2.0\r\nHost: a.io\r\n\r\n"), HTTPHEAD_INVALID, "HTTP version" },
	{ IN("GET / HTTP/1.2\r\n"), HTTPHEAD_INVALID, "HTTP version" },
	{ IN("GET / http/1.1\r\n"), HTTPHEAD_INVALID, "HTTP version" },
	{ IN("GET / HTTP/1.1 \r\n"), HTTPHEAD_INVALID, "HTTP version" },
	{ IN("GET /  HTTP/1.1\r\n"), HTTPHEAD_INVALID, "HTTP version" },
	{ IN("GET  / HTTP/1.1\r\n"), HTTPHEAD_INVALID, "empty request target" },
	{ IN("GET /\r\n"), HTTPHEAD_INVALID, "without an HTTP version" },
	{ IN("GET\r\n"), HTTPHEAD_INVALID, "without a target" },
	{ IN(" GET / HTTP/1.1\r\n"), HTTPHEAD_INVALID, "start with a method" },
	{ IN("G@T / HTTP/1.1\r\n"), HTTPHEAD_INVALID, "not a token" },
	{ IN("ABCDEFGHIJKLMNOP / HTTP/1.1\r\n"), HTTPHEAD_INVALID, "longer than 15" },
	{ IN("GET https://a.io/ HTTP/1.1\r\nHost: a.io\r\n\r\n"), HTTPHEAD_INVALID,
	  "neither a path" },
	{ IN("GET a.io/ HTTP/1.1\r\n"), HTTPHEAD_INVALID, "neither a path" },
	{ IN("GET /\x7f HTTP/1.1\r\n"), HTTPHEAD_INVALID, "printable ASCII" },
	{ IN("GET /#top HTTP/1.1\r\n"), HTTPHEAD_INVALID, "fragment" },
	{ IN("GET / HTTP/1.1\rHost: a.io\r\n\r\n"), HTTPHEAD_INVALID, "CR inside" },
	{ IN("GET / HTTP/1.1\nHost: a.io\n\n"), HTTPHEAD_INVALID, "bare LF" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\n\r\n"), HTTPHEAD_INVALID, "bare LF" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\n\n"), HTTPHEAD_INVALID, "bare LF" },

	/* refused: the target's host against Host */
	{ IN("GET http://b.io/ HTTP/1.1\r\nHost: a.io\r\n\r\n"), HTTPHEAD_INVALID, "another host" },
	{ IN("GET http://a.io:8080/ HTTP/1.1\r\nHost: a.io\r\n\r\n"), HTTPHEAD_INVALID,
	  "another host" },
	{ IN("GET http://a.io@b.io/ HTTP/1.1\r\nHost: b.io\r\n\r\n"), HTTPHEAD_INVALID,
	  "user part" },
	{ IN("GET http://[::1]/ HTTP/1.1\r\n"), HTTPHEAD_INVALID, "IP address" },
	{ IN("GET http://10.0.0.1/ HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n"), HTTPHEAD_INVALID,
	  "IP address" },
	{ IN("GET http:/// HTTP/1.1\r\n"), HTTPHEAD_INVALID, "empty host" },
	{ IN("GET http://a%2eio/ HTTP/1.1\r\n"), HTTPHEAD_INVALID, "not a DNS name" },

	/* refused: Host */
	{ IN("GET / HTTP/1.1\r\n\r\n"), HTTPHEAD_INVALID, "no Host" },
	{ IN("GET / HTTP/1.0\r\n\r\n"), HTTPHEAD_INVALID, "no Host" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\nHost: a.io\r\n\r\n"), HTTPHEAD_INVALID, "two Host" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\nhost: b.io\r\n\r\n"), HTTPHEAD_INVALID, "two Host" },
	{ IN("GET / HTTP/1.1\r\nHost:\r\n\r\n"), HTTPHEAD_INVALID, "empty host" },
	{ IN("GET / HTTP/1.1\r\nHost: .\r\n\r\n"), HTTPHEAD_INVALID, "empty host" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io..\r\n\r\n"), HTTPHEAD_INVALID, "empty label" },
	{ IN("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), HTTPHEAD_INVALID, "IP address" },
	{ IN("GET / HTTP/1.1\r\nHost: 127.1:80\r\n\r\n"), HTTPHEAD_INVALID, "IP address" },
	{ IN("GET / HTTP/1.1\r\nHost: 0x7f000001\r\n\r\n"), HTTPHEAD_INVALID, "IP address" },
	{ IN("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), HTTPHEAD_INVALID, "IP address" },
	{ IN("GET / HTTP/1.1\r\nHost: ::1\r\n\r\n"), HTTPHEAD_INVALID, "IP address" },
	{ IN("GET / HTTP/1.1\r\nHost: []\r\n\r\n"), HTTPHEAD_INVALID, "IP address" },
	{ IN("GET / HTTP/1.1\r\nHost: user@a.io\r\n\r\n"), HTTPHEAD_INVALID, "user part" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io:0\r\n\r\n"), HTTPHEAD_INVALID, "port" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io:65536\r\n\r\n"), HTTPHEAD_INVALID, "port" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io:\r\n\r\n"), HTTPHEAD_INVALID, "port" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io:+80\r\n\r\n"), HTTPHEAD_INVALID, "port" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io b.io\r\n"), HTTPHEAD_INVALID, "not a DNS name" },
	{ IN("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"), HTTPHEAD_INVALID, "not a DNS name" },
	{ IN("GET / HTTP/1.1\r\nHost: "
	     "abcdefghij0123456789abcdefghij0123456789abcdefghij"
	     "0123456789abcd.io\r\n\r\n"),
	  HTTPHEAD_INVALID, "longer than 63" },

	/* refused: header lines */
	{ IN("GET / HTTP/1.1\r\nHost : a.io\r\n\r\n"), HTTPHEAD_INVALID, "before ':'" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\n X-Folded: 1\r\n\r\n"), HTTPHEAD_INVALID,
	  "obs-fold" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\nX-A: 1\r\n\tmore\r\n\r\n"), HTTPHEAD_INVALID,
	  "obs-fold" },
	{ IN("GET / HTTP/1.1\r\n: a\r\n"), HTTPHEAD_INVALID, "empty header name" },
	{ IN("GET / HTTP/1.1\r\nNoColon\r\n"), HTTPHEAD_INVALID, "without ':'" },
	{ IN("GET / HTTP/1.1\r\nX(y): 1\r\n"), HTTPHEAD_INVALID, "not a token" },
	{ IN("GET / HTTP/1.1\r\nX-A: a\0b\r\n"), HTTPHEAD_INVALID, "NUL" },
	{ IN("GET / HTTP/1.1\r\nX-A: a\rb\r\n"), HTTPHEAD_INVALID, "CR inside" },
	{ IN("GET / HTTP/1.1\r\nX-A: a\x01\r\n"), HTTPHEAD_INVALID, "control character" },
	{ IN("GET / HTTP/1.1\r\nHost: a.io\r\nConnection: close;x\r\n\r\n"), HTTPHEAD_INVALID,
	  "list of tokens" },

	/* refused: body framing (request smuggling) */
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: 5\r\nTransfer-Encoding: "
	     "chunked\r\n\r\n"),
	  HTTPHEAD_INVALID, "both Content-Length and Transfer-Encoding" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding: chunked\r\nContent-Length: "
	     "5\r\n\r\n"),
	  HTTPHEAD_INVALID, "both Content-Length and Transfer-Encoding" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"),
	  HTTPHEAD_INVALID, "several Content-Length" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
	  HTTPHEAD_INVALID, "several Content-Length" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: 5, 5\r\n\r\n"), HTTPHEAD_INVALID,
	  "not one decimal number" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: -1\r\n\r\n"), HTTPHEAD_INVALID,
	  "not one decimal number" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: +5\r\n\r\n"), HTTPHEAD_INVALID,
	  "not one decimal number" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: 0x10\r\n\r\n"), HTTPHEAD_INVALID,
	  "not one decimal number" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length:\r\n\r\n"), HTTPHEAD_INVALID,
	  "not one decimal number" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: 1 2\r\n\r\n"), HTTPHEAD_INVALID,
	  "not one decimal number" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nContent-Length: 18446744073709551616\r\n\r\n"),
	  HTTPHEAD_INVALID, "too large" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding: chunked, identity\r\n\r\n"),
	  HTTPHEAD_INVALID, "other than one 'chunked'" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
	  HTTPHEAD_INVALID, "other than one 'chunked'" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding: identity\r\n\r\n"),
	  HTTPHEAD_INVALID, "other than one 'chunked'" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding: xchunked\r\n\r\n"),
	  HTTPHEAD_INVALID, "other than one 'chunked'" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
	     "chunked\r\n\r\n"),
	  HTTPHEAD_INVALID, "other than one 'chunked'" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding:\r\n\r\n"), HTTPHEAD_INVALID,
	  "other than one 'chunked'" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding : chunked\r\n\r\n"),
	  HTTPHEAD_INVALID, "before ':'" },
	/* a folded value: the empty first line is refused before the fold is seen */
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding:\r\n chunked\r\n\r\n"),
	  HTTPHEAD_INVALID, "Transfer-Encoding other than" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding: chunked\r\n , identity\r\n\r\n"),
	  HTTPHEAD_INVALID, "obs-fold" },
	{ IN("POST / HTTP/1.1\r\nHost: a.io\r\nTransfer-Encoding: \x0b"
	     "chunked\r\n\r\n"),
	  HTTPHEAD_INVALID, "control character" },
	{ IN("POST / HTTP/1.0\r\nHost: a.io\r\nTransfer-Encoding: chunked\r\n\r\n"),
	  HTTPHEAD_INVALID, "HTTP/1.0" },
};

static const char *
result_name(enum httphead_result r)
{
	return r == HTTPHEAD_DONE ? "DONE" : r == HTTPHEAD_NEED_MORE ? "NEED_MORE" : "INVALID";
}

static void
assert_same_head(const struct httphead *a, const struct httphead *b)
{
	assert_int_equal(a->head_len, b->head_len);
	assert_string_equal(a->method, b->method);
	assert_string_equal(a->host, b->host);
	assert_int_equal(a->port, b->port);
	assert_int_equal(a->chunked, b->chunked);
	assert_int_equal(a->has_length, b->has_length);
	assert_int_equal(a->body_len, b->body_len);
	assert_int_equal(a->keep_alive, b->keep_alive);
}

static void
check_case(const struct head_case *c, size_t i)
{
	struct httphead h;
	const char *why = "unset";
	enum httphead_result r;

	memset(&h, 0xa5, sizeof(h));
	r = httphead_parse((const uint8_t *)c->in, c->len, &h, &why);
	if (r != c->want)
		fail_msg("case %zu '%s': got %s (%s), want %s", i, c->in, result_name(r),
		         why ? why : "-", result_name(c->want));
	if (r == HTTPHEAD_INVALID) {
		assert_non_null(why);
		if (!strstr(why, c->why))
			fail_msg("case %zu '%s': reason '%s' lacks '%s'", i, c->in, why, c->why);
		return;
	}
	assert_null(why);
	if (r != HTTPHEAD_DONE)
		return;
	assert_int_equal(h.head_len, c->len);
	assert_string_equal(h.method, c->method);
	assert_string_equal(h.host, c->host);
	assert_int_equal(h.port, c->port);
	if (h.chunked != c->chunked || h.has_length != c->has_length || h.body_len != c->body_len ||
	    h.keep_alive != c->keep_alive)
		fail_msg("case %zu '%s': chunked %d has_length %d body_len %llu keep_alive %d", i,
		         c->in, h.chunked, h.has_length, (unsigned long long)h.body_len,
		         h.keep_alive);
}

static void
test_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(head_cases); i++)
		check_case(&head_cases[i], i);
}

/* Every accepted head is NEED_MORE at every shorter length and the same DONE with bytes of
 * the next request after it; every refused one stays refused however much follows. */
static void
test_every_split(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(head_cases); i++) {
		const struct head_case *c = &head_cases[i];
		struct httphead whole, part;
		const char *why;
		static const char next[] = "GET / HTTP/1.1\r\n";
		uint8_t *more;

		if (c->want == HTTPHEAD_NEED_MORE)
			continue;
		if (c->want == HTTPHEAD_DONE) {
			assert_int_equal(
			        httphead_parse((const uint8_t *)c->in, c->len, &whole, NULL),
			        HTTPHEAD_DONE);
			for (size_t n = 0; n < c->len; n++) {
				enum httphead_result r =
				        httphead_parse((const uint8_t *)c->in, n, &part, &why);

				if (r != HTTPHEAD_NEED_MORE)
					fail_msg("case %zu cut at %zu: %s (%s)", i, n,
					         result_name(r), why ? why : "-");
			}
		}
		more = malloc(c->len + sizeof(next));
		assert_non_null(more);
		memcpy(more, c->in, c->len);
		memcpy(more + c->len, next, sizeof(next));
		assert_int_equal(httphead_parse(more, c->len + sizeof(next) - 1, &part, &why),
		                 c->want);
		if (c->want == HTTPHEAD_DONE)
			assert_same_head(&part, &whole);
		free(more);
	}
}

/* A valid head fed one byte more at a time, as a connection's reads would bring it. */
static void
test_incremental(void **state)
{
	static const char head[] = "POST http://api.Example.org:8080/v1?x=1 HTTP/1.1\r\n"
	                           "Host: API.example.org.:8080\r\n"
	                           "Content-Length: 11\r\n"
	                           "Connection: keep-alive, Upgrade\r\n"
	                           "X-Trace: abc\t def\r\n\r\n";
	struct httphead h;
	const char *why;

	(void)state;
	for (size_t n = 0; n < sizeof(head) - 1; n++)
		assert_int_equal(httphead_parse((const uint8_t *)head, n, &h, &why),
		                 HTTPHEAD_NEED_MORE);
	assert_int_equal(httphead_parse((const uint8_t *)head, sizeof(head) - 1, &h, &why),
	                 HTTPHEAD_DONE);
	assert_null(why);
	assert_int_equal(h.head_len, sizeof(head) - 1);
	assert_string_equal(h.method, "POST");
	assert_string_equal(h.host, "api.example.org");
	assert_int_equal(h.port, 8080);
	assert_true(h.has_length);
	assert_int_equal(h.body_len, 11);
	assert_false(h.chunked);
	assert_true(h.keep_alive);
}

/* Two requests in one read: the first's head_len and body_len find the second, and the
 * second is read on its own (here naming another host, which the proxy then refuses). */
static void
test_pipelined(void **state)
{
	static const char two[] = "POST /a HTTP/1.1\r\nHost: a.io\r\nContent-Length: 5\r\n\r\n"
	                          "hello"
	                          "GET /b HTTP/1.1\r\nHost: b.io\r\nConnection: close\r\n\r\n";
	struct httphead h;
	size_t second;

	(void)state;
	assert_int_equal(httphead_parse((const uint8_t *)two, sizeof(two) - 1, &h, NULL),
	                 HTTPHEAD_DONE);
	assert_string_equal(h.host, "a.io");
	assert_int_equal(h.head_len, strstr(two, "hello") - two);
	assert_int_equal(h.body_len, 5);
	assert_true(h.keep_alive);
	second = h.head_len + h.body_len;
	assert_memory_equal(two + second, "GET /b", 6);
	assert_int_equal(
	        httphead_parse((const uint8_t *)two + second, sizeof(two) - 1 - second, &h, NULL),
	        HTTPHEAD_DONE);
	assert_string_equal(h.method, "GET");
	assert_string_equal(h.host, "b.io");
	assert_int_equal(h.head_len, sizeof(two) - 1 - second);
	assert_false(h.keep_alive);
}

/* A head of exactly HTTPHEAD_MAX bytes is read; one byte more is refused, and so is every
 * prefix of HTTPHEAD_MAX bytes or more without the blank line: the proxy never buffers more. */
static void
test_size_limit(void **state)
{
	static const char start[] = "GET / HTTP/1.1\r\nHost: a.io\r\nX-Pad: ";
	const size_t fixed = sizeof(start) - 1 + 4; /* the pad line's CRLF, the blank line */
	struct httphead h;
	const char *why;
	uint8_t *buf = malloc(HTTPHEAD_MAX + 2);

	(void)state;
	assert_non_null(buf);
	for (size_t extra = 0; extra <= 1; extra++) {
		size_t total = HTTPHEAD_MAX + extra, pad = total - fixed;

		memcpy(buf, start, sizeof(start) - 1);
		memset(buf + sizeof(start) - 1, 'x', pad);
		memcpy(buf + sizeof(start) - 1 + pad, "\r\n\r\n", 4);
		enum httphead_result r = httphead_parse(buf, total, &h, &why);
		if (extra == 0) {
			assert_int_equal(r, HTTPHEAD_DONE);
			assert_int_equal(h.head_len, HTTPHEAD_MAX);
			assert_int_equal(httphead_parse(buf, total - 1, &h, &why),
			                 HTTPHEAD_NEED_MORE);
		} else {
			assert_int_equal(r, HTTPHEAD_INVALID);
			assert_non_null(strstr(why, "longer than 16384"));
			assert_int_equal(httphead_parse(buf, HTTPHEAD_MAX, &h, &why),
			                 HTTPHEAD_INVALID);
			assert_int_equal(httphead_parse(buf, HTTPHEAD_MAX - 1, &h, &why),
			                 HTTPHEAD_NEED_MORE);
		}
	}
	free(buf);
}

/* At most 64 fields, as sandboxd's own API reads heads: the 65th is refused. */
static void
test_field_limit(void **state)
{
	struct buf b = BUF_INIT(HTTPHEAD_MAX);
	struct httphead h;
	const char *why;

	(void)state;
	assert_int_equal(buf_puts(&b, "GET / HTTP/1.1\r\nHost: a.io\r\n"), 0);
	for (int i = 1; i < 64; i++)
		assert_int_equal(buf_printf(&b, "X-%d: %d\r\n", i, i), 0);
	assert_int_equal(buf_puts(&b, "\r\n"), 0);
	assert_int_equal(httphead_parse((const uint8_t *)b.data, b.len, &h, &why), HTTPHEAD_DONE);
	b.len -= 2;
	assert_int_equal(buf_puts(&b, "X-65: 65\r\n\r\n"), 0);
	assert_int_equal(httphead_parse((const uint8_t *)b.data, b.len, &h, &why),
	                 HTTPHEAD_INVALID);
	assert_non_null(strstr(why, "too many request headers"));
	/* refused as soon as the 65th begins */
	assert_int_equal(httphead_parse((const uint8_t *)b.data, b.len - 8, &h, &why),
	                 HTTPHEAD_INVALID);
	buf_free(&b);
}

/* Nothing is written to the result unless the head is accepted. */
static void
test_untouched_on_failure(void **state)
{
	static const char bad[] = "GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n";
	struct httphead h, before;

	(void)state;
	memset(&h, 0x5a, sizeof(h));
	memcpy(&before, &h, sizeof(h));
	assert_int_equal(httphead_parse((const uint8_t *)bad, sizeof(bad) - 1, &h, NULL),
	                 HTTPHEAD_INVALID);
	assert_memory_equal(&h, &before, sizeof(h));
	assert_int_equal(httphead_parse((const uint8_t *)bad, 10, &h, NULL), HTTPHEAD_NEED_MORE);
	assert_memory_equal(&h, &before, sizeof(h));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_every_split),
		cmocka_unit_test(test_incremental),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_size_limit),
		cmocka_unit_test(test_field_limit),
		cmocka_unit_test(test_untouched_on_failure),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
