/* buf.c: bounded, growable byte buffer; see buf.h. */
#include <stdio.h>
#include <string.h>
#include "buf.h"
#include "util.h"

void
buf_init(struct buf *b, size_t max)
{
	*b = (struct buf)BUF_INIT(max);
}

void
buf_free(struct buf *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = b->off = b->cap = 0;
}

static void
compact(struct buf *b)
{
	if (b->off == 0)
		return;
	memmove(b->data, b->data + b->off, b->len - b->off);
	b->len -= b->off;
	b->off = 0;
	b->data[b->len] = '\0';
}

int
buf_reserve(struct buf *b, size_t n)
{
	size_t need, ncap;
	char *p;

	if (n > b->max || buf_avail(b) > b->max - n)
		return -ENOBUFS;
	if (b->off > 0 && b->len + n + 1 > b->cap)
		compact(b);
	need = b->len + n + 1;
	if (need <= b->cap)
		return 0;
	ncap = b->cap ? b->cap : 256;
	while (ncap < need)
		ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
	/* never allocate much more than max allows */
	if (ncap > b->max + 1 + b->off)
		ncap = MAX(need, b->max + 1);
	p = realloc(b->data, ncap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = ncap;
	b->data[b->len] = '\0';
	return 0;
}

int
buf_append(struct buf *b, const void *p, size_t n)
{
	int r;

	if (n == 0)
		return buf_reserve(b, 0);
	r = buf_reserve(b, n);
	if (r < 0)
		return r;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int
buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int
buf_putc(struct buf *b, char c)
{
	return buf_append(b, &c, 1);
}

int
buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
	va_list aq;
	int n, r;

	va_copy(aq, ap);
	n = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (n < 0)
		return -EINVAL;
	r = buf_reserve(b, (size_t)n);
	if (r < 0)
		return r;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int
buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = buf_vprintf(b, fmt, ap);
	va_end(ap);
	return r;
}

void
buf_consume(struct buf *b, size_t n)
{
	if (n >= buf_avail(b)) {
		buf_reset(b);
		return;
	}
	b->off += n;
	/* compact once the consumed prefix dominates, so steady streams do not creep */
	if (b->off > 4096 && b->off > b->len / 2)
		compact(b);
}

void
buf_reset(struct buf *b)
{
	b->len = b->off = 0;
	if (b->data)
		b->data[0] = '\0';
}

char *
buf_steal(struct buf *b)
{
	char *p;

	if (!b->data && buf_reserve(b, 0) < 0)
		return NULL;
	compact(b);
	p = b->data;
	b->data = NULL;
	b->len = b->off = b->cap = 0;
	return p;
}
