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
cgroup_sweep(const char *parent)
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
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			/* a group with processes in it refuses (EBUSY): it stays */
			if (rmdir(path) == 0 && i == 0)
				n++;
		}
		closedir(d);
	}
	return n;
}
