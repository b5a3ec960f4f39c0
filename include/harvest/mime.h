/* harvest — MIME types: libmagic's answer (exactly `file --mime-type -b`) and its refinement
 * by the file's name through shared-mime-info.
 *
 * Two steps, kept apart so that a cache can store the first and redo the cheap second:
 *   1. detection (hv_magic_*): what libmagic says of the bytes. For a regular file it equals
 *      `file --mime-type -b FILE` (an empty file is "inode/x-empty", a PIE executable
 *      "application/x-pie-executable"). hv_magic_fingerprint() names everything the answer
 *      depends on; a cached answer is only valid under the same fingerprint.
 *   2. refinement (hv_mime_refine): the name's extension may replace a weak answer or narrow
 *      another one to a declared subclass; it never contradicts the content.
 * Non-regular files get file(1)'s inode/... names from their mode alone (hv_mime_for_mode).
 * hv_mime_detect_paths() does all of it for a list of paths on worker threads. */
#ifndef HARVEST_MIME_H
#define HARVEST_MIME_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Detection --------------------------------------------------------------------------- */

/* One loaded libmagic database and cookie. A libmagic cookie is not thread-safe: use one
 * hv_magic per thread (opening one costs well under a millisecond: the database is mapped),
 * or guard a shared one with your own lock. */
typedef struct hv_magic hv_magic;

/* Isolation, process-wide, for handles opened after the call. On by default: libmagic parses
 * untrusted bytes, so each hv_magic runs it in its own worker process, forked when its
 * database is first needed, that keeps none of the caller's descriptors but one socket and,
 * once magic.mgc is loaded, runs under a seccomp-bpf allowlist: opening a file, exec, fork and
 * network kill it (SIGSYS); other syscalls outside the list fail with EPERM. The caller sends
 * each file's descriptor (SCM_RIGHTS) or bytes and waits at most timeout_ms (0: 10000) per
 * file. A worker that crashes or exceeds the limit is killed and replaced on the next call;
 * that file's answer is "application/octet-stream" with status HV_WARN and hv_error_last()
 * saying why (such an answer is never cached). Answers are the same either way.
 * isolate false runs libmagic in the calling process (faster by a round trip per file; for
 * trusted input, or where fork is not wanted: the worker is a child the caller could reap
 * with waitpid(-1), and is then just replaced). The workers are forked by one spawner process,
 * itself forked when isolation is first needed: a fork copies the locks other threads hold, so
 * a program with threads of its own calls this (isolate true) before it starts them, which
 * forks the spawner then. hv_collect* and hv_mime_detect_paths fork it before their threads. */
HV_EXTERN void hv_magic_set_isolation(bool isolate, unsigned timeout_ms);

/* Opens a detector. database: libmagic's colon-separated database list as magic_load() takes
 * it; NULL means the default file(1) uses (magic_getpath(): $MAGIC, else the compiled-in
 * "/etc/magic:/usr/share/misc/magic"), resolved once here and recorded in the fingerprint.
 * extra_flags: libmagic MAGIC_NO_CHECK_* flags (from <magic.h>) added to the fixed
 * MAGIC_MIME_TYPE|MAGIC_NO_COMPRESS_FORK; 0 gives file(1)'s answer. Flags that follow symlinks,
 * read devices, decompress, print, write or change the answer's form are refused (HV_EUSAGE).
 * HV_EIO when the database cannot be loaded. */
HV_EXTERN hv_status hv_magic_open(hv_magic **out, const char *database, int extra_flags);
HV_EXTERN void hv_magic_close(hv_magic *m);

/* A string naming everything an answer depends on: libmagic's version, the flags, the bytes
 * it reads, and each database file with its size and mtime, e.g.
 * "libmagic=544;flags=0x4000010;bytes=7340032;db=/etc/magic:111:1674912000000000000,...".
 * Equal for two handles opened alike; owned by the handle. */
HV_EXTERN const char *hv_magic_fingerprint(const hv_magic *m);
/* The database list that was loaded (the resolved default when opened with NULL). */
HV_EXTERN const char *hv_magic_database(const hv_magic *m);
/* How many bytes libmagic looks at (MAGIC_PARAM_BYTES_MAX, 7 MiB by default): file(1) reads
 * no more than this from the start of a file. */
HV_EXTERN size_t hv_magic_bytes_max(const hv_magic *m);

/* Detects the type of the file open on fd (opened by the caller, readable). A regular file is
 * read through libmagic (at most hv_magic_bytes_max() bytes from offset 0, plus the ELF and
 * OLE2 headers it seeks to); the fd's offset is left where it was. A size of 0 gives
 * "inode/x-empty" without reading, as file(1) does. Anything else gets its inode/... type
 * without being read (a FIFO is never read). *type stays valid until the next call on m.
 * path only names the file in error messages (NULL: "fd N"). HV_EIO when reading fails. */
HV_EXTERN hv_status hv_magic_fd(hv_magic *m, int fd, const char *path, const char **type);

/* Detects the type of a regular file from bytes the caller already read: buf holds the file
 * from offset 0, all of it or at least its first hv_magic_bytes_max() bytes (more is ignored,
 * as file(1) ignores it); len == 0 means an empty file ("inode/x-empty").
 * The answer equals hv_magic_fd()'s except where libmagic needs the file itself: ELF (PIE
 * executable vs shared library is read from the program headers) and OLE2/CDF documents are
 * detected through fd when fd >= 0, else through an in-memory copy of buf (exact only when buf
 * holds the whole file); magic rules with offsets relative to the end of the file see only
 * buf. So: with the file open, prefer hv_magic_fd() when re-reading is cheap; use this to
 * avoid a second read, passing the fd if there is one. fd's offset is left where it was. */
HV_EXTERN hv_status hv_magic_buffer(hv_magic *m, const void *buf, size_t len, int fd, const char *path,
			  const char **type);

/* file(1)'s type for a non-regular file from its st_mode: "inode/directory", "inode/symlink",
 * "inode/fifo", "inode/socket", "inode/chardevice", "inode/blockdevice"; NULL for a regular
 * file (its type needs its contents) or an unknown file type. */
HV_EXTERN const char *hv_mime_for_mode(uint32_t mode);

/* ---- Refinement by name ------------------------------------------------------------------ */

/* The shared-mime-info globs (globs2), subclass relation (subclasses) and aliases of one
 * directory, parsed once; immutable after opening, so one db can serve many threads. */
typedef struct hv_mime_db hv_mime_db;

/* Parses dir/globs2, dir/subclasses and dir/aliases; dir NULL means "/usr/share/mime". Missing
 * files are not an error (refinement then uses the built-in table alone), lines that do not
 * parse are skipped; a file that exists but cannot be read is HV_EIO, naming it. */
HV_EXTERN hv_status hv_mime_db_open(hv_mime_db **out, const char *dir);
HV_EXTERN void hv_mime_db_close(hv_mime_db *db);

/* Refines raw_type (libmagic's answer) by the file name (a base name or a path; the part after
 * the last '/' is used). db NULL means the process-wide default db, parsed on first use.
 * Candidates are the built-in table's type for the extension (md, yaml, toml, csv, tsv, jsonl,
 * ipynb, parquet, npy, pkl, ...) then shared-mime-info's best glob matches (a literal name
 * first, then the longest "*.suffix", then other globs; case-insensitive unless the glob is
 * flagged "cs"; by weight). The first candidate that is
 *   - the same type as raw_type (also through an alias): raw_type is kept;
 *   - for a weak raw type ("application/octet-stream", "text/plain", "application/zip",
 *     "text/xml"): any type — libmagic's weak answers say little, the name says more, so
 *     text/plain named notes.md becomes text/markdown and a 1-byte file named b.csv text/csv;
 *   - for any other raw type: a subclass of it (transitively; every text/... is one of
 *     text/plain). So "application/json" becomes "application/x-ipynb+json" for .ipynb,
 *     while image/png named x.txt stays image/png;
 * is the answer, else raw_type. inode/... answers are never refined.
 * *type points to raw_type or to a string that lives as long as db (the default db lives
 * until exit); with no name or no raw_type (NULL or empty), raw_type as it is. HV_ENOMEM/HV_EIO
 * only when the default db cannot be loaded; HV_EUSAGE when type is NULL. */
HV_EXTERN hv_status hv_mime_refine(const hv_mime_db *db, const char *name, const char *raw_type,
			 const char **type);

/* Whether type is parent or a subclass of it, by shared-mime-info's relation (transitive,
 * through aliases, every text/... under text/plain, everything but inode/... under
 * application/octet-stream) plus the built-in table's. db NULL: the default db (false if it
 * cannot be loaded). */
HV_EXTERN bool hv_mime_is_subclass(const hv_mime_db *db, const char *type, const char *parent);

/* ---- Many paths at once ------------------------------------------------------------------ */

typedef struct hv_mime_opts {
	int threads;            /* worker threads; 0: online CPUs, at most 8; 1: none */
	bool raw;               /* libmagic's answer only (`harvest mime --raw`), no refinement */
	const char *database;   /* libmagic database list, NULL: the default (see hv_magic_open) */
	int extra_flags;        /* see hv_magic_open; 0 for file(1)'s answer */
	const hv_mime_db *db;   /* refinement db; NULL: the process-wide default */
} hv_mime_opts;

/* One path's answer. */
typedef struct hv_mime_result {
	char *mime_type;  /* the type, or NULL when the path could not be examined */
	char *error;      /* NULL, or why not: "out/data: Permission denied" */
	hv_status status; /* HV_OK, or the failure's status (HV_EIO) */
} hv_mime_result;

/* Fills opts with the defaults: default threads, refined, default databases. */
HV_EXTERN void hv_mime_opts_init(hv_mime_opts *opts);

/* Detects paths[0..n) on worker threads (each with its own hv_magic) and returns n results in
 * input order in *results (free with hv_mime_results_free). Each path is lstat'ed: a
 * non-regular file (a symlink is not followed) gets its inode/... type without being opened; a
 * regular one is opened O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC, checked again with fstat (a
 * file swapped for a FIFO is named, never read), detected and, unless opts->raw, refined.
 * Returns HV_OK when every path was answered; HV_WARN when some were not (their results carry
 * the error; hv_error_last() says how many), also when no detector can be had with the
 * default database (libmagic or libseccomp missing, no worker process allowed): each path
 * libmagic would have to read then carries that reason; a negative status on a fatal failure
 * (no results), among them opts->database failing to load. opts NULL: the defaults. Memory
 * grows with n: feed a long list in chunks. */
HV_EXTERN hv_status hv_mime_detect_paths(const char *const *paths, size_t n, const hv_mime_opts *opts,
			       hv_mime_result **results);
HV_EXTERN void hv_mime_results_free(hv_mime_result *results, size_t n);

#ifdef __cplusplus
}
#endif
#endif
