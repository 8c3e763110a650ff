/* test-bundle-setup.c: the real `sandboxd setup` through the machine's apt sources (Debian's
 * cloud kernel and busybox-static, about 28 MB), run twice, then a TCG boot of what it built
 * with a stand-in /init (test-init.c) that loads the modules, finds the agent port and mounts
 * the root disk under an overlay on a fresh layer. Runs only with SANDBOX_TEST_SETUP=1 (exit
 * 77 otherwise). SANDBOX_TEST_STATE_DIR keeps the result there for later tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "bundle.h"
#include "elf64.h"
#include "harness.h"
#include "initramfs.h"
#include "util.h"

static const char *sandboxd;
static char state[512];
static char tmp[256];

/* Runs argv with stdout and stderr into log; kills it after timeout_s. Returns the exit
 * status (128 + signal when killed) and the wall time. */
static int
run_logged(const char *const *argv, const char *log, int timeout_s, double *ret_secs)
{
	uint64_t start = now_mono_ms();
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int in = open("/dev/null", O_RDONLY);
		if (fd < 0 || in < 0)
			_exit(126);
		dup2(in, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		assert_true(r >= 0);
		if (r == pid)
			break;
		if (now_mono_ms() - start > (uint64_t)timeout_s * 1000) {
			kill(pid, SIGKILL);
			assert_int_equal(waitpid(pid, &status, 0), pid);
			break;
		}
		usleep(20 * 1000);
	}
	if (ret_secs)
		*ret_secs = (double)(now_mono_ms() - start) / 1000.0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static char *
slurp(const char *path)
{
	char *data = NULL;

	assert_int_equal(read_file_max(path, 16 << 20, &data, NULL), 0);
	return data;
}

static void
expect(const char *text, const char *needle)
{
	if (!strstr(text, needle)) {
		print_error("missing '%s' in:\n%s\n", needle, text);
		fail();
	}
}

/* The root disk holds /usr/bin/printenv (busybox has none): a script, mode 0755. */
static void
expect_printenv(const char *rootfs)
{
	_cleanup_free_ char *log = strdup_printf("%s/debugfs.log", tmp), *out = NULL;
	const char *argv[] = { "debugfs", "-R", "cat /usr/bin/printenv", rootfs, NULL };

	assert_int_equal(run_logged(argv, log, 60, NULL), 0);
	out = slurp(log);
	expect(out, "#!/bin/sh");
	expect(out, "ENVIRON");
	free(out);
	argv[2] = "stat /usr/bin/printenv";
	assert_int_equal(run_logged(argv, log, 60, NULL), 0);
	out = slurp(log);
	expect(out, "Mode:  0755");
}

static void
test_setup(void **unused)
{
	const char *argv[] = { sandboxd, "setup", "--state-dir", state, NULL };
	_cleanup_free_ char *log = strdup_printf("%s/setup.log", tmp), *out = NULL, *out2 = NULL,
	                    *kernel = NULL, *rootfs = NULL, *mod = NULL;
	struct bundle_manifest m = { 0 };
	double secs;
	int status;

	status = run_logged(argv, log, 600, &secs);
	out = slurp(log);
	printf("first setup: exit %d in %.1f s\n%s", status, secs, out);
	assert_int_equal(status, 0);
	expect(out, "setup: kernel: linux-image-");
	expect(out, "setup: done");

	status = run_logged(argv, log, 600, &secs);
	out2 = slurp(log);
	printf("second setup: exit %d in %.1f s\n%s", status, secs, out2);
	assert_int_equal(status, 0);
	expect(out2, "are there, reused");
	expect(out2, "setup: done: nothing to do");

	assert_int_equal(bundle_manifest_read(state, &m), 0);
	kernel = strdup_printf("%s/%s", state, m.kernel);
	rootfs = strdup_printf("%s/%s", state, m.rootfs);
	assert_int_equal(bundle_check_pvh(kernel), 0);
	assert_int_equal(access(rootfs, R_OK), 0);
	expect_printenv(rootfs);

	/* a root disk an older sandboxd built (its manifest says no layout) is built again */
	{
		_cleanup_free_ char *old = NULL;
		m.rootfs_layout = 0;
		assert_int_equal(bundle_manifest_write(state, &m), 0);
		status = run_logged(argv, log, 600, &secs);
		old = slurp(log);
		printf("setup over an older root disk: exit %d in %.1f s\n%s", status, secs, old);
		assert_int_equal(status, 0);
		expect(old, "is of an older layout (0, now ");
		expect(old, "setup: done: ");
		bundle_manifest_done(&m);
		assert_int_equal(bundle_manifest_read(state, &m), 0);
		assert_true(m.rootfs_layout > 0);
		expect_printenv(rootfs);
	}
	assert_true(m.n_modules >= 9);
	assert_string_equal(m.modules[0], "virtio_ring.ko");
	assert_string_equal(m.modules[1], "virtio.ko");
	for (size_t i = 0; i < m.n_modules; i++) {
		free(mod);
		mod = strdup_printf("%s/%s/%s", state, m.modules_dir, m.modules[i]);
		assert_int_equal(access(mod, R_OK), 0);
	}
	bundle_manifest_done(&m);
}

static void
test_boot(void **unused)
{
	_cleanup_free_ char *moddir = NULL, *initrd = NULL, *kernel = NULL, *rootfs = NULL,
	                    *blank = NULL, *upper = NULL, *log = NULL, *console = NULL,
	                    *append = NULL, *sock = NULL, *chardev = NULL, *root_drive = NULL,
	                    *up_drive = NULL;
	struct bundle_manifest m = { 0 };
	char sha[65];
	uint64_t size;
	unsigned khz;
	double secs;
	int status;

	if (!BUNDLE_TEST_INIT[0] || system("command -v qemu-system-x86_64 >/dev/null") != 0)
		harness_skip_case(
		        "no musl-gcc test init or no qemu-system-x86_64: boot not checked");
	assert_int_equal(bundle_manifest_read(state, &m), 0);
	moddir = strdup_printf("%s/%s", state, m.modules_dir);
	kernel = strdup_printf("%s/%s", state, m.kernel);
	rootfs = strdup_printf("%s/%s", state, m.rootfs);
	initrd = strdup_printf("%s/initrd.cpio", tmp);
	upper = strdup_printf("%s/upper.qcow2", tmp);
	log = strdup_printf("%s/console.log", tmp);
	sock = strdup_printf("%s/agent.sock", tmp);
	assert_int_equal(bundle_write_initramfs(initrd, BUNDLE_TEST_INIT, moddir, m.modules,
	                                        m.n_modules, sha, &size),
	                 0);
	assert_int_equal(bundle_blank_disk(state, 256, &blank), 0);
	assert_int_equal(bundle_make_layer(blank, upper), 0);
	assert_int_equal(bundle_host_tsc_khz(&khz), 0);
	append = strdup_printf(
	        "console=ttyS0 quiet panic=-1 reboot=t tsc=reliable tsc_early_khz=%u "
	        "cryptomgr.notests init_on_alloc=0 initcall_blacklist=crypto_kdf108_init,"
	        "init_kprobe_trace,load_system_certificate_list,cubictcp_register",
	        khz);
	chardev = strdup_printf("socket,id=ag,path=%s,server=on,wait=off", sock);
	root_drive = strdup_printf("id=root,file=%s,format=raw,if=none,readonly=on", rootfs);
	up_drive = strdup_printf("id=up,file=%s,format=qcow2,if=none", upper);
	{
		const char *argv[] = {
			"qemu-system-x86_64",
			"-M",
			"microvm,accel=tcg,x-option-roms=off,pit=off,pic=off,rtc=on",
			"-cpu",
			"max",
			"-m",
			"256",
			"-nodefaults",
			"-no-user-config",
			"-display",
			"none",
			"-serial",
			"stdio",
			"-kernel",
			kernel,
			"-initrd",
			initrd,
			"-append",
			append,
			"-no-reboot",
			"-chardev",
			chardev,
			"-device",
			"virtio-serial-device",
			"-device",
			"virtserialport,chardev=ag,name=agent",
			"-drive",
			root_drive,
			"-device",
			"virtio-blk-device,drive=root",
			"-drive",
			up_drive,
			"-device",
			"virtio-blk-device,drive=up",
			NULL,
		};
		status = run_logged(argv, log, 300, &secs);
	}
	console = slurp(log);
	printf("boot under TCG (tsc_early_khz=%u): QEMU exit %d after %.2f s\n%s", khz, status,
	       secs, console);
	fflush(stdout);
	assert_int_equal(status, 0);
	expect(console, "test-init: modules: ");
	expect(console, " loaded, 0 failed");
	expect(console, "name=agent");
	expect(console, "port /dev/vport");
	expect(console, "block vda");
	expect(console, "block vdb");
	expect(console, "mount /dev/vda: ok");
	expect(console, "overlay: ok");
	expect(console, "uid=1001(sandbox) gid=1001(sandbox)");
	expect(console, "1001:1001 755 written-through-overlay");
	expect(console, "shell: exit 0");
	expect(console, "test-init: done");
	bundle_manifest_done(&m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_setup),
		cmocka_unit_test(test_boot),
	};
	const char *given = getenv("SANDBOX_TEST_STATE_DIR");
	int r;

	if (!getenv("SANDBOX_TEST_SETUP") || !streq(getenv("SANDBOX_TEST_SETUP"), "1")) {
		fprintf(stderr, "bundle/setup: skipped: set SANDBOX_TEST_SETUP=1 to run the real "
		                "setup (downloads about 28 MB through apt)\n");
		return 77;
	}
	sandboxd = getenv("SANDBOXD");
	if (isempty(sandboxd)) {
		fprintf(stderr, "bundle/setup: skipped: SANDBOXD is not set\n");
		return 77;
	}
	snprintf(tmp, sizeof(tmp), "/tmp/test-bundle-setup.XXXXXX");
	if (!mkdtemp(tmp))
		return 1;
	if (!isempty(given)) {
		snprintf(state, sizeof(state), "%s", given);
	} else {
		snprintf(state, sizeof(state), "%s/state", tmp);
	}
	r = harness_exit_code(cmocka_run_group_tests(tests, NULL, NULL));
	{
		_cleanup_free_ char *cmd = strdup_printf("rm -rf '%s'", tmp);
		if (system(cmd) != 0)
			r = r ?: 1;
	}
	return r;
}
