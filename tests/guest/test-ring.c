/* test-ring.c: the output ring of the guest and of sandboxd (lib/ring.c): offsets, growth,
 * wrap-around, what is dropped when it is full, gaps, and that every byte keeps its stream in
 * order. A model (every
 * byte ever written, with its stream) is checked against the ring after random writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "agentproto.h"
#include "ring.h"

/* Reads [from, end) back through ring_peek(), checking runs are maximal and contiguous. */
static size_t
read_back(const struct ring *r, uint64_t from, size_t chunk, uint8_t *data, uint8_t *streams)
{
	size_t got = 0;

	while (from + got < ring_end(r)) {
		const uint8_t *p;
		uint8_t s;
		size_t n = ring_peek(r, from + got, chunk, &s, &p);
		assert_true(n > 0 && n <= chunk);
		assert_true(s == AP_STDOUT || s == AP_STDERR);
		memcpy(data + got, p, n);
		memset(streams + got, s, n);
		got += n;
	}
	return got;
}

static void
test_empty(void **state)
{
	struct ring r;
	const uint8_t *p;
	uint8_t s;

	ring_init(&r, 16);
	assert_int_equal(ring_start(&r), 0);
	assert_int_equal(ring_end(&r), 0);
	assert_int_equal(ring_peek(&r, 0, 10, &s, &p), 0);
	assert_int_equal(ring_write(&r, AP_STDOUT, "", 0), 0);
	ring_free(&r);
	ring_free(NULL);
}

static void
test_offsets_and_peek(void **state)
{
	struct ring r;
	const uint8_t *p;
	uint8_t s;

	ring_init(&r, 1024);
	assert_int_equal(ring_write(&r, AP_STDOUT, "hello ", 6), 0);
	assert_int_equal(ring_write(&r, AP_STDERR, "oops ", 5), 0);
	assert_int_equal(ring_write(&r, AP_STDOUT, "world", 5), 0);
	assert_int_equal(ring_start(&r), 0);
	assert_int_equal(ring_end(&r), 16);

	assert_int_equal(ring_peek(&r, 0, 100, &s, &p), 6);
	assert_int_equal(s, AP_STDOUT);
	assert_memory_equal(p, "hello ", 6);
	assert_int_equal(ring_peek(&r, 6, 100, &s, &p), 5);
	assert_int_equal(s, AP_STDERR);
	assert_memory_equal(p, "oops ", 5);
	assert_int_equal(ring_peek(&r, 8, 2, &s, &p), 2);
	assert_int_equal(s, AP_STDERR);
	assert_memory_equal(p, "ps", 2);
	assert_int_equal(ring_peek(&r, 11, 100, &s, &p), 5);
	assert_int_equal(s, AP_STDOUT);
	assert_memory_equal(p, "world", 5);
	assert_int_equal(ring_peek(&r, 16, 100, &s, &p), 0); /* at the end */
	assert_int_equal(ring_peek(&r, 99, 100, &s, &p), 0);
	assert_int_equal(ring_peek(&r, 0, 0, &s, &p), 0);
	ring_free(&r);
}

static void
test_wrap_and_drop(void **state)
{
	struct ring r;
	uint8_t data[64], streams[64];
	size_t n;

	ring_init(&r, 16);
	assert_int_equal(r.max, 16);
	assert_int_equal(ring_write(&r, AP_STDOUT, "0123456789", 10), 0);
	assert_int_equal(ring_write(&r, AP_STDERR, "abcdefghij", 10), 0);
	/* 20 produced, 16 kept: 4 dropped */
	assert_int_equal(ring_end(&r), 20);
	assert_int_equal(ring_start(&r), 4);
	n = read_back(&r, ring_start(&r), 100, data, streams);
	assert_int_equal(n, 16);
	assert_memory_equal(data, "456789abcdefghij", 16);
	for (size_t i = 0; i < 16; i++)
		assert_int_equal(streams[i], i < 6 ? AP_STDOUT : AP_STDERR);
	/* an offset before the start is gone */
	{
		const uint8_t *p;
		uint8_t s;
		assert_int_equal(ring_peek(&r, 3, 10, &s, &p), 0);
	}
	/* one write longer than the ring keeps its newest bytes only */
	assert_int_equal(ring_write(&r, AP_STDOUT, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 26), 0);
	assert_int_equal(ring_end(&r), 46);
	assert_int_equal(ring_start(&r), 30);
	n = read_back(&r, 30, 100, data, streams);
	assert_int_equal(n, 16);
	assert_memory_equal(data, "KLMNOPQRSTUVWXYZ", 16);
	for (size_t i = 0; i < 16; i++)
		assert_int_equal(streams[i], AP_STDOUT); /* stale stderr bits were cleared */
	ring_free(&r);
}

static void
test_growth_keeps_streams(void **state)
{
	struct ring r;
	static uint8_t big[100000], data[100000], streams[100000];
	size_t n;

	ring_init(&r, 1 << 20);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	/* small writes first (one allocation), a stderr write, then growth past it */
	assert_int_equal(ring_write(&r, AP_STDOUT, big, 100), 0);
	assert_int_equal(ring_write(&r, AP_STDERR, big + 100, 3), 0);
	size_t cap_before = r.cap;
	assert_int_equal(ring_write(&r, AP_STDOUT, big + 103, sizeof(big) - 103), 0);
	assert_true(r.cap > cap_before);
	assert_int_equal(ring_start(&r), 0);
	n = read_back(&r, 0, 65536, data, streams);
	assert_int_equal(n, sizeof(big));
	assert_memory_equal(data, big, sizeof(big));
	for (size_t i = 0; i < n; i++)
		assert_int_equal(streams[i], i >= 100 && i < 103 ? AP_STDERR : AP_STDOUT);
	ring_free(&r);
	/* no stderr ever: no bitmap */
	ring_init(&r, 4096);
	assert_int_equal(ring_write(&r, AP_STDOUT, big, 5000), 0);
	assert_null(r.err);
	assert_int_equal(ring_start(&r), 5000 - 4096);
	ring_free(&r);
}

/* Random writes of random streams against a model of everything written. */
static void
test_random_against_model(void **state)
{
	static uint8_t model[1 << 20], model_s[1 << 20], data[1 << 16], streams[1 << 16];
	const size_t max = 4096;
	struct ring r;
	uint64_t total = 0;
	unsigned seed = 12345;

	ring_init(&r, max);
	for (int round = 0; round < 2000; round++) {
		size_t n = (size_t)(rand_r(&seed) % (round % 50 == 0 ? 9000 : 300));
		uint8_t s = rand_r(&seed) % 3 == 0 ? AP_STDERR : AP_STDOUT;
		uint8_t buf[9000];

		if (total + n > sizeof(model))
			break;
		for (size_t i = 0; i < n; i++) {
			buf[i] = (uint8_t)rand_r(&seed);
			model[total + i] = buf[i];
			model_s[total + i] = s;
		}
		assert_int_equal(ring_write(&r, s, buf, n), 0);
		total += n;
		assert_int_equal(ring_end(&r), total);
		assert_int_equal(ring_start(&r), total > max ? total - max : 0);
		if (round % 7 == 0) {
			uint64_t start = ring_start(&r);
			uint64_t from =
			        start +
			        (total > start ? (uint64_t)rand_r(&seed) % (total - start) : 0);
			size_t got = read_back(&r, from, 1 + (size_t)(rand_r(&seed) % 700), data,
			                       streams);
			assert_int_equal(got, total - from);
			assert_memory_equal(data, model + from, got);
			assert_memory_equal(streams, model_s + from, got);
		}
	}
	ring_free(&r);
}

/* Runs of one stream end exactly where the stream changes, across bitmap byte boundaries. */
static void
test_run_boundaries(void **state)
{
	struct ring r;
	const uint8_t *p;
	uint8_t s, buf[64];

	memset(buf, 'x', sizeof(buf));
	ring_init(&r, 256);
	for (size_t len = 1; len < 20; len++) {
		uint64_t at = ring_end(&r);
		assert_int_equal(ring_write(&r, AP_STDERR, buf, len), 0);
		assert_int_equal(ring_write(&r, AP_STDOUT, buf, 1), 0);
		assert_int_equal(ring_peek(&r, at, 1000, &s, &p), len);
		assert_int_equal(s, AP_STDERR);
		assert_int_equal(ring_peek(&r, at + len, 1000, &s, &p), 1);
		assert_int_equal(s, AP_STDOUT);
	}
	ring_free(&r);
}

/* Forgetting the oldest bytes, and a gap (bytes dropped elsewhere): what sandboxd's ring does
 * when the guest says output was dropped. */
static void
test_skip(void **state)
{
	struct ring r;
	const uint8_t *p;
	uint8_t s;

	ring_init(&r, 16);
	ring_skip(&r, 0);
	assert_int_equal(ring_end(&r), 0);
	assert_int_equal(ring_write(&r, AP_STDOUT, "abcdef", 6), 0);
	ring_skip(&r, 2);
	assert_int_equal(ring_start(&r), 2);
	assert_int_equal(ring_end(&r), 6);
	assert_int_equal(ring_peek(&r, 1, 10, &s, &p), 0);
	assert_int_equal(ring_peek(&r, 2, 10, &s, &p), 4);
	assert_memory_equal(p, "cdef", 4);
	ring_skip(&r, 1); /* before the start: nothing to forget */
	assert_int_equal(ring_start(&r), 2);
	ring_skip(&r, 100); /* a gap */
	assert_int_equal(ring_start(&r), 100);
	assert_int_equal(ring_end(&r), 100);
	assert_int_equal(ring_peek(&r, 99, 10, &s, &p), 0);
	assert_int_equal(ring_write(&r, AP_STDERR, "xyz", 3), 0);
	assert_int_equal(ring_peek(&r, 100, 10, &s, &p), 3);
	assert_int_equal(s, AP_STDERR);
	assert_memory_equal(p, "xyz", 3);
	/* full, then skipped into the middle, then written across the wrap */
	assert_int_equal(ring_write(&r, AP_STDOUT, "0123456789ABCDEF", 16), 0);
	assert_int_equal(ring_start(&r), 103);
	ring_skip(&r, 110);
	assert_int_equal(ring_write(&r, AP_STDOUT, "gh", 2), 0);
	assert_int_equal(ring_start(&r), 110);
	assert_int_equal(ring_end(&r), 121);
	assert_int_equal(ring_peek(&r, 110, 100, &s, &p), 9);
	assert_memory_equal(p, "789ABCDEF", 9);
	assert_int_equal(ring_peek(&r, 119, 100, &s, &p), 2);
	assert_memory_equal(p, "gh", 2);
	ring_free(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_offsets_and_peek),
		cmocka_unit_test(test_wrap_and_drop),
		cmocka_unit_test(test_growth_keeps_streams),
		cmocka_unit_test(test_random_against_model),
		cmocka_unit_test(test_run_boundaries),
		cmocka_unit_test(test_skip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
