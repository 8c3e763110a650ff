/* volumes.h: volumes, the disks that outlive sandboxes. Each is a row in the store (its id
 * vol_<16 hex>, owner, name unique per owner, size) and a sparse raw ext4 file,
 * STATE/volumes/<id>.ext4, made by mkfs.ext4 with its root owned by the sandbox user. It is
 * never mounted on the host: a sandbox's create attaches it ({name, path, read_only} in
 * sb->volumes), the backend hands it to the VM as a drive (read-only at the drive for a
 * reader) and the guest mounts it at path. One writer or many readers: a sandbox that is not
 * terminated holds the volumes it was created with (stopped or failed ones too). */
#pragma once

#include <jansson.h>
#include <stdint.h>
#include "backend.h"
#include "error.h"

struct sandboxd;
struct sandbox;

#define VOLUME_MIN_MB 16
#define VOLUME_MAX_MB 65536  /* 64 GiB; the node's disk capacity bounds it too (the API's) */
#define VOLUMES_ATTACH_MAX 8 /* per sandbox (REQUEST_MAX_VOLUMES, QEMU_VOLUMES_MAX) */

/* Whether this server offers volumes: its backend attaches them as drives. */
bool volumes_offered(struct sandboxd *d);

/* At a start of sandboxd: removes the files of STATE/volumes that are no volume's (a create
 * or a delete cut short). */
void volumes_sweep(struct sandboxd *d);

/* Makes owner's volume name of size_mb MiB: its file, then its row. The API object in *ret
 * (new). -EINVAL (a bad name or size), -EEXIST (the owner has one of that name), -EIO (mkfs
 * or the store failed), each with err filled. */
int volumes_create(struct sandboxd *d, const char *owner, const char *name, uint64_t size_mb,
                   json_t **ret, struct err *err);
/* Deletes owner's volume name, its file with it. -ENOENT, -EBUSY (a sandbox that is not
 * terminated holds it), each with err filled. */
int volumes_delete(struct sandboxd *d, const char *owner, const char *name, struct err *err);
/* The volumes of owner (NULL: everyone's), as an array of their API objects {id, name,
 * owner, size_mb, bytes, created_at, attached}. NULL when out of memory or the store failed. */
json_t *volumes_list(struct sandboxd *d, const char *owner);

/* Deletes every volume of owner, files and rows (a user deleted: what they kept goes with
 * them, and never to an account made later with the same email). Failures are logged. */
void volumes_delete_owner(struct sandboxd *d, const char *owner);

/* Whether sb's create may attach its volumes (sb->volumes), checked where it joins the
 * registry: each must be its owner's (-ENOENT), and no other sandbox that is not terminated
 * may hold one it would write, nor write one it would read (-EBUSY). -EOPNOTSUPP when the
 * server offers no volumes. err is filled. */
int volumes_check_attach(struct sandboxd *d, const struct sandbox *sb, struct err *err);

/* What a launch of sb is handed for its volumes (struct vm_launch borrows it). */
struct volumes_launch {
	struct vm_volume v[VOLUMES_ATTACH_MAX];
	char *files[VOLUMES_ATTACH_MAX];
	size_t n;
};
/* Fills vl with sb's volumes and points l at them; volumes_launch_done() after the backend's
 * call. -ENOENT (logged) when a volume's row is gone, -ENOMEM. */
int volumes_launch_fill(struct sandboxd *d, const struct sandbox *sb, struct volumes_launch *vl,
                        struct vm_launch *l);
void volumes_launch_done(struct volumes_launch *vl);

/* The disk the volumes of owner (NULL: everyone's) take from the node's capacity, in MiB
 * (their sizes); and for /metrics, how many there are and the bytes their files hold. */
uint64_t volumes_disk_mb(struct sandboxd *d, const char *owner);
void volumes_usage(struct sandboxd *d, uint64_t *ret_count, uint64_t *ret_bytes);
