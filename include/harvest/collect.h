/* harvest — snapshots and the artifact collector: the files below a directory, or those a
 * run produced since a snapshot, as OutputFile records {name, path, mime_type, size, sha256,
 * content}.
 *
 * Safety (SPEC 6): the tree is read through the walker (directory descriptors opened one
 * component at a time with O_NOFOLLOW); a file is opened relative to its directory with
 * O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC and checked with fstat, so a file swapped for a FIFO or a
 * symlink between the walk and the open is skipped, never read or followed. Symlinks, FIFOs,
 * sockets and devices are never opened. Memory is bounded by the limits. */
#ifndef HARVEST_COLLECT_H
#define HARVEST_COLLECT_H

#include "mime.h"
#include "store.h"
#include "types.h"

#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hv_collect_opts {
	int64_t since_snapshot;      /* > 0: only files created or changed since that snapshot */
	uint64_t max_file_bytes;     /* larger files are skipped as too_large (default 32 MiB) */
	uint64_t max_files;          /* at most this many artifacts (default 1000) */
	uint64_t max_total_bytes;    /* at most this many bytes of artifacts (default 256 MiB) */
	bool no_content;             /* do not return contents (a MIME cache hit opens nothing) */
	bool include_hidden;         /* do not leave out names starting with '.' and __pycache__ */
	const char *const *excludes; /* more fnmatch globs on names; excluded dirs not entered */
	size_t n_excludes;
	bool no_cache;               /* do not use or fill the MIME cache */
	bool xdev;                   /* stay on dir's file system: a mount point is not entered */
	int threads;                 /* walker and detection threads; 0: online CPUs, at most 8 */
	/* Called with each warning of the walk ("dir/sub: Permission denied"); may be NULL. */
	void (*on_warning)(void *ctx, const char *message);
	void *ctx;
	/* Called after each entry of the walk with the counts so far (for progress displays);
	 * may be NULL. Cheap calls only: it sits in the walk's loop. */
	void (*on_progress)(void *ctx, uint64_t entries, uint64_t files, uint64_t bytes);
	/* Keep the contents out of memory: each file's bytes are written, as soon as the file is
	 * final, to an unnamed temporary file (in $TMPDIR, else /tmp) and freed, so a collection
	 * holds at most the read-ahead window in memory whatever its total size. The files then
	 * have content NULL and spooled true: read them with hv_collection_content_read(), as
	 * hv_record_collection_file, hv_record_collection(_members), the page and
	 * hv_collection_record() do (hv_record_output_file, given one file without its
	 * collection, refuses a spooled content). When no temporary file can be made, the
	 * contents stay in memory (content set, spooled false). */
	bool spool_content;
} hv_collect_opts;

/* One artifact: an OutputFile. */
typedef struct hv_output_file {
	char *path;              /* relative to the collected root, NUL-terminated */
	size_t path_len;
	const char *name;        /* the base name: the last component of path */
	size_t name_len;
	char *mime_type;
	uint64_t size;
	char sha256[65];         /* hex */
	unsigned char *content;  /* the bytes, or NULL with no_content */
	size_t content_len;
	const char *change;      /* against a snapshot: "created" (no regular file was at path
	                          * before) or "modified"; NULL for a collect of everything */
	bool spooled;            /* the content_len bytes are in the collection's temporary file
	                          * (spool_content), at spool_off; content is NULL */
	uint64_t spool_off;
} hv_output_file;

/* The temporary file of a collection's spooled contents (private). */
typedef struct hv_content_spool hv_content_spool;

/* A regular file that was in the snapshot and is no longer a regular file at its path. */
typedef struct hv_deleted_file {
	char *path;
	size_t path_len;
} hv_deleted_file;

/* One file that would have been an artifact but was not. */
typedef struct hv_skipped_file {
	char *path;
	size_t path_len;
	const char *reason;      /* "symlink", "not_regular", "too_large", "limit", "error" */
	bool has_size;
	uint64_t size;
	char *error;             /* for "error": the message ("out/x: Permission denied") */
} hv_skipped_file;

typedef struct hv_collection {
	hv_output_file *files;
	size_t n_files;
	hv_skipped_file *skipped;
	size_t n_skipped;
	bool incomplete;         /* something was skipped as too_large, limit or error */
	uint64_t warnings;       /* warnings of the walk (unreadable directories) */
	char *root;              /* the absolute root */
	bool compared;           /* collected against a snapshot: change and deleted are known */
	hv_deleted_file *deleted; /* then: the snapshot's regular files gone, in walk order */
	size_t n_deleted;
	hv_content_spool *spool;  /* the spooled contents (spool_content), or NULL */
} hv_collection;

/* Fills opts with the defaults of SPEC 2. */
HV_EXTERN void hv_collect_opts_init(hv_collect_opts *opts);

/* Records the lstat state of every entry below dir (with opts' excludes: a collect with the
 * same options sees the same tree) as a new snapshot; regular files whose mtime or ctime is
 * within 2 s of the snapshot's time also get their SHA-256 (the racy rule). *id, *entries and
 * *root (each may be NULL) get the snapshot's id, its size and its root: the absolute path,
 * symlinks resolved, that the snapshot recorded and a collect --since must name (malloc'd,
 * the caller frees). HV_ENOTDIR when dir is not a directory. */
HV_EXTERN hv_status hv_snapshot_take(hv_store *st, const char *dir, const hv_collect_opts *opts,
			   int64_t *id, uint64_t *entries, char **root);

/* A snapshot held in memory, not in the store (what `harvest run` compares against). */
typedef struct hv_mem_snapshot hv_mem_snapshot;

/* hv_snapshot_take() into memory, nothing written anywhere (st, which may be NULL, only names
 * the database files to leave out). On ext2/3/4, XFS, Btrfs and tmpfs (file systems whose
 * ctime is this machine's clock, in nanoseconds) a file is kept by name, type and inode
 * number only, as its directory lists it, and a collect against the snapshot takes a ctime
 * not older than the snapshot's end for a change; elsewhere each entry keeps its lstat state
 * and the racy rule. A walk shorter than a clock tick (a few ms) waits for the next one. */
HV_EXTERN hv_status hv_snapshot_take_mem(hv_store *st, const char *dir, const hv_collect_opts *opts,
			       hv_mem_snapshot **out);
HV_EXTERN uint64_t hv_mem_snapshot_entries(const hv_mem_snapshot *m);
HV_EXTERN void hv_mem_snapshot_free(hv_mem_snapshot *m);

/* hv_collect() of the files produced since the memory snapshot m (of the same dir, taken with
 * the same include_hidden, xdev and excludes; else HV_EUSAGE); opts->since_snapshot is
 * ignored. st may be NULL with no_cache. */
HV_EXTERN hv_status hv_collect_since_mem(hv_store *st, const char *dir, const hv_collect_opts *opts,
			       const hv_mem_snapshot *m, hv_collection **out);

/* Collects the regular files below dir (or those produced since opts->since_snapshot) into
 * *out (free with hv_collection_free). st may be NULL only with no_cache and no
 * since_snapshot. The database's own files are never artifacts. HV_ENOTDIR when dir is not
 * a directory; HV_ENOTFOUND when the snapshot does not exist; HV_EUSAGE when it was taken of
 * another directory, or with another include_hidden, xdev or set of excludes (one taken by
 * hv_snapshot_take() records them). On every failure (rc < 0) *out is NULL. */
HV_EXTERN hv_status hv_collect(hv_store *st, const char *dir, const hv_collect_opts *opts,
		     hv_collection **out);

/* Records c as the artifacts of a run (contents stored when c has them) in one transaction:
 * begins a run described by start unless *run_id > 0 already names a begun one, and finishes
 * it with end (NULL: a collect, which has no exit code). *run_id gets the id. A content over
 * HV_STORE_CONTENT_MAX is not stored (its artifact is): see hv_collection_unstored. */
HV_EXTERN hv_status hv_collection_record(hv_store *st, const hv_collection *c, const hv_run_start *start,
			       const hv_run_end *end, int64_t *run_id);

/* Whether c->files[i] has a content too large for a history (over HV_STORE_CONTENT_MAX): its
 * artifact is recorded without it. */
HV_EXTERN bool hv_collection_unstored(const hv_collection *c, size_t i);

/* The collection's skipped list as a JSON array text (malloc'd), for hv_run_end.skipped_json. */
HV_EXTERN char *hv_collection_skipped_json(const hv_collection *c, int kase);

/* The collection's deleted list as a JSON array of paths (malloc'd). */
HV_EXTERN char *hv_collection_deleted_json(const hv_collection *c);

/* Reads n bytes of f's content (a file of c) from offset off into buf, wherever it is: in memory
 * or spooled. HV_EUSAGE when f has no content or the range is not inside it; HV_EIO when the
 * temporary file cannot be read. */
HV_EXTERN hv_status hv_collection_content_read(const hv_collection *c, const hv_output_file *f,
					       uint64_t off, void *buf, size_t n);

HV_EXTERN void hv_collection_free(hv_collection *c);

/* Whether the process can open the descriptors a snapshot or a collect of dir needs (the walk
 * keeps a few it cannot give up: HV_COLLECT_MIN_FDS), plus extra more (a database still to be
 * opened: 3). HV_OK, else HV_EIO with a message naming dir and the limit. hv_snapshot_take()
 * and hv_collect() check it themselves; a caller checks first to fail before anything else. */
#define HV_COLLECT_MIN_FDS 4
HV_EXTERN hv_status hv_collect_check_fds(const char *dir, int extra);

/* hv_mime_detect_paths() through the store's MIME cache: a regular file whose cached answer
 * is still valid (SPEC 5) is not opened; the others are detected on worker threads and their
 * answers cached. st NULL: no cache (the same as hv_mime_detect_paths). The cache holds
 * libmagic's answer; refinement by name (unless opts->raw) is applied after it. */
HV_EXTERN hv_status hv_mime_detect_cached(hv_store *st, const char *const *paths, size_t n,
				const hv_mime_opts *opts, hv_mime_result **results);

/* hv_mime_detect_cached() for a caller that has lstat'ed the paths already (`harvest mime`
 * does, to tell a directory argument from a file), so each path costs one lstat: lstats[i] is
 * the lstat of paths[i] when errnos[i] is 0, else errnos[i] is the errno of its failed lstat.
 * With st NULL nothing is cached and the lstats still stand: a path is not lstat'ed again. */
HV_EXTERN hv_status hv_mime_detect_cached_lstat(hv_store *st, const char *const *paths,
						const struct stat *lstats, const int *errnos,
						size_t n, const hv_mime_opts *opts,
						hv_mime_result **results);

/* What hv_mime_detect_dir() hands out for each regular file: its path relative to dir and its
 * answer (as hv_mime_detect_cached gives it: mime_type NULL and error set when the file could
 * not be examined). Both are valid during the call only. A negative return stops the walk and
 * is returned by hv_mime_detect_dir. */
typedef hv_status (*hv_mime_dir_fn)(void *ctx, const char *path, size_t path_len,
				    const hv_mime_result *r);

/* The MIME type of every regular file below dir (`harvest mime DIR`), walked as a collect
 * walks (co: its excludes, and by default no names starting with '.' nor __pycache__ unless
 * include_hidden; xdev, threads; no_cache; on_warning and on_progress; the limits and
 * since_snapshot are ignored; NULL: the defaults), in walk order, sorted by name. Each file is
 * opened through the walk (relative to its directory's descriptor, O_NOFOLLOW|O_NONBLOCK),
 * never again by path, so a directory swapped for a symlink mid-walk does not lead outside dir.
 * Answers come from st's MIME cache when valid (st NULL: no cache) and are cached. Memory and
 * descriptors stay bounded: files are answered in small batches as the walk goes. Returns
 * HV_OK; HV_WARN when some file could not be examined or some directory read (warnings go to
 * co->on_warning); HV_ENOTDIR when dir is not a directory; another negative status on a fatal
 * failure (or fn's). */
HV_EXTERN hv_status hv_mime_detect_dir(hv_store *st, const char *dir, const hv_collect_opts *co,
				       const hv_mime_opts *mo, hv_mime_dir_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
