/* vmlinux.c: see vmlinux.h. The compressed kernel is cut out of the bzImage by its setup
 * header and unpacked by the lz4 tool (a child, see tool.h); the result is written under a
 * temporary name and renamed. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "elf64.h"
#include "tool.h"
#include "util.h"
#include "vmlinux.h"

static void set_error(char **ret, const char *fmt, ...) _printf_(2, 3);

static void
set_error(char **ret, const char *fmt, ...)
{
	va_list ap;

	if (!ret)
		return;
	free(*ret);
	*ret = NULL;
	va_start(ap, fmt);
	if (vasprintf(ret, fmt, ap) < 0)
		*ret = NULL;
	va_end(ap);
}

static uint32_t
get_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Compressed kernel formats by their first bytes, to name the one found when it is not LZ4. */
static const struct {
	const char *name;
	unsigned char magic[6];
	size_t len;
} kernel_formats[] = {
	{ "lz4", { 0x02, 0x21, 0x4c, 0x18 }, 4 },
	{ "gzip", { 0x1f, 0x8b }, 2 },
	{ "xz", { 0xfd, '7', 'z', 'X', 'Z', 0 }, 6 },
	{ "zstd", { 0x28, 0xb5, 0x2f, 0xfd }, 4 },
	{ "bzip2", { 'B', 'Z', 'h' }, 3 },
	{ "lzo", { 0x89, 'L', 'Z', 'O' }, 4 },
	{ "lzma", { 0x5d, 0x00, 0x00 }, 3 },
};

int
bundle_extract_vmlinux(const char *bzimage, const char *out, char **ret_error)
{
	_cleanup_free_ char *tmp = NULL, *err = NULL;
	_cleanup_close_ int payload = -1, fd = -1;
	struct tool t = { .in_fd = -1, .out_fd = -1 };
	const char *format = "an unknown format";
	struct elf64_map m = { 0 };
	uint64_t start, len;
	uint32_t expected;
	struct stat st;
	int r;

	r = elf64_map_file(bzimage, &m);
	if (r < 0) {
		set_error(ret_error, "cannot read '%s': %s", bzimage, strerror(-r));
		return r;
	}
	/* The x86 boot protocol's setup header (Documentation/x86/boot.rst): the compressed
	 * kernel is payload_length bytes at payload_offset after the real-mode setup sectors. */
	if (m.size < 0x250 || memcmp(m.data + 0x202, "HdrS", 4) != 0 ||
	    (m.data[0x206] | m.data[0x207] << 8) < 0x208) {
		set_error(ret_error, "'%s' is not an x86 bzImage (boot protocol 2.08 or later)",
		          bzimage);
		r = -ENOEXEC;
		goto out;
	}
	start = ((uint64_t)(m.data[0x1f1] ? m.data[0x1f1] : 4) + 1) * 512 +
	        get_le32(m.data + 0x248);
	len = get_le32(m.data + 0x24c);
	if (!elf64_in_bounds(start, len, m.size) || len < 16) {
		set_error(ret_error, "'%s': the payload lies outside the file", bzimage);
		r = -ENOEXEC;
		goto out;
	}
	for (size_t i = 0; i < ARRAY_SIZE(kernel_formats); i++)
		if (memcmp(m.data + start, kernel_formats[i].magic, kernel_formats[i].len) == 0) {
			format = kernel_formats[i].name;
			break;
		}
	if (!streq(format, "lz4")) {
		set_error(ret_error,
		          "'%s': the kernel is compressed with %s; setup only unpacks LZ4 kernels "
		          "(Debian's cloud kernel is one)",
		          bzimage, format);
		r = -EPROTONOSUPPORT;
		goto out;
	}
	/* The build appends the uncompressed size (le32) after the LZ4 stream; lz4 would take
	 * it for another block and fail, so it is cut off and used as a check instead. */
	expected = get_le32(m.data + start + len - 4);
	payload = memfd_create("kernel-payload", MFD_CLOEXEC);
	if (payload < 0) {
		r = negative_errno();
		goto out;
	}
	r = write_all(payload, m.data + start, len - 4);
	if (r < 0 || lseek(payload, 0, SEEK_SET) < 0) {
		r = r < 0 ? r : negative_errno();
		goto out;
	}
	elf64_unmap(&m);
	tmp = strdup_printf("%s.tmp-%d", out, (int)getpid());
	if (!tmp) {
		r = -ENOMEM;
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || fchmod(fd, 0644) < 0) {
		r = negative_errno();
		set_error(ret_error, "cannot create '%s': %s", tmp, strerror(-r));
		goto out;
	}
	t.in_fd = payload;
	t.out_fd = fd;
	r = tool_run(&t, (const char *const[]){ "lz4", "-dc", "-q", NULL });
	if (r < 0) {
		err = tool_failure(&t, (const char *const[]){ "lz4", "-dc", "-q", NULL }, r);
		set_error(ret_error, "unpacking the kernel: %s", err ? err : strerror(-r));
		goto out;
	}
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != expected) {
		set_error(ret_error,
		          "unpacking the kernel gave %llu bytes, not the %u it announces",
		          (unsigned long long)st.st_size, expected);
		r = -EBADMSG;
		goto out;
	}
	if (fsync(fd) < 0) {
		r = negative_errno();
		goto out;
	}
	fd = safe_close(fd);
	r = bundle_check_pvh(tmp);
	if (r < 0) {
		set_error(ret_error,
		          "the unpacked kernel is not an x86-64 ELF with a PVH entry note "
		          "(CONFIG_PVH): %s",
		          strerror(-r));
		goto out;
	}
	if (rename(tmp, out) < 0)
		r = negative_errno();
out:
	elf64_unmap(&m);
	tool_done(&t);
	if (r < 0 && tmp)
		(void)unlink(tmp);
	if (r < 0 && ret_error && !*ret_error)
		set_error(ret_error, "%s", strerror(-r));
	return r;
}
