/* rootfs.c: see rootfs.h. busybox-static comes through apt (apt.h); the tree is made in the
 * run's scratch directory, turned into ext4 by mkfs.ext4 -d, and renamed into place. */
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "apt.h"
#include "rootfs.h"
#include "setup.h"
#include "tool.h"
#include "util.h"

#define BUSYBOX_PACKAGE "busybox-static"
#define ROOTFS_PATH "images/busybox/rootfs.ext4"
#define SANDBOX_UID 1001
/* What the tree holds, in the manifest: a root disk of another layout is built again.
 * 1: busybox, its applets, /etc. 2: /usr/bin/printenv. */
#define ROOTFS_LAYOUT 2

/* printenv, which busybox lacks, as API clients expect it: without a name the environment,
 * with names each value on a line of its own, and exit status 1 when one is not set. The names
 * go to awk on its input, so that none is taken for an option or an assignment. */
static const char printenv_sh[] =
        "#!/bin/sh\n"
        "# printenv [NAME]...: without a NAME the whole environment; with names the value of\n"
        "# each, one a line, and exit status 1 when one is not set (busybox has no printenv)\n"
        "[ $# -eq 0 ] && exec env\n"
        "for name; do printf '%s\\n' \"$name\"; done | awk '\n"
        "\t{ if ($0 !~ /=/ && ($0 in ENVIRON)) print ENVIRON[$0]; else rc = 1 }\n"
        "\tEND { exit rc }'\n";

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
	return bundle_safe_relpath(plain);
}

/* The root disk's tree, made afresh in root: the directories, /etc, printenv, and busybox as
 * /bin/busybox. */
static int
rootfs_tree(struct setup *s, const char *busybox, const char *root)
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
		{ "usr/bin/printenv", 0755, printenv_sh },
	};
	_cleanup_free_ char *bb = NULL;
	int r;

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
		return setup_fail(s, r, "building the root disk in '%s': %s", root, strerror(-r));
	return 0;
}

/* Busybox's applets in the tree at root, as their usual paths say, and the sandbox user's
 * home given to it when we are root (rootfs_owners() does it otherwise). */
static int
rootfs_applets(struct setup *s, const char *root, size_t *ret_applets)
{
	_cleanup_free_ char *bb = strdup_printf("%s/bin/busybox", root), *why = NULL;
	struct tool t = { .in_fd = -1, .out_fd = -1, .capture_out = true };
	size_t applets = 0;
	int r;

	if (!bb)
		return -ENOMEM;
	r = tool_run(&t, (const char *const[]){ bb, "--list-full", NULL });
	if (r < 0) {
		why = tool_failure(&t, (const char *const[]){ bb, "--list-full", NULL }, r);
		tool_done(&t);
		return setup_fail(s, r, "listing busybox's applets: %s", why ? why : strerror(-r));
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
		return setup_fail(s, r, "building the root disk in '%s': %s", root, strerror(-r));
	if (geteuid() == 0) {
		_cleanup_free_ char *home = strdup_printf("%s/sandbox/home", root);
		if (!home || lchown(home, SANDBOX_UID, SANDBOX_UID) < 0)
			return setup_fail(s, home ? negative_errno() : -ENOMEM,
			                  "chown of '%s' failed", home);
	}
	*ret_applets = applets;
	return 0;
}

/* Gives the files of image, made by mkfs.ext4 -d from root, to root (the sandbox user's home
 * to it) with debugfs, for a setup that does not run as root. */
static int
rootfs_owners(struct setup *s, const char *root, const char *image)
{
	_cleanup_buf_ struct buf cmds = BUF_INIT(4 * 1024 * 1024);
	_cleanup_close_ int memfd = memfd_create("debugfs-cmds", MFD_CLOEXEC);
	_cleanup_free_ char *why = NULL;
	struct tool dt = { .in_fd = -1, .out_fd = -1 };
	const char *argv[] = { "debugfs", "-w", "-f", "-", image, NULL };
	int r;

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
	if (r < 0)
		why = tool_failure(&dt, argv, r);
	tool_done(&dt);
	owner_cmds = NULL;
	if (r < 0)
		return setup_fail(s, r, "giving the root disk's files to root: %s",
		                  why ? why : strerror(-r));
	return 0;
}

static int
build_rootfs(struct setup *s, const char *busybox, const char *out, size_t *ret_applets,
             uint64_t *ret_mb)
{
	_cleanup_free_ char *root = strdup_printf("%s/rootfs", s->scratch), *tmp = NULL,
	                    *why = NULL;
	size_t applets = 0;
	uint64_t mb;
	char size[32];
	int r;

	if (!root)
		return -ENOMEM;
	r = rootfs_tree(s, busybox, root);
	r = r ?: rootfs_applets(s, root, &applets);
	if (r < 0)
		return r;
	/* Read-only, so it only needs to fit: the contents plus room for ext4's own tables. */
	mb = MAX(16u, (file_size(busybox) * 3 / 2 + (8u << 20)) >> 20);
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
		return setup_fail(s, r, "making the root disk: %s", why ? why : strerror(-r));
	}
	if (geteuid() != 0 && (r = rootfs_owners(s, root, tmp)) < 0) {
		(void)unlink(tmp);
		return r;
	}
	if (rename(tmp, out) < 0) {
		r = negative_errno();
		(void)unlink(tmp);
		return setup_fail(s, r, "cannot create '%s': %s", out, strerror(-r));
	}
	*ret_applets = applets;
	*ret_mb = mb;
	return 0;
}

int
rootfs_setup(struct setup *s, struct bundle_manifest *m)
{
	_cleanup_free_ char *out = bundle_state_path(s->state, ROOTFS_PATH), *root = NULL,
	                    *bb = NULL;
	struct debpkg d = { .query = BUSYBOX_PACKAGE };
	size_t applets = 0;
	uint64_t mb = 0;
	int r;

	m->rootfs = strdup(ROOTFS_PATH);
	m->rootfs_layout = ROOTFS_LAYOUT;
	if (!out || !m->rootfs)
		return -ENOMEM;
	if (!s->o->force && is_file(out) && s->old.rootfs_layout != ROOTFS_LAYOUT)
		setup_step("root disk: %s is of an older layout (%u, now %u: printenv is new); "
		           "building it again",
		           ROOTFS_PATH, s->old.rootfs_layout, ROOTFS_LAYOUT);
	else if (!s->o->force && is_file(out)) {
		if (s->old.busybox_version &&
		    !(m->busybox_version = strdup(s->old.busybox_version)))
			return -ENOMEM;
		setup_step("root disk: %s is there, reused", ROOTFS_PATH);
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
		r = setup_fail(s, -ENOENT, "'%s' holds no bin/busybox", d.file);
		goto out;
	}
	{
		_cleanup_free_ char *dir = strdup_printf("%s/images/busybox", s->state);
		r = dir ? mkdir_mode(dir, 0755) : -ENOMEM;
		if (r < 0) {
			r = setup_fail(s, r, "cannot create '%s': %s", dir, strerror(-r));
			goto out;
		}
	}
	r = build_rootfs(s, bb, out, &applets, &mb);
	if (r < 0)
		goto out;
	m->busybox_version = TAKE_PTR(d.version);
	setup_step("root disk: %s (busybox %s, %zu applets, %llu MiB sparse ext4, read-only)",
	           ROOTFS_PATH, m->busybox_version, applets, (unsigned long long)mb);
out:
	debpkg_done(&d);
	return r;
}
