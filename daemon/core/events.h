/* events.h: every persisted change of a sandbox is an event: written to the store in the same
 * transaction as the row, then broadcast to the live streams whose principal may see it. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include "buf.h"
#include "list.h"

struct sandboxd;
struct sandbox;
struct store_event;

struct event_sub {
	struct list_node link;
	const char *owner; /* NULL: every sandbox (admins) */
	/* text is one complete SSE message ("id: ..\nevent: ..\ndata: ..\n\n") */
	void (*fn)(struct event_sub *s, const char *text, size_t len);
	void *data;
};

void events_subscribe(struct sandboxd *d, struct event_sub *s);
void events_unsubscribe(struct event_sub *s);

/* Writes the sandbox row (inserting it when insert is true) and one event of the given type
 * with data (stolen; NULL means {}) in one transaction, then broadcasts it. On failure
 * nothing was written and nothing was broadcast. */
int sandbox_commit(struct sandboxd *d, struct sandbox *sb, bool insert, const char *type,
                   json_t *data);

/* Records an event that changes nothing in the row (a process started, a file written) and
 * broadcasts it. data is stolen (NULL: -ENOMEM). Best effort for callers: a failure to record
 * is logged by the store and never fails the request. */
int sandbox_event(struct sandboxd *d, struct sandbox *sb, const char *type, json_t *data);

/* The API form of a stored event: {seq, time, sandbox_id, type, data}. */
json_t *event_to_json(const struct store_event *e);
/* Appends one SSE message carrying event_json (compact JSON, so a single data: line). */
int event_format_sse(struct buf *out, int64_t seq, const char *type, const char *event_json);

/* Broadcasts an event about the node rather than a sandbox (an image being installed) to the
 * streams that see every sandbox (the operator's, admins'). Not stored: a stream that
 * reconnects asks GET /v1/images for where things are. data is stolen. */
void events_broadcast_node(struct sandboxd *d, const char *type, json_t *data);
