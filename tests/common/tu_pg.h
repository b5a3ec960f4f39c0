/* A real PostgreSQL server for the history tests (scripts/pg_fixture.sh): started once per
 * test program, a fresh database per case. A server that cannot start fails the test. */
#ifndef TU_PG_H
#define TU_PG_H

#include <stdint.h>

/* Starts the server (once; stopped by tu_pg_stop, or by the fixture's watchdog when this
 * process is gone). Returns the URI of its "postgres" database. */
const char *tu_pg_start(void);
/* Stops the server and removes its directory (a group teardown). */
int tu_pg_stop(void **state);
/* Stops the server but keeps its directory (a server lost mid-run). */
void tu_pg_kill(void);
/* Starts the stopped server again on the same directory. */
void tu_pg_restart(void);
/* Creates a fresh, empty database: its URI (malloc'd). */
char *tu_pg_newdb(void);
/* Runs sql on the database at uri: fails the test on an error. */
void tu_pg_exec(const char *uri, const char *sql);
/* The first column of the first row of sql, as an integer. */
int64_t tu_pg_int(const char *uri, const char *sql);

#endif
