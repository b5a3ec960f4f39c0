/* The directory walker: the descriptor cache: an LRU of directory descriptors, evicted under
 * EMFILE and reopened from the nearest open ancestor. See walk.c for the design. */
#include "walk_internal.h"

#include "harvest/collect.h"

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

void hvw_lru_unlink(hv_walk *w, struct dnode *n)
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

void hvw_lru_push_front(hv_walk *w, struct dnode *n)
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
			hvw_lru_unlink(w, n);
			w->open_fds--;
			closed++;
		}
		n = prev;
	}
	return closed;
}

/* Records a freshly opened, pinned descriptor for n, evicting others beyond the cap. */
void hvw_cache_insert(hv_walk *w, struct dnode *n, int fd)
{
	n->fd = fd;
	n->pins++;
	w->open_fds++;
	hvw_lru_push_front(w, n);
	if (w->open_fds > w->fd_cap)
		evict_fds(w, w->open_fds - w->fd_cap);
}

void hv__walk_cap_fds(hv_walk *w, int cap)
{
	if (cap < HV_COLLECT_MIN_FDS)
		cap = HV_COLLECT_MIN_FDS;
	pthread_mutex_lock(&w->lock);
	if (cap < w->fd_cap)
		w->fd_cap = cap;
	if (w->open_fds > w->fd_cap)
		evict_fds(w, w->open_fds - w->fd_cap);
	pthread_mutex_unlock(&w->lock);
}

void hvw_cache_unpin(hv_walk *w, struct dnode *n)
{
	pthread_mutex_lock(&w->lock);
	n->pins--;
	pthread_mutex_unlock(&w->lock);
}

/* openat that, when the process is out of descriptors, closes cached ones and tries again.
 * When every cached descriptor is pinned, a patient caller (the consumer) waits for the
 * workers to unpin theirs; a worker gives up at once and hands the job back, so a passing
 * shortage never becomes a lost directory. The waits of a whole walk add up to FD_WAIT_MS at
 * most, not so much per directory: a shortage that does not pass (descriptors the caller's
 * other threads hold, the system's file table full) then costs each directory one failed
 * open and its warning, with the error as openat gave it (EMFILE or ENFILE), not a stall. */
enum { FD_WAIT_MS = 5000 };

int hvw_open_evicting(hv_walk *w, int dirfd, const char *name, int flags, bool patient)
{
	for (;;) {
		int fd = openat(dirfd, name, flags);
		if (fd >= 0 || (errno != EMFILE && errno != ENFILE))
			return fd;
		int err = errno;
		pthread_mutex_lock(&w->lock);
		int closed = evict_fds(w, w->open_fds / 4 + 1);
		/* Lower the cap, so the cache stops competing with the rest of the process. */
		if (w->open_fds > 16)
			w->fd_cap = w->open_fds;
		bool wait = closed == 0 && patient && w->fd_waited_ms < FD_WAIT_MS;
		if (wait)
			w->fd_waited_ms++;
		pthread_mutex_unlock(&w->lock);
		if (closed == 0) {
			if (!wait) {
				errno = err;
				return -1;
			}
			struct timespec ms = {0, 1000000};
			nanosleep(&ms, NULL);
		}
	}
}

int hv__walk_fd_waited_ms(hv_walk *w)
{
	pthread_mutex_lock(&w->lock);
	int ms = w->fd_waited_ms;
	pthread_mutex_unlock(&w->lock);
	return ms;
}

int hvw_dir_open_flags(const struct dnode *n)
{
	int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK;
	return n->via_link ? flags : flags | O_NOFOLLOW;
}

/* Returns a pinned descriptor of n (call hvw_cache_unpin after use), reopening it from the
 * nearest open ancestor when it was evicted, or -1 with errno set. */
int hvw_node_fd(hv_walk *w, struct dnode *n, bool patient)
{
	pthread_mutex_lock(&w->lock);
	if (n->fd >= 0) {
		n->pins++;
		hvw_lru_unlink(w, n);
		hvw_lru_push_front(w, n);
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
			hvw_cache_unpin(w, a);
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
		int flags = c->parent ? hvw_dir_open_flags(c) : O_RDONLY | O_DIRECTORY | O_CLOEXEC;
		int fd = hvw_open_evicting(w, cur, c->name, flags, patient);
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
		hvw_cache_unpin(w, a);
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
		hvw_cache_insert(w, n, cur);
	}
	pthread_mutex_unlock(&w->lock);
	return n->fd;
}
