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
