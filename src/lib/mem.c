/* Memory for the large arrays a command fills at once (a list's lstats, a MIME batch's
 * scratch): made present in few calls rather than faulted page by page. See mem.h. */
#include "mem.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14's uapi value, for older headers */
#endif

/* Arrays from this size on are placed on huge-page boundaries (hv_bulk_calloc). */
enum { BULK_MIN = 128 << 10, HUGE_PAGE = 2 << 20 };

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

void *hv_bulk_calloc(size_t len)
{
	if (len < BULK_MIN)
		return calloc(1, len ? len : 1);
	if (len > SIZE_MAX - HUGE_PAGE)
		return NULL;
	/* Whole huge pages from a huge-page boundary: only such a range can be one. malloc's
	 * own bookkeeping stays outside it, so free() takes it back as any block. */
	size_t span = (len + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
	void *p = aligned_alloc(HUGE_PAGE, span);
	if (!p)
		return NULL;
	/* Advice only: without transparent huge pages (or on a kernel before 5.14) these are
	 * small pages, made present together where the kernel can. */
	(void)madvise(p, span, MADV_HUGEPAGE);
	(void)madvise(p, len, MADV_POPULATE_WRITE);
	/* A fresh mapping is zero already, but a block malloc reuses is not. */
	memset(p, 0, len);
	return p;
}
