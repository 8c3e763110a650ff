/* egressnet.h: what the egress tests share: their two network namespaces (netns.sh: NAME-host
 * and NAME-inet), a private directory, sandboxd launched in NAME-host resolving through the
 * test internet's DNS server, internet.py serving in NAME-inet, and the egress test image
 * (mkimage.sh) installed into a running sandboxd. One environment per test program. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>
#include "harness.h"
#include "macro.h"

/* the test internet's DNS server: sandboxd's nameserver in NAME-host */
#define EGRESSNET_UPSTREAM_DNS "203.0.113.53"

struct egressnet {
	const char *src;    /* tests/egress */
	const char *netns;  /* NAME of NAME-host and NAME-inet */
	char dir[256];      /* the test's own files (removed by egressnet_down) */
	char inet_dir[300]; /* internet.py's: certificates, records, logs */
	char resolv[300];   /* sandboxd's /etc/resolv.conf in NAME-host */
	char netns_sh[300]; /* src/netns.sh */
	pid_t inet_pid;     /* internet.py, or 0 */
	bool up;            /* the namespaces exist */
};

extern struct egressnet egressnet;

/* Runs a shell command on this machine; whether it exited 0. */
bool egressnet_sh(const char *fmt, ...) _printf_(1, 2);

/* Makes the private directory, brings the namespaces NAME up (removed at exit too, should the
 * test leave early), writes the resolv.conf naming EGRESSNET_UPSTREAM_DNS and makes every
 * daemon the harness starts from now on start in NAME-host through netns.sh exec-host. 0, or
 * -1 after saying why. */
int egressnet_up(const char *src, const char *netns);

/* The test internet: its certificates from one test CA (internet.py certs) in inet_dir, then
 * internet.py serving in NAME-inet, its output in inet_dir/internet.log; waits for it to
 * listen. 0, or -1 after saying why. */
int egressnet_inet_start(void);

/* The egress test image, built with this run's CA (inet_dir/ca.pem) into sandboxd's local
 * images, installed by the operator over p's socket (timeout_ms bounds the install). 0, or -1
 * after saying why. */
int egressnet_install_image(const struct daemon_proc *p, int timeout_ms);

/* The egress worker of the sandboxd whose pid is daemon: its child whose command line says
 * egress-worker; 0 when there is none (not yet started again, say). */
pid_t egressnet_worker_of(pid_t daemon);

/* Stops internet.py, takes the launcher back, removes the namespaces and (unless
 * $HARNESS_KEEP is set) the private directory. Safe to call twice. */
void egressnet_down(void);
