/* cmd-files.c: "cp": one file between this machine (or stdin and stdout) and a sandbox, through
 * GET and PUT .../files. Only the bytes travel: no mode, owner or time. A file is at most
 * 64 MiB, the server's limit, and is held in memory on the way. "ls": a directory in a
 * sandbox, through GET .../dirs. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "client.h"
#include "output.h"
#include "table.h"
#include "util.h"

#define FILE_MAX (64u << 20) /* the server's limit for a file */

/* One side of a copy: SBX:/path in a sandbox, a local path, or "-". */
struct side {
	char *ref;        /* the sandbox; NULL for a local side */
	const char *path; /* the path in the sandbox or here */
	const char *arg;  /* as the user wrote it, for messages */
};

static void
side_done(struct side *s)
{
	free(s->ref);
}

/* "REF:/abs/path" is a sandbox's file (a REF never holds '/'); anything else is local (write
 * ./a:b for a local name with a colon). 0, or an exit code. */
static int
parse_side(struct cli *cli, const char *arg, struct side *ret)
{
	const char *colon = strchr(arg, ':');

	*ret = (struct side){ .path = arg, .arg = arg };
	if (!colon || colon == arg || memchr(arg, '/', (size_t)(colon - arg)))
		return 0;
	if (colon[1] != '/')
		return cli_usage_error(cli, "'%s': a path in a sandbox is absolute, as in %.*s:/%s",
		                       arg, (int)(colon - arg), arg, colon + 1);
	ret->ref = strndup(arg, (size_t)(colon - arg));
	ret->path = colon + 1;
	return ret->ref ? 0 : cli_oom();
}

/* "/v1/sandboxes/REF/<what>?path=<escaped path>" */
static char *
file_path(const char *ref, const char *what, const char *path)
{
	_cleanup_free_ char *esc = client_escape(path), *suffix = NULL;

	suffix = esc ? strdup_printf("/%s?path=%s", what, esc) : NULL;
	return suffix ? cli_sandbox_path(ref, suffix) : NULL;
}

/* Whether path is a directory in sandbox ref (asked after a refusal, to explain it). */
static bool
remote_is_dir(struct cli *cli, const char *ref, const char *path)
{
	_cleanup_(client_response_done) struct client_response resp = { 0 };
	_cleanup_free_ char *url = file_path(ref, "dirs", path);
	struct client *c;

	return url && cli_client(cli, &c) == 0 && client_request(c, "GET", url, NULL, &resp) == 0 &&
	       resp.status == 200;
}

static int
read_all(int fd, struct buf *b)
{
	char chunk[65536];

	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		if (buf_append(b, chunk, (size_t)n) < 0)
			return -EFBIG;
	}
}

/* The last component of a path, for copying into a directory; NULL when there is none. */
static char *
base_name(const char *path)
{
	_cleanup_free_ char *copy = strdup(path);
	const char *b;

	if (!copy)
		return NULL;
	b = basename(copy);
	if (!*b || streq(b, "/") || streq(b, ".") || streq(b, ".."))
		return NULL;
	return strdup(b);
}

static int
local_error(const char *what, const char *path, int err)
{
	_cleanup_free_ char *safe = termsafe_dup(path);

	output_error("cannot %s '%s': %s", what, safe ? safe : "?", strerror(err));
	return CLI_EXIT_FAILED;
}

/* A directory as the source: refused (exit 2, as for a bad argument). */
static int
not_a_file(const char *arg)
{
	_cleanup_free_ char *safe = termsafe_dup(arg);

	output_error("'%s' is a directory; cp copies single files only", safe ? safe : "?");
	return CLI_EXIT_USAGE;
}

/* ---- sandbox to here ---- */

static int
download(struct cli *cli, const struct side *src, const struct side *dst)
{
	_cleanup_(client_response_done) struct client_response resp = { 0 };
	_cleanup_free_ char *url = file_path(src->ref, "files", src->path), *into = NULL;
	_cleanup_free_ char *safe = termsafe_dup(src->arg);
	_cleanup_close_ int fd = -1;
	const char *target = dst->path;
	struct client *c;
	struct stat st;
	int r;

	if (!url || !safe)
		return cli_oom();
	r = cli_client(cli, &c);
	if (r != 0)
		return r;
	r = client_request_bytes(c, "GET", url, NULL, 0, &resp);
	if (r < 0)
		return cli_fail_transport(cli, r);
	if (resp.status == 400 && remote_is_dir(cli, src->ref, src->path))
		return not_a_file(src->arg);
	if (resp.status < 200 || resp.status > 299)
		return cli_fail_status(cli, &resp);
	if (streq(dst->path, "-")) {
		r = write_all(STDOUT_FILENO, buf_head(&resp.body) ?: "", buf_avail(&resp.body));
		return r < 0 ? local_error("write to", "stdout", -r) : CLI_EXIT_OK;
	}
	/* into an existing directory: under the file's own name, as cp does */
	if (stat(target, &st) == 0 && S_ISDIR(st.st_mode)) {
		_cleanup_free_ char *name = base_name(src->path);
		into = name ? strdup_printf("%s/%s", target, name) : NULL;
		if (!into)
			return cli_oom();
		target = into;
	}
	/* the file is opened only now: a failed download leaves what was there */
	fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
	if (fd < 0)
		return local_error("write", target, errno);
	r = write_all(fd, buf_head(&resp.body) ?: "", buf_avail(&resp.body));
	if (r == 0 && close(TAKE_FD(fd)) < 0)
		r = -errno;
	return r < 0 ? local_error("write", target, -r) : CLI_EXIT_OK;
}

/* ---- here to a sandbox ---- */

static int
put(struct cli *cli, const char *ref, const char *path, const struct buf *data,
    struct client_response *resp)
{
	_cleanup_free_ char *url = file_path(ref, "files", path);
	struct client *c;
	int r;

	if (!url)
		return cli_oom();
	r = cli_client(cli, &c);
	if (r != 0)
		return r;
	r = client_request_bytes(c, "PUT", url, buf_head(data) ?: "", buf_avail(data), resp);
	return r < 0 ? cli_fail_transport(cli, r) : 0;
}

static int
upload(struct cli *cli, const struct side *src, const struct side *dst)
{
	_cleanup_(client_response_done) struct client_response resp = { 0 };
	_cleanup_buf_ struct buf data = BUF_INIT(FILE_MAX);
	_cleanup_free_ char *name = NULL, *into = NULL, *safe = termsafe_dup(dst->arg);
	_cleanup_close_ int fd = -1;
	bool from_stdin = streq(src->path, "-");
	const char *target = dst->path;
	struct stat st;
	int r;

	if (!safe)
		return cli_oom();
	if (!from_stdin) {
		fd = open(src->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (fd < 0)
			return local_error("read", src->path, errno);
		if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
			return not_a_file(src->path);
		name = base_name(src->path);
	}
	r = read_all(from_stdin ? STDIN_FILENO : fd, &data);
	if (r == -EFBIG) {
		output_error("'%s' is larger than %u MiB, the most a file in a sandbox can be "
		             "written at once",
		             from_stdin ? "stdin" : src->path, FILE_MAX >> 20);
		return CLI_EXIT_FAILED;
	}
	if (r < 0)
		return local_error("read", from_stdin ? "stdin" : src->path, -r);
	/* SBX:/dir/ names a directory: the file goes in under its own name */
	if (target[strlen(target) - 1] == '/') {
		if (!name)
			return cli_usage_error(cli, "'%s' is a directory; name the file to write",
			                       safe);
		into = strdup_printf("%s%s", target, name);
		if (!into)
			return cli_oom();
		target = into;
	}
	r = put(cli, dst->ref, target, &data, &resp);
	if (r != 0)
		return r;
	if (resp.status == 400 && !into && remote_is_dir(cli, dst->ref, target)) {
		/* an existing directory: the same */
		if (!name)
			return cli_usage_error(cli, "'%s' is a directory; name the file to write",
			                       safe);
		into = strdup_printf("%s/%s", target, name);
		if (!into)
			return cli_oom();
		client_response_done(&resp);
		r = put(cli, dst->ref, into, &data, &resp);
		if (r != 0)
			return r;
	}
	if (resp.status < 200 || resp.status > 299)
		return cli_fail_status(cli, &resp);
	return CLI_EXIT_OK;
}

int
cmd_cp(struct cli *cli, int argc, char **argv)
{
	_cleanup_(side_done) struct side src = { 0 }, dst = { 0 };
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (argc - optind != 2 || !*argv[optind] || !*argv[optind + 1])
		return cli_usage_error(cli, "needs a source and a destination, one of them "
		                            "REF:/path in a sandbox");
	r = parse_side(cli, argv[optind], &src);
	if (r == 0)
		r = parse_side(cli, argv[optind + 1], &dst);
	if (r != 0)
		return r;
	if (!src.ref == !dst.ref)
		return cli_usage_error(cli, "one side must be in a sandbox (REF:/path) and the "
		                            "other here (a path, or - for stdin or stdout)");
	return src.ref ? download(cli, &src, &dst) : upload(cli, &src, &dst);
}

/* ---- ls ---- */

/* Entries by name, as ls sorts them (bytes, not the locale's order). */
static int
entry_cmp(const void *a, const void *b)
{
	const char *x = json_string_value(json_object_get(*(json_t *const *)a, "name"));
	const char *y = json_string_value(json_object_get(*(json_t *const *)b, "name"));

	return strcmp(x ? x : "", y ? y : "");
}

int
cmd_ls(struct cli *cli, int argc, char **argv)
{
	static const char *const headers[] = { "TYPE", "SIZE", "NAME" };
	_cleanup_(side_done) struct side where = { 0 };
	_cleanup_(table_freep) struct table *t = NULL;
	_cleanup_free_ char *url = NULL, *arg = NULL;
	_cleanup_free_ json_t **sorted = NULL;
	json_t *answer = NULL, *list, *e;
	size_t i, n;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (argc - optind != 1 || !*argv[optind])
		return cli_usage_error(cli, "needs one REF:/path (or REF for /sandbox/home)");
	/* a bare REF is its home directory */
	arg = strchr(argv[optind], ':') ? strdup(argv[optind])
	                                : strdup_printf("%s:/sandbox/home", argv[optind]);
	if (!arg)
		return cli_oom();
	r = parse_side(cli, arg, &where);
	if (r != 0)
		return r;
	if (!where.ref)
		return cli_usage_error(cli, "'%s' is not in a sandbox: write REF:/path", arg);
	url = file_path(where.ref, "dirs", where.path);
	if (!url)
		return cli_oom();
	r = cli_get_list(cli, url, "entries", &answer, &list);
	if (r >= 0)
		return r;
	n = json_array_size(list);
	sorted = calloc(n ? n : 1, sizeof(*sorted));
	t = table_new(ARRAY_SIZE(headers), headers);
	if (!sorted || !t) {
		json_decref(answer);
		return cli_oom();
	}
	json_array_foreach (list, i, e)
		sorted[i] = e;
	qsort(sorted, n, sizeof(*sorted), entry_cmp);
	for (i = 0; i < n; i++) {
		char size[24];
		snprintf(size, sizeof(size), "%lld", (long long)output_int(sorted[i], "size", 0));
		/* the table quotes what the guest named (termsafe_dup) */
		const char *row[] = { output_str(sorted[i], "type"), size,
			              output_str(sorted[i], "name") };
		if (table_add(t, row) < 0) {
			json_decref(answer);
			return cli_oom();
		}
	}
	json_decref(answer);
	if (table_rows(t) == 0) {
		fprintf(stderr, "The directory is empty.\n");
		return CLI_EXIT_OK;
	}
	table_print(t, stdout);
	return CLI_EXIT_OK;
}
