/* How the library waits for a PostgreSQL server (a real PostgreSQL 15, tu_pg.h), seen through
 * hv_store_push, which keeps a connection of its own: hv_store_interrupt on the local handle
 * stops a push whose statement waits (on a lock another session holds, so the server says
 * nothing) about 1 s later, with a message that says so, and a later push does the work; a
 * server process killed while a statement waits gives libpq's reason alone on one line. */
#include "testutil.h"
#include "tu_pg.h"

#include "harvest/store.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A local SQLite history with one ended run and its file, and the PostgreSQL database at uri
 * with harvest's schema (made by a run recorded there): what a push needs. Returns the local
 * database's path. */
static char *histories(const char *root, const char *uri)
{
	char *local = tu_path(root, "local.db");
	char *cache = tu_path(root, "cache.db");
	tu_mkdir(root, "d");
	char *d = tu_path(root, "d");
	tu_result r;
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"run", "--db", local, "--dir", d, "--shell", "--",
					  "echo pushed > f.txt", NULL});
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	tu_harvestv(&r, NULL, NULL,
		    (const char *const[]){"run", "--db", uri, "--cache-db", cache, "--dir", d, "--",
					  "true", NULL});
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	free(d);
	free(cache);
	return local;
}

/* A session of the test's own holding harvest.contents locked (ACCESS EXCLUSIVE) in an open
 * transaction: every push waits on it, with nothing from the server. */
static PGconn *hold_contents_lock(const char *uri)
{
	PGconn *h = PQconnectdb(uri);
	if (PQstatus(h) != CONNECTION_OK)
		fail_msg("%s: %s", uri, PQerrorMessage(h));
	PGresult *res = PQexec(h, "BEGIN; LOCK TABLE harvest.contents IN ACCESS EXCLUSIVE MODE");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		fail_msg("lock: %s", PQerrorMessage(h));
	PQclear(res);
	return h;
}

struct interrupter {
	hv_store *st;
	long after_ms;
};

static void *interrupt_later(void *arg)
{
	struct interrupter *x = arg;
	tu_sleep_ms(x->after_ms);
	hv_store_interrupt(x->st);
	return NULL;
}

static void test_interrupt_stops_push(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *uri = tu_pg_newdb();
	char *local = histories(root, uri);
	PGconn *h = hold_contents_lock(uri);
	hv_store *st = NULL;
	assert_int_equal(hv_store_open(&st, local, 0), HV_OK);
	struct interrupter x = {.st = st, .after_ms = 500};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, interrupt_later, &x), 0);
	uint64_t pushed = 0;
	double t0 = tu_now_s();
	hv_status rc = hv_store_push(st, uri, 0, &pushed);
	double took = tu_now_s() - t0;
	assert_int_equal(pthread_join(t, NULL), 0);
	print_message("push: %d after %.2f s: %s\n", rc, took, hv_error_last());
	assert_int_equal(rc, HV_EDB);
	assert_int_equal(pushed, 0);
	assert_non_null(strstr(hv_error_last(), "interrupted while waiting for the server"));
	assert_null(strchr(hv_error_last(), '\n'));
	/* Given up 1 s after the server fell silent, not at its own 60 s statement timeout. */
	assert_true(took < 20.0);
	hv_store_close(st);
	PQclear(PQexec(h, "ROLLBACK"));
	PQfinish(h);
	/* The lock gone, a new handle pushes the run. */
	assert_int_equal(hv_store_open(&st, local, 0), HV_OK);
	assert_int_equal(hv_store_push(st, uri, 0, &pushed), HV_OK);
	assert_int_equal(pushed, 1);
	hv_store_close(st);
	free(local);
	free(uri);
}

struct pusher {
	hv_store *st;
	const char *uri;
	hv_status rc;
	char message[2048];
};

static void *push_run(void *arg)
{
	struct pusher *p = arg;
	uint64_t pushed = 0;
	p->rc = hv_store_push(p->st, p->uri, 0, &pushed);
	snprintf(p->message, sizeof(p->message), "%s", hv_error_last());
	return NULL;
}

/* The pid of the server process of the session named harvest that waits on a lock, or 0. */
static long waiting_backend(const char *uri)
{
	PGconn *c = PQconnectdb(uri);
	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("%s: %s", uri, PQerrorMessage(c));
	PGresult *res = PQexec(c, "SELECT pid FROM pg_stat_activity WHERE application_name ="
				  " 'harvest' AND wait_event_type = 'Lock'");
	long pid = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0
			   ? strtol(PQgetvalue(res, 0, 0), NULL, 10)
			   : 0;
	PQclear(res);
	PQfinish(c);
	return pid;
}

static void test_server_process_killed(void **state)
{
	(void)state;
	/* On a server of its own: killing a server process restarts all of that server's. */
	char *root = tu_tmpdir();
	char *uri = tu_pg_newdb_private();
	char *local = histories(root, uri);
	PGconn *h = hold_contents_lock(uri);
	struct pusher p = {.uri = uri};
	assert_int_equal(hv_store_open(&p.st, local, 0), HV_OK);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, push_run, &p), 0);
	long pid = 0;
	for (int i = 0; i < 1500 && !(pid = waiting_backend(uri)); i++)
		tu_sleep_ms(20);
	if (!pid)
		fail_msg("the push never waited on the lock");
	assert_int_equal(kill((pid_t)pid, SIGKILL), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	print_message("push: %d: %s\n", p.rc, p.message);
	assert_int_equal(p.rc, HV_EDB);
	assert_null(strchr(p.message, '\n'));
	assert_non_null(strstr(p.message, "server closed the connection unexpectedly"));
	/* libpq's reason alone, not a second failure of a read on the closed socket. */
	assert_null(strstr(p.message, "invalid socket"));
	hv_store_close(p.st);
	PQfinish(h);
	free(local);
	free(uri);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_interrupt_stops_push, tu_cleanup),
		cmocka_unit_test_teardown(test_server_process_killed, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, tu_pg_stop);
}
