/* api-images.c: GET/POST /v1/images and DELETE /v1/images/{image}. Anyone may list what
 * can be launched; installing and removing are the operator's (and admins'). */
#include "api-internal.h"
#include "api.h"
#include "images.h"
#include "log.h"
#include "request.h"
#include "sandboxd.h"
#include "server.h"
#include "util.h"

static bool
may_manage(struct api_call *call)
{
	if (call->who.operator|| call->who.role == ROLE_ADMIN)
		return true;
	api_reply_err(call->c, ERR_REFUSED,
	              "installing and removing images is for the operator of this sandboxd");
	return false;
}

void
api_image_list(struct api_call *call)
{
	api_reply_json(call->c, 200, images_list_json(call->d));
}

/* An install the client waits for. */
struct install_wait {
	struct image_waiter w;
	struct sandboxd *d;
	struct conn *c;
};

static void
install_wait_closed(struct conn *c _unused_, void *data)
{
	/* the client left: the install carries on without it */
	struct install_wait *iw = data;

	image_waiter_cancel(&iw->w);
	free(iw);
}

static void
install_done(struct image_waiter *w, const struct image *img, int error, const char *why)
{
	struct install_wait *iw = w->data;
	struct err err = {};

	conn_on_close(iw->c, NULL, NULL);
	if (img) {
		api_reply_json(iw->c, 200, image_to_json(iw->d, img));
	} else {
		api_reply_failure(iw->c, images_install_error(error, why, &err), &err);
	}
	free(iw);
}

void
api_image_install(struct api_call *call)
{
	static const char *const fields[] = { "image", NULL };
	char key[32], value[16];
	struct err err = {};
	const char *name;
	bool wait = true;
	size_t pos = 0;
	int r;

	if (!may_manage(call))
		return;
	while ((r = http_query_next(call->req->query, &pos, key, sizeof(key), value,
	                            sizeof(value))) > 0) {
		if (!streq(key, "wait") || (!streq(value, "true") && !streq(value, "false"))) {
			api_reply_err(call->c, ERR_INVALID,
			              "the only query parameter is wait=true|false");
			return;
		}
		wait = streq(value, "true");
	}
	if (r < 0) {
		api_reply_err(call->c, ERR_INVALID, "the query string is malformed");
		return;
	}
	r = request_check_fields(call->body, fields, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	name = json_string_value(json_object_get(call->body, "image"));
	if (!name) {
		api_reply_err(call->c, ERR_INVALID,
		              "'image' must be an image reference such as python:3.13-slim");
		return;
	}
	r = images_check(call->d, name, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	if (wait) {
		struct install_wait *iw = calloc(1, sizeof(*iw));
		if (!iw) {
			api_reply_err(call->c, ERR_INTERNAL, "out of memory");
			return;
		}
		list_init(&iw->w.link);
		iw->w.fn = install_done;
		iw->w.data = iw;
		iw->d = call->d;
		iw->c = call->c;
		r = images_install(call->d, name, &iw->w, &err);
		if (r != 0)
			free(iw);
		else
			conn_on_close(call->c, install_wait_closed, iw);
	} else {
		r = images_install(call->d, name, NULL, &err);
	}
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	if (r > 0)
		api_reply_json(call->c, 200,
		               image_to_json(call->d, images_installed(call->d, name)));
	else if (!wait)
		api_reply_json(call->c, 202, images_get_json(call->d, name));
}

void
api_image_remove(struct api_call *call)
{
	struct err err = {};
	int r;

	if (!may_manage(call))
		return;
	r = images_remove(call->d, call->ref, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	conn_reply(call->c, 204, NULL, NULL, 0, NULL);
}
