/* cgroup.c: see cgroup.h. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include "cgroup.h"
#include "log.h"
#include "util.h"

#define V1_CONTROLLERS 3
static const char *const v1_names[V1_CONTROLLERS] = { "memory", "cpu", "pids" };

static bool probed, usable, v2;
static const char *why_not = "not probed";
/* the parent directory of our groups, per controller (v1) or one (v2) */
static char base[V1_CONTROLLERS][512];

/* Our own group's path in a hierarchy, from /proc/self/cgroup ("N:controllers:/path"). */
static int
own_path(const char *controller, char *out, size_t size)
{
	_cleanup_free_ char *text = NULL;
	char *line, *save = NULL;

	if (read_file_max("/proc/self/cgroup", 65536, &text, NULL) < 0)
		return -ENOENT;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		if ((controller && strstr(c1 + 1, controller) &&
		     (strlen(c1 + 1) == strlen(controller) || strchr(c1 + 1, ','))) ||
		    (!controller && c1[1] == '\0')) {
			snprintf(out, size, "%s", c2 + 1);
			return 0;
		}
	}
	return -ENOENT;
}

static int
write_str(const char *dir, const char *file, const char *value)
{
	char path[1200];
	int fd, r = 0;
	size_t n = strlen(value);

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, value, n) != (ssize_t)n)
		r = -errno;
	close(fd);
	return r;
}

static void
probe(void)
{
	char own[400];
	struct stat st;

	probed = true;
	if (geteuid() != 0) {
		why_not = "sandboxd does not run as root";
		return;
	}
	if (stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0) {
		v2 = true;
		if (own_path(NULL, own, sizeof(own)) < 0) {
			why_not = "no cgroup v2 path in /proc/self/cgroup";
			return;
		}
		snprintf(base[0], sizeof(base[0]), "/sys/fs/cgroup%s/sandboxd",
		         streq(own, "/") ? "" : own);
		if (mkdir(base[0], 0755) < 0 && errno != EEXIST) {
			why_not = "cannot create a cgroup v2 group (not delegated?)";
			return;
		}
		if (write_str(base[0], "cgroup.subtree_control", "+memory +cpu +pids") < 0) {
			why_not = "cannot enable the memory, cpu and pids controllers (cgroup v2)";
			return;
		}
		usable = true;
		return;
	}
	for (int i = 0; i < V1_CONTROLLERS; i++) {
		if (own_path(v1_names[i], own, sizeof(own)) < 0) {
			why_not = "a cgroup v1 controller (memory, cpu, pids) is missing";
			return;
		}
		snprintf(base[i], sizeof(base[i]), "/sys/fs/cgroup/%s%s/sandboxd", v1_names[i],
		         streq(own, "/") ? "" : own);
		if (mkdir(base[i], 0755) < 0 && errno != EEXIST) {
			/* the kernel has the hierarchy, but this /sys does not show it */
			why_not =
			        errno == ENOENT
			                ? "no cgroup hierarchy is mounted at /sys/fs/cgroup (under "
			                  "'ip netns exec', which mounts a /sys of its own?)"
			                : "cannot create cgroup v1 groups";
			return;
		}
	}
	usable = true;
}

bool
cgroup_available(const char **ret_why)
{
	if (!probed)
		probe();
	if (ret_why)
		*ret_why = why_not;
	return usable;
}

static void
group_dir(int i, const char *name, char *out, size_t size)
{
	int n = snprintf(out, size, "%s/%s", base[i], name);

	if (n < 0 || (size_t)n >= size)
		out[0] = '\0'; /* an impossible length: no group rather than a wrong one */
}

int
cgroup_create(const char *name, uint64_t memory_bytes, unsigned cpus, unsigned max_pids)
{
	char dir[1100], v[64];
	int r = 0;

	if (!cgroup_available(NULL))
		return -EOPNOTSUPP;
	for (int i = 0; i < (v2 ? 1 : V1_CONTROLLERS); i++) {
		group_dir(i, name, dir, sizeof(dir));
		/* the groups between ours and the parent ("<range>/" of "<range>/<id>") */
		for (char *slash = strchr(dir + strlen(base[i]) + 1, '/'); slash;
		     slash = strchr(slash + 1, '/')) {
			*slash = '\0';
			if (mkdir(dir, 0755) < 0 && errno != EEXIST)
				return negative_errno();
			/* cgroup v2: a group's children get only the controllers it enables */
			if (v2)
				(void)write_str(dir, "cgroup.subtree_control",
				                "+memory +cpu +pids");
			*slash = '/';
		}
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return negative_errno();
	}
	if (v2) {
		group_dir(0, name, dir, sizeof(dir));
		snprintf(v, sizeof(v), "%llu", (unsigned long long)memory_bytes);
		r |= write_str(dir, "memory.max", v);
		(void)write_str(dir, "memory.swap.max", "0"); /* absent without swap accounting */
		snprintf(v, sizeof(v), "%u 100000", cpus * 100000);
		r |= write_str(dir, "cpu.max", v);
		snprintf(v, sizeof(v), "%u", max_pids);
		r |= write_str(dir, "pids.max", v);
		return r < 0 ? -EIO : 0;
	}
	group_dir(0, name, dir, sizeof(dir));
	snprintf(v, sizeof(v), "%llu", (unsigned long long)memory_bytes);
	r |= write_str(dir, "memory.limit_in_bytes", v);
	group_dir(1, name, dir, sizeof(dir));
	r |= write_str(dir, "cpu.cfs_period_us", "100000");
	snprintf(v, sizeof(v), "%u", cpus * 100000);
	r |= write_str(dir, "cpu.cfs_quota_us", v);
	group_dir(2, name, dir, sizeof(dir));
	snprintf(v, sizeof(v), "%u", max_pids);
	r |= write_str(dir, "pids.max", v);
	return r < 0 ? -EIO : 0;
}

int
cgroup_enter(const char *name)
{
	char dir[1100];
	int r = 0;

	if (!usable)
		return -EOPNOTSUPP;
	for (int i = 0; i < (v2 ? 1 : V1_CONTROLLERS); i++) {
		group_dir(i, name, dir, sizeof(dir));
		if (write_str(dir, "cgroup.procs", "0") < 0)
			r = -EIO;
	}
	return r;
}

void
cgroup_remove(const char *name)
{
	char dir[1100];

	if (!usable)
		return;
	for (int i = 0; i < (v2 ? 1 : V1_CONTROLLERS); i++) {
		group_dir(i, name, dir, sizeof(dir));
		(void)rmdir(dir);
	}
}

int
cgroup_sweep(const char *parent, bool (*keep)(const char *name, void *data),
             void (*removed)(const char *name, void *data), void *data)
{
	char dir[1100], path[1400];
	int n = 0;

	if (!usable)
		return 0;
	for (int i = 0; i < (v2 ? 1 : V1_CONTROLLERS); i++) {
		DIR *d;
		struct dirent *de;
		group_dir(i, parent, dir, sizeof(dir));
		d = opendir(dir);
		if (!d)
			continue;
		while ((de = readdir(d))) {
			if (de->d_type != DT_DIR || de->d_name[0] == '.')
				continue;
			if (keep && keep(de->d_name, data))
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			/* a group with processes in it refuses (EBUSY): it stays; v1's hierarchies
			 * hold the same names, counted in the first */
			if (rmdir(path) == 0 && i == 0) {
				n++;
				if (removed)
					removed(de->d_name, data);
			}
		}
		closedir(d);
	}
	return n;
}

int
cgroup_parse_cpu_usec(const char *cpu_stat, uint64_t *ret)
{
	const char *line = cpu_stat;

	/* "usage_usec 1234\nuser_usec ..." */
	while (line && *line) {
		if (str_has_prefix(line, "usage_usec "))
			return parse_u64_n(line + 11, strcspn(line + 11, "\n"), ret);
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return -EINVAL;
}

/* Whether pid is among the group's processes (cgroup.procs: one pid a line). */
static bool
group_has(const char *dir, pid_t pid)
{
	_cleanup_free_ char *path = strdup_printf("%s/cgroup.procs", dir), *text = NULL;
	char *save = NULL;

	if (!path || read_file_max(path, 1u << 20, &text, NULL) < 0)
		return false;
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		uint64_t v;
		if (parse_u64(l, &v) == 0 && v == (uint64_t)pid)
			return true;
	}
	return false;
}

int
cgroup_usage(const char *name, pid_t pid, uint64_t *ret_cpu_ns, uint64_t *ret_memory_bytes)
{
	_cleanup_free_ char *cpu = NULL, *mem = NULL, *cpu_path = NULL, *mem_path = NULL;
	char dir[1100];
	uint64_t usec, bytes;
	size_t len;
	int r;

	if (!usable || !v2)
		return -EOPNOTSUPP;
	group_dir(0, name, dir, sizeof(dir));
	if (!dir[0] || !group_has(dir, pid))
		return -ENOENT;
	cpu_path = strdup_printf("%s/cpu.stat", dir);
	mem_path = strdup_printf("%s/memory.current", dir);
	if (!cpu_path || !mem_path)
		return -ENOMEM;
	if ((r = read_file_max(cpu_path, 4096, &cpu, NULL)) < 0 ||
	    (r = read_file_max(mem_path, 64, &mem, &len)) < 0)
		return r;
	while (len > 0 && mem[len - 1] == '\n')
		mem[--len] = '\0';
	if (cgroup_parse_cpu_usec(cpu, &usec) < 0 || parse_u64(mem, &bytes) < 0)
		return -EINVAL;
	*ret_cpu_ns = usec * 1000;
	*ret_memory_bytes = bytes;
	return 0;
}
