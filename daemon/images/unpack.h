/* unpack.h: applies an image layer (a tar stream, plain, gzip or zstd; libarchive reads it)
 * onto an image root directory, as the OCI image spec says: entries in order, whiteouts
 * (".wh.NAME" removes NAME from the layers below, ".wh..wh..opq" empties its directory of
 * what the layers below put there), ownership and modes kept (when running as root).
 *
 * Nothing is ever written outside the root: every path is resolved inside it
 * (openat2(RESOLVE_IN_ROOT)), so "..", absolute symlinks and symlink chains stay in the
 * root; a hardlink's target is resolved inside the root too; the last component of an
 * entry is never followed. No device node is ever created (character and block devices are
 * skipped and counted). A layer is untrusted bytes: it has a fuzz target (fuzz-unpack.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct unpack_stats {
	uint64_t entries;         /* entries applied */
	uint64_t bytes;           /* file bytes written */
	uint64_t whiteouts;       /* whiteout entries applied */
	uint64_t skipped_devices; /* device nodes not created */
};

struct unpack_opts {
	bool chown; /* give entries their uid/gid (needs root); otherwise files are the caller's */
	/* the most bytes of file data one layer may write (0: no limit) */
	uint64_t max_bytes;
};

/* Applies the layer read from layer_fd onto the directory root_fd. On a malformed archive
 * or a refused entry returns -errno with *ret_error naming the entry and why (newly
 * allocated; NULL when out of memory); what was applied before stays. stats may be NULL. */
int unpack_layer(int root_fd, int layer_fd, const struct unpack_opts *o, struct unpack_stats *stats,
                 char **ret_error);
