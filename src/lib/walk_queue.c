/* The directory walker: the job queue (a heap in pre-order), the workers and their batches, the
 * growing pool, and the consumer's wait for a listing. See walk.c for the design. */
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
 * nothing is queued: the consumer reads each directory when it gets there. The caller wakes
 * the workers (wake_workers_locked) once for all it queued. */
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
}

/* Wakes one idle worker when there is work (w->lock held). A worker that takes a batch and
 * leaves work behind wakes the next, so a burst of jobs costs one wake-up per worker, not
 * one per job. */
static void wake_workers_locked(hv_walk *w)
{
	if (w->queue_len > 0 && w->idle_workers > 0)
		pthread_cond_signal(&w->work_cond);
}

static void enqueue_children_locked(hv_walk *w, struct dnode *n)
{
	for (size_t i = n->next_child; i < n->n_children; i++)
		enqueue_locked(w, n->children[i]);
}

/* One job of a worker's batch. */
struct batch_job {
	struct dnode *n;
	struct dnode *pinned;  /* the parent whose descriptor this job pinned, or NULL */
	int fd;                /* n's descriptor hvw_read_dir left open, or -1 */
	bool ran;              /* this worker read it (it was not taken by the consumer) */
	bool handed_back;      /* out of descriptors: the consumer reads it */
};

/* How many jobs a worker takes at once (w->lock held): its share of the queue, at most
 * BATCH_MAX, and few enough that the descriptors batches hold before they are handed back
 * stay well inside the cache's share. */
static size_t batch_size_locked(const hv_walk *w)
{
	size_t k = w->queue_len / (size_t)w->n_workers;
	size_t fd_room = (size_t)w->fd_cap / (4 * (size_t)w->n_workers);
	if (k > fd_room)
		k = fd_room;
	if (k > BATCH_MAX)
		k = BATCH_MAX;
	return k ? k : 1;
}

/* Takes up to max jobs off the queue (w->lock held), pinning each one's parent descriptor
 * when it is open, so running them needs no lock. */
static size_t take_batch_locked(hv_walk *w, struct batch_job *jobs, size_t max)
{
	size_t k = 0;
	while (k < max && w->queue_len > 0) {
		struct dnode *n = heap_pop(w);
		if (n->state != JOB_QUEUED || n->abandoned) {
			/* The consumer took it itself, or gave it up; drop the queue's ref. */
			hvw_node_unref_locked(w, n);
			continue;
		}
		n->state = JOB_CLAIMED;
		hvw_listing_reuse_locked(w, &n->listing);
		struct batch_job *j = &jobs[k++];
		memset(j, 0, sizeof(*j));
		j->n = n;
		j->fd = -1;
		struct dnode *p = n->parent;
		if (p && p->fd >= 0) {
			p->pins++;
			hvw_lru_unlink(w, p);
			hvw_lru_push_front(w, p);
			j->pinned = p;
		}
	}
	return k;
}

/* Hands a finished job back (w->lock held): its listing and descriptor become the
 * consumer's, and its children are queued. */
static void finish_job_locked(hv_walk *w, struct batch_job *j)
{
	struct dnode *n = j->n;
	if (j->pinned)
		j->pinned->pins--;
	if (j->ran) {
		if (j->handed_back) {
			/* Out of descriptors: give the job back; the consumer will read it. */
			n->state = JOB_NEW;
		} else {
			hvw_publish_read_locked(w, n, j->fd);
			n->state = JOB_DONE;
			if (n->counted)
				w->ahead_entries += n->listing.n;
			if (n->abandoned)
				hvw_abandon_children_locked(w, n);
			else
				enqueue_children_locked(w, n);
		}
	}
	hvw_node_unref_locked(w, n);
	j->n = NULL;
}

/* Whether the consumer waits for one of jobs[from..to). */
static bool awaited_among(hv_walk *w, const struct batch_job *jobs, size_t from, size_t to)
{
	const struct dnode *a = atomic_load_explicit(&w->awaited, memory_order_relaxed);
	for (size_t i = from; a && i < to; i++)
		if (jobs[i].n == a)
			return true;
	return false;
}

/* Hands back jobs[from..to) (w->lock held), and wakes the consumer only when it waits for
 * one of them: a wake-up for another directory would only put it back to sleep, at the
 * price of two context switches. */
static void finish_jobs_locked(hv_walk *w, struct batch_job *jobs, size_t from, size_t to)
{
	bool wake = awaited_among(w, jobs, from, to);
	for (size_t i = from; i < to; i++)
		finish_job_locked(w, &jobs[i]);
	if (wake)
		pthread_cond_signal(&w->done_cond);
	wake_workers_locked(w);
}

/* CPU time and voluntary context switches of the calling thread so far. */
static void thread_usage(int64_t *cpu_ns, long *vcsw)
{
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru) != 0) {
		*cpu_ns = 0;
		*vcsw = 0;
		return;
	}
	*cpu_ns = ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
		  ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
	*vcsw = ru.ru_nvcsw;
}

static void pause_us(long us)
{
	struct timespec ts = {0, us * 1000};
	nanosleep(&ts, NULL);
}

/* Adds a worker when the pool may grow (w->lock held). */
static void grow_locked(hv_walk *w)
{
	if (w->shutdown || w->n_workers >= w->max_workers)
		return;
	if (pthread_create(&w->workers[w->n_workers], NULL, hvw_worker_main, w) != 0) {
		w->max_workers = w->n_workers; /* no more threads to be had: stop trying */
		return;
	}
	w->n_workers++;
	atomic_fetch_add(&w->grown, 1);
}

/* Closes the descriptor of a directory just read that has no subdirectory to enter, on the
 * worker that read it. Nothing opens below it, and closing it later would cost more: the
 * file system keeps what getdents read with the open file (ext4: a tree of every name), and
 * freeing that on the consumer, long after and on another CPU, missed the cache on every
 * node. A walk whose caller opens entries (hv_walk_openat) keeps them all, as the cache
 * allows, so those opens need no reopening; before its first such call a closed one is
 * reopened from its parent like an evicted one. */
static void close_leaf(struct batch_job *j)
{
	close(j->fd);
	j->fd = -1;
}

/* A worker: takes a batch of jobs, reads them without the lock, hands them back together
 * (at once when the consumer is waiting), and takes the next batch under the same lock.
 *
 * The pool grows while workers block on the disk: a batch that took longer than
 * SLOW_NS_PER_ENTRY per entry makes the worker measure its next batch with getrusage
 * (its CPU time and its voluntary context switches, which inside a batch come from waiting
 * on I/O, since a batch takes no lock); a measured batch that spent more than half its time
 * off the CPU and slept at least once per BLOCKED_ENTRIES_PER_WAIT entries, with work still
 * queued for every worker, adds a worker. A warm walk's batches are
 * fast, so it pays no extra system call and never grows. */
void *hvw_worker_main(void *arg)
{
	hv_walk *w = arg;
	char *dbuf = malloc(DENTS_BUF);
	struct batch_job jobs[BATCH_MAX];
	bool measure = false;
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->shutdown && w->queue_len == 0) {
			w->idle_workers++;
			pthread_cond_wait(&w->work_cond, &w->lock);
			w->idle_workers--;
		}
		if (w->shutdown)
			break;
		size_t k = take_batch_locked(w, jobs, dbuf ? batch_size_locked(w) : 0);
		if (!dbuf) {
			/* No buffer: this worker reads nothing, and empties the queue for the
			 * consumer to read each job itself. */
			while (w->queue_len > 0) {
				struct dnode *n = heap_pop(w);
				if (n->state == JOB_QUEUED)
					n->state = JOB_NEW;
				hvw_node_unref_locked(w, n);
			}
			continue;
		}
		wake_workers_locked(w);
		pthread_mutex_unlock(&w->lock);
		if (w->slow_claims)
			pause_us(200);

		int64_t t0 = hv_clock_ns(CLOCK_MONOTONIC), cpu0 = 0;
		long vcsw0 = 0;
		if (measure)
			thread_usage(&cpu0, &vcsw0);
		size_t entries = 0, done = 0;
		for (size_t i = 0; i < k; i++) {
			struct batch_job *j = &jobs[i];
			int expect = JOB_CLAIMED;
			if (atomic_compare_exchange_strong(&j->n->state, &expect, JOB_RUNNING)) {
				j->ran = true;
				int pfd = j->pinned ? j->pinned->fd : -1;
				if (!j->pinned) {
					pfd = hvw_node_fd(w, j->n->parent, false);
					if (pfd >= 0)
						j->pinned = j->n->parent;
				}
				if (pfd < 0 && (errno == EMFILE || errno == ENFILE)) {
					j->handed_back = true;
				} else if (pfd < 0) {
					j->n->listing.err = errno;
				} else {
					j->fd = hvw_read_dir(w, j->n, pfd, dbuf, false);
					if (j->fd < 0 && !j->n->listing.err)
						j->handed_back = true;
					else if (j->fd >= 0 && !j->n->children &&
						 !atomic_load_explicit(&w->keeps_fds,
									memory_order_relaxed))
						close_leaf(j);
				}
				entries += j->n->listing.n + 1;
			}
			if (i + 1 < k && awaited_among(w, jobs, done, i + 1)) {
				/* The consumer waits for one of these: hand them back now. */
				pthread_mutex_lock(&w->lock);
				finish_jobs_locked(w, jobs, done, i + 1);
				pthread_mutex_unlock(&w->lock);
				done = i + 1;
			}
		}
		int64_t wall = hv_clock_ns(CLOCK_MONOTONIC) - t0;
		bool blocked = false;
		if (measure) {
			int64_t cpu1;
			long vcsw1;
			thread_usage(&cpu1, &vcsw1);
			/* Blocked: more than half the time off the CPU, and sleeping often enough
			 * (one wait per BLOCKED_ENTRIES_PER_WAIT entries) that it is the disk,
			 * not the odd wait for memory or a busy machine's scheduler (that is
			 * preemption, not counted as a voluntary switch). */
			long waits = vcsw1 - vcsw0;
			blocked = waits >= 2 &&
				  (size_t)waits * BLOCKED_ENTRIES_PER_WAIT >= entries &&
				  (cpu1 - cpu0) * 2 < wall;
		}
		bool slow = wall > (int64_t)(entries ? entries : 1) * SLOW_NS_PER_ENTRY;
		if (w->assume_blocked)
			slow = blocked = true;

		pthread_mutex_lock(&w->lock);
		finish_jobs_locked(w, jobs, done, k);
		/* (The test switch grows the pool whatever the queue holds, so a test sees it
		 * grow however the threads happen to be scheduled.) */
		if (blocked && (w->assume_blocked || w->queue_len > (size_t)w->n_workers))
			grow_locked(w);
		measure = slow && w->n_workers < w->max_workers;
	}
	pthread_mutex_unlock(&w->lock);
	free(dbuf);
	return NULL;
}

/* Makes sure n's listing is there: waits for a worker, or reads it here (also when it sits
 * in a worker's batch not yet started). Then takes n out of the read-ahead budget and queues
 * its children. */
void hvw_await_listing(hv_walk *w, struct dnode *n)
{
	pthread_mutex_lock(&w->lock);
	for (;;) {
		/* One load of the state, and one compare-and-swap from what it said: a worker may
		 * move a job of its batch from CLAIMED to RUNNING at any moment, and a second look
		 * that saw RUNNING no longer and CLAIMED no longer would read the directory on
		 * both threads at once (each realloc'ing the records the other sorts). */
		int seen = atomic_load(&n->state);
		if (seen == JOB_DONE)
			break;
		if (seen == JOB_CLAIMED && w->slow_claims)
			pause_us(1000);
		if (seen == JOB_RUNNING ||
		    (seen == JOB_CLAIMED &&
		     !atomic_compare_exchange_strong(&n->state, &seen, JOB_RUNNING))) {
			/* A worker has it; it finishes it or hands it back (JOB_NEW). */
			atomic_store(&w->awaited, n);
			pthread_cond_wait(&w->done_cond, &w->lock);
			atomic_store(&w->awaited, NULL);
			continue;
		}
		n->state = JOB_RUNNING;
		hvw_listing_reuse_locked(w, &n->listing);
		pthread_mutex_unlock(&w->lock);
		hvw_run_job(w, n, w->dents_buf);
		pthread_mutex_lock(&w->lock);
		n->state = JOB_DONE;
		if (n->counted)
			w->ahead_entries += n->listing.n;
		/* Under the test switch a directory the consumer had to read itself counts as
		 * blocked too: on a loaded machine the workers may not get a batch before the
		 * consumer has read every directory, and the pool must still be seen growing. */
		if (w->assume_blocked)
			grow_locked(w);
	}
	if (n->counted) {
		n->counted = false;
		w->ahead_nodes--;
		w->ahead_entries -= n->listing.n;
	}
	enqueue_children_locked(w, n);
	wake_workers_locked(w);
	pthread_mutex_unlock(&w->lock);
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
		hvw_abandon_children_locked(w, n);
	hvw_node_unref_locked(w, n);
}

/* NOLINTNEXTLINE(misc-no-recursion): see abandon_locked */
void hvw_abandon_children_locked(hv_walk *w, struct dnode *n)
{
	for (size_t i = n->next_child; i < n->n_children; i++)
		abandon_locked(w, n->children[i]);
	n->next_child = n->n_children;
}
