/* bundle.c: see bundle.h. The manifest, loading the bundle at every start (rebuilding the
 * initramfs when the agent changed), the lock that serialises the writers of <state>/vm, and
 * where the agent is by default. Every result is written under a temporary name and renamed. */
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sys/file.h>
#include "bundle.h"
#include "initramfs.h"
#include "log.h"
#include "tool.h"
#include "strv.h"
#include "util.h"

#define MANIFEST_FORMAT 1
#define MANIFEST_MAX (1024 * 1024)

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

bool
bundle_safe_relpath(const char *p)
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
	if (r == 0 && m->rootfs_layout &&
	    json_object_set_new(o, "rootfs_layout", json_integer(m->rootfs_layout)) < 0)
		r = -ENOMEM;
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
	v = json_object_get(o, "rootfs_layout");
	if (r == 0 && v) {
		if (json_is_integer(v) && json_integer_value(v) >= 0 &&
		    json_integer_value(v) <= 1000)
			m.rootfs_layout = (unsigned)json_integer_value(v);
		else
			r = -EINVAL;
	}
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
		if (!json_is_string(v) || !bundle_safe_relpath(json_string_value(v)) ||
		    strchr(json_string_value(v), '/'))
			r = -EINVAL;
		else
			r = strv_push(&m.modules, &m.n_modules, strdup(json_string_value(v)));
	}
	json_decref(o);
	if (r == 0 &&
	    (!bundle_safe_relpath(m.kernel) || !bundle_safe_relpath(m.modules_dir) ||
	     !bundle_safe_relpath(m.rootfs) || (m.initramfs && !bundle_safe_relpath(m.initramfs)) ||
	     !bundle_safe_relpath(m.kernel_version) || strchr(m.kernel_version, '/')))
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

int
bundle_lock_vm_dir(const char *vm_dir, bool wait, int *ret_fd)
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

char *
bundle_state_path(const char *state_dir, const char *rel)
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
	path = bundle_state_path(state_dir, rel);
	moddir = bundle_state_path(state_dir, m->modules_dir);
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
	b.kernel = kernel ? strdup(kernel) : bundle_state_path(state_dir, m.kernel);
	b.rootfs = bundle_state_path(state_dir, m.rootfs);
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
		r = bundle_lock_vm_dir(vm_dir, true, &lock);
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

/* ---- the agent ---- */

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
