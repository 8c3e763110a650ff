/* context.c: see context.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "context.h"
#include "paths.h"
#include "util.h"

#define CONFIG_MAX (1u << 20)
#define TOKEN_MAX 4096

static char *
config_dir(void)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home;

	/* the XDG spec: a relative value is to be ignored */
	if (xdg && xdg[0] == '/')
		return strdup_printf("%s/sandbox-cli", xdg);
	home = paths_home_dir();
	return home ? strdup_printf("%s/.config/sandbox-cli", home) : NULL;
}

char *
context_config_path(void)
{
	_cleanup_free_ char *dir = config_dir();

	return dir ? strdup_printf("%s/config.json", dir) : NULL;
}

static json_t *
contexts_obj(const struct context_store *s)
{
	return json_object_get(s->root, "contexts");
}

static int
fresh_root(struct context_store *s)
{
	s->root = json_pack("{s:n, s:{}}", "current", "contexts");
	return s->root ? 0 : -ENOMEM;
}

static int
bad_config(struct context_store *s, const char *what)
{
	snprintf(s->error, sizeof(s->error), "%s", what);
	return -EBADMSG;
}

int
context_load(struct context_store *s)
{
	_cleanup_free_ char *text = NULL;
	json_error_t jerr;
	struct stat st;
	const char *name, *cur;
	json_t *ctxs, *v;
	size_t len;
	int r;

	*s = (struct context_store){ .path = context_config_path() };
	if (!s->path)
		return -ENOMEM;
	r = read_file_max(s->path, CONFIG_MAX, &text, &len);
	if (r == -ENOENT)
		return fresh_root(s);
	if (r == -EFBIG)
		return bad_config(s, "it is larger than 1 MiB");
	if (r < 0)
		return r;
	if (stat(s->path, &st) == 0 && (st.st_mode & 077))
		s->loose_mode = true;
	s->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	explicit_bzero(text, len); /* it holds tokens */
	if (!s->root) {
		snprintf(s->error, sizeof(s->error), "it is not valid JSON: %s (line %d)",
		         jerr.text, jerr.line);
		return -EBADMSG;
	}
	ctxs = contexts_obj(s);
	if (!json_is_object(s->root) || !json_is_object(ctxs))
		return bad_config(s, "it has no \"contexts\" object");
	json_object_foreach (ctxs, name, v) {
		if (!context_name_valid(name) || !json_is_object(v) ||
		    !json_is_string(json_object_get(v, "endpoint")))
			return bad_config(s, "a context has an invalid name or no endpoint");
		if (json_object_get(v, "token") &&
		    !context_token_valid(json_string_value(json_object_get(v, "token"))))
			return bad_config(s, "a context's token is not a string of printable "
			                     "characters");
	}
	cur = json_string_value(json_object_get(s->root, "current"));
	if (cur && !json_object_get(ctxs, cur))
		return bad_config(s, "the current context does not exist");
	return 0;
}

int
context_save(struct context_store *s)
{
	_cleanup_free_ char *dir = config_dir();
	_cleanup_free_ char *text = NULL;
	size_t len;
	int r;

	if (!dir)
		return -ENOMEM;
	r = mkdir_p(dir, 0700);
	if (r < 0)
		return r;
	text = json_dumps(s->root, JSON_INDENT(2));
	if (!text)
		return -ENOMEM;
	len = strlen(text);
	r = write_file_atomic(s->path, text, len, 0600);
	explicit_bzero(text, len);
	return r;
}

void
context_store_done(struct context_store *s)
{
	free(s->path);
	json_decref(s->root);
	*s = (struct context_store){ 0 };
}

bool
context_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 63 || name[0] == '.' || name[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
		    c != '.' && c != '_' && c != '-')
			return false;
	}
	return true;
}

json_t *
context_get(const struct context_store *s, const char *name)
{
	return json_object_get(contexts_obj(s), name);
}

const char *
context_current(const struct context_store *s)
{
	return json_string_value(json_object_get(s->root, "current"));
}

int
context_put(struct context_store *s, const char *name, const char *endpoint, const char *token,
            const char *ca, bool replace)
{
	json_t *ctx;

	if (!replace && context_get(s, name))
		return -EEXIST;
	ctx = json_pack("{s:s}", "endpoint", endpoint);
	if (!ctx)
		return -ENOMEM;
	if ((token && json_object_set_new(ctx, "token", json_string(token)) < 0) ||
	    (ca && json_object_set_new(ctx, "ca", json_string(ca)) < 0) ||
	    json_object_set_new(contexts_obj(s), name, ctx) < 0)
		return -ENOMEM;
	return 0;
}

int
context_remove(struct context_store *s, const char *name)
{
	const char *cur = context_current(s);

	if (!context_get(s, name))
		return -ENOENT;
	if (cur && streq(cur, name) && json_object_set_new(s->root, "current", json_null()) < 0)
		return -ENOMEM;
	return json_object_del(contexts_obj(s), name) < 0 ? -ENOENT : 0;
}

int
context_use(struct context_store *s, const char *name)
{
	if (!context_get(s, name))
		return -ENOENT;
	return json_object_set_new(s->root, "current", json_string(name)) < 0 ? -ENOMEM : 0;
}

bool
context_token_valid(const char *s)
{
	size_t n;

	if (!s)
		return false;
	n = strlen(s);
	if (n == 0 || n > TOKEN_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

int
context_read_token(const char *path, char **ret, mode_t *ret_mode)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	_cleanup_buf_ struct buf b = BUF_INIT(TOKEN_MAX + 64);
	struct stat st;
	char chunk[512];
	int r = 0;

	if (fd < 0)
		return negative_errno();
	/* the checks and the read are on the same open file */
	if (fstat(fd, &st) < 0)
		return negative_errno();
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (st.st_mode & 077) {
		*ret_mode = st.st_mode & 07777;
		return -EPERM;
	}
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = negative_errno();
			break;
		}
		if (n == 0)
			break;
		if (buf_append(&b, chunk, (size_t)n) < 0) {
			r = -EBADMSG;
			break;
		}
	}
	explicit_bzero(chunk, sizeof(chunk));
	while (r == 0 && b.len > 0 && strchr(" \t\r\n", b.data[b.len - 1]))
		b.data[--b.len] = '\0';
	if (r == 0 && (!b.data || !context_token_valid(b.data)))
		r = -EBADMSG;
	if (r < 0) {
		if (b.data)
			explicit_bzero(b.data, b.cap);
		return r;
	}
	*ret = buf_steal(&b);
	return *ret ? 0 : -ENOMEM;
}
