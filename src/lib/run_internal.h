/* What the process runner offers the rest of libharvest beyond harvest/run.h. */
#ifndef HARVEST_RUN_INTERNAL_H
#define HARVEST_RUN_INTERNAL_H

#include "harvest/run.h"

#include <stdbool.h>

/* hv_run() that also polls watch_fd while the command runs, and calls on_watch(watch_ctx), on
 * the caller's thread, each time it is readable, until on_watch returns false. */
hv_status hv__run_watched(const hv_run_opts *opts, hv_run_chunk_fn on_chunk, void *ctx,
			  hv_run_result *out, int watch_fd, bool (*on_watch)(void *),
			  void *watch_ctx);

/* The descriptors a run needs free before its command starts, at the most: its working
 * directory, stdin (a pipe's two ends when it is given data), and three pipes (stdout, stderr,
 * the child's report of a failed exec). Once the command runs, the child's ends are closed and
 * a pidfd opened: 4. What comes after the run (the walk, a libmagic worker) needs fewer. */
#define HVR_RUN_FDS 9

/* How many times this process read every process's entry in /proc to find a run's
 * descendants: for tests of when a run needs to (see nothing_left in run.c). */
unsigned long hvr_proc_scans(void);

#endif
