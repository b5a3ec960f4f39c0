/* harvest — the one SQLite database: MIME cache, snapshots, runs, artifacts and contents.
 *
 * Location: an explicit path, else $HARVEST_DB, else
 * ${XDG_DATA_HOME:-$HOME/.local/share}/harvest/harvest.db. The database runs in WAL mode with a
 * busy timeout; every write is a short `BEGIN IMMEDIATE` transaction, so any number of
 * processes can share it and a process killed at any moment leaves it consistent.
 *
 * Refusal: a file that is not a SQLite database, a SQLite database that is not harvest's (its
 * `application_id` is not HV_STORE_APPLICATION_ID), a schema newer than this harvest knows, a
 * corrupt database, or (for a writing open) a read-only file or directory gets HV_EDB and a
 * one-line message naming the path; the file is never modified and no -wal/-shm/-journal file
 * is created next to it. "Corrupt" is what SQLite finds on the pages the open reads (header,
 * schema); a writing open of a harvest database that is not in WAL mode (a copy, a restore: one
 * harvest did not leave) first runs a full `PRAGMA integrity_check`, once, before switching it
 * to WAL. A database already in WAL mode is not fully checked at every open (that would cost
 * time in the size of the history): a damaged page is found when a command reads it, and
 * hv_store_prune runs quick_check first. A missing or empty (0-byte) file is a new database (a missing one is
 * built complete under a temporary name beside it, ".hv.XXXXXX" (10 bytes: a name of
 * NAME_MAX bytes works too), and renamed into place, so no process ever sees it half made).
 *
 * Paths are file names, never SQLite URIs: ":memory:" (a history that would vanish with the
 * handle) and names starting with "file:" are refused with HV_EUSAGE; "./file:x.db" names
 * such a file.
 *
 * Owners: every run and snapshot a writing handle records carries its owner, the process
 * (pid and start time from /proc/PID/stat, its PID namespace, the boot id and the host name).
 * A writing open, and hv_store_prune(), end every unended run whose owner process is gone
 * (same host, and another boot or no such process any more) with end_reason
 * HV_END_INTERRUPTED; a run whose owner is alive, or cannot be checked from here (another
 * host or PID namespace, no /proc), is left as it is.
 *
 * Strings: paths, names, labels and stream data are bytes (any value but NUL, not necessarily
 * UTF-8) given and returned as (pointer, length). Times are int64 nanoseconds since the epoch
 * (CLOCK_REALTIME). SHA-256 digests are 64 hex digits (accepted in either case, returned in
 * lower case).
 *
 * Threads: a handle and everything made from it are used by one thread at a time; two handles
 * (in one process or several) do not interfere. */
#ifndef HARVEST_STORE_H
#define HARVEST_STORE_H

#include "types.h"
#include "walk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The `PRAGMA application_id` of a harvest database: "HRVS". */
#define HV_STORE_APPLICATION_ID 0x48525653
/* The schema version (`PRAGMA user_version`) this library writes. */
#define HV_STORE_SCHEMA_VERSION 7
/* The version of harvest's PostgreSQL schema (the row harvest.meta 'schema_version'). */
#define HV_STORE_PG_SCHEMA_VERSION 2
/* The largest content a history stores, in bytes: one value of SQLite (its default
 * SQLITE_MAX_LENGTH) and of PostgreSQL (a bytea holds at most 1 GiB) alike. A larger
 * artifact is recorded without its content. */
#define HV_STORE_CONTENT_MAX 1000000000

typedef struct hv_store hv_store;

/* Flags of hv_store_open(). */
enum {
	/* Query only: nothing is written and nothing is created. A missing or empty database reads
	 * as an empty one (no runs, no artifacts); writes fail with HV_EUSAGE. (A database in a
	 * directory the caller may not write is read without locks, as SQLite's "immutable".) */
	HV_STORE_READONLY = 1 << 0,
	/* The history is not used (`--no-history`): a PostgreSQL one is not even connected to,
	 * so a server that cannot be reached does not stop a command that records nothing. Only
	 * the local file (MIME cache, snapshots) is opened. */
	HV_STORE_NO_HISTORY = 1 << 1
};

/* The default path in *out (malloc'd, the caller frees): $HARVEST_DB when set and not empty,
 * else ${XDG_DATA_HOME:-$HOME/.local/share}/harvest/harvest.db (a relative XDG_DATA_HOME is
 * ignored, as the XDG spec says). Creates nothing. */
HV_EXTERN hv_status hv_store_default_path(char **out);

/* Opens (creating when missing, unless HV_STORE_READONLY) the database at path; NULL means
 * hv_store_default_path(), and then the missing directories of the XDG location are created
 * with mode 0700. A new database file is created with mode 0600. Runs the missing schema
 * migrations in one transaction. HV_EDB (see the refusals above) or HV_ENOMEM on failure;
 * HV_EUSAGE for flags other than HV_STORE_READONLY and HV_STORE_NO_HISTORY. */
HV_EXTERN hv_status hv_store_open(hv_store **out, const char *path, int flags);

/* A history in PostgreSQL: when path (or the default path, from $HARVEST_DB) is a
 * postgresql:// or postgres:// URI (any libpq connection URI: TLS, ~/.pgpass, unix sockets),
 * runs, artifacts and contents go to harvest's schema ("harvest") in that database, shared by
 * every writer on every host, while the MIME cache and snapshots (about local inodes) stay in
 * the local SQLite file cache_path (NULL: the XDG location, whatever $HARVEST_DB says).
 * cache_path is not used for a SQLite history (everything is in that one file). The
 * connection waits at most 10 s unless the URI (or PGCONNECT_TIMEOUT) sets connect_timeout,
 * and every statement at most 60 s. Refused with HV_EDB (one line, passwords masked): an
 * unreachable server, a "harvest" schema that is not harvest's or is newer than this harvest
 * knows (never modified). A writing open creates or upgrades the schema under an advisory
 * lock (concurrent first writers do not race); a read-only open of a database without it
 * reads an empty history. */
HV_EXTERN hv_status hv_store_open_with_cache(hv_store **out, const char *path,
					     const char *cache_path, int flags);

/* "sqlite" or "postgresql": where st keeps its history. */
HV_EXTERN const char *hv_store_history_backend(const hv_store *st);

/* Writes pending MIME cache answers, then closes the handle and frees it (always). Returns the
 * status of that last write. NULL is allowed. */
HV_EXTERN hv_status hv_store_close(hv_store *st);

/* The database file in use, made absolute with its directory's symlinks resolved (so the
 * collector can recognise it and its -wal/-shm/-journal files). */
HV_EXTERN const char *hv_store_path(const hv_store *st);

/* Stops st waiting for a PostgreSQL server that does not answer: from now on, a wait of the
 * history on st (or of an hv_store_push from st) that has heard nothing from the server for
 * 1 s fails (HV_EDB, "interrupted while waiting for the server"), the connection is closed and
 * every later statement fails at once. A server that answers is not cut off. The local file
 * (SQLite) is not affected. Safe from a signal handler and from another thread (it only sets
 * a flag, which a wait looks at every 100 ms). Without it, a statement that hears nothing from
 * the server for 90 s (a prune's: 630 s) fails the same way on its own. */
HV_EXTERN void hv_store_interrupt(hv_store *st);

/* Writes pending MIME cache answers now (they are otherwise written in batches and on close). */
HV_EXTERN hv_status hv_store_flush(hv_store *st);

/* Runs `PRAGMA integrity_check`: HV_OK when it says "ok", else HV_EDB with its report on one
 * line, and from then on no MIME answer is written through st (as after SQLite reports the
 * file corrupt); runs and artifacts are still recorded. */
HV_EXTERN hv_status hv_store_integrity_check(hv_store *st);

/* CLOCK_REALTIME in nanoseconds since the epoch, the clock of every time in the store. */
HV_EXTERN int64_t hv_store_now_ns(void);

/* ---- Runs and artifacts ----------------------------------------------------------------- */

/* What is known when a run (or a collect) starts. */
typedef struct hv_run_start {
	const char *label;        /* --label, NUL-terminated; NULL: none */
	const char *command_json; /* the argv array as JSON text; NULL for a collect */
	const char *dir;          /* the absolute directory, NUL-terminated */
	int64_t started_at_ns;    /* 0: now */
	const char *host;         /* the host it ran on, NUL-terminated; NULL: this hostname.
	                           * 1-255 bytes of UTF-8 text (hv_host_name_ok), else
	                           * hv_store_run_begin refuses it (HV_EUSAGE) */
} hv_run_start;

/* Whether host can be recorded as a run's host: 1 to 255 bytes of UTF-8, no control
 * characters. */
HV_EXTERN bool hv_host_name_ok(const char *host);

/* Records a run that has started (committed at once, so a run killed before it finished shows
 * in the history with no end), owned by this process. *run_id gets its id: ids only ever
 * grow, one of a pruned run is never given again (and artifact ids likewise). */
HV_EXTERN hv_status hv_store_run_begin(hv_store *st, const hv_run_start *r, int64_t *run_id);

/* One artifact to record. */
typedef struct hv_artifact_in {
	const char *path;         /* relative to the collected root */
	size_t path_len;
	const char *name;         /* the base name */
	size_t name_len;
	const char *mime_type;    /* NUL-terminated */
	uint64_t size;
	const char *sha256;       /* 64 hex digits of the file's content */
	const void *content;      /* the bytes to store (deduplicated by SHA-256), or NULL */
	size_t content_len;       /* must equal size when content is given */
	const char *change;       /* "created", "modified", or NULL (a collect of everything) */
	/* Instead of content (NULL): the content_len bytes are read when they are stored, one
	 * artifact at a time, by read_content(read_ctx, a, off, buf, n) (n bytes from offset off
	 * into buf; HV_OK or a failure with its message), so a caller need not hold every content
	 * at once (a collection's spool): both histories read them in pieces, never a whole
	 * content (the PostgreSQL one through a temporary table of its session; where the role
	 * may not make one, one whole content at a time). NULL: no content, unless
	 * content is given. read_key is the reader's own (where the bytes are, for it). */
	hv_status (*read_content)(void *read_ctx, const struct hv_artifact_in *a, uint64_t off,
				  void *buf, size_t n);
	void *read_ctx;
	uint64_t read_key;
} hv_artifact_in;

/* Why a run ended, besides the command's own end (hv_run_end.end_reason; NULL there: it ended
 * normally and everything was recorded). */
/* The process that recorded it was gone before it ended (killed): set by the store. */
#define HV_END_INTERRUPTED "interrupted"
/* The command was ended early by its caller (harvest got SIGINT, SIGTERM or SIGHUP; a library
 * caller's hv_run_opts.cancel_fd): what it produced until then is recorded. */
#define HV_END_CANCELLED "cancelled"
/* The command ran, but recording what it produced failed (disk full, lock busy): the run is
 * ended with no artifacts, and its ExecutionResult must not claim a run_id. */
#define HV_END_NOT_RECORDED "not_recorded"

/* How a run ended: everything `history show` needs to print the ExecutionResult again. */
typedef struct hv_run_end {
	int64_t ended_at_ns;      /* 0: now */
	bool has_exit_code;       /* false for a collect (exit_code is then null) */
	int exit_code;
	bool timed_out;
	int64_t duration_ms;      /* -1: unknown (null) */
	const char *stdout_data;  /* the kept stdout bytes (NULL with length 0: none) */
	size_t stdout_len;
	bool stdout_truncated;
	const char *stderr_data;
	size_t stderr_len;
	bool stderr_truncated;
	const char *skipped_json; /* the `skipped` array as JSON text; NULL: "[]" */
	const char *deleted_json; /* the `deleted` array (paths) as JSON text; NULL: none known
	                           * (a collect of everything) */
	const char *end_reason;   /* NULL; HV_END_NOT_RECORDED when ending a run whose recording
	                           * the caller gave up on */
} hv_run_end;

/* Records the artifacts (with their contents, when given; a content's SHA-256 is checked) and
 * the end of run run_id, all in one transaction: either all of it is recorded or none.
 * HV_EUSAGE for a bad digest or a content that does not match it; HV_ENOTFOUND when the run does
 * not exist (pruned meanwhile) or has already finished.
 *
 * When the recording fails midway (a database error: disk full, the lock busy past the
 * timeout), none of it is recorded, and the run is then ended, in a transaction of its own,
 * with no artifacts and end_reason HV_END_NOT_RECORDED (best effort: if that fails too, the
 * next writing open after this process exits ends it as HV_END_INTERRUPTED); the error
 * returned is the first one. The caller must then report the run as not recorded
 * (`"run_id": null`), never as the id of a run that lacks the artifacts. (A later
 * hv_store_run_finish() of that run returns HV_ENOTFOUND: it has ended.) */
HV_EXTERN hv_status hv_store_run_finish(hv_store *st, int64_t run_id, const hv_run_end *end,
                              const hv_artifact_in *artifacts, size_t n_artifacts);

/* Filters of hv_store_runs(); zero (or NULL) means "any" (so run ids start at 1: a caller
 * looking up one run must refuse an id below 1 itself). */
typedef struct hv_run_filter {
	int64_t run_id;       /* only this run */
	int64_t since_ns;     /* started at or after */
	const char *label;    /* this exact label */
	uint64_t limit;       /* at most this many */
	bool with_output;     /* also read stdout, stderr and skipped */
	const char *host;     /* recorded on this exact host */
} hv_run_filter;

/* One run. Pointers are valid until the next call on the iterator. */
typedef struct hv_run_row {
	int64_t run_id;
	const char *label;        /* NULL when none */
	size_t label_len;
	const char *command_json; /* NULL for a collect */
	const char *dir;
	size_t dir_len;
	int64_t started_at_ns;
	bool ended;               /* false while running (or killed, until a writing open sees it) */
	int64_t ended_at_ns;
	const char *end_reason;   /* NULL, HV_END_INTERRUPTED or HV_END_NOT_RECORDED */
	bool has_exit_code;
	int exit_code;
	bool timed_out;
	int64_t duration_ms;      /* -1: unknown */
	uint64_t artifacts;       /* how many artifacts were recorded */
	/* with_output only (else NULL/0/false): */
	const char *stdout_data;
	size_t stdout_len;
	bool stdout_truncated;
	const char *stderr_data;
	size_t stderr_len;
	bool stderr_truncated;
	const char *skipped_json; /* "[]" when none */
	const char *deleted_json; /* NULL when the run recorded none (a collect of everything) */
	const char *host;         /* NULL when unknown (recorded before hosts were) */
} hv_run_row;

typedef struct hv_run_iter hv_run_iter;

/* Past runs matching f (NULL: all), newest first. */
HV_EXTERN hv_status hv_store_runs(hv_store *st, const hv_run_filter *f, hv_run_iter **out);
/* The next run in *out (HV_OK) or HV_DONE. Do not write through the store while iterating. */
HV_EXTERN hv_status hv_run_iter_next(hv_run_iter *it, const hv_run_row **out);
HV_EXTERN void hv_run_iter_free(hv_run_iter *it);

/* Filters of hv_store_artifacts(); zero (or NULL) means "any". */
typedef struct hv_artifact_filter {
	int64_t artifact_id;  /* only this artifact */
	int64_t run_id;       /* only this run's */
	const char *mime;     /* an fnmatch pattern on the MIME type, ignoring case: "text/plain",
	                       * "image/" then "*" */
	const char *name;     /* an fnmatch glob on the base name: "*.png" */
	const char *sha256;   /* hex digits: the full digest or a prefix of it */
	int64_t since_ns;     /* recorded at or after */
	uint64_t limit;       /* at most this many */
	bool with_content;    /* also read the stored content of the artifacts that stored one */
	const char *host;     /* of runs recorded on this exact host */
} hv_artifact_filter;

/* One artifact. Pointers are valid until the next call on the iterator. */
typedef struct hv_artifact_row {
	int64_t artifact_id;
	int64_t run_id;
	const char *path;
	size_t path_len;
	const char *name;
	size_t name_len;
	const char *mime_type;
	uint64_t size;
	const char *sha256;
	int64_t recorded_at_ns;
	bool content_stored;      /* this run stored the content */
	const void *content;      /* with_content and content_stored only, else NULL; its SHA-256
	                           * was checked (a mismatch fails hv_artifact_iter_next with
	                           * HV_EDB) */
	size_t content_len;
	const char *change;       /* "created", "modified", or NULL when not recorded */
} hv_artifact_row;

typedef struct hv_artifact_iter hv_artifact_iter;

/* Recorded artifacts matching f (NULL: all): newest run first, and in the order recorded
 * within a run. HV_EUSAGE for a sha256 filter that is not hex. */
HV_EXTERN hv_status hv_store_artifacts(hv_store *st, const hv_artifact_filter *f, hv_artifact_iter **out);
/* The next artifact in *out (HV_OK) or HV_DONE. Do not write through the store while
 * iterating. */
HV_EXTERN hv_status hv_artifact_iter_next(hv_artifact_iter *it, const hv_artifact_row **out);
HV_EXTERN void hv_artifact_iter_free(hv_artifact_iter *it);

/* The stored bytes whose SHA-256 is sha256_hex (64 digits): *data malloc'd (the caller frees;
 * non-NULL even when empty) and *len. HV_ENOTFOUND when no content with that digest is stored.
 * Every content read is hashed again: bytes that do not match their SHA-256 (the database
 * was modified behind harvest's back) are refused with HV_EDB, never handed out. */
HV_EXTERN hv_status hv_store_content_get(hv_store *st, const char *sha256_hex, void **data, size_t *len);

/* The stored bytes of artifact artifact_id (by its digest, so a content stored by another run
 * serves as well), checked as above. HV_ENOTFOUND when there is no such artifact ("no artifact N")
 * or no stored content for it. */
HV_EXTERN hv_status hv_store_artifact_content(hv_store *st, int64_t artifact_id, void **data,
                                    size_t *len);

/* ---- Writing a file ------------------------------------------------------------------- */

/* Flags of hv_write_file(). */
enum {
	/* A symlink at path is followed (to an existing file); without it, it is refused. */
	HV_WRITE_FOLLOW = 1 << 0
};

/* Writes data to path without ever replacing what path is:
 * - missing: the bytes go to an unnamed file (O_TMPFILE; where that or /proc is missing, a
 *   temporary file ".hv.XXXXXX") in the same directory, made mode 0666 & ~umask, then linked
 *   into place without replacing anything: never half written, nothing left if killed;
 * - a regular file with one link, owned by this user and group: likewise, with its mode copied,
 *   given a temporary name ".hv.XXXXXX" once complete and renamed over it (readers see the old
 *   or the new content, never a mix);
 * - a regular file with other hard links or another owner or group, or in a directory this
 *   user may not write: written in place
 *   (truncated to the new length), so every link and its owner, mode and inode are kept; such a
 *   write is not atomic;
 * - a character or block device, a FIFO: opened (O_NONBLOCK, so a FIFO nobody reads is refused
 *   with ENXIO at once rather than waiting) and written into;
 * - a symlink: refused (HV_EUSAGE), unless HV_WRITE_FOLLOW (then its existing target, or the
 *   open pipe or device a link with no path leads to, /dev/stdout to a pipe, written in
 *   place); a directory or socket: refused.
 * Errors (HV_EIO, HV_EUSAGE) name the path and the reason ("out: No space left on device");
 * flags other than HV_WRITE_FOLLOW are HV_EUSAGE. */
HV_EXTERN hv_status hv_write_file(const char *path, const void *data, size_t len, int flags);

/* hv_write_file for bytes that are not all in memory (an archive as it is made): the same
 * choice of how path is written, made when it is opened. Write through hv_file_out_fd(), then
 * hv_file_out_commit() (syncs, and puts the file in place as hv_write_file does: a name of
 * NAME_MAX bytes works) or hv_file_out_abort() (the unnamed or temporary file is gone; a file
 * written in place keeps what was written). Both free the handle. Unlike hv_write_file, a file
 * that appears at a missing path while it is written is not replaced: commit fails (HV_EIO). */
typedef struct hv_file_out hv_file_out;
HV_EXTERN hv_status hv_file_out_open(hv_file_out **out, const char *path, int flags);
/* The descriptor to write to (owned by the handle). */
HV_EXTERN int hv_file_out_fd(const hv_file_out *o);
HV_EXTERN hv_status hv_file_out_commit(hv_file_out *o);
HV_EXTERN void hv_file_out_abort(hv_file_out *o);

/* ---- Prune ------------------------------------------------------------------------------ */

typedef struct hv_prune_opts {
	int64_t keep_runs;   /* >= 0: delete all runs but the newest keep_runs; -1: unused */
	int64_t before_ns;   /* delete the runs started before this time, when has_before or
	                      * when it is not 0 (so 0 alone means unused) */
	bool has_before;     /* before_ns is set, even to 0 (1970-01-01T00:00:00Z) */
} hv_prune_opts;

/* Fills opts with nothing chosen (keep_runs -1, no before): the caller sets one of the two;
 * hv_store_prune refuses opts with neither (HV_EUSAGE). A struct zeroed by hand instead has
 * keep_runs 0, which deletes every run. */
HV_EXTERN void hv_prune_opts_init(hv_prune_opts *opts);

typedef struct hv_prune_result {
	uint64_t runs;           /* runs deleted */
	uint64_t artifacts;      /* their artifacts */
	uint64_t contents;       /* stored contents no remaining artifact references */
	uint64_t content_bytes;  /* the size of those contents */
	uint64_t snapshots;      /* snapshots as old as the deleted history, and abandoned ones */
} hv_prune_result;

/* Deletes the runs selected by opts (one option only: both are HV_EUSAGE; runs recorded after
 * the prune started are never selected), their artifacts, the contents no remaining artifact
 * has, the snapshots created before before_ns (with keep_runs: before the newest deleted run
 * started) but for complete ones less than an hour old (a `harvest snapshot` waiting for its
 * `collect --since`), and unfinished snapshots more than an hour old; then gives freed pages
 * back to the
 * file system. A run that has not ended is never deleted (it first ends runs whose owner is
 * gone, as a writing open does), and keep_runs counts it among the kept; a snapshot whose
 * owner process is alive (a run in progress depends on it) is never deleted. It works in short transactions of whole runs (a large prune would otherwise
 * lock out other processes for longer than their busy timeout): the database is consistent
 * after each, and a prune killed midway has done part of the work. So a corrupt database is
 * refused before anything is deleted, `PRAGMA quick_check` first (HV_EDB). *res counts what
 * was deleted (also on failure). HV_EUSAGE when neither option is set. */
HV_EXTERN hv_status hv_store_prune(hv_store *st, const hv_prune_opts *opts, hv_prune_result *res);

/* ---- Push ------------------------------------------------------------------------------- */

/* Copies the runs of st's (SQLite) history with an id above since_run_id (0: all) that have
 * ended, with their artifacts and stored contents, into the PostgreSQL history at uri. Each run
 * keeps its origin (host, this database's identity and its local id) under a unique constraint,
 * so pushing again adds nothing: *pushed counts the runs added. HV_EUSAGE when st's history
 * is not SQLite or uri is not a PostgreSQL URI. */
HV_EXTERN hv_status hv_store_push(hv_store *st, const char *uri, int64_t since_run_id, uint64_t *pushed);

#ifdef __cplusplus
}
#endif
#endif
