/* http.c: see http.h. */
#include <ctype.h>
#include <errno.h>
#include <strings.h>
#include "http.h"
#include "util.h"

#define ARENA_MAX (HTTP_MAX_HEAD * 2)

static bool
is_tchar(unsigned char c)
{
	/* RFC 9110 token characters */
	if (isalnum(c))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int
fail(struct http_req_parser *hp, int status, const char *message)
{
	hp->phase = HTTP_PHASE_ERROR;
	hp->err_status = status;
	hp->err_message = message;
	return -EBADMSG;
}

static struct http_req_parser *
from(http_parser *p)
{
	return p->data;
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

static int
on_url(http_parser *p, const char *at, size_t n)
{
	struct http_req_parser *hp = from(p);

	/* the url is the first piece of the arena: offset 0 */
	return arena_put(hp, at, n, false);
}

static int
close_value(struct http_req_parser *hp)
{
	if (!hp->header_value_open)
		return 0;
	hp->header_value_open = false;
	return arena_end(hp);
}

static int
on_header_field(http_parser *p, const char *at, size_t n)
{
	struct http_req_parser *hp = from(p);
	struct http_request *r = &hp->req;
	struct http_header *h;

	if (r->target) {
		/* after the head: trailer fields of a chunked body. They would bypass every check
		 * above and grow the arena that target/path/query point into. */
		fail(hp, 400, "trailer fields are not accepted");
		return -1;
	}
	if (!hp->url_done) {
		/* the url is complete once the first header name starts */
		hp->url_done = true;
		if (arena_end(hp) < 0)
			return -1;
	}
	if (hp->last_was_name) {
		/* continuation of a name split across feeds */
		h = &r->headers[r->nheaders - 1];
		h->name_len += (uint32_t)n;
		/* drop the NUL written after the first part, then append */
		r->arena.len--;
		return arena_put(hp, at, n, true) < 0 || arena_end(hp) < 0 ? -1 : 0;
	}
	if (close_value(hp) < 0)
		return -1;
	if (r->nheaders == HTTP_MAX_HEADERS) {
		fail(hp, 431, "too many request headers");
		return -1;
	}
	h = &r->headers[r->nheaders++];
	h->name_off = (uint32_t)r->arena.len;
	h->name_len = (uint32_t)n;
	h->value_off = UINT32_MAX;
	h->value_len = 0;
	hp->last_was_name = true;
	return arena_put(hp, at, n, true) < 0 || arena_end(hp) < 0 ? -1 : 0;
}

static int
on_header_value(http_parser *p, const char *at, size_t n)
{
	struct http_req_parser *hp = from(p);
	struct http_request *r = &hp->req;
	struct http_header *h;

	if (r->nheaders == 0 || r->target)
		return -1;
	hp->last_was_name = false;
	h = &r->headers[r->nheaders - 1];
	if (!hp->header_value_open) {
		h->value_off = (uint32_t)r->arena.len;
		h->value_len = 0;
		hp->header_value_open = true;
	}
	h->value_len += (uint32_t)n;
	return arena_put(hp, at, n, false);
}

static void
trim_values(struct http_request *r)
{
	for (unsigned i = 0; i < r->nheaders; i++) {
		struct http_header *h = &r->headers[i];
		char *v;

		if (h->value_off == UINT32_MAX) {
			h->value_off = h->name_off + h->name_len; /* the NUL: an empty value */
			h->value_len = 0;
			continue;
		}
		v = r->arena.data + h->value_off;
		while (h->value_len > 0 &&
		       (v[h->value_len - 1] == ' ' || v[h->value_len - 1] == '\t'))
			v[--h->value_len] = '\0';
	}
}

static int
on_headers_complete(http_parser *p)
{
	struct http_req_parser *hp = from(p);
	struct http_request *r = &hp->req;
	const char *te, *host;
	char *q;

	if (close_value(hp) < 0)
		return -1;
	if (!hp->url_done) {
		hp->url_done = true;
		if (arena_end(hp) < 0)
			return -1;
	}
	trim_values(r);
	r->target = r->arena.data;
	/* the arena no longer moves: split target into path and query in place is not possible
	 * (target must stay intact), so copy the path */
	q = strchr(r->target, '?');
	if (q) {
		size_t plen = (size_t)(q - r->target);
		size_t off = r->arena.len;
		/* the copy's source is the arena itself: make room first, so that appending
		 * cannot move the bytes it copies */
		if (buf_reserve(&r->arena, plen + 1) < 0)
			return -1;
		if (buf_append(&r->arena, r->arena.data, plen) < 0 || arena_end(hp) < 0)
			return -1;
		r->target = r->arena.data;
		r->path = r->arena.data + off;
		r->query = strchr(r->target, '?') + 1;
	} else {
		r->path = r->target;
		r->query = r->target + strlen(r->target);
	}
	r->method = (enum http_method)p->method;
	r->http_major = p->http_major;
	r->http_minor = p->http_minor;
	r->keep_alive = http_should_keep_alive(p);
	r->upgrade = p->upgrade;
	r->chunked = (p->flags & F_CHUNKED) != 0;
	r->has_length = (p->flags & F_CONTENTLENGTH) != 0;
	r->content_length = r->has_length ? p->content_length : 0;

	if (r->http_major != 1) {
		/* HTTP/0.9 ("GET /" alone) and 2.x over this framing are not requests we serve */
		fail(hp, 400, "only HTTP/1.0 and HTTP/1.1 are accepted");
		return -1;
	}
	if (r->path[0] != '/') {
		fail(hp, 400, "the request target must be an absolute path");
		return -1;
	}
	host = http_req_header(r, "host");
	if (http_req_header_count(r, "host") > 1) {
		fail(hp, 400, "more than one Host header");
		return -1;
	}
	if (r->http_major == 1 && r->http_minor >= 1 && !host) {
		fail(hp, 400, "missing Host header");
		return -1;
	}
	te = http_req_header(r, "transfer-encoding");
	if (te &&
	    (http_req_header_count(r, "transfer-encoding") > 1 || strcasecmp(te, "chunked"))) {
		fail(hp, 400, "only 'Transfer-Encoding: chunked' is accepted");
		return -1;
	}
	hp->body_max = hp->body_limit ? hp->body_limit(r, hp->body_limit_data) : 0;
	r->body.max = hp->body_max;
	if (r->has_length && r->content_length > hp->body_max) {
		fail(hp, 413, "request body too large");
		return -1;
	}
	if (r->upgrade) {
		/* the bytes after the head belong to the new protocol: a body would make where
		 * the request ends depend on how the bytes arrive */
		if (r->chunked || r->content_length > 0) {
			fail(hp, 400, "an upgrade request cannot carry a body");
			return -1;
		}
		return 0;
	}
	hp->phase = HTTP_PHASE_BODY;
	return 0;
}

static int
on_body(http_parser *p, const char *at, size_t n)
{
	struct http_req_parser *hp = from(p);

	if (hp->req.body.len + n > hp->body_max) {
		fail(hp, 413, "request body too large");
		return -1;
	}
	if (buf_append(&hp->req.body, at, n) < 0) {
		fail(hp, 413, "request body too large");
		return -1;
	}
	return 0;
}

static int
on_message_complete(http_parser *p)
{
	struct http_req_parser *hp = from(p);

	hp->phase = HTTP_PHASE_DONE;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings settings = {
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

void
http_req_parser_init(struct http_req_parser *hp, http_body_limit_fn fn, void *data)
{
	*hp = (struct http_req_parser){ .body_limit = fn, .body_limit_data = data };
	buf_init(&hp->req.arena, ARENA_MAX);
	buf_init(&hp->req.body, 0);
	http_parser_init(&hp->p, HTTP_REQUEST);
	hp->p.data = hp;
}

void
http_req_parser_reset(struct http_req_parser *hp)
{
	struct buf arena = hp->req.arena;
	http_body_limit_fn fn = hp->body_limit;
	void *data = hp->body_limit_data;

	buf_free(&hp->req.body);
	buf_reset(&arena);
	*hp = (struct http_req_parser){ .body_limit = fn, .body_limit_data = data };
	hp->req.arena = arena;
	buf_init(&hp->req.body, 0);
	http_parser_init(&hp->p, HTTP_REQUEST);
	hp->p.data = hp;
}

void
http_req_parser_done(struct http_req_parser *hp)
{
	buf_free(&hp->req.arena);
	buf_free(&hp->req.body);
}

/* Checks the raw head bytes that libhttp-parser is lenient about. Returns how many of the
 * given bytes belong to the head (the rest is body), or -EBADMSG. Sets *ret_end once the
 * empty line that ends the head has been seen. */
static int
prescan(struct http_req_parser *hp, const char *data, size_t len, size_t *ret_n, bool *ret_end)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)data[i];

		if (++hp->head_bytes > HTTP_MAX_HEAD)
			return fail(hp, 431, "request head too large");
		if (hp->prev == '\r' && c != '\n')
			return fail(hp, 400, "CR not followed by LF in the request head");
		if (c == '\n') {
			if (hp->prev != '\r')
				return fail(hp, 400, "bare LF in the request head");
			if (hp->line_len == 1) { /* the line was just "\r" */
				if (hp->head_lines == 0)
					return fail(hp, 400, "empty request line");
				*ret_n = i + 1;
				*ret_end = true;
				hp->prev = 0;
				return 0;
			}
			if (hp->head_lines > 0 && !hp->saw_colon)
				return fail(hp, 400, "header line without a colon");
			if (++hp->head_lines > HTTP_MAX_HEADERS + 1)
				return fail(hp, 431, "too many request headers");
			hp->line_len = 0;
			hp->in_name = hp->head_lines > 0;
			hp->saw_colon = false;
			hp->prev = (char)c;
			continue;
		}
		if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
			return fail(hp, 400, "control character in the request head");
		if (hp->head_lines == 0 && (c == '\t' || c >= 0x80))
			return fail(hp, 400, "invalid character in the request line");
		if (hp->head_lines > 0) {
			if (hp->line_len == 0 && (c == ' ' || c == '\t'))
				return fail(hp, 400, "obsolete line folding in a header");
			if (hp->in_name) {
				if (c == ':') {
					if (hp->line_len == 0)
						return fail(hp, 400, "empty header name");
					hp->in_name = false;
					hp->saw_colon = true;
				} else if (c != '\r' && !is_tchar(c)) {
					return fail(hp, 400, "invalid character in a header name");
				}
			}
		}
		hp->line_len++;
		hp->prev = (char)c;
	}
	*ret_n = len;
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
	CHUNK_DONE,
};

/* Checks the framing of a chunked body that libhttp-parser has consumed: it accepts any two
 * bytes after chunk data and a few other bare-LF and missing-LF spellings that a stricter
 * proxy in front would frame differently. Returns 0 or -EBADMSG. */
static int
chunk_scan(struct http_req_parser *hp, const char *data, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)data[i];
		int hex = c >= '0' && c <= '9'   ? c - '0'
		          : c >= 'a' && c <= 'f' ? c - 'a' + 10
		          : c >= 'A' && c <= 'F' ? c - 'A' + 10
		                                 : -1;

		switch (hp->chunk_state) {
		case CHUNK_SIZE_START:
		case CHUNK_SIZE:
			if (hex >= 0) {
				if (hp->chunk_left > (UINT64_MAX >> 4))
					return fail(hp, 400, "chunk size too large");
				hp->chunk_left = hp->chunk_left << 4 | (uint64_t)hex;
				hp->chunk_state = CHUNK_SIZE;
			} else if (hp->chunk_state == CHUNK_SIZE && c == '\r') {
				hp->chunk_state = CHUNK_SIZE_LF;
			} else if (hp->chunk_state == CHUNK_SIZE &&
			           (c == ';' || c == ' ' || c == '\t')) {
				hp->chunk_state = CHUNK_EXT;
			} else {
				return fail(hp, 400, "malformed chunk size");
			}
			break;
		case CHUNK_EXT:
			if (c == '\r')
				hp->chunk_state = CHUNK_SIZE_LF;
			else if ((c < 0x20 && c != '\t') || c == 0x7f)
				return fail(hp, 400, "malformed chunk extension");
			break;
		case CHUNK_SIZE_LF:
			if (c != '\n')
				return fail(hp, 400, "chunk size line not ended by CRLF");
			hp->chunk_state = hp->chunk_left ? CHUNK_DATA : CHUNK_END_CR;
			break;
		case CHUNK_DATA: {
			size_t n = (size_t)MIN((uint64_t)(len - i), hp->chunk_left);
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
		case CHUNK_END_LF:
			if (c != '\n')
				return fail(hp, 400, "chunk data not followed by CRLF");
			hp->chunk_state =
			        hp->chunk_state == CHUNK_DATA_LF ? CHUNK_SIZE_START : CHUNK_DONE;
			break;
		default:
			return fail(hp, 400, "bytes after the end of a chunked body");
		}
	}
	return 0;
}

int
http_req_feed(struct http_req_parser *hp, const char *data, size_t len, size_t *ret_used)
{
	size_t head_n = len, n;
	bool head_end = false;

	if (hp->phase == HTTP_PHASE_ERROR)
		return -EBADMSG;
	if (hp->phase == HTTP_PHASE_DONE) {
		*ret_used = 0;
		return 1;
	}
	if (hp->phase == HTTP_PHASE_HEAD) {
		if (prescan(hp, data, len, &head_n, &head_end) < 0)
			return -EBADMSG;
	}
	n = http_parser_execute(&hp->p, &settings, data, len);
	if (hp->phase == HTTP_PHASE_ERROR)
		return -EBADMSG;
	/* the body bytes the parser took in this feed: after the head if it ended here */
	if (hp->req.chunked && !hp->req.upgrade && n > (head_end ? head_n : 0) &&
	    chunk_scan(hp, data + (head_end ? head_n : 0), n - (head_end ? head_n : 0)) < 0)
		return -EBADMSG;
	if (HTTP_PARSER_ERRNO(&hp->p) == HPE_PAUSED) {
		*ret_used = n;
		return 1;
	}
	if (hp->p.upgrade && hp->req.target) {
		/* head complete; the rest of the bytes belong to the upgraded protocol */
		hp->phase = HTTP_PHASE_DONE;
		*ret_used = n;
		return 1;
	}
	if (HTTP_PARSER_ERRNO(&hp->p) != HPE_OK) {
		enum http_errno e = HTTP_PARSER_ERRNO(&hp->p);
		if (e == HPE_HEADER_OVERFLOW)
			return fail(hp, 431, "request head too large");
		return fail(hp, 400, "malformed HTTP request");
	}
	*ret_used = n;
	return 0;
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
