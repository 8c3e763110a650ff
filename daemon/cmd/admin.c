/* admin.c: `sandboxd admin create|list`, the accounts as the operator sees them from a shell
 * on the server: how the first admin is made. It opens the store in the state directory
 * itself, so it works before sandboxd ever ran and beside a running one (SQLite in WAL mode
 * with a busy timeout; sandboxd reads accounts from the store on every request). Passwords
 * come from the terminal (asked twice, echo off) or the first line of a file, never argv. */
#include <fcntl.h>
#include <getopt.h>
#include <sys/stat.h>
#include <termios.h>
#include "accounts.h"
#include "log.h"
#include "paths.h"
#include "store.h"
#include "util.h"

static void
usage(FILE *f)
{
	fputs("usage: sandboxd admin create EMAIL [--role admin|user] [--password-file FILE]\n"
	      "                             [--state-dir DIR]\n"
	      "       sandboxd admin list [--state-dir DIR]\n"
	      "\n"
	      "create  makes an account (an admin unless --role user). The password is asked for\n"
	      "        twice on the terminal, or read from the first line of FILE (which only its\n"
	      "        owner may read); it is never taken from the command line.\n"
	      "list    lists the accounts.\n"
	      "Both work whether sandboxd runs or not.\n"
	      "\n"
	      "  --state-dir DIR  sandboxd's state directory (default: /var/lib/sandboxd as root,\n"
	      "                   ~/.local/share/sandboxd otherwise)\n",
	      f);
}

/* The state directory as sandboxd keeps it: made 0700 when absent; refused when it is
 * another user's (files written here would lock sandboxd out) or open to others. */
static int
open_store(const char *dir, struct store **ret)
{
	_cleanup_free_ char *db = NULL, *why = NULL;
	int r;

	r = paths_state_dir_prepare(dir, &why);
	if (r < 0) {
		fprintf(stderr, "sandboxd admin: %s\n", why ? why : strerror(-r));
		return r;
	}
	db = strdup_printf("%s/sandboxd.db", dir);
	if (!db)
		return -ENOMEM;
	r = store_open(db, ret);
	if (r < 0 && r != -EPROTO && r != -EIO)
		fprintf(stderr, "sandboxd admin: cannot open '%s': %s\n", db, strerror(-r));
	return r;
}

/* One line into buf (NUL-terminated, without its newline); -E2BIG when it is longer. */
static int
read_line(int fd, char *buf, size_t size, size_t *ret_len)
{
	size_t n = 0;

	for (;;) {
		char ch;
		ssize_t k = read(fd, &ch, 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return negative_errno();
		if (k == 0 || ch == '\n')
			break;
		if (n + 1 >= size)
			return -E2BIG;
		buf[n++] = ch;
	}
	if (n > 0 && buf[n - 1] == '\r')
		n--;
	buf[n] = '\0';
	*ret_len = n;
	return 0;
}

static int
password_from_file(const char *path, char *buf, size_t size, size_t *ret_len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	int r;

	if (fd < 0 || fstat(fd, &st) < 0) {
		r = negative_errno();
		fprintf(stderr, "sandboxd admin: cannot read --password-file '%s': %s\n", path,
		        strerror(-r));
		return r;
	}
	if (st.st_mode & 044) {
		fprintf(stderr,
		        "sandboxd admin: --password-file '%s' may be read by others; run 'chmod "
		        "600 %s'\n",
		        path, path);
		return -EPERM;
	}
	r = read_line(fd, buf, size, ret_len);
	if (r < 0)
		fprintf(stderr, "sandboxd admin: --password-file '%s': %s\n", path,
		        r == -E2BIG ? "its first line is longer than 1024 bytes" : strerror(-r));
	return r;
}

static int
ask(const char *prompt, char *buf, size_t size, size_t *ret_len)
{
	struct termios old, quiet;
	int r;

	fputs(prompt, stderr);
	if (tcgetattr(STDIN_FILENO, &old) < 0)
		return negative_errno();
	quiet = old;
	quiet.c_lflag &= ~(tcflag_t)ECHO;
	quiet.c_lflag |= ECHONL;
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) < 0)
		return negative_errno();
	r = read_line(STDIN_FILENO, buf, size, ret_len);
	(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
	return r;
}

static int
password_from_terminal(char *buf, size_t size, size_t *ret_len)
{
	char again[ACCOUNT_PASSWORD_MAX + 2];
	size_t n2 = 0;
	int r;

	if (!isatty(STDIN_FILENO)) {
		fputs("sandboxd admin: stdin is not a terminal, so the password cannot be asked "
		      "for; put it in a file only you can read and pass --password-file FILE\n",
		      stderr);
		return -ENOTTY;
	}
	r = ask("password: ", buf, size, ret_len);
	if (r >= 0 && !account_password_check(buf, *ret_len))
		r = ask("password again: ", again, sizeof(again), &n2);
	if (r < 0) {
		fprintf(stderr, "sandboxd admin: reading the password failed: %s\n",
		        r == -E2BIG ? "it is longer than 1024 bytes" : strerror(-r));
		explicit_bzero(again, sizeof(again));
		return r;
	}
	if (!account_password_check(buf, *ret_len) && !secret_equal(buf, *ret_len, again, n2)) {
		fputs("sandboxd admin: the two passwords differ; run it again\n", stderr);
		r = -EINVAL;
	}
	explicit_bzero(again, sizeof(again));
	return r;
}

static int
admin_create(const char *dir, const char *email_in, enum role role, const char *password_file)
{
	_cleanup_(store_freep) struct store *s = NULL;
	char email[ACCOUNT_EMAIL_MAX + 1], pw[ACCOUNT_PASSWORD_MAX + 2], hash[ACCOUNT_HASH_MAX];
	struct account a;
	const char *why;
	size_t n = 0;
	int r;

	why = account_email_normalise(email_in, email);
	if (why) {
		fprintf(stderr, "sandboxd admin: '%s': %s\n", email_in, why);
		return 2;
	}
	r = open_store(dir, &s);
	if (r < 0)
		return 1;
	if (account_get_by_email(s, email, &a, NULL) == 0) {
		fprintf(stderr, "sandboxd admin: '%s' already has an account (%s, %s)\n", email,
		        a.id, role_to_string(a.role));
		return 1;
	}
	r = password_file ? password_from_file(password_file, pw, sizeof(pw), &n)
	                  : password_from_terminal(pw, sizeof(pw), &n);
	if (r >= 0 && (why = account_password_check(pw, n))) {
		fprintf(stderr, "sandboxd admin: %s\n", why);
		r = -EINVAL;
	}
	if (r >= 0)
		r = account_hash_password(pw, n, hash);
	explicit_bzero(pw, sizeof(pw));
	if (r < 0)
		return 1;
	r = account_create(s, email, role, hash, &a);
	explicit_bzero(hash, sizeof(hash));
	if (r == -EEXIST) {
		fprintf(stderr, "sandboxd admin: '%s' already has an account\n", email);
		return 1;
	}
	if (r < 0) {
		fprintf(stderr, "sandboxd admin: cannot write the account: %s\n", strerror(-r));
		return 1;
	}
	printf("created %s %s (%s)\n", role_to_string(a.role), a.email, a.id);
	return 0;
}

static int
print_user(const struct account *a, void *data)
{
	char created[32];

	format_rfc3339(a->created_at, created);
	(*(unsigned *)data)++;
	printf("%-20s  %-5s  %-8s  %-20s  %s\n", a->id, role_to_string(a->role),
	       a->disabled ? "disabled" : "active", created, a->email);
	return 0;
}

static int
admin_list(const char *dir)
{
	_cleanup_(store_freep) struct store *s = NULL;
	unsigned n = 0;
	int r;

	if (open_store(dir, &s) < 0)
		return 1;
	printf("%-20s  %-5s  %-8s  %-20s  %s\n", "ID", "ROLE", "STATE", "CREATED", "EMAIL");
	r = account_list(s, print_user, &n);
	if (r < 0) {
		fprintf(stderr, "sandboxd admin: cannot read the accounts: %s\n", strerror(-r));
		return 1;
	}
	if (n == 0)
		fputs("(no accounts yet: 'sandboxd admin create EMAIL' makes the first admin)\n",
		      stderr);
	return 0;
}

int
admin_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "state-dir", required_argument, NULL, 's' },
		{ "role", required_argument, NULL, 'r' },
		{ "password-file", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	_cleanup_free_ char *state_default = NULL;
	const char *state_dir = NULL, *password_file = NULL, *verb;
	enum role role = ROLE_ADMIN;
	int c;

	log_setup("sandboxd", LOG_LEVEL_WARNING);
	umask(0077);
	optind = 0; /* glibc: start over, whatever parsed argv before */
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			state_dir = optarg;
			break;
		case 'r':
			if (streq(optarg, "admin") || streq(optarg, "user")) {
				role = streq(optarg, "admin") ? ROLE_ADMIN : ROLE_USER;
				break;
			}
			fprintf(stderr, "sandboxd admin: --role '%s': use admin or user\n", optarg);
			return 2;
		case 'p':
			password_file = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	verb = optind < argc ? argv[optind++] : NULL;
	if (!verb || (!streq(verb, "create") && !streq(verb, "list"))) {
		usage(stderr);
		return 2;
	}
	if (streq(verb, "create") ? optind + 1 != argc : optind != argc) {
		fprintf(stderr, "sandboxd admin %s: %s\n", verb,
		        streq(verb, "create") ? "name exactly one EMAIL"
		                              : "takes no arguments but --state-dir");
		usage(stderr);
		return 2;
	}
	if (isempty(state_dir)) {
		state_dir = state_default = paths_default_state_dir();
		if (!state_dir) {
			fputs("sandboxd admin: cannot tell the default state directory (HOME is "
			      "unknown); pass --state-dir DIR\n",
			      stderr);
			return 2;
		}
	}
	if (streq(verb, "list"))
		return admin_list(state_dir);
	return admin_create(state_dir, argv[optind], role, password_file);
}
