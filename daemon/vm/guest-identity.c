/* guest-identity.c: see guest-identity.h. */
#include <arpa/inet.h>
#include <stdio.h>
#include "guest-identity.h"
#include "strv.h"
#include "util.h"

/* vda is the image, vdb the writable layer: volumes are vdc..vdz */
#define FIRST_VOLUME 'c'
#define MAX_VOLUMES ('z' - FIRST_VOLUME + 1)

int
guest_identity_fill(struct guest_identity *id, const struct vm_launch *l, struct agent_hello *h)
{
	*id = (struct guest_identity){ 0 };
	if (l->nvolumes > MAX_VOLUMES)
		return -E2BIG;
	if (l->has_net) {
		char g[INET_ADDRSTRLEN], host[INET_ADDRSTRLEN];
		uint32_t a = ntohl(l->net.guest_addr);

		inet_ntop(AF_INET, &l->net.guest_addr, g, sizeof(g));
		inet_ntop(AF_INET, &l->net.host_addr, host, sizeof(host));
		snprintf(id->net, sizeof(id->net), "%s/30,%s", g, host);
		h->has_mac = true;
		h->mac[0] = 0x52;
		h->mac[1] = 0x54;
		h->mac[2] = (uint8_t)(a >> 24);
		h->mac[3] = (uint8_t)(a >> 16);
		h->mac[4] = (uint8_t)(a >> 8);
		h->mac[5] = (uint8_t)a;
	}
	h->net = id->net;
	h->machine_id = l->machine_id;
	for (size_t i = 0; i < l->nvolumes; i++) {
		const struct vm_volume *v = &l->volumes[i];
		int r = strv_push(&id->volumes, &id->nvolumes,
		                  strdup_printf("/dev/vd%c\t%s\t%s", (char)(FIRST_VOLUME + i),
		                                v->mount, v->read_only ? "ro" : "rw"));
		if (r < 0) {
			guest_identity_done(id);
			return r;
		}
	}
	h->volumes = id->volumes;
	return 0;
}

void
guest_identity_done(struct guest_identity *id)
{
	id->volumes = strv_free(id->volumes);
	id->nvolumes = 0;
}
