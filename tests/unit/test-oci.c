/* test-oci.c: daemon/images/oci.c's parsers: image references as people type them, manifests,
 * indexes and configs as registries send them (including malformed and oversized ones), and
 * the WWW-Authenticate challenge of the token flow. Tables of cases; each row says what a
 * user would see (the parsed parts, or that the input is refused). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "oci.h"
#include "strv.h"
#include "util.h"

#define HEX_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEX_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HEX_C "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define DIG_A "sha256:" HEX_A
#define DIG_B "sha256:" HEX_B
#define DIG_C "sha256:" HEX_C

static void
test_digest_valid(void **state _unused_)
{
	assert_true(oci_digest_valid(DIG_A));
	assert_true(oci_digest_valid(DIG_C));
	assert_false(oci_digest_valid(NULL));
	assert_false(oci_digest_valid(""));
	assert_false(oci_digest_valid("sha256:"));
	assert_false(oci_digest_valid("sha256:" HEX_A "a")); /* too long */
	assert_false(oci_digest_valid("sha256:0123456789abcdef0123456789abcdef0123456789abcdef01234"
	                              "56789abcde")); /* too short */
	assert_false(oci_digest_valid("sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	                              "AAAAAAAAAAA")); /* uppercase */
	assert_false(oci_digest_valid("sha512:" HEX_A HEX_A));
	assert_false(oci_digest_valid("SHA256:" HEX_A));
	assert_false(oci_digest_valid("sha256:" HEX_A "\n"));
}

static const struct ref_case {
	const char *in;
	const char *registry, *repository, *tag, *digest; /* registry NULL: refused */
} ref_cases[] = {
	{ "python:3.13-slim", "registry-1.docker.io", "library/python", "3.13-slim", NULL },
	{ "python", "registry-1.docker.io", "library/python", "latest", NULL },
	{ "busybox:latest", "registry-1.docker.io", "library/busybox", "latest", NULL },
	{ "docker.io/x/y", "registry-1.docker.io", "x/y", "latest", NULL },
	{ "docker.io/python", "registry-1.docker.io", "library/python", "latest", NULL },
	{ "index.docker.io/library/python:3", "registry-1.docker.io", "library/python", "3", NULL },
	{ "user/app:v1", "registry-1.docker.io", "user/app", "v1", NULL },
	{ "127.0.0.1:5000/a/b:t", "127.0.0.1:5000", "a/b", "t", NULL },
	{ "127.0.0.1:5000/a", "127.0.0.1:5000", "a", "latest", NULL },
	{ "localhost/a/b", "localhost", "a/b", "latest", NULL },
	{ "localhost:5000/a:1.0", "localhost:5000", "a", "1.0", NULL },
	{ "[::1]:5000/a/b:t", "[::1]:5000", "a/b", "t", NULL },
	{ "ghcr.io/owner/repo/sub:tag_1", "ghcr.io", "owner/repo/sub", "tag_1", NULL },
	{ "quay.io/a-b/c__d.e:Tag-X", "quay.io", "a-b/c__d.e", "Tag-X", NULL },
	{ "reg.example.com/a---b:x", "reg.example.com", "a---b", "x", NULL },
	{ "python@" DIG_A, "registry-1.docker.io", "library/python", NULL, DIG_A },
	{ "python:3@" DIG_A, "registry-1.docker.io", "library/python", "3", DIG_A },
	{ "127.0.0.1:5000/x/y@" DIG_C, "127.0.0.1:5000", "x/y", NULL, DIG_C },
	{ "localhost", "registry-1.docker.io", "library/localhost", "latest", NULL },
	/* refused */
	{ .in = "" },
	{ .in = "Python" },
	{ .in = "docker.io/Library/python" },
	{ .in = "Registry.example.com/a" },
	{ .in = "a//b" },
	{ .in = "/a" },
	{ .in = "a/" },
	{ .in = "a:" },
	{ .in = ":tag" },
	{ .in = "a:.tag" },
	{ .in = "a:-tag" },
	{ .in = "a:t@g" },
	{ .in = "a:tag with space" },
	{ .in = "a@sha256:abc" },
	{ .in = "a@" },
	{ .in = "a@sha512:" HEX_A HEX_A },
	{ .in = "a@sha256:" HEX_A "@sha256:" HEX_A },
	{ .in = "a_/b" },
	{ .in = "_a" },
	{ .in = "a..b" },
	{ .in = "a.-b" },
	{ .in = "a___b" },
	{ .in = "127.0.0.1:0/a" },
	{ .in = "127.0.0.1:99999/a" },
	{ .in = "127.0.0.1:/a" },
	{ .in = "-host.com/a" },
	{ .in = "host-.com/a" },
	{ .in = "ho..st.com/a" },
	{ .in = "[]:5000/a" },
	{ .in = "[::1]x/a" },
	{ .in = "a:"
	        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	        "aaaaaa"
	        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" }, /* 129-byte tag */
	{ .in = "a b" },
	{ .in = "a\nb" },
};

static void
test_ref_table(void **state _unused_)
{
	for (size_t i = 0; i < ARRAY_SIZE(ref_cases); i++) {
		const struct ref_case *c = &ref_cases[i];
		struct oci_ref r = {};
		char *err = NULL;
		int k = oci_ref_parse(c->in, &r, &err);

		if (!c->registry) {
			if (k != -EINVAL)
				fail_msg("'%s' was accepted (%d)", c->in, k);
			assert_non_null(err);
			free(err);
			continue;
		}
		if (k != 0)
			fail_msg("'%s' was refused: %s", c->in, err ? err : "?");
		assert_string_equal(r.registry, c->registry);
		assert_string_equal(r.repository, c->repository);
		if (c->tag)
			assert_string_equal(r.tag, c->tag);
		else
			assert_null(r.tag);
		if (c->digest)
			assert_string_equal(r.digest, c->digest);
		else
			assert_null(r.digest);
		oci_ref_done(&r);
	}
}

static void
test_ref_messages(void **state _unused_)
{
	struct oci_ref r = {};
	char *err = NULL;

	assert_int_equal(oci_ref_parse("Python:3", &r, &err), -EINVAL);
	assert_non_null(strstr(err, "lowercase"));
	free(err);
	err = NULL;
	assert_int_equal(oci_ref_parse("python:.x", &r, &err), -EINVAL);
	assert_non_null(strstr(err, "tag '.x'"));
	free(err);
	err = NULL;
	assert_int_equal(oci_ref_parse("python@sha256:12", &r, &err), -EINVAL);
	assert_non_null(strstr(err, "digest"));
	free(err);

	/* names are bounded after normalisation: 250 bytes is fine under a registry, but on
	 * Docker Hub it becomes library/ and 258 bytes */
	{
		char name[300];
		memset(name, 'a', 250);
		name[250] = '\0';
		_cleanup_free_ char *hub = strdup(name);
		_cleanup_free_ char *local = strdup_printf("127.0.0.1:5000/%s", name);
		err = NULL;
		assert_int_equal(oci_ref_parse(local, &r, &err), 0);
		oci_ref_done(&r);
		assert_int_equal(oci_ref_parse(hub, &r, &err), -EINVAL);
		assert_non_null(strstr(err, "longer than"));
		free(err);
	}
}

/* ---- documents ---- */

#define OCI_MANIFEST_HEAD                                                                          \
	"{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","       \
	"\"config\":{\"mediaType\":\"application/"                                                 \
	"vnd.oci.image.config.v1+json\",\"digest\":\"" DIG_A "\",\"size\":123},"

#define LAYER(mt, dig, size) "{\"mediaType\":\"" mt "\",\"digest\":\"" dig "\",\"size\":" #size "}"
#define OCI_GZ "application/vnd.oci.image.layer.v1.tar+gzip"

static void
test_manifest_oci(void **state _unused_)
{
	const char *j = OCI_MANIFEST_HEAD "\"layers\":[" LAYER(OCI_GZ, DIG_B, 1000) "," LAYER(
	        "application/vnd.oci.image.layer.v1.tar+zstd", DIG_C,
	        2000) "," LAYER("application/vnd.oci.image.layer.v1.tar", DIG_A,
	                        0) "],"
	                           "\"annotations\":{"
	                           "\"a\":\"b\"}}";
	struct oci_manifest m = {};
	enum oci_kind kind;
	char *err = NULL;

	assert_int_equal(oci_document_kind(j, strlen(j), NULL, &kind, &err), 0);
	assert_int_equal(kind, OCI_KIND_MANIFEST);
	assert_int_equal(oci_manifest_parse(j, strlen(j), &m, &err), 0);
	assert_string_equal(m.config.digest, DIG_A);
	assert_int_equal(m.config.size, 123);
	assert_int_equal(m.n_layers, 3);
	assert_string_equal(m.layers[0].digest, DIG_B);
	assert_int_equal(m.layers[0].size, 1000);
	assert_string_equal(m.layers[1].media_type, "application/vnd.oci.image.layer.v1.tar+zstd");
	assert_string_equal(m.layers[2].digest, DIG_A);
	oci_manifest_done(&m);
	oci_manifest_done(&m); /* idempotent */
}

static void
test_manifest_docker(void **state _unused_)
{
	const char *j =
	        "{\n   \"schemaVersion\": 2,\n   \"mediaType\": "
	        "\"application/vnd.docker.distribution.manifest.v2+json\",\n   \"config\": {\n "
	        "\"mediaType\": \"application/vnd.docker.container.image.v1+json\",\n \"size\": "
	        "1472,\n \"digest\": \"" DIG_C "\"\n   },\n   \"layers\": [\n      " LAYER(
	                "application/vnd.docker.image.rootfs.diff.tar.gzip", DIG_B,
	                2811478) "\n   ]\n}";
	struct oci_manifest m = {};
	enum oci_kind kind;
	char *err = NULL;

	assert_int_equal(oci_document_kind(j, strlen(j), "application/json", &kind, &err), 0);
	assert_int_equal(kind, OCI_KIND_MANIFEST);
	assert_int_equal(oci_manifest_parse(j, strlen(j), &m, &err), 0);
	assert_int_equal(m.n_layers, 1);
	assert_int_equal(m.layers[0].size, 2811478);
	assert_string_equal(m.config.media_type, "application/vnd.docker.container.image.v1+json");
	oci_manifest_done(&m);
}

static const struct kind_case {
	const char *json;
	const char *content_type;
	int r;
	enum oci_kind kind;
} kind_cases[] = {
	{ "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
	  "\"manifests\":[]}",
	  NULL, 0, OCI_KIND_INDEX },
	{ "{\"schemaVersion\":2,\"mediaType\":"
	  "\"application/vnd.docker.distribution.manifest.list.v2+json\",\"manifests\":[]}",
	  NULL, 0, OCI_KIND_INDEX },
	/* no mediaType in the document: the Content-Type decides */
	{ "{\"schemaVersion\":2,\"manifests\":[]}", "application/vnd.oci.image.index.v1+json", 0,
	  OCI_KIND_INDEX },
	{ "{\"schemaVersion\":2,\"config\":{},\"layers\":[]}",
	  "application/vnd.oci.image.manifest.v1+json; charset=utf-8", 0, OCI_KIND_MANIFEST },
	/* nor a useful Content-Type: the shape */
	{ "{\"schemaVersion\":2,\"config\":{},\"layers\":[]}", NULL, 0, OCI_KIND_MANIFEST },
	{ "{\"schemaVersion\":2,\"manifests\":[]}", "application/octet-stream", 0, OCI_KIND_INDEX },
	/* the document's own field wins over the header */
	{ "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\"}",
	  "application/vnd.oci.image.manifest.v1+json", 0, OCI_KIND_INDEX },
	/* refused */
	{ "{\"schemaVersion\":1,\"name\":\"x\",\"fsLayers\":[]}",
	  "application/vnd.docker.distribution.manifest.v1+prettyjws", -EINVAL, 0 },
	{ "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.config.v1+json\"}", NULL,
	  -EINVAL, 0 },
	{ "{\"schemaVersion\":2,\"config\":{},\"layers\":[]}", "text/html", -EINVAL, 0 },
	{ "{\"schemaVersion\":2}", NULL, -EINVAL, 0 },
	{ "{\"schemaVersion\":3,\"manifests\":[]}", NULL, -EINVAL, 0 },
	{ "{\"mediaType\":\"application/vnd.oci.image.index.v1+json\"}", NULL, -EINVAL, 0 },
	{ "[]", NULL, -EINVAL, 0 },
	{ "{\"schemaVersion\":2,", NULL, -EINVAL, 0 },
	{ "", NULL, -EINVAL, 0 },
	{ "{\"schemaVersion\":2,\"schemaVersion\":2,\"manifests\":[]}", NULL, -EINVAL, 0 },
};

static void
test_document_kind_table(void **state _unused_)
{
	for (size_t i = 0; i < ARRAY_SIZE(kind_cases); i++) {
		const struct kind_case *c = &kind_cases[i];
		enum oci_kind kind = 99;
		char *err = NULL;
		int r = oci_document_kind(c->json, strlen(c->json), c->content_type, &kind, &err);

		if (r != c->r)
			fail_msg("case %zu (%s): %d, wanted %d (%s)", i, c->json, r, c->r,
			         err ? err : "");
		if (r == 0)
			assert_int_equal(kind, c->kind);
		else
			assert_non_null(err);
		free(err);
	}
}

static const struct bad_manifest {
	const char *json;
	const char *says; /* in the error */
} bad_manifests[] = {
	{ OCI_MANIFEST_HEAD "\"layers\":[]}", "no layers" },
	{ OCI_MANIFEST_HEAD "\"layers\":{}}", "no layers array" },
	{ OCI_MANIFEST_HEAD "\"layers\":[" LAYER(OCI_GZ, "sha256:abc", 1) "]}", "digest" },
	{ OCI_MANIFEST_HEAD "\"layers\":[" LAYER(OCI_GZ, "sha256:" HEX_A "\\u0000", 1) "]}",
	  "JSON" },
	{ OCI_MANIFEST_HEAD "\"layers\":[" LAYER(OCI_GZ, DIG_B, -1) "]}", "size" },
	{ OCI_MANIFEST_HEAD "\"layers\":[" LAYER(OCI_GZ, DIG_B, 1.5) "]}", "size" },
	{ OCI_MANIFEST_HEAD "\"layers\":[{\"mediaType\":\"" OCI_GZ "\",\"digest\":\"" DIG_B "\"}]}",
	  "size" },
	{ OCI_MANIFEST_HEAD "\"layers\":[" LAYER("application/vnd.oci.image.layer.nondistributable"
	                                         ".v1.tar+gzip",
	                                         DIG_B, 1) "]}",
	  "non-distributable" },
	{ OCI_MANIFEST_HEAD "\"layers\":[" LAYER("application/vnd.docker.image.rootfs.foreign.diff"
	                                         ".tar.gzip",
	                                         DIG_B, 1) "]}",
	  "non-distributable" },
	{ OCI_MANIFEST_HEAD "\"layers\":[" LAYER("application/vnd.cncf.helm.chart.content.v1.tar+"
	                                         "gzip",
	                                         DIG_B, 1) "]}",
	  "not a tar layer" },
	{ OCI_MANIFEST_HEAD "\"layers\":[\"x\"]}", "not an object" },
	{ "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
	  "\"layers\":[" LAYER(OCI_GZ, DIG_B, 1) "]}",
	  "config" },
	{ "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
	  "\"config\":" LAYER("x", DIG_A, 1) ",\"layers\":[" LAYER(OCI_GZ, DIG_B, 1) "]}",
	  "not an image manifest" },
	{ "{\"schemaVersion\":2,\"config\":" LAYER("x", DIG_A, 99999999) ",\"layers\":[" LAYER(
	          OCI_GZ, DIG_B, 1) "]}",
	  "larger" },
	{ "{\"schemaVersion\":1}", "schema 1" },
	{ "{\"schemaVersion\":\"2\"}", "schemaVersion" },
	{ "not json", "JSON" },
	{ "{\"schemaVersion\":2,\"config\":" LAYER("x", DIG_A, 1) ",\"config\":" LAYER(
	          "x", DIG_A, 1) ","
	                         "\"layers\":"
	                         "[]}",
	  "JSON" },
};

static void
test_manifest_refused(void **state _unused_)
{
	for (size_t i = 0; i < ARRAY_SIZE(bad_manifests); i++) {
		struct oci_manifest m = {};
		char *err = NULL;
		int r = oci_manifest_parse(bad_manifests[i].json, strlen(bad_manifests[i].json), &m,
		                           &err);

		if (r != -EINVAL)
			fail_msg("case %zu accepted: %s", i, bad_manifests[i].json);
		assert_non_null(err);
		if (!strstr(err, bad_manifests[i].says))
			fail_msg("case %zu: error '%s' does not say '%s'", i, err,
			         bad_manifests[i].says);
		assert_null(m.layers);
		free(err);
	}
}

/* A manifest of n layers. */
static char *
manifest_of(size_t n)
{
	struct buf b = BUF_INIT(64u << 20);

	assert_int_equal(buf_puts(&b, OCI_MANIFEST_HEAD "\"layers\":["), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(buf_printf(&b, "%s" LAYER(OCI_GZ, DIG_B, 10), i ? "," : ""), 0);
	assert_int_equal(buf_puts(&b, "]}"), 0);
	return buf_steal(&b);
}

static void
test_manifest_bounds(void **state _unused_)
{
	_cleanup_free_ char *max = manifest_of(OCI_LAYERS_MAX),
	                    *over = manifest_of(OCI_LAYERS_MAX + 1);
	struct oci_manifest m = {};
	char *err = NULL;
	struct buf big = BUF_INIT(64u << 20);

	assert_int_equal(oci_manifest_parse(max, strlen(max), &m, &err), 0);
	assert_int_equal(m.n_layers, OCI_LAYERS_MAX);
	oci_manifest_done(&m);

	assert_int_equal(oci_manifest_parse(over, strlen(over), &m, &err), -EINVAL);
	assert_non_null(strstr(err, "layers, more than"));
	free(err);
	err = NULL;

	/* a valid document, padded past OCI_MANIFEST_MAX with whitespace */
	assert_int_equal(buf_puts(&big, max), 0);
	while (big.len <= OCI_MANIFEST_MAX)
		assert_int_equal(buf_puts(&big, "                                "), 0);
	assert_int_equal(oci_manifest_parse(big.data, big.len, &m, &err), -EINVAL);
	assert_non_null(strstr(err, "larger than"));
	free(err);
	err = NULL;
	assert_int_equal(oci_index_pick(big.data, big.len, &(struct oci_descriptor){}, &err),
	                 -EINVAL);
	free(err);
	buf_free(&big);
}

#define PLATFORM_ENTRY(mt, dig, os, arch, extra)                                                   \
	"{\"mediaType\":\"" mt "\",\"digest\":\"" dig "\",\"size\":500,\"platform\":{"             \
	"\"os\":\"" os "\",\"architecture\":\"" arch "\"" extra "}}"
#define MT_OM "application/vnd.oci.image.manifest.v1+json"
#define MT_DM "application/vnd.docker.distribution.manifest.v2+json"

static void
test_index_pick(void **state _unused_)
{
	/* a Docker Hub style list: arm first, amd64 later, and an attestation */
	const char *list =
	        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest."
	        "list.v2+json\",\"manifests\":[" PLATFORM_ENTRY(
	                MT_DM, DIG_A, "linux", "arm64",
	                ",\"variant\":\"v8\"") "," PLATFORM_ENTRY(MT_DM, DIG_B, "linux", "amd64",
	                                                          "") "," PLATFORM_ENTRY(MT_OM,
	                                                                                 DIG_C,
	                                                                                 "unknown",
	                                                                                 "unknown",
	                                                                                 "") "]}";
	/* an OCI index whose first amd64-looking entry has no platform, and a windows image */
	const char *oci = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+"
	                  "json\",\"manifests\":[{\"mediaType\":\"" MT_OM "\",\"digest\":\"" DIG_A
	                  "\",\"size\":1}," PLATFORM_ENTRY(
	                          MT_OM, DIG_B, "windows", "amd64",
	                          "") "," PLATFORM_ENTRY(MT_OM, DIG_C, "linux", "amd64", "") "]}";
	const char *none = "{\"schemaVersion\":2,\"manifests\":[" PLATFORM_ENTRY(
	        MT_OM, DIG_A, "linux", "arm64",
	        ",\"variant\":\"v8\"") "," PLATFORM_ENTRY(MT_OM, DIG_B, "linux", "s390x",
	                                                  "") "," PLATFORM_ENTRY(MT_OM, DIG_C,
	                                                                         "unknown",
	                                                                         "unknown",
	                                                                         "") "]}";
	const char *empty = "{\"schemaVersion\":2,\"manifests\":[]}";
	const char *bad_digest = "{\"schemaVersion\":2,\"manifests\":[" PLATFORM_ENTRY(
	        MT_OM, "sha256:1234", "linux", "amd64", "") "]}";
	const char *huge = "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" MT_OM
	                   "\",\"digest\":\"" DIG_A "\",\"size\":99999999,\"platform\":{\"os\":"
	                   "\"linux\",\"architecture\":\"amd64\"}}]}";
	struct oci_descriptor d = {};
	char *err = NULL;

	assert_int_equal(oci_index_pick(list, strlen(list), &d, &err), 0);
	assert_string_equal(d.digest, DIG_B);
	assert_string_equal(d.media_type, MT_DM);
	assert_int_equal(d.size, 500);
	oci_descriptor_done(&d);

	assert_int_equal(oci_index_pick(oci, strlen(oci), &d, &err), 0);
	assert_string_equal(d.digest, DIG_C);
	oci_descriptor_done(&d);

	assert_int_equal(oci_index_pick(none, strlen(none), &d, &err), -ENOENT);
	assert_non_null(strstr(err, "linux/arm64/v8"));
	assert_non_null(strstr(err, "linux/s390x"));
	assert_null(strstr(err, "unknown"));
	free(err);
	err = NULL;

	assert_int_equal(oci_index_pick(empty, strlen(empty), &d, &err), -ENOENT);
	free(err);
	err = NULL;
	assert_int_equal(oci_index_pick(bad_digest, strlen(bad_digest), &d, &err), -EINVAL);
	free(err);
	err = NULL;
	assert_int_equal(oci_index_pick(huge, strlen(huge), &d, &err), -EINVAL);
	free(err);
	err = NULL;
	assert_int_equal(oci_index_pick("{\"schemaVersion\":2}", 19, &d, &err), -EINVAL);
	free(err);
}

static const struct config_case {
	const char *json;
	int r;
	const char *env[4]; /* expected, NULL-terminated */
} config_cases[] = {
	{ "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/usr/bin:/"
	  "bin\","
	  "\"LANG=C.UTF-8\",\"EMPTY=\"],\"Cmd\":[\"sh\"]},\"rootfs\":{\"type\":\"layers\"}}",
	  0,
	  { "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "EMPTY=" } },
	{ "{\"architecture\":\"amd64\",\"os\":\"linux\"}", 0, {} },
	{ "{\"config\":{}}", 0, {} },
	{ "{\"config\":null}", 0, {} },
	{ "{\"config\":{\"Env\":null}}", 0, {} },
	{ "{\"config\":{\"Env\":[\"A=b=c\"]}}", 0, { "A=b=c" } },
	{ "{\"architecture\":\"arm64\",\"os\":\"linux\"}", -EINVAL, {} },
	{ "{\"architecture\":\"amd64\",\"os\":\"windows\"}", -EINVAL, {} },
	{ "{\"architecture\":7}", -EINVAL, {} },
	{ "{\"config\":{\"Env\":[\"NOEQUALS\"]}}", -EINVAL, {} },
	{ "{\"config\":{\"Env\":[\"=x\"]}}", -EINVAL, {} },
	{ "{\"config\":{\"Env\":[1]}}", -EINVAL, {} },
	{ "{\"config\":{\"Env\":[\"A=\\u0000B\"]}}", -EINVAL, {} },
	{ "{\"config\":{\"Env\":\"A=B\"}}", -EINVAL, {} },
	{ "{\"config\":[]}", -EINVAL, {} },
	{ "[1]", -EINVAL, {} },
};

static void
test_config_table(void **state _unused_)
{
	for (size_t i = 0; i < ARRAY_SIZE(config_cases); i++) {
		const struct config_case *c = &config_cases[i];
		char **env = NULL, *err = NULL;
		int r = oci_config_parse(c->json, strlen(c->json), &env, &err);
		size_t n = 0;

		if (r != c->r)
			fail_msg("case %zu (%s): %d, wanted %d (%s)", i, c->json, r, c->r,
			         err ? err : "");
		if (r < 0) {
			assert_non_null(err);
			assert_null(env);
			free(err);
			continue;
		}
		assert_non_null(env);
		for (; env[n]; n++) {
			assert_non_null(c->env[n]);
			assert_string_equal(env[n], c->env[n]);
		}
		assert_null(c->env[n]);
		strv_free(env);
	}
}

static void
test_config_env_bound(void **state _unused_)
{
	struct buf b = BUF_INIT(64u << 20);
	char **env = NULL, *err = NULL;

	for (unsigned n = OCI_ENV_MAX; n <= OCI_ENV_MAX + 1; n++) {
		buf_reset(&b);
		assert_int_equal(buf_puts(&b, "{\"config\":{\"Env\":["), 0);
		for (unsigned i = 0; i < n; i++)
			assert_int_equal(buf_printf(&b, "%s\"V%u=x\"", i ? "," : "", i), 0);
		assert_int_equal(buf_puts(&b, "]}}"), 0);
		int r = oci_config_parse(b.data, b.len, &env, &err);
		if (n == OCI_ENV_MAX) {
			assert_int_equal(r, 0);
			assert_string_equal(env[n - 1], "V1023=x");
			assert_null(env[n]);
			strv_free(env);
		} else {
			assert_int_equal(r, -EINVAL);
			free(err);
		}
	}
	buf_free(&b);
}

/* ---- WWW-Authenticate ---- */

static const struct challenge_case {
	const char *header;
	int r;
	const char *realm, *service, *scope;
} challenge_cases[] = {
	{ "Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
	  "scope=\"repository:library/python:pull\"",
	  0, "https://auth.docker.io/token", "registry.docker.io",
	  "repository:library/python:pull" },
	{ "bearer REALM=\"http://127.0.0.1:1/t\"", 0, "http://127.0.0.1:1/t", NULL, NULL },
	{ "BEARER Realm=\"https://a/t\" , Service=\"svc\"", 0, "https://a/t", "svc", NULL },
	/* commas and escaped quotes inside quoted strings */
	{ "Bearer realm=\"https://a/t?x=1,2\",scope=\"repository:a/b:pull,push\","
	  "service=\"s\\\"q\\\\\"",
	  0, "https://a/t?x=1,2", "s\"q\\", "repository:a/b:pull,push" },
	/* token values, unknown parameters, empty list elements */
	{ "Bearer ,realm=\"https://a/t\",,error=\"insufficient_scope\",service=reg.io,", 0,
	  "https://a/t", "reg.io", NULL },
	{ "  Bearer\trealm = \"https://a/t\"", 0, "https://a/t", NULL, NULL },
	/* a second challenge after the Bearer one is not read into it */
	{ "Bearer realm=\"https://a/t\", Basic realm=\"x\"", 0, "https://a/t", NULL, NULL },
	/* refused */
	{ "Basic realm=\"Registry Realm\"", -EOPNOTSUPP, NULL, NULL, NULL },
	{ "Digest realm=\"x\", nonce=\"y\"", -EOPNOTSUPP, NULL, NULL, NULL },
	{ "Bearerx realm=\"https://a/t\"", -EOPNOTSUPP, NULL, NULL, NULL },
	{ "Bearer", -EINVAL, NULL, NULL, NULL },
	{ "Bearer service=\"x\"", -EINVAL, NULL, NULL, NULL },
	{ "Bearer realm=\"ftp://a/t\"", -EINVAL, NULL, NULL, NULL },
	{ "Bearer realm=\"file:///etc/passwd\"", -EINVAL, NULL, NULL, NULL },
	{ "Bearer realm=\"https://\"", -EINVAL, NULL, NULL, NULL },
	{ "Bearer realm=\"https://a/t", -EINVAL, NULL, NULL, NULL },
	{ "Bearer realm=\"https://a/t\\", -EINVAL, NULL, NULL, NULL },
	{ "Bearer realm=\"https://a/t\r\nX: y\"", -EINVAL, NULL, NULL, NULL },
	{ "Bearer realm=\"https://a/t\",realm=\"https://b/t\"", -EINVAL, NULL, NULL, NULL },
	{ "Bearer realm=", -EINVAL, NULL, NULL, NULL },
	{ "Bearer realm=\"https://a/t\" junk", -EINVAL, NULL, NULL, NULL },
	{ "Bearer =x", -EINVAL, NULL, NULL, NULL },
	{ "", -EINVAL, NULL, NULL, NULL },
	{ "\"Bearer\"", -EINVAL, NULL, NULL, NULL },
};

static void
test_challenge_table(void **state _unused_)
{
	for (size_t i = 0; i < ARRAY_SIZE(challenge_cases); i++) {
		const struct challenge_case *c = &challenge_cases[i];
		struct oci_challenge ch = {};
		char *err = NULL;
		int r = oci_challenge_parse(c->header, &ch, &err);

		if (r != c->r)
			fail_msg("case %zu (%s): %d, wanted %d (%s)", i, c->header, r, c->r,
			         err ? err : "");
		if (r < 0) {
			assert_non_null(err);
			assert_null(ch.realm);
			free(err);
			continue;
		}
		assert_string_equal(ch.realm, c->realm);
		if (c->service)
			assert_string_equal(ch.service, c->service);
		else
			assert_null(ch.service);
		if (c->scope)
			assert_string_equal(ch.scope, c->scope);
		else
			assert_null(ch.scope);
		oci_challenge_done(&ch);
	}
}

static void
test_challenge_bounded(void **state _unused_)
{
	struct buf b = BUF_INIT(64u << 20);
	struct oci_challenge ch = {};
	char *err = NULL;

	assert_int_equal(buf_puts(&b, "Bearer realm=\"https://a/t\",service=\""), 0);
	while (b.len < 5000)
		assert_int_equal(buf_puts(&b, "xxxxxxxxxxxxxxxx"), 0);
	assert_int_equal(buf_puts(&b, "\""), 0);
	assert_int_equal(oci_challenge_parse(b.data, &ch, &err), -EINVAL);
	assert_non_null(strstr(err, "longer"));
	free(err);
	buf_free(&b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_digest_valid),
		cmocka_unit_test(test_ref_table),
		cmocka_unit_test(test_ref_messages),
		cmocka_unit_test(test_manifest_oci),
		cmocka_unit_test(test_manifest_docker),
		cmocka_unit_test(test_document_kind_table),
		cmocka_unit_test(test_manifest_refused),
		cmocka_unit_test(test_manifest_bounds),
		cmocka_unit_test(test_index_pick),
		cmocka_unit_test(test_config_table),
		cmocka_unit_test(test_config_env_bound),
		cmocka_unit_test(test_challenge_table),
		cmocka_unit_test(test_challenge_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
