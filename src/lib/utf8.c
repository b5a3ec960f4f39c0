/* Strict UTF-8 boundary helpers, after the table of well-formed byte sequences in the Unicode
 * Standard (Table 3-7): only the second byte of a sequence has a range narrower than
 * 80..BF, and it is what rules out overlong forms, surrogates and values above U+10FFFF. */
#include "utf8.h"

#include <stdbool.h>

/* The length of the sequence the lead byte b starts (2 to 4) and the range its second byte
 * must fall in; 0 when b is ASCII, a continuation byte, or never valid (C0, C1, F5..FF). */
static size_t lead_length(unsigned char b, unsigned char *lo, unsigned char *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (b >= 0xC2 && b <= 0xDF)
		return 2;
	if (b == 0xE0) {
		*lo = 0xA0; /* E0 80..9F would be overlong */
		return 3;
	}
	if (b == 0xED) {
		*hi = 0x9F; /* ED A0..BF would encode a surrogate */
		return 3;
	}
	if (b >= 0xE1 && b <= 0xEF)
		return 3;
	if (b == 0xF0) {
		*lo = 0x90; /* F0 80..8F would be overlong */
		return 4;
	}
	if (b >= 0xF1 && b <= 0xF3)
		return 4;
	if (b == 0xF4) {
		*hi = 0x8F; /* F4 90.. would be above U+10FFFF */
		return 4;
	}
	return 0;
}

/* Whether s[1..n) are the right continuation bytes for a sequence led by a byte whose second
 * byte must be within lo..hi. */
static bool continuations_ok(const unsigned char *s, size_t n, unsigned char lo, unsigned char hi)
{
	for (size_t i = 1; i < n; i++) {
		unsigned char c = s[i];
		if (i == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80)
			return false;
	}
	return true;
}

size_t hv_utf8_complete_prefix(const char *buf, size_t len)
{
	const unsigned char *s = (const unsigned char *)buf;
	/* A sequence is at most 4 bytes, so a cut one starts within the last 3. */
	for (size_t back = 1; back <= 3 && back <= len; back++) {
		unsigned char b = s[len - back];
		if ((b & 0xC0) == 0x80)
			continue; /* a continuation byte: its lead is further back */
		unsigned char lo, hi;
		size_t need = lead_length(b, &lo, &hi);
		if (need <= back) /* ASCII, an invalid lead, or a sequence that is already whole */
			return len;
		return continuations_ok(s + len - back, back, lo, hi) ? len - back : len;
	}
	return len;
}

size_t hv_utf8_sequence_length(const char *buf, size_t len)
{
	const unsigned char *s = (const unsigned char *)buf;
	if (len == 0)
		return 0;
	if (s[0] < 0x80)
		return 1;
	unsigned char lo, hi;
	size_t need = lead_length(s[0], &lo, &hi);
	if (need == 0 || need > len || !continuations_ok(s, need, lo, hi))
		return 0;
	return need;
}
