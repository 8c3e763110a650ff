/* procstat.h: what a process uses, as the host's /proc says: CPU time (user and system, from
 * /proc/PID/stat) and resident memory (VmRSS, from /proc/PID/status). The VMM's usage when it
 * is in no cgroup of ours (cgroup.h reads the group's when it is). */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* Parses the text of /proc/PID/stat and /proc/PID/status (pure: unit-tested). ticks is
 * sysconf(_SC_CLK_TCK). -EINVAL when either is not what Linux writes. */
int procstat_parse(const char *stat, const char *status, long ticks, uint64_t *ret_cpu_ns,
                   uint64_t *ret_rss_bytes);
/* Reads them for pid. -ESRCH when it is gone (a zombie included). */
int procstat_read(pid_t pid, uint64_t *ret_cpu_ns, uint64_t *ret_rss_bytes);
