/* frame.h: frames of the host <-> guest protocol (agentproto.h): a 12-byte big-endian header
 * (u8 type, u8 flags, u16 zero, u32 channel, u32 payload length) and the payload. The decoder
 * is incremental and bounded: no frame longer than its maximum is ever buffered, and a header
 * that announces one is a protocol violation before a byte of payload is read. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "buf.h"

#define FRAME_HEADER 12

struct frame {
	uint8_t type;
	uint8_t flags;
	uint32_t chan;
	const uint8_t *payload; /* valid until the decoder's next call */
	uint32_t len;
};

static inline void
be16_put(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}
static inline void
be32_put(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}
static inline void
be64_put(uint8_t *p, uint64_t v)
{
	be32_put(p, (uint32_t)(v >> 32));
	be32_put(p + 4, (uint32_t)v);
}
static inline uint16_t
be16_get(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}
static inline uint32_t
be32_get(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t
be64_get(const uint8_t *p)
{
	return (uint64_t)be32_get(p) << 32 | be32_get(p + 4);
}

/* Appends one frame. -E2BIG when the payload is longer than AP_FRAME_MAX; -ENOBUFS. */
int frame_put(struct buf *out, uint8_t type, uint8_t flags, uint32_t chan, const void *payload,
              size_t len);
/* Appends the session-start marker (AP_MAGIC). */
int frame_put_magic(struct buf *out);

struct frame_decoder {
	struct buf in;
	uint32_t max_payload;
	size_t pending;   /* bytes of the last returned frame, consumed at the next call */
	bool hunting;     /* skipping bytes until AP_MAGIC */
	bool after_magic; /* AP_MAGIC was consumed; the next frame starts a session */
};

/* hunting: start by skipping everything before AP_MAGIC (a new session). */
void frame_decoder_init(struct frame_decoder *d, uint32_t max_payload, bool hunting);
void frame_decoder_done(struct frame_decoder *d);
/* Drops every buffered byte; with hunting, skips until the next AP_MAGIC. */
void frame_decoder_reset(struct frame_decoder *d, bool hunting);
/* Buffers bytes. -ENOBUFS when more than one maximal frame would be buffered (a decoder that
 * is fed only after draining next() never sees it). */
int frame_decoder_feed(struct frame_decoder *d, const void *p, size_t n);
/* Returns 1 and the next frame (*ret_new_session when AP_MAGIC came right before it), 0 when
 * more bytes are needed, or -EPROTO on a violation (unknown type, non-zero reserved bits, a
 * length over the maximum); after -EPROTO the decoder stays failed until reset. */
int frame_decoder_next(struct frame_decoder *d, struct frame *ret, bool *ret_new_session);
