/* cgroup.h: a control group per VMM, under sandboxd's own group, with the sandbox's memory
 * (plus the VMM's own overhead) and CPU limits. cgroup v2 where the host has it delegated,
 * else the v1 memory, cpu and pids hierarchies. Best effort: a host without usable cgroups
 * gets VMs without host-side limits, and sandboxd says so once at startup. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Whether limits can be applied here; *ret_why says why not. Probed once. */
bool cgroup_available(const char **ret_why);
/* Creates the group "sandboxd/<name>" with the limits; name may have one level above it
 * ("<parent>/<id>"), made as needed. -errno. */
int cgroup_create(const char *name, uint64_t memory_bytes, unsigned cpus, unsigned max_pids);
/* Moves the calling process into the group (async-signal-safe: for a child before exec). */
int cgroup_enter(const char *name);
/* Removes the group (its processes must be gone). */
void cgroup_remove(const char *name);
/* Removes the empty groups under "sandboxd/<parent>": the ones of VMMs that are gone (left
 * when sandboxd was not there to remove them). Groups with processes stay. Returns how many
 * were removed. */
int cgroup_sweep(const char *parent);
