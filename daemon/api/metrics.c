/* metrics.c: the /metrics text (metrics.h). Read on the loop from what sandboxd already
 * holds: the registry and egress's counters; nothing is asked of a guest. */
#include "egress.h"
#include "metrics.h"
#include "sandboxd.h"
#include "server.h"
#include "util.h"

static int
labelled(struct buf *b, const char *name, const char *labels, uint64_t v)
{
	return buf_printf(b, "%s%s %llu\n", name, labels, (unsigned long long)v);
}

int
metrics_render(struct sandboxd *d, struct buf *out)
{
	const struct egress_counters *e = egress_counters(d);
	size_t by_state[_SANDBOX_STATE_MAX] = { 0 };
	struct list_node *n;
	int r;

	LIST_FOREACH (n, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (sb->state >= 0 && sb->state < _SANDBOX_STATE_MAX)
			by_state[sb->state]++;
	}
	r = buf_puts(out, "# HELP sandboxd_sandboxes Sandboxes held by this sandboxd, by state.\n"
	                  "# TYPE sandboxd_sandboxes gauge\n");
	for (int s = 0; r >= 0 && s < _SANDBOX_STATE_MAX; s++) {
		char labels[64];
		if (s == SANDBOX_TERMINATED)
			continue; /* terminated sandboxes leave memory */
		snprintf(labels, sizeof(labels), "{state=\"%s\"}",
		         sandbox_state_to_string((enum sandbox_state)s));
		r = labelled(out, "sandboxd_sandboxes", labels, by_state[s]);
	}
	if (r >= 0)
		r = buf_printf(out,
		               "# HELP sandboxd_egress_enabled 1 when sandboxes' egress is "
		               "enforced (taps, the proxy and the DNS stub), else 0.\n"
		               "# TYPE sandboxd_egress_enabled gauge\nsandboxd_egress_enabled %d\n",
		               e ? 1 : 0);
	if (r < 0 || !e)
		return r;
	/* one family per name: its help once, then a sample per label */
	struct sample {
		const char *name, *help, *labels;
		uint64_t value;
	} samples[] = {
		{ "sandboxd_egress_connections_total",
		  "Connections the egress proxy decided, by verdict.", "{verdict=\"allowed\"}",
		  e->allowed },
		{ "sandboxd_egress_connections_total", NULL, "{verdict=\"denied\"}", e->denied },
		{ "sandboxd_egress_dns_queries_total", "DNS queries the stub answered, by verdict.",
		  "{verdict=\"allowed\"}", e->dns_allowed },
		{ "sandboxd_egress_dns_queries_total", NULL, "{verdict=\"denied\"}",
		  e->dns_denied },
		{ "sandboxd_egress_bytes_total",
		  "Bytes through allowed connections once they ended: out is guest to server.",
		  "{direction=\"out\"}", e->bytes_out },
		{ "sandboxd_egress_bytes_total", NULL, "{direction=\"in\"}", e->bytes_in },
		{ "sandboxd_egress_decisions_dropped_total",
		  "Decisions the egress worker could not report (sandboxd was behind).", "",
		  e->dropped },
		{ "sandboxd_egress_events_suppressed_total",
		  "Decisions counted but not recorded as events (over a sandbox's rate).", "",
		  e->suppressed },
	};
	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(samples); i++) {
		const struct sample *m = &samples[i];
		if (m->help)
			r = buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n", m->name, m->help,
			               m->name);
		if (r >= 0)
			r = labelled(out, m->name, m->labels, m->value);
	}
	return r;
}

void
metrics_handle(struct sandboxd *d, struct conn *c, struct http_request *req)
{
	_cleanup_buf_ struct buf b = BUF_INIT(1u << 20);
	static const char not_found[] = "only /metrics is served here\n";

	if (!streq(req->path, "/metrics")) {
		conn_reply(c, 404, "text/plain", not_found, strlen(not_found), NULL);
		return;
	}
	if (req->method != HTTP_GET) {
		conn_reply(c, 405, "text/plain", "GET only\n", 9, "Allow: GET\r\n");
		return;
	}
	if (metrics_render(d, &b) < 0) {
		conn_reply(c, 500, "text/plain", "out of memory\n", 14, NULL);
		return;
	}
	conn_reply(c, 200, "text/plain; version=0.0.4", b.data, b.len, NULL);
}
