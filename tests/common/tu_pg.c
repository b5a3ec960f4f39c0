#include "tu_pg.h"

#include "testutil.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *pg_dir, *pg_uri;
static int pg_n;

static void fixture(const char *verb, const char *arg, char *out, size_t cap)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s/scripts/pg_fixture.sh %s '%s'", HARVEST_SOURCE_DIR, verb,
		 arg);
	FILE *p = popen(cmd, "r");
	if (!p)
		fail_msg("cannot run %s", cmd);
	size_t n = out ? fread(out, 1, cap - 1, p) : 0;
	if (out)
		out[n] = '\0';
	int st = pclose(p);
	if (st != 0)
		fail_msg("%s failed (status %d): PostgreSQL 15 is needed for this test", cmd, st);
}

const char *tu_pg_start(void)
{
	if (pg_uri)
		return pg_uri;
	char buf[2048], pid[32];
	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	fixture("start", pid, buf, sizeof(buf));
	char *nl = strchr(buf, '\n');
	if (!nl)
		fail_msg("pg_fixture.sh start: unexpected output '%s'", buf);
	*nl = '\0';
	pg_dir = strdup(buf);
	char *uri = nl + 1;
	uri[strcspn(uri, "\n")] = '\0';
	pg_uri = strdup(uri);
	return pg_uri;
}

int tu_pg_stop(void **state)
{
	(void)state;
	if (pg_dir)
		fixture("stop", pg_dir, NULL, 0);
	free(pg_dir);
	free(pg_uri);
	pg_dir = pg_uri = NULL;
	return 0;
}

void tu_pg_kill(void)
{
	fixture("pgstop", pg_dir, NULL, 0);
}

void tu_pg_restart(void)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "setpriv --reuid=nobody --regid=nogroup --clear-groups "
		 "--reset-env -- /usr/lib/postgresql/15/bin/pg_ctl -D '%s/data' -l '%s/server.log' "
		 "-w -t 60 -o \"-c listen_addresses='' -c unix_socket_directories='%s' -c fsync=off "
		 "-c max_connections=200\" start >/dev/null 2>&1", pg_dir, pg_dir, pg_dir);
	if (system(cmd) != 0)
		fail_msg("cannot restart the server: %s", cmd);
}

static PGconn *connect_or_fail(const char *uri)
{
	PGconn *c = PQconnectdb(uri);
	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("%s: %s", uri, PQerrorMessage(c));
	return c;
}

char *tu_pg_newdb(void)
{
	tu_pg_start();
	char sql[128], *uri = NULL;
	snprintf(sql, sizeof(sql), "CREATE DATABASE hv_%ld_%d", (long)getpid(), ++pg_n);
	tu_pg_exec(pg_uri, sql);
	size_t len = strlen(pg_uri) + 64;
	uri = malloc(len);
	assert_non_null(uri);
	snprintf(uri, len, "postgresql:///hv_%ld_%d?host=%s&user=harvest", (long)getpid(), pg_n,
		 pg_dir);
	return uri;
}

void tu_pg_exec(const char *uri, const char *sql)
{
	PGconn *c = connect_or_fail(uri);
	PGresult *r = PQexec(c, sql);
	ExecStatusType s = PQresultStatus(r);
	if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
}

int64_t tu_pg_int(const char *uri, const char *sql)
{
	PGconn *c = connect_or_fail(uri);
	PGresult *r = PQexec(c, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) < 1)
		fail_msg("%s: %s", sql, PQerrorMessage(c));
	int64_t v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	PQfinish(c);
	return v;
}
