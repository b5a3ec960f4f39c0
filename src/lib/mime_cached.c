/* MIME detection of many paths through the store's cache.
 *
 * The warm path is kept to the floor: one lstat per path, every lookup of the batch in one
 * read transaction (SQLite then takes its shared lock once, not once per statement), and
 * libmagic's database is loaded — or its worker started — only on the first miss, so a fully
 * cached run never maps magic.mgc. */
#include "harvest/collect.h"
#include "harvest/mime.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"
#include "internal.h"
#include "mime_internal.h"
#include "store_internal.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Opens a read transaction around the lookups when none is open; *began says whether to end
 * it. A failure to begin only costs speed: each lookup then reads on its own. */
static void read_begin(hv_store *st, bool *began)
{
	*began = false;
	if (st->in_tx || !sqlite3_get_autocommit(st->db))
		return;
	hv_error_saved saved;
	hv_error_save(&saved);
	if (hvst_exec(st, "BEGIN DEFERRED", "cannot read the MIME cache") == HV_OK)
		*began = true;
	hv_error_restore(&saved, HV_OK);
}

static void read_end(hv_store *st, bool began)
{
	if (!began)
		return;
	hv_error_saved saved;
	hv_error_save(&saved);
	/* Only reads happened: a failed COMMIT leaves nothing half-written; roll back then. */
	if (hvst_exec(st, "COMMIT", "cannot end the MIME cache read") != HV_OK)
		(void)hvst_exec(st, "ROLLBACK", "cannot end the MIME cache read");
	hv_error_restore(&saved, HV_OK);
}

/* The answer of a path that is not a regular file or cannot be lstat'ed, as
 * hv_mime_detect_paths() gives it. */
static hv_status answer_without_content(hv_mime_result *r, const char *path, const struct stat *s,
					int lstat_errno)
{
	const char *type = lstat_errno ? NULL : hv_mime_for_mode(s->st_mode);
	if (type) {
		r->status = HV_OK;
		r->mime_type = strdup(type);
	} else {
		r->status = lstat_errno ? hv_error_errno(HV_EIO, path, lstat_errno)
					: hv_error_set(HV_EIO, "%s: unknown file type", path);
		r->error = strdup(hv_error_last());
	}
	return r->mime_type || r->error ? HV_OK : hv_error_set(HV_ENOMEM, "out of memory");
}

hv_status hv_mime_detect_cached(hv_store *st, const char *const *paths, size_t n,
				const hv_mime_opts *opts, hv_mime_result **results)
{
	hv_mime_opts o;
	if (opts)
		o = *opts;
	else
		hv_mime_opts_init(&o);
	if (!st)
		return hv_mime_detect_paths(paths, n, &o, results);
	*results = NULL;
	hv_magic *m;
	/* Only for the fingerprint: nothing is loaded until a miss needs libmagic. */
	int rc = hvm_magic_open_lazy(&m, o.database, o.extra_flags);
	if (rc != HV_OK)
		return rc;
	const char *fp = hv_magic_fingerprint(m);
	hv_mime_result *res = calloc(n ? n : 1, sizeof(*res));
	const char **miss = calloc(n ? n : 1, sizeof(*miss));
	size_t *miss_index = calloc(n ? n : 1, sizeof(*miss_index));
	hv_stat *stats = calloc(n ? n : 1, sizeof(*stats));
	size_t n_miss = 0;
	int overall = HV_OK;
	bool began = false;
	if (!res || !miss || !miss_index || !stats) {
		rc = hv_error_set(HV_ENOMEM, "out of memory");
		goto done;
	}
	/* Hits first, on this thread: a lookup is one indexed query, all in one transaction. */
	read_begin(st, &began);
	for (size_t i = 0; i < n; i++) {
		struct stat s;
		char *cached = NULL;
		int err = lstat(paths[i], &s) != 0 ? errno : 0;
		if (err || !S_ISREG(s.st_mode)) {
			rc = answer_without_content(&res[i], paths[i], &s, err);
			if (rc != HV_OK)
				break;
			if (res[i].status != HV_OK)
				overall = HV_WARN;
			continue;
		}
		HV_STAT_FROM(&s, &stats[i]);
		rc = hv_store_mime_lookup(st, &stats[i], fp, &cached);
		if (rc != HV_OK)
			break;
		if (cached) {
			res[i].mime_type = cached;
			res[i].status = HV_OK;
		} else {
			miss_index[n_miss] = i;
			miss[n_miss++] = paths[i];
		}
	}
	read_end(st, began);
	if (rc != HV_OK)
		goto done;
	/* Misses on worker threads, libmagic's answer only: the cache keeps that one. */
	if (n_miss > 0) {
		hv_mime_opts raw = o;
		raw.raw = true;
		hv_mime_result *got = NULL;
		rc = hvm_detect_regular(miss, n_miss, &raw, &got);
		if (rc < 0)
			goto done;
		if (rc != HV_OK)
			overall = rc;
		for (size_t k = 0; k < n_miss; k++) {
			size_t i = miss_index[k];
			res[i] = got[k];
			/* Only a real answer: a worker's octet-stream fallback is never cached. */
			if (got[k].status == HV_OK && got[k].mime_type)
				hv_store_mime_put(st, &stats[i], fp, got[k].mime_type);
		}
		free(got); /* its strings moved into res */
		rc = hv_store_flush(st);
		if (rc != HV_OK)
			goto done;
	}
	if (!o.raw) {
		for (size_t i = 0; i < n; i++) {
			if (!res[i].mime_type || res[i].status != HV_OK)
				continue;
			const char *type;
			if (hv_mime_refine(o.db, paths[i], res[i].mime_type, &type) == HV_OK &&
			    type != res[i].mime_type) {
				char *copy = strdup(type);
				if (copy) {
					free(res[i].mime_type);
					res[i].mime_type = copy;
				}
			}
		}
	}
	rc = overall;
	if (rc == HV_WARN) {
		size_t failed = 0;
		for (size_t i = 0; i < n; i++)
			failed += res[i].status != HV_OK;
		hv_error_set(HV_WARN, "%zu of %zu paths could not be examined", failed, n);
	}
done:
	free(miss);
	free(miss_index);
	free(stats);
	hv_magic_close(m);
	if (rc < 0) {
		if (res)
			hv_mime_results_free(res, n);
		return rc;
	}
	*results = res;
	return rc;
}
