/* base64.h: standard base64 (RFC 4648, with padding) for byte fields inside JSON. Decoding is
 * strict: the alphabet, padding only at the end, and a length that is a multiple of 4. */
#pragma once

#include <stddef.h>
#include "buf.h"

int base64_encode(struct buf *out, const void *data, size_t len);
/* Decodes NUL-terminated text; -EINVAL when it is not canonical base64; -ENOBUFS past the
 * buffer's max. */
int base64_decode(struct buf *out, const char *text, size_t len);
