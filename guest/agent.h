/* agent.h: sandbox-guestd's state and its session with sandboxd (lib/agentproto.h): the
 * frame dispatch, the outgoing queue, and the pump that turns process output and file reads
 * into frames as the queue drains. proc.c, files.c and boot.c act on requests for it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "buf.h"
#include "frame.h"
#include "list.h"
#include "loop.h"
#include "port.h"

#ifndef GUESTD_VERSION
#define GUESTD_VERSION "0.1.0-unknown"
#endif

#define OUT_LOW (256u << 10) /* the pump adds frames while the queue is below this */
#define OUT_HIGH (4u << 20)  /* input is not read while the queue is above this */
#define OUT_MAX (32u << 20)  /* queued bytes, hard limit */
#define CHUNK (64u << 10)    /* data bytes in one OUTPUT or FILE_DATA frame */

struct agent {
	struct loop *loop;
	struct port port;
	struct frame_decoder dec;
	struct buf out; /* frames for the current session, not yet written to the port */
	struct loop_signals signals;
	bool pid1;    /* a VM's init: boots it and owns it (else test mode) */
	bool session; /* a HELLO started the session on this connection */
	bool flush_queued;
	bool throttled;         /* not taking input while the queue is above OUT_HIGH */
	bool mounted;           /* the sandbox root is set up (PID 1) */
	uint32_t host_features; /* AP_FEAT_* the session's host announced in its HELLO */
	uint32_t features;      /* AP_FEAT_* it announces (all it has, unless a test said less) */
	int upper_fd;           /* O_PATH of the writable layer's mount, for SHUTDOWN (PID 1) */
	bool hold; /* AP_HOLD: a suspend comes; no session end kills a process until a HELLO */

	/* how sandbox processes run */
	bool switch_ids; /* setuid/setgid to uid/gid (PID 1, or root with --uid/--gid) */
	uid_t uid;
	gid_t gid;
	char *home;
	char **image_env; /* from HELLO: "K=V", NULL-terminated */
	size_t n_image_env;

	struct list_node procs; /* struct proc, oldest first */
	uint32_t next_id;       /* handles count from 1, never reused in a boot */
	struct list_node jobs;  /* struct file_job: reads, writes and listings in progress */
	struct list_node tunnels_pending; /* tunnel.c: connects under way */
};

int agent_init(struct agent *a, struct loop *l, bool pid1);
/* PID 1: opens the virtio port at path; test mode: listens on a unix socket at path. */
int agent_open_port(struct agent *a, const char *path);
void agent_done(struct agent *a);

/* Flushes the queue (and pumps more frames into it) after the current batch of events. */
void agent_kick(struct agent *a);
/* Whether the pump may add a frame now: a session is up and the queue is below OUT_LOW. */
bool agent_can_pump(const struct agent *a);

/* Queue a frame for the session (dropped without one). -ENOBUFS past OUT_MAX. */
int agent_send(struct agent *a, uint8_t type, uint8_t flags, uint32_t chan, const void *payload,
               size_t len);
/* RESULT with ERRNO err (a positive errno or 0), and MESSAGE when msg is not NULL. */
int agent_result(struct agent *a, uint32_t chan, int err, const char *msg);
/* RESULT success with one more u32 or u64 TLV (PID, SIZE). */
int agent_result_u32(struct agent *a, uint32_t chan, uint16_t tag, uint32_t v);
int agent_result_u64(struct agent *a, uint32_t chan, uint16_t tag, uint64_t v);

/* SIGCHLD, and in test mode SIGTERM/SIGINT (shut down). */
void agent_on_signal(int signo, void *data);
