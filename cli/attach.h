/* attach.h: one interactive session with a process over sbx-stream/1: its output (replayed,
 * then followed) onto our stdout and stderr as raw bytes, our stdin, Ctrl-C and window size to
 * it, and a raw terminal for a TTY process. run, exec, attach and shell are built on it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct cli;

/* What happens to our stdin. */
enum attach_stdin {
	ATTACH_STDIN_NONE,    /* nothing is read; the process's input is left as it is */
	ATTACH_STDIN_CLOSE,   /* the process's input ends at once */
	ATTACH_STDIN_FORWARD, /* what we read goes to the process; our EOF ends its input */
	ATTACH_STDIN_SHARE,   /* what we read goes to the process; its input is never ended */
};

struct attach_opts {
	const char *ref; /* the sandbox as the user named it, for messages */
	uint32_t pid;
	/* a raw terminal on stdin: keys go as bytes (Ctrl-C included), Ctrl-] detaches, and the
	 * process's window follows ours */
	bool tty;
	enum attach_stdin in;
	/* the first Ctrl-C is sent to the process as SIGINT and the second detaches; without
	 * it, the first detaches */
	bool forward_interrupt;
};

enum attach_end {
	ATTACH_EXITED,    /* the process ended: exit_code */
	ATTACH_DETACHED,  /* the user left (Ctrl-] or Ctrl-C); the process runs on */
	ATTACH_SIGNALLED, /* SIGTERM, SIGHUP or SIGQUIT, or our stdout closed (SIGPIPE): signo */
	ATTACH_BROKE,     /* the connection broke (already said) */
};

struct attach_result {
	enum attach_end end;
	int exit_code;
	int signo;   /* ATTACH_SIGNALLED; SIGINT for a detach by Ctrl-C */
	bool by_key; /* ATTACH_DETACHED by the detach key */
};

#define ATTACH_DETACH_KEY 0x1d /* Ctrl-] */

/* Attaches to process o->pid of sandbox o->ref and runs the session until the process exits,
 * the user detaches, a signal ends it, or the connection breaks. Returns 0 with *ret, or an
 * exit code when the attach could not begin (after saying why). The terminal is back in its
 * own mode when this returns. term_signals_init() must have been called. */
int attach_run(struct cli *cli, const struct attach_opts *o, struct attach_result *ret);
