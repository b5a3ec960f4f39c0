/* Fuzz target: the parsers of user-typed values (include/harvest/parse.h): sizes ("32MiB",
 * --max-file-bytes and friends) and times ("7d", RFC 3339, --since).
 *
 * Input: the text is the input up to its first NUL byte (a C string, as argv gives it). When a
 * NUL is there, the 8 bytes after it (zero-padded) are also an int64 of nanoseconds for
 * hv_format_time().
 *
 * Checked against references written here from the documentation in parse.h and RFC 3339 (not
 * from parse.c):
 *   - hv_parse_size accepts exactly "<digits><unit>" with a known unit (case-insensitive) whose
 *     value fits 64 bits, and then gives digits * 2^unit; anything else is HV_EUSAGE with a
 *     message;
 *   - hv_parse_time accepts exactly the documented forms, and then gives the reference instant
 *     (an RFC 3339 time beyond the int64 ns range saturates to INT64_MIN or INT64_MAX, an age
 *     too large to hold in int64 ns is refused); an accepted time formatted back
 *     with hv_format_time is RFC 3339 UTC with 9 fraction digits and parses to the same ns;
 *   - hv_format_time on any int64 gives such a text (and never overruns a short buffer);
 *   - hv_parse_uint accepts exactly one or more decimal digits up to its max, hv_parse_int the
 *     same after an optional '-';
 *   - hv_parse_duration_ms accepts exactly digits with an optional point and exponent, and gives
 *     the milliseconds rounded up (refusing more than 1e12 ms). */
#include "harvest/parse.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "fuzz_parse: check failed: %s (%s:%d)\n", #cond,   \
				__FILE__, __LINE__);                                      \
			fprintf(stderr, "  " __VA_ARGS__);                                \
			fprintf(stderr, "\n");                                            \
			abort();                                                          \
		}                                                                         \
	} while (0)

/* A fixed "now", so a failure reproduces: 2026-11-30T03:29:07.123456789Z. */
#define NOW_NS INT64_C(1795922947123456789)

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static char lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* ---- sizes ---------------------------------------------------------------------------- */

/* The reference: true and *out for a valid size, false otherwise. */
static bool ref_size(const char *t, uint64_t *out)
{
	size_t i = 0;
	uint64_t v = 0;
	bool overflow = false;
	while (is_digit(t[i])) {
		unsigned d = (unsigned)(t[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			overflow = true;
		else
			v = v * 10 + d;
		i++;
	}
	if (i == 0 || overflow)
		return false;
	char unit[8];
	size_t ul = strlen(t + i);
	if (ul > 3)
		return false;
	for (size_t k = 0; k <= ul; k++)
		unit[k] = lower(t[i + k]);
	static const char *const names[] = {"", "b", "k", "kb", "kib", "m", "mb", "mib",
					    "g", "gb", "gib", "t", "tb", "tib"};
	static const unsigned shifts[] = {0, 0, 10, 10, 10, 20, 20, 20, 30, 30, 30, 40, 40, 40};
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		if (strcmp(unit, names[k]) != 0)
			continue;
		unsigned sh = shifts[k];
		if (sh && v > UINT64_MAX >> sh)
			return false;
		*out = v << sh;
		return true;
	}
	return false;
}

static void check_size(const char *text)
{
	uint64_t got = 0xdeadbeef, want = 0;
	hv_status rc = hv_parse_size(text, &got);
	bool ok = ref_size(text, &want);
	CHECK(rc == HV_OK || rc == HV_EUSAGE, "hv_parse_size('%s') returned %d", text, rc);
	CHECK((rc == HV_OK) == ok, "hv_parse_size('%s'): %s, the reference %s", text,
	      rc == HV_OK ? "accepted" : "refused", ok ? "accepts" : "refuses");
	if (ok)
		CHECK(got == want, "hv_parse_size('%s') = %llu, want %llu", text,
		      (unsigned long long)got, (unsigned long long)want);
	else
		CHECK(hv_error_last()[0] != '\0', "hv_parse_size('%s'): refused without a message",
		      text);
}

/* ---- times ---------------------------------------------------------------------------- */

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (H. Hinnant's
 * days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

static bool leap_year(int y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static bool take_digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (!is_digit((*p)[i]))
			return false;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return true;
}

enum ref_time { REF_BAD, REF_OK, REF_RANGE };

/* The reference: REF_OK and *out for a valid time whose instant fits int64 ns; REF_RANGE and
 * *out saturated (INT64_MIN or INT64_MAX) for a valid RFC 3339 time beyond that range; REF_BAD
 * for an invalid text or an age that does not fit (refused). */
static enum ref_time ref_time(const char *t, int64_t now, int64_t *out)
{
	size_t len = strlen(t);
	/* An age: digits then one unit letter, 2 to 12 characters in all. */
	if (len >= 2 && len <= 12 && strchr("smhdw", t[len - 1]) && t[len - 1]) {
		bool all = true;
		for (size_t i = 0; i + 1 < len; i++)
			all = all && is_digit(t[i]);
		if (all) {
			__int128 n = 0;
			for (size_t i = 0; i + 1 < len; i++)
				n = n * 10 + (t[i] - '0');
			static const char units[] = "smhdw";
			static const int64_t secs[] = {1, 60, 3600, 86400, 604800};
			__int128 s = secs[strchr(units, t[len - 1]) - units];
			/* The age itself must be a representable duration (else "age out of range"),
			 * and so must the instant. */
			__int128 age = n * s * 1000000000;
			__int128 v = (__int128)now - age;
			if (age > INT64_MAX || v < INT64_MIN || v > INT64_MAX)
				return REF_BAD;
			*out = (int64_t)v;
			return REF_OK;
		}
	}
	static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	const char *p = t;
	int y, mo, d, h = 0, mi = 0, s = 0;
	int64_t frac = 0, offset = 0;
	if (!take_digits(&p, 4, &y) || *p++ != '-' || !take_digits(&p, 2, &mo) || *p++ != '-' ||
	    !take_digits(&p, 2, &d))
		return REF_BAD;
	if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap_year(y)))
		return REF_BAD;
	if (*p) {
		if (*p != 'T' && *p != 't' && *p != ' ')
			return REF_BAD;
		p++;
		if (!take_digits(&p, 2, &h) || *p++ != ':' || !take_digits(&p, 2, &mi) ||
		    *p++ != ':' || !take_digits(&p, 2, &s))
			return REF_BAD;
		if (h > 23 || mi > 59 || s > 60)
			return REF_BAD;
		if (*p == '.') {
			p++;
			int n = 0;
			while (is_digit(*p)) {
				if (n < 9) {
					frac = frac * 10 + (*p - '0');
					n++;
				}
				p++;
			}
			if (n == 0)
				return REF_BAD;
			for (; n < 9; n++)
				frac *= 10;
		}
		if (*p == 'Z' || *p == 'z') {
			p++;
		} else if (*p == '+' || *p == '-') {
			int sign = *p++ == '-' ? -1 : 1, oh, om;
			if (!take_digits(&p, 2, &oh) || *p++ != ':' || !take_digits(&p, 2, &om) ||
			    oh > 23 || om > 59)
				return REF_BAD;
			offset = sign * ((int64_t)oh * 3600 + om * 60);
		} else {
			return REF_BAD;
		}
		if (*p)
			return REF_BAD;
	}
	/* A leap second (:60) is the next second, as timegm() normalizes it. */
	__int128 secs = (__int128)days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 +
			h * 3600 + mi * 60 + s - offset;
	__int128 ns = secs * 1000000000 + frac;
	if (ns < INT64_MIN || ns > INT64_MAX) {
		*out = ns < 0 ? INT64_MIN : INT64_MAX;
		return REF_RANGE;
	}
	*out = (int64_t)ns;
	return REF_OK;
}

/* hv_format_time's text: YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ (30 characters for years 0..9999). */
static void check_format(int64_t ns)
{
	char out[64];
	memset(out, 'X', sizeof(out));
	size_t n = hv_format_time(ns, out, 40);
	CHECK(n < 40 && out[n] == '\0' && out[40] == 'X', "hv_format_time(%lld): length %zu",
	      (long long)ns, n);
	CHECK(n == 30, "hv_format_time(%lld) = '%s': not 30 characters", (long long)ns, out);
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddddddddZ";
	for (size_t i = 0; i < 30; i++)
		CHECK(shape[i] == 'd' ? is_digit(out[i]) : out[i] == shape[i],
		      "hv_format_time(%lld) = '%s': not RFC 3339", (long long)ns, out);
	int64_t back = 0;
	CHECK(hv_parse_time(out, NOW_NS, &back) == HV_OK, "'%s' (from %lld) does not parse: %s",
	      out, (long long)ns, hv_error_last());
	CHECK(back == ns, "'%s' parses to %lld, formatted from %lld", out, (long long)back,
	      (long long)ns);
	/* A short buffer: cut, NUL-terminated, never overrun. */
	for (size_t cap = 1; cap < 32; cap += 7) {
		char small[40];
		memset(small, 'X', sizeof(small));
		hv_format_time(ns, small, cap);
		CHECK(small[cap] == 'X', "hv_format_time wrote past cap %zu", cap);
		CHECK(memchr(small, '\0', cap) != NULL, "hv_format_time: no NUL within cap %zu", cap);
	}
}

static void check_time(const char *text)
{
	int64_t got = 0x5a5a5a5a, want = 0;
	hv_status rc = hv_parse_time(text, NOW_NS, &got);
	enum ref_time ref = ref_time(text, NOW_NS, &want);
	CHECK(rc == HV_OK || rc == HV_EUSAGE, "hv_parse_time('%s') returned %d", text, rc);
	if (ref == REF_BAD)
		CHECK(rc == HV_EUSAGE, "hv_parse_time('%s') accepted what the reference refuses",
		      text);
	if (ref == REF_OK) {
		CHECK(rc == HV_OK, "hv_parse_time('%s') refused: %s", text, hv_error_last());
		CHECK(got == want, "hv_parse_time('%s') = %lld, want %lld", text, (long long)got,
		      (long long)want);
	}
	if (ref == REF_RANGE) {
		/* parse.c: a time beyond the int64 ns range (1677..2262) saturates, so that
		 * "--since 2999-01-01" selects nothing rather than wrapping around. */
		CHECK(rc == HV_OK, "hv_parse_time('%s') refused a far time: %s", text, hv_error_last());
		CHECK(got == want, "hv_parse_time('%s') = %lld, want %lld (saturated)", text,
		      (long long)got, (long long)want);
	}
	if (rc != HV_OK)
		CHECK(hv_error_last()[0] != '\0', "hv_parse_time('%s'): refused without a message",
		      text);
	else
		check_format(got);
}

/* ---- whole numbers and durations ------------------------------------------------------ */

/* hv_parse_uint: exactly one or more decimal digits whose value is at most max. */
static void check_uint(const char *t)
{
	static const uint64_t maxes[] = {0, 9, 1000, UINT64_MAX / 10, UINT64_MAX};
	for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++) {
		uint64_t v = 0;
		bool ok = t[0] != '\0', overflow = false;
		for (size_t i = 0; t[i]; i++) {
			if (!is_digit(t[i])) {
				ok = false;
				break;
			}
			unsigned d = (unsigned)(t[i] - '0');
			if (v > (UINT64_MAX - d) / 10)
				overflow = true;
			else
				v = v * 10 + d;
		}
		bool want = ok && !overflow && v <= maxes[m];
		uint64_t got = 7;
		hv_status st = hv_parse_uint(t, maxes[m], &got);
		CHECK(want ? st == HV_OK && got == v : st == HV_EUSAGE && got == 7,
		      "uint '%s' max %llu: status %d, %llu", t, (unsigned long long)maxes[m], st,
		      (unsigned long long)got);
		int64_t gi = 7;
		bool neg = t[0] == '-';
		hv_status si = hv_parse_int(t, -1000, 1000, &gi);
		if (si == HV_OK) {
			uint64_t mag = 0;
			CHECK(hv_parse_uint(t + neg, 1000, &mag) == HV_OK, "int '%s'", t);
			CHECK(gi == (neg ? -(int64_t)mag : (int64_t)mag), "int '%s' is %lld", t,
			      (long long)gi);
		} else {
			CHECK(si == HV_EUSAGE && gi == 7, "int '%s': status %d", t, si);
		}
	}
}

/* hv_parse_duration_ms, by another method than parse.c's: the digits as a string with the
 * decimal point moved by the exponent, then the integer part read and rounded up. */
static void check_duration(const char *t)
{
	size_t i = 0;
	char *digits = malloc(strlen(t) + 1);
	if (!digits)
		return;
	size_t nd = 0, int_digits = 0;
	bool any = false, point = false, ok = true;
	for (; t[i]; i++) {
		if (t[i] == '.' && !point) {
			point = true;
		} else if (is_digit(t[i])) {
			any = true;
			digits[nd++] = t[i];
			if (!point)
				int_digits++;
		} else {
			break;
		}
	}
	long long e = 0;
	if (!any)
		ok = false;
	if (ok && (t[i] == 'e' || t[i] == 'E')) {
		i++;
		bool neg = t[i] == '-';
		if (t[i] == '-' || t[i] == '+')
			i++;
		if (!is_digit(t[i]))
			ok = false;
		for (; is_digit(t[i]); i++)
			if (e < 100000000)
				e = e * 10 + (t[i] - '0');
		if (neg)
			e = -e;
	}
	if (t[i])
		ok = false;
	uint64_t got = 7;
	hv_status st = hv_parse_duration_ms(t, &got);
	if (!ok) {
		CHECK(st == HV_EUSAGE && got == 7, "duration '%s' accepted: %llu", t,
		      (unsigned long long)got);
		free(digits);
		return;
	}
	/* Drop leading zeros; the point sits after int_digits digits, moved by e + 3. */
	size_t lead = 0;
	while (lead < nd && digits[lead] == '0')
		lead++;
	long long pos = (long long)int_digits + e + 3 - (long long)lead; /* integer digits */
	const char *d = digits + lead;
	size_t n = nd - lead;
	bool range = false;
	uint64_t want = 0;
	if (n == 0) {
		want = 0;
	} else if (pos <= 0) {
		want = 1;
	} else if (pos > 13) {
		range = true;
	} else {
		bool frac = false;
		for (long long k = 0; k < pos; k++)
			want = want * 10 + (uint64_t)(k < (long long)n ? d[k] - '0' : 0);
		for (size_t k = (size_t)pos; k < n; k++)
			frac |= d[k] != '0';
		want += frac;
		range = want > UINT64_C(1000000000000);
	}
	if (range)
		CHECK(st == HV_EUSAGE && got == 7, "duration '%s' out of range, got %llu", t,
		      (unsigned long long)got);
	else
		CHECK(st == HV_OK && got == want, "duration '%s': status %d, %llu ms, expected %llu", t,
		      st, (unsigned long long)got, (unsigned long long)want);
	free(digits);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	check_size(text);
	check_time(text);
	check_uint(text);
	check_duration(text);
	size_t tl = strlen(text);
	if (tl < size) {
		unsigned char b[8] = {0};
		memcpy(b, data + tl + 1, size - tl - 1 < 8 ? size - tl - 1 : 8);
		uint64_t u = 0;
		for (int i = 0; i < 8; i++)
			u = u << 8 | b[i];
		check_format((int64_t)u);
	}
	free(text);
	return 0;
}
