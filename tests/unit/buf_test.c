/* hv_buf (src/lib/internal.h), the growing buffer that builds SQL, JSON and paths: appends
 * keep it NUL-terminated; an append that cannot get memory leaves the contents as they were
 * and marks the buffer failed for good, so a query missing a clause is never run. */
#include "testutil.h"

#include "internal.h"

#include <stdint.h>
#include <string.h>

static void test_appends(void **state)
{
	(void)state;
	hv_buf b = {0};
	assert_int_equal(hv_buf_append_str(&b, "SELECT 1"), HV_OK);
	assert_int_equal(hv_buf_append_char(&b, ';'), HV_OK);
	assert_int_equal(hv_buf_printf(&b, " -- %d rows", 42), HV_OK);
	assert_string_equal(b.data, "SELECT 1; -- 42 rows");
	assert_int_equal(b.len, strlen(b.data));
	hv_buf_truncate(&b, 8);
	assert_string_equal(b.data, "SELECT 1");
	/* Growing past many doublings keeps every byte. */
	for (int i = 0; i < 10000; i++)
		assert_int_equal(hv_buf_append(&b, "0123456789", 10), HV_OK);
	assert_int_equal(b.len, 8 + 100000);
	assert_memory_equal(b.data + 8 + 99990, "0123456789", 11);
	assert_false(b.failed);
	hv_buf_free(&b);
}

static void test_failure_is_sticky(void **state)
{
	(void)state;
	hv_buf b = {0};
	assert_int_equal(hv_buf_append_str(&b, "SELECT * FROM runs"), HV_OK);
	/* More than any allocation can give: refused, the contents untouched. */
	assert_int_equal(hv_buf_reserve(&b, SIZE_MAX - 8), HV_ENOMEM);
	assert_non_null(strstr(hv_error_last(), "out of memory"));
	assert_true(b.failed);
	assert_string_equal(b.data, "SELECT * FROM runs");
	/* Later appends work, but the buffer stays marked: a clause is missing. */
	assert_int_equal(hv_buf_append_str(&b, " LIMIT 1"), HV_OK);
	assert_true(b.failed);
	hv_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_appends),
		cmocka_unit_test(test_failure_is_sticky),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
