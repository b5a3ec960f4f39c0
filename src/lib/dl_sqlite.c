/* SQLite's function table (dl_sqlite.h). */
#define HV_DL_SQLITE_IMPL
#include "dl_sqlite.h"

#include "dl.h"

#include <stddef.h>

#define HV_DL_API struct hv__sqlite_api
HV_DL_DEFINE(lib, hv__sqlite, HV_SQLITE_FUNCS, HV_SQLITE_SONAME, "HARVEST_TEST_LIBSQLITE");

int hv__sqlite_load(char *why, size_t cap)
{
	return hv__dl_load(&lib, why, cap);
}
