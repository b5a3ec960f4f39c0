/* harvest: the command-line entry point. Dispatches to one file per command. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{"ls", cmd_ls, "FileInfo of each entry of a directory"},
	{"walk", cmd_walk, "FileInfo of every entry below a directory"},
	{"mime", cmd_mime, "MIME types of files, from libmagic, cached"},
	{"snapshot", cmd_snapshot, "record the state of a tree, to collect what changes later"},
	{"collect", cmd_collect, "OutputFile records of the files below a directory"},
	{"history", cmd_history, "past runs, their artifacts and stored bytes; prune"},
	{"run", cmd_run, "run a command, stream its output, collect the files it produced"},
	{"cat", cmd_cat, "the bytes of a file on stdout"},
	{"put", cmd_put, "stdin to a file, atomically, parent directories created"},
	{"rm", cmd_rm, "remove a file or symlink; -r a directory tree"},
	{"archive", cmd_archive, "a directory tree as tar, tar.gz or zip"},
	{NULL, NULL, NULL},
};

static void usage(FILE *out)
{
	fputs("usage: harvest COMMAND [options] [args]\n"
	      "List sandbox directories, harvest the files a run produced, run commands.\n\n"
	      "Commands:\n",
	      out);
	for (const struct command *c = commands; c->name; c++)
		fprintf(out, "  %-10s %s\n", c->name, c->summary);
	fputs("\n'harvest COMMAND --help' (or 'harvest help COMMAND') describes a command;\n"
	      "'harvest --version' the versions.\n",
	      out);
}

/* What went to stdout through stdio (a usage text, the versions) reached it, or the command
 * fails as every command does when its output cannot be written: one line, exit 1. */
static int stdout_done(int rc)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return rc;
	if (rc == EXIT_DONE) {
		cli_error("standard output: %s", cli_stdout_error());
		rc = EXIT_WARN;
	}
	return rc;
}

int main(int argc, char **argv)
{
	/* A write past `ulimit -f` fails with EFBIG ("File too large"), reported as any write
	 * error, instead of SIGXFSZ ending harvest unannounced (a spool, a database, an archive
	 * or the output grown past the limit). A command `run` starts gets the default back. */
	signal(SIGXFSZ, SIG_IGN);
	cli_stdout_init();
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
		if (argc == 2 || (argc == 3 && (strcmp(argv[2], "help") == 0 ||
						strcmp(argv[2], "--help") == 0 ||
						strcmp(argv[2], "-h") == 0))) {
			usage(stdout);
			return stdout_done(EXIT_DONE);
		}
		/* "harvest help COMMAND" is "harvest COMMAND --help". */
		for (const struct command *c = commands; argc == 3 && c->name; c++) {
			if (strcmp(argv[2], c->name) != 0)
				continue;
			char help[] = "--help";
			char *args[] = {help, NULL};
			return stdout_done(c->run(1, args));
		}
		if (argc == 3)
			cli_error("unknown command '%s' (see 'harvest --help')", argv[2]);
		else
			cli_error("%s takes one COMMAND at most", cmd);
		return EXIT_USAGE;
	}
	if (strcmp(cmd, "--version") == 0) {
		if (argc > 2) {
			cli_error("--version takes no arguments");
			return EXIT_USAGE;
		}
		printf("harvest %s\nlibmagic %s\nSQLite %s\n", hv_version(), hv_libmagic_version(),
		       hv_sqlite_version());
		return stdout_done(EXIT_DONE);
	}
	for (const struct command *c = commands; c->name; c++) {
		if (strcmp(cmd, c->name) != 0)
			continue;
		return stdout_done(c->run(argc - 2, argv + 2));
	}
	cli_error("unknown command '%s' (see 'harvest --help')", cmd);
	return EXIT_USAGE;
}
