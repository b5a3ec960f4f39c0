/* harvest history: past runs and their artifacts, their stored bytes, and pruning. */
#include "cli.h"
#include "../lib/fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
	OPT_LIMIT = OPT_OWN,
	OPT_H_SINCE,
	OPT_H_LABEL,
	OPT_RUN,
	OPT_MIME,
	OPT_NAME,
	OPT_SHA256,
	OPT_CONTENT,
	OPT_OUTPUT,
	OPT_KEEP_RUNS,
	OPT_BEFORE,
	OPT_FOLLOW,
	OPT_H_HOST,
	OPT_TO,
	OPT_PUSH_SINCE,
};

#define COMMON_OPTS                                                                          \
	{"help", 'h', 0, OPT_HELP}, {"format", 0, 1, OPT_FORMAT}, {"case", 0, 1, OPT_CASE},   \
	{"quiet", 'q', 0, OPT_QUIET}, {"db", 0, 1, OPT_DB}, {"cache-db", 0, 1, OPT_CACHE_DB}

static const cli_opt runs_opts[] = {
	COMMON_OPTS, {"limit", 0, 1, OPT_LIMIT}, {"since", 0, 1, OPT_H_SINCE},
	{"label", 0, 1, OPT_H_LABEL}, {"host", 0, 1, OPT_H_HOST}, {NULL, 0, 0, 0},
};
static const cli_opt artifacts_opts[] = {
	COMMON_OPTS, {"limit", 0, 1, OPT_LIMIT}, {"since", 0, 1, OPT_H_SINCE},
	{"run", 0, 1, OPT_RUN}, {"mime", 0, 1, OPT_MIME}, {"name", 0, 1, OPT_NAME},
	{"sha256", 0, 1, OPT_SHA256}, {"host", 0, 1, OPT_H_HOST}, {NULL, 0, 0, 0},
};
static const cli_opt show_opts[] = {COMMON_OPTS, {"content", 0, 0, OPT_CONTENT}, {NULL, 0, 0, 0}};
static const cli_opt get_opts[] = {
	COMMON_OPTS, {"output", 'o', 1, OPT_OUTPUT}, {"follow", 0, 0, OPT_FOLLOW},
	{"run", 0, 1, OPT_RUN}, {NULL, 0, 0, 0},
};
static const cli_opt prune_opts[] = {
	COMMON_OPTS, {"keep-runs", 0, 1, OPT_KEEP_RUNS}, {"before", 0, 1, OPT_BEFORE},
	{NULL, 0, 0, 0},
};
static const cli_opt push_opts[] = {
	COMMON_OPTS, {"to", 0, 1, OPT_TO}, {"since", 0, 1, OPT_PUSH_SINCE}, {NULL, 0, 0, 0},
};

static const char history_usage[] =
	"usage: harvest history SUBCOMMAND [options]\n"
	"  runs [--limit N] [--since TIME] [--label TEXT] [--host NAME]\n"
	"                                                      past runs, newest first\n"
	"  artifacts [--run ID] [--mime PATTERN] [--name GLOB] [--sha256 HEX] [--since TIME]\n"
	"            [--host NAME] [--limit N]                 recorded artifacts\n"
	"  show RUN_ID [--content]                             a run's ExecutionResult again\n"
	"  show RUN_ID --format html                           the run as a self-contained page\n"
	"  get ARTIFACT_ID|SHA256 [-o FILE] [--follow]         an artifact's stored bytes\n"
	"            (SHA256: all 64 hex digits or a unique start of at least 4 with a letter,\n"
	"            or sha256:HEX; digits alone are an ARTIFACT_ID)\n"
	"            (-o -: stdout; a device or FIFO FILE is written into; a symlink FILE is\n"
	"            refused unless --follow)\n"
	"  get --run RUN_ID [-o FILE.tar|.tar.gz|.zip] [--follow]\n"
	"                                                      a run's artifacts as an archive\n"
	"  prune (--keep-runs N | --before TIME)               delete old ended runs and contents\n"
	"  push --to URI [--since RUN_ID]                      copy the ended runs of the SQLite\n"
	"            history (--db) into a PostgreSQL one (again: adds nothing)\n"
	"TIME is RFC 3339 (2026-11-30T03:29:07Z) or an age: 90m, 12h, 7d. PATTERN like image/*.\n"
	"Common options: --db PATH|postgresql://URI, --cache-db PATH, --format json|jsonl\n"
	"(show: also html), --case snake|camel, --quiet.\n";

struct history_cli {
	hv_run_filter runs;
	hv_artifact_filter arts;
	bool content;
	const char *output;
	bool follow;
	hv_prune_opts prune;
	const char *to;
	int64_t push_since;
};

static int history_opt(void *ctx, cli_common *c, int id, const char *v)
{
	struct history_cli *h = ctx;
	uint64_t u;
	int rc = 0;
	switch (id) {
	case OPT_LIMIT:
		rc = cli_parse_uint(c, "--limit", v, INT64_MAX, &u);
		h->runs.limit = h->arts.limit = u;
		if (rc == 0 && u == 0)
			rc = cli_usage_error(c, "--limit: must be at least 1");
		return rc;
	case OPT_H_SINCE:
		rc = cli_parse_time(c, "--since", v, &h->runs.since_ns);
		h->arts.since_ns = h->runs.since_ns;
		return rc;
	case OPT_H_LABEL: h->runs.label = v; return 0;
	case OPT_H_HOST: h->runs.host = h->arts.host = v; return 0;
	case OPT_TO: h->to = v; return 0;
	case OPT_PUSH_SINCE:
		rc = cli_parse_uint(c, "--since", v, INT64_MAX, &u);
		h->push_since = (int64_t)u;
		return rc;
	case OPT_RUN:
		rc = cli_parse_uint(c, "--run", v, INT64_MAX, &u);
		h->arts.run_id = (int64_t)u;
		if (rc == 0 && u == 0)
			rc = cli_usage_error(c, "--run: run ids start at 1");
		return rc;
	case OPT_MIME: h->arts.mime = v; return 0;
	case OPT_NAME: h->arts.name = v; return 0;
	case OPT_SHA256:
		if (!*v || strspn(v, "0123456789abcdefABCDEF") != strlen(v) || strlen(v) > 64)
			return cli_usage_error(c, "--sha256: expected hex digits, not '%s'", v);
		h->arts.sha256 = v;
		return 0;
	case OPT_CONTENT: h->content = true; return 0;
	case OPT_OUTPUT: return cli_output_opt(c, v, &h->output);
	case OPT_FOLLOW: h->follow = true; return 0;
	case OPT_KEEP_RUNS:
		rc = cli_parse_uint(c, "--keep-runs", v, INT64_MAX, &u);
		h->prune.keep_runs = (int64_t)u;
		return rc;
	case OPT_BEFORE:
		h->prune.has_before = true;
		return cli_parse_time(c, "--before", v, &h->prune.before_ns);
	}
	return 0;
}

static int list_runs(cli_common *c, hv_store *st, struct history_cli *h, hv_json *j)
{
	hv_run_iter *it;
	if (hv_store_runs(st, &h->runs, &it) != HV_OK) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	const hv_run_row *r;
	hv_status s;
	while ((s = hv_run_iter_next(it, &r)) == HV_OK) {
		hv_record_run_row(j, r);
		cli_output_record(j, c);
	}
	hv_run_iter_free(it);
	if (s != HV_DONE) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	return EXIT_DONE;
}

static int list_artifacts(cli_common *c, hv_store *st, struct history_cli *h, hv_json *j)
{
	hv_artifact_iter *it;
	hv_status s = hv_store_artifacts(st, &h->arts, &it);
	if (s != HV_OK) {
		cli_error("%s", hv_error_last());
		return cli_exit_status(s);
	}
	const hv_artifact_row *a;
	while ((s = hv_artifact_iter_next(it, &a)) == HV_OK) {
		hv_record_artifact_row(j, a);
		cli_output_record(j, c);
	}
	hv_artifact_iter_free(it);
	if (s != HV_DONE) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	return EXIT_DONE;
}

static int parse_id(const cli_common *c, const char *what, const char *v, int64_t *out)
{
	uint64_t u;
	if (cli_parse_uint(c, what, v, INT64_MAX, &u) != 0)
		return EXIT_USAGE;
	*out = (int64_t)u;
	return 0;
}

static int show_run(cli_common *c, hv_store *st, struct history_cli *h, const char *arg,
		    hv_json *j)
{
	int64_t id;
	if (parse_id(c, "RUN_ID", arg, &id) != 0)
		return EXIT_USAGE;
	hv_status s = hv_record_history_result(j, st, id, h->content);
	if (s != HV_OK) {
		/* "no run 7", or why the history could not be read: nothing is printed */
		cli_error("%s", hv_error_last());
		return cli_exit_status(s);
	}
	return EXIT_DONE;
}

/* The run as an HTML page on stdout, written as it is made (one artifact at a time). */
static int show_page(cli_common *c, hv_store *st, const char *arg)
{
	int64_t id;
	if (parse_id(c, "RUN_ID", arg, &id) != 0)
		return EXIT_USAGE;
	hv_page_opts po = {0};
	char *db = cli_page_db(c);
	po.db = db;
	hv_status s = hv_page_write_run(st, id, &po, hv_page_write_file, stdout);
	free(db);
	if (s == HV_OK && fflush(stdout) != 0) {
		cli_error("standard output: %s", strerror(errno));
		return EXIT_WARN;
	}
	if (s != HV_OK) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	return EXIT_DONE;
}

enum { SHA_PREFIX_MIN = 4 };

/* The one recorded SHA-256 (64 hex digits, into full) that starts with prefix, as git takes
 * an abbreviated hash: exit 1 when none does, 2 (a usage error) when several contents do. */
static int resolve_sha_prefix(const cli_common *c, hv_store *st, const char *prefix,
			      char full[65])
{
	hv_artifact_filter f = {.sha256 = prefix};
	hv_artifact_iter *it;
	if (hv_store_artifacts(st, &f, &it) != HV_OK) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	full[0] = '\0';
	bool several = false;
	const hv_artifact_row *row;
	hv_status s;
	while (!several && (s = hv_artifact_iter_next(it, &row)) == HV_OK) {
		if (!full[0])
			snprintf(full, 65, "%s", row->sha256);
		else if (strcasecmp(full, row->sha256) != 0)
			several = true;
	}
	hv_artifact_iter_free(it);
	if (!several && s != HV_DONE) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	if (several)
		return cli_usage_error(c, "SHA256: more than one recorded content starts with %s: "
					  "give more digits",
				       prefix);
	if (!full[0]) {
		cli_error("no artifact whose SHA-256 starts with %s", prefix);
		return EXIT_WARN;
	}
	return EXIT_DONE;
}

static int get_artifact(cli_common *c, hv_store *st, struct history_cli *h, const char *arg)
{
	void *data = NULL;
	size_t len = 0;
	hv_status s;
	/* "sha256:" before hex digits says they are a digest, or a prefix of one, even when all
	 * are decimal digits; without it, digits alone are an artifact id. */
	bool tagged = strncmp(arg, "sha256:", 7) == 0;
	const char *hex = tagged ? arg + 7 : arg;
	size_t alen = strlen(hex);
	bool all_hex = alen > 0 && strspn(hex, "0123456789abcdefABCDEF") == alen;
	bool digits = strspn(hex, "0123456789") == alen;
	if (all_hex && alen > 64) {
		return cli_usage_error(c, "SHA256: %zu hex digits, more than a SHA-256's 64", alen);
	} else if (all_hex && alen == 64) {
		s = hv_store_content_get(st, hex, &data, &len);
	} else if (all_hex && (tagged || !digits)) {
		if (alen < SHA_PREFIX_MIN)
			return cli_usage_error(c, "SHA256: a prefix needs at least %d hex digits, not '%s'",
					       SHA_PREFIX_MIN, hex);
		char full[65];
		int rc = resolve_sha_prefix(c, st, hex, full);
		if (rc != EXIT_DONE)
			return rc;
		s = hv_store_content_get(st, full, &data, &len);
	} else if (tagged) {
		return cli_usage_error(c, "SHA256: expected hex digits after 'sha256:', not '%s'", hex);
	} else if (!digits) {
		return cli_usage_error(c, "expected an artifact id (a number) or a SHA-256 (hex digits, "
					  "at least %d; all of it or its start), not '%s'",
				       SHA_PREFIX_MIN, arg);
	} else {
		int64_t id;
		if (parse_id(c, "ARTIFACT_ID", arg, &id) != 0)
			return EXIT_USAGE;
		s = hv_store_artifact_content(st, id, &data, &len);
	}
	if (s != HV_OK) {
		/* "no artifact N", "artifact N: its content was not stored", a digest mismatch... */
		cli_error("%s", hv_error_last());
		return cli_exit_status(s);
	}
	int rc = cli_refuse_db_output(c, st, h->output);
	if (rc != EXIT_DONE) {
		free(data);
		return rc;
	}
	if (h->output && strcmp(h->output, "-") != 0) {
		if (hv_write_file(h->output, data, len, h->follow ? HV_WRITE_FOLLOW : 0) != HV_OK) {
			cli_error("%s", hv_error_last());
			rc = EXIT_WARN;
		}
	} else if (hv_write_all(STDOUT_FILENO, data, len) != 0) {
		cli_error("standard output: %s", strerror(errno));
		rc = EXIT_WARN;
	}
	free(data);
	return rc;
}

static int prune(cli_common *c, hv_store *st, struct history_cli *h, hv_json *j)
{
	hv_prune_result res;
	if (hv_store_prune(st, &h->prune, &res) != HV_OK) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	hv_record_prune(j, &res);
	hv_json_newline(j);
	return EXIT_DONE;
}

static int push(hv_store *st, struct history_cli *h, hv_json *j)
{
	uint64_t n = 0;
	if (hv_store_push(st, h->to, h->push_since, &n) != HV_OK) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	hv_record_push(j, n);
	hv_json_newline(j);
	return EXIT_DONE;
}

int cmd_history(int argc, char **argv)
{
	static const struct {
		const char *name;
		const cli_opt *opts;
		int npos;  /* positional arguments wanted */
	} subs[] = {
		{"runs", runs_opts, 0},         {"artifacts", artifacts_opts, 0},
		{"show", show_opts, 1},         {"get", get_opts, 1},
		{"prune", prune_opts, 0},       {"push", push_opts, 0},
	};
	cli_common c = {.cmd = "history"};
	if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
		fputs(history_usage, argc < 1 ? stderr : stdout);
		return argc < 1 ? EXIT_USAGE : EXIT_DONE;
	}
	size_t k = 0;
	while (k < sizeof(subs) / sizeof(subs[0]) && strcmp(subs[k].name, argv[0]) != 0)
		k++;
	if (k == sizeof(subs) / sizeof(subs[0]))
		return cli_usage_error(&c, "unknown subcommand '%s'", argv[0]);
	char cmdname[32];
	snprintf(cmdname, sizeof(cmdname), "history %s", subs[k].name);
	c.cmd = cmdname;
	struct history_cli h = {.prune = {.keep_runs = -1}};
	char **pos = NULL;
	int npos = 0;
	int rc = cli_parse(&c, argc - 1, argv + 1, subs[k].opts, history_opt, &h, history_usage,
			   &pos, &npos);
	bool get_run = !strcmp(subs[k].name, "get") && h.arts.run_id > 0;
	if (rc == 0 && npos != (get_run ? 0 : subs[k].npos))
		rc = cli_usage_error(&c, subs[k].npos && !get_run ? "expected one argument"
								 : "takes no arguments");
	bool is_get = !strcmp(subs[k].name, "get"), is_prune = !strcmp(subs[k].name, "prune");
	bool is_push = !strcmp(subs[k].name, "push");
	if (rc == 0 && is_push && !h.to)
		rc = cli_usage_error(&c, "give --to postgresql://...");
	if (rc == 0 && is_push && !cli_db_is_pg(h.to))
		rc = cli_usage_error(&c, "--to must be a postgresql:// URI");
	if (rc == 0 && is_push && cli_db_named(&c) && cli_db_is_pg(cli_db_named(&c)))
		rc = cli_usage_error(&c, "the local history (--db, HARVEST_DB) must be a SQLite file");
	if (rc == 0 && is_prune && h.prune.keep_runs < 0 && !h.prune.has_before)
		rc = cli_usage_error(&c, "give --keep-runs N or --before TIME");
	if (rc == 0 && is_prune && h.prune.keep_runs >= 0 && h.prune.has_before)
		rc = cli_usage_error(&c, "give --keep-runs N or --before TIME, not both");
	bool is_list = !strcmp(subs[k].name, "runs") || !strcmp(subs[k].name, "artifacts");
	bool is_show = !strcmp(subs[k].name, "show");
	if (rc == 0 && !is_get)
		rc = cli_check_format(&c, FMT_JSON, is_show ? "json,jsonl,html" : "json,jsonl");
	if (rc != 0) {
		free(pos);
		return rc < 0 ? EXIT_DONE : rc;
	}
	/* A local history named but absent has nothing to push or prune: the writing open below
	 * would create an empty file there and report success (a mistyped --db doing nothing). */
	const char *local = cli_db_named(&c);
	struct stat lsb;
	if ((is_push || is_prune) && local && !cli_db_is_pg(local) && stat(local, &lsb) != 0 &&
	    errno == ENOENT) {
		cli_error("%s: no such history database: nothing to %s", local,
			  is_push ? "push" : "prune");
		free(pos);
		return EXIT_WARN;
	}
	/* push writes nothing locally but may upgrade the schema (for its identity). */
	hv_store *st = cli_open_store(&c, is_prune || is_push ? 0 : HV_STORE_READONLY);
	if (!st) {
		free(pos);
		return EXIT_WARN;
	}
	if (get_run) {
		rc = cli_archive_run(&c, st, h.arts.run_id, h.output, h.follow);
	} else if (is_get) {
		rc = get_artifact(&c, st, &h, pos[0]);
	} else if (is_show && c.format == FMT_HTML) {
		rc = show_page(&c, st, pos[0]);
	} else {
		/* jsonl lists stream; everything else is built in memory and printed only when
		 * complete, so a read that fails half-way prints no partial answer. */
		bool stream = is_list && c.format == FMT_JSONL;
		hv_json *j = NULL;
		if (stream)
			j = cli_json_stdout(&c);
		else if (hv_json_new_buffer(&j, c.kase) != HV_OK)
			j = NULL;
		if (!j) {
			cli_error("out of memory");
			rc = EXIT_WARN;
		} else {
			if (is_list && !stream)
				hv_json_array_begin(j);
			if (!strcmp(subs[k].name, "runs"))
				rc = list_runs(&c, st, &h, j);
			else if (!strcmp(subs[k].name, "artifacts"))
				rc = list_artifacts(&c, st, &h, j);
			else if (!strcmp(subs[k].name, "show"))
				rc = show_run(&c, st, &h, pos[0], j);
			else if (is_push)
				rc = push(st, &h, j);
			else
				rc = prune(&c, st, &h, j);
			if (is_list && !stream)
				hv_json_array_end(j);
			if (!stream && !is_prune && !is_push)
				hv_json_newline(j);
			if (stream) {
				if (cli_json_finish(j) != EXIT_DONE)
					rc = EXIT_WARN;
			} else {
				size_t len;
				const char *text = hv_json_buffer(j, &len);
				if (rc == EXIT_DONE && hv_json_status(j) == HV_OK &&
				    (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)) {
					cli_error("standard output: %s", strerror(errno));
					rc = EXIT_WARN;
				}
				hv_json_free(j);
			}
		}
	}
	if (hv_store_close(st) != HV_OK && rc == EXIT_DONE) {
		cli_error("%s", hv_error_last());
		rc = EXIT_WARN;
	}
	free(pos);
	return rc;
}
