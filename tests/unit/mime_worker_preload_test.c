/* The spawner loads libmagic's database once and the workers it forks inherit it, loaded: a
 * collect's second worker does not parse magic.mgc again. Inherited only when it is the same
 * database as the handle's: the key is the handle's fingerprint (each database file's size
 * and mtime), so a handle on another database, or on one rewritten since, gets answers from
 * its own, never from the one the spawner holds. */
#include "testutil.h"
#include "harvest/mime.h"
#include "mime_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char probe[] = "HVPRELOAD probe bytes, plain text otherwise\n";

/* A magic source file typing the probe as application/x-hv-<tag>. */
static void write_magic(const char *dir, const char *tag)
{
	char text[256];
	int n = snprintf(text, sizeof(text),
			 "0\tstring\tHVPRELOAD\tharvest preload test %s\n!:mime\tapplication/x-hv-%s\n",
			 tag, tag);
	tu_write(dir, "test.magic", text, (size_t)n);
}

/* The answer for the probe file of a new handle on database (NULL: the default), and whether
 * its worker inherited the spawner's database. */
static char *answer(const char *database, const char *file, bool *inherited)
{
	hv_magic *m = NULL;
	hv_status rc = hv_magic_open(&m, database, 0);
	if (rc != HV_OK)
		fail_msg("hv_magic_open(%s): %s", database ? database : "default", hv_error_last());
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	const char *type = NULL;
	rc = hv_magic_fd(m, fd, file, &type);
	close(fd);
	if (rc != HV_OK)
		fail_msg("hv_magic_fd: %d %s", rc, hv_error_last());
	*inherited = hvm_magic_worker_inherited(m);
	char *out = strdup(type);
	hv_magic_close(m);
	return out;
}

static void expect(const char *database, const char *file, const char *want)
{
	bool inherited = false;
	char *got = answer(database, file, &inherited);
	if (strcmp(got, want) != 0)
		fail_msg("database %s: %s, not %s", database ? database : "default", got, want);
	assert_true(inherited);
	free(got);
}

static void test_workers_inherit_the_right_database(void **state)
{
	(void)state;
	hv_magic_set_isolation(true, 0);
	char *dir = tu_mkdtemp();
	tu_write(dir, "probe", probe, strlen(probe));
	char *file = tu_path(dir, "probe");
	write_magic(dir, "one");
	char *db = tu_path(dir, "test.magic");

	/* The default database, twice: each worker inherits it. */
	expect(NULL, file, "text/plain");
	expect(NULL, file, "text/plain");
	/* Another database: the spawner loads that one, and back again. */
	expect(db, file, "application/x-hv-one");
	expect(NULL, file, "text/plain");
	expect(db, file, "application/x-hv-one");

	/* The same path rewritten (another size, and an mtime set apart): its new rule, not the
	 * one the spawner loaded under the old fingerprint. */
	write_magic(dir, "second");
	struct timespec ts[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
	assert_int_equal(utimensat(AT_FDCWD, db, ts, 0), 0);
	expect(db, file, "application/x-hv-second");

	/* Two handles at once on the default: two workers, both inherited. */
	hv_magic *a = NULL, *b = NULL;
	assert_int_equal(hv_magic_open(&a, NULL, 0), HV_OK);
	assert_int_equal(hv_magic_open(&b, NULL, 0), HV_OK);
	assert_true(hvm_magic_worker_pid(a) != hvm_magic_worker_pid(b));
	assert_true(hvm_magic_worker_inherited(a));
	assert_true(hvm_magic_worker_inherited(b));
	hv_magic_close(a);
	hv_magic_close(b);

	free(db);
	free(file);
	tu_rmrf(dir);
	free(dir);
}

/* A database that cannot be loaded is still refused with libmagic's reason (the worker loads
 * it itself when the spawner could not). */
static void test_bad_database_still_refused(void **state)
{
	(void)state;
	hv_magic_set_isolation(true, 0);
	char *dir = tu_mkdtemp();
	tu_write(dir, "bad.mgc", "this is not a compiled magic file at all", 40);
	char *db = tu_path(dir, "bad.mgc");
	hv_magic *m = NULL;
	hv_status rc = hv_magic_open(&m, db, 0);
	assert_int_equal(rc, HV_EIO);
	assert_null(m);
	assert_non_null(strstr(hv_error_last(), "bad.mgc"));
	/* And the default still works after it. */
	char *file = tu_path(dir, "bad.mgc");
	bool inherited = false;
	char *got = answer(NULL, file, &inherited);
	assert_string_equal(got, "text/plain");
	assert_true(inherited);
	free(got);
	free(file);
	free(db);
	tu_rmrf(dir);
	free(dir);
}

/* Handles opened at once on several threads, with the default database: with a ~/.magic,
 * libmagic builds the default path in a static buffer it frees at each call, which a thread
 * must not be copying meanwhile (ASan saw a use after free before the calls took turns). */
static void *open_many(void *arg)
{
	int *bad = arg;
	for (int i = 0; i < 300; i++) {
		hv_magic *m = NULL;
		if (hvm_magic_open_lazy(&m, NULL, 0) != HV_OK || !m ||
		    !strstr(hv_magic_database(m), "/.magic")) {
			(*bad)++;
			return NULL;
		}
		hv_magic_close(m);
	}
	return NULL;
}

static void test_default_path_from_threads(void **state)
{
	(void)state;
	char *home = tu_mkdtemp();
	tu_write(home, ".magic", "0\tstring\tHVHOME\tharvest home magic\n", 35);
	const char *old = getenv("HOME");
	char *saved = old ? strdup(old) : NULL;
	setenv("HOME", home, 1);
	pthread_t th[4];
	int bad[4] = {0};
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, open_many, &bad[i]), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	if (saved)
		setenv("HOME", saved, 1);
	else
		unsetenv("HOME");
	free(saved);
	for (int i = 0; i < 4; i++)
		assert_int_equal(bad[i], 0);
	tu_rmrf(home);
	free(home);
}

/* Whether process pid (not a child of this one) is a zombie or gone within ms. */
static bool dead_within(pid_t pid, int ms)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (int waited = 0; waited <= ms; waited += 10) {
		FILE *f = fopen(path, "r");
		if (!f)
			return true;
		char state = '?';
		int got = fscanf(f, "%*d (%*[^)]) %c", &state);
		fclose(f);
		if (got == 1 && (state == 'Z' || state == 'X'))
			return true;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return false;
}

/* A worker started ahead of need (hvm_worker_prestart: a run whose events name files) is taken
 * by the next handle on the same database, which answers as any other; a handle on another
 * database leaves it waiting; one killed while it waited is replaced, not used. */
static void test_prestarted_worker(void **state)
{
	(void)state;
	hv_magic_set_isolation(true, 0);
	char *dir = tu_mkdtemp();
	tu_write(dir, "probe", probe, strlen(probe));
	char *file = tu_path(dir, "probe");
	write_magic(dir, "three");
	char *db = tu_path(dir, "test.magic");

	assert_int_equal(hvm_worker_spare_pid(), -1);
	hvm_worker_prestart();
	pid_t spare = hvm_worker_spare_pid();
	assert_true(spare > 0);
	hvm_worker_prestart(); /* one waits already: no second one */
	assert_int_equal(hvm_worker_spare_pid(), spare);
	/* Another database: its own worker, the spare still waits. */
	expect(db, file, "application/x-hv-three");
	assert_int_equal(hvm_worker_spare_pid(), spare);
	/* The default: takes it. */
	hv_magic *m = NULL;
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
	assert_int_equal(hvm_magic_worker_pid(m), spare);
	assert_int_equal(hvm_worker_spare_pid(), -1);
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	const char *type = NULL;
	assert_int_equal(hv_magic_fd(m, fd, file, &type), HV_OK);
	close(fd);
	assert_string_equal(type, "text/plain");
	hv_magic_close(m);

	/* Killed while it waited, before or after it said it was ready: the handle gets a new
	 * worker, and its answers. */
	for (int after_ready = 0; after_ready < 2; after_ready++) {
		hvm_worker_prestart();
		spare = hvm_worker_spare_pid();
		assert_true(spare > 0);
		if (after_ready && !hvm_worker_spare_ready(5000))
			fail_msg("the spare %d did not say it was ready in 5 s", (int)spare);
		assert_int_equal(kill(spare, SIGKILL), 0);
		if (!dead_within(spare, 5000))
			fail_msg("the killed spare %d still runs after 5 s", (int)spare);
		bool inherited = false;
		char *got = answer(NULL, file, &inherited);
		assert_string_equal(got, "text/plain");
		assert_int_equal(hvm_worker_spare_pid(), -1);
		free(got);
	}

	free(db);
	free(file);
	tu_rmrf(dir);
	free(dir);
}

/* The child of test_no_worker_outlives_harvest, a process of its own (exec'd, so that no
 * spawner of this test's is inherited): a handle's worker in use, never closed, and a spare
 * never taken, their pids on stdout; then exit, as a harvest ends. */
static hv_magic *left_open; /* reachable at exit: left open, not leaked */
/* This test program, as it was started (argv[0]): under valgrind /proc/self/exe is valgrind's
 * own tool, which cannot be started by itself. */
static const char *self_exe = "/proc/self/exe";

static int exit_with_workers(const char *file)
{
	hv_magic_set_isolation(true, 0);
	if (hv_magic_open(&left_open, NULL, 0) != HV_OK)
		return 2;
	hv_magic *m = left_open;
	if (!m)
		return 2;
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	const char *type = NULL;
	if (fd < 0 || hv_magic_fd(m, fd, file, &type) != HV_OK)
		return 3;
	close(fd);
	hvm_worker_prestart();
	printf("%d %d\n", (int)hvm_magic_worker_pid(m), (int)hvm_worker_spare_pid());
	return 0;
}

/* When harvest exits, its workers are gone with it, reaped, not left as orphans for init:
 * the one a handle still used and the spare a run started and never took. */
static void test_no_worker_outlives_harvest(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	tu_write(dir, "probe", probe, strlen(probe));
	char *file = tu_path(dir, "probe");
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		dup2(p[1], 1);
		close(p[0]);
		execl(self_exe, self_exe, "--exit-with-workers", file, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char line[64] = {0};
	size_t got = 0;
	ssize_t n;
	while (got < sizeof(line) - 1 && (n = read(p[0], line + got, sizeof(line) - 1 - got)) > 0)
		got += (size_t)n;
	close(p[0]);
	int status = 0;
	assert_int_equal(waitpid(child, &status, 0), child);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("the child ended with status %#x: %s", status, line);
	int inuse = 0, spare = 0;
	if (sscanf(line, "%d %d", &inuse, &spare) != 2 || inuse <= 0 || spare <= 0)
		fail_msg("the child's pids: '%s'", line);
	assert_int_not_equal(inuse, spare);
	int pids[2] = {inuse, spare};
	for (int i = 0; i < 2; i++)
		if (kill(pids[i], 0) == 0 || errno != ESRCH)
			fail_msg("worker %d is still there after harvest exited", pids[i]);
	free(file);
	tu_rmrf(dir);
	free(dir);
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--exit-with-workers") == 0)
		return exit_with_workers(argv[2]);
	if (argc > 0 && strchr(argv[0], '/'))
		self_exe = argv[0];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_workers_inherit_the_right_database),
		cmocka_unit_test(test_bad_database_still_refused),
		cmocka_unit_test(test_default_path_from_threads),
		cmocka_unit_test(test_prestarted_worker),
		cmocka_unit_test(test_no_worker_outlives_harvest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
