/* harvest mime: {"path", "mime_type"} for each file; a directory means every regular file
 * below it. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { OPT_RAW = OPT_OWN, OPT_MIME_NO_CACHE, OPT_MIME_THREADS };

static const cli_opt mime_opts[] = {
	{"help", 'h', 0, OPT_HELP},  {"format", 0, 1, OPT_FORMAT},
	{"case", 0, 1, OPT_CASE},    {"quiet", 'q', 0, OPT_QUIET},
	{"db", 0, 1, OPT_DB},        {"raw", 0, 0, OPT_RAW},
	{"no-cache", 0, 0, OPT_MIME_NO_CACHE}, {"threads", 0, 1, OPT_MIME_THREADS},
	{"cache-db", 0, 1, OPT_CACHE_DB}, {NULL, 0, 0, 0},
};

static const char mime_usage[] =
	"usage: harvest mime [options] PATH...\n"
	"The MIME type of each file, from libmagic, refined by the file name's extension;\n"
	"a directory means every regular file below it.\n"
	"  --raw         libmagic's answer alone (equal to `file --mime-type -b`)\n"
	"  --no-cache    neither use nor fill the MIME cache\n"
	"  --threads N   detection threads (default: online CPUs, at most 8)\n"
	"  --db PATH     the database holding the cache\n"
	"  --cache-db PATH  the cache with a PostgreSQL --db (default: the XDG location)\n"
	"  --format F    jsonl (default), json, text (\"path: type\") or nul\n"
	"  --case C, --quiet\n"
	"Exit status: 0 all answered; 1 some path could not be read, or was typed\n"
	"application/octet-stream because libmagic's sandboxed worker crashed or hung on it\n"
	"(named on stderr); 2 usage.\n";

struct mime_cli {
	hv_mime_opts opts;
	bool no_cache;
};

static int mime_opt(void *ctx, cli_common *c, int id, const char *v)
{
	struct mime_cli *m = ctx;
	switch (id) {
	case OPT_RAW: m->opts.raw = true; return 0;
	case OPT_MIME_NO_CACHE: m->no_cache = true; return 0;
	case OPT_MIME_THREADS: return cli_parse_int(c, "--threads", v, 1, 1024, &m->opts.threads);
	}
	return 0;
}

/* The list of paths to examine: arguments as given, directories expanded to their regular
 * files (pre-order, sorted), joined as "ARG/rel". */
struct path_list {
	char **items;
	size_t n, cap;
};

static int list_add(struct path_list *l, char *p)
{
	if (!p)
		return -1;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char **items = realloc(l->items, cap * sizeof(*items));
		if (!items) {
			free(p);
			return -1;
		}
		l->items = items;
		l->cap = cap;
	}
	l->items[l->n++] = p;
	return 0;
}

static int expand_dir(const cli_common *c, struct path_list *l, const char *dir, int *rc)
{
	hv_walk *w;
	hv_walk_opts wo;
	hv_walk_opts_init(&wo);
	if (hv_walk_open(&w, dir, &wo) != HV_OK) {
		cli_error("%s", hv_error_last());
		*rc = EXIT_WARN;
		return 0;
	}
	size_t dl = strlen(dir);
	bool slash = dl > 0 && dir[dl - 1] == '/';
	const hv_entry *e;
	hv_status st;
	while ((st = hv_walk_next(w, &e)) != HV_DONE) {
		if (st != HV_OK) {
			cli_warn(c, "%s", hv_error_last());
			*rc = EXIT_WARN;
			if (st < 0)
				break;
			continue;
		}
		if (e->type != HV_FT_FILE)
			continue;
		char *p = malloc(dl + 1 + e->path_len + 1);
		if (p) {
			memcpy(p, dir, dl);
			size_t o = dl;
			if (!slash)
				p[o++] = '/';
			memcpy(p + o, e->path, e->path_len + 1);
		}
		if (list_add(l, p) != 0) {
			hv_walk_close(w);
			return -1;
		}
	}
	hv_walk_close(w);
	return 0;
}

int cmd_mime(int argc, char **argv)
{
	cli_common c = {.cmd = "mime"};
	struct mime_cli m = {0};
	hv_mime_opts_init(&m.opts);
	char **pos = NULL;
	int npos = 0;
	int rc = cli_parse(&c, argc, argv, mime_opts, mime_opt, &m, mime_usage, &pos, &npos);
	if (rc == 0 && npos == 0)
		rc = cli_usage_error(&c, "missing PATH");
	if (rc == 0)
		rc = cli_check_format(&c, FMT_JSONL, "json,jsonl,text,nul");
	if (rc != 0) {
		free(pos);
		return rc < 0 ? EXIT_DONE : rc;
	}
	/* libmagic's sandboxed workers are forked by a spawner started now, before the walk's
	 * threads exist. */
	hv_magic_set_isolation(true, 0);
	struct path_list l = {0};
	for (int i = 0; i < npos && rc != -1; i++) {
		struct stat s;
		if (stat(pos[i], &s) == 0 && S_ISDIR(s.st_mode)) {
			if (expand_dir(&c, &l, pos[i], &rc) != 0)
				rc = -1;
		} else if (list_add(&l, strdup(pos[i])) != 0) {
			rc = -1;
		}
	}
	if (rc == -1) {
		cli_error("out of memory");
		rc = EXIT_WARN;
		goto out;
	}
	hv_store *st = NULL;
	if (!m.no_cache && hv_store_open_with_cache(&st, c.db, c.cache_db,
							  HV_STORE_NO_HISTORY) != HV_OK) {
		/* The cache only saves time: without it every answer is still right. Exit 1, as for
		 * any warning: the output is complete, but something was wrong. */
		cli_warn(&c, "%s; answering without the MIME cache", hv_error_last());
		st = NULL;
		rc = EXIT_WARN;
	}
	hv_json *j = NULL;
	if (c.format == FMT_JSON || c.format == FMT_JSONL) {
		if (!(j = cli_json_stdout(&c))) {
			hv_store_close(st);
			rc = EXIT_WARN;
			goto out;
		}
		if (c.format == FMT_JSON)
			hv_json_array_begin(j);
	}
	cli_progress progress;
	cli_progress_init(&progress, &c);
	/* In chunks, so output streams and memory stays flat on a large tree. */
	enum { CHUNK = 4096 };
	for (size_t base = 0; base < l.n; base += CHUNK) {
		size_t n = l.n - base < CHUNK ? l.n - base : CHUNK;
		hv_mime_result *res = NULL;
		hv_status s = hv_mime_detect_cached(st, (const char *const *)l.items + base, n,
						    &m.opts, &res);
		if (s < 0) {
			cli_error("%s", hv_error_last());
			rc = EXIT_WARN;
			break;
		}
		for (size_t i = 0; i < n; i++) {
			const char *path = l.items[base + i];
			cli_progress_update(&progress, base + i + 1, base + i + 1, 0);
			if (!res[i].mime_type) {
				cli_progress_end(&progress);
				cli_error("%s", res[i].error ? res[i].error : path);
				rc = EXIT_WARN;
				continue;
			}
			if (res[i].error) {
				/* Answered, but not by libmagic (its worker crashed or hung): say so. */
				cli_progress_end(&progress);
				cli_warn(&c, "%s", res[i].error);
				rc = EXIT_WARN;
			}
			if (j) {
				hv_json_object_begin(j);
				hv_json_key(j, "path");
				hv_json_string(j, path, strlen(path));
				hv_json_key(j, "mime_type");
				hv_json_cstring(j, res[i].mime_type);
				hv_json_object_end(j);
				cli_output_record(j, &c);
			} else if (c.format == FMT_TEXT) {
				cli_put_escaped(stdout, path, strlen(path));
				fputs(": ", stdout);
				cli_put_escaped(stdout, res[i].mime_type, strlen(res[i].mime_type));
				fputc('\n', stdout);
			} else {
				fputs(path, stdout);
				putchar('\0');
				fputs(res[i].mime_type, stdout);
				putchar('\0');
			}
		}
		hv_mime_results_free(res, n);
	}
	cli_progress_end(&progress);
	if (st && hv_store_close(st) != HV_OK) {
		cli_error("%s", hv_error_last());
		rc = EXIT_WARN;
	}
	if (j) {
		if (c.format == FMT_JSON) {
			hv_json_array_end(j);
			hv_json_newline(j);
		}
		if (cli_json_finish(j) != EXIT_DONE)
			rc = EXIT_WARN;
	} else if (fflush(stdout) != 0 || ferror(stdout)) {
		cli_error("standard output: write error");
		rc = EXIT_WARN;
	}
out:
	for (size_t i = 0; i < l.n; i++)
		free(l.items[i]);
	free(l.items);
	free(pos);
	return rc;
}
