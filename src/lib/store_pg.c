/* The PostgreSQL history backend: runs, artifacts and contents in the schema "harvest" of a
 * database shared by many writers on many hosts (libpq). Ids come from identity columns, so
 * they are unique across writers. A run's end and its artifacts are one transaction; contents
 * are deduplicated with INSERT ... ON CONFLICT DO NOTHING. Prune and writers meet on a table
 * lock of harvest.contents: every finishing writer takes ROW EXCLUSIVE, prune SHARE ROW
 * EXCLUSIVE, so prune's "no artifact references it" is judged only after every writer that
 * may reference a content has committed, and no writer adds a reference while prune deletes. */
#include "dl_pq.h"
#include "harvest/records.h"
#include "store_internal.h"
#include "test_hook.h"
#include "utf8.h"

#include <ctype.h>
#include <endian.h>
#include <errno.h>
#include <fnmatch.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Keys of pg_advisory_xact_lock: the schema's creation and migrations ("HRVS" and 1). */
#define PG_LOCK_CLASS 0x48525653
#define PG_LOCK_SCHEMA 1
/* Bounded waits: a server that does not answer must not hang a run. */
#define PG_CONNECT_TIMEOUT "10"
#define PG_OPTIONS "-c statement_timeout=60000 -c idle_in_transaction_session_timeout=60000"
/* The server ends a statement after statement_timeout and says so; a server that stays silent
 * 30 s longer is not answering at all (stopped, frozen, cut off by the network, where TCP may
 * wait for many minutes), and the statement is given up on this side: the connection is
 * closed and every later call fails at once. Prune's statements get 600 s on the server.
 * HARVEST_TEST_PG_SILENCE (test builds) makes it 2 s. */
#define PG_SILENCE_MS 90000
#define PG_PRUNE_SILENCE_MS 630000
#define PG_TEST_SILENCE_MS 2000
/* How often a wait looks at hv_store_interrupt's flag (a signal may land on another thread). */
#define PG_POLL_SLICE_MS 100
/* After hv_store_interrupt, a wait is given up once the server has been silent this long: a
 * server that answers (in milliseconds) is not cut off, so what it was told is not lost. */
#define PG_INTERRUPT_SILENCE_MS 1000
/* Rows per multi-row INSERT, and bytes of contents per INSERT. */
#define PG_BATCH_ROWS 1000
#define PG_BATCH_BYTES (8u << 20)

struct hvpg {
	PGconn *c;
	char *where;        /* the URI with its password masked: for messages */
	bool have_schema;   /* false: a read-only open of a database without harvest's schema */
	int64_t version;    /* the schema's version: older than ours only in a read-only open
	                     * (a writer upgrades it), whose queries leave out what it lacks */
	int silence_ms;     /* a wait with nothing from the server for this long is given up */
	const atomic_bool *outer; /* another handle's interrupt flag that stops this one too */
	char lost[160];     /* why the connection was given up and closed (c is then NULL) */
	char host[256];
};

/* Version 1 of harvest's schema. meta holds ('application', 'harvest') and
 * ('schema_version', N): a "harvest" schema without them is someone else's. */
static const char pg_schema_v1[] =
	"CREATE TABLE harvest.meta (key text PRIMARY KEY, value text NOT NULL);"
	"INSERT INTO harvest.meta VALUES ('application', 'harvest'), ('schema_version', '0');"
	"CREATE TABLE harvest.runs ("
	"  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
	"  host text COLLATE \"C\","
	"  label bytea,"
	"  command text,"
	"  dir bytea NOT NULL,"
	"  started_at_ns bigint NOT NULL,"
	"  ended_at_ns bigint,"
	"  exit_code integer,"
	"  timed_out boolean NOT NULL DEFAULT false,"
	"  duration_ms bigint,"
	"  stdout_truncated boolean NOT NULL DEFAULT false,"
	"  stderr_truncated boolean NOT NULL DEFAULT false,"
	"  skipped text,"
	"  end_reason text,"
	"  owner text,"
	"  stdout bytea,"
	"  stderr bytea,"
	"  origin text UNIQUE"   /* a pushed run: 'host db-identity local-id' */
	");"
	"CREATE INDEX runs_started ON harvest.runs(started_at_ns);"
	"CREATE INDEX runs_label ON harvest.runs(label);"
	"CREATE INDEX runs_host ON harvest.runs(host, id);"
	"CREATE INDEX runs_open ON harvest.runs(id) WHERE ended_at_ns IS NULL;"
	"CREATE TABLE harvest.contents ("
	"  sha256 text COLLATE \"C\" PRIMARY KEY,"
	"  size bigint NOT NULL,"
	"  bytes bytea NOT NULL"
	");"
	"CREATE TABLE harvest.artifacts ("
	"  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
	"  run_id bigint NOT NULL REFERENCES harvest.runs(id) ON DELETE CASCADE,"
	"  path bytea NOT NULL,"
	"  name bytea NOT NULL,"
	"  mime_type text COLLATE \"C\" NOT NULL,"
	"  size bigint NOT NULL,"
	"  sha256 text COLLATE \"C\" NOT NULL,"
	"  recorded_at_ns bigint NOT NULL,"
	"  content_stored boolean NOT NULL DEFAULT false"
	");"
	"CREATE INDEX artifacts_run ON harvest.artifacts(run_id DESC, id);"
	"CREATE INDEX artifacts_mime ON harvest.artifacts(mime_type);"
	"CREATE INDEX artifacts_name ON harvest.artifacts(name);"
	"CREATE INDEX artifacts_sha256 ON harvest.artifacts(sha256);"
	"CREATE INDEX artifacts_recorded ON harvest.artifacts(recorded_at_ns);";

/* Version 2: what a run changed, as in the SQLite file's version 4: runs.deleted (a JSON
 * array of the paths that are gone; NULL for a collect of everything) and artifacts.change
 * ('created' or 'modified'; NULL likewise). */
static const char pg_schema_v2[] =
	"ALTER TABLE harvest.runs ADD COLUMN deleted text;"
	"ALTER TABLE harvest.artifacts ADD COLUMN change text;";

/* Step i brings the schema from version i to i + 1. Only ever append. */
static const char *const pg_migrations[] = {
	pg_schema_v1,
	pg_schema_v2,
};
_Static_assert(sizeof(pg_migrations) / sizeof(pg_migrations[0]) == HV_STORE_PG_SCHEMA_VERSION,
	       "one migration step per PostgreSQL schema version");

bool hvst_is_pg_uri(const char *s)
{
	return s && (!strncmp(s, "postgresql://", 13) || !strncmp(s, "postgres://", 11));
}

/* The length of a "password=" keyword at p, 0 if there is none. libpq percent-decodes a
 * URI's query keywords, so "pass%77ord=" names the password too. */
static size_t password_key(const char *p)
{
	static const char want[] = "password";
	size_t i = 0, k = 0;
	while (want[k]) {
		int c = (unsigned char)p[i];
		if (c == '%' && isxdigit((unsigned char)p[i + 1]) && isxdigit((unsigned char)p[i + 2])) {
			char hex[3] = {p[i + 1], p[i + 2], '\0'};
			c = (int)strtol(hex, NULL, 16);
			i += 3;
		} else if (c) {
			i++;
		} else {
			return 0;
		}
		if (tolower(c) != want[k++])
			return 0;
	}
	return p[i] == '=' ? i + 1 : 0;
}

/* For the authority of a URI (after "://"): the '@' that ends a user information holding an
 * unencoded '/' ("user:pa/ss@host"), else NULL. libpq ends the authority at that '/', so it
 * reads "user" as the host and the rest of the password as the port and dbname: it would
 * connect elsewhere and name the fragments in its messages. A numeric "port" is taken for
 * one (a dbname may hold an '@'). */
static const char *slash_in_userinfo(const char *auth)
{
	size_t n = strcspn(auth, "/@?#");
	if (auth[n] != '/')
		return NULL;
	const char *colon = NULL;
	for (size_t i = 0; i < n; i++)
		if (auth[i] == ':')
			colon = auth + i;
	if (!colon)
		return NULL;
	bool digits = colon + 1 < auth + n;
	for (const char *c = colon + 1; c < auth + n; c++)
		digits = digits && isdigit((unsigned char)*c);
	if (digits)
		return NULL;
	const char *rest = auth + n;
	size_t m = strcspn(rest, "@?# \t\n");
	return rest[m] == '@' ? rest + m : NULL;
}

void hvst_mask_secret(const char *msg, char *out, size_t cap)
{
	size_t o = 0;
	const char *p = msg;
	while (*p && o + 1 < cap) {
		/* "password=VALUE" (a keyword of a URI's query or a conninfo string). */
		size_t key = password_key(p);
		if (key) {
			const char *v = p + key;
			size_t n = strcspn(v, "&; \t\n'\"");
			for (const char *k = "password=***"; *k && o + 1 < cap; k++)
				out[o++] = *k;
			p = v + n;
			continue;
		}
		/* "scheme://user:PASSWORD@host": the ':' after the user, up to the '@'. The user
		 * information ends where libpq ends it, at the first '@' before any '/': a '?' or
		 * '#' before it is part of the password. */
		if (!strncmp(p, "://", 3)) {
			const char *auth = p + 3;
			size_t n = strcspn(auth, "/@ \t\n");
			/* A password with an unencoded '/', which libpq does not read as one (see
			 * slash_in_userinfo): masked up to its '@' all the same. */
			const char *at = auth[n] == '/' ? slash_in_userinfo(auth) : NULL;
			if (at)
				n = (size_t)(at - auth);
			if (auth[n] == '@') {
				const char *colon = memchr(auth, ':', n);
				if (colon) {
					size_t keep = (size_t)(colon - p) + 1;
					for (size_t i = 0; i < keep && o + 1 < cap; i++)
						out[o++] = p[i];
					for (const char *k = "***"; *k && o + 1 < cap; k++)
						out[o++] = *k;
					p = auth + n;
					continue;
				}
			}
		}
		char ch = *p++;
		if (ch == '\n' || ch == '\t' || ch == '\r')
			ch = ' ';
		out[o++] = ch;
	}
	while (o && out[o - 1] == ' ')
		o--;
	out[o] = '\0';
}

/* HV_EDB "<uri>: <what>: <libpq's reason>", on one line, passwords masked. */
static hv_status pg_error(hv_store *st, const char *what, const PGresult *res)
{
	/* The server's own words (its primary message, then detail and hint), without the
	 * statement excerpt and caret it adds for a position, which make no sense on one line. */
	char said[1024] = "";
	const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	if (primary) {
		const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
		const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
		snprintf(said, sizeof(said), "%s%s%s%s%s", primary, detail ? "; " : "",
			 detail ? detail : "", hint ? "; " : "", hint ? hint : "");
	}
	const char *reason = said[0] ? said : res ? PQresultErrorMessage(res) : "";
	if ((!reason || !*reason) && st->pg && !st->pg->c && st->pg->lost[0])
		reason = st->pg->lost;
	if (!reason || !*reason)
		reason = st->pg && st->pg->c ? PQerrorMessage(st->pg->c) : "no connection";
	if (!*reason && st->pg && st->pg->c && PQstatus(st->pg->c) == CONNECTION_BAD)
		reason = "the connection to the server was lost";
	char line[1024];
	hvst_mask_secret(reason, line, sizeof(line));
	if (!strncmp(line, "ERROR:  ", 8))
		memmove(line, line + 8, strlen(line + 8) + 1);
	return hv_error_set(HV_EDB, "%s: %s: %s", st->pg && st->pg->where ? st->pg->where : "?",
			    what, *line ? line : "unknown error");
}

/* ---- Parameters and results ----------------------------------------------------------- */

#define PG_MAX_PARAMS 16

typedef struct pgp {
	int n;
	const char *v[PG_MAX_PARAMS];
	int len[PG_MAX_PARAMS];
	int fmt[PG_MAX_PARAMS];
	char num[PG_MAX_PARAMS][24];
} pgp;

static void p_int(pgp *p, int64_t x)
{
	snprintf(p->num[p->n], sizeof(p->num[0]), "%lld", (long long)x);
	p->v[p->n] = p->num[p->n];
	p->fmt[p->n++] = 0;
}

static void p_text(pgp *p, const char *s)
{
	p->v[p->n] = s;
	p->fmt[p->n++] = 0;
}

/* Bytes as a binary parameter (bytea). NULL: SQL NULL. */
static void p_bytes(pgp *p, const void *d, size_t n)
{
	p->v[p->n] = d ? (n ? d : "") : NULL;
	p->len[p->n] = (int)n;
	p->fmt[p->n++] = 1;
}

/* ---- Waiting for the server -------------------------------------------------------------- */

static int64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Gives the connection up: closed, and why kept for every later call's message. */
static void pg_give_up(hv_store *st, const char *why)
{
	snprintf(st->pg->lost, sizeof(st->pg->lost), "%s", why);
	PQfinish(st->pg->c); /* non-blocking: its goodbye is dropped if it cannot be sent */
	st->pg->c = NULL;
}

static bool pg_interrupted(const hv_store *st)
{
	return atomic_load(&st->interrupted) || (st->pg->outer && atomic_load(st->pg->outer));
}

/* Waits until the connection's socket is ready for events (POLLIN, POLLOUT) or the server has
 * been silent for the connection's limit since *since (reset here whenever the socket is
 * ready), or for PG_INTERRUPT_SILENCE_MS once hv_store_interrupt was called. The socket is
 * always looked at before a wait is given up: a process that was not scheduled for a while
 * finds the answer that came meanwhile. 0 when ready; -1 when given up (the connection is then
 * closed, the reason in pg->lost). */
static int pg_wait(hv_store *st, short events, int64_t *since)
{
	int fd = PQsocket(st->pg->c);
	for (;;) {
		int64_t silent = mono_ms() - *since;
		int64_t left = st->pg->silence_ms - silent;
		if (pg_interrupted(st) && PG_INTERRUPT_SILENCE_MS - silent < left)
			left = PG_INTERRUPT_SILENCE_MS - silent;
		struct pollfd pfd = {.fd = fd, .events = events};
		int n = poll(&pfd, 1,
			     left <= 0 ? 0 : (int)(left < PG_POLL_SLICE_MS ? left : PG_POLL_SLICE_MS));
		if (n > 0) {
			*since = mono_ms();
			return 0;
		}
		if (n < 0 && errno != EINTR) {
			pg_give_up(st, "cannot wait for the server");
			return -1;
		}
		silent = mono_ms() - *since;
		if (pg_interrupted(st) && silent >= PG_INTERRUPT_SILENCE_MS) {
			pg_give_up(st, "interrupted while waiting for the server");
			return -1;
		}
		if (silent >= st->pg->silence_ms) {
			char why[96];
			snprintf(why, sizeof(why), "the server did not answer for %d s; giving up",
				 st->pg->silence_ms / 1000);
			pg_give_up(st, why);
			return -1;
		}
	}
}

/* PQexec (sql of one or more statements, no parameters) or PQexecParams (params set: one
 * statement), but every wait bounded by pg_wait: the result (the first failed one, else the
 * last), or NULL with the connection given up or failed (pg_error then says why). */
static PGresult *pg_call(hv_store *st, const char *sql, bool params, int n, const char *const *v,
			 const int *len, const int *fmt, int result_format)
{
	PGconn *c = st->pg->c;
	if (!c)
		return NULL; /* given up: pg->lost says why */
	int sent = params ? PQsendQueryParams(c, sql, n, NULL, v, len, fmt, result_format)
			  : PQsendQuery(c, sql);
	if (!sent)
		return NULL;
	int64_t since = mono_ms();
	for (;;) { /* the query out (a large INSERT may not fit the socket's buffer) */
		int f = PQflush(c);
		if (f < 0)
			return NULL;
		if (f == 0)
			break;
		if (pg_wait(st, POLLIN | POLLOUT, &since) != 0)
			return NULL;
		if (!PQconsumeInput(c))
			return NULL;
	}
	PGresult *keep = NULL;
	for (;;) {
		while (PQisBusy(c)) {
			/* A connection that failed (PQconsumeInput: PQerrorMessage says why) is
			 * not asked for more: PQgetResult would wait on it without a bound. */
			if (pg_wait(st, POLLIN, &since) != 0 || !PQconsumeInput(c)) {
				PQclear(keep);
				return NULL;
			}
		}
		PGresult *r = PQgetResult(c);
		if (!r)
			break;
		ExecStatusType ks = keep ? PQresultStatus(keep) : PGRES_COMMAND_OK;
		if (ks == PGRES_FATAL_ERROR || ks == PGRES_BAD_RESPONSE) {
			PQclear(r); /* the first failure is the one to report */
		} else {
			PQclear(keep);
			keep = r;
		}
		if (PQstatus(c) == CONNECTION_BAD)
			break;
	}
	return keep;
}

/* Runs sql with p (NULL: none), results in binary format; NULL (error set) on failure. */
static PGresult *pg_run(hv_store *st, const char *sql, const pgp *p, const char *what)
{
	PGresult *res = pg_call(st, sql, true, p ? p->n : 0, p ? p->v : NULL, p ? p->len : NULL,
				p ? p->fmt : NULL, 1);
	ExecStatusType s = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK)
		return res;
	pg_error(st, what, res);
	PQclear(res);
	return NULL;
}

static hv_status pg_exec(hv_store *st, const char *sql, const pgp *p, const char *what)
{
	PGresult *res = pg_run(st, sql, p, what);
	PQclear(res);
	return res ? HV_OK : hv_error_last_status();
}

static int64_t g_i64(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return 0;
	const char *v = PQgetvalue(r, row, col);
	int n = PQgetlength(r, row, col);
	if (n == 8) {
		uint64_t x;
		memcpy(&x, v, 8);
		return (int64_t)be64toh(x);
	}
	if (n == 4) {
		uint32_t x;
		memcpy(&x, v, 4);
		return (int32_t)be32toh(x);
	}
	return n == 1 ? (unsigned char)v[0] : 0;
}

static const char *g_bytes(const PGresult *r, int row, int col, size_t *len)
{
	*len = 0;
	if (PQgetisnull(r, row, col))
		return NULL;
	*len = (size_t)PQgetlength(r, row, col);
	return PQgetvalue(r, row, col); /* libpq ends every value with a NUL */
}

static const char *g_text(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

static void pg_rollback(hv_store *st)
{
	if (PQstatus(st->pg->c) == CONNECTION_OK)
		PQclear(pg_call(st, "ROLLBACK", false, 0, NULL, NULL, NULL, 0));
}

/* ---- Opening ---------------------------------------------------------------------------- */

static hv_status schema_check_meta(hv_store *st, PGresult *r, int64_t *version);

/* The meta table's two rows that say whose schema it is and of which version. */
#define SQL_META                                                                               \
	"SELECT (SELECT value FROM harvest.meta WHERE key = 'application'),"                   \
	" (SELECT value FROM harvest.meta WHERE key = 'schema_version')"

/* The schema's state: *version (0: no "harvest" schema), or HV_EDB when it is not harvest's.
 * in_tx: inside a transaction, where a failed statement would abort it. */
static hv_status schema_version(hv_store *st, int64_t *version, bool in_tx)
{
	*version = 0;
	PGresult *r = NULL;
	/* The usual case in one round trip: harvest's meta table is there. Only when it is not
	 * (an error, so not inside a transaction) do the catalogs say whether the schema is
	 * missing or someone else's. */
	if (!in_tx) {
		r = pg_call(st, SQL_META, true, 0, NULL, NULL, NULL, 0);
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
			return schema_check_meta(st, r, version);
		PQclear(r);
		if (PQstatus(st->pg->c) != CONNECTION_OK)
			return pg_error(st, "cannot read the schema", NULL);
	}
	/* Both read from the catalogs' tables under this statement's one snapshot: a name
	 * lookup such as to_regclass() goes through the server's catalog cache, which may not
	 * yet know of a schema another writer has just committed, and would then find the
	 * schema without its meta table. */
	r = pg_run(st, "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n"
				 " ON n.oid = c.relnamespace WHERE n.nspname = 'harvest'"
				 " AND c.relname = 'meta'),"
				 " EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'harvest')",
			     NULL, "cannot read the schema");
	if (!r)
		return hv_error_last_status();
	bool meta = g_i64(r, 0, 0) != 0, ns = g_i64(r, 0, 1) != 0;
	PQclear(r);
	if (!ns)
		return HV_OK;
	if (!meta)
		return hv_error_set(HV_EDB, "%s: the schema \"harvest\" is not harvest's (it has no "
				    "harvest.meta); refusing to use it", st->pg->where);
	r = pg_call(st, SQL_META, true, 0, NULL, NULL, NULL, 1);
	if (PQresultStatus(r) == PGRES_TUPLES_OK)
		return schema_check_meta(st, r, version);
	/* A role without rights on the schema (insufficient_privilege), or no server: said as
	 * such. Any other failure (no such column...) is a table that only has meta's name. */
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if (!r || (state && !strcmp(state, "42501"))) {
		bool denied = r != NULL;
		pg_error(st, "cannot read the schema", r);
		PQclear(r);
		return hv_error_set(HV_EDB, "%s%s", hv_error_last(),
				    denied ? " (the role needs USAGE on the schema harvest and SELECT on"
					     " its tables; a writer also INSERT, UPDATE and DELETE)"
					   : "");
	}
	pg_error(st, "cannot read the schema", r);
	PQclear(r);
	return hv_error_set(HV_EDB, "%s: the schema \"harvest\" is not harvest's (%s)",
			    st->pg->where, hv_error_last());
}

/* The answer of the meta query in r (cleared here): harvest's, and a version it knows? */
static hv_status schema_check_meta(hv_store *st, PGresult *r, int64_t *version)
{
	const char *app = g_text(r, 0, 0), *ver = g_text(r, 0, 1);
	char *end = NULL;
	long long v = ver ? strtoll(ver, &end, 10) : -1;
	int rc = HV_OK;
	if (!app || strcmp(app, "harvest") != 0 || !ver || *end || v < 0)
		rc = hv_error_set(HV_EDB, "%s: the schema \"harvest\" is not harvest's (its meta "
				  "table does not say so); refusing to use it", st->pg->where);
	else if (v > HV_STORE_PG_SCHEMA_VERSION)
		rc = hv_error_set(HV_EDB, "%s: the harvest schema is version %lld, newer than this "
				  "harvest knows (%d); refusing to use it", st->pg->where, v,
				  HV_STORE_PG_SCHEMA_VERSION);
	if (rc == HV_OK)
		*version = v;
	PQclear(r);
	return rc;
}

/* Creates or upgrades the schema under the advisory lock, so that two first-time writers
 * (or two hosts upgrading at once) do not race: the second finds it done. */
static hv_status migrate(hv_store *st)
{
	int64_t v = 0;
	int rc = pg_exec(st, "BEGIN", NULL, "cannot create the schema");
	if (rc != HV_OK)
		return rc;
	pgp p = {0};
	p_int(&p, PG_LOCK_CLASS);
	p_int(&p, PG_LOCK_SCHEMA);
	rc = pg_exec(st, "SELECT pg_advisory_xact_lock($1::int, $2::int)", &p,
		     "cannot lock the schema");
	if (rc == HV_OK)
		rc = schema_version(st, &v, true);
	if (rc == HV_OK && v == 0)
		rc = pg_exec(st, "CREATE SCHEMA harvest", NULL, "cannot create the schema");
	for (int64_t i = v > 0 ? v : 0; rc == HV_OK && i < HV_STORE_PG_SCHEMA_VERSION; i++) {
		PGresult *r = pg_call(st, pg_migrations[i], false, 0, NULL, NULL, NULL, 0);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			rc = pg_error(st, "cannot create the schema", r);
		PQclear(r);
	}
	if (rc == HV_OK && v < HV_STORE_PG_SCHEMA_VERSION) {
		pgp q = {0};
		p_int(&q, HV_STORE_PG_SCHEMA_VERSION);
		rc = pg_exec(st, "UPDATE harvest.meta SET value = $1 WHERE key = 'schema_version'",
			     &q, "cannot create the schema");
	}
	if (rc == HV_OK)
		rc = pg_exec(st, "COMMIT", NULL, "cannot create the schema");
	else
		pg_rollback(st);
	return rc;
}

static void pg_close(hv_store *st)
{
	if (!st->pg)
		return;
	if (st->pg->c) /* NULL when libpq could not be loaded */
		PQfinish(st->pg->c);
	free(st->pg->where);
	free(st->pg);
	st->pg = NULL;
}

static hv_status pg_reap(hv_store *st);

static void ignore_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

hv_status hvst_pg_open(hv_store *st, const char *uri)
{
	struct hvpg *pg = calloc(1, sizeof(*pg));
	if (!pg)
		return hv_error_set(HV_ENOMEM, "out of memory");
	st->pg = pg;
	st->hist = &hvst_pg_history;
	char masked[1024];
	hvst_mask_secret(uri, masked, sizeof(masked));
	if (!(pg->where = strdup(masked)))
		return hv_error_set(HV_ENOMEM, "out of memory");
	const char *auth = strstr(uri, "://");
	if (auth && slash_in_userinfo(auth + 3))
		return hv_error_set(HV_EDB, "%s: cannot connect to the history database: a '/' in"
				    " the user or password of a URI must be written %%2F", pg->where);
	/* libpq is loaded on the first PostgreSQL open, not when harvest starts (dl_pq.h). */
	char why[512];
	if (hv__pq_load(why, sizeof(why)) != 0)
		return hv_error_set(HV_EDB, "%s: cannot connect to the history database: %s",
				    pg->where, why);
	hvst_hostname(pg->host, sizeof(pg->host));
	/* Our defaults first: the URI's own settings (later in the list) override them. */
	const char *keys[6], *vals[6];
	int n = 0;
	if (!getenv("PGCONNECT_TIMEOUT")) {
		keys[n] = "connect_timeout";
		vals[n++] = PG_CONNECT_TIMEOUT;
	}
	if (!getenv("PGOPTIONS")) {
		keys[n] = "options";
		vals[n++] = PG_OPTIONS;
	}
	keys[n] = "application_name";
	vals[n++] = "harvest";
	keys[n] = "dbname";
	vals[n++] = uri;
	keys[n] = NULL;
	vals[n] = NULL;
	pg->c = PQconnectdbParams(keys, vals, 1);
	if (!pg->c)
		return hv_error_set(HV_ENOMEM, "out of memory");
	/* The library never prints: the server's notices and warnings are dropped. */
	PQsetNoticeProcessor(pg->c, ignore_notice, NULL);
	if (PQstatus(pg->c) != CONNECTION_OK)
		return pg_error(st, "cannot connect to the history database", NULL);
	/* Every wait for the server is then pg_wait's, bounded (pg_call). */
	if (PQsetnonblocking(pg->c, 1) != 0)
		return pg_error(st, "cannot connect to the history database", NULL);
	pg->silence_ms = hv__test_switch_on(HV__SWITCH_PG_SILENCE) ? PG_TEST_SILENCE_MS
								     : PG_SILENCE_MS;
	int64_t v = 0;
	int rc = schema_version(st, &v, false);
	if (rc == HV_OK && !st->readonly && v < HV_STORE_PG_SCHEMA_VERSION)
		rc = migrate(st);
	if (rc == HV_OK) {
		pg->have_schema = !st->readonly || v > 0;
		pg->version = st->readonly ? v : HV_STORE_PG_SCHEMA_VERSION;
	}
	return rc;
}

void hvst_pg_reap(hv_store *st)
{
	/* Best effort, as for SQLite: the next writer (or prune) ends them. */
	if (st->pg && !st->readonly && pg_reap(st) != HV_OK)
		hv_error_clear();
}

/* ---- Runs ------------------------------------------------------------------------------- */

static hv_status pg_reap(hv_store *st)
{
	if (!st->owner)
		return HV_OK;
	PGresult *r = pg_run(st, "SELECT id, owner FROM harvest.runs WHERE ended_at_ns IS NULL"
				 " AND owner IS NOT NULL", NULL, "cannot read the history");
	if (!r)
		return hv_error_last_status();
	int rc = HV_OK;
	for (int i = 0; rc == HV_OK && i < PQntuples(r); i++) {
		if (!hvst_owner_gone(st->owner, g_text(r, i, 1)))
			continue;
		pgp p = {0};
		p_int(&p, g_i64(r, i, 0));
		p_int(&p, hv_store_now_ns());
		rc = pg_exec(st, "UPDATE harvest.runs SET ended_at_ns = $2, end_reason = '"
				 HV_END_INTERRUPTED "' WHERE id = $1 AND ended_at_ns IS NULL", &p,
			     "cannot end an interrupted run");
	}
	PQclear(r);
	return rc;
}

static hv_status pg_run_begin(hv_store *st, const hv_run_start *r, int64_t *run_id)
{
	pgp p = {0};
	p_text(&p, r->host ? r->host : st->pg->host);
	p_bytes(&p, r->label, r->label ? strlen(r->label) : 0);
	p_text(&p, r->command_json);
	p_bytes(&p, r->dir, strlen(r->dir));
	p_int(&p, r->started_at_ns ? r->started_at_ns : hv_store_now_ns());
	p_text(&p, st->owner);
	PGresult *res = pg_run(st, "INSERT INTO harvest.runs(host, label, command, dir,"
				   " started_at_ns, owner) VALUES ($1, $2, $3, $4, $5, $6)"
				   " RETURNING id", &p, "cannot record the run");
	if (!res)
		return hv_error_last_status();
	*run_id = g_i64(res, 0, 0);
	PQclear(res);
	return HV_OK;
}

/* Inside the transaction: the run exists and has not ended (its row locked). */
static hv_status pg_check_open(hv_store *st, int64_t run_id)
{
	pgp p = {0};
	p_int(&p, run_id);
	PGresult *r = pg_run(st, "SELECT ended_at_ns IS NULL FROM harvest.runs WHERE id = $1"
				 " FOR UPDATE", &p, "cannot finish the run");
	if (!r)
		return hv_error_last_status();
	int rc = HV_OK;
	if (PQntuples(r) == 0)
		rc = hv_error_set(HV_ENOTFOUND, "no run %lld (pruned?)", (long long)run_id);
	else if (!g_i64(r, 0, 0))
		rc = hv_error_set(HV_ENOTFOUND, "run %lld has already finished", (long long)run_id);
	PQclear(r);
	return rc;
}

static hv_status pg_record_end(hv_store *st, int64_t run_id, const hv_run_end *e)
{
	pgp p = {0};
	p_int(&p, run_id);
	p_int(&p, e->ended_at_ns ? e->ended_at_ns : hv_store_now_ns());
	if (e->has_exit_code)
		p_int(&p, e->exit_code);
	else
		p_text(&p, NULL);
	p_text(&p, e->timed_out ? "t" : "f");
	if (e->duration_ms >= 0)
		p_int(&p, e->duration_ms);
	else
		p_text(&p, NULL);
	p_text(&p, e->stdout_truncated ? "t" : "f");
	p_text(&p, e->stderr_truncated ? "t" : "f");
	p_text(&p, e->skipped_json ? e->skipped_json : "[]");
	p_text(&p, e->end_reason);
	p_bytes(&p, e->stdout_data ? e->stdout_data : "", e->stdout_data ? e->stdout_len : 0);
	p_bytes(&p, e->stderr_data ? e->stderr_data : "", e->stderr_data ? e->stderr_len : 0);
	p_text(&p, e->deleted_json);
	/* Only a run that has not ended (the row is then locked until the commit); otherwise
	 * pg_check_open says why (HV_ENOTFOUND). One round trip where a check first would take two. */
	PGresult *r = pg_run(st, "UPDATE harvest.runs SET ended_at_ns = $2, exit_code = $3,"
				 " timed_out = $4, duration_ms = $5, stdout_truncated = $6,"
				 " stderr_truncated = $7, skipped = $8, end_reason = $9, stdout = $10,"
				 " stderr = $11, deleted = $12 WHERE id = $1 AND ended_at_ns IS NULL",
			     &p, "cannot finish the run");
	if (!r)
		return hv_error_last_status();
	bool updated = strcmp(PQcmdTuples(r), "1") == 0;
	PQclear(r);
	if (updated)
		return HV_OK;
	int rc = pg_check_open(st, run_id);
	return rc != HV_OK ? rc : hv_error_set(HV_EDB, "cannot finish run %lld", (long long)run_id);
}

/* A multi-row INSERT of many parameters (not a round trip per row). */
typedef struct pg_batch {
	hv_buf sql;
	int n;
	int cap;
	const char **v;
	int *len;
	int *fmt;
	char (*num)[24];
	int rows;
	size_t bytes;
	void **owned;     /* contents read for the batch, freed when it is sent */
	size_t n_owned;
} pg_batch;

/* cap parameters in max_rows rows at most: a row owns one content at most. */
static hv_status batch_init(pg_batch *b, int cap, int max_rows)
{
	memset(b, 0, sizeof(*b));
	b->cap = cap;
	b->v = calloc((size_t)cap, sizeof(*b->v));
	b->len = calloc((size_t)cap, sizeof(*b->len));
	b->fmt = calloc((size_t)cap, sizeof(*b->fmt));
	b->num = calloc((size_t)cap, sizeof(*b->num));
	b->owned = calloc((size_t)max_rows, sizeof(*b->owned));
	return b->v && b->len && b->fmt && b->num && b->owned
		       ? HV_OK
		       : hv_error_set(HV_ENOMEM, "out of memory");
}

static void batch_drop_owned(pg_batch *b)
{
	for (size_t i = 0; i < b->n_owned; i++)
		free(b->owned[i]);
	b->n_owned = 0;
}

static void batch_free(pg_batch *b)
{
	if (b->owned)
		batch_drop_owned(b);
	free(b->owned);
	hv_buf_free(&b->sql);
	free(b->v);
	free(b->len);
	free(b->fmt);
	free(b->num);
}

static void b_int(pg_batch *b, int64_t x)
{
	snprintf(b->num[b->n], sizeof(b->num[0]), "%lld", (long long)x);
	b->v[b->n] = b->num[b->n];
	b->fmt[b->n++] = 0;
}

static void b_text(pg_batch *b, const char *s, size_t n)
{
	b->v[b->n] = s;
	b->len[b->n] = (int)n;
	b->fmt[b->n++] = 1; /* text in binary format: its bytes, no NUL needed */
}

static void b_bytes(pg_batch *b, const void *d, size_t n)
{
	b->v[b->n] = n ? d : "";
	b->len[b->n] = (int)n;
	b->fmt[b->n++] = 1;
	b->bytes += n;
}

/* Starts a row "(" with k placeholders of the given casts. */
static void b_row(pg_batch *b, const char *head, const char *const *casts, int k)
{
	if (b->rows == 0)
		hv_buf_append_str(&b->sql, head);
	else
		hv_buf_append_str(&b->sql, ",");
	hv_buf_append_str(&b->sql, "(");
	for (int i = 0; i < k; i++)
		hv_buf_printf(&b->sql, "%s$%d::%s", i ? "," : "", b->n + i + 1, casts[i]);
	hv_buf_append_str(&b->sql, ")");
	b->rows++;
}

static hv_status batch_flush(hv_store *st, pg_batch *b, const char *tail, const char *what)
{
	if (!b->rows)
		return HV_OK;
	if (tail)
		hv_buf_append_str(&b->sql, tail);
	int rc;
	if (b->sql.failed || !b->sql.data) {
		rc = hv_error_set(HV_ENOMEM, "out of memory");
	} else {
		PGresult *r = pg_call(st, b->sql.data, true, b->n, b->v, b->len, b->fmt, 1);
		rc = PQresultStatus(r) == PGRES_COMMAND_OK ? HV_OK : pg_error(st, what, r);
		PQclear(r);
	}
	hv_buf_truncate(&b->sql, 0);
	b->n = 0;
	b->rows = 0;
	b->bytes = 0;
	batch_drop_owned(b);
	return rc;
}

/* The pieces a content read through read_content is sent in: one statement each. */
#define PG_CONTENT_PIECE (1u << 20)

/* Whether this session may make the temporary table the pieces go through (the TEMP privilege
 * on the database, which PostgreSQL grants to every role unless it was revoked) in *may (no:
 * contents are then sent whole, one at a time). HV_OK, or the query's failure. */
static hv_status pg_may_stream(hv_store *st, bool *may)
{
	*may = false;
	PGresult *r = pg_run(st, "SELECT has_database_privilege(current_database(), 'TEMP')", NULL,
			     "cannot store a content");
	if (!r)
		return hv_error_last_status();
	*may = PQntuples(r) == 1 && PQgetlength(r, 0, 0) == 1 && PQgetvalue(r, 0, 0)[0] == 1;
	PQclear(r);
	return HV_OK;
}

struct pg_piece_put {
	hv_store *st;
	int64_t seq;
};

static hv_status pg_put_piece(void *ctx, const void *piece, size_t n)
{
	struct pg_piece_put *pp = ctx;
	pgp p = {0};
	p_int(&p, pp->seq++);
	p_bytes(&p, piece, n);
	return pg_exec(pp->st,
		       "INSERT INTO pg_temp.harvest_content_pieces(seq, bytes)"
		       " VALUES ($1::bigint, $2::bytea)",
		       &p, "cannot store a content");
}

/* Stores a content read through a->read_content piece by piece, as the SQLite history does:
 * each piece goes into a temporary table of this session as it is read (its SHA-256 checked as
 * it goes), and the server joins them into the content's row in one statement, so a content
 * of any size costs one piece of this process's memory. The caller asked whether it is
 * stored already (pg_known_contents). */
static hv_status pg_store_pieces(hv_store *st, const hv_artifact_in *a, const char *sha)
{
	/* Dropped at the end of the transaction, whichever way it ends: nothing outlives it. */
	hv_status rc = pg_exec(st,
			       "CREATE TEMP TABLE IF NOT EXISTS harvest_content_pieces"
			       " (seq bigint PRIMARY KEY, bytes bytea NOT NULL) ON COMMIT DROP",
			       NULL, "cannot store a content");
	struct pg_piece_put pp = {.st = st};
	if (rc == HV_OK)
		rc = hvst_artifact_pieces(a, sha, PG_CONTENT_PIECE, pg_put_piece, &pp);
	if (rc != HV_OK)
		return rc; /* (the caller rolls the transaction back, the pieces with it) */
	/* A writer that stored the same content meanwhile wins, as with ON CONFLICT below in
	 * pg_record_artifacts; the pieces are deleted in the same statement, for the next one. */
	pgp q = {0};
	p_text(&q, sha);
	p_int(&q, (int64_t)a->content_len);
	return pg_exec(st,
		       "WITH p AS (DELETE FROM pg_temp.harvest_content_pieces RETURNING seq, bytes)"
		       " INSERT INTO harvest.contents(sha256, size, bytes)"
		       " SELECT $1::text, $2::bigint,"
		       " coalesce(string_agg(bytes, ''::bytea ORDER BY seq), ''::bytea) FROM p"
		       " ON CONFLICT (sha256) DO NOTHING",
		       &q, "cannot store a content");
}

/* Digests asked about in one query, at most. */
#define PG_KNOWN_BATCH 1000

static int sha_index_cmp(const void *x, const void *y, void *shas)
{
	size_t i = *(const size_t *)x, j = *(const size_t *)y;
	int c = memcmp(((const char(*)[65])shas)[i], ((const char(*)[65])shas)[j], 64);
	return c ? c : (i > j) - (i < j);
}

/* known[i]: artifact i has no content to send: none was given, the history has its digest
 * already (stored by any run), or an earlier artifact of these n has the same digest. One
 * query per PG_KNOWN_BATCH digests, not one per content (a 10-file run made 10 round trips). */
static hv_status pg_known_contents(hv_store *st, const hv_artifact_in *a, size_t n,
				   char (*shas)[65], bool *known)
{
	size_t *idx = malloc((n ? n : 1) * sizeof(*idx)), m = 0;
	if (!idx)
		return hv_error_set(HV_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		known[i] = !a[i].content && !a[i].read_content;
		if (!known[i])
			idx[m++] = i;
	}
	/* By digest, then position: the first of equal digests is the one sent, and the only
	 * one asked about (idx keeps one position per digest). */
	qsort_r(idx, m, sizeof(*idx), sha_index_cmp, shas);
	size_t u = 0;
	for (size_t k = 0; k < m; k++) {
		if (u && !memcmp(shas[idx[k]], shas[idx[u - 1]], 64))
			known[idx[k]] = true;
		else
			idx[u++] = idx[k];
	}
	m = u;
	hv_buf list = {0};
	int rc = HV_OK;
	for (size_t from = 0; rc == HV_OK && from < m; from += PG_KNOWN_BATCH) {
		size_t to = m - from > PG_KNOWN_BATCH ? from + PG_KNOWN_BATCH : m;
		/* A text[] literal: the digests are hex, nothing to quote. */
		hv_buf_truncate(&list, 0);
		hv_buf_append_char(&list, '{');
		for (size_t k = from; k < to; k++) {
			if (k > from)
				hv_buf_append_char(&list, ',');
			hv_buf_append(&list, shas[idx[k]], 64);
		}
		hv_buf_append_char(&list, '}');
		if (list.failed) {
			rc = hv_error_set(HV_ENOMEM, "out of memory");
			break;
		}
		pgp p = {0};
		p_text(&p, list.data);
		PGresult *r = pg_run(st, "SELECT sha256 FROM harvest.contents"
					 " WHERE sha256 = ANY($1::text[])",
				     &p, "cannot store a content");
		if (!r) {
			rc = hv_error_last_status();
			break;
		}
		for (int row = 0; row < PQntuples(r); row++) {
			size_t len;
			const char *sha = g_bytes(r, row, 0, &len);
			if (!sha || len != 64)
				continue;
			/* The first of idx[from, to) with this digest (the one that would be sent). */
			size_t lo = from, hi = to;
			while (lo < hi) {
				size_t mid = lo + (hi - lo) / 2;
				if (memcmp(shas[idx[mid]], sha, 64) < 0)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (lo < to && !memcmp(shas[idx[lo]], sha, 64))
				known[idx[lo]] = true;
		}
		PQclear(r);
	}
	hv_buf_free(&list);
	free(idx);
	return rc;
}

/* recorded: each artifact's recording time (NULL: now). */
static hv_status pg_record_artifacts(hv_store *st, int64_t run_id, const hv_artifact_in *a,
				     size_t n, char (*shas)[65], const int64_t *recorded)
{
	static const char *const ccast[] = {"text", "bigint", "bytea"};
	static const char *const acast[] = {"bigint", "bytea", "bytea", "text", "bigint",
					    "text", "bigint", "boolean", "text"};
	bool *known = calloc(n ? n : 1, sizeof(*known));
	if (!known)
		return hv_error_set(HV_ENOMEM, "out of memory");
	pg_batch b;
	int rc = batch_init(&b, PG_BATCH_ROWS * 9, PG_BATCH_ROWS);
	int may_stream = -1; /* asked when a content is first read: -1 not yet */
	/* Contents first, deduplicated (a digest already stored, by this run or any other, is
	 * neither read nor sent). */
	if (rc == HV_OK)
		rc = pg_known_contents(st, a, n, shas, known);
	for (size_t i = 0; rc == HV_OK && i < n; i++) {
		if (known[i])
			continue;
		const void *bytes;
		void *owned = NULL;
		/* A large content read for the occasion goes in statements of its own: in pieces
		 * where the session may make a temporary table, else whole and freed once sent
		 * (one at a time, however many the run has). A small one is read whole into the
		 * batch, whose bytes are bounded as for contents in memory. */
		bool large = !a[i].content && a[i].content_len > PG_CONTENT_PIECE;
		if (large) {
			rc = batch_flush(st, &b, " ON CONFLICT (sha256) DO NOTHING",
					 "cannot store a content");
			if (rc == HV_OK && may_stream < 0) {
				bool may;
				rc = pg_may_stream(st, &may);
				may_stream = may;
			}
			if (rc == HV_OK && may_stream) {
				rc = pg_store_pieces(st, &a[i], shas[i]);
				continue;
			}
		}
		if (rc == HV_OK)
			rc = hvst_artifact_bytes(&a[i], shas[i], &bytes, &owned);
		if (rc != HV_OK)
			break;
		b_row(&b, "INSERT INTO harvest.contents(sha256, size, bytes) VALUES ", ccast, 3);
		b_text(&b, shas[i], 64);
		b_int(&b, (int64_t)a[i].content_len);
		b_bytes(&b, bytes, a[i].content_len);
		if (owned)
			b.owned[b.n_owned++] = owned; /* at most one per row: freed with the batch */
		if (large || b.rows >= PG_BATCH_ROWS || b.bytes >= PG_BATCH_BYTES)
			rc = batch_flush(st, &b, " ON CONFLICT (sha256) DO NOTHING",
					 "cannot store a content");
	}
	free(known);
	if (rc == HV_OK)
		rc = batch_flush(st, &b, " ON CONFLICT (sha256) DO NOTHING", "cannot store a content");
	int64_t now = hv_store_now_ns();
	for (size_t i = 0; rc == HV_OK && i < n; i++) {
		b_row(&b, "INSERT INTO harvest.artifacts(run_id, path, name, mime_type, size, sha256,"
			  " recorded_at_ns, content_stored, change) VALUES ", acast, 9);
		b_int(&b, run_id);
		b_bytes(&b, a[i].path, a[i].path_len);
		b_bytes(&b, a[i].name, a[i].name_len);
		b_text(&b, a[i].mime_type, strlen(a[i].mime_type));
		b_int(&b, (int64_t)a[i].size);
		b_text(&b, shas[i], 64);
		b_int(&b, recorded ? recorded[i] : now);
		b.v[b.n] = a[i].content || a[i].read_content ? "\1" : "\0";
		b.len[b.n] = 1;
		b.fmt[b.n++] = 1;
		b_text(&b, a[i].change, a[i].change ? strlen(a[i].change) : 0);
		if (b.rows >= PG_BATCH_ROWS)
			rc = batch_flush(st, &b, NULL, "cannot record an artifact");
	}
	if (rc == HV_OK)
		rc = batch_flush(st, &b, NULL, "cannot record an artifact");
	batch_free(&b);
	return rc;
}

static hv_status pg_run_finish(hv_store *st, int64_t run_id, const hv_run_end *end,
			       const hv_artifact_in *artifacts, char (*shas)[65],
			       size_t n_artifacts)
{
	int rc = HV_OK;
	/* Until the end is written, the run is taken to be open: a BEGIN that failed (its lock
	 * waited on a prune past the statement timeout) leaves it so, and it is ended below. */
	bool was_open = true;
	{ /* the transaction */
		/* See the top of the file: prune waits for this transaction. Both in one round
		 * trip (the simple protocol takes several statements). */
		PGresult *r = pg_call(st, "BEGIN; LOCK TABLE harvest.contents IN ROW EXCLUSIVE MODE",
				      false, 0, NULL, NULL, NULL, 0);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			rc = pg_error(st, "cannot finish the run", r);
		PQclear(r);
		if (rc == HV_OK) {
			rc = pg_record_end(st, run_id, end);
			/* HV_ENOTFOUND: no such run, or it has ended; anything else: it is still
			 * open. */
			was_open = rc != HV_ENOTFOUND;
		}
		if (rc == HV_OK)
			rc = pg_record_artifacts(st, run_id, artifacts, n_artifacts, shas, NULL);
		if (rc == HV_OK)
			rc = pg_exec(st, "COMMIT", NULL, "cannot finish the run");
		else
			pg_rollback(st);
	}
	if (rc != HV_OK && was_open && !hvst_end_not_recorded(end) && PQstatus(st->pg->c) == CONNECTION_OK) {
		/* Ended with none of its artifacts, and saying so; best effort. */
		hv_error_saved saved;
		hv_error_save(&saved);
		hv_run_end e = *end;
		e.end_reason = HV_END_NOT_RECORDED;
		if (pg_exec(st, "BEGIN", NULL, "") == HV_OK) {
			if (pg_record_end(st, run_id, &e) == HV_OK)
				pg_exec(st, "COMMIT", NULL, "");
			else
				pg_rollback(st);
		}
		hv_error_restore(&saved, saved.status);
	}
	return rc;
}

/* ---- Queries ---------------------------------------------------------------------------- */

typedef struct pg_run_iter {
	hv_run_iter base;
	PGresult *res;
	int row;
	bool with_output;
	hv_run_row out;
} pg_run_iter;

/* Whether s is UTF-8, which a text parameter must be (the server refuses anything else):
 * a filter by a name that is not matches nothing here, as no text column holds it. */
static bool text_ok(const char *s)
{
	for (size_t i = 0, len = strlen(s); i < len;) {
		size_t n = hv_utf8_sequence_length(s + i, len - i);
		if (n == 0)
			return false;
		i += n;
	}
	return true;
}

static hv_status pg_runs(hv_store *st, const hv_run_filter *f, hv_run_iter **out)
{
	pg_run_iter *it = calloc(1, sizeof(*it));
	if (!it)
		return hv_error_set(HV_ENOMEM, "out of memory");
	it->with_output = f->with_output;
	*out = &it->base;
	if (!st->pg->have_schema)
		return HV_OK;
	hv_buf sql = {0};
	pgp p = {0};
	hv_buf_append_str(&sql, "SELECT r.id, r.label, r.command, r.dir, r.started_at_ns,"
				" r.ended_at_ns, r.exit_code, r.timed_out, r.duration_ms,"
				" (SELECT count(*) FROM harvest.artifacts a WHERE a.run_id = r.id),"
				" r.end_reason, r.host");
	if (f->with_output)
		hv_buf_append_str(&sql, ", r.stdout_truncated, r.stderr_truncated, r.skipped,"
					" r.stdout, r.stderr, ");
	if (f->with_output) /* runs.deleted: version 2 */
		hv_buf_append_str(&sql, st->pg->version >= 2 ? "r.deleted" : "NULL::text");
	hv_buf_append_str(&sql, " FROM harvest.runs r WHERE true");
	if (f->run_id) {
		p_int(&p, f->run_id);
		hv_buf_printf(&sql, " AND r.id = $%d", p.n);
	}
	if (f->since_ns) {
		p_int(&p, f->since_ns);
		hv_buf_printf(&sql, " AND r.started_at_ns >= $%d", p.n);
	}
	if (f->label) {
		p_bytes(&p, f->label, strlen(f->label));
		hv_buf_printf(&sql, " AND r.label = $%d::bytea", p.n);
	}
	if (f->host && !text_ok(f->host)) {
		hv_buf_append_str(&sql, " AND FALSE"); /* no text column holds it */
	} else if (f->host) {
		p_text(&p, f->host);
		hv_buf_printf(&sql, " AND r.host = $%d", p.n);
	}
	/* Newest first by start: a pushed run takes its id when it is pushed, and its place here
	 * (and among the runs prune keeps) by when it began. */
	hv_buf_append_str(&sql, " ORDER BY r.started_at_ns DESC, r.id DESC");
	if (f->limit) {
		p_int(&p, f->limit > INT64_MAX ? INT64_MAX : (int64_t)f->limit);
		hv_buf_printf(&sql, " LIMIT $%d", p.n);
	}
	int rc = HV_OK;
	if (sql.failed || !sql.data)
		rc = hv_error_set(HV_ENOMEM, "out of memory");
	else if (!(it->res = pg_run(st, sql.data, &p, "cannot query the history")))
		rc = hv_error_last_status();
	hv_buf_free(&sql);
	if (rc != HV_OK) {
		free(it);
		*out = NULL;
	}
	return rc;
}

static hv_status pg_run_next(hv_run_iter *base, const hv_run_row **out)
{
	pg_run_iter *it = (pg_run_iter *)base;
	if (!it->res || it->row >= PQntuples(it->res))
		return HV_DONE;
	const PGresult *q = it->res;
	int i = it->row++;
	hv_run_row *r = &it->out;
	memset(r, 0, sizeof(*r));
	r->run_id = g_i64(q, i, 0);
	r->label = g_bytes(q, i, 1, &r->label_len);
	r->command_json = g_text(q, i, 2);
	r->dir = g_bytes(q, i, 3, &r->dir_len);
	r->started_at_ns = g_i64(q, i, 4);
	r->ended = !PQgetisnull(q, i, 5);
	r->ended_at_ns = g_i64(q, i, 5);
	r->has_exit_code = !PQgetisnull(q, i, 6);
	r->exit_code = (int)g_i64(q, i, 6);
	r->timed_out = g_i64(q, i, 7) != 0;
	r->duration_ms = PQgetisnull(q, i, 8) ? -1 : g_i64(q, i, 8);
	r->artifacts = (uint64_t)g_i64(q, i, 9);
	r->end_reason = g_text(q, i, 10);
	r->host = g_text(q, i, 11);
	if (it->with_output) {
		r->stdout_truncated = g_i64(q, i, 12) != 0;
		r->stderr_truncated = g_i64(q, i, 13) != 0;
		r->skipped_json = g_text(q, i, 14);
		if (!r->skipped_json)
			r->skipped_json = "[]";
		r->stdout_data = g_bytes(q, i, 15, &r->stdout_len);
		r->stderr_data = g_bytes(q, i, 16, &r->stderr_len);
		r->deleted_json = g_text(q, i, 17);
	}
	*out = r;
	return HV_OK;
}

static void pg_run_free(hv_run_iter *base)
{
	pg_run_iter *it = (pg_run_iter *)base;
	PQclear(it->res);
	free(it);
}

typedef struct pg_artifact_iter {
	hv_artifact_iter base;
	hv_store *st;
	PGresult *res;
	int row;
	bool with_content;
	/* A name glob LIKE cannot say ('[' classes): matched here with fnmatch, the limit too. */
	char *name_glob;
	uint64_t limit, given;
	hv_artifact_row out;
} pg_artifact_iter;

/* The LIKE pattern of a glob into b; false when it has a bracket expression or ends in a
 * lone backslash (fnmatch matches no name with that: left to it, as bracket classes are). */
static bool glob_to_like(const char *g, hv_buf *b)
{
	for (const char *p = g; *p; p++) {
		switch (*p) {
		case '*': hv_buf_append_str(b, "%"); break;
		case '?': hv_buf_append_str(b, "_"); break;
		case '[': return false;
		case '%':
		case '_': hv_buf_printf(b, "\\%c", *p); break;
		case '\\':
			if (!p[1])
				return false;
			p++;
			if (*p == '%' || *p == '_' || *p == '\\')
				hv_buf_append_str(b, "\\");
			hv_buf_append(b, p, 1);
			break;
		default: hv_buf_append(b, p, 1);
		}
	}
	hv_buf_append(b, "", 1); /* the NUL, counted in len */
	return !b->failed;
}

/* mimes as a text[] literal into b: each type double-quoted, its '"' and '\\' escaped. */
static void mime_array(hv_buf *b, const hvst_mime_set *mimes)
{
	hv_buf_append_char(b, '{');
	for (size_t i = 0; i < mimes->n; i++) {
		hv_buf_append_str(b, i ? ",\"" : "\"");
		for (const char *c = mimes->types[i]; *c; c++) {
			if (*c == '"' || *c == '\\')
				hv_buf_append_char(b, '\\');
			hv_buf_append_char(b, *c);
		}
		hv_buf_append_char(b, '"');
	}
	hv_buf_append(b, "}", 2); /* with the NUL */
}

/* A loose index scan of artifacts_mime (hvst_mime_set): one probe per distinct type. */
static hv_status pg_mime_types(hv_store *st, hvst_mime_set *out)
{
	if (!st->pg->have_schema)
		return HV_OK;
	PGresult *r = pg_run(st,
			     "WITH RECURSIVE t(m) AS ("
			     " SELECT (SELECT min(mime_type) FROM harvest.artifacts)"
			     " UNION ALL SELECT (SELECT min(mime_type) FROM harvest.artifacts"
			     " WHERE mime_type > t.m) FROM t WHERE t.m IS NOT NULL)"
			     " SELECT m FROM t WHERE m IS NOT NULL",
			     NULL, "cannot query the history");
	if (!r)
		return hv_error_last_status();
	hv_status rc = HV_OK;
	for (int i = 0; rc == HV_OK && i < PQntuples(r); i++)
		rc = hvst_mime_set_add(out, PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0));
	PQclear(r);
	return rc;
}

static hv_status pg_artifacts(hv_store *st, const hv_artifact_filter *f,
			      const hvst_mime_set *mimes, hv_artifact_iter **out)
{
	pg_artifact_iter *it = calloc(1, sizeof(*it));
	if (!it)
		return hv_error_set(HV_ENOMEM, "out of memory");
	it->st = st;
	it->with_content = f->with_content;
	char sha[65] = "", sha_hi[65] = "";
	int rc = HV_OK;
	if (f->sha256 && (rc = hvst_hex_norm(f->sha256, false, sha)) != HV_OK) {
		free(it);
		return rc;
	}
	*out = &it->base;
	if (!st->pg->have_schema)
		return HV_OK;
	hv_buf sql = {0}, marr = {0}, nlike = {0};
	pgp p = {0};
	hv_buf_append_str(&sql, "SELECT a.id, a.run_id, a.path, a.name, a.mime_type, a.size,"
				" a.sha256, a.recorded_at_ns, a.content_stored, ");
	/* artifacts.change: version 2 */
	hv_buf_append_str(&sql, st->pg->version >= 2 ? "a.change" : "NULL::text");
	if (f->with_content)
		hv_buf_append_str(&sql, ", c.bytes");
	hv_buf_append_str(&sql, " FROM harvest.artifacts a");
	if (f->with_content)
		hv_buf_append_str(&sql, " LEFT JOIN harvest.contents c"
					" ON a.content_stored AND c.sha256 = a.sha256");
	hv_buf_append_str(&sql, " WHERE true");
	if (f->artifact_id) {
		p_int(&p, f->artifact_id);
		hv_buf_printf(&sql, " AND a.id = $%d", p.n);
	}
	if (f->run_id) {
		p_int(&p, f->run_id);
		hv_buf_printf(&sql, " AND a.run_id = $%d", p.n);
	}
	bool client = false;
	if (mimes) {
		mime_array(&marr, mimes);
		p_text(&p, marr.data);
		hv_buf_printf(&sql, " AND a.mime_type = ANY($%d::text[])", p.n);
	}
	if (f->name) {
		if (glob_to_like(f->name, &nlike)) {
			p_bytes(&p, nlike.data, nlike.len - 1);
			hv_buf_printf(&sql, " AND a.name LIKE $%d::bytea", p.n);
		} else {
			client = true;
		}
	}
	if (f->sha256) {
		if (strlen(sha) == 64) {
			p_text(&p, sha);
			hv_buf_printf(&sql, " AND a.sha256 = $%d", p.n);
		} else {
			memcpy(sha_hi, sha, sizeof(sha_hi));
			sha_hi[strlen(sha_hi) - 1]++;
			p_text(&p, sha);
			p_text(&p, sha_hi);
			hv_buf_printf(&sql, " AND a.sha256 >= $%d AND a.sha256 < $%d", p.n - 1, p.n);
		}
	}
	if (f->since_ns) {
		p_int(&p, f->since_ns);
		hv_buf_printf(&sql, " AND a.recorded_at_ns >= $%d", p.n);
	}
	if (f->host && !text_ok(f->host)) {
		hv_buf_append_str(&sql, " AND FALSE"); /* no text column holds it */
	} else if (f->host) {
		p_text(&p, f->host);
		hv_buf_printf(&sql, " AND a.run_id IN (SELECT id FROM harvest.runs WHERE host = $%d)",
			      p.n);
	}
	hv_buf_append_str(&sql, " ORDER BY a.run_id DESC, a.id ASC");
	if (f->limit && !client) {
		p_int(&p, f->limit > INT64_MAX ? INT64_MAX : (int64_t)f->limit);
		hv_buf_printf(&sql, " LIMIT $%d", p.n);
	}
	it->limit = client ? f->limit : 0;
	/* The glob must outlive the caller's filter. */
	if (client && !(it->name_glob = strdup(f->name)))
		rc = hv_error_set(HV_ENOMEM, "out of memory");
	if (rc == HV_OK && (sql.failed || !sql.data || marr.failed || nlike.failed))
		rc = hv_error_set(HV_ENOMEM, "out of memory");
	if (rc == HV_OK && !(it->res = pg_run(st, sql.data, &p, "cannot query the history")))
		rc = hv_error_last_status();
	hv_buf_free(&sql);
	hv_buf_free(&marr);
	hv_buf_free(&nlike);
	if (rc != HV_OK) {
		free(it->name_glob);
		free(it);
		*out = NULL;
	}
	return rc;
}

static hv_status pg_artifact_next(hv_artifact_iter *base, const hv_artifact_row **out)
{
	pg_artifact_iter *it = (pg_artifact_iter *)base;
	for (;;) {
		if (!it->res || it->row >= PQntuples(it->res) || (it->limit && it->given >= it->limit))
			return HV_DONE;
		const PGresult *q = it->res;
		int i = it->row++;
		hv_artifact_row *a = &it->out;
		memset(a, 0, sizeof(*a));
		a->artifact_id = g_i64(q, i, 0);
		a->run_id = g_i64(q, i, 1);
		a->path = g_bytes(q, i, 2, &a->path_len);
		a->name = g_bytes(q, i, 3, &a->name_len);
		a->mime_type = g_text(q, i, 4);
		if (it->name_glob && fnmatch(it->name_glob, a->name, 0) != 0)
			continue;
		a->size = (uint64_t)g_i64(q, i, 5);
		a->sha256 = g_text(q, i, 6);
		a->recorded_at_ns = g_i64(q, i, 7);
		a->content_stored = g_i64(q, i, 8) != 0;
		a->change = g_text(q, i, 9);
		if (it->with_content) {
			a->content = g_bytes(q, i, 10, &a->content_len);
			char what[48];
			snprintf(what, sizeof(what), "artifact %lld", (long long)a->artifact_id);
			int rc = a->content ? hvst_verify_content(a->content, a->content_len,
								  a->sha256, what)
					    : HV_OK;
			if (rc != HV_OK)
				return rc;
		}
		it->given++;
		*out = a;
		return HV_OK;
	}
}

static void pg_artifact_free(hv_artifact_iter *base)
{
	pg_artifact_iter *it = (pg_artifact_iter *)base;
	PQclear(it->res);
	free(it->name_glob);
	free(it);
}

/* ---- Contents --------------------------------------------------------------------------- */

static hv_status pg_content_get(hv_store *st, const char *sha, const char *what, void **data,
				size_t *len)
{
	*data = NULL;
	*len = 0;
	if (!st->pg->have_schema)
		return hv_error_set(HV_ENOTFOUND, "%s: no stored content with this SHA-256", sha);
	pgp p = {0};
	p_text(&p, sha);
	PGresult *r = pg_run(st, "SELECT bytes FROM harvest.contents WHERE sha256 = $1", &p,
			     "cannot read a content");
	if (!r)
		return hv_error_last_status();
	int rc = HV_OK;
	if (PQntuples(r) == 0) {
		rc = hv_error_set(HV_ENOTFOUND, "%s: no stored content with this SHA-256", sha);
	} else {
		size_t n;
		const char *b = g_bytes(r, 0, 0, &n);
		char *copy = malloc(n + 1);
		if (!copy) {
			rc = hv_error_set(HV_ENOMEM, "out of memory");
		} else if ((rc = hvst_verify_content(b, n, sha, what ? what : sha)) != HV_OK) {
			free(copy);
		} else {
			if (n)
				memcpy(copy, b, n);
			copy[n] = '\0';
			*data = copy;
			*len = n;
		}
	}
	PQclear(r);
	return rc;
}

static hv_status pg_artifact_sha(hv_store *st, int64_t id, char sha[65])
{
	if (!st->pg->have_schema)
		return hv_error_set(HV_ENOTFOUND, "no artifact %lld", (long long)id);
	pgp p = {0};
	p_int(&p, id);
	PGresult *r = pg_run(st,
			     "SELECT sha256, content_stored::int FROM harvest.artifacts WHERE id = $1",
			     &p, "cannot read an artifact");
	if (!r)
		return hv_error_last_status();
	int rc = HV_OK;
	if (PQntuples(r) == 0)
		rc = hv_error_set(HV_ENOTFOUND, "no artifact %lld", (long long)id);
	else if (g_i64(r, 0, 1) == 0)
		rc = hv_error_set(HV_ENOTFOUND, "artifact %lld: its content was not stored",
				  (long long)id);
	else
		snprintf(sha, 65, "%s", g_text(r, 0, 0));
	PQclear(r);
	return rc;
}

/* ---- Prune ------------------------------------------------------------------------------ */

/* One transaction (PostgreSQL readers are not blocked by it; writers that finish a run wait
 * on the contents lock until it commits). */
static hv_status prune_tx(hv_store *st, const hv_prune_opts *opts, hv_prune_result *res,
			  int64_t *newest);

static hv_status pg_prune_history(hv_store *st, const hv_prune_opts *opts, hv_prune_result *res,
				  int64_t *newest)
{
	int was = st->pg->silence_ms;
	/* Its statements may take 600 s on the server (prune_tx). */
	if (was == PG_SILENCE_MS)
		st->pg->silence_ms = PG_PRUNE_SILENCE_MS;
	hv_status rc = prune_tx(st, opts, res, newest);
	st->pg->silence_ms = was;
	return rc;
}

static hv_status prune_tx(hv_store *st, const hv_prune_opts *opts, hv_prune_result *res,
			  int64_t *newest)
{
	bool use_before = opts->has_before || opts->before_ns != 0;
	int rc = pg_reap(st);
	if (rc == HV_OK)
		rc = pg_exec(st, "BEGIN", NULL, "cannot prune");
	if (rc != HV_OK)
		return rc;
	/* A large prune is one long transaction: its statements get 10 minutes, not 60 s. */
	rc = pg_exec(st, "SET LOCAL statement_timeout = '600s'", NULL, "cannot prune");
	if (rc == HV_OK)
		rc = pg_exec(st, "LOCK TABLE harvest.contents IN SHARE ROW EXCLUSIVE MODE", NULL,
			     "cannot prune");
	pgp p = {0};
	hv_buf sql = {0};
	hv_buf_append_str(&sql, "CREATE TEMP TABLE prune_runs ON COMMIT DROP AS SELECT id,"
				" started_at_ns FROM harvest.runs WHERE ended_at_ns IS NOT NULL AND ");
	if (use_before) {
		p_int(&p, opts->before_ns);
		hv_buf_append_str(&sql, "started_at_ns < $1");
	} else {
		/* All but the newest keep_runs (unended ones counted among the kept). */
		p_int(&p, opts->keep_runs);
		hv_buf_append_str(&sql, "id NOT IN (SELECT id FROM harvest.runs"
					" ORDER BY started_at_ns DESC, id DESC LIMIT $1)");
	}
	if (rc == HV_OK)
		rc = sql.data ? pg_exec(st, sql.data, &p, "cannot prune")
			      : hv_error_set(HV_ENOMEM, "out of memory");
	hv_buf_free(&sql);
	PGresult *r = NULL;
	if (rc == HV_OK && !(r = pg_run(st, "SELECT count(*), coalesce(max(started_at_ns), 0),"
					    " (SELECT count(*) FROM harvest.artifacts WHERE run_id IN"
					    "  (SELECT id FROM prune_runs)) FROM prune_runs",
					NULL, "cannot prune")))
		rc = hv_error_last_status();
	uint64_t runs = 0, arts = 0;
	if (r) {
		runs = (uint64_t)g_i64(r, 0, 0);
		*newest = g_i64(r, 0, 1);
		arts = (uint64_t)g_i64(r, 0, 2);
		PQclear(r);
		r = NULL;
	}
	if (rc == HV_OK)
		rc = pg_exec(st, "CREATE TEMP TABLE prune_shas ON COMMIT DROP AS SELECT DISTINCT"
				 " sha256 FROM harvest.artifacts WHERE run_id IN"
				 " (SELECT id FROM prune_runs)", NULL, "cannot prune");
	/* Pushed runs keep their origin's mark, per database pushed from ('pruned HOST
	 * IDENTITY' in harvest.meta: the highest local id pruned), so that a push of that
	 * database again does not bring them back. A database's ids follow its starts, so the
	 * runs below a pruned one are older and pruned by the same rule. */
	if (rc == HV_OK)
		rc = pg_exec(st, "INSERT INTO harvest.meta(key, value) SELECT 'pruned ' || o.prefix,"
				 " max(o.local)::text FROM (SELECT regexp_replace(origin, ' [^ ]*$', '')"
				 " AS prefix, substring(origin from ' ([0-9]+)[^ ]*$')::bigint AS local"
				 " FROM harvest.runs WHERE id IN (SELECT id FROM prune_runs)"
				 " AND origin IS NOT NULL) o WHERE o.local IS NOT NULL GROUP BY o.prefix"
				 " ON CONFLICT (key) DO UPDATE SET value = greatest("
				 "harvest.meta.value::bigint, excluded.value::bigint)::text",
			     NULL, "cannot prune");
	if (rc == HV_OK)
		rc = pg_exec(st, "DELETE FROM harvest.runs WHERE id IN (SELECT id FROM prune_runs)",
			     NULL, "cannot prune");
	if (rc == HV_OK && !(r = pg_run(st, "WITH d AS (DELETE FROM harvest.contents c WHERE"
					    " sha256 IN (SELECT sha256 FROM prune_shas) AND NOT EXISTS"
					    " (SELECT 1 FROM harvest.artifacts a"
					    "  WHERE a.sha256 = c.sha256) RETURNING size)"
					    " SELECT count(*), coalesce(sum(size), 0)::bigint FROM d",
					NULL, "cannot prune")))
		rc = hv_error_last_status();
	uint64_t contents = 0, bytes = 0;
	if (r) {
		contents = (uint64_t)g_i64(r, 0, 0);
		bytes = (uint64_t)g_i64(r, 0, 1);
		PQclear(r);
	}
	if (rc == HV_OK)
		rc = pg_exec(st, "COMMIT", NULL, "cannot prune");
	else
		pg_rollback(st);
	if (rc == HV_OK) {
		res->runs = runs;
		res->artifacts = arts;
		res->contents = contents;
		res->content_bytes = bytes;
	}
	return rc;
}

const hvst_history_ops hvst_pg_history = {
	.name = "postgresql",
	.run_begin = pg_run_begin,
	.run_finish = pg_run_finish,
	.runs = pg_runs,
	.run_next = pg_run_next,
	.run_free = pg_run_free,
	.mime_types = pg_mime_types,
	.artifacts = pg_artifacts,
	.artifact_next = pg_artifact_next,
	.artifact_free = pg_artifact_free,
	.content_get = pg_content_get,
	.artifact_sha = pg_artifact_sha,
	.prune_history = pg_prune_history,
	.close = pg_close,
};

/* ---- Push ------------------------------------------------------------------------------- */

/* One local run's artifacts, copied out of the iterator (its rows live until the next). */
typedef struct push_run {
	hv_artifact_in *a;
	char (*shas)[65];
	int64_t *recorded;
	char **bufs;
	size_t n, cap;
} push_run;

static void push_run_clear(push_run *pr)
{
	for (size_t i = 0; i < pr->n; i++)
		free(pr->bufs[i]);
	pr->n = 0;
}

static void push_run_free(push_run *pr)
{
	push_run_clear(pr);
	free(pr->a);
	free(pr->shas);
	free(pr->recorded);
	free(pr->bufs);
}

static hv_status push_run_add(push_run *pr, const hv_artifact_row *r)
{
	if (pr->n == pr->cap) {
		size_t cap = pr->cap ? 2 * pr->cap : 64;
		hv_artifact_in *a = realloc(pr->a, cap * sizeof(*a));
		if (a)
			pr->a = a;
		char(*sh)[65] = realloc(pr->shas, cap * sizeof(*sh));
		if (sh)
			pr->shas = sh;
		int64_t *rec = realloc(pr->recorded, cap * sizeof(*rec));
		if (rec)
			pr->recorded = rec;
		char **bufs = realloc(pr->bufs, cap * sizeof(*bufs));
		if (bufs)
			pr->bufs = bufs;
		if (!a || !sh || !rec || !bufs)
			return hv_error_set(HV_ENOMEM, "out of memory");
		pr->cap = cap;
	}
	size_t ml = strlen(r->mime_type) + 1;
	size_t cl = r->content ? r->content_len : 0;
	size_t chl = r->change ? strlen(r->change) + 1 : 0;
	char *buf = malloc(r->path_len + 1 + r->name_len + 1 + ml + chl + cl + 1);
	if (!buf)
		return hv_error_set(HV_ENOMEM, "out of memory");
	char *p = buf;
	hv_artifact_in *a = &pr->a[pr->n];
	memset(a, 0, sizeof(*a));
	memcpy(p, r->path, r->path_len);
	p[r->path_len] = '\0';
	a->path = p;
	a->path_len = r->path_len;
	p += r->path_len + 1;
	memcpy(p, r->name, r->name_len);
	p[r->name_len] = '\0';
	a->name = p;
	a->name_len = r->name_len;
	p += r->name_len + 1;
	memcpy(p, r->mime_type, ml);
	a->mime_type = p;
	p += ml;
	if (r->change) {
		memcpy(p, r->change, chl);
		a->change = p;
		p += chl;
	}
	if (r->content) {
		if (cl)
			memcpy(p, r->content, cl);
		a->content = p;
		a->content_len = cl;
	}
	a->size = r->size;
	snprintf(pr->shas[pr->n], 65, "%s", r->sha256);
	a->sha256 = pr->shas[pr->n];
	pr->recorded[pr->n] = r->recorded_at_ns;
	pr->bufs[pr->n++] = buf;
	return HV_OK;
}

/* Copies one ended local run into dst; *added when it was not there already. */
static hv_status push_one(hv_store *st, hv_store *dst, const char *identity, const hv_run_row *r,
			  push_run *pr, bool *added)
{
	*added = false;
	push_run_clear(pr);
	hv_artifact_filter af = {.run_id = r->run_id, .with_content = true};
	hv_artifact_iter *ai;
	int rc = hv_store_artifacts(st, &af, &ai);
	if (rc != HV_OK)
		return rc;
	const hv_artifact_row *ar;
	while ((rc = hv_artifact_iter_next(ai, &ar)) == HV_OK)
		if ((rc = push_run_add(pr, ar)) != HV_OK)
			break;
	hv_artifact_iter_free(ai);
	if (rc != HV_DONE)
		return rc;
	hv_buf origin = {0};
	hv_buf_printf(&origin, "%s %s %lld", r->host ? r->host : dst->pg->host, identity,
		      (long long)r->run_id);
	char pruned_key[512];
	snprintf(pruned_key, sizeof(pruned_key), "pruned %s %s", r->host ? r->host : dst->pg->host,
		 identity);
	if (origin.failed || !origin.data) {
		hv_buf_free(&origin);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	rc = pg_exec(dst, "BEGIN", NULL, "cannot push");
	if (rc == HV_OK)
		rc = pg_exec(dst, "LOCK TABLE harvest.contents IN ROW EXCLUSIVE MODE", NULL,
			     "cannot push");
	int64_t id = 0;
	/* Two tries: the origin, then, when the fleet holds that origin for a run that began at
	 * another time, the origin with this run's start. That is a copy of this database (a
	 * sandbox image made with a history in it: both copies have its identity and number
	 * their runs alike); each copy's run is pushed once, under an origin its next push
	 * makes again. */
	for (int attempt = 0; rc == HV_OK && attempt < 2 && !id; attempt++) {
		if (attempt == 1) {
			pgp p = {0};
			p_text(&p, origin.data);
			p_int(&p, r->started_at_ns);
			PGresult *res = pg_run(dst, "SELECT 1 FROM harvest.runs WHERE origin = $1 AND"
						    " started_at_ns <> $2", &p, "cannot push");
			if (!res) {
				rc = hv_error_last_status();
				break;
			}
			bool other = PQntuples(res) == 1;
			PQclear(res);
			if (!other)
				break; /* this run, pushed before */
			hv_buf_printf(&origin, "@%lld", (long long)r->started_at_ns);
			if (origin.failed) {
				rc = hv_error_set(HV_ENOMEM, "out of memory");
				break;
			}
		}
		pgp p = {0};
		p_text(&p, r->host ? r->host : dst->pg->host);
		p_bytes(&p, r->label, r->label_len);
		p_text(&p, r->command_json);
		p_bytes(&p, r->dir, r->dir_len);
		p_int(&p, r->started_at_ns);
		p_text(&p, origin.data);
		/* Not when the fleet pruned this database's runs up to this one (prune keeps the
		 * mark, below): pushing again must not bring pruned runs back. */
		p_text(&p, pruned_key);
		p_int(&p, r->run_id);
		PGresult *res = pg_run(dst, "INSERT INTO harvest.runs(host, label, command, dir,"
					    " started_at_ns, origin) SELECT $1, $2, $3, $4, $5, $6"
					    " WHERE NOT EXISTS (SELECT 1 FROM harvest.meta WHERE key = $7"
					    " AND CASE WHEN value ~ '^[0-9]+$' THEN value::bigint >= $8"
					    " END)"
					    " ON CONFLICT (origin) DO NOTHING RETURNING id", &p,
				       "cannot push");
		if (!res)
			rc = hv_error_last_status();
		else if (PQntuples(res) == 1)
			id = g_i64(res, 0, 0);
		PQclear(res);
	}
	if (rc == HV_OK && id) {
		hv_run_end e;
		hv_run_row_end(r, &e);
		if (!e.stdout_data)
			e.stdout_data = "";
		if (!e.stderr_data)
			e.stderr_data = "";
		rc = pg_record_end(dst, id, &e);
		if (rc == HV_OK)
			rc = pg_record_artifacts(dst, id, pr->a, pr->n, pr->shas, pr->recorded);
	}
	if (rc == HV_OK)
		rc = pg_exec(dst, "COMMIT", NULL, "cannot push");
	else
		pg_rollback(dst);
	hv_buf_free(&origin);
	*added = rc == HV_OK && id;
	return rc;
}

hv_status hv_store_push(hv_store *st, const char *uri, int64_t since_run_id, uint64_t *pushed)
{
	if (!st || !uri || !pushed)
		return hv_error_set(HV_EUSAGE, "hv_store_push: missing argument");
	*pushed = 0;
	if (st->hist != &hvst_sqlite_history)
		return hv_error_set(HV_EUSAGE, "push: the local history must be a SQLite file");
	if (!hvst_is_pg_uri(uri))
		return hv_error_set(HV_EUSAGE, "push: --to must be a postgresql:// URI");
	hv_store *dst = calloc(1, sizeof(*dst));
	if (!dst)
		return hv_error_set(HV_ENOMEM, "out of memory");
	int rc = hvst_pg_open(dst, uri);
	/* hv_store_interrupt(st) stops the pushes too. */
	if (dst->pg)
		dst->pg->outer = &st->interrupted;
	/* The runs, oldest first, read out before any is pushed (ids only). */
	int64_t *ids = NULL;
	size_t n = 0, cap = 0;
	hv_run_iter *it = NULL;
	if (rc == HV_OK)
		rc = hv_store_runs(st, NULL, &it);
	const hv_run_row *r;
	while (rc == HV_OK && (rc = hv_run_iter_next(it, &r)) == HV_OK) {
		if (r->run_id <= since_run_id || !r->ended)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			int64_t *p = realloc(ids, cap * sizeof(*ids));
			if (!p) {
				rc = hv_error_set(HV_ENOMEM, "out of memory");
				break;
			}
			ids = p;
		}
		ids[n++] = r->run_id;
	}
	if (rc == HV_DONE)
		rc = HV_OK;
	hv_run_iter_free(it);
	/* The origin of a pushed run: its host, this database's identity (a random id made with
	 * the database: a new database at the same path is another one) and its local id. */
	char identity[64] = "";
	sqlite3_stmt *q = NULL;
	if (rc == HV_OK && sqlite3_prepare_v2(st->db, "SELECT uuid FROM store_identity", -1, &q,
					      NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
		snprintf(identity, sizeof(identity), "%s", (const char *)sqlite3_column_text(q, 0));
	sqlite3_finalize(q);
	if (rc == HV_OK && !*identity)
		rc = hv_error_set(HV_EDB, "%s: this database has no identity (open it for writing "
				  "once to upgrade it)", hv_store_path(st));
	push_run pr = {0};
	for (size_t i = n; rc == HV_OK && i-- > 0;) {
		hv_run_filter f = {.run_id = ids[i], .with_output = true};
		if ((rc = hv_store_runs(st, &f, &it)) != HV_OK)
			break;
		bool added = false;
		if ((rc = hv_run_iter_next(it, &r)) == HV_OK)
			rc = push_one(st, dst, identity, r, &pr, &added);
		else if (rc == HV_DONE)
			rc = HV_OK; /* pruned meanwhile */
		hv_run_iter_free(it);
		if (added)
			(*pushed)++;
	}
	push_run_free(&pr);
	free(ids);
	hv_error_saved saved;
	hv_error_save(&saved);
	hv_store_close(dst);
	return hv_error_restore(&saved, rc);
}
