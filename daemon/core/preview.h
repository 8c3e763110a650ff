/* preview.h: preview URLs (docs/api.md, "Previews"). A preview is one guest port of one
 * sandbox served on an origin of its own, http://p-<id without sbx_>-<port>.<domain>:<listen
 * port>/, and opened by a token that names exactly that sandbox and port: HMAC-SHA256 of
 * "<id>|<port>" under a key kept 0600 in the state directory, in base64url. The host and the
 * token are checked here; the HTTP side (the 302, the cookie, the relay) is
 * daemon/api/api-preview.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "sandbox.h"

#define PREVIEW_KEY_LEN 32
#define PREVIEW_KEY_FILE "preview.key"
#define PREVIEW_TOKEN_LEN 43 /* base64url of 32 bytes, without padding */
/* The query parameter that carries the token, and the cookie it becomes. */
#define PREVIEW_PARAM "sbx_preview"

/* The key in STATE-DIR/preview.key: read, or made (32 random bytes, 0600) when absent. A file
 * that is not a regular file of 32 bytes, or that group or others may read, is refused.
 * -errno with *ret_why saying what is wrong (caller frees). */
int preview_key_load(const char *state_dir, uint8_t key[static PREVIEW_KEY_LEN], char **ret_why);

/* The token of sandbox id's port, NUL-terminated into out. */
void preview_token(const uint8_t key[static PREVIEW_KEY_LEN], const char *id, unsigned port,
                   char out[static PREVIEW_TOKEN_LEN + 1]);
/* Whether token (len bytes, untrusted) is the token of id's port; constant time. */
bool preview_token_valid(const uint8_t key[static PREVIEW_KEY_LEN], const char *id,
                         unsigned port, const char *token, size_t len);

/* The sandbox and port a request's Host header (untrusted) names: HOST or HOST:PORT, HOST
 * exactly "p-<id without sbx_>-<port>.<domain>" in any case (one final dot allowed), with a
 * valid sandbox id and a port 1..65535 written without leading zeros, so one preview has one
 * spelling; nothing else (no address, no userinfo). 0 with ret_id (SANDBOX_ID_MAX + 1 bytes)
 * and ret_port, or -EINVAL. Pure (fuzzed). */
int preview_host_parse(const char *hosthdr, const char *domain,
                       char ret_id[static SANDBOX_ID_MAX + 1], unsigned *ret_port);

/* "p-<id without sbx_>-<port>.<domain>" into out; -E2BIG when it does not fit. */
int preview_host(const char *id, unsigned port, const char *domain, char *out, size_t size);
