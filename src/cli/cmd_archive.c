/* harvest archive: a directory tree as tar, tar.gz or zip; and the archive of a run's stored
 * artifacts for `history get --run`. */
#include "cli.h"

#include "harvest/archive.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
	OPT_OUTPUT = OPT_OWN,
	OPT_AFORMAT,
	OPT_EXCLUDE,
	OPT_NO_HIDDEN,
	OPT_XDEV,
	OPT_MAX_DEPTH,
	OPT_THREADS,
};

static const cli_opt archive_opts[] = {
	{"help", 'h', 0, OPT_HELP},          {"quiet", 'q', 0, OPT_QUIET},
	{"output", 'o', 1, OPT_OUTPUT},      {"format", 0, 1, OPT_AFORMAT},
	{"exclude", 0, 1, OPT_EXCLUDE},      {"no-hidden", 0, 0, OPT_NO_HIDDEN},
	{"xdev", 0, 0, OPT_XDEV},            {"max-depth", 0, 1, OPT_MAX_DEPTH},
	{"threads", 0, 1, OPT_THREADS},      {NULL, 0, 0, 0},
};

static const char archive_usage[] =
	"usage: harvest archive [options] DIR\n"
	"The tree below DIR as an archive, streamed: symlinks stored as symlinks (never\n"
	"followed), FIFOs, sockets and devices skipped with a warning.\n"
	"  -o, --output FILE   write FILE (an unnamed file, put in place when complete);\n"
	"                      default: standard output, which must not be a terminal\n"
	"  --format F          tar, tar.gz or zip (default: from FILE's extension .tar,\n"
	"                      .tar.gz, .tgz or .zip; tar on standard output)\n"
	"  --exclude GLOB      leave out names matching GLOB (repeatable; not entered)\n"
	"  --no-hidden         leave out names starting with '.'\n"
	"  --xdev              stay on DIR's file system\n"
	"  --max-depth N       archive down to depth N (children of DIR are depth 1)\n"
	"  --threads N         walker threads (default: online CPUs, at most 8)\n"
	"  --quiet             no warnings\n"
	"Exit status: 0 done, 1 something was skipped or changed (warned) or writing failed,\n"
	"2 usage, 3 DIR is missing or not a directory.\n";

struct archive_cli {
	hv_archive_opts opts;
	const char **excludes;
	size_t n_excludes;
	const char *output;
	bool have_format;
};

static int archive_opt(void *ctx, cli_common *c, int id, const char *v)
{
	struct archive_cli *a = ctx;
	switch (id) {
	case OPT_OUTPUT: return cli_output_opt(c, v, &a->output);
	case OPT_AFORMAT:
		if (hv_archive_format_parse(v, &a->opts.format) != HV_OK)
			return cli_usage_error(c, "--format: expected tar, tar.gz or zip, not '%s'", v);
		a->have_format = true;
		return 0;
	case OPT_EXCLUDE: {
		const char **e = realloc(a->excludes, (a->n_excludes + 1) * sizeof(*e));
		if (!e)
			return cli_usage_error(c, "out of memory");
		a->excludes = e;
		a->excludes[a->n_excludes++] = v;
		return 0;
	}
	case OPT_NO_HIDDEN: a->opts.no_hidden = true; return 0;
	case OPT_XDEV: a->opts.xdev = true; return 0;
	case OPT_MAX_DEPTH:
		return cli_parse_int(c, "--max-depth", v, 0, 1 << 30, &a->opts.max_depth);
	case OPT_THREADS:
		return cli_parse_int(c, "--threads", v, 1, 1024, &a->opts.threads);
	}
	return 0;
}

/* Where an archive goes: standard output, or FILE through the library's writer
 * (hv_file_out_open): a device or FIFO is written in place, as tar -f does; a regular file is
 * written to an unnamed file beside it and put in place when complete, so a failed or killed
 * archive never leaves a half file behind, whatever the length of FILE's name. */
struct out {
	const char *path;   /* NULL: standard output */
	int fd;
	hv_file_out *file;  /* FILE being written */
};

static const char *out_name(const struct out *o)
{
	return o->path ? o->path : "standard output";
}

/* EXIT_DONE, or the exit status after the error was printed. */
static int out_open(const cli_common *c, struct out *o, const char *path, bool follow)
{
	o->path = path && strcmp(path, "-") != 0 ? path : NULL;
	o->fd = -1;
	o->file = NULL;
	if (!o->path) {
		/* binary data on a terminal garbles it and helps nobody, as gzip says */
		if (isatty(STDOUT_FILENO))
			return cli_usage_error(c, "refusing to write an archive to a terminal; "
						  "use -o FILE or redirect standard output");
		o->fd = STDOUT_FILENO;
		return EXIT_DONE;
	}
	/* A symlink FILE: written through (archive, as the shell's > and tar -f do), or refused
	 * (history get --run without --follow, as history get refuses one for an artifact). */
	hv_status s = hv_file_out_open(&o->file, o->path, follow ? HV_WRITE_FOLLOW : 0);
	if (s != HV_OK) {
		cli_error("%s", hv_error_last());
		return EXIT_WARN;
	}
	o->fd = hv_file_out_fd(o->file);
	if (isatty(o->fd)) {
		hv_file_out_abort(o->file);
		o->file = NULL;
		o->fd = -1;
		return cli_usage_error(c, "%s: refusing to write an archive to a terminal", o->path);
	}
	return EXIT_DONE;
}

/* Completes (ok) or abandons the output; returns rc, or EXIT_WARN when completing failed. */
static int out_close(struct out *o, int rc, bool ok)
{
	if (!o->file)
		return rc;
	if (!ok) {
		hv_file_out_abort(o->file);
	} else if (hv_file_out_commit(o->file) != HV_OK) {
		cli_error("%s", hv_error_last());
		rc = EXIT_WARN;
	}
	o->file = NULL;
	return rc;
}

/* The format of -o FILE into *f: from its extension; standard output ("-"), and a FILE that
 * is a device or a pipe (/dev/stdout, a tape) without one, keep *f (a tar unless --format
 * said otherwise). false, with hv_error_last() saying why, for another name. */
static bool format_of(const char *output, hv_archive_format *f)
{
	struct stat dest;
	return strcmp(output, "-") == 0 || hv_archive_format_from_name(output, f) == HV_OK ||
	       (stat(output, &dest) == 0 && !S_ISREG(dest.st_mode) && !S_ISDIR(dest.st_mode));
}

static void warn_cb(void *ctx, const char *message)
{
	cli_warn(ctx, "%s", message);
}

/* The exit status of a library status, after printing its error. */
static int archive_status(const struct out *o, hv_status s)
{
	if (s == HV_OK || s == HV_WARN)
		return cli_exit_status(s);
	/* a write failure names the destination; a read failure names its own path */
	if (s == HV_EIO && strncmp(hv_error_last(), "writing the archive", 19) == 0)
		cli_error("%s: %s", out_name(o), hv_error_last());
	else
		cli_error("%s", hv_error_last());
	return cli_exit_status(s);
}

int cmd_archive(int argc, char **argv)
{
	cli_common c = {.cmd = "archive"};
	struct archive_cli a = {0};
	hv_archive_opts_init(&a.opts);
	char **pos = NULL;
	int npos = 0;
	int rc = cli_parse(&c, argc, argv, archive_opts, archive_opt, &a, archive_usage, &pos,
			   &npos);
	if (rc == 0 && npos != 1)
		rc = cli_usage_error(&c, "expected one DIR");
	if (rc == 0 && a.output && !a.have_format && !format_of(a.output, &a.opts.format))
		rc = cli_usage_error(&c, "%s; give --format tar, tar.gz or zip", hv_error_last());
	if (rc != 0) {
		free(pos);
		free(a.excludes);
		return rc < 0 ? EXIT_DONE : rc;
	}
	cli_check_excludes(&c, a.excludes, a.n_excludes);
	a.opts.excludes = a.excludes;
	a.opts.n_excludes = a.n_excludes;
	a.opts.warn = warn_cb;
	a.opts.ctx = &c;
	/* a reader that goes away must end harvest with a message, not a silent SIGPIPE */
	signal(SIGPIPE, SIG_IGN);
	/* FILE as it is now: the new archive is written under a temporary name and replaces it,
	 * so an old archive inside the tree is not archived into the new one. */
	struct stat old;
	if (a.output && strcmp(a.output, "-") != 0 && stat(a.output, &old) == 0 &&
	    S_ISREG(old.st_mode)) {
		a.opts.leave_out = true;
		a.opts.leave_out_dev = (uint64_t)old.st_dev;
		a.opts.leave_out_ino = (uint64_t)old.st_ino;
	}
	struct out o;
	rc = out_open(&c, &o, a.output, true);
	if (rc == EXIT_DONE) {
		hv_status s = hv_archive_dir(o.fd, pos[0], &a.opts, NULL);
		rc = archive_status(&o, s);
		rc = out_close(&o, rc, s == HV_OK || s == HV_WARN);
	} else {
		rc = out_close(&o, rc, false);
	}
	free(pos);
	free(a.excludes);
	return rc;
}

int cli_archive_run(const cli_common *c, hv_store *st, int64_t run_id, const char *output,
		    bool follow)
{
	hv_archive_opts opts;
	hv_archive_opts_init(&opts);
	if (output && !format_of(output, &opts.format))
		return cli_usage_error(c, "%s", hv_error_last());
	opts.warn = warn_cb;
	opts.ctx = (void *)c;
	int rc = cli_refuse_db_output(c, st, output);
	if (rc != EXIT_DONE)
		return rc;
	signal(SIGPIPE, SIG_IGN);
	struct out o;
	rc = out_open(c, &o, output, follow);
	if (rc != EXIT_DONE)
		return out_close(&o, rc, false);
	hv_status s = hv_archive_run(o.fd, st, run_id, &opts, NULL);
	rc = archive_status(&o, s);
	return out_close(&o, rc, s == HV_OK || s == HV_WARN);
}
