/* test-unpack.c: applying image layers (daemon/images/unpack.c). Each layer is written here with
 * libarchive's write API (pax, some gzip-compressed) and applied onto a root that sits inside an
 * "outside" directory holding a sentinel file; every test checks that nothing outside the root
 * (and nothing of the host's /etc/passwd) was created, changed or linked. Escape attempts come
 * first, then the OCI layer semantics: whiteouts, opaque directories, modes, owners, replaced
 * entries, hardlinks, sparse and large files, the byte limit and broken archives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include "unpack.h"
#include "util.h"

#define MTIME 1000000000

/* Where every fixture's "outside" directory is made (a tmpfs of its own, as root). */
static char base[64];

struct fixture {
	char outside[96];
	char root[128];
	char sentinel[160]; /* outside/outside-sentinel */
	char target[160];   /* outside/target */
	int root_fd;
	char *snapshot; /* the outside directory, the root left out */
	struct stat passwd_st;
	char *passwd;
	size_t passwd_len;
};

/* ---- the outside world ---- */

static FILE *snap_out;
static const char *snap_skip;

static int
snap_one(const char *path, const struct stat *st, int flag _unused_, struct FTW *ftw _unused_)
{
	if (streq(path, snap_skip))
		return FTW_SKIP_SUBTREE;
	fprintf(snap_out, "%s mode=%o nlink=%lu ino=%lu size=%lld mtime=%lld.%09ld\n", path,
	        (unsigned)st->st_mode, (unsigned long)st->st_nlink, (unsigned long)st->st_ino,
	        (long long)st->st_size, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
	return FTW_CONTINUE;
}

static char *
snapshot(struct fixture *f)
{
	char *s = NULL;
	size_t len = 0;

	snap_out = open_memstream(&s, &len);
	assert_non_null(snap_out);
	snap_skip = f->root;
	assert_int_equal(nftw(f->outside, snap_one, 16, FTW_PHYS | FTW_ACTIONRETVAL), 0);
	fclose(snap_out);
	return s;
}

static char *
read_all(const char *path, size_t *ret_len)
{
	char *s = NULL;
	size_t len = 0;

	if (read_file_max(path, 16 * 1024 * 1024, &s, &len) < 0)
		return NULL;
	if (ret_len)
		*ret_len = len;
	return s;
}

/* Nothing outside the root changed, and the host's /etc/passwd is as it was. */
static void
check_outside(struct fixture *f)
{
	_cleanup_free_ char *now = snapshot(f), *pw = NULL, *sentinel = NULL, *target = NULL;
	struct stat st;
	size_t len = 0;

	assert_string_equal(now, f->snapshot);
	sentinel = read_all(f->sentinel, NULL);
	assert_non_null(sentinel);
	assert_string_equal(sentinel, "sentinel\n");
	target = read_all(f->target, NULL);
	assert_non_null(target);
	assert_string_equal(target, "target\n");
	if (!f->passwd)
		return;
	assert_int_equal(lstat("/etc/passwd", &st), 0);
	assert_int_equal(st.st_ino, f->passwd_st.st_ino);
	assert_int_equal(st.st_nlink, f->passwd_st.st_nlink);
	assert_int_equal(st.st_size, f->passwd_st.st_size);
	assert_int_equal(st.st_mtim.tv_sec, f->passwd_st.st_mtim.tv_sec);
	assert_int_equal(st.st_mtim.tv_nsec, f->passwd_st.st_mtim.tv_nsec);
	pw = read_all("/etc/passwd", &len);
	assert_non_null(pw);
	assert_int_equal(len, f->passwd_len);
	assert_memory_equal(pw, f->passwd, len);
}

static void
write_text(const char *path, const char *text)
{
	assert_int_equal(write_file_atomic(path, text, strlen(text), 0644), 0);
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->outside, sizeof(f->outside), "%s/t.XXXXXX", base);
	assert_non_null(mkdtemp(f->outside));
	snprintf(f->root, sizeof(f->root), "%s/root", f->outside);
	snprintf(f->sentinel, sizeof(f->sentinel), "%s/outside-sentinel", f->outside);
	snprintf(f->target, sizeof(f->target), "%s/target", f->outside);
	assert_int_equal(mkdir(f->root, 0755), 0);
	write_text(f->sentinel, "sentinel\n");
	write_text(f->target, "target\n");
	f->root_fd = open(f->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(f->root_fd >= 0);
	f->snapshot = snapshot(f);
	if (lstat("/etc/passwd", &f->passwd_st) == 0)
		f->passwd = read_all("/etc/passwd", &f->passwd_len);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[160];

	close(f->root_fd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->outside);
	assert_int_equal(system(cmd), 0);
	free(f->snapshot);
	free(f->passwd);
	free(f);
	return 0;
}

/* ---- writing layers ---- */

struct tarw {
	struct archive *a;
	int fd;
};

static struct tarw *
tar_new(bool gzip)
{
	struct tarw *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	t->fd = memfd_create("layer", MFD_CLOEXEC);
	assert_true(t->fd >= 0);
	t->a = archive_write_new();
	assert_int_equal(archive_write_set_format_pax(t->a), ARCHIVE_OK);
	if (gzip)
		assert_int_equal(archive_write_add_filter_gzip(t->a), ARCHIVE_OK);
	assert_int_equal(archive_write_open_fd(t->a, t->fd), ARCHIVE_OK);
	return t;
}

static void
tar_add(struct tarw *t, const char *path, mode_t type, mode_t perm, const char *link,
        const void *data, size_t len, int64_t uid, int64_t gid)
{
	struct archive_entry *e = archive_entry_new();

	archive_entry_set_pathname(e, path);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_uid(e, uid);
	archive_entry_set_gid(e, gid);
	archive_entry_set_mtime(e, MTIME, 0);
	if (type == AE_IFLNK)
		archive_entry_set_symlink(e, link);
	else if (link)
		archive_entry_set_hardlink(e, link);
	if (type == AE_IFCHR || type == AE_IFBLK)
		archive_entry_set_rdev(e, makedev(1, 3));
	archive_entry_set_size(e, type == AE_IFREG && !link ? (int64_t)len : 0);
	assert_int_equal(archive_write_header(t->a, e), ARCHIVE_OK);
	if (type == AE_IFREG && !link && len)
		assert_int_equal(archive_write_data(t->a, data, len), (la_ssize_t)len);
	archive_entry_free(e);
}

static void
add_file(struct tarw *t, const char *path, mode_t perm, const char *text)
{
	tar_add(t, path, AE_IFREG, perm, NULL, text, strlen(text), 0, 0);
}

static void
add_dir(struct tarw *t, const char *path, mode_t perm)
{
	tar_add(t, path, AE_IFDIR, perm, NULL, NULL, 0, 0, 0);
}

static void
add_symlink(struct tarw *t, const char *path, const char *target)
{
	tar_add(t, path, AE_IFLNK, 0777, target, NULL, 0, 0, 0);
}

static void
add_hardlink(struct tarw *t, const char *path, const char *target)
{
	tar_add(t, path, AE_IFREG, 0644, target, NULL, 0, 0, 0);
}

/* Ends the archive; returns the layer's fd, at its start. */
static int
tar_end(struct tarw *t)
{
	int fd = t->fd;

	assert_int_equal(archive_write_close(t->a), ARCHIVE_OK);
	archive_write_free(t->a);
	free(t);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

static int
apply_max(struct fixture *f, struct tarw *t, uint64_t max, struct unpack_stats *st, char **err)
{
	struct unpack_opts o = { .chown = geteuid() == 0, .max_bytes = max };
	int fd = tar_end(t), r;

	*err = NULL;
	r = unpack_layer(f->root_fd, fd, &o, st, err);
	close(fd);
	if (r >= 0)
		assert_null(*err);
	else
		assert_non_null(*err);
	return r;
}

static int
apply(struct fixture *f, struct tarw *t, struct unpack_stats *st, char **err)
{
	return apply_max(f, t, 0, st, err);
}

/* Applies a layer that must succeed. */
static struct unpack_stats
apply_ok(struct fixture *f, struct tarw *t)
{
	struct unpack_stats st = { 0 };
	_cleanup_free_ char *err = NULL;
	int r = apply(f, t, &st, &err);

	if (r < 0)
		fail_msg("unpack failed: %d %s", r, err);
	return st;
}

/* Applies a layer that must be refused, with an error naming the entry. */
static void
apply_refused(struct fixture *f, struct tarw *t, const char *entry)
{
	struct unpack_stats st = { 0 };
	_cleanup_free_ char *err = NULL, *want = strdup_printf("layer entry '%s': ", entry);
	int r = apply(f, t, &st, &err);

	assert_true(r < 0);
	if (!str_has_prefix(err, want))
		fail_msg("error '%s' does not start with '%s'", err, want);
}

/* ---- what is in the root ---- */

static bool
in_root_stat(struct fixture *f, const char *path, struct stat *st)
{
	return fstatat(f->root_fd, path, st, AT_SYMLINK_NOFOLLOW) == 0;
}

static bool
in_root_exists(struct fixture *f, const char *path)
{
	struct stat st;

	return in_root_stat(f, path, &st);
}

static void
assert_root_file(struct fixture *f, const char *path, const char *text)
{
	_cleanup_free_ char *full = strdup_printf("%s/%s", f->root, path), *s = NULL;
	struct stat st;

	if (!in_root_stat(f, path, &st))
		fail_msg("'%s' is missing in the root", path);
	assert_true(S_ISREG(st.st_mode));
	s = read_all(full, NULL);
	assert_non_null(s);
	assert_string_equal(s, text);
}

/* Lists the root's directory dir, sorted, names joined by spaces. */
static char *
root_list(struct fixture *f, const char *dir)
{
	_cleanup_free_ char *full = strdup_printf("%s/%s", f->root, dir);
	struct dirent **names = NULL;
	char *out = calloc(1, 1);
	int n = scandir(full, &names, NULL, alphasort);

	assert_true(n >= 0);
	for (int i = 0; i < n; i++) {
		if (!streq(names[i]->d_name, ".") && !streq(names[i]->d_name, "..")) {
			char *o = strdup_printf("%s%s%s", out, *out ? " " : "", names[i]->d_name);
			free(out);
			out = o;
		}
		free(names[i]);
	}
	free(names);
	return out;
}

static void
assert_root_list(struct fixture *f, const char *dir, const char *want)
{
	_cleanup_free_ char *got = root_list(f, dir);

	assert_string_equal(got, want);
}

/* ---- escape attempts ---- */

static void
test_escape_dotdot(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);

	add_file(t, "ok", 0644, "applied\n");
	add_file(t, "../evil", 0644, "evil\n");
	apply_refused(f, t, "../evil");
	/* what came before the refused entry stays */
	assert_root_file(f, "ok", "applied\n");
	assert_root_list(f, "", "ok");
	check_outside(f);
}

static void
test_escape_dotdot_inside(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(true);

	add_dir(t, "a", 0755);
	add_file(t, "a/../../evil", 0644, "evil\n");
	apply_refused(f, t, "a/../../evil");
	assert_root_list(f, "", "a");
	assert_root_list(f, "a", "");
	check_outside(f);
}

static void
test_escape_absolute_name(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	_cleanup_free_ char *abs = strdup_printf("%s/evil", f->outside);

	add_file(t, "/abs/file", 0644, "abs\n");
	add_file(t, abs, 0644, "in root\n"); /* the outside dir's own absolute path */
	apply_ok(f, t);
	assert_root_file(f, "abs/file", "abs\n");
	assert_root_file(f, abs + 1, "in root\n");
	check_outside(f);
}

static void
test_escape_symlink_to_slash(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct stat st;

	add_symlink(t, "lnk", "/");
	add_file(t, "lnk/evil", 0644, "evil\n");
	apply_ok(f, t);
	assert_root_file(f, "evil", "evil\n");
	assert_true(in_root_stat(f, "lnk", &st) && S_ISLNK(st.st_mode));
	check_outside(f);
}

static void
test_escape_symlink_dotdot(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(true);

	add_symlink(t, "lnk", "../../..");
	add_file(t, "lnk/evil", 0644, "evil\n");
	add_dir(t, "sub", 0755);
	add_symlink(t, "sub/up", "../..");
	add_file(t, "sub/up/evil2", 0644, "evil2\n");
	apply_ok(f, t);
	assert_root_file(f, "evil", "evil\n");
	assert_root_file(f, "evil2", "evil2\n");
	assert_root_list(f, "", "evil evil2 lnk sub");
	check_outside(f);
}

static void
test_escape_symlink_chain(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct stat st;

	add_dir(t, "etc", 0755);
	add_symlink(t, "a", "b");
	add_symlink(t, "b", "/etc");
	add_file(t, "a/passwd", 0644, "image passwd\n");
	apply_ok(f, t);
	assert_root_file(f, "etc/passwd", "image passwd\n");
	assert_true(in_root_stat(f, "a", &st) && S_ISLNK(st.st_mode));
	assert_true(in_root_stat(f, "b", &st) && S_ISLNK(st.st_mode));
	check_outside(f);

	/* A chain ending nowhere: the parent cannot be made, the entry is refused. */
	t = tar_new(false);
	add_symlink(t, "c", "d");
	add_symlink(t, "d", "/nonexistent");
	add_file(t, "c/file", 0644, "x\n");
	apply_refused(f, t, "c/file");
	assert_false(in_root_exists(f, "nonexistent"));
	check_outside(f);
}

static void
test_escape_hardlink_dotdot(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);

	add_hardlink(t, "hl", "../outside-sentinel");
	apply_refused(f, t, "hl");
	assert_false(in_root_exists(f, "hl"));
	check_outside(f);
}

static void
test_escape_hardlink_absolute(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct stat a, b;

	/* The root has no etc/passwd: refused, and the host's is not linked. */
	add_hardlink(t, "pw", "/etc/passwd");
	apply_refused(f, t, "pw");
	assert_false(in_root_exists(f, "pw"));
	check_outside(f);

	/* With one in the root, that one is linked. */
	t = tar_new(true);
	add_dir(t, "etc", 0755);
	add_file(t, "etc/passwd", 0644, "image passwd\n");
	add_hardlink(t, "/pw", "/etc/passwd");
	apply_ok(f, t);
	assert_true(in_root_stat(f, "pw", &a));
	assert_true(in_root_stat(f, "etc/passwd", &b));
	assert_int_equal(a.st_ino, b.st_ino);
	assert_int_equal(a.st_nlink, 2);
	assert_root_file(f, "pw", "image passwd\n");
	check_outside(f);
}

static void
test_escape_symlink_overwrite(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct stat st;

	add_symlink(t, "x", f->target);
	add_file(t, "x", 0644, "replaced\n");
	apply_ok(f, t);
	assert_root_file(f, "x", "replaced\n");
	check_outside(f);

	/* The same across layers, and with a relative link pointing out. */
	t = tar_new(false);
	add_symlink(t, "y", "../target");
	apply_ok(f, t);
	assert_true(in_root_stat(f, "y", &st) && S_ISLNK(st.st_mode));
	t = tar_new(true);
	add_file(t, "y", 0600, "replaced too\n");
	apply_ok(f, t);
	assert_root_file(f, "y", "replaced too\n");
	check_outside(f);
}

static void
test_escape_devices(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct unpack_stats st;

	add_dir(t, "dev", 0755);
	tar_add(t, "dev/null", AE_IFCHR, 0666, NULL, NULL, 0, 0, 0);
	tar_add(t, "dev/sda", AE_IFBLK, 0660, NULL, NULL, 0, 0, 0);
	tar_add(t, "kmem", AE_IFCHR, 0666, NULL, NULL, 0, 0, 0);
	tar_add(t, "fifo", AE_IFIFO, 0640, NULL, NULL, 0, 0, 0);
	st = apply_ok(f, t);
	assert_int_equal(st.skipped_devices, 3);
	assert_root_list(f, "dev", "");
	assert_root_list(f, "", "dev fifo");
	{
		struct stat s;
		assert_true(in_root_stat(f, "fifo", &s));
		assert_true(S_ISFIFO(s.st_mode));
		assert_int_equal(s.st_mode & 07777, 0640);
	}
	check_outside(f);
}

static void
test_escape_whiteout_names(void **state)
{
	struct fixture *f = *state;
	struct tarw *t;

	t = tar_new(false);
	add_file(t, ".wh..", 0644, "");
	apply_refused(f, t, ".wh..");
	t = tar_new(false);
	add_dir(t, "sub", 0755);
	add_file(t, "sub/.wh...", 0644, "");
	apply_refused(f, t, "sub/.wh...");
	t = tar_new(false);
	add_file(t, "../.wh.outside-sentinel", 0644, "");
	apply_refused(f, t, "../.wh.outside-sentinel");
	t = tar_new(false);
	add_file(t, "sub/../../.wh.outside-sentinel", 0644, "");
	apply_refused(f, t, "sub/../../.wh.outside-sentinel");
	/* A directory named ".wh..." is only a name. */
	t = tar_new(false);
	add_file(t, ".wh.../x", 0644, "x\n");
	apply_ok(f, t);
	assert_root_file(f, ".wh.../x", "x\n");
	assert_root_list(f, "", ".wh... sub");
	check_outside(f);
}

static void
test_escape_whiteout_through_symlink(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct unpack_stats st;

	/* A lower layer put a file of the sentinel's name in the root. */
	add_file(t, "outside-sentinel", 0644, "in root\n");
	apply_ok(f, t);

	t = tar_new(false);
	add_symlink(t, "lnk", f->outside);
	add_file(t, "lnk/.wh.outside-sentinel", 0644, "");
	add_symlink(t, "up", "..");
	add_file(t, "up/.wh.target", 0644, "");
	st = apply_ok(f, t);
	assert_int_equal(st.whiteouts, 2);
	assert_root_file(f, "outside-sentinel", "in root\n");
	check_outside(f);

	/* "up" is the root itself: the root's copy goes, the outside one stays. */
	t = tar_new(true);
	add_file(t, "up/.wh.outside-sentinel", 0644, "");
	apply_ok(f, t);
	assert_false(in_root_exists(f, "outside-sentinel"));
	assert_root_list(f, "", "lnk up");
	check_outside(f);
}

static void
test_escape_hardlink_through_dir_symlink(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct stat a, b;

	add_dir(t, "etc", 0755);
	add_file(t, "etc/f", 0644, "f\n");
	add_symlink(t, "d", "/");
	add_symlink(t, "out", f->outside);
	add_hardlink(t, "d/h", "d/etc/f");
	apply_ok(f, t);
	assert_true(in_root_stat(f, "h", &a));
	assert_true(in_root_stat(f, "etc/f", &b));
	assert_int_equal(a.st_ino, b.st_ino);

	/* A target through a symlink pointing out resolves inside the root: nothing there. */
	t = tar_new(false);
	add_hardlink(t, "h2", "out/outside-sentinel");
	apply_refused(f, t, "h2");
	t = tar_new(false);
	add_hardlink(t, "d/h3", "d/../outside-sentinel");
	apply_refused(f, t, "d/h3");
	/* A hardlink to a directory, or to nothing, is refused. */
	t = tar_new(false);
	add_hardlink(t, "h4", "etc");
	apply_refused(f, t, "h4");
	t = tar_new(false);
	add_hardlink(t, "h5", "missing");
	apply_refused(f, t, "h5");
	assert_root_list(f, "", "d etc h out");
	check_outside(f);
}

/* ---- layer semantics ---- */

static void
test_whiteouts_across_layers(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(true);
	struct unpack_stats st;

	add_dir(t, "a", 0755);
	add_file(t, "a/f1", 0644, "1\n");
	add_file(t, "a/f2", 0644, "2\n");
	add_dir(t, "b", 0755);
	add_dir(t, "b/deep", 0755);
	add_file(t, "b/deep/x", 0644, "x\n");
	add_symlink(t, "b/out", f->outside);
	add_file(t, "c", 0644, "c\n");
	apply_ok(f, t);

	t = tar_new(false);
	add_file(t, "a/.wh.f1", 0644, "");
	add_file(t, ".wh.b", 0644, "");
	add_file(t, ".wh.nothing", 0644, "");
	add_file(t, "new", 0644, "new\n");
	add_file(t, ".wh.new", 0644, ""); /* hides lower layers only, not its own layer */
	st = apply_ok(f, t);
	assert_int_equal(st.whiteouts, 4);
	assert_int_equal(st.entries, 1);
	assert_root_list(f, "", "a c new");
	assert_root_list(f, "a", "f2");
	assert_root_file(f, "new", "new\n");
	check_outside(f);
}

static void
lower_for_opaque(struct fixture *f)
{
	struct tarw *t = tar_new(false);

	add_dir(t, "d", 0755);
	add_file(t, "d/old1", 0644, "old\n");
	add_dir(t, "d/sub", 0755);
	add_file(t, "d/sub/old2", 0644, "old\n");
	add_symlink(t, "d/lnk", f->outside);
	add_dir(t, "e", 0755);
	add_file(t, "e/keep", 0644, "keep\n");
	apply_ok(f, t);
}

static void
test_opaque_before(void **state)
{
	struct fixture *f = *state;
	struct tarw *t;
	struct unpack_stats st;

	lower_for_opaque(f);
	t = tar_new(true);
	add_file(t, "d/.wh..wh..opq", 0644, "");
	add_file(t, "d/new1", 0644, "new\n");
	st = apply_ok(f, t);
	assert_int_equal(st.whiteouts, 1);
	assert_root_list(f, "d", "new1");
	assert_root_list(f, "e", "keep");
	check_outside(f);
}

static void
test_opaque_after(void **state)
{
	struct fixture *f = *state;
	struct tarw *t;

	lower_for_opaque(f);
	t = tar_new(false);
	add_dir(t, "d", 0750);
	add_file(t, "d/new1", 0644, "new\n");
	add_dir(t, "d/sub", 0755);
	add_file(t, "d/sub/new2", 0644, "new\n");
	add_file(t, "d/made/by/parents", 0644, "p\n");
	add_file(t, "d/.wh..wh..opq", 0644, "");
	apply_ok(f, t);
	assert_root_list(f, "d", "made new1 sub");
	assert_root_list(f, "d/sub", "new2");
	assert_root_file(f, "d/made/by/parents", "p\n");
	assert_root_list(f, "e", "keep");
	check_outside(f);
}

static void
test_modes_and_owners(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct stat st;
	bool root = geteuid() == 0;

	tar_add(t, "suid", AE_IFREG, 04755, NULL, "#!\n", 3, 1234, 5678);
	tar_add(t, "sgid", AE_IFREG, 02711, NULL, "#!\n", 3, 0, 50);
	tar_add(t, "private", AE_IFREG, 0600, NULL, "p", 1, 1001, 1001);
	tar_add(t, "sticky", AE_IFDIR, 01777, NULL, NULL, 0, 0, 0);
	tar_add(t, "closed", AE_IFDIR, 0700, NULL, NULL, 0, 42, 43);
	tar_add(t, "lnk", AE_IFLNK, 0777, "suid", NULL, 0, 77, 78);
	apply_ok(f, t);

	assert_true(in_root_stat(f, "suid", &st));
	assert_int_equal(st.st_mode & 07777, 04755);
	assert_int_equal(st.st_mtim.tv_sec, MTIME);
	if (root) {
		assert_int_equal(st.st_uid, 1234);
		assert_int_equal(st.st_gid, 5678);
	}
	assert_true(in_root_stat(f, "sgid", &st));
	assert_int_equal(st.st_mode & 07777, 02711);
	if (root)
		assert_int_equal(st.st_gid, 50);
	assert_true(in_root_stat(f, "private", &st));
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_true(in_root_stat(f, "sticky", &st));
	assert_int_equal(st.st_mode & 07777, 01777);
	assert_true(in_root_stat(f, "closed", &st));
	assert_int_equal(st.st_mode & 07777, 0700);
	if (root) {
		assert_int_equal(st.st_uid, 42);
		assert_int_equal(st.st_gid, 43);
	}
	assert_true(in_root_stat(f, "lnk", &st));
	assert_true(S_ISLNK(st.st_mode));
	if (root)
		assert_int_equal(st.st_uid, 77);

	/* A directory re-declared keeps its contents and takes the new mode and owner. */
	t = tar_new(false);
	add_file(t, "closed/inside", 0644, "in\n");
	apply_ok(f, t);
	t = tar_new(false);
	tar_add(t, "closed", AE_IFDIR, 0755, NULL, NULL, 0, 7, 8);
	apply_ok(f, t);
	assert_true(in_root_stat(f, "closed", &st));
	assert_int_equal(st.st_mode & 07777, 0755);
	if (root)
		assert_int_equal(st.st_uid, 7);
	assert_root_file(f, "closed/inside", "in\n");
	check_outside(f);
}

static void
test_replace_file_and_dir(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct stat st;

	add_file(t, "p", 0644, "file\n");
	add_dir(t, "q", 0755);
	add_file(t, "q/inner", 0644, "inner\n");
	add_file(t, "q/sub/x", 0644, "x\n");
	add_symlink(t, "q/sub/out", f->outside);
	apply_ok(f, t);

	t = tar_new(true);
	add_dir(t, "p", 0700);
	add_file(t, "p/c", 0644, "child\n");
	add_file(t, "q", 0600, "now a file\n");
	apply_ok(f, t);
	assert_true(in_root_stat(f, "p", &st) && S_ISDIR(st.st_mode));
	assert_root_file(f, "p/c", "child\n");
	assert_root_file(f, "q", "now a file\n");
	assert_root_list(f, "", "p q");
	check_outside(f);
}

static void
test_hardlink_inside(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	struct stat a, b;

	add_file(t, "f1", 0755, "data\n");
	add_hardlink(t, "bin/f2", "f1");
	add_symlink(t, "s", "f1");
	add_hardlink(t, "s2", "s"); /* links the symlink, not what it points to */
	apply_ok(f, t);
	assert_true(in_root_stat(f, "f1", &a));
	assert_true(in_root_stat(f, "bin/f2", &b));
	assert_int_equal(a.st_ino, b.st_ino);
	assert_int_equal(b.st_nlink, 2);
	assert_true(in_root_stat(f, "s2", &b));
	assert_true(S_ISLNK(b.st_mode));
	check_outside(f);
}

static void
test_sparse_and_large(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(false);
	const size_t logical = 8u << 20, chunk = 4096, big = 3u << 20;
	struct archive_entry *e = archive_entry_new();
	_cleanup_free_ char *data = calloc(1, logical), *bigdata = malloc(big), *got = NULL;
	_cleanup_free_ char *path = strdup_printf("%s/sparse", f->root);
	_cleanup_free_ char *bigpath = strdup_printf("%s/big", f->root);
	struct unpack_stats us;
	struct stat st;
	size_t len;
	uint32_t x = 1;

	assert_non_null(data);
	assert_non_null(bigdata);
	memset(data, 'a', chunk);
	memset(data + (4u << 20), 'b', chunk);
	archive_entry_set_pathname(e, "sparse");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, (la_int64_t)logical);
	archive_entry_sparse_add_entry(e, 0, chunk);
	archive_entry_sparse_add_entry(e, 4u << 20, chunk);
	assert_int_equal(archive_write_header(t->a, e), ARCHIVE_OK);
	assert_int_equal(archive_write_data(t->a, data, logical), (la_ssize_t)logical);
	archive_entry_free(e);
	for (size_t i = 0; i < big; i++) {
		x = x * 1103515245u + 12345u;
		bigdata[i] = (char)(x >> 16);
	}
	tar_add(t, "big", AE_IFREG, 0644, NULL, bigdata, big, 0, 0);
	us = apply_ok(f, t);

	assert_int_equal(us.bytes, 2 * chunk + big);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, logical);
	assert_true((size_t)st.st_blocks * 512 < (1u << 20)); /* the holes stayed holes */
	got = read_all(path, &len);
	assert_non_null(got);
	assert_int_equal(len, logical);
	assert_memory_equal(got, data, logical);
	free(got);
	got = read_all(bigpath, &len);
	assert_non_null(got);
	assert_int_equal(len, big);
	assert_memory_equal(got, bigdata, big);
	check_outside(f);
}

static void
test_max_bytes(void **state)
{
	struct fixture *f = *state;
	struct tarw *t = tar_new(true);
	char block[600];
	struct unpack_stats st = { 0 };
	_cleanup_free_ char *err = NULL;

	memset(block, 'z', sizeof(block));
	tar_add(t, "one", AE_IFREG, 0644, NULL, block, sizeof(block), 0, 0);
	tar_add(t, "two", AE_IFREG, 0644, NULL, block, sizeof(block), 0, 0);
	assert_int_equal(apply_max(f, t, 1000, &st, &err), -EFBIG);
	assert_true(str_has_prefix(err, "layer entry 'two': "));
	assert_true(st.bytes <= 1000);

	/* Exactly at the limit is fine. */
	free(err);
	t = tar_new(false);
	tar_add(t, "three", AE_IFREG, 0644, NULL, block, sizeof(block), 0, 0);
	assert_int_equal(apply_max(f, t, 600, &st, &err), 0);
	check_outside(f);
}

static int
unpack_bytes(struct fixture *f, const void *data, size_t len, char **err)
{
	struct unpack_opts o = { .chown = false };
	int fd = memfd_create("bad", MFD_CLOEXEC), r;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	*err = NULL;
	r = unpack_layer(f->root_fd, fd, &o, NULL, err);
	close(fd);
	return r;
}

static void
test_broken_archives(void **state)
{
	struct fixture *f = *state;
	char garbage[4096];
	uint32_t x = 7;
	_cleanup_free_ char *err = NULL;
	struct stat st;
	char *whole;
	int fd;

	for (size_t i = 0; i < sizeof(garbage); i++) {
		x = x * 1103515245u + 12345u;
		garbage[i] = (char)(x >> 16);
	}
	assert_true(unpack_bytes(f, garbage, sizeof(garbage), &err) < 0);
	assert_non_null(err);
	assert_true(str_has_prefix(err, "layer"));

	/* A gzip layer and a plain one cut in the middle of a file's data. */
	for (int gz = 0; gz < 2; gz++) {
		struct tarw *t = tar_new(gz);
		char block[20000];

		memset(block, 'q', sizeof(block));
		tar_add(t, "first", AE_IFREG, 0644, NULL, "1\n", 2, 0, 0);
		tar_add(t, "cut", AE_IFREG, 0644, NULL, block, sizeof(block), 0, 0);
		fd = tar_end(t);
		assert_int_equal(fstat(fd, &st), 0);
		whole = malloc((size_t)st.st_size);
		assert_int_equal(read(fd, whole, (size_t)st.st_size), st.st_size);
		close(fd);
		free(err);
		assert_true(unpack_bytes(f, whole, (size_t)st.st_size / 2, &err) < 0);
		assert_non_null(err);
		free(whole);
	}
	/* An empty layer is an empty archive. */
	free(err);
	assert_int_equal(unpack_bytes(f, "", 0, &err), 0);
	check_outside(f);
}

static int
run_all(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_escape_dotdot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_dotdot_inside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_absolute_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_symlink_to_slash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_symlink_dotdot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_symlink_chain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_hardlink_dotdot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_hardlink_absolute, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_symlink_overwrite, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_devices, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_whiteout_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_whiteout_through_symlink, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_escape_hardlink_through_dir_symlink, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_whiteouts_across_layers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_opaque_before, setup, teardown),
		cmocka_unit_test_setup_teardown(test_opaque_after, setup, teardown),
		cmocka_unit_test_setup_teardown(test_modes_and_owners, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replace_file_and_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hardlink_inside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sparse_and_large, setup, teardown),
		cmocka_unit_test_setup_teardown(test_max_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_broken_archives, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* As root, a regression in unpack.c would write where the escape fixtures point: the host's
 * /etc/passwd, "/". So the tests run in a child with a mount namespace of its own in which "/"
 * is read-only and the fixtures live on a tmpfs: such a write fails, and its test with it,
 * instead of landing on the host. */
int
main(void)
{
	int status;
	pid_t pid;

	snprintf(base, sizeof(base), "/tmp/test-unpack.XXXXXX");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	if (geteuid() != 0) {
		status = run_all();
		rmdir(base);
		return status;
	}
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("tmpfs", base, "tmpfs", 0, "mode=0700") < 0 ||
		    mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
			fprintf(stderr, "warning: no read-only mount namespace (%m): the escape "
			                "fixtures run against the real host\n");
		_exit(run_all());
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return 1;
	rmdir(base);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
