/* A real PostgreSQL server for the history tests (scripts/pg_fixture.sh), a fresh database per
 * case. scripts/test.sh starts one server for the whole suite and names its directory in
 * $HARVEST_TEST_PG_DIR; without it (ctest run by hand) each test program starts its own. A
 * server that cannot be started or reached fails the test: never a skip. */
#ifndef TU_PG_H
#define TU_PG_H

#include <stdint.h>

/* The server ($HARVEST_TEST_PG_DIR's, else one started once for this process and stopped by
 * tu_pg_stop, or by the fixture's watchdog when this process is gone). Returns the URI of its
 * "postgres" database. */
const char *tu_pg_start(void);
/* Drops the databases this process created and stops the servers it started (a group
 * teardown). */
int tu_pg_stop(void **state);
/* A fresh, empty database on a server of this process's own (never the shared one), which
 * tu_pg_kill stops and tu_pg_restart starts again: its URI (malloc'd). */
char *tu_pg_newdb_private(void);
/* Stops the private server but keeps its directory (a server lost mid-run). */
void tu_pg_kill(void);
/* Starts the stopped private server again on the same directory. */
void tu_pg_restart(void);
/* Freezes the private server (SIGSTOP to all its processes: it answers nothing) when frozen is
 * non-zero, else lets it go on (SIGCONT). */
void tu_pg_freeze(int frozen);
/* Creates a fresh, empty database: its URI (malloc'd). */
char *tu_pg_newdb(void);
/* Runs sql on the database at uri: fails the test on an error. */
void tu_pg_exec(const char *uri, const char *sql);
/* The first column of the first row of sql, as an integer. */
int64_t tu_pg_int(const char *uri, const char *sql);

#endif
