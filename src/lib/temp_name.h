/* The temporary name of a file harvest writes before putting it in place (put's fallback when
 * O_TMPFILE cannot be named, history get -o, archive -o): one spelling, so a user, a test or
 * a cleanup script that looks for what a killed harvest left behind looks for one pattern. */
#ifndef HARVEST_TEMP_NAME_H
#define HARVEST_TEMP_NAME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ".hv." and 6 random characters: 10 bytes, so it fits beside any destination name of
 * NAME_MAX bytes (a "FILE.tmp.XXXXXX" would not). */
#define HV_TEMP_PREFIX ".hv."
#define HV_TEMP_PREFIX_LEN (sizeof(HV_TEMP_PREFIX) - 1)
#define HV_TEMP_RANDOM_LEN 6
#define HV_TEMP_NAME_LEN (HV_TEMP_PREFIX_LEN + HV_TEMP_RANDOM_LEN)

/* A fresh temporary name into out (NUL-terminated). Not secret, only unlikely to be taken:
 * the caller creates it with O_EXCL and draws again (attempt + 1) on EEXIST, so a collision
 * costs a retry, never a file. */
static inline void hv_temp_name(char out[HV_TEMP_NAME_LEN + 1], unsigned attempt)
{
	static const char chars[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
	_Static_assert(sizeof(chars) - 1 == 64, "6 random bits per character");
	unsigned char r[HV_TEMP_RANDOM_LEN];
	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		/* No entropy yet (early boot): time, address and attempt bits. */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
			     (uint64_t)(uintptr_t)out ^ ((uint64_t)getpid() << 40) ^
			     ((uint64_t)attempt << 30);
		for (size_t i = 0; i < sizeof(r); i++, x >>= 6)
			r[i] = (unsigned char)x;
	}
	memcpy(out, HV_TEMP_PREFIX, HV_TEMP_PREFIX_LEN);
	for (size_t i = 0; i < sizeof(r); i++)
		out[HV_TEMP_PREFIX_LEN + i] = chars[r[i] & 63];
	out[HV_TEMP_NAME_LEN] = '\0';
}

#endif
