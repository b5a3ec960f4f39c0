/* hv_buf: the growing byte buffer every module builds strings in (SQL, JSON text, messages).
 * Out of memory is sticky (failed) and set as the last error, so a caller can append many
 * pieces and check once. */
#include "internal.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14's uapi value, for older headers */
#endif

/* The page size, read once (two first calls at once both read it, alike). */
static uintptr_t page_size(void)
{
	static atomic_uintptr_t size;
	uintptr_t v = atomic_load_explicit(&size, memory_order_relaxed);
	if (!v) {
		long ps = sysconf(_SC_PAGESIZE);
		v = ps > 0 ? (uintptr_t)ps : 4096;
		atomic_store_explicit(&size, v, memory_order_relaxed);
	}
	return v;
}

void hv_prefault(void *base, size_t len)
{
	if (!base || !len)
		return;
	uintptr_t page = page_size();
	/* Whole pages inside the range only: a page it shares with other data is left alone. */
	char *first = base, *last = (char *)base + len;
	uintptr_t head = (uintptr_t)first & (page - 1);
	first += head ? page - head : 0;
	last -= (uintptr_t)last & (page - 1);
	if (last > first)
		(void)madvise(first, (size_t)(last - first), MADV_POPULATE_WRITE);
}

void hv_prefault_ahead(void *base, size_t used, size_t cap, size_t *done)
{
	enum { AHEAD = 1 << 20 };
	if (!base || *done >= used + AHEAD / 2 || used >= cap)
		return;
	size_t end = cap - used > AHEAD ? used + AHEAD : cap;
	size_t from = *done > used ? *done : used;
	if (end > from)
		hv_prefault((char *)base + from, end - from);
	*done = end;
}

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
