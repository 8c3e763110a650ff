/* test-cli-sse.c: the CLI's Server-Sent Events parser (cli/sse.c). The same stream must give
 * the same events however the network cuts it: whole, byte by byte, and at every split
 * point; with LF, CRLF or CR line ends, comments, a byte order mark and multi-line data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include "sse.h"
#include "util.h"

struct seen {
	struct buf log; /* "type|id|data\n" per event */
	int stop_after; /* stop (return 7) after this many events; 0: never */
	int count;
};

static int
on_event(void *userdata, const char *type, const char *id, const char *data, size_t len)
{
	struct seen *s = userdata;

	assert_int_equal(strlen(data), len);
	assert_int_equal(buf_printf(&s->log, "%s|%s|%s\n", type, id, data), 0);
	s->count++;
	return s->stop_after && s->count == s->stop_after ? 7 : 0;
}

/* Feeds text in pieces of at most step bytes (0: first split at split, then the rest). */
static char *
parse(const char *text, size_t step, size_t split)
{
	struct seen s = { .log = BUF_INIT(1 << 20) };
	struct sse p;
	size_t n = strlen(text);
	char *out;

	sse_init(&p, 1 << 16, on_event, &s);
	if (step == 0) {
		assert_int_equal(sse_feed(&p, text, split), 0);
		assert_int_equal(sse_feed(&p, text + split, n - split), 0);
	} else {
		for (size_t i = 0; i < n; i += step)
			assert_int_equal(sse_feed(&p, text + i, MIN(step, n - i)), 0);
	}
	sse_done(&p);
	out = strdup(s.log.data ? s.log.data : "");
	assert_non_null(out);
	buf_free(&s.log);
	return out;
}

static void
check_all_cuts(const char *text, const char *want)
{
	size_t n = strlen(text);
	char *got;

	got = parse(text, n ? n : 1, 0);
	assert_string_equal(got, want);
	free(got);
	got = parse(text, 1, 0);
	assert_string_equal(got, want);
	free(got);
	for (size_t split = 0; split <= n; split++) {
		got = parse(text, 0, split);
		if (strcmp(got, want) != 0)
			fail_msg("split at %zu: got '%s', want '%s'", split, got, want);
		free(got);
	}
}

static void
test_server_stream(void **state)
{
	/* what sandboxd sends: a retry hint, heartbeats, then events */
	check_all_cuts("retry: 2000\n\n"
	               ": keep-alive\n\n"
	               "id: 7\nevent: state\ndata: {\"seq\":7}\n\n"
	               ": keep-alive\n\n"
	               "id: 8\nevent: created\ndata: {\"seq\":8}\n\n",
	               "state|7|{\"seq\":7}\ncreated|8|{\"seq\":8}\n");
}

static void
test_line_ends(void **state)
{
	check_all_cuts("event: a\r\ndata: 1\r\n\r\nevent: b\rdata: 2\r\rdata: 3\n\n",
	               "a||1\nb||2\nmessage||3\n");
}

static void
test_fields(void **state)
{
	/* multi-line data, no space after the colon, a field without a colon, unknown fields,
	 * an id kept across events, an event without data is not dispatched */
	check_all_cuts("data:x\ndata: y\nfoo: bar\ndata\n\n"
	               "id: 42\nevent: lonely\n\n"
	               "data: z\n\n",
	               "message||x\ny\n\nmessage|42|z\n");
}

static void
test_bom_and_partial_tail(void **state)
{
	/* a BOM is dropped; an event whose blank line has not arrived is not dispatched */
	check_all_cuts("\xef\xbb\xbf"
	               "data: a\n\ndata: b\n",
	               "message||a\n");
	/* something that merely starts like a BOM is text */
	check_all_cuts("\xef"
	               "data: a\n\n",
	               "");
}

static void
test_limits_and_stop(void **state)
{
	struct seen s = { .log = BUF_INIT(1 << 20), .stop_after = 1 };
	struct sse p;
	char big[300];

	sse_init(&p, 64, on_event, &s);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(sse_feed(&p, "data: ", 6), 0);
	assert_int_equal(sse_feed(&p, big, strlen(big)), -ENOBUFS);
	sse_done(&p);

	/* the callback's stop value comes back and the rest of the chunk is left */
	sse_init(&p, 64, on_event, &s);
	assert_int_equal(sse_feed(&p, "data: 1\n\ndata: 2\n\n", 18), 7);
	assert_int_equal(s.count, 1);
	sse_done(&p);
	buf_free(&s.log);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_server_stream),   cmocka_unit_test(test_line_ends),
		cmocka_unit_test(test_fields),          cmocka_unit_test(test_bom_and_partial_tail),
		cmocka_unit_test(test_limits_and_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
