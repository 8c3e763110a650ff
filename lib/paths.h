/* paths.h: where sandboxd keeps things by default, shared by the daemon and the CLI so that
 * both agree on the local socket. As root: /run/sandboxd/sandboxd.sock and /var/lib/sandboxd;
 * as a user: $XDG_RUNTIME_DIR/sandboxd.sock and ~/.local/share/sandboxd. */
#pragma once

/* $HOME if it is absolute, else the password database's; NULL if neither is known. */
const char *paths_home_dir(void);

/* Newly allocated paths; NULL when out of memory or HOME is unknown. */
char *paths_default_state_dir(void);
char *paths_default_socket(void);

/* sandboxd's state directory, as sandboxd keeps it: made (0700, with its parents) when absent,
 * then refused unless it is a directory owned by this uid and closed to group and others (files
 * written by another user would lock sandboxd out; others must not read disks and records).
 * 0, or -errno with *ret_why (caller frees) saying what is wrong and what to do. */
int paths_state_dir_prepare(const char *dir, char **ret_why);
/* The same for another directory of sandboxd's (what names it in *ret_why: "audit log
 * directory"). */
int paths_private_dir_prepare(const char *dir, const char *what, char **ret_why);
