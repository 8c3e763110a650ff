/* secrets.c: each user's saved secrets; see secrets.h.
 *
 * A file is JSON:
 *   {"version":1,"owner":"ada@example.com",
 *    "secrets":[{"name":"ANTHROPIC_API_KEY","value":"…","updated_at":1767225600000},…]}
 * Messages about a bad file never quote it: it holds secrets, and they go to the log. */
#include <jansson.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include "secrets.h"
#include "util.h"

#define SECRETS_DIR "secrets"

static void
secret_erase(struct secret *x)
{
	free(x->name);
	if (x->value) {
		explicit_bzero(x->value, strlen(x->value));
		free(x->value);
	}
	*x = (struct secret){ 0 };
}

void
secrets_done(struct secrets *s)
{
	for (size_t i = 0; i < s->n; i++)
		secret_erase(&s->v[i]);
	free(s->v);
	free(s->owner);
	*s = (struct secrets){ 0 };
}

static void
secrets_donep(struct secrets *s)
{
	secrets_done(s);
}

/* An environment name of at most SECRET_NAME_MAX bytes */
static bool
name_ok(const char *s, size_t n)
{
	return env_name_ok(s, n, SECRET_NAME_MAX);
}

static bool
owner_ok(const char *s, size_t n)
{
	return n > 0 && n <= SECRETS_OWNER_MAX && strlen(s) == n;
}

/* The index where name is or would go (v is sorted); *found says which. */
static size_t
position(const struct secrets *s, const char *name, bool *found)
{
	size_t lo = 0, hi = s->n;

	*found = false;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(s->v[mid].name, name);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const struct secret *
secrets_find(const struct secrets *s, const char *name)
{
	bool found;
	size_t i = position(s, name, &found);

	return found ? &s->v[i] : NULL;
}

int
secrets_set(struct secrets *s, const char *name, const char *value, int64_t now_ms)
{
	struct secret *v;
	char *n, *val;
	bool found;
	size_t i;

	if (!name_ok(name, strlen(name)) || strlen(value) > SECRET_VALUE_MAX)
		return -EINVAL;
	i = position(s, name, &found);
	if (!found && s->n >= SECRETS_MAX)
		return -E2BIG;
	val = strdup(value);
	if (!val)
		return -ENOMEM;
	if (found) {
		explicit_bzero(s->v[i].value, strlen(s->v[i].value));
		free(s->v[i].value);
		s->v[i].value = val;
		s->v[i].updated_at = now_ms;
		return 0;
	}
	n = strdup(name);
	v = n ? realloc(s->v, (s->n + 1) * sizeof(*s->v)) : NULL;
	if (!v) {
		free(n);
		explicit_bzero(val, strlen(val));
		free(val);
		return -ENOMEM;
	}
	s->v = v;
	memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof(*s->v));
	s->v[i] = (struct secret){ .name = n, .value = val, .updated_at = now_ms };
	s->n++;
	return 0;
}

int
secrets_remove(struct secrets *s, const char *name)
{
	bool found;
	size_t i = position(s, name, &found);

	if (!found)
		return -ENOENT;
	secret_erase(&s->v[i]);
	memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
	s->n--;
	return 0;
}

int
secrets_parse(const char *data, size_t len, struct secrets *ret, char **ret_why)
{
	_cleanup_(secrets_donep) struct secrets s = { 0 };
	json_t *root, *version, *owner, *list, *e;
	json_error_t jerr;
	size_t i;
	int r = 0;

	if (len > SECRETS_MAX_BYTES)
		return error_printf(ret_why, -EINVAL, "it is larger than %u bytes",
		                    SECRETS_MAX_BYTES);
	root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return error_printf(
		        ret_why, -EINVAL,
		        "it is not JSON (or names a member twice) at line %d, column %d", jerr.line,
		        jerr.column);
	version = json_object_get(root, "version");
	owner = json_object_get(root, "owner");
	list = json_object_get(root, "secrets");
	if (!json_is_object(root) || json_object_size(root) != 3 || !version || !owner || !list) {
		r = error_printf(ret_why, -EINVAL,
		                 "it is not an object of exactly version, owner and secrets");
		goto out;
	}
	if (!json_is_integer(version) || json_integer_value(version) != SECRETS_VERSION) {
		r = error_printf(ret_why, -EINVAL, "its version is not %d", SECRETS_VERSION);
		goto out;
	}
	if (!json_is_string(owner) ||
	    !owner_ok(json_string_value(owner), json_string_length(owner))) {
		r = error_printf(ret_why, -EINVAL, "its owner is not a user's name");
		goto out;
	}
	if (!json_is_array(list) || json_array_size(list) > SECRETS_MAX) {
		r = error_printf(ret_why, -EINVAL, "'secrets' is not a list of at most %d secrets",
		                 SECRETS_MAX);
		goto out;
	}
	s.owner = strdup(json_string_value(owner));
	s.v = calloc(json_array_size(list) + 1, sizeof(*s.v));
	if (!s.owner || !s.v) {
		r = -ENOMEM;
		goto out;
	}
	json_array_foreach (list, i, e) {
		json_t *name = json_object_get(e, "name"), *value = json_object_get(e, "value"),
		       *at = json_object_get(e, "updated_at");

		if (!json_is_object(e) || json_object_size(e) != 3 || !json_is_string(name) ||
		    !json_is_string(value) || !json_is_integer(at) || json_integer_value(at) < 0) {
			r = error_printf(ret_why, -EINVAL,
			                 "secret %zu is not {\"name\": …, \"value\": …, "
			                 "\"updated_at\": …}",
			                 i);
			goto out;
		}
		if (!name_ok(json_string_value(name), json_string_length(name))) {
			r = error_printf(ret_why, -EINVAL, "secret %zu has an invalid name", i);
			goto out;
		}
		/* a value is a string without NUL (an environment value) */
		if (json_string_length(value) > SECRET_VALUE_MAX ||
		    strlen(json_string_value(value)) != json_string_length(value)) {
			r = error_printf(
			        ret_why, -EINVAL,
			        "secret %zu's value is longer than %u bytes or holds a NUL", i,
			        SECRET_VALUE_MAX);
			goto out;
		}
		/* names strictly ascending: each once, in the order secrets_format writes */
		if (s.n > 0 && strcmp(s.v[s.n - 1].name, json_string_value(name)) >= 0) {
			r = error_printf(ret_why, -EINVAL,
			                 "secret %zu is named twice or out of order", i);
			goto out;
		}
		s.v[s.n].name = strdup(json_string_value(name));
		s.v[s.n].value = strdup(json_string_value(value));
		s.v[s.n].updated_at = json_integer_value(at);
		s.n++;
		if (!s.v[s.n - 1].name || !s.v[s.n - 1].value) {
			r = -ENOMEM;
			goto out;
		}
	}
	*ret = s;
	s = (struct secrets){ 0 };
out:
	json_decref(root);
	return r;
}

int
secrets_format(const struct secrets *s, char **ret, size_t *ret_len)
{
	json_t *root, *list = json_array();
	char *text;

	if (!list)
		return -ENOMEM;
	if (!s->owner || !owner_ok(s->owner, strlen(s->owner)) || s->n > SECRETS_MAX) {
		json_decref(list);
		return -EINVAL;
	}
	for (size_t i = 0; i < s->n; i++) {
		const struct secret *x = &s->v[i];
		if (!x->name || !x->value || !name_ok(x->name, strlen(x->name)) ||
		    strlen(x->value) > SECRET_VALUE_MAX || x->updated_at < 0 ||
		    (i > 0 && strcmp(s->v[i - 1].name, x->name) >= 0) ||
		    json_array_append_new(list, json_pack("{s:s, s:s, s:I}", "name", x->name,
		                                          "value", x->value, "updated_at",
		                                          (json_int_t)x->updated_at)) < 0) {
			json_decref(list);
			return -EINVAL; /* out of bounds, or not UTF-8 */
		}
	}
	root = json_pack("{s:i, s:s, s:o}", "version", SECRETS_VERSION, "owner", s->owner,
	                 "secrets", list);
	if (!root)
		return -EINVAL; /* an owner that is not UTF-8 */
	text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!text)
		return -ENOMEM;
	*ret_len = strlen(text);
	*ret = text;
	return 0;
}

/* ---- the directory ---- */

static char *
owner_path(const char *state_dir, const char *owner)
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	char hex[2 * SHA256_DIGEST_LENGTH + 1];

	/* a name any owner can have (an email holds what a path should not) */
	SHA256((const unsigned char *)owner, strlen(owner), md);
	for (size_t i = 0; i < sizeof(md); i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return strdup_printf("%s/" SECRETS_DIR "/%s.json", state_dir, hex);
}

int
secrets_load(const char *state_dir, const char *owner, struct secrets *ret, char **ret_why)
{
	_cleanup_free_ char *path = owner_path(state_dir, owner), *data = NULL, *why = NULL;
	struct secrets s = { 0 };
	size_t got = 0;
	int r;

	if (!path)
		return -ENOMEM;
	r = read_private_file(path, SECRETS_MAX_BYTES, &data, &got, &why);
	if (r == -ENOENT) {
		s.owner = strdup(owner);
		s.v = calloc(1, sizeof(*s.v));
		if (!s.owner || !s.v) {
			secrets_done(&s);
			return -ENOMEM;
		}
		*ret = s;
		return 0;
	}
	if (r < 0)
		return why ? error_printf(ret_why, r, "'%s': %s", path, why) : r;
	r = secrets_parse(data, got, &s, ret_why);
	explicit_bzero(data, got);
	if (r < 0)
		return r;
	if (!streq(s.owner, owner)) {
		secrets_done(&s);
		return error_printf(ret_why, -EINVAL, "'%s' holds another owner's secrets", path);
	}
	*ret = s;
	return 0;
}

int
secrets_save(const char *state_dir, const struct secrets *s)
{
	_cleanup_free_ char *path = owner_path(state_dir, s->owner),
	                    *dir = strdup_printf("%s/" SECRETS_DIR, state_dir);
	struct stat st;
	char *text = NULL;
	size_t len = 0;
	int r;

	if (!path || !dir)
		return -ENOMEM;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return negative_errno();
	if (lstat(dir, &st) < 0)
		return negative_errno();
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
		return -EPERM; /* not ours alone: write nothing into it */
	if (s->n == 0) {
		if (unlink(path) < 0 && errno != ENOENT)
			return negative_errno();
		r = 0;
	} else {
		r = secrets_format(s, &text, &len);
		if (r < 0)
			return r;
		r = write_file_atomic(path, text, len, 0600);
		explicit_bzero(text, len);
		free(text);
	}
	fsync_dir(dir);
	return r;
}
