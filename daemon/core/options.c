/* options.c: sandboxd's command line; see options.h. */
#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <sys/stat.h>
#include "audit.h"
#include "hostport.h"
#include "options.h"
#include "paths.h"
#include "oci.h"
#include "sandboxd.h"
#include "util.h"

static const char usage[] =
        "usage: sandboxd [options]\n"
        "       sandboxd setup [--state-dir DIR] [--agent FILE] [--force]\n"
        "       sandboxd image install|build-base [options] (sandboxd image --help)\n"
        "       sandboxd admin create EMAIL|list [options] (sandboxd admin --help)\n"
        "\n"
        "Serves API v1 for microVM sandboxes, and the dashboard. 'sandboxd setup' first builds\n"
        "the guest bundle (kernel, initramfs, root disk) in the state directory; 'sandboxd\n"
        "setup --help'. 'sandboxd admin create EMAIL' makes the first admin account. Without\n"
        "--socket and --listen, sandboxd serves its default socket and, for the dashboard,\n"
        "http://127.0.0.1:7070 with an operator token it keeps in the state directory.\n"
        "\n"
        "  --state-dir DIR        where state is kept (default /var/lib/sandboxd as root,\n"
        "                         ~/.local/share/sandboxd otherwise)\n"
        "  --socket PATH|none     the unix socket (default /run/sandboxd/sandboxd.sock as root,\n"
        "                         $XDG_RUNTIME_DIR/sandboxd.sock otherwise)\n"
        "  --listen HOST:PORT     also serve TCP; needs --token-file, and --tls-cert/--tls-key\n"
        "                         unless HOST is loopback\n"
        "  --token-file FILE      the operator token (mode 0600, at least 16 characters)\n"
        "  --tls-cert FILE        TLS certificate chain (PEM) for --listen\n"
        "  --tls-key FILE         TLS private key (PEM) for --listen\n"
        "  --client-ca FILE       require client certificates signed by this CA (mutual TLS)\n"
        "  --allowed-host NAME    a name clients put in the URL (repeatable); other Host\n"
        "                         headers are refused\n"
        "  --backend NAME         the VM backend (default: the first built in)\n"
        "  --accel auto|kvm|tcg   how QEMU runs guests (default auto: KVM when a test boot\n"
        "                         under it works, else TCG)\n"
        "  --kernel FILE          boot this guest kernel (vmlinux) instead of the bundle's\n"
        "  --initrd FILE          boot this initramfs instead of the bundle's\n"
        "  --agent FILE           the sandbox-guestd to build the initramfs from (default:\n"
        "                         beside sandboxd)\n"
        "  --boot-timeout SECS    how long a booting guest has to answer (default 60)\n"
        "  --stop-timeout SECS    how long a stopping guest has to power off before QEMU is\n"
        "                         told to quit (default 20; 0: at once)\n"
        "  --reconcile-interval SECS\n"
        "                         how often the reconciler fails sandboxes whose VM is gone\n"
        "                         or whose start or stop never finished, and removes VMMs,\n"
        "                         taps, cgroups and layers of ours that no sandbox owns\n"
        "                         (default 60)\n"
        "  --allow-unconfined     as root, run VMMs without cgroup limits where this host\n"
        "                         cannot make their cgroups (default: refuse to start)\n"
        "  --keep-sandboxes       when sandboxd stops, leave its sandboxes running, and take\n"
        "                         them back at its next start, environment values included\n"
        "                         (kept 0600 in STATE-DIR/records/); without it, stopping\n"
        "                         sandboxd ends every sandbox\n"
        "  --policy FILE          the server policy (YAML: default image, images, defaults,\n"
        "                         limits, network, pools); packaging/policy.example.yaml\n"
        "  --default-image IMAGE  what a create that names no image gets (default\n"
        "                         sandbox-base, built by 'sandboxd image build-base')\n"
        "  --allow-image IMAGE    permit only the images listed (repeatable), written exactly\n"
        "                         as requests name them; without it any image is permitted\n"
        "  --insecure-registry HOST:PORT\n"
        "                         pull from that registry over plain HTTP (repeatable)\n"
        "  --local-registry HOST:PORT\n"
        "                         that HTTPS registry may be on a loopback, private or\n"
        "                         link-local address (repeatable); no registry the operator\n"
        "                         did not name (these two flags) is reached on one\n"
        "  --user-pull on|off     whether a user's create may install an image that is not\n"
        "                         installed yet (default on; off: admins install images)\n"
        "  --egress on|off        enforce sandboxes' egress (default on as root): a tap per\n"
        "                         sandbox, nftables table inet sandboxd, the egress proxy\n"
        "                         and DNS stub; off: sandboxes get no network (ceiling none)\n"
        "  --egress-proxy-port N  the egress proxy's TCP port on the host (default 3128)\n"
        "  --egress-dns-port N    the DNS stub's UDP port on the host (default 7353)\n"
        "  --egress-subnet CIDR   where sandboxes' /30 links come from (default\n"
        "                         10.200.0.0/16; at most /22)\n"
        "  --audit-log FILE|none  the JSONL audit log (default STATE-DIR/audit/events.jsonl;\n"
        "                         0600 in a 0700 directory; 5 older generations kept)\n"
        "  --audit-max-bytes N    the size past which the audit log rotates: 4096 to\n"
        "                         1073741824 bytes (default 8388608, 8 MiB)\n"
        "  --audit-max-events N   the events the store keeps at most, every sandbox's\n"
        "                         together; the oldest go first (default 500000)\n"
        "  --metrics-listen HOST:PORT\n"
        "                         serve Prometheus metrics at /metrics there (loopback only:\n"
        "                         it has no credential)\n"
        "  --preview-listen HOST:PORT|off\n"
        "                         serve previews of sandboxes' ports there, each on an origin\n"
        "                         of its own (default 127.0.0.1:7071; off: no previews)\n"
        "  --preview-domain NAME  the domain previews' hosts are under: p-ID-PORT.NAME\n"
        "                         (default localhost, which browsers resolve to loopback)\n"
        "  --registration on|off  let people create their own (user) account from the\n"
        "                         dashboard (default off; never an admin)\n"
        "  --user-max-sandboxes N a user's active sandboxes at most (default 5; 0: no cap)\n"
        "  --user-max-cpus N      the cpus of a user's active sandboxes together (default 8)\n"
        "  --user-max-memory-mb N their memory together (default 16384)\n"
        "                         (an admin sets other caps per user: /v1/users)\n"
        "  --capacity-cpus N      the CPUs this node offers sandboxes (default: every online\n"
        "                         CPU); a create past it is refused 503\n"
        "  --capacity-memory-mb N the memory it offers them (default: all the memory)\n"
        "  --capacity-disk-mb N   the disk it offers them (default: the size of the state\n"
        "                         directory's filesystem, measured at start)\n"
        "  --node-label KEY=VALUE describes this node in GET /v1/node (repeatable; keys and\n"
        "                         values as sandbox labels)\n"
        "  --max-connections N    open connections per listener at most (default 1024); a\n"
        "                         full one closes its oldest idle unauthenticated one\n"
        "  --max-connections-per-client N\n"
        "                         open TCP connections from one address (IPv6: one /64)\n"
        "                         at most (default 128; 0: no limit)\n"
        "  --max-runs-per-sandbox N\n"
        "                         POST .../run under way at once in one sandbox (default 16;\n"
        "                         0: no limit); more are 429 with Retry-After\n"
        "  --max-runs-per-user N  the same across one user's sandboxes (default 64)\n"
        "  --max-processes-per-sandbox N\n"
        "                         processes (POST .../processes) running or starting in one\n"
        "                         sandbox (default 128; 0: no limit); more are 409\n"
        "  --max-processes-per-user N\n"
        "                         the same across one user's sandboxes (default 512)\n"
        "  --forget-after TIME    how long terminated sandboxes stay listed and found by\n"
        "                         id, with their events (default 24h; s, m, h or d)\n"
        "  --client-grace SECS    how long a sandbox bound to its client (sandbox-cli run)\n"
        "                         outlives that client: no request or stream of it for\n"
        "                         this long ends it (default 30)\n"
        "  --read-grace SECS      how long a stopped or failed sandbox started to read its\n"
        "                         files runs on: no other request or stream of it for\n"
        "                         this long stops it again (default 30)\n"
        "  --log-level LEVEL      error, warning, info (default) or debug\n"
        "  --version              print the version and exit\n"
        "  -h, --help             print this help and exit\n";

static int
set_string(char **field, const char *value)
{
	free(*field);
	*field = strdup(value);
	return *field ? 0 : -ENOMEM;
}

/* "A.B.C.D/N": an IPv4 network (no host bits set) of at least 256 /30s (N <= 22), outside
 * 0/8, 127/8 and 224/3. */
static int
parse_subnet(const char *s, uint32_t *ret_net, unsigned *ret_bits)
{
	char addr[INET_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	struct in_addr a;
	uint64_t bits;
	uint32_t net, first;

	if (!slash || (size_t)(slash - s) >= sizeof(addr) || parse_u64(slash + 1, &bits) < 0 ||
	    bits < 8 || bits > 22)
		return -EINVAL;
	memcpy(addr, s, (size_t)(slash - s));
	addr[slash - s] = '\0';
	if (inet_pton(AF_INET, addr, &a) != 1)
		return -EINVAL;
	net = ntohl(a.s_addr);
	first = net >> 24;
	if ((net & ((1u << (32 - bits)) - 1)) != 0 || first == 0 || first == 127 || first >= 224)
		return -EINVAL;
	*ret_net = net;
	*ret_bits = (unsigned)bits;
	return 0;
}

/* Appends to one of the repeatable flags' lists. */
static int
list_add(char **list, size_t *n, const char *flag, const char *value)
{
	if (*n == OPTIONS_MAX_LIST) {
		fprintf(stderr, "sandboxd: at most %d %s\n", OPTIONS_MAX_LIST, flag);
		return -EINVAL;
	}
	list[*n] = strdup(value);
	if (!list[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

static bool
address_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
	}
	return false;
}

bool
host_is_loopback(const char *host)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL, *ai;
	bool all = true;

	if (streq(host, "localhost"))
		return true;
	if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
		return false;
	for (ai = res; ai; ai = ai->ai_next)
		if (!address_is_loopback(ai->ai_addr))
			all = false;
	freeaddrinfo(res);
	return all;
}

/* "HOST:PORT" or "[V6]:PORT" into its parts (caller frees). */
static int
split_host_port(const char *s, char **ret_host, char **ret_port)
{
	_cleanup_free_ char *host = NULL, *port_text = NULL;
	const char *colon;
	uint64_t port;

	if (s[0] == '[') {
		const char *end = strchr(s, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		host = strndup(s + 1, (size_t)(end - s - 1));
		colon = end + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || colon == s)
			return -EINVAL;
		host = strndup(s, (size_t)(colon - s));
	}
	if (!host)
		return -ENOMEM;
	if (parse_u64(colon + 1, &port) < 0 || port == 0 || port > 65535)
		return -EINVAL;
	port_text = strdup(colon + 1);
	if (!port_text)
		return -ENOMEM;
	*ret_host = TAKE_PTR(host);
	*ret_port = TAKE_PTR(port_text);
	return 0;
}

static int
split_listen(struct options *o)
{
	int r = split_host_port(o->listen, &o->listen_host, &o->listen_port);

	if (r < 0)
		return r;
	o->listen_loopback = host_is_loopback(o->listen_host);
	return 0;
}

/* A domain previews' hosts go under: host name labels (lowercased), the last one not all
 * digits (an address has no names under it), short enough for "p-ID-PORT." in front. */
static int
parse_preview_domain(struct options *o, const char *arg)
{
	_cleanup_free_ char *d = strdup(arg);
	size_t n = strlen(arg), label = 0;
	bool digits = true;

	if (!d)
		return -ENOMEM;
	for (size_t i = 0; i <= n; i++) {
		char ch = (char)tolower((unsigned char)d[i]);
		d[i] = ch;
		if (ch == '.' || ch == '\0') {
			if (label == 0 || label > 63 || d[i - 1] == '-' || d[i - label] == '-')
				goto bad;
			if (ch == '\0' && digits)
				goto bad;
			label = 0;
			digits = true;
			continue;
		}
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-'))
			goto bad;
		if (!(ch >= '0' && ch <= '9'))
			digits = false;
		label++;
	}
	if (n > 180)
		goto bad;
	free(o->preview_domain);
	o->preview_domain = TAKE_PTR(d);
	return 0;
bad:
	fprintf(stderr,
	        "sandboxd: --preview-domain '%s' must be a host name (letters, digits, '-' and "
	        "dots, at most 180 characters) under which p-ID-PORT.NAME can be resolved, not an "
	        "address\n",
	        arg);
	return -EINVAL;
}

/* --preview-listen: HOST:PORT, or off; the default when not given. */
static int
check_preview_listen(struct options *o)
{
	int r;

	if (!o->preview_listen) {
		o->preview_listen = strdup(OPTIONS_DEFAULT_PREVIEW_LISTEN);
		if (!o->preview_listen)
			return -ENOMEM;
		o->preview_default = true;
	}
	if (!o->preview_domain && !(o->preview_domain = strdup(OPTIONS_DEFAULT_PREVIEW_DOMAIN)))
		return -ENOMEM;
	if (streq(o->preview_listen, "off")) {
		free(o->preview_listen);
		o->preview_listen = NULL;
		return 0;
	}
	r = split_host_port(o->preview_listen, &o->preview_host, &o->preview_port);
	if (r == -ENOMEM)
		return r;
	if (r < 0) {
		fprintf(stderr, "sandboxd: --preview-listen '%s' must be HOST:PORT (or [V6ADDR]:PORT) "
		                "or off\n",
		        o->preview_listen);
		return -EINVAL;
	}
	return 0;
}

/* The flags: one row each, read by options_parse. A row's kind says how its value is read
 * and checked; `field` is where it goes in struct options; `what` completes the refusal of a
 * wrong value ("sandboxd: --FLAG 'VALUE' WHAT", or "': use WHAT" for a choice). */
enum opt_kind {
	OPT_HELP,
	OPT_VERSION,
	OPT_STRING,     /* char *, as given */
	OPT_ABS_PATH,   /* char *, an absolute path */
	OPT_UINT,       /* unsigned, min to max */
	OPT_ON_OFF,     /* bool */
	OPT_FLAG,       /* bool set by the flag alone (no value) */
	OPT_CHOICE,     /* char * (accel) or an int (log level), one of choices[] */
	OPT_IMAGE,      /* char *, an image reference */
	OPT_IMAGE_LIST, /* appended to allowed_images */
	OPT_CUSTOM,     /* parse() */
};

struct opt_def {
	const char *name;
	enum opt_kind kind;
	size_t field;
	uint64_t min, max;
	const char *what;
	const char *const *choices; /* OPT_CHOICE: NULL-terminated; an int field gets the index */
	bool choice_is_int;
	int (*parse)(struct options *o, const char *arg);
};

static int
parse_socket(struct options *o, const char *arg)
{
	if (!streq(arg, "none") && arg[0] != '/') {
		fprintf(stderr, "sandboxd: --socket '%s' must be an absolute path or 'none'\n",
		        arg);
		return -EINVAL;
	}
	return set_string(&o->socket_path, arg);
}

static int
parse_audit_log(struct options *o, const char *arg)
{
	if (!streq(arg, "none") && (arg[0] != '/' || arg[strlen(arg) - 1] == '/')) {
		fprintf(stderr,
		        "sandboxd: --audit-log '%s' must be an absolute file path or 'none'\n",
		        arg);
		return -EINVAL;
	}
	return set_string(&o->audit_log, arg);
}

static int
parse_allowed_host(struct options *o, const char *arg)
{
	struct in6_addr a6;
	char host[256];
	bool v6;

	if (o->n_allowed_hosts == OPTIONS_MAX_ALLOWED_HOSTS) {
		fprintf(stderr, "sandboxd: at most %d --allowed-host\n", OPTIONS_MAX_ALLOWED_HOSTS);
		return -EINVAL;
	}
	/* a name or an address, without a port: an IPv6 address may come bare or in brackets */
	v6 = inet_pton(AF_INET6, arg, &a6) == 1 || (arg[0] == '[' && arg[strlen(arg) - 1] == ']');
	if (hostport_host(arg, host, sizeof(host)) < 0 || (!v6 && strchr(arg, ':') != NULL)) {
		fprintf(stderr,
		        "sandboxd: --allowed-host '%s' must be a host name or address without a "
		        "port\n",
		        arg);
		return -EINVAL;
	}
	o->allowed_hosts[o->n_allowed_hosts] = strdup(host);
	if (!o->allowed_hosts[o->n_allowed_hosts])
		return -ENOMEM;
	o->n_allowed_hosts++;
	return 0;
}

static int
registry_hostport_valid(const char *arg, const char *flag)
{
	const char *colon = strrchr(arg, ':');
	uint64_t port;

	if (!colon || colon == arg || parse_u64(colon + 1, &port) < 0 || port < 1 || port > 65535 ||
	    strchr(arg, '/')) {
		fprintf(stderr, "sandboxd: %s '%s' must be HOST:PORT\n", flag, arg);
		return -EINVAL;
	}
	return 0;
}

static int
parse_insecure_registry(struct options *o, const char *arg)
{
	if (registry_hostport_valid(arg, "--insecure-registry") < 0)
		return -EINVAL;
	return list_add(o->insecure_registries, &o->n_insecure_registries, "--insecure-registry",
	                arg);
}

/* "N", "Ns", "Nm", "Nh" or "Nd": how long a terminated sandbox is still listed, at most ten
 * years. */
static int
parse_forget_after(struct options *o, const char *arg)
{
	static const struct {
		char suffix;
		uint64_t secs;
	} units[] = { { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 } };
	_cleanup_free_ char *num = strdup(arg);
	size_t n = strlen(arg);
	uint64_t v, unit = 1;

	if (!num)
		return -ENOMEM;
	for (size_t i = 0; n > 1 && i < ARRAY_SIZE(units); i++)
		if (arg[n - 1] == units[i].suffix) {
			unit = units[i].secs;
			num[n - 1] = '\0';
		}
	if (parse_u64(num, &v) < 0 || v > 3650ull * 86400 / unit) {
		fprintf(stderr,
		        "sandboxd: --forget-after '%s' must be a duration such as 24h, 90m, 7d or "
		        "3600 (seconds), at most 3650d\n",
		        arg);
		return -EINVAL;
	}
	o->forget_after_secs = v * unit;
	return 0;
}

static int
parse_local_registry(struct options *o, const char *arg)
{
	if (registry_hostport_valid(arg, "--local-registry") < 0)
		return -EINVAL;
	return list_add(o->local_registries, &o->n_local_registries, "--local-registry", arg);
}

static int
parse_egress_subnet(struct options *o, const char *arg)
{
	if (parse_subnet(arg, &o->egress_subnet, &o->egress_subnet_bits) < 0) {
		fprintf(stderr,
		        "sandboxd: --egress-subnet '%s' must be an IPv4 network A.B.C.D/N with N "
		        "at "
		        "most 22, e.g. 10.200.0.0/16\n",
		        arg);
		return -EINVAL;
	}
	return 0;
}

/* KEY=VALUE, checked as a sandbox's labels are, each key once. */
static int
parse_node_label(struct options *o, const char *arg)
{
	const char *eq = strchr(arg, '=');
	_cleanup_free_ char *key = eq ? strndup(arg, (size_t)(eq - arg)) : NULL;

	if (eq && !key)
		return -ENOMEM;
	if (!key || !label_key_valid(key) || !label_value_valid(eq + 1)) {
		fprintf(stderr,
		        "sandboxd: --node-label '%s' must be KEY=VALUE: the key lowercase letters, "
		        "digits and ._/- (a letter or digit first, 63 at most), the value "
		        "printable "
		        "ASCII (253 at most)\n",
		        arg);
		return -EINVAL;
	}
	for (size_t i = 0; i < o->n_node_labels; i++)
		if (str_has_prefix(o->node_labels[i], key) &&
		    o->node_labels[i][strlen(key)] == '=') {
			fprintf(stderr,
			        "sandboxd: --node-label '%s': the key '%s' is given twice\n", arg,
			        key);
			return -EINVAL;
		}
	return list_add(o->node_labels, &o->n_node_labels, "--node-label", arg);
}

static const char *const accel_choices[] = { "auto", "kvm", "tcg", NULL };
/* in the order of enum log_level */
static const char *const log_level_choices[] = { "error", "warning", "info", "debug", NULL };

#define F(member) .field = offsetof(struct options, member)
#define STRING(flag, member)                                                                       \
	{                                                                                          \
		.name = flag, .kind = OPT_STRING, F(member)                                        \
	}
#define UINT(flag, member, lo, hi, text)                                                           \
	{                                                                                          \
		.name = flag, .kind = OPT_UINT, F(member), .min = lo, .max = hi, .what = text      \
	}
#define CUSTOM(flag, fn)                                                                           \
	{                                                                                          \
		.name = flag, .kind = OPT_CUSTOM, .parse = fn                                      \
	}
static const struct opt_def opt_defs[] = {
	{ .name = "state-dir",
	  .kind = OPT_ABS_PATH,
	  F(state_dir),
	  .what = "must be an absolute path" },
	CUSTOM("socket", parse_socket),
	STRING("listen", listen),
	STRING("token-file", token_file),
	STRING("tls-cert", tls_cert),
	STRING("tls-key", tls_key),
	STRING("client-ca", client_ca),
	CUSTOM("allowed-host", parse_allowed_host),
	STRING("backend", backend),
	{ .name = "accel",
	  .kind = OPT_CHOICE,
	  F(accel),
	  .what = "auto, kvm or tcg",
	  .choices = accel_choices },
	STRING("kernel", kernel),
	STRING("initrd", initrd),
	STRING("agent", agent),
	UINT("boot-timeout", boot_timeout_secs, 1, 3600, "must be 1 to 3600"),
	UINT("stop-timeout", stop_timeout_secs, 0, 3600, "must be 0 to 3600"),
	UINT("reconcile-interval", reconcile_interval_secs, 1, 86400, "must be 1 to 86400"),
	{ .name = "allow-unconfined", .kind = OPT_FLAG, F(allow_unconfined) },
	{ .name = "keep-sandboxes", .kind = OPT_FLAG, F(keep_sandboxes) },
	UINT("max-connections", max_connections, 1, 65536, "must be 1 to 65536"),
	UINT("max-connections-per-client", max_connections_per_client, 0, 65536,
	     "must be 0 (no limit) to 65536"),
	UINT("max-runs-per-sandbox", max_runs_per_sandbox, 0, 1u << 20,
	     "must be 0 (no limit) to 1048576"),
	UINT("max-runs-per-user", max_runs_per_user, 0, 1u << 20,
	     "must be 0 (no limit) to 1048576"),
	UINT("max-processes-per-sandbox", max_processes_per_sandbox, 0, 1u << 20,
	     "must be 0 (no limit) to 1048576"),
	UINT("max-processes-per-user", max_processes_per_user, 0, 1u << 20,
	     "must be 0 (no limit) to 1048576"),
	CUSTOM("forget-after", parse_forget_after),
	UINT("client-grace", client_grace_secs, 1, 86400, "must be 1 to 86400 seconds"),
	UINT("read-grace", read_grace_secs, 1, 86400, "must be 1 to 86400 seconds"),
	STRING("policy", policy_file),
	{ .name = "default-image",
	  .kind = OPT_IMAGE,
	  F(default_image),
	  .what = "is not an image name" },
	{ .name = "allow-image", .kind = OPT_IMAGE_LIST, .what = "is not an image name" },
	CUSTOM("insecure-registry", parse_insecure_registry),
	CUSTOM("local-registry", parse_local_registry),
	{ .name = "user-pull", .kind = OPT_ON_OFF, F(user_pull), .what = "on or off" },
	{ .name = "egress", .kind = OPT_ON_OFF, F(egress), .what = "on or off" },
	CUSTOM("audit-log", parse_audit_log),
	UINT("audit-max-events", audit_max_events, 1000, 1000000000, "must be 1000 to 1000000000"),
	UINT("audit-max-bytes", audit_max_bytes, AUDIT_LOG_MIN_BYTES, AUDIT_LOG_MAX_BYTES,
	     "must be 4096 to 1073741824 bytes"),
	STRING("metrics-listen", metrics_listen),
	STRING("preview-listen", preview_listen),
	CUSTOM("preview-domain", parse_preview_domain),
	UINT("egress-proxy-port", egress_proxy_port, 1, 65535, "must be a port, 1 to 65535"),
	UINT("egress-dns-port", egress_dns_port, 1, 65535, "must be a port, 1 to 65535"),
	CUSTOM("egress-subnet", parse_egress_subnet),
	{ .name = "registration", .kind = OPT_ON_OFF, F(registration), .what = "on or off" },
	UINT("user-max-sandboxes", user_max_sandboxes, 0, 1u << 30, "must be a number (0: no cap)"),
	UINT("user-max-cpus", user_max_cpus, 0, 1u << 30, "must be a number (0: no cap)"),
	UINT("user-max-memory-mb", user_max_memory_mb, 0, 1u << 30, "must be a number (0: no cap)"),
	UINT("capacity-cpus", capacity_cpus, 1, 1u << 20, "must be 1 to 1048576"),
	UINT("capacity-memory-mb", capacity_memory_mb, 1, 1u << 30, "must be 1 to 1073741824"),
	UINT("capacity-disk-mb", capacity_disk_mb, 1, 1u << 31, "must be 1 to 2147483648"),
	CUSTOM("node-label", parse_node_label),
	{ .name = "log-level",
	  .kind = OPT_CHOICE,
	  F(log_level),
	  .what = "error, warning, info or debug",
	  .choices = log_level_choices,
	  .choice_is_int = true },
	{ .name = "version", .kind = OPT_VERSION },
	{ .name = "help", .kind = OPT_HELP }, /* the last row: -h is its short form */
};
#undef CUSTOM
#undef UINT
#undef STRING
#undef F
#define N_OPTS (sizeof(opt_defs) / sizeof(opt_defs[0]))

/* Applies one flag's value. Returns 0, 1 when it was --help or --version (handled), or
 * -errno after printing why. */
static int
opt_apply(const struct opt_def *def, const char *arg, struct options *o)
{
	void *field = (char *)o + def->field;
	uint64_t n;
	size_t i;

	switch (def->kind) {
	case OPT_HELP:
		fputs(usage, stdout);
		return 1;
	case OPT_VERSION:
		printf("sandboxd %s\n", sandboxd_version);
		return 1;
	case OPT_ABS_PATH:
		if (arg[0] != '/')
			break;
		return set_string(field, arg);
	case OPT_STRING:
		return set_string(field, arg);
	case OPT_UINT:
		if (parse_u64(arg, &n) < 0 || n < def->min || n > def->max)
			break;
		*(unsigned *)field = (unsigned)n;
		return 0;
	case OPT_ON_OFF:
		if (!streq(arg, "on") && !streq(arg, "off"))
			break;
		*(bool *)field = streq(arg, "on");
		return 0;
	case OPT_FLAG:
		*(bool *)field = true;
		return 0;
	case OPT_CHOICE:
		for (i = 0; def->choices[i] && !streq(def->choices[i], arg); i++)
			;
		if (!def->choices[i])
			break;
		if (def->choice_is_int)
			*(int *)field = (int)i;
		return def->choice_is_int ? 0 : set_string(field, arg);
	case OPT_IMAGE:
	case OPT_IMAGE_LIST:
		if (!image_ref_valid(arg))
			break;
		if (def->kind == OPT_IMAGE)
			return set_string(field, arg);
		return list_add(o->allowed_images, &o->n_allowed_images, "--allow-image", arg);
	case OPT_CUSTOM:
		return def->parse(o, arg);
	}
	if (def->kind == OPT_ON_OFF || def->kind == OPT_CHOICE)
		fprintf(stderr, "sandboxd: --%s '%s': use %s\n", def->name, arg, def->what);
	else
		fprintf(stderr, "sandboxd: --%s '%s' %s\n", def->name, arg, def->what);
	return -EINVAL;
}

int
options_parse(int argc, char **argv, struct options *o)
{
	struct option long_options[N_OPTS + 1];
	int c;

	_Static_assert(LOG_LEVEL_ERROR == 0 && LOG_LEVEL_WARNING == 1 && LOG_LEVEL_INFO == 2 &&
	                       LOG_LEVEL_DEBUG == 3,
	               "log_level_choices follows enum log_level");
	*o = (struct options){ .max_connections = 1024,
		               .max_connections_per_client = 128,
		               .max_runs_per_sandbox = 16,
		               .max_runs_per_user = 64,
		               .max_processes_per_sandbox = 128,
		               .max_processes_per_user = 512,
		               .forget_after_secs = 24 * 3600,
		               .client_grace_secs = 30,
		               .read_grace_secs = 30,
		               .stop_timeout_secs = 20,
		               .reconcile_interval_secs = 60,
		               .egress = geteuid() == 0,
		               .egress_proxy_port = 3128,
		               .egress_dns_port = 7353,
		               .egress_subnet = 0x0ac80000u, /* 10.200.0.0/16 */
		               .egress_subnet_bits = 16,
		               .user_max_sandboxes = 5,
		               .user_max_cpus = 8,
		               .user_max_memory_mb = 16384,
		               .user_pull = true,
		               .audit_max_events = OPTIONS_DEFAULT_AUDIT_MAX_EVENTS,
		               .audit_max_bytes = AUDIT_LOG_ROTATE_BYTES,
		               .log_level = LOG_LEVEL_INFO };
	for (size_t i = 0; i < N_OPTS; i++) {
		bool no_arg = opt_defs[i].kind == OPT_HELP || opt_defs[i].kind == OPT_VERSION ||
		              opt_defs[i].kind == OPT_FLAG;
		long_options[i] =
		        (struct option){ opt_defs[i].name, no_arg ? no_argument : required_argument,
			                 NULL, 256 + (int)i };
	}
	long_options[N_OPTS] = (struct option){ 0 };
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
		int r;

		if (c == 'h') {
			c = 256 + (int)N_OPTS - 1; /* the last row, --help */
		} else if (c < 256 || c >= 256 + (int)N_OPTS) {
			if (optopt > 0 &&
			    optopt < 256) /* a short one; a long one is named by argv */
				fprintf(stderr,
				        "sandboxd: option '-%c' is unknown or needs a value\n",
				        optopt);
			else
				fprintf(stderr,
				        "sandboxd: option '%s' is unknown or needs a value\n",
				        argv[optind - 1]);
			fputs("try 'sandboxd --help'\n", stderr);
			return -EINVAL;
		}
		r = opt_apply(&opt_defs[c - 256], optarg, o);
		if (r != 0)
			return r;
	}
	if (optind < argc) {
		fprintf(stderr, "sandboxd: unexpected argument '%s'; try 'sandboxd --help'\n",
		        argv[optind]);
		return -EINVAL;
	}
	if (!o->state_dir && !(o->state_dir = paths_default_state_dir())) {
		fprintf(stderr, "sandboxd: cannot tell the home directory; pass --state-dir\n");
		return -EINVAL;
	}
	if (!o->socket_path && !o->listen && !o->token_file) {
		/* the embedded defaults: the socket, and the dashboard on loopback TCP with a
		 * token sandboxd keeps in its state directory */
		o->token_file = strdup_printf("%s/%s", o->state_dir, OPTIONS_DEFAULT_TOKEN_FILE);
		if (!o->token_file || set_string(&o->listen, OPTIONS_DEFAULT_LISTEN) < 0)
			return -ENOMEM;
		o->token_generate = true;
	}
	if (!o->audit_log &&
	    !(o->audit_log = strdup_printf("%s/%s", o->state_dir, OPTIONS_DEFAULT_AUDIT_LOG)))
		return -ENOMEM;
	if (streq(o->audit_log, "none")) {
		free(o->audit_log);
		o->audit_log = NULL;
	}
	if (!o->socket_path && !(o->socket_path = paths_default_socket()))
		return -ENOMEM;
	if (streq(o->socket_path, "none")) {
		free(o->socket_path);
		o->socket_path = NULL;
	}
	if (o->listen && split_listen(o) < 0) {
		fprintf(stderr, "sandboxd: --listen '%s' must be HOST:PORT (or [V6ADDR]:PORT)\n",
		        o->listen);
		return -EINVAL;
	}
	if (!o->socket_path && !o->listen) {
		fprintf(stderr, "sandboxd: --socket none leaves nothing to serve; add --listen\n");
		return -EINVAL;
	}
	if (o->metrics_listen) {
		int r = split_host_port(o->metrics_listen, &o->metrics_host, &o->metrics_port);
		if (r == -ENOMEM)
			return r;
		if (r < 0 || !host_is_loopback(o->metrics_host)) {
			fprintf(stderr,
			        "sandboxd: --metrics-listen '%s' must be a loopback HOST:PORT "
			        "(e.g. "
			        "127.0.0.1:9100): /metrics has no credential\n",
			        o->metrics_listen);
			return -EINVAL;
		}
	}
	if (check_preview_listen(o) < 0)
		return -EINVAL;
	if (o->egress && geteuid() != 0) {
		fprintf(stderr, "sandboxd: --egress on needs root (tap devices and nftables); "
		                "without root sandboxes get no network\n");
		return -EINVAL;
	}
	return 0;
}

/* Reads and checks the token file: owner-only, at least 16 printable characters. */
static int
read_token(const char *path, char **ret, size_t *ret_len)
{
	_cleanup_free_ char *data = NULL;
	struct stat st;
	size_t n;
	int r;

	if (stat(path, &st) < 0) {
		fprintf(stderr, "sandboxd: --token-file '%s': %m\n", path);
		return -EINVAL;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "sandboxd: --token-file '%s' is not a regular file\n", path);
		return -EINVAL;
	}
	if (st.st_mode & 077) {
		fprintf(stderr,
		        "sandboxd: --token-file '%s' is readable by group or others (mode %04o); "
		        "refusing it: run 'chmod 600 %s'\n",
		        path, (unsigned)(st.st_mode & 07777), path);
		return -EINVAL;
	}
	r = read_file_max(path, 4096, &data, &n);
	if (r < 0) {
		fprintf(stderr, "sandboxd: --token-file '%s': %s\n", path,
		        r == -EFBIG ? "larger than 4 KiB" : strerror(-r));
		return -EINVAL;
	}
	while (n > 0 && (data[n - 1] == '\n' || data[n - 1] == '\r' || data[n - 1] == ' ' ||
	                 data[n - 1] == '\t'))
		data[--n] = '\0';
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)data[i] <= 0x20 || (unsigned char)data[i] >= 0x7f) {
			fprintf(stderr,
			        "sandboxd: --token-file '%s': the token must be one line of "
			        "printable "
			        "characters without spaces\n",
			        path);
			return -EINVAL;
		}
	if (n < 16) {
		fprintf(stderr,
		        "sandboxd: --token-file '%s': the token is %zu characters; it must be at "
		        "least "
		        "16 (make one with: head -c 32 /dev/urandom | base64)\n",
		        path, n);
		return -EINVAL;
	}
	*ret_len = n;
	*ret = TAKE_PTR(data);
	return 0;
}

/* The default listener's token: made once (64 hex characters, 0600) in the state directory,
 * kept across restarts so a CLI or script configured with it goes on working. */
static int
generate_token(const struct options *o)
{
	_cleanup_close_ int fd = -1;
	char hex[65];

	if (access(o->token_file, F_OK) == 0)
		return 0;
	if (mkdir_p(o->state_dir, 0700) < 0 || random_hex(hex, 32) < 0) {
		fprintf(stderr, "sandboxd: cannot make the operator token in '%s': %m\n",
		        o->state_dir);
		return -EINVAL;
	}
	hex[64] = '\n';
	fd = open(o->token_file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || write(fd, hex, sizeof(hex)) != (ssize_t)sizeof(hex)) {
		fprintf(stderr, "sandboxd: cannot write the operator token '%s': %m\n",
		        o->token_file);
		if (fd >= 0)
			unlink(o->token_file);
		return -EINVAL;
	}
	return 0;
}

int
options_check(const struct options *o, char **ret_token, size_t *ret_token_len)
{
	bool tls = o->tls_cert || o->tls_key;

	if (o->client_ca && !(o->tls_cert && o->tls_key)) {
		fprintf(stderr, "sandboxd: --client-ca needs TLS: add --tls-cert and --tls-key\n");
		return -EINVAL;
	}
	if (tls && !(o->tls_cert && o->tls_key)) {
		fprintf(stderr, "sandboxd: %s needs %s too\n",
		        o->tls_cert ? "--tls-cert" : "--tls-key",
		        o->tls_cert ? "--tls-key" : "--tls-cert");
		return -EINVAL;
	}
	if (tls && !o->listen) {
		fprintf(stderr, "sandboxd: --tls-cert and --tls-key apply to --listen; add "
		                "--listen HOST:PORT\n");
		return -EINVAL;
	}
	if (o->listen && !o->token_file) {
		if (o->listen_loopback)
			fprintf(stderr,
			        "sandboxd: --listen %s: refusing to serve TCP without --token-file "
			        "(on loopback too: any local user could connect)\n",
			        o->listen);
		else
			fprintf(stderr,
			        "sandboxd: --listen %s is reachable from other machines; refusing "
			        "to "
			        "serve it without --token-file\n",
			        o->listen);
		return -EINVAL;
	}
	if (o->listen && !o->listen_loopback && !tls) {
		fprintf(stderr,
		        "sandboxd: --listen %s is reachable from other machines; refusing to serve "
		        "it without --tls-cert and --tls-key\n",
		        o->listen);
		return -EINVAL;
	}
	*ret_token = NULL;
	*ret_token_len = 0;
	if (o->token_generate && generate_token(o) < 0)
		return -EINVAL;
	if (o->token_file)
		return read_token(o->token_file, ret_token, ret_token_len);
	return 0;
}

void
options_done(struct options *o)
{
	free(o->state_dir);
	free(o->socket_path);
	free(o->listen);
	free(o->listen_host);
	free(o->listen_port);
	free(o->audit_log);
	free(o->metrics_listen);
	free(o->metrics_host);
	free(o->metrics_port);
	free(o->preview_listen);
	free(o->preview_host);
	free(o->preview_port);
	free(o->preview_domain);
	free(o->token_file);
	free(o->tls_cert);
	free(o->tls_key);
	free(o->client_ca);
	for (size_t i = 0; i < o->n_allowed_hosts; i++)
		free(o->allowed_hosts[i]);
	free(o->backend);
	free(o->accel);
	free(o->kernel);
	free(o->initrd);
	free(o->agent);
	for (size_t i = 0; i < o->n_insecure_registries; i++)
		free(o->insecure_registries[i]);
	for (size_t i = 0; i < o->n_local_registries; i++)
		free(o->local_registries[i]);
	for (size_t i = 0; i < o->n_allowed_images; i++)
		free(o->allowed_images[i]);
	for (size_t i = 0; i < o->n_node_labels; i++)
		free(o->node_labels[i]);
	free(o->default_image);
	free(o->policy_file);
	*o = (struct options){ 0 };
}
