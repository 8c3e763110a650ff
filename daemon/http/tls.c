/* tls.c: see tls.h. */
#include <errno.h>
#include <openssl/err.h>
#include "log.h"
#include "tls.h"
#include "util.h"

static const char *
ssl_error(void)
{
	static char msg[256];
	unsigned long e = ERR_get_error();

	if (!e)
		return "unknown error";
	ERR_error_string_n(e, msg, sizeof(msg));
	ERR_clear_error();
	return msg;
}

int
tls_server_ctx(const char *cert, const char *key, const char *client_ca, SSL_CTX **ret)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

	if (!ctx)
		return -ENOMEM;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
	                                 SSL_OP_NO_COMPRESSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
	                              SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		log_error("--tls-cert '%s': cannot load the certificate: %s", cert, ssl_error());
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		log_error("--tls-key '%s': cannot load the key: %s", key, ssl_error());
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		log_error("--tls-key '%s' does not match --tls-cert '%s'", key, cert);
		goto fail;
	}
	if (client_ca) {
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca);
		if (SSL_CTX_load_verify_locations(ctx, client_ca, NULL) != 1 || !names) {
			log_error("--client-ca '%s': cannot load the CA: %s", client_ca,
			          ssl_error());
			if (names)
				sk_X509_NAME_pop_free(names, X509_NAME_free);
			goto fail;
		}
		SSL_CTX_set_client_CA_list(ctx, names);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	}
	*ret = ctx;
	return 0;
fail:
	SSL_CTX_free(ctx);
	return -EINVAL;
}
