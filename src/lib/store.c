/* The store's shared core: the cached statements and the SQLite helpers every store module
 * uses (errors, transactions, integrity checks). Finding and opening the database file is in
 * store_open.c, the schema and its migrations in store_schema.c, the MIME cache in
 * store_mime.c, snapshots in store_snapshot.c, and runs, artifacts, contents and prune in
 * store_history.c (SQLite) and store_pg.c (PostgreSQL). */
#include "store_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <time.h>

/* ---- Cached statements ------------------------------------------------------------------ */

static const char *const stmt_sql[STMT__COUNT] = {
	[STMT_BEGIN] = "BEGIN IMMEDIATE",
	[STMT_COMMIT] = "COMMIT",
	[STMT_ROLLBACK] = "ROLLBACK",
	[STMT_MIME_GET] = "SELECT ftype, size, mtime_ns, ctime_ns, fingerprint, mime_type,"
			  " cached_at_ns, sha256, refined_name, refined_type, refine_fp"
			  " FROM mime_cache WHERE dev = ?1 AND ino = ?2",
	[STMT_MIME_PUT] = "INSERT OR REPLACE INTO mime_cache(dev, ino, ftype, size, mtime_ns,"
			  " ctime_ns, fingerprint, mime_type, cached_at_ns, sha256, refined_name,"
			  " refined_type, refine_fp)"
			  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
	[STMT_SNAP_ENTRY_PUT] = "INSERT INTO snapshot_entries(snapshot_id, parent, name, id, dev,"
				" ino, size, mode, mtime_ns, ctime_ns, sha256)"
				" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
				" ON CONFLICT (snapshot_id, parent, name) DO UPDATE SET"
				" dev = excluded.dev, ino = excluded.ino, size = excluded.size,"
				" mode = excluded.mode, mtime_ns = excluded.mtime_ns,"
				" ctime_ns = excluded.ctime_ns, sha256 = excluded.sha256"
				" WHERE snapshot_entries.mode IS NULL",
	/* A directory's entries in name order, each with whether entries lie below it. */
	[STMT_SNAP_PAGE_FIRST] = "SELECT name, id, dev, ino, size, mode, mtime_ns, ctime_ns,"
				 " sha256, EXISTS (SELECT 1 FROM snapshot_entries c"
				 " WHERE c.snapshot_id = ?1 AND c.parent = e.id)"
				 " FROM snapshot_entries e"
				 " WHERE snapshot_id = ?1 AND parent = ?2 ORDER BY name LIMIT ?3",
	[STMT_SNAP_PAGE_NEXT] = "SELECT name, id, dev, ino, size, mode, mtime_ns, ctime_ns,"
				" sha256, EXISTS (SELECT 1 FROM snapshot_entries c"
				" WHERE c.snapshot_id = ?1 AND c.parent = e.id)"
				" FROM snapshot_entries e"
				" WHERE snapshot_id = ?1 AND parent = ?2 AND name > ?4"
				" ORDER BY name LIMIT ?3",
	[STMT_SNAP_LOOKUP] = "SELECT id, dev, ino, size, mode, mtime_ns, ctime_ns, sha256"
			     " FROM snapshot_entries"
			     " WHERE snapshot_id = ?1 AND parent = ?2 AND name = ?3",
	[STMT_CONTENT_PUT] = "INSERT OR IGNORE INTO contents(sha256, size, bytes)"
			     " VALUES (?1, ?2, ?3)",
	[STMT_CONTENT_GET] = "SELECT rowid, length(bytes) FROM contents WHERE sha256 = ?1",
	[STMT_ARTIFACT_PUT] = "INSERT INTO artifacts(run_id, path, name, mime_type, size, sha256,"
			      " recorded_at_ns, content_stored, change)"
			      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
};

/* ---- Shared helpers --------------------------------------------------------------------- */

int64_t hv_store_now_ns(void)
{
	return hv_clock_ns(CLOCK_REALTIME);
}

hv_status hvst_db_error(hv_store *st, int rc, const char *what)
{
	int call_errno = errno; /* first: the failed write's, for an I/O error (below) */
	const char *path = st && st->path ? st->path : "database";
	const char *raw = st && st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc);
	/* SQLite's message may quote bytes of a damaged file: keep the error on one line and
	 * free of control characters. */
	char msg[512];
	size_t k = 0;
	for (const char *p = raw ? raw : ""; *p && k + 1 < sizeof(msg); p++) {
		bool control = (unsigned char)*p < 0x20 || *p == 0x7f;
		msg[k++] = *p;
		if (control)
			msg[k - 1] = '?';
	}
	msg[k] = '\0';
	switch (rc & 0xff) {
	case SQLITE_NOMEM: {
		/* Memory may really be short (`ulimit -v`, a large result held: SQLite may have
		 * asked for tens of MiB at once), and then that is all it says. Else a damaged
		 * schema page, which makes SQLite report NOMEM too: name the file, and write no
		 * more to it, as for a corrupt one. The probe is address space only, never
		 * touched; called through a volatile pointer, so the compiler cannot drop it as
		 * an allocation nobody uses. */
		void *(*volatile alloc)(size_t) = malloc;
		void *probe = alloc(64u << 20);
		bool short_of_memory = !probe;
		free(probe);
		if (short_of_memory)
			return hv_error_set(HV_ENOMEM, "%s: %s: out of memory", path, what);
		if (st)
			st->damaged = true;
		return hv_error_set(HV_EDB, "%s: %s: out of memory (is the database damaged?)",
				    path, what);
	}
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		if (st)
			st->damaged = true;
		return hv_error_set(HV_EDB, "%s: database is corrupt (%s)", path, msg);
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return hv_error_set(HV_EDB, "%s: %s: the database is locked (busy for more than %d s)",
				    path, what, ST_BUSY_TIMEOUT_MS / 1000);
	case SQLITE_READONLY:
		return hv_error_set(HV_EDB, "%s: read-only database (%s)", path, msg);
	case SQLITE_FULL:
		return hv_error_set(HV_EDB, "%s: disk full (%s)", path, msg);
	case SQLITE_IOERR:
	case SQLITE_CANTOPEN: {
		/* "disk I/O error" and "unable to open database file" alone hide the reason the
		 * system gave: EFBIG past `ulimit -f`, EIO, EROFS; EMFILE under a low `ulimit -n`.
		 * SQLite keeps it for some failures; for a failed write it is still errno here,
		 * and only a write's own reasons are taken from there. */
		int err = st && st->db ? sqlite3_system_errno(st->db) : 0;
		if (!err && (rc & 0xff) == SQLITE_IOERR && (call_errno == EFBIG || call_errno == EIO || call_errno == EROFS ||
			     call_errno == EDQUOT || call_errno == ENOSPC))
			err = call_errno;
		if (err)
			return hv_error_set(HV_EDB, "%s: %s: %s (%s)", path, what, msg,
					    strerror(err));
		return hv_error_set(HV_EDB, "%s: %s: %s", path, what, msg);
	}
	default:
		return hv_error_set(HV_EDB, "%s: %s: %s", path, what, msg);
	}
}

/* HV_EDB "<path>: database is corrupt (<report on one line>)", and no MIME answer is written
 * to the file from then on, as for SQLite's own SQLITE_CORRUPT. */
static hv_status check_failed(hv_store *st, const char *report)
{
	/* "*** in database main ***\nPage 3: ..." becomes "Page 3: ...; ...": one line. */
	static const char banner[] = "*** in database main ***";
	char line[512];
	size_t n = 0;
	if (!report)
		report = "no answer";
	if (strncmp(report, banner, sizeof(banner) - 1) == 0)
		report += sizeof(banner) - 1;
	for (const char *p = report; *p && n + 3 < sizeof(line); p++) {
		if (*p == '\n' || *p == '\r') {
			if (n && line[n - 1] != ' ' && p[1])
				line[n++] = ';', line[n++] = ' ';
		} else if ((unsigned char)*p >= 0x20) {
			line[n++] = *p;
		}
	}
	line[n] = '\0';
	st->damaged = true;
	return hv_error_set(HV_EDB, "%s: database is corrupt (%s)", st->path, line);
}

hv_status hvst_check_integrity(hv_store *st, bool full, const char *table)
{
	/* The argument is the first line of the report: "ok" alone, or the first thing wrong.
	 * A table name, when given, is one of harvest's own (never the user's). */
	char sql[64];
	snprintf(sql, sizeof(sql), "PRAGMA %s(%s)", full ? "integrity_check" : "quick_check",
		 table ? table : "1");
	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(st->db, sql, -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot check the database");
	src = sqlite3_step(q);
	int rc = HV_OK;
	if (src != SQLITE_ROW) {
		rc = hvst_db_error(st, src, "cannot check the database");
	} else {
		const char *res = (const char *)sqlite3_column_text(q, 0);
		if (!res || strcmp(res, "ok") != 0)
			rc = check_failed(st, res);
	}
	sqlite3_finalize(q);
	return rc;
}

sqlite3_stmt *hvst_stmt(hv_store *st, enum st_stmt which)
{
	if (!st->stmt[which]) {
		int rc = sqlite3_prepare_v3(st->db, stmt_sql[which], -1,
					    SQLITE_PREPARE_PERSISTENT, &st->stmt[which], NULL);
		if (rc != SQLITE_OK) {
			hvst_db_error(st, rc, "cannot prepare a statement");
			st->stmt[which] = NULL;
			return NULL;
		}
	}
	return st->stmt[which];
}

hv_status hvst_exec(hv_store *st, const char *sql, const char *what)
{
	int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
	return rc == SQLITE_OK ? HV_OK : hvst_db_error(st, rc, what);
}

int hvst_step_done(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);
	sqlite3_reset(s);
	return rc == SQLITE_ROW ? SQLITE_DONE : rc;
}

static hv_status run_cached(hv_store *st, enum st_stmt which, const char *what)
{
	sqlite3_stmt *s = hvst_stmt(st, which);
	if (!s)
		return hv_error_last_status();
	int rc = sqlite3_step(s);
	sqlite3_reset(s);
	return rc == SQLITE_DONE ? HV_OK : hvst_db_error(st, rc, what);
}

hv_status hvst_tx_begin(hv_store *st)
{
	if (st->in_tx)
		return hv_error_set(HV_EUSAGE, "%s: a write transaction is already open", st->path);
	int rc = run_cached(st, STMT_BEGIN, "cannot begin a transaction");
	if (rc == HV_OK)
		st->in_tx = true;
	return rc;
}

void hvst_tx_rollback(hv_store *st)
{
	st->in_tx = false;
	/* SQLite rolls back by itself after some errors (SQLITE_FULL, SQLITE_IOERR, ...). */
	if (!sqlite3_get_autocommit(st->db)) {
		sqlite3_stmt *s = hvst_stmt(st, STMT_ROLLBACK);
		if (s) {
			sqlite3_step(s);
			sqlite3_reset(s);
		} else {
			sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
		}
	}
}

hv_status hvst_tx_commit(hv_store *st)
{
	int rc = run_cached(st, STMT_COMMIT, "cannot commit");
	if (rc != HV_OK) {
		hv_error_saved saved;
		hv_error_save(&saved);
		hvst_tx_rollback(st);
		return hv_error_restore(&saved, rc);
	}
	st->in_tx = false;
	return HV_OK;
}

hv_status hvst_check_writable(hv_store *st)
{
	if (st->readonly)
		return hv_error_set(HV_EUSAGE, "%s: the database was opened read-only", st->path);
	return HV_OK;
}

hv_status hvst_hex_norm(const char *in, bool full, char out[65])
{
	size_t n = in ? strlen(in) : 0;
	if (n == 0 || n > 64 || (full && n != 64))
		goto bad;
	for (size_t i = 0; i < n; i++) {
		char c = in[i];
		if (c >= 'A' && c <= 'F')
			c = (char)(c - 'A' + 'a');
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			goto bad;
		out[i] = c;
	}
	out[n] = '\0';
	return HV_OK;
bad:
	return hv_error_set(HV_EUSAGE, "%s: not a SHA-256 %s", in ? in : "(null)",
			    full ? "(64 hex digits)" : "(hex digits)");
}

int hvst_bind_bytes(sqlite3_stmt *s, int idx, const void *p, size_t len)
{
	static const char empty[1];
	return sqlite3_bind_blob64(s, idx, len ? p : empty, len, SQLITE_STATIC);
}


int hv_store_path_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t n = alen < blen ? alen : blen;
	size_t i = 0;
	/* The common prefix 8 bytes at a time: in a deep tree, a path and the next share
	 * almost all of it, and `collect --since` compares one per entry. */
	while (i + 8 <= n) {
		uint64_t x, y;
		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		if (x != y)
			break;
		i += 8;
	}
	for (; i < n; i++) {
		unsigned ca = a[i] == '/' ? 0u : (unsigned char)a[i];
		unsigned cb = b[i] == '/' ? 0u : (unsigned char)b[i];
		if (ca != cb)
			return ca < cb ? -1 : 1;
	}
	return alen < blen ? -1 : alen > blen ? 1 : 0;
}

hv_status hvst_query_int(hv_store *st, const char *sql, int64_t *out)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return hvst_db_error(st, rc, "cannot read the database");
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*out = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return rc == SQLITE_ROW ? HV_OK : hvst_db_error(st, rc, "cannot read the database");
}
