/* The public SHA-256 calls (harvest/...h), on harvest's own SHA-256 (sha256.h), as hex. */
#include "internal.h"
#include "sha256.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

hv_status hv_sha256_hex(const void *data, size_t len, char hex[65])
{
	hv__sha256_hex(data, len, hex);
	return HV_OK;
}

hv_status hv_sha256_fd(int fd, uint64_t max, const char *path, char hex[65])
{
	enum { CHUNK = 1 << 16 };
	unsigned char *buf = malloc(CHUNK);
	if (!buf)
		return hv_error_set(HV_ENOMEM, "out of memory");
	hv__sha256 s;
	hv__sha256_init(&s);
	hv_status rc = HV_OK;
	uint64_t total = 0;
	for (;;) {
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
		hv__sha256_update(&s, buf, (size_t)n);
	}
	if (rc == HV_OK) {
		unsigned char md[32];
		hv__sha256_final(&s, md);
		hv__sha256_to_hex(md, hex);
	}
	free(buf);
	return rc;
}
