/* base64.c: see base64.h. */
#include "base64.h"
#include "util.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int
base64_encode(struct buf *out, const void *data, size_t len)
{
	const uint8_t *p = data;
	size_t n = (len + 2) / 3 * 4;
	char *o;
	int r;

	r = buf_reserve(out, n);
	if (r < 0)
		return r;
	o = out->data + out->len;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < len)
			v |= p[i + 2];
		*o++ = alphabet[v >> 18 & 63];
		*o++ = alphabet[v >> 12 & 63];
		*o++ = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
		*o++ = i + 2 < len ? alphabet[v & 63] : '=';
	}
	out->len += n;
	out->data[out->len] = '\0';
	return 0;
}

static int
value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int
base64_decode(struct buf *out, const char *text, size_t len)
{
	int r;

	if (len % 4)
		return -EINVAL;
	r = buf_reserve(out, len / 4 * 3);
	if (r < 0)
		return r;
	for (size_t i = 0; i < len; i += 4) {
		int a = value(text[i]), b = value(text[i + 1]);
		int c = text[i + 2] == '=' ? -2 : value(text[i + 2]);
		int d = text[i + 3] == '=' ? -2 : value(text[i + 3]);
		uint32_t v;
		bool last = i + 4 == len;

		if (a < 0 || b < 0 || c == -1 || d == -1)
			return -EINVAL;
		if ((c == -2 || d == -2) && !last)
			return -EINVAL;
		if (c == -2 && d != -2)
			return -EINVAL;
		v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)(c < 0 ? 0 : c) << 6 |
		    (uint32_t)(d < 0 ? 0 : d);
		/* canonical: the bits a padding hides are zero */
		if ((c == -2 && (v & 0xffff)) || (d == -2 && c >= 0 && (v & 0xff)))
			return -EINVAL;
		out->data[out->len++] = (char)(v >> 16);
		if (c >= 0)
			out->data[out->len++] = (char)(v >> 8 & 0xff);
		if (d >= 0)
			out->data[out->len++] = (char)(v & 0xff);
	}
	out->data[out->len] = '\0';
	return 0;
}
