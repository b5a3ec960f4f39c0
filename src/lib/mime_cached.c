/* MIME detection of many paths through the store's cache.
 *
 * The warm path is kept to the floor: one lstat per path, every lookup of the batch in one
 * read transaction (SQLite then takes its shared lock once, not once per statement), and
 * libmagic's database is loaded — or its worker started — only on the first miss, so a fully
 * cached run never maps magic.mgc. The cache also keeps each answer refined by the file's base
 * name under the refinement tables' fingerprint: a hit under the same name is answered as
 * cached, and shared-mime-info is read only when some answer still needs refining. */
#include "harvest/collect.h"
#include "harvest/mime.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"
#include "fdio.h"
#include "internal.h"
#include "mime_internal.h"
#include "store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A failure to begin only costs speed: each lookup then reads on its own. */
void hvm_read_begin(hv_store *st, bool *began)
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

void hvm_read_end(hv_store *st, bool began)
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

/* The base name hv_mime_refine() refines by: after the last '/'. */
static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

static atomic_ulong refined_hits;

unsigned long hvm_refined_hits(void)
{
	return atomic_load(&refined_hits);
}

void hvm_count_refined_hit(void)
{
	atomic_fetch_add(&refined_hits, 1);
}

enum learn {
	LEARN_NOTHING,
	LEARN_RAW,        /* a miss: libmagic's answer, and its refinement for this name */
	LEARN_REFINEMENT, /* a hit without a refinement for this name: that refinement */
	LEARN_REFINED,    /* a hit refined from the cache: nothing, and no refinement either */
};

/* Refines r's answer by path's name, in place; false when it could not be (the tables could
 * not be read, or out of memory): the answer is then libmagic's, and no refinement to keep. */
static bool refine_result(const hv_mime_opts *o, const char *path, hv_mime_result *r)
{
	const char *type;
	if (hv_mime_refine(o->db, path, r->mime_type, &type) != HV_OK)
		return false;
	if (type != r->mime_type) {
		char *copy = strdup(type);
		if (!copy)
			return false;
		free(r->mime_type);
		r->mime_type = copy;
	}
	return true;
}

/* The per-path arrays of one detect_cached call, carved out of one zeroed block
 * (hv_bulk_calloc): a 4,000-path warm run's is 900 KiB, 225 small pages that cost it about
 * 1.5 ms here even when made present in one call. */
struct scratch {
	void *block;
	hv_stat *stats;
	hvst_mime_hit *hits;
	hvst_mime_key *keys;
	size_t *key_index;
	char **raw;
	unsigned char *learn;
	const char **miss;
	size_t *miss_index;
	unsigned char *owner_reads; /* per path: owner_may_read() of its lstat */
	const hv_stat **miss_stat;  /* per miss: its lstat, the state its answer is cached for */
	unsigned char *moved;       /* per miss: the file opened was not in that state */
};

/* Places an array of n elements of size bytes at the first 16-byte boundary at or after *off:
 * *at is where it starts, and *off moves past it. False when the sizes overflow. */
static bool scratch_take(size_t *off, size_t n, size_t size, size_t *at)
{
	enum { ALIGN = 16 };
	size_t start = (*off + ALIGN - 1) & ~(size_t)(ALIGN - 1);
	if (n > (SIZE_MAX - start) / size)
		return false;
	*at = start;
	*off = start + n * size;
	return true;
}

static bool scratch_alloc(struct scratch *sc, size_t n)
{
	memset(sc, 0, sizeof(*sc));
	size_t m = n ? n : 1, off = 0, at[11];
	bool ok = scratch_take(&off, m, sizeof(hv_stat), &at[0]) &&
		  scratch_take(&off, m, sizeof(hvst_mime_hit), &at[1]) &&
		  scratch_take(&off, m, sizeof(hvst_mime_key), &at[2]) &&
		  scratch_take(&off, m, sizeof(size_t), &at[3]) &&
		  scratch_take(&off, m, sizeof(char *), &at[4]) &&
		  scratch_take(&off, m, 1, &at[5]) &&
		  scratch_take(&off, m, sizeof(const char *), &at[6]) &&
		  scratch_take(&off, m, sizeof(size_t), &at[7]) &&
		  scratch_take(&off, m, 1, &at[8]) &&
		  scratch_take(&off, m, sizeof(const hv_stat *), &at[9]) &&
		  scratch_take(&off, m, 1, &at[10]);
	char *b = ok ? hv_bulk_calloc(off) : NULL;
	if (!b)
		return false;
	sc->block = b;
	sc->stats = (hv_stat *)(void *)(b + at[0]);
	sc->hits = (hvst_mime_hit *)(void *)(b + at[1]);
	sc->keys = (hvst_mime_key *)(void *)(b + at[2]);
	sc->key_index = (size_t *)(void *)(b + at[3]);
	sc->raw = (char **)(void *)(b + at[4]);
	sc->learn = (unsigned char *)(b + at[5]);
	sc->miss = (const char **)(void *)(b + at[6]);
	sc->miss_index = (size_t *)(void *)(b + at[7]);
	sc->owner_reads = (unsigned char *)(b + at[8]);
	sc->miss_stat = (const hv_stat **)(void *)(b + at[9]);
	sc->moved = (unsigned char *)(b + at[10]);
	return true;
}

/* The user ID an lstat shows for an owner unmapped in the caller's user namespace (the
 * kernel's default overflowuid). */
#define OVERFLOW_UID 65534

/* Whether a file that lstat says is owned by euid is surely the caller's: not when euid is
 * the overflow ID and the caller is in a user namespace (one whose uid_map is not the whole
 * identity map), where a file of any unmapped owner shows that ID too. */
static bool uid_is_callers(uid_t euid)
{
	if (euid != OVERFLOW_UID)
		return true;
	char map[128];
	if (hv_read_small("/proc/self/uid_map", map, sizeof(map)) <= 0)
		return false;
	/* one line, "0 0 4294967295" in columns */
	unsigned long want[] = {0, 0, 4294967295UL};
	const char *p = map;
	for (size_t i = 0; i < 3; i++) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(p, &end, 10);
		if (end == p || errno || v != want[i])
			return false;
		p = end;
	}
	return p[strspn(p, " \n")] == '\0';
}

/* True when a file's lstat alone says the caller may read it: a regular file of the caller's
 * effective user with the owner's read bit set. The kernel grants its owner what those bits
 * grant (no ACL entry applies to the owner), so faccessat would answer the same, and a warm
 * run makes one path lookup per file, not two. Anyone else (a group, a named user of an ACL,
 * root by its capabilities) is asked of faccessat. */
static bool owner_may_read(const struct stat *s, uid_t euid, bool uid_sure)
{
	return uid_sure && S_ISREG(s->st_mode) && s->st_uid == euid && (s->st_mode & S_IRUSR);
}

/* lstats NULL: each path is lstat'ed here; else its lstat (or errnos' errno) is the caller's.
 * st NULL (only with lstats): no cache, every regular file goes to libmagic as a miss, with
 * nothing looked up or learned, and is refined on the detection threads. */
static hv_status detect_cached(hv_store *st, const char *const *paths, const struct stat *lstats,
			       const int *errnos, size_t n, const hv_mime_opts *opts,
			       hv_mime_result **results)
{
	hv_mime_opts o;
	if (opts)
		o = *opts;
	else
		hv_mime_opts_init(&o);
	if (!st && !lstats)
		return hv_mime_detect_paths(paths, n, &o, results);
	*results = NULL;
	hv_magic *m = NULL;
	/* Only for the fingerprint: nothing is loaded until a miss needs libmagic. */
	int rc = st ? hvm_magic_open_lazy(&m, o.database, o.extra_flags) : HV_OK;
	if (rc != HV_OK)
		return rc;
	const char *fp = st ? hv_magic_fingerprint(m) : NULL;
	/* Refined answers are cached for the default refinement tables only: a caller's own db
	 * has no fingerprint. */
	const char *rfp = st && !o.raw && !o.db ? hvm_refine_fingerprint() : NULL;
	hv_mime_result *res = n < SIZE_MAX / sizeof(*res) ? hv_bulk_calloc(n * sizeof(*res)) : NULL;
	struct scratch sc;
	bool have_scratch = scratch_alloc(&sc, n);
	const char **miss = sc.miss;
	size_t *miss_index = sc.miss_index;
	hv_stat *stats = sc.stats;
	/* Per path: what the cache learns after refinement (enum learn), with libmagic's answer. */
	unsigned char *learn = sc.learn;
	char **raw = sc.raw;
	hvst_mime_hit *hits = sc.hits;
	hvst_mime_key *keys = sc.keys;
	size_t *key_index = sc.key_index;
	size_t n_miss = 0, n_keys = 0;
	int overall = HV_OK;
	bool began = false;
	uid_t euid = geteuid();
	bool uid_sure = uid_is_callers(euid);
	if (!res || !have_scratch) {
		rc = hv_error_set(HV_ENOMEM, "out of memory");
		goto done;
	}
	/* Hits first, on this thread: the regular files' lookups, all in one transaction and by
	 * runs of one statement (hvst_mime_lookup_many). */
	for (size_t i = 0; i < n; i++) {
		struct stat s;
		int err;
		if (lstats) {
			err = errnos[i];
			if (!err)
				s = lstats[i];
		} else {
			err = lstat(paths[i], &s) != 0 ? errno : 0;
		}
		if (err || !S_ISREG(s.st_mode)) {
			rc = answer_without_content(&res[i], paths[i], &s, err);
			if (rc != HV_OK)
				break;
			if (res[i].status != HV_OK)
				overall = HV_WARN;
			continue;
		}
		if (!st) {
			miss_index[n_miss] = i;
			miss[n_miss++] = paths[i];
			continue;
		}
		HV_STAT_FROM(&s, &stats[i]);
		sc.owner_reads[i] = owner_may_read(&s, euid, uid_sure);
		const char *name = base_name(paths[i]);
		keys[n_keys++] = (hvst_mime_key){.s = &stats[i], .name = name,
						 .name_len = strlen(name), .out = &hits[i]};
		key_index[n_keys - 1] = i;
	}
	if (st)
		hvm_read_begin(st, &began);
	if (rc == HV_OK && st)
		rc = hvst_mime_lookup_many(st, fp, rfp, keys, n_keys);
	for (size_t k = 0; rc == HV_OK && k < n_keys; k++) {
		size_t i = key_index[k];
		hvst_mime_hit *hit = &hits[i];
		if ((hit->refined || hit->raw) && !sc.owner_reads[i] &&
		    faccessat(AT_FDCWD, paths[i], R_OK, AT_EACCESS) != 0) {
			/* A cached answer is given only to a caller who could read the file, as a
			 * miss is: the cache, shared by its users, tells no one the type of a file
			 * they may not read, and --no-cache changes no answer. */
			int err = errno;
			free(hit->refined);
			free(hit->raw);
			hit->refined = hit->raw = NULL;
			res[i].status = hv_error_errno(HV_EIO, paths[i], err);
			res[i].error = strdup(hv_error_last());
			if (!res[i].error)
				rc = hv_error_set(HV_ENOMEM, "out of memory");
			overall = HV_WARN;
		} else if (hit->refined) {
			/* The same name under the same tables: refined before, nothing to redo. */
			res[i].mime_type = hit->refined;
			res[i].status = HV_OK;
			learn[i] = LEARN_REFINED;
			hvm_count_refined_hit();
		} else if (hit->raw) {
			res[i].mime_type = hit->raw;
			res[i].status = HV_OK;
			learn[i] = rfp ? LEARN_REFINEMENT : LEARN_NOTHING;
		} else {
			sc.miss_stat[n_miss] = &stats[i];
			miss_index[n_miss] = i;
			miss[n_miss++] = paths[i];
		}
	}
	if (st)
		hvm_read_end(st, began);
	if (rc != HV_OK)
		goto done;
	/* Misses on worker threads, libmagic's answer only for the cache to keep (without one,
	 * refined there too). */
	if (n_miss > 0) {
		hv_mime_opts raw_opts = o;
		raw_opts.raw = st ? true : o.raw;
		hv_mime_result *got = NULL;
		rc = hvm_detect_regular(miss, n_miss, &raw_opts, st ? sc.miss_stat : NULL,
					sc.moved, &got);
		if (rc < 0)
			goto done;
		if (rc != HV_OK)
			overall = rc;
		for (size_t k = 0; k < n_miss; k++) {
			size_t i = miss_index[k];
			res[i] = got[k];
			/* Only a real answer (a worker's octet-stream fallback is never cached), and
			 * only for the file in the state it was looked up in: one opened after a
			 * directory of its path was swapped, or the file replaced or written since
			 * the lstat, would put another file's type under this file's key. */
			if (st && got[k].status == HV_OK && got[k].mime_type && !sc.moved[k])
				learn[i] = LEARN_RAW;
		}
		free(got); /* its strings moved into res */
	}
	/* Refinement of every answer not refined from the cache, then what the cache learns: a
	 * miss's libmagic answer, and the refinement for this name of a miss or a hit. */
	for (size_t i = 0; st && i < n; i++) {
		if (learn[i] == LEARN_REFINED)
			continue;
		/* No answer (never the case with learn set), or out of memory: only the cache
		 * entry is lost. */
		if (learn[i] && (!res[i].mime_type || !(raw[i] = strdup(res[i].mime_type))))
			learn[i] = LEARN_NOTHING;
		bool refined = false;
		if (!o.raw && res[i].mime_type && res[i].status == HV_OK)
			refined = refine_result(&o, paths[i], &res[i]);
		if (!learn[i])
			continue;
		const char *name = base_name(paths[i]);
		bool with_refined = rfp && refined && *name;
		if (learn[i] == LEARN_REFINEMENT && !with_refined)
			continue;
		hvst_mime_put_refined(st, &stats[i], fp, raw[i],
				      hits[i].sha256[0] ? hits[i].sha256 : NULL, name,
				      strlen(name), with_refined ? res[i].mime_type : NULL,
				      with_refined ? rfp : NULL);
	}
	if (st && (n_miss > 0 || st->n_mime > 0)) {
		rc = hv_store_flush(st);
		if (rc != HV_OK)
			goto done;
	}
	rc = overall;
	if (rc == HV_WARN) {
		size_t failed = 0;
		for (size_t i = 0; i < n; i++)
			failed += res[i].status != HV_OK;
		hv_error_set(HV_WARN, "%zu of %zu paths could not be examined", failed, n);
	}
done:
	if (have_scratch)
		for (size_t i = 0; i < n; i++)
			free(raw[i]);
	free(sc.block);
	hv_magic_close(m);
	if (rc < 0) {
		if (res)
			hv_mime_results_free(res, n);
		return rc;
	}
	*results = res;
	return rc;
}

hv_status hv_mime_detect_cached(hv_store *st, const char *const *paths, size_t n,
				const hv_mime_opts *opts, hv_mime_result **results)
{
	HV_NEED((paths || n == 0) && results);
	return detect_cached(st, paths, NULL, NULL, n, opts, results);
}

hv_status hv_mime_detect_cached_lstat(hv_store *st, const char *const *paths,
				      const struct stat *lstats, const int *errnos, size_t n,
				      const hv_mime_opts *opts, hv_mime_result **results)
{
	HV_NEED((paths || n == 0) && results);
	return detect_cached(st, paths, lstats, errnos, n, opts, results);
}
