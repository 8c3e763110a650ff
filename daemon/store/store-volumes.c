/* store-volumes.c: the statements on the volumes table; see store-volumes.h. */
#include <errno.h>
#include "store-internal.h"
#include "store-volumes.h"
#include "util.h"

#define SELECT_VOLUME "SELECT id, owner, name, size_mb, created_at FROM volumes "

int
store_volume_insert(struct store *s, const struct store_volume *v)
{
	sqlite3_stmt *st;
	int rc;

	if (sqlite3_prepare_v2(store_db(s),
	                       "INSERT INTO volumes (id, owner, name, size_mb, created_at) "
	                       "VALUES (?1, ?2, ?3, ?4, ?5)",
	                       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(st, 1, v->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, v->owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, v->name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, (sqlite3_int64)v->size_mb);
	sqlite3_bind_int64(st, 5, v->created_at);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_CONSTRAINT_PRIMARYKEY)
		return -EADDRINUSE;
	if (rc == SQLITE_CONSTRAINT_UNIQUE)
		return -EEXIST;
	return rc == SQLITE_DONE ? 0 : -EIO;
}

/* Steps st (bound), calling fn for each row; finalizes it. */
static int
each_volume(sqlite3_stmt *st, int (*fn)(const struct store_volume *v, void *data), void *data)
{
	int rc, r = 0;

	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_volume v = {
			.id = (const char *)sqlite3_column_text(st, 0),
			.owner = (const char *)sqlite3_column_text(st, 1),
			.name = (const char *)sqlite3_column_text(st, 2),
			.size_mb = (uint64_t)sqlite3_column_int64(st, 3),
			.created_at = sqlite3_column_int64(st, 4),
		};
		if (!v.id || !v.owner || !v.name)
			continue;
		r = fn(&v, data);
		if (r < 0)
			break;
	}
	if (r == 0 && rc != SQLITE_DONE)
		r = -EIO;
	sqlite3_finalize(st);
	return r;
}

struct found {
	int (*fn)(const struct store_volume *v, void *data);
	void *data;
	bool found;
};

static int
found_one(const struct store_volume *v, void *data)
{
	struct found *f = data;

	f->found = true;
	return f->fn(v, f->data);
}

int
store_volume_get(struct store *s, const char *owner, const char *name,
                 int (*fn)(const struct store_volume *v, void *data), void *data)
{
	struct found f = { .fn = fn, .data = data };
	sqlite3_stmt *st;
	int r;

	if (sqlite3_prepare_v2(store_db(s), SELECT_VOLUME "WHERE owner = ?1 AND name = ?2", -1, &st,
	                       NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	r = each_volume(st, found_one, &f);
	return r < 0 ? r : f.found ? r : -ENOENT;
}

int
store_volume_list(struct store *s, const char *owner,
                  int (*fn)(const struct store_volume *v, void *data), void *data)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(store_db(s),
	                       SELECT_VOLUME "WHERE ?1 IS NULL OR owner = ?1 ORDER BY created_at, "
	                                     "rowid",
	                       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	if (owner)
		sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 1);
	return each_volume(st, fn, data);
}

int
store_volume_delete(struct store *s, const char *id)
{
	sqlite3_stmt *st;
	int rc;

	if (sqlite3_prepare_v2(store_db(s), "DELETE FROM volumes WHERE id = ?1", -1, &st, NULL) !=
	    SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return -EIO;
	return sqlite3_changes(store_db(s)) == 1 ? 0 : -ENOENT;
}
