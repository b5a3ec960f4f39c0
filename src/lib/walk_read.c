/* The directory walker: reading one directory (a job): getdents64, one lstat per entry,
 * sorting, the subdirectories to enter. See walk.c for the design. */
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
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void stat_to_hv(const struct stat *st, hv_stat *out)
{
	HV_STAT_FROM(st, out);
}

static bool is_ancestor(const struct dnode *n, uint64_t dev, uint64_t ino)
{
	for (; n; n = n->parent)
		if (n->dev == dev && n->ino == ino)
			return true;
	return false;
}

/* Whether the walk enters record r of directory n. The job that makes n's children and
 * the consumer ask the same question, so they always agree. */
enum descend hvw_should_descend(const hv_walk *w, const struct dnode *n, const struct rec *r)
{
	if (w->opts.max_depth >= 0 && n->depth + 1 >= w->opts.max_depth)
		return NO_DESCEND;
	if (!(r->flags & REC_HAVE_LSTAT))
		/* lstat failed: nothing is known, nothing is entered, and a directory is warned of,
		 * or what may be one (no type in the listing) unless it has gone since */
		return !(r->flags & REC_NAMES) &&
				       (r->dtype == DT_DIR ||
					(r->dtype == DT_UNKNOWN && !(r->flags & REC_GONE)))
			       ? UNEXAMINED
			       : NO_DESCEND;
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
struct dnode *hvw_child_of(struct dnode *n, const struct rec *r, size_t index)
{
	struct dnode *c = hvw_node_new(NULL, n->listing.names.data + r->name_off, r->name_len);
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
		if (hvw_should_descend(w, n, &l->recs[i]) == DESCEND)
			count++;
	if (count == 0)
		return;
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	n->children = malloc(count * sizeof(*n->children));
	if (!n->children)
		return; /* the consumer makes each child when it gets there */
	for (size_t i = 0; i < l->n; i++) {
		if (hvw_should_descend(w, n, &l->recs[i]) != DESCEND)
			continue;
		struct dnode *c = hvw_child_of(n, &l->recs[i], i);
		if (!c)
			break;
		n->children[n->n_children++] = c;
	}
	/* The references the children take on n are added when the read is published. */
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

static int listing_add(struct listing *l, const char *name, size_t len, unsigned char dtype,
		       uint64_t ino)
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
	r->lst.ino = ino;
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
		if (w->names_only && r->dtype != DT_DIR && r->dtype != DT_UNKNOWN) {
			/* The entry's type and inode number, as the directory gives them. */
			r->flags |= REC_NAMES;
			r->lst.mode = DTTOIF(r->dtype);
			continue;
		}
		struct stat st;
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			if (errno == ENOENT)
				r->flags |= REC_GONE;
			r->lerr = errno > 0 && errno < 255 ? (uint8_t)errno : 255;
			continue;
		}
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

/* ext4 (with ext2 and ext3, one magic) reads an indexed directory in hash order, and a
 * 64-bit reader's position after its last entry is the end of the hash space, INT64_MAX:
 * ext4 answers a getdents64 from there with nothing, whatever was added since. So a listing
 * whose last entry's d_off is INT64_MAX is complete, and the call that would say so, one per
 * directory (4% of a warm walk's system calls), is not made. Only on the root's own file
 * system, known to be ext4 from the root's descriptor; elsewhere (another file system, or a
 * mount below the root) every directory is read until getdents64 returns 0. */
#define EXT4_MAGIC 0xEF53

static void note_root_fs(hv_walk *w, int fd)
{
	struct statfs sf;
	struct stat st;
	w->eof_by_offset = fstatfs(fd, &sf) == 0 && sf.f_type == EXT4_MAGIC && fstat(fd, &st) == 0;
	if (w->eof_by_offset)
		w->eof_dev = st.st_dev;
}

/* Opens n below the descriptor pfd (AT_FDCWD for the root), reads, stats and sorts it into
 * n->listing and makes its children, taking no lock: the caller publishes the result (the
 * descriptor into the cache, the children's references on n) under one lock. Returns the
 * open descriptor of n, or -1 with errno set when n could not be opened (then l->err is set
 * unless a worker, not patient, ran short of descriptors: the job is then untouched). */
int hvw_read_dir(hv_walk *w, struct dnode *n, int pfd, char *dbuf, bool patient)
{
	struct listing *l = &n->listing;
	int flags = n->parent ? hvw_dir_open_flags(n) : O_RDONLY | O_DIRECTORY | O_CLOEXEC;
	int fd = hvw_open_evicting(w, pfd, n->name, flags, patient);
	if (fd < 0) {
		if (!patient && (errno == EMFILE || errno == ENFILE))
			return -1;
		l->err = errno;
		return -1;
	}
	if (!n->parent)
		note_root_fs(w, fd);
	bool eof_by_offset = w->eof_by_offset && n->dev == w->eof_dev;
	bool hooked = hv__test_hook_active(HV__HOOK_WALK_GETDENTS);
	for (;;) {
		if (HV_UNLIKELY(hooked))
			hv__test_hook_call(HV__HOOK_WALK_GETDENTS, n->name);
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
		int64_t next = 0;
		for (long off = 0; off < got;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(dbuf + off);
			off += d->d_reclen;
			next = d->d_off;
			const char *nm = d->d_name;
			if (nm[0] == '.' && (nm[1] == '\0' || (nm[1] == '.' && nm[2] == '\0')))
				continue;
			if (excluded(w, nm))
				continue;
			unsigned char type = HV_UNLIKELY(w->no_dtype) ? DT_UNKNOWN : d->d_type;
			if (listing_add(l, nm, strlen(nm), type, d->d_ino) != 0) {
				l->err = ENOMEM;
				l->partial = true;
				goto read_done;
			}
		}
		if (eof_by_offset && next == INT64_MAX)
			break; /* the htree's end: the next call would return nothing */
	}
read_done:
	stat_entries(w, fd, l);
	if (w->opts.sort == HV_SORT_NAME && l->n > 1)
		qsort_r(l->recs, l->n, sizeof(*l->recs), rec_cmp, l->names.data);
	make_children(w, n);
	return fd;
}

/* Publishes what hvw_read_dir did (w->lock held): n's descriptor into the cache, unpinned, and
 * the references n's children hold on it. */
void hvw_publish_read_locked(hv_walk *w, struct dnode *n, int fd)
{
	if (fd >= 0) {
		hvw_cache_insert(w, n, fd);
		n->pins--;
	}
	n->refs += (int)n->n_children;
}

/* Reads n on the consumer's thread: opens its parent as needed, waiting out a shortage of
 * descriptors (patient). */
void hvw_run_job(hv_walk *w, struct dnode *n, char *dbuf)
{
	int pfd = AT_FDCWD;
	if (n->parent) {
		pfd = hvw_node_fd(w, n->parent, true);
		if (pfd < 0) {
			n->listing.err = errno;
			return;
		}
	}
	int fd = hvw_read_dir(w, n, pfd, dbuf, true);
	pthread_mutex_lock(&w->lock);
	if (n->parent)
		n->parent->pins--;
	hvw_publish_read_locked(w, n, fd);
	pthread_mutex_unlock(&w->lock);
}
