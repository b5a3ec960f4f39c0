/* harvest — common types: status codes and the per-thread last error. */
#ifndef HARVEST_TYPES_H
#define HARVEST_TYPES_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every libharvest function that can fail returns one of these. Negative values are
 * failures; on a failure, hv_error_last() describes it. So `if (rc < 0)` catches every
 * failure, and a function that fills an out-parameter has filled it whenever rc >= 0, but
 * for an iterator: its record comes with HV_OK only, HV_DONE and hv_walk_next's HV_WARN (a
 * warning in place of a record) set it to NULL. HV_DONE is only ever the end of an
 * iteration (hv_walk_next, hv_run_iter_next...); a lookup
 * that finds nothing (no such run, artifact, snapshot or content) is the failure
 * HV_ENOTFOUND. */
typedef enum hv_status {
	HV_OK = 0,
	HV_DONE = 1,      /* an iterator has nothing more to give (never "not found") */
	HV_WARN = 2,      /* a non-fatal problem (hv_error_last() says what); iteration goes on */
	HV_EIO = -1,      /* a system call or I/O failed at run time */
	HV_EUSAGE = -2,   /* a bad argument or option value */
	HV_ENOTDIR = -3,  /* a path does not exist or is not a directory */
	HV_ENOMEM = -4,   /* out of memory */
	HV_EDB = -5,      /* the database is not ours, corrupt, read-only or unusable */
	HV_ECHILD = -6,   /* a child process could not be started */
	HV_ENOTFOUND = -7  /* what was looked up does not exist: a run, an artifact, a snapshot,
	                    * a stored content (hv_error_last() names it: "no run 7") */
} hv_status;

/* The message of the last failure or warning in the calling thread, e.g.
 * "out/data: Permission denied". Never NULL; valid until the thread's next libharvest call. */
HV_EXTERN const char *hv_error_last(void);

/* The status that came with the last error in this thread. */
HV_EXTERN int hv_error_last_status(void);

/* Clears the calling thread's last error. */
HV_EXTERN void hv_error_clear(void);

/* Sets the calling thread's last error (a printf-style message, cut in the middle past 4 KiB)
 * and returns status. For a callback to say why it failed: an hv_file_read_fn,
 * hv_run_chunk_fn or hv_mime_dir_fn returning `hv_error_set(HV_EIO, "%s: %s", name,
 * strerror(errno))` makes that the failure's message. A callback that fails without one gets
 * a message naming the callback and its status. A callback fails with a negative status only,
 * as every call does: a positive one (HV_WARN, HV_DONE) is taken as HV_OK, and the work goes
 * on. */
HV_EXTERN hv_status hv_error_set(hv_status status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
	__attribute__((format(printf, 2, 3)))
#endif
	;

/* The version string of the libharvest the program runs with, e.g. "0.1.0"; HV_VERSION
 * (version.h) is that of the headers it was built with. */
HV_EXTERN const char *hv_version(void);

/* The versions of the libraries libharvest runs with: libmagic as "5.44" ("unavailable" when
 * libmagic.so.1 cannot be loaded: libharvest loads it on first use), SQLite as "3.40.1".
 * Static strings. */
HV_EXTERN const char *hv_libmagic_version(void);
HV_EXTERN const char *hv_sqlite_version(void);

#ifdef __cplusplus
}
#endif
#endif
