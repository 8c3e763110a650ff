/* backend.h: what runs sandboxes. sandboxd drives every backend through these operations: the
 * five of a sandbox's life (start, restart, stop, status, destroy) plus the guest agent that
 * process and file operations go through. The product links the microVM backend; the test tree
 * links a fake one that says so in its name. Nothing else in sandboxd knows how a sandbox runs.
 *
 * A backend sits below the core: it is handed what it needs (a backend_config when it is
 * created, a vm_launch for each boot) and reports through the backend_events it was given. It
 * calls nothing of the core, the images or egress (tests/lint/check-vm-calls.sh checks).
 *
 * Contract for the asynchronous operations (start, restart, stop, destroy): the call returns
 * 0 once the operation is under way, or -errno if it could not begin (nothing was left
 * behind). An operation under way completes exactly once, on the loop, through the done
 * event. destroy may be called while another operation is under way: the backend cancels that
 * one (it never completes) and completes only the destroy. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "policy.h"
#include "sandbox.h"

struct backend;
struct loop;

enum backend_status {
	BACKEND_RUNNING,   /* the VM runs and answers */
	BACKEND_STOPPED,   /* no VM, but its writable layer is kept */
	BACKEND_GONE,      /* nothing of it exists */
	BACKEND_SUSPENDED, /* no VM, but its saved memory and device state and its layer are
	                    * kept (suspend): resume carries on from them */
};

/* What status() found of a sandbox. For a running VM, also what the launch it was started
 * with said, so that the core can check that it may take it back. */
struct backend_found {
	enum backend_status status;
	bool has_slot; /* running in a slot (a backend without slots: false) */
	unsigned slot;
	bool net;            /* it was given a tap */
	uint32_t guest_addr; /* with net: its guest's address (network order) */
};

/* What a backend can do, for /v1/capabilities. */
struct backend_caps {
	const char *accel; /* "kvm", "tcg", or "none" */
	bool suspend;
	bool memory_snapshot;
	bool disk_snapshot;
	bool volumes; /* vm_launch.volumes are attached as drives */
	bool processes;
	bool files;
	/* the widest network mode it enforces: none without egress (no root, --egress off),
	 * allowlist with it (there is no open mode: everything goes by name) */
	enum net_mode egress;
	/* what its VMMs run without (for the startup line): a uid of their own each (sandboxd
	 * is not root, so they run as its uid), cgroup limits (not root, or
	 * --allow-unconfined where none could be made) */
	bool vmm_shared_uid;
	bool vmm_no_cgroups;
};

/* What a running sandbox's VM uses, measured on the host (never asked of the guest). */
struct backend_sample {
	uint64_t cpu_ns;       /* the VMM's CPU time (user and system) since it started */
	uint64_t memory_bytes; /* the VMM's memory now */
	uint64_t disk_bytes;   /* the allocated size of the writable layer */
};

/* How a backend reports to whoever created it, always on the loop; ctx is the config's. */
struct backend_events {
	/* The operation under way on sb (sb->op) finished: error is 0 or -errno, reason says
	 * what went wrong, for the sandbox's record. */
	void (*done)(void *ctx, struct sandbox *sb, int error, const char *reason);
	/* The agent of a running sandbox (re)connected. */
	void (*agent_ready)(void *ctx, struct sandbox *sb);
	/* A sandbox's VM ended on its own (no operation asked for it). The backend frees the
	 * VM's agent only after this returns. */
	void (*lost)(void *ctx, struct sandbox *sb, const char *reason);
	/* For the sweep: whether the core still has a sandbox with this id (one that is not
	 * terminated, or one it cannot tell about): what the backend keeps of it is its own. */
	bool (*owns)(void *ctx, const char *id);
	/* The sweep removed something of the backend's that no sandbox owned: what ("vmm",
	 * "cgroup", "layer") and which (a pid, a group's name, a sandbox id). */
	void (*swept)(void *ctx, const char *what, const char *name);
};

/* What a backend is told when it is created. The strings are borrowed: they outlive it. */
struct backend_config {
	struct loop *loop;
	const struct backend_events *events;
	void *ctx;
	const char *state_dir;
	const char *accel;  /* auto (or NULL), kvm, tcg */
	const char *kernel; /* the operator's guest kernel and initramfs, or NULL */
	const char *initrd;
	const char *agent;          /* sandbox-guestd, or NULL: beside sandboxd */
	unsigned boot_timeout_secs; /* 0: the backend's default */
	unsigned stop_timeout_secs; /* how long a guest has to power off before QEMU is asked
	                             * to quit (0: at once) */
	/* the core runs egress for its VMs: each is launched with a tap, and what it enforces
	 * is an allowlist */
	bool egress;
	/* as root: VMMs may run without cgroup limits where none can be made (else the
	 * backend refuses to start) */
	bool allow_unconfined;
};

/* A VM's network: a tap and the two ends of its link. */
struct vm_net {
	int tap_fd;          /* borrowed for the call: the backend hands a copy to its VMM */
	uint32_t guest_addr; /* network order */
	uint32_t host_addr;
};

/* A volume attached to a VM (vm_launch.volumes): a raw ext4 file on the host that the guest
 * mounts at mount; never mounted on the host. */
struct vm_volume {
	const char *name;
	const char *file;  /* the host file (the backend opens it: read-only when read_only) */
	const char *mount; /* where the guest mounts it: under /sandbox/ or /mnt/ */
	bool read_only;    /* enforced at the drive (read-only=on), not only by the mount */
};

/* Everything a boot (start or restart) is handed, prepared by the core; borrowed for the
 * call. adopt is handed the same but for the tap (net.tap_fd is -1: its VM has its tap; the
 * addresses are there for the guest's handshake). */
struct vm_launch {
	const char *id;        /* the sandbox's id: its VM's directory and name */
	const char *hostname;  /* the guest's */
	const char *root_disk; /* the image's root disk (read-only); NULL without an image */
	char *const *env;      /* the image's environment, "K=V", NULL-terminated; may be NULL */
	unsigned cpus;
	unsigned memory_mb;
	uint64_t disk_mb; /* the writable layer's size */
	/* its place among the VMs that run at once (backend->slots): its VMM's uid, and with
	 * egress its link */
	unsigned slot;
	bool has_net; /* with net: a tap */
	struct vm_net net;
	/* the guest's identity, given to it at every handshake (a fork's and a template clone's
	 * differ from what their memory held): machine_id is 32 lowercase hex; with a network the
	 * MAC is derived from net.guest_addr */
	const char *machine_id;
	const struct vm_volume *volumes;
	size_t nvolumes;
	/* start only: begin from this snapshot directory (written by snapshot()) instead of a
	 * blank layer: its layer is copied, and where it holds memory the VM is restored from
	 * it (a fork) rather than booted; NULL: a new sandbox */
	const char *snapshot_dir;
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
	int (*start)(struct backend *b, struct sandbox *sb, const struct vm_launch *l);
	int (*restart)(struct backend *b, struct sandbox *sb, const struct vm_launch *l);
	int (*stop)(struct backend *b, struct sandbox *sb);
	int (*destroy)(struct backend *b, struct sandbox *sb);
	/* Synchronous: what exists of this sandbox now (used to take sandboxes back after a
	 * restart of sandboxd). Must not block for long. */
	int (*status)(struct backend *b, struct sandbox *sb, struct backend_found *ret);
	/* Takes back a sandbox whose VM status() found running after a restart of sandboxd:
	 * supervise it again and reconnect to its agent (asynchronously; a failure is reported
	 * with the lost event). NULL: nothing to do. */
	int (*adopt)(struct backend *b, struct sandbox *sb, const struct vm_launch *l);
	/* Ends whatever runs for sb now, at once, and cancels the operation under way (it never
	 * completes, and no lost event follows); its writable layer is kept. The core then fails
	 * the sandbox. For a VM status() found that the core does not take back (it runs with
	 * another network than the one it would be given now), one a failed sandbox's start
	 * finds still running, and the reconciler's VM that is gone or operation that never
	 * finished. Synchronous and idempotent. */
	void (*abandon)(struct backend *b, struct sandbox *sb);

	/* Suspend and resume (asynchronous, the contract above; NULL: not offered). suspend
	 * pauses a running VM, saves its memory and device state into its directory and ends its
	 * VMM (a suspended sandbox holds no RAM); its layer is kept, and status() then finds
	 * BACKEND_SUSPENDED, also after a restart of sandboxd. resume starts a VMM that restores
	 * that state (processes carry on), hands the guest its clock, entropy and network again
	 * through the handshake, and completes once the agent answered; the saved state is
	 * removed then. A resume that cannot restore fails (the state is kept for a retry). */
	int (*suspend)(struct backend *b, struct sandbox *sb);
	int (*resume)(struct backend *b, struct sandbox *sb, const struct vm_launch *l);
	/* Writes a snapshot of sb into dir (an empty directory the core made, on the state's
	 * filesystem): its writable layer, and with memory its memory and device state, taken
	 * at one instant (a running VM is paused for it and carries on). A stopped sandbox gives
	 * a disk-only snapshot (memory: -EINVAL); a suspended one copies its saved state.
	 * Asynchronous through the done event (sb->op is SANDBOX_OP_SNAPSHOT); the sandbox's
	 * state does not change. NULL: not offered. */
	int (*snapshot)(struct backend *b, struct sandbox *sb, const char *dir, bool memory);
	/* Whether the VM of a running sandbox is still there: 0, or -ESRCH when it is gone
	 * though no lost event said so (its VMM vanished unseen). Synchronous, quick, and
	 * without side effects. NULL: nothing to check. */
	int (*check)(struct backend *b, struct sandbox *sb);
	/* Ends and removes what the backend finds of its own that no sandbox owns: VMMs it
	 * does not run (after a restart: that no sandbox took back), the cgroups they leave,
	 * the layers of sandboxes the core does not have (the owns event). Each is told through
	 * the swept event. Never touches a VM a sandbox runs, nor anything not the backend's.
	 * Synchronous; called once every stored sandbox was looked at after a start of
	 * sandboxd, then by the reconciler each period. NULL: nothing to do. */
	void (*sweep)(struct backend *b);

	/* Whether its sandboxes boot an image's root disk (images.h): a create then waits for
	 * the image to be installed, and each launch names its disk. false: an image name is
	 * only a name to it (the fake backend). */
	bool boots_images;

	/* Measures a running sandbox's VM. Synchronous and quick (a few small files read).
	 * -errno (-ESRCH: no VM runs for it). NULL: this backend measures nothing. */
	int (*sample)(struct backend *b, struct sandbox *sb, struct backend_sample *ret);

	/* The connected guest agent of a running sandbox, through which processes and files
	 * work (daemon/vm/agent.h), or NULL when there is none (not running, or a backend without
	 * one: the API answers 501). */
	struct agent *(*agent)(struct backend *b, struct sandbox *sb);
};

struct backend {
	const struct backend_ops *ops;
	struct backend_config cfg;
	void *priv;
	/* Set by its constructor, for the core: */
	unsigned slots;  /* how many VMs may run at once, each in a slot of its own (0: it
	                  * needs no slots) */
	uid_t spare_uid; /* an unprivileged uid that none of its VMMs gets (the egress worker's),
	                  * or 0 */
	const char *builtin_disk; /* a root disk it brings, the image "busybox", or NULL */
};

/* Reports through the events the backend was given. */
static inline void
backend_done(struct backend *b, struct sandbox *sb, int error, const char *reason)
{
	b->cfg.events->done(b->cfg.ctx, sb, error, reason);
}

static inline void
backend_agent_ready(struct backend *b, struct sandbox *sb)
{
	b->cfg.events->agent_ready(b->cfg.ctx, sb);
}

static inline void
backend_lost(struct backend *b, struct sandbox *sb, const char *reason)
{
	b->cfg.events->lost(b->cfg.ctx, sb, reason);
}

static inline bool
backend_owns(struct backend *b, const char *id)
{
	return b->cfg.events->owns(b->cfg.ctx, id);
}

static inline void
backend_swept(struct backend *b, const char *what, const char *name)
{
	b->cfg.events->swept(b->cfg.ctx, what, name);
}

/* A backend a build offers: its name and a constructor that probes the machine. */
struct backend_entry {
	const char *name;
	int (*create)(const struct backend_config *cfg, struct backend **ret);
};

/* The backends linked into this binary (defined per binary: the product's list, or the test
 * tree's). The first one is the default. */
extern const struct backend_entry backend_table[];
extern const size_t backend_table_size;

/* Creates the named backend (NULL: the default) with cfg. -ENOENT when not built in. */
int backend_create(const char *name, const struct backend_config *cfg, struct backend **ret);
struct backend *backend_free(struct backend *b);
