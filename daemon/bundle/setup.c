/* setup.c: bundle_setup(), what `sandboxd setup` does (see bundle.h): the kernel and its
 * modules, the root disk (rootfs.c), the initramfs, the manifest, one step after the other
 * under the lock of <state>/vm, each reusing what an earlier run left. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include "apt.h"
#include "elf64.h"
#include "initramfs.h"
#include "modules.h"
#include "rootfs.h"
#include "setup.h"
#include "tool.h"
#include "strv.h"
#include "util.h"
#include "vmlinux.h"

#define KERNEL_META "linux-image-cloud-amd64"

void
setup_step(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("setup: ", stdout);
	vfprintf(stdout, fmt, ap);
	fputc('\n', stdout);
	fflush(stdout);
	va_end(ap);
}

int
setup_fail(struct setup *s, int r, const char *fmt, ...)
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

/* The kernel apt's metapackage depends on now: vmlinux and the modules directory, each reused
 * when it is there (and not --force). Fills in the manifest's kernel fields and modules. */
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
	setup_step("kernel: %s %s (what %s depends on now)", d.name, d.version, KERNEL_META);
	m->kernel = strdup_printf("vm/vmlinux-%s", kver);
	m->modules_dir = strdup_printf("vm/modules-%s", kver);
	m->kernel_version = strdup(kver);
	m->kernel_package = strdup(d.name);
	m->kernel_package_version = strdup(d.version);
	if (!m->kernel || !m->modules_dir || !m->kernel_version || !m->kernel_package ||
	    !m->kernel_package_version || !bundle_safe_relpath(m->kernel)) {
		r = setup_fail(s, -EINVAL, "kernel version '%s' is not usable in a file name",
		               kver);
		goto out;
	}
	vmlinux = bundle_state_path(s->state, m->kernel);
	moddir = bundle_state_path(s->state, m->modules_dir);
	if (!vmlinux || !moddir) {
		r = -ENOMEM;
		goto out;
	}
	need_kernel = s->o->force || bundle_check_pvh(vmlinux) < 0;
	need_modules = s->o->force || modules_dir_read(moddir, &m->modules, &m->n_modules) < 0;
	if (!need_kernel && !need_modules) {
		setup_step("kernel: %s and its %zu modules are there, reused", m->kernel,
		           m->n_modules);
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
			r = setup_fail(s, r, "kernel %s: %s", kver, why ? why : strerror(-r));
			goto out;
		}
		setup_step("kernel: %s (%.1f MB, uncompressed ELF with the PVH entry note)",
		           m->kernel, file_size(vmlinux) / 1e6);
	}
	if (need_modules) {
		strv_free(m->modules);
		m->modules = NULL;
		m->n_modules = 0;
		r = modules_build(s, kroot, kver, moddir, m);
	}
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

/* The initramfs for the agent, rebuilt when the agent, the kernel, the modules or the root
 * disk changed (*changed, set when it was rebuilt). No agent yet is not a failure: sandboxd
 * builds it at start. */
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
			return setup_fail(s, -ENOMEM, "cannot find where sandboxd runs from");
	}
	if (!is_file(agent)) {
		setup_step(
		        "initramfs: not built yet: no agent at '%s' (build sandbox-guestd or pass "
		        "--agent PATH); sandboxd builds it when it starts and finds the agent",
		        agent);
		return 0;
	}
	r = sha256_file(agent, sha);
	if (r < 0)
		return setup_fail(s, r, "agent '%s': cannot read it: %s", agent, strerror(-r));
	rel = strdup_printf("vm/initramfs-%s.cpio", m->kernel_version);
	path = rel ? bundle_state_path(s->state, rel) : NULL;
	moddir = bundle_state_path(s->state, m->modules_dir);
	if (!path || !moddir)
		return -ENOMEM;
	if (!s->o->force && !*changed && is_file(path) && streq(s->old.agent_sha256, sha) &&
	    streq_null(s->old.initramfs, rel)) {
		m->initramfs = TAKE_PTR(rel);
		memcpy(m->agent_sha256, sha, sizeof(sha));
		m->agent_size = s->old.agent_size;
		memcpy(m->initramfs_built, s->old.initramfs_built, sizeof(m->initramfs_built));
		setup_step("initramfs: %s is up to date for agent '%s'", m->initramfs, agent);
		return 0;
	}
	r = bundle_write_initramfs(path, agent, moddir, m->modules, m->n_modules, m->agent_sha256,
	                           &m->agent_size);
	if (r < 0)
		return setup_fail(s, r, "building the initramfs '%s': %s", path, strerror(-r));
	m->initramfs = TAKE_PTR(rel);
	format_rfc3339(now_unix_ms(), m->initramfs_built);
	*changed = true;
	setup_step("initramfs: %s (%.1f MB uncompressed cpio; /init = '%s', sha256 %.12s)",
	           m->initramfs, file_size(path) / 1e6, agent, m->agent_sha256);
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

	setup_step("state directory '%s'%s", s.state,
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
		r = setup_fail(&s, r, "cannot create the directories under '%s': %s", s.state,
		               strerror(-r));
		goto out;
	}
	r = bundle_lock_vm_dir(s.vm_dir, false, &lock);
	if (r == -EWOULDBLOCK) {
		setup_step("waiting for another 'sandboxd setup' (or a sandboxd rebuilding its "
		           "initramfs) "
		           "to finish");
		r = bundle_lock_vm_dir(s.vm_dir, true, &lock);
	}
	if (r < 0) {
		r = setup_fail(&s, r, "cannot lock '%s': %s", s.vm_dir, strerror(-r));
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
		r = setup_fail(&s, r, "cannot create a directory in '%s': %s", cache, strerror(-r));
		goto out;
	}
	if (bundle_manifest_read(s.state, &s.old) < 0)
		s.old = (struct bundle_manifest){ 0 };
	r = setup_kernel(&s, &m);
	r = r ?: rootfs_setup(&s, &m);
	if (r < 0)
		goto out;
	changed = o->force || !streq_null(s.old.kernel, m.kernel) ||
	          !streq_null(s.old.modules_dir, m.modules_dir) || !same_modules(&s.old, &m) ||
	          !streq_null(s.old.rootfs, m.rootfs) || s.old.rootfs_layout != m.rootfs_layout ||
	          !streq_null(s.old.busybox_version, m.busybox_version) ||
	          !streq_null(s.old.kernel_package_version, m.kernel_package_version);
	r = setup_initramfs(&s, &m, &changed);
	if (r < 0)
		goto out;
	if (!changed && s.old.created[0] && streq(s.old.agent_sha256, m.agent_sha256)) {
		setup_step("done: nothing to do; the bundle in '%s' is up to date", s.vm_dir);
		goto out;
	}
	format_rfc3339(now_unix_ms(), m.created);
	r = bundle_manifest_write(s.state, &m);
	if (r < 0) {
		r = setup_fail(&s, r, "cannot write '%s/bundle.json': %s", s.vm_dir, strerror(-r));
		goto out;
	}
	setup_step("done: %s/bundle.json (kernel %s, %zu modules, root disk %s%s)", s.vm_dir,
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
