/* records.h: what a sandbox needs across a restart of sandboxd beyond its row in the store,
 * kept with --keep-sandboxes: its environment values and the command lines of its kept
 * processes. One file per sandbox, STATE/records/ID.json, 0600 in a 0700 directory, written
 * whole (a temporary file, fsync, rename) and deleted when the sandbox ends. It is the only
 * place on disk an environment value is ever written; without the flag there are none.
 *
 * A record is read back from disk at a start, so it is parsed as hostile bytes: bounded and
 * strict (record_parse, fuzzed by fuzz/fuzz-record.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include "sandbox.h"

struct sandboxd;

/* The bounds a record is held to. The environment is what a create accepts (256 variables of
 * at most 32 KiB, 256 KiB in all); a kept process's command line is kept whole up to
 * RECORD_MAX_ARGV bytes (else its program alone, as the guest lists it), for the newest
 * RECORD_MAX_PROCS. */
#define RECORD_VERSION 1
#define RECORD_MAX_ENV 256
#define RECORD_MAX_ENV_NAME 256
#define RECORD_MAX_ENV_VALUE (32u << 10)
#define RECORD_MAX_PROCS 256
#define RECORD_MAX_ARGV (16u << 10)
#define RECORD_MAX_BYTES (8u << 20)

struct record {
	char id[SANDBOX_ID_MAX + 1];
	struct sandbox_env *env; /* name and value each */
	size_t nenv;
	struct sandbox_kept *procs;
	size_t nprocs;
};

/* Frees what rec holds, erasing the values first; rec may be all zero. */
void record_done(struct record *rec);

/* Reads a record from bytes (not NUL-terminated). -EINVAL with *ret_why (caller frees) saying
 * what is wrong, -ENOMEM; rec is written only on success. */
int record_parse(const char *data, size_t len, struct record *ret, char **ret_why);
/* The bytes of rec, as record_parse reads them (caller frees, erasing: they hold the values).
 * -EINVAL when rec breaks a bound, -ENOMEM. */
int record_format(const struct record *rec, char **ret, size_t *ret_len);
/* The record of sb as it is now: its environment and its kept processes (the ones it follows,
 * and those its own record named that the guest has not listed again yet). */
int record_of_sandbox(const struct sandbox *sb, struct record *ret);
/* Gives sb the values rec holds: rec must name exactly the variables sb has. The values move
 * from rec to sb, and so do the processes (sb->kept). -EINVAL with *ret_why. */
int record_apply(struct record *rec, struct sandbox *sb, char **ret_why);

/* At startup, before anything else reads the state: with keep, makes STATE/records (0700) and
 * refuses (-EPERM, *ret_why) a directory or a record that is not sandboxd's uid's alone, or
 * not what it should be (a link, not a regular file); half-written temporaries are removed.
 * Without keep, removes the directory and every record in it (*ret_removed says how many). */
int records_prepare(const char *state_dir, bool keep, unsigned *ret_removed, char **ret_why);
/* With --keep-sandboxes, writes sb's record now (without: nothing, 0). -errno. */
int records_save(struct sandboxd *d, const struct sandbox *sb);
/* sb's record (-ENOENT when there is none). -errno with *ret_why for one that cannot be
 * read or is not a record of that sandbox. */
int records_load(struct sandboxd *d, const char *id, struct record *ret, char **ret_why);
/* Deletes sb's record, if any. */
void records_remove(struct sandboxd *d, const char *id);
/* After the take-back: deletes the records no live sandbox has. Returns how many. */
unsigned records_sweep(struct sandboxd *d);
