/* Where the database is when no path is given (SPEC 5: $HARVEST_DB, else
 * ${XDG_DATA_HOME:-$HOME/.local/share}/harvest/harvest.db), down to the account's home from
 * the password database when $HOME is not set, and the open's refusal of paths that are no
 * path. Each case that changes the environment runs in a child of its own. */
#include "testutil.h"

#include "harvest/store.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* hv_store_default_path() equals want; returns a nonzero code (and says why) when not. */
static int default_path_is(const char *want, int code)
{
	char *p = NULL;
	if (hv_store_default_path(&p) != HV_OK) {
		fprintf(stderr, "hv_store_default_path: %s\n", hv_error_last());
		return code;
	}
	int rc = strcmp(p, want) == 0 ? 0 : code + 1;
	if (rc)
		fprintf(stderr, "default path %s, expected %s\n", p, want);
	free(p);
	return rc;
}

/* An empty $HARVEST_DB is not set; a relative $XDG_DATA_HOME is ignored (the XDG base
 * directory rule); an empty or unset $HOME is the account's home from the password
 * database. */
static int fallbacks(void *arg)
{
	(void)arg;
	struct passwd *pw = getpwuid(getuid());
	if (!pw || !pw->pw_dir || !*pw->pw_dir)
		return 0; /* no account home to fall back to: nothing to compare */
	char want[4200];
	snprintf(want, sizeof(want), "%s/.local/share/harvest/harvest.db", pw->pw_dir);
	setenv("HARVEST_DB", "", 1);
	setenv("XDG_DATA_HOME", "relative/data", 1);
	setenv("HOME", "", 1);
	int rc = default_path_is(want, 10);
	unsetenv("HARVEST_DB");
	unsetenv("XDG_DATA_HOME");
	unsetenv("HOME");
	if (rc == 0)
		rc = default_path_is(want, 20);
	setenv("HOME", "/home/someone", 1);
	if (rc == 0)
		rc = default_path_is("/home/someone/.local/share/harvest/harvest.db", 30);
	setenv("XDG_DATA_HOME", "/data", 1);
	if (rc == 0)
		rc = default_path_is("/data/harvest/harvest.db", 40);
	return rc;
}

static void test_default_path_fallbacks(void **state)
{
	(void)state;
	assert_int_equal(tu_in_child(fallbacks, NULL), 0);
}

/* A process whose user has no entry in the password database and no $HOME: there is no
 * default location, which both the path and a default open say, pointing to the ways out. */
static int no_home(void *arg)
{
	(void)arg;
	uid_t uid = 4000321;
	if (getpwuid(uid))
		return 0; /* that uid exists here: nothing to test */
	if (setresuid(uid, uid, uid) != 0)
		return 10;
	unsetenv("HARVEST_DB");
	unsetenv("XDG_DATA_HOME");
	unsetenv("HOME");
	char *p = (char *)1;
	if (hv_store_default_path(&p) != HV_EDB)
		return 11;
	if (!strstr(hv_error_last(), "home directory") || !strstr(hv_error_last(), "HARVEST_DB") ||
	    !strstr(hv_error_last(), "--db"))
		return 12;
	hv_store *st = (hv_store *)1;
	if (hv_store_open(&st, NULL, 0) != HV_EDB || st)
		return 13;
	if (!strstr(hv_error_last(), "HARVEST_DB"))
		return 14;
	return 0;
}

static void test_no_home_at_all(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* becoming a user without an account needs root */
	assert_int_equal(tu_in_child(no_home, NULL), 0);
}

/* An empty path and a missing output handle are usage errors; nothing is opened. */
static void test_open_refuses_no_path(void **state)
{
	(void)state;
	hv_store *st = (hv_store *)1;
	assert_int_equal(hv_store_open(&st, "", 0), HV_EUSAGE);
	assert_null(st);
	assert_non_null(strstr(hv_error_last(), "empty"));
	assert_int_equal(hv_store_open(&st, "", HV_STORE_READONLY), HV_EUSAGE);
	assert_int_equal(hv_store_open(NULL, "/tmp/x.db", 0), HV_EUSAGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_path_fallbacks),
		cmocka_unit_test(test_no_home_at_all),
		cmocka_unit_test(test_open_refuses_no_path),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
