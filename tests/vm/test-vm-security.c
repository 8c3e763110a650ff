/* test-vm-security.c: the security requirements that hold on the real backend (QEMU microvm,
 * TCG here), each checked where it would break: the VMMs' cgroup limits in place and a root
 * sandboxd that cannot make them refusing to start (R-I10), a guest that runs out of memory
 * reported as an OOM (R-I10), two VMMs under two uids and a non-root sandboxd saying they share
 * its uid (R-I2), a secret env value written nowhere on the host but its sandbox's record
 * (0600, --keep-sandboxes) (R-S2), and the sweep of a stray VMM, of an orphan tap and never of
 * a QEMU that is not ours (R-L3), at the start and by the reconciler while sandboxd runs. Two
 * VMs serve most cases; the taps need egress, so two more boot in network namespaces of the
 * test's own (tests/egress/netns.sh). Root only, but for what says otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base64.h"
#include "harness.h"
#include "util.h"

/* the daemon most cases share; A (256 MiB, with a secret in its env) and B run in it */
static struct daemon_proc p;
static char a_id[32], b_id[32];
static char secret[64], run_secret[64];
/* QEMUs of the test's own (test_stray_vmm_ended_foreign_qemu_left_alone) */
static pid_t foreign[2];

static void end_foreign(pid_t *pid);

static int
setup(void **state)
{
	(void)state;
	/* the restart of the stray VMM's case takes A back */
	return harness_start_vm(&p, (const char *const[]){ "--keep-sandboxes", NULL }, NULL);
}

static int
teardown(void **state)
{
	(void)state;
	if (p.pid > 0 && harness_delete_all(p.sock) < 0)
		fprintf(stderr, "test-vm-security: a sandbox would not go\n");
	harness_cleanup(&p);
	end_foreign(&foreign[0]);
	end_foreign(&foreign[1]);
	return 0;
}

static bool
need_root(void)
{
	if (geteuid() == 0)
		return true;
	harness_skip_case("needs root (VMM uids, cgroups, namespaces)");
	return false;
}

/* The pid of the VMM of sandbox id (its name is qemu-sbx-<first 6 hex>), or 0. */
static pid_t
vmm_pid(const char *id)
{
	char cmd[96];
	int pid = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "pgrep -x 'qemu-sbx-%.6s'", id + 4);
	f = popen(cmd, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	pclose(f);
	return pid;
}

/* Whether pid is a live process (a zombie is not). */
static bool
alive(pid_t pid)
{
	char path[64], *stat = NULL;
	const char *rp;
	bool live;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file_max(path, 4096, &stat, NULL) < 0)
		return false;
	rp = strrchr(stat, ')');
	live = rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
	free(stat);
	return live;
}

static unsigned
uid_of(pid_t pid)
{
	char path[64], line[256];
	unsigned uid = 0, euid = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %u %u", &uid, &euid) == 2)
			break;
	fclose(f);
	assert_int_equal(uid, euid);
	return uid;
}

/* The first uid of the range the daemon of state claimed (/run/sandboxd-vmm-uids/FIRST names
 * its state directory), or 0. */
static unsigned
claimed_base(const char *state)
{
	DIR *d = opendir("/run/sandboxd-vmm-uids");
	struct dirent *de;
	unsigned base = 0;

	if (!d)
		return 0;
	while (!base && (de = readdir(d))) {
		char path[300], *owner = NULL;
		uint64_t v;
		if (parse_u64(de->d_name, &v) < 0)
			continue;
		snprintf(path, sizeof(path), "/run/sandboxd-vmm-uids/%s", de->d_name);
		if (read_file_max(path, 4096, &owner, NULL) == 0 && strcmp(owner, state) == 0)
			base = (unsigned)v;
		free(owner);
	}
	closedir(d);
	return base;
}

/* The directory of pid's group for controller (cgroup v1: the hierarchy that has it), or,
 * with cgroup v2 (controller ignored), its one group; as sandboxd's cgroup.c picks them. */
static char *
cgroup_dir(pid_t pid, const char *controller)
{
	char path[64], *text = NULL, *line, *save = NULL, *dir = NULL;
	bool v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	assert_int_equal(read_file_max(path, 65536, &text, NULL), 0);
	for (line = strtok_r(text, "\n", &save); line && !dir; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		char list[128];
		if (!c2)
			continue;
		snprintf(list, sizeof(list), ",%.*s,", (int)(c2 - c1 - 1), c1 + 1);
		if (v2 && c2 == c1 + 1)
			dir = strdup_printf("/sys/fs/cgroup%s", c2 + 1);
		else if (!v2 && strstr(list, controller) && list[strlen(controller) + 1] == ',')
			dir = strdup_printf("/sys/fs/cgroup/%.*s%s", (int)(c2 - c1 - 1), c1 + 1,
			                    c2 + 1);
	}
	free(text);
	if (!dir)
		fail_msg("process %d has no %s cgroup", (int)pid, controller);
	return dir;
}

static unsigned long long
read_number(const char *dir, const char *file)
{
	char path[1200], *text = NULL;
	unsigned long long v = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (read_file_max(path, 256, &text, NULL) < 0)
		fail_msg("cannot read %s", path);
	if (sscanf(text, "%llu", &v) != 1)
		fail_msg("%s holds '%s'", path, text);
	free(text);
	return v;
}

/* Checks the VMM's groups: its own (".../sandboxd/<range>/<id>"), with memory at memory_mb
 * plus sandboxd's 256 MiB for QEMU itself, CPU time at cpus, and 256 tasks. */
static void
expect_vmm_limits(pid_t pid, const char *id, unsigned base, unsigned memory_mb, unsigned cpus)
{
	char tail[96];
	char *mem = cgroup_dir(pid, "memory"), *pids = cgroup_dir(pid, "pids"),
	     *cpu = cgroup_dir(pid, "cpu");
	bool v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
	unsigned long long want = ((unsigned long long)memory_mb + 256) << 20;

	snprintf(tail, sizeof(tail), "/sandboxd/%u/%s", base, id);
	for (int i = 0; i < 3; i++) {
		const char *d = i == 0 ? mem : i == 1 ? pids : cpu;
		if (strlen(d) < strlen(tail) || strcmp(d + strlen(d) - strlen(tail), tail) != 0)
			fail_msg("VMM %d is in %s, not a group of its own (...%s)", (int)pid, d,
			         tail);
	}
	assert_int_equal(read_number(mem, v2 ? "memory.max" : "memory.limit_in_bytes"), want);
	assert_int_equal(read_number(pids, "pids.max"), 256);
	if (v2) {
		assert_int_equal(read_number(cpu, "cpu.max"), (unsigned long long)cpus * 100000);
	} else {
		assert_int_equal(read_number(cpu, "cpu.cfs_quota_us"),
		                 (unsigned long long)cpus * 100000);
		assert_int_equal(read_number(cpu, "cpu.cfs_period_us"), 100000);
	}
	free(mem);
	free(pids);
	free(cpu);
}

static json_t *
create(const char *body)
{
	json_t *j = harness_json_timeout(p.sock, "POST", "/v1/sandboxes", body, 300000, 201);

	if (strcmp(harness_str(j, "state"), "running") != 0)
		fail_msg("the sandbox did not boot: %s", harness_str(j, "reason"));
	return j;
}

/* POST …/run with body; the answer (caller decrefs), its stdout decoded into *out (may be
 * NULL; caller frees). */
static json_t *
run(const char *id, const char *body, char **out)
{
	char path[128];
	json_t *r;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	r = harness_json_timeout(p.sock, "POST", path, body, 600000, 200);
	if (out) {
		const char *b64 = harness_str(r, "stdout");
		struct buf b = BUF_INIT(16u << 20);
		assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
		*out = buf_steal(&b);
	}
	return r;
}

static bool
member_true(json_t *obj, const char *key)
{
	return json_is_true(json_object_get(obj, key));
}

/* The startup refusal needs no VM: a root sandboxd that cannot make cgroups (here a private
 * mount namespace with an empty /sys/fs/cgroup, as `ip netns exec` leaves it) refuses to start
 * and says why and what to pass; with --allow-unconfined it starts and says so. */
static void
test_no_cgroups_refuses_to_start(void **state)
{
	static const char *const launcher[] = {
		"/bin/sh", "-c", "mount -t tmpfs sbxt-nocgroup /sys/fs/cgroup && exec \"$@\"", "sh",
		NULL
	};
	struct daemon_proc q;
	char *log = NULL;

	(void)state;
	if (!need_root())
		return;
	harness_set_launcher((const char *const[]){ "/usr/bin/unshare", "-m", "--propagation",
	                                            "private", launcher[0], launcher[1],
	                                            launcher[2], launcher[3], NULL });
	assert_int_equal(harness_start_vm(&q, NULL, NULL), -1);
	assert_int_equal(read_file_max(q.log, 1 << 20, &log, NULL), 0);
	harness_expect_in(log, "backend qemu: cannot confine VMMs: no cgroup limits can be made");
	harness_expect_in(log, "pass --allow-unconfined to run VMs without limits");
	harness_expect_not_in(log, "serving API v1");
	free(log);
	assert_int_equal(
	        harness_restart(&q, harness_binary("SANDBOXD"),
	                        (const char *const[]){ "--accel", "tcg", "--default-image",
	                                               "busybox", "--allow-unconfined", NULL },
	                        NULL),
	        0);
	harness_set_launcher(NULL);
	assert_true(harness_file_contains(q.log, "VMMs run without cgroup limits"));
	assert_true(
	        harness_file_contains(q.log, "; VMMs without cgroup limits (--allow-unconfined)"));
	assert_int_equal(harness_stop(&q, SIGTERM), 0);
	harness_cleanup(&q);
}

/* As a user, sandboxd cannot give VMMs uids of their own: its startup line says they share
 * its uid (here nobody's, 65534). The launcher hands the test's directories to that uid (the
 * bundle's files are hard links, readable by anyone, and stay root's). */
static void
test_non_root_startup_line_says_vmms_share_its_uid(void **state)
{
	static const char script[] =
	        "st=; prev=; for a; do [ \"$prev\" = --state-dir ] && st=$a; prev=$a; done; "
	        "rm -f \"$st/vm/.lock\" && find \"${st%/*}\" -type d -exec chown 65534:65534 {} + "
	        "&& exec setpriv --reuid=65534 --regid=65534 --clear-groups \"$@\"";
	struct daemon_proc q;
	char *suite = getenv("SANDBOX_TEST_TMP") ? strdup(getenv("SANDBOX_TEST_TMP")) : NULL;
	int r;

	(void)state;
	if (!need_root())
		return;
	/* the suite's directory is root's alone: this daemon's goes under /tmp */
	unsetenv("SANDBOX_TEST_TMP");
	harness_set_launcher((const char *const[]){ "/bin/sh", "-c", script, "sh", NULL });
	r = harness_start_vm(&q, NULL, NULL);
	harness_set_launcher(NULL);
	if (suite)
		setenv("SANDBOX_TEST_TMP", suite, 1);
	free(suite);
	assert_int_equal(r, 0);
	assert_true(harness_file_contains(
	        q.log, "; VMMs share sandboxd's uid 65534, without cgroup limits (not root);"));
	assert_int_equal(harness_stop(&q, SIGTERM), 0);
	harness_cleanup(&q);
}

/* R-I2, R-I10: two VMMs, two uids of the range this sandboxd claimed, each in cgroups of its
 * own with the sandbox's limits. */
static void
test_vmms_have_own_uids_and_cgroup_limits(void **state)
{
	char body[256];
	unsigned base;
	json_t *a, *b;
	pid_t pa, pb;

	(void)state;
	if (!need_root())
		return;
	assert_int_equal(random_hex(secret, 12), 0);
	memmove(secret + 7, secret, 25);
	memcpy(secret, "s3cr3t-", 7);
	assert_int_equal(random_hex(run_secret, 12), 0);
	snprintf(body, sizeof(body),
	         "{\"name\":\"sec-a\",\"memory_mb\":256,\"env\":{\"SECRET\":\"%s\"}}", secret);
	a = create(body);
	b = create("{\"name\":\"sec-b\",\"memory_mb\":320,\"cpus\":2}");
	snprintf(a_id, sizeof(a_id), "%s", harness_str(a, "id"));
	snprintf(b_id, sizeof(b_id), "%s", harness_str(b, "id"));
	json_decref(a);
	json_decref(b);
	pa = vmm_pid(a_id);
	pb = vmm_pid(b_id);
	assert_true(pa > 0 && pb > 0);
	base = claimed_base(p.state);
	assert_true(base >= 61000);
	/* two uids, both of this sandboxd's range, neither the other's nor root's */
	assert_int_not_equal(uid_of(pa), uid_of(pb));
	assert_true(uid_of(pa) >= base && uid_of(pa) < base + 1023);
	assert_true(uid_of(pb) >= base && uid_of(pb) < base + 1023);
	expect_vmm_limits(pa, a_id, base, 256, 1);
	expect_vmm_limits(pb, b_id, base, 320, 2);
}

/* R-I10: a guest that allocates past its memory gets 137 and the answer says the OOM killer
 * did it; a SIGKILL from inside, and the host's kill at a timeout, are no OOM. The VMM lives
 * on under its limits. */
static void
test_guest_oom_is_reported(void **state)
{
	/* 1 MiB strings, kept: small allocations the kernel grants until memory runs out */
	static const char eat[] = "{\"argv\":[\"awk\",\"BEGIN { s = \\\"x\\\"; for (k = 0; k < 20; "
	                          "k++) s = s s; while (1) a[i++] = s i }\"]}";
	char path[128], *list = NULL;
	json_t *r, *ev, *e;
	pid_t before;
	size_t i;
	bool recorded = false;

	(void)state;
	if (!a_id[0]) {
		harness_skip_case("no sandbox (the uids case did not run)");
		return;
	}
	before = vmm_pid(a_id);
	r = run(a_id, eat, NULL);
	assert_int_equal(json_integer_value(json_object_get(r, "exit_code")), 137);
	assert_true(member_true(r, "oom"));
	assert_false(member_true(r, "timed_out"));
	json_decref(r);
	/* the audit trail says so too */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", a_id);
	ev = harness_json(p.sock, "GET", path, NULL, 200);
	json_array_foreach (json_object_get(ev, "events"), i, e)
		if (strcmp(json_string_value(json_object_get(e, "type")), "process.exited") == 0 &&
		    member_true(e, "oom"))
			recorded = true;
	json_decref(ev);
	assert_true(recorded);
	assert_true(harness_file_contains(p.log, "was ended by the guest's OOM killer (256 MiB)"));
	/* killed, but not for memory */
	r = run(a_id, "{\"argv\":[\"sh\",\"-c\",\"kill -9 $$\"]}", NULL);
	assert_int_equal(json_integer_value(json_object_get(r, "exit_code")), 137);
	assert_false(member_true(r, "oom"));
	json_decref(r);
	r = run(a_id, "{\"argv\":[\"sleep\",\"60\"],\"timeout_secs\":1}", NULL);
	assert_true(member_true(r, "timed_out"));
	assert_false(member_true(r, "oom"));
	json_decref(r);
	/* the guest ran out of memory, not the VMM: the same QEMU serves on */
	assert_int_equal(vmm_pid(a_id), before);
	r = run(a_id, "{\"argv\":[\"true\"]}", NULL);
	assert_int_equal(json_integer_value(json_object_get(r, "exit_code")), 0);
	json_decref(r);
	/* a process object says it as well */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", a_id);
	assert_int_equal(harness_http(p.sock, "GET", path, NULL, &list), 200);
	free(list);
}

/* Whether the bytes of the file at path hold needle; a sparse file is read only where it
 * has data (the blank disks are gigabytes of holes). */
static bool
file_holds(const char *path, const char *needle)
{
	size_t nlen = strlen(needle), chunk = 1u << 20;
	char *buf = malloc(chunk + nlen);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	off_t data = 0, hole, end;
	bool found = false;

	assert_non_null(buf);
	end = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
	while (!found && data < end && (data = lseek(fd, data, SEEK_DATA)) >= 0) {
		size_t keep = 0; /* the tail of the last read, for a needle across two */
		hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			hole = end;
		while (!found && data < hole) {
			ssize_t n =
			        pread(fd, buf + keep, (size_t)MIN((off_t)chunk, hole - data), data);
			size_t have;
			if (n <= 0)
				break;
			have = keep + (size_t)n;
			found = memmem(buf, have, needle, nlen) != NULL;
			keep = MIN(nlen - 1, have);
			memmove(buf, buf + have - keep, keep);
			data += n;
		}
		data = hole;
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return found;
}

static const char *walk_needles[2];
static int walk_found;
static char walk_allowed[512]; /* the one file that may hold walk_needles[0], or "" */

static int
walk_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)ftw;
	if (type != FTW_F || !S_ISREG(st->st_mode))
		return 0;
	for (int i = 0; i < 2; i++)
		if (walk_needles[i] && file_holds(path, walk_needles[i])) {
			if (i == 0 && strcmp(path, walk_allowed) == 0)
				continue;
			fprintf(stderr, "secret value %d found in %s\n", i, path);
			walk_found++;
		}
	return 0;
}

/* Whether any process's command line or environment holds needle. */
static int
processes_holding(const char *needle)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		uint64_t pid;
		if (parse_u64(de->d_name, &pid) < 0)
			continue;
		for (int i = 0; i < 2; i++) {
			char path[300], *text = NULL;
			size_t len = 0;
			snprintf(path, sizeof(path), "/proc/%s/%s", de->d_name,
			         i ? "environ" : "cmdline");
			if (read_file_max(path, 1u << 20, &text, &len) < 0)
				continue;
			if (memmem(text, len, needle, strlen(needle))) {
				fprintf(stderr, "secret value in /proc/%s/%s\n", de->d_name,
				        i ? "environ" : "cmdline");
				n++;
			}
			free(text);
		}
	}
	closedir(d);
	return n;
}

/* R-S2: an env value given at create, and one given to a run, reach the process in the guest
 * and nothing on the host: no process's argv or environment (the VMM's, sandboxd's), no file
 * of the daemon's directory (the database, the VM's directory with its disk layer and logs,
 * the state's blank disks, sandboxd's log, the audit log) but one: with --keep-sandboxes, the
 * create's value is in the sandbox's record, STATE/records/ID.json, 0600 in a 0700 directory,
 * sandboxd's alone. A run's value is in no record. */
static void
test_secret_env_is_written_nowhere(void **state)
{
	char body[256], *out = NULL;
	json_t *r;

	(void)state;
	if (!a_id[0]) {
		harness_skip_case("no sandbox (the uids case did not run)");
		return;
	}
	r = run(a_id, "{\"argv\":[\"sh\",\"-c\",\"echo \\\"$SECRET\\\"\"]}", &out);
	assert_int_equal(json_integer_value(json_object_get(r, "exit_code")), 0);
	json_decref(r);
	assert_true(strncmp(out, secret, strlen(secret)) == 0 && out[strlen(secret)] == '\n');
	free(out);
	snprintf(body, sizeof(body),
	         "{\"argv\":[\"sh\",\"-c\",\"echo \\\"$RUN_SECRET\\\"\"],"
	         "\"env\":{\"RUN_SECRET\":\"%s\"}}",
	         run_secret);
	r = run(a_id, body, &out);
	json_decref(r);
	assert_true(strncmp(out, run_secret, strlen(run_secret)) == 0);
	free(out);
	/* sandboxd writes its database and log on its loop: a request after makes sure
	 * whatever the runs caused is on disk */
	json_decref(harness_json(p.sock, "GET", "/v1/sandboxes", NULL, 200));

	assert_int_equal(processes_holding(secret), 0);
	assert_int_equal(processes_holding(run_secret), 0);
	snprintf(walk_allowed, sizeof(walk_allowed), "%s/records/%s.json", p.state, a_id);
	{
		struct stat st;
		char dir[400];
		snprintf(dir, sizeof(dir), "%s/records", p.state);
		assert_int_equal(lstat(dir, &st), 0);
		assert_true(S_ISDIR(st.st_mode));
		assert_int_equal(st.st_mode & 07777, 0700);
		assert_int_equal(st.st_uid, geteuid());
		assert_int_equal(lstat(walk_allowed, &st), 0);
		assert_true(S_ISREG(st.st_mode));
		assert_int_equal(st.st_mode & 07777, 0600);
		assert_int_equal(st.st_uid, geteuid());
		assert_true(file_holds(walk_allowed, secret));
	}
	walk_needles[0] = secret;
	walk_needles[1] = run_secret;
	walk_found = 0;
	assert_int_equal(nftw(p.dir, walk_one, 16, FTW_PHYS), 0);
	assert_int_equal(walk_found, 0);
	/* the walk can find it: a file that holds it is found (the check cannot pass vacuously) */
	{
		char probe[400];
		FILE *f;
		snprintf(probe, sizeof(probe), "%s/probe", p.dir);
		f = fopen(probe, "w");
		assert_non_null(f);
		fprintf(f, "prefix %s suffix", secret);
		fclose(f);
		assert_int_equal(nftw(p.dir, walk_one, 16, FTW_PHYS), 0);
		assert_int_equal(walk_found, 1);
		unlink(probe);
	}
}

/* A QEMU of the test's own, not sandboxd's: nothing to run, paused (-S); env its
 * environment (the marker of another sandboxd, or none). */
static pid_t
foreign_qemu(const char *env)
{
	char *argv[] = {
		"qemu-system-x86_64", "-M", "none", "-S", "-display", "none", "-nodefaults",
		"-no-user-config",    NULL
	};
	char *envp[] = { "PATH=/usr/bin:/bin", (char *)env, NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid = 0;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	if (posix_spawn(&pid, "/usr/bin/qemu-system-x86_64", &fa, NULL, argv, envp) != 0)
		pid = 0;
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

static void
end_foreign(pid_t *pid)
{
	if (*pid > 0) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
	}
	*pid = 0;
}

/* Deletes sandbox id's row from the daemon's database (it is not running): a VMM whose
 * sandbox the store does not know. */
static void
forget_row(const char *state, const char *id)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd),
	         "sqlite3 '%s/sandboxd.db' \"DELETE FROM sandboxes WHERE id = '%s'\"", state, id);
	assert_int_equal(system(cmd), 0);
}

/* R-L3: sandboxd killed, B's row lost: the next sandboxd ends B's VMM (a stray: its marker
 * names this state directory, no sandbox takes it back) and its cgroup, takes A back, and
 * leaves alone a QEMU of no sandboxd and one whose marker names another state directory. */
static void
test_stray_vmm_ended_foreign_qemu_left_alone(void **state)
{
	char other[400], group[1200], *mem;
	pid_t pa, pb;
	unsigned base;

	(void)state;
	if (!a_id[0]) {
		harness_skip_case("no sandboxes (the uids case did not run)");
		return;
	}
	pa = vmm_pid(a_id);
	pb = vmm_pid(b_id);
	assert_true(pa > 0 && pb > 0);
	mem = cgroup_dir(pb, "memory");
	snprintf(group, sizeof(group), "%s", mem);
	free(mem);
	base = claimed_base(p.state);
	snprintf(other, sizeof(other), "SANDBOXD_STATE_DIR=%s-other", p.state);
	if (system("command -v sqlite3 >/dev/null") != 0) {
		harness_skip_case("sqlite3 is not installed (apt-get install sqlite3)");
		return;
	}
	foreign[0] = foreign_qemu(NULL);
	foreign[1] = foreign_qemu(other);
	assert_true(foreign[0] > 0 && foreign[1] > 0);
	assert_int_equal(harness_stop(&p, SIGKILL), 128 + SIGKILL);
	forget_row(p.state, b_id);
	assert_int_equal(
	        harness_restart(&p, harness_binary("SANDBOXD"),
	                        (const char *const[]){ "--accel", "tcg", "--default-image",
	                                               "busybox", "--keep-sandboxes", NULL },
	                        NULL),
	        0);
	assert_true(harness_file_contains(p.log, "after the restart: 1 stray VMM(s) ended"));
	assert_true(harness_file_contains(p.log, "1 sandbox(es) taken back"));
	/* B's record went with its row: no sandbox has it */
	assert_true(harness_file_contains(p.log, "records: deleted 1 that no sandbox has"));
	assert_false(alive(pb));
	assert_true(alive(pa));
	/* its cgroup went with it; the claim on the range stayed the same */
	assert_int_not_equal(access(group, F_OK), 0);
	assert_int_equal(claimed_base(p.state), base);
	/* not ours: still there, and still our children to reap */
	for (int i = 0; i < 2; i++) {
		assert_true(alive(foreign[i]));
		assert_int_equal(waitpid(foreign[i], NULL, WNOHANG), 0);
		end_foreign(&foreign[i]);
	}
	b_id[0] = '\0';
}

/* ---- with egress: taps (network namespaces of the test's own) ---- */

static char netns[16];
static bool netns_ready;
static struct daemon_proc tq, rq; /* rq: the reconciler's case */
static char resolv_dir[300];
/* QEMUs the reconciler's case plants: with this state directory's marker, with another's, none */
static pid_t planted[3];

static bool
sh(const char *fmt, ...)
{
	va_list ap;
	char *cmd = NULL;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&cmd, fmt, ap);
	va_end(ap);
	if (r < 0)
		return false;
	r = system(cmd);
	free(cmd);
	return r == 0;
}

static int
taps_teardown(void **state)
{
	(void)state;
	harness_set_launcher(NULL);
	harness_cleanup(&tq);
	harness_cleanup(&rq);
	for (size_t i = 0; i < ARRAY_SIZE(planted); i++)
		end_foreign(&planted[i]);
	if (netns[0] && !sh("sh '%s' down %s", NETNS_SH, netns))
		fprintf(stderr, "test-vm-security: netns.sh down %s failed\n", netns);
	if (resolv_dir[0])
		sh("rm -rf '%s'", resolv_dir);
	return 0;
}

static bool
link_exists(const char *name)
{
	return sh("ip -n %s-host link show %s >/dev/null 2>&1", netns, name);
}

/* Brings up the namespaces of this group (once) and has daemons started in NAME-host from now
 * on (harness_set_launcher(NULL) ends that). Skips the case and returns false where they
 * cannot be made. */
static bool
netns_launcher(void)
{
	static const char *launcher[6];
	static char resolv[400];

	if (!netns_ready) {
		if (!sh("command -v ip >/dev/null && command -v nft >/dev/null && "
		        "command -v sqlite3 >/dev/null")) {
			harness_skip_case("needs ip, nft and sqlite3");
			return false;
		}
		snprintf(netns, sizeof(netns), "sbxtv%d", (int)(getpid() % 100000));
		if (!sh("sh '%s' up %s", NETNS_SH, netns)) {
			harness_skip_case("cannot make network namespaces here");
			return false;
		}
		assert_int_equal(harness_tmpdir(resolv_dir, sizeof(resolv_dir)), 0);
		snprintf(resolv, sizeof(resolv), "%s/resolv.conf", resolv_dir);
		assert_true(sh("echo 'nameserver 203.0.113.53' > '%s'", resolv));
		netns_ready = true;
	}
	launcher[0] = "/bin/sh";
	launcher[1] = NETNS_SH;
	launcher[2] = "exec-host";
	launcher[3] = netns;
	launcher[4] = resolv;
	launcher[5] = NULL;
	harness_set_launcher(launcher);
	return true;
}

/* The guest's link is the one the host gave it: an address, a default route, and the MAC
 * 52:54 followed by that address (the handshake's NET and MAC agree with the command line's
 * at a boot, and with what the guest has when sandboxd takes a VM back). Runs the check until
 * the agent answers, then once more for the record. */
static void
assert_guest_link(const char *sock, const char *id)
{
	static const char script[] =
	        "{\"argv\":[\"sh\",\"-c\",\"for n in /sys/class/net/*; do [ ${n##*/} = lo ] || "
	        "i=${n##*/}; done; a=$(ip -4 -o addr show dev $i | sed 's/.*inet "
	        "\\\\([0-9.]*\\\\).*/\\\\1/'); "
	        "printf '52:54:%02x:%02x:%02x:%02x\\\\n' $(echo $a | tr . ' '); cat "
	        "/sys/class/net/$i/address; "
	        "ip route | grep -c ^default\"]}";
	char path[128], want[64];
	const char *b64, *nl;
	struct buf b = BUF_INIT(1u << 20);
	json_t *r;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	/* a VM just taken back: its agent's session comes up a moment after sandboxd does */
	for (int i = 0; i < 300; i++) {
		char *text = NULL;
		int st = harness_http_timeout(sock, "POST", path, script, 600000, &text);
		free(text);
		if (st != 503)
			break;
		usleep(100000);
	}
	r = harness_json_timeout(sock, "POST", path, script, 600000, 200);
	assert_int_equal(json_integer_value(json_object_get(r, "exit_code")), 0);
	b64 = harness_str(r, "stdout");
	assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
	assert_int_equal(buf_putc(&b, '\0'), 0);
	nl = strchr(b.data, '\n');
	assert_non_null(nl);
	assert_true(nl - b.data < (ptrdiff_t)sizeof(want) - 1);
	snprintf(want, sizeof(want), "%.*s\n%.*s\n1\n", (int)(nl - b.data), b.data,
	         (int)(nl - b.data), b.data);
	assert_string_equal(b.data, want);
	assert_true(strncmp(b.data, "52:54:", 6) == 0);
	buf_free(&b);
	json_decref(r);
}

/* R-L3 with egress: at its start sandboxd removes a persistent tap named like its own that
 * no VMM holds, and leaves another one alone; a stray VMM's tap goes with the VMM. */
static void
test_orphan_and_stray_taps_are_swept(void **state)
{
	char id[32];
	pid_t vmm;
	json_t *j;
	bool gone = false;

	(void)state;
	if (!need_root() || !netns_launcher())
		return;
	/* one made persistent by something else, in the name of slot 9; one not ours */
	assert_true(sh("ip -n %s-host tuntap add dev sbx9 mode tap", netns));
	assert_true(sh("ip -n %s-host tuntap add dev tapkeep0 mode tap", netns));
	assert_int_equal(harness_start_vm(&tq,
	                                  (const char *const[]){ "--egress", "on",
	                                                         "--keep-sandboxes", NULL },
	                                  NULL),
	                 0);
	assert_true(harness_file_contains(tq.log, "egress: removed 1 tap(s) named sbxN that no VMM "
	                                          "held"));
	assert_false(link_exists("sbx9"));
	assert_true(link_exists("tapkeep0"));

	j = harness_json_timeout(tq.sock, "POST", "/v1/sandboxes", "{}", 300000, 201);
	assert_string_equal(harness_str(j, "state"), "running");
	snprintf(id, sizeof(id), "%s", harness_str(j, "id"));
	json_decref(j);
	vmm = vmm_pid(id);
	assert_true(vmm > 0);
	assert_true(link_exists("sbx0"));
	assert_guest_link(tq.sock, id);
	/* the VMM holds sbx0: the sweep of a restart leaves a held tap alone... */
	assert_int_equal(harness_stop(&tq, SIGKILL), 128 + SIGKILL);
	assert_int_equal(harness_restart(&tq, harness_binary("SANDBOXD"),
	                                 (const char *const[]){ "--accel", "tcg", "--default-image",
	                                                        "busybox", "--egress", "on",
	                                                        "--keep-sandboxes", NULL },
	                                 NULL),
	                 0);
	assert_false(harness_file_contains(tq.log, "tap(s) named sbxN"));
	assert_true(link_exists("sbx0"));
	assert_true(alive(vmm));
	assert_guest_link(tq.sock, id);
	/* ...and once the sandbox is lost, its stray VMM is ended and its tap goes with it */
	assert_int_equal(harness_stop(&tq, SIGKILL), 128 + SIGKILL);
	forget_row(tq.state, id);
	assert_int_equal(harness_restart(&tq, harness_binary("SANDBOXD"),
	                                 (const char *const[]){ "--accel", "tcg", "--default-image",
	                                                        "busybox", "--egress", "on",
	                                                        "--keep-sandboxes", NULL },
	                                 NULL),
	                 0);
	harness_set_launcher(NULL);
	assert_true(harness_file_contains(tq.log, "after the restart: 1 stray VMM(s) ended"));
	assert_false(alive(vmm));
	for (int i = 0; i < 50 && !gone; i++) {
		gone = !link_exists("sbx0");
		if (!gone)
			usleep(100000);
	}
	assert_true(gone);
	assert_true(link_exists("tapkeep0"));
	assert_int_equal(harness_stop(&tq, SIGTERM), 0);
}

/* POST …/run in rq's sandbox id; its exit code, stdout decoded into *out (may be NULL). */
static int
rq_run(const char *id, const char *argv_json, char **out)
{
	char path[128], *body = NULL;
	json_t *r;
	int code;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	assert_true(asprintf(&body, "{\"argv\":%s}", argv_json) > 0);
	r = harness_json_timeout(rq.sock, "POST", path, body, 600000, 200);
	free(body);
	code = (int)json_integer_value(json_object_get(r, "exit_code"));
	if (out) {
		const char *b64 = harness_str(r, "stdout");
		struct buf b = BUF_INIT(1u << 20);
		assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
		*out = buf_steal(&b);
	}
	json_decref(r);
	return code;
}

/* The reconciler (--reconcile-interval 1), as it runs all along, not only at the start: within
 * a few periods it ends a QEMU planted with this state directory's marker and removes a
 * persistent tap named like ours, an empty cgroup beside its VMMs' groups and a layer
 * directory that no sandbox owns, each with its log line; it leaves alone a QEMU of no
 * sandboxd, one with another state directory's marker, a tap not named like ours, and a
 * healthy running sandbox (the same VMM, its tap, the file on its disk). */
static void
test_reconciler_sweeps_strays_while_running(void **state)
{
	static const char stray_id[] = "sbx_00000000000000ee";
	char marker[400], other[400], layer[600], group[1200], line[200], id[32], *mem, *out = NULL;
	pid_t vmm;
	json_t *j;
	bool swept = false;

	(void)state;
	if (!need_root() || !netns_launcher())
		return;
	assert_int_equal(
	        harness_start_vm(&rq,
	                         (const char *const[]){ "--egress", "on", "--reconcile-interval",
	                                                "1", NULL },
	                         NULL),
	        0);
	harness_set_launcher(NULL);
	j = harness_json_timeout(rq.sock, "POST", "/v1/sandboxes", "{\"name\":\"healthy\"}", 300000,
	                         201);
	assert_string_equal(harness_str(j, "state"), "running");
	snprintf(id, sizeof(id), "%s", harness_str(j, "id"));
	json_decref(j);
	vmm = vmm_pid(id);
	assert_true(vmm > 0);
	assert_true(link_exists("sbx0"));
	assert_int_equal(rq_run(id, "[\"sh\",\"-c\",\"echo kept > /sandbox/home/f; sync\"]", NULL),
	                 0);

	/* strays of ours... */
	snprintf(marker, sizeof(marker), "SANDBOXD_STATE_DIR=%s", rq.state);
	planted[0] = foreign_qemu(marker);
	assert_true(sh("ip -n %s-host tuntap add dev sbx7 mode tap", netns));
	mem = cgroup_dir(vmm, "memory");
	snprintf(group, sizeof(group), "%.*s/%s", (int)(strrchr(mem, '/') - mem), mem, stray_id);
	free(mem);
	assert_int_equal(mkdir(group, 0755), 0);
	snprintf(layer, sizeof(layer), "%s/vms/%s", rq.state, stray_id);
	assert_true(sh("mkdir -p '%s/root' && echo x > '%s/upper.qcow2'", layer, layer));
	/* ...and what is not ours */
	snprintf(other, sizeof(other), "SANDBOXD_STATE_DIR=%s-other", rq.state);
	planted[1] = foreign_qemu(other);
	planted[2] = foreign_qemu(NULL);
	assert_true(planted[0] > 0 && planted[1] > 0 && planted[2] > 0);
	assert_true(sh("ip -n %s-host tuntap add dev tapkeep1 mode tap", netns));

	/* each stray goes, then its log line is written: wait for both (a check of the log the
	 * moment the tap is gone can come before the line) */
	for (int i = 0; i < 150 && !swept; i++) {
		swept = !alive(planted[0]) && !link_exists("sbx7") && access(group, F_OK) != 0 &&
		        access(layer, F_OK) != 0 &&
		        harness_file_contains(rq.log, "reconciler: removed tap 'sbx7'") &&
		        harness_file_contains(rq.log, "reconciler: removed the layer of");
		if (!swept)
			usleep(100000);
	}
	assert_false(alive(planted[0]));
	assert_false(link_exists("sbx7"));
	assert_int_not_equal(access(group, F_OK), 0);
	assert_int_not_equal(access(layer, F_OK), 0);
	snprintf(line, sizeof(line), "reconciler: ended stray VMM (pid %d)", (int)planted[0]);
	assert_true(harness_file_contains(rq.log, line));
	assert_true(harness_file_contains(rq.log, "reconciler: removed tap 'sbx7'"));
	snprintf(line, sizeof(line), "reconciler: removed cgroup '%s'", stray_id);
	assert_true(harness_file_contains(rq.log, line));
	snprintf(line, sizeof(line), "reconciler: removed the layer of '%s'", stray_id);
	assert_true(harness_file_contains(rq.log, line));
	end_foreign(&planted[0]);

	/* untouched: the QEMUs that are not ours, the other tap, the healthy sandbox */
	assert_true(alive(planted[1]) && alive(planted[2]));
	assert_int_equal(waitpid(planted[1], NULL, WNOHANG), 0);
	assert_int_equal(waitpid(planted[2], NULL, WNOHANG), 0);
	assert_true(link_exists("tapkeep1"));
	assert_int_equal(vmm_pid(id), vmm);
	assert_true(alive(vmm));
	assert_true(link_exists("sbx0"));
	j = harness_json(rq.sock, "GET", "/v1/sandboxes/healthy", NULL, 200);
	assert_string_equal(harness_str(j, "state"), "running");
	json_decref(j);
	assert_int_equal(rq_run(id, "[\"cat\",\"/sandbox/home/f\"]", &out), 0);
	assert_string_equal(out, "kept\n");
	free(out);
	assert_false(harness_file_contains(rq.log, "reconciler: sandbox"));
	end_foreign(&planted[1]);
	end_foreign(&planted[2]);
	assert_true(sh("ip -n %s-host link del tapkeep1", netns));
	assert_int_equal(harness_delete_all(rq.sock), 0);
	assert_int_equal(harness_stop(&rq, SIGTERM), 0);
}

int
main(void)
{
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(test_no_cgroups_refuses_to_start),
		cmocka_unit_test(test_non_root_startup_line_says_vmms_share_its_uid),
		cmocka_unit_test(test_vmms_have_own_uids_and_cgroup_limits),
		cmocka_unit_test(test_guest_oom_is_reported),
		cmocka_unit_test(test_secret_env_is_written_nowhere),
		cmocka_unit_test(test_stray_vmm_ended_foreign_qemu_left_alone),
	};
	const struct CMUnitTest taps[] = {
		cmocka_unit_test(test_orphan_and_stray_taps_are_swept),
		cmocka_unit_test(test_reconciler_sweeps_strays_while_running),
	};
	int failed = cmocka_run_group_tests_name("shared", shared, setup, teardown);

	failed += cmocka_run_group_tests_name("taps", taps, NULL, taps_teardown);
	return harness_exit_code(failed);
}
