/* api.c: API v1 routing, the request guard, authentication and the discovery handlers. */
#include <strings.h>
#include "api-internal.h"
#include "api-preview.h"
#include "log.h"
#include "metrics.h"
#include "samples.h"
#include "sandboxd.h"
#include "server.h"
#include "util.h"
#include "web.h"

enum route_flags {
	ROUTE_PUBLIC = 1 << 0,       /* no credential needed */
	ROUTE_JSON = 1 << 1,         /* takes a JSON object body */
	ROUTE_JSON_OPT = 1 << 2,     /* takes an optional JSON object body */
	ROUTE_RAW = 1 << 3,          /* takes a raw body (application/octet-stream, 64 MiB) */
	ROUTE_UPGRADE = 1 << 4,      /* may upgrade the connection */
	ROUTE_REGISTRATION = 1 << 5, /* 404 unless --registration on */
	ROUTE_CREATE = 1 << 6,       /* answers are counted by status and latency (/metrics) */
	ROUTE_GUEST = 1 << 7,        /* needs the guest: a suspended sandbox resumes first */
};

struct route {
	enum http_method method;
	const char *pattern; /* "{name}" matches one path segment */
	api_handler_fn fn;
	unsigned flags;
	const char *feature; /* for api_unsupported: what this server lacks */
};

static void api_health(struct api_call *call);
static void api_capabilities(struct api_call *call);
static void api_whoami(struct api_call *call);

#define ROUTE(m, p, f, fl)                                                                         \
	{                                                                                          \
		.method = HTTP_##m, .pattern = (p), .fn = (f), .flags = (fl)                       \
	}
/* A path of a capability this server does not offer: 501 naming the capability (as
 * GET /v1/capabilities names it), never 404, whatever the method's body or Upgrade. */
#define LATER(m, p, capability)                                                                    \
	{                                                                                          \
		.method = HTTP_##m, .pattern = (p), .fn = api_unsupported, .feature = (capability) \
	}

static const struct route routes[] = {
	ROUTE(GET, "/v1/health", api_health, ROUTE_PUBLIC),
	ROUTE(GET, "/v1/capabilities", api_capabilities, 0),
	ROUTE(GET, "/v1/whoami", api_whoami, 0),
	ROUTE(GET, "/v1/sandboxes", api_sandbox_list, 0),
	ROUTE(POST, "/v1/sandboxes", api_sandbox_create, ROUTE_JSON | ROUTE_CREATE),
	ROUTE(GET, "/v1/sandboxes/{ref}", api_sandbox_get, 0),
	ROUTE(PATCH, "/v1/sandboxes/{ref}", api_sandbox_patch, ROUTE_JSON),
	ROUTE(DELETE, "/v1/sandboxes/{ref}", api_sandbox_delete, 0),
	ROUTE(POST, "/v1/sandboxes/{ref}/stop", api_sandbox_stop, ROUTE_JSON_OPT),
	ROUTE(POST, "/v1/sandboxes/{ref}/start", api_sandbox_start, ROUTE_JSON_OPT),
	ROUTE(GET, "/v1/sandboxes/{ref}/events", api_sandbox_events, 0),
	ROUTE(GET, "/v1/sandboxes/{ref}/metrics", api_sandbox_metrics, 0),
	ROUTE(GET, "/v1/events/stream", api_events_stream, 0),
	/* 501 naming the capability where the backend cannot suspend (api-suspend.c) */
	{ .method = HTTP_POST,
	  .pattern = "/v1/sandboxes/{ref}/suspend",
	  .fn = api_sandbox_suspend,
	  .flags = ROUTE_JSON_OPT,
	  .feature = "suspend" },
	{ .method = HTTP_POST,
	  .pattern = "/v1/sandboxes/{ref}/resume",
	  .fn = api_sandbox_resume,
	  .flags = ROUTE_JSON_OPT,
	  .feature = "suspend" },
	ROUTE(POST, "/v1/sandboxes/{ref}/run", api_process_run, ROUTE_JSON | ROUTE_GUEST),
	ROUTE(GET, "/v1/sandboxes/{ref}/processes", api_process_list, ROUTE_GUEST),
	ROUTE(POST, "/v1/sandboxes/{ref}/processes", api_process_create, ROUTE_JSON | ROUTE_GUEST),
	ROUTE(GET, "/v1/sandboxes/{ref}/processes/{pid}", api_process_get, ROUTE_GUEST),
	ROUTE(GET, "/v1/sandboxes/{ref}/processes/{pid}/output", api_process_output, ROUTE_GUEST),
	ROUTE(POST, "/v1/sandboxes/{ref}/processes/{pid}/stdin", api_process_stdin,
	      ROUTE_RAW | ROUTE_GUEST),
	ROUTE(POST, "/v1/sandboxes/{ref}/processes/{pid}/signal", api_process_signal,
	      ROUTE_JSON | ROUTE_GUEST),
	ROUTE(GET, "/v1/sandboxes/{ref}/processes/{pid}/attach", api_process_attach,
	      ROUTE_UPGRADE | ROUTE_GUEST),
	ROUTE(GET, "/v1/sandboxes/{ref}/files", api_file_read, ROUTE_GUEST),
	ROUTE(PUT, "/v1/sandboxes/{ref}/files", api_file_write, ROUTE_RAW | ROUTE_GUEST),
	ROUTE(DELETE, "/v1/sandboxes/{ref}/files", api_file_remove, ROUTE_GUEST),
	ROUTE(GET, "/v1/sandboxes/{ref}/dirs", api_dir_list, ROUTE_GUEST),
	/* 501 naming the capability where the backend runs no processes (api-tunnel.c) */
	{ .method = HTTP_GET,
	  .pattern = "/v1/sandboxes/{ref}/tunnel",
	  .fn = api_tunnel,
	  .flags = ROUTE_UPGRADE | ROUTE_GUEST,
	  .feature = "tunnel" },
	ROUTE(POST, "/v1/sandboxes/{ref}/previews", api_preview_create, ROUTE_JSON),
	LATER(POST, "/v1/sandboxes/{ref}/snapshots", "disk_snapshot"),
	LATER(GET, "/v1/snapshots", "disk_snapshot"),
	LATER(DELETE, "/v1/snapshots/{id}", "disk_snapshot"),
	ROUTE(GET, "/v1/images", api_image_list, 0),
	ROUTE(POST, "/v1/images", api_image_install, ROUTE_JSON),
	ROUTE(DELETE, "/v1/images/{image}", api_image_remove, 0),
	LATER(GET, "/v1/volumes", "volumes"),
	LATER(POST, "/v1/volumes", "volumes"),
	LATER(DELETE, "/v1/volumes/{name}", "volumes"),
	ROUTE(GET, "/v1/node", api_node_get, 0),
	ROUTE(POST, "/v1/node/cordon", api_node_cordon, ROUTE_JSON),
	ROUTE(POST, "/v1/auth/login", api_auth_login, ROUTE_PUBLIC | ROUTE_JSON),
	ROUTE(POST, "/v1/auth/logout", api_auth_logout, ROUTE_JSON_OPT),
	ROUTE(POST, "/v1/auth/register", api_auth_register,
	      ROUTE_PUBLIC | ROUTE_JSON | ROUTE_REGISTRATION),
	ROUTE(GET, "/v1/secrets", api_secret_list, 0),
	ROUTE(PUT, "/v1/secrets/{ref}", api_secret_put, ROUTE_JSON),
	ROUTE(DELETE, "/v1/secrets/{ref}", api_secret_delete, 0),
	ROUTE(GET, "/v1/keys", api_key_list, 0),
	ROUTE(POST, "/v1/keys", api_key_create, ROUTE_JSON),
	ROUTE(DELETE, "/v1/keys/{id}", api_key_delete, 0),
	ROUTE(GET, "/v1/users", api_user_list, 0),
	ROUTE(POST, "/v1/users", api_user_create, ROUTE_JSON),
	ROUTE(PATCH, "/v1/users/{id}", api_user_patch, ROUTE_JSON),
	ROUTE(DELETE, "/v1/users/{id}", api_user_delete, 0),
};

/* Matches path against pattern. The first "{name}" segment is decoded into ref, the second
 * into sub. 1: match, 0: no, -EINVAL: a segment is not decodable, -E2BIG: too long. */
static int
match(const char *pattern, const char *path, char *ref, size_t ref_size, char *sub, size_t sub_size)
{
	const char *p = pattern, *s = path;
	unsigned captured = 0;

	while (*p && *s) {
		if (*p == '{') {
			const char *close = strchr(p, '}');
			const char *end = strchr(s, '/');
			size_t n = end ? (size_t)(end - s) : strlen(s);
			int r;
			if (!close || n == 0)
				return 0;
			if (str_has_prefix(p, "{image}")) /* a reference may hold '/' */
				r = http_segment_decode_name(s, n, ref, ref_size);
			else
				r = captured == 0 ? http_segment_decode(s, n, ref, ref_size)
				                  : http_segment_decode(s, n, sub, sub_size);
			if (r < 0)
				return r == -E2BIG ? -E2BIG : -EINVAL;
			captured++;
			p = close + 1;
			s += n;
			continue;
		}
		if (*p != *s)
			return 0;
		p++;
		s++;
	}
	return *p == '\0' && *s == '\0';
}

/* The route for the request, or NULL. When the path exists with other methods, allow lists
 * them (for 405); *ret_err is set when a path segment cannot be used. */
static const struct route *
find_route(struct api_call *call, struct buf *allow, int *ret_err)
{
	const struct http_request *req = call->req;
	const struct route *found = NULL;

	*ret_err = 0;
	for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
		bool hidden =
		        (routes[i].flags & ROUTE_REGISTRATION) && !call->d->opts->registration;
		int m = match(routes[i].pattern, req->path, call->ref, sizeof(call->ref), call->sub,
		              sizeof(call->sub));
		if (m < 0) {
			*ret_err = m;
			return NULL;
		}
		if (m == 0 || (hidden && routes[i].method != req->method))
			continue; /* a hidden route is in no 405's Allow */
		if (routes[i].method == req->method && !found)
			found = &routes[i];
		else if (routes[i].method != req->method)
			(void)buf_printf(allow, "%s%s", allow->len ? ", " : "",
			                 http_method_str(routes[i].method));
	}
	return found;
}

uint64_t
api_body_limit(const struct http_request *req, void *data _unused_)
{
	char ref[256], sub[256];

	/* raw bodies (file writes, stdin) may be up to 64 MiB; everything else is JSON, and
	 * what needs no credential (login, register) far less */
	for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
		if (routes[i].method != req->method ||
		    !(routes[i].flags & (ROUTE_RAW | ROUTE_PUBLIC)) ||
		    match(routes[i].pattern, req->path, ref, sizeof(ref), sub, sizeof(sub)) != 1)
			continue;
		if (routes[i].flags & ROUTE_RAW)
			return API_FILE_MAX;
		return API_PUBLIC_JSON_MAX;
	}
	return API_JSON_MAX;
}

void
api_reply_json_headers(struct conn *c, int status, json_t *body, const char *headers)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;

	json_decref(body);
	if (!text) {
		api_reply_err(c, ERR_INTERNAL, "out of memory");
		return;
	}
	conn_reply(c, status, "application/json", text, strlen(text), headers);
	free(text);
}

void
api_reply_json(struct conn *c, int status, json_t *body)
{
	api_reply_json_headers(c, status, body, NULL);
}

static bool
content_type_is(const char *ct, const char *want)
{
	size_t n = strlen(want);

	/* "application/json" or "application/json; charset=utf-8" */
	return ct && strncasecmp(ct, want, n) == 0 && (ct[n] == '\0' || ct[n] == ';');
}

static int
parse_body(struct api_call *call, const struct route *rt)
{
	const struct http_request *req = call->req;
	json_error_t jerr;

	if (rt->flags & ROUTE_RAW)
		return 0; /* the handler takes the body, whole or as it arrives */
	if (req->body.len == 0) {
		if (rt->flags & ROUTE_JSON) {
			api_reply_err(call->c, ERR_INVALID,
			              "this request needs a JSON object body");
			return -EINVAL;
		}
		return 0;
	}
	if (!(rt->flags & (ROUTE_JSON | ROUTE_JSON_OPT))) {
		api_reply_err(call->c, ERR_INVALID, "this request takes no body");
		return -EINVAL;
	}
	if (!content_type_is(http_req_header(req, "content-type"), "application/json")) {
		api_reply_err(call->c, ERR_INVALID,
		              "the body must be sent as Content-Type: application/json");
		return -EINVAL;
	}
	call->body = json_loadb(req->body.data, req->body.len, JSON_REJECT_DUPLICATES, &jerr);
	if (!call->body) {
		api_reply_err(call->c, ERR_INVALID,
		              "the body is not valid JSON: %s (line %d, column %d)", jerr.text,
		              jerr.line, jerr.column);
		return -EINVAL;
	}
	if (!json_is_object(call->body)) {
		api_reply_err(call->c, ERR_INVALID, "the body must be a JSON object");
		return -EINVAL;
	}
	return 0;
}

/* What every request passes before its route runs, in this order: the guard, the
 * dashboard's files, the route, a credential and its CSRF token, the path's segments, the
 * method, an upgrade. Returns the route, or NULL once it answered. Run at a body's head too,
 * so that whoever may not send a body is told before any of it is read. */
static const struct route *
prelude(struct api_call *call)
{
	_cleanup_buf_ struct buf allow = BUF_INIT(512);
	struct sandboxd *d = call->d;
	struct conn *c = call->c;
	const struct http_request *req = call->req;
	const struct route *rt;
	const char *why = NULL;
	int err;

	/* the guard first: a rebound or cross-origin request learns nothing, not even 401 */
	if (auth_check_origin(d, req, &why) < 0) {
		api_reply_err(c, ERR_FORBIDDEN_ORIGIN, "%s", why);
		return NULL;
	}
	/* the dashboard's page and assets: public, everything else is under /v1 */
	if (!str_has_prefix(req->path, "/v1/") && web_serve(d, c, call->req))
		return NULL;
	rt = find_route(call, &allow, &err);
	if (rt && (rt->flags & ROUTE_REGISTRATION) && !d->opts->registration) {
		/* registration is off: the path answers as one that does not exist, credential
		 * or not */
		api_reply_err(c, ERR_NOT_FOUND, "no such API path");
		return NULL;
	}
	if (!rt || !(rt->flags & ROUTE_PUBLIC)) {
		int r = auth_authenticate(d, c, req, &call->who);
		if (r == -EIO) {
			api_reply_err(c, ERR_UNAVAILABLE,
			              "the accounts cannot be read right now; retry");
			return NULL;
		}
		if (r < 0) {
			api_reply_err(c, ERR_UNAUTHORIZED,
			              "a valid credential is required: send 'Authorization: "
			              "Bearer <token>'");
			return NULL;
		}
		/* revoking this credential, or ending this user, closes this connection */
		conn_set_credential(c, call->who.cred, call->who.name);
		if (rt && auth_check_csrf(req, &call->who) < 0) {
			api_reply_err(c, ERR_REFUSED,
			              "missing or wrong CSRF token; reload the page");
			return NULL;
		}
	} else {
		conn_set_credential(c, NULL, NULL);
	}
	if (err < 0) {
		api_reply_err(c, ERR_INVALID, "%s",
		              err == -E2BIG ? "a path segment is longer than 255 bytes"
		                            : "the path has an invalid escape");
		return NULL;
	}
	if (!rt) {
		if (allow.len) {
			_cleanup_free_ char *hdr = strdup_printf("Allow: %s\r\n", allow.data);
			api_reply_err_headers(c, ERR_METHOD, hdr,
			                      "%s is not allowed on this path; use %s",
			                      http_method_str(req->method), allow.data);
		} else {
			api_reply_err(c, ERR_NOT_FOUND, "no such API path");
		}
		return NULL;
	}
	call->feature = rt->feature;
	if (rt->fn == api_unsupported) {
		/* before the body and the Upgrade are looked at: the answer is the same */
		api_unsupported(call);
		return NULL;
	}
	if (req->upgrade && !(rt->flags & ROUTE_UPGRADE)) {
		api_reply_err(c, ERR_INVALID, "this path does not upgrade");
		return NULL;
	}
	return rt;
}

static void
create_answered(struct conn *c _unused_, int status, uint64_t elapsed_us, void *data)
{
	struct sandboxd *d = data;

	node_count_create(&d->node, status, elapsed_us);
}

void
api_handle(struct sandboxd *d, struct conn *c, struct http_request *req)
{
	struct api_call call = { .d = d, .c = c, .req = req };
	const struct route *rt = prelude(&call);

	if (!rt)
		return;
	/* every create the guard and a credential let through, whatever its answer, now or
	 * once it runs */
	if (rt->flags & ROUTE_CREATE)
		conn_on_answer(c, create_answered, d);
	call.feature = rt->feature;
	if (parse_body(&call, rt) < 0)
		goto out;
	/* a suspended sandbox resumes first, and the request goes on once it runs */
	if ((rt->flags & ROUTE_GUEST) && api_resume_first(&call, rt->fn))
		goto out;
	rt->fn(&call);
out:
	json_decref(call.body);
}

void
api_head(struct sandboxd *d, struct conn *c, struct http_request *req)
{
	struct api_call call = { .d = d, .c = c, .req = req, .body_follows = true };
	const struct route *rt = prelude(&call);

	/* a JSON body (1 MiB at most) is read whole, and the request checked again then; a
	 * raw one (64 MiB) goes on to the sandbox as it arrives, once its route said yes */
	if (rt && (rt->flags & ROUTE_RAW) &&
	    !((rt->flags & ROUTE_GUEST) && api_needs_resume(&call)))
		rt->fn(&call);
}

const char *
api_owner_filter(const struct api_call *call)
{
	return call->who.role == ROLE_ADMIN ? NULL : call->who.name;
}

/* What each capability of LATER's routes is, for a person. */
static const struct {
	const char *capability, *what;
} capability_names[] = {
	{ "suspend", "suspending and resuming sandboxes" },
	{ "disk_snapshot", "snapshots" },
	{ "tunnel", "tunnels into sandboxes" },
	{ "volumes", "volumes" },
};

void
api_unsupported(struct api_call *call)
{
	const char *what = call->feature;

	for (size_t i = 0; i < ARRAY_SIZE(capability_names); i++)
		if (streq(capability_names[i].capability, call->feature))
			what = capability_names[i].what;
	api_reply_err(call->c, ERR_UNSUPPORTED,
	              "this server does not offer %s (capability '%s' in GET /v1/capabilities)",
	              what, call->feature);
}

static void
api_health(struct api_call *call)
{
	static const char ok[] = "{\"status\":\"ok\"}";

	conn_reply(call->c, 200, "application/json", ok, sizeof(ok) - 1, NULL);
}

static void
api_capabilities(struct api_call *call)
{
	struct sandboxd *d = call->d;
	struct backend_caps caps = { .accel = "none" };
	json_t *j;

	if (d->backend)
		d->backend->ops->caps(d->backend, &caps);
	j = json_pack("{s:s, s:s, s:s, s:s, s:{s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b, "
	              "s:b, s:b, s:b}, s:o, s:o}",
	              "api_version", "v1", "version", sandboxd_version, "backend",
	              d->backend ? d->backend->ops->name : "none", "accel", caps.accel,
	              "capabilities", "network_policy_update", caps.egress >= NET_ALLOWLIST,
	              "suspend", caps.suspend, "memory_snapshot", caps.memory_snapshot,
	              "disk_snapshot", caps.disk_snapshot, "egress_allowlist",
	              d->policy.network.ceiling >= NET_ALLOWLIST, "egress_open",
	              d->policy.network.ceiling >= NET_OPEN, "tunnel", caps.processes, "volumes",
	              false, "metrics", samples_available(d), "audit", true, "images", true,
	              "processes", caps.processes, "files", caps.files, "limits",
	              policy_limits_json(&d->policy), "network", policy_network_json(&d->policy));
	/* (ext) POST /v1/node/cordon; "agent" on create and /v1/secrets; POST …/previews and the
	 * preview listener */
	if (j) {
		(void)json_object_set_new(json_object_get(j, "capabilities"), "cordon",
		                          json_true());
		(void)json_object_set_new(json_object_get(j, "capabilities"), "agents",
		                          json_boolean(caps.processes));
		(void)json_object_set_new(json_object_get(j, "capabilities"), "preview",
		                          json_boolean(api_previews_offered(d)));
	}
	api_reply_json(call->c, 200, j);
}

static void
api_whoami(struct api_call *call)
{
	const struct principal *who = &call->who;
	const bool account = !who->operator;
	json_t *j =
	        json_pack("{s:s, s:s, s:[s]}", "user", who->name, "role", role_to_string(who->role),
	                  "scopes", who->role == ROLE_ADMIN ? "admin" : "sandbox");

	if (j && account) {
		(void)json_object_set_new(j, "email", json_string(who->name));
		(void)json_object_set_new(j, "user_id", json_string(who->user_id));
	}
	if (j && who->session)
		(void)json_object_set_new(j, "csrf_token", json_string(who->csrf));
	/* what a user may launch, and what they run now (the dashboard explains a full cap) */
	if (j && account && who->role == ROLE_USER) {
		struct sandbox_usage u;
		api_usage(call->d, who->name, &u);
		(void)json_object_set_new(j, "caps", api_caps_json(&who->caps));
		(void)json_object_set_new(j, "usage", api_usage_json(&u));
	}
	api_reply_json(call->c, 200, j);
}

/* ---- what the HTTP server calls ---- */

static void
serve_request(void *ctx, struct conn *c, struct http_request *req)
{
	api_handle(ctx, c, req);
}

static void
serve_head(void *ctx, struct conn *c, struct http_request *req)
{
	api_head(ctx, c, req);
}

static void
serve_metrics(void *ctx, struct conn *c, struct http_request *req)
{
	metrics_handle(ctx, c, req);
}

/* A request the server could not take: the parser's refusal keeps the status it names. */
static void
protocol_error(void *ctx _unused_, struct conn *c, const struct server_fault *f)
{
	switch (f->kind) {
	case SERVER_FAULT_PARSE:
		api_reply_error(c, f->parse_status, "invalid_request", "%s", f->message);
		return;
	case SERVER_FAULT_TIMEOUT:
		api_reply_error(c, 408, "invalid_request", "the request did not arrive in time");
		return;
	}
}

void
api_server_handler(struct sandboxd *d, struct server_handler *ret)
{
	*ret = (struct server_handler){
		.request = serve_request,
		.head = serve_head,
		.metrics = serve_metrics,
		.body_limit = api_body_limit,
		.protocol_error = protocol_error,
		.response_max = API_FILE_MAX,
		.ctx = d,
	};
}
