/* elf64.c: see elf64.h. Every offset and size read from a file is checked against the file's
 * length before it is used: the kernel and the modules come out of a downloaded package. */
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "elf64.h"
#include "util.h"

void
elf64_unmap(struct elf64_map *m)
{
	if (m->data)
		munmap((void *)m->data, m->size);
	m->data = NULL;
}

int
elf64_map_file(const char *path, struct elf64_map *ret)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	void *p;

	if (fd < 0)
		return negative_errno();
	if (fstat(fd, &st) < 0)
		return negative_errno();
	if (!S_ISREG(st.st_mode) || st.st_size <= 0)
		return -ENOEXEC;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return negative_errno();
	ret->data = p;
	ret->size = (size_t)st.st_size;
	return 0;
}

bool
elf64_in_bounds(uint64_t off, uint64_t len, size_t size)
{
	return off <= size && len <= size - off;
}

static int
elf64_header(const struct elf64_map *m, Elf64_Ehdr *ret)
{
	if (m->size < sizeof(*ret))
		return -ENOEXEC;
	memcpy(ret, m->data, sizeof(*ret));
	if (memcmp(ret->e_ident, ELFMAG, SELFMAG) != 0 || ret->e_ident[EI_CLASS] != ELFCLASS64 ||
	    ret->e_ident[EI_DATA] != ELFDATA2LSB || ret->e_machine != EM_X86_64)
		return -ENOEXEC;
	return 0;
}

static bool
notes_have(const unsigned char *p, size_t len, const char *name, uint32_t type)
{
	size_t namesz = strlen(name) + 1, off = 0;

	while (len - off >= sizeof(Elf64_Nhdr)) {
		Elf64_Nhdr nh;
		uint64_t nlen, dlen;

		memcpy(&nh, p + off, sizeof(nh));
		off += sizeof(nh);
		nlen = ((uint64_t)nh.n_namesz + 3) & ~(uint64_t)3;
		dlen = ((uint64_t)nh.n_descsz + 3) & ~(uint64_t)3;
		if (!elf64_in_bounds(off, nlen, len))
			return false;
		if (nh.n_type == type && nh.n_namesz == namesz &&
		    memcmp(p + off, name, namesz) == 0)
			return true;
		off += nlen;
		if (!elf64_in_bounds(off, dlen, len))
			return false;
		off += dlen;
	}
	return false;
}

int
bundle_check_pvh(const char *path)
{
	struct elf64_map m = { 0 };
	Elf64_Ehdr eh;
	int r;

	r = elf64_map_file(path, &m);
	if (r < 0)
		return r;
	r = elf64_header(&m, &eh);
	if (r == 0 && (eh.e_phentsize < sizeof(Elf64_Phdr) ||
	               !elf64_in_bounds(eh.e_phoff, (uint64_t)eh.e_phnum * eh.e_phentsize, m.size)))
		r = -ENOEXEC;
	for (unsigned i = 0; r == 0 && i < eh.e_phnum; i++) {
		Elf64_Phdr ph;

		memcpy(&ph, m.data + eh.e_phoff + (uint64_t)i * eh.e_phentsize, sizeof(ph));
		if (ph.p_type != PT_NOTE || !elf64_in_bounds(ph.p_offset, ph.p_filesz, m.size))
			continue;
		/* XEN_ELFNOTE_PHYS32_ENTRY: the 32-bit PVH entry point QEMU boots through. */
		if (notes_have(m.data + ph.p_offset, ph.p_filesz, "Xen", 0x12)) {
			elf64_unmap(&m);
			return 0;
		}
	}
	elf64_unmap(&m);
	return r < 0 ? r : -ENOEXEC;
}

int
elf64_section(const struct elf64_map *m, const char *name, const unsigned char **ret,
              size_t *ret_len)
{
	Elf64_Ehdr eh;
	Elf64_Shdr strs;
	int r;

	r = elf64_header(m, &eh);
	if (r < 0)
		return r;
	if (eh.e_shentsize < sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum ||
	    !elf64_in_bounds(eh.e_shoff, (uint64_t)eh.e_shnum * eh.e_shentsize, m->size))
		return -ENOEXEC;
	memcpy(&strs, m->data + eh.e_shoff + (uint64_t)eh.e_shstrndx * eh.e_shentsize,
	       sizeof(strs));
	if (!elf64_in_bounds(strs.sh_offset, strs.sh_size, m->size))
		return -ENOEXEC;
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		const char *sn;

		memcpy(&sh, m->data + eh.e_shoff + (uint64_t)i * eh.e_shentsize, sizeof(sh));
		if (sh.sh_name >= strs.sh_size)
			continue;
		sn = (const char *)m->data + strs.sh_offset + sh.sh_name;
		if (strnlen(sn, strs.sh_size - sh.sh_name) == strs.sh_size - sh.sh_name)
			continue;
		if (!streq(sn, name) || sh.sh_type == SHT_NOBITS)
			continue;
		if (!elf64_in_bounds(sh.sh_offset, sh.sh_size, m->size))
			return -ENOEXEC;
		*ret = m->data + sh.sh_offset;
		*ret_len = sh.sh_size;
		return 0;
	}
	return -ENOENT;
}
