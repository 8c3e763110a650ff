/* sse.h: an incremental parser for Server-Sent Events (text/event-stream). Bytes arrive in
 * chunks of any size from the HTTP client; each complete event is handed to a callback as soon
 * as its blank line arrives. Comments (": keep-alive") and unknown fields are ignored. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include "buf.h"

/* One complete event: type ("message" when the stream named none), id (the last id: field
 * seen, "" if none) and data (the data: lines joined with '\n', NUL-terminated, len bytes).
 * Return 0 to go on, anything else to stop: sse_feed() returns it. */
typedef int (*sse_event_fn)(void *userdata, const char *type, const char *id, const char *data,
                            size_t len);

struct sse {
	struct buf line; /* the line being read (a line longer than the cap is an error) */
	struct buf data; /* data: lines of the event being read */
	char type[64];
	char id[64];
	bool last_cr; /* the previous byte ended a line with '\r': a following '\n' is part of it */
	bool started; /* past the optional byte order mark */
	sse_event_fn fn;
	void *userdata;
};

/* max bounds one line and one event's data. */
void sse_init(struct sse *s, size_t max, sse_event_fn fn, void *userdata);
void sse_done(struct sse *s);

/* Parses n more bytes. 0; -ENOBUFS when a line or an event is larger than max; or what the
 * callback returned when it asked to stop (the rest of the chunk is then left unread). */
int sse_feed(struct sse *s, const char *p, size_t n);
