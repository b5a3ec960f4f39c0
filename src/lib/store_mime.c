/* The store's MIME cache: answers kept per (dev, ino) under the 2 s rule of SPEC 5, looked up
 * one by one and written in batches. */
#include "store_internal.h"
#include "mime_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ST_RACY_NS INT64_C(2000000000)

void hvst_mime_pending_free(hv_store *st)
{
	for (size_t i = 0; i < st->n_mime; i++) {
		free(st->mime[i].fingerprint);
		free(st->mime[i].mime);
		free(st->mime[i].rname);
		free(st->mime[i].refined);
		free(st->mime[i].refine_fp);
	}
	st->n_mime = 0;
}

/* ---- MIME cache ------------------------------------------------------------------------- */

/* The 2 s rule: an answer stored before both mtime and ctime were more than 2 s old might
 * describe a version of the file that a same-tick rewrite has since replaced. */
static bool old_enough(const hv_stat *s, int64_t at_ns)
{
	/* In 128 bits: file times are set by untrusted code and may sit at either end of int64. */
	return (__int128)at_ns - s->mtime_ns > ST_RACY_NS && (__int128)at_ns - s->ctime_ns > ST_RACY_NS;
}

bool hv_store_stat_is_racy(const hv_stat *s, int64_t created_at_ns)
{
	return !old_enough(s, created_at_ns);
}

hv_status hv_store_mime_lookup(hv_store *st, const hv_stat *s, const char *fingerprint,
			       char **mime_out)
{
	return hv_store_mime_lookup_sha(st, s, fingerprint, mime_out, NULL);
}

hv_status hv_store_mime_lookup_sha(hv_store *st, const hv_stat *s, const char *fingerprint,
				   char **mime_out, char sha256_out[65])
{
	if (!st || !s || !fingerprint || !mime_out)
		return hv_error_set(HV_EUSAGE, "hv_store_mime_lookup: missing argument");
	hvst_mime_hit hit;
	hv_status rc = hvst_mime_lookup_refined(st, s, fingerprint, NULL, 0, NULL, &hit);
	*mime_out = hit.raw;
	if (sha256_out)
		memcpy(sha256_out, hit.sha256, 65);
	return rc;
}

/* The answer in the current row of q, whose columns from c on are those of STMT_MIME_GET, for
 * the file s under fingerprint (and the refinement for name under refine_fp), into *out. */
static hv_status take_row(hv_store *st, sqlite3_stmt *q, int c, const hv_stat *s,
			  const char *fingerprint, const char *name, size_t name_len,
			  const char *refine_fp, hvst_mime_hit *out)
{
	(void)st;
	hv_stat cached = {
		.dev = s->dev,
		.ino = s->ino,
		.size = (uint64_t)sqlite3_column_int64(q, c + 1),
		.mode = (uint32_t)sqlite3_column_int64(q, c + 0),
		.ctime_ns = sqlite3_column_int64(q, c + 3),
	};
	hv_stat_set_mtime_ns(&cached, sqlite3_column_int64(q, c + 2));
	const char *fp = (const char *)sqlite3_column_text(q, c + 4);
	const char *mime = (const char *)sqlite3_column_text(q, c + 5);
	int64_t cached_at = sqlite3_column_int64(q, c + 6);
	bool hit = cached.mode == (s->mode & S_IFMT) && cached.size == s->size &&
		   cached.mtime_ns == s->mtime_ns && cached.ctime_ns == s->ctime_ns && fp &&
		   strcmp(fp, fingerprint) == 0 && mime && old_enough(&cached, cached_at);
	if (!hit)
		return HV_OK;
	const char *sha = (const char *)sqlite3_column_text(q, c + 7);
	if (sha && strlen(sha) == 64)
		memcpy(out->sha256, sha, 65);
	/* The refined answer only for the very name (bytes) and tables it was made for; then
	 * libmagic's is not copied out: nothing would read it. */
	if (name && refine_fp) {
		const void *rname = sqlite3_column_blob(q, c + 8);
		size_t rname_len = (size_t)sqlite3_column_bytes(q, c + 8);
		const char *refined = (const char *)sqlite3_column_text(q, c + 9);
		const char *rfp = (const char *)sqlite3_column_text(q, c + 10);
		if (rname && rname_len == name_len && memcmp(rname, name, name_len) == 0 &&
		    refined && rfp && strcmp(rfp, refine_fp) == 0)
			return (out->refined = strdup(refined)) ? HV_OK
							       : hv_error_set(HV_ENOMEM, "out of memory");
	}
	if (!(out->raw = strdup(mime)))
		return hv_error_set(HV_ENOMEM, "out of memory");
	return HV_OK;
}

static void hit_clear(hvst_mime_hit *out)
{
	free(out->raw);
	free(out->refined);
	memset(out, 0, sizeof(*out));
}

hv_status hvst_mime_lookup_refined(hv_store *st, const hv_stat *s, const char *fingerprint,
				   const char *name, size_t name_len, const char *refine_fp,
				   hvst_mime_hit *out)
{
	memset(out, 0, sizeof(*out));
	sqlite3_stmt *q = hvst_stmt(st, STMT_MIME_GET);
	if (!q)
		return hv_error_last_status();
	sqlite3_bind_int64(q, 1, (int64_t)s->dev);
	sqlite3_bind_int64(q, 2, (int64_t)s->ino);
	int rc = sqlite3_step(q);
	int status = HV_OK;
	if (rc == SQLITE_ROW)
		status = take_row(st, q, 0, s, fingerprint, name, name_len, refine_fp, out);
	else if (rc != SQLITE_DONE)
		status = hvst_db_error(st, rc, "cannot read the MIME cache");
	sqlite3_reset(q);
	if (status != HV_OK)
		hit_clear(out);
	return status;
}

/* A key's place in the table's order: (dev, ino) as SQLite compares them (signed). */
typedef struct key_pos {
	int64_t dev, ino;
	size_t i;
} key_pos;

static bool pos_before(const key_pos *a, const key_pos *b)
{
	return a->dev != b->dev ? a->dev < b->dev : a->ino < b->ino;
}

/* Sorts v[0..n) (tmp: room for n more), a bottom-up merge sort: qsort_r's calls through a
 * comparison function cost more than the lookups it orders. */
static void sort_pos(key_pos *v, key_pos *tmp, size_t n)
{
	key_pos *src = v, *dst = tmp;
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t a = lo, b = mid, o = lo;
			while (a < mid && b < hi)
				dst[o++] = pos_before(&src[b], &src[a]) ? src[b++] : src[a++];
			while (a < mid)
				dst[o++] = src[a++];
			while (b < hi)
				dst[o++] = src[b++];
		}
		key_pos *t = src;
		src = dst;
		dst = t;
	}
	if (src != v)
		memcpy(v, src, n * sizeof(*v));
}

/* Rows of the table passed over without a key before the scan seeks again. */
enum { MANY_SKIP = 2 };

/* A batch of at least MANY_SMALL_CACHE_MIN keys is looked up with SQLite's page cache held to
 * MANY_CACHE_PAGES pages. The merge reads each leaf of the table once, in order, so a page is
 * never wanted again once the scan has passed it; the default cache (2 MiB) would keep every
 * page read, each a fresh allocation whose memory the kernel zero-fills page by page (the
 * 4,000 rows of a cache are 300 leaves: as many allocations, and twice as many page faults).
 * A small cache reuses the same few buffers. The caller's size is restored after the batch;
 * smaller batches (a directory walk's, 64 files) are not worth the two PRAGMAs. */
enum { MANY_SMALL_CACHE_MIN = 256, MANY_CACHE_PAGES = 16 };

/* Sets the page cache to pages for a batch: the size to restore, or 0 when it was not changed
 * (a failure only costs memory). */
static int64_t cache_shrink(hv_store *st, int pages)
{
	hv_error_saved saved;
	hv_error_save(&saved);
	int64_t was = 0;
	char sql[64];
	snprintf(sql, sizeof(sql), "PRAGMA cache_size = %d", pages);
	if (hvst_query_int(st, "PRAGMA cache_size", &was) != HV_OK || was == pages ||
	    hvst_exec(st, sql, "cannot size the page cache") != HV_OK)
		was = 0;
	hv_error_restore(&saved, HV_OK);
	return was;
}

static void cache_restore(hv_store *st, int64_t was)
{
	if (!was)
		return;
	hv_error_saved saved;
	hv_error_save(&saved);
	char sql[64];
	snprintf(sql, sizeof(sql), "PRAGMA cache_size = %lld", (long long)was);
	(void)hvst_exec(st, sql, "cannot size the page cache");
	hv_error_restore(&saved, HV_OK);
}

/* A merge of the sorted keys with the table, in its key order: each run of a statement costs
 * SQLite a reset that frees every string it read and a seek from the root, where reading the
 * next row costs a fraction of that, so rows are read on while the next key's row is at most
 * MANY_SKIP rows ahead, and the scan seeks again past a wider gap (a cache holding other files
 * between these). */
hv_status hvst_mime_lookup_many(hv_store *st, const char *fingerprint, const char *refine_fp,
				hvst_mime_key *keys, size_t n)
{
	for (size_t i = 0; i < n; i++)
		memset(keys[i].out, 0, sizeof(*keys[i].out));
	if (n == 0)
		return HV_OK;
	key_pos *ord = hv_bulk_calloc(2 * n * sizeof(*ord)); /* the sort writes all of it */
	if (!ord)
		return hv_error_set(HV_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		ord[i] = (key_pos){(int64_t)keys[i].s->dev, (int64_t)keys[i].s->ino, i};
	sort_pos(ord, ord + n, n);
	static const char sql[] =
		"SELECT ino, ftype, size, mtime_ns, ctime_ns, fingerprint, mime_type, cached_at_ns,"
		" sha256, refined_name, refined_type, refine_fp"
		" FROM mime_cache WHERE dev = ?1 AND ino >= ?2 ORDER BY ino";
	sqlite3_stmt *q = NULL;
	int rc = sqlite3_prepare_v2(st->db, sql, -1, &q, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_finalize(q);
		free(ord);
		return hvst_db_error(st, rc, "cannot read the MIME cache");
	}
	int64_t cache_was = n >= MANY_SMALL_CACHE_MIN ? cache_shrink(st, MANY_CACHE_PAGES) : 0;
	hv_status status = HV_OK;
	size_t p = 0;
#define KEY(x) (&ord[(x)])
	while (status == HV_OK && p < n) {
		int64_t dev = KEY(p)->dev;
		bool seek = true;
		unsigned skipped = 0;
		while (status == HV_OK && p < n && KEY(p)->dev == dev) {
			if (seek) {
				sqlite3_reset(q);
				sqlite3_bind_int64(q, 1, dev);
				sqlite3_bind_int64(q, 2, KEY(p)->ino);
				seek = false;
				skipped = 0;
			}
			rc = sqlite3_step(q);
			if (rc != SQLITE_ROW) {
				if (rc != SQLITE_DONE)
					status = hvst_db_error(st, rc, "cannot read the MIME cache");
				while (p < n && KEY(p)->dev == dev)
					p++; /* no row at or after them: misses */
				break;
			}
			int64_t ino = sqlite3_column_int64(q, 0);
			while (p < n && KEY(p)->dev == dev && KEY(p)->ino < ino)
				p++; /* no row: a miss */
			bool matched = false;
			/* Every key with this inode: hard links share their row. */
			while (status == HV_OK && p < n && KEY(p)->dev == dev && KEY(p)->ino == ino) {
				hvst_mime_key *k = &keys[ord[p++].i];
				status = take_row(st, q, 1, k->s, fingerprint, k->name, k->name_len,
						  refine_fp, k->out);
				matched = true;
			}
			if (!matched && ++skipped > MANY_SKIP)
				seek = true;
		}
	}
#undef KEY
	sqlite3_finalize(q);
	cache_restore(st, cache_was);
	free(ord);
	if (status != HV_OK)
		for (size_t i = 0; i < n; i++)
			hit_clear(keys[i].out);
	return status;
}

hv_status hv_store_mime_put(hv_store *st, const hv_stat *s, const char *fingerprint,
			    const char *mime_type)
{
	return hv_store_mime_put_sha(st, s, fingerprint, mime_type, NULL);
}

hv_status hv_store_mime_put_sha(hv_store *st, const hv_stat *s, const char *fingerprint,
				const char *mime_type, const char *sha256)
{
	if (!st || !s || !fingerprint || !mime_type)
		return hv_error_set(HV_EUSAGE, "hv_store_mime_put: missing argument");
	return hvst_mime_put_refined(st, s, fingerprint, mime_type, sha256, NULL, 0, NULL, NULL);
}

hv_status hvst_mime_put_refined(hv_store *st, const hv_stat *s, const char *fingerprint,
				const char *mime_type, const char *sha256, const char *name,
				size_t name_len, const char *refined, const char *refine_fp)
{
	if (st->damaged)
		return HV_OK; /* a cache answer is not worth writing into a corrupt file */
	int rc = hvst_check_writable(st);
	if (rc != HV_OK)
		return rc;
	int64_t now = hv_store_now_ns();
	if (!old_enough(s, now))
		return HV_OK; /* could never be reused: not worth a write */
	st_mime_pending *p = &st->mime[st->n_mime];
	p->st = *s;
	p->cached_at_ns = now;
	p->fingerprint = strdup(fingerprint);
	p->mime = strdup(mime_type);
	p->sha256[0] = '\0';
	if (sha256 && strlen(sha256) == 64)
		memcpy(p->sha256, sha256, 65);
	p->rname = NULL;
	p->rname_len = 0;
	p->refined = NULL;
	p->refine_fp = NULL;
	bool refine_ok = true;
	if (name && refined && refine_fp) {
		p->rname = malloc(name_len ? name_len : 1);
		if (p->rname)
			memcpy(p->rname, name, name_len);
		p->rname_len = name_len;
		p->refined = strdup(refined);
		p->refine_fp = strdup(refine_fp);
		refine_ok = p->rname && p->refined && p->refine_fp;
	}
	if (!p->fingerprint || !p->mime || !refine_ok) {
		free(p->fingerprint);
		free(p->mime);
		free(p->rname);
		free(p->refined);
		free(p->refine_fp);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	if (++st->n_mime == ST_MIME_BATCH)
		return hv_store_flush(st);
	return HV_OK;
}

hv_status hv_store_flush(hv_store *st)
{
	HV_NEED(st);
	if (st->n_mime == 0)
		return HV_OK;
	if (st->damaged) {
		/* The file is corrupt (found by an earlier statement): a cache answer is not
		 * worth writing into it, and a corrupt database is never modified. */
		hvst_mime_pending_free(st);
		return HV_OK;
	}
	sqlite3_stmt *q = hvst_stmt(st, STMT_MIME_PUT);
	int rc = q ? hvst_tx_begin(st) : hv_error_last_status();
	for (size_t i = 0; rc == HV_OK && i < st->n_mime; i++) {
		const st_mime_pending *p = &st->mime[i];
		sqlite3_bind_int64(q, 1, (int64_t)p->st.dev);
		sqlite3_bind_int64(q, 2, (int64_t)p->st.ino);
		sqlite3_bind_int64(q, 3, (int64_t)(p->st.mode & S_IFMT));
		sqlite3_bind_int64(q, 4, (int64_t)p->st.size);
		sqlite3_bind_int64(q, 5, p->st.mtime_ns);
		sqlite3_bind_int64(q, 6, p->st.ctime_ns);
		sqlite3_bind_text(q, 7, p->fingerprint, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 8, p->mime, -1, SQLITE_STATIC);
		sqlite3_bind_int64(q, 9, p->cached_at_ns);
		if (p->sha256[0])
			sqlite3_bind_text(q, 10, p->sha256, 64, SQLITE_STATIC);
		else
			sqlite3_bind_null(q, 10);
		if (p->refine_fp) {
			sqlite3_bind_blob(q, 11, p->rname, (int)p->rname_len, SQLITE_STATIC);
			sqlite3_bind_text(q, 12, p->refined, -1, SQLITE_STATIC);
			sqlite3_bind_text(q, 13, p->refine_fp, -1, SQLITE_STATIC);
		} else {
			sqlite3_bind_null(q, 11);
			sqlite3_bind_null(q, 12);
			sqlite3_bind_null(q, 13);
		}
		int src = hvst_step_done(q);
		if (src != SQLITE_DONE) {
			rc = hvst_db_error(st, src, "cannot write the MIME cache");
			hvst_tx_rollback(st);
		}
	}
	if (q)
		sqlite3_clear_bindings(q);
	if (rc == HV_OK)
		rc = hvst_tx_commit(st);
	/* Written or not, the batch is done with: a lost cache answer only costs a recompute. */
	hvst_mime_pending_free(st);
	return rc;
}
