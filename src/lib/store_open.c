/* Finding and opening the store's database file: the default location, the checks of an
 * existing file before SQLite sees it, creating a new one, and closing.
 *
 * Why the open is careful: SQLite itself would happily open a file that is not a database (and
 * fail later), create -wal/-shm files next to it, or switch a stranger's database to WAL mode.
 * So before SQLite sees the file we read its 100-byte header ourselves and refuse anything that
 * is not empty and not a harvest database. For that check to be sound, no process may ever see
 * a SQLite header without our application_id: a missing database is built complete under a
 * temporary name and renamed into place; an empty file someone made is claimed with the id in
 * its first write. The id is thus always in the main file's header, while a WAL database may
 * keep newer header fields (user_version) in its -wal file only: those are checked again
 * through SQLite. */
#include "store_internal.h"
#include "temp_name.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Keep the -wal file from growing without bound after a large transaction. */
#define ST_JOURNAL_SIZE_LIMIT (64 * 1024 * 1024)

/* hv_glob(pattern, value): fnmatch(3) on bytes, for --mime and --name. */
static void sql_glob(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	const unsigned char *pat = sqlite3_value_text(argv[0]);
	const unsigned char *val = sqlite3_value_text(argv[1]);
	if (!pat || !val) {
		sqlite3_result_null(ctx);
		return;
	}
	sqlite3_result_int(ctx, fnmatch((const char *)pat, (const char *)val, 0) == 0);
}

/* ---- Locating the database -------------------------------------------------------------- */

/* "scheme://..." (RFC 3986: a letter, then letters, digits, '+', '-' or '.'). */
static bool looks_like_uri(const char *path)
{
	if (!isalpha((unsigned char)path[0]))
		return false;
	size_t n = 1;
	while (isalnum((unsigned char)path[n]) || path[n] == '+' || path[n] == '-' || path[n] == '.')
		n++;
	return !strncmp(path + n, "://", 3);
}

/* Whether path starts as a libpq key=value connection string does ("host=db user=me
 * password=..."): a keyword libpq knows, then '='. Such a string is not a file name, and it may
 * hold a password, so it is refused without being repeated. */
static bool looks_like_conninfo(const char *path)
{
	static const char *const keys[] = {
		"host", "hostaddr", "port", "dbname", "user", "password", "passfile", "service",
		"sslmode", "connect_timeout", "options", "application_name", "target_session_attrs",
		"channel_binding", "sslrootcert", "sslcert", "sslkey", "gssencmode", "requiressl"};
	while (*path == ' ' || *path == '\t')
		path++;
	size_t n = 0;
	while (path[n] == '_' || islower((unsigned char)path[n]))
		n++;
	size_t k = n;
	while (path[k] == ' ' || path[k] == '\t')
		k++;
	if (n == 0 || path[k] != '=')
		return false;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strlen(keys[i]) == n && !strncmp(path, keys[i], n))
			return true;
	return false;
}

/* The default path; *xdg tells whether it is the XDG location (whose directory we create). */
static hv_status default_path(char **out, bool *xdg, bool skip_env)
{
	*out = NULL;
	*xdg = false;
	const char *env = skip_env ? NULL : getenv("HARVEST_DB");
	hv_buf b = {0};
	int rc;
	if (env && *env) {
		rc = hv_buf_append_str(&b, env);
	} else {
		const char *data = getenv("XDG_DATA_HOME");
		if (data && data[0] == '/') {
			rc = hv_buf_printf(&b, "%s/harvest/harvest.db", data);
		} else {
			const char *home = getenv("HOME");
			struct passwd pw, *res = NULL;
			char pwbuf[4096];
			if ((!home || !*home) &&
			    getpwuid_r(getuid(), &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res)
				home = res->pw_dir;
			if (!home || !*home)
				return hv_error_set(HV_EDB, "cannot find the home directory for the "
						    "database; set HARVEST_DB or use --db");
			rc = hv_buf_printf(&b, "%s/.local/share/harvest/harvest.db", home);
		}
		*xdg = true;
	}
	if (rc != HV_OK) {
		hv_buf_free(&b);
		return rc;
	}
	*out = b.data;
	return HV_OK;
}

hv_status hv_store_default_path(char **out)
{
	HV_NEED(out);
	bool xdg;
	return default_path(out, &xdg, false);
}

/* mkdir -p of the directory part of path, each new directory mode 0700. */
static hv_status make_parent_dirs(const char *path)
{
	char *dir = strdup(path);
	if (!dir)
		return hv_error_set(HV_ENOMEM, "out of memory");
	char *slash = strrchr(dir, '/');
	int rc = HV_OK;
	if (slash && slash != dir) {
		*slash = '\0';
		for (char *p = dir + 1;; p++) {
			if (*p != '/' && *p != '\0')
				continue;
			char c = *p;
			*p = '\0';
			if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
				rc = hv_error_set(HV_EDB, "%s: cannot create the database directory: %s",
						  dir, strerror(errno));
				break;
			}
			*p = c;
			if (c == '\0')
				break;
		}
	}
	free(dir);
	return rc;
}

/* The absolute path of the file with its directory's symlinks resolved; the path as given
 * when that fails (a read-only open of a missing database). */
static char *absolute_path(const char *path)
{
	char *real = realpath(path, NULL);
	return real ? real : strdup(path);
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

enum file_state { FILE_MISSING, FILE_EMPTY, FILE_OURS };

/* Looks at the file before SQLite does: missing, empty, or a harvest database we may open.
 * Anything else is refused here, before anything is written. */
static hv_status inspect_file(const char *path, enum file_state *state)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT) {
			*state = FILE_MISSING;
			return HV_OK;
		}
		return hv_error_set(HV_EDB, "%s: cannot open the database: %s", path,
				    strerror(errno));
	}
	struct stat sb;
	unsigned char hdr[100];
	ssize_t n = 0;
	int rc = HV_OK;
	/* NOLINTNEXTLINE(bugprone-branch-clone): fstat and pread fail with the same message form */
	if (fstat(fd, &sb) != 0) {
		rc = hv_error_set(HV_EDB, "%s: %s", path, strerror(errno));
	} else if (S_ISDIR(sb.st_mode)) {
		rc = hv_error_set(HV_EDB, "%s: not a harvest database (a directory)", path);
	} else if (!S_ISREG(sb.st_mode)) {
		rc = hv_error_set(HV_EDB, "%s: not a harvest database (not a regular file)", path);
	} else if (sb.st_size == 0) {
		*state = FILE_EMPTY;
	} else if ((n = pread(fd, hdr, sizeof(hdr), 0)) < 0) {
		rc = hv_error_set(HV_EDB, "%s: %s", path, strerror(errno));
	} else if ((size_t)n < sizeof(hdr) || memcmp(hdr, "SQLite format 3", 16) != 0) {
		rc = hv_error_set(HV_EDB, "%s: not a SQLite database", path);
	} else if (be32(hdr + 68) != HV_STORE_APPLICATION_ID) {
		rc = hv_error_set(HV_EDB, "%s: not a harvest database (a SQLite database of "
				  "another application)", path);
	} else if (be32(hdr + 60) > HV_STORE_SCHEMA_VERSION) {
		rc = hv_error_set(HV_EDB, "%s: made by a newer harvest (schema version %u; this "
				  "one knows up to %d)", path, be32(hdr + 60),
				  HV_STORE_SCHEMA_VERSION);
	} else {
		*state = FILE_OURS;
	}
	close(fd);
	return rc;
}

/* Whether the directory holding path lets this process create and remove files (errno set
 * when not). -1 when out of memory. */
static int parent_dir_writable(const char *path)
{
	char *dir = strdup(path);
	if (!dir)
		return -1;
	char *slash = strrchr(dir, '/');
	const char *d = ".";
	if (slash == dir)
		d = "/";
	else if (slash) {
		*slash = '\0';
		d = dir;
	}
	int ok = faccessat(AT_FDCWD, d, W_OK | X_OK, AT_EACCESS) == 0;
	int saved = errno;
	free(dir);
	errno = saved;
	return ok;
}

/* Whether path is a file no one may write (chmod a-w), its permission bits in *mode: read-only
 * for root too, whom access(2) lets write anything, since its owner made it so (rm(1) takes
 * such a file to be protected). */
static bool write_protected(const char *path, unsigned *mode)
{
	struct stat sb;
	if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || (sb.st_mode & 0222))
		return false;
	*mode = (unsigned)(sb.st_mode & 07777);
	return true;
}

/* A writing open needs the file and its directory (for -wal, -shm) writable. Checked before
 * SQLite opens anything, so a read-only database gets a clear message and stays untouched. */
static hv_status check_writable_location(const char *path)
{
	if (faccessat(AT_FDCWD, path, R_OK | W_OK, AT_EACCESS) != 0)
		return hv_error_set(HV_EDB, "%s: read-only database (%s)", path, strerror(errno));
	unsigned mode;
	if (write_protected(path, &mode))
		return hv_error_set(HV_EDB, "%s: read-only database (mode %04o: no one may write it)",
				    path, mode);
	int ok = parent_dir_writable(path);
	if (ok < 0)
		return hv_error_set(HV_ENOMEM, "out of memory");
	if (!ok)
		return hv_error_set(HV_EDB, "%s: read-only database (its directory: %s)", path,
				    strerror(errno));
	return HV_OK;
}

/* ---- Opening ------------------------------------------------------------------------------ */

static hv_status refuse_foreign(hv_store *st)
{
	return hv_error_set(HV_EDB, "%s: not a harvest database (a SQLite database of another "
			    "application)", st->path);
}

/* An empty (0-byte) file someone made for us: mark it as ours in its very first write, while
 * still in rollback-journal mode, so the mark is in the main file's header for good and no
 * other process ever sees a SQLite header without it. (Hence no auto_vacuum here: that pragma
 * writes a header of its own first.) Another process may be doing the same: whoever gets the
 * write lock first marks it, the other sees the mark. */
static hv_status claim_empty_file(hv_store *st)
{
	int rc = hvst_tx_begin(st);
	if (rc != HV_OK)
		return rc;
	int64_t app = 0, tables = 0;
	rc = hvst_query_int(st, "PRAGMA application_id", &app);
	if (rc == HV_OK)
		rc = hvst_query_int(st, "SELECT count(*) FROM sqlite_master", &tables);
	if (rc == HV_OK && app == 0 && tables == 0) {
		char sql[64];
		snprintf(sql, sizeof(sql), "PRAGMA application_id = %d", HV_STORE_APPLICATION_ID);
		rc = hvst_exec(st, sql, "cannot set up the database");
	} else if (rc == HV_OK && app != HV_STORE_APPLICATION_ID) {
		rc = refuse_foreign(st);
	}
	if (rc != HV_OK) {
		hvst_tx_rollback(st);
		return rc;
	}
	return hvst_tx_commit(st);
}

/* The checks of an existing file that only read, in one read transaction: a first opener
 * creating the schema at the same moment commits either before all of them or after, so a
 * version of 0 and tables seen together are the file's real state, never a half-seen
 * creation. */
static hv_status check_header(hv_store *st, int64_t *version)
{
	int rc = hvst_exec(st, "BEGIN DEFERRED", "cannot read the database");
	if (rc != HV_OK)
		return rc;
	int64_t app = 0, tables = 0;
	rc = hvst_query_int(st, "PRAGMA application_id", &app);
	if (rc == HV_OK && app != HV_STORE_APPLICATION_ID)
		rc = refuse_foreign(st);
	if (rc == HV_OK)
		rc = hvst_query_int(st, "PRAGMA user_version", version);
	if (rc == HV_OK && *version > HV_STORE_SCHEMA_VERSION)
		rc = hvst_refuse_newer(st, *version);
	/* Parses the schema now, so a corrupt one is refused here rather than mid-command. */
	if (rc == HV_OK)
		rc = hvst_query_int(st, "SELECT count(*) FROM sqlite_master", &tables);
	/* The schema and its version are written in one transaction, so tables without a
	 * version were not made by harvest. */
	if (rc == HV_OK && *version == 0 && tables > 0)
		rc = hv_error_set(HV_EDB, "%s: not a harvest database (tables without a schema "
				  "version)", st->path);
	if (!sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
	return rc;
}

/* A writing open of a harvest database that is not in WAL mode: one harvest did not leave
 * that way (it always does), but a copy, a restore, or `sqlite3 ... 'PRAGMA journal_mode =
 * DELETE'` did. Such a file is adopted: fully checked first (integrity_check, time in its
 * size, once), so a corrupt one is refused before the switch to WAL changes its header. A
 * database harvest keeps in WAL mode gets SQLite's own checks of every page it reads, and
 * `history prune` runs quick_check; a full check at every open would cost every command time
 * in the size of the history. */
static hv_status check_adopted(hv_store *st)
{
	sqlite3_stmt *s = NULL;
	int src = sqlite3_prepare_v2(st->db, "PRAGMA main.journal_mode", -1, &s, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot read the database");
	src = sqlite3_step(s);
	bool wal = src == SQLITE_ROW &&
		   sqlite3_stricmp((const char *)sqlite3_column_text(s, 0), "wal") == 0;
	sqlite3_finalize(s);
	if (src != SQLITE_ROW)
		return hvst_db_error(st, src, "cannot read the database");
	return wal ? HV_OK : hvst_check_integrity(st, true, NULL);
}

static hv_status db_open(hv_store *st, const char *file, int oflags)
{
	/* SQLite is loaded with the first store, not when harvest starts (dl_sqlite.h). */
	char why[512];
	if (hv__sqlite_load(why, sizeof(why)) != 0)
		return hv_error_set(HV_EDB, "%s: cannot open the database: %s",
				    st->path ? st->path : "database", why);
	int rc = sqlite3_open_v2(file, &st->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK)
		return hvst_db_error(st, rc, "cannot open the database");
	sqlite3_extended_result_codes(st->db, 1);
	sqlite3_busy_timeout(st->db, ST_BUSY_TIMEOUT_MS);
	sqlite3_db_config(st->db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
	rc = sqlite3_create_function_v2(st->db, "hv_glob", 2,
					SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS,
					NULL, sql_glob, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return hvst_db_error(st, rc, "cannot open the database");
	return hvst_exec(st, "PRAGMA foreign_keys = ON", "cannot open the database");
}

static void db_close(hv_store *st)
{
	if (!st->db)
		return; /* never opened: SQLite may not even be loaded */
	for (int i = 0; i < STMT__COUNT; i++) {
		sqlite3_finalize(st->stmt[i]);
		st->stmt[i] = NULL;
	}
	sqlite3_close_v2(st->db);
	st->db = NULL;
	st->in_tx = false;
}

/* A read-only open of a database that does not exist (yet): an empty in-memory one with the
 * schema, so queries simply find nothing. */
static hv_status open_ephemeral(hv_store *st)
{
	if (st->db)
		db_close(st);
	int rc = db_open(st, ":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
	if (rc == HV_OK)
		rc = hvst_migrate(st);
	st->ephemeral = true;
	return rc;
}

/* PRAGMA journal_mode = WAL: a no-op read when the database is in WAL mode already (every
 * database harvest creates is). Switching needs an exclusive lock, and two connections that
 * both hold a shared lock while asking for it deadlock: SQLite then fails one at once, without
 * the busy handler. Releasing the statement drops the shared lock, so retrying a little later
 * succeeds; this is bounded by the busy timeout. */
static hv_status switch_to_wal(hv_store *st)
{
	sqlite3_stmt *s;
	int src = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot switch to WAL mode");
	int64_t deadline = hv_store_now_ns() + (int64_t)ST_BUSY_TIMEOUT_MS * 1000000;
	unsigned delay_us = 1000;
	bool wal = false;
	for (;;) {
		src = sqlite3_step(s);
		wal = src == SQLITE_ROW &&
		      sqlite3_stricmp((const char *)sqlite3_column_text(s, 0), "wal") == 0;
		sqlite3_reset(s);
		if ((src & 0xff) != SQLITE_BUSY || hv_store_now_ns() > deadline)
			break;
		usleep(delay_us);
		if (delay_us < 50000)
			delay_us *= 2;
	}
	sqlite3_finalize(s);
	if (src != SQLITE_ROW)
		return hvst_db_error(st, src, "cannot switch to WAL mode");
	if (!wal)
		return hv_error_set(HV_EDB, "%s: cannot switch to WAL mode", st->path);
	return HV_OK;
}

/* Puts the finished database file tmp at path, unless something is there already (then
 * another process was first, and tmp is dropped): never replaces. Errors name the database
 * as it was given (name). */
static hv_status publish(const char *tmp, const char *path, const char *name)
{
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
		return HV_OK;
	int err = errno;
	if (err == EINVAL || err == ENOSYS || err == ENOTSUP) {
		/* No RENAME_NOREPLACE on this file system: link() does not replace either. */
		if (link(tmp, path) == 0) {
			unlink(tmp);
			return HV_OK;
		}
		err = errno;
	}
	unlink(tmp);
	if (err == EEXIST)
		return HV_OK;
	return hv_error_set(HV_EDB, "%s: cannot create the database: %s", name, strerror(err));
}

/* Creates a missing database: built complete under a temporary name next to it (mode 0600:
 * it will keep copies of collected files), with auto_vacuum, the application_id, WAL mode and
 * the schema, then put in place in one rename. No process ever sees it half made, and two
 * processes creating it at once simply agree on whichever was first. */
/* Where a missing database is made: path itself, or, when path is a dangling symlink (a
 * chain of them), the missing file it points to, as `sqlite3` and `touch` would create it.
 * malloc'd; NULL on failure, with the error set and its status in *rc. */
static char *creation_path(const char *path, int *rc)
{
	char *p = strdup(path);
	for (int hops = 0; p; hops++) {
		struct stat sb;
		if (lstat(p, &sb) != 0 || !S_ISLNK(sb.st_mode))
			return p; /* missing (made here), or made by someone meanwhile */
		char target[PATH_MAX];
		ssize_t n = hops < 40 ? readlink(p, target, sizeof(target) - 1) : -1;
		if (n < 0) {
			*rc = hv_error_set(HV_EDB, "%s: cannot create the database: %s", path,
					   strerror(hops < 40 ? errno : ELOOP));
			free(p);
			return NULL;
		}
		target[n] = '\0';
		const char *slash = strrchr(p, '/');
		size_t dir_len = target[0] != '/' && slash ? (size_t)(slash - p) + 1 : 0;
		char *next = malloc(dir_len + (size_t)n + 1);
		if (next) {
			memcpy(next, p, dir_len);
			memcpy(next + dir_len, target, (size_t)n + 1);
		}
		free(p);
		p = next;
	}
	*rc = hv_error_set(HV_ENOMEM, "out of memory");
	return NULL;
}

static hv_status create_database(hv_store *st)
{
	int rc = HV_OK;
	char *target = creation_path(st->path, &rc);
	if (!target)
		return rc;
	/* In the directory the database goes to (the rename must not cross file systems), under
	 * the one temporary name of temp_name.h: 10 bytes, so a database name of NAME_MAX bytes
	 * can be made too (a "<name>.init-XXXXXX" could not). */
	const char *slash = strrchr(target, '/');
	char *dir = !slash ? strdup(".")
		    : slash == target ? strdup("/")
				      : strndup(target, (size_t)(slash - target));
	char *tmp = NULL;
	int fd = dir ? hv_temp_create_in(dir, &tmp, O_RDWR, 0600) : -1;
	int err = dir ? errno : ENOMEM;
	free(dir);
	if (fd < 0) {
		rc = hv_error_set(HV_EDB, "%s: cannot create the database: %s", st->path,
				  strerror(err));
		free(target);
		return rc;
	}
	close(fd);
	hv_store t = {.path = st->path}; /* errors name the database, not the temporary */
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA application_id = %d;"
		 " PRAGMA journal_mode = WAL;", HV_STORE_APPLICATION_ID);
	rc = db_open(&t, tmp, SQLITE_OPEN_READWRITE);
	if (rc == HV_OK)
		rc = hvst_exec(&t, sql, "cannot create the database");
	if (rc == HV_OK)
		rc = hvst_migrate(&t);
	db_close(&t); /* checkpoints: everything is in the one file */
	if (rc == HV_OK)
		rc = publish(tmp, target, st->path);
	else
		unlink(tmp);
	free(tmp);
	free(target);
	return rc;
}

/* Whether a read-only open must use SQLite's immutable mode: readers of a WAL database need a
 * -shm file, which they cannot create in a directory they may not write, and must not leave
 * behind next to a file they may not write. With no -wal file,
 * everything committed is in the main file, and reading it as immutable (no locks, no -shm) is
 * exact, unless its owner starts writing meanwhile; then this one query may fail. */
static bool needs_immutable(const char *path)
{
	/* Another user's database in a directory this one may write: a plain read-only open
	 * would create -wal and -shm files there, owned by this user and left behind, which
	 * the owner's next write could not use. */
	unsigned mode;
	if (parent_dir_writable(path) > 0 && faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0 &&
	    !write_protected(path, &mode))
		return false;
	size_t n = strlen(path);
	char *wal = malloc(n + 5);
	if (!wal)
		return false;
	memcpy(wal, path, n);
	memcpy(wal + n, "-wal", 5);
	struct stat sb;
	bool has_wal = lstat(wal, &sb) == 0;
	free(wal);
	return !has_wal;
}

/* "file:<path, %-escaped>?immutable=1". */
static char *immutable_uri(const char *path)
{
	hv_buf b = {0};
	int rc = hv_buf_append_str(&b, "file:");
	for (const unsigned char *p = (const unsigned char *)path; rc == HV_OK && *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("/._-~", *p))
			rc = hv_buf_append_char(&b, (char)*p);
		else
			rc = hv_buf_printf(&b, "%%%02X", *p);
	}
	if (rc == HV_OK)
		rc = hv_buf_append_str(&b, "?immutable=1");
	if (rc != HV_OK) {
		hv_buf_free(&b);
		return NULL;
	}
	return b.data;
}

static hv_status open_file(hv_store *st, enum file_state state)
{
	int rc;
	if (st->readonly && needs_immutable(st->path)) {
		char *uri = immutable_uri(st->path);
		if (!uri)
			return hv_error_set(HV_ENOMEM, "out of memory");
		rc = db_open(st, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
		free(uri);
	} else if (st->readonly && check_writable_location(st->path) != HV_OK) {
		hv_error_clear();
		rc = db_open(st, st->path, SQLITE_OPEN_READONLY);
	} else {
		/* A read-only handle that could write opens read-write with query_only: a truly
		 * read-only connection cannot remove the -wal and -shm files when it is the last to
		 * close, and would leave them behind after every query. */
		rc = db_open(st, st->path, SQLITE_OPEN_READWRITE);
		if (rc == HV_OK && st->readonly)
			rc = hvst_exec(st, "PRAGMA query_only = 1", "cannot open the database");
	}
	if (rc != HV_OK)
		return rc;
	if (!st->readonly && state == FILE_EMPTY && (rc = claim_empty_file(st)) != HV_OK)
		return rc;
	/* Every check that only reads comes before anything that writes (the switch to WAL,
	 * the schema): a file refused here is left exactly as it was. */
	int64_t version = 0;
	if ((rc = check_header(st, &version)) != HV_OK)
		return rc;
	if (!st->readonly) {
		if ((rc = check_adopted(st)) != HV_OK)
			return rc;
		/* An upgrade of an existing schema comes before the switch to WAL too: a file
		 * whose upgrade fails (tables that only look like harvest's) is rolled back in
		 * its own journal mode, and so left exactly as it was. */
		if (version > 0 && version < HV_STORE_SCHEMA_VERSION && (rc = hvst_migrate(st)) != HV_OK)
			return rc;
		if ((rc = switch_to_wal(st)) != HV_OK)
			return rc;
		char sql[96];
		snprintf(sql, sizeof(sql), "PRAGMA synchronous = NORMAL; PRAGMA journal_size_limit = %d",
			 ST_JOURNAL_SIZE_LIMIT);
		if ((rc = hvst_exec(st, sql, "cannot open the database")) != HV_OK)
			return rc;
	}
	if (version < HV_STORE_SCHEMA_VERSION) {
		if (!st->readonly)
			return version > 0 ? HV_OK : hvst_migrate(st); /* upgraded above */
		/* Created but killed before its schema was written: nothing to read. */
		if (version == 0)
			return open_ephemeral(st);
		return hv_error_set(HV_EDB, "%s: schema version %lld needs an upgrade: run a "
				    "command that writes to the database first", st->path,
				    (long long)version);
	}
	return HV_OK;
}

/* Makes this handle record its process as the owner of what it records: runs through
 * hv_store_run_begin(), snapshots through a TEMP trigger (a trigger of this connection only,
 * holding the owner as a literal), so every snapshot gets its owner in the transaction that
 * creates it, whichever code creates it. */
static hv_status set_owner(hv_store *st)
{
	st->owner = hvst_owner_self();
	if (!st->owner)
		return HV_OK;
	char *sql = sqlite3_mprintf("CREATE TEMP TRIGGER IF NOT EXISTS snapshot_owner"
				    " AFTER INSERT ON main.snapshots BEGIN"
				    " INSERT OR REPLACE INTO snapshot_owners(snapshot_id, owner)"
				    " VALUES (NEW.id, %Q); END", st->owner);
	if (!sql)
		return hv_error_set(HV_ENOMEM, "out of memory");
	int rc = hvst_exec(st, sql, "cannot open the database");
	sqlite3_free(sql);
	return rc;
}

/* A PostgreSQL history's connection, made on a thread of its own while the local file opens:
 * loading libpq and the server's fork of a backend are about half of what recording a run in
 * PostgreSQL adds, and they need nothing from the local file. Made into a store of its own,
 * whose connection moves into the real one once the thread is joined. */
struct pg_opener {
	hv_store tmp;
	const char *uri;
	hv_status rc;
	hv_error_saved err;
	pthread_t thread;
	bool started;
};

static void *pg_open_thread(void *arg)
{
	struct pg_opener *o = arg;
	o->rc = hvst_pg_open(&o->tmp, o->uri);
	if (o->rc != HV_OK)
		hv_error_save(&o->err);
	return NULL;
}

/* Starts the connection to uri for st (its readonly flag set), on the heap (a store is tens
 * of KiB: too much for a caller's small thread stack); synchronous when no thread can be
 * started. NULL when out of memory. */
static struct pg_opener *pg_opener_start(const hv_store *st, const char *uri)
{
	struct pg_opener *o = calloc(1, sizeof(*o));
	if (!o) {
		hv_error_set(HV_ENOMEM, "out of memory");
		return NULL;
	}
	o->tmp.readonly = st->readonly;
	o->tmp.hist = st->hist;
	o->uri = uri;
	/* SQLite first: the dynamic loader's lock would make the local file wait for libpq's
	 * 24 libraries (a failure is reported by the open that needs SQLite). */
	char why[512];
	(void)hv__sqlite_load(why, sizeof(why));
	o->started = pthread_create(&o->thread, NULL, pg_open_thread, o) == 0;
	if (!o->started)
		pg_open_thread(o);
	return o;
}

/* Moves o's connection into st once made, and frees o: rc (the local file's status), or o's
 * failure when rc is HV_OK. */
static hv_status pg_opener_finish(struct pg_opener *o, hv_store *st, hv_status rc)
{
	/* The local file failed: the connection's queries give up at once rather than wait on
	 * the server (pg_wait); a connect still under way ends within its own timeout. */
	if (rc != HV_OK)
		atomic_store(&o->tmp.interrupted, true);
	if (o->started)
		(void)pthread_join(o->thread, NULL);
	st->pg = o->tmp.pg;
	st->hist = o->tmp.hist;
	if (rc == HV_OK && o->rc != HV_OK)
		rc = hv_error_restore(&o->err, o->rc);
	free(o);
	return rc;
}

hv_status hv_store_open(hv_store **out, const char *path, int flags)
{
	return hv_store_open_with_cache(out, path, NULL, flags);
}

hv_status hv_store_open_with_cache(hv_store **out, const char *path, const char *cache_path,
				   int flags)
{
	if (!out)
		return hv_error_set(HV_EUSAGE, "hv_store_open: no output handle");
	*out = NULL;
	if (flags & ~(HV_STORE_READONLY | HV_STORE_NO_HISTORY))
		return hv_error_set(HV_EUSAGE, "hv_store_open: unknown flags 0x%x",
				    (unsigned)(flags & ~(HV_STORE_READONLY | HV_STORE_NO_HISTORY)));
	hv_store *st = calloc(1, sizeof(*st));
	if (!st)
		return hv_error_set(HV_ENOMEM, "out of memory");
	st->readonly = (flags & HV_STORE_READONLY) != 0;
	st->hist = &hvst_sqlite_history;
	int rc;
	bool xdg = false;
	char *pg_uri = NULL;
	if (path) {
		st->path = strdup(path);
		rc = st->path ? HV_OK : hv_error_set(HV_ENOMEM, "out of memory");
	} else {
		rc = default_path(&st->path, &xdg, false);
	}
	/* A PostgreSQL history: the local file holds the MIME cache and snapshots only. */
	if (rc == HV_OK && hvst_is_pg_uri(st->path)) {
		pg_uri = st->path;
		st->path = NULL;
		xdg = false;
		if (cache_path) {
			st->path = strdup(cache_path);
			rc = st->path ? HV_OK : hv_error_set(HV_ENOMEM, "out of memory");
		} else {
			rc = default_path(&st->path, &xdg, true);
		}
		if (rc == HV_OK && hvst_is_pg_uri(st->path))
			rc = hv_error_set(HV_EUSAGE, "the cache database must be a local file, not a "
					  "PostgreSQL URI");
	}
	/* st->path is NULL only when rc is an error: the analyzer cannot see that hv_error_set
	 * (error.c) never returns HV_OK.
	 * NOLINTNEXTLINE(clang-analyzer-core.NullDereference) */
	if (rc == HV_OK && !*st->path)
		rc = hv_error_set(HV_EUSAGE, "the database path is empty");
	/* SQLite gives these names meanings of its own: an in-memory database (a history gone
	 * when the command ends) and a URI (whose options could open another file, or none). */
	if (rc == HV_OK && !strcmp(st->path, ":memory:"))
		rc = hv_error_set(HV_EUSAGE, "%s: an in-memory database cannot keep a history; give a "
				  "file path (./:memory: for a file of that name)", st->path);
	if (rc == HV_OK && !strncmp(st->path, "file:", 5))
		rc = hv_error_set(HV_EUSAGE, "%s: SQLite URIs are not supported; give a file path "
				  "(./%s for a file of that name)", st->path, st->path);
	/* Another scheme ("PostgreSQL://", "postgresql+psycopg://", a typo) is a mistyped URI,
	 * not a file path: refused before anything is created, its password masked. */
	if (rc == HV_OK && looks_like_uri(st->path)) {
		char masked[1024];
		hvst_mask_secret(st->path, masked, sizeof(masked));
		rc = hv_error_set(HV_EUSAGE, "%s: not a postgresql:// or postgres:// URI; give one, or"
				  " a file path (./ before it for a file of that name)", masked);
	}
	if (rc == HV_OK && looks_like_conninfo(st->path))
		rc = hv_error_set(HV_EUSAGE, "the database is a libpq key=value connection string (not"
				  " shown: it may hold a password); give a postgresql:// URI, or a file"
				  " path (./ before it for a file of that name)");
	if (rc == HV_OK && xdg && !st->readonly)
		rc = make_parent_dirs(st->path);

	enum file_state state = FILE_MISSING;
	if (rc == HV_OK)
		rc = inspect_file(st->path, &state);
	if (rc == HV_OK && state == FILE_MISSING && !st->readonly) {
		rc = create_database(st);
		if (rc == HV_OK)
			rc = inspect_file(st->path, &state); /* ours, or another process's */
		if (rc == HV_OK && state == FILE_MISSING)
			rc = hv_error_set(HV_EDB, "%s: the new database vanished", st->path);
	}
	if (rc == HV_OK && !st->readonly && state != FILE_MISSING)
		rc = check_writable_location(st->path);
	/* The connection once the local file is known to be usable (a failure found before it
	 * costs no connection), while the file opens. */
	struct pg_opener *pgo = NULL;
	if (rc == HV_OK && pg_uri && !(flags & HV_STORE_NO_HISTORY) &&
	    !(pgo = pg_opener_start(st, pg_uri)))
		rc = HV_ENOMEM;
	if (rc == HV_OK) {
		st->abs_path = absolute_path(st->path);
		if (!st->abs_path)
			rc = hv_error_set(HV_ENOMEM, "out of memory");
	}
	if (rc == HV_OK) {
		if (st->readonly && state != FILE_OURS)
			rc = open_ephemeral(st);
		else
			rc = open_file(st, state);
	}
	if (rc == HV_OK && !st->readonly && !st->ephemeral)
		rc = set_owner(st);
	/* Best effort: a busy database must not stop a command that only caches MIME answers;
	 * the next open (or prune) ends those runs. */
	if (rc == HV_OK && !pg_uri && !st->readonly && !st->ephemeral &&
	    hvst_reap_interrupted(st) != HV_OK)
		hv_error_clear();
	if (pgo) {
		rc = pg_opener_finish(pgo, st, rc);
		if (rc == HV_OK)
			hvst_pg_reap(st); /* with st->owner, set above */
	}
	free(pg_uri);
	if (rc != HV_OK) {
		hv_error_saved saved;
		hv_error_save(&saved);
		hv_store_close(st);
		return hv_error_restore(&saved, rc);
	}
	*out = st;
	return HV_OK;
}

hv_status hv_store_close(hv_store *st)
{
	if (!st)
		return HV_OK;
	int rc = HV_OK;
	if (st->db) {
		if (st->in_tx)
			hvst_tx_rollback(st);
		rc = hv_store_flush(st);
		db_close(st);
	}
	if (st->hist && st->hist->close)
		st->hist->close(st);
	hvst_mime_pending_free(st);
	free(st->owner);
	free(st->path);
	free(st->abs_path);
	free(st);
	return rc;
}

void hv_store_interrupt(hv_store *st)
{
	if (st)
		atomic_store(&st->interrupted, true);
}

const char *hv_store_path(const hv_store *st)
{
	if (!st)
		return NULL;
	return st->abs_path ? st->abs_path : st->path;
}

hv_status hv_store_integrity_check(hv_store *st)
{
	HV_NEED(st);
	return hvst_check_integrity(st, true, NULL);
}

/* The link count of the database file as SQLite holds it open (found among this process's
 * descriptors by its device and inode), or -1 when it cannot be told (no /proc). */
static long open_file_links(const hv_store *st)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	long links = -1;
	while (links < 0) {
		/* cppcheck-suppress readdirCalled ; d is this call's own stream: readdir is then
		 * thread-safe (glibc, POSIX 2024), and readdir_r is deprecated */
		struct dirent *e = readdir(d);
		if (!e)
			break;
		char *end;
		long fd = strtol(e->d_name, &end, 10);
		struct stat fs;
		if (*end == '\0' && end != e->d_name && fd != dirfd(d) && fstat((int)fd, &fs) == 0 &&
		    (uint64_t)fs.st_dev == st->file_dev && (uint64_t)fs.st_ino == st->file_ino)
			links = (long)fs.st_nlink;
	}
	closedir(d);
	return links;
}

void hv__store_file_note(hv_store *st)
{
	struct stat fs;
	st->file_known = !st->pg && !st->ephemeral &&
			 stat(st->abs_path ? st->abs_path : st->path, &fs) == 0;
	st->file_dev = st->file_known ? (uint64_t)fs.st_dev : 0;
	st->file_ino = st->file_known ? (uint64_t)fs.st_ino : 0;
}

hv_status hv__store_file_check(const hv_store *st)
{
	if (!st || st->pg || !st->file_known)
		return HV_OK;
	struct stat fs;
	int err = 0;
	if (stat(st->abs_path ? st->abs_path : st->path, &fs) != 0)
		err = errno;
	else if ((uint64_t)fs.st_dev == st->file_dev && (uint64_t)fs.st_ino == st->file_ino)
		return HV_OK;
	/* Not at its path: lost only when no name is left to it (removed, or replaced by a
	 * rename over it); moved (its directory renamed), it holds the run where it now is. */
	if (open_file_links(st) != 0)
		return HV_OK;
	if (err)
		return hv_error_set(HV_EDB, "%s: the database was removed while it was written "
				    "(%s): what was recorded is lost", st->path, strerror(err));
	return hv_error_set(HV_EDB, "%s: the database was replaced by another file while it "
			    "was written: what was recorded is lost", st->path);
}
