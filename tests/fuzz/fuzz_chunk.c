/* Fuzz target: the stream splitter's rule (src/lib/utf8.h, used by src/lib/run.c).
 *
 * run.c hands each read to the callback after holding back the tail that
 * hv_utf8_complete_prefix() says could still become a character, and prepends that tail to the
 * next read; at the end of the stream the tail goes out as it is. SPEC 1: "A stream chunk never
 * ends in the middle of a UTF-8 sequence that the next read completes."
 *
 * Input: byte 0 is the number of reads (1..32); then one byte per read gives its length
 * (0..255, consumed cyclically from the rest when it runs out); everything after the header is
 * the stream. The same stream is also cut into reads of 1 byte, which is where the rule is most
 * often asked to hold something back.
 *
 * Checked, against a reference strict UTF-8 decoder written here (not src/lib/utf8.c):
 *   - the chunks reassemble to the stream exactly, and none is empty;
 *   - the held-back tail is at most 3 bytes and is always the valid beginning of a character
 *     (nothing is delayed that no byte could complete);
 *   - every chunk but the last ends on a character boundary of the whole stream as decoded with
 *     surrogateescape (a valid sequence is one unit, any other byte a unit of its own);
 *   - hv_utf8_sequence_length() agrees with the reference at every offset. */
#include "utf8.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "fuzz_chunk: check failed: %s (%s:%d)\n", #cond,   \
				__FILE__, __LINE__);                                      \
			fprintf(stderr, "  " __VA_ARGS__);                                \
			fprintf(stderr, "\n");                                            \
			abort();                                                          \
		}                                                                         \
	} while (0)

/* Reference: the length of the well-formed sequence at s (Unicode Table 3-7, by decoding the
 * code point and checking its range), or 0. */
static size_t ref_sequence(const unsigned char *s, size_t avail)
{
	if (avail == 0)
		return 0;
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	size_t n;
	uint32_t v, min;
	if ((c & 0xE0) == 0xC0) {
		n = 2, v = c & 0x1F, min = 0x80;
	} else if ((c & 0xF0) == 0xE0) {
		n = 3, v = c & 0x0F, min = 0x800;
	} else if ((c & 0xF8) == 0xF0) {
		n = 4, v = c & 0x07, min = 0x10000;
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
	return n;
}

/* Reference: whether s[0..n) (1 <= n <= 3) is a proper prefix of some well-formed sequence,
 * tried by brute force over every completion. */
static bool ref_valid_prefix(const unsigned char *s, size_t n)
{
	unsigned char buf[4];
	memcpy(buf, s, n);
	for (size_t total = n + 1; total <= 4; total++) {
		/* Complete with continuation bytes: the second byte is the only one whose range
		 * matters, so trying 80, 8F, 90, 9F, A0, BF for each missing byte is exhaustive. */
		static const unsigned char cont[] = {0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF};
		size_t missing = total - n, combos = 1;
		for (size_t k = 0; k < missing; k++)
			combos *= sizeof(cont);
		for (size_t m = 0; m < combos; m++) {
			size_t x = m;
			for (size_t k = 0; k < missing; k++) {
				buf[n + k] = cont[x % sizeof(cont)];
				x /= sizeof(cont);
			}
			if (ref_sequence(buf, total) == total)
				return true;
		}
	}
	return false;
}

struct splitter {
	unsigned char carry[4];
	size_t carry_len;
	unsigned char *out; /* the reassembled stream */
	size_t out_len;
	size_t *ends; /* where each chunk ended, in stream offsets */
	size_t n_ends;
	unsigned char *buf;
};

static void emit(struct splitter *sp, const unsigned char *p, size_t n)
{
	if (n == 0)
		return; /* run.c's deliver() drops empty chunks */
	memcpy(sp->out + sp->out_len, p, n);
	sp->out_len += n;
	sp->ends[sp->n_ends++] = sp->out_len;
}

/* One read of n bytes, as run.c's stream_read() does it. */
static void feed(struct splitter *sp, const unsigned char *p, size_t n)
{
	memcpy(sp->buf, sp->carry, sp->carry_len);
	memcpy(sp->buf + sp->carry_len, p, n);
	size_t have = sp->carry_len + n;
	size_t whole = hv_utf8_complete_prefix((const char *)sp->buf, have);
	CHECK(whole <= have, "complete_prefix %zu of %zu bytes", whole, have);
	size_t tail = have - whole;
	CHECK(tail <= 3, "held back %zu bytes", tail);
	if (tail > 0)
		CHECK(ref_valid_prefix(sp->buf + whole, tail),
		      "held back %zu bytes that no byte can complete (%02x ...)", tail,
		      sp->buf[whole]);
	sp->carry_len = tail;
	memcpy(sp->carry, sp->buf + whole, tail);
	emit(sp, sp->buf, whole);
}

static void run_split(const unsigned char *s, size_t len, const size_t *cuts, size_t n_cuts,
		      const size_t *units_end)
{
	struct splitter sp = {0};
	sp.out = malloc(len + 1);
	sp.ends = calloc(len + 2, sizeof(size_t));
	size_t max_read = 1;
	for (size_t i = 0; i < n_cuts; i++)
		if (cuts[i] > max_read)
			max_read = cuts[i];
	sp.buf = malloc(max_read + 8);
	CHECK(sp.out && sp.ends && sp.buf, "out of memory");
	size_t pos = 0;
	for (size_t i = 0; pos < len; i = (i + 1) % n_cuts) {
		size_t n = cuts[i] < len - pos ? cuts[i] : len - pos;
		feed(&sp, s + pos, n);
		pos += n;
	}
	emit(&sp, sp.carry, sp.carry_len); /* end of stream: the tail goes out as it is */

	CHECK(sp.out_len == len && memcmp(sp.out, s, len) == 0,
	      "the chunks reassemble to %zu bytes, not the %zu of the stream", sp.out_len, len);
	for (size_t k = 0; k + 1 < sp.n_ends; k++) {
		size_t e = sp.ends[k];
		CHECK(units_end[e], "chunk %zu ends at offset %zu, inside a character of the stream",
		      k, e);
	}
	free(sp.buf);
	free(sp.ends);
	free(sp.out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	size_t n_cuts = (size_t)(data[0] % 32) + 1;
	if (size < 1 + n_cuts)
		n_cuts = size - 1;
	size_t cuts[33];
	for (size_t i = 0; i < n_cuts; i++)
		cuts[i] = data[1 + i];
	const unsigned char *s = data + 1 + n_cuts;
	size_t len = size - 1 - n_cuts;
	/* A read of 0 bytes is EOF in run.c, never a chunk: make every read at least 1 byte. */
	bool any = false;
	for (size_t i = 0; i < n_cuts; i++) {
		if (cuts[i] == 0)
			cuts[i] = 1;
		any = true;
	}
	if (!any) {
		cuts[0] = 7;
		n_cuts = 1;
	}

	/* The surrogateescape units of the whole stream: units_end[i] when offset i is a boundary. */
	size_t *units_end = calloc(len + 1, sizeof(size_t));
	CHECK(units_end, "out of memory");
	units_end[0] = 1;
	for (size_t i = 0; i < len;) {
		size_t n = ref_sequence(s + i, len - i);
		size_t got = hv_utf8_sequence_length((const char *)s + i, len - i);
		CHECK(got == n, "hv_utf8_sequence_length at %zu: %zu, reference %zu", i, got, n);
		i += n ? n : 1;
		units_end[i] = 1;
	}
	for (size_t i = 0; i < len; i++) {
		size_t n = ref_sequence(s + i, len - i);
		CHECK(hv_utf8_sequence_length((const char *)s + i, len - i) == n,
		      "hv_utf8_sequence_length at %zu", i);
	}

	run_split(s, len, cuts, n_cuts, units_end);
	size_t one = 1;
	run_split(s, len, &one, 1, units_end);
	free(units_end);
	return 0;
}
