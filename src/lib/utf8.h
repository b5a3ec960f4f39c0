/* Private UTF-8 helpers (strict UTF-8: no overlong forms, no encoded surrogates, nothing above
 * U+10FFFF). Pure functions on byte buffers, no state: easy to fuzz. */
#ifndef HARVEST_UTF8_H
#define HARVEST_UTF8_H

#include <stddef.h>

/* How many bytes of buf may be handed on now without cutting a character in two: len, minus
 * the tail (1 to 3 bytes) when buf ends with the valid beginning of a multi-byte sequence that
 * more bytes could complete. Invalid bytes are never held back (nothing can make them valid),
 * so a stream splitter that keeps the tail and prepends it to the next read holds at most 3
 * bytes and never delays anything but a character still being written. */
size_t hv_utf8_complete_prefix(const char *buf, size_t len);

/* The length (1 to 4) of the valid, complete UTF-8 sequence that starts buf, or 0 when buf
 * does not start with one (an invalid byte, or a sequence cut by the end of buf). */
size_t hv_utf8_sequence_length(const char *buf, size_t len);

#endif
