/* modules.h: the kernel modules the guest loads from its initramfs: which files, in which
 * order (dependencies first), and the copies setup strips for it. */
#pragma once

#include <stddef.h>
#include "bundle.h"

struct setup;

/* Resolves the modules in wanted (names, '-' and '_' alike) under moddir
 * (lib/modules/<version>) into load order, dependencies first: from modules.dep when it is
 * there, otherwise from modules.order plus each module's .modinfo "depends=". Modules listed in
 * modules.builtin are left out. Returns paths relative to moddir as they ship (a NULL-terminated
 * array; free it with strv_free()). -ENOENT when a module is unknown, -ELOOP on a
 * dependency cycle, -ENOEXEC when a module is not an ELF with .modinfo; then *ret_bad
 * (optional, caller frees) names the module. No logging. */
int bundle_modules_resolve(const char *moddir, const char *const *wanted, size_t n_wanted,
                           char ***ret_paths, size_t *ret_n, char **ret_bad);

/* The module name of a path: basename without .ko[.xz|.zst|.gz], '-' turned into '_'.
 * Newly allocated; NULL when out of memory. */
char *bundle_module_name(const char *path);

/* The module list of a modules directory setup built (its "order" file) into *ret, if every
 * module in it is there; -ENOENT otherwise. */
int modules_dir_read(const char *dir, char ***ret, size_t *ret_n);

/* Builds dst, the modules directory of kernel kver unpacked under kroot: the modules the guest
 * needs (ext4 too when the kernel's config makes it a module), with their dependencies,
 * uncompressed and stripped, plus "order"; dst is replaced whole. Appends the file names to
 * m->modules in load order. Prints one step; a failure is recorded with setup_fail(). */
int modules_build(struct setup *s, const char *kroot, const char *kver, const char *dst,
                  struct bundle_manifest *m);
