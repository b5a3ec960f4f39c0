/* SQLite through dlopen("libsqlite3.so.0") when the first store is opened (dl.h): `harvest ls`,
 * `walk`, `cat`, `put`, `rm` and `archive` never open one, and loading SQLite (with libm) cost
 * each of them about 0.9 ms of its start. Included instead of <sqlite3.h> by the store's code
 * (store_internal.h) and the few files that read a store (mime_cached.c, page.c, error.c):
 * after this header their sqlite3_* calls go through the table, so the calls read as SQLite's
 * own. Every such call runs on an open store, that is after db_open() loaded the table; the
 * version string (hv_sqlite_version) loads it itself. */
#ifndef HARVEST_DL_SQLITE_H
#define HARVEST_DL_SQLITE_H

#include <sqlite3.h>
#include <stddef.h>

#define HV_SQLITE_SONAME "libsqlite3.so.0"

/* Every SQLite function harvest calls. */
#define HV_SQLITE_FUNCS(X)                                                                     \
	X(sqlite3_bind_blob)                                                                   \
	X(sqlite3_bind_blob64)                                                                 \
	X(sqlite3_bind_int)                                                                    \
	X(sqlite3_bind_int64)                                                                  \
	X(sqlite3_bind_null)                                                                   \
	X(sqlite3_bind_parameter_index)                                                        \
	X(sqlite3_bind_text)                                                                   \
	X(sqlite3_bind_text64)                                                                 \
	X(sqlite3_blob_bytes)                                                                  \
	X(sqlite3_blob_close)                                                                  \
	X(sqlite3_blob_open)                                                                   \
	X(sqlite3_blob_read)                                                                   \
	X(sqlite3_blob_write)                                                                  \
	X(sqlite3_busy_timeout)                                                                \
	X(sqlite3_changes)                                                                     \
	X(sqlite3_changes64)                                                                   \
	X(sqlite3_clear_bindings)                                                              \
	X(sqlite3_close_v2)                                                                    \
	X(sqlite3_column_blob)                                                                 \
	X(sqlite3_column_bytes)                                                                \
	X(sqlite3_column_int)                                                                  \
	X(sqlite3_column_int64)                                                                \
	X(sqlite3_column_text)                                                                 \
	X(sqlite3_column_type)                                                                 \
	X(sqlite3_create_function_v2)                                                          \
	X(sqlite3_db_config)                                                                   \
	X(sqlite3_errmsg)                                                                      \
	X(sqlite3_errstr)                                                                      \
	X(sqlite3_exec)                                                                        \
	X(sqlite3_extended_result_codes)                                                       \
	X(sqlite3_finalize)                                                                    \
	X(sqlite3_free)                                                                        \
	X(sqlite3_get_autocommit)                                                              \
	X(sqlite3_last_insert_rowid)                                                           \
	X(sqlite3_libversion)                                                                  \
	X(sqlite3_mprintf)                                                                     \
	X(sqlite3_open_v2)                                                                     \
	X(sqlite3_prepare_v2)                                                                  \
	X(sqlite3_prepare_v3)                                                                  \
	X(sqlite3_reset)                                                                       \
	X(sqlite3_result_int)                                                                  \
	X(sqlite3_result_null)                                                                 \
	X(sqlite3_step)                                                                        \
	X(sqlite3_stricmp)                                                                     \
	X(sqlite3_system_errno)                                                                \
	X(sqlite3_value_text)

/* Each member has the type of a pointer to the function sqlite3.h declares. */
/* NOLINTNEXTLINE(bugprone-macro-parentheses): f is a declarator here, not an expression */
#define HV_SQLITE_MEMBER(f) __typeof__(f) *f;
struct hv__sqlite_api {
	HV_SQLITE_FUNCS(HV_SQLITE_MEMBER)
};
#undef HV_SQLITE_MEMBER

/* Filled by hv__sqlite_load; read only after it succeeded. */
extern struct hv__sqlite_api hv__sqlite;

/* Loads SQLite once per process (thread-safe; a failure is retried on the next call): 0, or -1
 * with why = "cannot load libsqlite3.so.0: <reason>". */
int hv__sqlite_load(char *why, size_t cap);

#ifndef HV_DL_SQLITE_IMPL
#define sqlite3_bind_blob (hv__sqlite.sqlite3_bind_blob)
#define sqlite3_bind_blob64 (hv__sqlite.sqlite3_bind_blob64)
#define sqlite3_bind_int (hv__sqlite.sqlite3_bind_int)
#define sqlite3_bind_int64 (hv__sqlite.sqlite3_bind_int64)
#define sqlite3_bind_null (hv__sqlite.sqlite3_bind_null)
#define sqlite3_bind_parameter_index (hv__sqlite.sqlite3_bind_parameter_index)
#define sqlite3_bind_text (hv__sqlite.sqlite3_bind_text)
#define sqlite3_bind_text64 (hv__sqlite.sqlite3_bind_text64)
#define sqlite3_blob_bytes (hv__sqlite.sqlite3_blob_bytes)
#define sqlite3_blob_close (hv__sqlite.sqlite3_blob_close)
#define sqlite3_blob_open (hv__sqlite.sqlite3_blob_open)
#define sqlite3_blob_read (hv__sqlite.sqlite3_blob_read)
#define sqlite3_blob_write (hv__sqlite.sqlite3_blob_write)
#define sqlite3_busy_timeout (hv__sqlite.sqlite3_busy_timeout)
#define sqlite3_changes (hv__sqlite.sqlite3_changes)
#define sqlite3_changes64 (hv__sqlite.sqlite3_changes64)
#define sqlite3_clear_bindings (hv__sqlite.sqlite3_clear_bindings)
#define sqlite3_close_v2 (hv__sqlite.sqlite3_close_v2)
#define sqlite3_column_blob (hv__sqlite.sqlite3_column_blob)
#define sqlite3_column_bytes (hv__sqlite.sqlite3_column_bytes)
#define sqlite3_column_int (hv__sqlite.sqlite3_column_int)
#define sqlite3_column_int64 (hv__sqlite.sqlite3_column_int64)
#define sqlite3_column_text (hv__sqlite.sqlite3_column_text)
#define sqlite3_column_type (hv__sqlite.sqlite3_column_type)
#define sqlite3_create_function_v2 (hv__sqlite.sqlite3_create_function_v2)
#define sqlite3_db_config (hv__sqlite.sqlite3_db_config)
#define sqlite3_errmsg (hv__sqlite.sqlite3_errmsg)
#define sqlite3_errstr (hv__sqlite.sqlite3_errstr)
#define sqlite3_exec (hv__sqlite.sqlite3_exec)
#define sqlite3_extended_result_codes (hv__sqlite.sqlite3_extended_result_codes)
#define sqlite3_finalize (hv__sqlite.sqlite3_finalize)
#define sqlite3_free (hv__sqlite.sqlite3_free)
#define sqlite3_get_autocommit (hv__sqlite.sqlite3_get_autocommit)
#define sqlite3_last_insert_rowid (hv__sqlite.sqlite3_last_insert_rowid)
#define sqlite3_libversion (hv__sqlite.sqlite3_libversion)
#define sqlite3_mprintf (hv__sqlite.sqlite3_mprintf)
#define sqlite3_open_v2 (hv__sqlite.sqlite3_open_v2)
#define sqlite3_prepare_v2 (hv__sqlite.sqlite3_prepare_v2)
#define sqlite3_prepare_v3 (hv__sqlite.sqlite3_prepare_v3)
#define sqlite3_reset (hv__sqlite.sqlite3_reset)
#define sqlite3_result_int (hv__sqlite.sqlite3_result_int)
#define sqlite3_result_null (hv__sqlite.sqlite3_result_null)
#define sqlite3_step (hv__sqlite.sqlite3_step)
#define sqlite3_stricmp (hv__sqlite.sqlite3_stricmp)
#define sqlite3_system_errno (hv__sqlite.sqlite3_system_errno)
#define sqlite3_value_text (hv__sqlite.sqlite3_value_text)
#endif

#endif
