/* test-node.c: the node's capacity (the flags, else the machine's), its labels from the
 * command line (checked as sandbox labels are), and the create counts /metrics shows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "node.h"
#include "options.h"
#include "util.h"

/* options_parse over the words given, after --state-dir and --socket. */
static int
parse(struct options *o, const char *dir, const char *const *words)
{
	char *argv[32] = { "sandboxd", "--state-dir", (char *)dir,    "--socket",    "none",
		           "--listen", "127.0.0.1:1", "--token-file", "/nonexistent" };
	int argc = 9;

	for (size_t i = 0; words && words[i]; i++)
		argv[argc++] = (char *)words[i];
	return options_parse(argc, argv, o);
}

static void
test_capacity_defaults_to_the_machine(void **state)
{
	char dir[] = "/tmp/test-node-XXXXXX";
	struct options o;
	struct node n;
	struct statvfs fs;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) >> 20;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(statvfs(dir, &fs), 0);
	assert_int_equal(parse(&o, dir, NULL), 0);
	assert_int_equal(node_init(&n, &o), 0);
	assert_int_equal(n.cpus, (unsigned)cpus);
	assert_int_equal(n.memory_mb, (unsigned)mem);
	/* the whole filesystem, not what is free on it */
	assert_int_equal(n.disk_mb, (uint64_t)fs.f_blocks * fs.f_frsize >> 20);
	assert_false(n.cordoned);
	assert_int_equal(json_object_size(n.labels), 0);
	node_done(&n);
	options_done(&o);

	{
		const char *words[] = { "--capacity-cpus",
			                "3",
			                "--capacity-memory-mb",
			                "2048",
			                "--capacity-disk-mb",
			                "10000",
			                NULL };
		assert_int_equal(parse(&o, dir, words), 0);
	}
	assert_int_equal(node_init(&n, &o), 0);
	assert_int_equal(n.cpus, 3);
	assert_int_equal(n.memory_mb, 2048);
	assert_int_equal(n.disk_mb, 10000);
	node_done(&n);
	options_done(&o);

	/* 0 is no capacity at all: refused, as are words */
	{
		const char *words[] = { "--capacity-cpus", "0", NULL };
		assert_int_equal(parse(&o, dir, words), -EINVAL);
		options_done(&o);
	}
	{
		const char *words[] = { "--capacity-memory-mb", "lots", NULL };
		assert_int_equal(parse(&o, dir, words), -EINVAL);
		options_done(&o);
	}
	rmdir(dir);
}

static void
test_node_labels_are_checked(void **state)
{
	static const char *const bad[] = {
		"region",         /* no = */
		"=west",          /* no key */
		"Region=west",    /* uppercase */
		"-region=west",   /* not a letter or digit first */
		"re gion=west",   /* a space in the key */
		"region=we\x01t", /* a control character in the value */
	};
	struct options o;
	struct node n;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		const char *words[] = { "--node-label", bad[i], NULL };
		assert_int_equal(parse(&o, "/tmp", words), -EINVAL);
		options_done(&o);
	}
	{
		const char *words[] = { "--node-label", "region=west", "--node-label",
			                "region=east", NULL };
		assert_int_equal(parse(&o, "/tmp", words), -EINVAL);
		options_done(&o);
	}
	{
		const char *words[] = { "--node-label",
			                "region=west",
			                "--node-label",
			                "disk.kind/x=nvme=fast",
			                "--node-label",
			                "empty=",
			                NULL };
		assert_int_equal(parse(&o, "/tmp", words), 0);
	}
	assert_int_equal(node_init(&n, &o), 0);
	assert_int_equal(json_object_size(n.labels), 3);
	assert_string_equal(json_string_value(json_object_get(n.labels, "region")), "west");
	/* the first = splits: the value may hold more */
	assert_string_equal(json_string_value(json_object_get(n.labels, "disk.kind/x")),
	                    "nvme=fast");
	assert_string_equal(json_string_value(json_object_get(n.labels, "empty")), "");
	node_done(&n);
	options_done(&o);
}

static void
test_creates_are_counted_by_status_and_latency(void **state)
{
	struct node n = { 0 };

	node_count_create(&n, 201, 3000);      /* 3 ms: the first bucket */
	node_count_create(&n, 201, 5000);      /* on a bound: that bucket */
	node_count_create(&n, 503, 5001);      /* just past it: the next */
	node_count_create(&n, 201, 400000000); /* 400 s: past every bound */
	node_count_create(&n, 42, 1);          /* no such status: counted in the total only */
	assert_int_equal(n.creates, 5);
	assert_int_equal(n.creates_by_status[201 - NODE_STATUS_MIN], 3);
	assert_int_equal(n.creates_by_status[503 - NODE_STATUS_MIN], 1);
	assert_int_equal(n.create_buckets[0], 3);
	assert_int_equal(n.create_buckets[1], 1);
	for (size_t i = 2; i < NODE_CREATE_BUCKETS; i++)
		assert_int_equal(n.create_buckets[i], 0);
	assert_int_equal(n.create_us_sum, 3000 + 5000 + 5001 + 400000000 + 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_capacity_defaults_to_the_machine),
		cmocka_unit_test(test_node_labels_are_checked),
		cmocka_unit_test(test_creates_are_counted_by_status_and_latency),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
