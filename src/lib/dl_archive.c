/* libarchive's function table (dl_archive.h). */
#define HV_DL_ARCHIVE_IMPL
#include "dl_archive.h"

#include "dl.h"

#include <stddef.h>

struct hv__archive_api hv__archive;

#define HV_ARCHIVE_NAME(f) #f,
#define HV_ARCHIVE_OFF(f) offsetof(struct hv__archive_api, f),
static const char *const names[] = {HV_ARCHIVE_FUNCS(HV_ARCHIVE_NAME)};
static const size_t offs[] = {HV_ARCHIVE_FUNCS(HV_ARCHIVE_OFF)};
#undef HV_ARCHIVE_NAME
#undef HV_ARCHIVE_OFF

static struct hv__dl_lib lib = {
	.soname = HV_ARCHIVE_SONAME,
	.test_env = "HARVEST_TEST_LIBARCHIVE",
	.names = names,
	.offs = offs,
	.n = sizeof(names) / sizeof(names[0]),
	.table = &hv__archive,
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

int hv__archive_load(char *why, size_t cap)
{
	return hv__dl_load(&lib, why, cap);
}
