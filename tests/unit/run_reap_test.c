/* A run with change events leaves its caller no child: the fanotify group's last reference
 * goes to a holder that is not the caller's child (its relay is reaped before the run goes
 * on, and the fork fallback's intermediate child too), so once hv_execute has returned no
 * process is left for the caller to reap, not even a zombie. A program of its own: libmagic's
 * spawner, a child for the life of the process, is never started here (the runs produce no
 * file). */
#include "testutil.h"
#include "harvest/execute.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef tu_fx fx;

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

static void run_true(fx *f)
{
	const char *argv[] = {"true", NULL};
	hv_execute_opts o;
	memset(&o, 0, sizeof(o));
	hv_run_opts_init(&o.run);
	hv_collect_opts_init(&o.collect);
	o.run.argv = argv;
	o.no_history = true;
	o.changes = HV_CHANGES_EVENTS;
	hv_execution ex;
	assert_int_equal(hv_execute(f->st, f->root, &o, NULL, NULL, &ex), HV_OK);
	assert_int_equal(ex.collect_status, HV_OK);
	assert_string_equal(ex.changes, "events"); /* the holder was started */
	assert_int_equal(ex.run.exit_code, 0);
	assert_non_null(ex.files);
	assert_int_equal(ex.files->n_files, 0);
	hv_execution_free(&ex);
}

/* Runs back to back (the next release finds the last holder still closing: the fork path)
 * and spaced out (the shared-memory holder's stack is free again): after each, no child. */
static void test_run_leaves_no_child(void **state)
{
	fx *f = *state;
	/* (fanotify's FAN_MARK_FILESYSTEM needs CAP_SYS_ADMIN: the suite runs as root) */
	assert_no_child();
	for (int i = 0; i < 4; i++) {
		run_true(f);
		assert_no_child();
	}
	for (int i = 0; i < 3; i++) {
		usleep(150000); /* the last holder's close is likely over: its stack is free */
		run_true(f);
		assert_no_child();
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_run_leaves_no_child, tu_fx_setup,
						tu_fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
