/* policyfile.h: the operator's policy file (`sandboxd --policy FILE`), YAML read with
 * libyaml's event API: default_image, images, defaults{...}, limits{...},
 * network{default{mode, allow, deny}, ceiling, may_allow}, pools[{image, size}]. Strict:
 * an unknown key (a misspelt "celing:"), an alias or anchor, a duplicate key, a value of the
 * wrong type or out of range, or a policy that contradicts itself (a default the ceiling or
 * the limits refuse, a default or pooled image outside images) is refused with the file's
 * line and column, and sandboxd does not start. Keys left out keep the embedded defaults.
 * It parses a file an operator wrote, not a guest's bytes, but it has a fuzz target too
 * (fuzz/fuzz-policy.c). */
#pragma once

#include <stddef.h>
#include "policy.h"

/* Reads the YAML text (len bytes) over p, which holds the embedded defaults
 * (policy_init_defaults). On error returns -EINVAL (or -ENOMEM) and *ret_error reads
 * "LINE:COLUMN: what is wrong" (1-based, newly allocated); p is then unchanged. */
int policyfile_parse(const char *text, size_t len, struct policy *p, char **ret_error);

/* Reads path (at most 1 MiB) with policyfile_parse; *ret_error is prefixed with the path. */
int policyfile_load(const char *path, struct policy *p, char **ret_error);
