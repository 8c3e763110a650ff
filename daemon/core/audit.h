/* audit.h: the audit trail (docs/api.md, "Events"). An event that the audit vocabulary has a
 * word for becomes one flat record, {"time","type","sandbox",...fields}, built here once and
 * kept as the same text in the store (GET …/events answers it) and in the JSONL audit log.
 * A record holds names, counts and hashes: never a process's arguments, an environment value
 * or a file's contents.
 *
 * The audit log is best effort: a record that cannot be written is logged (once, until the
 * file can be written again) and never fails the request that caused it. */
#pragma once

#include <jansson.h>
#include <stdint.h>

struct sandbox;

/* R-S4: a log rotates when a record would take it past 8 MiB (by default; --audit-max-bytes
 * says otherwise, within MIN … MAX); 5 old generations are kept (PATH.1 newest … PATH.5
 * oldest), so at most about 48 MiB in all. */
#define AUDIT_LOG_ROTATE_BYTES (8u << 20)
#define AUDIT_LOG_MIN_BYTES 4096u
#define AUDIT_LOG_MAX_BYTES (1u << 30)
#define AUDIT_LOG_KEEP 5

/* The audit record of an event (its type and data as events.h has them, about sb, at
 * time_ms): compact JSON text in *ret (caller frees), or *ret = NULL when the event has none
 * (a move to starting, a change of labels). -ENOMEM. */
int audit_record(const char *type, const json_t *data, const struct sandbox *sb, int64_t time_ms,
                 char **ret);

struct audit_log;

/* Opens the JSONL log at path: its directory is made (0700) when absent and refused unless
 * it is ours and closed to group and others; the file is created 0600 (and a looser mode
 * tightened) at each write. rotate_bytes is --audit-max-bytes and keep AUDIT_LOG_KEEP in
 * sandboxd (unit tests pass smaller ones). -errno with *ret_why (caller frees) saying what is
 * wrong. */
int audit_log_open(const char *path, uint64_t rotate_bytes, unsigned keep, struct audit_log **ret,
                   char **ret_why);
/* Appends one record (audit_record's text) as a line, rotating first when it would take the
 * file past rotate_bytes. Never fails: a write that does not happen is logged once, and once
 * more with how many were lost when writes work again. NULL-safe (l or text). */
void audit_log_write(struct audit_log *l, const char *text);
struct audit_log *audit_log_free(struct audit_log *l);
