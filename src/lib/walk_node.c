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
		hvw_listing_free(&n->listing);
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
