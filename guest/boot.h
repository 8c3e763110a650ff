/* boot.h: what sandbox-guestd does as a VM's init (PID 1) and nowhere else: the early mounts
 * and kernel modules, finding the virtio port, per-HELLO clock, entropy, hostname and the rest
 * of the guest's identity (identity.c), the one-time switch into the sandbox root (overlayfs
 * over the image disk), and the power-off. */
#pragma once

#include "macro.h"

struct agent;
struct request_hello;

/* Mounts /dev, /proc, /sys, /dev/pts, /dev/shm, /run and /tmp, puts the console on fds 0-2
 * and loads the modules listed in /lib/modules/order. Failures are logged, not fatal. */
void boot_early(void);

/* Waits for the virtio port named "agent" and returns its device node (caller frees). Keeps
 * waiting (and logging) until it appears: PID 1 has nothing else to do. */
int boot_find_port(char **ret_dev);

/* Everything a HELLO asks of the machine: the clock, entropy, hostname, network, MAC, the
 * sandbox user's ids and home, (once, when both disks are named) the root, and with the root
 * /etc/machine-id and the volumes (identity.h). Returns 0, or -errno with a message (caller
 * frees) when the root could not be set up. */
int boot_hello(struct agent *a, const struct request_hello *h, char **ret_msg);

/* Syncs, makes the writable layer read-only and ends the VM. Processes must be gone. */
_noreturn_ void boot_poweroff(struct agent *a);
