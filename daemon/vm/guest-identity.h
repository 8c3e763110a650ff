/* guest-identity.h: the identity a VM's guest is handed at every session start (the HELLO's
 * NET, MAC, MACHINE_ID and VOLUME, lib/agentproto.h), derived from its launch the way its
 * command line derives the devices (qemu-argv.c): a restored VM's memory holds another's
 * identity (its source's, a template's), and the handshake puts it right. */
#pragma once

#include <stddef.h>
#include "agent.h"
#include "backend.h"

/* The strings an agent_hello's identity points at. */
struct guest_identity {
	char net[48]; /* "GUEST/30,HOST", or "" without a network */
	char **volumes;
	size_t nvolumes;
};

/* Fills h's net, MAC (52:54 and the guest address, as the NIC's mac=), machine_id and
 * volumes ("/dev/vdc\tMOUNT\tro|rw", the drives after the image's and the layer's, in launch
 * order) from l; id holds what they point at until guest_identity_done(). -E2BIG past the
 * drive letters, -ENOMEM. */
int guest_identity_fill(struct guest_identity *id, const struct vm_launch *l,
                        struct agent_hello *h);
void guest_identity_done(struct guest_identity *id);
