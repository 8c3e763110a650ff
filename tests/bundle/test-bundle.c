/* test-bundle.c: the guest bundle's pieces without apt: the newc cpio writer (read back
 * field by field), module load order from a modules.dep fixture and from .modinfo, the
 * manifest round trip, bundle_load rebuilding the initramfs when the agent changes, vmlinux
 * extraction from a synthetic bzImage, and blank disks and qcow2 layers with the real tools. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "bundle.h"
#include "elf64.h"
#include "harness.h"
#include "initramfs.h"
#include "modules.h"
#include "strv.h"
#include "util.h"
#include "vmlinux.h"

/* ---- helpers ---- */

static char *
make_tmpdir(void)
{
	char *d = strdup("/tmp/test-bundle.XXXXXX");

	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static void
remove_tree(const char *dir)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		execlp("rm", "rm", "-rf", "--", dir, (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
}

static void
put_file(const char *path, const void *data, size_t len)
{
	_cleanup_free_ char *dir = strdup(path);
	char *slash = strrchr(dir, '/');

	*slash = '\0';
	assert_int_equal(mkdir_p(dir, 0755), 0);
	assert_int_equal(write_file_atomic(path, data, len, 0644), 0);
}

static void put_filef(const char *data, const char *fmt, ...) _printf_(2, 3);

static void
put_filef(const char *data, const char *fmt, ...)
{
	_cleanup_free_ char *path = NULL;
	va_list ap;

	va_start(ap, fmt);
	assert_true(vasprintf(&path, fmt, ap) >= 0);
	va_end(ap);
	put_file(path, data, strlen(data));
}

static char *
slurp(const char *path, size_t *len)
{
	char *data = NULL;

	assert_int_equal(read_file_max(path, 256u << 20, &data, len), 0);
	return data;
}

static bool
have_tool(const char *name)
{
	_cleanup_free_ char *cmd =
	        strdup_printf("PATH=\"$PATH:/usr/sbin:/sbin\" command -v %s >/dev/null 2>&1", name);
	return system(cmd) == 0;
}

static int
run_sh(const char *fmt, ...)
{
	_cleanup_free_ char *cmd = NULL;
	va_list ap;

	va_start(ap, fmt);
	assert_true(vasprintf(&cmd, fmt, ap) >= 0);
	va_end(ap);
	return system(cmd);
}

/* ---- a newc reader ---- */

struct centry {
	char name[256];
	unsigned ino, mode, uid, gid, nlink, mtime, filesize, rmajor, rminor;
	const unsigned char *data;
};

static unsigned
hex8(const unsigned char *p)
{
	char s[9];

	memcpy(s, p, 8);
	s[8] = '\0';
	return (unsigned)strtoul(s, NULL, 16);
}

/* Parses an archive, checking magic and 4-byte alignment of every header and data start.
 * Returns the number of entries before the trailer. */
static size_t
parse_cpio(const unsigned char *p, size_t len, struct centry *out, size_t max)
{
	size_t off = 0, n = 0;

	for (;;) {
		struct centry e = { 0 };
		unsigned namesize;

		assert_int_equal(off % 4, 0);
		assert_true(off + 110 <= len);
		assert_memory_equal(p + off, "070701", 6);
		e.ino = hex8(p + off + 6);
		e.mode = hex8(p + off + 14);
		e.uid = hex8(p + off + 22);
		e.gid = hex8(p + off + 30);
		e.nlink = hex8(p + off + 38);
		e.mtime = hex8(p + off + 46);
		e.filesize = hex8(p + off + 54);
		e.rmajor = hex8(p + off + 78);
		e.rminor = hex8(p + off + 86);
		namesize = hex8(p + off + 94);
		assert_int_equal(hex8(p + off + 102), 0); /* check */
		assert_true(namesize > 1 && namesize < sizeof(e.name));
		assert_true(off + 110 + namesize <= len);
		memcpy(e.name, p + off + 110, namesize);
		assert_int_equal(e.name[namesize - 1], '\0');
		off = (off + 110 + namesize + 3) & ~(size_t)3;
		e.data = p + off;
		assert_true(off + e.filesize <= len);
		off = (off + e.filesize + 3) & ~(size_t)3;
		if (streq(e.name, "TRAILER!!!")) {
			assert_int_equal(off, len);
			return n;
		}
		assert_true(n < max);
		out[n++] = e;
	}
}

static const struct centry *
find_entry(const struct centry *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (streq(v[i].name, name))
			return &v[i];
	return NULL;
}

/* ---- cpio ---- */

static void
write_sample(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	struct bundle_cpio c;

	assert_true(fd >= 0);
	bundle_cpio_init(&c, fd);
	assert_int_equal(bundle_cpio_dir(&c, "/dev", 0755), 0);
	assert_int_equal(bundle_cpio_node(&c, "dev/console", S_IFCHR | 0600, 5, 1), 0);
	assert_int_equal(bundle_cpio_file(&c, "init", 0755, "#!agent", 7), 0);
	assert_int_equal(bundle_cpio_file(&c, "empty", 0644, NULL, 0), 0);
	assert_int_equal(bundle_cpio_file(&c, "a4", 0600, "abcd", 4), 0);
	assert_int_equal(bundle_cpio_symlink(&c, "sh", "/bin/busybox"), 0);
	assert_int_equal(bundle_cpio_dir(&c, "tmp", 01777), 0);
	assert_int_equal(bundle_cpio_finish(&c), 0);
	close(fd);
}

static void
test_cpio_read_back(void **state)
{
	_cleanup_free_ char *dir = make_tmpdir(), *path = strdup_printf("%s/a.cpio", dir);
	_cleanup_free_ char *data = NULL;
	struct centry e[16];
	size_t len, n;

	write_sample(path);
	data = slurp(path, &len);
	n = parse_cpio((const unsigned char *)data, len, e, ARRAY_SIZE(e));
	assert_int_equal(n, 7);
	/* names lose the leading slash; inode numbers count from 1; owners and times are 0 */
	assert_string_equal(e[0].name, "dev");
	assert_int_equal(e[0].mode, S_IFDIR | 0755);
	assert_int_equal(e[0].nlink, 2);
	assert_string_equal(e[1].name, "dev/console");
	assert_int_equal(e[1].mode, S_IFCHR | 0600);
	assert_int_equal(e[1].rmajor, 5);
	assert_int_equal(e[1].rminor, 1);
	assert_int_equal(e[1].filesize, 0);
	assert_string_equal(e[2].name, "init");
	assert_int_equal(e[2].mode, S_IFREG | 0755);
	assert_int_equal(e[2].filesize, 7);
	assert_memory_equal(e[2].data, "#!agent", 7);
	assert_string_equal(e[3].name, "empty");
	assert_int_equal(e[3].filesize, 0);
	assert_int_equal(e[4].filesize, 4);
	assert_memory_equal(e[4].data, "abcd", 4);
	assert_int_equal(e[4].mode, S_IFREG | 0600);
	assert_string_equal(e[5].name, "sh");
	assert_int_equal(e[5].mode, S_IFLNK | 0777);
	assert_int_equal(e[5].filesize, strlen("/bin/busybox"));
	assert_memory_equal(e[5].data, "/bin/busybox", 12);
	assert_int_equal(e[6].mode, S_IFDIR | 01777);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(e[i].ino, i + 1);
		assert_int_equal(e[i].uid, 0);
		assert_int_equal(e[i].gid, 0);
		assert_int_equal(e[i].mtime, 0);
	}
	/* and the system's cpio agrees, when it is installed */
	if (have_tool("cpio"))
		assert_int_equal(
		        run_sh("cd %s && cpio -it < a.cpio 2>/dev/null | grep -qx dev/console",
		               dir),
		        0);
	remove_tree(dir);
}

static void
test_cpio_deterministic(void **state)
{
	_cleanup_free_ char *dir = make_tmpdir(), *a = strdup_printf("%s/a", dir),
	                    *b = strdup_printf("%s/b", dir), *da = NULL, *db = NULL;
	size_t la, lb;

	write_sample(a);
	sleep(1); /* a different second must not show */
	write_sample(b);
	da = slurp(a, &la);
	db = slurp(b, &lb);
	assert_int_equal(la, lb);
	assert_memory_equal(da, db, la);
	remove_tree(dir);
}

static void
test_cpio_errors(void **state)
{
	struct bundle_cpio c;
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);

	bundle_cpio_init(&c, fd);
	assert_int_equal(bundle_cpio_node(&c, "x", S_IFREG | 0644, 1, 1), -EINVAL);
	/* the first error sticks */
	assert_int_equal(bundle_cpio_dir(&c, "d", 0755), -EINVAL);
	assert_int_equal(bundle_cpio_finish(&c), -EINVAL);
	bundle_cpio_init(&c, fd);
	assert_int_equal(bundle_cpio_file(&c, "/", 0644, "", 0), -EINVAL);
	bundle_cpio_done(&c);
	close(fd);
	bundle_cpio_init(&c, -1);
	assert_int_equal(bundle_cpio_dir(&c, "d", 0755), -EBADF);
	bundle_cpio_done(&c);
}

/* An archive given up on is released without its trailer, and refuses what comes after. */
static void
test_cpio_abandoned(void **state)
{
	_cleanup_free_ char *dir = make_tmpdir(), *path = strdup_printf("%s/a.cpio", dir);
	_cleanup_free_ char *data = NULL;
	struct bundle_cpio c;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	size_t len;

	assert_true(fd >= 0);
	bundle_cpio_init(&c, fd);
	assert_int_equal(bundle_cpio_file(&c, "init", 0755, "#!agent", 7), 0);
	bundle_cpio_done(&c);
	bundle_cpio_done(&c); /* a second time does nothing */
	assert_int_equal(bundle_cpio_dir(&c, "d", 0755), -ECANCELED);
	assert_int_equal(bundle_cpio_finish(&c), -ECANCELED);
	close(fd);
	data = slurp(path, &len);
	assert_null(memmem(data, len, "TRAILER!!!", 10));
	remove_tree(dir);
}

/* ---- modules ---- */

static char *
module_fixture(void)
{
	char *dir = make_tmpdir();
	_cleanup_free_ char *dep = NULL;
	size_t len;

	assert_int_equal(run_sh("cp %s/modules.dep %s/modules.builtin %s/", BUNDLE_DATA_DIR,
	                        BUNDLE_DATA_DIR, dir),
	                 0);
	/* every module modules.dep names exists (as a stub) */
	dep = slurp(BUNDLE_DATA_DIR "/modules.dep", &len);
	for (char *line = dep, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		*strchr(line, ':') = '\0';
		put_filef("stub\n", "%s/%s", dir, line);
	}
	return dir;
}

static void
assert_order(char **got, size_t n, const char *const *want, size_t n_want)
{
	assert_int_equal(n, n_want);
	for (size_t i = 0; i < n; i++) {
		const char *base = strrchr(got[i], '/');
		assert_string_equal(base ? base + 1 : got[i], want[i]);
	}
	assert_null(got[n]);
}

static void
test_modules_dep_guest_order(void **state)
{
	static const char *const wanted[] = {
		"virtio_ring", "virtio",       "virtio_mmio", "virtio_blk", "virtio_console",
		"failover",    "net_failover", "virtio_net",  "overlay",
	};
	static const char *const want[] = {
		"virtio_ring.ko",  "virtio.ko",         "virtio_mmio.ko",
		"virtio_blk.ko",   "virtio_console.ko", "failover.ko",
		"net_failover.ko", "virtio_net.ko",     "overlay.ko",
	};
	_cleanup_free_ char *dir = module_fixture();
	char **paths = NULL;
	size_t n = 0;

	assert_int_equal(bundle_modules_resolve(dir, wanted, ARRAY_SIZE(wanted), &paths, &n, NULL),
	                 0);
	assert_order(paths, n, want, ARRAY_SIZE(want));
	assert_string_equal(paths[3], "kernel/drivers/block/virtio_blk.ko");
	strv_free(paths);
	remove_tree(dir);
}

static void
test_modules_dep_dependencies_first(void **state)
{
	/* asked in the "wrong" order: dependencies still come first, each module once */
	static const char *const wanted[] = { "virtio_net", "ext4", "virtio", "dm-mod",
		                              "crc32c_generic" };
	static const char *const want[] = {
		"failover.ko", "net_failover.ko", "virtio_ring.ko", "virtio.ko",  "virtio_net.ko",
		"jbd2.ko.xz",  "mbcache.ko.xz",   "crc16.ko.xz",    "ext4.ko.xz", "dm-mod.ko",
	};
	_cleanup_free_ char *dir = module_fixture();
	char **paths = NULL;
	size_t n = 0;

	/* crc32c_generic is built in: left out without an error */
	assert_int_equal(bundle_modules_resolve(dir, wanted, ARRAY_SIZE(wanted), &paths, &n, NULL),
	                 0);
	assert_order(paths, n, want, ARRAY_SIZE(want));
	strv_free(paths);
	remove_tree(dir);
}

static void
test_modules_dep_errors(void **state)
{
	static const char *const unknown[] = { "virtio", "no_such_module" };
	static const char *const cycle[] = { "loop_a" };
	_cleanup_free_ char *dir = module_fixture(), *bad = NULL, *bad2 = NULL, *gone = NULL;
	char **paths = NULL;
	size_t n = 0;

	assert_int_equal(bundle_modules_resolve(dir, unknown, 2, &paths, &n, &bad), -ENOENT);
	assert_string_equal(bad, "no_such_module");
	assert_null(paths);
	assert_int_equal(bundle_modules_resolve(dir, cycle, 1, &paths, &n, &bad2), -ELOOP);
	assert_non_null(bad2);
	/* a module modules.dep lists but the package lacks */
	gone = strdup_printf("%s/kernel/fs/overlayfs/overlay.ko", dir);
	assert_int_equal(unlink(gone), 0);
	assert_int_equal(bundle_modules_resolve(dir, (const char *const[]){ "overlay" }, 1, &paths,
	                                        &n, NULL),
	                 -ENOENT);
	remove_tree(dir);
}

static void
test_modules_modinfo(void **state)
{
	static const char *const want[] = { "fake-c.ko", "fake_b.ko.xz", "fake_a.ko" };
	_cleanup_free_ char *dir = NULL;
	char **paths = NULL;
	size_t n = 0;

	if (!have_tool("xz"))
		harness_skip_case("xz is not installed: compressed modules are untested");
	dir = make_tmpdir();
	/* no modules.dep: modules.order plus each module's .modinfo, one of them compressed and
	 * listed without its .xz, as modules.order does */
	put_filef("kernel/fake/fake_a.ko\nkernel/fake/fake_b.ko\nkernel/fake/fake-c.o\n",
	          "%s/modules.order", dir);
	assert_int_equal(run_sh("mkdir -p %s/kernel/fake && cp %s/fake_a.ko %s/fake_b.ko "
	                        "%s/fake-c.ko %s/kernel/fake/ && xz %s/kernel/fake/fake_b.ko",
	                        dir, BUNDLE_FAKE_MODULES, BUNDLE_FAKE_MODULES, BUNDLE_FAKE_MODULES,
	                        dir, dir),
	                 0);
	assert_int_equal(
	        bundle_modules_resolve(dir, (const char *const[]){ "fake-a" }, 1, &paths, &n, NULL),
	        0);
	assert_order(paths, n, want, ARRAY_SIZE(want));
	strv_free(paths);
	remove_tree(dir);
}

static void
test_module_name(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "kernel/drivers/md/dm-mod.ko", "dm_mod" },
		{ "kernel/fs/ext4/ext4.ko.xz", "ext4" },
		{ "a/b.ko.zst", "b" },
		{ "x.o", "x" },
		{ "virtio_ring", "virtio_ring" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		_cleanup_free_ char *got = bundle_module_name(cases[i].in);
		assert_string_equal(got, cases[i].out);
	}
}

/* ---- the initramfs and bundle_load ---- */

struct fake_state {
	char *dir;
	char *agent_a;
	char *agent_b;
};

static const char *const fake_modules[] = { "m_one.ko", "m_two.ko" };

static void
fake_state_init(struct fake_state *f, bool with_manifest)
{
	struct bundle_manifest m = { 0 };

	f->dir = make_tmpdir();
	put_filef("not really a kernel", "%s/vm/vmlinux-9.9.9-test", f->dir);
	put_filef("module one", "%s/vm/modules-9.9.9-test/m_one.ko", f->dir);
	put_filef("module two", "%s/vm/modules-9.9.9-test/m_two.ko", f->dir);
	put_filef("not really ext4", "%s/images/busybox/rootfs.ext4", f->dir);
	f->agent_a = strdup_printf("%s/agent-a", f->dir);
	f->agent_b = strdup_printf("%s/agent-b", f->dir);
	put_file(f->agent_a, "\177ELF agent A", 12);
	put_file(f->agent_b, "\177ELF agent B, a little longer", 29);
	if (!with_manifest)
		return;
	m.kernel = strdup("vm/vmlinux-9.9.9-test");
	m.kernel_version = strdup("9.9.9-test");
	m.modules_dir = strdup("vm/modules-9.9.9-test");
	m.rootfs = strdup("images/busybox/rootfs.ext4");
	m.modules = calloc(3, sizeof(char *));
	m.modules[0] = strdup(fake_modules[0]);
	m.modules[1] = strdup(fake_modules[1]);
	m.n_modules = 2;
	format_rfc3339(now_unix_ms(), m.created);
	assert_int_equal(bundle_manifest_write(f->dir, &m), 0);
	bundle_manifest_done(&m);
}

static void
fake_state_done(struct fake_state *f)
{
	remove_tree(f->dir);
	free(f->dir);
	free(f->agent_a);
	free(f->agent_b);
}

static void
test_initramfs_contents(void **state)
{
	struct fake_state f;
	_cleanup_free_ char *moddir = NULL, *a = NULL, *b = NULL, *da = NULL, *db = NULL;
	char *mods[] = { (char *)fake_modules[0], (char *)fake_modules[1] };
	char sha[65], sha2[65];
	struct centry e[32];
	const struct centry *x;
	uint64_t size;
	size_t la, lb, n;

	fake_state_init(&f, false);
	moddir = strdup_printf("%s/vm/modules-9.9.9-test", f.dir);
	a = strdup_printf("%s/a.cpio", f.dir);
	b = strdup_printf("%s/b.cpio", f.dir);
	assert_int_equal(bundle_write_initramfs(a, f.agent_a, moddir, mods, 2, sha, &size), 0);
	assert_int_equal(size, 12);
	assert_int_equal(run_sh("test \"$(sha256sum < %s | cut -c1-64)\" = %s", f.agent_a, sha), 0);
	da = slurp(a, &la);
	n = parse_cpio((const unsigned char *)da, la, e, ARRAY_SIZE(e));
	x = find_entry(e, n, "init");
	assert_non_null(x);
	assert_int_equal(x->mode, S_IFREG | 0755);
	assert_memory_equal(x->data, "\177ELF agent A", 12);
	x = find_entry(e, n, "dev/console");
	assert_non_null(x);
	assert_int_equal(x->mode, S_IFCHR | 0600);
	assert_int_equal(x->rmajor, 5);
	assert_int_equal(x->rminor, 1);
	x = find_entry(e, n, "lib/modules/order");
	assert_non_null(x);
	assert_int_equal(x->filesize, strlen("m_one.ko\nm_two.ko\n"));
	assert_memory_equal(x->data, "m_one.ko\nm_two.ko\n", x->filesize);
	x = find_entry(e, n, "lib/modules/m_two.ko");
	assert_non_null(x);
	assert_memory_equal(x->data, "module two", 10);
	for (size_t i = 0; i < ARRAY_SIZE(e) && i < n; i++)
		if (streq(e[i].name, "tmp"))
			assert_int_equal(e[i].mode, S_IFDIR | 01777);
	assert_non_null(find_entry(e, n, "proc"));
	assert_non_null(find_entry(e, n, "sys"));
	assert_non_null(find_entry(e, n, "newroot"));
	/* every directory comes before what it holds */
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *parent = strdup(e[i].name);
		char *slash = strrchr(parent, '/');
		if (!slash)
			continue;
		*slash = '\0';
		x = find_entry(e, i, parent);
		assert_non_null(x);
		assert_true(S_ISDIR(x->mode));
	}
	/* same inputs, same bytes */
	assert_int_equal(bundle_write_initramfs(b, f.agent_a, moddir, mods, 2, sha2, &size), 0);
	db = slurp(b, &lb);
	assert_int_equal(la, lb);
	assert_memory_equal(da, db, la);
	assert_string_equal(sha, sha2);
	/* refusals */
	assert_int_equal(
	        bundle_write_initramfs(b, "/nonexistent/agent", moddir, mods, 2, sha2, &size),
	        -ENOENT);
	{
		char *bad[] = { "../m_one.ko" };
		assert_int_equal(bundle_write_initramfs(b, f.agent_a, moddir, bad, 1, sha2, &size),
		                 -EINVAL);
	}
	fake_state_done(&f);
}

static void
test_manifest_round_trip(void **state)
{
	_cleanup_free_ char *dir = make_tmpdir();
	struct bundle_manifest m = { 0 }, r = { 0 };

	assert_int_equal(bundle_manifest_read(dir, &r), -ENOENT);
	{
		_cleanup_free_ char *vm = strdup_printf("%s/vm", dir);
		assert_int_equal(mkdir_p(vm, 0755), 0);
	}
	m.kernel = strdup("vm/vmlinux-6.1.0-57-cloud-amd64");
	m.kernel_version = strdup("6.1.0-57-cloud-amd64");
	m.kernel_package = strdup("linux-image-6.1.0-57-cloud-amd64");
	m.kernel_package_version = strdup("6.1.192-3");
	m.modules_dir = strdup("vm/modules-6.1.0-57-cloud-amd64");
	m.modules = calloc(3, sizeof(char *));
	m.modules[0] = strdup("virtio_ring.ko");
	m.modules[1] = strdup("virtio.ko");
	m.n_modules = 2;
	m.rootfs = strdup("images/busybox/rootfs.ext4");
	m.rootfs_layout = 2;
	m.busybox_version = strdup("1:1.35.0-4+deb12u1+b1");
	m.initramfs = strdup("vm/initramfs-6.1.0-57-cloud-amd64.cpio");
	memset(m.agent_sha256, 'a', 64);
	m.agent_size = 123456;
	snprintf(m.created, sizeof(m.created), "2026-11-29T20:00:00Z");
	snprintf(m.initramfs_built, sizeof(m.initramfs_built), "2026-11-29T20:00:01Z");
	assert_int_equal(bundle_manifest_write(dir, &m), 0);
	assert_int_equal(bundle_manifest_read(dir, &r), 0);
	assert_string_equal(r.kernel, m.kernel);
	assert_string_equal(r.kernel_version, m.kernel_version);
	assert_string_equal(r.kernel_package, m.kernel_package);
	assert_string_equal(r.kernel_package_version, m.kernel_package_version);
	assert_string_equal(r.modules_dir, m.modules_dir);
	assert_int_equal(r.n_modules, 2);
	assert_string_equal(r.modules[0], "virtio_ring.ko");
	assert_string_equal(r.modules[1], "virtio.ko");
	assert_string_equal(r.rootfs, m.rootfs);
	assert_int_equal(r.rootfs_layout, 2);
	assert_string_equal(r.busybox_version, m.busybox_version);
	assert_string_equal(r.initramfs, m.initramfs);
	assert_string_equal(r.agent_sha256, m.agent_sha256);
	assert_int_equal(r.agent_size, 123456);
	assert_string_equal(r.created, m.created);
	assert_string_equal(r.initramfs_built, m.initramfs_built);
	bundle_manifest_done(&r);

	/* paths that would leave the state directory, or break a QEMU command line */
	static const char *const bad_kernels[] = {
		"/boot/vmlinuz", "vm/../../etc/passwd", "vm/a,b", "vm/a=b", "", "vm/x y"
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad_kernels); i++) {
		free(m.kernel);
		m.kernel = strdup(bad_kernels[i]);
		assert_int_equal(bundle_manifest_write(dir, &m), 0);
		assert_int_equal(bundle_manifest_read(dir, &r), -EINVAL);
	}
	/* a manifest of an older sandboxd has no rootfs_layout: 0 */
	{
		_cleanup_free_ char *path = strdup_printf("%s/vm/bundle.json", dir), *text = NULL;
		char *line, *end;
		free(m.kernel);
		m.kernel = strdup("vm/vmlinux-6.1.0-57-cloud-amd64");
		assert_int_equal(bundle_manifest_write(dir, &m), 0);
		assert_int_equal(read_file_max(path, 1 << 20, &text, NULL), 0);
		/* one member a line: the line goes */
		line = strstr(text, "  \"rootfs_layout\": 2,\n");
		assert_non_null(line);
		end = strchr(line, '\n') + 1;
		memmove(line, end, strlen(end) + 1);
		assert_int_equal(write_file_atomic(path, text, strlen(text), 0644), 0);
		assert_int_equal(bundle_manifest_read(dir, &r), 0);
		assert_int_equal(r.rootfs_layout, 0);
		bundle_manifest_done(&r);
		put_filef("{\"format\": 1, \"kernel\": \"vm/k\", \"kernel_version\": \"6\", "
		          "\"modules_dir\": \"vm/m\", \"modules\": [], \"rootfs\": \"r\", "
		          "\"rootfs_layout\": \"2\"}",
		          "%s/vm/bundle.json", dir);
		assert_int_equal(bundle_manifest_read(dir, &r), -EINVAL);
	}
	bundle_manifest_done(&m);
	put_filef("{\"format\": 2}", "%s/vm/bundle.json", dir);
	assert_int_equal(bundle_manifest_read(dir, &r), -EINVAL);
	put_filef("not json", "%s/vm/bundle.json", dir);
	assert_int_equal(bundle_manifest_read(dir, &r), -EINVAL);
	remove_tree(dir);
}

static ino_t
inode_of(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_ino;
}

static void
assert_init_is(const char *initrd, const char *want, size_t len)
{
	_cleanup_free_ char *data = NULL;
	struct centry e[32];
	const struct centry *x;
	size_t dl, n;

	data = slurp(initrd, &dl);
	n = parse_cpio((const unsigned char *)data, dl, e, ARRAY_SIZE(e));
	x = find_entry(e, n, "init");
	assert_non_null(x);
	assert_int_equal(x->filesize, len);
	assert_memory_equal(x->data, want, len);
}

static void
test_load_rebuilds_when_agent_changes(void **state)
{
	struct fake_state f;
	struct vm_bundle b = { 0 };
	struct bundle_manifest m = { 0 };
	_cleanup_free_ char *want_initrd = NULL, *want_kernel = NULL, *want_rootfs = NULL;
	char sha_a[65];
	ino_t first;

	fake_state_init(&f, true);
	want_initrd = strdup_printf("%s/vm/initramfs-9.9.9-test.cpio", f.dir);
	want_kernel = strdup_printf("%s/vm/vmlinux-9.9.9-test", f.dir);
	want_rootfs = strdup_printf("%s/images/busybox/rootfs.ext4", f.dir);

	/* setup ran without an agent: the first load builds the initramfs */
	assert_int_equal(bundle_load(f.dir, f.agent_a, NULL, NULL, &b), 0);
	assert_string_equal(b.kernel, want_kernel);
	assert_string_equal(b.initrd, want_initrd);
	assert_string_equal(b.rootfs, want_rootfs);
	assert_string_equal(b.kernel_version, "9.9.9-test");
	vm_bundle_done(&b);
	assert_init_is(want_initrd, "\177ELF agent A", 12);
	assert_int_equal(bundle_manifest_read(f.dir, &m), 0);
	assert_string_equal(m.initramfs, "vm/initramfs-9.9.9-test.cpio");
	assert_int_equal(m.agent_size, 12);
	assert_true(m.initramfs_built[0] != '\0');
	memcpy(sha_a, m.agent_sha256, sizeof(sha_a));
	bundle_manifest_done(&m);
	first = inode_of(want_initrd);

	/* same agent: nothing is rewritten */
	assert_int_equal(bundle_load(f.dir, f.agent_a, NULL, NULL, &b), 0);
	vm_bundle_done(&b);
	assert_int_equal(inode_of(want_initrd), first);

	/* another agent: rebuilt, and the manifest follows */
	assert_int_equal(bundle_load(f.dir, f.agent_b, NULL, NULL, &b), 0);
	vm_bundle_done(&b);
	assert_true(inode_of(want_initrd) != first);
	assert_init_is(want_initrd, "\177ELF agent B, a little longer", 29);
	assert_int_equal(bundle_manifest_read(f.dir, &m), 0);
	assert_string_not_equal(m.agent_sha256, sha_a);
	assert_int_equal(m.agent_size, 29);
	bundle_manifest_done(&m);

	/* the initramfs deleted: rebuilt even for the same agent */
	assert_int_equal(unlink(want_initrd), 0);
	assert_int_equal(bundle_load(f.dir, f.agent_b, NULL, NULL, &b), 0);
	vm_bundle_done(&b);
	assert_init_is(want_initrd, "\177ELF agent B, a little longer", 29);
	fake_state_done(&f);
}

static void
test_load_overrides_and_refusals(void **state)
{
	struct fake_state f;
	struct vm_bundle b = { 0 };
	_cleanup_free_ char *own_kernel = NULL, *own_initrd = NULL, *initrd = NULL, *mod = NULL;

	fake_state_init(&f, false);
	own_kernel = strdup_printf("%s/own-vmlinux", f.dir);
	own_initrd = strdup_printf("%s/own-initrd", f.dir);
	put_file(own_kernel, "k", 1);
	put_file(own_initrd, "i", 1);

	/* setup never ran */
	assert_int_equal(bundle_load(f.dir, f.agent_a, NULL, NULL, &b), -ENOENT);
	assert_int_equal(bundle_load(f.dir, f.agent_a, own_kernel, NULL, &b), -ENOENT);
	/* unless the operator brings both */
	assert_int_equal(bundle_load(f.dir, f.agent_a, own_kernel, own_initrd, &b), 0);
	assert_string_equal(b.kernel, own_kernel);
	assert_string_equal(b.initrd, own_initrd);
	assert_null(b.rootfs);
	assert_null(b.kernel_version);
	vm_bundle_done(&b);
	remove_tree(f.dir);
	free(f.dir);
	free(f.agent_a);
	free(f.agent_b);

	fake_state_init(&f, true);
	free(own_kernel);
	free(own_initrd);
	own_kernel = strdup_printf("%s/own-vmlinux", f.dir);
	own_initrd = strdup_printf("%s/own-initrd", f.dir);
	put_file(own_kernel, "k", 1);
	put_file(own_initrd, "i", 1);
	initrd = strdup_printf("%s/vm/initramfs-9.9.9-test.cpio", f.dir);
	/* a given initrd is used as it is: nothing is built */
	assert_int_equal(bundle_load(f.dir, f.agent_a, NULL, own_initrd, &b), 0);
	assert_string_equal(b.initrd, own_initrd);
	assert_string_equal(b.kernel_version, "9.9.9-test");
	assert_non_null(b.rootfs);
	vm_bundle_done(&b);
	assert_int_equal(access(initrd, F_OK), -1);
	/* a given kernel replaces the bundle's; the initramfs is still ours */
	assert_int_equal(bundle_load(f.dir, f.agent_a, own_kernel, NULL, &b), 0);
	assert_string_equal(b.kernel, own_kernel);
	assert_string_equal(b.initrd, initrd);
	assert_null(b.kernel_version);
	vm_bundle_done(&b);
	/* no agent */
	assert_int_equal(bundle_load(f.dir, "/nonexistent/sandbox-guestd", NULL, NULL, &b),
	                 -ENOENT);
	/* a missing module */
	mod = strdup_printf("%s/vm/modules-9.9.9-test/m_two.ko", f.dir);
	assert_int_equal(unlink(mod), 0);
	assert_int_equal(bundle_load(f.dir, f.agent_a, NULL, NULL, &b), -ENOENT);
	fake_state_done(&f);
}

/* ---- the kernel ---- */

/* A tiny x86-64 ELF with one PT_NOTE segment holding a Xen note of the given type. */
static size_t
tiny_elf(unsigned char *out, uint32_t note_type)
{
	Elf64_Ehdr eh = { 0 };
	Elf64_Phdr ph = { 0 };
	Elf64_Nhdr nh = { .n_namesz = 4, .n_descsz = 8, .n_type = note_type };
	size_t off = 0;

	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	eh.e_type = ET_EXEC;
	eh.e_machine = EM_X86_64;
	eh.e_version = EV_CURRENT;
	eh.e_phoff = sizeof(eh);
	eh.e_ehsize = sizeof(eh);
	eh.e_phentsize = sizeof(ph);
	eh.e_phnum = 1;
	ph.p_type = PT_NOTE;
	ph.p_offset = sizeof(eh) + sizeof(ph);
	ph.p_filesz = sizeof(nh) + 4 + 8;
	memcpy(out + off, &eh, sizeof(eh));
	off += sizeof(eh);
	memcpy(out + off, &ph, sizeof(ph));
	off += sizeof(ph);
	memcpy(out + off, &nh, sizeof(nh));
	off += sizeof(nh);
	memcpy(out + off, "Xen", 4);
	off += 4;
	memset(out + off, 0x42, 8);
	off += 8;
	/* some bulk, so the payload is more than a header */
	memset(out + off, 0, 4096);
	return off + 4096;
}

static void
test_check_pvh(void **state)
{
	_cleanup_free_ char *dir = make_tmpdir(), *yes = NULL, *no = NULL, *junk = NULL;
	unsigned char elf[8192];
	size_t n;

	yes = strdup_printf("%s/yes", dir);
	no = strdup_printf("%s/no", dir);
	junk = strdup_printf("%s/junk", dir);
	n = tiny_elf(elf, 0x12);
	put_file(yes, elf, n);
	n = tiny_elf(elf, 0x11);
	put_file(no, elf, n);
	put_file(junk, "MZ not an elf at all, just some bytes of text", 44);
	assert_int_equal(bundle_check_pvh(yes), 0);
	assert_int_equal(bundle_check_pvh(no), -ENOEXEC);
	assert_int_equal(bundle_check_pvh(junk), -ENOEXEC);
	/* cut short inside the note */
	put_file(junk, elf, sizeof(Elf64_Ehdr) + sizeof(Elf64_Phdr) + 6);
	assert_int_equal(bundle_check_pvh(junk), -ENOEXEC);
	assert_int_equal(bundle_check_pvh("/nonexistent"), -ENOENT);
	remove_tree(dir);
}

/* A synthetic bzImage: boot sector with the setup header, one setup sector, then the payload
 * (LZ4 legacy stream of a tiny PVH ELF, plus the le32 size the kernel build appends). */
static void
test_extract_vmlinux(void **state)
{
	_cleanup_free_ char *dir = NULL, *elf_path = NULL, *lz = NULL, *bz = NULL, *out = NULL,
	                    *payload = NULL, *img = NULL, *got = NULL, *err = NULL;
	unsigned char elf[8192];
	size_t n, plen, glen;
	uint32_t v;

	if (!have_tool("lz4"))
		harness_skip_case("lz4 is not installed: vmlinux extraction is untested");
	dir = make_tmpdir();
	elf_path = strdup_printf("%s/elf", dir);
	lz = strdup_printf("%s/elf.lz4", dir);
	bz = strdup_printf("%s/bzImage", dir);
	out = strdup_printf("%s/vmlinux", dir);
	n = tiny_elf(elf, 0x12);
	put_file(elf_path, elf, n);
	assert_int_equal(run_sh("lz4 -q -l -f %s %s", elf_path, lz), 0);
	payload = slurp(lz, &plen);
	img = calloc(1, 1024 + 64 + plen + 4);
	img[0x1f1] = 1;                 /* setup_sects */
	memcpy(img + 0x202, "HdrS", 4); /* header magic */
	img[0x206] = 0x0f;              /* protocol 2.15 */
	img[0x207] = 0x02;
	v = 64; /* payload_offset, after the setup code */
	memcpy(img + 0x248, &v, 4);
	v = (uint32_t)plen + 4; /* payload_length, with the size */
	memcpy(img + 0x24c, &v, 4);
	memcpy(img + 1024 + 64, payload, plen);
	v = (uint32_t)n;
	memcpy(img + 1024 + 64 + plen, &v, 4);
	put_file(bz, img, 1024 + 64 + plen + 4);

	assert_int_equal(bundle_extract_vmlinux(bz, out, &err), 0);
	assert_null(err);
	got = slurp(out, &glen);
	assert_int_equal(glen, n);
	assert_memory_equal(got, elf, n);

	/* a wrong size trailer is caught */
	v = (uint32_t)n + 1;
	memcpy(img + 1024 + 64 + plen, &v, 4);
	put_file(bz, img, 1024 + 64 + plen + 4);
	assert_int_equal(bundle_extract_vmlinux(bz, out, &err), -EBADMSG);
	assert_non_null(err);
	free(err);
	err = NULL;
	/* another compressor is named */
	memcpy(img + 1024 + 64, "\x28\xb5\x2f\xfd", 4);
	put_file(bz, img, 1024 + 64 + plen + 4);
	assert_int_equal(bundle_extract_vmlinux(bz, out, &err), -EPROTONOSUPPORT);
	assert_non_null(strstr(err, "zstd"));
	free(err);
	err = NULL;
	/* not a bzImage */
	assert_int_equal(bundle_extract_vmlinux(elf_path, out, &err), -ENOEXEC);
	assert_non_null(err);
	free(err);
	err = NULL;
	assert_int_equal(run_sh("ls %s | grep -q tmp", dir), 256); /* no temporary left */
	remove_tree(dir);
}

/* ---- blank disks and layers ---- */

static void
test_blank_disk_and_layers(void **state)
{
	_cleanup_free_ char *dir = NULL, *blank = NULL, *again = NULL, *l1 = NULL, *l2 = NULL,
	                    *d1 = NULL, *d2 = NULL, *want = NULL;
	struct stat st;
	size_t len1, len2;
	ino_t ino;

	if (!have_tool("mkfs.ext4") || !have_tool("qemu-img"))
		harness_skip_case("mkfs.ext4 or qemu-img is not installed: blank disks and layers "
		                  "are untested");
	dir = make_tmpdir();
	assert_int_equal(bundle_blank_disk(dir, 0, &blank), -ERANGE);
	assert_int_equal(bundle_blank_disk(dir, 64, &blank), 0);
	want = strdup_printf("%s/vm/blank-64.ext4", dir);
	assert_string_equal(blank, want);
	assert_int_equal(stat(blank, &st), 0);
	assert_int_equal(st.st_size, 64 << 20);
	assert_true((uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size / 4); /* sparse */
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_int_equal(run_sh("PATH=\"$PATH:/sbin:/usr/sbin\" dumpe2fs -h %s 2>/dev/null | grep "
	                        "-q 'volume name: *sbxupper'",
	                        blank),
	                 0);
	assert_int_equal(run_sh("PATH=\"$PATH:/sbin:/usr/sbin\" dumpe2fs -h %s 2>/dev/null | grep "
	                        "'features' | grep -qv has_journal",
	                        blank),
	                 0);
	/* inode tables marked zeroed (no ext4lazyinit writes into the layers), nothing reserved */
	assert_int_equal(run_sh("PATH=\"$PATH:/sbin:/usr/sbin\" dumpe2fs %s 2>/dev/null | grep "
	                        "'^Group 1:' | grep -q ITABLE_ZEROED",
	                        blank),
	                 0);
	assert_int_equal(run_sh("PATH=\"$PATH:/sbin:/usr/sbin\" dumpe2fs -h %s 2>/dev/null | grep "
	                        "-q '^Reserved block count: *0$'",
	                        blank),
	                 0);
	assert_int_equal(
	        run_sh("PATH=\"$PATH:/sbin:/usr/sbin\" e2fsck -fn %s >/dev/null 2>&1", blank), 0);
	ino = st.st_ino;
	/* cached: the same file, never made again */
	assert_int_equal(bundle_blank_disk(dir, 64, &again), 0);
	assert_string_equal(again, blank);
	assert_int_equal(inode_of(again), ino);
	assert_int_equal(run_sh("ls %s/vm | grep -q tmp", dir), 256);

	l1 = strdup_printf("%s/one.qcow2", dir);
	l2 = strdup_printf("%s/two.qcow2", dir);
	assert_int_equal(bundle_make_layer(blank, l1), 0);
	assert_int_equal(bundle_make_layer(blank, l2), 0);
	d1 = slurp(l1, &len1);
	d2 = slurp(l2, &len2);
	assert_memory_equal(d1, "QFI\xfb", 4);
	assert_true(len1 < 1024 * 1024);
	assert_int_equal(len1, len2);
	assert_memory_equal(d1, d2, len1); /* byte-identical, as template clones need */
	assert_non_null(memmem(d1, len1, blank, strlen(blank))); /* absolute backing path */
	assert_int_equal(run_sh("qemu-img info %s | grep -q 'virtual size: 64 MiB'", l1), 0);
	/* the first made a template beside the blank; the second copied it (same bytes) */
	assert_int_equal(run_sh("cmp -s %s.layer.qcow2 %s", blank, l2), 0);
	/* a layer replaces what was there; without the template it is made again, the same */
	assert_int_equal(run_sh("rm %s.layer.qcow2", blank), 0);
	assert_int_equal(bundle_make_layer(blank, l2), 0);
	assert_int_equal(run_sh("cmp -s %s %s", l1, l2), 0);
	assert_int_equal(run_sh("ls %s/vm | grep -q tmp", dir), 256);
	assert_int_equal(bundle_make_layer("/nonexistent/blank.ext4", l1), -ENOENT);
	remove_tree(dir);
}

/* ---- the host ---- */

static void
test_host_tsc(void **state)
{
	unsigned khz = 0;
	int r = bundle_host_tsc_khz(&khz);

#if defined(__x86_64__)
	assert_int_equal(r, 0);
	assert_true(khz > 100000 && khz < 20000000);
	print_message("host TSC: %u kHz\n", khz);
#else
	assert_int_equal(r, -EOPNOTSUPP);
#endif
}

static void
test_default_agent(void **state)
{
	_cleanup_free_ char *agent = bundle_default_agent();
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	assert_non_null(agent);
	assert_true(n > 0);
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	assert_true(str_has_prefix(agent, exe));
	assert_string_equal(agent + strlen(exe), "/sandbox-guestd");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpio_read_back),
		cmocka_unit_test(test_cpio_deterministic),
		cmocka_unit_test(test_cpio_errors),
		cmocka_unit_test(test_cpio_abandoned),
		cmocka_unit_test(test_modules_dep_guest_order),
		cmocka_unit_test(test_modules_dep_dependencies_first),
		cmocka_unit_test(test_modules_dep_errors),
		cmocka_unit_test(test_modules_modinfo),
		cmocka_unit_test(test_module_name),
		cmocka_unit_test(test_initramfs_contents),
		cmocka_unit_test(test_manifest_round_trip),
		cmocka_unit_test(test_load_rebuilds_when_agent_changes),
		cmocka_unit_test(test_load_overrides_and_refusals),
		cmocka_unit_test(test_check_pvh),
		cmocka_unit_test(test_extract_vmlinux),
		cmocka_unit_test(test_blank_disk_and_layers),
		cmocka_unit_test(test_host_tsc),
		cmocka_unit_test(test_default_agent),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, NULL, NULL));
}
