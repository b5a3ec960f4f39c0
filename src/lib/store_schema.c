/* The store's SQLite schema: every version's tables, and the migrations from one to the
 * next (applied in one transaction when the database is opened for writing). */
#include "store_internal.h"

#include <stdio.h>

/* ---- Schema ----------------------------------------------------------------------------- */

/* Version 1. Large values (stdout/stderr, contents) live in their own tables or last in a row,
 * so scanning the small columns never walks a BLOB's overflow pages. Paths and names are BLOBs:
 * they are bytes, not necessarily UTF-8. */
static const char schema_v1[] =
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
	/* --mime: the exact types its pattern selects, each a seek here (hv_store_artifacts). */
	"CREATE INDEX artifacts_mime ON artifacts(mime_type);"
	"CREATE INDEX artifacts_name ON artifacts(name);"
	"CREATE INDEX artifacts_sha256 ON artifacts(sha256);"
	"CREATE INDEX artifacts_recorded ON artifacts(recorded_at_ns);"
	"CREATE TABLE contents ("
	"  sha256 TEXT PRIMARY KEY,"
	"  size INTEGER NOT NULL,"
	"  bytes BLOB NOT NULL"
	");";

/* Version 2: ids are never reused, and runs have owners.
 * - runs and artifacts become AUTOINCREMENT (SQLite's sqlite_sequence keeps the highest id
 *   ever given), so a run or artifact id pruned away is never given to another one, and a
 *   stale `history get N` cannot serve someone else's bytes. A column cannot be made
 *   AUTOINCREMENT in place: both tables are rebuilt (SQLite's documented procedure, with
 *   foreign keys off during migrations, see hvst_migrate()), keeping every id.
 * - runs.owner names the process that runs the run (hvst_owner_self()), so a run left unended
 *   by a killed harvest can be told from one in progress; end_reason says why a run ended
 *   when it was not the command's own end ("interrupted", "not_recorded"). runs_open finds the
 *   unended runs without a scan.
 * - snapshot_owners: the owner of each snapshot, so prune keeps the snapshot of a run in
 *   progress. A table of its own (filled by a trigger, see set_owner()), so the snapshot
 *   tables are left as they are. */
static const char schema_v2[] =
	"CREATE TABLE runs_v2 ("
	"  id INTEGER PRIMARY KEY AUTOINCREMENT,"
	"  label BLOB,"
	"  command TEXT,"
	"  dir BLOB NOT NULL,"
	"  started_at_ns INTEGER NOT NULL,"
	"  ended_at_ns INTEGER,"
	"  exit_code INTEGER,"
	"  timed_out INTEGER NOT NULL DEFAULT 0,"
	"  duration_ms INTEGER,"
	"  stdout_truncated INTEGER NOT NULL DEFAULT 0,"
	"  stderr_truncated INTEGER NOT NULL DEFAULT 0,"
	"  skipped TEXT,"
	"  end_reason TEXT,"                   /* NULL: the command's own end, fully recorded */
	"  owner TEXT"                         /* NULL: unknown (recorded by schema version 1) */
	");"
	"INSERT INTO runs_v2(id, label, command, dir, started_at_ns, ended_at_ns, exit_code,"
	"  timed_out, duration_ms, stdout_truncated, stderr_truncated, skipped)"
	"  SELECT id, label, command, dir, started_at_ns, ended_at_ns, exit_code, timed_out,"
	"  duration_ms, stdout_truncated, stderr_truncated, skipped FROM runs;"
	"DROP TABLE runs;"
	"ALTER TABLE runs_v2 RENAME TO runs;"
	"CREATE INDEX runs_started ON runs(started_at_ns);"
	"CREATE INDEX runs_label ON runs(label);"
	"CREATE INDEX runs_open ON runs(id) WHERE ended_at_ns IS NULL;"
	"CREATE TABLE artifacts_v2 ("
	"  id INTEGER PRIMARY KEY AUTOINCREMENT,"
	"  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
	"  path BLOB NOT NULL,"
	"  name BLOB NOT NULL,"
	"  mime_type TEXT NOT NULL,"
	"  size INTEGER NOT NULL,"
	"  sha256 TEXT NOT NULL,"
	"  recorded_at_ns INTEGER NOT NULL,"
	"  content_stored INTEGER NOT NULL DEFAULT 0"
	");"
	"INSERT INTO artifacts_v2(id, run_id, path, name, mime_type, size, sha256, recorded_at_ns,"
	"  content_stored) SELECT id, run_id, path, name, mime_type, size, sha256, recorded_at_ns,"
	"  content_stored FROM artifacts;"
	"DROP TABLE artifacts;"
	"ALTER TABLE artifacts_v2 RENAME TO artifacts;"
	"CREATE INDEX artifacts_run ON artifacts(run_id DESC);"
	"CREATE INDEX artifacts_mime ON artifacts(mime_type);"
	"CREATE INDEX artifacts_name ON artifacts(name);"
	"CREATE INDEX artifacts_sha256 ON artifacts(sha256);"
	"CREATE INDEX artifacts_recorded ON artifacts(recorded_at_ns);"
	"CREATE TABLE snapshot_owners ("
	"  snapshot_id INTEGER PRIMARY KEY REFERENCES snapshots(id) ON DELETE CASCADE,"
	"  owner TEXT NOT NULL"
	");";

/* Version 3: a snapshot entry is its directory's entry's id and its own name, not its whole
 * path, so a snapshot grows with the number of entries, not with their depth (store_snapshot.c).
 * Snapshots are transient (a run's is deleted when it ends; `snapshot` ones are for a collect
 * soon after): the old ones are dropped, not converted. */
static const char schema_v3_snapshot_entries[] =
	"DROP TABLE snapshot_entries;"
	"DELETE FROM snapshot_owners;"
	"DELETE FROM snapshots;"
	/* id: given in the order the entries were added, unique in the snapshot; parent: its
	 * directory's id, 0 for the root. The state columns are NULL for a directory that was not
	 * added itself, only there for the entries below it. */
	"CREATE TABLE snapshot_entries ("
	"  snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,"
	"  parent INTEGER NOT NULL,"
	"  name BLOB NOT NULL,"
	"  id INTEGER NOT NULL,"
	"  dev INTEGER,"
	"  ino INTEGER,"
	"  size INTEGER,"
	"  mode INTEGER,"
	"  mtime_ns INTEGER,"
	"  ctime_ns INTEGER,"
	"  sha256 TEXT,"
	"  PRIMARY KEY (snapshot_id, parent, name)"
	") WITHOUT ROWID;";

/* Version 4: what a run changed. A run's regular files that are gone (`deleted`, a JSON array
 * of paths; NULL for a collect of everything, which compares against nothing) and how each
 * artifact changed (`change`: 'created' or 'modified'; NULL likewise). */
static const char schema_v4_changes[] =
	"ALTER TABLE runs ADD COLUMN deleted TEXT;"
	"ALTER TABLE artifacts ADD COLUMN change TEXT;";

/* Version 5: runs.host, the host a run was recorded on (the hostname, or `--host NAME`), so a
 * history pushed into a fleet database, or queried with --host, says where each run ran. NULL
 * for runs recorded before. store_identity: a random id made with the database, so a run
 * pushed into a fleet database (`history push`) names its origin (host, database, local id)
 * and a second push recognises it. */
static const char schema_v5_host[] =
	"ALTER TABLE runs ADD COLUMN host TEXT;"
	"CREATE INDEX runs_host ON runs(host);"
	"CREATE TABLE store_identity (uuid TEXT NOT NULL);"
	"INSERT INTO store_identity VALUES (lower(hex(randomblob(16))));";

/* Version 6: a MIME cache row also keeps its answer refined by a file name: the base name
 * (refined_name, bytes), the refined type and the fingerprint of the refinement tables it was
 * made with (refine_fp: shared-mime-info's files and the built-in table). A hit under the same
 * name and tables is answered without reading shared-mime-info; any other name is refined
 * again. NULL for rows cached before, or by a caller that does not refine. */
static const char schema_v6_mime_refined[] =
	"ALTER TABLE mime_cache ADD COLUMN refined_name BLOB;"
	"ALTER TABLE mime_cache ADD COLUMN refined_type TEXT;"
	"ALTER TABLE mime_cache ADD COLUMN refine_fp TEXT;";

/* Version 7: the filters a snapshot was taken with (include_hidden, xdev, the excludes: see
 * hvc_filters_key()), so a collect --since with other filters, which would call the entries
 * only it sees created, is refused; NULL for snapshots taken before, which are not checked.
 * And the directories the snapshot could not read (their paths, each ended by a NUL; NULL:
 * none), so a collect says that the files below them are called created only for want of a
 * before-state. */
static const char schema_v7_snapshot_filters[] =
	"ALTER TABLE snapshots ADD COLUMN filters BLOB;"
	"ALTER TABLE snapshots ADD COLUMN unread BLOB;";

/* Step i brings the schema from version i to i + 1. Only ever append. */
static const char *const migrations[] = {
	schema_v1,
	schema_v2,
	schema_v3_snapshot_entries,
	schema_v4_changes,
	schema_v5_host,
	schema_v6_mime_refined,
	schema_v7_snapshot_filters,
};
_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == HV_STORE_SCHEMA_VERSION,
	       "one migration step per schema version");

hv_status hvst_refuse_newer(hv_store *st, int64_t version)
{
	return hv_error_set(HV_EDB, "%s: made by a newer harvest (schema version %lld; this one "
			    "knows up to %d)", st->path, (long long)version,
			    HV_STORE_SCHEMA_VERSION);
}

/* Runs the missing migration steps, all in one transaction. Foreign keys are off meanwhile
 * (the pragma is a no-op inside a transaction, hence around it): a step that rebuilds a table
 * drops the old one, and with them on that drop would first delete, by cascade, every row
 * referring to it. The result is checked (foreign_key_check) before the commit. */
static hv_status migrate_steps(hv_store *st);

hv_status hvst_migrate(hv_store *st)
{
	int rc = hvst_exec(st, "PRAGMA foreign_keys = OFF", "cannot upgrade the schema");
	if (rc == HV_OK)
		rc = migrate_steps(st);
	int on = hvst_exec(st, "PRAGMA foreign_keys = ON", "cannot upgrade the schema");
	return rc != HV_OK ? rc : on;
}

static hv_status migrate_steps(hv_store *st)
{
	int rc = hvst_tx_begin(st);
	if (rc != HV_OK)
		return rc;
	int64_t version = 0;
	rc = hvst_query_int(st, "PRAGMA user_version", &version); /* again, under the write lock */
	if (rc == HV_OK && version > HV_STORE_SCHEMA_VERSION)
		rc = hvst_refuse_newer(st, version);
	for (int64_t v = version; rc == HV_OK && v >= 0 && v < HV_STORE_SCHEMA_VERSION; v++)
		rc = hvst_exec(st, migrations[v], "cannot create the schema");
	if (rc == HV_OK && version < HV_STORE_SCHEMA_VERSION) {
		sqlite3_stmt *fk = NULL;
		int src = sqlite3_prepare_v2(st->db, "PRAGMA foreign_key_check", -1, &fk, NULL);
		if (src == SQLITE_OK)
			src = sqlite3_step(fk);
		if (src == SQLITE_ROW)
			rc = hv_error_set(HV_EDB, "%s: cannot upgrade the schema: a row of %s refers "
					  "to nothing", st->path, sqlite3_column_text(fk, 0));
		else if (src != SQLITE_DONE)
			rc = hvst_db_error(st, src, "cannot upgrade the schema");
		sqlite3_finalize(fk);
	}
	if (rc == HV_OK && version < HV_STORE_SCHEMA_VERSION) {
		char sql[64];
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", HV_STORE_SCHEMA_VERSION);
		rc = hvst_exec(st, sql, "cannot create the schema");
	}
	if (rc != HV_OK) {
		hvst_tx_rollback(st);
		return rc;
	}
	return hvst_tx_commit(st);
}
