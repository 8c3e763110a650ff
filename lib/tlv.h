/* tlv.h: the TLV lists inside protocol payloads (agentproto.h): u16 tag, u32 length, value,
 * repeated. Readers never trust a length: every read is checked against what is left. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "buf.h"

int tlv_put(struct buf *b, uint16_t tag, const void *v, size_t len);
int tlv_put_str(struct buf *b, uint16_t tag, const char *s);
int tlv_put_u8(struct buf *b, uint16_t tag, uint8_t v);
int tlv_put_u16(struct buf *b, uint16_t tag, uint16_t v);
int tlv_put_u32(struct buf *b, uint16_t tag, uint32_t v);
int tlv_put_u64(struct buf *b, uint16_t tag, uint64_t v);

struct tlv_reader {
	const uint8_t *p;
	size_t left;
};

struct tlv {
	uint16_t tag;
	uint32_t len;
	const uint8_t *val;
};

void tlv_reader_init(struct tlv_reader *r, const void *p, size_t len);
/* 1: *ret is the next entry; 0: the end; -EPROTO: an entry runs past the end. */
int tlv_next(struct tlv_reader *r, struct tlv *ret);

/* Typed values: -EPROTO when the length is not the type's. */
int tlv_u8(const struct tlv *t, uint8_t *ret);
int tlv_u16(const struct tlv *t, uint16_t *ret);
int tlv_u32(const struct tlv *t, uint32_t *ret);
int tlv_u64(const struct tlv *t, uint64_t *ret);
/* A string value as a new C string; -EPROTO when it holds a NUL or is longer than max. */
int tlv_strdup(const struct tlv *t, size_t max, char **ret);
