/* secrets.h: each user's saved secrets (PUT /v1/secrets/{NAME}): values an agent's sandbox
 * gets in its environment when its create does not carry them. One file per owner,
 * STATE/secrets/<sha256 of the owner>.json, 0600 in a 0700 directory, written whole (a
 * temporary file, fsync, rename). Values are never returned by the API, never logged and
 * never in the store; only a create of the same owner reads them.
 *
 * The file is read back from disk, so it is parsed as hostile bytes: bounded and strict
 * (secrets_parse, fuzzed by fuzz/fuzz-secrets.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SECRETS_VERSION 1
#define SECRETS_MAX 64               /* per owner */
#define SECRET_NAME_MAX 128          /* an environment name */
#define SECRET_VALUE_MAX (32u << 10) /* what a create's env value may be */
#define SECRETS_OWNER_MAX 320
#define SECRETS_MAX_BYTES (8u << 20)

struct secret {
	char *name;
	char *value;
	int64_t updated_at; /* unix ms */
};

struct secrets {
	char *owner;
	struct secret *v; /* sorted by name */
	size_t n;
};

/* Frees what s holds, erasing the values first; s may be all zero. */
void secrets_done(struct secrets *s);

/* Reads an owner's file from bytes (not NUL-terminated). -EINVAL with *ret_why (caller frees;
 * it never quotes the input) or -ENOMEM; ret is written only on success. */
int secrets_parse(const char *data, size_t len, struct secrets *ret, char **ret_why);
/* The bytes of s, as secrets_parse reads them (caller frees, erasing). -EINVAL when s breaks
 * a bound, -ENOMEM. */
int secrets_format(const struct secrets *s, char **ret, size_t *ret_len);

/* The secret named name, or NULL. */
const struct secret *secrets_find(const struct secrets *s, const char *name);
/* Sets (adds or replaces) a secret. -E2BIG when s holds SECRETS_MAX others already, -EINVAL
 * for a name or value out of bounds, -ENOMEM. */
int secrets_set(struct secrets *s, const char *name, const char *value, int64_t now_ms);
/* Removes one: -ENOENT when there is none of that name. */
int secrets_remove(struct secrets *s, const char *name);

/* owner's secrets from STATE/secrets (none yet: an empty set, 0). -errno with *ret_why for a
 * file that cannot be read, is not sandboxd's uid's alone, or is not what it should be. */
int secrets_load(const char *state_dir, const char *owner, struct secrets *ret, char **ret_why);
/* Writes s (its owner's file; with no secrets left, removes it). -errno. */
int secrets_save(const char *state_dir, const struct secrets *s);
