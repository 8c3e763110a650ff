/* ring.c: see ring.h. Streams are kept as a bitmap beside the bytes (one bit per slot), which
 * bounds the bookkeeping at an eighth of the ring whatever the interleaving, and is only
 * allocated once a process writes to stderr. */
#include <stdlib.h>
#include <string.h>
#include "agentproto.h"
#include "ring.h"
#include "util.h"

#define RING_MIN 4096 /* first allocation */

void
ring_init(struct ring *r, size_t max)
{
	size_t m = 8;

	while (m < max)
		m *= 2;
	*r = (struct ring){ .max = m };
}

void
ring_free(struct ring *r)
{
	if (!r)
		return;
	free(r->data);
	free(r->err);
	r->data = r->err = NULL;
	r->cap = r->head = 0;
	r->start = r->end;
}

static bool
bit_get(const uint8_t *bits, size_t i)
{
	return bits[i / 8] >> (i % 8) & 1;
}

static void
bit_put(uint8_t *bits, size_t i, bool v)
{
	if (v)
		bits[i / 8] |= (uint8_t)(1u << (i % 8));
	else
		bits[i / 8] &= (uint8_t) ~(1u << (i % 8));
}

/* Sets or clears n bits from slot pos (no wrap). */
static void
bits_fill(uint8_t *bits, size_t pos, size_t n, bool v)
{
	for (; n > 0 && pos % 8; pos++, n--)
		bit_put(bits, pos, v);
	memset(bits + pos / 8, v ? 0xff : 0, n / 8);
	pos += n / 8 * 8;
	for (n %= 8; n > 0; pos++, n--)
		bit_put(bits, pos, v);
}

/* Reallocates to ncap slots, moving the kept bytes (and their stream bits) to slot 0. */
static int
grow(struct ring *r, size_t ncap)
{
	size_t used = (size_t)(r->end - r->start);
	uint8_t *d, *e = NULL;

	d = malloc(ncap);
	if (!d)
		return -ENOMEM;
	if (r->err) {
		e = calloc(ncap / 8, 1);
		if (!e) {
			free(d);
			return -ENOMEM;
		}
	}
	if (used) {
		size_t first = MIN(used, r->cap - r->head);
		memcpy(d, r->data + r->head, first);
		memcpy(d + first, r->data, used - first);
		for (size_t i = 0; e && i < used; i++)
			if (bit_get(r->err, (r->head + i) & (r->cap - 1)))
				bit_put(e, i, true);
	}
	free(r->data);
	free(r->err);
	r->data = d;
	r->err = e;
	r->cap = ncap;
	r->head = 0;
	return 0;
}

int
ring_write(struct ring *r, uint8_t stream, const void *p, size_t n)
{
	const uint8_t *src = p;
	size_t used = (size_t)(r->end - r->start);
	size_t pos, first;
	bool is_err = stream == AP_STDERR;
	int ret = 0;

	if (n == 0)
		return 0;
	if (used + n > r->cap && r->cap < r->max) {
		size_t want = r->cap ? r->cap * 2 : MIN((size_t)RING_MIN, r->max);
		while (want < used + n && want < r->max)
			want *= 2;
		ret = grow(r, want);
	}
	if (r->cap == 0) {
		r->end += n;
		r->start = r->end;
		return ret;
	}
	if (n >= r->cap) {
		/* only the newest cap bytes survive this write */
		r->end += n - r->cap;
		src += n - r->cap;
		n = r->cap;
		r->start = r->end;
		r->head = 0;
		used = 0;
	} else if (used + n > r->cap) {
		size_t drop = used + n - r->cap;
		r->start += drop;
		r->head = (r->head + drop) & (r->cap - 1);
		used -= drop;
	}
	if (is_err && !r->err) {
		r->err = calloc(r->cap / 8, 1);
		if (!r->err)
			ret = -ENOMEM; /* kept, but as stdout */
	}
	pos = (r->head + used) & (r->cap - 1);
	first = MIN(n, r->cap - pos);
	memcpy(r->data + pos, src, first);
	memcpy(r->data, src + first, n - first);
	if (r->err) {
		bits_fill(r->err, pos, first, is_err);
		bits_fill(r->err, 0, n - first, is_err);
	}
	r->end += n;
	return ret;
}

void
ring_skip(struct ring *r, uint64_t to)
{
	if (to >= r->end) {
		r->start = r->end = to;
		r->head = 0;
	} else if (to > r->start) {
		r->head = (r->head + (size_t)(to - r->start)) & (r->cap - 1);
		r->start = to;
	}
}

size_t
ring_peek(const struct ring *r, uint64_t from, size_t max, uint8_t *ret_stream,
          const uint8_t **ret_data)
{
	size_t pos, len;
	bool is_err;

	if (from < r->start || from >= r->end || r->cap == 0 || max == 0)
		return 0;
	pos = (r->head + (size_t)(from - r->start)) & (r->cap - 1);
	len = MIN(max, (size_t)(r->end - from));
	len = MIN(len, r->cap - pos);
	is_err = r->err && bit_get(r->err, pos);
	if (r->err) {
		size_t i = 1;
		uint8_t same = is_err ? 0xff : 0;
		while (i < len) {
			size_t s = pos + i;
			/* whole bitmap bytes of the same stream at a time */
			if (s % 8 == 0 && i + 8 <= len && r->err[s / 8] == same) {
				i += 8;
				continue;
			}
			if (bit_get(r->err, s) != is_err)
				break;
			i++;
		}
		len = i;
	}
	*ret_stream = is_err ? AP_STDERR : AP_STDOUT;
	*ret_data = r->data + pos;
	return len;
}
