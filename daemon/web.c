/* web.c: see web.h. (Placeholder until the dashboard's assets are built in: serves nothing.) */
#include "web.h"

bool
web_serve(struct sandboxd *d _unused_, struct conn *c _unused_,
          const struct http_request *req _unused_)
{
	return false;
}
