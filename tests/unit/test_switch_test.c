/* The test switches (src/lib/test_hook.h): each on exactly when its variable is "1", read
 * from the environment at the first call and then kept for the process, until a reload. */
#include "testutil.h"
#include "test_hook.h"

#include <stdlib.h>

static const char *const vars[HV__SWITCH_COUNT] = {
	[HV__SWITCH_WALK_BLOCKED] = "HARVEST_TEST_WALK_BLOCKED",
	[HV__SWITCH_WALK_SLOW_CLAIMS] = "HARVEST_TEST_WALK_SLOW_CLAIMS",
	[HV__SWITCH_CHANGES_LOST] = "HARVEST_TEST_CHANGES_LOST",
	[HV__SWITCH_CHANGES_READ_LATE] = "HARVEST_TEST_CHANGES_READ_LATE",
	[HV__SWITCH_CHANGES_READ_SLOW] = "HARVEST_TEST_CHANGES_READ_SLOW",
	[HV__SWITCH_SNAPSHOT_LSTAT] = "HARVEST_TEST_SNAPSHOT_LSTAT",
	[HV__SWITCH_PG_SILENCE] = "HARVEST_TEST_PG_SILENCE",
	[HV__SWITCH_MIME_DIR_LATE] = "HARVEST_TEST_MIME_DIR_LATE",
	[HV__SWITCH_MIME_ONE_WORKER] = "HARVEST_TEST_MIME_ONE_WORKER",
	[HV__SWITCH_WALK_NO_DTYPE] = "HARVEST_TEST_WALK_NO_DTYPE",
};

/* Runs first, so the library has not looked yet: the first call reads the environment. */
static void test_first_call_reads_environment(void **state)
{
	(void)state;
	assert_int_equal(setenv(vars[HV__SWITCH_WALK_SLOW_CLAIMS], "1", 1), 0);
	assert_int_equal(unsetenv(vars[HV__SWITCH_WALK_BLOCKED]), 0);
	assert_true(hv__test_switch_on(HV__SWITCH_WALK_SLOW_CLAIMS));
	assert_false(hv__test_switch_on(HV__SWITCH_WALK_BLOCKED));
}

/* Once read, a change of the environment is not seen until a reload: a walk does not call
 * getenv. */
static void test_kept_until_reload(void **state)
{
	(void)state;
	assert_int_equal(unsetenv(vars[HV__SWITCH_WALK_SLOW_CLAIMS]), 0);
	assert_int_equal(setenv(vars[HV__SWITCH_WALK_BLOCKED], "1", 1), 0);
	assert_true(hv__test_switch_on(HV__SWITCH_WALK_SLOW_CLAIMS));
	assert_false(hv__test_switch_on(HV__SWITCH_WALK_BLOCKED));
	hv__test_switches_reload();
	assert_false(hv__test_switch_on(HV__SWITCH_WALK_SLOW_CLAIMS));
	assert_true(hv__test_switch_on(HV__SWITCH_WALK_BLOCKED));
}

/* Only "1" turns a switch on: not "0", "", "10", "1 " or "yes". */
static void test_only_one_is_on(void **state)
{
	(void)state;
	static const char *const off[] = {"0", "", "10", "1 ", "yes", " 1"};
	for (int s = 0; s < HV__SWITCH_COUNT; s++) {
		if (!vars[s])
			fail_msg("switch %d has no variable in this test's table", s);
		for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
			assert_int_equal(setenv(vars[s], off[i], 1), 0);
			hv__test_switches_reload();
			if (hv__test_switch_on((hv__test_switch)s))
				fail_msg("%s=\"%s\" turned the switch on", vars[s], off[i]);
		}
		assert_int_equal(setenv(vars[s], "1", 1), 0);
		hv__test_switches_reload();
		assert_true(hv__test_switch_on((hv__test_switch)s));
		assert_int_equal(unsetenv(vars[s]), 0);
		hv__test_switches_reload();
		assert_false(hv__test_switch_on((hv__test_switch)s));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_call_reads_environment),
		cmocka_unit_test(test_kept_until_reload),
		cmocka_unit_test(test_only_one_is_on),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
