/* libpq's function table (dl_pq.h). */
#define HV_DL_PQ_IMPL
#include "dl_pq.h"

#include "dl.h"

#include <stddef.h>

#define HV_DL_API struct hv__pq_api
HV_DL_DEFINE(lib, hv__pq, HV_PQ_FUNCS, HV_PQ_SONAME, "HARVEST_TEST_LIBPQ");

int hv__pq_load(char *why, size_t cap)
{
	return hv__dl_load(&lib, why, cap);
}
