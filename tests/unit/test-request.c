/* test-request.c: daemon/api/request.c's body decoding, driven by tests/data/request (NAME.json is
 * a request body, NAME.expect the outcome; see the README there), plus table tests for the
 * ?label= filter. Bodies are parsed the way the API parses them: jansson, duplicates refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include "api-error.h"
#include "request.h"
#include "datacases.h"
#include "util.h"

#define REQUEST_DATA_DIR TEST_DATA_DIR "/request"
#define HOST_CPUS 4 /* so max_cpus is 4 under the embedded policy */
#define CASE_MAX (1u << 20)

static json_t *
env_json(const struct sandbox *sb)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < sb->nenv; i++)
		json_object_set_new(o, sb->env[i].name, json_string(sb->env[i].value));
	return o;
}

/* Everything a create decodes, as one object the expectations address by path. */
static json_t *
create_view(const struct sandbox *sb, bool wait)
{
	return json_pack(
	        "{s:s?, s:s?, s:i, s:i, s:I, s:I, s:s, s:I, s:b, s:O, s:O, s:o, s:b, s:s?, "
	        "s:I, s:i, s:O}",
	        "name", sb->name, "image", sb->image, "cpus", (int)sb->cpus, "memory_mb",
	        (int)sb->memory_mb, "disk_mb", (json_int_t)sb->disk_mb, "idle_timeout_secs",
	        (json_int_t)sb->idle_timeout_secs, "idle_action",
	        sandbox_idle_action_to_string(sb->idle_action), "lifetime_secs",
	        (json_int_t)sb->lifetime_secs, "bound_to_client", sb->bound_to_client, "labels",
	        sb->labels, "network", sb->network, "env", env_json(sb), "wait", wait,
	        "snapshot_id", sb->snapshot_id, "snapshot_every_secs",
	        (json_int_t)sb->snapshot_every_secs, "snapshot_keep", (int)sb->snapshot_keep,
	        "volumes", sb->volumes);
}

static json_t *
patch_view(const struct sandbox_patch *p)
{
	return json_pack("{s:b, s:s?, s:O?, s:O?, s:b, s:I, s:s?, s:o?}", "set_name", p->set_name,
	                 "name", p->name, "labels", p->labels, "network", p->network, "set_idle",
	                 p->set_idle, "idle_timeout_secs", (json_int_t)p->idle_timeout_secs,
	                 "idle_action",
	                 p->set_idle_action ? sandbox_idle_action_to_string(p->idle_action) : NULL,
	                 "bound_to_client", p->set_bound ? json_boolean(p->bound_to_client) : NULL);
}

/* "a.b.c" into nested objects; NULL when a step is missing. */
static json_t *
lookup(json_t *root, const char *path)
{
	_cleanup_free_ char *copy = strdup(path);
	char *s = copy, *dot;
	json_t *v = root;

	assert_non_null(copy);
	while (v && s) {
		dot = strchr(s, '.');
		if (dot)
			*dot = '\0';
		v = json_object_get(v, s);
		s = dot ? dot + 1 : NULL;
	}
	return v;
}

struct outcome {
	const char *name;
	int r;
	struct err err;
	json_t *view; /* on success */
	bool invalid_json;
};

static void
check_line(const struct outcome *o, unsigned line, const char *key, const char *arg)
{
	const char *name = o->name, *message = "(accepted)";
	/* what the API answers for this outcome */
	enum err_kind kind = o->r < 0 ? api_error_classify(o->r, &o->err, &message) : ERR_NONE;
	int status = o->r < 0 ? api_error_status(kind) : 0;
	const char *code = o->r < 0 ? api_error_code(kind) : NULL;

	if (streq(key, "ok")) {
		if (o->invalid_json || o->r < 0)
			fail_msg("%s:%u: refused: %d %s: %s", name, line, status, code ? code : "-",
			         o->invalid_json ? "invalid JSON" : message);
	} else if (streq(key, "invalid-json")) {
		if (!o->invalid_json)
			fail_msg("%s:%u: the body parses as JSON", name, line);
	} else if (streq(key, "status")) {
		if (o->invalid_json || o->r >= 0 || status != (int)strtol(arg, NULL, 10))
			fail_msg("%s:%u: expected a refusal with %s, got %s %d", name, line, arg,
			         o->invalid_json ? "invalid JSON" : "status", status);
	} else if (streq(key, "code")) {
		if (o->r >= 0 || !streq(code, arg))
			fail_msg("%s:%u: code is '%s', expected '%s'", name, line,
			         code ? code : "(none)", arg);
	} else if (streq(key, "message-contains")) {
		if (o->r >= 0 || !strstr(message, arg))
			fail_msg("%s:%u: message is '%s', expected it to contain '%s'", name, line,
			         message, arg);
	} else if (streq(key, "field") || streq(key, "absent")) {
		const char *sp = strchr(arg, ' ');
		_cleanup_free_ char *path = strndup(arg, sp ? (size_t)(sp - arg) : strlen(arg));
		json_t *got, *want;
		json_error_t jerr;

		assert_non_null(path);
		if (!o->view)
			fail_msg("%s:%u: '%s' needs an accepted body", name, line, key);
		got = lookup(o->view, path);
		if (streq(key, "absent")) {
			if (got)
				fail_msg("%s:%u: '%s' is present", name, line, path);
			return;
		}
		want = json_loads(sp ? sp + 1 : "", JSON_DECODE_ANY, &jerr);
		if (!want)
			fail_msg("%s:%u: bad expected JSON: %s", name, line, jerr.text);
		if (!got || !json_equal(got, want)) {
			_cleanup_free_ char *text = got ? json_dumps(got, JSON_ENCODE_ANY) : NULL;
			json_decref(want);
			fail_msg("%s:%u: %s is %s, expected %s", name, line, path,
			         text ? text : "absent", sp ? sp + 1 : "");
		}
		json_decref(want);
	} else {
		fail_msg("%s:%u: unknown directive '%s'", name, line, key);
	}
}

/* The directives that set up the run rather than check it. */
struct setup {
	bool patch;
	bool ceiling_open, ceiling_none;
	uint64_t max_idle, max_lifetime; /* "limit max_idle_timeout_secs N": 0 unset */
};

static void
read_setup(const char *name, char *text, struct setup *s)
{
	unsigned line = 0;

	for (char *l = text; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] ? 1 : 0)) {
		size_t n = strcspn(l, "\n");
		line++;
		if (n == strlen("decode patch") && strneq(l, "decode patch", n))
			s->patch = true;
		else if (n == strlen("decode create") && strneq(l, "decode create", n))
			s->patch = false;
		else if (n == strlen("ceiling open") && strneq(l, "ceiling open", n))
			s->ceiling_open = true;
		else if (n == strlen("ceiling none") && strneq(l, "ceiling none", n))
			s->ceiling_none = true;
		else if (strneq(l, "limit max_idle_timeout_secs ", 28))
			s->max_idle = strtoull(l + 28, NULL, 10);
		else if (strneq(l, "limit max_lifetime_secs ", 24))
			s->max_lifetime = strtoull(l + 24, NULL, 10);
		else if (strneq(l, "decode", 6) || strneq(l, "ceiling", 7) || strneq(l, "limit", 5))
			fail_msg("%s:%u: use 'decode create|patch', 'ceiling open|none' or 'limit "
			         "max_idle_timeout_secs|max_lifetime_secs N'",
			         name, line);
	}
}

static void
test_case(void **state)
{
	const char *name = *state;
	_cleanup_free_ char *json_path = strdup_printf("%s/%s.json", REQUEST_DATA_DIR, name);
	_cleanup_free_ char *exp_path = strdup_printf("%s/%s.expect", REQUEST_DATA_DIR, name);
	_cleanup_free_ char *body_text = NULL, *exp_text = NULL;
	_cleanup_(sandbox_freep) struct sandbox *sb = NULL;
	struct sandbox_patch patch = { 0 };
	struct outcome o = { .name = name };
	struct setup setup = { 0 };
	struct policy p;
	json_error_t jerr;
	json_t *body;
	size_t len, exp_len;
	unsigned line = 0;
	char *l, *next;

	assert_non_null(json_path);
	assert_non_null(exp_path);
	if (read_file_max(json_path, CASE_MAX, &body_text, &len) < 0 ||
	    read_file_max(exp_path, CASE_MAX, &exp_text, &exp_len) < 0)
		fail_msg("cannot read the files of case %s", name);
	read_setup(name, exp_text, &setup);
	assert_int_equal(policy_init_defaults(&p, HOST_CPUS), 0);
	if (setup.ceiling_open)
		p.network.ceiling = NET_OPEN;
	if (setup.ceiling_none) /* what a sandboxd without egress lowers it to */
		policy_cap_network(&p, NET_NONE);
	p.limits.max_idle_timeout_secs = setup.max_idle;
	p.limits.max_lifetime_secs = setup.max_lifetime;

	body = json_loadb(body_text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!body) {
		o.invalid_json = true;
		o.r = -EINVAL;
	} else if (setup.patch) {
		o.r = request_decode_patch(&p, body, &patch, &o.err);
		if (o.r >= 0)
			o.view = patch_view(&patch);
		else
			/* nothing is handed back from a refused patch */
			assert_true(!patch.set_name && !patch.name && !patch.labels &&
			            !patch.network && !patch.set_idle && !patch.set_idle_action &&
			            !patch.set_bound);
	} else {
		bool wait = true;
		sb = sandbox_new();
		assert_non_null(sb);
		o.r = request_decode_create(&p, body, sb, &wait, &o.err);
		if (o.r >= 0)
			o.view = create_view(sb, wait);
	}
	if (o.r >= 0)
		assert_non_null(o.view);

	for (l = exp_text; *l; l = next) {
		size_t n = strcspn(l, "\n");
		char *sp, *arg;
		size_t alen;

		next = l + n + (l[n] ? 1 : 0);
		l[n] = '\0';
		line++;
		if (*l == '#' || *l == '\0' || strneq(l, "decode ", 7) ||
		    strneq(l, "ceiling ", 8) || strneq(l, "limit ", 6))
			continue;
		sp = strchr(l, ' ');
		arg = sp ? sp + 1 : l + n;
		if (sp)
			*sp = '\0';
		/* message-contains "unknown field": the quotes are optional */
		alen = strlen(arg);
		if (alen >= 2 && arg[0] == '"' && arg[alen - 1] == '"' && !streq(l, "field")) {
			arg[alen - 1] = '\0';
			arg++;
		}
		check_line(&o, line, l, arg);
	}

	json_decref(o.view);
	json_decref(body);
	sandbox_patch_done(&patch);
	policy_done(&p);
}

static void
test_label_filter(void **state)
{
	static const struct {
		const char *kv;
		int r;
		const char *key, *value;
	} cases[] = {
		{ "team=ml", 0, "team", "ml" },
		{ "app.kubernetes.io/name=web", 0, "app.kubernetes.io/name", "web" },
		{ "team=", 0, "team", "" },
		{ "a=b=c", 0, "a", "b=c" },
		{ "team=two words", 0, "team", "two words" },
		{ "team", -EINVAL, NULL, NULL },
		{ "", -EINVAL, NULL, NULL },
		{ "=ml", -EINVAL, NULL, NULL },
		{ "Team=ml", -EINVAL, NULL, NULL },
		{ "-team=ml", -EINVAL, NULL, NULL },
		{ "te am=ml", -EINVAL, NULL, NULL },
		{ "team=a\x01", -EINVAL, NULL, NULL },
		{ "team=caf\xc3\xa9", -EINVAL, NULL, NULL },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		json_t *filter = json_object();
		struct err err = {};
		int r;

		assert_non_null(filter);
		r = request_add_label_filter(filter, cases[i].kv, &err);
		if (r != cases[i].r)
			fail_msg("label filter '%s': %d, expected %d", cases[i].kv, r, cases[i].r);
		if (r == 0) {
			assert_int_equal(json_object_size(filter), 1);
			assert_string_equal(
			        json_string_value(json_object_get(filter, cases[i].key)),
			        cases[i].value);
		} else {
			assert_int_equal(err.kind, ERR_INVALID);
			assert_int_equal(json_object_size(filter), 0);
		}
		json_decref(filter);
	}
}

int
main(void)
{
	static const struct CMUnitTest fixed[] = {
		cmocka_unit_test(test_label_filter),
	};

	json_object_seed(1); /* which bad field is reported first must not vary */
	return datacases_run("request", REQUEST_DATA_DIR, ".json", fixed, ARRAY_SIZE(fixed),
	                     test_case);
}
