/* server-internal.h: what server.c (connections) and server-listen.c (listeners, accepting,
 * the server's life and its sweep) share: the limits, and the connection, listener and server
 * structures. Nothing outside daemon/http includes it. */
#pragma once

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>
#include "buf.h"
#include "hashmap.h"
#include "http.h"
#include "list.h"
#include "loop.h"
#include "server.h"

#define HANDSHAKE_TIMEOUT_MS 10000
#define HEAD_TIMEOUT_MS 10000
#define BODY_TIMEOUT_MS 60000
#define IDLE_TIMEOUT_MS 60000
#define WRITE_TIMEOUT_MS 30000
#define IN_MAX (128u << 10)
#define OUT_SLACK (8u << 20) /* room beyond the handler's largest body (its head, say) */
#define STREAM_BACKLOG_MAX (4u << 20)
#define READ_CHUNK 16384
#define LINGER_MS 2000
#define DRAIN_LOW (64u << 10)
#define OUT_KEEP (8u << 10) /* an idle connection keeps at most this much output buffer */
/* TCP keepalive: the first probe after 30 s of quiet, then every 10 s, gone after 3 unanswered
 * (a vanished client is found within a minute) */
#define TCP_KEEPIDLE_SECS 30
#define TCP_KEEPINTVL_SECS 10
#define TCP_KEEPCNT_N 3
#define TCP_USER_TIMEOUT_MS 60000u
#define LINGER_MAX (1u << 20)
#define BODY_PIECE (64u << 10) /* a taken body is handed on in pieces of at most this */
#define FD_WARN_EVERY_MS 10000

enum conn_state {
	CONN_HANDSHAKE, /* TLS handshake */
	CONN_READING,   /* reading a request */
	CONN_HANDLING,  /* a handler holds the request */
	CONN_WRITING,   /* flushing a complete response */
	CONN_STREAMING, /* a streaming response is open */
	CONN_LINGERING, /* the last answer is out; reading what the client still sends */
	CONN_RAW,       /* upgraded (101): bytes go to the handler both ways */
	CONN_CLOSING,
};

struct listener {
	struct loop_source src;
	struct server *s;
	struct list_node link;
	unsigned nconns, budget; /* open connections, and how many it may hold */
	bool is_unix;
	bool metrics; /* --metrics-listen: the handler's metrics(), no credential */
	SSL_CTX *tls;
	char *path; /* unix socket to unlink at exit */
	char *label;
};

struct server {
	struct loop *loop;
	struct server_handler h;
	size_t out_max; /* what a connection may hold queued */
	struct list_node listeners;
	struct list_node conns;
	unsigned nconns;
	unsigned budget;        /* each new listener's */
	unsigned client_limit;  /* connections per client address on TCP; 0: none */
	struct hashmap clients; /* client key -> struct client, while client_limit is set */
	int spare_fd;           /* given up to accept and shed one when descriptors run out */
	uint64_t fd_warned;     /* when running out of descriptors was last logged */
};

/* The connections of one client address on the TCP listeners. */
struct client {
	char key[64]; /* "192.0.2.1", or "2001:db8:1:2::/64" */
	unsigned n;
};

struct conn {
	struct loop_source src;
	int fd;
	SSL *ssl;
	struct server *s;
	struct listener *l;
	struct list_node link;
	enum conn_state state;
	struct http_req_parser hp;
	struct buf in, out;
	bool keep_alive;  /* for the response being written */
	bool chunked;     /* streaming with chunked encoding (else until close) */
	bool sized;       /* streaming a body whose Content-Length was sent */
	size_t body_left; /* sized: bytes of it still to come */
	bool in_dispatch; /* the handler is on the stack */
	bool continue_scheduled;
	bool sent_continue; /* "100 Continue" for this request */
	uint64_t deadline;  /* 0: none */
	size_t lingered;    /* bytes dropped while lingering */
	uid_t peer_uid;
	struct client *client; /* counted against its address's limit, or NULL */
	uint64_t since;        /* when it began to wait for a request (accepted, or answered) */
	bool authenticated;    /* a request on it came with a credential */
	/* a request body taken as it arrives (conn_body_take) */
	void (*body_data)(struct conn *c, const void *bytes, size_t len, void *ctx);
	void (*body_end)(struct conn *c, void *ctx);
	void *body_ctx;
	bool body_paused;
	bool in_head;            /* the handler's head() is on the stack */
	uint64_t body_time_left; /* of the body's time limit, while paused */
	char peer[48];           /* the client's address ("unix:UID" on the socket) */
	char cred[64];           /* the credential that authenticated the latest request, or "" */
	char user[256]; /* whose it is (the principal's name: an email is up to 254 bytes) */
	void (*on_close)(struct conn *c, void *data);
	void *on_close_data;
	void (*on_drain)(struct conn *c, void *data);
	void *on_drain_data;
	void (*on_answer)(struct conn *c, int status, uint64_t elapsed_us, void *data);
	void *on_answer_data;
	uint64_t head_us; /* when the current request's head was read (CLOCK_MONOTONIC) */
	void (*raw_data)(struct conn *c, const void *bytes, size_t len, void *ctx);
	void *raw_ctx;
	bool raw_closing;      /* close once the queue is written */
	bool raw_paused;       /* conn_raw_pause: not read until conn_raw_resume */
	bool raw_eof;          /* the client ended its side (a half-close, with on_raw_eof set) */
	bool raw_shut_pending; /* conn_raw_shutdown: shut our side once the queue is written */
	bool raw_shut;         /* ... and it is shut */
	void (*on_raw_eof)(struct conn *c, void *data);
	void *on_raw_eof_data;
	bool in_write; /* a producer is writing: no drain callback back into it */
};

/* server.c's, for server-listen.c. */
void server_conn_close(struct conn *c);
void server_conn_free(void *data);
void server_conn_flush(struct conn *c);
void server_conn_io(struct loop_source *src, uint32_t events, void *data);
/* A request that did not arrive in time: its fault answered, the body given up. */
void server_conn_timed_out(struct conn *c);
