/* The MIME cache's lookups of a batch (hvst_mime_lookup_many: the sorted keys merged with the
 * table in one statement run, seeking again past gaps) answer exactly as one lookup per file
 * (hvst_mime_lookup_refined) did, whatever the keys: all of a cache, every other one, every
 * seventh (gaps the scan seeks over), reversed, repeated, hard links of one inode under names
 * refined differently, inodes the cache does not hold and another device's. Through
 * hv_mime_detect_cached: a batch that spans a miss, a file that vanished between its lstat and
 * the lookup, and a file changed since it was cached all get the answers an uncached run gives.
 */
#include "testutil.h"
#include "harvest/collect.h"
#include "harvest/mime.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"
#include "mime_internal.h"
#include "store_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { FILES = 120 };

/* A fixture: FILES files of a few kinds (and suffixes that refine them differently), three
 * hard links of one of them, all cached. */
typedef struct batch_fx {
	char *dir;
	char *db;
	hv_store *st;
	char *paths[FILES + 3];
	size_t n;
} batch_fx;

static const char *const kinds[] = {"words, words\n", "#!/bin/sh\necho hi\n",
				    "a,b,c\n1,2,3\n", "{\"k\": [1, 2]}\n", "<html></html>\n"};
static const char *const suffixes[] = {".txt", ".sh", ".csv", ".json", ".md", ""};

static int fx_setup(void **state)
{
	batch_fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->dir = tu_mkdtemp();
	f->db = tu_path(f->dir, "h.db");
	for (size_t i = 0; i < FILES; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%03zu%s", i, suffixes[i % 6]);
		const char *k = kinds[i % 5];
		tu_write(f->dir, name, k, strlen(k));
		f->paths[f->n++] = tu_path(f->dir, name);
	}
	/* One inode under names that refine its bytes differently. */
	static const char *const links[] = {"same.csv", "same.json", "same.md"};
	for (size_t i = 0; i < 3; i++) {
		char *p = tu_path(f->dir, links[i]);
		assert_int_equal(link(f->paths[2], p), 0);
		f->paths[f->n++] = p;
	}
	/* The cache takes only files whose change time is more than 2 s old. */
	sleep(3);
	assert_int_equal(hv_store_open(&f->st, f->db, 0), HV_OK);
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_cached(f->st, (const char *const *)f->paths, f->n, NULL, &r),
			 HV_OK);
	hv_mime_results_free(r, f->n);
	assert_int_equal(hv_store_flush(f->st), HV_OK);
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	batch_fx *f = *state;
	assert_int_equal(hv_store_close(f->st), HV_OK);
	for (size_t i = 0; i < f->n; i++)
		free(f->paths[i]);
	tu_rmrf(f->dir);
	free(f->dir);
	free(f->db);
	free(f);
	return 0;
}

static const char *base(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

/* The batch's answers for stats[0..n) against one lookup per key, field by field; returns
 * how many keys were hits. */
static size_t check_batch(hv_store *st, const hv_stat *stats, const char *const *names, size_t n,
			  const char *rfp)
{
	hv_magic *m;
	assert_int_equal(hvm_magic_open_lazy(&m, NULL, 0), HV_OK);
	const char *fp = hv_magic_fingerprint(m);
	hvst_mime_hit *many = calloc(n, sizeof(*many));
	hvst_mime_key *keys = calloc(n, sizeof(*keys));
	assert_non_null(many);
	assert_non_null(keys);
	for (size_t i = 0; i < n; i++)
		keys[i] = (hvst_mime_key){.s = &stats[i], .name = names[i],
					  .name_len = strlen(names[i]), .out = &many[i]};
	assert_int_equal(hvst_mime_lookup_many(st, fp, rfp, keys, n), HV_OK);
	size_t hits = 0;
	for (size_t i = 0; i < n; i++) {
		hvst_mime_hit one;
		assert_int_equal(hvst_mime_lookup_refined(st, &stats[i], fp, names[i],
							  strlen(names[i]), rfp, &one),
				 HV_OK);
		if (one.raw) {
			assert_non_null(many[i].raw);
			assert_string_equal(many[i].raw, one.raw);
			hits++;
		} else {
			assert_null(many[i].raw);
		}
		if (one.refined) {
			assert_non_null(many[i].refined);
			assert_string_equal(many[i].refined, one.refined);
		} else {
			assert_null(many[i].refined);
		}
		assert_string_equal(many[i].sha256, one.sha256);
		free(one.raw);
		free(one.refined);
		free(many[i].raw);
		free(many[i].refined);
	}
	free(many);
	free(keys);
	hv_magic_close(m);
	return hits;
}

/* stats and names of the fixture's paths picked by idx[0..n). */
static void pick(const batch_fx *f, const size_t *idx, size_t n, hv_stat *stats,
		 const char **names)
{
	for (size_t i = 0; i < n; i++) {
		struct stat s;
		assert_int_equal(lstat(f->paths[idx[i]], &s), 0);
		HV_STAT_FROM(&s, &stats[i]);
		names[i] = base(f->paths[idx[i]]);
	}
}

static void test_batch_equals_single_lookups(void **state)
{
	batch_fx *f = *state;
	const char *rfp = hvm_refine_fingerprint();
	assert_non_null(rfp);
	enum { MAX = 2 * (FILES + 3) + 4 };
	size_t idx[MAX];
	hv_stat stats[MAX];
	const char *names[MAX];
	size_t n;

	/* All of them, in order; then every other one; every seventh (gaps the scan seeks
	 * past); all of them reversed; all of them twice. */
	for (size_t step = 1; step <= 7; step += step == 1 ? 1 : 5) {
		n = 0;
		for (size_t i = 0; i < f->n; i += step)
			idx[n++] = i;
		pick(f, idx, n, stats, names);
		assert_int_equal(check_batch(f->st, stats, names, n, rfp), n);
	}
	n = 0;
	for (size_t i = f->n; i-- > 0;)
		idx[n++] = i;
	pick(f, idx, n, stats, names);
	assert_int_equal(check_batch(f->st, stats, names, n, rfp), n);
	n = 0;
	for (size_t i = 0; i < 2 * f->n; i++)
		idx[n++] = i % f->n;
	pick(f, idx, n, stats, names);
	assert_int_equal(check_batch(f->st, stats, names, n, rfp), n);

	/* Without refinement tables: libmagic's answers alone. */
	assert_int_equal(check_batch(f->st, stats, names, n, NULL), n);

	/* Keys the cache does not hold: an inode past every row, one before, another device's
	 * and a changed size, mixed with hits. */
	n = 0;
	for (size_t i = 0; i < 10; i++)
		idx[n++] = i;
	pick(f, idx, n, stats, names);
	stats[1].ino = UINT64_MAX / 2;
	stats[3].ino = 1;
	stats[5].dev += 1;
	stats[7].size += 1;
	assert_int_equal(check_batch(f->st, stats, names, n, rfp), n - 4);
	/* An empty batch. */
	assert_int_equal(check_batch(f->st, stats, names, 0, rfp), 0);
}

/* The hard links of one inode in one batch: each gets the answer an uncached run gives its
 * name, and so does every other path, in a batch that also spans a miss (a new file). */
static void test_links_and_miss_in_one_batch(void **state)
{
	batch_fx *f = *state;
	tu_write(f->dir, "new.csv", "x,y\n1,2\n", 8);
	char *fresh = tu_path(f->dir, "new.csv");
	const char *paths[FILES + 4];
	size_t n = 0;
	for (size_t i = 0; i < f->n; i++) {
		paths[n++] = f->paths[i];
		if (i == FILES / 2)
			paths[n++] = fresh;
	}
	hv_mime_result *cached = NULL, *plain = NULL;
	unsigned long refined_before = hvm_refined_hits();
	assert_int_equal(hv_mime_detect_cached(f->st, paths, n, NULL, &cached), HV_OK);
	/* Every cached path but the hard links, whose row keeps only the last name's
	 * refinement, was answered refined from the cache. */
	assert_true(hvm_refined_hits() - refined_before >= FILES - 3);
	assert_int_equal(hv_mime_detect_paths(paths, n, NULL, &plain), HV_OK);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(cached[i].mime_type, plain[i].mime_type);
	assert_string_equal(cached[n - 3].mime_type, "text/csv");
	assert_string_equal(cached[n - 2].mime_type, "application/json");
	assert_string_equal(cached[n - 1].mime_type, "text/markdown");
	hv_mime_results_free(cached, n);
	hv_mime_results_free(plain, n);
	free(fresh);
}

/* Paths lstat'ed by the caller and gone before the lookup: a cached one is answered from the
 * cache (as its lstat described it), an uncached one is the path's error; the rest of the
 * batch is answered as before. */
static void test_vanished_between_lstat_and_lookup(void **state)
{
	batch_fx *f = *state;
	tu_write(f->dir, "gone.txt", "soon gone\n", 10);
	char *gone = tu_path(f->dir, "gone.txt");
	const char *paths[] = {f->paths[0], f->paths[10], gone, f->paths[20]};
	enum { N = sizeof(paths) / sizeof(paths[0]) };
	struct stat lst[N];
	int lerr[N] = {0};
	for (size_t i = 0; i < N; i++)
		assert_int_equal(lstat(paths[i], &lst[i]), 0);
	hv_mime_result *before = NULL;
	assert_int_equal(hv_mime_detect_paths(paths, N, NULL, &before), HV_OK);
	assert_int_equal(unlink(gone), 0);
	assert_int_equal(unlink(f->paths[10]), 0);
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_cached_lstat(f->st, paths, lst, lerr, N, NULL, &r), HV_WARN);
	assert_string_equal(hv_error_last(), "1 of 4 paths could not be examined");
	assert_string_equal(r[0].mime_type, before[0].mime_type);
	assert_string_equal(r[1].mime_type, before[1].mime_type); /* from the cache */
	assert_null(r[2].mime_type);
	assert_non_null(r[2].error);
	assert_non_null(strstr(r[2].error, "gone.txt"));
	assert_non_null(strstr(r[2].error, strerror(ENOENT)));
	assert_string_equal(r[3].mime_type, before[3].mime_type);
	hv_mime_results_free(r, N);
	hv_mime_results_free(before, N);
	/* Put it back for the other tests (a new inode: a miss, then cached again later). */
	tu_write(f->dir, base(f->paths[10]), kinds[0], strlen(kinds[0]));
	free(gone);
}

/* A file rewritten since it was cached is examined again: its new bytes' answer, not the
 * stored one, with the same size too (its times changed). */
static void test_changed_file_reexamined(void **state)
{
	batch_fx *f = *state;
	const char *p = f->paths[0]; /* "words, words\n" as f000.txt */
	const char *paths[] = {f->paths[1], p, f->paths[2]};
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_cached(f->st, paths, 3, NULL, &r), HV_OK);
	assert_string_equal(r[1].mime_type, "text/plain");
	hv_mime_results_free(r, 3);
	static const char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0";
	hv_mime_opts raw;
	hv_mime_opts_init(&raw);
	raw.raw = true;
	tu_write(f->dir, base(p), png, sizeof(png) - 1);
	assert_int_equal(hv_mime_detect_cached(f->st, paths, 3, &raw, &r), HV_OK);
	assert_string_equal(r[1].mime_type, "image/png");
	hv_mime_results_free(r, 3);
	/* The same size as the cached bytes, other bytes. */
	tu_write(f->dir, base(p), "#!/bin/sh\nls\n", 13); /* 13 bytes, as "words, words\n" */
	hv_mime_result *plain = NULL;
	assert_int_equal(hv_mime_detect_cached(f->st, paths, 3, NULL, &r), HV_OK);
	assert_int_equal(hv_mime_detect_paths(paths, 3, NULL, &plain), HV_OK);
	for (size_t i = 0; i < 3; i++)
		assert_string_equal(r[i].mime_type, plain[i].mime_type);
	hv_mime_results_free(r, 3);
	hv_mime_results_free(plain, 3);
	assert_int_equal(hv_mime_detect_cached(f->st, paths, 3, &raw, &r), HV_OK);
	assert_string_equal(r[1].mime_type, "text/x-shellscript");
	hv_mime_results_free(r, 3);
	tu_write(f->dir, base(p), kinds[0], strlen(kinds[0]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_equals_single_lookups),
		cmocka_unit_test(test_links_and_miss_in_one_batch),
		cmocka_unit_test(test_vanished_between_lstat_and_lookup),
		cmocka_unit_test(test_changed_file_reexamined),
	};
	return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
