/* util.h: small helpers every program uses (time, parsing, random ids, safe text).
 * Includes banned.h last, so project code that includes util.h cannot use banned calls. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include "buf.h"
#include "macro.h"

/* Milliseconds on CLOCK_MONOTONIC (deadlines) and CLOCK_REALTIME (timestamps); microseconds
 * on CLOCK_MONOTONIC (latencies). */
uint64_t now_mono_ms(void);
uint64_t now_mono_us(void);
int64_t now_unix_ms(void);

/* Writes "2026-11-29T20:18:20Z" (UTC, seconds precision) into out (at least 21 bytes). */
void format_rfc3339(int64_t unix_ms, char out[static 32]);

/* Strict decimal parse: the whole string, no sign, no spaces; -EINVAL / -ERANGE. */
int parse_u64(const char *s, uint64_t *ret);
int parse_u64_n(const char *s, size_t n, uint64_t *ret);

/* Fills out with n random bytes from getrandom(2). */
int random_bytes(void *out, size_t n);
/* Lowercase hex of n random bytes, NUL-terminated (out holds 2n+1). */
int random_hex(char *out, size_t nbytes);

/* Constant-time comparison of two byte strings; lengths are compared too (without early exit
 * on content). */
bool secret_equal(const void *a, size_t alen, const void *b, size_t blen);

/* Appends s to b as a double-quoted string safe for a log line or a terminal: control bytes,
 * quotes, backslashes and non-ASCII bytes are escaped. At most max input bytes are shown. */
int buf_put_quoted(struct buf *b, const char *s, size_t len, size_t max);
/* Guest and server text made safe for one line of a log or a terminal, and still readable:
 * printable ASCII is kept, newline, carriage return and tab become \n, \r and \t, every other
 * byte (control bytes, DEL, escape sequences' ESC, non-ASCII) \xNN. termsafe_copy writes the
 * len bytes of s so into dst (size bytes, always NUL-terminated when size > 0), as many as fit
 * whole, and returns the bytes written; termsafe_dup returns a new string (NULL: out of
 * memory; s NULL: ""), caller frees. */
size_t termsafe_copy(char *dst, size_t size, const char *s, size_t len);
char *termsafe_dup(const char *s);

/* mkdir -p with mode for every created directory; existing ones are left as they are. */
int mkdir_p(const char *path, mode_t mode);
/* The value of a hexadecimal digit (either case), or -1 for any other byte. */
int hex_digit(int c);
/* Whether s (n bytes, which may hold a NUL) is an environment variable's name of at most max
 * bytes: ^[A-Za-z_][A-Za-z0-9_]*$ (the API's rule; the secrets and records files keep it). */
bool env_name_ok(const char *s, size_t n, size_t max);
/* Whether a DNS label of n bytes (lowercase) reads as a number to an address parser
 * (inet_aton, getaddrinfo, a URL parser): decimal or octal digits, or 0x and hex digits. A
 * name whose last label is one is an IPv4 address in some spelling ("127.1", "0x7f000001")
 * that a resolver dials without asking DNS, so nothing that decides egress by name may take
 * one for a name (the policy engine, the proxy's SNI and Host readers share this). */
bool label_is_number(const char *l, size_t n);
/* A DNS host name as a guest names where it goes (a TLS server name, an HTTP Host): checked
 * and written to out (HOST_NAME_MAX_LEN + 1 bytes) lowercase, without one trailing dot.
 * Labels of 1 to 63 bytes of [a-z0-9-_], at most 253 bytes in all, and never an address in
 * any spelling (its last label a number). NULL, or why it is not such a name. */
#define HOST_NAME_MAX_LEN 253
const char *host_name_normalise(const char *in, size_t n, char *out);

/* Writes all of data to fd, through EINTR and short writes, and waiting out EAGAIN when
 * someone made fd non-blocking; -errno (EPIPE when the reader went away). */
int write_all(int fd, const void *data, size_t len);
/* Reads a whole small file (at most max bytes) into a NUL-terminated string. */
int read_file_max(const char *path, size_t max, char **ret, size_t *ret_len);
/* Reads the whole of path (not through a symlink), a regular file of this uid alone (no group
 * or other bits) of at most max bytes, into a NUL-terminated string the caller wipes (it holds
 * secrets). -ENOENT (no *ret_why) when there is none, -ENOMEM, else -errno with *ret_why
 * (caller frees) saying what is wrong with "it": -EPERM not such a file, -EFBIG larger than
 * max, -EIO a short read. Nothing is returned on failure. */
int read_private_file(const char *path, size_t max, char **ret, size_t *ret_len, char **ret_why);
/* After a rename or an unlink in dir: its entry is on disk too (best effort). */
void fsync_dir(const char *dir);
/* Writes data to path atomically (tmp + fsync + rename) with the given mode. */
int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode);

/* asprintf that returns NULL on failure and never leaves *ret undefined. */
char *strdup_printf(const char *fmt, ...) _printf_(1, 2);
/* Replaces *ret_error (when ret_error is not NULL) with the message (NULL when out of memory)
 * and returns r: `return error_printf(ret_error, -EINVAL, "...", ...);`. */
int error_printf(char **ret_error, int r, const char *fmt, ...) _printf_(3, 4);

bool str_has_prefix(const char *s, const char *prefix);
/* The index of s among the n names (a table of an enum's names, holes allowed), or -1 when s
 * is NULL or none of them. */
int name_index(const char *const *names, size_t n, const char *s);

#include "banned.h"
