/* store.c: SQLite persistence for sandboxes and their events; see store.h. */
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include "log.h"
#include "store-internal.h"
#include "store.h"
#include "util.h"

#define STORE_CACHED_MAX 8

struct store {
	sqlite3 *db;
	sqlite3_stmt *insert_sb, *update_sb, *add_event;
	struct {
		const char *sql; /* the key, by address */
		sqlite3_stmt *st;
	} cached[STORE_CACHED_MAX]; /* store_stmt()'s */
	unsigned ncached;
};

/* Migrations, applied in order; entry i moves the schema from version i to i + 1. Never edit
 * one that has shipped: add a new one. */
static const char *const migrations[] = {
	/* 0 -> 1: the first schema */
	"CREATE TABLE sandboxes ("
	"  id TEXT PRIMARY KEY,"
	"  name TEXT,"
	"  owner TEXT NOT NULL,"
	"  state TEXT NOT NULL,"
	"  reason TEXT,"
	"  image TEXT NOT NULL,"
	"  backend TEXT NOT NULL,"
	"  runtime_ref TEXT,"
	"  spec TEXT NOT NULL,"
	"  created_at INTEGER NOT NULL,"
	"  updated_at INTEGER NOT NULL"
	") STRICT;"
	"CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(owner, name)"
	"  WHERE name IS NOT NULL AND state != 'terminated';"
	"CREATE INDEX sandboxes_state ON sandboxes(state);"
	"CREATE TABLE events ("
	"  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
	"  sandbox_id TEXT NOT NULL,"
	"  time INTEGER NOT NULL,"
	"  type TEXT NOT NULL,"
	"  data TEXT NOT NULL"
	") STRICT;"
	"CREATE INDEX events_by_sandbox ON events(sandbox_id, seq);",
	/* 1 -> 2: accounts (accounts.c): users, their dashboard sessions and API keys. Secrets
	 * are kept as SHA-256 only, passwords as Argon2id strings; a NULL cap is the server's
	 * default. */
	"CREATE TABLE users ("
	"  id TEXT PRIMARY KEY,"
	"  email TEXT NOT NULL UNIQUE,"
	"  role TEXT NOT NULL CHECK (role IN ('admin', 'user')),"
	"  password_hash TEXT NOT NULL,"
	"  disabled INTEGER NOT NULL DEFAULT 0,"
	"  created_at INTEGER NOT NULL,"
	"  max_sandboxes INTEGER,"
	"  max_cpus INTEGER,"
	"  max_memory_mb INTEGER"
	") STRICT;"
	"CREATE TABLE sessions ("
	"  id TEXT PRIMARY KEY,"
	"  user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
	"  secret_sha256 BLOB NOT NULL,"
	"  csrf_token TEXT NOT NULL,"
	"  created_at INTEGER NOT NULL,"
	"  expires_at INTEGER NOT NULL"
	") STRICT;"
	"CREATE INDEX sessions_by_user ON sessions(user_id);"
	"CREATE TABLE api_keys ("
	"  id TEXT PRIMARY KEY,"
	"  user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
	"  name TEXT NOT NULL,"
	"  prefix TEXT NOT NULL,"
	"  secret_sha256 BLOB NOT NULL,"
	"  created_at INTEGER NOT NULL,"
	"  last_used_at INTEGER"
	") STRICT;"
	"CREATE INDEX api_keys_by_user ON api_keys(user_id);",
	/* 2 -> 3: each event's audit record (core/audit.c: the same text as the audit log's
	 * line), NULL when the event has none; a sandbox's audit trail reads only those. Events
	 * from before keep NULL: their records were never made. */
	"ALTER TABLE events ADD COLUMN audit TEXT;"
	"CREATE INDEX events_audit ON events(sandbox_id, seq) WHERE audit IS NOT NULL;",
	/* 3 -> 4: volumes (core/volumes.c, store-volumes.c): they outlive the sandboxes they
	 * are attached to; a name is unique per owner. */
	"CREATE TABLE volumes ("
	"  id TEXT PRIMARY KEY,"
	"  owner TEXT NOT NULL,"
	"  name TEXT NOT NULL,"
	"  size_mb INTEGER NOT NULL,"
	"  created_at INTEGER NOT NULL,"
	"  UNIQUE (owner, name)"
	") STRICT;",
};

int
store_schema_version(void)
{
	return (int)ARRAY_SIZE(migrations);
}

static int
exec_sql(struct store *s, const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(s->db, sql, NULL, NULL, &err) != SQLITE_OK) {
		log_error("store: '%.60s...' failed: %s", sql, err ? err : "?");
		sqlite3_free(err);
		return -EIO;
	}
	return 0;
}

static int
get_user_version(struct store *s, int *ret)
{
	sqlite3_stmt *st;
	int r = -EIO;

	if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	if (sqlite3_step(st) == SQLITE_ROW) {
		*ret = sqlite3_column_int(st, 0);
		r = 0;
	}
	sqlite3_finalize(st);
	return r;
}

static int
migrate(struct store *s, const char *path)
{
	int version, r;

	r = get_user_version(s, &version);
	if (r < 0)
		return r;
	if (version > store_schema_version()) {
		log_error("store '%s': schema version %d is newer than this sandboxd (%d); "
		          "run the newer sandboxd or restore a backup",
		          path, version, store_schema_version());
		return -EPROTO;
	}
	for (int v = version; v < store_schema_version(); v++) {
		char pragma[64];

		if (exec_sql(s, "BEGIN IMMEDIATE") < 0)
			return -EIO;
		snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", v + 1);
		if (exec_sql(s, migrations[v]) < 0 || exec_sql(s, pragma) < 0) {
			store_rollback(s);
			return -EIO;
		}
		if (exec_sql(s, "COMMIT") < 0)
			return -EIO;
		log_debug("store '%s': migrated schema %d -> %d", path, v, v + 1);
	}
	return 0;
}

static int
prepare(struct store *s, sqlite3_stmt **st, const char *sql)
{
	if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK) {
		log_error("store: preparing '%.60s' failed: %s", sql, sqlite3_errmsg(s->db));
		return -EIO;
	}
	return 0;
}

int
store_open(const char *path, struct store **ret)
{
	_cleanup_(store_freep) struct store *s = calloc(1, sizeof(*s));
	int fd, r;

	if (!s)
		return -ENOMEM;
	/* create it 0600 before SQLite does, so it is never readable by others */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return negative_errno();
	close(fd);
	if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		log_error("store '%s': cannot open: %s", path,
		          s->db ? sqlite3_errmsg(s->db) : "out of memory");
		return -EIO;
	}
	sqlite3_extended_result_codes(s->db, 1);
	sqlite3_db_config(s->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	sqlite3_db_config(s->db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
	sqlite3_db_config(s->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
	sqlite3_db_config(s->db, SQLITE_DBCONFIG_DQS_DML, 0, NULL);
	sqlite3_db_config(s->db, SQLITE_DBCONFIG_DQS_DDL, 0, NULL);
	sqlite3_busy_timeout(s->db, 5000);
	/* WAL with synchronous=NORMAL: a commit survives a crash of this process (kill -9); only
	 * a power loss can drop the last transactions. Set explicitly: Debian defaults to FULL. */
	r = exec_sql(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
	                "PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;"
	                "PRAGMA journal_size_limit=67108864;");
	if (r < 0)
		return r;
	r = migrate(s, path);
	if (r < 0)
		return r;
	if (prepare(s, &s->insert_sb,
	            "INSERT INTO sandboxes (id, name, owner, state, reason, image, backend, "
	            "runtime_ref, spec, created_at, updated_at) "
	            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)") < 0 ||
	    prepare(s, &s->update_sb,
	            "UPDATE sandboxes SET name = ?2, owner = ?3, state = ?4, reason = ?5, "
	            "image = ?6, backend = ?7, runtime_ref = ?8, spec = ?9, created_at = ?10, "
	            "updated_at = ?11 WHERE id = ?1") < 0 ||
	    prepare(s, &s->add_event,
	            "INSERT INTO events (sandbox_id, time, type, data, audit) "
	            "VALUES (?1, ?2, ?3, ?4, ?5)") < 0)
		return -EIO;
	*ret = TAKE_PTR(s);
	return 0;
}

struct store *
store_free(struct store *s)
{
	if (!s)
		return NULL;
	sqlite3_finalize(s->insert_sb);
	sqlite3_finalize(s->update_sb);
	sqlite3_finalize(s->add_event);
	for (unsigned i = 0; i < s->ncached; i++)
		sqlite3_finalize(s->cached[i].st);
	if (s->db) {
		(void)sqlite3_exec(s->db, "PRAGMA optimize; PRAGMA wal_checkpoint(TRUNCATE);", NULL,
		                   NULL, NULL);
		sqlite3_close(s->db);
	}
	free(s);
	return NULL;
}

sqlite3 *
store_db(struct store *s)
{
	return s->db;
}

bool
store_busy(struct store *s)
{
	for (sqlite3_stmt *st = sqlite3_next_stmt(s->db, NULL); st;
	     st = sqlite3_next_stmt(s->db, st))
		if (sqlite3_stmt_busy(st))
			return true;
	return false;
}

int
store_stmt(struct store *s, const char *sql, sqlite3_stmt **ret)
{
	unsigned i;

	for (i = 0; i < s->ncached; i++)
		if (s->cached[i].sql == sql) {
			*ret = s->cached[i].st;
			return 0;
		}
	if (s->ncached == STORE_CACHED_MAX) {
		log_error("store: more than %d cached statements; raise STORE_CACHED_MAX",
		          STORE_CACHED_MAX);
		return -EIO;
	}
	if (prepare(s, &s->cached[i].st, sql) < 0)
		return -EIO;
	s->cached[i].sql = sql;
	s->ncached++;
	*ret = s->cached[i].st;
	return 0;
}

int
store_begin(struct store *s)
{
	return exec_sql(s, "BEGIN IMMEDIATE");
}

int
store_commit(struct store *s)
{
	return exec_sql(s, "COMMIT");
}

void
store_rollback(struct store *s)
{
	if (!sqlite3_get_autocommit(s->db))
		(void)sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

static void
bind_text_or_null(sqlite3_stmt *st, int i, const char *v)
{
	if (v)
		sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, i);
}

static int
write_row(struct store *s, sqlite3_stmt *st, const struct store_sandbox *row)
{
	int rc;

	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, row->id, -1, SQLITE_TRANSIENT);
	bind_text_or_null(st, 2, row->name);
	sqlite3_bind_text(st, 3, row->owner, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 4, row->state, -1, SQLITE_TRANSIENT);
	bind_text_or_null(st, 5, row->reason);
	sqlite3_bind_text(st, 6, row->image, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 7, row->backend, -1, SQLITE_TRANSIENT);
	bind_text_or_null(st, 8, row->runtime_ref);
	sqlite3_bind_text(st, 9, row->spec, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 10, row->created_at);
	sqlite3_bind_int64(st, 11, row->updated_at);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
		return -EEXIST;
	if (rc != SQLITE_DONE) {
		log_error("store: writing sandbox '%s' failed: %s", row->id, sqlite3_errmsg(s->db));
		return -EIO;
	}
	return 0;
}

int
store_insert_sandbox(struct store *s, const struct store_sandbox *row)
{
	return write_row(s, s->insert_sb, row);
}

int
store_update_sandbox(struct store *s, const struct store_sandbox *row)
{
	int r = write_row(s, s->update_sb, row);

	if (r == 0 && sqlite3_changes(s->db) != 1)
		return -ENOENT;
	return r;
}

static const char *
column_text(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

static struct store_sandbox
row_of(sqlite3_stmt *st)
{
	return (struct store_sandbox){
		.id = column_text(st, 0),
		.name = column_text(st, 1),
		.owner = column_text(st, 2),
		.state = column_text(st, 3),
		.reason = column_text(st, 4),
		.image = column_text(st, 5),
		.backend = column_text(st, 6),
		.runtime_ref = column_text(st, 7),
		.spec = column_text(st, 8),
		.created_at = sqlite3_column_int64(st, 9),
		.updated_at = sqlite3_column_int64(st, 10),
	};
}

#define SELECT_SANDBOX                                                                             \
	"SELECT id, name, owner, state, reason, image, backend, runtime_ref, spec, created_at, "   \
	"updated_at FROM sandboxes "

static int
load_rows(struct store *s, const char *sql, int (*fn)(const struct store_sandbox *row, void *data),
          void *data)
{
	sqlite3_stmt *st;
	int rc, r = 0;

	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_sandbox row = row_of(st);
		r = fn(&row, data);
		if (r < 0)
			break;
	}
	if (r == 0 && rc != SQLITE_DONE)
		r = -EIO;
	sqlite3_finalize(st);
	return r;
}

int
store_load_live(struct store *s, int (*fn)(const struct store_sandbox *row, void *data), void *data)
{
	return load_rows(s, SELECT_SANDBOX "WHERE state != 'terminated' ORDER BY created_at, rowid",
	                 fn, data);
}

int
store_load_ended(struct store *s, int (*fn)(const struct store_sandbox *row, void *data),
                 void *data)
{
	return load_rows(s, SELECT_SANDBOX "WHERE state = 'terminated' ORDER BY created_at, rowid",
	                 fn, data);
}

int
store_forget_ended(struct store *s, int64_t before_ms)
{
	static const char *const sql[] = {
		"DELETE FROM events WHERE sandbox_id IN (SELECT id FROM sandboxes WHERE state = "
		"'terminated' AND updated_at < ?1)",
		"DELETE FROM sandboxes WHERE state = 'terminated' AND updated_at < ?1",
	};
	int r, forgotten = 0;

	r = store_begin(s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(sql); i++) {
		sqlite3_stmt *st;
		int rc;

		if (sqlite3_prepare_v2(s->db, sql[i], -1, &st, NULL) != SQLITE_OK) {
			store_rollback(s);
			return -EIO;
		}
		sqlite3_bind_int64(st, 1, before_ms);
		rc = sqlite3_step(st);
		sqlite3_finalize(st);
		if (rc != SQLITE_DONE) {
			log_error("store: forgetting ended sandboxes failed: %s",
			          sqlite3_errmsg(s->db));
			store_rollback(s);
			return -EIO;
		}
		forgotten = sqlite3_changes(s->db);
	}
	r = store_commit(s);
	return r < 0 ? r : forgotten;
}

int
store_load(struct store *s, const char *id, int (*fn)(const struct store_sandbox *row, void *data),
           void *data)
{
	sqlite3_stmt *st;
	int rc, r;

	if (sqlite3_prepare_v2(s->db, SELECT_SANDBOX "WHERE id = ?1", -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		struct store_sandbox row = row_of(st);
		r = fn(&row, data);
	} else {
		r = rc == SQLITE_DONE ? -ENOENT : -EIO;
	}
	sqlite3_finalize(st);
	return r;
}

int
store_disown_ended(struct store *s, const char *owner, const char *new_owner)
{
	sqlite3_stmt *st;
	int rc;

	if (sqlite3_prepare_v2(s->db,
	                       "UPDATE sandboxes SET owner = ?2 WHERE owner = ?1 AND state = "
	                       "'terminated'",
	                       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, new_owner, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? sqlite3_changes(s->db) : -EIO;
}

int
store_add_event(struct store *s, const char *sandbox_id, int64_t time_ms, const char *type,
                const json_t *data, const char *audit, int64_t *ret_seq)
{
	_cleanup_free_ char *text = json_dumps(data, JSON_COMPACT);
	sqlite3_stmt *st = s->add_event;
	bool nested = !sqlite3_get_autocommit(s->db); /* in the row's transaction */
	int rc;

	if (!text)
		return -ENOMEM;
	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, time_ms);
	sqlite3_bind_text(st, 3, type, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 4, text, -1, SQLITE_TRANSIENT);
	bind_text_or_null(st, 5, audit);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc != SQLITE_DONE) {
		log_error("store: adding a '%s' event for '%s' failed: %s", type, sandbox_id,
		          sqlite3_errmsg(s->db));
		/* a failed statement is undone by itself; some errors (a full disk, I/O) end the
		 * whole transaction, the row's with it */
		return nested && sqlite3_get_autocommit(s->db) ? -ECANCELED : -EIO;
	}
	if (ret_seq)
		*ret_seq = sqlite3_last_insert_rowid(s->db);
	return 0;
}

static int
each_event(sqlite3_stmt *st, int (*fn)(const struct store_event *e, void *data), void *data)
{
	int rc, r = 0;

	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_event e = {
			.seq = sqlite3_column_int64(st, 0),
			.time_ms = sqlite3_column_int64(st, 1),
			.sandbox_id = (const char *)sqlite3_column_text(st, 2),
			.type = (const char *)sqlite3_column_text(st, 3),
			.data = (const char *)sqlite3_column_text(st, 4),
			.audit = (const char *)sqlite3_column_text(st, 5),
		};
		if (!e.sandbox_id || !e.type || !e.data)
			continue;
		r = fn(&e, data);
		if (r < 0)
			return r;
	}
	return rc == SQLITE_DONE ? 0 : -EIO;
}

int
store_list_audit(struct store *s, const char *sandbox_id, unsigned limit,
                 int (*fn)(const char *record, void *data), void *data, bool *ret_truncated)
{
	sqlite3_stmt *st;
	int64_t total = 0;
	int rc, r = 0;

	if (sqlite3_prepare_v2(s->db,
	                       "SELECT COUNT(*) FROM events WHERE sandbox_id = ?1 AND audit IS NOT "
	                       "NULL",
	                       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW)
		total = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);

	/* the newest `limit` records, returned oldest first */
	if (sqlite3_prepare_v2(s->db,
	                       "SELECT audit FROM (SELECT seq, audit FROM events"
	                       " WHERE sandbox_id = ?1 AND audit IS NOT NULL ORDER BY seq DESC"
	                       " LIMIT ?2) ORDER BY seq",
	                       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *text = (const char *)sqlite3_column_text(st, 0);
		if (text && (r = fn(text, data)) < 0)
			break;
	}
	if (r == 0 && rc != SQLITE_DONE)
		r = -EIO;
	sqlite3_finalize(st);
	if (r == 0 && ret_truncated)
		*ret_truncated = total > (int64_t)limit;
	return r;
}

int
store_events_since(struct store *s, int64_t after, const char *owner, const char *sandbox_id,
                   unsigned limit, int (*fn)(const struct store_event *e, void *data), void *data)
{
	sqlite3_stmt *st;
	int r;

	if (sqlite3_prepare_v2(s->db,
	                       "SELECT e.seq, e.time, e.sandbox_id, e.type, e.data, e.audit "
	                       "FROM events e JOIN sandboxes s ON s.id = e.sandbox_id "
	                       "WHERE e.seq > ?1 AND (?3 IS NULL OR s.owner = ?3) "
	                       "AND (?4 IS NULL OR e.sandbox_id = ?4) "
	                       "ORDER BY e.seq LIMIT ?2",
	                       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(st, 1, after);
	sqlite3_bind_int64(st, 2, limit);
	bind_text_or_null(st, 3, owner);
	bind_text_or_null(st, 4, sandbox_id);
	r = each_event(st, fn, data);
	sqlite3_finalize(st);
	return r;
}

int
store_prune_events(struct store *s, uint64_t keep)
{
	sqlite3_stmt *st;
	int rc;

	/* seq grows by one per event and only the oldest go, so this leaves at most `keep` */
	if (sqlite3_prepare_v2(s->db,
	                       "DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - ?1",
	                       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)MIN(keep, (uint64_t)INT64_MAX));
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		log_error("store: pruning the oldest events failed: %s", sqlite3_errmsg(s->db));
		return -EIO;
	}
	return sqlite3_changes(s->db);
}

int64_t
store_last_event_seq(struct store *s)
{
	sqlite3_stmt *st;
	int64_t seq = 0;

	if (sqlite3_prepare_v2(s->db, "SELECT COALESCE(MAX(seq), 0) FROM events", -1, &st, NULL) !=
	    SQLITE_OK)
		return 0;
	if (sqlite3_step(st) == SQLITE_ROW)
		seq = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return seq;
}
