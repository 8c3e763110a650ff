/* sandbox.h: the sandbox object, its lifecycle states and the registry that caches the
 * store's rows in memory.
 *
 * The lifecycle is one enum with a name table and an explicit transition table. Only
 * sandbox_set_state() writes sb->state: it refuses a move not in the table, persists the row
 * and the event in one transaction, logs "old -> new" and publishes the event. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "hashmap.h"
#include "list.h"

struct sandboxd;
struct store;
struct store_sandbox;

enum sandbox_state {
	SANDBOX_PENDING,
	SANDBOX_STARTING,
	SANDBOX_RUNNING,
	SANDBOX_STOPPING,
	SANDBOX_STOPPED,
	SANDBOX_SUSPENDED,
	SANDBOX_FAILED,
	SANDBOX_TERMINATED,
	SANDBOX_SUSPENDING, /* its memory is being saved; the VMM ends then */
	SANDBOX_RESUMING,   /* a VMM restores its saved memory */
	_SANDBOX_STATE_MAX,
	_SANDBOX_STATE_INVALID = -1,
};

const char *sandbox_state_to_string(enum sandbox_state s);
enum sandbox_state sandbox_state_from_string(const char *s);
bool sandbox_transition_allowed(enum sandbox_state from, enum sandbox_state to);

#define SANDBOX_ID_MAX 48   /* "sbx_" + 16 hex, or "sbx_<node>_" + 16 hex */
#define SANDBOX_NAME_MAX 63 /* ^[a-z0-9][a-z0-9-]{0,62}$ */

/* What the backend is doing for a sandbox right now (at most one operation at a time). */
enum sandbox_op {
	SANDBOX_OP_NONE,
	SANDBOX_OP_START,   /* provision mode: a new writable layer, first boot */
	SANDBOX_OP_RESTART, /* restart mode: the same writable layer boots again */
	SANDBOX_OP_STOP,
	SANDBOX_OP_DESTROY,
	SANDBOX_OP_SUSPEND,  /* memory and device state saved, then the VMM ends */
	SANDBOX_OP_RESUME,   /* a VMM restores the saved state */
	SANDBOX_OP_SNAPSHOT, /* a snapshot is written; the state does not change */
};

/* Why a sandbox was ended: the reason of its sandbox.terminated audit record. */
enum sandbox_end {
	SANDBOX_END_REQUEST,  /* DELETE */
	SANDBOX_END_IDLE,     /* idle past its idle timeout */
	SANDBOX_END_LIFETIME, /* its lifetime ran out */
	SANDBOX_END_POLICY,   /* its network is no longer permitted (at a restart) */
	SANDBOX_END_SHUTDOWN, /* sandboxd stopped without --keep-sandboxes (or a start without it
	                       * found it left over) */
	SANDBOX_END_RECORD,   /* with --keep-sandboxes, its record was missing or unreadable at a
	                       * restart, so its environment values could not be restored */
	SANDBOX_END_CLIENT,   /* bound to its client, which went away */
	_SANDBOX_END_MAX,
};

/* "request", "idle", "lifetime", "policy", "shutdown", "record", "client". */
const char *sandbox_end_to_string(enum sandbox_end e);

/* Why sandboxd itself stopped a sandbox: the reason of its sandbox.stopped audit record
 * ("stop" in the state change's data). A stop a request asked for has none. */
enum sandbox_stop {
	SANDBOX_STOP_REQUEST, /* POST …/stop (no reason recorded) */
	SANDBOX_STOP_IDLE,    /* idle past its idle timeout */
	SANDBOX_STOP_READ,    /* started only to read its files, and quiet again */
	_SANDBOX_STOP_MAX,
};

/* What its idle timeout does to a sandbox (the request's "idle_action"). */
enum sandbox_idle_action {
	SANDBOX_IDLE_STOP,      /* stop it: the disk is kept (the default) */
	SANDBOX_IDLE_TERMINATE, /* end it, disk and all */
	SANDBOX_IDLE_SUSPEND,   /* suspend it: memory and disk kept (the default where the
	                         * backend can suspend) */
	_SANDBOX_IDLE_ACTION_MAX,
	_SANDBOX_IDLE_ACTION_INVALID = -1,
};

/* "stop", "terminate", "suspend". */
const char *sandbox_idle_action_to_string(enum sandbox_idle_action a);
enum sandbox_idle_action sandbox_idle_action_from_string(const char *s);

struct sandbox_samples;
struct agent_run;

struct sandbox_env {
	char *name;
	char *value; /* held in memory, and with --keep-sandboxes in its record (records.h);
	              * never in the store, returned or logged */
};

/* A kept process's command line from the sandbox's record, after a restart of sandboxd: the
 * guest lists only each process's program. */
struct sandbox_kept {
	uint32_t pid;
	char **argv;
};

struct sandbox {
	char id[SANDBOX_ID_MAX + 1];
	char *name;  /* NULL when unnamed */
	char *owner; /* stamped from the caller's credential, never from a request */
	enum sandbox_state state;
	char *reason; /* why it failed or ended; NULL otherwise */
	char *image;
	char *backend;     /* name of the backend that runs it */
	char *runtime_ref; /* the backend's reference (VM id); NULL until it has one */

	unsigned cpus;
	unsigned memory_mb;
	uint64_t disk_mb;
	uint64_t idle_timeout_secs; /* 0: none */
	enum sandbox_idle_action idle_action;
	uint64_t lifetime_secs; /* 0: none */
	bool bound_to_client;   /* ended once its client is gone (activity.h) */
	json_t *labels;         /* object of string -> string */
	json_t *network;        /* {mode, allow, deny} */
	json_t *volumes; /* [{name, path, read_only}]: its create's volumes (volumes.h); never NULL
	                  */
	struct sandbox_env *env;
	size_t nenv;
	struct sandbox_kept *kept; /* from its record at a restart, until the guest lists them */
	size_t nkept;
	struct agent_run *agent_run; /* agents.h: the agent its create started; NULL: none */
	/* snapshots.h: the snapshot it was forked from (NULL: none), and its schedule */
	char *snapshot_id;
	uint64_t snapshot_every_secs; /* 0: no scheduled snapshots */
	unsigned snapshot_keep;       /* how many of its scheduled snapshots are kept */
	int64_t snapshot_last;        /* unix ms its schedule last took one (or was set) */
	/* pools.h: booted ahead and waiting in a pool, no one's yet (owner ""): no store row,
	 * no event, hidden from every list and lookup, until a create claims it */
	bool pooled;

	int64_t created_at; /* unix ms */
	int64_t updated_at;
	/* activity.h: what keeps it from idling, and whether its client is still there */
	int64_t last_active;   /* unix ms of the last activity */
	int64_t last_attended; /* unix ms a client last asked for it or had a stream of it */
	bool cpu_ref_set;      /* its VMM's CPU time and the bytes into it at cpu_ref_at */
	uint64_t cpu_ref_ns;
	uint64_t net_ref_bytes;
	int64_t cpu_ref_at;
	enum sandbox_stop stopping; /* why sandboxd stops it, while a stop it began is under way */
	bool idle_suspend;          /* the suspend under way is its idle timeout's */
	/* started by a read of its files while stopped or failed (lifecycle_wake): stopped again
	 * once nothing else used it for --read-grace; a start or a process of its own clears it */
	bool woken_for_files;
	unsigned file_ops;    /* file reads, writes and listings under way (api-files.c) */
	unsigned tunnels;     /* tunnels open or opening (api/tunnel.c) */
	uint64_t state_since; /* monotonic ms it entered its state (sandbox_set_state); 0: before
	                       * this sandboxd ran (the reconciler starts counting then) */

	enum sandbox_op op;
	enum sandbox_end end; /* why it is being ended: set when the destroy begins */
	char *end_why;        /* the reason in full where the table's is too general; or NULL */
	void *backend_data;   /* owned by the backend */
	bool has_slot;        /* its VM holds a slot (struct vm_launch) while it runs */
	unsigned slot;

	/* serialised API object, rebuilt after each change (list responses concatenate these) */
	char *json;
	size_t json_len;

	struct list_node procs;          /* struct proc: its processes, while it runs */
	unsigned run_slots, proc_slots;  /* runs under way, process starts (proc_slot_take) */
	bool procs_listed;               /* the guest's own list was read after (re)start */
	struct sandbox_samples *samples; /* samples.h: measured on the host; NULL: none yet */
	struct list_node by_created;     /* registry: newest first */
	struct list_node waiters;        /* struct sandbox_waiter */
};

/* A waiter is called after every state change of its sandbox, and once more with
 * gone == true if the sandbox leaves memory first. It unlinks itself when done. */
struct sandbox_waiter {
	struct list_node link;
	void (*fn)(struct sandbox_waiter *w, struct sandbox *sb, bool gone);
	void *data;
};
void sandbox_add_waiter(struct sandbox *sb, struct sandbox_waiter *w);
void sandbox_remove_waiter(struct sandbox_waiter *w);
/* Wakes the waiters without a state change (an operation ended in the same state). */
void sandbox_notify_waiters(struct sandbox *sb);

struct sandbox *sandbox_new(void);
/* Forgets sb->kept (the guest listed its processes again). */
void sandbox_kept_clear(struct sandbox *sb);
struct sandbox *sandbox_free(struct sandbox *sb);
DEFINE_FREEP(struct sandbox, sandbox_free)

/* The environment a process gets: the sandbox's as "K=V", then extra's ("K=V", NULL: none;
 * a later one wins in the guest), to be freed with strv_free_erase. NULL when out of memory,
 * or when a value is missing (a sandbox a restart brought back without them). */
char **sandbox_env_strv(const struct sandbox *sb, char *const *extra);
/* Builds the spec object persisted in the store's spec column (no env values). */
json_t *sandbox_spec_to_json(const struct sandbox *sb);
/* Fills cpus, memory_mb, disk_mb, timeouts, labels, network and env names from a stored
 * spec object; -EINVAL if it is not one this version wrote. */
int sandbox_spec_from_json(struct sandbox *sb, const json_t *spec);
/* The sandbox from its store row: -EINVAL if the row is not one this version wrote. */
int sandbox_from_row(const struct store_sandbox *row, struct sandbox **ret);
/* Writes the row of sb to the store, a new one when insert is true (-EEXIST: the id or the
 * owner's live name is taken), else over the existing one (-ENOENT). */
int sandbox_save(struct store *s, const struct sandbox *sb, bool insert);
/* The sandbox with id as stored (terminated ones included). -ENOENT. */
int sandbox_load(struct store *s, const char *id, struct sandbox **ret);
/* Calls fn with each stored sandbox that is not terminated, oldest first; fn takes
 * ownership, and a negative return stops and is returned. A row this version cannot read is
 * logged and skipped. */
int sandbox_load_live(struct store *s, int (*fn)(struct sandbox *sb, void *data), void *data);
/* The same for each stored terminated sandbox, oldest first. */
int sandbox_load_ended(struct store *s, int (*fn)(struct sandbox *sb, void *data), void *data);
/* The API object; env values are never included. */
json_t *sandbox_to_json(const struct sandbox *sb);
/* Changes whenever an API object is rebuilt or a sandbox joins or leaves the registry. */
uint64_t sandbox_generation(void);
/* Rebuilds sb->json after a change. -ENOMEM. */
int sandbox_refresh_json(struct sandbox *sb);
/* When lifetime_secs is set: created_at + lifetime, else 0. */
int64_t sandbox_expires_at(const struct sandbox *sb);

bool sandbox_matches_labels(const struct sandbox *sb, const json_t *filter);
/* A label's key: a lowercase letter or digit first, then lowercase letters, digits and
 * "._/-", 63 at most. Its value: printable ASCII, 253 at most. Sandboxes' labels and the
 * node's (--node-label) alike. */
bool label_key_valid(const char *key);
bool label_value_valid(const char *value);

/* The only writer of sb->state. Refuses moves not in the table with -EINVAL (and logs it:
 * that is a bug). Persists the row and a "state" event in one transaction, logs
 * "old -> new", publishes the event and wakes the waiters. reason may be NULL. A move to
 * terminated records sb->end too. */
int sandbox_set_state(struct sandboxd *d, struct sandbox *sb, enum sandbox_state to,
                      const char *reason);

/* The registry: live sandboxes in memory, by id and newest first. Terminated sandboxes leave
 * memory; the store still answers for them by id. */
struct registry {
	struct hashmap by_id;
	struct list_node all; /* newest first */
	size_t count;
};
void registry_init(struct registry *r);
void registry_done(struct registry *r);
/* Adds sb as the newest (callers add in creation order). */
int registry_add(struct registry *r, struct sandbox *sb);
/* Makes sb the newest: a pooled sandbox that a claim made (created_at now) goes first. */
void registry_make_newest(struct registry *r, struct sandbox *sb);
/* Unlinks the sandbox, tells its waiters it is gone, and frees it after the current batch of
 * events (so callers up the stack may still read it). */
void registry_drop(struct sandboxd *d, struct sandbox *sb);
/* For a registry of terminated sandboxes (ended.h), which no one waits on: adds sb where its
 * created_at puts it (newest first), and unlinks sb, which stays the caller's. */
int registry_add_by_created(struct registry *r, struct sandbox *sb);
void registry_remove(struct registry *r, struct sandbox *sb);
struct sandbox *registry_get(struct registry *r, const char *id);
/* Resolves an id, or a name among owner's live sandboxes (owner NULL: any owner, for an
 * admin; a name then must be unique across owners). A pooled sandbox (pools.h) is found
 * by neither: it is no one's until claimed. */
struct sandbox *registry_find(struct registry *r, const char *ref, const char *owner);
struct sandbox *registry_find_name(struct registry *r, const char *name, const char *owner);

bool sandbox_name_valid(const char *name);
bool sandbox_id_valid(const char *id);

/* The machine id a sandbox's guest is given (/etc/machine-id, vm_launch.machine_id): the
 * first 32 hex digits of sha256("sandboxd machine-id " + id). Stable for the sandbox (a
 * restart or resume keeps it), and its own (a fork's differs from its parent's). */
#define SANDBOX_MACHINE_ID_LEN 32
void sandbox_machine_id(const char *id, char out[static SANDBOX_MACHINE_ID_LEN + 1]);
