/* base64.h: base64 (RFC 4648) for every program: the standard alphabet with padding for byte
 * fields inside JSON and HTTP headers, and base64url without padding for the secrets of keys
 * and session cookies. Decoding is strict, so that one value has one spelling: the alphabet,
 * padding only at the end and a length that is a multiple of 4 (standard), and zero bits past
 * the last byte (both). */
#pragma once

#include <stddef.h>
#include "buf.h"

/* The text of n bytes in base64url without padding. */
#define BASE64URL_LEN(n) (((n)*4 + 2) / 3)

/* Appends the text of len bytes to out (NUL-terminated); -ENOBUFS past the buffer's max. */
int base64_encode(struct buf *out, const void *data, size_t len);
/* Appends the bytes of len characters of text; -EINVAL when it is not canonical base64;
 * -ENOBUFS past the buffer's max. */
int base64_decode(struct buf *out, const char *text, size_t len);

/* The same in base64url without padding ('-' and '_' for '+' and '/'). */
int base64url_encode(struct buf *out, const void *data, size_t len);
int base64url_decode(struct buf *out, const char *text, size_t len);
