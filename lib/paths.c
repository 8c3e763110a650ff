/* paths.c: see paths.h. */
#include <pwd.h>
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
