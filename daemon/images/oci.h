/* oci.h: the parts of an OCI image that sandboxd reads from bytes a registry (or an image
 * layout on disk) sends: image references, manifests, indexes, image configs, and the
 * WWW-Authenticate challenge of the distribution spec's token flow. Pure functions; every
 * parser here takes untrusted bytes and has a fuzz target (fuzz/fuzz-oci.c,
 * fuzz/fuzz-wwwauth.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on what sandboxd accepts from a registry. */
#define OCI_MANIFEST_MAX (4u << 20) /* bytes of a manifest, index or config */
#define OCI_LAYERS_MAX 128
#define OCI_ENV_MAX 1024

/* A parsed image reference. "python:3.13-slim" is registry "registry-1.docker.io"
 * (Docker Hub's API host), repository "library/python", tag "3.13-slim". A reference with
 * neither a tag nor a digest gets tag "latest". */
struct oci_ref {
	char *registry;   /* host[:port] the API is served on */
	char *repository; /* path, e.g. "library/python" */
	char *tag;        /* NULL when only a digest is given */
	char *digest;     /* "sha256:<64 hex>" or NULL */
};

/* Parses s (lowercase registry/repository, as registries require; a registry part is the
 * first component when it holds a '.' or ':' or is "localhost"). -EINVAL with *ret_error
 * saying what is wrong (newly allocated; may be NULL when out of memory). */
/* Whether image is a plausible image reference as a request or a flag names it: lowercase
 * letters, digits and ._-/:@, starting with a letter or digit, at most 255 bytes. */
bool image_ref_valid(const char *image);

int oci_ref_parse(const char *s, struct oci_ref *ret, char **ret_error);
void oci_ref_done(struct oci_ref *r);

/* A content descriptor. */
struct oci_descriptor {
	char *media_type;
	char *digest; /* "sha256:<64 lowercase hex>", checked */
	uint64_t size;
};
void oci_descriptor_done(struct oci_descriptor *d);

/* What a manifest document is. */
enum oci_kind {
	OCI_KIND_MANIFEST, /* an image manifest (OCI or Docker v2 schema 2) */
	OCI_KIND_INDEX,    /* an image index or Docker manifest list */
};

/* An image manifest: its config and layers (in order, lowest first). */
struct oci_manifest {
	struct oci_descriptor config;
	struct oci_descriptor *layers;
	size_t n_layers;
};
void oci_manifest_done(struct oci_manifest *m);

/* Says what kind of document json is, from its mediaType field, or from media_type (the
 * Content-Type the registry sent; may be NULL) when the document has none. -EINVAL with
 * *ret_error for anything else (schema 1 manifests included). */
int oci_document_kind(const char *json, size_t len, const char *media_type, enum oci_kind *ret,
                      char **ret_error);

/* Parses an image manifest: schemaVersion 2, a config descriptor, 1..OCI_LAYERS_MAX layers of
 * a tar media type (plain, gzip or zstd; OCI or Docker), every digest well formed. */
int oci_manifest_parse(const char *json, size_t len, struct oci_manifest *ret, char **ret_error);

/* Picks the linux/amd64 image manifest from an index (a manifest with no platform is not
 * picked). -ENOENT with *ret_error listing the platforms there are when none matches. */
int oci_index_pick(const char *json, size_t len, struct oci_descriptor *ret, char **ret_error);

/* From an image config: the architecture/os (must be amd64/linux when given) and
 * config.Env ("K=V" strings, NULL-terminated, newly allocated; entries without '=' are
 * refused). */
int oci_config_parse(const char *json, size_t len, char ***ret_env, char **ret_error);

/* A Bearer challenge: WWW-Authenticate: Bearer realm="https://auth/token",service="x",
 * scope="repository:a/b:pull". Basic and other schemes are -EOPNOTSUPP. Quoted strings may
 * hold backslash escapes and commas; unknown parameters are ignored. */
struct oci_challenge {
	char *realm; /* required, http or https URL */
	char *service;
	char *scope;
};
int oci_challenge_parse(const char *header, struct oci_challenge *ret, char **ret_error);
void oci_challenge_done(struct oci_challenge *c);

/* Whether s is "sha256:" followed by 64 lowercase hex digits. */
bool oci_digest_valid(const char *s);
