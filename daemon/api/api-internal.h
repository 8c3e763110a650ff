/* api-internal.h: what the API's handler files share: the call context and the handlers the
 * route table in api.c points at. */
#pragma once

#include <jansson.h>
#include "api-error.h"
#include "api.h"
#include "auth.h"
#include "http.h"
#include "policy.h"
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
	/* at a raw body's head (api_head): the body is still to come, and the handler takes it
	 * as it arrives (conn_body_take); otherwise req->body holds it whole */
	bool body_follows;
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
void api_sandbox_metrics(struct api_call *call);
void api_events_stream(struct api_call *call);
void api_image_list(struct api_call *call);
void api_image_install(struct api_call *call);
void api_image_remove(struct api_call *call);

/* A live sandbox the caller may see, by id or name; NULL if none. */
struct sandbox *api_lookup_live(struct api_call *call);
/* A terminated sandbox the caller may see, by id (the caller frees it); NULL if none. */
struct sandbox *api_lookup_ended(struct api_call *call);
/* 404 for call->ref, the same bytes whether it never existed or is someone else's. */
void api_reply_not_found(struct api_call *call);
/* For a ref that names no live sandbox: 409 when it is a terminated one, else 404. */
void api_reply_absent(struct api_call *call);
/* The connected agent of a running sandbox the caller may see; otherwise answers (404, 409,
 * 501 or 503) and returns NULL. */
struct agent *api_sandbox_agent(struct api_call *call, struct sandbox **ret_sb);
/* What a request about a sandbox's state waits for before it answers. */
enum wait_kind {
	WAIT_CREATE,
	WAIT_START,
	WAIT_STOP,
	WAIT_DELETE,
	WAIT_SUSPEND,
	WAIT_RESUME, /* answers 503 when the restore failed and it is suspended again */
};
/* Answers now if sb's state already fits kind, else once it does (api-sandboxes.c). */
void api_sandbox_wait(struct api_call *call, struct sandbox *sb, enum wait_kind kind);
/* POST …/suspend and …/resume (api-suspend.c). */
void api_sandbox_suspend(struct api_call *call);
void api_sandbox_resume(struct api_call *call);
/* Whether this server can act on idle_action a ("suspend" needs the backend's suspend). 0, or
 * -EINVAL with err. */
int api_check_idle_action(struct sandboxd *d, enum sandbox_idle_action a, struct err *err);
/* Wake on use: a request that needs the guest (fn, a route's handler) of a sandbox suspended,
 * suspending or resuming is held, the sandbox resumed, and fn called with the request once it
 * runs (or once it is in another state: fn answers as for that state). true: the call was
 * taken (answered now or later); false: fn is to be called now. */
bool api_resume_first(struct api_call *call, api_handler_fn fn);
/* Whether api_resume_first would hold this call (api_head: its raw body is read whole first). */
bool api_needs_resume(struct api_call *call);
/* Starts a stopped or failed sandbox to read its files, with the checks and the answers of
 * POST …/start (lifecycle_wake); nothing for one up or starting. 0, or answered and -errno. */
int api_sandbox_wake(struct api_call *call, struct sandbox *sb);

void api_process_run(struct api_call *call);
void api_process_create(struct api_call *call);
void api_process_list(struct api_call *call);
void api_process_get(struct api_call *call);
void api_process_output(struct api_call *call);
void api_process_stdin(struct api_call *call);
void api_process_signal(struct api_call *call);
void api_process_attach(struct api_call *call);
/* GET …/tunnel (api-tunnel.c). */
void api_tunnel(struct api_call *call);
/* 501 unsupported naming call->feature, the capability this server does not offer. */
void api_unsupported(struct api_call *call);
void api_file_read(struct api_call *call);
void api_file_write(struct api_call *call);
void api_file_remove(struct api_call *call);
void api_dir_list(struct api_call *call);

/* What owner's sandboxes hold: those pending, starting, running, stopping or suspended,
 * and creates waiting for their image (NULL owner: everyone's). What a user's caps count,
 * and, for every owner, what the node's capacity counts (disk_mb: of every sandbox not
 * terminated, since a stopped or failed one keeps its disk). */
struct sandbox_usage {
	unsigned sandboxes;
	unsigned cpus;
	unsigned memory_mb;
	unsigned running; /* of those, how many are running */
	uint64_t disk_mb;
	/* pooled sandboxes (pools.h), counted only without an owner: in cpus, memory_mb and
	 * disk_mb, not in sandboxes and running */
	unsigned pooled, pooled_cpus, pooled_memory_mb;
	uint64_t pooled_disk_mb;
};
void api_usage(struct sandboxd *d, const char *owner, struct sandbox_usage *u);

/* A create with "agent" (api-agents.c): the backend must run processes, and the agent's
 * credential comes from the create's env or else from the owner's saved secret, which is
 * added to sb's env. 0, or answered (400 naming the variable, 501) and -errno. */
int api_agent_prepare(struct api_call *call, struct sandbox *sb);
/* (ext) /v1/secrets: the caller's own, names only; values are never answered. */
void api_secret_list(struct api_call *call);
void api_secret_put(struct api_call *call);
void api_secret_delete(struct api_call *call);

/* GET /v1/node: the node's capacity and what is free; POST /v1/node/cordon (api-node.c). */
void api_node_get(struct api_call *call);
void api_node_cordon(struct api_call *call);

/* Accounts (api-accounts.c). */
void api_auth_login(struct api_call *call);
void api_auth_logout(struct api_call *call);
void api_auth_register(struct api_call *call);
void api_key_list(struct api_call *call);
void api_key_create(struct api_call *call);
void api_key_delete(struct api_call *call);
void api_user_list(struct api_call *call);
void api_user_create(struct api_call *call);
void api_user_patch(struct api_call *call);
void api_user_delete(struct api_call *call);
/* {"max_sandboxes","max_cpus","max_memory_mb"} and {"sandboxes","cpus","memory_mb"}. */
json_t *api_caps_json(const struct user_caps *caps);
json_t *api_usage_json(const struct sandbox_usage *u);

/* The owner filter for the caller: NULL (every owner) for an admin. */
const char *api_owner_filter(const struct api_call *call);

/* Heartbeats open event streams (called by housekeeping). */
void api_events_heartbeat(struct sandboxd *d);
