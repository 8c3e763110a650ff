/* proc.c: see proc.h. A child reports a failed setup or exec through a CLOEXEC status pipe,
 * so "command not found" and a bad cwd come back as an errno and a message; a successful
 * exec closes the pipe. Output is read into the ring whether or not a host is attached,
 * except that an attached host's window, when full, stops the reading (the writer blocks). */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include "agent.h"
#include "agentproto.h"
#include "frame.h"
#include "log.h"
#include "proc.h"
#include "request.h"
#include "tlv.h"
#include "tunnel.h"
#include "util.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define STDIN_MAX (16u << 20) /* queued stdin bytes per process */
#define RETAIN_EXITED 256     /* exited, unreleased processes kept before the oldest goes */

enum child_stage {
	STAGE_SETUP,
	STAGE_CWD,
	STAGE_EXEC,
};

struct child_status {
	int32_t err;
	int32_t stage;
};

struct child {
	char *const *argv;
	char *const *envp;
	const char *path; /* PATH of the new environment */
	const char *cwd;
	int slave; /* TTY, or -1 */
	int fds[3];
	int status;
	bool switch_ids;
	uid_t uid;
	gid_t gid;
};

static uint8_t iobuf[9 + CHUNK]; /* one read, or one OUTPUT payload */

static struct proc *
find(struct agent *a, uint32_t id)
{
	struct list_node *n;

	LIST_FOREACH (n, &a->procs) {
		struct proc *p = list_entry(n, struct proc, node);
		if (p->id == id)
			return p;
	}
	return NULL;
}

static bool
finished(const struct proc *p)
{
	return p->reaped && p->out.fd < 0 && p->err.fd < 0;
}

static bool
may_read(const struct proc *p)
{
	if (p->tunnel && !p->attached)
		return false; /* a tunnel loses nothing: the socket waits for the host */
	return !p->attached || ring_end(&p->ring) - p->acked < AP_WINDOW;
}

static bool
stdin_pending(const struct proc *p)
{
	return buf_avail(&p->stdin_q) > 0;
}

static void on_fd(struct loop_source *src, uint32_t events, void *data);

/* A source with no interest leaves epoll: a hang-up would otherwise be reported forever. */
static void
watch(struct proc *p, struct proc_fd *f, uint32_t events)
{
	if (f->fd < 0)
		return;
	if (!events) {
		loop_remove(&f->src);
		return;
	}
	if (f->src.fd < 0) {
		if (loop_add(p->agent->loop, &f->src, f->fd, events, on_fd, p) < 0)
			log_error("process %u: cannot watch fd: %m", p->id);
		return;
	}
	(void)loop_modify(&f->src, events);
}

static void
update(struct proc *p)
{
	uint32_t rd = may_read(p) ? EPOLLIN : 0;

	watch(p, &p->out, rd | (p->tty && stdin_pending(p) ? EPOLLOUT : 0));
	watch(p, &p->err, rd);
	watch(p, &p->in, stdin_pending(p) ? EPOLLOUT : 0);
}

static void
close_fd(struct proc_fd *f)
{
	loop_remove(&f->src);
	f->fd = safe_close(f->fd);
	f->eof = true;
}

/* The host learns what left the queue (STDIN_ACK), so that it keeps a bounded amount of stdin
 * in flight: a process's and a tunnel's socket's alike. */
static void
stdin_taken(struct proc *p)
{
	uint64_t queued = MIN((uint64_t)buf_avail(&p->stdin_q), p->stdin_received);
	uint64_t written = p->stdin_received - queued;

	/* (an agent standing in for one from before FEATURES acknowledges tunnels only) */
	if (!p->tunnel && !(p->agent->features & AP_FEAT_STDIN_WINDOW))
		return;
	if (written <= p->stdin_written)
		return;
	p->stdin_written = written;
	p->stdin_ack_due = true;
	agent_kick(p->agent);
}

/* Nobody reads the queue any more: its bytes are thrown away, and acknowledged as gone so
 * that the host does not wait for them. */
static void
stdin_drop(struct proc *p)
{
	buf_free(&p->stdin_q);
	stdin_taken(p);
}

static void
stdin_close(struct proc *p)
{
	stdin_drop(p);
	close_fd(&p->in);
}

static void
check_finished(struct proc *p)
{
	if (!finished(p))
		return;
	if (!p->tunnel) /* a tunnel's socket takes stdin until the host's EOF (half-close) */
		stdin_close(p);
	if (p->attached)
		agent_kick(p->agent);
}

static void
write_stdin(struct proc *p)
{
	int fd = p->tty ? p->out.fd : p->in.fd;

	while (fd >= 0 && stdin_pending(p)) {
		ssize_t n = write(fd, buf_head(&p->stdin_q), buf_avail(&p->stdin_q));
		if (n > 0) {
			buf_consume(&p->stdin_q, (size_t)n);
			stdin_taken(p);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		/* the reader is gone (EPIPE, a tunnel's peer reset) or the terminal hung up (EIO)
		 */
		stdin_drop(p);
		if (!p->tty)
			close_fd(&p->in);
	}
	if (!p->tty && p->stdin_eof && !stdin_pending(p)) {
		if (p->tunnel && p->in.fd >= 0)
			(void)shutdown(p->in.fd, SHUT_WR); /* the socket's read side goes on */
		close_fd(&p->in);
	}
	update(p);
}

static void
read_output(struct proc *p, struct proc_fd *f, uint8_t stream)
{
	size_t budget = CHUNK;
	ssize_t n;

	if (p->attached) {
		uint64_t inflight = ring_end(&p->ring) - p->acked;
		if (inflight >= AP_WINDOW) {
			update(p);
			return;
		}
		budget = (size_t)MIN((uint64_t)budget, AP_WINDOW - inflight);
	}
	n = read(f->fd, iobuf, budget);
	if (n > 0) {
		if (ring_write(&p->ring, stream, iobuf, (size_t)n) < 0)
			log_warning("process %u: output ring cannot grow, older output dropped",
			            p->id);
		if (p->attached)
			agent_kick(p->agent);
		if (!may_read(p))
			update(p);
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (p->tunnel)
		p->exit_code = n < 0; /* 0: an orderly EOF, 1: a reset or another error */
	/* 0, or EIO from a PTY master once every slave fd is closed */
	close_fd(f);
	if (p->tty)
		stdin_drop(p);
	check_finished(p);
}

static void
on_fd(struct loop_source *src, uint32_t events, void *data)
{
	struct proc *p = data;

	if (src == &p->in.src) {
		write_stdin(p);
		return;
	}
	/* a PTY master hangs up once no slave fd is open: nobody is left to read stdin */
	if (p->tty && (events & EPOLLHUP))
		stdin_drop(p);
	if (p->tty && (events & EPOLLOUT))
		write_stdin(p);
	if (src->fd >= 0 && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		read_output(p, src == &p->err.src ? &p->err : &p->out,
		            src == &p->err.src ? AP_STDERR : AP_STDOUT);
}

static void
free_mem(void *data)
{
	struct proc *p = data;

	ring_free(&p->ring);
	buf_free(&p->stdin_q);
	free(p->arg0);
	free(p);
}

/* Closes and unlinks now; the memory goes after this batch of events, which may still name
 * its sources. */
static void
proc_free(struct proc *p)
{
	close_fd(&p->out);
	close_fd(&p->err);
	close_fd(&p->in);
	list_remove(&p->node);
	if (loop_defer(p->agent->loop, free_mem, p) < 0)
		log_error("process %u: out of memory, its record leaks", p->id);
}

/* Keeps at most RETAIN_EXITED exited processes that no one attached to or released. */
static void
retain_bounded(struct agent *a)
{
	struct list_node *n, *t;
	size_t exited = 0;

	LIST_FOREACH (n, &a->procs) {
		struct proc *p = list_entry(n, struct proc, node);
		exited += !p->tunnel && finished(p);
	}
	LIST_FOREACH_SAFE (n, t, &a->procs) {
		struct proc *p = list_entry(n, struct proc, node);
		if (exited <= RETAIN_EXITED)
			break;
		if (!p->tunnel && finished(p) && !p->attached) {
			log_info("process %u: forgotten (more than %u exited processes unreleased)",
			         p->id, RETAIN_EXITED);
			proc_free(p);
			exited--;
		}
	}
}

/* How many processes the kernel's OOM killer has ended since boot (/proc/vmstat oom_kill),
 * or 0 when it does not say. */
static uint64_t
oom_kills(void)
{
	_cleanup_free_ char *text = NULL;
	const char *at;
	uint64_t n = 0;

	if (read_file_max("/proc/vmstat", 64u << 10, &text, NULL) < 0)
		return 0;
	at = strstr(text, "\noom_kill ");
	if (at && parse_u64_n(at + 10, strcspn(at + 10, "\n"), &n) < 0)
		n = 0;
	return n;
}

static void
exited(struct proc *p, int status)
{
	p->reaped = true;
	if (WIFEXITED(status))
		p->exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		p->exit_code = 128 + WTERMSIG(status);
	else
		p->exit_code = 255;
	/* a SIGKILL (137: its own, or the one its shell reports for a child) that nobody here
	 * sent while the OOM killer ended something: memory ran out. The count is the guest's,
	 * so a process killed from inside the sandbox (kill -9) while another one was OOM-killed
	 * is counted too: the sandbox ran out of memory either way */
	p->oom = p->exit_code == 137 && !p->host_killed && oom_kills() > p->oom_kills_start;
	check_finished(p);
	if (p->attached)
		agent_kick(p->agent);
}

void
proc_reap(struct agent *a)
{
	for (;;) {
		struct list_node *n;
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);

		if (pid <= 0)
			break;
		LIST_FOREACH (n, &a->procs) {
			struct proc *p = list_entry(n, struct proc, node);
			if (p->pid == pid && !p->reaped) {
				exited(p, status);
				break;
			}
		}
	}
	retain_bounded(a);
}

/* --- starting a process --- */

static int
env_set(char ***v, size_t *n, const char *kv)
{
	const char *eq = strchr(kv, '=');
	size_t klen;

	if (!eq || eq == kv)
		return 0; /* not "K=V": ignored */
	klen = (size_t)(eq - kv) + 1;
	for (size_t i = 0; i < *n; i++)
		if (strncmp((*v)[i], kv, klen) == 0) {
			char *c = strdup(kv);
			if (!c)
				return -ENOMEM;
			free((*v)[i]);
			(*v)[i] = c;
			return 0;
		}
	return strv_add(v, n, kv);
}

static const char *
env_get(char *const *v, const char *key)
{
	size_t k = strlen(key);

	for (; v && *v; v++)
		if (strncmp(*v, key, k) == 0 && (*v)[k] == '=')
			return *v + k + 1;
	return NULL;
}

/* The image environment, then HOME, USER, LOGNAME, then the request's (later wins). */
static int
build_env(struct agent *a, const struct request_exec *e, char ***ret)
{
	_cleanup_free_ char *home = strdup_printf("HOME=%s", a->home);
	char **v = NULL;
	size_t n = 0;
	int r = home ? 0 : -ENOMEM;

	for (size_t i = 0; r >= 0 && i < a->n_image_env; i++)
		r = env_set(&v, &n, a->image_env[i]);
	if (r >= 0)
		r = env_set(&v, &n, home);
	if (r >= 0)
		r = env_set(&v, &n, "USER=sandbox");
	if (r >= 0)
		r = env_set(&v, &n, "LOGNAME=sandbox");
	for (size_t i = 0; r >= 0 && i < e->nenv; i++)
		r = env_set(&v, &n, e->env[i]);
	if (r >= 0 && !env_get(v, "PATH"))
		r = env_set(&v, &n, "PATH=" DEFAULT_PATH);
	if (r >= 0 && e->tty && !env_get(v, "TERM"))
		r = env_set(&v, &n, "TERM=xterm-256color");
	if (r >= 0 && !v)
		r = strv_add(&v, &n, "PATH=" DEFAULT_PATH);
	if (r < 0) {
		strv_free(v);
		return r;
	}
	*ret = v;
	return 0;
}

static _noreturn_ void
child_fail(const struct child *c, enum child_stage stage, int err)
{
	struct child_status s = { .err = err, .stage = stage };

	(void)!write(c->status, &s, sizeof(s));
	_exit(127);
}

/* execvpe() searches the agent's PATH, not the new environment's: search here. */
static int
child_exec(const struct child *c)
{
	const char *file = c->argv[0];
	char full[AP_PATH_MAX];
	bool eacces = false;

	if (!*file)
		return ENOENT;
	if (strchr(file, '/')) {
		execve(file, c->argv, c->envp);
		return errno;
	}
	for (const char *d = c->path;;) {
		const char *e = strchrnul(d, ':');
		size_t dl = (size_t)(e - d);
		int k = snprintf(full, sizeof(full), "%.*s%s%s", (int)dl, d, dl ? "/" : "", file);

		if (k > 0 && (size_t)k < sizeof(full)) {
			execve(full, c->argv, c->envp);
			switch (errno) {
			case EACCES:
				eacces = true;
				break;
			case ENOENT:
			case ENOTDIR:
			case ENAMETOOLONG:
			case ESTALE:
			case ENODEV:
			case ETIMEDOUT:
			case ELOOP:
				break;
			default:
				return errno;
			}
		}
		if (!*e)
			break;
		d = e + 1;
	}
	return eacces ? EACCES : ENOENT;
}

static _noreturn_ void
child_run(const struct child *c)
{
	sigset_t none;

	/* the agent ignores SIGPIPE and blocks what its signalfd reads; neither is inherited */
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (setsid() < 0)
		child_fail(c, STAGE_SETUP, errno);
	if (c->slave >= 0) {
		if (ioctl(c->slave, TIOCSCTTY, 0) < 0)
			child_fail(c, STAGE_SETUP, errno);
		for (int i = 0; i < 3; i++)
			if (dup2(c->slave, i) < 0)
				child_fail(c, STAGE_SETUP, errno);
	} else {
		/* the agent keeps fds 0-2 open, so none of these is 0-2 itself */
		for (int i = 0; i < 3; i++)
			if (dup2(c->fds[i], i) < 0)
				child_fail(c, STAGE_SETUP, errno);
	}
	if (c->switch_ids && (setgroups(0, NULL) < 0 || setgid(c->gid) < 0 || setuid(c->uid) < 0))
		child_fail(c, STAGE_SETUP, errno);
	if (chdir(c->cwd) < 0)
		child_fail(c, STAGE_CWD, errno);
	child_fail(c, STAGE_EXEC, child_exec(c));
}

static int
open_pty(struct agent *a, const struct request_exec *e, int *ret_master, int *ret_slave)
{
	struct winsize ws = { .ws_row = e->rows, .ws_col = e->cols };
	_cleanup_close_ int master = -1, slave = -1;
	struct termios t;

	master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0)
		return negative_errno();
	slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (slave < 0) {
		char name[64];
		if (ptsname_r(master, name, sizeof(name)) != 0)
			return negative_errno();
		slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (slave < 0)
			return negative_errno();
	}
	if (ioctl(master, TIOCSWINSZ, &ws) < 0)
		return negative_errno();
	if (tcgetattr(slave, &t) == 0) {
		t.c_iflag |= IUTF8;
		(void)tcsetattr(slave, TCSANOW, &t);
	}
	if (a->switch_ids)
		(void)!fchown(slave, a->uid, (gid_t)-1);
	*ret_master = TAKE_FD(master);
	*ret_slave = TAKE_FD(slave);
	return 0;
}

static void
set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		(void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Forks and execs; on success the agent's ends are in p. On failure returns -errno and a
 * message for RESULT. */
static int
spawn(struct agent *a, const struct request_exec *e, struct proc *p, char **ret_msg)
{
	_cleanup_(strv_freep) char **envp = NULL;
	struct child c = { .argv = e->argv,
		           .cwd = e->cwd ? e->cwd : a->home,
		           .slave = -1,
		           .fds = { -1, -1, -1 },
		           .switch_ids = a->switch_ids,
		           .uid = a->uid,
		           .gid = a->gid };
	int sp[2] = { -1, -1 }, pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 };
	int master = -1, r;
	struct child_status st;
	ssize_t n;
	pid_t pid;

	r = build_env(a, e, &envp);
	if (r < 0)
		return r;
	c.envp = envp;
	c.path = env_get(envp, "PATH");
	if (e->tty)
		r = open_pty(a, e, &master, &c.slave);
	else if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 ||
	         pipe2(perr, O_CLOEXEC) < 0)
		r = negative_errno();
	if (r >= 0 && pipe2(sp, O_CLOEXEC) < 0)
		r = negative_errno();
	c.fds[0] = pin[0];
	c.fds[1] = pout[1];
	c.fds[2] = perr[1];
	c.status = sp[1];
	pid = r >= 0 ? fork() : 0;
	if (r >= 0 && pid == 0)
		child_run(&c);
	if (r >= 0 && pid < 0)
		r = negative_errno();
	safe_close(sp[1]);
	safe_close(c.slave);
	safe_close(pin[0]);
	safe_close(pout[1]);
	safe_close(perr[1]);
	if (r >= 0) {
		do
			n = read(sp[0], &st, sizeof(st));
		while (n < 0 && errno == EINTR);
		if (n == sizeof(st)) {
			/* it failed before exec and exits at once: collect it here */
			(void)waitpid(pid, NULL, 0);
			r = -(st.err > 0 ? st.err : EIO);
			if (st.stage == STAGE_CWD)
				*ret_msg = strdup_printf("cwd '%s': %s", c.cwd, strerror(st.err));
			else if (st.stage == STAGE_EXEC && st.err == ENOENT &&
			         !strchr(e->argv[0], '/'))
				*ret_msg = strdup_printf("'%s': command not found", e->argv[0]);
			else if (st.stage == STAGE_EXEC)
				*ret_msg = strdup_printf("'%s': %s", e->argv[0], strerror(st.err));
			else
				*ret_msg = strdup_printf("cannot set up '%s': %s", e->argv[0],
				                         strerror(st.err));
		}
	}
	safe_close(sp[0]);
	if (r < 0) {
		safe_close(master);
		safe_close(pin[1]);
		safe_close(pout[0]);
		safe_close(perr[0]);
		return r;
	}
	p->pid = pid;
	p->out.fd = e->tty ? master : pout[0];
	p->err.fd = perr[0];
	p->in.fd = pin[1];
	for (int i = 0; i < 3; i++) {
		struct proc_fd *f = i == 0 ? &p->out : i == 1 ? &p->err : &p->in;
		if (f->fd >= 0)
			set_nonblock(f->fd);
	}
	return 0;
}

void
proc_exec(struct agent *a, uint32_t chan, const void *payload, size_t len)
{
	struct request_exec e;
	_cleanup_free_ char *msg = NULL;
	struct proc *p;
	int r;

	r = request_parse_exec(payload, len, &e);
	if (r < 0) {
		(void)agent_result(a, chan, -r, "malformed EXEC");
		return;
	}
	if (e.port) {
		uint16_t port = e.port;
		request_exec_done(&e);
		tunnel_exec(a, chan, port);
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p || !(p->arg0 = strdup(e.argv[0]))) {
		free(p);
		request_exec_done(&e);
		(void)agent_result(a, chan, ENOMEM, NULL);
		return;
	}
	p->agent = a;
	p->tty = e.tty;
	p->keep = e.keep;
	p->out.fd = p->err.fd = p->in.fd = -1;
	p->out.src.fd = p->err.src.fd = p->in.src.fd = -1;
	ring_init(&p->ring, AP_RING);
	buf_init(&p->stdin_q, STDIN_MAX);
	r = spawn(a, &e, p, &msg);
	request_exec_done(&e);
	if (r < 0) {
		free(p->arg0);
		free(p);
		(void)agent_result(a, chan, -r, msg);
		return;
	}
	p->id = a->next_id++;
	p->started_ms = now_unix_ms();
	p->oom_kills_start = oom_kills();
	list_push_back(&a->procs, &p->node);
	update(p);
	(void)agent_result_u32(a, chan, AP_T_PID, p->id);
}

int
proc_add_tunnel(struct agent *a, int fd, uint32_t *ret_id)
{
	struct proc *p = calloc(1, sizeof(*p));

	if (!p || !(p->arg0 = strdup("tunnel"))) {
		free(p);
		safe_close(fd);
		return -ENOMEM;
	}
	p->agent = a;
	p->tunnel = true;
	p->reaped = true; /* no process: nothing to wait for, signal or kill */
	p->out.src.fd = p->err.src.fd = p->in.src.fd = -1;
	p->err.fd = -1;
	p->out.fd = fd;
	p->in.fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	ring_init(&p->ring, AP_RING);
	buf_init(&p->stdin_q, STDIN_MAX);
	if (p->in.fd < 0) {
		safe_close(fd);
		free_mem(p);
		return -ENOMEM;
	}
	p->id = a->next_id++;
	p->started_ms = now_unix_ms();
	list_push_back(&a->procs, &p->node);
	update(p);
	*ret_id = p->id;
	return 0;
}

/* --- frames for a running process --- */

/* A host that announced AP_FEAT_STDIN_WINDOW keeps at most AP_STDIN_WINDOW bytes beyond the
 * last STDIN_ACK; more is its bug: logged loudly, and the bytes still kept while the queue has
 * room. An older host sends without limit: the queue keeps STDIN_MAX and drops the rest. */
static void
stdin_queue(struct proc *p, const struct frame *f)
{
	bool windowed = p->agent->host_features & AP_FEAT_STDIN_WINDOW;

	if (windowed && !p->stdin_overrun &&
	    p->stdin_received - p->stdin_written > AP_STDIN_WINDOW) {
		p->stdin_overrun = true;
		log_error("protocol violation from the host: process %u: %llu stdin bytes in "
		          "flight, beyond the window of %u",
		          p->id, (unsigned long long)(p->stdin_received - p->stdin_written),
		          AP_STDIN_WINDOW);
	}
	if (buf_append(&p->stdin_q, f->payload, f->len) == 0)
		return;
	if (windowed)
		log_error("protocol violation from the host: process %u: stdin queue full, %u "
		          "bytes dropped",
		          p->id, f->len);
	else
		log_warning("process %u: stdin queue full, %u bytes dropped", p->id, f->len);
	stdin_taken(p); /* gone: acknowledged, so the host does not wait for them */
}

static void
on_stdin(struct proc *p, const struct frame *f)
{
	p->stdin_received += f->len;
	if (p->tty ? p->out.fd < 0 : (p->in.fd < 0 || p->stdin_eof)) {
		stdin_taken(p); /* nobody reads it any more: dropped, but acknowledged */
		return;
	}
	stdin_queue(p, f);
	if (f->flags & AP_F_EOF) {
		if (p->tty) {
			/* the line discipline's end-of-file character; a second one when a line
			 * is pending, since the first only ends that line */
			struct termios t;
			char veof[2];
			bool pending = f->len > 0 && f->payload[f->len - 1] != '\n';
			if (tcgetattr(p->out.fd, &t) == 0) {
				veof[0] = veof[1] = (char)t.c_cc[VEOF];
				(void)buf_append(&p->stdin_q, veof, pending ? 2 : 1);
			}
		} else {
			p->stdin_eof = true;
		}
	}
	write_stdin(p);
}

static void
on_signal(struct proc *p, const struct frame *f)
{
	uint32_t sig;

	if (f->len != 4 || (sig = be32_get(f->payload)) == 0 || sig >= (uint32_t)NSIG) {
		log_warning("process %u: malformed SIGNAL ignored", p->id);
		return;
	}
	/* after the reap, the group id could name someone else's group */
	if (p->reaped)
		return;
	if (sig == SIGKILL)
		p->host_killed = true;
	(void)kill(-p->pid, (int)sig);
}

static void
on_resize(struct proc *p, const struct frame *f)
{
	struct winsize ws = { 0 };

	if (f->len != 4) {
		log_warning("process %u: malformed RESIZE ignored", p->id);
		return;
	}
	ws.ws_row = be16_get(f->payload);
	ws.ws_col = be16_get(f->payload + 2);
	if (p->tty && p->out.fd >= 0)
		(void)ioctl(p->out.fd, TIOCSWINSZ, &ws);
}

static void
on_attach(struct proc *p, const struct frame *f)
{
	uint64_t from, start = ring_start(&p->ring), end = ring_end(&p->ring);

	if (f->len != 8) {
		log_warning("process %u: malformed ATTACH ignored", p->id);
		return;
	}
	from = be64_get(f->payload);
	p->drop = from < start ? start - from : 0;
	from = MIN(MAX(from, start), end);
	p->attached = true;
	p->exit_sent = false;
	p->sent = p->acked = from;
	update(p);
	agent_kick(p->agent);
}

static void
on_detach(struct proc *p, const struct frame *f)
{
	p->attached = false;
	p->drop = 0;
	update(p);
}

static void
on_ack(struct proc *p, const struct frame *f)
{
	uint64_t off;

	if (f->len != 8) {
		log_warning("process %u: malformed ACK ignored", p->id);
		return;
	}
	off = MIN(be64_get(f->payload), p->sent);
	if (!p->attached || off <= p->acked)
		return;
	p->acked = off;
	update(p);
	agent_kick(p->agent);
}

static void
on_release(struct proc *p, const struct frame *f)
{
	if (!p->reaped) { /* (a tunnel is released at any time: its socket closes) */
		log_warning("process %u: RELEASE of a running process ignored", p->id);
		return;
	}
	proc_free(p);
}

static void (*const frame_handlers[])(struct proc *, const struct frame *) = {
	[AP_STDIN] = on_stdin,     [AP_SIGNAL] = on_signal, [AP_RESIZE] = on_resize,
	[AP_ATTACH] = on_attach,   [AP_DETACH] = on_detach, [AP_ACK] = on_ack,
	[AP_RELEASE] = on_release,
};

void
proc_frame(struct agent *a, const struct frame *f)
{
	struct proc *p = find(a, f->chan);

	if (f->type >= ARRAY_SIZE(frame_handlers) || !frame_handlers[f->type])
		return;
	if (!p) {
		log_debug("frame 0x%02x for unknown process %u ignored", f->type, f->chan);
		return;
	}
	frame_handlers[f->type](p, f);
}

/* --- output to the host --- */

bool
proc_pump(struct proc *p)
{
	uint64_t start = ring_start(&p->ring), end = ring_end(&p->ring);
	struct agent *a = p->agent;
	uint8_t *h = iobuf;

	if (p->stdin_ack_due && agent_can_pump(a)) {
		be64_put(h, p->stdin_written);
		p->stdin_ack_due = false;
		(void)agent_send(a, AP_STDIN_ACK, 0, p->id, h, 8);
		return true;
	}
	if (!p->attached || !agent_can_pump(a))
		return false;
	if (p->sent < start) {
		/* cannot happen within the window; recover as a DROPPED all the same */
		p->drop += start - p->sent;
		p->sent = p->acked = start;
	}
	if (p->drop) {
		be64_put(h, p->drop);
		p->drop = 0;
		(void)agent_send(a, AP_DROPPED, 0, p->id, h, 8);
		return true;
	}
	if (p->sent < end) {
		uint64_t inflight = p->sent - p->acked;
		const uint8_t *data;
		uint8_t stream;
		size_t n;

		if (inflight >= AP_WINDOW)
			return false;
		n = ring_peek(&p->ring, p->sent, (size_t)MIN((uint64_t)CHUNK, AP_WINDOW - inflight),
		              &stream, &data);
		h[0] = stream;
		be64_put(h + 1, p->sent);
		memcpy(h + 9, data, n);
		if (agent_send(a, AP_OUTPUT, 0, p->id, h, 9 + n) < 0)
			return false;
		p->sent += n;
		return true;
	}
	if (finished(p) && !p->exit_sent) {
		be32_put(h, (uint32_t)p->exit_code);
		be64_put(h + 4, end);
		p->exit_sent = true;
		(void)agent_send(a, AP_EXIT, p->oom ? AP_F_OOM : 0, p->id, h, 12);
		return true;
	}
	return false;
}

void
proc_session_end(struct agent *a)
{
	struct list_node *n, *t;

	LIST_FOREACH_SAFE (n, t, &a->procs) {
		struct proc *p = list_entry(n, struct proc, node);
		if (p->tunnel) {
			proc_free(p);
			continue;
		}
		p->attached = false;
		p->drop = 0;
		/* the next session counts its stdin from 0 (what is queued is written unacked) */
		p->stdin_received = p->stdin_written = 0;
		p->stdin_ack_due = p->stdin_overrun = false;
		if (!p->keep && !p->reaped && !a->hold) {
			p->host_killed = true;
			(void)kill(-p->pid, SIGKILL);
		}
		update(p);
	}
}

/* --- PS and teardown --- */

static int
put_proc(struct buf *b, const struct proc *p)
{
	int r = tlv_put_u32(b, AP_T_PID, p->id);

	if (r >= 0)
		r = tlv_put_str(b, AP_T_ARG, p->arg0);
	if (r >= 0)
		r = tlv_put_u8(b, AP_T_TTY, p->tty);
	if (r >= 0)
		r = tlv_put_u8(b, AP_T_KEEP, p->keep);
	if (r >= 0)
		r = tlv_put_u8(b, AP_T_STATE, p->reaped ? AP_PROC_EXITED : AP_PROC_RUNNING);
	if (r >= 0 && p->reaped)
		r = tlv_put_u32(b, AP_T_EXIT_CODE, (uint32_t)p->exit_code);
	if (r >= 0 && p->oom)
		r = tlv_put_u8(b, AP_T_OOM, 1);
	if (r >= 0)
		r = tlv_put_u64(b, AP_T_STARTED_MS, (uint64_t)p->started_ms);
	if (r >= 0)
		r = tlv_put_u64(b, AP_T_SIZE, ring_end(&p->ring));
	return r;
}

void
proc_ps(struct agent *a, uint32_t chan)
{
	_cleanup_buf_ struct buf b = BUF_INIT(AP_FRAME_MAX);
	struct list_node *n;

	LIST_FOREACH (n, &a->procs) {
		if (list_entry(n, struct proc, node)->tunnel)
			continue;
		buf_reset(&b);
		if (put_proc(&b, list_entry(n, struct proc, node)) < 0 ||
		    agent_send(a, AP_PROC, 0, chan, b.data, b.len) < 0) {
			(void)agent_result(a, chan, ENOBUFS, NULL);
			return;
		}
	}
	(void)agent_result(a, chan, 0, NULL);
}

void
proc_signal_all(struct agent *a, int sig)
{
	struct list_node *n;

	LIST_FOREACH (n, &a->procs) {
		struct proc *p = list_entry(n, struct proc, node);
		if (!p->reaped)
			(void)kill(-p->pid, sig);
	}
}

bool
proc_all_reaped(const struct agent *a)
{
	const struct list_node *n;

	LIST_FOREACH (n, &a->procs)
		if (!list_entry(n, const struct proc, node)->reaped)
			return false;
	return true;
}

void
proc_free_all(struct agent *a)
{
	struct list_node *n, *t;

	LIST_FOREACH_SAFE (n, t, &a->procs) {
		struct proc *p = list_entry(n, struct proc, node);
		close_fd(&p->out);
		close_fd(&p->err);
		close_fd(&p->in);
		list_remove(&p->node);
		free_mem(p);
	}
}
