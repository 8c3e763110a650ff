/* api-internal.h: what the API's handler files share: the call context and the handlers the
 * route table in api.c points at. */
#pragma once

#include <jansson.h>
#include "api.h"
#include "auth.h"
#include "http.h"
#include "sandbox.h"

struct sandboxd;
struct conn;

struct api_call {
	struct sandboxd *d;
	struct conn *c;
	struct http_request *req;
	struct principal who;
	char ref[256];       /* the first decoded {name} segment, if the route has one */
	char sub[256];       /* the second one (a process id, say) */
	const char *feature; /* for routes this server does not offer yet */
	json_t *body;        /* the parsed JSON object, or NULL when no body was sent */
};

typedef void (*api_handler_fn)(struct api_call *call);

void api_sandbox_list(struct api_call *call);
void api_sandbox_create(struct api_call *call);
void api_sandbox_get(struct api_call *call);
void api_sandbox_patch(struct api_call *call);
void api_sandbox_delete(struct api_call *call);
void api_sandbox_stop(struct api_call *call);
void api_sandbox_start(struct api_call *call);
void api_sandbox_events(struct api_call *call);
void api_events_stream(struct api_call *call);

/* The owner filter for the caller: NULL (every owner) for an admin. */
const char *api_owner_filter(const struct api_call *call);

/* Heartbeats open event streams (called by housekeeping). */
void api_events_heartbeat(struct sandboxd *d);
