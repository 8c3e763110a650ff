/* test-image-install.c: daemon/images/image-install.c against a hostile registry the test runs on
 * loopback (a thread answering each request from a script): an error whose body never
 * ends is given up, not waited on forever, for a manifest and for a blob; what the registry
 * says reaches the error without its terminal escapes; nothing is left in the cache. A real
 * registry cannot be made to misbehave like this, so the server here is the test's own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include "harness.h"
#include "image-install.h"
#include "util.h"

#define MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"

/* What the server answers: an endless error for paths containing endless_on, a manifest
 * and config for the rest. */
struct server {
	int fd;
	int port;
	pthread_t thread;
	const char *endless_on;
	char manifest[1024];
	char config[256];
	char config_digest[72];
	bool stop;
};

static void
digest_of(const char *p, size_t n, char out[static 72])
{
	unsigned char md[32];
	unsigned int len = 0;

	assert_int_equal(EVP_Digest(p, n, md, &len, EVP_sha256(), NULL), 1);
	memcpy(out, "sha256:", 7);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
}

static void
send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void
answer(struct server *s, int c)
{
	char req[4096] = { 0 }, head[512];
	ssize_t n = recv(c, req, sizeof(req) - 1, 0);
	const char *body = NULL, *type = "application/json";

	if (n <= 0)
		return;
	if (strstr(req, s->endless_on)) {
		/* a reason phrase with escapes, then a chunked body that never ends */
		static const char start[] = "HTTP/1.1 404 \x1b]0;owned\x07\x1b[31mNOPE\r\n"
		                            "Content-Type: application/json\r\n"
		                            "Transfer-Encoding: chunked\r\n\r\n";
		send_all(c, start, sizeof(start) - 1);
		while (!s->stop) {
			static const char chunk[] = "400\r\n";
			char pad[1024];
			memset(pad, ' ', sizeof(pad));
			send_all(c, chunk, sizeof(chunk) - 1);
			send_all(c, pad, sizeof(pad));
			send_all(c, "\r\n", 2);
			if (send(c, "", 0, MSG_NOSIGNAL) < 0)
				break;
			usleep(20000);
			if (recv(c, req, sizeof(req), MSG_DONTWAIT) == 0)
				break; /* the client hung up */
		}
		return;
	}
	if (strstr(req, "/manifests/")) {
		body = s->manifest;
		type = MT_MANIFEST;
	} else if (strstr(req, s->config_digest)) {
		body = s->config;
		type = "application/octet-stream";
	}
	if (!body) {
		static const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
		send_all(c, nf, sizeof(nf) - 1);
		return;
	}
	snprintf(head, sizeof(head),
	         "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	         "Connection: close\r\n\r\n",
	         type, strlen(body));
	send_all(c, head, strlen(head));
	send_all(c, body, strlen(body));
}

static void *
serve(void *data)
{
	struct server *s = data;

	while (!s->stop) {
		int c = accept(s->fd, NULL, NULL);
		if (c < 0)
			break;
		answer(s, c);
		close(c);
	}
	return NULL;
}

static void
server_start(struct server *s, const char *endless_on)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	char layer[72];

	memset(s, 0, sizeof(*s));
	s->endless_on = endless_on;
	snprintf(s->config, sizeof(s->config),
	         "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"A=b\"]},"
	         "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}");
	digest_of(s->config, strlen(s->config), s->config_digest);
	digest_of("layer", 5, layer);
	snprintf(s->manifest, sizeof(s->manifest),
	         "{\"schemaVersion\":2,\"mediaType\":\"" MT_MANIFEST "\","
	         "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
	         "\"digest\":\"%s\",\"size\":%zu},"
	         "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\","
	         "\"digest\":\"%s\",\"size\":100}]}",
	         s->config_digest, strlen(s->config), layer);
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s->fd >= 0);
	assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s->fd, 8), 0);
	assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
	s->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
}

static void
server_stop(struct server *s)
{
	s->stop = true;
	shutdown(s->fd, SHUT_RDWR);
	close(s->fd);
	pthread_join(s->thread, NULL);
}

static void
rm_dir(const char *dir)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

/* Installs repo/x:1 from the server into a fresh state directory; returns the error. */
static int
install_from(struct server *s, char **ret_error, char *state, size_t size)
{
	char agent[600], registry[64], name[128];
	char *insecure[1] = { registry };
	struct install_opts o = { .progress_fd = -1, .quiet = true };
	json_t *rec = NULL;
	FILE *f;
	int r;

	assert_int_equal(harness_tmpdir(state, size), 0);
	snprintf(agent, sizeof(agent), "%s/agent", state);
	f = fopen(agent, "w");
	assert_non_null(f);
	fputs("agent", f);
	fclose(f);
	snprintf(registry, sizeof(registry), "127.0.0.1:%d", s->port);
	snprintf(name, sizeof(name), "%s/repo/x:1", registry);
	o.state_dir = state;
	o.agent = agent;
	o.insecure = insecure;
	o.n_insecure = 1;
	r = image_install(&o, name, &rec, ret_error);
	json_decref(rec);
	return r;
}

static void
test_endless_error_on_the_manifest(void **state)
{
	struct server s;
	char dir[256], *why = NULL;
	int r;

	server_start(&s, "/manifests/");
	r = install_from(&s, &why, dir, sizeof(dir));
	server_stop(&s);
	/* given up once the error body is too long to be a message, with the status */
	assert_true(r < 0);
	assert_non_null(why);
	assert_non_null(strstr(why, "404"));
	/* about the manifest, with the registry's reason phrase quoted without its escapes */
	assert_non_null(strstr(why, "manifest"));
	assert_non_null(strstr(why, "NOPE"));
	assert_null(strchr(why, '\x1b'));
	assert_null(strchr(why, '\x07'));
	free(why);
	rm_dir(dir);
}

static void
test_endless_error_on_a_blob(void **state)
{
	struct server s;
	char dir[256], blobs[300], *why = NULL;
	int r;

	char layer[72], path[100];

	/* the config blob is fetched by resolve and answered; the layer's never ends */
	digest_of("layer", 5, layer);
	snprintf(path, sizeof(path), "/blobs/%s", layer);
	server_start(&s, path);
	r = install_from(&s, &why, dir, sizeof(dir));
	server_stop(&s);
	assert_true(r < 0);
	assert_non_null(why);
	/* about that layer (not the manifest or the config), with the registry's reason */
	{
		char shown[20];
		snprintf(shown, sizeof(shown), "%.19s", layer); /* "sha256:" and 12 hex */
		assert_non_null(strstr(why, shown));
	}
	assert_non_null(strstr(why, "404"));
	assert_non_null(strstr(why, "NOPE"));
	assert_null(strchr(why, '\x1b'));
	free(why);
	/* nothing half-fetched stays in the cache (which the install did make) */
	snprintf(blobs, sizeof(blobs), "%s/images/blobs/sha256", dir);
	{
		struct stat st;
		assert_int_equal(stat(blobs, &st), 0);
		assert_true(S_ISDIR(st.st_mode));
	}
	assert_int_equal(harness_count_entries(blobs), 0);
	rm_dir(dir);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_endless_error_on_the_manifest),
		cmocka_unit_test(test_endless_error_on_a_blob),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
