/* libcrypto (OpenSSL) through dlopen on the first SHA-256 (dl.h). Mapping it and applying its
 * ~21,000 relocations cost every harvest process about 2 ms at start, the largest part of a
 * `harvest --version`, while only what hashes contents needs it (collect, run, the history,
 * archives): a `harvest mime` or `walk` never does. Included by the files that hash (digest.c,
 * collect_pipe.c, store_history.c) only: after this header their EVP_* calls go through the
 * table, so they read as OpenSSL's own. */
#ifndef HARVEST_DL_CRYPTO_H
#define HARVEST_DL_CRYPTO_H

#include "harvest/types.h"

#include <openssl/evp.h>
#include <openssl/opensslv.h>
#include <stddef.h>

/* The soname of the libcrypto whose headers harvest is built with. */
#define HV_CRYPTO_STR_(x) #x
#define HV_CRYPTO_STR(x) HV_CRYPTO_STR_(x)
#if defined(OPENSSL_VERSION_MAJOR) && OPENSSL_VERSION_MAJOR >= 3
#define HV_CRYPTO_SONAME "libcrypto.so." HV_CRYPTO_STR(OPENSSL_VERSION_MAJOR)
#else
#define HV_CRYPTO_SONAME "libcrypto.so.1.1"
#endif

/* Every libcrypto function harvest calls. */
#define HV_CRYPTO_FUNCS(X)                                                                     \
	X(EVP_Digest)                                                                          \
	X(EVP_DigestFinal_ex)                                                                  \
	X(EVP_DigestInit_ex)                                                                   \
	X(EVP_DigestUpdate)                                                                    \
	X(EVP_MD_CTX_free)                                                                     \
	X(EVP_MD_CTX_new)                                                                      \
	X(EVP_sha256)

/* Each member has the type of a pointer to the function OpenSSL's headers declare. */
/* NOLINTNEXTLINE(bugprone-macro-parentheses): f is a declarator here, not an expression */
#define HV_CRYPTO_MEMBER(f) __typeof__(f) *f;
struct hv__crypto_api {
	HV_CRYPTO_FUNCS(HV_CRYPTO_MEMBER)
};
#undef HV_CRYPTO_MEMBER

/* Filled by hv__crypto_need; read only after it succeeded. */
extern struct hv__crypto_api hv__crypto;

/* Loads libcrypto once per process (thread-safe; a failure is retried on the next call):
 * HV_OK, or HV_EIO with the error "cannot load libcrypto.so.3: <reason>" set. */
hv_status hv__crypto_need(void);

#ifndef HV_DL_CRYPTO_IMPL
#define EVP_Digest (hv__crypto.EVP_Digest)
#define EVP_DigestFinal_ex (hv__crypto.EVP_DigestFinal_ex)
#define EVP_DigestInit_ex (hv__crypto.EVP_DigestInit_ex)
#define EVP_DigestUpdate (hv__crypto.EVP_DigestUpdate)
#define EVP_MD_CTX_free (hv__crypto.EVP_MD_CTX_free)
#define EVP_MD_CTX_new (hv__crypto.EVP_MD_CTX_new)
#define EVP_sha256 (hv__crypto.EVP_sha256)
#endif

#endif
