/* test-http-head.c: lib/http-head.c, the one reader of HTTP/1.x request heads, on its own:
 * the fields it returns, a read resumed over growing bytes agreeing with one read of them
 * all, which refusals are 431, what the line still arriving shows with and without partial,
 * and the order in which a caller's hooks are asked. Its rules case by case are tested
 * through its two readers: tests/data/http (lib/http.c) and test-httphead.c (the proxy). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "http-head.h"
#include "util.h"

static enum http_head_result
read_all(struct http_head_reader *r, const struct http_head_rules *rules, const char *s, size_t n)
{
	http_head_reader_init(r, rules);
	return http_head_read(r, (const uint8_t *)s, n);
}

static enum http_head_result
read_str(struct http_head_reader *r, const struct http_head_rules *rules, const char *s)
{
	return read_all(r, rules, s, strlen(s));
}

static void
assert_field(const char *s, const struct http_head *h, unsigned i, const char *name,
             const char *value)
{
	const struct http_head_field *f = &h->fields[i];

	assert_true(i < h->nfields);
	assert_int_equal(f->name_len, strlen(name));
	assert_memory_equal(s + f->name_off, name, f->name_len);
	assert_int_equal(f->value_len, strlen(value));
	assert_memory_equal(s + f->value_off, value, f->value_len);
}

static void
test_fields(void **state)
{
	static const char s[] = "POST /a?b HTTP/1.1\r\nHost: x.io\r\nX-Pad:  \t v a l \t\r\n"
	                        "Content-Length: 12\r\nConnection: keep-alive, Upgrade\r\n"
	                        "Upgrade: websocket\r\nX-Empty:\r\n\r\nbody bytes..";
	struct http_head_reader r;
	const struct http_head *h = &r.h;

	(void)state;
	assert_int_equal(read_all(&r, NULL, s, sizeof(s) - 1), HTTP_HEAD_DONE);
	assert_int_equal(h->len, strstr(s, "body") - s);
	assert_int_equal(h->method_len, 4);
	assert_memory_equal(s + h->target_off, "/a?b", h->target_len);
	assert_int_equal(h->target_len, 4);
	assert_int_equal(h->minor, 1);
	assert_int_equal(h->host, 0);
	assert_true(h->has_length && !h->chunked);
	assert_int_equal(h->content_length, 12);
	assert_true(h->keep_alive && h->upgrade);
	assert_int_equal(h->nfields, 6);
	assert_field(s, h, 0, "Host", "x.io");
	assert_field(s, h, 1, "X-Pad", "v a l");
	assert_field(s, h, 5, "X-Empty", "");
	/* a result stays */
	assert_int_equal(http_head_read(&r, (const uint8_t *)"x", 1), HTTP_HEAD_DONE);
}

static void
assert_same_head(const struct http_head *a, const struct http_head *b)
{
	assert_int_equal(a->len, b->len);
	assert_int_equal(a->method_len, b->method_len);
	assert_int_equal(a->target_off, b->target_off);
	assert_int_equal(a->target_len, b->target_len);
	assert_int_equal(a->minor, b->minor);
	assert_int_equal(a->host, b->host);
	assert_int_equal(a->chunked, b->chunked);
	assert_int_equal(a->has_length, b->has_length);
	assert_int_equal(a->content_length, b->content_length);
	assert_int_equal(a->keep_alive, b->keep_alive);
	assert_int_equal(a->upgrade, b->upgrade);
	assert_int_equal(a->nfields, b->nfields);
	assert_memory_equal(a->fields, b->fields, a->nfields * sizeof(a->fields[0]));
}

/* The same bytes read at once and in growing prefixes end alike, with the same head. */
static void
test_resumed(void **state)
{
	static const char *const heads[] = {
		"GET / HTTP/1.0\r\nConnection: close, keep-alive\r\nX: 1\r\n\r\n",
		"PUT /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\n\r\n",
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(heads); i++) {
		const char *s = heads[i];
		size_t n = strlen(s);
		struct http_head_reader whole, grown;
		enum http_head_result want = read_all(&whole, NULL, s, n),
		                      got = HTTP_HEAD_NEED_MORE;

		http_head_reader_init(&grown, NULL);
		for (size_t k = 0; k <= n && got == HTTP_HEAD_NEED_MORE; k++)
			got = http_head_read(&grown, (const uint8_t *)s, k);
		assert_int_equal(got, want);
		if (want == HTTP_HEAD_INVALID)
			assert_string_equal(grown.why, whole.why);
		else
			assert_same_head(&grown.h, &whole.h);
	}
}

static void
test_too_large(void **state)
{
	struct http_head_reader r;
	struct buf b = BUF_INIT(HTTP_HEAD_MAX * 2);

	(void)state;
	assert_int_equal(buf_puts(&b, "GET / HTTP/1.1\r\nHost: a\r\n"), 0);
	for (int i = 1; i < HTTP_HEAD_FIELDS_MAX; i++)
		assert_int_equal(buf_printf(&b, "X-%d: %d\r\n", i, i), 0);
	assert_int_equal(read_all(&r, NULL, b.data, b.len), HTTP_HEAD_NEED_MORE);
	assert_int_equal(buf_puts(&b, "\r\n"), 0);
	assert_int_equal(read_all(&r, NULL, b.data, b.len), HTTP_HEAD_DONE);
	assert_int_equal(r.h.nfields, HTTP_HEAD_FIELDS_MAX);
	b.len -= 2;
	assert_int_equal(buf_puts(&b, "X-65: 65\r\n\r\n"), 0);
	assert_int_equal(read_all(&r, NULL, b.data, b.len), HTTP_HEAD_INVALID);
	assert_int_equal(r.status, 431);
	assert_non_null(strstr(r.why, "too many request headers"));

	/* 16 KiB without the blank line: refused there, never buffered further */
	buf_reset(&b);
	assert_int_equal(buf_puts(&b, "GET / HTTP/1.1\r\nX: "), 0);
	while (b.len < HTTP_HEAD_MAX)
		assert_int_equal(buf_putc(&b, 'x'), 0);
	assert_int_equal(read_all(&r, NULL, b.data, b.len - 1), HTTP_HEAD_NEED_MORE);
	assert_int_equal(read_all(&r, NULL, b.data, b.len), HTTP_HEAD_INVALID);
	assert_int_equal(r.status, 431);
	assert_non_null(strstr(r.why, "request head too large"));
	/* a fault in a whole line is 400 */
	assert_int_equal(read_str(&r, NULL, "GET / HTTP/1.1\r\nX : 1\r\n"), HTTP_HEAD_INVALID);
	assert_int_equal(r.status, 400);
	buf_free(&b);
}

/* Without partial a line is judged once whole; with it, as far as its bytes go. */
static void
test_partial(void **state)
{
	static const struct http_head_rules partial = { .partial = true };
	static const char s[] = "GET / HTTP/1.1\r\nContent-Length: 1x";
	struct http_head_reader r;

	(void)state;
	assert_int_equal(read_all(&r, NULL, s, sizeof(s) - 1), HTTP_HEAD_NEED_MORE);
	assert_int_equal(read_all(&r, &partial, s, sizeof(s) - 1), HTTP_HEAD_INVALID);
	assert_non_null(strstr(r.why, "not one decimal number"));
	/* a line ended by CR is whole but for its LF */
	assert_int_equal(read_str(&r, &partial, "GET / HTTP/1.1\r\n\r"), HTTP_HEAD_INVALID);
	assert_non_null(strstr(r.why, "missing Host"));
	assert_int_equal(read_str(&r, NULL, "GET / HTTP/1.1\r\n\r"), HTTP_HEAD_NEED_MORE);
	/* nothing judged on the line arriving is kept */
	assert_int_equal(read_str(&r, &partial, "GET / HTTP/1.1\r\nHost: a"), HTTP_HEAD_NEED_MORE);
	assert_int_equal(r.h.host, -1);
	assert_int_equal(r.h.nfields, 0);
}

static unsigned calls;

static const char *
refuse_target(void *data, const uint8_t *method, size_t method_len, const uint8_t *t, size_t n,
              bool partial)
{
	calls++;
	return n == 2 && !partial && memcmp(t, "/x", 2) == 0 ? "target refused" : NULL;
}

static const char *
refuse_field(void *data, const uint8_t *name, size_t name_len, const uint8_t *v, size_t n,
             bool partial)
{
	calls++;
	return n == 3 && memcmp(v, "bad", 3) == 0 ? "field refused" : NULL;
}

static const char *
refuse_head(void *data, const uint8_t *bytes, const struct http_head *h)
{
	calls++;
	return h->host < 0 ? "head refused" : NULL;
}

/* Hooks are asked after the shared rules of their part, and the head hook before the rule
 * that HTTP/1.1 needs a Host. */
static void
test_hooks(void **state)
{
	static const struct http_head_rules rules = {
		.target = refuse_target,
		.field = refuse_field,
		.head = refuse_head,
	};
	struct http_head_reader r;

	(void)state;
	calls = 0;
	assert_int_equal(read_str(&r, &rules, "GET /x HTTP/1.1\r\n"), HTTP_HEAD_INVALID);
	assert_string_equal(r.why, "target refused");
	assert_int_equal(read_str(&r, &rules, "GET /\x01 HTTP/1.1\r\n"), HTTP_HEAD_INVALID);
	assert_non_null(strstr(r.why, "control character"));
	assert_int_equal(read_str(&r, &rules, "GET / HTTP/1.1\r\nA: bad\r\n"), HTTP_HEAD_INVALID);
	assert_string_equal(r.why, "field refused");
	assert_int_equal(read_str(&r, &rules, "GET / HTTP/1.1\r\nA:\x01\r\n"), HTTP_HEAD_INVALID);
	assert_non_null(strstr(r.why, "control character"));
	assert_int_equal(read_str(&r, &rules, "GET / HTTP/1.1\r\n\r\n"), HTTP_HEAD_INVALID);
	assert_string_equal(r.why, "head refused");
	assert_true(calls >= 4);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fields),    cmocka_unit_test(test_resumed),
		cmocka_unit_test(test_too_large), cmocka_unit_test(test_partial),
		cmocka_unit_test(test_hooks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
