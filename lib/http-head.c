/* http-head.c: the one strict reader of HTTP/1.x request heads (see http-head.h). Lines are
 * read in order, each once it is whole: a read resumes at the first line it had not read
 * whole. With rules->partial the line still arriving is judged too, on a copy of the state,
 * so nothing it shows is kept before its line ends. */
#include <string.h>
#include <strings.h>
#include "http-head.h"
#include "util.h"

static const char too_large[] = "request head too large: longer than 16384 bytes";
static const char too_many[] = "too many request headers (more than 64)";

static bool
tchar(uint8_t c)
{
	/* RFC 9110 token characters */
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}

static bool
ows(uint8_t c)
{
	return c == ' ' || c == '\t';
}

static bool
name_is(const uint8_t *name, size_t n, const char *want)
{
	return n == strlen(want) && strncasecmp((const char *)name, want, n) == 0;
}

void
http_head_reader_init(struct http_head_reader *r, const struct http_head_rules *rules)
{
	*r = (struct http_head_reader){ .rules = rules, .result = HTTP_HEAD_NEED_MORE };
	r->h.host = -1;
}

/* The request line (l, n bytes, at the head's start), or as much of it as has arrived. */
static const char *
request_line(struct http_head_reader *r, const uint8_t *l, size_t n, bool partial)
{
	const struct http_head_rules *rules = r->rules;
	size_t i = 0, m, t, v;
	const char *why;

	if (n == 0 && !partial)
		return "an empty request line (an empty line before the request)";
	/* a CR left inside: the line reader split at LF, and the grammar has no place for one */
	if (memchr(l, '\r', n))
		return "a CR inside the request line (CR not followed by LF)";
	while (i < n && tchar(l[i]))
		i++;
	if (i > HTTP_HEAD_METHOD_MAX)
		return "a method longer than 15 bytes";
	if (i == n)
		return partial ? NULL : "a request line without a target";
	if (i == 0)
		return "a request line that does not start with a method";
	if (l[i] != ' ')
		return "a method that is not a token";
	m = i++;

	t = i;
	while (i < n && l[i] != ' ') {
		if (l[i] < 0x20 || l[i] == 0x7f)
			return "a control character in the request target: printable ASCII only";
		if (l[i] > 0x7e)
			return "a request target with a byte that is not printable ASCII";
		/* a fragment is the client's own; servers cut it in different places */
		if (l[i] == '#')
			return "a request target with a fragment";
		i++;
	}
	if (i == t)
		return i == n && partial ? NULL : "an empty request target";
	if (rules && rules->target &&
	    (why = rules->target(rules->data, l, m, l + t, i - t, i == n && partial)))
		return why;
	if (i == n)
		return partial ? NULL : "a request line without an HTTP version";
	r->h.method_len = (uint16_t)m;
	r->h.target_off = (uint16_t)t;
	r->h.target_len = (uint16_t)(i - t);

	/* one SP, then exactly the version */
	v = ++i;
	if (n - v > 8 || memcmp(l + v, "HTTP/1.", MIN(n - v, 7)) != 0 ||
	    (n - v == 8 && l[v + 7] != '0' && l[v + 7] != '1'))
		return "a malformed request line: the target is not followed by one space and an "
		       "HTTP version of 1.0 or 1.1";
	if (n - v < 8)
		return partial ? NULL
		               : "a malformed request line: the target is not followed by one "
		                 "space and an HTTP version of 1.0 or 1.1";
	r->h.minor = (uint8_t)(l[v + 7] - '0');
	return NULL;
}

/* Content-Length: digits only, one value, within 64 bits (a list, even "5, 5", is refused:
 * another parser might take either). A partial value is checked as far as it goes. */
static const char *
content_length(const uint8_t *v, size_t n, bool partial, uint64_t *ret)
{
	uint64_t len = 0;
	size_t i = 0;

	for (; i < n && v[i] >= '0' && v[i] <= '9'; i++) {
		unsigned d = (unsigned)(v[i] - '0');

		if (len > (UINT64_MAX - d) / 10)
			return "a malformed Content-Length: too large";
		len = len * 10 + d;
	}
	if (i < n || (i == 0 && !partial))
		return "a malformed Content-Length: not one decimal number";
	*ret = len;
	return NULL;
}

static const char te_refused[] = "a Transfer-Encoding other than one 'chunked': only "
                                 "'Transfer-Encoding: chunked' is accepted";

/* Connection: a comma list of tokens; close, keep-alive and upgrade matter, the rest are
 * passed on. */
static const char *
connection(struct http_head_reader *r, const uint8_t *v, size_t n)
{
	size_t i = 0;

	while (i < n) {
		size_t s, e;

		while (i < n && (ows(v[i]) || v[i] == ','))
			i++;
		s = i;
		while (i < n && tchar(v[i]))
			i++;
		e = i;
		while (i < n && ows(v[i]))
			i++;
		if (i < n && v[i] != ',')
			return "a Connection header that is not a list of tokens";
		if (name_is(v + s, e - s, "close"))
			r->conn_close = true;
		else if (name_is(v + s, e - s, "keep-alive"))
			r->conn_keep_alive = true;
		else if (name_is(v + s, e - s, "upgrade"))
			r->conn_upgrade = true;
	}
	return NULL;
}

/* The value of a field still arriving (trailing whitespace may yet be OWS): what the framing
 * fields may hold so far. */
static const char *
partial_value(const struct http_head_reader *r, bool is_length, bool is_te, const uint8_t *v,
              size_t n)
{
	uint64_t ignored;
	size_t k = n;

	while (k > 0 && ows(v[k - 1]))
		k--;
	if (is_length)
		return memchr(v, ' ', k) || memchr(v, '\t', k)
		               ? "a malformed Content-Length: not one decimal number"
		               : content_length(v, k, true, &ignored);
	if (is_te && (r->have_te || memchr(v, ' ', k) || memchr(v, '\t', k) || k > 7 ||
	              strncasecmp((const char *)v, "chunked", k) != 0))
		return te_refused;
	return NULL;
}

/* One header line (l, n bytes, at offset off of data), or as much of it as has arrived. */
static const char *
header_line(struct http_head_reader *r, const uint8_t *data, size_t off, size_t n, bool partial)
{
	const struct http_head_rules *rules = r->rules;
	const uint8_t *l = data + off, *v;
	size_t i = 0, name_len, vlen;
	bool is_host, is_length, is_te;
	struct http_head_field *f;
	const char *why = NULL;

	if (r->h.nfields == HTTP_HEAD_FIELDS_MAX)
		return too_many;
	if (n > 0 && ows(l[0]))
		return "a folded header line (obs-fold, obsolete line folding)";
	while (i < n && tchar(l[i]))
		i++;
	if (i == n)
		return partial ? NULL : "a header line without ':'";
	if (l[i] != ':') {
		if (ows(l[i]))
			return "an invalid character in a header name: whitespace in it or before "
			       "':'";
		return "an invalid character in a header name: it is not a token";
	}
	if (i == 0)
		return "an empty header name";
	name_len = i++;

	/* Refused as soon as the name is known: no value could make these right. */
	is_host = name_is(l, name_len, "Host");
	is_length = name_is(l, name_len, "Content-Length");
	is_te = name_is(l, name_len, "Transfer-Encoding");
	if (is_host && r->h.host >= 0)
		return "two Host headers (more than one Host)";
	if (is_length && r->h.has_length)
		return "malformed framing: several Content-Length headers";
	if ((is_length && r->have_te) || (is_te && r->h.has_length))
		return "malformed framing: both Content-Length and Transfer-Encoding";
	if (is_te && r->h.minor == 0)
		return "Transfer-Encoding in an HTTP/1.0 request";

	for (size_t j = i; j < n; j++) {
		if (l[j] == '\0')
			return "a control character (NUL) in a header";
		if (l[j] == '\r')
			return "a CR inside a header line (CR not followed by LF)";
		if ((l[j] < 0x20 && l[j] != '\t') || l[j] == 0x7f)
			return "a control character in a header";
	}
	while (i < n && ows(l[i]))
		i++;
	v = l + i;
	vlen = n - i;
	if (partial) {
		why = partial_value(r, is_length, is_te, v, vlen);
		if (!why && rules && rules->field)
			why = rules->field(rules->data, l, name_len, v, vlen, true);
		return why;
	}
	while (vlen > 0 && ows(v[vlen - 1]))
		vlen--;

	if (is_length) {
		why = content_length(v, vlen, false, &r->h.content_length);
		r->h.has_length = true;
	} else if (is_te) {
		why = r->have_te || !name_is(v, vlen, "chunked") ? te_refused : NULL;
		r->have_te = r->h.chunked = true;
	} else if (name_is(l, name_len, "Connection"))
		why = connection(r, v, vlen);
	else if (name_is(l, name_len, "Upgrade"))
		r->have_upgrade = true;
	if (!why && rules && rules->field)
		why = rules->field(rules->data, l, name_len, v, vlen, false);
	if (why)
		return why;

	if (is_host)
		r->h.host = (int)r->h.nfields;
	f = &r->h.fields[r->h.nfields++];
	f->name_off = (uint16_t)off;
	f->name_len = (uint16_t)name_len;
	f->value_off = (uint16_t)(v - data);
	f->value_len = (uint16_t)vlen;
	return NULL;
}

/* After the blank line: what needs the whole head. */
static const char *
finish(struct http_head_reader *r, const uint8_t *data)
{
	const struct http_head_rules *rules = r->rules;
	const char *why;

	if (rules && rules->head && (why = rules->head(rules->data, data, &r->h)))
		return why;
	if (r->h.minor == 1 && r->h.host < 0)
		return "missing Host header (HTTP/1.1 requires one)";
	r->h.keep_alive = !r->conn_close && (r->h.minor == 1 || r->conn_keep_alive);
	r->h.upgrade = r->conn_upgrade && r->have_upgrade;
	return NULL;
}

/* One line's content at data + off, without its CRLF (or as much as has arrived). */
static const char *
line(struct http_head_reader *r, const uint8_t *data, size_t off, size_t n, bool partial)
{
	if (r->pos == 0)
		return request_line(r, data, n, partial);
	if (n == 0 && !partial)
		return finish(r, data);
	return header_line(r, data, off, n, partial);
}

static enum http_head_result
refuse(struct http_head_reader *r, const char *why)
{
	r->why = why;
	r->status = why == too_large || why == too_many ? 431 : 400;
	r->result = HTTP_HEAD_INVALID;
	return r->result;
}

enum http_head_result
http_head_read(struct http_head_reader *r, const uint8_t *data, size_t len)
{
	size_t limit = MIN(len, (size_t)HTTP_HEAD_MAX);
	const char *why;

	if (r->result != HTTP_HEAD_NEED_MORE)
		return r->result;
	while (r->pos < limit) {
		size_t from = MAX(r->pos, r->scan), end, n;
		const uint8_t *lf = from < limit ? memchr(data + from, '\n', limit - from) : NULL;

		if (!lf) {
			r->scan = limit;
			break;
		}
		end = (size_t)(lf - data);
		if (end == r->pos || data[end - 1] != '\r')
			return refuse(r, "a bare LF line ending");
		n = end - 1 - r->pos;
		why = line(r, data, r->pos, n, false);
		if (why)
			return refuse(r, why);
		if (r->pos > 0 && n == 0) {
			r->h.len = end + 1;
			r->result = HTTP_HEAD_DONE;
			return r->result;
		}
		r->pos = r->scan = end + 1;
	}
	if (r->rules && r->rules->partial && r->pos < limit) {
		/* The line still arriving, judged on a copy. A CR ending it can only be
		 * followed by LF, so what precedes that CR is judged as a whole line. */
		struct http_head_reader copy = *r;
		size_t n = limit - r->pos;

		if (data[limit - 1] == '\r')
			why = line(&copy, data, r->pos, n - 1, false);
		else
			why = line(&copy, data, r->pos, n, true);
		if (why)
			return refuse(r, why);
	}
	if (len >= HTTP_HEAD_MAX)
		return refuse(r, too_large);
	return HTTP_HEAD_NEED_MORE;
}
