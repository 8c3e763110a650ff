/* options.c: sandboxd's command line; see options.h. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <sys/stat.h>
#include "auth.h"
#include "options.h"
#include "paths.h"
#include "request.h"
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
        "  --policy FILE          the server policy (YAML: default image, images, defaults,\n"
        "                         limits, network, pools); packaging/policy.example.yaml\n"
        "  --default-image IMAGE  what a create that names no image gets (default\n"
        "                         sandbox-base, built by 'sandboxd image build-base')\n"
        "  --allow-image IMAGE    permit only the images listed (repeatable), written exactly\n"
        "                         as requests name them; without it any image is permitted\n"
        "  --insecure-registry HOST:PORT\n"
        "                         pull from that registry over plain HTTP (repeatable)\n"
        "  --egress on|off        enforce sandboxes' egress (default on as root): a tap per\n"
        "                         sandbox, nftables table inet sandboxd, the egress proxy\n"
        "                         and DNS stub; off: sandboxes get no network (ceiling none)\n"
        "  --egress-proxy-port N  the egress proxy's TCP port on the host (default 3128)\n"
        "  --egress-dns-port N    the DNS stub's UDP port on the host (default 7353)\n"
        "  --egress-subnet CIDR   where sandboxes' /30 links come from (default\n"
        "                         10.200.0.0/16; at most /22)\n"
        "  --metrics-listen HOST:PORT\n"
        "                         serve Prometheus metrics at /metrics there (loopback only:\n"
        "                         it has no credential)\n"
        "  --registration on|off  let people create their own (user) account from the\n"
        "                         dashboard (default off; never an admin)\n"
        "  --user-max-sandboxes N a user's active sandboxes at most (default 5; 0: no cap)\n"
        "  --user-max-cpus N      the cpus of a user's active sandboxes together (default 8)\n"
        "  --user-max-memory-mb N their memory together (default 16384)\n"
        "                         (an admin sets other caps per user: /v1/users)\n"
        "  --max-connections N    open API connections at most (default 1024)\n"
        "  --log-level LEVEL      error, warning, info (default) or debug\n"
        "  --version              print the version and exit\n"
        "  -h, --help             print this help and exit\n";

enum {
	OPT_STATE_DIR = 256,
	OPT_SOCKET,
	OPT_LISTEN,
	OPT_TOKEN_FILE,
	OPT_TLS_CERT,
	OPT_TLS_KEY,
	OPT_CLIENT_CA,
	OPT_ALLOWED_HOST,
	OPT_BACKEND,
	OPT_ACCEL,
	OPT_KERNEL,
	OPT_INITRD,
	OPT_AGENT,
	OPT_BOOT_TIMEOUT,
	OPT_STOP_TIMEOUT,
	OPT_MAX_CONNECTIONS,
	OPT_POLICY,
	OPT_DEFAULT_IMAGE,
	OPT_ALLOW_IMAGE,
	OPT_INSECURE_REGISTRY,
	OPT_EGRESS,
	OPT_METRICS_LISTEN,
	OPT_EGRESS_PROXY_PORT,
	OPT_EGRESS_DNS_PORT,
	OPT_EGRESS_SUBNET,
	OPT_REGISTRATION,
	OPT_USER_MAX_SANDBOXES,
	OPT_USER_MAX_CPUS,
	OPT_USER_MAX_MEMORY_MB,
	OPT_LOG_LEVEL,
	OPT_VERSION,
};

static const struct option long_options[] = {
	{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
	{ "tls-cert", required_argument, NULL, OPT_TLS_CERT },
	{ "tls-key", required_argument, NULL, OPT_TLS_KEY },
	{ "client-ca", required_argument, NULL, OPT_CLIENT_CA },
	{ "allowed-host", required_argument, NULL, OPT_ALLOWED_HOST },
	{ "backend", required_argument, NULL, OPT_BACKEND },
	{ "accel", required_argument, NULL, OPT_ACCEL },
	{ "kernel", required_argument, NULL, OPT_KERNEL },
	{ "initrd", required_argument, NULL, OPT_INITRD },
	{ "agent", required_argument, NULL, OPT_AGENT },
	{ "boot-timeout", required_argument, NULL, OPT_BOOT_TIMEOUT },
	{ "stop-timeout", required_argument, NULL, OPT_STOP_TIMEOUT },
	{ "max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS },
	{ "policy", required_argument, NULL, OPT_POLICY },
	{ "default-image", required_argument, NULL, OPT_DEFAULT_IMAGE },
	{ "allow-image", required_argument, NULL, OPT_ALLOW_IMAGE },
	{ "insecure-registry", required_argument, NULL, OPT_INSECURE_REGISTRY },
	{ "egress", required_argument, NULL, OPT_EGRESS },
	{ "metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN },
	{ "egress-proxy-port", required_argument, NULL, OPT_EGRESS_PROXY_PORT },
	{ "egress-dns-port", required_argument, NULL, OPT_EGRESS_DNS_PORT },
	{ "egress-subnet", required_argument, NULL, OPT_EGRESS_SUBNET },
	{ "registration", required_argument, NULL, OPT_REGISTRATION },
	{ "user-max-sandboxes", required_argument, NULL, OPT_USER_MAX_SANDBOXES },
	{ "user-max-cpus", required_argument, NULL, OPT_USER_MAX_CPUS },
	{ "user-max-memory-mb", required_argument, NULL, OPT_USER_MAX_MEMORY_MB },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

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

int
options_parse(int argc, char **argv, struct options *o)
{
	int c;

	*o = (struct options){ .max_connections = 1024,
		               .stop_timeout_secs = 20,
		               .egress = geteuid() == 0,
		               .egress_proxy_port = 3128,
		               .egress_dns_port = 7353,
		               .egress_subnet = 0x0ac80000u, /* 10.200.0.0/16 */
		               .egress_subnet_bits = 16,
		               .user_max_sandboxes = 5,
		               .user_max_cpus = 8,
		               .user_max_memory_mb = 16384,
		               .log_level = LOG_LEVEL_INFO };
	bool socket_given = false;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
		uint64_t n;
		int r = 0;

		switch (c) {
		case 'h':
			fputs(usage, stdout);
			return 1;
		case OPT_VERSION:
			printf("sandboxd %s\n", sandboxd_version);
			return 1;
		case OPT_STATE_DIR:
			if (optarg[0] != '/') {
				fprintf(stderr,
				        "sandboxd: --state-dir '%s' must be an absolute path\n",
				        optarg);
				return -EINVAL;
			}
			r = set_string(&o->state_dir, optarg);
			break;
		case OPT_SOCKET:
			if (!streq(optarg, "none") && optarg[0] != '/') {
				fprintf(stderr,
				        "sandboxd: --socket '%s' must be an absolute path or "
				        "'none'\n",
				        optarg);
				return -EINVAL;
			}
			r = set_string(&o->socket_path, optarg);
			socket_given = true;
			break;
		case OPT_LISTEN:
			r = set_string(&o->listen, optarg);
			break;
		case OPT_TOKEN_FILE:
			r = set_string(&o->token_file, optarg);
			break;
		case OPT_TLS_CERT:
			r = set_string(&o->tls_cert, optarg);
			break;
		case OPT_TLS_KEY:
			r = set_string(&o->tls_key, optarg);
			break;
		case OPT_CLIENT_CA:
			r = set_string(&o->client_ca, optarg);
			break;
		case OPT_ALLOWED_HOST: {
			char host[256];
			if (o->n_allowed_hosts == OPTIONS_MAX_ALLOWED_HOSTS) {
				fprintf(stderr, "sandboxd: at most %d --allowed-host\n",
				        OPTIONS_MAX_ALLOWED_HOSTS);
				return -EINVAL;
			}
			struct in6_addr a6;
			/* a name or an address, without a port: an IPv6 address may come bare or
			 * in brackets */
			bool v6 = inet_pton(AF_INET6, optarg, &a6) == 1 ||
			          (optarg[0] == '[' && optarg[strlen(optarg) - 1] == ']');
			if (auth_host_part(optarg, host, sizeof(host)) < 0 ||
			    (!v6 && strchr(optarg, ':') != NULL)) {
				fprintf(stderr,
				        "sandboxd: --allowed-host '%s' must be a host name or "
				        "address "
				        "without a port\n",
				        optarg);
				return -EINVAL;
			}
			o->allowed_hosts[o->n_allowed_hosts] = strdup(host);
			if (!o->allowed_hosts[o->n_allowed_hosts])
				return -ENOMEM;
			o->n_allowed_hosts++;
			break;
		}
		case OPT_BACKEND:
			r = set_string(&o->backend, optarg);
			break;
		case OPT_ACCEL:
			if (!streq(optarg, "auto") && !streq(optarg, "kvm") &&
			    !streq(optarg, "tcg")) {
				fprintf(stderr, "sandboxd: --accel '%s': use auto, kvm or tcg\n",
				        optarg);
				return -EINVAL;
			}
			r = set_string(&o->accel, optarg);
			break;
		case OPT_KERNEL:
			r = set_string(&o->kernel, optarg);
			break;
		case OPT_INITRD:
			r = set_string(&o->initrd, optarg);
			break;
		case OPT_AGENT:
			r = set_string(&o->agent, optarg);
			break;
		case OPT_BOOT_TIMEOUT:
			if (parse_u64(optarg, &n) < 0 || n < 1 || n > 3600) {
				fprintf(stderr, "sandboxd: --boot-timeout '%s' must be 1 to 3600\n",
				        optarg);
				return -EINVAL;
			}
			o->boot_timeout_secs = (unsigned)n;
			break;
		case OPT_STOP_TIMEOUT:
			if (parse_u64(optarg, &n) < 0 || n > 3600) {
				fprintf(stderr, "sandboxd: --stop-timeout '%s' must be 0 to 3600\n",
				        optarg);
				return -EINVAL;
			}
			o->stop_timeout_secs = (unsigned)n;
			break;
		case OPT_MAX_CONNECTIONS:
			if (parse_u64(optarg, &n) < 0 || n < 1 || n > 65536) {
				fprintf(stderr,
				        "sandboxd: --max-connections '%s' must be 1 to 65536\n",
				        optarg);
				return -EINVAL;
			}
			o->max_connections = (unsigned)n;
			break;
		case OPT_POLICY:
			r = set_string(&o->policy_file, optarg);
			break;
		case OPT_DEFAULT_IMAGE:
			if (!image_ref_valid(optarg)) {
				fprintf(stderr,
				        "sandboxd: --default-image '%s' is not an image name\n",
				        optarg);
				return -EINVAL;
			}
			r = set_string(&o->default_image, optarg);
			break;
		case OPT_ALLOW_IMAGE:
			if (!image_ref_valid(optarg)) {
				fprintf(stderr,
				        "sandboxd: --allow-image '%s' is not an image name\n",
				        optarg);
				return -EINVAL;
			}
			r = list_add(o->allowed_images, &o->n_allowed_images, "--allow-image",
			             optarg);
			break;
		case OPT_INSECURE_REGISTRY: {
			const char *colon = strrchr(optarg, ':');
			uint64_t port;
			if (!colon || colon == optarg || parse_u64(colon + 1, &port) < 0 ||
			    port < 1 || port > 65535 || strchr(optarg, '/')) {
				fprintf(stderr,
				        "sandboxd: --insecure-registry '%s' must be HOST:PORT\n",
				        optarg);
				return -EINVAL;
			}
			r = list_add(o->insecure_registries, &o->n_insecure_registries,
			             "--insecure-registry", optarg);
			break;
		}
		case OPT_EGRESS:
			if (!streq(optarg, "on") && !streq(optarg, "off")) {
				fprintf(stderr, "sandboxd: --egress '%s': use on or off\n", optarg);
				return -EINVAL;
			}
			o->egress = streq(optarg, "on");
			break;
		case OPT_METRICS_LISTEN:
			r = set_string(&o->metrics_listen, optarg);
			break;
		case OPT_EGRESS_PROXY_PORT:
		case OPT_EGRESS_DNS_PORT:
			if (parse_u64(optarg, &n) < 0 || n < 1 || n > 65535) {
				fprintf(stderr, "sandboxd: --%s '%s' must be a port, 1 to 65535\n",
				        c == OPT_EGRESS_DNS_PORT ? "egress-dns-port"
				                                 : "egress-proxy-port",
				        optarg);
				return -EINVAL;
			}
			*(c == OPT_EGRESS_DNS_PORT ? &o->egress_dns_port : &o->egress_proxy_port) =
			        (unsigned)n;
			break;
		case OPT_EGRESS_SUBNET:
			if (parse_subnet(optarg, &o->egress_subnet, &o->egress_subnet_bits) < 0) {
				fprintf(stderr,
				        "sandboxd: --egress-subnet '%s' must be an IPv4 network "
				        "A.B.C.D/N with N at most 22, e.g. 10.200.0.0/16\n",
				        optarg);
				return -EINVAL;
			}
			break;
		case OPT_REGISTRATION:
			if (!streq(optarg, "on") && !streq(optarg, "off")) {
				fprintf(stderr, "sandboxd: --registration '%s': use on or off\n",
				        optarg);
				return -EINVAL;
			}
			o->registration = streq(optarg, "on");
			break;
		case OPT_USER_MAX_SANDBOXES:
		case OPT_USER_MAX_CPUS:
		case OPT_USER_MAX_MEMORY_MB: {
			unsigned *field = c == OPT_USER_MAX_SANDBOXES ? &o->user_max_sandboxes
			                  : c == OPT_USER_MAX_CPUS    ? &o->user_max_cpus
			                                              : &o->user_max_memory_mb;
			const char *flag = c == OPT_USER_MAX_SANDBOXES ? "--user-max-sandboxes"
			                   : c == OPT_USER_MAX_CPUS    ? "--user-max-cpus"
			                                               : "--user-max-memory-mb";
			if (parse_u64(optarg, &n) < 0 || n > 1u << 30) {
				fprintf(stderr, "sandboxd: %s '%s' must be a number (0: no cap)\n",
				        flag, optarg);
				return -EINVAL;
			}
			*field = (unsigned)n;
			break;
		}
		case OPT_LOG_LEVEL:
			if (streq(optarg, "error"))
				o->log_level = LOG_LEVEL_ERROR;
			else if (streq(optarg, "warning"))
				o->log_level = LOG_LEVEL_WARNING;
			else if (streq(optarg, "info"))
				o->log_level = LOG_LEVEL_INFO;
			else if (streq(optarg, "debug"))
				o->log_level = LOG_LEVEL_DEBUG;
			else {
				fprintf(stderr,
				        "sandboxd: --log-level '%s': use error, warning, info or "
				        "debug\n",
				        optarg);
				return -EINVAL;
			}
			break;
		case '?':
		default:
			if (optopt)
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
		if (r < 0)
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
	if (!socket_given && !o->listen && !o->token_file) {
		/* the embedded defaults: the socket, and the dashboard on loopback TCP with a
		 * token sandboxd keeps in its state directory */
		o->token_file = strdup_printf("%s/%s", o->state_dir, OPTIONS_DEFAULT_TOKEN_FILE);
		if (!o->token_file || set_string(&o->listen, OPTIONS_DEFAULT_LISTEN) < 0)
			return -ENOMEM;
		o->token_generate = true;
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
	free(o->metrics_listen);
	free(o->metrics_host);
	free(o->metrics_port);
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
	for (size_t i = 0; i < o->n_allowed_images; i++)
		free(o->allowed_images[i]);
	free(o->default_image);
	free(o->policy_file);
	*o = (struct options){ 0 };
}
