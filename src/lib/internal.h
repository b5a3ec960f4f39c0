/* Private helpers shared by libharvest's modules. Not installed. */
#ifndef HARVEST_INTERNAL_H
#define HARVEST_INTERNAL_H

#include "harvest/types.h"

#include <stdarg.h>
#include <stddef.h>

#define HV_ATTR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define HV_LIKELY(x) __builtin_expect(!!(x), 1)
#define HV_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Sets the calling thread's last error and returns status, so failures read
 * `return hv_error_set(HV_EIO, "%s: %s", path, strerror(errno));`. */
int hv_error_set(int status, const char *fmt, ...) HV_ATTR_PRINTF(2, 3);
/* The same with the reason taken from errnum: "<path>: <strerror(errnum)>". */
int hv_error_errno(int status, const char *path, int errnum);

/* A growing byte buffer. Always NUL-terminated after the first append. */
typedef struct hv_buf {
	char *data;
	size_t len;
	size_t cap;
} hv_buf;

/* Makes room for n more bytes; HV_ENOMEM on failure (the buffer is unchanged). */
int hv_buf_reserve(hv_buf *b, size_t n);
int hv_buf_append(hv_buf *b, const void *data, size_t n);
int hv_buf_append_str(hv_buf *b, const char *s);
int hv_buf_append_char(hv_buf *b, char c);
int hv_buf_printf(hv_buf *b, const char *fmt, ...) HV_ATTR_PRINTF(2, 3);
/* Shortens the buffer to n bytes (n <= len). */
void hv_buf_truncate(hv_buf *b, size_t n);
void hv_buf_free(hv_buf *b);

#endif
