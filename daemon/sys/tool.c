/* tool.c: see tool.h. */
#include <fcntl.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "buf.h"
#include "tool.h"
#include "util.h"

extern char **environ;

#define TOOL_OUTPUT_MAX (64 * 1024)
#define TOOL_OUTPUT_LINES 40
#define COPY_FILE_MAX (256u * 1024 * 1024)

/* Which package to install when a tool is missing. */
static const struct {
	const char *tool;
	const char *package;
} tool_packages[] = {
	{ "apt-get", "apt" },       { "apt-cache", "apt" },       { "dpkg-deb", "dpkg" },
	{ "lz4", "lz4" },           { "objcopy", "binutils" },    { "mkfs.ext4", "e2fsprogs" },
	{ "debugfs", "e2fsprogs" }, { "qemu-img", "qemu-utils" }, { "xz", "xz-utils" },
	{ "zstd", "zstd" },         { "gzip", "gzip" },
};

/* ---- small helpers ---- */

static int
rm_rf_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (type == FTW_DP)
		(void)rmdir(path);
	else
		(void)unlink(path);
	return 0;
}

/* Removes path and everything below it; never follows symlinks. */
void
rm_rf(const char *path)
{
	if (path)
		(void)nftw(path, rm_rf_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A temporary directory that removes itself. */
void
tmpdir_cleanup(char **p)
{
	if (*p) {
		rm_rf(*p);
		free(*p);
		*p = NULL;
	}
}

int
make_tmpdir(const char *parent, const char *prefix, char **ret)
{
	char *t = strdup_printf("%s/%s-XXXXXX", parent, prefix);

	if (!t)
		return -ENOMEM;
	if (!mkdtemp(t)) {
		int r = negative_errno();
		free(t);
		return r;
	}
	*ret = t;
	return 0;
}

/* mkdir -p, then the exact mode on the last component whatever the umask. */
int
mkdir_mode(const char *path, mode_t mode)
{
	int r = mkdir_p(path, mode);

	if (r < 0)
		return r;
	return chmod(path, mode) < 0 ? negative_errno() : 0;
}

bool
is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

bool
is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

uint64_t
file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

void
hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int
sha256_hex(const void *data, size_t len, char out[static 65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;

	if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return -EIO;
	hex_encode(md, mdlen, out);
	return 0;
}

int
sha256_file(const char *path, char out[static 65])
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	char chunk[65536];
	EVP_MD_CTX *ctx;
	int r = 0;

	if (fd < 0)
		return negative_errno();
	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		r = -EIO;
	while (r == 0) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			r = negative_errno();
		else if (n == 0)
			break;
		else if (!EVP_DigestUpdate(ctx, chunk, (size_t)n))
			r = -EIO;
	}
	if (r == 0 && (!EVP_DigestFinal_ex(ctx, md, &mdlen) || mdlen != 32))
		r = -EIO;
	EVP_MD_CTX_free(ctx);
	if (r == 0)
		hex_encode(md, mdlen, out);
	return r;
}

/* Copies src to dst (created with mode, replacing nothing). */
int
copy_file(const char *src, const char *dst, mode_t mode)
{
	_cleanup_free_ char *data = NULL;
	_cleanup_close_ int fd = -1;
	size_t len;
	int r;

	r = read_file_max(src, COPY_FILE_MAX, &data, &len);
	if (r < 0)
		return r;
	fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return negative_errno();
	r = fchmod(fd, mode) < 0 ? negative_errno() : write_all(fd, data, len);
	if (r < 0)
		(void)unlink(dst); /* nothing half-written stays to make the next try EEXIST */
	return r;
}

/* ---- running tools ---- */

void
tool_done(struct tool *t)
{
	free(t->out);
	free(t->output);
	t->out = t->output = NULL;
}

int
tool_find(const char *name, char **ret)
{
	static const char fallback[] =
	        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	const char *lists[] = { getenv("PATH"), fallback };

	if (strchr(name, '/')) {
		*ret = strdup(name);
		return *ret ? 0 : -ENOMEM;
	}
	for (size_t i = 0; i < ARRAY_SIZE(lists); i++) {
		const char *p = lists[i];

		while (p && *p) {
			const char *e = strchrnul(p, ':');
			if (e > p && *p == '/') {
				char *cand = strdup_printf("%.*s/%s", (int)(e - p), p, name);
				if (!cand)
					return -ENOMEM;
				if (access(cand, X_OK) == 0) {
					*ret = cand;
					return 0;
				}
				free(cand);
			}
			p = *e ? e + 1 : e;
		}
	}
	return -ENOENT;
}

static const char *
tool_package(const char *tool)
{
	for (size_t i = 0; i < ARRAY_SIZE(tool_packages); i++)
		if (streq(tool, tool_packages[i].tool))
			return tool_packages[i].package;
	return NULL;
}

/* Reads back what a child wrote into a memfd: everything (max 0) or the last max bytes. */
static char *
memfd_read(int fd, size_t max)
{
	off_t size = lseek(fd, 0, SEEK_END);
	off_t from;
	char *s;
	ssize_t n;

	if (size < 0)
		return NULL;
	from = (max && (size_t)size > max) ? size - (off_t)max : 0;
	s = malloc((size_t)(size - from) + 1);
	if (!s)
		return NULL;
	n = pread(fd, s, (size_t)(size - from), from);
	s[n > 0 ? n : 0] = '\0';
	return s;
}

int
spawn_child(const struct spawn *sp, const char *const *argv, pid_t *ret_pid)
{
	static const int null_flags[] = { O_RDONLY, O_WRONLY, O_WRONLY };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
	int r;

	if (sp->n_fds < 3 || sp->n_fds > SPAWN_FDS_MAX)
		return -EINVAL;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_init(&attr);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	if (sp->own_group) {
		posix_spawnattr_setpgroup(&attr, 0);
		flags |= POSIX_SPAWN_SETPGROUP;
	}
	posix_spawnattr_setflags(&attr, flags);
	posix_spawn_file_actions_init(&fa);
	for (size_t i = 0; i < sp->n_fds; i++) {
		if (sp->fds[i] == SPAWN_INHERIT)
			continue; /* ours as it is (stderr, usually) */
		if (sp->fds[i] < 0)
			posix_spawn_file_actions_addopen(&fa, (int)i, "/dev/null",
			                                 i < 3 ? null_flags[i] : O_RDWR, 0);
		else
			posix_spawn_file_actions_adddup2(&fa, sp->fds[i], (int)i);
	}
	posix_spawn_file_actions_addclosefrom_np(&fa, (int)sp->n_fds);
	if (sp->cwd)
		posix_spawn_file_actions_addchdir_np(&fa, sp->cwd);
	r = posix_spawn(ret_pid, sp->path, &fa, &attr, (char *const *)argv,
	                sp->envp ? sp->envp : environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	return -r;
}

/* Runs argv (argv[0] looked up in PATH, then the sbin directories) to completion. Returns 0
 * when it exited 0, -EIO when it failed (t->status and t->output say how), -ENOENT when the
 * tool is not installed, other -errno when it could not start. */
int
tool_run(struct tool *t, const char *const *argv)
{
	_cleanup_free_ char *exe = NULL;
	_cleanup_close_ int cap = -1, outcap = -1;
	pid_t pid;
	int r, status;

	t->out = t->output = NULL;
	t->status = -1;
	r = tool_find(argv[0], &exe);
	if (r < 0)
		return r;
	cap = memfd_create("tool-output", MFD_CLOEXEC);
	if (cap < 0)
		return negative_errno();
	if (t->capture_out) {
		outcap = memfd_create("tool-stdout", MFD_CLOEXEC);
		if (outcap < 0)
			return negative_errno();
	}
	{
		struct spawn sp = { .path = exe,
			            .cwd = t->cwd,
			            .fds = { t->in_fd >= 0 ? t->in_fd : -1,
			                     t->out_fd >= 0 ? t->out_fd
			                     : outcap >= 0  ? outcap
			                                    : cap,
			                     cap },
			            .n_fds = 3 };
		r = spawn_child(&sp, argv, &pid);
		if (r < 0)
			return r;
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return negative_errno();
	t->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	t->output = memfd_read(cap, TOOL_OUTPUT_MAX);
	if (outcap >= 0) {
		t->out = memfd_read(outcap, 0);
		if (!t->out)
			return -ENOMEM;
	}
	return t->status == 0 ? 0 : -EIO;
}

/* "lz4 failed (exit 1):\n  <its output>" or "lz4 is not installed: apt-get install lz4". */
char *
tool_failure(const struct tool *t, const char *const *argv, int r)
{
	_cleanup_buf_ struct buf b = BUF_INIT(TOOL_OUTPUT_MAX * 2);
	const char *pkg = tool_package(argv[0]);

	if (r == -ENOENT && t->status < 0) {
		(void)buf_printf(&b, "'%s' is not installed", argv[0]);
		if (pkg)
			(void)buf_printf(&b, ": install it with 'apt-get install %s'", pkg);
		return buf_steal(&b);
	}
	if (t->status < 0) {
		(void)buf_printf(&b, "'%s' could not be started: %s", argv[0], strerror(-r));
		return buf_steal(&b);
	}
	(void)buf_puts(&b, "'");
	for (size_t i = 0; argv[i]; i++)
		(void)buf_printf(&b, "%s%s", i ? " " : "", argv[i]);
	if (t->status > 128)
		(void)buf_printf(&b, "' was killed by signal %d", t->status - 128);
	else
		(void)buf_printf(&b, "' failed (exit %d)", t->status);
	if (!isempty(t->output)) {
		const char *p = t->output + strlen(t->output);
		int lines = 0;

		/* its last lines are the ones that say why */
		while (p > t->output && lines <= TOOL_OUTPUT_LINES)
			if (*--p == '\n' && p[1] != '\0')
				lines++;
		if (*p == '\n')
			p++;
		/* one line (it goes into a log line and an API message): its lines joined */
		(void)buf_puts(&b, ":");
		for (bool first = true; *p;) {
			const char *e = strchrnul(p, '\n');
			if (e > p) {
				(void)buf_printf(&b, "%s%.*s", first ? " " : " | ", (int)(e - p),
				                 p);
				first = false;
			}
			p = *e ? e + 1 : e;
		}
	}
	return buf_steal(&b);
}

/* Runs a tool whose output nobody needs; on failure *ret_error says what happened. */
int
run_quiet(const char *cwd, const char *const *argv, char **ret_error)
{
	struct tool t = { .cwd = cwd, .in_fd = -1, .out_fd = -1 };
	int r = tool_run(&t, argv);

	if (r < 0 && ret_error)
		*ret_error = tool_failure(&t, argv, r);
	tool_done(&t);
	return r;
}
