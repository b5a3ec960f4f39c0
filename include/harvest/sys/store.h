/* harvest — the store's low-level calls: the MIME cache and the snapshot tables.
 *
 * These are the building blocks the collector (collect.h) and MIME detection through the cache
 * (hv_mime_detect_cached) are made of. They are public and stable within a minor version, like
 * the rest of include/, but not what a program normally needs: hv_snapshot_take() and
 * hv_collect() use them with the right rules (the racy rule, the walk order). So, as libgit2's
 * sys/ headers, this one is not included by harvest.h: include <harvest/sys/store.h>. */
#ifndef HARVEST_SYS_STORE_H
#define HARVEST_SYS_STORE_H

#include "../store.h"
#include "../types.h"
#include "../walk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- MIME cache ------------------------------------------------------------------------- */

/* The rule of SPEC 5, kept here: an answer is reused only when the file's type, dev, ino,
 * size, mtime_ns and ctime_ns and the libmagic fingerprint (its version, database and flags, as
 * a string of the caller's making) all match, and the file was already more than 2 s old (by
 * both mtime and ctime) when the answer was stored. The store keeps one answer per (dev, ino):
 * cache the answer that depends on the inode's content only (libmagic's), not one that also
 * depends on the name. */

/* Looks up the answer for the file st describes: *mime_out is a malloc'd copy on a hit (the
 * caller frees) and NULL on a miss. */
HV_EXTERN hv_status hv_store_mime_lookup(hv_store *st, const hv_stat *s, const char *fingerprint,
                               char **mime_out);

/* Remembers mime_type for the file s describes. Answers for files not yet 2 s old are dropped
 * (they could never be reused). Puts are kept in memory and written in one transaction per
 * batch (and by hv_store_flush()/hv_store_close()); a lookup does not see unwritten puts. */
HV_EXTERN hv_status hv_store_mime_put(hv_store *st, const hv_stat *s, const char *fingerprint,
                            const char *mime_type);

/* The same, with the content's SHA-256 (64 hex digits) when the caller read it: a later
 * lookup hands it back, so `collect --no-content` can name an unchanged file's digest
 * without opening it. */
HV_EXTERN hv_status hv_store_mime_put_sha(hv_store *st, const hv_stat *s, const char *fingerprint,
				const char *mime_type, const char *sha256);
/* hv_store_mime_lookup, also giving the digest stored with the answer in sha256_out ("" when
 * none was stored; may be NULL). */
HV_EXTERN hv_status hv_store_mime_lookup_sha(hv_store *st, const hv_stat *s, const char *fingerprint,
				   char **mime_out, char sha256_out[65]);

/* ---- Snapshots -------------------------------------------------------------------------- */

/* Entry paths are relative to the snapshot's root, '/'-separated, as hv_entry.path. A snapshot
 * becomes visible only when finished: entries are written in short transactions as they come
 * (so a large snapshot does not hold the write lock), and a snapshot left unfinished by a killed
 * process stays invisible until hv_store_prune() removes it. */

/* Whether an entry stat'ed for a snapshot taken at created_at_ns is racy: its mtime or ctime is
 * no more than 2 s before that time (or after it). The collector stores the SHA-256 of racy
 * regular files, so a same-size rewrite within the clock's resolution is still caught. */
HV_EXTERN bool hv_store_stat_is_racy(const hv_stat *s, int64_t created_at_ns);

typedef struct hv_snapshot_writer hv_snapshot_writer;

/* Starts a snapshot of root (an absolute directory path, NUL-terminated); its time is now. */
HV_EXTERN hv_status hv_store_snapshot_begin(hv_store *st, const char *root, hv_snapshot_writer **out);

/* The snapshot's time (created_at_ns), for hv_store_stat_is_racy(). */
HV_EXTERN int64_t hv_snapshot_writer_created_at(const hv_snapshot_writer *w);

/* Adds one entry: its lstat and, for a racy regular file, its SHA-256 (else NULL). Entries
 * may come in any order, and a directory need not be added for entries below it (it is then
 * not an entry itself); in the walk's pre-order each costs no lookup. A path added twice
 * fails with HV_EUSAGE when the batch holding it is written; an empty path or component
 * ("a//b", "/a", "a/") is refused. */
HV_EXTERN hv_status hv_snapshot_writer_add(hv_snapshot_writer *w, const char *path, size_t path_len,
                                 const hv_stat *s, const char *sha256_hex);

/* Writes what is pending and makes the snapshot visible; *id_out (may be NULL) gets its id.
 * Frees w, whatever the status (on failure, the snapshot stays invisible). */
HV_EXTERN hv_status hv_snapshot_writer_finish(hv_snapshot_writer *w, int64_t *id_out);

/* Drops the unfinished snapshot and frees w. NULL is allowed. */
HV_EXTERN hv_status hv_snapshot_writer_abort(hv_snapshot_writer *w);

/* One recorded entry. Pointers are valid until the next call on the snapshot. */
typedef struct hv_snapshot_entry {
	const char *path;   /* NUL-terminated too */
	size_t path_len;
	hv_stat st;
	const char *sha256; /* 64 hex digits, or NULL when the entry was not racy */
} hv_snapshot_entry;

typedef struct hv_snapshot hv_snapshot;

/* Opens finished snapshot id for reading: HV_ENOTFOUND (with hv_error_last() saying so) when
 * there is no such finished snapshot. */
HV_EXTERN hv_status hv_store_snapshot_open(hv_store *st, int64_t id, hv_snapshot **out);

HV_EXTERN int64_t hv_snapshot_id(const hv_snapshot *sn);
/* The root given to hv_store_snapshot_begin(), NUL-terminated. */
HV_EXTERN const char *hv_snapshot_root(const hv_snapshot *sn, size_t *len);
HV_EXTERN int64_t hv_snapshot_created_at(const hv_snapshot *sn);
HV_EXTERN uint64_t hv_snapshot_entries(const hv_snapshot *sn);

/* The next entry in *out (HV_OK) or HV_DONE at the end. Entries come in the walker's
 * HV_SORT_NAME order (pre-order, siblings sorted bytewise by name), which is the order of
 * hv_store_path_cmp(), so the collector can merge a sorted walk against the snapshot in one
 * pass. Entries are read in pages, so the handle can be written between two calls. */
HV_EXTERN hv_status hv_snapshot_next(hv_snapshot *sn, const hv_snapshot_entry **out);

/* Finds path: HV_OK with *out filled, HV_ENOTFOUND when the snapshot has no such entry. Does
 * not move the iteration. */
HV_EXTERN hv_status hv_snapshot_lookup(hv_snapshot *sn, const char *path, size_t path_len,
                             hv_snapshot_entry *out);

HV_EXTERN void hv_snapshot_close(hv_snapshot *sn);

/* Compares two relative paths in walk order: component by component, bytewise (memcmp order
 * with '/' below every other byte). <0, 0 or >0. */
HV_EXTERN int hv_store_path_cmp(const char *a, size_t alen, const char *b, size_t blen);

/* Deletes snapshot id (finished or not): `run` drops its own snapshot once it has collected.
 * HV_ENOTFOUND when there is no such snapshot. */
HV_EXTERN hv_status hv_store_snapshot_delete(hv_store *st, int64_t id);

#ifdef __cplusplus
}
#endif
#endif
