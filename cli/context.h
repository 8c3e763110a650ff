/* context.h: sandbox-cli's contexts (as in kubectl): named endpoints with their credentials,
 * kept in $XDG_CONFIG_HOME/sandbox-cli/config.json (~/.config/... without it). The directory
 * is 0700 and the file 0600, written atomically, because it holds tokens. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>
#include "macro.h"

struct context_store {
	char *path;      /* the config file */
	json_t *root;    /* {"current": NAME, "contexts": {NAME: {endpoint, token, ca}}} */
	bool loose_mode; /* the file is readable by group or others */
	char error[256]; /* what is wrong with the file, after -EBADMSG */
};

/* The config file's path; NULL when out of memory or no home directory is known. */
char *context_config_path(void);

/* Reads the config (a missing file is an empty config). 0; -EBADMSG with s->error set when
 * the file is not a config; other -errno when it cannot be read. */
int context_load(struct context_store *s);
/* Writes it back (creating the directory 0700, the file 0600, atomically). */
int context_save(struct context_store *s);
void context_store_done(struct context_store *s);

/* Names are 1 to 63 of [A-Za-z0-9._-], not starting with '.' or '-'. */
bool context_name_valid(const char *name);

/* The context object, borrowed from the store; NULL when there is none of that name. */
json_t *context_get(const struct context_store *s, const char *name);
/* The current context's name, or NULL. */
const char *context_current(const struct context_store *s);
/* Adds (or, with replace, replaces) a context; token and ca may be NULL. -EEXIST, -ENOMEM. */
int context_put(struct context_store *s, const char *name, const char *endpoint, const char *token,
                const char *ca, bool replace);
/* -ENOENT when there is no such context; removing the current one leaves none current. */
int context_remove(struct context_store *s, const char *name);
int context_use(struct context_store *s, const char *name);

/* Reads a token file: a regular file that only its owner can read, holding one line of
 * printable characters (trailing whitespace is dropped). 0; -EPERM when group or others may
 * read it (*ret_mode says the mode); -EBADMSG when its content is not a token; -errno. */
int context_read_token(const char *path, char **ret, mode_t *ret_mode);
/* Whether s can be sent as a bearer token: printable ASCII, no spaces, 1 to 4096 bytes. */
bool context_token_valid(const char *s);
