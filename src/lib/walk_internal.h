/* The directory walker's shared state, for its parts: walk.c (the consumer and the API),
 * walk_fdcache.c (the descriptor cache), walk_node.c (directory nodes and their lifetime),
 * walk_read.c (reading one directory: a job) and walk_queue.c (the job queue and the
 * workers). Not installed. */
#ifndef HARVEST_WALK_INTERNAL_H
#define HARVEST_WALK_INTERNAL_H

#include "harvest/walk.h"
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>


/* The read-ahead budget: directories queued or read but not yet reached by the consumer,
 * and the entries in those read. ~100 bytes an entry: the entry budget is ~12 MiB. */
#define AHEAD_MAX_NODES 4096
#define AHEAD_MAX_ENTRIES 131072
/* The getdents64 buffer. Large enough that a typical directory is read in one call. */
#define DENTS_BUF (64 * 1024)
/* Workers by default: one per CPU, at most MAX_WORKERS; while they block on the disk the
 * pool grows, up to MAX_GROWN_WORKERS (see hvw_worker_main). */
#define MAX_WORKERS 8
#define MAX_GROWN_WORKERS 32
/* Jobs a worker takes from the queue at once, and hands back at once. */
#define BATCH_MAX 16
/* Emptied listings kept for reuse (see hvw_listing_recycle_locked), and the largest kept. */
#define SPARE_LISTINGS 16
#define SPARE_MAX_RECS 512
#define SPARE_MAX_NAMES (16 * 1024)
/* A batch slower than this per entry makes the worker measure whether it is blocked. */
#define SLOW_NS_PER_ENTRY 10000
/* ... and counts it blocked when it slept at least once per this many entries. */
#define BLOCKED_ENTRIES_PER_WAIT 16

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
	/* Not stat'ed (a names-only walk, hv__walk_open_names): lst holds only the directory
	 * entry's type (in mode) and inode number. */
	REC_NAMES = 1 << 3,
	/* lstat said ENOENT: removed since it was listed (not a directory left unread). */
	REC_GONE = 1 << 4,
};

/* One directory entry as read by a job. */
struct rec {
	uint32_t name_off;    /* into listing.names */
	uint32_t name_len;
	uint32_t target_off;  /* symlink target into listing.names, when read */
	uint32_t target_len;
	uint8_t dtype;
	uint8_t flags;
	uint8_t lerr;         /* the errno of a failed lstat (255: one above) */
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

/* JOB_CLAIMED: in a worker's batch, not started; the worker and the consumer race to move it
 * to JOB_RUNNING with a compare-and-swap, so the consumer never waits behind a batch. */
enum job_state { JOB_NEW, JOB_QUEUED, JOB_CLAIMED, JOB_RUNNING, JOB_DONE };

/* A directory: to be read, being read, or on the consumer's stack. */
struct dnode {
	struct dnode *parent;
	char *name;              /* component in the parent; the root: the path as given */
	int fd;                  /* -1 when not open */
	int pins;                /* users of fd right now; pinned fds are never evicted */
	int refs;                /* frames, children, queue entries holding this node */
	uint64_t dev, ino;       /* what the parent's listing said (0/0: not yet known) */
	bool via_link;           /* reached through a symlink under follow */
	_Atomic int state;       /* an enum job_state; written under lock except CLAIMED -> RUNNING */
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
	/* The node whose listing the consumer waits for on done_cond, or NULL (written under
	 * lock; read without it by workers deciding whether to hand back early). */
	struct dnode *_Atomic awaited;
	pthread_t workers[MAX_GROWN_WORKERS];
	atomic_uint_fast64_t grown;    /* workers added because the others were blocked */
	int n_workers;
	int max_workers;            /* the pool may grow up to this many (n_workers: fixed) */
	int idle_workers;           /* waiting on work_cond */
	int n_spare;                /* listings in spare */
	bool shutdown;
	atomic_bool keeps_fds;      /* hv_walk_openat was called (see hvw_worker_main) */
	bool assume_blocked;        /* test switch: treat every batch as blocked (test_hook.h) */
	bool slow_claims;           /* test switch: widen a claimed job's window (test_hook.h) */
	bool no_dtype;              /* test switch: every entry's type unknown (test_hook.h) */
	bool names_only;            /* stat only directories (and unknown types): see REC_NAMES */
	/* The root's file system is ext2/3/4, on device eof_dev: there a listing whose last
	 * entry's d_off is the htree's end needs no further getdents64 (see hvw_read_dir). Set
	 * when the root is read, before any worker starts. */
	bool eof_by_offset;
	uint64_t eof_dev;
	/* Emptied listings whose buffers the next jobs reuse (guarded by lock). */
	struct listing spare[SPARE_LISTINGS];

	/* The descriptor cache (guarded by lock). */
	struct dnode *lru_head, *lru_tail;   /* head: most recently used */
	int open_fds, fd_cap;
	int fd_waited_ms;                    /* waits for a descriptor so far (hvw_open_evicting) */

	/* Consumer state (touched by the consumer thread only). */
	struct frame *frames;
	size_t n_frames, frames_cap;
	hv_buf path;
	hv_buf msg_path;
	hv_entry entry;
	struct dnode *entry_parent;   /* the directory holding the last entry */
	bool entry_named;             /* the last entry is REC_NAMES */
	hv_buf pending_warn;          /* a warning to give on the next call */
	bool pending_unread;          /* ... of the entry's directory, left unread */
	bool unread_warned;           /* the last call warned of a directory it could not read */
	size_t unread_len;            /* ... whose path is the first unread_len bytes of path */
	char *dents_buf;
	uint64_t count, warnings;
	bool limit_hit, finished;
};

/* UNEXAMINED: a directory, says the listing, or an entry whose type the listing does not give,
 * within the depth, whose lstat failed (its parent can be read but not searched): listed, not
 * entered, and warned of, so that nothing below it is left out in silence. */
enum descend { NO_DESCEND, DESCEND, LOOP, UNEXAMINED };

/* ---- the descriptor cache (walk_fdcache.c) ---- */
void hvw_lru_unlink(hv_walk *w, struct dnode *n);
void hvw_lru_push_front(hv_walk *w, struct dnode *n);
void hvw_cache_insert(hv_walk *w, struct dnode *n, int fd);
void hvw_cache_unpin(hv_walk *w, struct dnode *n);
int hvw_open_evicting(hv_walk *w, int dirfd, const char *name, int flags, bool patient);
int hvw_dir_open_flags(const struct dnode *n);
int hvw_node_fd(hv_walk *w, struct dnode *n, bool patient);

/* ---- nodes (walk_node.c) ---- */
struct dnode *hvw_node_new(struct dnode *parent, const char *name, size_t name_len);
void hvw_listing_free(struct listing *l);
void hvw_listing_recycle_locked(hv_walk *w, struct listing *l);
void hvw_listing_reuse_locked(hv_walk *w, struct listing *l);
void hvw_spares_free(hv_walk *w);
void hvw_node_unref_locked(hv_walk *w, struct dnode *n);
void hvw_node_unref(hv_walk *w, struct dnode *n);

/* ---- reading one directory (walk_read.c) ---- */
enum descend hvw_should_descend(const hv_walk *w, const struct dnode *n, const struct rec *r);
struct dnode *hvw_child_of(struct dnode *n, const struct rec *r, size_t index);
int hvw_read_dir(hv_walk *w, struct dnode *n, int pfd, char *dbuf, bool patient);
void hvw_publish_read_locked(hv_walk *w, struct dnode *n, int fd);
void hvw_run_job(hv_walk *w, struct dnode *n, char *dbuf);

/* ---- the job queue and workers (walk_queue.c) ---- */
void hvw_abandon_children_locked(hv_walk *w, struct dnode *n);
void *hvw_worker_main(void *arg);
void hvw_await_listing(hv_walk *w, struct dnode *n);

#endif
