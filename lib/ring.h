/* ring.h: the output ring of one process: the newest bytes of its output, the stream (stdout
 * or stderr) of every byte, and byte offsets counted from the process's start. The guest keeps
 * one per process until the host acknowledges its bytes; sandboxd keeps one per process for its
 * readers. Storage grows on demand up to the maximum, then the oldest bytes are overwritten. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct ring {
	uint8_t *data;
	uint8_t *err;   /* one bit per slot, set for stderr; NULL while every byte is stdout */
	size_t cap;     /* slots allocated: a power of two, 0 before the first write */
	size_t max;     /* most bytes kept: a power of two, at least 8 */
	size_t head;    /* slot of the byte at offset start */
	uint64_t start; /* offset of the oldest byte kept */
	uint64_t end;   /* offset after the newest byte: every byte produced so far */
};

/* max is rounded up to a power of two (at least 8). Allocates nothing yet. */
void ring_init(struct ring *r, size_t max);
/* Frees the storage; the offsets stay (NULL-safe). */
void ring_free(struct ring *r);

/* Appends n bytes of stream (AP_STDOUT or AP_STDERR), dropping the oldest bytes beyond max.
 * The bytes always count in end; -ENOMEM when storage could not grow, in which case older
 * bytes (or, before the first allocation, these bytes) are dropped instead. */
int ring_write(struct ring *r, uint8_t stream, const void *p, size_t n);
/* Forgets every byte before offset to. A to past end is a gap (bytes dropped elsewhere): end
 * moves there and the ring holds nothing. */
void ring_skip(struct ring *r, uint64_t to);

/* The longest run of bytes of one stream starting at offset from, at most max bytes and
 * contiguous in memory: returns its length (0 when from is outside [start, end)), the stream
 * and a pointer valid until the next ring_write(). */
size_t ring_peek(const struct ring *r, uint64_t from, size_t max, uint8_t *ret_stream,
                 const uint8_t **ret_data);

static inline uint64_t
ring_start(const struct ring *r)
{
	return r->start;
}

static inline uint64_t
ring_end(const struct ring *r)
{
	return r->end;
}
