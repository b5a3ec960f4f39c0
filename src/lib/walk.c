/* The directory walker.
 *
 * Shape: the consumer (the thread calling hv_walk_next) walks the tree depth-first with an
 * explicit stack of frames, one per directory being listed, so no C recursion grows with the
 * tree's depth. Reading a directory (getdents64 + one lstat per entry, sorting) is a *job* on
 * its node; worker threads run jobs ahead of the consumer, which takes each listing in
 * pre-order when it gets there (running the job itself when no worker has started it).
 * Workers read ahead transitively: a finished job queues its own subdirectories, and the
 * queue hands out the job that comes first in the consumer's order (a heap keyed by
 * pre-order position). Read-ahead is bounded by a budget of directories and entries read
 * but not yet reached, so memory follows the budget, the depth and the widest directory,
 * not the number of entries.
 *
 * Directories are opened relative to their parent's descriptor with O_NOFOLLOW|O_DIRECTORY,
 * one component at a time. Descriptors live in a small LRU cache; when it is full (or the
 * process runs out, EMFILE) the least recently used unpinned ones are closed and reopened
 * later from the nearest open ancestor, component by component, checking device and inode.
 *
 * The parts: walk.c (the consumer and the API), walk_fdcache.c (the descriptor cache),
 * walk_node.c (nodes), walk_read.c (reading one directory), walk_queue.c (the job queue and
 * the workers); walk_internal.h holds what they share.
 */
#include "test_hook.h"
#include "walk_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *const ftype_names[] = {
	[HV_FT_UNKNOWN] = "unknown", [HV_FT_FILE] = "file",     [HV_FT_DIR] = "dir",
	[HV_FT_SYMLINK] = "symlink", [HV_FT_FIFO] = "fifo",     [HV_FT_SOCKET] = "socket",
	[HV_FT_CHAR] = "char",       [HV_FT_BLOCK] = "block",
};

const char *hv_ftype_name(hv_ftype t)
{
	return (unsigned)t < sizeof(ftype_names) / sizeof(ftype_names[0]) ? ftype_names[t]
									   : "unknown";
}

hv_ftype hv_ftype_from_mode(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return HV_FT_FILE;
	case S_IFDIR: return HV_FT_DIR;
	case S_IFLNK: return HV_FT_SYMLINK;
	case S_IFIFO: return HV_FT_FIFO;
	case S_IFSOCK: return HV_FT_SOCKET;
	case S_IFCHR: return HV_FT_CHAR;
	case S_IFBLK: return HV_FT_BLOCK;
	default: return HV_FT_UNKNOWN;
	}
}

static hv_ftype ftype_from_dtype(unsigned char d)
{
	switch (d) {
	case DT_REG: return HV_FT_FILE;
	case DT_DIR: return HV_FT_DIR;
	case DT_LNK: return HV_FT_SYMLINK;
	case DT_FIFO: return HV_FT_FIFO;
	case DT_SOCK: return HV_FT_SOCKET;
	case DT_CHR: return HV_FT_CHAR;
	case DT_BLK: return HV_FT_BLOCK;
	default: return HV_FT_UNKNOWN;
	}
}

void hv_walk_opts_init(hv_walk_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->max_depth = -1;
	opts->sort = HV_SORT_NAME;
}

/* ---- the consumer ---- */

static int push_frame(hv_walk *w, struct dnode *n, size_t base_len, int depth)
{
	if (w->n_frames == w->frames_cap) {
		size_t cap = w->frames_cap ? w->frames_cap * 2 : 64;
		struct frame *fr = realloc(w->frames, cap * sizeof(*fr));
		if (!fr)
			return -1;
		w->frames = fr;
		w->frames_cap = cap;
	}
	struct frame *f = &w->frames[w->n_frames++];
	memset(f, 0, sizeof(*f));
	f->node = n;
	f->base_len = base_len;
	f->depth = depth;
	return 0;
}

static void pop_frame(hv_walk *w)
{
	struct frame *f = &w->frames[--w->n_frames];
	struct dnode *n = f->node;
	pthread_mutex_lock(&w->lock);
	/* Children left unconsumed (the entry limit was hit, or the walk is closed early). A
	 * worker may still be reading one; it holds its own reference. */
	hvw_abandon_children_locked(w, n);
	hvw_listing_recycle_locked(w, &n->listing);
	hvw_node_unref_locked(w, n);
	pthread_mutex_unlock(&w->lock);
}

/* "ROOT/rel/path" for messages about the current frame's directory (rel may be empty). */
static const char *message_path(hv_walk *w, const char *rel, size_t rel_len)
{
	hv_buf_truncate(&w->msg_path, 0);
	hv_buf_append_str(&w->msg_path, w->root_arg);
	if (rel_len) {
		if (w->msg_path.len && w->msg_path.data[w->msg_path.len - 1] != '/')
			hv_buf_append_char(&w->msg_path, '/');
		hv_buf_append(&w->msg_path, rel, rel_len);
	}
	return w->msg_path.data ? w->msg_path.data : "";
}

static void fill_entry(hv_walk *w, const struct frame *f, const struct rec *r)
{
	const struct listing *l = &f->node->listing;
	hv_entry *e = &w->entry;
	e->name = l->names.data + r->name_off;
	e->name_len = r->name_len;
	e->path = w->path.data;
	e->path_len = w->path.len;
	e->depth = f->depth + 1;
	e->have_lstat = r->flags & REC_HAVE_LSTAT;
	e->lst = r->lst;
	w->entry_named = r->flags & REC_NAMES;
	e->type = e->have_lstat ? hv_ftype_from_mode(r->lst.mode) : ftype_from_dtype(r->dtype);
	e->have_stat = r->flags & REC_HAVE_STAT;
	e->is_dir = r->flags & REC_STAT_DIR;
	e->size = e->have_stat ? r->size : 0;
	e->target = r->target_len ? l->names.data + r->target_off : NULL;
	e->target_len = r->target_len;
}

/* Takes the listing of the frame on top of the stack when the consumer first reaches it.
 * Returns HV_WARN (with the message set) when the directory could not be read. */
static hv_status start_frame(hv_walk *w, struct frame *f)
{
	struct listing *l = &f->node->listing;
	hvw_await_listing(w, f->node);
	f->started = true;
	if (!l->err)
		return HV_OK;
	int err = l->err;
	l->err = 0;
	w->warnings++;
	w->unread_warned = true;
	w->unread_len = f->base_len;
	hv_error_errno(HV_WARN, message_path(w, w->path.data, f->base_len), err);
	if (!l->partial)
		l->n = 0; /* nothing was read: the frame ends at once */
	return HV_WARN;
}

hv_status hv_walk_next(hv_walk *w, const hv_entry **out)
{
	HV_NEED(w && out);
	*out = NULL;
	w->entry_parent = NULL;
	w->unread_warned = false;
	if (w->pending_warn.len) {
		hv_error_set(HV_WARN, "%s", w->pending_warn.data);
		hv_buf_truncate(&w->pending_warn, 0);
		/* w->path still names the entry the warning is of. */
		w->unread_warned = w->pending_unread;
		w->unread_len = w->path.len;
		w->pending_unread = false;
		return HV_WARN;
	}
	if (w->finished)
		return HV_DONE;
	while (w->n_frames > 0) {
		struct frame *f = &w->frames[w->n_frames - 1];
		if (!f->started && start_frame(w, f) == HV_WARN)
			return HV_WARN;
		const struct listing *l = &f->node->listing;
		if (f->idx >= l->n) {
			pop_frame(w);
			continue;
		}
		if (w->limit_hit) {
			/* Warn only when a record was really left out: a tree of exactly N entries
			 * under --max-entries N is complete. */
			w->finished = true;
			w->warnings++;
			return hv_error_set(HV_WARN, "%s: stopped after %llu %s (--max-entries)",
					    message_path(w, NULL, 0),
					    (unsigned long long)w->opts.max_entries,
					    w->opts.max_entries == 1 ? "entry" : "entries");
		}
		size_t index = f->idx++;
		const struct rec *r = &l->recs[index];
		/* The path: the directory's (kept from the entries before), '/', the name with
		 * its NUL, in one reservation and one copy, once per entry. */
		hv_buf *p = &w->path;
		size_t sep = f->base_len ? 1 : 0;
		hv_buf_truncate(p, f->base_len);
		if (hv_buf_reserve(p, sep + r->name_len) != HV_OK)
			return HV_ENOMEM;
		p->data[p->len] = '/';
		memcpy(p->data + p->len + sep, l->names.data + r->name_off, r->name_len + 1);
		p->len += sep + r->name_len;
		fill_entry(w, f, r);
		/* The parent stays alive until the next call: only hv_walk_next pops frames. */
		w->entry_parent = f->node;

		struct dnode *n = f->node;
		enum descend d = hvw_should_descend(w, n, r);
		if (d == LOOP) {
			/* Listed, not entered; the warning is the next call's answer. */
			w->warnings++;
			hv_buf_printf(&w->pending_warn,
				      "%s: not entered: it leads back to an ancestor directory",
				      message_path(w, w->path.data, w->path.len));
		} else if (d == UNEXAMINED) {
			/* Listed with nulls, its contents not, and said, as for a directory that
			 * cannot be opened. */
			w->warnings++;
			w->pending_unread = !(r->flags & REC_GONE);
			hv_buf_printf(&w->pending_warn,
				      "%s: not entered: it cannot be examined (lstat%s%s)%s",
				      message_path(w, w->path.data, w->path.len),
				      r->lerr == 255 ? " failed" : ": ",
				      r->lerr == 255 ? "" : strerror(r->lerr),
				      r->dtype == DT_UNKNOWN ? "; it may be a directory" : "");
		} else if (d == DESCEND) {
			struct dnode *c;
			if (n->next_child < n->n_children &&
			    n->children[n->next_child]->rec_index == index) {
				c = n->children[n->next_child++]; /* its reference moves to the frame */
			} else {
				/* make_children ran out of memory for this one: make it now. */
				c = hvw_child_of(n, r, index);
				if (c) {
					pthread_mutex_lock(&w->lock);
					n->refs++;
					pthread_mutex_unlock(&w->lock);
				}
			}
			if (!c || push_frame(w, c, w->path.len, f->depth + 1) != 0) {
				if (c)
					hvw_node_unref(w, c);
				return hv_error_set(HV_ENOMEM, "out of memory");
			}
		}
		w->count++;
		if (w->opts.max_entries && w->count >= w->opts.max_entries)
			w->limit_hit = true;
		*out = &w->entry;
		return HV_OK;
	}
	w->finished = true;
	return HV_DONE;
}

static hv_status walk_open(hv_walk **out, const char *root, const hv_walk_opts *opts,
			   bool names_only)
{
	if (!out || !root)
		return hv_error_set(HV_EUSAGE, "hv_walk_open: missing argument");
	*out = NULL;
	hv_walk_opts o;
	if (opts)
		o = *opts;
	else
		hv_walk_opts_init(&o);
	if (o.threads < 0 || o.threads > 1024)
		return hv_error_set(HV_EUSAGE, "bad thread count: %d", o.threads);
	if (o.max_depth < -1)
		return hv_error_set(HV_EUSAGE, "bad max_depth: %d (-1: no limit)", o.max_depth);
	if (o.sort != HV_SORT_NAME && o.sort != HV_SORT_NONE)
		return hv_error_set(HV_EUSAGE, "bad sort: %d", (int)o.sort);
	if (o.n_excludes && !o.excludes)
		return hv_error_set(HV_EUSAGE, "n_excludes is %zu but excludes is NULL", o.n_excludes);
	for (size_t i = 0; i < o.n_excludes; i++)
		if (!o.excludes[i])
			return hv_error_set(HV_EUSAGE, "excludes[%zu] is NULL", i);

	struct stat st;
	/* Not found is "does not exist or is not a directory" (exit 3); a path that cannot be
	 * looked up (a symlink loop, a name too long, a parent not searchable) is HV_EIO, with
	 * its reason, as cat and rm report it. */
	if (stat(root, &st) != 0)
		return hv_error_errno(errno == ENOENT || errno == ENOTDIR ? HV_ENOTDIR : HV_EIO, root,
				      errno);
	if (!S_ISDIR(st.st_mode))
		return hv_error_errno(HV_ENOTDIR, root, ENOTDIR);

	hv_walk *w = calloc(1, sizeof(*w));
	if (!w)
		return hv_error_set(HV_ENOMEM, "out of memory");
	w->opts = o;
	w->names_only = names_only;
	w->root_arg = strdup(root);
	w->dents_buf = malloc(DENTS_BUF);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->work_cond, NULL);
	pthread_cond_init(&w->done_cond, NULL);
	if (o.n_excludes) {
		w->excludes = calloc(o.n_excludes, sizeof(char *));
		for (size_t i = 0; w->excludes && i < o.n_excludes; i++)
			w->excludes[i] = strdup(o.excludes[i]);
	}
	w->opts.excludes = NULL;
	if (!w->root_arg || !w->dents_buf || (o.n_excludes && !w->excludes)) {
		hv_walk_close(w);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < o.n_excludes; i++)
		/* excludes is not NULL when n_excludes is not 0 (checked above).
		 * NOLINTNEXTLINE(clang-analyzer-core.NullDereference) */
		if (!w->excludes[i]) {
			hv_walk_close(w);
			return hv_error_set(HV_ENOMEM, "out of memory");
		}
	/* Strip trailing slashes from the root as given ("dir/" prints as "dir/x"), keep "/". */
	for (size_t n = strlen(w->root_arg); n > 1 && w->root_arg[n - 1] == '/'; n--)
		w->root_arg[n - 1] = '\0';

	struct rlimit rl;
	int soft = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
			   rl.rlim_cur < INT_MAX
		       ? (int)rl.rlim_cur
		       : 1024;
	/* Half the process's descriptors for the cache, the rest for everything else. */
	w->fd_cap = soft / 2 > 8 ? soft / 2 : 8;
	if (w->fd_cap > 4096)
		w->fd_cap = 4096;

	struct dnode *rootn = hvw_node_new(NULL, root, strlen(root));
	if (!rootn) {
		hv_walk_close(w);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	rootn->dev = st.st_dev;
	rootn->ino = st.st_ino;
	w->root_dev = st.st_dev;
	if (push_frame(w, rootn, 0, 0) != 0) {
		hvw_node_unref(w, rootn);
		hv_walk_close(w);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	/* Read the root now, so that a root that cannot be read fails the open, not the walk. */
	hvw_await_listing(w, rootn);
	if (rootn->listing.err && !rootn->listing.partial) {
		int err = rootn->listing.err;
		hv_walk_close(w);
		return hv_error_errno(err == ENOTDIR || err == ENOENT ? HV_ENOTDIR : HV_EIO, root,
				      err);
	}
	/* The root's descriptor stays open to the end: every reopen starts from it. */
	rootn->pins++;
	if (o.max_depth == 0)
		w->finished = true;

	unsigned n = o.threads ? (unsigned)o.threads : (unsigned)hv_default_threads();
	if (n > MAX_WORKERS)
		n = MAX_WORKERS;
	/* Only the default grows; a count asked for is kept, unless a test switch (test_hook.h)
	 * says every batch is blocked. */
	w->assume_blocked = hv__test_switch_on(HV__SWITCH_WALK_BLOCKED);
	w->slow_claims = hv__test_switch_on(HV__SWITCH_WALK_SLOW_CLAIMS);
	w->no_dtype = hv__test_switch_on(HV__SWITCH_WALK_NO_DTYPE);
	w->max_workers = o.threads && !w->assume_blocked ? (int)n : MAX_GROWN_WORKERS;
	/* One thread means no workers: the consumer reads every directory itself. Under the
	 * lock, since a started worker may already add others. An empty root has nothing to
	 * read ahead: no worker either (a run in an empty directory would pay their start and
	 * end, more than the whole walk). */
	if (rootn->listing.n == 0) {
		w->max_workers = 0;
	} else if (n > 1) {
		pthread_mutex_lock(&w->lock);
		for (unsigned i = 0; i < n; i++) {
			if (pthread_create(&w->workers[w->n_workers], NULL, hvw_worker_main, w) != 0)
				break;
			w->n_workers++;
		}
		if (w->max_workers < w->n_workers || w->n_workers == 0)
			w->max_workers = w->n_workers;
		pthread_mutex_unlock(&w->lock);
	}
	*out = w;
	return HV_OK;
}

hv_status hv_walk_open(hv_walk **out, const char *root, const hv_walk_opts *opts)
{
	return walk_open(out, root, opts, false);
}

hv_status hv__walk_open_names(hv_walk **out, const char *root, const hv_walk_opts *opts)
{
	return walk_open(out, root, opts, true);
}

bool hv__walk_named(const hv_walk *w)
{
	return w->entry_named;
}

const char *hv__walk_unread_dir(const hv_walk *w, size_t *len)
{
	if (!w->unread_warned)
		return NULL;
	*len = w->unread_len;
	return w->unread_len ? w->path.data : "";
}

/* The descriptor of the last entry's directory, pinned in the cache until
 * hvw_cache_unpin(w, w->entry_parent); -1 with errno set when there is none. From the first
 * call on, workers keep the descriptors of the directories they read (see hvw_worker_main). */
static int entry_dir_fd(hv_walk *w)
{
	if (!w->entry_parent || !w->entry.name) {
		errno = EINVAL;
		return -1;
	}
	if (!atomic_load_explicit(&w->keeps_fds, memory_order_relaxed))
		atomic_store_explicit(&w->keeps_fds, true, memory_order_relaxed);
	return hvw_node_fd(w, w->entry_parent, true);
}

int hv__walk_lstat(hv_walk *w, hv_stat *out)
{
	struct dnode *p = w->entry_parent;
	int dfd = entry_dir_fd(w);
	if (dfd < 0)
		return -1;
	struct stat st;
	int rc = fstatat(dfd, w->entry.name, &st, AT_SYMLINK_NOFOLLOW);
	int err = errno;
	hvw_cache_unpin(w, p);
	if (rc == 0)
		HV_STAT_FROM(&st, out);
	errno = err;
	return rc;
}

int hv__walk_access(hv_walk *w, int mode)
{
	struct dnode *p = w->entry_parent;
	int dfd = entry_dir_fd(w);
	if (dfd < 0)
		return -1;
	int rc = faccessat(dfd, w->entry.name, mode, AT_EACCESS);
	int err = errno;
	hvw_cache_unpin(w, p);
	errno = err;
	return rc;
}

int hv_walk_openat(hv_walk *w, int flags)
{
	if (!w) {
		hv_error_set(HV_EUSAGE, "hv_walk_openat: missing argument");
		errno = EINVAL;
		return -1;
	}
	struct dnode *p = w->entry_parent;
	int dfd = entry_dir_fd(w);
	if (dfd < 0)
		return -1;
	int fd = hvw_open_evicting(w, dfd, w->entry.name, flags | O_NOFOLLOW | O_CLOEXEC, true);
	int err = errno;
	hvw_cache_unpin(w, p);
	errno = err;
	return fd;
}

uint64_t hv_walk_count(const hv_walk *w)
{
	return w ? w->count : 0;
}

uint64_t hv_walk_warnings(const hv_walk *w)
{
	return w ? w->warnings : 0;
}

int hv_walk_workers(hv_walk *w, uint64_t *grown)
{
	if (!w) {
		if (grown)
			*grown = 0;
		return 0;
	}
	if (grown)
		*grown = atomic_load(&w->grown);
	pthread_mutex_lock(&w->lock);
	int n = w->n_workers;
	pthread_mutex_unlock(&w->lock);
	return n;
}

const char *hv_walk_root(const hv_walk *w)
{
	return w ? w->root_arg : NULL;
}

void hv_walk_close(hv_walk *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->shutdown = true;
	pthread_cond_broadcast(&w->work_cond);
	int n_workers = w->n_workers; /* no worker is added once shutdown is set */
	pthread_mutex_unlock(&w->lock);
	for (int i = 0; i < n_workers; i++)
		pthread_join(w->workers[i], NULL);
	while (w->n_frames > 0)
		pop_frame(w);
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->queue_len; i++)
		hvw_node_unref_locked(w, w->queue[i]);
	w->queue_len = 0;
	hvw_spares_free(w);
	pthread_mutex_unlock(&w->lock);
	free(w->queue);
	free(w->frames);
	for (size_t i = 0; w->excludes && i < w->opts.n_excludes; i++)
		free(w->excludes[i]);
	free(w->excludes);
	hv_buf_free(&w->path);
	hv_buf_free(&w->msg_path);
	hv_buf_free(&w->pending_warn);
	free(w->dents_buf);
	free(w->root_arg);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->work_cond);
	pthread_cond_destroy(&w->done_cond);
	free(w);
}
