/* worker-internal.h: what the egress worker's parts share (worker.h is the process's
 * interface): the sandboxes sandboxd told it about, the registry of open connections that a
 * policy update cuts, the queue of decisions going back to sandboxd, and the proxy's and DNS
 * stub's entry points. worker.c owns the state and the control channel, proxy.c the
 * connections, stub.c the DNS stub. */
#pragma once

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "hashmap.h"
#include "chunked.h"
#include "list.h"
#include "matcher.h"
#include "sni.h"

#define WORKER_ID_MAX 128
#define WORKER_LINE_MAX (256u * 1024) /* one control line, either way: the largest policy */
#define WORKER_EVENTS_MAX 4096        /* decisions queued for sandboxd before dropping */
#define WORKER_CONNS_PER_SANDBOX 512  /* open connections one sandbox may hold */
#define WORKER_CONNS_TOTAL 8192       /* and all of them together (less when fds are few) */
#define WORKER_CONNECT_MS 10000       /* dialling a name, all its addresses together */
#define WORKER_HANDSHAKE_MS_DEFAULT 10000
#define WORKER_SETTLE_MS 100 /* waiting for the control lines sent before a connection */

/* One sandbox, as the last "set" described it. Reached by id and by guest address, both
 * under worker.lock; freed by "remove" (its connections are cut and let go first). */
struct wsandbox {
	char id[WORKER_ID_MAX + 1];
	char guest_key[INET_ADDRSTRLEN]; /* the guest address, the by_guest key */
	struct in_addr guest, host;
	struct matcher *net;    /* its policy, compiled; read only under worker.lock */
	struct list_node conns; /* struct wconn.node */
	unsigned n_conns;
};

/* One proxied connection. The thread that runs it owns it and its fds; under worker.lock
 * others may only read it and cut it (shutdown, never close), so an fd is closed only after
 * the connection has left the registry. */
struct wconn {
	struct list_node node; /* in sb->conns while sb is set */
	struct wsandbox *sb;   /* NULL once the sandbox is removed */
	char id[WORKER_ID_MAX + 1];
	char name[SNI_NAME_MAX + 1]; /* the name it was allowed for; "" before the decision */
	int cfd;                     /* the guest's side */
	int ufd;                     /* the server's side, -1 until dialled */
	bool cut;                    /* a policy update or removal ended it */
};

struct worker {
	pthread_mutex_t lock; /* sandboxes, connections and the counters below */
	struct hashmap by_id, by_guest;
	unsigned n_conns, max_conns;
	unsigned handshake_ms;

	/* the main thread reading control lines, for worker_lock_settled(); under lock */
	int control_fd;
	bool control_busy;           /* reading or applying what it read */
	uint64_t control_seq;        /* reads applied */
	pthread_cond_t control_cond; /* control_seq moved */

	/* decisions on their way to sandboxd, never blocking on it: the thread that has one
	 * writes it when nothing else waits, else queues it; the main thread writes what waits
	 * for room in sandboxd's socket */
	pthread_mutex_t qlock;
	bool writing; /* a thread is sending (flush_locked) */
	char *out;    /* the line being written, out_off of its out_len bytes sent */
	size_t out_len, out_off;
	char *queue[WORKER_EVENTS_MAX];
	size_t q_head, q_count;
	uint64_t dropped;
	int wake_fd; /* eventfd: lines wait for room */
};

/* Takes w->lock once the control lines sandboxd had sent by now are applied (waiting at most
 * WORKER_SETTLE_MS for the main thread), so that a connection or query arriving after a "set"
 * was sent is decided by it, although other threads than the one reading the control channel
 * accept and decide. */
void worker_lock_settled(struct worker *w);

/* The sandbox whose guest address is a; caller holds w->lock. NULL when none. */
struct wsandbox *worker_sandbox_by_guest(struct worker *w, struct in_addr a);

/* Cuts a registered connection: both sockets shut down, so its thread ends and reports it
 * cut. Caller holds w->lock. */
void worker_cut_locked(struct wconn *c);

/* One decision, as worker.h's {"op":"egress"} line. name, reason and addr may be NULL.
 * conn: a proxied connection (bytes and cut are sent), else a DNS query. */
struct decision {
	const char *id;
	const char *via; /* "tls", "http", "dns" */
	const char *name;
	unsigned port;
	bool allowed;
	const char *reason;
	const char *addr;
	const char *refused; /* for the log: an address the name resolved to, never dialled */
	/* for the log: what the guest asked for when it was no name (name is NULL then), raw
	 * bytes, quoted when logged */
	const char *raw_name;
	size_t raw_len;
	bool conn;
	uint64_t bytes_out, bytes_in;
	bool cut;
};

/* Queues the decision for sandboxd (dropped and counted when the queue is full) and logs
 * denials (rate-limited). Never blocks on sandboxd. Safe from any thread, with or without
 * w->lock held. */
void worker_decision(struct worker *w, const struct decision *d);

/* proxy.c: starts the threads that accept connections on the listening socket lfd (made
 * blocking; owned from now on) and run them, one at a time each. A connection from an address
 * no sandbox has is closed at once; one over the caps is refused with a decision. w->max_conns
 * must be set. 0 or -errno (logged). */
int proxy_start(struct worker *w, int lfd);

/* stub.c: starts the DNS stub's thread on the bound UDP socket fd (owned from now on). */
int stub_start(struct worker *w, int fd);

/* Whether the proxy refuses to dial this address whatever the name (worker.h: loopback,
 * unspecified, private, link-local, CGNAT, multicast, broadcast, reserved, the other ranges
 * that are not globally reachable (192.0.0/24, 198.18/15, 100::/64), and the IPv4-mapped,
 * IPv4-compatible, NAT64, 6to4 and Teredo forms of those). The host's own addresses, and
 * whatever its routes deliver locally, are checked apart, since they change. */
bool proxy_addr_refused(const struct sockaddr *sa);
