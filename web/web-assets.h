/* web-assets.h: the dashboard's files as web/embed.c writes them into a table at build time
 * (web_assets.c in the build tree), served by daemon/api/web.c. */
#pragma once

#include <stddef.h>

struct web_asset {
	const char *name; /* the path it is served under, without the leading '/' */
	const char *type; /* Content-Type */
	const char *data;
	size_t len;
	const char *etag; /* "\"<16 hex>\"": a hash of data */
};

extern const struct web_asset web_assets[];
extern const unsigned web_assets_count;
