/* apt.h: the Debian packages setup builds from (the cloud kernel, busybox-static), found,
 * downloaded and unpacked with the machine's own apt sources and tools. */
#pragma once

struct setup;

/* A package as apt knows it. query is what was asked for; depends_prefix, when set: the
 * package is the one the query (a metapackage) depends on whose name starts so (the kernel). */
struct debpkg {
	const char *query;
	const char *depends_prefix;
	char *name;
	char *version;
	char *arch;
	char *sha256;
	char *file; /* in the cache */
};
/* Frees what apt_resolve() filled in; query and depends_prefix stay. */
void debpkg_done(struct debpkg *d);

/* An apt step: 0 or -errno with *why (caller frees) saying what failed; -EIO when apt did not
 * know the package or could not fetch it. */
typedef int (*apt_fn)(struct setup *s, struct debpkg *d, char **why);

/* apt-cache: which package and version d->query means now; fills in d and d->file, where the
 * .deb is kept in <state>/cache/debs. */
int apt_resolve(struct setup *s, struct debpkg *d, char **why);
/* The .deb in the cache, checked against the archive's SHA256; downloaded when missing (or on
 * --force). Prints one step. */
int apt_download(struct setup *s, struct debpkg *d, char **why);

/* Runs fn; when apt fails (missing or stale lists) and we are root, runs `apt-get update` once
 * and tries again. A failure is recorded with setup_fail(), saying what to do; doing names the
 * step in it ("downloading"). */
int apt_with_update(struct setup *s, apt_fn fn, struct debpkg *d, const char *doing);

/* Unpacks d's .deb (dpkg-deb -x) into <scratch>/sub, replacing what was there; *ret_root is
 * that directory. A failure is recorded with setup_fail(). */
int deb_extract(struct setup *s, const struct debpkg *d, const char *sub, char **ret_root);
