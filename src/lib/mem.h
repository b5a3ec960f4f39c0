/* Large arrays made present at once (mem.c): shared by the library and the CLI, which fills
 * such arrays too (a list's lstats). Not part of the public API. */
#ifndef HV_MEM_H
#define HV_MEM_H

#include <stddef.h>

/* Keeps the pages of an array being filled present ahead of its writes: when used bytes of
 * base's cap are filled, [used, used + 1 MiB) is made present in one call, unless *done (the
 * bytes made present so far; 0 after the array moved) reaches half that far already. A
 * sandbox is often a virtual machine, where each first write to a page traps through the
 * hypervisor: about 15 us a page here, and about 7 us when made present together (the
 * program's first touch still traps: see hv_bulk_calloc for arrays whose size is known).
 * Best effort (nothing before Linux 5.14); the contents never change. */
void hv_prefault_ahead(void *base, size_t used, size_t cap, size_t *done);
/* Makes the whole pages of [base, base + len) present at once, for an array about to be
 * written through (see hv_prefault_ahead). */
void hv_prefault(void *base, size_t len);
/* calloc(1, len) for an array about to be filled and read through, freed with free(). From
 * 128 KiB on, it is whole 2 MiB pages from a 2 MiB boundary, advised as transparent huge
 * pages and made present in one call. In a virtual machine each small page also costs a trap
 * on its program's first touch, even one the kernel made present: 140 pages of lstats cost a
 * warm 4,000-file run 1.3 ms here, one huge page about 0.05 ms. A huge page is memory in
 * whole, so the array may hold up to 2 MiB more than len while it lives. NULL when out of
 * memory. */
void *hv_bulk_calloc(size_t len);

#endif
