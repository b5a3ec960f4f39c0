/* Private to the store modules (store.c, store_open.c, store_schema.c, store_mime.c,
 * store_snapshot.c, store_history.c, store_pg.c). */
#ifndef HARVEST_STORE_INTERNAL_H
#define HARVEST_STORE_INTERNAL_H

#include "dl_sqlite.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"
#include "internal.h"
#include "store_backend.h"

#include <stdatomic.h>
#include <string.h>

/* How long a statement waits for another connection's lock. */
#define ST_BUSY_TIMEOUT_MS 10000

/* The cached statements: prepared on first use with SQLITE_PREPARE_PERSISTENT, reset after
 * every use, finalized on close. */
enum st_stmt {
	STMT_BEGIN,
	STMT_COMMIT,
	STMT_ROLLBACK,
	STMT_MIME_GET,
	STMT_MIME_PUT,
	STMT_SNAP_ENTRY_PUT,
	STMT_SNAP_PAGE_FIRST,
	STMT_SNAP_PAGE_NEXT,
	STMT_SNAP_LOOKUP,
	STMT_CONTENT_PUT,
	STMT_CONTENT_GET,
	STMT_ARTIFACT_PUT,
	STMT__COUNT
};

/* A MIME answer waiting for the next batch. */
typedef struct st_mime_pending {
	hv_stat st;
	char *fingerprint;
	char *mime;
	char sha256[65];     /* "" when unknown */
	int64_t cached_at_ns;
	/* The name refinement of mime for the base name rname under the refinement tables
	 * refine_fp (see hvst_mime_put_refined); all NULL when none. */
	char *rname;
	size_t rname_len;
	char *refined;
	char *refine_fp;
} st_mime_pending;

#define ST_MIME_BATCH 256

struct hv_store {
	sqlite3 *db;
	char *path;          /* as given or defaulted: for messages */
	char *abs_path;      /* hv_store_path() */
	bool readonly;
	bool damaged;        /* SQLite said the file is corrupt: no MIME answer is written to it */
	bool ephemeral;      /* a read-only open of a missing database: an empty in-memory one */
	bool in_tx;
	bool file_known;     /* file_dev/file_ino: the database file as opened */
	uint64_t file_dev, file_ino;
	char *owner;         /* this process as a run's owner (hvst_owner_self()); NULL: unknown */
	sqlite3_stmt *stmt[STMT__COUNT];
	const hvst_history_ops *hist; /* where the history is: hvst_sqlite_history or pg */
	struct hvpg *pg;              /* the PostgreSQL connection (store_pg.c), or NULL */
	atomic_bool interrupted;      /* hv_store_interrupt was called */
	st_mime_pending mime[ST_MIME_BATCH];
	size_t n_mime;
};

/* Sets the last error from a SQLite failure ("<path>: <what>: <reason>") and returns the
 * status: HV_ENOMEM for SQLITE_NOMEM, else HV_EDB. */
hv_status hvst_db_error(hv_store *st, int rc, const char *what);
/* PRAGMA integrity_check (full) or quick_check, of the whole file or of one table and its
 * indexes: HV_OK when it says "ok", else HV_EDB "<path>: database is corrupt (<the first
 * problem>)" and the store marked damaged. The one-table check is for a lookup by key that
 * found nothing: a damaged b-tree page can hide rows from it without SQLite reporting it, and
 * "no run 2" must not be said of a run a damaged page hides. It reads the whole table, so only
 * on that path and only for small tables (runs, artifacts). */
hv_status hvst_check_integrity(hv_store *st, bool full, const char *table);
/* The cached statement `which`, prepared on first use (NULL and an error set on failure). */
sqlite3_stmt *hvst_stmt(hv_store *st, enum st_stmt which);
/* The first column of the first row of sql (a PRAGMA or a SELECT without parameters). */
hv_status hvst_query_int(hv_store *st, const char *sql, int64_t *out);
/* Runs SQL without results. */
hv_status hvst_exec(hv_store *st, const char *sql, const char *what);
/* BEGIN IMMEDIATE / COMMIT / ROLLBACK of the handle's one write transaction. */
hv_status hvst_tx_begin(hv_store *st);
hv_status hvst_tx_commit(hv_store *st);
void hvst_tx_rollback(hv_store *st);
/* HV_EUSAGE when the handle was opened read-only. */
hv_status hvst_check_writable(hv_store *st);
/* Checks and lower-cases a hex digest of 1..64 digits (exactly 64 when full) into out. */
hv_status hvst_hex_norm(const char *in, bool full, char out[65]);
/* Binds (ptr, len) bytes as a BLOB (an empty one, never NULL, when len is 0). */
int hvst_bind_bytes(sqlite3_stmt *s, int idx, const void *p, size_t len);
/* Steps a statement that returns no rows, then resets it: SQLITE_DONE or the error code. */
int hvst_step_done(sqlite3_stmt *s);

/* This process as the owner of what it records: "PID STARTTIME PIDNS BOOT_ID HOST" (the start
 * time in clock ticks since boot, field 22 of /proc/PID/stat; PIDNS the inode of
 * /proc/self/ns/pid), malloc'd; NULL when /proc cannot tell (then nothing it records is ever
 * found gone). */
char *hvst_owner_self(void);
/* Whether the process that owner (a string of hvst_owner_self()'s form) names is gone, judged
 * from the process whose owner string is self: only when both are on the same host and in the
 * same PID namespace, and that boot is over or that process (pid with that start time) no
 * longer exists. Unknown is never gone. */
bool hvst_owner_gone(const char *self, const char *owner);
/* Whether end already says the run was not recorded (then a failed recording of it needs no
 * second try at saying so). */
static inline bool hvst_end_not_recorded(const hv_run_end *end)
{
	return end->end_reason && !strcmp(end->end_reason, HV_END_NOT_RECORDED);
}
/* Ends the unended runs whose owner is gone (end_reason "interrupted"), in one transaction
 * when there are any. */
hv_status hvst_reap_interrupted(hv_store *st);

/* store_schema.c: HV_EDB "<path>: made by a newer harvest (schema version N ...)". */
hv_status hvst_refuse_newer(hv_store *st, int64_t version);
/* store_schema.c: runs the missing schema migrations in one write transaction. */
hv_status hvst_migrate(hv_store *st);
/* store_mime.c: drops the MIME answers waiting for the next batch. */
void hvst_mime_pending_free(hv_store *st);

/* The MIME cache with the name refinement (hv_mime_detect_cached): a row also keeps the refined
 * answer for one base name under one set of refinement tables (hvm_refine_fingerprint), so a
 * hit under the same name and tables needs no refinement at all. */
typedef struct hvst_mime_hit {
	char *raw;        /* libmagic's answer; NULL on a miss, and when refined is set */
	char *refined;    /* the refined answer when name and tables match, else NULL */
	char sha256[65];  /* "" when unknown */
} hvst_mime_hit;
hv_status hvst_mime_lookup_refined(hv_store *st, const hv_stat *s, const char *fingerprint,
				   const char *name, size_t name_len, const char *refine_fp,
				   hvst_mime_hit *out);
/* hv_store_mime_put_sha() that also records refined as mime_type's refinement for name under
 * refine_fp (refine_fp NULL: no refinement recorded). */
hv_status hvst_mime_put_refined(hv_store *st, const hv_stat *s, const char *fingerprint,
				const char *mime_type, const char *sha256, const char *name,
				size_t name_len, const char *refined, const char *refine_fp);

#endif
