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

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_large_batch_keeps_few_pages),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
