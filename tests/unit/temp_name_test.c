/* The one temporary name (temp_name.h) and where it is used: a new database is built under it
 * beside its final name (so a name of NAME_MAX bytes can be created), the directory form of the
 * helper, and a draw that finds the name taken draws again. */
#include "testutil.h"

#include "harvest/store.h"
#include "temp_name.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How many entries of dir start with prefix (every entry: prefix ""), "." and ".." aside. */
static int entries_with(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	int n = 0;
	const struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    !strncmp(e->d_name, prefix, strlen(prefix)))
			n++;
	closedir(d);
	return n;
}

/* A database whose file name is as long as SQLite allows (NAME_MAX less "-journal": 247 bytes)
 * is created: its temporary name is the short one, not "<name>.init-XXXXXX" (259 bytes, which
 * no file system takes). */
static void test_database_name_max(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char name[248];
	memset(name, 'd', 244);
	memcpy(name + 244, ".db", 4);
	assert_int_equal(strlen(name), 247);
	char *db = tu_path(dir, name);
	hv_store *st = NULL;
	hv_status rc = hv_store_open(&st, db, 0);
	if (rc != HV_OK) {
		print_error("open: %s\n", hv_error_last());
		tu_rmrf(dir);
		fail();
	}
	hv_store_close(st);
	struct stat sb;
	assert_int_equal(lstat(db, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	/* Mode 0600 as before: it will keep copies of collected files. */
	assert_int_equal(sb.st_mode & 0077, 0);
	assert_int_equal(entries_with(dir, ".hv."), 0);
	/* It is a harvest database: a second open finds it and does not rebuild it. */
	assert_int_equal(hv_store_open(&st, db, HV_STORE_READONLY), HV_OK);
	hv_store_close(st);
	free(db);
	tu_rmrf(dir);
	free(dir);
}

/* A relative database path with no directory part is built in the current directory: the
 * temporary goes to the database's own directory, and nothing else is left there. */
static void test_database_relative_name(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char cwd[4096];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(dir), 0);
	hv_store *st = NULL;
	hv_status rc = hv_store_open(&st, "plain.db", 0);
	if (rc != HV_OK)
		fail_msg("open plain.db: %s", hv_error_last());
	hv_store_close(st);
	assert_int_equal(chdir(cwd), 0);
	assert_true(entries_with(dir, "plain.db") >= 1);
	assert_int_equal(entries_with(dir, "plain.db"), entries_with(dir, ""));
	tu_rmrf(dir);
	free(dir);
}

/* A database in a directory that does not exist is refused with the database's name and the
 * reason, and nothing is made. */
static void test_database_missing_dir(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *db = tu_path(dir, "no/such/h.db");
	hv_store *st = NULL;
	assert_int_equal(hv_store_open(&st, db, 0), HV_EDB);
	assert_null(st);
	assert_non_null(strstr(hv_error_last(), db));
	assert_non_null(strstr(hv_error_last(), strerror(ENOENT)));
	assert_int_equal(entries_with(dir, ""), 0);
	free(db);
	tu_rmrf(dir);
	free(dir);
}

/* hv_temp_create_in: dir/.hv. and 6 characters, created with the mode asked (less the umask),
 * and two calls never give the same file. */
static void test_create_in(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *a = NULL, *b = NULL;
	mode_t old = umask(022);
	int fa = hv_temp_create_in(dir, &a, O_RDWR, 0640);
	int fb = hv_temp_create_in(dir, &b, O_WRONLY, 0666);
	umask(old);
	assert_true(fa >= 0);
	assert_true(fb >= 0);
	assert_non_null(a);
	assert_non_null(b);
	assert_string_not_equal(a, b);
	size_t dl = strlen(dir);
	assert_int_equal(strlen(a), dl + 1 + HV_TEMP_NAME_LEN);
	assert_memory_equal(a, dir, dl);
	assert_memory_equal(a + dl, "/.hv.", 5);
	struct stat sa, sb;
	assert_int_equal(fstat(fa, &sa), 0);
	assert_int_equal(fstat(fb, &sb), 0);
	assert_int_equal(sa.st_mode & 07777, 0640);
	assert_int_equal(sb.st_mode & 07777, 0644);
	/* O_RDWR was given: the first can be read back. */
	assert_int_equal(write(fa, "xy", 2), 2);
	char back[2];
	assert_int_equal(pread(fa, back, 2, 0), 2);
	assert_int_equal(fcntl(fa, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	close(fa);
	close(fb);
	assert_int_equal(entries_with(dir, ".hv."), 2);
	free(a);
	free(b);
	tu_rmrf(dir);
	free(dir);
}

/* A directory that is missing, or not a directory, fails with errno set and no path. */
static void test_create_in_fails(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *missing = tu_path(dir, "missing");
	char *p = (char *)"unset";
	errno = 0;
	assert_int_equal(hv_temp_create_in(missing, &p, O_RDWR, 0600), -1);
	assert_int_equal(errno, ENOENT);
	assert_null(p);
	tu_write(dir, "file", "x", 1);
	char *file = tu_path(dir, "file");
	errno = 0;
	assert_int_equal(hv_temp_create_in(file, &p, O_RDWR, 0600), -1);
	assert_int_equal(errno, ENOTDIR);
	assert_null(p);
	free(file);
	free(missing);
	tu_rmrf(dir);
	free(dir);
}

/* hv_temp_create_at makes its file with O_EXCL (a name that exists is refused, which is what
 * makes it draw again) and a second file in the same directory gets another name. */
static void test_create_at_taken(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	char name[HV_TEMP_NAME_LEN + 1];
	int fd = hv_temp_create_at(dfd, name, O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	/* The name just made, asked for again through openat with the same flags: EEXIST, which
	 * is what makes hv_temp_create_at draw again. */
	errno = 0;
	assert_int_equal(openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600), -1);
	assert_int_equal(errno, EEXIST);
	/* A second file in the same directory is another name. */
	char other[HV_TEMP_NAME_LEN + 1];
	fd = hv_temp_create_at(dfd, other, O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_string_not_equal(name, other);
	close(dfd);
	tu_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_database_name_max),
		cmocka_unit_test(test_database_relative_name),
		cmocka_unit_test(test_database_missing_dir),
		cmocka_unit_test(test_create_in),
		cmocka_unit_test(test_create_in_fails),
		cmocka_unit_test(test_create_at_taken),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
