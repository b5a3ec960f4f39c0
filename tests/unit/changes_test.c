/* The change tracking's cost in a busy file system: the marks cover whole file systems, so a
 * run receives the events of every process on them. Directories that other processes make
 * outside the run's directory must not each cost a lookup of where they are. */
#include "testutil.h"

#include "harvest/execute.h"
#include "test_hook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef tu_fx fx;

struct resolved {
	const char *outside;
	size_t outside_len;
	unsigned itself; /* the outside directory looked up */
	unsigned below;  /* directories below it looked up */
};

/* Called on the change tracking's thread; read by the test once hv_execute has joined it. */
static void on_resolve(void *ctx, const char *path)
{
	struct resolved *r = ctx;
	if (strncmp(path, r->outside, r->outside_len) != 0)
		return; /* another process's directory, elsewhere on the machine */
	if (path[r->outside_len] == '\0')
		r->itself++;
	else if (path[r->outside_len] == '/')
		r->below++;
}

static hv_status no_chunks(void *ctx, hv_stream which, const char *data, size_t len)
{
	(void)ctx;
	(void)which;
	(void)data;
	(void)len;
	return HV_OK;
}

/* A command that makes 40 directories with a file each outside DIR, and one file in DIR: the
 * outside directory is looked up once, the directories made in it never, and the file in DIR
 * is found. */
static void test_events_outside_dirs_not_resolved(void **state)
{
	const fx *f = *state;
	char *outside = NULL;
	assert_true(asprintf(&outside, "%s/outside", f->dir) > 0);
	assert_int_equal(mkdir(outside, 0755), 0);
	/* The path as the kernel gives it back (the temp dir may be reached through a link). */
	char *real = realpath(outside, NULL);
	assert_non_null(real);
	char *script = NULL;
	assert_true(asprintf(&script,
			     "for i in $(seq 1 40); do mkdir '%s'/d$i && echo x > '%s'/d$i/f; done;"
			     " echo made > produced.txt",
			     real, real) > 0);
	const char *argv[5];
	hv_execute_opts o;
	memset(&o, 0, sizeof(o));
	hv_run_opts_init(&o.run);
	hv_collect_opts_init(&o.collect);
	assert_int_equal(hv_run_argv_shell(argv, script), HV_OK);
	o.run.argv = argv;
	o.run.timeout_ms = 20000;
	o.no_history = true;
	o.changes = HV_CHANGES_EVENTS;
	struct resolved r = {.outside = real, .outside_len = strlen(real)};
	hv__test_hook_set(HV__HOOK_CHANGES_RESOLVE, on_resolve, &r);
	hv_execution ex;
	hv_status rc = hv_execute(f->st, f->root, &o, no_chunks, NULL, &ex);
	hv__test_hook_set(HV__HOOK_CHANGES_RESOLVE, NULL, NULL);
	if (rc != HV_OK)
		fail_msg("hv_execute: %s", hv_error_last());
	assert_int_equal(ex.collect_status, HV_OK);
	assert_string_equal(ex.changes, "events");
	assert_int_equal(ex.run.exit_code, 0);
	assert_int_equal(ex.files->n_files, 1);
	assert_string_equal(ex.files->files[0].path, "produced.txt");
	assert_true(r.itself >= 1); /* the hook sees the lookups */
	assert_int_equal(r.below, 0);
	hv_execution_free(&ex);
	free(script);
	free(real);
	free(outside);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_events_outside_dirs_not_resolved, tu_fx_setup,
						tu_fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
