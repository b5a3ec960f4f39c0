/* hv_bulk_calloc and hv_prefault (mem.h): a bulk array is zeroed whatever memory it reuses,
 * large ones start on a huge-page boundary and are advised as huge pages (where the kernel
 * has them, /proc/self/smaps shows it), every one is freed by free(), and sizes that cannot
 * fit are refused, not wrapped. */
#include "testutil.h"

#include "mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { HUGE = 2 << 20 };

static bool all_zero(const unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (p[i])
			return false;
	}
	return true;
}

/* Small and large, each filled and freed and allocated again: malloc hands the same memory
 * back, which must come back zeroed. */
static void test_zeroed_and_freed(void **state)
{
	(void)state;
	static const size_t sizes[] = {0, 1, 4096, (128 << 10) - 1, 128 << 10, 900 << 10, HUGE,
				       HUGE + 1, 5 * (size_t)HUGE / 2};
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t len = sizes[k];
		for (int round = 0; round < 3; round++) {
			unsigned char *p = hv_bulk_calloc(len);
			assert_non_null(p);
			assert_true(all_zero(p, len));
			memset(p, 0xa5, len ? len : 1);
			free(p);
		}
	}
}

/* From 128 KiB on, the block starts on a 2 MiB boundary: only then can it be huge pages. */
static void test_large_aligned(void **state)
{
	(void)state;
	for (size_t len = 128 << 10; len <= 3 * (size_t)HUGE; len += 700 << 10) {
		void *p = hv_bulk_calloc(len);
		assert_non_null(p);
		assert_int_equal((uintptr_t)p % HUGE, 0);
		free(p);
	}
}

/* The mapping holding addr, as /proc/self/smaps lists it: whether its VmFlags include "hg"
 * (advised as huge pages). -1 when smaps cannot be read or has no such mapping. */
static int advised_huge(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return -1;
	char line[512];
	bool in = false;
	int found = -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
			continue;
		}
		if (in && strncmp(line, "VmFlags:", 8) == 0) {
			found = strstr(line, " hg") != NULL;
			break;
		}
	}
	fclose(f);
	return found;
}

/* The advice is given: smaps shows the mapping under a large block flagged "hg". (Whether the
 * kernel then backs it with huge pages is its own choice.) */
static void test_large_advised(void **state)
{
	(void)state;
	/* Without transparent huge pages in the kernel there is nothing to advise; valgrind
	 * serves the block from its own mappings. Either is reported as skipped. */
	if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0 || UNDER_VALGRIND())
		skip();
	unsigned char *p = hv_bulk_calloc(900 << 10);
	assert_non_null(p);
	int hg = advised_huge(p);
	if (hg < 0) {
		free(p);
		skip(); /* no /proc */
	}
	assert_int_equal(hg, 1);
	p[0] = 1;
	free(p);
}

static void test_too_large(void **state)
{
	(void)state;
	assert_null(hv_bulk_calloc(SIZE_MAX));
	assert_null(hv_bulk_calloc(SIZE_MAX - HUGE / 2));
}

/* hv_prefault never changes contents, whatever the range's alignment. */
static void test_prefault_keeps_contents(void **state)
{
	(void)state;
	size_t len = 64 << 10;
	unsigned char *p = malloc(len);
	assert_non_null(p);
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(i * 7);
	hv_prefault(p + 3, len - 100);
	hv_prefault(p, 0);
	hv_prefault(NULL, 10);
	for (size_t i = 0; i < len; i++)
		assert_int_equal(p[i], (unsigned char)(i * 7));
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_zeroed_and_freed),
		cmocka_unit_test(test_large_aligned),
		cmocka_unit_test(test_large_advised),
		cmocka_unit_test(test_too_large),
		cmocka_unit_test(test_prefault_keeps_contents),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
