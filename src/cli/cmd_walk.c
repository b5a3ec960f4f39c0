/* harvest ls and harvest walk: FileInfo records of one directory or a whole tree. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

enum {
	OPT_SORT = OPT_OWN,
	OPT_LONG,
	OPT_MAX_DEPTH,
	OPT_FOLLOW,
	OPT_XDEV,
	OPT_EXCLUDE,
	OPT_NO_HIDDEN,
	OPT_MAX_ENTRIES,
	OPT_THREADS,
};

static const cli_opt walk_opts[] = {
	{"help", 'h', 0, OPT_HELP},        {"format", 0, 1, OPT_FORMAT},
	{"case", 0, 1, OPT_CASE},          {"quiet", 'q', 0, OPT_QUIET},
	{"sort", 0, 1, OPT_SORT},          {"long", 'l', 0, OPT_LONG},
	{"max-depth", 0, 1, OPT_MAX_DEPTH}, {"follow", 0, 0, OPT_FOLLOW},
	{"xdev", 0, 0, OPT_XDEV},          {"exclude", 0, 1, OPT_EXCLUDE},
	{"no-hidden", 0, 0, OPT_NO_HIDDEN}, {"max-entries", 0, 1, OPT_MAX_ENTRIES},
	{"threads", 0, 1, OPT_THREADS},    {NULL, 0, 0, 0},
};

static const cli_opt ls_opts[] = {
	{"help", 'h', 0, OPT_HELP}, {"format", 0, 1, OPT_FORMAT}, {"case", 0, 1, OPT_CASE},
	{"quiet", 'q', 0, OPT_QUIET}, {"sort", 0, 1, OPT_SORT},   {"long", 'l', 0, OPT_LONG},
	{NULL, 0, 0, 0},
};

static const char walk_usage[] =
	"usage: harvest walk [options] DIR\n"
	"FileInfo of every entry below DIR, pre-order, with its path relative to DIR.\n"
	"  --format F        jsonl (default), json, text or nul\n"
	"  --case C          snake (default) or camel keys\n"
	"  --sort S          name (default: sorted within each directory) or none (fastest)\n"
	"  --long            add type, mode, mtime and a symlink's target\n"
	"  --max-depth N     list down to depth N (children of DIR are depth 1)\n"
	"  --follow          descend into symlinked directories (loops are listed, not entered)\n"
	"  --xdev            stay on DIR's file system\n"
	"  --exclude GLOB    leave out names matching GLOB (repeatable; not entered)\n"
	"  --no-hidden       leave out names starting with '.'\n"
	"  --max-entries N   stop after N entries (exit status 1)\n"
	"  --threads N       worker threads (default: online CPUs, at most 8)\n"
	"  --quiet           no progress, no warnings\n"
	"Exit status: 0 done, 1 warnings (unreadable directories, limits), 2 usage, 3 DIR is\n"
	"missing or not a directory.\n";

static const char ls_usage[] =
	"usage: harvest ls [options] DIR\n"
	"FileInfo of each entry of DIR (not recursive), dot-files included.\n"
	"  --format F   json (default), jsonl, text or nul\n"
	"  --case C     snake (default) or camel keys\n"
	"  --sort S     name (default, bytewise) or none\n"
	"  --long       add type, mode, mtime and a symlink's target\n"
	"  --quiet      no warnings\n"
	"Exit status: 0 done, 1 warnings, 2 usage, 3 DIR is missing or not a directory.\n";

struct walk_cli {
	hv_walk_opts opts;
	const char **excludes;
	size_t n_excludes;
	bool long_fmt;
	bool with_path;
};

static int walk_opt(void *ctx, cli_common *c, int id, const char *v)
{
	struct walk_cli *w = ctx;
	uint64_t u;
	int rc = 0;
	switch (id) {
	case OPT_SORT:
		if (strcmp(v, "name") == 0)
			w->opts.sort = HV_SORT_NAME;
		else if (strcmp(v, "none") == 0)
			w->opts.sort = HV_SORT_NONE;
		else
			rc = cli_usage_error(c, "--sort: expected name or none, not '%s'", v);
		break;
	case OPT_LONG: w->long_fmt = true; break;
	case OPT_MAX_DEPTH:
		rc = cli_parse_int(c, "--max-depth", v, 0, 1 << 30, &w->opts.max_depth);
		break;
	case OPT_FOLLOW: w->opts.follow = true; break;
	case OPT_XDEV: w->opts.xdev = true; break;
	case OPT_EXCLUDE: {
		const char **e = realloc(w->excludes, (w->n_excludes + 1) * sizeof(*e));
		if (!e)
			return cli_usage_error(c, "out of memory");
		w->excludes = e;
		w->excludes[w->n_excludes++] = v;
		break;
	}
	case OPT_NO_HIDDEN: w->opts.no_hidden = true; break;
	case OPT_MAX_ENTRIES:
		rc = cli_parse_uint(c, "--max-entries", v, UINT64_MAX, &u);
		if (rc == 0 && u == 0)
			rc = cli_usage_error(c, "--max-entries: must be at least 1");
		w->opts.max_entries = u;
		break;
	case OPT_THREADS:
		rc = cli_parse_int(c, "--threads", v, 1, 1024, &w->opts.threads);
		break;
	}
	return rc;
}

/* Writes the 9 permission letters of ls -l for MODE into OUT[0..8] (not terminated). */
static void mode_symbolic(unsigned mode, char out[9])
{
	static const char letters[] = "rwxrwxrwx";
	for (int i = 0; i < 9; i++) {
		out[i] = letters[i];
		if (!(mode & (0400u >> i)))
			out[i] = '-';
	}
	/* the set-user-ID, set-group-ID and sticky bits take the execute letters */
	static const struct { unsigned bit; int at; char with_x, without_x; } special[] = {
		{04000, 2, 's', 'S'}, {02000, 5, 's', 'S'}, {01000, 8, 't', 'T'},
	};
	for (size_t k = 0; k < sizeof(special) / sizeof(special[0]); k++) {
		char *c = &out[special[k].at];
		if (!(mode & special[k].bit))
			continue;
		if (*c == 'x')
			*c = special[k].with_x;
		else
			*c = special[k].without_x;
	}
}

static void print_text_entry(FILE *out, const hv_entry *e, const struct walk_cli *w)
{
	static const char type_chars[] = {'?', '-', 'd', 'l', 'p', 's', 'c', 'b'};
	char size[32];
	if (e->have_stat)
		snprintf(size, sizeof(size), "%llu", (unsigned long long)e->size);
	else
		strcpy(size, "?");
	if (w->long_fmt) {
		char mtime[64] = "?";
		if (e->have_lstat)
			hv_format_mtime(&e->lst, mtime, sizeof(mtime));
		/* As ls -l spells it ("rw-r--r--", s/S and t/T for the set-id and sticky bits);
		 * an unknown mode is "?????????", never "---------", which a real mode can be. */
		char mode[10] = "?????????";
		if (e->have_lstat)
			mode_symbolic(e->lst.mode, mode);
		fprintf(out, "%c%s %12s %s ", type_chars[e->type], mode, size, mtime);
	} else {
		fprintf(out, "%c %12s ", type_chars[e->type], size);
	}
	if (w->with_path)
		cli_put_escaped(out, e->path, e->path_len);
	else
		cli_put_escaped(out, e->name, e->name_len);
	if (e->have_stat && e->is_dir)
		fputc('/', out);
	if (e->target) {
		fputs(" -> ", out);
		cli_put_escaped(out, e->target, e->target_len);
	}
	fputc('\n', out);
}

static int run_walk(cli_common *c, struct walk_cli *w, const char *root)
{
	w->opts.excludes = w->excludes;
	w->opts.n_excludes = w->n_excludes;
	w->opts.readlink = w->long_fmt;
	/* The walker's few descriptors it cannot give up: without them a directory would be
	 * retried for seconds, then left out. Refused at once, as collect does. */
	if (hv_collect_check_fds(root, 0) != HV_OK) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	hv_walk *walk;
	hv_status st = hv_walk_open(&walk, root, &w->opts);
	if (st != HV_OK) {
		cli_error("%s", hv_error_last());
		return cli_exit_status(st);
	}
	hv_json *j = NULL;
	if (c->format == FMT_JSON || c->format == FMT_JSONL) {
		j = cli_json_stdout(c);
		if (!j) {
			hv_walk_close(walk);
			return EXIT_WARN;
		}
	} else {
		static char obuf[1 << 16];
		setvbuf(stdout, obuf, _IOFBF, sizeof(obuf));
	}
	if (c->format == FMT_JSON)
		hv_json_array_begin(j);

	cli_progress progress;
	cli_progress_init(&progress, c);
	int rc = EXIT_DONE;
	uint64_t files = 0, bytes = 0;
	const hv_entry *e;
	while ((st = hv_walk_next(walk, &e)) != HV_DONE) {
		if (st == HV_WARN) {
			cli_progress_end(&progress);
			cli_warn(c, "%s", hv_error_last());
			rc = EXIT_WARN;
			continue;
		}
		if (st != HV_OK) {
			cli_progress_end(&progress);
			cli_error("%s", hv_error_last());
			rc = EXIT_WARN;
			break;
		}
		if (e->type == HV_FT_FILE) {
			files++;
			bytes += e->size;
		}
		switch (c->format) {
		case FMT_JSON:
		case FMT_JSONL:
			hv_record_fileinfo(j, e,
					   (w->with_path ? HV_FILEINFO_PATH : 0) |
						   (w->long_fmt ? HV_FILEINFO_LONG : 0));
			cli_output_record(j, c);
			break;
		case FMT_TEXT:
			print_text_entry(stdout, e, w);
			break;
		case FMT_NUL:
			if (w->with_path)
				fwrite(e->path, 1, e->path_len + 1, stdout);
			else
				fwrite(e->name, 1, e->name_len + 1, stdout);
			break;
		default:
			break;
		}
		cli_progress_update(&progress, hv_walk_count(walk), files, bytes);
		/* Output that cannot be written (a full disk, a closed pipe whose SIGPIPE is
		 * ignored) ends the walk: the rest of the tree would be read for nothing. The
		 * error is said once, below. */
		if (j ? hv_json_status(j) != HV_OK : ferror(stdout) != 0)
			break;
	}
	cli_progress_end(&progress);
	hv_walk_close(walk);
	if (c->format == FMT_JSON) {
		hv_json_array_end(j);
		hv_json_newline(j);
	}
	if (j) {
		if (cli_json_finish(j) != EXIT_DONE)
			rc = EXIT_WARN;
	} else if (fflush(stdout) != 0 || ferror(stdout)) {
		cli_error("standard output: %s", cli_stdout_error());
		rc = EXIT_WARN;
	}
	return rc;
}

static int walk_main(int argc, char **argv, bool is_ls)
{
	cli_common c = {.cmd = is_ls ? "ls" : "walk"};
	struct walk_cli w = {.with_path = !is_ls};
	hv_walk_opts_init(&w.opts);
	char **pos = NULL;
	int npos = 0;
	int rc = cli_parse(&c, argc, argv, is_ls ? ls_opts : walk_opts, walk_opt, &w,
			   is_ls ? ls_usage : walk_usage, &pos, &npos);
	if (rc == 0 && npos != 1)
		rc = cli_usage_error(&c, npos == 0 ? "missing DIR" : "one DIR at a time");
	if (rc == 0)
		rc = cli_check_format(&c, is_ls ? FMT_JSON : FMT_JSONL, "json,jsonl,text,nul");
	if (rc == 0) {
		cli_check_excludes(&c, w.excludes, w.n_excludes);
		if (is_ls)
			w.opts.max_depth = 1;
		rc = run_walk(&c, &w, pos[0]);
	}
	free(pos);
	free(w.excludes);
	return rc < 0 ? EXIT_DONE : rc;
}

int cmd_ls(int argc, char **argv)
{
	return walk_main(argc, argv, true);
}

int cmd_walk(int argc, char **argv)
{
	return walk_main(argc, argv, false);
}
