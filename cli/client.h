/* client.h: sandbox-cli's HTTP client for API v1 (libcurl): one connection to one endpoint,
 * over a unix socket or TCP (http or https, always verified), with the bearer token when one
 * is configured. Buffered answers are capped; streams are handed over chunk by chunk. */
#pragma once

#include <curl/curl.h>
#include <stdbool.h>
#include <sys/types.h>
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
/* A second client to c's endpoint with c's token and CA: its own connection, for a request
 * made while c streams. 0 or -ENOMEM. */
int client_dup(const struct client *c, struct client **ret);
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

/* Like client_request() with a raw body (len bytes of application/octet-stream; body NULL for
 * none) and an answer that may be raw bytes: files. */
int client_request_bytes(struct client *c, const char *method, const char *path, const void *body,
                         size_t len, struct client_response *resp);

/* Called with each chunk of a 2xx stream as it arrives. Return 0 to go on; anything else
 * ends the stream and client_stream() returns it (a positive value: stopped on purpose). */
typedef int (*client_chunk_fn)(void *userdata, const char *p, size_t n);

/* GETs a stream (Server-Sent Events) and feeds fn until the server ends it. Returns 0 when
 * the server ended it or fn's value when fn stopped it; -EIO when the connection failed or
 * broke (see client_failure()). A non-2xx answer is buffered in resp like client_request(). */
int client_stream(struct client *c, const char *path, client_chunk_fn fn, void *userdata,
                  struct client_response *resp);

const struct client_failure *client_failure(const struct client *c);

/* An upgraded connection: after the server's 101, raw bytes both ways (sbx-stream/1). It has
 * its own connection; the client stays usable for other requests meanwhile. */
struct client_raw;

/* GETs path asking to switch to protocol, over a new connection made like every request's
 * (unix socket, TCP, verified TLS, the token). 0 with *ret when the server switched (101);
 * 0 with *ret NULL and resp filled when it answered anything else (caller calls
 * client_response_done()); -EIO when no answer came (see client_failure()), -ENOBUFS when
 * the refusal was larger than CLIENT_BODY_MAX, -ENOMEM. */
int client_upgrade(struct client *c, const char *path, const char *protocol,
                   struct client_response *resp, struct client_raw **ret);
/* NULL-safe; closes the connection; returns NULL. Free it before its client. */
struct client_raw *client_raw_free(struct client_raw *r);
DEFINE_FREEP(struct client_raw, client_raw_free)
/* The socket to poll (the connection is non-blocking). Poll it only when nothing is pending:
 * bytes that arrived with the answer's headers are returned first. */
int client_raw_fd(const struct client_raw *r);
bool client_raw_pending(const struct client_raw *r);
/* Bytes sent (possibly fewer than n), -EAGAIN (poll for POLLOUT), or -EIO. */
ssize_t client_raw_send(struct client_raw *r, const void *p, size_t n);
/* Ends our side (a half-close: a FIN) while the server's bytes still come. -EOPNOTSUPP over
 * TLS (the connection then stays open both ways until it is freed). */
int client_raw_shutdown(struct client_raw *r);
/* Bytes received, 0 when the server closed the connection, -EAGAIN (poll for POLLIN; read
 * until -EAGAIN each time, since TLS may hold decrypted bytes), or -EIO. */
ssize_t client_raw_recv(struct client_raw *r, void *p, size_t n);

/* A %-escaped copy of one path segment or query value; caller frees. */
char *client_escape(const char *s);
