/* paths.c: see paths.h. */
#include <errno.h>
#include <pwd.h>
#include <string.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>
#include "paths.h"
#include "util.h"

const char *
paths_home_dir(void)
{
	const char *h = getenv("HOME");
	struct passwd *pw;

	if (h && h[0] == '/')
		return h;
	pw = getpwuid(getuid());
	return pw && pw->pw_dir ? pw->pw_dir : NULL;
}

char *
paths_default_state_dir(void)
{
	const char *xdg, *home;

	if (geteuid() == 0)
		return strdup("/var/lib/sandboxd");
	xdg = getenv("XDG_DATA_HOME");
	if (xdg && xdg[0] == '/')
		return strdup_printf("%s/sandboxd", xdg);
	home = paths_home_dir();
	return home ? strdup_printf("%s/.local/share/sandboxd", home) : NULL;
}

char *
paths_default_socket(void)
{
	const char *rt;
	_cleanup_free_ char *state = NULL;

	if (geteuid() == 0)
		return strdup("/run/sandboxd/sandboxd.sock");
	rt = getenv("XDG_RUNTIME_DIR");
	if (rt && rt[0] == '/')
		return strdup_printf("%s/sandboxd.sock", rt);
	/* no runtime dir (a plain ssh session, a container): beside the state */
	state = paths_default_state_dir();
	return state ? strdup_printf("%s/sandboxd.sock", state) : NULL;
}

int
paths_private_dir_prepare(const char *dir, const char *what, char **ret_why)
{
	struct stat st;
	int r;

	*ret_why = NULL;
	r = mkdir_p(dir, 0700);
	if (r < 0) {
		*ret_why = strdup_printf("%s '%s': cannot create it: %s", what, dir, strerror(-r));
		return r;
	}
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		*ret_why = strdup_printf("%s '%s' is not a directory", what, dir);
		return -ENOTDIR;
	}
	if (st.st_uid != geteuid()) {
		*ret_why = strdup_printf("%s '%s' belongs to uid %u, not to this uid "
		                         "%u; run sandboxd (and sandboxd admin) as that user",
		                         what, dir, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if (st.st_mode & 077) {
		*ret_why = strdup_printf("%s '%s' is open to group or others (mode "
		                         "%04o); run 'chmod 700 %s'",
		                         what, dir, (unsigned)(st.st_mode & 07777), dir);
		return -EPERM;
	}
	return 0;
}

int
paths_state_dir_prepare(const char *dir, char **ret_why)
{
	return paths_private_dir_prepare(dir, "state directory", ret_why);
}
