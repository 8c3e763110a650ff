/* cases-processes.c: conformance cases for processes (docs/api.md, "Processes"): run with its
 * output, exit codes, stdin, timeout and cwd; background processes with their output stream, stdin
 * and signals; the interactive attach over sbx-stream/1 and WebSocket (RFC 6455, a small client
 * here); TTYs; the audit of a process. They share the suite's sandbox
 * and skip when capabilities.processes is false. */
#include <errno.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>
#include "base64.h"
#include "cases.h"
#include "conf.h"
#include "util.h"

#define WAIT_MS 20000
#define FRAME_MAX (1u << 20)

static const char *
proc_path(const char *id, long long pid, const char *suffix)
{
	if (pid <= 0)
		return conf_fmt("/v1/sandboxes/%s%s", id, suffix ? suffix : "");
	return conf_fmt("/v1/sandboxes/%s/processes/%lld%s", id, pid, suffix ? suffix : "");
}

/* The shared sandbox, once the server says it runs processes. */
static const char *
process_sandbox(void)
{
	conf_need_capability("processes");
	return conf_shared_sandbox();
}

static const char *
dump(const json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	return conf_keep(s ? s : strdup("(no JSON body)"));
}

/* A base64 member decoded (NUL-terminated, owned by the case); fails the case if it is not. */
static const char *
b64_member(const json_t *obj, const char *key, size_t *ret_len)
{
	const json_t *v = json_object_get(obj, key);
	_cleanup_buf_ struct buf out = BUF_INIT(64u << 20);

	if (!json_is_string(v))
		fail_msg("'%s' is missing or not a string: %s", key, dump(obj));
	if (base64_decode(&out, json_string_value(v), json_string_length(v)) < 0)
		fail_msg("'%s' is not base64: %.200s", key, json_string_value(v));
	if (ret_len)
		*ret_len = out.len;
	return conf_keep(out.data ? buf_steal(&out) : strdup(""));
}

/* ---- run ---- */

struct ran {
	long long exit_code;
	const char *out, *err;
	size_t out_len, err_len;
	bool truncated, timed_out;
	const json_t *json;
};

/* POST …/run with body (JSON text), which must answer 200 with every field of the result. */
static struct ran
run(const char *id, const char *body)
{
	json_t *j;
	long status = conf_request("POST", proc_path(id, 0, "/run"), body, &j);
	struct ran r = { .json = j };

	if (status != 200)
		fail_msg("POST run %s: expected 200, got %ld: %s", body, status, dump(j));
	if (!json_is_integer(json_object_get(j, "exit_code")) ||
	    !json_is_boolean(json_object_get(j, "truncated")) ||
	    !json_is_boolean(json_object_get(j, "timed_out")))
		fail_msg("POST run %s: the result lacks exit_code, truncated or timed_out: %s",
		         body, dump(j));
	r.exit_code = json_integer_value(json_object_get(j, "exit_code"));
	r.out = b64_member(j, "stdout", &r.out_len);
	r.err = b64_member(j, "stderr", &r.err_len);
	r.truncated = json_is_true(json_object_get(j, "truncated"));
	r.timed_out = json_is_true(json_object_get(j, "timed_out"));
	return r;
}

static void
expect_error(const char *method, const char *path, const char *body, long want_status,
             const char *want_code)
{
	json_t *j;
	long status = conf_request(method, path, body, &j);

	conf_assert_error(status, j, want_status, want_code);
}

/* Output, stderr kept apart, and the exit code: a normal exit, an error exit, a signal. */
void
case_run_returns_output_and_exit_code(void **state)
{
	const char *id = process_sandbox();
	struct ran r;

	r = run(id, "{\"argv\":[\"sh\",\"-c\",\"echo to-out; echo to-err >&2; exit 3\"]}");
	assert_int_equal(r.exit_code, 3);
	assert_string_equal(r.out, "to-out\n");
	assert_string_equal(r.err, "to-err\n");
	assert_false(r.truncated);
	assert_false(r.timed_out);

	/* argv is exec'd with no shell in between: the metacharacters arrive as they are */
	r = run(id, "{\"argv\":[\"echo\",\"$HOME\",\"a;b\",\"*\"]}");
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "$HOME a;b *\n");
	assert_int_equal(r.err_len, 0);

	/* a process killed by a signal exits with 128 + the signal */
	r = run(id, "{\"argv\":[\"sh\",\"-c\",\"kill -9 $$\"]}");
	if (r.exit_code != 128 + 9)
		fail_msg("a process killed by SIGKILL: expected exit code 137, got %lld",
		         r.exit_code);
}

/* stdin is base64 in the request and reaches the process byte for byte, NULs included. */
void
case_run_passes_stdin_binary_safe(void **state)
{
	const char *id = process_sandbox();
	unsigned char data[1024];
	_cleanup_buf_ struct buf b64 = BUF_INIT(4096);
	struct ran r;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i ^ (i >> 8) ^ 0x5a);
	if (base64_encode(&b64, data, sizeof(data)) < 0)
		fail_msg("out of memory");
	r = run(id, conf_fmt("{\"argv\":[\"cat\"],\"stdin\":\"%s\"}", b64.data));
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(r.out_len, sizeof(data));
	if (memcmp(r.out, data, sizeof(data)) != 0)
		fail_msg("cat gave back other bytes than its stdin");

	/* stdin ends after what was given: a reader sees the end of input */
	r = run(id, "{\"argv\":[\"wc\",\"-c\"],\"stdin\":\"AAEC\"}");
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(strtol(r.out, NULL, 10), 3);

	expect_error("POST", proc_path(id, 0, "/run"),
	             "{\"argv\":[\"cat\"],\"stdin\":\"not base64!\"}", 400, "invalid_request");
}

/* timeout_secs ends a process that runs too long, and says so. */
void
case_run_timeout_ends_the_process(void **state)
{
	const char *id = process_sandbox();
	uint64_t start = now_mono_ms(), took;
	struct ran r = run(id, "{\"argv\":[\"sleep\",\"30\"],\"timeout_secs\":1}");

	took = now_mono_ms() - start;
	if (!r.timed_out)
		fail_msg("sleep 30 with timeout_secs 1: timed_out is false (exit code %lld)",
		         r.exit_code);
	if (r.exit_code == 0)
		fail_msg("a process ended by its timeout exits 0");
	if (took > 10000)
		fail_msg("sleep 30 with timeout_secs 1 answered after %llu ms",
		         (unsigned long long)took);
}

/* A program that does not exist is the request's fault: 400, from run and processes alike. */
void
case_unknown_command_is_rejected(void **state)
{
	const char *id = process_sandbox();
	const char *const argvs[] = {
		"[\"cf-no-such-program\"]", "[\"/cf/no/such/program\"]",
		"[\"/sandbox\"]", /* a directory */
	};

	for (size_t i = 0; i < ARRAY_SIZE(argvs); i++) {
		expect_error("POST", proc_path(id, 0, "/run"), conf_fmt("{\"argv\":%s}", argvs[i]),
		             400, "invalid_request");
		expect_error("POST", proc_path(id, 0, "/processes"),
		             conf_fmt("{\"argv\":%s}", argvs[i]), 400, "invalid_request");
	}
	expect_error("POST", proc_path(id, 0, "/run"), "{\"argv\":[]}", 400, "invalid_request");
	expect_error("POST", proc_path(id, 0, "/run"), "{\"argv\":[\"\"]}", 400, "invalid_request");
	expect_error("POST", proc_path(id, 0, "/run"), "{\"argv\":\"echo hi\"}", 400,
	             "invalid_request");
	expect_error("POST", proc_path(id, 0, "/run"), "{}", 400, "invalid_request");
}

/* cwd is where the process starts; a missing, relative or climbing one is 400. */
void
case_cwd_is_honoured_and_checked(void **state)
{
	const char *id = process_sandbox();
	const char *const bad[] = { "/cf-no-such-dir", "tmp", "/tmp/../etc", "/etc/passwd", "" };
	struct ran r = run(id, "{\"argv\":[\"pwd\"],\"cwd\":\"/tmp\"}");

	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "/tmp\n");
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		expect_error("POST", proc_path(id, 0, "/run"),
		             conf_fmt("{\"argv\":[\"pwd\"],\"cwd\":\"%s\"}", bad[i]), 400,
		             "invalid_request");
		expect_error("POST", proc_path(id, 0, "/processes"),
		             conf_fmt("{\"argv\":[\"pwd\"],\"cwd\":\"%s\"}", bad[i]), 400,
		             "invalid_request");
	}
}

/* Processes do not run as root: uid 1001, HOME and the default cwd /sandbox/home. */
void
case_processes_do_not_run_as_root(void **state)
{
	const char *id = process_sandbox();
	struct ran r = run(id, "{\"argv\":[\"id\",\"-u\"]}");

	assert_int_equal(r.exit_code, 0);
	if (streq(r.out, "0\n"))
		fail_msg("processes run as root");
	assert_string_equal(r.out, "1001\n");
	r = run(id, "{\"argv\":[\"pwd\"]}");
	assert_string_equal(r.out, "/sandbox/home\n");
	r = run(id, "{\"argv\":[\"sh\",\"-c\",\"echo \\\"$HOME\\\"\"]}");
	assert_string_equal(r.out, "/sandbox/home\n");
}

/* ---- background processes ---- */

/* POST …/processes, which must answer 201 with the process; it is killed when the case ends
 * if it still runs. Returns the process. */
static json_t *
start(const char *id, const char *body)
{
	json_t *j;
	long status = conf_request("POST", proc_path(id, 0, "/processes"), body, &j);
	const json_t *pid = json_object_get(j, "pid");

	if (status != 201)
		fail_msg("POST processes %s: expected 201, got %ld: %s", body, status, dump(j));
	if (!json_is_integer(pid) || json_integer_value(pid) <= 0)
		fail_msg("POST processes: no pid: %s", dump(j));
	if (!json_is_array(json_object_get(j, "argv")) ||
	    !json_is_boolean(json_object_get(j, "tty")) || !*conf_str(j, "state") ||
	    !json_object_get(j, "exit_code") || !*conf_str(j, "started_at"))
		fail_msg("POST processes: the process lacks argv, tty, state, exit_code or "
		         "started_at: %s",
		         dump(j));
	conf_defer_request("POST", proc_path(id, json_integer_value(pid), "/signal"),
	                   "{\"signal\":\"KILL\"}");
	return j;
}

static long long
pid_of(const json_t *p)
{
	return json_integer_value(json_object_get(p, "pid"));
}

/* Polls GET …/processes/{pid} until it exited; returns it. */
static json_t *
wait_exited(const char *id, long long pid)
{
	uint64_t deadline = now_mono_ms() + WAIT_MS;
	json_t *j;

	for (;;) {
		long status = conf_request("GET", proc_path(id, pid, NULL), NULL, &j);
		if (status != 200)
			fail_msg("GET process %lld: expected 200, got %ld: %s", pid, status,
			         dump(j));
		if (streq(conf_str(j, "state"), "exited"))
			return j;
		if (now_mono_ms() > deadline)
			fail_msg("process %lld still runs after %d ms: %s", pid, WAIT_MS, dump(j));
		usleep(100 * 1000);
	}
}

struct output {
	struct buf out, err; /* owned by the case */
	long long exit_code;
	bool exited;
	uint64_t dropped;
};

static void
output_free(void *p)
{
	struct output *o = p;

	buf_free(&o->out);
	buf_free(&o->err);
	free(o);
}

/* GET …/processes/{pid}/output to its end: every stdout and stderr line gathered, and the
 * exit code, which must come last. */
static struct output *
read_output(const char *id, long long pid)
{
	const struct conf_resp *r =
	        conf_send(&(struct conf_req){ .path = proc_path(id, pid, "/output") });
	struct output *o = conf_defer(output_free, calloc(1, sizeof(*o)));
	const char *p = r->body, *end = r->body + r->body_len;

	buf_init(&o->out, 64u << 20);
	buf_init(&o->err, 64u << 20);
	if (r->status != 200)
		fail_msg("GET output of %lld: expected 200, got %ld: %.300s", pid, r->status,
		         r->body);
	if (!str_has_prefix(r->content_type, "application/x-ndjson"))
		fail_msg("GET output: sent as '%s', not application/x-ndjson", r->content_type);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		json_t *line;

		if (!nl)
			fail_msg("GET output: the last line has no newline: '%.200s'", p);
		if (o->exited)
			fail_msg("GET output: a line after the exit code: '%.200s'", p);
		line = conf_keep_json(json_loadb(p, (size_t)(nl - p), 0, NULL));
		if (!json_is_object(line))
			fail_msg("GET output: a line that is not a JSON object: '%.*s'",
			         (int)MIN(nl - p, 200), p);
		if (json_object_get(line, "exit_code")) {
			if (!json_is_integer(json_object_get(line, "exit_code")))
				fail_msg("GET output: exit_code is not a number");
			o->exit_code = json_integer_value(json_object_get(line, "exit_code"));
			o->exited = true;
		} else if (json_object_get(line, "dropped")) {
			o->dropped +=
			        (uint64_t)json_integer_value(json_object_get(line, "dropped"));
		} else {
			size_t len;
			const char *data = b64_member(line, "data", &len);
			const char *stream = conf_str(line, "stream");
			if (!streq(stream, "stdout") && !streq(stream, "stderr"))
				fail_msg("GET output: stream '%s'", stream);
			(void)buf_append(streq(stream, "stdout") ? &o->out : &o->err, data, len);
		}
		p = nl + 1;
	}
	if (!o->exited)
		fail_msg("GET output of %lld: the stream ended without an exit code", pid);
	return o;
}

static const char *
text_of(const struct buf *b)
{
	return b->data ? b->data : "";
}

/* A late follower sees the output from the start: whoever follows the output, while the process
 * runs or after it ended, gets all of it from the first byte, then the exit code. */
void
case_late_follower_sees_output_from_the_start(void **state)
{
	const char *id = process_sandbox();
	json_t *p = start(id, "{\"argv\":[\"sh\",\"-c\",\"echo early; sleep 2; echo late >&2; "
	                      "echo done\"],\"keep\":true}");
	long long pid = pid_of(p);
	struct output *o;
	json_t *list, *e;
	bool listed = false;
	size_t i;

	assert_true(json_is_true(json_object_get(p, "keep")));
	/* while it sleeps: "early" is already out */
	usleep(800 * 1000);
	o = read_output(id, pid);
	assert_string_equal(text_of(&o->out), "early\ndone\n");
	assert_string_equal(text_of(&o->err), "late\n");
	assert_int_equal(o->exit_code, 0);
	/* after it ended */
	p = wait_exited(id, pid);
	assert_int_equal(json_integer_value(json_object_get(p, "exit_code")), 0);
	o = read_output(id, pid);
	assert_string_equal(text_of(&o->out), "early\ndone\n");
	assert_string_equal(text_of(&o->err), "late\n");
	assert_int_equal(o->exit_code, 0);

	/* the list has it, exited */
	assert_int_equal(conf_request("GET", proc_path(id, 0, "/processes"), NULL, &list), 200);
	if (!json_is_array(json_object_get(list, "processes")))
		fail_msg("GET processes: no \"processes\" array: %s", dump(list));
	json_array_foreach (json_object_get(list, "processes"), i, e)
		if (pid_of(e) == pid) {
			listed = true;
			assert_string_equal(conf_str(e, "state"), "exited");
		}
	if (!listed)
		fail_msg("GET processes does not list process %lld", pid);
	expect_error("GET", proc_path(id, 999999, NULL), NULL, 404, "not_found");
	expect_error("GET", proc_path(id, 999999, "/output"), NULL, 404, "not_found");
}

/* A signal reaches the process: TERM ends sleep with 128 + 15; after the exit, 409. */
void
case_signal_ends_a_process(void **state)
{
	const char *id = process_sandbox();
	long long pid = pid_of(start(id, "{\"argv\":[\"sleep\",\"30\"]}"));
	const char *sig = proc_path(id, pid, "/signal");
	struct output *o;

	expect_error("POST", sig, "{\"signal\":\"NOSUCH\"}", 400, "invalid_request");
	expect_error("POST", sig, "{\"signal\":9}", 400, "invalid_request");
	assert_int_equal(conf_request("POST", sig, "{\"signal\":\"TERM\"}", NULL), 204);
	o = read_output(id, pid);
	if (o->exit_code != 128 + 15)
		fail_msg("sleep after SIGTERM: expected exit code 143, got %lld", o->exit_code);
	expect_error("POST", sig, "{\"signal\":\"KILL\"}", 409, "conflict");
	expect_error("POST", proc_path(id, 999999, "/signal"), "{\"signal\":\"TERM\"}", 404,
	             "not_found");
}

/* Contract: a run or process ended by its timeout_secs reports timed_out true and exit code
 * -1, never the signal's 137: the run's answer, the process object and the last line of its
 * output. A SIGKILL the user sends is still 128 + 9, and not a timeout. */
void
case_timeouts_report_exit_code_minus_one(void **state)
{
	const char *id = process_sandbox();
	struct ran r = run(id, "{\"argv\":[\"sleep\",\"30\"],\"timeout_secs\":1}");
	long long pid;
	json_t *p;
	struct output *o;

	if (!r.timed_out || r.exit_code != -1)
		fail_msg("a run ended by its timeout: expected timed_out true and exit_code -1: %s",
		         dump(r.json));

	pid = pid_of(start(id, "{\"argv\":[\"sleep\",\"30\"],\"timeout_secs\":1}"));
	p = wait_exited(id, pid);
	if (json_integer_value(json_object_get(p, "exit_code")) != -1 ||
	    !json_is_true(json_object_get(p, "timed_out")))
		fail_msg("a process ended by its timeout: expected exit_code -1 and timed_out "
		         "true: %s",
		         dump(p));
	o = read_output(id, pid);
	if (o->exit_code != -1)
		fail_msg("the output of a process ended by its timeout ends with exit code %lld, "
		         "not -1",
		         o->exit_code);

	/* the user's SIGKILL, with a timeout still far off */
	pid = pid_of(start(id, "{\"argv\":[\"sleep\",\"30\"],\"timeout_secs\":600}"));
	assert_int_equal(
	        conf_request("POST", proc_path(id, pid, "/signal"), "{\"signal\":\"KILL\"}", NULL),
	        204);
	p = wait_exited(id, pid);
	if (json_integer_value(json_object_get(p, "exit_code")) != 128 + 9 ||
	    json_is_true(json_object_get(p, "timed_out")))
		fail_msg("a process the user killed: expected exit_code 137, not a timeout: %s",
		         dump(p));
}

/* R-P7: the reserved environment names are refused on run and on process creation as on
 * create, alone or among good ones, and nothing starts. */
void
case_reserved_environment_names_are_refused_on_run_and_processes(void **state)
{
	static const char *const reserved[] = {
		"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",   "BASH_ENV",
		"ENV",        "SHELLOPTS",       "BASHOPTS",   "PS4",
		"IFS",        "GLOBIGNORE",      "SANDBOXD_X",
	};
	const char *id = process_sandbox();
	json_t *list;
	size_t before;

	assert_int_equal(conf_request("GET", proc_path(id, 0, "/processes"), NULL, &list), 200);
	before = json_array_size(json_object_get(list, "processes"));
	for (size_t i = 0; i < ARRAY_SIZE(reserved); i++) {
		const char *body = conf_fmt("{\"argv\":[\"true\"],\"env\":{\"GOOD\":\"1\",\"%s\":"
		                            "\"/tmp/x.so\"}}",
		                            reserved[i]);
		expect_error("POST", proc_path(id, 0, "/run"), body, 403, "refused");
		expect_error("POST", proc_path(id, 0, "/processes"), body, 403, "refused");
	}
	assert_int_equal(conf_request("GET", proc_path(id, 0, "/processes"), NULL, &list), 200);
	if (json_array_size(json_object_get(list, "processes")) != before)
		fail_msg("a refused request started a process: %s", dump(list));
}

static long
send_stdin(const char *id, long long pid, const char *query, const void *data, size_t len)
{
	const struct conf_resp *r = conf_send(&(struct conf_req){
	        .method = "POST",
	        .path = proc_path(id, pid, query),
	        .body = len ? data : "",
	        .body_len = len,
	        .content_type = "application/octet-stream",
	});

	return r->status;
}

/* stdin as raw bytes, then the end of input with close=1; after the exit, 409. */
void
case_stdin_reaches_a_process(void **state)
{
	const char *id = process_sandbox();
	long long pid = pid_of(start(id, "{\"argv\":[\"cat\"]}"));
	static const char first[] = "hello\0world\n\xff";
	json_t *j;
	struct output *o;

	assert_int_equal(send_stdin(id, pid, "/stdin", first, sizeof(first) - 1), 204);
	/* without the end of input, cat waits for more */
	usleep(300 * 1000);
	assert_int_equal(conf_request("GET", proc_path(id, pid, NULL), NULL, &j), 200);
	assert_string_equal(conf_str(j, "state"), "running");
	assert_int_equal(send_stdin(id, pid, "/stdin?close=1", "bye", 3), 204);
	o = read_output(id, pid);
	assert_int_equal(o->exit_code, 0);
	assert_int_equal(o->out.len, sizeof(first) - 1 + 3);
	if (memcmp(o->out.data, first, sizeof(first) - 1) != 0 ||
	    memcmp(o->out.data + sizeof(first) - 1, "bye", 3) != 0)
		fail_msg("cat gave back other bytes than its stdin");
	if (send_stdin(id, pid, "/stdin", "late", 4) != 409)
		fail_msg("stdin after the process exited: expected 409");
}

/* ---- attach ---- */

struct attach {
	struct conf_conn *c;
	bool ws;
	struct buf in;     /* bytes read and not yet taken apart */
	struct buf msg;    /* WebSocket: the message being assembled */
	bool in_msg;       /* WebSocket: a message has begun */
	bool ended;        /* the server closed (or sent a WebSocket close) */
	uint64_t dropped;  /* what 'd' frames said */
	struct buf output; /* every 'o' and 'E' byte so far */
};

static void
attach_free(void *p)
{
	struct attach *a = p;

	buf_free(&a->in);
	buf_free(&a->msg);
	buf_free(&a->output);
	free(a);
}

/* RFC 6455 4.2.2: base64(SHA-1(key + the GUID)). */
static const char *
ws_accept_for(const char *key)
{
	_cleanup_free_ char *s = strdup_printf("%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
	_cleanup_buf_ struct buf out = BUF_INIT(64);
	unsigned char md[SHA_DIGEST_LENGTH];

	if (!s)
		fail_msg("out of memory");
	SHA1((const unsigned char *)s, strlen(s), md);
	if (base64_encode(&out, md, sizeof(md)) < 0)
		fail_msg("out of memory");
	return conf_keep(buf_steal(&out));
}

/* A client WebSocket frame: FIN, the opcode, masked with a fresh key (RFC 6455 5.2, 5.3). */
static void
ws_send_frame(struct attach *a, uint8_t opcode, const void *payload, size_t len, bool must)
{
	_cleanup_buf_ struct buf f = BUF_INIT(FRAME_MAX + 32);
	const uint8_t *p = payload;
	uint8_t h[14], mask[4];
	size_t n = 0;

	h[n++] = (uint8_t)(0x80 | opcode);
	if (len < 126) {
		h[n++] = (uint8_t)(0x80 | len);
	} else if (len <= 0xffff) {
		h[n++] = 0x80 | 126;
		h[n++] = (uint8_t)(len >> 8);
		h[n++] = (uint8_t)len;
	} else {
		h[n++] = 0x80 | 127;
		for (int i = 7; i >= 0; i--)
			h[n++] = (uint8_t)((uint64_t)len >> (8 * i));
	}
	if (random_bytes(mask, sizeof(mask)) < 0)
		fail_msg("getrandom failed");
	memcpy(h + n, mask, 4);
	n += 4;
	if (buf_append(&f, h, n) < 0 || buf_reserve(&f, len) < 0)
		fail_msg("out of memory");
	for (size_t i = 0; i < len; i++)
		(void)buf_putc(&f, (char)(p[i] ^ mask[i % 4]));
	if (must)
		conf_conn_send(a->c, f.data, f.len);
	else
		(void)conf_conn_write(a->c, f.data, f.len);
}

/* One attach frame to the server: type, u32 length, payload; inside one binary WebSocket
 * message when attached over WebSocket. */
static void
attach_send(struct attach *a, char type, const void *payload, size_t len)
{
	_cleanup_buf_ struct buf f = BUF_INIT(FRAME_MAX + 5);
	uint8_t h[5] = { (uint8_t)type, (uint8_t)(len >> 24), (uint8_t)(len >> 16),
		         (uint8_t)(len >> 8), (uint8_t)len };

	if (buf_append(&f, h, 5) < 0 || buf_append(&f, payload, len) < 0)
		fail_msg("out of memory");
	if (a->ws)
		ws_send_frame(a, 0x2, f.data, f.len, true);
	else
		conf_conn_send(a->c, f.data, f.len);
}

static void
attach_input(struct attach *a, const char *text)
{
	attach_send(a, 'i', text, strlen(text));
}

static void
attach_resize(struct attach *a, unsigned rows, unsigned cols)
{
	uint8_t p[4] = { (uint8_t)(rows >> 8), (uint8_t)rows, (uint8_t)(cols >> 8), (uint8_t)cols };

	attach_send(a, 'r', p, sizeof(p));
}

/* Takes one attach frame off the front of b (5-byte header, payload). false: not all there. */
static bool
take_frame(struct buf *b, uint8_t *ret_type, struct buf *ret_payload)
{
	const uint8_t *h = (const uint8_t *)buf_head(b);
	uint32_t n;

	if (buf_avail(b) < 5)
		return false;
	n = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
	if (n > FRAME_MAX)
		fail_msg("attach: a frame of %u bytes, past 1 MiB", n);
	if (buf_avail(b) < 5 + (size_t)n)
		return false;
	*ret_type = h[0];
	buf_reset(ret_payload);
	if (n && buf_append(ret_payload, h + 5, n) < 0)
		fail_msg("out of memory");
	buf_consume(b, 5 + (size_t)n);
	return true;
}

/* Takes one WebSocket frame off a->in and acts on it. Returns true when a whole message is in
 * a->msg; false when more bytes are needed or the frame was a control frame. */
static bool
ws_take(struct attach *a, bool *ret_progress)
{
	const uint8_t *h = (const uint8_t *)buf_head(&a->in);
	size_t avail = buf_avail(&a->in), hl = 2;
	uint64_t len;
	uint8_t op;
	bool fin;

	*ret_progress = false;
	if (avail < 2)
		return false;
	fin = h[0] & 0x80;
	op = h[0] & 0x0f;
	if (h[0] & 0x70)
		fail_msg("WebSocket: the server set reserved bits (0x%02x) nothing negotiated",
		         h[0]);
	if (h[1] & 0x80)
		fail_msg("WebSocket: the server masked a frame (RFC 6455 5.1: it must not)");
	len = h[1] & 0x7f;
	if (len == 126) {
		if (avail < 4)
			return false;
		len = (uint64_t)h[2] << 8 | h[3];
		hl = 4;
	} else if (len == 127) {
		if (avail < 10)
			return false;
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | h[2 + i];
		hl = 10;
	}
	if (len > FRAME_MAX + 5)
		fail_msg("WebSocket: a frame of %llu bytes", (unsigned long long)len);
	if (avail < hl + len)
		return false;
	*ret_progress = true;
	switch (op) {
	case 0x0: /* continuation */
	case 0x2: /* binary */
		if ((op == 0x2) == a->in_msg)
			fail_msg("WebSocket: a %s frame %s a message",
			         op ? "binary" : "continuation", a->in_msg ? "inside" : "outside");
		if (op == 0x2)
			buf_reset(&a->msg);
		a->in_msg = !fin;
		if (buf_append(&a->msg, h + hl, len) < 0)
			fail_msg("WebSocket: a message past 1 MiB");
		buf_consume(&a->in, hl + len);
		return fin;
	case 0x1:
		fail_msg("WebSocket: a text message; attach sends binary ones");
		return false;
	case 0x8: /* close: answered, and the end */
		ws_send_frame(a, 0x8, h + hl, MIN(len, 2), false);
		buf_consume(&a->in, hl + len);
		a->ended = true;
		return false;
	case 0x9: /* ping */
		ws_send_frame(a, 0xa, h + hl, len, false);
		buf_consume(&a->in, hl + len);
		return false;
	case 0xa: /* pong */
		buf_consume(&a->in, hl + len);
		return false;
	default:
		fail_msg("WebSocket: unknown opcode %u", op);
		return false;
	}
}

/* The next frame from the server, within timeout_ms. Returns false when none came or the
 * server ended the connection (a->ended). */
static bool
attach_next(struct attach *a, int timeout_ms, uint8_t *ret_type, struct buf *ret_payload)
{
	uint64_t deadline = now_mono_ms() + (uint64_t)timeout_ms;
	char chunk[65536];

	for (;;) {
		uint64_t now;
		ssize_t n;

		if (a->ws) {
			bool progress = true;
			while (!a->ended && progress) {
				if (ws_take(a, &progress)) {
					struct buf *m = &a->msg;
					if (!take_frame(m, ret_type, ret_payload) || buf_avail(m))
						fail_msg("WebSocket: a binary message of %zu bytes "
						         "is not exactly one attach frame",
						         m->len);
					buf_reset(m);
					return true;
				}
			}
		} else if (take_frame(&a->in, ret_type, ret_payload)) {
			return true;
		}
		if (a->ended)
			return false;
		now = now_mono_ms();
		if (now >= deadline)
			return false;
		n = conf_conn_recv(a->c, chunk, sizeof(chunk), (int)(deadline - now));
		if (n == -ETIMEDOUT)
			return false;
		if (n <= 0) {
			a->ended = true;
			if (buf_avail(&a->in))
				fail_msg("attach: the connection ended inside a frame");
			return false;
		}
		if (buf_append(&a->in, chunk, (size_t)n) < 0)
			fail_msg("attach: more than 1 MiB of unframed bytes");
	}
}

/* Reads frames until the output so far contains want; fails on an exit or a timeout. */
static void
attach_expect(struct attach *a, const char *want)
{
	_cleanup_buf_ struct buf payload = BUF_INIT(FRAME_MAX);
	uint64_t deadline = now_mono_ms() + WAIT_MS;
	uint8_t type;

	while (!a->output.data || !strstr(a->output.data, want)) {
		uint64_t now = now_mono_ms();
		if (now >= deadline || !attach_next(a, (int)(deadline - now), &type, &payload))
			fail_msg("attach: '%s' did not come (the output so far: '%.300s')%s", want,
			         text_of(&a->output), a->ended ? "; the connection ended" : "");
		switch (type) {
		case 'o':
		case 'E':
			if (buf_append(&a->output, payload.data, payload.len) < 0)
				fail_msg("attach: too much output");
			break;
		case 'd':
			if (payload.len != 8)
				fail_msg("attach: a 'd' frame of %zu bytes, not 8", payload.len);
			break;
		case 'x':
			fail_msg("attach: the process exited before '%s' came (output: '%.300s')",
			         want, text_of(&a->output));
		default:
			fail_msg("attach: an unknown frame type 0x%02x", type);
		}
	}
}

/* Reads frames until 'x'; returns the exit code. 'x' is the last frame: the server closes. */
static int
attach_expect_exit(struct attach *a)
{
	_cleanup_buf_ struct buf payload = BUF_INIT(FRAME_MAX);
	uint64_t deadline = now_mono_ms() + WAIT_MS;
	uint8_t type;
	const uint8_t *p;
	int code;

	for (;;) {
		uint64_t now = now_mono_ms();
		if (now >= deadline || !attach_next(a, (int)(deadline - now), &type, &payload))
			fail_msg("attach: no exit frame came%s (output: '%.300s')",
			         a->ended ? "; the connection ended" : "", text_of(&a->output));
		if (type == 'x')
			break;
		if (type == 'o' || type == 'E')
			(void)buf_append(&a->output, payload.data, payload.len);
		else if (type != 'd')
			fail_msg("attach: an unknown frame type 0x%02x", type);
	}
	if (payload.len != 4)
		fail_msg("attach: an 'x' frame of %zu bytes, not 4", payload.len);
	p = (const uint8_t *)payload.data;
	code = (int)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
	/* nothing after it: the stream (or the WebSocket, after its close) ends */
	if (attach_next(a, 5000, &type, &payload))
		fail_msg("attach: a frame (0x%02x) after the exit frame", type);
	if (!a->ended)
		fail_msg("attach: the connection stays open after the exit frame");
	return code;
}

/* Attaches to a process over sbx-stream/1 or WebSocket, checking the 101 answer. query: appended
 * to the path ("" for none). */
static struct attach *
attach_open(const char *id, long long pid, bool ws, const char *query, enum conf_auth auth)
{
	struct attach *a = conf_defer(attach_free, calloc(1, sizeof(*a)));
	const char *path = conf_fmt("%s%s", proc_path(id, pid, "/attach"), query);
	struct conf_upgrade up;
	const char *key = NULL, *v;
	unsigned char nonce[16];
	_cleanup_buf_ struct buf b64 = BUF_INIT(64);

	buf_init(&a->in, 2 * FRAME_MAX + 64);
	buf_init(&a->msg, FRAME_MAX + 5);
	buf_init(&a->output, 8u << 20);
	a->ws = ws;
	if (ws) {
		if (random_bytes(nonce, sizeof(nonce)) < 0 ||
		    base64_encode(&b64, nonce, sizeof(nonce)) < 0)
			fail_msg("out of memory");
		key = conf_keep(buf_steal(&b64));
		a->c = conf_upgrade(path, auth,
		                    (const char *const[]){ "Upgrade: websocket",
		                                           "Connection: Upgrade",
		                                           conf_fmt("Sec-WebSocket-Key: %s", key),
		                                           "Sec-WebSocket-Version: 13", NULL },
		                    &up);
	} else {
		a->c = conf_upgrade(path, auth,
		                    (const char *const[]){ "Upgrade: sbx-stream/1",
		                                           "Connection: Upgrade", NULL },
		                    &up);
	}
	if (!a->c)
		fail_msg("GET %s (%s): expected 101, got %ld: %.300s", path,
		         ws ? "WebSocket" : "sbx-stream/1", up.status, up.body);
	v = conf_head_value(up.head, "upgrade");
	if (!v || strcasecmp(v, ws ? "websocket" : "sbx-stream/1") != 0)
		fail_msg("attach: the 101 answer's Upgrade is '%s'", v ? v : "(none)");
	v = conf_head_value(up.head, "connection");
	if (!v || !strcasestr(v, "upgrade"))
		fail_msg("attach: the 101 answer's Connection is '%s'", v ? v : "(none)");
	if (ws) {
		v = conf_head_value(up.head, "sec-websocket-accept");
		if (!v || !streq(v, ws_accept_for(key)))
			fail_msg("WebSocket: Sec-WebSocket-Accept is '%s'; RFC 6455 4.2.2 makes it "
			         "'%s' for key '%s'",
			         v ? v : "(none)", ws_accept_for(key), key);
	}
	return a;
}

/* Leaves without a word: no 'e', no WebSocket close. */
static void
attach_drop(struct attach *a)
{
	conf_conn_close(a->c);
	a->ended = true;
}

/* The process is still running a while after its attach went away. */
static void
assert_still_running(const char *id, long long pid)
{
	json_t *j;

	usleep(500 * 1000);
	assert_int_equal(conf_request("GET", proc_path(id, pid, NULL), NULL, &j), 200);
	if (!streq(conf_str(j, "state"), "running"))
		fail_msg("process %lld is '%s' after its attach disconnected: detaching must "
		         "never stop it",
		         pid, conf_str(j, "state"));
}

/* The same exchange over either transport: input, its echo, a dropped connection that leaves
 * the process running, a second attach that replays from the start, the end of input and the
 * exit code. */
static void
attach_round(const char *id, bool ws)
{
	long long pid = pid_of(start(id, "{\"argv\":[\"cat\"]}"));
	struct attach *a = attach_open(id, pid, ws, "", CONF_AUTH_TOKEN);
	const json_t *j;

	attach_input(a, "first line\n");
	attach_expect(a, "first line\n");
	attach_drop(a);
	assert_still_running(id, pid);

	a = attach_open(id, pid, ws, "", CONF_AUTH_TOKEN);
	/* the replay comes before anything new */
	attach_expect(a, "first line\n");
	attach_input(a, "second line\n");
	attach_expect(a, "first line\nsecond line\n");
	attach_send(a, 'e', NULL, 0);
	assert_int_equal(attach_expect_exit(a), 0);
	assert_string_equal(text_of(&a->output), "first line\nsecond line\n");
	j = wait_exited(id, pid);
	assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), 0);
}

/* Attach streams input and output, over sbx-stream/1. */
void
case_attach_streams_input_and_output(void **state)
{
	const char *id = process_sandbox();
	long long pid;
	struct attach *a;
	struct conf_upgrade up;

	attach_round(id, false);

	/* a signal frame reaches the process */
	pid = pid_of(start(id, "{\"argv\":[\"sleep\",\"30\"]}"));
	a = attach_open(id, pid, false, "", CONF_AUTH_TOKEN);
	attach_send(a, 's', "TERM", 4);
	if (attach_expect_exit(a) != 128 + 15)
		fail_msg("sleep after an 's' TERM frame: expected exit code 143");

	/* no upgrade, no attach; an unknown process is 404 */
	expect_error("GET", proc_path(id, pid, "/attach"), NULL, 400, "invalid_request");
	if (conf_upgrade(
	            proc_path(id, 999999, "/attach"), CONF_AUTH_TOKEN,
	            (const char *const[]){ "Upgrade: sbx-stream/1", "Connection: Upgrade", NULL },
	            &up))
		fail_msg("attach to a process that does not exist was upgraded");
	conf_assert_error(up.status, up.json, 404, "not_found");
}

/* The same over WebSocket (RFC 6455): the handshake's accept value, masked client frames,
 * unmasked server frames, one attach frame per binary message. */
void
case_attach_over_websocket(void **state)
{
	const char *id = process_sandbox();
	struct conf_upgrade up;
	long long pid;
	struct attach *a;

	/* the client's own arithmetic, on RFC 6455's example (section 1.3) */
	assert_string_equal(ws_accept_for("dGhlIHNhbXBsZSBub25jZQ=="),
	                    "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	attach_round(id, true);

	pid = pid_of(start(id, "{\"argv\":[\"cat\"]}"));
	/* a handshake without a key, or of another version, is not upgraded */
	if (conf_upgrade(proc_path(id, pid, "/attach"), CONF_AUTH_TOKEN,
	                 (const char *const[]){ "Upgrade: websocket", "Connection: Upgrade",
	                                        "Sec-WebSocket-Version: 13", NULL },
	                 &up))
		fail_msg("a WebSocket handshake without Sec-WebSocket-Key was upgraded");
	assert_int_equal(up.status, 400);
	if (conf_upgrade(proc_path(id, pid, "/attach"), CONF_AUTH_TOKEN,
	                 (const char *const[]){ "Upgrade: websocket", "Connection: Upgrade",
	                                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
	                                        "Sec-WebSocket-Version: 8", NULL },
	                 &up))
		fail_msg("a WebSocket handshake of version 8 was upgraded");
	if (up.status != 400 && up.status != 426)
		fail_msg("a WebSocket handshake of version 8: expected 400 or 426, got %ld",
		         up.status);
	/* without a credential, nothing (TCP; a unix socket's peer is its credential) */
	if (conf_has_token()) {
		if (conf_upgrade(
		            proc_path(id, pid, "/attach"), CONF_AUTH_NONE,
		            (const char *const[]){ "Upgrade: websocket", "Connection: Upgrade",
		                                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
		                                   "Sec-WebSocket-Version: 13", NULL },
		            &up))
			fail_msg("a WebSocket attach without a credential was upgraded");
		conf_assert_error(up.status, up.json, 401, "unauthorized");
		/* a browser cannot set Authorization: the token may ride in the query of an
		 * Upgrade handshake (and only there; see query_token_is_not_a_credential) */
		a = attach_open(id, pid, true, conf_fmt("?token=%s", conf_escape(conf_token())),
		                CONF_AUTH_NONE);
		attach_input(a, "by query token\n");
		attach_expect(a, "by query token\n");
		attach_send(a, 'e', NULL, 0);
		assert_int_equal(attach_expect_exit(a), 0);
	}
}

/* A TTY has the size asked for at the start, and a resize frame changes it. */
void
case_tty_has_the_requested_size(void **state)
{
	const char *id = process_sandbox();
	json_t *p =
	        start(id, "{\"argv\":[\"stty\",\"size\"],\"tty\":true,\"rows\":30,\"cols\":100}");
	struct output *o;
	struct attach *a;
	long long pid;

	assert_true(json_is_true(json_object_get(p, "tty")));
	o = read_output(id, pid_of(p));
	assert_int_equal(o->exit_code, 0);
	if (!strstr(text_of(&o->out), "30 100"))
		fail_msg("stty size in a 30x100 TTY printed '%s'", text_of(&o->out));

	/* a shell in a TTY, resized over attach */
	pid = pid_of(start(id, "{\"argv\":[\"sh\"],\"tty\":true,\"rows\":24,\"cols\":80}"));
	a = attach_open(id, pid, false, "", CONF_AUTH_TOKEN);
	attach_resize(a, 40, 120);
	attach_input(a, "stty size\n");
	attach_expect(a, "40 120");
	attach_input(a, "exit 7\n");
	assert_int_equal(attach_expect_exit(a), 7);
}

/* An env value, given at create or at run, is the process's, and never comes back in
 * an answer about the process, the sandbox or its events. */
void
case_process_environment_is_passed_and_never_returned(void **state)
{
	const char *id = process_sandbox();
	const char *run_value = conf_fmt("run-s3cr3t-%s", conf_name("v"));
	const char *create_value = conf_shared_secret();
	const char *env =
	        conf_fmt("{\"CONF_RUN_SECRET\":\"%s\",\"CONF_PLAIN\":\"plain\"}", run_value);
	struct ran r = run(id, conf_fmt("{\"argv\":[\"env\"],\"env\":%s}", env));
	json_t *p;
	long long pid;
	const char *paths[6];

	assert_int_equal(r.exit_code, 0);
	if (!strstr(r.out, conf_fmt("CONF_SHARED_SECRET=%s\n", create_value)))
		fail_msg("the environment given at create is not the process's: '%.500s'", r.out);
	if (!strstr(r.out, conf_fmt("CONF_RUN_SECRET=%s\n", run_value)))
		fail_msg("the environment given to run is not the process's: '%.500s'", r.out);

	p = start(id,
	          conf_fmt("{\"argv\":[\"sh\",\"-c\",\"sleep 1\"],\"keep\":true,\"env\":%s}", env));
	pid = pid_of(p);
	if (strstr(dump(p), run_value) || strstr(dump(p), create_value))
		fail_msg("POST processes answers with an env value: %s", dump(p));
	paths[0] = proc_path(id, 0, "/processes");
	paths[1] = proc_path(id, pid, NULL);
	paths[2] = proc_path(id, 0, NULL);
	paths[3] = proc_path(id, 0, "/events");
	paths[4] = "/v1/sandboxes";
	paths[5] = proc_path(id, pid, "/output");
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		const struct conf_resp *resp = conf_send(&(struct conf_req){ .path = paths[i] });
		assert_int_equal(resp->status, 200);
		if (memmem(resp->body, resp->body_len, run_value, strlen(run_value)) ||
		    memmem(resp->body, resp->body_len, create_value, strlen(create_value)))
			fail_msg("GET %s carries an env value", paths[i]);
	}
}

/* SHA-256 over each string followed by a NUL (program first, unless NULL), in hex. */
static const char *
args_sha256(const char *program, const char *const *args, size_t n)
{
	_cleanup_buf_ struct buf all = BUF_INIT(1u << 20);
	unsigned char md[SHA256_DIGEST_LENGTH];
	char hex[2 * SHA256_DIGEST_LENGTH + 1];

	if (program && buf_append(&all, program, strlen(program) + 1) < 0)
		fail_msg("out of memory");
	for (size_t i = 0; i < n; i++)
		if (buf_append(&all, args[i], strlen(args[i]) + 1) < 0)
			fail_msg("out of memory");
	SHA256((const unsigned char *)(all.data ? all.data : ""), all.len, md);
	for (size_t i = 0; i < sizeof(md); i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return conf_fmt("%s", hex);
}

/* The audit log never keeps a process's arguments: a process is recorded as its program, the
 * number of its arguments and SHA-256 over each argument followed by a NUL (what
 * `printf '%s\0' ARGS | sha256sum` prints); the arguments themselves never. */
void
case_the_audit_log_never_keeps_a_processs_arguments(void **state)
{
	const char *id = process_sandbox();
	const char *marker = conf_fmt("secret-arg-%s", conf_name("x"));
	const char *const args[] = { marker, "two words" };
	const char *want, *with_program;
	json_t *events, *ev, *started = NULL;
	const char *text;
	long long pid = -1;
	bool exited = false;
	size_t i;
	struct ran r = run(id, conf_fmt("{\"argv\":[\"echo\",\"%s\",\"%s\"]}", args[0], args[1]));

	assert_int_equal(r.exit_code, 0);
	want = args_sha256(NULL, args, ARRAY_SIZE(args));
	/* the same with the program in front, to say what a mismatch is */
	with_program = args_sha256("echo", args, ARRAY_SIZE(args));

	events = conf_audit_trail(id);
	text = dump(events);
	if (strstr(text, marker))
		fail_msg("the audit log holds a process's argument '%s'", marker);
	json_array_foreach (events, i, ev) {
		const char *sha = conf_str(ev, "args_sha256");
		conf_assert_audit_record(ev, id);
		if (!streq(conf_str(ev, "type"), "process.started") ||
		    !streq(conf_str(ev, "program"), "echo") ||
		    (!streq(sha, want) && !streq(sha, with_program)))
			continue;
		started = ev;
		pid = json_integer_value(json_object_get(ev, "pid"));
	}
	if (!started)
		fail_msg("no process.started event with program 'echo' and args_sha256 %s "
		         "(SHA-256 over each argument and a NUL) among %zu events",
		         want, json_array_size(events));
	if (json_integer_value(json_object_get(started, "arg_count")) != 2)
		fail_msg("process.started: arg_count is not 2: %s", dump(started));
	if (!streq(conf_str(started, "args_sha256"), want))
		fail_msg(
		        "process.started: args_sha256 is SHA-256 of 'echo\\0%s\\0two words\\0', "
		        "the program included; the audit keeps SHA-256 over each argument followed "
		        "by a NUL, the arguments arg_count counts (2) without the program: %s",
		        marker, want);
	json_array_foreach (events, i, ev) {
		if (streq(conf_str(ev, "type"), "process.exited") &&
		    json_integer_value(json_object_get(ev, "pid")) == pid) {
			assert_int_equal(json_integer_value(json_object_get(ev, "exit_code")), 0);
			exited = true;
		}
	}
	if (!exited)
		fail_msg("no process.exited event for process %lld", pid);
}

/* The commands a generic API client expects of an image, run without a shell: echo, cat,
 * printenv (every variable; the values of the names given, one a line; exit 1 when one is not
 * set), env, pwd, sleep, true, false, nc, and in the base image (sandbox-base) python3. */
static void
expect_usual_commands(const char *id, bool base)
{
	const char *secret = conf_shared_secret();
	struct ran r;
	json_t *sb = conf_get(id);
	bool shared = streq(id, conf_shared_sandbox());

	r = run(id, "{\"argv\":[\"echo\",\"hello\",\"world\"]}");
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "hello world\n");
	r = run(id, "{\"argv\":[\"cat\"],\"stdin\":\"bGluZQo=\"}"); /* "line\n" */
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "line\n");
	r = run(id, "{\"argv\":[\"pwd\"]}");
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "/sandbox/home\n");
	r = run(id, "{\"argv\":[\"sleep\",\"0\"]}");
	assert_int_equal(r.exit_code, 0);
	r = run(id, "{\"argv\":[\"true\"]}");
	assert_int_equal(r.exit_code, 0);
	r = run(id, "{\"argv\":[\"false\"]}");
	assert_int_equal(r.exit_code, 1);

	/* env and printenv see the request's environment (and the sandbox's) */
	r = run(id, "{\"argv\":[\"env\"],\"env\":{\"CF_ONE\":\"1 one\"}}");
	assert_int_equal(r.exit_code, 0);
	if (!strstr(r.out, "\nCF_ONE=1 one\n") && !str_has_prefix(r.out, "CF_ONE=1 one\n"))
		fail_msg("env did not print CF_ONE=1 one: %.500s", r.out);
	r = run(id, "{\"argv\":[\"printenv\"],\"env\":{\"CF_ONE\":\"1 one\"}}");
	assert_int_equal(r.exit_code, 0);
	if (!strstr(r.out, "CF_ONE=1 one\n"))
		fail_msg("printenv did not print CF_ONE=1 one: %.500s", r.out);
	r = run(id, "{\"argv\":[\"printenv\",\"CF_ONE\",\"CF_TWO\"],\"env\":{\"CF_ONE\":\"1 "
	            "one\",\"CF_TWO\":\"two=2\"}}");
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "1 one\ntwo=2\n");
	r = run(id,
	        "{\"argv\":[\"printenv\",\"CF_ONE\",\"CF_NOT_SET\"],\"env\":{\"CF_ONE\":\"x\"}}");
	assert_int_equal(r.exit_code, 1);
	assert_string_equal(r.out, "x\n");
	if (shared && *conf_str(sb, "id")) {
		r = run(id, "{\"argv\":[\"printenv\",\"CONF_SHARED_SECRET\"]}");
		assert_int_equal(r.exit_code, 0);
		assert_string_equal(r.out, conf_fmt("%s\n", secret));
	}
	/* nc is there: whatever it says to -h, it ran (a missing program is 400) */
	(void)run(id, "{\"argv\":[\"nc\",\"-h\"]}");
	if (base) {
		r = run(id, "{\"argv\":[\"python3\",\"-c\",\"print(6 * 7)\"]}");
		assert_int_equal(r.exit_code, 0);
		assert_string_equal(r.out, "42\n");
	}
}

/* The default image, and the base image when the server has it installed. */
void
case_default_images_have_the_usual_commands(void **state)
{
	const char *id = process_sandbox(), *image = conf_str(conf_get(id), "image");
	const json_t *img;
	json_t *images;
	size_t i;
	bool base_installed = false;

	expect_usual_commands(id, streq(image, "sandbox-base"));
	if (streq(image, "sandbox-base"))
		return;
	if (conf_request("GET", "/v1/images", NULL, &images) != 200)
		fail_msg("GET /v1/images: %s", dump(images));
	json_array_foreach (json_object_get(images, "images"), i, img)
		if (streq(conf_str(img, "image"), "sandbox-base") &&
		    streq(conf_str(img, "state"), "installed"))
			base_installed = true;
	if (!base_installed) {
		print_message("note: the default image is '%s'; sandbox-base is not installed, so "
		              "python3 was not looked for\n",
		              image);
		return;
	}
	expect_usual_commands(conf_str(conf_create("{\"image\":\"sandbox-base\"}"), "id"), true);
}
