/* files.c: see files.h. The agent runs as root; new files and directories are given to the
 * sandbox user when processes run as that user. Paths arrive checked by the host and are
 * checked again (request_path_valid). */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include "agent.h"
#include "agentproto.h"
#include "files.h"
#include "frame.h"
#include "list.h"
#include "log.h"
#include "request.h"
#include "tlv.h"
#include "util.h"

struct dirent_info {
	char *name;
	uint8_t ftype;
	uint64_t size;
};

struct file_job {
	struct list_node node;
	struct agent *agent;
	uint32_t chan;
	uint8_t type; /* AP_FILE_READ, AP_FILE_WRITE or AP_FILE_LIST */
	int fd;
	uint64_t limit; /* read: most bytes wanted; write: bytes announced */
	uint64_t done;  /* bytes sent or written */
	char *path, *tmp;
	mode_t mode;
	struct dirent_info *ents;
	size_t nents, next;
};

static uint8_t chunk[CHUNK];

static struct file_job *
job_new(struct agent *a, uint32_t chan, uint8_t type)
{
	struct file_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->agent = a;
	j->chan = chan;
	j->type = type;
	j->fd = -1;
	list_push_back(&a->jobs, &j->node);
	return j;
}

static void
job_free(struct file_job *j)
{
	list_remove(&j->node);
	safe_close(j->fd);
	if (j->tmp)
		(void)unlink(j->tmp);
	for (size_t i = 0; i < j->nents; i++)
		free(j->ents[i].name);
	free(j->ents);
	free(j->tmp);
	free(j->path);
	free(j);
}

/* Ends the job with RESULT: ERRNO err, or success with SIZE. */
static void
job_end(struct file_job *j, int err, const char *msg)
{
	struct agent *a = j->agent;

	if (err)
		(void)agent_result(a, j->chan, err, msg);
	else
		(void)agent_result_u64(a, j->chan, AP_T_SIZE, j->done);
	job_free(j);
}

static int
parse(struct agent *a, uint32_t chan, const void *payload, size_t len, struct request_file *ret)
{
	int r = request_parse_file(payload, len, ret);

	if (r < 0)
		(void)agent_result(a, chan, -r, "malformed file request");
	return r;
}

void
files_as_user(struct agent *a, bool user)
{
	/* the filesystem ids only: the agent keeps its other powers (mounting, signalling) */
	if (!a->switch_ids)
		return;
	if (user) {
		(void)setfsgid(a->gid);
		(void)setfsuid(a->uid);
	} else {
		(void)setfsuid(0);
		(void)setfsgid(0);
	}
}

/* --- FILE_READ --- */

void
files_read(struct agent *a, uint32_t chan, const void *payload, size_t len)
{
	_cleanup_(request_file_done) struct request_file f = { 0 };
	_cleanup_close_ int fd = -1;
	struct file_job *j;
	struct stat st;

	if (parse(a, chan, payload, len, &f) < 0)
		return;
	fd = open(f.path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) < 0) {
		(void)agent_result(a, chan, errno, NULL);
		return;
	}
	if (S_ISDIR(st.st_mode)) {
		(void)agent_result(a, chan, EISDIR, NULL);
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		(void)agent_result(a, chan, EINVAL, "not a regular file");
		return;
	}
	if (f.has_size && (uint64_t)st.st_size > f.size) {
		(void)agent_result(a, chan, EFBIG, NULL);
		return;
	}
	j = job_new(a, chan, AP_FILE_READ);
	if (!j) {
		(void)agent_result(a, chan, ENOMEM, NULL);
		return;
	}
	j->fd = TAKE_FD(fd);
	j->limit = f.has_size ? f.size : UINT64_MAX;
	agent_kick(a);
}

static void
pump_read(struct file_job *j)
{
	ssize_t n;

	do
		n = read(j->fd, chunk, sizeof(chunk));
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		job_end(j, errno, NULL);
		return;
	}
	if (n == 0) {
		job_end(j, 0, NULL);
		return;
	}
	/* the file grew past the limit since the check (or is a /proc file without a size) */
	if ((uint64_t)n > j->limit - j->done) {
		job_end(j, EFBIG, NULL);
		return;
	}
	if (agent_send(j->agent, AP_FILE_DATA, 0, j->chan, chunk, (size_t)n) < 0) {
		job_end(j, ENOBUFS, NULL);
		return;
	}
	j->done += (uint64_t)n;
}

/* --- FILE_WRITE --- */

/* mkdir -p, giving each directory it creates to the sandbox user. */
static int
mkdir_owned(struct agent *a, const char *dir)
{
	_cleanup_free_ char *p = strdup(dir);

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1;; s++) {
		if (*s == '/' || *s == '\0') {
			char c = *s;
			*s = '\0';
			if (mkdir(p, 0755) == 0) {
				if (a->switch_ids && chown(p, a->uid, a->gid) < 0)
					return negative_errno();
			} else if (errno != EEXIST) {
				/* an existing directory of a parent the user may not write */
				struct stat st;
				int e = errno;
				if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
					return -e;
			}
			*s = c;
			if (!c)
				return 0;
		}
	}
}

static void
write_finish(struct file_job *j)
{
	struct agent *a = j->agent;
	int fd = TAKE_FD(j->fd);
	int err = 0;

	if (a->switch_ids && fchown(fd, a->uid, a->gid) < 0)
		err = errno;
	if (!err && fchmod(fd, j->mode) < 0)
		err = errno;
	if (close(fd) < 0 && !err)
		err = errno;
	if (!err && rename(j->tmp, j->path) < 0)
		err = errno;
	if (!err) {
		free(j->tmp);
		j->tmp = NULL;
	}
	job_end(j, err, NULL);
}

void
files_write(struct agent *a, uint32_t chan, const void *payload, size_t len)
{
	_cleanup_(request_file_done) struct request_file f = { 0 };
	_cleanup_free_ char *dir = NULL;
	struct file_job *j;
	char *slash;
	int r;

	if (parse(a, chan, payload, len, &f) < 0)
		return;
	if (!f.has_size) {
		(void)agent_result(a, chan, EINVAL, "FILE_WRITE without SIZE");
		return;
	}
	slash = strrchr(f.path, '/');
	if (!slash[1]) {
		(void)agent_result(a, chan, EISDIR, NULL);
		return;
	}
	dir = slash == f.path ? strdup("/") : strndup(f.path, (size_t)(slash - f.path));
	j = dir ? job_new(a, chan, AP_FILE_WRITE) : NULL;
	if (!j) {
		(void)agent_result(a, chan, ENOMEM, NULL);
		return;
	}
	j->limit = f.size;
	j->mode = f.has_mode ? (mode_t)(f.mode & 07777) : 0644;
	j->path = TAKE_PTR(f.path);
	j->tmp =
	        strdup_printf("%s%s.%.200s.sbx-XXXXXX", dir, streq(dir, "/") ? "" : "/", slash + 1);
	if (!j->tmp) {
		job_end(j, ENOMEM, NULL);
		return;
	}
	r = mkdir_owned(a, dir);
	if (r < 0) {
		free(j->tmp);
		j->tmp = NULL;
		job_end(j, -r, NULL);
		return;
	}
	j->fd = mkostemp(j->tmp, O_CLOEXEC);
	if (j->fd < 0) {
		r = errno;
		free(j->tmp);
		j->tmp = NULL;
		job_end(j, r, NULL);
		return;
	}
	if (j->limit == 0)
		write_finish(j);
}

static struct file_job *
find(struct agent *a, uint32_t chan, uint8_t type)
{
	struct list_node *n;

	LIST_FOREACH (n, &a->jobs) {
		struct file_job *j = list_entry(n, struct file_job, node);
		if (j->chan == chan && j->type == type)
			return j;
	}
	return NULL;
}

void
files_data(struct agent *a, const struct frame *f)
{
	struct file_job *j = find(a, f->chan, AP_FILE_WRITE);
	const uint8_t *p = f->payload;
	size_t n = f->len;

	if (!j) {
		log_debug("FILE_DATA for no write in progress (%u) ignored", f->chan);
		return;
	}
	if (f->flags & AP_F_ABORT) {
		/* the host's client went: the temporary file goes, the target is untouched */
		job_end(j, ECANCELED, "the host gave the write up");
		return;
	}
	if (n > j->limit - j->done) {
		job_end(j, EINVAL, "more FILE_DATA than SIZE");
		return;
	}
	while (n > 0) {
		ssize_t k = write(j->fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			job_end(j, errno, NULL);
			return;
		}
		p += k;
		n -= (size_t)k;
		j->done += (uint64_t)k;
	}
	/* the data may end before SIZE (a body whose length was not known up front) */
	if (j->done == j->limit || (f->flags & AP_F_EOF))
		write_finish(j);
}

/* --- FILE_LIST --- */

static int
ent_cmp(const void *x, const void *y)
{
	return strcmp(((const struct dirent_info *)x)->name, ((const struct dirent_info *)y)->name);
}

static uint8_t
ftype_of(mode_t m)
{
	return S_ISREG(m) ? 'f' : S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'l' : 'o';
}

static int
read_dir(struct file_job *j, const char *path)
{
	DIR *d;
	struct dirent *de;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	size_t cap = 0;
	int r = 0;

	if (fd < 0)
		return negative_errno();
	d = fdopendir(fd);
	if (!d) {
		r = negative_errno();
		close(fd);
		return r;
	}
	while (r == 0 && (errno = 0, de = readdir(d))) {
		struct stat st;
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone meanwhile */
		if (j->nents == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct dirent_info *e = realloc(j->ents, ncap * sizeof(*e));
			if (!e) {
				r = -ENOMEM;
				break;
			}
			j->ents = e;
			cap = ncap;
		}
		j->ents[j->nents] = (struct dirent_info){ .name = strdup(de->d_name),
			                                  .ftype = ftype_of(st.st_mode),
			                                  .size = (uint64_t)st.st_size };
		if (!j->ents[j->nents].name)
			r = -ENOMEM;
		else
			j->nents++;
	}
	if (r == 0 && errno)
		r = negative_errno();
	closedir(d);
	if (r == 0 && j->nents)
		qsort(j->ents, j->nents, sizeof(*j->ents), ent_cmp);
	return r;
}

void
files_list(struct agent *a, uint32_t chan, const void *payload, size_t len)
{
	_cleanup_(request_file_done) struct request_file f = { 0 };
	struct file_job *j;
	int r;

	if (parse(a, chan, payload, len, &f) < 0)
		return;
	j = job_new(a, chan, AP_FILE_LIST);
	if (!j) {
		(void)agent_result(a, chan, ENOMEM, NULL);
		return;
	}
	r = read_dir(j, f.path);
	if (r < 0) {
		job_end(j, -r, NULL);
		return;
	}
	agent_kick(a);
}

static void
pump_list(struct file_job *j)
{
	_cleanup_buf_ struct buf b = BUF_INIT(AP_FRAME_MAX);
	struct dirent_info *e;
	int r;

	if (j->next == j->nents) {
		j->done = j->nents;
		job_end(j, 0, NULL);
		return;
	}
	e = &j->ents[j->next++];
	r = tlv_put_str(&b, AP_T_NAME, e->name);
	if (r >= 0)
		r = tlv_put_u8(&b, AP_T_FTYPE, e->ftype);
	if (r >= 0)
		r = tlv_put_u64(&b, AP_T_SIZE, e->size);
	if (r >= 0)
		r = agent_send(j->agent, AP_DIRENT, 0, j->chan, b.data, b.len);
	if (r < 0)
		job_end(j, -r, NULL);
}

/* --- FILE_REMOVE --- */

void
files_remove(struct agent *a, uint32_t chan, const void *payload, size_t len)
{
	_cleanup_(request_file_done) struct request_file f = { 0 };
	struct stat st;
	int r;

	if (parse(a, chan, payload, len, &f) < 0)
		return;
	if (lstat(f.path, &st) < 0)
		r = errno;
	else if (S_ISDIR(st.st_mode))
		r = rmdir(f.path) < 0 ? errno : 0;
	else
		r = unlink(f.path) < 0 ? errno : 0;
	/* a file's size goes to the host's audit trail (file.removed) */
	if (r == 0 && S_ISREG(st.st_mode))
		(void)agent_result_u64(a, chan, AP_T_SIZE, (uint64_t)st.st_size);
	else
		(void)agent_result(a, chan, r, NULL);
}

/* --- the pump --- */

bool
files_pump(struct agent *a)
{
	struct list_node *n, *t;
	bool progress = false;

	LIST_FOREACH_SAFE (n, t, &a->jobs) {
		struct file_job *j = list_entry(n, struct file_job, node);
		if (!agent_can_pump(a))
			break;
		if (j->type == AP_FILE_READ) {
			pump_read(j);
			progress = true;
		} else if (j->type == AP_FILE_LIST) {
			pump_list(j);
			progress = true;
		}
	}
	return progress;
}

void
files_session_end(struct agent *a)
{
	struct list_node *n, *t;

	LIST_FOREACH_SAFE (n, t, &a->jobs)
		job_free(list_entry(n, struct file_job, node));
}
