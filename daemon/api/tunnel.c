/* tunnel.c: see tunnel.h. (Being built: this first version only carries the interface.) */
#include <errno.h>
#include "tunnel.h"

int
tunnel_start(struct sandboxd *d, struct conn *c, struct sandbox *sb, const struct tunnel_opts *o)
{
	(void)d;
	(void)c;
	(void)sb;
	(void)o;
	return -ENOTCONN;
}
