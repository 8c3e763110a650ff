/* agent.h: sandboxd's side of the host <-> guest protocol (lib/agentproto.h): one connection
 * to a sandbox's agent socket (QEMU's virtio-serial chardev, or sandbox-guestd's test mode),
 * the session handshake, requests with callbacks, and process output routed to a subscriber.
 *
 * Everything the guest sends is hostile: frames are bounded by the decoder, payloads are
 * checked before use, and any violation closes the connection with a reason; the owner
 * decides whether to reconnect (a new session) or to fail the sandbox. Requests under way
 * when the agent is freed complete with ECONNRESET during agent_free(); no other callback runs
 * after it, or after the request or subscription it belongs to was cancelled. Owners of
 * subscriptions (daemon/core/proc.c) must be gone before the agent is freed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "buf.h"
#include "list.h"
#include "loop.h"

struct agent;
struct agent_req;

/* What the host says at every session start (see AP_HELLO). Strings may be NULL. */
struct agent_hello {
	const char *hostname;
	const char *root_dev; /* NULL: no disks (test mode) */
	const char *upper_dev;
	char *const *env; /* the image environment, "K=V", NULL-terminated; may be NULL */
	uint32_t uid, gid;
	const char *home;
	/* the guest's identity, put right at every session start (a restored VM's memory holds
	 * another's): net is "GUEST/PREFIX,HOST" or "" for none (NULL: not sent); the MAC when
	 * has_mac; machine_id 32 lowercase hex (NULL: not sent); volumes "DEV\tMOUNT\tro|rw",
	 * NULL-terminated (NULL: none) */
	const char *net;
	bool has_mac;
	uint8_t mac[6];
	const char *machine_id;
	char *const *volumes;
};

struct agent_events {
	/* The session is up (handshake done). mounted: the guest's root is set up. */
	void (*ready)(struct agent *a, bool mounted, const char *version, void *data);
	/* The connection ended: reason says why (the guest went away, a protocol violation, the
	 * connect deadline passed). The agent is idle afterwards; agent_connect() starts over. */
	void (*closed)(struct agent *a, const char *reason, void *data);
};

/* Creates an agent for the socket at path (nothing happens until agent_connect). */
int agent_new(struct loop *loop, const char *path, const struct agent_hello *hello,
              const struct agent_events *ev, void *data, struct agent **ret);
/* Ends the connection without calling closed; requests complete with ECONNRESET. */
struct agent *agent_free(struct agent *a);
DEFINE_FREEP(struct agent, agent_free)

/* Connects (retrying while the socket is missing or refuses, as when QEMU is still starting)
 * and performs the handshake; gives up at the deadline (CLOCK_MONOTONIC ms) with closed(). */
int agent_connect(struct agent *a, uint64_t deadline_ms);
bool agent_ready(const struct agent *a);
/* Closes the connection now (reason is logged and passed to closed()). */
void agent_close(struct agent *a, const char *reason);

/* The answer to a request. err is 0 or a positive errno from the guest (or a local -errno
 * negated to positive: ECONNRESET when the connection ended first). */
struct agent_result {
	int err;
	const char *message; /* may be NULL */
	uint32_t pid;        /* EXEC */
	uint64_t size;       /* FILE_READ: bytes read */
};
typedef void (*agent_done_fn)(void *data, const struct agent_result *res);

struct agent_exec_spec {
	char *const *argv; /* NULL-terminated */
	char *const *env;  /* "K=V", NULL-terminated, may be NULL */
	const char *cwd;   /* NULL: the home directory */
	bool tty;
	unsigned short rows, cols;
	bool keep;
};

struct agent_req *agent_exec(struct agent *a, const struct agent_exec_spec *spec,
                             agent_done_fn done, void *data);
/* A tunnel (AP_EXEC with AP_T_PORT): the guest connects to 127.0.0.1:port; done() gets its
 * handle in res->pid, or err ECONNREFUSED when nothing listens there. The handle then takes
 * agent_attach (a subscriber with stdin_acked and session_end set), agent_ack, agent_stdin and
 * agent_release like a process; it is never in agent_ps and ends with the session. NULL without
 * a session, for port 0, or without memory. */
struct agent_req *agent_tunnel(struct agent *a, uint16_t port, agent_done_fn done, void *data);
/* Tunnel EXECs the guest has not answered yet (cancelled ones included): a guest that answers
 * slowly, or never, makes them pile up, so callers bound them. */
unsigned agent_tunnels_pending(const struct agent *a);
struct agent_req *agent_ping(struct agent *a, agent_done_fn done, void *data);
struct agent_req *agent_shutdown(struct agent *a, agent_done_fn done, void *data);
/* AP_HOLD: the VM is about to be suspended; the guest keeps every process through the session
 * ends that follow, until the next HELLO (an older guest answers ENOSYS). */
struct agent_req *agent_hold(struct agent *a, agent_done_fn done, void *data);

struct agent_proc_info {
	uint32_t pid;
	const char *argv0;
	bool tty, keep, running;
	int exit_code;
	bool oom; /* the guest says its OOM killer ended it */
	uint64_t started_ms, output_bytes;
};
struct agent_req *agent_ps(struct agent *a,
                           void (*proc)(void *data, const struct agent_proc_info *p),
                           agent_done_fn done, void *data);

/* Reads at most max bytes of a file: chunk() gets them in order, then done(). */
struct agent_req *agent_read_file(struct agent *a, const char *path, uint64_t max,
                                  void (*chunk)(void *data, const void *bytes, size_t len),
                                  agent_done_fn done, void *data);

/* Uploads: bytes sent to the guest as they arrive (a request body streamed on, an attach's
 * stdin frames), a file write or a process's stdin, with backpressure: agent_upload_data says
 * when the queue for the guest is above AGENT_UPLOAD_HIGH, or (stdin) when the process's stdin
 * window is full, and the uploader waits (agent_upload_wait) until the queue is below
 * AGENT_UPLOAD_LOW and the window half empty again, so an upload holds a bounded amount of
 * memory however large, and a process that reads slowly slows its writers down (nothing is
 * dropped). See agent_stdin for the window.
 *
 * A file write announces size, the bytes that will follow, or with size_is_max only their most
 * (the data then ends at agent_upload_end). done() gets the guest's RESULT once the bytes are
 * all there (or at once when the guest refuses the write), or ECONNRESET when the session
 * ends; the request is gone after it. The file appears whole or not at all. */
#define AGENT_UPLOAD_HIGH (1u << 20)
#define AGENT_UPLOAD_LOW (256u << 10)
struct agent_req *agent_write_begin(struct agent *a, const char *path, uint32_t mode, uint64_t size,
                                    bool size_is_max, agent_done_fn done, void *data);
/* stdin of pid. done() runs only when the session ends (ECONNRESET), and the upload is gone
 * after it. */
struct agent_req *agent_stdin_begin(struct agent *a, uint32_t pid, agent_done_fn done, void *data);
/* Queues bytes for the guest. 0, or 1 when the queue is above AGENT_UPLOAD_HIGH (wait before
 * sending more); -EFBIG past a write's size, -ENOTCONN without a session, -ENOBUFS. */
int agent_upload_data(struct agent_req *r, const void *bytes, size_t len);
/* Calls drained(data) once, from the loop, when the queue is below AGENT_UPLOAD_LOW. */
void agent_upload_wait(struct agent_req *r, void (*drained)(void *data));
/* The bytes are all sent. A write then waits for done() (-EINVAL when fewer than its exact
 * size were sent: give it up). stdin: eof closes the process's stdin, and the upload is gone
 * when this returns. */
int agent_upload_end(struct agent_req *r, bool eof);
/* Gives an upload up (the client went): a write's file is not made and done() never runs;
 * stdin keeps what was sent. The upload is gone (NULL-safe). */
void agent_upload_abort(struct agent_req *r);

struct agent_dirent {
	const char *name;
	char type; /* 'f' 'd' 'l' 'o' */
	uint64_t size;
};
struct agent_req *agent_list(struct agent *a, const char *path,
                             void (*entry)(void *data, const struct agent_dirent *e),
                             agent_done_fn done, void *data);
struct agent_req *agent_remove(struct agent *a, const char *path, agent_done_fn done, void *data);
/* Handles bytes as if the guest had sent them: what reading the socket does, exported for the
 * fuzz target. -EPROTO after a violation (the connection is closed), -ECONNRESET when it
 * ended, -ENOTCONN when there is no session. */
int agent_receive(struct agent *a, const void *bytes, size_t len);
/* For the fuzz target: a session without a socket, its nonce all zeros, waiting for the
 * HELLO_ACK (ready false) or past it (ready true). Frames sent are queued and never written. */
void agent_begin_unconnected(struct agent *a, bool ready);

/* Forgets the callbacks of a request still under way (its frames are then ignored). */
void agent_cancel(struct agent_req *r);

/* Output of one process. The agent routes OUTPUT, DROPPED and EXIT frames for pid to the
 * subscriber, and holds the guest to the protocol: offsets continuous, no more than AP_WINDOW
 * bytes beyond the last ACK (or the ATTACH's offset), nothing after EXIT, STDIN_ACK only for a
 * tunnel; anything else closes the connection ("protocol violation: ..."). Frames for a pid
 * with no subscriber are ignored (the host may have just detached). */
struct agent_sub {
	uint32_t pid;
	void (*output)(struct agent_sub *s, int stream, uint64_t offset, const void *bytes,
	               size_t len);
	void (*dropped)(struct agent_sub *s, uint64_t count);
	void (*exited)(struct agent_sub *s, int code, uint64_t end);
	/* a tunnel's (NULL for a process, whose stdin agent_stdin windows itself): the guest's
	 * socket took written bytes of stdin so far (AP_STDIN_ACK, the guest's word). A
	 * subscriber with it keeps its own window: agent_stdin holds nothing back for it.
	 * Returns -EPROTO when that cannot be (more than was sent, or less than before): the
	 * connection is then closed as for any violation. */
	int (*stdin_acked)(struct agent_sub *s, uint64_t written);
	/* when set, the subscription ends with the session (a tunnel): the connection closed or
	 * the agent is being freed; it is unsubscribed before this is called */
	void (*session_end)(struct agent_sub *s);
	void *data;
	bool oom; /* when exited is called: the guest says its OOM killer ended it (code 137) */
	/* private */
	struct list_node link;
	uint64_t next_offset;
	uint64_t window_base; /* the guest may send output up to this + AP_WINDOW */
	bool ended;           /* EXIT was delivered */
	/* its stdin's window (a process's, with a guest that acknowledges it): bytes sent this
	 * session, acknowledged, and held back until the window opens (with an EOF after them) */
	uint64_t stdin_sent, stdin_took;
	struct buf stdin_held;
	bool stdin_eof;
};
/* Subscribes and sends ATTACH from offset. One subscriber per pid. */
int agent_attach(struct agent *a, struct agent_sub *s, uint64_t from);
/* Unsubscribes (and sends DETACH when connected). Safe on a subscriber not attached. */
void agent_detach(struct agent *a, struct agent_sub *s);
int agent_ack(struct agent *a, uint32_t pid, uint64_t offset);
/* Stdin for pid, in order, eof closing it after the bytes. With a guest that acknowledges stdin
 * (AP_FEAT_STDIN_WINDOW) and a process that has a subscriber (not a tunnel, which keeps its own
 * window, and not ended), at most AP_STDIN_WINDOW bytes are in flight: the rest is held here
 * and sent as the guest's STDIN_ACKs come. Returns 1 when the window is full (bytes are held:
 * a writer that can wait should, through an upload), 0, or -ENOTCONN, -ENOBUFS (more than
 * 64 MiB held). With an older guest every byte is sent at once, as before. */
int agent_stdin(struct agent *a, uint32_t pid, const void *bytes, size_t len, bool eof);
int agent_signal(struct agent *a, uint32_t pid, int signo);
int agent_resize(struct agent *a, uint32_t pid, unsigned short rows, unsigned short cols);
int agent_release(struct agent *a, uint32_t pid);
/* Frames are written when the loop's current batch of events is over, together, or later when
 * the socket is full. This writes what is queued now, as far as the socket takes it: for a
 * caller about to do slow work (a database write) that the guest need not wait for. */
void agent_flush(struct agent *a);
