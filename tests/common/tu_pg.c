#include "tu_pg.h"

#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A server: its directory and the URI of its "postgres" database. own: started by this
 * process (so stopped by it). */
typedef struct pg_server {
	char *dir, *uri;
	bool own;
} pg_server;

static pg_server shared, priv;
/* The databases this process created (dropped by tu_pg_stop): their URIs on their server's
 * "postgres" database and their names. */
static struct {
	const pg_server *srv;
	char name[64];
} made[256];
static int n_made;

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

static char *uri_of(const char *dir, const char *db)
{
	size_t len = strlen(dir) + strlen(db) + 64;
	char *uri = malloc(len);
	assert_non_null(uri);
	snprintf(uri, len, "postgresql:///%s?host=%s&user=harvest", db, dir);
	return uri;
}

static void server_start(pg_server *s)
{
	char buf[2048], pid[32];
	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	fixture("start", pid, buf, sizeof(buf));
	char *nl = strchr(buf, '\n');
	if (!nl)
		fail_msg("pg_fixture.sh start: unexpected output '%s'", buf);
	*nl = '\0';
	s->dir = strdup(buf);
	assert_non_null(s->dir);
	s->uri = uri_of(s->dir, "postgres");
	s->own = true;
}

const char *tu_pg_start(void)
{
	if (shared.uri)
		return shared.uri;
	const char *dir = getenv("HARVEST_TEST_PG_DIR");
	if (dir && *dir) {
		shared.dir = strdup(dir);
		assert_non_null(shared.dir);
		shared.uri = uri_of(dir, "postgres");
		/* Fails the test when the suite's server is not there. */
		(void)tu_pg_int(shared.uri, "SELECT 1");
	} else {
		server_start(&shared);
	}
	return shared.uri;
}

static void server_stop(pg_server *s)
{
	if (s->dir && s->own)
		fixture("stop", s->dir, NULL, 0);
	free(s->dir);
	free(s->uri);
	memset(s, 0, sizeof(*s));
}

int tu_pg_stop(void **state)
{
	(void)state;
	/* The suite's server outlives this program: leave it as it was found. */
	for (int i = 0; i < n_made; i++) {
		if (made[i].srv->own)
			continue;
		char sql[128];
		snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE)", made[i].name);
		tu_pg_exec(made[i].srv->uri, sql);
	}
	n_made = 0;
	server_stop(&shared);
	server_stop(&priv);
	return 0;
}

static char *newdb_on(const pg_server *s)
{
	if (n_made == (int)(sizeof(made) / sizeof(made[0])))
		fail_msg("tu_pg: more than %d databases in one test program", n_made);
	/* pid and time: unique on a server shared by every test program of the suite. */
	snprintf(made[n_made].name, sizeof(made[0].name), "hv_%ld_%lld_%d", (long)getpid(),
		 (long long)time(NULL), n_made);
	made[n_made].srv = s;
	char sql[128];
	snprintf(sql, sizeof(sql), "CREATE DATABASE %s", made[n_made].name);
	tu_pg_exec(s->uri, sql);
	return uri_of(s->dir, made[n_made++].name);
}

char *tu_pg_newdb(void)
{
	tu_pg_start();
	return newdb_on(&shared);
}

char *tu_pg_newdb_private(void)
{
	if (!priv.uri)
		server_start(&priv);
	return newdb_on(&priv);
}

void tu_pg_kill(void)
{
	if (!priv.dir)
		fail_msg("tu_pg_kill: no private server (tu_pg_newdb_private)");
	fixture("pgstop", priv.dir, NULL, 0);
}

void tu_pg_restart(void)
{
	if (!priv.dir)
		fail_msg("tu_pg_restart: no private server (tu_pg_newdb_private)");
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "setpriv --reuid=nobody --regid=nogroup --clear-groups "
		 "--reset-env -- /usr/lib/postgresql/15/bin/pg_ctl -D '%s/data' -l '%s/server.log' "
		 "-w -t 60 -o \"-c listen_addresses='' -c unix_socket_directories='%s' -c fsync=off "
		 "-c max_connections=200\" start >/dev/null 2>&1", priv.dir, priv.dir, priv.dir);
	if (system(cmd) != 0)
		fail_msg("cannot restart the server: %s", cmd);
}

/* SIGSTOP or SIGCONT to the postmaster of the private server and to every process it forked
 * (its backends, checkpointer...): frozen, the server takes connections into its socket's
 * backlog and answers nothing, as a server stopped by a debugger, swapped out or cut off. */
void tu_pg_freeze(int frozen)
{
	if (!priv.dir)
		fail_msg("tu_pg_freeze: no private server (tu_pg_newdb_private)");
	char path[1024];
	snprintf(path, sizeof(path), "%s/data/postmaster.pid", priv.dir);
	FILE *f = fopen(path, "r");
	long master = 0;
	if (!f || fscanf(f, "%ld", &master) != 1 || master <= 0)
		fail_msg("tu_pg_freeze: cannot read %s", path);
	fclose(f);
	int sig = frozen ? SIGSTOP : SIGCONT;
	if (!frozen && kill((pid_t)master, sig) != 0)
		fail_msg("tu_pg_freeze: kill %ld: %s", master, strerror(errno));
	DIR *d = opendir("/proc");
	if (!d)
		fail_msg("tu_pg_freeze: /proc: %s", strerror(errno));
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		char stat_path[64], line[512];
		snprintf(stat_path, sizeof(stat_path), "/proc/%ld/stat", pid);
		FILE *sf = fopen(stat_path, "r");
		if (!sf)
			continue;
		bool ok = fgets(line, sizeof(line), sf) != NULL;
		fclose(sf);
		const char *rp = ok ? strrchr(line, ')') : NULL;
		long ppid = 0;
		char state;
		if (rp && sscanf(rp + 1, " %c %ld", &state, &ppid) == 2 && ppid == master)
			kill((pid_t)pid, sig);
	}
	closedir(d);
	if (frozen && kill((pid_t)master, sig) != 0)
		fail_msg("tu_pg_freeze: kill %ld: %s", master, strerror(errno));
}

static PGconn *connect_or_fail(const char *uri)
{
	PGconn *c = PQconnectdb(uri);
	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("%s: %s", uri, PQerrorMessage(c));
	return c;
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
