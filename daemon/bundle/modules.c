/* modules.c: see modules.h. Compressed modules are unpacked into memory by their tool (xz,
 * zstd, gzip); stripping runs objcopy. Both are children (see tool.h). */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "elf64.h"
#include "hashmap.h"
#include "modules.h"
#include "setup.h"
#include "tool.h"
#include "strv.h"
#include "util.h"

/* ---- resolving: names, dependencies, load order ---- */

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
module_read(const char *path, struct elf64_map *ret, int *ret_memfd)
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
	return elf64_map_file(path, ret);
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
	struct elf64_map map = { 0 };
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
	elf64_unmap(&map);
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

/* ---- stripping: the modules directory setup builds ---- */

/* What the guest needs, in the order the agent loads them; ext4 joins when it is a module. */
static const char *const guest_modules[] = {
	"virtio_ring", "virtio",       "virtio_mmio", "virtio_blk", "virtio_console",
	"failover",    "net_failover", "virtio_net",  "overlay",
};

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

int
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

int
modules_build(struct setup *s, const char *kroot, const char *kver, const char *dst,
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
		return setup_fail(s, r, "kernel %s: no config file '%s' in the package: %s", kver,
		                  config_path, strerror(-r));
	for (size_t i = 0; i < ARRAY_SIZE(guest_modules); i++)
		wanted[n_wanted++] = guest_modules[i];
	ext4 = config_value(config, "CONFIG_EXT4_FS");
	if (ext4 == 'm')
		wanted[n_wanted++] = "ext4";
	else if (ext4 != 'y')
		return setup_fail(s, -ENOTSUP, "kernel %s has no ext4 (CONFIG_EXT4_FS is not set)",
		                  kver);
	r = bundle_modules_resolve(moddir, wanted, n_wanted, &paths, &n_paths, &bad);
	if (r < 0)
		return setup_fail(s, r, "kernel %s: module '%s': %s", kver, bad ? bad : "?",
		                  r == -ENOENT  ? "not in the package (nor built in)"
		                  : r == -ELOOP ? "its dependencies form a cycle"
		                                : strerror(-r));
	r = make_tmpdir(s->vm_dir, ".modules", &staging);
	for (size_t i = 0; i < n_paths && r == 0; i++) {
		_cleanup_free_ char *name = bundle_module_name(paths[i]), *src = NULL, *out = NULL,
		                    *why = NULL;
		_cleanup_close_ int memfd = -1;
		struct elf64_map map = { 0 };

		src = strdup_printf("%s/%s", moddir, paths[i]);
		out = strdup_printf("%s/%s.ko", staging, name ? name : "");
		if (!name || !src || !out) {
			r = -ENOMEM;
			break;
		}
		/* Compressed modules: objcopy reads the memfd's bytes through /proc/self/fd. */
		r = module_read(src, &map, &memfd);
		if (r < 0) {
			r = setup_fail(s, r, "module '%s': cannot read it: %s", src, strerror(-r));
			break;
		}
		elf64_unmap(&map);
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
			r = setup_fail(s, r, "stripping module '%s': %s", src,
			               why ? why : strerror(-r));
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
		return setup_fail(s, r, "building the modules for %s: %s", kver, strerror(-r));
	{
		_cleanup_free_ char *order_path = strdup_printf("%s/order", staging);
		r = order_path ? write_file_atomic(order_path, order.data, order.len, 0644)
		               : -ENOMEM;
	}
	if (r == 0 && chmod(staging, 0755) < 0)
		r = negative_errno();
	r = r ?: replace_dir(staging, dst);
	if (r < 0)
		return setup_fail(s, r, "cannot put the modules in '%s': %s", dst, strerror(-r));
	free(TAKE_PTR(staging));
	setup_step("modules: %zu for %s, in load order: %s%s", m->n_modules, kver, names.data,
	           ext4 == 'y' ? " (ext4 is built in)" : "");
	return 0;
}
