/* The size of snapshots: a snapshot of a deep chain grows with its number of entries, not with
 * their depth (a path per entry would be quadratic: 5,000 levels of "d/" are 25 MB of paths),
 * and `collect --since` on it still finds what was made at the bottom. Also the migration of a
 * version 1 database, whose snapshots (transient) are dropped. */
#include "testutil.h"
#include "tjson.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harvest/store.h"

#define DEPTH 5000
/* Generous: an entry takes about 40 bytes of table, plus B-tree overhead. */
#define BYTES_PER_ENTRY 200

/* The chain dir/d/d/.../d (levels deep) with a file "f" at the bottom, made through directory
 * descriptors (the path is longer than PATH_MAX). Returns the bottom's descriptor. */
static int make_chain(const char *dir, int levels)
{
	int fd = tu_deep_dir(dir, "d", levels);
	tu_write_at(fd, "f", 0644, "bottom\n");
	return fd;
}

static off_t file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_size : 0;
}

/* The database's bytes on disk: the file and its -wal. */
static off_t db_bytes(const char *db)
{
	char wal[4096];
	snprintf(wal, sizeof(wal), "%s-wal", db);
	return file_size(db) + file_size(wal);
}

static tj_value *run_json(tu_result *r, const char *const *args)
{
	tu_harvestv(r, NULL, NULL, args);
	if (r->status != 0)
		fail_msg("%s: exit %d: %s", args[0], r->status, r->err);
	tj_value *doc = tj_parse(r->out, r->out_len);
	if (!doc)
		fail_msg("%s: output is not JSON: %.200s", args[0], r->out);
	return doc;
}

static void test_deep_chain(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *dir = tu_path(root, "t"), *db = tu_path(root, "h.db");
	tu_mkdir(root, "t");
	/* The database first (a snapshot of the empty tree), so only the chain's is measured. */
	tu_result r;
	const char *init[] = {"snapshot", "--db", db, dir, NULL};
	tj_free(run_json(&r, init));
	tu_result_free(&r);
	off_t before = db_bytes(db);
	int bottom = make_chain(dir, DEPTH);

	const char *snap[] = {"snapshot", "--db", db, dir, NULL};
	tj_value *doc = run_json(&r, snap);
	int64_t entries = tj_int(tj_get(doc, "entries"));
	assert_int_equal(entries, DEPTH + 1);
	char id[32];
	snprintf(id, sizeof(id), "%lld", (long long)tj_int(tj_get(doc, "snapshot_id")));
	tj_free(doc);
	tu_result_free(&r);
	off_t grown = db_bytes(db) - before;
	print_message("[   INFO   ] a snapshot of %d levels: %lld bytes\n", DEPTH, (long long)grown);
	if (grown > (off_t)entries * BYTES_PER_ENTRY)
		fail_msg("the snapshot of %lld entries takes %lld bytes: more than %d an entry",
			 (long long)entries, (long long)grown, BYTES_PER_ENTRY);

	/* A file made at the bottom, and one changed there, are all collect --since finds. */
	int f = openat(bottom, "new", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(f >= 0);
	assert_int_equal(write(f, "new\n", 4), 4);
	close(f);
	f = openat(bottom, "f", O_WRONLY | O_APPEND | O_CLOEXEC);
	assert_true(f >= 0);
	assert_int_equal(write(f, "more\n", 5), 5);
	close(f);
	close(bottom);
	const char *since[] = {"collect", "--since", id, "--no-content", "--no-history",
			       "--db",    db,    dir,  NULL};
	doc = run_json(&r, since);
	const tj_value *files = tj_get(doc, "output_files");
	assert_int_equal(tj_len(files), 2);
	for (size_t i = 0; i < 2; i++) {
		size_t len;
		const char *p = tj_str(tj_get(tj_at(files, i), "path"), &len);
		assert_non_null(p);
		const char *name = i == 0 ? "f" : "new";
		assert_int_equal(len, 2 * DEPTH + strlen(name));
		for (size_t k = 0; k < 2 * DEPTH; k += 2)
			if (p[k] != 'd' || p[k + 1] != '/')
				fail_msg("output file %zu: not the chain's path at byte %zu", i, k);
		assert_memory_equal(p + 2 * DEPTH, name, strlen(name));
	}
	assert_int_equal(tj_len(tj_get(doc, "skipped")), 0);
	tj_free(doc);
	tu_result_free(&r);
	free(dir);
	free(db);
}

/* A version 2 database (each snapshot entry a whole path; versions 1 and 2 store snapshots
 * alike) is migrated: its snapshots are
 * dropped, the rest kept, and new snapshots work. */
static void test_migration_from_v2(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *dir = tu_path(root, "t"), *db = tu_path(root, "h.db");
	tu_mkdir(root, "t");
	tu_write(dir, "a.txt", "a\n", 2);
	tu_result r;
	const char *col[] = {"collect", "--db", db, dir, NULL};
	tj_free(run_json(&r, col));
	tu_result_free(&r);

	/* Back to version 2: its snapshot_entries table, one snapshot in it. */
	sqlite3 *h;
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	char *err = NULL;
	int rc = sqlite3_exec(h,
		"BEGIN;"
		/* version 7's snapshot filters, version 6's MIME cache columns, version 5's host
		 * and identity, and version 4's columns, which version 2 did not have */
		"ALTER TABLE snapshots DROP COLUMN filters;"
		"ALTER TABLE snapshots DROP COLUMN unread;"
		"ALTER TABLE mime_cache DROP COLUMN refined_name;"
		"ALTER TABLE mime_cache DROP COLUMN refined_type;"
		"ALTER TABLE mime_cache DROP COLUMN refine_fp;"
		"DROP INDEX runs_host;"
		"ALTER TABLE runs DROP COLUMN host;"
		"DROP TABLE store_identity;"
		"ALTER TABLE runs DROP COLUMN deleted;"
		"ALTER TABLE artifacts DROP COLUMN change;"
		"DROP TABLE snapshot_entries;"
		"CREATE TABLE snapshot_entries ("
		"  snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,"
		"  path BLOB NOT NULL, dev INTEGER NOT NULL, ino INTEGER NOT NULL,"
		"  size INTEGER NOT NULL, mode INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,"
		"  ctime_ns INTEGER NOT NULL, sha256 TEXT, PRIMARY KEY (snapshot_id, path)"
		") WITHOUT ROWID;"
		"INSERT INTO snapshots(id, root, created_at_ns, entries, complete)"
		" VALUES (7, CAST('/old' AS BLOB), 1, 1, 1);"
		"INSERT INTO snapshot_entries VALUES (7, CAST('x' AS BLOB), 1, 2, 3, 32768, 4, 5,"
		" NULL);"
		"PRAGMA user_version = 2;"
		"COMMIT;", NULL, NULL, &err);
	if (rc != SQLITE_OK)
		fail_msg("downgrade: %s", err);
	sqlite3_close(h);

	/* The old snapshot is gone (not a crash on its rows), the history is kept. */
	const char *old[] = {"collect", "--since", "7", "--db", db, dir, NULL};
	tu_harvestv(&r, NULL, NULL, old);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "no snapshot 7"));
	tu_result_free(&r);
	const char *runs[] = {"history", "runs", "--db", db, NULL};
	tj_value *doc = run_json(&r, runs);
	assert_int_equal(tj_len(doc), 1);
	tj_free(doc);
	tu_result_free(&r);
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_prepare_v2(h, "PRAGMA user_version", -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(q, 0), HV_STORE_SCHEMA_VERSION);
	sqlite3_finalize(q);
	sqlite3_close(h);

	/* And new snapshots work. */
	const char *snap[] = {"snapshot", "--db", db, dir, NULL};
	doc = run_json(&r, snap);
	char id[32];
	snprintf(id, sizeof(id), "%lld", (long long)tj_int(tj_get(doc, "snapshot_id")));
	tj_free(doc);
	tu_result_free(&r);
	tu_write(dir, "b.txt", "b\n", 2);
	const char *since[] = {"collect", "--since", id, "--db", db, dir, NULL};
	doc = run_json(&r, since);
	assert_int_equal(tj_len(tj_get(doc, "output_files")), 1);
	assert_string_equal(tj_str(tj_get(tj_at(tj_get(doc, "output_files"), 0), "path"), NULL),
			    "b.txt");
	tj_free(doc);
	tu_result_free(&r);
	free(dir);
	free(db);
}

/* A snapshot taken by a harvest of schema version 6, which recorded no filters, is kept by
 * the upgrade, and a collect --since of it is not checked for them; one taken since is. */
static void test_migration_from_v6(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *dir = tu_path(root, "t"), *db = tu_path(root, "h.db");
	tu_mkdir(root, "t");
	tu_write(dir, "a.txt", "a\n", 2);
	tu_write(dir, ".env", "x=1\n", 4);
	tu_result r;
	const char *snap[] = {"snapshot", "--db", db, dir, NULL};
	tj_value *doc = run_json(&r, snap);
	char id[32];
	snprintf(id, sizeof(id), "%lld", (long long)tj_int(tj_get(doc, "snapshot_id")));
	tj_free(doc);
	tu_result_free(&r);

	sqlite3 *h;
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	char *err = NULL;
	if (sqlite3_exec(h, "ALTER TABLE snapshots DROP COLUMN filters;"
			    "ALTER TABLE snapshots DROP COLUMN unread; PRAGMA user_version = 6;",
			 NULL, NULL, &err) != SQLITE_OK)
		fail_msg("downgrade: %s", err);
	sqlite3_close(h);

	/* Unchecked: the hidden file it did not see is called created, as before. */
	const char *hidden[] = {"collect", "--include-hidden", "--since", id, "--db", db, dir, NULL};
	doc = run_json(&r, hidden);
	assert_int_equal(tj_len(tj_get(doc, "output_files")), 1);
	assert_string_equal(tj_str(tj_get(tj_at(tj_get(doc, "output_files"), 0), "path"), NULL),
			    ".env");
	tj_free(doc);
	tu_result_free(&r);
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_prepare_v2(h, "SELECT (SELECT user_version FROM pragma_user_version),"
					       " count(*), count(filters) FROM snapshots", -1, &q,
					    NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(q, 0), HV_STORE_SCHEMA_VERSION);
	assert_int_equal(sqlite3_column_int(q, 1), 1);
	assert_int_equal(sqlite3_column_int(q, 2), 0);
	sqlite3_finalize(q);
	sqlite3_close(h);

	/* A new snapshot records its filters, and the same collect is refused. */
	doc = run_json(&r, snap);
	snprintf(id, sizeof(id), "%lld", (long long)tj_int(tj_get(doc, "snapshot_id")));
	tj_free(doc);
	tu_result_free(&r);
	tu_harvestv(&r, NULL, NULL, hidden);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "; this collect has --include-hidden:"));
	tu_result_free(&r);
	free(dir);
	free(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_deep_chain, tu_cleanup),
		cmocka_unit_test_teardown(test_migration_from_v2, tu_cleanup),
		cmocka_unit_test_teardown(test_migration_from_v6, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
