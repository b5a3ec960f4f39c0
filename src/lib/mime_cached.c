/* MIME detection of many paths through the store's cache. */
#include "harvest/collect.h"
#include "harvest/mime.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
	int rc = hv_magic_open(&m, o.database, o.extra_flags);
	if (rc != HV_OK)
		return rc;
	const char *fp = hv_magic_fingerprint(m);
	hv_mime_result *res = calloc(n ? n : 1, sizeof(*res));
	const char **miss = calloc(n ? n : 1, sizeof(*miss));
	size_t *miss_index = calloc(n ? n : 1, sizeof(*miss_index));
	hv_stat *stats = calloc(n ? n : 1, sizeof(*stats));
	size_t n_miss = 0;
	if (!res || !miss || !miss_index || !stats) {
		rc = hv_error_set(HV_ENOMEM, "out of memory");
		goto done;
	}
	/* Hits first, on this thread: a lookup is one indexed query. */
	for (size_t i = 0; i < n; i++) {
		struct stat s;
		char *cached = NULL;
		if (lstat(paths[i], &s) == 0 && S_ISREG(s.st_mode)) {
			HV_STAT_FROM(&s, &stats[i]);
			rc = hv_store_mime_lookup(st, &stats[i], fp, &cached);
			if (rc != HV_OK)
				goto done;
		}
		if (cached) {
			res[i].mime_type = cached;
			res[i].status = HV_OK;
		} else {
			miss_index[n_miss] = i;
			miss[n_miss++] = paths[i];
		}
	}
	/* Misses on worker threads, libmagic's answer only: the cache keeps that one. */
	hv_mime_opts raw = o;
	raw.raw = true;
	hv_mime_result *got = NULL;
	rc = hv_mime_detect_paths(miss, n_miss, &raw, &got);
	if (rc < 0)
		goto done;
	int overall = rc;
	for (size_t k = 0; k < n_miss; k++) {
		size_t i = miss_index[k];
		res[i] = got[k];
		if (got[k].mime_type && stats[i].ino)
			hv_store_mime_put(st, &stats[i], fp, got[k].mime_type);
	}
	free(got); /* its strings moved into res */
	rc = hv_store_flush(st);
	if (rc != HV_OK)
		goto done;
	if (!o.raw) {
		for (size_t i = 0; i < n; i++) {
			if (!res[i].mime_type)
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
