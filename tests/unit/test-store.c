/* test-store.c: the SQLite store: schema migrations, rows surviving a reopen (as plain rows,
 * and as sandboxes the core builds from them), live-name uniqueness, event listing (oldest
 * first, truncation, owner filter), terminated rows loaded and forgotten, audit records and
 * the bound on events, an event that fails without taking its row along, and refusing a
 * database from a newer sandboxd. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "sandbox.h"
#include "store.h"
#include "util.h"

struct fixture {
	char dir[64];
	char path[96];
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	snprintf(f->dir, sizeof(f->dir), "/tmp/test-store.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/sandboxd.db", f->dir);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static struct sandbox *
make(const char *id, const char *name, const char *owner, enum sandbox_state st)
{
	struct sandbox *sb = sandbox_new();

	snprintf(sb->id, sizeof(sb->id), "%s", id);
	sb->name = name ? strdup(name) : NULL;
	sb->owner = strdup(owner);
	sb->image = strdup("img");
	sb->backend = strdup("test");
	sb->state = st;
	sb->cpus = 2;
	sb->memory_mb = 512;
	sb->disk_mb = 2048;
	sb->created_at = sb->updated_at = now_unix_ms();
	sb->env = calloc(2, sizeof(*sb->env));
	sb->env[0].name = strdup("TOKEN");
	sb->env[0].value = strdup("never-stored");
	sb->nenv = 1;
	json_object_set_new(sb->labels, "team", json_string("a"));
	assert_int_equal(sandbox_refresh_json(sb), 0);
	return sb;
}

static int
collect(struct sandbox *sb, void *data)
{
	json_t *ids = data;

	json_array_append_new(ids, json_string(sb->id));
	sandbox_free(sb);
	return 0;
}

static void
test_rows_survive_reopen(void **state)
{
	struct fixture *f = *state;
	struct store *s = NULL;
	struct sandbox *a = make("sbx_000000000000000a", "a", "alice", SANDBOX_RUNNING);
	struct sandbox *b = make("sbx_000000000000000b", NULL, "bob", SANDBOX_TERMINATED);
	struct sandbox *loaded = NULL;
	json_t *ids = json_array();
	struct stat st;

	assert_int_equal(store_open(f->path, &s), 0);
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(sandbox_save(s, a, true), 0);
	assert_int_equal(sandbox_save(s, b, true), 0);
	assert_int_equal(sandbox_save(s, a, true), -EEXIST);
	a->state = SANDBOX_STOPPED;
	assert_int_equal(sandbox_save(s, a, false), 0);
	s = store_free(s);

	assert_int_equal(store_open(f->path, &s), 0);
	assert_int_equal(sandbox_load_live(s, collect, ids), 0);
	assert_int_equal(json_array_size(ids), 1); /* the terminated one is not live */
	assert_string_equal(json_string_value(json_array_get(ids, 0)), a->id);
	assert_int_equal(sandbox_load(s, b->id, &loaded), 0);
	assert_int_equal(loaded->state, SANDBOX_TERMINATED);
	sandbox_free(loaded);
	assert_int_equal(sandbox_load(s, a->id, &loaded), 0);
	assert_int_equal(loaded->state, SANDBOX_STOPPED);
	assert_int_equal(loaded->cpus, 2);
	assert_string_equal(json_string_value(json_object_get(loaded->labels, "team")), "a");
	/* env names persist, values never do */
	assert_int_equal(loaded->nenv, 1);
	assert_string_equal(loaded->env[0].name, "TOKEN");
	assert_null(loaded->env[0].value);
	assert_null(strstr(loaded->json, "never-stored"));
	sandbox_free(loaded);
	assert_int_equal(sandbox_load(s, "sbx_00000000000000ff", &loaded), -ENOENT);
	store_free(s);
	sandbox_free(a);
	sandbox_free(b);
	json_decref(ids);
}

static int
copy_row(const struct store_sandbox *row, void *data)
{
	json_t **ret = data;

	*ret = json_pack("{s:s, s:s?, s:s, s:s, s:s?, s:s, s:s, s:s?, s:s, s:I, s:I}", "id",
	                 row->id, "name", row->name, "owner", row->owner, "state", row->state,
	                 "reason", row->reason, "image", row->image, "backend", row->backend,
	                 "runtime_ref", row->runtime_ref, "spec", row->spec, "created_at",
	                 (json_int_t)row->created_at, "updated_at", (json_int_t)row->updated_at);
	return *ret ? 0 : -ENOMEM;
}

/* The store keeps and returns rows as they are; reading them is the core's business, which
 * skips a row it cannot read rather than refusing to start. */
static void
test_rows_as_stored(void **state)
{
	struct fixture *f = *state;
	struct store *s = NULL;
	struct sandbox *loaded = NULL;
	const struct store_sandbox row = { .id = "sbx_000000000000003a",
		                           .owner = "alice",
		                           .state = "running",
		                           .reason = "why",
		                           .image = "img",
		                           .backend = "test",
		                           .spec = "{\"not\":\"a spec\"}",
		                           .created_at = 5,
		                           .updated_at = 6 };
	json_t *got = NULL, *ids = json_array();

	assert_int_equal(store_open(f->path, &s), 0);
	assert_int_equal(store_insert_sandbox(s, &row), 0);
	assert_int_equal(store_load(s, row.id, copy_row, &got), 0);
	assert_string_equal(json_string_value(json_object_get(got, "spec")), row.spec);
	assert_string_equal(json_string_value(json_object_get(got, "reason")), "why");
	assert_true(json_is_null(json_object_get(got, "name")));
	assert_true(json_is_null(json_object_get(got, "runtime_ref")));
	assert_int_equal(json_integer_value(json_object_get(got, "updated_at")), 6);
	json_decref(got);
	assert_int_equal(store_load(s, "sbx_00000000000000ff", copy_row, &got), -ENOENT);

	assert_int_equal(sandbox_load(s, row.id, &loaded), -EINVAL);
	assert_int_equal(sandbox_load_live(s, collect, ids), 0);
	assert_int_equal(json_array_size(ids), 0);
	assert_false(store_busy(s));
	store_free(s);
	json_decref(ids);
}

static void
test_live_names_are_unique(void **state)
{
	struct fixture *f = *state;
	struct store *s = NULL;
	struct sandbox *a = make("sbx_000000000000001a", "dev", "alice", SANDBOX_RUNNING);
	struct sandbox *b = make("sbx_000000000000001b", "dev", "alice", SANDBOX_RUNNING);
	struct sandbox *c = make("sbx_000000000000001c", "dev", "bob", SANDBOX_RUNNING);

	assert_int_equal(store_open(f->path, &s), 0);
	assert_int_equal(sandbox_save(s, a, true), 0);
	assert_int_equal(sandbox_save(s, b, true), -EEXIST); /* same owner, same live name */
	assert_int_equal(sandbox_save(s, c, true), 0);       /* names are per owner */
	a->state = SANDBOX_TERMINATED;
	assert_int_equal(sandbox_save(s, a, false), 0);
	assert_int_equal(sandbox_save(s, b, true), 0); /* the name is free again */
	store_free(s);
	sandbox_free(a);
	sandbox_free(b);
	sandbox_free(c);
}

static int
collect_seq(const struct store_event *e, void *data)
{
	json_t *seqs = data;

	json_array_append_new(seqs, json_integer(e->seq));
	return 0;
}

static int
collect_record(const char *record, void *data)
{
	json_array_append_new(data, json_string(record));
	return 0;
}

static void
test_events(void **state)
{
	struct fixture *f = *state;
	struct store *s = NULL;
	struct sandbox *a = make("sbx_000000000000002a", NULL, "alice", SANDBOX_RUNNING);
	struct sandbox *b = make("sbx_000000000000002b", NULL, "bob", SANDBOX_RUNNING);
	json_t *seqs = json_array(), *records = json_array(), *data = json_object();
	bool truncated = true;
	int64_t seq = 0;

	assert_int_equal(store_open(f->path, &s), 0);
	assert_int_equal(sandbox_save(s, a, true), 0);
	assert_int_equal(sandbox_save(s, b, true), 0);
	for (int i = 0; i < 10; i++) {
		/* a's odd ones have audit records ("r1", "r3" ... "r9"), b's none */
		char rec[8];
		snprintf(rec, sizeof(rec), "r%d", i);
		assert_int_equal(store_add_event(s, a->id, now_unix_ms(), "state", data,
		                                 i % 2 ? rec : NULL, &seq),
		                 0);
		assert_int_equal(
		        store_add_event(s, b->id, now_unix_ms(), "state", data, NULL, NULL), 0);
	}
	assert_int_equal(seq, 19);
	assert_int_equal(store_last_event_seq(s), 20);

	/* the newest 3 of a's 5 records, oldest first, and truncation is reported */
	assert_int_equal(store_list_audit(s, a->id, 3, collect_record, records, &truncated), 0);
	assert_int_equal(json_array_size(records), 3);
	assert_string_equal(json_string_value(json_array_get(records, 0)), "r5");
	assert_string_equal(json_string_value(json_array_get(records, 2)), "r9");
	assert_true(truncated);
	json_array_clear(records);
	assert_int_equal(store_list_audit(s, a->id, 5, collect_record, records, &truncated), 0);
	assert_int_equal(json_array_size(records), 5);
	assert_false(truncated);
	json_array_clear(records);
	assert_int_equal(store_list_audit(s, b->id, 5, collect_record, records, &truncated), 0);
	assert_int_equal(json_array_size(records), 0);

	/* replay after seq 10, only bob's */
	assert_int_equal(store_events_since(s, 10, "bob", NULL, 100, collect_seq, seqs), 0);
	assert_int_equal(json_array_size(seqs), 5);
	assert_int_equal(json_integer_value(json_array_get(seqs, 0)), 12);
	json_array_clear(seqs);
	assert_int_equal(store_events_since(s, 10, NULL, NULL, 3, collect_seq, seqs), 0);
	assert_int_equal(json_array_size(seqs), 3);
	/* only a's, whoever owns it: its events after 10 are 11, 13 ... 19 */
	json_array_clear(seqs);
	assert_int_equal(store_events_since(s, 10, NULL, a->id, 100, collect_seq, seqs), 0);
	assert_int_equal(json_array_size(seqs), 5);
	assert_int_equal(json_integer_value(json_array_get(seqs, 0)), 11);
	json_array_clear(seqs);
	assert_int_equal(store_events_since(s, 10, "bob", a->id, 100, collect_seq, seqs), 0);
	assert_int_equal(json_array_size(seqs), 0);

	/* the bound: the newest 6 stay, the oldest go, their records with them */
	assert_int_equal(store_prune_events(s, 100), 0);
	assert_int_equal(store_prune_events(s, 6), 14);
	json_array_clear(seqs);
	assert_int_equal(store_events_since(s, 0, NULL, NULL, 100, collect_seq, seqs), 0);
	assert_int_equal(json_array_size(seqs), 6);
	assert_int_equal(json_integer_value(json_array_get(seqs, 0)), 15);
	json_array_clear(records);
	assert_int_equal(store_list_audit(s, a->id, 5, collect_record, records, &truncated), 0);
	assert_int_equal(json_array_size(records), 2); /* r7 and r9 */
	assert_int_equal(store_prune_events(s, 6), 0);
	store_free(s);
	sandbox_free(a);
	sandbox_free(b);
	json_decref(seqs);
	json_decref(records);
	json_decref(data);
}

/* Terminated rows load oldest first; forgetting takes those that ended before a time, with
 * their events, and nothing else. */
static void
test_ended_are_loaded_and_forgotten(void **state)
{
	struct fixture *f = *state;
	struct store *s = NULL;
	struct sandbox *live = make("sbx_000000000000003a", "live", "alice", SANDBOX_RUNNING);
	struct sandbox *old = make("sbx_000000000000003b", "x", "alice", SANDBOX_TERMINATED);
	struct sandbox *recent = make("sbx_000000000000003c", "x", "alice", SANDBOX_TERMINATED);
	json_t *ids = json_array(), *seqs = json_array(), *data = json_object();
	bool truncated;

	/* created in this order; old ended at 1000, recent at 3000 */
	live->created_at = 1;
	recent->created_at = 2;
	old->created_at = 3;
	old->updated_at = 1000;
	recent->updated_at = 3000;
	live->updated_at = 10;
	assert_int_equal(store_open(f->path, &s), 0);
	assert_int_equal(sandbox_save(s, live, true), 0);
	assert_int_equal(sandbox_save(s, old, true), 0);
	assert_int_equal(sandbox_save(s, recent, true), 0);
	assert_int_equal(store_add_event(s, old->id, 1000, "state", data, "{}", NULL), 0);
	assert_int_equal(store_add_event(s, recent->id, 3000, "state", data, "{}", NULL), 0);
	assert_int_equal(store_add_event(s, live->id, 10, "state", data, "{}", NULL), 0);

	assert_int_equal(sandbox_load_ended(s, collect, ids), 0);
	assert_int_equal(json_array_size(ids), 2);
	assert_string_equal(json_string_value(json_array_get(ids, 0)), recent->id);
	assert_string_equal(json_string_value(json_array_get(ids, 1)), old->id);

	assert_int_equal(store_forget_ended(s, 1000), 0); /* strictly before */
	assert_int_equal(store_forget_ended(s, 2000), 1);
	assert_int_equal(store_forget_ended(s, 2000), 0);
	json_array_clear(ids);
	assert_int_equal(sandbox_load_ended(s, collect, ids), 0);
	assert_int_equal(json_array_size(ids), 1);
	assert_string_equal(json_string_value(json_array_get(ids, 0)), recent->id);
	{
		struct sandbox *gone = NULL;
		assert_int_equal(sandbox_load(s, old->id, &gone), -ENOENT);
	}
	assert_int_equal(store_list_audit(s, old->id, 10, collect_record, seqs, &truncated), 0);
	assert_int_equal(json_array_size(seqs), 0);
	assert_int_equal(store_list_audit(s, recent->id, 10, collect_record, seqs, &truncated), 0);
	assert_int_equal(json_array_size(seqs), 1);
	/* a live sandbox is never forgotten, however old */
	assert_int_equal(store_forget_ended(s, INT64_MAX), 1);
	json_array_clear(ids);
	assert_int_equal(sandbox_load_live(s, collect, ids), 0);
	assert_int_equal(json_array_size(ids), 1);
	store_free(s);
	sandbox_free(live);
	sandbox_free(old);
	sandbox_free(recent);
	json_decref(ids);
	json_decref(seqs);
	json_decref(data);
}

/* Makes every insert into events fail, as a full or broken audit store would. */
static void
refuse_events(const char *path)
{
	sqlite3 *db;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
	                              "CREATE TRIGGER refuse_events BEFORE INSERT ON events "
	                              "BEGIN SELECT RAISE(ABORT, 'the audit store is full'); END",
	                              NULL, NULL, NULL),
	                 SQLITE_OK);
	sqlite3_close(db);
}

/* In a row's transaction, a failed event is left out and the row is written all the same. */
static void
test_failed_event_keeps_the_row(void **state)
{
	struct fixture *f = *state;
	struct store *s = NULL;
	struct sandbox *a = make("sbx_000000000000003a", "kept", "alice", SANDBOX_RUNNING);
	json_t *data = json_object(), *seqs = json_array();
	struct sandbox *loaded = NULL;
	int64_t seq = -1;

	assert_int_equal(store_open(f->path, &s), 0);
	assert_int_equal(sandbox_save(s, a, true), 0);
	refuse_events(f->path);
	a->state = SANDBOX_STOPPED;
	assert_int_equal(store_begin(s), 0);
	assert_int_equal(sandbox_save(s, a, false), 0);
	assert_int_equal(store_add_event(s, a->id, now_unix_ms(), "state", data, "{}", &seq), -EIO);
	assert_int_equal(seq, -1);
	assert_int_equal(store_commit(s), 0);
	assert_int_equal(sandbox_load(s, a->id, &loaded), 0);
	assert_int_equal(loaded->state, SANDBOX_STOPPED);
	assert_int_equal(store_events_since(s, 0, NULL, NULL, 100, collect_seq, seqs), 0);
	assert_int_equal(json_array_size(seqs), 0);
	/* and outside a transaction it just fails */
	assert_int_equal(store_add_event(s, a->id, now_unix_ms(), "state", data, NULL, NULL), -EIO);
	store_free(s);
	sandbox_free(a);
	sandbox_free(loaded);
	json_decref(data);
	json_decref(seqs);
}

static void
test_newer_schema_is_refused(void **state)
{
	struct fixture *f = *state;
	struct store *s = NULL;
	sqlite3 *db;
	char sql[64];

	assert_int_equal(store_open(f->path, &s), 0);
	store_free(s);
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", store_schema_version() + 1);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(store_open(f->path, &s), -EPROTO);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rows_survive_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rows_as_stored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_names_are_unique, setup, teardown),
		cmocka_unit_test_setup_teardown(test_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ended_are_loaded_and_forgotten, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_failed_event_keeps_the_row, setup, teardown),
		cmocka_unit_test_setup_teardown(test_newer_schema_is_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
