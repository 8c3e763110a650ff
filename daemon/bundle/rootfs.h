/* rootfs.h: the small read-only root disk every sandbox without an image boots: busybox-static
 * and its applets, the sandbox user, as ext4 at <state>/images/busybox/rootfs.ext4. */
#pragma once

#include "bundle.h"

struct setup;

/* Builds the root disk from the current busybox-static (through apt), or reuses the one an
 * earlier run left unless --force; sets m->rootfs and m->busybox_version. Prints its steps; a
 * failure is recorded with setup_fail() and returned as -errno. */
int rootfs_setup(struct setup *s, struct bundle_manifest *m);
