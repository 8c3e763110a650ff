/* egress.c: sandboxd's side of egress (egress.h). Being written: for now egress is never
 * enabled, so sandboxes get no network and the ceiling stays none. */
#include <errno.h>
#include "egress.h"
#include "sandboxd.h"

int
egress_start(struct sandboxd *d, uid_t uid)
{
	(void)d;
	(void)uid;
	return -EOPNOTSUPP;
}

void
egress_stop(struct sandboxd *d)
{
	(void)d;
}

bool
egress_enabled(const struct sandboxd *d)
{
	(void)d;
	return false;
}

int
egress_link_for_slot(const struct sandboxd *d, unsigned slot, struct egress_link *ret)
{
	(void)d;
	(void)slot;
	(void)ret;
	return -EOPNOTSUPP;
}

void
egress_attach(struct sandboxd *d, struct sandbox *sb, const struct egress_link *link)
{
	(void)d;
	(void)sb;
	(void)link;
}

void
egress_detach(struct sandboxd *d, struct sandbox *sb)
{
	(void)d;
	(void)sb;
}

void
egress_update(struct sandboxd *d, struct sandbox *sb)
{
	(void)d;
	(void)sb;
}
