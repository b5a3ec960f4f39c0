/* Private helpers shared by libharvest's modules. Not installed. */
#ifndef HARVEST_INTERNAL_H
#define HARVEST_INTERNAL_H

#include "harvest/types.h"
#include "harvest/walk.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#define HV_ATTR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define HV_LIKELY(x) __builtin_expect(!!(x), 1)
#define HV_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Whether the process runs under valgrind, which supports neither a seccomp filter nor a
 * clone that shares memory other than as a thread or a vfork: the callers take another way
 * there. Always false where valgrind's header is not installed. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define HV_UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef HV_UNDER_VALGRIND
#define HV_UNDER_VALGRIND() false
#endif

/* A public entry point's first check: a NULL where it needs a pointer is the caller's mistake,
 * refused with HV_EUSAGE "<function>: missing argument", never a crash (README, "The error
 * model"). */
#define HV_NEED(cond)                                                                        \
	do {                                                                                 \
		if (HV_UNLIKELY(!(cond)))                                                    \
			return hv_error_set(HV_EUSAGE, "%s: missing argument", __func__);    \
	} while (0)

/* hv_error_set (types.h) sets the calling thread's last error and returns status, so
 * failures read `return hv_error_set(HV_EIO, "%s: %s", path, strerror(errno));`. */
/* A user callback (what: "the chunk callback") returned rc < 0, the thread's error cleared
 * before it was called: the message it set (through hv_error_set, or a libharvest call whose
 * failure it passed on, whatever that call's status) is kept, with status rc; without one,
 * the message says which callback failed. */
hv_status hv__callback_failed(hv_status rc, const char *what);
/* Calls a user's message callback (a warning, a removal's error) with the thread's last error
 * kept across it: a callback that calls libharvest itself changes neither the message nor
 * the status the running call returns with. msg may be hv_error_last() itself. */
void hv__call_message_fn(void (*fn)(void *ctx, const char *msg), void *ctx, const char *msg);
/* The same with the reason taken from errnum: "<path>: <strerror(errnum)>". */
hv_status hv_error_errno(hv_status status, const char *path, int errnum);

/* The size of the last error's message, NUL included: a longer one keeps its start and its
 * end (the reason), with "..." between. */
#define HV_ERROR_MAX 4096
/* The last error, kept whole across a cleanup (a rollback, a close, a best-effort write) that
 * may set another: hv_error_save before it, then `return hv_error_restore(&saved, rc);` (the
 * status the caller returns), or hv_error_restore(&saved, saved.status) to put back the saved
 * status too. The one way to do it: no module keeps a copy of the message itself. */
typedef struct hv_error_saved {
	char message[HV_ERROR_MAX];
	hv_status status;  /* hv_error_last_status() when saved */
} hv_error_saved;
void hv_error_save(hv_error_saved *saved);
hv_status hv_error_restore(const hv_error_saved *saved, hv_status status);

/* hv_json_key for a key the caller knows is plain ASCII (nothing to escape), with its
 * length: no scan for its end, no escaping. HV_JSON_KEY(j, "name") takes a literal's. */
struct hv_json;
void hv__json_key_plain(struct hv_json *j, const char *key, size_t len);
#define HV_JSON_KEY(j, lit) hv__json_key_plain((j), "" lit "", sizeof(lit) - 1)
/* Makes j's status HV_EUSAGE (unless it failed already): a NULL argument to a record writer. */
void hv__json_fail(struct hv_json *j);

/* A growing byte buffer. Always NUL-terminated after the first append. */
typedef struct hv_buf {
	char *data;
	size_t len;
	size_t cap;
	bool failed; /* an append ran out of memory: the contents lack it (sticky) */
} hv_buf;

/* Makes room for n more bytes; HV_ENOMEM on failure (the buffer is unchanged). */
hv_status hv_buf_reserve(hv_buf *b, size_t n);
hv_status hv_buf_append(hv_buf *b, const void *data, size_t n);
hv_status hv_buf_append_str(hv_buf *b, const char *s);
hv_status hv_buf_append_char(hv_buf *b, char c);
hv_status hv_buf_printf(hv_buf *b, const char *fmt, ...) HV_ATTR_PRINTF(2, 3);
/* Shortens the buffer to n bytes (n <= len). */
void hv_buf_truncate(hv_buf *b, size_t n);
void hv_buf_free(hv_buf *b);

/* hv_prefault, hv_prefault_ahead, hv_bulk_calloc. */
#include "mem.h"

/* The thread count that options' "0: the default" means: the online CPUs, at least 1 and at
 * most HV_DEFAULT_THREADS_MAX (more threads than that only contend for the disk). */
#define HV_DEFAULT_THREADS_MAX 8
int hv_default_threads(void);

/* The clock id's reading in nanoseconds: CLOCK_REALTIME for times stored, CLOCK_MONOTONIC for
 * durations and deadlines, CLOCK_REALTIME_COARSE for the clock file times are stamped by. */
static inline int64_t hv_clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Seconds and nanoseconds as nanoseconds since the epoch, saturated outside 1677–2262:
 * a file's times are set by untrusted code (`touch -d 2300-01-01`). */
static inline int64_t hv_ns_from_timespec(int64_t sec, long nsec)
{
	int64_t ns;
	if (__builtin_mul_overflow(sec, (int64_t)1000000000, &ns) ||
	    __builtin_add_overflow(ns, (int64_t)nsec, &ns))
		return sec < 0 ? INT64_MIN : INT64_MAX;
	return ns;
}

/* The hv_stat of a struct stat (from <sys/stat.h>; callers include it). */
#define HV_STAT_FROM(st, out)                                                                \
	do {                                                                                 \
		(out)->dev = (st)->st_dev;                                                   \
		(out)->ino = (st)->st_ino;                                                   \
		(out)->size = (uint64_t)(st)->st_size;                                       \
		(out)->mode = (st)->st_mode;                                                 \
		(out)->mtime_ns = hv_ns_from_timespec((st)->st_mtim.tv_sec, (st)->st_mtim.tv_nsec); \
		(out)->ctime_ns = hv_ns_from_timespec((st)->st_ctim.tv_sec, (st)->st_ctim.tv_nsec); \
		(out)->mtime_sec = (int64_t)(st)->st_mtim.tv_sec;                            \
		(out)->mtime_nsec = (uint32_t)(st)->st_mtim.tv_nsec;                         \
	} while (0)

/* Sets s's mtime from nanoseconds (a time read back from the database, where only they are
 * kept): mtime_ns, and mtime_sec/mtime_nsec to match. */
static inline void hv_stat_set_mtime_ns(hv_stat *s, int64_t ns)
{
	s->mtime_ns = ns;
	s->mtime_sec = ns / 1000000000;
	int64_t frac = ns % 1000000000;
	if (frac < 0) {
		s->mtime_sec--;
		frac += 1000000000;
	}
	s->mtime_nsec = (uint32_t)frac;
}

/* SHA-256 (sha256.h) as 64 lower-case hex digits plus NUL: always HV_OK. */
hv_status hv_sha256_hex(const void *data, size_t len, char hex[65]);
/* The SHA-256 of what fd holds from its current offset to the end, reading at most max
 * bytes: HV_OK, HV_EIO (errno-style message naming path), or HV_WARN when the file holds
 * more than max bytes. */
hv_status hv_sha256_fd(int fd, uint64_t max, const char *path, char hex[65]);

/* A walk that stats only directories (and entries of unknown type): of every other entry
 * it knows the name, the type and the inode number the directory gives (hv_entry.lst.mode and
 * .ino; have_lstat false), and hv__walk_named() says so. What a run's snapshot in memory lists
 * before the command (collect_snapshot.c). */
struct hv_walk;
struct hv_walk_opts;
hv_status hv__walk_open_names(struct hv_walk **out, const char *root,
			      const struct hv_walk_opts *opts);
/* Whether the last entry was listed by name only. */
bool hv__walk_named(const struct hv_walk *w);
/* lstat of the last entry, relative to its directory's descriptor: 0, or -1 with errno. */
struct hv_stat;
int hv__walk_lstat(struct hv_walk *w, struct hv_stat *out);
/* faccessat(mode, AT_EACCESS) of the last entry, relative to its directory's descriptor: 0, or
 * -1 with errno. */
int hv__walk_access(struct hv_walk *w, int mode);

/* store_snapshot.c: the filters a stored snapshot was taken with (hvc_filters_key()), recorded
 * as it finishes, and read back: NULL when none were recorded (a snapshot of a harvest before
 * schema version 7, or one written through hv_store_snapshot_begin() alone). */
/* store_open.c: hv__store_file_note() records which file st's database path names (a run
 * does, once it is begun: the other commands never ask). hv__store_file_check() is then HV_OK
 * while the path still names that inode, and HV_EDB when the file was removed or replaced
 * since (a command run in its directory did it): whatever was written since went to an
 * unlinked file. Always HV_OK for a PostgreSQL history, an in-memory store, and a store never
 * noted. */
struct hv_store;
void hv__store_file_note(struct hv_store *st);
hv_status hv__store_file_check(const struct hv_store *st);

struct hv_snapshot_writer;
struct hv_snapshot;
hv_status hv__snapshot_writer_filters(struct hv_snapshot_writer *w, const char *key, size_t len);
const char *hv__snapshot_filters(const struct hv_snapshot *sn, size_t *len);
/* The directories (relative paths) a stored snapshot could not read, recorded as it finishes
 * and read back: each path ended by a NUL, *len bytes in all; NULL when there were none. */
hv_status hv__snapshot_writer_unread(struct hv_snapshot_writer *w, const char *path, size_t len);
const char *hv__snapshot_unread(const struct hv_snapshot *sn, size_t *len);
/* Caps the descriptors the walk's directory cache keeps (at least HV_COLLECT_MIN_FDS; by
 * default half the soft limit): for a caller that holds many files open while it walks, so the
 * cache leaves it the rest. */
void hv__walk_cap_fds(struct hv_walk *w, int cap);
/* The milliseconds the walk has waited so far for a descriptor to be given back (at most a
 * few seconds in all: see hvw_open_evicting), for tests. */
int hv__walk_fd_waited_ms(struct hv_walk *w);
/* How many descriptors the process can still open (INT_MAX: too many to count under a high
 * limit); *limit gets the soft limit (collect.c). */
int hv__free_fds(int *limit);
/* When hv_walk_next() last returned HV_WARN for a directory it could not read, read only in
 * part, or did not enter because its lstat failed: that directory's path relative to the root (*len bytes, not NUL-terminated; length 0
 * for the root itself), of which some entries may be missing from the walk. Else NULL. Valid
 * until the next hv_walk_next(). */
const char *hv__walk_unread_dir(const struct hv_walk *w, size_t *len);

/* Processes harvest starts for itself and keeps for the life of the process (libmagic's
 * spawner): a run's end_descendants leaves them alone although they may be started while a
 * command runs. Registered by whoever forks one, right after the fork and on the thread that
 * forked it; forgotten once reaped. At most a few (HV_OWN_CHILDREN_MAX): one more is not
 * registered, and a run ending its command's descendants would end it too. */
#define HV_OWN_CHILDREN_MAX 8
void hv__own_child_add(pid_t pid);
void hv__own_child_remove(pid_t pid);

#endif
