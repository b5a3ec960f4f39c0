/* The history backends: where runs, artifacts and contents live. A store always has a local
 * SQLite file (the MIME cache and snapshots, which describe local inodes); its history is
 * either in that same file (the SQLite backend, store_history.c) or in a PostgreSQL database
 * shared by many hosts (store_pg.c). The public hv_store_* history calls dispatch through
 * st->hist, as an object database dispatches to its backends: each backend implements every
 * operation with the semantics store.h documents. */
#ifndef HARVEST_STORE_BACKEND_H
#define HARVEST_STORE_BACKEND_H

#include "harvest/store.h"

typedef struct hvst_history_ops hvst_history_ops;

/* The MIME types an artifact filter's pattern selects: each distinct type stored that the
 * pattern matches ignoring case (RFC 2045: types and subtypes are case-insensitive, and
 * libmagic answers some in capitals, as video/MP2T). hv_store_artifacts() makes it, once
 * for every backend, so a backend queries exact types through its MIME index. */
typedef struct hvst_mime_set {
	char **types;
	size_t n, cap;
} hvst_mime_set;

/* Appends a copy of t[0..len) to s (HV_ENOMEM on failure). */
hv_status hvst_mime_set_add(hvst_mime_set *s, const char *t, size_t len);
void hvst_mime_set_free(hvst_mime_set *s);

/* Every iterator starts with this, so the public calls find the backend that made it. */
/* done: the backend said HV_DONE, which every later call says too (a finished SQLite
 * statement stepped again would start over). */
struct hv_run_iter {
	const hvst_history_ops *ops;
	bool done;
};
struct hv_artifact_iter {
	const hvst_history_ops *ops;
	bool done;
};

struct hvst_history_ops {
	const char *name; /* "sqlite", "postgresql" */
	hv_status (*run_begin)(hv_store *st, const hv_run_start *r, int64_t *run_id);
	/* The artifacts were checked by hv_store_run_finish, once for every backend: shas[i] is
	 * artifact i's digest, lower-cased. */
	hv_status (*run_finish)(hv_store *st, int64_t run_id, const hv_run_end *end,
				const hv_artifact_in *artifacts, char (*shas)[65],
				size_t n_artifacts);
	hv_status (*runs)(hv_store *st, const hv_run_filter *f, hv_run_iter **out);
	hv_status (*run_next)(hv_run_iter *it, const hv_run_row **out);
	void (*run_free)(hv_run_iter *it);
	/* Every distinct MIME type among the stored artifacts, into *out (empty before). */
	hv_status (*mime_types)(hv_store *st, hvst_mime_set *out);
	/* mimes: the exact types f->mime selects (NULL when f->mime is NULL); the backend
	 * copies what it keeps of them. */
	hv_status (*artifacts)(hv_store *st, const hv_artifact_filter *f,
			       const hvst_mime_set *mimes, hv_artifact_iter **out);
	hv_status (*artifact_next)(hv_artifact_iter *it, const hv_artifact_row **out);
	void (*artifact_free)(hv_artifact_iter *it);
	hv_status (*content_get)(hv_store *st, const char *sha, const char *what, void **data,
				 size_t *len);
	/* The digest of artifact id into sha (HV_ENOTFOUND "no artifact N"). */
	hv_status (*artifact_sha)(hv_store *st, int64_t id, char sha[65]);
	/* Deletes the runs, artifacts and contents of a prune; *newest_started gets the start
	 * time of the newest deleted run (for the snapshot cutoff). */
	hv_status (*prune_history)(hv_store *st, const hv_prune_opts *opts, hv_prune_result *res,
				   int64_t *newest_started);
	void (*close)(hv_store *st);
};

extern const hvst_history_ops hvst_sqlite_history;
extern const hvst_history_ops hvst_pg_history;

/* Whether s names a PostgreSQL database (a postgresql:// or postgres:// URI). */
bool hvst_is_pg_uri(const char *s);
/* Connects st to the PostgreSQL history at uri (creating or upgrading harvest's schema unless
 * st is read-only) and makes it st's history backend. */
hv_status hvst_pg_open(hv_store *st, const char *uri);
/* Ends the runs of st's PostgreSQL history whose owner process is gone, as not recorded (best
 * effort: a failure is cleared). Needs st->owner; nothing without it, or read-only. */
void hvst_pg_reap(hv_store *st);
/* Copies msg into out (cap bytes) on one line with every password masked: the value of a
 * password= keyword and the password of a URI's user:password@. */
void hvst_mask_secret(const char *msg, char *out, size_t cap);

/* Shared by the backends (store_history.c). */
bool hvst_sha256_hex(const void *p, size_t n, char hex[65]);
hv_status hvst_verify_content(const void *p, size_t n, const char *sha, const char *what);
/* The bytes of a's content: a->content, or read through a->read_content into *owned (free it)
 * and checked against sha (HV_EUSAGE when they do not match it). *p NULL: a has none. */
hv_status hvst_artifact_bytes(const hv_artifact_in *a, const char *sha, const void **p,
			      void **owned);
/* a's content read through a->read_content in pieces of at most cap bytes, each handed to
 * put(ctx, piece, n) in order, its SHA-256 checked against sha as it goes (HV_EUSAGE when the
 * whole does not match: the caller then undoes what put did). One piece in memory, whatever
 * the content's size. HV_OK, or the first failure of the read, of put or of the check. */
hv_status hvst_artifact_pieces(const hv_artifact_in *a, const char *sha, size_t cap,
			       hv_status (*put)(void *ctx, const void *piece, size_t n), void *ctx);
/* This machine's host name ("" when unknown) into buf. */
void hvst_hostname(char *buf, size_t cap);

#endif
