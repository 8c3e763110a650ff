/* activity.c: what counts as a sandbox in use; see activity.h. */
#include "activity.h"
#include "events.h"
#include "log.h"
#include "proc.h"
#include "samples.h"
#include "sandboxd.h"
#include "util.h"

void
activity_request(struct sandbox *sb)
{
	sb->last_active = sb->last_attended = now_unix_ms();
}

void
activity_inside(struct sandbox *sb)
{
	sb->last_active = now_unix_ms();
}

/* A reader of one of its processes: an attach, an output stream, a run's answer. */
static bool
has_reader(const struct sandbox *sb)
{
	const struct list_node *n;

	LIST_FOREACH (n, &sb->procs) {
		const struct proc *p = list_entry(n, struct proc, link);
		if (!list_empty(&p->readers))
			return true;
	}
	return false;
}

/* An event stream for this one sandbox (one of every sandbox watches none in particular). */
static bool
has_event_stream(const struct sandboxd *d, const struct sandbox *sb)
{
	const struct list_node *n;

	LIST_FOREACH (n, &d->subscribers) {
		const struct event_sub *s = list_entry(n, struct event_sub, link);
		if (s->sandbox_id && streq(s->sandbox_id, sb->id))
			return true;
	}
	return false;
}

bool
activity_watched(struct sandboxd *d, struct sandbox *sb, int64_t now_ms)
{
	if (!has_reader(sb) && !has_event_stream(d, sb) && sb->file_ops == 0 && sb->tunnels == 0)
		return false;
	sb->last_active = sb->last_attended = now_ms;
	return true;
}

bool
activity_quiet(const struct sandbox *sb, int64_t now_ms, unsigned secs)
{
	return now_ms - sb->last_active >= (int64_t)secs * 1000;
}

/* Whether used_ns of CPU over window_ms is more than ACTIVITY_CPU_PERCENT of one CPU. */
static bool
cpu_busy(uint64_t used_ns, int64_t window_ms)
{
	/* a percent of a millisecond is 10000 ns */
	return used_ns > (uint64_t)window_ms * 10000u * ACTIVITY_CPU_PERCENT;
}

bool
activity_idle(struct sandboxd *d, struct sandbox *sb, int64_t now_ms)
{
	bool due = now_ms - sb->last_active >= (int64_t)sb->idle_timeout_secs * 1000;
	bool stale = !sb->cpu_ref_set || sb->cpu_ref_at < sb->last_active;
	uint64_t cpu, net;
	int64_t window;
	int r;

	if (!due && !stale)
		return false;
	r = samples_read_now(d, sb, &cpu, &net);
	if (r < 0) {
		/* cannot tell what its VMM does: the rest decides */
		if (r != -EOPNOTSUPP)
			log_debug("sandbox '%s': no CPU reading for its idle timeout: %s", sb->id,
			          strerror(-r));
		sb->cpu_ref_set = false;
		return due;
	}
	if (stale || cpu < sb->cpu_ref_ns || net < sb->net_ref_bytes) {
		/* judged from the first tick after the last activity (or from a new VMM's, or a
		 * new tap's, first reading) */
		sb->cpu_ref_set = true;
		sb->cpu_ref_ns = cpu;
		sb->net_ref_bytes = net;
		sb->cpu_ref_at = now_ms;
		return false;
	}
	window = now_ms - sb->cpu_ref_at;
	if (window < ACTIVITY_CPU_WINDOW_MS)
		return false; /* too short to judge by ticks of the CPU clock */
	if (cpu_busy(cpu - sb->cpu_ref_ns, window) || net != sb->net_ref_bytes) {
		log_debug("sandbox '%s': in the last %lld ms its VMM used %llu ms of CPU and its "
		          "network brought in %llu bytes: busy, so not idle",
		          sb->id, (long long)window,
		          (unsigned long long)((cpu - sb->cpu_ref_ns) / 1000000),
		          (unsigned long long)(net - sb->net_ref_bytes));
		sb->last_active = now_ms;
		sb->cpu_ref_ns = cpu;
		sb->net_ref_bytes = net;
		sb->cpu_ref_at = now_ms;
		return false;
	}
	return true;
}

bool
activity_client_gone(struct sandbox *sb, int64_t now_ms, unsigned grace_secs)
{
	if (sb->state == SANDBOX_PENDING || sb->state == SANDBOX_STARTING ||
	    sb->state == SANDBOX_STOPPING || sb->op != SANDBOX_OP_NONE) {
		sb->last_attended = now_ms;
		return false;
	}
	return now_ms - sb->last_attended >= (int64_t)grace_secs * 1000;
}
