/* The CLI's one mapping of a library status to an exit status (SPEC 3), compiled in from the
 * CLI's printers: done 0; warnings, runtime failures and things not found 1; usage 2; a path
 * that is missing or not a directory 3. */
#include "testutil.h"

#include "../../src/cli/print.c"

static void test_exit_status(void **state)
{
	(void)state;
	assert_int_equal(cli_exit_status(HV_OK), 0);
	assert_int_equal(cli_exit_status(HV_WARN), 1);
	assert_int_equal(cli_exit_status(HV_EIO), 1);
	assert_int_equal(cli_exit_status(HV_ENOMEM), 1);
	assert_int_equal(cli_exit_status(HV_EDB), 1);
	assert_int_equal(cli_exit_status(HV_ECHILD), 1);
	assert_int_equal(cli_exit_status(HV_ENOTFOUND), 1);
	assert_int_equal(cli_exit_status(HV_EUSAGE), 2);
	assert_int_equal(cli_exit_status(HV_ENOTDIR), 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exit_status),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
