/* api-node.c: GET /v1/node: what this node offers, what its sandboxes hold and what is left,
 * its labels and its cordon, for the fleet view and for gateways placing sandboxes; and
 * POST /v1/node/cordon. */
#include "api-internal.h"
#include "events.h"
#include "images.h"
#include "log.h"
#include "pools.h"
#include "request.h"
#include "sandboxd.h"
#include "util.h"

static json_int_t
left(uint64_t capacity, uint64_t used)
{
	/* sandboxes taken back after a restart with a smaller capacity may hold more than it:
	 * free never goes below zero */
	return (json_int_t)(used < capacity ? capacity - used : 0);
}

/* The node object: the same for every caller, since it says nothing of whose sandboxes
 * hold what. NULL when out of memory. */
static json_t *
node_json(struct sandboxd *d)
{
	const struct node *n = &d->node;
	struct sandbox_usage all;
	json_t *images = images_list_json(d), *names = json_array(), *pools = pools_json(d), *v;
	size_t i;

	api_usage(d, NULL, &all);
	if (!images || !names || !pools) {
		json_decref(images);
		json_decref(names);
		json_decref(pools);
		return NULL;
	}
	json_array_foreach (json_object_get(images, "images"), i, v)
		if (streq(json_string_value(json_object_get(v, "state")) ?: "", "installed"))
			json_array_append(names, json_object_get(v, "image"));
	json_decref(images);
	return json_pack(
	        "{s:{s:I, s:I, s:I}, s:{s:I, s:I, s:I}, s:{s:I, s:I, s:I, s:I}, s:I, "
	        "s:I, s:o, s:o, s:O, s:b}",
	        "capacity", "cpus", (json_int_t)n->cpus, "memory_mb", (json_int_t)n->memory_mb,
	        "disk_mb", (json_int_t)n->disk_mb, "free", "cpus", left(n->cpus, all.cpus),
	        "memory_mb", left(n->memory_mb, all.memory_mb), "disk_mb",
	        left(n->disk_mb, all.disk_mb), "allocated", "sandboxes", (json_int_t)all.sandboxes,
	        "cpus", (json_int_t)all.cpus, "memory_mb", (json_int_t)all.memory_mb, "disk_mb",
	        (json_int_t)all.disk_mb, "running", (json_int_t)all.running, "pooled",
	        (json_int_t)pools_waiting(d, NULL), "pools", pools, "images", names, "labels",
	        n->labels, "cordoned", n->cordoned);
}

void
api_node_get(struct api_call *call)
{
	json_t *j = node_json(call->d);

	if (!j) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	api_reply_json(call->c, 200, j);
}

void
api_node_cordon(struct api_call *call)
{
	static const char *const fields[] = { "cordoned", NULL };
	struct node *n = &call->d->node;
	const json_t *v = json_object_get(call->body, "cordoned");
	struct err err = {};
	json_t *j;
	bool to;

	if (!call->who.operator&& call->who.role != ROLE_ADMIN) {
		api_reply_err(call->c, ERR_REFUSED,
		              "cordoning the node is for the operator of this sandboxd and admins");
		return;
	}
	if (request_check_fields(call->body, fields, &err) < 0) {
		api_reply_failure(call->c, -EINVAL, &err);
		return;
	}
	if (!json_is_boolean(v)) {
		api_reply_err(call->c, ERR_INVALID,
		              "the body must be {\"cordoned\": true} or {\"cordoned\": false}");
		return;
	}
	to = json_is_true(v);
	if (n->cordoned != to) {
		n->cordoned = to;
		log_info(to ? "node: cordoned by %s: new sandboxes are refused (503) until it is "
		              "uncordoned; those here carry on"
		            : "node: uncordoned by %s: new sandboxes are taken again",
		         call->who.operator? "the operator" : call->who.name);
		events_broadcast_node(call->d, "node.cordon",
		                      json_pack("{s:b, s:s}", "cordoned", to, "by",
		                                call->who.operator? "operator" : call->who.name));
	}
	j = node_json(call->d);
	if (!j) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	api_reply_json(call->c, 200, j);
}
