/* Snapshots and the artifact collector, on top of the walker, the MIME module and the store.
 *
 * One read of each file serves its SHA-256, its MIME detection (libmagic on the bytes read)
 * and its content. A file is opened relative to its directory's descriptor through the
 * walker (never by path), with O_NOFOLLOW|O_NONBLOCK, and checked with fstat: a file swapped
 * for a FIFO or a symlink after the walk saw it is skipped, never read. */
#include "harvest/collect.h"
#include "harvest/json.h"
#include "harvest/mime.h"
#include "harvest/walk.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_MAX_FILE_BYTES (32ull << 20)
#define DEFAULT_MAX_FILES 1000ull
#define DEFAULT_MAX_TOTAL_BYTES (256ull << 20)

void hv_collect_opts_init(hv_collect_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->max_file_bytes = DEFAULT_MAX_FILE_BYTES;
	opts->max_files = DEFAULT_MAX_FILES;
	opts->max_total_bytes = DEFAULT_MAX_TOTAL_BYTES;
}

/* The walk of a collect or a snapshot: default excludes unless include_hidden. */
static int open_walk(hv_walk **w, const char *dir, const hv_collect_opts *o, hv_walk_sort sort)
{
	size_t n = o->n_excludes + 1;
	const char **excl = calloc(n, sizeof(*excl));
	if (!excl)
		return hv_error_set(HV_ENOMEM, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < o->n_excludes; i++)
		excl[k++] = o->excludes[i];
	hv_walk_opts wo;
	hv_walk_opts_init(&wo);
	if (!o->include_hidden) {
		wo.no_hidden = true;
		excl[k++] = "__pycache__";
	}
	wo.excludes = excl;
	wo.n_excludes = k;
	wo.threads = o->threads;
	wo.sort = sort;
	int rc = hv_walk_open(w, dir, &wo);
	free(excl); /* the walker keeps its own copies */
	return rc;
}

static void warn(const hv_collect_opts *o, const char *msg)
{
	if (o->on_warning)
		o->on_warning(o->ctx, msg);
}

hv_status hv_snapshot_take(hv_store *st, const char *dir, const hv_collect_opts *opts,
			   int64_t *id, uint64_t *entries)
{
	hv_collect_opts defaults;
	if (!opts) {
		hv_collect_opts_init(&defaults);
		opts = &defaults;
	}
	char *root = realpath(dir, NULL);
	if (!root) {
		int err = errno;
		return hv_error_errno(err == ENOENT || err == ENOTDIR ? HV_ENOTDIR : HV_EIO, dir, err);
	}
	hv_walk *w;
	int rc = open_walk(&w, root, opts, HV_SORT_NONE);
	if (rc != HV_OK) {
		free(root);
		return rc;
	}
	hv_snapshot_writer *sw;
	rc = hv_store_snapshot_begin(st, root, &sw);
	if (rc != HV_OK) {
		hv_walk_close(w);
		free(root);
		return rc;
	}
	int64_t at = hv_snapshot_writer_created_at(sw);
	uint64_t count = 0;
	const hv_entry *e;
	while ((rc = hv_walk_next(w, &e)) != HV_DONE) {
		if (rc == HV_WARN) {
			warn(opts, hv_error_last());
			continue;
		}
		if (rc != HV_OK)
			break;
		if (!e->have_lstat)
			continue; /* vanished: not there to compare against */
		char hex[65];
		const char *sha = NULL;
		if (S_ISREG(e->lst.mode) && hv_store_stat_is_racy(&e->lst, at) &&
		    e->lst.size <= opts->max_file_bytes) {
			/* Changed within the clock's resolution of the snapshot: remember the content,
			 * so a same-size rewrite in the same tick is still seen (the racy rule). */
			int fd = hv_walk_openat(w, O_RDONLY | O_NONBLOCK);
			struct stat fst;
			if (fd >= 0 && fstat(fd, &fst) == 0 && S_ISREG(fst.st_mode) &&
			    hv_sha256_fd(fd, opts->max_file_bytes, e->path, hex) == HV_OK)
				sha = hex;
			if (fd >= 0)
				close(fd);
		}
		rc = hv_snapshot_writer_add(sw, e->path, e->path_len, &e->lst, sha);
		if (rc != HV_OK)
			break;
		count++;
		if (opts->on_progress)
			opts->on_progress(opts->ctx, count, 0, 0);
	}
	hv_walk_close(w);
	free(root);
	if (rc != HV_DONE) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", hv_error_last());
		hv_snapshot_writer_abort(sw);
		return hv_error_set(rc, "%s", msg);
	}
	int64_t sid = 0;
	rc = hv_snapshot_writer_finish(sw, &sid);
	if (rc != HV_OK)
		return rc;
	if (id)
		*id = sid;
	if (entries)
		*entries = count;
	return HV_OK;
}

/* ---- collect ---- */

/* The database's own files, which are never artifacts wherever the database lives. */
struct db_files {
	struct {
		uint64_t dev, ino;
	} ids[4];
	size_t n;
};

static void db_files_init(struct db_files *d, const hv_store *st)
{
	d->n = 0;
	if (!st)
		return;
	static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
	const char *path = hv_store_path(st);
	hv_buf b = {0};
	for (size_t i = 0; i < 4; i++) {
		hv_buf_truncate(&b, 0);
		if (hv_buf_append_str(&b, path) != HV_OK || hv_buf_append_str(&b, suffixes[i]) != HV_OK)
			break;
		struct stat s;
		if (lstat(b.data, &s) == 0) {
			d->ids[d->n].dev = s.st_dev;
			d->ids[d->n].ino = s.st_ino;
			d->n++;
		}
	}
	hv_buf_free(&b);
}

static bool is_db_file(const struct db_files *d, const hv_stat *s)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->ids[i].dev == s->dev && d->ids[i].ino == s->ino)
			return true;
	return false;
}

/* A database file created after the collect started (a -wal appearing) is caught by its
 * name next to the database. */
static bool is_db_path(const char *root, const hv_store *st, const hv_entry *e)
{
	if (!st)
		return false;
	const char *db = hv_store_path(st);
	size_t rl = strlen(root);
	if (strncmp(db, root, rl) != 0 || (rl > 1 && db[rl] != '/'))
		return false;
	const char *rel = db + (rl > 1 ? rl + 1 : 1);
	size_t n = strlen(rel);
	if (e->path_len < n || memcmp(e->path, rel, n) != 0)
		return false;
	const char *rest = e->path + n;
	return !*rest || !strcmp(rest, "-wal") || !strcmp(rest, "-shm") || !strcmp(rest, "-journal");
}

struct collector {
	hv_store *st;
	const hv_collect_opts *o;
	hv_walk *w;
	hv_magic *magic;
	const char *fingerprint;
	hv_collection *c;
	size_t files_cap, skipped_cap;
	uint64_t total_bytes;
};

static int add_skipped(struct collector *k, const hv_entry *e, const char *reason, bool has_size,
		       uint64_t size, const char *error)
{
	hv_collection *c = k->c;
	if (c->n_skipped == k->skipped_cap) {
		size_t cap = k->skipped_cap ? k->skipped_cap * 2 : 16;
		hv_skipped_file *s = realloc(c->skipped, cap * sizeof(*s));
		if (!s)
			return hv_error_set(HV_ENOMEM, "out of memory");
		c->skipped = s;
		k->skipped_cap = cap;
	}
	hv_skipped_file *s = &c->skipped[c->n_skipped];
	memset(s, 0, sizeof(*s));
	s->path = malloc(e->path_len + 1);
	s->error = error ? strdup(error) : NULL;
	if (!s->path || (error && !s->error)) {
		free(s->path);
		free(s->error);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	memcpy(s->path, e->path, e->path_len + 1);
	s->path_len = e->path_len;
	s->reason = reason;
	s->has_size = has_size;
	s->size = size;
	c->n_skipped++;
	if (!strcmp(reason, "too_large") || !strcmp(reason, "limit") || !strcmp(reason, "error"))
		c->incomplete = true;
	return HV_OK;
}

static int add_file(struct collector *k, const hv_entry *e, const char *mime, uint64_t size,
		    const char *sha, unsigned char *content, size_t content_len)
{
	hv_collection *c = k->c;
	if (c->n_files == k->files_cap) {
		size_t cap = k->files_cap ? k->files_cap * 2 : 16;
		hv_output_file *f = realloc(c->files, cap * sizeof(*f));
		if (!f)
			return hv_error_set(HV_ENOMEM, "out of memory");
		c->files = f;
		k->files_cap = cap;
	}
	hv_output_file *f = &c->files[c->n_files];
	memset(f, 0, sizeof(*f));
	f->path = malloc(e->path_len + 1);
	f->mime_type = strdup(mime);
	if (!f->path || !f->mime_type) {
		free(f->path);
		free(f->mime_type);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	memcpy(f->path, e->path, e->path_len + 1);
	f->path_len = e->path_len;
	f->name = f->path + (e->path_len - e->name_len);
	f->name_len = e->name_len;
	f->size = size;
	if (sha)
		memcpy(f->sha256, sha, 65);
	f->content = content;
	f->content_len = content_len;
	c->n_files++;
	k->total_bytes += size;
	return HV_OK;
}

/* Reads all of fd (a regular file of expected size) into a new buffer, at most max bytes:
 * HV_OK, HV_WARN when it holds more than max, HV_EIO on a read error. */
static int read_all(int fd, uint64_t expect, uint64_t max, const char *path, unsigned char **out,
		    size_t *len)
{
	size_t cap = (size_t)(expect < max ? expect : max) + 1;
	unsigned char *buf = malloc(cap);
	if (!buf)
		return hv_error_set(HV_ENOMEM, "out of memory");
	size_t n = 0;
	for (;;) {
		if (n == cap) {
			if (n > max) {
				free(buf);
				return HV_WARN;
			}
			size_t ncap = cap * 2 > max + 1 ? (size_t)max + 1 : cap * 2;
			unsigned char *p = realloc(buf, ncap);
			if (!p) {
				free(buf);
				return hv_error_set(HV_ENOMEM, "out of memory");
			}
			buf = p;
			cap = ncap;
		}
		ssize_t got = read(fd, buf + n, cap - n);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			free(buf);
			return hv_error_errno(HV_EIO, path, err);
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	if (n > max) {
		free(buf);
		return HV_WARN;
	}
	*out = buf;
	*len = n;
	return HV_OK;
}

/* The raw (libmagic) type of the file open on fd with content buf: from the cache when the
 * file is unchanged, else detected and cached. */
static int raw_type(struct collector *k, const hv_stat *fs, const unsigned char *buf, size_t len,
		    int fd, const char *path, const char *sha, char **out)
{
	if (!k->o->no_cache && k->st) {
		char cached_sha[65];
		int rc = hv_store_mime_lookup_sha(k->st, fs, k->fingerprint, out, cached_sha);
		if (rc != HV_OK)
			return rc;
		/* An answer cached without the digest (by `harvest mime`) gets it now, so a later
		 * --no-content collect need not open the file. */
		if (*out && !cached_sha[0])
			hv_store_mime_put_sha(k->st, fs, k->fingerprint, *out, sha);
		if (*out)
			return HV_OK;
	}
	const char *t;
	int rc = hv_magic_buffer(k->magic, buf, len, fd, path, &t);
	if (rc != HV_OK)
		return rc;
	*out = strdup(t);
	if (!*out)
		return hv_error_set(HV_ENOMEM, "out of memory");
	if (!k->o->no_cache && k->st)
		hv_store_mime_put_sha(k->st, fs, k->fingerprint, t, sha);
	return HV_OK;
}

enum { NOT_PRODUCED = 1 };

/* One regular file that may be an artifact. compare_sha: the snapshot's digest of this
 * racy file, or NULL. Returns HV_OK, NOT_PRODUCED, or a fatal status. */
static int collect_file(struct collector *k, const hv_entry *e, const char *compare_sha)
{
	const hv_collect_opts *o = k->o;
	/* (A racy file is first read: it may turn out not to be produced at all.) */
	if (!compare_sha &&
	    (k->c->n_files >= o->max_files || k->total_bytes + e->lst.size > o->max_total_bytes))
		return add_skipped(k, e, "limit", true, e->lst.size, NULL);
	/* With --no-content, a cache hit that knows the digest answers without opening the
	 * file at all: the walk's lstat is the key. */
	if (o->no_content && !compare_sha && !o->no_cache && k->st) {
		char *cached = NULL;
		char cached_sha[65];
		int rc = hv_store_mime_lookup_sha(k->st, &e->lst, k->fingerprint, &cached,
						  cached_sha);
		if (rc != HV_OK)
			return rc;
		if (cached && cached_sha[0]) {
			const char *type;
			hv_mime_refine(NULL, e->name, cached, &type);
			rc = add_file(k, e, type, e->lst.size, cached_sha, NULL, 0);
			free(cached);
			return rc;
		}
		free(cached);
	}
	if (o->test_before_open)
		o->test_before_open(o->ctx, e->path);
	int fd = hv_walk_openat(k->w, O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		int err = errno;
		if (err == ELOOP)
			return add_skipped(k, e, "symlink", true, e->lst.size, NULL);
		if (err == ENXIO || err == ENODEV || err == EOPNOTSUPP)
			/* swapped for a socket or a device after the walk saw it */
			return add_skipped(k, e, "not_regular", true, e->lst.size, NULL);
		char msg[PATH_MAX + 128];
		snprintf(msg, sizeof(msg), "%s: %s", e->path, strerror(err));
		return add_skipped(k, e, "error", true, e->lst.size, msg);
	}
	struct stat fst;
	if (fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode)) {
		/* Swapped after the walk saw it: never read a FIFO or a device. */
		close(fd);
		return add_skipped(k, e, "not_regular", true, e->lst.size, NULL);
	}
	hv_stat fs;
	HV_STAT_FROM(&fst, &fs);
	int rc;
	if (fs.size > o->max_file_bytes) {
		close(fd);
		return add_skipped(k, e, "too_large", true, fs.size, NULL);
	}
	unsigned char *buf = NULL;
	size_t len = 0;
	rc = read_all(fd, fs.size, o->max_file_bytes, e->path, &buf, &len);
	if (rc == HV_WARN) {
		close(fd);
		return add_skipped(k, e, "too_large", true, fs.size, NULL);
	}
	if (rc != HV_OK) {
		close(fd);
		return add_skipped(k, e, "error", true, fs.size, hv_error_last());
	}
	char sha[65];
	hv_sha256_hex(buf, len, sha);
	if (compare_sha && strcmp(sha, compare_sha) == 0) {
		close(fd);
		free(buf);
		return NOT_PRODUCED;
	}
	if (k->c->n_files >= o->max_files || k->total_bytes + len > o->max_total_bytes) {
		close(fd);
		free(buf);
		return add_skipped(k, e, "limit", true, len, NULL);
	}
	char *raw = NULL;
	rc = raw_type(k, &fs, buf, len, fd, e->path, sha, &raw);
	close(fd);
	if (rc != HV_OK) {
		free(buf);
		return add_skipped(k, e, "error", true, len, hv_error_last());
	}
	const char *type;
	hv_mime_refine(NULL, e->name, raw, &type);
	if (o->no_content) {
		free(buf);
		buf = NULL;
	}
	rc = add_file(k, e, type, len, sha, buf, buf ? len : 0);
	free(raw);
	if (rc != HV_OK)
		free(buf);
	return rc;
}

/* Whether e differs from the snapshot's entry s (NULL: absent). *compare_sha is set when
 * only the content can tell (a racy regular file whose metadata matches). */
static bool produced(const hv_entry *e, const hv_snapshot_entry *s, const char **compare_sha)
{
	*compare_sha = NULL;
	if (!s)
		return true;
	if ((s->st.mode & S_IFMT) != (e->lst.mode & S_IFMT) || s->st.ino != e->lst.ino ||
	    s->st.dev != e->lst.dev || s->st.size != e->lst.size ||
	    s->st.mtime_ns != e->lst.mtime_ns || s->st.ctime_ns != e->lst.ctime_ns)
		return true;
	if (s->sha256 && S_ISREG(e->lst.mode)) {
		*compare_sha = s->sha256;
		return true;
	}
	return false;
}

/* Advances the snapshot cursor to e's path: the matching entry, or NULL. The walk and the
 * snapshot come in the same order (pre-order, names bytewise), so one pass suffices. */
static int snapshot_match(hv_snapshot *sn, const hv_snapshot_entry **cur, bool *at_end,
			  const hv_entry *e, const hv_snapshot_entry **match)
{
	*match = NULL;
	while (!*at_end) {
		if (!*cur) {
			int rc = hv_snapshot_next(sn, cur);
			if (rc == HV_DONE) {
				*at_end = true;
				break;
			}
			if (rc != HV_OK)
				return rc;
		}
		int cmp = hv_store_path_cmp((*cur)->path, (*cur)->path_len, e->path, e->path_len);
		if (cmp < 0) {
			*cur = NULL;
			continue;
		}
		if (cmp == 0)
			*match = *cur;
		break;
	}
	return HV_OK;
}

hv_status hv_collect(hv_store *st, const char *dir, const hv_collect_opts *opts,
		     hv_collection **out)
{
	*out = NULL;
	hv_collect_opts defaults;
	if (!opts) {
		hv_collect_opts_init(&defaults);
		opts = &defaults;
	}
	if (!st && (opts->since_snapshot > 0 || !opts->no_cache))
		return hv_error_set(HV_EUSAGE, "collect: a store is needed for --since and the cache");
	char *root = realpath(dir, NULL);
	if (!root) {
		int err = errno;
		return hv_error_errno(err == ENOENT || err == ENOTDIR ? HV_ENOTDIR : HV_EIO, dir, err);
	}
	struct collector k = {.st = st, .o = opts};
	k.c = calloc(1, sizeof(*k.c));
	if (!k.c) {
		free(root);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	k.c->root = root;
	hv_snapshot *sn = NULL;
	int rc = HV_OK;
	if (opts->since_snapshot > 0) {
		rc = hv_store_snapshot_open(st, opts->since_snapshot, &sn);
		if (rc != HV_OK) {
			hv_collection_free(k.c);
			return rc;
		}
		/* Against a snapshot of another directory, everything would look produced. */
		size_t sl;
		const char *sroot = hv_snapshot_root(sn, &sl);
		if (sl != strlen(root) || memcmp(sroot, root, sl) != 0) {
			rc = hv_error_set(HV_EUSAGE, "snapshot %lld was taken of %.*s, not of %s",
					  (long long)opts->since_snapshot, (int)sl, sroot, root);
			hv_snapshot_close(sn);
			hv_collection_free(k.c);
			return rc;
		}
	}
	rc = hv_magic_open(&k.magic, NULL, 0);
	if (rc == HV_OK)
		k.fingerprint = hv_magic_fingerprint(k.magic);
	if (rc == HV_OK)
		rc = open_walk(&k.w, root, opts, HV_SORT_NAME);
	if (rc != HV_OK) {
		hv_snapshot_close(sn);
		hv_magic_close(k.magic);
		hv_collection_free(k.c);
		return rc;
	}
	struct db_files dbf;
	db_files_init(&dbf, st);
	const hv_snapshot_entry *cur = NULL;
	bool at_end = false;
	const hv_entry *e;
	while ((rc = hv_walk_next(k.w, &e)) != HV_DONE) {
		if (rc == HV_WARN) {
			k.c->warnings++;
			warn(opts, hv_error_last());
			continue;
		}
		if (rc != HV_OK)
			break;
		if (e->type == HV_FT_DIR)
			continue; /* directories hold artifacts; they are not artifacts */
		if (!e->have_lstat) {
			rc = add_skipped(&k, e, "error", false, 0, "cannot be examined");
			if (rc != HV_OK)
				break;
			continue;
		}
		if (is_db_file(&dbf, &e->lst) || is_db_path(root, st, e))
			continue;
		const char *compare_sha = NULL;
		if (sn) {
			const hv_snapshot_entry *match;
			rc = snapshot_match(sn, &cur, &at_end, e, &match);
			if (rc != HV_OK)
				break;
			if (!produced(e, match, &compare_sha))
				continue;
		}
		if (e->type == HV_FT_SYMLINK)
			rc = add_skipped(&k, e, "symlink", true, e->lst.size, NULL);
		else if (e->type != HV_FT_FILE)
			rc = add_skipped(&k, e, "not_regular", true, e->lst.size, NULL);
		else if (e->lst.size > opts->max_file_bytes)
			rc = add_skipped(&k, e, "too_large", true, e->lst.size, NULL);
		else
			rc = collect_file(&k, e, compare_sha);
		if (rc == NOT_PRODUCED)
			rc = HV_OK;
		if (rc != HV_OK)
			break;
		if (opts->on_progress)
			opts->on_progress(opts->ctx, hv_walk_count(k.w), k.c->n_files, k.total_bytes);
	}
	if (rc == HV_DONE)
		rc = HV_OK;
	hv_walk_close(k.w);
	hv_snapshot_close(sn);
	hv_magic_close(k.magic);
	if (st && !opts->no_cache) {
		int frc = hv_store_flush(st);
		if (rc == HV_OK && frc != HV_OK)
			rc = frc;
	}
	if (rc != HV_OK) {
		hv_collection_free(k.c);
		return rc;
	}
	*out = k.c;
	return HV_OK;
}

char *hv_collection_skipped_json(const hv_collection *c, int kase)
{
	hv_json *j;
	if (hv_json_new_buffer(&j, (hv_case)kase) != HV_OK)
		return NULL;
	hv_json_array_begin(j);
	for (size_t i = 0; i < c->n_skipped; i++) {
		const hv_skipped_file *s = &c->skipped[i];
		hv_json_object_begin(j);
		hv_json_key(j, "path");
		hv_json_string(j, s->path, s->path_len);
		hv_json_key(j, "reason");
		hv_json_cstring(j, s->reason);
		if (s->has_size) {
			hv_json_key(j, "size");
			hv_json_uint(j, s->size);
		} else {
			hv_json_key_null(j, "size");
		}
		if (s->error) {
			hv_json_key(j, "error");
			hv_json_string(j, s->error, strlen(s->error));
		}
		hv_json_object_end(j);
	}
	hv_json_array_end(j);
	char *out = hv_json_buffer_strdup(j);
	hv_json_free(j);
	return out;
}

hv_status hv_collection_record(hv_store *st, const hv_collection *c, const hv_run_start *start,
			       const hv_run_end *end, int64_t *run_id)
{
	int rc = HV_OK;
	if (*run_id <= 0) {
		hv_run_start s = {0};
		if (start)
			s = *start;
		if (!s.dir)
			s.dir = c->root;
		rc = hv_store_run_begin(st, &s, run_id);
		if (rc != HV_OK)
			return rc;
	}
	hv_artifact_in *arts = calloc(c->n_files ? c->n_files : 1, sizeof(*arts));
	char *skipped = hv_collection_skipped_json(c, HV_CASE_SNAKE);
	if (!arts || !skipped) {
		free(arts);
		free(skipped);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	size_t n = 0;
	for (size_t i = 0; i < c->n_files; i++) {
		const hv_output_file *f = &c->files[i];
		hv_artifact_in *a = &arts[n++];
		a->path = f->path;
		a->path_len = f->path_len;
		a->name = f->name;
		a->name_len = f->name_len;
		a->mime_type = f->mime_type;
		a->size = f->size;
		a->sha256 = f->sha256;
		a->content = f->content;
		a->content_len = f->content_len;
	}
	hv_run_end e = {0};
	if (end)
		e = *end;
	else
		e.duration_ms = -1;
	if (!e.skipped_json)
		e.skipped_json = skipped;
	rc = hv_store_run_finish(st, *run_id, &e, arts, n);
	free(arts);
	free(skipped);
	return rc;
}

void hv_collection_free(hv_collection *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_files; i++) {
		free(c->files[i].path);
		free(c->files[i].mime_type);
		free(c->files[i].content);
	}
	for (size_t i = 0; i < c->n_skipped; i++) {
		free(c->skipped[i].path);
		free(c->skipped[i].error);
	}
	free(c->files);
	free(c->skipped);
	free(c->root);
	free(c);
}
