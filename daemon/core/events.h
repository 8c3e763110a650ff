/* events.h: every persisted change of a sandbox is an event: written to the store in the same
 * transaction as the row, then broadcast to the live streams whose principal may see it.
 * Events carry structured data; the API layer puts them on the wire. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "list.h"

struct sandboxd;
struct sandbox;

/* One event as it is broadcast. Everything it points to is borrowed for the call. */
struct event {
	uint64_t serial;          /* counts broadcasts: the same for every subscriber of one */
	int64_t seq;              /* its sequence number in the store; 0: a node event */
	int64_t time_ms;          /* unix ms */
	const char *type;         /* "state", "created", "process.started", "image.progress"... */
	const struct sandbox *sb; /* the sandbox as it is now; NULL: a node event */
	const json_t *data;       /* the event's own data, an object */
	const char *audit;        /* its audit record (audit.h), JSON text; NULL: none */
};

struct event_sub {
	struct list_node link;
	const char *owner;      /* NULL: every sandbox and the node's events (admins) */
	const char *sandbox_id; /* NULL: every sandbox owner sees; else only this one's events
	                         * (and the stream keeps it from idling, activity.h) */
	void (*fn)(struct event_sub *s, const struct event *e);
	void *data;
};

void events_subscribe(struct sandboxd *d, struct event_sub *s);
void events_unsubscribe(struct event_sub *s);

/* Writes the sandbox row (inserting it when insert is true) and one event of the given type
 * with data (stolen; NULL means {}) in one transaction, then broadcasts it and appends its
 * audit record, if it has one, to the audit log. An event the store cannot write is logged
 * and left out, the row written all the same: the audit trail never fails a change. On
 * failure (the row) nothing was written and nothing was broadcast. For a pooled sandbox
 * (pools.h) only its API object is rebuilt: nothing is written, broadcast or audited. */
int sandbox_commit(struct sandboxd *d, struct sandbox *sb, bool insert, const char *type,
                   json_t *data);

/* Records an event that changes nothing in the row (a process started, a file written),
 * broadcasts it and appends its audit record to the audit log. data is stolen (NULL:
 * -ENOMEM). Best effort for callers: a failure to record is logged by the store and never
 * fails the request (the event is still broadcast, without a seq). */
int sandbox_event(struct sandboxd *d, struct sandbox *sb, const char *type, json_t *data);

/* Broadcasts an event about the node rather than a sandbox (an image being installed) to the
 * streams that see every sandbox (the operator's, admins'). Not stored: a stream that
 * reconnects asks GET /v1/images for where things are. data is stolen. */
void events_broadcast_node(struct sandboxd *d, const char *type, json_t *data);
