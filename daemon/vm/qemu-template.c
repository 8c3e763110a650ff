/* qemu-template.c: creates that restore instead of boot.
 *
 * A template is a VM booted once to agent-ready and saved, per key: the identity (device,
 * inode, size, mtime) of QEMU, the kernel, the initramfs (which holds the agent) and the
 * image's root disk, with the accelerator, memory, CPUs, layer size and whether it has a
 * network. It lives in STATE/templates/<key>/: `ram` (the guest's RAM: the template VM maps it
 * shared, so its pages are in the file), `state.mig` (the device state, saved with the
 * migration capability x-ignore-shared, which leaves the shared RAM out of the stream: tens of
 * KiB) and `template.json`.
 *
 * A template is built in the background after the first cold boot of its key (one at a time;
 * a create never waits for one): a VM with a sandbox's devices (the root disk, a fresh layer,
 * the agent's port, a virtio-net on a tap-less hub port with a network), running as a VMM uid
 * no sandbox gets (the slot after the sandboxes'), whose handshake mounts nothing; once the
 * agent answered: QMP stop, x-ignore-shared, migrate to state.mig (getfd), quit.
 *
 * A clone (start() of a new sandbox with no snapshot and no volumes whose key has a template)
 * gets its own copy of the RAM file: QEMU 7.2 opens mem-path read-write even where it maps it
 * privately, so one shared file would have to be writable by every clone's VMM uid, and one
 * compromised VMM could change the pages the others have not copied yet. The copy takes only
 * the file's data extents (SEEK_DATA/SEEK_HOLE, copy_file_range: the touched RAM), into an
 * unnamed file (O_TMPFILE) in the clone's directory owned by its uid; QEMU maps it privately,
 * starts with -incoming defer, and over QMP sets x-ignore-shared and migrate-incoming fd:N on
 * the template's state.mig. The guest runs on from agent-ready, and the normal handshake mounts
 * the root and gives it its identity. With QEMU >= 8.2 (memory-backend-file rom=off: a
 * read-only open, a private writable map) the clones could map the one template file and skip
 * the copy; not done here.
 *
 * A template whose files do not check out (a missing or short file) is removed and the create
 * boots cold, saying so in the log; a stale template (its key's files changed) is never used,
 * and removed at startup. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include "log.h"
#include "qemu-argv.h"
#include "qemu-vm.h"
#include "util.h"

#define TEMPLATES_DIR "templates"
#define SAVE_FD_NAME "sbxtmpl"
#define POLL_MS 50
#define BUILD_TIMEOUT_MS 120000

/* What a template depends on beyond the backend's files. */
struct tparams {
	char *root_disk;
	unsigned memory_mb, cpus;
	uint64_t disk_mb;
	bool has_net;
};

/* A template being built. */
struct qemu_tmpl {
	struct qemu *q;
	struct vm *vm;
	struct sandbox sb; /* a name for the VM's code; the core never sees it */
	struct tparams p;
	char key[17];
	char *dir; /* STATE/templates/<key>.build, renamed to <key> once saved */
	struct qmp *qmp;
	struct loop_timer timer; /* query-migrate polls */
	int ram_fd, state_fd;
	uint64_t t0, deadline;
	bool saved;
};

struct qemu_templates {
	char *dir;
	struct qemu_tmpl *building;
	bool due; /* pending: build it after the next completed boot */
	struct tparams pending;
	char failed[17]; /* a key whose build failed: not tried again until a restart */
};

static void
tparams_done(struct tparams *p)
{
	free(p->root_disk);
	p->root_disk = NULL;
}

/* Adds a file's identity to the FNV-1a hash h. */
static uint64_t
hash_str(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static int
hash_file(uint64_t *h, const char *path)
{
	struct stat st;
	char buf[160];

	if (!path || stat(path, &st) < 0)
		return -ENOENT;
	snprintf(buf, sizeof(buf), "%s|%llu:%llu:%lld:%lld.%ld|", path,
	         (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
	         (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	*h = hash_str(*h, buf);
	return 0;
}

/* The key of a template for p on this backend: 16 hex. */
static int
template_key(struct qemu *q, const struct tparams *p, char key[17])
{
	uint64_t h = 0xcbf29ce484222325ull;
	char buf[128];

	if (hash_file(&h, q->qemu_bin) < 0 || hash_file(&h, q->bundle.kernel) < 0 ||
	    hash_file(&h, q->bundle.initrd) < 0 || hash_file(&h, p->root_disk) < 0)
		return -ENOENT;
	snprintf(buf, sizeof(buf), "%s|%u|%u|%u|%llu|%d", q->accel, q->tsc_khz, p->memory_mb,
	         p->cpus, (unsigned long long)p->disk_mb, p->has_net);
	h = hash_str(h, buf);
	snprintf(key, 17, "%016llx", (unsigned long long)h);
	return 0;
}

static void
params_of(const struct vm_launch *l, struct tparams *p)
{
	*p = (struct tparams){ .root_disk = (char *)l->root_disk,
		               .memory_mb = l->memory_mb,
		               .cpus = l->cpus,
		               .disk_mb = l->disk_mb,
		               .has_net = l->has_net };
}

/* Reads <dir>/template.json: its parameters and the sizes its files must have. */
static int
read_meta(const char *dir, struct tparams *p, char key[17], uint64_t *state_bytes,
          uint64_t *ram_bytes)
{
	_cleanup_free_ char *path = strdup_printf("%s/template.json", dir);
	json_t *j = path ? json_load_file(path, 0, NULL) : NULL;
	const char *root = NULL, *k = NULL;
	json_int_t mem = 0, cpus = 0, disk = 0, sb = 0, rb = 0;
	int net = 0;

	if (!j)
		return -ENOENT;
	if (json_unpack(j, "{s:s, s:s, s:I, s:I, s:I, s:b, s:I, s:I}", "key", &k, "root_disk",
	                &root, "memory_mb", &mem, "cpus", &cpus, "disk_mb", &disk, "has_net", &net,
	                "state_bytes", &sb, "ram_bytes", &rb) < 0 ||
	    strlen(k) != 16) {
		json_decref(j);
		return -EINVAL;
	}
	p->root_disk = strdup(root);
	p->memory_mb = (unsigned)mem;
	p->cpus = (unsigned)cpus;
	p->disk_mb = (uint64_t)disk;
	p->has_net = net;
	memcpy(key, k, 17);
	*state_bytes = (uint64_t)sb;
	*ram_bytes = (uint64_t)rb;
	json_decref(j);
	return p->root_disk ? 0 : -ENOMEM;
}

/* Whether the template in dir is whole: its files are there at the sizes it recorded. On
 * failure, why in why. */
static bool
template_ok(const char *dir, char *why, size_t n)
{
	_cleanup_free_ char *state = strdup_printf("%s/%s", dir, VM_STATE_FILE);
	_cleanup_free_ char *ram = strdup_printf("%s/ram", dir);
	struct tparams p = { 0 };
	char key[17];
	uint64_t sb, rb;
	struct stat st;
	bool ok = false;

	if (read_meta(dir, &p, key, &sb, &rb) < 0)
		snprintf(why, n, "no valid template.json");
	else if (!state || stat(state, &st) < 0 || (uint64_t)st.st_size != sb)
		snprintf(why, n, "its state.mig is not the %llu bytes saved",
		         (unsigned long long)sb);
	else if (!ram || stat(ram, &st) < 0 || (uint64_t)st.st_size != rb)
		snprintf(why, n, "its ram is not the %llu bytes saved", (unsigned long long)rb);
	else
		ok = true;
	tparams_done(&p);
	return ok;
}

int
qemu_templates_init(struct qemu *q)
{
	struct qemu_templates *t = calloc(1, sizeof(*t));
	DIR *d;
	struct dirent *e;
	int r;

	if (!t)
		return -ENOMEM;
	q->templates = t;
	t->dir = strdup_printf("%s/%s", q->b.cfg.state_dir, TEMPLATES_DIR);
	if (!t->dir)
		return -ENOMEM;
	if ((r = mkdir_p(t->dir, 0700)) < 0)
		return r;
	/* a build that did not finish, or a template whose files changed: gone */
	d = opendir(t->dir);
	if (!d)
		return negative_errno();
	while ((e = readdir(d))) {
		_cleanup_free_ char *path = NULL;
		struct tparams p = { 0 };
		char key[17], now[17];
		uint64_t sb, rb;

		if (e->d_name[0] == '.')
			continue;
		path = strdup_printf("%s/%s", t->dir, e->d_name);
		if (!path)
			continue;
		if (read_meta(path, &p, key, &sb, &rb) < 0 || !streq(key, e->d_name) ||
		    template_key(q, &p, now) < 0 || !streq(now, key)) {
			log_info("backend qemu: removing the template '%s' (stale or unfinished)",
			         e->d_name);
			remove_tree(path);
		}
		tparams_done(&p);
	}
	closedir(d);
	return 0;
}

/* ---- building ---- */

static void
build_free(struct qemu_tmpl *b)
{
	struct qemu_templates *t = b->q->templates;

	if (t->building == b)
		t->building = NULL;
	b->qmp = qmp_free(b->qmp);
	loop_timer_done(&b->timer);
	safe_close(b->ram_fd);
	safe_close(b->state_fd);
	if (b->vm) {
		b->vm->tmpl = NULL;
		vm_kill(b->vm);
		vm_free(b->vm);
	}
	tparams_done(&b->p);
	free(b->dir);
	free(b);
}

static void build_fail(struct qemu_tmpl *b, const char *fmt, ...) _printf_(2, 3);

static void
build_fail(struct qemu_tmpl *b, const char *fmt, ...)
{
	struct qemu_templates *t = b->q->templates;
	char reason[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	log_warning("backend qemu: building the template %s failed: %s; creates boot cold", b->key,
	            reason);
	memcpy(t->failed, b->key, sizeof(t->failed));
	if (b->dir)
		remove_tree(b->dir);
	build_free(b);
}

static void
build_qmp_closed(struct qmp *m _unused_, void *data)
{
	struct qemu_tmpl *b = data;

	/* QEMU closes its monitor as it quits once saved: its exit says the rest */
	if (!b->saved)
		build_fail(b, "its monitor closed");
}

static void
quit_answered(void *data _unused_, const json_t *ret _unused_, const char *err _unused_)
{
	/* QEMU exits: qemu_template_exited follows */
}

static void poll_migrate(struct loop_timer *t, void *data);

static void
migrate_polled(void *data, const json_t *ret, const char *err)
{
	struct qemu_tmpl *b = data;
	const char *status = ret ? json_string_value(json_object_get(ret, "status")) : NULL;

	if (err || !status || streq(status, "failed") || streq(status, "cancelled")) {
		build_fail(b, "its migration failed: %s", err ? err : status ? status : "?");
		return;
	}
	if (!streq(status, "completed")) {
		if (now_mono_ms() > b->deadline) {
			build_fail(b, "its migration took too long");
			return;
		}
		(void)loop_timer_arm(&b->timer, POLL_MS, 0);
		return;
	}
	if (fsync(b->state_fd) < 0) {
		build_fail(b, "state.mig: %s", strerror(errno));
		return;
	}
	b->saved = true;
	if (qmp_execute(b->qmp, "quit", NULL, quit_answered, b) < 0)
		build_fail(b, "no quit");
}

static void
poll_migrate(struct loop_timer *t _unused_, void *data)
{
	struct qemu_tmpl *b = data;

	if (qmp_execute(b->qmp, "query-migrate", NULL, migrate_polled, b) < 0)
		build_fail(b, "no query-migrate");
}

/* Each step's answer: an error fails the build, else the next step. */
static void
step_answered(void *data, const json_t *ret _unused_, const char *err)
{
	struct qemu_tmpl *b = data;

	if (err)
		build_fail(b, "QMP: %.200s", err);
}

static void
getfd_answered(void *data, const json_t *ret _unused_, const char *err)
{
	struct qemu_tmpl *b = data;

	if (err) {
		build_fail(b, "getfd: %.200s", err);
		return;
	}
	if (qmp_execute(b->qmp, "migrate", json_pack("{s:s}", "uri", "fd:" SAVE_FD_NAME),
	                step_answered, b) < 0) {
		build_fail(b, "no migrate");
		return;
	}
	(void)loop_timer_arm(&b->timer, POLL_MS, 0);
}

static void
build_qmp_ready(struct qmp *m, void *data)
{
	struct qemu_tmpl *b = data;
	_cleanup_free_ char *state = strdup_printf("%s/%s", b->dir, VM_STATE_FILE);

	b->state_fd =
	        state ? open(state, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600)
	              : -1;
	if (b->state_fd < 0) {
		build_fail(b, "state.mig: %s", strerror(errno));
		return;
	}
	/* in order on the one connection: a failure of any fails the build */
	if (qmp_execute(m, "migrate-set-capabilities",
	                json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability",
	                          "x-ignore-shared", "state", 1),
	                step_answered, b) < 0 ||
	    qmp_execute(m, "stop", NULL, step_answered, b) < 0 ||
	    qmp_execute_fd(m, "getfd", json_pack("{s:s}", "fdname", SAVE_FD_NAME), b->state_fd,
	                   getfd_answered, b) < 0)
		build_fail(b, "QMP commands not sent");
}

void
qemu_template_ready(struct vm *vm)
{
	struct qemu_tmpl *b = vm->tmpl;
	_cleanup_free_ char *sock = vm_path(vm, "qmp.sock");

	if (vm->phase != VM_BOOTING)
		return;
	vm->phase = VM_STOPPING; /* the agent's connection closing is no failure now */
	(void)loop_timer_arm(&vm->timer, 0, 0);
	log_info("backend qemu: the template %s booted in %llu ms; saving it", b->key,
	         (unsigned long long)(now_mono_ms() - b->t0));
	b->deadline = now_mono_ms() + BUILD_TIMEOUT_MS;
	if (!sock ||
	    qmp_new(vm->q->b.cfg.loop, sock, build_qmp_ready, build_qmp_closed, b, &b->qmp) < 0)
		build_fail(b, "no monitor");
}

void
qemu_template_failed(struct vm *vm, const char *reason)
{
	build_fail(vm->tmpl, "%s", reason);
}

/* The saved template's files become its own and the directory gets its final name. */
static int
build_finish(struct qemu_tmpl *b)
{
	struct qemu_templates *t = b->q->templates;
	_cleanup_free_ char *final = strdup_printf("%s/%s", t->dir, b->key);
	_cleanup_free_ char *meta = strdup_printf("%s/template.json", b->dir);
	static const char *const drop[] = { "upper.qcow2", "agent.sock", "qmp.sock", "vm.json" };
	struct stat sst, rst;
	json_t *meta_j;
	char *json;
	int r;

	if (!final || !meta)
		return -ENOMEM;
	if (fsync(b->ram_fd) < 0 || fstat(b->ram_fd, &rst) < 0 || fstat(b->state_fd, &sst) < 0)
		return negative_errno();
	/* nobody's but sandboxd's now: clones get copies */
	if (b->q->root && (fchown(b->ram_fd, 0, 0) < 0 || fchmod(b->ram_fd, 0600) < 0))
		return negative_errno();
	for (size_t i = 0; i < ARRAY_SIZE(drop); i++) {
		_cleanup_free_ char *p = strdup_printf("%s/%s", b->dir, drop[i]);
		if (p)
			(void)unlink(p);
	}
	meta_j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:b, s:I, s:I}", "key", b->key, "root_disk",
	                   b->p.root_disk, "memory_mb", (json_int_t)b->p.memory_mb, "cpus",
	                   (json_int_t)b->p.cpus, "disk_mb", (json_int_t)b->p.disk_mb, "has_net",
	                   b->p.has_net, "state_bytes", (json_int_t)sst.st_size, "ram_bytes",
	                   (json_int_t)rst.st_size);
	json = meta_j ? json_dumps(meta_j, JSON_COMPACT) : NULL;
	json_decref(meta_j);
	if (!json)
		return -ENOMEM;
	r = write_file_atomic(meta, json, strlen(json), 0600);
	free(json);
	if (r < 0)
		return r;
	remove_tree(final);
	if (rename(b->dir, final) < 0)
		return negative_errno();
	fsync_dir(t->dir);
	log_info("backend qemu: template %s saved in %llu ms (state %lld KiB, RAM file "
	         "%llu MiB in use)",
	         b->key, (unsigned long long)(now_mono_ms() - b->t0), (long long)sst.st_size / 1024,
	         (unsigned long long)rst.st_blocks / 2048);
	return 0;
}

void
qemu_template_exited(struct vm *vm, const char *how)
{
	struct qemu_tmpl *b = vm->tmpl;
	int r;

	if (!b->saved) {
		build_fail(b, "QEMU %s", how);
		return;
	}
	b->qmp = qmp_free(b->qmp);
	vm->agent = agent_free(vm->agent);
	(void)rmdir(vm->jail);
	r = build_finish(b);
	if (r < 0) {
		build_fail(b, "saving it: %s", strerror(-r));
		return;
	}
	build_free(b);
}

/* Boots the template VM for t->pending. */
static void
build_start(struct qemu *q)
{
	struct qemu_templates *t = q->templates;
	struct qemu_tmpl *b = calloc(1, sizeof(*b));
	_cleanup_free_ char *ram = NULL;
	struct vm_launch l = { 0 };
	struct vm_from from = { .ram = true, .ram_shared = true, .ram_fd = -1 };
	struct vm *vm;
	int r;

	t->due = false;
	if (!b) {
		tparams_done(&t->pending);
		return;
	}
	b->q = q;
	b->p = t->pending;
	t->pending = (struct tparams){ 0 };
	b->ram_fd = b->state_fd = -1;
	b->t0 = now_mono_ms();
	if (template_key(q, &b->p, b->key) < 0 ||
	    loop_timer_init(q->b.cfg.loop, &b->timer, poll_migrate, b) < 0) {
		build_free(b);
		return;
	}
	t->building = b;
	snprintf(b->sb.id, sizeof(b->sb.id), "tmpl_%s", b->key);
	b->dir = strdup_printf("%s/%s.build", t->dir, b->key);
	ram = b->dir ? strdup_printf("%s/ram", b->dir) : NULL;
	if (!ram) {
		build_free(b);
		return;
	}
	remove_tree(b->dir);
	if ((r = mkdir_p(b->dir, 0700)) < 0) {
		build_fail(b, "%s: %s", b->dir, strerror(-r));
		return;
	}
	b->ram_fd = open(ram, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (b->ram_fd < 0 || ftruncate(b->ram_fd, (off_t)b->p.memory_mb << 20) < 0) {
		build_fail(b, "ram: %s", strerror(errno));
		return;
	}
	vm = vm_get(q, &b->sb);
	if (!vm) {
		build_fail(b, "out of memory");
		return;
	}
	free(vm->dir);
	vm->dir = strdup(b->dir);
	snprintf(vm->jail, sizeof(vm->jail), "%s/root", b->dir);
	vm->tmpl = b;
	b->vm = vm;
	/* like a sandbox's, but nothing is mounted, and a network is a hub port with an address
	 * every clone's handshake replaces */
	l.id = b->sb.id;
	l.hostname = "sandbox";
	l.root_disk = b->p.root_disk;
	l.cpus = b->p.cpus;
	l.memory_mb = b->p.memory_mb;
	l.disk_mb = b->p.disk_mb;
	l.slot = q->b.slots; /* no sandbox's */
	l.has_net = b->p.has_net;
	l.net.tap_fd = -1;
	l.net.guest_addr = htonl(0xa9fe0002); /* 169.254.0.2/30 */
	l.net.host_addr = htonl(0xa9fe0001);
	l.machine_id = "00000000000000000000000000000000";
	from.ram_fd = b->ram_fd;
	from.net_hub = b->p.has_net;
	log_info("backend qemu: building the template %s (%u MiB, %u CPUs)", b->key, b->p.memory_mb,
	         b->p.cpus);
	r = vm_boot(q, &b->sb, &l, true, &from);
	if (r < 0) {
		b->vm = NULL; /* vm_boot freed it */
		build_fail(b, "starting QEMU: %s", strerror(-r));
	}
}

void
qemu_template_booted(struct vm *vm)
{
	struct qemu *q = vm->q;
	struct qemu_templates *t = q->templates;

	qemu_template_launch_free(vm->restore); /* booted: no fallback any more */
	vm->restore = NULL;

	if (t && t->due && !t->building)
		build_start(q);
}

void
qemu_templates_free(struct qemu *q)
{
	struct qemu_templates *t = q->templates;

	if (!t)
		return;
	if (t->building) {
		if (t->building->dir)
			remove_tree(t->building->dir);
		build_free(t->building);
	}
	tparams_done(&t->pending);
	free(t->dir);
	free(t);
	q->templates = NULL;
}

/* ---- clones ---- */

/* A copy of a launch that outlives the start() it was handed to: a restore that fails later
 * (QEMU refusing the stream) boots cold from it. */
struct tlaunch {
	struct vm_launch l;
	char *id, *hostname, *root_disk, *machine_id;
	char **env;
	char *dir; /* the template's */
};

void
qemu_template_launch_free(struct tlaunch *t)
{
	if (!t)
		return;
	free(t->id);
	free(t->hostname);
	free(t->root_disk);
	free(t->machine_id);
	free(t->dir);
	for (char **e = t->env; e && *e; e++)
		free(*e);
	free(t->env);
	if (t->l.has_net)
		safe_close(t->l.net.tap_fd);
	free(t);
}

static struct tlaunch *
launch_copy(const struct vm_launch *l)
{
	struct tlaunch *t = calloc(1, sizeof(*t));
	size_t n = 0;
	bool oom = false;

	if (!t)
		return NULL;
	t->l = *l;
	t->l.net.tap_fd = -1;
	if (l->has_net && (t->l.net.tap_fd = fcntl(l->net.tap_fd, F_DUPFD_CLOEXEC, 3)) < 0)
		oom = true;
#define DUP(f)                                                                                     \
	do {                                                                                       \
		if (l->f && !(t->f = strdup(l->f)))                                                \
			oom = true;                                                                \
		t->l.f = t->f;                                                                     \
	} while (0)
	DUP(id);
	DUP(hostname);
	DUP(root_disk);
	DUP(machine_id);
#undef DUP
	while (l->env && l->env[n])
		n++;
	if (l->env && (t->env = calloc(n + 1, sizeof(char *))))
		for (size_t i = 0; i < n; i++)
			oom = oom || !(t->env[i] = strdup(l->env[i]));
	else if (l->env)
		oom = true;
	t->l.env = t->env;
	if (oom) {
		qemu_template_launch_free(t);
		return NULL;
	}
	return t;
}

static void want_template(struct qemu *q, const struct vm_launch *l);

bool
qemu_template_fallback(struct vm *vm, const char *reason)
{
	static const struct vm_from blank;
	struct tlaunch *t = vm->restore;
	struct qemu *q = vm->q;
	struct sandbox *sb = vm->sb;
	int r;

	if (!t)
		return false;
	vm->restore = NULL;
	log_warning("sandbox '%s': template restore failed (%s); booting", sb->id, reason);
	if (t->dir) {
		remove_tree(t->dir);
		want_template(q, &t->l); /* rebuilt after this boot */
	}
	vm->agent = agent_free(vm->agent);
	remove_tree(vm->dir);
	vm_free(vm);
	log_info("sandbox '%s': cold boot", sb->id);
	r = vm_boot(q, sb, &t->l, true, &blank);
	qemu_template_launch_free(t);
	if (r < 0)
		backend_done(&q->b, sb, r, "booting failed after a failed template restore");
	return true;
}

/* Copies the data extents of from (its holes stay holes) into to, of the same size. */
static int
sparse_copy(int from, int to, off_t size)
{
	off_t data = 0, hole;

	if (ftruncate(to, size) < 0)
		return negative_errno();
	for (;;) {
		data = lseek(from, data, SEEK_DATA);
		if (data < 0)
			return errno == ENXIO ? 0 : negative_errno();
		hole = lseek(from, data, SEEK_HOLE);
		if (hole < 0)
			return negative_errno();
		while (data < hole) {
			off_t in = data, out = data;
			ssize_t n = copy_file_range(from, &in, to, &out, (size_t)(hole - data), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? negative_errno() : -EIO;
			data += n;
		}
	}
}

static void
capability_set(void *data _unused_, const json_t *ret _unused_, const char *err _unused_)
{
	/* without it, QEMU refuses the stream: migrate-incoming's failure says so */
}

static void
incoming_done(void *data, const json_t *ret _unused_, const char *err)
{
	struct vm *vm = data;

	/* an error while the VM is being given up (its monitor freed) is no news */
	if (err && vm->phase == VM_BOOTING)
		vm_fail(vm, "migrate-incoming: %.200s", err);
	else if (!err)
		vm->qmp = qmp_free(vm->qmp); /* the stream loads; the agent's handshake follows */
}

static void
incoming_ready(struct qmp *m, void *data)
{
	struct vm *vm = data;
	char uri[16];

	snprintf(uri, sizeof(uri), "fd:%d", QEMU_FD_INCOMING);
	if (qmp_execute(m, "migrate-set-capabilities",
	                json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability",
	                          "x-ignore-shared", "state", 1),
	                capability_set, vm) < 0 ||
	    qmp_execute(m, "migrate-incoming", json_pack("{s:s}", "uri", uri), incoming_done, vm) <
	            0)
		vm_fail(vm, "QMP commands not sent");
}

int
qemu_template_incoming(struct vm *vm)
{
	_cleanup_free_ char *sock = vm_path(vm, "qmp.sock");

	if (!sock)
		return -ENOMEM;
	return qmp_new(vm->q->b.cfg.loop, sock, incoming_ready, NULL, vm, &vm->qmp);
}

/* Restores sb from the template in dir: its RAM copied, its QEMU started on it. */
static int
restore(struct qemu *q, struct sandbox *sb, const struct vm_launch *l, const char *dir)
{
	_cleanup_free_ char *ram = strdup_printf("%s/ram", dir);
	_cleanup_free_ char *state = strdup_printf("%s/%s", dir, VM_STATE_FILE);
	_cleanup_close_ int in = -1, out = -1;
	struct vm_from from = { .ram = true };
	struct vm *vm = vm_get(q, sb);
	struct stat st;
	uint64_t t0 = now_mono_ms();
	int r;

	if (!ram || !state || !vm)
		return -ENOMEM;
	if ((r = mkdir_p(vm->dir, 0700)) < 0)
		return r;
	in = open(ram, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0 || fstat(in, &st) < 0)
		return negative_errno();
	/* an unnamed file: it goes with the clone's QEMU, whatever happens */
	out = open(vm->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (out < 0)
		return negative_errno();
	/* a reflink where the filesystem can (btrfs, xfs): instant, blocks shared until
	 * written, which a private mapping never does */
	r = ioctl(out, FICLONE, in) == 0 ? 0 : sparse_copy(in, out, st.st_size);
	if (r < 0)
		return r;
	log_info("sandbox '%s': template RAM copied in %llu ms", sb->id,
	         (unsigned long long)(now_mono_ms() - t0));
	from.stream = state;
	from.ram_fd = out;
	r = vm_boot(q, sb, l, true, &from);
	if (r == 0 && (vm = vm_get(q, sb)))
		vm->restore = launch_copy(l); /* NULL: a later failure fails the create */
	if (r == 0 && vm && vm->restore)
		vm->restore->dir = strdup(dir);
	return r;
}

/* Notes the template of l as due after the next boot, unless one is due or being built. */
static void
want_template(struct qemu *q, const struct vm_launch *l)
{
	struct qemu_templates *t = q->templates;

	if (!t || t->due || t->building || !l->root_disk)
		return;
	params_of(l, &t->pending);
	t->pending.root_disk = strdup(l->root_disk);
	t->due = t->pending.root_disk != NULL;
}

int
qemu_template_start(struct qemu *q, struct sandbox *sb, const struct vm_launch *l)
{
	static const struct vm_from blank;
	struct qemu_templates *t = q->templates;
	struct tparams p;
	char key[17], why[160];
	_cleanup_free_ char *dir = NULL;

	params_of(l, &p);
	if (!t || !l->root_disk || template_key(q, &p, key) < 0)
		goto cold;
	dir = strdup_printf("%s/%s", t->dir, key);
	if (dir && access(dir, F_OK) == 0) {
		int r;
		if (!template_ok(dir, why, sizeof(why))) {
			log_warning("sandbox '%s': template restore failed (%s); booting", sb->id,
			            why);
			remove_tree(dir); /* rebuilt after this boot */
		} else if ((r = restore(q, sb, l, dir)) < 0) {
			log_warning("sandbox '%s': template restore failed (%s); booting", sb->id,
			            strerror(-r));
		} else {
			log_info("sandbox '%s': restored from template %s", sb->id, key);
			return 0;
		}
	}
	if (dir && access(dir, F_OK) < 0 && !streq(t->failed, key))
		want_template(q, l);
cold:
	log_info("sandbox '%s': cold boot", sb->id);
	return vm_boot(q, sb, l, true, &blank);
}
