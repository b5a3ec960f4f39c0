/* The process runner: exit codes, timeouts and what is left behind, live streaming, UTF-8-safe
 * chunks, stdin, environment, working directory, descriptors and signals the child inherits.
 *
 * The test process makes itself a child subreaper, so the background processes the commands
 * start are reparented to it when their shell exits: whether hv_run() killed them can then be
 * read exactly with waitpid(), instead of guessing from kill(pid, 0) on a zombie. */
#include "testutil.h"
#include "harvest/run.h"
#include "internal.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------------------- */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct chunk {
	hv_stream which;
	char *data;
	size_t len;
	int64_t at_ms;
} chunk;

typedef struct collector {
	chunk *v;
	size_t n, cap;
	hv_buf out, err;
	hv_status fail_with; /* returned from the first chunk on, when not HV_OK */
} collector;

static hv_status collect(void *ctx, hv_stream which, const char *data, size_t len)
{
	collector *c = ctx;
	assert_true(len > 0);
	assert_true(which == HV_STREAM_STDOUT || which == HV_STREAM_STDERR);
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 16;
		c->v = realloc(c->v, c->cap * sizeof(*c->v));
		assert_non_null(c->v);
	}
	chunk *k = &c->v[c->n++];
	k->which = which;
	k->len = len;
	k->data = malloc(len);
	assert_non_null(k->data);
	memcpy(k->data, data, len);
	k->at_ms = now_ms();
	assert_int_equal(hv_buf_append(which == HV_STREAM_STDOUT ? &c->out : &c->err, data, len),
			 HV_OK);
	return c->fail_with;
}

static void collector_free(collector *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i].data);
	free(c->v);
	hv_buf_free(&c->out);
	hv_buf_free(&c->err);
	memset(c, 0, sizeof(*c));
}

/* Runs argv with opts (defaults when NULL) and checks the result's invariants. */
static hv_status run_with(const char *const *argv, hv_run_opts *opts_in, collector *c,
			  hv_run_result *res)
{
	hv_run_opts opts;
	if (opts_in)
		opts = *opts_in;
	else
		hv_run_opts_init(&opts);
	opts.argv = argv;
	hv_status rc = hv_run(&opts, collect, c, res);
	if (rc == HV_OK) {
		assert_non_null(res->stdout_data);
		assert_non_null(res->stderr_data);
		assert_int_equal(res->stdout_data[res->stdout_len], '\0');
		assert_int_equal(res->stderr_data[res->stderr_len], '\0');
		assert_true(res->started_at_ns > 0);
		assert_true(res->ended_at_ns >= res->started_at_ns);
		/* without truncation, the kept copy is exactly what the callback saw */
		if (!res->stdout_truncated) {
			assert_int_equal(res->stdout_len, c->out.len);
			assert_memory_equal(res->stdout_data, c->out.data ? c->out.data : "",
					    res->stdout_len);
		}
		if (!res->stderr_truncated) {
			assert_int_equal(res->stderr_len, c->err.len);
			assert_memory_equal(res->stderr_data, c->err.data ? c->err.data : "",
					    res->stderr_len);
		}
		assert_int_equal(res->stdout_total, c->out.len);
		assert_int_equal(res->stderr_total, c->err.len);
	}
	return rc;
}

static hv_status run_sh(const char *script, hv_run_opts *opts, collector *c, hv_run_result *res)
{
	const char *argv[5];
	assert_int_equal(hv_run_argv_shell(argv, script), HV_OK);
	return run_with(argv, opts, c, res);
}

/* Waits (at most 3 s) for an orphan reparented to us; its wait status, or -1 if still alive.
 * A background child the shell itself reaped (it dies while the shell waits for its
 * foreground job) is not ours to wait for: then the status is that of a SIGTERM, once
 * kill(pid, 0) confirms the process is gone. */
static int reap_orphan(pid_t pid)
{
	for (int i = 0; i < 300; i++) {
		int st;
		pid_t got = waitpid(pid, &st, WNOHANG);
		if (got == pid)
			return st;
		if (got < 0 && errno == ECHILD && kill(pid, 0) != 0 && errno == ESRCH)
			return SIGTERM; /* a wait status meaning "killed by SIGTERM" */
		assert_true(got == 0);
		usleep(10000);
	}
	return -1;
}

static pid_t parse_pid(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);
	assert_true(end != s);
	assert_true(v > 1);
	return (pid_t)v;
}

/* ---- exit codes ------------------------------------------------------------------------- */

static void test_exit_zero(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	const char *argv[] = {"true", NULL};
	assert_int_equal(run_with(argv, NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(res.term_signal, 0);
	assert_false(res.timed_out);
	assert_false(res.lingered);
	assert_int_equal(res.spawn_errno, 0);
	assert_null(res.message);
	assert_true(res.pid > 0);
	assert_int_equal(res.stdout_len, 0);
	assert_int_equal(c.n, 0);
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_exit_seven(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("echo out; echo err >&2; exit 7", NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 7);
	assert_string_equal(res.stdout_data, "out\n");
	assert_string_equal(res.stderr_data, "err\n");
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_not_found_is_127(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	const char *argv[] = {"harvest-no-such-command-xyz", "arg", NULL};
	assert_int_equal(run_with(argv, NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 127);
	assert_int_equal(res.spawn_errno, ENOENT);
	assert_non_null(res.message);
	assert_string_equal(res.message, "harvest: harvest-no-such-command-xyz: command not found");
	/* ... and the same line on the stream, as a shell would have written it */
	assert_string_equal(res.stderr_data,
			    "harvest: harvest-no-such-command-xyz: command not found\n");
	assert_int_equal(c.n, 1);
	assert_int_equal(c.v[0].which, HV_STREAM_STDERR);
	hv_run_result_free(&res);
	collector_free(&c);

	/* a path that does not exist: 127 too, with the system's reason */
	const char *argv2[] = {"/nonexistent-dir/cmd", NULL};
	assert_int_equal(run_with(argv2, NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 127);
	assert_string_equal(res.message, "harvest: /nonexistent-dir/cmd: No such file or directory");
	hv_run_result_free(&res);
	collector_free(&c);

	/* an empty command name is not found either (as execvp("") says) */
	const char *argv3[] = {"", NULL};
	assert_int_equal(run_with(argv3, NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 127);
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_not_executable_is_126(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	tu_write(dir, "script", "echo hi\n", 8);
	char *script = tu_path(dir, "script");
	assert_int_equal(chmod(script, 0644), 0); /* no x bit: EACCES even for root */
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.cwd = dir;
	collector c = {0};
	hv_run_result res;
	const char *argv[] = {"./script", NULL};
	assert_int_equal(run_with(argv, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 126);
	assert_int_equal(res.spawn_errno, EACCES);
	assert_string_equal(res.message, "harvest: ./script: Permission denied");
	hv_run_result_free(&res);
	collector_free(&c);

	/* a directory cannot be executed either */
	const char *argv2[] = {dir, NULL};
	assert_int_equal(run_with(argv2, NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 126);
	hv_run_result_free(&res);
	collector_free(&c);

	/* a command found only as a non-executable file in PATH: 126, as execvp reports EACCES */
	char path_env[PATH_MAX + 8];
	snprintf(path_env, sizeof(path_env), "PATH=%s", dir);
	const char *env[] = {path_env};
	opts.env = env;
	opts.n_env = 1;
	const char *argv3[] = {"script", NULL};
	assert_int_equal(run_with(argv3, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 126);
	hv_run_result_free(&res);
	collector_free(&c);

	/* a non-executable file earlier in PATH does not hide an executable one later on, as
	 * with execvp; and the remembered EACCES is reported when nothing else is found */
	tu_write(dir, "true", "exit 9\n", 7);
	tu_write(dir, "hv-no-such-cmd-here", "exit 9\n", 7);
	snprintf(path_env, sizeof(path_env), "PATH=%s:/usr/bin:/bin", dir);
	const char *argv_true[] = {"true", NULL};
	assert_int_equal(run_with(argv_true, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	hv_run_result_free(&res);
	collector_free(&c);
	const char *argv_none[] = {"hv-no-such-cmd-here", NULL};
	assert_int_equal(run_with(argv_none, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 126);
	assert_int_equal(res.spawn_errno, EACCES);
	hv_run_result_free(&res);
	collector_free(&c);
	snprintf(path_env, sizeof(path_env), "PATH=%s", dir);

	/* once executable (and without #!), it runs under /bin/sh as execvp would run it */
	assert_int_equal(chmod(script, 0755), 0);
	assert_int_equal(run_with(argv3, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, "hi\n");
	hv_run_result_free(&res);
	collector_free(&c);

	free(script);
	tu_rmrf(dir);
	free(dir);
}

static void test_killed_by_signal_is_128_plus_n(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("echo before; kill -KILL $$; echo after", NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 137);
	assert_int_equal(res.term_signal, SIGKILL);
	assert_false(res.timed_out);
	assert_string_equal(res.stdout_data, "before\n");
	hv_run_result_free(&res);
	collector_free(&c);
}

/* ---- timeouts and what is left behind ---------------------------------------------------- */

static void test_timeout_kills_the_group(void **state)
{
	(void)state;
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	/* Long enough for a loaded machine to start the shell and print the pid. */
	opts.timeout_ms = 2500;
	collector c = {0};
	hv_run_result res;
	int64_t t0 = now_ms();
	assert_int_equal(run_sh("sleep 100 & echo $!; sleep 100", &opts, &c, &res), HV_OK);
	int64_t took = now_ms() - t0;
	assert_int_equal(res.exit_code, 124);
	assert_true(res.timed_out);
	assert_true(res.duration_ms >= 2450);
	/* SIGTERM was enough: no wait for the SIGKILL 2 s later */
	assert_true(took < 2500 + HV_RUN_KILL_GRACE_MS - 200);
	/* partial output kept */
	pid_t grandchild = parse_pid(res.stdout_data);
	int st = reap_orphan(grandchild);
	assert_true(st != -1);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGTERM);
	assert_int_equal(kill(grandchild, 0), -1);
	assert_int_equal(errno, ESRCH);
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_timeout_escalates_to_sigkill(void **state)
{
	(void)state;
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	/* Long enough for a loaded machine to start the shell and set its trap. */
	opts.timeout_ms = 1500;
	collector c = {0};
	hv_run_result res;
	/* SIGTERM ignored by the shell and (inherited) by the sleep */
	assert_int_equal(run_sh("trap '' TERM; echo ready; sleep 100", &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 124);
	assert_true(res.timed_out);
	assert_true(res.duration_ms >= 1500 + HV_RUN_KILL_GRACE_MS - 100);
	assert_true(res.duration_ms < 1500 + HV_RUN_KILL_GRACE_MS + 1500);
	assert_string_equal(res.stdout_data, "ready\n");
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_timeout_reaches_a_stopped_child(void **state)
{
	(void)state;
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.timeout_ms = 300;
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("kill -STOP $$; echo resumed", &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 124);
	/* SIGCONT let the SIGTERM in: no wait for the SIGKILL */
	assert_true(res.duration_ms < 300 + HV_RUN_KILL_GRACE_MS - 100);
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_pipe_holding_background_is_ended_after_linger(void **state)
{
	(void)state;
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.linger_ms = 300;
	opts.timeout_ms = 20000; /* a hang shows as a failure */
	collector c = {0};
	hv_run_result res;
	int64_t t0 = now_ms();
	assert_int_equal(run_sh("sleep 100 & echo $!; exit 5", &opts, &c, &res), HV_OK);
	int64_t took = now_ms() - t0;
	assert_int_equal(res.exit_code, 5); /* the command's own status is kept */
	assert_false(res.timed_out);
	assert_true(res.lingered);
	assert_true(took >= 250);
	assert_true(took < 10000); /* not the sleep's 100 s (SIGTERM sufficed: below) */
	pid_t grandchild = parse_pid(res.stdout_data);
	int st = reap_orphan(grandchild);
	assert_true(st != -1);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGTERM);
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_linger_keeps_late_output(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	/* a background writer that finishes within the (default 2 s) linger is read to the end */
	assert_int_equal(run_sh("(sleep 0.1; echo late) & echo early", NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_false(res.lingered);
	assert_string_equal(res.stdout_data, "early\nlate\n");
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_detached_background_survives(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	int64_t t0 = now_ms();
	assert_int_equal(run_sh("sleep 100 >/dev/null 2>&1 </dev/null & echo $!", NULL, &c, &res),
			 HV_OK);
	/* no linger (2 s): the pipes closed with the shell */
	assert_true(now_ms() - t0 < 1900);
	assert_int_equal(res.exit_code, 0);
	assert_false(res.lingered);
	pid_t bg = parse_pid(res.stdout_data);
	assert_int_equal(kill(bg, 0), 0);
	int st;
	assert_int_equal(waitpid(bg, &st, WNOHANG), 0); /* still running */
	kill(bg, SIGKILL);
	st = reap_orphan(bg);
	assert_true(st != -1 && WIFSIGNALED(st));
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_escaped_pipe_holder_does_not_hang(void **state)
{
	(void)state;
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.linger_ms = 200;
	opts.timeout_ms = 20000;
	collector c = {0};
	hv_run_result res;
	int64_t t0 = now_ms();
	/* setsid moves the sleep out of the process group, still holding the pipes */
	assert_int_equal(run_sh("setsid sleep 100 & echo $!", &opts, &c, &res), HV_OK);
	int64_t took = now_ms() - t0;
	assert_int_equal(res.exit_code, 0);
	assert_true(res.lingered);
	assert_true(took < 10000); /* the pipes given up on, not the sleep's 100 s waited for */
	pid_t escaped = parse_pid(res.stdout_data);
	assert_int_equal(kill(escaped, 0), 0);
	kill(escaped, SIGKILL);
	int st = reap_orphan(escaped);
	assert_true(st != -1 && WIFSIGNALED(st));
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_closed_pipes_still_wait_for_exit(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("echo bye; exec >&- 2>&-; sleep 0.5; exit 3", NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 3);
	assert_true(res.duration_ms >= 450);
	assert_string_equal(res.stdout_data, "bye\n");
	hv_run_result_free(&res);
	collector_free(&c);
}

/* ---- streaming ------------------------------------------------------------------------- */

static void test_chunk_arrives_while_running(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("echo hello; sleep 3; echo bye", NULL, &c, &res), HV_OK);
	int64_t end = now_ms();
	assert_int_equal(res.exit_code, 0);
	assert_true(c.n >= 2);
	assert_int_equal(c.v[0].which, HV_STREAM_STDOUT);
	assert_int_equal(c.v[0].len, 6);
	assert_memory_equal(c.v[0].data, "hello\n", 6);
	/* seen about 3 s before the command ended, not at exit */
	assert_true(end - c.v[0].at_ms >= 1000);
	assert_true(c.v[c.n - 1].at_ms - c.v[0].at_ms >= 1000);
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_utf8_character_split_across_writes(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("printf 'a\\303'; sleep 0.3; printf '\\251b'", NULL, &c, &res),
			 HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, "a\303\251b");
	/* "a" can go at once; the é only whole */
	int whole = 0;
	for (size_t i = 0; i < c.n; i++) {
		assert_true(c.v[i].data[c.v[i].len - 1] != '\303');
		assert_true(c.v[i].data[0] != '\251');
		if (c.v[i].len >= 2 && memmem(c.v[i].data, c.v[i].len, "\303\251", 2))
			whole++;
	}
	assert_int_equal(whole, 1);
	assert_true(c.n >= 2); /* and "a" did not wait for it */
	assert_memory_equal(c.v[0].data, "a", 1);
	assert_int_equal(c.v[0].len, 1);
	hv_run_result_free(&res);
	collector_free(&c);

	/* a cut prefix at the very end is flushed, not lost */
	assert_int_equal(run_sh("printf 'x\\360\\237'", NULL, &c, &res), HV_OK);
	assert_int_equal(res.stdout_len, 3);
	assert_memory_equal(res.stdout_data, "x\360\237", 3);
	hv_run_result_free(&res);
	collector_free(&c);
}

/* ---- the UTF-8 splitter, against a reference written from the definition --------------- */

/* The length of the valid strict UTF-8 sequence at s, or 0: decode, then reject overlong
 * forms, surrogates and values above U+10FFFF by value. */
static size_t ref_seq(const unsigned char *s, size_t n)
{
	static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
	if (n == 0)
		return 0;
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	size_t len;
	uint32_t cp;
	if ((c & 0xE0) == 0xC0)
		len = 2, cp = c & 0x1F;
	else if ((c & 0xF0) == 0xE0)
		len = 3, cp = c & 0x0F;
	else if ((c & 0xF8) == 0xF0)
		len = 4, cp = c & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

/* Whether some bytes appended to tail[0..k) make a valid sequence of more than k bytes. The
 * valid ranges are intervals with these bounds, so trying them covers every case. */
static bool ref_completable(const unsigned char *tail, size_t k)
{
	static const unsigned char probe[] = {0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF};
	const size_t np = sizeof(probe);
	for (size_t total = k + 1; total <= 4; total++) {
		size_t extra = total - k, combos = 1;
		for (size_t i = 0; i < extra; i++)
			combos *= np;
		for (size_t m = 0; m < combos; m++) {
			unsigned char b[4];
			memcpy(b, tail, k);
			size_t x = m;
			for (size_t i = 0; i < extra; i++, x /= np)
				b[k + i] = probe[x % np];
			if (ref_seq(b, total) == total)
				return true;
		}
	}
	return false;
}

/* What hv_utf8_complete_prefix must answer: hold back the last k bytes (k <= 3) exactly when
 * they are the start of a valid sequence that more bytes could complete. */
static size_t ref_complete_prefix(const unsigned char *s, size_t len)
{
	for (size_t k = 1; k <= 3 && k <= len; k++)
		if (ref_completable(s + len - k, k))
			return len - k;
	return len;
}

static void test_splitter_cases(void **state)
{
	(void)state;
	struct {
		const char *s;
		size_t len, want;
	} cases[] = {
		{"", 0, 0},
		{"abc", 3, 3},
		{"a\303", 2, 1},              /* é cut after its lead */
		{"a\303\251", 3, 3},          /* é whole */
		{"\342\202", 2, 0},           /* € cut */
		{"\342\202\254", 3, 3},       /* € whole */
		{"x\360\237\230", 4, 1},      /* 😀 cut after 3 of 4 */
		{"\360\237\230\200", 4, 4},   /* 😀 whole */
		{"\300", 1, 1},               /* never valid: not held */
		{"\340\200", 2, 2},           /* overlong E0 80: not held */
		{"\355\240", 2, 2},           /* surrogate ED A0: not held */
		{"\355\237", 2, 0},           /* ED 9F: a valid prefix (U+D7C0..) */
		{"\364\220", 2, 2},           /* above U+10FFFF: not held */
		{"\364\217\277", 3, 0},       /* F4 8F BF: valid prefix of U+10FFFF */
		{"\365", 1, 1},               /* F5: never valid */
		{"\200\200\200", 3, 3},       /* stray continuations */
		{"\303\251\251", 3, 3},       /* é then a stray continuation */
		{"\303a", 2, 2},              /* a lead the next byte already broke */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t got = hv_utf8_complete_prefix(cases[i].s, cases[i].len);
		if (got != cases[i].want)
			fail_msg("case %zu: got %zu, want %zu", i, got, cases[i].want);
	}
}

static void test_splitter_exhaustive_short(void **state)
{
	(void)state;
	unsigned char b[3];
	for (unsigned x = 0; x < 256; x++) {
		b[0] = (unsigned char)x;
		assert_int_equal(hv_utf8_complete_prefix((char *)b, 1), ref_complete_prefix(b, 1));
		assert_int_equal(hv_utf8_sequence_length((char *)b, 1), ref_seq(b, 1));
		for (unsigned y = 0; y < 256; y++) {
			b[1] = (unsigned char)y;
			assert_int_equal(hv_utf8_complete_prefix((char *)b, 2),
					 ref_complete_prefix(b, 2));
			assert_int_equal(hv_utf8_sequence_length((char *)b, 2), ref_seq(b, 2));
			static const unsigned char thirds[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90,
							       0x9F, 0xA0, 0xBF, 0xC0, 0xC3, 0xE0,
							       0xED, 0xF0, 0xF4, 0xFF};
			for (size_t t = 0; t < sizeof(thirds); t++) {
				b[2] = thirds[t];
				if (hv_utf8_complete_prefix((char *)b, 3) != ref_complete_prefix(b, 3))
					fail_msg("%02x %02x %02x", x, y, thirds[t]);
				assert_int_equal(hv_utf8_sequence_length((char *)b, 3),
						 ref_seq(b, 3));
			}
		}
	}
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static size_t encode(uint32_t cp, unsigned char *o)
{
	if (cp < 0x80)
		return o[0] = (unsigned char)cp, 1;
	if (cp < 0x800)
		return o[0] = (unsigned char)(0xC0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3F)), 2;
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xE0 | cp >> 12);
		o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | cp >> 18);
	o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Random text: ASCII, valid characters of every length, surrogates and out-of-range values
 * encoded anyway, cut sequences and random bytes. */
static size_t random_text(unsigned char *o, size_t cap)
{
	size_t n = 0;
	while (n + 4 <= cap && rnd() % 32 != 0) {
		unsigned char e[4];
		size_t k;
		switch (rnd() % 7) {
		case 0: k = encode((uint32_t)(rnd() % 0x80), e); break;
		case 1: k = encode((uint32_t)(0x80 + rnd() % 0x780), e); break;
		case 2: k = encode((uint32_t)(0x800 + rnd() % 0xF800), e); break;
		case 3: k = encode((uint32_t)(0x10000 + rnd() % 0x100000), e); break;
		case 4: /* surrogates or beyond U+10FFFF, encoded the naive way */
			k = encode(rnd() % 2 ? (uint32_t)(0xD800 + rnd() % 0x800)
					     : (uint32_t)(0x110000 + rnd() % 0x1000), e);
			if (k == 4 && e[0] > 0xF7)
				e[0] = 0xF4;
			break;
		case 5: /* a valid character cut short */
			k = encode((uint32_t)(0x800 + rnd() % 0x100000), e);
			k = 1 + rnd() % (k - 1);
			break;
		default: k = 1 + rnd() % 3;
			for (size_t i = 0; i < k; i++)
				e[i] = (unsigned char)rnd();
		}
		memcpy(o + n, e, k);
		n += k;
	}
	return n;
}

static void test_splitter_random_reassembly(void **state)
{
	(void)state;
	unsigned char text[512], buf[512 + 4], out[512];
	for (int iter = 0; iter < 30000; iter++) {
		size_t len = random_text(text, sizeof(text));
		size_t pos = 0, out_len = 0, carry = 0;
		unsigned char tail[4];
		while (pos < len) {
			size_t piece = 1 + rnd() % (rnd() % 4 == 0 ? 3 : 40);
			if (piece > len - pos)
				piece = len - pos;
			/* the runner's way: carried tail + new read */
			memcpy(buf, tail, carry);
			memcpy(buf + carry, text + pos, piece);
			pos += piece;
			size_t have = carry + piece;
			size_t emit = hv_utf8_complete_prefix((char *)buf, have);
			assert_true(emit <= have);
			assert_int_equal(emit, ref_complete_prefix(buf, have));
			carry = have - emit;
			assert_true(carry <= 3);
			/* held back only what can still become a character */
			if (carry)
				assert_true(ref_completable(buf + emit, carry));
			memcpy(tail, buf + emit, carry);
			memcpy(out + out_len, buf, emit);
			out_len += emit;
			/* the chunk just emitted does not end inside a sequence the stream completes */
			for (size_t k = 1; k <= 3 && k <= out_len; k++)
				if (ref_seq(text + out_len - k, len - (out_len - k)) > k)
					fail_msg("iter %d: chunk ends %zu bytes into a character", iter, k);
		}
		memcpy(out + out_len, tail, carry); /* EOF flush */
		out_len += carry;
		assert_int_equal(out_len, len);
		assert_memory_equal(out, text, len);
	}
}

/* ---- stdin ----------------------------------------------------------------------------- */

static void test_stdin_is_dev_null(void **state)
{
	(void)state;
	collector c = {0};
	hv_run_result res;
	const char *argv[] = {"cat", NULL};
	assert_int_equal(run_with(argv, NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(res.stdout_len, 0);
	assert_true(res.duration_ms < 2000);
	hv_run_result_free(&res);
	collector_free(&c);

	const char *argv2[] = {"readlink", "/proc/self/fd/0", NULL};
	assert_int_equal(run_with(argv2, NULL, &c, &res), HV_OK);
	assert_string_equal(res.stdout_data, "/dev/null\n");
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_stdin_data_runs_language(void **state)
{
	(void)state;
	const char *argv[2];
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	collector c = {0};
	hv_run_result res;

	const char *sh_code = "x=6\necho $((x * 7))\n";
	opts.stdin_data = sh_code;
	opts.stdin_len = strlen(sh_code);
	assert_int_equal(hv_run_argv_language(argv, "sh"), HV_OK);
	assert_string_equal(argv[0], "sh");
	assert_null(argv[1]);
	assert_int_equal(run_with(argv, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, "42\n");
	hv_run_result_free(&res);
	collector_free(&c);

	const char *py_code = "import sys\nprint(sum(range(10)))\nsys.exit(3)\n";
	opts.stdin_data = py_code;
	opts.stdin_len = strlen(py_code);
	assert_int_equal(hv_run_argv_language(argv, "python3"), HV_OK);
	assert_int_equal(run_with(argv, &opts, &c, &res), HV_OK);
	if (res.exit_code == 127) {
		print_message("python3 not installed: only sh was checked\n");
	} else {
		assert_int_equal(res.exit_code, 3);
		assert_string_equal(res.stdout_data, "45\n");
	}
	hv_run_result_free(&res);
	collector_free(&c);

	/* empty stdin data: EOF at once */
	opts.stdin_data = "";
	opts.stdin_len = 0;
	const char *cat[] = {"cat", NULL};
	assert_int_equal(run_with(cat, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(res.stdout_len, 0);
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_stdin_not_read_does_not_deadlock(void **state)
{
	(void)state;
	size_t big = 8u << 20;
	char *data = malloc(big);
	assert_non_null(data);
	memset(data, 'z', big);
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.stdin_data = data;
	opts.stdin_len = big;
	opts.timeout_ms = 20000; /* a deadlock shows as a timeout, not a hung test */
	collector c = {0};
	hv_run_result res;

	/* never reads: the pipe fills, the child exits, the rest is dropped (EPIPE, no SIGPIPE) */
	assert_int_equal(run_sh("sleep 0.2; exit 4", &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 4);
	assert_false(res.timed_out);
	hv_run_result_free(&res);
	collector_free(&c);

	/* reads a little, writes while being fed */
	const char *head[] = {"head", "-c", "10", NULL};
	assert_int_equal(run_with(head, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, "zzzzzzzzzz");
	hv_run_result_free(&res);
	collector_free(&c);

	/* reads everything while its output is read: both directions flow together */
	const char *cat[] = {"cat", NULL};
	assert_int_equal(run_with(cat, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(res.stdout_total, big);
	assert_int_equal(res.stdout_len, big);
	assert_memory_equal(res.stdout_data, data, big);
	hv_run_result_free(&res);
	collector_free(&c);
	free(data);
}

/* ---- options --------------------------------------------------------------------------- */

static void test_invalid_env_and_language_refused(void **state)
{
	(void)state;
	const char *bad_env[] = {"1FOO=x", "FOO", "FO-O=x", "=x", "FOO BAR=x", "", "É=x"};
	for (size_t i = 0; i < sizeof(bad_env) / sizeof(bad_env[0]); i++) {
		assert_int_equal(hv_run_check_env(bad_env[i]), HV_EUSAGE);
		hv_run_opts opts;
		hv_run_opts_init(&opts);
		const char *env[] = {bad_env[i]};
		opts.env = env;
		opts.n_env = 1;
		collector c = {0};
		hv_run_result res;
		const char *argv[] = {"true", NULL};
		assert_int_equal(run_with(argv, &opts, &c, &res), HV_EUSAGE);
		assert_int_equal(res.pid, 0); /* nothing was started */
		assert_int_equal(c.n, 0);
		hv_run_result_free(&res);
	}
	const char *good_env[] = {"FOO=", "_x9=a=b", "PATH=/bin", "a=\n"};
	for (size_t i = 0; i < sizeof(good_env) / sizeof(good_env[0]); i++)
		assert_int_equal(hv_run_check_env(good_env[i]), HV_OK);

	const char *bad_lang[] = {"", "py thon", "../python", "/usr/bin/python3", "a;b", "$(x)",
				  "sh\n", "python3 -c"};
	const char *argv[2];
	for (size_t i = 0; i < sizeof(bad_lang) / sizeof(bad_lang[0]); i++) {
		assert_int_equal(hv_run_check_language(bad_lang[i]), HV_EUSAGE);
		assert_int_equal(hv_run_argv_language(argv, bad_lang[i]), HV_EUSAGE);
		assert_true(strlen(hv_error_last()) > 0);
	}
	const char *good_lang[] = {"python3", "python3.11", "c++", "node-20_x", "R", ".x"};
	for (size_t i = 0; i < sizeof(good_lang) / sizeof(good_lang[0]); i++)
		assert_int_equal(hv_run_check_language(good_lang[i]), HV_OK);

	hv_run_opts opts;
	hv_run_opts_init(&opts);
	hv_run_result res;
	assert_int_equal(hv_run(&opts, NULL, NULL, &res), HV_EUSAGE); /* no argv */
	hv_run_result_free(&res);
}

static void test_output_truncated_but_streamed_whole(void **state)
{
	(void)state;
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.max_output_bytes = 1000;
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("head -c 300000 /dev/zero | tr '\\0' a; echo small >&2", &opts, &c,
				&res),
			 HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_true(res.stdout_truncated);
	assert_int_equal(res.stdout_len, 1000);
	assert_int_equal(res.stdout_total, 300000);
	assert_int_equal(c.out.len, 300000); /* the stream itself is complete */
	for (size_t i = 0; i < c.out.len; i++)
		if (c.out.data[i] != 'a')
			fail_msg("byte %zu", i);
	assert_memory_equal(res.stdout_data, c.out.data, 1000);
	assert_false(res.stderr_truncated);
	assert_string_equal(res.stderr_data, "small\n");
	hv_run_result_free(&res);
	collector_free(&c);

	/* the limit does not cut a character: 5 bytes of "ééé" keep "éé" */
	opts.max_output_bytes = 5;
	assert_int_equal(run_sh("printf '\\303\\251\\303\\251\\303\\251'", &opts, &c, &res), HV_OK);
	assert_true(res.stdout_truncated);
	assert_int_equal(res.stdout_len, 4);
	assert_memory_equal(res.stdout_data, "\303\251\303\251", 4);
	assert_int_equal(c.out.len, 6);
	hv_run_result_free(&res);
	collector_free(&c);

	/* exactly at the limit is not truncated */
	opts.max_output_bytes = 6;
	assert_int_equal(run_sh("printf '\\303\\251\\303\\251\\303\\251'", &opts, &c, &res), HV_OK);
	assert_false(res.stdout_truncated);
	assert_int_equal(res.stdout_len, 6);
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_env_reaches_child(void **state)
{
	(void)state;
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	setenv("HV_RUN_TEST_INHERITED", "inherited", 1);
	setenv("HV_RUN_TEST_OVERRIDDEN", "old", 1);
	const char *env[] = {"HV_FOO=bar baz", "HV_RUN_TEST_OVERRIDDEN=first",
			     "HV_RUN_TEST_OVERRIDDEN=new", "HV_EQ=a=b"};
	opts.env = env;
	opts.n_env = 4;
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("printf '%s|%s|%s|%s' \"$HV_FOO\" \"$HV_RUN_TEST_INHERITED\" "
				"\"$HV_RUN_TEST_OVERRIDDEN\" \"$HV_EQ\"; "
				"env | grep -c '^HV_RUN_TEST_OVERRIDDEN=' >&2",
				&opts, &c, &res),
			 HV_OK);
	assert_string_equal(res.stdout_data, "bar baz|inherited|new|a=b");
	assert_string_equal(res.stderr_data, "1\n"); /* replaced, not duplicated */
	/* the caller's environment is untouched */
	assert_string_equal(getenv("HV_RUN_TEST_OVERRIDDEN"), "old");
	assert_null(getenv("HV_FOO"));
	unsetenv("HV_RUN_TEST_INHERITED");
	unsetenv("HV_RUN_TEST_OVERRIDDEN");
	hv_run_result_free(&res);
	collector_free(&c);
}

static void test_cwd_honoured(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *real = realpath(dir, NULL);
	assert_non_null(real);
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.cwd = dir;
	collector c = {0};
	hv_run_result res;
	const char *argv[] = {"pwd", "-P", NULL};
	assert_int_equal(run_with(argv, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	char want[PATH_MAX + 2];
	snprintf(want, sizeof(want), "%s\n", real);
	assert_string_equal(res.stdout_data, want);
	hv_run_result_free(&res);
	collector_free(&c);

	/* a relative command name with '/' is found relative to cwd */
	const char *hello = "#!/bin/sh\necho \"hello from $0\"\n";
	tu_write(dir, "hello.sh", hello, strlen(hello));
	char *script = tu_path(dir, "hello.sh");
	assert_int_equal(chmod(script, 0755), 0);
	const char *argv2[] = {"./hello.sh", NULL};
	assert_int_equal(run_with(argv2, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, "hello from ./hello.sh\n");
	hv_run_result_free(&res);
	collector_free(&c);

	/* a missing cwd is harvest's failure, before anything runs */
	char *missing = tu_path(dir, "missing");
	opts.cwd = missing;
	assert_int_equal(hv_run(&opts, collect, &c, &res), HV_EUSAGE); /* argv not set yet */
	hv_run_result_free(&res);
	opts.argv = argv;
	assert_int_equal(hv_run(&opts, collect, &c, &res), HV_ENOTDIR);
	assert_non_null(strstr(hv_error_last(), "missing"));
	assert_int_equal(res.pid, 0);
	hv_run_result_free(&res);
	opts.cwd = script; /* a file is not a directory either */
	assert_int_equal(hv_run(&opts, collect, &c, &res), HV_ENOTDIR);
	hv_run_result_free(&res);
	collector_free(&c);

	free(missing);
	free(script);
	free(real);
	tu_rmrf(dir);
	free(dir);
}

static void test_child_inherits_no_descriptors_or_signal_state(void **state)
{
	(void)state;
	int leak = open("/dev/null", O_RDONLY); /* deliberately not close-on-exec */
	assert_true(leak >= 0);
	struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe, old_usr1;
	sigaction(SIGPIPE, &ign, &old_pipe);
	sigaction(SIGUSR1, &ign, &old_usr1);
	sigset_t blk, old_mask;
	sigemptyset(&blk);
	sigaddset(&blk, SIGTERM);
	sigprocmask(SIG_BLOCK, &blk, &old_mask);

	collector c = {0};
	hv_run_result res;
	/* The exec'd program's own descriptors: 0-2 and the one ls opens to read the directory
	 * (3). The leak would push that to 4. (Asking a shell to list its own descriptors races
	 * with the pipes it makes for a pipeline.) */
	const char *ls[] = {"ls", "/proc/self/fd", NULL};
	assert_int_equal(run_with(ls, NULL, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, "0\n1\n2\n3\n"); /* not the leak */
	hv_run_result_free(&res);
	collector_free(&c);
	/* the signal state of the exec'd program itself (no shell in between: dash blocks
	 * signals while it waits for its children) */
	const char *grep[] = {"grep", "-E", "^(SigIgn|SigBlk):", "/proc/self/status", NULL};
	assert_int_equal(run_with(grep, NULL, &c, &res), HV_OK);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	sigaction(SIGUSR1, &old_usr1, NULL);
	close(leak);

	assert_int_equal(res.exit_code, 0);
	unsigned long long ignored = 0, blocked = ~0ull;
	const char *p = strstr(res.stdout_data, "SigIgn:");
	assert_non_null(p);
	ignored = strtoull(p + 7, NULL, 16);
	p = strstr(res.stdout_data, "SigBlk:");
	assert_non_null(p);
	blocked = strtoull(p + 7, NULL, 16);
	assert_int_equal(ignored & (1ull << (SIGPIPE - 1)), 0); /* SIGPIPE reset to default */
	assert_true(ignored & (1ull << (SIGUSR1 - 1)));         /* other ignores kept, as nohup */
	assert_int_equal(blocked, 0);                            /* nothing blocked */
	hv_run_result_free(&res);
	collector_free(&c);
}

struct cancel_when {
	const char *started; /* a file the command makes once it runs */
	int fd;              /* written to once it exists */
	bool missed;         /* set when it did not appear in time */
};

/* Writes a byte to c->fd once the command made c->started: a cancel while it runs (after
 * 30 s without it, at once, with c->missed set: the test then fails, not hangs). */
static void *cancel_once_started(void *arg)
{
	struct cancel_when *c = arg;
	c->missed = !tu_wait_for_file(c->started, 30000);
	if (write(c->fd, "x", 1) != 1)
		abort();
	return NULL;
}

/* A cancel while the command runs ends it with the signal *sig (opts.cancel_signal; NULL: none
 * given), expecting the command to die of expect. */
static void check_cancel(const volatile sig_atomic_t *sig, int expect)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	assert_null(opts.cancel_signal);
	opts.cancel_fd = p[0];
	opts.cancel_signal = sig;
	collector c = {0};
	hv_run_result res;
	char *dir = tu_mkdtemp();
	struct cancel_when cw = {.started = tu_path(dir, "started"), .fd = p[1]};
	char script[PATH_MAX + 64];
	snprintf(script, sizeof(script), ": > '%s'; exec sleep 10", cw.started);
	const char *argv[] = {"sh", "-c", script, NULL};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, cancel_once_started, &cw), 0);
	assert_int_equal(run_with(argv, &opts, &c, &res), HV_OK);
	pthread_join(t, NULL);
	if (cw.missed)
		fail_msg("the command did not start in 30 s: no %s", cw.started);
	assert_true(res.cancelled);
	assert_false(res.timed_out);
	assert_int_equal(res.exit_code, 128 + expect);
	assert_int_equal(res.term_signal, expect);
	assert_true(res.duration_ms < 5000); /* not the sleep's 10 s */
	hv_run_result_free(&res);
	collector_free(&c);
	close(p[0]);
	close(p[1]);
	free((char *)cw.started);
	tu_rmrf(dir);
	free(dir);
}

static void test_cancel_fd_ends_the_run(void **state)
{
	(void)state;
	check_cancel(NULL, SIGTERM);
}

/* The signal the caller caught is the one passed on (as timeout(1) does); one that cannot be
 * caught, or no signal, gives SIGTERM (the grace period before SIGKILL stays). */
static void test_cancel_signal_passed_on(void **state)
{
	(void)state;
	static volatile sig_atomic_t sig;
	sig = SIGINT;
	check_cancel(&sig, SIGINT);
	sig = SIGHUP;
	check_cancel(&sig, SIGHUP);
	sig = 0;
	check_cancel(&sig, SIGTERM);
	sig = SIGKILL;
	check_cancel(&sig, SIGTERM);
	sig = SIGRTMIN + 1;
	check_cancel(&sig, SIGTERM);
}

/* Cancelled before it began (a SIGINT while the caller still prepared the run): the command
 * is not started at all, and the run fails with HV_ECHILD saying so. */
static void test_cancel_fd_before_start(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *marker = tu_path(dir, "ran");
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.cancel_fd = p[0];
	collector c = {0};
	hv_run_result res;
	const char *argv[] = {"touch", marker, NULL};
	assert_int_equal(run_with(argv, &opts, &c, &res), HV_ECHILD);
	assert_non_null(strstr(hv_error_last(), "cancelled before it began"));
	struct stat sb;
	assert_int_not_equal(stat(marker, &sb), 0); /* never ran */
	hv_run_result_free(&res);
	collector_free(&c);
	close(p[0]);
	close(p[1]);
	free(marker);
	tu_rmrf(dir);
	free(dir);
}

static void test_callback_failure_stops_the_run(void **state)
{
	(void)state;
	collector c = {0};
	c.fail_with = HV_EIO;
	hv_run_result res;
	int64_t t0 = now_ms();
	assert_int_equal(run_sh("echo x; sleep 10", NULL, &c, &res), HV_EIO);
	assert_true(now_ms() - t0 < 3000);
	assert_int_equal(c.n, 1); /* not called again after it failed */
	/* The callback said nothing: the message says which callback stopped the run. */
	if (!strstr(hv_error_last(), "the chunk callback failed"))
		fail_msg("the run's message: '%s'", hv_error_last());
	assert_int_equal(res.exit_code, 128 + SIGTERM);
	hv_run_result_free(&res);
	collector_free(&c);
	/* A positive status is no failure (types.h): the run goes on to its end, HV_OK. */
	for (hv_status st = HV_DONE; st <= HV_WARN; st++) {
		collector w = {0};
		w.fail_with = st;
		assert_int_equal(run_sh("echo a; sleep 0.1; echo b", NULL, &w, &res), HV_OK);
		assert_int_equal(res.exit_code, 0);
		assert_true(w.n >= 2);
		hv_run_result_free(&res);
		collector_free(&w);
	}
}

/* Options that contradict themselves are refused before anything starts. */
static void test_inconsistent_opts_refused(void **state)
{
	(void)state;
	const char *argv[] = {"true", NULL};
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.argv = argv;
	opts.n_env = 1; /* but no env array */
	hv_run_result res;
	assert_int_equal(hv_run(&opts, NULL, NULL, &res), HV_EUSAGE);
	assert_int_equal(res.pid, 0);
	hv_run_result_free(&res);
	hv_run_opts_init(&opts);
	opts.argv = argv;
	opts.stdin_len = 5; /* but no data */
	assert_int_equal(hv_run(&opts, NULL, NULL, &res), HV_EUSAGE);
	assert_int_equal(res.pid, 0);
	hv_run_result_free(&res);
}

/* The working directory can be opened but not entered (no search permission; as nobody, so
 * root's override does not apply): harvest's failure, naming the directory, no exit code
 * made up for a command that never ran. */
static int run_in_unsearchable(void *arg)
{
	const char *dir = arg;
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	const char *argv[] = {"true", NULL};
	opts.argv = argv;
	opts.cwd = dir;
	hv_run_result res;
	hv_status rc = hv_run(&opts, NULL, NULL, &res);
	int ret = 0;
	if (rc != HV_ECHILD)
		ret = 10;
	else if (!strstr(hv_error_last(), dir) || !strstr(hv_error_last(), strerror(EACCES)))
		ret = 11;
	else if (res.spawn_errno != 0 || res.message)
		ret = 12;
	if (ret)
		fprintf(stderr, "status %d: %s\n", rc, hv_error_last());
	hv_run_result_free(&res);
	return ret;
}

static void test_cwd_not_searchable(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	tu_mkdir(dir, "closed");
	char *closed = tu_path(dir, "closed");
	assert_int_equal(chmod(closed, 0644), 0); /* readable: it opens; not searchable */
	int rc = tu_as_nobody(run_in_unsearchable, closed);
	assert_int_equal(chmod(closed, 0755), 0);
	assert_int_equal(rc, 0);
	free(closed);
	tu_rmrf(dir);
	free(dir);
}

/* The caller's own stdin, stdout and stderr are closed, so the pipes and files hv_run opens
 * get the numbers 0, 1, 2: the command still reads its stdin data and its output is still
 * told apart. */
static int run_with_stdio_closed(void *arg)
{
	(void)arg;
	close(0);
	close(1);
	close(2);
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	const char *argv[] = {"sh", "-c", "cat; echo out; echo err >&2", NULL};
	opts.argv = argv;
	opts.stdin_data = "in\n";
	opts.stdin_len = 3;
	hv_run_result res;
	int ret = 0;
	if (hv_run(&opts, NULL, NULL, &res) != HV_OK)
		ret = 10;
	else if (res.exit_code != 0)
		ret = 11;
	else if (strcmp(res.stdout_data, "in\nout\n") != 0)
		ret = 12;
	else if (strcmp(res.stderr_data, "err\n") != 0)
		ret = 13;
	hv_run_result_free(&res);
	/* The same with stdin from /dev/null. */
	opts.stdin_data = NULL;
	opts.stdin_len = 0;
	if (ret == 0 && hv_run(&opts, NULL, NULL, &res) != HV_OK)
		ret = 14;
	else if (ret == 0 && strcmp(res.stdout_data, "out\n") != 0)
		ret = 15;
	hv_run_result_free(&res);
	return ret;
}

static void test_caller_stdio_closed(void **state)
{
	(void)state;
	assert_int_equal(tu_in_child(run_with_stdio_closed, NULL), 0);
}

/* A bare command name is looked up in the child's PATH: opts.env's PATH when it sets one,
 * else the inherited one, and "/bin:/usr/bin" when there is none at all (as execvp). */
static int run_without_path(void *arg)
{
	(void)arg;
	unsetenv("PATH");
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	const char *argv[] = {"sh", "-c", "exit 7", NULL};
	opts.argv = argv;
	hv_run_result res;
	int ret = 0;
	if (hv_run(&opts, NULL, NULL, &res) != HV_OK || res.exit_code != 7)
		ret = 10;
	hv_run_result_free(&res);
	return ret;
}

static void test_command_lookup_path(void **state)
{
	(void)state;
	assert_int_equal(tu_in_child(run_without_path, NULL), 0);
	/* PATH from opts.env wins over the inherited one. */
	char *dir = tu_mkdtemp();
	const char *script = "#!/bin/sh\necho mine\n";
	tu_write(dir, "hv-own-cmd", script, strlen(script));
	char *cmd = tu_path(dir, "hv-own-cmd");
	assert_int_equal(chmod(cmd, 0755), 0);
	char path_env[4200];
	snprintf(path_env, sizeof(path_env), "PATH=%s", dir);
	const char *env[] = {path_env};
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.env = env;
	opts.n_env = 1;
	collector c = {0};
	hv_run_result res;
	const char *own[] = {"hv-own-cmd", NULL};
	assert_int_equal(run_with(own, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.stdout_data, "mine\n");
	hv_run_result_free(&res);
	collector_free(&c);
	/* ...so a command that is only in the inherited PATH is not found through it. */
	const char *sh[] = {"sh", "-c", "true", NULL};
	assert_int_equal(run_with(sh, &opts, &c, &res), HV_OK);
	assert_int_equal(res.exit_code, 127);
	hv_run_result_free(&res);
	collector_free(&c);
	free(cmd);
	tu_rmrf(dir);
	free(dir);
}

/* A caller that ignores SIGCHLD has its children reaped by the kernel, so no exit status can
 * be had: hv_run says so (HV_ECHILD, exit code 125, harvest's own failure) instead of making
 * one up or waiting forever. */
static int run_with_sigchld_ignored(void *arg)
{
	(void)arg;
	signal(SIGCHLD, SIG_IGN);
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	const char *argv[] = {"sh", "-c", "echo ran", NULL};
	opts.argv = argv;
	hv_run_result res;
	hv_status rc = hv_run(&opts, NULL, NULL, &res);
	int ret = 0;
	if (rc != HV_ECHILD)
		ret = 10;
	else if (!strstr(hv_error_last(), "exit status lost"))
		ret = 11;
	else if (res.exit_code != 125)
		ret = 12;
	else if (strcmp(res.stdout_data ? res.stdout_data : "", "ran\n") != 0)
		ret = 13; /* what it wrote is still there */
	if (ret)
		fprintf(stderr, "status %d, exit code %d: %s\n", rc, res.exit_code, hv_error_last());
	hv_run_result_free(&res);
	return ret;
}

static void test_sigchld_ignored(void **state)
{
	(void)state;
	int64_t t0 = now_ms();
	assert_int_equal(tu_in_child(run_with_sigchld_ignored, NULL), 0);
	assert_true(now_ms() - t0 < 10000);
}

/* The number of open descriptors of this process. */
static int count_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 4096; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* Out of descriptors at every step of setting a run up (the working directory, /dev/null or
 * the stdin pipe, the output pipes, the report pipe): each time harvest's own failure naming
 * what it could not open and the reason, nothing started, no descriptor left behind; with
 * enough of them, the command runs. */
static int run_short_of_descriptors(void *arg)
{
	const char *dir = arg;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 10;
	rl.rlim_cur = rl.rlim_max < 64 ? rl.rlim_max : 64;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 10;
	int fill[64], nfill = 0;
	int fd;
	while (nfill < 64 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		fill[nfill++] = fd;
	int failures = 0, ret = 0;
	bool ran = false;
	for (int freed = 0; freed <= 12 && !ran && ret == 0; freed++) {
		if (freed > 0 && nfill > 0)
			close(fill[--nfill]);
		for (int with_stdin = 0; with_stdin < 2 && ret == 0; with_stdin++) {
			hv_run_opts opts;
			hv_run_opts_init(&opts);
			const char *argv[] = {"sh", "-c", "cat; echo ok", NULL};
			opts.argv = argv;
			opts.cwd = dir;
			if (with_stdin) {
				opts.stdin_data = "in\n";
				opts.stdin_len = 3;
			}
			int before = count_fds();
			hv_run_result res;
			hv_status rc = hv_run(&opts, NULL, NULL, &res);
			if (count_fds() != before)
				ret = 11;
			else if (rc == HV_OK)
				ran = res.exit_code == 0 &&
				      strcmp(res.stdout_data, with_stdin ? "in\nok\n" : "ok\n") == 0;
			else if (rc >= 0 || res.pid != 0 || !strstr(hv_error_last(), strerror(EMFILE)))
				ret = 12;
			else
				failures++;
			if (ret)
				fprintf(stderr, "freed %d, stdin %d: status %d: %s\n", freed, with_stdin,
					rc, hv_error_last());
			hv_run_result_free(&res);
		}
	}
	if (ret == 0 && (!ran || failures < 4))
		ret = 13; /* it failed at several steps, then ran */
	while (nfill > 0)
		close(fill[--nfill]);
	return ret;
}

static void test_out_of_descriptors(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	assert_int_equal(tu_in_child(run_short_of_descriptors, dir), 0);
	tu_rmrf(dir);
	free(dir);
}

static void test_shell_argv(void **state)
{
	(void)state;
	const char *argv[5];
	assert_int_equal(hv_run_argv_shell(argv, "echo a | tr a b"), HV_OK);
	assert_string_equal(argv[0], "/bin/sh");
	assert_string_equal(argv[1], "-c");
	assert_string_equal(argv[2], "echo a | tr a b");
	assert_null(argv[3]);
	/* a script sh would read as options comes after "--" */
	for (int i = 0; i < 2; i++) {
		const char *s = i ? "+x" : "-x";
		assert_int_equal(hv_run_argv_shell(argv, s), HV_OK);
		assert_string_equal(argv[2], "--");
		assert_string_equal(argv[3], s);
		assert_null(argv[4]);
	}
	assert_int_equal(hv_run_argv_shell(argv, NULL), HV_EUSAGE);
	assert_string_equal(hv_stream_name(HV_STREAM_STDOUT), "stdout");
	assert_string_equal(hv_stream_name(HV_STREAM_STDERR), "stderr");
}

/* ---- what opts.end_descendants, opts.stdin_fd and the environment filter do ------------ */

/* Gone and reaped: hv_run() itself took the orphan's exit status. */
static bool reaped_already(pid_t pid)
{
	int st;
	return waitpid(pid, &st, WNOHANG) < 0 && errno == ECHILD && kill(pid, 0) != 0 &&
	       errno == ESRCH;
}

/* With end_descendants, what the command leaves behind ends with the run: a background
 * process holding no pipe, in the group or in a session of its own (setsid), and one that
 * ignores SIGTERM (SIGKILL after the grace period); their orphans are reaped. */
static void test_end_descendants_ends_what_is_left(void **state)
{
	(void)state;
	static const char *const scripts[] = {
		"sleep 100 >/dev/null 2>&1 </dev/null & echo $!",
		"setsid sh -c 'echo $$; exec sleep 100' </dev/null 2>/dev/null & wait",
		"setsid sh -c 'trap \"\" TERM; echo $$; sleep 100; :' </dev/null 2>/dev/null & "
		"wait",
	};
	for (size_t k = 0; k < sizeof(scripts) / sizeof(scripts[0]); k++) {
		hv_run_opts opts;
		hv_run_opts_init(&opts);
		opts.end_descendants = true;
		opts.linger_ms = 100000; /* the setsid ones hold stdout: only SIGTERM ends them */
		/* long enough for a loaded machine to start the setsid shell */
		opts.timeout_ms = k == 0 ? 0 : 2500;
		collector c = {0};
		hv_run_result res;
		assert_int_equal(run_sh(scripts[k], &opts, &c, &res), HV_OK);
		pid_t bg = parse_pid(res.stdout_data);
		if (!reaped_already(bg)) {
			kill(bg, SIGKILL);
			reap_orphan(bg);
			fail_msg("script %zu: the background process %d outlived the run", k, (int)bg);
		}
		hv_run_result_free(&res);
		collector_free(&c);
	}
}

/* The caller's own children (started before the run) are not the command's: left alone. */
static void test_end_descendants_spares_the_callers_children(void **state)
{
	(void)state;
	pid_t mine = fork();
	assert_true(mine >= 0);
	if (mine == 0) {
		pause();
		_exit(0);
	}
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.end_descendants = true;
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("sleep 100 >/dev/null 2>&1 </dev/null & echo $!", &opts, &c, &res),
			 HV_OK);
	pid_t bg = parse_pid(res.stdout_data);
	assert_true(reaped_already(bg));
	int st;
	assert_int_equal(waitpid(mine, &st, WNOHANG), 0); /* still running, not reaped */
	kill(mine, SIGKILL);
	assert_int_equal(waitpid(mine, &st, 0), mine);
	hv_run_result_free(&res);
	collector_free(&c);
}

/* Inherited HARVEST_* variables do not reach the command; given in opts.env, they do. */
static void test_env_drops_harvest_variables(void **state)
{
	(void)state;
	assert_int_equal(setenv("HARVEST_DB", "/secret/h.db", 1), 0);
	assert_int_equal(setenv("HARVEST_OTHER", "x", 1), 0);
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("echo \"[${HARVEST_DB-unset}][${HARVEST_OTHER-unset}]\"", NULL, &c,
				&res),
			 HV_OK);
	assert_string_equal(res.stdout_data, "[unset][unset]\n");
	hv_run_result_free(&res);
	collector_free(&c);
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	const char *env[] = {"HARVEST_DB=/given"};
	opts.env = env;
	opts.n_env = 1;
	assert_int_equal(run_sh("echo \"[${HARVEST_DB-unset}][${HARVEST_OTHER-unset}]\"", &opts, &c,
				&res),
			 HV_OK);
	assert_string_equal(res.stdout_data, "[/given][unset]\n");
	hv_run_result_free(&res);
	collector_free(&c);
	unsetenv("HARVEST_DB");
	unsetenv("HARVEST_OTHER");
}

/* stdin_fd is copied as it is read: an endless source (/dev/zero) works as long as the
 * command reads, and one that stops reading (EPIPE) ends the copy without an error. A
 * source that cannot be read (a directory) is HV_EIO; data and a descriptor at once are
 * refused. */
static void test_stdin_fd_streamed(void **state)
{
	(void)state;
	hv_run_opts opts;
	hv_run_opts_init(&opts);
	opts.timeout_ms = 60000; /* a hang shows as a timeout, not a hung test */
	opts.stdin_fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	assert_true(opts.stdin_fd >= 0);
	collector c = {0};
	hv_run_result res;
	assert_int_equal(run_sh("head -c 50000000 | wc -c", &opts, &c, &res), HV_OK);
	assert_false(res.timed_out);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(strtol(res.stdout_data, NULL, 10), 50000000);
	hv_run_result_free(&res);
	collector_free(&c);
	close(opts.stdin_fd);

	/* a pipe with a known content and EOF */
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(write(p[1], "one\ntwo\n", 8), 8);
	close(p[1]);
	opts.stdin_fd = p[0];
	assert_int_equal(run_sh("cat", &opts, &c, &res), HV_OK);
	assert_string_equal(res.stdout_data, "one\ntwo\n");
	hv_run_result_free(&res);
	collector_free(&c);
	close(p[0]);

	opts.stdin_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(opts.stdin_fd >= 0);
	assert_int_equal(run_sh("cat >/dev/null", &opts, &c, &res), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "standard input"));
	hv_run_result_free(&res);
	collector_free(&c);

	opts.stdin_data = "x";
	opts.stdin_len = 1;
	assert_int_equal(run_sh("cat", &opts, &c, &res), HV_EUSAGE);
	hv_run_result_free(&res);
	collector_free(&c);
	close(opts.stdin_fd);
}

int main(void)
{
	/* orphans of the commands come to us (see the top of the file) */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
		perror("prctl(PR_SET_CHILD_SUBREAPER)");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exit_zero),
		cmocka_unit_test(test_exit_seven),
		cmocka_unit_test(test_not_found_is_127),
		cmocka_unit_test(test_not_executable_is_126),
		cmocka_unit_test(test_killed_by_signal_is_128_plus_n),
		cmocka_unit_test(test_timeout_kills_the_group),
		cmocka_unit_test(test_timeout_escalates_to_sigkill),
		cmocka_unit_test(test_timeout_reaches_a_stopped_child),
		cmocka_unit_test(test_pipe_holding_background_is_ended_after_linger),
		cmocka_unit_test(test_linger_keeps_late_output),
		cmocka_unit_test(test_detached_background_survives),
		cmocka_unit_test(test_escaped_pipe_holder_does_not_hang),
		cmocka_unit_test(test_closed_pipes_still_wait_for_exit),
		cmocka_unit_test(test_chunk_arrives_while_running),
		cmocka_unit_test(test_utf8_character_split_across_writes),
		cmocka_unit_test(test_splitter_cases),
		cmocka_unit_test(test_splitter_exhaustive_short),
		cmocka_unit_test(test_splitter_random_reassembly),
		cmocka_unit_test(test_stdin_is_dev_null),
		cmocka_unit_test(test_stdin_data_runs_language),
		cmocka_unit_test(test_stdin_not_read_does_not_deadlock),
		cmocka_unit_test(test_invalid_env_and_language_refused),
		cmocka_unit_test(test_output_truncated_but_streamed_whole),
		cmocka_unit_test(test_env_reaches_child),
		cmocka_unit_test(test_cwd_honoured),
		cmocka_unit_test(test_child_inherits_no_descriptors_or_signal_state),
		cmocka_unit_test(test_cancel_fd_ends_the_run),
		cmocka_unit_test(test_cancel_signal_passed_on),
		cmocka_unit_test(test_cancel_fd_before_start),
		cmocka_unit_test(test_callback_failure_stops_the_run),
		cmocka_unit_test(test_shell_argv),
		cmocka_unit_test(test_inconsistent_opts_refused),
		cmocka_unit_test(test_cwd_not_searchable),
		cmocka_unit_test(test_caller_stdio_closed),
		cmocka_unit_test(test_command_lookup_path),
		cmocka_unit_test(test_sigchld_ignored),
		cmocka_unit_test(test_out_of_descriptors),
		cmocka_unit_test(test_end_descendants_ends_what_is_left),
		cmocka_unit_test(test_end_descendants_spares_the_callers_children),
		cmocka_unit_test(test_env_drops_harvest_variables),
		cmocka_unit_test(test_stdin_fd_streamed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
