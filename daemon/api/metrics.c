/* metrics.c: the /metrics text (metrics.h). Read on the loop from what sandboxd already
 * holds: the registry, the node (capacity, cordon, create counts) and egress's counters;
 * nothing is asked of a guest. No series is labelled with a user. */
#include "api-internal.h"
#include "egress.h"
#include "metrics.h"
#include "pools.h"
#include "proc.h"
#include "sandboxd.h"
#include "server.h"
#include "util.h"

static int
labelled(struct buf *b, const char *name, const char *labels, uint64_t v)
{
	return buf_printf(b, "%s%s %llu\n", name, labels, (unsigned long long)v);
}

static int
family(struct buf *b, const char *name, const char *type, const char *help)
{
	return buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int
gauge(struct buf *b, const char *name, const char *help, uint64_t v)
{
	int r = family(b, name, "gauge", help);

	return r < 0 ? r : labelled(b, name, "", v);
}

/* A label value as the exposition format writes it: \\, \" and \n escaped. */
static int
label_value(struct buf *b, const char *v)
{
	int r = 0;

	for (; r >= 0 && *v; v++)
		r = *v == '\\'   ? buf_puts(b, "\\\\")
		    : *v == '"'  ? buf_puts(b, "\\\"")
		    : *v == '\n' ? buf_puts(b, "\\n")
		                 : buf_putc(b, *v);
	return r;
}

/* What the node offers and holds, its pools, its cordon and the creates it answered. */
static int
render_node(struct sandboxd *d, struct buf *out)
{
	const struct node *n = &d->node;
	struct sandbox_usage all;
	struct list_node *it, *p;
	uint64_t procs = 0, cumulative = 0;
	int r;

	api_usage(d, NULL, &all);
	LIST_FOREACH (it, &d->reg.all) {
		struct sandbox *sb = list_entry(it, struct sandbox, by_created);
		LIST_FOREACH (p, &sb->procs)
			procs += list_entry(p, struct proc, link)->running;
	}
	struct {
		const char *name, *help;
		uint64_t value;
	} gauges[] = {
		{ "sandboxd_processes_running",
		  "Processes running in sandboxes, as sandboxd follows them.", procs },
		{ "sandboxd_capacity_cpus",
		  "The CPUs this node offers sandboxes (--capacity-cpus).", n->cpus },
		{ "sandboxd_capacity_memory_mb",
		  "The memory in MiB this node offers sandboxes (--capacity-memory-mb).",
		  n->memory_mb },
		{ "sandboxd_capacity_disk_mb",
		  "The disk in MiB this node offers sandboxes (--capacity-disk-mb).", n->disk_mb },
		{ "sandboxd_free_cpus", "CPUs not given to an active sandbox.",
		  all.cpus < n->cpus ? n->cpus - all.cpus : 0 },
		{ "sandboxd_free_memory_mb", "Memory in MiB not given to an active sandbox.",
		  all.memory_mb < n->memory_mb ? n->memory_mb - all.memory_mb : 0 },
		{ "sandboxd_free_disk_mb",
		  "Disk in MiB not given to a sandbox that is not terminated (not the space left "
		  "on "
		  "the filesystem).",
		  all.disk_mb < n->disk_mb ? n->disk_mb - all.disk_mb : 0 },
		{ "sandboxd_cordoned", "1 while the node is cordoned (it takes no new sandboxes).",
		  n->cordoned },
	};
	r = 0;
	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(gauges); i++)
		r = gauge(out, gauges[i].name, gauges[i].help, gauges[i].value);

	/* every image the policy pools, with the sandboxes waiting in its pool */
	if (r >= 0)
		r = family(out, "sandboxd_pool_sandboxes", "gauge",
		           "Sandboxes waiting in a pool, by image.");
	for (size_t i = 0; r >= 0 && i < d->policy.n_pools; i++) {
		r = buf_puts(out, "sandboxd_pool_sandboxes{image=\"");
		if (r >= 0)
			r = label_value(out, pools_image(d, i));
		if (r >= 0)
			r = buf_printf(out, "\"} %u\n", pools_waiting(d, pools_image(d, i)));
	}

	if (r >= 0)
		r = family(out, "sandboxd_creates_total", "counter",
		           "Creates (POST /v1/sandboxes) answered, by HTTP status.");
	for (int code = NODE_STATUS_MIN; r >= 0 && code <= NODE_STATUS_MAX; code++) {
		uint64_t count = n->creates_by_status[code - NODE_STATUS_MIN];
		char labels[32];
		if (!count && code != 201)
			continue; /* 201 always, so that a rate has a series from the start */
		snprintf(labels, sizeof(labels), "{code=\"%d\"}", code);
		r = labelled(out, "sandboxd_creates_total", labels, count);
	}

	if (r >= 0)
		r = family(
		        out, "sandboxd_create_duration_seconds", "histogram",
		        "How long creates took to be answered (with wait, until the sandbox ran).");
	for (size_t i = 0; r >= 0 && i < NODE_CREATE_BUCKETS; i++) {
		cumulative += n->create_buckets[i];
		r = buf_printf(out, "sandboxd_create_duration_seconds_bucket{le=\"%g\"} %llu\n",
		               (double)node_create_bucket_us[i] / 1e6,
		               (unsigned long long)cumulative);
	}
	if (r >= 0)
		r = buf_printf(out,
		               "sandboxd_create_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
		               "sandboxd_create_duration_seconds_sum %.6f\n"
		               "sandboxd_create_duration_seconds_count %llu\n",
		               (unsigned long long)n->creates, (double)n->create_us_sum / 1e6,
		               (unsigned long long)n->creates);
	return r;
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
		/* pooled ones are counted by sandboxd_pool_sandboxes */
		if (!sb->pooled && sb->state >= 0 && sb->state < _SANDBOX_STATE_MAX)
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
		r = render_node(d, out);
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
