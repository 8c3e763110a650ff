/* identity.h: the guest's identity, which sandboxd hands it at every HELLO (PID 1 only): its
 * link (address, route, MAC), its hostname's files, /etc/machine-id, and the volumes it
 * mounts. Applied idempotently, so that a VM restored from someone else's memory (a resume
 * elsewhere, a fork, a template's clone) becomes the sandbox the host says it is, and a
 * HELLO that changes nothing changes nothing. */
#pragma once

#include <stdbool.h>

struct agent;
struct request_hello;

/* At boot, before any HELLO: the link from "sandbox.net=" on the kernel command line (the
 * host's first word, which a HELLO's NET then confirms or changes). */
void identity_net_boot(void);

/* The link as the HELLO's NET and MAC say (when present and different from what it has). */
void identity_net(const struct request_hello *h);

/* With the root set up (fresh_root: by this HELLO): /etc/hostname, /etc/hosts' 127.0.1.1,
 * /etc/resolv.conf, /etc/machine-id when they differ from what the HELLO says, and each
 * volume not mounted yet. Failures are logged; none is fatal. */
void identity_apply(struct agent *a, const struct request_hello *h, bool fresh_root);

/* Before power-off: the writable volumes are remounted read-only (their journals clean). */
void identity_poweroff(void);
