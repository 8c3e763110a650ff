/* hashmap.c: see hashmap.h. Linear probing with tombstones; FNV-1a hashes. */
#include <string.h>
#include "hashmap.h"
#include "util.h"

struct hashmap_entry {
	const char *key; /* NULL: empty; TOMBSTONE: deleted */
	void *value;
};

static const char tombstone_key[1];
#define TOMBSTONE (tombstone_key)

static size_t
hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return (size_t)h;
}

static struct hashmap_entry *
find(const struct hashmap *m, const char *key)
{
	size_t mask, i;

	if (m->nslots == 0)
		return NULL;
	mask = m->nslots - 1;
	for (i = hash(key) & mask;; i = (i + 1) & mask) {
		struct hashmap_entry *e = &m->slots[i];
		if (!e->key)
			return NULL;
		if (e->key != TOMBSTONE && streq(e->key, key))
			return e;
	}
}

void *
hashmap_get(const struct hashmap *m, const char *key)
{
	struct hashmap_entry *e = find(m, key);

	return e ? e->value : NULL;
}

static int
resize(struct hashmap *m, size_t nslots)
{
	struct hashmap_entry *old = m->slots;
	size_t oldn = m->nslots;

	m->slots = calloc(nslots, sizeof(*m->slots));
	if (!m->slots) {
		m->slots = old;
		return -ENOMEM;
	}
	m->nslots = nslots;
	m->count = 0;
	m->tombstones = 0;
	for (size_t i = 0; i < oldn; i++)
		if (old[i].key && old[i].key != TOMBSTONE)
			hashmap_put(m, old[i].key, old[i].value);
	free(old);
	return 0;
}

int
hashmap_put(struct hashmap *m, const char *key, void *value)
{
	struct hashmap_entry *e = find(m, key);
	size_t mask, i;

	if (e) {
		e->key = key;
		e->value = value;
		return 0;
	}
	if ((m->count + m->tombstones + 1) * 4 > m->nslots * 3) {
		size_t n = m->nslots ? m->nslots : 16;
		if (m->count * 2 >= n)
			n *= 2;
		if (resize(m, n) < 0)
			return -ENOMEM;
	}
	mask = m->nslots - 1;
	for (i = hash(key) & mask;; i = (i + 1) & mask) {
		e = &m->slots[i];
		if (!e->key || e->key == TOMBSTONE) {
			if (e->key == TOMBSTONE)
				m->tombstones--;
			e->key = key;
			e->value = value;
			m->count++;
			return 0;
		}
	}
}

void *
hashmap_remove(struct hashmap *m, const char *key)
{
	struct hashmap_entry *e = find(m, key);
	void *v;

	if (!e)
		return NULL;
	v = e->value;
	e->key = TOMBSTONE;
	e->value = NULL;
	m->count--;
	m->tombstones++;
	return v;
}

void
hashmap_clear(struct hashmap *m)
{
	free(m->slots);
	*m = (struct hashmap)HASHMAP_INIT;
}
