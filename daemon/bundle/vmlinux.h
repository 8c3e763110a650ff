/* vmlinux.h: the guest kernel as QEMU's microvm boots it, without firmware: the uncompressed
 * ELF, unpacked from the bzImage Debian ships. */
#pragma once

/* Unpacks the uncompressed kernel from a bzImage (LZ4 payload, via the lz4 tool) into out
 * (atomically) and checks it with bundle_check_pvh(). -errno; *ret_error (optional, caller
 * frees) says why in words. */
int bundle_extract_vmlinux(const char *bzimage, const char *out, char **ret_error);
