/* store-accounts.h: the accounts' tables (users, their dashboard sessions and API keys): rows
 * in and rows out. What the rows mean (roles, caps, hashing, how many of each a user may
 * keep) is accounts.c's; this runs the statements and nothing else, and logs nothing.
 *
 * A row handed to a callback is valid only during the call; a callback's negative return
 * stops a listing and is returned. Errors: -ENOENT no such row (or, on an insert, no such
 * user), -EEXIST a unique value is taken, -EADDRINUSE a new row's id collided (draw another),
 * -EIO the database. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

/* A user row. A cap of -1 is NULL in the row: the server's default applies. */
struct store_user {
	const char *id;
	const char *email;
	const char *role; /* "admin" or "user" */
	bool disabled;
	int64_t created_at; /* unix ms */
	int64_t max_sandboxes, max_cpus, max_memory_mb;
	const char *password_hash;
};

/* Inserts id, email, role, password_hash and created_at; the caps start NULL. */
int store_user_insert(struct store *s, const struct store_user *u);
/* Calls fn with the user of that id, or that (normalised) email. -ENOENT. */
int store_user_get(struct store *s, const char *id,
                   int (*fn)(const struct store_user *u, void *data), void *data);
int store_user_get_by_email(struct store *s, const char *email,
                            int (*fn)(const struct store_user *u, void *data), void *data);
/* Calls fn for every user, oldest first. */
int store_user_list(struct store *s, int (*fn)(const struct store_user *u, void *data), void *data);
/* Writes u's role, disabled and caps to the row with u->id. -ENOENT. */
int store_user_update(struct store *s, const struct store_user *u);
int store_user_set_password(struct store *s, const char *id, const char *hash);
/* Deletes the user; their sessions and keys go with them. -ENOENT. */
int store_user_delete(struct store *s, const char *id);

/* A session row: the secret is kept as its SHA-256 only. */
struct store_session {
	const char *id;
	const char *user_id;
	const void *secret_sha256;
	size_t secret_sha256_len;
	const char *csrf_token;
	int64_t created_at; /* unix ms */
	int64_t expires_at;
};

int store_session_insert(struct store *s, const struct store_session *ses);
/* Deletes every session (any user's) expired at now_ms. */
int store_sessions_expire(struct store *s, int64_t now_ms);
/* Deletes the user's sessions but the newest `keep`. */
int store_sessions_trim(struct store *s, const char *user_id, unsigned keep);
/* Calls fn with the session of that id and its user. Runs on every request that carries a
 * cookie, so its statement stays prepared; its read ends before this returns. -ENOENT. */
int store_session_get(struct store *s, const char *id,
                      int (*fn)(const struct store_session *ses, const struct store_user *u,
                                void *data),
                      void *data);
/* -ENOENT. */
int store_session_delete(struct store *s, const char *id);
/* Deletes every session of the user (none is no error). */
int store_sessions_delete_user(struct store *s, const char *user_id);

/* An API key row: the secret is kept as its SHA-256 only. */
struct store_key {
	const char *id;
	const char *user_id;
	const char *name;
	const char *prefix;
	const void *secret_sha256;
	size_t secret_sha256_len;
	int64_t created_at;   /* unix ms */
	int64_t last_used_at; /* 0: never */
};

/* How many keys the user has, or -EIO. */
int64_t store_key_count(struct store *s, const char *user_id);
/* Inserts id, user_id, name, prefix, the secret's SHA-256 and created_at. */
int store_key_insert(struct store *s, const struct store_key *k);
/* Calls fn with the key of that id and its user; kept prepared and ended like
 * store_session_get(). -ENOENT. */
int store_key_get(struct store *s, const char *id,
                  int (*fn)(const struct store_key *k, const struct store_user *u, void *data),
                  void *data);
/* Notes that the key was used at now_ms. */
int store_key_touch(struct store *s, const char *id, int64_t now_ms);
/* Calls fn for each of the user's keys, oldest first (no secret: secret_sha256 is NULL). */
int store_key_list(struct store *s, const char *user_id,
                   int (*fn)(const struct store_key *k, void *data), void *data);
/* -ENOENT when the user has no key of that id. */
int store_key_delete(struct store *s, const char *user_id, const char *id);
