/* egress.c: sandboxd's side of egress enforcement (egress.h). sandboxd keeps what needs root
 * and trusts nothing a guest sends: it binds the proxy and DNS ports, owns the taps and the
 * nftables table, and hands the sockets to the egress worker (egress/worker.h), which runs
 * without root and is the only process that reads guest traffic. sandboxd tells the worker
 * each sandbox's policy and turns the worker's decisions into events and counters.
 *
 * A policy change goes to the worker at once (it is the gate: every connection and query is
 * decided there) and to the table (which guests are redirected at all) as soon as nft has run;
 * either order is no looser than both the old and the new policy, because a guest left in the
 * table by a tightening still meets the worker's new policy. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "activity.h"
#include "egress.h"
#include "events.h"
#include "hashmap.h"
#include "log.h"
#include "netpolicy.h"
#include "nftrules.h"
#include "sandbox.h"
#include "sandboxd.h"
#include "tool.h"
#include "util.h"

#define LINE_MAX_BYTES (256u * 1024) /* the control protocol's line limit, both ways */
#define OUT_MAX (8u << 20)           /* what may wait for the worker to read */

_Static_assert(2u * NETPOLICY_LIST_MAX * (NETNAME_MAX + 3) + 1024 <= LINE_MAX_BYTES,
               "the largest policy fits a control line (egress/worker-internal.h agrees)");
#define READY_WAIT_MS 5000
#define RESTART_DELAY_MS 1000
#define WEDGED_MS 5000  /* the worker reads nothing sent to it for this long: restarted */
#define EVENT_RATE 20   /* egress events recorded per sandbox per second, on average */
#define EVENT_BURST 200 /* and at most this many at once; the rest are only counted */
#define LOGS_PER_S 20   /* lines a second about what guests (or the worker) caused */
#define CTL_READS 16    /* chunks of the worker's lines read per wakeup (256 KiB, ~1000 lines) */
#define REASON_MAX 256  /* a decision's reason: the worker's own words, short */
#define NFT_RETRY_MS 1000
#define NFT_RETRY_MAX_MS 60000

/* Where a boot waiting for its link to be in the table stands (egress_attach's ready). */
enum table_wait {
	TABLE_WAIT_NONE,   /* nobody waits */
	TABLE_WAIT_QUEUED, /* for the next nft run */
	TABLE_WAIT_IN_RUN, /* the run under way writes its link */
	TABLE_WAIT_DONE,   /* that run ended: result and why say how; told on the loop */
};

struct egress_sb {
	struct list_node node;
	char id[SANDBOX_ID_MAX + 1];
	struct egress_link link;
	bool in_table; /* its mode is not none: the table redirects its traffic */
	double tokens; /* its budget of recorded events */
	uint64_t tokens_ms;
	/* a boot waiting for the table (egress_attach) */
	enum table_wait wait;
	egress_ready_fn ready;
	void *ready_data;
	int result;
	char why[256];
};

struct egress {
	struct sandboxd *d;
	int proxy_fd, dns_fd;
	uid_t uid;
	char *exe;
	char *nft;
	/* the worker */
	pid_t pid;
	int ctl;
	struct loop_child pid_watch;
	struct loop_source ctl_src;
	struct buf in, out;
	bool in_skipping; /* inside a line over LINE_MAX_BYTES, dropped up to its newline */
	/* the watchdog (worker_watchdog): bytes sent to the worker, and what waited for it at
	 * the last look; since when it has read nothing while something waited */
	struct loop_timer watchdog;
	uint64_t sent, sent_then, waiting, stalled_since;
	struct loop_timer restart;
	bool stopping;
	struct egress_lograte lograte;
	/* the table: one nft run at a time, and one more when something changed meanwhile; a
	 * run that failed is tried again later (the table must follow the sandboxes even when
	 * nothing changes after) */
	pid_t nft_pid;
	int nft_err;
	struct loop_child nft_watch;
	bool nft_dirty;
	struct loop_timer nft_retry;
	uint64_t nft_retry_ms;
	struct loop_timer tell; /* boots whose wait is over are told (tell_waiting) */
	struct list_node sbs;   /* struct egress_sb, in the order they came (the table's) */
	struct hashmap by_id;   /* the same, by sandbox id: every decision looks one up */
	struct egress_counters counters;
};

static struct egress *
E(const struct sandboxd *d)
{
	return d->egress;
}

bool
egress_enabled(const struct sandboxd *d)
{
	return d && d->egress != NULL;
}

const struct egress_counters *
egress_counters(const struct sandboxd *d)
{
	return d && d->egress ? &d->egress->counters : NULL;
}

unsigned
egress_slots(const struct sandboxd *d)
{
	uint64_t slots = 1ull << (32 - d->opts->egress_subnet_bits - 2);

	return slots > UINT32_MAX ? UINT32_MAX : (unsigned)slots;
}

int
egress_link_for_slot(const struct sandboxd *d, unsigned slot, struct egress_link *ret)
{
	uint32_t base;

	if (slot >= egress_slots(d))
		return -ERANGE;
	base = d->opts->egress_subnet + 4u * slot;
	memset(ret, 0, sizeof(*ret));
	snprintf(ret->tap, sizeof(ret->tap), NFTRULES_TAP_PREFIX "%u", slot);
	ret->host_addr = htonl(base + 1);
	ret->guest_addr = htonl(base + 2);
	return 0;
}

static struct egress_sb *
find_sb(struct egress *e, const char *id)
{
	return hashmap_get(&e->by_id, id);
}

static bool
mode_is_none(const json_t *network)
{
	const char *mode = json_string_value(json_object_get(network, "mode"));

	return !mode || streq(mode, "none");
}

/* ---- the tap ---- */

static int
ifreq_addr(int fd, unsigned long req, const char *tap, uint32_t addr)
{
	struct ifreq ifr = { 0 };
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = addr };

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", tap);
	memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
	return ioctl(fd, req, &ifr) < 0 ? negative_errno() : 0;
}

int
egress_tap_open(const struct egress_link *link, int *ret_fd)
{
	struct ifreq ifr = { 0 };
	_cleanup_close_ int fd = -1, sock = -1;
	_cleanup_free_ char *v6 = NULL;
	int r;

	fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	/* not persistent: the device lives as long as an fd on it, so a VMM that ends takes its
	 * tap along, whoever notices */
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", link->tap);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0)
		return negative_errno();
	/* the guest speaks IPv4 to the host and nothing else: no IPv6 address on the host side
	 * (the table drops the guest's IPv6 anyway) */
	v6 = strdup_printf("/proc/sys/net/ipv6/conf/%s/disable_ipv6", link->tap);
	if (v6) {
		_cleanup_close_ int sys = open(v6, O_WRONLY | O_CLOEXEC);
		if (sys >= 0)
			(void)!write(sys, "1\n", 2);
	}
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return negative_errno();
	if ((r = ifreq_addr(sock, SIOCSIFADDR, link->tap, link->host_addr)) < 0 ||
	    (r = ifreq_addr(sock, SIOCSIFNETMASK, link->tap, htonl(0xfffffffcu))) < 0)
		return r;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", link->tap);
	if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0)
		return negative_errno();
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(sock, SIOCSIFFLAGS, &ifr) < 0)
		return negative_errno();
	*ret_fd = TAKE_FD(fd);
	return 0;
}

/* Removes the taps of ours (named sbxN) that no process holds: a tap sandboxd makes is not
 * persistent and goes with the last descriptor on it (its VMM's), so one that is left was made
 * persistent by something else (an earlier version, a person) and would otherwise take over
 * the link of the sandbox that gets its slot. A tap held by a VMM (one taken back, or one of a
 * stray VMM, ended later at startup) refuses a second owner (EBUSY) and stays; an interface that
 * is not a tap refuses too. fn (may be NULL) is told each one removed. Returns how many were. */
static unsigned
taps_sweep(struct sandboxd *d, void (*fn)(struct sandboxd *d, const char *tap))
{
	struct if_nameindex *all = if_nameindex(), *it;
	unsigned removed = 0;

	for (it = all; it && it->if_index; it++) {
		const char *digits = it->if_name + strlen(NFTRULES_TAP_PREFIX);
		struct ifreq ifr = { 0 };
		_cleanup_close_ int fd = -1;

		if (!str_has_prefix(it->if_name, NFTRULES_TAP_PREFIX) || !*digits ||
		    strspn(digits, "0123456789") != strlen(digits))
			continue;
		fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
		if (fd < 0)
			break;
		ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", it->if_name);
		if (ioctl(fd, TUNSETIFF, &ifr) < 0)
			continue; /* held, or not a tap */
		/* no longer persistent: it goes when fd closes */
		if (ioctl(fd, TUNSETPERSIST, 0) == 0) {
			removed++;
			fd = safe_close(fd);
			if (fn)
				fn(d, it->if_name);
		}
	}
	if (all)
		if_freenameindex(all);
	return removed;
}

unsigned
egress_sweep_taps(struct sandboxd *d, void (*fn)(struct sandboxd *d, const char *tap))
{
	return d->egress ? taps_sweep(d, fn) : 0;
}

/* ---- the table ---- */

static int
table_text(struct egress *e, struct buf *out)
{
	struct nft_config c = { .proxy_port = (uint16_t)e->d->opts->egress_proxy_port,
		                .dns_port = (uint16_t)e->d->opts->egress_dns_port };
	_cleanup_free_ struct nft_sandbox *v = NULL;
	struct list_node *n;
	size_t count = 0;

	LIST_FOREACH (n, &e->sbs)
		count++;
	v = calloc(count ? count : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	count = 0;
	LIST_FOREACH (n, &e->sbs) {
		struct egress_sb *s = list_entry(n, struct egress_sb, node);
		if (!s->in_table)
			continue;
		memcpy(v[count].tap, s->link.tap, sizeof(v[count].tap));
		v[count].host_addr = s->link.host_addr;
		v[count].guest_addr = s->link.guest_addr;
		count++;
	}
	return nftrules_build(v, count, &c, out);
}

/* The table's text in a memfd, for nft's stdin. */
static int
table_memfd(struct egress *e)
{
	_cleanup_buf_ struct buf b = BUF_INIT(16u << 20);
	_cleanup_close_ int fd = -1;
	int r;

	r = table_text(e, &b);
	if (r < 0)
		return r;
	fd = memfd_create("nft-rules", MFD_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	r = write_all(fd, b.data, b.len);
	if (r < 0)
		return r;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return negative_errno();
	return TAKE_FD(fd);
}

static void table_write(struct egress *e);

/* The boots waiting for the run under way (or for one that could not even start) learn how it
 * went, on the loop: the table as nft applied it has their link (0), or it does not and never
 * will from this run (-EIO, why). nft applies a transaction whole or not at all. */
static void
waits_end(struct egress *e, enum table_wait which, int result, const char *why)
{
	struct list_node *n;
	bool any = false;

	LIST_FOREACH (n, &e->sbs) {
		struct egress_sb *s = list_entry(n, struct egress_sb, node);
		if (s->wait != which &&
		    !(which == TABLE_WAIT_QUEUED && s->wait == TABLE_WAIT_IN_RUN))
			continue;
		s->wait = TABLE_WAIT_DONE;
		s->result = result;
		snprintf(s->why, sizeof(s->why), "%s", why ? why : "");
		any = true;
	}
	if (any)
		(void)loop_timer_arm(&e->tell, 1, 0);
}

/* Tells each boot whose wait is over. A callback may detach sandboxes (a failed boot's is), so
 * the list is searched afresh after each. */
static void
tell_waiting(struct loop_timer *t _unused_, void *data)
{
	struct egress *e = data;
	bool again = true;

	while (again) {
		struct list_node *n;

		again = false;
		LIST_FOREACH (n, &e->sbs) {
			struct egress_sb *s = list_entry(n, struct egress_sb, node);
			egress_ready_fn fn = s->ready;
			void *fn_data = s->ready_data;
			char why[sizeof(s->why)];
			int result = s->result;

			if (s->wait != TABLE_WAIT_DONE)
				continue;
			memcpy(why, s->why, sizeof(why));
			s->wait = TABLE_WAIT_NONE;
			s->ready = NULL;
			s->ready_data = NULL;
			if (fn)
				fn(fn_data, result, result < 0 ? why : NULL);
			again = true;
			break;
		}
	}
}

/* The sandbox's waiting boot, told at once that it waits no more (detached, or egress
 * stopping). */
static void
wait_cancel(struct egress_sb *s)
{
	egress_ready_fn fn = s->ready;
	void *fn_data = s->ready_data;

	s->wait = TABLE_WAIT_NONE;
	s->ready = NULL;
	s->ready_data = NULL;
	if (fn)
		fn(fn_data, -ECANCELED, NULL);
}

/* A run that failed leaves the table as it was (nft applies a transaction whole or not at
 * all): a sandbox attached then would have no network, one detached would stay listed,
 * until some later change. It is run again, each time a while later. */
static void
table_retry_later(struct egress *e)
{
	(void)loop_timer_arm(&e->nft_retry, e->nft_retry_ms, 0);
	e->nft_retry_ms = MIN(e->nft_retry_ms * 2, (uint64_t)NFT_RETRY_MAX_MS);
}

static void
table_retry(struct loop_timer *t _unused_, void *data)
{
	table_write(data);
}

static void
nft_exited(struct loop_child *c _unused_, void *data)
{
	struct egress *e = data;
	int status = 0;

	(void)waitpid(e->nft_pid, &status, 0);
	e->nft_pid = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		_cleanup_free_ char *text = NULL;
		char out[1024] = "";
		ssize_t n = pread(e->nft_err, out, sizeof(out) - 1, 0);
		if (n > 0)
			out[n] = '\0';
		/* its lines as one (the log line escapes what is left) */
		while (n > 0 && out[n - 1] == '\n')
			out[--n] = '\0';
		for (ssize_t i = 0; i < n; i++)
			if (out[i] == '\n')
				out[i] = ' ';
		text = termsafe_dup(out);
		log_error("egress: nft failed to update table " NFTRULES_TABLE
		          ": %s; trying again in %llu s",
		          text ? text : "(no output)",
		          (unsigned long long)(e->nft_retry_ms + 999) / 1000);
		table_retry_later(e);
		waits_end(e, TABLE_WAIT_IN_RUN, -EIO,
		          WIFEXITED(status) ? "nft failed" : "nft was killed");
	} else {
		e->nft_retry_ms = NFT_RETRY_MS;
		waits_end(e, TABLE_WAIT_IN_RUN, 0, NULL);
	}
	e->nft_err = safe_close(e->nft_err);
	if (e->nft_dirty)
		table_write(e);
}

/* Rewrites the table in the background (nft -f - from a memfd); a change meanwhile runs it
 * once more when this run ends. */
static void
table_write(struct egress *e)
{
	const char *argv[] = { "nft", "-f", "-", NULL };
	_cleanup_close_ int in = -1;
	struct list_node *n;
	int r;

	if (e->nft_pid > 0) {
		e->nft_dirty = true;
		return;
	}
	e->nft_dirty = false;
	in = table_memfd(e);
	e->nft_err = memfd_create("nft-output", MFD_CLOEXEC);
	if (in < 0 || e->nft_err < 0) {
		log_error("egress: cannot prepare table " NFTRULES_TABLE ": %s",
		          strerror(in < 0 ? -in : errno));
		e->nft_err = safe_close(e->nft_err);
		table_retry_later(e);
		waits_end(e, TABLE_WAIT_QUEUED, -EIO, "the table could not be prepared");
		return;
	}
	{
		struct spawn sp = { .path = e->nft, .fds = { in, -1, e->nft_err }, .n_fds = 3 };
		r = spawn_child(&sp, argv, &e->nft_pid);
	}
	if (r < 0) {
		log_error("egress: cannot run nft: %s", strerror(-r));
		e->nft_pid = 0;
		e->nft_err = safe_close(e->nft_err);
		table_retry_later(e);
		waits_end(e, TABLE_WAIT_QUEUED, -EIO, "nft could not be run");
		return;
	}
	/* the boots waiting so far wait for this run: its text has their links */
	LIST_FOREACH (n, &e->sbs) {
		struct egress_sb *s = list_entry(n, struct egress_sb, node);
		if (s->wait == TABLE_WAIT_QUEUED)
			s->wait = TABLE_WAIT_IN_RUN;
	}
	if (loop_child_watch(e->d->loop, &e->nft_watch, e->nft_pid, nft_exited, e) < 0) {
		/* cannot watch it: wait (nft is quick), so the next change is not lost */
		int status = 0;

		(void)waitpid(e->nft_pid, &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			table_retry_later(e);
			waits_end(e, TABLE_WAIT_IN_RUN, -EIO, "nft failed");
		} else {
			e->nft_retry_ms = NFT_RETRY_MS;
			waits_end(e, TABLE_WAIT_IN_RUN, 0, NULL);
		}
		e->nft_pid = 0;
		e->nft_err = safe_close(e->nft_err);
	}
}

/* At startup, before the loop: the table as it must be, or sandboxd does not start. */
static int
table_write_now(struct egress *e)
{
	const char *argv[] = { e->nft, "-f", "-", NULL };
	struct tool t = { .in_fd = -1, .out_fd = -1 };
	_cleanup_free_ char *why = NULL;
	int r;

	t.in_fd = table_memfd(e);
	if (t.in_fd < 0)
		return t.in_fd;
	r = tool_run(&t, argv);
	close(t.in_fd);
	if (r < 0) {
		why = tool_failure(&t, argv, r);
		log_error("egress: cannot write table " NFTRULES_TABLE ": %s", why ? why : "");
	}
	tool_done(&t);
	return r;
}

/* ---- the worker's control channel ---- */

static void ctl_io(struct loop_source *src, uint32_t events, void *data);

static void
ctl_flush(struct egress *e)
{
	while (buf_avail(&e->out) > 0 && e->ctl >= 0) {
		ssize_t n = send(e->ctl, buf_head(&e->out), buf_avail(&e->out),
		                 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		buf_consume(&e->out, (size_t)n);
		e->sent += (uint64_t)n;
	}
	if (e->ctl >= 0)
		(void)loop_modify(&e->ctl_src, EPOLLIN | (buf_avail(&e->out) ? EPOLLOUT : 0));
}

/* Queues one line for the worker. -E2BIG: over the protocol's line limit, not sent (the
 * caller decides what then holds). When the worker has not read the last OUT_MAX bytes it
 * is wedged, and a message it would miss may be a tightening: it is killed and started
 * again, and then told everything anew. */
static int
ctl_send(struct egress *e, json_t *msg)
{
	_cleanup_free_ char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;

	json_decref(msg);
	if (!text)
		return -ENOMEM;
	if (strlen(text) >= LINE_MAX_BYTES)
		return -E2BIG;
	if (e->ctl < 0)
		return 0; /* a worker that starts again is sent everything anew */
	if (buf_append(&e->out, text, strlen(text)) < 0 || buf_putc(&e->out, '\n') < 0) {
		log_error("egress: a policy message for the worker was lost; restarting it");
		kill(e->pid, SIGKILL);
		return 0;
	}
	ctl_flush(e);
	return 0;
}

static void
send_set(struct egress *e, struct egress_sb *s, const json_t *network)
{
	char guest[INET_ADDRSTRLEN], host[INET_ADDRSTRLEN];
	int r;

	inet_ntop(AF_INET, &s->link.guest_addr, guest, sizeof(guest));
	inet_ntop(AF_INET, &s->link.host_addr, host, sizeof(host));
	r = ctl_send(e, json_pack("{s:s, s:s, s:s, s:s, s:O}", "op", "set", "id", s->id, "guest",
	                          guest, "host", host, "network", network));
	if (r < 0) {
		/* fail closed for this sandbox alone: restarting the worker would only meet the
		 * same policy again when it is told everything anew, and take every other
		 * sandbox's connections along each time */
		log_error("sandbox '%s': its network policy could not be given to the egress "
		          "worker (%s); it reaches nothing",
		          s->id, strerror(-r));
		(void)ctl_send(e, json_pack("{s:s, s:s}", "op", "remove", "id", s->id));
	}
}

/* The token bucket of one sandbox's recorded events. */
static bool
event_budget(struct egress_sb *s)
{
	uint64_t now = now_mono_ms();

	s->tokens += (double)(now - s->tokens_ms) * EVENT_RATE / 1000.0;
	if (s->tokens > EVENT_BURST)
		s->tokens = EVENT_BURST;
	s->tokens_ms = now;
	if (s->tokens < 1.0)
		return false;
	s->tokens -= 1.0;
	return true;
}

bool
egress_lograte_take(struct egress_lograte *r, uint64_t now_ms, uint64_t *ret_missed)
{
	uint64_t second = now_ms / 1000;

	*ret_missed = 0;
	if (second != r->second) {
		*ret_missed = r->missed;
		r->second = second;
		r->logged = r->missed = 0;
	}
	if (r->logged >= LOGS_PER_S) {
		r->missed++;
		return false;
	}
	r->logged++;
	return true;
}

/* Logs a line about what a guest or the worker caused, within the rate (the first line of a
 * later second says how many were left out). */
static void log_limited(struct egress *e, enum log_level level, const char *fmt, ...)
        _printf_(3, 4);
static void
log_limited(struct egress *e, enum log_level level, const char *fmt, ...)
{
	char line[1024];
	uint64_t missed;
	bool show = egress_lograte_take(&e->lograte, now_mono_ms(), &missed);
	va_list ap;

	if (missed > 0)
		log_info("egress: %llu more lines about egress decisions not logged",
		         (unsigned long long)missed);
	if (!show)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log_msg(level, "%s", line);
}

/* A name as the worker's parsers give them: DNS characters, lowercase, 1..253 bytes. */
static bool
decision_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 253)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
		      s[i] == '_' || s[i] == '.'))
			return false;
	return true;
}

static bool
decision_text_ok(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

static bool
decision_count_ok(const json_t *v)
{
	return json_is_integer(v) && json_integer_value(v) >= 0;
}

/* A string member without a NUL inside (the C string would say less than the JSON). */
static const char *
decision_str(const json_t *msg, const char *key)
{
	const json_t *v = json_object_get(msg, key);
	const char *s = json_string_value(v);

	return s && strlen(s) == json_string_length(v) ? s : NULL;
}

json_t *
egress_decision_data(const json_t *msg, const char **ret_id, bool *ret_allowed, bool *ret_dns)
{
	const char *id = decision_str(msg, "id"), *via = decision_str(msg, "via");
	const char *verdict = decision_str(msg, "verdict"), *reason = decision_str(msg, "reason");
	const char *name = decision_str(msg, "name");
	json_t *port = json_object_get(msg, "port"), *data;
	bool dns;

	if (!id || !sandbox_id_valid(id) || !via || !verdict || !reason ||
	    !decision_text_ok(reason, REASON_MAX))
		return NULL;
	if (!streq(via, "tls") && !streq(via, "http") && !streq(via, "dns"))
		return NULL;
	if (!streq(verdict, "allowed") && !streq(verdict, "denied"))
		return NULL;
	if (name ? !decision_name_ok(name) : !json_is_null(json_object_get(msg, "name")))
		return NULL;
	if (!json_is_integer(port) || json_integer_value(port) < 1 ||
	    json_integer_value(port) > 65535)
		return NULL;
	dns = streq(via, "dns");
	/* built from the checked values, never copied from the line */
	data = json_pack("{s:s, s:o, s:I, s:s, s:s}", "via", via, "name",
	                 name ? json_string(name) : json_null(), "port", json_integer_value(port),
	                 "verdict", verdict, "reason", reason);
	if (!data)
		return NULL;
	if (!dns) {
		/* a connection also says what it dialled and moved */
		const char *addr = decision_str(msg, "addr");
		json_t *out = json_object_get(msg, "bytes_out"),
		       *in = json_object_get(msg, "bytes_in");
		json_t *cut = json_object_get(msg, "cut");
		uint8_t bin[sizeof(struct in6_addr)];

		if (!(addr ? inet_pton(AF_INET, addr, bin) == 1 ||
		                      inet_pton(AF_INET6, addr, bin) == 1
		           : json_is_null(json_object_get(msg, "addr"))) ||
		    !decision_count_ok(out) || !decision_count_ok(in) || !json_is_boolean(cut) ||
		    json_object_set_new(data, "addr", addr ? json_string(addr) : json_null()) < 0 ||
		    json_object_set_new(data, "bytes_out", json_integer(json_integer_value(out))) <
		            0 ||
		    json_object_set_new(data, "bytes_in", json_integer(json_integer_value(in))) <
		            0 ||
		    json_object_set_new(data, "cut", json_boolean(json_is_true(cut))) < 0) {
			json_decref(data);
			return NULL;
		}
	}
	*ret_id = id;
	*ret_allowed = streq(verdict, "allowed");
	*ret_dns = dns;
	return data;
}

/* One decision: counted, a denial logged, recorded as the sandbox's event within its budget.
 * The worker parses what guests send and could be subverted: only a well-formed decision's
 * known fields are taken (egress_decision_data), and the log lines are rate-limited. */
static void
on_decision(struct egress *e, json_t *msg)
{
	struct egress_counters *c = &e->counters;
	const char *id = NULL;
	bool allowed = false, dns = false;
	json_t *data = egress_decision_data(msg, &id, &allowed, &dns);
	struct egress_sb *s;
	struct sandbox *sb;

	if (!data) {
		log_limited(e, LOG_LEVEL_WARNING,
		            "egress: the worker sent a decision that is not well-formed; ignored");
		return;
	}
	if (dns)
		allowed ? c->dns_allowed++ : c->dns_denied++;
	else {
		allowed ? c->allowed++ : c->denied++;
		c->bytes_out += (uint64_t)json_integer_value(json_object_get(data, "bytes_out"));
		c->bytes_in += (uint64_t)json_integer_value(json_object_get(data, "bytes_in"));
	}
	if (!allowed) {
		/* a refused name goes to sandboxd's log too (every field checked above) */
		const char *name = json_string_value(json_object_get(data, "name"));

		log_limited(e, LOG_LEVEL_INFO, "sandbox '%s': egress denied: %s '%s' port %d (%s)",
		            id, json_string_value(json_object_get(data, "via")), name ? name : "",
		            (int)json_integer_value(json_object_get(data, "port")),
		            json_string_value(json_object_get(data, "reason")));
	}
	s = find_sb(e, id);
	sb = registry_get(&e->d->reg, id);
	if (s && sb)
		activity_inside(sb); /* its network at work: a lookup, a connection ended */
	if (!s || !sb || (dns && allowed)) {
		/* removed meanwhile; or an allowed lookup, which every connection follows and
		 * whose own event says it all */
		json_decref(data);
		return;
	}
	if (!event_budget(s)) {
		c->suppressed++;
		json_decref(data);
		return;
	}
	(void)sandbox_event(e->d, sb, allowed ? "egress.allowed" : "egress.denied", data);
}

static void
on_line(struct egress *e, const char *line, size_t len)
{
	json_error_t jerr;
	json_t *msg;
	const char *op;

	if (len == 0)
		return;
	msg = json_loadb(line, len, 0, &jerr);
	op = json_string_value(json_object_get(msg, "op"));
	if (!op) {
		log_limited(e, LOG_LEVEL_WARNING,
		            "egress: the worker sent a line that is not a message");
	} else if (streq(op, "egress")) {
		on_decision(e, msg);
	} else if (streq(op, "dropped")) {
		json_int_t n = json_integer_value(json_object_get(msg, "count"));
		if (n > 0)
			e->counters.dropped += (uint64_t)n;
	}
	json_decref(msg);
}

static void worker_gone(struct egress *e);

/* Lines from what arrived: e->in holds the line still arriving; one over LINE_MAX_BYTES is
 * dropped whole, up to its newline, so its tail is never read as a line of its own. */
static void
ctl_input(struct egress *e, const char *p, size_t n)
{
	while (n > 0) {
		const char *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) : n;

		if (!e->in_skipping && buf_append(&e->in, p, k) < 0) {
			log_limited(e, LOG_LEVEL_WARNING,
			            "egress: a worker line over %u bytes was dropped",
			            LINE_MAX_BYTES);
			buf_reset(&e->in);
			e->in_skipping = true;
		}
		if (!nl)
			return;
		if (!e->in_skipping)
			on_line(e, buf_head(&e->in), buf_avail(&e->in));
		buf_reset(&e->in);
		e->in_skipping = false;
		p = nl + 1;
		n -= k + 1;
	}
}

/* Reads what the worker sent, at most CTL_READS chunks a wakeup: a guest decides how fast
 * decisions come (a DNS flood is a line per query), and reading until the socket is empty
 * could keep the loop here while the API waits. The rest waits in the socket (the loop comes
 * back, the fd being level-triggered), and the worker drops and counts what does not fit. */
static void
ctl_read(struct egress *e)
{
	char chunk[16384];

	for (unsigned i = 0; i < CTL_READS; i++) {
		ssize_t n = recv(e->ctl, chunk, sizeof(chunk), MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			worker_gone(e);
			return;
		}
		ctl_input(e, chunk, (size_t)n);
		if (e->ctl < 0)
			return;
	}
}

static void
ctl_io(struct loop_source *src _unused_, uint32_t events, void *data)
{
	struct egress *e = data;

	if (events & EPOLLOUT)
		ctl_flush(e);
	if (e->ctl >= 0 && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		ctl_read(e);
}

/* ---- the worker process ---- */

/* The worker's environment: none of sandboxd's (it may hold what the operator gave sandboxd,
 * credentials among them, and the worker parses what guests send), but the sanitizers'
 * options of a test build. */
static void
worker_env(char *ret[static 4])
{
	static const char *const keep[] = { "ASAN_OPTIONS=", "UBSAN_OPTIONS=", "LSAN_OPTIONS=" };
	size_t n = 0;

	for (char **v = environ; *v && n < ARRAY_SIZE(keep); v++)
		for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
			if (str_has_prefix(*v, keep[i]))
				ret[n++] = *v;
	ret[n] = NULL;
}

static void worker_exited(struct loop_child *c, void *data);

/* Ends the worker at once and reaps it: for when it never got going (the loop has not seen
 * it), never on the loop's own path, where worker_exited reaps. */
static void
worker_end_now(struct egress *e)
{
	kill(e->pid, SIGKILL);
	(void)waitpid(e->pid, NULL, 0);
	e->pid = 0;
	loop_child_done(&e->pid_watch);
	loop_remove(&e->ctl_src);
	e->ctl = safe_close(e->ctl);
}

/* Starts the worker and watches its exit; its channel is watched once it is ready
 * (worker_watch). */
static int
worker_spawn(struct egress *e)
{
	char uid[16], gid[16];
	const char *argv[] = { "sandboxd",
		               "egress-worker",
		               "--control-fd",
		               "3",
		               "--proxy-fd",
		               "4",
		               "--dns-fd",
		               "5",
		               "--uid",
		               uid,
		               "--gid",
		               gid,
		               NULL };
	char *env[4];
	int sv[2], r;

	worker_env(env);
	snprintf(uid, sizeof(uid), "%u", (unsigned)e->uid);
	snprintf(gid, sizeof(gid), "%u", (unsigned)e->uid);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return negative_errno();
	{
		/* only the sockets it needs, in a group of its own */
		struct spawn sp = { .path = e->exe,
			            .envp = env,
			            .fds = { -1, -1, SPAWN_INHERIT, sv[1], e->proxy_fd, e->dns_fd },
			            .n_fds = 6,
			            .own_group = true };
		r = spawn_child(&sp, argv, &e->pid);
	}
	close(sv[1]);
	if (r < 0) {
		close(sv[0]);
		e->pid = 0;
		return r;
	}
	e->ctl = sv[0];
	buf_reset(&e->in);
	buf_reset(&e->out);
	e->in_skipping = false;
	e->sent = e->sent_then = e->waiting = 0;
	e->stalled_since = now_mono_ms();
	r = loop_child_watch(e->d->loop, &e->pid_watch, e->pid, worker_exited, e);
	if (r < 0)
		worker_end_now(e);
	return r;
}

static int
worker_watch(struct egress *e)
{
	return loop_add(e->d->loop, &e->ctl_src, e->ctl, EPOLLIN, ctl_io, e);
}

/* Everything the worker must know, after it (re)started. */
static void
worker_feed(struct egress *e)
{
	struct list_node *n;

	LIST_FOREACH (n, &e->sbs) {
		struct egress_sb *s = list_entry(n, struct egress_sb, node);
		struct sandbox *sb = registry_get(&e->d->reg, s->id);
		if (sb)
			send_set(e, s, sb->network);
	}
}

/* Every second: a worker that has read nothing of what waits for it for WEDGED_MS is killed
 * and started again (then told everything anew). Its connections are decided by the
 * policies it last read, so a worker that stopped reading would keep a tightening from ever
 * holding, and PATCH has long returned: a tightening holds only with a worker that reads. What
 * waits is the socket's send queue (SIOCOUTQ: bytes with their overhead, so only compared
 * with itself) and what sandboxd holds back; it went down, or stayed level while more was
 * sent, exactly when the worker read something. */
static void
worker_watchdog(struct loop_timer *t _unused_, void *data)
{
	struct egress *e = data;
	uint64_t now = now_mono_ms(), waiting;
	int queued = 0;

	if (e->ctl < 0 || e->pid <= 0)
		return;
	if (ioctl(e->ctl, SIOCOUTQ, &queued) < 0 || queued < 0)
		queued = 0;
	waiting = (uint64_t)queued + buf_avail(&e->out);
	if (waiting == 0 || waiting < e->waiting ||
	    (waiting == e->waiting && e->sent != e->sent_then))
		e->stalled_since = now;
	e->waiting = waiting;
	e->sent_then = e->sent;
	if (now - e->stalled_since < WEDGED_MS)
		return;
	log_error("egress: the worker has read nothing sent to it for %u s; restarting it",
	          WEDGED_MS / 1000);
	e->stalled_since = now;
	kill(e->pid, SIGKILL);
}

static void
worker_restart(struct loop_timer *t _unused_, void *data)
{
	struct egress *e = data;
	int r;

	if (e->stopping || e->pid > 0)
		return;
	r = worker_spawn(e);
	if (r >= 0 && (r = worker_watch(e)) < 0)
		worker_end_now(e); /* not left running unread, which nothing would restart */
	if (r < 0) {
		log_error("egress: cannot start the worker again: %s; retrying", strerror(-r));
		(void)loop_timer_arm(&e->restart, 10 * RESTART_DELAY_MS, 0);
		return;
	}
	log_info("egress: worker started again (pid %d)", (int)e->pid);
	worker_feed(e);
}

/* The worker's channel closed or the process ended. Until a new one runs, new connections
 * wait in the listening socket's queue (the sockets are sandboxd's and outlive workers) and
 * DNS queries go unanswered; the ones it had open are gone with it. */
static void
worker_gone(struct egress *e)
{
	loop_remove(&e->ctl_src);
	e->ctl = safe_close(e->ctl);
	if (e->pid > 0)
		kill(e->pid, SIGKILL);
}

static void
worker_exited(struct loop_child *c _unused_, void *data)
{
	struct egress *e = data;
	int status = 0;

	(void)waitpid(e->pid, &status, 0);
	worker_gone(e);
	e->pid = 0;
	if (e->stopping)
		return;
	if (WIFSIGNALED(status))
		log_error("egress: the worker was killed by signal %d; starting it again",
		          WTERMSIG(status));
	else
		log_error("egress: the worker exited with status %d; starting it again",
		          WEXITSTATUS(status));
	(void)loop_timer_arm(&e->restart, RESTART_DELAY_MS, 0);
}

/* At startup: the worker says it is ready (it listens, as its own uid) within
 * READY_WAIT_MS. */
static int
worker_wait_ready(struct egress *e)
{
	uint64_t deadline = now_mono_ms() + READY_WAIT_MS;
	char line[256];
	size_t len = 0;

	for (;;) {
		uint64_t now = now_mono_ms();
		struct pollfd p = { .fd = e->ctl, .events = POLLIN };
		ssize_t n;

		if (now >= deadline)
			return -ETIMEDOUT;
		if (poll(&p, 1, (int)(deadline - now)) <= 0)
			continue;
		n = recv(e->ctl, line + len, sizeof(line) - 1 - len, MSG_DONTWAIT);
		if (n <= 0)
			return -EPIPE;
		len += (size_t)n;
		line[len] = '\0';
		if (strchr(line, '\n'))
			return strstr(line, "\"ready\"") ? 0 : -EPROTO;
		if (len == sizeof(line) - 1)
			return -EPROTO;
	}
}

/* ---- ports ---- */

static int
bind_port(int type, unsigned port, const char *flag)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	_cleanup_close_ int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd < 0)
		return negative_errno();
	/* TCP: a restart binds again at once despite connections in TIME_WAIT. Never for UDP,
	 * where it lets two sockets share the port: a second sandboxd would bind it too */
	if (type == SOCK_STREAM)
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = negative_errno();
		if (r == -EADDRINUSE)
			log_error(
			        "egress: %s port %u is already in use by another program; free it "
			        "or move egress with %s",
			        type == SOCK_STREAM ? "tcp" : "udp", port, flag);
		else
			log_error("egress: cannot bind %s port %u: %s",
			          type == SOCK_STREAM ? "tcp" : "udp", port, strerror(-r));
		return r;
	}
	if (type == SOCK_STREAM && listen(fd, 1024) < 0)
		return negative_errno();
	return TAKE_FD(fd);
}

/* ---- the module ---- */

static void
egress_free(struct egress *e)
{
	struct list_node *n, *tmp;

	if (!e)
		return;
	LIST_FOREACH_SAFE (n, tmp, &e->sbs) {
		list_remove(n);
		free(list_entry(n, struct egress_sb, node));
	}
	hashmap_clear(&e->by_id);
	loop_timer_done(&e->restart);
	loop_timer_done(&e->nft_retry);
	loop_timer_done(&e->watchdog);
	loop_timer_done(&e->tell);
	safe_close(e->proxy_fd);
	safe_close(e->dns_fd);
	buf_free(&e->in);
	buf_free(&e->out);
	free(e->exe);
	free(e->nft);
	free(e);
}

int
egress_start(struct sandboxd *d, uid_t uid)
{
	const struct options *o = d->opts;
	struct egress *e = calloc(1, sizeof(*e));
	int r;

	if (!e)
		return -ENOMEM;
	e->d = d;
	e->uid = uid;
	e->proxy_fd = e->dns_fd = e->ctl = e->nft_err = -1;
	/* egress_free may come before their init */
	e->restart.src.fd = e->nft_retry.src.fd = e->watchdog.src.fd = e->tell.src.fd = -1;
	list_init(&e->sbs);
	buf_init(&e->in, LINE_MAX_BYTES);
	buf_init(&e->out, OUT_MAX);
	e->exe = realpath("/proc/self/exe", NULL);
	e->nft_retry_ms = NFT_RETRY_MS;
	r = loop_timer_init(d->loop, &e->restart, worker_restart, e);
	if (r >= 0)
		r = loop_timer_init(d->loop, &e->nft_retry, table_retry, e);
	if (r >= 0)
		r = loop_timer_init(d->loop, &e->watchdog, worker_watchdog, e);
	if (r >= 0)
		r = loop_timer_init(d->loop, &e->tell, tell_waiting, e);
	if (r < 0 || !e->exe) {
		egress_free(e);
		return r < 0 ? r : -ENOMEM;
	}
	/* fail closed: without nft there is no table, so no sandbox could be confined; sandboxd
	 * does not start rather than serve without it */
	r = tool_find("nft", &e->nft);
	if (r < 0) {
		if (r == -ENOENT)
			log_error(
			        "egress: nft is not installed (apt-get install nftables), or start "
			        "with --egress off: sandboxes then get no network");
		egress_free(e);
		return r;
	}
	e->proxy_fd = bind_port(SOCK_STREAM, o->egress_proxy_port, "--egress-proxy-port");
	if (e->proxy_fd >= 0)
		e->dns_fd = bind_port(SOCK_DGRAM, o->egress_dns_port, "--egress-dns-port");
	if (e->proxy_fd < 0 || e->dns_fd < 0) {
		r = e->proxy_fd < 0 ? e->proxy_fd : e->dns_fd;
		egress_free(e);
		return r;
	}
	r = table_write_now(e);
	if (r < 0) {
		egress_free(e);
		return r;
	}
	{
		unsigned n = taps_sweep(d, NULL);
		if (n)
			log_info("egress: removed %u tap(s) named %sN that no VMM held", n,
			         NFTRULES_TAP_PREFIX);
	}
	r = worker_spawn(e);
	if (r < 0) {
		log_error("egress: cannot start the worker: %s", strerror(-r));
		egress_free(e);
		return r;
	}
	r = worker_wait_ready(e);
	if (r < 0)
		log_error("egress: the worker did not become ready: %s", strerror(-r));
	else
		r = worker_watch(e);
	if (r < 0) {
		worker_end_now(e);
		egress_free(e);
		return r;
	}
	d->egress = e;
	(void)loop_timer_arm(&e->watchdog, 1000, 1000);
	{
		char net[INET_ADDRSTRLEN];
		struct in_addr a = { .s_addr = htonl(o->egress_subnet) };
		inet_ntop(AF_INET, &a, net, sizeof(net));
		log_info("egress: proxy on tcp %u, DNS stub on udp %u, sandbox links from %s/%u, "
		         "worker pid %d as uid %u",
		         o->egress_proxy_port, o->egress_dns_port, net, o->egress_subnet_bits,
		         (int)e->pid, (unsigned)uid);
	}
	return 0;
}

void
egress_stop(struct sandboxd *d)
{
	struct egress *e = d ? E(d) : NULL;

	if (!e)
		return;
	e->stopping = true;
	{
		struct list_node *n;

		LIST_FOREACH (n, &e->sbs)
			wait_cancel(list_entry(n, struct egress_sb, node));
	}
	loop_remove(&e->ctl_src);
	e->ctl = safe_close(e->ctl); /* the worker exits when its channel closes */
	loop_child_done(&e->pid_watch);
	if (e->pid > 0) {
		kill(e->pid, SIGTERM);
		for (int i = 0; i < 100 && waitpid(e->pid, NULL, WNOHANG) == 0; i++)
			usleep(10000);
		if (kill(e->pid, SIGKILL) == 0)
			(void)waitpid(e->pid, NULL, 0);
	}
	loop_child_done(&e->nft_watch);
	if (e->nft_pid > 0)
		(void)waitpid(e->nft_pid, NULL, 0);
	e->nft_err = safe_close(e->nft_err);
	d->egress = NULL;
	egress_free(e);
}

int
egress_attach(struct sandboxd *d, struct sandbox *sb, const struct egress_link *link,
              egress_ready_fn ready, void *data)
{
	struct egress *e = E(d);
	struct egress_sb *s;

	if (!e)
		return 0;
	s = find_sb(e, sb->id);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s) {
			log_error("sandbox '%s': out of memory for its egress; it reaches nothing",
			          sb->id);
			return -ENOMEM;
		}
		snprintf(s->id, sizeof(s->id), "%s", sb->id);
		s->tokens = EVENT_BURST;
		s->tokens_ms = now_mono_ms();
		if (hashmap_put(&e->by_id, s->id, s) < 0) {
			log_error("sandbox '%s': out of memory for its egress; it reaches nothing",
			          sb->id);
			free(s);
			return -ENOMEM;
		}
		list_push_back(&e->sbs, &s->node);
	}
	wait_cancel(s); /* an earlier boot's wait, should one be left */
	s->link = *link;
	s->in_table = !mode_is_none(sb->network);
	send_set(e, s, sb->network);
	if (s->in_table && ready) {
		s->wait = TABLE_WAIT_QUEUED;
		s->ready = ready;
		s->ready_data = data;
	}
	table_write(e);
	return s->ready ? 1 : 0;
}

void
egress_detach(struct sandboxd *d, struct sandbox *sb)
{
	struct egress *e = E(d);
	struct egress_sb *s = e ? find_sb(e, sb->id) : NULL;

	if (!s)
		return;
	wait_cancel(s);
	(void)ctl_send(e, json_pack("{s:s, s:s}", "op", "remove", "id", sb->id));
	hashmap_remove(&e->by_id, s->id);
	list_remove(&s->node);
	free(s);
	table_write(e);
}

void
egress_update(struct sandboxd *d, struct sandbox *sb)
{
	struct egress *e = E(d);
	struct egress_sb *s = e ? find_sb(e, sb->id) : NULL;
	bool in_table;

	if (!s)
		return; /* not running: its next start reads the policy */
	in_table = !mode_is_none(sb->network);
	/* the worker first: it decides every connection, so a tightening holds from here on
	 * (and cuts what it no longer allows); the table follows */
	send_set(e, s, sb->network);
	if (in_table != s->in_table) {
		s->in_table = in_table;
		table_write(e);
	}
}
