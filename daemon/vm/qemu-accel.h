/* qemu-accel.h: choosing QEMU's accelerator (--accel auto|kvm|tcg). */
#pragma once

#include <stddef.h>

/* want: "auto" (or NULL), "kvm" or "tcg". With auto, KVM when /dev/kvm opens and a probe boot
 * of kernel and initrd under it reaches the guest agent (blocking, at startup; the answer is
 * cached in STATE_DIR/vm/accel for this host kernel and guest kernel), else TCG. Writes "kvm"
 * or "tcg" into ret. 0, or -EINVAL (logged) for another want. */
int qemu_accel_pick(const char *want, const char *qemu_bin, const char *kernel, const char *initrd,
                    const char *state_dir, char *ret, size_t size);
