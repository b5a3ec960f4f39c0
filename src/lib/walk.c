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
 */
#include "harvest/walk.h"
#include "internal.h"

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

/* The read-ahead budget: directories queued or read but not yet reached by the consumer,
 * and the entries in those read. ~100 bytes an entry: the entry budget is ~12 MiB. */
#define AHEAD_MAX_NODES 4096
#define AHEAD_MAX_ENTRIES 131072
/* The getdents64 buffer. Large enough that a typical directory is read in one call. */
#define DENTS_BUF (64 * 1024)
#define MAX_WORKERS 8

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

enum rec_flags {
	REC_HAVE_LSTAT = 1 << 0,
	REC_HAVE_STAT = 1 << 1,  /* stat following symlinks succeeded */
	REC_STAT_DIR = 1 << 2,   /* ... and says directory */
};

/* One directory entry as read by a job. */
struct rec {
	uint32_t name_off;    /* into listing.names */
	uint32_t name_len;
	uint32_t target_off;  /* symlink target into listing.names, when read */
	uint32_t target_len;
	uint8_t dtype;
	uint8_t flags;
	uint64_t size;        /* st_size following symlinks */
	uint64_t sdev, sino;  /* device and inode following symlinks (for follow's loop check) */
	hv_stat lst;
};

struct listing {
	struct rec *recs;
	size_t n, cap;
	hv_buf names;
	int err;          /* errno of an open or read failure (0: complete) */
	bool partial;     /* err came from a read failure after some entries were read */
};

enum job_state { JOB_NEW, JOB_QUEUED, JOB_RUNNING, JOB_DONE };

/* A directory: to be read, being read, or on the consumer's stack. */
struct dnode {
	struct dnode *parent;
	char *name;              /* component in the parent; the root: the path as given */
	int fd;                  /* -1 when not open */
	int pins;                /* users of fd right now; pinned fds are never evicted */
	int refs;                /* frames, children, queue entries holding this node */
	uint64_t dev, ino;       /* what the parent's listing said (0/0: not yet known) */
	bool via_link;           /* reached through a symlink under follow */
	enum job_state state;
	struct listing listing;
	bool counted;            /* in the read-ahead budget */
	bool abandoned;          /* the consumer will never come: workers skip it */
	int depth;               /* the root is 0 */
	struct dnode *lru_prev, *lru_next;
	size_t rec_index;        /* the index of this directory in its parent's listing */
	struct dnode **children; /* the subdirectories to enter, in listing order (owned refs) */
	size_t n_children, next_child;
};

struct frame {
	struct dnode *node;
	size_t idx;              /* next record to yield */
	size_t base_len;         /* length of this directory's relative path */
	int depth;               /* depth of the directory (root 0) */
	bool started;            /* the listing has been taken */
};

struct hv_walk {
	hv_walk_opts opts;
	char **excludes;
	char *root_arg;          /* the root as the user gave it, for messages */
	uint64_t root_dev;

	pthread_mutex_t lock;
	pthread_cond_t work_cond;   /* a job was queued, or shutdown */
	pthread_cond_t done_cond;   /* a job finished */
	struct dnode **queue;       /* a heap of queued jobs, first in pre-order on top */
	size_t queue_len, queue_cap;
	size_t ahead_nodes, ahead_entries;  /* the read-ahead budget in use */
	bool shutdown;
	pthread_t workers[MAX_WORKERS];
	int n_workers;

	/* The descriptor cache (guarded by lock). */
	struct dnode *lru_head, *lru_tail;   /* head: most recently used */
	int open_fds, fd_cap;

	/* Consumer state (touched by the consumer thread only). */
	struct frame *frames;
	size_t n_frames, frames_cap;
	hv_buf path;
	hv_buf msg_path;
	hv_entry entry;
	struct dnode *entry_parent;   /* the directory holding the last entry */
	hv_buf pending_warn;          /* a warning to give on the next call */
	char *dents_buf;
	uint64_t count, warnings;
	bool limit_hit, finished;
};

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

static void stat_to_hv(const struct stat *st, hv_stat *out)
{
	HV_STAT_FROM(st, out);
}

/* ---- the descriptor cache (all under w->lock) ---- */

static void lru_unlink(hv_walk *w, struct dnode *n)
{
	if (n->lru_prev)
		n->lru_prev->lru_next = n->lru_next;
	else if (w->lru_head == n)
		w->lru_head = n->lru_next;
	if (n->lru_next)
		n->lru_next->lru_prev = n->lru_prev;
	else if (w->lru_tail == n)
		w->lru_tail = n->lru_prev;
	n->lru_prev = n->lru_next = NULL;
}

static void lru_push_front(hv_walk *w, struct dnode *n)
{
	n->lru_prev = NULL;
	n->lru_next = w->lru_head;
	if (w->lru_head)
		w->lru_head->lru_prev = n;
	w->lru_head = n;
	if (!w->lru_tail)
		w->lru_tail = n;
}

/* Closes up to want unpinned descriptors, least recently used first. Returns how many. */
static int evict_fds(hv_walk *w, int want)
{
	int closed = 0;
	struct dnode *n = w->lru_tail;
	while (n && closed < want) {
		struct dnode *prev = n->lru_prev;
		if (n->pins == 0 && n->fd >= 0) {
			close(n->fd);
			n->fd = -1;
			lru_unlink(w, n);
			w->open_fds--;
			closed++;
		}
		n = prev;
	}
	return closed;
}

/* Records a freshly opened, pinned descriptor for n, evicting others beyond the cap. */
static void cache_insert(hv_walk *w, struct dnode *n, int fd)
{
	n->fd = fd;
	n->pins++;
	w->open_fds++;
	lru_push_front(w, n);
	if (w->open_fds > w->fd_cap)
		evict_fds(w, w->open_fds - w->fd_cap);
}

static void cache_unpin(hv_walk *w, struct dnode *n)
{
	pthread_mutex_lock(&w->lock);
	n->pins--;
	pthread_mutex_unlock(&w->lock);
}

/* openat that, when the process is out of descriptors, closes cached ones and tries again.
 * When every cached descriptor is pinned, a patient caller (the consumer) waits for the
 * workers to unpin theirs, up to a few seconds; a worker gives up at once (EMFILE) and hands
 * the job back, so a passing shortage never becomes a lost directory. */
static int open_evicting(hv_walk *w, int dirfd, const char *name, int flags, bool patient)
{
	for (int waited_ms = 0;;) {
		int fd = openat(dirfd, name, flags);
		if (fd >= 0 || (errno != EMFILE && errno != ENFILE))
			return fd;
		pthread_mutex_lock(&w->lock);
		int closed = evict_fds(w, w->open_fds / 4 + 1);
		/* Lower the cap, so the cache stops competing with the rest of the process. */
		if (w->open_fds > 16)
			w->fd_cap = w->open_fds;
		pthread_mutex_unlock(&w->lock);
		if (closed == 0) {
			if (!patient || waited_ms >= 5000) {
				errno = EMFILE;
				return -1;
			}
			struct timespec ms = {0, 1000000};
			nanosleep(&ms, NULL);
			waited_ms++;
		}
	}
}

static int dir_open_flags(const struct dnode *n)
{
	int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK;
	return n->via_link ? flags : flags | O_NOFOLLOW;
}

/* Returns a pinned descriptor of n (call cache_unpin after use), reopening it from the
 * nearest open ancestor when it was evicted, or -1 with errno set. */
static int node_fd(hv_walk *w, struct dnode *n, bool patient)
{
	pthread_mutex_lock(&w->lock);
	if (n->fd >= 0) {
		n->pins++;
		lru_unlink(w, n);
		lru_push_front(w, n);
		pthread_mutex_unlock(&w->lock);
		return n->fd;
	}
	/* Find the nearest ancestor that is open, pin it, and walk down from there. */
	size_t len = 0;
	struct dnode *a = n;
	while (a && a->fd < 0) {
		len++;
		a = a->parent;
	}
	if (a)
		a->pins++;
	pthread_mutex_unlock(&w->lock);

	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	struct dnode **chain = malloc(len * sizeof(*chain));
	if (!chain) {
		if (a)
			cache_unpin(w, a);
		errno = ENOMEM;
		return -1;
	}
	size_t i = len;
	for (struct dnode *c = n; c != a; c = c->parent)
		chain[--i] = c;

	int cur = a ? a->fd : AT_FDCWD;
	int err = 0;
	for (i = 0; i < len; i++) {
		/* The loop above filled chain: the len nodes from n up to a, counted under lock.
		 * NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign) */
		struct dnode *c = chain[i];
		int flags = c->parent ? dir_open_flags(c) : O_RDONLY | O_DIRECTORY | O_CLOEXEC;
		int fd = open_evicting(w, cur, c->name, flags, patient);
		if (fd < 0) {
			err = errno;
		} else if (c->ino != 0) {
			/* The directory may have been replaced since it was listed: still inside the
			 * root (O_NOFOLLOW), but not the one we mean. */
			struct stat st;
			if (fstat(fd, &st) != 0 || st.st_dev != c->dev || st.st_ino != c->ino) {
				close(fd);
				fd = -1;
				err = ESTALE;
			}
		}
		if (cur != AT_FDCWD && (!a || cur != a->fd))
			close(cur);
		if (fd < 0)
			break;
		cur = fd;
	}
	free(chain);
	if (a)
		cache_unpin(w, a);
	if (err) {
		errno = err;
		return -1;
	}
	pthread_mutex_lock(&w->lock);
	if (n->fd >= 0) {
		/* Another thread reopened it meanwhile; keep theirs. */
		close(cur);
		n->pins++;
	} else {
		cache_insert(w, n, cur);
	}
	pthread_mutex_unlock(&w->lock);
	return n->fd;
}

/* ---- nodes ---- */

static struct dnode *node_new(struct dnode *parent, const char *name, size_t name_len)
{
	struct dnode *n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->name = malloc(name_len + 1);
	if (!n->name) {
		free(n);
		return NULL;
	}
	memcpy(n->name, name, name_len);
	n->name[name_len] = '\0';
	n->fd = -1;
	n->refs = 1;
	n->parent = parent;
	if (parent)
		parent->refs++; /* caller holds w->lock or is single-threaded at this point */
	return n;
}

static void listing_free(struct listing *l)
{
	free(l->recs);
	hv_buf_free(&l->names);
	memset(l, 0, sizeof(*l));
}

/* Drops one reference (w->lock held); frees the node, and ancestors it kept alive, at zero.
 * Iterative, so a chain 100,000 levels deep unwinds without recursion. */
static void node_unref_locked(hv_walk *w, struct dnode *n)
{
	while (n && --n->refs == 0) {
		struct dnode *parent = n->parent;
		if (n->fd >= 0) {
			close(n->fd);
			lru_unlink(w, n);
			w->open_fds--;
		}
		listing_free(&n->listing);
		free(n->children);
		free(n->name);
		free(n);
		n = parent;
	}
}

static void node_unref(hv_walk *w, struct dnode *n)
{
	pthread_mutex_lock(&w->lock);
	node_unref_locked(w, n);
	pthread_mutex_unlock(&w->lock);
}

/* ---- reading one directory (a job) ---- */

static bool is_ancestor(const struct dnode *n, uint64_t dev, uint64_t ino)
{
	for (; n; n = n->parent)
		if (n->dev == dev && n->ino == ino)
			return true;
	return false;
}

enum descend { NO_DESCEND, DESCEND, LOOP };

/* Whether the walk enters record r of directory n. The job that makes n's children and
 * the consumer ask the same question, so they always agree. */
static enum descend should_descend(const hv_walk *w, const struct dnode *n, const struct rec *r)
{
	if (w->opts.max_depth >= 0 && n->depth + 1 >= w->opts.max_depth)
		return NO_DESCEND;
	if (!(r->flags & REC_HAVE_LSTAT))
		return NO_DESCEND; /* lstat failed: nothing is known, nothing is entered */
	bool link = S_ISLNK(r->lst.mode);
	if (link ? !(w->opts.follow && (r->flags & REC_STAT_DIR)) : !S_ISDIR(r->lst.mode))
		return NO_DESCEND;
	uint64_t dev = link ? r->sdev : r->lst.dev;
	if (w->opts.xdev && dev != w->root_dev)
		return NO_DESCEND;
	if (w->opts.follow && is_ancestor(n, dev, link ? r->sino : r->lst.ino))
		return LOOP;
	return DESCEND;
}

/* A node for record r (at index) of n's listing. The caller accounts for the reference the
 * child holds on n. */
static struct dnode *child_of(struct dnode *n, const struct rec *r, size_t index)
{
	struct dnode *c = node_new(NULL, n->listing.names.data + r->name_off, r->name_len);
	if (!c)
		return NULL;
	bool link = S_ISLNK(r->lst.mode);
	c->parent = n;
	c->via_link = link;
	c->dev = link ? r->sdev : r->lst.dev;
	c->ino = link ? r->sino : r->lst.ino;
	c->depth = n->depth + 1;
	c->rec_index = index;
	return c;
}

/* Makes n's children: a node for each subdirectory the walk will enter. */
static void make_children(hv_walk *w, struct dnode *n)
{
	const struct listing *l = &n->listing;
	size_t count = 0;
	for (size_t i = 0; i < l->n; i++)
		if (should_descend(w, n, &l->recs[i]) == DESCEND)
			count++;
	if (count == 0)
		return;
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	n->children = malloc(count * sizeof(*n->children));
	if (!n->children)
		return; /* the consumer makes each child when it gets there */
	for (size_t i = 0; i < l->n; i++) {
		if (should_descend(w, n, &l->recs[i]) != DESCEND)
			continue;
		struct dnode *c = child_of(n, &l->recs[i], i);
		if (!c)
			break;
		n->children[n->n_children++] = c;
	}
	/* One lock for all the references the children take on their parent. */
	pthread_mutex_lock(&w->lock);
	n->refs += (int)n->n_children;
	pthread_mutex_unlock(&w->lock);
}

static bool excluded(const hv_walk *w, const char *name)
{
	if (w->opts.no_hidden && name[0] == '.')
		return true;
	for (size_t i = 0; i < w->opts.n_excludes; i++)
		if (fnmatch(w->excludes[i], name, 0) == 0)
			return true;
	return false;
}

static int rec_cmp(const void *a, const void *b, void *names)
{
	const struct rec *x = a, *y = b;
	return strcmp((const char *)names + x->name_off, (const char *)names + y->name_off);
}

static int listing_add(struct listing *l, const char *name, size_t len, unsigned char dtype)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 32;
		struct rec *r = realloc(l->recs, cap * sizeof(*r));
		if (!r)
			return -1;
		l->recs = r;
		l->cap = cap;
	}
	if (l->names.len + len + 1 > UINT32_MAX)
		return -1;
	struct rec *r = &l->recs[l->n];
	memset(r, 0, sizeof(*r));
	r->name_off = (uint32_t)l->names.len;
	r->name_len = (uint32_t)len;
	r->dtype = dtype;
	/* Names are stored with their NUL, so they can be compared and passed to syscalls. */
	if (hv_buf_append(&l->names, name, len + 1) != HV_OK)
		return -1;
	l->n++;
	return 0;
}

static void stat_entries(hv_walk *w, int dfd, struct listing *l)
{
	for (size_t i = 0; i < l->n; i++) {
		struct rec *r = &l->recs[i];
		const char *name = l->names.data + r->name_off;
		struct stat st;
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		r->flags |= REC_HAVE_LSTAT;
		stat_to_hv(&st, &r->lst);
		if (!S_ISLNK(st.st_mode)) {
			r->flags |= REC_HAVE_STAT | (S_ISDIR(st.st_mode) ? REC_STAT_DIR : 0);
			r->size = (uint64_t)st.st_size;
			r->sdev = st.st_dev;
			r->sino = st.st_ino;
			continue;
		}
		/* A symlink: is_dir and size describe what it points to, when that can be known. */
		if (fstatat(dfd, name, &st, 0) == 0) {
			r->flags |= REC_HAVE_STAT | (S_ISDIR(st.st_mode) ? REC_STAT_DIR : 0);
			r->size = (uint64_t)st.st_size;
			r->sdev = st.st_dev;
			r->sino = st.st_ino;
		}
	}
	if (!w->opts.readlink)
		return;
	for (size_t i = 0; i < l->n; i++) {
		struct rec *r = &l->recs[i];
		if (!(r->flags & REC_HAVE_LSTAT) || !S_ISLNK(r->lst.mode))
			continue;
		size_t want = r->lst.size ? (size_t)r->lst.size + 1 : PATH_MAX;
		if (hv_buf_reserve(&l->names, want + 1) != HV_OK || l->names.len + want > UINT32_MAX)
			continue;
		ssize_t n = readlinkat(dfd, l->names.data + r->name_off, l->names.data + l->names.len,
				       want);
		if (n < 0 || (size_t)n >= want)
			continue;
		r->target_off = (uint32_t)l->names.len;
		r->target_len = (uint32_t)n;
		l->names.len += (size_t)n;
		hv_buf_append_char(&l->names, '\0');
	}
}

/* Opens, reads, stats and sorts one directory into n->listing. Runs on any thread.
 * Returns false when a worker (not patient) ran short of descriptors: the job is then
 * untouched, for the consumer to run itself. */
static bool run_job(hv_walk *w, struct dnode *n, char *dbuf, bool patient)
{
	struct listing *l = &n->listing;
	int fd;
	if (n->parent) {
		int pfd = node_fd(w, n->parent, patient);
		if (pfd >= 0) {
			fd = open_evicting(w, pfd, n->name, dir_open_flags(n), patient);
			int err = errno;
			cache_unpin(w, n->parent);
			errno = err;
		} else {
			fd = -1;
		}
	} else {
		fd = open_evicting(w, AT_FDCWD, n->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC,
				   patient);
	}
	if (fd < 0) {
		if (!patient && (errno == EMFILE || errno == ENFILE))
			return false;
		l->err = errno;
		return true;
	}
	pthread_mutex_lock(&w->lock);
	cache_insert(w, n, fd);
	pthread_mutex_unlock(&w->lock);

	for (;;) {
		long got = syscall(SYS_getdents64, fd, dbuf, DENTS_BUF);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			l->err = errno;
			l->partial = true;
			break;
		}
		if (got == 0)
			break;
		for (long off = 0; off < got;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(dbuf + off);
			off += d->d_reclen;
			const char *nm = d->d_name;
			if (nm[0] == '.' && (nm[1] == '\0' || (nm[1] == '.' && nm[2] == '\0')))
				continue;
			if (excluded(w, nm))
				continue;
			if (listing_add(l, nm, strlen(nm), d->d_type) != 0) {
				l->err = ENOMEM;
				l->partial = true;
				goto read_done;
			}
		}
	}
read_done:
	stat_entries(w, fd, l);
	if (w->opts.sort == HV_SORT_NAME && l->n > 1)
		qsort_r(l->recs, l->n, sizeof(*l->recs), rec_cmp, l->names.data);
	cache_unpin(w, n);
	make_children(w, n);
	return true;
}

/* ---- the job queue and workers ---- */

static void abandon_children_locked(hv_walk *w, struct dnode *n);

/* Whether a comes before b in the consumer's pre-order. Walks up to the nearest common
 * ancestor; an ancestor comes before its descendants. */
static bool preorder_before(const struct dnode *a, const struct dnode *b)
{
	if (a->depth != b->depth) {
		const struct dnode *deep = a->depth > b->depth ? a : b;
		const struct dnode *shallow = deep == a ? b : a;
		while (deep->depth > shallow->depth)
			deep = deep->parent;
		if (deep == shallow)
			return a->depth < b->depth;
		if (a->depth > b->depth)
			a = deep;
		else
			b = deep;
	}
	while (a->parent != b->parent) {
		a = a->parent;
		b = b->parent;
	}
	return a->rec_index < b->rec_index;
}

static void heap_swap(struct dnode **q, size_t i, size_t j)
{
	struct dnode *t = q[i];
	q[i] = q[j];
	q[j] = t;
}

static void heap_push(hv_walk *w, struct dnode *n)
{
	size_t i = w->queue_len++;
	w->queue[i] = n;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!preorder_before(w->queue[i], w->queue[up]))
			break;
		heap_swap(w->queue, i, up);
		i = up;
	}
}

static struct dnode *heap_pop(hv_walk *w)
{
	struct dnode *top = w->queue[0];
	w->queue[0] = w->queue[--w->queue_len];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < w->queue_len && preorder_before(w->queue[l], w->queue[m]))
			m = l;
		if (r < w->queue_len && preorder_before(w->queue[r], w->queue[m]))
			m = r;
		if (m == i)
			break;
		heap_swap(w->queue, i, m);
		i = m;
	}
	return top;
}

/* Queues n for a worker if the read-ahead budget allows (w->lock held). Without workers
 * nothing is queued: the consumer reads each directory when it gets there. */
static void enqueue_locked(hv_walk *w, struct dnode *n)
{
	if (w->n_workers == 0 || n->state != JOB_NEW || w->ahead_nodes >= AHEAD_MAX_NODES ||
	    w->ahead_entries >= AHEAD_MAX_ENTRIES)
		return;
	if (w->queue_len == w->queue_cap) {
		size_t cap = w->queue_cap ? w->queue_cap * 2 : 256;
		/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
		struct dnode **q = realloc(w->queue, cap * sizeof(*q));
		if (!q)
			return; /* not read ahead: the consumer will read it itself */
		w->queue = q;
		w->queue_cap = cap;
	}
	n->state = JOB_QUEUED;
	if (!n->counted) {
		n->counted = true;
		w->ahead_nodes++;
	}
	n->refs++;
	heap_push(w, n);
	pthread_cond_signal(&w->work_cond);
}

static void enqueue_children_locked(hv_walk *w, struct dnode *n)
{
	for (size_t i = n->next_child; i < n->n_children; i++)
		enqueue_locked(w, n->children[i]);
}

static void *worker_main(void *arg)
{
	hv_walk *w = arg;
	char *dbuf = malloc(DENTS_BUF);
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->shutdown && w->queue_len == 0)
			pthread_cond_wait(&w->work_cond, &w->lock);
		if (w->shutdown)
			break;
		struct dnode *n = heap_pop(w);
		if (n->state != JOB_QUEUED || n->abandoned || !dbuf) {
			/* The consumer took it itself, or gave it up; drop the queue's ref. */
			node_unref_locked(w, n);
			continue;
		}
		n->state = JOB_RUNNING;
		pthread_mutex_unlock(&w->lock);
		bool done = run_job(w, n, dbuf, false);
		pthread_mutex_lock(&w->lock);
		if (!done) {
			/* Out of descriptors: give the job back; the consumer will read it. */
			n->state = JOB_NEW;
			node_unref_locked(w, n);
			pthread_cond_broadcast(&w->done_cond);
			continue;
		}
		n->state = JOB_DONE;
		if (n->counted)
			w->ahead_entries += n->listing.n;
		if (n->abandoned)
			abandon_children_locked(w, n);
		else
			enqueue_children_locked(w, n);
		node_unref_locked(w, n);
		pthread_cond_broadcast(&w->done_cond);
	}
	pthread_mutex_unlock(&w->lock);
	free(dbuf);
	return NULL;
}

/* Makes sure n's listing is there: waits for a worker, or reads it here. Then takes n out
 * of the read-ahead budget and queues its children. */
static void await_listing(hv_walk *w, struct dnode *n)
{
	pthread_mutex_lock(&w->lock);
	while (n->state != JOB_DONE) {
		if (n->state == JOB_RUNNING) {
			/* A worker has it; it finishes it or hands it back (JOB_NEW). */
			pthread_cond_wait(&w->done_cond, &w->lock);
			continue;
		}
		n->state = JOB_RUNNING;
		pthread_mutex_unlock(&w->lock);
		run_job(w, n, w->dents_buf, true);
		pthread_mutex_lock(&w->lock);
		n->state = JOB_DONE;
		if (n->counted)
			w->ahead_entries += n->listing.n;
	}
	if (n->counted) {
		n->counted = false;
		w->ahead_nodes--;
		w->ahead_entries -= n->listing.n;
	}
	enqueue_children_locked(w, n);
	pthread_mutex_unlock(&w->lock);
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

/* Releases a node the consumer will never reach (w->lock held), with its own unconsumed
 * children. Recursive, but bounded: only nodes read ahead have children here, at most
 * AHEAD_MAX_NODES of them, so the depth never follows the tree's. */
/* NOLINTNEXTLINE(misc-no-recursion): only read-ahead nodes recurse, at most AHEAD_MAX_NODES */
static void abandon_locked(hv_walk *w, struct dnode *n)
{
	n->abandoned = true;
	if (n->counted) {
		n->counted = false;
		w->ahead_nodes--;
		if (n->state == JOB_DONE)
			w->ahead_entries -= n->listing.n;
	}
	if (n->state == JOB_DONE)
		abandon_children_locked(w, n);
	node_unref_locked(w, n);
}

/* NOLINTNEXTLINE(misc-no-recursion): see abandon_locked */
static void abandon_children_locked(hv_walk *w, struct dnode *n)
{
	for (size_t i = n->next_child; i < n->n_children; i++)
		abandon_locked(w, n->children[i]);
	n->next_child = n->n_children;
}

static void pop_frame(hv_walk *w)
{
	struct frame *f = &w->frames[--w->n_frames];
	struct dnode *n = f->node;
	pthread_mutex_lock(&w->lock);
	/* Children left unconsumed (the entry limit was hit, or the walk is closed early). A
	 * worker may still be reading one; it holds its own reference. */
	abandon_children_locked(w, n);
	listing_free(&n->listing);
	node_unref_locked(w, n);
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
	await_listing(w, f->node);
	f->started = true;
	if (!l->err)
		return HV_OK;
	int err = l->err;
	l->err = 0;
	w->warnings++;
	hv_error_errno(HV_WARN, message_path(w, w->path.data, f->base_len), err);
	if (!l->partial)
		l->n = 0; /* nothing was read: the frame ends at once */
	return HV_WARN;
}

hv_status hv_walk_next(hv_walk *w, const hv_entry **out)
{
	*out = NULL;
	w->entry_parent = NULL;
	if (w->pending_warn.len) {
		hv_error_set(HV_WARN, "%s", w->pending_warn.data);
		hv_buf_truncate(&w->pending_warn, 0);
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
			return hv_error_set(HV_WARN, "%s: stopped after %llu entries (--max-entries)",
					    message_path(w, NULL, 0),
					    (unsigned long long)w->opts.max_entries);
		}
		size_t index = f->idx++;
		const struct rec *r = &l->recs[index];
		hv_buf_truncate(&w->path, f->base_len);
		if (f->base_len && hv_buf_append_char(&w->path, '/') != HV_OK)
			return HV_ENOMEM;
		if (hv_buf_append(&w->path, l->names.data + r->name_off, r->name_len) != HV_OK)
			return HV_ENOMEM;
		fill_entry(w, f, r);
		/* The parent stays alive until the next call: only hv_walk_next pops frames. */
		w->entry_parent = f->node;

		struct dnode *n = f->node;
		enum descend d = should_descend(w, n, r);
		if (d == LOOP) {
			/* Listed, not entered; the warning is the next call's answer. */
			w->warnings++;
			hv_buf_printf(&w->pending_warn,
				      "%s: not entered: it leads back to an ancestor directory",
				      message_path(w, w->path.data, w->path.len));
		} else if (d == DESCEND) {
			struct dnode *c;
			if (n->next_child < n->n_children &&
			    n->children[n->next_child]->rec_index == index) {
				c = n->children[n->next_child++]; /* its reference moves to the frame */
			} else {
				/* make_children ran out of memory for this one: make it now. */
				c = child_of(n, r, index);
				if (c) {
					pthread_mutex_lock(&w->lock);
					n->refs++;
					pthread_mutex_unlock(&w->lock);
				}
			}
			if (!c || push_frame(w, c, w->path.len, f->depth + 1) != 0) {
				if (c)
					node_unref(w, c);
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

hv_status hv_walk_open(hv_walk **out, const char *root, const hv_walk_opts *opts)
{
	*out = NULL;
	hv_walk_opts o;
	if (opts)
		o = *opts;
	else
		hv_walk_opts_init(&o);
	if (o.threads < 0 || o.threads > 1024)
		return hv_error_set(HV_EUSAGE, "bad thread count: %d", o.threads);

	struct stat st;
	if (stat(root, &st) != 0)
		return hv_error_errno(HV_ENOTDIR, root, errno);
	if (!S_ISDIR(st.st_mode))
		return hv_error_errno(HV_ENOTDIR, root, ENOTDIR);

	hv_walk *w = calloc(1, sizeof(*w));
	if (!w)
		return hv_error_set(HV_ENOMEM, "out of memory");
	w->opts = o;
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

	struct dnode *rootn = node_new(NULL, root, strlen(root));
	if (!rootn) {
		hv_walk_close(w);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	rootn->dev = st.st_dev;
	rootn->ino = st.st_ino;
	w->root_dev = st.st_dev;
	if (push_frame(w, rootn, 0, 0) != 0) {
		node_unref(w, rootn);
		hv_walk_close(w);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	/* Read the root now, so that a root that cannot be read fails the open, not the walk. */
	await_listing(w, rootn);
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
	/* One thread means no workers: the consumer reads every directory itself. */
	if (n > 1) {
		for (unsigned i = 0; i < n; i++) {
			if (pthread_create(&w->workers[w->n_workers], NULL, worker_main, w) != 0)
				break;
			w->n_workers++;
		}
	}
	*out = w;
	return HV_OK;
}

int hv_walk_openat(hv_walk *w, int flags)
{
	struct dnode *p = w->entry_parent;
	if (!p || !w->entry.name) {
		errno = EINVAL;
		return -1;
	}
	int dfd = node_fd(w, p, true);
	if (dfd < 0)
		return -1;
	int fd = open_evicting(w, dfd, w->entry.name, flags | O_NOFOLLOW | O_CLOEXEC, true);
	int err = errno;
	cache_unpin(w, p);
	errno = err;
	return fd;
}

uint64_t hv_walk_count(const hv_walk *w)
{
	return w->count;
}

uint64_t hv_walk_warnings(const hv_walk *w)
{
	return w->warnings;
}

const char *hv_walk_root(const hv_walk *w)
{
	return w->root_arg;
}

void hv_walk_close(hv_walk *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->shutdown = true;
	pthread_cond_broadcast(&w->work_cond);
	pthread_mutex_unlock(&w->lock);
	for (int i = 0; i < w->n_workers; i++)
		pthread_join(w->workers[i], NULL);
	while (w->n_frames > 0)
		pop_frame(w);
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->queue_len; i++)
		node_unref_locked(w, w->queue[i]);
	w->queue_len = 0;
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
