/* qemu-argv.h: the command line of a sandbox's QEMU, built from its launch with no side
 * effects (nothing is opened, nothing runs), so that the tests can read it. QEMU is handed
 * every file it uses as a descriptor at a fixed number: enum qemu_fd says which, for the
 * command line that names them and for the child that places them before it executes QEMU. */
#pragma once

#include "backend.h"

/* The descriptors QEMU starts with, beyond stdin, stdout and stderr. */
enum qemu_fd {
	QEMU_FD_KERNEL = 3, /* the guest kernel (-kernel /proc/self/fd/N) */
	QEMU_FD_INITRD,     /* the agent's initramfs */
	QEMU_FD_AGENT,      /* agent.sock, listening: the guest agent's virtio-serial port */
	QEMU_FD_QMP,        /* qmp.sock, listening: the monitor */
	QEMU_FD_CONSOLE,    /* console.log: the guest's serial console */
	QEMU_FD_ROOT,       /* the image's root disk, read-only (vda) */
	QEMU_FD_BLANK,      /* the blank ext4 the writable layer is backed by, read-only */
	QEMU_FD_UPPER,      /* upper.qcow2, the writable layer (vdb) */
	QEMU_FD_TAP,        /* the tap with a network, else /dev/null */
	QEMU_FD_INCOMING,   /* a saved migration stream to restore (-incoming), else /dev/null */
	QEMU_FD_RAM,        /* a template's or a template clone's guest RAM file, else /dev/null */
	QEMU_FD_LOG,        /* qemu.log, which its stderr also goes to */
	QEMU_FD_END,        /* the first number that is not one of them */
};
#define QEMU_FD_COUNT (QEMU_FD_END - QEMU_FD_KERNEL)
/* A launch's volumes follow at QEMU_FD_END + i, one each (the file, opened read-only for a
 * read-only volume), attached as drives after the writable layer (vdc, vdd, ...). */
#define QEMU_VOLUMES_MAX 8

/* Under TCG, the size of QEMU's translation cache in MiB (-accel tcg,tb-size=N). QEMU's own
 * default is 1 GiB, which a long session fills; this keeps QEMU within the memory its cgroup
 * gives it beyond the guest's RAM (VMM_OVERHEAD_MB in qemu.c). */
#define QEMU_TCG_TB_MB "128"

/* What the backend puts on every command line. */
struct qemu_machine {
	const char *qemu_bin; /* argv[0] */
	const char *accel;    /* "kvm" or "tcg" */
	unsigned tsc_khz;     /* under TCG, the host's TSC frequency for the guest; 0: unknown */
	bool incoming;        /* restore the stream at QEMU_FD_INCOMING (a resume, a fork) */
	/* templates (qemu-template.c): the guest's RAM is the file at QEMU_FD_RAM, mapped shared
	 * (a template: its pages stay in the file, the stream leaves them out) or privately (a
	 * clone); a clone waits for QMP migrate-incoming (-incoming defer), which comes after
	 * x-ignore-shared is set; net_hub: has_net without a tap (a template's virtio-net) */
	bool ram_file;
	bool ram_shared;
	bool incoming_defer;
	bool net_hub;
};

/* The kernel command line every guest boots with (the KVM check's included). */
extern const char qemu_cmdline_base[];

/* Builds the command line of QEMU for launch l on machine m: a new NULL-terminated array of
 * new strings (free it with qemu_argv_free()) in *ret_argv. Only the launch's id, limits and
 * network show in it; files are named by their enum qemu_fd numbers (volumes' from
 * QEMU_FD_END). -ENOMEM, -E2BIG (more than QEMU_VOLUMES_MAX volumes). */
int qemu_argv_build(const struct qemu_machine *m, const struct vm_launch *l, char ***ret_argv);
/* Frees what qemu_argv_build() made. NULL-safe; returns NULL. */
char **qemu_argv_free(char **argv);
