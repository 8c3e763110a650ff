/* backend.h: what runs sandboxes. sandboxd drives every backend through these operations,
 * five lifecycle callbacks (start, stop, restart, status, destroy) plus
 * the guest agent that process and file operations go through. The product links the microVM
 * backend; the test tree links a fake one that says so in its name. Nothing else in sandboxd knows
 * how a sandbox runs.
 *
 * Contract for the asynchronous operations (start, restart, stop, destroy): the call returns
 * 0 once the operation is under way, or -errno if it could not begin (nothing was left
 * behind). An operation under way completes exactly once, on the loop, through
 * lifecycle_backend_done(). destroy may be called while another operation is under way: the
 * backend cancels that one (it never completes) and completes only the destroy. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "policy.h"
#include "sandbox.h"

struct sandboxd;
struct backend;

enum backend_status {
	BACKEND_RUNNING, /* the VM runs and answers */
	BACKEND_STOPPED, /* no VM, but its writable layer is kept */
	BACKEND_GONE,    /* nothing of it exists */
};

/* What a backend can do, for /v1/capabilities. */
struct backend_caps {
	const char *accel; /* "kvm", "tcg", or "none" */
	bool suspend;
	bool memory_snapshot;
	bool disk_snapshot;
	bool processes;
	bool files;
	/* the widest network mode it enforces: none without egress (no root, --egress off),
	 * allowlist with it (there is no open mode: everything goes by name) */
	enum net_mode egress;
};

struct backend_ops {
	const char *name;
	/* One line for the startup log and `doctor`, e.g. "qemu microvm (tcg)". */
	const char *(*describe)(struct backend *b);
	void (*caps)(struct backend *b, struct backend_caps *ret);
	void (*free)(struct backend *b);

	/* Lifecycle (asynchronous, see the contract above). start provisions a new writable
	 * layer and boots it; restart boots the layer a stop kept; stop shuts the guest down
	 * cleanly and keeps the layer; destroy ends everything and removes the layer. */
	int (*start)(struct backend *b, struct sandbox *sb);
	int (*restart)(struct backend *b, struct sandbox *sb);
	int (*stop)(struct backend *b, struct sandbox *sb);
	int (*destroy)(struct backend *b, struct sandbox *sb);
	/* Synchronous: what exists of this sandbox now (used to take sandboxes back after a
	 * restart of sandboxd). Must not block for long. */
	int (*status)(struct backend *b, struct sandbox *sb, enum backend_status *ret);
	/* Takes back a sandbox whose VM status() found running after a restart of sandboxd:
	 * supervise it again and reconnect to its agent (asynchronously; a failure is reported
	 * with lifecycle_backend_lost()). NULL: nothing to do. */
	int (*adopt)(struct backend *b, struct sandbox *sb);
	/* After every stored sandbox was looked at: end what the backend finds running that no
	 * sandbox took back. NULL: nothing to do. */
	void (*recovered)(struct backend *b);

	/* Whether its sandboxes boot an image's root disk (images.h): a create then waits for
	 * the image to be installed, and start finds the disk with images_installed(). false:
	 * an image name is only a name to it (the fake backend). */
	bool boots_images;

	/* The connected guest agent of a running sandbox, through which processes and files
	 * work (daemon/vm/agent.h), or NULL when there is none (not running, or a backend without
	 * one: the API answers 501). */
	struct agent *(*agent)(struct backend *b, struct sandbox *sb);
};

struct backend {
	const struct backend_ops *ops;
	struct sandboxd *d;
	void *priv;
};

/* A backend a build offers: its name and a constructor that probes the machine. */
struct backend_entry {
	const char *name;
	int (*create)(struct sandboxd *d, struct backend **ret);
};

/* The backends linked into this binary (defined per binary: the product's list, or the test
 * tree's). The first one is the default. */
extern const struct backend_entry backend_table[];
extern const size_t backend_table_size;

/* Creates the named backend (NULL: the default). -ENOENT when not built in. */
int backend_create(struct sandboxd *d, const char *name, struct backend **ret);
struct backend *backend_free(struct backend *b);
