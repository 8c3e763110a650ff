/* test-vm.c: real microVMs through the product sandboxd (QEMU microvm; TCG on machines
 * without working KVM): the guest's own kernel, exit codes and output, resources the guest
 * sees, restart mode (files survive a stop, processes do not), kept processes that outlive
 * their client and sandboxd itself, a sandbox's secret that outlives a restart of sandboxd
 * with --keep-sandboxes, a VMM killed from outside (failed, then started again with the work on
 * its disk), the VMM's confinement, what the host measures of a VM (GET …/metrics), and
 * nothing left behind. Boots are few: each costs seconds under TCG. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include "base64.h"
#include "harness.h"

static struct daemon_proc p;

/* the restarts below take the sandboxes back */
static const char *const keep_args[] = { "--accel",         "tcg",     "--stop-timeout",   "0",
	                                 "--default-image", "busybox", "--keep-sandboxes", NULL };

static int
setup(void **state)
{
	return harness_start_vm(&p, (const char *const[]){ "--keep-sandboxes", NULL }, NULL);
}

static int
teardown(void **state)
{
	int rc = harness_stop(&p, SIGTERM);

	harness_cleanup(&p);
	return rc == 0 ? 0 : -1;
}

static json_t *
create(const char *body)
{
	json_t *j = harness_json(p.sock, "POST", "/v1/sandboxes", body, 201);

	if (strcmp(harness_str(j, "state"), "running") != 0)
		fail_msg("the sandbox did not boot: %s", harness_str(j, "reason"));
	return j;
}

static void
destroy(json_t *sb)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(sb, "id"));
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	json_decref(sb);
}

/* POST …/run; returns exit code and decoded stdout/stderr (caller frees). */
static int
run(json_t *sb, const char *argv_json, char **out, char **err)
{
	char path[128], *body = NULL;
	json_t *r;
	int code;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", harness_str(sb, "id"));
	if (asprintf(&body, "{\"argv\":%s}", argv_json) < 0)
		fail();
	r = harness_json(p.sock, "POST", path, body, 200);
	free(body);
	code = (int)json_integer_value(json_object_get(r, "exit_code"));
	for (int i = 0; i < 2; i++) {
		const char *b64 = harness_str(r, i ? "stderr" : "stdout");
		struct buf b = BUF_INIT(64u << 20);
		assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
		if (i ? err != NULL : out != NULL)
			*(i ? err : out) = buf_steal(&b);
		else
			buf_free(&b);
	}
	json_decref(r);
	return code;
}

static void
test_guest_kernel_output_and_exit_codes(void **state)
{
	json_t *sb = create("{\"name\":\"k\"}");
	struct utsname u;
	char *out = NULL, *err = NULL;

	/* the guest's kernel, not the host's */
	assert_int_equal(run(sb, "[\"uname\",\"-r\"]", &out, NULL), 0);
	uname(&u);
	assert_true(strlen(out) > 1);
	assert_null(strstr(out, u.release));
	free(out);
	/* exit codes, both streams, who and where */
	assert_int_equal(
	        run(sb, "[\"sh\",\"-c\",\"id -u; pwd; echo oops >&2; exit 7\"]", &out, &err), 7);
	assert_string_equal(out, "1001\n/sandbox/home\n");
	assert_string_equal(err, "oops\n");
	free(out);
	free(err);
	/* its name, and a loopback interface that is up */
	assert_int_equal(run(sb, "[\"cat\",\"/etc/hostname\"]", &out, NULL), 0);
	assert_string_equal(out, "k\n");
	free(out);
	/* /etc/hosts names it (once), and its machine id is its own: the first 32 hex of
	 * sha256("sandboxd machine-id " + id), the same at every boot */
	assert_int_equal(
	        run(sb, "[\"grep\",\"^127\\\\.0\\\\.1\\\\.1\",\"/etc/hosts\"]", &out, NULL), 0);
	assert_string_equal(out, "127.0.1.1\tk\n");
	free(out);
	{
		char cmd[200], want[64] = "";
		FILE *f;
		snprintf(cmd, sizeof(cmd), "printf 'sandboxd machine-id %%s' '%s' | sha256sum",
		         harness_str(sb, "id"));
		f = popen(cmd, "r");
		assert_non_null(f);
		assert_non_null(fgets(want, 33, f));
		pclose(f);
		assert_int_equal(strlen(want), 32);
		strcat(want, "\n");
		assert_int_equal(run(sb, "[\"cat\",\"/etc/machine-id\"]", &out, NULL), 0);
		assert_string_equal(out, want);
		free(out);
	}
	assert_int_equal(
	        run(sb, "[\"sh\",\"-c\",\"ip link show lo | grep -q UP && echo up\"]", &out, NULL),
	        0);
	assert_string_equal(out, "up\n");
	free(out);
	/* files are read and written with the sandbox user's rights, like its processes */
	{
		char path[200], *body = NULL;
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/files?path=/etc/shadow",
		         harness_str(sb, "id"));
		assert_int_equal(harness_http(p.sock, "GET", path, NULL, &body), 403);
		free(body);
	}
	/* killed by a signal: 128 + signal */
	assert_int_equal(run(sb, "[\"sh\",\"-c\",\"kill -9 $$\"]", NULL, NULL), 137);
	/* an image that cannot be installed (a registry on loopback the operator did not name:
	 * refused before any connection) creates nothing */
	{
		char *body = NULL;
		json_t *list;
		assert_int_equal(harness_http(p.sock, "POST", "/v1/sandboxes",
		                              "{\"image\":\"127.0.0.1:1/nope:latest\"}", &body),
		                 403);
		assert_non_null(strstr(body, "registry 127.0.0.1:1"));
		free(body);
		list = harness_json(p.sock, "GET", "/v1/sandboxes", NULL, 200);
		assert_int_equal(json_array_size(json_object_get(list, "sandboxes")), 1);
		json_decref(list);
		assert_string_equal(harness_str(sb, "image"), "busybox");
	}
	/* an unknown program is the request's fault */
	{
		char path[128], *body = NULL;
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", harness_str(sb, "id"));
		assert_int_equal(harness_http(p.sock, "POST", path,
		                              "{\"argv\":[\"no-such-program\"]}", &body),
		                 400);
		free(body);
	}
	destroy(sb);
}

static void
test_limits_are_what_the_guest_sees(void **state)
{
	json_t *sb = create("{\"cpus\":2,\"memory_mb\":256}");
	char *out = NULL;
	long kb = 0;

	assert_int_equal(run(sb, "[\"nproc\"]", &out, NULL), 0);
	assert_string_equal(out, "2\n");
	free(out);
	assert_int_equal(run(sb, "[\"sh\",\"-c\",\"grep MemTotal /proc/meminfo\"]", &out, NULL), 0);
	assert_int_equal(sscanf(out, "MemTotal: %ld kB", &kb), 1);
	/* 256 MiB less what the kernel keeps for itself */
	assert_true(kb > 180 * 1024 && kb <= 256 * 1024);
	free(out);
	destroy(sb);
}

/* The newest sample of GET …/metrics (a new reference), waiting up to 25 s for one taken at
 * or after not_before (an RFC 3339 time; NULL: any). */
static json_t *
newest_sample(json_t *sb, const char *not_before)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/metrics", harness_str(sb, "id"));
	for (int i = 0; i < 50; i++) {
		json_t *m = harness_json(p.sock, "GET", path, NULL, 200);
		json_t *samples = json_object_get(m, "samples");
		json_t *last = json_array_get(samples, json_array_size(samples) - 1);
		if (last && (!not_before || strcmp(harness_str(last, "time"), not_before) >= 0)) {
			json_incref(last);
			json_decref(m);
			return last;
		}
		json_decref(m);
		usleep(500000);
	}
	fail_msg("no sample of %s came", harness_str(sb, "id"));
	return NULL;
}

/* The resident memory of the sandbox's VMM, as its /proc/PID/status says. */
static uint64_t
vmm_rss(json_t *sb)
{
	char cmd[160], status[64], line[256];
	uint64_t kb = 0;
	int pid = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "pgrep -x 'qemu-sbx-%.6s'", harness_str(sb, "id") + 4);
	f = popen(cmd, "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%d", &pid), 1);
	pclose(f);
	snprintf(status, sizeof(status), "/proc/%d/status", pid);
	f = fopen(status, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %" SCNu64 " kB", &kb) == 1)
			break;
	fclose(f);
	assert_true(kb > 0);
	return kb * 1024;
}

static char *
now_rfc3339(void)
{
	char when[32];
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return strdup(when);
}

/* GET …/metrics measures the VM on the host: memory_bytes is the VMM's (its RSS here, where
 * VMMs get no cgroup v2 group: within a factor of two of what /proc says of it around the
 * sample), the CPU its boot took, and disk_bytes grows by what the guest writes to its disk. */
static void
test_metrics_are_measured_on_the_host(void **state)
{
	json_t *sb = create("{\"memory_mb\":256}"), *first, *x;
	uint64_t rss0, rss1, mem, disk0;
	char *since, *out = NULL;

	first = newest_sample(sb, NULL); /* taken as it started */
	assert_true(json_number_value(json_object_get(first, "cpu_seconds")) > 0);
	json_decref(first);

	rss0 = vmm_rss(sb);
	since = now_rfc3339();
	x = newest_sample(sb, since);
	free(since);
	rss1 = vmm_rss(sb);
	mem = (uint64_t)json_integer_value(json_object_get(x, "memory_bytes"));
	if (mem < MIN(rss0, rss1) / 2 || mem > MAX(rss0, rss1) * 2)
		fail_msg("memory_bytes %" PRIu64 " is not the VMM's RSS (%" PRIu64 " then %" PRIu64
		         ")",
		         mem, rss0, rss1);
	disk0 = (uint64_t)json_integer_value(json_object_get(x, "disk_bytes"));
	json_decref(x);

	/* 32 MiB the guest writes to its own disk, synced down to the VMM's layer file */
	assert_int_equal(run(sb,
	                     "[\"sh\",\"-c\",\"dd if=/dev/urandom of=/sandbox/home/big bs=1M "
	                     "count=32 2>/dev/null && sync && echo ok\"]",
	                     &out, NULL),
	                 0);
	assert_string_equal(out, "ok\n");
	free(out);
	since = now_rfc3339();
	x = newest_sample(sb, since);
	free(since);
	if ((uint64_t)json_integer_value(json_object_get(x, "disk_bytes")) < disk0 + (24u << 20))
		fail_msg("disk_bytes went from %" PRIu64 " to %" PRIu64 " after 32 MiB written",
		         disk0, (uint64_t)json_integer_value(json_object_get(x, "disk_bytes")));
	json_decref(x);
	destroy(sb);
}

static void
test_stop_keeps_files_not_processes(void **state)
{
	json_t *sb = create("{\"name\":\"restart-mode\"}");
	char path[200], *out = NULL, *list = NULL;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", harness_str(sb, "id"));
	json_decref(harness_json(p.sock, "POST", path,
	                         "{\"argv\":[\"sleep\",\"1000\"],\"keep\":true}", 201));
	assert_int_equal(run(sb, "[\"sh\",\"-c\",\"echo kept > /sandbox/home/note\"]", NULL, NULL),
	                 0);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", harness_str(sb, "id"));
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", harness_str(sb, "id"));
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	assert_int_equal(run(sb, "[\"cat\",\"/sandbox/home/note\"]", &out, NULL), 0);
	assert_string_equal(out, "kept\n");
	free(out);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", harness_str(sb, "id"));
	assert_int_equal(harness_http(p.sock, "GET", path, NULL, &list), 200);
	assert_string_equal(list, "{\"processes\":[]}");
	free(list);
	destroy(sb);
}

static bool
qemu_running_for(const char *id)
{
	char pattern[64], cmd[256];

	/* a process that ended but nobody reaped yet (a zombie) is not running: after a restart
	 * of sandboxd, QEMU is init's child, and some containers' init never reaps */
	snprintf(pattern, sizeof(pattern), "qemu-sbx-%.6s", id + 4);
	snprintf(cmd, sizeof(cmd),
	         "ps -eo stat=,comm= | awk '$1 !~ /^Z/ && $2 == \"%s\"' | grep -q .", pattern);
	return system(cmd) == 0;
}

static bool
dir_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int n = 0;

	if (!d)
		return true;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n == 0;
}

/* As root with cgroups: makes (make) or looks for (!make) an empty group "sbx_gone" beside
 * the group of the VMM of sandbox id, as a VMM that ended while no sandboxd ran would leave.
 * Returns whether one exists. Only beside that group: on a shared machine another sandboxd
 * (another test run, in a cgroup namespace of its own) may use a parent of the same name. */
static bool
plant_gone_vmm_cgroup(bool make, const char *id)
{
	char cmd[1400];
	int rc;

	if (geteuid() != 0 || harness_file_contains(p.log, "without cgroup limits"))
		return false;
	/* the parent is named for the uid range this sandboxd claimed, under the groups this
	 * test (and so the sandboxd it started) is in; the check looks only where this run
	 * planted (another run's sandboxd with the same uid base, elsewhere in the hierarchy,
	 * is none of its business) */
	snprintf(cmd, sizeof(cmd),
	         "base=$(grep -lx '%s' /run/sandboxd-vmm-uids/[0-9]* | head -1); "
	         "[ -n \"$base\" ] || exit 2; base=${base##*/}; n=0; planted='%s/planted'; "
	         "vmm='%s'; %s; [ $n -gt 0 ]",
	         p.state, p.state, id,
	         make ? "for d in $(find /sys/fs/cgroup -maxdepth 7 -type d -path "
	                "\"*/sandboxd/$base\"); do [ -d \"$d/$vmm\" ] || continue; "
	                "mkdir \"$d/sbx_gone\" && echo \"$d/sbx_gone\" >> \"$planted\" && "
	                "n=$((n+1)); done"
	              : "for d in $(cat \"$planted\"); do [ -d \"$d\" ] && n=$((n+1)); done");
	rc = system(cmd);
	return rc == 0;
}

/* Whether the process pid of sandbox id is listed running (once the agent answers again). */
static bool
listed_running(const char *id, long long pid, char **ret_argv)
{
	char path[200];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld", id, pid);
	for (int i = 0; i < 150; i++) {
		char *text = NULL;
		json_t *j = NULL;
		bool running = false;
		if (harness_http(p.sock, "GET", path, NULL, &text) == 200)
			j = json_loads(text, 0, NULL);
		free(text);
		running = j && strcmp(harness_str(j, "state"), "running") == 0;
		if (running && ret_argv)
			*ret_argv = json_dumps(json_object_get(j, "argv"), JSON_COMPACT);
		json_decref(j);
		if (running)
			return true;
		usleep(100000);
	}
	return false;
}

/* Issue 14: a job started in a sandbox with a secret (ANTHROPIC_API_KEY) goes on while nobody
 * watches and sandboxd is killed (kill -9), then restarted with --keep-sandboxes (SIGTERM): the
 * VM is taken back each time; a new exec sees the secret's value (never empty); the kept
 * process still runs, listed with its whole command line, and its output replays from the
 * start. The value is on the host only in the sandbox's record, 0600 in a 0700 directory. */
static void
test_kept_process_outlives_client_and_daemon(void **state)
{
	char secret[64], body[200];
	json_t *sb, *proc, *again;
	char path[400], *output = NULL, *argv = NULL, vms[400];
	char id[32];
	long long pid;

	snprintf(secret, sizeof(secret), "sk-test-%d-%lld", (int)getpid(), (long long)time(NULL));
	snprintf(body, sizeof(body),
	         "{\"name\":\"long-job\",\"env\":{\"ANTHROPIC_API_KEY\":\"%s\"}}", secret);
	sb = create(body);
	snprintf(id, sizeof(id), "%s", harness_str(sb, "id"));
	{
		/* the record: the one file on the host with the value, the owner's alone */
		struct stat st;
		snprintf(path, sizeof(path), "%s/records", p.state);
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(st.st_mode & 07777, 0700);
		snprintf(path, sizeof(path), "%s/records/%s.json", p.state, id);
		assert_int_equal(lstat(path, &st), 0);
		assert_true(S_ISREG(st.st_mode));
		assert_int_equal(st.st_mode & 07777, 0600);
		assert_int_equal(st.st_uid, geteuid());
		assert_true(harness_file_contains(path, secret));
	}
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	proc = harness_json(p.sock, "POST", path,
	                    "{\"argv\":[\"sh\",\"-c\",\"i=0; while [ $i -lt 600 ]; do echo tick "
	                    "$i; i=$((i+1)); sleep 0.2; done\"],\"keep\":true}",
	                    201);
	pid = json_integer_value(json_object_get(proc, "pid"));
	json_decref(proc);
	sleep(1);
	for (int round = 0; round < 2; round++) {
		if (round == 0) {
			/* sandboxd dies (kill -9) while nobody watches; the VM and its job go on */
			assert_int_equal(harness_stop(&p, SIGKILL), 128 + SIGKILL);
			assert_true(qemu_running_for(id));
			plant_gone_vmm_cgroup(true, id);
			sleep(1);
		} else {
			/* then an ordinary restart: with the flag the stop leaves it running */
			assert_int_equal(harness_stop(&p, SIGTERM), 0);
			assert_true(harness_file_contains(p.log, "sandboxes keep running "
			                                         "(--keep-sandboxes)"));
			assert_true(qemu_running_for(id));
		}
		/* the next sandboxd does not wait for guests to power off (QMP quit at once) */
		assert_int_equal(harness_restart(&p, harness_binary("SANDBOXD"), keep_args, NULL),
		                 0);
		assert_true(harness_file_contains(p.log, "1 sandbox(es) taken back"));
		/* the group a VMM that ended while no sandboxd was there left behind is removed */
		if (round == 0 && plant_gone_vmm_cgroup(false, id)) {
			/* (the count may include groups an earlier run with this uid range left:
			 * what matters is that the planted one is gone) */
			assert_true(
			        harness_file_contains(p.log, "cgroup(s) of VMMs that are gone"));
			assert_false(plant_gone_vmm_cgroup(false, id));
		}
		again = harness_json(p.sock, "GET", "/v1/sandboxes/long-job", NULL, 200);
		assert_string_equal(harness_str(again, "state"), "running");
		json_decref(again);
		/* the guest's list of kept processes comes back once the agent answers again,
		 * with the whole command line from the record */
		assert_true(listed_running(id, pid, &argv));
		assert_string_equal(argv, "[\"sh\",\"-c\",\"i=0; while [ $i -lt 600 ]; do echo "
		                          "tick $i; i=$((i+1)); sleep 0.2; done\"]");
		free(argv);
		/* a new exec sees the secret */
		assert_int_equal(run(sb, "[\"printenv\",\"ANTHROPIC_API_KEY\"]", &output, NULL), 0);
		assert_int_equal(strncmp(output, secret, strlen(secret)), 0);
		assert_string_equal(output + strlen(secret), "\n");
		free(output);
		output = NULL;
		/* its output replays from the start and carries on */
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%lld/output", id, pid);
		{
			int fd = harness_stream_open(p.sock, "GET", path, NULL);
			size_t n = 0;
			assert_true(fd >= 0);
			(void)harness_stream_read(fd, 2500, NULL, &output, &n);
			close(fd);
			assert_true(n > 0);
		}
		/* the first line replays "tick 0" (base64 "dGljayAw"), later lines carry on */
		assert_non_null(strstr(output, "\"data\":\"dGljayAw"));
		free(output);
		output = NULL;
	}
	assert_false(harness_file_contains(p.log, secret));
	/* a stop of the VM this sandboxd took back: its QEMU quits through the monitor (the
	 * guest is not asked), and the layer is intact: what was synced is there after a start,
	 * as is the secret */
	assert_int_equal(
	        run(sb, "[\"sh\",\"-c\",\"echo synced > /sandbox/home/f; sync\"]", NULL, NULL), 0);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", id);
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	again = harness_json(p.sock, "GET", "/v1/sandboxes/long-job", NULL, 200);
	assert_string_equal(harness_str(again, "state"), "stopped");
	json_decref(again);
	assert_true(harness_file_contains(p.log, "asking QEMU to quit through its monitor"));
	assert_false(harness_file_contains(p.log, "killing"));
	assert_false(qemu_running_for(id));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", id);
	json_decref(harness_json(p.sock, "POST", path, NULL, 200));
	assert_int_equal(run(sb, "[\"cat\",\"/sandbox/home/f\"]", &output, NULL), 0);
	assert_string_equal(output, "synced\n");
	free(output);
	assert_int_equal(run(sb, "[\"printenv\",\"ANTHROPIC_API_KEY\"]", &output, NULL), 0);
	assert_int_equal(strncmp(output, secret, strlen(secret)), 0);
	free(output);
	destroy(sb);
	/* the record goes with its sandbox */
	snprintf(path, sizeof(path), "%s/records/%s.json", p.state, id);
	assert_int_equal(access(path, F_OK), -1);
	/* nothing of it is left: no VMM, no directory */
	usleep(300000);
	assert_false(qemu_running_for(id));
	snprintf(vms, sizeof(vms), "%s/vms", p.state);
	assert_true(dir_empty(vms));
}

/* Whether the file name is in the VM directory of sandbox id. */
static bool
in_vm_dir(const char *id, const char *name)
{
	char path[600];

	snprintf(path, sizeof(path), "%s/vms/%s/%s", p.state, id, name);
	return access(path, F_OK) == 0;
}

static void
test_killed_vmm_fails_and_start_brings_it_back(void **state)
{
	json_t *sb = create("{}"), *after;
	char id[32], cmd[160], vms[400], path[128], status[64], line[256], *out = NULL;
	int ns_pid = 0;
	FILE *f;
	pid_t qemu = 0;

	snprintf(id, sizeof(id), "%s", harness_str(sb, "id"));
	/* work the guest wrote and synced before its VMM dies */
	assert_int_equal(run(sb,
	                     "[\"sh\",\"-c\",\"echo before-the-crash > /sandbox/home/work; sync\"]",
	                     NULL, NULL),
	                 0);
	/* the VMM's confinement, from the host's view of it */
	snprintf(cmd, sizeof(cmd), "pgrep -x 'qemu-sbx-%.6s'", id + 4);
	f = popen(cmd, "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%d", &qemu), 1);
	pclose(f);
	snprintf(status, sizeof(status), "/proc/%d/status", (int)qemu);
	f = fopen(status, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned a, b;
		if (sscanf(line, "Uid: %u %u", &a, &b) == 2 && geteuid() == 0)
			assert_true(a >= 61000 && b >= 61000); /* an unprivileged uid of its own */
		if (strncmp(line, "Seccomp:", 8) == 0)
			assert_int_equal(atoi(line + 8), 2); /* -sandbox on: filter mode */
		if (strncmp(line, "NoNewPrivs:", 11) == 0)
			assert_int_equal(atoi(line + 11), 1);
		if (sscanf(line, "NSpid: %u %u", &a, &b) == 2)
			ns_pid = (int)b; /* its pid in the namespace it runs in */
	}
	/* as root: process 1 of a PID namespace of its own (no other process is there) */
	if (geteuid() == 0)
		assert_int_equal(ns_pid, 1);
	fclose(f);
	if (geteuid() == 0) {
		/* its filesystem is a jail: /usr and a few devices, nothing of the host's state */
		char root[64], probe[128];
		snprintf(root, sizeof(root), "/proc/%d/root", (int)qemu);
		snprintf(probe, sizeof(probe), "%s/usr/bin", root);
		assert_int_equal(access(probe, F_OK), 0);
		snprintf(probe, sizeof(probe), "%s/etc", root);
		assert_int_not_equal(access(probe, F_OK), 0);
		snprintf(probe, sizeof(probe), "%s/tmp", root);
		assert_int_not_equal(access(probe, F_OK), 0);
		snprintf(probe, sizeof(probe), "%s/dev/null", root);
		assert_int_equal(access(probe, F_OK), 0);
		snprintf(probe, sizeof(probe), "%s/dev/sda", root);
		assert_int_not_equal(access(probe, F_OK), 0);
		/* and no network: a namespace of its own with nothing in it */
		{
			char mine[128] = "", its[128] = "", link[64];
			snprintf(link, sizeof(link), "/proc/%d/ns/net", (int)qemu);
			assert_true(readlink("/proc/self/ns/net", mine, sizeof(mine) - 1) > 0);
			assert_true(readlink(link, its, sizeof(its) - 1) > 0);
			assert_string_not_equal(mine, its);
		}
	}
	/* killed from outside: failed with the reason; its process, sockets and record are gone,
	 * its layer is not */
	kill(qemu, SIGKILL);
	for (int i = 0; i < 50; i++) {
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
		after = harness_json(p.sock, "GET", path, NULL, 200);
		if (strcmp(harness_str(after, "state"), "failed") == 0)
			break;
		json_decref(after);
		after = NULL;
		usleep(100000);
	}
	assert_non_null(after);
	assert_non_null(strstr(harness_str(after, "reason"), "killed by signal 9"));
	json_decref(after);
	assert_false(qemu_running_for(id));
	assert_true(in_vm_dir(id, "upper.qcow2"));
	assert_false(in_vm_dir(id, "vm.json"));
	assert_false(in_vm_dir(id, "agent.sock"));
	assert_false(in_vm_dir(id, "qmp.sock"));
	/* a start boots the layer again, the work on it */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", id);
	after = harness_json_timeout(p.sock, "POST", path, NULL, 300000, 200);
	assert_string_equal(harness_str(after, "state"), "running");
	json_decref(after);
	assert_true(qemu_running_for(id));
	assert_int_equal(run(sb, "[\"cat\",\"/sandbox/home/work\"]", &out, NULL), 0);
	assert_string_equal(out, "before-the-crash\n");
	free(out);
	/* deleted, nothing of it is left */
	destroy(sb);
	usleep(300000);
	assert_false(qemu_running_for(id));
	snprintf(vms, sizeof(vms), "%s/vms/%s", p.state, id);
	assert_int_not_equal(access(vms, F_OK), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_guest_kernel_output_and_exit_codes),
		cmocka_unit_test(test_limits_are_what_the_guest_sees),
		cmocka_unit_test(test_metrics_are_measured_on_the_host),
		cmocka_unit_test(test_stop_keeps_files_not_processes),
		cmocka_unit_test(test_kept_process_outlives_client_and_daemon),
		cmocka_unit_test(test_killed_vmm_fails_and_start_brings_it_back),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
