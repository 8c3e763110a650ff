/* frame.c: see frame.h. */
#include <string.h>
#include "agentproto.h"
#include "frame.h"
#include "util.h"

int
frame_put(struct buf *out, uint8_t type, uint8_t flags, uint32_t chan, const void *payload,
          size_t len)
{
	uint8_t h[FRAME_HEADER];
	int r;

	if (len > AP_FRAME_MAX)
		return -E2BIG;
	h[0] = type;
	h[1] = flags;
	h[2] = h[3] = 0;
	be32_put(h + 4, chan);
	be32_put(h + 8, (uint32_t)len);
	r = buf_reserve(out, sizeof(h) + len);
	if (r < 0)
		return r;
	(void)buf_append(out, h, sizeof(h));
	return len ? buf_append(out, payload, len) : 0;
}

int
frame_put_magic(struct buf *out)
{
	return buf_append(out, AP_MAGIC, AP_MAGIC_LEN);
}

void
frame_decoder_init(struct frame_decoder *d, uint32_t max_payload, bool hunting)
{
	*d = (struct frame_decoder){ .max_payload = max_payload, .hunting = hunting };
	/* one maximal frame, a magic, and a read's worth of what follows */
	buf_init(&d->in, FRAME_HEADER + max_payload + AP_MAGIC_LEN + 65536);
}

void
frame_decoder_done(struct frame_decoder *d)
{
	buf_free(&d->in);
}

void
frame_decoder_reset(struct frame_decoder *d, bool hunting)
{
	buf_reset(&d->in);
	d->pending = 0;
	d->hunting = hunting;
	d->after_magic = false;
}

int
frame_decoder_feed(struct frame_decoder *d, const void *p, size_t n)
{
	if (d->pending) {
		buf_consume(&d->in, d->pending);
		d->pending = 0;
	}
	return buf_append(&d->in, p, n);
}

/* Any type but 0 and 0xff (the magic's first byte) frames: what a side does with a type it
 * does not know is its own policy (the guest answers ENOSYS, the host closes the channel). */
static bool
valid_type(uint8_t t)
{
	return t != 0 && t != 0xff;
}

int
frame_decoder_next(struct frame_decoder *d, struct frame *ret, bool *ret_new_session)
{
	const uint8_t *h;
	size_t avail;
	uint32_t len;

	if (d->pending) {
		buf_consume(&d->in, d->pending);
		d->pending = 0;
	}
	if (d->hunting) {
		const char *p = buf_head(&d->in);
		const char *m = NULL;
		avail = buf_avail(&d->in);
		if (avail >= AP_MAGIC_LEN)
			m = memmem(p, avail, AP_MAGIC, AP_MAGIC_LEN);
		if (!m) {
			/* keep a tail that could be the start of a magic */
			if (avail >= AP_MAGIC_LEN)
				buf_consume(&d->in, avail - (AP_MAGIC_LEN - 1));
			return 0;
		}
		buf_consume(&d->in, (size_t)(m - p) + AP_MAGIC_LEN);
		d->hunting = false;
		d->after_magic = true;
	} else if (buf_avail(&d->in) >= AP_MAGIC_LEN &&
	           memcmp(buf_head(&d->in), AP_MAGIC, AP_MAGIC_LEN) == 0) {
		/* a session start without a reset before it (type 0xff is never a frame type) */
		buf_consume(&d->in, AP_MAGIC_LEN);
		d->after_magic = true;
	}
	avail = buf_avail(&d->in);
	if (avail < FRAME_HEADER)
		return 0;
	h = (const uint8_t *)buf_head(&d->in);
	len = be32_get(h + 8);
	if (!valid_type(h[0]) || h[2] || h[3] || len > d->max_payload)
		return -EPROTO;
	if (avail < FRAME_HEADER + (size_t)len)
		return 0;
	*ret = (struct frame){
		.type = h[0],
		.flags = h[1],
		.chan = be32_get(h + 4),
		.payload = h + FRAME_HEADER,
		.len = len,
	};
	if (ret_new_session)
		*ret_new_session = d->after_magic;
	d->after_magic = false;
	d->pending = FRAME_HEADER + len;
	return 1;
}
