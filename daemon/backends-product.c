/* backends-product.c: the backends the product sandboxd is built with. The microVM backend
 * joins this table; until then the product runs no sandboxes and says so, and tests use the
 * fake backend that lives only in the test tree (tests/fake/). */
#include "backend.h"

const struct backend_entry backend_table[] = {
	{ .name = NULL, .create = NULL },
};
const size_t backend_table_size = 0;
