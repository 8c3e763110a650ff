/* main.c: sandbox-cli, the command-line client of sandboxd's API v1. Parses the global
 * options, finds the verb in the table below and runs it; the verbs live in cmd-*.c. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <stdlib.h>
#include "cli.h"
#include "output.h"
#include "paths.h"
#include "util.h"

#ifndef SANDBOX_CLI_VERSION
#define SANDBOX_CLI_VERSION "0.1.0-unknown"
#endif

static int cmd_version(struct cli *cli, int argc, char **argv);
static int cmd_help(struct cli *cli, int argc, char **argv);

static const struct verb verbs[] = {
	{ .name = "context",
	  .usage = "context add|use|ls|rm ...",
	  .summary = "Manage contexts: named endpoints with their credentials.",
	  .help = "  context add NAME ENDPOINT [--token-file FILE] [--ca FILE] [--use]\n"
	          "  context use NAME\n"
	          "  context ls\n"
	          "  context rm NAME\n"
	          "\n"
	          "See 'sandbox-cli context add --help' and so on.\n",
	  .run = cmd_context },
	{ .name = "doctor",
	  .usage = "doctor",
	  .summary = "Check that the endpoint answers; describe the server and who you are.",
	  .run = cmd_doctor },
	{ .name = "list",
	  .usage = "list [--all] [--state STATE]... [--label KEY=VALUE]...",
	  .summary = "List your sandboxes, newest first (terminated ones with --all).",
	  .help = "  -a, --all          terminated sandboxes too (the server keeps them for a "
	          "while:\n"
	          "                     its --forget-after)\n"
	          "  --state STATE      only sandboxes in this state: pending, starting, running,\n"
	          "                     stopping, stopped, suspending, suspended, resuming,\n"
	          "                     failed or terminated\n"
	          "                     (repeatable: any may match)\n"
	          "  --label KEY=VALUE  only sandboxes with this label (repeatable: all must "
	          "match)\n",
	  .run = cmd_list },
	{ .name = "inspect",
	  .usage = "inspect REF",
	  .summary = "Show one sandbox (by id or name) as JSON.",
	  .help = "A terminated sandbox is found by its id only; names belong to live ones.\n",
	  .run = cmd_inspect },
	{ .name = "create",
	  .usage = "create [options]",
	  .summary = "Create a sandbox, wait until it runs, and print its id.",
	  .help = "  --name NAME          a name (lowercase letters, digits and -)\n"
	          "  --image IMAGE        the image (default: the server's)\n"
	          "  --cpus N             virtual CPUs\n"
	          "  --memory MB          memory in MiB\n"
	          "  --disk MB            disk in MiB\n"
	          "  --network MODE       none or allowlist (default: the server's); open where\n"
	          "                       the server offers it (sandboxd never does)\n"
	          "  --allow NAME         a host name it may reach over http(s), such as\n"
	          "                       example.org or *.example.org (repeatable; means\n"
	          "                       --network allowlist)\n"
	          "  --deny NAME          a host name it may never reach (repeatable)\n"
	          "  --label KEY=VALUE    a label (repeatable)\n"
	          "  --env NAME=VALUE     an environment variable (repeatable); --env NAME takes\n"
	          "                       the value from your environment, off the command line\n"
	          "  --idle-timeout SECS  stop it after this long without use, its disk kept\n"
	          "                       (0: never); nothing running in it, no output, no\n"
	          "                       network and nobody attached is what idle means\n"
	          "  --idle-action ACTION what the idle timeout does: suspend (its memory and\n"
	          "                       disk are kept; the default where the server can\n"
	          "                       suspend), stop (its disk is kept; the default\n"
	          "                       elsewhere) or terminate (its disk is discarded)\n"
	          "  --lifetime SECS      end it this long after creation (0: never)\n"
	          "  --no-wait            return at once, before it runs\n"
	          "\n"
	          "Prints only the id (with --json: the sandbox). When the sandbox fails to\n"
	          "start, the id is still printed, the reason goes to stderr, and the exit\n"
	          "code is 1. The server refuses a network beyond its policy (exit 4; see\n"
	          "'sandbox-cli doctor' for its ceiling) and never grants less than asked.\n",
	  .run = cmd_create },
	{ .name = "stop",
	  .usage = "stop REF...",
	  .summary = "Stop sandboxes and wait; their disks are kept for 'start'.",
	  .run = cmd_stop },
	{ .name = "start",
	  .usage = "start REF...",
	  .summary = "Start stopped sandboxes again and wait until they run.",
	  .run = cmd_start },
	{ .name = "suspend",
	  .usage = "suspend REF...",
	  .summary = "Suspend running sandboxes and wait: memory and disk are kept, no VM runs.",
	  .run = cmd_suspend },
	{ .name = "resume",
	  .usage = "resume REF...",
	  .summary = "Resume suspended sandboxes and wait: their processes carry on.",
	  .run = cmd_resume },
	{ .name = "kill",
	  .usage = "kill REF...",
	  .summary = "End sandboxes and discard their disks (ending an ended one succeeds).",
	  .run = cmd_kill },
	{ .name = "network",
	  .usage = "network REF [--network MODE] [--allow NAME]... [--deny NAME]...",
	  .summary = "Show a sandbox's network policy, or replace it while it runs.",
	  .help = "  --network MODE  none or allowlist; open where the server offers it\n"
	          "  --allow NAME    a host name it may reach over http(s), such as example.org\n"
	          "                  or *.example.org (repeatable; means --network allowlist)\n"
	          "  --deny NAME     a host name it may never reach (repeatable)\n"
	          "\n"
	          "Without options, prints the sandbox's network: its mode, allow list and deny\n"
	          "list. With them, the options are the whole new policy, checked like a\n"
	          "create's: what they leave out is the server's default, not the sandbox's\n"
	          "current setting. The change applies at once to the running sandbox;\n"
	          "connections to names it no longer allows are cut. A policy the server\n"
	          "refuses leaves the old one in place. With --json, prints the network object.\n",
	  .run = cmd_network },
	{ .name = "events",
	  .usage = "events [REF] [--follow] [--since SEQ]",
	  .summary = "Show a sandbox's audit trail, or follow the live stream.",
	  .help = "  REF          show this sandbox's audit trail (TIME TYPE DETAIL); with\n"
	          "               --follow, then its new records until it is terminated\n"
	          "  --follow     follow the live stream (the default without REF)\n"
	          "  --since SEQ  when following: first replay the events after sequence SEQ\n"
	          "\n"
	          "With --json, each event is printed as one JSON object per line.\n",
	  .run = cmd_events },
	{ .name = "metrics",
	  .usage = "metrics REF",
	  .summary = "Show what a sandbox used over the last hour, measured on the host.",
	  .help = "Columns: TIME, CPU (the VMM's CPU time so far), MEMORY (the VMM's), DISK\n"
	          "(what its writes allocated), NET IN and NET OUT (through its network device,\n"
	          "as the guest sees it; so far). A sample every 10 s while it runs, oldest\n"
	          "first. With --json, the server's {samples} object.\n",
	  .run = cmd_metrics },
	{ .name = "run",
	  .usage = "run [options] -- CMD [ARGS...]",
	  .summary = "Run a command in a fresh sandbox that is removed afterwards.",
	  .help = "  --image IMAGE     the image (default: the server's)\n"
	          "  --cpus N          virtual CPUs\n"
	          "  --memory MB       memory in MiB\n"
	          "  --disk MB         disk in MiB\n"
	          "  --name NAME       a name for the sandbox\n"
	          "  --network MODE    none or allowlist (default: the server's); open where the\n"
	          "                    server offers it (sandboxd never does)\n"
	          "  --allow NAME      a host name CMD may reach over http(s), such as\n"
	          "                    example.org or *.example.org (repeatable; means\n"
	          "                    --network allowlist)\n"
	          "  --deny NAME       a host name CMD may never reach (repeatable)\n"
	          "  --env NAME=VALUE  an environment variable of the command (repeatable);\n"
	          "                    --env NAME takes the value from your environment\n"
	          "  --cwd DIR         the command's working directory (default /sandbox/home)\n"
	          "  --timeout SECS    kill the command after this long (then exit 124)\n"
	          "  -t, --tty         give the command a terminal (needs one on stdin): raw\n"
	          "                    keys, window size; Ctrl-] detaches\n"
	          "  --keep            keep the sandbox afterwards (its id goes to stderr)\n"
	          "  --lifetime SECS   end the sandbox this long after creation (default: a day\n"
	          "                    without --keep, never with it; 0: never)\n"
	          "  --idle-timeout SECS  stop the sandbox after this long without use\n"
	          "\n"
	          "Creates a sandbox and waits until it runs, starts CMD in it, streams its\n"
	          "stdout and stderr as they come (raw bytes), and removes the sandbox when CMD\n"
	          "ends. A piped stdin is sent to CMD and closed at its end; a terminal on stdin\n"
	          "is not read (CMD sees end of input) unless --tty. Ctrl-C sends SIGINT to CMD;\n"
	          "a second Ctrl-C leaves (exit 130) and removes the sandbox unless --keep.\n"
	          "Without --keep the sandbox is bound to this command: if it dies or loses its\n"
	          "connection before removing it, the server ends the sandbox after a short\n"
	          "grace (30 s unless the operator set another).\n"
	          "\n"
	          "The exit code is CMD's (128+N when signal N ended it, 124 when --timeout\n"
	          "did); when CMD could not start, it is sandbox-cli's own (see 'sandbox-cli\n"
	          "--help'). Put -- before CMD when CMD has options of its own.\n",
	  .run = cmd_run },
	{ .name = "exec",
	  .usage = "exec REF [options] -- CMD [ARGS...]",
	  .summary = "Run a command in a sandbox; stream its output, exit with its code.",
	  .help = "  --env NAME=VALUE  an environment variable (repeatable); --env NAME takes\n"
	          "                    the value from your environment\n"
	          "  --cwd DIR         the working directory (default /sandbox/home)\n"
	          "  --timeout SECS    kill the command after this long (then exit 124)\n"
	          "  -t, --tty         give the command a terminal (needs one on stdin): raw\n"
	          "                    keys, window size; Ctrl-] detaches\n"
	          "  --keep            the command survives a restart of sandboxd\n"
	          "\n"
	          "Like 'run' in an existing sandbox. A piped stdin is sent to CMD and closed at\n"
	          "its end. Ctrl-C sends SIGINT to CMD; a second Ctrl-C leaves it running and\n"
	          "says how to attach again. The exit code is CMD's (128+N for signal N, 124\n"
	          "when --timeout ended it).\n",
	  .run = cmd_exec },
	{ .name = "attach",
	  .usage = "attach REF [PID]",
	  .summary = "Attach to a process: replay its output, then follow it live.",
	  .help = "PID defaults to the newest running process (see 'sandbox-cli ps REF').\n"
	          "\n"
	          "The output the sandbox still holds (at least the newest 1 MiB) is replayed,\n"
	          "then followed. A process with a terminal gets your keys in raw mode; detach\n"
	          "with Ctrl-]. Without a terminal, what you type is sent to it (its input is\n"
	          "never closed) and Ctrl-C detaches. When the process ends, the exit code is\n"
	          "its own.\n",
	  .run = cmd_attach },
	{ .name = "shell",
	  .usage = "shell REF",
	  .summary = "Open an interactive shell in a sandbox (bash -l when the image has it, else "
	             "/bin/sh -l).",
	  .help = "Needs a terminal on stdin. Your terminal is in raw mode while attached: keys,\n"
	          "Ctrl-C and colours pass through, and the window size follows yours. Ctrl-]\n"
	          "detaches and leaves the shell running: 'sandbox-cli attach REF PID' comes\n"
	          "back to it and shows what happened meanwhile. 'exit' ends it.\n",
	  .run = cmd_shell },
	{ .name = "ps",
	  .usage = "ps REF",
	  .summary = "List a sandbox's processes, running and recently exited.",
	  .help = "Columns: PID (the handle attach takes), STATE, EXIT (its code once exited),\n"
	          "TTY, KEEP (survives a restart of sandboxd), STARTED, COMMAND.\n"
	          "With --json, the server's {processes} object.\n",
	  .run = cmd_ps },
	{ .name = "cp",
	  .usage = "cp SRC DST",
	  .summary = "Copy a file into or out of a sandbox (REF:/path; - is stdin/stdout).",
	  .help = "One side is REF:/absolute/path in a sandbox, the other a local path or -.\n"
	          "\n"
	          "  sandbox-cli cp ./data.bin web:/sandbox/home/data.bin\n"
	          "  sandbox-cli cp web:/etc/passwd .\n"
	          "  tar c src | sandbox-cli cp - web:/tmp/src.tar\n"
	          "\n"
	          "Files only (up to 64 MiB), bytes only: no mode, owner or time. Parent\n"
	          "directories in the sandbox are created. A destination that is a directory\n"
	          "(or ends with /) gets the file under its own name.\n",
	  .run = cmd_cp },
	{ .name = "port-forward",
	  .usage = "port-forward REF [LOCAL:]GUEST...",
	  .summary = "Forward local ports to ports inside a sandbox (127.0.0.1 on both sides).",
	  .help = "Listens on 127.0.0.1:LOCAL here (LOCAL left out or 0: the same number as\n"
	          "GUEST) and carries each connection made there to 127.0.0.1:GUEST inside the\n"
	          "sandbox, one tunnel per connection, half-closes included:\n"
	          "\n"
	          "  sandbox-cli port-forward web 8080 9000:3000\n"
	          "  Forwarding from 127.0.0.1:8080 -> 8080\n"
	          "  Forwarding from 127.0.0.1:9000 -> 3000\n"
	          "\n"
	          "A connection to a port nothing listens on in the sandbox is closed, with the\n"
	          "server's word on stderr; forwarding goes on. Ctrl-C (or SIGTERM) stops.\n",
	  .run = cmd_port_forward },
	{ .name = "ls",
	  .usage = "ls REF[:/path]",
	  .summary = "List a directory in a sandbox (default /sandbox/home).",
	  .help = "Columns: TYPE (file, dir, link or other), SIZE (bytes), NAME, sorted by\n"
	          "name. Names the guest chose are printed with control characters escaped.\n"
	          "With --json, the server's {entries} object.\n"
	          "\n"
	          "  sandbox-cli ls web:/etc\n",
	  .run = cmd_ls },
	{ .name = "image",
	  .usage = "image pull|ls|rm ...",
	  .summary = "Manage the server's images: install with progress, list, remove.",
	  .help = "  image pull [--no-wait] IMAGE\n"
	          "  image ls\n"
	          "  image rm IMAGE...\n"
	          "\n"
	          "See 'sandbox-cli image pull --help' and so on.\n",
	  .run = cmd_image },
	{ .name = "node",
	  .usage = "node [cordon|uncordon]",
	  .summary = "Show what the server's node offers and what is free; cordon it.",
	  .help = "  node            the node's CPUs, memory and disk: CAPACITY (what it offers\n"
	          "                  sandboxes), ALLOCATED (what sandboxes were given: active\n"
	          "                  ones' CPUs and memory, the disk of every one not\n"
	          "                  terminated) and FREE; then its cordon, labels, pools and\n"
	          "                  installed images\n"
	          "  node cordon     refuse new sandboxes (503) while those here carry on;\n"
	          "                  until 'node uncordon' or a restart of sandboxd\n"
	          "  node uncordon   take new sandboxes again\n"
	          "\n"
	          "Cordoning needs the operator's (or an admin's) rights. With --json, the\n"
	          "server's node object.\n",
	  .run = cmd_node },
	{ .name = "agent",
	  .usage = "agent NAME [TASK] [options] [-- AGENT ARGS...]",
	  .summary = "Start a coding agent (claude, codex, gemini, opencode) in a new sandbox.",
	  .help = "  --repo URL         clone this git repository (https:// or http://) into\n"
	          "                     /sandbox/home/work and run the agent there\n"
	          "  --image IMAGE      the image (default: the server's, sandbox-base)\n"
	          "  --allow NAME       one more host name it may reach (repeatable); the\n"
	          "                     agent's own API hosts and the repo's host are always\n"
	          "                     on its allowlist\n"
	          "  --name NAME        a name for the sandbox\n"
	          "  --env NAME=VALUE   an environment variable (repeatable); --env NAME takes\n"
	          "                     the value from your environment\n"
	          "  --detach           print the sandbox's id and the agent's pid, and return\n"
	          "\n"
	          "Without TASK the agent runs interactively; with it, in its headless mode\n"
	          "(claude -p, codex exec, gemini -p, opencode run). The agent's credential\n"
	          "(claude: ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN; codex: OPENAI_API_KEY;\n"
	          "gemini: GEMINI_API_KEY or GOOGLE_API_KEY; opencode: any of ANTHROPIC_API_KEY,\n"
	          "OPENAI_API_KEY, GEMINI_API_KEY) goes from your environment into the\n"
	          "sandbox's, in the request body; when it is not set here, the server uses the\n"
	          "one saved with 'sandbox-cli secret set', and without either it refuses\n"
	          "(exit 2) naming the variable, before anything is created.\n"
	          "\n"
	          "Then attaches to the agent's terminal: Ctrl-] detaches and says how to come\n"
	          "back ('sandbox-cli attach SBX PID' replays what it printed meanwhile). The\n"
	          "exit code is the agent's. When the agent cannot start, the sandbox's id is\n"
	          "printed, the reason goes to stderr, and the exit code is 1.\n",
	  .run = cmd_agent },
	{ .name = "secret",
	  .usage = "secret set NAME | secret ls | secret rm NAME",
	  .summary = "Save, list or remove your secrets (an agent's credential, say).",
	  .help = "  secret set NAME   save NAME's value: $NAME's when it is set in your\n"
	          "                    environment, else stdin when it is piped, else typed\n"
	          "                    (not shown)\n"
	          "  secret ls         the names you saved and when (values are never shown)\n"
	          "  secret rm NAME    remove one\n"
	          "\n"
	          "A saved secret is yours alone: 'sandbox-cli agent' uses it when the agent's\n"
	          "variable is not in your environment. At most 64, each at most 32 KiB.\n",
	  .run = cmd_secret },
	{ .name = "version",
	  .usage = "version",
	  .summary = "Print sandbox-cli's version ('doctor' shows the server's).",
	  .run = cmd_version },
	{ .name = "help",
	  .usage = "help [VERB]",
	  .summary = "Show the help of sandbox-cli or of one verb.",
	  .run = cmd_help },
};

static const struct verb *
find_verb(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
		if (streq(verbs[i].name, name))
			return &verbs[i];
	return NULL;
}

static void
usage(FILE *f)
{
	_cleanup_free_ char *sock = paths_default_socket();

	fputs("usage: sandbox-cli [global options] VERB [arguments]\n"
	      "\n"
	      "The command-line client of sandboxd: microVM sandboxes over API v1.\n"
	      "\n"
	      "Verbs:\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
		fprintf(f, "  %-9s %s\n", verbs[i].name, verbs[i].summary);
	fprintf(f,
	        "\n"
	        "Global options (before or after the verb):\n"
	        "  --context NAME     use this context, not the current one\n"
	        "  --endpoint URL     use this endpoint: unix:///PATH, http://HOST:PORT or\n"
	        "                     https://HOST:PORT\n"
	        "  --token-file FILE  send the token in FILE (mode 0600)\n"
	        "  --ca FILE          trust this CA certificate (PEM) for https\n"
	        "  --json             print the server's JSON (one object per line for streams)\n"
	        "  -h, --help         this help; after a verb, the verb's\n"
	        "\n"
	        "The endpoint is --endpoint, else $SANDBOX_ENDPOINT, else the context's\n"
	        "(--context, $SANDBOX_CONTEXT, or the one chosen with 'context use'), else the\n"
	        "local socket unix://%s.\n"
	        "A context's token and CA go only to its own endpoint, unless the context is\n"
	        "named with --context or $SANDBOX_CONTEXT.\n"
	        "\n"
	        "Environment: SANDBOX_CONTEXT, SANDBOX_ENDPOINT, SANDBOX_TOKEN (a token itself),\n"
	        "SANDBOX_CA (a CA file), XDG_CONFIG_HOME (contexts live in\n"
	        "$XDG_CONFIG_HOME/sandbox-cli/config.json, by default ~/.config/...).\n"
	        "\n"
	        "Exit codes:\n"
	        "  0  success\n"
	        "  1  the server or the operation failed (5xx; a sandbox that ended up failed,\n"
	        "     an image that could not be installed)\n"
	        "  2  usage error, bad local config, or 400 invalid_request\n"
	        "  3  cannot reach the endpoint (refused, DNS, TLS), or the connection broke\n"
	        "  4  not allowed: 401 unauthorized, 403 refused or forbidden_origin\n"
	        "  5  404 not found\n"
	        "  6  409 conflict (name in use, wrong state)\n"
	        "Once their command runs, run, exec, attach and shell exit with its code\n"
	        "instead (128+N when signal N ended it; 124 when its timeout did; 130 after\n"
	        "leaving with Ctrl-C).\n",
	        sock ? sock : "$XDG_RUNTIME_DIR/sandboxd.sock");
}

static int
cmd_version(struct cli *cli, int argc, char **argv)
{
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind < argc)
		return cli_usage_error(cli, "takes no arguments");
	if (cli->json) {
		json_t *j = json_pack("{s:s}", "version", SANDBOX_CLI_VERSION);
		r = j ? output_json_line(j) : -ENOMEM;
		json_decref(j);
		return r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
	} else
		printf("sandbox-cli %s\n", SANDBOX_CLI_VERSION);
	return CLI_EXIT_OK;
}

static int
cmd_help(struct cli *cli, int argc, char **argv)
{
	const struct verb *v;
	int c;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind == argc) {
		usage(stdout);
		return CLI_EXIT_OK;
	}
	v = find_verb(argv[optind]);
	if (!v || optind + 1 < argc)
		return cli_usage_error(cli, "no such verb; the verbs are listed by 'sandbox-cli "
		                            "--help'");
	cli_verb_help(v, stdout);
	return CLI_EXIT_OK;
}

int
main(int argc, char **argv)
{
	struct cli cli = { 0 };
	int c, r;

	setlocale(LC_CTYPE, "C");
	/* fds 0-2 are open (on /dev/null if need be): no connection may become our stdin */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDWR) != fd)
			return CLI_EXIT_FAILED;
	/* the global options that come before the verb; '+' stops at the verb */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", cli_global_options, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return CLI_EXIT_OK;
		}
		if (c == '?' || c == ':') {
			char shortname[3] = { '-', (char)optopt, '\0' };
			_cleanup_free_ char *safe = termsafe_dup(
			        optopt > 0 && optopt < 128 ? shortname : argv[optind - 1]);
			fprintf(stderr, "sandbox-cli: %s '%s'\nTry 'sandbox-cli --help'.\n",
			        c == '?' ? "unknown option" : "a value is missing after",
			        safe ? safe : "?");
			return CLI_EXIT_USAGE;
		}
		cli_global_option(&cli, c, optarg);
	}
	if (optind == argc) {
		usage(stderr);
		return CLI_EXIT_USAGE;
	}
	cli.verb = find_verb(argv[optind]);
	if (!cli.verb) {
		_cleanup_free_ char *safe = termsafe_dup(argv[optind]);
		fprintf(stderr, "sandbox-cli: unknown verb '%s'\nTry 'sandbox-cli --help'.\n",
		        safe ? safe : "?");
		return CLI_EXIT_USAGE;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "sandbox-cli: cannot initialise libcurl\n");
		return CLI_EXIT_FAILED;
	}
	r = cli.verb->run(&cli, argc - optind, argv + optind);
	cli_done(&cli);
	curl_global_cleanup();
	if (fflush(stdout) == EOF && r == CLI_EXIT_OK) {
		fprintf(stderr, "sandbox-cli: cannot write the output: %m\n");
		r = CLI_EXIT_FAILED;
	}
	return r;
}
