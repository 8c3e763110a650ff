/* bundle.h: the guest kernel bundle (PVH vmlinux, stripped virtio modules, the agent's
 * initramfs) and the small busybox root disk, built by `sandboxd setup` into the state
 * directory and loaded by the daemon at every start; plus the blank disks sandboxes write to. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What `sandboxd setup` builds. */
struct bundle_opts {
	const char *state_dir;  /* created 0700 when missing */
	const char *agent_path; /* NULL: bundle_default_agent() */
	bool force;             /* rebuild everything (never the blank disks) */
};

/* Downloads Debian's current cloud kernel and busybox-static through the machine's apt
 * sources and builds <state>/vm/{vmlinux-V, modules-V/, initramfs-V.cpio, bundle.json} and
 * <state>/images/busybox/rootfs.ext4. Prints one progress line per step on stdout; a failure
 * is printed with what to do and returned as -errno. Reuses what an earlier run left unless
 * o->force. A missing agent is not a failure: the initramfs is then built by bundle_load(). */
int bundle_setup(const struct bundle_opts *o);

/* `sandboxd setup [--state-dir DIR] [--agent PATH] [--force]`, defined in setup.c. argv[0] is
 * "setup" (call it as setup_main(argc - 1, argv + 1)). Returns the process exit status. */
int setup_main(int argc, char **argv);

/* The paths a VM boots from. Every field is owned by the struct; see vm_bundle_done(). */
struct vm_bundle {
	char *kernel;         /* PVH vmlinux (or the operator's --kernel) */
	char *initrd;         /* uncompressed newc cpio with the agent as /init */
	char *rootfs;         /* the busybox root disk; NULL only when both overrides were given
	                         and setup never ran */
	char *kernel_version; /* e.g. "6.1.0-57-cloud-amd64"; NULL for an operator's kernel */
};
void vm_bundle_done(struct vm_bundle *b);

/* Reads <state>/vm/bundle.json, checks that the kernel, the modules and the root disk are
 * there, and rebuilds the initramfs when it is missing or agent_path's sha256 differs from
 * the manifest's (logging one line). agent_path NULL means bundle_default_agent(). kernel and
 * initrd, when not NULL, are the operator's and override the bundle's; a given initrd is used
 * as it is and never rebuilt, and with both given the manifest is optional. Logs the reason
 * and returns -ENOENT when setup never ran or left something missing, other -errno otherwise.
 * On success fills *ret (caller calls vm_bundle_done()). */
int bundle_load(const char *state_dir, const char *agent_path, const char *kernel,
                const char *initrd, struct vm_bundle *ret);

/* The shared blank ext4 of size_mb MiB that every writable layer of that size is backed by:
 * <state>/vm/blank-<MB>.ext4, sparse, created on first use and never replaced afterwards
 * (layers depend on its exact bytes). Blocks while mkfs.ext4 runs (tens of ms). Logs and
 * returns -errno on failure; on success *ret_path is newly allocated. */
int bundle_blank_disk(const char *state_dir, uint64_t size_mb, char **ret_path);

/* Creates path as a qcow2 whose backing file is blank (`qemu-img create -f qcow2 -F raw -b`),
 * atomically. Layers over the same blank are byte-identical. The backing path is stored
 * absolute. Logs and returns -errno on failure. */
int bundle_make_layer(const char *blank, const char *path);

/* sandbox-guestd beside the running binary (the directory of /proc/self/exe). Newly
 * allocated; NULL when out of memory or /proc/self/exe cannot be read. */
char *bundle_default_agent(void);

/* The host's TSC rate in kHz, measured against CLOCK_MONOTONIC_RAW over about 100 ms (for the
 * guest's tsc_early_khz= under TCG). -EOPNOTSUPP on hosts that are not x86. */
int bundle_host_tsc_khz(unsigned *ret);

/* The pieces below are what setup and bundle_load are made of; exported for the tests. */

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

/* Unpacks the uncompressed kernel from a bzImage (LZ4 payload, via the lz4 tool) into out
 * (atomically) and checks it with bundle_check_pvh(). -errno; *ret_error (optional, caller
 * frees) says why in words. */
int bundle_extract_vmlinux(const char *bzimage, const char *out, char **ret_error);
/* 0 when path is an x86-64 ELF with the Xen PVH entry note (type 0x12, name "Xen");
 * -ENOEXEC when it is not, other -errno when it cannot be read. */
int bundle_check_pvh(const char *path);

/* The manifest, <state>/vm/bundle.json. Paths are relative to the state directory. */
struct bundle_manifest {
	char *kernel;
	char *kernel_version;
	char *kernel_package;
	char *kernel_package_version;
	char *modules_dir;
	char **modules; /* file names in load order */
	size_t n_modules;
	char *rootfs;
	char *busybox_version;
	char *initramfs;       /* NULL until an agent was found */
	char agent_sha256[65]; /* "" when no initramfs was built */
	uint64_t agent_size;
	char created[32]; /* RFC 3339, UTC */
	char initramfs_built[32];
};
void bundle_manifest_done(struct bundle_manifest *m);
/* -ENOENT when there is no manifest, -EINVAL when it does not parse or holds an unsafe path;
 * no logging. */
int bundle_manifest_read(const char *state_dir, struct bundle_manifest *ret);
int bundle_manifest_write(const char *state_dir, const struct bundle_manifest *m);
