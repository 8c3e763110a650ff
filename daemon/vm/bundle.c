/* bundle.c: see bundle.h. Every external tool (apt, dpkg-deb, lz4, objcopy, mkfs.ext4,
 * qemu-img) runs as a child with an empty signal mask and only stdio; its output is kept and
 * shown only when it fails. Every result is written under a temporary name and renamed. */
#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif
#include "bundle.h"
#include "tool.h"
#include "hashmap.h"
#include "log.h"
#include "strv.h"
#include "util.h"

extern char **environ;

#define MANIFEST_FORMAT 1
#define MANIFEST_MAX (1024 * 1024)
#define AGENT_MAX (256u * 1024 * 1024)
#define MODULE_MAX (64u * 1024 * 1024)
#define KERNEL_META "linux-image-cloud-amd64"
#define BUSYBOX_PACKAGE "busybox-static"
#define ROOTFS_PATH "images/busybox/rootfs.ext4"
#define SANDBOX_UID 1001

/* What the guest needs, in the order the agent loads them; ext4 joins when it is a module. */
static const char *const guest_modules[] = {
	"virtio_ring", "virtio",       "virtio_mmio", "virtio_blk", "virtio_console",
	"failover",    "net_failover", "virtio_net",  "overlay",
};

/* ---- ELF: notes and sections ---- */

struct mapped {
	const unsigned char *data;
	size_t size;
};

static void
unmap(struct mapped *m)
{
	if (m->data)
		munmap((void *)m->data, m->size);
	m->data = NULL;
}

static int
map_file(const char *path, struct mapped *ret)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	void *p;

	if (fd < 0)
		return negative_errno();
	if (fstat(fd, &st) < 0)
		return negative_errno();
	if (!S_ISREG(st.st_mode) || st.st_size <= 0)
		return -ENOEXEC;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return negative_errno();
	ret->data = p;
	ret->size = (size_t)st.st_size;
	return 0;
}

/* Bounds check for [off, off + len) inside size. */
static bool
in_bounds(uint64_t off, uint64_t len, size_t size)
{
	return off <= size && len <= size - off;
}

static int
elf64_header(const struct mapped *m, Elf64_Ehdr *ret)
{
	if (m->size < sizeof(*ret))
		return -ENOEXEC;
	memcpy(ret, m->data, sizeof(*ret));
	if (memcmp(ret->e_ident, ELFMAG, SELFMAG) != 0 || ret->e_ident[EI_CLASS] != ELFCLASS64 ||
	    ret->e_ident[EI_DATA] != ELFDATA2LSB || ret->e_machine != EM_X86_64)
		return -ENOEXEC;
	return 0;
}

static bool
notes_have(const unsigned char *p, size_t len, const char *name, uint32_t type)
{
	size_t namesz = strlen(name) + 1, off = 0;

	while (len - off >= sizeof(Elf64_Nhdr)) {
		Elf64_Nhdr nh;
		uint64_t nlen, dlen;

		memcpy(&nh, p + off, sizeof(nh));
		off += sizeof(nh);
		nlen = ((uint64_t)nh.n_namesz + 3) & ~(uint64_t)3;
		dlen = ((uint64_t)nh.n_descsz + 3) & ~(uint64_t)3;
		if (!in_bounds(off, nlen, len))
			return false;
		if (nh.n_type == type && nh.n_namesz == namesz &&
		    memcmp(p + off, name, namesz) == 0)
			return true;
		off += nlen;
		if (!in_bounds(off, dlen, len))
			return false;
		off += dlen;
	}
	return false;
}

int
bundle_check_pvh(const char *path)
{
	struct mapped m = { 0 };
	Elf64_Ehdr eh;
	int r;

	r = map_file(path, &m);
	if (r < 0)
		return r;
	r = elf64_header(&m, &eh);
	if (r == 0 && (eh.e_phentsize < sizeof(Elf64_Phdr) ||
	               !in_bounds(eh.e_phoff, (uint64_t)eh.e_phnum * eh.e_phentsize, m.size)))
		r = -ENOEXEC;
	for (unsigned i = 0; r == 0 && i < eh.e_phnum; i++) {
		Elf64_Phdr ph;

		memcpy(&ph, m.data + eh.e_phoff + (uint64_t)i * eh.e_phentsize, sizeof(ph));
		if (ph.p_type != PT_NOTE || !in_bounds(ph.p_offset, ph.p_filesz, m.size))
			continue;
		/* XEN_ELFNOTE_PHYS32_ENTRY: the 32-bit PVH entry point QEMU boots through. */
		if (notes_have(m.data + ph.p_offset, ph.p_filesz, "Xen", 0x12)) {
			unmap(&m);
			return 0;
		}
	}
	unmap(&m);
	return r < 0 ? r : -ENOEXEC;
}

/* The contents of section name in a relocatable or executable ELF64, borrowed from m. */
static int
elf64_section(const struct mapped *m, const char *name, const unsigned char **ret, size_t *ret_len)
{
	Elf64_Ehdr eh;
	Elf64_Shdr strs;
	int r;

	r = elf64_header(m, &eh);
	if (r < 0)
		return r;
	if (eh.e_shentsize < sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum ||
	    !in_bounds(eh.e_shoff, (uint64_t)eh.e_shnum * eh.e_shentsize, m->size))
		return -ENOEXEC;
	memcpy(&strs, m->data + eh.e_shoff + (uint64_t)eh.e_shstrndx * eh.e_shentsize,
	       sizeof(strs));
	if (!in_bounds(strs.sh_offset, strs.sh_size, m->size))
		return -ENOEXEC;
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		const char *sn;

		memcpy(&sh, m->data + eh.e_shoff + (uint64_t)i * eh.e_shentsize, sizeof(sh));
		if (sh.sh_name >= strs.sh_size)
			continue;
		sn = (const char *)m->data + strs.sh_offset + sh.sh_name;
		if (strnlen(sn, strs.sh_size - sh.sh_name) == strs.sh_size - sh.sh_name)
			continue;
		if (!streq(sn, name) || sh.sh_type == SHT_NOBITS)
			continue;
		if (!in_bounds(sh.sh_offset, sh.sh_size, m->size))
			return -ENOEXEC;
		*ret = m->data + sh.sh_offset;
		*ret_len = sh.sh_size;
		return 0;
	}
	return -ENOENT;
}

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

/* ---- kernel modules ---- */

char *
bundle_module_name(const char *path)
{
	static const char *const suffixes[] = { ".ko.xz", ".ko.zst", ".ko.gz", ".ko", ".o" };
	const char *base = strrchr(path, '/');
	char *name;
	size_t len;

	base = base ? base + 1 : path;
	len = strlen(base);
	for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
		size_t sl = strlen(suffixes[i]);
		if (len > sl && streq(base + len - sl, suffixes[i])) {
			len -= sl;
			break;
		}
	}
	name = strndup(base, len);
	if (name)
		for (char *p = name; *p; p++)
			if (*p == '-')
				*p = '_';
	return name;
}

struct module {
	char *name; /* the key */
	char *path; /* relative to the module directory */
	char **deps;
	size_t n_deps;
	bool deps_known;
	int mark; /* 0 unvisited, 1 on the stack, 2 placed */
};

struct modtab {
	const char *dir;
	struct module **v;
	size_t n;
	struct hashmap byname; /* name -> struct module */
	char **builtin;
	size_t n_builtin;
	struct hashmap isbuiltin; /* name -> name */
};

static void
modtab_done(struct modtab *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i]->name);
		free(t->v[i]->path);
		strv_free(t->v[i]->deps);
		free(t->v[i]);
	}
	free(t->v);
	hashmap_clear(&t->byname);
	strv_free(t->builtin);
	hashmap_clear(&t->isbuiltin);
}

/* Decompresses a compressed module into memory (a memfd's contents). */
static int
module_read(const char *path, struct mapped *ret, int *ret_memfd)
{
	static const struct {
		const char *suffix;
		const char *tool;
	} unpack[] = { { ".xz", "xz" }, { ".zst", "zstd" }, { ".gz", "gzip" } };

	for (size_t i = 0; i < ARRAY_SIZE(unpack); i++) {
		size_t pl = strlen(path), sl = strlen(unpack[i].suffix);
		_cleanup_close_ int mfd = -1;
		struct tool t = { .in_fd = -1 };
		struct stat st;
		void *p;
		int r;

		if (pl <= sl || !streq(path + pl - sl, unpack[i].suffix))
			continue;
		mfd = memfd_create("module", MFD_CLOEXEC);
		if (mfd < 0)
			return negative_errno();
		t.out_fd = mfd;
		r = tool_run(&t, (const char *const[]){ unpack[i].tool, "-dc", path, NULL });
		tool_done(&t);
		if (r < 0)
			return r;
		if (fstat(mfd, &st) < 0)
			return negative_errno();
		if (st.st_size <= 0)
			return -ENOEXEC;
		p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, mfd, 0);
		if (p == MAP_FAILED)
			return negative_errno();
		ret->data = p;
		ret->size = (size_t)st.st_size;
		*ret_memfd = TAKE_FD(mfd);
		return 0;
	}
	*ret_memfd = -1;
	return map_file(path, ret);
}

/* Adds a module by its path; the first entry of a name wins. *ret is NULL for a duplicate. */
static int
modtab_add(struct modtab *t, const char *path, struct module **ret)
{
	struct module *m = calloc(1, sizeof(*m));
	struct module **nv;

	*ret = NULL;
	if (!m)
		return -ENOMEM;
	m->name = bundle_module_name(path);
	m->path = strdup(path);
	nv = realloc(t->v, (t->n + 1) * sizeof(*nv));
	if (nv)
		t->v = nv;
	if (!m->name || !m->path || !nv) {
		free(m->name);
		free(m->path);
		free(m);
		return -ENOMEM;
	}
	if (hashmap_get(&t->byname, m->name)) {
		free(m->name);
		free(m->path);
		free(m);
		return 0;
	}
	t->v[t->n++] = m;
	*ret = m;
	return hashmap_put(&t->byname, m->name, m);
}

/* Splits text in place into lines; calls fn for each non-empty one. */
static int
for_each_line(char *text, int (*fn)(struct modtab *, char *), struct modtab *t)
{
	for (char *line = text, *next; line && *line; line = next) {
		int r;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (*line == '\0' || *line == '#')
			continue;
		r = fn(t, line);
		if (r < 0)
			return r;
	}
	return 0;
}

/* "kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko ..." */
static int
modtab_dep_line(struct modtab *t, char *line)
{
	char *colon = strchr(line, ':'), *p;
	struct module *m;
	int r;

	if (!colon)
		return 0;
	*colon = '\0';
	r = modtab_add(t, line, &m);
	if (r < 0 || !m)
		return r;
	m->deps_known = true;
	for (p = colon + 1; *p;) {
		size_t len;

		p += strspn(p, " \t");
		len = strcspn(p, " \t");
		if (len == 0)
			break;
		{
			_cleanup_free_ char *dep = strndup(p, len);
			if (!dep)
				return -ENOMEM;
			r = strv_push(&m->deps, &m->n_deps, bundle_module_name(dep));
			if (r < 0)
				return r;
		}
		p += len;
	}
	return 0;
}

/* modules.order: one path per line (".o" instead of ".ko" in newer kernels). */
static int
modtab_order_line(struct modtab *t, char *line)
{
	struct module *m;
	size_t len = strlen(line);

	if (len > 2 && streq(line + len - 2, ".o")) {
		_cleanup_free_ char *ko = strdup_printf("%.*s.ko", (int)(len - 2), line);
		return ko ? modtab_add(t, ko, &m) : -ENOMEM;
	}
	return modtab_add(t, line, &m);
}

static int
modtab_builtin_line(struct modtab *t, char *line)
{
	char *name = bundle_module_name(line);
	int r;

	if (!name)
		return -ENOMEM;
	r = strv_push(&t->builtin, &t->n_builtin, name);
	if (r < 0)
		return r;
	return hashmap_put(&t->isbuiltin, name, name);
}

static int
modtab_load_file(struct modtab *t, const char *file, int (*fn)(struct modtab *, char *))
{
	_cleanup_free_ char *path = strdup_printf("%s/%s", t->dir, file), *text = NULL;
	int r;

	if (!path)
		return -ENOMEM;
	r = read_file_max(path, 64 * 1024 * 1024, &text, NULL);
	if (r < 0)
		return r;
	return for_each_line(text, fn, t);
}

/* The file of a module as it ships: path, or path with the compression suffix modules.order
 * leaves off. */
static int
module_locate(struct modtab *t, struct module *m)
{
	static const char *const suffixes[] = { "", ".xz", ".zst", ".gz" };

	for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
		_cleanup_free_ char *full = strdup_printf("%s/%s%s", t->dir, m->path, suffixes[i]);
		char *np;

		if (!full)
			return -ENOMEM;
		if (!is_file(full))
			continue;
		if (i == 0)
			return 0;
		np = strdup_printf("%s%s", m->path, suffixes[i]);
		if (!np)
			return -ENOMEM;
		free(m->path);
		m->path = np;
		return 0;
	}
	return -ENOENT;
}

/* Fills m->deps from the "depends=a,b" string of the module's .modinfo section. */
static int
module_load_deps(struct modtab *t, struct module *m)
{
	_cleanup_free_ char *path = strdup_printf("%s/%s", t->dir, m->path);
	_cleanup_close_ int memfd = -1;
	struct mapped map = { 0 };
	const unsigned char *sec;
	size_t len, off = 0;
	int r;

	if (!path)
		return -ENOMEM;
	r = module_read(path, &map, &memfd);
	if (r < 0)
		return r;
	r = elf64_section(&map, ".modinfo", &sec, &len);
	while (r == 0 && off < len) {
		const char *s = (const char *)sec + off;
		size_t sl = strnlen(s, len - off);

		if (sl > 8 && strneq(s, "depends=", 8)) {
			const char *p = s + 8, *end = s + sl;
			while (r == 0 && p < end) {
				const char *comma = memchr(p, ',', (size_t)(end - p));
				size_t wl = comma ? (size_t)(comma - p) : (size_t)(end - p);
				if (wl > 0) {
					_cleanup_free_ char *dep = strndup(p, wl);
					r = dep ? strv_push(&m->deps, &m->n_deps,
					                    bundle_module_name(dep))
					        : -ENOMEM;
				}
				p += wl + 1;
			}
		}
		off += sl + 1;
	}
	unmap(&map);
	if (r == 0)
		m->deps_known = true;
	return r == -ENOENT ? -ENOEXEC : r;
}

static int
modtab_visit(struct modtab *t, const char *name, unsigned depth, char ***out, size_t *n_out,
             char **ret_bad)
{
	struct module *m = hashmap_get(&t->byname, name);
	int r;

	if (!m) {
		if (hashmap_get(&t->isbuiltin, name))
			return 0;
		r = -ENOENT;
		goto fail;
	}
	if (m->mark == 2)
		return 0;
	if (m->mark == 1 || depth > 64) {
		r = -ELOOP;
		goto fail;
	}
	m->mark = 1;
	r = module_locate(t, m);
	if (r == 0 && !m->deps_known)
		r = module_load_deps(t, m);
	if (r < 0)
		goto fail;
	for (size_t i = 0; i < m->n_deps; i++) {
		r = modtab_visit(t, m->deps[i], depth + 1, out, n_out, ret_bad);
		if (r < 0)
			return r;
	}
	m->mark = 2;
	return strv_push(out, n_out, strdup(m->path));
fail:
	if (ret_bad && !*ret_bad)
		*ret_bad = strdup(name);
	return r;
}

int
bundle_modules_resolve(const char *moddir, const char *const *wanted, size_t n_wanted,
                       char ***ret_paths, size_t *ret_n, char **ret_bad)
{
	struct modtab t = { .dir = moddir, .byname = HASHMAP_INIT, .isbuiltin = HASHMAP_INIT };
	char **out = NULL;
	size_t n_out = 0;
	int r;

	r = modtab_load_file(&t, "modules.builtin", modtab_builtin_line);
	if (r < 0 && r != -ENOENT)
		goto done;
	r = modtab_load_file(&t, "modules.dep", modtab_dep_line);
	if (r == -ENOENT)
		r = modtab_load_file(&t, "modules.order", modtab_order_line);
	if (r < 0)
		goto done;
	for (size_t i = 0; i < n_wanted && r >= 0; i++) {
		_cleanup_free_ char *name = bundle_module_name(wanted[i]);
		r = name ? modtab_visit(&t, name, 0, &out, &n_out, ret_bad) : -ENOMEM;
	}
	if (r >= 0) {
		*ret_paths = TAKE_PTR(out);
		*ret_n = n_out;
		r = 0;
	}
done:
	strv_free(out);
	modtab_done(&t);
	return r;
}

/* ---- the kernel ---- */

static void set_error(char **ret, const char *fmt, ...) _printf_(2, 3);

static void
set_error(char **ret, const char *fmt, ...)
{
	va_list ap;

	if (!ret)
		return;
	free(*ret);
	*ret = NULL;
	va_start(ap, fmt);
	if (vasprintf(ret, fmt, ap) < 0)
		*ret = NULL;
	va_end(ap);
}

static uint32_t
get_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Compressed kernel formats by their first bytes, to name the one found when it is not LZ4. */
static const struct {
	const char *name;
	unsigned char magic[6];
	size_t len;
} kernel_formats[] = {
	{ "lz4", { 0x02, 0x21, 0x4c, 0x18 }, 4 },
	{ "gzip", { 0x1f, 0x8b }, 2 },
	{ "xz", { 0xfd, '7', 'z', 'X', 'Z', 0 }, 6 },
	{ "zstd", { 0x28, 0xb5, 0x2f, 0xfd }, 4 },
	{ "bzip2", { 'B', 'Z', 'h' }, 3 },
	{ "lzo", { 0x89, 'L', 'Z', 'O' }, 4 },
	{ "lzma", { 0x5d, 0x00, 0x00 }, 3 },
};

int
bundle_extract_vmlinux(const char *bzimage, const char *out, char **ret_error)
{
	_cleanup_free_ char *tmp = NULL, *err = NULL;
	_cleanup_close_ int payload = -1, fd = -1;
	struct tool t = { .in_fd = -1, .out_fd = -1 };
	const char *format = "an unknown format";
	struct mapped m = { 0 };
	uint64_t start, len;
	uint32_t expected;
	struct stat st;
	int r;

	r = map_file(bzimage, &m);
	if (r < 0) {
		set_error(ret_error, "cannot read '%s': %s", bzimage, strerror(-r));
		return r;
	}
	/* The x86 boot protocol's setup header (Documentation/x86/boot.rst): the compressed
	 * kernel is payload_length bytes at payload_offset after the real-mode setup sectors. */
	if (m.size < 0x250 || memcmp(m.data + 0x202, "HdrS", 4) != 0 ||
	    (m.data[0x206] | m.data[0x207] << 8) < 0x208) {
		set_error(ret_error, "'%s' is not an x86 bzImage (boot protocol 2.08 or later)",
		          bzimage);
		r = -ENOEXEC;
		goto out;
	}
	start = ((uint64_t)(m.data[0x1f1] ? m.data[0x1f1] : 4) + 1) * 512 +
	        get_le32(m.data + 0x248);
	len = get_le32(m.data + 0x24c);
	if (!in_bounds(start, len, m.size) || len < 16) {
		set_error(ret_error, "'%s': the payload lies outside the file", bzimage);
		r = -ENOEXEC;
		goto out;
	}
	for (size_t i = 0; i < ARRAY_SIZE(kernel_formats); i++)
		if (memcmp(m.data + start, kernel_formats[i].magic, kernel_formats[i].len) == 0) {
			format = kernel_formats[i].name;
			break;
		}
	if (!streq(format, "lz4")) {
		set_error(ret_error,
		          "'%s': the kernel is compressed with %s; setup only unpacks LZ4 kernels "
		          "(Debian's cloud kernel is one)",
		          bzimage, format);
		r = -EPROTONOSUPPORT;
		goto out;
	}
	/* The build appends the uncompressed size (le32) after the LZ4 stream; lz4 would take
	 * it for another block and fail, so it is cut off and used as a check instead. */
	expected = get_le32(m.data + start + len - 4);
	payload = memfd_create("kernel-payload", MFD_CLOEXEC);
	if (payload < 0) {
		r = negative_errno();
		goto out;
	}
	r = write_all(payload, m.data + start, len - 4);
	if (r < 0 || lseek(payload, 0, SEEK_SET) < 0) {
		r = r < 0 ? r : negative_errno();
		goto out;
	}
	unmap(&m);
	tmp = strdup_printf("%s.tmp-%d", out, (int)getpid());
	if (!tmp) {
		r = -ENOMEM;
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || fchmod(fd, 0644) < 0) {
		r = negative_errno();
		set_error(ret_error, "cannot create '%s': %s", tmp, strerror(-r));
		goto out;
	}
	t.in_fd = payload;
	t.out_fd = fd;
	r = tool_run(&t, (const char *const[]){ "lz4", "-dc", "-q", NULL });
	if (r < 0) {
		err = tool_failure(&t, (const char *const[]){ "lz4", "-dc", "-q", NULL }, r);
		set_error(ret_error, "unpacking the kernel: %s", err ? err : strerror(-r));
		goto out;
	}
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != expected) {
		set_error(ret_error,
		          "unpacking the kernel gave %llu bytes, not the %u it announces",
		          (unsigned long long)st.st_size, expected);
		r = -EBADMSG;
		goto out;
	}
	if (fsync(fd) < 0) {
		r = negative_errno();
		goto out;
	}
	fd = safe_close(fd);
	r = bundle_check_pvh(tmp);
	if (r < 0) {
		set_error(ret_error,
		          "the unpacked kernel is not an x86-64 ELF with a PVH entry note "
		          "(CONFIG_PVH): %s",
		          strerror(-r));
		goto out;
	}
	if (rename(tmp, out) < 0)
		r = negative_errno();
out:
	unmap(&m);
	tool_done(&t);
	if (r < 0 && tmp)
		(void)unlink(tmp);
	if (r < 0 && ret_error && !*ret_error)
		set_error(ret_error, "%s", strerror(-r));
	return r;
}

/* ---- the manifest ---- */

void
bundle_manifest_done(struct bundle_manifest *m)
{
	free(m->kernel);
	free(m->kernel_version);
	free(m->kernel_package);
	free(m->kernel_package_version);
	free(m->modules_dir);
	strv_free(m->modules);
	free(m->rootfs);
	free(m->busybox_version);
	free(m->initramfs);
	*m = (struct bundle_manifest){ 0 };
}

/* A path the manifest may hold: relative, inside the state directory, and plain enough for a
 * QEMU command line (no ',' or '=', no spaces, no control bytes). */
static bool
safe_relpath(const char *p)
{
	if (isempty(p) || p[0] == '/')
		return false;
	for (const char *s = p; *s; s++)
		if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') &&
		    !(*s >= '0' && *s <= '9') && !strchr("._+-/", *s))
			return false;
	for (const char *s = p;;) {
		size_t n = strcspn(s, "/");
		if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		if (!s[n])
			return true;
		s += n + 1;
	}
}

static char *
manifest_path(const char *state_dir)
{
	return strdup_printf("%s/vm/bundle.json", state_dir);
}

static int
json_set_str(json_t *o, const char *key, const char *value)
{
	if (!value)
		return 0;
	return json_object_set_new(o, key, json_string(value)) < 0 ? -ENOMEM : 0;
}

int
bundle_manifest_write(const char *state_dir, const struct bundle_manifest *m)
{
	_cleanup_free_ char *path = manifest_path(state_dir), *text = NULL;
	json_t *o = json_object(), *mods = json_array();
	int r = 0;

	if (!path || !o || !mods) {
		json_decref(o);
		json_decref(mods);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->n_modules && r == 0; i++)
		r = json_array_append_new(mods, json_string(m->modules[i])) < 0 ? -ENOMEM : 0;
	if (r == 0 && json_object_set_new(o, "format", json_integer(MANIFEST_FORMAT)) < 0)
		r = -ENOMEM;
	r = r ?: json_set_str(o, "kernel", m->kernel);
	r = r ?: json_set_str(o, "kernel_version", m->kernel_version);
	r = r ?: json_set_str(o, "kernel_package", m->kernel_package);
	r = r ?: json_set_str(o, "kernel_package_version", m->kernel_package_version);
	r = r ?: json_set_str(o, "modules_dir", m->modules_dir);
	if (r == 0 && json_object_set(o, "modules", mods) < 0)
		r = -ENOMEM;
	r = r ?: json_set_str(o, "rootfs", m->rootfs);
	r = r ?: json_set_str(o, "busybox_version", m->busybox_version);
	r = r ?: json_set_str(o, "initramfs", m->initramfs);
	if (m->agent_sha256[0]) {
		r = r ?: json_set_str(o, "agent_sha256", m->agent_sha256);
		if (r == 0 && json_object_set_new(o, "agent_size",
		                                  json_integer((json_int_t)m->agent_size)) < 0)
			r = -ENOMEM;
		r = r ?: json_set_str(o, "initramfs_built", m->initramfs_built);
	}
	r = r ?: json_set_str(o, "created", m->created);
	if (r == 0) {
		text = json_dumps(o, JSON_INDENT(2));
		if (!text)
			r = -ENOMEM;
	}
	json_decref(mods);
	json_decref(o);
	if (r < 0)
		return r;
	{
		size_t len = strlen(text);
		_cleanup_free_ char *nl = strdup_printf("%s\n", text);
		if (!nl)
			return -ENOMEM;
		return write_file_atomic(path, nl, len + 1, 0644);
	}
}

static int
json_get_str(json_t *o, const char *key, bool required, char **ret)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return required ? -EINVAL : 0;
	if (!json_is_string(v))
		return -EINVAL;
	*ret = strdup(json_string_value(v));
	return *ret ? 0 : -ENOMEM;
}

static int
json_get_fixed(json_t *o, const char *key, char *out, size_t size)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || json_string_length(v) >= size)
		return -EINVAL;
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

int
bundle_manifest_read(const char *state_dir, struct bundle_manifest *ret)
{
	_cleanup_free_ char *path = manifest_path(state_dir), *text = NULL;
	struct bundle_manifest m = { 0 };
	json_t *o, *mods, *v;
	size_t len;
	int r;

	if (!path)
		return -ENOMEM;
	r = read_file_max(path, MANIFEST_MAX, &text, &len);
	if (r < 0)
		return r;
	o = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o)) {
		json_decref(o);
		return -EINVAL;
	}
	v = json_object_get(o, "format");
	r = json_is_integer(v) && json_integer_value(v) == MANIFEST_FORMAT ? 0 : -EINVAL;
	r = r ?: json_get_str(o, "kernel", true, &m.kernel);
	r = r ?: json_get_str(o, "kernel_version", true, &m.kernel_version);
	r = r ?: json_get_str(o, "kernel_package", false, &m.kernel_package);
	r = r ?: json_get_str(o, "kernel_package_version", false, &m.kernel_package_version);
	r = r ?: json_get_str(o, "modules_dir", true, &m.modules_dir);
	r = r ?: json_get_str(o, "rootfs", true, &m.rootfs);
	r = r ?: json_get_str(o, "busybox_version", false, &m.busybox_version);
	r = r ?: json_get_str(o, "initramfs", false, &m.initramfs);
	r = r ?: json_get_fixed(o, "agent_sha256", m.agent_sha256, sizeof(m.agent_sha256));
	r = r ?: json_get_fixed(o, "created", m.created, sizeof(m.created));
	r = r ?: json_get_fixed(o, "initramfs_built", m.initramfs_built, sizeof(m.initramfs_built));
	v = json_object_get(o, "agent_size");
	if (r == 0 && v) {
		if (json_is_integer(v) && json_integer_value(v) >= 0)
			m.agent_size = (uint64_t)json_integer_value(v);
		else
			r = -EINVAL;
	}
	mods = json_object_get(o, "modules");
	if (r == 0 && !json_is_array(mods))
		r = -EINVAL;
	for (size_t i = 0; r == 0 && i < json_array_size(mods); i++) {
		v = json_array_get(mods, i);
		if (!json_is_string(v) || !safe_relpath(json_string_value(v)) ||
		    strchr(json_string_value(v), '/'))
			r = -EINVAL;
		else
			r = strv_push(&m.modules, &m.n_modules, strdup(json_string_value(v)));
	}
	json_decref(o);
	if (r == 0 && (!safe_relpath(m.kernel) || !safe_relpath(m.modules_dir) ||
	               !safe_relpath(m.rootfs) || (m.initramfs && !safe_relpath(m.initramfs)) ||
	               !safe_relpath(m.kernel_version) || strchr(m.kernel_version, '/')))
		r = -EINVAL;
	if (r == 0 && m.agent_sha256[0] && strlen(m.agent_sha256) != 64)
		r = -EINVAL;
	if (r < 0) {
		bundle_manifest_done(&m);
		return r;
	}
	*ret = m;
	return 0;
}

/* ---- loading at daemon start ---- */

void
vm_bundle_done(struct vm_bundle *b)
{
	free(b->kernel);
	free(b->initrd);
	free(b->rootfs);
	free(b->kernel_version);
	*b = (struct vm_bundle){ 0 };
}

/* Serialises the writers of <state>/vm: setup, and a daemon rebuilding the initramfs. */
static int
lock_vm_dir(const char *vm_dir, bool wait, int *ret_fd)
{
	_cleanup_free_ char *path = strdup_printf("%s/.lock", vm_dir);
	_cleanup_close_ int fd = -1;

	if (!path)
		return -ENOMEM;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return negative_errno();
	while (flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) < 0)
		if (errno != EINTR)
			return negative_errno();
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static char *
state_path(const char *state_dir, const char *rel)
{
	return strdup_printf("%s/%s", state_dir, rel);
}

/* Checks that a file the bundle needs is there; logs what to do when it is not. what NULL:
 * an operator's --kernel or --initrd. */
static int
need_file(const char *state_dir, const char *what, const char *path)
{
	if (is_file(path))
		return 0;
	if (!what)
		log_error("guest kernel bundle: '%s' (given on the command line) is missing or "
		          "empty",
		          path);
	else
		log_error("guest kernel bundle: the %s '%s' is missing or empty; run 'sandboxd "
		          "setup --force --state-dir %s'",
		          what, path, state_dir);
	return -ENOENT;
}

static char *
initramfs_rel(const struct bundle_manifest *m)
{
	return m->initramfs ? strdup(m->initramfs)
	                    : strdup_printf("vm/initramfs-%s.cpio", m->kernel_version);
}

/* Rebuilds the initramfs for agent when the manifest says it was built from another agent or
 * it is missing. Called under the vm lock with a freshly read manifest. */
static int
refresh_initramfs(const char *state_dir, struct bundle_manifest *m, const char *agent,
                  const char *sha, char **ret_initrd)
{
	_cleanup_free_ char *rel = initramfs_rel(m), *path = NULL, *moddir = NULL;
	char newsha[65], old[13];
	uint64_t size;
	bool missing;
	int r;

	if (!rel)
		return -ENOMEM;
	path = state_path(state_dir, rel);
	moddir = state_path(state_dir, m->modules_dir);
	if (!path || !moddir)
		return -ENOMEM;
	if (m->initramfs && is_file(path) && streq(m->agent_sha256, sha)) {
		*ret_initrd = TAKE_PTR(path);
		return 0;
	}
	r = bundle_write_initramfs(path, agent, moddir, m->modules, m->n_modules, newsha, &size);
	if (r < 0) {
		log_error("guest initramfs: cannot build '%s' from agent '%s': %s", path, agent,
		          strerror(-r));
		return r;
	}
	missing = !m->initramfs || !is_file(path);
	snprintf(old, sizeof(old), "%.12s", m->agent_sha256[0] ? m->agent_sha256 : "none");
	free(m->initramfs);
	m->initramfs = TAKE_PTR(rel);
	memcpy(m->agent_sha256, newsha, sizeof(newsha));
	m->agent_size = size;
	format_rfc3339(now_unix_ms(), m->initramfs_built);
	r = bundle_manifest_write(state_dir, m);
	if (r < 0) {
		log_error("guest kernel bundle: cannot update '%s/vm/bundle.json': %s", state_dir,
		          strerror(-r));
		return r;
	}
	if (missing)
		log_info("guest initramfs: '%s' was missing: built it with agent '%s' (sha256 "
		         "%.12s)",
		         path, agent, newsha);
	else
		log_info("guest initramfs: agent '%s' changed (sha256 %.12s, was %s): rebuilt '%s'",
		         agent, newsha, old, path);
	*ret_initrd = TAKE_PTR(path);
	return 0;
}

int
bundle_load(const char *state_dir, const char *agent_path, const char *kernel, const char *initrd,
            struct vm_bundle *ret)
{
	_cleanup_free_ char *agent_default = NULL, *vm_dir = NULL;
	_cleanup_close_ int lock = -1;
	struct bundle_manifest m = { 0 };
	struct vm_bundle b = { 0 };
	char sha[65];
	int r;

	r = bundle_manifest_read(state_dir, &m);
	if (r == -ENOENT && kernel && initrd) {
		r = need_file(state_dir, NULL, kernel);
		r = r ?: need_file(state_dir, NULL, initrd);
		if (r < 0)
			return r;
		b.kernel = strdup(kernel);
		b.initrd = strdup(initrd);
		if (!b.kernel || !b.initrd) {
			vm_bundle_done(&b);
			return -ENOMEM;
		}
		*ret = b;
		return 0;
	}
	if (r == -ENOENT) {
		log_error(
		        "guest kernel bundle: none in '%s/vm'; run 'sandboxd setup --state-dir %s' "
		        "first (it downloads Debian's cloud kernel and builds the boot files)",
		        state_dir, state_dir);
		return r;
	}
	if (r < 0) {
		log_error("guest kernel bundle: '%s/vm/bundle.json' cannot be read (%s); run "
		          "'sandboxd setup --force --state-dir %s'",
		          state_dir, strerror(-r), state_dir);
		return r;
	}
	b.kernel = kernel ? strdup(kernel) : state_path(state_dir, m.kernel);
	b.rootfs = state_path(state_dir, m.rootfs);
	b.kernel_version = kernel ? NULL : strdup(m.kernel_version);
	if (!b.kernel || !b.rootfs || (!kernel && !b.kernel_version)) {
		r = -ENOMEM;
		goto out;
	}
	r = need_file(state_dir, kernel ? NULL : "kernel", b.kernel);
	r = r ?: need_file(state_dir, "root disk", b.rootfs);
	if (r < 0)
		goto out;
	if (initrd) {
		r = need_file(state_dir, NULL, initrd);
		if (r == 0 && !(b.initrd = strdup(initrd)))
			r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < m.n_modules && r == 0; i++) {
		_cleanup_free_ char *p =
		        strdup_printf("%s/%s/%s", state_dir, m.modules_dir, m.modules[i]);
		r = p ? need_file(state_dir, "kernel module", p) : -ENOMEM;
	}
	if (r < 0)
		goto out;
	if (!agent_path) {
		agent_path = agent_default = bundle_default_agent();
		if (!agent_path) {
			r = -ENOMEM;
			goto out;
		}
	}
	r = sha256_file(agent_path, sha);
	if (r < 0) {
		log_error("guest agent '%s' cannot be read (%s); build sandbox-guestd or pass "
		          "--agent PATH",
		          agent_path, strerror(-r));
		goto out;
	}
	if (!(vm_dir = strdup_printf("%s/vm", state_dir))) {
		r = -ENOMEM;
		goto out;
	}
	if (!m.initramfs || !streq(m.agent_sha256, sha)) {
		/* Another writer may be at it: rebuild under the lock, from a fresh manifest. */
		r = lock_vm_dir(vm_dir, true, &lock);
		if (r < 0) {
			log_error("guest kernel bundle: cannot lock '%s': %s", vm_dir,
			          strerror(-r));
			goto out;
		}
		bundle_manifest_done(&m);
		r = bundle_manifest_read(state_dir, &m);
		if (r < 0) {
			log_error("guest kernel bundle: '%s/vm/bundle.json' changed and cannot be "
			          "read (%s)",
			          state_dir, strerror(-r));
			goto out;
		}
	}
	r = refresh_initramfs(state_dir, &m, agent_path, sha, &b.initrd);
out:
	bundle_manifest_done(&m);
	if (r < 0) {
		vm_bundle_done(&b);
		return r;
	}
	*ret = b;
	return 0;
}

/* ---- writable layers ---- */

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

/* ---- the agent and the host ---- */

char *
bundle_default_agent(void)
{
	static const char deleted[] = " (deleted)";
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	/* After a package upgrade replaced the binary, the link reads "/usr/sbin/x (deleted)". */
	if ((size_t)n > strlen(deleted) && streq(exe + n - strlen(deleted), deleted))
		exe[n - strlen(deleted)] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = '\0';
	return strdup_printf("%s/sandbox-guestd", exe);
}

#if defined(__x86_64__) || defined(__i386__)
struct tsc_sample {
	uint64_t ns;
	uint64_t tsc;
};

static uint64_t
raw_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The TSC read between two clock reads, from the tightest of a few tries. */
static struct tsc_sample
tsc_sample(void)
{
	struct tsc_sample best = { 0 };
	uint64_t best_gap = UINT64_MAX;

	for (int i = 0; i < 16; i++) {
		uint64_t t0 = raw_ns(), tsc = __rdtsc(), t1 = raw_ns();
		if (t1 - t0 < best_gap) {
			best_gap = t1 - t0;
			best = (struct tsc_sample){ .ns = t0 + (t1 - t0) / 2, .tsc = tsc };
		}
	}
	return best;
}
#endif

int
bundle_host_tsc_khz(unsigned *ret)
{
#if defined(__x86_64__) || defined(__i386__)
	struct timespec pause = { .tv_sec = 0, .tv_nsec = 100 * 1000 * 1000 };
	struct tsc_sample a, b;
	uint64_t khz;

	a = tsc_sample();
	while (nanosleep(&pause, &pause) < 0 && errno == EINTR)
		;
	b = tsc_sample();
	if (b.ns <= a.ns || b.tsc <= a.tsc)
		return -EIO;
	khz = ((b.tsc - a.tsc) * 1000000u + (b.ns - a.ns) / 2) / (b.ns - a.ns);
	if (khz < 100000 || khz > 20000000) /* 100 MHz .. 20 GHz */
		return -ERANGE;
	*ret = (unsigned)khz;
	return 0;
#else
	return -EOPNOTSUPP;
#endif
}

/* ---- setup ---- */

struct setup {
	const struct bundle_opts *o;
	const char *state;
	char *vm_dir;
	char *deb_dir;
	char *scratch;              /* removed at the end */
	char *failure;              /* what went wrong and what to do, printed once at the end */
	struct bundle_manifest old; /* the previous run's manifest, or zeroes */
};

/* A package as apt knows it. query is what was asked for; via_depends: the package the query
 * (a metapackage) depends on, for the kernel. */
struct debpkg {
	const char *query;
	const char *depends_prefix;
	char *name;
	char *version;
	char *arch;
	char *sha256;
	char *file; /* in the cache */
};

static void
debpkg_done(struct debpkg *d)
{
	free(d->name);
	free(d->version);
	free(d->arch);
	free(d->sha256);
	free(d->file);
}

static void step(const char *fmt, ...) _printf_(1, 2);

static void
step(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("setup: ", stdout);
	vfprintf(stdout, fmt, ap);
	fputc('\n', stdout);
	fflush(stdout);
	va_end(ap);
}

static int fail(struct setup *s, int r, const char *fmt, ...) _printf_(3, 4);

/* Records the first failure (printed by bundle_setup) and returns r. */
static int
fail(struct setup *s, int r, const char *fmt, ...)
{
	va_list ap;

	if (s->failure)
		return r;
	va_start(ap, fmt);
	if (vasprintf(&s->failure, fmt, ap) < 0)
		s->failure = NULL;
	va_end(ap);
	return r;
}

/* The value of field in the first stanza of a Debian control text, or NULL. */
static char *
control_field(const char *text, const char *field)
{
	size_t fl = strlen(field);

	for (const char *p = text; p && *p && *p != '\n';) {
		if (strneq(p, field, fl) && p[fl] == ':') {
			const char *v = p + fl + 1;
			size_t n;

			v += strspn(v, " \t");
			n = strcspn(v, "\n");
			while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r'))
				n--;
			return strndup(v, n);
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return NULL;
}

/* Package names and versions end up in file names: keep them to what Debian allows. */
static bool
debian_token(const char *s)
{
	if (isempty(s) || strlen(s) > 128)
		return false;
	for (; *s; s++)
		if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') &&
		    !(*s >= '0' && *s <= '9') && !strchr(".+-~:", *s))
			return false;
	return true;
}

static int
apt_show(const char *pkg, char **ret, char **why)
{
	const char *argv[] = { "apt-cache", "show", "--no-all-versions", pkg, NULL };
	struct tool t = { .in_fd = -1, .out_fd = -1, .capture_out = true };
	int r = tool_run(&t, argv);

	if (r == 0 && isempty(t.out))
		r = -EIO;
	if (r < 0)
		*why = tool_failure(&t, argv, r);
	else
		*ret = TAKE_PTR(t.out);
	tool_done(&t);
	return r;
}

/* apt-cache: which package and version d->query means now. -EIO when apt does not know it. */
static int
apt_resolve(struct setup *s, struct debpkg *d, char **why)
{
	_cleanup_free_ char *text = NULL, *deps = NULL, *name = NULL;
	int r;

	r = apt_show(d->query, &text, why);
	if (r < 0)
		return r;
	if (d->depends_prefix) {
		/* "linux-image-6.1.0-57-cloud-amd64 (= 6.1.192-3)": the first alternative that
		 * names a kernel image. */
		deps = control_field(text, "Depends");
		for (const char *p = deps; p && *p;) {
			size_t n;

			p += strspn(p, " ,|");
			n = strcspn(p, " ,|(");
			if (n > strlen(d->depends_prefix) &&
			    strneq(p, d->depends_prefix, strlen(d->depends_prefix))) {
				name = strndup(p, n);
				break;
			}
			p += n;
			p += strcspn(p, ",|");
		}
		if (!name) {
			*why = strdup_printf("'%s' depends on no %s* package (Depends: %s)",
			                     d->query, d->depends_prefix, deps ? deps : "none");
			return -EIO;
		}
		free(text);
		text = NULL;
		r = apt_show(name, &text, why);
		if (r < 0)
			return r;
	}
	debpkg_done(d);
	*d = (struct debpkg){ .query = d->query, .depends_prefix = d->depends_prefix };
	d->name = control_field(text, "Package");
	d->version = control_field(text, "Version");
	d->arch = control_field(text, "Architecture");
	d->sha256 = control_field(text, "SHA256");
	if (!debian_token(d->name) || !debian_token(d->version) || !debian_token(d->arch)) {
		*why = strdup_printf("apt-cache show '%s' gave no usable Package, Version and "
		                     "Architecture",
		                     name ? name : d->query);
		return -EBADMSG;
	}
	{
		_cleanup_buf_ struct buf b = BUF_INIT(PATH_MAX);
		(void)buf_printf(&b, "%s/%s_", s->deb_dir, d->name);
		for (const char *p = d->version; *p; p++)
			(void)(*p == ':' ? buf_puts(&b, "%3a") : buf_putc(&b, *p));
		if (buf_printf(&b, "_%s.deb", d->arch) < 0)
			return -ENAMETOOLONG;
		d->file = buf_steal(&b);
	}
	return d->file ? 0 : -ENOMEM;
}

/* The .deb in the cache, checked against the archive's SHA256; downloaded when missing. */
static int
apt_download(struct setup *s, struct debpkg *d, char **why)
{
	_cleanup_tmpdir_ char *dl = NULL;
	_cleanup_free_ char *spec = NULL, *got = NULL;
	char sha[65];
	struct dirent *de;
	DIR *dir;
	int r;

	if (!s->o->force && is_file(d->file) &&
	    (!d->sha256 || (sha256_file(d->file, sha) == 0 && streq(sha, d->sha256)))) {
		step("%s %s: in the cache", d->name, d->version);
		return 0;
	}
	r = make_tmpdir(s->deb_dir, ".download", &dl);
	if (r < 0) {
		*why = strdup_printf("cannot create a directory in '%s': %s", s->deb_dir,
		                     strerror(-r));
		return r;
	}
	spec = strdup_printf("%s=%s", d->name, d->version);
	if (!spec)
		return -ENOMEM;
	r = run_quiet(dl, (const char *const[]){ "apt-get", "download", "-q", spec, NULL }, why);
	if (r < 0)
		return r;
	dir = opendir(dl);
	if (!dir)
		return negative_errno();
	while ((de = readdir(dir))) {
		size_t n = strlen(de->d_name);
		if (n > 4 && streq(de->d_name + n - 4, ".deb") && !got)
			got = strdup_printf("%s/%s", dl, de->d_name);
	}
	closedir(dir);
	if (!got) {
		*why = strdup_printf("'apt-get download %s' left no .deb behind", spec);
		return -EIO;
	}
	if (d->sha256 && (sha256_file(got, sha) < 0 || !streq(sha, d->sha256))) {
		*why = strdup_printf("the downloaded '%s' does not match the archive's SHA256",
		                     got);
		return -EBADMSG;
	}
	if (rename(got, d->file) < 0)
		return negative_errno();
	step("%s %s: downloaded (%.1f MB)", d->name, d->version, file_size(d->file) / 1e6);
	return 0;
}

typedef int (*apt_fn)(struct setup *s, struct debpkg *d, char **why);

/* Runs an apt step; when apt fails (missing or stale lists) and we are root, runs
 * `apt-get update` once and tries again. */
static int
apt_with_update(struct setup *s, apt_fn fn, struct debpkg *d, const char *doing)
{
	for (int attempt = 0;; attempt++) {
		_cleanup_free_ char *why = NULL, *uwhy = NULL;
		int r = fn(s, d, &why);

		if (r >= 0)
			return r;
		if (r != -EIO || attempt > 0)
			return fail(
			        s, r,
			        "%s '%s': %s\n  check the apt sources (/etc/apt/sources.list*) and "
			        "the network, then run 'sandboxd setup' again",
			        doing, d->query, why ? why : strerror(-r));
		if (geteuid() != 0)
			return fail(s, r,
			            "%s '%s': %s\n  the apt package lists are probably missing or "
			            "out of "
			            "date: run 'sudo sandboxd setup' (it runs 'apt-get update'), "
			            "or run "
			            "'sudo apt-get update' first",
			            doing, d->query, why ? why : strerror(-r));
		step("apt: %s '%s' failed; running 'apt-get update' and trying again", doing,
		     d->query);
		r = run_quiet(NULL, (const char *const[]){ "apt-get", "update", "-q", NULL },
		              &uwhy);
		if (r < 0)
			return fail(s, r,
			            "%s\n  check the apt sources (/etc/apt/sources.list*) and the "
			            "network, "
			            "then run 'sandboxd setup' again",
			            uwhy ? uwhy : strerror(-r));
	}
}

static int
deb_extract(struct setup *s, const struct debpkg *d, const char *sub, char **ret_root)
{
	_cleanup_free_ char *root = strdup_printf("%s/%s", s->scratch, sub), *why = NULL;
	int r;

	if (!root)
		return -ENOMEM;
	rm_rf(root);
	r = run_quiet(NULL, (const char *const[]){ "dpkg-deb", "-x", d->file, root, NULL }, &why);
	if (r < 0)
		return fail(s, r, "unpacking '%s': %s\n  remove it and run 'sandboxd setup' again",
		            d->file, why ? why : strerror(-r));
	*ret_root = TAKE_PTR(root);
	return 0;
}

/* 'y', 'm' or 0 for CONFIG_name in a kernel config text. */
static char
config_value(const char *config, const char *name)
{
	size_t nl = strlen(name);

	for (const char *p = config; p && *p;) {
		if (strneq(p, name, nl) && p[nl] == '=')
			return p[nl + 1] == 'y' || p[nl + 1] == 'm' ? p[nl + 1] : 0;
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

/* The module list of an existing modules directory (its "order" file), if every module in it
 * is there. */
static int
modules_dir_read(const char *dir, char ***ret, size_t *ret_n)
{
	_cleanup_free_ char *order = strdup_printf("%s/order", dir), *text = NULL;
	char **v = NULL;
	size_t n = 0;
	int r;

	if (!order)
		return -ENOMEM;
	r = read_file_max(order, 64 * 1024, &text, NULL);
	if (r < 0)
		return r;
	for (char *line = text, *next; line && *line; line = next) {
		_cleanup_free_ char *p = NULL;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (!*line)
			continue;
		p = strdup_printf("%s/%s", dir, line);
		r = !p ? -ENOMEM : strchr(line, '/') || !is_file(p) ? -ENOENT : 0;
		r = r ?: strv_push(&v, &n, strdup(line));
		if (r < 0) {
			strv_free(v);
			return r;
		}
	}
	if (n == 0)
		return -ENOENT;
	*ret = v;
	*ret_n = n;
	return 0;
}

/* Puts a freshly built directory in place of dst (whole, or not at all). */
static int
replace_dir(const char *staging, const char *dst)
{
	if (rename(staging, dst) == 0)
		return 0;
	if (errno != EEXIST && errno != ENOTEMPTY)
		return negative_errno();
	if (renameat2(AT_FDCWD, staging, AT_FDCWD, dst, RENAME_EXCHANGE) < 0)
		return negative_errno();
	rm_rf(staging); /* now the old one */
	return 0;
}

static int
build_modules(struct setup *s, const char *kroot, const char *kver, const char *dst,
              struct bundle_manifest *m)
{
	_cleanup_free_ char *config_path = NULL, *config = NULL, *moddir = NULL, *bad = NULL;
	_cleanup_tmpdir_ char *staging = NULL;
	_cleanup_buf_ struct buf order = BUF_INIT(64 * 1024), names = BUF_INIT(4096);
	const char *wanted[ARRAY_SIZE(guest_modules) + 1];
	size_t n_wanted = 0, n_paths = 0;
	char **paths = NULL;
	char ext4;
	int r;

	config_path = strdup_printf("%s/boot/config-%s", kroot, kver);
	moddir = strdup_printf("%s/lib/modules/%s", kroot, kver);
	if (!config_path || !moddir)
		return -ENOMEM;
	if (!is_dir(moddir)) {
		free(moddir);
		moddir = strdup_printf("%s/usr/lib/modules/%s", kroot, kver);
		if (!moddir)
			return -ENOMEM;
	}
	r = read_file_max(config_path, 16 * 1024 * 1024, &config, NULL);
	if (r < 0)
		return fail(s, r, "kernel %s: no config file '%s' in the package: %s", kver,
		            config_path, strerror(-r));
	for (size_t i = 0; i < ARRAY_SIZE(guest_modules); i++)
		wanted[n_wanted++] = guest_modules[i];
	ext4 = config_value(config, "CONFIG_EXT4_FS");
	if (ext4 == 'm')
		wanted[n_wanted++] = "ext4";
	else if (ext4 != 'y')
		return fail(s, -ENOTSUP, "kernel %s has no ext4 (CONFIG_EXT4_FS is not set)", kver);
	r = bundle_modules_resolve(moddir, wanted, n_wanted, &paths, &n_paths, &bad);
	if (r < 0)
		return fail(s, r, "kernel %s: module '%s': %s", kver, bad ? bad : "?",
		            r == -ENOENT  ? "not in the package (nor built in)"
		            : r == -ELOOP ? "its dependencies form a cycle"
		                          : strerror(-r));
	r = make_tmpdir(s->vm_dir, ".modules", &staging);
	for (size_t i = 0; i < n_paths && r == 0; i++) {
		_cleanup_free_ char *name = bundle_module_name(paths[i]), *src = NULL, *out = NULL,
		                    *why = NULL;
		_cleanup_close_ int memfd = -1;
		struct mapped map = { 0 };

		src = strdup_printf("%s/%s", moddir, paths[i]);
		out = strdup_printf("%s/%s.ko", staging, name ? name : "");
		if (!name || !src || !out) {
			r = -ENOMEM;
			break;
		}
		/* Compressed modules: objcopy reads the memfd's bytes through /proc/self/fd. */
		r = module_read(src, &map, &memfd);
		if (r < 0) {
			r = fail(s, r, "module '%s': cannot read it: %s", src, strerror(-r));
			break;
		}
		unmap(&map);
		if (memfd >= 0) {
			free(src);
			src = strdup_printf("%s/%s.ko", s->scratch, name);
			r = src ? 0 : -ENOMEM;
			if (r == 0) {
				_cleanup_close_ int fd =
				        open(src, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
				struct stat st;
				_cleanup_free_ char *data = NULL;
				r = fd < 0 || fstat(memfd, &st) < 0 ? negative_errno() : 0;
				if (r == 0 && !(data = malloc((size_t)st.st_size)))
					r = -ENOMEM;
				if (r == 0 &&
				    pread(memfd, data, (size_t)st.st_size, 0) != st.st_size)
					r = -EIO;
				r = r ?: write_all(fd, data, (size_t)st.st_size);
			}
			if (r < 0)
				break;
		}
		/* Without the signature and .BTF each module loads ~70 ms faster under TCG. */
		r = run_quiet(NULL,
		              (const char *const[]){ "objcopy", "--remove-section=.BTF",
		                                     "--strip-debug", src, out, NULL },
		              &why);
		if (r < 0) {
			r = fail(s, r, "stripping module '%s': %s", src, why ? why : strerror(-r));
			break;
		}
		(void)chmod(out, 0644);
		if (buf_printf(&order, "%s.ko\n", name) < 0 ||
		    buf_printf(&names, "%s%s", i ? " " : "", name) < 0 ||
		    strv_push(&m->modules, &m->n_modules, strdup_printf("%s.ko", name)) < 0)
			r = -ENOMEM;
	}
	strv_free(paths);
	if (r < 0)
		return fail(s, r, "building the modules for %s: %s", kver, strerror(-r));
	{
		_cleanup_free_ char *order_path = strdup_printf("%s/order", staging);
		r = order_path ? write_file_atomic(order_path, order.data, order.len, 0644)
		               : -ENOMEM;
	}
	if (r == 0 && chmod(staging, 0755) < 0)
		r = negative_errno();
	r = r ?: replace_dir(staging, dst);
	if (r < 0)
		return fail(s, r, "cannot put the modules in '%s': %s", dst, strerror(-r));
	free(TAKE_PTR(staging));
	step("modules: %zu for %s, in load order: %s%s", m->n_modules, kver, names.data,
	     ext4 == 'y' ? " (ext4 is built in)" : "");
	return 0;
}

static int
setup_kernel(struct setup *s, struct bundle_manifest *m)
{
	_cleanup_free_ char *vmlinux = NULL, *moddir = NULL, *kroot = NULL, *bzimage = NULL,
	                    *why = NULL;
	struct debpkg d = { .query = KERNEL_META, .depends_prefix = "linux-image-" };
	const char *kver;
	bool need_kernel, need_modules;
	int r;

	r = apt_with_update(s, apt_resolve, &d, "finding the current kernel of");
	if (r < 0)
		goto out;
	kver = d.name + strlen("linux-image-");
	step("kernel: %s %s (what %s depends on now)", d.name, d.version, KERNEL_META);
	m->kernel = strdup_printf("vm/vmlinux-%s", kver);
	m->modules_dir = strdup_printf("vm/modules-%s", kver);
	m->kernel_version = strdup(kver);
	m->kernel_package = strdup(d.name);
	m->kernel_package_version = strdup(d.version);
	if (!m->kernel || !m->modules_dir || !m->kernel_version || !m->kernel_package ||
	    !m->kernel_package_version || !safe_relpath(m->kernel)) {
		r = fail(s, -EINVAL, "kernel version '%s' is not usable in a file name", kver);
		goto out;
	}
	vmlinux = state_path(s->state, m->kernel);
	moddir = state_path(s->state, m->modules_dir);
	if (!vmlinux || !moddir) {
		r = -ENOMEM;
		goto out;
	}
	need_kernel = s->o->force || bundle_check_pvh(vmlinux) < 0;
	need_modules = s->o->force || modules_dir_read(moddir, &m->modules, &m->n_modules) < 0;
	if (!need_kernel && !need_modules) {
		step("kernel: %s and its %zu modules are there, reused", m->kernel, m->n_modules);
		goto out;
	}
	r = apt_with_update(s, apt_download, &d, "downloading");
	r = r ?: deb_extract(s, &d, "kernel", &kroot);
	if (r < 0)
		goto out;
	if (need_kernel) {
		bzimage = strdup_printf("%s/boot/vmlinuz-%s", kroot, kver);
		if (!bzimage) {
			r = -ENOMEM;
			goto out;
		}
		r = bundle_extract_vmlinux(bzimage, vmlinux, &why);
		if (r < 0) {
			r = fail(s, r, "kernel %s: %s", kver, why ? why : strerror(-r));
			goto out;
		}
		step("kernel: %s (%.1f MB, uncompressed ELF with the PVH entry note)", m->kernel,
		     file_size(vmlinux) / 1e6);
	}
	if (need_modules) {
		strv_free(m->modules);
		m->modules = NULL;
		m->n_modules = 0;
		r = build_modules(s, kroot, kver, moddir, m);
	}
out:
	debpkg_done(&d);
	return r;
}

/* Collects debugfs commands that give every entry of a tree to root (and the sandbox user's
 * home to it): mkfs.ext4 -d copies owners, and only root could have set them on the files. */
static struct buf *owner_cmds;
static size_t owner_root_len;

static int
owner_cmd(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	const char *rel = path + owner_root_len;
	unsigned id = streq(rel, "/sandbox/home") ? SANDBOX_UID : 0;

	if (*rel == '\0')
		return 0;
	return buf_printf(owner_cmds, "sif %s uid %u\nsif %s gid %u\n", rel, id, rel, id) < 0 ? -1
	                                                                                      : 0;
}

/* "usr/bin/[" as busybox lists it: relative, no "." or ".." component, plain characters. */
static bool
applet_path_ok(const char *p)
{
	_cleanup_free_ char *plain = strdup(p);

	if (!plain)
		return false;
	for (char *c = plain; *c; c++)
		if (*c == '[' || *c == ']')
			*c = '_';
	return safe_relpath(plain);
}

static int
build_rootfs(struct setup *s, const char *busybox, const char *out, size_t *ret_applets,
             uint64_t *ret_mb)
{
	static const struct {
		const char *path;
		mode_t mode;
	} dirs[] = {
		{ "bin", 0755 },     { "sbin", 0755 },         { "usr", 0755 },
		{ "usr/bin", 0755 }, { "usr/sbin", 0755 },     { "etc", 0755 },
		{ "root", 0700 },    { "tmp", 01777 },         { "proc", 0555 },
		{ "sys", 0555 },     { "dev", 0755 },          { "run", 0755 },
		{ "mnt", 0755 },     { "var", 0755 },          { "var/tmp", 01777 },
		{ "sandbox", 0755 }, { "sandbox/home", 0755 },
	};
	static const struct {
		const char *path;
		mode_t mode;
		const char *text;
	} files[] = {
		{ "etc/passwd", 0644,
		  "root:x:0:0:root:/root:/bin/sh\n"
		  "sandbox:x:1001:1001:sandbox:/sandbox/home:/bin/sh\n" },
		{ "etc/group", 0644, "root:x:0:\nsandbox:x:1001:\n" },
		{ "etc/shadow", 0600, "root:*:19000:0:99999:7:::\nsandbox:*:19000:0:99999:7:::\n" },
		{ "etc/hostname", 0644, "sandbox\n" },
		{ "etc/hosts", 0644, "127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\tsandbox\n" },
		{ "etc/profile", 0644,
		  "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
		  "export PS1='\\u@\\h:\\w\\$ '\n"
		  "umask 022\n" },
	};
	_cleanup_free_ char *root = strdup_printf("%s/rootfs", s->scratch), *bb = NULL, *tmp = NULL,
	                    *why = NULL;
	struct tool t = { .in_fd = -1, .out_fd = -1, .capture_out = true };
	size_t applets = 0;
	uint64_t mb;
	char size[32];
	int r;

	if (!root)
		return -ENOMEM;
	rm_rf(root);
	r = mkdir_mode(root, 0755);
	for (size_t i = 0; i < ARRAY_SIZE(dirs) && r == 0; i++) {
		_cleanup_free_ char *p = strdup_printf("%s/%s", root, dirs[i].path);
		r = p ? mkdir_mode(p, dirs[i].mode) : -ENOMEM;
	}
	for (size_t i = 0; i < ARRAY_SIZE(files) && r == 0; i++) {
		_cleanup_free_ char *p = strdup_printf("%s/%s", root, files[i].path);
		r = p ? write_file_atomic(p, files[i].text, strlen(files[i].text), files[i].mode)
		      : -ENOMEM;
	}
	bb = strdup_printf("%s/bin/busybox", root);
	r = r ?: bb ? copy_file(busybox, bb, 0755) : -ENOMEM;
	if (r < 0)
		return fail(s, r, "building the root disk in '%s': %s", root, strerror(-r));
	r = tool_run(&t, (const char *const[]){ bb, "--list-full", NULL });
	if (r < 0) {
		why = tool_failure(&t, (const char *const[]){ bb, "--list-full", NULL }, r);
		tool_done(&t);
		return fail(s, r, "listing busybox's applets: %s", why ? why : strerror(-r));
	}
	/* "bin/sh", "usr/bin/env", ...: one symlink each at its usual place ("linuxrc" has
	 * none). */
	for (char *line = t.out, *next; line && *line && r == 0; line = next) {
		_cleanup_free_ char *p = NULL;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (!strchr(line, '/') || streq(line, "bin/busybox") || !applet_path_ok(line))
			continue;
		p = strdup_printf("%s/%s", root, line);
		if (!p) {
			r = -ENOMEM;
			break;
		}
		if (symlink("/bin/busybox", p) == 0)
			applets++;
		else if (errno != EEXIST)
			r = negative_errno();
	}
	tool_done(&t);
	if (r < 0)
		return fail(s, r, "building the root disk in '%s': %s", root, strerror(-r));
	if (geteuid() == 0) {
		_cleanup_free_ char *home = strdup_printf("%s/sandbox/home", root);
		if (!home || lchown(home, SANDBOX_UID, SANDBOX_UID) < 0)
			return fail(s, home ? negative_errno() : -ENOMEM, "chown of '%s' failed",
			            home);
	}
	/* Read-only, so it only needs to fit: the contents plus room for ext4's own tables. */
	mb = MAX(16u, (file_size(bb) * 3 / 2 + (8u << 20)) >> 20);
	snprintf(size, sizeof(size), "%lluM", (unsigned long long)mb);
	tmp = strdup_printf("%s.tmp-%d", out, (int)getpid());
	if (!tmp)
		return -ENOMEM;
	(void)unlink(tmp);
	r = run_quiet(NULL,
	              (const char *const[]){ "mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-L",
	                                     "sbxroot", "-E", "root_owner=0:0", "-d", root, tmp,
	                                     size, NULL },
	              &why);
	if (r < 0) {
		(void)unlink(tmp);
		return fail(s, r, "making the root disk: %s", why ? why : strerror(-r));
	}
	if (geteuid() != 0) {
		_cleanup_buf_ struct buf cmds = BUF_INIT(4 * 1024 * 1024);
		_cleanup_close_ int memfd = memfd_create("debugfs-cmds", MFD_CLOEXEC);
		struct tool dt = { .in_fd = -1, .out_fd = -1 };
		const char *argv[] = { "debugfs", "-w", "-f", "-", tmp, NULL };

		owner_cmds = &cmds;
		owner_root_len = strlen(root);
		r = memfd < 0 ? negative_errno() : 0;
		if (r == 0 && nftw(root, owner_cmd, 16, FTW_PHYS) != 0)
			r = -ENOMEM;
		r = r ?: write_all(memfd, cmds.data, cmds.len);
		if (r == 0 && lseek(memfd, 0, SEEK_SET) < 0)
			r = negative_errno();
		dt.in_fd = memfd;
		r = r ?: tool_run(&dt, argv);
		if (r < 0) {
			free(why);
			why = tool_failure(&dt, argv, r);
		}
		tool_done(&dt);
		owner_cmds = NULL;
		if (r < 0) {
			(void)unlink(tmp);
			return fail(s, r, "giving the root disk's files to root: %s",
			            why ? why : strerror(-r));
		}
	}
	if (rename(tmp, out) < 0) {
		r = negative_errno();
		(void)unlink(tmp);
		return fail(s, r, "cannot create '%s': %s", out, strerror(-r));
	}
	*ret_applets = applets;
	*ret_mb = mb;
	return 0;
}

static int
setup_rootfs(struct setup *s, struct bundle_manifest *m)
{
	_cleanup_free_ char *out = state_path(s->state, ROOTFS_PATH), *root = NULL, *bb = NULL;
	struct debpkg d = { .query = BUSYBOX_PACKAGE };
	size_t applets = 0;
	uint64_t mb = 0;
	int r;

	m->rootfs = strdup(ROOTFS_PATH);
	if (!out || !m->rootfs)
		return -ENOMEM;
	if (!s->o->force && is_file(out)) {
		if (s->old.busybox_version &&
		    !(m->busybox_version = strdup(s->old.busybox_version)))
			return -ENOMEM;
		step("root disk: %s is there, reused", ROOTFS_PATH);
		return 0;
	}
	r = apt_with_update(s, apt_resolve, &d, "finding");
	r = r ?: apt_with_update(s, apt_download, &d, "downloading");
	r = r ?: deb_extract(s, &d, "busybox", &root);
	if (r < 0)
		goto out;
	bb = strdup_printf("%s/bin/busybox", root);
	if (bb && !is_file(bb)) {
		free(bb);
		bb = strdup_printf("%s/usr/bin/busybox", root);
	}
	if (!bb) {
		r = -ENOMEM;
		goto out;
	}
	if (!is_file(bb)) {
		r = fail(s, -ENOENT, "'%s' holds no bin/busybox", d.file);
		goto out;
	}
	{
		_cleanup_free_ char *dir = strdup_printf("%s/images/busybox", s->state);
		r = dir ? mkdir_mode(dir, 0755) : -ENOMEM;
		if (r < 0) {
			r = fail(s, r, "cannot create '%s': %s", dir, strerror(-r));
			goto out;
		}
	}
	r = build_rootfs(s, bb, out, &applets, &mb);
	if (r < 0)
		goto out;
	m->busybox_version = TAKE_PTR(d.version);
	step("root disk: %s (busybox %s, %zu applets, %llu MiB sparse ext4, read-only)",
	     ROOTFS_PATH, m->busybox_version, applets, (unsigned long long)mb);
out:
	debpkg_done(&d);
	return r;
}

static bool
same_modules(const struct bundle_manifest *a, const struct bundle_manifest *b)
{
	if (a->n_modules != b->n_modules)
		return false;
	for (size_t i = 0; i < a->n_modules; i++)
		if (!streq(a->modules[i], b->modules[i]))
			return false;
	return true;
}

static bool
streq_null(const char *a, const char *b)
{
	return a == b || (a && b && streq(a, b));
}

static int
setup_initramfs(struct setup *s, struct bundle_manifest *m, bool *changed)
{
	_cleanup_free_ char *agent_default = NULL, *rel = NULL, *path = NULL, *moddir = NULL;
	const char *agent = s->o->agent_path;
	char sha[65];
	int r;

	if (!agent) {
		agent = agent_default = bundle_default_agent();
		if (!agent)
			return fail(s, -ENOMEM, "cannot find where sandboxd runs from");
	}
	if (!is_file(agent)) {
		step("initramfs: not built yet: no agent at '%s' (build sandbox-guestd or pass "
		     "--agent PATH); sandboxd builds it when it starts and finds the agent",
		     agent);
		return 0;
	}
	r = sha256_file(agent, sha);
	if (r < 0)
		return fail(s, r, "agent '%s': cannot read it: %s", agent, strerror(-r));
	rel = strdup_printf("vm/initramfs-%s.cpio", m->kernel_version);
	path = rel ? state_path(s->state, rel) : NULL;
	moddir = state_path(s->state, m->modules_dir);
	if (!path || !moddir)
		return -ENOMEM;
	if (!s->o->force && !*changed && is_file(path) && streq(s->old.agent_sha256, sha) &&
	    streq_null(s->old.initramfs, rel)) {
		m->initramfs = TAKE_PTR(rel);
		memcpy(m->agent_sha256, sha, sizeof(sha));
		m->agent_size = s->old.agent_size;
		memcpy(m->initramfs_built, s->old.initramfs_built, sizeof(m->initramfs_built));
		step("initramfs: %s is up to date for agent '%s'", m->initramfs, agent);
		return 0;
	}
	r = bundle_write_initramfs(path, agent, moddir, m->modules, m->n_modules, m->agent_sha256,
	                           &m->agent_size);
	if (r < 0)
		return fail(s, r, "building the initramfs '%s': %s", path, strerror(-r));
	m->initramfs = TAKE_PTR(rel);
	format_rfc3339(now_unix_ms(), m->initramfs_built);
	*changed = true;
	step("initramfs: %s (%.1f MB uncompressed cpio; /init = '%s', sha256 %.12s)", m->initramfs,
	     file_size(path) / 1e6, agent, m->agent_sha256);
	return 0;
}

/* Removes the entries of dir whose names start with prefix, or hold ".tmp-" (what an
 * interrupted write left) except the blank disks' (a running sandboxd makes those without
 * the lock). */
static void
remove_stale(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d)))
		if ((prefix && str_has_prefix(de->d_name, prefix)) ||
		    (strstr(de->d_name, ".tmp-") && !str_has_prefix(de->d_name, "blank-"))) {
			_cleanup_free_ char *p = strdup_printf("%s/%s", dir, de->d_name);
			rm_rf(p);
		}
	closedir(d);
}

int
bundle_setup(const struct bundle_opts *o)
{
	struct setup s = { .o = o, .state = o->state_dir };
	struct bundle_manifest m = { 0 };
	_cleanup_free_ char *cache = NULL;
	_cleanup_close_ int lock = -1;
	bool changed;
	int r;

	step("state directory '%s'%s", s.state,
	     o->force ? " (--force: rebuilding everything)" : "");
	cache = strdup_printf("%s/cache", s.state);
	s.vm_dir = strdup_printf("%s/vm", s.state);
	s.deb_dir = strdup_printf("%s/cache/debs", s.state);
	if (!cache || !s.vm_dir || !s.deb_dir) {
		r = -ENOMEM;
		goto out;
	}
	r = is_dir(s.state) ? 0 : mkdir_mode(s.state, 0700);
	r = r ?: mkdir_mode(cache, 0755);
	r = r ?: mkdir_mode(s.deb_dir, 0755);
	r = r ?: mkdir_mode(s.vm_dir, 0755);
	if (r < 0) {
		r = fail(&s, r, "cannot create the directories under '%s': %s", s.state,
		         strerror(-r));
		goto out;
	}
	r = lock_vm_dir(s.vm_dir, false, &lock);
	if (r == -EWOULDBLOCK) {
		step("waiting for another 'sandboxd setup' (or a sandboxd rebuilding its "
		     "initramfs) "
		     "to finish");
		r = lock_vm_dir(s.vm_dir, true, &lock);
	}
	if (r < 0) {
		r = fail(&s, r, "cannot lock '%s': %s", s.vm_dir, strerror(-r));
		goto out;
	}
	/* Under the lock no other setup runs: what an interrupted one left is garbage. */
	remove_stale(cache, "tmp-");
	remove_stale(s.deb_dir, ".download-");
	remove_stale(s.vm_dir, ".modules-");
	{
		_cleanup_free_ char *images = strdup_printf("%s/images/busybox", s.state);
		if (images)
			remove_stale(images, NULL);
	}
	r = make_tmpdir(cache, "tmp", &s.scratch);
	if (r < 0) {
		r = fail(&s, r, "cannot create a directory in '%s': %s", cache, strerror(-r));
		goto out;
	}
	if (bundle_manifest_read(s.state, &s.old) < 0)
		s.old = (struct bundle_manifest){ 0 };
	r = setup_kernel(&s, &m);
	r = r ?: setup_rootfs(&s, &m);
	if (r < 0)
		goto out;
	changed = o->force || !streq_null(s.old.kernel, m.kernel) ||
	          !streq_null(s.old.modules_dir, m.modules_dir) || !same_modules(&s.old, &m) ||
	          !streq_null(s.old.rootfs, m.rootfs) ||
	          !streq_null(s.old.busybox_version, m.busybox_version) ||
	          !streq_null(s.old.kernel_package_version, m.kernel_package_version);
	r = setup_initramfs(&s, &m, &changed);
	if (r < 0)
		goto out;
	if (!changed && s.old.created[0] && streq(s.old.agent_sha256, m.agent_sha256)) {
		step("done: nothing to do; the bundle in '%s' is up to date", s.vm_dir);
		goto out;
	}
	format_rfc3339(now_unix_ms(), m.created);
	r = bundle_manifest_write(s.state, &m);
	if (r < 0) {
		r = fail(&s, r, "cannot write '%s/bundle.json': %s", s.vm_dir, strerror(-r));
		goto out;
	}
	step("done: %s/bundle.json (kernel %s, %zu modules, root disk %s%s)", s.vm_dir,
	     m.kernel_version, m.n_modules, m.rootfs,
	     m.initramfs ? "" : "; initramfs still to build");
out:
	if (r < 0)
		fprintf(stderr, "sandboxd setup: error: %s\n",
		        s.failure ? s.failure : strerror(-r));
	tmpdir_cleanup(&s.scratch);
	bundle_manifest_done(&m);
	bundle_manifest_done(&s.old);
	free(s.vm_dir);
	free(s.deb_dir);
	free(s.failure);
	return r;
}
