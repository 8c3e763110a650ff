/* fuzz-oci.c: daemon/images/oci.c's parsers of what a registry (or a person typing an image name)
 * sends. The first byte picks the parser: 'r' image reference, 'k' document kind (with the
 * Content-Type given on the first line), 'm' image manifest, 'i' index platform pick,
 * 'c' image config; any other byte runs the rest through all of them. Every accepted result
 * is checked against what oci.h promises. */
#include <stdio.h>
#include <stdlib.h>
#include "fuzz.h"
#include "oci.h"
#include "util.h"

static void
check_descriptor(const struct oci_descriptor *d)
{
	FUZZ_CHECK(oci_digest_valid(d->digest));
	FUZZ_CHECK(d->media_type && *d->media_type);
}

static void
run_ref(const char *s)
{
	struct oci_ref r = {};
	char *err = NULL;
	int k = oci_ref_parse(s, &r, &err);

	if (k == 0) {
		FUZZ_CHECK(!err);
		FUZZ_CHECK(r.registry && *r.registry && r.repository && *r.repository);
		FUZZ_CHECK(r.tag || r.digest);
		FUZZ_CHECK(!r.digest || oci_digest_valid(r.digest));
		for (const char *p = r.repository; *p; p++)
			FUZZ_CHECK(!(*p >= 'A' && *p <= 'Z'));
		FUZZ_CHECK(!strstr(r.repository, "//") && r.repository[0] != '/');
		FUZZ_CHECK(!r.tag || strlen(r.tag) <= 128);
		/* what was parsed reads back the same */
		_cleanup_free_ char *again = strdup_printf(
		        "%s/%s%s%s%s%s", r.registry, r.repository, r.tag ? ":" : "",
		        r.tag ? r.tag : "", r.digest ? "@" : "", r.digest ? r.digest : "");
		struct oci_ref r2 = {};
		char *err2 = NULL;
		FUZZ_CHECK(again && oci_ref_parse(again, &r2, &err2) == 0);
		FUZZ_CHECK(streq(r.registry, r2.registry) && streq(r.repository, r2.repository));
		oci_ref_done(&r2);
		free(err2);
	} else {
		FUZZ_CHECK(k == -EINVAL || k == -ENOMEM);
		FUZZ_CHECK(k == -ENOMEM || err);
	}
	oci_ref_done(&r);
	free(err);
}

static void
run_kind(const char *data, size_t size)
{
	_cleanup_free_ char *ct = NULL;
	const char *nl = memchr(data, '\n', size);
	enum oci_kind kind = 99;
	char *err = NULL;
	int k;

	if (nl) {
		ct = strndup(data, (size_t)(nl - data));
		size -= (size_t)(nl + 1 - data);
		data = nl + 1;
	}
	k = oci_document_kind(data, size, ct, &kind, &err);
	if (k == 0)
		FUZZ_CHECK(kind == OCI_KIND_MANIFEST || kind == OCI_KIND_INDEX);
	else
		FUZZ_CHECK(err || k == -ENOMEM);
	free(err);
}

static void
run_manifest(const char *data, size_t size)
{
	struct oci_manifest m = {};
	char *err = NULL;

	if (oci_manifest_parse(data, size, &m, &err) == 0) {
		FUZZ_CHECK(!err);
		check_descriptor(&m.config);
		FUZZ_CHECK(m.config.size <= OCI_MANIFEST_MAX);
		FUZZ_CHECK(m.n_layers >= 1 && m.n_layers <= OCI_LAYERS_MAX);
		for (size_t i = 0; i < m.n_layers; i++) {
			check_descriptor(&m.layers[i]);
			FUZZ_CHECK(!strstr(m.layers[i].media_type, "nondistributable") &&
			           !strstr(m.layers[i].media_type, "foreign"));
		}
	}
	oci_manifest_done(&m);
	free(err);
}

static void
run_index(const char *data, size_t size)
{
	struct oci_descriptor d = {};
	char *err = NULL;

	if (oci_index_pick(data, size, &d, &err) == 0) {
		check_descriptor(&d);
		FUZZ_CHECK(d.size <= OCI_MANIFEST_MAX);
	} else {
		FUZZ_CHECK(err);
	}
	oci_descriptor_done(&d);
	free(err);
}

static void
run_config(const char *data, size_t size)
{
	char **env = NULL, *err = NULL;
	size_t n = 0;

	if (oci_config_parse(data, size, &env, &err) == 0) {
		FUZZ_CHECK(env);
		for (; env[n]; n++) {
			FUZZ_CHECK(strchr(env[n], '=') && env[n][0] != '=');
			free(env[n]);
		}
		FUZZ_CHECK(n <= OCI_ENV_MAX);
		free(env);
	}
	free(err);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_cleanup_free_ char *text = NULL;
	const char *p;
	size_t n;

	if (size < 1 || size > OCI_MANIFEST_MAX + 2)
		return 0;
	text = strndup((const char *)data + 1, size - 1); /* a C string for the text parsers */
	if (!text)
		return 0;
	p = (const char *)data + 1;
	n = size - 1;
	switch (data[0]) {
	case 'r':
		run_ref(text);
		break;
	case 'k':
		run_kind(p, n);
		break;
	case 'm':
		run_manifest(p, n);
		break;
	case 'i':
		run_index(p, n);
		break;
	case 'c':
		run_config(p, n);
		break;
	default:
		run_ref(text);
		run_kind(p, n);
		run_manifest(p, n);
		run_index(p, n);
		run_config(p, n);
		break;
	}
	return 0;
}
