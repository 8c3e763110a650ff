/* apt.c: see apt.h. apt-cache, apt-get and dpkg-deb run as children (see tool.h). */
#include <dirent.h>
#include <limits.h>
#include "apt.h"
#include "setup.h"
#include "tool.h"
#include "util.h"

void
debpkg_done(struct debpkg *d)
{
	free(d->name);
	free(d->version);
	free(d->arch);
	free(d->sha256);
	free(d->file);
}

/* The value of field in the first stanza of a Debian control text, or NULL. */
static char *
control_field(const char *text, const char *field)
{
	size_t fl = strlen(field);

	for (const char *p = text; p && *p && *p != '\n';) {
		if (strneq(p, field, fl) && p[fl] == ':') {
			const char *v = p + fl + 1;
			size_t n;

			v += strspn(v, " \t");
			n = strcspn(v, "\n");
			while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r'))
				n--;
			return strndup(v, n);
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return NULL;
}

/* Package names and versions end up in file names: keep them to what Debian allows. */
static bool
debian_token(const char *s)
{
	if (isempty(s) || strlen(s) > 128)
		return false;
	for (; *s; s++)
		if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') &&
		    !(*s >= '0' && *s <= '9') && !strchr(".+-~:", *s))
			return false;
	return true;
}

static int
apt_show(const char *pkg, char **ret, char **why)
{
	const char *argv[] = { "apt-cache", "show", "--no-all-versions", pkg, NULL };
	struct tool t = { .in_fd = -1, .out_fd = -1, .capture_out = true };
	int r = tool_run(&t, argv);

	if (r == 0 && isempty(t.out))
		r = -EIO;
	if (r < 0)
		*why = tool_failure(&t, argv, r);
	else
		*ret = TAKE_PTR(t.out);
	tool_done(&t);
	return r;
}

int
apt_resolve(struct setup *s, struct debpkg *d, char **why)
{
	_cleanup_free_ char *text = NULL, *deps = NULL, *name = NULL;
	int r;

	r = apt_show(d->query, &text, why);
	if (r < 0)
		return r;
	if (d->depends_prefix) {
		/* "linux-image-6.1.0-57-cloud-amd64 (= 6.1.192-3)": the first alternative that
		 * names a kernel image. */
		deps = control_field(text, "Depends");
		for (const char *p = deps; p && *p;) {
			size_t n;

			p += strspn(p, " ,|");
			n = strcspn(p, " ,|(");
			if (n > strlen(d->depends_prefix) &&
			    strneq(p, d->depends_prefix, strlen(d->depends_prefix))) {
				name = strndup(p, n);
				break;
			}
			p += n;
			p += strcspn(p, ",|");
		}
		if (!name) {
			*why = strdup_printf("'%s' depends on no %s* package (Depends: %s)",
			                     d->query, d->depends_prefix, deps ? deps : "none");
			return -EIO;
		}
		free(text);
		text = NULL;
		r = apt_show(name, &text, why);
		if (r < 0)
			return r;
	}
	debpkg_done(d);
	*d = (struct debpkg){ .query = d->query, .depends_prefix = d->depends_prefix };
	d->name = control_field(text, "Package");
	d->version = control_field(text, "Version");
	d->arch = control_field(text, "Architecture");
	d->sha256 = control_field(text, "SHA256");
	if (!debian_token(d->name) || !debian_token(d->version) || !debian_token(d->arch)) {
		*why = strdup_printf("apt-cache show '%s' gave no usable Package, Version and "
		                     "Architecture",
		                     name ? name : d->query);
		return -EBADMSG;
	}
	{
		_cleanup_buf_ struct buf b = BUF_INIT(PATH_MAX);
		(void)buf_printf(&b, "%s/%s_", s->deb_dir, d->name);
		for (const char *p = d->version; *p; p++)
			(void)(*p == ':' ? buf_puts(&b, "%3a") : buf_putc(&b, *p));
		if (buf_printf(&b, "_%s.deb", d->arch) < 0)
			return -ENAMETOOLONG;
		d->file = buf_steal(&b);
	}
	return d->file ? 0 : -ENOMEM;
}

int
apt_download(struct setup *s, struct debpkg *d, char **why)
{
	_cleanup_tmpdir_ char *dl = NULL;
	_cleanup_free_ char *spec = NULL, *got = NULL;
	char sha[65];
	struct dirent *de;
	DIR *dir;
	int r;

	if (!s->o->force && is_file(d->file) &&
	    (!d->sha256 || (sha256_file(d->file, sha) == 0 && streq(sha, d->sha256)))) {
		setup_step("%s %s: in the cache", d->name, d->version);
		return 0;
	}
	r = make_tmpdir(s->deb_dir, ".download", &dl);
	if (r < 0) {
		*why = strdup_printf("cannot create a directory in '%s': %s", s->deb_dir,
		                     strerror(-r));
		return r;
	}
	spec = strdup_printf("%s=%s", d->name, d->version);
	if (!spec)
		return -ENOMEM;
	r = run_quiet(dl, (const char *const[]){ "apt-get", "download", "-q", spec, NULL }, why);
	if (r < 0)
		return r;
	dir = opendir(dl);
	if (!dir)
		return negative_errno();
	while ((de = readdir(dir))) {
		size_t n = strlen(de->d_name);
		if (n > 4 && streq(de->d_name + n - 4, ".deb") && !got)
			got = strdup_printf("%s/%s", dl, de->d_name);
	}
	closedir(dir);
	if (!got) {
		*why = strdup_printf("'apt-get download %s' left no .deb behind", spec);
		return -EIO;
	}
	if (d->sha256 && (sha256_file(got, sha) < 0 || !streq(sha, d->sha256))) {
		*why = strdup_printf("the downloaded '%s' does not match the archive's SHA256",
		                     got);
		return -EBADMSG;
	}
	if (rename(got, d->file) < 0)
		return negative_errno();
	setup_step("%s %s: downloaded (%.1f MB)", d->name, d->version, file_size(d->file) / 1e6);
	return 0;
}

int
apt_with_update(struct setup *s, apt_fn fn, struct debpkg *d, const char *doing)
{
	for (int attempt = 0;; attempt++) {
		_cleanup_free_ char *why = NULL, *uwhy = NULL;
		int r = fn(s, d, &why);

		if (r >= 0)
			return r;
		if (r != -EIO || attempt > 0)
			return setup_fail(
			        s, r,
			        "%s '%s': %s\n  check the apt sources (/etc/apt/sources.list*) and "
			        "the network, then run 'sandboxd setup' again",
			        doing, d->query, why ? why : strerror(-r));
		if (geteuid() != 0)
			return setup_fail(
			        s, r,
			        "%s '%s': %s\n  the apt package lists are probably missing or "
			        "out of "
			        "date: run 'sudo sandboxd setup' (it runs 'apt-get update'), "
			        "or run "
			        "'sudo apt-get update' first",
			        doing, d->query, why ? why : strerror(-r));
		setup_step("apt: %s '%s' failed; running 'apt-get update' and trying again", doing,
		           d->query);
		r = run_quiet(NULL, (const char *const[]){ "apt-get", "update", "-q", NULL },
		              &uwhy);
		if (r < 0)
			return setup_fail(
			        s, r,
			        "%s\n  check the apt sources (/etc/apt/sources.list*) and the "
			        "network, "
			        "then run 'sandboxd setup' again",
			        uwhy ? uwhy : strerror(-r));
	}
}

int
deb_extract(struct setup *s, const struct debpkg *d, const char *sub, char **ret_root)
{
	_cleanup_free_ char *root = strdup_printf("%s/%s", s->scratch, sub), *why = NULL;
	int r;

	if (!root)
		return -ENOMEM;
	rm_rf(root);
	r = run_quiet(NULL, (const char *const[]){ "dpkg-deb", "-x", d->file, root, NULL }, &why);
	if (r < 0)
		return setup_fail(s, r,
		                  "unpacking '%s': %s\n  remove it and run 'sandboxd setup' again",
		                  d->file, why ? why : strerror(-r));
	*ret_root = TAKE_PTR(root);
	return 0;
}
