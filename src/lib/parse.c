/* Sizes and times as users type them. */
#include "harvest/parse.h"
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Every number harvest reads is written the one way people write it: decimal digits, no
 * sign (but '-' where negative values exist), no spaces, no base prefix. strtoull and
 * strtod would also take leading blanks, '+', "0x10", "inf" and "nan". */
hv_status hv_parse_uint(const char *text, uint64_t max, uint64_t *out)
{
	HV_NEED(text && out);
	uint64_t v = 0;
	const char *p = text;
	bool ok = isdigit((unsigned char)*p) != 0;
	for (; ok && *p; p++) {
		if (!isdigit((unsigned char)*p) || __builtin_mul_overflow(v, 10u, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v))
			ok = false;
	}
	if (!ok || v > max)
		return hv_error_set(HV_EUSAGE, "expected a whole number up to %llu, not '%s'",
				    (unsigned long long)max, text);
	*out = v;
	return HV_OK;
}

hv_status hv_parse_int(const char *text, int64_t min, int64_t max, int64_t *out)
{
	HV_NEED(text && out);
	bool neg = text[0] == '-';
	uint64_t mag = 0;
	hv_status rc = hv_parse_uint(text + neg, (uint64_t)INT64_MAX + 1, &mag);
	int64_t v = 0;
	if (rc == HV_OK) {
		if (neg)
			v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
		else if (mag <= (uint64_t)INT64_MAX)
			v = (int64_t)mag;
		else
			rc = HV_EUSAGE;
	}
	if (rc != HV_OK || v < min || v > max)
		return hv_error_set(HV_EUSAGE, "expected a whole number from %lld to %lld, not '%s'",
				    (long long)min, (long long)max, text);
	*out = v;
	return HV_OK;
}

hv_status hv_parse_duration_ms(const char *text, uint64_t *out_ms)
{
	HV_NEED(text && out_ms);
	/* Exact decimal arithmetic on the digits (no strtod): value = digits * 10^exp10 s. */
	enum { MAX_DIGITS = 14 }; /* 1e9 s = 1e12 ms has 13 digits */
	const uint64_t max_ms = 1000000000000u;
	const char *p = text;
	uint64_t head = 0;     /* the first significant digits, up to MAX_DIGITS of them */
	int nhead = 0;         /* how many of them */
	int64_t exp10 = 3;     /* milliseconds */
	bool seen_digit = false, rest_nonzero = false, frac = false;
	for (;; p++) {
		if (*p == '.' && !frac) {
			frac = true;
			continue;
		}
		if (!isdigit((unsigned char)*p))
			break;
		seen_digit = true;
		int d = *p - '0';
		if (nhead == 0 && d == 0) {
			if (frac)
				exp10--;
			continue; /* a leading zero */
		}
		if (nhead < MAX_DIGITS) {
			head = head * 10 + (uint64_t)d;
			nhead++;
			if (frac)
				exp10--;
		} else {
			rest_nonzero |= d != 0;
			if (!frac)
				exp10++;
		}
	}
	if (!seen_digit)
		goto bad;
	if (*p == 'e' || *p == 'E') {
		p++;
		bool neg = *p == '-';
		if (*p == '-' || *p == '+')
			p++;
		if (!isdigit((unsigned char)*p))
			goto bad;
		int64_t e = 0;
		for (; isdigit((unsigned char)*p); p++)
			if (e < 1000000)
				e = e * 10 + (*p - '0');
		exp10 += neg ? -e : e;
	}
	if (*p)
		goto bad;
	if (nhead == 0) {
		*out_ms = 0;
		return HV_OK;
	}
	/* head * 10^exp10 ms, plus something below head's last digit when rest_nonzero. */
	uint64_t ms;
	if (exp10 >= 0) {
		if (nhead + exp10 > 13)
			goto range;
		ms = head;
		for (int64_t i = 0; i < exp10; i++)
			ms *= 10;
	} else if (-exp10 >= nhead) {
		ms = 1; /* below a millisecond: rounded up, so a positive timeout never means none */
	} else {
		uint64_t div = 1;
		for (int64_t i = 0; i < -exp10; i++)
			div *= 10;
		ms = head / div;
		if (head % div != 0 || rest_nonzero)
			ms++; /* rounded up: a timeout never fires before the time asked for */
	}
	if (ms > max_ms)
		goto range;
	*out_ms = ms;
	return HV_OK;
range:
	return hv_error_set(HV_EUSAGE, "expected seconds up to 1000000000, not '%s'", text);
bad:
	return hv_error_set(HV_EUSAGE, "expected seconds such as 10, 2.5 or 1e-3, not '%s'", text);
}

hv_status hv_parse_size(const char *text, uint64_t *out)
{
	HV_NEED(text && out);
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {
		{"", 0},    {"b", 0},    {"k", 10},  {"kb", 10}, {"kib", 10},
		{"m", 20},  {"mb", 20},  {"mib", 20}, {"g", 30}, {"gb", 30},
		{"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40},
	};
	if (!isdigit((unsigned char)text[0]))
		return hv_error_set(HV_EUSAGE, "expected a size such as 32MiB, not '%s'", text);
	char *end;
	errno = 0;
	unsigned long long x = strtoull(text, &end, 10);
	if (errno)
		return hv_error_set(HV_EUSAGE, "size out of range: '%s'", text);
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcasecmp(end, units[i].suffix) != 0)
			continue;
		if (units[i].shift && x > (UINT64_MAX >> units[i].shift))
			return hv_error_set(HV_EUSAGE, "size out of range: '%s'", text);
		*out = (uint64_t)x << units[i].shift;
		return HV_OK;
	}
	return hv_error_set(HV_EUSAGE, "expected a size such as 32MiB, not '%s'", text);
}

/* Reads exactly n digits at *p. */
static bool digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return false;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return true;
}

static bool leap(int y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static hv_status parse_rfc3339(const char *text, int64_t *out_ns)
{
	static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	const char *p = text;
	int y, mo, d, h = 0, mi = 0, s = 0;
	long frac = 0;
	int64_t offset = 0;
	if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
	    !digits(&p, 2, &d))
		goto bad;
	if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap(y)))
		goto bad;
	if (*p) {
		if (*p != 'T' && *p != 't' && *p != ' ')
			goto bad;
		p++;
		if (!digits(&p, 2, &h) || *p++ != ':' || !digits(&p, 2, &mi) || *p++ != ':' ||
		    !digits(&p, 2, &s))
			goto bad;
		if (h > 23 || mi > 59 || s > 60)
			goto bad;
		if (*p == '.') {
			p++;
			int n = 0;
			while (isdigit((unsigned char)*p)) {
				if (n < 9) {
					frac = frac * 10 + (*p - '0');
					n++;
				}
				p++;
			}
			if (n == 0)
				goto bad;
			while (n++ < 9)
				frac *= 10;
		}
		if (*p == 'Z' || *p == 'z') {
			p++;
		} else if (*p == '+' || *p == '-') {
			int sign = *p++ == '-' ? -1 : 1, oh, om;
			if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || oh > 23 ||
			    om > 59)
				goto bad;
			offset = sign * ((int64_t)oh * 3600 + om * 60);
		} else {
			goto bad;
		}
		if (*p)
			goto bad;
	}
	struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
			.tm_min = mi, .tm_sec = s};
	int64_t secs = (int64_t)timegm(&tm) - offset;
	/* Nanoseconds in an int64 reach from 1677 to 2262; a time beyond is as far as it gets
	 * (saturated), so "--since 2999-01-01" selects nothing instead of wrapping around. */
	int64_t ns;
	if (secs < 0 && frac > 0) {
		/* (secs + 1) s minus a fraction: stays in range down to INT64_MIN itself. */
		secs++;
		frac -= 1000000000;
	}
	if (__builtin_mul_overflow(secs, (int64_t)1000000000, &ns) ||
	    __builtin_add_overflow(ns, (int64_t)frac, &ns))
		ns = secs < 0 ? INT64_MIN : INT64_MAX;
	*out_ns = ns;
	return HV_OK;
bad:
	return hv_error_set(HV_EUSAGE,
			    "expected a time such as 2026-11-30T03:29:07Z or an age such as 7d, "
			    "not '%s'",
			    text);
}

hv_status hv_parse_time(const char *text, int64_t now_ns, int64_t *out_ns)
{
	HV_NEED(text && out_ns);
	size_t len = strlen(text);
	if (len >= 2 && len <= 12 && strchr("smhdw", text[len - 1])) {
		bool all_digits = true;
		for (size_t i = 0; i + 1 < len; i++)
			all_digits &= isdigit((unsigned char)text[i]) != 0;
		if (all_digits) {
			static const struct {
				char unit;
				int64_t secs;
			} units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}, {'w', 604800}};
			int64_t n = strtoll(text, NULL, 10);
			for (size_t i = 0; i < 5; i++) {
				if (units[i].unit != text[len - 1])
					continue;
				if (n > INT64_MAX / 1000000000 / units[i].secs)
					break;
				*out_ns = now_ns - n * units[i].secs * 1000000000;
				return HV_OK;
			}
			return hv_error_set(HV_EUSAGE, "age out of range: '%s'", text);
		}
	}
	return parse_rfc3339(text, out_ns);
}

size_t hv_format_timespec(int64_t sec, long nsec, char *out, size_t cap)
{
	if (nsec < 0 || nsec > 999999999)
		nsec = 0;
	time_t t = (time_t)sec;
	struct tm tm;
	/* Whole into a buffer of its own, then as much as fits (strftime writes nothing useful
	 * to a buffer too short, and its 0 would hide the length). */
	char text[64];
	size_t n = 0;
	if (gmtime_r(&t, &tm)) {
		n = strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &tm);
		int m = snprintf(text + n, sizeof(text) - n, ".%09ldZ", nsec);
		n += (size_t)(m > 0 ? m : 0);
	}
	text[n] = '\0';
	if (out && cap)
		snprintf(out, cap, "%s", text);
	return n;
}

size_t hv_format_mtime(const hv_stat *s, char *out, size_t cap)
{
	if (!s) {
		if (out && cap)
			out[0] = '\0';
		return 0;
	}
	if (s->mtime_ns == INT64_MIN || s->mtime_ns == INT64_MAX)
		return hv_format_timespec(s->mtime_sec, (long)s->mtime_nsec, out, cap);
	return hv_format_time(s->mtime_ns, out, cap);
}

size_t hv_format_time(int64_t ns, char *out, size_t cap)
{
	/* Floor division without negating ns (which overflows at INT64_MIN). */
	int64_t secs = ns / 1000000000;
	long frac = (long)(ns % 1000000000);
	if (frac < 0) {
		secs--;
		frac += 1000000000;
	}
	return hv_format_timespec(secs, frac, out, cap);
}
