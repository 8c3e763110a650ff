/* preview.c: preview hosts, the key and the tokens; see preview.h. */
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include "base64.h"
#include "preview.h"
#include "util.h"

int
preview_key_load(const char *state_dir, uint8_t key[static PREVIEW_KEY_LEN], char **ret_why)
{
	_cleanup_free_ char *path = strdup_printf("%s/%s", state_dir, PREVIEW_KEY_FILE);
	_cleanup_close_ int fd = -1;
	uint8_t fresh[PREVIEW_KEY_LEN];
	struct stat st;
	ssize_t n;
	int r;

	if (!path)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT) {
		/* made once, kept across restarts: a preview URL handed out stays good */
		r = random_bytes(fresh, sizeof(fresh));
		if (r >= 0)
			r = write_file_atomic(path, fresh, sizeof(fresh), 0600);
		explicit_bzero(fresh, sizeof(fresh));
		if (r < 0)
			return error_printf(ret_why, r, "cannot make '%s': %s", path, strerror(-r));
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (fd < 0) {
		r = negative_errno();
		return error_printf(ret_why, r, "cannot open '%s': %s", path, strerror(-r));
	}
	if (fstat(fd, &st) < 0) {
		r = negative_errno();
		return error_printf(ret_why, r, "cannot read '%s': %s", path, strerror(-r));
	}
	if (!S_ISREG(st.st_mode) || st.st_size != PREVIEW_KEY_LEN)
		return error_printf(ret_why, -EINVAL,
		                    "'%s' is not a key of %d bytes; remove it and sandboxd makes "
		                    "another (every preview URL handed out stops working)",
		                    path, PREVIEW_KEY_LEN);
	if (st.st_mode & 077)
		return error_printf(ret_why, -EPERM,
		                    "'%s' is readable by group or others (mode %04o); run 'chmod "
		                    "600 %s'",
		                    path, (unsigned)(st.st_mode & 07777), path);
	n = read(fd, key, PREVIEW_KEY_LEN);
	if (n != PREVIEW_KEY_LEN) {
		explicit_bzero(key, PREVIEW_KEY_LEN);
		return error_printf(ret_why, -EIO, "cannot read '%s'", path);
	}
	return 0;
}

static void
token_mac(const uint8_t key[static PREVIEW_KEY_LEN], const char *id, unsigned port,
          uint8_t mac[static crypto_auth_hmacsha256_BYTES])
{
	crypto_auth_hmacsha256_state st;
	char msg[SANDBOX_ID_MAX + 16];
	int n = snprintf(msg, sizeof(msg), "%s|%u", id, port);

	(void)crypto_auth_hmacsha256_init(&st, key, PREVIEW_KEY_LEN);
	(void)crypto_auth_hmacsha256_update(&st, (const unsigned char *)msg,
	                                    n > 0 ? (size_t)n : 0);
	(void)crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

void
preview_token(const uint8_t key[static PREVIEW_KEY_LEN], const char *id, unsigned port,
              char out[static PREVIEW_TOKEN_LEN + 1])
{
	_cleanup_buf_ struct buf b = BUF_INIT(PREVIEW_TOKEN_LEN + 1);
	uint8_t mac[crypto_auth_hmacsha256_BYTES];

	_Static_assert(BASE64URL_LEN(crypto_auth_hmacsha256_BYTES) == PREVIEW_TOKEN_LEN,
	               "the token is the MAC in base64url");
	token_mac(key, id, port, mac);
	out[0] = '\0';
	if (base64url_encode(&b, mac, sizeof(mac)) == 0 && b.len == PREVIEW_TOKEN_LEN)
		memcpy(out, b.data, PREVIEW_TOKEN_LEN + 1);
}

bool
preview_token_valid(const uint8_t key[static PREVIEW_KEY_LEN], const char *id, unsigned port,
                    const char *token, size_t len)
{
	char want[PREVIEW_TOKEN_LEN + 1];

	preview_token(key, id, port, want);
	return want[0] != '\0' && secret_equal(token, len, want, PREVIEW_TOKEN_LEN);
}

int
preview_host_parse(const char *hosthdr, const char *domain,
                   char ret_id[static SANDBOX_ID_MAX + 1], unsigned *ret_port)
{
	char host[256], id[SANDBOX_ID_MAX + 1];
	const char *dot, *dash;
	size_t n = 0, idlen;
	uint64_t port;

	/* HOST or HOST:PORT, HOST a name (no address, no userinfo: the header goes into a
	 * Location as it is) */
	for (; hosthdr[n] && hosthdr[n] != ':'; n++) {
		unsigned char ch = (unsigned char)hosthdr[n];
		if (n + 1 >= sizeof(host) ||
		    !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_'))
			return -EINVAL;
		host[n] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
	}
	if (hosthdr[n] == ':' &&
	    (parse_u64(hosthdr + n + 1, &port) < 0 || port == 0 || port > 65535))
		return -EINVAL;
	if (n > 1 && host[n - 1] == '.')
		n--; /* "name." is "name" */
	host[n] = '\0';
	/* the first label is ours, the rest exactly the domain */
	dot = strchr(host, '.');
	if (!str_has_prefix(host, "p-") || !dot || strcmp(dot + 1, domain) != 0)
		return -EINVAL;
	for (dash = dot; dash > host + 2 && dash[-1] != '-'; dash--)
		;
	/* the port after the last '-': 1..65535, no leading zero */
	if (dash <= host + 2 || dash == dot || *dash == '0' ||
	    parse_u64_n(dash, (size_t)(dot - dash), &port) < 0 || port == 0 || port > 65535)
		return -EINVAL;
	idlen = (size_t)(dash - 1 - (host + 2));
	if (idlen == 0 || 4 + idlen > SANDBOX_ID_MAX)
		return -EINVAL;
	memcpy(id, "sbx_", 4);
	memcpy(id + 4, host + 2, idlen);
	id[4 + idlen] = '\0';
	if (!sandbox_id_valid(id))
		return -EINVAL;
	memcpy(ret_id, id, 4 + idlen + 1);
	*ret_port = (unsigned)port;
	return 0;
}

int
preview_host(const char *id, unsigned port, const char *domain, char *out, size_t size)
{
	int n;

	if (str_has_prefix(id, "sbx_"))
		id += 4;
	n = snprintf(out, size, "p-%s-%u.%s", id, port, domain);
	return n < 0 || (size_t)n >= size ? -E2BIG : 0;
}
