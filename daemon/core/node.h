/* node.h: what this node offers sandboxes and how it stands: its capacity (the --capacity-*
 * flags, else the machine's, measured once at start), its labels (--node-label), the cordon
 * (held in memory: a restart clears it), and the creates answered, by status and latency, for
 * /metrics. It holds the numbers; the API decides what a create may take (api-sandboxes.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct options;

/* The upper bounds of the create latency histogram, in microseconds: from a create answered
 * at once to one that waited minutes for its image. */
#define NODE_CREATE_BUCKETS 14
extern const uint64_t node_create_bucket_us[NODE_CREATE_BUCKETS];

/* The statuses counted one by one: 100 to 599. */
#define NODE_STATUS_MIN 100
#define NODE_STATUS_MAX 599

struct node {
	/* capacity */
	unsigned cpus;
	unsigned memory_mb;
	uint64_t disk_mb;
	json_t *labels; /* object: the --node-label KEY=VALUE pairs */
	bool cordoned;  /* POST /v1/node/cordon: new creates are 503 */
	/* creates answered (POST /v1/sandboxes), since sandboxd started */
	uint64_t creates_by_status[NODE_STATUS_MAX - NODE_STATUS_MIN + 1];
	uint64_t create_buckets[NODE_CREATE_BUCKETS]; /* each: those up to its bound, not below */
	uint64_t creates;
	uint64_t create_us_sum;
};

/* Fills n from the flags, measuring what they leave out: the online CPUs, the physical memory,
 * and the size of the filesystem that holds state_dir (statvfs). -errno (-ENOMEM, or
 * statvfs's) with nothing to free. */
int node_init(struct node *n, const struct options *o);
void node_done(struct node *n);

/* Counts one create answered with status after elapsed_us. */
void node_count_create(struct node *n, int status, uint64_t elapsed_us);
