/* Public access to the strict UTF-8 rules the JSON writer and the stream splitter share, and
 * the escaping of names for terminals. */
#include "harvest/json.h"
#include "utf8.h"

#include <string.h>

size_t hv_utf8_char_length(const char *bytes, size_t len)
{
	return hv_utf8_sequence_length(bytes, len);
}

/* Stores n bytes at out + at, as far as cap allows (one byte kept for the NUL). */
static void put(char *out, size_t cap, size_t at, const char *s, size_t n)
{
	if (at + 1 >= cap)
		return;
	size_t room = cap - 1 - at;
	memcpy(out + at, s, n < room ? n : room);
}

size_t hv_text_escape(const char *bytes, size_t len, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	size_t at = 0;
	for (size_t i = 0; i < len;) {
		unsigned char ch = (unsigned char)bytes[i];
		size_t n = ch >= 0x80 ? hv_utf8_sequence_length(bytes + i, len - i) : 1;
		/* A C1 control is valid UTF-8 (0xc2 0x80..0x9f), yet a terminal may act on it as on
		 * ESC [ (U+009B is CSI): each of its bytes is escaped as an invalid byte is. */
		bool c1 = n == 2 && ch == 0xc2 && (unsigned char)bytes[i + 1] < 0xa0;
		if (ch < 0x20 || ch == 0x7f || n == 0 || c1) {
			size_t k = c1 ? 2 : 1;
			for (size_t b = 0; b < k; b++) {
				unsigned char x = (unsigned char)bytes[i + b];
				char e[4] = {'\\', 'x', hex[x >> 4], hex[x & 15]};
				put(out, cap, at, e, 4);
				at += 4;
			}
			i += k;
			continue;
		}
		if (ch == '\\') {
			put(out, cap, at, "\\\\", 2);
			at += 2;
		} else {
			put(out, cap, at, bytes + i, n);
			at += n;
		}
		i += n;
	}
	if (cap > 0)
		out[at < cap ? at : cap - 1] = '\0';
	return at;
}
