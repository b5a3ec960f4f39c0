/* hv_file_out: the streaming form of hv_write_file, the one writer behind `history get -o`
 * and `archive -o`: an unnamed file while it is written (a harvest killed then leaves
 * nothing), a short temporary name to replace a file by (a 255-byte FILE works), commit puts it
 * in place, abort leaves nothing, a shared file is written in place and cut to the new length,
 * and a file that appears meanwhile is not replaced. */
#include "testutil.h"

#include "harvest/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void write_str(hv_file_out *o, const char *s)
{
	size_t n = strlen(s);
	assert_int_equal(write(hv_file_out_fd(o), s, n), (ssize_t)n);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	static char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* The names in dir, but "." and "..". */
static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n;
}

static void test_longest_name(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char name[256];
	memset(name, 'x', 255);
	name[255] = '\0';
	char *path = tu_path(dir, name);
	hv_file_out *o = NULL;
	assert_int_equal(hv_file_out_open(&o, path, 0), HV_OK);
	write_str(o, "first");
	/* unnamed until commit where the file system has O_TMPFILE (as /tmp here), else the
	 * short temporary name */
	int probe = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	assert_int_equal(entries(dir), probe >= 0 ? 0 : 1);
	if (probe >= 0)
		close(probe);
	assert_int_equal(hv_file_out_commit(o), HV_OK);
	assert_string_equal(slurp(path), "first");
	/* Replaced, keeping its mode. */
	assert_int_equal(chmod(path, 0640), 0);
	assert_int_equal(hv_file_out_open(&o, path, 0), HV_OK);
	write_str(o, "2nd");
	assert_string_equal(slurp(path), "first"); /* readers see the old file until commit */
	assert_int_equal(entries(dir), 1);
	assert_int_equal(hv_file_out_commit(o), HV_OK);
	assert_string_equal(slurp(path), "2nd");
	struct stat sb;
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0640);
	assert_int_equal(entries(dir), 1);
	free(path);
}

static void test_abort_leaves_nothing(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *path = tu_path(dir, "out");
	hv_file_out *o = NULL;
	assert_int_equal(hv_file_out_open(&o, path, 0), HV_OK);
	write_str(o, "half");
	hv_file_out_abort(o);
	assert_int_equal(entries(dir), 0);
	hv_file_out_abort(NULL);
	free(path);
}

/* A file with another link is written in place (the link sees it), cut to the new length. */
static void test_shared_in_place(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *path = tu_path(dir, "out");
	char *lnk = tu_path(dir, "link");
	tu_write(dir, "out", "a much longer old content", 25);
	assert_int_equal(link(path, lnk), 0);
	hv_file_out *o = NULL;
	assert_int_equal(hv_file_out_open(&o, path, 0), HV_OK);
	write_str(o, "new");
	assert_int_equal(hv_file_out_commit(o), HV_OK);
	assert_string_equal(slurp(lnk), "new");
	assert_string_equal(slurp(path), "new");
	assert_int_equal(entries(dir), 2);
	free(lnk);
	free(path);
}

/* A missing FILE that someone else creates while it is written is left as they made it. */
static void test_created_meanwhile(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *path = tu_path(dir, "out");
	hv_file_out *o = NULL;
	assert_int_equal(hv_file_out_open(&o, path, 0), HV_OK);
	write_str(o, "mine");
	tu_write(dir, "out", "theirs", 6);
	assert_int_equal(hv_file_out_commit(o), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "created by someone else"));
	assert_string_equal(slurp(path), "theirs");
	assert_int_equal(entries(dir), 1);
	free(path);
}

static void test_refusals(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	hv_file_out *o = (hv_file_out *)1;
	assert_int_equal(hv_file_out_open(&o, dir, 0), HV_EIO);
	assert_null(o);
	assert_non_null(strstr(hv_error_last(), "Is a directory"));
	char *ln = tu_path(dir, "ln");
	assert_int_equal(symlink("target", ln), 0);
	assert_int_equal(hv_file_out_open(&o, ln, 0), HV_EUSAGE);
	assert_int_equal(hv_file_out_open(&o, "", 0), HV_EUSAGE);
	assert_int_equal(hv_file_out_commit(NULL), HV_EUSAGE);
	/* Followed on request: the target is written. */
	tu_write(dir, "target", "old", 3);
	assert_int_equal(hv_file_out_open(&o, ln, HV_WRITE_FOLLOW), HV_OK);
	write_str(o, "via link");
	assert_int_equal(hv_file_out_commit(o), HV_OK);
	char *target = tu_path(dir, "target");
	assert_string_equal(slurp(target), "via link");
	struct stat sb;
	assert_int_equal(lstat(ln, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	free(target);
	free(ln);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_longest_name, tu_cleanup),
		cmocka_unit_test_teardown(test_abort_leaves_nothing, tu_cleanup),
		cmocka_unit_test_teardown(test_shared_in_place, tu_cleanup),
		cmocka_unit_test_teardown(test_created_meanwhile, tu_cleanup),
		cmocka_unit_test_teardown(test_refusals, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
