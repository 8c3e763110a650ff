/* initramfs.h: the guest's initramfs: an uncompressed newc cpio holding the agent as /init and
 * the stripped modules it loads, which the kernel unpacks into its rootfs before running
 * /init. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* An uncompressed newc cpio archive written to fd. Inode numbers count up from 1, mtimes,
 * uids and gids are 0, so the same calls give the same bytes. The first error sticks: later
 * calls return it without writing. Parents must be added before their children. */
struct bundle_cpio {
	int fd;
	uint32_t next_ino;
	uint64_t offset;
	int error;
};
void bundle_cpio_init(struct bundle_cpio *c, int fd);
int bundle_cpio_dir(struct bundle_cpio *c, const char *name, mode_t perm);
int bundle_cpio_file(struct bundle_cpio *c, const char *name, mode_t perm, const void *data,
                     size_t len);
/* A device node: mode is S_IFCHR or S_IFBLK plus permissions. */
int bundle_cpio_node(struct bundle_cpio *c, const char *name, mode_t mode, unsigned major,
                     unsigned minor);
int bundle_cpio_symlink(struct bundle_cpio *c, const char *name, const char *target);
/* Writes the trailer; returns the first error of the whole archive, if any. */
int bundle_cpio_finish(struct bundle_cpio *c);

/* Writes the initramfs to path atomically: /init (the agent, 0755), /lib/modules/<file> for
 * each module file in modules_dir, /lib/modules/order (one file name per line, load order),
 * /dev/console (c 5 1) and the mount points. Returns the agent's sha256 (lowercase hex) and
 * size. -errno without logging. */
int bundle_write_initramfs(const char *path, const char *agent_path, const char *modules_dir,
                           char *const *modules, size_t n_modules, char ret_sha256[static 65],
                           uint64_t *ret_agent_size);
