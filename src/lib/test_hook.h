/* Test hooks: points inside libharvest where a test can run code at the exact moment of a
 * race (swap a file for a symlink right before it is opened...), and the switches tests turn
 * on through the environment. Not part of the API: neither
 * declared in include/ nor exported from the shared library; the tests link the static one. */
#ifndef HARVEST_TEST_HOOK_H
#define HARVEST_TEST_HOOK_H

#include <stdbool.h>

typedef enum hv__hook_point {
	/* The collector, with a file's relative path, right before it opens the file. */
	HV__HOOK_COLLECT_BEFORE_OPEN,
	/* The collector, with a file's relative path, after its fstat and right before it reads
	 * it (on whichever thread reads it). */
	HV__HOOK_COLLECT_BEFORE_READ,
	/* hv_file_write, with a parent directory's path right after it created it and before it
	 * opens it, and with the destination path right before the rename. */
	HV__HOOK_FILE_WRITE,
	/* hv_remove, with a directory's path right before the tree removal opens it. */
	HV__HOOK_REMOVE,
	/* The change tracking, with the path of a handle it resolved (looked up where an event's
	 * directory is), right after reading it. */
	HV__HOOK_CHANGES_RESOLVE,
	/* The walker, with a directory's name (its component; the root: as given), right before
	 * each getdents64 on it (on whichever thread reads it). */
	HV__HOOK_WALK_GETDENTS,
	/* libmagic's worker spawner, with "", right before the fork that starts it (so a test
	 * can count the threads the process has then). */
	HV__HOOK_SPAWNER_FORK,
	/* The archive writer, with an entry's relative path, right before it opens a regular
	 * file (to swap it for a symlink or a FIFO). */
	HV__HOOK_ARCHIVE_BEFORE_OPEN,
	/* The archive writer, with a regular file's relative path, after its header (its size)
	 * was written and before its bytes are copied (to make it grow or shrink meanwhile). */
	HV__HOOK_ARCHIVE_AFTER_HEADER,
	/* MIME detection of files given by path, with a path, after its lstat and right before
	 * it opens it (to swap a directory of the path meanwhile). */
	HV__HOOK_MIME_BEFORE_OPEN,
	HV__HOOK_COUNT
} hv__hook_point;

typedef void (*hv__hook_fn)(void *ctx, const char *path);

/* Installs fn (NULL: none) at point p for the whole process. Set it before the call under test
 * and clear it after: the library's threads read it without a lock. */
void hv__test_hook_set(hv__hook_point p, hv__hook_fn fn, void *ctx);

/* Whether a hook is set at p (so a caller builds the path it passes only then). */
int hv__test_hook_active(hv__hook_point p);

/* Calls the hook at p, if any, with path. */
void hv__test_hook_call(hv__hook_point p, const char *path);

/* Test switches: environment variables that make the library take a path a test needs on any
 * machine (every batch counted as blocked...). Each is on when its variable is exactly "1". */
typedef enum hv__test_switch {
	/* HARVEST_TEST_WALK_BLOCKED: the walker counts every batch as slow and blocked, and any
	 * pool may grow, so tests see workers added mid-walk on any tree. */
	HV__SWITCH_WALK_BLOCKED,
	/* HARVEST_TEST_WALK_SLOW_CLAIMS: a walker's worker sleeps 200 us between taking a batch
	 * and starting it, and the consumer 1 ms between seeing a job claimed and trying to take
	 * it, so that a worker starts the job in that gap (a preemption there, made likely). */
	HV__SWITCH_WALK_SLOW_CLAIMS,
	/* HARVEST_TEST_CHANGES_LOST: the change tracking's result fails as when the events
	 * cannot tell what changed (an overflow...), so tests reach what follows on any run. */
	HV__SWITCH_CHANGES_LOST,
	/* HARVEST_TEST_CHANGES_READ_LATE: the change tracking reads no event until the command
	 * has ended, so the kernel merges every event it can into one still queued (as when
	 * the reader falls behind: under valgrind, on a loaded machine). */
	HV__SWITCH_CHANGES_READ_LATE,
	/* HARVEST_TEST_CHANGES_READ_SLOW: the change tracking sleeps 0-4 ms before each read of
	 * the events, so that reads end at other points of a workload each run and the kernel
	 * merges some events and not others. */
	HV__SWITCH_CHANGES_READ_SLOW,
	/* HARVEST_TEST_SNAPSHOT_LSTAT: a snapshot in memory trusts no file system's ctime: it
	 * keeps every entry's lstat state, as on a file system it does not know
	 * (collect_snapshot.c). */
	HV__SWITCH_SNAPSHOT_LSTAT,
	/* HARVEST_TEST_PG_SILENCE: a PostgreSQL statement is given up after 2 s without a word
	 * from the server, not 90 s (store_pg.c), so tests of a frozen server end soon. */
	HV__SWITCH_PG_SILENCE,
	/* HARVEST_TEST_MIME_DIR_LATE: `mime DIR` waits 100 ms before it detects its first batch,
	 * so the walker has read ahead as far as its descriptor cache lets it (the cache full, as
	 * beside a slow detection) when the first libmagic worker is started. */
	HV__SWITCH_MIME_DIR_LATE,
	/* HARVEST_TEST_MIME_ONE_WORKER: only the process's first libmagic worker starts; every
	 * later start fails as a fork under a process limit does (EAGAIN), so tests see detection
	 * threads without a worker on any machine (root ignores RLIMIT_NPROC). */
	HV__SWITCH_MIME_ONE_WORKER,
	/* HARVEST_TEST_WALK_NO_DTYPE: the walker takes every directory entry's type as unknown,
	 * as on a file system whose getdents64 gives none (ext2 without filetype, XFS with
	 * ftype=0, some FUSE and network file systems). */
	HV__SWITCH_WALK_NO_DTYPE,
	HV__SWITCH_COUNT
} hv__test_switch;

/* Whether switch s is on. The environment is read at the first call, every switch at once,
 * and kept for the process: a production call costs one branch on a cached word, and no
 * getenv. */
bool hv__test_switch_on(hv__test_switch s);

/* Reads the switches' variables again: for a test that sets or unsets one after the first
 * call (while no other thread is in libharvest: setenv is not safe against getenv). */
void hv__test_switches_reload(void);

#endif
