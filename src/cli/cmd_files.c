/* harvest cat, harvest put and harvest rm: a sandbox's readFile, writeFile and removeFile,
 * over libharvest's files.h. Bytes go through stdin and stdout untouched; nothing is printed
 * on success. */
#include "cli.h"
#include "harvest/files.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	OPT_MODE = OPT_OWN,
	OPT_RECURSIVE,
};

static const cli_opt cat_opts[] = {
	{"help", 'h', 0, OPT_HELP},
	{"quiet", 'q', 0, OPT_QUIET},
	{"case", 0, 1, OPT_CASE},
	{NULL, 0, 0, 0},
};

static const cli_opt put_opts[] = {
	{"help", 'h', 0, OPT_HELP},
	{"quiet", 'q', 0, OPT_QUIET},
	{"case", 0, 1, OPT_CASE},
	{"mode", 'm', 1, OPT_MODE},
	{NULL, 0, 0, 0},
};

static const cli_opt rm_opts[] = {
	{"help", 'h', 0, OPT_HELP},
	{"quiet", 'q', 0, OPT_QUIET},
	{"case", 0, 1, OPT_CASE},
	{"recursive", 'r', 0, OPT_RECURSIVE},
	{"recursive", 'R', 0, OPT_RECURSIVE}, /* -R too, as rm(1) takes it */
	{NULL, 0, 0, 0},
};

static const char cat_usage[] =
	"usage: harvest cat [options] FILE\n"
	"The bytes of the regular file FILE on stdout, unchanged (a symlink is followed).\n"
	"FIFOs, sockets, devices and directories are refused without being read.\n"
	"  --quiet   accepted for uniformity (cat prints no warnings)\n"
	"  --case C  accepted for uniformity: snake or camel (cat prints no JSON)\n"
	"Exit status: 0 done, 1 FILE cannot be read (not a regular file, permission denied, a\n"
	"read or write error), 2 usage, 3 FILE is missing (or a component of its path is not a\n"
	"directory).\n";

static const char put_usage[] =
	"usage: harvest put [options] FILE\n"
	"Writes stdin to FILE: to a temporary file beside it, synced, then renamed over it, so\n"
	"FILE is never half-written. Missing parent directories are created (as mkdir -p). An\n"
	"existing FILE keeps its mode (and, for root, its owner); a symlink at FILE is replaced,\n"
	"not written through; a directory, FIFO or device there is refused. Prints nothing.\n"
	"  -m, --mode MODE  octal permission bits for FILE, applied exactly (default: an existing\n"
	"                   file's mode, else 0666 less the umask)\n"
	"  --quiet          accepted for uniformity (put prints no warnings)\n"
	"  --case C         accepted for uniformity: snake or camel (put prints no JSON)\n"
	"Exit status: 0 done, 1 FILE could not be written (FILE is then as it was), 2 usage.\n";

static const char rm_usage[] =
	"usage: harvest rm [options] PATH\n"
	"Removes the file or symlink PATH (a symlink itself, never what it points to); with -r\n"
	"also a directory and everything below it, never following a symlink. Refuses '/' and\n"
	"a last component '.' or '..'. Prints nothing.\n"
	"  -r, -R, --recursive  remove a directory tree\n"
	"  --quiet              accepted for uniformity (errors are always reported)\n"
	"  --case C             accepted for uniformity: snake or camel (rm prints no JSON)\n"
	"Exit status: 0 done, 1 not (wholly) removed (a directory without -r, permission\n"
	"denied: each entry that could not be removed is named; the rest is removed), 2 usage,\n"
	"3 PATH does not exist.\n";

/* Parses the command line of a command taking one PATH; returns 0 with *path set, -1 after
 * --help, or an exit status. */
static int parse_one(cli_common *c, int argc, char **argv, const cli_opt *opts, cli_opt_fn fn,
		     void *ctx, const char *usage, const char *what, const char **path)
{
	char **pos = NULL;
	int npos = 0;
	int rc = cli_parse(c, argc, argv, opts, fn, ctx, usage, &pos, &npos);
	if (rc == 0 && npos != 1)
		rc = npos == 0 ? cli_usage_error(c, "missing %s", what)
			       : cli_usage_error(c, "one %s at a time", what);
	if (rc == 0)
		*path = pos[0];
	free(pos);
	return rc;
}

int cmd_cat(int argc, char **argv)
{
	cli_common c = {.cmd = "cat"};
	const char *path = NULL;
	int rc = parse_one(&c, argc, argv, cat_opts, NULL, NULL, cat_usage, "FILE", &path);
	if (rc != 0)
		return rc < 0 ? EXIT_DONE : rc;
	hv_status st = hv_file_copy_to_fd(path, STDOUT_FILENO, "standard output");
	if (st != HV_OK)
		cli_error("%s", hv_error_last());
	return cli_exit_status(st);
}

static int put_opt(void *ctx, cli_common *c, int id, const char *v)
{
	hv_file_write_opts *o = ctx;
	if (id != OPT_MODE)
		return 0;
	/* Octal, as chmod takes it: 644, 0644, 4755. */
	size_t n = strlen(v);
	if (n == 0 || n > 5 || strspn(v, "01234567") != n)
		return cli_usage_error(c, "--mode: expected octal permission bits such as 0644, not '%s'",
				       v);
	unsigned long m = strtoul(v, NULL, 8);
	if (m > 07777)
		return cli_usage_error(c, "--mode: at most 07777, not '%s'", v);
	o->mode = (int)m;
	return 0;
}

int cmd_put(int argc, char **argv)
{
	cli_common c = {.cmd = "put"};
	hv_file_write_opts o;
	hv_file_write_opts_init(&o);
	const char *path = NULL;
	int rc = parse_one(&c, argc, argv, put_opts, put_opt, &o, put_usage, "FILE", &path);
	if (rc != 0)
		return rc < 0 ? EXIT_DONE : rc;
	hv_status st = hv_file_write_fd(path, STDIN_FILENO, "standard input", &o);
	if (st != HV_OK)
		cli_error("%s", hv_error_last());
	return cli_exit_status(st);
}

struct rm_cli {
	hv_remove_opts opts;
	unsigned long errors;
};

static int rm_opt(void *ctx, cli_common *c, int id, const char *v)
{
	struct rm_cli *r = ctx;
	if (id == OPT_RECURSIVE)
		r->opts.recursive = true;
	return 0;
}

/* Each entry that could not be removed: an error, so shown even with --quiet. */
static void rm_error(void *ctx, const char *message)
{
	struct rm_cli *r = ctx;
	r->errors++;
	cli_error("%s", message);
}

int cmd_rm(int argc, char **argv)
{
	cli_common c = {.cmd = "rm"};
	struct rm_cli r = {.opts = {.on_error = rm_error}};
	r.opts.ctx = &r;
	const char *path = NULL;
	int rc = parse_one(&c, argc, argv, rm_opts, rm_opt, &r, rm_usage, "PATH", &path);
	if (rc != 0)
		return rc < 0 ? EXIT_DONE : rc;
	hv_status st = hv_remove(path, &r.opts);
	if (st != HV_OK && r.errors == 0)
		cli_error("%s", hv_error_last());
	return cli_exit_status(st);
}
