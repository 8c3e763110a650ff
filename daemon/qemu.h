/* qemu.h: the microVM backend: one QEMU `microvm` per sandbox, booting the guest kernel
 * bundle with sandbox-guestd as its init, under its own unprivileged uid, seccomp
 * (-sandbox on), a cgroup, and with no path into the state directory: every file it needs is
 * opened by sandboxd and handed over as a file descriptor. */
#pragma once

#include "backend.h"

/* Options of the backend (from sandboxd's command line). */
struct qemu_opts {
	const char *accel;  /* "auto", "kvm" or "tcg" */
	const char *kernel; /* operator's vmlinux, or NULL for the bundle's */
	const char *initrd; /* operator's initramfs, or NULL */
	const char *agent;  /* sandbox-guestd, or NULL: beside sandboxd */
	unsigned boot_timeout_secs;
};

int qemu_backend_create(struct sandboxd *d, struct backend **ret);
