/* initramfs.c: see initramfs.h. */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include "initramfs.h"
#include "tool.h"
#include "util.h"

#define AGENT_MAX (256u * 1024 * 1024)
#define MODULE_MAX (64u * 1024 * 1024)

/* ---- the cpio writer ---- */

/* The error libarchive holds, as -errno; its own errors that name no errno are -EIO. */
static int
cpio_error(struct bundle_cpio *c)
{
	int e = archive_errno(c->a);

	return e > 0 ? -e : -EIO;
}

/* libarchive's open callback: an fd that is not open fails here, before any entry. */
static int
cpio_open(struct archive *a, void *userdata)
{
	struct bundle_cpio *c = userdata;
	struct stat st;

	if (fstat(c->fd, &st) < 0) {
		archive_set_error(a, errno, "fd %d: %s", c->fd, strerror(errno));
		return ARCHIVE_FATAL;
	}
	return ARCHIVE_OK;
}

/* libarchive's write callback: all of the block or an error, and nothing once an error is
 * kept (so that releasing an archive given up on writes no trailer). */
static la_ssize_t
cpio_write(struct archive *a, void *userdata, const void *p, size_t n)
{
	struct bundle_cpio *c = userdata;
	int r = c->error ? c->error : write_all(c->fd, p, n);

	if (r < 0) {
		archive_set_error(a, -r, "%s", strerror(-r));
		return -1;
	}
	return (la_ssize_t)n;
}

void
bundle_cpio_init(struct bundle_cpio *c, int fd)
{
	*c = (struct bundle_cpio){ .fd = fd, .next_ino = 1 };
	c->a = archive_write_new();
	if (!c->a) {
		c->error = -ENOMEM;
		return;
	}
	/* Written in 64 KiB blocks, the last one not padded: the archive ends with its trailer. */
	if (archive_write_set_format_cpio_newc(c->a) != ARCHIVE_OK ||
	    archive_write_set_bytes_per_block(c->a, 64 * 1024) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(c->a, 1) != ARCHIVE_OK ||
	    archive_write_open2(c->a, c, cpio_open, cpio_write, NULL, NULL) != ARCHIVE_OK)
		c->error = cpio_error(c);
}

/* One entry: owned by root, mtime 0, the next inode number. A symlink's target is its body;
 * a regular file's body is data. */
static int
cpio_entry(struct bundle_cpio *c, const char *name, mode_t mode, unsigned nlink, unsigned rmajor,
           unsigned rminor, const char *target, const void *data, size_t len)
{
	struct archive_entry *e;
	int r;

	if (c->error)
		return c->error;
	while (*name == '/')
		name++;
	if (*name == '\0' || strlen(name) >= PATH_MAX || len > UINT32_MAX)
		return c->error = -EINVAL;
	e = archive_entry_new();
	if (!e)
		return c->error = -ENOMEM;
	archive_entry_set_pathname(e, name);
	archive_entry_set_mode(e, mode);
	archive_entry_set_ino(e, c->next_ino++);
	archive_entry_set_nlink(e, nlink);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	archive_entry_set_mtime(e, 0, 0);
	archive_entry_set_size(e, (la_int64_t)len);
	if (S_ISCHR(mode) || S_ISBLK(mode)) {
		archive_entry_set_rdevmajor(e, rmajor);
		archive_entry_set_rdevminor(e, rminor);
	}
	if (target)
		archive_entry_set_symlink(e, target);
	r = archive_write_header(c->a, e);
	if (r == ARCHIVE_OK && len > 0 && archive_write_data(c->a, data, len) != (la_ssize_t)len)
		r = ARCHIVE_FATAL;
	archive_entry_free(e);
	if (r != ARCHIVE_OK)
		c->error = cpio_error(c);
	return c->error;
}

int
bundle_cpio_dir(struct bundle_cpio *c, const char *name, mode_t perm)
{
	return cpio_entry(c, name, S_IFDIR | (perm & 07777), 2, 0, 0, NULL, NULL, 0);
}

int
bundle_cpio_file(struct bundle_cpio *c, const char *name, mode_t perm, const void *data, size_t len)
{
	return cpio_entry(c, name, S_IFREG | (perm & 07777), 1, 0, 0, NULL, data, len);
}

int
bundle_cpio_node(struct bundle_cpio *c, const char *name, mode_t mode, unsigned major,
                 unsigned minor)
{
	if (!S_ISCHR(mode) && !S_ISBLK(mode))
		return c->error ? c->error : (c->error = -EINVAL);
	return cpio_entry(c, name, mode, 1, major, minor, NULL, NULL, 0);
}

int
bundle_cpio_symlink(struct bundle_cpio *c, const char *name, const char *target)
{
	return cpio_entry(c, name, S_IFLNK | 0777, 1, 0, 0, target, NULL, 0);
}

int
bundle_cpio_finish(struct bundle_cpio *c)
{
	int r;

	/* Closing writes the trailer (TRAILER!!!, inode 0, nlink 1) and what is buffered. */
	if (c->error == 0 && archive_write_close(c->a) != ARCHIVE_OK)
		c->error = cpio_error(c);
	r = c->error;
	bundle_cpio_done(c);
	return c->error = r;
}

void
bundle_cpio_done(struct bundle_cpio *c)
{
	if (!c->a)
		return;
	/* archive_write_free() closes an archive still open, trailer included: with an error
	 * kept, cpio_write() refuses all of it. After bundle_cpio_finish() it writes nothing. */
	if (c->error == 0)
		c->error = -ECANCELED;
	(void)archive_write_free(c->a);
	c->a = NULL;
}

/* ---- the initramfs ---- */

int
bundle_write_initramfs(const char *path, const char *agent_path, const char *modules_dir,
                       char *const *modules, size_t n_modules, char ret_sha256[static 65],
                       uint64_t *ret_agent_size)
{
	static const struct {
		const char *name;
		mode_t perm;
	} dirs[] = {
		{ "dev", 0755 }, { "proc", 0555 }, { "sys", 0555 },
		{ "run", 0755 }, { "tmp", 01777 }, { "newroot", 0755 },
		{ "mnt", 0755 }, { "lib", 0755 },  { "lib/modules", 0755 },
	};
	_cleanup_free_ char *agent = NULL, *tmp = NULL;
	_cleanup_buf_ struct buf order = BUF_INIT(64 * 1024);
	_cleanup_close_ int fd = -1;
	_cleanup_(bundle_cpio_done) struct bundle_cpio c = { 0 };
	char sha[65];
	size_t agent_len;
	int r;

	r = read_file_max(agent_path, AGENT_MAX, &agent, &agent_len);
	if (r < 0)
		return r;
	if (agent_len == 0)
		return -ENOEXEC;
	r = sha256_hex(agent, agent_len, sha);
	if (r < 0)
		return r;
	tmp = strdup_printf("%s.tmp-%d", path, (int)getpid());
	if (!tmp)
		return -ENOMEM;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return negative_errno();
	if (fchmod(fd, 0644) < 0) {
		r = negative_errno();
		goto fail;
	}
	bundle_cpio_init(&c, fd);
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
		bundle_cpio_dir(&c, dirs[i].name, dirs[i].perm);
	/* The kernel opens /dev/console before the agent mounts devtmpfs over /dev. */
	bundle_cpio_node(&c, "dev/console", S_IFCHR | 0600, 5, 1);
	bundle_cpio_file(&c, "init", 0755, agent, agent_len);
	for (size_t i = 0; i < n_modules && c.error == 0; i++) {
		_cleanup_free_ char *src = NULL, *dst = NULL, *data = NULL;
		size_t len;

		if (isempty(modules[i]) || strchr(modules[i], '/') || streq(modules[i], "order") ||
		    modules[i][0] == '.') {
			r = -EINVAL;
			goto fail;
		}
		src = strdup_printf("%s/%s", modules_dir, modules[i]);
		dst = strdup_printf("lib/modules/%s", modules[i]);
		if (!src || !dst || buf_printf(&order, "%s\n", modules[i]) < 0) {
			r = -ENOMEM;
			goto fail;
		}
		r = read_file_max(src, MODULE_MAX, &data, &len);
		if (r < 0)
			goto fail;
		bundle_cpio_file(&c, dst, 0644, data, len);
	}
	bundle_cpio_file(&c, "lib/modules/order", 0644, order.data ? order.data : "", order.len);
	r = bundle_cpio_finish(&c);
	if (r == 0 && fsync(fd) < 0)
		r = negative_errno();
	if (r < 0)
		goto fail;
	fd = safe_close(fd);
	if (rename(tmp, path) < 0) {
		r = negative_errno();
		goto fail;
	}
	memcpy(ret_sha256, sha, sizeof(sha));
	*ret_agent_size = agent_len;
	return 0;
fail:
	(void)unlink(tmp);
	return r;
}
