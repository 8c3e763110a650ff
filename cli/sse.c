/* sse.c: see sse.h. Follows the WHATWG event-stream grammar: lines end with CRLF, LF or CR;
 * "field: value" (one optional space after the colon); a blank line dispatches the event. */
#include <errno.h>
#include <stdbool.h>
#include "sse.h"
#include "util.h"

void
sse_init(struct sse *s, size_t max, sse_event_fn fn, void *userdata)
{
	*s = (struct sse){ .fn = fn, .userdata = userdata };
	buf_init(&s->line, max);
	buf_init(&s->data, max);
}

void
sse_done(struct sse *s)
{
	buf_free(&s->line);
	buf_free(&s->data);
}

static void
set_field(char *dst, size_t size, const char *value, size_t n)
{
	/* an over-long type or id is cut: neither can carry anything we act on */
	n = MIN(n, size - 1);
	memcpy(dst, value, n);
	dst[n] = '\0';
}

static int
dispatch(struct sse *s)
{
	char *data = buf_head(&s->data);
	size_t len = buf_avail(&s->data);
	int r = 0;

	/* an event without data lines is not dispatched; its type is forgotten, its id kept.
	 * Each data line added a '\n': the last one is not part of the data. */
	if (len > 0) {
		data[--len] = '\0';
		r = s->fn(s->userdata, s->type[0] ? s->type : "message", s->id, data, len);
	}
	buf_reset(&s->data);
	s->type[0] = '\0';
	return r;
}

static int
process_line(struct sse *s, const char *line, size_t n)
{
	const char *colon, *value;
	size_t flen, vlen;
	int r;

	if (n == 0)
		return dispatch(s);
	if (line[0] == ':')
		return 0; /* a comment: heartbeats */
	colon = memchr(line, ':', n);
	flen = colon ? (size_t)(colon - line) : n;
	value = colon ? colon + 1 : line + n;
	vlen = colon ? n - flen - 1 : 0;
	if (vlen > 0 && value[0] == ' ') {
		value++;
		vlen--;
	}
	if (flen == 4 && strneq(line, "data", 4)) {
		r = buf_append(&s->data, value, vlen);
		if (r >= 0)
			r = buf_putc(&s->data, '\n');
		return r < 0 ? -ENOBUFS : 0;
	}
	if (flen == 5 && strneq(line, "event", 5))
		set_field(s->type, sizeof(s->type), value, vlen);
	else if (flen == 2 && strneq(line, "id", 2) && !memchr(value, '\0', vlen))
		set_field(s->id, sizeof(s->id), value, vlen);
	/* "retry" and unknown fields: nothing to do */
	return 0;
}

static int
end_line(struct sse *s)
{
	int r = process_line(s, buf_head(&s->line) ? buf_head(&s->line) : "", buf_avail(&s->line));

	buf_reset(&s->line);
	return r;
}

int
sse_feed(struct sse *s, const char *p, size_t n)
{
	size_t i = 0;
	int r;

	if (!s->started && n > 0) {
		/* a UTF-8 byte order mark may open the stream; it can arrive split */
		static const char bom[] = "\xef\xbb\xbf";
		size_t have = buf_avail(&s->line);
		while (i < n && have + i < 3 && p[i] == bom[have + i])
			i++;
		if (have + i < 3 && i == n) {
			if (buf_append(&s->line, p, n) < 0)
				return -ENOBUFS;
			return 0;
		}
		if (have + i == 3) {
			buf_reset(&s->line);
		} else {
			i = 0; /* not a BOM: what was held back is ordinary text */
		}
		s->started = true;
	}
	while (i < n) {
		const char *start = p + i;
		size_t k = 0;

		if (s->last_cr) {
			s->last_cr = false;
			if (*start == '\n') {
				i++;
				continue;
			}
		}
		while (i + k < n && start[k] != '\n' && start[k] != '\r')
			k++;
		if (buf_append(&s->line, start, k) < 0)
			return -ENOBUFS;
		i += k;
		if (i == n)
			break; /* the line goes on in the next chunk */
		s->last_cr = p[i] == '\r';
		i++;
		r = end_line(s);
		if (r != 0)
			return r;
	}
	return 0;
}
