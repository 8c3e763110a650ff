/* test-records.c: the records of --keep-sandboxes (daemon/core/records.c): a record read back
 * as it was written, every refusal of a bad one (saying what is wrong without quoting it: it
 * holds secrets), a sandbox given its values only when the record names exactly its variables,
 * the command lines kept, and the directory: made 0700, refused when others could read it or a
 * record, emptied without the flag; a record saved, loaded and deleted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "proc.h"
#include "records.h"
#include "sandboxd.h"
#include "strv.h"
#include "util.h"

#define ID "sbx_0123456789abcdef"

static const char good[] = "{\"version\":1,\"id\":\"" ID "\","
                           "\"env\":[{\"name\":\"ANTHROPIC_API_KEY\",\"value\":\"sk-1\"},"
                           "{\"name\":\"_x9\",\"value\":\"\"}],"
                           "\"procs\":[{\"pid\":17,\"argv\":[\"sh\",\"-c\",\"echo hi\"]}]}";

static int
parse(const char *text, struct record *rec, char **why)
{
	*why = NULL;
	return record_parse(text, strlen(text), rec, why);
}

static void
test_a_record_reads_back_as_written(void **state)
{
	struct record rec = { 0 }, again = { 0 };
	char *why = NULL, *text = NULL, *text2 = NULL;
	size_t len = 0, len2 = 0;

	(void)state;
	assert_int_equal(parse(good, &rec, &why), 0);
	assert_null(why);
	assert_string_equal(rec.id, ID);
	assert_int_equal(rec.nenv, 2);
	assert_string_equal(rec.env[0].name, "ANTHROPIC_API_KEY");
	assert_string_equal(rec.env[0].value, "sk-1");
	assert_string_equal(rec.env[1].value, "");
	assert_int_equal(rec.nprocs, 1);
	assert_int_equal(rec.procs[0].pid, 17);
	assert_int_equal(strv_length(rec.procs[0].argv), 3);
	assert_string_equal(rec.procs[0].argv[2], "echo hi");
	/* written, it reads back the same, and writes the same bytes again */
	assert_int_equal(record_format(&rec, &text, &len), 0);
	assert_int_equal(strlen(text), len);
	assert_int_equal(record_parse(text, len, &again, &why), 0);
	assert_int_equal(record_format(&again, &text2, &len2), 0);
	assert_int_equal(len, len2);
	assert_memory_equal(text, text2, len);
	/* values that need escaping survive: quotes, newlines, non-ASCII */
	free(rec.env[1].value);
	rec.env[1].value = strdup("a\"b\\c\nd\te — ü");
	free(text);
	assert_int_equal(record_format(&rec, &text, &len), 0);
	record_done(&again);
	assert_int_equal(record_parse(text, len, &again, &why), 0);
	assert_string_equal(again.env[1].value, "a\"b\\c\nd\te — ü");
	free(text);
	free(text2);
	record_done(&rec);
	record_done(&again);
	/* an empty one is a record too */
	assert_int_equal(
	        parse("{\"version\":1,\"id\":\"" ID "\",\"env\":[],\"procs\":[]}", &rec, &why), 0);
	assert_int_equal(rec.nenv + rec.nprocs, 0);
	record_done(&rec);
}

/* Each refused, with a message that says what is wrong and never quotes the record. */
static void
test_bad_records_are_refused(void **state)
{
	static const struct {
		const char *text, *why;
	} cases[] = {
		{ "", "it is not JSON" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[],\"procs\":[]", "it is not JSON" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[],\"procs\":[]} x", "it is not JSON" },
		{ "{\"version\":1,\"version\":1,\"id\":\"" ID "\",\"env\":[],\"procs\":[]}",
		  "names a member twice" },
		{ "[]", "not an object of exactly version, id, env and procs" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[]}",
		  "exactly version, id, env and procs" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[],\"procs\":[],\"sk-extra\":1}",
		  "exactly version, id, env and procs" },
		{ "{\"version\":2,\"id\":\"" ID "\",\"env\":[],\"procs\":[]}",
		  "its version is not 1" },
		{ "{\"version\":\"1\",\"id\":\"" ID "\",\"env\":[],\"procs\":[]}",
		  "version is not 1" },
		{ "{\"version\":1,\"id\":\"sk-secret-in-id\",\"env\":[],\"procs\":[]}",
		  "its id is not a sandbox id" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":{},\"procs\":[]}",
		  "'env' is not a list" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[{\"name\":\"K\"}],\"procs\":[]}",
		  "variable 0 is not" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[{\"name\":\"K\",\"value\":1}],"
		  "\"procs\":[]}",
		  "variable 0 is not" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[{\"name\":\"K\",\"value\":\"v\","
		  "\"x\":1}],\"procs\":[]}",
		  "variable 0 is not" },
		{ "{\"version\":1,\"id\":\"" ID
		  "\",\"env\":[{\"name\":\"sk-secret=\",\"value\":\"v\"}],"
		  "\"procs\":[]}",
		  "variable 0 has an invalid name" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[{\"name\":\"9K\",\"value\":\"v\"}],"
		  "\"procs\":[]}",
		  "variable 0 has an invalid name" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[{\"name\":\"K\",\"value\":\"a\"},"
		  "{\"name\":\"K\",\"value\":\"sk-b\"}],\"procs\":[]}",
		  "variable 1 is named twice" },
		{ "{\"version\":1,\"id\":\"" ID
		  "\",\"env\":[{\"name\":\"K\",\"value\":\"a\\u0000b\"}],"
		  "\"procs\":[]}",
		  "it is not JSON" },
		{ "{\"version\":1,\"id\":\"" ID
		  "\",\"env\":[],\"procs\":[{\"pid\":0,\"argv\":[\"a\"]}]}",
		  "process 0 is not" },
		{ "{\"version\":1,\"id\":\"" ID "\",\"env\":[],\"procs\":[{\"pid\":4294967296,"
		  "\"argv\":[\"a\"]}]}",
		  "process 0 is not" },
		{ "{\"version\":1,\"id\":\"" ID
		  "\",\"env\":[],\"procs\":[{\"pid\":1,\"argv\":[]}]}",
		  "process 0's argv is not a list of strings" },
		{ "{\"version\":1,\"id\":\"" ID
		  "\",\"env\":[],\"procs\":[{\"pid\":1,\"argv\":[1]}]}",
		  "process 0's argv is not a list of strings" },
		{ "{\"version\":1,\"id\":\"" ID
		  "\",\"env\":[],\"procs\":[{\"pid\":1,\"argv\":[\"a\"]},"
		  "{\"pid\":1,\"argv\":[\"b\"]}]}",
		  "process 1's pid is listed twice" },
	};
	struct record rec = { 0 };
	char *why = NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int r = parse(cases[i].text, &rec, &why);
		if (r != -EINVAL || !why || !strstr(why, cases[i].why))
			fail_msg("case %zu: %d '%s', expected '%s'", i, r, why ? why : "(none)",
			         cases[i].why);
		assert_null(strstr(why, "sk-"));
		assert_string_equal(rec.id, ""); /* untouched */
		free(why);
		why = NULL;
	}
}

/* The bounds: 256 variables of 32 KiB, 256 KiB in all; 256 processes; 16 KiB of argv. */
static void
test_bounds(void **state)
{
	struct buf b = BUF_INIT(16u << 20);
	struct record rec = { 0 };
	char *why = NULL, *big = malloc(40000);

	(void)state;
	assert_non_null(big);
	memset(big, 'v', 40000);
	/* one value over 32 KiB */
	big[32769] = '\0';
	assert_int_equal(buf_printf(&b,
	                            "{\"version\":1,\"id\":\"" ID "\",\"env\":[{\"name\":\"K\","
	                            "\"value\":\"%s\"}],\"procs\":[]}",
	                            big),
	                 0);
	assert_int_equal(record_parse(b.data, b.len, &rec, &why), -EINVAL);
	assert_non_null(strstr(why, "longer than 32768 bytes"));
	free(why);
	why = NULL;
	/* 9 values of 32 KiB: more than 256 KiB */
	big[32768] = '\0';
	buf_reset(&b);
	assert_int_equal(buf_printf(&b, "{\"version\":1,\"id\":\"" ID "\",\"env\":["), 0);
	for (int i = 0; i < 9; i++)
		assert_int_equal(buf_printf(&b, "%s{\"name\":\"K%d\",\"value\":\"%s\"}",
		                            i ? "," : "", i, big),
		                 0);
	assert_int_equal(buf_printf(&b, "],\"procs\":[]}"), 0);
	assert_int_equal(record_parse(b.data, b.len, &rec, &why), -EINVAL);
	assert_non_null(strstr(why, "the environment is larger than"));
	free(why);
	why = NULL;
	/* 257 variables */
	buf_reset(&b);
	assert_int_equal(buf_printf(&b, "{\"version\":1,\"id\":\"" ID "\",\"env\":["), 0);
	for (int i = 0; i < 257; i++)
		assert_int_equal(
		        buf_printf(&b, "%s{\"name\":\"K%d\",\"value\":\"\"}", i ? "," : "", i), 0);
	assert_int_equal(buf_printf(&b, "],\"procs\":[]}"), 0);
	assert_int_equal(record_parse(b.data, b.len, &rec, &why), -EINVAL);
	assert_non_null(strstr(why, "at most 256 variables"));
	free(why);
	why = NULL;
	/* an argv over 16 KiB */
	big[16384] = '\0';
	buf_reset(&b);
	assert_int_equal(buf_printf(&b,
	                            "{\"version\":1,\"id\":\"" ID "\",\"env\":[],\"procs\":[{"
	                            "\"pid\":3,\"argv\":[\"%s\"]}]}",
	                            big),
	                 0);
	assert_int_equal(record_parse(b.data, b.len, &rec, &why), -EINVAL);
	assert_non_null(strstr(why, "process 0's argv is longer than 16384 bytes"));
	free(why);
	why = NULL;
	/* more bytes than a record may have, whatever they are */
	assert_int_equal(record_parse(big, RECORD_MAX_BYTES + 1, &rec, &why), -EINVAL);
	assert_non_null(strstr(why, "larger than"));
	free(why);
	free(big);
	buf_free(&b);
}

static struct sandbox *
sandbox_with_env(const char *const *names)
{
	struct sandbox *sb = sandbox_new();
	size_t n = 0;

	assert_non_null(sb);
	snprintf(sb->id, sizeof(sb->id), "%s", ID);
	while (names[n])
		n++;
	sb->env = calloc(n + 1, sizeof(*sb->env));
	for (size_t i = 0; i < n; i++)
		sb->env[sb->nenv++].name = strdup(names[i]);
	return sb;
}

/* A sandbox gets its values only from a record of it that names exactly its variables. */
static void
test_apply_needs_exactly_the_sandboxs_variables(void **state)
{
	struct sandbox *sb;
	struct record rec = { 0 };
	char *why = NULL;

	(void)state;
	sb = sandbox_with_env((const char *const[]){ "_x9", "ANTHROPIC_API_KEY", NULL });
	assert_int_equal(parse(good, &rec, &why), 0);
	assert_int_equal(record_apply(&rec, sb, &why), 0);
	assert_string_equal(sb->env[0].value, "");
	assert_string_equal(sb->env[1].value, "sk-1");
	assert_int_equal(sb->nkept, 1);
	assert_string_equal(sb->kept[0].argv[0], "sh");
	record_done(&rec);
	sandbox_free(sb);

	/* one more, one fewer, another name, another sandbox */
	sb = sandbox_with_env((const char *const[]){ "_x9", "ANTHROPIC_API_KEY", "K", NULL });
	assert_int_equal(parse(good, &rec, &why), 0);
	assert_int_equal(record_apply(&rec, sb, &why), -EINVAL);
	assert_non_null(strstr(why, "it holds 2 environment variable(s), the sandbox has 3"));
	assert_null(sb->env[0].value);
	free(why);
	why = NULL;
	record_done(&rec);
	sandbox_free(sb);
	sb = sandbox_with_env((const char *const[]){ "_x9", "OTHER", NULL });
	assert_int_equal(parse(good, &rec, &why), 0);
	assert_int_equal(record_apply(&rec, sb, &why), -EINVAL);
	assert_non_null(strstr(why, "lacks the value of environment variable 'OTHER'"));
	assert_null(sb->env[0].value);
	free(why);
	why = NULL;
	snprintf(sb->id, sizeof(sb->id), "sbx_ffffffffffffffff");
	assert_int_equal(record_apply(&rec, sb, &why), -EINVAL);
	assert_non_null(strstr(why, "another sandbox"));
	free(why);
	record_done(&rec);
	sandbox_free(sb);
}

static void
add_proc(struct sandbox *sb, struct proc *p, uint32_t pid, bool keep, char **argv)
{
	*p = (struct proc){ .pid = pid, .keep = keep, .argv = argv };
	list_push_back(&sb->procs, &p->link);
}

/* What a sandbox's record holds: its values, its kept processes' command lines (the ones it
 * follows and the ones the last record named that the guest has not listed yet); a command line
 * too long is kept as its program, one that is not UTF-8 is not kept. */
static void
test_the_record_of_a_sandbox(void **state)
{
	struct sandbox *sb = sandbox_with_env((const char *const[]){ "K", NULL });
	struct proc procs[4];
	char *long_arg = calloc(1, RECORD_MAX_ARGV + 1);
	char *argv_kept[] = { "sleep", "600", NULL }, *argv_not[] = { "ls", NULL };
	char *argv_long[] = { "agent", long_arg, NULL }, *argv_bad[] = { "\xff\xfe", NULL };
	struct record rec = { 0 };

	(void)state;
	assert_non_null(long_arg);
	memset(long_arg, 'p', RECORD_MAX_ARGV);
	/* never written without its values */
	assert_int_equal(record_of_sandbox(sb, &rec), -ENODATA);
	sb->env[0].value = strdup("v");
	add_proc(sb, &procs[0], 10, true, argv_kept);
	add_proc(sb, &procs[1], 11, false, argv_not);
	add_proc(sb, &procs[2], 12, true, argv_long);
	add_proc(sb, &procs[3], 13, true, argv_bad);
	sb->kept = calloc(2, sizeof(*sb->kept));
	sb->nkept = 2;
	sb->kept[0] = (struct sandbox_kept){ .pid = 10 }; /* followed now: from procs */
	assert_int_equal(strv_copy((char *const[]){ "stale", NULL }, 1, &sb->kept[0].argv), 0);
	sb->kept[1] = (struct sandbox_kept){ .pid = 20 };
	assert_int_equal(
	        strv_copy((char *const[]){ "python3", "job.py", NULL }, 2, &sb->kept[1].argv), 0);
	assert_int_equal(record_of_sandbox(sb, &rec), 0);
	assert_int_equal(rec.nenv, 1);
	assert_string_equal(rec.env[0].value, "v");
	assert_int_equal(rec.nprocs, 3);
	assert_int_equal(rec.procs[0].pid, 20);
	assert_string_equal(rec.procs[0].argv[1], "job.py");
	assert_int_equal(rec.procs[1].pid, 10);
	assert_string_equal(rec.procs[1].argv[1], "600");
	assert_int_equal(rec.procs[2].pid, 12);
	assert_int_equal(strv_length(rec.procs[2].argv), 1);
	assert_string_equal(rec.procs[2].argv[0], "agent");
	record_done(&rec);
	/* the procs are the test's: unlink them before the sandbox goes */
	list_init(&sb->procs);
	sandbox_free(sb);
	free(long_arg);
}

static struct options opts;
static struct sandboxd d = { .opts = &opts };

static void
mode_of(const char *path, mode_t mode)
{
	struct stat st;

	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, mode);
}

static void
write_text(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

/* The directory with --keep-sandboxes: made 0700; the start refused while it, or a record in
 * it, is open to others, or a record is a link; half-written temporaries removed. */
static void
test_the_directory_with_keep(void **state)
{
	char state_dir[256], dir[300], file[400], tmp[400], link[400], *why = NULL;
	unsigned removed = 99;

	(void)state;
	assert_int_equal(harness_tmpdir(state_dir, sizeof(state_dir)), 0);
	snprintf(dir, sizeof(dir), "%s/records", state_dir);
	snprintf(file, sizeof(file), "%s/" ID ".json", dir);
	snprintf(tmp, sizeof(tmp), "%s/" ID ".json.tmp.123", dir);
	snprintf(link, sizeof(link), "%s/sbx_00000000000000ff.json", dir);
	assert_int_equal(records_prepare(state_dir, true, &removed, &why), 0);
	assert_int_equal(removed, 0);
	mode_of(dir, 0700);

	write_text(file, good, 0640);
	assert_int_equal(records_prepare(state_dir, true, &removed, &why), -EPERM);
	assert_non_null(strstr(why, "is open to group or others (mode 0640)"));
	assert_non_null(strstr(why, "chmod 600"));
	free(why);
	why = NULL;
	assert_int_equal(chmod(file, 0600), 0);
	assert_int_equal(chmod(dir, 0711), 0);
	assert_int_equal(records_prepare(state_dir, true, &removed, &why), -EPERM);
	assert_non_null(strstr(why, "the records directory"));
	assert_non_null(strstr(why, "chmod 700"));
	free(why);
	why = NULL;
	assert_int_equal(chmod(dir, 0700), 0);
	assert_int_equal(symlink(file, link), 0);
	assert_int_equal(records_prepare(state_dir, true, &removed, &why), -EPERM);
	assert_non_null(strstr(why, "is not a regular file"));
	free(why);
	why = NULL;
	assert_int_equal(unlink(link), 0);
	write_text(tmp, "{\"half", 0644);
	assert_int_equal(records_prepare(state_dir, true, &removed, &why), 0);
	assert_int_equal(access(tmp, F_OK), -1);
	assert_int_equal(access(file, F_OK), 0);

	/* without the flag: every record goes, the directory too */
	write_text(tmp, "{\"half", 0600);
	assert_int_equal(records_prepare(state_dir, false, &removed, &why), 0);
	assert_int_equal(removed, 2);
	assert_int_equal(access(dir, F_OK), -1);
	assert_int_equal(records_prepare(state_dir, false, &removed, &why), 0);
	assert_int_equal(removed, 0);
	assert_int_equal(rmdir(state_dir), 0);
}

/* Saved (0600, whole), loaded back, checked to be that sandbox's, deleted; nothing is written
 * without the flag. */
static void
test_save_load_remove(void **state)
{
	char state_dir[256], file[400], other[400], *why = NULL;
	struct sandbox *sb = sandbox_with_env((const char *const[]){ "K", NULL });
	struct record rec = { 0 };
	unsigned removed;

	(void)state;
	registry_init(&d.reg);
	assert_int_equal(harness_tmpdir(state_dir, sizeof(state_dir)), 0);
	opts.state_dir = state_dir;
	snprintf(file, sizeof(file), "%s/records/" ID ".json", state_dir);
	sb->env[0].value = strdup("sk-saved");
	opts.keep_sandboxes = false;
	assert_int_equal(records_save(&d, sb), 0);
	assert_int_equal(access(file, F_OK), -1);

	opts.keep_sandboxes = true;
	assert_int_equal(records_prepare(state_dir, true, &removed, &why), 0);
	assert_int_equal(records_load(&d, ID, &rec, &why), -ENOENT);
	assert_int_equal(records_save(&d, sb), 0);
	mode_of(file, 0600);
	assert_int_equal(records_load(&d, ID, &rec, &why), 0);
	assert_string_equal(rec.env[0].value, "sk-saved");
	record_done(&rec);
	/* a record under another sandbox's name is not that sandbox's */
	snprintf(other, sizeof(other), "%s/records/sbx_00000000000000ff.json", state_dir);
	assert_int_equal(rename(file, other), 0);
	assert_int_equal(records_load(&d, "sbx_00000000000000ff", &rec, &why), -EINVAL);
	assert_non_null(strstr(why, "another sandbox"));
	free(why);
	why = NULL;
	/* one others may read is not read */
	assert_int_equal(rename(other, file), 0);
	assert_int_equal(chmod(file, 0644), 0);
	assert_int_equal(records_load(&d, ID, &rec, &why), -EPERM);
	assert_non_null(strstr(why, "not a file of sandboxd's uid alone"));
	free(why);
	why = NULL;
	/* the sweep keeps none that no live sandbox has */
	assert_int_equal(records_sweep(&d), 1);
	assert_int_equal(access(file, F_OK), -1);
	assert_int_equal(records_save(&d, sb), 0);
	records_remove(&d, ID);
	assert_int_equal(access(file, F_OK), -1);
	records_remove(&d, ID); /* and again: nothing to do */
	sandbox_free(sb);
	assert_int_equal(records_prepare(state_dir, false, &removed, &why), 0);
	assert_int_equal(rmdir(state_dir), 0);
	opts = (struct options){ 0 };
	registry_done(&d.reg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_record_reads_back_as_written),
		cmocka_unit_test(test_bad_records_are_refused),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_apply_needs_exactly_the_sandboxs_variables),
		cmocka_unit_test(test_the_record_of_a_sandbox),
		cmocka_unit_test(test_the_directory_with_keep),
		cmocka_unit_test(test_save_load_remove),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
