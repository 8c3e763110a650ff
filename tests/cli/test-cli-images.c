/* test-cli-images.c: `sandbox-cli image pull|ls|rm` against sandboxd-fake (whose image API
 * installs for real: fetch, unpack, root disk) and a real registry (Debian's docker-registry
 * on loopback, started by tests/images/registry.sh), fed with a small image built here with
 * umoci: plain progress lines, bars on a pseudo-terminal, the table and --json, removal, a
 * missing image with the registry's reason, --no-wait, and the exit codes. Nothing boots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

static struct daemon_proc sbxd;
static const char *cli_bin;
static char dir[256];     /* the test's own: the registry, the image build, $HOME */
static char reg_dir[300]; /* registry.sh's directory */
static char registry_sh[512];
static char unix_ep[320];       /* unix://<socket> */
static char image[128];         /* 127.0.0.1:PORT/cli/tiny:1 */
static char image_tty[128];     /* the same image as 127.0.0.1:PORT/cli/tty:1 */
static char image_bg[128];      /* and as 127.0.0.1:PORT/cli/bg:1 */
static char missing[128];       /* 127.0.0.1:PORT/cli/missing:1 (never pushed) */
static char digest[80];         /* the manifest digest the registry has for image */
static char layer_short[2][16]; /* the first 12 hex digits of its two layers */

#define CLI(out, ...) cli_run(out, (const char *const[]){ __VA_ARGS__, NULL })

/* Runs sandbox-cli with the endpoint; returns its exit code and its output (stdout and
 * stderr; caller frees). */
static int
cli_run(char **out, const char *const *args)
{
	const char *argv[16] = { "--endpoint", unix_ep };
	size_t n = 2;

	for (size_t i = 0; args[i] && n < ARRAY_SIZE(argv) - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	return harness_run_checked(cli_bin, argv, NULL, out);
}

/* The line of out that starts with prefix (a copy; caller frees), or NULL. */
static char *
line_starting(const char *out, const char *prefix)
{
	for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, prefix, strlen(prefix)) == 0)
			return strndup(p, strcspn(p, "\n"));
	return NULL;
}

static json_t *
parse_json(const char *text)
{
	json_error_t err;
	json_t *j = json_loads(text, 0, &err);

	if (!j)
		fail_msg("not JSON (%s):\n%s", err.text, text);
	return j;
}

/* The entry of `image ls --json` for name, or NULL (caller decrefs the answer in *all). */
static json_t *
ls_entry(const char *name, json_t **all)
{
	char *out;
	json_t *v;
	size_t i;

	assert_int_equal(CLI(&out, "image", "ls", "--json"), 0);
	*all = parse_json(out);
	free(out);
	assert_true(json_is_array(json_object_get(*all, "images")));
	json_array_foreach (json_object_get(*all, "images"), i, v)
		if (streq(json_string_value(json_object_get(v, "image")), name))
			return v;
	return NULL;
}

static int sh(const char *fmt, ...) _printf_(1, 2);
static int
sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd) == 0 ? 0 : -1;
}

static int
read_text(const char *path, char *out, size_t size)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -1;
	n = fread(out, 1, size - 1, f);
	fclose(f);
	out[n] = '\0';
	out[strcspn(out, "\n")] = '\0';
	return n > 0 ? 0 : -1;
}

/* The layers of the image tagged tag in the OCI layout: index.json, then its manifest. */
static int
layout_layers(const char *layout, const char *tag)
{
	char path[600];
	json_t *index, *m = NULL, *v;
	const char *md = NULL;
	size_t i;
	int r = -1;

	snprintf(path, sizeof(path), "%s/index.json", layout);
	index = json_load_file(path, 0, NULL);
	json_array_foreach (json_object_get(index, "manifests"), i, v) {
		json_t *ann = json_object_get(v, "annotations");
		if (streq(json_string_value(
		                  json_object_get(ann, "org.opencontainers.image.ref.name"))
		                  ?: "",
		          tag))
			md = json_string_value(json_object_get(v, "digest"));
	}
	if (md && str_has_prefix(md, "sha256:")) {
		snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, md + 7);
		m = json_load_file(path, 0, NULL);
	}
	if (json_array_size(json_object_get(m, "layers")) == 2) {
		r = 0;
		json_array_foreach (json_object_get(m, "layers"), i, v) {
			const char *d = json_string_value(json_object_get(v, "digest"));
			if (!d || !str_has_prefix(d, "sha256:"))
				r = -1;
			else
				snprintf(layer_short[i], sizeof(layer_short[i]), "%.12s", d + 7);
		}
	}
	json_decref(m);
	json_decref(index);
	return r;
}

static int
setup(void **state)
{
	static const char *const tools[] = { "docker-registry", "umoci", "skopeo", "curl",
		                             "mkfs.ext4",       "tar" };
	const char *src = getenv("SBX_REGISTRY_SH");
	char agent[320], reg_flag[64], port[16], layout[320];
	const char *extra[] = { "--insecure-registry", reg_flag, "--agent", agent, NULL };

	cli_bin = harness_binary("SANDBOX_CLI");
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
		if (sh("command -v %s >/dev/null 2>&1 || test -x /usr/sbin/%s", tools[i],
		       tools[i]) < 0) {
			fprintf(stderr, "skip: %s is not installed (scripts/install-deps.sh)\n",
			        tools[i]);
			exit(77);
		}
	if (!src || access(src, R_OK) < 0) {
		fprintf(stderr, "skip: $SBX_REGISTRY_SH names no registry.sh\n");
		exit(77);
	}
	snprintf(registry_sh, sizeof(registry_sh), "%s", src);
	if (harness_tmpdir(dir, sizeof(dir)) < 0)
		return -1;
	setenv("HOME", dir, 1);
	unsetenv("XDG_CONFIG_HOME");
	unsetenv("SANDBOX_CONTEXT");
	unsetenv("SANDBOX_ENDPOINT");
	unsetenv("SANDBOX_TOKEN");
	snprintf(reg_dir, sizeof(reg_dir), "%s/registry", dir);
	if (sh("sh '%s' start '%s' >'%s/registry-start.log' 2>&1", registry_sh, reg_dir, dir) < 0) {
		(void)sh("cat '%s/registry-start.log' >&2", dir);
		return -1;
	}
	snprintf(agent, sizeof(agent), "%s/port", reg_dir);
	if (read_text(agent, port, sizeof(port)) < 0)
		return -1;
	snprintf(reg_flag, sizeof(reg_flag), "127.0.0.1:%s", port);
	snprintf(image, sizeof(image), "127.0.0.1:%s/cli/tiny:1", port);
	snprintf(image_tty, sizeof(image_tty), "127.0.0.1:%s/cli/tty:1", port);
	snprintf(image_bg, sizeof(image_bg), "127.0.0.1:%s/cli/bg:1", port);
	snprintf(missing, sizeof(missing), "127.0.0.1:%s/cli/missing:1", port);

	/* the image: two layers, the first with 2 MiB that do not compress, so its size shows */
	snprintf(layout, sizeof(layout), "%s/layout", dir);
	if (sh("set -e; cd '%s'; mkdir -p t1/etc t2/etc; echo tiny > t1/etc/hostname; "
	       "head -c 2097152 /dev/urandom > t1/etc/noise; echo 2 > t2/etc/second; "
	       "for t in t1 t2; do tar --sort=name --mtime=@0 --owner=0 --group=0 "
	       "--numeric-owner -C $t -cf $t.tar .; done; "
	       "umoci init --layout layout; umoci new --image layout:tiny; "
	       "umoci raw add-layer --image layout:tiny t1.tar; "
	       "umoci raw add-layer --image layout:tiny t2.tar; "
	       "umoci config --image layout:tiny --os linux --architecture amd64; "
	       "for ref in %s %s %s; do skopeo copy -q --dest-tls-verify=false --digestfile digest "
	       "oci:layout:tiny docker://$ref >build.log 2>&1 || { cat build.log >&2; exit 1; }; "
	       "done",
	       dir, image, image_tty, image_bg) < 0)
		return -1;
	snprintf(agent, sizeof(agent), "%s/digest", dir);
	if (read_text(agent, digest, sizeof(digest)) < 0 || !str_has_prefix(digest, "sha256:") ||
	    layout_layers(layout, "tiny") < 0) {
		fprintf(stderr, "the test image was not built as expected\n");
		return -1;
	}

	/* the guest agent a disk gets: any file will do, since nothing boots here */
	snprintf(agent, sizeof(agent), "%s/sandbox-guestd", dir);
	if (sh("printf '#!/bin/sh\\n' > '%s'", agent) < 0)
		return -1;
	if (harness_start(&sbxd, harness_binary("SANDBOXD_FAKE"), extra, NULL) < 0)
		return -1;
	snprintf(unix_ep, sizeof(unix_ep), "unix://%s", sbxd.sock);
	return 0;
}

static int
teardown(void **state)
{
	int rc = sbxd.pid > 0 ? harness_stop(&sbxd, SIGTERM) : 0;

	harness_cleanup(&sbxd);
	if (reg_dir[0])
		(void)sh("sh '%s' stop '%s'", registry_sh, reg_dir);
	if (dir[0] && !getenv("HARNESS_KEEP") && sh("rm -rf '%s'", dir) < 0)
		return -1;
	return rc == 0 ? 0 : -1;
}

/* Waits until `image ls` says name is installed (10 s at most). */
static void
wait_installed(const char *name)
{
	for (int i = 0; i < 100; i++) {
		json_t *all, *e = ls_entry(name, &all);
		bool done = e && streq(json_string_value(json_object_get(e, "state")), "installed");
		json_decref(all);
		if (done)
			return;
		usleep(100000);
	}
	fail_msg("'%s' was not installed within 10 s", name);
}

static void
test_pull_plain(void **state)
{
	char want[256], *out, *last;

	/* stdout is a file here: plain lines, no escape sequences */
	assert_int_equal(CLI(&out, "image", "pull", image), 0);
	harness_expect_not_in(out, "\033[");
	snprintf(want, sizeof(want), "%s: fetching layers\n", image);
	harness_expect_in(out, want);
	snprintf(want, sizeof(want), "%s: building the root disk\n", image);
	harness_expect_in(out, want);
	snprintf(want, sizeof(want), "layer 1/2 %s: 2.0 MiB of 2.0 MiB (100%%)\n", layer_short[0]);
	harness_expect_in(out, want);
	snprintf(want, sizeof(want), "layer 2/2 %s: ", layer_short[1]);
	harness_expect_in(out, want);
	/* it ends with the image installed: its digest and the size of its disk */
	snprintf(want, sizeof(want), "installed %s (%.12s, ", image, digest + 7);
	last = strrchr(out, '\n');
	assert_non_null(last);
	while (last > out && last[-1] != '\n')
		last--;
	if (strncmp(last, want, strlen(want)) != 0)
		fail_msg("the last line should start with '%s':\n%s", want, out);
	free(out);

	/* again: nothing to follow */
	assert_int_equal(CLI(&out, "image", "pull", image), 0);
	snprintf(want, sizeof(want), "%s is already installed (%.12s, ", image, digest + 7);
	harness_expect_in(out, want);
	harness_expect_not_in(out, "layer ");
	free(out);
}

static void
test_ls(void **state)
{
	char *out, *line, name[128], st[32], unit[8], use[8], dg[32], extra[8];
	double size;
	json_t *all, *e;

	assert_int_equal(CLI(&out, "image", "ls"), 0);
	harness_expect_in(out, "IMAGE");
	harness_expect_in(out, "IN USE");
	line = line_starting(out, image);
	if (!line)
		fail_msg("no line for %s:\n%s", image, out);
	/* IMAGE STATE SIZE IN-USE DEFAULT(empty) DIGEST */
	assert_int_equal(sscanf(line, "%127s %31s %lf %7s %7s %31s %7s", name, st, &size, unit, use,
	                        dg, extra),
	                 6);
	assert_string_equal(st, "installed");
	assert_true(size > 0);
	assert_string_equal(use, "0");
	assert_int_equal(strlen(dg), 12);
	assert_memory_equal(dg, digest + 7, 12);
	free(line);
	/* the default image, not installed on this server: absent, marked with * */
	line = line_starting(out, "sandbox-base");
	if (!line)
		fail_msg("no line for the default image:\n%s", out);
	harness_expect_in(line, "absent");
	harness_expect_in(line, "*");
	free(line);
	free(out);

	/* --json: the server's list as it is */
	e = ls_entry(image, &all);
	assert_non_null(e);
	assert_string_equal(json_string_value(json_object_get(e, "state")), "installed");
	assert_string_equal(json_string_value(json_object_get(e, "digest")), digest);
	assert_true(json_integer_value(json_object_get(e, "size_bytes")) > 2 * 1024 * 1024);
	json_decref(all);
}

/* The same pull on a terminal: one line per layer redrawn in place. */
static void
test_pull_terminal(void **state)
{
	struct winsize ws = { .ws_row = 24, .ws_col = 80 };
	char buf[65536], want[256];
	size_t len = 0;
	int master, status;
	pid_t pid;

	pid = forkpty(&master, NULL, NULL, &ws);
	assert_true(pid >= 0);
	if (pid == 0) {
		execl(cli_bin, "sandbox-cli", "--endpoint", unix_ep, "image", "pull", image_tty,
		      (char *)NULL);
		_exit(127);
	}
	for (;;) {
		struct pollfd p = { .fd = master, .events = POLLIN };
		ssize_t n;
		if (poll(&p, 1, 20000) <= 0) {
			kill(pid, SIGKILL); /* stuck: the wait below must not hang too */
			break;
		}
		n = read(master, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break; /* EIO once the child is gone */
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(master);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("pull on a terminal failed:\n%s", buf);
	if (strstr(buf, "Sanitizer") || strstr(buf, "runtime error:"))
		fail_msg("sanitizer report:\n%s", buf);
	/* the lines are drawn again over themselves: cursor up, clear line */
	harness_expect_in(buf, "\033[K");
	harness_expect_in(buf, "A\r\033[K");
	snprintf(want, sizeof(want), "%s  [", layer_short[0]);
	harness_expect_in(buf, want);
	harness_expect_in(buf, "2.0 MiB / 2.0 MiB  done");
	harness_expect_in(buf, "====");
	snprintf(want, sizeof(want), "installed %s (%.12s, ", image_tty, digest + 7);
	harness_expect_in(buf, want);
	harness_expect_not_in(buf, "layer 1/2");
}

static void
test_rm(void **state)
{
	char want[256], *out, *line;
	json_t *all, *e;

	/* in use by a sandbox (the fake backend starts one from any installed image): kept */
	assert_int_equal(CLI(&out, "create", "--name", "user", "--image", image), 0);
	free(out);
	assert_int_equal(CLI(&out, "image", "ls"), 0);
	line = line_starting(out, image);
	if (!line)
		fail_msg("no line for %s:\n%s", image, out);
	harness_expect_in(line, " 1 ");
	free(line);
	free(out);
	assert_int_equal(CLI(&out, "image", "rm", image), 6);
	snprintf(want, sizeof(want), "sandbox-cli: conflict: image '%s' is used by 1 sandbox",
	         image);
	harness_expect_in(out, want);
	free(out);
	e = ls_entry(image, &all);
	assert_non_null(e);
	assert_int_equal(json_integer_value(json_object_get(e, "in_use")), 1);
	json_decref(all);
	assert_int_equal(CLI(&out, "kill", "user"), 0);
	free(out);

	snprintf(want, sizeof(want), "removed %s\n", image);
	assert_int_equal(CLI(&out, "image", "rm", image), 0);
	assert_string_equal(out, want);
	free(out);
	assert_null(ls_entry(image, &all));
	json_decref(all);
	assert_int_equal(CLI(&out, "image", "ls"), 0);
	harness_expect_not_in(out, image);
	free(out);

	/* not installed (any more): the server's 404, exit 5 */
	snprintf(want, sizeof(want), "sandbox-cli: not_found: image '%s' is not installed", image);
	assert_int_equal(CLI(&out, "image", "rm", image), 5);
	harness_expect_in(out, want);
	free(out);
}

static void
test_pull_missing(void **state)
{
	char want[256], *out;
	json_t *all;

	assert_int_equal(CLI(&out, "image", "pull", missing), 1);
	snprintf(want, sizeof(want), "sandbox-cli: cannot install '%s': ", missing);
	harness_expect_in(out, want);
	/* the registry's own words (docker-registry: "manifest unknown" or "repository name
	 * not known to registry") */
	if (!strstr(out, "unknown") && !strstr(out, "not known"))
		fail_msg("the registry's reason is not in the message:\n%s", out);
	harness_expect_not_in(out, "installed ");
	free(out);
	/* and nothing of it stays */
	assert_null(ls_entry(missing, &all));
	json_decref(all);
}

static void
test_pull_no_wait(void **state)
{
	char want[256], *out;
	json_t *all, *e;

	assert_int_equal(CLI(&out, "image", "pull", "--no-wait", image_bg), 0);
	/* it came back while the install was still going */
	snprintf(want, sizeof(want), "%s: installing\n", image_bg);
	assert_string_equal(out, want);
	free(out);
	wait_installed(image_bg);
	e = ls_entry(image_bg, &all);
	assert_non_null(e);
	assert_string_equal(json_string_value(json_object_get(e, "digest")), digest);
	json_decref(all);

	/* --json --no-wait of an installed one: the object, state installed */
	assert_int_equal(CLI(&out, "--json", "image", "pull", "--no-wait", image_bg), 0);
	e = parse_json(out);
	free(out);
	assert_string_equal(json_string_value(json_object_get(e, "state")), "installed");
	json_decref(e);
}

static void
test_usage(void **state)
{
	char *out;

	assert_int_equal(CLI(&out, "image", "pull"), 2);
	harness_expect_in(out, "needs one IMAGE");
	free(out);
	assert_int_equal(CLI(&out, "image", "pull", "--bogus", image), 2);
	free(out);
	assert_int_equal(CLI(&out, "image", "frobnicate"), 2);
	harness_expect_in(out, "pull, ls or rm");
	free(out);
	assert_int_equal(CLI(&out, "image", "ls", "extra"), 2);
	free(out);
	assert_int_equal(CLI(&out, "image", "rm"), 2);
	free(out);
	/* a name the server refuses: its 400 */
	assert_int_equal(CLI(&out, "image", "pull", "Not A Name"), 2);
	harness_expect_in(out, "invalid_request");
	free(out);
	assert_int_equal(CLI(&out, "image", "--help"), 0);
	harness_expect_in(out, "image pull [--no-wait] IMAGE");
	free(out);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pull_plain),
		cmocka_unit_test(test_ls),
		cmocka_unit_test(test_pull_terminal),
		cmocka_unit_test(test_pull_missing),
		cmocka_unit_test(test_pull_no_wait),
		cmocka_unit_test(test_usage),
		cmocka_unit_test(test_rm),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
