/* libmagic's and libseccomp's function tables (dl_magic.h). */
#define HV_DL_MAGIC_IMPL
#include "dl_magic.h"

#include "dl.h"

#include <stddef.h>

#define HV_DL_API struct hv__magic_api
HV_DL_DEFINE(magic_lib, hv__magic, HV_MAGIC_FUNCS, HV_MAGIC_SONAME, "HARVEST_TEST_LIBMAGIC");
#undef HV_DL_API
#define HV_DL_API struct hv__seccomp_api
HV_DL_DEFINE(seccomp_lib, hv__seccomp, HV_SECCOMP_FUNCS, HV_SECCOMP_SONAME,
	     "HARVEST_TEST_LIBSECCOMP");
#undef HV_DL_API

int hv__magic_load(char *why, size_t cap)
{
	return hv__dl_load(&magic_lib, why, cap);
}

int hv__seccomp_load(char *why, size_t cap)
{
	return hv__dl_load(&seccomp_lib, why, cap);
}

int hv__magic_load_whole(magic_t cookie, const char *database)
{
	if (hv__magic.magic_load(cookie, database) != 0)
		return -1;
	/* A load starts with no error: one set now, with an errno, is a part that could not be
	 * read or mapped. */
	return hv__magic.magic_error(cookie) && hv__magic.magic_errno(cookie) > 0 ? -1 : 0;
}
