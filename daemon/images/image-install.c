/* image-install.c: see image-install.h. Runs in a child of sandboxd (or by hand), so it may
 * block; it never holds a layer in memory (blobs stream to the cache, layers stream from it
 * into the tree), and every result is written under a temporary name and renamed, so a crash
 * or a refused blob leaves nothing that looks installed. */
#include <ctype.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/statvfs.h>
#include "bundle.h"
#include "image-install.h"
#include "log.h"
#include "oci.h"
#include "paths.h"
#include "registry.h"
#include "strv.h"
#include "tool.h"
#include "unpack.h"
#include "util.h"

#define SANDBOX_UID 1001
#define DISK_SLACK_MB 32           /* free room in a root disk beyond what its tree needs */
#define FREE_RESERVE (1024u << 20) /* a fetch leaves this much of the state's filesystem */

/* ---- paths ---- */

char *
image_ref_path(const char *state_dir, const char *name)
{
	char hex[65];

	if (sha256_hex(name, strlen(name), hex) < 0)
		return NULL;
	return strdup_printf("%s/images/refs/%s.json", state_dir, hex);
}

char *
image_blob_path(const char *state_dir, const char *digest)
{
	if (!oci_digest_valid(digest))
		return NULL;
	return strdup_printf("%s/images/blobs/sha256/%s", state_dir, digest + strlen("sha256:"));
}

/* A local name is what sandboxd builds itself: [a-z0-9][a-z0-9._-]*, an optional :TAG. */
static bool
local_name_valid(const char *s, size_t n)
{
	if (n == 0 || n > 128 || !(isdigit((unsigned char)s[0]) || islower((unsigned char)s[0])))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) &&
		    !strchr("._-", s[i]))
			return false;
	return true;
}

bool
image_is_base(const char *name)
{
	return streq(name, IMAGE_BASE) || str_has_prefix(name, IMAGE_BASE ":");
}

char *
image_local_layout(const char *state_dir, const char *name, char **ret_tag)
{
	const char *colon = strchr(name, ':');
	size_t n = colon ? (size_t)(colon - name) : strlen(name);
	const char *tag = colon ? colon + 1 : "latest";
	_cleanup_free_ char *dir = NULL, *index = NULL;

	if (strchr(name, '/') || strchr(name, '@') || !local_name_valid(name, n) ||
	    !local_name_valid(tag, strlen(tag)))
		return NULL;
	dir = strdup_printf("%s/images/local/%.*s", state_dir, (int)n, name);
	index = dir ? strdup_printf("%s/index.json", dir) : NULL;
	if (!index || access(index, R_OK) < 0)
		return NULL;
	*ret_tag = strdup(tag);
	if (!*ret_tag)
		return NULL;
	return TAKE_PTR(dir);
}

int
image_agent_id(const char *agent, char out[static IMAGE_AGENT_ID_LEN + 1])
{
	char hex[65];
	int r = sha256_file(agent, hex);

	if (r < 0)
		return r;
	memcpy(out, hex, IMAGE_AGENT_ID_LEN);
	out[IMAGE_AGENT_ID_LEN] = '\0';
	return 0;
}

/* ---- progress ---- */

struct install {
	const struct install_opts *o;
	const char *name;
	uint64_t last_report; /* bytes of the current blob at the last progress line */
	size_t layer;         /* index of the layer being fetched */
	size_t n_layers;
};

/* One JSON line on the progress fd (best effort: sandboxd may have gone). */
static void
emit(const struct install *in, json_t *msg)
{
	_cleanup_free_ char *s = NULL;

	if (!msg)
		return;
	if (in->o->progress_fd >= 0) {
		s = json_dumps(msg, JSON_COMPACT);
		if (s) {
			size_t n = strlen(s);
			s[n] = '\n'; /* json_dumps leaves room for its NUL: reuse it */
			(void)write_all(in->o->progress_fd, s, n + 1);
		}
	}
	json_decref(msg);
}

static void
phase(const struct install *in, const char *what)
{
	if (!in->o->quiet)
		fprintf(stderr, "image %s: %s\n", in->name, what);
	emit(in, json_pack("{s:s, s:s}", "event", "phase", "phase", what));
}

static void
on_progress(const struct oci_descriptor *d, uint64_t done, void *data)
{
	struct install *in = data;

	/* a line per 1% or 4 MiB, whichever is more: enough for a progress bar */
	if (done != d->size && done - in->last_report < MAX(d->size / 100, 4u << 20))
		return;
	in->last_report = done;
	emit(in, json_pack("{s:s, s:s, s:I, s:I, s:i, s:i}", "event", "progress", "layer",
	                   d->digest, "done", (json_int_t)done, "total", (json_int_t)d->size,
	                   "index", (int)in->layer, "count", (int)in->n_layers));
}

/* ---- the root disk ---- */

/* Puts /sandbox/home (the sandbox user's) and the agent into the tree. An image may carry a
 * /sandbox of its own: a directory is kept, anything else (a symlink out, a file) replaced. */
static int
add_sandbox_dirs(int root_fd, const char *agent, char **ret_error)
{
	static const char *const dirs[] = { "sandbox", "sandbox/home", "sandbox/bin" };
	_cleanup_close_ int bin_fd = -1, out = -1, in = -1;
	struct stat st;

	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		if (fstatat(root_fd, dirs[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    !S_ISDIR(st.st_mode) && unlinkat(root_fd, dirs[i], 0) < 0)
			goto fail;
		if (mkdirat(root_fd, dirs[i], 0755) < 0 && errno != EEXIST)
			goto fail;
		if (fchmodat(root_fd, dirs[i], 0755, AT_SYMLINK_NOFOLLOW) < 0 && errno != ENOTSUP)
			goto fail;
	}
	if (geteuid() == 0 &&
	    (fchownat(root_fd, "sandbox", 0, 0, AT_SYMLINK_NOFOLLOW) < 0 ||
	     fchownat(root_fd, "sandbox/home", SANDBOX_UID, SANDBOX_UID, AT_SYMLINK_NOFOLLOW) < 0))
		goto fail;
	bin_fd = openat(root_fd, "sandbox/bin", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	in = open(agent, O_RDONLY | O_CLOEXEC);
	if (bin_fd < 0 || in < 0)
		goto fail;
	(void)unlinkat(bin_fd, "sandbox-guestd", 0);
	out = openat(bin_fd, "sandbox-guestd", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	             0755);
	if (out < 0)
		goto fail;
	for (;;) {
		char chunk[65536];
		ssize_t n = read(in, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto fail;
		if (n == 0)
			break;
		if (write_all(out, chunk, (size_t)n) < 0)
			goto fail;
	}
	return 0;
fail:
	*ret_error = strdup_printf("cannot put /sandbox into the image: %s", strerror(errno));
	return -EIO;
}

/* mkfs.ext4 -d: a raw ext4 without a journal. Its size comes from what the layers wrote
 * (an upper bound: whiteouts only remove), not from walking the tree again: a file takes its
 * bytes rounded up to a block, every entry an inode. The disk is sparse and read-only, so
 * room it does not use costs nothing. */
static int
make_disk(const char *tree, const struct unpack_stats *st, const char *disk, char **ret_error)
{
	_cleanup_free_ char *partial = strdup_printf("%s.partial-%d", disk, (int)getpid());
	char size_k[32], inodes[32];
	uint64_t kib, agent_size = 16u << 20; /* the agent and /sandbox: a bound */
	int r;

	if (!partial)
		return -ENOMEM;
	/* blocks, inode tables (256 bytes each), 10% for ext4's own metadata, and slack */
	kib = (st->bytes + st->entries * (4096 + 256) + agent_size) / 1024;
	kib += kib / 10 + DISK_SLACK_MB * 1024;
	snprintf(size_k, sizeof(size_k), "%" PRIu64 "k", kib);
	snprintf(inodes, sizeof(inodes), "%" PRIu64, st->entries + 4096);
	{
		const char *argv[] = {
			"mkfs.ext4",      "-q", "-F", "-t",    "ext4", "-b", "4096",      "-O",
			"^has_journal",   "-m", "0",  "-N",    inodes, "-L", "sbx-image", "-E",
			"root_owner=0:0", "-d", tree, partial, size_k, NULL
		};
		r = run_quiet(NULL, argv, ret_error);
	}
	if (r >= 0 && rename(partial, disk) < 0) {
		r = negative_errno();
		*ret_error =
		        strdup_printf("cannot rename the root disk into place: %s", strerror(-r));
	}
	if (r < 0)
		(void)unlink(partial);
	return r;
}

/* Applies the layers from the cache onto a new tree and makes the disk from it. */
static int
build_disk(const struct install *in, const struct oci_image *img, const char *agent,
           const char *disk, json_t *timings, char **ret_error)
{
	const struct install_opts *o = in->o;
	_cleanup_free_ char *tmp_parent = strdup_printf("%s/images/tmp", o->state_dir);
	_cleanup_tmpdir_ char *tmp = NULL;
	_cleanup_free_ char *root = NULL;
	_cleanup_close_ int root_fd = -1;
	struct unpack_opts uo = { .chown = geteuid() == 0 };
	struct unpack_stats st = { 0 };
	uint64_t t0 = now_mono_ms(), t1;
	int r;

	if (!tmp_parent)
		return -ENOMEM;
	r = mkdir_mode(tmp_parent, 0700);
	if (r >= 0) {
		/* named for this process, so that sandboxd can clear what a killed or
		 * failed install of its left */
		char prefix[32];
		snprintf(prefix, sizeof(prefix), "build-%d", (int)getpid());
		r = make_tmpdir(tmp_parent, prefix, &tmp);
	}
	if (r < 0) {
		*ret_error = strdup_printf("cannot make a build directory under '%s': %s",
		                           tmp_parent, strerror(-r));
		return r;
	}
	/* the tree holds the image's setuid files: only root may reach it (tmp is 0700) */
	root = strdup_printf("%s/root", tmp);
	if (!root)
		return -ENOMEM;
	if (mkdir(root, 0755) < 0 || (root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
		r = negative_errno();
		*ret_error = strdup_printf("cannot make '%s': %s", root, strerror(-r));
		return r;
	}
	phase(in, "unpack");
	for (size_t i = 0; i < img->manifest.n_layers; i++) {
		const struct oci_descriptor *d = &img->manifest.layers[i];
		_cleanup_free_ char *blob = image_blob_path(o->state_dir, d->digest);
		_cleanup_close_ int fd = blob ? open(blob, O_RDONLY | O_CLOEXEC) : -1;
		_cleanup_free_ char *why = NULL;
		struct unpack_stats one = { 0 };

		if (fd < 0) {
			*ret_error = strdup_printf("layer %s is not in the cache", d->digest);
			return -EIO;
		}
		r = unpack_layer(root_fd, fd, &uo, &one, &why);
		/* the disk's size comes from these: every layer counts */
		st.entries += one.entries;
		st.bytes += one.bytes;
		st.whiteouts += one.whiteouts;
		st.skipped_devices += one.skipped_devices;
		if (r < 0) {
			*ret_error = strdup_printf("layer %zu (%s): %s", i + 1, d->digest,
			                           why ? why : strerror(-r));
			return r == -ENOMEM ? r : -EPROTO;
		}
	}
	r = add_sandbox_dirs(root_fd, agent, ret_error);
	if (r < 0)
		return r;
	t1 = now_mono_ms();
	phase(in, "disk");
	r = make_disk(root, &st, disk, ret_error);
	if (r < 0)
		return r;
	json_object_set_new(timings, "unpack_ms", json_integer((json_int_t)(t1 - t0)));
	json_object_set_new(timings, "mkfs_ms", json_integer((json_int_t)(now_mono_ms() - t1)));
	json_object_set_new(timings, "entries", json_integer((json_int_t)st.entries));
	json_object_set_new(timings, "skipped_devices",
	                    json_integer((json_int_t)st.skipped_devices));
	return 0;
}

/* ---- installing ---- */

static int
open_source(const struct install_opts *o, const char *name, struct oci_source **ret,
            char **ret_error)
{
	_cleanup_free_ char *tag = NULL;
	_cleanup_free_ char *layout = image_local_layout(o->state_dir, name, &tag);
	struct registry_opts ro = { .insecure = o->insecure,
		                    .n_insecure = o->n_insecure,
		                    .local = o->local,
		                    .n_local = o->n_local,
		                    .ca_file = o->ca_file };
	struct oci_ref ref = { 0 };
	int r;

	if (layout)
		return oci_source_layout(layout, tag, ret, ret_error);
	if (image_is_base(name)) {
		/* never looked for on Docker Hub: it is this machine's own */
		*ret_error = strdup_printf("image '%s' is built on this machine and was not built "
		                           "here yet: run 'sandboxd image build-base'",
		                           name);
		return -ENOENT;
	}
	r = oci_ref_parse(name, &ref, ret_error);
	if (r < 0)
		return r;
	r = oci_source_registry(&ref, &ro, ret, ret_error);
	oci_ref_done(&ref);
	return r;
}

/* Fetches what the cache lacks. A blob in the cache was verified when it was stored. */
static int
fetch_layers(struct install *in, struct oci_source *src, const struct oci_image *img,
             char **ret_error)
{
	in->n_layers = img->manifest.n_layers;
	for (size_t i = 0; i < img->manifest.n_layers; i++) {
		const struct oci_descriptor *d = &img->manifest.layers[i];
		_cleanup_free_ char *blob = image_blob_path(in->o->state_dir, d->digest);
		struct statvfs vfs;
		struct stat st;
		int r;

		if (!blob)
			return -ENOMEM;
		in->layer = i;
		in->last_report = 0;
		if (stat(blob, &st) == 0 && (uint64_t)st.st_size == d->size) {
			on_progress(d, d->size, in);
			continue;
		}
		/* a layer that cannot fit is refused before a byte of it is written, not at
		 * ENOSPC after the disk filled for everyone */
		if (statvfs(in->o->state_dir, &vfs) == 0 &&
		    (uint64_t)vfs.f_bavail * vfs.f_frsize < d->size + FREE_RESERVE) {
			*ret_error = strdup_printf(
			        "layer %s is %" PRIu64 " MiB and the state directory has %" PRIu64
			        " MiB free (%u MiB are kept free)",
			        d->digest, d->size >> 20,
			        ((uint64_t)vfs.f_bavail * vfs.f_frsize) >> 20, FREE_RESERVE >> 20);
			return -ENOSPC;
		}
		r = oci_source_fetch_blob(src, d, blob, on_progress, in, ret_error);
		if (r < 0)
			return r;
	}
	return 0;
}

static json_t *
strv_to_json(char **v)
{
	json_t *a = json_array();

	for (size_t i = 0; a && v && v[i]; i++)
		if (json_array_append_new(a, json_string(v[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

int
image_install(const struct install_opts *o, const char *name, json_t **ret, char **ret_error)
{
	struct install in = { .o = o, .name = name };
	_cleanup_free_ char *agent_default = NULL, *blobs = NULL, *rootfs = NULL, *disk = NULL,
	                    *ref_path = NULL, *refs = NULL, *text = NULL;
	struct oci_source *src = NULL;
	struct oci_image img = { 0 };
	const char *agent = o->agent;
	char agent_id[IMAGE_AGENT_ID_LEN + 1];
	json_t *rec = NULL, *timings = json_object(), *layers = json_array();
	uint64_t t0 = now_mono_ms(), t1;
	struct stat st;
	int r;

	*ret = NULL;
	*ret_error = NULL;
	if (!agent)
		agent = agent_default = bundle_default_agent();
	blobs = strdup_printf("%s/images/blobs/sha256", o->state_dir);
	rootfs = strdup_printf("%s/rootfs", o->state_dir);
	refs = strdup_printf("%s/images/refs", o->state_dir);
	if (!agent || !blobs || !rootfs || !refs || !timings || !layers) {
		r = -ENOMEM;
		goto out;
	}
	/* sandboxd hashed the agent once at its start and says so; by hand, hash it here */
	if (o->agent_id) {
		snprintf(agent_id, sizeof(agent_id), "%s", o->agent_id);
		r = 0;
	} else {
		r = image_agent_id(agent, agent_id);
	}
	if (r < 0) {
		*ret_error =
		        strdup_printf("cannot read the guest agent '%s': %s", agent, strerror(-r));
		goto out;
	}
	if ((r = mkdir_mode(blobs, 0700)) < 0 || (r = mkdir_mode(rootfs, 0700)) < 0 ||
	    (r = mkdir_mode(refs, 0700)) < 0) {
		*ret_error = strdup_printf("cannot make the image directories under '%s': %s",
		                           o->state_dir, strerror(-r));
		goto out;
	}
	phase(&in, "resolve");
	r = open_source(o, name, &src, ret_error);
	if (r >= 0)
		r = oci_source_resolve(src, &img, ret_error);
	if (r < 0)
		goto out;
	emit(&in, json_pack("{s:s, s:s, s:i}", "event", "resolved", "digest", img.digest, "layers",
	                    (int)img.manifest.n_layers));
	t1 = now_mono_ms();
	json_object_set_new(timings, "resolve_ms", json_integer((json_int_t)(t1 - t0)));
	phase(&in, "fetch");
	r = fetch_layers(&in, src, &img, ret_error);
	if (r < 0)
		goto out;
	json_object_set_new(timings, "fetch_ms", json_integer((json_int_t)(now_mono_ms() - t1)));
	for (size_t i = 0; i < img.manifest.n_layers; i++)
		json_array_append_new(layers, json_string(img.manifest.layers[i].digest));
	disk = strdup_printf("%s/%s-%s.ext4", rootfs, img.digest + strlen("sha256:"), agent_id);
	if (!disk) {
		r = -ENOMEM;
		goto out;
	}
	if (!o->fetch_only && access(disk, F_OK) < 0) {
		r = build_disk(&in, &img, agent, disk, timings, ret_error);
		if (r < 0)
			goto out;
	}
	rec = json_pack("{s:s, s:s, s:s, s:I, s:o, s:O, s:s, s:I, s:O}", "image", name, "digest",
	                img.digest, "disk", disk, "size_bytes",
	                (json_int_t)(stat(disk, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0),
	                "env", strv_to_json(img.env), "layers", layers, "agent", agent_id,
	                "installed_at", (json_int_t)now_unix_ms(), "timings", timings);
	if (!rec) {
		r = -ENOMEM;
		goto out;
	}
	if (o->fetch_only) {
		*ret = TAKE_PTR(rec);
		r = 0;
		goto out;
	}
	ref_path = image_ref_path(o->state_dir, name);
	text = json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS);
	if (!ref_path || !text) {
		r = -ENOMEM;
		goto out;
	}
	r = write_file_atomic(ref_path, text, strlen(text), 0600);
	if (r < 0) {
		*ret_error = strdup_printf("cannot record the image: %s", strerror(-r));
		goto out;
	}
	*ret = TAKE_PTR(rec);
	r = 0;
out:
	if (r == -ENOMEM && !*ret_error)
		*ret_error = strdup("out of memory");
	if (*ret_error) {
		/* it quotes what registries and layers said: no terminal escapes go on */
		char *safe = termsafe_dup(*ret_error);
		if (safe) {
			free(*ret_error);
			*ret_error = safe;
		}
	}
	json_decref(rec);
	json_decref(timings);
	json_decref(layers);
	oci_image_done(&img);
	oci_source_free(src);
	return r;
}

/* ---- confinement ----
 *
 * An install parses what a registry sends and what an image's layers hold. As root it
 * needs to give files their owners and nothing else: it runs with every filesystem but the
 * state directory read-only (a mount namespace of its own), nothing setuid or a device
 * there, and no capability beyond owning and reading files and giving them their file
 * capabilities (so it cannot undo that), with
 * no_new_privs for what it starts (mkfs.ext4). The layer code keeps every path inside the
 * image root anyway; this is what holds if that code were wrong. */

static int
confine(const char *state_dir)
{
	static const int keep[] = { CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
		                    CAP_FOWNER, CAP_FSETID,       CAP_SETFCAP };
	struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
	struct mount_attr rw = { .attr_clr = MOUNT_ATTR_RDONLY,
		                 .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = { 0 };

	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(state_dir, state_dir, NULL, MS_BIND | MS_REC, NULL) < 0 ||
	    mount_setattr(AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof(ro)) < 0 ||
	    mount_setattr(AT_FDCWD, state_dir, AT_RECURSIVE, &rw, sizeof(rw)) < 0)
		return negative_errno();
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++) {
		bool kept = false;
		for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
			kept = kept || keep[i] == cap;
		if (!kept && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return negative_errno();
	}
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++) {
		data[keep[i] / 32].effective |= 1u << (keep[i] % 32);
		data[keep[i] / 32].permitted |= 1u << (keep[i] % 32);
	}
	if (syscall(SYS_capset, &hdr, data) < 0 ||
	    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return negative_errno();
	return 0;
}

/* ---- `sandboxd image` ---- */

static void
usage(FILE *f)
{
	fputs("usage: sandboxd image install [OPTIONS] IMAGE\n"
	      "       sandboxd image build-base [--state-dir DIR] [--agent PATH]\n"
	      "\n"
	      "install: pulls IMAGE (a registry reference such as python:3.13-slim, or a name\n"
	      "built here such as sandbox-base) into the state directory and builds its root\n"
	      "disk, as a running sandboxd does on first use. Prints the record as JSON.\n"
	      "build-base: builds the default image, sandbox-base, from this machine's apt\n"
	      "sources and the npm registry (scripts/build-base-image.sh), then installs it.\n"
	      "\n"
	      "  --state-dir DIR               sandboxd's state directory (default as sandboxd)\n"
	      "  --agent PATH                  the guest agent (default: beside sandboxd)\n"
	      "  --agent-id HEX                its id when known (sandboxd passes it)\n"
	      "  --insecure-registry HOST:PORT plain HTTP to that registry (repeatable)\n"
	      "  --local-registry HOST:PORT    that HTTPS registry may be on a loopback, private\n"
	      "                                or link-local address (repeatable); no other\n"
	      "                                registry may, unless it is --insecure-registry\n"
	      "  --ca-file FILE                trust this CA bundle for registries\n"
	      "  --progress-fd N               JSON progress lines to fd N\n"
	      "  --fetch-only                  fetch and verify the blobs, build no disk\n"
	      "  --quiet                       no progress lines on stderr\n",
	      f);
}

/* The base image script: $SANDBOXD_SCRIPTS, or scripts/ of the checkout sandboxd runs from
 * (bin/ or build/bin/ beside it), or where packages install it. */
static char *
find_base_script(void)
{
	static const char *const rel[] = { "/../scripts", "/../../scripts" };
	_cleanup_free_ char *agent = bundle_default_agent(); /* .../dir/sandbox-guestd */
	const char *env = getenv("SANDBOXD_SCRIPTS");
	char *p;

	if (env) {
		p = strdup_printf("%s/build-base-image.sh", env);
		return p && access(p, R_OK) == 0 ? p : (free(p), NULL);
	}
	if (agent && strrchr(agent, '/')) {
		*strrchr(agent, '/') = '\0';
		for (size_t i = 0; i < ARRAY_SIZE(rel); i++) {
			p = strdup_printf("%s%s/build-base-image.sh", agent, rel[i]);
			if (p && access(p, R_OK) == 0)
				return p;
			free(p);
		}
	}
	p = strdup("/usr/lib/sandboxd/build-base-image.sh");
	return p && access(p, R_OK) == 0 ? p : (free(p), NULL);
}

static int
build_base(const struct install_opts *o)
{
	_cleanup_free_ char *script = find_base_script();
	_cleanup_free_ char *out = strdup_printf("%s/images/local/sandbox-base", o->state_dir);
	_cleanup_free_ char *parent = strdup_printf("%s/images/local", o->state_dir);
	const char *argv[] = { "sh", script, out, NULL };
	_cleanup_free_ char *why = NULL;
	json_t *rec = NULL;
	int r;

	if (!script) {
		fputs("sandboxd image build-base: scripts/build-base-image.sh not found beside "
		      "sandboxd; set SANDBOXD_SCRIPTS to the directory that holds it\n",
		      stderr);
		return 1;
	}
	if (!out || !parent || mkdir_mode(parent, 0700) < 0) {
		fprintf(stderr, "sandboxd image build-base: cannot make '%s'\n", parent);
		return 1;
	}
	/* the script prints its own progress; it replaces the layout only when it succeeds. It
	 * runs with the usual umask: what it installs is for the sandbox user to use (sandboxd's
	 * own 0077 would make every file the agents installed root's alone) */
	{
		struct tool t = { .in_fd = -1, .out_fd = STDERR_FILENO };
		mode_t old = umask(0022);
		r = tool_run(&t, argv);
		umask(old);
		if (r < 0) {
			_cleanup_free_ char *f = tool_failure(&t, argv, r);
			fprintf(stderr, "sandboxd image build-base: %s\n", f ? f : strerror(-r));
			tool_done(&t);
			return 1;
		}
		tool_done(&t);
	}
	r = image_install(o, "sandbox-base", &rec, &why);
	if (r < 0) {
		fprintf(stderr, "sandboxd image build-base: %s\n", why ? why : strerror(-r));
		return 1;
	}
	fprintf(stderr, "sandboxd image build-base: sandbox-base installed (%s)\n",
	        json_string_value(json_object_get(rec, "digest")));
	json_decref(rec);
	return 0;
}

/* `sandboxd image install NAME`: confined when root, the record printed, progress events
 * on --progress-fd. */
static int
install_main(struct install_opts *o, const char *name)
{
	_cleanup_free_ char *why = NULL;
	json_t *rec = NULL;
	int r;

	if (geteuid() == 0) {
		/* fail closed: a root install that cannot confine itself does not run */
		r = confine(o->state_dir);
		if (r < 0) {
			fprintf(stderr,
			        "sandboxd image install: cannot confine the install (a mount "
			        "namespace with only the state directory writable, the "
			        "capabilities "
			        "dropped): %s\n",
			        strerror(-r));
			return 1;
		}
	}
	r = image_install(o, name, &rec, &why);
	if (r < 0) {
		if (o->progress_fd >= 0) {
			struct install in = { .o = o, .name = name };
			emit(&in, json_pack("{s:s, s:i, s:s}", "event", "error", "errno", -r,
			                    "message", why ? why : strerror(-r)));
		}
		fprintf(stderr, "sandboxd image install: %s\n", why ? why : strerror(-r));
		return 1;
	}
	{
		struct install in = { .o = o, .name = name };
		_cleanup_free_ char *s = json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS);
		if (s)
			puts(s);
		/* short, whatever the image's environment: the record is in images/refs */
		emit(&in, json_pack("{s:s, s:O}", "event", "done", "digest",
		                    json_object_get(rec, "digest")));
	}
	json_decref(rec);
	return 0;
}

int
image_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "state-dir", required_argument, NULL, 's' },
		{ "agent", required_argument, NULL, 'a' },
		{ "agent-id", required_argument, NULL, 'A' },
		{ "insecure-registry", required_argument, NULL, 'i' },
		{ "local-registry", required_argument, NULL, 'l' },
		{ "ca-file", required_argument, NULL, 'c' },
		{ "progress-fd", required_argument, NULL, 'p' },
		{ "fetch-only", no_argument, NULL, 'f' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	_cleanup_free_ char *state_default = NULL;
	_cleanup_strv_ char **insecure = NULL, **local = NULL;
	struct install_opts o = { .progress_fd = -1 };
	const char *cmd;
	uint64_t fd;
	int c;

	log_setup("sandboxd", LOG_LEVEL_INFO);
	if (argc < 2 || streq(argv[1], "--help") || streq(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	cmd = argv[1];
	optind = 0;
	while ((c = getopt_long(argc - 1, argv + 1, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o.state_dir = optarg;
			break;
		case 'a':
			o.agent = optarg;
			break;
		case 'A':
			if (strlen(optarg) != IMAGE_AGENT_ID_LEN ||
			    strspn(optarg, "0123456789abcdef") != IMAGE_AGENT_ID_LEN) {
				fprintf(stderr,
				        "sandboxd image: --agent-id '%s' is not %d hex digits\n",
				        optarg, IMAGE_AGENT_ID_LEN);
				return 2;
			}
			o.agent_id = optarg;
			break;
		case 'i':
			if (strv_add(&insecure, &o.n_insecure, optarg) < 0)
				return 1;
			o.insecure = insecure;
			break;
		case 'l':
			if (strv_add(&local, &o.n_local, optarg) < 0)
				return 1;
			o.local = local;
			break;
		case 'c':
			o.ca_file = optarg;
			break;
		case 'p':
			if (parse_u64(optarg, &fd) < 0 || fd < 3 || fd > INT32_MAX ||
			    fcntl((int)fd, F_GETFD) < 0) {
				fprintf(stderr,
				        "sandboxd image: --progress-fd '%s' is not an open fd\n",
				        optarg);
				return 2;
			}
			o.progress_fd = (int)fd;
			break;
		case 'f':
			o.fetch_only = true;
			break;
		case 'q':
			o.quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!o.state_dir) {
		o.state_dir = state_default = paths_default_state_dir();
		if (!o.state_dir) {
			fputs("sandboxd image: pass --state-dir DIR\n", stderr);
			return 2;
		}
	}
	umask(0077);
	if (streq(cmd, "build-base")) {
		if (optind != argc - 1) {
			usage(stderr);
			return 2;
		}
		return build_base(&o);
	}
	if (!streq(cmd, "install") || optind != argc - 2) {
		usage(stderr);
		return 2;
	}
	return install_main(&o, argv[argc - 1]);
}
