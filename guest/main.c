/* main.c: sandbox-guestd, the guest agent. As PID 1 in a VM it boots the guest and serves
 * sandboxd over the virtio-serial port, ignoring argv (unknown kernel cmdline words land
 * there) and never exiting. Otherwise it runs in test mode on a unix socket (--port). */
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include "agent.h"
#include "boot.h"
#include "log.h"
#include "util.h"

struct options {
	const char *port;
	const char *home;
	bool has_uid, has_gid;
	uint64_t uid, gid;
};

static void
usage(FILE *f)
{
	fprintf(f, "usage: sandbox-guestd --port PATH [--uid N --gid N] [--home DIR]\n"
	           "\n"
	           "The guest agent of sandboxd. As PID 1 in a VM it takes no arguments; run\n"
	           "otherwise, it listens on the unix socket PATH (test mode) and runs processes\n"
	           "as the current user, or as --uid/--gid when started as root.\n");
}

static int
parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "uid", required_argument, NULL, 'u' },
		{ "gid", required_argument, NULL, 'g' },
		{ "home", required_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			o->port = optarg;
			break;
		case 'u':
			o->has_uid = true;
			if (parse_u64(optarg, &o->uid) < 0 || o->uid >= UINT32_MAX)
				return -EINVAL;
			break;
		case 'g':
			o->has_gid = true;
			if (parse_u64(optarg, &o->gid) < 0 || o->gid >= UINT32_MAX)
				return -EINVAL;
			break;
		case 'H':
			o->home = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("sandbox-guestd %s\n", GUESTD_VERSION);
			exit(0);
		default:
			return -EINVAL;
		}
	}
	if (optind < argc || !o->port)
		return -EINVAL;
	return 0;
}

/* Children get fds 0-2 by dup2(); none of the agent's own fds may be one of them. */
static void
ensure_std_fds(void)
{
	for (int i = 0; i < 3; i++)
		if (fcntl(i, F_GETFD) < 0) {
			int fd = open("/dev/null", O_RDWR);
			if (fd >= 0 && fd != i) {
				(void)dup2(fd, i);
				close(fd);
			}
		}
}

static int
test_mode_setup(struct agent *a, const struct options *o)
{
	const char *home = o->home ? o->home : getenv("HOME");

	a->uid = getuid();
	a->gid = getgid();
	if (o->has_uid || o->has_gid) {
		if (geteuid() != 0) {
			log_warning("--uid/--gid ignored: not running as root");
		} else {
			a->switch_ids = true;
			a->uid = o->has_uid ? (uid_t)o->uid : a->uid;
			a->gid = o->has_gid ? (gid_t)o->gid : a->gid;
		}
	}
	a->home = strdup(!isempty(home) ? home : "/tmp");
	if (!a->home)
		return -ENOMEM;
	/* tests stand in for an agent from before FEATURES with SANDBOX_GUESTD_FEATURES=0 */
	if (getenv("SANDBOX_GUESTD_FEATURES"))
		a->features = (uint32_t)strtoul(getenv("SANDBOX_GUESTD_FEATURES"), NULL, 0);
	/* orphans come back to the agent, as to PID 1 in a VM */
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1);
	return 0;
}

static int
pid1_setup(struct agent *a)
{
	a->switch_ids = true;
	a->uid = 1001;
	a->gid = 1001;
	a->home = strdup("/sandbox/home");
	return a->home ? 0 : -ENOMEM;
}

int
main(int argc, char **argv)
{
	_cleanup_(loop_freep) struct loop *loop = NULL;
	_cleanup_free_ char *dev = NULL;
	struct options o = { 0 };
	bool pid1 = getpid() == 1;
	struct agent a;
	sigset_t mask;
	int r;

	log_setup("sandbox-guestd", LOG_LEVEL_INFO);
	signal(SIGPIPE, SIG_IGN);
	if (pid1) {
		boot_early();
	} else if (parse_args(argc, argv, &o) < 0) {
		usage(stderr);
		return 2;
	}
	ensure_std_fds();
	r = loop_new(&loop);
	if (r < 0) {
		log_error("cannot create the event loop: %s", strerror(-r));
		if (pid1)
			boot_poweroff(NULL);
		return 1;
	}
	agent_init(&a, loop, pid1);
	r = pid1 ? pid1_setup(&a) : test_mode_setup(&a, &o);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	if (!pid1) {
		sigaddset(&mask, SIGTERM);
		sigaddset(&mask, SIGINT);
		sigaddset(&mask, SIGHUP);
	}
	if (r >= 0)
		r = loop_signals_init(loop, &a.signals, &mask, agent_on_signal, &a);
	if (r >= 0 && pid1)
		r = boot_find_port(&dev);
	if (r >= 0)
		r = agent_open_port(&a, pid1 ? dev : o.port);
	if (r < 0) {
		log_error("cannot start: %s", strerror(-r));
	} else {
		log_info("%s %s on '%s'", pid1 ? "serving" : "listening (test mode)",
		         GUESTD_VERSION, pid1 ? dev : o.port);
		r = loop_run(loop);
	}
	if (pid1) {
		/* PID 1 must not exit (the kernel would panic): end the VM instead */
		log_error("the agent stopped (%s): powering off", strerror(-r));
		boot_poweroff(&a);
	}
	loop_signals_done(&a.signals);
	agent_done(&a);
	return r < 0 ? 1 : 0;
}
