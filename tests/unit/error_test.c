/* The error model: HV_ENOTFOUND is a failure (negative) apart from HV_DONE, the end of an
 * iteration; the last error saved and restored around a cleanup that sets another keeps its
 * message (a long one included) and its status; errors are per thread. The version of the
 * headers (version.h) is the library's, and its parts spell it. */
#include "testutil.h"
#include "harvest/version.h"

#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_status_values(void **state)
{
	(void)state;
	/* `rc < 0` catches every failure; "not found" is one, "no more" is not. */
	assert_true(HV_ENOTFOUND < 0);
	assert_true(HV_DONE > 0);
	assert_int_not_equal(HV_ENOTFOUND, HV_DONE);
	const int failures[] = {HV_EIO,  HV_EUSAGE, HV_ENOTDIR, HV_ENOMEM,
				HV_EDB,  HV_ECHILD, HV_ENOTFOUND};
	for (size_t i = 0; i < sizeof(failures) / sizeof(failures[0]); i++)
		for (size_t k = 0; k < i; k++)
			assert_int_not_equal(failures[i], failures[k]);
}

/* A cleanup that fails after the failure being reported (a rollback, a close) does not
 * replace its message or status. */
static void test_save_restore(void **state)
{
	(void)state;
	assert_int_equal(hv_error_set(HV_ENOTFOUND, "no run %d", 7), HV_ENOTFOUND);
	hv_error_saved saved;
	hv_error_save(&saved);
	assert_int_equal(saved.status, HV_ENOTFOUND);
	hv_error_set(HV_EDB, "cannot roll back: database is locked");
	assert_int_equal(hv_error_last_status(), HV_EDB);
	assert_int_equal(hv_error_restore(&saved, saved.status), HV_ENOTFOUND);
	assert_string_equal(hv_error_last(), "no run 7");
	assert_int_equal(hv_error_last_status(), HV_ENOTFOUND);
	/* The caller may return another status with the saved message. */
	assert_int_equal(hv_error_restore(&saved, HV_EIO), HV_EIO);
	assert_string_equal(hv_error_last(), "no run 7");
	assert_int_equal(hv_error_last_status(), HV_EIO);
	hv_error_clear();
	assert_string_equal(hv_error_last(), "");
	assert_int_equal(hv_error_last_status(), HV_OK);
}

/* A message longer than the buffer is kept as its start and its end, and survives a save and
 * a restore exactly. */
static void test_save_restore_long(void **state)
{
	(void)state;
	size_t n = HV_ERROR_MAX * 2;
	char *path = malloc(n + 1);
	assert_non_null(path);
	memset(path, 'p', n);
	path[n] = '\0';
	hv_error_set(HV_EIO, "%s: Permission denied", path);
	char *before = strdup(hv_error_last());
	assert_non_null(before);
	assert_true(strlen(before) < HV_ERROR_MAX);
	assert_non_null(strstr(before, "...p"));
	assert_non_null(strstr(before, ": Permission denied"));
	hv_error_saved saved;
	hv_error_save(&saved);
	hv_error_set(HV_ENOMEM, "out of memory");
	hv_error_restore(&saved, saved.status);
	assert_string_equal(hv_error_last(), before);
	assert_int_equal(hv_error_last_status(), HV_EIO);
	free(before);
	free(path);
}

static void *other_thread(void *arg)
{
	(void)arg;
	hv_error_set(HV_EUSAGE, "the other thread's error");
	return NULL;
}

static void test_per_thread(void **state)
{
	(void)state;
	hv_error_set(HV_ENOTFOUND, "no artifact 3");
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_string_equal(hv_error_last(), "no artifact 3");
	assert_int_equal(hv_error_last_status(), HV_ENOTFOUND);
}

static void test_version(void **state)
{
	(void)state;
	char parts[64];
	snprintf(parts, sizeof(parts), "%d.%d.%d", HV_VERSION_MAJOR, HV_VERSION_MINOR,
		 HV_VERSION_PATCH);
	assert_string_equal(parts, HV_VERSION);
	assert_string_equal(hv_version(), HV_VERSION);
	assert_int_equal(HV_VERSION_NUMBER,
			 HV_VERSION_MAJOR * 1000000 + HV_VERSION_MINOR * 1000 + HV_VERSION_PATCH);
#if HV_VERSION_NUMBER < 1000
#error "HV_VERSION_NUMBER is not usable in #if"
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_values),
		cmocka_unit_test(test_save_restore),
		cmocka_unit_test(test_save_restore_long),
		cmocka_unit_test(test_per_thread),
		cmocka_unit_test(test_version),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
