/* oci.c: see oci.h. Parsers of what a registry sends (references typed by people, manifests,
 * indexes, configs, WWW-Authenticate); each is bounded and refuses rather than guesses, since
 * what it accepts decides which bytes become a sandbox's root. */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <strings.h>
#include "oci.h"
#include "strv.h"
#include "util.h"

bool
image_ref_valid(const char *image)
{
	size_t n = strlen(image);

	if (n == 0 || n > 255)
		return false;
	if (!isalnum((unsigned char)image[0]))
		return false; /* no leading '-' (an option), '/', '.' or ':' */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)image[i];
		if (!(c >= 'a' && c <= 'z') && !isdigit(c) && !strchr("._-/:@", c))
			return false;
	}
	return true;
}

#define REF_MAX 4096 /* a whole reference */
/* a repository, and a registry, as the distribution spec bounds names */
#define NAME_MAX_BYTES 255
#define TAG_MAX 128
#define CHALLENGE_MAX 4096
#define PLATFORMS_SHOWN 16

#define DOCKER_HUB_API "registry-1.docker.io"

#define MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"

bool
oci_digest_valid(const char *s)
{
	if (!s || !str_has_prefix(s, "sha256:"))
		return false;
	s += strlen("sha256:");
	for (size_t i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[64] == '\0';
}

/* ---- references ---- */

static bool
is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* path-component := [a-z0-9]+ (separator [a-z0-9]+)*, separator := [_.] | "__" | "-"+ */
static bool
path_component_valid(const char *s, size_t n)
{
	size_t i = 0;

	if (n == 0 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
		return false;
	while (i < n) {
		if (is_lower_alnum(s[i])) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < n && !is_lower_alnum(s[j]))
			j++;
		size_t sep = j - i;
		bool ok = (sep == 1 && (s[i] == '.' || s[i] == '_')) ||
		          (sep == 2 && s[i] == '_' && s[i + 1] == '_');
		if (!ok) {
			ok = true;
			for (size_t k = i; k < j; k++)
				ok = ok && s[k] == '-';
		}
		if (!ok)
			return false;
		i = j;
	}
	return true;
}

static bool
is_word(char c)
{
	return is_lower_alnum(c) || (c >= 'A' && c <= 'Z') || c == '_';
}

/* tag := [\w][\w.-]{0,127} */
static bool
tag_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > TAG_MAX || !is_word(s[0]))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!is_word(s[i]) && s[i] != '.' && s[i] != '-')
			return false;
	return true;
}

/* host[:port]: lowercase DNS labels, an IPv4 address, or a bracketed IPv6 address. */
static bool
registry_valid(const char *s, size_t n)
{
	size_t hostlen = n;
	const char *colon = NULL;

	if (n == 0)
		return false;
	if (s[0] == '[') {
		const char *end = memchr(s, ']', n);
		if (!end || end == s + 1)
			return false;
		for (const char *p = s + 1; p < end; p++)
			if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || *p == ':' ||
			      *p == '.'))
				return false;
		hostlen = (size_t)(end - s) + 1;
		if (hostlen < n && s[hostlen] != ':')
			return false;
		if (hostlen < n)
			colon = s + hostlen;
	} else {
		colon = memchr(s, ':', n);
		if (colon)
			hostlen = (size_t)(colon - s);
		/* labels: [a-z0-9]([a-z0-9-]*[a-z0-9])? separated by single dots */
		size_t label = 0;
		if (hostlen == 0)
			return false;
		for (size_t i = 0; i < hostlen; i++) {
			char c = s[i];
			if (c == '.') {
				if (label == 0 || s[i - 1] == '-')
					return false;
				label = 0;
			} else if (is_lower_alnum(c) || (c == '-' && label > 0)) {
				label++;
			} else {
				return false;
			}
		}
		if (label == 0 || s[hostlen - 1] == '-')
			return false;
	}
	if (colon) {
		uint64_t port;
		size_t plen = n - (size_t)(colon + 1 - s);
		if (plen == 0 || plen > 5 || parse_u64_n(colon + 1, plen, &port) < 0 || port == 0 ||
		    port > 65535)
			return false;
	}
	return true;
}

void
oci_ref_done(struct oci_ref *r)
{
	if (!r)
		return;
	free(r->registry);
	free(r->repository);
	free(r->tag);
	free(r->digest);
	*r = (struct oci_ref){};
}

int
oci_ref_parse(const char *s, struct oci_ref *ret, char **ret_error)
{
	_cleanup_free_ char *copy = NULL, *registry = NULL, *repository = NULL, *tag = NULL,
	                    *digest = NULL;
	char *name, *at, *slash, *colon, *remote;
	size_t n;

	if (isempty(s))
		return error_printf(ret_error, -EINVAL, "image reference is empty");
	n = strlen(s);
	if (n > REF_MAX)
		return error_printf(ret_error, -EINVAL, "image reference is longer than %u bytes",
		                    REF_MAX);
	copy = strdup(s);
	if (!copy)
		return -ENOMEM;
	name = copy;

	at = strchr(name, '@');
	if (at) {
		*at = '\0';
		if (!oci_digest_valid(at + 1))
			return error_printf(
			        ret_error, -EINVAL,
			        "image reference '%s': digest must be sha256: and 64 lowercase "
			        "hex digits",
			        s);
		digest = strdup(at + 1);
		if (!digest)
			return -ENOMEM;
	}
	/* a ':' after the last '/' starts the tag; one before it is a registry's port */
	slash = strrchr(name, '/');
	colon = strrchr(slash ? slash : name, ':');
	if (colon) {
		*colon = '\0';
		if (!tag_valid(colon + 1))
			return error_printf(
			        ret_error, -EINVAL,
			        "image reference '%s': tag '%s' is not valid (letters, digits, "
			        "'_', '.', '-', at most %u, not starting with '.' or '-')",
			        s, colon + 1, TAG_MAX);
		tag = strdup(colon + 1);
		if (!tag)
			return -ENOMEM;
	}
	if (!*name)
		return error_printf(ret_error, -EINVAL, "image reference '%s' has no name", s);

	slash = strchr(name, '/');
	remote = name;
	if (slash && (memchr(name, '.', (size_t)(slash - name)) ||
	              memchr(name, ':', (size_t)(slash - name)) ||
	              memchr(name, '[', (size_t)(slash - name)) ||
	              (slash - name == 9 && strneq(name, "localhost", 9)))) {
		if (!registry_valid(name, (size_t)(slash - name)))
			return error_printf(
			        ret_error, -EINVAL,
			        "image reference '%s': registry '%.*s' is not a valid lowercase "
			        "host[:port]",
			        s, (int)(slash - name), name);
		registry = strndup(name, (size_t)(slash - name));
		if (!registry)
			return -ENOMEM;
		remote = slash + 1;
	}

	for (const char *p = remote;;) {
		const char *e = strchr(p, '/');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (!path_component_valid(p, len)) {
			bool upper = false;
			for (size_t i = 0; i < len; i++)
				upper = upper || (p[i] >= 'A' && p[i] <= 'Z');
			if (upper)
				return error_printf(
				        ret_error, -EINVAL,
				        "image reference '%s': repository names must be lowercase",
				        s);
			return error_printf(
			        ret_error, -EINVAL,
			        "image reference '%s': '%.*s' is not a valid repository name "
			        "component",
			        s, (int)len, p);
		}
		if (!e)
			break;
		p = e + 1;
	}

	/* Docker Hub: its names are served by registry-1.docker.io, and a one-component name
	 * is an official image under library/ */
	if (!registry || streq(registry, "docker.io") || streq(registry, "index.docker.io")) {
		free(registry);
		registry = strdup(DOCKER_HUB_API);
		if (!registry)
			return -ENOMEM;
	}
	if (streq(registry, DOCKER_HUB_API) && !strchr(remote, '/'))
		repository = strdup_printf("library/%s", remote);
	else
		repository = strdup(remote);
	if (!repository)
		return -ENOMEM;
	/* bounded after normalisation, so a name reads back the same when written in full */
	if (strlen(registry) > NAME_MAX_BYTES || strlen(repository) > NAME_MAX_BYTES)
		return error_printf(ret_error, -EINVAL,
		                    "image reference '%s': name longer than %u bytes", s,
		                    NAME_MAX_BYTES);
	if (!tag && !digest) {
		tag = strdup("latest");
		if (!tag)
			return -ENOMEM;
	}

	*ret = (struct oci_ref){
		.registry = TAKE_PTR(registry),
		.repository = TAKE_PTR(repository),
		.tag = TAKE_PTR(tag),
		.digest = TAKE_PTR(digest),
	};
	return 0;
}

/* ---- documents ---- */

#define _cleanup_json_ _cleanup_(json_decrefp)

void
oci_descriptor_done(struct oci_descriptor *d)
{
	if (!d)
		return;
	free(d->media_type);
	free(d->digest);
	*d = (struct oci_descriptor){};
}

void
oci_manifest_done(struct oci_manifest *m)
{
	if (!m)
		return;
	oci_descriptor_done(&m->config);
	for (size_t i = 0; i < m->n_layers; i++)
		oci_descriptor_done(&m->layers[i]);
	free(m->layers);
	*m = (struct oci_manifest){};
}

static int
load(const char *json, size_t len, const char *what, json_t **ret, char **ret_error)
{
	json_error_t jerr;
	json_t *j;

	if (len > OCI_MANIFEST_MAX)
		return error_printf(ret_error, -EINVAL, "%s is larger than %u bytes", what,
		                    OCI_MANIFEST_MAX);
	j = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j)
		return error_printf(ret_error, -EINVAL, "%s is not valid JSON: %.80s (line %d)",
		                    what, jerr.text, jerr.line);
	if (!json_is_object(j)) {
		json_decref(j);
		return error_printf(ret_error, -EINVAL, "%s is not a JSON object", what);
	}
	*ret = j;
	return 0;
}

/* A string member, NULL when absent or not a string; refuses embedded NULs by treating such
 * a string as absent (it could not be compared honestly). */
static const char *
get_str(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	const char *s = json_string_value(v);

	if (!s || strlen(s) != json_string_length(v))
		return NULL;
	return s;
}

/* The media type without parameters ("; charset=utf-8") and surrounding blanks. */
static bool
media_type_is(const char *mt, const char *want)
{
	size_t n = strlen(want);

	if (!mt)
		return false;
	while (*mt == ' ' || *mt == '\t')
		mt++;
	if (strncasecmp(mt, want, n) != 0)
		return false;
	mt += n;
	while (*mt == ' ' || *mt == '\t')
		mt++;
	return *mt == '\0' || *mt == ';';
}

static bool
is_manifest_type(const char *mt)
{
	return media_type_is(mt, MT_OCI_MANIFEST) || media_type_is(mt, MT_DOCKER_MANIFEST);
}

static bool
is_index_type(const char *mt)
{
	return media_type_is(mt, MT_OCI_INDEX) || media_type_is(mt, MT_DOCKER_LIST);
}

static int
parse_descriptor(const json_t *o, const char *what, struct oci_descriptor *ret, char **ret_error)
{
	const char *mt, *digest;
	const json_t *size;
	char *m, *d;

	if (!json_is_object(o))
		return error_printf(ret_error, -EINVAL, "%s is not an object", what);
	mt = get_str(o, "mediaType");
	if (isempty(mt) || strlen(mt) > 255)
		return error_printf(ret_error, -EINVAL, "%s has no valid mediaType", what);
	digest = get_str(o, "digest");
	if (!digest)
		return error_printf(ret_error, -EINVAL, "%s has no digest", what);
	if (!oci_digest_valid(digest))
		return error_printf(ret_error, -EINVAL,
		                    "%s: digest '%.80s' is not sha256 (64 lowercase hex)", what,
		                    digest);
	size = json_object_get(o, "size");
	if (!json_is_integer(size) || json_integer_value(size) < 0)
		return error_printf(ret_error, -EINVAL, "%s has no valid size", what);
	m = strdup(mt);
	d = strdup(digest);
	if (!m || !d) {
		free(m);
		free(d);
		return -ENOMEM;
	}
	*ret = (struct oci_descriptor){
		.media_type = m,
		.digest = d,
		.size = (uint64_t)json_integer_value(size),
	};
	return 0;
}

static int
check_schema2(const json_t *j, const char *what, char **ret_error)
{
	const json_t *v = json_object_get(j, "schemaVersion");

	if (!json_is_integer(v))
		return error_printf(ret_error, -EINVAL, "%s has no schemaVersion", what);
	if (json_integer_value(v) == 1)
		return error_printf(
		        ret_error, -EINVAL,
		        "%s is a Docker schema 1 manifest, which is not supported (push the "
		        "image again with a current tool)",
		        what);
	if (json_integer_value(v) != 2)
		return error_printf(ret_error, -EINVAL,
		                    "%s has schemaVersion %" JSON_INTEGER_FORMAT ", not 2", what,
		                    json_integer_value(v));
	return 0;
}

int
oci_document_kind(const char *json, size_t len, const char *media_type, enum oci_kind *ret,
                  char **ret_error)
{
	_cleanup_json_ json_t *j = NULL;
	const char *mt;
	int r;

	r = load(json, len, "manifest", &j, ret_error);
	if (r < 0)
		return r;
	r = check_schema2(j, "manifest", ret_error);
	if (r < 0)
		return r;
	mt = json_object_get(j, "mediaType") ? get_str(j, "mediaType") : media_type;
	if (mt) {
		if (is_manifest_type(mt)) {
			*ret = OCI_KIND_MANIFEST;
			return 0;
		}
		if (is_index_type(mt)) {
			*ret = OCI_KIND_INDEX;
			return 0;
		}
		/* a registry may send a generic Content-Type for an OCI document that carries
		 * no mediaType (it is optional in OCI); only then is the shape looked at */
		if (json_object_get(j, "mediaType") ||
		    !(media_type_is(mt, "application/json") ||
		      media_type_is(mt, "application/octet-stream") ||
		      media_type_is(mt, "text/plain")))
			return error_printf(ret_error, -EINVAL,
			                    "manifest has media type '%.100s', not an "
			                    "image manifest or index",
			                    mt);
	}
	if (json_is_array(json_object_get(j, "manifests")) && !json_object_get(j, "layers")) {
		*ret = OCI_KIND_INDEX;
		return 0;
	}
	if (json_is_object(json_object_get(j, "config")) &&
	    json_is_array(json_object_get(j, "layers")) && !json_object_get(j, "manifests")) {
		*ret = OCI_KIND_MANIFEST;
		return 0;
	}
	return error_printf(ret_error, -EINVAL,
	                    "manifest has no media type and is neither an image "
	                    "manifest nor an index");
}

static const struct layer_type {
	const char *media_type;
	bool distributable;
} layer_types[] = {
	{ "application/vnd.oci.image.layer.v1.tar", true },
	{ "application/vnd.oci.image.layer.v1.tar+gzip", true },
	{ "application/vnd.oci.image.layer.v1.tar+zstd", true },
	{ "application/vnd.docker.image.rootfs.diff.tar.gzip", true },
	{ "application/vnd.oci.image.layer.nondistributable.v1.tar", false },
	{ "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", false },
	{ "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", false },
	{ "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", false },
};

static const struct layer_type *
layer_type(const char *mt)
{
	for (size_t i = 0; i < ARRAY_SIZE(layer_types); i++)
		if (streq(mt, layer_types[i].media_type))
			return &layer_types[i];
	return NULL;
}

int
oci_manifest_parse(const char *json, size_t len, struct oci_manifest *ret, char **ret_error)
{
	_cleanup_json_ json_t *j = NULL;
	_cleanup_(oci_manifest_done) struct oci_manifest m = {};
	const json_t *layers;
	const char *mt;
	size_t n;
	int r;

	r = load(json, len, "manifest", &j, ret_error);
	if (r < 0)
		return r;
	r = check_schema2(j, "manifest", ret_error);
	if (r < 0)
		return r;
	if (json_object_get(j, "mediaType")) {
		mt = get_str(j, "mediaType");
		if (!is_manifest_type(mt))
			return error_printf(ret_error, -EINVAL,
			                    "manifest has media type '%.100s', not an "
			                    "image manifest",
			                    mt ? mt : "(not a string)");
	}
	r = parse_descriptor(json_object_get(j, "config"), "manifest config", &m.config, ret_error);
	if (r < 0)
		return r;
	if (m.config.size > OCI_MANIFEST_MAX)
		return error_printf(ret_error, -EINVAL, "image config is larger than %u bytes",
		                    OCI_MANIFEST_MAX);
	layers = json_object_get(j, "layers");
	if (!json_is_array(layers))
		return error_printf(ret_error, -EINVAL, "manifest has no layers array");
	n = json_array_size(layers);
	if (n == 0)
		return error_printf(ret_error, -EINVAL, "manifest has no layers");
	if (n > OCI_LAYERS_MAX)
		return error_printf(ret_error, -EINVAL, "image has %zu layers, more than %u", n,
		                    OCI_LAYERS_MAX);
	m.layers = calloc(n, sizeof(*m.layers));
	if (!m.layers)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const struct layer_type *t;
		char what[32];

		snprintf(what, sizeof(what), "layer %zu", i + 1);
		r = parse_descriptor(json_array_get(layers, i), what, &m.layers[i], ret_error);
		if (r < 0)
			return r;
		m.n_layers++;
		t = layer_type(m.layers[i].media_type);
		if (!t)
			return error_printf(ret_error, -EINVAL,
			                    "%s has media type '%.100s', not a tar layer", what,
			                    m.layers[i].media_type);
		if (!t->distributable)
			return error_printf(
			        ret_error, -EINVAL,
			        "%s is a non-distributable (foreign) layer, which sandboxd does "
			        "not fetch",
			        what);
	}
	*ret = m;
	m = (struct oci_manifest){};
	return 0;
}

int
oci_index_pick(const char *json, size_t len, struct oci_descriptor *ret, char **ret_error)
{
	_cleanup_json_ json_t *j = NULL;
	_cleanup_buf_ struct buf seen = BUF_INIT(4096);
	const json_t *manifests, *e;
	unsigned shown = 0;
	size_t i;
	int r;

	r = load(json, len, "index", &j, ret_error);
	if (r < 0)
		return r;
	r = check_schema2(j, "index", ret_error);
	if (r < 0)
		return r;
	if (json_object_get(j, "mediaType") && !is_index_type(get_str(j, "mediaType")))
		return error_printf(ret_error, -EINVAL,
		                    "index has a media type that is not an index");
	manifests = json_object_get(j, "manifests");
	if (!json_is_array(manifests))
		return error_printf(ret_error, -EINVAL, "index has no manifests array");

	json_array_foreach (manifests, i, e) {
		const json_t *platform = json_object_get(e, "platform");
		const char *os = get_str(platform, "os"), *arch = get_str(platform, "architecture");
		const char *variant = get_str(platform, "variant");

		if (!os || !arch)
			continue;
		if (streq(os, "linux") && streq(arch, "amd64") &&
		    is_manifest_type(get_str(e, "mediaType"))) {
			char what[48];

			snprintf(what, sizeof(what), "index entry %zu", i + 1);
			r = parse_descriptor(e, what, ret, ret_error);
			if (r >= 0 && ret->size > OCI_MANIFEST_MAX) {
				oci_descriptor_done(ret);
				return error_printf(ret_error, -EINVAL,
				                    "index entry %zu is larger than %u bytes",
				                    i + 1, OCI_MANIFEST_MAX);
			}
			return r;
		}
		/* attestations and other non-images carry "unknown" platforms */
		if (streq(os, "unknown") || shown >= PLATFORMS_SHOWN)
			continue;
		_cleanup_free_ char *p = strdup_printf("%s/%s%s%s", os, arch, variant ? "/" : "",
		                                       variant ? variant : "");
		_cleanup_free_ char *safe = p ? termsafe_dup(p) : NULL;
		if (!safe)
			return -ENOMEM;
		(void)buf_printf(&seen, "%s%.40s", shown ? ", " : "", safe);
		shown++;
	}
	if (shown == 0)
		return error_printf(ret_error, -ENOENT,
		                    "no linux/amd64 image in the index (it lists no "
		                    "platforms)");
	return error_printf(ret_error, -ENOENT, "no linux/amd64 image in the index (it has %s)",
	                    buf_head(&seen) ? buf_head(&seen) : "");
}

int
oci_config_parse(const char *json, size_t len, char ***ret_env, char **ret_error)
{
	_cleanup_json_ json_t *j = NULL;
	_cleanup_strv_ char **env = NULL;
	const json_t *config, *list, *v;
	const char *os, *arch;
	size_t n, i;
	int r;

	r = load(json, len, "image config", &j, ret_error);
	if (r < 0)
		return r;
	if (json_object_get(j, "architecture")) {
		arch = get_str(j, "architecture");
		if (!arch || !streq(arch, "amd64"))
			return error_printf(ret_error, -EINVAL,
			                    "image is for architecture '%.40s', not amd64",
			                    arch ? arch : "(not a string)");
	}
	if (json_object_get(j, "os")) {
		os = get_str(j, "os");
		if (!os || !streq(os, "linux"))
			return error_printf(ret_error, -EINVAL,
			                    "image is for os '%.40s', not linux",
			                    os ? os : "(not a string)");
	}
	config = json_object_get(j, "config");
	if (config && !json_is_object(config) && !json_is_null(config))
		return error_printf(ret_error, -EINVAL, "image config's config is not an object");
	list = json_object_get(config, "Env");
	if (list && !json_is_array(list) && !json_is_null(list))
		return error_printf(ret_error, -EINVAL, "image config's Env is not an array");
	n = json_array_size(list);
	if (n > OCI_ENV_MAX)
		return error_printf(ret_error, -EINVAL,
		                    "image config has %zu Env entries, more than %u", n,
		                    OCI_ENV_MAX);
	env = calloc(n + 1, sizeof(char *));
	if (!env)
		return -ENOMEM;
	json_array_foreach (list, i, v) {
		const char *s = json_string_value(v);

		if (!s || strlen(s) != json_string_length(v))
			return error_printf(ret_error, -EINVAL,
			                    "image config's Env entry %zu is not a string", i + 1);
		if (!strchr(s, '=') || s[0] == '=')
			return error_printf(ret_error, -EINVAL,
			                    "image config's Env entry %zu has no NAME=", i + 1);
		env[i] = strdup(s);
		if (!env[i])
			return -ENOMEM;
	}
	*ret_env = TAKE_PTR(env);
	return 0;
}

/* ---- WWW-Authenticate ---- */

static bool
is_tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static const char *
skip_ows(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

void
oci_challenge_done(struct oci_challenge *c)
{
	if (!c)
		return;
	free(c->realm);
	free(c->service);
	free(c->scope);
	*c = (struct oci_challenge){};
}

/* A quoted-string at *pp (on its opening quote) unescaped into value; *pp ends past its
 * closing quote. */
static int
read_quoted(const char **pp, struct buf *value, char **ret_error)
{
	const char *p = *pp + 1;

	for (;;) {
		char ch = *p;
		if (ch == '\0')
			return error_printf(
			        ret_error, -EINVAL,
			        "WWW-Authenticate challenge: unterminated quoted string");
		if (ch == '"')
			break;
		if (ch == '\\') {
			ch = p[1];
			if (ch == '\0')
				return error_printf(
				        ret_error, -EINVAL,
				        "WWW-Authenticate challenge: unterminated quoted string");
			p++;
		}
		if (((unsigned char)ch < 0x20 || ch == 0x7f) && ch != '\t')
			return error_printf(
			        ret_error, -EINVAL,
			        "WWW-Authenticate challenge: control character in a value");
		if (buf_putc(value, ch) < 0)
			return -ENOMEM;
		p++;
	}
	*pp = p + 1;
	return 0;
}

int
oci_challenge_parse(const char *header, struct oci_challenge *ret, char **ret_error)
{
	_cleanup_(oci_challenge_done) struct oci_challenge c = {};
	const char *p, *scheme;
	size_t n;

	if (!header)
		return error_printf(ret_error, -EINVAL, "no WWW-Authenticate challenge");
	if (strlen(header) > CHALLENGE_MAX)
		return error_printf(ret_error, -EINVAL,
		                    "WWW-Authenticate challenge is longer than %u bytes",
		                    CHALLENGE_MAX);
	p = skip_ows(header);
	scheme = p;
	while (is_tchar(*p))
		p++;
	n = (size_t)(p - scheme);
	if (n == 0)
		return error_printf(ret_error, -EINVAL, "WWW-Authenticate challenge has no scheme");
	if (n != 6 || strncasecmp(scheme, "bearer", 6) != 0)
		return error_printf(ret_error, -EOPNOTSUPP,
		                    "registry asks for '%.*s' authentication", (int)MIN(n, 20u),
		                    scheme);
	if (*p && *p != ' ' && *p != '\t')
		return error_printf(ret_error, -EINVAL, "WWW-Authenticate challenge: bad scheme");

	for (;;) {
		_cleanup_buf_ struct buf value = BUF_INIT(CHALLENGE_MAX);
		const char *name;
		size_t name_len;
		char **slot = NULL;

		p = skip_ows(p);
		while (*p == ',')
			p = skip_ows(p + 1);
		if (!*p)
			break;
		name = p;
		while (is_tchar(*p))
			p++;
		name_len = (size_t)(p - name);
		if (name_len == 0)
			return error_printf(ret_error, -EINVAL,
			                    "WWW-Authenticate challenge: bad parameter");
		p = skip_ows(p);
		if (*p != '=') {
			/* another challenge ("Bearer ..., Basic realm=...") or a token68: the
			 * Bearer parameters end here */
			break;
		}
		p = skip_ows(p + 1);
		if (*p == '"') {
			int r = read_quoted(&p, &value, ret_error);
			if (r < 0)
				return r;
		} else {
			const char *v = p;
			while (is_tchar(*p) || *p == '/')
				p++;
			if (p == v)
				return error_printf(ret_error, -EINVAL,
				                    "WWW-Authenticate challenge: parameter "
				                    "'%.*s' has no value",
				                    (int)MIN(name_len, 20u), name);
			if (buf_append(&value, v, (size_t)(p - v)) < 0)
				return -ENOMEM;
		}
		p = skip_ows(p);
		if (*p && *p != ',')
			return error_printf(ret_error, -EINVAL,
			                    "WWW-Authenticate challenge: junk after "
			                    "parameter '%.*s'",
			                    (int)MIN(name_len, 20u), name);

		if (name_len == 5 && strncasecmp(name, "realm", 5) == 0)
			slot = &c.realm;
		else if (name_len == 7 && strncasecmp(name, "service", 7) == 0)
			slot = &c.service;
		else if (name_len == 5 && strncasecmp(name, "scope", 5) == 0)
			slot = &c.scope;
		if (!slot)
			continue;
		if (*slot)
			return error_printf(ret_error, -EINVAL,
			                    "WWW-Authenticate challenge names '%.*s' twice",
			                    (int)name_len, name);
		*slot = buf_steal(&value);
		if (!*slot)
			return -ENOMEM;
	}

	if (!c.realm)
		return error_printf(ret_error, -EINVAL,
		                    "WWW-Authenticate Bearer challenge has no realm");
	if (!(strncasecmp(c.realm, "https://", 8) == 0 && c.realm[8]) &&
	    !(strncasecmp(c.realm, "http://", 7) == 0 && c.realm[7]))
		return error_printf(ret_error, -EINVAL,
		                    "WWW-Authenticate Bearer realm is not an http(s) URL");
	*ret = c;
	c = (struct oci_challenge){};
	return 0;
}
