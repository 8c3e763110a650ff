/* disk.c: see disk.h. mkfs.ext4 and qemu-img run as children (see tool.h); every result is
 * made under a temporary name and linked or renamed into place. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "disk.h"
#include "log.h"
#include "tool.h"
#include "util.h"

static int
punch(int fd, off_t from, off_t len)
{
	if (len <= 0)
		return 0;
	return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, from, len) < 0
	               ? negative_errno()
	               : 0;
}

/* Makes a freshly made file sparse again: mkfs zeroes inode tables with fallocate(ZERO_RANGE),
 * which leaves allocated "unwritten" extents (SEEK_DATA calls them holes), and writes some
 * whole blocks of zeros. Both read as zeros, so punching them changes no byte. */
static int
dig_holes(int fd)
{
	enum {
		BLOCK = 4096,
		CHUNK = 256 * BLOCK
	};
	static const char zeros[BLOCK];
	_cleanup_free_ char *buf = malloc(CHUNK);
	struct stat st;
	off_t pos = 0;
	int r;

	if (!buf)
		return -ENOMEM;
	if (fstat(fd, &st) < 0)
		return negative_errno();
	while (pos < st.st_size) {
		off_t data = lseek(fd, pos, SEEK_DATA), end;

		if (data < 0 && errno != ENXIO)
			return negative_errno();
		if (data < 0)
			data = st.st_size;
		r = punch(fd, pos, data - pos);
		if (r < 0 || data >= st.st_size)
			return r;
		end = lseek(fd, data, SEEK_HOLE);
		if (end < 0)
			return negative_errno();
		for (pos = data; pos < end;) {
			ssize_t n = pread(fd, buf, (size_t)MIN((off_t)CHUNK, end - pos), pos);
			off_t run = -1;

			if (n <= 0)
				return n < 0 ? negative_errno() : -EIO;
			for (ssize_t i = 0; i < n; i += BLOCK) {
				size_t len = (size_t)MIN((ssize_t)BLOCK, n - i);
				bool zero = memcmp(buf + i, zeros, len) == 0;

				if (zero && run < 0)
					run = pos + i;
				if (!zero && run >= 0) {
					r = punch(fd, run, pos + i - run);
					if (r < 0)
						return r;
					run = -1;
				}
			}
			if (run >= 0 && (r = punch(fd, run, pos + n - run)) < 0)
				return r;
			pos += n;
		}
	}
	return 0;
}

int
bundle_blank_disk(const char *state_dir, uint64_t size_mb, char **ret_path)
{
	_cleanup_free_ char *dir = NULL, *path = NULL, *tmp = NULL, *err = NULL;
	char size[32];
	int fd, r;

	if (size_mb == 0 || size_mb > 16ull * 1024 * 1024) {
		log_error("blank disk: %llu MiB is out of range (1 MiB to 16 TiB)",
		          (unsigned long long)size_mb);
		return -ERANGE;
	}
	dir = strdup_printf("%s/vm", state_dir);
	path = strdup_printf("%s/blank-%llu.ext4", dir ? dir : "", (unsigned long long)size_mb);
	tmp = strdup_printf("%s.tmp-XXXXXX", path ? path : "");
	if (!dir || !path || !tmp)
		return -ENOMEM;
	if (is_file(path)) {
		*ret_path = TAKE_PTR(path);
		return 0;
	}
	if (!is_dir(dir) && (r = mkdir_mode(dir, 0755)) < 0) {
		log_error("blank disk: cannot create '%s': %s", dir, strerror(-r));
		return r;
	}
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		r = negative_errno();
		log_error("blank disk: cannot create a file in '%s': %s", dir, strerror(-r));
		return r;
	}
	(void)fchmod(fd, 0644);
	close(fd);
	snprintf(size, sizeof(size), "%lluM", (unsigned long long)size_mb);
	/* No journal: nothing to replay and no 32 MiB of zeroed blocks in every layer. Inode
	 * tables marked zeroed (lazy_itable_init=0), or the guest's ext4lazyinit would write
	 * them into every sandbox's layer; the zeros are punched out again below. No blocks
	 * reserved for root: the sandbox user gets the whole disk. */
	r = run_quiet(NULL,
	              (const char *const[]){ "mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m",
	                                     "0", "-E", "root_owner=0:0,lazy_itable_init=0", "-L",
	                                     "sbxupper", tmp, size, NULL },
	              &err);
	if (r < 0) {
		log_error("blank disk '%s': %s", path, err ? err : strerror(-r));
		(void)unlink(tmp);
		return r;
	}
	fd = open(tmp, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	r = fd < 0 ? negative_errno() : dig_holes(fd);
	if (r == 0 && fsync(fd) < 0)
		r = negative_errno();
	if (fd >= 0)
		close(fd);
	if (r < 0 && r != -EOPNOTSUPP) {
		log_error("blank disk '%s': cannot make it sparse: %s", path, strerror(-r));
		(void)unlink(tmp);
		return r;
	}
	/* link(), not rename(): a blank that exists is never replaced, whoever made it, because
	 * layers already backed by it depend on its exact bytes. */
	if (link(tmp, path) < 0 && errno != EEXIST) {
		r = negative_errno();
		log_error("blank disk: cannot create '%s': %s", path, strerror(-r));
		(void)unlink(tmp);
		return r;
	}
	(void)unlink(tmp);
	*ret_path = TAKE_PTR(path);
	return 0;
}

/* The template layer beside the blank, made once by qemu-img (link(): one maker wins). */
static int
make_layer_template(const char *blank, const char *template)
{
	_cleanup_free_ char *tmp = NULL, *err = NULL;
	int r;

	/* "./" keeps qemu-img from reading "name:rest" as a protocol prefix. */
	tmp = strdup_printf("%s%s.tmp-%d", template[0] == '/' ? "" : "./", template, (int)getpid());
	if (!tmp)
		return -ENOMEM;
	(void)unlink(tmp);
	r = run_quiet(NULL,
	              (const char *const[]){ "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw",
	                                     "-b", blank, tmp, NULL },
	              &err);
	if (r < 0) {
		log_error("layer template '%s': %s", template, err ? err : strerror(-r));
		(void)unlink(tmp);
		return r;
	}
	if (chmod(tmp, 0600) < 0 || (link(tmp, template) < 0 && errno != EEXIST)) {
		r = negative_errno();
		log_error("layer template '%s': %s", template, strerror(-r));
	}
	(void)unlink(tmp);
	return r;
}

/* Copies the template to a new file dst, in the kernel (copy_file_range: no buffer here, and
 * a filesystem that can shares the blocks), and syncs it: the layer must be whole on disk
 * before a VM writes to it. */
static int
copy_layer(const char *template, const char *dst)
{
	_cleanup_close_ int in = open(template, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_close_ int out = -1;
	struct stat st;

	if (in < 0 || fstat(in, &st) < 0)
		return negative_errno();
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0)
		return negative_errno();
	for (off_t done = 0; done < st.st_size;) {
		ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)(st.st_size - done), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 &&
		    (errno == EXDEV || errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)) {
			/* vm/ and vms/ on different filesystems: through a buffer */
			char chunk[65536];
			int w;
			n = read(in, chunk, sizeof(chunk));
			if (n > 0 && (w = write_all(out, chunk, (size_t)n)) < 0)
				return w;
		}
		if (n < 0)
			return negative_errno();
		if (n == 0)
			return -EIO; /* the template shrank under us */
		done += n;
	}
	return fsync(out) < 0 ? negative_errno() : 0;
}

int
bundle_make_layer(const char *blank, const char *path)
{
	_cleanup_free_ char *abs = realpath(blank, NULL), *template = NULL, *tmp = NULL;
	int r;

	if (!abs) {
		r = negative_errno();
		log_error("layer '%s': blank disk '%s': %s", path, blank, strerror(-r));
		return r;
	}
	/* Every new layer over one blank is the same few hundred KiB (the design relies on it:
	 * template clones), so qemu-img makes the first, as a template beside the blank, and
	 * the rest are copies: no child process to wait for on the daemon's loop. */
	template = strdup_printf("%s.layer.qcow2", abs);
	tmp = strdup_printf("%s.tmp-%d", path, (int)getpid());
	if (!template || !tmp)
		return -ENOMEM;
	if (access(template, F_OK) < 0) {
		r = make_layer_template(abs, template);
		if (r < 0)
			return r;
	}
	(void)unlink(tmp);
	r = copy_layer(template, tmp);
	if (r == 0 && rename(tmp, path) < 0)
		r = negative_errno();
	if (r < 0) {
		log_error("layer '%s': %s", path, strerror(-r));
		(void)unlink(tmp);
	}
	return r;
}
