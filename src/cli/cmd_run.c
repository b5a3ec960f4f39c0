/* harvest run: snapshot DIR, run a command there streaming StreamChunk events, collect what
 * it produced, and end with the ExecutionResult. Exit status as timeout(1): the command's. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { EXIT_HARVEST_FAILED = 125 };

enum {
	OPT_DIR = OPT_OWN,
	OPT_TIMEOUT,
	OPT_ENV,
	OPT_SHELL,
	OPT_LANGUAGE,
	OPT_MAX_OUTPUT,
	OPT_RUN_THREADS,
	OPT_CHANGES,
};

static const cli_opt run_opts[] = {
	{"help", 'h', 0, OPT_HELP},        {"format", 0, 1, OPT_FORMAT},
	{"case", 0, 1, OPT_CASE},          {"quiet", 'q', 0, OPT_QUIET},
	{"db", 0, 1, OPT_DB},              {"dir", 0, 1, OPT_DIR},
	{"timeout", 0, 1, OPT_TIMEOUT},    {"env", 0, 1, OPT_ENV},
	{"shell", 0, 0, OPT_SHELL},        {"language", 0, 1, OPT_LANGUAGE},
	{"max-output-bytes", 0, 1, OPT_MAX_OUTPUT}, {"changes", 0, 1, OPT_CHANGES},
	CLI_COLLECT_OPTS,
	{NULL, 0, 0, 0},
};

static const char run_usage[] =
	"usage: harvest run [options] -- COMMAND [ARG...]\n"
	"Snapshots DIR, runs COMMAND there streaming its output as StreamChunk events, collects\n"
	"the files it produced and ends with the ExecutionResult.\n"
	"  --dir DIR               where to run and collect (default: the current directory)\n"
	"  --timeout SECONDS       SIGTERM to the command's process group, SIGKILL 2 s later;\n"
	"                          exit status 124\n"
	"  --env KEY=VALUE         add to the environment (repeatable); inherited HARVEST_*\n"
	"                          variables reach the command only this way\n"
	"  --shell                 COMMAND is one string for /bin/sh -c\n"
	"  --language LANG         stream source code from stdin to the interpreter LANG on\n"
	"                          its stdin (no shell)\n"
	"  --max-output-bytes SIZE keep at most SIZE of each stream in the result (default\n"
	"                          16MiB; the stream itself is complete)\n"
	"  --changes M             how the run's changes are found: events (the kernel's, with\n"
	"                          fanotify: nothing walked), snapshot (a walk before and one\n"
	"                          after) or auto (default: events when they can be used)\n"
	CLI_COLLECT_USAGE
	"  --db PATH               the database\n"
	"  --format F              jsonl (default: events, then the result), json (the result)\n"
	"                          or html (the run and its files as one self-contained page)\n"
	"  --case C                snake (default) or camel (the TypeScript SDK's shapes)\n"
	"SIGINT, SIGTERM or SIGHUP is passed on to COMMAND's process group (SIGKILL 2 s later),\n"
	"and the run is still recorded, as \"cancelled\"; a second one stops waiting for a\n"
	"PostgreSQL server that does not answer (1 s).\n"
	"Exit status: the command's; 128+N when killed by signal N; 124 timeout; 126 not\n"
	"executable; 127 not found; 125 harvest itself failed (reason on stderr).\n";

struct run_cli {
	cli_collect cc;
	const char *dir;
	uint64_t timeout_ms;
	const char **env;
	size_t n_env;
	bool shell;
	const char *language;
	uint64_t max_output;
	bool has_max_output; /* --max-output-bytes given: 0 is a limit too */
	hv_changes_mode changes;
};

static int run_opt(void *ctx, cli_common *c, int id, const char *v)
{
	struct run_cli *r = ctx;
	switch (id) {
	case OPT_DIR: r->dir = v; return 0;
	case OPT_TIMEOUT: {
		int rc = cli_parse_duration(c, "--timeout", v, &r->timeout_ms);
		if (rc == 0 && r->timeout_ms == 0)
			rc = cli_usage_error(c, "--timeout: expected seconds > 0, not '%s'", v);
		return rc;
	}
	case OPT_ENV: {
		if (hv_run_check_env(v) != HV_OK)
			return cli_usage_error(c, "--env: %s", hv_error_last());
		const char **e = realloc(r->env, (r->n_env + 1) * sizeof(*e));
		if (!e)
			return cli_usage_error(c, "out of memory");
		r->env = e;
		e[r->n_env++] = v;
		return 0;
	}
	case OPT_SHELL: r->shell = true; return 0;
	case OPT_LANGUAGE:
		if (hv_run_check_language(v) != HV_OK)
			return cli_usage_error(c, "--language: %s", hv_error_last());
		r->language = v;
		return 0;
	case OPT_CHANGES:
		if (!strcmp(v, "auto"))
			r->changes = HV_CHANGES_AUTO;
		else if (!strcmp(v, "events"))
			r->changes = HV_CHANGES_EVENTS;
		else if (!strcmp(v, "snapshot"))
			r->changes = HV_CHANGES_SNAPSHOT;
		else
			return cli_usage_error(c, "--changes: expected events, snapshot or auto, not '%s'",
					       v);
		return 0;
	case OPT_MAX_OUTPUT:
		r->has_max_output = true;
		return cli_parse_size(c, "--max-output-bytes", v, &r->max_output);
	}
	int rc = cli_collect_opt(&r->cc, c, id, v);
	return rc == -2 ? 0 : rc;
}

struct stream_ctx {
	hv_json *j;
	bool events;
};

/* Each chunk goes out as one StreamChunk line, flushed at once. A reader that went away
 * (EPIPE) does not stop the command: the run is still collected and recorded. */
static hv_status on_chunk(void *ctx, hv_stream which, const char *data, size_t len)
{
	struct stream_ctx *s = ctx;
	if (!s->events)
		return HV_OK;
	hv_record_stream_chunk(s->j, which, data, len);
	hv_json_newline(s->j);
	hv_json_flush(s->j);
	return HV_OK;
}

/* SIGINT/SIGTERM/SIGHUP end the command like a timeout, so the run is still recorded. A second
 * one stops harvest waiting for a PostgreSQL server that does not answer (which would hold it
 * for 90 s): a wait silent for 1 s is then given up, and the run not recorded. */
static int cancel_pipe[2] = {-1, -1};
static volatile sig_atomic_t cancel_signal; /* the first such signal */
/* the history the second signal interrupts (a lock-free atomic: read in the handler) */
static hv_store *_Atomic signal_store;
_Static_assert(ATOMIC_POINTER_LOCK_FREE == 2, "a pointer read in a signal handler must be lock-free");

static void on_signal(int sig)
{
	hv_store *st = atomic_load(&signal_store);
	if (cancel_signal && st)
		hv_store_interrupt(st);
	if (!cancel_signal)
		cancel_signal = sig;
	int saved = errno;
	if (cancel_pipe[1] >= 0 && write(cancel_pipe[1], "x", 1) < 0) {
		/* nothing more can be done in a handler */
	}
	errno = saved;
}

struct lazy_store {
	const cli_common *c;
	hv_store *st;
};

/* With --no-history the store only holds the MIME cache: opened at the first produced file,
 * so a run that produced nothing opens (and creates) no database. */
static hv_store *open_lazily(void *ctx)
{
	struct lazy_store *l = ctx;
	if (!l->st && hv_store_open_with_cache(&l->st, l->c->db, l->c->cache_db,
					       HV_STORE_NO_HISTORY) != HV_OK)
		l->st = NULL;
	return l->st;
}

/* The run as a self-contained HTML page on stdout: 0, or -1 (message printed). */
static int print_page(const cli_common *c, const struct run_cli *r, const hv_execute_opts *eo,
		      const hv_execution *ex)
{
	char *cmd = hv_argv_json(eo->run.argv);
	if (!cmd) {
		cli_error("out of memory");
		return -1;
	}
	hv_run_row row = {
		.run_id = ex->run_id,
		.label = r->cc.label,
		.label_len = r->cc.label ? strlen(r->cc.label) : 0,
		.command_json = cmd,
		.dir = ex->files ? ex->files->root : (r->dir ? r->dir : "."),
		.started_at_ns = ex->run.started_at_ns,
		.ended = true,
		.ended_at_ns = ex->run.ended_at_ns,
		.end_reason = ex->end.end_reason,
		.has_exit_code = ex->end.has_exit_code,
		.exit_code = ex->end.exit_code,
		.timed_out = ex->end.timed_out,
		.duration_ms = ex->end.duration_ms,
		.stdout_data = ex->end.stdout_data,
		.stdout_len = ex->end.stdout_len,
		.stdout_truncated = ex->end.stdout_truncated,
		.stderr_data = ex->end.stderr_data,
		.stderr_len = ex->end.stderr_len,
		.stderr_truncated = ex->end.stderr_truncated,
		.host = r->cc.host,
	};
	row.dir_len = strlen(row.dir);
	int rc = cli_page_print(c, &row, ex->files);
	free(cmd);
	return rc;
}

static int run_main(cli_common *c, struct run_cli *r, char **pos, int npos)
{
	if (npos == 0 && !r->language)
		return cli_usage_error(c, "missing COMMAND (after --)"), EXIT_HARVEST_FAILED;
	if (r->shell && r->language)
		return cli_usage_error(c, "--shell and --language do not go together"),
		       EXIT_HARVEST_FAILED;
	if (r->shell && npos != 1)
		return cli_usage_error(c, "--shell takes the command as one string"),
		       EXIT_HARVEST_FAILED;
	if (r->language && npos != 0)
		return cli_usage_error(c, "--language reads the code from stdin; no COMMAND"),
		       EXIT_HARVEST_FAILED;
	if (cli_check_format(c, FMT_JSONL, "json,jsonl,html") != 0)
		return EXIT_HARVEST_FAILED;

	hv_execute_opts eo = {.label = r->cc.label, .host = r->cc.host,
			      .no_history = r->cc.no_history, .changes = r->changes};
	hv_run_opts_init(&eo.run);
	eo.collect = r->cc.opts;
	const char *argv_shell[5], *argv_lang[2];
	if (r->shell) {
		hv_run_argv_shell(argv_shell, pos[0]);
		eo.run.argv = argv_shell;
	} else if (r->language) {
		hv_run_argv_language(argv_lang, r->language);
		eo.run.argv = argv_lang;
	} else {
		eo.run.argv = (const char *const *)pos;
	}
	eo.run.env = r->env;
	eo.run.n_env = r->n_env;
	eo.run.timeout_ms = r->timeout_ms;
	if (r->has_max_output)
		eo.run.max_output_bytes = r->max_output > SIZE_MAX ? SIZE_MAX : (size_t)r->max_output;
	/* Every descendant of the command ends with the run; harvest has no other children. */
	eo.run.end_descendants = true;
	if (r->language) {
		/* Streamed to the interpreter as it comes: the code may be bigger than memory. */
		struct stat sb;
		int err = fstat(STDIN_FILENO, &sb) != 0 ? errno : S_ISDIR(sb.st_mode) ? EISDIR : 0;
		if (err) {
			cli_error("standard input: %s", strerror(err));
			return EXIT_HARVEST_FAILED;
		}
		eo.run.stdin_fd = STDIN_FILENO;
	}

	struct lazy_store lazy = {.c = c};
	hv_store *st = NULL;
	if (r->cc.no_history) {
		eo.open_store = open_lazily;
		eo.open_store_ctx = &lazy;
		eo.cache_optional = !cli_cache_named(c);
	} else if (!(st = cli_open_store(c, 0))) {
		return EXIT_HARVEST_FAILED;
	}
	hv_json *j = cli_json_stdout(c);
	if (!j) {
		hv_store_close(st);
		return EXIT_HARVEST_FAILED;
	}
	atomic_store(&signal_store, st);
	if (pipe2(cancel_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
		struct sigaction sa = {.sa_handler = on_signal};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
		eo.run.cancel_fd = cancel_pipe[0];
		eo.run.cancel_signal = &cancel_signal;
	}
	signal(SIGPIPE, SIG_IGN);

	/* With html, the page is the whole output: no stream chunks are printed (stdout and
	 * stderr are in the page). */
	struct stream_ctx sc = {.j = j, .events = c->format == FMT_JSONL};
	cli_hooks hooks;
	cli_collect_hooks(&r->cc, c, &hooks);
	/* The contents wait in a temporary file, not in memory, until they are recorded and
	 * printed (the page too reads them from there, one at a time). */
	r->cc.opts.spool_content = true;
	eo.collect = r->cc.opts;
	hv_execution ex;
	/* --dir DIR named as given in messages (the library names its real path). */
	if (r->dir)
		cli_hooks_name_dir(&hooks, r->dir);
	hv_status s = hv_execute(st, r->dir ? r->dir : ".", &eo, on_chunk, &sc, &ex);
	if (s != HV_OK)
		cli_hooks_error(&hooks, hv_error_last());
	cli_collect_hooks_end(&hooks);
	int rc;
	if (s != HV_OK) {
		/* Interrupted before the command began: the status a shell gives (128 + N). */
		rc = s == HV_ECHILD && cancel_signal ? 128 + cancel_signal : EXIT_HARVEST_FAILED;
	} else {
		if (ex.changes_note && !strcmp(ex.changes, "ctime"))
			cli_warn(c,
				 "change events incomplete (%s): reporting the files changed since the "
				 "run started; deleted files may be missing",
				 ex.changes_note);
		else if (ex.changes_note)
			cli_warn(c, "change events not used, comparing snapshots: %s", ex.changes_note);
		if (ex.run.message)
			cli_warn(c, "%s", ex.run.message + (strncmp(ex.run.message, "harvest: ", 9)
								    ? 0
								    : 9));
		if (ex.collect_status != HV_OK && ex.recording_failed)
			cli_error("recording the run in the history (run_id is null): %s",
				  hv_error_last());
		else if (ex.collect_status != HV_OK)
			cli_error("collecting the produced files: %s", hv_error_last());
		cli_warn_skipped(c, r->dir, ex.files, &eo.collect);
		if (ex.run_id > 0)
			(void)cli_warn_unstored(c, r->dir, ex.files); /* the exit status is the command's */
		bool page_failed = false;
		if (c->format == FMT_HTML) {
			page_failed = print_page(c, r, &eo, &ex) != 0;
		} else if (hv_record_result(j, &ex.end, ex.files, ex.run_id,
					    !eo.collect.no_content) != HV_OK) {
			/* A content could not be read back: what was written is not a whole
			 * result. */
			cli_error("%s", hv_error_last());
			page_failed = true;
		} else {
			hv_json_newline(j);
		}
		/* The command ran, but harvest could not tell what it produced (or could not
		 * print the page): harvest's own failure (the command's status is still in the
		 * result). */
		rc = ex.collect_status != HV_OK || page_failed ? EXIT_HARVEST_FAILED
							       : ex.run.exit_code;
	}
	/* The events or the result could not be written (a full disk, a closed reader): the
	 * command still ran to its end and was recorded, but the caller did not get its output,
	 * which is harvest's failure. */
	if (hv_json_flush(j) != HV_OK) {
		cli_error("standard output: %s", hv_error_last());
		rc = EXIT_HARVEST_FAILED;
	}
	hv_json_free(j);
	hv_execution_free(&ex);
	if (!st)
		st = lazy.st;
	atomic_store(&signal_store, NULL);
	if (st && hv_store_close(st) != HV_OK) {
		cli_error("%s", hv_error_last());
		if (s != HV_OK)
			rc = EXIT_HARVEST_FAILED;
	}
	return rc;
}

int cmd_run(int argc, char **argv)
{
	cli_common c = {.cmd = "run"};
	struct run_cli r = {0};
	cli_collect_init(&r.cc);
	char **pos = NULL;
	int npos = 0;
	int rc = cli_parse(&c, argc, argv, run_opts, run_opt, &r, run_usage, &pos, &npos);
	if (rc < 0)
		rc = EXIT_DONE;
	else if (rc != 0)
		rc = EXIT_HARVEST_FAILED; /* as env(1) and timeout(1): 125 is harvest's own failure */
	else
		rc = run_main(&c, &r, pos, npos);
	free(pos);
	free(r.env);
	cli_collect_free(&r.cc);
	return rc;
}
