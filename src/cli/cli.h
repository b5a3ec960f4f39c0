/* The harvest command-line tool: argument parsing and printing over libharvest. */
#ifndef HARVEST_CLI_H
#define HARVEST_CLI_H

#include "harvest.h"
#include "harvest/collect.h"
#include "harvest/execute.h"
#include "harvest/page.h"
#include "harvest/parse.h"
#include "harvest/store.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses (SPEC section 3). */
enum {
	EXIT_DONE = 0,
	EXIT_WARN = 1,
	EXIT_USAGE = 2,
	EXIT_NOTDIR = 3,
};

typedef enum cli_format { FMT_DEFAULT, FMT_JSON, FMT_JSONL, FMT_TEXT, FMT_NUL, FMT_HTML } cli_format;

/* Options every command shares. */
typedef struct cli_common {
	const char *cmd;       /* "walk", "history runs", ... for messages */
	cli_format format;
	hv_case kase;
	bool quiet;
	const char *db;        /* --db PATH or URI, or NULL */
	const char *cache_db;  /* --cache-db PATH (with a PostgreSQL --db), or NULL */
} cli_common;

/* One option of a command's table. has_arg: 0 flag, 1 takes a value. */
typedef struct cli_opt {
	const char *name;      /* long name without "--" */
	char short_name;       /* 0 for none */
	int has_arg;
	int id;
} cli_opt;

/* Option ids shared by all commands; a command's own ids start at OPT_OWN. */
enum {
	OPT_HELP = 1,
	OPT_FORMAT,
	OPT_CASE,
	OPT_QUIET,
	OPT_DB,
	OPT_CACHE_DB,
	OPT_OWN = 100,
};

/* Called for each option; returns 0, or EXIT_USAGE after printing the error. */
typedef int (*cli_opt_fn)(void *ctx, cli_common *common, int id, const char *value);

/* Parses argv (after the command name): options anywhere, "--" ends them, --name=value or
 * --name value. The common options (--help, --format, --case, --quiet, --db) are handled
 * here when the table lists them. Positional arguments land in pos (a NULL-terminated
 * array owned by the caller's argv). Returns 0, EXIT_USAGE (message printed), or -1 when
 * --help was printed (the caller exits 0). */
int cli_parse(cli_common *common, int argc, char **argv, const cli_opt *opts, cli_opt_fn fn,
	      void *ctx, const char *usage, char ***pos, int *npos);

/* Writes s to out with hv_text_escape's rules (control characters, C1 controls and bytes that
 * are not UTF-8 as \xNN): every name shown to people goes through it. */
void cli_put_escaped(FILE *out, const char *s, size_t len);
/* Prints "harvest CMD: MESSAGE" plus a hint to --help on stderr and returns EXIT_USAGE. */
int cli_usage_error(const cli_common *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* -o FILE into *out: 0, or the usage error of an empty FILE (which names no file). */
int cli_output_opt(const cli_common *c, const char *v, const char **out);
/* Prints "harvest: MESSAGE" on stderr (unless it is a warning and --quiet). The message is
 * escaped as cli_put_escaped does: it carries paths, which must not reach a terminal raw. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_warn(const cli_common *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Value parsers: each prints a usage error naming the option and returns EXIT_USAGE on a
 * bad value, else 0. */
int cli_parse_uint(const cli_common *c, const char *opt, const char *v, uint64_t max,
		   uint64_t *out);
int cli_parse_int(const cli_common *c, const char *opt, const char *v, int min, int max,
		  int *out);
/* Sizes: a number with an optional unit: B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (all
 * binary, as the SPEC's "32MiB"); case-insensitive. */
int cli_parse_size(const cli_common *c, const char *opt, const char *v, uint64_t *out);
/* SECONDS, as milliseconds (hv_parse_duration_ms: a positive value is at least 1 ms). */
int cli_parse_duration(const cli_common *c, const char *opt, const char *v, uint64_t *out_ms);
/* TIME: RFC 3339 or an age such as 90m, 12h, 7d (hv_parse_time). */
int cli_parse_time(const cli_common *c, const char *opt, const char *v, int64_t *out_ns);
/* Warns (unless --quiet; the exit status is not changed) about --exclude patterns that do
 * not do what they seem to: one with a '/' (names never contain one, so it never matches), an
 * empty one, and one whose '[' is never closed (fnmatch matches it as a literal '['). */
void cli_check_excludes(const cli_common *c, const char *const *patterns, size_t n);
/* The format for a command, checking it is one of the allowed ones ("json,jsonl"...). */
int cli_check_format(cli_common *c, cli_format dflt, const char *allowed);

/* Progress on stderr: only when stderr is a terminal, not --quiet, and the command has run
 * for more than a second. Cheap to call per record. */
typedef struct cli_progress {
	bool enabled, shown;
	uint64_t start_ns, last_ns;
	unsigned tick;
} cli_progress;
void cli_progress_init(cli_progress *p, const cli_common *c);
void cli_progress_update(cli_progress *p, uint64_t entries, uint64_t files, uint64_t bytes);
void cli_progress_end(cli_progress *p);
uint64_t cli_now_ns(void);

/* The exit status of a library status (SPEC 3): HV_OK 0, HV_EUSAGE 2, HV_ENOTDIR 3, every
 * other failure or warning 1. */
int cli_exit_status(hv_status s);

/* A JSON writer on stdout, flushed whenever output is due (see cli_output_record). */
hv_json *cli_json_stdout(const cli_common *c);
/* Ends one jsonl record or array element; flushes jsonl output that has waited ~50 ms. */
void cli_output_record(hv_json *j, const cli_common *c);
/* Flushes and frees; returns EXIT_WARN (message printed) when writing failed. */
int cli_json_finish(hv_json *j);

/* Makes stdio's stdout wait out a non-blocking pipe rather than fail at its first EAGAIN,
 * and keep the reason of a failed write: cli_stdout_error() (strerror, or "write error"). */
void cli_stdout_init(void);
const char *cli_stdout_error(void);
/* The database the caller named, as the store resolves it: --db, else $HARVEST_DB (empty
 * means unset); NULL when neither names one (the default location). */
const char *cli_db_named(const cli_common *c);
/* Whether db names a PostgreSQL history rather than a file. */
bool cli_db_is_pg(const char *db);
/* Opens the store named by --db (else the default location); prints the error and returns
 * NULL on failure. */
hv_store *cli_open_store(const cli_common *c, int flags);
/* EXIT_DONE, or the usage error printed when -o out (followed if a symlink) is the database
 * st has open or one of its -wal, -shm or -journal files, which writing it would destroy. */
int cli_refuse_db_output(const cli_common *c, const hv_store *st, const char *out);
/* Whether the caller named the local database file that holds the MIME cache (--db or
 * HARVEST_DB naming a file, or --cache-db beside a PostgreSQL one), rather than leaving its
 * location to harvest: a named file that cannot be opened is an error even where it would
 * hold only the MIME cache; the default location then only costs the cache. */
bool cli_cache_named(const cli_common *c);

/* The collect options shared by `collect` and `run` (SPEC 2). */
enum {
	OPT_SINCE = 50,
	OPT_MAX_FILE_BYTES,
	OPT_MAX_FILES,
	OPT_MAX_TOTAL_BYTES,
	OPT_NO_CONTENT,
	OPT_INCLUDE_HIDDEN,
	OPT_COLLECT_EXCLUDE,
	OPT_LABEL,
	OPT_NO_HISTORY,
	OPT_NO_CACHE,
	OPT_COLLECT_XDEV,
	OPT_HOST,
};
#define CLI_COLLECT_OPTS                                                                     \
	{"max-file-bytes", 0, 1, OPT_MAX_FILE_BYTES}, {"max-files", 0, 1, OPT_MAX_FILES},     \
	{"max-total-bytes", 0, 1, OPT_MAX_TOTAL_BYTES}, {"no-content", 0, 0, OPT_NO_CONTENT}, \
	{"include-hidden", 0, 0, OPT_INCLUDE_HIDDEN}, {"exclude", 0, 1, OPT_COLLECT_EXCLUDE}, \
	{"label", 0, 1, OPT_LABEL}, {"no-history", 0, 0, OPT_NO_HISTORY},                     \
	{"no-cache", 0, 0, OPT_NO_CACHE}, {"xdev", 0, 0, OPT_COLLECT_XDEV},                   \
	{"host", 0, 1, OPT_HOST}, {"cache-db", 0, 1, OPT_CACHE_DB}
#define CLI_COLLECT_USAGE                                                                    \
	"  --max-file-bytes SIZE   skip larger files as too_large (default 32MiB)\n"            \
	"  --max-files N           at most N artifacts (default 1000)\n"                        \
	"  --max-total-bytes SIZE  at most SIZE bytes of artifacts (default 256MiB)\n"          \
	"  --no-content            leave content out (null)\n"                                   \
	"  --include-hidden        do not leave out dot-files and __pycache__\n"                 \
	"  --exclude GLOB          leave out names matching GLOB (repeatable)\n"                 \
	"  --label TEXT            label the history run\n"                                      \
	"  --no-history            record nothing in the history\n"                              \
	"  --no-cache              do not use the MIME cache\n"                                 \
	"  --xdev                  stay on DIR's file system (mount points are not entered)\n" \
	"  --host NAME             the host the run is recorded on (default: the hostname)\n"   \
	"  --cache-db PATH         the local MIME cache and snapshots with a PostgreSQL --db\n"

typedef struct cli_collect {
	hv_collect_opts opts;
	const char **excludes;
	size_t n_excludes;
	const char *label;
	const char *host;
	bool no_history;
} cli_collect;

void cli_collect_init(cli_collect *cc);
/* Handles one of the CLI_COLLECT_OPTS; -2 when id is not one of them. */
int cli_collect_opt(cli_collect *cc, cli_common *c, int id, const char *v);
void cli_collect_free(cli_collect *cc);
/* Where the library's warnings and progress go: stderr, through the command's options. */
typedef struct cli_hooks {
	const cli_common *c;
	cli_progress progress;
	const char *dir; /* DIR as given, and its real path (which the library's messages name), */
	char *real;      /* or NULL: see cli_hooks_name_dir */
	unsigned warnings; /* the library's warnings so far (shown or not: --quiet) */
} cli_hooks;
/* Routes cc's warnings and progress through h (which must outlive the collect). */
void cli_collect_hooks(cli_collect *cc, const cli_common *c, cli_hooks *h);
/* Warnings that name a path below dir's real path name it below dir as given instead, as walk
 * does: a path that opens from here. */
void cli_hooks_name_dir(cli_hooks *h, const char *dir);
/* Prints the library's error message as cli_error does (after the progress line is cleared),
 * DIR named as in cli_hooks_name_dir. Before cli_collect_hooks_end. */
void cli_hooks_error(cli_hooks *h, const char *message);
/* Clears the progress line, if one was shown. */
void cli_collect_hooks_end(cli_hooks *h);
/* Prints the page of run row and collection col (may be NULL) on stdout, with this host's
 * name; a spooled content is read from col's temporary file. 0, or -1 with the reason on
 * stderr (standard output's failure, or the content that could not be read back). */
int cli_page_print(const cli_common *c, const hv_run_row *row, const hv_collection *col);
/* The database a page's `history get` commands name with --db (free it): --db, else
 * $HARVEST_DB, a relative path made absolute (the page may be read elsewhere); NULL when
 * neither is set (the reader's default database is the one written to). */
char *cli_page_db(const cli_common *c);
/* Warns of each file of col recorded without its content (hv_collection_unstored), named
 * under dir as the user gave it (NULL: relative). */
bool cli_warn_unstored(const cli_common *c, const char *dir, const hv_collection *col);
/* Warns of each file skipped with an error or as too_large, and once of those skipped as limit
 * (which limit, how many), naming them below dir (NULL: as they are named in the output). */
void cli_warn_skipped(const cli_common *c, const char *dir, const hv_collection *col,
		      const hv_collect_opts *o);
/* Commands. */
int cmd_ls(int argc, char **argv);
int cmd_walk(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_mime(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_history(int argc, char **argv);
int cmd_collect(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_put(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_archive(int argc, char **argv);
/* `history get --run RUN_ID [-o FILE]`: the run's stored artifacts as an archive (format from
 * FILE's extension; tar on standard output); a symlink FILE is refused unless follow, as
 * `history get` refuses one for an artifact. Returns the exit status. */
int cli_archive_run(const cli_common *c, hv_store *st, int64_t run_id, const char *output,
		    bool follow);

#endif
