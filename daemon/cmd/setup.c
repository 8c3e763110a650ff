/* setup.c: `sandboxd setup`, the one-time step that downloads Debian's cloud kernel and
 * busybox through apt and builds the guest bundle in the state directory (bundle.c does the
 * work). Run as root on a server; the README's start command runs it before sandboxd. */
#include <getopt.h>
#include "bundle.h"
#include "log.h"
#include "paths.h"
#include "util.h"

static void
usage(FILE *f)
{
	fputs("usage: sandboxd setup [--state-dir DIR] [--agent PATH] [--force]\n"
	      "\n"
	      "Downloads Debian's current cloud kernel (what linux-image-cloud-amd64 depends on)\n"
	      "and busybox-static with apt, and builds what every sandbox boots from:\n"
	      "  DIR/vm/vmlinux-VERSION        the kernel, uncompressed (PVH entry)\n"
	      "  DIR/vm/modules-VERSION/       virtio, overlay (and ext4 when it is a module)\n"
	      "  DIR/vm/initramfs-VERSION.cpio the agent as /init plus the modules\n"
	      "  DIR/images/busybox/rootfs.ext4  the small root disk\n"
	      "  DIR/vm/bundle.json            what was built, read by sandboxd at start\n"
	      "A second run reuses what is there and picks up a newer kernel.\n"
	      "\n"
	      "  --state-dir DIR  sandboxd's state directory (default: /var/lib/sandboxd as root,\n"
	      "                   ~/.local/share/sandboxd otherwise)\n"
	      "  --agent PATH     the guest agent (default: sandbox-guestd beside sandboxd)\n"
	      "  --force          download and build everything again\n",
	      f);
}

int
setup_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "state-dir", required_argument, NULL, 's' },
		{ "agent", required_argument, NULL, 'a' },
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	_cleanup_free_ char *state_default = NULL;
	struct bundle_opts o = { 0 };
	int c;

	log_setup("sandboxd", LOG_LEVEL_INFO);
	optind = 0; /* glibc: start over, whatever parsed argv before */
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o.state_dir = optarg;
			break;
		case 'a':
			o.agent_path = optarg;
			break;
		case 'f':
			o.force = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sandboxd setup: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (isempty(o.state_dir)) {
		o.state_dir = state_default = paths_default_state_dir();
		if (!o.state_dir) {
			fputs("sandboxd setup: cannot tell the default state directory (HOME is "
			      "unknown); pass --state-dir DIR\n",
			      stderr);
			return 2;
		}
	}
	if (o.state_dir[0] != '/') {
		fprintf(stderr, "sandboxd setup: --state-dir '%s' must be an absolute path\n",
		        o.state_dir);
		return 2;
	}
	if (strchr(o.state_dir, ',') || strchr(o.state_dir, '=')) {
		/* QEMU's option parser splits file names on them. */
		fprintf(stderr,
		        "sandboxd setup: --state-dir '%s' contains ',' or '=', which QEMU "
		        "command lines cannot carry; pick another directory\n",
		        o.state_dir);
		return 2;
	}
	return bundle_setup(&o) < 0 ? 1 : 0;
}
