/* test-sandbox.c: the lifecycle transition table (every (from, to) pair), the only writer of
 * a sandbox's state (sandbox_set_state: refuses, persists, publishes, and an audit store that
 * fails never fails it), names and ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <stdlib.h>
#include "audit.h"
#include "events.h"
#include "sandboxd.h"
#include "store.h"
#include "util.h"

/* Written out independently of daemon/core/sandbox.c on purpose: a change to the table there must
 * be made here too, deliberately. Rows: from; columns: to. */
static const char *const expected[_SANDBOX_STATE_MAX] = {
	/*                       P S R s T u F X g r  (pending starting running stopping stopped
	 *                                             suspended failed terminated suspending
	 *                                             resuming) */
	[SANDBOX_PENDING] = "0100001100",    [SANDBOX_STARTING] = "0010001100",
	[SANDBOX_RUNNING] = "0001001110",    [SANDBOX_STOPPING] = "0000101100",
	[SANDBOX_STOPPED] = "0100001100",    [SANDBOX_SUSPENDED] = "0001001101",
	[SANDBOX_FAILED] = "0100000100",     [SANDBOX_TERMINATED] = "0000000000",
	[SANDBOX_SUSPENDING] = "0010011100", [SANDBOX_RESUMING] = "0010011100",
};

static void
test_every_pair(void **state)
{
	for (int from = 0; from < _SANDBOX_STATE_MAX; from++)
		for (int to = 0; to < _SANDBOX_STATE_MAX; to++) {
			bool want = expected[from][to] == '1';
			bool got = sandbox_transition_allowed(from, to);
			if (want != got)
				fail_msg("%s -> %s: expected %s, table says %s",
				         sandbox_state_to_string(from), sandbox_state_to_string(to),
				         want ? "allowed" : "refused", got ? "allowed" : "refused");
		}
	assert_false(sandbox_transition_allowed(_SANDBOX_STATE_INVALID, SANDBOX_RUNNING));
	assert_false(sandbox_transition_allowed(SANDBOX_RUNNING, _SANDBOX_STATE_MAX));
}

static void
test_names_round_trip(void **state)
{
	for (int s = 0; s < _SANDBOX_STATE_MAX; s++)
		assert_int_equal(sandbox_state_from_string(sandbox_state_to_string(s)), s);
	assert_int_equal(sandbox_state_from_string("Running"), _SANDBOX_STATE_INVALID);
	assert_int_equal(sandbox_state_from_string(NULL), _SANDBOX_STATE_INVALID);
}

static void
test_name_rules(void **state)
{
	char n63[64], n64[65];

	memset(n63, 'a', 63);
	n63[63] = '\0';
	memset(n64, 'a', 64);
	n64[64] = '\0';
	assert_true(sandbox_name_valid("dev"));
	assert_true(sandbox_name_valid("0-a"));
	assert_true(sandbox_name_valid(n63));
	assert_false(sandbox_name_valid(n64));
	assert_false(sandbox_name_valid(""));
	assert_false(sandbox_name_valid("sbx_x"));
	assert_false(sandbox_name_valid("Upper"));
	assert_false(sandbox_name_valid("has space"));
	assert_false(sandbox_name_valid("-lead"));
	assert_true(sandbox_id_valid("sbx_0123456789abcdef"));
	assert_true(sandbox_id_valid("sbx_n17_0123456789abcdef"));
	assert_false(sandbox_id_valid("sbx_0123456789ABCDEF"));
	assert_false(sandbox_id_valid("sbx_0123456789abcde"));
	assert_false(sandbox_id_valid("sbx__0123456789abcdef"));
	assert_false(sandbox_id_valid("dev"));
}

/* A daemon context with a real store in a temporary directory, no server, no backend. */
struct fixture {
	struct sandboxd d;
	char dir[64];
	unsigned notified;
	enum sandbox_state last_seen;
	unsigned broadcast;
	bool events_refused;
	char *last_audit; /* the last broadcast's audit record */
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char path[128];

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/test-sandbox.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(path, sizeof(path), "%s/db", f->dir);
	assert_int_equal(loop_new(&f->d.loop), 0);
	assert_int_equal(store_open(path, &f->d.store), 0);
	registry_init(&f->d.reg);
	list_init(&f->d.subscribers);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	registry_done(&f->d.reg);
	free(f->last_audit);
	f->d.store = store_free(f->d.store);
	f->d.loop = loop_free(f->d.loop);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static struct sandbox *
make_sandbox(struct fixture *f, const char *id, const char *name)
{
	struct sandbox *sb = sandbox_new();

	assert_non_null(sb);
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	sb->name = name ? strdup(name) : NULL;
	sb->owner = strdup("alice");
	sb->image = strdup("img");
	sb->backend = strdup("test");
	sb->cpus = 1;
	sb->memory_mb = 256;
	sb->disk_mb = 1024;
	sb->created_at = now_unix_ms();
	assert_int_equal(sandbox_commit(&f->d, sb, true, "created", NULL), 0);
	assert_int_equal(registry_add(&f->d.reg, sb), 0);
	return sb;
}

static void
on_change(struct sandbox_waiter *w, struct sandbox *sb, bool gone)
{
	struct fixture *f = w->data;

	f->notified++;
	f->last_seen = sb->state;
}

static void
on_event(struct event_sub *s, const struct event *e)
{
	struct fixture *f = s->data;

	assert_string_equal(e->type, "state");
	assert_non_null(e->sb);
	assert_true(f->events_refused ? e->seq == 0 : e->seq > 0);
	assert_non_null(json_object_get(e->data, "to"));
	f->broadcast++;
	/* a move to starting has no audit record, one to running has */
	free(f->last_audit);
	f->last_audit = e->audit ? strdup(e->audit) : NULL;
}

static int
count_events(const struct store_event *e, void *data)
{
	(*(unsigned *)data)++;
	return 0;
}

/* How many events the store holds (one sandbox's in these tests). */
static unsigned
stored_events(struct fixture *f)
{
	unsigned n = 0;

	assert_int_equal(store_events_since(f->d.store, 0, NULL, NULL, 1000, count_events, &n), 0);
	return n;
}

static void
test_set_state_persists_and_publishes(void **state)
{
	struct fixture *f = *state;
	struct sandbox *sb = make_sandbox(f, "sbx_00000000000000a1", "one");
	struct sandbox_waiter w = { .fn = on_change, .data = f };
	struct event_sub sub = { .fn = on_event, .data = f, .owner = "alice" };
	struct sandbox *loaded = NULL;

	list_init(&w.link);
	list_init(&sub.link);
	sandbox_add_waiter(sb, &w);
	events_subscribe(&f->d, &sub);

	assert_int_equal(sandbox_set_state(&f->d, sb, SANDBOX_STARTING, NULL), 0);
	assert_null(f->last_audit);
	assert_int_equal(sandbox_set_state(&f->d, sb, SANDBOX_RUNNING, NULL), 0);
	assert_non_null(f->last_audit);
	assert_non_null(strstr(f->last_audit, "\"type\":\"sandbox.started\""));
	assert_int_equal(f->notified, 2);
	assert_int_equal(f->last_seen, SANDBOX_RUNNING);
	assert_int_equal(f->broadcast, 2);

	/* the row is the record of truth: read it back */
	assert_int_equal(sandbox_load(f->d.store, sb->id, &loaded), 0);
	assert_int_equal(loaded->state, SANDBOX_RUNNING);
	assert_string_equal(loaded->owner, "alice");
	assert_string_equal(loaded->json, sb->json);
	sandbox_free(loaded);
	assert_int_equal(stored_events(f), 3); /* created, 2 state changes */

	/* another owner's stream sees nothing */
	sub.owner = "bob";
	assert_int_equal(sandbox_set_state(&f->d, sb, SANDBOX_STOPPING, NULL), 0);
	assert_int_equal(f->broadcast, 2);
	events_unsubscribe(&sub);
	sandbox_remove_waiter(&w);
}

static void
test_refused_move_changes_nothing(void **state)
{
	struct fixture *f = *state;
	struct sandbox *sb = make_sandbox(f, "sbx_00000000000000b2", NULL);
	struct sandbox *loaded = NULL;
	_cleanup_free_ char *before = NULL;

	before = strdup(sb->json);
	/* pending -> running skips starting: not in the table */
	assert_int_equal(sandbox_set_state(&f->d, sb, SANDBOX_RUNNING, NULL), -EINVAL);
	assert_int_equal(sb->state, SANDBOX_PENDING);
	assert_string_equal(sb->json, before);
	assert_int_equal(sandbox_load(f->d.store, sb->id, &loaded), 0);
	assert_int_equal(loaded->state, SANDBOX_PENDING);
	sandbox_free(loaded);
	assert_int_equal(stored_events(f), 1); /* only "created" */

	/* terminated is final */
	assert_int_equal(sandbox_set_state(&f->d, sb, SANDBOX_TERMINATED, "deleted"), 0);
	assert_string_equal(sb->reason, "deleted");
	for (int to = 0; to < _SANDBOX_STATE_MAX; to++)
		assert_int_equal(sandbox_set_state(&f->d, sb, to, NULL), -EINVAL);
}

/* R-S4: the audit store failing (every event insert refused) never fails a change: the row
 * is written, the event still goes to the streams (without a seq) and to the audit log. */
static void
test_failed_event_never_fails_the_change(void **state)
{
	struct fixture *f = *state;
	struct sandbox *sb = make_sandbox(f, "sbx_00000000000000d4", "full");
	struct event_sub sub = { .fn = on_event, .data = f, .owner = "alice" };
	struct sandbox *loaded = NULL;
	_cleanup_free_ char *db = strdup_printf("%s/db", f->dir);
	_cleanup_free_ char *log_path = strdup_printf("%s/audit/events.jsonl", f->dir);
	_cleanup_free_ char *why = NULL, *text = NULL;
	sqlite3 *conn;

	assert_int_equal(
	        audit_log_open(log_path, AUDIT_LOG_ROTATE_BYTES, AUDIT_LOG_KEEP, &f->d.audit, &why),
	        0);
	assert_int_equal(sqlite3_open(db, &conn), SQLITE_OK);
	assert_int_equal(sqlite3_exec(conn,
	                              "CREATE TRIGGER refuse_events BEFORE INSERT ON events "
	                              "BEGIN SELECT RAISE(ABORT, 'the audit store is full'); END",
	                              NULL, NULL, NULL),
	                 SQLITE_OK);
	sqlite3_close(conn);
	f->events_refused = true;
	list_init(&sub.link);
	events_subscribe(&f->d, &sub);

	assert_int_equal(sandbox_set_state(&f->d, sb, SANDBOX_STARTING, NULL), 0);
	assert_int_equal(sandbox_set_state(&f->d, sb, SANDBOX_RUNNING, NULL), 0);
	assert_int_equal(f->broadcast, 2);
	assert_int_equal(sandbox_load(f->d.store, sb->id, &loaded), 0);
	assert_int_equal(loaded->state, SANDBOX_RUNNING);
	sandbox_free(loaded);
	assert_int_equal(stored_events(f), 1); /* "created", from before */
	/* the log has the record the store could not keep */
	assert_int_equal(read_file_max(log_path, 1u << 20, &text, NULL), 0);
	assert_non_null(strstr(text, "\"type\":\"sandbox.started\""));
	events_unsubscribe(&sub);
	f->d.audit = audit_log_free(f->d.audit);
}

static void
test_registry_names(void **state)
{
	struct fixture *f = *state;
	struct sandbox *a = make_sandbox(f, "sbx_00000000000000c3", "dev");
	struct sandbox *found;

	assert_ptr_equal(registry_find(&f->d.reg, "dev", "alice"), a);
	assert_ptr_equal(registry_find(&f->d.reg, a->id, "alice"), a);
	/* another owner finds neither the name nor the id */
	assert_null(registry_find(&f->d.reg, "dev", "bob"));
	assert_null(registry_find(&f->d.reg, a->id, "bob"));
	/* an admin (no owner filter) finds both */
	found = registry_find(&f->d.reg, "dev", NULL);
	assert_ptr_equal(found, a);
	registry_drop(&f->d, a);
	assert_null(registry_find(&f->d.reg, "dev", NULL));
}

/* A guest's /etc/machine-id: sha256("sandboxd machine-id " + id), its first 32 hex (values
 * from Python's hashlib): the same for a sandbox at every launch, another for another. */
static void
test_machine_id(void **state)
{
	char id[SANDBOX_MACHINE_ID_LEN + 1];

	sandbox_machine_id("sbx_0123456789abcdef", id);
	assert_string_equal(id, "f32fd46effab708ada3430d91af47fec");
	sandbox_machine_id("sbx_0123456789abcdee", id);
	assert_string_equal(id, "5b21c7a6996033f0537af28695b641d6");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_pair),
		cmocka_unit_test(test_machine_id),
		cmocka_unit_test(test_names_round_trip),
		cmocka_unit_test(test_name_rules),
		cmocka_unit_test_setup_teardown(test_set_state_persists_and_publishes, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_refused_move_changes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_event_never_fails_the_change, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_registry_names, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
