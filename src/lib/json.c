/* The streaming JSON writer: exact strings (strict UTF-8 kept, other bytes as \udcXX),
 * commas tracked per nesting level, snake/camel keys, integers and base64 without printf.
 *
 * Output goes through one buffer. Every primitive first asks room() for the most it can
 * write (a bounded amount: strings and base64 are done in chunks), then writes with plain
 * pointer stores; room() is an inline compare in the common case, so nothing costs a
 * function call per byte. An fd writer flushes when the buffer cannot take the next chunk;
 * a memory writer grows. After a write error (fd) or an allocation failure (memory) the
 * status is sticky and further output is discarded, so every call stays safe to make. */
#include "harvest/json.h"
#include "fdio.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define FD_BUFFER_SIZE (64 * 1024)
/* Input bytes escaped per room() request: at most 6 output bytes each, so one chunk's
 * worst case (24 KiB) always fits an fd writer's buffer. */
#define STRING_CHUNK 4096
/* Input bytes base64-encoded per room() request (a multiple of 3). */
#define BASE64_CHUNK (3 * 4096)
/* The largest single room() request: bigger writes are split. */
#define ROOM_MAX (6 * STRING_CHUNK + 16)
/* A memory writer starts with room for any one request, so that after an allocation
 * failure it can go on discarding into what it has. */
#define MEM_BUFFER_MIN (32 * 1024)

struct hv_json {
	char *buf;
	size_t len, cap;
	int fd;         /* -1 for a memory writer */
	hv_case kase;
	hv_status status;
	int write_errno;
	/* Structure: whether the current level already has a member, and whether a key was
	 * just written (so the value needs no comma). The parents' flags are kept in levels[],
	 * one byte per level, so depth is bounded only by memory. */
	bool has_member;
	bool after_key;
	size_t depth;
	unsigned char *levels;
	size_t levels_cap;
};

/* ---- output buffer ---------------------------------------------------------------- */
/* A NULL writer is ignored, and a NULL string or data of nonzero length makes the writer's
 * status HV_EUSAGE (output discarded from there, as after any failure): a caller's slip is
 * reported by hv_json_flush/hv_json_status, never a crash. */
#define J_NEED(j)                                                                                  \
	do {                                                                                       \
		if (HV_UNLIKELY(!(j)))                                                             \
			return;                                                                    \
	} while (0)
#define J_NEED_DATA(j, p, len)                                                                     \
	do {                                                                                       \
		if (HV_UNLIKELY(!(p) && (len) > 0)) {                                              \
			hv__json_fail(j);                                                          \
			return;                                                                    \
		}                                                                                  \
	} while (0)

void hv__json_fail(hv_json *j)
{
	if (j && j->status == HV_OK)
		j->status = HV_EUSAGE;
}


hv_status hv_json_flush(hv_json *j)
{
	HV_NEED(j);
	if (j->fd >= 0 && j->len > 0 && j->status == HV_OK)
		if (hv_write_all(j->fd, j->buf, j->len) != 0) {
			j->write_errno = errno;
			j->status = HV_EIO;
		}
	if (j->fd >= 0)
		j->len = 0; /* written, or lost for good after an error */
	if (j->status == HV_EUSAGE)
		return hv_error_set(HV_EUSAGE, "JSON writer: a NULL string, key or data was given");
	if (j->status != HV_OK)
		return hv_error_errno(j->status, "write",
				      j->status == HV_EIO ? j->write_errno : ENOMEM);
	return HV_OK;
}

/* Makes room for n <= ROOM_MAX bytes (slow path of room()). */
static char *room_slow(hv_json *j, size_t n)
{
	if (j->fd >= 0) {
		hv_json_flush(j);
		return j->buf + j->len;
	}
	size_t cap = j->cap;
	while (cap - j->len < n)
		cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
	char *p = j->status == HV_OK ? realloc(j->buf, cap) : NULL;
	if (!p) {
		/* Out of memory: keep going on the old buffer, discarding the output. */
		j->status = HV_ENOMEM;
		j->len = 0;
		return j->buf;
	}
	j->buf = p;
	j->cap = cap;
	return j->buf + j->len;
}

/* A pointer where n (<= ROOM_MAX) bytes can be written; the caller then sets j->len. */
static inline char *room(hv_json *j, size_t n)
{
	if (HV_LIKELY(j->cap - j->len >= n))
		return j->buf + j->len;
	return room_slow(j, n);
}

static inline void put_char(hv_json *j, char c)
{
	char *o = room(j, 1);
	*o = c;
	j->len = (size_t)(o + 1 - j->buf);
}

/* Any number of bytes, in pieces that fit. */
static void put_bytes(hv_json *j, const char *p, size_t n)
{
	while (n > 0) {
		size_t k = n < ROOM_MAX ? n : ROOM_MAX;
		char *o = room(j, k);
		memcpy(o, p, k);
		j->len = (size_t)(o + k - j->buf);
		p += k;
		n -= k;
	}
}

/* ---- writers ---------------------------------------------------------------------- */

static hv_status json_new(hv_json **out, int fd, hv_case kase, size_t cap)
{
	*out = NULL;
	if (kase != HV_CASE_SNAKE && kase != HV_CASE_CAMEL)
		return hv_error_set(HV_EUSAGE, "bad case: %d", (int)kase);
	hv_json *j = calloc(1, sizeof(*j));
	char *buf = malloc(cap);
	if (!j || !buf) {
		free(j);
		free(buf);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	j->buf = buf;
	j->cap = cap;
	j->fd = fd;
	j->kase = kase == HV_CASE_CAMEL ? HV_CASE_CAMEL : HV_CASE_SNAKE;
	*out = j;
	return HV_OK;
}

hv_status hv_json_new_fd(hv_json **out, int fd, hv_case kase)
{
	HV_NEED(out);
	if (fd < 0) {
		*out = NULL;
		return hv_error_set(HV_EUSAGE, "bad file descriptor %d", fd);
	}
	return json_new(out, fd, kase, FD_BUFFER_SIZE);
}

hv_status hv_json_new_buffer(hv_json **out, hv_case kase)
{
	HV_NEED(out);
	return json_new(out, -1, kase, MEM_BUFFER_MIN);
}

void hv_json_free(hv_json *j)
{
	if (!j)
		return;
	if (j->fd >= 0 && j->len > 0 && j->status == HV_OK)
		hv_json_flush(j);
	free(j->levels);
	free(j->buf);
	free(j);
}

hv_case hv_json_case(const hv_json *j)
{
	return j ? j->kase : HV_CASE_SNAKE;
}

const char *hv_json_buffer(const hv_json *j, size_t *len)
{
	if (len)
		*len = j ? j->len : 0;
	return j ? j->buf : NULL;
}

void hv_json_buffer_reset(hv_json *j)
{
	j->len = 0;
}

hv_status hv_json_status(const hv_json *j)
{
	HV_NEED(j);
	return j->status;
}

size_t hv_json_pending(const hv_json *j)
{
	return j ? j->len : 0;
}

/* ---- structure -------------------------------------------------------------------- */

/* Before any value: a comma when the current array already has an element. */
static inline void begin_value(hv_json *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	if (j->has_member)
		put_char(j, ',');
	j->has_member = j->depth > 0; /* top-level values (jsonl) are not comma-separated */
}

static void open_level(hv_json *j, char c)
{
	begin_value(j);
	put_char(j, c);
	if (j->depth >= j->levels_cap) {
		size_t cap = j->levels_cap ? j->levels_cap * 2 : 64;
		unsigned char *p = realloc(j->levels, cap);
		if (p) {
			j->levels = p;
			j->levels_cap = cap;
		} else {
			j->status = HV_ENOMEM; /* the level's flag is lost: it reads as "has a member" */
		}
	}
	if (j->depth < j->levels_cap)
		j->levels[j->depth] = j->has_member;
	j->depth++;
	j->has_member = false;
}

static void close_level(hv_json *j, char c)
{
	put_char(j, c);
	j->after_key = false;
	if (j->depth == 0)
		return; /* unbalanced: nothing to pop */
	j->depth--;
	j->has_member = j->depth < j->levels_cap ? j->levels[j->depth] : true;
}

void hv_json_object_begin(hv_json *j)
{
	J_NEED(j);
	open_level(j, '{');
}

void hv_json_object_end(hv_json *j)
{
	J_NEED(j);
	close_level(j, '}');
}

void hv_json_array_begin(hv_json *j)
{
	J_NEED(j);
	open_level(j, '[');
}

void hv_json_array_end(hv_json *j)
{
	J_NEED(j);
	close_level(j, ']');
}

void hv_json_newline(hv_json *j)
{
	J_NEED(j);
	put_char(j, '\n');
	j->after_key = false;
}

/* ---- strings ---------------------------------------------------------------------- */

static const char hex_digits[16] = "0123456789abcdef";

/* The length of the strict UTF-8 sequence starting with the byte c >= 0x80 at s (avail
 * bytes there), or 0 when that byte is not the start of one (RFC 3629's ranges). */
static inline size_t utf8_sequence(const unsigned char *s, size_t avail)
{
	unsigned c = s[0];
	if (c < 0xC2)
		return 0; /* a continuation byte, or C0/C1 (always overlong) */
	if (c < 0xE0)
		return avail >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
	if (c < 0xF0) {
		if (avail < 3 || (s[2] & 0xC0) != 0x80)
			return 0;
		unsigned lo = c == 0xE0 ? 0xA0 : 0x80; /* E0 80..9F: overlong */
		unsigned hi = c == 0xED ? 0x9F : 0xBF; /* ED A0..BF: surrogates */
		return s[1] >= lo && s[1] <= hi ? 3 : 0;
	}
	if (c < 0xF5) {
		if (avail < 4 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
			return 0;
		unsigned lo = c == 0xF0 ? 0x90 : 0x80; /* F0 80..8F: overlong */
		unsigned hi = c == 0xF4 ? 0x8F : 0xBF; /* F4 90..: above U+10FFFF */
		return s[1] >= lo && s[1] <= hi ? 4 : 0;
	}
	return 0;
}

#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

/* Nonzero when one of the 8 bytes in w needs attention: below 0x20, '"', '\\' or >= 0x80
 * (the classic "has less than"/"has zero byte" bit tricks; exact about "any"). */
static inline uint64_t word_needs_escape(uint64_t w)
{
	uint64_t quote = w ^ (ONES * '"'), bslash = w ^ (ONES * '\\');
	uint64_t t = ((w - ONES * 0x20) & ~w) | ((quote - ONES) & ~quote) |
		     ((bslash - ONES) & ~bslash) | w;
	return t & HIGHS;
}

#if defined(__SSE2__)
/* The bytes of v that need attention, bit k for byte k: below 0x20 or >= 0x80 (a signed
 * compare: those are the bytes below 0x20 as signed chars), '"' or '\\'. Exact. */
static inline unsigned sse_needs_escape(__m128i v)
{
	__m128i ctl = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
	__m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
	__m128i bslash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
	return (unsigned)_mm_movemask_epi8(_mm_or_si128(ctl, _mm_or_si128(quote, bslash)));
}
#endif

/* The class of each byte: 0 = written as is; 'u' = \u00XX; '8' = a byte >= 0x80, the start
 * of a UTF-8 sequence or not; else the letter after '\'. One load and one test per byte in
 * the byte-wise path. */
static const char byte_class[256] = {
	'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'b', 't', 'n', 'u', 'f', 'r', 'u', 'u',
	'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
	['"'] = '"', ['\\'] = '\\',
	[0x80] = '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8',
	'8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8',
	'8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8',
	'8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8',
	'8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8',
	'8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8',
	'8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8',
	'8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8', '8',
};

/* The number of plain bytes a word starts with, given word_needs_escape's nonzero answer:
 * the lowest flagged byte is always a real one (the borrows of the bit tricks only run
 * upwards, from a real one), so everything below it is plain. Little-endian: the lowest
 * byte in the register is the first in memory. */
static inline size_t plain_prefix(uint64_t mask)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (size_t)__builtin_ctzll(mask) / 8;
#else
	(void)mask;
	return 0;
#endif
}

/* The r bytes at p (2 <= r <= 7) in the low bytes of a word, the others 0: two loads that
 * overlap in the middle (the bytes they share are equal, so or-ing them is exact). */
static inline uint64_t load_short(const unsigned char *p, size_t r)
{
	if (r >= 4) {
		uint32_t a, b;
		memcpy(&a, p, 4);
		memcpy(&b, p + r - 4, 4);
		return (uint64_t)a | (uint64_t)b << (8 * (r - 4));
	}
	uint16_t a, b;
	memcpy(&a, p, 2);
	memcpy(&b, p + r - 2, 2);
	return (uint64_t)a | (uint64_t)b << (8 * (r - 2));
}

/* Escapes the units of s (len bytes in all) that start at or after *pi and before stop,
 * writing them at o, which has room for 6 bytes per unit; returns the end of the output.
 * A unit is one byte, or one valid multi-byte sequence (which may end after stop). */
/* Inlined into its callers: its prologue and epilogue were a sixth of its cost on the short
 * names, paths and keys of a walk's records. */
static inline __attribute__((always_inline)) char *escape_units(char *o, const unsigned char *s,
							      size_t *pi, size_t stop, size_t len)
{
	size_t i = *pi;
	while (i < stop) {
		/* Plain ASCII sixteen bytes at a time (SSE2, part of every x86-64), then eight:
		 * most names and paths are all plain. A block with a byte to escape still gives
		 * its plain first bytes at once. */
#if defined(__SSE2__)
		while (i + 16 <= stop) {
			__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
			unsigned m = sse_needs_escape(v);
			_mm_storeu_si128((__m128i *)(void *)o, v); /* room: 6 bytes a unit, 16 units */
			if (m) {
				size_t k = (size_t)__builtin_ctz(m);
				o += k;
				i += k;
				goto bytewise;
			}
			o += 16;
			i += 16;
		}
#endif
		while (i + 8 <= stop) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			uint64_t m = word_needs_escape(w);
			memcpy(o, &w, 8); /* room: at least 6 bytes a unit, and 8 units here */
			if (m) {
				size_t k = plain_prefix(m);
				o += k;
				i += k;
				goto bytewise;
			}
			o += 8;
			i += 8;
		}
		if (i >= stop)
			break;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		if (stop - i >= 2) {
			/* A short tail of r bytes (2..7: no word fits). Gathered into the low
			 * bytes of one word: the word that ends at stop shifted down when the
			 * string has 8 bytes before stop (the bytes below i, already written,
			 * shifted out), else two overlapping loads inside it. The rest is filled
			 * with a plain byte, so a flag there can only be a borrow from a real
			 * byte below it, which the byte-wise path then sorts out. */
			size_t r = stop - i;
			uint64_t w;
			if (stop >= 8) {
				memcpy(&w, s + stop - 8, 8);
				w >>= 8 * (8 - r);
			} else {
				w = load_short(s + i, r);
			}
			w |= (ONES * 'a') << (8 * r);
			uint64_t m = word_needs_escape(w);
			memcpy(o, &w, 8); /* room: 6 bytes a unit, r >= 2 units */
			if (!m) {
				o += r;
				i = stop;
				break;
			}
			size_t k = plain_prefix(m);
			o += k;
			i += k;
		}
#endif
	bytewise:;
		unsigned c = s[i];
		char e = byte_class[c];
		if (!e) {
			*o++ = (char)c;
			i++;
			continue;
		}
		if (e != '8') {
			*o++ = '\\';
			if (e != 'u') {
				*o++ = e;
			} else {
				memcpy(o, "u00", 3);
				o[3] = hex_digits[c >> 4];
				o[4] = hex_digits[c & 15];
				o += 5;
			}
			i++;
			continue;
		}
		size_t n = utf8_sequence(s + i, len - i);
		if (n) {
			memcpy(o, s + i, 4 <= len - i ? 4 : n); /* room is 6 bytes per unit */
			o += n;
			i += n;
		} else {
			/* surrogateescape: the byte 0xXX is U+DCXX */
			memcpy(o, "\\udc", 4);
			o[4] = hex_digits[c >> 4];
			o[5] = hex_digits[c & 15];
			o += 6;
			i++;
		}
	}
	*pi = i;
	return o;
}

/* The quoted, escaped form of bytes, in chunks. */
static void put_string(hv_json *j, const char *bytes, size_t len)
{
	const unsigned char *s = (const unsigned char *)bytes;
	size_t i = 0;
	if (len <= STRING_CHUNK) {
		/* The common case: one room() call for the whole string with its quotes. */
		char *o = room(j, 6 * len + 2);
		*o++ = '"';
		o = escape_units(o, s, &i, len, len);
		*o++ = '"';
		j->len = (size_t)(o - j->buf);
		return;
	}
	put_char(j, '"');
	while (i < len) {
		size_t stop = len - i > STRING_CHUNK ? i + STRING_CHUNK : len;
		char *o = room(j, 6 * (stop - i));
		o = escape_units(o, s, &i, stop, len);
		j->len = (size_t)(o - j->buf);
	}
	put_char(j, '"');
}

size_t hv_json_escape(const char *bytes, size_t len, char *out, size_t cap)
{
	const unsigned char *s = (const unsigned char *)bytes;
	char tmp[6 * 512 + 2];
	size_t total = 0, i = 0;
	tmp[0] = '"';
	size_t first = 1;
	do {
		size_t stop = len - i > 512 ? i + 512 : len;
		char *o = escape_units(tmp + first, s, &i, stop, len);
		if (i >= len)
			*o++ = '"';
		size_t n = (size_t)(o - tmp);
		if (total < cap) {
			size_t k = cap - total < n ? cap - total : n;
			memcpy(out + total, tmp, k);
		}
		total += n;
		first = 0;
	} while (i < len);
	if (cap > 0)
		out[total < cap ? total : cap - 1] = '\0';
	return total;
}

void hv_json_string(hv_json *j, const char *bytes, size_t len)
{
	J_NEED(j);
	J_NEED_DATA(j, bytes, len);
	begin_value(j);
	put_string(j, bytes, len);
}

void hv_json_cstring(hv_json *j, const char *s)
{
	if (!s) {
		hv_json_null(j); /* no string: null, as a NULL column reads */
		return;
	}
	hv_json_string(j, s, strlen(s));
}

/* A snake_case name as the writer's case wants it: "is_dir" -> "isDir" in camel case (an
 * underscore before a letter or digit goes, and a letter after it is upper-cased; a leading
 * underscore stays). Converted while escaping, straight into the buffer. */
static void put_name(hv_json *j, const char *snake)
{
	size_t n = strlen(snake);
	if (j->kase != HV_CASE_CAMEL) {
		put_string(j, snake, n);
		return;
	}
	if (n > STRING_CHUNK) {
		/* Too long for one pass through the buffer: convert into a copy, then escape it. */
		char *camel = malloc(n + 1);
		if (!camel) {
			put_string(j, snake, n);
			return;
		}
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			unsigned char next = (unsigned char)snake[i + 1];
			bool word = (next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') ||
				    (next >= '0' && next <= '9');
			if (snake[i] == '_' && i > 0 && word) {
				camel[k++] = (char)(next >= 'a' && next <= 'z' ? next - 'a' + 'A' : next);
				i++;
			} else {
				camel[k++] = snake[i];
			}
		}
		put_string(j, camel, k);
		free(camel);
		return;
	}
	const unsigned char *s = (const unsigned char *)snake;
	char *o = room(j, 6 * n + 2);
	*o++ = '"';
	size_t i = 0;
	while (i < n) {
		const unsigned char *u = memchr(s + i, '_', n - i);
		o = escape_units(o, s, &i, u ? (size_t)(u - s) : n, n);
		if (i >= n)
			break;
		unsigned char next = s[i + 1]; /* s[n] is the NUL */
		bool word = (next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') ||
			    (next >= '0' && next <= '9');
		if (i > 0 && word) {
			*o++ = (char)(next >= 'a' && next <= 'z' ? next - 'a' + 'A' : next);
			i += 2;
		} else {
			*o++ = '_';
			i++;
		}
	}
	*o++ = '"';
	j->len = (size_t)(o - j->buf);
}

/* Keys up to this long take hv_json_key's one-pass path. */
#define KEY_FAST_MAX 32

/* hv_json_key for any key: camel case, long keys, keys with bytes to escape. Kept out of
 * hv_json_key, whose fast path then saves no registers. */
static __attribute__((noinline)) void key_general(hv_json *j, const char *snake_key)
{
	size_t n = strlen(snake_key);
	if (j->kase != HV_CASE_CAMEL && n <= STRING_CHUNK) {
		/* Up to a pass long: the comma, the quoted name and the colon through one
		 * room() request. */
		char *o = room(j, 6 * n + 4);
		if (j->has_member)
			*o++ = ',';
		*o++ = '"';
		size_t i = 0;
		o = escape_units(o, (const unsigned char *)snake_key, &i, n, n);
		*o++ = '"';
		*o++ = ':';
		j->len = (size_t)(o - j->buf);
		j->has_member = true;
		j->after_key = true;
		return;
	}
	if (j->has_member)
		put_char(j, ',');
	j->has_member = true;
	put_name(j, snake_key);
	put_char(j, ':');
	j->after_key = true;
}

void hv_json_key(hv_json *j, const char *snake_key)
{
	J_NEED(j);
	J_NEED_DATA(j, snake_key, 1);
	if (HV_LIKELY(j->kase != HV_CASE_CAMEL)) {
		/* The common case, once per member of every record: a key is a short literal with
		 * nothing to escape. It is copied while its end is looked for (no strlen, no
		 * word-at-a-time setup, which cost more than the copy on 4-byte keys), the comma,
		 * quotes and colon with it, through one room() request. A longer key, or one with
		 * a byte to escape, is written again by key_general over what this left (j->len
		 * is only set on success). */
		char *o = room(j, KEY_FAST_MAX + 4);
		if (j->has_member)
			*o++ = ',';
		*o++ = '"';
		const unsigned char *k = (const unsigned char *)snake_key;
		for (size_t i = 0; i < KEY_FAST_MAX; i++) {
			unsigned c = k[i];
			o[i] = (char)c; /* room: KEY_FAST_MAX + 4 */
			if (HV_LIKELY(!byte_class[c]))
				continue;
			if (c != 0)
				break; /* a byte to escape */
			o[i] = '"';
			o[i + 1] = ':';
			j->len = (size_t)(o + i + 2 - j->buf);
			j->has_member = true;
			j->after_key = true;
			return;
		}
	}
	key_general(j, snake_key);
}

void hv__json_key_plain(hv_json *j, const char *key, size_t len)
{
	if (HV_UNLIKELY(j->kase == HV_CASE_CAMEL || len < 2 || len > 16)) {
		hv_json_key(j, key);
		return;
	}
	char *o = room(j, 16 + 4);
	if (j->has_member)
		*o++ = ',';
	*o++ = '"';
	/* 2..16 bytes as two loads that overlap in the middle, stored the same way. */
	if (len >= 8) {
		uint64_t a, b;
		memcpy(&a, key, 8);
		memcpy(&b, key + len - 8, 8);
		memcpy(o, &a, 8);
		memcpy(o + len - 8, &b, 8);
	} else if (len >= 4) {
		uint32_t a, b;
		memcpy(&a, key, 4);
		memcpy(&b, key + len - 4, 4);
		memcpy(o, &a, 4);
		memcpy(o + len - 4, &b, 4);
	} else {
		uint16_t a, b;
		memcpy(&a, key, 2);
		memcpy(&b, key + len - 2, 2);
		memcpy(o, &a, 2);
		memcpy(o + len - 2, &b, 2);
	}
	o += len;
	*o++ = '"';
	*o++ = ':';
	j->len = (size_t)(o - j->buf);
	j->has_member = true;
	j->after_key = true;
}

void hv_json_key_null(hv_json *j, const char *snake_key)
{
	J_NEED(j);
	J_NEED_DATA(j, snake_key, 1);
	if (j->kase == HV_CASE_CAMEL)
		return; /* unknown: the TypeScript records leave the member out */
	hv_json_key(j, snake_key);
	hv_json_null(j);
}

void hv_json_enum(hv_json *j, const char *snake_value)
{
	J_NEED(j);
	if (!snake_value) {
		hv_json_null(j);
		return;
	}
	begin_value(j);
	put_name(j, snake_value);
}

/* ---- numbers, literals, base64 ---------------------------------------------------- */

static const char digit_pairs[201] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

/* The decimal digits of v, ending at end; returns where they start. */
static char *format_u64(char *end, uint64_t v)
{
	while (v >= 100) {
		unsigned d = (unsigned)(v % 100) * 2;
		v /= 100;
		end -= 2;
		end[0] = digit_pairs[d];
		end[1] = digit_pairs[d + 1];
	}
	if (v >= 10) {
		end -= 2;
		end[0] = digit_pairs[v * 2];
		end[1] = digit_pairs[v * 2 + 1];
	} else {
		*--end = (char)('0' + v);
	}
	return end;
}

static void put_number(hv_json *j, bool negative, uint64_t magnitude)
{
	char tmp[24], *end = tmp + sizeof(tmp);
	char *p = format_u64(end, magnitude);
	if (negative)
		*--p = '-';
	begin_value(j);
	size_t n = (size_t)(end - p);
	char *o = room(j, n);
	memcpy(o, p, n);
	j->len = (size_t)(o + n - j->buf);
}

void hv_json_int(hv_json *j, int64_t v)
{
	J_NEED(j);
	/* The magnitude in unsigned arithmetic: -INT64_MIN does not fit an int64_t. */
	put_number(j, v < 0, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
}

void hv_json_uint(hv_json *j, uint64_t v)
{
	J_NEED(j);
	put_number(j, false, v);
}

void hv_json_bool(hv_json *j, bool v)
{
	J_NEED(j);
	begin_value(j);
	char *o = room(j, 5);
	memcpy(o, v ? "true" : "false", 5); /* "true" with its NUL: 5 bytes either way */
	j->len = (size_t)(o + (v ? 4 : 5) - j->buf);
}

void hv_json_null(hv_json *j)
{
	J_NEED(j);
	begin_value(j);
	put_bytes(j, "null", 4);
}

void hv_json_raw(hv_json *j, const char *text, size_t len)
{
	J_NEED(j);
	J_NEED_DATA(j, text, len);
	begin_value(j);
	put_bytes(j, text, len);
}

static const char base64_alphabet[65] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* The base64 of len bytes, with the padded last group when len is not a multiple of 3. */
static void base64_groups(hv_json *j, const unsigned char *s, size_t len)
{
	/* Whole groups of 3 bytes, a chunk at a time, straight into the buffer. */
	size_t whole = len - len % 3;
	for (size_t i = 0; i < whole;) {
		size_t n = whole - i < BASE64_CHUNK ? whole - i : BASE64_CHUNK;
		char *o = room(j, n / 3 * 4);
		for (size_t end = i + n; i < end; i += 3) {
			uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
			o[0] = base64_alphabet[v >> 18];
			o[1] = base64_alphabet[v >> 12 & 63];
			o[2] = base64_alphabet[v >> 6 & 63];
			o[3] = base64_alphabet[v & 63];
			o += 4;
		}
		j->len = (size_t)(o - j->buf);
	}
	if (len % 3) {
		char *o = room(j, 4);
		uint32_t v = (uint32_t)s[whole] << 16;
		if (len % 3 == 2)
			v |= (uint32_t)s[whole + 1] << 8;
		o[0] = base64_alphabet[v >> 18];
		o[1] = base64_alphabet[v >> 12 & 63];
		/* NOLINTNEXTLINE(bugprone-narrowing-conversions): '=' is an int constant in C */
		o[2] = len % 3 == 2 ? base64_alphabet[v >> 6 & 63] : '=';
		o[3] = '=';
		j->len = (size_t)(o + 4 - j->buf);
	}
}

void hv_json_base64(hv_json *j, const void *data, size_t len)
{
	J_NEED(j);
	J_NEED_DATA(j, data, len);
	hv_json_base64_begin(j);
	base64_groups(j, data, len);
	hv_json_base64_end(j);
}

void hv_json_base64_begin(hv_json *j)
{
	J_NEED(j);
	begin_value(j);
	put_char(j, '"');
}

void hv_json_base64_part(hv_json *j, const void *data, size_t len)
{
	J_NEED(j);
	J_NEED_DATA(j, data, len);
	base64_groups(j, data, len);
}

void hv_json_base64_end(hv_json *j)
{
	J_NEED(j);
	put_char(j, '"');
}

char *hv_json_buffer_strdup(const hv_json *j)
{
	if (!j)
		return NULL;
	size_t len;
	const char *text = hv_json_buffer(j, &len);
	char *out = malloc(len + 1);
	if (out) {
		memcpy(out, text, len);
		out[len] = '\0';
	}
	return out;
}
