/* backend.c: picking a backend from the ones linked in; see backend.h. */
#include "backend.h"
#include "log.h"
#include "util.h"

int
backend_create(const char *name, const struct backend_config *cfg, struct backend **ret)
{
	for (size_t i = 0; i < backend_table_size; i++) {
		if (name && !streq(name, backend_table[i].name))
			continue;
		return backend_table[i].create(cfg, ret);
	}
	return -ENOENT;
}

struct backend *
backend_free(struct backend *b)
{
	if (b)
		b->ops->free(b);
	return NULL;
}
