/* End-to-end tests of the history in PostgreSQL (a real PostgreSQL 15 server, started by
 * scripts/pg_fixture.sh for this program): 32 writers under 4 --host names at once, then
 * exact counts and contents; writers killed with SIGKILL while recording leave no partial
 * run; prune racing writers that share a content; an unreachable server (the command is not
 * started, no password in the message); the server stopped mid-run (the ExecutionResult is
 * printed with run_id null, exit 125, nothing partial), or frozen (given up after the silence
 * limit, or at a second SIGTERM); a "harvest" schema that is not
 * harvest's, and a newer one (refused, untouched); first-time writers creating the schema at
 * once; `history push` twice. Each case uses a fresh database. */
#include "testutil.h"
#include "tjson.h"
#include "tu_pg.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct fixture {
	char *root;
	char *db;    /* the database's URI */
	char *cache; /* the local cache file */
} fixture;

static void fx_open(fixture *f)
{
	f->root = tu_tmpdir();
	f->db = tu_pg_newdb();
	f->cache = tu_path(f->root, "cache.db");
}

static void fx_close(fixture *f)
{
	free(f->db);
	free(f->cache);
}

static void expect_status(const tu_result *r, int want, const char *what)
{
	if (r->status != want)
		fail_msg("%s: exit %d, expected %d\nstdout: %.2000s\nstderr: %.2000s", what,
			 r->status, want, r->out, r->err);
}

/* `harvest CMD [SUB] --db URI --cache-db CACHE ARGS...` (before a run's "--"). */
static void hv(tu_result *r, const fixture *f, const char *const *args)
{
	const char *all[64];
	size_t n = 0, k = 0, head = strcmp(args[0], "history") ? 1 : 2;
	for (; k < head; k++)
		all[n++] = args[k];
	all[n++] = "--db";
	all[n++] = f->db;
	all[n++] = "--cache-db";
	all[n++] = f->cache;
	for (; args[k]; k++)
		all[n++] = args[k];
	all[n] = NULL;
	tu_harvestv(r, NULL, NULL, all);
}

static tj_value *hv_json(const fixture *f, const char *const *args)
{
	tu_result r;
	hv(&r, f, args);
	expect_status(&r, 0, args[1] ? args[1] : args[0]);
	tj_value *v = tj_parse(r.out, r.out_len);
	if (!v)
		fail_msg("not JSON: %.2000s", r.out);
	tu_result_free(&r);
	return v;
}

static int64_t q(const fixture *f, const char *sql)
{
	return tu_pg_int(f->db, sql);
}

/* The last line of a run's output: its ExecutionResult. */
static tj_value *result_of(const char *out)
{
	const char *last = out, *p = out;
	while ((p = strchr(p, '\n')) && p[1])
		last = ++p;
	tj_value *v = tj_parse(last, strcspn(last, "\n"));
	if (!v)
		fail_msg("no ExecutionResult in %.2000s", out);
	return v;
}

static void expect_one_line(const tu_result *r, const char *has, const char *what)
{
	const char *nl = strchr(r->err, '\n');
	if (!nl || nl[1] != '\0' || !strstr(r->err, has))
		fail_msg("%s: expected one line with '%s', got '%s'", what, has, r->err);
}

/* ---- many writers ---- */

enum { N_WRITERS = 32, N_HOSTS = 4 };

static void test_fleet_writers(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	pid_t pids[N_WRITERS];
	for (int i = 0; i < N_WRITERS; i++) {
		char dir[16], script[64], host[16];
		snprintf(dir, sizeof(dir), "d%d", i);
		tu_mkdir(f.root, dir);
		char *d = tu_path(f.root, dir);
		snprintf(script, sizeof(script), "echo writer %d > out.txt; echo same > s.txt", i);
		snprintf(host, sizeof(host), "host%d", i % N_HOSTS);
		char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--cache-db", f.cache, "--host",
				host, "--dir", d, "--shell", "--", script, NULL};
		pids[i] = tu_spawn(argv, NULL, NULL);
		free(d);
	}
	for (int i = 0; i < N_WRITERS; i++)
		assert_int_equal(tu_wait(pids[i]), 0);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs"), N_WRITERS);
	assert_int_equal(q(&f, "SELECT count(DISTINCT id) FROM harvest.runs"), N_WRITERS);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts"), 2 * N_WRITERS);
	/* 32 different out.txt and one shared s.txt. */
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.contents"), N_WRITERS + 1);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE ended_at_ns IS NULL"
			       " OR end_reason IS NOT NULL"), 0);
	for (int h = 0; h < N_HOSTS; h++) {
		char host[16];
		snprintf(host, sizeof(host), "host%d", h);
		tj_value *runs = hv_json(&f, (const char *const[]){"history", "runs", "--host", host,
								    NULL});
		assert_int_equal(tj_len(runs), N_WRITERS / N_HOSTS);
		for (size_t i = 0; i < tj_len(runs); i++) {
			const tj_value *o = tj_at(runs, i);
			assert_string_equal(tj_str(tj_get(o, "host"), NULL), host);
			assert_int_equal(tj_int(tj_get(o, "artifacts")), 2);
		}
		tj_free(runs);
		tj_value *arts = hv_json(&f, (const char *const[]){"history", "artifacts", "--host",
								    host, "--name", "out.txt", NULL});
		assert_int_equal(tj_len(arts), N_WRITERS / N_HOSTS);
		/* Each artifact's bytes are its own writer's. */
		for (size_t i = 0; i < tj_len(arts); i++) {
			char id[24];
			snprintf(id, sizeof(id), "%lld",
				 (long long)tj_int(tj_get(tj_at(arts, i), "artifact_id")));
			tu_result r;
			hv(&r, &f, (const char *const[]){"history", "get", id, NULL});
			expect_status(&r, 0, "history get");
			int w = -1;
			assert_int_equal(sscanf(r.out, "writer %d", &w), 1);
			assert_int_equal(w % N_HOSTS, h);
			tu_result_free(&r);
		}
		tj_free(arts);
	}
	fx_close(&f);
}

/* Writers killed at random moments while recording 300 files: every run has all of its
 * artifacts or none. */
static void test_kill_writers(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	srand(13);
	enum { N = 12 };
	/* The schema first: a writer killed before it made it would leave nothing to check. */
	tu_result r0;
	hv(&r0, &f, (const char *const[]){"run", "--dir", f.root, "--no-content", "--", "true",
					  NULL});
	expect_status(&r0, 0, "the first run");
	tu_result_free(&r0);
	for (int i = 0; i < N; i++) {
		char dir[16];
		snprintf(dir, sizeof(dir), "k%d", i);
		tu_mkdir(f.root, dir);
		char *d = tu_path(f.root, dir);
		const char *script = "i=0; while [ $i -lt 300 ]; do echo $i > f$i.txt; i=$((i+1)); done";
		char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--cache-db", f.cache, "--dir", d,
				"--shell", "--", (char *)script, NULL};
		pid_t pid = tu_spawn(argv, NULL, NULL);
		tu_sleep_ms(50 + rand() % 400);
		kill(pid, SIGKILL);
		tu_wait(pid);
		free(d);
	}
	assert_true(q(&f, "SELECT count(*) FROM harvest.runs") > 0);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs r WHERE (SELECT count(*) FROM"
			       " harvest.artifacts a WHERE a.run_id = r.id) NOT IN (0, 300)"), 0);
	/* An ended, fully recorded run has all 300; an unended one none. */
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs r WHERE ended_at_ns IS NULL AND"
			       " EXISTS (SELECT 1 FROM harvest.artifacts a WHERE a.run_id = r.id)"), 0);
	/* The next writer on this host ends the killed ones as interrupted. */
	tu_result r;
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--no-content", "--", "true",
					 NULL});
	expect_status(&r, 0, "run after the kills");
	tu_result_free(&r);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE ended_at_ns IS NULL"), 0);
	fx_close(&f);
}

/* Prune --keep-runs 0 in a loop while writers record a content they all share: no artifact
 * that says its content is stored ever lacks it. */
/* A run whose recording waits on a prune's lock past its timeout is ended as not_recorded
 * (the connection is fine), not left in progress: the lock's timeout is lowered to 1 s for
 * this database, and a session holds prune's lock meanwhile. */
static void test_lock_timeout_ends_the_run(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--", "true", NULL});
	expect_status(&r, 0, "a first run (the schema)");
	tu_result_free(&r);
	tu_pg_exec(f.db, "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET lock_timeout = %L',"
			 " current_database(), '1s'); END $$");
	PGconn *holder = PQconnectdb(f.db);
	assert_int_equal(PQstatus(holder), CONNECTION_OK);
	PGresult *res = PQexec(holder, "BEGIN; LOCK TABLE harvest.contents IN SHARE ROW EXCLUSIVE MODE");
	assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
	PQclear(res);
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--host", "sbx-lock", "--shell",
					  "--", "echo x > x.txt", NULL});
	expect_status(&r, 125, "a run whose recording waited on prune's lock");
	tu_result_free(&r);
	res = PQexec(holder, "ROLLBACK");
	PQclear(res);
	PQfinish(holder);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE host = 'sbx-lock'"), 1);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE host = 'sbx-lock' AND"
			       " ended_at_ns IS NOT NULL AND end_reason = 'not_recorded'"),
			 1);
	fx_close(&f);
}

static void test_prune_racing_writers(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	enum { N = 16 };
	pid_t pids[N];
	for (int i = 0; i < N; i++) {
		char dir[16], script[64];
		snprintf(dir, sizeof(dir), "p%d", i);
		tu_mkdir(f.root, dir);
		char *d = tu_path(f.root, dir);
		snprintf(script, sizeof(script), "sleep 0.%d; echo shared > s.txt", i % 8);
		char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--cache-db", f.cache, "--dir", d,
				"--shell", "--", script, NULL};
		pids[i] = tu_spawn(argv, NULL, NULL);
		free(d);
	}
	int left = N;
	bool done[N] = {false};
	while (left > 0) {
		tu_result r;
		hv(&r, &f, (const char *const[]){"history", "prune", "--keep-runs", "0", NULL});
		expect_status(&r, 0, "prune racing writers");
		tu_result_free(&r);
		assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts a WHERE content_stored"
				       " AND NOT EXISTS (SELECT 1 FROM harvest.contents c"
				       "  WHERE c.sha256 = a.sha256)"), 0);
		for (int i = 0; i < N; i++) {
			int st;
			if (!done[i] && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
				assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
				done[i] = true;
				left--;
			}
		}
	}
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts a WHERE content_stored"
			       " AND NOT EXISTS (SELECT 1 FROM harvest.contents c"
			       "  WHERE c.sha256 = a.sha256)"), 0);
	fx_close(&f);
}

/* ---- faults ---- */

static void test_unreachable(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *cache = tu_path(root, "cache.db");
	char *marker = tu_path(root, "started");
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "touch %s", marker);
	const char *uris[] = {
		"postgresql:///db?host=/nonexistent-dir&user=u&password=s3cret-pw",
		"postgres://u:s3cret-pw@localhost:1/db?connect_timeout=2",
		/* libpq decodes a query keyword, and ends the user information at the first
		 * '@' before a '/': these are passwords too. */
		"postgresql:///db?host=/nonexistent-dir&user=u&pass%77ord=s3cret-pw",
		"postgresql:///db?host=/nonexistent-dir&user=u&%50ASSWORD=s3cret-pw",
		"postgres://u:s3cret?pw@localhost:1/db?connect_timeout=2",
		"postgres://u:s3cret#pw@localhost:1/db?connect_timeout=2",
		/* A '/' must be %2F: libpq would read the password as a port and dbname. */
		"postgres://u:s3cret/pw@localhost:1/db?connect_timeout=2",
	};
	for (size_t i = 0; i < sizeof(uris) / sizeof(uris[0]); i++) {
		tu_result r;
		tu_harvestv(&r, NULL, NULL,
			    (const char *const[]){"run", "--db", uris[i], "--cache-db", cache,
						  "--dir", root, "--shell", "--", cmd, NULL});
		expect_status(&r, 125, "run, server unreachable");
		expect_one_line(&r, "cannot connect", "run, server unreachable");
		if (strstr(r.err, "s3cret"))
			fail_msg("the password is in the message: %s", r.err);
		assert_int_equal(r.out_len, 0);
		struct stat sb;
		assert_int_not_equal(stat(marker, &sb), 0); /* the command never started */
		tu_result_free(&r);
	}
	/* --no-history: nothing to record, so the server is not needed. */
	tu_result r;
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"run", "--db", uris[0], "--cache-db", cache, "--dir", root,
					  "--no-history", "--shell", "--", cmd, NULL});
	expect_status(&r, 0, "run --no-history, server unreachable");
	struct stat sb;
	assert_int_equal(stat(marker, &sb), 0);
	tu_result_free(&r);
	/* A query: exit 1, one line. */
	tu_harvestv(&r, NULL, NULL, (const char *const[]){"history", "runs", "--db", uris[0],
							  "--cache-db", cache, NULL});
	expect_status(&r, 1, "history runs, server unreachable");
	expect_one_line(&r, "cannot connect", "history runs, server unreachable");
	assert_null(strstr(r.err, "s3cret"));
	tu_result_free(&r);
	free(cache);
	free(marker);
}

/* Waits up to 30 s for the count that sql asks for to reach 1; kills harvest (pid) and
 * fails the test when it does not. */
static void wait_for_row(const fixture *f, pid_t pid, const char *sql)
{
	double end = tu_now_s() + 30;
	while (q(f, sql) < 1) {
		if (tu_now_s() >= end)
			tu_kill_fail(pid, "no row in 30 s for: %s", sql);
		tu_sleep_ms(20);
	}
}

/* A run on f (its own server: tu_pg_newdb_private) whose command waits for the file "go" in
 * f->root, then writes d/made.txt; its output to out, its stderr to err (NULL: /dev/null).
 * Returns once the run is recorded as begun. */
static pid_t spawn_waiting_run(const fixture *f, const char *out, const char *err)
{
	char *go = tu_path(f->root, "go");
	char script[4200];
	snprintf(script, sizeof(script),
		 "while [ ! -e %s ]; do sleep 0.05; done; echo made > made.txt", go);
	char *d = tu_path(f->root, "d");
	tu_mkdir(f->root, "d");
	char *argv[] = {HARVEST_BIN, "run", "--db", f->db, "--cache-db", f->cache, "--dir", d,
			"--shell", "--", script, NULL};
	pid_t pid = tu_spawn(argv, out, err);
	/* Until its run is recorded (the schema first: harvest creates it). */
	wait_for_row(f, pid, "SELECT count(*) FROM pg_tables WHERE schemaname = 'harvest'"
			     " AND tablename = 'runs'");
	wait_for_row(f, pid, "SELECT count(*) FROM harvest.runs");
	free(go);
	free(d);
	return pid;
}

/* The ExecutionResult at the end of out: the command's, with its file, but no run id. */
static void expect_unrecorded_result(const char *out)
{
	size_t len = 0;
	char *text = tu_read_file(out, &len);
	assert_non_null(text);
	tj_value *res = result_of(text);
	assert_true(tj_is_null(tj_get(res, "run_id")));
	assert_int_equal(tj_int(tj_get(res, "exit_code")), 0);
	assert_int_equal(tj_len(tj_get(res, "output_files")), 1);
	tj_free(res);
	free(text);
}

/* The server goes away while the command runs: the ExecutionResult is printed all the same
 * (run_id null), exit 125, and the database holds no artifact of that run. */
static void test_server_lost_mid_run(void **state)
{
	(void)state;
	/* On a server of its own: the one the other cases (and test programs) share stays up. */
	fixture f = {.root = tu_tmpdir(), .db = tu_pg_newdb_private()};
	f.cache = tu_path(f.root, "cache.db");
	char *out = tu_path(f.root, "out.jsonl");
	pid_t pid = spawn_waiting_run(&f, out, NULL);
	tu_pg_kill();
	tu_write(f.root, "go", "", 0);
	assert_int_equal(tu_wait(pid), 125);
	expect_unrecorded_result(out);
	tu_pg_restart();
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts"), 0);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE end_reason IS NULL AND"
			       " ended_at_ns IS NOT NULL"), 0);
	free(out);
	fx_close(&f);
}

/* pid's exit status, waiting at most ms: a harvest still running then is killed (and the
 * private server let go on when frozen), and the test fails (it hung). */
static int wait_at_most(pid_t pid, long ms, bool frozen)
{
	for (long waited = 0;; waited += 20) {
		int st;
		pid_t got = waitpid(pid, &st, WNOHANG);
		if (got == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (waited >= ms) {
			kill(pid, SIGKILL);
			(void)tu_wait(pid);
			if (frozen)
				tu_pg_freeze(0);
			fail_msg("harvest still waits after %ld ms: killed", ms);
		}
		tu_sleep_ms(20);
	}
}

/* The first line of the file at path contains has, and it is the only line. */
static void expect_one_line_in(const char *path, const char *has, const char *what)
{
	size_t len = 0;
	char *err = tu_read_file(path, &len);
	assert_non_null(err);
	tu_result r = {.err = err, .err_len = len};
	expect_one_line(&r, has, what);
	free(err);
}

/* A waiting run (spawn_waiting_run) on a private server, which is frozen (tu_pg_freeze) once
 * the run has begun; then the command is let go, and harvest has a run to record. Its output
 * and stderr go to *out and *err (paths in f->root). short_silence: with
 * HARVEST_TEST_PG_SILENCE (2 s), else the real limit. */
static pid_t frozen_run(fixture *f, char **out, char **err, bool short_silence)
{
	*f = (fixture){.root = tu_tmpdir(), .db = tu_pg_newdb_private()};
	f->cache = tu_path(f->root, "cache.db");
	*out = tu_path(f->root, "out.jsonl");
	*err = tu_path(f->root, "err.txt");
	if (short_silence)
		setenv("HARVEST_TEST_PG_SILENCE", "1", 1);
	pid_t pid = spawn_waiting_run(f, *out, *err);
	unsetenv("HARVEST_TEST_PG_SILENCE");
	tu_pg_freeze(1);
	tu_write(f->root, "go", "", 0);
	return pid;
}

/* A server that stops answering (frozen: it takes the connection, then says nothing) after
 * the run began. harvest gives the statement up after the silence limit (90 s; 2 s with
 * HARVEST_TEST_PG_SILENCE) with one line that says so: the result is printed with run_id null,
 * exit 125. The run left open in the history is ended as interrupted by the next writer. */
static void test_server_frozen(void **state)
{
	(void)state;
	fixture f;
	char *out, *err;
	pid_t pid = frozen_run(&f, &out, &err, true);
	int status = wait_at_most(pid, 30000, true);
	tu_pg_freeze(0);
	assert_int_equal(status, 125);
	expect_unrecorded_result(out);
	expect_one_line_in(err, "the server did not answer for 2 s; giving up", "frozen server");
	/* Nothing of it committed; its run row stays open until a writer sees its owner gone. */
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts"), 0);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE ended_at_ns IS NULL"), 1);
	tu_result r;
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--", "true", NULL});
	expect_status(&r, 0, "run after the frozen server");
	tu_result_free(&r);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE end_reason ="
			       " 'interrupted'"), 1);
	free(out);
	free(err);
	fx_close(&f);
}

/* The same frozen server, with the real 90 s limit: a first SIGTERM ends the command (the run
 * is to be recorded), a second stops harvest waiting for the server at once. */
static void test_server_frozen_second_signal(void **state)
{
	(void)state;
	fixture f;
	char *out, *err;
	pid_t pid = frozen_run(&f, &out, &err, false);
	/* The command ends once it made its file; harvest then waits for the frozen server. */
	char *made = tu_path(f.root, "d/made.txt");
	if (!tu_wait_for_file(made, 30000)) {
		kill(pid, SIGKILL);
		(void)tu_wait(pid);
		tu_pg_freeze(0);
		fail_msg("the command did not make its file in 30 s: no %s", made);
	}
	free(made);
	tu_sleep_ms(500); /* for the shell to exit after its last command */
	kill(pid, SIGTERM);
	tu_sleep_ms(300);
	/* Still waiting: one signal does not give the run up. */
	assert_int_equal(waitpid(pid, NULL, WNOHANG), 0);
	kill(pid, SIGTERM);
	int status = wait_at_most(pid, 30000, true);
	tu_pg_freeze(0);
	assert_int_equal(status, 125);
	expect_unrecorded_result(out);
	expect_one_line_in(err, "interrupted while waiting for the server", "second signal");
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts"), 0);
	free(out);
	free(err);
	fx_close(&f);
}

/* On a server that answers, a second signal loses nothing: the first ends the command, which
 * takes its time to finish (a trap that waits for the test's word), the second comes while it
 * does, and the run is recorded. The trap has harvest's grace period (2 s from SIGTERM to
 * SIGKILL) to end in: a handshake, not a fixed sleep, so a loaded machine cannot stretch it
 * past that (a "sleep 1" in the trap was once killed at the grace's end). */
static void test_second_signal_healthy_server(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *out = tu_path(f.root, "out.jsonl");
	char *err = tu_path(f.root, "err.txt");
	char *ready = tu_path(f.root, "ready");
	char *trapped = tu_path(f.root, "trapped");
	char *go = tu_path(f.root, "go");
	char script[4200];
	snprintf(script, sizeof(script),
		 "trap ': > %s; n=0; while [ ! -e %s ] && [ $n -lt 50 ]; do sleep 0.01;"
		 " n=$((n+1)); done; echo x > f.txt; exit 3' TERM INT; : > %s;"
		 " while :; do sleep 0.1; done",
		 trapped, go, ready);
	char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--cache-db", f.cache, "--dir", f.root,
			"--shell", "--", script, NULL};
	pid_t pid = tu_spawn(argv, out, err);
	if (!tu_wait_for_file(ready, 30000))
		tu_kill_fail(pid, "the command did not start in 30 s: no %s", ready);
	kill(pid, SIGINT);
	/* The command is in its trap: harvest took the first signal and ended it. */
	if (!tu_wait_for_file(trapped, 30000))
		tu_kill_fail(pid, "the command did not enter its trap in 30 s: no %s", trapped);
	kill(pid, SIGINT);
	tu_sleep_ms(50);
	tu_write(f.root, "go", "", 0);
	int status = wait_at_most(pid, 30000, false);
	size_t len = 0;
	char *text = tu_read_file(out, &len);
	if (status != 3) {
		char *msg = tu_read_file(err, &len);
		print_message("harvest's output: %s\nits stderr: %s\n", text ? text : "(none)",
			      msg ? msg : "(none)");
		free(msg);
	}
	assert_int_equal(status, 3);
	assert_non_null(text);
	tj_value *res = result_of(text);
	assert_false(tj_is_null(tj_get(res, "run_id")));
	assert_int_equal(tj_int(tj_get(res, "exit_code")), 3);
	tj_free(res);
	free(text);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts WHERE name = 'f.txt'"), 1);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE exit_code = 3"), 1);
	free(out);
	free(err);
	free(ready);
	free(trapped);
	free(go);
	fx_close(&f);
}

/* ---- schema ---- */

static void test_not_harvests_schema(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_pg_exec(f.db, "CREATE SCHEMA harvest; CREATE TABLE harvest.runs (x int);"
			 " INSERT INTO harvest.runs VALUES (7)");
	tu_result r;
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--", "true", NULL});
	expect_status(&r, 125, "run into someone else's schema");
	expect_one_line(&r, "not harvest's", "run into someone else's schema");
	tu_result_free(&r);
	hv(&r, &f, (const char *const[]){"history", "runs", NULL});
	expect_status(&r, 1, "history runs in someone else's schema");
	expect_one_line(&r, "not harvest's", "history runs in someone else's schema");
	tu_result_free(&r);
	/* Untouched. */
	assert_int_equal(q(&f, "SELECT count(*) FROM pg_tables WHERE schemaname = 'harvest'"), 1);
	assert_int_equal(q(&f, "SELECT x FROM harvest.runs"), 7);
	fx_close(&f);
}

/* A role without rights on harvest's schema is told so, and what it needs: not that the
 * schema is someone else's. */
static void test_no_rights(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--", "true", NULL});
	expect_status(&r, 0, "run that creates the schema");
	tu_result_free(&r);
	char role[64], sql[160];
	snprintf(role, sizeof(role), "hv_norights_%ld", (long)getpid());
	snprintf(sql, sizeof(sql), "CREATE ROLE %s LOGIN", role);
	tu_pg_exec(f.db, sql);
	/* The same database as that role. */
	const char *user = strstr(f.db, "user=harvest");
	assert_non_null(user);
	char uri[2048];
	snprintf(uri, sizeof(uri), "%.*suser=%s%s", (int)(user - f.db), f.db, role,
		 user + strlen("user=harvest"));
	fixture g = {.root = f.root, .db = uri, .cache = f.cache};
	const char *const *cases[] = {
		(const char *const[]){"history", "runs", NULL},
		(const char *const[]){"run", "--dir", f.root, "--", "true", NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		hv(&r, &g, cases[i]);
		expect_status(&r, i == 0 ? 1 : 125, cases[i][0]);
		expect_one_line(&r, "cannot read the schema: permission denied", cases[i][0]);
		expect_one_line(&r, "needs USAGE on the schema harvest", cases[i][0]);
		/* The server's words alone: not the statement and caret it adds for a position. */
		if (strstr(r.err, "LINE 1") || strstr(r.err, "^"))
			fail_msg("%s: the statement is in the message: %s", cases[i][0], r.err);
		if (strstr(r.err, "not harvest's"))
			fail_msg("%s: the schema called someone else's: %s", cases[i][0], r.err);
		tu_result_free(&r);
	}
	snprintf(sql, sizeof(sql), "DROP ROLE %s", role);
	tu_pg_exec(f.db, sql);
	fx_close(&f);
}

static void test_newer_schema(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--no-content", "--", "true",
					 NULL});
	expect_status(&r, 0, "first run");
	tu_result_free(&r);
	tu_pg_exec(f.db, "UPDATE harvest.meta SET value = '99' WHERE key = 'schema_version'");
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--", "true", NULL});
	expect_status(&r, 125, "run into a newer schema");
	expect_one_line(&r, "newer than this harvest", "run into a newer schema");
	tu_result_free(&r);
	hv(&r, &f, (const char *const[]){"history", "runs", NULL});
	expect_status(&r, 1, "history runs in a newer schema");
	tu_result_free(&r);
	assert_int_equal(q(&f, "SELECT value::int FROM harvest.meta WHERE key = 'schema_version'"),
			 99);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs"), 1);
	fx_close(&f);
}

/* A history at schema version 1 (before runs.deleted and artifacts.change), as an older
 * harvest left it: the read-only commands read it as it is (its runs have no deleted list,
 * its artifacts no change), and the next writer upgrades it. */
static void test_older_schema_read(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--shell", "--",
					 "echo one > o1.txt", NULL});
	expect_status(&r, 0, "first run");
	tu_result_free(&r);
	tu_pg_exec(f.db, "ALTER TABLE harvest.runs DROP COLUMN deleted;"
			 "ALTER TABLE harvest.artifacts DROP COLUMN change;"
			 "UPDATE harvest.meta SET value = '1' WHERE key = 'schema_version'");
	tj_value *v = hv_json(&f, (const char *const[]){"history", "artifacts", NULL});
	assert_int_equal(tj_len(v), 1);
	assert_string_equal(tj_str(tj_get(tj_at(v, 0), "name"), NULL), "o1.txt");
	tj_free(v);
	v = hv_json(&f, (const char *const[]){"history", "show", "1", NULL});
	assert_int_equal(tj_len(tj_get(v, "output_files")), 1);
	tj_free(v);
	char *tar = tu_path(f.root, "r.tar");
	hv(&r, &f, (const char *const[]){"history", "get", "--run", "1", "-o", tar, NULL});
	expect_status(&r, 0, "history get --run of a version 1 history");
	tu_result_free(&r);
	free(tar);
	assert_int_equal(q(&f, "SELECT value::int FROM harvest.meta WHERE key = 'schema_version'"),
			 1); /* reading changed nothing */
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--", "true", NULL});
	expect_status(&r, 0, "a writer");
	tu_result_free(&r);
	assert_int_equal(q(&f, "SELECT value::int FROM harvest.meta WHERE key = 'schema_version'"),
			 2);
	fx_close(&f);
}

/* First-time writers at once: one creates the schema, the others wait for it (advisory
 * lock) and use it. */
static void test_first_writers_race(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	enum { N = 8 };
	pid_t pids[N];
	char *errs[N];
	for (int i = 0; i < N; i++) {
		char dir[16], err[16];
		snprintf(dir, sizeof(dir), "w%d", i);
		snprintf(err, sizeof(err), "w%d.err", i);
		tu_mkdir(f.root, dir);
		char *d = tu_path(f.root, dir);
		errs[i] = tu_path(f.root, err);
		char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--cache-db", f.cache, "--dir", d,
				"--no-content", "--", "true", NULL};
		pids[i] = tu_spawn(argv, NULL, errs[i]);
		free(d);
	}
	for (int i = 0; i < N; i++) {
		int st = tu_wait(pids[i]);
		char *err = tu_read_file(errs[i], NULL);
		if (st != 0)
			fail_msg("first-time writer %d: exit %d: %s", i, st, err ? err : "");
		free(err);
		free(errs[i]);
	}
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs"), N);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.meta"), 2);
	fx_close(&f);
}

/* ---- push ---- */

static void test_push_twice(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *local = tu_path(f.root, "local.db");
	tu_write(f.root, "old.txt", "old", 3);
	for (int i = 0; i < 3; i++) {
		char script[64];
		snprintf(script, sizeof(script), "echo pushed %d > p.txt; rm -f old.txt", i);
		tu_result r;
		tu_harvestv(&r, NULL, NULL,
			    (const char *const[]){"run", "--db", local, "--dir", f.root, "--label",
						  "local", "--host", "sandbox-1", "--shell", "--",
						  script, NULL});
		expect_status(&r, 0, "local run");
		tu_result_free(&r);
	}
	const char *push[] = {"history", "push", "--db", local, "--to", f.db, NULL};
	for (int k = 0; k < 2; k++) {
		tu_result r;
		tu_harvestv(&r, NULL, NULL, push);
		expect_status(&r, 0, "history push");
		tj_value *v = tj_parse(r.out, r.out_len);
		assert_non_null(v);
		assert_int_equal(tj_int(tj_get(v, "pushed")), k == 0 ? 3 : 0);
		tj_free(v);
		tu_result_free(&r);
	}
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE host = 'sandbox-1'"), 3);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts"), 3);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.contents"), 3);
	/* What each run changed goes along: the first created p.txt and deleted old.txt. */
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts WHERE change = 'created'"), 1);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts WHERE change = 'modified'"),
			 2);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE deleted = '[\"old.txt\"]'"),
			 1);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE deleted = '[]'"), 2);
	/* Served from the fleet database, byte-exact. */
	tj_value *arts = hv_json(&f, (const char *const[]){"history", "artifacts", "--host",
							    "sandbox-1", NULL});
	assert_int_equal(tj_len(arts), 3);
	char id[24];
	snprintf(id, sizeof(id), "%lld", (long long)tj_int(tj_get(tj_at(arts, 0), "artifact_id")));
	tj_free(arts);
	tu_result r;
	hv(&r, &f, (const char *const[]){"history", "get", id, NULL});
	expect_status(&r, 0, "history get of a pushed artifact");
	assert_string_equal(r.out, "pushed 2\n");
	tu_result_free(&r);
	/* A later run, pushed with --since: only it is added. */
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"run", "--db", local, "--dir", f.root, "--", "true", NULL});
	expect_status(&r, 0, "a fourth local run");
	tu_result_free(&r);
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"history", "push", "--db", local, "--to", f.db, "--since",
					  "3", NULL});
	expect_status(&r, 0, "history push --since 3");
	assert_non_null(strstr(r.out, "\"pushed\":1"));
	tu_result_free(&r);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs"), 4);
	free(local);
	fx_close(&f);
}

/* Globs become LIKE patterns (with % and _ taken literally); bracket expressions are matched
 * by harvest, with the limit applied after them. */
static void test_patterns(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--no-content", "--shell", "--",
					 "touch a%b.txt a_b.txt axb.txt 'c[1].txt'", NULL});
	expect_status(&r, 0, "run");
	tu_result_free(&r);
	static const struct {
		const char *glob;
		const char *limit;
		size_t want;
	} cases[] = {
		{"a%b.txt", NULL, 1}, {"a_b*", NULL, 1},  {"a?b.txt", NULL, 3},
		{"*", NULL, 4},       {"[ac]*", NULL, 4}, {"[ac]*", "2", 2},
		{"c\\[1].txt", NULL, 1}, {"*.TXT", NULL, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[] = {"history", "artifacts", "--name", cases[i].glob,
				      cases[i].limit ? "--limit" : NULL, cases[i].limit, NULL};
		tj_value *v = hv_json(&f, args);
		if (tj_len(v) != cases[i].want)
			fail_msg("--name '%s': %zu artifacts, expected %zu", cases[i].glob, tj_len(v),
				 cases[i].want);
		tj_free(v);
	}
	tj_value *v = hv_json(&f, (const char *const[]){"history", "artifacts", "--mime",
							 "inode/*", NULL});
	assert_int_equal(tj_len(v), 4);
	tj_free(v);
	fx_close(&f);
}

/* harvest ARGS with the descriptor limit limit (only the standard streams open, stderr into
 * err): its exit status. */
static int run_fd_limited(int limit, const char *err, const char *const *args)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int z = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (e < 0 || z < 0 || dup2(z, 0) < 0 || dup2(z, 1) < 0 || dup2(e, 2) < 0)
			_exit(120);
		for (int fd = 3; fd < 4096; fd++)
			close(fd);
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(121);
		rl.rlim_cur = (rlim_t)limit;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(122);
		const char *argv[16];
		size_t n = 0;
		argv[n++] = HARVEST_BIN;
		for (size_t i = 0; args[i] && n < 15; i++)
			argv[n++] = args[i];
		argv[n] = NULL;
		execv(HARVEST_BIN, (char *const *)argv);
		_exit(123);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* A collect refused for too few descriptors is refused before it opens anything: the count
 * it needs includes the PostgreSQL connection's socket, so at every limit below the one that
 * works, the schema is not created and the cache file not made (a check made only after
 * connecting failed there, after both). */
static void test_collect_fd_minimum(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *dir = tu_path(f.root, "out");
	tu_mkdir(f.root, "out");
	tu_write(dir, "a.txt", "a\n", 2);
	char *err = tu_path(f.root, "err");
	const char *args[] = {"collect", "--db", f.db, "--cache-db", f.cache, dir, NULL};
	int limit = 4;
	for (; limit < 64; limit++) {
		int st = run_fd_limited(limit, err, args);
		char *msg = tu_read_file(err, NULL);
		if (st == 0) {
			free(msg);
			break;
		}
		if (st != 1 || !strstr(msg, "too few file descriptors") ||
		    strchr(msg, '\n') != msg + strlen(msg) - 1)
			fail_msg("collect at limit %d: exit %d: %s", limit, st, msg);
		struct stat sb;
		if (stat(f.cache, &sb) == 0)
			fail_msg("collect at limit %d opened the cache before refusing: %s", limit,
				 msg);
		if (q(&f, "SELECT count(*) FROM pg_namespace WHERE nspname = 'harvest'") != 0)
			fail_msg("collect at limit %d connected before refusing: %s", limit, msg);
		free(msg);
	}
	assert_true(limit < 64);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.artifacts"), 1);
	free(err);
	free(dir);
	fx_close(&f);
}

/* mime with a PostgreSQL --db uses the local cache file that collect and run use: the one
 * --cache-db names (not the XDG location), without connecting to the server. */
static void test_mime_cache_db(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	assert_int_equal(setenv("XDG_DATA_HOME", f.root, 1), 0);
	tu_write(f.root, "a.txt", "hello\n", 6);
	char *file = tu_path(f.root, "a.txt");
	tu_result r;
	hv(&r, &f, (const char *const[]){"mime", file, NULL});
	unsetenv("XDG_DATA_HOME");
	expect_status(&r, 0, "mime --cache-db");
	assert_non_null(strstr(r.out, "text/plain"));
	tu_result_free(&r);
	struct stat sb;
	assert_int_equal(stat(f.cache, &sb), 0);
	char *xdg = tu_path(f.root, "harvest/harvest.db");
	assert_int_not_equal(stat(xdg, &sb), 0);
	free(xdg);
	/* The server was not needed: no schema was made. */
	assert_int_equal(q(&f, "SELECT count(*) FROM pg_namespace WHERE nspname = 'harvest'"), 0);
	free(file);
	fx_close(&f);
}

/* push from a local history that does not exist: an error naming it, and no empty file
 * made in its place. */
/* A pushed run takes its place among the fleet's runs by when it began, not by when it was
 * pushed (its id): a run that began later, live on the server, is newer, is listed first and
 * is the one prune --keep-runs 1 keeps. */
static void test_push_keeps_start_order(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *local = tu_path(f.root, "local.db");
	tu_result r;
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"run", "--db", local, "--dir", f.root, "--label", "older",
					  "--", "true", NULL});
	expect_status(&r, 0, "the local run");
	tu_result_free(&r);
	hv(&r, &f, (const char *const[]){"run", "--dir", f.root, "--label", "newer", "--", "true",
					  NULL});
	expect_status(&r, 0, "the live run");
	tu_result_free(&r);
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"history", "push", "--db", local, "--to", f.db, NULL});
	expect_status(&r, 0, "history push");
	tu_result_free(&r);
	/* the pushed run has the higher id */
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE label = 'older'::bytea AND"
			       " id > (SELECT id FROM harvest.runs WHERE label = 'newer'::bytea)"),
			 1);
	tj_value *v = hv_json(&f, (const char *const[]){"history", "runs", NULL});
	assert_int_equal(tj_len(v), 2);
	assert_string_equal(tj_str(tj_get(tj_at(v, 0), "label"), NULL), "newer");
	assert_string_equal(tj_str(tj_get(tj_at(v, 1), "label"), NULL), "older");
	tj_free(v);
	v = hv_json(&f, (const char *const[]){"history", "runs", "--limit", "1", NULL});
	assert_string_equal(tj_str(tj_get(tj_at(v, 0), "label"), NULL), "newer");
	tj_free(v);
	v = hv_json(&f, (const char *const[]){"history", "prune", "--keep-runs", "1", NULL});
	tj_free(v);
	v = hv_json(&f, (const char *const[]){"history", "runs", NULL});
	assert_int_equal(tj_len(v), 1);
	assert_string_equal(tj_str(tj_get(tj_at(v, 0), "label"), NULL), "newer");
	tj_free(v);
	free(local);
	fx_close(&f);
}

static int64_t pushed(const char *local, const char *to)
{
	tu_result r;
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"history", "push", "--db", local, "--to", to, NULL});
	expect_status(&r, 0, "history push");
	tj_value *v = tj_parse(r.out, r.out_len);
	assert_non_null(v);
	int64_t n = tj_int(tj_get(v, "pushed"));
	tj_free(v);
	tu_result_free(&r);
	return n;
}

static void local_run(const char *local, const char *dir, const char *label)
{
	tu_result r;
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"run", "--db", local, "--dir", dir, "--label", label,
					  "--host", "sandbox-1", "--", "true", NULL});
	expect_status(&r, 0, "a local run");
	tu_result_free(&r);
}

/* Pushing again after the fleet pruned pushed runs does not bring them back; two copies of one
 * database (a sandbox image made with a history in it) number their runs alike under one
 * identity, and each copy's runs are pushed, once. */
static void test_push_after_prune_and_copies(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *local = tu_path(f.root, "local.db");
	for (int i = 0; i < 4; i++)
		local_run(local, f.root, "early");
	assert_int_equal(pushed(local, f.db), 4);
	tj_value *v = hv_json(&f, (const char *const[]){"history", "prune", "--keep-runs", "1", NULL});
	tj_free(v);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs"), 1);
	assert_int_equal(pushed(local, f.db), 0);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs"), 1);
	local_run(local, f.root, "late");
	assert_int_equal(pushed(local, f.db), 1);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs"), 2);

	/* The copies: one database, a run in it, then copied twice and run in each. */
	char *tpl = tu_path(f.root, "tpl.db"), *a = tu_path(f.root, "a.db"),
	     *b = tu_path(f.root, "b.db");
	local_run(tpl, f.root, "template");
	char cmd[8192];
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && cp '%s' '%s'", tpl, a, tpl, b);
	assert_int_equal(system(cmd), 0);
	local_run(a, f.root, "from-a");
	local_run(b, f.root, "from-b");
	assert_int_equal(pushed(a, f.db), 2);     /* the template's run and a's */
	assert_int_equal(pushed(b, f.db), 1);     /* b's: the template's is the same run */
	assert_int_equal(pushed(a, f.db), 0);
	assert_int_equal(pushed(b, f.db), 0);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE label = 'from-a'::bytea"), 1);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE label = 'from-b'::bytea"), 1);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs WHERE label = 'template'::bytea"),
			 1);
	free(tpl);
	free(a);
	free(b);
	free(local);
	fx_close(&f);
}

static void test_push_missing_local(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *local = tu_path(f.root, "typo.db");
	tu_result r;
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"history", "push", "--db", local, "--to", f.db, NULL});
	expect_status(&r, 1, "history push from a missing file");
	expect_one_line(&r, "typo.db", "history push from a missing file");
	tu_result_free(&r);
	struct stat sb;
	assert_int_not_equal(stat(local, &sb), 0);
	free(local);
	fx_close(&f);
}

/* A --db with another scheme (a capital, a driver suffix, a typo) is a mistyped URI: refused
 * in one line without its password, the command not started, no file made for it. */
static void test_other_scheme(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *marker = tu_path(root, "started");
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "touch %s", marker);
	const char *uris[] = {
		"PostgreSQL://u:s3cret-pw@localhost:1/db",
		"postgresql+psycopg://u:s3cret-pw@localhost:1/db",
		"postgress://u@localhost:1/db?password=s3cret-pw",
	};
	for (size_t i = 0; i < sizeof(uris) / sizeof(uris[0]); i++) {
		tu_result r;
		tu_harvestv(&r, root, NULL,
			    (const char *const[]){"run", "--db", uris[i], "--dir", root, "--shell",
						  "--", cmd, NULL});
		expect_status(&r, 125, "run, another scheme");
		expect_one_line(&r, "not a postgresql://", "run, another scheme");
		if (strstr(r.err, "s3cret"))
			fail_msg("the password is in the message: %s", r.err);
		tu_result_free(&r);
		struct stat sb;
		assert_int_not_equal(stat(marker, &sb), 0);
		size_t n = strcspn(uris[i], ":");
		char made[4200];
		snprintf(made, sizeof(made), "%s/%.*s:", root, (int)n, uris[i]);
		assert_int_not_equal(stat(made, &sb), 0); /* "PostgreSQL:", the path's first part */
	}
	/* libpq's key=value strings are no file names either (one became a SQLite file named
	 * after it, password and all): refused without being repeated, nothing made. */
	const char *conninfo[] = {
		"host=127.0.0.1 port=1 user=harvest password=s3cret-pw dbname=postgres",
		" dbname = postgres password=s3cret-pw",
	};
	for (size_t i = 0; i < sizeof(conninfo) / sizeof(conninfo[0]); i++) {
		tu_result r;
		tu_harvestv(&r, root, NULL,
			    (const char *const[]){"run", "--db", conninfo[i], "--dir", root, "--shell",
						  "--", cmd, NULL});
		expect_status(&r, 125, "run, a key=value string");
		expect_one_line(&r, "libpq key=value connection string", "run, a key=value string");
		if (strstr(r.err, "s3cret"))
			fail_msg("the password is in the message: %s", r.err);
		tu_result_free(&r);
		struct stat sb;
		assert_int_not_equal(stat(marker, &sb), 0);
		char made[4200];
		snprintf(made, sizeof(made), "%s/%s", root, conninfo[i]);
		assert_int_not_equal(stat(made, &sb), 0);
	}
	/* push's usage mistakes are usage errors (2), as every command's are. */
	char *local = tu_path(root, "local.db");
	const char *const bad_push[][7] = {
		{"history", "push", "--db", local, "--to", local, NULL},
		{"history", "push", "--db", "postgresql:///x?host=/nonexistent", "--to",
		 "postgresql:///y?host=/nonexistent", NULL},
	};
	for (size_t i = 0; i < 2; i++) {
		tu_result r;
		tu_harvestv(&r, root, NULL, bad_push[i]);
		expect_status(&r, 2, "history push, a usage mistake");
		tu_result_free(&r);
	}
	free(local);
	free(marker);
}

/* HARVEST_DB naming a PostgreSQL database: the history goes there, the cache to the XDG
 * location (not to a file named after the URI). */
static void test_harvest_db_env(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	assert_int_equal(setenv("HARVEST_DB", f.db, 1), 0);
	assert_int_equal(setenv("XDG_DATA_HOME", f.root, 1), 0);
	tu_result r;
	tu_harvestv(&r, NULL, NULL, (const char *const[]){"run", "--dir", f.root, "--no-content",
							  "--", "true", NULL});
	unsetenv("HARVEST_DB");
	unsetenv("XDG_DATA_HOME");
	expect_status(&r, 0, "run with HARVEST_DB");
	tu_result_free(&r);
	assert_int_equal(q(&f, "SELECT count(*) FROM harvest.runs"), 1);
	char *xdg = tu_path(f.root, "harvest/harvest.db");
	struct stat sb;
	assert_int_equal(stat(xdg, &sb), 0);
	free(xdg);
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_fleet_writers, tu_cleanup),
		cmocka_unit_test_teardown(test_kill_writers, tu_cleanup),
		cmocka_unit_test_teardown(test_lock_timeout_ends_the_run, tu_cleanup),
		cmocka_unit_test_teardown(test_prune_racing_writers, tu_cleanup),
		cmocka_unit_test_teardown(test_unreachable, tu_cleanup),
		cmocka_unit_test_teardown(test_not_harvests_schema, tu_cleanup),
		cmocka_unit_test_teardown(test_newer_schema, tu_cleanup),
		cmocka_unit_test_teardown(test_older_schema_read, tu_cleanup),
		cmocka_unit_test_teardown(test_no_rights, tu_cleanup),
		cmocka_unit_test_teardown(test_first_writers_race, tu_cleanup),
		cmocka_unit_test_teardown(test_push_twice, tu_cleanup),
		cmocka_unit_test_teardown(test_patterns, tu_cleanup),
		cmocka_unit_test_teardown(test_harvest_db_env, tu_cleanup),
		cmocka_unit_test_teardown(test_server_lost_mid_run, tu_cleanup),
		cmocka_unit_test_teardown(test_server_frozen, tu_cleanup),
		cmocka_unit_test_teardown(test_server_frozen_second_signal, tu_cleanup),
		cmocka_unit_test_teardown(test_second_signal_healthy_server, tu_cleanup),
		cmocka_unit_test_teardown(test_collect_fd_minimum, tu_cleanup),
		cmocka_unit_test_teardown(test_mime_cache_db, tu_cleanup),
		cmocka_unit_test_teardown(test_push_keeps_start_order, tu_cleanup),
		cmocka_unit_test_teardown(test_push_after_prune_and_copies, tu_cleanup),
		cmocka_unit_test_teardown(test_push_missing_local, tu_cleanup),
		cmocka_unit_test_teardown(test_other_scheme, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, tu_pg_stop);
}
