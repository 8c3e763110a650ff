/* request.h: the payloads sandboxd sends the guest agent (lib/agentproto.h), parsed into
 * plain structs before anything acts on them. Pure code: no side effects, host-testable and
 * fuzzed (fuzz/fuzz-guest.c). Every parser returns 0, -EINVAL for a malformed payload,
 * -E2BIG past a protocol limit, or -ENOMEM; on failure the output holds nothing to free. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "agentproto.h"
#include "strv.h"

#define REQUEST_MAX_VOLUMES 64 /* VOLUME entries in one HELLO */

struct request_hello {
	bool has_nonce, has_time, has_entropy, has_uid, has_gid;
	uint8_t nonce[AP_NONCE_LEN];
	uint8_t entropy[AP_ENTROPY_LEN];
	uint64_t time_ns;
	uint32_t uid, gid;
	uint32_t features; /* AP_FEAT_* (0 when absent: a host from before FEATURES) */
	char *hostname, *root_dev, *upper_dev, *home; /* NULL when absent */
	char **env;                                   /* "K=V", nenv entries, NULL-terminated */
	size_t nenv;
	/* the guest's identity (absent from a host before it: then nothing changes). net is
	 * "GUEST/PREFIX,HOST" or "" for no network (check it with request_parse_net); machine_id
	 * is whatever the host sent (request_machine_id_valid); volumes are "DEV\tMOUNT\tro|rw"
	 * (request_parse_volume), nvolumes entries, NULL-terminated */
	bool has_mac;
	uint8_t mac[6];
	char *net, *machine_id;
	char **volumes;
	size_t nvolumes;
};

/* A HELLO's NET: the guest's and the host's IPv4 address (network byte order) and the
 * prefix length of their link; none when NET is "" (no network: only lo). */
struct request_net {
	bool none;
	uint32_t guest_addr, host_addr;
	unsigned prefix;
};

/* A HELLO's VOLUME: the block device, where it is mounted, and whether read-only. */
struct request_volume {
	char *dev;   /* under /dev/ */
	char *mount; /* passes request_mount_allowed() */
	bool read_only;
};

struct request_exec {
	uint16_t port; /* a tunnel to 127.0.0.1:port (then argv may be NULL and the rest is unused)
	                */
	char **argv;   /* argc >= 1 entries, NULL-terminated (unless port) */
	size_t argc;
	char **env; /* "K=V", nenv entries, NULL-terminated */
	size_t nenv;
	char *cwd; /* NULL: the home directory */
	bool tty, keep;
	uint16_t rows, cols; /* 24 x 80 unless given */
};

/* FILE_READ, FILE_WRITE, FILE_LIST and FILE_REMOVE: PATH is required and must pass
 * request_path_valid(); SIZE and MODE are optional. */
struct request_file {
	char *path;
	bool has_size, has_mode;
	uint64_t size;
	uint32_t mode;
};

int request_parse_hello(const void *p, size_t n, struct request_hello *ret);
void request_hello_done(struct request_hello *h);

/* "10.0.0.2/30,10.0.0.1" (prefix 8..30, both addresses in the prefix, distinct, neither the
 * network's nor its broadcast address) or "" (none). -EINVAL otherwise. */
int request_parse_net(const char *s, struct request_net *ret);
/* 32 lowercase hex digits, not all zero (what /etc/machine-id holds). */
bool request_machine_id_valid(const char *s);
/* Where a volume may be mounted: a valid path under /sandbox/ or /mnt/, not /sandbox/home
 * itself nor above it, without a trailing slash. Everything else (system paths) is refused. */
bool request_mount_allowed(const char *path);
/* "DEV\tMOUNT\tro" or "...\trw": DEV a valid path under /dev/, MOUNT allowed (above). */
int request_parse_volume(const char *s, struct request_volume *ret);
void request_volume_done(struct request_volume *v);

int request_parse_exec(const void *p, size_t n, struct request_exec *ret);
void request_exec_done(struct request_exec *e);

int request_parse_file(const void *p, size_t n, struct request_file *ret);
void request_file_done(struct request_file *f);

/* Absolute, no "." or ".." component, no empty component but the root's, shorter than
 * AP_PATH_MAX. (The host validates paths too; the guest still refuses anything else.) */
bool request_path_valid(const char *path);
