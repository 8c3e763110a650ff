/* bundle.h: the guest kernel bundle (PVH vmlinux, stripped virtio modules, the agent's
 * initramfs) and the small busybox root disk, built by `sandboxd setup` into the state
 * directory and loaded by the daemon at every start; plus the blank disks sandboxes write to.
 * What the rest of sandboxd uses of daemon/bundle/; the parts have their own headers (README). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "disk.h"
#include "tsc.h"

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
 * o->force. A missing agent is not a failure: the initramfs is then built by bundle_load().
 * Defined in setup.c. */
int bundle_setup(const struct bundle_opts *o);

/* `sandboxd setup [--state-dir DIR] [--agent PATH] [--force]`, defined in cmd/setup.c. argv[0]
 * is "setup" (call it as setup_main(argc - 1, argv + 1)). Returns the process exit status. */
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

/* sandbox-guestd beside the running binary (the directory of /proc/self/exe). Newly
 * allocated; NULL when out of memory or /proc/self/exe cannot be read. */
char *bundle_default_agent(void);

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
	unsigned rootfs_layout; /* what the root disk's tree holds (rootfs.c); 0: older ones */
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

/* For the bundle's parts. */

/* A path the manifest may hold: relative, inside the state directory, and plain enough for a
 * QEMU command line (no ',' or '=', no spaces, no control bytes, no "." or ".." component). */
bool bundle_safe_relpath(const char *p);

/* <state_dir>/<rel>, newly allocated; NULL when out of memory. */
char *bundle_state_path(const char *state_dir, const char *rel);

/* Takes the lock that serialises the writers of <state>/vm (vm_dir): setup, and a daemon
 * rebuilding the initramfs. wait false: -EWOULDBLOCK when another holds it. On success
 * *ret_fd holds the lock until it is closed. */
int bundle_lock_vm_dir(const char *vm_dir, bool wait, int *ret_fd);
