/* http-head.h: the one reader of an HTTP/1.x request head. sandboxd's API server (lib/http.c)
 * and the egress proxy (egress/httphead.c) both read heads with it, so one set of rules says
 * what a head is: CRLF line endings only; a request line of a token method, one space, a
 * printable target without a fragment, one space and HTTP/1.0 or HTTP/1.1; token field names
 * with nothing between them and ':'; no folded lines, no control bytes; one Host (required
 * by HTTP/1.1); one Content-Length of digits or one "Transfer-Encoding: chunked" (never both,
 * never chunked in HTTP/1.0); a Connection list of tokens; at most 64 fields in 16 KiB. What
 * two parsers could read two ways (request smuggling shapes) is refused, never repaired.
 * Each caller adds its own rules through hooks (the proxy: the target's form and Host as a
 * DNS name). Pure and bounded; fuzzed through both callers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_HEAD_MAX 16384u /* request line, fields and the blank line */
#define HTTP_HEAD_FIELDS_MAX 64
#define HTTP_HEAD_METHOD_MAX 15

enum http_head_result {
	HTTP_HEAD_DONE,      /* a whole head, accepted */
	HTTP_HEAD_NEED_MORE, /* no fault in the bytes read so far, shorter than HTTP_HEAD_MAX */
	HTTP_HEAD_INVALID,   /* refused: the reader's why and status say why */
};

/* One field: offsets into the bytes read (from the head's first byte). */
struct http_head_field {
	uint16_t name_off, name_len;
	uint16_t value_off, value_len; /* without the whitespace around it */
};

struct http_head {
	size_t len;          /* the head's bytes, through the blank line */
	uint16_t method_len; /* the method is the first method_len bytes */
	uint16_t target_off, target_len;
	uint8_t minor; /* HTTP/1.minor: 0 or 1 */
	int host;      /* the Host field's index in fields, -1 when none */
	/* the body that follows: a Content-Length, chunked, or none */
	bool chunked;
	bool has_length;
	uint64_t content_length;
	bool keep_alive; /* HTTP/1.1 without "Connection: close", or 1.0 with keep-alive */
	bool upgrade;    /* an Upgrade field and "Connection: upgrade" */
	unsigned nfields;
	struct http_head_field fields[HTTP_HEAD_FIELDS_MAX];
};

/* A caller's own rules on top of the shared ones. Each hook returns NULL, or why the head is
 * refused (static text); a NULL hook adds nothing. Hooks only judge: they are called again
 * for a line still arriving each time more of it has (with partial), so they keep no state. */
struct http_head_rules {
	/* The request target (target[0..n), at least one byte, its bytes already checked), all
	 * of it or as much as has arrived (partial); method is the request's. */
	const char *(*target)(void *data, const uint8_t *method, size_t method_len,
	                      const uint8_t *target, size_t n, bool partial);
	/* A field's value, without the whitespace around it, or as much as has arrived
	 * (partial: leading whitespace removed, trailing kept), once the shared rules took it. */
	const char *(*field)(void *data, const uint8_t *name, size_t name_len, const uint8_t *value,
	                     size_t n, bool partial);
	/* The whole head (bytes: from its first byte), before the shared rules that need it
	 * whole (HTTP/1.1 needs a Host). */
	const char *(*head)(void *data, const uint8_t *bytes, const struct http_head *h);
	void *data;
	/* Also judge the line still arriving, as far as its bytes go, so that NEED_MORE means
	 * the bytes so far can still become an accepted head. It costs reading that line again
	 * at each call; without it a fault is found once its line is whole. */
	bool partial;
};

/* The state of one head being read; the caller's, zeroed by http_head_reader_init(). */
struct http_head_reader {
	const struct http_head_rules *rules;
	struct http_head h; /* filled as lines are read; whole once DONE */
	size_t pos;         /* the first line not yet read whole starts here */
	size_t scan;        /* bytes from pos already searched for its LF */
	bool have_te;       /* a Transfer-Encoding field was read */
	bool conn_close, conn_keep_alive, conn_upgrade, have_upgrade;
	enum http_head_result result; /* DONE and INVALID stay */
	const char *why;              /* INVALID: why (static text) */
	int status;                   /* INVALID: 431 (too large, too many fields) or 400 */
};

/* rules may be NULL: the shared rules alone. */
void http_head_reader_init(struct http_head_reader *r, const struct http_head_rules *rules);

/* Reads data[0..len): the head's bytes from its first, the bytes of the last call and
 * perhaps more (a read picks up where the last one stopped; bytes after the head are not
 * read). DONE: r->h is the head (r->h.len its bytes); INVALID: r->why and r->status. */
enum http_head_result http_head_read(struct http_head_reader *r, const uint8_t *data, size_t len);
