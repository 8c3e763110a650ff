/* util.c: see util.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>
#include "util.h"

uint64_t
now_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t
now_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int64_t
now_unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
format_rfc3339(int64_t unix_ms, char out[static 32])
{
	time_t t = (time_t)(unix_ms / 1000);
	struct tm tm;

	if (!gmtime_r(&t, &tm)) {
		snprintf(out, 32, "1970-01-01T00:00:00Z");
		return;
	}
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int
parse_u64_n(const char *s, size_t n, uint64_t *ret)
{
	uint64_t v = 0;

	if (n == 0 || n > 20)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*ret = v;
	return 0;
}

int
parse_u64(const char *s, uint64_t *ret)
{
	if (!s)
		return -EINVAL;
	return parse_u64_n(s, strlen(s), ret);
}

int
random_bytes(void *out, size_t n)
{
	uint8_t *p = out;

	while (n > 0) {
		ssize_t k = getrandom(p, n, 0);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return negative_errno();
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int
random_hex(char *out, size_t nbytes)
{
	static const char hex[] = "0123456789abcdef";
	uint8_t raw[64];
	int r;

	if (nbytes > sizeof(raw))
		return -EINVAL;
	r = random_bytes(raw, nbytes);
	if (r < 0)
		return r;
	for (size_t i = 0; i < nbytes; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[2 * nbytes] = '\0';
	return 0;
}

bool
secret_equal(const void *a, size_t alen, const void *b, size_t blen)
{
	const volatile uint8_t *x = a, *y = b;
	size_t n = alen > blen ? alen : blen;
	uint8_t diff = alen != blen;

	/* walk the longer length so the time depends on nothing secret but that length */
	for (size_t i = 0; i < n; i++) {
		uint8_t cx = i < alen ? x[i] : 0;
		uint8_t cy = i < blen ? y[i] : 0;
		diff |= cx ^ cy;
	}
	return diff == 0;
}

int
buf_put_quoted(struct buf *b, const char *s, size_t len, size_t max)
{
	int r = buf_putc(b, '"');

	for (size_t i = 0; r >= 0 && i < len && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			r = buf_printf(b, "\\%c", c);
		else if (c == '\n')
			r = buf_puts(b, "\\n");
		else if (c == '\t')
			r = buf_puts(b, "\\t");
		else if (c < 0x20 || c >= 0x7f)
			r = buf_printf(b, "\\x%02x", c);
		else
			r = buf_putc(b, (char)c);
	}
	if (r >= 0 && len > max)
		r = buf_puts(b, "...");
	if (r >= 0)
		r = buf_putc(b, '"');
	return r;
}

size_t
termsafe_copy(char *dst, size_t size, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	if (size == 0)
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[4];
		size_t k;

		if (c >= 0x20 && c < 0x7f) {
			esc[0] = (char)c;
			k = 1;
		} else if (c == '\n' || c == '\r' || c == '\t') {
			esc[0] = '\\';
			esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
			k = 2;
		} else {
			esc[0] = '\\';
			esc[1] = 'x';
			esc[2] = hex[c >> 4];
			esc[3] = hex[c & 0xf];
			k = 4;
		}
		if (n + k >= size)
			break; /* an escape is written whole or not at all */
		memcpy(dst + n, esc, k);
		n += k;
	}
	dst[n] = '\0';
	return n;
}

char *
termsafe_dup(const char *s)
{
	size_t len;
	char *d;

	s = s ? s : "";
	len = strlen(s);
	d = malloc(4 * len + 1);
	if (!d)
		return NULL;
	(void)termsafe_copy(d, 4 * len + 1, s, len);
	return d;
}

int
mkdir_p(const char *path, mode_t mode)
{
	_cleanup_free_ char *p = strdup(path);

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1;; s++) {
		if (*s == '/' || *s == '\0') {
			char c = *s;
			*s = '\0';
			if (mkdir(p, mode) < 0 && errno != EEXIST)
				return negative_errno();
			*s = c;
			if (c == '\0')
				break;
		}
	}
	return 0;
}

int
read_file_max(const char *path, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	_cleanup_buf_ struct buf b = BUF_INIT(max);
	char chunk[4096];

	if (fd < 0)
		return negative_errno();
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return negative_errno();
		}
		if (n == 0)
			break;
		if (buf_append(&b, chunk, (size_t)n) < 0)
			return -EFBIG;
	}
	if (ret_len)
		*ret_len = b.len;
	*ret = buf_steal(&b);
	return *ret ? 0 : -ENOMEM;
}

static int
read_private_fd(int fd, size_t max, char **ret, size_t *ret_len)
{
	struct stat st;
	size_t got = 0;
	char *data;

	if (fstat(fd, &st) < 0)
		return negative_errno();
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
		return -EPERM;
	if ((uint64_t)st.st_size > max)
		return -EFBIG;
	data = malloc((size_t)st.st_size + 1);
	if (!data)
		return -ENOMEM;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got < (size_t)st.st_size) {
		explicit_bzero(data, got);
		free(data);
		return -EIO;
	}
	data[got] = '\0';
	*ret = data;
	*ret_len = got;
	return 0;
}

int
read_private_file(const char *path, size_t max, char **ret, size_t *ret_len, char **ret_why)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	int r;

	if (fd < 0) {
		r = negative_errno();
		return r == -ENOENT ? r
		                    : error_printf(ret_why, r, "cannot open it: %s", strerror(-r));
	}
	r = read_private_fd(fd, max, ret, ret_len);
	if (r == -EPERM)
		return error_printf(ret_why, r,
		                    "it is not a file of sandboxd's uid alone (mode 0600)");
	if (r == -EFBIG)
		return error_printf(ret_why, r, "it is larger than %zu bytes", max);
	if (r == -EIO)
		return error_printf(ret_why, r, "cannot read it whole");
	if (r < 0 && r != -ENOMEM)
		return error_printf(ret_why, r, "cannot read it: %s", strerror(-r));
	return r;
}

void
fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

int
write_file_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
	_cleanup_free_ char *tmp = strdup_printf("%s.tmp.%d", path, (int)getpid());
	const char *p = data;
	int fd, r = 0;

	if (!tmp)
		return -ENOMEM;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return negative_errno();
	if (fchmod(fd, mode) < 0)
		r = negative_errno();
	while (r == 0 && len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = negative_errno();
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	if (r == 0 && fsync(fd) < 0)
		r = negative_errno();
	close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = negative_errno();
	if (r < 0)
		unlink(tmp);
	return r;
}

char *
strdup_printf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}

int
error_printf(char **ret_error, int r, const char *fmt, ...)
{
	va_list ap;

	if (ret_error) {
		char *m = NULL;

		va_start(ap, fmt);
		if (vasprintf(&m, fmt, ap) < 0)
			m = NULL;
		va_end(ap);
		free(*ret_error);
		*ret_error = m;
	}
	return r;
}

int
name_index(const char *const *names, size_t n, const char *s)
{
	for (size_t i = 0; s && i < n; i++)
		if (names[i] && streq(s, names[i]))
			return (int)i;
	return -1;
}

bool
str_has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

int
write_all(int fd, const void *data, size_t len)
{
	const char *c = data;

	while (len > 0) {
		ssize_t w = write(fd, c, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			(void)poll(&pfd, 1, 1000);
			continue;
		}
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		c += w;
		len -= (size_t)w;
	}
	return 0;
}

bool
env_name_ok(const char *s, size_t n, size_t max)
{
	if (n == 0 || n > max || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_'))
			return false;
	}
	return true;
}

bool
label_is_number(const char *l, size_t n)
{
	size_t i = 0;

	if (n >= 2 && l[0] == '0' && l[1] == 'x') {
		for (i = 2; i < n; i++)
			if (!((l[i] >= '0' && l[i] <= '9') || (l[i] >= 'a' && l[i] <= 'f')))
				return false;
		return true;
	}
	for (; i < n; i++)
		if (l[i] < '0' || l[i] > '9')
			return false;
	return n > 0;
}

const char *
host_name_normalise(const char *in, size_t n, char *out)
{
	size_t label = 0, last = 0;

	if (n > 0 && in[n - 1] == '.')
		n--;
	if (n == 0)
		return "an empty name";
	if (n > HOST_NAME_MAX_LEN)
		return "a name longer than 253 bytes";
	for (size_t i = 0; i < n; i++) {
		char ch = in[i] >= 'A' && in[i] <= 'Z' ? (char)(in[i] - 'A' + 'a') : in[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
		      ch == '_' || ch == '.'))
			return "a byte that is not a letter, digit, '-', '_' or '.': not a DNS "
			       "name";
		if (ch == '.') {
			if (label == 0)
				return "an empty label";
			label = 0;
			last = i + 1;
		} else if (++label > 63) {
			return "a label longer than 63 bytes";
		}
		out[i] = ch;
	}
	if (label == 0)
		return "an empty label";
	out[n] = '\0';
	if (label_is_number(out + last, n - last))
		return "an IP address, not a name";
	return NULL;
}

int
hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}
