/* request.h: decoding and checking API request bodies. Pure functions of (policy, JSON):
 * no I/O and no daemon state, so they are unit-tested from data files and fuzzed.
 * Unknown fields are refused by name; out-of-limit values are 400 and never clamped; what
 * the policy forbids is 403. One bad field fails the whole request. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include "buf.h"
#include "error.h"
#include "policy.h"
#include "sandbox.h"

#define REQUEST_MAX_ENV 256
#define REQUEST_MAX_ENV_VALUE (32u << 10)
#define REQUEST_MAX_LABELS 64
/* The lifetime of a sandbox bound to its client when its request sets none and the policy
 * has no default: the second guard against one left behind. */
#define REQUEST_BOUND_LIFETIME_SECS (24 * 3600)

/* Fills sb (name, image, resources, env, network, labels, timeouts, idle_action,
 * bound_to_client, snapshot_id, the snapshot schedule) from a create body. *ret_wait is false when
 * the body says "wait": false. Under a policy limit on a timeout, a request that leaves it out gets
 * the limit and one that says 0 ("none") is 400. A bound sandbox whose request and policy set no
 * lifetime gets REQUEST_BOUND_LIFETIME_SECS (at most the limit). */
int request_decode_create(const struct policy *p, const json_t *body, struct sandbox *sb,
                          bool *ret_wait, struct err *err);

/* A snapshot schedule from body's every_name and keep_name (the create's snapshot_every_secs
 * and snapshot_keep, or PUT …/snapshot-schedule's every_secs and keep): every 0 (or left out)
 * is none, else at least the policy's min_snapshot_every_secs; keep 1 to max_snapshot_keep
 * (left out: that limit), and only with every. */
#define REQUEST_SNAPSHOT_EVERY_MAX (366ull * 24 * 3600)
#define REQUEST_SNAPSHOT_KEEP_MAX 1000
int request_decode_schedule(const struct policy *p, const json_t *body, const char *every_name,
                            const char *keep_name, uint64_t *ret_every, unsigned *ret_keep,
                            struct err *err);

/* A patch: {} is 400 (it changes nothing); "name": "" removes the name, as null does. */
struct sandbox_patch {
	bool set_name;
	char *name;      /* NULL with set_name: remove the name */
	json_t *labels;  /* NULL: unchanged */
	json_t *network; /* NULL: unchanged; the resolved policy object */
	bool set_idle;
	uint64_t idle_timeout_secs;
	bool set_idle_action;
	enum sandbox_idle_action idle_action;
	bool set_bound;
	bool bound_to_client;
};
int request_decode_patch(const struct policy *p, const json_t *body, struct sandbox_patch *ret,
                         struct err *err);
void sandbox_patch_done(struct sandbox_patch *patch);

/* Refuses a body that is not an object, or has a member not named in allowed
 * (NULL-terminated): 400 "unknown field \"NAME\"" (the name quoted and cut to be safe to
 * show). The one check of unknown fields for every JSON body of the API. */
int request_check_fields(const json_t *obj, const char *const *allowed, struct err *err);

/* "k=v" from ?label= into filter (an object). */
int request_add_label_filter(json_t *filter, const char *kv, struct err *err);

/* The longest environment name a request may give */
#define ENV_NAME_MAX 128
/* ^[A-Za-z_][A-Za-z0-9_]*$ of at most ENV_NAME_MAX bytes (env_name_ok) */
bool env_name_valid(const char *name);
bool env_name_reserved(const char *name);

/* POST …/run and POST …/processes: {argv[], env{}, cwd, stdin(b64), timeout_secs} plus, for
 * processes, {tty, rows, cols, keep}. */
struct exec_request {
	char **argv; /* NULL-terminated */
	char **env;  /* "K=V", NULL-terminated */
	char *cwd;   /* NULL: the home directory */
	struct buf stdin_data;
	bool has_stdin;
	uint64_t timeout_secs; /* 0: none */
	bool tty;
	unsigned short rows, cols;
	bool keep;
};
int request_decode_exec(const json_t *body, bool process_fields, struct exec_request *ret,
                        struct err *err);
void exec_request_done(struct exec_request *x);

/* At most this many volumes per sandbox; a mount point at most this long. */
#define REQUEST_MAX_VOLUMES 8
#define REQUEST_VOLUME_PATH_MAX 255
/* A volume's mount point: absolute, under /sandbox/ or /mnt/ (not /sandbox/home itself),
 * segments of [A-Za-z0-9._@+-] that are not "." or "..", no trailing '/'. */
bool request_volume_path_valid(const char *path);

/* A guest path in the API: absolute, no NUL, no ".." segment, not empty, at most 4096 bytes. */
bool request_path_valid(const char *path);
