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

/* A writer that buffers and writes to fd (which it does not own). */
hv_status hv_json_new_fd(hv_json **out, int fd, hv_case kase);
/* A writer that accumulates everything in memory; read it with hv_json_buffer(). */
hv_status hv_json_new_buffer(hv_json **out, hv_case kase);
void hv_json_free(hv_json *j);

hv_case hv_json_case(const hv_json *j);
/* The bytes written so far to a buffer writer (not NUL-terminated), and their count. */
const char *hv_json_buffer(const hv_json *j, size_t *len);
/* Forgets the buffered bytes of a buffer writer (the structure state is kept). */
void hv_json_buffer_reset(hv_json *j);

/* Writes out what is buffered (fd writers). Returns HV_EIO on a write error (e.g. EPIPE);
 * the first write error is sticky and returned by every later flush. */
hv_status hv_json_flush(hv_json *j);
/* The sticky write status: HV_OK or HV_EIO. */
hv_status hv_json_status(const hv_json *j);
/* Bytes buffered and not yet written. */
size_t hv_json_pending(const hv_json *j);

/* Structure. Commas between members and elements are inserted by the writer. */
void hv_json_object_begin(hv_json *j);
void hv_json_object_end(hv_json *j);
void hv_json_array_begin(hv_json *j);
void hv_json_array_end(hv_json *j);
/* Ends a top-level value with '\n' (a jsonl record). */
void hv_json_newline(hv_json *j);

/* A member key, given in snake_case ("is_dir"), written as "isDir" in camel case. */
void hv_json_key(hv_json *j, const char *snake_key);
/* A member whose value is unknown: "key": null in snake case, left out in camel case. */
void hv_json_key_null(hv_json *j, const char *snake_key);

/* Values. */
void hv_json_string(hv_json *j, const char *bytes, size_t len);
void hv_json_cstring(hv_json *j, const char *s);
/* A string value in snake_case ("stream_chunk") written in camelCase when the writer is camel. */
void hv_json_enum(hv_json *j, const char *snake_value);
void hv_json_int(hv_json *j, int64_t v);
void hv_json_uint(hv_json *j, uint64_t v);
void hv_json_bool(hv_json *j, bool v);
void hv_json_null(hv_json *j);
/* Standard base64 (RFC 4648, with padding) of the bytes, as a JSON string. */
void hv_json_base64(hv_json *j, const void *data, size_t len);
/* Already-valid JSON text, inserted as one value. */
void hv_json_raw(hv_json *j, const char *text, size_t len);

/* Appends the JSON string form of bytes (with quotes) to a caller's growing buffer via the
 * writer's escaping rules; for tests and other modules. Returns the number of bytes the
 * escaped form takes. */
size_t hv_json_escape(const char *bytes, size_t len, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
