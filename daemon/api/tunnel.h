/* tunnel.h: the host side of a tunnel: bytes relayed between a server connection (struct conn,
 * daemon/http/server.h) and a TCP connection the guest agent opened to 127.0.0.1:PORT inside a
 * sandbox (AP_EXEC with AP_T_PORT, lib/agentproto.h). Used by GET …/tunnel (api-tunnel.c, after
 * `101 Switching Protocols`) and by the preview listener (raw, the request head forwarded first).
 *
 * Flow both ways with bounded memory: the guest sends at most AP_WINDOW bytes beyond what the
 * client's connection took (acknowledged only while its backlog is low), and the client's
 * connection is read only while fewer than TUNNEL_WINDOW bytes wait for the guest's socket
 * (AP_STDIN_ACK). A client that never reads holds at most about AP_WINDOW here, and the server
 * drops it after 30 s without progress. Half-closes pass through: the client's EOF shuts the
 * guest socket's write side; the guest's EOF shuts the client connection's write side (TCP FIN,
 * or TLS close_notify) while the client's bytes still go on. The tunnel ends when both sides are
 * done, when either side resets, when the client connection closes, when the sandbox leaves
 * `running` or memory, or when the agent's session ends. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct sandboxd;
struct sandbox;
struct conn;

/* Bytes the client may have sent that the guest's socket did not take yet: past this the client
 * connection is not read until the guest acknowledges (AP_STDIN_ACK). */
#define TUNNEL_WINDOW (1u << 20)
/* The most bytes tunnel_start() forwards first (a request head). */
#define TUNNEL_PREFIX_MAX (64u << 10)
/* Tunnels of one sandbox whose guest has not answered the open yet: more are refused (-EBUSY)
 * until it answers some. A guest that never answers thus holds this many small records, not
 * one per client that tried and left. */
#define TUNNEL_PENDING_MAX 64
/* How long the guest may take to connect: the client then hears ETIMEDOUT (failed()). */
#define TUNNEL_CONNECT_TIMEOUT_MS 15000

struct tunnel_opts {
	uint16_t port; /* 1..65535: the guest's 127.0.0.1:port */
	/* Bytes sent to the guest before anything the client sends (copied; NULL or 0 for none;
	 * at most TUNNEL_PREFIX_MAX): the preview forwards the request head it already read. */
	const void *prefix;
	size_t prefix_len;
	/* Once the guest connected: non-NULL answers `101 Switching Protocols` with these header
	 * lines ("Upgrade: sbx-tunnel/1\r\nConnection: Upgrade\r\n") before the raw bytes; NULL
	 * writes no answer at all, the connection turns raw as it is (the preview: the guest's
	 * server answers the forwarded request itself). */
	const char *upgrade_headers;
	/* Called once if the guest side could not be opened, before anything was written to c and
	 * with c's close hook handed back: the caller answers c (conn_reply) and the tunnel is
	 * gone. err is a positive errno: ECONNREFUSED (nothing listens on the port), ECONNRESET
	 * (the agent's session ended first), EIO (the sandbox left `running`), ETIMEDOUT (no
	 * answer within TUNNEL_CONNECT_TIMEOUT_MS), or the guest's;
	 * message says it in words (may be NULL). May be NULL: c then gets a plain-text 502. */
	void (*failed)(struct conn *c, uint16_t port, int err, const char *message, void *data);
	/* Called once when the tunnel is open (after the 101, when upgrade_headers is set), before
	 * any byte is relayed, with its sandbox (running): to audit `tunnel.opened`. May be NULL.
	 * If the client leaves before either, neither is called (data is the caller's to keep
	 * or to free: give a pointer that outlives the tunnel, such as the struct sandboxd). */
	void (*opened)(struct conn *c, struct sandbox *sb, uint16_t port, void *data);
	void *data;
};

/* Opens a tunnel to o->port in sb (running, with its agent connected) for the connection c,
 * which must be held by a handler that has not answered yet (inside the request handler, or a
 * head() handler that called conn_head_hold() first: the unread body and every later byte are
 * relayed after the prefix).
 * From a 0 return the tunnel owns c (its close and drain hooks) until it ends; c then closes.
 * It counts as activity of sb while open (sb->tunnels). Returns -ENOTCONN when sb has no
 * connected agent, -EBUSY when TUNNEL_PENDING_MAX opens of sb wait for the guest already,
 * -EINVAL for a port of 0 or a prefix too long, -ENOMEM; nothing was answered then and the
 * caller still holds c. */
int tunnel_start(struct sandboxd *d, struct conn *c, struct sandbox *sb,
                 const struct tunnel_opts *o);
