/* images.h: the images this sandboxd has, as a resource: what is installed (read at start
 * from what `sandboxd image install` left in the state directory), installs under way (one
 * child per image, whose JSON progress lines become `image.progress` events), the sandboxes
 * waiting for one, removal with garbage collection of unused layers, and the policy's list
 * of permitted images. A name is an image as the request wrote it: two spellings of one image
 * are two entries sharing a root disk. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "error.h"
#include "list.h"
#include "policy.h"

struct sandboxd;
struct image;

enum image_state {
	IMAGE_INSTALLING,
	IMAGE_INSTALLED,
};

/* Called once when an install a waiter joined ends: img is the installed image, or NULL
 * with error (-errno) and why (for a person) when it failed. The waiter is unlinked before
 * the call. Initialise link with list_init() (cancel is then safe at any time). */
struct image_waiter {
	struct list_node link;
	void (*fn)(struct image_waiter *w, const struct image *img, int error, const char *why);
	void *data;
};

struct image {
	struct list_node link; /* images.c's list */
	char *name;
	char *digest; /* of the image manifest; NULL for a built-in disk or before resolving */
	char *disk;   /* the root disk */
	char **env;   /* the image's environment without HOME and USER; NULL-terminated */
	uint64_t size_bytes;
	int64_t installed_at; /* unix ms */
	enum image_state state;
	bool builtin;     /* a disk sandboxd's setup made (busybox), never removed */
	bool rebuild;     /* installed, but its disk is gone (built for another agent and
	                   * removed at start): built again, from the cache, on first use */
	json_t *progress; /* while installing: [{digest, done, total}] per layer */
	json_t *layers;   /* installed: the layer digests (for garbage collection) */
	struct install_job *job;
	struct list_node waiters;
};

int images_init(struct sandboxd *d);
void images_free(struct sandboxd *d);
/* A disk a backend provides itself under a name (the busybox test image). */
int images_add_builtin(struct sandboxd *d, const char *name, const char *disk);
/* At start, once the sandboxes were taken back: removes the root disks built for another
 * guest agent that no live sandbox's image uses, and logs what it freed. */
void images_collect_old_disks(struct sandboxd *d);

/* The installed image called name, or NULL. */
const struct image *images_installed(struct sandboxd *d, const char *name);

/* Whether a request may name this image: well formed (else invalid) and permitted by the
 * policy's images list (else refused). */
int images_check(struct sandboxd *d, const char *name, struct err *err);

/* Whether a user's create may install name when it is not installed: always with
 * --user-pull on (the default); with it off only when no registry is asked for a new image,
 * that is, when name is known here (installed, being installed, installed by hand, or to be
 * built again from its cached layers) or built on this machine (sandbox-base). Otherwise
 * refused. The registry address guard (registry.h) applies to every install either way. */
int images_check_user_pull(struct sandboxd *d, const char *name, struct err *err);

/* Starts installing name unless it is installed or being installed, and joins w (may be
 * NULL) to it. Returns 1 when it is installed already (w is not called), 0 when w will be
 * called, -errno when no install could begin (err says why). */
int images_install(struct sandboxd *d, const char *name, struct image_waiter *w, struct err *err);
void image_waiter_cancel(struct image_waiter *w);

/* What an install that failed with error (and why, if it said) means to the one who asked:
 * a name that is invalid, an image the registry does not have or will not show (not found),
 * a registry the operator's rules keep sandboxd from (-EPERM: refused), or one that could
 * not be fetched now (unavailable). Fills err and returns error. */
int images_install_error(int error, const char *why, struct err *err);

/* The API object {image, digest, state, size_bytes, default, in_use, ...}. */
json_t *image_to_json(struct sandboxd *d, const struct image *img);
/* image_to_json of the image called name (whatever its state), or NULL. */
json_t *images_get_json(struct sandboxd *d, const char *name);
/* Every image, the default one included when it is not installed (state "absent"). */
json_t *images_list_json(struct sandboxd *d);
/* Removes an installed image: not found when there is none, a conflict while a sandbox uses
 * it, for the default image, a built-in one, or one being installed. */
int images_remove(struct sandboxd *d, const char *name, struct err *err);
