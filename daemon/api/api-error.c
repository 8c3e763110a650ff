/* api-error.c: the API's error vocabulary: the one table from an error kind to its HTTP
 * status and API error code, and the one place that formats an error answer; see
 * api-error.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "api-error.h"
#include "api.h"
#include "log.h"
#include "server.h"
#include "util.h"

struct api_error {
	int status;
	const char *code;
	const char *headers; /* sent with every answer of this kind, instead of the caller's */
};

/* docs/api.md's table of errors, by kind. ERR_NONE has no entry: it is classified first. */
static const struct api_error api_errors[_ERR_KIND_MAX] = {
	[ERR_INVALID] = { .status = 400, .code = "invalid_request" },
	[ERR_UNAUTHORIZED] = { .status = 401,
	                       .code = "unauthorized",
	                       .headers = "WWW-Authenticate: Bearer realm=\"sandboxd\"\r\n" },
	[ERR_REFUSED] = { .status = 403, .code = "refused" },
	[ERR_FORBIDDEN_ORIGIN] = { .status = 403, .code = "forbidden_origin" },
	[ERR_NOT_FOUND] = { .status = 404, .code = "not_found" },
	[ERR_METHOD] = { .status = 405, .code = "invalid_request" },
	[ERR_TIMEOUT] = { .status = 408, .code = "invalid_request" },
	[ERR_CONFLICT] = { .status = 409, .code = "conflict" },
	[ERR_TOO_LARGE] = { .status = 413, .code = "invalid_request" },
	[ERR_RATE_LIMITED] = { .status = 429, .code = "rate_limited" },
	[ERR_HEAD_TOO_LARGE] = { .status = 431, .code = "invalid_request" },
	[ERR_INTERNAL] = { .status = 500, .code = "internal" },
	[ERR_UNSUPPORTED] = { .status = 501, .code = "unsupported" },
	[ERR_UNAVAILABLE] = { .status = 503, .code = "unavailable" },
	[ERR_NO_SPACE] = { .status = 507, .code = "insufficient_storage" },
};

/* What a -errno means when the call that returned it said nothing more. */
static const struct {
	int error;
	enum err_kind kind;
	const char *message;
} errno_kinds[] = {
	{ ENOMEM, ERR_INTERNAL, "out of memory" },
	{ EINVAL, ERR_INVALID, "the request is invalid" },
	{ ENOENT, ERR_NOT_FOUND, "no such object" },
	{ EEXIST, ERR_CONFLICT, "it exists already" },
	{ EBUSY, ERR_CONFLICT, "it is busy" },
	{ EPERM, ERR_REFUSED, "not permitted" },
	{ EACCES, ERR_REFUSED, "not permitted" },
	{ EOPNOTSUPP, ERR_UNSUPPORTED, "this server does not support it" },
	{ EAGAIN, ERR_UNAVAILABLE, "temporarily unavailable; retry" },
};

static const struct api_error *
lookup(enum err_kind kind)
{
	if (kind > ERR_NONE && kind < _ERR_KIND_MAX && api_errors[kind].code)
		return &api_errors[kind];
	return &api_errors[ERR_INTERNAL];
}

int
api_error_status(enum err_kind kind)
{
	return lookup(kind)->status;
}

const char *
api_error_code(enum err_kind kind)
{
	return lookup(kind)->code;
}

enum err_kind
api_error_classify(int rc, const struct err *err, const char **ret_message)
{
	if (err && err->kind > ERR_NONE && err->kind < _ERR_KIND_MAX) {
		*ret_message = err->message;
		return err->kind;
	}
	for (size_t i = 0; i < ARRAY_SIZE(errno_kinds); i++)
		if (rc == -errno_kinds[i].error) {
			*ret_message = errno_kinds[i].message;
			return errno_kinds[i].kind;
		}
	*ret_message = rc < 0 ? strerror(-rc) : "an operation failed without saying why";
	return ERR_INTERNAL;
}

static void
reply_v(struct conn *c, enum err_kind kind, const char *headers, const char *fmt, va_list ap)
{
	const struct api_error *e = lookup(kind);
	char message[512];
	json_t *body;
	char *text;

	vsnprintf(message, sizeof(message), fmt, ap);
	/* messages quote what the client sent (a ref, a field name): keep them safe to show a
	 * person on a terminal or a page */
	for (char *p = message; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
			*p = '?';
	/* 5xx is logged: internal is a bug, unsupported and unavailable are what this server
	 * cannot do now */
	if (e == &api_errors[ERR_INTERNAL])
		log_error("answering %d %s: %s", e->status, e->code, message);
	else if (e->status > 500)
		log_info("answering %d %s: %s", e->status, e->code, message);
	if (e->headers)
		headers = e->headers;
	body = json_pack("{s:{s:s, s:s}}", "error", "code", e->code, "message", message);
	text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text) {
		static const char oom[] =
		        "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
		conn_reply(c, api_errors[ERR_INTERNAL].status, "application/json", oom,
		           sizeof(oom) - 1, NULL);
		return;
	}
	conn_reply(c, e->status, "application/json", text, strlen(text), headers);
	free(text);
}

void
api_reply_err(struct conn *c, enum err_kind kind, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	reply_v(c, kind, NULL, fmt, ap);
	va_end(ap);
}

void
api_reply_err_headers(struct conn *c, enum err_kind kind, const char *headers, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	reply_v(c, kind, headers, fmt, ap);
	va_end(ap);
}

void
api_reply_failure(struct conn *c, int rc, const struct err *err)
{
	const char *message;
	enum err_kind kind = api_error_classify(rc, err, &message);

	api_reply_err(c, kind, "%s", message);
}

void
api_reply_error(struct conn *c, int status, const char *code, const char *fmt, ...)
{
	enum err_kind kind = ERR_INTERNAL;
	va_list ap;

	/* the kind that has this status and code: the HTTP server's protocol errors come as
	 * those it chose */
	for (int k = ERR_NONE + 1; k < _ERR_KIND_MAX; k++)
		if (api_errors[k].status == status && streq(api_errors[k].code, code)) {
			kind = (enum err_kind)k;
			break;
		}
	va_start(ap, fmt);
	reply_v(c, kind, NULL, fmt, ap);
	va_end(ap);
}
