/* hv_buf: the growing byte buffer every module builds strings in (SQL, JSON text, messages).
 * Out of memory is sticky (failed) and set as the last error, so a caller can append many
 * pieces and check once. */
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hv_status hv_buf_reserve(hv_buf *b, size_t n)
{
	if (b->cap - b->len > n)
		return HV_OK;
	size_t cap = b->cap ? b->cap : 64;
	while (cap - b->len <= n) {
		if (cap > SIZE_MAX / 2) {
			b->failed = true;
			return hv_error_set(HV_ENOMEM, "out of memory");
		}
		cap *= 2;
	}
	char *p = realloc(b->data, cap);
	if (!p) {
		b->failed = true;
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	b->data = p;
	b->cap = cap;
	return HV_OK;
}

hv_status hv_buf_append(hv_buf *b, const void *data, size_t n)
{
	hv_status rc = hv_buf_reserve(b, n);
	if (rc != HV_OK)
		return rc;
	if (n)
		memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
	return HV_OK;
}

hv_status hv_buf_append_str(hv_buf *b, const char *s)
{
	return hv_buf_append(b, s, strlen(s));
}

hv_status hv_buf_append_char(hv_buf *b, char c)
{
	return hv_buf_append(b, &c, 1);
}

hv_status hv_buf_printf(hv_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	hv_status rc = n < 0 ? hv_error_set(HV_EIO, "bad format") : hv_buf_reserve(b, (size_t)n);
	if (rc == HV_OK) {
		vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
		b->len += (size_t)n;
	}
	va_end(ap2);
	return rc;
}

void hv_buf_truncate(hv_buf *b, size_t n)
{
	if (n < b->len) {
		b->len = n;
		b->data[n] = '\0';
	}
}

void hv_buf_free(hv_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
	b->failed = false;
}
