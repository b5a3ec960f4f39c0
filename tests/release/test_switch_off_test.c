/* The test switches in a build without the test hooks (HARVEST_TESTS=OFF, what setup.sh
 * builds and what is installed): src/lib/test_hook.c compiled here without HARVEST_TEST_HOOKS
 * must read no HARVEST_TEST_* variable, so every switch stays off whatever the environment
 * says. The suite's own library has the hooks, so this is a build of that one file. */
#include "test_hook.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

static const char *const vars[] = {
	"HARVEST_TEST_WALK_BLOCKED",      "HARVEST_TEST_WALK_SLOW_CLAIMS",
	"HARVEST_TEST_CHANGES_LOST",      "HARVEST_TEST_CHANGES_READ_LATE",
	"HARVEST_TEST_CHANGES_READ_SLOW", "HARVEST_TEST_SNAPSHOT_LSTAT",
	"HARVEST_TEST_PG_SILENCE",
	"HARVEST_TEST_MIME_DIR_LATE",     "HARVEST_TEST_MIME_ONE_WORKER",
	"HARVEST_TEST_WALK_NO_DTYPE",
};

static void test_every_switch_off(void **state)
{
	(void)state;
	assert_int_equal(sizeof(vars) / sizeof(vars[0]), HV__SWITCH_COUNT);
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		assert_int_equal(setenv(vars[i], "1", 1), 0);
	for (int s = 0; s < HV__SWITCH_COUNT; s++)
		assert_false(hv__test_switch_on((hv__test_switch)s));
	hv__test_switches_reload();
	for (int s = 0; s < HV__SWITCH_COUNT; s++)
		assert_false(hv__test_switch_on((hv__test_switch)s));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_switch_off),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
