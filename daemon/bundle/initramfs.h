/* initramfs.h: the guest's initramfs: an uncompressed newc cpio holding the agent as /init and
 * the stripped modules it loads, which the kernel unpacks into its rootfs before running
 * /init. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct archive;

/* An uncompressed newc cpio archive written to fd by libarchive's newc writer. Every entry is
 * root's (uid and gid 0) with mtime 0, and inode numbers count up from 1, so the same calls
 * give the same bytes. The first error sticks: later calls return it without writing.
 * Directories must be added before what they hold: the kernel makes the entries in archive
 * order. libarchive calls back with c's address, so c stays where it is from
 * bundle_cpio_init() to bundle_cpio_finish() or bundle_cpio_done(). */
struct bundle_cpio {
	struct archive *a;
	int fd;
	uint32_t next_ino;
	int error;
};
/* Starts an archive on fd (not taken). Failing (out of memory, fd not open) keeps the error. */
void bundle_cpio_init(struct bundle_cpio *c, int fd);
int bundle_cpio_dir(struct bundle_cpio *c, const char *name, mode_t perm);
int bundle_cpio_file(struct bundle_cpio *c, const char *name, mode_t perm, const void *data,
                     size_t len);
/* A device node: mode is S_IFCHR or S_IFBLK plus permissions. */
int bundle_cpio_node(struct bundle_cpio *c, const char *name, mode_t mode, unsigned major,
                     unsigned minor);
int bundle_cpio_symlink(struct bundle_cpio *c, const char *name, const char *target);
/* Writes the trailer and releases the writer; returns the first error of the whole archive,
 * if any. */
int bundle_cpio_finish(struct bundle_cpio *c);
/* Releases the writer of an archive given up on, writing nothing more (no trailer); the
 * archive's calls return -ECANCELED afterwards unless an error was kept. Does nothing after
 * bundle_cpio_finish() or to a zeroed struct, so it can be a cleanup. */
void bundle_cpio_done(struct bundle_cpio *c);

/* Writes the initramfs to path atomically: /init (the agent, 0755), /lib/modules/<file> for
 * each module file in modules_dir, /lib/modules/order (one file name per line, load order),
 * /dev/console (c 5 1) and the mount points. Returns the agent's sha256 (lowercase hex) and
 * size. -errno without logging. */
int bundle_write_initramfs(const char *path, const char *agent_path, const char *modules_dir,
                           char *const *modules, size_t n_modules, char ret_sha256[static 65],
                           uint64_t *ret_agent_size);
