/* harvest — a whole run: snapshot the directory, run the command there streaming its output,
 * collect the files it produced, record it all in the history. `harvest run` is this call. */
#ifndef HARVEST_EXECUTE_H
#define HARVEST_EXECUTE_H

#include "collect.h"
#include "run.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a run finds what it changed. */
typedef enum hv_changes_mode {
	HV_CHANGES_AUTO = 0,  /* events when the process may use fanotify, else snapshot */
	HV_CHANGES_EVENTS,    /* fanotify's events only: refused (HV_EIO) when unavailable */
	HV_CHANGES_SNAPSHOT   /* a snapshot in memory before the run, compared after it */
} hv_changes_mode;

typedef struct hv_execute_opts {
	hv_run_opts run;          /* argv, env, timeout, ...; run.cwd is set from dir */
	hv_collect_opts collect;  /* what counts as an artifact (since_snapshot is ignored) */
	const char *label;        /* the history run's label, or NULL */
	const char *host;         /* the history run's host; NULL: the hostname */
	bool no_history;          /* record nothing (the snapshot is still taken, then dropped) */
	hv_changes_mode changes;
	/* With st NULL: opens the store when the run first needs it (the history, the MIME
	 * cache of a produced file), or never when nothing needs it. The caller owns (and
	 * closes) what it returns; NULL fails the run with the message set. With no_history and
	 * collect.no_cache it is never called.
	 * With change events, it is called at the command's first change below dir, on a thread
	 * harvest starts and joins before the command's end is handled (never two calls at
	 * once); when that call gives NULL, it is called again, on the caller's thread, when the
	 * store is needed. */
	hv_store *(*open_store)(void *ctx);
	void *open_store_ctx;
	/* With no_history, where the store holds only the MIME cache: when open_store gives
	 * NULL, the run goes on without the cache (every answer is the same, only slower),
	 * saying so to collect.on_warning ("...; collecting without the MIME cache"), instead of
	 * failing. For a store at a location the caller did not choose (the CLI sets it when no
	 * database was named). */
	bool cache_optional;
} hv_execute_opts;

/* Zeroes o, then fills run and collect with their defaults (hv_run_opts_init,
 * hv_collect_opts_init): changes HV_CHANGES_AUTO, history recorded, no label. */
HV_EXTERN void hv_execute_opts_init(hv_execute_opts *o);

typedef struct hv_execution {
	hv_run_result run;        /* exit code, output, timing */
	hv_run_end end;           /* the same as the history records it (pointers into run) */
	hv_collection *files;     /* the produced files; NULL when collecting failed */
	int64_t run_id;           /* the history run; 0 with no_history, 0 when hv_execute
	                           * failed, and 0 when the run could not be recorded completely
	                           * (collect_status) */
	int collect_status;       /* HV_OK, or why collecting or recording failed */
	bool recording_failed;    /* collecting worked, recording it did not (collect_status) */
	const char *changes;      /* how the changes were found: "events", "snapshot", or "ctime"
	                           * (auto, when the events could not tell: the files changed
	                           * since the run started) */
	char *changes_note;       /* auto chose snapshot: why events could not be used; "ctime":
	                           * why the events could not tell; else NULL */
} hv_execution;

/* Runs o->run.argv in dir (realpath'd; HV_ENOTDIR when it is not a directory) as described
 * above, handing each output chunk to on_chunk as it arrives, and fills *out (free it with
 * hv_execution_free in every case). Returns HV_OK when the command ran (whatever its exit
 * code) and a negative status when harvest itself failed before or while running it, or
 * on_chunk failed (the command is then stopped): a run already begun in the history is ended
 * there as HV_END_NOT_RECORDED, and run_id is 0. A
 * failure to collect or record after the command ran is reported in out->collect_status; then
 * run_id is 0, and hv_execute does not record the run's end without its artifacts as a normal
 * end (the history never shows an incomplete run as complete). */
HV_EXTERN hv_status hv_execute(hv_store *st, const char *dir, const hv_execute_opts *o,
		     hv_run_chunk_fn on_chunk, void *ctx, hv_execution *out);

/* Frees what e holds and zeroes it; NULL is allowed. */
HV_EXTERN void hv_execution_free(hv_execution *e);

/* The argv as a JSON array text (malloc'd), as the history records a run's command. */
HV_EXTERN char *hv_argv_json(const char *const *argv);

#ifdef __cplusplus
}
#endif
#endif
