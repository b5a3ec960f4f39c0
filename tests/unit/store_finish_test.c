/* hv_store_run_finish's artifacts, on both history backends (SQLite in the file, PostgreSQL
 * with a local cache; a real PostgreSQL 15, tu_pg.h): the check before the backend runs
 * refuses a bad artifact the same way on both (nothing recorded, the run still open), and
 * what a backend records is the checked digest, lower-cased. */
#include "testutil.h"
#include "tu_pg.h"
#include "harvest/store.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct backend {
	const char *name; /* what hv_store_history_backend says */
	char *root;
	char *path;       /* the database: a file, or a postgresql:// URI */
	char *cache;      /* the local cache (PostgreSQL only) */
} backend;

static void backend_open(backend *b, bool pg, hv_store **st)
{
	memset(b, 0, sizeof(*b));
	b->root = tu_mkdtemp();
	b->name = pg ? "postgresql" : "sqlite";
	b->path = pg ? tu_pg_newdb() : tu_path(b->root, "h.db");
	b->cache = pg ? tu_path(b->root, "cache.db") : NULL;
	if (hv_store_open_with_cache(st, b->path, b->cache, 0) != HV_OK)
		fail_msg("%s: %s", b->path, hv_error_last());
	assert_string_equal(hv_store_history_backend(*st), b->name);
}

static void backend_close(backend *b, hv_store *st)
{
	assert_int_equal(hv_store_close(st), HV_OK);
	tu_rmrf(b->root);
	free(b->root);
	free(b->path);
	free(b->cache);
}

/* The SHA-256 of s as 64 hex digits, upper-case when upper. */
static void sha_of(const char *s, bool upper, char out[65])
{
	unsigned char md[32];
	unsigned len = 0;
	assert_int_equal(EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL), 1);
	assert_int_equal(len, 32);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, upper ? "%02X" : "%02x", md[i]);
}

static hv_artifact_in artifact(const char *name, const char *sha, const char *content)
{
	return (hv_artifact_in){
		.path = name, .path_len = strlen(name), .name = name, .name_len = strlen(name),
		.mime_type = "text/plain", .size = content ? strlen(content) : 5, .sha256 = sha,
		.content = content, .content_len = content ? strlen(content) : 0,
	};
}

/* The run's row: whether it ended and how many artifacts it has. */
static void run_state(hv_store *st, int64_t id, bool *ended, uint64_t *artifacts)
{
	hv_run_filter f = {.run_id = id};
	hv_run_iter *it;
	assert_int_equal(hv_store_runs(st, &f, &it), HV_OK);
	const hv_run_row *r;
	assert_int_equal(hv_run_iter_next(it, &r), HV_OK);
	*ended = r->ended;
	*artifacts = r->artifacts;
	hv_run_iter_free(it);
}

static void check_backend(bool pg)
{
	backend b;
	hv_store *st;
	backend_open(&b, pg, &st);
	char hello[65], hello_upper[65];
	sha_of("hello", false, hello);
	sha_of("hello", true, hello_upper);
	int64_t id;
	hv_run_start rs = {.dir = "/c"};
	assert_int_equal(hv_store_run_begin(st, &rs, &id), HV_OK);
	hv_run_end end = {.duration_ms = -1};

	/* Each bad artifact, second after a good one: refused with its reason, nothing of the
	 * good one recorded, and the run still open. */
	struct {
		hv_artifact_in a;
		const char *reason;
	} bad[] = {
		{artifact("liar", hello, "HELLO"), "liar: the content does not match its SHA-256"},
		{artifact("short", hello, "hell"), "short: content of 4 bytes for a file of 5"},
		{artifact("nothex", "zz", NULL), "zz: not a SHA-256"},
		{artifact("nosha", NULL, NULL), "missing path, name, MIME type or SHA-256"},
	};
	bad[1].a.size = 5;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		hv_artifact_in in[2] = {artifact("ok", hello, "hello"), bad[i].a};
		hv_status rc = hv_store_run_finish(st, id, &end, in, 2);
		if (rc != HV_EUSAGE || !strstr(hv_error_last(), bad[i].reason))
			fail_msg("%s, %s: %d \"%s\", expected HV_EUSAGE \"%s\"", b.name,
				 bad[i].a.name, rc, hv_error_last(), bad[i].reason);
		bool ended;
		uint64_t n;
		run_state(st, id, &ended, &n);
		assert_false(ended);
		assert_int_equal(n, 0);
	}

	/* A digest given in capitals is recorded as the check made it: lower-case. */
	hv_artifact_in good[2] = {artifact("ok", hello_upper, "hello"),
				  artifact("ref", hello_upper, NULL)};
	if (hv_store_run_finish(st, id, &end, good, 2) != HV_OK)
		fail_msg("%s: %s", b.name, hv_error_last());
	bool ended;
	uint64_t n;
	run_state(st, id, &ended, &n);
	assert_true(ended);
	assert_int_equal(n, 2);
	hv_artifact_filter af = {.run_id = id};
	hv_artifact_iter *it;
	assert_int_equal(hv_store_artifacts(st, &af, &it), HV_OK);
	const hv_artifact_row *r;
	size_t rows = 0;
	while (hv_artifact_iter_next(it, &r) == HV_OK) {
		assert_string_equal(r->sha256, hello);
		rows++;
	}
	assert_int_equal(rows, 2);
	hv_artifact_iter_free(it);
	void *data = NULL;
	size_t len = 0;
	assert_int_equal(hv_store_content_get(st, hello, &data, &len), HV_OK);
	assert_int_equal(len, 5);
	assert_memory_equal(data, "hello", 5);
	free(data);
	backend_close(&b, st);
}

static void test_sqlite(void **state)
{
	(void)state;
	check_backend(false);
}

static void test_postgresql(void **state)
{
	(void)state;
	check_backend(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sqlite),
		cmocka_unit_test(test_postgresql),
	};
	return cmocka_run_group_tests(tests, NULL, tu_pg_stop);
}
