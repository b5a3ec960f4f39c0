/* Private to the MIME module: what mime.c needs from mime_refine.c and mime_worker.c. Not
 * installed. */
#ifndef HARVEST_MIME_INTERNAL_H
#define HARVEST_MIME_INTERNAL_H

#include "harvest/mime.h"
#include "harvest/store.h"
#include "harvest/walk.h"
#include "internal.h"

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Whether two hv_stats describe the same file in the same state: its type, device, inode,
 * size, mtime and ctime (what a MIME cache entry is keyed and checked on). */
static inline bool hvm_same_state(const hv_stat *a, const hv_stat *b)
{
	return (a->mode & S_IFMT) == (b->mode & S_IFMT) && a->dev == b->dev && a->ino == b->ino &&
	       a->size == b->size && a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

/* The process-wide default refinement db ("/usr/share/mime"), parsed on the first call; later
 * calls, from any thread, get the same immutable db or the same error. */
hv_status hv_mime_default_db(const hv_mime_db **out);

/* The fingerprint of the tables hv_mime_refine() uses with the default db (shared-mime-info's
 * files, the built-in table, the rules' version), taken once per process and consistent with
 * the db this process loads; NULL when it cannot be known (the files changed meanwhile): then
 * no refined answer may be cached or reused. */
const char *hvm_refine_fingerprint(void);

/* hv_magic_open() without loading the database: hv_magic_fingerprint() and friends work at
 * once, the database is loaded (or the worker started) on the first detection. */
hv_status hvm_magic_open_lazy(hv_magic **out, const char *database, int extra_flags);

/* hv_mime_detect_paths() for paths the caller has just lstat'ed as regular files: each is
 * opened and fstat'ed (a swap since is still caught) but not lstat'ed again. With expect (the
 * caller's lstat of each path), moved[i] is set when what was opened is not that file in that
 * state (a directory of the path swapped, the file replaced or written since): its answer is
 * right for the path now, but not for the lstat a cache would keep it under. */
hv_status hvm_detect_regular(const char *const *paths, size_t n, const hv_mime_opts *opts,
			     const hv_stat *const *expect, unsigned char *moved,
			     hv_mime_result **results);

/* ---- The isolated libmagic worker (mime_worker.c) ---- */

typedef struct hvm_worker hvm_worker;

/* Whether hv_magic_open() isolates (hv_magic_set_isolation; on by default). */
bool hvm_isolation(void);
/* Starts the process that forks the workers, if not running yet (see mime_worker.c). */
void hvm_spawner_prepare(void);
/* The spawner's process id, -1 when it is not running (for tests; a run's end_descendants
 * leaves it alone through hv__own_child_add). */
pid_t hvm_spawner_pid(void);
/* Forks a worker with database loaded under flags, then installs its seccomp filter. The
 * spawner loads it once for every worker of the same fingerprint (hv_magic_fingerprint; NULL:
 * the worker loads it itself). HV_EIO when the database cannot be loaded (libmagic's reason). */
hv_status hvm_worker_start(hvm_worker **out, const char *database, const char *fingerprint,
			   int flags, size_t bytes_max);
void hvm_worker_stop(hvm_worker *w);
/* Starts a worker for the default database ahead of need, without waiting for it: the next
 * hvm_worker_start for the same database, fingerprint and flags takes it over (and waits for
 * it then). For a caller that knows files are coming (a run whose events name some) and has
 * other work to do first: the worker's start-up runs meanwhile. Nothing when isolation is off,
 * a worker is already waiting, or the spawner cannot start it. Call it while the process has
 * no other thread (it may fork the spawner). */
void hvm_worker_prestart(void);
/* The process id of the worker hvm_worker_prestart started, while it waits to be taken (-1:
 * none waits): for tests. */
pid_t hvm_worker_spare_pid(void);
/* Whether the waiting worker has said it is ready (its answer unread) within ms: for tests. */
bool hvm_worker_spare_ready(int ms);
/* Reads HARVEST_TEST_WORKER_FAULT again (it is read once, at the first spawn): for a test that
 * sets or unsets it later, while no other thread is in libharvest. */
void hvm_worker_faults_reload(void);
/* The worker's process id (-1 when none is running): for tests. */
pid_t hvm_worker_pid(const hvm_worker *w);
/* Whether the running worker inherited the spawner's loaded database (did not load it itself):
 * for tests. */
bool hvm_worker_inherited(const hvm_worker *w);
/* libmagic's answer for the regular file open on fd (fd >= 0, at offset 0: magic_descriptor)
 * or for buf[0..len) (fd < 0: magic_buffer), into *answer. A worker that dies or exceeds the
 * time limit is killed (replaced on the next call): *answer is then
 * "application/octet-stream" and the status HV_WARN, naming what and why. */
hv_status hvm_worker_detect(hvm_worker *w, int fd, const void *buf, size_t len, const char *what,
			    hv_buf *answer);
/* The most files hvm_worker_detect_fds and hvm_worker_detect_bufs take at once, and the most
 * bytes (all buffers together) hvm_worker_detect_bufs does. */
enum { HVM_WORKER_BATCH_MAX = 16, HVM_WORKER_BATCH_BYTES = 60 * 1024 };
/* hvm_worker_detect for the k (1 to HVM_WORKER_BATCH_MAX) regular files open on fds (each at
 * offset 0), in one round trip: answers[i] and rcs[i] are what hvm_worker_detect would give
 * for fds[i] (whats[i] names it), errs[i] the message of an rcs[i] that is not HV_OK
 * (malloc'd; NULL when out of memory) and NULL otherwise. When the worker dies, hangs or
 * answers short, it is stopped and each file is asked again on its own, so only the file at
 * fault gets the fallback. Returns HV_OK, or a failure of the call itself (no worker could
 * be started, out of memory), when rcs and errs say nothing. */
hv_status hvm_worker_detect_fds(hvm_worker *w, const int *fds, size_t k,
				const char *const *whats, hv_buf *answers, hv_status *rcs,
				char **errs);
/* The same for k (1 to HVM_WORKER_BATCH_MAX) buffers bufs[i][0..lens[i]) of at most
 * HVM_WORKER_BATCH_BYTES together, each as hvm_worker_detect(w, -1, bufs[i], lens[i], ...)
 * would answer it. */
hv_status hvm_worker_detect_bufs(hvm_worker *w, const void *const *bufs, const size_t *lens,
				 size_t k, const char *const *whats, hv_buf *answers,
				 hv_status *rcs, char **errs);
/* How many batches of more than one file hvm_worker_detect_fds and hvm_worker_detect_bufs
 * have had answered whole by a worker, not asked again file by file (for tests). */
unsigned long hvm_worker_batches(void);

/* hv_magic_buffer for k files at once: bufs[i][0..lens[i]), fds[i] (or -1) and paths[i] (or
 * NULL) as its arguments. types[i] gets the answer (malloc'd; NULL when there is none, or out
 * of memory), rcs[i] the status and errs[i] the message of a status that is not HV_OK
 * (malloc'd; NULL when out of memory). Through a sandboxed worker, the buffers it would be
 * sent inline go to it in batches (hvm_worker_detect_bufs): one round trip for several. */
void hvm_magic_buffers(hv_magic *m, size_t k, const void *const *bufs, const size_t *lens,
		       const int *fds, const char *const *paths, char **types, hv_status *rcs,
		       char **errs);

/* The process id of m's libmagic worker, -1 when it has none (not isolated, not loaded yet, or
 * killed and not yet replaced): for tests. */
pid_t hvm_magic_worker_pid(const hv_magic *m);
bool hvm_magic_worker_inherited(const hv_magic *m);
/* The libmagic flags the handle loads its database with (or its worker does). */
int hvm_magic_flags(const hv_magic *m);

/* How many times this process loaded a libmagic database in-process or started a worker: for
 * tests of lazy loading. */
unsigned hvm_magic_loads(void);

/* Opens a read transaction on st around a batch of MIME cache lookups when none is open (SQLite
 * then takes its shared lock once, not once per statement); *began says whether
 * hvm_read_end() is to end it. Neither fails: without the transaction each lookup reads on
 * its own. End it before anything writes the cache (hv_store_flush). */
void hvm_read_begin(hv_store *st, bool *began);
void hvm_read_end(hv_store *st, bool began);

/* How many answers hv_mime_detect_cached() and hv_mime_detect_dir() took refined from the
 * cache: for tests. */
unsigned long hvm_refined_hits(void);
void hvm_count_refined_hit(void);

/* ---- The MIME cache's lookups of a batch (store_mime.c) ---- */

struct hvst_mime_hit;
typedef struct hvst_mime_key {
	const hv_stat *s;             /* the file's lstat */
	const char *name;             /* its base name, for the refinement kept with the answer */
	size_t name_len;
	struct hvst_mime_hit *out;    /* its answer (hvst_mime_lookup_refined's) */
} hvst_mime_key;
/* hvst_mime_lookup_refined() for each of keys[0..n) (refine_fp NULL: no refined answers), read
 * in the table's order (see store_mime.c), in the caller's read transaction. On failure no key
 * has an answer. */
hv_status hvst_mime_lookup_many(hv_store *st, const char *fingerprint, const char *refine_fp,
				hvst_mime_key *keys, size_t n);

/* ---- libmagic's answers by content within one collect (mime_memo.c) ---- */

typedef struct hvm_memo hvm_memo;
/* NULL when out of memory: callers then detect every file. Thread-safe. */
hvm_memo *hvm_memo_new(void);
void hvm_memo_free(hvm_memo *m);
/* The raw answer recorded for the content whose SHA-256 is sha (64 hex digits), as a new
 * string; NULL when none (or m is NULL). */
char *hvm_memo_get(hvm_memo *m, const char *sha);
/* Records raw as the answer for sha; a failure only loses the reuse. */
void hvm_memo_put(hvm_memo *m, const char *sha, const char *raw);
/* How many hvm_memo_get calls found an answer in this process: for tests. */
unsigned long hvm_memo_hits(void);

/* ---- libmagic's regular expressions, prefiltered (mime_rx.c) ---- */

enum { HVM_RX_LITS = 8, HVM_RX_LIT_MAX = 32 };
/* A necessary condition for an expression to match: the subject holds at least one of n
 * literals (n == 0: no condition is known, the expression must be run). */
struct hvm_rx_need {
	unsigned n;
	unsigned char len[HVM_RX_LITS];
	char lit[HVM_RX_LITS][HVM_RX_LIT_MAX + 1];
};
/* The condition for pattern as regcomp(pattern, cflags) compiles it. */
void hvm_rx_analyze(const char *pattern, int cflags, struct hvm_rx_need *out);
/* False only when no match of an expression with this condition can be found in s. */
bool hvm_rx_may_match(const struct hvm_rx_need *need, const char *s);
/* Routes libmagic's regcomp/regexec/regfree through the filter in this process, for the
 * spawner (and the workers it forks) only; false when libmagic's entries cannot be found or
 * rewritten (the expressions then run unfiltered, with the same answers). */
bool hvm_rx_hook_libmagic(void);
/* How many regexec calls the filter answered without running the expression, in this process:
 * for tests. */
unsigned long hvm_rx_skipped(void);

#endif
