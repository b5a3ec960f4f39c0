/* hv_mime_detect_cached_lstat: the answer of each path follows the lstat its caller made
 * (`harvest mime` lstats each argument once, to tell a directory from a file, and the cache
 * lookup uses that same lstat): a regular file handed over as a FIFO's lstat is answered as
 * a FIFO, a handed-over errno is the path's error, and a real lstat is answered, cached and
 * then answered from the cache as hv_mime_detect_cached answers it. */
#include "testutil.h"

#include "harvest/collect.h"
#include "harvest/mime.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char text[] = "hello world, this is plain text\n";

static void test_follows_callers_lstat(void **state)
{
	tu_fx *f = *state;
	tu_write(f->root, "a.txt", text, sizeof(text) - 1);
	char *path = tu_path(f->root, "a.txt");
	const char *paths[] = {path};
	struct stat lst[1];
	int lerr[1] = {0};
	assert_int_equal(lstat(path, &lst[0]), 0);
	hv_mime_opts o;
	hv_mime_opts_init(&o);
	o.threads = 1;

	/* The caller's lstat says FIFO: no second lstat finds the regular file. */
	struct stat fifo[1] = {lst[0]};
	fifo[0].st_mode = S_IFIFO | 0644;
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_cached_lstat(f->st, paths, fifo, lerr, 1, &o, &r), HV_OK);
	assert_string_equal(r[0].mime_type, "inode/fifo");
	hv_mime_results_free(r, 1);

	/* The caller's lstat failed: that errno is the path's error. */
	lerr[0] = EACCES;
	assert_int_equal(hv_mime_detect_cached_lstat(f->st, paths, lst, lerr, 1, &o, &r), HV_WARN);
	assert_null(r[0].mime_type);
	assert_non_null(r[0].error);
	assert_non_null(strstr(r[0].error, "a.txt"));
	assert_non_null(strstr(r[0].error, strerror(EACCES)));
	hv_mime_results_free(r, 1);

	/* The real lstat: detected, cached, then the same answer from the cache, equal to
	 * hv_mime_detect_cached's. */
	lerr[0] = 0;
	assert_int_equal(hv_mime_detect_cached_lstat(f->st, paths, lst, lerr, 1, &o, &r), HV_OK);
	assert_string_equal(r[0].mime_type, "text/plain");
	hv_mime_results_free(r, 1);
	assert_int_equal(hv_mime_detect_cached_lstat(f->st, paths, lst, lerr, 1, &o, &r), HV_OK);
	assert_string_equal(r[0].mime_type, "text/plain");
	hv_mime_results_free(r, 1);
	assert_int_equal(hv_mime_detect_cached(f->st, paths, 1, &o, &r), HV_OK);
	assert_string_equal(r[0].mime_type, "text/plain");
	hv_mime_results_free(r, 1);
	free(path);
}

/* Without a store nothing is cached, and the answers still follow the caller's lstats: the
 * paths are not lstat'ed again. */
static void test_without_store(void **state)
{
	tu_fx *f = *state;
	tu_write(f->root, "b.txt", text, sizeof(text) - 1);
	tu_write(f->root, "c.txt", text, sizeof(text) - 1);
	char *b = tu_path(f->root, "b.txt"), *c = tu_path(f->root, "c.txt");
	const char *paths[] = {b, c, b};
	struct stat lst[3];
	int lerr[3] = {0, 0, EACCES};
	assert_int_equal(lstat(b, &lst[0]), 0);
	assert_int_equal(lstat(c, &lst[1]), 0);
	lst[0].st_mode = S_IFIFO | 0644;
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_cached_lstat(NULL, paths, lst, lerr, 3, NULL, &r), HV_WARN);
	assert_int_equal(r[0].status, HV_OK);
	assert_string_equal(r[0].mime_type, "inode/fifo");
	assert_int_equal(r[1].status, HV_OK);
	assert_string_equal(r[1].mime_type, "text/plain");
	assert_int_not_equal(r[2].status, HV_OK);
	assert_null(r[2].mime_type);
	assert_non_null(strstr(r[2].error, b));
	assert_non_null(strstr(r[2].error, strerror(EACCES)));
	assert_non_null(strstr(hv_error_last(), "1 of 3 paths"));
	hv_mime_results_free(r, 3);
	free(b);
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_follows_callers_lstat, tu_fx_setup,
						tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_without_store, tu_fx_setup, tu_fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
