/* setup.h: one run of `sandboxd setup` (bundle_setup() in setup.c), as its steps share it:
 * apt.c fetches the packages, modules.c strips the modules, rootfs.c builds the root disk.
 * Each step prints a progress line on stdout; the first failure is kept, with what to do, and
 * printed once at the end. */
#pragma once

#include "bundle.h"
#include "macro.h"

struct setup {
	const struct bundle_opts *o;
	const char *state;
	char *vm_dir;
	char *deb_dir;
	char *scratch;              /* removed at the end */
	char *failure;              /* what went wrong and what to do, printed once at the end */
	struct bundle_manifest old; /* the previous run's manifest, or zeroes */
};

/* Prints "setup: <what>" on stdout, flushed. */
void setup_step(const char *fmt, ...) _printf_(1, 2);

/* Records the first failure (printed by bundle_setup) and returns r. */
int setup_fail(struct setup *s, int r, const char *fmt, ...) _printf_(3, 4);
