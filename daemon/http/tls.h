/* tls.h: the server's OpenSSL context: TLS 1.2 or newer, a certificate and key, and (with
 * --client-ca) mutual TLS that fails the handshake for a client without a certificate that
 * CA signed. */
#pragma once

#include <openssl/ssl.h>

/* Logs what failed (naming the file) and returns -EINVAL. */
int tls_server_ctx(const char *cert, const char *key, const char *client_ca, SSL_CTX **ret);
