/* store-internal.h: what the store's files share (the connection, the cache of prepared
 * statements); nothing outside daemon/store/ includes it. */
#pragma once

#include <sqlite3.h>

struct store;

/* The connection. Only the loop's thread may use it. */
sqlite3 *store_db(struct store *s);

/* A statement for sql kept prepared across calls, for what runs on every request (the
 * credential lookups): compiling SQL costs more than running it. sql is the cache's key by
 * address, so pass the same string literal each time. The caller binds, steps, and then
 * sqlite3_reset()s it (which ends its read), never finalizes it; store_free() does. -EIO,
 * logged, when it cannot be prepared. */
int store_stmt(struct store *s, const char *sql, sqlite3_stmt **ret);
