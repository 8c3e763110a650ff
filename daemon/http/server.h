/* server.h: the listeners (a unix socket, and TCP with optional TLS and client certificates)
 * and the HTTP/1.1 connections on them. One request at a time per connection; a handler may
 * answer later (conn_reply from a waiter) or turn the connection into a stream (SSE, NDJSON).
 *
 * The server knows no route and chooses no answer: it is handed, when made, what to call for
 * a request, for a request's head before its body, for a request on the metrics listener, for
 * a body's limit and for a request it could not take (struct server_handler); the layer above
 * writes every response.
 *
 * Bounds: request head 16 KiB, body per request (the handler's body_limit), a head must
 * arrive within 10 s of its first byte, idle keep-alive connections close after 60 s, a client
 * that stops reading a response for 30 s is dropped, and a stream whose client falls 4 MiB
 * behind is closed. A TCP connection carries keepalive probes, so a client that vanished
 * without closing (a laptop shut) is found within about a minute. No connection can stall
 * another: every socket is non-blocking on one
 * loop. Each listener holds at most its own budget of connections, so a flood of one cannot
 * lock the others (the operator's unix socket) out; on TCP one client address (an IPv6 one by
 * its /64) holds at most its own share; and a full listener makes room by closing its oldest
 * idle connection that never authenticated, rather than refusing the new one. */
#pragma once

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include "http.h"

struct loop;
struct server;
struct conn;

/* Why the server could not hand a request to its handler. */
enum server_fault_kind {
	SERVER_FAULT_PARSE,   /* the HTTP parser refused it (http.h): see parse_status, message */
	SERVER_FAULT_TIMEOUT, /* it had begun and did not arrive in time */
};

struct server_fault {
	enum server_fault_kind kind;
	int parse_status;    /* SERVER_FAULT_PARSE: the status the parser names for it */
	const char *message; /* SERVER_FAULT_PARSE: what is wrong, safe to show the client */
};

/* What the server calls into, each with ctx. Handlers answer with the conn_* functions
 * below: at once or later, a whole response, a stream or an upgrade. */
struct server_handler {
	/* A complete request on an API listener (unix socket, TCP). */
	void (*request)(void *ctx, struct conn *c, struct http_request *req);
	/* The head of a request on an API listener whose body follows, before any of the body is
	 * read. The handler may answer at once (conn_reply: the body is never read, and the
	 * connection closes after the answer), take the body as it arrives (conn_body_take), or
	 * do neither: then the body is read whole into req->body and request() follows. NULL:
	 * every body is read whole. */
	void (*head)(void *ctx, struct conn *c, struct http_request *req);
	/* A complete request on the metrics listener (server_listen_metrics). */
	void (*metrics)(void *ctx, struct conn *c, struct http_request *req);
	/* How many body bytes a request may carry, asked once its head is in (ctx is data). */
	http_body_limit_fn body_limit;
	/* A request the server could not take. The handler answers it (conn_reply); the
	 * connection closes once the answer is out. */
	void (*protocol_error)(void *ctx, struct conn *c, const struct server_fault *f);
	/* The largest body a handler answers with at once (a file read): what a connection
	 * may hold queued. */
	size_t response_max;
	void *ctx;
};

/* A server on loop calling h (copied; h->ctx is borrowed). Each listener holds at most
 * max_connections at once (its budget); when it is full, a new connection closes the
 * listener's oldest idle connection that never authenticated, or is refused when there is
 * none. */
int server_new(struct loop *loop, const struct server_handler *h, unsigned max_connections,
               struct server **ret);
/* At most n connections from one client address on the TCP API listeners together (IPv4:
 * the address, IPv6: its /64); more are refused as they come. 0: no such limit (the
 * default). */
void server_set_client_limit(struct server *s, unsigned n);
/* Lowers (never raises) each listener's budget to n: what the descriptors allow. */
void server_set_listener_budget(struct server *s, unsigned n);
unsigned server_listener_count(const struct server *s);
/* What a TCP client is counted by against that limit: its IPv4 address (an IPv4-mapped IPv6
 * one too), or the /64 of its IPv6 address, which one host commonly holds whole
 * ("2001:db8:1:2::/64"). */
void server_client_key(const struct sockaddr_storage *ss, char *out, size_t size);
struct server *server_free(struct server *s);

/* Binds a unix socket (0600). Refuses with -EADDRINUSE when another server answers on it; a
 * stale socket file is replaced. */
int server_listen_unix(struct server *s, const char *path);
/* Binds TCP host:port; tls (borrowed, may be NULL) turns on TLS. */
int server_listen_tcp(struct server *s, const char *host, const char *port, SSL_CTX *tls);
/* The same, its failures naming flag (the option that chose the address) rather than
 * --listen. */
int server_listen_tcp_flag(struct server *s, const char *host, const char *port, SSL_CTX *tls,
                           const char *flag);
/* A listener whose requests go to the handler's metrics(), without credentials: the caller
 * allows only loopback addresses (--metrics-listen). */
int server_listen_metrics(struct server *s, const char *host, const char *port);
/* Closes idle and slow connections; called by the housekeeping timer. */
void server_sweep(struct server *s, uint64_t now_ms);
unsigned server_connection_count(const struct server *s);

/* A request body taken as it arrives, from inside the handler's head(): data() gets its bytes
 * in order (req->body stays empty), then end() once it is whole; the handler answers as it
 * would a request(). It may answer sooner (a failure): the rest is not read and the connection
 * closes after the answer. When the body never completes (the client goes, breaks the framing,
 * runs out of time, the server shuts down), the close hook (conn_on_close, set it first) runs
 * and the handler must not answer; the server answers what it can. -EINVAL outside head(). */
int conn_body_take(struct conn *c,
                   void (*data)(struct conn *c, const void *bytes, size_t len, void *ctx),
                   void (*end)(struct conn *c, void *ctx), void *ctx);
/* Stops reading a taken body (from data(), say, while what it feeds is full) until
 * conn_body_resume(); meanwhile the body's time limit stands still. */
void conn_body_pause(struct conn *c);
void conn_body_resume(struct conn *c);

/* Response helpers for handlers. Exactly one of reply/stream_start per request. */
void conn_reply(struct conn *c, int status, const char *content_type, const void *body, size_t len,
                const char *extra_headers);
/* conn_reply for a response a client may keep and ask about again ("Cache-Control: no-cache"
 * rather than the API's "no-store"): the dashboard's files, with an ETag in extra_headers. */
void conn_reply_revalidate(struct conn *c, int status, const char *content_type, const void *body,
                           size_t len, const char *extra_headers);
/* Starts a chunked streaming response; the connection stays open until conn_stream_end or the
 * client goes away. */
int conn_stream_start(struct conn *c, int status, const char *content_type);
/* Starts a response whose body of length bytes (sent as its Content-Length) the handler writes
 * in pieces with conn_stream_write, as a stream: as fast as the client reads (conn_backlog,
 * conn_on_drain), never the whole body queued at once. conn_stream_end once every byte is
 * written; the connection then stays open for the next request as after conn_reply. Not for a
 * HEAD request. -EPIPE when the connection closed (its close hook ran). */
int conn_stream_start_sized(struct conn *c, int status, const char *content_type, size_t length);
/* Queues one chunk (a piece of a sized body). -EPIPE when the connection is closed (now or
 * before): the client went away, or fell too far behind. */
int conn_stream_write(struct conn *c, const void *data, size_t len);
void conn_stream_end(struct conn *c);

/* Bytes queued and not yet written (streams and upgraded connections). */
size_t conn_backlog(const struct conn *c);
/* Called when the socket took queued bytes of a stream or an upgraded connection and the
 * queue is low again, so a producer that paused can go on. Never from inside the producer's
 * own conn_stream_write() or conn_raw_write(). */
void conn_on_drain(struct conn *c, void (*fn)(struct conn *c, void *data), void *data);

/* From a head() handler that will decide later: the server reads nothing more (the body stays
 * unread, in the socket and in what was read after the head) and the handler holds the request
 * as request() holds one it answers later, until it answers (conn_reply: the body is never
 * read, and the connection closes after the answer) or turns the connection raw
 * (conn_raw_begin: the unread body and all that follows go to data()). A hang-up closes it
 * meanwhile (conn_on_close). -EINVAL outside a head() handler, or once the body is taken. */
int conn_head_hold(struct conn *c);
/* Answers 101 Switching Protocols with headers ("Name: value\r\n"...) and from then on hands
 * every byte the client sends to data(). conn_on_close still tells when it goes away. */
int conn_upgrade(struct conn *c, const char *headers,
                 void (*data)(struct conn *c, const void *bytes, size_t len, void *ctx), void *ctx);
/* Queues bytes on an upgraded connection. -EPIPE when it is closed (now or before: a client
 * more than 4 MiB behind is closed). */
int conn_raw_write(struct conn *c, const void *bytes, size_t len);
/* Writes what is queued, then closes; the close hook runs when it is closed. */
void conn_raw_close(struct conn *c);
/* Turns the connection raw without writing an answer (the bytes that follow are the handler's
 * protocol's, from the first): from the request handler or a later waiter before any answer,
 * or from a head() handler (or after conn_head_hold), whose unread body then comes to data()
 * as the client's bytes. -EINVAL when the connection is in no such state; -EPIPE when it
 * closed. */
int conn_raw_begin(struct conn *c,
                   void (*data)(struct conn *c, const void *bytes, size_t len, void *ctx),
                   void *ctx);
/* Stops reading an upgraded connection (its consumer is full) until conn_raw_resume(); a reset
 * meanwhile still closes it. */
void conn_raw_pause(struct conn *c);
void conn_raw_resume(struct conn *c);
/* Half-closes. With fn set, the client's end of its side (TCP FIN, TLS close_notify) calls fn
 * once instead of closing, and the connection goes on carrying bytes to the client; without
 * it, that end closes the connection. */
void conn_raw_on_eof(struct conn *c, void (*fn)(struct conn *c, void *data), void *data);
/* Ends our side once the queue is written (FIN, or close_notify on TLS) while the client's
 * bytes still come; when the client's side has ended too, the connection closes. Writes after
 * this fail with -EPIPE. */
void conn_raw_shutdown(struct conn *c);

/* Called once when the connection closes while a handler still holds it (waiting,
 * streaming or upgraded). The connection must not be used after it. */
void conn_on_close(struct conn *c, void (*fn)(struct conn *c, void *data), void *data);

/* Called once as the answer to the current request begins (conn_reply, conn_stream_start or
 * conn_upgrade), with its status and the microseconds since the request's head was read; not
 * when the connection closes first. For the handler of that request (the create counts of
 * /metrics); data is borrowed. */
void conn_on_answer(struct conn *c,
                    void (*fn)(struct conn *c, int status, uint64_t elapsed_us, void *data),
                    void *data);

bool conn_is_unix(const struct conn *c);
bool conn_is_tls(const struct conn *c);
/* The peer's uid on a unix socket (SO_PEERCRED); -1 otherwise. */
uid_t conn_peer_uid(const struct conn *c);
/* The client's address as text ("127.0.0.1", "::1", or "unix:UID" on the socket): what
 * login rate limits count by. */
const char *conn_peer(const struct conn *c);

/* Tags the connection with the credential that authenticated its latest request (an opaque
 * string such as "key:ID" or "session:ID"; NULL or "" for none) and whose it is (the
 * principal's name), so that revoking either ends what it holds open. A connection once
 * tagged with a credential is never the one a full listener closes to make room. */
void conn_set_credential(struct conn *c, const char *cred, const char *user);
/* Closes every connection tagged with cred (when not NULL) or with user (when not NULL),
 * streams, attaches and idle keep-alives alike, except `except` (the connection asking).
 * Their close hooks run before this returns. Returns how many were closed. */
unsigned server_close_credential(struct server *s, const char *cred, const char *user,
                                 const struct conn *except);
