/* image-install.h: installing one image: resolve its name (a registry, or an OCI image layout
 * this machine built, such as sandbox-base), fetch and verify its blobs into the layer cache,
 * apply its layers onto a fresh tree, and turn the tree into a read-only ext4 root disk with
 * /sandbox/home and the guest agent put in. It handles bytes from the network, so sandboxd runs
 * it as a child (`sandboxd image install --progress-fd N IMAGE`), never on its loop, and reads
 * its progress as JSON lines; an operator can run the same command by hand.
 *
 * What it leaves under the state directory (images.c reads it):
 *   images/blobs/sha256/HEX   every manifest, config and layer, verified, shared by images
 *   images/refs/HEX.json      one per installed name (HEX: sha256 of the name)
 *   images/local/NAME/        OCI layouts built here (`sandboxd image build-base`)
 *   rootfs/MHEX-AGENT.ext4    the root disk of manifest MHEX for agent build AGENT
 *   images/tmp/               trees being built (removed when a build ends, and at start) */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define IMAGE_AGENT_ID_LEN 12 /* hex digits of the agent's sha256 in a disk's name */

struct install_opts {
	const char *state_dir;
	const char *agent;    /* sandbox-guestd; NULL: beside sandboxd */
	const char *agent_id; /* image_agent_id of agent when the caller knows it; NULL: hash it */
	char *const *insecure;
	size_t n_insecure;
	char *const *local; /* --local-registry: HTTPS registries on local addresses */
	size_t n_local;
	const char *ca_file;
	int progress_fd; /* JSON lines go here; -1: none */
	bool fetch_only; /* stop once the blobs are fetched and verified (benchmarks) */
	bool quiet;      /* no human progress on stderr */
};

/* Installs name. On success *ret is the record written to images/refs ({image, digest, disk,
 * size_bytes, env, layers, agent, installed_at, timings}); on failure -errno and
 * *ret_error for a person: -EINVAL a malformed name, -ENOENT no such image (or refused by
 * the registry: -EACCES), -EPROTO content that failed verification, -EIO network or disk. */
int image_install(const struct install_opts *o, const char *name, json_t **ret, char **ret_error);

/* Paths under the state directory (newly allocated; NULL when out of memory). */
char *image_ref_path(const char *state_dir, const char *name);
char *image_blob_path(const char *state_dir, const char *digest);
/* The local OCI layout for name ("sandbox-base" or "sandbox-base:TAG"), or NULL when name is
 * not a plain local name or no layout is there. *ret_tag: the tag part (default "latest"). */
char *image_local_layout(const char *state_dir, const char *name, char **ret_tag);

#define IMAGE_BASE "sandbox-base" /* the default image, built here by image build-base */
/* Whether name is the base image (any tag of it): never looked for in a registry. */
bool image_is_base(const char *name);

/* The first IMAGE_AGENT_ID_LEN hex digits of the agent's sha256 into out. */
int image_agent_id(const char *agent, char out[static IMAGE_AGENT_ID_LEN + 1]);

/* `sandboxd image SUBCOMMAND ...` (argv[0] is "image"); returns the exit status. */
int image_main(int argc, char **argv);
