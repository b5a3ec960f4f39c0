/* Fuzz target: the JSON writer (include/harvest/json.h) on arbitrary bytes.
 *
 * SPEC 1, "Strings are exact": every string the writer makes is valid (strict) UTF-8 JSON, and
 * decoding it the way Python does (json.loads, then os.fsencode with surrogateescape) gives back
 * the input bytes exactly. Checked here with a decoder of our own, written from RFC 8259 and
 * PEP 383, not from json.c:
 *   - the buffer writer, the fd writer (through a memfd) and hv_json_escape() all write the same
 *     text for the same bytes, and hv_json_escape() never exceeds 6 * len + 2 and cuts short
 *     output snprintf-style;
 *   - the text is strictly valid UTF-8, holds no raw control character, and decodes to the input;
 *   - hv_json_char_length() agrees with a reference strict UTF-8 decoder at every offset;
 *   - hv_json_base64() (OutputFile content) is padded RFC 4648 base64 of the input;
 *   - keys and enum values (snake_case converted to camelCase) never crash, stay valid JSON, and
 *     decode to the reference conversion of the input.
 *
 * Input: the whole input is the string value; its NUL-terminated prefixes (split at NUL bytes)
 * are also used as keys and enum values. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "harvest/json.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "fuzz_json: check failed: %s (%s:%d)\n", #cond, __FILE__, \
				__LINE__);                                                \
			fprintf(stderr, "  " __VA_ARGS__);                                \
			fprintf(stderr, "\n");                                            \
			abort();                                                          \
		}                                                                         \
	} while (0)

/* ---- reference strict UTF-8 (Unicode Table 3-7) ------------------------------------ */

/* The length of the well-formed sequence at s (1..4) and its code point, or 0. */
static size_t ref_utf8(const unsigned char *s, size_t avail, uint32_t *cp)
{
	if (avail == 0)
		return 0;
	unsigned c = s[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	size_t n;
	uint32_t v, min;
	if ((c & 0xE0) == 0xC0) {
		n = 2;
		v = c & 0x1F;
		min = 0x80;
	} else if ((c & 0xF0) == 0xE0) {
		n = 3;
		v = c & 0x0F;
		min = 0x800;
	} else if ((c & 0xF8) == 0xF0) {
		n = 4;
		v = c & 0x07;
		min = 0x10000;
	} else {
		return 0;
	}
	if (avail < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3F);
	}
	if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		return 0;
	*cp = v;
	return n;
}

static void put_utf8(unsigned char **o, uint32_t cp)
{
	unsigned char *p = *o;
	if (cp < 0x80) {
		*p++ = (unsigned char)cp;
	} else if (cp < 0x800) {
		*p++ = (unsigned char)(0xC0 | cp >> 6);
		*p++ = (unsigned char)(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		*p++ = (unsigned char)(0xE0 | cp >> 12);
		*p++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		*p++ = (unsigned char)(0x80 | (cp & 0x3F));
	} else {
		*p++ = (unsigned char)(0xF0 | cp >> 18);
		*p++ = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
		*p++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		*p++ = (unsigned char)(0x80 | (cp & 0x3F));
	}
	*o = p;
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool read_u4(const unsigned char *s, size_t len, size_t i, uint32_t *out)
{
	if (i + 4 > len)
		return false;
	uint32_t v = 0;
	for (size_t k = 0; k < 4; k++) {
		int h = hexval(s[i + k]);
		if (h < 0)
			return false;
		v = v << 4 | (uint32_t)h;
	}
	*out = v;
	return true;
}

/* Decodes the JSON string literal text[0..len) (quotes included, nothing after) as
 * json.loads + os.fsencode(surrogateescape) would: into out (room for len bytes); returns the
 * decoded length, or -1 with *why set when it is not a valid literal or not encodable. */
static long decode_string(const unsigned char *t, size_t len, unsigned char *out,
			  const char **why)
{
	if (len < 2 || t[0] != '"' || t[len - 1] != '"') {
		*why = "not a quoted string";
		return -1;
	}
	unsigned char *o = out;
	size_t i = 1, end = len - 1;
	while (i < end) {
		unsigned c = t[i];
		if (c == '"') {
			*why = "unescaped quote inside the string";
			return -1;
		}
		if (c < 0x20) {
			*why = "raw control character";
			return -1;
		}
		if (c != '\\') {
			uint32_t cp;
			size_t n = ref_utf8(t + i, end - i, &cp);
			if (!n) {
				*why = "invalid UTF-8 in the output";
				return -1;
			}
			memcpy(o, t + i, n);
			o += n;
			i += n;
			continue;
		}
		if (i + 1 >= end) {
			*why = "backslash at the end";
			return -1;
		}
		unsigned e = t[i + 1];
		i += 2;
		switch (e) {
		case '"': *o++ = '"'; continue;
		case '\\': *o++ = '\\'; continue;
		case '/': *o++ = '/'; continue;
		case 'b': *o++ = '\b'; continue;
		case 'f': *o++ = '\f'; continue;
		case 'n': *o++ = '\n'; continue;
		case 'r': *o++ = '\r'; continue;
		case 't': *o++ = '\t'; continue;
		case 'u': break;
		default:
			*why = "unknown escape";
			return -1;
		}
		uint32_t u;
		if (!read_u4(t, end, i, &u)) {
			*why = "bad \\u escape";
			return -1;
		}
		i += 4;
		if (u >= 0xD800 && u <= 0xDBFF) {
			/* Python pairs a high surrogate with a following \u low surrogate. */
			uint32_t lo;
			if (i + 1 < end && t[i] == '\\' && t[i + 1] == 'u' && read_u4(t, end, i + 2, &lo) &&
			    lo >= 0xDC00 && lo <= 0xDFFF) {
				put_utf8(&o, 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00));
				i += 6;
				continue;
			}
			*why = "lone high surrogate (not encodable with surrogateescape)";
			return -1;
		}
		if (u >= 0xDC00 && u <= 0xDFFF) {
			if (u < 0xDC80 || u > 0xDCFF) {
				*why = "lone low surrogate outside U+DC80..U+DCFF";
				return -1;
			}
			*o++ = (unsigned char)(u - 0xDC00); /* surrogateescape: U+DCXX is byte XX */
			continue;
		}
		put_utf8(&o, u);
	}
	return (long)(o - out);
}

/* Surrogateescape round trip would not be exact if a decoded string could also come from
 * other bytes: Python's fsencode re-encodes a valid character as itself, so the decoded
 * bytes must be compared with the input, which decode_string's caller does. */

static void dump(const char *what, const void *p, size_t n)
{
	const unsigned char *s = p;
	fprintf(stderr, "%s (%zu bytes):", what, n);
	for (size_t i = 0; i < n && i < 64; i++)
		fprintf(stderr, " %02x", s[i]);
	fprintf(stderr, "%s\n", n > 64 ? " ..." : "");
}

static void check_literal(const char *what, const unsigned char *text, size_t tlen,
			  const unsigned char *want, size_t wlen)
{
	unsigned char *dec = malloc(tlen + 1);
	CHECK(dec, "out of memory");
	const char *why = "";
	long n = decode_string(text, tlen, dec, &why);
	if (n < 0 || (size_t)n != wlen || memcmp(dec, want, wlen) != 0) {
		dump("expected", want, wlen);
		dump("json", text, tlen);
		if (n >= 0)
			dump("decoded", dec, (size_t)n);
		CHECK(false, "%s: %s", what, n < 0 ? why : "decodes to other bytes");
	}
	free(dec);
}

/* ---- camel case reference -------------------------------------------------------------- */

/* json.h: "is_dir" -> "isDir": an underscore before a letter or digit goes and a letter after
 * it is upper-cased; a leading underscore stays. */
static size_t ref_camel(const char *s, char *out)
{
	size_t n = strlen(s), k = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char next = (unsigned char)s[i + 1];
		bool word = (next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') ||
			    (next >= '0' && next <= '9');
		if (s[i] == '_' && i > 0 && word) {
			out[k++] = (char)(next >= 'a' && next <= 'z' ? next - 'a' + 'A' : next);
			i++;
		} else {
			out[k++] = s[i];
		}
	}
	return k;
}

/* ---- the checks -------------------------------------------------------------------------- */

static int memfd = -1;

static char *read_memfd(size_t *len)
{
	off_t size = lseek(memfd, 0, SEEK_END);
	CHECK(size >= 0, "lseek");
	char *buf = malloc((size_t)size + 1);
	CHECK(buf, "out of memory");
	ssize_t got = pread(memfd, buf, (size_t)size, 0);
	CHECK(got == size, "pread of the memfd");
	*len = (size_t)size;
	return buf;
}

static void check_string_value(const unsigned char *data, size_t size)
{
	/* The buffer writer. */
	hv_json *j;
	CHECK(hv_json_new_buffer(&j, HV_CASE_SNAKE) == HV_OK, "new buffer writer");
	hv_json_string(j, (const char *)data, size);
	CHECK(hv_json_status(j) == HV_OK, "status");
	size_t blen;
	const char *btext = hv_json_buffer(j, &blen);
	CHECK(blen <= 6 * size + 2, "a string of %zu bytes took %zu bytes of JSON", size, blen);
	check_literal("hv_json_string", (const unsigned char *)btext, blen, data, size);

	/* hv_json_escape: the same text, and snprintf-style truncation. */
	char *esc = malloc(6 * size + 3);
	CHECK(esc, "out of memory");
	size_t elen = hv_json_escape((const char *)data, size, esc, 6 * size + 3);
	CHECK(elen == blen && memcmp(esc, btext, blen) == 0 && esc[elen] == '\0',
	      "hv_json_escape (%zu bytes) differs from hv_json_string (%zu bytes)", elen, blen);
	size_t cap = size ? data[0] % (blen + 2) : 1;
	char *small = malloc(cap + 1);
	CHECK(small, "out of memory");
	small[cap] = 'X';
	size_t slen = hv_json_escape((const char *)data, size, small, cap);
	CHECK(slen == blen, "hv_json_escape with cap %zu says %zu, not %zu", cap, slen, blen);
	CHECK(small[cap] == 'X', "hv_json_escape wrote past cap %zu", cap);
	if (cap > 0) {
		size_t kept = blen < cap ? blen : cap - 1;
		CHECK(memcmp(small, btext, kept) == 0 && small[kept] == '\0',
		      "hv_json_escape with cap %zu: not the prefix of the whole form", cap);
	}
	free(small);
	free(esc);

	/* The fd writer, through a memfd: a structure around the value, written in pieces. */
	CHECK(ftruncate(memfd, 0) == 0 && lseek(memfd, 0, SEEK_SET) == 0, "reset the memfd");
	hv_json *f;
	CHECK(hv_json_new_fd(&f, memfd, HV_CASE_CAMEL) == HV_OK, "new fd writer");
	hv_json_object_begin(f);
	hv_json_key(f, "stream_type");
	hv_json_enum(f, "stream_chunk");
	hv_json_key(f, "data");
	hv_json_string(f, (const char *)data, size);
	hv_json_key(f, "output_files");
	hv_json_array_begin(f);
	hv_json_string(f, (const char *)data, size);
	hv_json_string(f, (const char *)data, size / 2);
	hv_json_array_end(f);
	hv_json_object_end(f);
	hv_json_newline(f);
	CHECK(hv_json_flush(f) == HV_OK, "flush");
	hv_json_free(f);
	size_t flen;
	char *ftext = read_memfd(&flen);
	/* {"streamType":"streamChunk","data":S,"outputFiles":[S,H]}\n */
	static const char head[] = "{\"streamType\":\"streamChunk\",\"data\":";
	size_t hl = sizeof(head) - 1;
	CHECK(flen > hl && memcmp(ftext, head, hl) == 0, "fd writer: bad start");
	CHECK(flen >= hl + blen && memcmp(ftext + hl, btext, blen) == 0,
	      "fd writer: the data member differs from the buffer writer's text");
	static const char mid[] = ",\"outputFiles\":[";
	size_t ml = sizeof(mid) - 1, p = hl + blen;
	CHECK(flen >= p + ml + blen && memcmp(ftext + p, mid, ml) == 0 &&
		      memcmp(ftext + p + ml, btext, blen) == 0,
	      "fd writer: the array's first element differs");
	p += ml + blen;
	CHECK(flen > p && ftext[p] == ',', "fd writer: no comma between elements");
	p++;
	CHECK(flen >= p + 4 && memcmp(ftext + flen - 3, "]}\n", 3) == 0, "fd writer: bad end");
	check_literal("fd writer, half the input", (const unsigned char *)ftext + p, flen - 3 - p,
		      data, size / 2);
	free(ftext);
	hv_json_free(j);

	/* hv_json_base64 (OutputFile content): RFC 4648 with padding, decoding to the input. */
	hv_json *b64;
	CHECK(hv_json_new_buffer(&b64, HV_CASE_SNAKE) == HV_OK, "new buffer writer");
	hv_json_base64(b64, data, size);
	size_t b64len;
	const char *b64text = hv_json_buffer(b64, &b64len);
	CHECK(b64len == 2 + (size + 2) / 3 * 4 && b64text[0] == '"' && b64text[b64len - 1] == '"',
	      "base64 of %zu bytes is %zu characters", size, b64len);
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t k = 0;
	for (size_t i = 1; i + 1 < b64len; i += 4) {
		uint32_t v = 0;
		int pad = 0;
		for (int q = 0; q < 4; q++) {
			char ch = b64text[i + q];
			const char *at = ch ? strchr(alphabet, ch) : NULL;
			CHECK(at || (ch == '=' && i + 4 + 1 == b64len && q >= 2),
			      "base64: bad character at %zu", i + q);
			if (ch == '=')
				pad++;
			else
				CHECK(pad == 0, "base64: data after padding");
			v = v << 6 | (uint32_t)(at ? at - alphabet : 0);
		}
		unsigned char out[3] = {(unsigned char)(v >> 16), (unsigned char)(v >> 8),
					(unsigned char)v};
		for (int q = 0; q < 3 - pad; q++, k++)
			CHECK(k < size && out[q] == data[k], "base64: decodes to other bytes at %zu", k);
	}
	CHECK(k == size, "base64: decodes to %zu bytes, not %zu", k, size);
	hv_json_free(b64);

	/* hv_utf8_char_length against the reference at every offset. */
	for (size_t i = 0; i < size; i++) {
		uint32_t cp;
		size_t want = ref_utf8(data + i, size - i, &cp);
		size_t got = hv_utf8_char_length((const char *)data + i, size - i);
		CHECK(got == want, "hv_utf8_char_length at offset %zu: %zu, reference %zu", i, got,
		      want);
	}
}

static void check_names(const unsigned char *data, size_t size)
{
	/* Each NUL-terminated piece of the input is a key and an enum value, in both cases. */
	char *copy = malloc(size + 1);
	CHECK(copy, "out of memory");
	memcpy(copy, data, size);
	copy[size] = '\0';
	for (int kase = 0; kase < 2; kase++) {
		hv_json *j;
		CHECK(hv_json_new_buffer(&j, (hv_case)kase) == HV_OK, "new buffer writer");
		for (size_t off = 0; off <= size; off += strlen(copy + off) + 1) {
			const char *name = copy + off;
			size_t nlen = strlen(name);
			hv_json_buffer_reset(j);
			hv_json_object_begin(j);
			hv_json_key(j, name);
			hv_json_enum(j, name);
			hv_json_key_null(j, name);
			hv_json_object_end(j);
			CHECK(hv_json_status(j) == HV_OK, "status");
			size_t len;
			const char *text = hv_json_buffer(j, &len);
			/* {"K":"V"[,"K":null]} with K and V the (converted) name. */
			char *want = malloc(nlen + 1);
			CHECK(want, "out of memory");
			size_t wlen = nlen;
			memcpy(want, name, nlen);
			if (kase == HV_CASE_CAMEL)
				wlen = ref_camel(name, want);
			CHECK(len >= 2 && text[0] == '{' && text[len - 1] == '}', "not an object");
			/* The literal ends at the first '"' not escaped by a backslash. */
			size_t a = 1, b = a + 1;
			while (b < len && text[b] != '"')
				b += text[b] == '\\' ? 2 : 1;
			CHECK(b < len, "unterminated key");
			check_literal(kase ? "camel key" : "snake key", (const unsigned char *)text + a,
				      b + 1 - a, (const unsigned char *)want, wlen);
			CHECK(text[b + 1] == ':', "no colon after the key");
			size_t c = b + 2, d = c + 1;
			while (d < len && text[d] != '"')
				d += text[d] == '\\' ? 2 : 1;
			CHECK(d < len, "unterminated enum value");
			check_literal(kase ? "camel enum" : "snake enum", (const unsigned char *)text + c,
				      d + 1 - c, (const unsigned char *)want, wlen);
			size_t rest = len - (d + 1);
			if (kase == HV_CASE_CAMEL)
				CHECK(rest == 1, "camel: key_null must leave the member out");
			else
				CHECK(rest == 1 + 1 + (b + 1 - a) + 1 + 4 &&
					      memcmp(text + d + 1, ",", 1) == 0 &&
					      memcmp(text + d + 2, text + a, b + 1 - a) == 0 &&
					      memcmp(text + len - 6, ":null}", 6) == 0,
				      "snake: key_null must write \"key\": null");
			free(want);
			if (off + nlen >= size)
				break;
		}
		hv_json_free(j);
	}
	free(copy);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	memfd = memfd_create("fuzz_json", MFD_CLOEXEC);
	if (memfd < 0) {
		perror("memfd_create");
		abort();
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_string_value(data, size);
	check_names(data, size);
	return 0;
}
