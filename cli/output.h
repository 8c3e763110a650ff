/* output.h: small formatting helpers for sandbox-cli's human and --json output: ages,
 * sizes, server timestamps, JSON lines, and the "sandbox-cli: ..." message on stderr. */
#pragma once

#include <jansson.h>
#include <stdint.h>
#include "macro.h"

/* "5s", "3m", "2h", "4d" (rounded down; negative ages, from clock skew, are "0s"). */
void output_age(int64_t seconds, char out[static 24]);
/* "512M", or "2G" when the size is a whole number of GiB. */
void output_mib(uint64_t mib, char out[static 24]);
/* "512 B", "4.0 KiB", "12.3 MiB", "1.2 GiB": a byte count for a person (binary units). */
void output_bytes(uint64_t bytes, char out[static 24]);
/* Parses the server's "2026-11-29T20:18:20Z" into Unix seconds; -EINVAL. */
int output_parse_time(const char *s, int64_t *ret);

/* Prints j on one line (compact) to stdout and flushes: --json output and streams. */
int output_json_line(const json_t *j);
/* Prints j indented, with every non-ASCII character escaped, for a person. */
int output_json_pretty(const json_t *j);

/* A string member of obj, or NULL when it is absent or not a string. */
const char *output_str(const json_t *obj, const char *key);
/* An integer member of obj, or def. */
int64_t output_int(const json_t *obj, const char *key, int64_t def);

/* "sandbox-cli: " fmt "\n" on stderr. Text that came from the server must be passed through
 * termsafe_dup() first. */
void output_error(const char *fmt, ...) _printf_(1, 2);
