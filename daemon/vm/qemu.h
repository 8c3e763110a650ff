/* qemu.h: the microVM backend: one QEMU `microvm` per sandbox, booting the guest kernel
 * bundle with sandbox-guestd as its init, under its own unprivileged uid, seccomp
 * (-sandbox on), a cgroup, and with no path into the state directory: every file it needs is
 * opened by sandboxd and handed over as a file descriptor. */
#pragma once

#include "backend.h"

int qemu_backend_create(const struct backend_config *cfg, struct backend **ret);
