/* test-http.c: lib/http.c's request parser, driven by tests/data/http (NAME.req holds the raw
 * bytes of a connection, NAME.expect what must come out; see the README there), plus table
 * tests for the query and path-segment decoders. Every case also runs the way the server
 * streams a body on: stopped at each head (stop_at_body) and the body taken out piece by
 * piece; it must come to the same requests, bodies and refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include "http.h"
#include "datacases.h"
#include "util.h"

#define HTTP_DATA_DIR TEST_DATA_DIR "/http"
#define DEFAULT_BODY_LIMIT (1u << 20)
#define CASE_MAX (1u << 20)
#define ALL_SPLITS_MAX 2048 /* inputs up to this size are also cut in two at every offset */

struct directive {
	unsigned line;
	unsigned request; /* 1-based; 0 for directives about the whole connection */
	char *key;
	char *arg; /* unescaped */
	size_t arg_len;
};

struct expect {
	struct directive *d;
	size_t n;
	uint64_t body_limit;
	int status; /* 0: no refusal */
	unsigned requests;
	bool incomplete;
};

struct run {
	const char *name; /* "whole", "bytewise", "split at N" */
	bool streamed;    /* stop at each head, and take the body out as it comes */
	unsigned requests;
	int status;
	const char *message;
	bool started; /* a request was still in progress at the end */
};

/* \r \n \t \\ \xHH in expectation values; everything else is literal. */
static int
unescape(const char *s, char **ret, size_t *ret_len)
{
	size_t n = strlen(s), o = 0;
	char *out = malloc(n + 1);

	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '\\' && i + 1 < n) {
			char e = s[++i];
			if (e == 'r')
				c = '\r';
			else if (e == 'n')
				c = '\n';
			else if (e == 't')
				c = '\t';
			else if (e == '\\')
				c = '\\';
			else if (e == 'x' && i + 2 < n) {
				char hex[3] = { s[i + 1], s[i + 2], '\0' };
				char *end;
				long v = strtol(hex, &end, 16);
				if (*end || end != hex + 2) {
					free(out);
					return -EINVAL;
				}
				c = (char)v;
				i += 2;
			} else {
				free(out);
				return -EINVAL;
			}
		}
		out[o++] = c;
	}
	out[o] = '\0';
	*ret = out;
	*ret_len = o;
	return 0;
}

static void
expect_free(struct expect *e)
{
	for (size_t i = 0; i < e->n; i++) {
		free(e->d[i].key);
		free(e->d[i].arg);
	}
	free(e->d);
}

static bool
yes_no(const struct directive *d)
{
	if (streq(d->arg, "yes"))
		return true;
	if (!streq(d->arg, "no"))
		fail_msg("line %u: '%s' takes yes or no", d->line, d->key);
	return false;
}

static void
load_expect(const char *path, struct expect *e)
{
	static const char *const global[] = { "status",    "message-contains", "requests",
		                              "pipelined", "incomplete",       "body-limit",
		                              NULL };
	static const char *const per_request[] = {
		"method",  "path",        "target",        "query",
		"version", "header",      "no-header",     "header-count",
		"body",    "body-length", "keep-alive",    "chunked",
		"upgrade", "query-param", "query-invalid", NULL,
	};
	_cleanup_free_ char *text = NULL;
	unsigned line = 0, request = 1;
	bool requests_given = false;
	size_t len;
	char *s, *nl;

	*e = (struct expect){ .body_limit = DEFAULT_BODY_LIMIT };
	if (read_file_max(path, CASE_MAX, &text, &len) < 0)
		fail_msg("cannot read %s", path);
	for (s = text; *s; s = nl ? nl + 1 : s + strlen(s)) {
		struct directive d = { .line = ++line };
		char *sp, *end;
		bool known = false;

		nl = strchr(s, '\n');
		if (nl)
			*nl = '\0';
		if (*s == '#' || *s == '\0')
			continue;
		sp = strchr(s, ' ');
		d.key = strndup(s, sp ? (size_t)(sp - s) : strlen(s));
		assert_non_null(d.key);
		if (unescape(sp ? sp + 1 : "", &d.arg, &d.arg_len) < 0)
			fail_msg("%s:%u: bad escape", path, line);
		if (streq(d.key, "request")) {
			request = (unsigned)strtoul(d.arg, &end, 10);
			if (*end || request == 0)
				fail_msg("%s:%u: 'request' takes a number from 1", path, line);
			free(d.key);
			free(d.arg);
			continue;
		}
		for (size_t i = 0; global[i]; i++)
			if (streq(d.key, global[i]))
				known = true;
		if (known) {
			if (streq(d.key, "status"))
				e->status = (int)strtol(d.arg, NULL, 10);
			else if (streq(d.key, "requests") || streq(d.key, "pipelined")) {
				e->requests = (unsigned)strtoul(d.arg, NULL, 10);
				requests_given = true;
			} else if (streq(d.key, "incomplete"))
				e->incomplete = true;
			else if (streq(d.key, "body-limit"))
				e->body_limit = strtoull(d.arg, NULL, 10);
		} else {
			for (size_t i = 0; per_request[i]; i++)
				if (streq(d.key, per_request[i]))
					known = true;
			if (!known)
				fail_msg("%s:%u: unknown directive '%s'", path, line, d.key);
			d.request = request;
		}
		e->d = realloc(e->d, (e->n + 1) * sizeof(*e->d));
		assert_non_null(e->d);
		e->d[e->n++] = d;
	}
	if (!requests_given)
		e->requests = e->status || e->incomplete ? 0 : 1;
}

static bool
query_has(const char *query, const char *key, const char *value, bool *ret_invalid)
{
	char k[1024], v[1024];
	size_t pos = 0;
	bool found = false;
	int r;

	while ((r = http_query_next(query, &pos, k, sizeof(k), v, sizeof(v))) > 0)
		if (streq(k, key) && streq(v, value))
			found = true;
	*ret_invalid = r < 0;
	return found;
}

static void
check_request(const char *name, const struct run *run, const struct expect *e,
              const struct http_request *req, unsigned index)
{
	for (size_t i = 0; i < e->n; i++) {
		const struct directive *d = &e->d[i];
		const char *k = d->key, *got = NULL, *want = d->arg, *v;
		char version[16], hname[128];
		bool invalid = false;

		if (d->request != index)
			continue;
		if (streq(k, "method"))
			got = http_method_str(req->method);
		else if (streq(k, "path"))
			got = req->path;
		else if (streq(k, "target"))
			got = req->target;
		else if (streq(k, "query"))
			got = req->query;
		else if (streq(k, "version")) {
			snprintf(version, sizeof(version), "%u.%u", req->http_major,
			         req->http_minor);
			got = version;
		} else if (streq(k, "header") || streq(k, "no-header") ||
		           streq(k, "header-count")) {
			const char *sp = strchr(d->arg, ' ');
			snprintf(hname, sizeof(hname), "%.*s",
			         (int)(sp ? (size_t)(sp - d->arg) : strlen(d->arg)), d->arg);
			v = http_req_header(req, hname);
			if (streq(k, "no-header")) {
				if (v)
					fail_msg("%s [%s] line %u: header '%s' is present: '%s'",
					         name, run->name, d->line, hname, v);
				continue;
			}
			if (streq(k, "header-count")) {
				unsigned want_n = sp ? (unsigned)strtoul(sp + 1, NULL, 10) : 0;
				if (http_req_header_count(req, hname) != want_n)
					fail_msg("%s [%s] line %u: %u '%s' headers, expected %u",
					         name, run->name, d->line,
					         http_req_header_count(req, hname), hname, want_n);
				continue;
			}
			if (!v)
				fail_msg("%s [%s] line %u: no header '%s'", name, run->name,
				         d->line, hname);
			got = v;
			want = sp ? sp + 1 : "";
		} else if (streq(k, "body")) {
			if (req->body.len != d->arg_len ||
			    (d->arg_len && memcmp(req->body.data, d->arg, d->arg_len)))
				fail_msg("%s [%s] line %u: body is %zu bytes '%.*s', expected '%s'",
				         name, run->name, d->line, req->body.len,
				         (int)MIN(req->body.len, 200),
				         req->body.data ? req->body.data : "", d->arg);
			continue;
		} else if (streq(k, "body-length")) {
			if (req->body.len != strtoull(d->arg, NULL, 10))
				fail_msg("%s [%s] line %u: body is %zu bytes, expected %s", name,
				         run->name, d->line, req->body.len, d->arg);
			continue;
		} else if (streq(k, "keep-alive") || streq(k, "chunked") || streq(k, "upgrade")) {
			bool have = streq(k, "keep-alive") ? req->keep_alive
			            : streq(k, "chunked")  ? req->chunked
			                                   : req->upgrade;
			if (have != yes_no(d))
				fail_msg("%s [%s] line %u: %s is %s", name, run->name, d->line, k,
				         have ? "yes" : "no");
			continue;
		} else if (streq(k, "query-param")) {
			const char *sp = strchr(d->arg, ' ');
			_cleanup_free_ char *key =
			        strndup(d->arg, sp ? (size_t)(sp - d->arg) : strlen(d->arg));
			assert_non_null(key);
			if (!query_has(req->query, key, sp ? sp + 1 : "", &invalid))
				fail_msg("%s [%s] line %u: query '%s' has no %s='%s'%s", name,
				         run->name, d->line, req->query, key, sp ? sp + 1 : "",
				         invalid ? " (it is malformed)" : "");
			continue;
		} else if (streq(k, "query-invalid")) {
			(void)query_has(req->query, "", "", &invalid);
			if (!invalid)
				fail_msg("%s [%s] line %u: query '%s' decodes without an error",
				         name, run->name, d->line, req->query);
			continue;
		}
		if (!got || !streq(got, want))
			fail_msg("%s [%s] line %u: %s is '%s', expected '%s'", name, run->name,
			         d->line, k, got ? got : "(null)", want);
	}
}

static uint64_t
body_limit(const struct http_request *req _unused_, void *data)
{
	return ((const struct expect *)data)->body_limit;
}

/* Feeds the bytes in pieces ending at cuts[], the way the server does: unconsumed bytes are
 * offered again with the next piece, and a complete request is checked, then reset. */
static void
run_case(const char *name, const char *data, size_t size, const size_t *cuts, size_t ncuts,
         const struct expect *e, struct run *run)
{
	struct http_req_parser hp;
	struct buf taken = BUF_INIT(SIZE_MAX / 2);
	size_t start = 0;

	http_req_parser_init(&hp, body_limit, (void *)e);
	hp.stop_at_body = run->streamed;
	for (size_t c = 0; c < ncuts && !run->status; c++) {
		while (start < cuts[c]) {
			size_t used = 0;
			int r = http_req_feed(&hp, data + start, cuts[c] - start, &used);

			if (r < 0) {
				assert_int_equal(r, -EBADMSG);
				run->status = hp.err_status;
				run->message = hp.err_message;
				break;
			}
			if (run->streamed) {
				/* what the server hands on: the body's bytes so far, then none */
				assert_int_equal(
				        buf_append(&taken, hp.req.body.data, hp.req.body.len), 0);
				buf_reset(&hp.req.body);
			}
			if (r == HTTP_FEED_HEAD) {
				assert_true(run->streamed);
				assert_int_equal(hp.phase, HTTP_PHASE_BODY);
				assert_int_equal(taken.len, 0);
				start += used;
				continue;
			}
			if (r == 0) {
				assert_int_equal(used, cuts[c] - start);
				start = cuts[c];
				break;
			}
			start += used;
			if (run->streamed) {
				/* the whole body, for the checks below */
				assert_int_equal(buf_append(&hp.req.body, taken.data, taken.len),
				                 0);
				buf_reset(&taken);
			}
			run->requests++;
			if (run->requests > e->requests)
				fail_msg("%s [%s]: more than the %u requests expected", name,
				         run->name, e->requests);
			check_request(name, run, e, &hp.req, run->requests);
			if (hp.req.upgrade)
				goto out;
			http_req_parser_reset(&hp);
		}
	}
	run->started = !run->status && http_req_started(&hp);
out:
	http_req_parser_done(&hp);
	buf_free(&taken);
	for (size_t i = 0; i < e->n; i++)
		if (streq(e->d[i].key, "message-contains") &&
		    (!run->message || !strstr(run->message, e->d[i].arg)))
			fail_msg("%s [%s]: refused with '%s', expected a message containing '%s'",
			         name, run->name, run->message ? run->message : "(none)",
			         e->d[i].arg);
	if (run->status != e->status)
		fail_msg("%s [%s]: status %d ('%s'), expected %d", name, run->name, run->status,
		         run->message ? run->message : "no refusal", e->status);
	if (run->requests != e->requests)
		fail_msg("%s [%s]: %u requests, expected %u", name, run->name, run->requests,
		         e->requests);
	if (run->started != e->incomplete)
		fail_msg("%s [%s]: the input ends %s", name, run->name,
		         run->started ? "inside a request" : "between requests");
}

static void
test_case(void **state)
{
	const char *name = *state;
	_cleanup_free_ char *req_path = strdup_printf("%s/%s.req", HTTP_DATA_DIR, name);
	_cleanup_free_ char *exp_path = strdup_printf("%s/%s.expect", HTTP_DATA_DIR, name);
	_cleanup_free_ char *data = NULL;
	_cleanup_free_ size_t *cuts = NULL;
	struct expect e;
	size_t size;

	assert_non_null(req_path);
	assert_non_null(exp_path);
	if (read_file_max(req_path, CASE_MAX, &data, &size) < 0)
		fail_msg("cannot read %s", req_path);
	load_expect(exp_path, &e);
	cuts = calloc(size + 1, sizeof(*cuts));
	assert_non_null(cuts);

	/* all at once */
	cuts[0] = size;
	run_case(name, data, size, cuts, 1, &e, &(struct run){ .name = "whole" });
	run_case(name, data, size, cuts, 1, &e,
	         &(struct run){ .name = "whole, streamed", .streamed = true });
	/* one byte at a time */
	for (size_t i = 0; i < size; i++)
		cuts[i] = i + 1;
	run_case(name, data, size, cuts, size, &e, &(struct run){ .name = "bytewise" });
	run_case(name, data, size, cuts, size, &e,
	         &(struct run){ .name = "bytewise, streamed", .streamed = true });
	/* in two pieces, cut at every offset */
	for (size_t at = 1; size <= ALL_SPLITS_MAX && at < size; at++) {
		char label[48];
		snprintf(label, sizeof(label), "split at %zu", at);
		cuts[0] = at;
		cuts[1] = size;
		run_case(name, data, size, cuts, 2, &e, &(struct run){ .name = label });
		snprintf(label, sizeof(label), "split at %zu, streamed", at);
		run_case(name, data, size, cuts, 2, &e,
		         &(struct run){ .name = label, .streamed = true });
	}
	expect_free(&e);
}

static void
test_query_next(void **state)
{
	static const struct {
		const char *query, *pairs; /* pairs: "k=v;" each, then "!" for an error */
	} cases[] = {
		{ "", "" },
		{ "&&&", "" },
		{ "a=1", "a=1;" },
		{ "a=1&b=2", "a=1;b=2;" },
		{ "a=1&&b=2&", "a=1;b=2;" },
		{ "flag", "flag=;" },
		{ "e=", "e=;" },
		{ "=v", "=v;" },
		{ "a=x+y", "a=x y;" },
		{ "x+y=1", "x y=1;" },
		{ "a=%2B", "a=+;" },
		{ "a=%41%62%2f%2F", "a=Ab//;" },
		{ "label=team%3Dml", "label=team=ml;" },
		{ "label=a=b", "label=a=b;" },
		{ "a=%e2%82%ac", "a=\xe2\x82\xac;" },
		{ "a=1&b=%zz&c=3", "a=1;!" },
		{ "a=%4", "!" },
		{ "a=%", "!" },
		{ "a=%%41", "!" },
		{ "a=%g1", "!" },
		{ "%=1", "!" },
		{ "a=%00", "!" },
		{ "%00=1", "!" },
		{ "a=b%00c", "!" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char key[64], value[64], got[512] = "";
		size_t pos = 0, n = 0;
		int r;

		while ((r = http_query_next(cases[i].query, &pos, key, sizeof(key), value,
		                            sizeof(value))) > 0) {
			n += (size_t)snprintf(got + n, sizeof(got) - n, "%s=%s;", key, value);
			assert_true(n < sizeof(got));
		}
		if (r < 0) {
			assert_int_equal(r, -EINVAL);
			snprintf(got + n, sizeof(got) - n, "!");
		}
		if (!streq(got, cases[i].pairs))
			fail_msg("query '%s': got '%s', expected '%s'", cases[i].query, got,
			         cases[i].pairs);
	}
}

static void
test_query_next_sizes(void **state)
{
	char key[4], value[3];
	size_t pos = 0;

	/* at most size-1 bytes each: 3 for the key, 2 for the value */
	assert_int_equal(http_query_next("abc=de", &pos, key, sizeof(key), value, sizeof(value)),
	                 1);
	assert_string_equal(key, "abc");
	assert_string_equal(value, "de");
	pos = 0;
	assert_int_equal(http_query_next("abcd=1", &pos, key, sizeof(key), value, sizeof(value)),
	                 -EINVAL);
	pos = 0;
	assert_int_equal(http_query_next("a=def", &pos, key, sizeof(key), value, sizeof(value)),
	                 -EINVAL);
	/* an escape counts as one byte */
	pos = 0;
	assert_int_equal(
	        http_query_next("%41%42%43=%44%45", &pos, key, sizeof(key), value, sizeof(value)),
	        1);
	assert_string_equal(key, "ABC");
	assert_string_equal(value, "DE");
	/* the position moves past each pair and stops at the end */
	pos = 0;
	assert_int_equal(http_query_next("a=1&b=2", &pos, key, sizeof(key), value, sizeof(value)),
	                 1);
	assert_int_equal(pos, 4);
	assert_int_equal(http_query_next("a=1&b=2", &pos, key, sizeof(key), value, sizeof(value)),
	                 1);
	assert_int_equal(pos, 7);
	assert_int_equal(http_query_next("a=1&b=2", &pos, key, sizeof(key), value, sizeof(value)),
	                 0);
}

static void
test_segment_decode(void **state)
{
	static const struct {
		const char *seg;
		int r;
		const char *out;
	} cases[] = {
		{ "sbx_0123456789abcdef", 0, "sbx_0123456789abcdef" },
		{ "", 0, "" },
		{ "my-box", 0, "my-box" },
		{ "python%3A3.13-slim", 0, "python:3.13-slim" },
		{ "a%20b", 0, "a b" },
		{ "a+b", 0, "a+b" }, /* '+' is a space only in a query */
		{ "%e2%82%AC", 0, "\xe2\x82\xac" },
		{ "..", 0, ".." }, /* decoding is not path policy; the routes judge names */
		{ "%2F", -EINVAL, NULL },
		{ "a%2fb", -EINVAL, NULL },
		{ "%00", -EINVAL, NULL },
		{ "a%00b", -EINVAL, NULL },
		{ "%", -EINVAL, NULL },
		{ "%4", -EINVAL, NULL },
		{ "%zz", -EINVAL, NULL },
		{ "%-1", -EINVAL, NULL },
	};
	char out[64];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int r = http_segment_decode(cases[i].seg, strlen(cases[i].seg), out, sizeof(out));
		if (r != cases[i].r)
			fail_msg("segment '%s': %d, expected %d", cases[i].seg, r, cases[i].r);
		if (r == 0 && !streq(out, cases[i].out))
			fail_msg("segment '%s': '%s', expected '%s'", cases[i].seg, out,
			         cases[i].out);
	}
	/* only n bytes are read: the rest of the path is not part of the segment */
	assert_int_equal(http_segment_decode("abc/def", 3, out, sizeof(out)), 0);
	assert_string_equal(out, "abc");
	/* an escape cut off by n is refused, not read past */
	assert_int_equal(http_segment_decode("a%41", 3, out, sizeof(out)), -EINVAL);
	/* the output never overflows: size-1 bytes and a NUL */
	assert_int_equal(http_segment_decode("abcd", 4, out, 4), -E2BIG);
	assert_int_equal(http_segment_decode("abc", 3, out, 4), 0);
	assert_string_equal(out, "abc");
	/* an image reference in one segment: its slashes come encoded */
	assert_int_equal(http_segment_decode("a%2Fb", 5, out, sizeof(out)), -EINVAL);
	assert_int_equal(http_segment_decode_name("h%3A5000%2Fa%2Fb%3A1", 20, out, sizeof(out)), 0);
	assert_string_equal(out, "h:5000/a/b:1");
	assert_int_equal(http_segment_decode_name("a%00b", 5, out, sizeof(out)), -EINVAL);
}

static void
test_status_line(void **state)
{
	struct buf b = BUF_INIT(128);

	assert_string_equal(http_status_text(431), "Request Header Fields Too Large");
	assert_string_equal(http_status_text(413), "Content Too Large");
	assert_string_equal(http_status_text(299), "Unknown");
	assert_int_equal(http_put_status_line(&b, 400), 0);
	assert_string_equal(b.data, "HTTP/1.1 400 Bad Request\r\n");
	buf_free(&b);
}

int
main(void)
{
	static const struct CMUnitTest fixed[] = {
		cmocka_unit_test(test_query_next),
		cmocka_unit_test(test_query_next_sizes),
		cmocka_unit_test(test_segment_decode),
		cmocka_unit_test(test_status_line),
	};
	return datacases_run("http", HTTP_DATA_DIR, ".req", fixed, ARRAY_SIZE(fixed), test_case);
}
