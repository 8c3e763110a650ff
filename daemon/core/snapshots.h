/* snapshots.h: snapshots of sandboxes, forks from them, and snapshot schedules.
 *
 * A snapshot is a directory STATE/snapshots/<id>/ that the backend writes (snapshot(): the
 * sandbox's writable layer, and for kind memory its memory and device state), plus its record
 * snapshot.json in the same directory, written by the core once the backend is done: what a
 * fork needs (image, cpus, memory_mb, disk_mb) and what the API lists. The list is held in
 * memory (struct sandboxd's snapshots, oldest first) and read back from the records at a
 * start with --keep-sandboxes; without the flag a start deletes every snapshot an earlier run
 * left. Snapshots outlive their sandbox: they are the operator's storage, counted against the
 * node's disk (snapshot_bytes). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "error.h"
#include "list.h"
#include "sandbox.h"

struct sandboxd;

#define SNAPSHOT_ID_MAX 21 /* "snap_" + 16 hex */
#define SNAPSHOT_RECORD "snapshot.json"

enum snapshot_kind {
	SNAPSHOT_MEMORY, /* memory and device state with the layer: a fork carries on running */
	SNAPSHOT_DISK,   /* the layer alone: a fork boots it */
	_SNAPSHOT_KIND_MAX,
	_SNAPSHOT_KIND_INVALID = -1,
};

/* "memory", "disk". */
const char *snapshot_kind_to_string(enum snapshot_kind k);
enum snapshot_kind snapshot_kind_from_string(const char *s);

struct snapshot;

/* Called once when the snapshot being written is done: error 0 (written, s in the list), or
 * -errno with why (s is freed after the call). */
typedef void (*snapshot_done_fn)(void *data, struct snapshot *s, int error, const char *why);

struct snapshot {
	struct list_node link; /* d->snapshots, oldest first */
	char id[SNAPSHOT_ID_MAX + 1];
	char *owner; /* the sandbox's owner */
	char sandbox[SANDBOX_ID_MAX + 1];
	char *image;
	enum snapshot_kind kind;
	bool scheduled; /* taken by the sandbox's schedule: its retention applies */
	unsigned cpus, memory_mb;
	uint64_t disk_mb;
	uint64_t bytes;     /* allocated on disk (st_blocks), measured once written */
	int64_t created_at; /* unix ms */
	bool writing;       /* the backend is writing it: not listed, not usable */
	snapshot_done_fn done;
	void *done_data;
};

/* At startup, once the sandboxes were recovered: makes STATE/snapshots (0700); with
 * --keep-sandboxes reads each snapshot's record back (a directory without a readable record,
 * a write cut short, is deleted); without it deletes every snapshot, logging how many. */
int snapshots_init(struct sandboxd *d);
/* At exit: frees the list (the files stay). */
void snapshots_done(struct sandboxd *d);

/* Begins a snapshot of sb of kind (what the sandbox's state allows: a running or suspended
 * one either kind, a stopped one disk only), on the backend; done is called once it is
 * written or failed. scheduled: the sandbox's schedule takes it. Refuses (err, nothing made)
 * an operation under way (409), a state that cannot be snapshotted (409), a kind the backend
 * lacks (501) and a node whose disk the snapshot would overfill (507). *ret is the snapshot
 * being written (owned by the list). */
int snapshots_take(struct sandboxd *d, struct sandbox *sb, enum snapshot_kind kind, bool scheduled,
                   snapshot_done_fn done, void *data, struct snapshot **ret, struct err *err);
/* The kind a snapshot of sb gets when the request names none: memory where the backend can
 * and the sandbox runs or is suspended, else disk. */
enum snapshot_kind snapshots_default_kind(struct sandboxd *d, const struct sandbox *sb);
/* Whether the backend writes snapshots of kind (its caps and its snapshot op). */
bool snapshots_offered(struct sandboxd *d, enum snapshot_kind kind);
/* The backend's done event for SANDBOX_OP_SNAPSHOT (lifecycle.c): measures and records the
 * snapshot, audits snapshot.created and applies a schedule's retention; or, on error, removes
 * what was written. */
void snapshots_written(struct sandboxd *d, struct sandbox *sb, int error, const char *reason);
/* sb's snapshot being written will never complete (the sandbox is being deleted or failed):
 * it fails with why and its files go. Nothing when none is being written. */
void snapshots_abort(struct sandboxd *d, struct sandbox *sb, const char *why);
/* The waiter of s no longer waits (its client went away). */
void snapshot_forget_done(struct snapshot *s);

/* The written snapshot id that owner may see (NULL: every owner's), or NULL. */
struct snapshot *snapshots_find(struct sandboxd *d, const char *id, const char *owner);
/* Whether a fork is still being started from s (it cannot be deleted then). */
bool snapshot_in_use(struct sandboxd *d, const struct snapshot *s);
/* Deletes s (written, not in use: else 409 in err) with reason ("request", "retention"),
 * auditing snapshot.deleted on its sandbox. */
int snapshots_delete(struct sandboxd *d, struct snapshot *s, const char *reason, struct err *err);
/* Every snapshot's bytes together. */
uint64_t snapshots_bytes(struct sandboxd *d);
size_t snapshots_count(struct sandboxd *d);
/* The API object: {id, sandbox, image, kind, bytes, created_at, owner, cpus, memory_mb,
 * disk_mb, scheduled}. */
json_t *snapshot_to_json(const struct snapshot *s);
/* STATE/snapshots/<id> (caller frees), or NULL. */
char *snapshot_dir(struct sandboxd *d, const char *id);
bool snapshot_id_valid(const char *id);

/* Sets sb's schedule (every_secs 0: none) and persists it with the sandbox. -errno. */
int snapshots_schedule_set(struct sandboxd *d, struct sandbox *sb, uint64_t every_secs,
                           unsigned keep);
/* Periodic: takes the snapshots schedules ask for (running sandboxes with nothing under way). */
void snapshots_housekeeping(struct sandboxd *d, int64_t now_ms);
