/* httphead.h: the head of one HTTP/1.x request a guest sends through the proxy, enough to
 * decide by its Host and to find where the next request on a kept-alive connection starts.
 * The head is read by lib/http-head.c, the rules sandboxd's own API reads heads by; this adds
 * what only the proxy asks of one. Pure and incremental; bounded. The proxy checks every
 * request of a connection: a second request naming another Host than the one the
 * connection was allowed for is refused. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "http-head.h"

#define HTTPHEAD_MAX HTTP_HEAD_MAX /* the most bytes a request head may take */
#define HTTPHEAD_HOST_MAX 253

enum httphead_result {
	HTTPHEAD_DONE,      /* a complete head: fields below filled */
	HTTPHEAD_NEED_MORE, /* a prefix shorter than HTTPHEAD_MAX that can still become a head */
	HTTPHEAD_INVALID,   /* what lib/http-head.h refuses (malformed, too long, two Hosts,
	                     * obs-fold, both Content-Length and Transfer-Encoding, several
	                     * Content-Lengths, ...), and for the proxy: no Host, a Host that
	                     * is not a DNS name (port allowed and returned apart), a target
	                     * neither a path nor an http:// URL (or '*' for OPTIONS), an
	                     * absolute-form target whose host differs from Host, CONNECT, the
	                     * HTTP/2 preface */
};

struct httphead {
	size_t head_len; /* bytes of the head, through the blank line */
	char method[16];
	char host[HTTPHEAD_HOST_MAX + 1]; /* lowercase, no trailing dot, no port */
	unsigned port;                    /* from Host, 0 when none was given */
	/* the body that follows: a Content-Length (body_len), chunked, or none (until close
	 * only for HTTP/1.0 without a length) */
	bool chunked;
	bool has_length;
	uint64_t body_len;
	bool keep_alive; /* HTTP/1.1 without "Connection: close", or 1.0 with keep-alive */
};

/* Parses the head at data[0..len). *why (static text) says what was wrong. */
enum httphead_result httphead_parse(const uint8_t *data, size_t len, struct httphead *ret,
                                    const char **why);
