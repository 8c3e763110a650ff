/* main.c: sandboxd's entry point: parse and check the command line, open the state, take
 * back what an earlier run left, listen, and run the event loop until SIGTERM. */
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include "accounts.h"
#include "api-internal.h"
#include "api-preview.h"
#include "audit.h"
#include "bundle.h"
#include "egress.h"
#include "ended.h"
#include "image-install.h"
#include "images.h"
#include "lifecycle.h"
#include "log.h"
#include "paths.h"
#include "policyfile.h"
#include "pools.h"
#include "preview.h"
#include "proc.h"
#include "reconcile.h"
#include "records.h"
#include "samples.h"
#include "sandboxd.h"
#include "server.h"
#include "store.h"
#include "strv.h"
#include "tls.h"
#include "util.h"
#include "worker.h"

#define HOUSEKEEPING_MS 1000
#define MMAP_THRESHOLD (128u << 10) /* glibc's initial one, kept */
#define HEARTBEAT_EVERY 15          /* housekeeping ticks */
#define FD_RESERVE 1024 /* descriptors beside the connections: VMs, the store, the loop */
#define PRUNE_EVERY 60  /* housekeeping ticks: the store's oldest events past the bound */
#define SAMPLE_EVERY (SAMPLES_EVERY_MS / HOUSEKEEPING_MS)

static void
on_signal(int signo, void *data)
{
	struct sandboxd *d = data;

	if (signo == SIGTERM || signo == SIGINT)
		lifecycle_shutdown(d, strsignal(signo));
}

static void
housekeeping(struct loop_timer *t _unused_, void *data)
{
	static unsigned ticks;
	struct sandboxd *d = data;

	server_sweep(d->server, now_mono_ms());
	if (d->preview_server)
		server_sweep(d->preview_server, now_mono_ms());
	lifecycle_housekeeping(d, now_unix_ms());
	pools_tend(d);
	ended_forget(d, now_unix_ms());
	if (++ticks % HEARTBEAT_EVERY == 0)
		api_events_heartbeat(d);
	if (ticks % SAMPLE_EVERY == 0)
		samples_take_all(d);
	if (ticks % PRUNE_EVERY == 0)
		(void)store_prune_events(d->store, d->opts->audit_max_events);
}

/* The audit log's directory is checked (and made) before anything is served: a record that
 * cannot be written later is logged, never a refusal. */
static int
open_audit_log(struct sandboxd *d)
{
	_cleanup_free_ char *why = NULL;
	int r;

	if (!d->opts->audit_log) {
		log_info("audit log: none (--audit-log none); GET /v1/sandboxes/{ref}/events still "
		         "answers from the store");
		return 0;
	}
	r = audit_log_open(d->opts->audit_log, d->opts->audit_max_bytes, AUDIT_LOG_KEEP, &d->audit,
	                   &why);
	if (r < 0)
		log_error("%s", why ? why : strerror(-r));
	return r;
}

/* Every connection of every listener's budget needs a descriptor, beside FD_RESERVE for the
 * rest: the soft limit is raised as far as the hard one allows. When even that is short, the
 * listeners' budgets are lowered to fit, so that one full listener never takes the
 * descriptors the others (the operator's unix socket) need. */
static void
fit_fd_limit(struct server *s, unsigned per_listener)
{
	unsigned listeners = server_listener_count(s);
	rlim_t need = (rlim_t)per_listener * listeners + FD_RESERVE;
	struct rlimit rl;

	if (listeners == 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= need)
		return;
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need)
		rl.rlim_cur = need;
	else
		rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 && getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur >= need)
		return;
	per_listener = rl.rlim_cur > FD_RESERVE + listeners
	                       ? (unsigned)((rl.rlim_cur - FD_RESERVE) / listeners)
	                       : 1;
	log_warning("the file descriptor limit (%llu; LimitNOFILE) is below what %u listeners of "
	            "--max-connections need (%llu): each holds at most %u connections",
	            (unsigned long long)rl.rlim_cur, listeners, (unsigned long long)need,
	            per_listener);
	server_set_listener_budget(s, per_listener);
}

/* The state directory is 0700 and owned by us: it holds the database and, later, disks. */
static int
prepare_state_dir(const char *dir, int *ret_lock)
{
	_cleanup_free_ char *lock = NULL, *why = NULL;
	int fd, r;

	r = paths_state_dir_prepare(dir, &why);
	if (r < 0) {
		log_error("%s", why ? why : strerror(-r));
		return r;
	}
	lock = strdup_printf("%s/sandboxd.lock", dir);
	if (!lock)
		return -ENOMEM;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		r = negative_errno();
		log_error("state directory '%s': cannot open its lock: %s", dir, strerror(-r));
		return r;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		log_error("state directory '%s' is in use by another sandboxd; stop it or pass a "
		          "different --state-dir",
		          dir);
		close(fd);
		return -EBUSY;
	}
	*ret_lock = fd;
	return 0;
}

/* The records of --keep-sandboxes (records.h) hold environment values: with the flag, a
 * directory or a record others could read refuses the start; without it, they all go, and
 * values live only in memory. */
static int
prepare_records(const struct options *o)
{
	_cleanup_free_ char *why = NULL;
	unsigned removed = 0;
	int r = records_prepare(o->state_dir, o->keep_sandboxes, &removed, &why);

	if (r < 0) {
		log_error("%s%s", why ? why : strerror(-r),
		          r == -EPERM ? "; refusing to start" : "");
		return r;
	}
	if (removed)
		log_info("records: deleted %u an earlier run with --keep-sandboxes kept: this one "
		         "runs without it",
		         removed);
	return 0;
}

/* Refuses an unknown --backend before anything is created on disk. */
static int
check_backend_name(const char *name)
{
	if (!name)
		return 0;
	for (size_t i = 0; i < backend_table_size; i++)
		if (streq(name, backend_table[i].name))
			return 0;
	if (backend_table_size == 0)
		log_error("--backend '%s': this sandboxd has no VM backend built in", name);
	else
		log_error("--backend '%s' is not built into this sandboxd", name);
	return -ENOENT;
}

static int
prepare_socket_dir(const char *socket_path)
{
	_cleanup_free_ char *dir = strdup(socket_path);
	char *slash;
	int r;

	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	r = mkdir_p(dir, 0700);
	if (r < 0)
		log_error("--socket '%s': cannot create its directory: %s", socket_path,
		          strerror(-r));
	return r;
}

/* The last startup line, in the form operators grep for:
 * "sandboxd <version>: serving API v1 on <where>; backend <name> (<accel>); ...". */
static void
startup_line(struct sandboxd *d)
{
	_cleanup_buf_ struct buf line = BUF_INIT(4096);
	const struct options *o = d->opts;
	struct backend_caps caps = { .accel = "none" };

	(void)buf_printf(&line, "sandboxd %s: serving API v1 on ", sandboxd_version);
	if (o->socket_path)
		(void)buf_printf(&line, "unix:%s", o->socket_path);
	if (o->listen)
		(void)buf_printf(&line, "%s%s://%s (token required%s)",
		                 o->socket_path ? " and " : "", o->tls_cert ? "https" : "http",
		                 o->listen, o->client_ca ? ", client certificates required" : "");
	if (d->backend) {
		d->backend->ops->caps(d->backend, &caps);
		(void)buf_printf(&line, "; backend %s (%s)", d->backend->ops->name, caps.accel);
		/* what holds between VMMs, and between a VMM and the host, said where it is weaker
		 * than a root sandboxd's own uid and cgroup per VMM */
		if (caps.vmm_shared_uid)
			(void)buf_printf(&line, "; VMMs share sandboxd's uid %u%s (not root)",
			                 (unsigned)geteuid(),
			                 caps.vmm_no_cgroups ? ", without cgroup limits" : "");
		else if (caps.vmm_no_cgroups)
			(void)buf_puts(&line, "; VMMs without cgroup limits (--allow-unconfined)");
		(void)buf_printf(&line, "; network ceiling %s",
		                 net_mode_to_string(d->policy.network.ceiling));
		if (egress_enabled(d))
			(void)buf_printf(&line, " (egress proxy tcp %u, DNS stub udp %u)",
			                 o->egress_proxy_port, o->egress_dns_port);
		else if (caps.egress == NET_NONE)
			(void)buf_puts(&line,
			               geteuid() != 0
			                       ? " (not root: sandboxes get no network)"
			                       : " (--egress off: sandboxes get no network)");
	} else {
		(void)buf_puts(&line,
		               "; backend none (no VM backend built in: sandboxes cannot run)");
	}
	if (o->keep_sandboxes)
		(void)buf_puts(&line, "; sandboxes kept across restarts (--keep-sandboxes)");
	(void)buf_printf(&line, "; capacity %u cpus, %u MiB memory, %llu MiB disk; state %s\n",
	                 d->node.cpus, d->node.memory_mb, (unsigned long long)d->node.disk_mb,
	                 o->state_dir);
	if (o->listen)
		log_info("dashboard: %s://%s/ (sign in with an account: 'sandboxd admin create "
		         "EMAIL' makes the first admin; API clients use the token in %s or an API "
		         "key)",
		         o->tls_cert ? "https" : "http", o->listen, o->token_file);
	(void)!write(STDERR_FILENO, line.data, line.len);
}

/* The preview listener (--preview-listen): a server of its own, so that no API route and
 * no page of the dashboard is ever served on a preview's origin. Its default address taken
 * (another sandboxd) leaves previews off with a warning; an address the operator chose
 * refuses to start. */
static int
start_previews(struct sandboxd *d)
{
	const struct options *o = d->opts;
	_cleanup_free_ char *why = NULL;
	struct server_handler handler;
	int r;

	if (!o->preview_listen)
		return 0;
	r = preview_key_load(o->state_dir, d->preview_key, &why);
	if (r < 0) {
		log_error("previews: %s", why ? why : strerror(-r));
		return r;
	}
	api_preview_server_handler(d, &handler);
	r = server_new(d->loop, &handler, o->max_connections, &d->preview_server);
	if (r < 0)
		return r;
	server_set_client_limit(d->preview_server, o->max_connections_per_client);
	r = server_listen_tcp_flag(d->preview_server, o->preview_host, o->preview_port, NULL,
	                           "--preview-listen");
	if (r < 0) {
		d->preview_server = server_free(d->preview_server);
		if (!o->preview_default)
			return r;
		log_warning("previews are off: their default address %s is taken (another "
		            "sandboxd?); choose another with --preview-listen HOST:PORT, or say "
		            "--preview-listen off",
		            o->preview_listen);
		return 0;
	}
	if (!host_is_loopback(o->preview_host))
		log_warning("previews are served over plain HTTP on %s, reachable from other "
		            "machines: their tokens travel unencrypted (docs/operation.md, "
		            "\"Previews\")",
		            o->preview_listen);
	log_info("previews: http://p-ID-PORT.%s:%s/ (POST /v1/sandboxes/{ref}/previews hands "
	         "out each one's URL)",
	         o->preview_domain, o->preview_port);
	return 0;
}

/* The operator's policy file over the embedded defaults, then the flags over both. */
static int
apply_policy(struct sandboxd *d)
{
	const struct options *o = d->opts;
	struct policy *p = &d->policy;

	if (o->policy_file) {
		_cleanup_free_ char *why = NULL;
		int r = policyfile_load(o->policy_file, p, &why);
		if (r < 0) {
			log_error("%s", why ? why : strerror(-r));
			return r;
		}
		log_info("policy: read '%s'", o->policy_file);
	}
	if (o->default_image) {
		free(p->default_image);
		p->default_image = strdup(o->default_image);
		if (!p->default_image)
			return -ENOMEM;
	}
	if (o->n_allowed_images) {
		/* --allow-image replaces the file's images list */
		char **v;

		if (strv_copy(o->allowed_images, o->n_allowed_images, &v) < 0)
			return -ENOMEM;
		strv_free(p->images);
		p->images = v;
		p->n_images = o->n_allowed_images;
	}
	/* the flags may not leave what the file checked incoherent */
	if (!policy_image_allowed(p, p->default_image)) {
		log_error("the default image '%s' is not among the permitted images (--allow-image "
		          "or the policy's images): list it too",
		          p->default_image);
		return -EINVAL;
	}
	for (size_t i = 0; i < p->n_pools; i++)
		if (p->pools[i].image && !policy_image_allowed(p, p->pools[i].image)) {
			log_error("the pooled image '%s' is not among the permitted images "
			          "(--allow-image or the policy's images): list it too",
			          p->pools[i].image);
			return -EINVAL;
		}
	return 0;
}

/* The policy's network lowered to what the backend enforces, never served open: without
 * egress (no root, --egress off) the ceiling is none; with it, allowlist (everything goes by
 * name, there is no open mode). Said once, at startup. */
static void
cap_network(struct sandboxd *d)
{
	struct policy *p = &d->policy;
	struct backend_caps caps = { .egress = NET_NONE };
	const char *why;

	if (d->backend)
		d->backend->ops->caps(d->backend, &caps);
	if (p->network.ceiling <= caps.egress && p->network.default_mode <= caps.egress)
		return;
	if (caps.egress == NET_NONE)
		why = geteuid() != 0 ? "not root, so no tap devices: sandboxes get no network"
		                     : "--egress off: sandboxes get no network";
	else
		why = "egress is by name: there is no open mode";
	log_warning("policy: network ceiling '%s' (default '%s') lowered to '%s': %s",
	            net_mode_to_string(p->network.ceiling),
	            net_mode_to_string(p->network.default_mode), net_mode_to_string(caps.egress),
	            why);
	policy_cap_network(p, caps.egress);
}

static int
run(struct sandboxd *d)
{
	_cleanup_free_ char *db = NULL;
	struct server_handler handler;
	SSL_CTX *tls = NULL;
	long ncpu;
	int r;

	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	r = policy_init_defaults(&d->policy, ncpu > 0 ? (unsigned)ncpu : 1);
	if (r < 0)
		return r;
	r = apply_policy(d);
	if (r < 0)
		return r;

	db = strdup_printf("%s/sandboxd.db", d->opts->state_dir);
	if (!db)
		return -ENOMEM;
	r = store_open(db, &d->store);
	if (r < 0) {
		/* a newer schema or a broken database was explained by the store itself */
		if (r != -EPROTO && r != -EIO)
			log_error("store '%s': cannot open: %s", db, strerror(-r));
		return r;
	}
	r = store_prune_events(d->store, d->opts->audit_max_events);
	if (r > 0)
		log_info("store: removed the %d oldest event(s) past --audit-max-events %u", r,
		         d->opts->audit_max_events);
	r = open_audit_log(d);
	if (r < 0)
		return r;
	r = accounts_new(d->loop, &d->accounts);
	if (r < 0) {
		log_error("accounts: cannot start the password hashing threads: %s", strerror(-r));
		return r;
	}
	r = images_init(d);
	if (r < 0) {
		log_error("images: cannot read '%s/images': %s", d->opts->state_dir, strerror(-r));
		return r;
	}
	if (backend_table_size > 0) {
		struct backend_config cfg;
		lifecycle_backend_config(d, &cfg);
		r = backend_create(d->opts->backend, &cfg, &d->backend);
		if (r >= 0)
			r = lifecycle_backend_started(d);
		if (r < 0) {
			/* a missing bundle or QEMU, or VMMs that cannot be confined, was explained,
			 * with what to do */
			if (r != -ENOENT && r != -EPERM)
				log_error("backend: cannot start: %s", strerror(-r));
			return r;
		}
	}
	cap_network(d);
	r = lifecycle_recover(d);
	if (r < 0) {
		log_error("store: cannot load the sandboxes: %s", strerror(-r));
		return r;
	}
	r = reconcile_start(d);
	if (r < 0) {
		log_error("the reconciler cannot start: %s", strerror(-r));
		return r;
	}
	/* the pools fill once what an earlier sandboxd left was looked at: what it pooled has
	 * no row, so the sweep ended it */
	r = pools_init(d);
	if (r < 0)
		return r;
	pools_tend(d);
	r = ended_load(d, now_unix_ms());
	if (r < 0)
		return r;
	images_collect_old_disks(d);
	api_server_handler(d, &handler);
	r = server_new(d->loop, &handler, d->opts->max_connections, &d->server);
	if (r < 0)
		return r;
	server_set_client_limit(d->server, d->opts->max_connections_per_client);
	if (d->opts->socket_path) {
		r = prepare_socket_dir(d->opts->socket_path);
		if (r < 0)
			return r;
		r = server_listen_unix(d->server, d->opts->socket_path);
		if (r < 0)
			return r;
	}
	if (d->opts->listen) {
		if (d->opts->tls_cert) {
			r = tls_server_ctx(d->opts->tls_cert, d->opts->tls_key, d->opts->client_ca,
			                   &tls);
			if (r < 0)
				return r;
		}
		r = server_listen_tcp(d->server, d->opts->listen_host, d->opts->listen_port, tls);
		if (r < 0) {
			if (d->opts->token_generate)
				log_error("the dashboard's default address %s is taken (another "
				          "sandboxd?); choose another with --listen HOST:PORT and "
				          "--token-file FILE, or serve only --socket PATH",
				          d->opts->listen);
			SSL_CTX_free(tls);
			return r;
		}
	}
	if (d->opts->metrics_listen) {
		r = server_listen_metrics(d->server, d->opts->metrics_host, d->opts->metrics_port);
		if (r < 0) {
			SSL_CTX_free(tls);
			return r;
		}
	}
	r = start_previews(d);
	if (r < 0) {
		SSL_CTX_free(tls);
		return r;
	}
	fit_fd_limit(d->server, d->opts->max_connections);
	r = loop_timer_init(d->loop, &d->housekeeping, housekeeping, d);
	if (r >= 0)
		r = loop_timer_arm(&d->housekeeping, HOUSEKEEPING_MS, HOUSEKEEPING_MS);
	if (r < 0) {
		SSL_CTX_free(tls);
		return r;
	}
	startup_line(d);
	r = loop_run(d->loop);

	d->preview_server = server_free(d->preview_server);
	d->server = server_free(d->server);
	loop_timer_done(&d->housekeeping);
	SSL_CTX_free(tls);
	return r;
}

/* `sandboxd NAME ...`: the subcommands, each with its own main(argc - 1, argv + 1). */
static const struct {
	const char *name;
	int (*main)(int argc, char **argv);
} subcommands[] = {
	/* the guest kernel bundle and the small root disk */
	{ "setup", setup_main },
	/* install|build-base: also how sandboxd itself installs an image */
	{ "image", image_main },
	/* create|list: accounts, with or without a running sandboxd */
	{ "admin", admin_main },
	/* the unprivileged proxy and DNS stub sandboxd starts */
	{ "egress-worker", egress_worker_main },
};

int
main(int argc, char **argv)
{
	struct options opts;
	struct sandboxd d = { 0 };
	_cleanup_close_ int lock = -1;
	struct list_node *n;
	sigset_t mask;
	int r;

	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		if (argc > 1 && streq(argv[1], subcommands[i].name))
			return subcommands[i].main(argc - 1, argv + 1);
	r = options_parse(argc, argv, &opts);
	if (r != 0) {
		options_done(&opts);
		return r > 0 ? 0 : 2;
	}
	log_setup("sandboxd", opts.log_level);
	r = options_check(&opts, &d.token, &d.token_len);
	if (r < 0) {
		options_done(&opts);
		return 1;
	}
	/* big buffers (a run's output, an answer being sent) come from mmap and go back to the
	 * system when freed: glibc would otherwise raise this threshold to the largest block freed,
	 * and later ones of that size would stay in the heap after their run */
	(void)mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
	d.opts = &opts;
	d.uid = geteuid();
	registry_init(&d.reg);
	registry_init(&d.ended);
	list_init(&d.subscribers);
	list_init(&d.create_waits);
	umask(0077);
	signal(SIGPIPE, SIG_IGN);

	r = check_backend_name(opts.backend);
	if (r < 0)
		goto out;
	r = prepare_state_dir(opts.state_dir, &lock);
	if (r < 0)
		goto out;
	r = node_init(&d.node, &opts);
	if (r < 0) {
		log_error("node: cannot measure the state directory's filesystem '%s' (the default "
		          "of --capacity-disk-mb): %s",
		          opts.state_dir, strerror(-r));
		goto out;
	}
	r = prepare_records(&opts);
	if (r < 0)
		goto out;
	r = loop_new(&d.loop);
	if (r < 0)
		goto out;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	r = loop_signals_init(d.loop, &d.signals, &mask, on_signal, &d);
	if (r < 0)
		goto out;
	r = run(&d);
	loop_signals_done(&d.signals);
out:
	reconcile_stop(&d);
	d.preview_server = server_free(d.preview_server);
	d.server = server_free(d.server);
	d.accounts = accounts_free(d.accounts); /* after the server: nothing waits on it now */
	/* the processes followed let go of their agents before the backend frees those (they
	 * were left to leak at a SIGTERM; in the guests they go on as the agents decide, a kept
	 * one to be taken back by the next sandboxd) */
	LIST_FOREACH (n, &d.reg.all)
		proc_clear(list_entry(n, struct sandbox, by_created));
	/* the egress worker goes first; the backend lets the VMs still running run on, with
	 * their table entries, for the next sandboxd to take back (with --keep-sandboxes; without
	 * it, lifecycle_shutdown ended them, and the next sandboxd ends any left) */
	egress_stop(&d);
	d.backend = backend_free(d.backend);
	images_free(&d);
	pools_done(&d);
	registry_done(&d.reg);
	registry_done(&d.ended);
	buf_free(&d.list_cache);
	d.store = store_free(d.store);
	d.audit = audit_log_free(d.audit);
	d.loop = loop_free(d.loop);
	policy_done(&d.policy);
	node_done(&d.node);
	if (d.token) {
		explicit_bzero(d.token, d.token_len);
		free(d.token);
	}
	options_done(&opts);
	return r < 0 ? 1 : 0;
}
