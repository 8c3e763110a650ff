/* volumes.c: volumes, their files and who holds them; see volumes.h. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "log.h"
#include "sandbox.h"
#include "sandboxd.h"
#include "store-volumes.h"
#include "tool.h"
#include "util.h"
#include "volumes.h"

/* The sandbox user's uid and gid in the guest: a volume's root directory is theirs. */
#define VOLUME_ROOT_OWNER "root_owner=1001:1001"

bool
volumes_offered(struct sandboxd *d)
{
	struct backend_caps caps = { .accel = "none" };

	if (!d->backend)
		return false;
	d->backend->ops->caps(d->backend, &caps);
	return caps.volumes;
}

static char *
volumes_dir(struct sandboxd *d)
{
	return strdup_printf("%s/volumes", d->opts->state_dir);
}

static char *
volume_file(struct sandboxd *d, const char *id)
{
	return strdup_printf("%s/volumes/%s.ext4", d->opts->state_dir, id);
}

/* The bytes a volume's file holds on the host (sparse: what the guest wrote, roughly). */
static uint64_t
file_bytes(struct sandboxd *d, const char *id)
{
	_cleanup_free_ char *path = volume_file(d, id);
	struct stat st;

	if (!path || stat(path, &st) < 0)
		return 0;
	return (uint64_t)st.st_blocks * 512;
}

/* Whether sb holds owner's volume name; *ret_rw says whether it writes it. */
static bool
holds(const struct sandbox *sb, const char *owner, const char *name, bool *ret_rw)
{
	size_t i;
	json_t *v;

	if (!sb->owner || !streq(sb->owner, owner))
		return false;
	json_array_foreach (sb->volumes, i, v) {
		const char *n = json_string_value(json_object_get(v, "name"));
		if (n && streq(n, name)) {
			if (ret_rw)
				*ret_rw = !json_is_true(json_object_get(v, "read_only"));
			return true;
		}
	}
	return false;
}

/* The ids of the sandboxes that hold owner's volume name, oldest first. */
static json_t *
attached_ids(struct sandboxd *d, const char *owner, const char *name)
{
	json_t *a = json_array();
	struct list_node *n;

	if (!a)
		return NULL;
	LIST_FOREACH (n, &d->reg.all) {
		const struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		/* the registry is newest first, the answer oldest first */
		if (holds(sb, owner, name, NULL) &&
		    json_array_insert_new(a, 0, json_string(sb->id)) < 0)
			return (json_decref(a), NULL);
	}
	return a;
}

static json_t *
volume_json(struct sandboxd *d, const struct store_volume *v)
{
	char created[32];

	format_rfc3339(v->created_at, created);
	return json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:o}", "id", v->id, "name", v->name,
	                 "owner", v->owner, "size_mb", (json_int_t)v->size_mb, "bytes",
	                 (json_int_t)file_bytes(d, v->id), "created_at", created, "attached",
	                 attached_ids(d, v->owner, v->name));
}

struct copied {
	char id[32];
	uint64_t size_mb;
};

static int
copy_row(const struct store_volume *v, void *data)
{
	struct copied *c = data;

	snprintf(c->id, sizeof(c->id), "%s", v->id);
	c->size_mb = v->size_mb;
	return 0;
}

/* Makes path a sparse ext4 file of size_mb MiB, its root directory the sandbox user's. No
 * inode table is written (lazy_itable_init): a sparse file reads as zeros anyway, so the file
 * stays a few MiB until the guest writes. */
static int
make_file(const char *path, uint64_t size_mb, char **ret_why)
{
	_cleanup_free_ char *size = strdup_printf("%lluM", (unsigned long long)size_mb);
	int fd, r;

	if (!size)
		return -ENOMEM;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return negative_errno();
	r = ftruncate(fd, (off_t)(size_mb << 20)) < 0 ? negative_errno() : 0;
	close(fd);
	if (r < 0)
		return r;
	return run_quiet(
	        NULL,
	        (const char *const[]){ "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "sbxvol", "-E",
	                               VOLUME_ROOT_OWNER ",lazy_itable_init=1,lazy_journal_init=1,"
	                                                 "nodiscard",
	                               path, size, NULL },
	        ret_why);
}

int
volumes_create(struct sandboxd *d, const char *owner, const char *name, uint64_t size_mb,
               json_t **ret, struct err *err)
{
	_cleanup_free_ char *dir = volumes_dir(d), *path = NULL, *tmp = NULL, *why = NULL;
	struct copied found = { 0 };
	struct store_volume row;
	char hex[17], id[32];
	json_t *j;
	int r;

	if (!sandbox_name_valid(name))
		return err_set(err, -EINVAL, ERR_INVALID,
		               "volume name '%.64s' is invalid: use 1 to 63 lowercase letters, "
		               "digits and -, starting with a letter or digit",
		               name);
	if (size_mb < VOLUME_MIN_MB || size_mb > VOLUME_MAX_MB)
		return err_set(err, -EINVAL, ERR_INVALID, "'size_mb' must be %d to %d",
		               VOLUME_MIN_MB, VOLUME_MAX_MB);
	r = store_volume_get(d->store, owner, name, copy_row, &found);
	if (r == 0)
		return err_set(err, -EEXIST, ERR_CONFLICT, "you have a volume called '%s' already",
		               name);
	if (r != -ENOENT)
		return err_set(err, r, ERR_INTERNAL, "the store failed: %s", strerror(-r));
	if (!dir || random_hex(hex, 8) < 0)
		return -ENOMEM;
	snprintf(id, sizeof(id), "vol_%s", hex);
	path = volume_file(d, id);
	tmp = strdup_printf("%s/%s.ext4.tmp", dir, id);
	if (!path || !tmp)
		return -ENOMEM;
	r = mkdir_p(dir, 0700);
	if (r < 0)
		return err_set(err, r, ERR_INTERNAL, "cannot make '%s': %s", dir, strerror(-r));
	r = make_file(tmp, size_mb, &why);
	if (r >= 0 && rename(tmp, path) < 0)
		r = negative_errno();
	if (r < 0) {
		(void)unlink(tmp);
		log_error("volume '%s' of '%s': making its file failed: %s", name, owner,
		          why ? why : strerror(-r));
		return err_set(err, r == -ENOSPC ? -ENOSPC : -EIO, ERR_INTERNAL,
		               "the volume's file could not be made: %s", why ? why : strerror(-r));
	}
	row = (struct store_volume){
		.id = id,
		.owner = owner,
		.name = name,
		.size_mb = size_mb,
		.created_at = now_unix_ms(),
	};
	r = store_volume_insert(d->store, &row);
	if (r < 0) {
		(void)unlink(path);
		if (r == -EEXIST)
			return err_set(err, r, ERR_CONFLICT,
			               "you have a volume called '%s' already", name);
		return err_set(err, -EIO, ERR_INTERNAL, "the store failed: %s", strerror(-r));
	}
	log_info("volume '%s': '%s' of '%s' made (%llu MiB)", id, name, owner,
	         (unsigned long long)size_mb);
	j = volume_json(d, &row);
	if (!j)
		return -ENOMEM;
	*ret = j;
	return 0;
}

/* Deletes volume id's row, then its file: the row first, so that a crash in between leaves a
 * file the next start sweeps, never a row without its file. Shared by one volume's delete and
 * an owner's. */
static int
drop_volume(struct sandboxd *d, const char *id)
{
	_cleanup_free_ char *path = volume_file(d, id);
	int r;

	r = store_volume_delete(d->store, id);
	if (r < 0)
		return r;
	if (path && unlink(path) < 0 && errno != ENOENT)
		log_warning("volume '%s': removing '%s' failed: %m", id, path);
	return 0;
}

int
volumes_delete(struct sandboxd *d, const char *owner, const char *name, struct err *err)
{
	struct copied found = { 0 };
	struct list_node *n;
	int r;

	r = store_volume_get(d->store, owner, name, copy_row, &found);
	if (r == -ENOENT)
		return err_set(err, r, ERR_NOT_FOUND, "you have no volume called '%.64s'", name);
	if (r < 0)
		return err_set(err, r, ERR_INTERNAL, "the store failed: %s", strerror(-r));
	LIST_FOREACH (n, &d->reg.all) {
		const struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (holds(sb, owner, name, NULL))
			return err_set(err, -EBUSY, ERR_CONFLICT,
			               "volume '%s' is attached to sandbox '%s' (%s): delete the "
			               "sandbox first",
			               name, sb->id, sandbox_state_to_string(sb->state));
	}
	r = drop_volume(d, found.id);
	if (r < 0)
		return err_set(err, r, r == -ENOENT ? ERR_NOT_FOUND : ERR_INTERNAL,
		               "the store failed: %s", strerror(-r));
	log_info("volume '%s': '%s' of '%s' deleted", found.id, name, owner);
	return 0;
}

static int
collect_id(const struct store_volume *v, void *data)
{
	json_t *ids = data;

	return json_array_append_new(ids, json_string(v->id)) < 0 ? -ENOMEM : 0;
}

void
volumes_delete_owner(struct sandboxd *d, const char *owner)
{
	json_t *ids = json_array(), *id;
	size_t i;
	int r;

	r = ids ? store_volume_list(d->store, owner, collect_id, ids) : -ENOMEM;
	if (r < 0)
		log_error("volumes of '%s': cannot list them to delete them: %s", owner,
		          strerror(-r));
	json_array_foreach (ids, i, id) {
		r = drop_volume(d, json_string_value(id));
		if (r < 0) {
			log_error("volume '%s' of '%s': cannot delete it: %s",
			          json_string_value(id), owner, strerror(-r));
			continue;
		}
		log_info("volume '%s' of '%s' deleted with its owner", json_string_value(id),
		         owner);
	}
	json_decref(ids);
}

static int
list_one(const struct store_volume *v, void *data)
{
	void **ctx = data;
	json_t *j = volume_json(ctx[0], v);

	if (!j || json_array_append_new(ctx[1], j) < 0)
		return -ENOMEM;
	return 0;
}

json_t *
volumes_list(struct sandboxd *d, const char *owner)
{
	json_t *a = json_array();
	void *ctx[2] = { d, a };

	if (!a || store_volume_list(d->store, owner, list_one, ctx) < 0)
		return (json_decref(a), NULL);
	return a;
}

int
volumes_check_attach(struct sandboxd *d, const struct sandbox *sb, struct err *err)
{
	struct list_node *n;
	size_t i;
	json_t *v;

	if (json_array_size(sb->volumes) == 0)
		return 0;
	if (!volumes_offered(d))
		return err_set(err, -EOPNOTSUPP, ERR_UNSUPPORTED,
		               "this server does not offer volumes");
	json_array_foreach (sb->volumes, i, v) {
		const char *name = json_string_value(json_object_get(v, "name"));
		bool rw = !json_is_true(json_object_get(v, "read_only"));
		struct copied found = { 0 };
		int r;

		if (!name)
			return -EINVAL;
		r = store_volume_get(d->store, sb->owner, name, copy_row, &found);
		if (r == -ENOENT)
			return err_set(err, r, ERR_NOT_FOUND, "you have no volume called '%s'",
			               name);
		if (r < 0)
			return err_set(err, r, ERR_INTERNAL, "the store failed: %s", strerror(-r));
		/* one writer or many readers */
		LIST_FOREACH (n, &d->reg.all) {
			const struct sandbox *o = list_entry(n, struct sandbox, by_created);
			bool o_rw = false;
			if (o == sb || !holds(o, sb->owner, name, &o_rw) || (!rw && !o_rw))
				continue;
			return err_set(
			        err, -EBUSY, ERR_CONFLICT,
			        "volume '%s' is attached to sandbox '%s'%s: a volume has one "
			        "writer or any number of readers",
			        name, o->id, o_rw ? " to write" : "");
		}
	}
	return 0;
}

int
volumes_launch_fill(struct sandboxd *d, const struct sandbox *sb, struct volumes_launch *vl,
                    struct vm_launch *l)
{
	size_t i;
	json_t *v;

	*vl = (struct volumes_launch){ 0 };
	if (json_array_size(sb->volumes) > VOLUMES_ATTACH_MAX)
		return -E2BIG;
	json_array_foreach (sb->volumes, i, v) {
		const char *name = json_string_value(json_object_get(v, "name"));
		const char *path = json_string_value(json_object_get(v, "path"));
		struct copied found = { 0 };
		int r;

		if (!name || !path)
			return -EINVAL;
		r = store_volume_get(d->store, sb->owner, name, copy_row, &found);
		if (r < 0) {
			log_error("sandbox '%s': its volume '%s' is gone: %s", sb->id, name,
			          strerror(-r));
			volumes_launch_done(vl);
			return r;
		}
		vl->files[i] = volume_file(d, found.id);
		if (!vl->files[i]) {
			volumes_launch_done(vl);
			return -ENOMEM;
		}
		vl->v[i] = (struct vm_volume){
			.name = name,
			.file = vl->files[i],
			.mount = path,
			.read_only = json_is_true(json_object_get(v, "read_only")),
		};
		vl->n = i + 1;
	}
	l->volumes = vl->n ? vl->v : NULL;
	l->nvolumes = vl->n;
	return 0;
}

void
volumes_launch_done(struct volumes_launch *vl)
{
	for (size_t i = 0; i < VOLUMES_ATTACH_MAX; i++) {
		free(vl->files[i]);
		vl->files[i] = NULL;
	}
	vl->n = 0;
}

struct sum {
	struct sandboxd *d;
	uint64_t count, mb, bytes;
	bool bytes_too;
};

static int
sum_one(const struct store_volume *v, void *data)
{
	struct sum *s = data;

	s->count++;
	s->mb += v->size_mb;
	if (s->bytes_too)
		s->bytes += file_bytes(s->d, v->id);
	return 0;
}

uint64_t
volumes_disk_mb(struct sandboxd *d, const char *owner)
{
	struct sum s = { .d = d };

	(void)store_volume_list(d->store, owner, sum_one, &s);
	return s.mb;
}

void
volumes_usage(struct sandboxd *d, uint64_t *ret_count, uint64_t *ret_bytes)
{
	struct sum s = { .d = d, .bytes_too = true };

	(void)store_volume_list(d->store, NULL, sum_one, &s);
	*ret_count = s.count;
	*ret_bytes = s.bytes;
}

/* Adds a volume's id to the set (a JSON object) of known ids. */
static int
mark_known(const struct store_volume *v, void *data)
{
	return json_object_set_new(data, v->id, json_true()) < 0 ? -ENOMEM : 0;
}

void
volumes_sweep(struct sandboxd *d)
{
	_cleanup_free_ char *dir = volumes_dir(d);
	DIR *dh = dir ? opendir(dir) : NULL;
	json_t *known = json_object();
	struct dirent *e;
	/* the ids are listed once, not once a file */
	bool listed = known && store_volume_list(d->store, NULL, mark_known, known) >= 0;

	if (!dh) {
		json_decref(known);
		return;
	}
	while ((e = readdir(dh))) {
		char id[64];
		const char *dot = strchr(e->d_name, '.');
		size_t n = dot ? (size_t)(dot - e->d_name) : 0;

		if (e->d_name[0] == '.' || !dot || n >= sizeof(id))
			continue;
		memcpy(id, e->d_name, n);
		id[n] = '\0';
		if (streq(dot, ".ext4") && (!listed || json_object_get(known, id)))
			continue; /* a volume's, or the store cannot say: kept */
		if (!str_has_prefix(e->d_name, "vol_"))
			continue;
		if (unlinkat(dirfd(dh), e->d_name, 0) == 0)
			log_info("volumes: removed '%s', no volume's file", e->d_name);
	}
	closedir(dh);
	json_decref(known);
}
