/* sandboxd.h: the daemon's one context object. main() builds it, the event loop drives it,
 * and every module reaches the others through it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include "backend.h"
#include "buf.h"
#include "list.h"
#include "loop.h"
#include "node.h"
#include "options.h"
#include "policy.h"
#include "preview.h"
#include "reconcile.h"
#include "sandbox.h"

struct accounts;
struct audit_log;
struct egress;
struct images;
struct pools;
struct server;
struct store;

struct sandboxd {
	struct loop *loop;
	const struct options *opts;
	struct policy policy;
	struct store *store;
	struct audit_log *audit;   /* audit.h: the JSONL audit log; NULL with --audit-log none */
	struct accounts *accounts; /* accounts.c: the hashing pool, the login limiters */
	struct backend *backend;   /* NULL when this build has none */
	struct images *images;     /* images.c */
	struct egress *egress;     /* egress.c; NULL while egress is off */
	struct node node;          /* node.h: capacity, labels, the cordon, create counts */
	struct pools *pools;       /* pools.h: the policy's pools' state */
	struct registry reg;
	struct registry ended; /* terminated, until --forget-after (ended.h) */
	struct server *server;
	/* --preview-listen: the preview listener (its own server: it knows no API route), or
	 * NULL when previews are off; the key their tokens are made with (preview.h) */
	struct server *preview_server;
	uint8_t preview_key[PREVIEW_KEY_LEN];
	struct list_node subscribers;  /* struct event_sub: live event streams */
	struct list_node create_waits; /* creates waiting for their image (api-sandboxes.c) */
	struct buf list_cache;         /* GET /v1/sandboxes for an admin, unfiltered */
	uint64_t list_cache_gen;       /* sandbox_generation() it was built at */
	bool list_cache_valid;
	struct loop_timer housekeeping;
	struct reconcile reconcile; /* reconcile.c */
	/* SIGTERM without --keep-sandboxes: every sandbox is being ended, and the loop quits
	 * once none is left (or at the deadline, unix ms) */
	bool shutting_down;
	int64_t shutdown_deadline;
	struct loop_signals signals;
	char *token; /* the operator token, or NULL (unix socket peers only) */
	size_t token_len;
	uid_t uid; /* who runs sandboxd: unix-socket peers with this uid (or root) are the
	            * operator */
	char host_cpus_str[8];
};

extern const char sandboxd_version[];
