/* api-preview.h: previews: the route that hands out a preview's URL, and what the preview
 * listener's server is made with (api-preview.c). */
#pragma once

#include <stdbool.h>

struct sandboxd;
struct server_handler;
struct api_call;

/* POST /v1/sandboxes/{ref}/previews {"port": N}. */
void api_preview_create(struct api_call *call);
/* Whether this server offers previews (capability 'preview'): its listener is on and its
 * backend runs processes (a preview is a tunnel). */
bool api_previews_offered(struct sandboxd *d);
/* What the preview listener's server (server_new) is made with: every request to
 * api-preview.c, none to the API. */
void api_preview_server_handler(struct sandboxd *d, struct server_handler *ret);
