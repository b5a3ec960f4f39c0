/* harvest — a streaming JSON writer with exact strings.
 *
 * Byte strings are written as JSON strings that decode to the same bytes under Python's
 * surrogateescape rule: valid (strict) UTF-8 is kept, every other byte 0xXX becomes the escape
 * \udcXX. Control characters use JSON escapes. Keys are given in snake_case and written in
 * camelCase when the writer was made with HV_CASE_CAMEL. */
#ifndef HARVEST_JSON_H
#define HARVEST_JSON_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hv_case { HV_CASE_SNAKE = 0, HV_CASE_CAMEL = 1 } hv_case;

typedef struct hv_json hv_json;

/* A writer that buffers and writes to fd (which it does not own). Both constructors refuse a
 * kase that is neither HV_CASE_SNAKE nor HV_CASE_CAMEL (HV_EUSAGE). */
HV_EXTERN hv_status hv_json_new_fd(hv_json **out, int fd, hv_case kase);
/* A writer that accumulates everything in memory; read it with hv_json_buffer(). */
HV_EXTERN hv_status hv_json_new_buffer(hv_json **out, hv_case kase);
/* Frees the writer; an fd writer first flushes what is pending (check hv_json_flush()
 * before, to see the error). */
HV_EXTERN void hv_json_free(hv_json *j);

HV_EXTERN hv_case hv_json_case(const hv_json *j);
/* The bytes written so far to a buffer writer (not NUL-terminated), and their count. */
HV_EXTERN const char *hv_json_buffer(const hv_json *j, size_t *len);
/* A malloc'd, NUL-terminated copy of what a buffer writer holds (NULL when out of memory). */
HV_EXTERN char *hv_json_buffer_strdup(const hv_json *j);
/* Forgets the buffered bytes of a buffer writer (the structure state is kept). */
HV_EXTERN void hv_json_buffer_reset(hv_json *j);

/* Writes out what is buffered (fd writers). Returns HV_EIO on a write error (e.g. EPIPE);
 * the first write error is sticky and returned by every later flush. */
HV_EXTERN hv_status hv_json_flush(hv_json *j);
/* The sticky status: HV_OK, HV_EIO (a write error), HV_ENOMEM (a buffer writer could not
 * grow) or HV_EUSAGE (a NULL string, key or data of nonzero length was given to a call below;
 * hv_json_cstring and hv_json_enum of NULL write null instead, and every call with a NULL
 * writer does nothing). After an error the writer discards further output; calls remain
 * safe. */
HV_EXTERN hv_status hv_json_status(const hv_json *j);
/* Bytes buffered and not yet written. */
HV_EXTERN size_t hv_json_pending(const hv_json *j);

/* Structure. Commas between members and elements are inserted by the writer. */
HV_EXTERN void hv_json_object_begin(hv_json *j);
HV_EXTERN void hv_json_object_end(hv_json *j);
HV_EXTERN void hv_json_array_begin(hv_json *j);
HV_EXTERN void hv_json_array_end(hv_json *j);
/* Ends a top-level value with '\n' (a jsonl record). It does not flush: call
 * hv_json_flush() where a record must reach the reader now. */
HV_EXTERN void hv_json_newline(hv_json *j);

/* A member key, given in snake_case ("is_dir"), written as "isDir" in camel case. */
HV_EXTERN void hv_json_key(hv_json *j, const char *snake_key);
/* A member whose value is unknown: "key": null in snake case, left out in camel case. */
HV_EXTERN void hv_json_key_null(hv_json *j, const char *snake_key);

/* Values. */
HV_EXTERN void hv_json_string(hv_json *j, const char *bytes, size_t len);
HV_EXTERN void hv_json_cstring(hv_json *j, const char *s);
/* A string value in snake_case ("stream_chunk") written in camelCase when the writer is camel. */
HV_EXTERN void hv_json_enum(hv_json *j, const char *snake_value);
HV_EXTERN void hv_json_int(hv_json *j, int64_t v);
HV_EXTERN void hv_json_uint(hv_json *j, uint64_t v);
HV_EXTERN void hv_json_bool(hv_json *j, bool v);
HV_EXTERN void hv_json_null(hv_json *j);
/* Standard base64 (RFC 4648, with padding) of the bytes, as a JSON string. */
HV_EXTERN void hv_json_base64(hv_json *j, const void *data, size_t len);
/* The same string in pieces, for bytes that are not all in memory at once: _begin, then each
 * piece with _part (every piece but the last a multiple of 3 bytes long: a shorter group is
 * padded), then _end. The result is that of hv_json_base64 of the pieces joined. */
HV_EXTERN void hv_json_base64_begin(hv_json *j);
HV_EXTERN void hv_json_base64_part(hv_json *j, const void *data, size_t len);
HV_EXTERN void hv_json_base64_end(hv_json *j);
/* Already-valid JSON text, inserted as one value. */
HV_EXTERN void hv_json_raw(hv_json *j, const char *text, size_t len);

/* The JSON string form of bytes (with quotes), by the writer's escaping rules, into out,
 * snprintf-style: at most cap bytes are stored, always NUL-terminated when cap > 0 (the form
 * is cut short when it does not fit). Returns the length of the whole form, without the NUL;
 * it never exceeds 6 * len + 2, so a buffer of 6 * len + 3 always suffices. */
HV_EXTERN size_t hv_json_escape(const char *bytes, size_t len, char *out, size_t cap);

/* The length (1 to 4) of the valid, complete (strict) UTF-8 character that starts bytes,
 * or 0 when bytes does not start with one. For printers that escape everything else. */
HV_EXTERN size_t hv_utf8_char_length(const char *bytes, size_t len);

/* The form of bytes that is safe to show on a terminal, for text output and messages: every
 * byte of a C0 control (0x00-0x1f), DEL (0x7f), a C1 control (U+0080-U+009F, encoded as
 * 0xc2 0x80-0x9f) and every byte that is not part of valid UTF-8 becomes \xNN (lowercase hex),
 * a backslash becomes \\, and everything else (valid UTF-8 included) is kept. The original
 * bytes can be recovered from the form. snprintf-style like hv_json_escape: at most cap bytes
 * stored, NUL-terminated when cap > 0; returns the length of the whole form (at most
 * 4 * len, so a buffer of 4 * len + 1 always suffices). */
HV_EXTERN size_t hv_text_escape(const char *bytes, size_t len, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
