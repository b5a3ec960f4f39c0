/* What a run costs when it has nothing to do, seen from what it leaves: a walk of an empty
 * directory starts no thread; a run that makes few change events reads them on the caller's
 * thread, one that makes many starts a thread for them; the change tracking's descriptor is
 * released to a holder that leaves the caller no descriptor and no child; runs that follow
 * each other faster than the holder closes (the fallback through fork) answer the same. */
#include "testutil.h"
#include "harvest/execute.h"
#include "harvest/store.h"
#include "harvest/walk.h"
#include "mime_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef tu_fx fx;

/* An empty root gives the walk nothing to read ahead: not one worker, even when asked for
 * four. A root with a subdirectory gets them. */
static void test_empty_root_walk_starts_no_worker(void **state)
{
	fx *f = *state;
	hv_walk_opts wo;
	hv_walk_opts_init(&wo);
	wo.threads = 4;
	hv_walk *w;
	assert_int_equal(hv_walk_open(&w, f->root, &wo), HV_OK);
	assert_int_equal(hv_walk_workers(w, NULL), 0);
	const hv_entry *e;
	assert_int_equal(hv_walk_next(w, &e), HV_DONE);
	assert_int_equal(hv_walk_workers(w, NULL), 0);
	hv_walk_close(w);

	tu_mkdir(f->root, "sub");
	tu_write(f->root, "sub/file", "x", 1);
	assert_int_equal(hv_walk_open(&w, f->root, &wo), HV_OK);
	assert_true(hv_walk_workers(w, NULL) > 0);
	int n = 0;
	while (hv_walk_next(w, &e) == HV_OK)
		n++;
	assert_int_equal(n, 2);
	hv_walk_close(w);
}

/* The entries of a /proc directory, "." and ".." aside. */
static int count_entries(const char *path)
{
	DIR *d = opendir(path);
	assert_non_null(d);
	int n = 0;
	const struct dirent *de;
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static int count_fds(void)
{
	return count_entries("/proc/self/fd");
}

/* The children of every thread of ours, as the kernel lists them (zombies included). */
static int count_children(void)
{
	DIR *d = opendir("/proc/self/task");
	assert_non_null(d);
	int n = 0;
	const struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/task/%.20s/children", de->d_name);
		FILE *fp = fopen(path, "re");
		assert_non_null(fp);
		int pid;
		while (fscanf(fp, "%d", &pid) == 1)
			n++;
		fclose(fp);
	}
	closedir(d);
	return n;
}

/* No child of any kind: none listed, and waitpid of any child, clones included, has none. */
static void assert_no_child(void)
{
	assert_int_equal(count_children(), 0);
	errno = 0;
	assert_int_equal(waitpid(-1, NULL, WNOHANG | __WALL), -1);
	assert_int_equal(errno, ECHILD);
}

/* hv_execute_opts.open_store's calls in one run without a store (--no-history's). */
struct opener {
	char db[512];      /* the database it opens: outside the root */
	char done[512];    /* the command makes it once it has seen the database opened */
	bool fail_first;   /* the first call gives NULL without opening */
	int calls;
	pid_t tid[2];      /* the thread of each of the first two calls */
	bool running[2];   /* whether the command was still running then (done not made) */
	hv_store *st;
};

static hv_store *open_counted(void *ctx)
{
	struct opener *op = ctx;
	int i = op->calls++;
	if (i < 2) {
		op->tid[i] = gettid();
		op->running[i] = access(op->done, F_OK) != 0;
	}
	if (op->fail_first && i == 0)
		return NULL;
	if (!op->st && hv_store_open(&op->st, op->db, HV_STORE_NO_HISTORY) != HV_OK)
		op->st = NULL;
	return op->st;
}

/* Runs sh -c script in f's root with change events (each chunk to on_chunk, ctx), its
 * descendants ended with it (as harvest run does): exit 0, collected, by the events. With op,
 * no store is given: the run opens one through op (open_counted). */
static hv_execution run_with(fx *f, const char *script, hv_run_chunk_fn on_chunk, void *ctx,
			     struct opener *op)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	hv_execute_opts o;
	tu_execute_opts_events(&o, argv);
	o.collect.max_files = 2000;
	if (op) {
		o.open_store = open_counted;
		o.open_store_ctx = op;
	}
	hv_execution ex;
	assert_int_equal(hv_execute(op ? NULL : f->st, f->root, &o, on_chunk, ctx, &ex), HV_OK);
	assert_int_equal(ex.collect_status, HV_OK);
	assert_string_equal(ex.changes, "events");
	assert_int_equal(ex.run.exit_code, 0);
	assert_non_null(ex.files);
	return ex;
}

static hv_execution run_script(fx *f, const char *script, hv_run_chunk_fn on_chunk, void *ctx)
{
	return run_with(f, script, on_chunk, ctx, NULL);
}

static hv_execution run_opening(fx *f, struct opener *op, const char *script)
{
	return run_with(f, script, NULL, NULL, op);
}

static void run_events(fx *f, const char *script, size_t want_files)
{
	hv_execution ex = run_script(f, script, NULL, NULL);
	assert_int_equal(ex.files->n_files, want_files);
	hv_execution_free(&ex);
}

/* The threads of this process, as /proc lists them. */
static int count_threads(void)
{
	return count_entries("/proc/self/task");
}

/* For each line "count" of the output: the threads of the process when its chunk came (two
 * lines written close together may come in one chunk). */
struct thread_counts {
	int at_count[4];
	pid_t spawner[4]; /* libmagic's spawner then (hvm_spawner_pid) */
	int n;
	const char *go[2]; /* files made once the first, the second "count" is counted (NULL: none) */
};

static hv_status count_at_chunk(void *ctx, hv_stream which, const char *data, size_t len)
{
	struct thread_counts *tc = ctx;
	if (which != HV_STREAM_STDOUT)
		return HV_OK;
	int threads = count_threads();
	for (size_t i = 0; i + 6 <= len; i++) {
		if ((i == 0 || data[i - 1] == '\n') && !memcmp(data + i, "count\n", 6) && tc->n < 4) {
			tc->spawner[tc->n] = hvm_spawner_pid();
			tc->at_count[tc->n++] = threads;
			if (tc->n <= 2 && tc->go[tc->n - 1])
				tu_write("/", tc->go[tc->n - 1] + 1, "", 0);
		}
	}
	return HV_OK;
}

static hv_execution run_counting(fx *f, const char *script, struct thread_counts *tc)
{
	memset(tc, 0, sizeof(*tc));
	return run_script(f, script, count_at_chunk, tc);
}

/* run_counting, with GO1 and GO2 in script replaced by files outside the root that are made
 * once the first, the second "count" was counted: the command waits for them, so what follows
 * cannot come before that chunk was read (under valgrind the command ran ahead, and its
 * file's event was read before the chunk that came first; a fixed sleep in the command was
 * once too short for a loaded machine). */
static hv_execution run_counting_go(fx *f, const char *script, struct thread_counts *tc)
{
	memset(tc, 0, sizeof(*tc));
	char *go[2] = {tu_path(f->dir, "go1"), tu_path(f->dir, "go2")};
	char text[4096], next[4096];
	assert_true(snprintf(text, sizeof(text), "%s", script) < (int)sizeof(text));
	for (int i = 0; i < 2; i++) {
		(void)unlink(go[i]);
		char token[] = {'G', 'O', (char)('1' + i), '\0'};
		const char *at = strstr(text, token);
		assert_non_null(at);
		assert_true(snprintf(next, sizeof(next), "%.*s%s%s", (int)(at - text), text, go[i],
				     at + 3) < (int)sizeof(next));
		memcpy(text, next, strlen(next) + 1);
		tc->go[i] = go[i];
	}
	hv_execution ex = run_script(f, text, count_at_chunk, tc);
	for (int i = 0; i < 2; i++) {
		tc->go[i] = NULL;
		free(go[i]);
	}
	return ex;
}

/* A run whose command makes a few events reads them on the caller's thread: none is started
 * while it runs (the process has one thread at every chunk). Its first file starts the
 * libmagic worker at once, while the command goes on. One that makes thousands gets a
 * thread for them, beside the command and the relay of its output (two at the chunk that
 * follows them: by then the caller's loop has read past the first 1,024), and every file it
 * made is reported. */
static void test_events_read_on_the_callers_thread_until_many(void **state)
{
	fx *f = *state;
	/* (fanotify's FAN_MARK_FILESYSTEM needs CAP_SYS_ADMIN: the suite runs as root) */
	assert_int_equal(count_threads(), 1);
	struct thread_counts tc;
	hv_execution ex = run_counting_go(f,
					  "echo count; while [ ! -e GO1 ]; do sleep 0.01; done;"
					  " echo x > a; echo count; while [ ! -e GO2 ]; do sleep 0.01;"
					  " done; echo count",
					  &tc);
	assert_int_equal(tc.n, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(tc.at_count[i], 1);
	/* The file's creation started libmagic's spawner while the command ran (and the worker
	 * it forks), not after: no thread, and the process was not running before. */
	assert_int_equal(tc.spawner[0], -1);
	assert_true(tc.spawner[2] > 0);
	assert_int_equal(ex.files->n_files, 1);
	hv_execution_free(&ex);
	/* The run ended its command's descendants, not the spawner started while it ran: still
	 * running (a zombie would be reaped here) and still the one in use. */
	assert_int_equal(waitpid(tc.spawner[2], NULL, WNOHANG), 0);
	assert_int_equal(hvm_spawner_pid(), tc.spawner[2]);
	assert_int_equal(count_threads(), 1);

	/* 1,500 files, each created and closed after writing: an event each (the kernel merges
	 * the two of one name), and more */
	ex = run_counting(f,
			  "echo count; mkdir d; i=0; while [ $i -lt 1500 ]; do : > d/f$i; "
			  "i=$((i + 1)); done; sleep 2; echo count",
			  &tc);
	assert_int_equal(tc.n, 2);
	assert_int_equal(tc.at_count[0], 1);
	assert_int_equal(tc.at_count[1], 2);
	assert_int_equal(ex.files->n_files, 1500);
	hv_execution_free(&ex);
	/* the thread ended with the run */
	assert_int_equal(count_threads(), 1);
}

/* Without a store, a run opens one at its command's first change below the root, on a thread
 * of its own, while the command goes on: the command here waits until the database's WAL index
 * exists before it ends, and the open began before that end, on another thread. When that
 * open gives nothing, the store is asked for again on the caller's thread after the command.
 * A command that changes nothing asks for none. */
static void test_store_opened_at_the_first_change(void **state)
{
	fx *f = *state;
	char *dbdir = tu_mkdtemp();
	struct opener op = {0};
	snprintf(op.db, sizeof(op.db), "%s/early.db", dbdir);
	snprintf(op.done, sizeof(op.done), "%s/done", f->root);
	char script[1536];
	snprintf(script, sizeof(script),
		 "echo x > a; i=0; while [ ! -e '%s-shm' ] && [ $i -lt 600 ]; do sleep 0.05; "
		 "i=$((i + 1)); done; [ -e '%s-shm' ] && : > done",
		 op.db, op.db);
	hv_execution ex = run_opening(f, &op, script);
	assert_int_equal(op.calls, 1);
	assert_int_not_equal(op.tid[0], gettid());
	assert_true(op.running[0]);
	assert_int_equal(ex.files->n_files, 2); /* a, and done: made after the open */
	hv_execution_free(&ex);
	assert_int_equal(count_threads(), 1);
	assert_int_equal(hv_store_close(op.st), HV_OK);

	/* the early open fails: asked again, on this thread, after the command */
	struct opener again = {.fail_first = true};
	snprintf(again.db, sizeof(again.db), "%s/again.db", dbdir);
	snprintf(again.done, sizeof(again.done), "%s/done", f->root);
	ex = run_opening(f, &again, "echo y > b; sleep 0.2; : > done");
	assert_int_equal(again.calls, 2);
	assert_int_not_equal(again.tid[0], gettid());
	assert_int_equal(again.tid[1], gettid());
	assert_false(again.running[1]);
	assert_non_null(again.st);
	assert_int_equal(ex.files->n_files, 2); /* b, and done again */
	hv_execution_free(&ex);
	assert_int_equal(hv_store_close(again.st), HV_OK);

	/* nothing changed: no store asked for */
	struct opener none = {0};
	snprintf(none.db, sizeof(none.db), "%s/none.db", dbdir);
	ex = run_opening(f, &none, "true");
	assert_int_equal(none.calls, 0);
	assert_int_equal(ex.files->n_files, 0);
	hv_execution_free(&ex);
	struct stat sb;
	assert_int_not_equal(stat(none.db, &sb), 0);
	tu_rmrf(dbdir);
	free(dbdir);
}

/* Once hv_execute has returned, a run with events leaves its caller no child, not even a
 * zombie: the holder of the fanotify group's last reference is not the caller's child (its
 * relay is reaped before hv_execute returns, as is the fork fallback's intermediate child). Runs
 * back to back (the next release finds the last holder still closing: the fork path) and
 * spaced out (the shared-memory holder's stack is free again). The first test of this
 * program: the runs produce no file, so libmagic's spawner, a child for the life of the
 * process, is not started yet. */
static void test_run_leaves_no_child(void **state)
{
	fx *f = *state;
	/* (fanotify's FAN_MARK_FILESYSTEM needs CAP_SYS_ADMIN: the suite runs as root) */
	assert_no_child();
	for (int i = 0; i < 4; i++) {
		run_events(f, "true", 0);
		assert_no_child();
	}
	for (int i = 0; i < 3; i++) {
		usleep(150000); /* the last holder's close is likely over: its stack is free */
		run_events(f, "true", 0);
		assert_no_child();
	}
}

/* Runs with events, back to back (the next one starts while the last holder may still be
 * closing: it takes the fork path) and spaced out (the last holder has exited: its stack is
 * free again). Each answers; the caller keeps no descriptor of theirs and no child but
 * libmagic's spawner. */
static void test_release_leaves_no_descriptor_nor_children(void **state)
{
	fx *f = *state;
	/* (fanotify's FAN_MARK_FILESYSTEM needs CAP_SYS_ADMIN: the suite runs as root) */
	/* the first: whatever is opened once per process (libmagic's spawner, for a file) */
	run_events(f, "echo w > w", 1);
	int fds = count_fds();
	/* libmagic's spawner */
	int children = count_children();
	for (int i = 0; i < 6; i++) {
		char script[64];
		snprintf(script, sizeof(script), "echo %d > f%d", i, i);
		run_events(f, script, 1);
		assert_int_equal(count_fds(), fds);
		assert_true(count_children() <= children);
		/* nothing for a plain waitpid(-1) to reap */
		int st;
		pid_t got = waitpid(-1, &st, WNOHANG);
		assert_true(got <= 0);
	}
	for (int i = 0; i < 4; i++) {
		usleep(150000); /* the holder's close is over: its stack is free */
		run_events(f, "true", 0);
		assert_true(count_children() <= children);
	}
	assert_int_equal(count_fds(), fds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* first: before any run that starts libmagic's spawner */
		cmocka_unit_test_setup_teardown(test_run_leaves_no_child, tu_fx_setup,
						tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_events_read_on_the_callers_thread_until_many,
						tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_store_opened_at_the_first_change, tu_fx_setup,
						tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_empty_root_walk_starts_no_worker, tu_fx_setup,
						tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_leaves_no_descriptor_nor_children,
						tu_fx_setup, tu_fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
