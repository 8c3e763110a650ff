/* httphead.c: a guest's HTTP/1.x request head as the egress proxy reads it. lib/http-head.c
 * reads the head by the rules sandboxd's API reads its own by (request smuggling shapes,
 * folded or odd lines refused); this adds what only the proxy asks, as that reader's hooks:
 * the proxy decides by the Host it returns and forwards the bytes unchanged, so the target
 * must be a path or an http:// URL naming that same host, Host must be a DNS name, and
 * CONNECT and HTTP/2 are refused. Every line is judged as far as its bytes go, so NEED_MORE
 * means the bytes so far can still become a head this reader accepts. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include "httphead.h"
#include "util.h"

static const char http_scheme[] = "http://";

static bool
name_is(const uint8_t *name, size_t n, const char *want)
{
	return n == strlen(want) && strncasecmp((const char *)name, want, n) == 0;
}

static bool
host_char(uint8_t c)
{
	/* what a DNS name may hold (as netname accepts names), either case */
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

/* What may begin a host still arriving: no user part, no IP literal, DNS name characters. */
static const char *
host_so_far(const uint8_t *s, size_t n)
{
	for (size_t j = 0; j < n; j++) {
		if (s[j] == '@')
			return "a user part in the host is not allowed";
		if (s[j] == '[' || s[j] == ']')
			return "an IP address is not a name: the proxy decides by name";
		if (!host_char(s[j]) && s[j] != ':')
			return "a host that is not a DNS name";
	}
	return NULL;
}

/* The authority of an absolute-form target (t, n bytes, starting with "http://" in any
 * case): where it ends. */
static size_t
authority_len(const uint8_t *t, size_t n)
{
	size_t k = sizeof(http_scheme) - 1, alen = 0;

	while (k + alen < n && t[k + alen] != '/' && t[k + alen] != '?')
		alen++;
	return alen;
}

/* The target: a path, an http:// URL (absolute-form, as a client configured with a proxy
 * sends it), or '*' for OPTIONS. A tunnel's bytes after the head are not HTTP and would not be
 * checked, so CONNECT (case-blind, as some servers read methods so) is refused. */
static const char *
check_target(void *data, const uint8_t *method, size_t method_len, const uint8_t *t, size_t n,
             bool partial)
{
	size_t k, alen;
	char host[HTTPHEAD_HOST_MAX + 1];
	unsigned port;

	if (name_is(method, method_len, "CONNECT"))
		return "CONNECT is refused: tunnels go to port 443 by name";
	if (t[0] == '*') {
		if (method_len == 3 && memcmp(method, "PRI", 3) == 0)
			return "an HTTP/2 connection preface: only HTTP/1.x is proxied on port 80";
		if (method_len != 7 || memcmp(method, "OPTIONS", 7) != 0)
			return "an asterisk-form target ('*') is only for OPTIONS";
		if (n > 1)
			return "a request target that is neither a path nor an http:// URL";
		return NULL;
	}
	if (t[0] == '/')
		return NULL;
	k = MIN(n, sizeof(http_scheme) - 1);
	if (strncasecmp((const char *)t, http_scheme, k) != 0 ||
	    (k < sizeof(http_scheme) - 1 && !partial))
		return "a request target that is neither a path nor an http:// URL";
	if (k < sizeof(http_scheme) - 1)
		return NULL;
	alen = authority_len(t, n);
	if (k + alen == n && partial) /* the authority is still arriving */
		return host_so_far(t + k, alen);
	return read_host(t + k, alen, host, &port);
}

/* Host: a DNS name and perhaps a port, nothing else. */
static const char *
check_field(void *data, const uint8_t *name, size_t name_len, const uint8_t *v, size_t n,
            bool partial)
{
	char host[HTTPHEAD_HOST_MAX + 1];
	unsigned port;
	size_t k = n;

	if (!name_is(name, name_len, "Host"))
		return NULL;
	if (!partial)
		return read_host(v, n, host, &port);
	/* trailing whitespace may be OWS; whitespace before it is inside the value */
	while (k > 0 && (v[k - 1] == ' ' || v[k - 1] == '\t'))
		k--;
	if (memchr(v, ' ', k) || memchr(v, '\t', k))
		return "a host that is not a DNS name";
	return host_so_far(v, k);
}

/* The whole head: a Host, and an absolute-form target naming what Host names. */
static const char *
check_head(void *data, const uint8_t *bytes, const struct http_head *h)
{
	const struct http_head_field *f;
	const uint8_t *t = bytes + h->target_off;
	char host[HTTPHEAD_HOST_MAX + 1], abs_host[HTTPHEAD_HOST_MAX + 1];
	unsigned port = 0, abs_port = 0;

	if (h->host < 0)
		return "no Host header: the proxy decides by name";
	if (t[0] == '/' || t[0] == '*')
		return NULL;
	/* the target's authority is what a server obeys (RFC 9112 3.2.2), so it must name
	 * what was decided on; no port means 80 on either side (both were read once) */
	f = &h->fields[h->host];
	if (read_host(bytes + f->value_off, f->value_len, host, &port) ||
	    read_host(t + sizeof(http_scheme) - 1, authority_len(t, h->target_len), abs_host,
	              &abs_port))
		return "a request target naming another host than Host";
	if (!streq(abs_host, host) || (abs_port ? abs_port : 80) != (port ? port : 80))
		return "a request target naming another host than Host";
	return NULL;
}

static const struct http_head_rules proxy_rules = {
	.target = check_target,
	.field = check_field,
	.head = check_head,
	.partial = true,
};

enum httphead_result
httphead_parse(const uint8_t *data, size_t len, struct httphead *ret, const char **why)
{
	struct http_head_reader r;
	const struct http_head_field *f;
	struct httphead h = { 0 };

	http_head_reader_init(&r, &proxy_rules);
	switch (http_head_read(&r, data, len)) {
	case HTTP_HEAD_NEED_MORE:
		if (why)
			*why = NULL;
		return HTTPHEAD_NEED_MORE;
	case HTTP_HEAD_INVALID:
		if (why)
			*why = r.why;
		return HTTPHEAD_INVALID;
	case HTTP_HEAD_DONE:
		break;
	}
	h.head_len = r.h.len;
	memcpy(h.method, data, r.h.method_len);
	h.method[r.h.method_len] = '\0';
	f = &r.h.fields[r.h.host]; /* check_head made sure there is one, and read it */
	if (read_host(data + f->value_off, f->value_len, h.host, &h.port)) {
		if (why)
			*why = "no Host header: the proxy decides by name";
		return HTTPHEAD_INVALID;
	}
	h.chunked = r.h.chunked;
	h.has_length = r.h.has_length;
	h.body_len = r.h.content_length;
	h.keep_alive = r.h.keep_alive;
	if (ret)
		*ret = h;
	if (why)
		*why = NULL;
	return HTTPHEAD_DONE;
}
