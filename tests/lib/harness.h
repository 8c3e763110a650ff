/* harness.h: what integration tests share: a private temporary directory, starting the real
 * sandboxd binaries and waiting for their startup line, raw HTTP over a unix socket or TCP,
 * and stopping everything they started. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct daemon_proc {
	pid_t pid;
	char dir[256];   /* private 0700 directory for this daemon */
	char state[300]; /* --state-dir */
	char sock[300];  /* --socket */
	char log[300];   /* stdout+stderr */
	int exit_status; /* its wait status when it exited during a start that failed, else -1 */
};

/* The binary under test: $SANDBOXD_FAKE (the daemon with the fake backend) etc. Exits 77
 * (skip) when the variable is missing. */
const char *harness_binary(const char *env_name);

/* Skips the running cmocka case because this machine lacks something it needs (a tool, root,
 * namespaces): says why on stderr ("skip: ..."), marks the case skipped and remembers that one
 * was. Call it before the case allocates anything: cmocka leaves the case without running its
 * cleanups. */
void harness_skip_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The exit code of a program whose cmocka groups returned failed (their sum): failed when
 * anything failed, else 77 when harness_skip_case skipped a case (so CTest, with
 * SKIP_RETURN_CODE 77, reports the test skipped rather than passed), else 0. */
int harness_exit_code(int failed);

/* Creates a 0700 directory under $TMPDIR or /tmp. */
int harness_tmpdir(char *out, size_t size);

/* Real VMs: the guest bundle the vm/setup fixture built once ($SANDBOX_VM_BUNDLE, a state
 * directory after `sandboxd setup`). Exits 77 (skip) when it is not there. */
const char *harness_vm_bundle(void);
/* Starts the product sandboxd (backend qemu, --accel tcg unless extra_args say otherwise) in a
 * new private directory whose state holds hard links to the bundle's kernel, initramfs and
 * root disk. */
int harness_start_vm(struct daemon_proc *p, const char *const *extra_args, const char *const *env);

/* Daemons started from now on are started through argv (NULL-terminated, kept by the
 * caller; NULL: directly): argv[0] with argv[1..], then the daemon's binary and its
 * arguments. The launcher must exec the daemon in its own process (its pid is the daemon's),
 * e.g. tests/egress/netns.sh exec-host NAME. */
void harness_set_launcher(const char *const *argv);

/* Starts binary with --state-dir and --socket in a new private directory plus extra args
 * (the product, $SANDBOXD, gets --egress off unless they say --egress: the machine's own
 * network is never a test's; every daemon gets --preview-listen off unless they say
 * --preview-listen; each --capacity-* they do not say is large: the machine's size
 * is not a test's either)
 * (NULL-terminated), environment additions env ("K=V", NULL-terminated, may be NULL).
 * Waits up to 10 s for the "serving API v1" line. 0, or -1 after printing the log. */
int harness_start(struct daemon_proc *p, const char *binary, const char *const *extra_args,
                  const char *const *env);
/* Starts again in the same directories (after a stop or a crash). */
int harness_restart(struct daemon_proc *p, const char *binary, const char *const *extra_args,
                    const char *const *env);
/* Sends sig (SIGTERM or SIGKILL) and waits; returns the exit status (or 128+signal). */
int harness_stop(struct daemon_proc *p, int sig);
/* Kills the VMMs of the daemon whose state directory is state that outlived it (VMs keep
 * running after sandboxd stops, by design, so a test must have deleted them all). Returns how
 * many there were. */
int harness_kill_vmms(const char *state);
/* Stops the daemon, kills its leftover VMMs, removes the directory. */
void harness_cleanup(struct daemon_proc *p);

/* Runs binary with args to completion (timeout 10 s); returns its exit code and what it
 * wrote to stdout and stderr (caller frees). */
int harness_run(const char *binary, const char *const *args, const char *const *env,
                char **ret_output);

/* harness_run for a program under test: fails the test when its output holds a sanitizer
 * report (under ASan/UBSan one can hide behind an exit code the test expects). */
int harness_run_checked(const char *binary, const char *const *args, const char *const *env,
                        char **ret_output);
/* Fails the test unless out contains needle (or, for _not_, unless it does not). */
void harness_expect_in(const char *out, const char *needle);
void harness_expect_not_in(const char *out, const char *needle);

/* The one HTTP client of the tests. Everything goes to a unix socket (sock_path) or, when
 * that is NULL, to TCP 127.0.0.1:port, on a connection of its own. */

/* A connected fd (caller closes), or -1. */
int harness_connect(const char *sock_path, int port);

/* Sends raw bytes and reads the answer until the server closes or timeout_ms have passed
 * since the start (an endless stream ends there too). Returns bytes read or -1. */
ssize_t harness_raw(const char *sock_path, int port, const void *req, size_t len,
                    char **ret_response, int timeout_ms);

/* A request: sent with Connection: close, the extra header lines, and the body as JSON with
 * its Content-Length (0 without a body). */
struct harness_req {
	const char *sock; /* the unix socket; NULL: TCP to 127.0.0.1:port */
	int port;
	const char *method;
	const char *path;
	const char *host;    /* the Host header; NULL: localhost */
	const char *headers; /* more header lines, each ending in "\r\n"; NULL: none */
	const char *body;    /* NULL: none */
	int timeout_ms;      /* for the whole answer; 0: 30 s */
};
/* Sends rq and reads the answer until the server closes (or the time is up). Returns the HTTP
 * status (-1: no answer) and *ret_response (optional) the whole answer ("" when none; caller
 * frees). */
int harness_request(const struct harness_req *rq, char **ret_response);
/* Sends rq and returns the connected fd without reading the answer (caller closes; read it
 * with harness_stream_read), or -1. */
int harness_request_open(const struct harness_req *rq);

/* A JSON request over the unix socket with Host: localhost. Returns the HTTP status (or -1)
 * and the body (caller frees). body may be NULL. */
int harness_http(const char *sock_path, const char *method, const char *path, const char *body,
                 char **ret_body);
/* harness_http bounded by timeout_ms (harness_http: 30 s), for requests that wait on a VM or
 * an image install; -1 when no answer came in time. */
int harness_http_timeout(const char *sock_path, const char *method, const char *path,
                         const char *body, int timeout_ms, char **ret_body);

/* harness_http with extra request headers (extra_headers: whole lines, each ending in
 * "\r\n", e.g. "Authorization: Bearer sbk_...\r\nX-CSRF-Token: ...\r\n"; may be NULL).
 * Returns the HTTP status (or -1); *ret_head gets the status line and the headers, up to and
 * without the blank line, *ret_body the body (each may be NULL; caller frees). */
int harness_http_headers(const char *sock_path, const char *method, const char *path,
                         const char *extra_headers, const char *body, char **ret_head,
                         char **ret_body);
/* The value of header name (case-insensitive) in a head from harness_http_headers: the
 * first one, or NULL (caller frees). */
char *harness_header(const char *head, const char *name);

/* A request whose answer is a stream: connects to the unix socket, sends method path with
 * extra_headers (as above) and no body, and returns the connected fd (caller closes) or -1.
 * Read the answer with harness_stream_read. */
int harness_stream_open(const char *sock_path, const char *method, const char *path,
                        const char *extra_headers);
/* Reads what fd delivers for up to timeout_ms, appending it to *buf (NUL-terminated,
 * reallocated; *len its length; both start as NULL and 0). Stops early once until (may be
 * NULL) is in *buf. Returns 1 when the peer closed the connection (end of file or reset), 0
 * when the time ran out or until appeared with it still open, -1 on an error. */
int harness_stream_read(int fd, int timeout_ms, const char *until, char **buf, size_t *len);

/* harness_http, expecting want_status (the test fails otherwise); returns the parsed JSON
 * body (NULL when empty; caller decrefs). Declared with an opaque type so users of the
 * harness that do not use jansson need not include it. */
struct json_t;
struct json_t *harness_json(const char *sock_path, const char *method, const char *path,
                            const char *body, int want_status);
struct json_t *harness_json_timeout(const char *sock_path, const char *method, const char *path,
                                    const char *body, int timeout_ms, int want_status);
/* harness_json with extra request headers hdrs ("Name: value\r\n"..., NULL: none, so the
 * unix-socket peer: the operator); when ret_head is given it gets the response head (caller
 * frees). */
struct json_t *harness_json_headers(const char *sock_path, const char *hdrs, const char *method,
                                    const char *path, const char *body, int want_status,
                                    char **ret_head);
/* A string member of a JSON object, or NULL. */
const char *harness_str(struct json_t *obj, const char *key);

/* A test CA and certificates in dir, made with the openssl tool: ca.pem/ca.key, a server
 * certificate server.pem/server.key for localhost and 127.0.0.1 (plus extra_san, e.g.
 * ",DNS:box.example", may be ""), and with client a client certificate client.pem/client.key
 * (CN=gateway). Keys are 0600. 0, or -1 (openssl's output is in dir/openssl.log). */
int harness_make_certs(const char *dir, const char *extra_san, bool client);

/* A process's memory from /proc/PID/status in KiB: field "VmRSS" (now) or "VmHWM" (its peak);
 * -1 when it cannot be read. */
long harness_proc_kib(pid_t pid, const char *field);
/* Starts the peak (VmHWM) of pid over from its RSS now (/proc/PID/clear_refs); false when the
 * kernel will not. */
bool harness_reset_peak(pid_t pid);

/* How many entries a directory holds (dot files aside); 0 when it cannot be read. */
int harness_count_entries(const char *dir);

/* Whether a file contains a string. */
bool harness_file_contains(const char *path, const char *needle);

/* Removes dir and all in it, unless HARNESS_KEEP is set (a failure's evidence); 0, or -1
 * having said so on stderr. */
int harness_rmtree(const char *dir);

/* $SANDBOX_GUESTD: sandbox-guestd, which the fake backend's agent runs on this host (ctest sets
 * it). Exits 77 (skip) when it is not set to an executable. */
const char *harness_need_guestd(void);
/* harness_start of $SANDBOXD_FAKE whose sandboxes' agent is guestd (SANDBOXD_FAKE_AGENT=guestd
 * in its environment, then env: NULL, or at most 14 more). */
int harness_start_fake_agent(struct daemon_proc *p, const char *guestd, const char *const *args,
                             const char *const *env);

/* A free TCP port on 127.0.0.1. */
int harness_free_port(void);
/* A TCP listener on 127.0.0.1 (caller closes), its port the kernel's choice; fails the cmocka
 * case when it cannot be made. */
int harness_tcp_listen(int *ret_port);

/* Runs argv (argv[0] searched in PATH) with env in a process group of its own, calling tick
 * (may be NULL) every 200 ms while it runs. The group is killed when it runs past timeout_s
 * (said on stderr), and afterwards in any case (a browser it left behind). Returns its exit
 * code, 128 + the signal that ended it, or -1. */
int harness_run_group(char *const *argv, char **env, int timeout_s, void (*tick)(void));

/* Deletes every sandbox the operator sees over sock (each DELETE waits up to 120 s). A failed
 * one is said on stderr; returns -1 when any would not go. */
int harness_delete_all(const char *sock);

/* What the browser tests need: Debian's Chromium (/usr/bin/chromium), node, and playwright-core
 * in web/node_modules (web: the repository's web/). Exits 77 (skip) naming what is missing. */
void harness_need_browser(const char *web);

/* This process's environment with vars ("K=V", NULL-terminated) after it, NULL-terminated:
 * for harness_run_group. The caller frees the array (not its strings); NULL without memory. */
char **harness_environ_with(const char *const *vars);
/* Runs `node DIR/SCRIPT` with vars ("K=V", NULL-terminated) added to the environment, through
 * harness_run_group; 0, or -1 having said on stderr that SCRIPT failed. */
int harness_run_node(const char *dir, const char *script, const char *const *vars, int timeout_s,
                     void (*tick)(void));

/* `sandboxd admin create EMAIL --role ROLE` with binary ($SANDBOXD or $SANDBOXD_FAKE) on a
 * daemon's state_dir, the password through a 0600 file in dir that is removed afterwards. 0,
 * or -1 having said why on stderr. */
int harness_admin_create(const char *binary, const char *state_dir, const char *dir,
                         const char *email, const char *password, const char *role);

/* The last lines of a daemon's log on stderr: what a failed test shows. */
void harness_print_log_tail(const struct daemon_proc *p, int lines);
