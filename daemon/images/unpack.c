/* unpack.c: see unpack.h. Every entry's parent is opened with openat2(RESOLVE_IN_ROOT) from the
 * root fd, and the last component is made with *at() calls on that parent that never follow it,
 * so neither "..", nor a symlink (absolute, relative or chained) laid down by this layer or a
 * lower one, leads outside the root. Removal (whiteouts, replaced directories) walks fds with
 * O_NOFOLLOW. Directory mtimes are not set: creating entries inside a directory would change
 * its mtime again, and nothing in a sandbox depends on them. Of the extended attributes only a
 * regular file's security.capability is applied (file capabilities: ping and the like need
 * them), and only when owners are kept (as root); the others (user.*, trusted.*, SELinux
 * labels) mean nothing in a sandbox. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/syscall.h>
#include "hashmap.h"
#include "strv.h"
#include "unpack.h"
#include "util.h"

#define WHITEOUT_PREFIX ".wh."
#define WHITEOUT_OPAQUE ".wh..wh..opq"
#define READ_BLOCK (64 * 1024)
#define CAPS_XATTR_MAX 24 /* struct vfs_ns_cap_data, the largest form */
/* Deeper trees can only be built through symlinked parents; removal stops there. */
#define REMOVE_DEPTH_MAX 1024
#define ERROR_NAME_MAX 256

struct unpack {
	int root_fd;
	struct archive *a;
	const struct unpack_opts *o;
	struct unpack_stats st;
	/* Paths (normalised, relative to the root) this layer created or re-declared: an opaque
	 * marker or a whiteout in this layer must not remove them (they hide lower layers only).
	 * The keys are owned by the array. */
	struct hashmap created;
	char **keys;
	size_t nkeys;
	const char *entry; /* the entry being applied, as the archive names it */
	char *error;
};

static void
unpack_done(struct unpack *u)
{
	hashmap_clear(&u->created);
	strv_free(u->keys);
	if (u->a)
		archive_read_free(u->a);
	free(u->error);
}

/* Records the error (the first one wins) and returns r. */
_printf_(3, 4) static int fail(struct unpack *u, int r, const char *fmt, ...)
{
	_cleanup_free_ char *why = NULL, *name = NULL;
	va_list ap;

	if (u->error)
		return r;
	va_start(ap, fmt);
	if (vasprintf(&why, fmt, ap) < 0)
		why = NULL;
	va_end(ap);
	if (!why)
		return r;
	if (u->entry) {
		name = termsafe_dup(u->entry);
		if (name && strlen(name) > ERROR_NAME_MAX)
			name[ERROR_NAME_MAX] = '\0';
		if (name)
			u->error = strdup_printf("layer entry '%s': %s", name, why);
	} else
		u->error = strdup_printf("layer: %s", why);
	return r;
}

static int
created_add(struct unpack *u, const char *path)
{
	char *k;
	int r;

	if (hashmap_get(&u->created, path))
		return 0;
	r = strv_add(&u->keys, &u->nkeys, path);
	if (r < 0)
		return r;
	k = u->keys[u->nkeys - 1]; /* the array owns it, whether or not the map takes it */
	return hashmap_put(&u->created, k, k) < 0 ? -ENOMEM : 0;
}

static bool
created_has(const struct unpack *u, const char *path)
{
	return hashmap_get(&u->created, path) != NULL;
}

/* Normalises an archive path: leading "/" and "./" go, "." and empty components go, ".."
 * anywhere is refused. Returns the path relative to the root ("" is the root itself). */
static int
normalize_path(const char *in, char **ret)
{
	_cleanup_free_ char *out = NULL;
	size_t len, o = 0;
	const char *p = in;

	if (!in || !*in)
		return -EINVAL;
	len = strlen(in);
	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	out = malloc(len + 1);
	if (!out)
		return -ENOMEM;
	while (*p) {
		const char *s = p;
		size_t n;

		while (*p && *p != '/')
			p++;
		n = (size_t)(p - s);
		if (*p == '/')
			p++;
		if (n == 0 || (n == 1 && s[0] == '.'))
			continue;
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return -EINVAL;
		if (o > 0)
			out[o++] = '/';
		memcpy(out + o, s, n);
		o += n;
	}
	out[o] = '\0';
	*ret = TAKE_PTR(out);
	return 0;
}

static int
open_in_root(int root_fd, const char *path, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	int fd;

	do
		fd = (int)syscall(SYS_openat2, root_fd, *path ? path : ".", &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN);
	return fd < 0 ? negative_errno() : fd;
}

/* Splits "a/b/c" into the parent "a/b" (in place) and the name "c". */
static const char *
split_last(char *path)
{
	char *slash = strrchr(path, '/');

	if (!slash)
		return NULL;
	*slash = '\0';
	return slash + 1;
}

/* Opens the directory dir (relative, normalised) inside the root, creating what is missing
 * with mode 0755 (recorded as created by this layer). */
static int
open_parent(struct unpack *u, const char *dir, bool create)
{
	_cleanup_free_ char *prefix = NULL;
	_cleanup_close_ int fd = -1;
	size_t len = strlen(dir), i = 0;

	fd = open_in_root(u->root_fd, dir, O_PATH | O_DIRECTORY);
	if (fd >= 0 || fd != -ENOENT || !create)
		return fd >= 0 ? TAKE_FD(fd) : fd;

	/* Walk from the root, one component at a time, each resolved from the root again so a
	 * symlink met on the way is still resolved inside it. */
	prefix = strdup(dir);
	if (!prefix)
		return -ENOMEM;
	fd = open_in_root(u->root_fd, "", O_PATH | O_DIRECTORY);
	if (fd < 0)
		return fd;
	while (i < len) {
		size_t start = i;
		int nfd;

		while (i < len && dir[i] != '/')
			i++;
		memcpy(prefix, dir, i);
		prefix[i] = '\0';
		nfd = open_in_root(u->root_fd, prefix, O_PATH | O_DIRECTORY);
		if (nfd == -ENOENT) {
			_cleanup_free_ char *name = strndup(dir + start, i - start);
			int r;

			if (!name)
				return -ENOMEM;
			/* EEXIST here is a dangling symlink in the way: refused. 0755 whatever
			 * the umask: the sandbox user must be able to walk through it. */
			if (mkdirat(fd, name, 0755) < 0 ||
			    fchmodat(fd, name, 0755, AT_SYMLINK_NOFOLLOW) < 0)
				return negative_errno();
			r = created_add(u, prefix);
			if (r < 0)
				return r;
			nfd = open_in_root(u->root_fd, prefix, O_PATH | O_DIRECTORY);
		}
		if (nfd < 0)
			return nfd;
		safe_close(fd);
		fd = nfd;
		if (i < len)
			i++;
	}
	return TAKE_FD(fd);
}

/* Removes name from dfd, recursively if it is a directory, never following a symlink. */
static int
remove_tree(int dfd, const char *name, unsigned depth)
{
	_cleanup_close_ int fd = -1;
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR)
		return negative_errno();
	if (depth >= REMOVE_DEPTH_MAX)
		return -ELOOP;
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	d = fdopendir(fd);
	if (!d)
		return negative_errno();
	fd = -1; /* the DIR owns it */
	while (r == 0) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				r = negative_errno();
			break;
		}
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		r = remove_tree(dirfd(d), de->d_name, depth + 1);
	}
	closedir(d);
	if (r < 0)
		return r;
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return negative_errno();
	return 0;
}

/* Removes from directory fd (at path dir) everything this layer did not create; directories it
 * did create or re-declare are kept and emptied of what lower layers left in them. */
static int
remove_lower(struct unpack *u, int fd, const char *dir, unsigned depth)
{
	DIR *d;
	struct dirent *de;
	int r = 0, dfd;

	if (depth >= REMOVE_DEPTH_MAX)
		return -ELOOP;
	dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return negative_errno();
	d = fdopendir(dfd);
	if (!d) {
		safe_close(dfd);
		return negative_errno();
	}
	while (r == 0) {
		_cleanup_free_ char *path = NULL;
		struct stat st;

		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				r = negative_errno();
			break;
		}
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		path = *dir ? strdup_printf("%s/%s", dir, de->d_name) : strdup(de->d_name);
		if (!path) {
			r = -ENOMEM;
			break;
		}
		if (!created_has(u, path)) {
			r = remove_tree(dirfd(d), de->d_name, 0);
			continue;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = negative_errno();
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			_cleanup_close_ int cfd =
			        openat(dirfd(d), de->d_name,
			               O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (cfd < 0)
				r = negative_errno();
			else
				r = remove_lower(u, cfd, path, depth + 1);
		}
	}
	closedir(d);
	return r;
}

static int
apply_whiteout(struct unpack *u, const char *dir, const char *name)
{
	_cleanup_close_ int pfd = -1;
	_cleanup_free_ char *target = NULL;
	const char *victim;
	int r;

	if (streq(name, WHITEOUT_OPAQUE)) {
		/* The directory the marker is in exists in this layer. */
		pfd = open_parent(u, dir, true);
		if (pfd < 0)
			return fail(u, pfd, "opening its directory: %s", strerror(-pfd));
		if (*dir) {
			r = created_add(u, dir);
			if (r < 0)
				return fail(u, r, "out of memory");
		}
		r = remove_lower(u, pfd, dir, 0);
		if (r < 0)
			return fail(u, r, "emptying the opaque directory: %s", strerror(-r));
		u->st.whiteouts++;
		return 0;
	}

	victim = name + strlen(WHITEOUT_PREFIX);
	if (!*victim || streq(victim, ".") || streq(victim, ".."))
		return fail(u, -EINVAL, "whiteout names no file");
	target = *dir ? strdup_printf("%s/%s", dir, victim) : strdup(victim);
	if (!target)
		return fail(u, -ENOMEM, "out of memory");
	u->st.whiteouts++;
	/* A whiteout hides lower layers only, never this layer's own entry of the same name. */
	if (created_has(u, target))
		return 0;
	pfd = open_parent(u, dir, false);
	if (pfd == -ENOENT)
		return 0; /* nothing there to hide */
	if (pfd < 0)
		return fail(u, pfd, "opening its directory: %s", strerror(-pfd));
	r = remove_tree(pfd, victim, 0);
	if (r < 0)
		return fail(u, r, "removing '%s': %s", victim, strerror(-r));
	return 0;
}

/* Makes room for a new non-directory entry: whatever is at name goes, trees included. */
static int
clear_slot(int pfd, const char *name)
{
	return remove_tree(pfd, name, 0);
}

static int
set_owner_mode(struct unpack *u, int fd, struct archive_entry *e, bool set_mode)
{
	if (u->o->chown) {
		int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
		if (uid < 0 || uid >= UINT32_MAX || gid < 0 || gid >= UINT32_MAX)
			return fail(u, -EINVAL, "uid/gid out of range");
		if (fchown(fd, (uid_t)uid, (gid_t)gid) < 0)
			return fail(u, negative_errno(), "chown: %m");
	}
	/* After chown, which clears the setuid and setgid bits. */
	if (set_mode && fchmod(fd, archive_entry_perm(e) & 07777) < 0)
		return fail(u, negative_errno(), "chmod: %m");
	return 0;
}

/* A file's capabilities, after chown (which clears them). The kernel checks the value. */
static int
set_file_caps(struct unpack *u, int fd, struct archive_entry *e)
{
	const char *name;
	const void *value;
	size_t size;

	if (!u->o->chown)
		return 0;
	archive_entry_xattr_reset(e);
	while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
		if (!streq(name, "security.capability"))
			continue;
		if (size > CAPS_XATTR_MAX)
			return fail(u, -EINVAL, "file capabilities of %zu bytes", size);
		if (fsetxattr(fd, name, value, size, 0) < 0)
			return fail(u, negative_errno(), "setting file capabilities: %m");
	}
	return 0;
}

static void
entry_times(struct archive_entry *e, struct timespec ts[2])
{
	ts[0].tv_sec = ts[1].tv_sec = archive_entry_mtime(e);
	ts[0].tv_nsec = ts[1].tv_nsec = archive_entry_mtime_nsec(e);
	if (ts[1].tv_nsec < 0 || ts[1].tv_nsec >= 1000000000)
		ts[0].tv_nsec = ts[1].tv_nsec = 0;
}

static int
write_data(struct unpack *u, int fd, struct archive_entry *e)
{
	off_t end = 0;

	for (;;) {
		const void *buf;
		size_t size;
		la_int64_t offset;
		const char *p;
		int r = archive_read_data_block(u->a, &buf, &size, &offset);

		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN)
			return fail(u, -EINVAL, "reading data: %s", archive_error_string(u->a));
		if (offset < 0 || (uint64_t)offset > (uint64_t)INT64_MAX - size)
			return fail(u, -EINVAL, "bad data offset");
		if (u->o->max_bytes && size > u->o->max_bytes - MIN(u->st.bytes, u->o->max_bytes))
			return fail(u, -EFBIG, "the layer writes more than %" PRIu64 " bytes",
			            u->o->max_bytes);
		/* Blocks come at their offsets: what lies between is a hole (sparse files). */
		p = buf;
		while (size > 0) {
			ssize_t n = pwrite(fd, p, size, offset);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return fail(u, negative_errno(), "writing: %m");
			}
			p += n;
			size -= (size_t)n;
			offset += n;
			u->st.bytes += (uint64_t)n;
		}
		end = MAX(end, (off_t)offset);
	}
	/* A sparse file may end in a hole. */
	if (archive_entry_size_is_set(e) && archive_entry_size(e) > end &&
	    ftruncate(fd, archive_entry_size(e)) < 0)
		return fail(u, negative_errno(), "setting the size: %m");
	return 0;
}

static int
apply_regular(struct unpack *u, int pfd, const char *name, struct archive_entry *e)
{
	_cleanup_close_ int fd = -1;
	struct timespec ts[2];
	int r;

	r = clear_slot(pfd, name);
	if (r < 0)
		return fail(u, r, "replacing what is there: %s", strerror(-r));
	fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return fail(u, negative_errno(), "creating: %m");
	r = write_data(u, fd, e);
	if (r < 0)
		return r;
	r = set_owner_mode(u, fd, e, true);
	if (r < 0)
		return r;
	r = set_file_caps(u, fd, e);
	if (r < 0)
		return r;
	entry_times(e, ts);
	if (futimens(fd, ts) < 0)
		return fail(u, negative_errno(), "setting times: %m");
	return 0;
}

static int
apply_directory(struct unpack *u, int pfd, const char *name, struct archive_entry *e)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	int r;

	/* A directory re-declared over a directory keeps its contents; anything else goes. */
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
		r = clear_slot(pfd, name);
		if (r < 0)
			return fail(u, r, "replacing what is there: %s", strerror(-r));
		if (mkdirat(pfd, name, 0700) < 0)
			return fail(u, negative_errno(), "creating: %m");
	}
	fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return fail(u, negative_errno(), "opening: %m");
	return set_owner_mode(u, fd, e, true);
}

/* Ownership, mode and times of what is at name without following it (symlinks, fifos). */
static int
set_meta_at(struct unpack *u, int pfd, const char *name, struct archive_entry *e, bool set_mode)
{
	struct timespec ts[2];

	if (u->o->chown) {
		int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
		if (uid < 0 || uid >= UINT32_MAX || gid < 0 || gid >= UINT32_MAX)
			return fail(u, -EINVAL, "uid/gid out of range");
		if (fchownat(pfd, name, (uid_t)uid, (gid_t)gid, AT_SYMLINK_NOFOLLOW) < 0)
			return fail(u, negative_errno(), "chown: %m");
	}
	if (set_mode && fchmodat(pfd, name, archive_entry_perm(e) & 07777, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(u, negative_errno(), "chmod: %m");
	entry_times(e, ts);
	if (utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(u, negative_errno(), "setting times: %m");
	return 0;
}

static int
apply_symlink(struct unpack *u, int pfd, const char *name, struct archive_entry *e)
{
	const char *target = archive_entry_symlink(e);
	int r;

	if (!target)
		target = archive_entry_symlink_utf8(e);
	if (isempty(target))
		return fail(u, -EINVAL, "symlink without a target");
	/* The target is stored as it is: it is only resolved later, inside the root (here) or
	 * inside the guest. */
	r = clear_slot(pfd, name);
	if (r < 0)
		return fail(u, r, "replacing what is there: %s", strerror(-r));
	if (symlinkat(target, pfd, name) < 0)
		return fail(u, negative_errno(), "creating the symlink: %m");
	return set_meta_at(u, pfd, name, e, false);
}

static int
apply_hardlink(struct unpack *u, int pfd, const char *path, const char *name,
               struct archive_entry *e)
{
	const char *raw = archive_entry_hardlink(e);
	_cleanup_free_ char *target = NULL;
	_cleanup_close_ int tfd = -1;
	const char *tname;
	struct stat st;
	int r;

	if (!raw)
		raw = archive_entry_hardlink_utf8(e);
	r = normalize_path(raw, &target);
	if (r < 0 || !*target)
		return fail(u, -EINVAL, "hardlink target is not a path inside the layer");
	if (streq(target, path))
		return 0; /* a link to itself: already there */
	tname = split_last(target);
	tfd = open_parent(u, tname ? target : "", false);
	if (!tname)
		tname = target;
	if (tfd < 0)
		return fail(u, tfd, "hardlink target's directory: %s", strerror(-tfd));
	/* The target itself is never followed: linkat() without AT_SYMLINK_FOLLOW links a
	 * symlink, not what it points to. */
	if (fstatat(tfd, tname, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(u, negative_errno(), "hardlink target: %m");
	if (S_ISDIR(st.st_mode))
		return fail(u, -EPERM, "hardlink target is a directory");
	r = clear_slot(pfd, name);
	if (r < 0)
		return fail(u, r, "replacing what is there: %s", strerror(-r));
	if (linkat(tfd, tname, pfd, name, 0) < 0)
		return fail(u, negative_errno(), "linking: %m");
	return 0;
}

static int
apply_entry(struct unpack *u, struct archive_entry *e)
{
	_cleanup_free_ char *path = NULL, *dir = NULL;
	_cleanup_close_ int pfd = -1;
	const char *name, *hardlink;
	mode_t type = archive_entry_filetype(e);
	int r;

	u->entry = archive_entry_pathname(e);
	if (!u->entry)
		u->entry = archive_entry_pathname_utf8(e);
	if (!u->entry)
		return fail(u, -EINVAL, "entry without a name");
	r = normalize_path(u->entry, &path);
	if (r == -ENOMEM)
		return fail(u, r, "out of memory");
	if (r < 0)
		return fail(u, r, "the name leaves the image root or is not a path");
	hardlink = archive_entry_hardlink(e);
	if (!hardlink)
		hardlink = archive_entry_hardlink_utf8(e);

	if (!*path) {
		/* "./": the root itself, which is ours; its mode and owner stay. */
		if (type == AE_IFDIR && !hardlink)
			return 0;
		return fail(u, -EINVAL, "the image root can only be a directory");
	}

	dir = strdup(path);
	if (!dir)
		return fail(u, -ENOMEM, "out of memory");
	name = split_last(dir);
	if (!name) {
		name = path;
		dir[0] = '\0';
	}

	if (str_has_prefix(name, WHITEOUT_PREFIX))
		return apply_whiteout(u, dir, name);

	if (!hardlink && (type == AE_IFCHR || type == AE_IFBLK)) {
		u->st.skipped_devices++;
		return 0;
	}
	if (!hardlink && type == AE_IFSOCK)
		return 0;
	if (!hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK &&
	    type != AE_IFIFO)
		return fail(u, -EINVAL, "unknown entry type 0%o", (unsigned)type);

	pfd = open_parent(u, dir, true);
	if (pfd < 0)
		return fail(u, pfd, "opening its directory: %s", strerror(-pfd));

	if (hardlink)
		r = apply_hardlink(u, pfd, path, name, e);
	else if (type == AE_IFREG)
		r = apply_regular(u, pfd, name, e);
	else if (type == AE_IFDIR)
		r = apply_directory(u, pfd, name, e);
	else if (type == AE_IFLNK)
		r = apply_symlink(u, pfd, name, e);
	else {
		r = clear_slot(pfd, name);
		if (r < 0)
			return fail(u, r, "replacing what is there: %s", strerror(-r));
		if (mkfifoat(pfd, name, 0600) < 0)
			return fail(u, negative_errno(), "creating the fifo: %m");
		r = set_meta_at(u, pfd, name, e, true);
	}
	if (r < 0)
		return r;
	r = created_add(u, path);
	if (r < 0)
		return fail(u, r, "out of memory");
	u->st.entries++;
	return 0;
}

/* The layer media types are tar, tar+gzip and tar+zstd (Docker's legacy ones add xz and
 * bzip2). Only filters built into libarchive are enabled: archive_read_support_filter_all()
 * would also run external programs (lrzip, lzop, grzip) for a hostile layer's magic bytes. */
static int
setup_archive(struct unpack *u)
{
	int (*const filters[])(struct archive *) = {
		archive_read_support_filter_gzip,
		archive_read_support_filter_zstd,
		archive_read_support_filter_xz,
		archive_read_support_filter_bzip2,
	};

	u->a = archive_read_new();
	if (!u->a)
		return fail(u, -ENOMEM, "out of memory");
	for (size_t i = 0; i < ARRAY_SIZE(filters); i++)
		if (filters[i](u->a) != ARCHIVE_OK)
			return fail(u, -EOPNOTSUPP, "libarchive lacks a built-in decompressor: %s",
			            archive_error_string(u->a));
	/* tar covers ustar, pax and GNU tar (sparse files, long names); empty: a 0-byte layer. */
	if (archive_read_support_format_tar(u->a) != ARCHIVE_OK ||
	    archive_read_support_format_gnutar(u->a) != ARCHIVE_OK ||
	    archive_read_support_format_empty(u->a) != ARCHIVE_OK)
		return fail(u, -EOPNOTSUPP, "libarchive: %s", archive_error_string(u->a));
	return 0;
}

static int unpack_tar(int root_fd, int layer_fd, const struct unpack_opts *o,
                      struct unpack_stats *stats, char **ret_error);

/* ---- decompressing beside the writes ----
 *
 * Decompressing a layer takes as long as writing its files (a 740 MB gzip layer: about 7 s
 * each here), so a compressed layer is decompressed by a thread of its own into a pipe while
 * this one applies the tar stream it reads from that pipe: the two overlap on two cores.
 * The thread only decompresses (libarchive's raw format: the same built-in filters, no
 * archive parsing); every decision about entries stays here. */

struct inflater {
	int in_fd;  /* the layer (not ours) */
	int out_fd; /* the pipe's write end (ours; closed when done) */
	pthread_t thread;
	char why[256]; /* a decompression error, or "" */
};

static bool
compressed(int fd)
{
	static const struct {
		const char *magic;
		size_t len;
	} kinds[] = {
		{ "\x1f\x8b", 2 },                 /* gzip */
		{ "\x28\xb5\x2f\xfd", 4 },         /* zstd */
		{ "\xfd\x37\x7a\x58\x5a\x00", 6 }, /* xz */
		{ "BZh", 3 },                      /* bzip2 */
	};
	unsigned char head[6];
	ssize_t n = pread(fd, head, sizeof(head), 0);

	for (size_t i = 0; n > 0 && i < ARRAY_SIZE(kinds); i++)
		if ((size_t)n >= kinds[i].len && memcmp(head, kinds[i].magic, kinds[i].len) == 0)
			return true;
	return false;
}

static void *
inflater_main(void *data)
{
	struct inflater *in = data;
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	char *buf = malloc(READ_BLOCK * 4);
	sigset_t pipe_sig;

	/* a reader that stopped early makes write() fail with EPIPE, not kill the process */
	sigemptyset(&pipe_sig);
	sigaddset(&pipe_sig, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_sig, NULL);
	if (!a || !buf || archive_read_support_filter_gzip(a) != ARCHIVE_OK ||
	    archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
	    archive_read_support_filter_xz(a) != ARCHIVE_OK ||
	    archive_read_support_filter_bzip2(a) != ARCHIVE_OK ||
	    archive_read_support_format_raw(a) != ARCHIVE_OK ||
	    archive_read_open_fd(a, in->in_fd, READ_BLOCK) != ARCHIVE_OK ||
	    archive_read_next_header(a, &e) != ARCHIVE_OK) {
		snprintf(in->why, sizeof(in->why), "cannot decompress: %s",
		         a && archive_error_string(a) ? archive_error_string(a) : "out of memory");
		goto out;
	}
	for (;;) {
		la_ssize_t n = archive_read_data(a, buf, READ_BLOCK * 4);
		if (n == 0)
			break;
		if (n < 0) {
			snprintf(in->why, sizeof(in->why), "cannot decompress: %s",
			         archive_error_string(a) ? archive_error_string(a) : "?");
			break;
		}
		if (write_all(in->out_fd, buf, (size_t)n) < 0)
			break; /* the reader stopped: it says why */
	}
out:
	free(buf);
	if (a)
		archive_read_free(a);
	close(in->out_fd);
	return NULL;
}

/* Starts the thread; *ret_fd is what to read the tar stream from. */
static int
inflater_start(struct inflater *in, int layer_fd, int *ret_fd)
{
	int p[2], r;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	(void)fcntl(p[1], F_SETPIPE_SZ, 1 << 20); /* fewer wakeups; best effort */
	in->in_fd = layer_fd;
	in->out_fd = p[1];
	in->why[0] = '\0';
	r = pthread_create(&in->thread, NULL, inflater_main, in);
	if (r != 0) {
		close(p[0]);
		close(p[1]);
		return -r;
	}
	*ret_fd = p[0];
	return 0;
}

int
unpack_layer(int root_fd, int layer_fd, const struct unpack_opts *o, struct unpack_stats *stats,
             char **ret_error)
{
	struct inflater in;
	int tar_fd = -1, r;

	if (compressed(layer_fd) && inflater_start(&in, layer_fd, &tar_fd) == 0) {
		r = unpack_tar(root_fd, tar_fd, o, stats, ret_error);
		close(tar_fd); /* unblocks the thread if it was still writing */
		pthread_join(in.thread, NULL);
		if (in.why[0]) {
			/* the stream was cut by a decompression error: that is the reason, not the
			 * truncated tar the reader saw */
			if (ret_error) {
				if (r < 0) /* unpack_tar set it */
					free(*ret_error);
				*ret_error = strdup_printf("layer data: %s", in.why);
			}
			return -EINVAL;
		}
		return r;
	}
	/* not compressed (or no thread to be had): read it here */
	return unpack_tar(root_fd, layer_fd, o, stats, ret_error);
}

static int
unpack_tar(int root_fd, int layer_fd, const struct unpack_opts *o, struct unpack_stats *stats,
           char **ret_error)
{
	_cleanup_(unpack_done) struct unpack u = {
		.root_fd = root_fd,
		.o = o,
		.created = HASHMAP_INIT,
	};
	int r;

	r = setup_archive(&u);
	if (r >= 0 && archive_read_open_fd(u.a, layer_fd, READ_BLOCK) != ARCHIVE_OK)
		r = fail(&u, -EINVAL, "%s", archive_error_string(u.a));
	while (r >= 0) {
		struct archive_entry *e;
		int ar;

		u.entry = NULL;
		ar = archive_read_next_header(u.a, &e);
		if (ar == ARCHIVE_EOF)
			break;
		if (ar < ARCHIVE_WARN) {
			const char *why = archive_error_string(u.a);
			r = fail(&u, -EINVAL, "not a valid tar stream: %s", why ? why : "?");
			break;
		}
		r = apply_entry(&u, e);
	}
	if (stats)
		*stats = u.st;
	if (r < 0) {
		if (ret_error)
			*ret_error = TAKE_PTR(u.error);
		return r;
	}
	return 0;
}
