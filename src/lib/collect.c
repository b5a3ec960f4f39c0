/* Snapshots and the artifact collector, on top of the walker, the MIME module and the store.
 *
 * One read of each file serves its SHA-256, its MIME detection (libmagic on the bytes read)
 * and its content. A file is opened relative to its directory's descriptor through the
 * walker (never by path), with O_NOFOLLOW|O_NONBLOCK, and checked with fstat: a file swapped
 * for a FIFO or a symlink after the walk saw it is skipped, never read. The reading, digesting
 * and detecting run on worker threads a window ahead of the walk (see "The read-ahead
 * pipeline"), with the same result as one thread. */
#include "harvest/collect.h"
#include "harvest/mime.h"
#include "harvest/walk.h"
#include "harvest/sys/store.h"
#include "changes.h"
#include "collect_internal.h"
#include "internal.h"
#include "mime_internal.h"
#include "test_hook.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

const hv_collect_opts *hvc_opts_or_defaults(const hv_collect_opts *opts,
					    hv_collect_opts *defaults)
{
	if (opts)
		return opts;
	hv_collect_opts_init(defaults);
	return defaults;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The key: 'h' or '-' (include_hidden), 'x' or '-' (xdev), then each distinct exclude in
 * bytewise order, each followed by a NUL. */
hv_status hvc_filters_key(const hv_collect_opts *o, hv_buf *key)
{
	hv_buf_truncate(key, 0);
	const char **ex = NULL;
	if (o->n_excludes) {
		ex = malloc(o->n_excludes * sizeof(*ex));
		if (!ex)
			return hv_error_set(HV_ENOMEM, "out of memory");
		memcpy(ex, o->excludes, o->n_excludes * sizeof(*ex));
		qsort(ex, o->n_excludes, sizeof(*ex), str_cmp);
	}
	int rc = hv_buf_append_char(key, o->include_hidden ? 'h' : '-');
	if (rc == HV_OK)
		rc = hv_buf_append_char(key, o->xdev ? 'x' : '-');
	for (size_t i = 0; rc == HV_OK && i < o->n_excludes; i++)
		if (i == 0 || strcmp(ex[i], ex[i - 1]) != 0)
			rc = hv_buf_append(key, ex[i], strlen(ex[i]) + 1);
	free(ex);
	return rc;
}

/* The options a key stands for, as they would be given: "--include-hidden --exclude '*.log'",
 * or "none of --include-hidden, --exclude, --xdev" (a message's words: a quote in a glob is
 * not escaped). */
static hv_status filters_describe(const char *key, size_t len, hv_buf *out)
{
	int rc = HV_OK;
	if (len >= 1 && key[0] == 'h')
		rc = hv_buf_append_str(out, " --include-hidden");
	if (rc == HV_OK && len >= 2 && key[1] == 'x')
		rc = hv_buf_append_str(out, " --xdev");
	for (size_t at = 2; rc == HV_OK && at < len;) {
		const char *g = key + at;
		size_t n = strnlen(g, len - at);
		rc = hv_buf_printf(out, " --exclude '%.*s'", (int)n, g);
		at += n + 1;
	}
	if (rc == HV_OK && out->len == 0)
		rc = hv_buf_append_str(out, " none of --include-hidden, --exclude, --xdev");
	return rc;
}

hv_status hvc_filters_check(const hv_collect_opts *o, int64_t id, const char *key, size_t len)
{
	if (!key)
		return HV_OK;
	hv_buf mine = {0}, was = {0}, now = {0};
	int rc = hvc_filters_key(o, &mine);
	if (rc == HV_OK && (mine.len != len || memcmp(mine.data, key, len) != 0)) {
		rc = filters_describe(key, len, &was);
		if (rc == HV_OK)
			rc = filters_describe(mine.data, mine.len, &now);
		char name[32] = "the snapshot";
		if (id > 0)
			snprintf(name, sizeof(name), "snapshot %lld", (long long)id);
		if (rc == HV_OK)
			rc = hv_error_set(HV_EUSAGE, "%s was taken with%s; this collect has%s: a collect "
					  "compared with a snapshot needs the same ones", name, was.data, now.data);
	}
	hv_buf_free(&mine);
	hv_buf_free(&was);
	hv_buf_free(&now);
	return rc;
}

hv_status hvc_abs_root(const char *dir, char **root)
{
	*root = realpath(dir, NULL);
	if (*root)
		return HV_OK;
	int err = errno;
	return hv_error_errno(err == ENOENT || err == ENOTDIR ? HV_ENOTDIR : HV_EIO, dir, err);
}

/* The walk of a collect or a snapshot: default excludes unless include_hidden. */
static hv_status walk_open(hv_walk **w, const char *dir, const hv_collect_opts *o,
			   hv_walk_sort sort, bool names)
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
	wo.xdev = o->xdev;
	int rc = names ? hv__walk_open_names(w, dir, &wo) : hv_walk_open(w, dir, &wo);
	free(excl); /* the walker keeps its own copies */
	return rc;
}

hv_status hv_collect_walk_open(hv_walk **w, const char *dir, const hv_collect_opts *o,
			       hv_walk_sort sort)
{
	return walk_open(w, dir, o, sort, false);
}

hv_status hv_collect_walk_open_names(hv_walk **w, const char *dir, const hv_collect_opts *o)
{
	return walk_open(w, dir, o, HV_SORT_NAME, true);
}

/* Below this limit, the free descriptors are counted; above it, there are plenty. */
#define FD_COUNT_MAX 4096

/* How many descriptors the process can still open; *limit gets its soft limit (INT_MAX:
 * too many to count). Descriptors at or above the limit (inherited) take no slot below it. */
int hv__free_fds(int *limit)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > FD_COUNT_MAX) {
		*limit = INT_MAX;
		return INT_MAX;
	}
	int n = (int)rl.rlim_cur, used = 0;
	*limit = n;
	/* /proc lists the open descriptors in a call or two; without /proc (a bare sandbox),
	 * each slot below the limit is asked about. */
	DIR *d = opendir("/proc/self/fd");
	if (d) {
		int own = dirfd(d);
		const struct dirent *de;
		/* cppcheck-suppress readdirCalled ; the stream is this call's own, no other thread
		 * uses it */
		while ((de = readdir(d)) != NULL) {
			char *end;
			long fd = strtol(de->d_name, &end, 10);
			if (end != de->d_name && !*end && fd != own && fd < n)
				used++;
		}
		closedir(d);
		return n - used;
	}
	for (int fd = 0; fd < n; fd++)
		used += fcntl(fd, F_GETFD) != -1;
	return n - used;
}

/* HV_OK when the walk has the descriptors it needs below dir, and extra more; *avail gets
 * the free count. */
hv_status hvc_check_fds(const char *dir, int extra, int *avail)
{
	int limit;
	*avail = hv__free_fds(&limit);
	if (*avail >= HVC_WALK_FDS + extra)
		return HV_OK;
	return hv_error_set(HV_EIO,
			    "%s: too few file descriptors: %d free of the limit of %d (ulimit -n);"
			    " harvest needs %d free",
			    dir, *avail < 0 ? 0 : *avail, limit, HVC_WALK_FDS + extra);
}

hv_status hv_collect_check_fds(const char *dir, int extra)
{
	HV_NEED(dir);
	int avail;
	return hvc_check_fds(dir, extra > 0 ? extra : 0, &avail);
}

void hvc_warn(const hv_collect_opts *o, const char *msg)
{
	if (o->on_warning)
		hv__call_message_fn(o->on_warning, o->ctx, msg);
}

/* ---- collect ---- */

void hvc_db_files_init(struct hvc_db_files *d, const hv_store *st)
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

bool hvc_is_db_file(const struct hvc_db_files *d, const hv_stat *s)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->ids[i].dev == s->dev && d->ids[i].ino == s->ino)
			return true;
	return false;
}

/* A database file created after the collect started (a -wal appearing) is caught by its
 * name next to the database. */
bool hvc_is_db_path(const char *root, const hv_store *st, const hv_entry *e)
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
	size_t files_cap, skipped_cap, deleted_cap;
	uint64_t total_bytes;
	int magic_status; /* libmagic is loaded when a file first needs it: 1 loaded, <0 failed */
	int magic_fd;     /* held for libmagic until then (it needs one to load), or -1 */
	int magic_fd2;    /* and a second: an isolated detector's socket pair takes two */
	bool spool_tried; /* spool_content: the temporary file was made (or could not be) */
	bool spool_fail_warned; /* the spool's failure (hvc_spool_failed) was warned of */
	/* Without a walk (a change set): the current entry's directory and name, and count. */
	int dir_fd;
	const char *name;
	uint64_t seen;
	/* The cache lookups' read transaction (cache_read_hold), and how many it has served. */
	bool reading;
	unsigned held;
	/* A lookup failed (a page of the cache damaged): the rest is collected without the cache,
	 * which is neither read nor written again. */
	bool cache_lost;
};

/* The cache lookups of a collect share one read transaction, up to READ_HOLD_MAX of them, so
 * SQLite takes and drops its shared lock once for them all rather than once each (two fcntl
 * calls a file: 20,000 in a warm 10,000-file collect). It ends before anything is written to
 * the store (cache_read_release): a cached answer put in between must start its own write. A
 * bound keeps a long collect from holding one snapshot of the database for all its length,
 * which would keep other harvests' checkpoints from resetting the log. */
enum { READ_HOLD_MAX = 1024 };

static void cache_read_release(struct collector *k)
{
	if (k->reading)
		hvm_read_end(k->st, true);
	k->reading = false;
	k->held = 0;
}

static void cache_read_hold(struct collector *k)
{
	if (k->reading && k->held < READ_HOLD_MAX) {
		k->held++;
		return;
	}
	cache_read_release(k);
	hvm_read_begin(k->st, &k->reading);
	k->held = 1;
}

/* After a failed cache lookup (not out of memory): warns once, and the collect goes on
 * without the cache, which only saves time: each file is typed by libmagic, and nothing is
 * written to a database that cannot be read. */
static void cache_lose(struct collector *k)
{
	char why[512];
	snprintf(why, sizeof(why), "%s; collecting without the MIME cache", hv_error_last());
	cache_read_release(k);
	k->cache_lost = true;
	k->c->warnings++;
	hvc_warn(k->o, why);
}

/* Opens the current entry relative to its directory, never by path. */
static int entry_openat(const struct collector *k, int flags)
{
	if (k->w)
		return hv_walk_openat(k->w, flags);
	return openat(k->dir_fd, k->name, flags | O_NOFOLLOW | O_CLOEXEC);
}

static hv_status add_skipped(struct collector *k, const hv_entry *e, const char *reason,
			     bool has_size, uint64_t size, const char *error)
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

static hv_status add_file(struct collector *k, const hv_entry *e, const char *mime, uint64_t size,
			  const char *sha, unsigned char *content, size_t content_len,
			  const char *change)
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
	f->change = change;
	c->n_files++;
	k->total_bytes += size;
	return HV_OK;
}

/* spool_content: the collection's temporary file, which the window reads the files into.
 * Without one (none can be made: warned about) the contents stay in memory. */
static void spool_start(struct collector *k, struct hvc_pipe *p)
{
	if (!k->o->spool_content || k->o->no_content || k->spool_tried)
		return;
	/* Made for the first file to read (a run that produced nothing makes none), before that
	 * job is in the window: no worker reads p->spool before it is set, none after it changes
	 * (it does not). */
	k->spool_tried = true;
	if (hvc_spool_open(&k->c->spool) != HV_OK)
		hvc_warn(k->o, hv_error_last());
	p->spool = k->c->spool;
}

/* Warns of "ROOT/BELOW" then SUFFIX, ROOT as given (the root "/" adds no second slash;
 * BELOW empty names ROOT itself), and counts the warning. */
static hv_status warn_below_root(struct collector *k, const char *root, const char *below,
				 const char *suffix)
{
	const char *r = strcmp(root, "/") ? root : "";
	char *msg = NULL;
	if (asprintf(&msg, "%s%s%s%s", r, *below || !*r ? "/" : "", below, suffix) < 0)
		return hv_error_set(HV_ENOMEM, "out of memory");
	k->c->warnings++;
	hvc_warn(k->o, msg);
	free(msg);
	return HV_OK;
}

/* Says once that the spool failed (full): what comes after is kept in memory. As when no
 * spool can be made, a notice, not a warning of the collect: nothing is lost. */
static hv_status warn_spool_failed(struct collector *k)
{
	int err = hvc_spool_failed(k->c->spool);
	if (!err || k->spool_fail_warned)
		return HV_OK;
	k->spool_fail_warned = true;
	char *msg = NULL;
	if (asprintf(&msg, "%s: the temporary file of the contents: %s (the rest kept in memory)",
		     hvc_spool_dir(k->c->spool), strerror(err)) < 0)
		return hv_error_set(HV_ENOMEM, "out of memory");
	hvc_warn(k->o, msg);
	free(msg);
	return HV_OK;
}

/* Finishes the head job, in walk order: the limits, the cache, the collection. Returns
 * HV_OK or a fatal status. */
static hv_status job_finish(struct collector *k, struct hvc_job *j)
{
	const hv_collect_opts *o = k->o;
	if (k->c->spool && !k->spool_fail_warned) {
		hv_status rc = warn_spool_failed(k);
		if (rc != HV_OK)
			return rc;
	}
	hv_entry e = {0};
	e.path = j->path;
	e.path_len = j->path_len;
	e.name = j->path + (j->path_len - j->name_len);
	e.name_len = j->name_len;
	if (j->early_reason)
		return add_skipped(k, &e, j->early_reason, j->has_size, j->size, j->error);
	/* (A racy file is first read: it may turn out not to be produced at all.) */
	if (!j->racy &&
	    (k->c->n_files >= o->max_files || k->total_bytes + j->lst.size > o->max_total_bytes))
		return add_skipped(k, &e, "limit", true, j->lst.size, NULL);
	const char *type;
	if (j->cached_hit) {
		hv_mime_refine(NULL, e.name, j->raw, &type);
		return add_file(k, &e, type, j->lst.size, j->cached_sha, NULL, 0, j->change);
	}
	if (j->late_reason)
		return add_skipped(k, &e, j->late_reason, true, j->size, j->error);
	switch (j->outcome) {
	case HVC_READ_TOO_LARGE:
		return add_skipped(k, &e, "too_large", true, j->fs.size, NULL);
	case HVC_READ_ERROR:
		return add_skipped(k, &e, "error", true, j->fs.size, j->error ? j->error : "");
	case HVC_READ_NOMEM:
		return hv_error_set(HV_ENOMEM, "out of memory");
	case HVC_READ_SAME:
		return HV_OK; /* not produced */
	default:
		break;
	}
	if (k->c->n_files >= o->max_files || k->total_bytes + j->len > o->max_total_bytes)
		return add_skipped(k, &e, "limit", true, j->len, NULL);
	if (!j->raw)
		return add_skipped(k, &e, "error", true, j->len, j->error);
	/* A new answer is cached; one cached without the digest (by `harvest mime`) gets it now,
	 * so a later --no-content collect need not open the file. */
	if ((j->detected || !j->cached_sha[0]) && !j->warning && !j->untyped && !o->no_cache &&
	    k->st && !k->cache_lost) {
		cache_read_release(k);
		hv_store_mime_put_sha(k->st, &j->fs, k->fingerprint, j->raw, j->sha);
	}
	if (j->warning) {
		/* Named below the root, as the collect's other warnings are (the CLI shows DIR as
		 * given there): "DIR/crash.txt: the libmagic worker was killed ...". */
		hv_status rc = warn_below_root(k, k->c->root, j->warning, "");
		if (rc != HV_OK)
			return rc;
	}
	/* The worker's fallback (it died or hung on the file) is octet-stream as it stands: the
	 * name cannot vouch for bytes libmagic never finished, as harvest mime answers it too. */
	if (j->warning || j->untyped)
		type = j->raw;
	else
		hv_mime_refine(NULL, e.name, j->raw, &type);
	unsigned char *content = o->no_content || j->spooled ? NULL : j->buf;
	int rc = add_file(k, &e, type, j->len, j->sha, content, content ? j->len : 0, j->change);
	if (rc == HV_OK && content)
		j->buf = NULL; /* the collection owns it now */
	if (rc == HV_OK && j->spooled && !o->no_content && k->c->files) {
		hv_output_file *f = &k->c->files[k->c->n_files - 1];
		f->spooled = true;
		f->spool_off = j->spool_off;
		f->content_len = j->len;
	}
	return rc;
}

/* Finishes the jobs at the head that are done (wait: at least one, waiting for it). */
static hv_status pipe_drain(struct collector *k, struct hvc_pipe *p, bool wait)
{
	struct hvc_job *j;
	while ((j = hvc_pipe_head(p, k->magic, wait)) != NULL) {
		int rc = job_finish(k, j);
		if (rc == HV_OK && k->o->on_progress)
			k->o->on_progress(k->o->ctx, j->seen, k->c->n_files, k->total_bytes);
		pthread_mutex_lock(&p->mu);
		if (j->state == HVC_JOB_DONE)
			p->window_bytes -= j->fs.size;
		hvc_job_clear(j);
		p->head++;
		if (p->next_claim < p->head)
			p->next_claim = p->head; /* never look at a cleared slot */
		pthread_mutex_unlock(&p->mu);
		if (rc != HV_OK)
			return rc;
		wait = false;
	}
	return HV_OK;
}

/* The part of a file's work that needs the walker and the store: with --no-content, a cache
 * hit that knows the digest answers without opening the file at all (the walk's lstat is the
 * key); else the file is opened relative to its directory, checked with fstat (a file swapped
 * after the walk saw it is never read) and its cached answer looked up. *queued: it is to be
 * read. */
static hv_status open_job(struct collector *k, const hv_entry *e, struct hvc_job *j, bool *queued)
{
	const hv_collect_opts *o = k->o;
	if (k->magic_status == 0) {
		/* Loaded for the first file that may need it: a run that changed nothing does not
		 * pay for libmagic. The descriptor kept for it since the start is given back. */
		if (k->magic_fd >= 0)
			close(k->magic_fd);
		if (k->magic_fd2 >= 0)
			close(k->magic_fd2);
		k->magic_fd = k->magic_fd2 = -1;
		hv_status mrc = hv_magic_open(&k->magic, NULL, 0);
		k->magic_status = mrc == HV_OK ? 1 : -1;
		if (mrc == HV_ENOMEM)
			return mrc;
		if (mrc != HV_OK) {
			/* No detector at all (libmagic or libseccomp missing, no worker process
			 * allowed: ulimit -u): the files are still collected, contents and digests
			 * whole, typed octet-stream, as for a worker that died on one, and said
			 * once. A produced file is never dropped because its detector failed. */
			k->c->warnings++;
			char *msg = NULL;
			if (asprintf(&msg, "%s: every file is typed application/octet-stream",
				     hv_error_last()) < 0)
				return hv_error_set(HV_ENOMEM, "out of memory");
			hvc_warn(o, msg);
			free(msg);
			hv_error_clear();
		} else {
			k->fingerprint = hv_magic_fingerprint(k->magic);
		}
	}
	bool cache = !o->no_cache && k->st && !k->cache_lost && k->magic_status > 0;
	if (o->no_content && !j->racy && cache) {
		cache_read_hold(k);
		int rc = hv_store_mime_lookup_sha(k->st, &e->lst, k->fingerprint, &j->raw,
						  j->cached_sha);
		if (rc == HV_ENOMEM)
			return rc;
		if (rc != HV_OK) {
			cache_lose(k);
			cache = false;
		} else if (j->raw && j->cached_sha[0]) {
			j->cached_hit = true;
			return HV_OK;
		}
		free(j->raw);
		j->raw = NULL;
		j->cached_sha[0] = '\0';
	}
	hv__test_hook_call(HV__HOOK_COLLECT_BEFORE_OPEN, e->path);
	j->fd = entry_openat(k, O_RDONLY | O_NONBLOCK);
	if (j->fd < 0) {
		int err = errno;
		if (err == ELOOP) {
			j->late_reason = "symlink";
		} else if (err == ENXIO || err == ENODEV || err == EOPNOTSUPP) {
			/* swapped for a socket or a device after the walk saw it */
			j->late_reason = "not_regular";
		} else {
			j->late_reason = "error";
			/* allocated: a path deeper than PATH_MAX keeps its reason */
			if (asprintf(&j->error, "%s: %s", e->path, strerror(err)) < 0) {
				j->error = NULL;
				return hv_error_set(HV_ENOMEM, "out of memory");
			}
		}
		return HV_OK;
	}
	struct stat fst;
	if (fstat(j->fd, &fst) != 0 || !S_ISREG(fst.st_mode)) {
		j->late_reason = "not_regular"; /* never read a FIFO or a device */
		close(j->fd); /* only a queued job holds a descriptor: see hvc_fd_budget() */
		j->fd = -1;
		return HV_OK;
	}
	HV_STAT_FROM(&fst, &j->fs);
	if (j->fs.size > o->max_file_bytes) {
		j->late_reason = "too_large";
		j->size = j->fs.size;
		close(j->fd);
		j->fd = -1;
		return HV_OK;
	}
	if (cache) {
		cache_read_hold(k);
		int rc = hv_store_mime_lookup_sha(k->st, &j->fs, k->fingerprint, &j->raw,
						  j->cached_sha);
		if (rc == HV_ENOMEM)
			return rc;
		if (rc != HV_OK) {
			cache_lose(k); /* this file too is typed by libmagic */
			free(j->raw);
			j->raw = NULL;
			j->cached_sha[0] = '\0';
		}
	}
	*queued = true;
	return HV_OK;
}

/* Puts the walker's current entry e into the window: skipped for early_reason (unless NULL),
 * else opened and queued for reading (or decided at once when it cannot be). compare_sha: the
 * snapshot's digest of this racy file, or NULL. */
static hv_status collect_entry(struct collector *k, struct hvc_pipe *p, const hv_entry *e,
			       const char *early_reason, const char *error, const char *compare_sha,
			       const char *change)
{
	const hv_collect_opts *o = k->o;
	uint64_t size = early_reason ? 0 : e->lst.size;
	while (hvc_pipe_full(p, size, !early_reason)) {
		int rc = pipe_drain(k, p, true);
		if (rc != HV_OK)
			return rc;
	}
	struct hvc_job *j = hvc_pipe_slot(p);
	j->fd = -1;
	j->path = malloc(e->path_len + 1);
	if (!j->path)
		return hv_error_set(HV_ENOMEM, "out of memory");
	memcpy(j->path, e->path, e->path_len + 1);
	j->path_len = e->path_len;
	j->name_len = e->name_len;
	j->lst = e->lst;
	j->seen = k->w ? hv_walk_count(k->w) : k->seen;
	j->has_size = e->have_lstat;
	j->size = e->have_lstat ? e->lst.size : 0;
	j->change = change;
	bool queued = false;
	int rc = HV_OK;
	if (early_reason) {
		j->early_reason = early_reason;
		if (error && !(j->error = strdup(error)))
			rc = hv_error_set(HV_ENOMEM, "out of memory");
	} else if (!compare_sha &&
		   (k->c->n_files >= o->max_files ||
		    k->total_bytes + e->lst.size > o->max_total_bytes)) {
		/* Over a limit already (the counts only grow): the head check will say so. */
	} else {
		if (compare_sha) {
			j->racy = true;
			memcpy(j->compare_sha, compare_sha, 65);
		}
		rc = open_job(k, e, j, &queued);
		if (rc == HV_OK && queued)
			spool_start(k, p);
	}
	if (rc != HV_OK) {
		hvc_job_clear(j);
		return rc;
	}
	hvc_pipe_push(p, queued);
	/* Back to the walk with no more descriptors held than the budget (which may be none):
	 * the walker may need the others, and only this thread gives them back. */
	while (hvc_pipe_open_fds(p) > p->max_fds) {
		rc = pipe_drain(k, p, true);
		if (rc != HV_OK)
			return rc;
	}
	return pipe_drain(k, p, false);
}

/* What a collect compares against: a snapshot of the store or one in memory, read in walk
 * order by a cursor. */
struct since {
	hv_snapshot *sn;
	const hv_mem_snapshot *m;
	size_t i;                   /* m's next entry */
	hv_snapshot_entry tmp;      /* m's current entry */
	hv_buf path;                /* ... its path, rebuilt from the last one's */
	size_t *starts;             /* where a name at depth d starts in path: starts[d - 1] */
	size_t starts_cap;
	bool named;                 /* ... is named: its type and inode number only */
	struct hvc_since_clock clock; /* what a named entry's ctime is compared with */
	const hv_snapshot_entry *cur;
	bool at_end;
	const char *root;
	const hv_store *st;
	/* The directories the walk could not read (or read only in part), in walk order: what
	 * the snapshot held below them is not known gone. unread[first_unread..] are the ones
	 * the cursor has not passed yet. */
	char **unread;
	size_t n_unread, unread_cap, first_unread;
	/* The directories the snapshot could not read (paths each ended by a NUL), and which of
	 * them a collect has warned of: a file below one has no before-state, so it is called
	 * created whether it is new or not, and the collect says so once per directory. */
	const char *before_unread;
	size_t before_unread_len;
	bool *before_warned;
};

/* A file called created below a directory the snapshot could not read: warned of once per
 * directory (a warning: exit 1, as for a directory this collect cannot read). */
static hv_status warn_unread_before(struct collector *k, struct since *s, const hv_entry *e)
{
	size_t i = 0;
	for (const char *d = s->before_unread; d < s->before_unread + s->before_unread_len;
	     d += strlen(d) + 1, i++) {
		size_t n = strlen(d);
		if (!(n == 0 || (e->path_len > n && e->path[n] == '/' && !memcmp(e->path, d, n))))
			continue;
		if (s->before_warned[i])
			return HV_OK;
		s->before_warned[i] = true;
		return warn_below_root(k, s->root, d,
				       ": not read when the snapshot was taken: the files below it are "
				       "called created, new or not");
	}
	return HV_OK;
}

/* Notes the directory the walk just warned it could not read, if that was the warning. */
static hv_status note_unread(struct since *s, const hv_walk *w)
{
	size_t len;
	const char *dir = hv__walk_unread_dir(w, &len);
	if (!dir)
		return HV_OK;
	if (s->n_unread == s->unread_cap) {
		size_t cap = s->unread_cap ? s->unread_cap * 2 : 8;
		char **u = realloc(s->unread, cap * sizeof(*u));
		if (!u)
			return hv_error_set(HV_ENOMEM, "out of memory");
		s->unread = u;
		s->unread_cap = cap;
	}
	char *copy = strndup(dir, len);
	if (!copy)
		return hv_error_set(HV_ENOMEM, "out of memory");
	s->unread[s->n_unread++] = copy;
	return HV_OK;
}

/* Whether path is below directory dir ("" is the root: everything is). */
static bool below(const char *path, size_t len, const char *dir)
{
	size_t n = strlen(dir);
	return n == 0 || (len > n && path[n] == '/' && memcmp(path, dir, n) == 0);
}

/* Whether the snapshot's entry x lies below a directory the walk could not read. The cursor
 * only moves forward, in the walk's order, where a directory's subtree follows it at once:
 * the directories it has passed are dropped from the front. */
static bool below_unread(struct since *s, const hv_snapshot_entry *x)
{
	while (s->first_unread < s->n_unread) {
		const char *dir = s->unread[s->first_unread];
		if (below(x->path, x->path_len, dir))
			return true;
		if (hv_store_path_cmp(x->path, x->path_len, dir, strlen(dir)) < 0)
			return false; /* before it: nor below any later one */
		s->first_unread++;
	}
	return false;
}

static void since_free(struct since *s)
{
	hv_buf_free(&s->path);
	free(s->starts);
	free(s->before_warned);
	for (size_t i = 0; i < s->n_unread; i++)
		free(s->unread[i]);
	free(s->unread);
}

/* Whether e differs from the snapshot's entry s (NULL: absent), the cursor's current one.
 * *compare_sha is set when only the content can tell (a racy regular file whose metadata
 * matches). */
static bool produced(struct since *c, const hv_entry *e, const hv_snapshot_entry *s,
		     const char **compare_sha)
{
	*compare_sha = NULL;
	if (!s)
		return true;
	/* Another file at the name (a directory swapped for one holding the same names). */
	if ((s->st.mode & S_IFMT) != (e->lst.mode & S_IFMT) || s->st.ino != e->lst.ino)
		return true;
	if (c->named)
		return hvc_mem_changed(&c->clock, e->lst.ctime_ns);
	if (s->st.dev != e->lst.dev || s->st.size != e->lst.size ||
	    s->st.mtime_ns != e->lst.mtime_ns || s->st.ctime_ns != e->lst.ctime_ns)
		return true;
	if (s->sha256 && S_ISREG(e->lst.mode)) {
		*compare_sha = s->sha256;
		return true;
	}
	return false;
}

static hv_status since_next(struct since *s, const hv_snapshot_entry **out)
{
	if (s->sn)
		return hv_snapshot_next(s->sn, out);
	if (s->i >= s->m->n)
		return HV_DONE;
	const struct hvc_mem_entry *me = &s->m->e[s->i++];
	/* Its directory's path is the start of the last one's (pre-order, checked as the snapshot
	 * was taken): keep it, put the name after it, and note where a child's name goes. */
	size_t d = me->depth;
	if (d >= s->starts_cap) {
		size_t cap = s->starts_cap ? s->starts_cap * 2 : 64;
		while (cap <= d)
			cap *= 2;
		size_t *ns = realloc(s->starts, cap * sizeof(*ns));
		if (!ns) {
			hv_error_set(HV_ENOMEM, "out of memory");
			return HV_ENOMEM;
		}
		s->starts = ns;
		s->starts_cap = cap;
	}
	if (d == 1)
		s->starts[0] = 0;
	size_t at = s->starts[d - 1];
	hv_buf_truncate(&s->path, at);
	if ((at > 0 && hv_buf_append_char(&s->path, '/') != HV_OK) ||
	    hv_buf_append(&s->path, s->m->names.data + me->off, me->len) != HV_OK ||
	    hv_buf_append_char(&s->path, '\0') != HV_OK)
		return HV_ENOMEM;
	s->path.len--; /* the NUL ends the path, and is overwritten by a child's '/' */
	s->starts[d] = s->path.len;
	s->tmp.path = s->path.data;
	s->tmp.path_len = s->path.len;
	s->tmp.st = me->st;
	s->tmp.sha256 = me->sha ? s->m->shas[me->sha - 1] : NULL;
	s->named = me->named;
	*out = &s->tmp;
	return HV_OK;
}

/* The snapshot's entry x is not a regular file any more: deleted, if it was one (the
 * database's own files are never artifacts, so never deleted ones either; known by name here,
 * as the inode of a file deleted since may be the database's now). */
static hv_status note_gone(struct collector *k, struct since *s, const hv_snapshot_entry *x)
{
	if (!S_ISREG(x->st.mode) || below_unread(s, x))
		return HV_OK;
	hv_entry fake = {.path = x->path, .path_len = x->path_len};
	if (hvc_is_db_path(s->root, s->st, &fake))
		return HV_OK;
	hv_collection *c = k->c;
	if (c->n_deleted == k->deleted_cap) {
		size_t cap = k->deleted_cap ? k->deleted_cap * 2 : 16;
		hv_deleted_file *d = realloc(c->deleted, cap * sizeof(*d));
		if (!d)
			return hv_error_set(HV_ENOMEM, "out of memory");
		c->deleted = d;
		k->deleted_cap = cap;
	}
	hv_deleted_file *d = &c->deleted[c->n_deleted];
	d->path = malloc(x->path_len + 1);
	if (!d->path)
		return hv_error_set(HV_ENOMEM, "out of memory");
	memcpy(d->path, x->path, x->path_len);
	d->path[x->path_len] = '\0';
	d->path_len = x->path_len;
	c->n_deleted++;
	return HV_OK;
}

/* Advances the cursor to e's path (NULL e: to the end): the matching entry in *match, or
 * NULL. Every entry passed over is one the walk did not see: gone. The walk and the snapshot
 * come in the same order (pre-order, names bytewise), so one pass suffices. */
static hv_status since_match(struct collector *k, struct since *s, const hv_entry *e,
			     const hv_snapshot_entry **match)
{
	*match = NULL;
	while (!s->at_end) {
		if (!s->cur) {
			int rc = since_next(s, &s->cur);
			if (rc == HV_DONE) {
				s->at_end = true;
				break;
			}
			if (rc != HV_OK)
				return rc;
		}
		int cmp = e ? hv_store_path_cmp(s->cur->path, s->cur->path_len, e->path, e->path_len)
			    : -1;
		if (cmp < 0) {
			int rc = note_gone(k, s, s->cur);
			s->cur = NULL;
			if (rc != HV_OK)
				return rc;
			continue;
		}
		if (cmp == 0) {
			/* Consumed: valid until the next since_next(), after the caller is done. */
			*match = s->cur;
			s->cur = NULL;
		}
		break;
	}
	return HV_OK;
}

/* libmagic is loaded at the first file that needs it, on whichever of this collect's threads
 * reaches it; its isolated workers come from a spawner that must be forked while the process
 * has no other thread (a fork copies the locks other threads hold, the allocator's among
 * them, and the workers forked from that copy would wait on them forever). So the spawner is
 * started before this collect starts any thread: once per process, nothing when it runs or
 * isolation is off. */
static void before_threads(void)
{
	if (hvm_isolation())
		hvm_spawner_prepare();
}

static hv_status collect_impl(hv_store *st, const char *dir, const hv_collect_opts *opts,
			      hv_snapshot *sn, const hv_mem_snapshot *m, char *root,
			      hv_collection **out)
{
	struct collector k = {.st = st, .o = opts, .magic_fd = -1, .magic_fd2 = -1};
	k.c = calloc(1, sizeof(*k.c));
	if (!k.c) {
		hv_snapshot_close(sn);
		free(root);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	k.c->root = root;
	int avail = 0;
	/* Two more for libmagic's detector (an isolated one takes a socket pair). */
	int rc = hvc_check_fds(dir, 2, &avail);
	/* Counted before libmagic's descriptor is put aside: it needs one for a moment when it
	 * loads, which the walk must not have taken by then. */
	if (rc == HV_OK && (k.magic_fd = open("/", O_PATH | O_CLOEXEC)) < 0)
		rc = hv_error_errno(HV_EIO, "/", errno);
	if (rc == HV_OK && (k.magic_fd2 = open("/", O_PATH | O_CLOEXEC)) < 0)
		rc = hv_error_errno(HV_EIO, "/", errno);
	/* The workers' spawner is forked now, before the walk's threads exist (see
	 * before_threads). */
	if (rc == HV_OK)
		before_threads();
	if (rc == HV_OK)
		rc = hv_collect_walk_open(&k.w, root, opts, HV_SORT_NAME);
	if (rc != HV_OK) {
		if (k.magic_fd >= 0)
			close(k.magic_fd);
		if (k.magic_fd2 >= 0)
			close(k.magic_fd2);
		hv_snapshot_close(sn);
		hv_collection_free(k.c);
		return rc;
	}
	struct hvc_db_files dbf;
	hvc_db_files_init(&dbf, st);
	struct since since = {.sn = sn, .m = m, .root = root, .st = st};
	if (sn)
		since.before_unread = hv__snapshot_unread(sn, &since.before_unread_len);
	else if (m && m->unread.len)
		since.before_unread = m->unread.data, since.before_unread_len = m->unread.len;
	if (since.before_unread &&
	    !(since.before_warned = calloc(since.before_unread_len, sizeof(bool))))
		since.before_unread = NULL; /* out of memory: no such warning, all else as usual */
	if (m && m->n_named)
		hvc_since_clock_init(m, &since.clock);
	bool compare = sn || m;
	k.c->compared = compare;
	struct hvc_pipe pipe;
	hvc_pipe_init(&pipe, opts, hvc_fd_budget(avail));
	const hv_entry *e;
	while ((rc = hv_walk_next(k.w, &e)) != HV_DONE) {
		if (rc == HV_WARN) {
			k.c->warnings++;
			hvc_warn(opts, hv_error_last());
			rc = compare ? note_unread(&since, k.w) : HV_OK;
			if (rc != HV_OK)
				break;
			continue;
		}
		if (rc != HV_OK)
			break;
		if (e->type == HV_FT_DIR)
			continue; /* directories hold artifacts; they are not artifacts */
		const hv_snapshot_entry *match = NULL;
		if (compare) {
			rc = since_match(&k, &since, e, &match);
			if (rc != HV_OK)
				break;
		}
		if (!e->have_lstat) {
			char *msg = NULL;
			if (asprintf(&msg, "%s: cannot be examined (lstat failed)", e->path) < 0)
				msg = NULL;
			rc = msg ? collect_entry(&k, &pipe, e, "error", msg, NULL, NULL)
				 : hv_error_set(HV_ENOMEM, "out of memory");
			free(msg);
			if (rc != HV_OK)
				break;
			continue;
		}
		if (hvc_is_db_file(&dbf, &e->lst) || hvc_is_db_path(root, st, e))
			continue;
		const char *compare_sha = NULL;
		const char *change = NULL;
		if (compare) {
			if (match && S_ISREG(match->st.mode) && !S_ISREG(e->lst.mode)) {
				rc = note_gone(&k, &since, match);
				if (rc != HV_OK)
					break;
			}
			if (!produced(&since, e, match, &compare_sha))
				continue;
			change = match && S_ISREG(match->st.mode) ? "modified" : "created";
			if (!match && since.before_unread &&
			    (rc = warn_unread_before(&k, &since, e)) != HV_OK)
				break;
		}
		const char *early = NULL;
		if (e->type == HV_FT_SYMLINK)
			early = "symlink";
		else if (e->type != HV_FT_FILE)
			early = "not_regular";
		else if (e->lst.size > opts->max_file_bytes)
			early = "too_large";
		rc = collect_entry(&k, &pipe, e, early, NULL, compare_sha, change);
		if (rc != HV_OK)
			break;
	}
	if (rc == HV_DONE && compare) {
		const hv_snapshot_entry *none;
		int src = since_match(&k, &since, NULL, &none);
		if (src != HV_OK)
			rc = src;
	}
	while (rc == HV_DONE && pipe.head < pipe.tail) {
		int drc = pipe_drain(&k, &pipe, true);
		if (drc != HV_OK)
			rc = drc;
	}
	hvc_pipe_destroy(&pipe);
	since_free(&since);
	cache_read_release(&k);
	if (rc == HV_DONE)
		rc = HV_OK;
	hv_walk_close(k.w);
	hv_snapshot_close(sn);
	hv_magic_close(k.magic);
	if (k.magic_fd >= 0)
		close(k.magic_fd);
	if (k.magic_fd2 >= 0)
		close(k.magic_fd2);
	/* Only a collect that looked something up or detected something has a cache to flush. */
	if (st && !opts->no_cache && k.magic_status > 0) {
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

static hv_status collect_root(hv_store *st, const char *dir, const hv_collect_opts *opts,
			      char **root)
{
	*root = NULL;
	if (!st && (opts->since_snapshot > 0 || !opts->no_cache))
		return hv_error_set(HV_EUSAGE, "collect: a store is needed for --since and the cache");
	return hvc_abs_root(dir, root);
}

/* The prologue of the collections compared with a state they are given rather than a stored
 * snapshot (hv_collect_since_mem, hv_collect_change_set): the options (a copy of opts, or the
 * defaults) without since_snapshot, and the absolute root (malloc'd). */
static hv_status begin_given_state(hv_store *st, const char *dir, const hv_collect_opts *opts,
				   hv_collect_opts *o, char **root)
{
	hv_collect_opts defaults;
	*o = *hvc_opts_or_defaults(opts, &defaults);
	o->since_snapshot = 0;
	int rc = collect_root(st, dir, o, root);
	if (rc != HV_OK)
		return rc;
	if (!*root) { /* (never: collect_root gives one or fails; for the analyzer) */
		hv_error_set(HV_EIO, "%s: no absolute path", dir);
		return HV_EIO;
	}
	return HV_OK;
}

hv_status hv_collect(hv_store *st, const char *dir, const hv_collect_opts *opts,
		     hv_collection **out)
{
	if (!out || !dir)
		return hv_error_set(HV_EUSAGE, "hv_collect: missing argument");
	*out = NULL;
	hv_collect_opts defaults;
	opts = hvc_opts_or_defaults(opts, &defaults);
	char *root;
	int rc = collect_root(st, dir, opts, &root);
	if (rc != HV_OK || !root) /* (never one without the other: for the analyzer) */
		return rc != HV_OK ? rc : hv_error_set(HV_EIO, "%s: no absolute path", dir);
	hv_snapshot *sn = NULL;
	if (opts->since_snapshot > 0) {
		rc = hv_store_snapshot_open(st, opts->since_snapshot, &sn);
		if (rc != HV_OK) {
			free(root);
			return rc;
		}
		/* Against a snapshot of another directory, everything would look produced. */
		size_t sl;
		const char *sroot = hv_snapshot_root(sn, &sl);
		if (sl != strlen(root) || memcmp(sroot, root, sl) != 0) {
			rc = hv_error_set(HV_EUSAGE, "snapshot %lld was taken of %.*s, not of %s",
					  (long long)opts->since_snapshot, (int)sl, sroot, root);
			hv_snapshot_close(sn);
			free(root);
			return rc;
		}
		/* Against one taken with other filters, what only this collect sees would look
		 * produced (or what only the snapshot saw, deleted). */
		size_t fl;
		const char *filters = hv__snapshot_filters(sn, &fl);
		rc = hvc_filters_check(opts, opts->since_snapshot, filters, fl);
		if (rc != HV_OK) {
			hv_snapshot_close(sn);
			free(root);
			return rc;
		}
	}
	return collect_impl(st, dir, opts, sn, NULL, root, out);
}

hv_status hv_collect_since_mem(hv_store *st, const char *dir, const hv_collect_opts *opts,
			       const hv_mem_snapshot *m, hv_collection **out)
{
	HV_NEED(out);
	*out = NULL;
	HV_NEED(dir && m);
	*out = NULL;
	hv_collect_opts o;
	char *root = NULL;
	int rc = begin_given_state(st, dir, opts, &o, &root);
	if (rc != HV_OK)
		return rc;
	if (strcmp(m->root, root) != 0) {
		rc = hv_error_set(HV_EUSAGE, "the snapshot was taken of %s, not of %s", m->root,
				  root);
		free(root);
		return rc;
	}
	rc = hvc_filters_check(&o, 0, m->filters.data, m->filters.len);
	if (rc != HV_OK) {
		free(root);
		return rc;
	}
	return collect_impl(st, dir, opts ? opts : &o, NULL, m, root, out);
}

/* The directory of rel (its part before the last '/'), opened from root one component at a
 * time with O_NOFOLLOW, as the walk reaches it: a symlink on the way is not followed. */
static int open_parent(int root_fd, const char *rel, size_t dir_len)
{
	int fd = fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
	size_t at = 0;
	while (fd >= 0 && at < dir_len) {
		const char *slash = memchr(rel + at, '/', dir_len - at);
		size_t n = slash ? (size_t)(slash - (rel + at)) : dir_len - at;
		char *comp = strndup(rel + at, n);
		int nfd = comp ? openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
		free(comp);
		close(fd);
		fd = nfd;
		at += n + 1;
	}
	return fd;
}

/* The deleted list of a change set, copied into c. */
static hv_status copy_deleted(hv_collection *c, const hv_change_set *cs)
{
	if (!cs->n_deleted)
		return HV_OK;
	c->deleted = calloc(cs->n_deleted, sizeof(*c->deleted));
	if (!c->deleted)
		return hv_error_set(HV_ENOMEM, "out of memory");
	for (size_t i = 0; i < cs->n_deleted; i++) {
		c->deleted[i].path = strdup(cs->deleted[i]);
		if (!c->deleted[i].path)
			return hv_error_set(HV_ENOMEM, "out of memory");
		c->deleted[i].path_len = strlen(cs->deleted[i]);
		c->n_deleted++;
	}
	return HV_OK;
}

hv_status hv_collect_change_set(hv_store *st, const char *dir, const hv_collect_opts *opts,
				const hv_change_set *cs, hv_collection **out)
{
	*out = NULL;
	hv_collect_opts o;
	char *root = NULL;
	int rc = begin_given_state(st, dir, opts, &o, &root);
	if (rc != HV_OK)
		return rc;
	struct collector k = {.st = st, .o = &o, .magic_fd = -1, .magic_fd2 = -1, .dir_fd = -1};
	k.c = calloc(1, sizeof(*k.c));
	if (!k.c) {
		free(root);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	k.c->root = root;
	k.c->compared = true;
	if (cs->n == 0) {
		/* Nothing to open, read or type (a run that only deleted, or changed nothing): no
		 * descriptors to count, no read-ahead window, no libmagic. */
		rc = copy_deleted(k.c, cs);
		if (rc != HV_OK) {
			hv_collection_free(k.c);
			return rc;
		}
		*out = k.c;
		return HV_OK;
	}
	int avail = 0;
	rc = hvc_check_fds(dir, 2, &avail);
	int root_fd = -1;
	if (rc == HV_OK && (root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		rc = hv_error_errno(HV_EIO, root, errno);
	if (rc == HV_OK)
		rc = copy_deleted(k.c, cs);
	if (rc != HV_OK) {
		if (root_fd >= 0)
			close(root_fd);
		hv_collection_free(k.c);
		return rc;
	}
	before_threads();
	struct hvc_db_files dbf;
	hvc_db_files_init(&dbf, st);
	struct hvc_pipe pipe;
	hvc_pipe_init(&pipe, &o, hvc_fd_budget(avail - 1));
	size_t dir_len = SIZE_MAX; /* of the directory k.dir_fd is open on */
	const char *dir_of = NULL;
	for (size_t i = 0; i < cs->n && rc == HV_OK; i++) {
		const char *rel = cs->paths[i];
		const char *slash = strrchr(rel, '/');
		size_t dl = slash ? (size_t)(slash - rel) : 0;
		if (!dir_of || dl != dir_len || memcmp(dir_of, rel, dl) != 0) {
			if (k.dir_fd >= 0)
				close(k.dir_fd);
			k.dir_fd = open_parent(root_fd, rel, dl);
			dir_of = rel;
			dir_len = dl;
		}
		if (k.dir_fd < 0)
			continue; /* gone since, or behind a symlink: not there for a walk either */
		struct stat sb;
		const char *name = slash ? slash + 1 : rel;
		if (fstatat(k.dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(sb.st_mode))
			continue;
		hv_entry e = {.name = name, .name_len = strlen(name), .path = rel,
			      .path_len = strlen(rel), .have_lstat = true};
		HV_STAT_FROM(&sb, &e.lst);
		e.type = hv_ftype_from_mode(e.lst.mode);
		if (hvc_is_db_file(&dbf, &e.lst) || hvc_is_db_path(root, st, &e))
			continue;
		/* Only opened for writing: produced if it changed, which sets its ctime. */
		if (cs->time_check && cs->time_check[i] && e.lst.ctime_ns < cs->start_ns)
			continue;
		const char *early = NULL;
		if (e.type == HV_FT_SYMLINK)
			early = "symlink";
		else if (e.type != HV_FT_FILE)
			early = "not_regular";
		else if (e.lst.size > o.max_file_bytes)
			early = "too_large";
		k.name = name;
		k.seen = i + 1;
		rc = collect_entry(&k, &pipe, &e, early, NULL, NULL, cs->change[i]);
	}
	while (rc == HV_OK && pipe.head < pipe.tail)
		rc = pipe_drain(&k, &pipe, true);
	hvc_pipe_destroy(&pipe);
	cache_read_release(&k);
	if (k.dir_fd >= 0)
		close(k.dir_fd);
	close(root_fd);
	hv_magic_close(k.magic);
	if (st && !o.no_cache && k.magic_status > 0) {
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
