/* A content given through hv_artifact_in.read_content (a collection's spool) stored in a
 * PostgreSQL history (a real PostgreSQL 15, tu_pg.h): read and sent in pieces, never asked for
 * whole; stored exactly; one already stored is not read; a content that does not match its
 * digest, or whose read fails midway, leaves nothing; an empty one is stored empty; a role
 * that may not make a temporary table still stores it (whole, one at a time). Then a spooled
 * collection recorded end to end, and --mime patterns over stored types that a PostgreSQL
 * array literal must quote. */
#include "testutil.h"
#include "tu_pg.h"

#include "harvest/collect.h"
#include "harvest/store.h"
#include "internal.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the history asked read_content for. */
typedef struct reader {
	const unsigned char *data;
	size_t calls;
	size_t max_n;     /* the largest piece asked for */
	size_t fail_at;   /* > 0: the read of this call fails (HV_EIO) */
} reader;

static hv_status read_piece(void *ctx, const hv_artifact_in *a, uint64_t off, void *buf,
			    size_t n)
{
	reader *r = ctx;
	r->calls++;
	if (n > r->max_n)
		r->max_n = n;
	if (r->fail_at && r->calls == r->fail_at)
		return hv_error_set(HV_EIO, "%s: the test's read fails", a->path);
	assert_true(off + n <= a->content_len);
	memcpy(buf, r->data + off, n);
	return HV_OK;
}

static void sha_hex(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned len = 0;
	assert_int_equal(EVP_Digest(p, n, md, &len, EVP_sha256(), NULL), 1);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static unsigned char *noise(size_t n, unsigned seed)
{
	unsigned char *p = tu_xmalloc(n ? n : 1);
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (unsigned char)(x >> 24);
	}
	return p;
}

typedef struct pgfx {
	char *root;
	char *uri;
	char *cache;
	hv_store *st;
} pgfx;

static void open_as(pgfx *f, const char *uri)
{
	if (hv_store_open_with_cache(&f->st, uri, f->cache, 0) != HV_OK)
		fail_msg("%s: %s", uri, hv_error_last());
	assert_string_equal(hv_store_history_backend(f->st), "postgresql");
}

static int setup(void **state)
{
	pgfx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->root = tu_mkdtemp();
	f->uri = tu_pg_newdb();
	f->cache = tu_path(f->root, "cache.db");
	open_as(f, f->uri);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	pgfx *f = *state;
	if (f->st)
		hv_store_close(f->st);
	tu_rmrf(f->root);
	free(f->root);
	free(f->uri);
	free(f->cache);
	free(f);
	return 0;
}

static hv_artifact_in artifact(const char *name, const char *sha, size_t len, reader *r)
{
	return (hv_artifact_in){
		.path = name, .path_len = strlen(name), .name = name, .name_len = strlen(name),
		.mime_type = "application/octet-stream", .size = len, .sha256 = sha,
		.content_len = len, .read_content = read_piece, .read_ctx = r,
	};
}

/* Records one run with the n artifacts: hv_store_run_finish's status. */
static hv_status record(pgfx *f, hv_artifact_in *a, size_t n)
{
	int64_t id;
	hv_run_start rs = {.dir = "/c"};
	assert_int_equal(hv_store_run_begin(f->st, &rs, &id), HV_OK);
	hv_run_end end = {.duration_ms = -1};
	return hv_store_run_finish(f->st, id, &end, a, n);
}

/* The integer that head, arg and tail, one SQL query, give on f's database. */
static int64_t q(const pgfx *f, const char *head, const char *arg, const char *tail)
{
	char sql[512];
	snprintf(sql, sizeof(sql), "%s%s%s", head, arg, tail);
	return tu_pg_int(f->uri, sql);
}

/* Whether the content sha is stored and its bytes have that digest. */
static bool stored_exactly(const pgfx *f, const char *sha)
{
	return q(f, "SELECT count(*) FROM harvest.contents WHERE sha256 = '", sha,
		 "' AND encode(sha256(bytes), 'hex') = sha256") == 1;
}

/* How many rows table (of harvest's schema) has. */
static int64_t rows(const pgfx *f, const char *table)
{
	return q(f, "SELECT count(*) FROM harvest.", table, "");
}

enum { BIG = (5u << 20) + 12345 };

/* 5 MiB through read_content: asked for in pieces of at most 1 MiB (before: once, whole), and
 * stored exactly; the same content again is not read at all. */
static void test_pieces(void **state)
{
	pgfx *f = *state;
	unsigned char *data = noise(BIG, 1);
	char sha[65];
	sha_hex(data, BIG, sha);
	reader r = {.data = data};
	hv_artifact_in a = artifact("big.bin", sha, BIG, &r);
	if (record(f, &a, 1) != HV_OK)
		fail_msg("record: %s", hv_error_last());
	assert_true(r.calls > 1);
	assert_true(r.max_n <= (1u << 20));
	assert_int_equal(q(f, "SELECT length(bytes) FROM harvest.contents WHERE sha256 = '", sha,
			   "'"), BIG);
	assert_true(stored_exactly(f, sha));
	assert_int_equal(rows(f, "artifacts WHERE content_stored"), 1);
	/* What is stored reads back through the library too. */
	void *back = NULL;
	size_t len = 0;
	assert_int_equal(hv_store_content_get(f->st, sha, &back, &len), HV_OK);
	assert_int_equal(len, BIG);
	assert_memory_equal(back, data, BIG);
	free(back);

	reader again = {.data = data};
	a = artifact("copy.bin", sha, BIG, &again);
	assert_int_equal(record(f, &a, 1), HV_OK);
	assert_int_equal(again.calls, 0);
	assert_int_equal(rows(f, "contents"), 1);
	assert_int_equal(rows(f, "artifacts WHERE content_stored"), 2);
	free(data);
}

/* Bytes that do not match the digest, found once the last piece is read: HV_EUSAGE, and the
 * run's transaction has nothing of it (no content, no artifact). A read that fails at its
 * second piece: its own error, nothing stored either. Then the same session stores a good one
 * (the pieces of the failed ones are gone with their transaction). */
static void test_bad_and_failed(void **state)
{
	pgfx *f = *state;
	unsigned char *data = noise(BIG, 2);
	char sha[65], other[65];
	sha_hex(data, BIG, sha);
	sha_hex("x", 1, other);
	reader r = {.data = data};
	hv_artifact_in a = artifact("liar.bin", other, BIG, &r);
	assert_int_equal(record(f, &a, 1), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "liar.bin: the content does not match"));
	assert_true(r.calls > 1);
	assert_int_equal(rows(f, "contents"), 0);
	assert_int_equal(rows(f, "artifacts"), 0);

	reader fails = {.data = data, .fail_at = 2};
	a = artifact("cut.bin", sha, BIG, &fails);
	assert_int_equal(record(f, &a, 1), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "cut.bin: the test's read fails"));
	assert_int_equal(fails.calls, 2);
	assert_int_equal(rows(f, "contents"), 0);

	reader ok = {.data = data};
	a = artifact("good.bin", sha, BIG, &ok);
	if (record(f, &a, 1) != HV_OK)
		fail_msg("record: %s", hv_error_last());
	assert_true(stored_exactly(f, sha));
	free(data);
}

/* An empty content and two small ones in one run, beside one given in memory: each stored
 * exactly (the empty one as empty bytes, not NULL). */
static void test_empty_and_several(void **state)
{
	pgfx *f = *state;
	unsigned char *d1 = noise(1000, 3), *d2 = noise((1u << 20) + 1, 4);
	char s0[65], s1[65], s2[65], s3[65];
	sha_hex("", 0, s0);
	sha_hex(d1, 1000, s1);
	sha_hex(d2, (1u << 20) + 1, s2);
	sha_hex("in memory", 9, s3);
	reader r0 = {.data = (const unsigned char *)""}, r1 = {.data = d1}, r2 = {.data = d2};
	hv_artifact_in a[4] = {
		artifact("empty", s0, 0, &r0),
		artifact("one", s1, 1000, &r1),
		artifact("mem", s3, 9, NULL),
		artifact("two", s2, (1u << 20) + 1, &r2),
	};
	a[2].read_content = NULL;
	a[2].content = "in memory";
	if (record(f, a, 4) != HV_OK)
		fail_msg("record: %s", hv_error_last());
	assert_int_equal(r0.calls, 0);
	assert_int_equal(r2.calls, 2);
	assert_int_equal(rows(f, "contents"), 4);
	assert_int_equal(q(f, "SELECT length(bytes) FROM harvest.contents WHERE sha256 = '", s0,
			   "'"), 0);
	const char *shas[] = {s1, s2, s3};
	for (size_t i = 0; i < 3; i++)
		assert_true(stored_exactly(f, shas[i]));
	free(d1);
	free(d2);
}

/* A role whose TEMP privilege was revoked: the content is still stored, read whole (one at a
 * time), as before. */
static void test_no_temp_privilege(void **state)
{
	pgfx *f = *state;
	char role[64], sql[1024];
	snprintf(role, sizeof(role), "hv_notemp_%ld", (long)getpid());
	const char *db = strstr(f->uri, ":///"); /* postgresql:///NAME?host=...&user=harvest */
	assert_non_null(db);
	db += 4;
	size_t dbl = strcspn(db, "?");
	snprintf(sql, sizeof(sql),
		 "CREATE ROLE %s LOGIN; REVOKE TEMPORARY ON DATABASE %.*s FROM PUBLIC;"
		 " GRANT USAGE ON SCHEMA harvest TO %s;"
		 " GRANT ALL ON ALL TABLES IN SCHEMA harvest TO %s;"
		 " GRANT ALL ON ALL SEQUENCES IN SCHEMA harvest TO %s;",
		 role, (int)dbl, db, role, role, role);
	tu_pg_exec(f->uri, sql);
	char *uri = tu_xmalloc(strlen(f->uri) + sizeof(role));
	const char *user = strstr(f->uri, "user=harvest");
	assert_non_null(user);
	sprintf(uri, "%.*suser=%s%s", (int)(user - f->uri), f->uri, role, user + 12);
	hv_store_close(f->st);
	f->st = NULL;
	open_as(f, uri);
	unsigned char *data = noise(BIG, 5);
	char sha[65];
	sha_hex(data, BIG, sha);
	reader r = {.data = data};
	hv_artifact_in a = artifact("whole.bin", sha, BIG, &r);
	hv_status rc = record(f, &a, 1);
	hv_store_close(f->st);
	f->st = NULL;
	snprintf(sql, sizeof(sql), "DROP OWNED BY %s; DROP ROLE %s", role, role);
	if (rc != HV_OK)
		fail_msg("record as %s: %s", role, hv_error_last());
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.max_n, BIG);
	assert_true(stored_exactly(f, sha));
	tu_pg_exec(f->uri, sql);
	free(uri);
	free(data);
}

/* A spooled collection recorded in PostgreSQL: every content stored, as read from the spool. */
static void test_spooled_collection(void **state)
{
	pgfx *f = *state;
	char *tree = tu_path(f->root, "tree");
	tu_mkdir(f->root, "tree");
	unsigned char *big = noise((3u << 20) + 7, 6);
	tu_write(tree, "big.bin", big, (3u << 20) + 7);
	tu_write(tree, "small.txt", "small\n", 6);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.spool_content = true;
	hv_collection *c = NULL;
	if (hv_collect(f->st, tree, &o, &c) != HV_OK)
		fail_msg("collect: %s", hv_error_last());
	assert_int_equal(c->n_files, 2);
	assert_true(c->files[0].spooled);
	hv_run_start rs = {.dir = tree};
	int64_t run_id = 0;
	if (hv_collection_record(f->st, c, &rs, NULL, &run_id) != HV_OK)
		fail_msg("record: %s", hv_error_last());
	assert_true(run_id > 0);
	char sha[65];
	sha_hex(big, (3u << 20) + 7, sha);
	assert_true(stored_exactly(f, sha));
	assert_int_equal(q(f, "SELECT count(*) FROM harvest.contents WHERE", "",
			   " encode(sha256(bytes), 'hex') = sha256"), 2);
	hv_collection_free(c);
	free(big);
	free(tree);
}

/* How many artifacts hv_store_artifacts() lists for the MIME pattern mime. */
static size_t count_mime(pgfx *f, const char *mime)
{
	hv_artifact_iter *it = NULL;
	hv_artifact_filter flt = {.mime = mime};
	if (hv_store_artifacts(f->st, &flt, &it) != HV_OK)
		fail_msg("artifacts --mime '%s': %s", mime, hv_error_last());
	size_t n = 0;
	const hv_artifact_row *row;
	hv_status rc;
	while ((rc = hv_artifact_iter_next(it, &row)) == HV_OK)
		n++;
	assert_int_equal(rc, HV_DONE);
	hv_artifact_iter_free(it);
	return n;
}

/* A --mime pattern is resolved to the stored types it matches, ignoring case, and those are
 * sent as one text[] parameter: types holding the characters an array literal gives meaning
 * to (quotes, backslashes, commas, braces, spaces, the word NULL) are each found exactly, and
 * a pattern matching none finds nothing. */
static void test_mime_types_quoted(void **state)
{
	pgfx *f = *state;
	static const char *const types[] = {
		"odd/\"quoted\"", "odd/back\\slash", "odd/comma,brace{}", "Odd/Upper",
		"odd/ spaced ", "odd/NULL", "plain/text",
	};
	enum { N = sizeof(types) / sizeof(types[0]) };
	char sha[65];
	sha_hex("x", 1, sha);
	hv_artifact_in a[N];
	char names[N][16];
	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "f%zu", i);
		a[i] = artifact(names[i], sha, 1, NULL);
		a[i].read_content = NULL;
		a[i].content = "x";
		a[i].mime_type = types[i];
	}
	if (record(f, a, N) != HV_OK)
		fail_msg("record: %s", hv_error_last());
	for (size_t i = 0; i < N; i++) {
		/* The type as a pattern: fnmatch's special characters escaped. */
		char pat[64];
		size_t k = 0;
		for (const char *c = types[i]; *c && k + 2 < sizeof(pat); c++) {
			if (strchr("\\*?[", *c))
				pat[k++] = '\\';
			pat[k++] = *c;
		}
		pat[k] = '\0';
		if (count_mime(f, pat) != 1)
			fail_msg("--mime '%s' did not find its one artifact", pat);
	}
	assert_int_equal(count_mime(f, "odd/back\\slash"), 0); /* \s is an s */
	assert_int_equal(count_mime(f, "odd/*"), N - 1);
	assert_int_equal(count_mime(f, "ODD/\"QUOTED\""), 1);
	assert_int_equal(count_mime(f, "odd/upper"), 1);
	assert_int_equal(count_mime(f, "odd/null"), 1);
	assert_int_equal(count_mime(f, "*"), N);
	assert_int_equal(count_mime(f, "odd/\"*"), 1);
	assert_int_equal(count_mime(f, "none/*"), 0);
}

/* Which contents are already stored is asked in batches (of 1,000 digests), not per content:
 * in a run of 2,100 artifacts, 700 whose contents an earlier run stored are not read at all,
 * each new one is read once, whole when small, and a digest repeated in the run is read and
 * stored once. Every artifact says its content is stored. */
static void test_known_in_batches(void **state)
{
	pgfx *f = *state;
	enum { OLD = 700, NEW = 1200, REPEAT = 200, ALL = OLD + NEW + REPEAT };
	char (*sha)[65] = tu_xmalloc(ALL * sizeof(*sha));
	char (*name)[16] = tu_xmalloc(ALL * sizeof(*name));
	unsigned char (*data)[40] = tu_xmalloc(ALL * sizeof(*data));
	reader *r = calloc(ALL, sizeof(*r));
	hv_artifact_in *a = tu_xmalloc(ALL * sizeof(*a));
	assert_non_null(r);
	/* 0..OLD: stored by a first run; OLD..OLD+NEW: new; then REPEAT that repeat new ones. */
	for (size_t i = 0; i < ALL; i++) {
		size_t c = i < OLD + NEW ? i : OLD + (i - OLD - NEW) * 5;
		snprintf((char *)data[i], sizeof(data[i]), "content %zu of the run", c);
		sha_hex(data[i], strlen((char *)data[i]), sha[i]);
		snprintf(name[i], sizeof(name[i]), "f%zu", i);
		r[i].data = data[i];
		a[i] = artifact(name[i], sha[i], strlen((char *)data[i]), &r[i]);
	}
	if (record(f, a, OLD) != HV_OK)
		fail_msg("first record: %s", hv_error_last());
	assert_int_equal(rows(f, "contents"), OLD);
	memset(r, 0, ALL * sizeof(*r));
	for (size_t i = 0; i < ALL; i++)
		r[i].data = data[i];
	if (record(f, a, ALL) != HV_OK)
		fail_msg("second record: %s", hv_error_last());
	for (size_t i = 0; i < ALL; i++) {
		size_t want = i >= OLD && i < OLD + NEW ? 1 : 0;
		if (r[i].calls != want)
			fail_msg("artifact %zu: read %zu times, not %zu", i, r[i].calls, want);
		if (want && r[i].max_n != a[i].content_len)
			fail_msg("artifact %zu: read in pieces of %zu bytes", i, r[i].max_n);
	}
	assert_int_equal(rows(f, "contents"), OLD + NEW);
	assert_int_equal(rows(f, "artifacts WHERE content_stored"), OLD + ALL);
	for (size_t i = 0; i < ALL; i += 97)
		assert_true(stored_exactly(f, sha[i]));
	free(sha);
	free(name);
	free(data);
	free(r);
	free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pieces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_and_failed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_and_several, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_temp_privilege, setup, teardown),
		cmocka_unit_test_setup_teardown(test_spooled_collection, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mime_types_quoted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_known_in_batches, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, tu_pg_stop);
}
