/* libmagic's isolated workers come from a spawner process, which must be forked while the
 * process has one thread: a fork copies the locks other threads hold at that moment (the
 * allocator's, under a sanitizer; libc's locale or loader lock), and every worker later forked
 * from that copy waits on them forever, so that each file of the process's life is typed
 * application/octet-stream after the time limit. A collect loads libmagic at its first file,
 * on whichever of its threads gets there: it must fork the spawner before it starts any.
 *
 * Each case runs in a child of this (single-threaded) test process, where no spawner has been
 * forked yet, and counts the threads at the spawner's fork through a test hook. Before the
 * collect started the spawner itself, the first case saw the walk's threads. */
#include "testutil.h"
#include "harvest/collect.h"
#include "harvest/sys/store.h"
#include "changes.h"
#include "test_hook.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Threads of this process, from /proc/self/status; -1 when it cannot be read. */
static int thread_count(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return -1;
	char line[256];
	int n = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

struct seen {
	int forks;
	int threads; /* at the first fork */
};

static void at_fork(void *ctx, const char *path)
{
	(void)path;
	struct seen *s = ctx;
	if (s->forks++ == 0)
		s->threads = thread_count();
}

/* A tree big enough for the walk to start its threads, with files libmagic must type. */
static char *make_tree(void)
{
	char *dir = tu_mkdtemp();
	char name[64], text[64];
	for (int d = 0; d < 8; d++) {
		snprintf(name, sizeof(name), "d%d", d);
		tu_mkdir(dir, name);
		for (int i = 0; i < 40; i++) {
			snprintf(name, sizeof(name), "d%d/f%d.txt", d, i);
			int len = snprintf(text, sizeof(text), "file %d of %d\n", i, d);
			tu_write(dir, name, text, (size_t)len);
		}
	}
	return dir;
}

enum { CASE_COLLECT, CASE_CHANGE_SET };

/* In the child: what it saw, as its exit status (the thread count, 100 + forks when not
 * exactly one fork, 120 + n on failures). */
static int child_case(int which)
{
	char *dir = make_tree();
	char *dbdir = tu_mkdtemp(); /* outside the tree, which would collect it */
	char *db = tu_path(dbdir, "store.db");
	hv_store *st = NULL;
	if (hv_store_open(&st, db, 0) != HV_OK)
		return 121;
	struct seen s = {0, -1};
	hv__test_hook_set(HV__HOOK_SPAWNER_FORK, at_fork, &s);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	hv_collection *c = NULL;
	hv_status rc;
	if (which == CASE_COLLECT) {
		rc = hv_collect(st, dir, &o, &c);
	} else {
		char *paths[] = {"d0/f0.txt", "d1/f1.txt", "d2/f2.txt"};
		const char *change[] = {"created", "created", "modified"};
		bool time_check[] = {false, false, false};
		hv_change_set cs = {.paths = paths, .change = change, .time_check = time_check,
				    .n = 3};
		rc = hv_collect_change_set(st, dir, &o, &cs, &c);
	}
	hv__test_hook_set(HV__HOOK_SPAWNER_FORK, NULL, NULL);
	if (rc != HV_OK || !c)
		return 122;
	int typed = 0;
	for (size_t i = 0; i < c->n_files; i++)
		typed += strcmp(c->files[i].mime_type, "text/plain") == 0;
	size_t want = which == CASE_COLLECT ? 320 : 3;
	if (c->n_files != want || (size_t)typed != want || c->warnings != 0)
		return 123;
	hv_collection_free(c);
	hv_store_close(st);
	tu_rmrf(dir);
	tu_rmrf(dbdir);
	free(db);
	free(dbdir);
	free(dir);
	if (s.forks != 1)
		return 100 + (s.forks < 19 ? s.forks : 19);
	return s.threads;
}

static int run_case(int which)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_case(which));
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void check(int got)
{
	if (got >= 120)
		fail_msg("the collect failed or typed a file wrong (child status %d)", got);
	if (got >= 100)
		fail_msg("the spawner was forked %d times, not once", got - 100);
	assert_int_equal(got, 1);
}

static void test_collect_forks_spawner_single_threaded(void **state)
{
	(void)state;
	check(run_case(CASE_COLLECT));
}

static void test_change_set_forks_spawner_single_threaded(void **state)
{
	(void)state;
	check(run_case(CASE_CHANGE_SET));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_collect_forks_spawner_single_threaded),
		cmocka_unit_test(test_change_set_forks_spawner_single_threaded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
