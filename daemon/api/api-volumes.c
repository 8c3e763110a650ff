/* api-volumes.c: GET/POST /v1/volumes and DELETE /v1/volumes/{name}: a caller's volumes (an
 * admin lists everyone's); the volumes themselves are core/volumes.c's. Only reached where
 * the backend attaches volumes (api.c answers 501 otherwise). */
#include "api-internal.h"
#include "node.h"
#include "request.h"
#include "sandboxd.h"
#include "server.h"
#include "util.h"
#include "volumes.h"

void
api_volume_list(struct api_call *call)
{
	json_t *list = volumes_list(call->d, api_owner_filter(call));

	if (!list) {
		api_reply_err(call->c, ERR_INTERNAL, "the volumes could not be read");
		return;
	}
	api_reply_json(call->c, 200, json_pack("{s:o}", "volumes", list));
}

void
api_volume_create(struct api_call *call)
{
	static const char *const fields[] = { "name", "size_mb", NULL };
	const struct node *n = &call->d->node;
	struct sandbox_usage all;
	struct err err = {};
	json_t *name, *size, *j = NULL;
	uint64_t free_disk;
	int r;

	r = request_check_fields(call->body, fields, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	name = json_object_get(call->body, "name");
	size = json_object_get(call->body, "size_mb");
	if (!json_is_string(name)) {
		api_reply_err(call->c, ERR_INVALID, "'name' must be a string (the volume's name)");
		return;
	}
	if (!json_is_integer(size) || json_integer_value(size) < VOLUME_MIN_MB ||
	    json_integer_value(size) > VOLUME_MAX_MB) {
		api_reply_err(call->c, ERR_INVALID, "'size_mb' must be an integer from %d to %d",
		              VOLUME_MIN_MB, VOLUME_MAX_MB);
		return;
	}
	/* a volume takes its whole size from the node's disk, like a sandbox's disk_mb */
	api_usage(call->d, NULL, &all);
	free_disk = all.disk_mb < n->disk_mb ? n->disk_mb - all.disk_mb : 0;
	if ((uint64_t)json_integer_value(size) > free_disk) {
		api_reply_err(
		        call->c, ERR_UNAVAILABLE,
		        "this node has no room: the volume asks for %lld MiB of disk and %llu "
		        "MiB of the node's %llu MiB are free (--capacity-disk-mb); delete a "
		        "volume or a sandbox, or ask for less",
		        (long long)json_integer_value(size), (unsigned long long)free_disk,
		        (unsigned long long)n->disk_mb);
		return;
	}
	r = volumes_create(call->d, call->who.name, json_string_value(name),
	                   (uint64_t)json_integer_value(size), &j, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	api_reply_json(call->c, 201, j);
}

void
api_volume_delete(struct api_call *call)
{
	struct err err = {};
	int r;

	r = volumes_delete(call->d, call->who.name, call->ref, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	conn_reply(call->c, 204, NULL, NULL, 0, NULL);
}
