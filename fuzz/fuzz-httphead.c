/* fuzz-httphead.c: egress/httphead.c (over lib/http-head.c, the head reader sandboxd's API
 * shares) fed what a guest could send to port 80, whole and cut at every length up to a bound
 * (as a connection's reads would bring it), then the bytes after an accepted head read as the
 * next pipelined request. Invariants: an accepted head lies within the input and the limit,
 * ends in the blank line, names a lowercase DNS host and not both body framings; an accepted
 * prefix stays accepted, with the same fields, however much follows; a refused prefix stays
 * refused; NEED_MORE only below HTTPHEAD_MAX. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "fuzz.h"
#include "httphead.h"
#include "util.h"

#define ALL_PREFIXES 1024 /* every cut below this; sampled above, keeping a run linear-ish */
#define SAMPLED_CUTS 64

static void
check_result(const uint8_t *data, size_t len, enum httphead_result r, const struct httphead *h,
             const char *why)
{
	size_t n;

	if (r == HTTPHEAD_INVALID) {
		FUZZ_CHECK(why && *why);
		return;
	}
	FUZZ_CHECK(why == NULL);
	if (r == HTTPHEAD_NEED_MORE) {
		FUZZ_CHECK(len < HTTPHEAD_MAX);
		return;
	}
	FUZZ_CHECK(r == HTTPHEAD_DONE);
	FUZZ_CHECK(h->head_len <= len && h->head_len <= HTTPHEAD_MAX);
	FUZZ_CHECK(h->head_len >= 4 && memcmp(data + h->head_len - 4, "\r\n\r\n", 4) == 0);
	/* the blank line is the first one: no earlier CRLF CRLF */
	for (size_t i = 0; i + 4 < h->head_len; i++)
		FUZZ_CHECK(memcmp(data + i, "\r\n\r\n", 4) != 0);
	n = strnlen(h->method, sizeof(h->method));
	FUZZ_CHECK(n > 0 && n < sizeof(h->method));
	FUZZ_CHECK(memcmp(data, h->method, n) == 0 && data[n] == ' ');
	FUZZ_CHECK(strcasecmp(h->method, "CONNECT") != 0);
	n = strnlen(h->host, sizeof(h->host));
	FUZZ_CHECK(n > 0 && n <= HTTPHEAD_HOST_MAX);
	for (size_t i = 0; i < n; i++) {
		char c = h->host[i];

		FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
		           c == '_' || c == '.');
	}
	FUZZ_CHECK(h->host[0] != '.' && h->host[n - 1] != '.' && !strstr(h->host, ".."));
	FUZZ_CHECK(h->port <= 65535);
	FUZZ_CHECK(!(h->chunked && h->has_length));
	FUZZ_CHECK(h->has_length || h->body_len == 0);
}

static bool
same_head(const struct httphead *a, const struct httphead *b)
{
	return a->head_len == b->head_len && streq(a->method, b->method) &&
	       streq(a->host, b->host) && a->port == b->port && a->chunked == b->chunked &&
	       a->has_length == b->has_length && a->body_len == b->body_len &&
	       a->keep_alive == b->keep_alive;
}

static void
check_cut(const uint8_t *data, size_t n, enum httphead_result whole_r, const struct httphead *whole)
{
	struct httphead part;
	const char *why = "unset";
	enum httphead_result r = httphead_parse(data, n, &part, &why);

	check_result(data, n, r, &part, why);
	if (r == HTTPHEAD_DONE)
		FUZZ_CHECK(whole_r == HTTPHEAD_DONE && same_head(&part, whole));
	if (r == HTTPHEAD_INVALID)
		FUZZ_CHECK(whole_r == HTTPHEAD_INVALID);
	/* and so, an accepted whole was NEED_MORE at every shorter cut */
	if (whole_r == HTTPHEAD_DONE && n < whole->head_len)
		FUZZ_CHECK(r == HTTPHEAD_NEED_MORE);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct httphead whole, next;
	const char *why = "unset";
	enum httphead_result r = httphead_parse(data, size, &whole, &why);
	size_t step;

	check_result(data, size, r, &whole, why);
	for (size_t n = 0; n < size && n < ALL_PREFIXES; n++)
		check_cut(data, n, r, &whole);
	if (size > ALL_PREFIXES) {
		step = (size - ALL_PREFIXES) / SAMPLED_CUTS + 1;
		for (size_t n = ALL_PREFIXES; n < size; n += step)
			check_cut(data, n, r, &whole);
		if (r == HTTPHEAD_DONE) {
			check_cut(data, whole.head_len - 1, r, &whole);
			check_cut(data, whole.head_len, r, &whole);
		}
	}

	/* the next request on the connection, where a proxy without a body would look */
	if (r == HTTPHEAD_DONE && whole.head_len < size) {
		const uint8_t *rest = data + whole.head_len;
		size_t left = size - whole.head_len;

		why = "unset";
		r = httphead_parse(rest, left, &next, &why);
		check_result(rest, left, r, &next, why);
	}
	return 0;
}
