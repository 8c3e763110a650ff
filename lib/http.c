/* http.c: see http.h. A request's head is gathered and read by the shared reader
 * (http-head.c), then turned into a struct http_request whose names and values are C strings
 * in one arena; its body is read by Content-Length or by the chunked framing below. */
#include <ctype.h>
#include <errno.h>
#include "http.h"
#include "util.h"

#define ARENA_MAX (HTTP_MAX_HEAD * 2)

/* The methods libhttp-parser names, by enum http_method. */
static const char *const method_names[] = {
#define XX(num, name, string) [num] = #string,
	HTTP_METHOD_MAP(XX)
#undef XX
};

static int
fail(struct http_req_parser *hp, int status, const char *message)
{
	hp->phase = HTTP_PHASE_ERROR;
	hp->err_status = status;
	hp->err_message = message;
	return -EBADMSG;
}

static int
method_from(const char *s, size_t n)
{
	for (size_t i = 0; i < ARRAY_SIZE(method_names); i++)
		if (method_names[i] && strlen(method_names[i]) == n &&
		    memcmp(method_names[i], s, n) == 0)
			return (int)i;
	return -1;
}

static int
arena_put(struct http_req_parser *hp, const char *at, size_t n, bool lower)
{
	struct buf *a = &hp->req.arena;
	size_t start = a->len;

	if (buf_append(a, at, n) < 0)
		return -1;
	if (lower)
		for (size_t i = start; i < a->len; i++)
			a->data[i] = (char)tolower((unsigned char)a->data[i]);
	return 0;
}

/* Terminates the piece being built with a NUL, so every name and value is a C string. */
static int
arena_end(struct http_req_parser *hp)
{
	return buf_putc(&hp->req.arena, '\0') < 0 ? -1 : 0;
}

/* Copies the head's target and fields into the arena (the target first, at offset 0). */
static int
fill_arena(struct http_req_parser *hp)
{
	const struct http_head *h = &hp->reader.h;
	const char *b = hp->head.data;
	struct http_request *r = &hp->req;

	if (arena_put(hp, b + h->target_off, h->target_len, false) < 0 || arena_end(hp) < 0)
		return -1;
	for (unsigned i = 0; i < h->nfields; i++) {
		const struct http_head_field *f = &h->fields[i];
		struct http_header *hd = &r->headers[i];

		hd->name_off = (uint32_t)r->arena.len;
		hd->name_len = f->name_len;
		if (arena_put(hp, b + f->name_off, f->name_len, true) < 0 || arena_end(hp) < 0)
			return -1;
		hd->value_off = (uint32_t)r->arena.len;
		hd->value_len = f->value_len;
		if (arena_put(hp, b + f->value_off, f->value_len, false) < 0 || arena_end(hp) < 0)
			return -1;
	}
	r->nheaders = h->nfields;
	return 0;
}

/* Splits the target into path and query: the path is copied (the target stays whole). */
static int
split_target(struct http_request *r)
{
	char *q;

	r->target = r->arena.data;
	q = strchr(r->target, '?');
	if (q) {
		size_t plen = (size_t)(q - r->target);
		size_t off = r->arena.len;
		/* the copy's source is the arena itself: make room first, so that appending
		 * cannot move the bytes it copies */
		if (buf_reserve(&r->arena, plen + 1) < 0)
			return -1;
		if (buf_append(&r->arena, r->arena.data, plen) < 0 || buf_putc(&r->arena, '\0') < 0)
			return -1;
		r->target = r->arena.data;
		r->path = r->arena.data + off;
		r->query = strchr(r->target, '?') + 1;
	} else {
		r->path = r->target;
		r->query = r->target + strlen(r->target);
	}
	return 0;
}

/* The head is read whole: the request it makes, what sandboxd serves, and what comes after
 * it (a body, nothing, or an upgraded protocol's bytes). 0 or -EBADMSG. */
static int
take_head(struct http_req_parser *hp)
{
	const struct http_head *h = &hp->reader.h;
	struct http_request *r = &hp->req;
	int m = method_from(hp->head.data, h->method_len);

	if (m < 0)
		return fail(hp, 400,
		            "a malformed request line: a method this server does not know");
	if (fill_arena(hp) < 0 || split_target(r) < 0)
		return fail(hp, 431, "request head too large");
	r->method = (enum http_method)m;
	r->http_major = 1;
	r->http_minor = h->minor;
	r->keep_alive = h->keep_alive;
	/* CONNECT too: what follows its head is a tunnel's, not HTTP */
	r->upgrade = h->upgrade || r->method == HTTP_CONNECT;
	r->chunked = h->chunked;
	r->has_length = h->has_length;
	r->content_length = h->content_length;

	if (r->path[0] != '/')
		return fail(hp, 400, "the request target must be an absolute path");
	hp->body_max = hp->body_limit ? hp->body_limit(r, hp->body_limit_data) : 0;
	r->body.max = hp->body_max;
	if (r->has_length && r->content_length > hp->body_max)
		return fail(hp, 413, "request body too large");
	if (r->upgrade) {
		/* the bytes after the head belong to the new protocol: a body would make where
		 * the request ends depend on how the bytes arrive */
		if (r->chunked || r->content_length > 0)
			return fail(hp, 400, "an upgrade request cannot carry a body");
		hp->phase = HTTP_PHASE_DONE;
		return 0;
	}
	hp->body_left = r->content_length;
	hp->phase = r->chunked || hp->body_left > 0 ? HTTP_PHASE_BODY : HTTP_PHASE_DONE;
	return 0;
}

/* Adds len bytes of data to the head and reads it: 1 once it is whole (*ret_used of these
 * bytes were the head's), 0 when all were taken and more are needed, or -EBADMSG. */
static int
feed_head(struct http_req_parser *hp, const char *data, size_t len, size_t *ret_used)
{
	size_t before = hp->head.len, take = MIN(len, HTTP_MAX_HEAD - before);

	if (buf_append(&hp->head, data, take) < 0)
		return fail(hp, 503, "out of memory reading the request");
	switch (http_head_read(&hp->reader, (const uint8_t *)hp->head.data, hp->head.len)) {
	case HTTP_HEAD_NEED_MORE:
		return 0;
	case HTTP_HEAD_INVALID:
		return fail(hp, hp->reader.status, hp->reader.why);
	case HTTP_HEAD_DONE:
		break;
	}
	/* what came after the head is the body's, or the next request's */
	*ret_used = hp->reader.h.len - before;
	hp->head.len = hp->reader.h.len;
	hp->head.data[hp->head.len] = '\0';
	return take_head(hp) < 0 ? -EBADMSG : 1;
}

static int
body_append(struct http_req_parser *hp, const char *at, size_t n)
{
	if (n > hp->body_max - hp->body_seen || buf_append(&hp->req.body, at, n) < 0)
		return fail(hp, 413, "request body too large");
	hp->body_seen += n;
	return 0;
}

enum {
	CHUNK_SIZE_START, /* the first hex digit of a chunk size */
	CHUNK_SIZE,
	CHUNK_EXT, /* ";name=value" after the size, up to CR */
	CHUNK_SIZE_LF,
	CHUNK_DATA,
	CHUNK_DATA_CR,
	CHUNK_DATA_LF,
	CHUNK_END_CR, /* after the last chunk: no trailers, just CRLF */
	CHUNK_END_LF,
};

/* Reads a chunked body strictly: CRLF after each size line and each chunk's data, no
 * trailer fields (they would bypass every check of the head), every spelling a stricter
 * proxy in front could frame differently refused. 1 once the body ended (*ret_used bytes
 * were its), 0 when all were taken and more are needed, or -EBADMSG. */
static int
chunk_feed(struct http_req_parser *hp, const char *data, size_t len, size_t *ret_used)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)data[i];
		int hex = hex_digit(c);

		switch (hp->chunk_state) {
		case CHUNK_SIZE_START:
		case CHUNK_SIZE:
			if (hex >= 0) {
				if (hp->chunk_left > (UINT64_MAX >> 4))
					return fail(hp, 400, "a malformed chunk size: too large");
				hp->chunk_left = hp->chunk_left << 4 | (uint64_t)hex;
				hp->chunk_state = CHUNK_SIZE;
			} else if (hp->chunk_state == CHUNK_SIZE && c == '\r') {
				hp->chunk_state = CHUNK_SIZE_LF;
			} else if (hp->chunk_state == CHUNK_SIZE &&
			           (c == ';' || c == ' ' || c == '\t')) {
				hp->chunk_state = CHUNK_EXT;
			} else {
				return fail(hp, 400, "a malformed chunk size");
			}
			break;
		case CHUNK_EXT:
			if (c == '\r')
				hp->chunk_state = CHUNK_SIZE_LF;
			else if ((c < 0x20 && c != '\t') || c == 0x7f)
				return fail(hp, 400, "a malformed chunk extension");
			break;
		case CHUNK_SIZE_LF:
			if (c != '\n')
				return fail(hp, 400,
				            "a malformed chunk size line: not ended by CRLF");
			hp->chunk_state = hp->chunk_left ? CHUNK_DATA : CHUNK_END_CR;
			break;
		case CHUNK_DATA: {
			size_t n = (size_t)MIN((uint64_t)(len - i), hp->chunk_left);

			if (body_append(hp, data + i, n) < 0)
				return -EBADMSG;
			hp->chunk_left -= n;
			i += n - 1;
			if (hp->chunk_left == 0)
				hp->chunk_state = CHUNK_DATA_CR;
			break;
		}
		case CHUNK_DATA_CR:
		case CHUNK_END_CR:
			if (c != '\r')
				return fail(hp, 400,
				            hp->chunk_state == CHUNK_END_CR
				                    ? "trailer fields are not accepted"
				                    : "chunk data not followed by CRLF");
			hp->chunk_state++;
			break;
		case CHUNK_DATA_LF:
			if (c != '\n')
				return fail(hp, 400, "chunk data not followed by CRLF");
			hp->chunk_state = CHUNK_SIZE_START;
			break;
		case CHUNK_END_LF:
			if (c != '\n')
				return fail(hp, 400, "chunk data not followed by CRLF");
			*ret_used = i + 1;
			return 1;
		}
	}
	*ret_used = len;
	return 0;
}

/* Reads body bytes: 1 once the body is whole (*ret_used bytes were its), 0 when all were
 * taken and more are needed, or -EBADMSG. */
static int
feed_body(struct http_req_parser *hp, const char *data, size_t len, size_t *ret_used)
{
	size_t n;
	int r;

	if (hp->req.chunked) {
		r = chunk_feed(hp, data, len, ret_used);
		if (r > 0)
			hp->phase = HTTP_PHASE_DONE;
		return r;
	}
	n = (size_t)MIN((uint64_t)len, hp->body_left);
	if (body_append(hp, data, n) < 0)
		return -EBADMSG;
	hp->body_left -= n;
	*ret_used = n;
	if (hp->body_left > 0)
		return 0;
	hp->phase = HTTP_PHASE_DONE;
	return 1;
}

void
http_req_parser_init(struct http_req_parser *hp, http_body_limit_fn fn, void *data)
{
	*hp = (struct http_req_parser){ .body_limit = fn, .body_limit_data = data };
	buf_init(&hp->req.arena, ARENA_MAX);
	buf_init(&hp->req.body, 0);
	buf_init(&hp->head, HTTP_MAX_HEAD);
	http_head_reader_init(&hp->reader, NULL);
}

void
http_req_parser_reset(struct http_req_parser *hp)
{
	struct buf arena = hp->req.arena, head = hp->head;
	http_body_limit_fn fn = hp->body_limit;
	void *data = hp->body_limit_data;
	bool stop_at_body = hp->stop_at_body;

	buf_free(&hp->req.body);
	buf_reset(&arena);
	buf_reset(&head);
	*hp = (struct http_req_parser){ .body_limit = fn,
		                        .body_limit_data = data,
		                        .stop_at_body = stop_at_body };
	hp->req.arena = arena;
	hp->head = head;
	buf_init(&hp->req.body, 0);
	http_head_reader_init(&hp->reader, NULL);
}

void
http_req_parser_done(struct http_req_parser *hp)
{
	buf_free(&hp->req.arena);
	buf_free(&hp->req.body);
	buf_free(&hp->head);
}

int
http_req_feed(struct http_req_parser *hp, const char *data, size_t len, size_t *ret_used)
{
	size_t head_n = 0, body_n = 0;
	bool was_head = hp->phase == HTTP_PHASE_HEAD;
	int r;

	if (hp->phase == HTTP_PHASE_ERROR)
		return -EBADMSG;
	if (hp->phase == HTTP_PHASE_HEAD) {
		r = feed_head(hp, data, len, &head_n);
		if (r < 0)
			return r;
		if (r == 0) {
			*ret_used = len;
			return 0;
		}
	}
	if (hp->phase == HTTP_PHASE_DONE) {
		*ret_used = head_n;
		return 1;
	}
	if (was_head && hp->stop_at_body) {
		*ret_used = head_n;
		return HTTP_FEED_HEAD;
	}
	r = feed_body(hp, data + head_n, len - head_n, &body_n);
	if (r < 0)
		return r;
	*ret_used = head_n + body_n;
	return r;
}

const char *
http_req_header(const struct http_request *req, const char *name)
{
	for (unsigned i = 0; i < req->nheaders; i++)
		if (streq(req->arena.data + req->headers[i].name_off, name))
			return req->arena.data + req->headers[i].value_off;
	return NULL;
}

unsigned
http_req_header_count(const struct http_request *req, const char *name)
{
	unsigned n = 0;

	for (unsigned i = 0; i < req->nheaders; i++)
		if (streq(req->arena.data + req->headers[i].name_off, name))
			n++;
	return n;
}

/* Decodes n bytes of application/x-www-form-urlencoded or a path segment. */
static int
pct_decode(const char *s, size_t n, bool plus_is_space, bool allow_slash, char *out, size_t size)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '%') {
			int hi, lo;
			if (i + 2 >= n)
				return -EINVAL;
			hi = hex_digit((unsigned char)s[i + 1]);
			lo = hex_digit((unsigned char)s[i + 2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			c = (char)(hi * 16 + lo);
			i += 2;
		} else if (c == '+' && plus_is_space) {
			c = ' ';
		}
		if (c == '\0' || (c == '/' && !allow_slash))
			return -EINVAL;
		if (o + 1 >= size)
			return -E2BIG;
		out[o++] = c;
	}
	out[o] = '\0';
	return 0;
}

int
http_query_next(const char *query, size_t *pos, char *key, size_t key_size, char *value,
                size_t value_size)
{
	const char *s, *amp, *eq;
	size_t n;

	for (;;) {
		s = query + *pos;
		if (*s == '\0')
			return 0;
		amp = strchr(s, '&');
		n = amp ? (size_t)(amp - s) : strlen(s);
		*pos += n + (amp ? 1 : 0);
		if (n > 0)
			break;
	}
	eq = memchr(s, '=', n);
	if (eq) {
		if (pct_decode(s, (size_t)(eq - s), true, true, key, key_size) < 0 ||
		    pct_decode(eq + 1, n - (size_t)(eq - s) - 1, true, true, value, value_size) < 0)
			return -EINVAL;
	} else {
		if (pct_decode(s, n, true, true, key, key_size) < 0 || value_size == 0)
			return -EINVAL;
		value[0] = '\0';
	}
	return 1;
}

int
http_segment_decode(const char *seg, size_t n, char *out, size_t size)
{
	return pct_decode(seg, n, false, false, out, size);
}

int
http_segment_decode_name(const char *seg, size_t n, char *out, size_t size)
{
	return pct_decode(seg, n, false, true, out, size);
}

static const struct {
	int status;
	const char *text;
} status_texts[] = {
	{ 101, "Switching Protocols" },
	{ 200, "OK" },
	{ 201, "Created" },
	{ 202, "Accepted" },
	{ 204, "No Content" },
	{ 302, "Found" },
	{ 304, "Not Modified" },
	{ 400, "Bad Request" },
	{ 401, "Unauthorized" },
	{ 403, "Forbidden" },
	{ 404, "Not Found" },
	{ 405, "Method Not Allowed" },
	{ 408, "Request Timeout" },
	{ 409, "Conflict" },
	{ 413, "Content Too Large" },
	{ 415, "Unsupported Media Type" },
	{ 429, "Too Many Requests" },
	{ 431, "Request Header Fields Too Large" },
	{ 500, "Internal Server Error" },
	{ 501, "Not Implemented" },
	{ 502, "Bad Gateway" },
	{ 503, "Service Unavailable" },
};

const char *
http_status_text(int status)
{
	for (size_t i = 0; i < ARRAY_SIZE(status_texts); i++)
		if (status_texts[i].status == status)
			return status_texts[i].text;
	return "Unknown";
}

int
http_put_status_line(struct buf *out, int status)
{
	return buf_printf(out, "HTTP/1.1 %d %s\r\n", status, http_status_text(status));
}
