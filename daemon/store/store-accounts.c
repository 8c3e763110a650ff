/* store-accounts.c: the statements on the users, sessions and api_keys tables; see
 * store-accounts.h. */
#include <errno.h>
#include "store-accounts.h"
#include "store-internal.h"
#include "util.h"

static int
prepare(struct store *s, const char *sql, sqlite3_stmt **ret)
{
	return sqlite3_prepare_v2(store_db(s), sql, -1, ret, NULL) == SQLITE_OK ? 0 : -EIO;
}

/* Runs a statement that returns no rows, then finalizes it; the number of rows it changed, or
 * -errno. */
static int
step_done(struct store *s, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_finalize(st);
	if (rc == SQLITE_CONSTRAINT_UNIQUE)
		return -EEXIST;
	if (rc == SQLITE_CONSTRAINT_PRIMARYKEY)
		return -EADDRINUSE; /* an id collided: the caller draws another */
	if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
		return -ENOENT;
	if (rc != SQLITE_DONE)
		return -EIO;
	return sqlite3_changes(store_db(s));
}

/* Runs sql with text parameters ?1 and, when b is not NULL, ?2; the rows changed or -errno. */
static int
exec_text(struct store *s, const char *sql, const char *a, const char *b)
{
	sqlite3_stmt *st;

	if (prepare(s, sql, &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
	if (b)
		sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
	return step_done(s, st);
}

/* For the statements that change one row: -ENOENT when none was there. */
static int
one_changed(int r)
{
	return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

static void
bind_cap(sqlite3_stmt *st, int i, int64_t v)
{
	if (v < 0)
		sqlite3_bind_null(st, i);
	else
		sqlite3_bind_int64(st, i, v);
}

static int64_t
column_cap(sqlite3_stmt *st, int i)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, i);
}

static const char *
column_text(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

/* ---- users ---- */

#define USER_COLUMNS                                                                               \
	"u.id, u.email, u.role, u.disabled, u.created_at, u.max_sandboxes, u.max_cpus, "           \
	"u.max_memory_mb, u.password_hash"

/* The user in USER_COLUMNS starting at column `at`. */
static struct store_user
user_at(sqlite3_stmt *st, int at)
{
	return (struct store_user){
		.id = column_text(st, at),
		.email = column_text(st, at + 1),
		.role = column_text(st, at + 2),
		.disabled = sqlite3_column_int(st, at + 3) != 0,
		.created_at = sqlite3_column_int64(st, at + 4),
		.max_sandboxes = column_cap(st, at + 5),
		.max_cpus = column_cap(st, at + 6),
		.max_memory_mb = column_cap(st, at + 7),
		.password_hash = column_text(st, at + 8),
	};
}

int
store_user_insert(struct store *s, const struct store_user *u)
{
	sqlite3_stmt *st;
	int r;

	if (prepare(s,
	            "INSERT INTO users (id, email, role, password_hash, created_at) "
	            "VALUES (?1, ?2, ?3, ?4, ?5)",
	            &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, u->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, u->email, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, u->role, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, u->password_hash, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, u->created_at);
	r = step_done(s, st);
	return r < 0 ? r : 0;
}

static int
get_user(struct store *s, const char *sql, const char *arg,
         int (*fn)(const struct store_user *u, void *data), void *data)
{
	sqlite3_stmt *st;
	int rc, r;

	if (prepare(s, sql, &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		struct store_user u = user_at(st, 0);
		r = fn(&u, data);
	} else {
		r = rc == SQLITE_DONE ? -ENOENT : -EIO;
	}
	sqlite3_finalize(st);
	return r;
}

int
store_user_get(struct store *s, const char *id, int (*fn)(const struct store_user *u, void *data),
               void *data)
{
	return get_user(s, "SELECT " USER_COLUMNS " FROM users u WHERE u.id = ?1", id, fn, data);
}

int
store_user_get_by_email(struct store *s, const char *email,
                        int (*fn)(const struct store_user *u, void *data), void *data)
{
	return get_user(s, "SELECT " USER_COLUMNS " FROM users u WHERE u.email = ?1", email, fn,
	                data);
}

int
store_user_list(struct store *s, int (*fn)(const struct store_user *u, void *data), void *data)
{
	sqlite3_stmt *st;
	int rc, r = 0;

	if (prepare(s, "SELECT " USER_COLUMNS " FROM users u ORDER BY u.created_at, u.rowid", &st) <
	    0)
		return -EIO;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_user u = user_at(st, 0);
		r = fn(&u, data);
		if (r < 0)
			break;
	}
	sqlite3_finalize(st);
	if (r == 0 && rc != SQLITE_DONE)
		r = -EIO;
	return r;
}

int
store_user_update(struct store *s, const struct store_user *u)
{
	sqlite3_stmt *st;

	if (prepare(s,
	            "UPDATE users SET role = ?2, disabled = ?3, max_sandboxes = ?4, max_cpus = ?5, "
	            "max_memory_mb = ?6 WHERE id = ?1",
	            &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, u->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, u->role, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 3, u->disabled);
	bind_cap(st, 4, u->max_sandboxes);
	bind_cap(st, 5, u->max_cpus);
	bind_cap(st, 6, u->max_memory_mb);
	return one_changed(step_done(s, st));
}

int
store_user_set_password(struct store *s, const char *id, const char *hash)
{
	return one_changed(
	        exec_text(s, "UPDATE users SET password_hash = ?2 WHERE id = ?1", id, hash));
}

int
store_user_delete(struct store *s, const char *id)
{
	/* the sessions and keys go with it (ON DELETE CASCADE) */
	return one_changed(exec_text(s, "DELETE FROM users WHERE id = ?1", id, NULL));
}

/* ---- sessions ---- */

int
store_session_insert(struct store *s, const struct store_session *ses)
{
	sqlite3_stmt *st;
	int r;

	if (prepare(s,
	            "INSERT INTO sessions (id, user_id, secret_sha256, csrf_token, created_at, "
	            "expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	            &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, ses->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, ses->user_id, -1, SQLITE_STATIC);
	sqlite3_bind_blob(st, 3, ses->secret_sha256, (int)ses->secret_sha256_len, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, ses->csrf_token, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, ses->created_at);
	sqlite3_bind_int64(st, 6, ses->expires_at);
	r = step_done(s, st);
	return r < 0 ? r : 0;
}

int
store_sessions_expire(struct store *s, int64_t now_ms)
{
	sqlite3_stmt *st;
	int r;

	if (prepare(s, "DELETE FROM sessions WHERE expires_at <= ?1", &st) < 0)
		return -EIO;
	sqlite3_bind_int64(st, 1, now_ms);
	r = step_done(s, st);
	return r < 0 ? r : 0;
}

int
store_sessions_trim(struct store *s, const char *user_id, unsigned keep)
{
	sqlite3_stmt *st;
	int r;

	if (prepare(s,
	            "DELETE FROM sessions WHERE user_id = ?1 AND id NOT IN (SELECT id FROM "
	            "sessions WHERE user_id = ?1 ORDER BY created_at DESC, rowid DESC LIMIT ?2)",
	            &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, user_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, keep);
	r = step_done(s, st);
	return r < 0 ? r : 0;
}

/* The credential lookups run on every request that carries one: their statements stay
 * prepared (store_stmt), and each read ends (sqlite3_reset) before the lookup returns, so no
 * snapshot outlives it and a change another connection commits counts at once. */
#define SESSION_GET_SQL                                                                            \
	"SELECT s.id, s.user_id, s.secret_sha256, s.csrf_token, s.created_at, "                    \
	"s.expires_at, " USER_COLUMNS                                                              \
	" FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.id = ?1"
#define KEY_GET_SQL                                                                                \
	"SELECT k.id, k.user_id, k.name, k.prefix, k.secret_sha256, k.created_at, "                \
	"k.last_used_at, " USER_COLUMNS                                                            \
	" FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.id = ?1"

/* Steps the cached statement st, bound to id; -ENOENT, -EIO, or 1 on a row (read it, then
 * sqlite3_reset() it). */
static int
cached_row(sqlite3_stmt *st, const char *id)
{
	int rc;

	sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		return 1;
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? -ENOENT : -EIO;
}

int
store_session_get(struct store *s, const char *id,
                  int (*fn)(const struct store_session *ses, const struct store_user *u,
                            void *data),
                  void *data)
{
	sqlite3_stmt *st;
	int r;

	if (store_stmt(s, SESSION_GET_SQL, &st) < 0)
		return -EIO;
	r = cached_row(st, id);
	if (r < 0)
		return r;
	{
		struct store_session ses = {
			.id = column_text(st, 0),
			.user_id = column_text(st, 1),
			.secret_sha256 = sqlite3_column_blob(st, 2),
			.secret_sha256_len = (size_t)sqlite3_column_bytes(st, 2),
			.csrf_token = column_text(st, 3),
			.created_at = sqlite3_column_int64(st, 4),
			.expires_at = sqlite3_column_int64(st, 5),
		};
		struct store_user u = user_at(st, 6);
		r = fn(&ses, &u, data);
	}
	sqlite3_reset(st);
	return r;
}

int
store_session_delete(struct store *s, const char *id)
{
	return one_changed(exec_text(s, "DELETE FROM sessions WHERE id = ?1", id, NULL));
}

int
store_sessions_delete_user(struct store *s, const char *user_id)
{
	int r = exec_text(s, "DELETE FROM sessions WHERE user_id = ?1", user_id, NULL);

	return r < 0 ? r : 0;
}

/* ---- API keys ---- */

int64_t
store_key_count(struct store *s, const char *user_id)
{
	sqlite3_stmt *st;
	int64_t n = -EIO;

	if (prepare(s, "SELECT COUNT(*) FROM api_keys WHERE user_id = ?1", &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, user_id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

int
store_key_insert(struct store *s, const struct store_key *k)
{
	sqlite3_stmt *st;
	int r;

	if (prepare(s,
	            "INSERT INTO api_keys (id, user_id, name, prefix, secret_sha256, "
	            "created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	            &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, k->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, k->user_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, k->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, k->prefix, -1, SQLITE_STATIC);
	sqlite3_bind_blob(st, 5, k->secret_sha256, (int)k->secret_sha256_len, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, k->created_at);
	r = step_done(s, st);
	return r < 0 ? r : 0;
}

int
store_key_get(struct store *s, const char *id,
              int (*fn)(const struct store_key *k, const struct store_user *u, void *data),
              void *data)
{
	sqlite3_stmt *st;
	int r;

	if (store_stmt(s, KEY_GET_SQL, &st) < 0)
		return -EIO;
	r = cached_row(st, id);
	if (r < 0)
		return r;
	{
		struct store_key k = {
			.id = column_text(st, 0),
			.user_id = column_text(st, 1),
			.name = column_text(st, 2),
			.prefix = column_text(st, 3),
			.secret_sha256 = sqlite3_column_blob(st, 4),
			.secret_sha256_len = (size_t)sqlite3_column_bytes(st, 4),
			.created_at = sqlite3_column_int64(st, 5),
			.last_used_at = sqlite3_column_int64(st, 6),
		};
		struct store_user u = user_at(st, 7);
		r = fn(&k, &u, data);
	}
	sqlite3_reset(st);
	return r;
}

int
store_key_touch(struct store *s, const char *id, int64_t now_ms)
{
	sqlite3_stmt *st;
	int r;

	if (prepare(s, "UPDATE api_keys SET last_used_at = ?2 WHERE id = ?1", &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, now_ms);
	r = step_done(s, st);
	return r < 0 ? r : 0;
}

int
store_key_list(struct store *s, const char *user_id,
               int (*fn)(const struct store_key *k, void *data), void *data)
{
	sqlite3_stmt *st;
	int rc, r = 0;

	if (prepare(s,
	            "SELECT id, name, prefix, created_at, last_used_at FROM api_keys "
	            "WHERE user_id = ?1 ORDER BY created_at, rowid",
	            &st) < 0)
		return -EIO;
	sqlite3_bind_text(st, 1, user_id, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_key k = {
			.id = column_text(st, 0),
			.user_id = user_id,
			.name = column_text(st, 1),
			.prefix = column_text(st, 2),
			.created_at = sqlite3_column_int64(st, 3),
			.last_used_at = sqlite3_column_int64(st, 4),
		};
		r = fn(&k, data);
		if (r < 0)
			break;
	}
	sqlite3_finalize(st);
	if (r == 0 && rc != SQLITE_DONE)
		r = -EIO;
	return r;
}

int
store_key_delete(struct store *s, const char *user_id, const char *id)
{
	return one_changed(
	        exec_text(s, "DELETE FROM api_keys WHERE id = ?1 AND user_id = ?2", id, user_id));
}
