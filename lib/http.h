/* http.h: sandboxd's HTTP/1.1 request parser (server side), strict and bounded, plus
 * response-head formatting and query/path helpers.
 *
 * A request's head is read by lib/http-head.c, the one set of rules against request smuggling
 * that the egress proxy reads guests' heads by too (bare LF or CR, obs-fold, control bytes,
 * spaces in names, two Hosts, Content-Length with Transfer-Encoding, any coding but
 * "chunked", ...); this adds what sandboxd serves: an origin-form target, a method
 * libhttp-parser names (enum http_method), the body by Content-Length or chunked with no
 * trailers, and a body limit per route. Nothing here does I/O: bytes go in, requests come
 * out, so it is fuzzed directly. */
#pragma once

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "buf.h"
#include "http-head.h"

#define HTTP_MAX_HEAD HTTP_HEAD_MAX /* request line + headers */
#define HTTP_MAX_HEADERS HTTP_HEAD_FIELDS_MAX

struct http_header {
	uint32_t name_off, value_off; /* into the arena; names are lowercased */
	uint32_t name_len, value_len;
};

struct http_request {
	enum http_method method;
	unsigned short http_major, http_minor;
	bool keep_alive;
	bool upgrade; /* Connection: upgrade + Upgrade: present (or CONNECT); body follows raw */
	bool chunked;
	bool has_length; /* Content-Length was given */
	uint64_t content_length;
	/* valid once the head is complete; point into the arena */
	const char *target; /* raw request target */
	const char *path;   /* target up to '?', not decoded */
	const char *query;  /* after '?', or "" */
	struct buf body;
	struct http_header headers[HTTP_MAX_HEADERS];
	unsigned nheaders;
	struct buf arena;
};

/* Decides how many body bytes a request may carry, once its head is known. Returns the
 * limit (0: none allowed). */
typedef uint64_t (*http_body_limit_fn)(const struct http_request *req, void *data);

enum http_parse_phase {
	HTTP_PHASE_HEAD,
	HTTP_PHASE_BODY,
	HTTP_PHASE_DONE,
	HTTP_PHASE_ERROR,
};

struct http_req_parser {
	enum http_parse_phase phase;
	struct http_request req;
	struct buf head;                /* the head's bytes as they arrive */
	struct http_head_reader reader; /* reading them */
	uint64_t body_left;             /* Content-Length bytes still to come */
	int chunk_state;                /* a chunked body's framing */
	uint64_t chunk_left;
	http_body_limit_fn body_limit;
	void *body_limit_data;
	uint64_t body_max;
	uint64_t body_seen; /* body bytes read so far, whether still in req.body or not */
	/* Set by the reader: http_req_feed returns HTTP_FEED_HEAD once a head is in and a body
	 * follows, before any of the body is read. Kept across http_req_parser_reset. */
	bool stop_at_body;
	/* on error: the status to answer and a message safe to show */
	int err_status;
	const char *err_message;
};

void http_req_parser_init(struct http_req_parser *hp, http_body_limit_fn fn, void *data);
/* Frees what the current request holds and readies the parser for the next one. */
void http_req_parser_reset(struct http_req_parser *hp);
void http_req_parser_done(struct http_req_parser *hp);

/* Feeds bytes. Returns 1 when a request is complete (*ret_used bytes were consumed; any rest
 * belongs to the next request), 0 when more bytes are needed (all were consumed), or -EBADMSG
 * with err_status/err_message set. For an upgrade request it returns 1 right after the head,
 * and the bytes after it are left unconsumed. With stop_at_body, HTTP_FEED_HEAD when the head
 * just came in and a body follows (*ret_used bytes were the head's; feed the rest again).
 *
 * The body collects in req.body. A reader that takes it in pieces (a request streamed on) may
 * empty req.body between calls (buf_reset): the body limit counts every byte all the same. */
#define HTTP_FEED_HEAD 2
int http_req_feed(struct http_req_parser *hp, const char *data, size_t len, size_t *ret_used);

/* True once at least one byte of the current request has arrived. */
static inline bool
http_req_started(const struct http_req_parser *hp)
{
	return hp->head.len > 0;
}

/* Header lookup by lowercase name; returns the first value or NULL. */
const char *http_req_header(const struct http_request *req, const char *name);
/* Number of headers with that name. */
unsigned http_req_header_count(const struct http_request *req, const char *name);

/* Iterates "k=v&k2=v2": fills key/value (percent-decoded, NUL-terminated, at most size-1
 * bytes each) and advances *pos. Returns 1 for a pair, 0 at the end, -EINVAL on a bad
 * escape, NUL, or an over-long key or value. */
int http_query_next(const char *query, size_t *pos, char *key, size_t key_size, char *value,
                    size_t value_size);
/* Percent-decodes one path segment of n bytes into out (size bytes); refuses NUL and '/'. */
int http_segment_decode(const char *seg, size_t n, char *out, size_t size);
/* The same for a segment that carries a name with slashes in it, encoded as %2F (an image
 * reference such as 127.0.0.1:5000/team/tool:1): refuses NUL only. */
int http_segment_decode_name(const char *seg, size_t n, char *out, size_t size);

const char *http_status_text(int status);
/* Appends "HTTP/1.1 <status> <text>\r\n". */
int http_put_status_line(struct buf *out, int status);
