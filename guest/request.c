/* request.c: see request.h. Unknown tags are skipped so the host can add fields; a known tag
 * with a value of the wrong size is malformed. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include "request.h"
#include "tlv.h"
#include "util.h"

/* A string value into *dst (replacing an earlier one). */
static int
take_str(const struct tlv *t, size_t max, char **dst)
{
	char *s;
	int r = tlv_strdup(t, max, &s);

	if (r < 0)
		return r == -ENOMEM ? r : -EINVAL;
	free(*dst);
	*dst = s;
	return 0;
}

static int
push_str(const struct tlv *t, char ***v, size_t *n, size_t max)
{
	_cleanup_free_ char *s = NULL;
	int r = tlv_strdup(t, AP_FRAME_MAX, &s);

	if (r < 0)
		return r == -ENOMEM ? r : -EINVAL;
	if (*n >= max)
		return -E2BIG;
	return strv_push(v, n, TAKE_PTR(s));
}

static int
take_bool(const struct tlv *t, bool *dst)
{
	uint8_t v;

	if (tlv_u8(t, &v) < 0)
		return -EINVAL;
	*dst = v != 0;
	return 0;
}

void
request_hello_done(struct request_hello *h)
{
	free(h->hostname);
	free(h->root_dev);
	free(h->upper_dev);
	free(h->home);
	strv_free(h->env);
	free(h->net);
	free(h->machine_id);
	strv_free(h->volumes);
	*h = (struct request_hello){ 0 };
}

static int
hello_entry(struct request_hello *h, const struct tlv *t)
{
	switch (t->tag) {
	case AP_T_NONCE:
		if (t->len != AP_NONCE_LEN)
			return -EINVAL;
		memcpy(h->nonce, t->val, AP_NONCE_LEN);
		h->has_nonce = true;
		return 0;
	case AP_T_TIME_NS:
		h->has_time = true;
		return tlv_u64(t, &h->time_ns) < 0 ? -EINVAL : 0;
	case AP_T_ENTROPY:
		if (t->len != AP_ENTROPY_LEN)
			return -EINVAL;
		memcpy(h->entropy, t->val, AP_ENTROPY_LEN);
		h->has_entropy = true;
		return 0;
	case AP_T_HOSTNAME:
		return take_str(t, 64, &h->hostname);
	case AP_T_ROOT_DEV:
		return take_str(t, AP_PATH_MAX, &h->root_dev);
	case AP_T_UPPER_DEV:
		return take_str(t, AP_PATH_MAX, &h->upper_dev);
	case AP_T_HOME:
		return take_str(t, AP_PATH_MAX, &h->home);
	case AP_T_ENV:
		return push_str(t, &h->env, &h->nenv, AP_MAX_ENV);
	case AP_T_UID:
		h->has_uid = true;
		return tlv_u32(t, &h->uid) < 0 ? -EINVAL : 0;
	case AP_T_GID:
		h->has_gid = true;
		return tlv_u32(t, &h->gid) < 0 ? -EINVAL : 0;
	case AP_T_FEATURES:
		return tlv_u32(t, &h->features) < 0 ? -EINVAL : 0;
	case AP_T_NET:
		return take_str(t, 64, &h->net);
	case AP_T_MAC:
		if (t->len != sizeof(h->mac))
			return -EINVAL;
		memcpy(h->mac, t->val, sizeof(h->mac));
		h->has_mac = true;
		return 0;
	case AP_T_MACHINE_ID:
		return take_str(t, 64, &h->machine_id);
	case AP_T_VOLUME:
		return push_str(t, &h->volumes, &h->nvolumes, REQUEST_MAX_VOLUMES);
	default:
		return 0;
	}
}

int
request_parse_hello(const void *p, size_t n, struct request_hello *ret)
{
	struct request_hello h = { 0 };
	struct tlv_reader rd;
	struct tlv t;
	int r;

	tlv_reader_init(&rd, p, n);
	while ((r = tlv_next(&rd, &t)) > 0) {
		r = hello_entry(&h, &t);
		if (r < 0)
			break;
	}
	if (r == 0 && h.home && !request_path_valid(h.home))
		r = -EINVAL;
	if (r < 0) {
		request_hello_done(&h);
		return r == -EPROTO ? -EINVAL : r;
	}
	*ret = h;
	return 0;
}

/* One dotted-quad address of at most 15 characters at s[0..len) into *ret. */
static int
parse_addr(const char *s, size_t len, uint32_t *ret)
{
	char buf[INET_ADDRSTRLEN];
	struct in_addr a;

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET, buf, &a) != 1)
		return -EINVAL;
	*ret = a.s_addr;
	return 0;
}

int
request_parse_net(const char *s, struct request_net *ret)
{
	const char *slash = strchr(s, '/'), *comma = strchr(s, ',');
	struct request_net n = { 0 };
	uint32_t mask, g, h;
	char *end;
	unsigned long prefix;

	if (!*s) {
		*ret = (struct request_net){ .none = true };
		return 0;
	}
	if (!slash || !comma || comma < slash || slash[1] < '0' || slash[1] > '9')
		return -EINVAL;
	prefix = strtoul(slash + 1, &end, 10);
	if (end != comma || prefix < 8 || prefix > 30)
		return -EINVAL;
	if (parse_addr(s, (size_t)(slash - s), &n.guest_addr) < 0 ||
	    parse_addr(comma + 1, strlen(comma + 1), &n.host_addr) < 0)
		return -EINVAL;
	mask = 0xffffffffu << (32 - prefix);
	g = ntohl(n.guest_addr);
	h = ntohl(n.host_addr);
	/* both on the link, distinct, and neither its network nor its broadcast address */
	if ((g & mask) != (h & mask) || g == h || (g & ~mask) == 0 || (g & ~mask) == ~mask ||
	    (h & ~mask) == 0 || (h & ~mask) == ~mask)
		return -EINVAL;
	n.prefix = (unsigned)prefix;
	*ret = n;
	return 0;
}

bool
request_machine_id_valid(const char *s)
{
	bool nonzero = false;
	size_t i;

	for (i = 0; s[i]; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
		nonzero |= s[i] != '0';
	}
	return i == 32 && nonzero;
}

bool
request_mount_allowed(const char *path)
{
	static const char *const roots[] = { "/sandbox/", "/mnt/" };
	size_t len = strlen(path);

	if (!request_path_valid(path) || path[len - 1] == '/')
		return false;
	if (streq(path, "/sandbox/home"))
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(roots); i++)
		if (strneq(path, roots[i], strlen(roots[i])) && len > strlen(roots[i]))
			return true;
	return false;
}

void
request_volume_done(struct request_volume *v)
{
	free(v->dev);
	free(v->mount);
	*v = (struct request_volume){ 0 };
}

int
request_parse_volume(const char *s, struct request_volume *ret)
{
	const char *t1 = strchr(s, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
	struct request_volume v = { 0 };

	if (!t1 || !t2 || (!streq(t2 + 1, "ro") && !streq(t2 + 1, "rw")))
		return -EINVAL;
	v.dev = strndup(s, (size_t)(t1 - s));
	v.mount = strndup(t1 + 1, (size_t)(t2 - t1 - 1));
	v.read_only = streq(t2 + 1, "ro");
	if (!v.dev || !v.mount) {
		request_volume_done(&v);
		return -ENOMEM;
	}
	if (!strneq(v.dev, "/dev/", 5) || !v.dev[5] || !request_path_valid(v.dev) ||
	    !request_mount_allowed(v.mount)) {
		request_volume_done(&v);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

void
request_exec_done(struct request_exec *e)
{
	strv_free(e->argv);
	strv_free(e->env);
	free(e->cwd);
	*e = (struct request_exec){ 0 };
}

static int
exec_entry(struct request_exec *e, const struct tlv *t)
{
	switch (t->tag) {
	case AP_T_ARG:
		return push_str(t, &e->argv, &e->argc, AP_MAX_ARGS);
	case AP_T_ENV:
		return push_str(t, &e->env, &e->nenv, AP_MAX_ENV);
	case AP_T_CWD:
		return take_str(t, AP_PATH_MAX, &e->cwd);
	case AP_T_TTY:
		return take_bool(t, &e->tty);
	case AP_T_KEEP:
		return take_bool(t, &e->keep);
	case AP_T_ROWS:
		return tlv_u16(t, &e->rows) < 0 ? -EINVAL : 0;
	case AP_T_COLS:
		return tlv_u16(t, &e->cols) < 0 ? -EINVAL : 0;
	case AP_T_PORT:
		return tlv_u16(t, &e->port) < 0 || e->port == 0 ? -EINVAL : 0;
	default:
		return 0;
	}
}

int
request_parse_exec(const void *p, size_t n, struct request_exec *ret)
{
	struct request_exec e = { .rows = 24, .cols = 80 };
	struct tlv_reader rd;
	struct tlv t;
	int r;

	tlv_reader_init(&rd, p, n);
	while ((r = tlv_next(&rd, &t)) > 0) {
		r = exec_entry(&e, &t);
		if (r < 0)
			break;
	}
	if (r == 0 && e.argc == 0 && !e.port)
		r = -EINVAL;
	if (r == 0 && e.cwd && e.cwd[0] != '/')
		r = -EINVAL;
	if (r < 0) {
		request_exec_done(&e);
		return r == -EPROTO ? -EINVAL : r;
	}
	if (e.rows == 0)
		e.rows = 24;
	if (e.cols == 0)
		e.cols = 80;
	*ret = e;
	return 0;
}

void
request_file_done(struct request_file *f)
{
	free(f->path);
	*f = (struct request_file){ 0 };
}

int
request_parse_file(const void *p, size_t n, struct request_file *ret)
{
	struct request_file f = { 0 };
	struct tlv_reader rd;
	struct tlv t;
	int r;

	tlv_reader_init(&rd, p, n);
	while ((r = tlv_next(&rd, &t)) > 0) {
		if (t.tag == AP_T_PATH)
			r = take_str(&t, AP_PATH_MAX, &f.path);
		else if (t.tag == AP_T_SIZE) {
			f.has_size = true;
			r = tlv_u64(&t, &f.size) < 0 ? -EINVAL : 0;
		} else if (t.tag == AP_T_MODE) {
			f.has_mode = true;
			r = tlv_u32(&t, &f.mode) < 0 ? -EINVAL : 0;
		}
		if (r < 0)
			break;
	}
	if (r == 0 && (!f.path || !request_path_valid(f.path)))
		r = -EINVAL;
	if (r < 0) {
		request_file_done(&f);
		return r == -EPROTO ? -EINVAL : r;
	}
	*ret = f;
	return 0;
}

bool
request_path_valid(const char *path)
{
	size_t len = strlen(path);

	if (path[0] != '/' || len >= AP_PATH_MAX)
		return false;
	if (len == 1)
		return true;
	for (const char *c = path + 1;;) {
		const char *e = strchrnul(c, '/');
		size_t n = (size_t)(e - c);
		/* a trailing slash is fine ("/a/b/"); an empty middle component is not */
		if (n == 0 && *e)
			return false;
		if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (!*e)
			return true;
		c = e + 1;
	}
}
