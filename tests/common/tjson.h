/* A small, strict JSON reader for the test suite (not part of libharvest).
 *
 * tj_parse() reads one whole document into a tree. It is strict on purpose, so a test that
 * parses harvest's output fails when that output breaks the contract:
 *  - the input must be valid (strict) UTF-8: no overlong forms, no encoded surrogates, nothing
 *    above U+10FFFF; raw control characters inside strings are rejected;
 *  - an object must not repeat a key;
 *  - nothing but whitespace may follow the document.
 * Strings are decoded to BYTES, reversing Python's surrogateescape: the escape \udcXX
 * (XX >= 80) becomes the single byte 0xXX; other \u escapes and surrogate pairs become UTF-8.
 * A lone surrogate that has no byte meaning (\ud800, \udc41, ...) is a parse error, as
 * os.fsencode() would fail on it.
 * Every function accepts NULL (and answers "absent"), so lookups chain:
 *   tj_int(tj_get(tj_at(doc, 0), "size")). */
#ifndef HV_TJSON_H
#define HV_TJSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tj_kind {
	TJ_NULL,
	TJ_BOOL,
	TJ_INT,    /* a number without fraction or exponent (any size up to UINT64_MAX) */
	TJ_DOUBLE, /* a number with a fraction or an exponent */
	TJ_STRING,
	TJ_ARRAY,
	TJ_OBJECT,
} tj_kind;

typedef struct tj_value tj_value;

/* Flags for tj_parse_flags(). */
enum {
	/* Also accept a raw (UTF-8-encoded) U+DC80..U+DCFF in a string, as the byte 0x80..0xFF.
	 * Off by default: such text is not valid UTF-8, and harvest's output must be. */
	TJ_RAW_SURROGATES = 1,
};

/* The tree of one document, or NULL when text is not exactly one valid JSON document. */
tj_value *tj_parse(const char *text, size_t len);
tj_value *tj_parse_flags(const char *text, size_t len, unsigned flags);
/* JSON Lines: every line ('\n'-terminated; the last line's '\n' may be missing) is one
 * document. Returns an array of the documents, and their number in *count (may be NULL);
 * NULL when any line (including an empty line) is not a valid document. */
tj_value *tj_parse_lines(const char *text, size_t len, size_t *count);
void tj_free(tj_value *v);

tj_kind tj_type(const tj_value *v); /* TJ_NULL for a NULL v too: use tj_is_null to tell */
bool tj_is_null(const tj_value *v); /* v is present and is JSON null */
/* Member of an object by key (NUL-terminated); NULL when absent or v is not an object. */
const tj_value *tj_get(const tj_value *v, const char *key);
/* Elements of an array or members of an object; 0 for anything else. */
size_t tj_len(const tj_value *v);
/* The i-th element of an array or the i-th member's value of an object (in document order). */
const tj_value *tj_at(const tj_value *v, size_t i);
/* The i-th member's key of an object (bytes, NUL-terminated), or NULL. */
const char *tj_key(const tj_value *v, size_t i, size_t *len);
/* The decoded bytes of a string (also NUL-terminated), its length in *len (may be NULL);
 * NULL when v is not a string. */
const char *tj_str(const tj_value *v, size_t *len);
/* Numbers: tj_int of an integer out of int64 range, or of a non-integer, is 0 (and so is
 * tj_uint of a negative); tj_double works on both kinds. */
int64_t tj_int(const tj_value *v);
uint64_t tj_uint(const tj_value *v);
double tj_double(const tj_value *v);
bool tj_bool(const tj_value *v); /* false unless v is true */

/* Whether s is valid strict UTF-8 (shared with the tests). */
bool tj_utf8_valid(const char *s, size_t len);

#endif
