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
 * when sandboxd was not there to remove them). Groups with processes stay, and so does each
 * one keep (may be NULL) says to keep, asked by its name below parent (a VMM about to enter
 * it). removed (may be NULL) is told the name of each one removed. Returns how many were. */
int cgroup_sweep(const char *parent, bool (*keep)(const char *name, void *data),
                 void (*removed)(const char *name, void *data), void *data);

/* What the group of a VMM counted, cgroup v2 only: its CPU time (cpu.stat usage_usec) and
 * its memory (memory.current: its pages, the page cache it caused included). -EOPNOTSUPP
 * without cgroup v2 here, -ENOENT when pid is not in the group (its VMM could not enter it). */
int cgroup_usage(const char *name, pid_t pid, uint64_t *ret_cpu_ns, uint64_t *ret_memory_bytes);
/* The usage_usec of a cpu.stat text (pure: unit-tested). -EINVAL without one. */
int cgroup_parse_cpu_usec(const char *cpu_stat, uint64_t *ret);
