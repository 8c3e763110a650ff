/* test-image-api.c: the images API with no registry and no VM: names refused before
 * anything starts (malformed 400, outside the policy's list 403), sandbox-base before it was
 * built (404 saying how to build it), an image installed from an OCI layout on this machine
 * (the path the base image takes, built here with umoci), removal and the garbage it leaves
 * none of, and the root disks of another guest agent removed at the next start. The fake
 * backend boots nothing, but the image API is the product's: installs really run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

static struct daemon_proc p;

static const char *const policy_args[] = {
	"--allow-image", "mini", "--allow-image", "sandbox-base", "--allow-image", "busybox", NULL
};

static int
setup(void **state)
{
	if (system("command -v umoci >/dev/null && command -v mkfs.ext4 >/dev/null") != 0) {
		fprintf(stderr, "umoci or mkfs.ext4 missing: ./scripts/install-deps.sh\n");
		exit(77);
	}
	return harness_start(&p, harness_binary("SANDBOXD_FAKE"), policy_args, NULL);
}

static int
teardown(void **state)
{
	int rc = harness_stop(&p, SIGTERM);

	harness_cleanup(&p);
	return rc == 0 ? 0 : -1;
}

static json_t *
find_image(json_t *list, const char *name)
{
	json_t *v;
	size_t i;

	json_array_foreach (json_object_get(list, "images"), i, v)
		if (strcmp(harness_str(v, "image"), name) == 0)
			return v;
	return NULL;
}

static void
expect_error(const char *method, const char *path, const char *body, int status, const char *code,
             const char *needle)
{
	char *out = NULL;
	int got = harness_http(p.sock, method, path, body, &out);

	if (got != status || !out || !strstr(out, code) || (needle && !strstr(out, needle)))
		fail_msg("%s %s %s: got %d %s, want %d %s (%s)", method, path, body ? body : "",
		         got, out ? out : "", status, code, needle ? needle : "");
	free(out);
}

static void
test_refused_before_anything_starts(void **state)
{
	json_t *list;

	expect_error("POST", "/v1/images", "{\"image\":\"Not/A Name\"}", 400, "invalid_request",
	             NULL);
	expect_error("POST", "/v1/images", "{\"image\":\"mini\",\"pull\":true}", 400,
	             "invalid_request", "unknown field \\\"pull\\\"");
	expect_error("POST", "/v1/images?wait=maybe", "{\"image\":\"mini\"}", 400,
	             "invalid_request", "wait=true|false");
	/* --allow-image lists what may be installed or run, written exactly */
	expect_error("POST", "/v1/images", "{\"image\":\"python:3.13-slim\"}", 403, "refused",
	             "image \\\"python:3.13-slim\\\" is not one this server permits");
	expect_error("POST", "/v1/images", "{\"image\":\"docker.io/library/mini\"}", 403, "refused",
	             NULL);
	expect_error("POST", "/v1/sandboxes", "{\"image\":\"python:3.13-slim\"}", 403, "refused",
	             "not one this server permits");
	/* the base image is this machine's own: never looked for on Docker Hub */
	expect_error("POST", "/v1/images", "{\"image\":\"sandbox-base\"}", 404, "not_found",
	             "sandboxd image build-base");
	expect_error("DELETE", "/v1/images/mini", NULL, 404, "not_found", "not installed");
	/* nothing was installed, and the default is listed as absent */
	list = harness_json(p.sock, "GET", "/v1/images", NULL, 200);
	assert_null(find_image(list, "mini"));
	assert_non_null(find_image(list, "sandbox-base"));
	assert_string_equal(harness_str(find_image(list, "sandbox-base"), "state"), "absent");
	assert_true(json_is_true(json_object_get(find_image(list, "sandbox-base"), "default")));
	json_decref(list);
}

/* An OCI layout with two layers, the second removing a file of the first. */
static void
make_layout(const char *dir)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
	         "set -e; t=$(mktemp -d); trap 'rm -rf \"$t\"' EXIT; "
	         "mkdir -p $t/a/etc $t/a/bin $t/b/etc; "
	         "echo 'ID=mini' > $t/a/etc/os-release; echo gone > $t/a/etc/old; "
	         "printf '#!/bin/sh\\n' > $t/a/bin/tool; chmod 4755 $t/a/bin/tool; "
	         /* a file capability (cap_net_raw, effective), as ping has */
	         "echo x > $t/a/bin/pinger; python3 -c \"import os, struct; "
	         "os.setxattr('$t/a/bin/pinger', 'security.capability', "
	         "struct.pack('<5I', 0x02000001, 1 << 13, 0, 0, 0))\"; "
	         "touch $t/b/etc/.wh.old; "
	         "tar -C $t/a --owner=0 --group=0 --xattrs "
	         "--xattrs-include=security.capability -cf $t/a.tar .; "
	         "tar -C $t/b --owner=0 --group=0 -cf $t/b.tar .; "
	         "umoci init --layout '%s'; umoci new --image '%s:latest'; "
	         "umoci raw add-layer --image '%s:latest' $t/a.tar; "
	         "umoci raw add-layer --image '%s:latest' $t/b.tar; "
	         "umoci config --image '%s:latest' --config.env GREETING=hi "
	         "--config.env HOME=/root >/dev/null",
	         dir, dir, dir, dir, dir);
	assert_int_equal(system(cmd), 0);
}

static void
test_install_from_a_local_layout_and_remove(void **state)
{
	char layout[512], rootfs[512], cmd[1024], *out = NULL;
	json_t *img, *list;

	snprintf(layout, sizeof(layout), "%s/images/local/mini", p.state);
	snprintf(rootfs, sizeof(rootfs), "%s/rootfs", p.state);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/images/local'", p.state);
	assert_int_equal(system(cmd), 0);
	make_layout(layout);

	img = harness_json(p.sock, "POST", "/v1/images", "{\"image\":\"mini\"}", 200);
	assert_string_equal(harness_str(img, "state"), "installed");
	assert_non_null(strstr(harness_str(img, "digest"), "sha256:"));
	assert_true(json_integer_value(json_object_get(img, "size_bytes")) > 0);
	json_decref(img);
	/* a second install of an installed image answers at once, the same */
	img = harness_json(p.sock, "POST", "/v1/images?wait=false", "{\"image\":\"mini\"}", 200);
	assert_string_equal(harness_str(img, "state"), "installed");
	json_decref(img);
	assert_int_equal(harness_count_entries(rootfs), 1);

	/* the disk holds the layers applied in order, the agent and /sandbox/home */
	snprintf(cmd, sizeof(cmd),
	         "d=$(ls '%s'/*.ext4) && "
	         "debugfs -R 'cat /etc/os-release' $d 2>/dev/null | grep -qx ID=mini && "
	         "! debugfs -R 'stat /etc/old' $d 2>/dev/null | grep -q Inode && "
	         "debugfs -R 'stat /bin/tool' $d 2>/dev/null | grep -q 'Mode:  04755' && "
	         "debugfs -R 'stat /sandbox/home' $d 2>/dev/null | grep -q 'User:  1001' && "
	         "debugfs -R 'stat /sandbox/bin/sandbox-guestd' $d 2>/dev/null | grep -q Inode && "
	         "debugfs -R 'ea_list /bin/pinger' $d 2>/dev/null | "
	         "grep -q 'security.capability (20) = 01 00 00 02 00 20 00 00'",
	         rootfs);
	if (system(cmd) != 0)
		fail_msg("the root disk is not what the layers say (%s)", cmd);

	expect_error("DELETE", "/v1/images/busybox", NULL, 404, "not_found", NULL);
	assert_int_equal(harness_http(p.sock, "DELETE", "/v1/images/mini", NULL, &out), 204);
	free(out);
	list = harness_json(p.sock, "GET", "/v1/images", NULL, 200);
	assert_null(find_image(list, "mini"));
	json_decref(list);
	/* its disk went with it; its layers stay for ten minutes, since a create may be about
	 * to use them */
	assert_int_equal(harness_count_entries(rootfs), 0);
	snprintf(cmd, sizeof(cmd), "%s/images/blobs/sha256", p.state);
	assert_true(harness_count_entries(cmd) >= 2);

	/* layers older than that which no image uses go at the next removal */
	snprintf(cmd, sizeof(cmd), "touch -d '-1 hour' %s/images/blobs/sha256/*", p.state);
	assert_int_equal(system(cmd), 0);
	json_decref(harness_json(p.sock, "POST", "/v1/images", "{\"image\":\"mini\"}", 200));
	assert_int_equal(harness_http(p.sock, "DELETE", "/v1/images/mini", NULL, &out), 204);
	free(out);
	snprintf(cmd, sizeof(cmd), "%s/images/blobs/sha256", p.state);
	assert_int_equal(harness_count_entries(cmd), 0);
	assert_true(harness_file_contains(p.log, "cached layer(s) no image uses"));
}

static void
test_disks_of_another_agent_go_at_start(void **state)
{
	char path[600];
	const char *const args[] = { "--allow-image", "mini", "--allow-image", "sandbox-base",
		                     NULL };
	json_t *img;
	FILE *f;

	snprintf(path, sizeof(path), "%s/images/local", p.state);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/images/local/mini", p.state);
	if (access(path, F_OK) != 0)
		make_layout(path);
	json_decref(harness_json(p.sock, "POST", "/v1/images", "{\"image\":\"mini\"}", 200));
	/* a disk an older agent build left (its name ends in another agent's id) */
	snprintf(path, sizeof(path), "%s/rootfs/%064d-0123456789ab.ext4", p.state, 7);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("an old disk", f);
	fclose(f);

	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_equal(harness_restart(&p, harness_binary("SANDBOXD_FAKE"), args, NULL), 0);
	assert_int_equal(access(path, F_OK), -1);
	assert_true(harness_file_contains(p.log, "removed 1 root disk(s) built for another guest"));
	/* this agent's disk and the image's record stay */
	snprintf(path, sizeof(path), "%s/rootfs", p.state);
	assert_int_equal(harness_count_entries(path), 1);
	img = harness_json(p.sock, "GET", "/v1/images", NULL, 200);
	assert_non_null(find_image(img, "mini"));
	assert_string_equal(harness_str(find_image(img, "mini"), "state"), "installed");
	assert_null(json_object_get(find_image(img, "mini"), "rebuild"));
	json_decref(img);
}

/* An upgrade of the guest agent: the disks built for the old one go at the next start, the
 * images stay installed, and the first use builds the disk again from the layer cache. */
static void
test_an_agent_upgrade_rebuilds_disks_on_first_use(void **state)
{
	char agent[600], path[600];
	const char *const args[] = {
		"--allow-image", "mini", "--allow-image", "sandbox-base", "--agent", agent, NULL
	};
	json_t *list, *img;
	FILE *f;

	snprintf(agent, sizeof(agent), "%s/new-agent", p.dir);
	f = fopen(agent, "w");
	assert_non_null(f);
	fputs("#!/bin/sh\n# another build of the agent\n", f);
	fclose(f);
	json_decref(harness_json(p.sock, "POST", "/v1/images", "{\"image\":\"mini\"}", 200));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_equal(harness_restart(&p, harness_binary("SANDBOXD_FAKE"), args, NULL), 0);
	assert_true(harness_file_contains(p.log, "built for another guest agent"));
	snprintf(path, sizeof(path), "%s/rootfs", p.state);
	assert_int_equal(harness_count_entries(path), 0);
	list = harness_json(p.sock, "GET", "/v1/images", NULL, 200);
	assert_string_equal(harness_str(find_image(list, "mini"), "state"), "installed");
	assert_true(json_is_true(json_object_get(find_image(list, "mini"), "rebuild")));
	json_decref(list);
	/* the first install (or create) builds it again, with the new agent in it */
	img = harness_json(p.sock, "POST", "/v1/images", "{\"image\":\"mini\"}", 200);
	assert_string_equal(harness_str(img, "state"), "installed");
	assert_null(json_object_get(img, "rebuild"));
	json_decref(img);
	assert_int_equal(harness_count_entries(path), 1);
	snprintf(path, sizeof(path),
	         "debugfs -R 'cat /sandbox/bin/sandbox-guestd' %s/rootfs/*.ext4 2>/dev/null | "
	         "grep -q 'another build of the agent'",
	         p.state);
	assert_int_equal(system(path), 0);
}

/* The disk holds what every layer wrote, not only the last one's: four layers of 24 MiB
 * that do not compress. */
static void
test_the_disk_holds_every_layer(void **state)
{
	char dir[512], cmd[4096];
	const char *const args[] = { "--allow-image", "big", "--allow-image", "sandbox-base",
		                     NULL };
	json_t *img;

	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_equal(harness_restart(&p, harness_binary("SANDBOXD_FAKE"), args, NULL), 0);
	snprintf(dir, sizeof(dir), "%s/images/local/big", p.state);
	snprintf(cmd, sizeof(cmd),
	         "set -e; mkdir -p '%s/images/local'; t=$(mktemp -d); trap 'rm -rf \"$t\"' EXIT; "
	         "umoci init --layout '%s'; umoci new --image '%s:latest'; "
	         "for i in 1 2 3 4; do mkdir $t/$i; "
	         "head -c 25165824 /dev/urandom > $t/$i/blob$i; "
	         "tar -C $t/$i --owner=0 --group=0 -cf $t/$i.tar .; "
	         "umoci raw add-layer --image '%s:latest' $t/$i.tar; done; "
	         /* an environment larger than a progress line may be */
	         "umoci config --image '%s:latest' --config.env BIG=$(head -c 70000 /dev/zero | "
	         "tr '\\0' x) >/dev/null",
	         p.state, dir, dir, dir, dir);
	assert_int_equal(system(cmd), 0);
	/* an install whose child dies leaves nothing behind: no build tree, no partial blob
	 * or disk, and the image is not listed */
	img = harness_json(p.sock, "POST", "/v1/images?wait=false", "{\"image\":\"big\"}", 202);
	json_decref(img);
	snprintf(cmd, sizeof(cmd),
	         "for i in $(seq 200); do pid=$(pgrep -f -- '--state-dir %s .*-- big$' | head -1); "
	         "[ -n \"$pid\" ] && break; sleep 0.01; done; [ -n \"$pid\" ] && sleep 0.2 && "
	         "kill -9 $pid",
	         p.state);
	assert_int_equal(system(cmd), 0);
	{
		json_t *found = NULL;
		for (int i = 0; i < 200; i++) {
			json_t *l = harness_json(p.sock, "GET", "/v1/images", NULL, 200);
			found = find_image(l, "big") ? json_incref(find_image(l, "big")) : NULL;
			json_decref(l);
			if (!found)
				break;
			json_decref(found);
			usleep(50000);
		}
		assert_null(found);
	}
	assert_true(harness_file_contains(p.log, "the install was killed by signal 9"));
	snprintf(cmd, sizeof(cmd),
	         "! find '%s/images' '%s/rootfs' -name '*.partial-*' | grep . && "
	         "! find '%s/images/tmp' -mindepth 1 | grep .",
	         p.state, p.state, p.state);
	assert_int_equal(system(cmd), 0);

	/* while an install runs, nothing is removed: another spelling may be building the
	 * disk a removal would take (mini is installed, its disk to be built again) */
	img = harness_json(p.sock, "POST", "/v1/images?wait=false", "{\"image\":\"big\"}", 202);
	assert_string_equal(harness_str(img, "state"), "installing");
	json_decref(img);
	{
		char *out = NULL;
		assert_int_equal(harness_http(p.sock, "DELETE", "/v1/images/mini", NULL, &out),
		                 409);
		assert_non_null(strstr(out, "being installed"));
		free(out);
	}
	/* the install child (parsing a layer now) is confined: no capability beyond owning
	 * files (CAP_SYS_ADMIN, bit 21, is gone from its bounding set) and / read-only in its
	 * mount namespace, the state directory writable */
	if (geteuid() == 0) {
		snprintf(cmd, sizeof(cmd),
		         /* from the moment it has confined itself (it starts as root) */
		         "for i in $(seq 300); do pid=$(pgrep -f -- '--state-dir %s .*-- big$' | "
		         "head -1); if [ -n \"$pid\" ]; then bnd=$(awk '/^CapBnd/{print $2}' "
		         "/proc/$pid/status 2>/dev/null); [ -n \"$bnd\" ] && "
		         "[ $(( 0x$bnd & (1 << 21) )) -eq 0 ] && break; fi; sleep 0.01; done; "
		         "[ -n \"$pid\" ] || exit 2; "
		         "[ $(( 0x$bnd & (1 << 21) )) -eq 0 ] || exit 3; "
		         "[ $(( 0x$bnd & 1 )) -eq 1 ] || exit 4; "
		         "awk '$5 == \"/\" {print $6}' /proc/$pid/mountinfo | grep -q '^ro' || "
		         "exit 5; "
		         "awk '$5 == \"%s\" {print $6}' /proc/$pid/mountinfo | grep -q '^rw' || "
		         "exit 6",
		         p.state, p.state);
		assert_int_equal(system(cmd), 0);
	}
	img = harness_json(p.sock, "POST", "/v1/images", "{\"image\":\"big\"}", 200);
	assert_string_equal(harness_str(img, "state"), "installed");
	/* its disk (another image's is there too): rootfs/<manifest hex>-<agent>.ext4 */
	snprintf(cmd, sizeof(cmd),
	         "d=$(ls '%s'/rootfs/%s-*.ext4) && for i in 1 2 3 4; do "
	         "debugfs -R \"stat /blob$i\" $d 2>/dev/null | grep -q 'Size: 25165824' || exit 1; "
	         "done",
	         p.state, harness_str(img, "digest") + strlen("sha256:"));
	json_decref(img);
	assert_int_equal(system(cmd), 0);
}

/* Records in images/refs are written by the install child, which handled hostile bytes: one
 * that names a disk outside rootfs/ or layers that are not digests is ignored, not trusted. */
static void
test_records_that_lie_are_ignored(void **state)
{
	char path[600], *out = NULL;
	const char *const args[] = { NULL };
	json_t *list;
	FILE *f;

	/* a disk outside rootfs/ */
	snprintf(path, sizeof(path), "%s/images/refs/liar1.json", p.state);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f,
	        "{\"image\":\"liar1\",\"digest\":\"sha256:%064d\",\"disk\":"
	        "\"/etc/passwd\",\"env\":[],\"layers\":[]}",
	        0);
	fclose(f);
	/* a layer that is not a digest */
	snprintf(path, sizeof(path), "%s/images/refs/liar2.json", p.state);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f,
	        "{\"image\":\"liar2\",\"digest\":\"sha256:%064d\",\"disk\":"
	        "\"%s/rootfs/x.ext4\",\"env\":[],\"layers\":[1]}",
	        0, p.state);
	fclose(f);
	snprintf(path, sizeof(path), "%s/rootfs/x.ext4", p.state);
	fclose(fopen(path, "w"));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_equal(harness_restart(&p, harness_binary("SANDBOXD_FAKE"), args, NULL), 0);
	assert_true(harness_file_contains(p.log, "liar1.json' is unusable"));
	assert_true(harness_file_contains(p.log, "liar2.json' is unusable"));
	list = harness_json(p.sock, "GET", "/v1/images", NULL, 200);
	assert_null(find_image(list, "liar1"));
	assert_null(find_image(list, "liar2"));
	json_decref(list);
	assert_int_equal(harness_http(p.sock, "DELETE", "/v1/images/liar1", NULL, &out), 404);
	free(out);
	assert_int_equal(access("/etc/passwd", F_OK), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused_before_anything_starts),
		cmocka_unit_test(test_install_from_a_local_layout_and_remove),
		cmocka_unit_test(test_disks_of_another_agent_go_at_start),
		cmocka_unit_test(test_an_agent_upgrade_rebuilds_disks_on_first_use),
		cmocka_unit_test(test_the_disk_holds_every_layer),
		cmocka_unit_test(test_records_that_lie_are_ignored),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
