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
	tu_corpus *c;
	hv_store *st;
} batch_fx;

static const char *const kinds[] = {"words, words\n", "#!/bin/sh\necho hi\n",
				    "a,b,c\n1,2,3\n", "{\"k\": [1, 2]}\n", "<html></html>\n"};
static const char *const suffixes[] = {".txt", ".sh", ".csv", ".json", ".md", ""};

static const char *make_file(size_t i, char *buf, size_t cap)
{
	snprintf(buf, cap, "f%03zu%s", i, suffixes[i % 6]);
	return kinds[i % 5];
}

static int fx_setup(void **state)
{
	batch_fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->c = tu_corpus_new(FILES, 3, make_file);
	/* One inode under names that refine its bytes differently. */
	static const char *const links[] = {"same.csv", "same.json", "same.md"};
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(link(f->c->paths[2], tu_corpus_add(f->c, links[i])), 0);
	tu_corpus_age(f->c);
	assert_int_equal(hv_store_open(&f->st, f->c->db, 0), HV_OK);
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_cached(f->st, (const char *const *)f->c->paths, f->c->n,
					       NULL, &r),
			 HV_OK);
	hv_mime_results_free(r, f->c->n);
	assert_int_equal(hv_store_flush(f->st), HV_OK);
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	batch_fx *f = *state;
	assert_int_equal(hv_store_close(f->st), HV_OK);
	tu_corpus_free(f->c);
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
		} else {
			assert_null(many[i].raw);
		}
		/* A hit is libmagic's answer, or the refined one alone. */
		assert_false(one.raw && one.refined);
		hits += one.raw || one.refined;
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
		assert_int_equal(lstat(f->c->paths[idx[i]], &s), 0);
		HV_STAT_FROM(&s, &stats[i]);
		names[i] = base(f->c->paths[idx[i]]);
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
		for (size_t i = 0; i < f->c->n; i += step)
			idx[n++] = i;
		pick(f, idx, n, stats, names);
		assert_int_equal(check_batch(f->st, stats, names, n, rfp), n);
	}
	n = 0;
	for (size_t i = f->c->n; i-- > 0;)
		idx[n++] = i;
	pick(f, idx, n, stats, names);
	assert_int_equal(check_batch(f->st, stats, names, n, rfp), n);
	n = 0;
	for (size_t i = 0; i < 2 * f->c->n; i++)
		idx[n++] = i % f->c->n;
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
	tu_write(f->c->dir, "new.csv", "x,y\n1,2\n", 8);
	char *fresh = tu_path(f->c->dir, "new.csv");
	const char *paths[FILES + 4];
	size_t n = 0;
	for (size_t i = 0; i < f->c->n; i++) {
		paths[n++] = f->c->paths[i];
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

/* Paths lstat'ed by the caller and gone before the lookup: the uncached one is the path's
 * error (libmagic cannot open it); the cached one, the caller's own file with its owner's read
 * bit, is answered from the cache as the lstat found it (the owner needs no faccessat, which
 * alone would look again); the rest of the batch is answered as before. */
static void test_vanished_between_lstat_and_lookup(void **state)
{
	batch_fx *f = *state;
	tu_write(f->c->dir, "gone.txt", "soon gone\n", 10);
	char *gone = tu_path(f->c->dir, "gone.txt");
	const char *paths[] = {f->c->paths[0], f->c->paths[10], gone, f->c->paths[20]};
	enum { N = sizeof(paths) / sizeof(paths[0]) };
	struct stat lst[N];
	int lerr[N] = {0};
	for (size_t i = 0; i < N; i++)
		assert_int_equal(lstat(paths[i], &lst[i]), 0);
	hv_mime_result *before = NULL;
	assert_int_equal(hv_mime_detect_paths(paths, N, NULL, &before), HV_OK);
	assert_int_equal(unlink(gone), 0);
	assert_int_equal(unlink(f->c->paths[10]), 0);
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_cached_lstat(f->st, paths, lst, lerr, N, NULL, &r), HV_WARN);
	assert_string_equal(hv_error_last(), "1 of 4 paths could not be examined");
	assert_string_equal(r[0].mime_type, before[0].mime_type);
	assert_int_equal(lst[1].st_uid, geteuid());
	assert_string_equal(r[1].mime_type, before[1].mime_type); /* cached */
	assert_null(r[1].error);
	assert_null(r[2].mime_type); /* not cached */
	assert_non_null(r[2].error);
	assert_non_null(strstr(r[2].error, base(paths[2])));
	assert_non_null(strstr(r[2].error, strerror(ENOENT)));
	assert_string_equal(r[3].mime_type, before[3].mime_type);
	hv_mime_results_free(r, N);
	hv_mime_results_free(before, N);
	/* Put it back for the other tests (a new inode: a miss, then cached again later). */
	tu_write(f->c->dir, base(f->c->paths[10]), kinds[0], strlen(kinds[0]));
	free(gone);
}

/* A file rewritten since it was cached is examined again: its new bytes' answer, not the
 * stored one, with the same size too (its times changed). */
static void test_changed_file_reexamined(void **state)
{
	batch_fx *f = *state;
	const char *p = f->c->paths[0]; /* "words, words\n" as f000.txt */
	const char *paths[] = {f->c->paths[1], p, f->c->paths[2]};
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_cached(f->st, paths, 3, NULL, &r), HV_OK);
	assert_string_equal(r[1].mime_type, "text/plain");
	hv_mime_results_free(r, 3);
	static const char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0";
	hv_mime_opts raw;
	hv_mime_opts_init(&raw);
	raw.raw = true;
	tu_write(f->c->dir, base(p), png, sizeof(png) - 1);
	assert_int_equal(hv_mime_detect_cached(f->st, paths, 3, &raw, &r), HV_OK);
	assert_string_equal(r[1].mime_type, "image/png");
	hv_mime_results_free(r, 3);
	/* The same size as the cached bytes, other bytes. */
	tu_write(f->c->dir, base(p), "#!/bin/sh\nls\n", 13); /* 13 bytes, as "words, words\n" */
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
	tu_write(f->c->dir, base(p), kinds[0], strlen(kinds[0]));
}

/* The answers of hv_mime_detect_dir, "path\ttype\n" each, in walk order. */
typedef struct dir_answers {
	char *text;
	size_t len;
} dir_answers;

static hv_status on_dir_answer(void *ctx, const char *path, size_t path_len,
			       const hv_mime_result *r)
{
	dir_answers *a = ctx;
	const char *type = r->mime_type ? r->mime_type : "(none)";
	size_t tl = strlen(type);
	a->text = tu_xrealloc(a->text, a->len + path_len + tl + 3);
	memcpy(a->text + a->len, path, path_len);
	a->len += path_len;
	a->text[a->len++] = '\t';
	memcpy(a->text + a->len, type, tl);
	a->len += tl;
	a->text[a->len++] = '\n';
	a->text[a->len] = '\0';
	return HV_OK;
}

/* Every answer below dir (leaving out the database's own files, which change as it is
 * written), through st's cache (NULL: none). */
static char *dir_run(hv_store *st, const char *dir, bool raw)
{
	static const char *const excludes[] = {"h.db*"};
	hv_collect_opts co;
	hv_collect_opts_init(&co);
	co.excludes = excludes;
	co.n_excludes = 1;
	hv_mime_opts mo;
	hv_mime_opts_init(&mo);
	mo.raw = raw;
	dir_answers a = {0};
	assert_int_equal(hv_mime_detect_dir(st, dir, &co, &mo, on_dir_answer, &a), HV_OK);
	assert_non_null(a.text);
	return a.text;
}

/* A directory's answers through the cache equal the uncached ones. Its batches learn each
 * name's refinement as the file arguments' do: a tree cached by a --raw walk is refined on
 * the next walk, which keeps the refinements, and the walk after it takes every answer
 * refined from the cache; the fixture's files, cached with their refinements by
 * hv_mime_detect_cached, are refined from the cache at once. */
static void test_dir_walk_learns_refinements(void **state)
{
	batch_fx *f = *state;
	char *plain_all = dir_run(NULL, f->c->dir, false);
	unsigned long before = hvm_refined_hits();
	char *cached_all = dir_run(f->st, f->c->dir, false);
	assert_string_equal(cached_all, plain_all);
	/* All but the hard links (their row keeps the last name's refinement only) and the
	 * files the tests before rewrote (not cached again: changed too recently). */
	assert_true(hvm_refined_hits() - before >= FILES - 8);

	tu_mkdir(f->c->dir, "sub");
	static const char *const names[] = {"sub/a.csv", "sub/b.json", "sub/c.txt", "sub/d.md",
					    "sub/e"};
	enum { SUB = sizeof(names) / sizeof(names[0]) };
	for (size_t i = 0; i < SUB; i++)
		tu_write(f->c->dir, names[i], kinds[2], strlen(kinds[2]));
	tu_corpus_age(f->c);
	char *sub = tu_path(f->c->dir, "sub");
	char *plain = dir_run(NULL, sub, false);
	char *raw = dir_run(NULL, sub, true);
	char *got = dir_run(f->st, sub, true); /* caches libmagic's answers alone */
	assert_string_equal(got, raw);
	free(got);
	assert_int_equal(hv_store_flush(f->st), HV_OK);
	before = hvm_refined_hits();
	got = dir_run(f->st, sub, false); /* hits, refined here: the refinements are kept */
	assert_string_equal(got, plain);
	assert_int_equal(hvm_refined_hits() - before, 0);
	free(got);
	assert_int_equal(hv_store_flush(f->st), HV_OK);
	before = hvm_refined_hits();
	got = dir_run(f->st, sub, false);
	assert_string_equal(got, plain);
	assert_int_equal(hvm_refined_hits() - before, SUB);
	/* The same bytes under other names: text/csv only where the name says so. */
	assert_non_null(strstr(plain, "a.csv\ttext/csv\n"));
	assert_non_null(strstr(plain, "b.json\tapplication/json\n"));
	free(got);
	free(plain);
	free(raw);
	free(sub);
	free(plain_all);
	free(cached_all);
	tu_rmrf(sub = tu_path(f->c->dir, "sub"));
	free(sub);
}

static hv_status refusing_answer(void *ctx, const char *path, size_t path_len,
				 const hv_mime_result *r)
{
	(void)path, (void)path_len, (void)r;
	int *calls = ctx;
	return ++*calls == 2 ? HV_EIO : HV_OK;
}

/* The answer callback fails on the second file: the walk stops there with its status, and
 * the message names the callback (it set none), never an empty or stale one. */
static void test_dir_callback_failure(void **state)
{
	batch_fx *f = *state;
	hv_mime_opts mo;
	hv_mime_opts_init(&mo);
	int calls = 0;
	hv_error_set(HV_ENOTFOUND, "a stale message");
	assert_int_equal(hv_mime_detect_dir(NULL, f->c->dir, NULL, &mo, refusing_answer, &calls),
			 HV_EIO);
	assert_int_equal(calls, 2);
	if (!strstr(hv_error_last(), "the answer callback failed"))
		fail_msg("the message: '%s'", hv_error_last());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_equals_single_lookups),
		cmocka_unit_test(test_links_and_miss_in_one_batch),
		cmocka_unit_test(test_vanished_between_lstat_and_lookup),
		cmocka_unit_test(test_changed_file_reexamined),
		cmocka_unit_test(test_dir_walk_learns_refinements),
		cmocka_unit_test(test_dir_callback_failure),
	};
	return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
