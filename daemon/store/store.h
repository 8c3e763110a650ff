/* store.h: the record of truth, in SQLite (WAL) in the state directory: one row per sandbox
 * plus its events, and the accounts' tables (accounts.c). In-memory sandboxes are a cache of
 * these rows. Schema changes are migrations numbered from the first version (PRAGMA
 * user_version).
 *
 * Every write is committed before the caller tells a client it succeeded; with WAL and
 * synchronous=NORMAL a committed transaction survives the process being killed. */
#pragma once

#include <jansson.h>
#include <stdint.h>
#include "sandbox.h"

struct store;
typedef struct sqlite3 sqlite3;

/* Opens (creating 0600) and migrates the database at path. -errno, or -EPROTO with the
 * message logged when the file is from a newer version. */
int store_open(const char *path, struct store **ret);
struct store *store_free(struct store *s);
DEFINE_FREEP(struct store, store_free)

/* The connection, for modules that keep tables of their own here (accounts.c). Only the
 * loop's thread may use it. */
sqlite3 *store_db(struct store *s);

/* A statement for sql kept prepared across calls, for what runs on every request (accounts.c's
 * credential lookups): compiling SQL costs more than running it. sql is the cache's key by
 * address, so pass the same string literal each time. The caller binds, steps, and then
 * sqlite3_reset()s it (which ends its read), never finalizes it; store_free() does. -EIO,
 * logged, when it cannot be prepared. */
typedef struct sqlite3_stmt sqlite3_stmt;
int store_stmt(struct store *s, const char *sql, sqlite3_stmt **ret);

/* The schema version this build writes. */
int store_schema_version(void);

int store_begin(struct store *s);
int store_commit(struct store *s);
void store_rollback(struct store *s);

int store_insert_sandbox(struct store *s, const struct sandbox *sb);
/* Writes every column of the row from sb. */
int store_update_sandbox(struct store *s, const struct sandbox *sb);

/* Calls fn for each sandbox row not terminated, oldest first. fn takes ownership of sb. */
int store_load_live(struct store *s, int (*fn)(struct sandbox *sb, void *data), void *data);
/* Loads one row by id (terminated included). -ENOENT. */
int store_load(struct store *s, const char *id, struct sandbox **ret);

/* Appends an event; data is a JSON object (borrowed). Returns the new sequence number. */
int store_add_event(struct store *s, const char *sandbox_id, int64_t time_ms, const char *type,
                    const json_t *data, int64_t *ret_seq);

struct store_event {
	int64_t seq;
	int64_t time_ms;
	const char *sandbox_id;
	const char *type;
	const char *data; /* JSON text */
};
/* Calls fn for the newest `limit` events of one sandbox, oldest first; *ret_truncated tells
 * whether older ones exist. */
int store_list_events(struct store *s, const char *sandbox_id, unsigned limit,
                      int (*fn)(const struct store_event *e, void *data), void *data,
                      bool *ret_truncated);
/* Calls fn for events with seq > after, oldest first, at most limit; owner (NULL: any)
 * limits them to that owner's sandboxes. */
int store_events_since(struct store *s, int64_t after, const char *owner, unsigned limit,
                       int (*fn)(const struct store_event *e, void *data), void *data);
int64_t store_last_event_seq(struct store *s);
