/* samples.c: per-sandbox samples in a ring; see samples.h. */
#include "backend.h"
#include "egress.h"
#include "log.h"
#include "samples.h"
#include "sandboxd.h"
#include "util.h"

struct sandbox_samples {
	struct sample ring[SAMPLES_MAX];
	unsigned next, count;
	/* the counters as the current VMM and tap read them, and what earlier boots added */
	uint64_t raw_cpu_ns, raw_rx, raw_tx;
	uint64_t base_cpu_ns, base_rx, base_tx;
};

bool
samples_available(const struct sandboxd *d)
{
	return d->backend && d->backend->ops->sample;
}

/* One of a tap's counters (/sys/class/net/TAP/statistics/NAME), as the host sees it. */
static int
tap_counter(const char *tap, const char *name, uint64_t *ret)
{
	_cleanup_free_ char *path = strdup_printf("/sys/class/net/%s/statistics/%s", tap, name);
	_cleanup_free_ char *text = NULL;
	size_t len;
	int r;

	if (!path)
		return -ENOMEM;
	r = read_file_max(path, 64, &text, &len);
	if (r < 0)
		return r;
	while (len > 0 && text[len - 1] == '\n')
		text[--len] = '\0';
	return parse_u64(text, ret);
}

/* The bytes through sb's tap, from the guest's side: the host's tx is what the guest
 * received. 0 and 0 without a tap (egress off, or a backend without a network). */
static int
tap_bytes(struct sandboxd *d, const struct sandbox *sb, uint64_t *ret_rx, uint64_t *ret_tx)
{
	struct egress_link link;
	int r;

	*ret_rx = *ret_tx = 0;
	if (!egress_enabled(d) || !sb->has_slot || egress_link_for_slot(d, sb->slot, &link) < 0)
		return 0;
	r = tap_counter(link.tap, "tx_bytes", ret_rx);
	if (r >= 0)
		r = tap_counter(link.tap, "rx_bytes", ret_tx);
	return r;
}

void
samples_take(struct sandboxd *d, struct sandbox *sb, bool new_boot)
{
	struct backend *b = d->backend;
	struct backend_sample m = { 0 };
	struct sandbox_samples *s = sb->samples;
	uint64_t rx, tx;
	int r;

	if (!samples_available(d))
		return;
	r = b->ops->sample(b, sb, &m);
	if (r >= 0)
		r = tap_bytes(d, sb, &rx, &tx);
	if (r < 0) {
		log_debug("sandbox '%s': no sample: %s", sb->id, strerror(-r));
		return;
	}
	if (!s) {
		s = sb->samples = calloc(1, sizeof(*s));
		if (!s)
			return;
	}
	if (new_boot) {
		/* the VMM and the tap count from zero again: keep what the last ones said */
		s->base_cpu_ns += s->raw_cpu_ns;
		s->base_rx += s->raw_rx;
		s->base_tx += s->raw_tx;
	}
	s->raw_cpu_ns = m.cpu_ns;
	s->raw_rx = rx;
	s->raw_tx = tx;
	s->ring[s->next] = (struct sample){
		.time_ms = now_unix_ms(),
		.cpu_ns = s->base_cpu_ns + m.cpu_ns,
		.memory_bytes = m.memory_bytes,
		.disk_bytes = m.disk_bytes,
		.net_rx_bytes = s->base_rx + rx,
		.net_tx_bytes = s->base_tx + tx,
	};
	s->next = (s->next + 1) % SAMPLES_MAX;
	if (s->count < SAMPLES_MAX)
		s->count++;
}

int
samples_read_now(struct sandboxd *d, struct sandbox *sb, uint64_t *ret_cpu_ns,
                 uint64_t *ret_net_in_bytes)
{
	struct backend *b = d->backend;
	struct backend_sample m = { 0 };
	uint64_t rx, tx;
	int r;

	if (!samples_available(d))
		return -EOPNOTSUPP;
	r = b->ops->sample(b, sb, &m);
	if (r >= 0)
		r = tap_bytes(d, sb, &rx, &tx);
	if (r < 0)
		return r;
	(void)tx;
	*ret_cpu_ns = m.cpu_ns;
	*ret_net_in_bytes = rx;
	return 0;
}

void
samples_take_all(struct sandboxd *d)
{
	int64_t now = now_unix_ms();
	struct list_node *n;

	if (!samples_available(d))
		return;
	LIST_FOREACH (n, &d->reg.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		const struct sandbox_samples *s = sb->samples;
		/* a boot under way is sampled once it completes (new_boot), and one that just did
		 * has its sample */
		if ((sb->state != SANDBOX_RUNNING && sb->state != SANDBOX_SUSPENDED) ||
		    sb->op != SANDBOX_OP_NONE)
			continue;
		if (s && s->count > 0 &&
		    now - s->ring[(s->next + SAMPLES_MAX - 1) % SAMPLES_MAX].time_ms <
		            SAMPLES_EVERY_MS / 2)
			continue;
		samples_take(d, sb, false);
	}
}

void
samples_each(const struct sandbox *sb, int64_t since_ms,
             void (*fn)(const struct sample *s, void *data), void *data)
{
	const struct sandbox_samples *s = sb->samples;

	if (!s)
		return;
	for (unsigned i = 0; i < s->count; i++) {
		const struct sample *x =
		        &s->ring[(s->next + SAMPLES_MAX - s->count + i) % SAMPLES_MAX];
		if (x->time_ms >= since_ms)
			fn(x, data);
	}
}
