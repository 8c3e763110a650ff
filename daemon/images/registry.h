/* registry.h: where an image's bytes come from: a registry over the OCI distribution API
 * (libcurl, anonymous pulls with the bearer-token flow), or an OCI image layout directory on
 * this machine (the base image). Blocking: it runs in the install child (image-install.c),
 * never on sandboxd's loop. Every blob is checked against its digest and size before it is
 * kept, and a pinned manifest must hash to its pin. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "oci.h"

struct oci_source;

struct registry_opts {
	/* "host:port" registries that may be reached over plain HTTP (--insecure-registry);
	 * every other registry is HTTPS with the system's CA store. */
	char *const *insecure;
	size_t n_insecure;
	/* "host:port" HTTPS registries the operator named as on this machine's networks
	 * (--local-registry). These and the insecure ones are the only registries sandboxd
	 * connects to on a loopback, private or link-local address (registry_address_public),
	 * and where they send sandboxd (a token realm, a redirect) is not checked either. */
	char *const *local;
	size_t n_local;
	/* Seconds without a byte before a transfer is given up (0: 60). */
	unsigned stall_secs;
	/* A CA bundle file to trust instead of the system's (tests); NULL: the system's. */
	const char *ca_file;
};

/* A source for one repository of a registry. Nothing is fetched yet. */
int oci_source_registry(const struct oci_ref *ref, const struct registry_opts *o,
                        struct oci_source **ret, char **ret_error);
/* A source reading the OCI image layout at dir (oci-layout, index.json, blobs/sha256/);
 * tag names the image through its org.opencontainers.image.ref.name annotation (NULL: the
 * index's only manifest). */
int oci_source_layout(const char *dir, const char *tag, struct oci_source **ret, char **ret_error);
void oci_source_free(struct oci_source *s);

/* What resolving a reference gives: the linux/amd64 image manifest, its digest (the image's
 * identity), and the environment of its config. */
struct oci_image {
	char *digest; /* of the image manifest */
	struct oci_manifest manifest;
	char **env; /* from the config, NULL-terminated */
};
void oci_image_done(struct oci_image *img);

/* Fetches the manifest for the reference (following an index to linux/amd64), then the
 * config blob, verifying each against its digest; a reference with a digest must match it.
 * Errors carry the registry's reason (its HTTP status and the errors[] message of the
 * body, e.g. "registry 127.0.0.1:5000: manifest unknown (404)"), never hang (connect and
 * stall timeouts). -ENOENT: no such image or tag; -EACCES: refused (private, 401/403);
 * -EPERM: a registry the operator did not name is on a local address, or sent sandboxd to
 * one (nothing was sent there; the message is the same whatever listens there);
 * -EPROTO: the registry sent something invalid; -EIO: network. */
int oci_source_resolve(struct oci_source *s, struct oci_image *ret, char **ret_error);

/* Called while a blob downloads: bytes so far and the blob's size. */
typedef void (*oci_progress_fn)(const struct oci_descriptor *d, uint64_t done, void *data);

/* Stores blob d as dest (a path; written to dest.partial-PID then renamed, so dest exists
 * only when it is complete and verified). Streams: never holds the blob in memory. Refuses
 * a blob larger than d->size as it arrives, and one whose sha256 differs (nothing is left
 * behind). */
int oci_source_fetch_blob(struct oci_source *s, const struct oci_descriptor *d, const char *dest,
                          oci_progress_fn progress, void *data, char **ret_error);

struct sockaddr;
/* Whether sa is an address anyone on the internet could reach: not loopback, private,
 * link-local (cloud metadata), CGNAT, unique-local, site-local, multicast, reserved or
 * unspecified (IPv6 that embeds IPv4, mapped, compatible, NAT64 or 6to4, judged as that
 * IPv4). Every connection for a registry the operator did not name goes only to such
 * addresses: the address is judged as libcurl resolved it, just before the socket that
 * connects to it is opened, so a name is judged by what it resolves to and cannot resolve
 * to something else in between. */
bool registry_address_public(const struct sockaddr *sa);
