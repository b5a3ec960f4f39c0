/* harvest — running a command: spawn, stream its output as it arrives, time it out, reap it.
 *
 * The child runs in its own process group, in opts.cwd, with the inherited environment minus
 * every HARVEST_* variable (harvest's own: HARVEST_DB names the history) plus opts.env, stdin
 * from /dev/null (or fed opts.stdin_data, or what opts.stdin_fd gives, through a pipe), stdout
 * and stderr to two pipes. No other descriptor of the calling process reaches it, signal
 * dispositions and the signal mask are reset (an ignored SIGPIPE is not inherited), and it
 * gets SIGKILL when the thread that called hv_run() dies (PR_SET_PDEATHSIG), so a killed
 * caller does not leave the command running. Each piece of output is handed to a callback as
 * soon as it is read, never cut inside a UTF-8 character that the next read completes.
 * hv_run() installs no signal handler: it waits with poll() on the pipes and a pidfd, against
 * the monotonic clock.
 *
 * When it ends:
 * - Timeout (opts.timeout_ms): SIGTERM (and SIGCONT) to the whole process group, SIGKILL to
 *   the group 2 s later; output read until then is kept; timed_out, exit code 124 (also when
 *   the SIGKILL was needed, where timeout(1) exits 137: timed_out says why it ended).
 * - Background processes left holding the pipes: once the command itself has exited, harvest
 *   keeps reading while the pipes stay open for opts.linger_ms (default 2 s, and never past
 *   the timeout), then ends the process group the same way (SIGTERM, SIGKILL 2 s later) and
 *   sets lingered. A process that escaped the group (setsid) and still holds the pipes is
 *   given up on 1 s after the SIGKILL: harvest closes its ends and returns. So a run always
 *   ends within timeout (or exit + linger) + 3 s. Without opts.end_descendants, background
 *   processes that do not hold the pipes (`server >log 2>&1 &`) are left running.
 * - With opts.end_descendants, every descendant of the command ends with the run, in or out
 *   of its process group (setsid): the calling process is made a child subreaper
 *   (PR_SET_CHILD_SUBREAPER) for the duration of the call, so orphans of the command reparent
 *   to it, and each signal above goes to every descendant too (found in /proc). Once the
 *   command has exited and the pipes are closed (or given up on), whatever is left gets
 *   SIGTERM, SIGKILL 2 s later if still there, and the orphans are reaped. Side effects for
 *   the caller, which is why it is an option: while hv_run() runs, the caller must not start
 *   child processes of its own from other threads (they would be taken for the command's);
 *   children it had before the call are left alone. Without /proc, only the process group is
 *   signalled.
 * - The exit code is the command's, 128+N when a signal N killed it, 124 on timeout, 127 when
 *   the command was not found and 126 when it could not be executed (see spawn_errno). */
#ifndef HARVEST_RUN_H
#define HARVEST_RUN_H

#include <signal.h>

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which output stream a chunk comes from (the values are the child's descriptors). */
typedef enum hv_stream { HV_STREAM_STDOUT = 1, HV_STREAM_STDERR = 2 } hv_stream;

/* "stdout" or "stderr". */
HV_EXTERN const char *hv_stream_name(hv_stream which);

/* Receives each chunk as soon as it is read: len >= 1 bytes, not NUL-terminated, valid until
 * the callback returns. A chunk ends inside a UTF-8 sequence only at the end of the stream
 * (or when the bytes can never form one). Returning a negative status stops the run: the
 * process group is ended (SIGTERM, then SIGKILL) and hv_run() returns that status; a
 * positive one (HV_WARN, HV_DONE) is taken as HV_OK, and the run goes on. */
typedef hv_status (*hv_run_chunk_fn)(void *ctx, hv_stream which, const char *data, size_t len);

#define HV_RUN_DEFAULT_MAX_OUTPUT ((size_t)16 << 20) /* 16 MiB per stream */
#define HV_RUN_DEFAULT_LINGER_MS 2000
#define HV_RUN_KILL_GRACE_MS 2000 /* SIGTERM to SIGKILL */
#define HV_RUN_OWN_ENV_PREFIX "HARVEST_" /* inherited variables the command does not get */

typedef struct hv_run_opts {
	const char *const *argv;    /* NULL-terminated; argv[0] is looked up in the child's PATH
	                             * (after opts.env) unless it contains '/' (then relative to
	                             * cwd). An executable without #! is run by /bin/sh, as
	                             * execvp() does. */
	const char *cwd;            /* the child's working directory; NULL: the caller's */
	const char *const *env;     /* KEY=VALUE additions, overriding the inherited environment;
	                             * KEY must match ^[A-Za-z_][A-Za-z0-9_]*$ (else HV_EUSAGE) */
	size_t n_env;
	uint64_t timeout_ms;        /* 0: no timeout */
	size_t max_output_bytes;    /* bytes of each stream kept in the result; SIZE_MAX: all */
	const void *stdin_data;     /* fed to the child's stdin; NULL: stdin is /dev/null */
	size_t stdin_len;
	int stdin_fd;               /* -1: none; else read until EOF and copied to the child's
	                             * stdin as it goes (a buffer of 64 KiB, whatever the size),
	                             * not with stdin_data. Left open. When the child stops
	                             * reading (EPIPE), the rest is not read. A read error ends
	                             * the run with HV_EIO. */
	bool end_descendants;       /* end every descendant of the command with the run (see
	                             * above: makes the caller a child subreaper meanwhile) */
	uint64_t linger_ms;         /* how long the pipes may stay open after the command exits */
	int cancel_fd;              /* -1: none; when it becomes readable (or hangs up), the run
	                             * is ended like a timeout but with cancelled set and the
	                             * child's own status; readable already when the command
	                             * would start, it is not started (HV_ECHILD). A self-pipe
	                             * written by a SIGINT handler fits here. */
	const volatile sig_atomic_t *cancel_signal; /* NULL, or where the handler that writes
	                             * cancel_fd stores the signal it caught: the group is sent
	                             * that signal first instead of SIGTERM (as timeout(1) passes
	                             * on a SIGINT), SIGKILL 2 s later; 0 or no signal: SIGTERM */
} hv_run_opts;

/* What a run gave. Filled by hv_run(); release with hv_run_result_free(). */
typedef struct hv_run_result {
	int exit_code;           /* as timeout(1)/env(1): code, 128+N, 124, 126, 127 */
	int term_signal;         /* N when a signal N ended the command, else 0 */
	bool timed_out;          /* the timeout ended it (exit_code is 124) */
	bool cancelled;          /* cancel_fd ended it */
	bool lingered;           /* the group was ended because pipes stayed open after exit */
	int spawn_errno;         /* nonzero: the command could not be executed (ENOENT: 127,
	                          * others: 126); message says why */
	char *message;           /* "harvest: foo: command not found" when spawn_errno, else NULL;
	                          * the same line (with '\n') is also delivered as a stderr chunk
	                          * and kept in stderr_data, as a shell would have written it */
	int pid;                 /* the child's pid (also its process group id); 0 if none */
	int64_t started_at_ns;   /* wall clock, ns since the epoch */
	int64_t ended_at_ns;
	uint64_t duration_ms;    /* monotonic clock, spawn to reap */
	char *stdout_data;       /* the kept output, NUL-terminated, never NULL after HV_OK */
	size_t stdout_len;       /* <= max_output_bytes */
	bool stdout_truncated;   /* more was written than kept */
	uint64_t stdout_total;   /* bytes the stream carried */
	char *stderr_data;
	size_t stderr_len;
	bool stderr_truncated;
	uint64_t stderr_total;
} hv_run_result;

/* Fills opts with the defaults: no argv, no timeout, 16 MiB kept per stream, stdin from
 * /dev/null, linger 2 s, no cancel descriptor (nor signal), descendants out of the group left
 * alone. */
HV_EXTERN void hv_run_opts_init(hv_run_opts *opts);

/* HV_OK when assignment is KEY=VALUE with KEY matching ^[A-Za-z_][A-Za-z0-9_]*$, else
 * HV_EUSAGE with a message naming it. */
HV_EXTERN hv_status hv_run_check_env(const char *assignment);

/* HV_OK when lang matches ^[A-Za-z0-9._+-]+$ (an interpreter name, run without a shell). */
HV_EXTERN hv_status hv_run_check_language(const char *lang);

/* argv for `--shell`: {"/bin/sh", "-c", script, NULL}, or {"/bin/sh", "-c", "--", script, NULL}
 * when script starts with '-' or '+' (sh would take it for options). The shell is /bin/sh
 * whatever PATH opts.env gives the command. script itself is kept, not copied. */
HV_EXTERN hv_status hv_run_argv_shell(const char *argv[5], const char *script);

/* argv for `--language LANG`: {lang, NULL} after hv_run_check_language(); the source code
 * goes in opts.stdin_data or comes from opts.stdin_fd. */
HV_EXTERN hv_status hv_run_argv_language(const char *argv[2], const char *lang);

/* Runs opts->argv to the end, handing output to on_chunk (may be NULL) as it arrives, and
 * fills *out. HV_OK whenever the command ran or could not be executed (exit codes 126/127);
 * HV_EUSAGE for bad options, HV_ENOTDIR when cwd cannot be opened as a directory, HV_ECHILD
 * when the process could not be created, HV_EIO/HV_ENOMEM on a failure mid-run (the child is
 * killed and reaped first), or on_chunk's own negative status (a positive one is no failure:
 * types.h); then *out is still filled with what was
 * known, so free it in every case. */
HV_EXTERN hv_status hv_run(const hv_run_opts *opts, hv_run_chunk_fn on_chunk, void *ctx,
		 hv_run_result *out);

/* Frees the buffers of a result and zeroes it; NULL is allowed. */
HV_EXTERN void hv_run_result_free(hv_run_result *r);

#ifdef __cplusplus
}
#endif
#endif
