/* chunked.h: where an HTTP/1.1 chunked request body a guest sends through the egress proxy
 * ends, so that the proxy reads the Host of the request after it (egress/proxy.c). Pure and
 * incremental; fuzzed (fuzz/fuzz-chunked.c). */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Where an HTTP/1.1 chunked request body ends, read as it arrives. Strict where two readers
 * could disagree (bare CR or LF, whitespace or a sign in a size, data longer than its size),
 * since the next request head starts where this says the body ends and is decided by its
 * Host: a body the server reads differently would smuggle a request past the proxy. */
enum chunked_state {
	CHUNKED_SIZE_FIRST,
	CHUNKED_SIZE,
	CHUNKED_EXT,
	CHUNKED_SIZE_LF,
	CHUNKED_DATA,
	CHUNKED_DATA_CR,
	CHUNKED_DATA_LF,
	CHUNKED_TRAILER_START,
	CHUNKED_TRAILER,
	CHUNKED_TRAILER_LF,
	CHUNKED_END_LF,
};

struct chunked {
	enum chunked_state st;
	uint64_t left; /* of the current chunk's size, then its data */
	unsigned digits;
	size_t line;    /* bytes of the current extension or trailer line */
	size_t trailer; /* bytes of trailer fields so far */
};

enum chunked_result {
	CHUNKED_MORE,    /* all n bytes are body; the body goes on */
	CHUNKED_DONE,    /* the body ended after *ret_used bytes */
	CHUNKED_INVALID, /* *why says what */
};

#define CHUNKED_INIT                                                                               \
	{                                                                                          \
		.st = CHUNKED_SIZE_FIRST                                                           \
	}

enum chunked_result chunked_scan(struct chunked *s, const uint8_t *p, size_t n, size_t *ret_used,
                                 const char **why);
