/* Names shown to people (hv_text_escape) and long error messages (hv_error_set): nothing a
 * terminal acts on gets through, C1 controls included, and a message too long for the error
 * buffer keeps its reason. */
#include "testutil.h"

#include "harvest.h"
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_escape(const char *in, size_t len, const char *want)
{
	char out[256];
	size_t n = hv_text_escape(in, len, out, sizeof(out));
	if (strcmp(out, want) != 0)
		fail_msg("escape of %zu bytes gave \"%s\", expected \"%s\"", len, out, want);
	assert_int_equal(n, strlen(want));
	assert_true(n <= 4 * len);
}

#define ESC(lit, want) expect_escape(lit, sizeof(lit) - 1, want)

static void test_escape(void **state)
{
	(void)state;
	ESC("plain.txt", "plain.txt");
	ESC("", "");
	ESC("\x1b[2J", "\\x1b[2J");
	ESC("a\nb\tc\r", "a\\x0ab\\x09c\\x0d");
	ESC("\x7f", "\\x7f");
	ESC("back\\slash", "back\\\\slash");
	/* C1 controls are valid UTF-8, and still escaped: U+009B is CSI, U+0085 NEL. */
	ESC("\xc2\x9b" "2J", "\\xc2\\x9b2J");
	ESC("\xc2\x80\xc2\x9f", "\\xc2\\x80\\xc2\\x9f");
	ESC("\xc2\x85", "\\xc2\\x85");
	/* Just past them, printable characters are kept: U+00A0, U+00E9, U+20AC, U+1F600. */
	ESC("\xc2\xa0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\xc2\xa0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
	/* Bytes that are not UTF-8: alone, cut sequences, overlong forms, surrogates. */
	ESC("\xff", "\\xff");
	ESC("a\xe2\x82", "a\\xe2\\x82");
	ESC("\xc0\x80", "\\xc0\\x80");
	ESC("\xc1\x9b", "\\xc1\\x9b"); /* an overlong ESC [ */
	ESC("\xed\xa0\x80", "\\xed\\xa0\\x80");
	ESC("\x9b", "\\x9b");          /* a lone C1 byte (8-bit CSI) */
	expect_escape("a\0b", 3, "a\\x00b");
}

static void test_escape_cut(void **state)
{
	(void)state;
	/* snprintf-style: cut to cap - 1, NUL-terminated, the whole length returned. */
	char out[6];
	memset(out, 'Z', sizeof(out));
	assert_int_equal(hv_text_escape("\x1b\x1b", 2, out, sizeof(out)), 8);
	assert_string_equal(out, "\\x1b\\");
	assert_int_equal(hv_text_escape("abc", 3, NULL, 0), 3);
	char one[1] = {'Z'};
	assert_int_equal(hv_text_escape("abc", 3, one, 1), 3);
	assert_int_equal(one[0], '\0');
}

/* The reverse of hv_text_escape, written from its documentation: \\ and \xNN. */
static size_t unescape(const char *s, size_t len, char *out)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] != '\\') {
			out[n++] = s[i];
			continue;
		}
		assert_true(i + 1 < len);
		if (s[i + 1] == '\\') {
			out[n++] = '\\';
			i++;
			continue;
		}
		assert_true(i + 3 < len && s[i + 1] == 'x');
		unsigned v;
		char hex[3] = {s[i + 2], s[i + 3], 0};
		assert_int_equal(sscanf(hex, "%2x", &v), 1);
		out[n++] = (char)v;
		i += 3;
	}
	return n;
}

/* Every byte value alone, and every pair: the output holds no control byte, no C1 sequence and
 * no invalid UTF-8. */
static void test_escape_nothing_raw(void **state)
{
	(void)state;
	for (unsigned a = 0; a < 256; a++) {
		for (unsigned b = 0; b < 256; b++) {
			char in[2] = {(char)a, (char)b};
			char out[16];
			size_t n = hv_text_escape(in, 2, out, sizeof(out));
			assert_true(n < sizeof(out));
			for (size_t i = 0; i < n;) {
				unsigned char ch = (unsigned char)out[i];
				if (ch < 0x20 || ch == 0x7f)
					fail_msg("0x%02x 0x%02x: raw control 0x%02x", a, b, ch);
				size_t len = ch < 0x80 ? 1 : hv_utf8_char_length(out + i, n - i);
				if (len == 0)
					fail_msg("0x%02x 0x%02x: invalid UTF-8 out", a, b);
				if (ch == 0xc2 && (unsigned char)out[i + 1] < 0xa0)
					fail_msg("0x%02x 0x%02x: a C1 control out", a, b);
				i += len;
			}
			char back[16];
			size_t bn = unescape(out, n, back);
			if (bn != 2 || memcmp(back, in, 2) != 0)
				fail_msg("0x%02x 0x%02x: the escape does not give the bytes back", a, b);
		}
	}
}

/* A message longer than the error buffer keeps its start and, above all, its end: the
 * reason. */
static void test_long_error_keeps_reason(void **state)
{
	(void)state;
	size_t plen = 10000;
	char *path = tu_xmalloc(plen + 1);
	for (size_t i = 0; i < plen; i++)
		path[i] = i % 2 ? '/' : 'd';
	path[0] = 'S';
	path[plen] = '\0';
	assert_int_equal(hv_error_set(HV_EIO, "%s: %s", path, "Permission denied"), HV_EIO);
	const char *m = hv_error_last();
	size_t ml = strlen(m);
	assert_true(ml < 4096);
	assert_true(ml > 3000);
	assert_int_equal(m[0], 'S');
	const char *end = ": Permission denied";
	if (ml < strlen(end) || strcmp(m + ml - strlen(end), end) != 0)
		fail_msg("the reason is lost: \"...%s\"", m + (ml > 40 ? ml - 40 : 0));
	assert_non_null(strstr(m, "..."));
	assert_int_equal(hv_error_last_status(), HV_EIO);

	/* A cut never splits a character: the same with 3-byte characters. */
	size_t n3 = 3000;
	char *wide = tu_xmalloc(3 * n3 + 1);
	for (size_t i = 0; i < n3; i++)
		memcpy(wide + 3 * i, "\xe2\x82\xac", 3);
	wide[3 * n3] = '\0';
	hv_error_set(HV_EIO, "%s: %s", wide, "No such file or directory");
	m = hv_error_last();
	ml = strlen(m);
	for (size_t i = 0; i < ml;) {
		size_t len = (unsigned char)m[i] < 0x80 ? 1 : hv_utf8_char_length(m + i, ml - i);
		if (len == 0)
			fail_msg("a cut split a character at byte %zu", i);
		i += len;
	}
	assert_non_null(strstr(m, ": No such file or directory"));

	/* The message may be formatted from the last one. */
	hv_error_set(HV_EIO, "%s", "first");
	hv_error_set(HV_EIO, "%s, then %s", hv_error_last(), "second");
	assert_string_equal(hv_error_last(), "first, then second");
	hv_error_set(HV_EIO, "%s: %s", path, "Permission denied");
	hv_error_set(HV_EIO, "again: %s", hv_error_last());
	assert_non_null(strstr(hv_error_last(), "again: S/"));

	/* Kept whole across a cleanup that sets another error. */
	hv_error_set(HV_EIO, "%s: %s", path, "Permission denied");
	hv_error_saved saved;
	hv_error_save(&saved);
	hv_error_set(HV_EDB, "rollback failed");
	assert_int_equal(hv_error_restore(&saved, HV_EIO), HV_EIO);
	assert_int_equal(hv_error_last_status(), HV_EIO);
	ml = strlen(hv_error_last());
	assert_true(ml > 3000);
	assert_string_equal(hv_error_last() + ml - strlen(end), end);
	free(path);
	free(wide);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_escape_cut),
		cmocka_unit_test(test_escape_nothing_raw),
		cmocka_unit_test(test_long_error_keeps_reason),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
