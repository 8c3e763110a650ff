/* fuzz-unpack.c: daemon/images/unpack.c: the input is an image layer (a tar stream, plain or
 * compressed) applied onto a fresh root per run, chown off. Checked: an error always comes with
 * its message, the byte limit holds, no device node appears in the root, and nothing appears
 * beside the root: not in the run's directory, not in the directory of the runs, not in "/".
 * As root the process first moves into a mount namespace of its own where the runs live on a
 * tmpfs and the host's system directories are read-only, so that a regression fails loudly
 * instead of writing to the host (the working directory stays writable for libFuzzer). */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fuzz.h"
#include "unpack.h"
#include "util.h"

#define MAX_BYTES (64u << 20)

static char base[64];
static bool base_mounted;
static long root_entries = -1; /* of "/" */

static const char *const protected_dirs[] = {
	"/etc",  "/usr",  "/bin",  "/sbin", "/lib", "/lib64",
	"/boot", "/root", "/home", "/var",  "/opt",
};

static long
count_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	long n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static void
cleanup_base(void)
{
	if (base_mounted)
		umount2(base, MNT_DETACH);
	rmdir(base);
}

static void
protect_host(void)
{
	if (geteuid() != 0 || unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return;
	base_mounted = mount("tmpfs", base, "tmpfs", 0, "mode=0700") == 0;
	for (size_t i = 0; i < ARRAY_SIZE(protected_dirs); i++) {
		struct stat st;

		if (lstat(protected_dirs[i], &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		if (mount(protected_dirs[i], protected_dirs[i], NULL, MS_BIND | MS_REC, NULL) == 0)
			mount(NULL, protected_dirs[i], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY,
			      NULL);
	}
}

static void
init(void)
{
	snprintf(base, sizeof(base), "/tmp/fuzz-unpack.XXXXXX");
	FUZZ_CHECK(mkdtemp(base));
	atexit(cleanup_base);
	protect_host();
	root_entries = count_entries("/");
}

/* Pre-order: directories opened up so that their contents can go, even without root. */
static int
open_up(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	/* A device node in the root would be a finding. */
	FUZZ_CHECK(!S_ISCHR(st->st_mode) && !S_ISBLK(st->st_mode));
	if (flag == FTW_D)
		chmod(path, 0700);
	else if (flag == FTW_DNR) {
		/* nftw skipped it: open it and walk it now */
		FUZZ_CHECK(chmod(path, 0700) == 0);
		FUZZ_CHECK(nftw(path, open_up, 16, FTW_PHYS) == 0);
	}
	return 0;
}

static int
remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	FUZZ_CHECK(remove(path) == 0);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct unpack_opts o = { .chown = false, .max_bytes = MAX_BYTES };
	struct unpack_stats st = { 0 };
	char run[96], root[128];
	char *err = NULL;
	int layer, root_fd, r;

	if (!*base)
		init();
	snprintf(run, sizeof(run), "%s/run.XXXXXX", base);
	FUZZ_CHECK(mkdtemp(run));
	snprintf(root, sizeof(root), "%s/root", run);
	FUZZ_CHECK(mkdir(root, 0755) == 0);
	root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	FUZZ_CHECK(root_fd >= 0);
	layer = memfd_create("layer", MFD_CLOEXEC);
	FUZZ_CHECK(layer >= 0);
	FUZZ_CHECK(write(layer, data, size) == (ssize_t)size);
	FUZZ_CHECK(lseek(layer, 0, SEEK_SET) == 0);

	r = unpack_layer(root_fd, layer, &o, &st, &err);
	/* The root is on a writable tmpfs: a read-only file system is a protected host directory
	 * that a write reached. */
	FUZZ_CHECK(r != -EROFS);
	if (r < 0)
		FUZZ_CHECK(err || r == -ENOMEM);
	else
		FUZZ_CHECK(!err);
	FUZZ_CHECK(st.bytes <= MAX_BYTES);
	free(err);
	close(layer);
	close(root_fd);

	/* Nothing beside the root, nothing beside the run, nothing new in "/". */
	FUZZ_CHECK(count_entries(run) == 1);
	FUZZ_CHECK(count_entries(base) == 1);
	FUZZ_CHECK(count_entries("/") == root_entries);

	FUZZ_CHECK(nftw(root, open_up, 16, FTW_PHYS) == 0);
	FUZZ_CHECK(nftw(run, remove_one, 16, FTW_PHYS | FTW_DEPTH) == 0);
	return 0;
}
