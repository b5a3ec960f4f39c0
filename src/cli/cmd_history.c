/* harvest history: past runs and their artifacts, their stored bytes, and pruning. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
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
	"            (-o -: stdout; a device or FIFO FILE is written into; a symlink FILE is\n"
	"            refused unless --follow)\n"
	"  get --run RUN_ID [-o FILE.tar|.tar.gz|.zip]         a run's artifacts as an archive\n"
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
	case OPT_OUTPUT: h->output = v; return 0;
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

static void time_member(hv_json *j, const char *key, bool has, int64_t ns)
{
	if (!has) {
		hv_json_key_null(j, key);
		return;
	}
	char buf[64];
	hv_json_key(j, key);
	hv_json_string(j, buf, hv_format_time(ns, buf, sizeof(buf)));
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
		hv_json_object_begin(j);
		hv_json_key(j, "run_id");
		hv_json_int(j, r->run_id);
		if (r->label) {
			hv_json_key(j, "label");
			hv_json_string(j, r->label, r->label_len);
		} else {
			hv_json_key_null(j, "label");
		}
		if (r->host) {
			hv_json_key(j, "host");
			hv_json_cstring(j, r->host);
		} else {
			hv_json_key_null(j, "host");
		}
		if (r->command_json) {
			hv_json_key(j, "command");
			hv_json_raw(j, r->command_json, strlen(r->command_json));
		} else {
			hv_json_key_null(j, "command");
		}
		hv_json_key(j, "dir");
		hv_json_string(j, r->dir, r->dir_len);
		time_member(j, "started_at", true, r->started_at_ns);
		time_member(j, "ended_at", r->ended, r->ended_at_ns);
		if (r->end_reason) {
			hv_json_key(j, "end_reason");
			hv_json_cstring(j, r->end_reason);
		} else {
			hv_json_key_null(j, "end_reason");
		}
		if (r->has_exit_code) {
			hv_json_key(j, "exit_code");
			hv_json_int(j, r->exit_code);
		} else {
			hv_json_key_null(j, "exit_code");
		}
		hv_json_key(j, "timed_out");
		hv_json_bool(j, r->timed_out);
		hv_json_key(j, "artifacts");
		hv_json_uint(j, r->artifacts);
		hv_json_object_end(j);
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
		return s == HV_EUSAGE ? EXIT_USAGE : EXIT_WARN;
	}
	const hv_artifact_row *a;
	while ((s = hv_artifact_iter_next(it, &a)) == HV_OK) {
		hv_json_object_begin(j);
		hv_json_key(j, "artifact_id");
		hv_json_int(j, a->artifact_id);
		hv_json_key(j, "run_id");
		hv_json_int(j, a->run_id);
		hv_json_key(j, "path");
		hv_json_string(j, a->path, a->path_len);
		hv_json_key(j, "name");
		hv_json_string(j, a->name, a->name_len);
		hv_json_key(j, "mime_type");
		hv_json_cstring(j, a->mime_type);
		hv_json_key(j, "size");
		hv_json_uint(j, a->size);
		hv_json_key(j, "sha256");
		hv_json_cstring(j, a->sha256);
		time_member(j, "recorded_at", true, a->recorded_at_ns);
		hv_json_object_end(j);
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
	/* Run ids start at 1, and a run_id of 0 in a filter means "any run". */
	if (id < 1) {
		cli_error("no run %lld", (long long)id);
		return EXIT_WARN;
	}
	hv_run_filter f = {.run_id = id, .with_output = true};
	hv_run_iter *it;
	const hv_run_row *r;
	if (hv_store_runs(st, &f, &it) != HV_OK) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	hv_status s = hv_run_iter_next(it, &r);
	if (s != HV_OK) {
		hv_run_iter_free(it);
		if (s == HV_DONE) {
			cli_error("no run %lld", (long long)id);
			return EXIT_WARN;
		}
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	hv_run_end res = {
		.has_exit_code = r->has_exit_code,
		.exit_code = r->exit_code,
		.timed_out = r->timed_out,
		.duration_ms = r->duration_ms,
		.stdout_data = r->stdout_data,
		.stdout_len = r->stdout_len,
		.stdout_truncated = r->stdout_truncated,
		.stderr_data = r->stderr_data,
		.stderr_len = r->stderr_len,
		.stderr_truncated = r->stderr_truncated,
	};
	cli_result_begin(j, &res);
	hv_json_key(j, "output_files");
	hv_json_array_begin(j);
	hv_artifact_filter af = {.run_id = id, .with_content = h->content};
	hv_artifact_iter *ai;
	int rc = EXIT_DONE;
	if (hv_store_artifacts(st, &af, &ai) == HV_OK) {
		const hv_artifact_row *a;
		while ((s = hv_artifact_iter_next(ai, &a)) == HV_OK)
			cli_print_output_file(j, a->path, a->path_len, a->name, a->name_len,
					      a->mime_type, a->size, a->sha256, a->content,
					      a->content_len, h->content, a->change);
		if (s != HV_DONE)
			rc = EXIT_WARN;
		hv_artifact_iter_free(ai);
	} else {
		rc = EXIT_WARN;
	}
	if (rc != EXIT_DONE)
		cli_error("%s", hv_error_last());
	hv_json_array_end(j);
	hv_json_key(j, "skipped");
	hv_json_raw(j, r->skipped_json ? r->skipped_json : "[]",
		    strlen(r->skipped_json ? r->skipped_json : "[]"));
	if (r->deleted_json) {
		hv_json_key(j, "deleted");
		hv_json_raw(j, r->deleted_json, strlen(r->deleted_json));
	}
	/* Only when the run did not end as its command did: otherwise the result is exactly
	 * what `run` printed. */
	if (r->end_reason) {
		hv_json_key(j, "end_reason");
		hv_json_cstring(j, r->end_reason);
	}
	cli_result_end(j, &res, r->run_id);
	hv_run_iter_free(it);
	return rc;
}

/* The run as an HTML page on stdout, written as it is made (one artifact at a time). */
static int show_page(cli_common *c, hv_store *st, const char *arg)
{
	int64_t id;
	if (parse_id(c, "RUN_ID", arg, &id) != 0)
		return EXIT_USAGE;
	hv_status s = hv_page_write_run(st, id, NULL, hv_page_write_file, stdout);
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

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int get_artifact(cli_common *c, hv_store *st, struct history_cli *h, const char *arg)
{
	void *data = NULL;
	size_t len = 0;
	hv_status s;
	size_t alen = strlen(arg);
	if (alen == 64 && strspn(arg, "0123456789abcdefABCDEF") == 64) {
		s = hv_store_content_get(st, arg, &data, &len);
	} else {
		int64_t id;
		if (parse_id(c, "ARTIFACT_ID", arg, &id) != 0)
			return EXIT_USAGE;
		s = hv_store_artifact_content(st, id, &data, &len);
	}
	if (s != HV_OK) {
		/* "no artifact N", "artifact N: its content was not stored", a digest mismatch... */
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	int rc = EXIT_DONE;
	if (h->output && strcmp(h->output, "-") != 0) {
		if (hv_write_file(h->output, data, len, h->follow ? HV_WRITE_FOLLOW : 0) != HV_OK) {
			cli_error("%s", hv_error_last());
			rc = EXIT_WARN;
		}
	} else if (write_all(STDOUT_FILENO, data, len) != 0) {
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
	hv_json_object_begin(j);
	hv_json_key(j, "runs");
	hv_json_uint(j, res.runs);
	hv_json_key(j, "artifacts");
	hv_json_uint(j, res.artifacts);
	hv_json_key(j, "contents");
	hv_json_uint(j, res.contents);
	hv_json_key(j, "content_bytes");
	hv_json_uint(j, res.content_bytes);
	hv_json_key(j, "snapshots");
	hv_json_uint(j, res.snapshots);
	hv_json_object_end(j);
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
	hv_json_object_begin(j);
	hv_json_key(j, "pushed");
	hv_json_uint(j, n);
	hv_json_object_end(j);
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
	/* A local history named but absent has nothing to push: the writing open below would
	 * create an empty file there and report success (a mistyped --db pushing nothing). */
	const char *local = c.db ? c.db : getenv("HARVEST_DB");
	struct stat lsb;
	if (is_push && local && *local && strncmp(local, "postgresql://", 13) != 0 &&
	    strncmp(local, "postgres://", 11) != 0 && stat(local, &lsb) != 0 && errno == ENOENT) {
		cli_error("%s: no such history database: nothing to push", local);
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
		rc = cli_archive_run(&c, st, h.arts.run_id, h.output);
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
