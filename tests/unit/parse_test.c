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
	/* Seconds and nanoseconds reach past 2262 (a file dated 2300) and before 1677. */
	char far[64];
	assert_int_equal(hv_format_timespec(10413792000, 500000000, far, sizeof(far)), 30);
	assert_string_equal(far, "2300-01-01T00:00:00.500000000Z");
	assert_int_equal(hv_format_timespec(-11676096000, 7, far, sizeof(far)), 30);
	assert_string_equal(far, "1600-01-01T00:00:00.000000007Z");
	assert_int_equal(hv_format_timespec(253402300800, 0, far, sizeof(far)), 31);
	assert_string_equal(far, "10000-01-01T00:00:00.000000000Z");
	/* An hv_stat's: mtime_ns where it is not saturated (a caller's own hv_stat may fill only
	 * it), the exact seconds where it is. */
	hv_stat st = {.mtime_ns = NOW + 123456789};
	assert_int_equal(hv_format_mtime(&st, far, sizeof(far)), 30);
	assert_string_equal(far, "2026-11-30T03:29:07.123456789Z");
	st.mtime_ns = INT64_MAX;
	st.mtime_sec = 10413792000;
	st.mtime_nsec = 500000000;
	assert_int_equal(hv_format_mtime(&st, far, sizeof(far)), 30);
	assert_string_equal(far, "2300-01-01T00:00:00.500000000Z");
	assert_int_equal(hv_format_mtime(NULL, far, sizeof(far)), 0);
	assert_string_equal(far, "");
	/* A buffer too short holds what fits, and the length is still the whole text's, as
	 * snprintf gives it. */
	const char *whole = "2026-11-30T03:29:07.123456789Z";
	for (size_t cap = 0; cap <= 31; cap++) {
		char buf[40];
		memset(buf, 'X', sizeof(buf));
		assert_int_equal(hv_format_time(NOW + 123456789, buf, cap), strlen(whole));
		if (cap == 0) {
			assert_int_equal(buf[0], 'X');
			continue;
		}
		assert_int_equal(strlen(buf), cap - 1);
		assert_memory_equal(buf, whole, cap - 1);
		assert_int_equal(buf[cap], 'X');
	}
}

/* ---- whole numbers and durations: one spelling, decimal digits ---- */

/* What strtoull/strtol/strtod also take, and no option may: blanks before or after, a sign
 * where none belongs, another base, words. */
static const char *const not_numbers[] = {
	"", " 5", "5 ", "\t5", "5\n", "+5", "0x10", "0X10", "010x", "1_000", "5s", "inf",
	"nan", "infinity", "1,5", "5a",
};

static void test_uint(void **state)
{
	(void)state;
	uint64_t v = 0;
	assert_int_equal(hv_parse_uint("0", 10, &v), HV_OK);
	assert_int_equal(v, 0);
	assert_int_equal(hv_parse_uint("010", 10, &v), HV_OK);
	assert_int_equal(v, 10); /* leading zeros are decimal, not octal */
	assert_int_equal(hv_parse_uint("18446744073709551615", UINT64_MAX, &v), HV_OK);
	assert_true(v == UINT64_MAX);
	v = 7;
	assert_int_equal(hv_parse_uint("18446744073709551616", UINT64_MAX, &v), HV_EUSAGE);
	assert_int_equal(hv_parse_uint("11", 10, &v), HV_EUSAGE);
	assert_int_equal(hv_parse_uint("-1", 10, &v), HV_EUSAGE);
	assert_int_equal(v, 7);
	for (size_t i = 0; i < sizeof(not_numbers) / sizeof(not_numbers[0]); i++) {
		if (hv_parse_uint(not_numbers[i], UINT64_MAX, &v) != HV_EUSAGE)
			fail_msg("uint '%s' accepted as %llu", not_numbers[i], (unsigned long long)v);
		char quoted[64];
		snprintf(quoted, sizeof(quoted), "'%s'", not_numbers[i]);
		assert_non_null(strstr(hv_error_last(), quoted));
	}
}

static void test_int(void **state)
{
	(void)state;
	int64_t v = 0;
	assert_int_equal(hv_parse_int("-5", -10, 10, &v), HV_OK);
	assert_int_equal(v, -5);
	assert_int_equal(hv_parse_int("-9223372036854775808", INT64_MIN, 0, &v), HV_OK);
	assert_true(v == INT64_MIN);
	assert_int_equal(hv_parse_int("9223372036854775807", 0, INT64_MAX, &v), HV_OK);
	assert_true(v == INT64_MAX);
	v = 3;
	assert_int_equal(hv_parse_int("9223372036854775808", 0, INT64_MAX, &v), HV_EUSAGE);
	assert_int_equal(hv_parse_int("-9223372036854775809", INT64_MIN, 0, &v), HV_EUSAGE);
	assert_int_equal(hv_parse_int("-11", -10, 10, &v), HV_EUSAGE);
	assert_int_equal(hv_parse_int("--5", -10, 10, &v), HV_EUSAGE);
	assert_int_equal(hv_parse_int("-", -10, 10, &v), HV_EUSAGE);
	assert_int_equal(hv_parse_int("- 5", -10, 10, &v), HV_EUSAGE);
	assert_int_equal(v, 3);
	for (size_t i = 0; i < sizeof(not_numbers) / sizeof(not_numbers[0]); i++)
		if (hv_parse_int(not_numbers[i], INT64_MIN, INT64_MAX, &v) != HV_EUSAGE)
			fail_msg("int '%s' accepted as %lld", not_numbers[i], (long long)v);
	assert_non_null(strstr(hv_error_last(), "from -9223372036854775808 to"));
}

static void expect_ms(const char *text, uint64_t want)
{
	uint64_t got = 12345;
	if (hv_parse_duration_ms(text, &got) != HV_OK)
		fail_msg("duration '%s' refused: %s", text, hv_error_last());
	if (got != want)
		fail_msg("duration '%s' is %llu ms, expected %llu", text, (unsigned long long)got,
			 (unsigned long long)want);
}

static void test_duration(void **state)
{
	(void)state;
	expect_ms("0", 0);
	expect_ms("0.000", 0);
	expect_ms("0e5", 0);
	expect_ms("10", 10000);
	expect_ms("2.5", 2500);
	expect_ms(".5", 500);
	expect_ms("5.", 5000);
	expect_ms("0.05", 50);
	expect_ms("007", 7000);
	expect_ms("1e3", 1000000);
	expect_ms("1E+2", 100000);
	expect_ms("25e-1", 2500);
	/* A positive duration is never 0 ms (which means "no timeout"): rounded up. */
	expect_ms("1e-7", 1);
	expect_ms("0.0001", 1);
	expect_ms("1e-999999999999", 1);
	expect_ms("0.00000000000000000000000000001", 1);
	expect_ms("0.0011", 2);
	expect_ms("1.0001", 1001);
	expect_ms("1.1", 1100); /* exact decimal: no 1100.0000000000002 rounded up to 1101 */
	expect_ms("0.3", 300);
	expect_ms("1.0000000000000000000000001", 1001);
	expect_ms("123456789.123456789", 123456789124);
	expect_ms("1000000000", 1000000000000);
	expect_ms("1e9", 1000000000000);
	expect_ms("0000000000000000000000000000001", 1000);
	expect_ms("1000000000.0000", 1000000000000);
	static const char *const bad[] = {".", "e5", "1e", "1e+", "1..2", "1.2.3", "-1", "- 1",
					  "1 e3", "0x1p3", "1s", "1e3.5"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 7;
		if (hv_parse_duration_ms(bad[i], &v) != HV_EUSAGE || v != 7)
			fail_msg("duration '%s' accepted as %llu", bad[i], (unsigned long long)v);
	}
	for (size_t i = 0; i < sizeof(not_numbers) / sizeof(not_numbers[0]); i++) {
		uint64_t v = 7;
		if (hv_parse_duration_ms(not_numbers[i], &v) != HV_EUSAGE)
			fail_msg("duration '%s' accepted as %llu", not_numbers[i], (unsigned long long)v);
		assert_non_null(strstr(hv_error_last(), "expected seconds"));
	}
	static const char *const too_long[] = {"1000000000.001", "1e10", "99999999999999999999",
					       "1e999999999999"};
	for (size_t i = 0; i < sizeof(too_long) / sizeof(too_long[0]); i++) {
		uint64_t v = 7;
		if (hv_parse_duration_ms(too_long[i], &v) != HV_EUSAGE)
			fail_msg("duration '%s' accepted as %llu", too_long[i], (unsigned long long)v);
		assert_non_null(strstr(hv_error_last(), "up to 1000000000"));
	}
}

/* Sizes and ages share the strictness: no blanks either side, no base prefix, no sign. */
static void test_size_and_age_strict(void **state)
{
	(void)state;
	static const char *const bad[] = {" 5", "5 ", "\t5", "+5", "0x10", " 5k", "5 k", "inf"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 7;
		if (hv_parse_size(bad[i], &v) != HV_EUSAGE)
			fail_msg("size '%s' accepted as %llu", bad[i], (unsigned long long)v);
	}
	static const char *const bad_age[] = {" 5s", "5s ", "+5s", "0x5s", "5 s"};
	for (size_t i = 0; i < sizeof(bad_age) / sizeof(bad_age[0]); i++) {
		int64_t v = 7;
		if (hv_parse_time(bad_age[i], NOW, &v) != HV_EUSAGE)
			fail_msg("time '%s' accepted as %lld", bad_age[i], (long long)v);
	}
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
		cmocka_unit_test(test_uint),
		cmocka_unit_test(test_int),
		cmocka_unit_test(test_duration),
		cmocka_unit_test(test_size_and_age_strict),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
