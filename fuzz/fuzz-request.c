/* fuzz-request.c: daemon/api/request.c on request bodies, parsed as the API parses them (jansson,
 * duplicates refused), decoded as a create and as a patch; accepted sandboxes are serialised
 * the way the API answers and stores them, refusals must carry a status, code and message.
 *
 * An input is JSON, decoded both ways under the embedded policy. A first byte of 'c' or 'p'
 * decodes the rest only as a create or a patch; 'o' decodes it both ways under a policy whose
 * network ceiling is open; 'l' hands the rest to request_add_label_filter as a ?label= value. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include "fuzz.h"
#include "oci.h"
#include "request.h"
#include "util.h"

#define HOST_CPUS 4
#define NOW_MS 1800000000000LL /* a fixed clock: runs must be reproducible */

/* A refusal must be one the API can answer: a kind its error table knows and a message (the
 * API makes the message printable ASCII before sending it). */
static void
check_refusal(int r, const struct err *err)
{
	if (r == -ENOMEM)
		return;
	FUZZ_CHECK(r == -EINVAL || r == -EPERM || r == -EOPNOTSUPP);
	FUZZ_CHECK(err->message[0]);
	FUZZ_CHECK(memchr(err->message, '\0', sizeof(err->message)));
	FUZZ_CHECK(err->kind == ERR_INVALID || err->kind == ERR_REFUSED ||
	           err->kind == ERR_UNSUPPORTED);
}

static void
check_network(const json_t *net)
{
	const char *mode = json_string_value(json_object_get(net, "mode"));

	FUZZ_CHECK(json_is_object(net));
	FUZZ_CHECK(mode && net_mode_from_string(mode) != _NET_MODE_INVALID);
}

/* What the API does with an accepted create: stamp it, answer it, store its spec and read
 * the spec back after a restart. */
static void
check_created(const struct policy *p, struct sandbox *sb)
{
	_cleanup_(sandbox_freep) struct sandbox *back = NULL;
	_cleanup_free_ char *text = NULL;
	json_t *j, *spec;

	FUZZ_CHECK(!sb->name || sandbox_name_valid(sb->name));
	FUZZ_CHECK(sb->image && (image_ref_valid(sb->image) || streq(sb->image, p->default_image)));
	FUZZ_CHECK(sb->cpus >= 1 && sb->cpus <= p->limits.max_cpus);
	FUZZ_CHECK(sb->memory_mb >= 64 && sb->memory_mb <= p->limits.max_memory_mb);
	FUZZ_CHECK(sb->disk_mb >= 64 && sb->disk_mb <= p->limits.max_disk_mb);
	FUZZ_CHECK(json_is_object(sb->labels) &&
	           json_object_size(sb->labels) <= REQUEST_MAX_LABELS);
	check_network(sb->network);
	FUZZ_CHECK(sb->nenv <= REQUEST_MAX_ENV);
	for (size_t i = 0; i < sb->nenv; i++) {
		FUZZ_CHECK(env_name_valid(sb->env[i].name));
		FUZZ_CHECK(!env_name_reserved(sb->env[i].name));
		FUZZ_CHECK(sb->env[i].value);
	}

	snprintf(sb->id, sizeof(sb->id), "sbx_0123456789abcdef");
	sb->owner = strdup("fuzz");
	FUZZ_CHECK(sb->owner);
	sb->created_at = sb->updated_at = sb->last_active = NOW_MS;
	j = sandbox_to_json(sb);
	FUZZ_CHECK(j);
	/* env values are never returned: only the names */
	FUZZ_CHECK(!json_object_get(j, "env"));
	FUZZ_CHECK(json_array_size(json_object_get(j, "env_names")) == sb->nenv);
	text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	FUZZ_CHECK(text);

	spec = sandbox_spec_to_json(sb);
	FUZZ_CHECK(spec);
	back = sandbox_new();
	FUZZ_CHECK(back);
	FUZZ_CHECK(sandbox_spec_from_json(back, spec) == 0);
	json_decref(spec);
	FUZZ_CHECK(back->cpus == sb->cpus && back->memory_mb == sb->memory_mb);
	FUZZ_CHECK(back->lifetime_secs == sb->lifetime_secs && back->nenv == sb->nenv);
	FUZZ_CHECK(json_equal(back->labels, sb->labels) && json_equal(back->network, sb->network));
}

static void
decode_create(const struct policy *p, const json_t *body)
{
	_cleanup_(sandbox_freep) struct sandbox *sb = sandbox_new();
	struct err err = {};
	bool wait = true;
	int r;

	FUZZ_CHECK(sb);
	r = request_decode_create(p, body, sb, &wait, &err);
	if (r < 0) {
		check_refusal(r, &err);
		return;
	}
	FUZZ_CHECK(r == 0);
	check_created(p, sb);
}

static void
decode_patch(const struct policy *p, const json_t *body)
{
	struct sandbox_patch patch = { 0 };
	struct err err = {};
	int r;

	r = request_decode_patch(p, body, &patch, &err);
	if (r < 0) {
		check_refusal(r, &err);
		FUZZ_CHECK(!patch.name && !patch.labels && !patch.network);
		return;
	}
	FUZZ_CHECK(!patch.name || (patch.set_name && sandbox_name_valid(patch.name)));
	FUZZ_CHECK(!patch.labels || json_is_object(patch.labels));
	if (patch.network)
		check_network(patch.network);
	if (patch.set_idle && p->limits.max_idle_timeout_secs)
		FUZZ_CHECK(patch.idle_timeout_secs <= p->limits.max_idle_timeout_secs);
	sandbox_patch_done(&patch);
}

static void
label_filter(const uint8_t *data, size_t size)
{
	json_t *filter = json_object();
	struct err err = {};
	_cleanup_free_ char *kv = NULL;
	int r;

	FUZZ_CHECK(filter);
	/* what http_query_next can hand over: a C string */
	kv = strndup((const char *)data, MIN(size, 1024));
	FUZZ_CHECK(kv);
	r = request_add_label_filter(filter, kv, &err);
	if (r < 0)
		check_refusal(r, &err);
	else
		FUZZ_CHECK(r == 0 && json_object_size(filter) == 1);
	json_decref(filter);
}

/* The policy an operator might write: every network mode allowed, allowlist by default. */
static int
open_policy(struct policy *p)
{
	int r = policy_init_defaults(p, HOST_CPUS);

	if (r < 0)
		return r;
	p->network.ceiling = NET_OPEN;
	p->network.default_mode = NET_ALLOWLIST;
	p->limits.max_idle_timeout_secs = 86400;
	p->limits.max_lifetime_secs = 7 * 86400;
	if (json_array_append_new(p->network.default_allow, json_string("pypi.org")) < 0 ||
	    json_array_append_new(p->network.may_allow, json_string("*.pypi.org")) < 0) {
		policy_done(p);
		return -ENOMEM;
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool seeded;
	struct policy policy;
	json_error_t jerr;
	json_t *body;
	char mode = 0;
	int r;

	if (!seeded) {
		json_object_seed(1); /* reproducible object iteration */
		seeded = true;
	}
	if (size > 0 && data[0] && strchr("cpol", data[0])) {
		mode = (char)data[0];
		data++;
		size--;
	}
	if (mode == 'l') {
		label_filter(data, size);
		return 0;
	}
	r = mode == 'o' ? open_policy(&policy) : policy_init_defaults(&policy, HOST_CPUS);
	if (r < 0)
		return 0;
	body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
	if (body) {
		if (mode != 'p')
			decode_create(&policy, body);
		if (mode != 'c')
			decode_patch(&policy, body);
		json_decref(body);
	}
	policy_done(&policy);
	return 0;
}
