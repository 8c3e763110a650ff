/* agents.c: the built-in agents, their launch and their state in a sandbox; see agents.h.
 *
 * The launch runs once the sandbox's guest agent is ready after its first boot: with a repo,
 * `git clone -- URL /sandbox/home/work` as a plain process, then the agent as a kept TTY
 * process (cwd the clone, else the home). Each step's outcome is the run's state, committed
 * with the sandbox's row as an "agent" event, so streams see it and a create that waits
 * answers once the agent started or failed to. Credentials reach the agent only in the
 * sandbox's environment: never on a command line, never logged. */
#include <ctype.h>
#include "agents.h"
#include "events.h"
#include "log.h"
#include "proc.h"
#include "records.h"
#include "sandboxd.h"
#include "strv.h"
#include "util.h"

/* ---- the table ---- */

#define LIST(...) ((const char *const[]){ __VA_ARGS__, NULL })

static const struct agent_kind kinds[] = {
	{
	        .name = "claude",
	        .credentials = LIST("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"),
	        .hosts = LIST("api.anthropic.com"),
	        .interactive = LIST("claude"),
	        .headless = LIST("claude", "-p", "--dangerously-skip-permissions"),
	},
	{
	        .name = "codex",
	        .credentials = LIST("OPENAI_API_KEY"),
	        .hosts = LIST("api.openai.com"),
	        .interactive = LIST("codex"),
	        .headless = LIST("codex", "exec", "--full-auto"),
	},
	{
	        .name = "gemini",
	        .credentials = LIST("GEMINI_API_KEY", "GOOGLE_API_KEY"),
	        .hosts = LIST("generativelanguage.googleapis.com"),
	        .interactive = LIST("gemini"),
	        .headless = LIST("gemini", "--yolo", "-p"),
	},
	{
	        .name = "opencode",
	        .credentials = LIST("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"),
	        .hosts = LIST("api.anthropic.com", "api.openai.com",
	                      "generativelanguage.googleapis.com", "models.dev"),
	        .interactive = LIST("opencode"),
	        .headless = LIST("opencode", "run"),
	},
};

const struct agent_kind *
agent_kinds(size_t *ret_n)
{
	*ret_n = ARRAY_SIZE(kinds);
	return kinds;
}

const struct agent_kind *
agent_kind_find(const char *name)
{
	for (size_t i = 0; name && i < ARRAY_SIZE(kinds); i++)
		if (streq(kinds[i].name, name))
			return &kinds[i];
	return NULL;
}

const char *
agent_kind_names(void)
{
	static char names[128]; /* "claude, codex, gemini or opencode", from the table */

	if (!names[0])
		for (size_t i = 0, len = 0; i < ARRAY_SIZE(kinds); i++)
			len += (size_t)snprintf(names + len,
			                        sizeof(names) - MIN(len, sizeof(names)), "%s%s",
			                        i == 0                       ? ""
			                        : i + 1 == ARRAY_SIZE(kinds) ? " or "
			                                                     : ", ",
			                        kinds[i].name);
	return names;
}

static const char *const state_names[_AGENT_STATE_MAX] = {
	[AGENT_CLONING] = "cloning", [AGENT_STARTING] = "starting", [AGENT_RUNNING] = "running",
	[AGENT_EXITED] = "exited",   [AGENT_FAILED] = "failed",
};

const char *
agent_state_to_string(enum agent_state s)
{
	return s >= 0 && s < _AGENT_STATE_MAX ? state_names[s] : "invalid";
}

enum agent_state
agent_state_from_string(const char *s)
{
	int i = name_index(state_names, _AGENT_STATE_MAX, s);

	return i < 0 ? _AGENT_STATE_INVALID : (enum agent_state)i;
}

/* ---- the run ---- */

static void launch_free(struct agent_launch *l);

int
agent_run_new(const struct agent_kind *kind, const char *task, const char *repo, char *const *args,
              struct agent_run **ret)
{
	struct agent_run *run = calloc(1, sizeof(*run));

	if (!run)
		return -ENOMEM;
	run->kind = kind;
	run->task = task ? strdup(task) : NULL;
	run->repo = repo ? strdup(repo) : NULL;
	run->state = repo ? AGENT_CLONING : AGENT_STARTING;
	run->fresh = true;
	if ((task && !run->task) || (repo && !run->repo) ||
	    strv_copy(args, strv_length(args), &run->args) < 0) {
		agent_run_free(run);
		return -ENOMEM;
	}
	*ret = run;
	return 0;
}

struct agent_run *
agent_run_free(struct agent_run *run)
{
	if (!run)
		return NULL;
	launch_free(run->launch);
	free(run->task);
	free(run->repo);
	strv_free(run->args);
	free(run->message);
	free(run);
	return NULL;
}

json_t *
agent_run_to_json(const struct agent_run *run)
{
	json_t *args = json_array();

	for (size_t i = 0; args && run->args && run->args[i]; i++)
		json_array_append_new(args, json_string(run->args[i]));
	return json_pack("{s:s, s:s?, s:s?, s:o, s:s, s:o, s:o, s:s?}", "name", run->kind->name,
	                 "task", run->task, "repo", run->repo, "args", args ? args : json_array(),
	                 "state", agent_state_to_string(run->state), "pid",
	                 run->pid ? json_integer(run->pid) : json_null(), "exit_code",
	                 run->has_exit_code ? json_integer(run->exit_code) : json_null(), "message",
	                 run->message);
}

int
agent_run_from_json(const json_t *j, struct agent_run **ret)
{
	const char *name, *task, *repo, *state, *message;
	json_t *args, *pid, *code, *v, *jtask = NULL, *jrepo = NULL, *jmessage = NULL;
	_cleanup_strv_ char **argv = NULL;
	struct agent_run *run;
	const struct agent_kind *kind;
	size_t i, n = 0;
	int r;

	if (json_unpack((json_t *)j, "{s:s, s?o, s?o, s:o, s:s, s:o, s:o, s?o !}", "name", &name,
	                "task", &jtask, "repo", &jrepo, "args", &args, "state", &state, "pid", &pid,
	                "exit_code", &code, "message", &jmessage) < 0)
		return -EINVAL;
	/* each a string or null (or absent) */
	if ((jtask && !json_is_null(jtask) && !json_is_string(jtask)) ||
	    (jrepo && !json_is_null(jrepo) && !json_is_string(jrepo)) ||
	    (jmessage && !json_is_null(jmessage) && !json_is_string(jmessage)))
		return -EINVAL;
	task = json_string_value(jtask);
	repo = json_string_value(jrepo);
	message = json_string_value(jmessage);
	kind = agent_kind_find(name);
	if (!kind || agent_state_from_string(state) < 0 || !json_is_array(args) ||
	    (!json_is_null(pid) && (!json_is_integer(pid) || json_integer_value(pid) < 1 ||
	                            json_integer_value(pid) > UINT32_MAX)) ||
	    (!json_is_null(code) && !json_is_integer(code)))
		return -EINVAL;
	json_array_foreach (args, i, v)
		if (!json_is_string(v) || strv_add(&argv, &n, json_string_value(v)) < 0)
			return json_is_string(v) ? -ENOMEM : -EINVAL;
	r = agent_run_new(kind, task, repo, argv, &run);
	if (r < 0)
		return r;
	run->fresh = false;
	run->state = agent_state_from_string(state);
	run->pid = json_is_integer(pid) ? (uint32_t)json_integer_value(pid) : 0;
	run->has_exit_code = json_is_integer(code);
	run->exit_code = run->has_exit_code ? (int)json_integer_value(code) : 0;
	if (message && !(run->message = strdup(message))) {
		agent_run_free(run);
		return -ENOMEM;
	}
	*ret = run;
	return 0;
}

bool
agent_run_pending(const struct agent_run *run)
{
	return run && (run->state == AGENT_CLONING || run->state == AGENT_STARTING);
}

int
agent_repo_host(const char *repo, char *host, size_t size)
{
	const char *p;
	size_t n;

	if (str_has_prefix(repo, "https://"))
		p = repo + 8;
	else if (str_has_prefix(repo, "http://"))
		p = repo + 7;
	else
		return -EINVAL;
	n = strcspn(p, "/?#");
	/* no user or password: a credential in a URL would be on git's command line */
	if (memchr(p, '@', n))
		return -EINVAL;
	/* a port is the proxy's business, not the allowlist's */
	if (memchr(p, ':', n))
		n = (size_t)((const char *)memchr(p, ':', n) - p);
	if (n == 0 || n >= size)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (!isalnum(c) && c != '.' && c != '-')
			return -EINVAL;
		host[i] = (char)tolower(c);
	}
	host[n] = '\0';
	return 0;
}

json_t *
agent_own_hosts(const struct agent_kind *kind, const char *repo)
{
	json_t *a = json_array();
	char host[256];

	for (size_t i = 0; a && kind->hosts[i]; i++)
		if (json_array_append_new(a, json_string(kind->hosts[i])) < 0)
			a = (json_decref(a), NULL);
	if (a && repo && agent_repo_host(repo, host, sizeof(host)) >= 0 &&
	    json_array_append_new(a, json_string(host)) < 0)
		a = (json_decref(a), NULL);
	return a;
}

/* ---- the launch ---- */

#define CLONE_TAIL 400

struct agent_launch {
	struct sandboxd *d;
	struct sandbox *sb;
	struct agent *agent;
	struct agent_req *req;    /* the exec under way */
	struct proc_reader clone; /* the clone's output and exit, while it runs */
	char tail[CLONE_TAIL + 1];
	size_t tail_len;
};

static void
launch_free(struct agent_launch *l)
{
	if (!l)
		return;
	if (l->req)
		agent_cancel(l->req);
	proc_reader_remove(&l->clone);
	free(l);
}

/* Sets the run's state (message NULL: none) and, with commit, persists it with the row as an
 * "agent" event and wakes the sandbox's waiters. */
static void
set_state(struct sandboxd *d, struct sandbox *sb, enum agent_state state, const char *message,
          bool commit)
{
	struct agent_run *run = sb->agent_run;
	int r;

	log_info("sandbox '%s': agent %s %s -> %s%s%s", sb->id, run->kind->name,
	         agent_state_to_string(run->state), agent_state_to_string(state),
	         message ? ": " : "", message ? message : "");
	run->state = state;
	free(run->message);
	run->message = message ? strdup(message) : NULL;
	if (!commit) {
		(void)sandbox_refresh_json(sb);
		return;
	}
	r = sandbox_commit(
	        d, sb, false, "agent",
	        json_pack("{s:s, s:s, s:o, s:o, s:s?}", "name", run->kind->name, "state",
	                  agent_state_to_string(state), "pid",
	                  run->pid ? json_integer(run->pid) : json_null(), "exit_code",
	                  run->has_exit_code ? json_integer(run->exit_code) : json_null(),
	                  "message", run->message));
	if (r < 0)
		log_warning("sandbox '%s': cannot record its agent's state: %s", sb->id,
		            strerror(-r));
	sandbox_notify_waiters(sb);
}

static void
launch_failed(struct agent_launch *l, const char *message)
{
	struct sandboxd *d = l->d;
	struct sandbox *sb = l->sb;

	sb->agent_run->launch = NULL;
	launch_free(l);
	set_state(d, sb, AGENT_FAILED, message, true);
}

/* The request, or NULL with *ret_why saying why it was not sent. */
static struct agent_req *
exec(struct agent_launch *l, char *const *argv, const char *cwd, bool tty, agent_done_fn done,
     const char **ret_why)
{
	/* all its values: a create just made it (argv NULL: out of memory already) */
	char **env = argv ? sandbox_env_strv(l->sb, NULL) : NULL;
	struct agent_exec_spec spec = {
		.argv = argv,
		.env = env,
		.cwd = cwd,
		.tty = tty,
		.rows = 24,
		.cols = 80,
		.keep = tty,
	};
	struct agent_req *r = env ? agent_exec(l->agent, &spec, done, l) : NULL;

	if (!r)
		*ret_why = !env                     ? "out of memory"
		           : !agent_ready(l->agent) ? "the sandbox's guest agent is not connected"
		                                    : "the guest agent refused the request (its "
		                                      "command line and environment too large?)";
	strv_free_erase(env);
	return r;
}

/* The agent's command line: the table's, the args, and in headless mode the task. */
static char **
agent_argv(const struct agent_run *run)
{
	const char *const *base = run->task ? run->kind->headless : run->kind->interactive;
	char **argv = NULL;
	size_t n = 0;
	int r = 0;

	for (size_t i = 0; r >= 0 && base[i]; i++)
		r = strv_add(&argv, &n, base[i]);
	for (size_t i = 0; r >= 0 && run->args && run->args[i]; i++)
		r = strv_add(&argv, &n, run->args[i]);
	if (r >= 0 && run->task)
		r = strv_add(&argv, &n, run->task);
	return r < 0 ? strv_free(argv) : argv;
}

static void
agent_started(void *data, const struct agent_result *res)
{
	struct agent_launch *l = data;
	struct sandboxd *d = l->d;
	struct sandbox *sb = l->sb;
	struct agent_run *run = sb->agent_run;
	_cleanup_strv_ char **argv = agent_argv(run);
	struct proc *p = NULL;
	int r;

	l->req = NULL;
	if (res->err) {
		_cleanup_free_ char *why =
		        strdup_printf("starting %s failed: %s", run->kind->name,
		                      res->message ? res->message : strerror(res->err));
		launch_failed(l, why ? why : "starting the agent failed");
		return;
	}
	r = argv ? proc_new(d, sb, l->agent, res->pid, argv, true, true, now_unix_ms(), &p)
	         : -ENOMEM;
	if (r < 0) {
		(void)agent_signal(l->agent, res->pid, SIGKILL);
		launch_failed(l, "sandboxd could not follow the agent's process");
		return;
	}
	proc_audit_started(d, sb, res->pid, argv, run->repo ? AGENT_WORKDIR : NULL, NULL, true);
	run->launch = NULL;
	launch_free(l);
	run->pid = res->pid;
	set_state(d, sb, AGENT_RUNNING, NULL, true);
	/* with --keep-sandboxes its command line goes in the record, as any kept process's */
	r = records_save(d, sb);
	if (r < 0)
		log_warning("sandbox '%s': agent %u: cannot write its record: %s", sb->id, res->pid,
		            strerror(-r));
}

static void
start_agent(struct agent_launch *l)
{
	struct agent_run *run = l->sb->agent_run;
	_cleanup_strv_ char **argv = agent_argv(run);
	const char *why = NULL;

	if (run->state != AGENT_STARTING)
		set_state(l->d, l->sb, AGENT_STARTING, NULL, true);
	l->req = exec(l, argv, run->repo ? AGENT_WORKDIR : NULL, true, agent_started, &why);
	if (!l->req)
		launch_failed(l, why);
}

static void
clone_output(struct proc_reader *r, int stream _unused_, const void *bytes, size_t len)
{
	struct agent_launch *l = r->data_ptr;

	/* the newest CLONE_TAIL bytes: git's last words say why it failed */
	if (len >= CLONE_TAIL) {
		memcpy(l->tail, (const char *)bytes + len - CLONE_TAIL, CLONE_TAIL);
		l->tail_len = CLONE_TAIL;
		return;
	}
	if (l->tail_len + len > CLONE_TAIL) {
		size_t drop = l->tail_len + len - CLONE_TAIL;
		memmove(l->tail, l->tail + drop, l->tail_len - drop);
		l->tail_len -= drop;
	}
	memcpy(l->tail + l->tail_len, bytes, len);
	l->tail_len += len;
}

/* The last non-empty line of the clone's output, cleaned for a message. */
static const char *
clone_last_line(struct agent_launch *l)
{
	char *s = l->tail, *line;

	l->tail[l->tail_len] = '\0';
	for (size_t i = 0; i < l->tail_len; i++)
		if ((unsigned char)s[i] < 0x20 && s[i] != '\n')
			s[i] = s[i] == '\r' ? '\n' : ' ';
	while (l->tail_len && s[l->tail_len - 1] == '\n')
		s[--l->tail_len] = '\0';
	line = strrchr(s, '\n');
	return line ? line + 1 : s;
}

static void
clone_exited(struct proc_reader *r, int code)
{
	struct agent_launch *l = r->data_ptr;
	_cleanup_free_ char *why = NULL;

	if (code == 0) {
		start_agent(l);
		return;
	}
	why = strdup_printf("git clone failed (exit code %d): %s", code, clone_last_line(l));
	launch_failed(l, why ? why : "git clone failed");
}

static void
clone_started(void *data, const struct agent_result *res)
{
	struct agent_launch *l = data;
	char *argv[] = { "git", "clone", "--", l->sb->agent_run->repo, AGENT_WORKDIR, NULL };
	struct proc *p = NULL;
	int r;

	l->req = NULL;
	if (res->err) {
		_cleanup_free_ char *why =
		        strdup_printf("git clone could not start: %s",
		                      res->message ? res->message : strerror(res->err));
		launch_failed(l, why ? why : "git clone could not start");
		return;
	}
	r = proc_new(l->d, l->sb, l->agent, res->pid, argv, false, false, now_unix_ms(), &p);
	if (r < 0) {
		(void)agent_signal(l->agent, res->pid, SIGKILL);
		launch_failed(l, "sandboxd could not follow git clone");
		return;
	}
	(void)agent_stdin(l->agent, res->pid, NULL, 0, true);
	proc_audit_started(l->d, l->sb, res->pid, argv, NULL, NULL, false);
	l->clone =
	        (struct proc_reader){ .data = clone_output, .exited = clone_exited, .data_ptr = l };
	proc_reader_add(p, &l->clone, 0);
}

static void
launch(struct sandboxd *d, struct sandbox *sb, struct agent *agent)
{
	struct agent_run *run = sb->agent_run;
	struct agent_launch *l = calloc(1, sizeof(*l));
	const char *why = NULL;

	if (!l) {
		set_state(d, sb, AGENT_FAILED, "out of memory", true);
		return;
	}
	l->d = d;
	l->sb = sb;
	l->agent = agent;
	list_init(&l->clone.link);
	run->launch = l;
	if (!run->repo) {
		start_agent(l);
		return;
	}
	{
		char *argv[] = { "git", "clone", "--", run->repo, AGENT_WORKDIR, NULL };
		l->req = exec(l, argv, NULL, false, clone_started, &why);
	}
	if (!l->req)
		launch_failed(l, why);
}

void
agents_ready(struct sandboxd *d, struct sandbox *sb, struct agent *agent)
{
	struct agent_run *run = sb->agent_run;

	if (!run || run->launch || !agent_run_pending(run) || sb->state != SANDBOX_RUNNING)
		return;
	if (!run->fresh) {
		set_state(d, sb, AGENT_FAILED,
		          "sandboxd restarted while the agent was being launched", true);
		return;
	}
	run->fresh = false;
	launch(d, sb, agent);
}

void
agents_vm_gone(struct sandboxd *d, struct sandbox *sb)
{
	struct agent_run *run = sb->agent_run;

	if (!run)
		return;
	if (run->launch) {
		launch_free(run->launch);
		run->launch = NULL;
	}
	if (agent_run_pending(run) && !run->fresh)
		set_state(d, sb, AGENT_FAILED, "the sandbox stopped before the agent started",
		          false);
	else if (run->state == AGENT_RUNNING)
		set_state(d, sb, AGENT_EXITED, "the sandbox stopped under it", false);
}

void
agents_proc_exited(struct sandboxd *d, struct sandbox *sb, uint32_t pid, int code)
{
	struct agent_run *run = sb->agent_run;

	if (!run || run->state != AGENT_RUNNING || run->pid != pid)
		return;
	run->has_exit_code = true;
	run->exit_code = code;
	set_state(d, sb, AGENT_EXITED, NULL, true);
}

void
agents_procs_listed(struct sandboxd *d, struct sandbox *sb)
{
	struct agent_run *run = sb->agent_run;

	if (run && run->state == AGENT_RUNNING && !proc_find(sb, run->pid))
		set_state(d, sb, AGENT_EXITED, "the guest no longer has its process", true);
}
