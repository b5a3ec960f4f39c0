/* End-to-end tests of `harvest history` (SPEC section 2 `history ...` and TIME, section 5
 * Storage, section 6 bad input): `show` equal to what `run` printed (snake and camel case,
 * with and without --content, a timed-out truncated run); `runs` and `artifacts` with every
 * filter; `get` byte-exact (by id, by SHA-256, -o FILE); `prune` (--keep-runs, --before, shared
 * contents kept); TIMEs far from now; a database path that does not exist; corrupt databases
 * (random bytes, a text file, a harvest database with one page overwritten); many `run`
 * processes at once into one database; `collect` killed with SIGKILL at random moments (fixed
 * seed). Every case works in a fresh temp directory (removed by tu_cleanup, even when it
 * fails) and always passes --db with a database inside it. */
#include "testutil.h"
#include "tjson.h"
#include "tu_pg.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A 1x1 PNG image (signature, IHDR, IDAT, IEND, all CRCs valid). */
static const unsigned char png_bytes[] = {
	0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48,
	0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
	0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78,
	0x9c, 0x63, 0x60, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4,
	0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};

/* ---- helpers ---------------------------------------------------------------------------- */

/* A deterministic PRNG (xorshift64*), so the random bytes and kill times repeat. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static void rng_seed(uint64_t s)
{
	rng_state = s ? s : 1;
}

static uint64_t rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1du;
}

static int64_t wall_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* A fresh temp dir (removed by tu_cleanup) and the database path inside it. */
typedef struct fixture {
	char *root; /* owned by the cleanup list */
	char *db;
} fixture;

/* HARVEST_TEST_BACKEND=pg runs the cases that are about the history, not about the SQLite
 * file, against a real PostgreSQL server: --db is then a fresh database's URI, and the local
 * cache goes to the XDG location inside the case's directory. */
static bool pg_backend(void)
{
	const char *b = getenv("HARVEST_TEST_BACKEND");
	return b && !strcmp(b, "pg");
}

static void fx_open(fixture *f)
{
	f->root = tu_tmpdir();
	if (pg_backend()) {
		f->db = tu_pg_newdb();
		assert_int_equal(setenv("XDG_DATA_HOME", f->root, 1), 0);
	} else {
		f->db = tu_path(f->root, "h.db");
	}
}

/* Runs sql on the case's history database: sqlite_sql on the SQLite file, pg_sql on the
 * PostgreSQL database (the same change in each one's terms). */
static void db_exec(const fixture *f, const char *sqlite_sql, const char *pg_sql)
{
	if (pg_backend()) {
		tu_pg_exec(f->db, pg_sql);
		return;
	}
	sqlite3 *db;
	assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
	char *err = NULL;
	if (sqlite3_exec(db, sqlite_sql, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("%s: %s", sqlite_sql, err ? err : "?");
	sqlite3_close(db);
}

static void fx_close(fixture *f)
{
	free(f->db);
	f->db = NULL;
}

/* Runs harvest with a NULL-terminated argument list. */
static void hv(tu_result *r, const char *stdin_data, const char *first, ...)
{
	const char *args[64];
	size_t n = 0;
	va_list ap;
	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *)) {
		assert_true(n < 63);
		args[n++] = a;
	}
	va_end(ap);
	args[n] = NULL;
	tu_harvestv(r, NULL, stdin_data, args);
}

/* Runs harvest with args0 (NULL-terminated) followed by args1 (NULL-terminated, may be NULL). */
static void hv2(tu_result *r, const char *const *args0, const char *const *args1)
{
	const char *args[96];
	size_t n = 0;
	for (size_t i = 0; args0[i]; i++)
		args[n++] = args0[i];
	for (size_t i = 0; args1 && args1[i]; i++)
		args[n++] = args1[i];
	assert_true(n < 96);
	args[n] = NULL;
	tu_harvestv(r, NULL, NULL, args);
}

static void expect_status(const tu_result *r, int want, const char *what)
{
	if (r->status != want)
		fail_msg("%s: exit %d, expected %d\nstdout: %.2000s\nstderr: %.2000s", what,
			 r->status, want, r->out, r->err);
}

/* The whole of stdout as one JSON document. */
static tj_value *json_doc(const tu_result *r, const char *what)
{
	tj_value *v = tj_parse(r->out, r->out_len);
	if (!v)
		fail_msg("%s: stdout is not one valid JSON document:\n%.2000s\nstderr: %s", what,
			 r->out, r->err);
	return v;
}

/* The last line of stdout (jsonl) as a document. */
static tj_value *last_line(const tu_result *r, const char *what)
{
	size_t end = r->out_len;
	if (end && r->out[end - 1] == '\n')
		end--;
	size_t start = end;
	while (start > 0 && r->out[start - 1] != '\n')
		start--;
	tj_value *v = tj_parse(r->out + start, end - start);
	if (!v)
		fail_msg("%s: the last line is not a JSON document:\n%.2000s\nstderr: %s", what,
			 r->out, r->err);
	return v;
}

/* stderr holds exactly one line, "harvest...: ...\n", mentioning has (may be NULL). */
static void expect_one_line_error(const tu_result *r, const char *has, const char *what)
{
	if (r->err_len == 0 || r->err[r->err_len - 1] != '\n' ||
	    memchr(r->err, '\n', r->err_len) != r->err + r->err_len - 1)
		fail_msg("%s: stderr is not one line: '%s'", what, r->err);
	if (strncmp(r->err, "harvest", 7) != 0)
		fail_msg("%s: the error does not start with 'harvest': '%s'", what, r->err);
	if (has && !strstr(r->err, has))
		fail_msg("%s: the error does not mention '%s': '%s'", what, has, r->err);
}

/* Deep equality of two JSON values (objects: the same keys, in any order). */
static void deep_eq(const tj_value *a, const tj_value *b, const char *path)
{
	if (!a || !b)
		fail_msg("%s: missing on the %s side", path, a ? "second" : "first");
	if (tj_type(a) != tj_type(b) || tj_is_null(a) != tj_is_null(b))
		fail_msg("%s: types differ (%d vs %d)", path, tj_type(a), tj_type(b));
	char sub[512];
	switch (tj_type(a)) {
	case TJ_NULL: return;
	case TJ_BOOL:
		if (tj_bool(a) != tj_bool(b))
			fail_msg("%s: %d vs %d", path, tj_bool(a), tj_bool(b));
		return;
	case TJ_INT:
	case TJ_DOUBLE:
		if (tj_double(a) != tj_double(b) || tj_int(a) != tj_int(b))
			fail_msg("%s: %g vs %g", path, tj_double(a), tj_double(b));
		return;
	case TJ_STRING: {
		size_t la, lb;
		const char *sa = tj_str(a, &la), *sb = tj_str(b, &lb);
		if (la != lb || memcmp(sa, sb, la) != 0)
			fail_msg("%s: '%.300s' (%zu bytes) vs '%.300s' (%zu bytes)", path, sa, la, sb,
				 lb);
		return;
	}
	case TJ_ARRAY:
		if (tj_len(a) != tj_len(b))
			fail_msg("%s: %zu vs %zu elements", path, tj_len(a), tj_len(b));
		for (size_t i = 0; i < tj_len(a); i++) {
			snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
			deep_eq(tj_at(a, i), tj_at(b, i), sub);
		}
		return;
	case TJ_OBJECT:
		if (tj_len(a) != tj_len(b))
			fail_msg("%s: %zu vs %zu members", path, tj_len(a), tj_len(b));
		for (size_t i = 0; i < tj_len(a); i++) {
			const char *k = tj_key(a, i, NULL);
			snprintf(sub, sizeof(sub), "%s.%s", path, k);
			deep_eq(tj_at(a, i), tj_get(b, k), sub);
		}
		return;
	}
}

static void expect_json_eq(const tj_value *got, const char *want_json, const char *path)
{
	tj_value *w = tj_parse(want_json, strlen(want_json));
	assert_non_null(w);
	deep_eq(got, w, path);
	tj_free(w);
}

static void expect_str(const tj_value *v, const char *want, const char *what)
{
	const char *s = tj_str(v, NULL);
	if (!s || strcmp(s, want) != 0)
		fail_msg("%s: '%s', expected '%s'", what, s ? s : "(not a string)", want);
}

/* RFC 3339 date-time -> ns since the epoch; fails the test when s is not one. */
static int64_t rfc3339_ns(const char *s, const char *what)
{
	if (!s)
		fail_msg("%s: not a string", what);
	int Y, M, D, h, m, sec, n = -1;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &Y, &M, &D, &h, &m, &sec, &n) != 6 || n != 19 ||
	    s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':')
		fail_msg("%s: '%s' is not RFC 3339", what, s);
	const char *p = s + 19;
	int64_t frac = 0;
	if (*p == '.') {
		int digits = 0;
		for (p++; isdigit((unsigned char)*p); p++, digits++)
			if (digits < 9)
				frac = frac * 10 + (*p - '0');
		if (digits == 0)
			fail_msg("%s: '%s' is not RFC 3339", what, s);
		for (; digits < 9; digits++)
			frac *= 10;
	}
	long off = 0;
	if (*p == 'Z') {
		p++;
	} else if ((*p == '+' || *p == '-') && isdigit((unsigned char)p[1]) &&
		   isdigit((unsigned char)p[2]) && p[3] == ':' && isdigit((unsigned char)p[4]) &&
		   isdigit((unsigned char)p[5])) {
		off = ((p[1] - '0') * 10 + (p[2] - '0')) * 3600 + ((p[4] - '0') * 10 + (p[5] - '0')) * 60;
		if (*p == '-')
			off = -off;
		p += 6;
	} else {
		fail_msg("%s: '%s' has no time zone", what, s);
	}
	if (*p)
		fail_msg("%s: '%s' is not RFC 3339", what, s);
	struct tm tm = {.tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h,
			.tm_min = m, .tm_sec = sec};
	time_t t = timegm(&tm);
	return ((int64_t)t - off) * 1000000000 + frac;
}

/* `harvest run --db DB --dir ROOT/DIR EXTRA... -- CMD...` (cmd NULL for --language). */
static void hv_run(tu_result *r, const fixture *f, const char *dir, const char *stdin_data,
		   const char *const *extra, const char *const *cmd)
{
	const char *args[96];
	size_t n = 0;
	char *d = tu_path(f->root, dir);
	args[n++] = "run";
	args[n++] = "--db";
	args[n++] = f->db;
	args[n++] = "--dir";
	args[n++] = d;
	for (size_t i = 0; extra && extra[i]; i++)
		args[n++] = extra[i];
	if (cmd) {
		args[n++] = "--";
		for (size_t i = 0; cmd[i]; i++)
			args[n++] = cmd[i];
	}
	assert_true(n < 96);
	args[n] = NULL;
	tu_harvestv(r, NULL, stdin_data, args);
	free(d);
}

/* A shell run in ROOT/DIR (created here) that must exit with want; returns its final
 * ExecutionResult line (the caller frees it). */
static tj_value *shell_run(const fixture *f, const char *dir, const char *script, int want)
{
	tu_mkdir(f->root, dir);
	tu_result r;
	const char *extra[] = {"--shell", NULL};
	const char *cmd[] = {script, NULL};
	hv_run(&r, f, dir, NULL, extra, cmd);
	expect_status(&r, want, script);
	tj_value *res = last_line(&r, script);
	tu_result_free(&r);
	assert_int_equal(tj_type(tj_get(res, "run_id")), TJ_INT);
	return res;
}

static int64_t run_id_of(const tj_value *res)
{
	const tj_value *v = tj_get(res, "run_id");
	if (!v)
		v = tj_get(res, "runId");
	assert_int_equal(tj_type(v), TJ_INT);
	return tj_int(v);
}

/* `harvest history SUB --db DB ARGS...` that must exit 0 and print one JSON document. */
static tj_value *history_json(const fixture *f, const char *sub, const char *const *args)
{
	const char *base[] = {"history", sub, "--db", f->db, NULL};
	tu_result r;
	hv2(&r, base, args);
	char what[256];
	snprintf(what, sizeof(what), "history %s%s%s", sub, args && args[0] ? " " : "",
		 args && args[0] ? args[0] : "");
	expect_status(&r, 0, what);
	if (r.err_len)
		fail_msg("%s: unexpected stderr '%s'", what, r.err);
	tj_value *v = json_doc(&r, what);
	tu_result_free(&r);
	return v;
}

/* `history SUB --db DB ARGS...` must be a usage error: exit 2, a message, nothing on stdout. */
static void expect_usage(const fixture *f, const char *sub, const char *const *args)
{
	const char *base[] = {"history", sub, "--db", f->db, NULL};
	tu_result r;
	hv2(&r, base, args);
	char what[256];
	snprintf(what, sizeof(what), "history %s %s %s", sub, args[0], args[1] ? args[1] : "");
	expect_status(&r, 2, what);
	assert_int_equal(r.out_len, 0);
	expect_one_line_error(&r, NULL, what);
	tu_result_free(&r);
}

static bool path_exists(const char *p)
{
	struct stat sb;
	return lstat(p, &sb) == 0;
}

static char *with_suffix(const char *p, const char *suffix)
{
	size_t a = strlen(p), b = strlen(suffix);
	char *s = malloc(a + b + 1);
	assert_non_null(s);
	memcpy(s, p, a);
	memcpy(s + a, suffix, b + 1);
	return s;
}

/* `sqlite3 DB 'PRAGMA integrity_check'` prints exactly "ok". */
static void expect_integrity_ok(const char *db, const char *what)
{
	if (pg_backend())
		return; /* PostgreSQL's own consistency: the counts the caller checks */
	tu_result r;
	char *argv[] = {"sqlite3", (char *)db, "PRAGMA integrity_check", NULL};
	tu_run(&r, NULL, NULL, argv);
	if (r.status != 0 || strcmp(r.out, "ok\n") != 0)
		fail_msg("%s: integrity_check exit %d: '%s' %s", what, r.status, r.out, r.err);
	tu_result_free(&r);
}

/* db holds exactly the len0 bytes of before, with no -wal/-shm/-journal beside it. */
static void expect_db_unchanged(const char *db, const char *before, size_t len0,
				const char *what)
{
	size_t len;
	char *after = tu_read_file(db, &len);
	assert_non_null(after);
	if (len != len0 || memcmp(before, after, len) != 0)
		fail_msg("%s: the database file changed", what);
	free(after);
	static const char *const sfx[] = {"-wal", "-shm", "-journal"};
	for (size_t j = 0; j < 3; j++) {
		char *p = with_suffix(db, sfx[j]);
		if (path_exists(p))
			fail_msg("%s: created %s", what, p);
		free(p);
	}
}

/* ---- show reproduces run ---------------------------------------------------------------- */

/* run's final result against show's: the same keys and values; output files' content null in
 * show unless with_content. */
static void compare_results(const tj_value *run, const tj_value *show, bool camel,
			    bool with_content)
{
	const char *of_key = camel ? "outputFiles" : "output_files";
	assert_int_equal(tj_type(show), TJ_OBJECT);
	if (tj_len(run) != tj_len(show))
		fail_msg("run's result has %zu members, show's %zu", tj_len(run), tj_len(show));
	for (size_t i = 0; i < tj_len(run); i++) {
		const char *k = tj_key(run, i, NULL);
		const tj_value *a = tj_at(run, i), *b = tj_get(show, k);
		if (!b)
			fail_msg("show lacks '%s'", k);
		if (strcmp(k, of_key) != 0) {
			deep_eq(a, b, k);
			continue;
		}
		if (tj_len(a) != tj_len(b))
			fail_msg("%s: %zu files in run, %zu in show", k, tj_len(a), tj_len(b));
		for (size_t j = 0; j < tj_len(a); j++) {
			const tj_value *fa = tj_at(a, j), *fb = tj_at(b, j);
			/* Without --content, content is null in both cases (SPEC 1: an OutputFile
			 * has the same keys in camel case; only FileInfo leaves members out). */
			if (tj_len(fa) != tj_len(fb))
				fail_msg("%s[%zu]: %zu vs %zu members", k, j, tj_len(fa), tj_len(fb));
			for (size_t m = 0; m < tj_len(fa); m++) {
				const char *fk = tj_key(fa, m, NULL);
				char path[128];
				snprintf(path, sizeof(path), "%s[%zu].%s", k, j, fk);
				if (!strcmp(fk, "content") && !with_content) {
					assert_int_equal(tj_type(tj_at(fa, m)), TJ_STRING);
					if (!tj_get(fb, "content") || !tj_is_null(tj_get(fb, "content")))
						fail_msg("%s: not null without --content", path);
				} else {
					deep_eq(tj_at(fa, m), tj_get(fb, fk), path);
				}
			}
		}
	}
}

static void show_matches_run(const fixture *f, const tj_value *run, bool camel)
{
	char id[32];
	snprintf(id, sizeof(id), "%lld", (long long)run_id_of(run));
	for (int content = 0; content < 2; content++) {
		const char *args[6] = {id, NULL, NULL, NULL, NULL, NULL};
		size_t n = 1;
		if (camel) {
			args[n++] = "--case";
			args[n++] = "camel";
		}
		if (content)
			args[n++] = "--content";
		tj_value *show = history_json(f, "show", args);
		compare_results(run, show, camel, content);
		tj_free(show);
	}
}

static void test_show_equals_run(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "src");
	unsigned char bin[600];
	for (size_t i = 0; i < sizeof(bin); i++)
		bin[i] = (unsigned char)(i * 37 + (i >> 8));
	bin[0] = 0x00;
	bin[1] = 0xff;
	char *src = tu_path(f.root, "src");
	tu_write(src, "b.bin", bin, sizeof(bin));
	/* stdout with a 2-byte UTF-8 character, bytes that are not UTF-8 and a control char. */
	static const char weird[] = "caf\xc3\xa9 \xff\xfe \x01 tab\there\n";
	tu_write(src, "weird.txt", weird, sizeof(weird) - 1);

	static const char script[] =
		"printf 'out\\n'; cat ../src/weird.txt; printf 'err\\n' >&2;"
		" printf 'a,b\\n1,2\\n' > t.csv; mkdir sub; cp ../src/b.bin sub/b.bin;"
		" ln -s t.csv link; exit 3";
	for (int camel = 0; camel < 2; camel++) {
		const char *dir = camel ? "d-camel" : "d-snake";
		tu_mkdir(f.root, dir);
		const char *extra[] = {"--shell", camel ? "--case" : NULL, "camel", NULL};
		const char *cmd[] = {script, NULL};
		tu_result r;
		hv_run(&r, &f, dir, NULL, extra, cmd);
		expect_status(&r, 3, "run (exit 3)");
		tj_value *run = last_line(&r, "run");
		tu_result_free(&r);
		/* The result is the one expected, so comparing it means something. */
		static const char *const snake_keys[] = {
			"type", "exit_code", "stdout", "stderr", "output_files", "skipped", "run_id",
			"timed_out", "duration_ms", "stdout_truncated", "stderr_truncated"};
		static const char *const camel_keys[] = {
			"type", "exitCode", "stdout", "stderr", "outputFiles", "skipped", "runId",
			"timedOut", "durationMs", "stdoutTruncated", "stderrTruncated"};
		for (size_t i = 0; i < sizeof(snake_keys) / sizeof(snake_keys[0]); i++)
			if (!tj_get(run, camel ? camel_keys[i] : snake_keys[i]))
				fail_msg("run's result lacks %s", camel ? camel_keys[i] : snake_keys[i]);
		assert_int_equal(tj_len(tj_get(run, camel ? "outputFiles" : "output_files")), 2);
		assert_int_equal(tj_len(tj_get(run, "skipped")), 1);
		size_t olen;
		const char *o = tj_str(tj_get(run, "stdout"), &olen);
		assert_non_null(o);
		assert_int_equal(olen, 4 + sizeof(weird) - 1);
		assert_memory_equal(o + 4, weird, sizeof(weird) - 1);
		show_matches_run(&f, run, camel);
		tj_free(run);
	}

	/* Timed out, both streams truncated. */
	tu_mkdir(f.root, "d-trunc");
	/* The timeout leaves the shell time to write even on a loaded machine. */
	const char *extra[] = {"--shell", "--timeout", "3", "--max-output-bytes", "3", NULL};
	const char *cmd[] = {"echo hello; echo world >&2; echo z > z.txt; sleep 10", NULL};
	tu_result r;
	hv_run(&r, &f, "d-trunc", NULL, extra, cmd);
	expect_status(&r, 124, "run --timeout");
	tj_value *run = last_line(&r, "run --timeout");
	tu_result_free(&r);
	assert_true(tj_bool(tj_get(run, "timed_out")));
	assert_true(tj_bool(tj_get(run, "stdout_truncated")));
	assert_true(tj_bool(tj_get(run, "stderr_truncated")));
	expect_str(tj_get(run, "stdout"), "hel", "truncated stdout");
	show_matches_run(&f, run, false);
	tj_free(run);

	/* An unknown run, and a run id that is not a number. */
	hv(&r, NULL, "history", "show", "999", "--db", f.db, NULL);
	expect_status(&r, 1, "history show 999");
	if (r.out_len)
		fail_msg("history show 999: failed, yet wrote %zu bytes to stdout: '%s'", r.out_len,
			 r.out);
	expect_one_line_error(&r, "999", "history show 999");
	tu_result_free(&r);
	hv(&r, NULL, "history", "show", "abc", "--db", f.db, NULL);
	expect_status(&r, 2, "history show abc");
	tu_result_free(&r);
	free(src);
	fx_close(&f);
}

/* A collect is a run of its own in the history, without a command: show gives its
 * ExecutionResult with exit_code and duration_ms null, empty streams, and the same output
 * files and skipped list the collect printed. */
static void test_show_collect(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "c");
	char *c = tu_path(f.root, "c");
	tu_write(c, "a.csv", "x,y\n1,2\n", 8);
	tu_write(c, "p.png", png_bytes, sizeof(png_bytes));
	tu_result r;
	hv(&r, NULL, "collect", "--db", f.db, c, NULL);
	expect_status(&r, 0, "collect");
	tj_value *col = json_doc(&r, "collect");
	tu_result_free(&r);
	int64_t id = tj_int(tj_get(col, "run_id"));
	assert_true(id > 0);
	assert_int_equal(tj_len(tj_get(col, "output_files")), 2);
	char ids[32];
	snprintf(ids, sizeof(ids), "%lld", (long long)id);
	const char *args[] = {ids, "--content", NULL};
	tj_value *show = history_json(&f, "show", args);
	expect_str(tj_get(show, "type"), "execution_result", "type");
	assert_true(tj_is_null(tj_get(show, "exit_code")));
	assert_true(tj_is_null(tj_get(show, "duration_ms")));
	expect_str(tj_get(show, "stdout"), "", "stdout");
	expect_str(tj_get(show, "stderr"), "", "stderr");
	assert_int_equal(tj_int(tj_get(show, "run_id")), id);
	assert_int_equal(tj_type(tj_get(show, "timed_out")), TJ_BOOL);
	assert_false(tj_bool(tj_get(show, "timed_out")));
	deep_eq(tj_get(col, "output_files"), tj_get(show, "output_files"), "output_files");
	deep_eq(tj_get(col, "skipped"), tj_get(show, "skipped"), "skipped");
	tj_free(show);
	tj_free(col);
	free(c);
	fx_close(&f);
}

/* ---- runs ------------------------------------------------------------------------------- */

/* The run ids of a `history runs` listing, in order. */
static size_t listed_ids(const tj_value *list, int64_t *ids, size_t max)
{
	assert_int_equal(tj_type(list), TJ_ARRAY);
	size_t n = tj_len(list);
	assert_true(n <= max);
	for (size_t i = 0; i < n; i++) {
		const tj_value *id = tj_get(tj_at(list, i), "run_id");
		assert_int_equal(tj_type(id), TJ_INT);
		ids[i] = tj_int(id);
	}
	return n;
}

static void expect_runs(const fixture *f, const char *const *args, const int64_t *want, size_t n,
			const char *what)
{
	tj_value *v = history_json(f, "runs", args);
	int64_t got[16];
	size_t m = listed_ids(v, got, 16);
	bool same = m == n;
	for (size_t i = 0; same && i < n; i++)
		same = got[i] == want[i];
	if (!same) {
		char g[256] = "", w[256] = "";
		for (size_t i = 0; i < m; i++)
			snprintf(g + strlen(g), sizeof(g) - strlen(g), " %lld", (long long)got[i]);
		for (size_t i = 0; i < n; i++)
			snprintf(w + strlen(w), sizeof(w) - strlen(w), " %lld", (long long)want[i]);
		fail_msg("history runs %s: runs [%s ], expected [%s ]", what, g, w);
	}
	tj_free(v);
}

static void test_runs(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	int64_t t0 = wall_ns();
	tu_result r;
	/* 1: --shell with a label. */
	tu_mkdir(f.root, "d1");
	const char *x1[] = {"--shell", "--label", "alpha", NULL};
	const char *c1[] = {"echo 1 > one.txt", NULL};
	hv_run(&r, &f, "d1", NULL, x1, c1);
	expect_status(&r, 0, "run 1");
	tj_value *res = last_line(&r, "run 1");
	int64_t id1 = run_id_of(res);
	tj_free(res);
	tu_result_free(&r);
	/* 2: --language python3, code on stdin, two files. */
	tu_mkdir(f.root, "d2");
	const char *x2[] = {"--language", "python3", NULL};
	hv_run(&r, &f, "d2", "open('p.txt','w').write('py')\nopen('q.txt','w').write('qq')\n", x2,
	       NULL);
	expect_status(&r, 0, "run --language python3");
	res = last_line(&r, "run 2");
	int64_t id2 = run_id_of(res);
	tj_free(res);
	tu_result_free(&r);
	/* 3: a collect of three files, labelled. */
	tu_mkdir(f.root, "d3");
	char *d3 = tu_path(f.root, "d3");
	tu_write(d3, "a.txt", "a\n", 2);
	tu_write(d3, "b.txt", "bb\n", 3);
	tu_write(d3, "c.txt", "ccc\n", 4);
	hv(&r, NULL, "collect", "--db", f.db, "--label", "beta", d3, NULL);
	expect_status(&r, 0, "collect");
	res = json_doc(&r, "collect");
	int64_t id3 = run_id_of(res);
	tj_free(res);
	tu_result_free(&r);
	/* 4: a plain argv that fails, labelled like 1. */
	tu_mkdir(f.root, "d4");
	const char *x4[] = {"--label", "alpha", NULL};
	const char *c4[] = {"sh", "-c", "exit 5", NULL};
	hv_run(&r, &f, "d4", NULL, x4, c4);
	expect_status(&r, 5, "run 4");
	res = last_line(&r, "run 4");
	int64_t id4 = run_id_of(res);
	tj_free(res);
	tu_result_free(&r);
	int64_t t1 = wall_ns();

	/* Every field of every run, newest first. */
	const struct {
		int64_t id;
		const char *label_json, *command_json, *dir, *exit_json;
		int64_t artifacts;
	} want[] = {
		{id4, "\"alpha\"", "[\"sh\",\"-c\",\"exit 5\"]", "d4", "5", 0},
		{id3, "\"beta\"", "null", "d3", "null", 3},
		{id2, "null", "[\"python3\"]", "d2", "0", 2},
		{id1, "\"alpha\"", "[\"/bin/sh\",\"-c\",\"echo 1 > one.txt\"]", "d1", "0", 1},
	};
	tj_value *list = history_json(&f, "runs", NULL);
	assert_int_equal(tj_len(list), 4);
	char started4[64] = "", started2[64] = "";
	int64_t prev_started = INT64_MAX;
	for (size_t i = 0; i < 4; i++) {
		const tj_value *o = tj_at(list, i);
		assert_int_equal(tj_len(o), 11);
		assert_int_equal(tj_int(tj_get(o, "run_id")), want[i].id);
		/* Recorded on this machine, under its hostname. */
		char host[256] = "";
		assert_int_equal(gethostname(host, sizeof(host)), 0);
		expect_str(tj_get(o, "host"), host, "host");
		assert_true(tj_is_null(tj_get(o, "end_reason")));
		expect_json_eq(tj_get(o, "label"), want[i].label_json, "label");
		expect_json_eq(tj_get(o, "command"), want[i].command_json, "command");
		char *d = tu_path(f.root, want[i].dir);
		char real[PATH_MAX];
		assert_non_null(realpath(d, real));
		expect_str(tj_get(o, "dir"), real, "dir");
		free(d);
		const char *s = tj_str(tj_get(o, "started_at"), NULL);
		int64_t started = rfc3339_ns(s, "started_at");
		int64_t ended = rfc3339_ns(tj_str(tj_get(o, "ended_at"), NULL), "ended_at");
		if (started < t0 - 1000000000 || ended > t1 + 1000000000 || ended < started)
			fail_msg("run %lld: started_at %s, ended_at %s: not within the test",
				 (long long)want[i].id, s, tj_str(tj_get(o, "ended_at"), NULL));
		assert_true(started <= prev_started);
		prev_started = started;
		if (i == 0)
			snprintf(started4, sizeof(started4), "%s", s);
		if (i == 2)
			snprintf(started2, sizeof(started2), "%s", s);
		expect_json_eq(tj_get(o, "exit_code"), want[i].exit_json, "exit_code");
		expect_json_eq(tj_get(o, "timed_out"), "false", "timed_out");
		assert_int_equal(tj_type(tj_get(o, "artifacts")), TJ_INT);
		assert_int_equal(tj_int(tj_get(o, "artifacts")), want[i].artifacts);
	}
	assert_true(id4 > id3 && id3 > id2 && id2 > id1);

	/* jsonl: the same records, one a line. */
	const char *base[] = {"history", "runs", "--db", f.db, "--format", "jsonl", NULL};
	hv2(&r, base, NULL);
	expect_status(&r, 0, "history runs --format jsonl");
	size_t nl;
	tj_value *lines = tj_parse_lines(r.out, r.out_len, &nl);
	assert_non_null(lines);
	deep_eq(lines, list, "jsonl");
	tj_free(lines);
	tu_result_free(&r);
	tj_free(list);

	int64_t all[] = {id4, id3, id2, id1};
	expect_runs(&f, (const char *const[]){"--limit", "2", NULL}, all, 2, "--limit 2");
	expect_runs(&f, (const char *const[]){"--limit", "100", NULL}, all, 4, "--limit 100");
	expect_runs(&f, (const char *const[]){"--label", "alpha", NULL}, (int64_t[]){id4, id1}, 2,
		    "--label alpha");
	expect_runs(&f, (const char *const[]){"--label", "alpha", "--limit", "1", NULL},
		    (int64_t[]){id4}, 1, "--label alpha --limit 1");
	expect_runs(&f, (const char *const[]){"--label", "beta", NULL}, (int64_t[]){id3}, 1,
		    "--label beta");
	expect_runs(&f, (const char *const[]){"--label", "alph", NULL}, NULL, 0, "--label alph");
	expect_runs(&f, (const char *const[]){"--since", "1h", NULL}, all, 4, "--since 1h");
	expect_runs(&f, (const char *const[]){"--since", "90m", NULL}, all, 4, "--since 90m");
	expect_runs(&f, (const char *const[]){"--since", "7d", NULL}, all, 4, "--since 7d");
	expect_runs(&f, (const char *const[]){"--since", "2000-01-01T00:00:00Z", NULL}, all, 4,
		    "--since 2000");
	/* (Times past 2262 are in test_far_times.) */
	expect_runs(&f, (const char *const[]){"--since", "2200-01-01T00:00:00Z", NULL}, NULL, 0,
		    "--since 2200");
	/* The exact start of a run is included; earlier runs are not. */
	expect_runs(&f, (const char *const[]){"--since", started2, NULL}, all, 3, "--since run 2");
	expect_runs(&f, (const char *const[]){"--since", started4, NULL}, all, 1, "--since run 4");
	expect_runs(&f, (const char *const[]){"--since", started2, "--label", "alpha", NULL},
		    (int64_t[]){id4}, 1, "--since run 2 --label alpha");

	expect_usage(&f, "runs", (const char *const[]){"--since", "yesterday", NULL});
	expect_usage(&f, "runs", (const char *const[]){"--since", "12x", NULL});
	expect_usage(&f, "runs", (const char *const[]){"--since", "2026-13-45T00:00:00Z", NULL});
	expect_usage(&f, "runs", (const char *const[]){"--since", "", NULL});
	expect_usage(&f, "runs", (const char *const[]){"--limit", "many", NULL});
	expect_usage(&f, "runs", (const char *const[]){"--limit", "-1", NULL});
	free(d3);
	fx_close(&f);
}

/* ---- artifacts -------------------------------------------------------------------------- */

typedef struct art {
	int64_t run;
	const char *path, *mime;
	const unsigned char *bytes;
	size_t len;
	char sha[65];
} art;

/* The (run, path) pairs listed must be exactly the arts whose bit is set in want. */
static void expect_arts(const fixture *f, const art *arts, size_t n_arts, unsigned want,
			const char *const *args, const char *what)
{
	tj_value *v = history_json(f, "artifacts", args);
	unsigned got = 0;
	for (size_t i = 0; i < tj_len(v); i++) {
		const tj_value *o = tj_at(v, i);
		int64_t run = tj_int(tj_get(o, "run_id"));
		const char *p = tj_str(tj_get(o, "path"), NULL);
		size_t k = 0;
		while (k < n_arts && !(arts[k].run == run && p && !strcmp(arts[k].path, p)))
			k++;
		if (k == n_arts)
			fail_msg("artifacts %s: unexpected run %lld path %s", what, (long long)run, p);
		if (got & (1u << k))
			fail_msg("artifacts %s: %s listed twice", what, p);
		got |= 1u << k;
	}
	if (got != want)
		fail_msg("artifacts %s: got set 0x%x, expected 0x%x", what, got, want);
	tj_free(v);
}

static void test_artifacts(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "src");
	char *src = tu_path(f.root, "src");
	/* Two real PNGs (the second with bytes after IEND: still a PNG, another hash). */
	unsigned char png2[sizeof(png_bytes) + 8];
	memcpy(png2, png_bytes, sizeof(png_bytes));
	memcpy(png2 + sizeof(png_bytes), "trailing", 8);
	tu_write(src, "plot.png", png_bytes, sizeof(png_bytes));
	tu_write(src, "pic.png", png2, sizeof(png2));
	for (int i = 0; i < 2; i++) {
		char *p = tu_path(src, i ? "pic.png" : "plot.png");
		tu_result r;
		char *argv[] = {"file", "--mime-type", "-b", p, NULL};
		tu_run(&r, NULL, NULL, argv);
		expect_status(&r, 0, "file --mime-type");
		assert_string_equal(r.out, "image/png\n");
		tu_result_free(&r);
		free(p);
	}
	static const unsigned char csv[] = "x,y\n1,2\n", deep[] = "k,v\nq,w\n",
				   note[] = "a note\n", other[] = "another note\n";
	tj_value *res = shell_run(&f, "d1",
				  "cp ../src/plot.png plot.png; printf 'x,y\\n1,2\\n' > a.csv;"
				  " echo 'a note' > notes.txt; mkdir sub; printf 'k,v\\nq,w\\n' > sub/deep.csv",
				  0);
	int64_t ra = run_id_of(res);
	tj_free(res);
	res = shell_run(&f, "d2",
			"cp ../src/pic.png pic.png; printf 'x,y\\n1,2\\n' > b.csv;"
			" echo 'another note' > other.txt",
			0);
	int64_t rb = run_id_of(res);
	tj_free(res);
	assert_true(rb > ra);

	art arts[] = {
		{ra, "plot.png", "image/png", png_bytes, sizeof(png_bytes), ""},
		{ra, "a.csv", "text/csv", csv, sizeof(csv) - 1, ""},
		{ra, "notes.txt", "text/plain", note, sizeof(note) - 1, ""},
		{ra, "sub/deep.csv", "text/csv", deep, sizeof(deep) - 1, ""},
		{rb, "pic.png", "image/png", png2, sizeof(png2), ""},
		{rb, "b.csv", "text/csv", csv, sizeof(csv) - 1, ""},
		{rb, "other.txt", "text/plain", other, sizeof(other) - 1, ""},
	};
	enum { PLOT = 1 << 0, ACSV = 1 << 1, NOTES = 1 << 2, DEEP = 1 << 3, PIC = 1 << 4,
	       BCSV = 1 << 5, OTHER = 1 << 6, ALL = 0x7f, RUN_A = 0x0f, RUN_B = 0x70 };
	const size_t n_arts = sizeof(arts) / sizeof(arts[0]);
	for (size_t i = 0; i < n_arts; i++)
		tu_sha256_hex(arts[i].bytes, arts[i].len, arts[i].sha);

	/* Every field of every artifact. */
	tj_value *list = history_json(&f, "artifacts", NULL);
	assert_int_equal(tj_len(list), n_arts);
	int64_t seen_ids[16];
	char recorded_b[64] = "";
	int64_t rec_a = 0, rec_b = 0;
	for (size_t i = 0; i < tj_len(list); i++) {
		const tj_value *o = tj_at(list, i);
		assert_int_equal(tj_len(o), 8);
		int64_t run = tj_int(tj_get(o, "run_id"));
		const char *p = tj_str(tj_get(o, "path"), NULL);
		assert_non_null(p);
		size_t k = 0;
		while (k < n_arts && !(arts[k].run == run && !strcmp(arts[k].path, p)))
			k++;
		if (k == n_arts)
			fail_msg("unexpected artifact %s of run %lld", p, (long long)run);
		assert_int_equal(tj_type(tj_get(o, "artifact_id")), TJ_INT);
		seen_ids[i] = tj_int(tj_get(o, "artifact_id"));
		for (size_t j = 0; j < i; j++)
			assert_true(seen_ids[j] != seen_ids[i]);
		const char *base = strrchr(p, '/');
		expect_str(tj_get(o, "name"), base ? base + 1 : p, "name");
		expect_str(tj_get(o, "mime_type"), arts[k].mime, p);
		assert_int_equal(tj_int(tj_get(o, "size")), (int64_t)arts[k].len);
		expect_str(tj_get(o, "sha256"), arts[k].sha, "sha256");
		const char *rec = tj_str(tj_get(o, "recorded_at"), NULL);
		int64_t ns = rfc3339_ns(rec, "recorded_at");
		if (run == rb) {
			snprintf(recorded_b, sizeof(recorded_b), "%s", rec);
			rec_b = ns;
		} else {
			rec_a = ns;
		}
	}
	assert_true(rec_b > rec_a);

	/* --limit: the first N of the same listing. */
	tj_value *lim = history_json(&f, "artifacts", (const char *const[]){"--limit", "3", NULL});
	assert_int_equal(tj_len(lim), 3);
	for (size_t i = 0; i < 3; i++)
		deep_eq(tj_at(lim, i), tj_at(list, i), "--limit 3");
	tj_free(lim);
	/* jsonl: the same records. */
	const char *jl[] = {"history", "artifacts", "--db", f.db, "--format", "jsonl", NULL};
	tu_result r;
	hv2(&r, jl, NULL);
	expect_status(&r, 0, "artifacts --format jsonl");
	tj_value *lines = tj_parse_lines(r.out, r.out_len, NULL);
	assert_non_null(lines);
	deep_eq(lines, list, "jsonl");
	tj_free(lines);
	tu_result_free(&r);
	tj_free(list);

	char ra_s[32], rb_s[32];
	snprintf(ra_s, sizeof(ra_s), "%lld", (long long)ra);
	snprintf(rb_s, sizeof(rb_s), "%lld", (long long)rb);
#define EXPECT_ARTS(want, ...)                                                                 \
	expect_arts(&f, arts, n_arts, (want), (const char *const[]){__VA_ARGS__, NULL}, #__VA_ARGS__)
	EXPECT_ARTS(RUN_A, "--run", ra_s);
	EXPECT_ARTS(RUN_B, "--run", rb_s);
	EXPECT_ARTS(0, "--run", "999");
	EXPECT_ARTS(PLOT | PIC, "--mime", "image/*");
	EXPECT_ARTS(PLOT | PIC, "--mime", "image/png");
	EXPECT_ARTS(ACSV | NOTES | DEEP | BCSV | OTHER, "--mime", "text/*");
	EXPECT_ARTS(ACSV | DEEP | BCSV, "--mime", "text/csv");
	EXPECT_ARTS(0, "--mime", "image/jp*");
	EXPECT_ARTS(0, "--mime", "application/*");
	EXPECT_ARTS(ALL, "--mime", "*");
	EXPECT_ARTS(ACSV | DEEP | BCSV, "--name", "*.csv");
	EXPECT_ARTS(PLOT, "--name", "plot.png");
	EXPECT_ARTS(PLOT | PIC, "--name", "p*.png");
	EXPECT_ARTS(DEEP, "--name", "deep.csv");
	EXPECT_ARTS(0, "--name", "sub*"); /* the name, not the path, as find -name */
	EXPECT_ARTS(NOTES | OTHER, "--name", "*t*.txt");
	EXPECT_ARTS(NOTES, "--name", "*note*");
	/* A lone backslash at the end matches nothing (fnmatch), on PostgreSQL too. */
	EXPECT_ARTS(0, "--name", "deep.csv\\");
	EXPECT_ARTS(0, "--name", "*\\");
	EXPECT_ARTS(DEEP, "--name", "deep\\.csv");
	EXPECT_ARTS(ACSV | BCSV, "--sha256", arts[1].sha);
	EXPECT_ARTS(PIC, "--sha256", arts[4].sha);
	char prefix[16], upper[65];
	snprintf(prefix, sizeof(prefix), "%.12s", arts[1].sha);
	EXPECT_ARTS(ACSV | BCSV, "--sha256", prefix);
	for (size_t i = 0; i < 65; i++)
		upper[i] = (char)toupper((unsigned char)arts[1].sha[i]);
	EXPECT_ARTS(ACSV | BCSV, "--sha256", upper);
	/* A one-digit prefix: whichever hashes start with it. */
	unsigned first = 0;
	for (size_t i = 0; i < n_arts; i++)
		if (arts[i].sha[0] == arts[0].sha[0])
			first |= 1u << i;
	snprintf(prefix, sizeof(prefix), "%c", arts[0].sha[0]);
	EXPECT_ARTS(first, "--sha256", prefix);
	EXPECT_ARTS(0, "--sha256", "0000000000000000000000000000000000000000000000000000000000000000");
	EXPECT_ARTS(ALL, "--since", "1h");
	EXPECT_ARTS(ALL, "--since", "2000-01-01T00:00:00Z");
	EXPECT_ARTS(0, "--since", "2200-01-01T00:00:00Z");
	EXPECT_ARTS(RUN_B, "--since", recorded_b);
	EXPECT_ARTS(PIC, "--run", rb_s, "--mime", "image/*");
	EXPECT_ARTS(ACSV | DEEP, "--run", ra_s, "--name", "*.csv");
	EXPECT_ARTS(BCSV, "--sha256", arts[1].sha, "--since", recorded_b);
	EXPECT_ARTS(PIC, "--mime", "image/*", "--since", recorded_b, "--limit", "5");
#undef EXPECT_ARTS
	/* --limit with a filter: the first N of the filtered listing. */
	tj_value *m = history_json(&f, "artifacts", (const char *const[]){"--mime", "text/*", NULL});
	tj_value *m2 = history_json(&f, "artifacts",
				    (const char *const[]){"--mime", "text/*", "--limit", "2", NULL});
	assert_int_equal(tj_len(m2), 2);
	deep_eq(tj_at(m2, 0), tj_at(m, 0), "--mime --limit");
	deep_eq(tj_at(m2, 1), tj_at(m, 1), "--mime --limit");
	tj_free(m);
	tj_free(m2);

	expect_usage(&f, "artifacts", (const char *const[]){"--sha256", "xyz", NULL});
	expect_usage(&f, "artifacts", (const char *const[]){"--sha256", "", NULL});
	char long_hex[70];
	snprintf(long_hex, sizeof(long_hex), "%s0", arts[0].sha);
	expect_usage(&f, "artifacts", (const char *const[]){"--sha256", long_hex, NULL});
	expect_usage(&f, "artifacts", (const char *const[]){"--since", "soon", NULL});
	expect_usage(&f, "artifacts", (const char *const[]){"--limit", "x", NULL});
	expect_usage(&f, "artifacts", (const char *const[]){"--run", "x", NULL});
	free(src);
	fx_close(&f);
}

/* ---- get -------------------------------------------------------------------------------- */

static void expect_get(const fixture *f, const char *what, const unsigned char *want, size_t len)
{
	tu_result r;
	hv(&r, NULL, "history", "get", what, "--db", f->db, NULL);
	expect_status(&r, 0, what);
	assert_int_equal(r.err_len, 0);
	if (r.out_len != len || memcmp(r.out, want, len) != 0)
		fail_msg("get %s: %zu bytes, expected %zu (or different bytes)", what, r.out_len, len);
	tu_result_free(&r);
}

/* The names of the artifacts `history artifacts --mime pattern` lists, sorted, each followed
 * by a space ("" for none). */
static char *mime_names(const fixture *f, const char *pattern)
{
	tj_value *v = history_json(f, "artifacts", (const char *const[]){"--mime", pattern, NULL});
	const char *names[8];
	size_t n = tj_len(v);
	assert_true(n <= 8);
	for (size_t i = 0; i < n; i++) {
		names[i] = tj_str(tj_get(tj_at(v, i), "name"), NULL);
		assert_non_null(names[i]);
		for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
			const char *t = names[j];
			names[j] = names[j - 1];
			names[j - 1] = t;
		}
	}
	char *out = calloc(1, 256);
	assert_non_null(out);
	for (size_t i = 0; i < n; i++) {
		strncat(out, names[i], 200 - strlen(out));
		strcat(out, " ");
	}
	tj_free(v);
	return out;
}

/* --mime ignores case, as MIME types do (RFC 2045): libmagic answers some types in capitals
 * (an MPEG transport stream is video/MP2T), and a pattern in any case finds them; a lower-case
 * type is found by a pattern in capitals too. */
static void test_artifacts_mime_case(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	/* 20 packets of 188 bytes, each opened by the sync byte 0x47. */
	unsigned char ts[20 * 188] = {0};
	for (size_t i = 0; i < 20; i++) {
		ts[i * 188] = 0x47;
		ts[i * 188 + 3] = 0x10;
	}
	ts[1] = 0x40;
	tu_mkdir(f.root, "src");
	char *src = tu_path(f.root, "src");
	tu_write(src, "clip.ts", ts, sizeof(ts));
	free(src);
	tj_value *res = shell_run(&f, "d", "cp ../src/clip.ts clip.ts; printf 'x,y\\n1,2\\n' > t.csv;"
				  " echo note > n.txt", 0);
	tj_free(res);
	/* The premise: the stored types, as harvest recorded them. */
	tj_value *all = history_json(&f, "artifacts", NULL);
	assert_int_equal(tj_len(all), 3);
	for (size_t i = 0; i < 3; i++) {
		const tj_value *o = tj_at(all, i);
		const char *name = tj_str(tj_get(o, "name"), NULL);
		assert_non_null(name);
		expect_str(tj_get(o, "mime_type"),
			   !strcmp(name, "clip.ts") ? "video/MP2T"
			   : !strcmp(name, "t.csv") ? "text/csv"
						    : "text/plain",
			   name);
	}
	tj_free(all);
	static const struct {
		const char *pattern, *want;
	} cases[] = {
		{"video/MP2T", "clip.ts "},
		{"video/mp2t", "clip.ts "},
		{"VIDEO/Mp2T", "clip.ts "},
		{"video/*", "clip.ts "},
		{"Video/*", "clip.ts "},
		{"*/mp2t", "clip.ts "},
		{"video/[m]p2?", "clip.ts "},
		{"video/[!M]p2t", ""},
		{"video/mp2", ""},
		{"video/mp2t*", "clip.ts "},
		{"TEXT/CSV", "t.csv "},
		{"Text/*", "n.txt t.csv "},
		{"text/PLAIN", "n.txt "},
		{"*", "clip.ts n.txt t.csv "},
		{"*T*", "clip.ts n.txt t.csv "},
		{"audio/*", ""},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = mime_names(&f, cases[i].pattern);
		if (strcmp(got, cases[i].want) != 0)
			fail_msg("--mime '%s': got '%s', expected '%s'", cases[i].pattern, got,
				 cases[i].want);
		free(got);
	}
	/* With a limit, and with another filter: the same selection. */
	tj_value *v = history_json(&f, "artifacts",
				   (const char *const[]){"--mime", "TEXT/*", "--limit", "1", NULL});
	assert_int_equal(tj_len(v), 1);
	tj_free(v);
	v = history_json(&f, "artifacts",
			 (const char *const[]){"--mime", "TEXT/*", "--name", "*.csv", NULL});
	assert_int_equal(tj_len(v), 1);
	expect_str(tj_get(tj_at(v, 0), "name"), "t.csv", "--mime TEXT/* --name *.csv");
	tj_free(v);
	fx_close(&f);
}

static void test_get(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "src");
	char *src = tu_path(f.root, "src");
	/* 70,000 bytes: every byte value, runs of NULs and 0xff. */
	size_t blen = 70000;
	unsigned char *bin = malloc(blen);
	assert_non_null(bin);
	rng_seed(42);
	for (size_t i = 0; i < blen; i++)
		bin[i] = i < 256 ? (unsigned char)i : (unsigned char)rng_next();
	memset(bin + 1000, 0, 300);
	memset(bin + 2000, 0xff, 300);
	bin[blen - 1] = 0;
	tu_write(src, "blob.bin", bin, blen);
	tj_value *res = shell_run(&f, "d",
				  "cp ../src/blob.bin blob.bin; : > empty.dat; printf 'tiny' > t.txt",
				  0);
	int64_t run = run_id_of(res);
	tj_free(res);

	char sha[65], sha_empty[65], sha_t[65];
	tu_sha256_hex(bin, blen, sha);
	tu_sha256_hex("", 0, sha_empty);
	tu_sha256_hex("tiny", 4, sha_t);
	char rs[32];
	snprintf(rs, sizeof(rs), "%lld", (long long)run);
	tj_value *list = history_json(&f, "artifacts", (const char *const[]){"--run", rs, NULL});
	assert_int_equal(tj_len(list), 3);
	char id_blob[32] = "", id_empty[32] = "", id_t[32] = "";
	for (size_t i = 0; i < 3; i++) {
		const tj_value *o = tj_at(list, i);
		const char *p = tj_str(tj_get(o, "path"), NULL);
		char *dst = !strcmp(p, "blob.bin") ? id_blob : !strcmp(p, "empty.dat") ? id_empty : id_t;
		snprintf(dst, 32, "%lld", (long long)tj_int(tj_get(o, "artifact_id")));
	}
	tj_free(list);
	assert_true(id_blob[0] && id_empty[0] && id_t[0]);

	expect_get(&f, id_blob, bin, blen);
	expect_get(&f, sha, bin, blen);
	char upper[65];
	for (size_t i = 0; i < 65; i++)
		upper[i] = (char)toupper((unsigned char)sha[i]);
	expect_get(&f, upper, bin, blen);
	expect_get(&f, id_empty, (const unsigned char *)"", 0);
	expect_get(&f, sha_empty, (const unsigned char *)"", 0);
	expect_get(&f, id_t, (const unsigned char *)"tiny", 4);
	expect_get(&f, sha_t, (const unsigned char *)"tiny", 4);

	/* -o FILE: the same bytes, nothing on stdout, no temporary file left. */
	char *outp = tu_path(f.root, "out.bin");
	for (int k = 0; k < 2; k++) {
		tu_result r;
		hv(&r, NULL, "history", "get", k ? sha : id_blob, "-o", outp, "--db", f.db, NULL);
		expect_status(&r, 0, "get -o");
		assert_int_equal(r.out_len, 0);
		tu_result_free(&r);
		size_t len;
		char *got = tu_read_file(outp, &len);
		assert_non_null(got);
		assert_int_equal(len, blen);
		assert_memory_equal(got, bin, blen);
		free(got);
	}
	DIR *dd = opendir(f.root);
	assert_non_null(dd);
	for (struct dirent *e; (e = readdir(dd));)
		if (!strncmp(e->d_name, "out.bin", 7) && strcmp(e->d_name, "out.bin") != 0)
			fail_msg("get -o left %s behind", e->d_name);
	closedir(dd);
	/* -o into a directory that does not exist: an error, exit 1. */
	char *bad = tu_path(f.root, "no/such/dir/out.bin");
	tu_result r;
	hv(&r, NULL, "history", "get", id_blob, "-o", bad, "--db", f.db, NULL);
	expect_status(&r, 1, "get -o into a missing directory");
	expect_one_line_error(&r, NULL, "get -o into a missing directory");
	tu_result_free(&r);
	free(bad);

	/* -o the database itself (or a symlink to it, followed): refused, exit 2, the history
	 * still there; the same for a run's archive. With a PostgreSQL history, its local file
	 * (the MIME cache, in the XDG location) is harvest's database too. */
	char *dbfile = pg_backend() ? tu_path(f.root, "harvest/harvest.db") : strdup(f.db);
	char *link_db = tu_path(f.root, "link.db"), *tar_link = tu_path(f.root, "h.tar");
	assert_int_equal(symlink(dbfile, link_db), 0);
	assert_int_equal(symlink(dbfile, tar_link), 0);
	size_t db_len0;
	char *db0 = tu_read_file(dbfile, &db_len0);
	assert_non_null(db0);
	hv(&r, NULL, "history", "get", id_blob, "-o", dbfile, "--db", f.db, NULL);
	expect_status(&r, 2, "get -o the database");
	expect_one_line_error(&r, "is the history database", "get -o the database");
	tu_result_free(&r);
	hv(&r, NULL, "history", "get", id_blob, "-o", link_db, "--follow", "--db", f.db, NULL);
	expect_status(&r, 2, "get -o a link to the database");
	tu_result_free(&r);
	hv(&r, NULL, "history", "get", "--run", "1", "-o", tar_link, "--follow", "--db", f.db,
	   NULL);
	expect_status(&r, 2, "get --run -o a link to the database");
	tu_result_free(&r);
	size_t db_len1;
	char *db1 = tu_read_file(dbfile, &db_len1);
	assert_int_equal(db_len0, db_len1);
	assert_memory_equal(db0, db1, db_len0);
	free(db0);
	free(db1);
	free(dbfile);
	free(link_db);
	free(tar_link);

	/* An artifact recorded without its content has none to give, though another run stored
	 * the same bytes (as `history show` and its run's archive say): exit 1; its SHA-256
	 * still gets them. */
	{
		tu_mkdir(f.root, "nc");
		const char *extra[] = {"--no-content", "--shell", NULL};
		const char *cmd[] = {"printf tiny > t.txt", NULL};
		hv_run(&r, &f, "nc", NULL, extra, cmd);
		expect_status(&r, 0, "run --no-content");
		tj_value *nres = last_line(&r, "run --no-content");
		tu_result_free(&r);
		char nrs[32], nid[32];
		snprintf(nrs, sizeof(nrs), "%lld", (long long)run_id_of(nres));
		tj_free(nres);
		tj_value *arts = history_json(&f, "artifacts", (const char *const[]){"--run", nrs, NULL});
		assert_int_equal(tj_len(arts), 1);
		snprintf(nid, sizeof(nid), "%lld",
			 (long long)tj_int(tj_get(tj_at(arts, 0), "artifact_id")));
		tj_free(arts);
		hv(&r, NULL, "history", "get", nid, "--db", f.db, NULL);
		expect_status(&r, 1, "get of an artifact recorded without content");
		assert_int_equal(r.out_len, 0);
		expect_one_line_error(&r, "its content was not stored", "get without content");
		tu_result_free(&r);
		expect_get(&f, sha_t, (const unsigned char *)"tiny", 4);
	}

	/* A SHA-256 may be shortened, as git's hashes are: a unique start of at least 4 hex
	 * digits with a letter among them (digits alone are an artifact id), in either case, or
	 * any start after "sha256:". */
	{
		size_t k = 4;
		while (k < 64 && strspn(sha_t, "0123456789") >= k)
			k++;
		char pre[80], upper_pre[80], tagged[80], digits_only[80];
		snprintf(pre, sizeof(pre), "%.*s", (int)k, sha_t);
		for (size_t i = 0; i <= k; i++)
			upper_pre[i] = (char)toupper((unsigned char)pre[i]);
		snprintf(tagged, sizeof(tagged), "sha256:%.6s", sha_t);
		expect_get(&f, pre, (const unsigned char *)"tiny", 4);
		expect_get(&f, upper_pre, (const unsigned char *)"tiny", 4);
		expect_get(&f, tagged, (const unsigned char *)"tiny", 4);
		/* Two contents whose digests share their first 4 digits: that start is ambiguous
		 * (exit 2, nothing written), one digit more is not. */
		char a[16], b[16], ha[65], hb[65];
		bool found = false;
		static char seen_sha[4096][5];
		for (int i = 0; i < 4096 && !found; i++) {
			snprintf(a, sizeof(a), "p%d", i);
			tu_sha256_hex(a, strlen(a), ha);
			for (int m = 0; m < i && !found; m++) {
				if (memcmp(seen_sha[m], ha, 4) != 0)
					continue;
				snprintf(b, sizeof(b), "p%d", m);
				tu_sha256_hex(b, strlen(b), hb);
				found = ha[4] != hb[4];
			}
			memcpy(seen_sha[i], ha, 4);
			seen_sha[i][4] = '\0';
		}
		assert_true(found); /* 4,096 digests: a shared 16-bit start is all but certain */
		tu_mkdir(f.root, "pre");
		const char *extra[] = {"--shell", NULL};
		char cmd_text[128];
		snprintf(cmd_text, sizeof(cmd_text), "printf %s > a.txt; printf %s > b.txt", a, b);
		const char *cmd[] = {cmd_text, NULL};
		hv_run(&r, &f, "pre", NULL, extra, cmd);
		expect_status(&r, 0, "run of two contents with one SHA-256 start");
		tu_result_free(&r);
		/* "sha256:" + the shared 4 digits: ambiguous even when they are all decimal */
		snprintf(tagged, sizeof(tagged), "sha256:%.4s", ha);
		hv(&r, NULL, "history", "get", tagged, "--db", f.db, NULL);
		expect_status(&r, 2, "get of an ambiguous SHA-256 start");
		assert_int_equal(r.out_len, 0);
		expect_one_line_error(&r, "more than one recorded content starts with", tagged);
		tu_result_free(&r);
		snprintf(tagged, sizeof(tagged), "sha256:%.5s", ha);
		expect_get(&f, tagged, (const unsigned char *)a, strlen(a));
		snprintf(tagged, sizeof(tagged), "sha256:%.5s", hb);
		expect_get(&f, tagged, (const unsigned char *)b, strlen(b));
		/* No such start: exit 1, named; too short, or not hex: a usage error. */
		snprintf(tagged, sizeof(tagged), "sha256:%.4s", sha_t);
		tagged[7] = tagged[7] == 'f' ? '0' : 'f';
		hv(&r, NULL, "history", "get", tagged, "--db", f.db, NULL);
		if (r.status == 0)
			print_message("(a recorded content starts with %s too)\n", tagged + 7);
		else
			expect_one_line_error(&r, "no artifact whose SHA-256 starts with", tagged);
		tu_result_free(&r);
		const char *bad_args[] = {"abc", "sha256:", "sha256:xyz", "sha256:12", "12ab-", NULL};
		for (size_t i = 0; bad_args[i]; i++) {
			hv(&r, NULL, "history", "get", bad_args[i], "--db", f.db, NULL);
			expect_status(&r, 2, bad_args[i]);
			assert_int_equal(r.out_len, 0);
			tu_result_free(&r);
		}
		/* digits alone are an artifact id, though they start a recorded digest */
		snprintf(digits_only, sizeof(digits_only), "9%s", "9999");
		hv(&r, NULL, "history", "get", digits_only, "--db", f.db, NULL);
		expect_status(&r, 1, digits_only);
		expect_one_line_error(&r, "no artifact 99999", digits_only);
		tu_result_free(&r);
	}

	/* Unknown ids and hashes: exit 1 with a message naming them, nothing on stdout. */
	const char *unknown[] = {"9999",
				 "0000000000000000000000000000000000000000000000000000000000000000"};
	for (size_t i = 0; i < 2; i++) {
		hv(&r, NULL, "history", "get", unknown[i], "--db", f.db, NULL);
		expect_status(&r, 1, unknown[i]);
		assert_int_equal(r.out_len, 0);
		expect_one_line_error(&r, unknown[i], unknown[i]);
		tu_result_free(&r);
	}
	hv(&r, NULL, "history", "get", "not-an-id", "--db", f.db, NULL);
	expect_status(&r, 2, "get not-an-id");
	assert_int_equal(r.out_len, 0);
	tu_result_free(&r);
	hv(&r, NULL, "history", "get", "--db", f.db, NULL);
	expect_status(&r, 2, "get without an argument");
	tu_result_free(&r);
	free(outp);
	free(bin);
	free(src);
	fx_close(&f);
}

/* ---- prune ------------------------------------------------------------------------------ */

static void expect_get_fails(const fixture *f, const char *what)
{
	tu_result r;
	hv(&r, NULL, "history", "get", what, "--db", f->db, NULL);
	if (r.status != 1)
		fail_msg("get %s after prune: exit %d (%zu bytes), expected 1", what, r.status,
			 r.out_len);
	assert_int_equal(r.out_len, 0);
	expect_one_line_error(&r, NULL, what);
	tu_result_free(&r);
}

static void expect_prune(const fixture *f, const char *const *args, int64_t runs, int64_t arts,
			 int64_t contents, int64_t bytes)
{
	tj_value *v = history_json(f, "prune", args);
	assert_int_equal(tj_type(v), TJ_OBJECT);
	if (tj_int(tj_get(v, "runs")) != runs || tj_int(tj_get(v, "artifacts")) != arts ||
	    (contents >= 0 && tj_int(tj_get(v, "contents")) != contents) ||
	    (bytes >= 0 && tj_int(tj_get(v, "content_bytes")) != bytes))
		fail_msg("prune %s: runs %lld artifacts %lld contents %lld bytes %lld, expected "
			 "%lld %lld %lld %lld", args[0], (long long)tj_int(tj_get(v, "runs")),
			 (long long)tj_int(tj_get(v, "artifacts")),
			 (long long)tj_int(tj_get(v, "contents")),
			 (long long)tj_int(tj_get(v, "content_bytes")), (long long)runs,
			 (long long)arts, (long long)contents, (long long)bytes);
	tj_free(v);
}

static void test_prune(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	static const char shared[] = "shared content\n", only1[] = "only in run 1\n",
			  only2[] = "only in run 2!\n";
	char sh_shared[65], sh1[65], sh2[65];
	tu_sha256_hex(shared, sizeof(shared) - 1, sh_shared);
	tu_sha256_hex(only1, sizeof(only1) - 1, sh1);
	tu_sha256_hex(only2, sizeof(only2) - 1, sh2);
	tj_value *res = shell_run(&f, "d1",
				  "printf 'shared content\\n' > s.txt; printf 'only in run 1\\n' > o1.txt",
				  0);
	int64_t r1 = run_id_of(res);
	tj_free(res);
	res = shell_run(&f, "d2", "printf 'only in run 2!\\n' > o2.txt", 0);
	int64_t r2 = run_id_of(res);
	tj_free(res);
	res = shell_run(&f, "d3", "printf 'shared content\\n' > s3.txt", 0);
	int64_t r3 = run_id_of(res);
	tj_free(res);
	(void)r2;
	char r1s[32], r3s[32];
	snprintf(r1s, sizeof(r1s), "%lld", (long long)r1);
	snprintf(r3s, sizeof(r3s), "%lld", (long long)r3);
	tj_value *a1 = history_json(&f, "artifacts", (const char *const[]){"--run", r1s, NULL});
	char a1_id[32];
	snprintf(a1_id, sizeof(a1_id), "%lld", (long long)tj_int(tj_get(tj_at(a1, 0), "artifact_id")));
	tj_free(a1);
	tj_value *a3 = history_json(&f, "artifacts", (const char *const[]){"--run", r3s, NULL});
	assert_int_equal(tj_len(a3), 1);
	char a3_id[32];
	snprintf(a3_id, sizeof(a3_id), "%lld", (long long)tj_int(tj_get(tj_at(a3, 0), "artifact_id")));
	tj_free(a3);

	/* Neither option, or bad values: usage errors, nothing removed. */
	tu_result r;
	hv(&r, NULL, "history", "prune", "--db", f.db, NULL);
	expect_status(&r, 2, "prune without options");
	expect_one_line_error(&r, NULL, "prune without options");
	tu_result_free(&r);
	expect_usage(&f, "prune", (const char *const[]){"--keep-runs", "x", NULL});
	expect_usage(&f, "prune", (const char *const[]){"--keep-runs", "-1", NULL});
	expect_usage(&f, "prune", (const char *const[]){"--before", "someday", NULL});
	expect_runs(&f, NULL, (int64_t[]){r3, r2, r1}, 3, "before prune");
	/* A database that is not there has nothing to prune: said, and not created. */
	char *typo = tu_path(f.root, "typo.db");
	hv(&r, NULL, "history", "prune", "--keep-runs", "1", "--db", typo, NULL);
	expect_status(&r, 1, "prune of a missing database");
	expect_one_line_error(&r, "no such history database", "prune of a missing database");
	tu_result_free(&r);
	struct stat tsb;
	assert_int_equal(stat(typo, &tsb), -1);
	free(typo);

	/* --keep-runs 1: runs 1 and 2 go with their 3 artifacts and the 2 contents only they had;
	 * the shared content stays (run 3 has it). */
	expect_prune(&f, (const char *const[]){"--keep-runs", "1", NULL}, 2, 3, 2,
		     (int64_t)(sizeof(only1) - 1 + sizeof(only2) - 1));
	expect_runs(&f, NULL, (int64_t[]){r3}, 1, "after --keep-runs 1");
	tj_value *left = history_json(&f, "artifacts", NULL);
	assert_int_equal(tj_len(left), 1);
	assert_int_equal(tj_int(tj_get(tj_at(left, 0), "run_id")), r3);
	tj_free(left);
	expect_get(&f, sh_shared, (const unsigned char *)shared, sizeof(shared) - 1);
	expect_get(&f, a3_id, (const unsigned char *)shared, sizeof(shared) - 1);
	expect_get_fails(&f, sh1);
	expect_get_fails(&f, sh2);
	expect_get_fails(&f, a1_id);
	hv(&r, NULL, "history", "show", r1s, "--db", f.db, NULL);
	expect_status(&r, 1, "show of a pruned run");
	tu_result_free(&r);
	expect_integrity_ok(f.db, "after --keep-runs 1");
	/* Again: nothing more to do. */
	expect_prune(&f, (const char *const[]){"--keep-runs", "1", NULL}, 0, 0, 0, 0);

	/* --before: a run started before the time goes, one started at or after it stays. */
	res = shell_run(&f, "d4", "printf 'run 4\\n' > four.txt", 0);
	int64_t r4 = run_id_of(res);
	tj_free(res);
	tj_value *runs = history_json(&f, "runs", (const char *const[]){"--limit", "1", NULL});
	assert_int_equal(tj_int(tj_get(tj_at(runs, 0), "run_id")), r4);
	char started4[64];
	snprintf(started4, sizeof(started4), "%s",
		 tj_str(tj_get(tj_at(runs, 0), "started_at"), NULL));
	tj_free(runs);
	expect_prune(&f, (const char *const[]){"--before", "2000-01-01T00:00:00Z", NULL}, 0, 0, 0, 0);
	expect_prune(&f, (const char *const[]){"--before", "1d", NULL}, 0, 0, 0, 0);
	expect_runs(&f, NULL, (int64_t[]){r4, r3}, 2, "before --before");
	expect_prune(&f, (const char *const[]){"--before", started4, NULL}, 1, 1, 1,
		     (int64_t)(sizeof(shared) - 1));
	expect_runs(&f, NULL, (int64_t[]){r4}, 1, "after --before");
	expect_get_fails(&f, sh_shared);
	expect_integrity_ok(f.db, "after --before");
	fx_close(&f);
}

/* ---- times far away ---------------------------------------------------------------------- */

/* RFC 3339 times outside what int64 nanoseconds hold (1677-2262), and times at or before the
 * epoch: each is a valid TIME, so --since and --before work with them (nothing is that new;
 * nothing is that old). Every problem is collected, then reported together. */
static void test_far_times(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tj_value *res = shell_run(&f, "d1", "echo 1 > one.txt", 0);
	tj_free(res);
	res = shell_run(&f, "d2", "echo 2 > two.txt", 0);
	tj_free(res);
	static const struct {
		const char *sub, *opt, *time;
		int64_t want; /* runs/artifacts listed, or runs pruned */
	} cases[] = {
		{"runs", "--since", "2999-01-01T00:00:00Z", 0},
		{"artifacts", "--since", "2999-01-01T00:00:00Z", 0},
		{"runs", "--since", "9999-12-31T23:59:59Z", 0},
		{"runs", "--since", "1600-01-01T00:00:00Z", 2},
		{"artifacts", "--since", "1969-12-31T23:59:59Z", 2},
		{"runs", "--since", "1970-01-01T00:00:00Z", 2},
		{"prune", "--before", "1600-01-01T00:00:00Z", 0},
		{"prune", "--before", "1960-01-01T00:00:00Z", 0},
		{"prune", "--before", "1970-01-01T00:00:00Z", 0},
		{"prune", "--before", "2999-01-01T00:00:00Z", 2}, /* last: removes everything */
	};
	char problems[4096] = "";
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		tu_result r;
		hv(&r, NULL, "history", cases[i].sub, cases[i].opt, cases[i].time, "--db", f.db, NULL);
		tj_value *v = r.status == 0 ? tj_parse(r.out, r.out_len) : NULL;
		int64_t got = -1;
		if (v)
			got = !strcmp(cases[i].sub, "prune") ? tj_int(tj_get(v, "runs"))
							       : (int64_t)tj_len(v);
		if (r.status != 0 || !v || got != cases[i].want || r.err_len) {
			print_message("  history %s %s %s: exit %d, %lld %s (expected exit 0, %lld)"
				      "; stderr: %.*s\n", cases[i].sub, cases[i].opt, cases[i].time,
				      r.status, (long long)got,
				      !strcmp(cases[i].sub, "prune") ? "pruned" : "listed",
				      (long long)cases[i].want,
				      (int)(r.err_len && r.err[r.err_len - 1] == '\n' ? r.err_len - 1
										      : r.err_len),
				      r.err);
			snprintf(problems + strlen(problems), sizeof(problems) - strlen(problems),
				 " %s %s %s;", cases[i].sub, cases[i].opt, cases[i].time);
		}
		tj_free(v);
		tu_result_free(&r);
	}
	fx_close(&f);
	if (problems[0])
		fail_msg("far times wrong (details above):%s", problems);
}

/* ---- a database that does not exist --------------------------------------------------- */

static void expect_no_db_files(const char *db, const char *what)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
	for (size_t i = 0; i < 4; i++) {
		char *p = with_suffix(db, sfx[i]);
		if (path_exists(p))
			fail_msg("%s created %s", what, p);
		free(p);
	}
}

static void test_missing_db(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	/* README: a read-only query of a database that does not exist answers from an empty
	 * history (what store.c's open_ephemeral does); it creates nothing. */
	char *nodir = tu_path(f.root, "nodir");
	char *nodir_db = tu_path(f.root, "nodir/h.db");
	const char *dbs[] = {f.db, nodir_db};
	for (size_t k = 0; k < 2; k++) {
		const char *db = dbs[k];
		static const char *const lists[][6] = {
			{"runs", NULL},
			{"runs", "--limit", "3", "--since", "1h", NULL},
			{"runs", "--label", "x", NULL},
			{"artifacts", NULL},
			{"artifacts", "--mime", "image/*", "--since", "7d", NULL},
			{"artifacts", "--run", "1", NULL},
		};
		for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
			const char *base[] = {"history", lists[i][0], "--db", db, NULL};
			tu_result r;
			hv2(&r, base, lists[i] + 1);
			expect_status(&r, 0, lists[i][0]);
			assert_int_equal(r.err_len, 0);
			tj_value *v = json_doc(&r, lists[i][0]);
			assert_int_equal(tj_type(v), TJ_ARRAY);
			assert_int_equal(tj_len(v), 0);
			tj_free(v);
			tu_result_free(&r);
			expect_no_db_files(db, lists[i][0]);
		}
		tu_result r;
		hv(&r, NULL, "history", "runs", "--format", "jsonl", "--db", db, NULL);
		expect_status(&r, 0, "runs --format jsonl");
		assert_int_equal(r.out_len, 0);
		tu_result_free(&r);
		/* show and get of something that is not there: exit 1, a clear message. */
		static const char *const missing[][3] = {
			{"get", "1", NULL},
			{"get", "0000000000000000000000000000000000000000000000000000000000000000",
			 NULL},
			{"show", "1", NULL},
		};
		for (size_t i = 0; i < 3; i++) {
			hv(&r, NULL, "history", missing[i][0], missing[i][1], "--db", db, NULL);
			expect_status(&r, 1, missing[i][0]);
			if (r.out_len)
				fail_msg("history %s %s: failed, yet wrote %zu bytes to stdout: '%s'",
					 missing[i][0], missing[i][1], r.out_len, r.out);
			expect_one_line_error(&r, missing[i][1], missing[i][0]);
			tu_result_free(&r);
			expect_no_db_files(db, missing[i][0]);
		}
	}
	assert_false(path_exists(nodir));
	free(nodir);
	free(nodir_db);
	fx_close(&f);
}

/* ---- databases others may only read, paths that are not databases ----------------------- */

/* A database in a directory nobody cannot write (so nothing can be made beside it: no -wal,
 * no -shm), the file readable by all: nobody's history queries read it, a collect into it is
 * refused as read-only; the file is never changed. A file nobody cannot read at all is a
 * one-line error naming it and the reason. */
static void test_readonly_location_as_nobody(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* the directory must be someone else's */
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "c");
	char *c = tu_path(f.root, "c");
	tu_write(c, "a.txt", "hello\n", 6);
	tu_result r;
	hv(&r, NULL, "collect", "--db", f.db, c, NULL);
	expect_status(&r, 0, "collect");
	tu_result_free(&r);
	assert_int_equal(chmod(f.db, 0644), 0);
	size_t len0;
	char *before = tu_read_file(f.db, &len0);
	assert_non_null(before);
	char *real_c = realpath(c, NULL);
	assert_non_null(real_c);

	const char *runs[] = {"history", "runs", "--db", f.db, NULL};
	tu_harvest_as_nobody(&r, NULL, runs);
	expect_status(&r, 0, "history runs as nobody");
	tj_value *v = json_doc(&r, "history runs as nobody");
	assert_int_equal(tj_len(v), 1);
	expect_str(tj_get(tj_at(v, 0), "dir"), real_c, "dir");
	assert_int_equal(tj_int(tj_get(tj_at(v, 0), "artifacts")), 1);
	tj_free(v);
	tu_result_free(&r);
	const char *arts[] = {"history", "artifacts", "--db", f.db, NULL};
	tu_harvest_as_nobody(&r, NULL, arts);
	expect_status(&r, 0, "history artifacts as nobody");
	v = json_doc(&r, "history artifacts as nobody");
	assert_int_equal(tj_len(v), 1);
	expect_str(tj_get(tj_at(v, 0), "path"), "a.txt", "path");
	tj_free(v);
	tu_result_free(&r);
	expect_db_unchanged(f.db, before, len0, "history as nobody");

	const char *col[] = {"collect", "--db", f.db, c, NULL};
	tu_harvest_as_nobody(&r, NULL, col);
	expect_status(&r, 1, "collect as nobody");
	assert_int_equal(r.out_len, 0);
	expect_one_line_error(&r, f.db, "collect as nobody");
	assert_non_null(strstr(r.err, "read-only"));
	tu_result_free(&r);
	expect_db_unchanged(f.db, before, len0, "collect as nobody");

	assert_int_equal(chmod(f.db, 0600), 0);
	tu_harvest_as_nobody(&r, NULL, runs);
	expect_status(&r, 1, "history runs of an unreadable database");
	assert_int_equal(r.out_len, 0);
	expect_one_line_error(&r, f.db, "history runs of an unreadable database");
	assert_non_null(strstr(r.err, "Permission denied"));
	tu_result_free(&r);
	expect_db_unchanged(f.db, before, len0, "history runs of an unreadable database");
	free(real_c);
	free(before);
	free(c);
	fx_close(&f);
}

/* A --db that is not a regular file (a character device) is not a database: reading and
 * writing commands both refuse it in one line. */
static void test_db_not_a_file(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "c");
	char *c = tu_path(f.root, "c");
	tu_result r;
	hv(&r, NULL, "history", "runs", "--db", "/dev/null", NULL);
	expect_status(&r, 1, "history runs --db /dev/null");
	assert_int_equal(r.out_len, 0);
	expect_one_line_error(&r, "not a regular file", "history runs --db /dev/null");
	tu_result_free(&r);
	hv(&r, NULL, "snapshot", "--db", "/dev/null", c, NULL);
	expect_status(&r, 1, "snapshot --db /dev/null");
	assert_int_equal(r.out_len, 0);
	expect_one_line_error(&r, "/dev/null", "snapshot --db /dev/null");
	tu_result_free(&r);
	free(c);
	fx_close(&f);
}

/* Without --db and $HARVEST_DB the database is $XDG_DATA_HOME/harvest/harvest.db, its
 * directories made as needed; when they cannot be made, a one-line error names the one that
 * failed and why. */
static void test_default_location(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "c");
	char *c = tu_path(f.root, "c");
	tu_write(f.root, "file", "x", 1);
	char xdg[4200];
	snprintf(xdg, sizeof(xdg), "XDG_DATA_HOME=%s/data", f.root);
	char *argv[] = {"env", "-u", "HARVEST_DB", xdg, HARVEST_BIN, "snapshot", c, NULL};
	tu_result r;
	tu_run(&r, NULL, NULL, argv);
	expect_status(&r, 0, "snapshot into the default location");
	tu_result_free(&r);
	char *db = tu_path(f.root, "data/harvest/harvest.db");
	assert_true(path_exists(db));
	struct stat sb;
	char *hdir = tu_path(f.root, "data/harvest");
	assert_int_equal(stat(hdir, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0700);

	snprintf(xdg, sizeof(xdg), "XDG_DATA_HOME=%s/file/data", f.root);
	tu_run(&r, NULL, NULL, argv);
	expect_status(&r, 1, "snapshot with an impossible default location");
	assert_int_equal(r.out_len, 0);
	char *bad = tu_path(f.root, "file/data");
	expect_one_line_error(&r, bad, "snapshot with an impossible default location");
	assert_non_null(strstr(r.err, "cannot create the database directory"));
	assert_non_null(strstr(r.err, "Not a directory"));
	tu_result_free(&r);

	/* Without the history the database is only the MIME cache: where harvest chose its
	 * location, collect and run go on without it, typing every file all the same, and say so
	 * on one line (collect exits 1, as for any warning; run with the command's status), in
	 * both of run's ways of finding what changed. */
	tu_write(c, "a.txt", "hello\n", 6);
	char *collect_nh[] = {"env", "-u", "HARVEST_DB", xdg, HARVEST_BIN, "collect", "--no-history",
			      c, NULL};
	char *run_nh[] = {"env", "-u", "HARVEST_DB", xdg, HARVEST_BIN, "run", "--no-history",
			  "--format", "json", "--dir", c, "--", "sh", "-c", "printf 'x,y\\n' > b.csv",
			  NULL};
	char *run_nh_snap[] = {"env", "-u", "HARVEST_DB", xdg, HARVEST_BIN, "run", "--no-history",
			       "--changes", "snapshot", "--format", "json", "--dir", c, "--", "sh", "-c",
			       "printf 'x,y\\n' > d.csv; exit 4", NULL};
	char *const *nh[] = {collect_nh, run_nh, run_nh_snap};
	const char *const nh_what[] = {"collect --no-history", "run --no-history",
				       "run --no-history --changes snapshot"};
	const int nh_status[] = {1, 0, 4};
	const char *const nh_want[] = {"\"mime_type\":\"text/plain\"", "\"mime_type\":\"text/csv\"",
				       "\"d.csv\""};
	for (size_t i = 0; i < 3; i++) {
		tu_run(&r, NULL, NULL, nh[i]);
		expect_status(&r, nh_status[i], nh_what[i]);
		expect_one_line_error(&r, bad, nh_what[i]);
		if (!strstr(r.err, "cannot create the database directory") ||
		    !strstr(r.err, "; collecting without the MIME cache"))
			fail_msg("%s without its cache: %s", nh_what[i], r.err);
		if (!strstr(r.out, nh_want[i]))
			fail_msg("%s without its cache: no %s in %s", nh_what[i], nh_want[i], r.out);
		if (i == 2 && !strstr(r.out, "\"mime_type\":\"text/csv\""))
			fail_msg("%s without its cache: d.csv untyped: %s", nh_what[i], r.out);
		tu_result_free(&r);
	}
	/* Still the default location, so still only a warning: an empty HARVEST_DB (unset, as
	 * the store reads it), --cache-db without a PostgreSQL history (not used then), and a
	 * PostgreSQL HARVEST_DB without --cache-db (no history: only the local cache opens). */
	char cache_flag[] = "--cache-db";
	/* (a file HARVEST_DB under a PostgreSQL --db: the cache is still the default location) */
	char env_file[4200];
	snprintf(env_file, sizeof(env_file), "HARVEST_DB=%s/env.db", f.root);
	char *default_too[][11] = {
		{"env", "HARVEST_DB=", xdg, HARVEST_BIN, "collect", "--no-history", c, NULL},
		{"env", "-u", "HARVEST_DB", xdg, HARVEST_BIN, "collect", "--no-history", cache_flag,
		 bad, c},
		{"env", "HARVEST_DB=postgresql:///nowhere?host=/nonexistent", xdg, HARVEST_BIN,
		 "collect", "--no-history", c, NULL},
		{"env", env_file, xdg, HARVEST_BIN, "collect", "--no-history", "--db",
		 "postgresql:///nowhere?host=/nonexistent", c, NULL},
	};
	for (size_t i = 0; i < 4; i++) {
		tu_run(&r, NULL, NULL, default_too[i]);
		expect_status(&r, 1, "collect --no-history at the default location");
		if (!strstr(r.err, "cannot create the database directory") ||
		    !strstr(r.err, "; collecting without the MIME cache") ||
		    !strstr(r.out, "\"mime_type\":\"text/plain\""))
			fail_msg("case %zu: not a warning and a full answer: %s / %s", i, r.err, r.out);
		tu_result_free(&r);
	}
	char *env_db = tu_path(f.root, "env.db");
	assert_false(path_exists(env_db));
	free(env_db);
	/* With the history it is still an error, and nothing is printed. */
	char *collect_h[] = {"env", "-u", "HARVEST_DB", xdg, HARVEST_BIN, "collect", c, NULL};
	tu_run(&r, NULL, NULL, collect_h);
	expect_status(&r, 1, "collect with an impossible default location");
	assert_int_equal(r.out_len, 0);
	expect_one_line_error(&r, bad, "collect with an impossible default location");
	tu_result_free(&r);
	/* A database the caller named (HARVEST_DB here, --db in run_cli_test) is the one asked
	 * for: one that cannot be opened fails collect (1, nothing printed) and a run that
	 * produced a file (125), cache or not. */
	char named[4200];
	snprintf(named, sizeof(named), "HARVEST_DB=%s/file/h.db", f.root);
	char *collect_named[] = {"env", named, HARVEST_BIN, "collect", "--no-history", c, NULL};
	tu_run(&r, NULL, NULL, collect_named);
	expect_status(&r, 1, "collect --no-history with HARVEST_DB unusable");
	assert_int_equal(r.out_len, 0);
	if (strstr(r.err, "without the MIME cache"))
		fail_msg("a named database fell back to no cache: %s", r.err);
	tu_result_free(&r);
	char *run_named[] = {"env", named, HARVEST_BIN, "run", "--no-history", "--format", "json",
			     "--dir", c, "--", "sh", "-c", ": > e.txt", NULL};
	tu_run(&r, NULL, NULL, run_named);
	expect_status(&r, 125, "run --no-history with HARVEST_DB unusable");
	if (!strstr(r.err, "file/h.db") || strstr(r.err, "without the MIME cache"))
		fail_msg("run with a named database that cannot be opened: %s", r.err);
	tu_result_free(&r);
	free(bad);
	free(hdir);
	free(db);
	free(c);
	fx_close(&f);
}

/* Another process holds the write lock: a writer waits for it (the busy timeout, 10 s) and
 * goes on when it is released; when it is held past the timeout, the writer gives up with a
 * one-line error naming the database, and the database stays consistent. */
static void test_locked_database(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "c");
	char *c = tu_path(f.root, "c");
	tu_write(c, "a.txt", "x\n", 2);
	tu_result r;
	hv(&r, NULL, "snapshot", "--db", f.db, c, NULL);
	expect_status(&r, 0, "first snapshot");
	tu_result_free(&r);
	sqlite3 *h;
	assert_int_equal(sqlite3_open_v2(f.db, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);

	/* Held for 1 s: the writer waits, then succeeds. */
	assert_int_equal(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	char *out = tu_path(f.root, "out"), *err = tu_path(f.root, "err");
	char *argv[] = {HARVEST_BIN, "snapshot", "--db", f.db, c, NULL};
	double t0 = tu_now_s();
	pid_t pid = tu_spawn(argv, out, err);
	tu_sleep_ms(1000);
	assert_int_equal(sqlite3_exec(h, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
	int status = tu_wait(pid);
	char *o = tu_read_file(out, NULL), *e = tu_read_file(err, NULL);
	if (status != 0)
		fail_msg("snapshot after a 1 s lock: exit %d: %s", status, e);
	assert_true(tu_now_s() - t0 >= 0.9); /* it did wait */
	assert_non_null(strstr(o, "\"snapshot_id\":2"));
	free(o);
	free(e);

	/* Held past the busy timeout: a clear failure. */
	assert_int_equal(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	t0 = tu_now_s();
	hv(&r, NULL, "snapshot", "--db", f.db, c, NULL);
	double waited = tu_now_s() - t0;
	assert_int_equal(sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	expect_status(&r, 1, "snapshot of a locked database");
	assert_int_equal(r.out_len, 0);
	expect_one_line_error(&r, f.db, "snapshot of a locked database");
	assert_non_null(strstr(r.err, "locked"));
	tu_result_free(&r);
	if (waited < 9)
		fail_msg("gave up after %.1f s, before the busy timeout", waited);
	assert_int_equal(sqlite3_close(h), SQLITE_OK);
	expect_integrity_ok(f.db, "after the lock");
	free(out);
	free(err);
	free(c);
	fx_close(&f);
}

/* ---- corrupt databases ------------------------------------------------------------------ */

/* Every history command on db: exit 1, one line naming db, nothing on stdout, db unchanged
 * byte for byte and no -wal/-shm/-journal beside it. */
static void expect_refused(const char *db, const char *what)
{
	size_t len0;
	char *before = tu_read_file(db, &len0);
	assert_non_null(before);
	static const char *const cmds[][6] = {
		{"runs", NULL},
		{"runs", "--format", "jsonl", "--limit", "1", NULL},
		{"artifacts", NULL},
		{"artifacts", "--mime", "image/*", NULL},
		{"artifacts", "--sha256", "abc", "--since", "1h", NULL},
		{"show", "1", NULL},
		{"show", "1", "--content", "--case", "camel", NULL},
		{"get", "1", NULL},
		{"get", "0000000000000000000000000000000000000000000000000000000000000000", NULL},
		{"prune", "--keep-runs", "1", NULL},
		{"prune", "--before", "1d", NULL},
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		tu_result r;
		const char *args[16];
		size_t n = 0;
		args[n++] = "history";
		args[n++] = cmds[i][0];
		args[n++] = "--db";
		args[n++] = db;
		for (size_t j = 1; cmds[i][j]; j++)
			args[n++] = cmds[i][j];
		args[n] = NULL;
		tu_harvestv(&r, NULL, NULL, args);
		char w[256];
		snprintf(w, sizeof(w), "%s: history %s %s", what, cmds[i][0],
			 cmds[i][1] ? cmds[i][1] : "");
		expect_status(&r, 1, w);
		if (r.out_len)
			fail_msg("%s: wrote to stdout: %s", w, r.out);
		expect_one_line_error(&r, db, w);
		tu_result_free(&r);
		expect_db_unchanged(db, before, len0, w);
	}
	free(before);
}

/* Makes a harvest database at f->db with two runs, everything in the main file. */
static void make_db(const fixture *f, int64_t *r1, int64_t *r2)
{
	tj_value *res = shell_run(f, "d1", "printf 'one\\n' > a.txt; printf 'x,y\\n' > b.csv", 0);
	*r1 = run_id_of(res);
	tj_free(res);
	res = shell_run(f, "d2", "printf 'two\\n' > c.txt", 0);
	*r2 = run_id_of(res);
	tj_free(res);
	tu_result r;
	char *argv[] = {"sqlite3", f->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL};
	tu_run(&r, NULL, NULL, argv);
	expect_status(&r, 0, "sqlite3 wal_checkpoint");
	tu_result_free(&r);
	static const char *const sfx[] = {"-wal", "-shm"};
	for (size_t j = 0; j < 2; j++) {
		char *p = with_suffix(f->db, sfx[j]);
		struct stat sb;
		if (lstat(p, &sb) == 0)
			assert_int_equal(sb.st_size == 0 || j == 1, 1);
		unlink(p);
		free(p);
	}
}

static void test_corrupt_db(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	/* 4096 random bytes. */
	unsigned char junk[4096];
	rng_seed(4096);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)rng_next();
	tu_write(f.root, "junk.db", junk, sizeof(junk));
	char *junk_db = tu_path(f.root, "junk.db");
	expect_refused(junk_db, "4096 random bytes");
	/* A harvest database whose first page (after the 100-byte header: the schema) is
	 * random bytes. */
	int64_t r1, r2;
	make_db(&f, &r1, &r2);
	size_t len;
	unsigned char *db = (unsigned char *)tu_read_file(f.db, &len);
	assert_non_null(db);
	assert_true(len >= 8192);
	for (size_t i = 100; i < 4096; i++)
		db[i] = (unsigned char)rng_next();
	tu_write(f.root, "page1.db", db, len);
	char *page1_db = tu_path(f.root, "page1.db");
	expect_refused(page1_db, "a harvest database with page 1 corrupt");
	/* A text file, and an empty directory, where the database should be. */
	tu_write(f.root, "text.db", "hello, this is not a database\n", 30);
	char *text_db = tu_path(f.root, "text.db");
	expect_refused(text_db, "a text file");
	free(text_db);
	free(page1_db);
	free(db);
	free(junk_db);
	fx_close(&f);
}

/* The root page of table in db, and the page size, read with sqlite3(1). */
static void root_page(const char *db, const char *table, long *page, long *page_size)
{
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "SELECT rootpage FROM sqlite_master WHERE name = '%s'; PRAGMA page_size;", table);
	char *argv[] = {"sqlite3", (char *)db, sql, NULL};
	tu_result r;
	tu_run(&r, NULL, NULL, argv);
	expect_status(&r, 0, "sqlite3 rootpage");
	assert_int_equal(sscanf(r.out, "%ld %ld", page, page_size), 2);
	tu_result_free(&r);
	assert_true(*page > 1 && *page_size >= 512);
}

/* A page that is still a b-tree page, but whose cell pointers are garbage: SQLite reads it
 * without complaint, and a lookup by key finds nothing there. "no run N" or "no artifact N"
 * would then tell the user that a run was deleted when the file is damaged: a lookup that
 * finds nothing checks its table (quick_check) before saying so. */
static void test_damaged_cells_hide_rows(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	int64_t r1, r2;
	make_db(&f, &r1, &r2);
	static const char *const cases[][2] = {{"runs", "show"}, {"artifacts", "get"}};
	for (size_t c = 0; c < 2; c++) {
		long page, page_size;
		root_page(f.db, cases[c][0], &page, &page_size);
		size_t len;
		unsigned char *bad = (unsigned char *)tu_read_file(f.db, &len);
		assert_non_null(bad);
		size_t off = (size_t)(page - 1) * (size_t)page_size;
		assert_true(off + (size_t)page_size <= len);
		/* after the 8-byte header of a leaf page: its cell pointers, then free space */
		for (size_t i = 8; i < 8 + 200; i++)
			bad[off + i] = (unsigned char)"\xde\xad\xbe\xef"[i % 4];
		char *copy = tu_path(f.root, "cells.db");
		tu_write(f.root, "cells.db", bad, len);
		char id[32];
		snprintf(id, sizeof(id), "%lld", (long long)(c == 0 ? r1 : 1));
		const char *args[] = {"history", cases[c][1], id, "--db", copy, NULL};
		tu_result r;
		tu_harvestv(&r, NULL, NULL, args);
		char w[96];
		snprintf(w, sizeof(w), "history %s %s, %s's cells damaged", cases[c][1], id,
			 cases[c][0]);
		expect_status(&r, 1, w);
		expect_one_line_error(&r, "database is corrupt", w);
		assert_int_equal(r.out_len, 0);
		tu_result_free(&r);
		/* A run or an artifact that is not there, in a sound file, is still "no ...". */
		const char *none[] = {"history", cases[c][1], "999", "--db", f.db, NULL};
		tu_harvestv(&r, NULL, NULL, none);
		expect_status(&r, 1, "an id never recorded");
		expect_one_line_error(&r, c == 0 ? "no run 999" : "no artifact 999",
				      "an id never recorded");
		tu_result_free(&r);
		free(copy);
		free(bad);
	}
	fx_close(&f);
}

/* A harvest database with one b-tree page (of a table or index) overwritten: commands that do
 * not read that page may work; those that do fail with a one-line error; a command that fails
 * leaves the file exactly as it was (SPEC 5: a corrupt database is never modified), and so
 * prune is all or nothing. */
static void test_corrupt_page(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	int64_t r1, r2;
	make_db(&f, &r1, &r2);
	size_t len;
	char *pristine = tu_read_file(f.db, &len);
	assert_non_null(pristine);
	tu_result r;
	char *argv[] = {"sqlite3", "-separator", " ", f.db,
			"SELECT rootpage, name FROM sqlite_master WHERE rootpage > 1"
			" ORDER BY rootpage; PRAGMA page_size;", NULL};
	tu_run(&r, NULL, NULL, argv);
	expect_status(&r, 0, "sqlite3 sqlite_master");
	/* The last line is the page size. */
	int pages[64];
	char names[64][64];
	size_t n = 0;
	long page_size = 0;
	for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
		int pg;
		char name[64];
		if (sscanf(line, "%d %63s", &pg, name) == 2) {
			assert_true(n < 64);
			pages[n] = pg;
			snprintf(names[n], sizeof(names[n]), "%s", name);
			n++;
		} else {
			page_size = atol(line);
		}
	}
	tu_result_free(&r);
	assert_true(n >= 5);
	assert_true(page_size >= 512);
	char sha_a[65];
	tu_sha256_hex("one\n", 4, sha_a);
	char r1s[32];
	snprintf(r1s, sizeof(r1s), "%lld", (long long)r1);
	char *copy = tu_path(f.root, "c.db");
	char *copy_wal = with_suffix(copy, "-wal"), *copy_shm = with_suffix(copy, "-shm");
	static const char *cmds[][4] = {
		{"runs", NULL},
		{"artifacts", "--mime", "text/*", NULL},
		{"show", "R1", "--content", NULL},
		{"get", "1", NULL},
		{"get", "SHA", NULL},
		{"prune", "--keep-runs", "1", NULL},
		{"prune", "--before", "2200-01-01T00:00:00Z", NULL},
	};
	char failures[4096] = "";
	rng_seed(77);
	unsigned char *bad = malloc(len);
	assert_non_null(bad);
	for (size_t p = 0; p < n; p++) {
		memcpy(bad, pristine, len);
		size_t off = (size_t)(pages[p] - 1) * (size_t)page_size;
		assert_true(off + (size_t)page_size <= len);
		for (long i = 0; i < page_size; i++)
			bad[off + (size_t)i] = (unsigned char)rng_next();
		bad[off] = 0xee; /* not a b-tree page type */
		for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++) {
			tu_write(f.root, "c.db", bad, len);
			unlink(copy_wal);
			unlink(copy_shm);
			const char *args[10];
			size_t k = 0;
			args[k++] = "history";
			args[k++] = cmds[c][0];
			args[k++] = "--db";
			args[k++] = copy;
			for (size_t j = 1; cmds[c][j]; j++)
				args[k++] = !strcmp(cmds[c][j], "R1") ? r1s
					    : !strcmp(cmds[c][j], "SHA") ? sha_a : cmds[c][j];
			args[k] = NULL;
			tu_harvestv(&r, NULL, NULL, args);
			char w[160];
			snprintf(w, sizeof(w), "page %d (%s) corrupt: history %s %s", pages[p],
				 names[p], cmds[c][0], cmds[c][1] ? cmds[c][1] : "");
			if (r.status == 0) {
				if (r.err_len)
					fail_msg("%s: exit 0 with stderr '%s'", w, r.err);
			} else {
				expect_status(&r, 1, w);
				expect_one_line_error(&r, NULL, w);
				size_t l2;
				char *after = tu_read_file(copy, &l2);
				assert_non_null(after);
				struct stat sb;
				bool wal_left = lstat(copy_wal, &sb) == 0 && sb.st_size > 0;
				if (l2 != len || memcmp(after, bad, len) != 0 || wal_left) {
					print_message("  %s: exit 1 ('%.*s') but the database was "
						      "modified\n", w,
						      (int)(r.err_len ? r.err_len - 1 : 0), r.err);
					snprintf(failures + strlen(failures),
						 sizeof(failures) - strlen(failures),
						 " page %d %s %s modified it;", pages[p], cmds[c][0],
						 cmds[c][1] ? cmds[c][1] : "");
				}
				/* A failure is not an answer: no result (a list, an ExecutionResult
				 * missing what could not be read) on stdout. */
				if (r.out_len) {
					print_message("  %s: exit 1 ('%.*s') but stdout has %zu bytes: "
						      "%.120s\n", w,
						      (int)(r.err_len ? r.err_len - 1 : 0), r.err,
						      r.out_len, r.out);
					snprintf(failures + strlen(failures),
						 sizeof(failures) - strlen(failures),
						 " page %d %s %s printed a result;", pages[p],
						 cmds[c][0], cmds[c][1] ? cmds[c][1] : "");
				}
				free(after);
			}
			if (strcmp(cmds[c][0], "prune") != 0 && r.status == 0) {
				/* A read never writes. */
				size_t l2;
				char *after = tu_read_file(copy, &l2);
				assert_non_null(after);
				if (l2 != len || memcmp(after, bad, len) != 0)
					fail_msg("%s: a read changed the database", w);
				free(after);
			}
			tu_result_free(&r);
		}
	}
	free(bad);
	free(copy_wal);
	free(copy_shm);
	free(copy);
	free(pristine);
	fx_close(&f);
	if (failures[0])
		fail_msg("corrupt pages (details above):%s", failures);
}

/* ---- many processes, one database --------------------------------------------------------- */

enum { N_PAR = 8 };

/* Starts N_PAR `harvest run`s at once into db, each in its own directory ROOT/<tag><i> making
 * one file, waits for all, checks their results, and puts their run ids in ids. */
static void concurrent_round(const fixture *f, const char *db, const char *tag, int64_t *ids)
{
	pid_t pids[N_PAR];
	char *dirs[N_PAR], *outs[N_PAR], *errs[N_PAR];
	for (int i = 0; i < N_PAR; i++) {
		char name[32];
		snprintf(name, sizeof(name), "%s%d", tag, i);
		tu_mkdir(f->root, name);
		dirs[i] = tu_path(f->root, name);
		snprintf(name, sizeof(name), "%s%d.out", tag, i);
		outs[i] = tu_path(f->root, name);
		snprintf(name, sizeof(name), "%s%d.err", tag, i);
		errs[i] = tu_path(f->root, name);
	}
	/* All started before any ends. */
	for (int i = 0; i < N_PAR; i++) {
		char idx[16];
		snprintf(idx, sizeof(idx), "%d", i);
		char *argv[] = {HARVEST_BIN, "run", "--db", (char *)db, "--dir", dirs[i], "--format",
				"json", "--", "sh", "-c", "echo \"$1\" > made-$1.txt; sleep 0.2", "sh",
				idx, NULL};
		pids[i] = tu_spawn(argv, outs[i], errs[i]);
	}
	int sts[N_PAR];
	for (int i = 0; i < N_PAR; i++)
		sts[i] = tu_wait(pids[i]);
	for (int i = 0; i < N_PAR; i++) {
		size_t len;
		char *out = tu_read_file(outs[i], &len);
		assert_non_null(out);
		char *err = tu_read_file(errs[i], NULL);
		assert_non_null(err);
		if (sts[i] != 0)
			fail_msg("%s: run %d of %d started at once: exit %d; stdout '%s'; stderr '%s'",
				 tag, i, N_PAR, sts[i], out, err);
		free(err);
		tj_value *v = tj_parse(out, len);
		if (!v)
			fail_msg("%s: run %d: output is not JSON: %s", tag, i, out);
		ids[i] = run_id_of(v);
		assert_int_equal(tj_len(tj_get(v, "output_files")), 1);
		char want[32];
		snprintf(want, sizeof(want), "made-%d.txt", i);
		expect_str(tj_get(tj_at(tj_get(v, "output_files"), 0), "path"), want, "output path");
		tj_free(v);
		free(out);
	}
	for (int i = 0; i < N_PAR; i++) {
		free(dirs[i]);
		free(outs[i]);
		free(errs[i]);
	}
}

/* The history of db holds exactly the runs ids[0..n) (round r's i-th run is in ROOT/<tag r><i>),
 * each with its one artifact. */
static void expect_concurrent_history(const char *root, const char *db, const char *const *tags,
				      const int64_t *ids, size_t n)
{
	fixture g = {(char *)root, (char *)db};
	tj_value *list = history_json(&g, "runs", NULL);
	assert_int_equal(tj_len(list), n);
	for (size_t i = 0; i < n; i++) {
		const tj_value *o = tj_at(list, i);
		int64_t id = tj_int(tj_get(o, "run_id"));
		for (size_t j = 0; j < i; j++)
			if (tj_int(tj_get(tj_at(list, j), "run_id")) == id)
				fail_msg("run id %lld listed twice", (long long)id);
		size_t k = 0;
		while (k < n && ids[k] != id)
			k++;
		if (k == n)
			fail_msg("run %lld is listed but no process printed it", (long long)id);
		/* It ran in its process's directory, made its file, and has that one artifact. */
		char name[32];
		snprintf(name, sizeof(name), "%s%zu", tags[k / N_PAR], k % N_PAR);
		char *d = tu_path(root, name);
		char real[PATH_MAX];
		assert_non_null(realpath(d, real));
		free(d);
		expect_str(tj_get(o, "dir"), real, "dir");
		assert_int_equal(tj_int(tj_get(o, "artifacts")), 1);
		expect_json_eq(tj_get(o, "exit_code"), "0", "exit_code");
		char want[128];
		snprintf(want, sizeof(want), "[\"sh\",\"-c\",\"echo \\\"$1\\\" > made-$1.txt; sleep 0.2\","
			 "\"sh\",\"%zu\"]", k % N_PAR);
		expect_json_eq(tj_get(o, "command"), want, "command");
		char rs[32];
		snprintf(rs, sizeof(rs), "%lld", (long long)id);
		tj_value *a = history_json(&g, "artifacts", (const char *const[]){"--run", rs, NULL});
		assert_int_equal(tj_len(a), 1);
		snprintf(want, sizeof(want), "made-%zu.txt", k % N_PAR);
		expect_str(tj_get(tj_at(a, 0), "path"), want, "artifact path");
		tj_free(a);
	}
	tj_free(list);
	tj_value *all = history_json(&g, "artifacts", NULL);
	assert_int_equal(tj_len(all), n);
	tj_free(all);
	expect_integrity_ok(db, "after concurrent runs");
}

static void test_concurrent_runs(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	/* Round a: 8 processes, and the database does not exist yet (they race to create it);
	 * round b: 8 more into the same database. Then two more new databases, as the race to
	 * create one is short. */
	int64_t ids[2 * N_PAR];
	const char *const tags[] = {"a", "b"};
	concurrent_round(&f, f.db, "a", ids);
	expect_concurrent_history(f.root, f.db, tags, ids, N_PAR);
	concurrent_round(&f, f.db, "b", ids + N_PAR);
	expect_concurrent_history(f.root, f.db, tags, ids, 2 * N_PAR);
	for (int k = 0; k < 2; k++) {
		const char *tag = k ? "d" : "c";
		char name[16];
		snprintf(name, sizeof(name), "%s.db", tag);
		char *db = tu_path(f.root, name);
		concurrent_round(&f, db, tag, ids);
		expect_concurrent_history(f.root, db, &tag, ids, N_PAR);
		free(db);
	}
	fx_close(&f);
}

/* ---- a collect killed at random moments ------------------------------------------------- */

enum { KILL_FILES = 2000 };

/* After a kill: the database is consistent and usable; every run is either finished with all
 * its artifacts or unfinished with none (the finish is one transaction); an unfinished one is
 * ended as "interrupted" by the next writing open, still with none. */
static void check_after_kill(const fixture *f, const char *what)
{
	if (path_exists(f->db))
		expect_integrity_ok(f->db, what);
	tj_value *list = history_json(f, "runs", NULL);
	for (size_t i = 0; i < tj_len(list); i++) {
		const tj_value *o = tj_at(list, i);
		int64_t n = tj_int(tj_get(o, "artifacts"));
		bool ended = !tj_is_null(tj_get(o, "ended_at"));
		const tj_value *why = tj_get(o, "end_reason");
		if (ended && !tj_is_null(why)) {
			expect_str(why, "interrupted", "end_reason after a kill");
			ended = false;
		}
		if (ended ? n != KILL_FILES : n != 0)
			fail_msg("%s: run %lld %s with %lld artifacts", what,
				 (long long)tj_int(tj_get(o, "run_id")),
				 ended ? "finished" : "unfinished", (long long)n);
	}
	tj_free(list);
}

static void test_kill_collect(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "big");
	char *big = tu_path(f.root, "big");
	rng_seed(20261130);
	char buf[1600];
	for (int d = 0; d < 20; d++) {
		char sub[16];
		snprintf(sub, sizeof(sub), "s%02d", d);
		tu_mkdir(big, sub);
		char *sd = tu_path(big, sub);
		for (int i = 0; i < KILL_FILES / 20; i++) {
			size_t len = 40 + rng_next() % 1500;
			for (size_t k = 0; k < len; k++)
				buf[k] = (char)(k % 60 == 59 ? '\n' : 'a' + rng_next() % 26);
			char name[32];
			snprintf(name, sizeof(name), "f%03d.txt", i);
			tu_write(sd, name, buf, len);
		}
		free(sd);
	}
	char *argv[] = {HARVEST_BIN, "collect", "--db", f.db, "--max-files", "5000", "--quiet",
			big, NULL};
	/* 5 kills at 10-200 ms: opening or creating the database, walking, hashing, filling the
	 * MIME cache. */
	int killed = 0, finished = 0;
	for (int k = 0; k < 5; k++) {
		long ms = 10 + (long)(rng_next() % 191);
		pid_t pid = tu_spawn(argv, NULL, NULL);
		tu_sleep_ms(ms);
		kill(pid, SIGKILL);
		int st = tu_wait(pid);
		if (st == 128 + SIGKILL)
			killed++;
		else if (st == 0)
			finished++;
		else
			fail_msg("collect (kill %d at %ld ms): exit %d", k, ms, st);
		char what[64];
		snprintf(what, sizeof(what), "kill %d at %ld ms", k, ms);
		check_after_kill(&f, what);
	}
	/* 3 kills inside the recording transaction: with --no-cache a collect writes to the
	 * database only when it starts (a small run row) and when it records everything at the
	 * end, so the process is killed once it has written a random amount (64 KiB + 0-1 MiB,
	 * the content alone is about 1.5 MB) -- wchar of /proc/PID/io. */
	char *argv_nc[] = {HARVEST_BIN, "collect", "--db", f.db, "--max-files", "5000", "--quiet",
			   "--no-cache", big, NULL};
	int in_tx = 0;
	for (int k = 0; k < 3; k++) {
		unsigned long long threshold = 65536 + rng_next() % (1 << 20);
		pid_t pid = tu_spawn(argv_nc, NULL, NULL);
		char io[64];
		snprintf(io, sizeof(io), "/proc/%d/io", (int)pid);
		double t0 = tu_now_s();
		bool hit = false;
		while (tu_now_s() - t0 < 30) {
			FILE *fp = fopen(io, "r");
			unsigned long long wchar = 0;
			char line[128];
			bool found = false;
			while (fp && fgets(line, sizeof(line), fp))
				if (sscanf(line, "wchar: %llu", &wchar) == 1)
					found = true;
			if (fp)
				fclose(fp);
			if (!found)
				break; /* exited (a zombie has no io), or no /proc: kill now */
			if (wchar >= threshold) {
				hit = true;
				break;
			}
			struct timespec t = {0, 500000};
			nanosleep(&t, NULL);
		}
		kill(pid, SIGKILL);
		int st = tu_wait(pid);
		if (st == 128 + SIGKILL) {
			killed++;
			in_tx += hit;
		} else if (st == 0) {
			finished++;
		} else {
			fail_msg("collect --no-cache (kill at %llu bytes written): exit %d", threshold,
				 st);
		}
		char what[96];
		snprintf(what, sizeof(what), "kill after %llu bytes written", threshold);
		check_after_kill(&f, what);
	}
	assert_true(killed >= 5);
	print_message("collect: %d killed (%d of them while recording), %d finished first\n",
		      killed, in_tx, finished);

	/* A normal collect works on. */
	tu_result r;
	hv(&r, NULL, "collect", "--db", f.db, "--max-files", "5000", big, NULL);
	expect_status(&r, 0, "collect after the kills");
	tj_value *res = json_doc(&r, "collect");
	tu_result_free(&r);
	assert_int_equal(tj_len(tj_get(res, "output_files")), KILL_FILES);
	int64_t id = run_id_of(res);
	tj_free(res);
	tj_value *list = history_json(&f, "runs", (const char *const[]){"--limit", "1", NULL});
	assert_int_equal(tj_int(tj_get(tj_at(list, 0), "run_id")), id);
	assert_int_equal(tj_int(tj_get(tj_at(list, 0), "artifacts")), KILL_FILES);
	assert_int_equal(tj_type(tj_get(tj_at(list, 0), "ended_at")), TJ_STRING);
	tj_free(list);
	check_after_kill(&f, "after the normal collect");
	char rs[32];
	snprintf(rs, sizeof(rs), "%lld", (long long)id);
	tj_value *a = history_json(&f, "artifacts",
				   (const char *const[]){"--run", rs, "--name", "f007.txt", NULL});
	assert_int_equal(tj_len(a), 20);
	const char *p = tj_str(tj_get(tj_at(a, 0), "path"), NULL);
	char *full = tu_path(big, p);
	size_t len;
	char *want = tu_read_file(full, &len);
	assert_non_null(want);
	char aid[32];
	snprintf(aid, sizeof(aid), "%lld", (long long)tj_int(tj_get(tj_at(a, 0), "artifact_id")));
	expect_get(&f, aid, (const unsigned char *)want, len);
	free(want);
	free(full);
	tj_free(a);
	free(big);
	fx_close(&f);
}

/* ---- hostile cases: what FILE is, runs in flight, reused ids, forged contents ------------ */

/* A run writing one file with content text; the id of its only artifact (as text) in id. */
static int64_t one_artifact_run(const fixture *f, const char *dir, const char *text, char id[32])
{
	char script[256];
	snprintf(script, sizeof(script), "printf '%s' > a.txt", text);
	tj_value *res = shell_run(f, dir, script, 0);
	int64_t run = run_id_of(res);
	tj_free(res);
	char rs[32];
	snprintf(rs, sizeof(rs), "%lld", (long long)run);
	tj_value *list = history_json(f, "artifacts", (const char *const[]){"--run", rs, NULL});
	assert_int_equal(tj_len(list), 1);
	snprintf(id, 32, "%lld", (long long)tj_int(tj_get(tj_at(list, 0), "artifact_id")));
	tj_free(list);
	return run;
}

static void expect_file(const char *path, const char *want, const char *what)
{
	size_t len = 0;
	char *got = tu_read_file(path, &len);
	if (!got || len != strlen(want) || memcmp(got, want, len) != 0)
		fail_msg("%s: %s holds '%s', expected '%s'", what, path, got ? got : "(nothing)",
			 want);
	free(got);
}

static void get_to(const fixture *f, tu_result *r, const char *id, const char *out,
		   const char *extra)
{
	if (extra)
		hv(r, NULL, "history", "get", id, "-o", out, extra, "--db", f->db, NULL);
	else
		hv(r, NULL, "history", "get", id, "-o", out, "--db", f->db, NULL);
}

/* -o FILE never replaces what FILE is: devices and FIFOs are written into, a symlink is refused
 * (or followed with --follow), a regular file keeps its inode, mode, owner and hard links. */
static void test_get_output_kinds(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char id[32];
	one_artifact_run(&f, "d", "payload", id);
	tu_result r;

	/* Devices: copies of /dev/null (1,3) and /dev/full (1,7), so no system file is at risk. */
	char *null_dev = tu_path(f.root, "null");
	char *full_dev = tu_path(f.root, "full");
	assert_int_equal(mknod(null_dev, S_IFCHR | 0666, makedev(1, 3)), 0);
	assert_int_equal(mknod(full_dev, S_IFCHR | 0666, makedev(1, 7)), 0);
	get_to(&f, &r, id, null_dev, NULL);
	expect_status(&r, 0, "get -o a null device");
	tu_result_free(&r);
	struct stat sb;
	assert_int_equal(lstat(null_dev, &sb), 0);
	assert_true(S_ISCHR(sb.st_mode));
	assert_int_equal(sb.st_rdev, makedev(1, 3));
	get_to(&f, &r, id, full_dev, NULL);
	expect_status(&r, 1, "get -o a full device");
	expect_one_line_error(&r, "No space left on device", "get -o a full device");
	tu_result_free(&r);
	assert_int_equal(lstat(full_dev, &sb), 0);
	assert_true(S_ISCHR(sb.st_mode));

	/* A FIFO nobody reads: refused at once, not waited on; one with a reader gets the bytes. */
	char *fifo = tu_path(f.root, "fifo");
	assert_int_equal(mkfifo(fifo, 0600), 0);
	get_to(&f, &r, id, fifo, NULL);
	expect_status(&r, 1, "get -o a FIFO without a reader");
	expect_one_line_error(&r, "FIFO", "get -o a FIFO without a reader");
	tu_result_free(&r);
	int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
	assert_true(rfd >= 0);
	get_to(&f, &r, id, fifo, NULL);
	expect_status(&r, 0, "get -o a FIFO with a reader");
	tu_result_free(&r);
	char buf[64];
	ssize_t n = read(rfd, buf, sizeof(buf));
	close(rfd);
	assert_int_equal(n, 7);
	assert_memory_equal(buf, "payload", 7);
	assert_int_equal(lstat(fifo, &sb), 0);
	assert_true(S_ISFIFO(sb.st_mode));

	/* A symlink: refused, both left alone; with --follow its target is written. */
	tu_write(f.root, "target.txt", "old", 3);
	char *target = tu_path(f.root, "target.txt");
	char *link_p = tu_path(f.root, "link.txt");
	assert_int_equal(symlink("target.txt", link_p), 0);
	get_to(&f, &r, id, link_p, NULL);
	expect_status(&r, 1, "get -o a symlink");
	expect_one_line_error(&r, "symbolic link", "get -o a symlink");
	tu_result_free(&r);
	assert_int_equal(lstat(link_p, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	expect_file(target, "old", "after a refused symlink");
	get_to(&f, &r, id, link_p, "--follow");
	expect_status(&r, 0, "get -o a symlink --follow");
	tu_result_free(&r);
	assert_int_equal(lstat(link_p, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	expect_file(target, "payload", "get -o a symlink --follow");

	/* Hard links: written in place, both names see the bytes, inode and mode kept. */
	tu_write(f.root, "h1.txt", "old content, longer", 19);
	char *h1 = tu_path(f.root, "h1.txt");
	char *h2 = tu_path(f.root, "h2.txt");
	assert_int_equal(link(h1, h2), 0);
	assert_int_equal(chmod(h1, 0640), 0);
	struct stat before;
	assert_int_equal(stat(h1, &before), 0);
	get_to(&f, &r, id, h1, NULL);
	expect_status(&r, 0, "get -o a hard-linked file");
	tu_result_free(&r);
	assert_int_equal(stat(h1, &sb), 0);
	assert_int_equal(sb.st_ino, before.st_ino);
	assert_int_equal(sb.st_nlink, 2);
	assert_int_equal(sb.st_mode & 07777, 0640);
	expect_file(h1, "payload", "hard link 1");
	expect_file(h2, "payload", "hard link 2");

	/* Another owner: kept (written in place). */
	tu_write(f.root, "theirs.txt", "old", 3);
	char *theirs = tu_path(f.root, "theirs.txt");
	assert_int_equal(chown(theirs, 65534, 65534), 0);
	assert_int_equal(chmod(theirs, 0604), 0);
	get_to(&f, &r, id, theirs, NULL);
	expect_status(&r, 0, "get -o another user's file");
	tu_result_free(&r);
	assert_int_equal(stat(theirs, &sb), 0);
	assert_int_equal(sb.st_uid, 65534);
	assert_int_equal(sb.st_gid, 65534);
	assert_int_equal(sb.st_mode & 07777, 0604);
	expect_file(theirs, "payload", "another user's file");

	/* Our own file with one link: replaced atomically, its mode kept. */
	tu_write(f.root, "mine.txt", "old", 3);
	char *mine = tu_path(f.root, "mine.txt");
	assert_int_equal(chmod(mine, 0751), 0);
	get_to(&f, &r, id, mine, NULL);
	expect_status(&r, 0, "get -o our own file");
	tu_result_free(&r);
	assert_int_equal(stat(mine, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0751);
	expect_file(mine, "payload", "our own file");

	/* A new file: the mode `>` would give; a 255-byte name works. */
	char name[256];
	memset(name, 'n', 255);
	name[255] = '\0';
	char *longp = tu_path(f.root, name);
	get_to(&f, &r, id, longp, NULL);
	expect_status(&r, 0, "get -o a 255-byte name");
	tu_result_free(&r);
	expect_file(longp, "payload", "a 255-byte name");
	mode_t mask = umask(0);
	umask(mask);
	assert_int_equal(stat(longp, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0666 & ~mask);
	DIR *dd = opendir(f.root);
	assert_non_null(dd);
	for (struct dirent *e; (e = readdir(dd));)
		if (!strncmp(e->d_name, ".hv.", 4))
			fail_msg("get -o left %s behind", e->d_name);
	closedir(dd);

	/* -o - is stdout; a directory is refused. */
	get_to(&f, &r, id, "-", NULL);
	expect_status(&r, 0, "get -o -");
	assert_int_equal(r.out_len, 7);
	assert_memory_equal(r.out, "payload", 7);
	tu_result_free(&r);
	get_to(&f, &r, id, f.root, NULL);
	expect_status(&r, 1, "get -o a directory");
	expect_one_line_error(&r, "Is a directory", "get -o a directory");
	tu_result_free(&r);

	free(null_dev);
	free(full_dev);
	free(fifo);
	free(target);
	free(link_p);
	free(h1);
	free(h2);
	free(theirs);
	free(mine);
	free(longp);
	fx_close(&f);
}

/* ---- runs in flight and prune ---- */

enum { N_FLIGHT = 16 };

/* 16 runs at once while `prune --keep-runs 5` runs in a loop: every run succeeds and is
 * recorded with its artifact (prune never touches a run in progress, nor its snapshot). */
static void test_prune_during_runs(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	/* The database first, so the runs do not also race to create it. */
	tj_free(shell_run(&f, "first", "true", 0));
	pid_t pids[N_FLIGHT];
	char *outs[N_FLIGHT];
	for (int i = 0; i < N_FLIGHT; i++) {
		char dir[16], script[128], out[32];
		snprintf(dir, sizeof(dir), "d%d", i);
		tu_mkdir(f.root, dir);
		char *d = tu_path(f.root, dir);
		snprintf(script, sizeof(script), "sleep 0.%d; echo %d > made.txt; sleep 0.2", 1 + i % 8, i);
		snprintf(out, sizeof(out), "out%d.jsonl", i);
		outs[i] = tu_path(f.root, out);
		char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--dir", d, "--shell", "--", script,
				NULL};
		pids[i] = tu_spawn(argv, outs[i], NULL);
		free(d);
	}
	int left = N_FLIGHT, status[N_FLIGHT];
	bool done[N_FLIGHT] = {false};
	int prunes = 0;
	while (left > 0) {
		tu_result r;
		hv(&r, NULL, "history", "prune", "--keep-runs", "5", "--db", f.db, "--quiet", NULL);
		expect_status(&r, 0, "prune during runs");
		tu_result_free(&r);
		prunes++;
		for (int i = 0; i < N_FLIGHT; i++) {
			int st;
			if (!done[i] && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
				done[i] = true;
				status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
				left--;
			}
		}
	}
	assert_true(prunes > 0);
	for (int i = 0; i < N_FLIGHT; i++) {
		size_t len = 0;
		char *out = tu_read_file(outs[i], &len);
		assert_non_null(out);
		tu_result fake = {.out = out, .out_len = len, .err = (char *)"", .status = status[i]};
		if (status[i] != 0)
			fail_msg("run %d during prunes: exit %d\n%.2000s", i, status[i], out);
		tj_value *res = last_line(&fake, "run during prunes");
		assert_int_equal(tj_type(tj_get(res, "run_id")), TJ_INT);
		assert_int_equal(tj_len(tj_get(res, "output_files")), 1);
		tj_free(res);
		free(out);
		free(outs[i]);
	}
	/* prune then keeps the newest 5, nothing is in flight any more. */
	tu_result r;
	hv(&r, NULL, "history", "prune", "--keep-runs", "5", "--db", f.db, NULL);
	expect_status(&r, 0, "last prune");
	tu_result_free(&r);
	tj_value *list = history_json(&f, "runs", NULL);
	assert_int_equal(tj_len(list), 5);
	tj_free(list);
	expect_integrity_ok(f.db, "after prunes during runs");
	/* Both options together are refused, not given a meaning. */
	expect_usage(&f, "prune", (const char *const[]){"--keep-runs", "1", "--before", "1d", NULL});
	fx_close(&f);
}

/* Ids of pruned runs and artifacts are never given again: a stale id finds nothing. */
static void test_ids_not_reused(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char id1[32], id2[32];
	int64_t r1 = one_artifact_run(&f, "a", "first", id1);
	int64_t r2 = one_artifact_run(&f, "b", "second", id2);
	tj_value *p = history_json(&f, "prune", (const char *const[]){"--before", "2999-01-01T00:00:00Z", NULL});
	assert_int_equal(tj_int(tj_get(p, "runs")), 2);
	tj_free(p);
	char id3[32];
	int64_t r3 = one_artifact_run(&f, "c", "third", id3);
	assert_true(r3 > r2 && r2 > r1);
	assert_true(strtoll(id3, NULL, 10) > strtoll(id2, NULL, 10));
	tu_result r;
	hv(&r, NULL, "history", "get", id1, "--db", f.db, NULL);
	expect_status(&r, 1, "get of a pruned artifact");
	assert_int_equal(r.out_len, 0);
	char want[64];
	snprintf(want, sizeof(want), "no artifact %s", id1);
	expect_one_line_error(&r, want, "get of a pruned artifact");
	tu_result_free(&r);
	char rs[32];
	snprintf(rs, sizeof(rs), "%lld", (long long)r1);
	hv(&r, NULL, "history", "show", rs, "--db", f.db, NULL);
	expect_status(&r, 1, "show of a pruned run");
	snprintf(want, sizeof(want), "no run %s", rs);
	expect_one_line_error(&r, want, "show of a pruned run");
	tu_result_free(&r);
	fx_close(&f);
}

/* --host NAME records the run under that host; `runs` and `artifacts` filter by it. */
static void test_host_filter(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	const char *hosts[] = {"sandbox-a", "sandbox-b", "sandbox-a"};
	for (int i = 0; i < 3; i++) {
		char dir[8];
		snprintf(dir, sizeof(dir), "h%d", i);
		tu_mkdir(f.root, dir);
		tu_write(f.root, i == 1 ? "h1/b.txt" : i ? "h2/a2.txt" : "h0/a.txt", "x", 1);
		char *d = tu_path(f.root, dir);
		tu_result r;
		hv(&r, NULL, "collect", "--db", f.db, "--host", hosts[i], d, NULL);
		expect_status(&r, 0, "collect --host");
		tu_result_free(&r);
		free(d);
	}
	tj_value *v = history_json(&f, "runs", (const char *const[]){"--host", "sandbox-a", NULL});
	assert_int_equal(tj_len(v), 2);
	expect_str(tj_get(tj_at(v, 0), "host"), "sandbox-a", "host");
	tj_free(v);
	v = history_json(&f, "artifacts", (const char *const[]){"--host", "sandbox-b", NULL});
	assert_int_equal(tj_len(v), 1);
	expect_str(tj_get(tj_at(v, 0), "name"), "b.txt", "name");
	tj_free(v);
	v = history_json(&f, "artifacts", (const char *const[]){"--host", "sandbox", NULL});
	assert_int_equal(tj_len(v), 0); /* exact, not a prefix */
	tj_free(v);
	tu_result r;
	hv(&r, NULL, "collect", "--db", f.db, "--host", "", f.root, NULL);
	expect_status(&r, 2, "collect --host ''");
	tu_result_free(&r);
	/* A host that is not UTF-8 text: refused at once on either backend (PostgreSQL's
	 * column is text), by collect, run and the filters alike; nothing recorded. */
	hv(&r, NULL, "collect", "--db", f.db, "--host", "h\xff", f.root, NULL);
	expect_status(&r, 2, "collect --host h\\xff");
	assert_non_null(strstr(r.err, "UTF-8"));
	tu_result_free(&r);
	hv(&r, NULL, "run", "--db", f.db, "--host", "a\nb", "--dir", f.root, "--", "true", NULL);
	expect_status(&r, 125, "run --host a\\nb"); /* run's usage errors are its own: 125 */
	assert_non_null(strstr(r.err, "UTF-8"));
	tu_result_free(&r);
	v = history_json(&f, "runs", NULL);
	assert_int_equal(tj_len(v), 3);
	tj_free(v);
	/* a filter by such a name matches nothing, on either backend (PostgreSQL could not even
	 * compare it) */
	v = history_json(&f, "runs", (const char *const[]){"--host", "h\xff", NULL});
	assert_int_equal(tj_len(v), 0);
	tj_free(v);
	fx_close(&f);
}

/* show 0 is not the newest run: 0 is no run id. A missing artifact says so. */
static void test_show_zero(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char id[32];
	one_artifact_run(&f, "d", "x", id);
	const char *ids[] = {"0", "00", "99999"};
	for (size_t i = 0; i < 3; i++) {
		for (int content = 0; content < 2; content++) {
			tu_result r;
			if (content)
				hv(&r, NULL, "history", "show", ids[i], "--content", "--db", f.db, NULL);
			else
				hv(&r, NULL, "history", "show", ids[i], "--db", f.db, NULL);
			expect_status(&r, 1, ids[i]);
			assert_int_equal(r.out_len, 0);
			char want[64];
			snprintf(want, sizeof(want), "harvest: no run %lld\n",
				 (long long)strtoll(ids[i], NULL, 10));
			if (strstr(r.err, want) != r.err)
				fail_msg("show %s: '%s', expected '%s'", ids[i], r.err, want);
			tu_result_free(&r);
		}
	}
	tu_result r;
	hv(&r, NULL, "history", "get", "0", "--db", f.db, NULL);
	expect_status(&r, 1, "get 0");
	expect_one_line_error(&r, "no artifact 0", "get 0");
	tu_result_free(&r);
	fx_close(&f);
}

/* Bytes changed in the database behind harvest's back are refused, never served. */
static void test_forged_content(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char id[32];
	int64_t run = one_artifact_run(&f, "d", "genuine", id);
	db_exec(&f, "UPDATE contents SET bytes = CAST('forged!' AS BLOB)",
		"UPDATE harvest.contents SET bytes = 'forged!'::bytea");
	char sha[65];
	tu_sha256_hex("genuine", 7, sha);
	char rs[32];
	snprintf(rs, sizeof(rs), "%lld", (long long)run);
	char want[128];
	snprintf(want, sizeof(want), "artifact %s: stored content does not match its SHA-256", id);
	const char *const cmds[][4] = {
		{"get", id, NULL, NULL},
		{"get", sha, NULL, NULL},
		{"show", rs, "--content", NULL},
	};
	for (size_t i = 0; i < 3; i++) {
		const char *base[] = {"history", cmds[i][0], cmds[i][1], "--db", f.db, NULL};
		tu_result r;
		hv2(&r, base, cmds[i] + 2);
		expect_status(&r, 1, cmds[i][0]);
		assert_int_equal(r.out_len, 0);
		expect_one_line_error(&r, i == 1 ? "stored content does not match its SHA-256" : want,
				      cmds[i][0]);
		tu_result_free(&r);
	}
	/* Without --content nothing stored is read: still shown. */
	tj_value *v = history_json(&f, "show", (const char *const[]){rs, NULL});
	tj_free(v);
	fx_close(&f);
}

/* A collect whose recording fails says run_id null, and the history says why that run has no
 * artifacts: it ended "not_recorded". */
static void test_failed_recording(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tj_free(shell_run(&f, "first", "true", 0)); /* the database */
	db_exec(&f,
		"CREATE TRIGGER no_room BEFORE INSERT ON artifacts BEGIN"
		" SELECT RAISE(ABORT, 'database or disk is full'); END",
		"CREATE FUNCTION harvest.no_room() RETURNS trigger LANGUAGE plpgsql AS"
		" $$BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'; END$$;"
		"CREATE TRIGGER no_room BEFORE INSERT ON harvest.artifacts"
		" FOR EACH STATEMENT EXECUTE FUNCTION harvest.no_room()");
	tu_mkdir(f.root, "c");
	tu_write(f.root, "c/x.txt", "x", 1);
	char *c = tu_path(f.root, "c");
	tu_result r;
	hv(&r, NULL, "collect", "--db", f.db, c, NULL);
	expect_status(&r, 1, "collect with a failing recording");
	tj_value *v = json_doc(&r, "collect with a failing recording");
	assert_true(tj_is_null(tj_get(v, "run_id")));
	tj_free(v);
	tu_result_free(&r);
	tj_value *list = history_json(&f, "runs", (const char *const[]){"--limit", "1", NULL});
	const tj_value *o = tj_at(list, 0);
	expect_str(tj_get(o, "end_reason"), "not_recorded", "end_reason");
	assert_false(tj_is_null(tj_get(o, "ended_at")));
	assert_int_equal(tj_int(tj_get(o, "artifacts")), 0);
	tj_free(list);
	free(c);
	fx_close(&f);
}

/* A harvest killed mid-run leaves its run unended only until the next writing open, which ends
 * it as "interrupted". */
static void test_interrupted_run(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "d");
	char *d = tu_path(f.root, "d");
	char *pidf = tu_path(f.root, "cmd.pid");
	char script[PATH_MAX + 64];
	snprintf(script, sizeof(script), "echo $$ > %s; exec sleep 60", pidf);
	char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--dir", d, "--shell", "--", script, NULL};
	pid_t pid = tu_spawn(argv, NULL, NULL);
	/* Until the command runs (its run is recorded before it starts). */
	char *cmdpid = NULL;
	double end = tu_now_s() + 30;
	while (!(cmdpid = tu_read_file(pidf, NULL)) || !strchr(cmdpid, '\n')) {
		free(cmdpid);
		cmdpid = NULL;
		if (tu_now_s() >= end)
			tu_kill_fail(pid, "the command did not write its pid in 30 s: no line in %s",
				     pidf);
		tu_sleep_ms(20);
	}
	kill(pid, SIGKILL);
	assert_int_equal(tu_wait(pid), 128 + SIGKILL);
	kill((pid_t)strtol(cmdpid, NULL, 10), SIGKILL);
	free(cmdpid);
	tj_value *list = history_json(&f, "runs", NULL);
	assert_int_equal(tj_len(list), 1);
	assert_true(tj_is_null(tj_get(tj_at(list, 0), "ended_at"))); /* a query writes nothing */
	tj_free(list);
	tu_result r;
	/* Any writing open of the history (snapshot does not connect to a PostgreSQL one; a prune
	 * that keeps everything does). */
	if (pg_backend())
		hv(&r, NULL, "history", "prune", "--db", f.db, "--keep-runs", "10", NULL);
	else
		hv(&r, NULL, "snapshot", "--db", f.db, d, NULL);
	expect_status(&r, 0, "a writing open after the kill");
	tu_result_free(&r);
	list = history_json(&f, "runs", NULL);
	assert_int_equal(tj_len(list), 1);
	const tj_value *o = tj_at(list, 0);
	assert_false(tj_is_null(tj_get(o, "ended_at")));
	expect_str(tj_get(o, "end_reason"), "interrupted", "end_reason");
	assert_true(tj_is_null(tj_get(o, "exit_code")));
	char rs[32];
	snprintf(rs, sizeof(rs), "%lld", (long long)tj_int(tj_get(o, "run_id")));
	tj_free(list);
	tj_value *show = history_json(&f, "show", (const char *const[]){rs, NULL});
	expect_str(tj_get(show, "end_reason"), "interrupted", "show end_reason");
	tj_free(show);
	/* Ended, it can be pruned now. */
	tj_value *p = history_json(&f, "prune", (const char *const[]){"--keep-runs", "0", NULL});
	assert_int_equal(tj_int(tj_get(p, "runs")), 1);
	tj_free(p);
	free(pidf);
	free(d);
	fx_close(&f);
}

/* SQLite's special names are refused clearly; ./NAME is a file of that name. */
static void test_db_special_names(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "d");
	const char *names[] = {":memory:", "file:x.db", "file:x.db?mode=memory"};
	for (size_t i = 0; i < 3; i++) {
		tu_result r;
		const char *args[] = {"snapshot", "--db", names[i], "d", NULL};
		tu_harvestv(&r, f.root, NULL, args);
		expect_status(&r, 1, names[i]);
		expect_one_line_error(&r, names[i], names[i]);
		expect_one_line_error(&r, i ? "URI" : "in-memory", names[i]);
		tu_result_free(&r);
		const char *q[] = {"history", "runs", "--db", names[i], NULL};
		tu_harvestv(&r, f.root, NULL, q);
		expect_status(&r, 1, names[i]);
		tu_result_free(&r);
	}
	DIR *dd = opendir(f.root);
	assert_non_null(dd);
	for (struct dirent *e; (e = readdir(dd));)
		if (strchr(e->d_name, ':'))
			fail_msg("a refused name left %s behind", e->d_name);
	closedir(dd);
	tu_result r;
	const char *ok[] = {"snapshot", "--db", "./file:x.db", "d", NULL};
	tu_harvestv(&r, f.root, NULL, ok);
	expect_status(&r, 0, "./file:x.db");
	tu_result_free(&r);
	char *made = tu_path(f.root, "file:x.db");
	assert_true(path_exists(made));
	free(made);
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_show_equals_run, tu_cleanup),
		cmocka_unit_test_teardown(test_show_collect, tu_cleanup),
		cmocka_unit_test_teardown(test_runs, tu_cleanup),
		cmocka_unit_test_teardown(test_artifacts, tu_cleanup),
		cmocka_unit_test_teardown(test_artifacts_mime_case, tu_cleanup),
		cmocka_unit_test_teardown(test_get, tu_cleanup),
		cmocka_unit_test_teardown(test_prune, tu_cleanup),
		cmocka_unit_test_teardown(test_far_times, tu_cleanup),
		cmocka_unit_test_teardown(test_missing_db, tu_cleanup),
		cmocka_unit_test_teardown(test_readonly_location_as_nobody, tu_cleanup),
		cmocka_unit_test_teardown(test_db_not_a_file, tu_cleanup),
		cmocka_unit_test_teardown(test_default_location, tu_cleanup),
		cmocka_unit_test_teardown(test_locked_database, tu_cleanup),
		cmocka_unit_test_teardown(test_corrupt_db, tu_cleanup),
		cmocka_unit_test_teardown(test_corrupt_page, tu_cleanup),
		cmocka_unit_test_teardown(test_damaged_cells_hide_rows, tu_cleanup),
		cmocka_unit_test_teardown(test_concurrent_runs, tu_cleanup),
		cmocka_unit_test_teardown(test_kill_collect, tu_cleanup),
		cmocka_unit_test_teardown(test_get_output_kinds, tu_cleanup),
		cmocka_unit_test_teardown(test_prune_during_runs, tu_cleanup),
		cmocka_unit_test_teardown(test_ids_not_reused, tu_cleanup),
		cmocka_unit_test_teardown(test_show_zero, tu_cleanup),
		cmocka_unit_test_teardown(test_forged_content, tu_cleanup),
		cmocka_unit_test_teardown(test_failed_recording, tu_cleanup),
		cmocka_unit_test_teardown(test_interrupted_run, tu_cleanup),
		cmocka_unit_test_teardown(test_db_special_names, tu_cleanup),
		cmocka_unit_test_teardown(test_host_filter, tu_cleanup),
	};
	/* The same scenarios against PostgreSQL: every case that checks the history rather than
	 * the SQLite file (its corruption, locking, location and file permissions). */
	const struct CMUnitTest pg_tests[] = {
		cmocka_unit_test_teardown(test_show_equals_run, tu_cleanup),
		cmocka_unit_test_teardown(test_show_collect, tu_cleanup),
		cmocka_unit_test_teardown(test_runs, tu_cleanup),
		cmocka_unit_test_teardown(test_artifacts, tu_cleanup),
		cmocka_unit_test_teardown(test_artifacts_mime_case, tu_cleanup),
		cmocka_unit_test_teardown(test_get, tu_cleanup),
		cmocka_unit_test_teardown(test_prune, tu_cleanup),
		cmocka_unit_test_teardown(test_far_times, tu_cleanup),
		cmocka_unit_test_teardown(test_concurrent_runs, tu_cleanup),
		cmocka_unit_test_teardown(test_get_output_kinds, tu_cleanup),
		cmocka_unit_test_teardown(test_prune_during_runs, tu_cleanup),
		cmocka_unit_test_teardown(test_ids_not_reused, tu_cleanup),
		cmocka_unit_test_teardown(test_show_zero, tu_cleanup),
		cmocka_unit_test_teardown(test_host_filter, tu_cleanup),
		cmocka_unit_test_teardown(test_kill_collect, tu_cleanup),
		cmocka_unit_test_teardown(test_forged_content, tu_cleanup),
		cmocka_unit_test_teardown(test_failed_recording, tu_cleanup),
		cmocka_unit_test_teardown(test_interrupted_run, tu_cleanup),
	};
	if (pg_backend())
		return cmocka_run_group_tests_name("history_cli_test (postgresql)", pg_tests, NULL,
						   tu_pg_stop);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
