/* `harvest mime` forks libmagic's sandbox spawner only when some file argument misses the
 * cache: a fully cached run has no child process at all, a run with a miss (or with a
 * directory argument, whose walk runs threads) has one. Observed from outside: harvest writes
 * more than a pipe holds, and the test reads a single byte, so harvest is still running (its
 * spawner, when it forked one, lives until harvest exits) while the test lists its children. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* More answers than a pipe holds (each line is some 70 bytes, a pipe 64 KiB). */
enum { FILES = 2000 };

typedef tu_corpus spawn_fx;

static const char *make_file(size_t i, char *buf, size_t cap)
{
	snprintf(buf, cap, "file-%04zu.txt", i);
	return "some words\n";
}

static int fx_setup(void **state)
{
	spawn_fx *f = tu_corpus_new(FILES, 0, make_file);
	tu_corpus_age(f);
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	tu_corpus_free(*state);
	return 0;
}

/* Runs harvest mime [extra] --db DB [first] PATHS... [last]; returns how many children it had
 * after its first byte of output (and before it could finish), and its exit status in
 * *status. Arguments are answered in order, so what follows the first FILES is not reached
 * yet then. */
static int children_while_running(spawn_fx *f, const char *extra, const char *first,
				  const char *last, int *status)
{
	const char **argv = calloc(FILES + 8, sizeof(*argv));
	assert_non_null(argv);
	size_t n = 0;
	argv[n++] = HARVEST_BIN;
	argv[n++] = "mime";
	if (extra)
		argv[n++] = extra;
	argv[n++] = "--db";
	argv[n++] = f->db;
	if (first)
		argv[n++] = first;
	for (size_t i = 0; i < FILES; i++)
		argv[n++] = f->paths[i];
	if (last)
		argv[n++] = last;
	argv[n] = NULL;
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 2);
		close(p[0]);
		close(p[1]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	char c;
	ssize_t got;
	while ((got = read(p[0], &c, 1)) < 0 && errno == EINTR)
		;
	assert_int_equal(got, 1);
	/* harvest cannot end before its output is read: its children are those it has now. */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	size_t len = 0;
	char *kids = tu_read_file(path, &len);
	assert_non_null(kids);
	int count = 0;
	for (char *s = strtok(kids, " \n"); s; s = strtok(NULL, " \n"))
		count++;
	free(kids);
	char buf[65536];
	while ((got = read(p[0], buf, sizeof(buf))) != 0)
		assert_true(got > 0 || errno == EINTR);
	close(p[0]);
	*status = tu_wait(pid);
	free(argv);
	return count;
}

static void test_spawner_only_on_a_miss(void **state)
{
	spawn_fx *f = *state;
	int status;
	/* Cold: every file misses, so the spawner runs. */
	assert_int_equal(children_while_running(f, NULL, NULL, NULL, &status), 1);
	assert_int_equal(status, 0);
	/* Warm: every answer from the cache, nothing forked. */
	assert_int_equal(children_while_running(f, NULL, NULL, NULL, &status), 0);
	assert_int_equal(status, 0);
	/* --no-cache: libmagic for each file again. */
	assert_int_equal(children_while_running(f, "--no-cache", NULL, NULL, &status), 1);
	assert_int_equal(status, 0);
	/* One file the cache does not hold yet, after the cached ones. */
	tu_write(f->dir, "new.txt", "new words\n", 10);
	char *fresh = tu_path(f->dir, "new.txt");
	assert_int_equal(children_while_running(f, NULL, NULL, fresh, &status), 1);
	assert_int_equal(status, 0);
	free(fresh);
	/* A directory argument: started before its walk, cached or not (here an empty one). */
	char *sub = tu_path(f->dir, "sub");
	assert_int_equal(mkdir(sub, 0755), 0);
	assert_int_equal(children_while_running(f, NULL, sub, NULL, &status), 1);
	assert_int_equal(status, 0);
	free(sub);
}

/* The bench-only switch HARVEST_BENCH_MIME_IN_PROCESS=1 runs libmagic in harvest's process (no
 * spawner even on a miss), with the same answers. */
static void test_in_process_switch(void **state)
{
	spawn_fx *f = *state;
	int status;
	setenv("HARVEST_BENCH_MIME_IN_PROCESS", "1", 1);
	assert_int_equal(children_while_running(f, "--no-cache", NULL, NULL, &status), 0);
	unsetenv("HARVEST_BENCH_MIME_IN_PROCESS");
	assert_int_equal(status, 0);
	const char *args[] = {"mime", "--no-cache", "--raw", f->paths[0], NULL};
	tu_result a, b;
	tu_harvestv(&a, NULL, NULL, args);
	setenv("HARVEST_BENCH_MIME_IN_PROCESS", "1", 1);
	tu_harvestv(&b, NULL, NULL, args);
	unsetenv("HARVEST_BENCH_MIME_IN_PROCESS");
	assert_int_equal(a.status, 0);
	assert_int_equal(b.status, 0);
	assert_string_equal(a.out, b.out);
	assert_non_null(strstr(a.out, "\"text/plain\""));
	tu_result_free(&a);
	tu_result_free(&b);
}

/* libmagic's expressions run behind the literal prefilter in the workers (mime_rx.c), or all of
 * them unfiltered with HARVEST_MIME_REGEX_FILTER=0: the answers are the same either way, and
 * the same as libmagic's in harvest's own process (never filtered), for sources whose types
 * are decided by those expressions. */
static void test_regex_filter_same_answers(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	static const char *const texts[][2] = {
		{"a.mjs", "import x from './x.js';\nexport default function f() { return x; }\n"},
		{"b.rb", "require 'json'\nmodule Foo\n  class Bar < Base\n    def baz\n    end\n"
			 "  end\nend\n"},
		{"c.cc", "#include <vector>\nnamespace n {\nclass A {\npublic:\n  virtual ~A();\n"
			 "};\n}\n"},
		{"d.mk", "CFLAGS = -O2\nall: prog\nprog: prog.o\n\t$(CC) -o $@ $^\n"},
		{"e.s", "\t.file \"a.c\"\n\t.text\n\t.globl main\nmain:\n\tret\n"},
		{"f.srt", "1\n00:00:01,000 --> 00:00:02,000\nHello\n"},
		{"g.txt", "Plain words, nothing more.\n"},
	};
	enum { N = sizeof(texts) / sizeof(texts[0]) };
	const char *args[3 + N + 1] = {"mime", "--no-cache", "--raw"};
	char *paths[N];
	for (int i = 0; i < N; i++) {
		tu_write(dir, texts[i][0], texts[i][1], strlen(texts[i][1]));
		paths[i] = tu_path(dir, texts[i][0]);
		args[3 + i] = paths[i];
	}
	args[3 + N] = NULL;
	tu_result filtered, unfiltered, in_process;
	tu_harvestv(&filtered, NULL, NULL, args);
	setenv("HARVEST_MIME_REGEX_FILTER", "0", 1);
	tu_harvestv(&unfiltered, NULL, NULL, args);
	unsetenv("HARVEST_MIME_REGEX_FILTER");
	setenv("HARVEST_BENCH_MIME_IN_PROCESS", "1", 1);
	tu_harvestv(&in_process, NULL, NULL, args);
	unsetenv("HARVEST_BENCH_MIME_IN_PROCESS");
	assert_int_equal(filtered.status, 0);
	assert_int_equal(unfiltered.status, 0);
	assert_int_equal(in_process.status, 0);
	assert_string_equal(filtered.out, unfiltered.out);
	assert_string_equal(filtered.out, in_process.out);
	assert_non_null(strstr(filtered.out, "\"text/x-ruby\""));
	assert_non_null(strstr(filtered.out, "\"text/x-makefile\""));
	assert_non_null(strstr(filtered.out, "\"application/x-subrip\""));
	tu_result_free(&filtered);
	tu_result_free(&unfiltered);
	tu_result_free(&in_process);
	for (int i = 0; i < N; i++)
		free(paths[i]);
	tu_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spawner_only_on_a_miss),
		cmocka_unit_test(test_in_process_switch),
		cmocka_unit_test(test_regex_filter_same_answers),
	};
	return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
