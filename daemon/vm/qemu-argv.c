/* qemu-argv.c: QEMU's command line for one microVM; see qemu-argv.h. Pure: it allocates the
 * strings and nothing else, so test-qemu-argv can check every launch it is given. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include "qemu-argv.h"
#include "util.h"

const char qemu_cmdline_base[] =
        "console=ttyS0 quiet panic=-1 reboot=t tsc=reliable cryptomgr.notests init_on_alloc=0 "
        "initcall_blacklist=crypto_kdf108_init,init_kprobe_trace,load_system_certificate_list,"
        "cubictcp_register";

/* The array under construction; the first allocation failure sticks. */
struct args {
	char **v;
	size_t n, cap;
	bool oom;
};

static void
add_owned(struct args *a, char *s)
{
	if (!s || a->oom) {
		free(s);
		a->oom = true;
		return;
	}
	if (a->n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		char **v = realloc(a->v, cap * sizeof(*v));
		if (!v) {
			free(s);
			a->oom = true;
			return;
		}
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

static void
add(struct args *a, const char *s)
{
	add_owned(a, strdup(s));
}

static void addf(struct args *a, const char *fmt, ...) _printf_(2, 3);

static void
addf(struct args *a, const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	add_owned(a, s);
}

/* The machine, its limits, and what it boots: the kernel, the initramfs and the kernel's
 * command line, which carries the guest's link when it has one. */
static void
add_machine(struct args *a, const struct qemu_machine *m, const struct vm_launch *l)
{
	bool kvm = streq(m->accel, "kvm");
	char tsc[32] = "", net[64] = "";

	add(a, m->qemu_bin);
	add(a, "-M");
	/* the guest's RAM is the memory backend "mem" (a template's clone maps a file there
	 * instead), so that a migration stream of one restores onto the other */
	add(a, "microvm,x-option-roms=off,pit=off,pic=off,rtc=on,memory-backend=mem");
	add(a, "-accel");
	add(a, kvm ? "kvm" : "tcg,tb-size=" QEMU_TCG_TB_MB);
	add(a, "-cpu");
	add(a, kvm ? "host" : "max");
	add(a, "-m");
	addf(a, "%u", l->memory_mb);
	add(a, "-object");
	if (m->ram_file)
		addf(a, "memory-backend-file,id=mem,size=%uM,mem-path=/proc/self/fd/%d,share=%s",
		     l->memory_mb, QEMU_FD_RAM, m->ram_shared ? "on" : "off");
	else
		addf(a, "memory-backend-ram,id=mem,size=%uM", l->memory_mb);
	add(a, "-smp");
	addf(a, "%u", l->cpus);
	add(a, "-nodefaults");
	add(a, "-no-user-config");
	add(a, "-display");
	add(a, "none");
	add(a, "-no-reboot");
	/* a saved VM (paused for its migration) runs at once where it is restored: without the
	 * source's run state in the stream, -incoming starts the guest once it is loaded */
	add(a, "-global");
	add(a, "migration.store-global-state=off");
	add(a, "-name");
	addf(a, "%s,process=qemu-sbx-%.6s", l->id, l->id + 4);
	add(a, "-kernel");
	addf(a, "/proc/self/fd/%d", QEMU_FD_KERNEL);
	add(a, "-initrd");
	addf(a, "/proc/self/fd/%d", QEMU_FD_INITRD);
	add(a, "-append");
	if (streq(m->accel, "tcg") && m->tsc_khz)
		snprintf(tsc, sizeof(tsc), " tsc_early_khz=%u", m->tsc_khz);
	if (l->has_net && !m->net_hub) {
		char g[INET_ADDRSTRLEN], h[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &l->net.guest_addr, g, sizeof(g));
		inet_ntop(AF_INET, &l->net.host_addr, h, sizeof(h));
		/* sandbox-guestd configures its interface from this */
		snprintf(net, sizeof(net), " sandbox.net=%s/30,%s", g, h);
	}
	addf(a, "%s%s%s", qemu_cmdline_base, tsc, net);
}

/* The agent's port, the monitor and the serial console. */
static void
add_channels(struct args *a)
{
	add(a, "-chardev");
	addf(a, "socket,id=ag,fd=%d,server=on,wait=off", QEMU_FD_AGENT);
	add(a, "-device");
	add(a, "virtio-serial-device");
	add(a, "-device");
	add(a, "virtserialport,chardev=ag,name=agent");
	add(a, "-chardev");
	addf(a, "socket,id=qmp,fd=%d,server=on,wait=off", QEMU_FD_QMP);
	add(a, "-mon");
	add(a, "chardev=qmp,mode=control");
	add(a, "-add-fd");
	addf(a, "fd=%d,set=%d", QEMU_FD_CONSOLE, QEMU_FD_CONSOLE);
	add(a, "-chardev");
	addf(a, "file,id=con,path=/dev/fdset/%d", QEMU_FD_CONSOLE);
	add(a, "-serial");
	add(a, "chardev:con");
}

/* A descriptor QEMU is passed (fd) as the file node "<name>f" over /dev/fdset/<fd>. */
static void
add_fd_file(struct args *a, int fd, const char *name, bool read_only)
{
	add(a, "-add-fd");
	addf(a, "fd=%d,set=%d,opaque=%s", fd, fd, name);
	add(a, "-blockdev");
	addf(a, "driver=file,node-name=%sf,filename=/dev/fdset/%d%s", name, fd,
	     read_only ? ",read-only=on" : "");
}

/* vda, the image's disk, read-only; vdb, the writable layer over the blank disk. */
static void
add_disks(struct args *a)
{
	add_fd_file(a, QEMU_FD_ROOT, "root", true);
	add(a, "-blockdev");
	add(a, "driver=raw,node-name=root,file=rootf,read-only=on");
	add(a, "-device");
	add(a, "virtio-blk-device,drive=root");
	add_fd_file(a, QEMU_FD_BLANK, "blank", true);
	add(a, "-blockdev");
	add(a, "driver=raw,node-name=blank,file=blankf,read-only=on");
	add_fd_file(a, QEMU_FD_UPPER, "upper", false);
	add(a, "-blockdev");
	add(a, "driver=qcow2,node-name=upper,file=upperf,backing=blank");
	add(a, "-device");
	add(a, "virtio-blk-device,drive=upper");
}

/* The launch's volumes, each a raw drive after the writable layer (vdc, vdd, ...): a
 * read-only one is read-only at both nodes, so no write reaches the file whatever the guest
 * does. */
static void
add_volumes(struct args *a, const struct vm_launch *l)
{
	for (size_t i = 0; i < l->nvolumes; i++) {
		bool ro = l->volumes[i].read_only;
		char name[32];

		snprintf(name, sizeof(name), "vol%u", (unsigned)i);
		add_fd_file(a, QEMU_FD_END + (int)i, name, ro);
		add(a, "-blockdev");
		addf(a, "driver=raw,node-name=%s,file=%sf%s", name, name,
		     ro ? ",read-only=on" : "");
		add(a, "-device");
		addf(a, "virtio-blk-device,drive=%s", name);
	}
}

int
qemu_argv_build(const struct qemu_machine *m, const struct vm_launch *l, char ***ret_argv)
{
	struct args a = { 0 };

	if (strlen(l->id) < 4)
		return -EINVAL; /* "sbx_" and the rest */
	if (l->nvolumes > QEMU_VOLUMES_MAX)
		return -E2BIG;
	add_machine(&a, m, l);
	add_channels(&a);
	add_disks(&a);
	add_volumes(&a, l);
	if (l->has_net) {
		/* the MAC is the guest's address after 52:54 */
		uint32_t g = ntohl(l->net.guest_addr);
		add(&a, "-netdev");
		if (m->net_hub)
			add(&a, "hubport,id=net0,hubid=0");
		else
			addf(&a, "tap,id=net0,fd=%d", QEMU_FD_TAP);
		add(&a, "-device");
		addf(&a, "virtio-net-device,netdev=net0,mac=52:54:%02x:%02x:%02x:%02x", g >> 24,
		     (g >> 16) & 0xff, (g >> 8) & 0xff, g & 0xff);
	}
	if (m->incoming_defer) {
		add(&a, "-incoming");
		add(&a, "defer");
	} else if (m->incoming) {
		/* restored from the migration stream at QEMU_FD_INCOMING rather than booted */
		add(&a, "-incoming");
		addf(&a, "fd:%d", QEMU_FD_INCOMING);
	}
	add(&a, "-sandbox");
	add(&a, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	if (a.oom) {
		qemu_argv_free(a.v);
		return -ENOMEM;
	}
	*ret_argv = a.v;
	return 0;
}

char **
qemu_argv_free(char **argv)
{
	if (argv)
		for (char **p = argv; *p; p++)
			free(*p);
	free(argv);
	return NULL;
}
