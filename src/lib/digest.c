/* SHA-256 through OpenSSL's libcrypto (loaded on first use: dl_crypto.h), as hex. */
#include "dl_crypto.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void to_hex(const unsigned char *md, unsigned len, char hex[65])
{
	static const char digits[] = "0123456789abcdef";
	for (unsigned i = 0; i < len && i < 32; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[64] = '\0';
}

hv_status hv_sha256_hex(const void *data, size_t len, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	hv_status rc = hv__crypto_need();
	if (rc != HV_OK)
		return rc;
	if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL))
		return hv_error_set(HV_EIO, "SHA-256 failed");
	to_hex(md, mdlen, hex);
	return HV_OK;
}

hv_status hv_sha256_fd(int fd, uint64_t max, const char *path, char hex[65])
{
	hv_status rc = hv__crypto_need();
	if (rc != HV_OK)
		return rc;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(ctx);
		return hv_error_set(HV_ENOMEM, "SHA-256: out of memory");
	}
	enum { CHUNK = 1 << 16 };
	unsigned char *buf = malloc(CHUNK);
	rc = buf ? HV_OK : hv_error_set(HV_ENOMEM, "out of memory");
	uint64_t total = 0;
	while (rc == HV_OK) {
		ssize_t n = read(fd, buf, CHUNK);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = hv_error_errno(HV_EIO, path, errno);
			break;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		if (total > max) {
			rc = HV_WARN;
			break;
		}
		EVP_DigestUpdate(ctx, buf, (size_t)n);
	}
	if (rc == HV_OK) {
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned mdlen = 0;
		EVP_DigestFinal_ex(ctx, md, &mdlen);
		to_hex(md, mdlen, hex);
	}
	free(buf);
	EVP_MD_CTX_free(ctx);
	return rc;
}
