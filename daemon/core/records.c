/* records.c: sandboxes' records for --keep-sandboxes; see records.h.
 *
 * A record is JSON:
 *   {"version":1,"id":"sbx_…","env":[{"name":"K","value":"V"},…],
 *    "procs":[{"pid":17,"argv":["sleep","600"]},…]}
 * Messages about a bad record never quote it: it holds secrets, and they go to the log. */
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include "log.h"
#include "proc.h"
#include "records.h"
#include "sandboxd.h"
#include "strv.h"
#include "util.h"

#define RECORDS_DIR "records"
#define RECORD_SUFFIX ".json"

void
record_done(struct record *rec)
{
	for (size_t i = 0; i < rec->nenv; i++) {
		free(rec->env[i].name);
		if (rec->env[i].value) {
			explicit_bzero(rec->env[i].value, strlen(rec->env[i].value));
			free(rec->env[i].value);
		}
	}
	free(rec->env);
	for (size_t i = 0; i < rec->nprocs; i++)
		strv_free(rec->procs[i].argv);
	free(rec->procs);
	*rec = (struct record){ 0 };
}

static void
record_donep(struct record *rec)
{
	record_done(rec);
}

/* An object with exactly the members named (each present once: duplicates are refused when
 * the text is read). */
static bool
has_exactly(const json_t *o, const char *a, const char *b)
{
	return json_is_object(o) && json_object_size(o) == 2 && json_object_get(o, a) &&
	       json_object_get(o, b);
}

/* The bytes of argv's strings with their NULs: what RECORD_MAX_ARGV bounds. */
static size_t
argv_bytes(char *const *argv)
{
	size_t n = 0;

	for (size_t i = 0; argv && argv[i]; i++)
		n += strlen(argv[i]) + 1;
	return n;
}

static int
parse_env(const json_t *env, struct record *rec, char **ret_why)
{
	size_t i, total = 0;
	json_t *e;

	if (!json_is_array(env) || json_array_size(env) > RECORD_MAX_ENV)
		return error_printf(ret_why, -EINVAL, "'env' is not a list of at most %d variables",
		                    RECORD_MAX_ENV);
	rec->env = calloc(json_array_size(env) + 1, sizeof(*rec->env));
	if (!rec->env)
		return -ENOMEM;
	json_array_foreach (env, i, e) {
		json_t *name = json_object_get(e, "name"), *value = json_object_get(e, "value");
		struct sandbox_env *v = &rec->env[rec->nenv];

		if (!has_exactly(e, "name", "value") || !json_is_string(name) ||
		    !json_is_string(value))
			return error_printf(ret_why, -EINVAL,
			                    "variable %zu is not {\"name\": …, \"value\": …}", i);
		if (!env_name_ok(json_string_value(name), json_string_length(name),
		                 RECORD_MAX_ENV_NAME))
			return error_printf(ret_why, -EINVAL, "variable %zu has an invalid name",
			                    i);
		if (json_string_length(value) > RECORD_MAX_ENV_VALUE)
			return error_printf(ret_why, -EINVAL,
			                    "variable %zu's value is longer than %u bytes", i,
			                    RECORD_MAX_ENV_VALUE);
		total += json_string_length(value);
		for (size_t j = 0; j < rec->nenv; j++)
			if (streq(rec->env[j].name, json_string_value(name)))
				return error_printf(ret_why, -EINVAL, "variable %zu is named twice",
				                    i);
		v->name = strdup(json_string_value(name));
		v->value = strdup(json_string_value(value));
		if (!v->name || !v->value) {
			free(v->name);
			free(v->value);
			v->name = v->value = NULL;
			return -ENOMEM;
		}
		rec->nenv++;
	}
	if (total > 8 * RECORD_MAX_ENV_VALUE)
		return error_printf(ret_why, -EINVAL, "the environment is larger than %u bytes",
		                    8 * RECORD_MAX_ENV_VALUE);
	return 0;
}

static int
parse_procs(const json_t *procs, struct record *rec, char **ret_why)
{
	size_t i, k;
	json_t *p, *a;

	if (!json_is_array(procs) || json_array_size(procs) > RECORD_MAX_PROCS)
		return error_printf(ret_why, -EINVAL,
		                    "'procs' is not a list of at most %d processes",
		                    RECORD_MAX_PROCS);
	rec->procs = calloc(json_array_size(procs) + 1, sizeof(*rec->procs));
	if (!rec->procs)
		return -ENOMEM;
	json_array_foreach (procs, i, p) {
		json_t *pid = json_object_get(p, "pid"), *argv = json_object_get(p, "argv");
		struct sandbox_kept *kp = &rec->procs[rec->nprocs];
		size_t n = 0, bytes = 0;

		if (!has_exactly(p, "pid", "argv") || !json_is_integer(pid) ||
		    json_integer_value(pid) < 1 || json_integer_value(pid) > UINT32_MAX)
			return error_printf(ret_why, -EINVAL,
			                    "process %zu is not {\"pid\": 1 to 4294967295, "
			                    "\"argv\": …}",
			                    i);
		if (!json_is_array(argv) || json_array_size(argv) == 0)
			return error_printf(ret_why, -EINVAL,
			                    "process %zu's argv is not a list of strings", i);
		json_array_foreach (argv, k, a) {
			if (!json_is_string(a))
				return error_printf(ret_why, -EINVAL,
				                    "process %zu's argv is not a list of strings",
				                    i);
			bytes += json_string_length(a) + 1;
		}
		if (bytes > RECORD_MAX_ARGV)
			return error_printf(ret_why, -EINVAL,
			                    "process %zu's argv is longer than %u bytes", i,
			                    RECORD_MAX_ARGV);
		for (size_t j = 0; j < rec->nprocs; j++)
			if (rec->procs[j].pid == (uint32_t)json_integer_value(pid))
				return error_printf(ret_why, -EINVAL,
				                    "process %zu's pid is listed twice", i);
		kp->pid = (uint32_t)json_integer_value(pid);
		json_array_foreach (argv, k, a)
			if (strv_add(&kp->argv, &n, json_string_value(a)) < 0) {
				kp->argv = strv_free(kp->argv);
				return -ENOMEM;
			}
		rec->nprocs++;
	}
	return 0;
}

int
record_parse(const char *data, size_t len, struct record *ret, char **ret_why)
{
	_cleanup_(record_donep) struct record rec = { 0 };
	json_t *root, *version, *id;
	json_error_t jerr;
	int r;

	if (len > RECORD_MAX_BYTES)
		return error_printf(ret_why, -EINVAL, "it is larger than %u bytes",
		                    RECORD_MAX_BYTES);
	/* no NUL in a string, one value and nothing after it */
	root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return error_printf(
		        ret_why, -EINVAL,
		        "it is not JSON (or names a member twice) at line %d, column %d", jerr.line,
		        jerr.column);
	version = json_object_get(root, "version");
	id = json_object_get(root, "id");
	if (!json_is_object(root) || json_object_size(root) != 4 || !json_object_get(root, "env") ||
	    !json_object_get(root, "procs") || !version || !id) {
		r = error_printf(ret_why, -EINVAL,
		                 "it is not an object of exactly version, id, env and procs");
		goto out;
	}
	if (!json_is_integer(version) || json_integer_value(version) != RECORD_VERSION) {
		r = error_printf(ret_why, -EINVAL, "its version is not %d", RECORD_VERSION);
		goto out;
	}
	if (!json_is_string(id) || !sandbox_id_valid(json_string_value(id))) {
		r = error_printf(ret_why, -EINVAL, "its id is not a sandbox id");
		goto out;
	}
	snprintf(rec.id, sizeof(rec.id), "%s", json_string_value(id));
	r = parse_env(json_object_get(root, "env"), &rec, ret_why);
	if (r >= 0)
		r = parse_procs(json_object_get(root, "procs"), &rec, ret_why);
	if (r >= 0) {
		*ret = rec;
		rec = (struct record){ 0 };
	}
out:
	json_decref(root);
	return r;
}

int
record_format(const struct record *rec, char **ret, size_t *ret_len)
{
	json_t *root, *env = json_array(), *procs = json_array();
	char *text;
	int r = env && procs ? 0 : -ENOMEM;

	if (rec->nenv > RECORD_MAX_ENV || rec->nprocs > RECORD_MAX_PROCS ||
	    !sandbox_id_valid(rec->id))
		r = -EINVAL;
	for (size_t i = 0; r == 0 && i < rec->nenv; i++) {
		const struct sandbox_env *e = &rec->env[i];
		if (!e->name || !e->value ||
		    !env_name_ok(e->name, strlen(e->name), RECORD_MAX_ENV_NAME) ||
		    strlen(e->value) > RECORD_MAX_ENV_VALUE)
			r = -EINVAL;
		else if (json_array_append_new(env, json_pack("{s:s, s:s}", "name", e->name,
		                                              "value", e->value)) < 0)
			r = -EINVAL; /* a value that is not UTF-8 (every one came from JSON) */
	}
	for (size_t i = 0; r == 0 && i < rec->nprocs; i++) {
		const struct sandbox_kept *p = &rec->procs[i];
		json_t *argv = json_array();
		if (!argv)
			r = -ENOMEM;
		else if (p->pid == 0 || !p->argv || !p->argv[0] ||
		         argv_bytes(p->argv) > RECORD_MAX_ARGV)
			r = -EINVAL;
		for (size_t k = 0; r == 0 && p->argv[k]; k++)
			if (json_array_append_new(argv, json_string(p->argv[k])) < 0)
				r = -EINVAL;
		if (r == 0 &&
		    json_array_append_new(procs, json_pack("{s:I, s:o}", "pid", (json_int_t)p->pid,
		                                           "argv", argv)) < 0)
			r = -ENOMEM;
		else if (r < 0)
			json_decref(argv);
	}
	if (r < 0) {
		json_decref(env);
		json_decref(procs);
		return r;
	}
	root = json_pack("{s:i, s:s, s:o, s:o}", "version", RECORD_VERSION, "id", rec->id, "env",
	                 env, "procs", procs);
	if (!root)
		return -ENOMEM;
	text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!text)
		return -ENOMEM;
	*ret_len = strlen(text);
	if (*ret_len > RECORD_MAX_BYTES) {
		explicit_bzero(text, *ret_len);
		free(text);
		return -EFBIG;
	}
	*ret = text;
	return 0;
}

/* Whether a process's command line can be kept: valid UTF-8 (the guest's list gives bytes),
 * and within the bound, else its program alone. Returns the words to keep (0: none). */
static size_t
keepable_words(char *const *argv)
{
	json_t *s;

	if (!argv || !argv[0] || strlen(argv[0]) + 1 > RECORD_MAX_ARGV)
		return 0;
	for (size_t i = 0; argv[i]; i++) {
		if (!(s = json_string(argv[i])))
			return 0;
		json_decref(s);
	}
	return argv_bytes(argv) <= RECORD_MAX_ARGV ? strv_length(argv) : 1;
}

static int
add_proc(struct record *rec, uint32_t pid, char *const *argv)
{
	size_t words = keepable_words(argv);
	struct sandbox_kept *kp;

	if (words == 0)
		return 0;
	for (size_t i = 0; i < rec->nprocs; i++)
		if (rec->procs[i].pid == pid)
			return 0;
	if (rec->nprocs == RECORD_MAX_PROCS) {
		/* the newest are kept: the oldest goes */
		strv_free(rec->procs[0].argv);
		memmove(rec->procs, rec->procs + 1, (rec->nprocs - 1) * sizeof(*rec->procs));
		rec->nprocs--;
	}
	kp = &rec->procs[rec->nprocs];
	*kp = (struct sandbox_kept){ .pid = pid };
	if (strv_copy(argv, words, &kp->argv) < 0)
		return -ENOMEM;
	rec->nprocs++;
	return 0;
}

int
record_of_sandbox(const struct sandbox *sb, struct record *ret)
{
	_cleanup_(record_donep) struct record rec = { 0 };
	struct list_node *n;
	int r = 0;

	snprintf(rec.id, sizeof(rec.id), "%s", sb->id);
	rec.env = calloc(sb->nenv + 1, sizeof(*rec.env));
	rec.procs = calloc(RECORD_MAX_PROCS + 1, sizeof(*rec.procs));
	if (!rec.env || !rec.procs)
		return -ENOMEM;
	for (size_t i = 0; i < sb->nenv; i++) {
		struct sandbox_env *e = &rec.env[rec.nenv];
		if (!sb->env[i].value)
			return -ENODATA; /* never written without its values */
		e->name = strdup(sb->env[i].name);
		e->value = strdup(sb->env[i].value);
		rec.nenv++;
		if (!e->name || !e->value)
			return -ENOMEM;
	}
	/* the ones its record named that the guest has not listed again yet come first: they
	 * are the oldest */
	for (size_t i = 0; r >= 0 && i < sb->nkept; i++) {
		bool followed = false;
		LIST_FOREACH (n, &sb->procs)
			if (list_entry(n, struct proc, link)->pid == sb->kept[i].pid)
				followed = true;
		if (!followed)
			r = add_proc(&rec, sb->kept[i].pid, sb->kept[i].argv);
	}
	LIST_FOREACH (n, &sb->procs) {
		const struct proc *p = list_entry(n, struct proc, link);
		if (r >= 0 && p->keep)
			r = add_proc(&rec, p->pid, p->argv);
	}
	if (r < 0)
		return r;
	*ret = rec;
	rec = (struct record){ 0 };
	return 0;
}

int
record_apply(struct record *rec, struct sandbox *sb, char **ret_why)
{
	if (!streq(rec->id, sb->id))
		return error_printf(ret_why, -EINVAL, "it is the record of another sandbox");
	if (rec->nenv != sb->nenv)
		return error_printf(ret_why, -EINVAL,
		                    "it holds %zu environment variable(s), the sandbox has %zu",
		                    rec->nenv, sb->nenv);
	for (size_t i = 0; i < sb->nenv; i++) {
		bool found = false;
		for (size_t j = 0; j < rec->nenv; j++)
			if (streq(rec->env[j].name, sb->env[i].name))
				found = true;
		if (!found)
			return error_printf(ret_why, -EINVAL,
			                    "it lacks the value of environment variable '%s'",
			                    sb->env[i].name);
	}
	for (size_t i = 0; i < sb->nenv; i++)
		for (size_t j = 0; j < rec->nenv; j++)
			if (streq(rec->env[j].name, sb->env[i].name)) {
				if (sb->env[i].value) {
					explicit_bzero(sb->env[i].value, strlen(sb->env[i].value));
					free(sb->env[i].value);
				}
				sb->env[i].value = TAKE_PTR(rec->env[j].value);
			}
	sandbox_kept_clear(sb);
	sb->kept = TAKE_PTR(rec->procs);
	sb->nkept = rec->nprocs;
	rec->nprocs = 0;
	return 0;
}

/* ---- the directory ---- */

static char *
dir_path(const char *state_dir)
{
	return strdup_printf("%s/" RECORDS_DIR, state_dir);
}

static char *
record_path(struct sandboxd *d, const char *id)
{
	return strdup_printf("%s/" RECORDS_DIR "/%s" RECORD_SUFFIX, d->opts->state_dir, id);
}

/* Whether st is sandboxd's uid's alone; otherwise *ret_why says what to do. */
static int
owner_only(const struct stat *st, const char *what, const char *path, const char *fix,
           char **ret_why)
{
	if (st->st_uid != geteuid())
		return error_printf(ret_why, -EPERM,
		                    "%s '%s' belongs to uid %u, not to sandboxd's uid %u; it holds "
		                    "environment values: remove it, or run sandboxd as that user",
		                    what, path, (unsigned)st->st_uid, (unsigned)geteuid());
	if (st->st_mode & 077)
		return error_printf(ret_why, -EPERM,
		                    "%s '%s' is open to group or others (mode %04o); it holds "
		                    "environment values: run '%s %s' (and rotate the secrets of "
		                    "its sandboxes)",
		                    what, path, (unsigned)(st->st_mode & 07777), fix, path);
	return 0;
}

/* Removes everything in dir and dir itself: what a run with --keep-sandboxes left. */
static int
remove_all(const char *dir, unsigned *ret_removed)
{
	struct stat st;
	struct dirent *de;
	DIR *dp;
	int fd;

	if (lstat(dir, &st) < 0)
		return errno == ENOENT ? 0 : negative_errno();
	if (!S_ISDIR(st.st_mode))
		return unlink(dir) < 0 ? negative_errno() : 0;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || !(dp = fdopendir(fd))) {
		int r = negative_errno();
		if (fd >= 0)
			close(fd);
		return r;
	}
	while ((de = readdir(dp))) {
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (unlinkat(fd, de->d_name, 0) == 0)
			(*ret_removed)++;
		else if (errno == EISDIR && unlinkat(fd, de->d_name, AT_REMOVEDIR) == 0)
			(*ret_removed)++;
	}
	closedir(dp);
	return rmdir(dir) < 0 && errno != ENOENT ? negative_errno() : 0;
}

int
records_prepare(const char *state_dir, bool keep, unsigned *ret_removed, char **ret_why)
{
	_cleanup_free_ char *dir = dir_path(state_dir);
	struct dirent *de;
	struct stat st;
	DIR *dp;
	int fd, r = 0;

	*ret_removed = 0;
	if (!dir)
		return -ENOMEM;
	if (!keep) {
		r = remove_all(dir, ret_removed);
		return r < 0 ? error_printf(ret_why, r, "records '%s': cannot remove them: %s", dir,
		                            strerror(-r))
		             : 0;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return error_printf(ret_why, negative_errno(), "records '%s': cannot create it: %m",
		                    dir);
	if (lstat(dir, &st) < 0)
		return error_printf(ret_why, negative_errno(), "records '%s': %m", dir);
	if (!S_ISDIR(st.st_mode))
		return error_printf(ret_why, -ENOTDIR, "records '%s' is not a directory (a link?)",
		                    dir);
	r = owner_only(&st, "the records directory", dir, "chmod 700", ret_why);
	if (r < 0)
		return r;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || !(dp = fdopendir(fd))) {
		r = negative_errno();
		if (fd >= 0)
			close(fd);
		return error_printf(ret_why, r, "records '%s': %s", dir, strerror(-r));
	}
	while (r >= 0 && (de = readdir(dp))) {
		_cleanup_free_ char *path = NULL;
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		/* a write a crash cut short (write_file_atomic's temporary): never read */
		if (strstr(de->d_name, RECORD_SUFFIX ".tmp.")) {
			(void)unlinkat(fd, de->d_name, 0);
			continue;
		}
		path = strdup_printf("%s/%s", dir, de->d_name);
		if (!path) {
			r = -ENOMEM;
		} else if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = error_printf(ret_why, negative_errno(), "record '%s': %m", path);
		} else if (!S_ISREG(st.st_mode)) {
			r = error_printf(ret_why, -EPERM,
			                 "record '%s' is not a regular file (a link?); remove it",
			                 path);
		} else {
			r = owner_only(&st, "record", path, "chmod 600", ret_why);
		}
	}
	closedir(dp);
	return r;
}

int
records_save(struct sandboxd *d, const struct sandbox *sb)
{
	_cleanup_(record_donep) struct record rec = { 0 };
	_cleanup_free_ char *path = NULL, *dir = NULL;
	char *text = NULL;
	size_t len = 0;
	int r;

	if (!d->opts->keep_sandboxes)
		return 0;
	path = record_path(d, sb->id);
	dir = dir_path(d->opts->state_dir);
	if (!path || !dir)
		return -ENOMEM;
	r = record_of_sandbox(sb, &rec);
	if (r >= 0)
		r = record_format(&rec, &text, &len);
	if (r < 0)
		return r;
	r = write_file_atomic(path, text, len, 0600);
	explicit_bzero(text, len);
	free(text);
	if (r >= 0)
		fsync_dir(dir);
	return r;
}

int
records_load(struct sandboxd *d, const char *id, struct record *ret, char **ret_why)
{
	_cleanup_free_ char *path = record_path(d, id), *data = NULL;
	struct record rec = { 0 };
	size_t got = 0;
	int r;

	if (!path)
		return -ENOMEM;
	r = read_private_file(path, RECORD_MAX_BYTES, &data, &got, ret_why);
	if (r < 0)
		return r;
	r = record_parse(data, got, &rec, ret_why);
	explicit_bzero(data, got);
	if (r < 0)
		return r;
	if (!streq(rec.id, id)) {
		record_done(&rec);
		return error_printf(ret_why, -EINVAL, "it is the record of another sandbox");
	}
	*ret = rec;
	return 0;
}

void
records_remove(struct sandboxd *d, const char *id)
{
	_cleanup_free_ char *path = NULL, *dir = NULL;

	if (!d->opts->keep_sandboxes)
		return;
	path = record_path(d, id);
	dir = dir_path(d->opts->state_dir);
	if (!path || !dir)
		return;
	if (unlink(path) == 0)
		fsync_dir(dir);
	else if (errno != ENOENT)
		log_warning("sandbox '%s': cannot delete its record '%s': %m", id, path);
}

unsigned
records_sweep(struct sandboxd *d)
{
	_cleanup_free_ char *dir = NULL;
	struct dirent *de;
	unsigned n = 0;
	DIR *dp;

	if (!d->opts->keep_sandboxes || !(dir = dir_path(d->opts->state_dir)) ||
	    !(dp = opendir(dir)))
		return 0;
	while ((de = readdir(dp))) {
		char id[SANDBOX_ID_MAX + 1];
		size_t len = strlen(de->d_name), slen = strlen(RECORD_SUFFIX);
		const struct sandbox *sb;

		if (de->d_name[0] == '.')
			continue;
		if (len > slen && len - slen < sizeof(id) &&
		    streq(de->d_name + len - slen, RECORD_SUFFIX)) {
			memcpy(id, de->d_name, len - slen);
			id[len - slen] = '\0';
			sb = registry_get(&d->reg, id);
			if (sb && sb->state != SANDBOX_TERMINATED)
				continue;
		}
		if (unlinkat(dirfd(dp), de->d_name, 0) == 0)
			n++;
	}
	closedir(dp);
	if (n)
		fsync_dir(dir);
	return n;
}
