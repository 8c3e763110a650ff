/* test-qemu-argv.c: QEMU's command line (daemon/vm/qemu-argv.c) for representative launches.
 * The whole line of a plain TCG launch is spelled out: bench/vm/run.sh rebuilds a bare QEMU
 * from the line sandboxd runs, and the VM tests boot it, so a change here must be deliberate.
 * The other cases check what each part of a launch changes, and that every descriptor the line
 * names is one of enum qemu_fd, which is also where the child puts them. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include "qemu-argv.h"
#include "util.h"

#define QEMU "/usr/bin/qemu-system-x86_64"
#define ID "sbx_0123456789abcdef"

static const struct qemu_machine tcg = { .qemu_bin = QEMU, .accel = "tcg", .tsc_khz = 2995200 };
static const struct qemu_machine kvm = { .qemu_bin = QEMU, .accel = "kvm", .tsc_khz = 2995200 };

static struct vm_launch
launch(void)
{
	return (struct vm_launch){
		.id = ID,
		.hostname = "web",
		.root_disk = "/var/lib/sandboxd/images/busybox/rootfs.ext4",
		.cpus = 1,
		.memory_mb = 512,
		.disk_mb = 1024,
		.slot = 3,
		.net = { .tap_fd = -1 },
	};
}

/* The link of slot 1 in 10.200.0.0/16: tap sbx1, host .5, guest .6. */
static void
with_net(struct vm_launch *l)
{
	l->has_net = true;
	l->net.tap_fd = 42; /* never on the line: the child puts it at QEMU_FD_TAP */
	inet_pton(AF_INET, "10.200.0.6", &l->net.guest_addr);
	inet_pton(AF_INET, "10.200.0.5", &l->net.host_addr);
}

static char **
build(const struct qemu_machine *m, const struct vm_launch *l)
{
	char **argv = NULL;

	assert_int_equal(qemu_argv_build(m, l, &argv), 0);
	assert_non_null(argv);
	return argv;
}

static size_t
count(char *const *argv)
{
	size_t n = 0;

	while (argv[n])
		n++;
	return n;
}

/* The argument after the first occurrence of flag, or NULL. */
static const char *
after(char *const *argv, const char *flag)
{
	for (size_t i = 0; argv[i]; i++)
		if (streq(argv[i], flag))
			return argv[i + 1];
	return NULL;
}

static bool
has(char *const *argv, const char *word)
{
	for (size_t i = 0; argv[i]; i++)
		if (streq(argv[i], word))
			return true;
	return false;
}

static void
test_tcg_without_network_is_the_known_line(void **state _unused_)
{
	static const char *const want[] = {
		QEMU,
		"-M",
		"microvm,x-option-roms=off,pit=off,pic=off,rtc=on,memory-backend=mem",
		"-accel",
		"tcg,tb-size=128",
		"-cpu",
		"max",
		"-m",
		"512",
		"-object",
		"memory-backend-ram,id=mem,size=512M",
		"-smp",
		"1",
		"-nodefaults",
		"-no-user-config",
		"-display",
		"none",
		"-no-reboot",
		"-global",
		"migration.store-global-state=off",
		"-name",
		ID ",process=qemu-sbx-012345",
		"-kernel",
		"/proc/self/fd/3",
		"-initrd",
		"/proc/self/fd/4",
		"-append",
		"console=ttyS0 quiet panic=-1 reboot=t tsc=reliable cryptomgr.notests "
		"init_on_alloc=0 initcall_blacklist=crypto_kdf108_init,init_kprobe_trace,"
		"load_system_certificate_list,cubictcp_register tsc_early_khz=2995200",
		"-chardev",
		"socket,id=ag,fd=5,server=on,wait=off",
		"-device",
		"virtio-serial-device",
		"-device",
		"virtserialport,chardev=ag,name=agent",
		"-chardev",
		"socket,id=qmp,fd=6,server=on,wait=off",
		"-mon",
		"chardev=qmp,mode=control",
		"-add-fd",
		"fd=7,set=7",
		"-chardev",
		"file,id=con,path=/dev/fdset/7",
		"-serial",
		"chardev:con",
		"-add-fd",
		"fd=8,set=8,opaque=root",
		"-blockdev",
		"driver=file,node-name=rootf,filename=/dev/fdset/8,read-only=on",
		"-blockdev",
		"driver=raw,node-name=root,file=rootf,read-only=on",
		"-device",
		"virtio-blk-device,drive=root",
		"-add-fd",
		"fd=9,set=9,opaque=blank",
		"-blockdev",
		"driver=file,node-name=blankf,filename=/dev/fdset/9,read-only=on",
		"-blockdev",
		"driver=raw,node-name=blank,file=blankf,read-only=on",
		"-add-fd",
		"fd=10,set=10,opaque=upper",
		"-blockdev",
		"driver=file,node-name=upperf,filename=/dev/fdset/10",
		"-blockdev",
		"driver=qcow2,node-name=upper,file=upperf,backing=blank",
		"-device",
		"virtio-blk-device,drive=upper",
		"-sandbox",
		"on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	};
	struct vm_launch l = launch();
	char **argv = build(&tcg, &l);

	assert_int_equal(count(argv), ARRAY_SIZE(want));
	for (size_t i = 0; i < ARRAY_SIZE(want); i++)
		assert_string_equal(argv[i], want[i]);
	/* the line names no path of the host: every file comes as a descriptor */
	for (size_t i = 1; argv[i]; i++)
		assert_null(strstr(argv[i], "/var/lib"));
	qemu_argv_free(argv);
}

static void
test_kvm_with_network(void **state _unused_)
{
	struct vm_launch l = launch();
	char **argv, **plain;
	size_t n;

	with_net(&l);
	argv = build(&kvm, &l);
	assert_string_equal(after(argv, "-M"),
	                    "microvm,x-option-roms=off,pit=off,pic=off,rtc=on,memory-backend=mem");
	assert_string_equal(after(argv, "-accel"), "kvm");
	assert_string_equal(after(argv, "-cpu"), "host");
	/* the TSC is the guest's own under KVM; the link goes on the kernel's command line */
	assert_null(strstr(after(argv, "-append"), "tsc_early_khz"));
	assert_non_null(strstr(after(argv, "-append"), " sandbox.net=10.200.0.6/30,10.200.0.5"));
	assert_string_equal(after(argv, "-netdev"), "tap,id=net0,fd=11");
	assert_true(has(argv, "virtio-net-device,netdev=net0,mac=52:54:0a:c8:00:06"));
	/* the network comes last, before -sandbox */
	n = count(argv);
	assert_string_equal(argv[n - 6], "-netdev");
	assert_string_equal(argv[n - 2], "-sandbox");

	/* without it: the same line but for those */
	l = launch();
	plain = build(&kvm, &l);
	assert_int_equal(count(plain) + 4, n);
	assert_null(after(plain, "-netdev"));
	assert_null(strstr(after(plain, "-append"), "sandbox.net"));
	qemu_argv_free(plain);
	qemu_argv_free(argv);
}

static void
test_tcg_with_network_and_unknown_tsc(void **state _unused_)
{
	struct qemu_machine m = tcg;
	struct vm_launch l = launch();
	char **argv;

	m.tsc_khz = 0;
	with_net(&l);
	argv = build(&m, &l);
	assert_string_equal(after(argv, "-cpu"), "max");
	assert_true(str_has_prefix(after(argv, "-append"), qemu_cmdline_base));
	assert_string_equal(after(argv, "-append") + strlen(qemu_cmdline_base),
	                    " sandbox.net=10.200.0.6/30,10.200.0.5");
	qemu_argv_free(argv);
}

static void
test_limits(void **state _unused_)
{
	struct vm_launch l = launch();
	char **argv;

	l.cpus = 4;
	l.memory_mb = 8192;
	l.disk_mb = 20480; /* the layer's size is its blank disk's: not on the line */
	argv = build(&tcg, &l);
	assert_string_equal(after(argv, "-m"), "8192");
	/* the RAM is the backend "mem", of the same size */
	assert_string_equal(after(argv, "-object"), "memory-backend-ram,id=mem,size=8192M");
	assert_string_equal(after(argv, "-smp"), "4");
	for (size_t i = 0; argv[i]; i++)
		assert_null(strstr(argv[i], "20480"));
	qemu_argv_free(argv);
}

static void
test_restart_boots_the_same_line_as_start(void **state _unused_)
{
	/* a restart boots the layer the stop kept, chosen before QEMU runs, and may come back in
	 * another slot (another uid): neither shows on the line */
	struct vm_launch start = launch(), restart = launch();
	char **a, **b;

	restart.slot = 7;
	a = build(&tcg, &start);
	b = build(&tcg, &restart);
	assert_int_equal(count(a), count(b));
	for (size_t i = 0; a[i]; i++)
		assert_string_equal(a[i], b[i]);
	qemu_argv_free(a);
	qemu_argv_free(b);
}

/* Every "fd=N", "/proc/self/fd/N" and "/dev/fdset/N" on the line is one of enum qemu_fd, and
 * with a network the line names each of them but the log (QEMU's stderr). */
static void
test_descriptors_are_the_enum(void **state _unused_)
{
	static const char *const marks[] = { "fd=", "fd:", "/proc/self/fd/", "/dev/fdset/",
		                             "set=" };
	bool named[QEMU_FD_END] = { false };
	struct vm_launch l = launch();
	char **argv;

	assert_int_equal(QEMU_FD_KERNEL, 3);
	struct qemu_machine m = kvm;

	assert_int_equal(QEMU_FD_COUNT, 12);
	assert_int_equal(QEMU_FD_LOG, QEMU_FD_END - 1);
	with_net(&l);
	m.incoming = true;
	m.ram_file = true; /* a template's clone: the RAM file too */
	argv = build(&m, &l);
	for (size_t i = 0; argv[i]; i++)
		for (size_t k = 0; k < ARRAY_SIZE(marks); k++)
			for (const char *p = strstr(argv[i], marks[k]); p;
			     p = strstr(p + 1, marks[k])) {
				unsigned long fd = strtoul(p + strlen(marks[k]), NULL, 10);
				assert_true(fd >= QEMU_FD_KERNEL && fd < QEMU_FD_LOG);
				named[fd] = true;
			}
	for (int fd = QEMU_FD_KERNEL; fd < QEMU_FD_LOG; fd++)
		assert_true(named[fd]);
	assert_false(named[QEMU_FD_LOG]);
	qemu_argv_free(argv);
}

/* A resume or a fork: the same line as a boot, plus the stream to restore, before -sandbox. */
static void
test_incoming_restores_the_stream(void **state _unused_)
{
	struct qemu_machine m = tcg;
	struct vm_launch l = launch();
	char **boot, **restore;
	size_t n;

	boot = build(&tcg, &l);
	m.incoming = true;
	restore = build(&m, &l);
	n = count(boot);
	assert_int_equal(count(restore), n + 2);
	for (size_t i = 0; i < n - 2; i++)
		assert_string_equal(boot[i], restore[i]);
	assert_string_equal(restore[n - 2], "-incoming");
	assert_string_equal(restore[n - 1], "fd:12");
	assert_int_equal(QEMU_FD_INCOMING, 12);
	assert_string_equal(restore[n], "-sandbox");
	assert_null(after(boot, "-incoming"));
	qemu_argv_free(boot);
	qemu_argv_free(restore);
}

/* A template's clone maps its copy of the template's RAM privately and waits for QMP's
 * migrate-incoming; a template maps its RAM file shared, and its network is a tap-less hub
 * port whose address the clones' handshakes replace (none on the kernel's command line). */
static void
test_template_ram_and_network(void **state _unused_)
{
	struct qemu_machine m = tcg;
	struct vm_launch l = launch();
	char **argv;

	m.incoming = true;
	m.ram_file = true;
	m.incoming_defer = true;
	argv = build(&m, &l);
	assert_string_equal(after(argv, "-object"),
	                    "memory-backend-file,id=mem,size=512M,mem-path=/proc/self/fd/13,"
	                    "share=off");
	assert_int_equal(QEMU_FD_RAM, 13);
	assert_string_equal(after(argv, "-incoming"), "defer");
	qemu_argv_free(argv);

	m = tcg;
	m.ram_file = true;
	m.ram_shared = true;
	m.net_hub = true;
	with_net(&l);
	argv = build(&m, &l);
	assert_string_equal(after(argv, "-object"),
	                    "memory-backend-file,id=mem,size=512M,mem-path=/proc/self/fd/13,"
	                    "share=on");
	assert_string_equal(after(argv, "-netdev"), "hubport,id=net0,hubid=0");
	assert_null(strstr(after(argv, "-append"), "sandbox.net="));
	assert_null(after(argv, "-incoming"));
	qemu_argv_free(argv);
}

/* Volumes are drives after the writable layer, in the launch's order (the guest sees vdc,
 * vdd, ...), each over its descriptor from QEMU_FD_END on; a read-only one is read-only at both
 * of its nodes, so no write reaches its file whatever the guest does. */
static void
test_volumes_are_drives_after_the_layer(void **state _unused_)
{
	static const char *const want[] = {
		"virtio-blk-device,drive=upper",
		"-add-fd",
		"fd=15,set=15,opaque=vol0",
		"-blockdev",
		"driver=file,node-name=vol0f,filename=/dev/fdset/15",
		"-blockdev",
		"driver=raw,node-name=vol0,file=vol0f",
		"-device",
		"virtio-blk-device,drive=vol0",
		"-add-fd",
		"fd=16,set=16,opaque=vol1",
		"-blockdev",
		"driver=file,node-name=vol1f,filename=/dev/fdset/16,read-only=on",
		"-blockdev",
		"driver=raw,node-name=vol1,file=vol1f,read-only=on",
		"-device",
		"virtio-blk-device,drive=vol1",
	};
	const struct vm_volume vols[] = {
		{ .name = "data",
		  .file = "/var/lib/sandboxd/volumes/vol_1.ext4",
		  .mount = "/mnt/d" },
		{ .name = "ref",
		  .file = "/var/lib/sandboxd/volumes/vol_2.ext4",
		  .mount = "/sandbox/ref",
		  .read_only = true },
	};
	struct vm_volume many[QEMU_VOLUMES_MAX + 1];
	struct vm_launch l = launch(), bare;
	char **argv = NULL, **plain;
	size_t at = 0;

	assert_int_equal(QEMU_FD_END, 15);
	l.volumes = vols;
	l.nvolumes = ARRAY_SIZE(vols);
	argv = build(&tcg, &l);
	while (argv[at] && !streq(argv[at], want[0]))
		at++;
	assert_non_null(argv[at]);
	for (size_t i = 0; i < ARRAY_SIZE(want); i++)
		assert_string_equal(argv[at + i], want[i]);
	/* nothing else changes, and no host path shows */
	bare = launch();
	plain = build(&tcg, &bare);
	assert_int_equal(count(plain) + ARRAY_SIZE(want) - 1, count(argv));
	for (size_t i = 1; argv[i]; i++)
		assert_null(strstr(argv[i], "/var/lib"));
	qemu_argv_free(plain);
	qemu_argv_free(argv);

	/* no more than the child has room for */
	for (size_t i = 0; i < ARRAY_SIZE(many); i++)
		many[i] = vols[0];
	l.volumes = many;
	l.nvolumes = ARRAY_SIZE(many);
	argv = NULL;
	assert_int_equal(qemu_argv_build(&tcg, &l, &argv), -E2BIG);
	assert_null(argv);
}

static void
test_refuses_an_id_too_short(void **state _unused_)
{
	struct vm_launch l = launch();
	char **argv = NULL;

	l.id = "sbx";
	assert_int_equal(qemu_argv_build(&tcg, &l, &argv), -EINVAL);
	assert_null(argv);
	assert_null(qemu_argv_free(NULL));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcg_without_network_is_the_known_line),
		cmocka_unit_test(test_kvm_with_network),
		cmocka_unit_test(test_tcg_with_network_and_unknown_tsc),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_restart_boots_the_same_line_as_start),
		cmocka_unit_test(test_descriptors_are_the_enum),
		cmocka_unit_test(test_incoming_restores_the_stream),
		cmocka_unit_test(test_volumes_are_drives_after_the_layer),
		cmocka_unit_test(test_template_ram_and_network),
		cmocka_unit_test(test_refuses_an_id_too_short),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
