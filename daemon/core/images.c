/* images.c: see images.h. An install is a child, `sandboxd image install --progress-fd 3`
 * (image-install.c): it parses what registries send and what layers hold, so a hostile image
 * can at worst crash that child, never the loop. The loop reads its JSON lines, keeps the
 * per-layer progress, broadcasts it, and when the child ends either records the image (from
 * its "done" line) or tells the waiters why it failed. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "events.h"
#include "bundle.h"
#include "image-install.h"
#include "images.h"
#include "log.h"
#include "oci.h"
#include "sandboxd.h"
#include "snapshots.h"
#include "strv.h"
#include "tool.h"
#include "util.h"

#define PROGRESS_LINE_MAX (64u * 1024)
#define RECORD_MAX (4u << 20)
#define LAYER_KEEP_MS                                                                              \
	(10 * 60 * 1000) /* a removal leaves layers this recent: a create may                      \
	                  * be about to use them */

struct install_job {
	struct sandboxd *d;
	struct image *img;
	pid_t pid;
	int fd; /* the child's progress lines; -1 once they ended */
	struct loop_source src;
	struct loop_child exit_watch; /* watching until the child exited */
	struct buf line;
	bool line_too_long; /* the line being read went over PROGRESS_LINE_MAX */
	bool done;          /* it said "done": its record is in images/refs */
	int error;          /* from its "error" line */
	char *message;      /* likewise */
};

struct images {
	struct list_node all; /* struct image, by link */
	char agent_id[IMAGE_AGENT_ID_LEN + 1];
};

static struct images *
images_of(struct sandboxd *d)
{
	return d->images;
}

/* ---- records ---- */

static struct image *
find(struct sandboxd *d, const char *name)
{
	struct list_node *n;

	LIST_FOREACH (n, &images_of(d)->all) {
		struct image *img = list_entry(n, struct image, link);
		if (streq(img->name, name))
			return img;
	}
	return NULL;
}

#define FOREACH_IMAGE(d, img, n, tmp)                                                              \
	LIST_FOREACH_SAFE (n, tmp, &images_of(d)->all)                                             \
		if (((img) = list_entry(n, struct image, link)), true)

static void
image_free(struct image *img)
{
	if (!img)
		return;
	free(img->name);
	free(img->digest);
	free(img->disk);
	strv_free(img->env);
	json_decref(img->progress);
	json_decref(img->layers);
	free(img);
}

static struct image *
image_new(const char *name)
{
	struct image *img = calloc(1, sizeof(*img));

	if (!img)
		return NULL;
	img->name = strdup(name);
	if (!img->name) {
		free(img);
		return NULL;
	}
	list_init(&img->waiters);
	list_init(&img->link);
	return img;
}

/* Whether path is a file directly under <state>/rootfs/ (what the child may name). */
static bool
disk_path_valid(struct sandboxd *d, const char *path)
{
	_cleanup_free_ char *prefix = strdup_printf("%s/rootfs/", d->opts->state_dir);
	const char *rest;

	if (!prefix || !str_has_prefix(path, prefix))
		return false;
	rest = path + strlen(prefix);
	return *rest && *rest != '.' && !strchr(rest, '/');
}

/* Takes an install record ({image, digest, disk, env, layers, size_bytes, installed_at}).
 * The child that wrote it handled hostile bytes: every field is checked before it is used
 * (the disk is a file of <state>/rootfs, the layers are digests). */
static int
image_fill(struct sandboxd *d, struct image *img, json_t *rec)
{
	const char *digest = NULL, *disk = NULL;
	json_t *env = NULL, *layers = NULL, *v;
	json_int_t size = 0, at = 0;
	size_t i, n = 0;

	if (json_unpack(rec, "{s:s, s:s, s:o, s:o, s?I, s?I}", "digest", &digest, "disk", &disk,
	                "env", &env, "layers", &layers, "size_bytes", &size, "installed_at",
	                &at) < 0 ||
	    !json_is_array(env) || !json_is_array(layers) || !oci_digest_valid(digest) ||
	    !disk_path_valid(d, disk))
		return -EINVAL;
	json_array_foreach (layers, i, v)
		if (!json_is_string(v) || !oci_digest_valid(json_string_value(v)))
			return -EINVAL;
	/* a second fill (a disk built again) replaces what the first one set */
	free(img->digest);
	free(img->disk);
	strv_free(img->env);
	img->digest = strdup(digest);
	img->disk = strdup(disk);
	img->env = calloc(json_array_size(env) + 1, sizeof(char *));
	if (!img->digest || !img->disk || !img->env)
		return -ENOMEM;
	json_array_foreach (env, i, v) {
		const char *kv = json_string_value(v);
		/* a sandbox's HOME and USER are the sandbox user's, whatever the image says */
		if (!kv || !strchr(kv, '=') || str_has_prefix(kv, "HOME=") ||
		    str_has_prefix(kv, "USER="))
			continue;
		img->env[n] = strdup(kv);
		if (!img->env[n++])
			return -ENOMEM;
	}
	json_decref(img->layers);
	img->layers = json_incref(layers);
	img->size_bytes = size > 0 ? (uint64_t)size : 0;
	img->installed_at = at;
	img->state = IMAGE_INSTALLED;
	img->rebuild = false;
	return 0;
}

/* Reads one record of images/refs/ (want: the name it must be for, or NULL) and adds the
 * image. NULL when it is missing, unreadable, for another name or its disk is gone. */
static struct image *
load_record(struct sandboxd *d, const char *path, const char *want)
{
	_cleanup_free_ char *text = NULL;
	struct image *img = NULL;
	const char *name;
	json_t *rec;
	size_t len;

	if (read_file_max(path, RECORD_MAX, &text, &len) < 0)
		return NULL;
	rec = json_loadb(text, len, 0, NULL);
	name = json_string_value(json_object_get(rec, "image"));
	if (name && (!want || streq(want, name)))
		img = image_new(name);
	if (img && image_fill(d, img, rec) == 0 && access(img->disk, R_OK) < 0)
		img->rebuild = true;
	if (!img || img->state != IMAGE_INSTALLED || find(d, name)) {
		if (!want)
			log_warning("image record '%s' is unusable; ignored", path);
		image_free(img);
		img = NULL;
	} else {
		list_push_back(&images_of(d)->all, &img->link);
	}
	json_decref(rec);
	return img;
}

/* Reads images/refs/ at start: what earlier installs left. A record whose disk is gone (an
 * agent upgrade removed it) is installed again on first use. */
static int
load_records(struct sandboxd *d)
{
	_cleanup_free_ char *dir = strdup_printf("%s/images/refs", d->opts->state_dir);
	DIR *dh;
	struct dirent *de;
	int n = 0;

	if (!dir)
		return -ENOMEM;
	dh = opendir(dir);
	if (!dh)
		return errno == ENOENT ? 0 : negative_errno();
	while ((de = readdir(dh))) {
		_cleanup_free_ char *path = NULL;
		size_t len = strlen(de->d_name);

		if (len < 6 || !streq(de->d_name + len - 5, ".json"))
			continue;
		path = strdup_printf("%s/%s", dir, de->d_name);
		if (path && load_record(d, path, NULL))
			n++;
	}
	closedir(dh);
	if (n)
		log_info("images: %d installed", n);
	return 0;
}

/* Removes the entries of state_dir/sub whose names hold mark (all of them: NULL): unfinished
 * blobs and disks ("NAME.partial-PID"), build trees ("build-PID-XXXXXX"). */
static void
remove_marked(const char *state_dir, const char *sub, const char *mark)
{
	_cleanup_free_ char *dir = strdup_printf("%s/%s", state_dir, sub);
	struct dirent *de;
	DIR *dh;

	if (!dir || !(dh = opendir(dir)))
		return;
	while ((de = readdir(dh))) {
		_cleanup_free_ char *path = NULL;
		if (de->d_name[0] == '.' || (mark && !strstr(de->d_name, mark)))
			continue;
		path = strdup_printf("%s/%s", dir, de->d_name);
		if (path)
			rm_rf(path);
	}
	closedir(dh);
}

/* What an install that did not finish left: its partial files and its build tree. */
static void
remove_leftovers_of(const char *state_dir, pid_t pid)
{
	char partial[32], build[32];

	snprintf(partial, sizeof(partial), ".partial-%d", (int)pid);
	snprintf(build, sizeof(build), "build-%d-", (int)pid);
	remove_marked(state_dir, "images/blobs/sha256", partial);
	remove_marked(state_dir, "rootfs", partial);
	remove_marked(state_dir, "images/tmp", build);
}

int
images_init(struct sandboxd *d)
{
	_cleanup_free_ char *tmp = strdup_printf("%s/images/tmp", d->opts->state_dir);
	_cleanup_free_ char *agent =
	        d->opts->agent ? strdup(d->opts->agent) : bundle_default_agent();
	struct images *im = calloc(1, sizeof(*im));

	if (!im || !tmp || !agent) {
		free(im);
		return -ENOMEM;
	}
	list_init(&im->all);
	d->images = im;
	/* what installs a crash or a stop interrupted: build trees, unfinished blobs and disks */
	rm_rf(tmp);
	remove_marked(d->opts->state_dir, "images/blobs/sha256", ".partial-");
	remove_marked(d->opts->state_dir, "rootfs", ".partial-");
	if (image_agent_id(agent, im->agent_id) < 0)
		im->agent_id[0] = '\0'; /* no agent: no VM backend either; keep every disk */
	return load_records(d);
}

static void job_end(struct install_job *job, bool kill_child);
static void waiters_done(struct image *img, int error, const char *why);

void
images_free(struct sandboxd *d)
{
	struct images *im = images_of(d);
	struct list_node *n, *tmp;
	struct image *img;

	if (!im)
		return;
	FOREACH_IMAGE(d, img, n, tmp)
	{
		if (img->job)
			job_end(img->job, true);
		waiters_done(img, -ECANCELED, "sandboxd is stopping");
		image_free(img);
	}
	free(im);
	d->images = NULL;
}

int
images_add_builtin(struct sandboxd *d, const char *name, const char *disk)
{
	struct image *img = image_new(name);
	struct stat st;

	if (!img || !(img->disk = strdup(disk)) || !(img->env = calloc(1, sizeof(char *)))) {
		image_free(img);
		return -ENOMEM;
	}
	img->builtin = true;
	img->state = IMAGE_INSTALLED;
	if (stat(disk, &st) == 0)
		img->size_bytes = (uint64_t)st.st_blocks * 512;
	{
		/* a record of that name (installed by hand) gives way to the built-in disk */
		struct image *old = find(d, name);
		if (old) {
			list_remove(&old->link);
			image_free(old);
		}
	}
	list_push_back(&images_of(d)->all, &img->link);
	return 0;
}

const struct image *
images_installed(struct sandboxd *d, const char *name)
{
	struct image *img = find(d, name);

	return img && img->state == IMAGE_INSTALLED && !img->rebuild ? img : NULL;
}

/* How many sandboxes that have not ended start from name, and how many snapshots were taken
 * of one. */
static unsigned
users_of(struct sandboxd *d, const char *name)
{
	struct list_node *n;
	unsigned count = 0;

	LIST_FOREACH (n, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (streq(sb->image, name) && sb->state != SANDBOX_TERMINATED)
			count++;
	}
	/* a snapshot's layer is written over the image's disk: a fork needs it still */
	LIST_FOREACH (n, &d->snapshots)
		count += streq(list_entry(n, struct snapshot, link)->image, name);
	return count;
}

/* Whether a disk is one some installed image (or a live sandbox's) boots from. */
static bool
disk_in_use(struct sandboxd *d, const char *disk, const struct image *except)
{
	struct list_node *n, *tmp;
	struct image *img;

	FOREACH_IMAGE(d, img, n, tmp)
	if (img != except && img->disk && streq(img->disk, disk))
		return true;
	return false;
}

void
images_collect_old_disks(struct sandboxd *d)
{
	struct images *im = images_of(d);
	_cleanup_free_ char *dir = strdup_printf("%s/rootfs", d->opts->state_dir);
	uint64_t freed = 0;
	unsigned removed = 0;
	struct dirent *de;
	DIR *dh;

	if (!dir || !im->agent_id[0] || !(dh = opendir(dir)))
		return;
	while ((de = readdir(dh))) {
		_cleanup_free_ char *path = NULL;
		const char *dash = strrchr(de->d_name, '-');
		struct stat st;

		if (de->d_name[0] == '.' || !dash ||
		    !strncmp(dash + 1, im->agent_id, IMAGE_AGENT_ID_LEN))
			continue; /* this agent's, or not a disk of ours */
		path = strdup_printf("%s/%s", dir, de->d_name);
		if (!path || lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		{
			/* kept while a live sandbox boots from it */
			struct list_node *n, *tmp;
			struct image *img;
			bool live = false;
			FOREACH_IMAGE(d, img, n, tmp)
			if (img->disk && streq(img->disk, path) && users_of(d, img->name))
				live = true;
			if (live)
				continue;
		}
		if (unlink(path) == 0) {
			removed++;
			freed += (uint64_t)st.st_blocks * 512;
		}
	}
	closedir(dh);
	if (removed)
		log_info("images: removed %u root disk(s) built for another guest agent (%" PRIu64
		         " MiB freed); their images are built again on first use",
		         removed, freed >> 20);
	/* the images whose disk went stay installed: the first sandbox of one builds its disk
	 * again, from the layer cache */
	{
		struct list_node *n, *tmp;
		struct image *img;
		FOREACH_IMAGE(d, img, n, tmp)
		if (!img->builtin && img->disk && access(img->disk, F_OK) < 0)
			img->rebuild = true;
	}
}

/* ---- checks ---- */

int
images_check(struct sandboxd *d, const char *name, struct err *err)
{
	struct image *img = find(d, name);
	_cleanup_free_ char *why = NULL;
	struct oci_ref ref;

	if (!image_ref_valid(name))
		return err_set(err, -EINVAL, ERR_INVALID,
		               "'%s' is not an image reference (such as python:3.13-slim)", name);
	if (!policy_image_allowed(&d->policy, name))
		return err_set(err, -EPERM, ERR_REFUSED,
		               "image \"%s\" is not one this server permits", name);
	if ((img && img->builtin) || image_is_base(name))
		return 0;
	if (oci_ref_parse(name, &ref, &why) < 0)
		return err_set(err, -EINVAL, ERR_INVALID, "image '%s': %s", name,
		               why ? why : "not a valid reference");
	oci_ref_done(&ref);
	return 0;
}

int
images_check_user_pull(struct sandboxd *d, const char *name, struct err *err)
{
	_cleanup_free_ char *record = NULL;

	if (d->opts->user_pull || find(d, name) || image_is_base(name))
		return 0;
	/* installed by hand meanwhile: images_install takes its record, pulling nothing */
	record = image_ref_path(d->opts->state_dir, name);
	if (!record)
		return err_set(err, -ENOMEM, ERR_INTERNAL, "out of memory");
	if (access(record, F_OK) == 0)
		return 0;
	return err_set(err, -EPERM, ERR_REFUSED,
	               "image '%s' is not installed, and on this server users do not install "
	               "images (--user-pull off): an admin installs it first",
	               name);
}

int
images_install_error(int error, const char *why, struct err *err)
{
	const char *m = why ? why : strerror(-error);

	switch (error) {
	case -EINVAL:
		return err_set(err, error, ERR_INVALID, "%s", m);
	case -EPERM: /* the registry address guard: nothing was sent there */
		return err_set(err, error, ERR_REFUSED, "%s", m);
	case -ENOENT:
	case -EACCES:
		return err_set(err, error, ERR_NOT_FOUND, "%s", m);
	case -ENOMEM:
		return err_set(err, error, ERR_INTERNAL, "%s", m);
	default: /* the network, a registry that sent bad content, a full disk */
		return err_set(err, error, ERR_UNAVAILABLE, "%s", m);
	}
}

/* ---- events ---- */

static void
broadcast(struct sandboxd *d, const char *type, json_t *data)
{
	events_broadcast_node(d, type, data);
}

/* ---- install jobs ---- */

static void
waiters_done(struct image *img, int error, const char *why)
{
	while (!list_empty(&img->waiters)) {
		struct image_waiter *w = list_entry(img->waiters.next, struct image_waiter, link);
		list_remove(&w->link);
		w->fn(w, error ? NULL : img, error, why);
	}
}

void
image_waiter_cancel(struct image_waiter *w)
{
	list_remove(&w->link);
}

static void
progress_update(struct install_job *job, json_t *msg)
{
	struct image *img = job->img;
	const char *layer = json_string_value(json_object_get(msg, "layer"));
	json_t *done = json_object_get(msg, "done"), *total = json_object_get(msg, "total");
	json_t *entry = NULL, *v;
	size_t i;

	if (!layer || !oci_digest_valid(layer) || !json_is_integer(done) ||
	    !json_is_integer(total) || !json_is_integer(json_object_get(msg, "index")) ||
	    !json_is_integer(json_object_get(msg, "count")))
		return;
	json_array_foreach (img->progress, i, v)
		if (json_equal(json_object_get(v, "digest"), json_object_get(msg, "layer")))
			entry = v;
	if (!entry) {
		if (json_array_size(img->progress) >= OCI_LAYERS_MAX)
			return;
		entry = json_pack("{s:s}", "digest", layer);
		if (!entry || json_array_append_new(img->progress, entry) < 0)
			return;
	}
	json_object_set(entry, "done", done);
	json_object_set(entry, "total", total);
	broadcast(job->d, "image.progress",
	          json_pack("{s:s, s:s, s:O, s:O, s:O, s:O}", "image", img->name, "layer", layer,
	                    "done", done, "total", total, "index", json_object_get(msg, "index"),
	                    "count", json_object_get(msg, "count")));
}

/* One JSON line from the child. It is ours, but it handled hostile bytes: parse strictly. */
static void
job_line(struct install_job *job, const char *text, size_t len)
{
	json_t *msg = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	const char *ev = json_string_value(json_object_get(msg, "event"));

	if (!ev) {
		log_warning("image '%s': unreadable progress line ignored", job->img->name);
	} else if (streq(ev, "progress")) {
		progress_update(job, msg);
	} else if (streq(ev, "resolved")) {
		const char *digest = json_string_value(json_object_get(msg, "digest"));
		if (digest && oci_digest_valid(digest) && !job->img->digest)
			job->img->digest = strdup(digest);
	} else if (streq(ev, "phase")) {
		static const char *const phases[] = { "resolve", "fetch", "unpack", "disk" };
		const char *ph = json_string_value(json_object_get(msg, "phase"));
		bool known = false;
		for (size_t i = 0; ph && i < ARRAY_SIZE(phases); i++)
			known = known || streq(ph, phases[i]);
		if (known)
			broadcast(job->d, "image.progress",
			          json_pack("{s:s, s:s}", "image", job->img->name, "phase", ph));
	} else if (streq(ev, "done")) {
		/* the record itself is read from images/refs, not from this line */
		job->done = true;
	} else if (streq(ev, "error")) {
		const char *m = json_string_value(json_object_get(msg, "message"));
		json_int_t e = json_integer_value(json_object_get(msg, "errno"));
		job->error = e > 0 && e < 4096 ? -(int)e : -EIO;
		free(job->message);
		job->message =
		        m ? termsafe_dup(m) : NULL; /* the child's, but quoting hostile bytes */
		if (job->message && strlen(job->message) > 1024)
			job->message[1024] = '\0';
	}
	json_decref(msg);
}

static void
job_free(struct install_job *job)
{
	loop_remove(&job->src); /* safe when never added or already removed */
	loop_child_done(&job->exit_watch);
	safe_close(job->fd);
	buf_free(&job->line);
	free(job->message);
	free(job);
}

/* Reads the record the child wrote into img. */
static int
job_record(struct install_job *job)
{
	_cleanup_free_ char *path = image_ref_path(job->d->opts->state_dir, job->img->name);
	_cleanup_free_ char *text = NULL;
	size_t len;
	json_t *rec;
	int r;

	if (!path)
		return -ENOMEM;
	r = read_file_max(path, RECORD_MAX, &text, &len);
	if (r < 0)
		return r;
	rec = json_loadb(text, len, 0, NULL);
	r = rec && streq(json_string_value(json_object_get(rec, "image")) ?: "", job->img->name)
	            ? image_fill(job->d, job->img, rec)
	            : -EPROTO;
	json_decref(rec);
	if (r == 0 && access(job->img->disk, R_OK) < 0)
		r = -ENOENT; /* removed under it */
	return r;
}

/* The child ended (its pipe closed and it exited), or sandboxd stops (kill_child): reap it,
 * then record the image or drop it. Never waits: the child has exited, or was killed. */
static void
job_end(struct install_job *job, bool kill_child)
{
	struct sandboxd *d = job->d;
	struct image *img = job->img;
	int status = 0, r = 0;
	char why[1200];

	if (kill_child) {
		(void)kill(-job->pid, SIGKILL); /* its group: mkfs.ext4 goes with it */
		while (waitpid(job->pid, &status, 0) < 0 && errno == EINTR)
			;
		remove_leftovers_of(d->opts->state_dir, job->pid);
		img->job = NULL;
		job_free(job);
		return;
	}
	while (waitpid(job->pid, &status, WNOHANG) < 0 && errno == EINTR)
		;
	img->job = NULL;
	if (job->done && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		r = job_record(job);
	else
		r = job->error ? job->error : -EIO;
	if (r == 0) {
		json_decref(img->progress);
		img->progress = NULL;
		log_info("image '%s': installed (%s, %" PRIu64 " MiB)", img->name, img->digest,
		         img->size_bytes >> 20);
		broadcast(d, "image.installed",
		          json_pack("{s:s, s:s, s:I}", "image", img->name, "digest", img->digest,
		                    "size_bytes", (json_int_t)img->size_bytes));
		job_free(job);
		waiters_done(img, 0, NULL);
		return;
	}
	if (job->message)
		snprintf(why, sizeof(why), "%s", job->message);
	else if (WIFSIGNALED(status))
		snprintf(why, sizeof(why), "image '%s': the install was killed by signal %d",
		         img->name, WTERMSIG(status));
	else
		snprintf(why, sizeof(why), "image '%s': the install failed (exit %d)", img->name,
		         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	log_warning("image '%s': install failed: %s", img->name, why);
	/* a crashed or killed child cleaned nothing up: its tools go (its group), and its files
	 * now, not at the next start */
	(void)kill(-job->pid, SIGKILL);
	remove_leftovers_of(d->opts->state_dir, job->pid);
	broadcast(d, "image.failed", json_pack("{s:s, s:s}", "image", img->name, "error", why));
	job_free(job);
	/* nothing of it is offered: the waiters hear why, and a later request tries again */
	list_remove(&img->link);
	waiters_done(img, r, why);
	image_free(img);
}

static void
job_readable(struct loop_source *src, uint32_t events, void *data)
{
	struct install_job *job = data;
	char chunk[16384];
	ssize_t n = read(job->fd, chunk, sizeof(chunk));

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		/* its lines ended; the job ends when the child has exited too */
		loop_remove(&job->src);
		job->fd = safe_close(job->fd);
		if (!loop_child_watching(&job->exit_watch))
			job_end(job, false);
		return;
	}
	for (const char *p = chunk, *end = chunk + n; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t run = (size_t)((nl ? nl : end) - p);

		/* a line longer than any the child writes is dropped whole, never parsed cut */
		if (job->line.len + run > PROGRESS_LINE_MAX)
			job->line_too_long = true;
		else
			(void)buf_append(&job->line, p, run);
		p += run;
		if (!nl)
			break;
		p++;
		if (job->line_too_long)
			log_warning("image '%s': a progress line over %u bytes ignored",
			            job->img->name, PROGRESS_LINE_MAX);
		else
			job_line(job, job->line.data, job->line.len);
		buf_reset(&job->line);
		job->line_too_long = false;
	}
}

static void
job_exited(struct loop_child *c _unused_, void *data)
{
	struct install_job *job = data;

	/* a child that exits keeps its last lines in the pipe: read them first */
	if (job->fd < 0)
		job_end(job, false);
}

/* Starts `sandboxd image install` for img; its fd 3 is the progress pipe. */
static int
job_start(struct sandboxd *d, struct image *img)
{
	const struct options *o = d->opts;
	_cleanup_free_ char *exe = NULL;
	_cleanup_strv_ char **argv = NULL;
	struct install_job *job;
	int pipefd[2], r;
	size_t n = 0;

	exe = realpath("/proc/self/exe", NULL);
	if (!exe)
		return -ENOMEM;
	r = strv_extend(&argv, &n, "sandboxd", "image", "install", "--quiet", "--progress-fd", "3",
	                "--state-dir", o->state_dir, NULL);
	if (r >= 0 && o->agent)
		r = strv_extend(&argv, &n, "--agent", o->agent, NULL);
	if (r >= 0 && images_of(d)->agent_id[0]) /* hashed once, at start */
		r = strv_extend(&argv, &n, "--agent-id", images_of(d)->agent_id, NULL);
	for (size_t i = 0; r >= 0 && i < o->n_insecure_registries; i++)
		r = strv_extend(&argv, &n, "--insecure-registry", o->insecure_registries[i], NULL);
	for (size_t i = 0; r >= 0 && i < o->n_local_registries; i++)
		r = strv_extend(&argv, &n, "--local-registry", o->local_registries[i], NULL);
	if (r >= 0)
		r = strv_extend(&argv, &n, "--", img->name, NULL);
	if (r < 0)
		return r;
	job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		free(job);
		return negative_errno();
	}
	{
		/* a group of its own, so that stopping it stops the tools it runs */
		struct spawn sp = { .path = exe,
			            .fds = { -1, -1, SPAWN_INHERIT, pipefd[1] },
			            .n_fds = 4,
			            .own_group = true };
		r = spawn_child(&sp, (const char *const *)argv, &job->pid);
	}
	close(pipefd[1]);
	if (r < 0) {
		close(pipefd[0]);
		free(job);
		return r;
	}
	job->d = d;
	job->img = img;
	job->fd = pipefd[0];
	buf_init(&job->line, PROGRESS_LINE_MAX);
	r = loop_child_watch(d->loop, &job->exit_watch, job->pid, job_exited, job);
	if (r >= 0)
		r = loop_add(d->loop, &job->src, job->fd, EPOLLIN, job_readable, job);
	if (r < 0) {
		img->job = job;
		job_end(job, true);
		return r;
	}
	img->job = job;
	log_info("image '%s': installing", img->name);
	return 0;
}

int
images_install(struct sandboxd *d, const char *name, struct image_waiter *w, struct err *err)
{
	struct images *im = images_of(d);
	struct image *img = find(d, name);
	int r;

	if (img && img->state == IMAGE_INSTALLED && !img->rebuild)
		return 1;
	if (!img) {
		/* installed by hand meanwhile (`sandboxd image install`, `image build-base`) */
		_cleanup_free_ char *path = image_ref_path(d->opts->state_dir, name);
		img = path ? load_record(d, path, name) : NULL;
		if (img && !img->rebuild)
			return 1;
	}
	if (!img || !img->job) {
		if (!img) {
			img = image_new(name);
			if (!img)
				return err_set(err, -ENOMEM, ERR_INTERNAL, "out of memory");
			list_push_back(&im->all, &img->link);
		}
		img->state = IMAGE_INSTALLING;
		json_decref(img->progress);
		img->progress = json_array();
		r = img->progress ? job_start(d, img) : -ENOMEM;
		if (r < 0) {
			err_set(err, r, ERR_INTERNAL, "cannot start installing '%s': %s", name,
			        strerror(-r));
			list_remove(&img->link);
			image_free(img);
			return r;
		}
		broadcast(d, "image.progress",
		          json_pack("{s:s, s:s}", "image", name, "phase", "queued"));
	}
	if (w)
		list_push_back(&img->waiters, &w->link);
	return 0;
}

/* ---- the API's view ---- */

json_t *
image_to_json(struct sandboxd *d, const struct image *img)
{
	json_t *o = json_pack(
	        "{s:s, s:s?, s:s, s:I, s:b, s:i}", "image", img->name, "digest", img->digest,
	        "state", img->state == IMAGE_INSTALLED ? "installed" : "installing", "size_bytes",
	        (json_int_t)img->size_bytes, "default", streq(img->name, d->policy.default_image),
	        "in_use", (int)users_of(d, img->name));

	if (o && img->builtin)
		json_object_set_new(o, "builtin", json_true());
	if (o && img->rebuild && img->state == IMAGE_INSTALLED)
		json_object_set_new(o, "rebuild", json_true());
	if (o && img->state == IMAGE_INSTALLING && img->progress)
		json_object_set(o, "layers", img->progress);
	if (o && img->installed_at) {
		char when[32];
		format_rfc3339(img->installed_at, when);
		json_object_set_new(o, "installed_at", json_string(when));
	}
	return o;
}

json_t *
images_get_json(struct sandboxd *d, const char *name)
{
	struct image *img = find(d, name);

	return img ? image_to_json(d, img) : NULL;
}

static int
by_name(const void *a, const void *b)
{
	return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "image")),
	              json_string_value(json_object_get(*(json_t *const *)b, "image")));
}

json_t *
images_list_json(struct sandboxd *d)
{
	json_t *list = json_array(), **v;
	struct list_node *ln, *tmp;
	struct image *img;
	size_t n = 0;

	if (!list)
		return NULL;
	FOREACH_IMAGE(d, img, ln, tmp)
	json_array_append_new(list, image_to_json(d, img));
	if (!find(d, d->policy.default_image))
		json_array_append_new(list,
		                      json_pack("{s:s, s:n, s:s, s:i, s:b, s:i}", "image",
		                                d->policy.default_image, "digest", "state",
		                                "absent", "size_bytes", 0, "default", 1, "in_use",
		                                (int)users_of(d, d->policy.default_image)));
	/* sorted by name: a stable order for people and scripts */
	n = json_array_size(list);
	v = calloc(n + 1, sizeof(*v));
	if (v) {
		for (size_t i = 0; i < n; i++)
			v[i] = json_incref(json_array_get(list, i));
		qsort(v, n, sizeof(*v), by_name);
		json_array_clear(list);
		for (size_t i = 0; i < n; i++)
			json_array_append_new(list, v[i]);
		free(v);
	}
	return json_pack("{s:o}", "images", list);
}

/* Removes the cached layers no installed image uses, except those written lately. Called by a
 * removal, which no install under way can meet (images_remove refuses then). */
static void
collect_layers(struct sandboxd *d)
{
	_cleanup_free_ char *dir = strdup_printf("%s/images/blobs/sha256", d->opts->state_dir);
	int64_t now = now_unix_ms();
	struct dirent *de;
	unsigned removed = 0;
	DIR *dh;

	if (!dir || !(dh = opendir(dir)))
		return;
	while ((de = readdir(dh))) {
		_cleanup_free_ char *path = NULL, *digest = NULL;
		struct list_node *n, *tmp;
		struct image *img;
		struct stat st;
		bool used = false;

		if (de->d_name[0] == '.')
			continue;
		path = strdup_printf("%s/%s", dir, de->d_name);
		digest = strdup_printf("sha256:%s", de->d_name);
		if (!path || !digest || lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (now - (int64_t)st.st_mtime * 1000 < LAYER_KEEP_MS)
			continue;
		FOREACH_IMAGE(d, img, n, tmp)
		{
			size_t i;
			json_t *v;
			json_array_foreach (img->layers, i, v)
				used = used || streq(json_string_value(v), digest);
		}
		if (!used && unlink(path) == 0)
			removed++;
	}
	closedir(dh);
	if (removed)
		log_info("images: removed %u cached layer(s) no image uses", removed);
}

static bool
installs_under_way(struct sandboxd *d)
{
	struct list_node *n, *tmp;
	struct image *img;

	FOREACH_IMAGE(d, img, n, tmp)
	if (img->job)
		return true;
	return false;
}

int
images_remove(struct sandboxd *d, const char *name, struct err *err)
{
	struct image *img = find(d, name);
	_cleanup_free_ char *ref = NULL;
	unsigned users;

	if (!img)
		return err_set(err, -ENOENT, ERR_NOT_FOUND, "image '%s' is not installed", name);
	if (img->job)
		return err_set(err, -EBUSY, ERR_CONFLICT, "image '%s' is being installed", name);
	if (installs_under_way(d)) {
		/* another name may be building this very disk (two spellings of one image) */
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "an image is being installed; remove '%s' once it is done", name);
	}
	if (img->builtin)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "image '%s' is built in (sandboxd setup made it)", name);
	if (streq(name, d->policy.default_image))
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "image '%s' is the default image; it is kept", name);
	for (size_t i = 0; i < d->policy.n_pools; i++)
		if (d->policy.pools[i].image && streq(name, d->policy.pools[i].image))
			return err_set(err, -EBUSY, ERR_CONFLICT,
			               "image '%s' has a pool in the policy; it is kept", name);
	users = users_of(d, name);
	if (users)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "image '%s' is used by %u sandbox(es) or snapshot(s)", name, users);
	ref = image_ref_path(d->opts->state_dir, name);
	if (!ref || (unlink(ref) < 0 && errno != ENOENT))
		return err_set(err, -EIO, ERR_INTERNAL, "cannot remove the record of '%s'", name);
	list_remove(&img->link);
	if (img->disk && !disk_in_use(d, img->disk, img))
		(void)unlink(img->disk);
	log_info("image '%s': removed", name);
	broadcast(d, "image.removed", json_pack("{s:s}", "image", name));
	image_free(img);
	collect_layers(d);
	return 0;
}
