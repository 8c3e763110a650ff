/* options.h: sandboxd's command line, parsed and checked before anything starts. Every
 * refusal names the flag that is missing or wrong. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "log.h"

#define OPTIONS_MAX_ALLOWED_HOSTS 32
#define OPTIONS_MAX_LIST                                                                           \
	64 /* --insecure-registry, --local-registry, --allow-image, --node-label                   \
	    */

struct options {
	char *state_dir;
	char *socket_path; /* NULL: no unix socket ("--socket none") */
	char *listen;      /* HOST:PORT or NULL */
	char *listen_host;
	char *listen_port;
	bool listen_loopback;
	char *token_file;
	bool token_generate; /* the default listener: create token_file when it is absent */
	char *tls_cert;
	char *tls_key;
	char *client_ca;
	char *allowed_hosts[OPTIONS_MAX_ALLOWED_HOSTS];
	size_t n_allowed_hosts;
	char *backend;
	char *accel;  /* auto, kvm, tcg */
	char *kernel; /* the operator's guest kernel and initramfs, or NULL */
	char *initrd;
	char *agent; /* sandbox-guestd, or NULL: beside sandboxd */
	unsigned boot_timeout_secs;
	unsigned stop_timeout_secs;          /* how long a guest has to power off; then QMP quit */
	unsigned reconcile_interval_secs;    /* the reconciler's period (reconcile.h) */
	unsigned max_connections;            /* per listener */
	unsigned max_connections_per_client; /* per TCP client address (IPv6: /64); 0: none */
	unsigned max_runs_per_sandbox;       /* POST …/run under way at once (0: no limit) */
	unsigned max_runs_per_user;          /* ... across one owner's sandboxes */
	unsigned max_processes_per_sandbox;  /* processes running or starting (0: no limit) */
	unsigned max_processes_per_user;     /* ... across one owner's sandboxes */
	uint64_t forget_after_secs; /* --forget-after: terminated sandboxes are then forgotten */
	unsigned client_grace_secs; /* --client-grace: a bound sandbox's client may be away */
	unsigned read_grace_secs;   /* --read-grace: a sandbox started to read its files runs on */
	bool allow_unconfined;      /* as root: run VMMs without cgroup limits where none can be
	                             * made, rather than refuse to start */
	bool keep_sandboxes;        /* --keep-sandboxes: a stop of sandboxd leaves the VMs
	                             * running and the next start takes them back, from their
	                             * records (records.h); without it a stop ends them all */
	char *insecure_registries[OPTIONS_MAX_LIST]; /* HOST:PORT reached over plain HTTP */
	size_t n_insecure_registries;
	char *local_registries[OPTIONS_MAX_LIST]; /* HOST:PORT over HTTPS on a local address */
	size_t n_local_registries;
	bool user_pull; /* --user-pull: a user's create may install an image (default on) */
	char *allowed_images[OPTIONS_MAX_LIST]; /* the policy's images list; none: any image */
	size_t n_allowed_images;
	char *default_image;       /* NULL: the policy's (sandbox-base) */
	char *policy_file;         /* --policy: the operator's YAML policy, or NULL */
	char *audit_log;           /* --audit-log: the JSONL audit log, or NULL ("none") */
	unsigned audit_max_events; /* the store's events at most (--audit-max-events) */
	unsigned audit_max_bytes;  /* the audit log rotates past this (--audit-max-bytes) */
	char *metrics_listen;      /* --metrics-listen HOST:PORT (loopback), or NULL */
	char *metrics_host;
	char *metrics_port;
	char *preview_listen; /* --preview-listen HOST:PORT, or NULL (off) */
	char *preview_host;
	char *preview_port;
	bool preview_default; /* the default address: when it is taken, previews are off (a
	                       * warning), where an address the operator chose refuses to start */
	char *preview_domain; /* --preview-domain, lowercase (default localhost) */
	bool egress; /* --egress on|off: taps, nftables and the egress worker (root) */
	unsigned egress_proxy_port;  /* where the worker's proxy listens (tcp; default 3128) */
	unsigned egress_dns_port;    /* where its DNS stub listens (udp; default 7353) */
	uint32_t egress_subnet;      /* the sandboxes' /30s come from here (host order) */
	unsigned egress_subnet_bits; /* its prefix length, at most 22 (256 /30s) */
	bool registration;           /* --registration on: people may create their own user */
	unsigned user_max_sandboxes; /* a user's caps unless their account says otherwise */
	unsigned user_max_cpus;      /* (0: no cap) */
	unsigned user_max_memory_mb;
	unsigned capacity_cpus; /* --capacity-*: what the node offers sandboxes; 0: the machine's */
	unsigned capacity_memory_mb;
	unsigned capacity_disk_mb;
	char *node_labels[OPTIONS_MAX_LIST]; /* --node-label KEY=VALUE, each checked */
	size_t n_node_labels;
	enum log_level log_level;
};

/* Where sandboxd started with neither --socket nor --listen also serves TCP (the dashboard),
 * with an operator token it keeps in the state directory. */
#define OPTIONS_DEFAULT_LISTEN "127.0.0.1:7070"
#define OPTIONS_DEFAULT_TOKEN_FILE "operator.token"
/* Previews (docs/api.md, "Previews"): their listener and the domain their hosts are under. */
#define OPTIONS_DEFAULT_PREVIEW_LISTEN "127.0.0.1:7071"
#define OPTIONS_DEFAULT_PREVIEW_DOMAIN "localhost"
/* The audit log, in the state directory unless --audit-log says otherwise. */
#define OPTIONS_DEFAULT_AUDIT_LOG "audit/events.jsonl"
#define OPTIONS_DEFAULT_AUDIT_MAX_EVENTS 500000

/* Parses argv into opts, applying the defaults for the current user (root or not).
 * Returns 0 to go on, 1 when --help or --version was handled, -EINVAL after printing a
 * message that says what to do. */
int options_parse(int argc, char **argv, struct options *opts);
/* Checks the combinations that must refuse to start (token, TLS, client CA, token file
 * permissions). Logs the refusal and returns -EINVAL; otherwise reads the token. */
int options_check(const struct options *opts, char **ret_token, size_t *ret_token_len);
void options_done(struct options *opts);

/* Whether host (a name or address literal) only ever means this machine. */
bool host_is_loopback(const char *host);
