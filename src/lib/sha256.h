/* SHA-256 (FIPS 180-4), harvest's own: the digest of every content it collects, records and
 * serves. Portable C, and on x86-64 the CPU's SHA extensions when it has them (chosen once, at
 * the first block). Being built in, no library is loaded for it: a run that produced ten files
 * used to spend more time opening libcrypto and reading its configuration than hashing. */
#ifndef HARVEST_SHA256_H
#define HARVEST_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hv__sha256 {
	uint32_t h[8];
	uint64_t total;          /* bytes hashed so far */
	unsigned char block[64]; /* a partial block */
	size_t used;             /* bytes of it */
	bool portable;           /* the C rounds even where the CPU has its own */
} hv__sha256;

void hv__sha256_init(hv__sha256 *s);
void hv__sha256_update(hv__sha256 *s, const void *data, size_t n);
/* The digest; s must be initialised again before it is used once more. */
void hv__sha256_final(hv__sha256 *s, unsigned char md[32]);

/* The digest of p[0..n) as 64 lower-case hex digits. */
void hv__sha256_hex(const void *p, size_t n, char hex[65]);
/* md as 64 lower-case hex digits. */
void hv__sha256_to_hex(const unsigned char md[32], char hex[65]);

/* For tests: whether the CPU's SHA extensions are used, and a context that never uses them
 * (set after hv__sha256_init), so both are checked on a machine that has them. */
bool hv__sha256_accelerated(void);
void hv__sha256_init_portable(hv__sha256 *s);

#endif
