/* Within one collect, libmagic's answer is reused for files with the same bytes, and each
 * file is still refined by its own name: the answers equal hv_mime_detect_paths()' (which
 * detects every file) on a corpus of duplicate contents under different names. */
#include "testutil.h"
#include "harvest/collect.h"
#include "harvest/mime.h"
#include "mime_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_same_bytes_different_names(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	static const char csv[] = "hello there\nsecond line\n"; /* text/plain to libmagic */
	static const char json[] = "{\"a\": [1, 2, 3]}\n";
	static const char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\1\0\0\0\1\x08\x02\0\0\0";
	const char *names[] = {"a.csv", "b.json", "c", "d.txt", "e.md",  "f.json", "g.csv",
			       "h",     "i.png",  "j.txt", "k.ipynb", "l.yaml"};
	const char *bodies[] = {csv, csv, csv, csv, csv, json, json, json, png, png, json, csv};
	const size_t lens[] = {sizeof(csv) - 1,  sizeof(csv) - 1, sizeof(csv) - 1,
			       sizeof(csv) - 1,  sizeof(csv) - 1, sizeof(json) - 1,
			       sizeof(json) - 1, sizeof(json) - 1, sizeof(png) - 1,
			       sizeof(png) - 1,  sizeof(json) - 1, sizeof(csv) - 1};
	enum { N = sizeof(names) / sizeof(names[0]) };
	for (size_t i = 0; i < N; i++)
		tu_write(dir, names[i], bodies[i], lens[i]);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	o.threads = 1; /* one detecting thread: exactly one detection per distinct content */
	hv_collection *c = NULL;
	unsigned long hits = hvm_memo_hits();
	assert_int_equal(hv_collect(NULL, dir, &o, &c), HV_OK);
	/* 12 files, 3 distinct contents: 3 detections, 9 reuses. */
	assert_int_equal(hvm_memo_hits() - hits, N - 3);
	assert_int_equal(c->n_files, N);
	char *paths[N];
	for (size_t i = 0; i < N; i++)
		paths[i] = tu_path(dir, c->files[i].path);
	hv_mime_result *want = NULL;
	assert_int_equal(hv_mime_detect_paths((const char *const *)paths, N, NULL, &want), HV_OK);
	for (size_t i = 0; i < N; i++)
		assert_string_equal(c->files[i].mime_type, want[i].mime_type);
	/* And refinement still differs by name over the same bytes. */
	const char *csv_type = NULL, *plain_type = NULL;
	for (size_t i = 0; i < N; i++) {
		if (strcmp(c->files[i].path, "a.csv") == 0)
			csv_type = c->files[i].mime_type;
		if (strcmp(c->files[i].path, "c") == 0)
			plain_type = c->files[i].mime_type;
	}
	assert_non_null(csv_type);
	assert_non_null(plain_type);
	assert_string_equal(csv_type, "text/csv");
	assert_string_not_equal(plain_type, "text/csv");
	hv_mime_results_free(want, N);
	for (size_t i = 0; i < N; i++)
		free(paths[i]);
	hv_collection_free(c);
	tu_rmrf(dir);
	free(dir);
}

/* The table itself: a miss, then the recorded answer, across growth. */
static void test_memo_table(void **state)
{
	(void)state;
	hvm_memo *m = hvm_memo_new();
	assert_non_null(m);
	char sha[65];
	for (int i = 0; i < 1000; i++) {
		snprintf(sha, sizeof(sha), "%064x", i * 2654435761u);
		assert_null(hvm_memo_get(m, sha));
		hvm_memo_put(m, sha, i % 2 ? "text/plain" : "image/png");
	}
	hvm_memo_put(m, sha, "application/json"); /* a second put keeps the first answer */
	for (int i = 0; i < 1000; i++) {
		snprintf(sha, sizeof(sha), "%064x", i * 2654435761u);
		char *raw = hvm_memo_get(m, sha);
		assert_non_null(raw);
		assert_string_equal(raw, i % 2 ? "text/plain" : "image/png");
		free(raw);
	}
	assert_null(hvm_memo_get(m, "short"));
	assert_null(hvm_memo_get(NULL, sha));
	hvm_memo_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_bytes_different_names),
		cmocka_unit_test(test_memo_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
