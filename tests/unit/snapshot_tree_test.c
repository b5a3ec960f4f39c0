/* Snapshots stored as (parent, name): entries added in any order, directories that were never
 * added themselves, files with entries below them (the API allows it), lookups, and entries
 * added twice through every path of the writer. The walk-order cases are in store_test and
 * the collect tests. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harvest/store.h"
#include "harvest/sys/store.h"

static int cmp_paths(const void *a, const void *b)
{
	const char *const *x = a, *const *y = b;
	return hv_store_path_cmp(*x, strlen(*x), *y, strlen(*y));
}

static hv_stat stat_of(size_t i)
{
	hv_stat s = {.dev = 7, .ino = 100 + i, .size = i, .mode = S_IFREG | 0644,
		     .mtime_ns = (int64_t)i, .ctime_ns = (int64_t)i + 1};
	return s;
}

/* Reads snapshot id back: every entry, in order, must be want[0..n) (sorted), with the stat
 * of its index in added[]. */
static void check_read_back(hv_store *st, int64_t id, char *const *want, size_t n,
			    char *const *added)
{
	hv_snapshot *sn;
	assert_int_equal(hv_store_snapshot_open(st, id, &sn), HV_OK);
	assert_int_equal(hv_snapshot_entries(sn), n);
	const hv_snapshot_entry *e;
	for (size_t k = 0; k < n; k++) {
		assert_int_equal(hv_snapshot_next(sn, &e), HV_OK);
		if (e->path_len != strlen(want[k]) || memcmp(e->path, want[k], e->path_len) != 0)
			fail_msg("entry %zu: %.*s, expected %s", k, (int)e->path_len, e->path,
				 want[k]);
		assert_int_equal(e->path[e->path_len], '\0');
		size_t i = 0;
		while (strcmp(added[i], want[k]) != 0)
			i++;
		assert_int_equal(e->st.ino, 100 + i);
		assert_int_equal(e->st.ctime_ns, (int64_t)i + 1);
	}
	assert_int_equal(hv_snapshot_next(sn, &e), HV_DONE);
	hv_snapshot_close(sn);
}

/* Many directories, each added after the entries below it, in a scrambled order: the writer
 * resolves them through its map (which grows past its first size) and the database. */
static void test_any_order(void **state)
{
	(void)state;
	tu_fx *f = tu_fx_new();
	enum { DIRS = 300, PER = 3 };
	size_t n = DIRS * (PER + 1);
	char **added = tu_xmalloc(n * sizeof(*added));
	size_t k = 0;
	char p[64];
	for (size_t d = 0; d < DIRS; d++) {
		size_t dd = (d * 7919) % DIRS; /* scrambled */
		for (size_t j = 0; j < PER; j++) {
			snprintf(p, sizeof(p), "top/d%03zu/f%zu", dd, j);
			added[k++] = tu_xmemdup(p, strlen(p));
		}
	}
	for (size_t d = 0; d < DIRS; d++) {
		snprintf(p, sizeof(p), "top/d%03zu", (d * 31) % DIRS);
		added[k++] = tu_xmemdup(p, strlen(p));
	}
	hv_snapshot_writer *w;
	assert_int_equal(hv_store_snapshot_begin(f->st, "/r", &w), HV_OK);
	for (size_t i = 0; i < n; i++) {
		hv_stat s = stat_of(i);
		if (strchr(added[i], '/') == strrchr(added[i], '/'))
			s.mode = S_IFDIR | 0755;
		assert_int_equal(hv_snapshot_writer_add(w, added[i], strlen(added[i]), &s, NULL),
				 HV_OK);
	}
	int64_t id;
	assert_int_equal(hv_snapshot_writer_finish(w, &id), HV_OK);

	/* "top" was never added: it is not an entry, but what is below it is. */
	char **want = tu_xmalloc(n * sizeof(*want));
	memcpy(want, added, n * sizeof(*want));
	qsort(want, n, sizeof(*want), cmp_paths);
	check_read_back(f->st, id, want, n, added);

	hv_snapshot *sn;
	assert_int_equal(hv_store_snapshot_open(f->st, id, &sn), HV_OK);
	hv_snapshot_entry e;
	assert_int_equal(hv_snapshot_lookup(sn, "top", 3, &e), HV_ENOTFOUND);
	assert_int_equal(hv_snapshot_lookup(sn, "top/d007", 8, &e), HV_OK);
	assert_true(S_ISDIR(e.st.mode));
	assert_int_equal(e.path_len, 8);
	assert_memory_equal(e.path, "top/d007", 8);
	assert_int_equal(hv_snapshot_lookup(sn, "top/d007/f2", 11, &e), HV_OK);
	assert_int_equal(hv_snapshot_lookup(sn, "top/d007/f3", 11, &e), HV_ENOTFOUND);
	assert_int_equal(hv_snapshot_lookup(sn, "nothere/f", 9, &e), HV_ENOTFOUND);
	assert_int_equal(hv_snapshot_lookup(sn, "", 0, &e), HV_ENOTFOUND);
	hv_snapshot_close(sn);
	for (size_t i = 0; i < n; i++)
		free(added[i]);
	free(added);
	free(want);
	tu_fx_free(f);
}

/* A "file" with entries below it (nothing stops a caller): both are read back, in order. */
static void test_file_with_entries(void **state)
{
	(void)state;
	tu_fx *f = tu_fx_new();
	char a0[] = "f", a1[] = "f/x", a2[] = "f-", a3[] = "e", a4[] = "f/x/y";
	char *added[] = {a0, a1, a2, a3, a4};
	size_t n = sizeof(added) / sizeof(added[0]);
	hv_snapshot_writer *w;
	assert_int_equal(hv_store_snapshot_begin(f->st, "/r", &w), HV_OK);
	for (size_t i = 0; i < n; i++) {
		hv_stat s = stat_of(i);
		assert_int_equal(hv_snapshot_writer_add(w, added[i], strlen(added[i]), &s, NULL),
				 HV_OK);
	}
	int64_t id;
	assert_int_equal(hv_snapshot_writer_finish(w, &id), HV_OK);
	char *want[] = {a3, a0, a1, a4, a2};
	check_read_back(f->st, id, want, n, added);
	tu_fx_free(f);
}

/* Added twice: the same path again, a directory filled in and then added once more, and a
 * directory met first as another path's (resolved from the database). */
static void test_added_twice(void **state)
{
	(void)state;
	tu_fx *f = tu_fx_new();
	hv_stat s = stat_of(1);
	const char *const cases[][3] = {
		{"a/b", "a", "a"},
		{"x", "y", "x"},
		{"a", "b/c", "a"},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		hv_snapshot_writer *w;
		assert_int_equal(hv_store_snapshot_begin(f->st, "/dup", &w), HV_OK);
		for (size_t i = 0; i < 3; i++)
			assert_int_equal(hv_snapshot_writer_add(w, cases[c][i], strlen(cases[c][i]),
								&s, NULL),
					 HV_OK);
		int64_t id;
		assert_int_equal(hv_snapshot_writer_finish(w, &id), HV_EUSAGE);
		assert_non_null(strstr(hv_error_last(), "added twice"));
	}
	/* Bad paths. */
	hv_snapshot_writer *w;
	assert_int_equal(hv_store_snapshot_begin(f->st, "/bad", &w), HV_OK);
	const char *bad[] = {"a//b", "/a", "a/", "/"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(hv_snapshot_writer_add(w, bad[i], strlen(bad[i]), &s, NULL),
				 HV_EUSAGE);
	assert_int_equal(hv_snapshot_writer_add(w, "a\0b", 3, &s, NULL), HV_EUSAGE);
	assert_int_equal(hv_snapshot_writer_abort(w), HV_OK);
	tu_fx_free(f);
}

/* More entries than a batch, below one directory added last: several pages of one
 * directory, resolved across flushed batches. */
static void test_many_in_one_directory(void **state)
{
	(void)state;
	tu_fx *f = tu_fx_new();
	enum { N = 5000 };
	char **added = tu_xmalloc((N + 1) * sizeof(*added));
	char p[64];
	for (size_t i = 0; i < N; i++) {
		snprintf(p, sizeof(p), "big/%05zu", (i * 7919) % N);
		added[i] = tu_xmemdup(p, strlen(p));
	}
	added[N] = tu_xmemdup("big", 3);
	hv_snapshot_writer *w;
	assert_int_equal(hv_store_snapshot_begin(f->st, "/r", &w), HV_OK);
	for (size_t i = 0; i <= N; i++) {
		hv_stat s = stat_of(i);
		assert_int_equal(hv_snapshot_writer_add(w, added[i], strlen(added[i]), &s, NULL),
				 HV_OK);
	}
	int64_t id;
	assert_int_equal(hv_snapshot_writer_finish(w, &id), HV_OK);
	char **want = tu_xmalloc((N + 1) * sizeof(*want));
	memcpy(want, added, (N + 1) * sizeof(*want));
	qsort(want, N + 1, sizeof(*want), cmp_paths);
	check_read_back(f->st, id, want, N + 1, added);
	for (size_t i = 0; i <= N; i++)
		free(added[i]);
	free(added);
	free(want);
	tu_fx_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_any_order),
		cmocka_unit_test(test_file_with_entries),
		cmocka_unit_test(test_added_twice),
		cmocka_unit_test(test_many_in_one_directory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
