/* httphead.c: a small strict reader of one HTTP/1.x request head, written for the egress proxy
 * (not lib/http.c, which serves sandboxd's own API and is lenient where a server may be). The
 * proxy decides by the Host it returns and forwards the bytes unchanged, so anything two
 * parsers could read two ways (request smuggling shapes, folded or odd lines, a target naming
 * another host) is refused rather than repaired. Lines are read in order: every complete line
 * is checked in full, the line still arriving as far as its bytes go, so NEED_MORE means the
 * bytes so far can still become a head this reader accepts. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include "httphead.h"
#include "util.h"

#define METHOD_MAX 15

/* What the lines read so far said; copied out only when the head is whole and accepted. */
struct reader {
	struct httphead h;
	bool http11;
	bool options;  /* asterisk-form is for OPTIONS alone */
	bool absolute; /* an absolute-form target, whose authority Host must equal */
	char abs_host[HTTPHEAD_HOST_MAX + 1];
	unsigned abs_port;
	bool have_host;
	bool have_length;
	bool have_te;
	bool conn_close;
	bool conn_keep_alive;
};

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

static bool
host_char(uint8_t c)
{
	/* what a DNS name may hold (as netpolicy accepts names), either case */
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.';
}

/* Reads "name[:port]" (a Host value or an absolute-form authority) into out, lowercased and
 * without one trailing dot; *ret_port is 0 when no port was given. Returns NULL or why not. */
static const char *
read_host(const uint8_t *s, size_t n, char out[static HTTPHEAD_HOST_MAX + 1], unsigned *ret_port)
{
	size_t name_len = n;
	unsigned port = 0;
	const char *why;

	if (n == 0)
		return "an empty host: the proxy decides by name";
	if (s[0] == '[' || memchr(s, ']', n))
		return "an IP address is not a name: the proxy decides by name";
	if (memchr(s, '@', n))
		return "a user part in the host is not allowed";
	for (size_t i = 0; i < n; i++)
		if (s[i] == ':') {
			const uint8_t *p = s + i + 1;
			size_t plen = n - i - 1;

			name_len = i;
			if (memchr(p, ':', plen))
				return "an IP address is not a name: the proxy decides by name";
			if (plen == 0 || plen > 5)
				return "a port must be a number from 1 to 65535";
			for (size_t j = 0; j < plen; j++) {
				if (p[j] < '0' || p[j] > '9')
					return "a port must be a number from 1 to 65535";
				port = port * 10 + (unsigned)(p[j] - '0');
			}
			if (port == 0 || port > 65535)
				return "a port must be a number from 1 to 65535";
			break;
		}
	if (name_len == 0 || (name_len == 1 && s[0] == '.'))
		return "an empty host: the proxy decides by name";
	why = host_name_normalise((const char *)s, name_len, out);
	if (why)
		return why;
	*ret_port = port;
	return NULL;
}

/* The request line, or as much of it as has arrived (partial). */
static const char *
request_line(struct reader *r, const uint8_t *l, size_t n, bool partial)
{
	static const char http_scheme[] = "http://";
	size_t i = 0, m, t, v;

	while (i < n && tchar(l[i]))
		i++;
	if (i > METHOD_MAX)
		return "a method longer than 15 bytes";
	if (i == n)
		return partial ? NULL : "a request line without a target";
	if (i == 0)
		return "a request line that does not start with a method";
	if (l[i] != ' ')
		return "a method that is not a token";
	m = i++;
	memcpy(r->h.method, l, m);
	r->h.method[m] = '\0';
	/* A tunnel's bytes after the head are not HTTP and would not be checked; case-blind,
	 * since some servers read methods so. */
	if (strcasecmp(r->h.method, "CONNECT") == 0)
		return "CONNECT is refused: tunnels go to port 443 by name";
	r->options = streq(r->h.method, "OPTIONS");

	t = i;
	while (i < n && l[i] != ' ') {
		if (l[i] < 0x21 || l[i] > 0x7e)
			return "a request target with a byte that is not printable ASCII";
		if (l[i] == '#')
			return "a request target with a fragment";
		i++;
	}
	if (i == t)
		return i == n && partial ? NULL : "an empty request target";
	if (l[t] == '*') {
		if (streq(r->h.method, "PRI"))
			return "an HTTP/2 connection preface: only HTTP/1.x is proxied on port 80";
		if (!r->options)
			return "an asterisk-form target ('*') is only for OPTIONS";
		if (i - t > 1)
			return "a request target that is neither a path nor an http:// URL";
	} else if (l[t] != '/') {
		size_t k = MIN(i - t, sizeof(http_scheme) - 1);
		const uint8_t *a;
		const char *why;
		size_t alen;

		if (strncasecmp((const char *)l + t, http_scheme, k) != 0)
			return "a request target that is neither a path nor an http:// URL";
		if (k < sizeof(http_scheme) - 1) {
			if (i == n && partial)
				return NULL;
			return "a request target that is neither a path nor an http:// URL";
		}
		a = l + t + k;
		alen = 0;
		while (t + k + alen < i && a[alen] != '/' && a[alen] != '?')
			alen++;
		if (t + k + alen == i && i == n && partial) {
			/* the authority is still arriving: its characters so far */
			for (size_t j = 0; j < alen; j++) {
				if (a[j] == '@')
					return "a user part in the host is not allowed";
				if (a[j] == '[')
					return "an IP address is not a name: the proxy decides by "
					       "name";
				if (!host_char(a[j]) && a[j] != ':')
					return "a host that is not a DNS name";
			}
			return NULL;
		}
		why = read_host(a, alen, r->abs_host, &r->abs_port);
		if (why)
			return why;
		r->absolute = true;
	}
	if (i == n)
		return partial ? NULL : "a request line without an HTTP version";

	/* one SP, then exactly the version */
	v = ++i;
	if (n - v > 8)
		return "an HTTP version other than HTTP/1.0 or HTTP/1.1";
	if (memcmp(l + v, "HTTP/1.", MIN(n - v, 7)) != 0)
		return "an HTTP version other than HTTP/1.0 or HTTP/1.1";
	if (n - v < 8)
		return partial ? NULL : "an HTTP version other than HTTP/1.0 or HTTP/1.1";
	if (l[v + 7] != '0' && l[v + 7] != '1')
		return "an HTTP version other than HTTP/1.0 or HTTP/1.1";
	r->http11 = l[v + 7] == '1';
	return NULL;
}

/* Content-Length: digits only, one value, within 64 bits (a list, even "5, 5", is refused:
 * another parser might take either). A partial value is checked as far as it goes. */
static const char *
content_length(struct reader *r, const uint8_t *v, size_t n, bool partial)
{
	uint64_t len = 0;
	size_t i = 0;

	for (; i < n && v[i] >= '0' && v[i] <= '9'; i++) {
		unsigned d = (unsigned)(v[i] - '0');

		if (len > (UINT64_MAX - d) / 10)
			return "a Content-Length too large";
		len = len * 10 + d;
	}
	if (i < n || (i == 0 && !partial))
		return "a Content-Length that is not one decimal number";
	r->h.body_len = len;
	return NULL;
}

/* Transfer-Encoding: "chunked" and nothing else, once. A coding list ("gzip, chunked",
 * "chunked, identity"), parameters or a repeated chunked are all smuggling material. */
static const char *
transfer_encoding(struct reader *r, const uint8_t *v, size_t n)
{
	if (!r->http11)
		return "Transfer-Encoding in an HTTP/1.0 request";
	if (r->have_te || !name_is(v, n, "chunked"))
		return "a Transfer-Encoding other than one 'chunked'";
	r->h.chunked = true;
	return NULL;
}

/* Connection: a comma list of tokens; close and keep-alive matter, the rest are passed on. */
static const char *
connection(struct reader *r, const uint8_t *v, size_t n)
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
	}
	return NULL;
}

/* One header line, or as much of it as has arrived (partial). */
static const char *
header_line(struct reader *r, const uint8_t *l, size_t n, bool partial)
{
	const uint8_t *v;
	size_t i = 0, name_len, vlen;
	const char *why = NULL;
	bool is_host, is_length, is_te;

	if (n > 0 && ows(l[0]))
		return "a folded header line (obs-fold)";
	while (i < n && tchar(l[i]))
		i++;
	if (i == n)
		return partial ? NULL : "a header line without ':'";
	if (l[i] != ':') {
		if (ows(l[i]))
			return "whitespace in a header name or before ':'";
		return "a header name that is not a token";
	}
	if (i == 0)
		return "an empty header name";
	name_len = i++;

	/* Refused as soon as the name is known: no value could make these right. */
	is_host = name_is(l, name_len, "Host");
	is_length = name_is(l, name_len, "Content-Length");
	is_te = name_is(l, name_len, "Transfer-Encoding");
	if (is_host && r->have_host)
		return "two Host headers";
	if (is_length && r->have_length)
		return "several Content-Length headers";
	if ((is_length && r->have_te) || (is_te && r->have_length))
		return "both Content-Length and Transfer-Encoding";
	if (is_te && !r->http11)
		return "Transfer-Encoding in an HTTP/1.0 request";

	for (size_t j = i; j < n; j++) {
		if (l[j] == '\0')
			return "a NUL byte in a header";
		if (l[j] == '\r')
			return "a CR inside a header line";
		if ((l[j] < 0x20 && l[j] != '\t') || l[j] == 0x7f)
			return "a control character in a header";
	}
	while (i < n && ows(l[i]))
		i++;
	v = l + i;
	vlen = n - i;
	if (!partial)
		while (vlen > 0 && ows(v[vlen - 1]))
			vlen--;

	if (partial) {
		/* the value so far: trailing whitespace may be OWS, nothing may follow it */
		size_t k = vlen;

		while (k > 0 && ows(v[k - 1]))
			k--;
		/* whitespace inside the value: none of these three may hold any */
		if ((is_host || is_length || is_te) && (memchr(v, ' ', k) || memchr(v, '\t', k)))
			return is_host     ? "a host that is not a DNS name"
			       : is_length ? "a Content-Length that is not one decimal number"
			                   : "a Transfer-Encoding other than one 'chunked'";
		if (is_length)
			return content_length(r, v, k, true);
		if (is_te && (r->have_te ||
		              strncasecmp((const char *)v, "chunked", MIN(k, 7)) != 0 || k > 7))
			return "a Transfer-Encoding other than one 'chunked'";
		if (is_host)
			for (size_t j = 0; j < k; j++) {
				if (v[j] == '@')
					return "a user part in the host is not allowed";
				if (v[j] == '[' || v[j] == ']')
					return "an IP address is not a name: the proxy decides by "
					       "name";
				if (!host_char(v[j]) && v[j] != ':')
					return "a host that is not a DNS name";
			}
		return NULL;
	}

	if (is_host) {
		why = read_host(v, vlen, r->h.host, &r->h.port);
		r->have_host = true;
	} else if (is_length) {
		why = content_length(r, v, vlen, false);
		r->have_length = r->h.has_length = true;
	} else if (is_te) {
		why = transfer_encoding(r, v, vlen);
		r->have_te = true;
	} else if (name_is(l, name_len, "Connection"))
		why = connection(r, v, vlen);
	return why;
}

/* After the blank line: what needs the whole head. */
static const char *
finish(struct reader *r)
{
	if (!r->have_host)
		return "no Host header: the proxy decides by name";
	if (r->absolute) {
		/* the target's authority is what a server obeys (RFC 9112 3.2.2), so it must
		 * name what was decided on; no port means 80 on either side */
		unsigned a = r->abs_port ? r->abs_port : 80, h = r->h.port ? r->h.port : 80;

		if (!streq(r->abs_host, r->h.host) || a != h)
			return "a request target naming another host than Host";
	}
	r->h.keep_alive = !r->conn_close && (r->http11 || r->conn_keep_alive);
	return NULL;
}

/* A line's content, without its CRLF: a CR left inside is refused by the line readers' byte
 * checks (header values) or their grammar (the request line has no place for one). */
static const char *
line(struct reader *r, bool first, const uint8_t *l, size_t n, bool partial)
{
	if (first) {
		if (n == 0 && !partial)
			return "an empty line before the request line";
		if (memchr(l, '\r', n))
			return "a CR inside the request line";
		return request_line(r, l, n, partial);
	}
	if (n == 0 && !partial)
		return finish(r);
	return header_line(r, l, n, partial);
}

enum httphead_result
httphead_parse(const uint8_t *data, size_t len, struct httphead *ret, const char **why)
{
	struct reader r = {};
	size_t limit = MIN(len, (size_t)HTTPHEAD_MAX), pos = 0;
	const char *err = NULL;
	bool first = true;

	while (pos < limit) {
		const uint8_t *lf = memchr(data + pos, '\n', limit - pos);
		size_t end, n;

		if (!lf) {
			/* The line still arriving. A CR ending it can only be followed by LF,
			 * so what precedes that CR is read as a whole line already. */
			n = limit - pos;
			if (data[limit - 1] == '\r')
				err = line(&r, first, data + pos, n - 1, false);
			else
				err = line(&r, first, data + pos, n, true);
			if (err)
				goto invalid;
			break;
		}
		end = (size_t)(lf - data);
		if (end == pos || data[end - 1] != '\r') {
			err = "a bare LF line ending";
			goto invalid;
		}
		n = end - 1 - pos;
		err = line(&r, first, data + pos, n, false);
		if (err)
			goto invalid;
		if (!first && n == 0) {
			r.h.head_len = end + 1;
			if (ret)
				*ret = r.h;
			if (why)
				*why = NULL;
			return HTTPHEAD_DONE;
		}
		first = false;
		pos = end + 1;
	}
	if (len >= HTTPHEAD_MAX) {
		err = "a request head longer than 16384 bytes";
		goto invalid;
	}
	if (why)
		*why = NULL;
	return HTTPHEAD_NEED_MORE;

invalid:
	if (why)
		*why = err;
	return HTTPHEAD_INVALID;
}
