/* api-tunnel.c: GET /v1/sandboxes/{ref}/tunnel?port=N with `Upgrade: sbx-tunnel/1`: the guest
 * connects to its 127.0.0.1:N first, and only then does the answer become `101 Switching
 * Protocols` followed by raw bytes both ways (tunnel.c carries them). */
#include "api-internal.h"
#include "backend.h"
#include "events.h"
#include "sandboxd.h"
#include "server.h"
#include "tunnel.h"
#include "util.h"

static void
tunnel_failed(struct conn *c, uint16_t port, int err, const char *message, void *data _unused_)
{
	if (err == ECONNREFUSED)
		api_reply_err(c, ERR_CONFLICT, "nothing listens on 127.0.0.1:%u in the sandbox",
		              port);
	else if (err == ECONNRESET)
		api_reply_err(c, ERR_UNAVAILABLE,
		              "the sandbox's agent went away before the tunnel opened; try again");
	else if (err == ETIMEDOUT)
		api_reply_err(c, ERR_UNAVAILABLE,
		              "the sandbox did not connect to 127.0.0.1:%u in time; try again",
		              port);
	else
		api_reply_err(c, ERR_CONFLICT, "cannot open a tunnel to 127.0.0.1:%u: %s", port,
		              message ? message : strerror(err));
}

static void
tunnel_opened(struct conn *c _unused_, struct sandbox *sb, uint16_t port, void *data)
{
	(void)sandbox_event(data, sb, "tunnel.opened", json_pack("{s:i}", "port", (int)port));
}

/* The port=N query (1..65535, nothing else), or 0. */
static uint16_t
query_port(const struct api_call *call)
{
	char key[16], value[16];
	size_t pos = 0;
	uint64_t port = 0;
	int r;

	while ((r = http_query_next(call->req->query, &pos, key, sizeof(key), value,
	                            sizeof(value))) > 0)
		if (!streq(key, "port") || port || parse_u64(value, &port) < 0 || port == 0 ||
		    port > 65535)
			return 0;
	return r < 0 ? 0 : (uint16_t)port;
}

void
api_tunnel(struct api_call *call)
{
	const char *upgrade = http_req_header(call->req, "upgrade");
	struct backend_caps caps = { 0 };
	struct sandbox *sb = NULL;
	uint16_t port;
	int r;

	if (call->d->backend)
		call->d->backend->ops->caps(call->d->backend, &caps);
	if (!caps.processes) {
		api_unsupported(call);
		return;
	}
	/* only a handshake (Connection: Upgrade) upgrades, as for attach */
	if (!call->req->upgrade || !upgrade || strcasecmp(upgrade, "sbx-tunnel/1") != 0) {
		api_reply_err(call->c, ERR_INVALID,
		              "a tunnel needs 'Connection: Upgrade' and 'Upgrade: sbx-tunnel/1'");
		return;
	}
	port = query_port(call);
	if (!port) {
		api_reply_err(call->c, ERR_INVALID, "the only query parameter is port=1..65535");
		return;
	}
	if (!api_sandbox_agent(call, &sb))
		return;
	r = tunnel_start(
	        call->d, call->c, sb,
	        &(struct tunnel_opts){
	                .port = port,
	                .upgrade_headers = "Upgrade: sbx-tunnel/1\r\nConnection: Upgrade\r\n",
	                .failed = tunnel_failed,
	                .opened = tunnel_opened,
	                .data = call->d,
	        });
	if (r == -ENOTCONN)
		api_reply_err(call->c, ERR_UNAVAILABLE,
		              "the agent of sandbox '%s' is reconnecting; try again", sb->id);
	else if (r == -EBUSY)
		api_reply_err(call->c, ERR_UNAVAILABLE,
		              "sandbox '%s' has %u tunnels waiting for its guest to connect; try "
		              "again",
		              sb->id, TUNNEL_PENDING_MAX);
	else if (r < 0)
		api_reply_err(call->c, ERR_INTERNAL, "cannot open a tunnel: %s", strerror(-r));
}
