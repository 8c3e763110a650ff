/* test-registry.c: daemon/images/registry.c on an OCI image layout the test writes (a layer, a
 * config, a manifest, an index.json naming it), and on a real registry: Debian's
 * docker-registry started on loopback, fed that layout with skopeo (skipped, saying so,
 * where either is missing). What is checked is what a user would notice: the image
 * resolves to the manifest's digest and its ENV, a blob lands complete at its path, and a
 * corrupted or misdescribed blob is refused with nothing left behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "harness.h"
#include "registry.h"
#include "util.h"

#define MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_INDEX "application/vnd.oci.image.index.v1+json"
#define MT_LAYER "application/vnd.oci.image.layer.v1.tar"

struct layout {
	char dir[256];
	char layer_digest[72], config_digest[72], manifest_digest[72];
	size_t layer_size;
	char *layer;
};

static void
sha256_hex(const void *p, size_t n, char out[static 72])
{
	unsigned char md[32];
	unsigned int len = 0;

	assert_int_equal(EVP_Digest(p, n, md, &len, EVP_sha256(), NULL), 1);
	memcpy(out, "sha256:", 7);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
}

static void
write_file(const char *dir, const char *name, const void *p, size_t n)
{
	_cleanup_free_ char *path = strdup_printf("%s/%s", dir, name);
	FILE *f;

	assert_non_null(path);
	f = fopen(path, "we");
	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* Stores p as a blob; its digest into out. */
static void
put_blob(struct layout *l, const void *p, size_t n, char out[static 72])
{
	_cleanup_free_ char *name = NULL;

	sha256_hex(p, n, out);
	name = strdup_printf("blobs/sha256/%s", out + 7);
	write_file(l->dir, name, p, n);
}

static char *
manifest_json(const struct layout *l, size_t config_size)
{
	return strdup_printf(
	        "{\"schemaVersion\":2,\"mediaType\":\"" MT_MANIFEST "\","
	        "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
	        "\"digest\":\"%s\",\"size\":%zu},"
	        "\"layers\":[{\"mediaType\":\"" MT_LAYER "\",\"digest\":\"%s\","
	        "\"size\":%zu}]}",
	        l->config_digest, config_size, l->layer_digest, l->layer_size);
}

static void
write_index(struct layout *l, const char *mt, const char *digest, size_t size, const char *tag)
{
	_cleanup_free_ char *index = strdup_printf(
	        "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
	        "\"size\":%zu,\"annotations\":{\"org.opencontainers.image.ref.name\":\"%s\"}}]}",
	        mt, digest, size, tag);
	write_file(l->dir, "index.json", index, strlen(index));
}

/* A layout with one image tagged "v1": a 200 KiB layer (a real, empty-ish tar is not needed:
 * the source only moves and checks bytes), a config with ENV, a manifest. */
static int
setup_layout(void **state)
{
	struct layout *l = calloc(1, sizeof(*l));
	const char *config = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":["
	                     "\"PATH=/usr/bin:/bin\",\"GREETING=hello world\"]},"
	                     "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
	_cleanup_free_ char *manifest = NULL, *blobs = NULL;

	assert_non_null(l);
	assert_int_equal(harness_tmpdir(l->dir, sizeof(l->dir)), 0);
	blobs = strdup_printf("%s/blobs/sha256", l->dir);
	assert_int_equal(mkdir_p(blobs, 0755), 0);
	write_file(l->dir, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}", 30);

	l->layer_size = 200 * 1024 + 17;
	l->layer = malloc(l->layer_size);
	assert_non_null(l->layer);
	for (size_t i = 0; i < l->layer_size; i++)
		l->layer[i] = (char)(i * 7 + i / 1000);
	put_blob(l, l->layer, l->layer_size, l->layer_digest);
	put_blob(l, config, strlen(config), l->config_digest);
	manifest = manifest_json(l, strlen(config));
	put_blob(l, manifest, strlen(manifest), l->manifest_digest);
	write_index(l, MT_MANIFEST, l->manifest_digest, strlen(manifest), "v1");
	*state = l;
	return 0;
}

static void
rm_rf(const char *dir)
{
	_cleanup_free_ char *cmd = strdup_printf("rm -rf '%s'", dir);

	if (cmd && system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

static int
teardown_layout(void **state)
{
	struct layout *l = *state;

	rm_rf(l->dir);
	free(l->layer);
	free(l);
	return 0;
}

static char *
path_in(const struct layout *l, const char *name)
{
	char *p = strdup_printf("%s/%s", l->dir, name);

	assert_non_null(p);
	return p;
}

/* Whether anything named like a partial download is left in dir. */
static bool
partial_left(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool found = false;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (strstr(e->d_name, ".partial"))
			found = true;
	closedir(d);
	return found;
}

static void
assert_file_equals(const char *path, const char *data, size_t n)
{
	_cleanup_free_ char *got = NULL;
	size_t len;

	assert_int_equal(read_file_max(path, 16u << 20, &got, &len), 0);
	assert_int_equal(len, n);
	assert_memory_equal(got, data, n);
}

struct progress {
	unsigned calls;
	uint64_t last;
	bool backwards;
};

static void
on_progress(const struct oci_descriptor *d _unused_, uint64_t done, void *data)
{
	struct progress *p = data;

	if (done < p->last)
		p->backwards = true;
	p->last = done;
	p->calls++;
}

static void
check_image(const struct layout *l, const struct oci_image *img)
{
	assert_string_equal(img->digest, l->manifest_digest);
	assert_int_equal(img->manifest.n_layers, 1);
	assert_string_equal(img->manifest.layers[0].digest, l->layer_digest);
	assert_int_equal(img->manifest.layers[0].size, l->layer_size);
	assert_string_equal(img->manifest.config.digest, l->config_digest);
	assert_non_null(img->env);
	assert_string_equal(img->env[0], "PATH=/usr/bin:/bin");
	assert_string_equal(img->env[1], "GREETING=hello world");
	assert_null(img->env[2]);
}

/* Fetches the layer as dest and checks it arrived whole, with progress reported. */
static void
check_fetch(const struct layout *l, struct oci_source *s, const struct oci_image *img,
            const char *dest)
{
	struct progress p = {};
	char *err = NULL;

	if (oci_source_fetch_blob(s, &img->manifest.layers[0], dest, on_progress, &p, &err) != 0)
		fail_msg("fetch: %s", err);
	assert_file_equals(dest, l->layer, l->layer_size);
	assert_true(p.calls >= 2 && p.calls <= 10); /* every 64 KiB or so, and the end */
	assert_int_equal(p.last, l->layer_size);
	assert_false(p.backwards);
}

static void
test_layout_resolve_and_fetch(void **state)
{
	struct layout *l = *state;
	struct oci_source *s = NULL;
	struct oci_image img = {};
	_cleanup_free_ char *dest = path_in(l, "layer");
	char *err = NULL;

	if (oci_source_layout(l->dir, "v1", &s, &err) != 0 ||
	    oci_source_resolve(s, &img, &err) != 0)
		fail_msg("layout: %s", err);
	check_image(l, &img);
	check_fetch(l, s, &img, dest);
	assert_false(partial_left(l->dir));
	oci_image_done(&img);
	oci_source_free(s);

	/* no tag: the only image */
	assert_int_equal(oci_source_layout(l->dir, NULL, &s, &err), 0);
	assert_int_equal(oci_source_resolve(s, &img, &err), 0);
	assert_string_equal(img.digest, l->manifest_digest);
	oci_image_done(&img);

	/* a tag that is not there */
	oci_source_free(s);
	assert_int_equal(oci_source_layout(l->dir, "v2", &s, &err), 0);
	assert_int_equal(oci_source_resolve(s, &img, &err), -ENOENT);
	assert_non_null(strstr(err, "'v2'"));
	free(err);
	err = NULL;
	oci_source_free(s);

	/* not a layout */
	assert_int_equal(oci_source_layout("/nonexistent-layout", "v1", &s, &err), -ENOENT);
	free(err);
}

static void
test_layout_nested_index(void **state)
{
	struct layout *l = *state;
	_cleanup_free_ char *manifest = NULL, *index = NULL;
	struct oci_source *s = NULL;
	struct oci_image img = {};
	char index_digest[72], arm_digest[72];
	char *err = NULL;

	/* an index listing an arm64 image first, then ours; index.json names the index */
	manifest = manifest_json(l, 0);
	sha256_hex("arm", 3, arm_digest);
	{
		_cleanup_free_ char *cfgpath = NULL, *cfg = NULL;
		size_t len;
		cfgpath = strdup_printf("%s/blobs/sha256/%s", l->dir, l->config_digest + 7);
		assert_int_equal(read_file_max(cfgpath, 4096, &cfg, &len), 0);
		free(manifest);
		manifest = manifest_json(l, len);
	}
	index = strdup_printf("{\"schemaVersion\":2,\"mediaType\":\"" MT_INDEX "\",\"manifests\":["
	                      "{\"mediaType\":\"" MT_MANIFEST "\",\"digest\":\"%s\",\"size\":9,"
	                      "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"}},"
	                      "{\"mediaType\":\"" MT_MANIFEST "\",\"digest\":\"%s\",\"size\":%zu,"
	                      "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}",
	                      arm_digest, l->manifest_digest, strlen(manifest));
	put_blob(l, index, strlen(index), index_digest);
	write_index(l, MT_INDEX, index_digest, strlen(index), "multi");

	assert_int_equal(oci_source_layout(l->dir, "multi", &s, &err), 0);
	if (oci_source_resolve(s, &img, &err) != 0)
		fail_msg("resolve: %s", err);
	check_image(l, &img); /* the image manifest's digest, not the index's */
	oci_image_done(&img);
	oci_source_free(s);
}

/* A blob whose bytes were changed on disk is refused, and nothing is left at dest. */
static void
test_layout_corrupted_blob(void **state)
{
	struct layout *l = *state;
	_cleanup_free_ char *dest = path_in(l, "layer"), *name = NULL;
	struct oci_source *s = NULL;
	struct oci_image img = {};
	char *err = NULL;

	assert_int_equal(oci_source_layout(l->dir, "v1", &s, &err), 0);
	assert_int_equal(oci_source_resolve(s, &img, &err), 0);
	l->layer[l->layer_size / 2] ^= 1; /* same size, one bit */
	name = strdup_printf("blobs/sha256/%s", l->layer_digest + 7);
	write_file(l->dir, name, l->layer, l->layer_size);

	assert_int_equal(oci_source_fetch_blob(s, &img.manifest.layers[0], dest, NULL, NULL, &err),
	                 -EPROTO);
	assert_non_null(strstr(err, "corrupted"));
	free(err);
	assert_int_equal(access(dest, F_OK), -1);
	assert_false(partial_left(l->dir));
	oci_image_done(&img);
	oci_source_free(s);
}

/* A descriptor whose size is not the blob's: smaller is refused as the bytes arrive,
 * larger at the end; neither leaves a file. An invalid digest is refused before anything. */
static void
test_layout_size_lie(void **state)
{
	struct layout *l = *state;
	_cleanup_free_ char *dest = path_in(l, "layer");
	struct oci_source *s = NULL;
	struct oci_descriptor d = { .media_type = (char *)MT_LAYER, .digest = l->layer_digest };
	char *err = NULL;

	assert_int_equal(oci_source_layout(l->dir, "v1", &s, &err), 0);
	d.size = l->layer_size - 1;
	assert_int_equal(oci_source_fetch_blob(s, &d, dest, NULL, NULL, &err), -EPROTO);
	assert_non_null(strstr(err, "larger than"));
	free(err);
	err = NULL;
	assert_int_equal(access(dest, F_OK), -1);

	d.size = l->layer_size + 1;
	assert_int_equal(oci_source_fetch_blob(s, &d, dest, NULL, NULL, &err), -EPROTO);
	assert_non_null(strstr(err, "bytes arrived"));
	free(err);
	err = NULL;
	assert_int_equal(access(dest, F_OK), -1);
	assert_false(partial_left(l->dir));

	d.digest = (char *)"sha256:../../etc/passwd";
	assert_int_equal(oci_source_fetch_blob(s, &d, dest, NULL, NULL, &err), -EINVAL);
	free(err);
	oci_source_free(s);
}

/* index.json names a digest the manifest's bytes do not hash to (a pin that does not
 * match), and a manifest whose config was swapped: both refused. */
static void
test_layout_pin_mismatch(void **state)
{
	struct layout *l = *state;
	_cleanup_free_ char *manifest = NULL, *name = NULL, *path = NULL;
	struct oci_source *s = NULL;
	struct oci_image img = {};
	char *err = NULL;

	/* the blob file named for the manifest's digest now holds other (valid) JSON */
	name = strdup_printf("blobs/sha256/%s", l->manifest_digest + 7);
	path = path_in(l, name);
	{
		_cleanup_free_ char *orig = NULL;
		size_t len;
		assert_int_equal(read_file_max(path, 1 << 20, &orig, &len), 0);
		manifest = strdup(orig);
		/* same length, other bytes: "v1+json" stays, a digit of the config size moves */
		char *sz = strstr(manifest, "\"size\":");
		assert_non_null(sz);
		sz[7] = sz[7] == '9' ? '8' : (char)(sz[7] + 1);
	}
	write_file(l->dir, name, manifest, strlen(manifest));

	assert_int_equal(oci_source_layout(l->dir, "v1", &s, &err), 0);
	assert_int_equal(oci_source_resolve(s, &img, &err), -EPROTO);
	assert_non_null(strstr(err, "corrupted"));
	free(err);
	oci_source_free(s);
}

/* ---- a real registry ---- */

struct registry {
	struct layout l;
	char dir[256];
	int port;
	pid_t pid;
	char hostport[64];
};

static bool
have(const char *path)
{
	return access(path, X_OK) == 0;
}

static int
registry_up(int port)
{
	char *out = NULL;
	char url[96];
	const char *args[] = { "-s", "-o", "/dev/null", "-w", "%{http_code}", url, NULL };
	int r;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v2/", port);
	r = harness_run("/usr/bin/curl", args, NULL, &out);
	r = r == 0 && out && str_has_prefix(out, "200") ? 0 : -1;
	free(out);
	return r;
}

static int
setup_registry(void **state)
{
	struct registry *g = calloc(1, sizeof(*g));
	void *ls = NULL;
	_cleanup_free_ char *config = NULL, *cfgpath = NULL, *logpath = NULL;

	assert_non_null(g);
	*state = g;
	if (!have("/usr/bin/docker-registry") || !have("/usr/bin/skopeo") || !have("/usr/bin/curl"))
		return 0; /* the test skips, saying why */
	assert_int_equal(setup_layout(&ls), 0);
	g->l = *(struct layout *)ls;
	free(ls);
	assert_int_equal(harness_tmpdir(g->dir, sizeof(g->dir)), 0);
	g->port = harness_free_port();
	assert_true(g->port > 0);
	snprintf(g->hostport, sizeof(g->hostport), "127.0.0.1:%d", g->port);
	config = strdup_printf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
	                       "    rootdirectory: %s/storage\nhttp:\n  addr: %s\n",
	                       g->dir, g->hostport);
	cfgpath = strdup_printf("%s/config.yml", g->dir);
	logpath = strdup_printf("%s/registry.log", g->dir);
	write_file(g->dir, "config.yml", config, strlen(config));

	g->pid = fork();
	assert_true(g->pid >= 0);
	if (g->pid == 0) {
		int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl("/usr/bin/docker-registry", "docker-registry", "serve", cfgpath,
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100 && registry_up(g->port) < 0; i++)
		usleep(100 * 1000);
	assert_int_equal(registry_up(g->port), 0);
	return 0;
}

static int
teardown_registry(void **state)
{
	struct registry *g = *state;

	if (g->pid > 0) {
		kill(g->pid, SIGTERM);
		waitpid(g->pid, NULL, 0);
	}
	if (g->dir[0])
		rm_rf(g->dir);
	if (g->l.dir[0])
		rm_rf(g->l.dir);
	free(g->l.layer);
	free(g);
	return 0;
}

static void
push(struct registry *g, const char *tag)
{
	_cleanup_free_ char *src = strdup_printf("oci:%s:v1", g->l.dir);
	_cleanup_free_ char *dst = strdup_printf("docker://%s/x/y:%s", g->hostport, tag);
	const char *args[] = {
		"copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false", src, dst, NULL
	};
	char *out = NULL;
	int r = harness_run("/usr/bin/skopeo", args, NULL, &out);

	if (r != 0)
		fail_msg("skopeo copy: %d: %s", r, out ? out : "");
	free(out);
}

/* How the operator named the registry: not at all, --insecure-registry, --local-registry. */
enum listing {
	UNLISTED,
	INSECURE,
	LOCAL
};

/* A source for ref on the test registry, named host:PORT (host: an address or a name that
 * resolves to 127.0.0.1), listed as how says. */
static int
source_as(struct registry *g, const char *host, const char *ref, enum listing how,
          struct oci_source **ret, char **err)
{
	_cleanup_free_ char *hp = strdup_printf("%s:%d", host, g->port);
	_cleanup_free_ char *s = strdup_printf("%s/%s", hp, ref);
	char *list[] = { hp };
	struct registry_opts o = { .insecure = list,
		                   .n_insecure = how == INSECURE ? 1 : 0,
		                   .local = list,
		                   .n_local = how == LOCAL ? 1 : 0,
		                   .stall_secs = 5 };
	struct oci_ref r = {};
	int k;

	k = oci_ref_parse(s, &r, err);
	if (k < 0)
		return k;
	k = oci_source_registry(&r, &o, ret, err);
	oci_ref_done(&r);
	return k;
}

static int
source_for(struct registry *g, const char *ref, bool insecure, struct oci_source **ret, char **err)
{
	return source_as(g, "127.0.0.1", ref, insecure ? INSECURE : UNLISTED, ret, err);
}

static void
test_registry_pull(void **state)
{
	struct registry *g = *state;
	struct oci_source *s = NULL;
	struct oci_image img = {};
	_cleanup_free_ char *dest = NULL, *pinned = NULL, *other = NULL, *blobdata = NULL;
	char *err = NULL;

	if (!g->pid)
		harness_skip_case("needs /usr/bin/docker-registry, skopeo and curl");
	push(g, "t1");
	dest = path_in(&g->l, "pulled");

	/* by tag */
	assert_int_equal(source_for(g, "x/y:t1", true, &s, &err), 0);
	if (oci_source_resolve(s, &img, &err) != 0)
		fail_msg("resolve: %s", err);
	/* --preserve-digests: the registry serves the layout's manifest bytes */
	check_image(&g->l, &img);
	check_fetch(&g->l, s, &img, dest);
	assert_false(partial_left(g->l.dir));
	oci_source_free(s);

	/* by digest, and by tag and digest */
	pinned = strdup_printf("x/y@%s", img.digest);
	oci_image_done(&img);
	assert_int_equal(source_for(g, pinned, true, &s, &err), 0);
	assert_int_equal(oci_source_resolve(s, &img, &err), 0);
	assert_string_equal(img.digest, g->l.manifest_digest);
	oci_source_free(s);
	free(pinned);
	pinned = strdup_printf("x/y:t1@%s", g->l.manifest_digest);
	assert_int_equal(source_for(g, pinned, true, &s, &err), 0);
	oci_image_done(&img);
	assert_int_equal(oci_source_resolve(s, &img, &err), 0);
	oci_source_free(s);

	/* a missing tag and a missing repository: the registry's reason */
	assert_int_equal(source_for(g, "x/y:nope", true, &s, &err), 0);
	assert_int_equal(oci_source_resolve(s, &(struct oci_image){}, &err), -ENOENT);
	if (!strstr(err, "manifest unknown") || !strstr(err, "(404)") || !strstr(err, g->hostport))
		fail_msg("message: %s", err);
	free(err);
	err = NULL;
	oci_source_free(s);
	assert_int_equal(source_for(g, "no/such:t1", true, &s, &err), 0);
	assert_int_equal(oci_source_resolve(s, &(struct oci_image){}, &err), -ENOENT);
	assert_non_null(strstr(err, "unknown"));
	free(err);
	err = NULL;
	oci_source_free(s);

	/* a pin nobody pushed */
	other = strdup_printf("x/y@sha256:%064d", 0);
	assert_int_equal(source_for(g, other, true, &s, &err), 0);
	assert_int_equal(oci_source_resolve(s, &(struct oci_image){}, &err), -ENOENT);
	free(err);
	err = NULL;
	oci_source_free(s);

	/* named with --local-registry: it may be on loopback, but it is HTTPS, which this
	 * plain-HTTP registry cannot speak */
	assert_int_equal(source_as(g, "127.0.0.1", "x/y:t1", LOCAL, &s, &err), 0);
	assert_int_equal(oci_source_resolve(s, &(struct oci_image){}, &err), -EIO);
	if (!strstr(err, "TLS") || !strstr(err, "--insecure-registry"))
		fail_msg("message: %s", err);
	free(err);
	err = NULL;
	oci_source_free(s);

	/* not named at all: a registry on loopback is refused before anything is sent, by
	 * address or by a name that resolves there, in words that do not say whether anything
	 * listens (the same for this port and for one where nothing does) */
	{
		const char *const hosts[] = { "127.0.0.1", "localhost" };
		for (size_t i = 0; i < ARRAY_SIZE(hosts); i++) {
			_cleanup_free_ char *want = strdup_printf(
			        "registry %s:%d is on a loopback, private or link-local address; "
			        "sandboxd pulls from such a registry only when the operator names "
			        "it (--insecure-registry or --local-registry)",
			        hosts[i], g->port);
			assert_int_equal(source_as(g, hosts[i], "x/y:t1", UNLISTED, &s, &err), 0);
			assert_int_equal(oci_source_resolve(s, &(struct oci_image){}, &err),
			                 -EPERM);
			assert_string_equal(err, want);
			free(err);
			err = NULL;
			oci_source_free(s);
		}
	}
	/* named as insecure by the name that resolves to it: pulled like the address */
	{
		struct oci_image by_name = {};
		assert_int_equal(source_as(g, "localhost", "x/y:t1", INSECURE, &s, &err), 0);
		if (oci_source_resolve(s, &by_name, &err) != 0)
			fail_msg("resolve by localhost: %s", err);
		assert_string_equal(by_name.digest, g->l.manifest_digest);
		oci_image_done(&by_name);
		oci_source_free(s);
	}

	/* the layer corrupted in the registry's storage: refused, nothing kept */
	blobdata = strdup_printf("%s/storage/docker/registry/v2/blobs/sha256/%.2s/%s/data", g->dir,
	                         g->l.layer_digest + 7, g->l.layer_digest + 7);
	g->l.layer[0] ^= 0x20;
	{
		FILE *f = fopen(blobdata, "we");
		assert_non_null(f);
		assert_int_equal(fwrite(g->l.layer, 1, g->l.layer_size, f), g->l.layer_size);
		assert_int_equal(fclose(f), 0);
	}
	unlink(dest);
	assert_int_equal(source_for(g, "x/y:t1", true, &s, &err), 0);
	assert_int_equal(oci_source_fetch_blob(s, &img.manifest.layers[0], dest, NULL, NULL, &err),
	                 -EPROTO);
	assert_non_null(strstr(err, "corrupted"));
	free(err);
	assert_int_equal(access(dest, F_OK), -1);
	assert_false(partial_left(g->l.dir));
	oci_source_free(s);
	oci_image_done(&img);
}

/* Where sandboxd may connect for a registry the operator did not name (the registry, its
 * token realm, a redirect): public addresses only. */
static void
test_address_public(void **state)
{
	static const struct {
		const char *addr;
		bool pub;
	} cases[] = {
		{ "8.8.8.8", true },
		{ "140.82.112.3", true },
		{ "127.0.0.1", false },
		{ "127.255.0.1", false },
		{ "10.1.2.3", false },
		{ "172.16.0.1", false },
		{ "172.31.255.255", false },
		{ "172.32.0.1", true },
		{ "192.168.1.1", false },
		{ "169.254.169.254", false },
		{ "100.64.0.1", false },
		{ "100.128.0.1", true },
		{ "0.0.0.0", false },
		{ "224.0.0.1", false },
		{ "255.255.255.255", false },
		{ "::1", false },
		{ "::", false },
		{ "fe80::1", false },
		{ "fd00::1", false },
		{ "fc00::1", false },
		{ "ff02::1", false },
		{ "2606:4700::1111", true },
		{ "::ffff:127.0.0.1", false },
		{ "::ffff:1.1.1.1", true },
		{ "::ffff:169.254.169.254", false },
		{ "::ffff:10.0.0.1", false },
		/* IPv6 that carries IPv4: compatible, NAT64, 6to4 */
		{ "::127.0.0.1", false },
		{ "64:ff9b::a9fe:a9fe", false },
		{ "64:ff9b::808:808", true },
		{ "2002:c0a8:0101::1", false },
		{ "2002:0808:0808::1", true },
		{ "fec0::1", false },
		{ "fe80::a9fe:a9fe", false },
		{ "192.0.0.170", false },
		{ "198.18.0.1", false },
		{ "198.20.0.1", true },
		{ "240.0.0.1", false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sockaddr_storage ss = { 0 };
		if (strchr(cases[i].addr, ':')) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
			a->sin6_family = AF_INET6;
			assert_int_equal(inet_pton(AF_INET6, cases[i].addr, &a->sin6_addr), 1);
		} else {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;
			a->sin_family = AF_INET;
			assert_int_equal(inet_pton(AF_INET, cases[i].addr, &a->sin_addr), 1);
		}
		if (registry_address_public((struct sockaddr *)&ss) != cases[i].pub)
			fail_msg("%s: expected %s", cases[i].addr, cases[i].pub ? "public" : "not");
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_address_public),
		cmocka_unit_test_setup_teardown(test_layout_resolve_and_fetch, setup_layout,
		                                teardown_layout),
		cmocka_unit_test_setup_teardown(test_layout_nested_index, setup_layout,
		                                teardown_layout),
		cmocka_unit_test_setup_teardown(test_layout_corrupted_blob, setup_layout,
		                                teardown_layout),
		cmocka_unit_test_setup_teardown(test_layout_size_lie, setup_layout,
		                                teardown_layout),
		cmocka_unit_test_setup_teardown(test_layout_pin_mismatch, setup_layout,
		                                teardown_layout),
		cmocka_unit_test_setup_teardown(test_registry_pull, setup_registry,
		                                teardown_registry),
	};
	return harness_exit_code(cmocka_run_group_tests(tests, NULL, NULL));
}
