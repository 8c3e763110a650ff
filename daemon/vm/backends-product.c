/* backends-product.c: the backends the product sandboxd is built with: the QEMU microVM
 * backend. Tests link the test-only fake backend instead (tests/fake/). */
#include "backend.h"
#include "qemu.h"

const struct backend_entry backend_table[] = {
	{ .name = "qemu", .create = qemu_backend_create },
};
const size_t backend_table_size = ARRAY_SIZE(backend_table);
