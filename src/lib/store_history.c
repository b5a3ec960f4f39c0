/* The history: runs, their artifacts, the deduplicated contents, queries and prune. */
#include "fdio.h"
#include "sha256.h"
#include "store_internal.h"
#include "utf8.h"

#include <limits.h>

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Unfinished snapshots older than this were abandoned by a killed process. */
#define STALE_SNAPSHOT_NS (INT64_C(3600) * 1000000000)

/* ---- Owners ----------------------------------------------------------------------------- */

/* Field 22 of /proc/PID/stat, the start time in clock ticks since boot: with the pid, it names
 * one process (a reused pid has another start time). 0 when it cannot be read. The command
 * name (field 2) may hold spaces and parentheses: count from the last ')'. */
static unsigned long long proc_start_time(long pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if (hv_read_small(path, buf, sizeof(buf)) <= 0)
		return 0;
	const char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	p++;
	/* After ')': field 3 (state) is the first; field 22 is the twentieth. */
	for (int field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p)
		return 0;
	return strtoull(p + 1, NULL, 10);
}

char *hvst_owner_self(void)
{
	char boot[64], ns[64], host[256];
	ssize_t n = hv_read_small("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
	if (n <= 0)
		return NULL;
	boot[strcspn(boot, "\n")] = '\0';
	ssize_t k = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
	if (k <= 0)
		return NULL;
	ns[k] = '\0';
	unsigned long long start = proc_start_time((long)getpid());
	if (!start || gethostname(host, sizeof(host)) != 0)
		return NULL;
	host[sizeof(host) - 1] = '\0';
	/* "pid:[4026531836]": the namespace's inode. */
	const char *ino = strchr(ns, '[');
	hv_buf b = {0};
	if (hv_buf_printf(&b, "%ld %llu %s %s %s", (long)getpid(), start,
			  ino ? ino + 1 : ns, boot, host) != HV_OK) {
		hv_buf_free(&b);
		return NULL;
	}
	char *close_br = strchr(b.data, ']');
	if (close_br)
		memmove(close_br, close_br + 1, strlen(close_br + 1) + 1);
	return b.data;
}

typedef struct owner_id {
	long pid;
	unsigned long long start;
	char ns[32];
	char boot[64];
	const char *host;   /* the rest of the string */
} owner_id;

/* The next space-separated word of *s into out (at most cap - 1 bytes); false when none. */
static bool next_word(const char **s, char *out, size_t cap)
{
	const char *p = *s;
	size_t n = strcspn(p, " ");
	if (n == 0 || n >= cap)
		return false;
	memcpy(out, p, n);
	out[n] = '\0';
	*s = p[n] ? p + n + 1 : p + n;
	return true;
}

static bool owner_parse(const char *s, owner_id *o)
{
	char pid[24], start[24];
	if (!s || !next_word(&s, pid, sizeof(pid)) || !next_word(&s, start, sizeof(start)) ||
	    !next_word(&s, o->ns, sizeof(o->ns)) || !next_word(&s, o->boot, sizeof(o->boot)))
		return false;
	char *end;
	errno = 0;
	o->pid = strtol(pid, &end, 10);
	if (errno || *end || o->pid <= 0)
		return false;
	o->start = strtoull(start, &end, 10);
	if (errno || *end)
		return false;
	o->host = s;
	return true;
}

bool hvst_owner_gone(const char *self, const char *owner)
{
	owner_id me, them;
	if (!owner_parse(self, &me) || !owner_parse(owner, &them))
		return false;
	/* Another machine, or another PID namespace: its pids mean nothing here. */
	if (strcmp(me.host, them.host) != 0 || strcmp(me.ns, them.ns) != 0)
		return false;
	if (strcmp(me.boot, them.boot) != 0)
		return true; /* that boot is over: every process of it is gone */
	if (kill((pid_t)them.pid, 0) != 0 && errno == ESRCH)
		return true;
	/* The pid exists (EPERM says so too): the same process only with the same start time. An
	 * unreadable /proc entry (hidepid) says nothing. */
	unsigned long long start = proc_start_time(them.pid);
	return start != 0 && start != them.start;
}

hv_status hvst_reap_interrupted(hv_store *st)
{
	if (!st->owner)
		return HV_OK;
	sqlite3_stmt *q = NULL;
	/* runs_open (a partial index) holds exactly the unended runs: no scan of the history. */
	int src = sqlite3_prepare_v2(st->db, "SELECT id, owner FROM runs INDEXED BY runs_open"
				     " WHERE ended_at_ns IS NULL AND owner IS NOT NULL", -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot read the history");
	int64_t *gone = NULL;
	size_t n = 0, cap = 0;
	int rc = HV_OK;
	while ((src = sqlite3_step(q)) == SQLITE_ROW) {
		if (!hvst_owner_gone(st->owner, (const char *)sqlite3_column_text(q, 1)))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			int64_t *p = realloc(gone, cap * sizeof(*gone));
			if (!p) {
				rc = hv_error_set(HV_ENOMEM, "out of memory");
				break;
			}
			gone = p;
		}
		gone[n++] = sqlite3_column_int64(q, 0);
	}
	if (rc == HV_OK && src != SQLITE_DONE)
		rc = hvst_db_error(st, src, "cannot read the history");
	sqlite3_finalize(q);
	q = NULL;
	if (rc == HV_OK && n) {
		src = sqlite3_prepare_v2(st->db, "UPDATE runs SET ended_at_ns = ?2, end_reason = '"
					 HV_END_INTERRUPTED "' WHERE id = ?1 AND ended_at_ns IS NULL",
					 -1, &q, NULL);
		if (src != SQLITE_OK)
			rc = hvst_db_error(st, src, "cannot end an interrupted run");
		else
			rc = hvst_tx_begin(st);
		int64_t now = hv_store_now_ns();
		for (size_t i = 0; rc == HV_OK && i < n; i++) {
			sqlite3_bind_int64(q, 1, gone[i]);
			sqlite3_bind_int64(q, 2, now);
			src = hvst_step_done(q);
			if (src != SQLITE_DONE) {
				rc = hvst_db_error(st, src, "cannot end an interrupted run");
				hvst_tx_rollback(st);
			}
		}
		if (rc == HV_OK)
			rc = hvst_tx_commit(st);
		sqlite3_finalize(q);
	}
	free(gone);
	return rc;
}

/* ---- Runs ------------------------------------------------------------------------------- */

void hvst_hostname(char *buf, size_t cap)
{
	if (gethostname(buf, cap) != 0)
		buf[0] = '\0';
	buf[cap - 1] = '\0';
}

static hv_status sq_run_begin(hv_store *st, const hv_run_start *r, int64_t *run_id)
{
	int rc;
	char host[256];
	if (!r->host)
		hvst_hostname(host, sizeof(host));
	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(st->db,
				     "INSERT INTO runs(label, command, dir, started_at_ns, owner, host)"
				     " VALUES (?1, ?2, ?3, ?4, ?5, ?6)", -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot record the run");
	if (r->label)
		hvst_bind_bytes(q, 1, r->label, strlen(r->label));
	if (r->command_json)
		sqlite3_bind_text(q, 2, r->command_json, -1, SQLITE_STATIC);
	hvst_bind_bytes(q, 3, r->dir, strlen(r->dir));
	sqlite3_bind_int64(q, 4, r->started_at_ns ? r->started_at_ns : hv_store_now_ns());
	if (st->owner)
		sqlite3_bind_text(q, 5, st->owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 6, r->host ? r->host : host, -1, SQLITE_TRANSIENT);
	if ((rc = hvst_tx_begin(st)) == HV_OK) {
		src = hvst_step_done(q);
		if (src == SQLITE_DONE) {
			*run_id = sqlite3_last_insert_rowid(st->db);
			rc = hvst_tx_commit(st);
		} else {
			rc = hvst_db_error(st, src, "cannot record the run");
			hvst_tx_rollback(st);
		}
	}
	sqlite3_finalize(q);
	return rc;
}

/* The SHA-256 of p[0..n) as 64 lower-case hex digits. */
bool hvst_sha256_hex(const void *p, size_t n, char hex[65])
{
	hv__sha256_hex(n ? p : "", n, hex);
	return true;
}

/* Stored bytes are served only when they still hash to the digest they are stored under: the
 * database is a file that anyone who can write it (the command that ran, too) can edit. what
 * names the bytes in the message ("artifact 3"). */
hv_status hvst_verify_content(const void *p, size_t n, const char *sha, const char *what)
{
	char hex[65];
	if (!hvst_sha256_hex(p, n, hex))
		return hv_error_set(HV_EIO, "%s: SHA-256 failed", what);
	if (!sha || strncmp(hex, sha, 64) != 0)
		return hv_error_set(HV_EDB, "%s: stored content does not match its SHA-256 (the "
				    "database was modified)", what);
	return HV_OK;
}

/* Whether p (n bytes) is the content a says it is. */
static hv_status check_bytes(const hv_artifact_in *a, const void *p, size_t n, const char *sha)
{
	char hex[65];
	if (!hvst_sha256_hex(p, n, hex))
		return hv_error_set(HV_EIO, "%.*s: SHA-256 failed", (int)a->path_len, a->path);
	if (memcmp(hex, sha, 64) != 0)
		return hv_error_set(HV_EUSAGE, "%.*s: the content does not match its SHA-256",
				    (int)a->path_len, a->path);
	return HV_OK;
}

/* Checks an artifact and puts its digest, lower-cased, in sha: before any backend records it
 * (hv_store_run_finish; hashing is slow: not under the write lock). A content read through
 * read_content is checked when it is read, by hvst_artifact_bytes or store_read_content. */
static hv_status check_artifact(const hv_artifact_in *a, char sha[65])
{
	if (!a->path || !a->name || !a->mime_type || !a->sha256)
		return hv_error_set(HV_EUSAGE, "artifact: missing path, name, MIME type or SHA-256");
	int rc = hvst_hex_norm(a->sha256, true, sha);
	if (rc != HV_OK || (!a->content && !a->read_content))
		return rc;
	if (a->content_len != a->size)
		return hv_error_set(HV_EUSAGE, "%.*s: content of %zu bytes for a file of %llu",
				    (int)a->path_len, a->path, a->content_len,
				    (unsigned long long)a->size);
	return a->content ? check_bytes(a, a->content, a->content_len, sha) : HV_OK;
}

hv_status hvst_artifact_bytes(const hv_artifact_in *a, const char *sha, const void **p,
			      void **owned)
{
	*owned = NULL;
	*p = a->content;
	if (a->content || !a->read_content)
		return HV_OK;
	if (a->content_len == 0) { /* nothing to read */
		*p = "";
		return check_bytes(a, "", 0, sha);
	}
	/* One content at a time, however many the run has. */
	void *buf = malloc(a->content_len ? a->content_len : 1);
	if (!buf)
		return hv_error_set(HV_ENOMEM, "out of memory");
	int rc = a->read_content(a->read_ctx, a, 0, buf, a->content_len);
	if (rc == HV_OK)
		rc = check_bytes(a, buf, a->content_len, sha);
	if (rc != HV_OK) {
		free(buf);
		return rc;
	}
	*p = buf;
	*owned = buf;
	return HV_OK;
}

hv_status hvst_artifact_pieces(const hv_artifact_in *a, const char *sha, size_t cap,
			       hv_status (*put)(void *ctx, const void *piece, size_t n), void *ctx)
{
	unsigned char *piece = malloc(cap ? cap : 1);
	if (!piece)
		return hv_error_set(HV_ENOMEM, "out of memory");
	hv__sha256 md;
	hv__sha256_init(&md);
	hv_status rc = HV_OK;
	for (size_t off = 0; rc == HV_OK && off < a->content_len;) {
		size_t n = a->content_len - off < cap ? a->content_len - off : cap;
		rc = a->read_content(a->read_ctx, a, off, piece, n);
		if (rc == HV_OK) {
			hv__sha256_update(&md, piece, n);
			rc = put(ctx, piece, n);
		}
		off += n;
	}
	if (rc == HV_OK) {
		unsigned char d[32];
		char hex[65];
		hv__sha256_final(&md, d);
		hv__sha256_to_hex(d, hex);
		if (memcmp(hex, sha, 64) != 0)
			rc = hv_error_set(HV_EUSAGE, "%.*s: the content does not match its SHA-256",
					  (int)a->path_len, a->path);
	}
	free(piece);
	return rc;
}

/* Inside the transaction: the run exists and has not finished. */
static hv_status check_run_open(hv_store *st, int64_t run_id)
{
	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(st->db, "SELECT ended_at_ns IS NULL FROM runs WHERE id = ?1",
				     -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot finish the run");
	sqlite3_bind_int64(q, 1, run_id);
	src = sqlite3_step(q);
	int rc;
	if (src == SQLITE_ROW)
		rc = sqlite3_column_int(q, 0) ? HV_OK
					      : hv_error_set(HV_ENOTFOUND, "run %lld has already finished",
							     (long long)run_id);
	else if (src == SQLITE_DONE && (rc = hvst_check_integrity(st, false, "runs")) == HV_OK)
		rc = hv_error_set(HV_ENOTFOUND, "no run %lld (pruned?)", (long long)run_id);
	else if (src != SQLITE_DONE)
		rc = hvst_db_error(st, src, "cannot finish the run");
	sqlite3_finalize(q);
	return rc;
}

static hv_status record_end(hv_store *st, int64_t run_id, const hv_run_end *e)
{
	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(st->db,
				     "UPDATE runs SET ended_at_ns = ?2, exit_code = ?3, timed_out = ?4,"
				     " duration_ms = ?5, stdout_truncated = ?6, stderr_truncated = ?7,"
				     " skipped = ?8, end_reason = ?9, deleted = ?10 WHERE id = ?1", -1,
				     &q, NULL);
	if (src == SQLITE_OK) {
		sqlite3_bind_int64(q, 1, run_id);
		sqlite3_bind_int64(q, 2, e->ended_at_ns ? e->ended_at_ns : hv_store_now_ns());
		if (e->has_exit_code)
			sqlite3_bind_int(q, 3, e->exit_code);
		sqlite3_bind_int(q, 4, e->timed_out);
		if (e->duration_ms >= 0)
			sqlite3_bind_int64(q, 5, e->duration_ms);
		sqlite3_bind_int(q, 6, e->stdout_truncated);
		sqlite3_bind_int(q, 7, e->stderr_truncated);
		sqlite3_bind_text(q, 8, e->skipped_json ? e->skipped_json : "[]", -1, SQLITE_STATIC);
		if (e->end_reason)
			sqlite3_bind_text(q, 9, e->end_reason, -1, SQLITE_STATIC);
		if (e->deleted_json)
			sqlite3_bind_text(q, 10, e->deleted_json, -1, SQLITE_STATIC);
		src = hvst_step_done(q);
		sqlite3_finalize(q);
		q = NULL;
	}
	if (src == SQLITE_DONE) {
		src = sqlite3_prepare_v2(st->db,
					 "INSERT OR REPLACE INTO run_outputs(run_id, stdout, stderr)"
					 " VALUES (?1, ?2, ?3)", -1, &q, NULL);
		if (src == SQLITE_OK) {
			sqlite3_bind_int64(q, 1, run_id);
			hvst_bind_bytes(q, 2, e->stdout_data, e->stdout_data ? e->stdout_len : 0);
			hvst_bind_bytes(q, 3, e->stderr_data, e->stderr_data ? e->stderr_len : 0);
			src = hvst_step_done(q);
		}
		sqlite3_finalize(q);
	}
	return src == SQLITE_DONE ? HV_OK : hvst_db_error(st, src, "cannot finish the run");
}

/* The pieces a content read through read_content is stored in. */
#define CONTENT_PIECE (256u << 10)

/* Where store_read_content's pieces go: the blob, at the offset reached so far. */
struct blob_put {
	hv_store *st;
	sqlite3_blob *blob;
	size_t off;
};

static hv_status blob_put_piece(void *ctx, const void *piece, size_t n)
{
	struct blob_put *bp = ctx;
	int src = sqlite3_blob_write(bp->blob, piece, (int)n, (int)bp->off);
	if (src != SQLITE_OK)
		return hvst_db_error(bp->st, src, "cannot store a content");
	bp->off += n;
	return HV_OK;
}

/* Stores a content read through a->read_content piece by piece (SQLite's incremental blob
 * I/O into a zeroblob of its size), checking its SHA-256 as it goes: a content of any size
 * costs one piece of memory. One already stored is not read at all. */
static hv_status store_read_content(hv_store *st, const hv_artifact_in *a, const char *sha)
{
	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(st->db,
				     "INSERT OR IGNORE INTO contents(sha256, size, bytes)"
				     " VALUES (?1, ?2, zeroblob(?2))", -1, &q, NULL);
	if (src == SQLITE_OK) {
		sqlite3_bind_text(q, 1, sha, 64, SQLITE_STATIC);
		sqlite3_bind_int64(q, 2, (int64_t)a->content_len);
		src = hvst_step_done(q);
	}
	sqlite3_finalize(q);
	if (src != SQLITE_DONE)
		return hvst_db_error(st, src, "cannot store a content");
	if (sqlite3_changes(st->db) == 0)
		return HV_OK; /* already there */
	sqlite3_blob *blob = NULL;
	/* (an empty blob cannot be opened: nothing to write, only its digest to check) */
	src = a->content_len ? sqlite3_blob_open(st->db, "main", "contents", "bytes",
						 sqlite3_last_insert_rowid(st->db), 1, &blob)
			     : SQLITE_OK;
	if (src != SQLITE_OK) {
		sqlite3_blob_close(blob);
		/* The row was inserted a moment ago, in this transaction: "no such rowid" means
		 * a damaged table hid it. */
		return hvst_db_error(st, src == SQLITE_ERROR ? SQLITE_CORRUPT : src,
				     "cannot store a content");
	}
	struct blob_put bp = {.st = st, .blob = blob};
	int rc = hvst_artifact_pieces(a, sha, CONTENT_PIECE, blob_put_piece, &bp);
	src = blob ? sqlite3_blob_close(blob) : SQLITE_OK;
	if (rc == HV_OK && src != SQLITE_OK)
		rc = hvst_db_error(st, src, "cannot store a content");
	return rc; /* (on a failure the caller rolls the transaction back, the row with it) */
}

static hv_status record_artifact(hv_store *st, int64_t run_id, const hv_artifact_in *a,
				 const char *sha, int64_t now)
{
	sqlite3_stmt *q;
	int src = SQLITE_DONE;
	bool stored = a->content || a->read_content;
	if (!a->content && a->read_content) {
		int rc = store_read_content(st, a, sha);
		if (rc != HV_OK)
			return rc;
	} else if (stored) {
		const void *bytes;
		void *owned;
		int rc = hvst_artifact_bytes(a, sha, &bytes, &owned);
		if (rc != HV_OK)
			return rc;
		if (!(q = hvst_stmt(st, STMT_CONTENT_PUT))) {
			free(owned);
			return hv_error_last_status();
		}
		sqlite3_bind_text(q, 1, sha, 64, SQLITE_STATIC);
		sqlite3_bind_int64(q, 2, (int64_t)a->content_len);
		hvst_bind_bytes(q, 3, bytes, a->content_len);
		src = hvst_step_done(q);
		sqlite3_clear_bindings(q);
		free(owned);
	}
	if (src == SQLITE_DONE) {
		if (!(q = hvst_stmt(st, STMT_ARTIFACT_PUT)))
			return hv_error_last_status();
		sqlite3_bind_int64(q, 1, run_id);
		hvst_bind_bytes(q, 2, a->path, a->path_len);
		hvst_bind_bytes(q, 3, a->name, a->name_len);
		sqlite3_bind_text(q, 4, a->mime_type, -1, SQLITE_STATIC);
		sqlite3_bind_int64(q, 5, (int64_t)a->size);
		sqlite3_bind_text(q, 6, sha, 64, SQLITE_STATIC);
		sqlite3_bind_int64(q, 7, now);
		sqlite3_bind_int(q, 8, stored);
		if (a->change)
			sqlite3_bind_text(q, 9, a->change, -1, SQLITE_STATIC);
		src = hvst_step_done(q);
		sqlite3_clear_bindings(q);
	}
	return src == SQLITE_DONE ? HV_OK : hvst_db_error(st, src, "cannot record an artifact");
}

/* After a recording that failed midway (disk full, lock busy past the timeout): the run is
 * ended with none of its artifacts and says so, rather than left open as if still running.
 * Best effort, in a transaction of its own (the rollback may have freed the room it needs);
 * the caller's error stays the one reported. */
static void end_not_recorded(hv_store *st, int64_t run_id, const hv_run_end *end)
{
	hv_error_saved saved;
	hv_error_save(&saved);
	hv_run_end e = *end;
	e.end_reason = HV_END_NOT_RECORDED;
	if (hvst_tx_begin(st) == HV_OK) {
		if (check_run_open(st, run_id) == HV_OK && record_end(st, run_id, &e) == HV_OK)
			hvst_tx_commit(st);
		else
			hvst_tx_rollback(st);
	}
	hv_error_restore(&saved, saved.status);
}

static hv_status sq_run_finish(hv_store *st, int64_t run_id, const hv_run_end *end,
			       const hv_artifact_in *artifacts, char (*shas)[65],
			       size_t n_artifacts)
{
	bool was_open = false;
	int rc = hvst_tx_begin(st);
	if (rc == HV_OK) {
		int64_t now = hv_store_now_ns();
		rc = check_run_open(st, run_id);
		was_open = rc == HV_OK;
		if (rc == HV_OK)
			rc = record_end(st, run_id, end);
		for (size_t i = 0; rc == HV_OK && i < n_artifacts; i++)
			rc = record_artifact(st, run_id, &artifacts[i], shas[i], now);
		if (rc == HV_OK)
			rc = hvst_tx_commit(st);
		else
			hvst_tx_rollback(st);
	}
	if (rc != HV_OK && was_open && !hvst_end_not_recorded(end))
		end_not_recorded(st, run_id, end);
	return rc;
}

/* ---- Queries ------------------------------------------------------------------------------ */

typedef struct sq_run_iter {
	hv_run_iter base;
	hv_store *st;
	sqlite3_stmt *q;
	bool with_output;
	bool by_id;   /* the filter names one run */
	bool stepped; /* a row has been read */
	hv_run_row row;
} sq_run_iter;

typedef struct sq_artifact_iter {
	hv_artifact_iter base;
	hv_store *st;
	sqlite3_stmt *q;
	bool with_content;
	hv_artifact_row row;
	char *content; /* row.content's bytes, until the next row */
	/* The upper bound of the name pattern, alive as long as the statement (bound
	 * SQLITE_STATIC). */
	hv_buf name_hi;
	/* The types --mime selects, while sq_artifacts() binds them (SQLITE_TRANSIENT). */
	const hvst_mime_set *mimes;
	char sha[65], sha_hi[65];
} sq_artifact_iter;

/* The query built in sql; HV_ENOMEM when any part of it could not be appended (the text
 * would be another query: one without its filters or limit). */
static hv_status prepare_query(hv_store *st, hv_buf *sql, sqlite3_stmt **q)
{
	if (!sql->data || sql->failed)
		return hv_error_set(HV_ENOMEM, "out of memory");
	int src = sqlite3_prepare_v2(st->db, sql->data, (int)sql->len, q, NULL);
	return src == SQLITE_OK ? HV_OK : hvst_db_error(st, src, "cannot query the history");
}

static int bind_name(sqlite3_stmt *q, const char *name, int64_t v)
{
	int idx = sqlite3_bind_parameter_index(q, name);
	return idx ? sqlite3_bind_int64(q, idx, v) : SQLITE_OK;
}

static void sq_run_free(hv_run_iter *base);

static hv_status sq_runs(hv_store *st, const hv_run_filter *f, hv_run_iter **out)
{
	hv_buf sql = {0};
	int rc = hv_buf_append_str(
		&sql, "SELECT r.id, r.label, r.command, r.dir, r.started_at_ns, r.ended_at_ns,"
		      " r.exit_code, r.timed_out, r.duration_ms,"
		      " (SELECT count(*) FROM artifacts a WHERE a.run_id = r.id), r.end_reason, r.host");
	if (f->with_output)
		hv_buf_append_str(&sql, ", r.stdout_truncated, r.stderr_truncated, r.skipped,"
					" o.stdout, o.stderr, r.deleted FROM runs r"
					" LEFT JOIN run_outputs o ON o.run_id = r.id");
	else
		hv_buf_append_str(&sql, " FROM runs r");
	hv_buf_append_str(&sql, " WHERE 1");
	if (f->run_id)
		hv_buf_append_str(&sql, " AND r.id = :id");
	if (f->since_ns)
		hv_buf_append_str(&sql, " AND r.started_at_ns >= :since");
	if (f->label)
		hv_buf_append_str(&sql, " AND r.label = :label");
	if (f->host)
		hv_buf_append_str(&sql, " AND r.host = :host");
	hv_buf_append_str(&sql, " ORDER BY r.id DESC");
	if (f->limit)
		hv_buf_append_str(&sql, " LIMIT :limit");
	sq_run_iter *it = NULL;
	if (rc == HV_OK && !(it = calloc(1, sizeof(*it))))
		rc = hv_error_set(HV_ENOMEM, "out of memory");
	if (rc == HV_OK)
		rc = prepare_query(st, &sql, &it->q);
	hv_buf_free(&sql);
	if (rc != HV_OK) {
		sq_run_free(it ? &it->base : NULL);
		return rc;
	}
	/* it is NULL only when rc is an error: the analyzer cannot see that hv_error_set
	 * (error.c) never returns HV_OK.
	 * NOLINTNEXTLINE(clang-analyzer-core.NullDereference) */
	it->st = st;
	it->with_output = f->with_output;
	it->by_id = f->run_id != 0;
	bind_name(it->q, ":id", f->run_id);
	bind_name(it->q, ":since", f->since_ns);
	bind_name(it->q, ":limit", f->limit > INT64_MAX ? INT64_MAX : (int64_t)f->limit);
	if (f->label) {
		/* Labels are stored as BLOBs (bytes): compare BLOB to BLOB. A copy is bound, so the
		 * caller's string need not outlive this call. */
		int idx = sqlite3_bind_parameter_index(it->q, ":label");
		sqlite3_bind_blob64(it->q, idx, *f->label ? f->label : "", strlen(f->label),
				    SQLITE_TRANSIENT);
	}
	if (f->host)
		sqlite3_bind_text(it->q, sqlite3_bind_parameter_index(it->q, ":host"), f->host, -1,
				  SQLITE_TRANSIENT);
	*out = &it->base;
	return HV_OK;
}

/* A column's bytes and length; NULL (with length 0) when SQL NULL. */
static const char *col_bytes(sqlite3_stmt *q, int col, size_t *len)
{
	*len = 0;
	if (sqlite3_column_type(q, col) == SQLITE_NULL)
		return NULL;
	/* column_blob first, then column_bytes, as SQLite's documentation asks. */
	const char *p = sqlite3_column_blob(q, col);
	*len = (size_t)sqlite3_column_bytes(q, col);
	return p ? p : "";
}

static hv_status sq_run_next(hv_run_iter *base, const hv_run_row **out)
{
	sq_run_iter *it = (sq_run_iter *)base;
	int src = sqlite3_step(it->q);
	bool first = !it->stepped;
	it->stepped = true;
	if (src == SQLITE_DONE) {
		/* "no run N" only when the table is sound: a damaged page can hide the row. */
		if (!first || !it->by_id)
			return HV_DONE;
		hv_status rc = hvst_check_integrity(it->st, false, "runs");
		return rc == HV_OK ? HV_DONE : rc;
	}
	if (src != SQLITE_ROW)
		return hvst_db_error(it->st, src, "cannot query the history");
	sqlite3_stmt *q = it->q;
	hv_run_row *r = &it->row;
	memset(r, 0, sizeof(*r));
	size_t len;
	r->run_id = sqlite3_column_int64(q, 0);
	r->label = col_bytes(q, 1, &r->label_len);
	r->command_json = (const char *)sqlite3_column_text(q, 2);
	r->dir = col_bytes(q, 3, &r->dir_len);
	r->started_at_ns = sqlite3_column_int64(q, 4);
	r->ended = sqlite3_column_type(q, 5) != SQLITE_NULL;
	r->ended_at_ns = sqlite3_column_int64(q, 5);
	r->has_exit_code = sqlite3_column_type(q, 6) != SQLITE_NULL;
	r->exit_code = sqlite3_column_int(q, 6);
	r->timed_out = sqlite3_column_int(q, 7) != 0;
	r->duration_ms = sqlite3_column_type(q, 8) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 8);
	r->artifacts = (uint64_t)sqlite3_column_int64(q, 9);
	r->end_reason = (const char *)sqlite3_column_text(q, 10);
	r->host = (const char *)sqlite3_column_text(q, 11);
	if (it->with_output) {
		r->stdout_truncated = sqlite3_column_int(q, 12) != 0;
		r->stderr_truncated = sqlite3_column_int(q, 13) != 0;
		r->skipped_json = (const char *)sqlite3_column_text(q, 14);
		if (!r->skipped_json)
			r->skipped_json = "[]";
		r->deleted_json = (const char *)sqlite3_column_text(q, 17);
		r->stdout_data = col_bytes(q, 15, &len);
		r->stdout_len = len;
		r->stderr_data = col_bytes(q, 16, &len);
		r->stderr_len = len;
	}
	*out = r;
	return HV_OK;
}

static void sq_run_free(hv_run_iter *base)
{
	sq_run_iter *it = (sq_run_iter *)base;
	if (!it)
		return;
	sqlite3_finalize(it->q);
	free(it);
}

/* The bytes of a glob pattern before its first special character. */
static size_t literal_prefix(const char *pat)
{
	return strcspn(pat, "*?[\\");
}

/* The smallest string greater than every string starting with p[0..len): the prefix with its
 * last byte below 0xff incremented. 0 when there is none (all 0xff). */
static size_t prefix_successor(hv_buf *b, const char *p, size_t len)
{
	while (len && (unsigned char)p[len - 1] == 0xff)
		len--;
	hv_buf_truncate(b, 0);
	if (!len || hv_buf_append(b, p, len) != HV_OK)
		return 0;
	b->data[len - 1] = (char)((unsigned char)b->data[len - 1] + 1);
	return len;
}

/* Whether a literal prefix has a successor (it is not all 0xff bytes). */
static bool has_successor(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)p[i] != 0xff)
			return true;
	return false;
}

/* Adds the conditions of the name glob pat on a.name to sql: equality when pat has no special
 * character; else a range on its literal prefix (so artifacts_name serves it: plot then *
 * becomes a.name >= 'plot' AND a.name < 'plou') and hv_glob(). */
static void name_sql(hv_buf *sql, const char *pat)
{
	size_t lit = literal_prefix(pat);
	if (pat[lit] == '\0') {
		hv_buf_append_str(sql, " AND a.name = :name_eq");
		return;
	}
	if (lit)
		hv_buf_append_str(sql, " AND a.name >= :name_lo");
	if (lit && has_successor(pat, lit))
		hv_buf_append_str(sql, " AND a.name < :name_hi");
	hv_buf_append_str(sql, " AND hv_glob(:name_pat, a.name)");
}

/* Binds what name_sql() named: the bounds as BLOBs, as names are stored (a BLOB never equals
 * a TEXT, and sorts after every TEXT). *hi keeps the upper bound alive. */
static void name_bind(sqlite3_stmt *q, const char *pat, hv_buf *hi)
{
	size_t lit = literal_prefix(pat);
	int idx;
#define BIND(p, n) sqlite3_bind_blob64(q, idx, (n) ? (const void *)(p) : "", (n), SQLITE_STATIC)
	if ((idx = sqlite3_bind_parameter_index(q, ":name_eq")))
		BIND(pat, lit);
	if ((idx = sqlite3_bind_parameter_index(q, ":name_lo")))
		BIND(pat, lit);
	if ((idx = sqlite3_bind_parameter_index(q, ":name_hi"))) {
		size_t n = prefix_successor(hi, pat, lit);
		BIND(hi->data, n);
	}
	if ((idx = sqlite3_bind_parameter_index(q, ":name_pat")))
		sqlite3_bind_text(q, idx, pat, -1, SQLITE_STATIC);
#undef BIND
}

/* The WHERE clause of an artifact filter (named parameters, bound by bind_filter()). */
static void filter_sql(hv_buf *sql, const hv_artifact_filter *f, const hvst_mime_set *mimes,
		       const char *sha)
{
	hv_buf_append_str(sql, " WHERE 1");
	if (f->artifact_id)
		hv_buf_append_str(sql, " AND a.id = :aid");
	if (f->run_id)
		hv_buf_append_str(sql, " AND a.run_id = :run");
	if (mimes && mimes->n == 0)
		hv_buf_append_str(sql, " AND 0");
	for (size_t i = 0; mimes && i < mimes->n; i++)
		hv_buf_printf(sql, i ? ", :m%zu" : " AND a.mime_type IN (:m%zu", i);
	if (mimes && mimes->n)
		hv_buf_append_str(sql, ")");
	if (f->name)
		name_sql(sql, f->name);
	if (f->sha256) {
		if (strlen(sha) == 64)
			hv_buf_append_str(sql, " AND a.sha256 = :sha");
		else
			hv_buf_append_str(sql, " AND a.sha256 >= :sha AND a.sha256 < :sha_hi");
	}
	if (f->since_ns)
		hv_buf_append_str(sql, " AND a.recorded_at_ns >= :since");
	if (f->host)
		hv_buf_append_str(sql, " AND a.run_id IN (SELECT id FROM runs WHERE host = :host)");
}

static void bind_filter(sqlite3_stmt *q, const hv_artifact_filter *f, sq_artifact_iter *it)
{
	if (f->host)
		sqlite3_bind_text(q, sqlite3_bind_parameter_index(q, ":host"), f->host, -1,
				  SQLITE_TRANSIENT);
	bind_name(q, ":aid", f->artifact_id);
	bind_name(q, ":run", f->run_id);
	bind_name(q, ":since", f->since_ns);
	bind_name(q, ":limit", f->limit > INT64_MAX ? INT64_MAX : (int64_t)f->limit);
	for (size_t i = 0; it->mimes && i < it->mimes->n; i++) {
		char name[32];
		snprintf(name, sizeof(name), ":m%zu", i);
		sqlite3_bind_text(q, sqlite3_bind_parameter_index(q, name), it->mimes->types[i], -1,
				  SQLITE_TRANSIENT);
	}
	if (f->name)
		name_bind(q, f->name, &it->name_hi);
	if (f->sha256) {
		int idx = sqlite3_bind_parameter_index(q, ":sha");
		sqlite3_bind_text(q, idx, it->sha, -1, SQLITE_STATIC);
		if ((idx = sqlite3_bind_parameter_index(q, ":sha_hi"))) {
			/* Hex digits: bumping the last one ('9' -> ':', 'f' -> 'g') gives the bound. */
			memcpy(it->sha_hi, it->sha, sizeof(it->sha_hi));
			it->sha_hi[strlen(it->sha_hi) - 1]++;
			sqlite3_bind_text(q, idx, it->sha_hi, -1, SQLITE_STATIC);
		}
	}
}

/* How many matches make a filter "dense" when there is a limit. */
#define DENSE_MATCHES 20000

static hv_status query_int(hv_store *st, hv_buf *sql, const hv_artifact_filter *f,
			   sq_artifact_iter *it, int64_t *out)
{
	sqlite3_stmt *q = NULL;
	int rc = prepare_query(st, sql, &q);
	hv_buf_free(sql);
	if (rc != HV_OK)
		return rc;
	if (f)
		bind_filter(q, f, it);
	int src = sqlite3_step(q);
	if (src == SQLITE_ROW)
		*out = sqlite3_column_int64(q, 0);
	else
		rc = hvst_db_error(st, src, "cannot query the history");
	sqlite3_finalize(q);
	return rc;
}

/* Whether to read in listing order and filter as we go (stopping at the limit), rather than
 * find the matches through the filter's index and sort them. SQLite cannot tell without
 * statistics (a range's selectivity is a guess even with them) and guesses badly both ways:
 * an ordered scan reads the whole table for a filter that matches nothing (--since an hour
 * ago), a sort costs as many rows as match ('image/' then '*' may be a quarter of the table)
 * even for --limit 20. So count the matches through the filter's index, up to a threshold
 * (covering indexes mostly, so cheap): dense filters get the ordered scan. Without a limit,
 * all matches are read either way, and the scan wins only past about half of the table (an
 * index scan with a table lookup per row against a sort; measured at a million artifacts). */
enum plan { PLAN_NATURAL, PLAN_SCAN, PLAN_SORT };

static hv_status choose_plan(hv_store *st, const hv_artifact_filter *f, sq_artifact_iter *it,
			     const hv_buf *where, enum plan *plan)
{
	*plan = PLAN_NATURAL;
	/* An equality on an index that also gives the order, or no filter: SQLite gets it right. */
	if (f->artifact_id || f->run_id)
		return HV_OK;
	if (!f->mime && !f->name && !f->sha256 && !f->since_ns && !f->host)
		return HV_OK;
	int64_t threshold = DENSE_MATCHES, n = 0;
	hv_buf sql = {0};
	int rc;
	if (!f->limit) {
		/* Two subqueries: each is one index probe, an expression of both is a scan. */
		hv_buf_append_str(&sql, "SELECT coalesce((SELECT max(id) FROM artifacts) -"
					" (SELECT min(id) FROM artifacts) + 1, 0)");
		if ((rc = query_int(st, &sql, NULL, it, &n)) != HV_OK)
			return rc;
		if (n / 2 > threshold)
			threshold = n / 2;
	}
	hv_buf_append_str(&sql, "SELECT count(*) FROM (SELECT 1 FROM artifacts a");
	hv_buf_append(&sql, where->data, where->len);
	hv_buf_printf(&sql, " LIMIT %lld)", (long long)threshold);
	if ((rc = query_int(st, &sql, f, it, &n)) != HV_OK)
		return rc;
	*plan = n >= threshold ? PLAN_SCAN : PLAN_SORT;
	return HV_OK;
}

static void sq_artifact_free(hv_artifact_iter *base);

static hv_status sq_artifacts(hv_store *st, const hv_artifact_filter *f,
			      const hvst_mime_set *mimes, hv_artifact_iter **out)
{
	sq_artifact_iter *it = calloc(1, sizeof(*it));
	if (!it)
		return hv_error_set(HV_ENOMEM, "out of memory");
	it->st = st;
	it->with_content = f->with_content;
	it->mimes = mimes;
	int rc = HV_OK;
	if (f->sha256 && (rc = hvst_hex_norm(f->sha256, false, it->sha)) != HV_OK) {
		free(it);
		return rc;
	}
	hv_buf where = {0}, sql = {0};
	filter_sql(&where, f, mimes, it->sha);
	enum plan plan = PLAN_NATURAL;
	rc = where.data ? choose_plan(st, f, it, &where, &plan)
			: hv_error_set(HV_ENOMEM, "out of memory");
	hv_buf_append_str(&sql, "SELECT a.id, a.run_id, a.path, a.name, a.mime_type, a.size,"
				" a.sha256, a.recorded_at_ns, a.content_stored, a.change");
	/* (the content's row and length, not its bytes: read_blob reads them) */
	if (f->with_content)
		hv_buf_append_str(&sql, ", c.rowid, length(c.bytes)");
	/* INDEXED BY and the unary + steer SQLite to the plan chosen above. */
	hv_buf_append_str(&sql, plan == PLAN_SCAN ? " FROM artifacts a INDEXED BY artifacts_run"
						   : " FROM artifacts a");
	if (f->with_content)
		hv_buf_append_str(&sql, " LEFT JOIN contents c"
					" ON a.content_stored AND c.sha256 = a.sha256");
	if (where.data)
		hv_buf_append(&sql, where.data, where.len);
	hv_buf_append_str(&sql, plan == PLAN_SORT ? " ORDER BY +a.run_id DESC, +a.id ASC"
						   : " ORDER BY a.run_id DESC, a.id ASC");
	if (f->limit)
		hv_buf_append_str(&sql, " LIMIT :limit");
	if (rc == HV_OK)
		rc = prepare_query(st, &sql, &it->q);
	hv_buf_free(&sql);
	hv_buf_free(&where);
	if (rc != HV_OK) {
		sq_artifact_free(&it->base);
		return rc;
	}
	bind_filter(it->q, f, it);
	it->mimes = NULL; /* the caller's, and bound by copy */
	*out = &it->base;
	return HV_OK;
}

/* A loose index scan of artifacts_mime: one seek per distinct type, however many artifacts
 * share it. */
static hv_status sq_mime_types(hv_store *st, hvst_mime_set *out)
{
	hv_buf sql = {0};
	hv_buf_append_str(&sql, "WITH RECURSIVE t(m) AS ("
				" SELECT (SELECT mime_type FROM artifacts ORDER BY mime_type LIMIT 1)"
				" UNION ALL SELECT (SELECT mime_type FROM artifacts"
				" WHERE mime_type > t.m ORDER BY mime_type LIMIT 1)"
				" FROM t WHERE t.m IS NOT NULL)"
				" SELECT m FROM t WHERE m IS NOT NULL");
	sqlite3_stmt *q = NULL;
	hv_status rc = prepare_query(st, &sql, &q);
	hv_buf_free(&sql);
	int src = SQLITE_OK;
	while (rc == HV_OK && (src = sqlite3_step(q)) == SQLITE_ROW)
		rc = hvst_mime_set_add(out, (const char *)sqlite3_column_text(q, 0),
				       (size_t)sqlite3_column_bytes(q, 0));
	if (rc == HV_OK && src != SQLITE_DONE)
		rc = hvst_db_error(st, src, "cannot query the history");
	sqlite3_finalize(q);
	return rc;
}

/* The bytes of the contents row rowid (bytes long), read with SQLite's incremental blob I/O
 * straight into one malloc'd buffer of their size (+1 for a NUL), in CONTENT_PIECE pieces: the
 * value is never also held whole by SQLite, as a column read of it is (and a query's sorter
 * then copied it again: `history show --content` of a 100 MB content peaked at 234 MB). */
static hv_status read_blob(hv_store *st, int64_t rowid, int64_t bytes, char **out, size_t *len);

static hv_status sq_artifact_next(hv_artifact_iter *base, const hv_artifact_row **out)
{
	sq_artifact_iter *it = (sq_artifact_iter *)base;
	free(it->content);
	it->content = NULL;
	int src = sqlite3_step(it->q);
	if (src == SQLITE_DONE)
		return HV_DONE;
	if (src != SQLITE_ROW)
		return hvst_db_error(it->st, src, "cannot query the history");
	sqlite3_stmt *q = it->q;
	hv_artifact_row *a = &it->row;
	memset(a, 0, sizeof(*a));
	a->artifact_id = sqlite3_column_int64(q, 0);
	a->run_id = sqlite3_column_int64(q, 1);
	a->path = col_bytes(q, 2, &a->path_len);
	a->name = col_bytes(q, 3, &a->name_len);
	a->mime_type = (const char *)sqlite3_column_text(q, 4);
	a->size = (uint64_t)sqlite3_column_int64(q, 5);
	a->sha256 = (const char *)sqlite3_column_text(q, 6);
	a->recorded_at_ns = sqlite3_column_int64(q, 7);
	a->content_stored = sqlite3_column_int(q, 8) != 0;
	a->change = (const char *)sqlite3_column_text(q, 9);
	if (it->with_content && sqlite3_column_type(q, 10) != SQLITE_NULL) {
		int rc = read_blob(it->st, sqlite3_column_int64(q, 10), sqlite3_column_int64(q, 11),
				   &it->content, &a->content_len);
		if (rc != HV_OK)
			return rc;
		a->content = it->content;
		char what[48];
		snprintf(what, sizeof(what), "artifact %lld", (long long)a->artifact_id);
		rc = hvst_verify_content(a->content, a->content_len, a->sha256, what);
		if (rc != HV_OK)
			return rc;
	}
	*out = a;
	return HV_OK;
}

static void sq_artifact_free(hv_artifact_iter *base)
{
	sq_artifact_iter *it = (sq_artifact_iter *)base;
	if (!it)
		return;
	sqlite3_finalize(it->q);
	hv_buf_free(&it->name_hi);
	free(it->content);
	free(it);
}

/* ---- Contents ----------------------------------------------------------------------------- */

/* hv_store_content_get, naming the bytes what (NULL: by their digest) in a mismatch. */
static hv_status read_blob(hv_store *st, int64_t rowid, int64_t bytes, char **out, size_t *len)
{
	if (bytes == 0) { /* (an empty blob cannot be opened) */
		*out = calloc(1, 1);
		*len = 0;
		return *out ? HV_OK : hv_error_set(HV_ENOMEM, "out of memory");
	}
	sqlite3_blob *blob = NULL;
	int src = sqlite3_blob_open(st->db, "main", "contents", "bytes", rowid, 0, &blob);
	if (src != SQLITE_OK) {
		sqlite3_blob_close(blob);
		/* The row was found a moment ago, in this statement's read: gone now means a
		 * damaged table (or a NULL or text value there, which harvest never writes). */
		return hvst_db_error(st, src == SQLITE_ERROR ? SQLITE_CORRUPT : src,
				     "cannot read a content");
	}
	size_t n = (size_t)sqlite3_blob_bytes(blob);
	char *buf = malloc(n + 1);
	if (!buf) {
		sqlite3_blob_close(blob);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	hv_status rc = HV_OK;
	for (size_t off = 0; rc == HV_OK && off < n;) {
		size_t k = n - off < CONTENT_PIECE ? n - off : CONTENT_PIECE;
		src = sqlite3_blob_read(blob, buf + off, (int)k, (int)off);
		if (src != SQLITE_OK)
			rc = hvst_db_error(st, src, "cannot read a content");
		off += k;
	}
	sqlite3_blob_close(blob);
	if (rc != HV_OK) {
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return HV_OK;
}

static hv_status content_get(hv_store *st, const char *sha256_hex, const char *what, void **data,
			     size_t *len)
{
	*data = NULL;
	*len = 0;
	char sha[65];
	int rc = hvst_hex_norm(sha256_hex, true, sha);
	if (rc != HV_OK)
		return rc;
	sqlite3_stmt *q = hvst_stmt(st, STMT_CONTENT_GET);
	if (!q)
		return hv_error_last_status();
	sqlite3_bind_text(q, 1, sha, 64, SQLITE_STATIC);
	int src = sqlite3_step(q);
	if (src == SQLITE_ROW) {
		char *buf = NULL;
		size_t n = 0;
		/* (the statement stays open meanwhile: its read transaction covers the blob's) */
		rc = read_blob(st, sqlite3_column_int64(q, 0), sqlite3_column_int64(q, 1), &buf, &n);
		if (rc == HV_OK && (rc = hvst_verify_content(buf, n, sha, what ? what : sha)) != HV_OK)
			free(buf);
		else if (rc == HV_OK)
			*data = buf, *len = n;
	} else if (src == SQLITE_DONE) {
		rc = hv_error_set(HV_ENOTFOUND, "%s: no stored content with this SHA-256", sha);
	} else {
		rc = hvst_db_error(st, src, "cannot read a content");
	}
	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
	return rc;
}

static hv_status sq_artifact_sha(hv_store *st, int64_t artifact_id, char sha[65])
{
	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(st->db, "SELECT sha256, content_stored FROM artifacts WHERE id = ?1",
				     -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot read an artifact");
	sqlite3_bind_int64(q, 1, artifact_id);
	src = sqlite3_step(q);
	int rc = HV_OK;
	if (src == SQLITE_ROW && !sqlite3_column_int(q, 1))
		rc = hv_error_set(HV_ENOTFOUND, "artifact %lld: its content was not stored",
				  (long long)artifact_id);
	else if (src == SQLITE_ROW)
		snprintf(sha, 65, "%s", (const char *)sqlite3_column_text(q, 0));
	else if (src == SQLITE_DONE && (rc = hvst_check_integrity(st, false, "artifacts")) == HV_OK)
		rc = hv_error_set(HV_ENOTFOUND, "no artifact %lld", (long long)artifact_id);
	else if (src != SQLITE_DONE)
		rc = hvst_db_error(st, src, "cannot read an artifact");
	sqlite3_finalize(q);
	return rc;
}

/* ---- Prune -------------------------------------------------------------------------------- */

/* Why prune works in chunks: deleting an artifact costs about 12 us (a row and five index
 * entries), so pruning half of a million artifacts in one transaction would hold the write
 * lock for seconds, longer than the busy timeout of the other harvest processes. Each chunk
 * deletes whole runs (at most PRUNE_CHUNK_RUNS) with their artifacts and the contents no
 * remaining artifact has; a transaction takes chunks for about PRUNE_TX_BUDGET_NS (much
 * shorter transactions rewrite the same pages of the random-order indexes, sha256 and name,
 * over and over: 0.5 s made a prune three times slower than one transaction). Every state
 * between two transactions is a consistent database, and a prune killed midway has done part
 * of its work (running it again finishes); a corrupt database is refused before the first
 * (quick_check). Which runs go is fixed at the start (the newest run then existing bounds it),
 * so runs recorded meanwhile are never pruned. */
#define PRUNE_CHUNK_RUNS 64
#define PRUNE_CACHE_SIZE "-65536" /* KiB */
/* Then commit and take the lock again: other processes wait at most about this long. */
#define PRUNE_TX_BUDGET_NS (INT64_C(2000) * 1000000)
#define VACUUM_CHUNK_PAGES 4096

typedef struct prune_ctx {
	hv_store *st;
	int64_t max_id;      /* the newest run when the prune started */
	bool use_before;
	int64_t before;      /* runs started before this go (when use_before) */
	int64_t keep_below;  /* runs with a smaller id go (0: unused) */
	int64_t cutoff;      /* snapshots created before this go */
	int64_t stale;       /* unfinished snapshots created before this go */
	bool live_owner_keeps; /* a snapshot whose owner is alive is kept, however old */
} prune_ctx;

/* Runs one statement binding the named parameters that appear in it: *changes, and the first
 * row's two columns (when asked). */
static hv_status prune_step(prune_ctx *c, const char *sql, int64_t *r0, int64_t *r1,
			    uint64_t *changes)
{
	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(c->st->db, sql, -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(c->st, src, "cannot prune");
	bind_name(q, ":max", c->max_id);
	bind_name(q, ":before", c->before);
	bind_name(q, ":keep_below", c->keep_below);
	bind_name(q, ":cutoff", c->cutoff);
	bind_name(q, ":stale", c->stale);
	bind_name(q, ":chunk", PRUNE_CHUNK_RUNS);
	src = sqlite3_step(q);
	if (src == SQLITE_ROW) {
		if (r0)
			*r0 = sqlite3_column_int64(q, 0);
		if (r1)
			*r1 = sqlite3_column_int64(q, 1);
		src = SQLITE_DONE;
	}
	if (changes)
		*changes = (uint64_t)sqlite3_changes64(c->st->db);
	sqlite3_finalize(q);
	return src == SQLITE_DONE ? HV_OK : hvst_db_error(c->st, src, "cannot prune");
}

/* Inside a transaction: the next PRUNE_CHUNK_RUNS runs to delete, their artifacts, and the
 * contents that only they had. *runs is 0 when there was nothing left to delete. */
static hv_status prune_chunk(prune_ctx *c, const char *select_runs, hv_prune_result *res,
			     int64_t *newest_started, uint64_t *runs)
{
	hv_store *st = c->st;
	int64_t n = 0, bytes = 0, newest = 0;
	uint64_t n_runs = 0;
	int rc = hvst_exec(st, "DELETE FROM temp.prune_runs; DELETE FROM temp.prune_shas;",
			   "cannot prune");
	if (rc == HV_OK)
		rc = prune_step(c, select_runs, NULL, NULL, &n_runs);
	if (rc == HV_OK && n_runs)
		rc = prune_step(c, "SELECT coalesce(max(started_at_ns), 0) FROM runs"
				   " WHERE id IN (SELECT id FROM temp.prune_runs)", &newest, NULL, NULL);
	/* The digests the doomed artifacts had: the only contents that may lose their last
	 * reference. */
	if (rc == HV_OK && n_runs)
		rc = prune_step(c, "INSERT OR IGNORE INTO temp.prune_shas SELECT sha256"
				   " FROM artifacts WHERE run_id IN (SELECT id FROM temp.prune_runs)",
				NULL, NULL, NULL);
	if (rc == HV_OK && n_runs)
		rc = prune_step(c, "SELECT count(*) FROM artifacts"
				   " WHERE run_id IN (SELECT id FROM temp.prune_runs)", &n, NULL, NULL);
	/* Artifacts and outputs go with their runs (ON DELETE CASCADE). */
	if (rc == HV_OK && n_runs)
		rc = prune_step(c, "DELETE FROM runs WHERE id IN (SELECT id FROM temp.prune_runs)",
				NULL, NULL, NULL);
	static const char unreferenced[] =
		" FROM contents WHERE sha256 IN (SELECT sha256 FROM temp.prune_shas)"
		" AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.sha256 = contents.sha256)";
	char sql[512];
	int64_t n_contents = 0;
	snprintf(sql, sizeof(sql), "SELECT count(*), coalesce(sum(size), 0)%s", unreferenced);
	if (rc == HV_OK && n_runs)
		rc = prune_step(c, sql, &n_contents, &bytes, NULL);
	snprintf(sql, sizeof(sql), "DELETE%s", unreferenced);
	if (rc == HV_OK && n_runs)
		rc = prune_step(c, sql, NULL, NULL, NULL);
	if (rc != HV_OK)
		return rc;
	res->runs += n_runs;
	res->artifacts += (uint64_t)n;
	res->contents += (uint64_t)n_contents;
	res->content_bytes += (uint64_t)bytes;
	if (newest > *newest_started)
		*newest_started = newest;
	*runs = n_runs;
	return HV_OK;
}

/* The ids of the snapshots to delete, read out in full before deleting any. */
static hv_status prune_snapshot_ids(prune_ctx *c, int64_t **ids, size_t *n)
{
	*ids = NULL;
	*n = 0;
	sqlite3_stmt *q = NULL;
	/* A complete snapshot younger than an hour is kept, whoever took it: `harvest snapshot`
	 * has exited by the time its `collect --since` comes. Beyond that, a snapshot whose owner
	 * is alive is kept while that owner has a run in progress (the run compares against it
	 * when its command ends). */
	int src = sqlite3_prepare_v2(c->st->db,
				     "SELECT s.id, o.owner, s.created_at_ns >= :stale OR EXISTS"
				     " (SELECT 1 FROM runs r INDEXED BY runs_open"
				     "  WHERE r.ended_at_ns IS NULL AND r.owner = o.owner),"
				     " s.complete != 0 AND s.created_at_ns >= :stale"
				     " FROM snapshots s"
				     " LEFT JOIN snapshot_owners o ON o.snapshot_id = s.id"
				     " WHERE s.created_at_ns < :cutoff"
				     " OR (s.complete = 0 AND s.created_at_ns < :stale)", -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(c->st, src, "cannot prune");
	bind_name(q, ":cutoff", c->cutoff);
	bind_name(q, ":stale", c->stale);
	size_t cap = 0;
	int rc = HV_OK;
	while (rc == HV_OK && (src = sqlite3_step(q)) == SQLITE_ROW) {
		const char *owner = (const char *)sqlite3_column_text(q, 1);
		if (sqlite3_column_int(q, 3))
			continue;
		if (owner && (sqlite3_column_int(q, 2) || c->live_owner_keeps) &&
		    !hvst_owner_gone(c->st->owner, owner))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			int64_t *p = realloc(*ids, cap * sizeof(**ids));
			if (!p) {
				rc = hv_error_set(HV_ENOMEM, "out of memory");
				break;
			}
			*ids = p;
		}
		(*ids)[(*n)++] = sqlite3_column_int64(q, 0);
	}
	if (rc == HV_OK && src != SQLITE_DONE)
		rc = hvst_db_error(c->st, src, "cannot prune");
	sqlite3_finalize(q);
	return rc;
}

/* Gives freed pages back to the file system (databases made with auto_vacuum = INCREMENTAL),
 * a bounded number per transaction. Best effort: the space is reused anyway. */
static void prune_vacuum(hv_store *st)
{
	char sql[64];
	snprintf(sql, sizeof(sql), "PRAGMA incremental_vacuum(%d)", VACUUM_CHUNK_PAGES);
	for (;;) {
		int64_t free_pages = 0, mode = 0;
		if (hvst_query_int(st, "PRAGMA auto_vacuum", &mode) != HV_OK || mode != 2 ||
		    hvst_query_int(st, "PRAGMA freelist_count", &free_pages) != HV_OK || free_pages == 0)
			break;
		if (hvst_tx_begin(st) != HV_OK)
			break;
		if (hvst_exec(st, sql, "cannot vacuum") != HV_OK) {
			hvst_tx_rollback(st);
			break;
		}
		if (hvst_tx_commit(st) != HV_OK)
			break;
	}
}

static hv_status sq_prune_history(hv_store *st, const hv_prune_opts *opts, hv_prune_result *res,
				  int64_t *newest_out)
{
	bool use_before = opts->has_before || opts->before_ns != 0;
	int rc;
	/* Runs whose harvest was killed end now, so they can go like any other ended run. */
	if ((rc = hvst_reap_interrupted(st)) != HV_OK)
		return rc;
	prune_ctx c = {
		.st = st,
		.use_before = use_before,
		.before = opts->before_ns,
		.stale = hv_store_now_ns() - STALE_SNAPSHOT_NS,
	};
	/* A larger page cache for the prune: the random-order indexes otherwise spill and are
	 * written many times over (measured: 13 s instead of 27 s for 500,000 artifacts). */
	int64_t cache_size = 0;
	char pragma[64];
	if (hvst_query_int(st, "PRAGMA cache_size", &cache_size) == HV_OK)
		hvst_exec(st, "PRAGMA cache_size = " PRUNE_CACHE_SIZE, "cannot prune");
	else
		cache_size = 0;
	/* A prune commits as it goes (see above), so a corrupt page met midway would leave it
	 * half done; SPEC 5 wants a corrupt database untouched. So check first (reading only,
	 * no lock: about 2 s for a million artifacts, against 15 s to prune half of them). */
	rc = hvst_check_integrity(st, false, NULL);
	if (rc == HV_OK)
		rc = hvst_exec(st, "CREATE TEMP TABLE IF NOT EXISTS prune_runs(id INTEGER PRIMARY KEY);"
			   "CREATE TEMP TABLE IF NOT EXISTS prune_shas(sha256 TEXT PRIMARY KEY);",
		       "cannot prune");
	if (rc == HV_OK)
		rc = prune_step(&c, "SELECT coalesce(max(id), 0) FROM runs", &c.max_id, NULL, NULL);
	if (rc == HV_OK && opts->keep_runs >= 0) {
		/* The oldest run kept: the keep_runs-th newest (none kept: everything goes). */
		char sql[128];
		snprintf(sql, sizeof(sql),
			 "SELECT coalesce((SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET %lld),"
			 " 0)", (long long)(opts->keep_runs ? opts->keep_runs - 1 : 0));
		rc = prune_step(&c, sql, &c.keep_below, NULL, NULL);
		if (opts->keep_runs == 0)
			c.keep_below = c.max_id + 1;
	}
	hv_buf sel = {0};
	/* Never a run in progress: its harvest would find its run (and its snapshot) gone. */
	hv_buf_append_str(&sel, "INSERT INTO temp.prune_runs SELECT id FROM runs"
				" WHERE id <= :max AND ended_at_ns IS NOT NULL AND (0");
	if (c.use_before)
		hv_buf_append_str(&sel, " OR started_at_ns < :before");
	if (c.keep_below)
		hv_buf_append_str(&sel, " OR id < :keep_below");
	hv_buf_append_str(&sel, ") ORDER BY id LIMIT :chunk");
	if (rc == HV_OK && !sel.data)
		rc = hv_error_last_status();
	int64_t newest_started = 0;
	for (uint64_t n = 1; rc == HV_OK && n;) {
		/* One transaction: chunks until the time budget is spent. The counts of a
		 * transaction that fails are taken back. */
		hv_prune_result before = *res;
		int64_t newest_before = newest_started;
		int64_t t0 = hv_store_now_ns();
		rc = hvst_tx_begin(st);
		do {
			if (rc == HV_OK)
				rc = prune_chunk(&c, sel.data, res, &newest_started, &n);
		} while (rc == HV_OK && n && hv_store_now_ns() - t0 < PRUNE_TX_BUDGET_NS);
		if (rc == HV_OK)
			rc = hvst_tx_commit(st);
		else if (st->in_tx)
			hvst_tx_rollback(st);
		if (rc != HV_OK) {
			*res = before;
			newest_started = newest_before;
		}
	}
	hv_buf_free(&sel);
	if (cache_size) {
		snprintf(pragma, sizeof(pragma), "PRAGMA cache_size = %lld", (long long)cache_size);
		hvst_exec(st, pragma, "cannot prune");
	}

	*newest_out = newest_started;
	return rc;
}

/* Deletes the snapshots as old as the history that went (cutoff), and those abandoned by
 * killed processes; each a chunk at a time. live_owner_keeps: a snapshot whose owner is alive
 * is always kept (the history is elsewhere, so the runs in progress cannot be checked here). */
static hv_status prune_snapshots(hv_store *st, int64_t cutoff, bool live_owner_keeps,
				 hv_prune_result *res)
{
	prune_ctx c = {
		.st = st,
		.cutoff = cutoff,
		.stale = hv_store_now_ns() - STALE_SNAPSHOT_NS,
		.live_owner_keeps = live_owner_keeps,
	};
	int64_t *ids = NULL;
	size_t n_ids = 0;
	int rc = prune_snapshot_ids(&c, &ids, &n_ids);
	for (size_t i = 0; rc == HV_OK && i < n_ids; i++) {
		rc = hv_store_snapshot_delete(st, ids[i]);
		if (rc == HV_OK)
			res->snapshots++;
		else if (rc == HV_ENOTFOUND) /* someone else deleted it meanwhile */
			rc = HV_OK;
	}
	free(ids);
	return rc;
}

void hv_prune_opts_init(hv_prune_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->keep_runs = -1;
}

hv_status hv_store_prune(hv_store *st, const hv_prune_opts *opts, hv_prune_result *res)
{
	if (!st || !opts || !res)
		return hv_error_set(HV_EUSAGE, "hv_store_prune: missing argument");
	memset(res, 0, sizeof(*res));
	bool use_before = opts->has_before || opts->before_ns != 0;
	if (opts->keep_runs < 0 && !use_before)
		return hv_error_set(HV_EUSAGE, "prune: give --keep-runs N or --before TIME");
	/* Both would be a union or an intersection, and either reading surprises someone. */
	if (opts->keep_runs >= 0 && use_before)
		return hv_error_set(HV_EUSAGE, "prune: give --keep-runs N or --before TIME, not both");
	int rc = hvst_check_writable(st);
	if (rc != HV_OK)
		return rc;
	int64_t newest_started = 0;
	rc = st->hist->prune_history(st, opts, res, &newest_started);
	int64_t cutoff = use_before ? opts->before_ns : INT64_MIN;
	if (opts->keep_runs >= 0 && res->runs && newest_started > cutoff)
		cutoff = newest_started;
	if (rc == HV_OK)
		rc = prune_snapshots(st, cutoff, st->hist != &hvst_sqlite_history, res);
	if (rc != HV_OK)
		return rc; /* res has what was done before the failure */
	prune_vacuum(st);
	hv_error_clear();
	return HV_OK;
}

/* ---- The public calls: dispatch to the history backend -------------------------------- */

const hvst_history_ops hvst_sqlite_history = {
	.name = "sqlite",
	.run_begin = sq_run_begin,
	.run_finish = sq_run_finish,
	.runs = sq_runs,
	.run_next = sq_run_next,
	.run_free = sq_run_free,
	.mime_types = sq_mime_types,
	.artifacts = sq_artifacts,
	.artifact_next = sq_artifact_next,
	.artifact_free = sq_artifact_free,
	.content_get = content_get,
	.artifact_sha = sq_artifact_sha,
	.prune_history = sq_prune_history,
	.close = NULL,
};

const char *hv_store_history_backend(const hv_store *st)
{
	return st && st->hist ? st->hist->name : "sqlite";
}

bool hv_host_name_ok(const char *host)
{
	if (!host)
		return false;
	size_t len = strlen(host);
	if (len == 0 || len > 255)
		return false;
	for (size_t i = 0; i < len;) {
		if ((unsigned char)host[i] < 0x20 || host[i] == 0x7f)
			return false;
		size_t n = hv_utf8_sequence_length(host + i, len - i);
		/* not UTF-8, or a C1 control (U+0080 to U+009F: C2 80 to C2 9F) */
		if (n == 0 || (n == 2 && (unsigned char)host[i] == 0xc2 &&
			       (unsigned char)host[i + 1] < 0xa0))
			return false;
		i += n;
	}
	return true;
}

hv_status hv_store_run_begin(hv_store *st, const hv_run_start *r, int64_t *run_id)
{
	if (!st || !r || !r->dir || !run_id)
		return hv_error_set(HV_EUSAGE, "hv_store_run_begin: missing argument");
	/* A host is text every backend can store and compare (PostgreSQL's is a text column):
	 * checked here, for both, before anything is written. */
	if (r->host && !hv_host_name_ok(r->host))
		return hv_error_set(HV_EUSAGE, "host name: not 1 to 255 bytes of UTF-8 text without "
					       "control characters");
	int rc = hvst_check_writable(st);
	return rc != HV_OK ? rc : st->hist->run_begin(st, r, run_id);
}

hv_status hv_store_run_finish(hv_store *st, int64_t run_id, const hv_run_end *end,
			      const hv_artifact_in *artifacts, size_t n_artifacts)
{
	if (!st || !end || (n_artifacts && !artifacts))
		return hv_error_set(HV_EUSAGE, "hv_store_run_finish: missing argument");
	int rc = hvst_check_writable(st);
	if (rc != HV_OK)
		return rc;
	/* The artifacts are checked here, once for either backend, and before its transaction
	 * begins: hashing a content is slow, and must not hold the write lock. A bad one
	 * records nothing, and the run stays open. */
	char (*shas)[65] = NULL;
	if (n_artifacts && !(shas = malloc(n_artifacts * sizeof(*shas))))
		return hv_error_set(HV_ENOMEM, "out of memory");
	for (size_t i = 0; rc == HV_OK && i < n_artifacts; i++)
		rc = check_artifact(&artifacts[i], shas[i]);
	if (rc == HV_OK)
		rc = st->hist->run_finish(st, run_id, end, artifacts, shas, n_artifacts);
	free(shas);
	return rc;
}

hv_status hv_store_runs(hv_store *st, const hv_run_filter *f, hv_run_iter **out)
{
	if (!st || !out)
		return hv_error_set(HV_EUSAGE, "hv_store_runs: missing argument");
	*out = NULL;
	hv_run_filter none = {0};
	int rc = st->hist->runs(st, f ? f : &none, out);
	if (rc == HV_OK)
		(*out)->ops = st->hist;
	return rc;
}

hv_status hv_run_iter_next(hv_run_iter *it, const hv_run_row **out)
{
	if (!it || !out)
		return hv_error_set(HV_EUSAGE, "hv_run_iter_next: missing argument");
	if (it->done)
		return HV_DONE;
	hv_status rc = it->ops->run_next(it, out);
	it->done = rc == HV_DONE;
	return rc;
}

void hv_run_iter_free(hv_run_iter *it)
{
	if (it)
		it->ops->run_free(it);
}

hv_status hvst_mime_set_add(hvst_mime_set *s, const char *t, size_t len)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		char **types = cap < SIZE_MAX / sizeof(*types) ? realloc(s->types, cap * sizeof(*types))
							       : NULL;
		if (!types)
			return hv_error_set(HV_ENOMEM, "out of memory");
		s->types = types;
		s->cap = cap;
	}
	char *copy = t ? strndup(t, len) : NULL;
	if (!copy)
		return hv_error_set(HV_ENOMEM, "out of memory");
	s->types[s->n++] = copy;
	return HV_OK;
}

void hvst_mime_set_free(hvst_mime_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->types[i]);
	free(s->types);
	memset(s, 0, sizeof(*s));
}

/* The stored types pattern matches, ignoring case (hvst_mime_set). */
static hv_status select_mimes(hv_store *st, const char *pattern, hvst_mime_set *out)
{
	hv_status rc = st->hist->mime_types(st, out);
	size_t kept = 0;
	for (size_t i = 0; i < out->n; i++) {
		if (rc == HV_OK && fnmatch(pattern, out->types[i], FNM_CASEFOLD) == 0)
			out->types[kept++] = out->types[i];
		else
			free(out->types[i]);
	}
	out->n = kept;
	return rc;
}

hv_status hv_store_artifacts(hv_store *st, const hv_artifact_filter *f, hv_artifact_iter **out)
{
	if (!st || !out)
		return hv_error_set(HV_EUSAGE, "hv_store_artifacts: missing argument");
	*out = NULL;
	hv_artifact_filter none = {0};
	if (!f)
		f = &none;
	hvst_mime_set mimes = {0};
	int rc = f->mime ? select_mimes(st, f->mime, &mimes) : HV_OK;
	if (rc == HV_OK)
		rc = st->hist->artifacts(st, f, f->mime ? &mimes : NULL, out);
	hvst_mime_set_free(&mimes);
	if (rc == HV_OK)
		(*out)->ops = st->hist;
	return rc;
}

hv_status hv_artifact_iter_next(hv_artifact_iter *it, const hv_artifact_row **out)
{
	if (!it || !out)
		return hv_error_set(HV_EUSAGE, "hv_artifact_iter_next: missing argument");
	if (it->done)
		return HV_DONE;
	hv_status rc = it->ops->artifact_next(it, out);
	it->done = rc == HV_DONE;
	return rc;
}

void hv_artifact_iter_free(hv_artifact_iter *it)
{
	if (it)
		it->ops->artifact_free(it);
}

hv_status hv_store_content_get(hv_store *st, const char *sha256_hex, void **data, size_t *len)
{
	if (!st || !data || !len)
		return hv_error_set(HV_EUSAGE, "hv_store_content_get: missing argument");
	*data = NULL;
	*len = 0;
	char sha[65];
	int rc = hvst_hex_norm(sha256_hex, true, sha);
	return rc != HV_OK ? rc : st->hist->content_get(st, sha, NULL, data, len);
}

hv_status hv_store_artifact_content(hv_store *st, int64_t artifact_id, void **data,
				    size_t *len)
{
	if (!st || !data || !len)
		return hv_error_set(HV_EUSAGE, "hv_store_artifact_content: missing argument");
	*data = NULL;
	*len = 0;
	char sha[65] = "";
	int rc = st->hist->artifact_sha(st, artifact_id, sha);
	if (rc != HV_OK)
		return rc;
	char what[48];
	snprintf(what, sizeof(what), "artifact %lld", (long long)artifact_id);
	/* (an artifact recorded without its content has none to give, even when another run
	 * stored the same bytes: as `history show` and a run's archive say; its SHA-256 gets
	 * them) */
	rc = st->hist->content_get(st, sha, what, data, len);
	if (rc == HV_ENOTFOUND)
		hv_error_set(HV_ENOTFOUND, "artifact %lld: its content was not stored",
			     (long long)artifact_id);
	return rc;
}
