/* api-node.c: GET /v1/node: what this node has, what its sandboxes hold and what is left, for
 * the fleet view and for gateways placing sandboxes. */
#include <unistd.h>
#include "api-internal.h"
#include "images.h"
#include "sandboxd.h"
#include "util.h"

/* The host's CPUs and memory (MiB): the node's capacity. */
static void
host_capacity(unsigned *ret_cpus, unsigned *ret_memory_mb)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

	*ret_cpus = cpus > 0 ? (unsigned)cpus : 1;
	*ret_memory_mb = pages > 0 && page > 0 ? (unsigned)((uint64_t)pages * page >> 20) : 0;
}

void
api_node_get(struct api_call *call)
{
	struct sandboxd *d = call->d;
	struct sandbox_usage all;
	unsigned cpus, memory_mb;
	json_t *images = images_list_json(d), *names = json_array(), *v;
	size_t i;

	/* a user learns only the node's totals, never whose sandboxes hold what */
	host_capacity(&cpus, &memory_mb);
	api_usage(d, NULL, &all);
	if (!images || !names) {
		json_decref(images);
		json_decref(names);
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	json_array_foreach (json_object_get(images, "images"), i, v)
		if (streq(json_string_value(json_object_get(v, "state")) ?: "", "installed"))
			json_array_append(names, json_object_get(v, "image"));
	json_decref(images);
	/* sandboxes may ask for more than the host has (memory is only touched as used); free
	 * never goes below zero */
	api_reply_json(
	        call->c, 200,
	        json_pack("{s:{s:i, s:i}, s:{s:i, s:i}, s:{s:i, s:i, s:i}, s:i, s:i, "
	                  "s:o, s:{}, s:b}",
	                  "capacity", "cpus", (json_int_t)cpus, "memory_mb", (json_int_t)memory_mb,
	                  "free", "cpus", (json_int_t)(all.cpus < cpus ? cpus - all.cpus : 0),
	                  "memory_mb",
	                  (json_int_t)(all.memory_mb < memory_mb ? memory_mb - all.memory_mb : 0),
	                  "allocated", "sandboxes", (json_int_t)all.sandboxes, "cpus",
	                  (json_int_t)all.cpus, "memory_mb", (json_int_t)all.memory_mb, "running",
	                  (json_int_t)all.running, "pooled", 0, "images", names, "labels",
	                  "cordoned", false));
}
