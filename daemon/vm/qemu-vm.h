/* qemu-vm.h: what the files of the microVM backend share (qemu.c: boots, stops, supervision;
 * qemu-state.c: suspend, resume, snapshots and forks; qemu-template.c: templates), internal to
 * daemon/vm: the backend, a VM and the few functions of one that the other calls. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include "agent.h"
#include "backend.h"
#include "bundle.h"
#include "list.h"
#include "loop.h"
#include "qmp.h"

enum vm_phase {
	VM_BOOTING, /* a boot, a resume or a fork: until the agent answers */
	VM_RUNNING,
	VM_STOPPING,
	VM_DESTROYING,
	VM_EXITED,     /* QEMU is gone */
	VM_SUSPENDING, /* its state is being saved; QEMU quits then */
};

struct qemu {
	struct backend b;
	struct vm_bundle bundle;
	char accel[8];
	unsigned tsc_khz;
	char *vms_dir;
	char *qemu_bin;
	bool root;
	bool cgroups;
	unsigned boot_timeout_ms;
	unsigned stop_timeout_ms;
	struct list_node vms;
	char *marker; /* "SANDBOXD_STATE_DIR=<dir>" in every VMM's environment */
	uid_t uid_base;
	struct qemu_templates *templates; /* qemu-template.c */
};

struct vm_save; /* a save under way (qemu-state.c) */

struct vm {
	struct list_node link;
	struct qemu *q;
	struct sandbox *sb;
	char *dir;
	enum vm_phase phase;
	pid_t pid;
	bool child;               /* ours to reap (started by this sandboxd) */
	struct loop_child exited; /* QEMU's exit, ours or an adopted one's */
	struct loop_timer timer;
	struct agent *agent;
	struct qmp *qmp;     /* only while asking QEMU to quit */
	int slot;            /* the launch's, while QEMU runs (its uid) */
	bool net;            /* it has a tap (the launch had a network) */
	uint32_t guest_addr; /* with net: the guest's address it booted with (network order) */
	bool reconnecting;
	bool fresh;              /* its layer is this boot's own, and the boot has not completed */
	bool drop_state;         /* a resume: state.mig goes once the agent answered */
	bool writes_volumes;     /* its launch attached a volume to write (DESTROY_FLUSH_MS) */
	uint64_t start_time;     /* its QEMU's, /proc/<pid>/stat field 22 (0: unknown) */
	struct vm_save *save;    /* a suspend or a snapshot under way, or NULL */
	struct qemu_tmpl *tmpl;  /* this VM is a template being built (qemu-template.c) */
	struct tlaunch *restore; /* restoring from a template: its launch, for a cold boot */
	char cgroup[64];
	char jail[600]; /* the mount point of its root (an empty directory in its dir) */
};

/* Where a boot begins other than from a blank layer (all NULL: a new or a kept layer). */
struct vm_from {
	const char *layer;  /* a new sandbox's layer is a copy of this one (a fork) */
	const char *stream; /* QEMU restores this migration stream instead of booting */
	/* templates (qemu-template.c): the guest's RAM is the file ram_fd, shared (a template
	 * being built) or private (a clone: its stream comes through QMP migrate-incoming) */
	bool ram;
	bool ram_shared;
	int ram_fd;
	bool net_hub; /* has_net without a tap (a template) */
};

static inline struct qemu *
Q(struct backend *b)
{
	return (struct qemu *)b;
}

/* qemu.c */
char *vm_path(const struct vm *vm, const char *file);
void remove_tree(const char *dir);
struct vm *vm_get(struct qemu *q, struct sandbox *sb);
void vm_release_slot(struct vm *vm);
void vm_free(struct vm *vm);
void vm_forget_process(struct vm *vm);
void vm_kill(struct vm *vm);
void vm_remove_runtime(struct vm *vm);
void vm_fail(struct vm *vm, const char *fmt, ...) _printf_(2, 3);
char *log_tail(struct vm *vm);
/* Boots (fresh_layer: a new layer, from from->layer when set) or restores (from->stream) the
 * VM of sb; completes through done once its agent answered. */
int vm_boot(struct qemu *q, struct sandbox *sb, const struct vm_launch *l, bool fresh_layer,
            const struct vm_from *from);

/* qemu-template.c */
int qemu_templates_init(struct qemu *q);
void qemu_templates_free(struct qemu *q);
/* start() of a new sandbox without a snapshot: restores from its key's template where there
 * is one (logging "restored from template"), else boots cold ("cold boot"). */
int qemu_template_start(struct qemu *q, struct sandbox *sb, const struct vm_launch *l);
/* A clone's QEMU runs: sets x-ignore-shared and starts the incoming migration over QMP. */
int qemu_template_incoming(struct vm *vm);
/* A sandbox's boot completed: a template that is due is built now. */
void qemu_template_booted(struct vm *vm);
/* A VM restoring from a template failed: boots it cold instead (true), or false when it was
 * no restore. */
bool qemu_template_fallback(struct vm *vm, const char *reason);
void qemu_template_launch_free(struct tlaunch *t);
/* The template VM's agent answered, it failed, its QEMU exited. */
void qemu_template_ready(struct vm *vm);
void qemu_template_failed(struct vm *vm, const char *reason);
void qemu_template_exited(struct vm *vm, const char *how);

/* qemu-state.c */
#define VM_STATE_FILE "state.mig"
int qemu_suspend(struct backend *b, struct sandbox *sb);
int qemu_resume(struct backend *b, struct sandbox *sb, const struct vm_launch *l);
int qemu_snapshot(struct backend *b, struct sandbox *sb, const char *dir, bool memory);
/* A start from l->snapshot_dir (a fork). */
int qemu_start_from(struct qemu *q, struct sandbox *sb, const struct vm_launch *l);
/* Whether the VM has a saved state (it is suspended when no QEMU runs). */
bool vm_has_state(const struct vm *vm);
/* stop() of a suspended sandbox: the saved state goes; done follows on the loop. */
int vm_drop_state(struct vm *vm);
/* QEMU exited while a save was under way: true when that completed the save (a suspend:
 * reported), false when the exit is a failure, for vm_fail (which reports the save's). */
bool vm_save_exited(struct vm *vm, const char *how);
/* Whether a suspend or a snapshot is under way. */
bool vm_saving(const struct vm *vm);
/* A VM taken back: its sandboxd may have ended during a suspend or a snapshot, which left the
 * guest paused, or still being saved. Cancels any outgoing migration and continues the guest
 * (both do nothing to a guest that runs), quietly, within a few seconds; a suspend's
 * temporary goes. */
void vm_save_recover(struct vm *vm);
/* Gives up a save under way without a report (the VM is being killed or freed). */
void vm_save_free(struct vm *vm);
/* Copies the file from to a new file to (through a temporary, synced, then renamed): a
 * reflink where the filesystem can, else copy_file_range. */
int qemu_copy_file(const char *from, const char *to);
