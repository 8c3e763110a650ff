/* store.h: the record of truth, in SQLite (WAL) in the state directory: one row per sandbox
 * plus its events, and the accounts' tables (store-accounts.h). In-memory sandboxes are a
 * cache of these rows, built by the core from what this returns: plain rows, never objects.
 * Every SQL statement of sandboxd is in this folder. Schema changes are migrations numbered
 * from the first version (PRAGMA user_version).
 *
 * Every write is committed before the caller tells a client it succeeded; with WAL and
 * synchronous=NORMAL a committed transaction survives the process being killed. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "macro.h"

struct store;

/* Opens (creating 0600) and migrates the database at path. -errno, or -EPROTO with the
 * message logged when the file is from a newer version. */
int store_open(const char *path, struct store **ret);
struct store *store_free(struct store *s);
DEFINE_FREEP(struct store, store_free)

/* Whether a statement of the connection is still mid-read: one left so would hold its WAL
 * snapshot and hide what other connections commit. For tests; always false unless a bug. */
bool store_busy(struct store *s);

/* The schema version this build writes. */
int store_schema_version(void);

int store_begin(struct store *s);
int store_commit(struct store *s);
void store_rollback(struct store *s);

/* One sandbox row. Text columns are NULL where the row has NULL; state is the lifecycle
 * state's name and spec the JSON text of what the sandbox was asked to be. A row handed to a
 * callback is valid only during the call. */
struct store_sandbox {
	const char *id;
	const char *name;
	const char *owner;
	const char *state;
	const char *reason;
	const char *image;
	const char *backend;
	const char *runtime_ref;
	const char *spec;
	int64_t created_at; /* unix ms */
	int64_t updated_at;
};

/* -EEXIST when the id, or the owner's live name, is taken. */
int store_insert_sandbox(struct store *s, const struct store_sandbox *row);
/* Writes every column of the row with row->id. -ENOENT. */
int store_update_sandbox(struct store *s, const struct store_sandbox *row);

/* Calls fn for each sandbox row not terminated, oldest first; a negative return stops and
 * is returned. */
int store_load_live(struct store *s, int (*fn)(const struct store_sandbox *row, void *data),
                    void *data);
/* Calls fn for each terminated sandbox row, oldest first (by created_at); a negative return
 * stops and is returned. */
int store_load_ended(struct store *s, int (*fn)(const struct store_sandbox *row, void *data),
                     void *data);
/* Forgets the terminated sandboxes that ended (updated_at) before before_ms: their rows and
 * their events, in one transaction. The number of sandboxes forgotten, or -EIO. */
int store_forget_ended(struct store *s, int64_t before_ms);
/* Calls fn with the row of id (terminated included) and returns what it returns. -ENOENT. */
int store_load(struct store *s, const char *id,
               int (*fn)(const struct store_sandbox *row, void *data), void *data);
/* Gives the ended sandboxes of owner to new_owner (a user's deletion: the name of no one).
 * The number of rows changed, or -EIO. */
int store_disown_ended(struct store *s, const char *owner, const char *new_owner);

/* Appends an event; data is a JSON object (borrowed), audit its audit record's text or NULL.
 * Sets the new sequence number. Inside a transaction (store_begin) a failure leaves the rest
 * of it as it was and returns -EIO, or -ECANCELED when SQLite ended the whole transaction
 * (a full disk): then nothing of it was written. Failures are logged. */
int store_add_event(struct store *s, const char *sandbox_id, int64_t time_ms, const char *type,
                    const json_t *data, const char *audit, int64_t *ret_seq);

struct store_event {
	int64_t seq;
	int64_t time_ms;
	const char *sandbox_id;
	const char *type;
	const char *data;  /* JSON text */
	const char *audit; /* the audit record's text, or NULL */
};
/* Calls fn with the newest `limit` audit records of one sandbox, oldest first; *ret_truncated
 * tells whether older ones exist. */
int store_list_audit(struct store *s, const char *sandbox_id, unsigned limit,
                     int (*fn)(const char *record, void *data), void *data, bool *ret_truncated);
/* Calls fn for events with seq > after, oldest first, at most limit; owner (NULL: any)
 * limits them to that owner's sandboxes, sandbox_id (NULL: any) to that one sandbox's. */
int store_events_since(struct store *s, int64_t after, const char *owner, const char *sandbox_id,
                       unsigned limit, int (*fn)(const struct store_event *e, void *data),
                       void *data);
/* Deletes the oldest events past the newest `keep` (their audit records with them). The number
 * deleted, or -EIO (logged). */
int store_prune_events(struct store *s, uint64_t keep);
int64_t store_last_event_seq(struct store *s);
