/* snapshots.c: snapshots, their records and schedules; see snapshots.h.
 *
 * A snapshot is written by the backend into a directory the core made (sb->op is
 * SANDBOX_OP_SNAPSHOT meanwhile, so no other operation of its sandbox begins), measured once
 * done and recorded in snapshot.json beside its files: a directory without a record is a write
 * that never finished, and goes at the next start. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include "events.h"
#include "log.h"
#include "samples.h"
#include "sandboxd.h"
#include "snapshots.h"
#include "store.h"
#include "tool.h"
#include "util.h"

#define SNAPSHOT_RECORD_VERSION 1
#define SNAPSHOT_RECORD_MAX (64u << 10)
#define MIB (1024ull * 1024ull)

static const char *const kind_names[_SNAPSHOT_KIND_MAX] = {
	[SNAPSHOT_MEMORY] = "memory",
	[SNAPSHOT_DISK] = "disk",
};

const char *
snapshot_kind_to_string(enum snapshot_kind k)
{
	return k >= 0 && k < _SNAPSHOT_KIND_MAX ? kind_names[k] : "disk";
}

enum snapshot_kind
snapshot_kind_from_string(const char *s)
{
	int i = name_index(kind_names, _SNAPSHOT_KIND_MAX, s);

	return i < 0 ? _SNAPSHOT_KIND_INVALID : (enum snapshot_kind)i;
}

bool
snapshot_id_valid(const char *id)
{
	if (!id || strlen(id) != SNAPSHOT_ID_MAX || !str_has_prefix(id, "snap_"))
		return false;
	for (const char *p = id + 5; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

static char *
snapshots_root(struct sandboxd *d)
{
	return strdup_printf("%s/snapshots", d->opts->state_dir);
}

char *
snapshot_dir(struct sandboxd *d, const char *id)
{
	return strdup_printf("%s/snapshots/%s", d->opts->state_dir, id);
}

static struct snapshot *
snapshot_free(struct snapshot *s)
{
	if (!s)
		return NULL;
	list_remove(&s->link);
	free(s->owner);
	free(s->image);
	free(s);
	return NULL;
}

json_t *
snapshot_to_json(const struct snapshot *s)
{
	char created[32];

	format_rfc3339(s->created_at, created);
	return json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:i, s:i, s:I, s:b}", "id", s->id,
	                 "sandbox", s->sandbox, "image", s->image, "kind",
	                 snapshot_kind_to_string(s->kind), "bytes", (json_int_t)s->bytes,
	                 "created_at", created, "owner", s->owner, "cpus", (int)s->cpus,
	                 "memory_mb", (int)s->memory_mb, "disk_mb", (json_int_t)s->disk_mb,
	                 "scheduled", s->scheduled);
}

/* ---- records ---- */

static json_t *
record_json(const struct snapshot *s)
{
	return json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:b, s:i, s:i, s:I, s:I, s:I}", "version",
	                 SNAPSHOT_RECORD_VERSION, "id", s->id, "owner", s->owner, "sandbox",
	                 s->sandbox, "image", s->image, "kind", snapshot_kind_to_string(s->kind),
	                 "scheduled", s->scheduled, "cpus", (int)s->cpus, "memory_mb",
	                 (int)s->memory_mb, "disk_mb", (json_int_t)s->disk_mb, "bytes",
	                 (json_int_t)s->bytes, "created_at", (json_int_t)s->created_at);
}

static int
record_write(struct sandboxd *d, const struct snapshot *s)
{
	_cleanup_free_ char *dir = snapshot_dir(d, s->id), *path = NULL, *text = NULL;
	json_t *j = record_json(s);
	int r;

	if (j)
		text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!dir || !text || !(path = strdup_printf("%s/" SNAPSHOT_RECORD, dir)))
		return -ENOMEM;
	r = write_file_atomic(path, text, strlen(text), 0600);
	if (r >= 0)
		fsync_dir(dir);
	return r;
}

/* The snapshot the record in dir (named name) describes; -EINVAL for one that is not a
 * record of that snapshot. */
static int
record_read(const char *dir, const char *name, struct snapshot **ret)
{
	_cleanup_free_ char *path = strdup_printf("%s/" SNAPSHOT_RECORD, dir), *text = NULL;
	const char *id, *owner, *sandbox, *image, *kind;
	json_int_t version, cpus, mem, disk, bytes, created;
	int scheduled;
	struct snapshot *s;
	size_t len = 0;
	json_t *j;
	int r;

	if (!path)
		return -ENOMEM;
	r = read_file_max(path, SNAPSHOT_RECORD_MAX, &text, &len);
	if (r < 0)
		return r;
	j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	if (!j ||
	    json_unpack(j, "{s:I, s:s, s:s, s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I}",
	                "version", &version, "id", &id, "owner", &owner, "sandbox", &sandbox,
	                "image", &image, "kind", &kind, "scheduled", &scheduled, "cpus", &cpus,
	                "memory_mb", &mem, "disk_mb", &disk, "bytes", &bytes, "created_at",
	                &created) < 0 ||
	    version != SNAPSHOT_RECORD_VERSION || !streq(id, name) || !snapshot_id_valid(id) ||
	    !sandbox_id_valid(sandbox) || snapshot_kind_from_string(kind) < 0 || cpus <= 0 ||
	    cpus > 1024 || mem <= 0 || mem > UINT32_MAX || disk <= 0 || bytes < 0) {
		json_decref(j);
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		json_decref(j);
		return -ENOMEM;
	}
	list_init(&s->link);
	snprintf(s->id, sizeof(s->id), "%s", id);
	snprintf(s->sandbox, sizeof(s->sandbox), "%s", sandbox);
	s->owner = strdup(owner);
	s->image = strdup(image);
	s->kind = snapshot_kind_from_string(kind);
	s->scheduled = scheduled;
	s->cpus = (unsigned)cpus;
	s->memory_mb = (unsigned)mem;
	s->disk_mb = (uint64_t)disk;
	s->bytes = (uint64_t)bytes;
	s->created_at = created;
	json_decref(j);
	if (!s->owner || !s->image) {
		snapshot_free(s);
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

/* Adds s where its created_at puts it (oldest first). */
static void
list_add_sorted(struct sandboxd *d, struct snapshot *s)
{
	struct list_node *n;

	LIST_FOREACH (n, &d->snapshots) {
		struct snapshot *o = list_entry(n, struct snapshot, link);
		if (o->created_at > s->created_at) {
			list_insert_after(n->prev, &s->link);
			return;
		}
	}
	list_push_back(&d->snapshots, &s->link);
}

int
snapshots_init(struct sandboxd *d)
{
	_cleanup_free_ char *root = snapshots_root(d);
	unsigned loaded = 0, removed = 0, broken = 0;
	struct list_node *n;
	struct dirent *de;
	DIR *dp;
	int r;

	if (!root)
		return -ENOMEM;
	r = mkdir_p(root, 0700);
	if (r < 0) {
		log_error("snapshots '%s': cannot create the directory: %s", root, strerror(-r));
		return r;
	}
	dp = opendir(root);
	if (!dp) {
		r = negative_errno();
		log_error("snapshots '%s': %s", root, strerror(-r));
		return r;
	}
	while ((de = readdir(dp))) {
		_cleanup_free_ char *dir = NULL;
		struct snapshot *s = NULL;

		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		dir = strdup_printf("%s/%s", root, de->d_name);
		if (!dir) {
			closedir(dp);
			return -ENOMEM;
		}
		if (!d->opts->keep_sandboxes) {
			rm_rf(dir);
			removed++;
			continue;
		}
		r = record_read(dir, de->d_name, &s);
		if (r == -ENOMEM) {
			closedir(dp);
			return r;
		}
		if (r < 0) {
			log_warning("snapshot '%s': no readable record (%s): a write that never "
			            "finished; deleting it",
			            de->d_name, strerror(-r));
			rm_rf(dir);
			broken++;
			continue;
		}
		list_add_sorted(d, s);
		loaded++;
	}
	closedir(dp);
	if (removed)
		log_info("snapshots: deleted %u an earlier run left: this one runs without "
		         "--keep-sandboxes",
		         removed);
	if (loaded || broken)
		log_info("snapshots: %u kept (--keep-sandboxes), %u unfinished deleted", loaded,
		         broken);
	/* a schedule carries on from its newest snapshot */
	LIST_FOREACH (n, &d->snapshots) {
		struct snapshot *s = list_entry(n, struct snapshot, link);
		struct sandbox *sb = registry_get(&d->reg, s->sandbox);
		if (sb && s->scheduled && s->created_at > sb->snapshot_last)
			sb->snapshot_last = s->created_at;
	}
	return 0;
}

void
snapshots_done(struct sandboxd *d)
{
	struct list_node *n, *tmp;

	if (!d->snapshots.next)
		return; /* never initialised */
	LIST_FOREACH_SAFE (n, tmp, &d->snapshots)
		snapshot_free(list_entry(n, struct snapshot, link));
}

/* ---- measuring ---- */

/* The blocks the files in dir take (its subdirectories' too, one level is all the backend
 * writes). */
static uint64_t
dir_bytes(const char *dir, unsigned depth)
{
	struct dirent *de;
	uint64_t total = 0;
	struct stat st;
	DIR *dp = opendir(dir);

	if (!dp)
		return 0;
	while ((de = readdir(dp))) {
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		total += (uint64_t)st.st_blocks * 512;
		if (S_ISDIR(st.st_mode) && depth < 4) {
			_cleanup_free_ char *sub = strdup_printf("%s/%s", dir, de->d_name);
			if (sub)
				total += dir_bytes(sub, depth + 1);
		}
	}
	closedir(dp);
	return total;
}

uint64_t
snapshots_bytes(struct sandboxd *d)
{
	struct list_node *n;
	uint64_t total = 0;

	LIST_FOREACH (n, &d->snapshots) {
		struct snapshot *s = list_entry(n, struct snapshot, link);
		if (!s->writing)
			total += s->bytes;
	}
	return total;
}

size_t
snapshots_count(struct sandboxd *d)
{
	struct list_node *n;
	size_t count = 0;

	LIST_FOREACH (n, &d->snapshots)
		count += !list_entry(n, struct snapshot, link)->writing;
	return count;
}

/* ---- finding and using ---- */

struct snapshot *
snapshots_find(struct sandboxd *d, const char *id, const char *owner)
{
	struct list_node *n;

	LIST_FOREACH (n, &d->snapshots) {
		struct snapshot *s = list_entry(n, struct snapshot, link);
		if (streq(s->id, id) && !s->writing && (!owner || streq(owner, s->owner)))
			return s;
	}
	return NULL;
}

bool
snapshot_in_use(struct sandboxd *d, const struct snapshot *s)
{
	struct list_node *n;

	/* a fork restores from it until its first start completes (or fails) */
	LIST_FOREACH (n, &d->reg.all) {
		const struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (sb->snapshot_id && streq(sb->snapshot_id, s->id) &&
		    (sb->state == SANDBOX_PENDING ||
		     (sb->state == SANDBOX_STARTING && sb->op == SANDBOX_OP_START)))
			return true;
	}
	return false;
}

/* The sandbox a snapshot's events go to: the live one, else the stored row (ended), which
 * *ret_loaded holds for the caller to free; NULL when neither is there. */
static struct sandbox *
event_sandbox(struct sandboxd *d, const char *id, struct sandbox **ret_loaded)
{
	struct sandbox *sb = registry_get(&d->reg, id);

	*ret_loaded = NULL;
	if (sb)
		return sb;
	if (sandbox_load(d->store, id, ret_loaded) < 0)
		return NULL;
	return *ret_loaded;
}

int
snapshots_delete(struct sandboxd *d, struct snapshot *s, const char *reason, struct err *err)
{
	_cleanup_(sandbox_freep) struct sandbox *loaded = NULL;
	_cleanup_free_ char *dir = NULL;
	struct sandbox *sb;

	if (s->writing)
		return err_set(err, -EBUSY, ERR_CONFLICT, "snapshot '%s' is still being written",
		               s->id);
	if (snapshot_in_use(d, s))
		return err_set(
		        err, -EBUSY, ERR_CONFLICT,
		        "snapshot '%s' is in use: a sandbox is being started from it; delete "
		        "it once that sandbox runs",
		        s->id);
	dir = snapshot_dir(d, s->id);
	if (!dir)
		return -ENOMEM;
	rm_rf(dir);
	log_info("snapshot '%s' of sandbox '%s': deleted (%s), %llu bytes freed", s->id, s->sandbox,
	         reason, (unsigned long long)s->bytes);
	sb = event_sandbox(d, s->sandbox, &loaded);
	if (sb)
		(void)sandbox_event(d, sb, "snapshot.deleted",
		                    json_pack("{s:s, s:s}", "snapshot", s->id, "reason", reason));
	else
		log_warning("snapshot '%s': its sandbox '%s' is forgotten: no snapshot.deleted "
		            "record",
		            s->id, s->sandbox);
	snapshot_free(s);
	return 0;
}

/* ---- taking ---- */

bool
snapshots_offered(struct sandboxd *d, enum snapshot_kind kind)
{
	struct backend_caps caps = { .accel = "none" };

	if (!d->backend || !d->backend->ops->snapshot)
		return false;
	d->backend->ops->caps(d->backend, &caps);
	return kind == SNAPSHOT_MEMORY ? caps.memory_snapshot : caps.disk_snapshot;
}

enum snapshot_kind
snapshots_default_kind(struct sandboxd *d, const struct sandbox *sb)
{
	if ((sb->state == SANDBOX_RUNNING || sb->state == SANDBOX_SUSPENDED) &&
	    json_array_size(sb->volumes) == 0 && snapshots_offered(d, SNAPSHOT_MEMORY))
		return SNAPSHOT_MEMORY;
	return SNAPSHOT_DISK;
}

static void
last_disk_sample(const struct sample *x, void *data)
{
	*(uint64_t *)data = x->disk_bytes;
}

/* Whether the node's disk has room for a snapshot of sb of kind: what sandboxes were given
 * (disk_mb), the snapshots there are, and this one's estimate (its memory, and its layer as
 * last measured) within --capacity-disk-mb. */
static int
check_room(struct sandboxd *d, const struct sandbox *sb, enum snapshot_kind kind, struct err *err)
{
	uint64_t given = 0, layer = 0, snaps = snapshots_bytes(d), want, used;
	struct list_node *n;

	LIST_FOREACH (n, &d->reg.all)
		given += list_entry(n, struct sandbox, by_created)->disk_mb;
	samples_each(sb, 0, last_disk_sample, &layer);
	want = (kind == SNAPSHOT_MEMORY ? sb->memory_mb : 0) + (layer + MIB - 1) / MIB;
	used = given + (snaps + MIB - 1) / MIB;
	if (used + want <= d->node.disk_mb)
		return 0;
	return err_set(err, -ENOSPC, ERR_NO_SPACE,
	               "this node has no room for the snapshot: it needs about %llu MiB, and the "
	               "node's %llu MiB of disk (--capacity-disk-mb) hold %llu MiB given to "
	               "sandboxes and %llu MiB of snapshots; delete snapshots or sandboxes",
	               (unsigned long long)want, (unsigned long long)d->node.disk_mb,
	               (unsigned long long)given, (unsigned long long)((snaps + MIB - 1) / MIB));
}

/* Whether sb's state lets a snapshot of kind be taken now. */
static int
check_state(const struct sandbox *sb, enum snapshot_kind kind, struct err *err)
{
	if (sb->op == SANDBOX_OP_SNAPSHOT)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s': a snapshot of it is being written; try again once it "
		               "is done",
		               sb->id);
	if (sb->op != SANDBOX_OP_NONE)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s' is %s and an operation on it is under way; try again "
		               "once it is done",
		               sb->id, sandbox_state_to_string(sb->state));
	/* a volume is not part of a snapshot, and a VM restored from its memory would need the
	 * same drives (its guest had them mounted): such a fork could not be started */
	if (kind == SNAPSHOT_MEMORY && json_array_size(sb->volumes) > 0)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s' has volumes, which a snapshot does not hold: only a "
		               "disk snapshot of it can be taken (\"kind\": \"disk\")",
		               sb->id);
	switch (sb->state) {
	case SANDBOX_RUNNING:
	case SANDBOX_SUSPENDED:
		return 0;
	case SANDBOX_STOPPED:
		if (kind == SNAPSHOT_DISK)
			return 0;
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s' is stopped: its memory is gone, so only a disk "
		               "snapshot can be taken (\"kind\": \"disk\")",
		               sb->id);
	default:
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s' is %s; only a running, suspended or stopped sandbox "
		               "can be snapshotted",
		               sb->id, sandbox_state_to_string(sb->state));
	}
}

int
snapshots_take(struct sandboxd *d, struct sandbox *sb, enum snapshot_kind kind, bool scheduled,
               snapshot_done_fn done, void *data, struct snapshot **ret, struct err *err)
{
	struct backend *b = d->backend;
	_cleanup_free_ char *dir = NULL;
	struct snapshot *s;
	char hex[17];
	int r;

	if (!snapshots_offered(d, kind))
		return err_set(err, -EOPNOTSUPP, ERR_UNSUPPORTED,
		               "this server's backend does not take %s snapshots (capability "
		               "'%s_snapshot')",
		               snapshot_kind_to_string(kind), snapshot_kind_to_string(kind));
	if (!streq(b->ops->name, sb->backend))
		return err_set(err, -ENODEV, ERR_UNAVAILABLE,
		               "the backend '%s' of sandbox '%s' is not available", sb->backend,
		               sb->id);
	if ((r = check_state(sb, kind, err)) < 0 || (r = check_room(d, sb, kind, err)) < 0)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s || random_hex(hex, 8) < 0) {
		free(s);
		return -ENOMEM;
	}
	list_init(&s->link);
	snprintf(s->id, sizeof(s->id), "snap_%s", hex);
	snprintf(s->sandbox, sizeof(s->sandbox), "%s", sb->id);
	s->owner = strdup(sb->owner);
	s->image = strdup(sb->image);
	s->kind = kind;
	s->scheduled = scheduled;
	s->cpus = sb->cpus;
	s->memory_mb = sb->memory_mb;
	s->disk_mb = sb->disk_mb;
	s->writing = true;
	s->done = done;
	s->done_data = data;
	dir = snapshot_dir(d, s->id);
	if (!s->owner || !s->image || !dir) {
		snapshot_free(s);
		return -ENOMEM;
	}
	if (mkdir(dir, 0700) < 0) {
		r = negative_errno();
		snapshot_free(s);
		return err_set(err, r, ERR_INTERNAL, "could not make the snapshot's directory: %s",
		               strerror(-r));
	}
	list_push_back(&d->snapshots, &s->link);
	sb->op = SANDBOX_OP_SNAPSHOT;
	r = b->ops->snapshot(b, sb, dir, kind == SNAPSHOT_MEMORY);
	if (r < 0) {
		sb->op = SANDBOX_OP_NONE;
		rm_rf(dir);
		snapshot_free(s);
		log_error("sandbox '%s': the backend could not begin a snapshot: %s", sb->id,
		          strerror(-r));
		return err_set(err, r, ERR_INTERNAL, "the backend could not begin the snapshot: %s",
		               strerror(-r));
	}
	log_info("sandbox '%s': taking %s snapshot '%s'%s", sb->id, snapshot_kind_to_string(kind),
	         s->id, scheduled ? " (its schedule)" : "");
	*ret = s;
	return 0;
}

void
snapshot_forget_done(struct snapshot *s)
{
	s->done = NULL;
	s->done_data = NULL;
}

static struct snapshot *
writing_of(struct sandboxd *d, const struct sandbox *sb)
{
	struct list_node *n;

	LIST_FOREACH (n, &d->snapshots) {
		struct snapshot *s = list_entry(n, struct snapshot, link);
		if (s->writing && streq(s->sandbox, sb->id))
			return s;
	}
	return NULL;
}

/* s failed: its files go, its waiter is told. */
static void
failed(struct sandboxd *d, struct snapshot *s, int error, const char *why)
{
	_cleanup_free_ char *dir = snapshot_dir(d, s->id);

	log_error("snapshot '%s' of sandbox '%s' failed: %s", s->id, s->sandbox, why);
	if (dir)
		rm_rf(dir);
	if (s->done)
		s->done(s->done_data, s, error, why);
	snapshot_free(s);
}

/* After a scheduled snapshot of sb: its oldest scheduled ones beyond keep go. */
static void
retention(struct sandboxd *d, struct sandbox *sb)
{
	struct list_node *n, *tmp;
	size_t count = 0;

	LIST_FOREACH (n, &d->snapshots) {
		struct snapshot *s = list_entry(n, struct snapshot, link);
		count += s->scheduled && !s->writing && streq(s->sandbox, sb->id);
	}
	LIST_FOREACH_SAFE (n, tmp, &d->snapshots) {
		struct snapshot *s = list_entry(n, struct snapshot, link);
		struct err err = {};
		if (count <= sb->snapshot_keep)
			break;
		if (!s->scheduled || s->writing || !streq(s->sandbox, sb->id))
			continue;
		if (snapshots_delete(d, s, "retention", &err) < 0)
			log_info("sandbox '%s': retention keeps a snapshot for now: %s", sb->id,
			         err.message);
		count--;
	}
}

void
snapshots_written(struct sandboxd *d, struct sandbox *sb, int error, const char *reason)
{
	struct snapshot *s = writing_of(d, sb);
	_cleanup_free_ char *dir = NULL;
	int r;

	if (!s) {
		log_error("sandbox '%s': the backend completed a snapshot that was not under way",
		          sb->id);
		return;
	}
	if (error < 0) {
		failed(d, s, error, reason ? reason : strerror(-error));
		sandbox_notify_waiters(sb);
		return;
	}
	dir = snapshot_dir(d, s->id);
	s->created_at = now_unix_ms();
	s->bytes = dir ? dir_bytes(dir, 0) : 0;
	r = record_write(d, s);
	if (r < 0) {
		_cleanup_free_ char *why =
		        strdup_printf("its record could not be written: %s", strerror(-r));
		failed(d, s, r, why ? why : "its record could not be written");
		sandbox_notify_waiters(sb);
		return;
	}
	s->bytes = dir ? dir_bytes(dir, 0) : s->bytes; /* with its record */
	s->writing = false;
	log_info("sandbox '%s': %s snapshot '%s' written, %llu bytes", sb->id,
	         snapshot_kind_to_string(s->kind), s->id, (unsigned long long)s->bytes);
	(void)sandbox_event(d, sb, "snapshot.created",
	                    json_pack("{s:s, s:I, s:s}", "snapshot", s->id, "bytes",
	                              (json_int_t)s->bytes, "kind",
	                              snapshot_kind_to_string(s->kind)));
	if (s->done)
		s->done(s->done_data, s, 0, NULL);
	s->done = NULL;
	if (s->scheduled && sb->snapshot_every_secs)
		retention(d, sb);
	sandbox_notify_waiters(sb);
}

void
snapshots_abort(struct sandboxd *d, struct sandbox *sb, const char *why)
{
	struct snapshot *s;

	if (sb->op != SANDBOX_OP_SNAPSHOT || !(s = writing_of(d, sb)))
		return;
	failed(d, s, -ECANCELED, why);
}

/* ---- schedules ---- */

int
snapshots_schedule_set(struct sandboxd *d, struct sandbox *sb, uint64_t every_secs, unsigned keep)
{
	uint64_t old_every = sb->snapshot_every_secs;
	unsigned old_keep = sb->snapshot_keep;
	int r;

	sb->snapshot_every_secs = every_secs;
	sb->snapshot_keep = every_secs ? keep : 0;
	r = sandbox_commit(d, sb, false, "updated",
	                   json_pack("{s:[s]}", "fields", "snapshot_schedule"));
	if (r < 0) {
		sb->snapshot_every_secs = old_every;
		sb->snapshot_keep = old_keep;
		(void)sandbox_refresh_json(sb);
		return r;
	}
	sb->snapshot_last = now_unix_ms();
	if (every_secs)
		log_info("sandbox '%s': a snapshot every %llu s, the newest %u kept", sb->id,
		         (unsigned long long)every_secs, keep);
	else
		log_info("sandbox '%s': no scheduled snapshots", sb->id);
	return 0;
}

void
snapshots_housekeeping(struct sandboxd *d, int64_t now_ms)
{
	struct list_node *n;

	if (d->shutting_down)
		return;
	LIST_FOREACH (n, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		struct snapshot *s;
		struct err err = {};

		if (!sb->snapshot_every_secs || sb->state != SANDBOX_RUNNING ||
		    sb->op != SANDBOX_OP_NONE)
			continue;
		if (sb->snapshot_last == 0)
			sb->snapshot_last = now_ms; /* counting starts now */
		if (now_ms - sb->snapshot_last < (int64_t)sb->snapshot_every_secs * 1000)
			continue;
		/* once per period, taken or not: a failure is not retried every second */
		sb->snapshot_last = now_ms;
		if (snapshots_take(d, sb, snapshots_default_kind(d, sb), true, NULL, NULL, &s,
		                   &err) < 0)
			log_warning("sandbox '%s': its scheduled snapshot was not taken: %s",
			            sb->id, err.message[0] ? err.message : "out of memory");
	}
}
