/* How hv_run starts the command: clone(CLONE_VM | CLONE_VFORK) on a stack of its own, sharing
 * the caller's memory until exec, instead of a fork that copies it. What the caller can see of
 * that: its memory is not copied (pages a fork would wipe reach the command intact), its own
 * signal handlers and mask are left as they were, and everything the fork gave (exec failures
 * as 126/127 with a shell's message, /bin/sh for a script without #!, a signal's exit status,
 * background processes) is the same, also while other threads of the caller allocate. */
#include "testutil.h"
#include "harvest/run.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs argv with default options in cwd (NULL: ours); the result (free it). */
static hv_run_result run_argv(const char *const *argv, const char *cwd)
{
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.argv = argv;
	opts.cwd = cwd;
	hv_run_result res;
	assert_int_equal(hv_run(&opts, NULL, NULL, &res), HV_OK);
	return res;
}

static hv_run_result run_sh(const char *script)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	return run_argv(argv, NULL);
}

/* The arguments live in a page a fork would hand the child zeroed (MADV_WIPEONFORK): the
 * command still receives them, because its process shares the caller's memory until exec.
 * (valgrind runs every clone that shares memory without being a thread as a fork: there the
 * page is wiped, and echo gets empty arguments.) */
static void test_arguments_in_memory_a_fork_would_wipe(void **state)
{
	(void)state;
	long page = sysconf(_SC_PAGESIZE);
	char *mem = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
	assert_true(mem != MAP_FAILED);
	if (madvise(mem, (size_t)page, MADV_WIPEONFORK) != 0) {
		munmap(mem, (size_t)page);
		skip(); /* Linux < 4.14 */
	}
	strcpy(mem, "echo");
	strcpy(mem + 16, "kept across the start");
	const char *argv[] = {mem, mem + 16, NULL};
	hv_run_result res = run_argv(argv, NULL);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, UNDER_VALGRIND() ? "\n" : "kept across the start\n");
	hv_run_result_free(&res);
	munmap(mem, (size_t)page);
}

static atomic_int handled;

static void on_usr1(int sig)
{
	(void)sig;
	atomic_fetch_add(&handled, 1);
}

/* The child resets the handlers it inherited and empties its signal mask: in its own copy of
 * them, not in the caller's, whose handler and mask are the same after the run. */
static void test_callers_handlers_and_mask_untouched(void **state)
{
	(void)state;
	struct sigaction sa = {.sa_handler = on_usr1}, old_sa;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &sa, &old_sa), 0);
	sigset_t block, old_mask;
	sigemptyset(&block);
	sigaddset(&block, SIGUSR2);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &block, &old_mask), 0);

	/* ... while the command sees SIGUSR1 at its default and nothing blocked */
	hv_run_result res = run_sh("grep '^SigBlk' /proc/self/status");
	assert_int_equal(res.exit_code, 0);
	assert_non_null(strstr(res.stdout_data, "SigBlk:\t0000000000000000\n"));
	hv_run_result_free(&res);

	struct sigaction now;
	assert_int_equal(sigaction(SIGUSR1, NULL, &now), 0);
	assert_true(now.sa_handler == on_usr1);
	sigset_t mask_now;
	assert_int_equal(pthread_sigmask(SIG_SETMASK, NULL, &mask_now), 0);
	assert_true(sigismember(&mask_now, SIGUSR2));
	assert_false(sigismember(&mask_now, SIGUSR1));
	int before = atomic_load(&handled);
	assert_int_equal(raise(SIGUSR1), 0);
	assert_int_equal(atomic_load(&handled), before + 1);

	assert_int_equal(pthread_sigmask(SIG_SETMASK, &old_mask, NULL), 0);
	assert_int_equal(sigaction(SIGUSR1, &old_sa, NULL), 0);
}

/* Exec failures travel back from the new start as before: 127 not found, 126 found but not
 * executable, each with a shell's line; a script without #! runs with /bin/sh. */
static void test_exec_failures_and_script_fallback(void **state)
{
	(void)state;
	const char *missing[] = {"harvest-spawn-no-such-command", NULL};
	hv_run_result res = run_argv(missing, NULL);
	assert_int_equal(res.exit_code, 127);
	assert_int_equal(res.spawn_errno, ENOENT);
	assert_string_equal(res.message, "harvest: harvest-spawn-no-such-command: command not found");
	assert_string_equal(res.stderr_data,
			    "harvest: harvest-spawn-no-such-command: command not found\n");
	hv_run_result_free(&res);

	char *dir = tu_mkdtemp();
	tu_write(dir, "plain", "echo from sh \"$1\"\n", 18);
	tu_write(dir, "noexec", "echo no\n", 8);
	char *plain = tu_path(dir, "plain"), *noexec = tu_path(dir, "noexec");
	assert_int_equal(chmod(plain, 0755), 0);
	assert_int_equal(chmod(noexec, 0644), 0);

	const char *script[] = {plain, "arg", NULL};
	res = run_argv(script, NULL);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, "from sh arg\n");
	hv_run_result_free(&res);

	const char *denied[] = {noexec, NULL};
	res = run_argv(denied, NULL);
	assert_int_equal(res.exit_code, 126);
	assert_int_equal(res.spawn_errno, EACCES);
	char want[4200];
	snprintf(want, sizeof(want), "harvest: %s: Permission denied", noexec);
	assert_string_equal(res.message, want);
	hv_run_result_free(&res);

	/* a directory given as the command: found, not executable */
	const char *isdir[] = {dir, NULL};
	res = run_argv(isdir, NULL);
	assert_int_equal(res.exit_code, 126);
	hv_run_result_free(&res);

	/* the working directory is entered by the child before exec: a relative command */
	const char *rel[] = {"./plain", "here", NULL};
	res = run_argv(rel, dir);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, "from sh here\n");
	hv_run_result_free(&res);

	free(plain);
	free(noexec);
	tu_rmrf(dir);
	free(dir);
}

/* A command killed by a signal: 128 + N, the signal in term_signal. */
static void test_killed_by_signal(void **state)
{
	(void)state;
	hv_run_result res = run_sh("echo up; kill -TERM $$; echo never");
	assert_int_equal(res.exit_code, 128 + SIGTERM);
	assert_int_equal(res.term_signal, SIGTERM);
	assert_string_equal(res.stdout_data, "up\n");
	hv_run_result_free(&res);

	const char *self_kill[] = {"sh", "-c", "kill -KILL $$", NULL};
	res = run_argv(self_kill, NULL);
	assert_int_equal(res.exit_code, 128 + SIGKILL);
	assert_int_equal(res.term_signal, SIGKILL);
	hv_run_result_free(&res);
}

/* A command that forks a background process which outlives it: the run ends when the leader
 * has exited and the pipes are closed; the background process ran as the command's child. */
static void test_background_process(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *mark = tu_path(dir, "mark");
	char script[4400];
	snprintf(script, sizeof(script),
		 "(sleep 0.2; echo late > '%s') >/dev/null 2>&1 & echo started $!", mark);
	hv_run_result res = run_sh(script);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(strncmp(res.stdout_data, "started ", 8), 0);
	pid_t bg = (pid_t)atoi(res.stdout_data + 8);
	assert_true(bg > 0);
	hv_run_result_free(&res);
	/* it was left running (not in the run's group's way: no end_descendants) and finishes */
	if (!tu_wait_for_file(mark, 3000))
		fail_msg("the background child did not finish in 3 s: no %s", mark);
	for (int i = 0; i < 300; i++) {
		if (waitpid(bg, NULL, WNOHANG) == bg || (kill(bg, 0) != 0 && errno == ESRCH))
			break;
		usleep(10000);
	}
	free(mark);
	tu_rmrf(dir);
	free(dir);
}

static atomic_bool stop_churn;

/* Allocates and frees while the runs start: the child shares this memory, so it must take no
 * lock of the allocator's, nor write anything the caller's threads use. */
static void *churn(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_churn)) {
		void *v[64];
		for (int i = 0; i < 64; i++) {
			v[i] = tu_xmalloc((size_t)(16 + i * 97)); /* no cmocka off the main thread */
			memset(v[i], i, 16);
		}
		for (int i = 0; i < 64; i++)
			free(v[i]);
	}
	return NULL;
}

static void test_starts_while_other_threads_allocate(void **state)
{
	(void)state;
	pthread_t t[2];
	atomic_store(&stop_churn, false);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, churn, NULL), 0);
	for (int i = 0; i < 100; i++) {
		const char *ok[] = {"echo", "ok", NULL};
		hv_run_result res = run_argv(ok, NULL);
		assert_int_equal(res.exit_code, 0);
		assert_string_equal(res.stdout_data, "ok\n");
		hv_run_result_free(&res);
		const char *missing[] = {"harvest-spawn-missing", NULL};
		res = run_argv(missing, NULL);
		assert_int_equal(res.exit_code, 127);
		hv_run_result_free(&res);
	}
	atomic_store(&stop_churn, true);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_arguments_in_memory_a_fork_would_wipe),
		cmocka_unit_test(test_callers_handlers_and_mask_untouched),
		cmocka_unit_test(test_exec_failures_and_script_fallback),
		cmocka_unit_test(test_killed_by_signal),
		cmocka_unit_test(test_background_process),
		cmocka_unit_test(test_starts_while_other_threads_allocate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
