/* disk.h: the disks sandboxes write to: a shared blank ext4 per size, never changed once made,
 * and each sandbox's qcow2 layer over it. */
#pragma once

#include <stdint.h>

/* The shared blank ext4 of size_mb MiB that every writable layer of that size is backed by:
 * <state>/vm/blank-<MB>.ext4, sparse, created on first use and never replaced afterwards
 * (layers depend on its exact bytes). Blocks while mkfs.ext4 runs (tens of ms). Logs and
 * returns -errno on failure; on success *ret_path is newly allocated. */
int bundle_blank_disk(const char *state_dir, uint64_t size_mb, char **ret_path);

/* Creates path as a qcow2 whose backing file is blank (`qemu-img create -f qcow2 -F raw -b`),
 * atomically. Layers over the same blank are byte-identical. The backing path is stored
 * absolute. Logs and returns -errno on failure. */
int bundle_make_layer(const char *blank, const char *path);
