/* A large batch of MIME cache lookups (hvst_mime_lookup_many, through hv_mime_detect_cached)
 * reads the table with SQLite's page cache held small: the merge reads each leaf once, and
 * keeping every page it read cost a warm `harvest mime` of 4,000 files ~300 allocations and
 * twice as many page faults. The answers are those of the run that filled the cache, the
 * connection's own cache size is back afterwards, and the pages kept stay few although the
 * table has many more. */
#include "testutil.h"
#include "harvest/collect.h"
#include "harvest/mime.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"
#include "mime_internal.h"
#include "store_internal.h"
#include "test_hook.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Enough rows for a table of well over 64 pages (a row holds ~300 bytes). */
enum { FILES = 1500 };

static const char *const kinds[] = {"words, words\n", "#!/bin/sh\necho hi\n",
				    "a,b,c\n1,2,3\n", "{\"k\": [1, 2]}\n", "<html></html>\n"};
static const char *const suffixes[] = {".txt", ".sh", ".csv", ".json", ".md", ""};

static const char *make_file(size_t i, char *buf, size_t cap)
{
	snprintf(buf, cap, "f%04zu%s", i, suffixes[i % 6]);
	return kinds[i % 5];
}

static int64_t query_int(hv_store *st, const char *sql)
{
	int64_t v = 0;
	assert_int_equal(hvst_query_int(st, sql, &v), HV_OK);
	return v;
}

static void test_large_batch_keeps_few_pages(void **state)
{
	(void)state;
	tu_corpus *c = tu_corpus_new(FILES, 0, make_file);
	tu_corpus_age(c);
	const char *const *paths = (const char *const *)c->paths;

	/* Fill the cache. */
	hv_store *st = NULL;
	assert_int_equal(hv_store_open(&st, c->db, HV_STORE_NO_HISTORY), HV_OK);
	hv_mime_result *first = NULL;
	assert_int_equal(hv_mime_detect_cached(st, paths, c->n, NULL, &first), HV_OK);
	assert_int_equal(hv_store_close(st), HV_OK);

	/* A fresh connection (an empty page cache) answers them all from the cache. */
	assert_int_equal(hv_store_open(&st, c->db, HV_STORE_NO_HISTORY), HV_OK);
	int64_t page_size = query_int(st, "PRAGMA page_size");
	int64_t pages = query_int(st, "PRAGMA page_count");
	assert_true(pages > 80); /* the table alone would fill a cache that kept every page */
	int64_t cache_size = query_int(st, "PRAGMA cache_size");
	unsigned long refined = hvm_refined_hits();
	hv_mime_result *again = NULL;
	assert_int_equal(hv_mime_detect_cached(st, paths, c->n, NULL, &again), HV_OK);
	assert_int_equal(hvm_refined_hits() - refined, c->n); /* every one a hit */
	for (size_t i = 0; i < c->n; i++) {
		assert_int_equal(again[i].status, HV_OK);
		assert_string_equal(again[i].mime_type, first[i].mime_type);
	}
	/* Few pages kept: far fewer than the table's leaves the batch read. */
	int cur = 0, hi = 0;
	assert_int_equal(sqlite3_db_status(st->db, SQLITE_DBSTATUS_CACHE_USED, &cur, &hi, 0),
			 SQLITE_OK);
	assert_true(cur < 40 * (page_size + 512));
	assert_true(cur < (pages / 2) * page_size);
	/* And the connection's cache size is its own again. */
	assert_int_equal(query_int(st, "PRAGMA cache_size"), cache_size);

	hv_mime_results_free(first, c->n);
	hv_mime_results_free(again, c->n);
	assert_int_equal(hv_store_close(st), HV_OK);
	tu_corpus_free(c);
}

/* The swap of a directory of the path between the lstat (the cache key) and the open: the
 * link dir/l leads to dir/a (a PNG at f) when the lstat is made and to dir/b (a PDF at f) when
 * the file is opened. */
struct swap {
	const char *dir;
	const char *to; /* what dir/l is made to lead to */
	int swaps;
};

static void swap_link(void *ctx, const char *path)
{
	struct swap *s = ctx;
	size_t len = strlen(path);
	if (len < 6 || strcmp(path + len - 2, ".x") != 0 || strncmp(path + len - 6, "/l/", 3) != 0)
		return;
	char *tmp = tu_path(s->dir, "l.new"), *link = tu_path(s->dir, "l");
	assert_int_equal(symlink(s->to, tmp), 0);
	assert_int_equal(rename(tmp, link), 0);
	free(tmp);
	free(link);
	s->swaps++;
}

static const unsigned char png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13,
				    'I', 'H', 'D', 'R', 0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0};
static const char pdf[] = "%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n";

/* What was opened after such a swap is answered (it is what the path names now), but not
 * cached under the key of the file the lstat found: a later lookup of that file by its own
 * path gets its own type, not the other file's. */
static void test_swap_before_open_not_cached(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	tu_mkdir(dir, "a");
	tu_mkdir(dir, "b");
	tu_write(dir, "a/f.x", png, sizeof(png));
	tu_write(dir, "b/f.x", pdf, sizeof(pdf) - 1);
	tu_write(dir, "a/g.x", png, sizeof(png));
	tu_mkdir(dir, "c");
	char *link = tu_path(dir, "l"), *via = tu_path(dir, "l/f.x"), *own = tu_path(dir, "a/f.x");
	char *db = tu_path(dir, "cache.db"), *c_g = tu_path(dir, "c/g.x");
	assert_int_equal(symlink("a", link), 0);
	assert_int_equal(symlink("../b/f.x", c_g), 0); /* c/g.x: a symlink where a/g.x is a file */
	sleep(3); /* past the 2 s rule, so an answer would be cached */

	hv_mime_opts o;
	hv_mime_opts_init(&o);
	o.raw = true;
	hv_store *st = NULL;
	assert_int_equal(hv_store_open(&st, db, HV_STORE_NO_HISTORY), HV_OK);
	struct swap sw = {.dir = dir, .to = "b"};
	hv__test_hook_set(HV__HOOK_MIME_BEFORE_OPEN, swap_link, &sw);
	hv_mime_result *r = NULL;
	const char *p1[] = {via};
	assert_int_equal(hv_mime_detect_cached(st, p1, 1, &o, &r), HV_OK);
	hv__test_hook_set(HV__HOOK_MIME_BEFORE_OPEN, NULL, NULL);
	assert_int_equal(sw.swaps, 1);
	assert_int_equal(r[0].status, HV_OK);
	assert_string_equal(r[0].mime_type, "application/pdf"); /* what the path names now */
	hv_mime_results_free(r, 1);

	/* The PNG by its own path: its own type, whether looked up now or cached after. */
	const char *p2[] = {own};
	for (int round = 0; round < 2; round++) {
		assert_int_equal(hv_mime_detect_cached(st, p2, 1, &o, &r), HV_OK);
		assert_int_equal(r[0].status, HV_OK);
		assert_string_equal(r[0].mime_type, "image/png");
		hv_mime_results_free(r, 1);
	}
	/* ... and the second of those was a hit: the cache holds one row, the PNG's own. */
	int64_t rows = 0;
	assert_int_equal(hvst_query_int(st, "SELECT count(*) FROM mime_cache", &rows), HV_OK);
	assert_int_equal(rows, 1);

	/* A swap that leaves a symlink at the name: the path is answered as one, and the file
	 * its lstat found (a/g.x) is not cached as a symlink. */
	char *via_g = tu_path(dir, "l/g.x"), *own_g = tu_path(dir, "a/g.x");
	assert_int_equal(unlink(link), 0);
	assert_int_equal(symlink("a", link), 0);
	sw.to = "c";
	hv__test_hook_set(HV__HOOK_MIME_BEFORE_OPEN, swap_link, &sw);
	const char *p3[] = {via_g};
	assert_int_equal(hv_mime_detect_cached(st, p3, 1, &o, &r), HV_OK);
	hv__test_hook_set(HV__HOOK_MIME_BEFORE_OPEN, NULL, NULL);
	assert_int_equal(sw.swaps, 2);
	assert_string_equal(r[0].mime_type, "inode/symlink");
	hv_mime_results_free(r, 1);
	const char *p4[] = {own_g};
	assert_int_equal(hv_mime_detect_cached(st, p4, 1, &o, &r), HV_OK);
	assert_string_equal(r[0].mime_type, "image/png");
	hv_mime_results_free(r, 1);
	free(via_g);
	free(own_g);
	unsigned loads = hvm_magic_loads();
	assert_int_equal(hv_mime_detect_cached(st, p2, 1, &o, &r), HV_OK);
	assert_string_equal(r[0].mime_type, "image/png");
	assert_int_equal(hvm_magic_loads(), loads); /* answered without libmagic */
	hv_mime_results_free(r, 1);
	assert_int_equal(hv_store_close(st), HV_OK);
	free(link);
	free(via);
	free(own);
	free(db);
	free(c_g);
	tu_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_large_batch_keeps_few_pages),
		cmocka_unit_test(test_swap_before_open_not_cached),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
