/* initramfs.c: see initramfs.h. */
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include "initramfs.h"
#include "tool.h"
#include "util.h"

#define AGENT_MAX (256u * 1024 * 1024)
#define MODULE_MAX (64u * 1024 * 1024)

/* ---- the cpio writer ---- */

void
bundle_cpio_init(struct bundle_cpio *c, int fd)
{
	*c = (struct bundle_cpio){ .fd = fd, .next_ino = 1 };
}

static int
cpio_put(struct bundle_cpio *c, const void *p, size_t n)
{
	int r;

	if (c->error)
		return c->error;
	r = write_all(c->fd, p, n);
	if (r < 0)
		return c->error = r;
	c->offset += n;
	return 0;
}

static int
cpio_pad(struct bundle_cpio *c)
{
	static const char zeros[4];

	return cpio_put(c, zeros, (4 - (c->offset & 3)) & 3);
}

static int
cpio_entry(struct bundle_cpio *c, const char *name, uint32_t ino, mode_t mode, unsigned nlink,
           unsigned rmajor, unsigned rminor, const void *data, size_t len)
{
	char hdr[6 + 13 * 8 + 1];
	size_t namesize;

	if (c->error)
		return c->error;
	while (*name == '/')
		name++;
	namesize = strlen(name) + 1;
	if (namesize < 2 || namesize > PATH_MAX || len > UINT32_MAX)
		return c->error = -EINVAL;
	snprintf(hdr, sizeof(hdr), "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
	         ino, (unsigned)mode, 0u, 0u, nlink, 0u, (unsigned)len, 0u, 0u, rmajor, rminor,
	         (unsigned)namesize, 0u);
	cpio_put(c, hdr, 110);
	cpio_put(c, name, namesize);
	cpio_pad(c);
	if (len > 0) {
		cpio_put(c, data, len);
		cpio_pad(c);
	}
	return c->error;
}

int
bundle_cpio_dir(struct bundle_cpio *c, const char *name, mode_t perm)
{
	return cpio_entry(c, name, c->next_ino++, S_IFDIR | (perm & 07777), 2, 0, 0, NULL, 0);
}

int
bundle_cpio_file(struct bundle_cpio *c, const char *name, mode_t perm, const void *data, size_t len)
{
	return cpio_entry(c, name, c->next_ino++, S_IFREG | (perm & 07777), 1, 0, 0, data, len);
}

int
bundle_cpio_node(struct bundle_cpio *c, const char *name, mode_t mode, unsigned major,
                 unsigned minor)
{
	if (!S_ISCHR(mode) && !S_ISBLK(mode))
		return c->error ? c->error : (c->error = -EINVAL);
	return cpio_entry(c, name, c->next_ino++, mode, 1, major, minor, NULL, 0);
}

int
bundle_cpio_symlink(struct bundle_cpio *c, const char *name, const char *target)
{
	return cpio_entry(c, name, c->next_ino++, S_IFLNK | 0777, 1, 0, 0, target, strlen(target));
}

int
bundle_cpio_finish(struct bundle_cpio *c)
{
	/* The trailer is the one entry whose name may not be stripped of anything. */
	return cpio_entry(c, "TRAILER!!!", 0, 0, 1, 0, 0, NULL, 0);
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
	struct bundle_cpio c;
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
