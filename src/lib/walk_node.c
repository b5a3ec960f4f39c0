/* The directory walker: directory nodes and their lifetime (references, freeing). See walk.c
 * for the design. */
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

struct dnode *hvw_node_new(struct dnode *parent, const char *name, size_t name_len)
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

void hvw_listing_free(struct listing *l)
{
	free(l->recs);
	hv_buf_free(&l->names);
	memset(l, 0, sizeof(*l));
}

/* Empties l (w->lock held), keeping its buffers for a later job when they are of a common
 * size: a listing is filled on a worker and emptied on the consumer, and handing the memory
 * back and forth instead of freeing it saves each directory its reallocs, and the consumer
 * the frees into the workers' malloc arenas, which take those arenas' locks against the
 * workers' own allocations. */
void hvw_listing_recycle_locked(hv_walk *w, struct listing *l)
{
	if (w->n_spare == SPARE_LISTINGS || !l->recs || l->cap > SPARE_MAX_RECS ||
	    l->names.cap > SPARE_MAX_NAMES) {
		hvw_listing_free(l);
		return;
	}
	struct listing *s = &w->spare[w->n_spare++];
	memset(s, 0, sizeof(*s));
	s->recs = l->recs;
	s->cap = l->cap;
	s->names.data = l->names.data;
	s->names.cap = l->names.cap;
	memset(l, 0, sizeof(*l));
}

/* Gives the empty listing l the buffers of a spare one, if there is one (w->lock held). */
void hvw_listing_reuse_locked(hv_walk *w, struct listing *l)
{
	if (w->n_spare == 0 || l->recs || l->names.data)
		return;
	*l = w->spare[--w->n_spare];
}

void hvw_spares_free(hv_walk *w)
{
	while (w->n_spare > 0)
		hvw_listing_free(&w->spare[--w->n_spare]);
}

/* Drops one reference (w->lock held); frees the node, and ancestors it kept alive, at zero.
 * Iterative, so a chain 100,000 levels deep unwinds without recursion. */
void hvw_node_unref_locked(hv_walk *w, struct dnode *n)
{
	while (n && --n->refs == 0) {
		struct dnode *parent = n->parent;
		if (n->fd >= 0) {
			close(n->fd);
			hvw_lru_unlink(w, n);
			w->open_fds--;
		}
		hvw_listing_recycle_locked(w, &n->listing);
		free(n->children);
		free(n->name);
		free(n);
		n = parent;
	}
}

void hvw_node_unref(hv_walk *w, struct dnode *n)
{
	pthread_mutex_lock(&w->lock);
	hvw_node_unref_locked(w, n);
	pthread_mutex_unlock(&w->lock);
}
