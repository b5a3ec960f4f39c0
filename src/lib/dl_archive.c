/* libarchive's function table (dl_archive.h). */
#define HV_DL_ARCHIVE_IMPL
#include "dl_archive.h"

#include "dl.h"

#include <stddef.h>

#define HV_DL_API struct hv__archive_api
HV_DL_DEFINE(lib, hv__archive, HV_ARCHIVE_FUNCS, HV_ARCHIVE_SONAME, "HARVEST_TEST_LIBARCHIVE");

int hv__archive_load(char *why, size_t cap)
{
	return hv__dl_load(&lib, why, cap);
}
