/* fuzz-policy.c: daemon/core/policyfile.c, the input as an operator's policy file read over the
 * embedded defaults. An accepted file leaves a policy that agrees with itself (defaults within
 * the limits, the default network mode within the ceiling, the default and pooled images in
 * images) and reads the same when read again over itself; a refused one leaves the defaults
 * exactly as they were and says "LINE:COLUMN: what". */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include "fuzz.h"
#include "netpolicy.h"
#include "oci.h"
#include "policyfile.h"
#include "request.h"
#include "util.h"

static bool
str_eq(const char *a, const char *b)
{
	return a == b || (a && b && streq(a, b));
}

static bool
policy_equal(const struct policy *a, const struct policy *b)
{
	if (!str_eq(a->default_image, b->default_image) || a->n_images != b->n_images ||
	    a->n_pools != b->n_pools || memcmp(&a->defaults, &b->defaults, sizeof(a->defaults)) ||
	    memcmp(&a->limits, &b->limits, sizeof(a->limits)) ||
	    a->network.default_mode != b->network.default_mode ||
	    a->network.ceiling != b->network.ceiling ||
	    !json_equal(a->network.default_allow, b->network.default_allow) ||
	    !json_equal(a->network.default_deny, b->network.default_deny) ||
	    !json_equal(a->network.may_allow, b->network.may_allow))
		return false;
	for (size_t i = 0; i < a->n_images; i++)
		if (!streq(a->images[i], b->images[i]))
			return false;
	for (size_t i = 0; i < a->n_pools; i++)
		if (!str_eq(a->pools[i].image, b->pools[i].image) ||
		    a->pools[i].size != b->pools[i].size)
			return false;
	return true;
}

static bool
listed(const struct policy *p, const char *image)
{
	for (size_t i = 0; i < p->n_images; i++)
		if (streq(p->images[i], image))
			return true;
	return false;
}

/* "LINE:COLUMN: " with both at least 1 */
static bool
positioned(const char *e)
{
	for (int part = 0; part < 2; part++) {
		if (!isdigit((unsigned char)*e) || *e == '0')
			return false;
		while (isdigit((unsigned char)*e))
			e++;
		if (*e++ != ':')
			return false;
	}
	return *e == ' ';
}

static void
check_names(const json_t *a, bool star_ok)
{
	size_t i;
	json_t *v;

	FUZZ_CHECK(json_is_array(a) && json_array_size(a) <= NETPOLICY_LIST_MAX + 1);
	json_array_foreach (a, i, v) {
		char out[NETNAME_MAX + 1];
		const char *s = json_string_value(v);

		FUZZ_CHECK(s);
		if (star_ok && streq(s, "*")) {
			FUZZ_CHECK(i == 0);
			continue;
		}
		FUZZ_CHECK(netname_normalise(s, out, NULL) == 0 && streq(out, s));
		if (i > 0 && json_string_value(json_array_get(a, i - 1)))
			FUZZ_CHECK(strcmp(json_string_value(json_array_get(a, i - 1)), s) < 0);
	}
}

static void
check_coherent(const struct policy *p)
{
	FUZZ_CHECK(p->defaults.cpus >= 1 && p->defaults.cpus <= p->limits.max_cpus);
	FUZZ_CHECK(p->defaults.memory_mb >= 64 && p->defaults.memory_mb <= p->limits.max_memory_mb);
	FUZZ_CHECK(p->defaults.disk_mb >= 64 && p->defaults.disk_mb <= p->limits.max_disk_mb);
	FUZZ_CHECK(!p->limits.max_idle_timeout_secs ||
	           p->defaults.idle_timeout_secs <= p->limits.max_idle_timeout_secs);
	FUZZ_CHECK(!p->limits.max_lifetime_secs ||
	           p->defaults.lifetime_secs <= p->limits.max_lifetime_secs);
	FUZZ_CHECK(p->network.default_mode >= NET_NONE && p->network.default_mode < _NET_MODE_MAX);
	FUZZ_CHECK(p->network.ceiling >= NET_NONE && p->network.ceiling < _NET_MODE_MAX);
	FUZZ_CHECK(p->network.default_mode <= p->network.ceiling);
	FUZZ_CHECK(p->network.default_mode == NET_ALLOWLIST ||
	           json_array_size(p->network.default_allow) == 0);
	check_names(p->network.default_allow, false);
	check_names(p->network.default_deny, false);
	check_names(p->network.may_allow, true);
	FUZZ_CHECK(p->default_image && image_ref_valid(p->default_image));
	FUZZ_CHECK(!p->n_images || listed(p, p->default_image));
	for (size_t i = 0; i < p->n_images; i++)
		FUZZ_CHECK(image_ref_valid(p->images[i]));
	for (size_t i = 0; i < p->n_pools; i++) {
		FUZZ_CHECK(p->pools[i].size >= 1 && p->pools[i].size <= 64);
		FUZZ_CHECK(!p->pools[i].image || image_ref_valid(p->pools[i].image));
		FUZZ_CHECK(!p->n_images || !p->pools[i].image || listed(p, p->pools[i].image));
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct policy p, defaults;
	char *error = NULL;
	int r;

	if (size > 65536)
		return 0;
	if (policy_init_defaults(&p, 4) < 0)
		return 0;
	if (policy_init_defaults(&defaults, 4) < 0) {
		policy_done(&p);
		return 0;
	}
	r = policyfile_parse((const char *)data, size, &p, &error);
	if (r == 0) {
		struct policy first;

		FUZZ_CHECK(!error);
		check_coherent(&p);
		/* a second reading over fresh defaults keeps what the first gave; then the
		 * file read over its own result changes nothing */
		if (policy_init_defaults(&first, 4) == 0) {
			r = policyfile_parse((const char *)data, size, &first, &error);
			FUZZ_CHECK(r == 0 || r == -ENOMEM);
			if (r == 0) {
				FUZZ_CHECK(policy_equal(&p, &first));
				r = policyfile_parse((const char *)data, size, &p, &error);
				FUZZ_CHECK(r == 0 || r == -ENOMEM);
				FUZZ_CHECK(policy_equal(&p, &first));
			}
			policy_done(&first);
		}
	} else {
		FUZZ_CHECK(r == -EINVAL || r == -ENOMEM);
		FUZZ_CHECK(r == -ENOMEM || (error && positioned(error)));
		FUZZ_CHECK(policy_equal(&p, &defaults));
	}
	free(error);
	policy_done(&p);
	policy_done(&defaults);
	return 0;
}
