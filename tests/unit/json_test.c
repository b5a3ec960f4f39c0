/* The JSON writer: exact strings (checked against the spec's vectors, an independent
 * code-point oracle and random round trips through tjson), structure, keys, numbers,
 * base64 and the fd writer's flushing and sticky errors. */
#include "testutil.h"
#include "tjson.h"

#include "harvest/json.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rnd(void)
{
	/* xorshift64*: a fixed seed, so every run tests the same strings */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(2685821657736338717);
}

static size_t rnd_below(size_t n)
{
	return (size_t)(rnd() % n);
}

static hv_json *new_buffer(hv_case kase)
{
	hv_json *j = NULL;
	assert_int_equal(hv_json_new_buffer(&j, kase), HV_OK);
	assert_non_null(j);
	return j;
}

/* Asserts that the buffer writer holds exactly want. */
static void assert_output(const hv_json *j, const char *want)
{
	size_t len = 0;
	const char *got = hv_json_buffer(j, &len);
	if (len != strlen(want) || memcmp(got, want, len) != 0)
		fail_msg("got    %.*s\nwanted %s", (int)len, got, want);
}

/* The JSON form of bytes written by a buffer writer, in a new NUL-terminated string. */
static char *writer_string(const char *bytes, size_t len, size_t *out_len)
{
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_json_string(j, bytes, len);
	size_t n = 0;
	const char *b = hv_json_buffer(j, &n);
	char *copy = malloc(n + 1);
	assert_non_null(copy);
	memcpy(copy, b, n);
	copy[n] = '\0';
	*out_len = n;
	hv_json_free(j);
	return copy;
}

/* Parses a JSON string with tjson and asserts it decodes to want (want_len bytes). */
static void assert_decodes_to(const char *json, size_t json_len, const char *want, size_t want_len)
{
	if (!tj_utf8_valid(json, json_len))
		fail_msg("output is not valid UTF-8: %.*s", (int)json_len, json);
	tj_value *v = tj_parse(json, json_len);
	if (!v)
		fail_msg("output is not valid JSON: %.*s", (int)json_len, json);
	size_t len = 0;
	const char *s = tj_str(v, &len);
	assert_non_null(s);
	assert_int_equal(len, want_len);
	assert_memory_equal(s, want, want_len);
	tj_free(v);
}

/* An independent statement of the rule, by code point rather than by byte ranges: a
 * sequence is kept when its lead byte's length matches, its continuation bytes are
 * 10xxxxxx, and the value it encodes is in its length's range, not a surrogate and at
 * most U+10FFFF; any other byte >= 0x80 is \udcXX. */
static size_t oracle_escape(const unsigned char *s, size_t len, char *out)
{
	static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
	char *o = out;
	*o++ = '"';
	for (size_t i = 0; i < len;) {
		unsigned c = s[i];
		size_t n = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xC0 && c < 0xE0 ? 2 : 1;
		if (n > 1 && i + n <= len) {
			uint32_t cp = c & (0x7Fu >> n);
			bool ok = true;
			for (size_t k = 1; k < n; k++) {
				ok = ok && (s[i + k] & 0xC0) == 0x80;
				cp = cp << 6 | (s[i + k] & 0x3F);
			}
			if (ok && cp >= min_cp[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF)) {
				memcpy(o, s + i, n);
				o += n;
				i += n;
				continue;
			}
		}
		if (c >= 0x80)
			o += sprintf(o, "\\udc%02x", c);
		else if (c == '"')
			o += sprintf(o, "\\\"");
		else if (c == '\\')
			o += sprintf(o, "\\\\");
		else if (c == '\b')
			o += sprintf(o, "\\b");
		else if (c == '\f')
			o += sprintf(o, "\\f");
		else if (c == '\n')
			o += sprintf(o, "\\n");
		else if (c == '\r')
			o += sprintf(o, "\\r");
		else if (c == '\t')
			o += sprintf(o, "\\t");
		else if (c < 0x20)
			o += sprintf(o, "\\u%04x", c);
		else
			*o++ = (char)c;
		i++;
	}
	*o++ = '"';
	*o = '\0';
	return (size_t)(o - out);
}

/* Checks one byte string every way: the writer, hv_json_escape and the oracle agree
 * exactly, and tjson decodes the output back to the bytes. */
static void check_string(const unsigned char *s, size_t len)
{
	char *want = malloc(6 * len + 3), *esc = malloc(6 * len + 3);
	assert_non_null(want);
	assert_non_null(esc);
	size_t want_len = oracle_escape(s, len, want);
	size_t esc_len = hv_json_escape((const char *)s, len, esc, 6 * len + 3);
	if (esc_len != want_len || memcmp(esc, want, want_len) != 0)
		fail_msg("hv_json_escape: got %s\nwanted %s", esc, want);
	assert_int_equal(esc[esc_len], '\0');
	size_t w_len = 0;
	char *w = writer_string((const char *)s, len, &w_len);
	assert_int_equal(w_len, want_len);
	assert_memory_equal(w, want, want_len);
	assert_decodes_to(w, w_len, (const char *)s, len);
	free(w);
	free(esc);
	free(want);
}

static size_t hex_decode(const char *hex, unsigned char *out)
{
	size_t n = strlen(hex) / 2;
	for (size_t i = 0; i < n; i++) {
		unsigned b;
		assert_int_equal(sscanf(hex + 2 * i, "%2x", &b), 1);
		out[i] = (unsigned char)b;
	}
	return n;
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("%s: %s", path, strerror(errno));
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	assert_non_null(buf);
	size_t k;
	while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
		n += k;
		if (n == cap) {
			buf = realloc(buf, cap *= 2);
			assert_non_null(buf);
		}
	}
	fclose(f);
	*len = n;
	return buf;
}

/* ---- strings ---------------------------------------------------------------------- */

static void test_spec_vectors(void **state)
{
	(void)state;
	size_t len = 0, count = 0;
	char *text = read_file(HARVEST_SOURCE_DIR "/tests/data/string-escapes.jsonl", &len);
	tj_value *lines = tj_parse_lines(text, len, &count);
	assert_non_null(lines);
	assert_int_equal(count, 20);
	for (size_t i = 0; i < count; i++) {
		const tj_value *line = tj_at(lines, i);
		const char *hex = tj_str(tj_get(line, "hex"), NULL);
		size_t canon_len = 0;
		const char *canon = tj_str(tj_get(line, "canonical"), &canon_len);
		assert_non_null(hex);
		assert_non_null(canon);
		unsigned char bytes[256];
		size_t n = hex_decode(hex, bytes);

		/* The canonical form decodes to the bytes (this checks tjson) ... */
		assert_decodes_to(canon, canon_len, (const char *)bytes, n);
		/* ... and so does ours, and ours is what the oracle says, byte for byte. */
		check_string(bytes, n);
		/* Where ours is plain ASCII (no raw character to write as \u), it is the
		 * canonical form exactly. */
		char ours[6 * 256 + 3];
		size_t ours_len = hv_json_escape((const char *)bytes, n, ours, sizeof(ours));
		bool plain = true;
		for (size_t k = 0; k < ours_len; k++)
			plain = plain && (unsigned char)ours[k] < 0x7f;
		if (plain) {
			assert_int_equal(ours_len, canon_len);
			assert_memory_equal(ours, canon, canon_len);
		}
	}
	tj_free(lines);
	free(text);
}

static void test_exact_escapes(void **state)
{
	(void)state;
	static const struct {
		const char *in;
		size_t len;
		const char *out;
	} cases[] = {
		{"", 0, "\"\""},
		{"plain.txt", 9, "\"plain.txt\""},
		{"\b\f\n\r\t\v\x01\x1f", 8, "\"\\b\\f\\n\\r\\t\\u000b\\u0001\\u001f\""},
		{"\x7f \x20~", 4, "\"\x7f  ~\""},
		{"q\"b\\s/", 6, "\"q\\\"b\\\\s/\""},
		{"\0x", 2, "\"\\u0000x\""},
		{"caf\xc3\xa9", 5, "\"caf\xc3\xa9\""},
		{"\xef\xbf\xbe\xf4\x8f\xbf\xbf", 7, "\"\xef\xbf\xbe\xf4\x8f\xbf\xbf\""},
		{"\xff\xFE\xaB", 3, "\"\\udcff\\udcfe\\udcab\""},
		{"\xed\xb2\x80", 3, "\"\\udced\\udcb2\\udc80\""},
		{"\xf0\x9f\x8e", 3, "\"\\udcf0\\udc9f\\udc8e\""},
		{"\xf0\x9f\x8e\x89", 4, "\"\xf0\x9f\x8e\x89\""},
		{"abcdefgh\"ijklmnopqrstuvw\\xyz0123456\n", 36,
		 "\"abcdefgh\\\"ijklmnopqrstuvw\\\\xyz0123456\\n\""},
		{"abcdefg\xc3\xa9hijklmno\xe2\x82pqr", 22,
		 "\"abcdefg\xc3\xa9hijklmno\\udce2\\udc82pqr\""},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		hv_json *j = new_buffer(HV_CASE_SNAKE);
		hv_json_string(j, cases[i].in, cases[i].len);
		assert_output(j, cases[i].out);
		hv_json_free(j);
		check_string((const unsigned char *)cases[i].in, cases[i].len);
	}
	hv_json *j = new_buffer(HV_CASE_CAMEL);
	hv_json_cstring(j, "is_dir"); /* values are never case-converted */
	assert_output(j, "\"is_dir\"");
	hv_json_free(j);
}

/* Every 1- and 2-byte string, and the 3- and 4-byte strings whose first bytes cover every
 * lead and whose later bytes cover every boundary, each behind an ASCII prefix of 0..9
 * bytes so the word-at-a-time scan meets them at every alignment. */
static void test_oracle_exhaustive(void **state)
{
	(void)state;
	static const unsigned char tails[] = {0x00, 0x22, 0x41, 0x5c, 0x7f, 0x80, 0x8f, 0x90,
					      0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xe0, 0xed, 0xf0, 0xf4, 0xff};
	static const unsigned char leads4[] = {0xe0, 0xe1, 0xed, 0xee, 0xef, 0xf0, 0xf1,
					       0xf3, 0xf4, 0xf5, 0xf7, 0xf8};
	unsigned char buf[32];
	memcpy(buf, "abcdefghi", 9);
	size_t round = 0;
	for (unsigned a = 0; a < 256; a++) {
		for (unsigned b = 0; b < 256; b++) {
			size_t p = round++ % 10;
			buf[p] = (unsigned char)a;
			buf[p + 1] = (unsigned char)b;
			if (b == 0)
				check_string(buf, p + 1);
			check_string(buf, p + 2);
			if (a < 0xc0)
				continue;
			for (size_t t = 0; t < sizeof(tails); t++) {
				buf[p + 2] = tails[t];
				check_string(buf, p + 3);
			}
			memcpy(buf, "abcdefghi", 9);
		}
	}
	for (size_t l = 0; l < sizeof(leads4); l++) {
		for (unsigned b = 0; b < 256; b++) {
			for (size_t t = 0; t < sizeof(tails); t += 2) {
				for (size_t u = 1; u < sizeof(tails); u += 3) {
					size_t p = round++ % 10;
					unsigned char s[16];
					memcpy(s, "abcdefghi", 9);
					s[p] = leads4[l];
					s[p + 1] = (unsigned char)b;
					s[p + 2] = tails[t];
					s[p + 3] = tails[u];
					s[p + 4] = 'z';
					check_string(s, p + 5);
				}
			}
		}
	}
}

/* Every byte value at every position of plain ASCII strings 1..24 bytes long, alone and
 * with a second byte needing escape after it (at every distance), so the word-at-a-time scan
 * meets a byte to escape at every place in a word, in the short tail read as a word that
 * overlaps the bytes already written, and right after another escape whose borrow could
 * flag a plain byte. */
static void test_every_byte_every_position(void **state)
{
	(void)state;
	unsigned char buf[48];
	for (size_t len = 1; len <= 24; len++) {
		for (size_t pos = 0; pos < len; pos++) {
			for (unsigned c = 0; c < 256; c++) {
				for (size_t k = 0; k < len; k++)
					buf[k] = (unsigned char)('a' + (k % 26));
				buf[pos] = (unsigned char)c;
				check_string(buf, len);
				if (pos + 1 < len && c % 17 == 0) {
					for (size_t q = pos + 1; q < len; q++) {
						unsigned char keep = buf[q];
						buf[q] = q % 2 ? 0x01 : 0xe9;
						check_string(buf, len);
						buf[q] = keep;
					}
				}
			}
		}
	}
}

/* Strings are read 16 bytes at a time, then 8, and the short tails (2..7 bytes after the
 * last whole word, or a whole string under 8 bytes) as one word, by two overlapping loads
 * or by the word that ends the string: each string 1..40 bytes long lies against an
 * unmapped page, ending at one (so a load past its end faults) and starting at one (so a
 * load before it faults), with every byte value at each of its first and last 8 positions
 * and every eighth, and the output is the oracle's, byte for byte. */
static void test_short_tails_at_page_edges(void **state)
{
	(void)state;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *map = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(map != MAP_FAILED);
	assert_int_equal(mprotect(map, page, PROT_NONE), 0);
	assert_int_equal(mprotect(map + 2 * page, page, PROT_NONE), 0);
	unsigned char *first = map + page, *end = map + 2 * page;
	for (size_t len = 1; len <= 40; len++) {
		unsigned char *places[2] = {end - len, first};
		for (int at = 0; at < 2; at++) {
			unsigned char *s = places[at];
			for (size_t pos = 0; pos < len; pos++) {
				if (pos >= 8 && pos + 8 < len && pos % 8 != 0)
					continue;
				for (unsigned c = 0; c < 256; c++) {
					for (size_t k = 0; k < len; k++)
						s[k] = (unsigned char)('a' + (k % 26));
					s[pos] = (unsigned char)c;
					check_string(s, len);
					/* and a second one to escape just before it, whose
					 * borrow could flag a plain byte of the tail */
					if (pos > 0 && c % 5 == 0) {
						s[pos - 1] = (unsigned char)(c % 2 ? '"' : 0x1f);
						check_string(s, len);
					}
				}
			}
		}
	}
	munmap(map, 3 * page);
}

/* Long strings, longer than one pass through the writer's buffer, with bytes to escape and
 * multi-byte characters placed across the ends of the passes and of words. */
static void test_long_strings(void **state)
{
	(void)state;
	static const size_t lens[] = {4095, 4096, 4097, 8191, 8192, 8200, 20000};
	static const char *pieces[] = {"\"", "\\", "\n", "\x01", "\xc3\xa9", "\xe6\x97\xa5",
				       "\xf0\x9f\x98\x80", "\xff", "\xc3", "\xed\xa0\x80"};
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		size_t len = lens[l];
		unsigned char *s = malloc(len);
		assert_non_null(s);
		for (size_t p = 0; p < sizeof(pieces) / sizeof(pieces[0]); p++) {
			for (size_t k = 0; k < len; k++)
				s[k] = (unsigned char)('A' + (k % 23));
			size_t n = strlen(pieces[p]);
			/* Around 4096 (a pass) and every 509 bytes (odd, so every alignment). */
			for (size_t at = 4090; at + n <= len && at < 4100; at++)
				memcpy(s + at, pieces[p], n);
			for (size_t at = 3; at + n <= len; at += 509)
				memcpy(s + at, pieces[p], n);
			check_string(s, len);
		}
		/* All plain, and all escapes. */
		for (size_t k = 0; k < len; k++)
			s[k] = (unsigned char)('a' + (k % 26));
		check_string(s, len);
		memset(s, '\n', len);
		check_string(s, len);
		memset(s, 0xff, len);
		check_string(s, len);
		free(s);
	}
}

/* A random valid UTF-8 sequence of 2..4 bytes at o; returns its length. */
static size_t random_char(unsigned char *o)
{
	uint32_t cp;
	switch (rnd_below(3)) {
	case 0:
		cp = 0x80 + (uint32_t)rnd_below(0x800 - 0x80);
		o[0] = (unsigned char)(0xC0 | cp >> 6);
		o[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	case 1:
		do
			cp = 0x800 + (uint32_t)rnd_below(0x10000 - 0x800);
		while (cp >= 0xD800 && cp <= 0xDFFF);
		o[0] = (unsigned char)(0xE0 | cp >> 12);
		o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	default:
		cp = 0x10000 + (uint32_t)rnd_below(0x110000 - 0x10000);
		o[0] = (unsigned char)(0xF0 | cp >> 18);
		o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		o[3] = (unsigned char)(0x80 | (cp & 0x3F));
		return 4;
	}
}

/* Random pieces: ASCII runs, control and special characters, valid characters, random
 * bytes, and valid characters cut short. */
static size_t random_string(unsigned char *s, size_t max)
{
	size_t n = 0;
	while (n + 8 <= max && rnd_below(12) != 0) {
		switch (rnd_below(6)) {
		case 0: {
			size_t run = 1 + rnd_below(20);
			for (size_t k = 0; k < run && n < max; k++)
				s[n++] = (unsigned char)(0x20 + rnd_below(95));
			break;
		}
		case 1:
			s[n++] = "\"\\\n\t\x01\x7f/\0"[rnd_below(8)];
			break;
		case 2:
		case 3:
			n += random_char(s + n);
			break;
		case 4:
			s[n++] = (unsigned char)rnd();
			break;
		default: {
			unsigned char c[4];
			size_t k = random_char(c);
			size_t cut = 1 + rnd_below(k - 1);
			memcpy(s + n, c, cut);
			n += cut;
			break;
		}
		}
	}
	return n;
}

static void test_random_roundtrip(void **state)
{
	(void)state;
	unsigned char s[256];
	for (int i = 0; i < 30000; i++) {
		size_t n = random_string(s, sizeof(s));
		check_string(s, n);
	}
	/* Long strings: the writer and hv_json_escape work in chunks, and a character may
	 * straddle a chunk boundary. */
	size_t big = 3 * 4096 + 100;
	unsigned char *b = malloc(big);
	assert_non_null(b);
	for (int i = 0; i < 40; i++) {
		size_t n = 0;
		while (n + 256 <= big)
			n += random_string(b + n, 256);
		check_string(b, n);
	}
	static const char *const inserts[] = {"\xf0\x9f\x8e\x89", "\xe6\x97\xa5", "\xc3\xa9",
					       "\xff", "\n", "\xe2\x82"};
	static const size_t boundaries[] = {512, 4096, 8192};
	for (size_t bi = 0; bi < 3; bi++) {
		for (size_t off = boundaries[bi] - 5; off <= boundaries[bi] + 1; off++) {
			for (size_t k = 0; k < sizeof(inserts) / sizeof(inserts[0]); k++) {
				size_t il = strlen(inserts[k]);
				memset(b, 'a', off);
				memcpy(b + off, inserts[k], il);
				memset(b + off + il, 'b', 10);
				check_string(b, off + il + 10);
			}
		}
	}
	free(b);
}

static void test_escape_snprintf(void **state)
{
	(void)state;
	char out[8];
	memset(out, 'X', sizeof(out));
	assert_int_equal(hv_json_escape("a\n", 2, out, 4), 5); /* "a\n" */
	assert_memory_equal(out, "\"a\\\0", 4);
	assert_int_equal(out[4], 'X');
	assert_int_equal(hv_json_escape("a\n", 2, NULL, 0), 5);
	assert_int_equal(hv_json_escape("a\n", 2, out, 6), 5);
	assert_string_equal(out, "\"a\\n\"");
	assert_int_equal(hv_json_escape("\xff", 1, out, sizeof(out)), 8);
	assert_int_equal(out[7], '\0');
}

/* ---- structure, keys ---------------------------------------------------------------- */

static void test_structure(void **state)
{
	(void)state;
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_json_object_begin(j);
	hv_json_key(j, "a");
	hv_json_array_begin(j);
	hv_json_int(j, 1);
	hv_json_object_begin(j);
	hv_json_key(j, "b");
	hv_json_array_begin(j);
	hv_json_array_end(j);
	hv_json_object_end(j);
	hv_json_array_begin(j);
	hv_json_array_end(j);
	hv_json_object_begin(j);
	hv_json_object_end(j);
	hv_json_raw(j, "{\"r\":1}", 7);
	hv_json_bool(j, true);
	hv_json_null(j);
	hv_json_array_end(j);
	hv_json_key(j, "c");
	hv_json_object_begin(j);
	hv_json_key(j, "d");
	hv_json_null(j);
	hv_json_object_end(j);
	hv_json_key(j, "e");
	hv_json_cstring(j, "x");
	hv_json_object_end(j);
	hv_json_newline(j);
	hv_json_array_begin(j);
	hv_json_uint(j, 1);
	hv_json_uint(j, 2);
	hv_json_array_end(j);
	hv_json_newline(j);
	hv_json_cstring(j, "top");
	hv_json_newline(j);
	hv_json_int(j, 7);
	hv_json_newline(j);
	assert_output(j, "{\"a\":[1,{\"b\":[]},[],{},{\"r\":1},true,null],\"c\":{\"d\":null},\"e\":\"x\"}\n"
			 "[1,2]\n\"top\"\n7\n");
	size_t len = 0, count = 0;
	const char *out = hv_json_buffer(j, &len);
	tj_value *docs = tj_parse_lines(out, len, &count);
	assert_non_null(docs);
	assert_int_equal(count, 4);
	tj_free(docs);
	hv_json_free(j);
}

/* Nesting is limited by memory only: 200,000 levels, each with a sibling before it. */
static void test_deep_nesting(void **state)
{
	(void)state;
	const size_t depth = 200000;
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	for (size_t i = 0; i < depth; i++) {
		hv_json_array_begin(j);
		hv_json_int(j, 0);
	}
	for (size_t i = 0; i < depth; i++) {
		hv_json_array_end(j);
		if (i == depth / 2)
			hv_json_int(j, 1); /* a comma: the level below still had a member */
	}
	hv_json_newline(j);
	size_t len = 0;
	const char *out = hv_json_buffer(j, &len);
	/* "[0,[0,...[0" then "]]...]" with ",1" once */
	assert_int_equal(len, (3 * depth - 1) + depth + 2 + 1);
	for (size_t i = 0; i + 1 < depth; i++)
		assert_memory_equal(out + 3 * i, "[0,", 3);
	const char *tail = out + 3 * depth - 1;
	assert_memory_equal(tail - 2, "[0]", 3);
	for (size_t i = 0; i < depth; i++) {
		if (i == depth / 2 + 1) {
			assert_memory_equal(tail, ",1", 2);
			tail += 2;
		}
		assert_int_equal(*tail++, ']');
	}
	assert_int_equal(*tail, '\n');
	assert_int_equal(hv_json_status(j), HV_OK);
	hv_json_free(j);
}

static void write_record(hv_json *j)
{
	hv_json_object_begin(j);
	hv_json_key_null(j, "leading_unknown");
	hv_json_key(j, "name");
	hv_json_cstring(j, "a.txt");
	hv_json_key(j, "is_dir");
	hv_json_bool(j, false);
	hv_json_key_null(j, "size");
	hv_json_key(j, "mime_type");
	hv_json_cstring(j, "text/plain");
	hv_json_key(j, "stdout_truncated");
	hv_json_bool(j, true);
	hv_json_key(j, "type");
	hv_json_enum(j, "stream_chunk");
	hv_json_key(j, "output_files");
	hv_json_array_begin(j);
	hv_json_enum(j, "execution_result");
	hv_json_enum(j, "plain");
	hv_json_array_end(j);
	hv_json_key(j, "ctime_ns2_x");
	hv_json_int(j, 5);
	hv_json_key(j, "_private__x_");
	hv_json_int(j, 6);
	hv_json_key_null(j, "trailing_unknown");
	hv_json_object_end(j);
}

static void test_keys_and_case(void **state)
{
	(void)state;
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	assert_int_equal(hv_json_case(j), HV_CASE_SNAKE);
	write_record(j);
	assert_output(j, "{\"leading_unknown\":null,\"name\":\"a.txt\",\"is_dir\":false,\"size\":null,"
			 "\"mime_type\":\"text/plain\",\"stdout_truncated\":true,\"type\":\"stream_chunk\","
			 "\"output_files\":[\"execution_result\",\"plain\"],\"ctime_ns2_x\":5,\"_private__x_\":6,"
			 "\"trailing_unknown\":null}");
	hv_json_free(j);

	j = new_buffer(HV_CASE_CAMEL);
	assert_int_equal(hv_json_case(j), HV_CASE_CAMEL);
	write_record(j);
	assert_output(j, "{\"name\":\"a.txt\",\"isDir\":false,\"mimeType\":\"text/plain\","
			 "\"stdoutTruncated\":true,\"type\":\"streamChunk\","
			 "\"outputFiles\":[\"executionResult\",\"plain\"],\"ctimeNs2X\":5,\"_private_X_\":6}");
	hv_json_free(j);

	/* An object whose every member is unknown stays valid in camel case. */
	j = new_buffer(HV_CASE_CAMEL);
	hv_json_array_begin(j);
	hv_json_object_begin(j);
	hv_json_key_null(j, "size");
	hv_json_object_end(j);
	hv_json_object_begin(j);
	hv_json_key_null(j, "size");
	hv_json_key(j, "is_dir");
	hv_json_null(j);
	hv_json_object_end(j);
	hv_json_array_end(j);
	assert_output(j, "[{},{\"isDir\":null}]");
	hv_json_free(j);
}

/* Keys take their own path (the comma, the quoted name and the colon at once, names shorter
 * than a word checked as one word): every byte value at every position of keys 1..10 bytes
 * long, a first and a second member, equal to the oracle's escape of the same bytes. */
static void test_short_keys_every_byte(void **state)
{
	(void)state;
	char key[16], want[2 * (6 * 10 + 2) + 16];
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	for (size_t len = 1; len <= 10; len++) {
		for (size_t pos = 0; pos < len; pos++) {
			for (unsigned c = 1; c < 256; c++) { /* a key is a C string: no NUL */
				for (size_t k = 0; k < len; k++)
					key[k] = (char)('a' + (k % 26));
				key[pos] = (char)c;
				key[len] = '\0';
				hv_json_buffer_reset(j);
				hv_json_object_begin(j);
				hv_json_key(j, key);
				hv_json_int(j, 1);
				hv_json_key(j, key);
				hv_json_int(j, 2);
				hv_json_object_end(j);
				char esc[6 * 10 + 3];
				size_t n = oracle_escape((const unsigned char *)key, len, esc);
				snprintf(want, sizeof(want), "{%.*s:1,%.*s:2}", (int)n, esc, (int)n, esc);
				assert_output(j, want);
			}
		}
	}
	hv_json_free(j);
}

/* Keys of every length around the one-pass path's limit (32) and past it, plain and with a
 * byte to escape at their start, middle or end, in snake and camel case: hv_json_key writes
 * what the oracle does, and the plain-key call (HV_JSON_KEY) what hv_json_key does. */
static void test_keys_every_length(void **state)
{
	(void)state;
	char key[48], want[2 * (6 * 48 + 2) + 16];
	const hv_case cases[2] = {HV_CASE_SNAKE, HV_CASE_CAMEL};
	for (int kc = 0; kc < 2; kc++) {
		hv_json *j = new_buffer(cases[kc]);
		hv_json *ref = new_buffer(cases[kc]);
		for (size_t len = 1; len < sizeof(key); len++) {
			for (int bad = -1; bad < 3; bad++) {
				for (size_t k = 0; k < len; k++)
					key[k] = (char)(k % 3 == 1 ? '_' : 'a' + (k % 26));
				key[len] = '\0';
				size_t at = bad == 0 ? 0 : bad == 1 ? len / 2 : len - 1;
				if (bad >= 0)
					key[at] = bad == 2 ? '"' : '\x01';
				hv_json_buffer_reset(j);
				hv_json_object_begin(j);
				hv_json_key(j, key);
				hv_json_int(j, 1);
				hv_json_key(j, key);
				hv_json_int(j, 2);
				hv_json_object_end(j);
				if (kc == 0) {
					char esc[6 * 48 + 3];
					size_t n = oracle_escape((const unsigned char *)key, len, esc);
					snprintf(want, sizeof(want), "{%.*s:1,%.*s:2}", (int)n, esc,
						 (int)n, esc);
					assert_output(j, want);
				}
				if (bad >= 0)
					continue; /* HV_JSON_KEY is for plain keys only */
				hv_json_buffer_reset(ref);
				hv_json_object_begin(ref);
				hv__json_key_plain(ref, key, len);
				hv_json_int(ref, 1);
				hv__json_key_plain(ref, key, len);
				hv_json_int(ref, 2);
				hv_json_object_end(ref);
				size_t jl = 0, rl = 0;
				const char *jt = hv_json_buffer(j, &jl), *rt = hv_json_buffer(ref, &rl);
				assert_int_equal(jl, rl);
				assert_memory_equal(jt, rt, jl);
			}
		}
		hv_json_free(j);
		hv_json_free(ref);
	}
	/* The literal form, as the records use it. */
	hv_json *j = new_buffer(HV_CASE_CAMEL);
	hv_json_object_begin(j);
	HV_JSON_KEY(j, "is_dir");
	hv_json_bool(j, true);
	HV_JSON_KEY(j, "n");
	hv_json_int(j, 1);
	hv_json_object_end(j);
	assert_output(j, "{\"isDir\":true,\"n\":1}");
	hv_json_free(j);
}

/* Short strings and keys written through an fd writer so that each lands at every offset
 * around the end of its 64 KiB buffer: what reaches the file is what a memory writer
 * makes of the same calls. */
static void test_short_strings_at_buffer_end(void **state)
{
	(void)state;
	static const char *const names[] = {"a", "ab", "a\"b", "abcdefg", "\x01" "bc", "\xc3\xa9t\xe9",
					    "abcdefgh", "f8_a_tml_mp.json"};
	for (size_t shift = 0; shift < 24; shift++) {
		char path[] = "/tmp/hv-json-end-XXXXXX";
		int fd = mkstemp(path);
		assert_true(fd >= 0);
		unlink(path);
		hv_json *f = NULL;
		assert_int_equal(hv_json_new_fd(&f, fd, HV_CASE_SNAKE), HV_OK);
		hv_json *m = new_buffer(HV_CASE_SNAKE);
		hv_json *both[2] = {f, m};
		for (int w = 0; w < 2; w++) {
			/* Padding that leaves the buffer (64 KiB) shift + 24 bytes short of full,
			 * then records of short keys and strings across its end. */
			char pad[1024];
			memset(pad, 'p', sizeof(pad));
			size_t fill = 64 * 1024 - 24 - shift;
			while (fill > 0) {
				size_t k = fill > sizeof(pad) + 2 ? sizeof(pad) : fill - 2;
				hv_json_string(both[w], pad, k);
				fill -= k + 2;
			}
			for (size_t i = 0; i < 40; i++) {
				const char *s = names[i % (sizeof(names) / sizeof(names[0]))];
				hv_json_object_begin(both[w]);
				hv_json_key(both[w], i % 2 ? "is_dir" : "n");
				hv_json_string(both[w], s, strlen(s));
				hv_json_object_end(both[w]);
			}
		}
		assert_int_equal(hv_json_flush(f), HV_OK);
		size_t mlen = 0;
		const char *mtext = hv_json_buffer(m, &mlen);
		char *got = malloc(mlen + 1);
		assert_non_null(got);
		assert_int_equal(pread(fd, got, mlen + 1, 0), (ssize_t)mlen);
		assert_memory_equal(got, mtext, mlen);
		free(got);
		hv_json_free(f);
		hv_json_free(m);
		close(fd);
	}
}

static void test_buffer_reset(void **state)
{
	(void)state;
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_json_object_begin(j);
	hv_json_key(j, "a");
	hv_json_int(j, 1);
	assert_int_equal(hv_json_pending(j), 6);
	hv_json_buffer_reset(j);
	assert_int_equal(hv_json_pending(j), 0);
	hv_json_key(j, "b"); /* the structure is kept: a comma comes first */
	hv_json_int(j, 2);
	hv_json_object_end(j);
	assert_output(j, ",\"b\":2}");
	assert_int_equal(hv_json_flush(j), HV_OK);
	hv_json_free(j);
	hv_json_free(NULL);
}

/* ---- numbers and base64 ------------------------------------------------------------- */

static void test_integers(void **state)
{
	(void)state;
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_json_array_begin(j);
	hv_json_int(j, 0);
	hv_json_int(j, -1);
	hv_json_int(j, 9);
	hv_json_int(j, 10);
	hv_json_int(j, 99);
	hv_json_int(j, 100);
	hv_json_int(j, INT64_MIN);
	hv_json_int(j, INT64_MAX);
	hv_json_uint(j, 0);
	hv_json_uint(j, UINT64_MAX);
	hv_json_array_end(j);
	assert_output(j, "[0,-1,9,10,99,100,-9223372036854775808,9223372036854775807,0,"
			 "18446744073709551615]");
	size_t len = 0;
	const char *out = hv_json_buffer(j, &len);
	tj_value *v = tj_parse(out, len);
	assert_true(tj_int(tj_at(v, 6)) == INT64_MIN);
	assert_true(tj_uint(tj_at(v, 9)) == UINT64_MAX);
	tj_free(v);
	hv_json_free(j);

	/* Random values of every magnitude against printf. */
	for (int i = 0; i < 20000; i++) {
		uint64_t u = rnd() >> rnd_below(64);
		int64_t s = (int64_t)(rnd() >> (1 + rnd_below(63))) * (i % 2 ? -1 : 1);
		char want[64];
		snprintf(want, sizeof(want), "%" PRIu64 ",%" PRId64, u, s);
		j = new_buffer(HV_CASE_SNAKE);
		hv_json_array_begin(j);
		hv_json_uint(j, u);
		hv_json_int(j, s);
		char wrapped[70];
		snprintf(wrapped, sizeof(wrapped), "[%s", want);
		assert_output(j, wrapped);
		hv_json_free(j);
	}
}

static void test_base64_rfc4648(void **state)
{
	(void)state;
	static const char *const vectors[][2] = {
		{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
		{"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
	};
	for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		hv_json *j = new_buffer(HV_CASE_SNAKE);
		hv_json_array_begin(j);
		hv_json_base64(j, vectors[i][0], strlen(vectors[i][0]));
		hv_json_base64(j, vectors[i][0], strlen(vectors[i][0]));
		hv_json_array_end(j);
		char want[64];
		snprintf(want, sizeof(want), "[\"%s\",\"%s\"]", vectors[i][1], vectors[i][1]);
		assert_output(j, want);
		hv_json_free(j);
	}
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_json_base64(j, "\xff\xfe\xfd\x00\x3e\x3f", 6);
	assert_output(j, "\"//79AD4/\"");
	hv_json_free(j);
}

/* base64 written in pieces (each a multiple of 3 but the last) is that of the whole, for
 * every way of cutting a short input and random cuts of a large one. */
static void test_base64_pieces(void **state)
{
	(void)state;
	size_t max = (3 << 16) + 2;
	unsigned char *data = malloc(max);
	assert_non_null(data);
	for (size_t i = 0; i < max; i++)
		data[i] = (unsigned char)rnd();
	for (size_t len = 0; len <= max; len = len < 64 ? len + 1 : len * 2 + 1) {
		if (len > max)
			len = max;
		hv_json *whole = new_buffer(HV_CASE_SNAKE);
		hv_json_array_begin(whole);
		hv_json_base64(whole, data, len);
		hv_json_base64(whole, data, len / 2);
		hv_json *parts = new_buffer(HV_CASE_SNAKE);
		hv_json_array_begin(parts);
		for (int twice = 0; twice < 2; twice++) {
			size_t n = twice ? len / 2 : len;
			hv_json_base64_begin(parts);
			for (size_t off = 0; off < n;) {
				size_t k = 3 * (1 + rnd_below(1000));
				if (k > n - off)
					k = n - off;
				hv_json_base64_part(parts, data + off, k);
				off += k;
			}
			hv_json_base64_end(parts);
		}
		size_t wl, pl;
		const char *w = hv_json_buffer(whole, &wl);
		const char *p = hv_json_buffer(parts, &pl);
		assert_int_equal(pl, wl);
		assert_memory_equal(p, w, wl);
		hv_json_free(whole);
		hv_json_free(parts);
		if (len == max)
			break;
	}
	free(data);
}

/* Large inputs against OpenSSL's encoder, at every length modulo 3. */
static void test_base64_large(void **state)
{
	(void)state;
	size_t max = (1 << 20) + 2;
	unsigned char *data = malloc(max);
	unsigned char *want = malloc(max / 3 * 4 + 8);
	assert_non_null(data);
	assert_non_null(want);
	for (size_t i = 0; i < max; i++)
		data[i] = (unsigned char)rnd();
	for (size_t len = max - 2; len <= max; len++) {
		int n = EVP_EncodeBlock(want, data, (int)len);
		hv_json *j = new_buffer(HV_CASE_SNAKE);
		hv_json_base64(j, data, len);
		size_t got_len = 0;
		const char *got = hv_json_buffer(j, &got_len);
		assert_int_equal(got_len, (size_t)n + 2);
		assert_int_equal(got[0], '"');
		assert_memory_equal(got + 1, want, (size_t)n);
		assert_int_equal(got[got_len - 1], '"');
		hv_json_free(j);
	}
	free(want);
	free(data);
}

/* ---- fd writer ---------------------------------------------------------------------- */

typedef struct drain {
	int fd;
	char *data;
	size_t len;
} drain;

/* Reads fd to EOF in a thread, slowly at first so the writer meets a full pipe. */
static void *drain_main(void *arg)
{
	drain *d = arg;
	size_t cap = 1 << 16;
	d->data = malloc(cap);
	for (int reads = 0;; reads++) {
		if (reads < 8)
			usleep(2000);
		if (d->len == cap)
			d->data = realloc(d->data, cap *= 2);
		ssize_t n = read(d->fd, d->data + d->len, reads < 8 ? 1000 : cap - d->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		d->len += (size_t)n;
	}
	return NULL;
}

/* What the fd writer must produce: a few megabytes of records with big strings and base64. */
static void write_workload(hv_json *j, const unsigned char *blob, size_t blob_len, size_t *max_pending)
{
	for (int r = 0; r < 6; r++) {
		hv_json_object_begin(j);
		hv_json_key(j, "path");
		hv_json_string(j, (const char *)blob, blob_len / (size_t)(r + 1));
		hv_json_key(j, "content");
		hv_json_base64(j, blob, blob_len - (size_t)r);
		hv_json_key(j, "n");
		hv_json_int(j, r);
		hv_json_object_end(j);
		hv_json_newline(j);
		if (max_pending && hv_json_pending(j) > *max_pending)
			*max_pending = hv_json_pending(j);
	}
}

static void check_fd_writer(bool nonblocking)
{
	size_t blob_len = 300000;
	unsigned char *blob = malloc(blob_len);
	assert_non_null(blob);
	size_t n = 0;
	while (n + 256 <= blob_len)
		n += random_string(blob + n, 256);
	blob_len = n;

	hv_json *mem = new_buffer(HV_CASE_SNAKE);
	write_workload(mem, blob, blob_len, NULL);
	size_t want_len = 0;
	const char *want = hv_json_buffer(mem, &want_len);

	int p[2];
	assert_int_equal(pipe(p), 0);
	if (nonblocking)
		assert_int_equal(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
	drain d = {.fd = p[0]};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, drain_main, &d), 0);
	hv_json *j = NULL;
	assert_int_equal(hv_json_new_fd(&j, p[1], HV_CASE_SNAKE), HV_OK);
	size_t max_pending = 0;
	write_workload(j, blob, blob_len, &max_pending);
	assert_true(max_pending <= 64 * 1024); /* streamed, never the whole output at once */
	assert_int_equal(hv_json_flush(j), HV_OK);
	assert_int_equal(hv_json_pending(j), 0);
	assert_int_equal(hv_json_status(j), HV_OK);
	hv_json_free(j);
	close(p[1]);
	pthread_join(t, NULL);
	close(p[0]);

	assert_int_equal(d.len, want_len);
	assert_memory_equal(d.data, want, want_len);
	size_t count = 0;
	tj_value *docs = tj_parse_lines(d.data, d.len, &count);
	assert_non_null(docs);
	assert_int_equal(count, 6);
	for (size_t r = 0; r < count; r++) {
		size_t plen = 0;
		const char *path = tj_str(tj_get(tj_at(docs, r), "path"), &plen);
		assert_int_equal(plen, blob_len / (r + 1));
		assert_memory_equal(path, blob, plen);
		assert_int_equal(tj_int(tj_get(tj_at(docs, r), "n")), (int64_t)r);
	}
	tj_free(docs);
	free(d.data);
	hv_json_free(mem);
	free(blob);
}

static void test_fd_writer_pipe(void **state)
{
	(void)state;
	check_fd_writer(false);
}

static void test_fd_writer_nonblocking(void **state)
{
	(void)state;
	check_fd_writer(true);
}

static volatile sig_atomic_t interrupts;

static void on_usr1(int sig)
{
	(void)sig;
	interrupts++;
}

typedef struct interrupter {
	pthread_t victim;
	drain d;
} interrupter;

/* Signals the writer while it waits on a full pipe, then drains the pipe. */
static void *interrupter_main(void *arg)
{
	interrupter *it = arg;
	for (int i = 0; i < 5; i++) {
		usleep(20000);
		pthread_kill(it->victim, SIGUSR1);
	}
	return drain_main(&it->d);
}

/* A signal handler installed without SA_RESTART makes a blocked write() fail with EINTR
 * (or return short): the writer retries, and nothing is lost. */
static void test_fd_writer_eintr(void **state)
{
	(void)state;
	struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = 0}, old;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
	int p[2];
	assert_int_equal(pipe(p), 0);
	static interrupter it; /* static: outlives this frame if an assertion fails */
	it = (interrupter){.victim = pthread_self(), .d = {.fd = p[0]}};
	interrupts = 0;
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, interrupter_main, &it), 0);
	hv_json *j = NULL;
	assert_int_equal(hv_json_new_fd(&j, p[1], HV_CASE_SNAKE), HV_OK);
	static char big[1 << 20];
	memset(big, 'y', sizeof(big));
	hv_json_string(j, big, sizeof(big));
	assert_int_equal(hv_json_flush(j), HV_OK);
	hv_json_free(j);
	close(p[1]);
	pthread_join(t, NULL);
	close(p[0]);
	sigaction(SIGUSR1, &old, NULL);
	/* Two signals sent while the writer is not running (a loaded machine) arrive as one. */
	assert_true(interrupts >= 1 && interrupts <= 5);
	assert_int_equal(it.d.len, sizeof(big) + 2);
	assert_int_equal(it.d.data[0], '"');
	assert_memory_equal(it.d.data + 1, big, sizeof(big));
	assert_int_equal(it.d.data[sizeof(big) + 1], '"');
	free(it.d.data);
}

static void test_fd_small_and_free_flushes(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	hv_json *j = NULL;
	assert_int_equal(hv_json_new_fd(&j, p[1], HV_CASE_CAMEL), HV_OK);
	hv_json_object_begin(j);
	hv_json_key(j, "is_dir");
	hv_json_bool(j, true);
	hv_json_object_end(j);
	hv_json_newline(j);
	assert_int_equal(hv_json_pending(j), 15);
	assert_int_equal(hv_json_flush(j), HV_OK);
	assert_int_equal(hv_json_pending(j), 0);
	hv_json_cstring(j, "tail");
	hv_json_free(j); /* flushes */
	close(p[1]);
	char buf[64];
	ssize_t n = read(p[0], buf, sizeof(buf));
	assert_int_equal(n, 21);
	assert_memory_equal(buf, "{\"isDir\":true}\n\"tail\"", 21);
	close(p[0]);
	assert_int_equal(hv_json_new_fd(&j, -1, HV_CASE_SNAKE), HV_EUSAGE);
	assert_null(j);
	assert_int_equal(hv_json_new_fd(&j, 1, (hv_case)5), HV_EUSAGE); /* no such case */
	assert_null(j);
	assert_int_equal(hv_json_new_buffer(&j, (hv_case)5), HV_EUSAGE);
	assert_null(j);
}

static void test_fd_epipe_sticky(void **state)
{
	(void)state;
	struct sigaction ign = {.sa_handler = SIG_IGN}, old;
	sigemptyset(&ign.sa_mask);
	assert_int_equal(sigaction(SIGPIPE, &ign, &old), 0);
	int p[2];
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	hv_json *j = NULL;
	assert_int_equal(hv_json_new_fd(&j, p[1], HV_CASE_SNAKE), HV_OK);
	hv_json_cstring(j, "lost");
	assert_int_equal(hv_json_status(j), HV_OK); /* nothing written yet */
	hv_error_clear();
	assert_int_equal(hv_json_flush(j), HV_EIO);
	assert_int_equal(hv_json_status(j), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "Broken pipe"));
	assert_int_equal(hv_json_pending(j), 0);
	/* Later output is discarded, also when it fills the buffer many times over. */
	static char big[100000];
	memset(big, 'x', sizeof(big));
	for (int i = 0; i < 20; i++) {
		hv_json_string(j, big, sizeof(big));
		hv_json_base64(j, big, sizeof(big));
		assert_true(hv_json_pending(j) <= 64 * 1024);
	}
	assert_int_equal(hv_json_status(j), HV_EIO);
	hv_error_clear();
	assert_int_equal(hv_json_flush(j), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "Broken pipe"));
	hv_json_free(j);
	close(p[1]);

	/* An error met by an implicit flush (a full buffer) is sticky too. */
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	assert_int_equal(hv_json_new_fd(&j, p[1], HV_CASE_SNAKE), HV_OK);
	hv_json_string(j, big, sizeof(big));
	assert_int_equal(hv_json_status(j), HV_EIO);
	assert_int_equal(hv_json_flush(j), HV_EIO);
	hv_json_free(j);
	close(p[1]);
	sigaction(SIGPIPE, &old, NULL);
}

/* hv_utf8_char_length: the length of the one strict UTF-8 character at the start, 0 for
 * anything that does not start with one (cut short, overlong, a surrogate, beyond U+10FFFF,
 * a stray continuation byte, nothing at all). */
static void test_utf8_char_length(void **state)
{
	(void)state;
	static const struct {
		const char *bytes;
		size_t len, want;
	} cases[] = {
		{"a", 1, 1},
		{"ab", 2, 1},                 /* the first character only */
		{"\xc3\xa9!", 3, 2},          /* U+00E9 */
		{"\xe2\x82\xac", 3, 3},       /* U+20AC */
		{"\xf0\x9f\x98\x80", 4, 4},   /* U+1F600 */
		{"\xf4\x8f\xbf\xbf", 4, 4},   /* U+10FFFF, the last */
		{"\xc3", 1, 0},               /* cut short */
		{"\xe2\x82", 2, 0},
		{"\xc0\xaf", 2, 0},           /* overlong '/' */
		{"\xe0\x80\xaf", 3, 0},       /* overlong '/' */
		{"\xed\xa0\x80", 3, 0},       /* U+D800, a surrogate */
		{"\xf4\x90\x80\x80", 4, 0},   /* U+110000 */
		{"\x80", 1, 0},               /* a continuation byte */
		{"\xff", 1, 0},
		{"", 0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (hv_utf8_char_length(cases[i].bytes, cases[i].len) != cases[i].want)
			fail_msg("case %zu: %zu, expected %zu", i,
				 hv_utf8_char_length(cases[i].bytes, cases[i].len), cases[i].want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec_vectors),
		cmocka_unit_test(test_exact_escapes),
		cmocka_unit_test(test_oracle_exhaustive),
		cmocka_unit_test(test_every_byte_every_position),
		cmocka_unit_test(test_short_tails_at_page_edges),
		cmocka_unit_test(test_long_strings),
		cmocka_unit_test(test_random_roundtrip),
		cmocka_unit_test(test_escape_snprintf),
		cmocka_unit_test(test_structure),
		cmocka_unit_test(test_deep_nesting),
		cmocka_unit_test(test_keys_and_case),
		cmocka_unit_test(test_short_keys_every_byte),
		cmocka_unit_test(test_keys_every_length),
		cmocka_unit_test(test_short_strings_at_buffer_end),
		cmocka_unit_test(test_buffer_reset),
		cmocka_unit_test(test_integers),
		cmocka_unit_test(test_base64_rfc4648),
		cmocka_unit_test(test_base64_large),
		cmocka_unit_test(test_base64_pieces),
		cmocka_unit_test(test_fd_writer_pipe),
		cmocka_unit_test(test_fd_writer_nonblocking),
		cmocka_unit_test(test_fd_writer_eintr),
		cmocka_unit_test(test_fd_small_and_free_flushes),
		cmocka_unit_test(test_fd_epipe_sticky),
		cmocka_unit_test(test_utf8_char_length),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
