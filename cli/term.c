/* term.c: see term.h. The signal handlers only write a byte (async-signal-safe); everything
 * else happens in the session's loop, which restores the terminal before it returns. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>
#include "term.h"
#include "util.h"

static int sig_pipe[2] = { -1, -1 };
static volatile sig_atomic_t interrupts;
static const char *volatile interrupt_msg;
static volatile size_t interrupt_len;

static struct termios saved;
static int raw_fd = -1;
static bool atexit_set;

static void
on_signal(int signo)
{
	int saved_errno = errno;
	unsigned char b = (unsigned char)signo;

	if (signo == SIGINT && ++interrupts == 1 && interrupt_msg)
		(void)!write(STDERR_FILENO, interrupt_msg, interrupt_len);
	/* a full pipe loses the byte, never blocks: the loop sees the rest */
	(void)!write(sig_pipe[1], &b, 1);
	errno = saved_errno;
}

int
term_signals_init(void)
{
	static const int caught[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH };
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART };

	if (sig_pipe[0] >= 0)
		return 0;
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < ARRAY_SIZE(caught); i++)
		if (sigaction(caught[i], &sa, NULL) < 0)
			return -errno;
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

int
term_signal_fd(void)
{
	return sig_pipe[0];
}

int
term_signal_next(void)
{
	unsigned char b;

	if (sig_pipe[0] < 0 || read(sig_pipe[0], &b, 1) != 1)
		return 0;
	return b;
}

unsigned
term_interrupts(void)
{
	return (unsigned)interrupts;
}

void
term_interrupt_message(const char *msg)
{
	/* the handler reads both: the length first, so it never sees a stale one */
	interrupt_msg = NULL;
	interrupt_len = msg ? strlen(msg) : 0;
	interrupt_msg = msg;
}

void
term_restore(void)
{
	if (raw_fd < 0)
		return;
	(void)tcsetattr(raw_fd, TCSADRAIN, &saved);
	raw_fd = -1;
}

int
term_raw(int fd)
{
	struct termios t;

	if (raw_fd >= 0)
		return 0;
	if (tcgetattr(fd, &saved) < 0)
		return -errno;
	t = saved;
	cfmakeraw(&t);
	/* TCSADRAIN, not TCSAFLUSH: keys typed before now are not thrown away */
	if (tcsetattr(fd, TCSADRAIN, &t) < 0)
		return -errno;
	raw_fd = fd;
	if (!atexit_set && atexit(term_restore) == 0)
		atexit_set = true;
	return 0;
}

bool
term_is_raw(void)
{
	return raw_fd >= 0;
}

int
term_size(int fd, unsigned short *rows, unsigned short *cols)
{
	struct winsize ws = { 0 };
	int r = ioctl(fd, TIOCGWINSZ, &ws) < 0 ? -errno : 0;

	if (r < 0 || ws.ws_row == 0 || ws.ws_col == 0) {
		r = r < 0 ? r : -EINVAL;
		*rows = 24;
		*cols = 80;
		return r;
	}
	*rows = ws.ws_row;
	*cols = ws.ws_col;
	return 0;
}
