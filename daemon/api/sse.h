/* sse.h: events on the wire: the API form of an event and the Server-Sent Events message that
 * carries it on GET /v1/events/stream. The core hands events over as structured data
 * (events.h); these are the only functions that turn them into text. */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "buf.h"

struct event;
struct store_event;

/* The API form of a stored event on the stream: {seq, time, sandbox_id, type, data}, and
 * "audit", its audit record (the object GET …/events lists), when it has one. NULL: out of
 * memory. */
json_t *sse_event_json(const struct store_event *e);

/* Appends one SSE message "id: SEQ\nevent: TYPE\ndata: JSON\n\n"; json is compact (it holds
 * no newline, so a single data: line carries it). */
int sse_format(struct buf *out, int64_t seq, const char *type, const char *json);

/* The SSE message of a broadcast event: for a sandbox's, the API form with the sandbox object
 * as it is now ("sandbox") under the event's seq (no id: line when the store could not keep
 * it); for the node's, {time, type, data} with no
 * id: line (so a reconnecting client's Last-Event-ID stays the last sandbox event). Built once
 * per broadcast, however many streams are handed it: *ret stays valid until the next event is
 * written. -ENOMEM. */
int sse_live(const struct event *e, const char **ret, size_t *ret_len);
