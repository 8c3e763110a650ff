/* test-policyfile.c: daemon/core/policyfile.c, the operator's YAML policy file. A table of files:
 * each accepted one with the policy it leaves (as "field=value" lines of a dump), each
 * refused one with the line and column the operator is sent to and what the message says.
 * Then the shipped packaging/policy.example.yaml, a refusal leaving the policy as it was,
 * and policyfile_load's path prefix and size bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "buf.h"
#include "netpolicy.h"
#include "policyfile.h"
#include "util.h"

#define HOST_CPUS 8

static void
put_list(struct buf *b, const char *name, const json_t *a)
{
	size_t i;
	json_t *v;

	assert_int_equal(buf_printf(b, "%s=[", name), 0);
	json_array_foreach (a, i, v)
		assert_int_equal(buf_printf(b, "%s%s", i ? "," : "", json_string_value(v)), 0);
	assert_int_equal(buf_puts(b, "]\n"), 0);
}

/* Every field of p, one "name=value" line each: what a case expects is a few of these. */
static char *
dump(const struct policy *p)
{
	struct buf b = BUF_INIT(1 << 20);

	assert_int_equal(buf_printf(&b, "default_image=%s\n", p->default_image), 0);
	assert_int_equal(buf_puts(&b, p->n_images ? "images=[" : "images=any\n"), 0);
	for (size_t i = 0; i < p->n_images; i++)
		assert_int_equal(buf_printf(&b, "%s%s", i ? "," : "", p->images[i]), 0);
	if (p->n_images)
		assert_int_equal(buf_puts(&b, "]\n"), 0);
	assert_int_equal(
	        buf_printf(&b,
	                   "defaults.cpus=%u\ndefaults.memory_mb=%u\ndefaults.disk_mb=%llu\n"
	                   "defaults.idle_timeout_secs=%llu\ndefaults.lifetime_secs=%llu\n",
	                   p->defaults.cpus, p->defaults.memory_mb,
	                   (unsigned long long)p->defaults.disk_mb,
	                   (unsigned long long)p->defaults.idle_timeout_secs,
	                   (unsigned long long)p->defaults.lifetime_secs),
	        0);
	assert_int_equal(buf_printf(&b,
	                            "limits.max_cpus=%u\nlimits.max_memory_mb=%u\n"
	                            "limits.max_disk_mb=%llu\nlimits.max_idle_timeout_secs=%llu\n"
	                            "limits.max_lifetime_secs=%llu\n"
	                            "limits.min_snapshot_every_secs=%llu\n"
	                            "limits.max_snapshot_keep=%u\n",
	                            p->limits.max_cpus, p->limits.max_memory_mb,
	                            (unsigned long long)p->limits.max_disk_mb,
	                            (unsigned long long)p->limits.max_idle_timeout_secs,
	                            (unsigned long long)p->limits.max_lifetime_secs,
	                            (unsigned long long)p->limits.min_snapshot_every_secs,
	                            p->limits.max_snapshot_keep),
	                 0);
	assert_int_equal(buf_printf(&b, "network.default.mode=%s\n",
	                            net_mode_to_string(p->network.default_mode)),
	                 0);
	put_list(&b, "network.default.allow", p->network.default_allow);
	put_list(&b, "network.default.deny", p->network.default_deny);
	assert_int_equal(
	        buf_printf(&b, "network.ceiling=%s\n", net_mode_to_string(p->network.ceiling)), 0);
	put_list(&b, "network.may_allow", p->network.may_allow);
	assert_int_equal(buf_puts(&b, "pools=["), 0);
	for (size_t i = 0; i < p->n_pools; i++)
		assert_int_equal(buf_printf(&b, "%s%s:%u", i ? "," : "",
		                            p->pools[i].image ? p->pools[i].image : "(default)",
		                            p->pools[i].size),
		                 0);
	assert_int_equal(buf_puts(&b, "]\n"), 0);
	return buf_steal(&b);
}

/* Whether each line of want is a whole line of got. */
static bool
has_lines(const char *got, const char *want)
{
	const char *w = want;

	while (*w) {
		const char *end = strchr(w, '\n');
		size_t n = end ? (size_t)(end - w) : strlen(w);
		bool found = false;

		for (const char *g = got; g && *g;) {
			const char *ge = strchr(g, '\n');
			size_t gn = ge ? (size_t)(ge - g) : strlen(g);
			if (gn == n && strneq(g, w, n))
				found = true;
			g = ge ? ge + 1 : NULL;
		}
		if (!found)
			return false;
		w += n + (end ? 1 : 0);
	}
	return true;
}

static const struct pcase {
	const char *name;
	const char *yaml;
	const char *want; /* accepted: lines of the dump */
	const char *at;   /* refused: "LINE:COLUMN:" the message starts with */
	const char *says; /* refused: in the message */
} cases[] = {
	/* accepted */
	{ "empty file", "",
	  "defaults.cpus=1\nlimits.max_cpus=8\nnetwork.ceiling=allowlist\nnetwork.may_allow=[*]\n"
	  "pools=[]",
	  NULL, NULL },
	{ "comments only", "# nothing yet\n\n", "default_image=sandbox-base\nimages=any", NULL,
	  NULL },
	{ "empty document", "---\n", "defaults.memory_mb=512", NULL, NULL },
	{ "document end marker", "%YAML 1.1\n---\ndefaults: {cpus: 2}\n...\n", "defaults.cpus=2",
	  NULL, NULL },
	{ "default image", "default_image: python:3.13-slim\n", "default_image=python:3.13-slim",
	  NULL, NULL },
	{ "quoted strings are strings", "default_image: \"python:3\"\n'images': ['python:3']\n",
	  "default_image=python:3\nimages=[python:3]", NULL, NULL },
	{ "images with the default on it", "default_image: a\nimages:\n  - a\n  - ghcr.io/x/y:1\n",
	  "images=[a,ghcr.io/x/y:1]", NULL, NULL },
	{ "every default",
	  "defaults:\n  cpus: 2\n  memory_mb: 1024\n  disk_mb: 8192\n  idle_timeout_secs: 600\n"
	  "  lifetime_secs: 86400\n",
	  "defaults.cpus=2\ndefaults.memory_mb=1024\ndefaults.disk_mb=8192\n"
	  "defaults.idle_timeout_secs=600\ndefaults.lifetime_secs=86400",
	  NULL, NULL },
	{ "every limit",
	  "limits:\n  max_cpus: 64\n  max_memory_mb: 4096\n  max_disk_mb: 10240\n"
	  "  max_idle_timeout_secs: 3600\n  max_lifetime_secs: 604800\n"
	  "  min_snapshot_every_secs: 60\n  max_snapshot_keep: 3\n",
	  "limits.max_cpus=64\nlimits.max_memory_mb=4096\nlimits.max_disk_mb=10240\n"
	  "limits.max_idle_timeout_secs=3600\nlimits.max_lifetime_secs=604800\n"
	  "limits.min_snapshot_every_secs=60\nlimits.max_snapshot_keep=3",
	  NULL, NULL },
	{ "defaults equal to the limits",
	  "defaults: {cpus: 8, memory_mb: 64}\nlimits: {max_memory_mb: 64}\n",
	  "defaults.cpus=8\ndefaults.memory_mb=64\nlimits.max_memory_mb=64", NULL, NULL },
	{ "no idle timeout under a maximum", "limits: {max_idle_timeout_secs: 60}\n",
	  "defaults.idle_timeout_secs=0\nlimits.max_idle_timeout_secs=60", NULL, NULL },
	{ "open under an open ceiling", "network:\n  default: {mode: open}\n  ceiling: open\n",
	  "network.default.mode=open\nnetwork.ceiling=open", NULL, NULL },
	{ "allow names normalised",
	  "network:\n  ceiling: allowlist\n  default:\n    mode: allowlist\n"
	  "    allow: [Example.COM., a.example.com, example.com, '*.Pypi.org']\n",
	  "network.default.mode=allowlist\n"
	  "network.default.allow=[*.pypi.org,a.example.com,example.com]",
	  NULL, NULL },
	{ "may_allow keeps a star first",
	  "network: {may_allow: [zz.example, '*', '*.b.example']}\n",
	  "network.may_allow=[*,*.b.example,zz.example]", NULL, NULL },
	{ "deny with mode none", "network:\n  default:\n    deny: [evil.example]\n",
	  "network.default.mode=none\nnetwork.default.deny=[evil.example]", NULL, NULL },
	{ "allow within a wildcard may_allow",
	  "network:\n  ceiling: open\n  may_allow: ['*.example.com']\n"
	  "  default: {mode: allowlist, allow: [a.example.com, '*.b.example.com']}\n",
	  "network.default.allow=[*.b.example.com,a.example.com]", NULL, NULL },
	{ "a pool of the default image", "pools: [{size: 2}]\n", "pools=[(default):2]", NULL,
	  NULL },
	{ "pools of listed images",
	  "images: [sandbox-base, python:3]\npools:\n  - size: 1\n  - image: python:3\n    size: "
	  "64\n",
	  "pools=[(default):1,python:3:64]", NULL, NULL },
	{ "an empty pool list", "pools: []\n", "pools=[]", NULL, NULL },
	{ "zero means unbounded", "limits: {max_lifetime_secs: 0}\n", "limits.max_lifetime_secs=0",
	  NULL, NULL },
	/* refused: what the file says */
	{ "misspelt key", "network:\n  default: {mode: none}\n  celing: open\n",
	  .at = "3:3:", .says = "unknown key 'celing' (did you mean 'ceiling'?)" },
	{ "misspelt top-level key", "default_imag: a\n",
	  .at = "1:1:", .says = "(did you mean 'default_image'?)" },
	{ "unknown key, nothing close", "defaults:\n  frobnicate: 1\n",
	  .at = "2:3:", .says = "unknown key 'frobnicate' in 'defaults'" },
	{ "a key at the wrong level", "cpus: 2\n", .at = "1:1:", .says = "unknown key 'cpus'" },
	{ "alias", "defaults:\n  cpus: *x\n", .at = "2:9:", .says = "aliases are not allowed" },
	{ "anchor", "limits: &l {max_cpus: 2}\n", .at = "1:9:", .says = "anchors are not allowed" },
	{ "tag on a value", "default_image: !!str a\n",
	  .at = "1:16:", .says = "tags are not allowed: 'tag:yaml.org,2002:str'" },
	{ "tag on a mapping", "limits: !!map {}\n", .at = "1:9:", .says = "tags are not allowed" },
	{ "local tag", "defaults: {cpus: !n 2}\n", .at = "1:18:", .says = "tags are not allowed" },
	{ "duplicate key", "defaults:\n  cpus: 1\n  cpus: 2\n",
	  .at = "3:3:", .says = "duplicate key 'cpus' (first at line 2)" },
	{ "duplicate section", "network: {}\nnetwork: {}\n",
	  .at = "2:1:", .says = "duplicate key 'network'" },
	{ "mapping for a string", "default_image: {a: b}\n",
	  .at = "1:16:", .says = "'default_image' must be a single value, not a mapping" },
	{ "list for a number", "defaults: {cpus: [1]}\n",
	  .at = "1:18:", .says = "'defaults.cpus' must be a number, not a list" },
	{ "string for a mapping", "defaults: 4\n",
	  .at = "1:11:", .says = "'defaults' must be a mapping (key: value), not a single value" },
	{ "nothing for a mapping", "limits:\n",
	  .at = "1:8:", .says = "'limits' must be a mapping" },
	{ "list for a mapping", "network: [a]\n", .at = "1:10:", .says = "must be a mapping" },
	{ "string for a list", "images: python\n",
	  .at = "1:9:", .says = "'images' must be a list of image references" },
	{ "a root that is a list", "- a\n",
	  .at = "1:1:", .says = "'the policy' must be a mapping" },
	{ "a root that is a word", "hello\n", .at = "1:1:", .says = "must be a mapping" },
	{ "a key that is a list", "{[a]: 1}\n",
	  .at = "1:2:", .says = "must be a name, not a list" },
	{ "hex", "defaults: {cpus: 0x2}\n",
	  .at = "1:18:", .says = "must be a plain decimal number, not '0x2'" },
	{ "octal-looking", "defaults:\n  memory_mb: 0700\n",
	  .at = "2:14:", .says = "plain decimal number, not '0700'" },
	{ "negative", "limits: {max_disk_mb: -1}\n", .at = "1:23:", .says = "not '-1'" },
	{ "fraction", "defaults: {cpus: 1.5}\n", .at = "1:18:", .says = "not '1.5'" },
	{ "underscores", "limits: {max_memory_mb: 1_024}\n", .at = "1:25:", .says = "not '1_024'" },
	{ "quoted number", "defaults: {cpus: \"2\"}\n",
	  .at = "1:18:", .says = "not a quoted string" },
	{ "empty number", "defaults: {cpus: }\n", .at = "1:18:", .says = "not ''" },
	{ "past 64 bits", "limits: {max_disk_mb: 99999999999999999999999}\n", .at = "1:23:",
	  .says = "'limits.max_disk_mb' is 99999999999999999999999; it must be between 64 and" },
	{ "disk past what bytes can hold", "limits: {max_disk_mb: 9000000000000}\n",
	  .at = "1:23:", .says = "must be between 64 and 8796093022207" },
	{ "unsigned past INT_MAX", "limits: {max_cpus: 4294967296}\n",
	  .at = "1:20:", .says = "between 1 and 2147483647" },
	{ "zero cpus", "defaults: {cpus: 0}\n",
	  .at = "1:18:", .says = "'defaults.cpus' is 0; it must be between 1 and" },
	{ "too little memory", "defaults: {memory_mb: 63}\n",
	  .at = "1:23:", .says = "between 64 and" },
	{ "a century and more", "limits: {max_lifetime_secs: 3162240001}\n",
	  .at = "1:29:", .says = "between 0 and 3162240000" },
	{ "unknown mode", "network:\n  default:\n    mode: closed\n", .at = "3:11:",
	  .says = "unknown network mode 'closed' in 'network.default.mode': use none, allowlist "
	          "or open" },
	{ "a boolean for a ceiling", "network: {ceiling: yes}\n",
	  .at = "1:20:", .says = "unknown network mode 'yes'" },
	{ "two documents", "defaults: {cpus: 1}\n---\nlimits: {}\n",
	  .at = "2:1:", .says = "more than one document" },
	{ "an empty image list", "images: []\n", .at = "1:9:",
	  .says = "'images' is empty: list the images allowed, or leave the key out" },
	{ "an uppercase image", "images: [sandbox-base, Python]\n",
	  .at = "1:24:", .says = "'images' is not an image reference" },
	{ "an image that is an option", "default_image: --privileged\n",
	  .at = "1:16:", .says = "not an image reference" },
	{ "an image listed twice", "images:\n  - sandbox-base\n  - sandbox-base\n",
	  .at = "3:5:", .says = "image 'sandbox-base' is listed twice" },
	{ "no default image", "default_image:\n",
	  .at = "1:15:", .says = "'default_image' needs a value" },
	{ "a null default image", "default_image: ~\n", .at = "1:16:", .says = "needs a value" },
	{ "a NUL in a string", "default_image: \"sandbox\\0-base\"\n",
	  .at = "1:16:", .says = "contains a NUL byte" },
	{ "a URL for a name",
	  "network:\n  ceiling: allowlist\n  default:\n    mode: allowlist\n"
	  "    allow:\n      - example.com\n      - https://example.org/\n",
	  .at = "7:9:", .says = "'network.default.allow': 'https://example.org/': a URL" },
	{ "a bare star in allow", "network:\n  default:\n    deny: ['*']\n",
	  .at = "3:12:", .says = "'network.default.deny': '*'" },
	{ "an IP address in may_allow", "network: {may_allow: [10.0.0.1]}\n",
	  .at = "1:23:", .says = "'network.may_allow': '10.0.0.1'" },
	{ "a pool without a size", "pools:\n  - image: sandbox-base\n",
	  .at = "2:5:", .says = "a pool needs a 'size'" },
	{ "a pool too large", "pools: [{size: 65}]\n",
	  .at = "1:16:", .says = "'pools.size' is 65; it must be between 1 and 64" },
	{ "an empty pool", "pools: [{size: 0}]\n", .at = "1:16:", .says = "between 1 and 64" },
	{ "a pool that is a number", "pools: [2]\n",
	  .at = "1:9:", .says = "'pools' must be a mapping" },
	{ "a pool's unknown key", "pools: [{size: 1, imgae: a}]\n",
	  .at = "1:19:", .says = "unknown key 'imgae' (did you mean 'image'?)" },
	{ "malformed YAML", "defaults: {cpus: 1\n",
	  .at = "2:1:", .says = "did not find expected ',' or '}'" },
	{ "a tab for indentation", "defaults:\n\tcpus: 1\n",
	  .at = "2:1:", .says = "found character that cannot start any token" },
	{ "a control character",
	  "default_image: a\x01"
	  "b\n",
	  .at = "1:17:", .says = "control characters are not allowed" },
	{ "not UTF-8", "images:\n  - a\xff\n",
	  .at = "2:6:", .says = "invalid leading UTF-8 octet (byte 13)" },
	/* refused: contradictions, shown at the key the operator most likely meant to change */
	{ "default cpus above the limit", "defaults:\n  cpus: 9\n",
	  .at = "2:3:", .says = "defaults.cpus 9 is above limits.max_cpus 8" },
	{ "a limit below the default", "limits:\n  max_memory_mb: 256\n",
	  .at = "2:3:", .says = "defaults.memory_mb 512 is above limits.max_memory_mb 256" },
	{ "both written: the default's position",
	  "limits: {max_disk_mb: 100}\ndefaults: {disk_mb: 200}\n",
	  .at = "2:12:", .says = "defaults.disk_mb 200 is above limits.max_disk_mb 100" },
	{ "idle timeout above its maximum",
	  "defaults: {idle_timeout_secs: 61}\nlimits: {max_idle_timeout_secs: 60}\n",
	  .at = "1:12:", .says = "defaults.idle_timeout_secs 61 is above" },
	{ "lifetime above its maximum",
	  "defaults: {lifetime_secs: 100}\nlimits: {max_lifetime_secs: 99}\n", .at = "1:12:",
	  .says = "defaults.lifetime_secs 100 is above limits.max_lifetime_secs 99" },
	{ "default mode above the ceiling",
	  "network:\n  ceiling: allowlist\n  default:\n    mode: open\n", .at = "4:5:",
	  .says = "the default network mode 'open' is above the ceiling 'allowlist'" },
	{ "a default above the built-in ceiling", "network:\n  default: {mode: open}\n",
	  .at = "2:13:",
	  .says = "the default network mode 'open' is above the ceiling 'allowlist'" },
	{ "allow without allowlist",
	  "network:\n  ceiling: open\n  default:\n    mode: open\n    allow: [example.com]\n",
	  .at = "5:5:", .says = "network.default.allow goes only with mode allowlist" },
	{ "an allowlist default with no allow list", "network:\n  default:\n    mode: allowlist\n",
	  .at = "3:5:",
	  .says = "network.default.mode allowlist needs a network.default.allow list" },
	{ "an allowlist default with an empty allow list",
	  "network:\n  default:\n    mode: allowlist\n    allow: []\n",
	  .at = "4:5:", .says = "an empty allowlist reaches nothing" },
	{ "default image not in images", "images: [python:3]\n",
	  .at = "1:1:", .says = "the default image 'sandbox-base' is not in images" },
	{ "written default image not in images", "images: [python:3]\ndefault_image: b\n",
	  .at = "2:1:", .says = "the default image 'b' is not in images" },
	{ "pooled image not in images",
	  "images: [sandbox-base]\npools:\n  - size: 1\n    image: python:3\n",
	  .at = "4:5:", .says = "the pool's image 'python:3' is not in images" },
	{ "two pools for one image", "pools:\n  - size: 1\n  - {image: sandbox-base, size: 2}\n",
	  .at = "3:5:", .says = "a second pool for image 'sandbox-base'" },
	{ "allow outside may_allow",
	  "network:\n  ceiling: allowlist\n  may_allow: ['*.example.com']\n  default:\n"
	  "    mode: allowlist\n    allow: [a.example.com, example.com]\n",
	  .at = "6:28:",
	  .says = "'example.com' in network.default.allow is not within "
	          "network.may_allow" },
};

/* Checks one case; returns false (having printed why) when it fails. */
static bool
check_case(const struct pcase *c)
{
	_cleanup_free_ char *error = NULL, *got = NULL, *was = NULL;
	struct policy p, before;
	bool ok = true;
	int r;

	assert_int_equal(policy_init_defaults(&p, HOST_CPUS), 0);
	assert_int_equal(policy_init_defaults(&before, HOST_CPUS), 0);
	was = dump(&before);
	r = policyfile_parse(c->yaml, strlen(c->yaml), &p, &error);
	got = dump(&p);
	if (!c->at) {
		if (r != 0 || error) {
			print_error("case '%s': refused (%d): %s\n", c->name, r,
			            error ? error : "?");
			ok = false;
		} else if (!has_lines(got, c->want)) {
			print_error("case '%s': want the lines\n%s\nin\n%s", c->name, c->want, got);
			ok = false;
		}
	} else if (r != -EINVAL || !error) {
		print_error("case '%s': accepted (%d)\n", c->name, r);
		ok = false;
	} else if (!str_has_prefix(error, c->at) || !strstr(error, c->says)) {
		print_error("case '%s': got '%s', want '%s ...%s...'\n", c->name, error, c->at,
		            c->says);
		ok = false;
	} else if (!streq(got, was)) {
		/* a refused file leaves the policy as it was */
		print_error("case '%s': the refusal changed the policy:\n%s", c->name, got);
		ok = false;
	}
	policy_done(&p);
	policy_done(&before);
	return ok;
}

static void
test_cases(void **state _unused_)
{
	size_t failed = 0;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		failed += !check_case(&cases[i]);
	assert_int_equal(failed, 0);
}

/* A file that writes every section and only then contradicts itself leaves nothing of what
 * it wrote: the policy sandboxd would otherwise have run with stays whole. */
static void
test_refusal_leaves_policy(void **state _unused_)
{
	static const char first[] = "default_image: python:3\nimages: [python:3, sandbox-base]\n"
	                            "network:\n  ceiling: allowlist\n  default:\n"
	                            "    mode: allowlist\n    allow: [example.com]\n"
	                            "pools: [{size: 3}]\n";
	static const char bad[] = "default_image: sandbox-base\nimages: [sandbox-base]\n"
	                          "defaults: {cpus: 2, memory_mb: 1024}\nlimits: {max_cpus: 4}\n"
	                          "network:\n  default: {mode: open, deny: [x.example]}\n"
	                          "  may_allow: ['*']\npools: [{size: 1}]\n";
	_cleanup_free_ char *error = NULL, *was = NULL, *got = NULL;
	struct policy p;

	assert_int_equal(policy_init_defaults(&p, HOST_CPUS), 0);
	assert_int_equal(policyfile_parse(first, strlen(first), &p, &error), 0);
	was = dump(&p);
	assert_true(has_lines(was, "default_image=python:3\nnetwork.default.allow=[example.com]\n"
	                           "pools=[(default):3]"));
	assert_int_equal(policyfile_parse(bad, strlen(bad), &p, &error), -EINVAL);
	assert_string_equal(error, "6:13: the default network mode 'open' is above the ceiling "
	                           "'allowlist'");
	got = dump(&p);
	assert_string_equal(got, was);
	policy_done(&p);
}

/* Over a policy a first file set, a second one changes only what it writes, and a list it
 * writes replaces the old one rather than adding to it. */
static void
test_over_previous(void **state _unused_)
{
	static const char first[] = "images: [a, b]\ndefault_image: a\ndefaults: {cpus: 2}\n";
	static const char second[] = "images: [a]\n";
	_cleanup_free_ char *error = NULL, *got = NULL;
	struct policy p;

	assert_int_equal(policy_init_defaults(&p, HOST_CPUS), 0);
	assert_int_equal(policyfile_parse(first, strlen(first), &p, &error), 0);
	assert_int_equal(policyfile_parse(second, strlen(second), &p, &error), 0);
	got = dump(&p);
	assert_true(has_lines(got, "images=[a]\ndefault_image=a\ndefaults.cpus=2"));
	policy_done(&p);
}

static void
test_list_bound(void **state _unused_)
{
	struct buf b = BUF_INIT(1 << 20);
	_cleanup_free_ char *error = NULL, *text = NULL;
	struct policy p;

	assert_int_equal(buf_puts(&b, "network:\n  default:\n    deny:\n"), 0);
	for (int i = 0; i <= NETPOLICY_LIST_MAX; i++)
		assert_int_equal(buf_printf(&b, "      - n%d.example\n", i), 0);
	text = buf_steal(&b);
	assert_int_equal(policy_init_defaults(&p, HOST_CPUS), 0);
	assert_int_equal(policyfile_parse(text, strlen(text), &p, &error), -EINVAL);
	assert_string_equal(error, "260:9: 'network.default.deny' holds more than 256 names");
	policy_done(&p);
}

/* The shipped example parses, and as its header promises it changes nothing. */
static void
test_example(void **state _unused_)
{
	_cleanup_free_ char *error = NULL, *got = NULL, *want = NULL;
	struct policy p, defaults;

	assert_int_equal(policy_init_defaults(&p, HOST_CPUS), 0);
	assert_int_equal(policy_init_defaults(&defaults, HOST_CPUS), 0);
	if (policyfile_load(TEST_DATA_DIR "/../../packaging/policy.example.yaml", &p, &error) < 0)
		fail_msg("the example is refused: %s", error ? error : "?");
	got = dump(&p);
	want = dump(&defaults);
	assert_string_equal(got, want);
	policy_done(&p);
	policy_done(&defaults);
}

static void
test_load(void **state _unused_)
{
	char path[] = "/tmp/test-policyfile-XXXXXX";
	_cleanup_free_ char *error = NULL, *want = NULL, *big = NULL;
	struct policy p;
	int fd;

	assert_int_equal(policy_init_defaults(&p, HOST_CPUS), 0);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write_all(fd, "network:\n  default: {mode: none}\n  celing: open\n", 47),
	                 0);
	assert_int_equal(policyfile_load(path, &p, &error), -EINVAL);
	want = strdup_printf("%s:3:3: unknown key 'celing' (did you mean 'ceiling'?)", path);
	assert_string_equal(error, want);
	free(error);
	error = NULL;

	/* past 1 MiB it is not read at all, however valid it is */
	big = malloc((1 << 20) + 1);
	assert_non_null(big);
	memset(big, '\n', (1 << 20) + 1);
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(write_all(fd, big, (1 << 20) + 1), 0);
	assert_int_equal(policyfile_load(path, &p, &error), -EFBIG);
	assert_non_null(strstr(error, "larger than 1 MiB"));
	free(error);
	error = NULL;
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	assert_int_equal(policyfile_load(path, &p, &error), 0);
	close(fd);
	unlink(path);

	assert_int_equal(policyfile_load("/nonexistent/policy.yaml", &p, &error), -ENOENT);
	assert_true(str_has_prefix(error, "/nonexistent/policy.yaml: cannot read it: "));
	policy_done(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cases),         cmocka_unit_test(test_refusal_leaves_policy),
		cmocka_unit_test(test_over_previous), cmocka_unit_test(test_list_bound),
		cmocka_unit_test(test_example),       cmocka_unit_test(test_load),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
