/* api.c: API v1 routing, the request guard, authentication and the discovery handlers. */
#include <stdarg.h>
#include <strings.h>
#include "api-internal.h"
#include "log.h"
#include "sandboxd.h"
#include "server.h"
#include "util.h"

enum route_flags {
	ROUTE_PUBLIC = 1 << 0,   /* no credential needed */
	ROUTE_JSON = 1 << 1,     /* takes a JSON object body */
	ROUTE_JSON_OPT = 1 << 2, /* takes an optional JSON object body */
};

struct route {
	enum http_method method;
	const char *pattern; /* "{ref}" matches one path segment */
	api_handler_fn fn;
	unsigned flags;
};

static void api_health(struct api_call *call);
static void api_capabilities(struct api_call *call);
static void api_whoami(struct api_call *call);

static const struct route routes[] = {
	{ .method = HTTP_GET, .pattern = "/v1/health", .fn = api_health, .flags = ROUTE_PUBLIC },
	{ .method = HTTP_GET, .pattern = "/v1/capabilities", .fn = api_capabilities },
	{ .method = HTTP_GET, .pattern = "/v1/whoami", .fn = api_whoami },
	{ .method = HTTP_GET, .pattern = "/v1/sandboxes", .fn = api_sandbox_list },
	{ .method = HTTP_POST,
	  .pattern = "/v1/sandboxes",
	  .fn = api_sandbox_create,
	  .flags = ROUTE_JSON },
	{ .method = HTTP_GET, .pattern = "/v1/sandboxes/{ref}", .fn = api_sandbox_get },
	{ .method = HTTP_PATCH,
	  .pattern = "/v1/sandboxes/{ref}",
	  .fn = api_sandbox_patch,
	  .flags = ROUTE_JSON },
	{ .method = HTTP_DELETE, .pattern = "/v1/sandboxes/{ref}", .fn = api_sandbox_delete },
	{ .method = HTTP_POST,
	  .pattern = "/v1/sandboxes/{ref}/stop",
	  .fn = api_sandbox_stop,
	  .flags = ROUTE_JSON_OPT },
	{ .method = HTTP_POST,
	  .pattern = "/v1/sandboxes/{ref}/start",
	  .fn = api_sandbox_start,
	  .flags = ROUTE_JSON_OPT },
	{ .method = HTTP_GET, .pattern = "/v1/sandboxes/{ref}/events", .fn = api_sandbox_events },
	{ .method = HTTP_GET, .pattern = "/v1/events/stream", .fn = api_events_stream },
};

/* Matches path against pattern; fills ref from a "{ref}" segment. 1: match, 0: no,
 * -EINVAL: the segment is not decodable. */
static int
match(const char *pattern, const char *path, char *ref, size_t ref_size)
{
	const char *p = pattern, *s = path;

	while (*p && *s) {
		if (strneq(p, "{ref}", 5)) {
			const char *end = strchr(s, '/');
			size_t n = end ? (size_t)(end - s) : strlen(s);
			if (n == 0)
				return 0;
			if (http_segment_decode(s, n, ref, ref_size) < 0)
				return -EINVAL;
			p += 5;
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

static const struct route *
find_route(const struct http_request *req, char *ref, size_t ref_size, bool *ret_path_known,
           bool *ret_bad_segment)
{
	*ret_path_known = false;
	*ret_bad_segment = false;
	for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
		int m = match(routes[i].pattern, req->path, ref, ref_size);
		if (m < 0) {
			*ret_bad_segment = true;
			return NULL;
		}
		if (m == 0)
			continue;
		*ret_path_known = true;
		if (routes[i].method == req->method)
			return &routes[i];
	}
	return NULL;
}

uint64_t
api_body_limit(const struct http_request *req _unused_, void *data _unused_)
{
	/* file and stdin routes (raw bodies up to API_FILE_MAX) arrive with processes */
	return API_JSON_MAX;
}

void
api_reply_json(struct conn *c, int status, json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;

	json_decref(body);
	if (!text) {
		api_reply_error(c, 500, "internal", "out of memory");
		return;
	}
	conn_reply(c, status, "application/json", text, strlen(text), NULL);
	free(text);
}

void
api_reply_error(struct conn *c, int status, const char *code, const char *fmt, ...)
{
	char message[512];
	json_t *body;
	char *text;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	/* messages quote what the client sent (a ref, a field name): keep them safe to show a
	 * person on a terminal or a page */
	for (char *p = message; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
			*p = '?';
	if (status >= 500)
		log_error("answering %d %s: %s", status, code, message);
	body = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message);
	text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text) {
		static const char oom[] =
		        "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
		conn_reply(c, 500, "application/json", oom, sizeof(oom) - 1, NULL);
		return;
	}
	conn_reply(c, status, "application/json", text, strlen(text),
	           status == 401 ? "WWW-Authenticate: Bearer realm=\"sandboxd\"\r\n" : NULL);
	free(text);
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

	if (req->body.len == 0) {
		if (rt->flags & ROUTE_JSON) {
			api_reply_error(call->c, 400, "invalid_request",
			                "this request needs a JSON object body");
			return -EINVAL;
		}
		return 0;
	}
	if (!(rt->flags & (ROUTE_JSON | ROUTE_JSON_OPT))) {
		api_reply_error(call->c, 400, "invalid_request", "this request takes no body");
		return -EINVAL;
	}
	if (!content_type_is(http_req_header(req, "content-type"), "application/json")) {
		api_reply_error(call->c, 400, "invalid_request",
		                "the body must be sent as Content-Type: application/json");
		return -EINVAL;
	}
	call->body = json_loadb(req->body.data, req->body.len, JSON_REJECT_DUPLICATES, &jerr);
	if (!call->body) {
		api_reply_error(call->c, 400, "invalid_request",
		                "the body is not valid JSON: %s (line %d, column %d)", jerr.text,
		                jerr.line, jerr.column);
		return -EINVAL;
	}
	if (!json_is_object(call->body)) {
		api_reply_error(call->c, 400, "invalid_request", "the body must be a JSON object");
		return -EINVAL;
	}
	return 0;
}

void
api_handle(struct sandboxd *d, struct conn *c, struct http_request *req)
{
	struct api_call call = { .d = d, .c = c, .req = req };
	const struct route *rt;
	const char *why = NULL;
	bool known, bad;

	/* the guard first: a rebound or cross-origin request learns nothing, not even 401 */
	if (auth_check_origin(d, req, &why) < 0) {
		api_reply_error(c, 403, "forbidden_origin", "%s", why);
		return;
	}
	if (req->upgrade) {
		api_reply_error(c, 400, "invalid_request", "this path does not upgrade");
		return;
	}
	rt = find_route(req, call.ref, sizeof(call.ref), &known, &bad);
	if (!rt || !(rt->flags & ROUTE_PUBLIC)) {
		if (auth_authenticate(d, c, req, &call.who) < 0) {
			api_reply_error(c, 401, "unauthorized",
			                "a valid credential is required: send 'Authorization: "
			                "Bearer <token>'");
			return;
		}
	}
	if (bad) {
		api_reply_error(c, 400, "invalid_request", "the path has an invalid escape");
		return;
	}
	if (!rt) {
		if (known)
			api_reply_error(c, 405, "invalid_request", "%s is not allowed on %s",
			                http_method_str(req->method), req->path);
		else
			api_reply_error(c, 404, "not_found", "no such API path");
		return;
	}
	if (parse_body(&call, rt) < 0)
		goto out;
	rt->fn(&call);
out:
	json_decref(call.body);
}

const char *
api_owner_filter(const struct api_call *call)
{
	return call->who.role == ROLE_ADMIN ? NULL : call->who.name;
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
	              "capabilities", "network_policy_update", false, "suspend", caps.suspend,
	              "memory_snapshot", caps.memory_snapshot, "disk_snapshot", caps.disk_snapshot,
	              "egress_allowlist", d->policy.network.ceiling >= NET_ALLOWLIST, "egress_open",
	              d->policy.network.ceiling >= NET_OPEN, "tunnel", false, "volumes", false,
	              "metrics", false, "audit", true, "images", false, "processes", caps.processes,
	              "files", caps.files, "limits", policy_limits_json(&d->policy), "network",
	              policy_network_json(&d->policy));
	api_reply_json(call->c, 200, j);
}

static void
api_whoami(struct api_call *call)
{
	json_t *j = json_pack("{s:s, s:s, s:[s]}", "user", call->who.name, "role",
	                      role_to_string(call->who.role), "scopes",
	                      call->who.role == ROLE_ADMIN ? "admin" : "sandbox");

	api_reply_json(call->c, 200, j);
}
