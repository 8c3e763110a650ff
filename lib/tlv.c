/* tlv.c: see tlv.h. */
#include <string.h>
#include "frame.h"
#include "tlv.h"
#include "util.h"

int
tlv_put(struct buf *b, uint16_t tag, const void *v, size_t len)
{
	uint8_t h[6];
	int r;

	if (len > UINT32_MAX)
		return -E2BIG;
	be16_put(h, tag);
	be32_put(h + 2, (uint32_t)len);
	r = buf_reserve(b, sizeof(h) + len);
	if (r < 0)
		return r;
	(void)buf_append(b, h, sizeof(h));
	return len ? buf_append(b, v, len) : 0;
}

int
tlv_put_str(struct buf *b, uint16_t tag, const char *s)
{
	return tlv_put(b, tag, s, strlen(s));
}

int
tlv_put_u8(struct buf *b, uint16_t tag, uint8_t v)
{
	return tlv_put(b, tag, &v, 1);
}

int
tlv_put_u16(struct buf *b, uint16_t tag, uint16_t v)
{
	uint8_t p[2];

	be16_put(p, v);
	return tlv_put(b, tag, p, sizeof(p));
}

int
tlv_put_u32(struct buf *b, uint16_t tag, uint32_t v)
{
	uint8_t p[4];

	be32_put(p, v);
	return tlv_put(b, tag, p, sizeof(p));
}

int
tlv_put_u64(struct buf *b, uint16_t tag, uint64_t v)
{
	uint8_t p[8];

	be64_put(p, v);
	return tlv_put(b, tag, p, sizeof(p));
}

void
tlv_reader_init(struct tlv_reader *r, const void *p, size_t len)
{
	r->p = p;
	r->left = len;
}

int
tlv_next(struct tlv_reader *r, struct tlv *ret)
{
	uint32_t len;

	if (r->left == 0)
		return 0;
	if (r->left < 6)
		return -EPROTO;
	len = be32_get(r->p + 2);
	if (len > r->left - 6)
		return -EPROTO;
	*ret = (struct tlv){ .tag = be16_get(r->p), .len = len, .val = r->p + 6 };
	r->p += 6 + (size_t)len;
	r->left -= 6 + (size_t)len;
	return 1;
}

int
tlv_u8(const struct tlv *t, uint8_t *ret)
{
	if (t->len != 1)
		return -EPROTO;
	*ret = t->val[0];
	return 0;
}

int
tlv_u16(const struct tlv *t, uint16_t *ret)
{
	if (t->len != 2)
		return -EPROTO;
	*ret = be16_get(t->val);
	return 0;
}

int
tlv_u32(const struct tlv *t, uint32_t *ret)
{
	if (t->len != 4)
		return -EPROTO;
	*ret = be32_get(t->val);
	return 0;
}

int
tlv_u64(const struct tlv *t, uint64_t *ret)
{
	if (t->len != 8)
		return -EPROTO;
	*ret = be64_get(t->val);
	return 0;
}

int
tlv_strdup(const struct tlv *t, size_t max, char **ret)
{
	char *s;

	if (t->len > max || memchr(t->val, '\0', t->len))
		return -EPROTO;
	s = malloc((size_t)t->len + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, t->val, t->len);
	s[t->len] = '\0';
	*ret = s;
	return 0;
}
