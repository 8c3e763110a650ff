/* agents.h: coding agents started in a sandbox by its create ("agent" in POST /v1/sandboxes):
 * the built-in table (the credential each needs, its API hosts, its command lines), the
 * launch once the sandbox runs (a clone of the repo, then the agent as a kept TTY process),
 * and the agent's state in the sandbox (its "agent" object), kept with the sandbox's row.
 *
 * Sits in the core beside proc.c: it starts processes through the sandbox's guest agent
 * (daemon/vm/agent.h) and follows them through the process hubs (proc.h). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct agent;
struct sandbox;
struct sandboxd;

#define AGENT_TASK_MAX (32u << 10)
#define AGENT_REPO_MAX 2048
#define AGENT_ARGS_MAX 64
#define AGENT_ARG_MAX 4096
/* Where a repo is cloned, and where the agent then runs. */
#define AGENT_WORKDIR "/sandbox/home/work"

/* One row of the built-in table (docs/api.md, "Agents"). Lists are NULL-terminated. */
struct agent_kind {
	const char *name;
	const char *const *credentials; /* the environment names, any one of which will do */
	const char *const *hosts;       /* its API hosts, always on the sandbox's allowlist */
	const char *const *interactive; /* its command line without a task */
	const char *const *headless;    /* with a task: these, the args, then the task */
};

/* The table, in the order the docs give it; count in *ret_n. */
const struct agent_kind *agent_kinds(size_t *ret_n);
/* The row named name, or NULL. */
const struct agent_kind *agent_kind_find(const char *name);
/* "claude, codex, gemini or opencode". */
const char *agent_kind_names(void);

enum agent_state {
	AGENT_CLONING,  /* the repo is being cloned (or will be once the sandbox runs) */
	AGENT_STARTING, /* the agent's process is being started (or will be) */
	AGENT_RUNNING,
	AGENT_EXITED,
	AGENT_FAILED, /* the clone or the start failed: message says why */
	_AGENT_STATE_MAX,
	_AGENT_STATE_INVALID = -1,
};
const char *agent_state_to_string(enum agent_state s);
enum agent_state agent_state_from_string(const char *s);

struct agent_launch; /* agents.c: the launch under way */

/* A sandbox's agent (sb->agent_run). */
struct agent_run {
	const struct agent_kind *kind;
	char *task;  /* NULL: interactive */
	char *repo;  /* NULL: none */
	char **args; /* NULL-terminated, never NULL */
	enum agent_state state;
	uint32_t pid; /* the agent's process once started; 0 before */
	bool has_exit_code;
	int exit_code;
	char *message; /* why it failed or ended; NULL */
	/* made by this sandboxd's create, not yet launched: a run loaded from the store in
	 * cloning or starting was cut short by a restart of sandboxd */
	bool fresh;
	struct agent_launch *launch; /* while the clone or the start is under way */
};

/* A new run of kind (task, repo NULL for none; args may be NULL). -ENOMEM. */
int agent_run_new(const struct agent_kind *kind, const char *task, const char *repo,
                  char *const *args, struct agent_run **ret);
/* NULL-safe; cancels a launch under way (the sandbox is being freed). Returns NULL. */
struct agent_run *agent_run_free(struct agent_run *run);
/* The API object {name, task, repo, args, state, pid, exit_code, message}; the same object
 * is kept in the sandbox's row. */
json_t *agent_run_to_json(const struct agent_run *run);
/* Back from the row: -EINVAL for an object this version did not write. */
int agent_run_from_json(const json_t *j, struct agent_run **ret);
/* Whether a create waiting for sb should wait on: its agent is still to start. */
bool agent_run_pending(const struct agent_run *run);

/* The host part of a repo URL (http:// or https://, no user or password), lowercased, into
 * host (its size at least 256). -EINVAL when repo is not such a URL. */
int agent_repo_host(const char *repo, char *host, size_t size);

/* The names an agent's sandbox always has on its allowlist, whatever may_allow says: the
 * table's hosts for kind and the host of repo (NULL: none). A new array, or NULL. */
json_t *agent_own_hosts(const struct agent_kind *kind, const char *repo);

/* The backend's agent of running sandbox sb is ready (lifecycle.c's agent_ready): launches a
 * fresh run, or fails one a restart of sandboxd cut short. */
void agents_ready(struct sandboxd *d, struct sandbox *sb, struct agent *agent);
/* sb's VM is going away (a stop, a failure, its end): a launch under way fails, a running
 * agent has exited. The change is persisted by the state change that follows. */
void agents_vm_gone(struct sandboxd *d, struct sandbox *sb);
/* A process of sb exited (proc.c): the agent's own records its exit code. */
void agents_proc_exited(struct sandboxd *d, struct sandbox *sb, uint32_t pid, int code);
/* After the guest listed its processes again (a restart of sandboxd): a running agent it no
 * longer has is marked exited. */
void agents_procs_listed(struct sandboxd *d, struct sandbox *sb);
