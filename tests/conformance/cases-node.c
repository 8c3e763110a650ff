/* cases-node.c: conformance cases for the node (docs/api.md, "Node"): what GET /v1/node
 * reports and how it follows a create, and POST /v1/node/cordon (capability cordon): creates
 * are 503 unavailable while running sandboxes carry on, and uncordoning restores them. */
#include "cases.h"
#include "conf.h"
#include "util.h"

/* An integer member of obj.group (group NULL: obj itself) that is at least 0. */
static long long
count(const json_t *obj, const char *group, const char *key)
{
	const json_t *g = group ? json_object_get(obj, group) : obj;
	const json_t *v = json_object_get(g, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		fail_msg("GET /v1/node: %s%s%s is missing or not a whole number", group ?: "",
		         group ? "." : "", key);
	return json_integer_value(v);
}

static json_t *
get_node(void)
{
	json_t *j;
	long status = conf_request("GET", "/v1/node", NULL, &j);

	if (status != 200 || !json_is_object(j))
		fail_msg("GET /v1/node: expected 200 with an object, got %ld", status);
	return j;
}

/* The node's capacity and what is free, for each resource, free never above capacity; its
 * labels, pools and cordon; and a new sandbox's cpus come off what is free. */
void
case_node_reports_capacity_and_free(void **state)
{
	static const char *const resources[] = { "cpus", "memory_mb", "disk_mb" };
	json_t *before = get_node(), *after, *sb;
	long long want;

	for (size_t i = 0; i < ARRAY_SIZE(resources); i++) {
		long long cap = count(before, "capacity", resources[i]);
		if (cap < 1)
			fail_msg("GET /v1/node: capacity.%s is 0", resources[i]);
		if (count(before, "free", resources[i]) > cap)
			fail_msg("GET /v1/node: free.%s is above capacity.%s", resources[i],
			         resources[i]);
	}
	(void)count(before, NULL, "running");
	(void)count(before, NULL, "pooled");
	if (!json_is_object(json_object_get(before, "labels")))
		fail_msg("GET /v1/node: labels is not an object");
	if (!json_is_array(json_object_get(before, "images")))
		fail_msg("GET /v1/node: images is not an array");
	if (!json_is_boolean(json_object_get(before, "cordoned")))
		fail_msg("GET /v1/node: cordoned is not true or false");
	if (json_object_get(before, "pools") && !json_is_object(json_object_get(before, "pools")))
		fail_msg("GET /v1/node: pools is not an object");

	sb = conf_create("{\"cpus\":1}");
	after = get_node();
	want = count(before, "free", "cpus") - 1;
	if (count(after, "free", "cpus") != (want > 0 ? want : 0))
		fail_msg("GET /v1/node: free.cpus was %lld, and %lld after a 1-cpu sandbox was "
		         "created",
		         count(before, "free", "cpus"), count(after, "free", "cpus"));
	if (count(after, NULL, "running") < 1)
		fail_msg("GET /v1/node: running is 0 with sandbox '%s' running",
		         conf_str(sb, "id"));
}

static void
set_cordon(bool on)
{
	json_t *j;
	long status = conf_request("POST", "/v1/node/cordon",
	                           on ? "{\"cordoned\":true}" : "{\"cordoned\":false}", &j);

	if (status != 200)
		fail_msg("POST /v1/node/cordon {\"cordoned\":%s}: expected 200, got %ld",
		         on ? "true" : "false", status);
	j = get_node();
	if (json_is_true(json_object_get(j, "cordoned")) != on)
		fail_msg("GET /v1/node: cordoned is not %s after the cordon was set so",
		         on ? "true" : "false");
}

/* A cordon refuses new sandboxes (503 unavailable) and nothing else: a sandbox already
 * running stays so and runs commands; an uncordon restores creates. */
void
case_cordon_refuses_creates_only(void **state)
{
	const char *shared = NULL, *id;
	json_t *existing, *j;
	long status;

	conf_need_capability("cordon");
	conf_need_sandboxes();
	/* the node is uncordoned at the end whatever happens here */
	conf_defer_request("POST", "/v1/node/cordon", "{\"cordoned\":false}");
	/* made before the cordon: the shared sandbox runs commands, if the server runs any */
	if (conf_capability("processes"))
		shared = conf_shared_sandbox();
	existing = conf_create(NULL);
	id = conf_str(existing, "id");

	status = conf_request("POST", "/v1/node/cordon", "{\"cordoned\":true,\"x\":1}", &j);
	conf_assert_error(status, j, 400, "invalid_request");
	status = conf_request("POST", "/v1/node/cordon", "{\"cordoned\":\"yes\"}", &j);
	conf_assert_error(status, j, 400, "invalid_request");

	set_cordon(true);
	j = conf_create_refused(NULL, 503, "unavailable");
	if (!strstr(conf_error_message(j), "cordon"))
		fail_msg("a create on a cordoned node: the message does not say it is cordoned: "
		         "'%s'",
		         conf_error_message(j));
	j = conf_get(id);
	if (!streq(conf_str(j, "state"), "running"))
		fail_msg("sandbox '%s' is %s on a cordoned node; it was running", id,
		         conf_str(j, "state"));
	if (shared) {
		status = conf_request("POST", conf_fmt("/v1/sandboxes/%s/run", shared),
		                      "{\"argv\":[\"echo\",\"still here\"]}", &j);
		if (status != 200 ||
		    !streq(conf_str(j, "stdout"), "c3RpbGwgaGVyZQo=")) /* "still here\n" */
			fail_msg("a command in a running sandbox on a cordoned node: got %ld "
			         "stdout '%s'",
			         status, conf_str(j, "stdout"));
	}

	set_cordon(false);
	existing = conf_create(NULL);
	if (!streq(conf_str(existing, "state"), "running"))
		conf_wait_state(conf_str(existing, "id"), "running");
}
