/* The parsers of what users type (parse.h): sizes with binary units, RFC 3339 times and ages,
 * and the RFC 3339 formatter, at their edges: every unit, overflow, calendar rules, offsets,
 * fractions before 1970, and the saturation at the ends of the int64 nanosecond range. */
#include "testutil.h"

#include "harvest/parse.h"
#include "harvest.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NS 1000000000LL

/* ---- sizes ---- */

static void expect_size(const char *text, uint64_t want)
{
	uint64_t got = 0;
	if (hv_parse_size(text, &got) != HV_OK)
		fail_msg("'%s' refused: %s", text, hv_error_last());
	if (got != want)
		fail_msg("'%s' is %llu, expected %llu", text, (unsigned long long)got,
			 (unsigned long long)want);
}

/* Refused as a usage error, with a message that quotes the text and says why. */
static void expect_bad_size(const char *text, const char *why)
{
	uint64_t got = 12345;
	if (hv_parse_size(text, &got) != HV_EUSAGE)
		fail_msg("'%s' accepted as %llu", text, (unsigned long long)got);
	assert_int_equal(got, 12345); /* left alone */
	char quoted[128];
	snprintf(quoted, sizeof(quoted), "'%s'", text);
	if (!strstr(hv_error_last(), quoted) || !strstr(hv_error_last(), why))
		fail_msg("'%s': message '%s' lacks %s or '%s'", text, hv_error_last(), quoted, why);
}

static void test_size_units(void **state)
{
	(void)state;
	expect_size("0", 0);
	expect_size("12", 12);
	expect_size("12b", 12);
	expect_size("12B", 12);
	/* Every unit is binary, whatever its spelling and case. */
	static const char *const k[] = {"1k", "1K", "1kb", "1KB", "1kib", "1KiB"};
	for (size_t i = 0; i < 6; i++)
		expect_size(k[i], 1024);
	expect_size("32MiB", 32ULL << 20);
	expect_size("32mb", 32ULL << 20);
	expect_size("3m", 3ULL << 20);
	expect_size("2G", 2ULL << 30);
	expect_size("2gib", 2ULL << 30);
	expect_size("1TB", 1ULL << 40);
	expect_size("5t", 5ULL << 40);
	expect_size("007KiB", 7 << 10); /* leading zeros are decimal, not octal */
}

static void test_size_limits(void **state)
{
	(void)state;
	/* The largest plain number, and the largest count of each unit that fits 64 bits. */
	expect_size("18446744073709551615", UINT64_MAX);
	expect_size("16777215TiB", 16777215ULL << 40);
	expect_size("17179869183GiB", 17179869183ULL << 30);
	expect_bad_size("18446744073709551616", "out of range");
	expect_bad_size("16777216TiB", "out of range");
	expect_bad_size("17179869184G", "out of range");
	expect_bad_size("99999999999999999999999k", "out of range");
}

static void test_size_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"",     "k",      "-1",   "+1",     " 1",   "1 MiB", "1.5M", "1e3",
		"0x10", "1MiBs",  "1ki",  "1Mi",    "1PB",  "MiB",   "1,000", "1k ",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_bad_size(bad[i], "expected a size");
}

/* ---- times ---- */

static const int64_t NOW = 1796009347 * NS; /* 2026-11-30T03:29:07Z */

static void expect_time(const char *text, int64_t want)
{
	int64_t got = 0;
	if (hv_parse_time(text, NOW, &got) != HV_OK)
		fail_msg("'%s' refused: %s", text, hv_error_last());
	if (got != want)
		fail_msg("'%s' is %lld ns, expected %lld", text, (long long)got, (long long)want);
}

static void expect_bad_time(const char *text, const char *why)
{
	int64_t got = 777;
	if (hv_parse_time(text, NOW, &got) != HV_EUSAGE)
		fail_msg("'%s' accepted as %lld", text, (long long)got);
	assert_int_equal(got, 777);
	char quoted[128];
	snprintf(quoted, sizeof(quoted), "'%s'", text);
	if (!strstr(hv_error_last(), quoted) || !strstr(hv_error_last(), why))
		fail_msg("'%s': message '%s' lacks %s or '%s'", text, hv_error_last(), quoted, why);
}

static void test_time_rfc3339(void **state)
{
	(void)state;
	expect_time("1970-01-01T00:00:00Z", 0);
	expect_time("1970-01-01", 0);
	expect_time("2026-11-30T03:29:07Z", NOW);
	/* 't', 'z' and a space are accepted for 'T' and 'Z'. */
	expect_time("2026-11-30t03:29:07z", NOW);
	expect_time("2026-11-30 03:29:07Z", NOW);
	/* A date alone is midnight UTC. */
	expect_time("2026-11-30", NOW - (3 * 3600 + 29 * 60 + 7) * NS);
	/* Offsets east are subtracted, offsets west added. */
	expect_time("2026-11-30T05:29:07+02:00", NOW);
	expect_time("2026-11-30T01:59:07-01:30", NOW);
	expect_time("2026-11-30T03:29:07-00:00", NOW);
	expect_time("2026-11-30T00:00:00+23:59", NOW - (3 * 3600 + 29 * 60 + 7) * NS -
							 (23 * 3600 + 59 * 60) * NS);
	/* Fractions: padded to nanoseconds, digits past the ninth dropped (not rounded). */
	expect_time("2026-11-30T03:29:07.5Z", NOW + 500000000);
	expect_time("2026-11-30T03:29:07.000000001Z", NOW + 1);
	expect_time("2026-11-30T03:29:07.123456789999Z", NOW + 123456789);
	expect_time("2026-11-30T05:29:07.25+02:00", NOW + 250000000);
	/* A leap second is the first second of the next minute. */
	expect_time("2016-12-31T23:59:60Z", 1483228800 * NS);
}

static void test_time_calendar(void **state)
{
	(void)state;
	/* Leap years: every 4th, not every 100th, but every 400th. */
	expect_time("2024-02-29", 1709164800 * NS);
	expect_time("2000-02-29T00:00:00Z", 951782400 * NS);
	expect_bad_time("2023-02-29", "expected a time");
	expect_bad_time("1900-02-29", "expected a time");
	expect_bad_time("2100-02-29", "expected a time");
	static const char *const bad[] = {
		"2026-00-10",           "2026-13-01",           "2026-04-31",
		"2026-01-32",           "2026-01-00",           "2026-1-05",
		"26-11-30",             "2026/11/30",           "2026-11-30T",
		"2026-11-30X03:29:07Z", "2026-11-30T24:00:00Z", "2026-11-30T23:60:00Z",
		"2026-11-30T23:59:61Z", "2026-11-30T3:29:07Z",  "2026-11-30T03:29Z",
		"2026-11-30T03:29:07",  "2026-11-30T03:29:07.Z", "2026-11-30T03:29:07Zjunk",
		"2026-11-30T03:29:07+0200", "2026-11-30T03:29:07+24:00",
		"2026-11-30T03:29:07+02:60", "2026-11-30T03:29:07+2:00",
		"2026-11-30T03:29:07 UTC", "2026-11-30junk", "",
		"now",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_bad_time(bad[i], "expected a time such as");
}

static void test_time_before_1970(void **state)
{
	(void)state;
	expect_time("1969-12-31T23:59:59Z", -NS);
	/* Half a second before the epoch, not half a second after -1 s. */
	expect_time("1969-12-31T23:59:59.5Z", -NS / 2);
	expect_time("1969-12-31T23:59:59.999999999Z", -1);
	expect_time("1900-01-01", -2208988800LL * NS);
}

/* Nanoseconds since the epoch in an int64 reach from 1677-09-21T00:12:43.145224192Z to
 * 2262-04-11T23:47:16.854775807Z: those ends exactly, and anything beyond saturates at them
 * instead of wrapping around. */
static void test_time_saturates(void **state)
{
	(void)state;
	expect_time("2262-04-11T23:47:16.854775807Z", INT64_MAX);
	expect_time("2262-04-11T23:47:16.854775808Z", INT64_MAX);
	expect_time("2262-04-11T23:47:17Z", INT64_MAX);
	expect_time("2999-01-01", INT64_MAX);
	expect_time("9999-12-31T23:59:59.999999999Z", INT64_MAX);
	expect_time("1677-09-21T00:12:43.145224192Z", INT64_MIN);
	expect_time("1677-09-21T00:12:43.145224193Z", INT64_MIN + 1);
	expect_time("1677-09-21T00:12:43.145224191Z", INT64_MIN);
	expect_time("1677-09-21T00:12:43Z", INT64_MIN);
	expect_time("1000-01-01", INT64_MIN);
	expect_time("0000-01-01T00:00:00Z", INT64_MIN);
}

static void test_time_ages(void **state)
{
	(void)state;
	expect_time("30s", NOW - 30 * NS);
	expect_time("90m", NOW - 90 * 60 * NS);
	expect_time("12h", NOW - 12 * 3600 * NS);
	expect_time("7d", NOW - 7 * 86400 * NS);
	expect_time("2w", NOW - 2 * 604800 * NS);
	expect_time("0s", NOW);
	expect_time("007d", NOW - 7 * 86400 * NS);
	/* The largest age of each unit that is still a count of nanoseconds. */
	expect_time("9223372036s", NOW - 9223372036LL * NS);
	expect_time("15250w", NOW - 15250LL * 604800 * NS);
	expect_bad_time("9223372037s", "age out of range");
	expect_bad_time("153722868m", "age out of range");
	expect_bad_time("2562048h", "age out of range");
	expect_bad_time("106752d", "age out of range");
	expect_bad_time("15251w", "age out of range");
	expect_bad_time("99999999999w", "age out of range");
	/* Not ages: no unit, another unit, a sign, a fraction, a space, too long to be one. */
	static const char *const bad[] = {"7",  "d",    "7y",  "7D",   "-5m",
					  "+5m", "1.5h", "5 m", "m5",   "9999999999999d"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_bad_time(bad[i], "expected a time");
}

/* ---- formatting ---- */

static void expect_format(int64_t ns, const char *want)
{
	char buf[64];
	size_t n = hv_format_time(ns, buf, sizeof(buf));
	assert_string_equal(buf, want);
	assert_int_equal(n, strlen(want));
	/* What is formatted parses back to the same instant. */
	int64_t back = 0;
	if (hv_parse_time(buf, NOW, &back) != HV_OK)
		fail_msg("'%s' does not parse back: %s", buf, hv_error_last());
	assert_int_equal(back, ns);
}

static void test_format_time(void **state)
{
	(void)state;
	expect_format(0, "1970-01-01T00:00:00.000000000Z");
	expect_format(NOW + 123456789, "2026-11-30T03:29:07.123456789Z");
	/* Before the epoch the fraction still counts forward from the whole second below. */
	expect_format(-1, "1969-12-31T23:59:59.999999999Z");
	expect_format(-NS, "1969-12-31T23:59:59.000000000Z");
	expect_format(-NS / 2, "1969-12-31T23:59:59.500000000Z");
	expect_format(INT64_MAX, "2262-04-11T23:47:16.854775807Z");
	expect_format(INT64_MIN, "1677-09-21T00:12:43.145224192Z");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_units),
		cmocka_unit_test(test_size_limits),
		cmocka_unit_test(test_size_refused),
		cmocka_unit_test(test_time_rfc3339),
		cmocka_unit_test(test_time_calendar),
		cmocka_unit_test(test_time_before_1970),
		cmocka_unit_test(test_time_saturates),
		cmocka_unit_test(test_time_ages),
		cmocka_unit_test(test_format_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
