/* procstat.c: a process's CPU time and memory from /proc; see procstat.h. */
#include "procstat.h"
#include "util.h"

int
procstat_parse(const char *stat, const char *status, long ticks, uint64_t *ret_cpu_ns,
               uint64_t *ret_rss_bytes)
{
	/* after "PID (comm) ", which may hold spaces and parentheses: the state is field 3,
	 * utime and stime fields 14 and 15 */
	const char *p = strrchr(stat, ')'), *rss;
	uint64_t v[2], kib;
	int field = 3;
	size_t n;

	if (!p || p[1] != ' ' || !p[2] || ticks <= 0)
		return -EINVAL;
	if (p[2] == 'Z' || p[2] == 'X')
		return -ESRCH;
	for (p += 2; *p && field < 14; p++)
		if (*p == ' ')
			field++;
	for (int i = 0; i < 2; i++) {
		n = strcspn(p, " \n");
		if (n == 0 || parse_u64_n(p, n, &v[i]) < 0)
			return -EINVAL;
		p += n;
		if (*p == ' ')
			p++;
	}
	/* "VmRSS:\t  1234 kB"; a kernel thread has none */
	rss = strstr(status, "\nVmRSS:");
	if (!rss)
		return -EINVAL;
	rss += strlen("\nVmRSS:");
	rss += strspn(rss, " \t");
	n = strcspn(rss, " \t\n");
	if (parse_u64_n(rss, n, &kib) < 0 || !str_has_prefix(rss + n, " kB"))
		return -EINVAL;
	*ret_cpu_ns = (v[0] + v[1]) * (1000000000ull / (uint64_t)ticks);
	*ret_rss_bytes = kib * 1024;
	return 0;
}

int
procstat_read(pid_t pid, uint64_t *ret_cpu_ns, uint64_t *ret_rss_bytes)
{
	_cleanup_free_ char *stat = NULL, *status = NULL;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file_max(path, 4096, &stat, NULL) < 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (read_file_max(path, 16384, &status, NULL) < 0)
		return -ESRCH;
	return procstat_parse(stat, status, sysconf(_SC_CLK_TCK), ret_cpu_ns, ret_rss_bytes);
}
