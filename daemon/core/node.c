/* node.c: the node's capacity, labels, cordon and create counts; see node.h. */
#include <sys/statvfs.h>
#include <unistd.h>
#include "node.h"
#include "options.h"
#include "util.h"

const uint64_t node_create_bucket_us[NODE_CREATE_BUCKETS] = {
	5000,    10000,   25000,   50000,    100000,   250000,   500000,
	1000000, 2500000, 5000000, 10000000, 30000000, 60000000, 300000000,
};

int
node_init(struct node *n, const struct options *o)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	struct statvfs fs;

	*n = (struct node){ .labels = json_object() };
	if (!n->labels)
		return -ENOMEM;
	for (size_t i = 0; i < o->n_node_labels; i++) {
		/* checked by options.c: KEY=VALUE, each valid, no key twice */
		const char *kv = o->node_labels[i], *eq = strchr(kv, '=');
		_cleanup_free_ char *key = strndup(kv, (size_t)(eq - kv));
		if (!key || json_object_set_new(n->labels, key, json_string(eq + 1)) < 0) {
			node_done(n);
			return -ENOMEM;
		}
	}
	n->cpus = o->capacity_cpus ?: (cpus > 0 ? (unsigned)cpus : 1);
	n->memory_mb = o->capacity_memory_mb;
	if (!n->memory_mb && pages > 0 && page > 0)
		n->memory_mb = (unsigned)((uint64_t)pages * page >> 20);
	n->disk_mb = o->capacity_disk_mb;
	if (!n->disk_mb) {
		/* the whole filesystem, not what is free now: what sandboxes were given is
		 * counted against it, and what is already written (images, the disks of sandboxes
		 * taken back) would otherwise count twice */
		if (statvfs(o->state_dir, &fs) < 0) {
			int r = -errno;
			node_done(n);
			return r;
		}
		n->disk_mb = (uint64_t)fs.f_blocks * fs.f_frsize >> 20;
	}
	return 0;
}

void
node_done(struct node *n)
{
	json_decref(n->labels);
	n->labels = NULL;
}

void
node_count_create(struct node *n, int status, uint64_t elapsed_us)
{
	if (status >= NODE_STATUS_MIN && status <= NODE_STATUS_MAX)
		n->creates_by_status[status - NODE_STATUS_MIN]++;
	for (size_t i = 0; i < NODE_CREATE_BUCKETS; i++)
		if (elapsed_us <= node_create_bucket_us[i]) {
			n->create_buckets[i]++;
			break;
		}
	n->creates++;
	n->create_us_sum += elapsed_us;
}
