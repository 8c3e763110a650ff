/* policyfile.c: the operator's policy file, read with libyaml's event API by a recursive
 * descent over tables of the keys each mapping may hold. It writes into a copy of the policy,
 * checks that the result agrees with itself, and swaps the copy in only then; see
 * policyfile.h. */
#include <assert.h>
#include <limits.h>
#include <yaml.h>
#include "netpolicy.h"
#include "policyfile.h"
#include "oci.h"
#include "strv.h"
#include "util.h"

#define POLICYFILE_MAX (1024 * 1024)
#define POOL_SIZE_MAX 64
/* Bounds that keep a hostile or mistyped file from making the checks below quadratic. */
#define POOLS_MAX 64
#define IMAGES_MAX 1024
/* Seconds are at most what request.c lets a request ask for when nothing bounds it (about
 * 100 years): they become milliseconds in signed 64-bit arithmetic. */
#define SECS_MAX (100ull * 366 * 86400)
/* MiB become bytes and JSON integers (json_int_t): neither may overflow. */
#define MB64_MAX ((uint64_t)INT64_MAX >> 20)
/* Counts and unsigned sizes are shown in /v1/capabilities as JSON ints. */
#define UINT_FIELD_MAX ((uint64_t)INT_MAX)
#define SUGGEST_KEY_MAX 32

enum key_id {
	K_DEFAULT_IMAGE,
	K_IMAGES,
	K_DEFAULTS,
	K_LIMITS,
	K_NETWORK,
	K_POOLS,
	K_CPUS,
	K_MEMORY_MB,
	K_DISK_MB,
	K_IDLE_TIMEOUT_SECS,
	K_LIFETIME_SECS,
	K_MAX_CPUS,
	K_MAX_MEMORY_MB,
	K_MAX_DISK_MB,
	K_MAX_IDLE_TIMEOUT_SECS,
	K_MAX_LIFETIME_SECS,
	K_MIN_SNAPSHOT_EVERY_SECS,
	K_MAX_SNAPSHOT_KEEP,
	K_NET_DEFAULT,
	K_CEILING,
	K_MAY_ALLOW,
	K_MODE,
	K_ALLOW,
	K_DENY,
	K_POOL_IMAGE,
	K_POOL_SIZE,
	_K_MAX,
};

/* A position in the file, 1-based; line 0: not written in the file. */
struct mark {
	size_t line, col;
};

struct pool_at {
	struct mark at, image_at;
};

struct name_at {
	struct mark at;
	char name[NETNAME_MAX + 1];
};

struct reader {
	const char *text; /* the input, for positions libyaml's reader does not give */
	size_t len;
	yaml_parser_t parser;
	yaml_event_t ev; /* the current event, valid until next() */
	bool have_ev;
	struct policy p;          /* the copy being written */
	struct mark seen[_K_MAX]; /* where each key was written */
	struct pool_at *pool_at;  /* per pool, when the file wrote pools */
	struct name_at *allow_at; /* per default allow entry, when the file wrote them */
	size_t n_allow_at;
	char *error;
};

struct key_def;
typedef int (*read_fn)(struct reader *r, const struct key_def *k, void *base);

struct key_def {
	const char *name;
	const char *path; /* for messages: "defaults.cpus" */
	enum key_id id;
	read_fn read;
	size_t off;          /* the field in base (struct policy or struct policy_pool) */
	unsigned char width; /* integers: sizeof the field */
	uint64_t min, max;   /* integers: the range */
	const struct key_def *sub;
	size_t n_sub;
};

static struct mark
mark_of(yaml_mark_t m)
{
	return (struct mark){ m.line + 1, m.column + 1 };
}

static struct mark
here(const struct reader *r)
{
	return mark_of(r->ev.start_mark);
}

/* The first key of a and b that the file wrote: where a contradiction is shown. */
static struct mark
pick(const struct reader *r, enum key_id a, enum key_id b)
{
	return r->seen[a].line ? r->seen[a] : r->seen[b];
}

static int fail(struct reader *r, struct mark m, const char *fmt, ...) _printf_(3, 4);

static int
fail(struct reader *r, struct mark m, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	if (r->error)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	/* a contradiction between values none of which the file wrote has no position */
	r->error = strdup_printf("%zu:%zu: %s", m.line ? m.line : 1, m.line ? m.col : 1, what);
	return r->error ? -EINVAL : -ENOMEM;
}

/* What the file wrote, fit for a message: printable ASCII only, at most 64 bytes. */
static const char *
show(const void *s, size_t len, char out[static 72])
{
	const unsigned char *c = s;
	size_t n = 0;

	for (size_t i = 0; i < len && i < 64; i++)
		out[n++] = c[i] >= 0x20 && c[i] < 0x7f && c[i] != '\'' ? (char)c[i] : '?';
	if (len > 64) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
	return out;
}

static const char *
scalar_value(const struct reader *r)
{
	return (const char *)r->ev.data.scalar.value;
}

static size_t
scalar_length(const struct reader *r)
{
	return r->ev.data.scalar.length;
}

static const char *
kind(const struct reader *r)
{
	switch (r->ev.type) {
	case YAML_MAPPING_START_EVENT:
		return "a mapping";
	case YAML_SEQUENCE_START_EVENT:
		return "a list";
	case YAML_SCALAR_EVENT:
		return "a single value";
	default:
		return "nothing";
	}
}

/* The spellings YAML reads as null, written plainly: a key with nothing after it. */
static bool
scalar_is_null(const struct reader *r)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

	if (r->ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(nulls); i++)
		if (scalar_length(r) == strlen(nulls[i]) && streq(scalar_value(r), nulls[i]))
			return true;
	return false;
}

/* libyaml's reader (bad UTF-8, control characters) gives only a byte offset. The column
 * counts bytes, as an editor showing those bytes would. */
static struct mark
offset_mark(const struct reader *r, size_t offset)
{
	struct mark m = { 1, 1 };

	for (size_t i = 0; i < offset && i < r->len; i++) {
		if (r->text[i] == '\n') {
			m.line++;
			m.col = 1;
		} else {
			m.col++;
		}
	}
	return m;
}

/* Moves to the next event. Anchors, aliases and tags are refused here, wherever they are:
 * an alias could hide a value somewhere the reader of the file does not look, and a tag
 * could make "1" a string or "yes" a boolean behind the operator's back. */
static int
next(struct reader *r)
{
	const yaml_char_t *anchor = NULL, *tag = NULL;
	char shown[72];

	if (r->have_ev) {
		yaml_event_delete(&r->ev);
		r->have_ev = false;
	}
	if (!yaml_parser_parse(&r->parser, &r->ev)) {
		const char *problem = r->parser.problem ? r->parser.problem : "malformed YAML";

		if (r->parser.error == YAML_MEMORY_ERROR)
			return -ENOMEM;
		if (r->parser.error == YAML_READER_ERROR)
			return fail(r, offset_mark(r, r->parser.problem_offset), "%s (byte %zu)",
			            problem, r->parser.problem_offset);
		if (r->parser.context)
			return fail(r, mark_of(r->parser.problem_mark), "%s %s", problem,
			            r->parser.context);
		return fail(r, mark_of(r->parser.problem_mark), "%s", problem);
	}
	r->have_ev = true;
	switch (r->ev.type) {
	case YAML_ALIAS_EVENT:
		return fail(r, here(r), "aliases are not allowed");
	case YAML_SCALAR_EVENT:
		anchor = r->ev.data.scalar.anchor;
		tag = r->ev.data.scalar.tag;
		break;
	case YAML_SEQUENCE_START_EVENT:
		anchor = r->ev.data.sequence_start.anchor;
		tag = r->ev.data.sequence_start.tag;
		break;
	case YAML_MAPPING_START_EVENT:
		anchor = r->ev.data.mapping_start.anchor;
		tag = r->ev.data.mapping_start.tag;
		break;
	default:
		break;
	}
	if (anchor)
		return fail(r, here(r), "anchors are not allowed (nor aliases): '&%s'",
		            show(anchor, strlen((const char *)anchor), shown));
	if (tag)
		return fail(r, here(r), "tags are not allowed: '%s'",
		            show(tag, strlen((const char *)tag), shown));
	return 0;
}

/* The current event as a string (NULL-free, not a YAML null); *ret is newly allocated. */
static int
read_string(struct reader *r, const struct key_def *k, char **ret)
{
	char *s;

	if (r->ev.type != YAML_SCALAR_EVENT)
		return fail(r, here(r), "'%s' must be a single value, not %s", k->path, kind(r));
	if (scalar_is_null(r))
		return fail(r, here(r), "'%s' needs a value", k->path);
	if (strlen(scalar_value(r)) != scalar_length(r))
		return fail(r, here(r), "'%s' contains a NUL byte", k->path);
	s = strdup(scalar_value(r));
	if (!s)
		return -ENOMEM;
	*ret = s;
	return 0;
}

static int
read_image(struct reader *r, const struct key_def *k, char **ret)
{
	_cleanup_free_ char *s = NULL;
	char shown[72];
	int e;

	if ((e = read_string(r, k, &s)) < 0)
		return e;
	if (!image_ref_valid(s))
		return fail(r, here(r),
		            "'%s' is not an image reference such as python:3.13-slim (lowercase; "
		            "letters, digits and ._-/:@): '%s'",
		            k->path, show(s, strlen(s), shown));
	*ret = TAKE_PTR(s);
	return 0;
}

static int
read_uint(struct reader *r, const struct key_def *k, void *base)
{
	const char *s;
	size_t len;
	char shown[72];
	uint64_t v = 0;
	bool digits;

	if (r->ev.type != YAML_SCALAR_EVENT)
		return fail(r, here(r), "'%s' must be a number, not %s", k->path, kind(r));
	s = scalar_value(r);
	len = scalar_length(r);
	digits = len > 0;
	if (r->ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return fail(r, here(r), "'%s' must be a plain decimal number, not a quoted string",
		            k->path);
	for (size_t i = 0; i < len; i++)
		digits = digits && s[i] >= '0' && s[i] <= '9';
	/* YAML 1.1 reads 010 as octal and 0x10 as hex: only one reading is allowed here */
	if (!digits || (len > 1 && s[0] == '0'))
		return fail(r, here(r), "'%s' must be a plain decimal number, not '%s'", k->path,
		            show(s, len, shown));
	if (parse_u64_n(s, len, &v) < 0 || v < k->min || v > k->max)
		return fail(r, here(r), "'%s' is %s; it must be between %llu and %llu", k->path,
		            show(s, len, shown), (unsigned long long)k->min,
		            (unsigned long long)k->max);
	if (k->width == sizeof(uint64_t))
		*(uint64_t *)((char *)base + k->off) = v;
	else
		*(unsigned *)((char *)base + k->off) = (unsigned)v;
	return 0;
}

static int
read_mode(struct reader *r, const struct key_def *k, void *base)
{
	_cleanup_free_ char *s = NULL;
	enum net_mode m;
	char shown[72];
	int e;

	if ((e = read_string(r, k, &s)) < 0)
		return e;
	m = net_mode_from_string(s);
	if (m == _NET_MODE_INVALID)
		return fail(r, here(r),
		            "unknown network mode '%s' in '%s': use none, allowlist or open",
		            show(s, strlen(s), shown), k->path);
	*(enum net_mode *)((char *)base + k->off) = m;
	return 0;
}

static int
read_default_image(struct reader *r, const struct key_def *k, void *base _unused_)
{
	char *s = NULL;
	int e;

	if ((e = read_image(r, k, &s)) < 0)
		return e;
	free(r->p.default_image);
	r->p.default_image = s;
	return 0;
}

static int
read_images(struct reader *r, const struct key_def *k, void *base _unused_)
{
	struct mark at = here(r);
	char **v = NULL, *s = NULL;
	char shown[72];
	size_t n = 0;
	int e = 0;

	if (r->ev.type != YAML_SEQUENCE_START_EVENT)
		return fail(r, at, "'%s' must be a list of image references, not %s", k->path,
		            kind(r));
	for (;;) {
		if ((e = next(r)) < 0)
			goto out;
		if (r->ev.type == YAML_SEQUENCE_END_EVENT)
			break;
		if (n == IMAGES_MAX) {
			e = fail(r, here(r), "'%s' lists more than %d images", k->path, IMAGES_MAX);
			goto out;
		}
		if ((e = read_image(r, k, &s)) < 0)
			goto out;
		for (size_t i = 0; i < n; i++)
			if (streq(v[i], s)) {
				e = fail(r, here(r), "image '%s' is listed twice in '%s'",
				         show(s, strlen(s), shown), k->path);
				free(s);
				goto out;
			}
		if ((e = strv_push(&v, &n, s)) < 0)
			goto out;
	}
	/* "images: []" would refuse every image, which nobody means: any image is the key
	 * left out */
	if (n == 0) {
		e = fail(r, at,
		         "'%s' is empty: list the images allowed, or leave the key out to "
		         "allow any image",
		         k->path);
		goto out;
	}
	strv_free(r->p.images);
	r->p.images = TAKE_PTR(v);
	r->p.n_images = n;
out:
	strv_free(v);
	return e;
}

/* allow, deny and may_allow: each entry normalised and checked by netpolicy (only may_allow
 * may hold "*"), then the list normalised as a whole (deduplicated, sorted). */
static int
read_names(struct reader *r, const struct key_def *k, void *base)
{
	struct mark at = here(r);
	json_t *raw = NULL, *norm = NULL, **field;
	struct name_at *names_at = NULL;
	char name[NETNAME_MAX + 1];
	_cleanup_free_ char *s = NULL;
	char *why = NULL;
	bool star = false;
	size_t n = 0;
	int e = 0;

	if (r->ev.type != YAML_SEQUENCE_START_EVENT)
		return fail(r, at, "'%s' must be a list of names, not %s", k->path, kind(r));
	raw = json_array();
	if (!raw)
		return -ENOMEM;
	for (;;) {
		if ((e = next(r)) < 0)
			goto out;
		if (r->ev.type == YAML_SEQUENCE_END_EVENT)
			break;
		if (n == NETPOLICY_LIST_MAX) {
			e = fail(r, here(r), "'%s' holds more than %d names", k->path,
			         NETPOLICY_LIST_MAX);
			goto out;
		}
		free(s);
		s = NULL;
		if ((e = read_string(r, k, &s)) < 0)
			goto out;
		n++;
		if (k->id == K_MAY_ALLOW && streq(s, "*")) {
			star = true;
			continue;
		}
		e = netname_normalise(s, name, &why);
		if (e == -ENOMEM)
			goto out;
		if (e < 0) {
			e = fail(r, here(r), "'%s': %s", k->path, why ? why : "not a valid name");
			goto out;
		}
		if (json_array_append_new(raw, json_string(s)) < 0) {
			e = -ENOMEM;
			goto out;
		}
		if (k->id == K_ALLOW) {
			struct name_at *na = reallocarray(names_at, n, sizeof(*na));
			if (!na) {
				e = -ENOMEM;
				goto out;
			}
			names_at = na;
			names_at[json_array_size(raw) - 1].at = here(r);
			memcpy(names_at[json_array_size(raw) - 1].name, name, sizeof(name));
		}
	}
	e = netpolicy_normalise_list(raw, &norm, &why);
	if (e == -ENOMEM)
		goto out;
	if (e < 0) {
		e = fail(r, at, "'%s': %s", k->path, why ? why : "not a valid list of names");
		goto out;
	}
	/* "*" sorts before every name */
	if (star && json_array_insert_new(norm, 0, json_string("*")) < 0) {
		e = -ENOMEM;
		goto out;
	}
	field = (json_t **)((char *)base + k->off);
	json_decref(*field);
	*field = TAKE_PTR(norm);
	if (k->id == K_ALLOW) {
		free(r->allow_at);
		r->allow_at = TAKE_PTR(names_at);
		r->n_allow_at = json_array_size(raw);
	}
out:
	free(why);
	free(names_at);
	json_decref(norm);
	json_decref(raw);
	return e;
}

/* Levenshtein distance, for "did you mean"; both are short keys. */
static size_t
edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t row[SUGGEST_KEY_MAX + 1], diag, up;

	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			up = row[j];
			row[j] = MIN(MIN(row[j] + 1, row[j - 1] + 1),
			             diag + (a[i - 1] == b[j - 1] ? 0 : 1));
			diag = up;
		}
	}
	return row[lb];
}

static const char *
suggest(const char *key, size_t len, const struct key_def *keys, size_t n)
{
	const char *best = NULL;
	size_t best_d = 3;

	if (len > SUGGEST_KEY_MAX)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		size_t kl = strlen(keys[i].name), d;
		if (kl > SUGGEST_KEY_MAX)
			continue;
		d = edit_distance(key, len, keys[i].name, kl);
		if (d < best_d) {
			best_d = d;
			best = keys[i].name;
		}
	}
	return best;
}

/* Reads the mapping that starts at the current event; ret_seen (n entries, or NULL) gets
 * where each key was written. */
static int
read_mapping(struct reader *r, const char *what, const struct key_def *keys, size_t n, void *base,
             struct mark *ret_seen)
{
	struct mark seen[16] = {};
	char shown[72];
	int e;

	assert(n <= ARRAY_SIZE(seen));
	if (r->ev.type != YAML_MAPPING_START_EVENT)
		return fail(r, here(r), "'%s' must be a mapping (key: value), not %s", what,
		            kind(r));
	for (;;) {
		const struct key_def *k = NULL;
		const char *key;
		size_t len, i;

		if ((e = next(r)) < 0)
			return e;
		if (r->ev.type == YAML_MAPPING_END_EVENT)
			break;
		if (r->ev.type != YAML_SCALAR_EVENT)
			return fail(r, here(r), "a key in '%s' must be a name, not %s", what,
			            kind(r));
		key = scalar_value(r);
		len = scalar_length(r);
		for (i = 0; i < n; i++)
			if (len == strlen(keys[i].name) && memcmp(key, keys[i].name, len) == 0) {
				k = &keys[i];
				break;
			}
		if (!k) {
			const char *near = suggest(key, len, keys, n);
			show(key, len, shown);
			if (near)
				return fail(r, here(r), "unknown key '%s' (did you mean '%s'?)",
				            shown, near);
			return fail(r, here(r), "unknown key '%s' in '%s'", shown, what);
		}
		if (seen[i].line)
			return fail(r, here(r), "duplicate key '%s' (first at line %zu)", k->name,
			            seen[i].line);
		seen[i] = here(r);
		r->seen[k->id] = seen[i];
		if ((e = next(r)) < 0 || (e = k->read(r, k, base)) < 0)
			return e;
	}
	if (ret_seen)
		memcpy(ret_seen, seen, n * sizeof(*seen));
	return 0;
}

static int
read_sub(struct reader *r, const struct key_def *k, void *base)
{
	return read_mapping(r, k->path, k->sub, k->n_sub, base, NULL);
}

static int read_pools(struct reader *r, const struct key_def *k, void *base);

static int
read_pool_image(struct reader *r, const struct key_def *k, void *base)
{
	struct policy_pool *pool = base;

	free(pool->image);
	pool->image = NULL;
	return read_image(r, k, &pool->image);
}

#define UINT_KEY(n, p, i, s, f, lo, hi)                                                            \
	{                                                                                          \
		.name = (n), .path = (p), .id = (i), .read = read_uint, .off = offsetof(s, f),     \
		.width = sizeof(((s *)0)->f), .min = (lo), .max = (hi),                            \
	}

static const struct key_def defaults_keys[] = {
	UINT_KEY("cpus", "defaults.cpus", K_CPUS, struct policy, defaults.cpus, 1, UINT_FIELD_MAX),
	UINT_KEY("memory_mb", "defaults.memory_mb", K_MEMORY_MB, struct policy, defaults.memory_mb,
	         64, UINT_FIELD_MAX),
	UINT_KEY("disk_mb", "defaults.disk_mb", K_DISK_MB, struct policy, defaults.disk_mb, 64,
	         MB64_MAX),
	UINT_KEY("idle_timeout_secs", "defaults.idle_timeout_secs", K_IDLE_TIMEOUT_SECS,
	         struct policy, defaults.idle_timeout_secs, 0, SECS_MAX),
	UINT_KEY("lifetime_secs", "defaults.lifetime_secs", K_LIFETIME_SECS, struct policy,
	         defaults.lifetime_secs, 0, SECS_MAX),
};

static const struct key_def limits_keys[] = {
	UINT_KEY("max_cpus", "limits.max_cpus", K_MAX_CPUS, struct policy, limits.max_cpus, 1,
	         UINT_FIELD_MAX),
	UINT_KEY("max_memory_mb", "limits.max_memory_mb", K_MAX_MEMORY_MB, struct policy,
	         limits.max_memory_mb, 64, UINT_FIELD_MAX),
	UINT_KEY("max_disk_mb", "limits.max_disk_mb", K_MAX_DISK_MB, struct policy,
	         limits.max_disk_mb, 64, MB64_MAX),
	UINT_KEY("max_idle_timeout_secs", "limits.max_idle_timeout_secs", K_MAX_IDLE_TIMEOUT_SECS,
	         struct policy, limits.max_idle_timeout_secs, 0, SECS_MAX),
	UINT_KEY("max_lifetime_secs", "limits.max_lifetime_secs", K_MAX_LIFETIME_SECS,
	         struct policy, limits.max_lifetime_secs, 0, SECS_MAX),
	UINT_KEY("min_snapshot_every_secs", "limits.min_snapshot_every_secs",
	         K_MIN_SNAPSHOT_EVERY_SECS, struct policy, limits.min_snapshot_every_secs, 0,
	         SECS_MAX),
	UINT_KEY("max_snapshot_keep", "limits.max_snapshot_keep", K_MAX_SNAPSHOT_KEEP,
	         struct policy, limits.max_snapshot_keep, 0, UINT_FIELD_MAX),
};

static const struct key_def net_default_keys[] = {
	{ .name = "mode",
	  .path = "network.default.mode",
	  .id = K_MODE,
	  .read = read_mode,
	  .off = offsetof(struct policy, network.default_mode) },
	{ .name = "allow",
	  .path = "network.default.allow",
	  .id = K_ALLOW,
	  .read = read_names,
	  .off = offsetof(struct policy, network.default_allow) },
	{ .name = "deny",
	  .path = "network.default.deny",
	  .id = K_DENY,
	  .read = read_names,
	  .off = offsetof(struct policy, network.default_deny) },
};

static const struct key_def network_keys[] = {
	{ .name = "default",
	  .path = "network.default",
	  .id = K_NET_DEFAULT,
	  .read = read_sub,
	  .sub = net_default_keys,
	  .n_sub = ARRAY_SIZE(net_default_keys) },
	{ .name = "ceiling",
	  .path = "network.ceiling",
	  .id = K_CEILING,
	  .read = read_mode,
	  .off = offsetof(struct policy, network.ceiling) },
	{ .name = "may_allow",
	  .path = "network.may_allow",
	  .id = K_MAY_ALLOW,
	  .read = read_names,
	  .off = offsetof(struct policy, network.may_allow) },
};

static const struct key_def pool_keys[] = {
	{ .name = "image", .path = "pools.image", .id = K_POOL_IMAGE, .read = read_pool_image },
	UINT_KEY("size", "pools.size", K_POOL_SIZE, struct policy_pool, size, 1, POOL_SIZE_MAX),
};

static const struct key_def root_keys[] = {
	{ .name = "default_image",
	  .path = "default_image",
	  .id = K_DEFAULT_IMAGE,
	  .read = read_default_image },
	{ .name = "images", .path = "images", .id = K_IMAGES, .read = read_images },
	{ .name = "defaults",
	  .path = "defaults",
	  .id = K_DEFAULTS,
	  .read = read_sub,
	  .sub = defaults_keys,
	  .n_sub = ARRAY_SIZE(defaults_keys) },
	{ .name = "limits",
	  .path = "limits",
	  .id = K_LIMITS,
	  .read = read_sub,
	  .sub = limits_keys,
	  .n_sub = ARRAY_SIZE(limits_keys) },
	{ .name = "network",
	  .path = "network",
	  .id = K_NETWORK,
	  .read = read_sub,
	  .sub = network_keys,
	  .n_sub = ARRAY_SIZE(network_keys) },
	{ .name = "pools", .path = "pools", .id = K_POOLS, .read = read_pools },
};

static void
free_pools(struct policy_pool *pools, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(pools[i].image);
	free(pools);
}

static int
read_pools(struct reader *r, const struct key_def *k, void *base _unused_)
{
	struct policy_pool *pools = NULL, pool = {};
	struct pool_at *at = NULL;
	size_t n = 0;
	int e = 0;

	if (r->ev.type != YAML_SEQUENCE_START_EVENT)
		return fail(r, here(r), "'%s' must be a list of {image, size}, not %s", k->path,
		            kind(r));
	for (;;) {
		struct mark seen[ARRAY_SIZE(pool_keys)] = {};
		struct mark item;

		if ((e = next(r)) < 0)
			goto out;
		if (r->ev.type == YAML_SEQUENCE_END_EVENT)
			break;
		item = here(r);
		if (n == POOLS_MAX) {
			e = fail(r, item, "'%s' holds more than %d pools", k->path, POOLS_MAX);
			goto out;
		}
		pool = (struct policy_pool){};
		if ((e = read_mapping(r, "pools", pool_keys, ARRAY_SIZE(pool_keys), &pool, seen)) <
		    0)
			goto out;
		if (pool.size == 0) {
			e = fail(r, item,
			         "a pool needs a 'size' (how many sandboxes to keep booted)");
			goto out;
		}
		struct policy_pool *np = reallocarray(pools, n + 1, sizeof(*np));
		if (!np) {
			e = -ENOMEM;
			goto out;
		}
		pools = np;
		struct pool_at *na = reallocarray(at, n + 1, sizeof(*na));
		if (!na) {
			e = -ENOMEM;
			goto out;
		}
		at = na;
		at[n] = (struct pool_at){ .at = item, .image_at = seen[0] };
		pools[n++] = pool;
		pool = (struct policy_pool){};
	}
	free_pools(r->p.pools, r->p.n_pools);
	r->p.pools = TAKE_PTR(pools);
	r->p.n_pools = n;
	free(r->pool_at);
	r->pool_at = TAKE_PTR(at);
	n = 0;
out:
	free(pool.image);
	free_pools(pools, n);
	free(at);
	return e;
}

static bool
within_may_allow(const struct policy *p, const char *name)
{
	size_t i;
	json_t *w;

	json_array_foreach (p->network.may_allow, i, w)
		if (json_is_string(w) && netpolicy_covers(json_string_value(w), name))
			return true;
	return false;
}

/* What no single value shows: a policy that contradicts itself. Shown at the key the file
 * wrote (the default's when it wrote both, as that is the one most likely meant to change). */
static int
check_coherence(struct reader *r)
{
	const struct policy *p = &r->p;
	char shown[72];

	if (p->defaults.cpus > p->limits.max_cpus)
		return fail(r, pick(r, K_CPUS, K_MAX_CPUS),
		            "defaults.cpus %u is above limits.max_cpus %u", p->defaults.cpus,
		            p->limits.max_cpus);
	if (p->defaults.memory_mb > p->limits.max_memory_mb)
		return fail(r, pick(r, K_MEMORY_MB, K_MAX_MEMORY_MB),
		            "defaults.memory_mb %u is above limits.max_memory_mb %u",
		            p->defaults.memory_mb, p->limits.max_memory_mb);
	if (p->defaults.disk_mb > p->limits.max_disk_mb)
		return fail(r, pick(r, K_DISK_MB, K_MAX_DISK_MB),
		            "defaults.disk_mb %llu is above limits.max_disk_mb %llu",
		            (unsigned long long)p->defaults.disk_mb,
		            (unsigned long long)p->limits.max_disk_mb);
	/* 0 is "none" for a default and "unbounded" for a limit; under a limit a create that
	 * leaves the timeout out gets the limit (request.c), so a default of none is not above
	 * one either */
	if (p->limits.max_idle_timeout_secs &&
	    p->defaults.idle_timeout_secs > p->limits.max_idle_timeout_secs)
		return fail(r, pick(r, K_IDLE_TIMEOUT_SECS, K_MAX_IDLE_TIMEOUT_SECS),
		            "defaults.idle_timeout_secs %llu is above "
		            "limits.max_idle_timeout_secs %llu",
		            (unsigned long long)p->defaults.idle_timeout_secs,
		            (unsigned long long)p->limits.max_idle_timeout_secs);
	if (p->limits.max_lifetime_secs && p->defaults.lifetime_secs > p->limits.max_lifetime_secs)
		return fail(r, pick(r, K_LIFETIME_SECS, K_MAX_LIFETIME_SECS),
		            "defaults.lifetime_secs %llu is above limits.max_lifetime_secs %llu",
		            (unsigned long long)p->defaults.lifetime_secs,
		            (unsigned long long)p->limits.max_lifetime_secs);
	if (p->network.default_mode > p->network.ceiling)
		return fail(r, pick(r, K_MODE, K_CEILING),
		            "the default network mode '%s' is above the ceiling '%s'",
		            net_mode_to_string(p->network.default_mode),
		            net_mode_to_string(p->network.ceiling));
	if (p->network.default_mode == NET_ALLOWLIST && !json_array_size(p->network.default_allow))
		return fail(r, pick(r, K_ALLOW, K_MODE),
		            "network.default.mode allowlist needs a network.default.allow list: an "
		            "empty allowlist reaches nothing, so every create that leaves its "
		            "network to the default would be refused");
	if (p->network.default_mode != NET_ALLOWLIST && json_array_size(p->network.default_allow))
		return fail(r, pick(r, K_ALLOW, K_MODE),
		            "network.default.allow goes only with mode allowlist (the default mode "
		            "is '%s')",
		            net_mode_to_string(p->network.default_mode));
	if (json_array_size(p->network.may_allow)) {
		if (r->allow_at) {
			for (size_t i = 0; i < r->n_allow_at; i++)
				if (!within_may_allow(p, r->allow_at[i].name))
					return fail(r, r->allow_at[i].at,
					            "'%s' in network.default.allow is not within "
					            "network.may_allow",
					            r->allow_at[i].name);
		} else {
			size_t i;
			json_t *v;
			json_array_foreach (p->network.default_allow, i, v) {
				const char *s = json_string_value(v);
				if (s && !within_may_allow(p, s))
					return fail(r, pick(r, K_MAY_ALLOW, K_ALLOW),
					            "'%s' in network.default.allow is not within "
					            "network.may_allow",
					            show(s, strlen(s), shown));
			}
		}
	}
	if (p->default_image && !policy_image_allowed(p, p->default_image))
		return fail(r, pick(r, K_DEFAULT_IMAGE, K_IMAGES),
		            "the default image '%s' is not in images",
		            show(p->default_image, strlen(p->default_image), shown));
	for (size_t i = 0; i < p->n_pools; i++) {
		const char *image = p->pools[i].image ? p->pools[i].image : p->default_image;
		struct mark at = r->pool_at ? r->pool_at[i].image_at : r->seen[K_IMAGES];

		if (!at.line && r->pool_at)
			at = r->pool_at[i].at;
		if (p->pools[i].image && !policy_image_allowed(p, image))
			return fail(r, at, "the pool's image '%s' is not in images",
			            show(image, strlen(image), shown));
		for (size_t j = 0; image && j < i; j++) {
			const char *other =
			        p->pools[j].image ? p->pools[j].image : p->default_image;
			if (other && streq(other, image))
				return fail(r, r->pool_at ? r->pool_at[i].at : at,
				            "a second pool for image '%s': give the first a larger "
				            "size",
				            show(image, strlen(image), shown));
		}
	}
	return 0;
}

static int
policy_copy(const struct policy *src, struct policy *dst)
{
	*dst = *src;
	dst->default_image = NULL;
	dst->images = NULL;
	dst->n_images = 0;
	dst->pools = NULL;
	dst->n_pools = 0;
	dst->network.default_allow = NULL;
	dst->network.default_deny = NULL;
	dst->network.may_allow = NULL;

	if (src->default_image && !(dst->default_image = strdup(src->default_image)))
		goto nomem;
	if (src->n_images) {
		if (strv_copy(src->images, src->n_images, &dst->images) < 0)
			goto nomem;
		dst->n_images = src->n_images;
	}
	if (src->n_pools) {
		dst->pools = calloc(src->n_pools, sizeof(*dst->pools));
		if (!dst->pools)
			goto nomem;
		for (; dst->n_pools < src->n_pools; dst->n_pools++) {
			const struct policy_pool *sp = &src->pools[dst->n_pools];
			dst->pools[dst->n_pools].size = sp->size;
			if (sp->image && !(dst->pools[dst->n_pools].image = strdup(sp->image)))
				goto nomem;
		}
	}
	dst->network.default_allow = src->network.default_allow
	                                     ? json_deep_copy(src->network.default_allow)
	                                     : json_array();
	dst->network.default_deny = src->network.default_deny
	                                    ? json_deep_copy(src->network.default_deny)
	                                    : json_array();
	dst->network.may_allow =
	        src->network.may_allow ? json_deep_copy(src->network.may_allow) : json_array();
	if (!dst->network.default_allow || !dst->network.default_deny || !dst->network.may_allow)
		goto nomem;
	return 0;
nomem:
	policy_done(dst);
	return -ENOMEM;
}

static int
read_document(struct reader *r)
{
	int e;

	if ((e = next(r)) < 0) /* the stream's start */
		return e;
	if ((e = next(r)) < 0)
		return e;
	if (r->ev.type == YAML_STREAM_END_EVENT) /* nothing but comments: all defaults */
		return 0;
	if ((e = next(r)) < 0) /* the document's root */
		return e;
	if (!(r->ev.type == YAML_SCALAR_EVENT && scalar_is_null(r)) &&
	    (e = read_mapping(r, "the policy", root_keys, ARRAY_SIZE(root_keys), &r->p, NULL)) < 0)
		return e;
	if ((e = next(r)) < 0) /* the document's end */
		return e;
	if ((e = next(r)) < 0)
		return e;
	if (r->ev.type != YAML_STREAM_END_EVENT)
		return fail(r, here(r), "more than one document: a policy is one YAML document");
	return 0;
}

int
policyfile_parse(const char *text, size_t len, struct policy *p, char **ret_error)
{
	struct reader r = { .text = text, .len = len };
	int e;

	if (!yaml_parser_initialize(&r.parser))
		return -ENOMEM;
	yaml_parser_set_input_string(&r.parser, (const unsigned char *)text, len);
	e = policy_copy(p, &r.p);
	if (e == 0)
		e = read_document(&r);
	if (e == 0)
		e = check_coherence(&r);
	if (e == 0) {
		policy_done(p);
		*p = r.p;
		r.p = (struct policy){};
	} else {
		*ret_error = TAKE_PTR(r.error); /* none for -ENOMEM */
	}
	if (r.have_ev)
		yaml_event_delete(&r.ev);
	yaml_parser_delete(&r.parser);
	policy_done(&r.p);
	free(r.pool_at);
	free(r.allow_at);
	free(r.error);
	return e;
}

int
policyfile_load(const char *path, struct policy *p, char **ret_error)
{
	_cleanup_free_ char *text = NULL, *error = NULL;
	size_t len = 0;
	int e;

	e = read_file_max(path, POLICYFILE_MAX, &text, &len);
	if (e == -EFBIG) {
		*ret_error = strdup_printf("%s: larger than 1 MiB; is it the policy file?", path);
		return -EFBIG;
	}
	if (e < 0) {
		*ret_error = strdup_printf("%s: cannot read it: %s", path, strerror(-e));
		return e;
	}
	e = policyfile_parse(text, len, p, &error);
	if (e < 0)
		*ret_error = error ? strdup_printf("%s:%s", path, error) : NULL;
	return e;
}
