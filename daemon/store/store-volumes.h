/* store-volumes.h: the volumes table: one row per volume (its id, owner, name, size and
 * when it was made). What a volume is (its file, who may attach it) is core/volumes.c's; this
 * runs the statements and nothing else, and logs nothing.
 *
 * A row handed to a callback is valid only during the call; a callback's negative return stops
 * a listing and is returned. Errors: -ENOENT no such row, -EEXIST the owner has a volume of
 * that name, -EADDRINUSE the id collided (draw another), -EIO the database. */
#pragma once

#include <stdint.h>

struct store;

struct store_volume {
	const char *id; /* vol_<16 hex> */
	const char *owner;
	const char *name;
	uint64_t size_mb;
	int64_t created_at; /* unix ms */
};

int store_volume_insert(struct store *s, const struct store_volume *v);
/* Calls fn with owner's volume called name. -ENOENT. */
int store_volume_get(struct store *s, const char *owner, const char *name,
                     int (*fn)(const struct store_volume *v, void *data), void *data);
/* Calls fn for each volume of owner (NULL: every owner's), oldest first. */
int store_volume_list(struct store *s, const char *owner,
                      int (*fn)(const struct store_volume *v, void *data), void *data);
/* Deletes the volume with that id. -ENOENT. */
int store_volume_delete(struct store *s, const char *id);
