/* registry.c: see registry.h. A blocking client of the OCI distribution API on libcurl's easy
 * interface (one handle per source, so connections are reused), and the same operations on
 * an OCI image layout directory. Everything fetched is checked against a digest before it is
 * used or kept: manifests and configs in memory (bounded), blobs streamed to a file. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <strings.h>
#include <sys/stat.h>
#include "oci.h"
#include "registry.h"
#include "strv.h"
#include "tool.h"
#include "util.h"

#define CONNECT_TIMEOUT_SECS 30L
#define STALL_DEFAULT_SECS 60u
#define DOCUMENT_TIMEOUT_SECS 300L
#define REDIRECTS_MAX 5
#define TOKEN_BODY_MAX (64u << 10)
#define TOKEN_MAX (16u << 10)
#define ERROR_BODY_MAX (64u << 10)
#define PROGRESS_STEP (64u << 10)
#define REASON_SHOWN 200

#define ACCEPT_MANIFESTS                                                                           \
	"Accept: application/vnd.oci.image.manifest.v1+json, "                                     \
	"application/vnd.oci.image.index.v1+json, "                                                \
	"application/vnd.docker.distribution.manifest.v2+json, "                                   \
	"application/vnd.docker.distribution.manifest.list.v2+json"

struct oci_source {
	bool is_layout;

	/* a registry */
	struct oci_ref ref;
	char *origin; /* "scheme://host:port" of the registry: the one place a token goes */
	char *base;   /* "<scheme>://<registry>/v2/<repository>" */
	bool insecure;
	/* named by the operator (--insecure-registry, --local-registry): it, and where it
	 * sends sandboxd, may be on a local address. Every connection for any other registry
	 * goes only to public addresses, so a request naming an image cannot point sandboxd
	 * at a service on the host's own networks, nor learn whether one listens there. */
	bool trusted;
	char **insecure_list;
	size_t n_insecure;
	unsigned stall_secs;
	char *ca_file;
	char *auth_header; /* "Authorization: Bearer ..." once a token was fetched */
	CURL *curl;
	bool refused_private; /* a connection was refused for that */

	char *where; /* "registry HOST" or "image layout 'DIR'", to begin messages */

	/* a layout */
	char *dir;
	char *tag;
};

/* The first 12 hex digits of a digest, for messages. */
static const char *
short_digest(const char *digest, char out[static 24])
{
	snprintf(out, 24, "sha256:%.12s", digest && strlen(digest) > 7 ? digest + 7 : "?");
	return out;
}

/* ---- verification sinks: bytes go through sha256 into memory or a file ---- */

struct sink {
	EVP_MD_CTX *md;
	uint64_t got, limit;
	struct buf *mem; /* or */
	int fd;
	const struct oci_descriptor *d;
	oci_progress_fn progress;
	void *progress_data;
	uint64_t next_report;
	int error; /* -EFBIG past limit, -errno of a write */
};

static int
sink_init(struct sink *k, uint64_t limit, struct buf *mem, int fd)
{
	*k = (struct sink){ .limit = limit, .mem = mem, .fd = fd, .next_report = PROGRESS_STEP };
	k->md = EVP_MD_CTX_new();
	if (!k->md || EVP_DigestInit_ex(k->md, EVP_sha256(), NULL) != 1)
		return -ENOMEM;
	return 0;
}

static void
sink_done(struct sink *k)
{
	EVP_MD_CTX_free(k->md);
	k->md = NULL;
}

static int
sink_put(struct sink *k, const void *p, size_t n)
{
	if (k->error)
		return k->error;
	if (n > k->limit - k->got) {
		k->error = -EFBIG;
		return k->error;
	}
	if (EVP_DigestUpdate(k->md, p, n) != 1) {
		k->error = -ENOMEM;
		return k->error;
	}
	if (k->mem) {
		int r = buf_append(k->mem, p, n);
		if (r < 0) {
			k->error = r == -ENOBUFS ? -EFBIG : r;
			return k->error;
		}
	} else {
		int r = write_all(k->fd, p, n);
		if (r < 0) {
			k->error = r;
			return k->error;
		}
	}
	k->got += n;
	if (k->progress && k->got >= k->next_report) {
		k->progress(k->d, k->got, k->progress_data);
		k->next_report = k->got + PROGRESS_STEP;
	}
	return 0;
}

/* "sha256:<hex>" of what went through, into out (72 bytes). */
static int
sink_digest(struct sink *k, char out[static 72])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	if (EVP_DigestFinal_ex(k->md, md, &len) != 1 || len != 32)
		return -EIO;
	memcpy(out, "sha256:", 7);
	hex_encode(md, 32, out + 7);
	return 0;
}

/* ---- HTTP ---- */

struct response {
	long status;
	char reason[64];
	char *www_authenticate;
	char *content_type;
	struct buf error_body; /* the body of a response that is not 200 */
	bool error_body_full;  /* the transfer was cut there: the rest is never read */
	struct sink *sink;     /* where a 200's body goes */
};

/* HTTP/2 has no reason phrases; messages still say "403 Forbidden". */
static const struct {
	long status;
	const char *reason;
} reasons[] = {
	{ 400, "Bad Request" },
	{ 401, "Unauthorized" },
	{ 403, "Forbidden" },
	{ 404, "Not Found" },
	{ 405, "Method Not Allowed" },
	{ 429, "Too Many Requests" },
	{ 500, "Internal Server Error" },
	{ 502, "Bad Gateway" },
	{ 503, "Service Unavailable" },
	{ 504, "Gateway Timeout" },
};

static const char *
reason_of(const struct response *resp)
{
	if (resp->reason[0])
		return resp->reason;
	for (size_t i = 0; i < ARRAY_SIZE(reasons); i++)
		if (reasons[i].status == resp->status)
			return reasons[i].reason;
	return "";
}

static void
response_done(struct response *resp)
{
	free(resp->www_authenticate);
	free(resp->content_type);
	buf_free(&resp->error_body);
	resp->www_authenticate = resp->content_type = NULL;
	resp->status = 0;
	resp->reason[0] = '\0';
}

static char *
header_value(const char *line, size_t n, const char *name)
{
	size_t nl = strlen(name);
	const char *v, *end = line + n;

	if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
		return NULL;
	v = line + nl + 1;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	return strndup(v, (size_t)(end - v));
}

static size_t
on_header(char *line, size_t size, size_t nitems, void *data)
{
	struct response *resp = data;
	size_t n = size * nitems;
	char *v;

	if (n >= 5 && strneq(line, "HTTP/", 5)) {
		/* a new response (after a 100 Continue): forget the previous one's headers */
		const char *p = memchr(line, ' ', n), *end = line + n;
		free(resp->www_authenticate);
		free(resp->content_type);
		resp->www_authenticate = resp->content_type = NULL;
		resp->reason[0] = '\0';
		resp->status = 0;
		if (p && end - p >= 4 && p[1] >= '1' && p[1] <= '5' && p[2] >= '0' && p[2] <= '9' &&
		    p[3] >= '0' && p[3] <= '9')
			resp->status = (p[1] - '0') * 100 + (p[2] - '0') * 10 + (p[3] - '0');
		if (p && end - p > 4) {
			const char *r = p + 4;
			size_t len = 0;
			while (r < end && *r == ' ')
				r++;
			while (r + len < end && r[len] != '\r' && r[len] != '\n' &&
			       len < sizeof(resp->reason) - 1)
				len++;
			memcpy(resp->reason, r, len);
			resp->reason[len] = '\0';
		}
		return n;
	}
	if ((v = header_value(line, n, "WWW-Authenticate"))) {
		/* the first challenge wins; a Bearer one is what sandboxd can answer */
		if (!resp->www_authenticate || strncasecmp(v, "bearer", 6) == 0) {
			free(resp->www_authenticate);
			resp->www_authenticate = v;
		} else {
			free(v);
		}
	} else if ((v = header_value(line, n, "Content-Type"))) {
		free(resp->content_type);
		resp->content_type = v;
	}
	return n;
}

static size_t
on_body(char *p, size_t size, size_t nitems, void *data)
{
	struct response *resp = data;
	size_t n = size * nitems;

	/* the status line came through on_header before the first byte of the body */
	if (resp->status == 200) {
		if (sink_put(resp->sink, p, n) < 0)
			return 0; /* aborts the transfer: CURLE_WRITE_ERROR */
		return n;
	}
	/* an error's (or a redirect's) body is only read for its message, and only so far:
	 * a registry that never ends one would otherwise hold the install for good */
	if (buf_avail(&resp->error_body) + n > ERROR_BODY_MAX) {
		resp->error_body_full = true;
		return 0; /* aborts the transfer; the status and what was read stand */
	}
	(void)buf_append(&resp->error_body, p, n);
	return n;
}

static int
slist_add(struct curl_slist **l, const char *s)
{
	struct curl_slist *n = curl_slist_append(*l, s);

	if (!n)
		return -ENOMEM;
	*l = n;
	return 0;
}

/* "scheme://host:port" of url, lowercase, default ports made explicit. */
static char *
url_origin(const char *url)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL, *o = NULL;

	if (!u)
		return NULL;
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
		o = strdup_printf("%s://%s:%s", scheme, host, port);
		for (char *c = o; c && *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c - 'A' + 'a');
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return o;
}

static bool
host_insecure(const struct oci_source *s, const char *hostport)
{
	for (size_t i = 0; i < s->n_insecure; i++)
		if (strcasecmp(s->insecure_list[i], hostport) == 0)
			return true;
	return false;
}

/* Whether registry (as a reference names it, "host" or "host:port") is on list, whose
 * entries are "host:port": "host" alone is port 443, as it is reached over HTTPS. */
static bool
registry_listed(char *const *list, size_t n, const char *registry)
{
	bool has_port = strrchr(registry, ':') && !strchr(strrchr(registry, ':'), ']');

	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(registry);
		if (strcasecmp(list[i], registry) == 0 ||
		    (!has_port && strncasecmp(list[i], registry, len) == 0 &&
		     streq(list[i] + len, ":443")))
			return true;
	}
	return false;
}

/* Whether plain HTTP may be used for url: only to a registry named --insecure-registry. */
static bool
http_allowed(const struct oci_source *s, const char *url)
{
	CURLU *u;
	char *host = NULL, *port = NULL;
	bool ok = false;

	if (strncasecmp(url, "https://", 8) == 0)
		return true;
	u = curl_url();
	if (!u)
		return false;
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
		_cleanup_free_ char *hp = strdup_printf("%s:%s", host, port);
		ok = hp && host_insecure(s, hp);
		if (!ok && streq(port, "80"))
			ok = host_insecure(s, host);
	}
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return ok;
}

static bool
ipv4_public(uint32_t a)
{
	return !((a >> 24) == 0 || (a >> 24) == 10 || (a >> 24) == 127 ||
	         (a >> 16) == 0xa9fe /* 169.254/16: link-local, cloud metadata */ ||
	         (a >> 20) == 0xac1 /* 172.16/12 */ || (a >> 16) == 0xc0a8 /* 192.168/16 */ ||
	         (a >> 22) == (100u << 2 | 1) /* 100.64/10: CGNAT */ ||
	         (a >> 8) == 0xc00000 /* 192.0.0/24: protocol assignments */ ||
	         (a >> 17) == (0xc612u >> 1) /* 198.18/15: benchmarking, often internal */ ||
	         (a >> 28) >= 0xe /* multicast, reserved, broadcast */);
}

/* The IPv4 address an IPv6 one stands for, if it embeds one: ::ffff:a.b.c.d (mapped),
 * ::a.b.c.d (compatible), 64:ff9b::a.b.c.d (NAT64), 2002:AABB:CCDD:: (6to4). */
static bool
ipv6_embedded_ipv4(const struct in6_addr *a, uint32_t *ret)
{
	static const uint8_t nat64[12] = { 0x00, 0x64, 0xff, 0x9b };
	const uint8_t *b = a->s6_addr;
	const uint8_t *v4 = NULL;

	if (IN6_IS_ADDR_V4MAPPED(a) || IN6_IS_ADDR_V4COMPAT(a) || memcmp(b, nat64, 12) == 0)
		v4 = b + 12;
	else if (b[0] == 0x20 && b[1] == 0x02)
		v4 = b + 2;
	if (!v4)
		return false;
	*ret = (uint32_t)v4[0] << 24 | (uint32_t)v4[1] << 16 | (uint32_t)v4[2] << 8 | v4[3];
	return true;
}

bool
registry_address_public(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ipv4_public(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		uint32_t v4;
		if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a))
			return false;
		if (ipv6_embedded_ipv4(a, &v4))
			return ipv4_public(v4);
		return !(IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_SITELOCAL(a) ||
		         IN6_IS_ADDR_MULTICAST(a) || (a->s6_addr[0] & 0xfe) == 0xfc /* fc00::/7 */);
	}
	return false;
}

static curl_socket_t
open_public_socket(void *data, curlsocktype purpose, struct curl_sockaddr *addr)
{
	struct oci_source *s = data;

	if (purpose != CURLSOCKTYPE_IPCXN || !registry_address_public(&addr->addr)) {
		s->refused_private = true;
		return CURL_SOCKET_BAD;
	}
	return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

static int
curl_error(const struct oci_source *s, CURLcode c, const char *errbuf, const char *what,
           bool to_registry, char **ret_error)
{
	const char *detail = *errbuf ? errbuf : curl_easy_strerror(c);

	/* Refused before any connection was made, in words that do not depend on what the
	 * address is or whether anything listens there: this answer goes to whoever named the
	 * image, and a connection error would tell them which ports of the host's networks are
	 * open. (A connection that failed otherwise, to a public address the name also had,
	 * reads as it is.) */
	if (s->refused_private && c == CURLE_COULDNT_CONNECT && to_registry)
		return error_printf(ret_error, -EPERM,
		                    "registry %s is on a loopback, private or link-local "
		                    "address; sandboxd pulls from such a registry only when the "
		                    "operator names it (--insecure-registry or --local-registry)",
		                    s->ref.registry);
	if (s->refused_private && c == CURLE_COULDNT_CONNECT)
		return error_printf(ret_error, -EPERM,
		                    "registry %s: %s: it sends sandboxd to a loopback, private or "
		                    "link-local address, which only a registry the operator "
		                    "named may do (--insecure-registry or --local-registry)",
		                    s->ref.registry, what);

	switch (c) {
	case CURLE_OPERATION_TIMEDOUT:
		return error_printf(ret_error, -EIO, "registry %s: %s: timed out (%s)",
		                    s->ref.registry, what, detail);
	case CURLE_SSL_CONNECT_ERROR:
		if (!s->insecure)
			return error_printf(
			        ret_error, -EIO,
			        "registry %s: %s: TLS failed (%s); if it is a plain-HTTP "
			        "registry, allow it with --insecure-registry %s",
			        s->ref.registry, what, detail, s->ref.registry);
		break;
	default:
		break;
	}
	return error_printf(ret_error, -EIO, "registry %s: %s: %s", s->ref.registry, what, detail);
}

/* One GET, following redirects ourselves: libcurl 7.88 promises to keep a custom
 * Authorization header from another host only when it follows the redirect itself, and its
 * manual speaks of host names only; here the token goes only to the registry's own scheme,
 * host and port, and an HTTPS registry cannot send us to plain HTTP (a plain-HTTP registry
 * gains nothing from that rule: digests protect what it sends). On success *resp holds the
 * final status; a 200's body went into resp->sink. */
static int
http_get(struct oci_source *s, const char *url, const char *accept, bool auth,
         struct response *resp, const char *what, char **ret_error)
{
	_cleanup_free_ char *next = NULL;
	char errbuf[CURL_ERROR_SIZE];

	for (int hop = 0;; hop++) {
		_cleanup_free_ char *origin = NULL;
		struct curl_slist *headers = NULL;
		CURLcode c;
		int r;
		char *loc = NULL;
		long status = 0;

		if (!s->insecure && !http_allowed(s, url))
			return error_printf(
			        ret_error, -EPROTO,
			        "registry %s: %s: refusing plain HTTP to '%.200s' (not an "
			        "--insecure-registry)",
			        s->ref.registry, what, url);
		origin = url_origin(url);
		if (!origin)
			return error_printf(ret_error, -EPROTO, "registry %s: %s: bad URL '%.200s'",
			                    s->ref.registry, what, url);

		curl_easy_reset(s->curl);
		errbuf[0] = '\0';
		s->refused_private = false;
		/* a registry the operator did not name, and wherever it sends us (a redirect,
		 * the token realm), is reached only on public addresses: judged on the address
		 * each socket is opened to connect to, after the name was resolved */
		if (!s->trusted) {
			(void)curl_easy_setopt(s->curl, CURLOPT_OPENSOCKETFUNCTION,
			                       open_public_socket);
			(void)curl_easy_setopt(s->curl, CURLOPT_OPENSOCKETDATA, s);
		}
		/* never through a proxy from the environment: the address judged must be the
		 * one connected to, and a proxy would reach what it likes on our behalf */
		(void)curl_easy_setopt(s->curl, CURLOPT_PROXY, "");
		r = slist_add(&headers, "User-Agent: sandboxd/" SANDBOXD_VERSION);
		if (r >= 0 && accept)
			r = slist_add(&headers, accept);
		if (r >= 0 && auth && s->auth_header && streq(origin, s->origin))
			r = slist_add(&headers, s->auth_header);
		if (r < 0) {
			curl_slist_free_all(headers);
			return r;
		}
		resp->status = 0;
		resp->error_body_full = false;
		(void)curl_easy_setopt(s->curl, CURLOPT_URL, url);
		(void)curl_easy_setopt(s->curl, CURLOPT_PROTOCOLS_STR, "http,https");
		(void)curl_easy_setopt(s->curl, CURLOPT_FOLLOWLOCATION, 0L);
		(void)curl_easy_setopt(s->curl, CURLOPT_UNRESTRICTED_AUTH, 0L);
		(void)curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);
		(void)curl_easy_setopt(s->curl, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_SECS);
		/* under 1 KiB/s for stall_secs is a stall: a blob trickled slower than that
		 * would hold an install for days */
		(void)curl_easy_setopt(s->curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
		(void)curl_easy_setopt(s->curl, CURLOPT_LOW_SPEED_TIME, (long)s->stall_secs);
		(void)curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, headers);
		(void)curl_easy_setopt(s->curl, CURLOPT_HEADERFUNCTION, on_header);
		(void)curl_easy_setopt(s->curl, CURLOPT_HEADERDATA, resp);
		(void)curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, on_body);
		(void)curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, resp);
		(void)curl_easy_setopt(s->curl, CURLOPT_ERRORBUFFER, errbuf);
		if (s->ca_file)
			(void)curl_easy_setopt(s->curl, CURLOPT_CAINFO, s->ca_file);
		/* a small document trickled a byte at a time would pass the stall check for
		 * weeks; a blob may take long, but it is sized and streamed */
		if (!resp->sink || resp->sink->mem)
			(void)curl_easy_setopt(s->curl, CURLOPT_TIMEOUT, DOCUMENT_TIMEOUT_SECS);
		c = curl_easy_perform(s->curl);
		curl_slist_free_all(headers);
		if (c == CURLE_WRITE_ERROR && resp->sink && resp->sink->error)
			return resp->sink->error; /* the caller says what was too big */
		if (c == CURLE_WRITE_ERROR && resp->error_body_full)
			c = CURLE_OK;
		if (c != CURLE_OK)
			return curl_error(s, c, errbuf, what, streq(origin, s->origin), ret_error);
		(void)curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
		resp->status = status;
		if (status != 301 && status != 302 && status != 303 && status != 307 &&
		    status != 308)
			return 0;
		if (hop >= REDIRECTS_MAX)
			return error_printf(ret_error, -EPROTO,
			                    "registry %s: %s: more than %d redirects",
			                    s->ref.registry, what, REDIRECTS_MAX);
		if (curl_easy_getinfo(s->curl, CURLINFO_REDIRECT_URL, &loc) != CURLE_OK || !loc)
			return error_printf(ret_error, -EPROTO,
			                    "registry %s: %s: redirect (%ld) without a Location",
			                    s->ref.registry, what, status);
		free(next);
		next = strdup(loc);
		if (!next)
			return -ENOMEM;
		url = next;
		buf_reset(&resp->error_body);
	}
}

/* The reason a registry gave in its error body ({"errors":[{"code","message"}]}), for a
 * person: "manifest unknown" or "name unknown: repository name not known to registry". */
static char *
registry_reason(const struct response *resp)
{
	json_auto_t *j = NULL;
	const json_t *e;
	const char *code, *message;
	_cleanup_free_ char *c = NULL, *text = NULL;

	if (buf_avail(&resp->error_body))
		j = json_loadb(buf_head(&resp->error_body), buf_avail(&resp->error_body), 0, NULL);
	e = json_array_get(json_object_get(j, "errors"), 0);
	code = json_string_value(json_object_get(e, "code"));
	message = json_string_value(json_object_get(e, "message"));
	if (!code && !message) {
		/* token servers: {"details": "..."} or {"error": "..."} */
		message = json_string_value(json_object_get(j, "details"));
		if (!message)
			message = json_string_value(json_object_get(j, "error"));
	}
	if (code) {
		c = strdup(code);
		for (char *p = c; p && *p; p++)
			*p = *p == '_'                  ? ' '
			     : (*p >= 'A' && *p <= 'Z') ? (char)(*p - 'A' + 'a')
			                                : *p;
	}
	if (c && message && strcasecmp(c, message) != 0)
		text = strdup_printf("%s: %s", c, message);
	else if (c || message)
		text = strdup(c ? c : message);
	else
		text = strdup_printf("%ld%s%s", resp->status, *reason_of(resp) ? " " : "",
		                     reason_of(resp));
	if (!text)
		return NULL;
	if (strlen(text) > REASON_SHOWN)
		text[REASON_SHOWN] = '\0';
	return termsafe_dup(text);
}

static int
status_errno(long status)
{
	if (status == 404)
		return -ENOENT;
	if (status == 401 || status == 403)
		return -EACCES;
	if (status == 429 || status >= 500)
		return -EIO;
	return -EPROTO;
}

static int
status_error(const struct oci_source *s, const struct response *resp, const char *what,
             char **ret_error)
{
	_cleanup_free_ char *reason = registry_reason(resp);
	int r = status_errno(resp->status);

	if (!reason)
		return -ENOMEM;
	if (r == -EACCES)
		return error_printf(
		        ret_error, r,
		        "registry %s: %s: %s (%ld); the image is private or does not exist "
		        "(sandboxd pulls anonymously)",
		        s->ref.registry, what, reason, resp->status);
	return error_printf(ret_error, r, "registry %s: %s: %s (%ld)", s->ref.registry, what,
	                    reason, resp->status);
}

static bool
token_valid(const char *t)
{
	size_t n = strlen(t);

	if (n == 0 || n > TOKEN_MAX)
		return false;
	for (; *t; t++)
		if (*t <= 0x20 || *t >= 0x7f)
			return false;
	return true;
}

/* The anonymous half of the distribution spec's token flow: GET realm?service=&scope= with
 * no credentials, then "token" (or OAuth2's "access_token") from the JSON answer. */
static int
fetch_token(struct oci_source *s, const char *challenge, char **ret_error)
{
	_cleanup_(oci_challenge_done) struct oci_challenge ch = {};
	_cleanup_free_ char *err = NULL, *scope = NULL, *url = NULL;
	_cleanup_buf_ struct buf body = BUF_INIT(TOKEN_BODY_MAX);
	struct response resp = { .error_body = BUF_INIT(ERROR_BODY_MAX) };
	struct sink k;
	json_auto_t *j = NULL;
	const char *tok;
	char *esc_service = NULL, *esc_scope = NULL;
	int r;

	if (!challenge)
		return error_printf(ret_error, -EACCES,
		                    "registry %s: refused without saying how to authenticate (401 "
		                    "without WWW-Authenticate)",
		                    s->ref.registry);
	r = oci_challenge_parse(challenge, &ch, &err);
	if (r == -EOPNOTSUPP)
		return error_printf(
		        ret_error, -EACCES,
		        "registry %s asks for a username and password (%.*s authentication); "
		        "sandboxd pulls anonymously, so only public images can be used",
		        s->ref.registry, (int)MIN(strcspn(challenge, " \t"), 20u), challenge);
	if (r < 0)
		return error_printf(ret_error, r == -ENOMEM ? r : -EPROTO, "registry %s: %s",
		                    s->ref.registry, err ? err : "bad WWW-Authenticate challenge");

	scope = strdup_printf("repository:%s:pull", s->ref.repository);
	if (!scope)
		return -ENOMEM;
	esc_scope = curl_easy_escape(s->curl, scope, 0);
	esc_service = ch.service ? curl_easy_escape(s->curl, ch.service, 0) : NULL;
	if (!esc_scope || (ch.service && !esc_service)) {
		curl_free(esc_scope);
		curl_free(esc_service);
		return -ENOMEM;
	}
	url = strdup_printf("%s%s%s%s%sscope=%s", ch.realm, strchr(ch.realm, '?') ? "&" : "?",
	                    esc_service ? "service=" : "", esc_service ? esc_service : "",
	                    esc_service ? "&" : "", esc_scope);
	curl_free(esc_scope);
	curl_free(esc_service);
	if (!url)
		return -ENOMEM;

	r = sink_init(&k, TOKEN_BODY_MAX, &body, -1);
	if (r < 0) {
		sink_done(&k);
		return r;
	}
	resp.sink = &k;
	/* the realm is the registry's word: http_get holds it to the same addresses as the
	 * registry itself */
	r = http_get(s, url, NULL, false, &resp, "token request", ret_error);
	sink_done(&k);
	if (r == -EFBIG)
		r = error_printf(ret_error, -EPROTO,
		                 "registry %s: token request: answer larger than %u bytes",
		                 s->ref.registry, TOKEN_BODY_MAX);
	if (r >= 0 && resp.status != 200) {
		_cleanup_free_ char *reason = registry_reason(&resp);
		bool generic = reason && reason[0] >= '0' && reason[0] <= '9';
		r = error_printf(
		        ret_error, resp.status == 401 || resp.status == 403 ? -EACCES : -EPROTO,
		        "registry %s: token request: %ld %s%s%s", s->ref.registry, resp.status,
		        *reason_of(&resp) ? reason_of(&resp) : "(no reason given)",
		        reason && !generic ? ": " : "", reason && !generic ? reason : "");
	}
	response_done(&resp);
	if (r < 0)
		return r;

	j = json_loadb(buf_head(&body) ? buf_head(&body) : "", buf_avail(&body), 0, NULL);
	tok = json_string_value(json_object_get(j, "token"));
	if (isempty(tok))
		tok = json_string_value(json_object_get(j, "access_token"));
	if (isempty(tok) || !token_valid(tok))
		return error_printf(ret_error, -EPROTO,
		                    "registry %s: token request: the answer has no usable token",
		                    s->ref.registry);
	free(s->auth_header);
	s->auth_header = strdup_printf("Authorization: Bearer %s", tok);
	return s->auth_header ? 0 : -ENOMEM;
}

/* GET base/path with the token flow: a 401 fetches a token (again, if one expired) and
 * retries once. Non-200 answers become errors with the registry's reason. */
static int
registry_get(struct oci_source *s, const char *path, const char *accept, struct sink *k,
             struct response *resp, const char *what, char **ret_error)
{
	_cleanup_free_ char *url = strdup_printf("%s/%s", s->base, path);
	int r;

	if (!url)
		return -ENOMEM;
	resp->sink = k;
	for (int attempt = 0;; attempt++) {
		r = http_get(s, url, accept, true, resp, what, ret_error);
		if (r < 0)
			return r;
		if (resp->status == 200)
			return 0;
		if (resp->status != 401 || attempt > 0)
			return status_error(s, resp, what, ret_error);
		r = fetch_token(s, resp->www_authenticate, ret_error);
		if (r < 0)
			return r;
		buf_reset(&resp->error_body);
	}
}

/* ---- sources ---- */

static int
source_new(struct oci_source **ret)
{
	struct oci_source *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	*ret = s;
	return 0;
}

void
oci_source_free(struct oci_source *s)
{
	if (!s)
		return;
	oci_ref_done(&s->ref);
	free(s->origin);
	free(s->base);
	strv_free(s->insecure_list);
	free(s->ca_file);
	free(s->auth_header);
	if (s->curl)
		curl_easy_cleanup(s->curl);
	free(s->where);
	free(s->dir);
	free(s->tag);
	free(s);
}

static void
oci_source_freep(struct oci_source **s)
{
	oci_source_free(*s);
}

static char *
strdup_or_null(const char *s, bool *oom)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	if (!d)
		*oom = true;
	return d;
}

int
oci_source_registry(const struct oci_ref *ref, const struct registry_opts *o,
                    struct oci_source **ret, char **ret_error)
{
	static bool curl_ready;
	_cleanup_(oci_source_freep) struct oci_source *s = NULL;
	bool oom = false;
	int r;

	if (!ref || isempty(ref->registry) || isempty(ref->repository) ||
	    (!ref->tag && !ref->digest))
		return error_printf(ret_error, -EINVAL, "image reference is incomplete");
	if (!curl_ready) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			return error_printf(ret_error, -EIO, "libcurl could not be initialised");
		curl_ready = true;
	}
	r = source_new(&s);
	if (r < 0)
		return r;
	s->ref.registry = strdup_or_null(ref->registry, &oom);
	s->ref.repository = strdup_or_null(ref->repository, &oom);
	s->ref.tag = strdup_or_null(ref->tag, &oom);
	s->ref.digest = strdup_or_null(ref->digest, &oom);
	s->ca_file = strdup_or_null(o ? o->ca_file : NULL, &oom);
	if (o && o->n_insecure > 0) {
		r = strv_copy(o->insecure, o->n_insecure, &s->insecure_list);
		if (r < 0)
			return r;
		s->n_insecure = o->n_insecure;
	}
	if (oom)
		return -ENOMEM;
	s->stall_secs = o && o->stall_secs ? o->stall_secs : STALL_DEFAULT_SECS;
	s->insecure = host_insecure(s, ref->registry);
	s->trusted = s->insecure || (o && registry_listed(o->local, o->n_local, ref->registry));
	s->base = strdup_printf("%s://%s/v2/%s", s->insecure ? "http" : "https", ref->registry,
	                        ref->repository);
	if (!s->base)
		return -ENOMEM;
	s->origin = url_origin(s->base);
	if (!s->origin)
		return error_printf(ret_error, -EINVAL, "registry '%s' does not make a valid URL",
		                    ref->registry);
	s->where = strdup_printf("registry %s", ref->registry);
	s->curl = curl_easy_init();
	if (!s->curl || !s->where)
		return -ENOMEM;
	*ret = TAKE_PTR(s);
	return 0;
}

static int
read_layout_file(const struct oci_source *s, const char *name, size_t max, char **ret,
                 size_t *ret_len, char **ret_error)
{
	_cleanup_free_ char *path = strdup_printf("%s/%s", s->dir, name);
	int r;

	if (!path)
		return -ENOMEM;
	r = read_file_max(path, max, ret, ret_len);
	if (r == -ENOENT)
		return error_printf(ret_error, -ENOENT, "image layout '%s': no %s", s->dir, name);
	if (r < 0)
		return error_printf(ret_error, r == -EFBIG || r == -ENOBUFS ? -EPROTO : r,
		                    "image layout '%s': cannot read %s: %s", s->dir, name,
		                    strerror(-r));
	return 0;
}

int
oci_source_layout(const char *dir, const char *tag, struct oci_source **ret, char **ret_error)
{
	_cleanup_(oci_source_freep) struct oci_source *s = NULL;
	_cleanup_free_ char *text = NULL;
	json_auto_t *j = NULL;
	const char *version;
	size_t len;
	int r;

	if (isempty(dir))
		return error_printf(ret_error, -EINVAL, "image layout: no directory");
	r = source_new(&s);
	if (r < 0)
		return r;
	s->is_layout = true;
	s->dir = strdup(dir);
	s->tag = tag ? strdup(tag) : NULL;
	/* messages name the layout where a registry's would name the registry */
	s->ref.registry = strdup(dir);
	s->where = strdup_printf("image layout '%s'", dir);
	if (!s->dir || (tag && !s->tag) || !s->ref.registry || !s->where)
		return -ENOMEM;
	r = read_layout_file(s, "oci-layout", 4096, &text, &len, ret_error);
	if (r < 0)
		return r;
	j = json_loadb(text, len, 0, NULL);
	version = json_string_value(json_object_get(j, "imageLayoutVersion"));
	if (!version || !str_has_prefix(version, "1."))
		return error_printf(ret_error, -EPROTO,
		                    "image layout '%s': oci-layout has no imageLayoutVersion 1.x",
		                    dir);
	*ret = TAKE_PTR(s);
	return 0;
}

/* Path of a blob in a layout; digest already checked (it becomes a file name). */
static char *
layout_blob_path(const struct oci_source *s, const char *digest)
{
	return strdup_printf("%s/blobs/sha256/%s", s->dir, digest + 7);
}

/* Copies a layout's blob into the sink. */
static int
layout_copy(const struct oci_source *s, const struct oci_descriptor *d, struct sink *k,
            char **ret_error)
{
	_cleanup_free_ char *path = layout_blob_path(s, d->digest);
	_cleanup_close_ int fd = -1;
	char chunk[64 << 10];
	char sd[24];

	if (!path)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_printf(ret_error, errno == ENOENT ? -ENOENT : negative_errno(),
		                    "image layout '%s': blob %s: %m", s->dir,
		                    short_digest(d->digest, sd));
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return error_printf(ret_error, negative_errno(),
			                    "image layout '%s': blob %s: %m", s->dir,
			                    short_digest(d->digest, sd));
		if (n == 0)
			return 0;
		if (sink_put(k, chunk, (size_t)n) < 0)
			return k->error;
	}
}

/* After a sink took a whole blob: its size and digest against d. */
static int
verify(const struct oci_source *s, const struct oci_descriptor *d, struct sink *k, const char *what,
       char **ret_error)
{
	char got[72], sd[24];

	if (k->got != d->size)
		return error_printf(ret_error, -EPROTO,
		                    "%s: %s %s: %" PRIu64
		                    " bytes arrived, its descriptor says %" PRIu64,
		                    s->where, what, short_digest(d->digest, sd), k->got, d->size);
	if (sink_digest(k, got) < 0)
		return -EIO;
	if (!streq(got, d->digest))
		return error_printf(ret_error, -EPROTO,
		                    "%s: %s %s: the bytes have digest %s (corrupted)", s->where,
		                    what, short_digest(d->digest, sd), got);
	return 0;
}

/* Fetches the document (a manifest or config) d names into *ret, verified, bounded. */
static int
fetch_small(struct oci_source *s, const struct oci_descriptor *d, bool manifest, struct buf *ret,
            char **ret_content_type, char **ret_error)
{
	struct response resp = { .error_body = BUF_INIT(ERROR_BODY_MAX) };
	const char *what = manifest ? "manifest" : "image config";
	struct sink k;
	char sd[24];
	int r;

	if (!oci_digest_valid(d->digest))
		return error_printf(ret_error, -EPROTO, "%s: %s: bad digest", s->where, what);
	if (d->size > OCI_MANIFEST_MAX)
		return error_printf(ret_error, -EPROTO, "%s: %s %s is larger than %u bytes",
		                    s->where, what, short_digest(d->digest, sd), OCI_MANIFEST_MAX);
	r = sink_init(&k, d->size, ret, -1);
	if (r >= 0 && s->is_layout) {
		r = layout_copy(s, d, &k, ret_error);
	} else if (r >= 0) {
		_cleanup_free_ char *path =
		        strdup_printf("%s/%s", manifest ? "manifests" : "blobs", d->digest);
		r = path ? registry_get(s, path, manifest ? ACCEPT_MANIFESTS : NULL, &k, &resp,
		                        what, ret_error)
		         : -ENOMEM;
	}
	if (r == -EFBIG)
		r = error_printf(ret_error, -EPROTO,
		                 "%s: %s %s is larger than the %" PRIu64
		                 " bytes its descriptor says",
		                 s->where, what, short_digest(d->digest, sd), d->size);
	if (r >= 0)
		r = verify(s, d, &k, what, ret_error);
	if (r >= 0 && ret_content_type) {
		*ret_content_type = TAKE_PTR(resp.content_type);
	}
	sink_done(&k);
	response_done(&resp);
	return r;
}

/* The first document of a registry reference, by tag or digest; its digest is computed
 * from the exact bytes. */
static int
fetch_by_reference(struct oci_source *s, struct buf *ret, char **ret_content_type,
                   char ret_digest[static 72], char **ret_error)
{
	struct response resp = { .error_body = BUF_INIT(ERROR_BODY_MAX) };
	const char *ref = s->ref.digest ? s->ref.digest : s->ref.tag;
	_cleanup_free_ char *path = strdup_printf("manifests/%s", ref);
	_cleanup_free_ char *what = strdup_printf("manifest '%s%s%s'", s->ref.repository,
	                                          s->ref.digest ? "@" : ":", ref);
	struct sink k;
	int r;

	if (!path || !what)
		return -ENOMEM;
	r = sink_init(&k, OCI_MANIFEST_MAX, ret, -1);
	if (r >= 0)
		r = registry_get(s, path, ACCEPT_MANIFESTS, &k, &resp, what, ret_error);
	if (r == -EFBIG)
		r = error_printf(ret_error, -EPROTO, "registry %s: %s is larger than %u bytes",
		                 s->ref.registry, what, OCI_MANIFEST_MAX);
	if (r >= 0)
		r = sink_digest(&k, ret_digest);
	if (r >= 0 && s->ref.digest && !streq(ret_digest, s->ref.digest))
		r = error_printf(
		        ret_error, -EPROTO,
		        "registry %s: %s: the manifest sent has digest %s, not the one pinned",
		        s->ref.registry, what, ret_digest);
	if (r >= 0)
		*ret_content_type = TAKE_PTR(resp.content_type);
	sink_done(&k);
	response_done(&resp);
	return r;
}

/* index.json of a layout: the descriptor whose ref.name is the tag (or the only one). */
static int
layout_pick(struct oci_source *s, struct oci_descriptor *ret, char **ret_error)
{
	_cleanup_free_ char *text = NULL;
	json_auto_t *j = NULL;
	const json_t *manifests, *e, *found = NULL, *size;
	const char *mt, *digest;
	size_t len, i;
	int r;

	r = read_layout_file(s, "index.json", OCI_MANIFEST_MAX, &text, &len, ret_error);
	if (r < 0)
		return r;
	j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	manifests = json_object_get(j, "manifests");
	if (!json_is_array(manifests))
		return error_printf(ret_error, -EPROTO,
		                    "image layout '%s': index.json has no manifests", s->dir);
	if (!s->tag) {
		if (json_array_size(manifests) != 1)
			return error_printf(ret_error, -EINVAL,
			                    "image layout '%s' holds %zu images; name one by tag",
			                    s->dir, json_array_size(manifests));
		found = json_array_get(manifests, 0);
	}
	json_array_foreach (manifests, i, e) {
		const char *name = json_string_value(json_object_get(
		        json_object_get(e, "annotations"), "org.opencontainers.image.ref.name"));
		if (s->tag && name && streq(name, s->tag)) {
			if (found)
				return error_printf(ret_error, -EPROTO,
				                    "image layout '%s': tag '%s' names two images",
				                    s->dir, s->tag);
			found = e;
		}
	}
	if (!found)
		return error_printf(ret_error, -ENOENT,
		                    "image layout '%s' has no image tagged '%s'", s->dir, s->tag);
	mt = json_string_value(json_object_get(found, "mediaType"));
	digest = json_string_value(json_object_get(found, "digest"));
	size = json_object_get(found, "size");
	if (isempty(mt) || !oci_digest_valid(digest) || !json_is_integer(size) ||
	    json_integer_value(size) < 0)
		return error_printf(
		        ret_error, -EPROTO,
		        "image layout '%s': index.json: the image's descriptor is not valid",
		        s->dir);
	ret->media_type = strdup(mt);
	ret->digest = strdup(digest);
	ret->size = (uint64_t)json_integer_value(size);
	if (!ret->media_type || !ret->digest) {
		oci_descriptor_done(ret);
		return -ENOMEM;
	}
	return 0;
}

void
oci_image_done(struct oci_image *img)
{
	if (!img)
		return;
	free(img->digest);
	oci_manifest_done(&img->manifest);
	strv_free(img->env);
	*img = (struct oci_image){};
}

int
oci_source_resolve(struct oci_source *s, struct oci_image *ret, char **ret_error)
{
	_cleanup_buf_ struct buf doc = BUF_INIT(OCI_MANIFEST_MAX);
	_cleanup_buf_ struct buf config = BUF_INIT(OCI_MANIFEST_MAX);
	_cleanup_free_ char *content_type = NULL, *err = NULL, *digest = NULL;
	_cleanup_(oci_manifest_done) struct oci_manifest m = {};
	_cleanup_(oci_descriptor_done) struct oci_descriptor d = {};
	char **env = NULL;
	char first[72];
	enum oci_kind kind;
	int r;

	if (s->is_layout) {
		r = layout_pick(s, &d, ret_error);
		if (r >= 0)
			r = fetch_small(s, &d, true, &doc, NULL, ret_error);
		if (r < 0)
			return r;
		memcpy(first, d.digest, strlen(d.digest) + 1);
		content_type = strdup(d.media_type);
		if (!content_type)
			return -ENOMEM;
	} else {
		r = fetch_by_reference(s, &doc, &content_type, first, ret_error);
		if (r < 0)
			return r;
	}

	r = oci_document_kind(buf_head(&doc), buf_avail(&doc), content_type, &kind, &err);
	if (r < 0)
		return error_printf(ret_error, r == -ENOMEM ? r : -EPROTO, "%s: %s", s->where, err);
	if (kind == OCI_KIND_INDEX) {
		oci_descriptor_done(&d);
		r = oci_index_pick(buf_head(&doc), buf_avail(&doc), &d, &err);
		if (r < 0)
			return error_printf(ret_error, r == -ENOENT || r == -ENOMEM ? r : -EPROTO,
			                    "%s: %s", s->where, err);
		buf_reset(&doc);
		/* the picked manifest must hash to what the index says (fetch_small checks) */
		r = fetch_small(s, &d, true, &doc, NULL, ret_error);
		if (r < 0)
			return r;
		digest = strdup(d.digest);
		free(err);
		err = NULL;
		r = oci_document_kind(buf_head(&doc), buf_avail(&doc), d.media_type, &kind, &err);
		if (r >= 0 && kind != OCI_KIND_MANIFEST)
			r = error_printf(&err, -EINVAL,
			                 "an index's linux/amd64 entry is another index");
		if (r < 0)
			return error_printf(ret_error, r == -ENOMEM ? r : -EPROTO, "%s: %s",
			                    s->where, err);
	} else {
		digest = strdup(first);
	}
	if (!digest)
		return -ENOMEM;

	r = oci_manifest_parse(buf_head(&doc), buf_avail(&doc), &m, &err);
	if (r < 0)
		return error_printf(ret_error, r == -ENOMEM ? r : -EPROTO, "%s: %s", s->where, err);
	r = fetch_small(s, &m.config, false, &config, NULL, ret_error);
	if (r < 0)
		return r;
	r = oci_config_parse(buf_head(&config), buf_avail(&config), &env, &err);
	if (r < 0)
		return error_printf(ret_error, r == -ENOMEM ? r : -EPROTO, "%s: %s", s->where, err);
	*ret = (struct oci_image){ .digest = TAKE_PTR(digest), .manifest = m, .env = env };
	m = (struct oci_manifest){};
	return 0;
}

static int
fsync_parent(const char *path)
{
	_cleanup_free_ char *copy = strdup(path);
	_cleanup_close_ int fd = -1;

	if (!copy)
		return -ENOMEM;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		return negative_errno();
	return 0;
}

int
oci_source_fetch_blob(struct oci_source *s, const struct oci_descriptor *d, const char *dest,
                      oci_progress_fn progress, void *data, char **ret_error)
{
	struct response resp = { .error_body = BUF_INIT(ERROR_BODY_MAX) };
	_cleanup_free_ char *partial = NULL, *path = NULL, *what = NULL;
	_cleanup_close_ int fd = -1;
	struct sink k = {};
	char sd[24];
	int r;

	if (!d || !oci_digest_valid(d->digest))
		return error_printf(ret_error, -EINVAL, "blob: bad digest");
	partial = strdup_printf("%s.partial-%d", dest, (int)getpid());
	path = strdup_printf("blobs/%s", d->digest);
	what = strdup_printf("blob %s", short_digest(d->digest, sd));
	if (!partial || !path || !what)
		return -ENOMEM;
	fd = open(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return error_printf(ret_error, negative_errno(), "cannot create '%s': %m", partial);

	r = sink_init(&k, d->size, NULL, fd);
	k.d = d;
	k.progress = progress;
	k.progress_data = data;
	if (r >= 0 && s->is_layout)
		r = layout_copy(s, d, &k, ret_error);
	else if (r >= 0)
		r = registry_get(s, path, NULL, &k, &resp, what, ret_error);
	if (r == -EFBIG)
		r = error_printf(ret_error, -EPROTO,
		                 "%s: %s is larger than the %" PRIu64 " bytes its descriptor says",
		                 s->where, what, d->size);
	else if (r < 0 && k.error == r)
		r = error_printf(ret_error, r, "cannot write '%s': %s", partial, strerror(-r));
	if (r >= 0)
		r = verify(s, d, &k, "blob", ret_error);
	if (r >= 0 && fsync(fd) < 0)
		r = error_printf(ret_error, negative_errno(), "cannot write '%s': %m", partial);
	if (r >= 0) {
		fd = safe_close(fd);
		if (rename(partial, dest) < 0)
			r = error_printf(ret_error, negative_errno(),
			                 "cannot rename '%s' to '%s': %m", partial, dest);
		else
			(void)fsync_parent(dest);
	}
	if (r >= 0 && progress)
		progress(d, k.got, data);
	if (r < 0)
		(void)unlink(partial);
	sink_done(&k);
	response_done(&resp);
	return r;
}
