/* base64.c: see base64.h. */
#include "base64.h"
#include "util.h"

static const char std_alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char url_alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static int
encode(struct buf *out, const void *data, size_t len, bool url)
{
	const char *alphabet = url ? url_alphabet : std_alphabet;
	const uint8_t *p = data;
	size_t n = url ? BASE64URL_LEN(len) : (len + 2) / 3 * 4;
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
		if (i + 1 < len)
			*o++ = alphabet[v >> 6 & 63];
		else if (!url)
			*o++ = '=';
		if (i + 2 < len)
			*o++ = alphabet[v & 63];
		else if (!url)
			*o++ = '=';
	}
	out->len += n;
	out->data[out->len] = '\0';
	return 0;
}

static int
value(char c, bool url)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == (url ? '-' : '+'))
		return 62;
	if (c == (url ? '_' : '/'))
		return 63;
	return -1;
}

static int
decode(struct buf *out, const char *text, size_t len, bool url)
{
	int r;

	if (url ? len % 4 == 1 : len % 4 != 0)
		return -EINVAL;
	r = buf_reserve(out, len / 4 * 3 + (len % 4 ? len % 4 - 1 : 0));
	if (r < 0)
		return r;
	/* one or two '=' end the standard text where the last group has fewer characters */
	for (int i = 0; !url && i < 2 && len > 0 && text[len - 1] == '='; i++)
		len--;
	for (size_t i = 0; i < len; i += 4) {
		size_t k = MIN(len - i, 4); /* 2 or 3 in a short last group: 1 or 2 bytes */
		uint32_t v = 0;

		if (k == 1)
			return -EINVAL;
		for (size_t j = 0; j < 4; j++) {
			int c = j < k ? value(text[i + j], url) : 0;
			if (c < 0)
				return -EINVAL;
			v = v << 6 | (uint32_t)c;
		}
		/* canonical: the bits past the last byte are zero */
		if ((k == 2 && (v & 0xffff)) || (k == 3 && (v & 0xff)))
			return -EINVAL;
		out->data[out->len++] = (char)(v >> 16);
		if (k > 2)
			out->data[out->len++] = (char)(v >> 8 & 0xff);
		if (k > 3)
			out->data[out->len++] = (char)(v & 0xff);
	}
	out->data[out->len] = '\0';
	return 0;
}

int
base64_encode(struct buf *out, const void *data, size_t len)
{
	return encode(out, data, len, false);
}

int
base64_decode(struct buf *out, const char *text, size_t len)
{
	return decode(out, text, len, false);
}

int
base64url_encode(struct buf *out, const void *data, size_t len)
{
	return encode(out, data, len, true);
}

int
base64url_decode(struct buf *out, const char *text, size_t len)
{
	return decode(out, text, len, true);
}
