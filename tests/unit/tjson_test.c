/* The test suite's JSON reader: it must accept what it should and reject what it should,
 * since every other test trusts it. */
#include "testutil.h"
#include "tjson.h"

#include <stdlib.h>
#include <string.h>

static tj_value *parse(const char *s)
{
	return tj_parse(s, strlen(s));
}

static void assert_bytes(const tj_value *v, const char *want, size_t want_len)
{
	size_t len = 0;
	const char *s = tj_str(v, &len);
	assert_non_null(s);
	assert_int_equal(len, want_len);
	assert_memory_equal(s, want, want_len);
	assert_int_equal(s[len], '\0');
}

static void test_scalars(void **state)
{
	(void)state;
	tj_value *v = parse(" [true, false, null, 0, -12, 1.5e3, 18446744073709551615,"
			    " -9223372036854775808, 1e400, \"x\"] ");
	assert_non_null(v);
	assert_int_equal(tj_type(v), TJ_ARRAY);
	assert_int_equal(tj_len(v), 10);
	assert_true(tj_bool(tj_at(v, 0)));
	assert_int_equal(tj_type(tj_at(v, 1)), TJ_BOOL);
	assert_false(tj_bool(tj_at(v, 1)));
	assert_true(tj_is_null(tj_at(v, 2)));
	assert_false(tj_is_null(tj_at(v, 3)));
	assert_false(tj_is_null(tj_at(v, 10))); /* absent is not null */
	assert_int_equal(tj_type(tj_at(v, 3)), TJ_INT);
	assert_int_equal(tj_int(tj_at(v, 3)), 0);
	assert_int_equal(tj_int(tj_at(v, 4)), -12);
	assert_int_equal(tj_type(tj_at(v, 5)), TJ_DOUBLE);
	assert_true(tj_double(tj_at(v, 5)) == 1500.0);
	assert_true(tj_uint(tj_at(v, 6)) == UINT64_MAX);
	assert_int_equal(tj_int(tj_at(v, 6)), 0); /* out of int64 range */
	assert_true(tj_int(tj_at(v, 7)) == INT64_MIN);
	assert_int_equal(tj_type(tj_at(v, 8)), TJ_DOUBLE);
	assert_bytes(tj_at(v, 9), "x", 1);
	assert_null(tj_str(tj_at(v, 0), NULL));
	tj_free(v);

	v = parse("99999999999999999999"); /* beyond uint64: kept as a double */
	assert_int_equal(tj_type(v), TJ_DOUBLE);
	tj_free(v);
}

static void test_objects(void **state)
{
	(void)state;
	tj_value *v = parse("{\"name\":\"a\",\"is_dir\":false,\"size\":12,\"sub\":{\"k\":[1,[2]]},"
			    "\"e\":{},\"a\":[]}");
	assert_non_null(v);
	assert_int_equal(tj_type(v), TJ_OBJECT);
	assert_int_equal(tj_len(v), 6);
	assert_bytes(tj_get(v, "name"), "a", 1);
	assert_int_equal(tj_type(tj_get(v, "is_dir")), TJ_BOOL);
	assert_int_equal(tj_int(tj_get(v, "size")), 12);
	assert_null(tj_get(v, "isDir"));
	assert_int_equal(tj_int(tj_at(tj_at(tj_get(tj_get(v, "sub"), "k"), 1), 0)), 2);
	assert_int_equal(tj_len(tj_get(v, "e")), 0);
	assert_int_equal(tj_type(tj_get(v, "a")), TJ_ARRAY);
	size_t kl = 0;
	assert_string_equal(tj_key(v, 1, &kl), "is_dir");
	assert_int_equal(kl, 6);
	assert_int_equal(tj_int(tj_at(v, 2)), 12);
	assert_null(tj_get(tj_get(v, "size"), "x"));
	tj_free(v);
}

static void test_string_decoding(void **state)
{
	(void)state;
	tj_value *v = parse("\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000\\u00e9\\u65e5\\ud83c\\udf89\"");
	assert_bytes(v, "a\"\\/\b\f\n\r\t\0\xc3\xa9\xe6\x97\xa5\xf0\x9f\x8e\x89", 19);
	tj_free(v);
	/* surrogateescape reversed: \udcXX is the byte XX */
	v = parse("\"bad\\udcff\\uDCFEname\\udc80\"");
	assert_bytes(v, "bad\xff\xfename\x80", 10);
	tj_free(v);
	/* raw valid UTF-8 is kept */
	v = parse("\"caf\xc3\xa9 \xf0\x9f\x8e\x89\x7f\"");
	assert_bytes(v, "caf\xc3\xa9 \xf0\x9f\x8e\x89\x7f", 11);
	tj_free(v);
	/* a raw encoded U+DCB2 only with the flag */
	const char *raw = "\"a\xed\xb2\xb2\xed\xb3\xbf\"";
	assert_null(tj_parse(raw, strlen(raw)));
	v = tj_parse_flags(raw, strlen(raw), TJ_RAW_SURROGATES);
	assert_bytes(v, "a\xb2\xff", 3);
	tj_free(v);
}

static void test_rejects(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"", " ", "{", "[1,]", "[1 2]", "{\"a\"}", "{\"a\":1,}", "{a:1}", "{\"a\":1,\"a\":2}",
		"01", "-", "+1", "1.", ".5", "1e", "tru", "nul", "[1]x", "\"abc", "\"a\\x\"",
		"\"\\u12\"", "\"\\ud800\"", "\"\\ud83cx\"", "\"\\udc41\"", "\"\\udfff\"", "\"a\tb\"",
		"\"a\nb\"", "\"\xff\"", "\"\xc0\xaf\"", "\"\xe0\x80\xaf\"", "\"\xed\xa0\x80\"",
		"\"\xf4\x90\x80\x80\"", "\"\xc3\"", "\"\x80\"", "\"\xed\xb2\x80\"", "[\"a\"]]",
		"'a'", "NaN", "[1,,2]",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tj_value *v = parse(bad[i]);
		if (v)
			fail_msg("accepted: %s", bad[i]);
	}
	/* a NUL byte inside the text is not whitespace */
	assert_null(tj_parse("[1]\0", 4));
	/* deep nesting is refused, not a stack overflow */
	size_t n = 100000;
	char *deep = malloc(2 * n);
	assert_non_null(deep);
	memset(deep, '[', n);
	memset(deep + n, ']', n);
	assert_null(tj_parse(deep, 2 * n));
	tj_value *ok = tj_parse(deep + n - 500, 1000);
	assert_non_null(ok);
	tj_free(ok);
	free(deep);
}

static void test_lines(void **state)
{
	(void)state;
	const char *text = "{\"a\":1}\n[2]\n\"s\"\n";
	size_t count = 99;
	tj_value *v = tj_parse_lines(text, strlen(text), &count);
	assert_non_null(v);
	assert_int_equal(count, 3);
	assert_int_equal(tj_int(tj_get(tj_at(v, 0), "a")), 1);
	assert_int_equal(tj_int(tj_at(tj_at(v, 1), 0)), 2);
	assert_bytes(tj_at(v, 2), "s", 1);
	tj_free(v);

	v = tj_parse_lines("1\n2", 3, &count); /* the last newline may be missing */
	assert_int_equal(count, 2);
	tj_free(v);
	v = tj_parse_lines("", 0, &count);
	assert_non_null(v);
	assert_int_equal(count, 0);
	tj_free(v);
	assert_null(tj_parse_lines("1\n\n2\n", 5, &count));
	assert_null(tj_parse_lines("1\n{\n", 4, &count));
	assert_null(tj_parse_lines("1\n\xff\n", 4, NULL));
}

static void test_utf8_valid(void **state)
{
	(void)state;
	assert_true(tj_utf8_valid("", 0));
	assert_true(tj_utf8_valid("a\xc3\xa9\xef\xbf\xbe\xf4\x8f\xbf\xbf", 10));
	assert_false(tj_utf8_valid("\xc1\xbf", 2));
	assert_false(tj_utf8_valid("\xed\xbf\xbf", 3));
	assert_false(tj_utf8_valid("\xf0\x8f\xbf\xbf", 4));
	assert_false(tj_utf8_valid("\xf5\x80\x80\x80", 4));
	assert_false(tj_utf8_valid("\xe2\x82", 2));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scalars),
		cmocka_unit_test(test_objects),
		cmocka_unit_test(test_string_decoding),
		cmocka_unit_test(test_rejects),
		cmocka_unit_test(test_lines),
		cmocka_unit_test(test_utf8_valid),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
