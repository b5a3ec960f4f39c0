/* harvest snapshot and harvest collect: the files below a directory, or those produced since
 * a snapshot, as OutputFile records. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The descriptors an open database holds: the file, its -wal and its -shm. */
#define CLI_DB_FDS 3

bool cli_db_is_pg(const char *db)
{
	return !strncmp(db, "postgresql://", 13) || !strncmp(db, "postgres://", 11);
}

const char *cli_db_named(const cli_common *c)
{
	if (c->db)
		return c->db;
	const char *env = getenv("HARVEST_DB");
	return env && *env ? env : NULL;
}

/* The descriptors the store holds once open: with a PostgreSQL history, the local cache file
 * (CLI_DB_FDS) and the connection's socket, counted before connecting so that a limit too
 * low is refused before anything is opened (as --db is resolved: HARVEST_DB without it). */
static int store_fds(const cli_common *c, bool history)
{
	const char *db = cli_db_named(c);
	bool pg = db && cli_db_is_pg(db);
	return CLI_DB_FDS + (history && pg ? 1 : 0);
}

int cli_refuse_db_output(const cli_common *c, const hv_store *st, const char *out)
{
	struct stat os;
	if (!out || !strcmp(out, "-") || stat(out, &os) != 0)
		return EXIT_DONE;
	static const char *const side[] = {"", "-wal", "-shm", "-journal"};
	const char *db = hv_store_path(st);
	for (size_t i = 0; db && i < sizeof(side) / sizeof(side[0]); i++) {
		char *p = NULL;
		struct stat ds;
		bool same = asprintf(&p, "%s%s", db, side[i]) >= 0 && stat(p, &ds) == 0 &&
			    ds.st_dev == os.st_dev && ds.st_ino == os.st_ino;
		free(p);
		if (same)
			return cli_usage_error(c, "-o %s: is the history database%s%s: not written over",
					       out, *side[i] ? "'s " : "", side[i]);
	}
	return EXIT_DONE;
}

hv_store *cli_open_store(const cli_common *c, int flags)
{
	hv_store *st = NULL;
	if (hv_store_open_with_cache(&st, c->db, c->cache_db, flags) != HV_OK) {
		cli_error("%s", hv_error_last());
		return NULL;
	}
	return st;
}

/* The database file that holds the snapshots when the history is one too: --db, else
 * HARVEST_DB, else the default location (malloc'd). NULL with a PostgreSQL history (its local
 * file is resolved by the store) or when it cannot be told. */
static char *snapshots_file(const cli_common *c)
{
	const char *db = cli_db_named(c);
	if (db)
		return cli_db_is_pg(db) ? NULL : strdup(db);
	char *path = NULL;
	return hv_store_default_path(&path) == HV_OK ? path : NULL;
}

bool cli_cache_named(const cli_common *c)
{
	/* With a PostgreSQL history the local file is --cache-db, else the default location
	 * (--cache-db alone is not used). */
	const char *db = cli_db_named(c);
	if (!db)
		return false;
	return !cli_db_is_pg(db) || c->cache_db;
}

void cli_collect_init(cli_collect *cc)
{
	memset(cc, 0, sizeof(*cc));
	hv_collect_opts_init(&cc->opts);
}

int cli_collect_opt(cli_collect *cc, cli_common *c, int id, const char *v)
{
	uint64_t u;
	int rc = 0;
	switch (id) {
	case OPT_MAX_FILE_BYTES:
		return cli_parse_size(c, "--max-file-bytes", v, &cc->opts.max_file_bytes);
	case OPT_MAX_FILES:
		rc = cli_parse_uint(c, "--max-files", v, UINT64_MAX, &u);
		cc->opts.max_files = u;
		return rc;
	case OPT_MAX_TOTAL_BYTES:
		return cli_parse_size(c, "--max-total-bytes", v, &cc->opts.max_total_bytes);
	case OPT_NO_CONTENT: cc->opts.no_content = true; return 0;
	case OPT_INCLUDE_HIDDEN: cc->opts.include_hidden = true; return 0;
	case OPT_COLLECT_EXCLUDE: {
		const char **e = realloc(cc->excludes, (cc->n_excludes + 1) * sizeof(*e));
		if (!e)
			return cli_usage_error(c, "out of memory");
		cc->excludes = e;
		e[cc->n_excludes++] = v;
		cc->opts.excludes = e;
		cc->opts.n_excludes = cc->n_excludes;
		return 0;
	}
	case OPT_LABEL: cc->label = v; return 0;
	case OPT_HOST:
		if (!v || !*v)
			return cli_usage_error(c, "--host: empty name");
		if (!hv_host_name_ok(v))
			return cli_usage_error(c, "--host: not 1 to 255 bytes of UTF-8 text without "
						  "control characters");
		cc->host = v;
		return 0;
	case OPT_NO_HISTORY: cc->no_history = true; return 0;
	case OPT_NO_CACHE: cc->opts.no_cache = true; return 0;
	case OPT_COLLECT_XDEV: cc->opts.xdev = true; return 0;
	}
	return -2;
}

void cli_collect_free(cli_collect *cc)
{
	free(cc->excludes);
}

/* message, a library message that may start with DIR's real path (which is what the library
 * opened), with that path named as DIR was given instead (a path that opens from here, as walk
 * names it): *head is to be printed first, then what is returned. */
static const char *name_as_given(const cli_hooks *x, const char *message, const char **head)
{
	size_t rl = x->real ? strlen(x->real) : 0;
	*head = "";
	if (!rl || strncmp(message, x->real, rl) != 0 || (message[rl] != '/' && message[rl] != ':'))
		return message;
	bool slash = *x->dir && x->dir[strlen(x->dir) - 1] == '/';
	*head = x->dir;
	return message + rl + (slash && message[rl] == '/' ? 1 : 0);
}

static void collect_warning(void *ctx, const char *message)
{
	cli_hooks *x = ctx;
	cli_progress_end(&x->progress);
	x->warnings++;
	const char *head;
	const char *rest = name_as_given(x, message, &head);
	cli_warn(x->c, "%s%s", head, rest);
}

void cli_hooks_error(cli_hooks *h, const char *message)
{
	cli_progress_end(&h->progress);
	const char *head;
	const char *rest = name_as_given(h, message, &head);
	cli_error("%s%s", head, rest);
}

void cli_hooks_name_dir(cli_hooks *h, const char *dir)
{
	h->dir = dir;
	h->real = realpath(dir, NULL);
}

static void collect_progress(void *ctx, uint64_t entries, uint64_t files, uint64_t bytes)
{
	cli_hooks *x = ctx;
	cli_progress_update(&x->progress, entries, files, bytes);
}

bool cli_warn_unstored(const cli_common *c, const char *dir, const hv_collection *col)
{
	bool slash = dir && *dir && dir[strlen(dir) - 1] == '/', any = false;
	for (size_t i = 0; col && i < col->n_files; i++) {
		if (!hv_collection_unstored(col, i))
			continue;
		any = true;
		cli_warn(c, "%s%s%s: %llu bytes, more than a history stores (%d): recorded without "
			    "its content",
			 dir ? dir : "", dir && !slash ? "/" : "", col->files[i].path,
			 (unsigned long long)col->files[i].content_len, HV_STORE_CONTENT_MAX);
	}
	return any;
}

void cli_warn_skipped(const cli_common *c, const char *dir, const hv_collection *col,
		      const hv_collect_opts *o)
{
	bool slash = dir && *dir && dir[strlen(dir) - 1] == '/';
	size_t limited = 0;
	for (size_t i = 0; col && i < col->n_skipped; i++) {
		const hv_skipped_file *k = &col->skipped[i];
		/* The error names the file below DIR, as its "path" does: on stderr it is named as
		 * walk names it, DIR included, a path that can be opened from here. */
		bool below = dir && k->error && strncmp(k->error, k->path, k->path_len) == 0 &&
			     k->error[k->path_len] == ':';
		if (k->error && below)
			cli_warn(c, "%s%s%s", dir, slash ? "" : "/", k->error);
		else if (k->error)
			cli_warn(c, "%s", k->error);
		else if (strcmp(k->reason, "too_large") == 0)
			cli_warn(c, "%s%s%s: %llu bytes, more than --max-file-bytes (%llu): not collected",
				 dir ? dir : "", dir && !slash ? "/" : "", k->path,
				 (unsigned long long)k->size, (unsigned long long)o->max_file_bytes);
		else if (strcmp(k->reason, "limit") == 0)
			limited++;
	}
	if (limited == 0)
		return;
	if (col->n_files >= o->max_files)
		cli_warn(c, "%s: %zu more file%s not collected: --max-files (%llu) reached",
			 dir ? dir : ".", limited, limited == 1 ? "" : "s",
			 (unsigned long long)o->max_files);
	else
		cli_warn(c, "%s: %zu more file%s not collected: --max-total-bytes (%llu) reached",
			 dir ? dir : ".", limited, limited == 1 ? "" : "s",
			 (unsigned long long)o->max_total_bytes);
}

char *cli_page_db(const cli_common *c)
{
	const char *db = cli_db_named(c);
	if (!db)
		return NULL;
	char cwd[PATH_MAX];
	char *out = NULL;
	bool uri = cli_db_is_pg(db);
	if (uri || db[0] == '/' || !getcwd(cwd, sizeof(cwd)))
		return strdup(db);
	return asprintf(&out, "%s/%s", strcmp(cwd, "/") ? cwd : "", db) < 0 ? NULL : out;
}

int cli_page_print(const cli_common *c, const hv_run_row *row, const hv_collection *col)
{
	char host[256] = "";
	hv_page_opts po = {0};
	if (row->host && *row->host) { /* --host: the host the run is recorded on */
		po.host = row->host;
	} else if (gethostname(host, sizeof(host)) == 0 && host[0]) {
		host[sizeof(host) - 1] = '\0';
		po.host = host;
	}
	char *db = cli_page_db(c);
	po.db = db;
	hv_status s = hv_page_write_collection(row, col, &po, hv_page_write_file, stdout);
	free(db);
	if (s != HV_OK && !ferror(stdout)) {
		/* Not the output: a spooled content could not be read back (the page is cut). */
		cli_error("%s", hv_error_last());
		return -1;
	}
	if (s != HV_OK) {
		cli_error("standard output: %s", hv_error_last());
		return -1;
	}
	if (fflush(stdout) != 0) {
		cli_error("standard output: %s", strerror(errno));
		return -1;
	}
	return 0;
}

void cli_collect_hooks(cli_collect *cc, const cli_common *c, cli_hooks *h)
{
	h->c = c;
	h->dir = NULL;
	h->real = NULL;
	h->warnings = 0;
	cli_check_excludes(c, cc->excludes, cc->n_excludes);
	cli_progress_init(&h->progress, c);
	cc->opts.on_warning = collect_warning;
	cc->opts.on_progress = collect_progress;
	cc->opts.ctx = h;
}

void cli_collect_hooks_end(cli_hooks *h)
{
	cli_progress_end(&h->progress);
	free(h->real);
	h->real = NULL;
}

/* Parses a command that takes one DIR and prints json or jsonl. */
static int parse_dir_command(cli_common *c, int argc, char **argv, const cli_opt *opts,
			     cli_opt_fn fn, void *ctx, const char *usage, char ***pos)
{
	int npos = 0;
	int rc = cli_parse(c, argc, argv, opts, fn, ctx, usage, pos, &npos);
	if (rc == 0 && npos != 1)
		rc = cli_usage_error(c, npos == 0 ? "missing DIR" : "one DIR at a time");
	if (rc == 0)
		rc = cli_check_format(c, FMT_JSON,
				      strcmp(c->cmd, "collect") ? "json,jsonl" : "json,jsonl,html");
	/* A missing DIR is exit 3 whatever else is wrong, as for walk: checked before the
	 * database is opened (the library checks again, through descriptors). */
	struct stat s;
	if (rc == 0 && stat((*pos)[0], &s) != 0) {
		cli_error("%s: %s", (*pos)[0], strerror(errno));
		rc = errno == ENOENT || errno == ENOTDIR ? EXIT_NOTDIR : EXIT_WARN;
	} else if (rc == 0 && !S_ISDIR(s.st_mode)) {
		cli_error("%s: %s", (*pos)[0], strerror(ENOTDIR));
		rc = EXIT_NOTDIR;
	}
	return rc;
}

/* ---- snapshot ---- */

static const cli_opt snapshot_opts[] = {
	{"help", 'h', 0, OPT_HELP}, {"format", 0, 1, OPT_FORMAT}, {"case", 0, 1, OPT_CASE},
	{"quiet", 'q', 0, OPT_QUIET}, {"db", 0, 1, OPT_DB}, {"include-hidden", 0, 0, OPT_INCLUDE_HIDDEN},
	{"exclude", 0, 1, OPT_COLLECT_EXCLUDE}, {"xdev", 0, 0, OPT_COLLECT_XDEV},
	{"cache-db", 0, 1, OPT_CACHE_DB}, {NULL, 0, 0, 0},
};

static const char snapshot_usage[] =
	"usage: harvest snapshot [options] DIR\n"
	"Records the lstat state of every entry below DIR in the database, for a later\n"
	"'harvest collect --since ID DIR' with the same --include-hidden, --exclude and\n"
	"--xdev. Prints {\"snapshot_id\", \"root\", \"entries\"}.\n"
	"  --db PATH           the database (default $HARVEST_DB, else\n"
	"                      ${XDG_DATA_HOME:-~/.local/share}/harvest/harvest.db)\n"
	"  --include-hidden    also record dot-files and __pycache__ (left out by default,\n"
	"                      as collect leaves them out)\n"
	"  --exclude GLOB      leave out names matching GLOB (repeatable)\n"
	"  --xdev              stay on DIR's file system (mount points are not entered)\n"
	"  --format F          json (default) or jsonl\n"
	"  --case C, --quiet\n"
	"Exit status: 0 complete; 1 a directory could not be read or an entry examined (the\n"
	"snapshot lacks it; warned of); 2 usage; 3 DIR is missing or not a directory.\n";

static int snapshot_opt(void *ctx, cli_common *c, int id, const char *v)
{
	int rc = cli_collect_opt(ctx, c, id, v);
	return rc == -2 ? 0 : rc;
}

int cmd_snapshot(int argc, char **argv)
{
	cli_common c = {.cmd = "snapshot"};
	cli_collect cc;
	cli_collect_init(&cc);
	char **pos = NULL;
	int rc = parse_dir_command(&c, argc, argv, snapshot_opts, snapshot_opt, &cc, snapshot_usage,
				   &pos);
	if (rc != 0) {
		free(pos);
		cli_collect_free(&cc);
		return rc < 0 ? EXIT_DONE : rc;
	}
	cli_hooks hooks;
	cli_collect_hooks(&cc, &c, &hooks);
	hv_store *st = NULL;
	if (hv_collect_check_fds(pos[0], CLI_DB_FDS) != HV_OK) {
		cli_error("%s", hv_error_last());
	} else {
		/* A snapshot is local: a PostgreSQL history is not connected to. */
		st = cli_open_store(&c, HV_STORE_NO_HISTORY);
	}
	if (!st) {
		free(pos);
		cli_collect_free(&cc);
		return EXIT_WARN;
	}
	int64_t id = 0;
	uint64_t entries = 0;
	char *root = NULL;
	cli_hooks_name_dir(&hooks, pos[0]);
	hv_status s = hv_snapshot_take(st, pos[0], &cc.opts, &id, &entries, &root);
	if (s != HV_OK)
		cli_hooks_error(&hooks, hv_error_last());
	cli_collect_hooks_end(&hooks);
	if (s != HV_OK) {
		rc = cli_exit_status(s);
	} else {
		hv_json *j = cli_json_stdout(&c);
		if (j) {
			hv_record_snapshot(j, id, root, entries);
			hv_json_newline(j);
		}
		rc = cli_json_finish(j);
		/* A directory that could not be read (warned of, also under --quiet): the snapshot
		 * is incomplete, as a walk's listing would be. */
		if (rc == EXIT_DONE && hooks.warnings)
			rc = EXIT_WARN;
		free(root);
	}
	if (hv_store_close(st) != HV_OK && rc == EXIT_DONE) {
		cli_error("%s", hv_error_last());
		rc = EXIT_WARN;
	}
	free(pos);
	cli_collect_free(&cc);
	return rc;
}

/* ---- collect ---- */

enum { OPT_COLLECT_THREADS = OPT_OWN };

static const cli_opt collect_opts[] = {
	{"help", 'h', 0, OPT_HELP}, {"format", 0, 1, OPT_FORMAT}, {"case", 0, 1, OPT_CASE},
	{"quiet", 'q', 0, OPT_QUIET}, {"db", 0, 1, OPT_DB}, {"since", 0, 1, OPT_SINCE},
	{"threads", 0, 1, OPT_COLLECT_THREADS}, CLI_COLLECT_OPTS, {NULL, 0, 0, 0},
};

static const char collect_usage[] =
	"usage: harvest collect [options] DIR\n"
	"OutputFile records {name, path, mime_type, size, sha256, content} for the regular files\n"
	"below DIR, or with --since only those created or changed since that snapshot. Prints\n"
	"{\"run_id\", \"output_files\", \"skipped\"} and records a history run.\n"
	"  --since SNAPSHOT_ID     only files produced since the snapshot (taken with the\n"
	"                          same --include-hidden, --exclude and --xdev; else exit 2)\n"
	"  --threads N             walker and detection threads (default: online CPUs, at\n"
	"                          most 8)\n" CLI_COLLECT_USAGE
	"  --db PATH               the database\n"
	"  --format F              json (default), jsonl or html (a self-contained page)\n"
	"  --case C, --quiet\n"
	"Exit status: 0 complete; 1 something was skipped as too_large, limit or error, or a\n"
	"directory could not be read; 2 usage; 3 DIR is missing or not a directory.\n";

struct collect_cli {
	cli_collect cc;
	uint64_t since;
};

static int collect_opt(void *ctx, cli_common *c, int id, const char *v)
{
	struct collect_cli *k = ctx;
	if (id == OPT_COLLECT_THREADS)
		return cli_parse_int(c, "--threads", v, 1, 1024, &k->cc.opts.threads);
	if (id == OPT_SINCE) {
		int rc = cli_parse_uint(c, "--since", v, INT64_MAX, &k->since);
		if (rc == 0 && k->since == 0)
			rc = cli_usage_error(c, "--since: snapshot ids start at 1");
		k->cc.opts.since_snapshot = (int64_t)k->since;
		return rc;
	}
	int rc = cli_collect_opt(&k->cc, c, id, v);
	return rc == -2 ? 0 : rc;
}

int cmd_collect(int argc, char **argv)
{
	cli_common c = {.cmd = "collect"};
	struct collect_cli k = {0};
	cli_collect_init(&k.cc);
	char **pos = NULL;
	int rc = parse_dir_command(&c, argc, argv, collect_opts, collect_opt, &k, collect_usage,
				   &pos);
	if (rc != 0) {
		free(pos);
		cli_collect_free(&k.cc);
		return rc < 0 ? EXIT_DONE : rc;
	}
	cli_hooks hooks;
	cli_collect_hooks(&k.cc, &c, &hooks);
	hv_store *st = NULL;
	bool need_store = !k.cc.no_history || k.since || !k.cc.opts.no_cache;
	int fds = (need_store ? store_fds(&c, !k.cc.no_history) : 0) + 2;
	if (hv_collect_check_fds(pos[0], fds) != HV_OK) {
		cli_error("%s", hv_error_last());
		free(pos);
		cli_collect_free(&k.cc);
		return EXIT_WARN;
	}
	/* No database file, no snapshot in it: said without creating one there (a mistyped --db
	 * would be left behind as an empty database). A missing DIR is still exit 3, below. */
	struct stat sb;
	char *snaps = k.since && stat(pos[0], &sb) == 0 && S_ISDIR(sb.st_mode) ? snapshots_file(&c)
									       : NULL;
	if (snaps && stat(snaps, &sb) != 0 && errno == ENOENT) {
		cli_error("no snapshot %llu: %s does not exist", (unsigned long long)k.since, snaps);
		free(snaps);
		free(pos);
		cli_collect_free(&k.cc);
		return EXIT_USAGE;
	}
	free(snaps);
	bool cache_lost = false;
	if (need_store && k.cc.no_history && !k.since && !cli_cache_named(&c)) {
		/* The store would hold only the MIME cache, at a location harvest chose: without
		 * it every answer is the same, only slower. A warning (exit 1), as for mime. */
		if (hv_store_open_with_cache(&st, c.db, c.cache_db, HV_STORE_NO_HISTORY) != HV_OK) {
			cli_warn(&c, "%s; collecting without the MIME cache", hv_error_last());
			st = NULL;
			k.cc.opts.no_cache = true;
			cache_lost = true;
		}
	} else if (need_store &&
		   !(st = cli_open_store(&c, k.cc.no_history ? HV_STORE_NO_HISTORY : 0))) {
		free(pos);
		cli_collect_free(&k.cc);
		return EXIT_WARN;
	}
	/* The contents wait in a temporary file, not in memory, until they are recorded and
	 * printed (the page too reads them from there, one at a time). */
	k.cc.opts.spool_content = true;
	hv_collection *col = NULL;
	int64_t started_ns = hv_store_now_ns();
	cli_hooks_name_dir(&hooks, pos[0]);
	hv_status s = hv_collect(st, pos[0], &k.cc.opts, &col);
	if (s != HV_OK)
		cli_hooks_error(&hooks, hv_error_last());
	cli_collect_hooks_end(&hooks);
	if (s != HV_OK) {
		/* An unknown --since snapshot is a bad option value. */
		rc = s == HV_ENOTFOUND ? EXIT_USAGE : cli_exit_status(s);
	} else {
		int64_t run_id = 0;
		/* Ended when the walk did: the history and the page give the same times. */
		int64_t ended_ns = hv_store_now_ns();
		if (!k.cc.no_history) {
			/* Started when the collect did, as its page says. A collect has no duration
			 * (null, as for a command that did not end): it ran no command. */
			hv_run_start start = {.label = k.cc.label, .dir = col->root, .host = k.cc.host,
					      .started_at_ns = started_ns};
			hv_run_end end = {.ended_at_ns = ended_ns, .duration_ms = -1};
			if (hv_collection_record(st, col, &start, &end, &run_id) != HV_OK) {
				cli_error("%s", hv_error_last());
				rc = EXIT_WARN;
				run_id = 0;
			} else if (cli_warn_unstored(&c, pos[0], col)) {
				rc = EXIT_WARN;
			}
		}
		cli_warn_skipped(&c, pos[0], col, &k.cc.opts);
		hv_json *j = c.format == FMT_HTML ? NULL : cli_json_stdout(&c);
		if (c.format == FMT_HTML) {
			hv_run_row row = {
				.run_id = run_id,
				.label = k.cc.label,
				.label_len = k.cc.label ? strlen(k.cc.label) : 0,
				.dir = col->root,
				.dir_len = strlen(col->root),
				.started_at_ns = started_ns,
				.ended = true,
				.ended_at_ns = ended_ns,
				.duration_ms = -1,
				.host = k.cc.host,
			};
			if (cli_page_print(&c, &row, col) != 0)
				rc = EXIT_WARN;
			if (col->incomplete || col->warnings)
				rc = EXIT_WARN;
		} else if (j) {
			if (hv_record_collection(j, run_id, col, !k.cc.opts.no_content) != HV_OK) {
				/* A content could not be read back: not a whole record. */
				cli_error("%s", hv_error_last());
				rc = EXIT_WARN;
			} else {
				hv_json_newline(j);
			}
		}
		if (c.format != FMT_HTML &&
		    (cli_json_finish(j) != EXIT_DONE || col->incomplete || col->warnings))
			rc = EXIT_WARN;
		hv_collection_free(col);
	}
	if (st && hv_store_close(st) != HV_OK && rc == EXIT_DONE) {
		cli_error("%s", hv_error_last());
		rc = EXIT_WARN;
	}
	if (cache_lost && rc == EXIT_DONE)
		rc = EXIT_WARN;
	free(pos);
	cli_collect_free(&k.cc);
	return rc;
}
