/* buf.h: the one bounded byte buffer type (curl's dynbuf, git's strbuf).
 * A buf never grows past its max: appends beyond it fail with -ENOBUFS and leave it unchanged.
 * Data is always NUL-terminated so it can be used as a C string when it holds text. */
#pragma once

#include <stdarg.h>
#include <stddef.h>
#include "macro.h"

struct buf {
	char *data; /* NULL until the first append */
	size_t len; /* bytes in use */
	size_t off; /* bytes already consumed from the front (see buf_consume) */
	size_t cap; /* bytes allocated */
	size_t max; /* most bytes it may ever hold */
};

#define BUF_INIT(m)                                                                                \
	{                                                                                          \
		.data = NULL, .len = 0, .off = 0, .cap = 0, .max = (m)                             \
	}

void buf_init(struct buf *b, size_t max);
/* Frees the storage; the buf is empty and reusable afterwards (NULL-safe). */
void buf_free(struct buf *b);
static inline void
buf_freep(struct buf *b)
{
	buf_free(b);
}
#define _cleanup_buf_ _cleanup_(buf_freep)

/* Makes room for n more bytes; -ENOBUFS past max, -ENOMEM. */
int buf_reserve(struct buf *b, size_t n);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_putc(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...) _printf_(2, 3);
int buf_vprintf(struct buf *b, const char *fmt, va_list ap) _printf_(2, 0);

/* Unread bytes start at buf_head() and are buf_avail() long. */
static inline char *
buf_head(const struct buf *b)
{
	return b->data ? b->data + b->off : NULL;
}
static inline size_t
buf_avail(const struct buf *b)
{
	return b->len - b->off;
}
/* Marks n bytes at the head as consumed; compacts when that is cheap. */
void buf_consume(struct buf *b, size_t n);
/* Drops everything but keeps the allocation. */
void buf_reset(struct buf *b);
/* Hands the NUL-terminated contents to the caller (never NULL on success); the buf is emptied. */
char *buf_steal(struct buf *b);
