/* When a run with end_descendants reads every process on the machine from /proc: only when
 * the caller has a child that is neither the command's leader, nor a child it had before the
 * run, nor harvest's own. libmagic's spawner is harvest's own and is started during the first
 * run that makes a file, so that run ends without a scan; a process the command leaves
 * behind still gets one, and is ended, while the spawner lives on.
 *
 * Each case runs in a child process of its own (tu_in_child): the spawner is started once per
 * process, and each case needs a process that has none yet. */
#include "testutil.h"
#include "harvest/execute.h"
#include "harvest/store.h"
#include "mime_internal.h"
#include "run_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* A check in the forked case: on failure, says which and ends the child with status 1. */
#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);    \
			_exit(1);                                                     \
		}                                                                     \
	} while (0)

/* Runs sh -c script in f's root as `harvest run --changes events` does, the MIME cache in a
 * database of its own beside the root; the number of files it made. */
static size_t run_in(const tu_fx *f, const char *script)
{
	char *db = tu_path(f->dir, "scan.db");
	hv_store *st = NULL;
	CHECK(hv_store_open(&st, db, HV_STORE_NO_HISTORY) == HV_OK);
	const char *argv[] = {"sh", "-c", script, NULL};
	hv_execute_opts o;
	tu_execute_opts_events(&o, argv);
	hv_execution ex;
	CHECK(hv_execute(st, f->root, &o, NULL, NULL, &ex) == HV_OK);
	CHECK(ex.run.exit_code == 0);
	CHECK(ex.files != NULL);
	size_t n = ex.files->n_files;
	hv_execution_free(&ex);
	CHECK(hv_store_close(st) == HV_OK);
	free(db);
	return n;
}

/* The first run that makes a file starts the spawner, and leaves nothing else: no scan. */
static int case_spawner_only(void *arg)
{
	const tu_fx *f = arg;
	CHECK(hvm_spawner_pid() < 0);
	unsigned long scans = hvr_proc_scans();
	CHECK(run_in(f, "echo x > made") == 1);
	pid_t spawner = hvm_spawner_pid();
	CHECK(spawner > 0);
	CHECK(hvr_proc_scans() == scans);
	/* and the next run too, the spawner now a child from before it */
	CHECK(run_in(f, "echo y > made2") == 1);
	CHECK(hvr_proc_scans() == scans);
	CHECK(hvm_spawner_pid() == spawner);
	CHECK(kill(spawner, 0) == 0);
	return 0;
}

/* The same first run, with a process left behind: it is found (a scan) and ended, and the
 * spawner, started in that run, is left running. */
static int case_spawner_and_leftover(void *arg)
{
	const tu_fx *f = arg;
	CHECK(hvm_spawner_pid() < 0);
	unsigned long scans = hvr_proc_scans();
	CHECK(run_in(f, "sleep 100 >/dev/null 2>&1 </dev/null & echo $! > ../bg.pid; "
			"echo x > made") == 1);
	CHECK(hvr_proc_scans() > scans);
	char *pidfile = tu_path(f->dir, "bg.pid");
	char *text = tu_read_file(pidfile, NULL);
	CHECK(text != NULL);
	int bg = atoi(text);
	CHECK(bg > 0);
	free(text);
	free(pidfile);
	/* gone and reaped by the run: no child of ours by that pid, and no process */
	int st;
	CHECK(waitpid(bg, &st, WNOHANG) < 0 && errno == ECHILD);
	CHECK(kill(bg, 0) != 0 && errno == ESRCH);
	pid_t spawner = hvm_spawner_pid();
	CHECK(spawner > 0);
	CHECK(kill(spawner, 0) == 0);
	return 0;
}

static void test_no_scan_for_the_spawner(void **state)
{
	assert_int_equal(tu_in_child(case_spawner_only, *state), 0);
}

static void test_leftover_still_ended(void **state)
{
	assert_int_equal(tu_in_child(case_spawner_and_leftover, *state), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_no_scan_for_the_spawner, tu_fx_setup,
						tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_leftover_still_ended, tu_fx_setup,
						tu_fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
