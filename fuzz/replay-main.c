/* replay-main.c: main() for builds without libFuzzer. Runs LLVMFuzzerTestOneInput over every
 * file named on the command line and every file under the named directories (in name order),
 * so CTest replays the corpora under ASan+UBSan in ordinary CI. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "fuzz.h"
#include "util.h"

#define INPUT_MAX (16u << 20)

static unsigned replayed;

static int
replay_file(const char *path)
{
	_cleanup_free_ char *text = NULL;
	_cleanup_free_ uint8_t *exact = NULL;
	size_t len;
	int r;

	r = read_file_max(path, INPUT_MAX, &text, &len);
	if (r < 0) {
		fprintf(stderr, "replay: cannot read '%s': %s\n", path, strerror(-r));
		return r;
	}
	/* an allocation of exactly len bytes, so the sanitizer sees a read past the input */
	exact = malloc(len ? len : 1);
	if (!exact)
		return -ENOMEM;
	memcpy(exact, text, len);
	fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
	LLVMFuzzerTestOneInput(exact, len);
	replayed++;
	return 0;
}

static int
name_cmp(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int
replay_path(const char *path)
{
	struct dirent **names;
	struct stat st;
	int n, r = 0;

	if (stat(path, &st) < 0) {
		fprintf(stderr, "replay: '%s': %s\n", path, strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode))
		return replay_file(path);
	n = scandir(path, &names, NULL, name_cmp);
	if (n < 0) {
		fprintf(stderr, "replay: cannot list '%s': %s\n", path, strerror(errno));
		return -errno;
	}
	for (int i = 0; i < n; i++) {
		_cleanup_free_ char *child = NULL;

		if (names[i]->d_name[0] != '.') {
			child = strdup_printf("%s/%s", path, names[i]->d_name);
			if (!child || replay_path(child) < 0)
				r = -EIO;
		}
		free(names[i]);
	}
	free(names);
	return r;
}

int
main(int argc, char **argv)
{
	int r = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++)
		if (replay_path(argv[i]) < 0)
			r = 1;
	if (replayed == 0) {
		fprintf(stderr, "replay: no inputs found\n");
		return 1;
	}
	fprintf(stderr, "replay: %u inputs replayed%s\n", replayed,
	        r ? "; some paths could not be read" : ", no findings");
	return r;
}
