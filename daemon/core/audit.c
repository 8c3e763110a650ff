/* audit.c: audit records and the JSONL audit log; see audit.h. */
#include <fcntl.h>
#include <sys/stat.h>
#include "audit.h"
#include "log.h"
#include "paths.h"
#include "sandbox.h"
#include "util.h"

/* ---- records ---- */

static const char *
str_of(const json_t *data, const char *key)
{
	return json_string_value(json_object_get(data, key));
}

/* Copies each of keys from data into f (null when data lacks it): a record has exactly its
 * type's fields, whatever else the event carries. */
static int
pick(json_t *f, const json_t *data, const char *const *keys)
{
	for (; *keys; keys++) {
		json_t *v = json_object_get(data, *keys);
		if (json_object_set_new(f, *keys, v ? json_incref(v) : json_null()) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* Each builder fills f with the fields of the record the event makes and returns its type,
 * or NULL when the event makes none; *r is set to -ENOMEM when f could not be filled. */

static const char *
build_created(const json_t *data, json_t *f, int *r)
{
	static const char *const keys[] = { "name",      "image",    "labels", "network",
		                            "env_names", "snapshot", NULL };
	json_t *volumes = json_object_get(data, "volumes");

	*r = pick(f, data, keys);
	if (*r >= 0 &&
	    json_object_set_new(f, "volumes", volumes ? json_incref(volumes) : json_array()) < 0)
		*r = -ENOMEM;
	/* a sandbox claimed from a pool says so */
	if (*r >= 0 && str_of(data, "reason") &&
	    json_object_set_new(f, "reason", json_string(str_of(data, "reason"))) < 0)
		*r = -ENOMEM;
	return "sandbox.created";
}

/* The states a record is kept for, by the state moved to (and from, where that matters);
 * the moves through pending, starting and stopping have none. */
static const struct {
	const char *to, *from; /* from NULL: any */
	const char *type;
	const char *reason;   /* the data's member that is the record's reason, or NULL */
	bool reason_optional; /* a reason only when the data has one (beyond the contract) */
} state_records[] = {
	{ .to = "running", .from = "resuming", .type = "sandbox.resumed" },
	{ .to = "running", .type = "sandbox.started" },
	/* reason "idle" when its idle timeout stopped it; none when a request did */
	{ .to = "stopped", .type = "sandbox.stopped", .reason = "stop", .reason_optional = true },
	{ .to = "suspended", .type = "sandbox.suspended" },
	{ .to = "failed", .type = "sandbox.failed", .reason = "reason" },
	{ .to = "terminated", .type = "sandbox.terminated", .reason = "end" },
};

static const char *
build_state(const json_t *data, json_t *f, int *r)
{
	const char *to = str_of(data, "to"), *from = str_of(data, "from");

	for (size_t i = 0; to && i < ARRAY_SIZE(state_records); i++) {
		const char *reason;
		if (!streq(to, state_records[i].to) ||
		    (state_records[i].from && (!from || !streq(from, state_records[i].from))))
			continue;
		if (state_records[i].reason) {
			reason = str_of(data, state_records[i].reason);
			if (!reason && state_records[i].reason_optional)
				return state_records[i].type;
			if (json_object_set_new(f, "reason",
			                        reason ? json_string(reason) : json_null()) < 0)
				*r = -ENOMEM;
		}
		return state_records[i].type;
	}
	return NULL;
}

static const char *
build_updated(const json_t *data, json_t *f, int *r)
{
	json_t *network = json_object_get(data, "network");

	/* a new name, labels or idle timeout is no record; a new network is */
	if (!network)
		return NULL;
	if (json_object_set_new(f, "network", json_incref(network)) < 0)
		*r = -ENOMEM;
	return "sandbox.network_updated";
}

static const char *
build_destroy_failed(const json_t *data, json_t *f, int *r)
{
	static const char *const keys[] = { "reason", NULL };

	/* it was failed already; its reason now says the removal failed too */
	*r = pick(f, data, keys);
	return "sandbox.failed";
}

static const char *
build_process_started(const json_t *data, json_t *f, int *r)
{
	static const char *const keys[] = { "pid", "program",   "arg_count", "args_sha256",
		                            "cwd", "env_names", NULL };

	*r = pick(f, data, keys);
	return "process.started";
}

static const char *
build_process_exited(const json_t *data, json_t *f, int *r)
{
	static const char *const keys[] = { "pid", "exit_code", "duration_ms", NULL };
	json_t *oom = json_object_get(data, "oom");

	*r = pick(f, data, keys);
	/* only where the guest's OOM killer ended it: the one field beyond the contract's */
	if (*r == 0 && json_is_true(oom) && json_object_set_new(f, "oom", json_true()) < 0)
		*r = -ENOMEM;
	return "process.exited";
}

static const char *const file_keys[] = { "path", "bytes", NULL };

static const char *
build_file_read(const json_t *data, json_t *f, int *r)
{
	*r = pick(f, data, file_keys);
	return "file.read";
}

static const char *
build_file_written(const json_t *data, json_t *f, int *r)
{
	*r = pick(f, data, file_keys);
	return "file.written";
}

static const char *
build_file_removed(const json_t *data, json_t *f, int *r)
{
	*r = pick(f, data, file_keys);
	return "file.removed";
}

static const char *
build_tunnel_opened(const json_t *data, json_t *f, int *r)
{
	static const char *const keys[] = { "port", NULL };

	*r = pick(f, data, keys);
	return "tunnel.opened";
}

/* name, port and reason as decided; bytes: both ways together (a DNS answer moves none) */
static int
egress_fields(const json_t *data, json_t *f)
{
	static const char *const keys[] = { "name", "port", "reason", NULL };
	json_int_t out = json_integer_value(json_object_get(data, "bytes_out"));
	json_int_t in = json_integer_value(json_object_get(data, "bytes_in"));
	int r = pick(f, data, keys);

	if (r >= 0 && json_object_set_new(f, "bytes", json_integer(out + in)) < 0)
		r = -ENOMEM;
	return r;
}

static const char *
build_egress_allowed(const json_t *data, json_t *f, int *r)
{
	*r = egress_fields(data, f);
	return "egress.allowed";
}

static const char *
build_egress_denied(const json_t *data, json_t *f, int *r)
{
	*r = egress_fields(data, f);
	return "egress.denied";
}

/* The events that make audit records, by their type (events.h). */
static const struct {
	const char *event;
	const char *(*build)(const json_t *data, json_t *f, int *r);
} kinds[] = {
	{ "created", build_created },
	{ "state", build_state },
	{ "updated", build_updated },
	{ "destroy_failed", build_destroy_failed },
	{ "process.started", build_process_started },
	{ "process.exited", build_process_exited },
	{ "file.read", build_file_read },
	{ "file.written", build_file_written },
	{ "file.removed", build_file_removed },
	{ "tunnel.opened", build_tunnel_opened },
	{ "egress.allowed", build_egress_allowed },
	{ "egress.denied", build_egress_denied },
};

/* "2026-11-29T20:18:20.123Z": an audit trail's times to the millisecond. */
static void
format_time_ms(int64_t unix_ms, char out[static 40])
{
	char secs[32];

	format_rfc3339(unix_ms, secs);
	secs[strcspn(secs, "Z")] = '\0';
	snprintf(out, 40, "%s.%03dZ", secs, (int)(((unix_ms % 1000) + 1000) % 1000));
}

int
audit_record(const char *type, const json_t *data, const struct sandbox *sb, int64_t time_ms,
             char **ret)
{
	json_t *rec = NULL, *fields = NULL, *v;
	const char *rtype = NULL, *key;
	char when[40];
	int r = 0;

	*ret = NULL;
	for (size_t i = 0; type && i < ARRAY_SIZE(kinds); i++)
		if (streq(type, kinds[i].event)) {
			fields = json_object();
			if (!fields)
				return -ENOMEM;
			rtype = kinds[i].build(data, fields, &r);
			break;
		}
	if (r < 0 || !rtype)
		goto out;
	format_time_ms(time_ms, when);
	rec = json_pack("{s:s, s:s, s:s}", "time", when, "type", rtype, "sandbox", sb->id);
	if (!rec) {
		r = -ENOMEM;
		goto out;
	}
	json_object_foreach (fields, key, v)
		if (json_object_set(rec, key, v) < 0) {
			r = -ENOMEM;
			goto out;
		}
	*ret = json_dumps(rec, JSON_COMPACT);
	r = *ret ? 0 : -ENOMEM;
out:
	json_decref(rec);
	json_decref(fields);
	return r;
}

/* ---- the JSONL log ---- */

struct audit_log {
	char *path;
	uint64_t rotate_bytes;
	unsigned keep;
	bool failing;    /* the last write failed (and that was logged) */
	uint64_t missed; /* records not written since */
};

int
audit_log_open(const char *path, uint64_t rotate_bytes, unsigned keep, struct audit_log **ret,
               char **ret_why)
{
	_cleanup_free_ char *dir = NULL;
	struct audit_log *l;
	char *slash;
	int r;

	*ret_why = NULL;
	if (!path || path[0] != '/' || path[strlen(path) - 1] == '/')
		return error_printf(ret_why, -EINVAL, "audit log '%s': not an absolute file path",
		                    path ? path : "");
	dir = strdup(path);
	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = '\0'; /* "/events.jsonl": the root, which is no private directory */
	else
		*slash = '\0';
	r = paths_private_dir_prepare(dir, "audit log directory", ret_why);
	if (r < 0)
		return r;
	l = calloc(1, sizeof(*l));
	if (!l || !(l->path = strdup(path))) {
		free(l);
		return -ENOMEM;
	}
	l->rotate_bytes = rotate_bytes;
	l->keep = keep;
	*ret = l;
	return 0;
}

/* PATH.n */
static char *
generation(const struct audit_log *l, unsigned n)
{
	return strdup_printf("%s.%u", l->path, n);
}

/* PATH becomes PATH.1, PATH.1 PATH.2 …; the oldest generation goes first, so each rename
 * lands on a name that is free. */
static int
rotate(struct audit_log *l)
{
	_cleanup_free_ char *oldest = generation(l, l->keep), *first = generation(l, 1);

	if (!oldest || !first)
		return -ENOMEM;
	if (l->keep == 0)
		return unlink(l->path) < 0 && errno != ENOENT ? negative_errno() : 0;
	if (unlink(oldest) < 0 && errno != ENOENT)
		return negative_errno();
	for (unsigned n = l->keep - 1; n >= 1; n--) {
		_cleanup_free_ char *from = generation(l, n), *to = generation(l, n + 1);
		if (!from || !to)
			return -ENOMEM;
		if (rename(from, to) < 0 && errno != ENOENT)
			return negative_errno();
	}
	return rename(l->path, first) < 0 ? negative_errno() : 0;
}

static int
open_log(const struct audit_log *l, struct stat *ret)
{
	int fd = open(l->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd < 0)
		return negative_errno();
	if (fstat(fd, ret) < 0) {
		int r = negative_errno();
		close(fd);
		return r;
	}
	if (!S_ISREG(ret->st_mode)) {
		close(fd);
		return -EINVAL;
	}
	/* a file someone loosened is ours to close again */
	if ((ret->st_mode & 07777) != 0600 && fchmod(fd, 0600) < 0) {
		int r = negative_errno();
		close(fd);
		return r;
	}
	return fd;
}

/* One line; the file is opened for each, so a log moved away (or a directory made
 * read-only) is seen at the next record. */
static int
append(struct audit_log *l, const char *line, size_t len)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	ssize_t n;

	fd = open_log(l, &st);
	if (fd < 0)
		return fd;
	if (st.st_size > 0 && (uint64_t)st.st_size + len > l->rotate_bytes) {
		int r;
		fd = safe_close(fd);
		r = rotate(l);
		if (r < 0)
			return r;
		fd = open_log(l, &st);
		if (fd < 0)
			return fd;
	}
	n = write(fd, line, len);
	if (n == (ssize_t)len)
		return 0;
	if (n < 0)
		return negative_errno();
	/* a line cut short (the disk filled) would run into the next: take it back */
	(void)!ftruncate(fd, st.st_size);
	return -ENOSPC;
}

void
audit_log_write(struct audit_log *l, const char *text)
{
	_cleanup_free_ char *line = NULL;
	int r;

	if (!l || !text)
		return;
	line = strdup_printf("%s\n", text);
	r = line ? append(l, line, strlen(line)) : -ENOMEM;
	if (r < 0) {
		if (!l->failing)
			log_warning("audit log '%s': cannot write a record: %s; requests go on, "
			            "and records are missing from the file until it can be written",
			            l->path, strerror(-r));
		l->failing = true;
		l->missed++;
		return;
	}
	if (l->failing)
		log_info("audit log '%s': written again; %llu record(s) could not be written "
		         "meanwhile",
		         l->path, (unsigned long long)l->missed);
	l->failing = false;
	l->missed = 0;
}

struct audit_log *
audit_log_free(struct audit_log *l)
{
	if (!l)
		return NULL;
	free(l->path);
	free(l);
	return NULL;
}
