/* term.h: the local terminal during an interactive session: raw mode that is restored on every
 * way out (a normal return, exit(), SIGTERM, SIGHUP), the window size, and the signals a
 * session cares about, delivered as bytes on a pipe so that one poll() loop sees them. */
#pragma once

#include <stdbool.h>

/* Catches SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGWINCH from now on (each arrival is one
 * byte on the pipe term_signal_fd() returns) and ignores SIGPIPE (a closed output is an
 * error to handle, not a death). Idempotent. 0 or -errno. */
int term_signals_init(void);
int term_signal_fd(void);
/* The next signal that arrived, or 0 when none is waiting. */
int term_signal_next(void);
/* How many SIGINTs arrived since term_signals_init() (also those still on the pipe). */
unsigned term_interrupts(void);
/* A line to print (from the handler) when the first SIGINT arrives, while the program cannot
 * react at once; NULL for none. msg must stay valid. */
void term_interrupt_message(const char *msg);

/* Puts the terminal on fd in raw mode (bytes pass as they are: Ctrl-C is a byte, not a
 * signal; no echo, no line editing, no output processing), after saving its settings. The
 * settings come back with term_restore(), at exit() and before a caught signal ends the
 * program. 0 or -errno (not a terminal). */
int term_raw(int fd);
/* Restores what term_raw() changed; does nothing when it changed nothing. */
void term_restore(void);
bool term_is_raw(void);

/* The window size of the terminal on fd; 0, or -errno (then rows 24, cols 80). */
int term_size(int fd, unsigned short *rows, unsigned short *cols);
