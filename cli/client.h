/* client.h: sandbox-cli's HTTP client for API v1 (libcurl): one connection to one endpoint,
 * over a unix socket or TCP (http or https, always verified), with the bearer token when one
 * is configured. Buffered answers are capped; streams are handed over chunk by chunk. */
#pragma once

#include <curl/curl.h>
#include <stdbool.h>
#include "buf.h"
#include "macro.h"

#define CLIENT_BODY_MAX (64u << 20)

enum endpoint_kind {
	ENDPOINT_UNIX,
	ENDPOINT_HTTP,
	ENDPOINT_HTTPS,
};

/* Checks an endpoint: "unix:///abs/path", "http://host[:port]" or "https://host[:port]"
 * (a trailing '/' is allowed, nothing else after the authority). 0 with the kind, or -EINVAL
 * with *ret_why saying what is wrong (static text). */
int client_parse_endpoint(const char *endpoint, enum endpoint_kind *ret_kind, const char **ret_why);

struct client;

struct client_response {
	long status;     /* the HTTP status */
	struct buf body; /* the body (for a stream: only when the status is not 2xx) */
};

/* Why the last request got no HTTP answer. */
struct client_failure {
	CURLcode code;
	int os_errno;                 /* from the socket layer, 0 if none */
	bool answered;                /* an answer had begun: the connection broke */
	char detail[CURL_ERROR_SIZE]; /* curl's words */
};

/* endpoint must have passed client_parse_endpoint(); token and ca may be NULL. The strings
 * are copied. 0, -EINVAL or -ENOMEM. */
int client_new(const char *endpoint, const char *token, const char *ca, struct client **ret);
/* NULL-safe; returns NULL. */
struct client *client_free(struct client *c);
DEFINE_FREEP(struct client, client_free)

const char *client_endpoint(const struct client *c);
enum endpoint_kind client_kind(const struct client *c);
bool client_has_token(const struct client *c);

void client_response_done(struct client_response *r);

/* Sends method path (path starts with "/v1/" and is already escaped) with an optional JSON
 * body and waits for the whole answer, however long the server takes. 0 when an HTTP answer
 * arrived (whatever its status; resp is filled, caller calls client_response_done()),
 * -EIO when none did (see client_failure()), -ENOBUFS when it was larger than
 * CLIENT_BODY_MAX, -ENOMEM. */
int client_request(struct client *c, const char *method, const char *path, const char *body,
                   struct client_response *resp);

/* Called with each chunk of a 2xx stream as it arrives. Return 0 to go on; anything else
 * ends the stream and client_stream() returns it (a positive value: stopped on purpose). */
typedef int (*client_chunk_fn)(void *userdata, const char *p, size_t n);

/* GETs a stream (Server-Sent Events) and feeds fn until the server ends it. Returns 0 when
 * the server ended it or fn's value when fn stopped it; -EIO when the connection failed or
 * broke (see client_failure()). A non-2xx answer is buffered in resp like client_request(). */
int client_stream(struct client *c, const char *path, client_chunk_fn fn, void *userdata,
                  struct client_response *resp);

const struct client_failure *client_failure(const struct client *c);

/* A %-escaped copy of one path segment or query value; caller frees. */
char *client_escape(const char *s);
