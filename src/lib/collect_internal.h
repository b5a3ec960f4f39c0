/* Private to the collector and its parts (collect.c, collect_snapshot.c, collect_pipe.c), and
 * what shares its rules: the walk of a collect. Not installed. */
#ifndef HARVEST_COLLECT_INTERNAL_H
#define HARVEST_COLLECT_INTERNAL_H

#include "harvest/collect.h"
#include "harvest/mime.h"
#include "harvest/walk.h"
#include "harvest/sys/store.h"
#include "internal.h"
#include "mime_internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Opens the walk a collect or a snapshot of dir makes with o: its excludes, and the default
 * ones (names starting with '.', and __pycache__) unless o->include_hidden; its threads and
 * xdev. `harvest mime DIR` walks the same way. */
hv_status hv_collect_walk_open(hv_walk **w, const char *dir, const hv_collect_opts *o,
			       hv_walk_sort sort);
/* The same walk listing names only (hv__walk_open_names): a run's snapshot in memory. */
hv_status hv_collect_walk_open_names(hv_walk **w, const char *dir, const hv_collect_opts *o);

/* ---- Descriptors ----
 *
 * The walker opens directories through a cache of descriptors that it trims when the process
 * runs out (EMFILE), but some it cannot give up while it works: the root's, two to reopen an
 * evicted directory from its nearest open ancestor, and the one of the file being opened.
 * With fewer free than that, a collect or a snapshot is refused at once rather than left to
 * fail (or wait) at every directory. */
#define HVC_WALK_FDS HV_COLLECT_MIN_FDS

/* The database's own files, which are never artifacts wherever the database lives. */
struct hvc_db_files {
	struct {
		uint64_t dev, ino;
	} ids[4];
	size_t n;
};

/* ---- snapshots in memory ----
 * The entries in walk order (HV_SORT_NAME, the order of hv_store_path_cmp), each its depth and
 * base name (the names in one arena: a path is its ancestors' names, which pre-order puts
 * before it, so a reader rebuilds each path from the last one and memory grows with the
 * entries' names, not with their depth), the few racy digests apart: a run's snapshot costs
 * one walk and no I/O beyond it.
 *
 * On a file system that stamps ctime from this machine's clock at nanoseconds (ext4, XFS,
 * Btrfs, tmpfs: hvc_ctime_trusted), a file needs no lstat before the run: its name, type and
 * inode number come with the directory's listing (a "named" entry), and whatever changes the
 * file after the snapshot sets its ctime to a time not older than since_ns, the coarse clock
 * once it has passed the real time at the walk's start (file times come from that clock, or
 * are finer and later). So the walk
 * before the command costs getdents64 and one lstat per directory, not one per entry. Entries
 * elsewhere (another file system, one with coarse times, a type the listing does not give)
 * keep their lstat state and the racy rule. */
struct hvc_mem_entry {
	size_t off, len;    /* the base name in names */
	size_t depth;       /* children of the root: 1 */
	hv_stat st; /* named: only mode's type and ino */
	size_t sha; /* 1 + index in shas, 0: none */
	bool named;
};

/* Whether a named entry has changed since, by its ctime now (see hvc_mem_changed). */
struct hvc_since_clock {
	int64_t since_ns;  /* a ctime not older than this is a change since the snapshot */
	int64_t now_ns;    /* the clock when last read: a ctime later than now is from before */
	bool no_upper;     /* the clock was set back since the snapshot: no "later than now" */
};

struct hv_mem_snapshot {
	char *root;
	const hv_store *st;
	struct hvc_db_files dbf;
	hv_buf names;
	struct hvc_mem_entry *e;
	size_t n, cap;
	size_t e_present, names_present; /* hv_prefault_ahead()'s done, of e and names */
	size_t last_depth; /* the last entry's; an entry is at most one deeper */
	char (*shas)[65];
	size_t n_shas, cap_shas;
	size_t n_named;
	int64_t since_ns;  /* see above; set when n_named */
	int64_t clock_off; /* CLOCK_REALTIME - CLOCK_MONOTONIC at since_ns */
	hv_buf filters;    /* hvc_filters_key() of the options it was taken with */
	hv_buf unread;     /* the directories it could not read, each path ended by a NUL */
};

/* The clock a collect compares m's named entries with, read as the collect starts. */
void hvc_since_clock_init(const hv_mem_snapshot *m, struct hvc_since_clock *c);
/* Whether a named entry whose file's ctime is now ctime_ns was changed since the snapshot. */
bool hvc_mem_changed(struct hvc_since_clock *c, int64_t ctime_ns);

#define HVC_PIPE_SLOTS 64
#define HVC_PIPE_MAX_THREADS 7 /* workers, beside the loop: threads 0 means up to 8 in all */

enum hvc_job_state {
	HVC_JOB_READY,   /* needs no work: decided by the loop */
	HVC_JOB_QUEUED,  /* to be read (and detected) */
	HVC_JOB_CLAIMED, /* being read by some thread */
	HVC_JOB_DONE,
};

/* What the read found (job.outcome). */
enum { HVC_READ_OK, HVC_READ_TOO_LARGE, HVC_READ_ERROR, HVC_READ_SAME, HVC_READ_NOMEM };

struct hvc_job {
	enum hvc_job_state state; /* under pipe.mu */
	/* The entry, copied: the walker's lives until its next step. */
	char *path;
	size_t path_len, name_len;
	hv_stat lst;
	uint64_t seen; /* entries walked so far, for the progress callback */
	/* Decided by the loop before the limit check (a symlink, a FIFO...): skip with this. */
	const char *early_reason;
	/* Decided by the loop after it (the open failed, the file changed): skip with this. */
	const char *late_reason;
	bool has_size;
	uint64_t size;
	char *error;
	const char *change;   /* "created", "modified" or NULL (no snapshot) */
	bool racy;            /* compare_sha holds the snapshot's digest */
	char compare_sha[65];
	bool cached_hit;      /* --no-content and the cache knew type and digest: no read */
	char cached_sha[65];  /* the cache's digest of this file, "" if none */
	char *warning;        /* libmagic's worker died or hung on it: typed octet-stream */
	bool untyped;         /* no detector could be had for this collect: octet-stream */
	int fd;
	hv_stat fs;           /* fstat of fd */
	char *raw;            /* libmagic's answer: from the cache, or detected by the read */
	bool detected;        /* raw is new: cache it */
	/* Set by the read. */
	int outcome;
	unsigned char *buf;
	size_t len;
	char sha[65];
	bool spooled;         /* the len bytes are in the spool at spool_off, buf is NULL */
	uint64_t spool_off;
	size_t spool_len;     /* while a spooled content's head is in buf: its whole length */
};

struct hvc_pipe {
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* a file was queued, or stop */
	pthread_cond_t done_cv; /* a file was read */
	struct hvc_job slots[HVC_PIPE_SLOTS];
	uint64_t head, tail, next_claim; /* absolute positions: slot = position % HVC_PIPE_SLOTS */
	uint64_t window_bytes;
	uint64_t queued_files, queued_bytes; /* all queued so far (see pipe_wants_thread) */
	int open_fds, max_fds; /* descriptors held by queued jobs, and their budget */
	const hv_collect_opts *o;
	hvm_memo *memo; /* libmagic's answers by SHA-256 (NULL: none kept) */
	/* spool_content: files are read straight into it, never whole in memory (NULL: into
	 * memory) */
	hv_content_spool *spool;
	pthread_t threads[HVC_PIPE_MAX_THREADS];
	int n_threads, max_threads;
	bool stop;
};


/* collect.c: the prologue of every collect and snapshot, the descriptors, the warnings, and the
 * database's own files. */
/* opts, or when it is NULL the defaults (hv_collect_opts_init), made in *defaults. */
const hv_collect_opts *hvc_opts_or_defaults(const hv_collect_opts *opts,
					    hv_collect_opts *defaults);
/* The absolute path of dir (realpath, malloc'd in *root): HV_ENOTDIR when it is missing or
 * not a directory, HV_EIO for any other failure, the error naming dir. */
hv_status hvc_abs_root(const char *dir, char **root);
/* Whether enough descriptors are free for a walk of dir and extra more (*avail: how many are);
 * the error names dir and the limit. */
hv_status hvc_check_fds(const char *dir, int extra, int *avail);
void hvc_warn(const hv_collect_opts *o, const char *msg);
void hvc_db_files_init(struct hvc_db_files *d, const hv_store *st);
bool hvc_is_db_file(const struct hvc_db_files *d, const hv_stat *s);
bool hvc_is_db_path(const char *root, const hv_store *st, const hv_entry *e);
/* The options that decide which entries a walk sees (include_hidden, xdev, the excludes, in
 * any order, repeated or not) as one canonical byte string in *key: what a snapshot records,
 * so a collect compared with it must see the same entries. */
hv_status hvc_filters_key(const hv_collect_opts *o, hv_buf *key);
/* HV_OK when a collect with o may be compared with a snapshot (id; 0: one in memory) taken
 * with the filters key (NULL: not recorded, so not checked); else HV_EUSAGE saying how they
 * differ. */
hv_status hvc_filters_check(const hv_collect_opts *o, int64_t id, const char *key, size_t len);

/* collect_pipe.c: the read-ahead window. */
void hvc_job_clear(struct hvc_job *j);
int hvc_fd_budget(int avail);
void hvc_pipe_init(struct hvc_pipe *p, const hv_collect_opts *o, int max_fds);
void hvc_pipe_destroy(struct hvc_pipe *p);
struct hvc_job *hvc_pipe_head(struct hvc_pipe *p, hv_magic *magic, bool wait);
struct hvc_job *hvc_pipe_slot(struct hvc_pipe *p);
void hvc_pipe_push(struct hvc_pipe *p, bool queued);
/* How many copies within a batch were detected on their own, their original's detection
 * having failed with nothing to reuse, in this process: for tests. */
unsigned long hvc_copies_detected_alone(void);
int hvc_pipe_open_fds(struct hvc_pipe *p);
bool hvc_pipe_full(struct hvc_pipe *p, uint64_t size, bool opens);

/* collect_spool.c: the temporary file of spooled contents (hv_collect_opts.spool_content). */
hv_status hvc_spool_open(hv_content_spool **out);
/* Appends n bytes; *off gets where they start. */
hv_status hvc_spool_put(hv_content_spool *s, const void *data, size_t n, uint64_t *off);
/* A region of n bytes of its own (any thread): its offset. */
uint64_t hvc_spool_reserve(hv_content_spool *s, uint64_t n);
hv_status hvc_spool_write(hv_content_spool *s, uint64_t off, const void *data, size_t n);
hv_status hvc_spool_read(const hv_content_spool *s, uint64_t off, void *buf, size_t n);
/* The errno of the first write to the spool that failed (no space, a quota), else 0: from
 * then on contents are kept in memory, as when no spool could be made. */
int hvc_spool_failed(const hv_content_spool *s);
const char *hvc_spool_dir(const hv_content_spool *s);
void hvc_spool_close(hv_content_spool *s);

#endif
