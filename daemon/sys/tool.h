/* tool.h: what sandboxd's setup and image builds share: running an external tool (apt,
 * mkfs.ext4, qemu-img...) as a child with an empty signal mask and only stdio, its output
 * kept and shown only when it fails; temporary directories; sha256 of files. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "macro.h"

struct tool {
	const char *cwd;  /* NULL: ours */
	int in_fd;        /* -1: /dev/null */
	int out_fd;       /* -1: stdout goes where stderr goes, or to out when capture_out */
	bool capture_out; /* keep stdout apart, in out */
	char *out;        /* stdout when capture_out (NUL-terminated); caller frees */
	char *output;     /* the end of what it wrote to stderr (and stdout); caller frees */
	int status;       /* exit status, 128 + signal, or -1 when it did not run */
};

/* How a child starts (spawn_child): its signal mask empty and every signal at its default, fds
 * 0..n_fds-1 as given (-1: /dev/null; SPAWN_INHERIT: ours as it is, e.g. stderr) and no
 * other fd, optionally in a process group of its own (stopping the group stops what it runs)
 * and a directory. envp NULL: our environment. */
#define SPAWN_FDS_MAX 8
#define SPAWN_INHERIT (-2)
struct spawn {
	const char *path;
	char *const *envp;
	const char *cwd;
	int fds[SPAWN_FDS_MAX];
	size_t n_fds; /* at least 3 */
	bool own_group;
};
/* Starts path with argv as sp says; 0 and *ret_pid, or -errno (nothing started). */
int spawn_child(const struct spawn *sp, const char *const *argv, pid_t *ret_pid);

/* Where the tool name is: the first executable name in PATH, then in the sbin and bin
 * directories (a daemon started with a short PATH still finds nft or mkfs.ext4); a name with a
 * '/' is taken as it is. 0 and *ret (caller frees), -ENOENT when it is nowhere. */
int tool_find(const char *name, char **ret);
/* Runs argv (argv[0] looked up in PATH, then the sbin directories) to completion. Returns 0
 * when it exited 0, -EIO when it failed (t->status and t->output say how), -ENOENT when the
 * tool is not installed, other -errno when it could not start. */
int tool_run(struct tool *t, const char *const *argv);
void tool_done(struct tool *t);
/* "'lz4 -dc' failed (exit 1): <its last lines, joined by ' | '>" or "'lz4' is not installed:
 * install it with 'apt-get install lz4'": one line. */
char *tool_failure(const struct tool *t, const char *const *argv, int r);
/* Runs a tool whose output nobody needs; on failure *ret_error says what happened. */
int run_quiet(const char *cwd, const char *const *argv, char **ret_error);

/* Removes path and everything below it; never follows symlinks. */
void rm_rf(const char *path);
/* A temporary directory parent/prefix-XXXXXX, and a cleanup that removes it. */
int make_tmpdir(const char *parent, const char *prefix, char **ret);
void tmpdir_cleanup(char **p);
#define _cleanup_tmpdir_ _cleanup_(tmpdir_cleanup)
/* mkdir -p, then the exact mode on the last component whatever the umask. */
int mkdir_mode(const char *path, mode_t mode);

bool is_file(const char *path); /* a regular file, not empty */
bool is_dir(const char *path);
uint64_t file_size(const char *path);
/* Copies src (at most 256 MiB) to dst, created with mode, replacing nothing; on failure dst
 * is gone again. */
int copy_file(const char *src, const char *dst, mode_t mode);

void hex_encode(const unsigned char *in, size_t n, char *out);
int sha256_hex(const void *data, size_t len, char out[static 65]);
int sha256_file(const char *path, char out[static 65]);
