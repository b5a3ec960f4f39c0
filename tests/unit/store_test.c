/* The store: opening and refusing databases, the MIME cache and its 2 s rule, snapshots with
 * binary paths, runs/artifacts/contents, every history filter, prune, concurrent writers and
 * killed writers. */
#include "testutil.h"

#include "harvest/store.h"
#include "harvest/sys/store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NS INT64_C(1000000000)

/* ---- helpers ------------------------------------------------------------------------------ */

typedef struct fixture {
	char *dir;
	char *db;
} fixture;

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	f->dir = tu_mkdtemp();
	f->db = tu_path(f->dir, "harvest.db");
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	tu_rmrf(f->dir);
	free(f->dir);
	free(f->db);
	free(f);
	return 0;
}

static char *read_file(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	size_t r;
	while ((r = fread(buf + n, 1, cap - n, fp)) > 0) {
		n += r;
		if (n == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(fp);
	*len = n;
	return buf;
}

static bool exists(const char *path)
{
	struct stat sb;
	return lstat(path, &sb) == 0;
}

static bool exists_suffix(const char *db, const char *suffix)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s%s", db, suffix);
	return exists(p);
}

static void assert_no_side_files(const char *db)
{
	assert_false(exists_suffix(db, "-wal"));
	assert_false(exists_suffix(db, "-shm"));
	assert_false(exists_suffix(db, "-journal"));
}

/* Opening db must fail with HV_EDB, a message naming it and containing `why`, and leave the file
 * exactly as it was, with no -wal/-shm/-journal next to it; read-only too. */
static void assert_refused(const char *db, const char *why)
{
	size_t len0, len1;
	char *before = read_file(db, &len0);
	assert_non_null(before);
	for (int ro = 0; ro < 2; ro++) {
		hv_store *st = (hv_store *)1;
		assert_int_equal(hv_store_open(&st, db, ro ? HV_STORE_READONLY : 0), HV_EDB);
		assert_null(st);
		assert_non_null(strstr(hv_error_last(), db));
		if (!strstr(hv_error_last(), why))
			fail_msg("message \"%s\" lacks \"%s\"", hv_error_last(), why);
		assert_null(strchr(hv_error_last(), '\n'));
	}
	char *after = read_file(db, &len1);
	assert_non_null(after);
	assert_int_equal(len0, len1);
	assert_memory_equal(before, after, len0);
	assert_no_side_files(db);
	free(before);
	free(after);
}

static int64_t raw_int(const char *db, const char *sql)
{
	sqlite3 *h;
	assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	int64_t v = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(h);
	return v;
}

static void raw_exec(const char *db, const char *sql)
{
	sqlite3 *h;
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	char *err = NULL;
	if (sqlite3_exec(h, sql, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("%s: %s", sql, err);
	sqlite3_close(h);
}

static hv_store *open_ok(const char *db, int flags)
{
	hv_store *st = NULL;
	int rc = hv_store_open(&st, db, flags);
	if (rc != HV_OK)
		fail_msg("open %s: %d %s", db, rc, hv_error_last());
	assert_non_null(st);
	return st;
}

static void check_ok(int rc)
{
	if (rc != HV_OK)
		fail_msg("status %d: %s", rc, hv_error_last());
}

static void make_db(const char *db)
{
	check_ok(hv_store_close(open_ok(db, 0)));
}

/* A database holding one run, labelled "label". */
static void make_db_with_run(const char *db)
{
	hv_store *st = open_ok(db, 0);
	int64_t id;
	hv_run_start rs = {.dir = "/x", .label = "label"};
	check_ok(hv_store_run_begin(st, &rs, &id));
	check_ok(hv_store_close(st));
}


/* ---- opening ------------------------------------------------------------------------------ */

static void test_new_database(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	char *real = realpath(f->db, NULL);
	assert_string_equal(hv_store_path(st), real);
	free(real);
	check_ok(hv_store_integrity_check(st));
	check_ok(hv_store_close(st));

	assert_int_equal(raw_int(f->db, "PRAGMA user_version"), HV_STORE_SCHEMA_VERSION);
	assert_int_equal(raw_int(f->db, "PRAGMA application_id"), HV_STORE_APPLICATION_ID);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM sqlite_master WHERE name IN "
					"('mime_cache','snapshots','snapshot_entries','runs',"
					"'run_outputs','artifacts','contents')"), 7);
	sqlite3 *h;
	assert_int_equal(sqlite3_open(f->db, &h), SQLITE_OK);
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(q, 0), "wal");
	sqlite3_finalize(q);
	sqlite3_close(h);
	struct stat sb;
	assert_int_equal(stat(f->db, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);

	/* Reopening works and keeps the data. */
	st = open_ok(f->db, 0);
	int64_t id;
	hv_run_start rs = {.dir = "/x"};
	check_ok(hv_store_run_begin(st, &rs, &id));
	check_ok(hv_store_close(st));
	st = open_ok(f->db, HV_STORE_READONLY);
	hv_run_iter *it;
	const hv_run_row *row;
	check_ok(hv_store_runs(st, NULL, &it));
	assert_int_equal(hv_run_iter_next(it, &row), HV_OK);
	assert_int_equal(row->run_id, id);
	assert_int_equal(hv_run_iter_next(it, &row), HV_DONE);
	hv_run_iter_free(it);
	/* A read-only handle refuses writes. */
	assert_int_equal(hv_store_run_begin(st, &rs, &id), HV_EUSAGE);
	hv_stat s = {.dev = 1, .ino = 1, .mode = S_IFREG, .mtime_ns = 1, .ctime_ns = 1};
	assert_int_equal(hv_store_mime_put(st, &s, "fp", "text/plain"), HV_EUSAGE);
	check_ok(hv_store_close(st));
	assert_no_side_files(f->db); /* the last connection cleans up after itself */
}

static void test_empty_file_is_new(void **state)
{
	fixture *f = *state;
	tu_write(f->dir, "harvest.db", "", 0);
	/* Read-only: reads as empty, and the file stays empty. */
	hv_store *st = open_ok(f->db, HV_STORE_READONLY);
	hv_artifact_iter *ai;
	const hv_artifact_row *ar;
	check_ok(hv_store_artifacts(st, NULL, &ai));
	assert_int_equal(hv_artifact_iter_next(ai, &ar), HV_DONE);
	hv_artifact_iter_free(ai);
	check_ok(hv_store_close(st));
	struct stat sb;
	assert_int_equal(stat(f->db, &sb), 0);
	assert_int_equal(sb.st_size, 0);
	assert_no_side_files(f->db);

	make_db(f->db);
	assert_int_equal(raw_int(f->db, "PRAGMA user_version"), HV_STORE_SCHEMA_VERSION);
	assert_int_equal(raw_int(f->db, "PRAGMA application_id"), HV_STORE_APPLICATION_ID);
}

static void test_missing_readonly(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, HV_STORE_READONLY);
	hv_run_iter *it;
	const hv_run_row *row;
	check_ok(hv_store_runs(st, NULL, &it));
	assert_int_equal(hv_run_iter_next(it, &row), HV_DONE);
	hv_run_iter_free(it);
	void *data;
	size_t len;
	assert_int_equal(hv_store_content_get(st, "00000000000000000000000000000000"
						  "00000000000000000000000000000000", &data, &len),
			 HV_ENOTFOUND);
	check_ok(hv_store_close(st));
	assert_false(exists(f->db));
	assert_no_side_files(f->db);
	/* An explicit path in a missing directory is not created. */
	char *deep = tu_path(f->dir, "no/such/harvest.db");
	hv_store *st2 = NULL;
	assert_int_equal(hv_store_open(&st2, deep, 0), HV_EDB);
	assert_non_null(strstr(hv_error_last(), deep));
	free(deep);
}

/* A database path that is a dangling symlink creates the file the link points to (relative
 * to the link's directory), as sqlite3 and touch do; the link stays a link. A symlink loop
 * is a one-line error. */
static void test_dangling_symlink_path(void **state)
{
	fixture *f = *state;
	tu_mkdir(f->dir, "sub");
	char *link = tu_path(f->dir, "link.db");
	assert_int_equal(symlink("sub/real.db", link), 0);
	hv_store *st = open_ok(link, 0);
	check_ok(hv_store_close(st));
	char *real = tu_path(f->dir, "sub/real.db");
	struct stat sb;
	assert_int_equal(lstat(real, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	assert_int_equal(lstat(link, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	assert_int_equal(raw_int(real, "PRAGMA application_id"), HV_STORE_APPLICATION_ID);
	st = open_ok(link, HV_STORE_READONLY); /* and it opens through the link from now on */
	check_ok(hv_store_close(st));

	char *loop = tu_path(f->dir, "loop.db");
	assert_int_equal(symlink("loop.db", loop), 0);
	assert_int_equal(hv_store_open(&st, loop, 0), HV_EDB);
	assert_null(st);
	assert_non_null(strstr(hv_error_last(), loop));
	assert_non_null(strstr(hv_error_last(), "symbolic links"));
	free(loop);
	free(real);
	free(link);
}

static void test_default_path(void **state)
{
	fixture *f = *state;
	char *saved_db = getenv("HARVEST_DB") ? strdup(getenv("HARVEST_DB")) : NULL;
	char *saved_xdg = getenv("XDG_DATA_HOME") ? strdup(getenv("XDG_DATA_HOME")) : NULL;
	char *saved_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
	char *p, expect[4096];

	setenv("HARVEST_DB", "/some/where.db", 1);
	check_ok(hv_store_default_path(&p));
	assert_string_equal(p, "/some/where.db");
	free(p);

	unsetenv("HARVEST_DB");
	char *xdg = tu_path(f->dir, "xdg");
	setenv("XDG_DATA_HOME", xdg, 1);
	check_ok(hv_store_default_path(&p));
	snprintf(expect, sizeof(expect), "%s/harvest/harvest.db", xdg);
	assert_string_equal(p, expect);
	free(p);
	/* Opening the default creates the directories, the harvest one with mode 0700. */
	hv_store *st = open_ok(NULL, 0);
	check_ok(hv_store_close(st));
	assert_true(exists(expect));
	snprintf(expect, sizeof(expect), "%s/harvest", xdg);
	struct stat sb;
	assert_int_equal(stat(expect, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0700);

	setenv("XDG_DATA_HOME", "relative/dir", 1); /* ignored, as the XDG spec says */
	setenv("HOME", f->dir, 1);
	check_ok(hv_store_default_path(&p));
	snprintf(expect, sizeof(expect), "%s/.local/share/harvest/harvest.db", f->dir);
	assert_string_equal(p, expect);
	free(p);
	unsetenv("XDG_DATA_HOME");
	check_ok(hv_store_default_path(&p));
	assert_string_equal(p, expect);
	free(p);

	if (saved_db)
		setenv("HARVEST_DB", saved_db, 1);
	if (saved_xdg)
		setenv("XDG_DATA_HOME", saved_xdg, 1);
	if (saved_home)
		setenv("HOME", saved_home, 1);
	free(saved_db);
	free(saved_xdg);
	free(saved_home);
	free(xdg);
}

static void test_refuse_random_bytes(void **state)
{
	fixture *f = *state;
	unsigned char junk[8192];
	unsigned seed = 12345;
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)(rand_r(&seed) >> 7);
	tu_write(f->dir, "harvest.db", junk, sizeof(junk));
	assert_refused(f->db, "not a SQLite database");
	/* Shorter than a header, and a header-like prefix followed by junk. */
	tu_write(f->dir, "harvest.db", "SQLite format 3", 15);
	assert_refused(f->db, "not a SQLite database");
}

static void test_refuse_text_file(void **state)
{
	fixture *f = *state;
	const char *text = "just some notes\nnot a database at all\n";
	tu_write(f->dir, "harvest.db", text, strlen(text));
	assert_refused(f->db, "not a SQLite database");
}

static void test_refuse_directory(void **state)
{
	fixture *f = *state;
	tu_mkdir(f->dir, "harvest.db");
	hv_store *st = NULL;
	assert_int_equal(hv_store_open(&st, f->db, 0), HV_EDB);
	assert_non_null(strstr(hv_error_last(), "not a harvest database"));
	assert_int_equal(hv_store_open(&st, f->db, HV_STORE_READONLY), HV_EDB);
}

static void test_refuse_foreign_sqlite(void **state)
{
	fixture *f = *state;
	raw_exec(f->db, "CREATE TABLE notes(x TEXT); INSERT INTO notes VALUES ('mine');");
	assert_refused(f->db, "not a harvest database");
	/* A foreign database in WAL mode, and one with a user_version but no harvest id. */
	raw_exec(f->db, "PRAGMA journal_mode = WAL; PRAGMA user_version = 1;");
	assert_refused(f->db, "not a harvest database");
	/* An empty SQLite database of someone else (no tables, but a header): refused too. */
	unlink(f->db);
	raw_exec(f->db, "PRAGMA user_version = 7;");
	assert_refused(f->db, "not a harvest database");
}

/* Our application id but tables and no schema version: harvest writes the schema and its
 * version in one transaction, so some other program made these tables. Refused before the
 * open switches the file to WAL (it stays in rollback-journal mode, byte for byte). */
static void test_refuse_tables_without_version(void **state)
{
	fixture *f = *state;
	char sql[128];
	snprintf(sql, sizeof(sql), "PRAGMA application_id = %d; CREATE TABLE runs(x);",
		 HV_STORE_APPLICATION_ID);
	raw_exec(f->db, sql);
	assert_int_equal(raw_int(f->db, "PRAGMA user_version"), 0);
	assert_refused(f->db, "tables without a schema version");
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM sqlite_master"), 1);
}

static void test_refuse_newer_schema(void **state)
{
	fixture *f = *state;
	make_db(f->db);
	raw_exec(f->db, "PRAGMA user_version = 99;");
	assert_refused(f->db, "newer harvest");

	/* The same when the new version is still in the -wal file only (the main file's header
	 * still says 1): the check through SQLite catches it. */
	raw_exec(f->db, "PRAGMA user_version = 1;");
	sqlite3 *h;
	assert_int_equal(sqlite3_open(f->db, &h), SQLITE_OK);
	assert_int_equal(sqlite3_exec(h, "PRAGMA wal_autocheckpoint = 0; PRAGMA user_version = 42;",
				      NULL, NULL, NULL), SQLITE_OK);
	hv_store *st = NULL;
	assert_int_equal(hv_store_open(&st, f->db, 0), HV_EDB);
	assert_non_null(strstr(hv_error_last(), "newer harvest"));
	assert_int_equal(hv_store_open(&st, f->db, HV_STORE_READONLY), HV_EDB);
	sqlite3_close(h);
}

static void test_refuse_corrupt(void **state)
{
	fixture *f = *state;
	make_db_with_run(f->db);
	hv_store *st = NULL;
	assert_no_side_files(f->db);
	/* Garbage over the schema page's b-tree (after the 100-byte file header). */
	int fd = open(f->db, O_WRONLY);
	assert_true(fd >= 0);
	unsigned char junk[512];
	memset(junk, 0xa5, sizeof(junk));
	assert_int_equal(pwrite(fd, junk, sizeof(junk), 100), (ssize_t)sizeof(junk));
	close(fd);
	size_t len0, len1;
	char *before = read_file(f->db, &len0);
	assert_int_equal(hv_store_open(&st, f->db, 0), HV_EDB);
	assert_non_null(strstr(hv_error_last(), f->db));
	assert_non_null(strstr(hv_error_last(), "corrupt"));
	assert_int_equal(hv_store_open(&st, f->db, HV_STORE_READONLY), HV_EDB);
	char *after = read_file(f->db, &len1);
	assert_int_equal(len0, len1);
	assert_memory_equal(before, after, len0);
	assert_no_side_files(f->db);
	free(before);
	free(after);
}

/* In a child running as nobody: a writing open of the root-owned 0444 database fails with
 * HV_EDB naming it read-only; a read-only open works and reads the run. */
static int nobody_readonly_file(void *arg)
{
	const char *db = arg;
	hv_store *st = NULL;
	if (hv_store_open(&st, db, 0) != HV_EDB)
		return 10;
	if (!strstr(hv_error_last(), db) || !strstr(hv_error_last(), "read-only"))
		return 11;
	if (hv_store_open(&st, db, HV_STORE_READONLY) != HV_OK) {
		fprintf(stderr, "read-only open: %s\n", hv_error_last());
		return 12;
	}
	hv_run_iter *it;
	const hv_run_row *row;
	if (hv_store_runs(st, NULL, &it) != HV_OK)
		return 13;
	int rc = hv_run_iter_next(it, &row) == HV_OK && row->label_len == 5 &&
			 memcmp(row->label, "label", 5) == 0
		 ? 0
		 : 14;
	hv_run_iter_free(it);
	hv_store_close(st);
	return rc;
}

static int nobody_write_open(void *arg)
{
	hv_store *st = NULL;
	if (hv_store_open(&st, arg, 0) != HV_EDB)
		return 20;
	return strstr(hv_error_last(), "read-only") ? 0 : 21;
}

/* A harvest database someone switched out of WAL mode (a copy, a restore, the sqlite3 shell)
 * is fully checked by the writing open that adopts it: a damaged table page, which the open
 * itself never reads, is found and the file is refused unchanged, still in rollback-journal
 * mode. The same file undamaged is adopted and switched back to WAL. */
static void test_refuse_corrupt_adopted(void **state)
{
	fixture *f = *state;
	make_db_with_run(f->db);
	hv_store *st = NULL;
	raw_exec(f->db, "PRAGMA journal_mode = DELETE;");
	st = open_ok(f->db, 0);
	check_ok(hv_store_close(st));
	size_t len0, len1;
	char *wal = read_file(f->db, &len0);
	assert_int_equal(wal[18], 2); /* file format: WAL */
	free(wal);

	raw_exec(f->db, "PRAGMA journal_mode = DELETE;");
	int64_t page = raw_int(f->db, "SELECT rootpage FROM sqlite_master WHERE name = 'runs'");
	int64_t page_size = raw_int(f->db, "PRAGMA page_size");
	assert_true(page > 1);
	int fd = open(f->db, O_WRONLY);
	assert_true(fd >= 0);
	unsigned char junk[64];
	memset(junk, 0xa5, sizeof(junk));
	assert_int_equal(pwrite(fd, junk, sizeof(junk), (page - 1) * page_size),
			 (ssize_t)sizeof(junk));
	close(fd);
	char *before = read_file(f->db, &len0);
	assert_int_equal(before[18], 1); /* rollback journal */
	assert_int_equal(hv_store_open(&st, f->db, 0), HV_EDB);
	assert_null(st);
	assert_non_null(strstr(hv_error_last(), f->db));
	assert_non_null(strstr(hv_error_last(), "database is corrupt"));
	assert_null(strchr(hv_error_last(), '\n'));
	char *after = read_file(f->db, &len1);
	assert_int_equal(len0, len1);
	assert_memory_equal(before, after, len0);
	assert_no_side_files(f->db);
	free(before);
	free(after);
}

/* A database found corrupt by one statement is written no more by that store: the MIME cache
 * answers it held (flushed at close) are dropped, and later ones are not kept. */
static void test_damaged_not_written(void **state)
{
	fixture *f = *state;
	make_db_with_run(f->db);
	tu_damage_table(f->db, "runs");
	size_t len0, len1;
	char *before = read_file(f->db, &len0);
	hv_store *st = open_ok(f->db, 0);
	hv_stat old = {.dev = 1, .ino = 2, .mode = S_IFREG | 0644, .size = 3,
		       .mtime_ns = 1000000000, .ctime_ns = 1000000000};
	check_ok(hv_store_mime_put_sha(st, &old, "fp", "text/plain", NULL));
	int64_t id = 0;
	hv_run_start rs = {.dir = "/x"};
	assert_int_equal(hv_store_run_begin(st, &rs, &id), HV_EDB);
	assert_non_null(strstr(hv_error_last(), "database is corrupt"));
	old.ino = 3;
	check_ok(hv_store_mime_put_sha(st, &old, "fp", "text/plain", NULL));
	hv_store_close(st);
	char *after = read_file(f->db, &len1);
	assert_int_equal(len0, len1);
	assert_memory_equal(before, after, len0);
	free(before);
	free(after);
}

static void test_refuse_readonly(void **state)
{
	fixture *f = *state;
	make_db_with_run(f->db);
	assert_int_equal(chmod(f->db, 0444), 0);
	size_t len0, len1;
	char *before = read_file(f->db, &len0);
	assert_int_equal(tu_as_nobody(nobody_readonly_file, f->db), 0);
	/* The same as this process (root in CI, whom access(2) lets write anything): a file no
	 * one may write is read-only to it too, and a read leaves no -wal/-shm behind. */
	assert_int_equal(nobody_readonly_file(f->db), 0);
	assert_no_side_files(f->db);
	hv_store *st = NULL;
	assert_int_equal(hv_store_open(&st, f->db, 0), HV_EDB);
	assert_non_null(strstr(hv_error_last(), "mode 0444: no one may write it"));
	char *after = read_file(f->db, &len1);
	assert_int_equal(len0, len1);
	assert_memory_equal(before, after, len0);
	free(before);
	free(after);

	/* Another user reading a database in a directory both may write leaves no -wal/-shm
	 * files of its own there, which the owner's next write could not use. */
	char *shared = tu_path(f->dir, "shared");
	assert_int_equal(mkdir(shared, 0777), 0);
	assert_int_equal(chmod(shared, 0777), 0);
	char *db3 = tu_path(shared, "harvest.db");
	make_db_with_run(db3);
	assert_int_equal(chmod(db3, 0644), 0);
	assert_int_equal(tu_as_nobody(nobody_readonly_file, db3), 0);
	assert_no_side_files(db3);
	make_db_with_run(db3); /* the owner writes again */
	free(db3);
	free(shared);

	/* A writable file in a read-only directory (no room for -wal/-shm): refused too. */
	char *sub = tu_path(f->dir, "ro");
	assert_int_equal(mkdir(sub, 0755), 0);
	char *db2 = tu_path(sub, "harvest.db");
	make_db(db2);
	assert_int_equal(chown(db2, 65534, 65534), 0);
	assert_int_equal(chmod(db2, 0600), 0);
	assert_int_equal(tu_as_nobody(nobody_write_open, db2), 0);
	assert_no_side_files(db2);
	free(db2);
	free(sub);
}

/* ---- MIME cache ----------------------------------------------------------------------------- */

static char *lookup(hv_store *st, const hv_stat *s, const char *fp)
{
	char *mime = (char *)1;
	check_ok(hv_store_mime_lookup(st, s, fp, &mime));
	return mime;
}

static void assert_hit(hv_store *st, const hv_stat *s, const char *fp, const char *expect)
{
	char *m = lookup(st, s, fp);
	if (!m)
		fail_msg("cache miss, expected %s", expect);
	assert_string_equal(m, expect);
	free(m);
}

static void assert_miss(hv_store *st, const hv_stat *s, const char *fp)
{
	char *m = lookup(st, s, fp);
	if (m)
		fail_msg("cache hit (%s), expected a miss", m);
}

static void test_mime_cache(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	int64_t now = hv_store_now_ns();
	const hv_stat base = {.dev = 2049, .ino = 77, .size = 1234, .mode = S_IFREG | 0644,
			      .mtime_ns = now - 10 * NS, .ctime_ns = now - 9 * NS};
	const char *fp = "magic 5.44 db=/usr/share/misc/magic.mgc flags=0x10";
	assert_miss(st, &base, fp);
	check_ok(hv_store_mime_put(st, &base, fp, "image/png"));
	assert_miss(st, &base, fp); /* not written yet: puts are batched */
	check_ok(hv_store_flush(st));
	assert_hit(st, &base, fp, "image/png");

	hv_stat s = base;
	s.dev++;
	assert_miss(st, &s, fp);
	s = base;
	s.ino++;
	assert_miss(st, &s, fp);
	s = base;
	s.size++;
	assert_miss(st, &s, fp);
	s = base;
	s.mtime_ns++;
	assert_miss(st, &s, fp);
	s = base;
	s.ctime_ns--;
	assert_miss(st, &s, fp);
	s = base;
	s.mode = S_IFLNK | 0777;
	assert_miss(st, &s, fp);
	assert_miss(st, &base, "magic 5.45 db=/usr/share/misc/magic.mgc flags=0x10");
	s = base;
	s.mode = S_IFREG | 0600; /* permission bits are not the file's type */
	assert_hit(st, &s, fp, "image/png");
	assert_hit(st, &base, fp, "image/png");

	/* Replacing the answer for the inode. */
	s = base;
	s.size = 99;
	check_ok(hv_store_mime_put(st, &s, fp, "text/plain"));
	check_ok(hv_store_flush(st));
	assert_hit(st, &s, fp, "text/plain");
	assert_miss(st, &base, fp);

	/* The digest stored with an answer comes back with it, and only with a hit. */
	char sha[65], *got = NULL;
	const char digest[] = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";
	check_ok(hv_store_mime_lookup_sha(st, &s, fp, &got, sha));
	assert_string_equal(got, "text/plain");
	assert_string_equal(sha, ""); /* stored without one */
	free(got);
	check_ok(hv_store_mime_put_sha(st, &s, fp, "text/plain", digest));
	check_ok(hv_store_flush(st));
	check_ok(hv_store_mime_lookup_sha(st, &s, fp, &got, sha));
	assert_string_equal(sha, digest);
	free(got);
	check_ok(hv_store_mime_lookup_sha(st, &base, fp, &got, sha));
	assert_null(got);
	assert_string_equal(sha, "");

	/* The 2 s rule: answers for files not yet 2 s old (by mtime or by ctime) are never
	 * reused, whatever else matches. Aged 1 s by mtime, 1.5 s by ctime (from a clock read
	 * right before each put), and in the future. */
	hv_stat young = {.dev = 2049, .ino = 500, .size = 5, .mode = S_IFREG | 0644};
	int64_t mt[3], ct[3];
	for (int i = 0; i < 3; i++) {
		int64_t t = hv_store_now_ns();
		mt[i] = i == 0 ? t - NS : i == 1 ? t - 10 * NS : t + 60 * NS;
		ct[i] = i == 0 ? t - 10 * NS : i == 1 ? t - NS - NS / 2 : t + 60 * NS;
		young.ino = 500 + (uint64_t)i;
		young.mtime_ns = mt[i];
		young.ctime_ns = ct[i];
		check_ok(hv_store_mime_put(st, &young, fp, "text/plain"));
	}
	check_ok(hv_store_flush(st));
	for (int i = 0; i < 3; i++) {
		young.ino = 500 + (uint64_t)i;
		young.mtime_ns = mt[i];
		young.ctime_ns = ct[i];
		assert_miss(st, &young, fp);
	}
	check_ok(hv_store_close(st));
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM mime_cache WHERE ino >= 500"), 0);
	/* Even a racy row that got into the table is not a hit (the rule is on lookup too). */
	raw_exec(f->db, "INSERT INTO mime_cache(dev, ino, ftype, size, mtime_ns, ctime_ns,"
			" fingerprint, mime_type, cached_at_ns) VALUES (2049, 600, 32768, 5,"
			" 1000000000000, 1000000000000, 'fp', 'text/x-racy', 1000000001000)");
	st = open_ok(f->db, 0);
	hv_stat racy = {.dev = 2049, .ino = 600, .size = 5, .mode = S_IFREG,
			.mtime_ns = 1000000000000, .ctime_ns = 1000000000000};
	assert_miss(st, &racy, "fp");
	/* A row cached 2.5 s after mtime/ctime is a hit. */
	raw_exec(f->db, "UPDATE mime_cache SET cached_at_ns = 1002500000000 WHERE ino = 600");
	assert_hit(st, &racy, "fp", "text/x-racy");

	/* Many puts: flushed in batches on their own, the rest on close. */
	for (uint64_t i = 0; i < 1000; i++) {
		hv_stat m = base;
		m.ino = 10000 + i;
		check_ok(hv_store_mime_put(st, &m, fp, "application/octet-stream"));
	}
	check_ok(hv_store_close(st));
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM mime_cache WHERE ino >= 10000"),
			 1000);
	st = open_ok(f->db, HV_STORE_READONLY);
	s = base;
	s.ino = 10999;
	assert_hit(st, &s, fp, "application/octet-stream");
	check_ok(hv_store_close(st));
}

/* ---- snapshots ---------------------------------------------------------------------------- */

static int cmp_paths(const void *a, const void *b)
{
	const char *const *x = a, *const *y = b;
	return hv_store_path_cmp(*x, strlen(*x), *y, strlen(*y));
}

static hv_stat stat_for(size_t i, int64_t base)
{
	hv_stat s = {.dev = 2049, .ino = 1000 + i, .size = i * 3, .mode = S_IFREG | 0644,
		     .mtime_ns = base - (int64_t)i, .ctime_ns = base - 2 * (int64_t)i};
	return s;
}

static void assert_stat_eq(const hv_stat *a, const hv_stat *b)
{
	assert_int_equal(a->dev, b->dev);
	assert_int_equal(a->ino, b->ino);
	assert_int_equal(a->size, b->size);
	assert_int_equal(a->mode, b->mode);
	assert_int_equal(a->mtime_ns, b->mtime_ns);
	assert_int_equal(a->ctime_ns, b->ctime_ns);
}

static void test_path_cmp(void **state)
{
	(void)state;
	/* Walk order: a directory, then what is inside it, then its siblings named after it. */
	assert_true(hv_store_path_cmp("a", 1, "a/b", 3) < 0);
	assert_true(hv_store_path_cmp("a/b", 3, "a.txt", 5) < 0);
	assert_true(hv_store_path_cmp("a/z", 3, "a0", 2) < 0);
	assert_true(hv_store_path_cmp("a.txt", 5, "a/b", 3) > 0);
	assert_true(hv_store_path_cmp("\xff", 1, "a", 1) > 0);
	assert_int_equal(hv_store_path_cmp("x/y", 3, "x/y", 3), 0);
}

static void test_snapshot_roundtrip(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	const char *paths[] = {
		"z", "a.txt", "a", "a/b", "a/b/c", "a b", "bad\xff\xfe" "name", "new\nline",
		"\x01" "ctl", "caf\xc3\xa9", "a/b.txt", "a0", "dir/sub/deep/er", "dir", "dir/sub",
		"dir/sub/deep", "-", "~",
	};
	size_t n = sizeof(paths) / sizeof(paths[0]);
	hv_snapshot_writer *w;
	check_ok(hv_store_snapshot_begin(st, "/abs/root\xff", &w));
	int64_t created = hv_snapshot_writer_created_at(w);
	assert_true(llabs(created - hv_store_now_ns()) < 5 * NS);
	char sha[65];
	tu_sha256_hex("x", 1, sha);
	for (size_t i = 0; i < n; i++) {
		hv_stat s = stat_for(i, created);
		check_ok(hv_snapshot_writer_add(w, paths[i], strlen(paths[i]), &s,
						i % 3 == 0 ? sha : NULL));
	}
	int64_t id = 0;
	check_ok(hv_snapshot_writer_finish(w, &id));
	assert_true(id > 0);

	hv_snapshot *sn;
	check_ok(hv_store_snapshot_open(st, id, &sn));
	assert_int_equal(hv_snapshot_id(sn), id);
	size_t rlen;
	const char *root = hv_snapshot_root(sn, &rlen);
	assert_int_equal(rlen, 10);
	assert_memory_equal(root, "/abs/root\xff", 10);
	assert_int_equal(hv_snapshot_created_at(sn), created);
	assert_int_equal(hv_snapshot_entries(sn), n);

	const char *sorted[sizeof(paths) / sizeof(paths[0])];
	memcpy(sorted, paths, sizeof(paths));
	qsort(sorted, n, sizeof(sorted[0]), cmp_paths);
	const hv_snapshot_entry *e;
	for (size_t k = 0; k < n; k++) {
		assert_int_equal(hv_snapshot_next(sn, &e), HV_OK);
		assert_int_equal(e->path_len, strlen(sorted[k]));
		assert_memory_equal(e->path, sorted[k], e->path_len);
		assert_int_equal(e->path[e->path_len], '\0');
		size_t i = 0;
		while (strcmp(paths[i], sorted[k]) != 0)
			i++;
		hv_stat s = stat_for(i, created);
		assert_stat_eq(&e->st, &s);
		if (i % 3 == 0)
			assert_string_equal(e->sha256, sha);
		else
			assert_null(e->sha256);
	}
	assert_int_equal(hv_snapshot_next(sn, &e), HV_DONE);
	assert_int_equal(hv_snapshot_next(sn, &e), HV_DONE);

	hv_snapshot_entry le;
	check_ok(hv_snapshot_lookup(sn, "bad\xff\xfe" "name", 9, &le));
	assert_int_equal(le.path_len, 9);
	assert_memory_equal(le.path, "bad\xff\xfe" "name", 9);
	hv_stat s6 = stat_for(6, created);
	assert_stat_eq(&le.st, &s6);
	assert_string_equal(le.sha256, sha);
	check_ok(hv_snapshot_lookup(sn, "new\nline", 8, &le));
	assert_int_equal(le.path_len, 8);
	assert_memory_equal(le.path, "new\nline", 8);
	assert_null(le.sha256);
	check_ok(hv_snapshot_lookup(sn, "dir/sub/deep/er", 15, &le));
	assert_int_equal(hv_snapshot_lookup(sn, "dir/sub/deep/e", 14, &le), HV_ENOTFOUND);
	assert_int_equal(hv_snapshot_lookup(sn, "a\0b", 3, &le), HV_ENOTFOUND); /* not "a/b" */
	hv_snapshot_close(sn);

	assert_int_equal(hv_store_snapshot_open(st, id + 100, &sn), HV_ENOTFOUND);
	assert_non_null(strstr(hv_error_last(), "no snapshot"));

	/* Racy: mtime or ctime within 2 s before the snapshot time, or after it. */
	hv_stat r = {.mtime_ns = created - 10 * NS, .ctime_ns = created - 10 * NS};
	assert_false(hv_store_stat_is_racy(&r, created));
	r.mtime_ns = created - NS;
	assert_true(hv_store_stat_is_racy(&r, created));
	r.mtime_ns = created - 10 * NS;
	r.ctime_ns = created + NS;
	assert_true(hv_store_stat_is_racy(&r, created));
	check_ok(hv_store_close(st));
}

static void test_snapshot_large_and_interleaved(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	hv_snapshot_writer *w;
	check_ok(hv_store_snapshot_begin(st, "/big", &w));
	int64_t created = hv_snapshot_writer_created_at(w);
	const size_t n = 10000; /* more than a batch and many read pages */
	char p[64];
	for (size_t i = 0; i < n; i++) {
		snprintf(p, sizeof(p), "d%zu/f%05zu", i % 7, (i * 7919) % n);
		hv_stat s = stat_for(i, created);
		check_ok(hv_snapshot_writer_add(w, p, strlen(p), &s, NULL));
	}
	int64_t id;
	check_ok(hv_snapshot_writer_finish(w, &id));

	/* Iterating while writing through the same handle (the collector caches MIME answers as
	 * it compares): entries come in pages, so the writes are not blocked. */
	hv_snapshot *sn;
	check_ok(hv_store_snapshot_open(st, id, &sn));
	const hv_snapshot_entry *e;
	size_t count = 0;
	char prev[64] = "";
	size_t prev_len = 0;
	int64_t now = hv_store_now_ns();
	while (hv_snapshot_next(sn, &e) == HV_OK) {
		if (count)
			assert_true(hv_store_path_cmp(prev, prev_len, e->path, e->path_len) < 0);
		memcpy(prev, e->path, e->path_len);
		prev_len = e->path_len;
		hv_stat m = {.dev = 9, .ino = count, .mode = S_IFREG, .mtime_ns = now - 5 * NS,
			     .ctime_ns = now - 5 * NS};
		check_ok(hv_store_mime_put(st, &m, "fp", "text/plain"));
		count++;
	}
	assert_int_equal(count, n);
	hv_snapshot_close(sn);
	check_ok(hv_store_flush(st));
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM mime_cache WHERE dev = 9"), n);

	/* An unfinished snapshot is invisible; abort removes it. */
	check_ok(hv_store_snapshot_begin(st, "/unfinished", &w));
	hv_stat s = stat_for(1, created);
	check_ok(hv_snapshot_writer_add(w, "x", 1, &s, NULL));
	int64_t unfinished = raw_int(f->db, "SELECT max(id) FROM snapshots");
	assert_int_equal(raw_int(f->db, "SELECT complete FROM snapshots ORDER BY id DESC"), 0);
	assert_int_equal(hv_store_snapshot_open(st, unfinished, &sn), HV_ENOTFOUND);
	check_ok(hv_snapshot_writer_abort(w));
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM snapshots"), 1);

	/* A path added twice fails the snapshot, which is then gone. */
	check_ok(hv_store_snapshot_begin(st, "/dup", &w));
	check_ok(hv_snapshot_writer_add(w, "same", 4, &s, NULL));
	check_ok(hv_snapshot_writer_add(w, "same", 4, &s, NULL));
	assert_int_equal(hv_snapshot_writer_finish(w, &id), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "same"));
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM snapshots"), 1);
	/* Bad arguments. */
	check_ok(hv_store_snapshot_begin(st, "/bad", &w));
	assert_int_equal(hv_snapshot_writer_add(w, "", 0, &s, NULL), HV_EUSAGE);
	assert_int_equal(hv_snapshot_writer_add(w, "x", 1, &s, "nothex"), HV_EUSAGE);
	check_ok(hv_snapshot_writer_abort(w));

	/* Deleting the big one removes its entries. */
	int64_t big = raw_int(f->db, "SELECT min(id) FROM snapshots");
	check_ok(hv_store_snapshot_delete(st, big));
	assert_int_equal(hv_store_snapshot_delete(st, big), HV_ENOTFOUND);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM snapshot_entries"), 0);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM snapshots"), 0);
	check_ok(hv_store_integrity_check(st));
	check_ok(hv_store_close(st));
}

/* ---- runs, artifacts, contents -------------------------------------------------------------- */

#include <openssl/evp.h>

typedef struct art {
	const char *path, *name, *mime, *content;
	bool store;
	char sha[65];
} art;

static int64_t record_run(hv_store *st, const char *label, const char *cmd, int64_t started,
			  art *arts, size_t n)
{
	int64_t id;
	hv_run_start rs = {.label = label, .command_json = cmd, .dir = "/work/dir",
			   .started_at_ns = started};
	check_ok(hv_store_run_begin(st, &rs, &id));
	hv_artifact_in in[16];
	for (size_t i = 0; i < n; i++) {
		tu_sha256_hex(arts[i].content, strlen(arts[i].content), arts[i].sha);
		in[i] = (hv_artifact_in){
			.path = arts[i].path, .path_len = strlen(arts[i].path),
			.name = arts[i].name, .name_len = strlen(arts[i].name),
			.mime_type = arts[i].mime, .size = strlen(arts[i].content),
			.sha256 = arts[i].sha,
			.content = arts[i].store ? arts[i].content : NULL,
			.content_len = arts[i].store ? strlen(arts[i].content) : 0,
		};
	}
	hv_run_end end = {.has_exit_code = cmd != NULL, .exit_code = 3, .duration_ms = 42,
			  .stdout_data = "out\xff", .stdout_len = 4, .stderr_data = "e\nrr",
			  .stderr_len = 4, .stderr_truncated = true,
			  .skipped_json = "[{\"path\":\"x\",\"reason\":\"too_large\",\"size\":9}]"};
	check_ok(hv_store_run_finish(st, id, &end, in, n));
	return id;
}

static void test_runs_and_contents(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	art arts[] = {
		{"figs/plot.png", "plot.png", "image/png", "PNGDATA", true, ""},
		{"copy/plot.png", "plot.png", "image/png", "PNGDATA", true, ""}, /* same bytes */
		{"notes\xff.txt", "notes\xff.txt", "text/plain", "hello", true, ""},
		{"big.bin", "big.bin", "application/octet-stream", "not stored", false, ""},
		{"empty", "empty", "inode/x-empty", "", true, ""},
	};
	int64_t t0 = hv_store_now_ns();
	int64_t id = record_run(st, "first", "[\"python3\",\"-c\",\"...\"]", 0, arts, 5);
	/* Two artifacts with the same digest: one content row. */
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM contents"), 3);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM artifacts"), 5);

	hv_run_filter rf = {.run_id = id, .with_output = true};
	hv_run_iter *ri;
	const hv_run_row *r;
	check_ok(hv_store_runs(st, &rf, &ri));
	assert_int_equal(hv_run_iter_next(ri, &r), HV_OK);
	assert_int_equal(r->run_id, id);
	assert_int_equal(r->label_len, 5);
	assert_memory_equal(r->label, "first", 5);
	assert_string_equal(r->command_json, "[\"python3\",\"-c\",\"...\"]");
	assert_int_equal(r->dir_len, 9);
	assert_memory_equal(r->dir, "/work/dir", 9);
	assert_true(r->started_at_ns >= t0 && r->ended && r->ended_at_ns >= r->started_at_ns);
	assert_true(r->has_exit_code);
	assert_int_equal(r->exit_code, 3);
	assert_false(r->timed_out);
	assert_int_equal(r->duration_ms, 42);
	assert_int_equal(r->artifacts, 5);
	assert_int_equal(r->stdout_len, 4);
	assert_memory_equal(r->stdout_data, "out\xff", 4);
	assert_memory_equal(r->stderr_data, "e\nrr", 4);
	assert_false(r->stdout_truncated);
	assert_true(r->stderr_truncated);
	assert_string_equal(r->skipped_json,
			    "[{\"path\":\"x\",\"reason\":\"too_large\",\"size\":9}]");
	assert_int_equal(hv_run_iter_next(ri, &r), HV_DONE);
	/* Done stays done: stepping again does not start the rows over. */
	assert_int_equal(hv_run_iter_next(ri, &r), HV_DONE);
	assert_int_equal(hv_run_iter_next(ri, &r), HV_DONE);
	hv_run_iter_free(ri);

	/* The artifacts, in recorded order, with content where stored. */
	hv_artifact_filter af = {.run_id = id, .with_content = true};
	hv_artifact_iter *ai;
	const hv_artifact_row *a;
	check_ok(hv_store_artifacts(st, &af, &ai));
	for (size_t i = 0; i < 5; i++) {
		assert_int_equal(hv_artifact_iter_next(ai, &a), HV_OK);
		assert_int_equal(a->run_id, id);
		assert_int_equal(a->path_len, strlen(arts[i].path));
		assert_memory_equal(a->path, arts[i].path, a->path_len);
		assert_memory_equal(a->name, arts[i].name, a->name_len);
		assert_string_equal(a->mime_type, arts[i].mime);
		assert_int_equal(a->size, strlen(arts[i].content));
		assert_string_equal(a->sha256, arts[i].sha);
		assert_true(a->recorded_at_ns >= t0);
		assert_int_equal(a->content_stored, arts[i].store);
		if (arts[i].store) {
			assert_non_null(a->content);
			assert_int_equal(a->content_len, strlen(arts[i].content));
			assert_memory_equal(a->content, arts[i].content, a->content_len);
		} else {
			assert_null(a->content);
		}
	}
	assert_int_equal(hv_artifact_iter_next(ai, &a), HV_DONE);
	assert_int_equal(hv_artifact_iter_next(ai, &a), HV_DONE);
	assert_int_equal(hv_artifact_iter_next(ai, &a), HV_DONE);
	hv_artifact_iter_free(ai);

	/* Contents by digest (either case) and by artifact id. */
	void *data;
	size_t len;
	char upper[65];
	for (int i = 0; i < 65; i++)
		upper[i] = (char)(arts[0].sha[i] >= 'a' ? arts[0].sha[i] - 32 : arts[0].sha[i]);
	check_ok(hv_store_content_get(st, upper, &data, &len));
	assert_int_equal(len, 7);
	assert_memory_equal(data, "PNGDATA", 7);
	free(data);
	int64_t first_art = raw_int(f->db, "SELECT min(id) FROM artifacts");
	check_ok(hv_store_artifact_content(st, first_art + 2, &data, &len));
	assert_memory_equal(data, "hello", 5);
	free(data);
	check_ok(hv_store_artifact_content(st, first_art + 4, &data, &len)); /* empty content */
	assert_int_equal(len, 0);
	assert_non_null(data);
	free(data);
	assert_int_equal(hv_store_artifact_content(st, first_art + 3, &data, &len), HV_ENOTFOUND);
	assert_int_equal(hv_store_artifact_content(st, first_art + 99, &data, &len), HV_ENOTFOUND);
	assert_int_equal(hv_store_content_get(st, arts[3].sha, &data, &len), HV_ENOTFOUND);
	assert_int_equal(hv_store_content_get(st, "abc", &data, &len), HV_EUSAGE);

	/* A run finishes once; a missing run cannot finish. */
	hv_run_end end = {.duration_ms = -1};
	assert_int_equal(hv_store_run_finish(st, id, &end, NULL, 0), HV_ENOTFOUND);
	assert_int_equal(hv_store_run_finish(st, id + 50, &end, NULL, 0), HV_ENOTFOUND);

	/* A collect: no command, no exit code, unknown duration; and a bad artifact records
	 * nothing at all (one transaction). */
	int64_t cid;
	hv_run_start cs = {.dir = "/c"};
	check_ok(hv_store_run_begin(st, &cs, &cid));
	hv_artifact_in bad[2] = {
		{.path = "ok", .path_len = 2, .name = "ok", .name_len = 2, .mime_type = "text/plain",
		 .size = 5, .sha256 = arts[2].sha, .content = "hello", .content_len = 5},
		{.path = "liar", .path_len = 4, .name = "liar", .name_len = 4,
		 .mime_type = "text/plain", .size = 5, .sha256 = arts[2].sha, .content = "HELLO",
		 .content_len = 5},
	};
	assert_int_equal(hv_store_run_finish(st, cid, &end, bad, 2), HV_EUSAGE);
	bad[1].sha256 = "zz";
	bad[1].content = NULL;
	assert_int_equal(hv_store_run_finish(st, cid, &end, bad, 2), HV_EUSAGE);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM artifacts"), 5);
	rf = (hv_run_filter){.run_id = cid};
	check_ok(hv_store_runs(st, &rf, &ri));
	assert_int_equal(hv_run_iter_next(ri, &r), HV_OK);
	assert_false(r->ended); /* still running, as a killed run would show */
	assert_null(r->label);
	assert_null(r->command_json);
	assert_null(r->stdout_data);
	hv_run_iter_free(ri);
	check_ok(hv_store_run_finish(st, cid, &end, bad, 1));
	check_ok(hv_store_runs(st, &rf, &ri));
	assert_int_equal(hv_run_iter_next(ri, &r), HV_OK);
	assert_true(r->ended);
	assert_false(r->has_exit_code);
	assert_int_equal(r->duration_ms, -1);
	assert_int_equal(r->artifacts, 1);
	hv_run_iter_free(ri);
	rf.with_output = true;
	check_ok(hv_store_runs(st, &rf, &ri));
	assert_int_equal(hv_run_iter_next(ri, &r), HV_OK);
	assert_string_equal(r->skipped_json, "[]");
	assert_int_equal(r->stdout_len, 0);
	hv_run_iter_free(ri);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM contents"), 3);
	check_ok(hv_store_integrity_check(st));
	check_ok(hv_store_close(st));
}

/* Counts the artifacts f selects, checking each with `check` when given. */
static size_t count_artifacts(hv_store *st, const hv_artifact_filter *f,
			      bool (*check)(const hv_artifact_row *))
{
	hv_artifact_iter *it;
	check_ok(hv_store_artifacts(st, f, &it));
	const hv_artifact_row *a;
	size_t n = 0;
	int rc;
	while ((rc = hv_artifact_iter_next(it, &a)) == HV_OK) {
		if (check && !check(a))
			fail_msg("artifact %lld (%.*s, %s) should not match", (long long)a->artifact_id,
				 (int)a->name_len, a->name, a->mime_type);
		n++;
	}
	assert_int_equal(rc, HV_DONE);
	hv_artifact_iter_free(it);
	return n;
}

static bool is_image(const hv_artifact_row *a)
{
	return strncmp(a->mime_type, "image/", 6) == 0;
}

static bool is_png_name(const hv_artifact_row *a)
{
	return a->name_len > 4 && memcmp(a->name + a->name_len - 4, ".png", 4) == 0;
}

static size_t count_runs(hv_store *st, const hv_run_filter *f, int64_t *first)
{
	hv_run_iter *it;
	check_ok(hv_store_runs(st, f, &it));
	const hv_run_row *r;
	size_t n = 0;
	int64_t prev = INT64_MAX;
	while (hv_run_iter_next(it, &r) == HV_OK) {
		assert_true(r->run_id < prev); /* newest first */
		prev = r->run_id;
		if (n++ == 0 && first)
			*first = r->run_id;
	}
	hv_run_iter_free(it);
	return n;
}

static void test_history_filters(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	art r1[] = {
		{"a/plot.png", "plot.png", "image/png", "p1", true, ""},
		{"a/chart.svg", "chart.svg", "image/svg+xml", "s1", true, ""},
		{"a/data.csv", "data.csv", "text/csv", "c1", true, ""},
	};
	art r2[] = {
		{"plot.png", "plot.png", "image/png", "p2", false, ""},
		{"weird", "image", "imagex/odd", "w2", true, ""},     /* not image/ */
		{"b\xff.png", "b\xff.png", "application/octet-stream", "b2", true, ""},
		{"cfg.json", "cfg.json", "application/json", "j2", true, ""},
	};
	art r3[] = {
		{"plot.png", "plot.png", "image/png", "p1", true, ""}, /* same bytes as run 1's */
		{"README.md", "README.md", "text/markdown", "m3", true, ""},
	};
	int64_t day = 86400 * NS, now = hv_store_now_ns();
	int64_t id1 = record_run(st, "alpha", "[\"a\"]", now - 3 * day, r1, 3);
	int64_t mid = hv_store_now_ns();
	int64_t id2 = record_run(st, "beta", NULL, now - 2 * day, r2, 4);
	int64_t id3 = record_run(st, "alpha", "[\"c\"]", now - day, r3, 2);

	/* Runs: all, limit, since, label, label + limit. */
	int64_t first = 0;
	hv_run_filter rf = {0};
	assert_int_equal(count_runs(st, &rf, &first), 3);
	assert_int_equal(first, id3);
	rf.limit = 2;
	assert_int_equal(count_runs(st, &rf, &first), 2);
	rf = (hv_run_filter){.since_ns = now - 2 * day};
	assert_int_equal(count_runs(st, &rf, NULL), 2);
	rf = (hv_run_filter){.label = "alpha"};
	assert_int_equal(count_runs(st, &rf, &first), 2);
	assert_int_equal(first, id3);
	rf.limit = 1;
	assert_int_equal(count_runs(st, &rf, NULL), 1);
	rf = (hv_run_filter){.label = "gamma"};
	assert_int_equal(count_runs(st, &rf, NULL), 0);
	rf = (hv_run_filter){.run_id = id2};
	assert_int_equal(count_runs(st, &rf, &first), 1);
	assert_int_equal(first, id2);

	/* Artifacts: order is newest run first, recorded order within a run. */
	hv_artifact_iter *it;
	const hv_artifact_row *a;
	check_ok(hv_store_artifacts(st, NULL, &it));
	int64_t expect_runs[] = {id3, id3, id2, id2, id2, id2, id1, id1, id1};
	int64_t prev_id = 0;
	for (size_t i = 0; i < 9; i++) {
		assert_int_equal(hv_artifact_iter_next(it, &a), HV_OK);
		assert_int_equal(a->run_id, expect_runs[i]);
		if (i && expect_runs[i] == expect_runs[i - 1])
			assert_true(a->artifact_id > prev_id);
		prev_id = a->artifact_id;
		assert_null(a->content); /* not asked for */
	}
	assert_int_equal(hv_artifact_iter_next(it, &a), HV_DONE);
	hv_artifact_iter_free(it);

	hv_artifact_filter af = {.run_id = id2};
	assert_int_equal(count_artifacts(st, &af, NULL), 4);
	af = (hv_artifact_filter){.mime = "image/*"};
	assert_int_equal(count_artifacts(st, &af, is_image), 4);
	af = (hv_artifact_filter){.mime = "image/png"};
	assert_int_equal(count_artifacts(st, &af, is_image), 3);
	af = (hv_artifact_filter){.mime = "*json"};
	assert_int_equal(count_artifacts(st, &af, NULL), 1);
	af = (hv_artifact_filter){.mime = "text/*", .run_id = id1};
	assert_int_equal(count_artifacts(st, &af, NULL), 1);
	af = (hv_artifact_filter){.name = "*.png"};
	assert_int_equal(count_artifacts(st, &af, is_png_name), 4);
	af = (hv_artifact_filter){.name = "plot*"};
	assert_int_equal(count_artifacts(st, &af, is_png_name), 3);
	af = (hv_artifact_filter){.name = "b\xff*"};
	assert_int_equal(count_artifacts(st, &af, is_png_name), 1);
	af = (hv_artifact_filter){.name = "README.md"};
	assert_int_equal(count_artifacts(st, &af, NULL), 1);
	af = (hv_artifact_filter){.name = "[cd]*"};
	assert_int_equal(count_artifacts(st, &af, NULL), 3);
	af = (hv_artifact_filter){.sha256 = r1[0].sha};
	assert_int_equal(count_artifacts(st, &af, NULL), 2);
	char prefix[9];
	memcpy(prefix, r3[1].sha, 8);
	prefix[8] = '\0';
	af = (hv_artifact_filter){.sha256 = prefix};
	assert_true(count_artifacts(st, &af, NULL) >= 1);
	af = (hv_artifact_filter){.sha256 = "not-hex"};
	assert_int_equal(hv_store_artifacts(st, &af, &it), HV_EUSAGE);
	af = (hv_artifact_filter){.since_ns = mid};
	assert_int_equal(count_artifacts(st, &af, NULL), 6);
	af = (hv_artifact_filter){.since_ns = hv_store_now_ns() + NS};
	assert_int_equal(count_artifacts(st, &af, NULL), 0);
	af = (hv_artifact_filter){.limit = 4};
	assert_int_equal(count_artifacts(st, &af, NULL), 4);
	af = (hv_artifact_filter){.mime = "image/*", .name = "plot.png", .limit = 2};
	assert_int_equal(count_artifacts(st, &af, is_image), 2);
	af = (hv_artifact_filter){.artifact_id = prev_id};
	assert_int_equal(count_artifacts(st, &af, NULL), 1);

	/* with_content only gives the contents a run stored (run 2's plot.png: not stored). */
	af = (hv_artifact_filter){.run_id = id2, .name = "plot.png", .with_content = true};
	check_ok(hv_store_artifacts(st, &af, &it));
	assert_int_equal(hv_artifact_iter_next(it, &a), HV_OK);
	assert_false(a->content_stored);
	assert_null(a->content);
	hv_artifact_iter_free(it);
	check_ok(hv_store_close(st));
}

/* Enough artifacts for a dense filter (past 20,000 matches) to be read in listing order and
 * stopped at the limit, rather than sorted: both plans must give the same rows. */
static void test_history_dense_filters(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	enum { N = 24000 };
	static char names[N][16];
	static hv_artifact_in in[N];
	char sha_img[65], sha_txt[65];
	tu_sha256_hex("img", 3, sha_img);
	tu_sha256_hex("txt", 3, sha_txt);
	int64_t ids[2];
	for (int r = 0; r < 2; r++) {
		hv_run_start rs = {.dir = "/d"};
		check_ok(hv_store_run_begin(st, &rs, &ids[r]));
		for (int i = 0; i < N; i++) {
			bool img = i % 5 != 0;
			snprintf(names[i], sizeof(names[i]), "%c%05d.%s", 'a' + r, i, img ? "png" : "txt");
			in[i] = (hv_artifact_in){.path = names[i], .path_len = strlen(names[i]),
						 .name = names[i], .name_len = strlen(names[i]),
						 .mime_type = img ? "image/png" : "text/plain", .size = 3,
						 .sha256 = img ? sha_img : sha_txt,
						 .content = img ? "img" : "txt", .content_len = 3};
		}
		hv_run_end end = {.duration_ms = 1};
		check_ok(hv_store_run_finish(st, ids[r], &end, in, N));
	}
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM contents"), 2);
	/* Dense with a limit: the newest run's first images, in recorded order, with content. */
	hv_artifact_filter af = {.mime = "image/*", .limit = 7, .with_content = true};
	hv_artifact_iter *it;
	const hv_artifact_row *a;
	check_ok(hv_store_artifacts(st, &af, &it));
	int expect[] = {1, 2, 3, 4, 6, 7, 8};
	for (int k = 0; k < 7; k++) {
		assert_int_equal(hv_artifact_iter_next(it, &a), HV_OK);
		assert_int_equal(a->run_id, ids[1]);
		char want[16];
		snprintf(want, sizeof(want), "b%05d.png", expect[k]);
		assert_int_equal(a->name_len, strlen(want));
		assert_memory_equal(a->name, want, a->name_len);
		assert_int_equal(a->content_len, 3);
		assert_memory_equal(a->content, "img", 3);
	}
	assert_int_equal(hv_artifact_iter_next(it, &a), HV_DONE);
	hv_artifact_iter_free(it);
	/* The same filter sparse (one name) and dense without a limit. */
	af = (hv_artifact_filter){.mime = "image/*", .name = "a00007.png"};
	assert_int_equal(count_artifacts(st, &af, is_image), 1);
	af = (hv_artifact_filter){.mime = "image/*"};
	assert_int_equal(count_artifacts(st, &af, is_image), 2 * N * 4 / 5);
	af = (hv_artifact_filter){.name = "*.txt", .limit = 30000};
	assert_int_equal(count_artifacts(st, &af, NULL), 2 * N / 5);
	af = (hv_artifact_filter){.sha256 = sha_txt, .limit = 3};
	check_ok(hv_store_artifacts(st, &af, &it));
	assert_int_equal(hv_artifact_iter_next(it, &a), HV_OK);
	assert_int_equal(a->run_id, ids[1]);
	assert_memory_equal(a->name, "b00000.txt", 10);
	hv_artifact_iter_free(it);
	check_ok(hv_store_close(st));
}

static void test_prune_many_runs(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	int64_t first = 0, last = 0;
	for (int i = 0; i < 200; i++) {
		char content[32];
		snprintf(content, sizeof(content), "run %d", i % 150); /* runs 150..199 share */
		art a[] = {{"f", "f", "text/plain", content, true, ""}};
		last = record_run(st, NULL, NULL, 0, a, 1);
		if (!first)
			first = last;
	}
	hv_prune_opts po = {.keep_runs = 20, .before_ns = 0};
	hv_prune_result pr;
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 180);
	assert_int_equal(pr.artifacts, 180);
	/* Kept runs 180..199 hold contents "run 30".."run 49": the other 130 go. */
	assert_int_equal(pr.contents, 130);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM contents"), 20);
	assert_int_equal(raw_int(f->db, "SELECT min(id) FROM runs"), last - 19);
	check_ok(hv_store_integrity_check(st));
	check_ok(hv_store_close(st));
}

static void test_prune(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	int64_t now = hv_store_now_ns(), day = 86400 * NS;
	art r1[] = {
		{"only1", "only1", "text/plain", "content only in run 1", true, ""},
		{"shared", "shared", "text/plain", "shared content", true, ""},
	};
	art r2[] = {
		{"shared", "shared", "text/plain", "shared content", false, ""}, /* refers, no store */
		{"only2", "only2", "text/plain", "content of run 2", true, ""},
	};
	art r3[] = {{"only3", "only3", "text/plain", "three", true, ""}};
	int64_t id1 = record_run(st, "a", NULL, now - 3 * day, r1, 2);
	int64_t id2 = record_run(st, "b", NULL, now - 2 * day, r2, 2);
	int64_t id3 = record_run(st, "c", NULL, now - day, r3, 1);
	/* An old snapshot, a recent one, and one a killed process abandoned. */
	hv_snapshot_writer *w;
	int64_t old_snap, new_snap;
	hv_stat s = stat_for(1, now);
	check_ok(hv_store_snapshot_begin(st, "/old", &w));
	check_ok(hv_snapshot_writer_add(w, "x", 1, &s, NULL));
	check_ok(hv_snapshot_writer_finish(w, &old_snap));
	check_ok(hv_store_snapshot_begin(st, "/new", &w));
	check_ok(hv_snapshot_writer_finish(w, &new_snap));
	check_ok(hv_store_close(st));
	/* An unfinished snapshot two hours old: what a killed process leaves. */
	char sql[512];
	snprintf(sql, sizeof(sql),
		 "UPDATE snapshots SET created_at_ns = %lld WHERE id = %lld;"
		 "INSERT INTO snapshots(root, created_at_ns, entries, complete)"
		 " VALUES (CAST('/abandoned' AS BLOB), %lld, 0, 0);"
		 "INSERT INTO snapshot_entries VALUES (last_insert_rowid(), 0, CAST('y' AS BLOB),"
		 " 1, 1, 2, 3, 32768, 4, 5, NULL);",
		 (long long)(now - 4 * day), (long long)old_snap, (long long)(now - 2 * 3600 * NS));
	raw_exec(f->db, sql);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM snapshots"), 3);

	st = open_ok(f->db, 0);
	hv_prune_opts po;
	hv_prune_opts_init(&po); /* nothing chosen: refused, nothing deleted */
	hv_prune_result pr;
	assert_int_equal(hv_store_prune(st, &po, &pr), HV_EUSAGE);

	po.keep_runs = 2;
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 1);
	assert_int_equal(pr.artifacts, 2);
	assert_int_equal(pr.contents, 1); /* "shared" is still referenced by run 2 */
	assert_int_equal(pr.content_bytes, strlen(r1[0].content));
	assert_int_equal(pr.snapshots, 2); /* the old one and the abandoned one */
	hv_snapshot *sn;
	assert_int_equal(hv_store_snapshot_open(st, old_snap, &sn), HV_ENOTFOUND);
	check_ok(hv_store_snapshot_open(st, new_snap, &sn));
	hv_snapshot_close(sn);
	void *data;
	size_t len;
	assert_int_equal(hv_store_content_get(st, r1[0].sha, &data, &len), HV_ENOTFOUND);
	check_ok(hv_store_content_get(st, r1[1].sha, &data, &len));
	free(data);
	/* Run 2's "shared" artifact did not store it: it has no content to give (as its run's
	 * archive and `history show` say), though the bytes are there by digest (above). */
	int64_t shared2 = raw_int(f->db, "SELECT min(id) FROM artifacts");
	assert_int_equal(hv_store_artifact_content(st, shared2, &data, &len), HV_ENOTFOUND);
	assert_non_null(strstr(hv_error_last(), "its content was not stored"));
	hv_run_filter rf = {.run_id = id1};
	assert_int_equal(count_runs(st, &rf, NULL), 0);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM run_outputs"), 2);

	/* --before: runs started before it go; 'shared' goes with the last reference. */
	po = (hv_prune_opts){.keep_runs = -1, .before_ns = now - day - NS};
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 1);
	assert_int_equal(pr.artifacts, 2);
	assert_int_equal(pr.contents, 2);
	assert_int_equal(pr.snapshots, 0);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM contents"), 1);
	rf.run_id = id2;
	assert_int_equal(count_runs(st, &rf, NULL), 0);
	rf.run_id = id3;
	assert_int_equal(count_runs(st, &rf, NULL), 1);

	/* Nothing to do is fine. */
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs + pr.artifacts + pr.contents + pr.snapshots, 0);
	po = (hv_prune_opts){.keep_runs = 0, .before_ns = 0};
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 1);
	assert_int_equal(pr.contents, 1);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM contents"), 0);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM artifacts"), 0);
	check_ok(hv_store_integrity_check(st));
	check_ok(hv_store_close(st));
	assert_int_equal(raw_int(f->db, "PRAGMA freelist_count"), 0); /* pages given back */
}

/* Schema version 1 as harvest 1 wrote it (a copy: the migration must upgrade exactly this). */
static const char old_schema_v1[] =
	"CREATE TABLE mime_cache ("
	"  dev INTEGER NOT NULL,"
	"  ino INTEGER NOT NULL,"
	"  ftype INTEGER NOT NULL,"         /* st_mode & S_IFMT */
	"  size INTEGER NOT NULL,"
	"  mtime_ns INTEGER NOT NULL,"
	"  ctime_ns INTEGER NOT NULL,"
	"  fingerprint TEXT NOT NULL,"
	"  mime_type TEXT NOT NULL,"
	"  sha256 TEXT,"                    /* the content's digest when it was read, else NULL */
	"  cached_at_ns INTEGER NOT NULL,"
	"  PRIMARY KEY (dev, ino)"
	") WITHOUT ROWID;"
	"CREATE TABLE snapshots ("
	"  id INTEGER PRIMARY KEY,"
	"  root BLOB NOT NULL,"
	"  created_at_ns INTEGER NOT NULL,"
	"  entries INTEGER NOT NULL DEFAULT 0,"
	"  complete INTEGER NOT NULL DEFAULT 0"  /* 1 once finished: readers see only those */
	");"
	"CREATE INDEX snapshots_created ON snapshots(created_at_ns);"
	/* path is the walk-order key: the relative path with '/' stored as a NUL byte. */
	"CREATE TABLE snapshot_entries ("
	"  snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,"
	"  path BLOB NOT NULL,"
	"  dev INTEGER NOT NULL,"
	"  ino INTEGER NOT NULL,"
	"  size INTEGER NOT NULL,"
	"  mode INTEGER NOT NULL,"
	"  mtime_ns INTEGER NOT NULL,"
	"  ctime_ns INTEGER NOT NULL,"
	"  sha256 TEXT,"
	"  PRIMARY KEY (snapshot_id, path)"
	") WITHOUT ROWID;"
	"CREATE TABLE runs ("
	"  id INTEGER PRIMARY KEY,"
	"  label BLOB,"
	"  command TEXT,"                      /* JSON array; NULL for a collect */
	"  dir BLOB NOT NULL,"
	"  started_at_ns INTEGER NOT NULL,"
	"  ended_at_ns INTEGER,"               /* NULL while running (or killed) */
	"  exit_code INTEGER,"
	"  timed_out INTEGER NOT NULL DEFAULT 0,"
	"  duration_ms INTEGER,"
	"  stdout_truncated INTEGER NOT NULL DEFAULT 0,"
	"  stderr_truncated INTEGER NOT NULL DEFAULT 0,"
	"  skipped TEXT"                       /* JSON array */
	");"
	"CREATE INDEX runs_started ON runs(started_at_ns);"
	"CREATE INDEX runs_label ON runs(label);"
	"CREATE TABLE run_outputs ("
	"  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,"
	"  stdout BLOB,"
	"  stderr BLOB"
	");"
	"CREATE TABLE artifacts ("
	"  id INTEGER PRIMARY KEY,"
	"  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
	"  path BLOB NOT NULL,"
	"  name BLOB NOT NULL,"
	"  mime_type TEXT NOT NULL,"
	"  size INTEGER NOT NULL,"
	"  sha256 TEXT NOT NULL,"
	"  recorded_at_ns INTEGER NOT NULL,"
	"  content_stored INTEGER NOT NULL DEFAULT 0"
	");"
	/* DESC: a forward scan gives (run_id DESC, id ASC), the listing order, without a sort. */
	"CREATE INDEX artifacts_run ON artifacts(run_id DESC);"
	/* --mime for all images is the range mime_type >= 'image/' AND mime_type < 'image0'. */
	"CREATE INDEX artifacts_mime ON artifacts(mime_type);"
	"CREATE INDEX artifacts_name ON artifacts(name);"
	"CREATE INDEX artifacts_sha256 ON artifacts(sha256);"
	"CREATE INDEX artifacts_recorded ON artifacts(recorded_at_ns);"
	"CREATE TABLE contents ("
	"  sha256 TEXT PRIMARY KEY,"
	"  size INTEGER NOT NULL,"
	"  bytes BLOB NOT NULL"
	");";


/* A version-1 database: its runs, artifacts, outputs and contents survive the upgrade with
 * their ids (no cascade deletes them while the tables are rebuilt), and ids are never given
 * again afterwards, even once pruned. */
static void test_migrate_v1(void **state)
{
	fixture *f = *state;
	char sql[8192];
	snprintf(sql, sizeof(sql),
		 "PRAGMA application_id = %d; BEGIN; %s"
		 "INSERT INTO runs(id, dir, started_at_ns, ended_at_ns, exit_code, skipped)"
		 " VALUES (1, CAST('/d' AS BLOB), 1000, 2000, 0, '[]');"
		 "INSERT INTO runs(id, dir, started_at_ns) VALUES (7, CAST('/d' AS BLOB), 3000);"
		 "INSERT INTO run_outputs VALUES (1, CAST('out' AS BLOB), CAST('' AS BLOB));"
		 "INSERT INTO artifacts(id, run_id, path, name, mime_type, size, sha256,"
		 " recorded_at_ns, content_stored) VALUES (5, 1, CAST('a' AS BLOB),"
		 " CAST('a' AS BLOB), 'text/plain', 2, '%s', 2000, 1);"
		 "INSERT INTO contents VALUES ('%s', 2, CAST('hi' AS BLOB));"
		 "PRAGMA user_version = 1; COMMIT;",
		 HV_STORE_APPLICATION_ID, old_schema_v1,
		 "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4",
		 "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4");
	raw_exec(f->db, sql);
	assert_int_equal(raw_int(f->db, "PRAGMA user_version"), 1);

	hv_store *st = open_ok(f->db, 0);
	assert_int_equal(raw_int(f->db, "PRAGMA user_version"), HV_STORE_SCHEMA_VERSION);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM runs"), 2);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM run_outputs"), 1);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM artifacts WHERE id = 5"), 1);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
	check_ok(hv_store_integrity_check(st));
	void *data;
	size_t len;
	check_ok(hv_store_artifact_content(st, 5, &data, &len));
	assert_int_equal(len, 2);
	assert_memory_equal(data, "hi", 2);
	free(data);
	hv_run_filter rf = {.run_id = 1, .with_output = true};
	hv_run_iter *it;
	const hv_run_row *r;
	check_ok(hv_store_runs(st, &rf, &it));
	check_ok(hv_run_iter_next(it, &r));
	assert_int_equal(r->stdout_len, 3);
	assert_int_equal(r->artifacts, 1);
	assert_null(r->end_reason);
	hv_run_iter_free(it);

	/* New ids continue above the highest; after a prune of the newest, still above it. */
	art a[] = {{"b", "b", "text/plain", "new", true, ""}};
	int64_t id = record_run(st, NULL, NULL, 0, a, 1);
	assert_int_equal(id, 8);
	assert_int_equal(raw_int(f->db, "SELECT max(id) FROM artifacts"), 6);
	hv_prune_opts po = {.keep_runs = 0};
	hv_prune_result pr;
	check_ok(hv_store_prune(st, &po, &pr));
	/* Run 7 never ended and has no recorded owner: it may still be running, so it stays. */
	assert_int_equal(pr.runs, 2);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM runs WHERE id = 7"), 1);
	id = record_run(st, NULL, NULL, 0, a, 1);
	assert_int_equal(id, 9);
	assert_int_equal(raw_int(f->db, "SELECT max(id) FROM artifacts"), 7);
	assert_int_equal(hv_store_artifact_content(st, 6, &data, &len), HV_ENOTFOUND);
	assert_non_null(strstr(hv_error_last(), "no artifact 6"));
	check_ok(hv_store_close(st));
}

/* The owner string of run id (written by hv_store_run_begin). */
static char *owner_of(const char *db, int64_t id)
{
	sqlite3 *h;
	assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_prepare_v2(h, "SELECT owner FROM runs WHERE id = ?1", -1, &q, NULL),
			 SQLITE_OK);
	sqlite3_bind_int64(q, 1, id);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	const unsigned char *o = sqlite3_column_text(q, 0);
	char *copy = o ? strdup((const char *)o) : NULL;
	sqlite3_finalize(q);
	sqlite3_close(h);
	return copy;
}

static const char *end_reason_of(hv_store *st, int64_t id, bool *ended)
{
	static char buf[64];
	hv_run_filter rf = {.run_id = id};
	hv_run_iter *it;
	const hv_run_row *r;
	check_ok(hv_store_runs(st, &rf, &it));
	check_ok(hv_run_iter_next(it, &r));
	*ended = r->ended;
	const char *why = NULL;
	if (r->end_reason) {
		snprintf(buf, sizeof(buf), "%s", r->end_reason);
		why = buf;
	}
	hv_run_iter_free(it);
	return why;
}

/* Who runs a run: a run whose owner process is gone (killed, another boot, a reused pid) is
 * ended as "interrupted" by the next writing open; one whose owner is alive or cannot be
 * checked from here (another host, another PID namespace, unknown) is left alone. */
static void test_interrupted_runs(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	int64_t mine;
	hv_run_start rs = {.dir = "/x"};
	check_ok(hv_store_run_begin(st, &rs, &mine));
	char *owner = owner_of(f->db, mine);
	assert_non_null(owner);
	long pid;
	unsigned long long start;
	char ns[32], boot[64];
	int used = 0;
	assert_true(sscanf(owner, "%ld %llu %31s %63s %n", &pid, &start, ns, boot, &used) >= 4);
	assert_int_equal(pid, (long)getpid());
	const char *host = owner + used;
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	assert_int_equal(waitpid(dead, NULL, 0), dead);
	char forged[6][512];
	snprintf(forged[0], 512, "%ld %llu %s %s %s", (long)dead, start, ns, boot, host);
	snprintf(forged[1], 512, "1 %llu %s %s %s", start + 123456789, ns, boot, host);
	snprintf(forged[2], 512, "%ld %llu %s %s %s", pid, start, ns,
		 "00000000-0000-0000-0000-000000000000", host);
	snprintf(forged[3], 512, "%ld %llu %s %s %s.other", (long)dead, start, ns, boot, host);
	snprintf(forged[4], 512, "%ld %llu %s1 %s %s", (long)dead, start, ns, boot, host);
	snprintf(forged[5], 512, "garbage");
	const bool gone[6] = {true, true, true, false, false, false};
	int64_t ids[7];
	for (int i = 0; i < 7; i++) {
		check_ok(hv_store_run_begin(st, &rs, &ids[i]));
		char sql[1024];
		if (i < 6)
			snprintf(sql, sizeof(sql), "UPDATE runs SET owner = '%.511s' WHERE id = %lld",
				 forged[i], (long long)ids[i]);
		else
			snprintf(sql, sizeof(sql), "UPDATE runs SET owner = NULL WHERE id = %lld",
				 (long long)ids[i]);
		raw_exec(f->db, sql);
	}
	check_ok(hv_store_close(st));
	/* A read-only open writes nothing: they are still open. */
	st = open_ok(f->db, HV_STORE_READONLY);
	bool ended;
	for (int i = 0; i < 7; i++) {
		assert_null(end_reason_of(st, ids[i], &ended));
		assert_false(ended);
	}
	check_ok(hv_store_close(st));
	st = open_ok(f->db, 0);
	for (int i = 0; i < 7; i++) {
		const char *why = end_reason_of(st, ids[i], &ended);
		if (i < 6 && gone[i]) {
			assert_true(ended);
			assert_string_equal(why, HV_END_INTERRUPTED);
		} else {
			assert_false(ended);
			assert_null(why);
		}
	}
	assert_null(end_reason_of(st, mine, &ended));
	assert_false(ended);
	/* prune: the interrupted ones go; the others (maybe running) stay, counted as kept. */
	hv_prune_opts po = {.keep_runs = 0};
	hv_prune_result pr;
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 3);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM runs"), 5);
	po = (hv_prune_opts){.keep_runs = -1, .before_ns = hv_store_now_ns() + NS};
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 0);
	/* Both options at once: refused. */
	po = (hv_prune_opts){.keep_runs = 1, .has_before = true};
	assert_int_equal(hv_store_prune(st, &po, &pr), HV_EUSAGE);
	check_ok(hv_store_close(st));
	free(owner);
}

/* A run's host must be text: checked before anything is written, for every backend. */
static void test_host_name_checked(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	int64_t id = 0;
	const char *bad[] = {"h\xff", "a\nb", "", "caf\xc3", "c1\xc2\x85"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		hv_run_start rs = {.dir = "/d", .host = bad[i]};
		assert_int_equal(hv_store_run_begin(st, &rs, &id), HV_EUSAGE);
		assert_false(hv_host_name_ok(bad[i]));
	}
	assert_int_equal(count_runs(st, NULL, NULL), 0);
	assert_true(hv_host_name_ok("sandbox-\xc3\xa9"));
	hv_run_start rs = {.dir = "/d", .host = "sandbox-\xc3\xa9"};
	check_ok(hv_store_run_begin(st, &rs, &id));
	check_ok(hv_store_close(st));
}

/* `harvest snapshot`, then runs elsewhere and a prune, then `collect --since`: a complete
 * snapshot younger than an hour is kept though the process that took it has exited and runs
 * newer than it were pruned; an hour old, it goes with them. */
static void test_prune_keeps_a_fresh_snapshot(void **state)
{
	fixture *f = *state;
	pid_t child = fork();
	if (child == 0) {
		hv_store *st = NULL;
		hv_snapshot_writer *w;
		int64_t snap;
		if (hv_store_open(&st, f->db, 0) != HV_OK ||
		    hv_store_snapshot_begin(st, "/mine", &w) != HV_OK ||
		    hv_snapshot_writer_finish(w, &snap) != HV_OK || hv_store_close(st) != HV_OK)
			_exit(2);
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	hv_store *st = open_ok(f->db, 0);
	int64_t now = hv_store_now_ns();
	art a[] = {{"a", "a", "text/plain", "one", true, ""}};
	record_run(st, NULL, NULL, now + 1, a, 1);
	record_run(st, NULL, NULL, now + 2, a, 1);
	hv_prune_opts po = {.keep_runs = 1};
	hv_prune_result pr;
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 1);
	assert_int_equal(pr.snapshots, 0);
	hv_snapshot *sn;
	check_ok(hv_store_snapshot_open(st, 1, &sn));
	hv_snapshot_close(sn);
	char sql[128];
	snprintf(sql, sizeof(sql), "UPDATE snapshots SET created_at_ns = %lld",
		 (long long)(now - 3601 * NS));
	raw_exec(f->db, sql);
	record_run(st, NULL, NULL, now + 3, a, 1);
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 1);
	assert_int_equal(pr.snapshots, 1);
	assert_int_equal(hv_store_snapshot_open(st, 1, &sn), HV_ENOTFOUND);
	check_ok(hv_store_close(st));
}

/* A child that begins a run and a snapshot, then is killed. */
static void killed_runner(const char *db)
{
	hv_store *st = NULL;
	if (hv_store_open(&st, db, 0) != HV_OK)
		_exit(2);
	int64_t id, snap;
	hv_run_start rs = {.dir = "/x"};
	hv_snapshot_writer *w;
	if (hv_store_snapshot_begin(st, "/x", &w) != HV_OK ||
	    hv_snapshot_writer_finish(w, &snap) != HV_OK || hv_store_run_begin(st, &rs, &id) != HV_OK)
		_exit(3);
	raise(SIGKILL);
	_exit(4);
}

/* A snapshot whose owner is alive and running a run is never pruned (the run compares against
 * it when its command ends), however old; once its owner is gone it goes like any other. */
static void test_prune_spares_runs_in_progress(void **state)
{
	fixture *f = *state;
	pid_t child = fork();
	if (child == 0)
		killed_runner(f->db);
	int status;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFSIGNALED(status));
	hv_store *st = open_ok(f->db, 0);
	bool ended;
	assert_string_equal(end_reason_of(st, 1, &ended), HV_END_INTERRUPTED);
	assert_true(ended);

	int64_t now = hv_store_now_ns(), day = 86400 * NS;
	hv_snapshot_writer *w;
	int64_t snap, run;
	check_ok(hv_store_snapshot_begin(st, "/mine", &w));
	check_ok(hv_snapshot_writer_finish(w, &snap));
	hv_run_start rs = {.dir = "/mine"};
	check_ok(hv_store_run_begin(st, &rs, &run));
	art a[] = {{"b", "b", "text/plain", "done", true, ""}};
	record_run(st, NULL, NULL, 0, a, 1);
	char sql[256];
	snprintf(sql, sizeof(sql), "UPDATE snapshots SET created_at_ns = %lld",
		 (long long)(now - 4 * day));
	raw_exec(f->db, sql);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM snapshot_owners"), 2);

	hv_prune_opts po = {.keep_runs = -1, .before_ns = now + NS};
	hv_prune_result pr;
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 2);      /* the interrupted one and the finished one */
	assert_int_equal(pr.snapshots, 1); /* the killed child's */
	hv_snapshot *sn;
	check_ok(hv_store_snapshot_open(st, snap, &sn));
	hv_snapshot_close(sn);
	assert_null(end_reason_of(st, run, &ended));
	assert_false(ended);

	/* The run ends (recording failed: it says so); its snapshot may go now. */
	hv_run_end end = {.duration_ms = -1, .end_reason = HV_END_NOT_RECORDED};
	check_ok(hv_store_run_finish(st, run, &end, NULL, 0));
	assert_string_equal(end_reason_of(st, run, &ended), HV_END_NOT_RECORDED);
	assert_true(ended);
	check_ok(hv_store_prune(st, &po, &pr));
	assert_int_equal(pr.runs, 1);
	assert_int_equal(pr.snapshots, 1);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM snapshot_owners"), 0);
	check_ok(hv_store_integrity_check(st));
	check_ok(hv_store_close(st));
}

/* A recording that fails midway records none of the artifacts, and the run is then ended as
 * "not_recorded" rather than left open or shown as complete. */
static void test_failed_recording(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	int64_t id;
	hv_run_start rs = {.dir = "/x"};
	check_ok(hv_store_run_begin(st, &rs, &id));
	raw_exec(f->db, "CREATE TRIGGER no_room BEFORE INSERT ON artifacts"
			" BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;");
	char sha[65];
	tu_sha256_hex("abc", 3, sha);
	hv_artifact_in a = {.path = "a", .path_len = 1, .name = "a", .name_len = 1,
			    .mime_type = "text/plain", .size = 3, .sha256 = sha, .content = "abc",
			    .content_len = 3};
	hv_run_end end = {.has_exit_code = true, .exit_code = 0, .duration_ms = 5,
			  .stdout_data = "out", .stdout_len = 3};
	assert_int_equal(hv_store_run_finish(st, id, &end, &a, 1), HV_EDB);
	assert_non_null(strstr(hv_error_last(), "disk is full"));
	bool ended;
	assert_string_equal(end_reason_of(st, id, &ended), HV_END_NOT_RECORDED);
	assert_true(ended);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM artifacts"), 0);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM contents"), 0);
	assert_int_equal(raw_int(f->db, "SELECT exit_code FROM runs"), 0);
	assert_int_equal(hv_store_run_finish(st, id, &end, NULL, 0), HV_ENOTFOUND);
	check_ok(hv_store_close(st));
}

/* Stored bytes edited behind harvest's back are refused by every read, never served. */
static void test_forged_content(void **state)
{
	fixture *f = *state;
	hv_store *st = open_ok(f->db, 0);
	art a[] = {{"g", "g", "text/plain", "genuine", true, ""}};
	int64_t run = record_run(st, NULL, NULL, 0, a, 1);
	int64_t aid = raw_int(f->db, "SELECT max(id) FROM artifacts");
	raw_exec(f->db, "UPDATE contents SET bytes = CAST('forged!' AS BLOB)");
	void *data = NULL;
	size_t len;
	assert_int_equal(hv_store_content_get(st, a[0].sha, &data, &len), HV_EDB);
	assert_null(data);
	assert_non_null(strstr(hv_error_last(), "stored content does not match its SHA-256"));
	assert_int_equal(hv_store_artifact_content(st, aid, &data, &len), HV_EDB);
	char want[64];
	snprintf(want, sizeof(want), "artifact %lld: stored content", (long long)aid);
	assert_non_null(strstr(hv_error_last(), want));
	hv_artifact_filter af = {.run_id = run, .with_content = true};
	hv_artifact_iter *it;
	const hv_artifact_row *row;
	check_ok(hv_store_artifacts(st, &af, &it));
	assert_int_equal(hv_artifact_iter_next(it, &row), HV_EDB);
	hv_artifact_iter_free(it);
	af.with_content = false; /* metadata alone is still listed */
	check_ok(hv_store_artifacts(st, &af, &it));
	check_ok(hv_artifact_iter_next(it, &row));
	hv_artifact_iter_free(it);
	check_ok(hv_store_close(st));
}

/* SQLite's special names are not paths of a history. */
static void test_special_names(void **state)
{
	(void)state;
	const char *names[] = {":memory:", "file:x.db", "file::memory:"};
	for (size_t i = 0; i < 3; i++) {
		for (int ro = 0; ro < 2; ro++) {
			hv_store *st = NULL;
			assert_int_equal(hv_store_open(&st, names[i], ro ? HV_STORE_READONLY : 0),
					 HV_EUSAGE);
			assert_null(st);
			assert_non_null(strstr(hv_error_last(), names[i]));
		}
	}
	assert_false(exists(":memory:"));
	assert_false(exists("file:x.db"));
}

/* hv_write_file() refuses what it must not write. */
static void test_write_file_refusals(void **state)
{
	fixture *f = *state;
	char *sock = tu_path(f->dir, "sock");
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(hv_write_file(sock, "x", 1, 0), HV_EUSAGE);
	close(s);
	char *dangling = tu_path(f->dir, "dangling");
	assert_int_equal(symlink("nowhere", dangling), 0);
	assert_int_equal(hv_write_file(dangling, "x", 1, 0), HV_EUSAGE);
	assert_int_equal(hv_write_file(dangling, "x", 1, HV_WRITE_FOLLOW), HV_EIO);
	/* flags that are not HV_WRITE_FOLLOW: refused, nothing written */
	char *unflagged = tu_path(f->dir, "unflagged");
	assert_int_equal(hv_write_file(unflagged, "x", 1, 0x100), HV_EUSAGE);
	struct stat fsb;
	assert_int_equal(lstat(unflagged, &fsb), -1);
	free(unflagged);
	hv_store *bad = NULL;
	assert_int_equal(hv_store_open(&bad, f->db, 0xF0), HV_EUSAGE);
	assert_null(bad);
	assert_non_null(strstr(hv_error_last(), "unknown flags"));
	char *missing = tu_path(f->dir, "no/such/file");
	assert_int_equal(hv_write_file(missing, "x", 1, 0), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "No such file or directory"));
	assert_int_equal(hv_write_file(NULL, "x", 1, 0), HV_EUSAGE);
	char *fresh = tu_path(f->dir, "fresh");
	check_ok(hv_write_file(fresh, "", 0, 0));
	size_t len = 1;
	char *got = read_file(fresh, &len);
	assert_int_equal(len, 0);
	free(got);
	free(fresh);
	free(missing);
	free(dangling);
	free(sock);
}

static int nobody_writes(void *arg)
{
	return hv_write_file(arg, "new bytes", 9, 0) == HV_OK ? 0 : 1;
}

/* A file this user may write, in a directory it may not: written in place (no temporary file
 * can be made beside it), not refused. */
static void test_write_file_unwritable_dir(void **state)
{
	fixture *f = *state;
	char *d = tu_path(f->dir, "ro");
	assert_int_equal(mkdir(d, 0755), 0);
	tu_write(d, "out.txt", "old", 3);
	char *out = tu_path(d, "out.txt");
	assert_int_equal(chown(out, 65534, 65534), 0);
	assert_int_equal(chmod(f->dir, 0755), 0);
	struct stat before, after;
	assert_int_equal(stat(out, &before), 0);
	assert_int_equal(tu_as_nobody(nobody_writes, out), 0);
	assert_int_equal(stat(out, &after), 0);
	assert_int_equal(after.st_ino, before.st_ino);
	size_t len;
	char *got = read_file(out, &len);
	assert_int_equal(len, 9);
	assert_memory_equal(got, "new bytes", 9);
	free(got);
	free(out);
	free(d);
}

/* ---- concurrency and crashes ---------------------------------------------------------------- */

typedef struct worker {
	const char *db;
	int tag;
	int rc;
	char msg[512];
} worker;

static int worker_round(hv_store *st, int tag, int i)
{
	char content[64], sha[65], path[64];
	snprintf(content, sizeof(content), "content %d %d", tag, i % 5);
	tu_sha256_hex(content, strlen(content), sha);
	snprintf(path, sizeof(path), "out/%d/%d.txt", tag, i);
	int64_t id;
	hv_run_start rs = {.label = tag ? "t1" : "t0", .dir = "/w"};
	int rc = hv_store_run_begin(st, &rs, &id);
	hv_artifact_in in = {.path = path, .path_len = strlen(path), .name = path + 4,
			     .name_len = strlen(path + 4), .mime_type = "text/plain",
			     .size = strlen(content), .sha256 = sha, .content = content,
			     .content_len = strlen(content)};
	hv_run_end end = {.has_exit_code = true, .duration_ms = 1};
	if (rc == HV_OK)
		rc = hv_store_run_finish(st, id, &end, &in, 1);
	int64_t now = hv_store_now_ns();
	for (int k = 0; rc == HV_OK && k < 40; k++) {
		hv_stat s = {.dev = (uint64_t)tag, .ino = (uint64_t)(i * 100 + k), .mode = S_IFREG,
			     .mtime_ns = now - 10 * NS, .ctime_ns = now - 10 * NS};
		rc = hv_store_mime_put(st, &s, "fp", "text/plain");
	}
	if (rc == HV_OK)
		rc = hv_store_flush(st);
	hv_snapshot_writer *w = NULL;
	if (rc == HV_OK)
		rc = hv_store_snapshot_begin(st, "/w", &w);
	for (int k = 0; rc == HV_OK && k < 300; k++) {
		snprintf(path, sizeof(path), "f%04d", k);
		hv_stat s = {.ino = (uint64_t)k};
		rc = hv_snapshot_writer_add(w, path, strlen(path), &s, NULL);
	}
	if (rc == HV_OK) {
		rc = hv_snapshot_writer_finish(w, &id);
		w = NULL;
	}
	hv_snapshot_writer_abort(w);
	return rc;
}

static void *worker_main(void *arg)
{
	worker *wk = arg;
	hv_store *st = NULL;
	wk->rc = hv_store_open(&st, wk->db, 0);
	for (int i = 0; wk->rc == HV_OK && i < 40; i++)
		wk->rc = worker_round(st, wk->tag, i);
	if (wk->rc != HV_OK)
		snprintf(wk->msg, sizeof(wk->msg), "%s", hv_error_last());
	int rc = hv_store_close(st);
	if (wk->rc == HV_OK)
		wk->rc = rc;
	return NULL;
}

static void test_concurrent_threads(void **state)
{
	fixture *f = *state;
	/* Both threads create the database at once, too. */
	worker wk[2] = {{.db = f->db, .tag = 0}, {.db = f->db, .tag = 1}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &wk[i]), 0);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		if (wk[i].rc != HV_OK)
			fail_msg("worker %d: %d %s", i, wk[i].rc, wk[i].msg);
	}
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM runs"), 80);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM artifacts"), 80);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM contents"), 10);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM snapshots WHERE complete"), 80);
	assert_int_equal(raw_int(f->db, "SELECT count(*) FROM mime_cache"), 2 * 40 * 40);
	hv_store *st = open_ok(f->db, 0);
	check_ok(hv_store_integrity_check(st));
	hv_run_filter rf = {.label = "t1"};
	assert_int_equal(count_runs(st, &rf, NULL), 40);
	check_ok(hv_store_close(st));
}

/* Processes opening a database that does not exist yet (or is an empty file) all at once: all
 * succeed, and none ever sees a half-made database (which it would refuse as foreign). */
static void test_concurrent_creation(void **state)
{
	fixture *f = *state;
	enum { PROCS = 6, ROUNDS = 15 };
	for (int round = 0; round < 2 * ROUNDS; round++) {
		char name[32];
		snprintf(name, sizeof(name), "c%d.db", round);
		char *db = tu_path(f->dir, name);
		if (round >= ROUNDS)
			tu_write(f->dir, name, "", 0);
		pid_t pids[PROCS];
		for (int k = 0; k < PROCS; k++) {
			pids[k] = fork();
			assert_true(pids[k] >= 0);
			if (pids[k] == 0) {
				hv_store *st = NULL;
				int64_t id;
				hv_run_start rs = {.dir = "/"};
				if (hv_store_open(&st, db, 0) != HV_OK ||
				    hv_store_run_begin(st, &rs, &id) != HV_OK) {
					fprintf(stderr, "round %d: %s\n", round, hv_error_last());
					_exit(1);
				}
				_exit(hv_store_close(st) == HV_OK ? 0 : 2);
			}
		}
		for (int k = 0; k < PROCS; k++) {
			int status;
			assert_int_equal(waitpid(pids[k], &status, 0), pids[k]);
			assert_true(WIFEXITED(status));
			assert_int_equal(WEXITSTATUS(status), 0);
		}
		assert_int_equal(raw_int(db, "SELECT count(*) FROM runs"), PROCS);
		assert_int_equal(raw_int(db, "PRAGMA application_id"), HV_STORE_APPLICATION_ID);
		/* A database created whole gets auto_vacuum; a claimed empty file cannot. */
		assert_int_equal(raw_int(db, "PRAGMA auto_vacuum"), round < ROUNDS ? 2 : 0);
		/* (A -wal file may stay: connections that close at the same time each leave the
		 * clean-up to the other, as SQLite does; the next one to close alone removes it.) */
		free(db);
	}
	/* No temporary left behind. */
	tu_result r;
	char *argv[] = {"sh", "-c", "ls -a | grep -c init", NULL};
	tu_run(&r, f->dir, NULL, argv);
	assert_string_equal(r.out, "0\n");
	tu_result_free(&r);
}

/* A child that writes as fast as it can until it is killed. */
static void crash_child(const char *db)
{
	hv_store *st = NULL;
	if (hv_store_open(&st, db, 0) != HV_OK)
		_exit(1);
	for (int i = 0;; i++) {
		hv_snapshot_writer *w;
		if (hv_store_snapshot_begin(st, "/crash", &w) != HV_OK)
			_exit(2);
		char p[32];
		for (int k = 0; k < 5000; k++) {
			snprintf(p, sizeof(p), "d/%06d", k);
			hv_stat s = {.ino = (uint64_t)k, .size = (uint64_t)i};
			if (hv_snapshot_writer_add(w, p, strlen(p), &s, NULL) != HV_OK)
				_exit(3);
		}
		int64_t id;
		if (hv_snapshot_writer_finish(w, &id) != HV_OK || worker_round(st, 7, i) != HV_OK)
			_exit(4);
	}
}

static void test_killed_writer(void **state)
{
	fixture *f = *state;
	make_db(f->db);
	for (int round = 0; round < 6; round++) {
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			crash_child(f->db);
		struct timespec ts = {0, (long)(30 + 37 * round) * 1000000L};
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		int status;
		waitpid(pid, &status, 0);
		if (!WIFSIGNALED(status))
			fail_msg("the writer stopped by itself: status %d", WEXITSTATUS(status));

		hv_store *st = open_ok(f->db, 0);
		check_ok(hv_store_integrity_check(st));
		/* Every visible snapshot is whole. */
		sqlite3 *h;
		assert_int_equal(sqlite3_open(f->db, &h), SQLITE_OK);
		sqlite3_stmt *q;
		assert_int_equal(sqlite3_prepare_v2(h,
			"SELECT s.id, s.entries, (SELECT count(e.mode) FROM snapshot_entries e"
			" WHERE e.snapshot_id = s.id) FROM snapshots s WHERE s.complete", -1, &q,
			NULL), SQLITE_OK);
		while (sqlite3_step(q) == SQLITE_ROW)
			assert_int_equal(sqlite3_column_int64(q, 1), sqlite3_column_int64(q, 2));
		sqlite3_finalize(q);
		/* Every finished run has its artifact; one the kill interrupted (ended by the open
		 * above as "interrupted") has none. */
		assert_int_equal(sqlite3_prepare_v2(h,
			"SELECT count(*) FROM runs r WHERE r.ended_at_ns IS NOT NULL AND"
			" (r.end_reason IS NULL) = NOT EXISTS (SELECT 1 FROM artifacts a"
			" WHERE a.run_id = r.id)", -1, &q, NULL), SQLITE_OK);
		assert_int_equal(sqlite3_step(q), SQLITE_ROW);
		assert_int_equal(sqlite3_column_int(q, 0), 0);
		sqlite3_finalize(q);
		sqlite3_close(h);
		check_ok(hv_store_close(st));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_new_database, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_file_is_new, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_readonly, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dangling_symlink_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_default_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_random_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_text_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_foreign_sqlite, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_tables_without_version, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_newer_schema, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_corrupt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_corrupt_adopted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_readonly, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damaged_not_written, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mime_cache, setup, teardown),
		cmocka_unit_test(test_path_cmp),
		cmocka_unit_test_setup_teardown(test_snapshot_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_large_and_interleaved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_runs_and_contents, setup, teardown),
		cmocka_unit_test_setup_teardown(test_history_filters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_history_dense_filters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune_many_runs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_creation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_killed_writer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migrate_v1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_interrupted_runs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune_spares_runs_in_progress, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune_keeps_a_fresh_snapshot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_name_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forged_content, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_recording, setup, teardown),
		cmocka_unit_test_setup_teardown(test_special_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_file_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_file_unwritable_dir, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
