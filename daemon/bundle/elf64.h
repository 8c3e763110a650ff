/* elf64.h: reading the x86-64 ELF files of the guest bundle: the kernel's PVH entry note and a
 * module's sections, from a read-only mapping. The files come out of a downloaded package, so
 * every offset is checked against the file's length. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A file mapped read-only. */
struct elf64_map {
	const unsigned char *data;
	size_t size;
};

/* Maps path, a regular file that is not empty (-ENOEXEC when it is something else); other
 * -errno when it cannot be opened or mapped. Undone by elf64_unmap(). */
int elf64_map_file(const char *path, struct elf64_map *ret);
/* Unmaps m; does nothing to a zeroed or already unmapped one. */
void elf64_unmap(struct elf64_map *m);

/* Whether [off, off + len) lies inside size bytes (no overflow). */
bool elf64_in_bounds(uint64_t off, uint64_t len, size_t size);

/* The contents of section name in a relocatable or executable x86-64 ELF64, borrowed from m.
 * -ENOEXEC when m is no such ELF or the section lies outside it, -ENOENT when there is none. */
int elf64_section(const struct elf64_map *m, const char *name, const unsigned char **ret,
                  size_t *ret_len);

/* 0 when path is an x86-64 ELF with the Xen PVH entry note (type 0x12, name "Xen");
 * -ENOEXEC when it is not, other -errno when it cannot be read. */
int bundle_check_pvh(const char *path);
