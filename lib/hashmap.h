/* hashmap.h: string-keyed hash map with open addressing. Keys are borrowed: the caller keeps
 * each key alive while its entry exists (usually the key is a field of the value). */
#pragma once

#include <stddef.h>
#include "macro.h"

struct hashmap {
	struct hashmap_entry *slots;
	size_t nslots; /* power of two, or 0 */
	size_t count;
	size_t tombstones;
};

#define HASHMAP_INIT                                                                               \
	{                                                                                          \
		NULL, 0, 0, 0                                                                      \
	}

void *hashmap_get(const struct hashmap *m, const char *key);
/* Inserts or replaces; -ENOMEM. */
int hashmap_put(struct hashmap *m, const char *key, void *value);
/* Removes and returns the value, or NULL. */
void *hashmap_remove(struct hashmap *m, const char *key);
void hashmap_clear(struct hashmap *m);
