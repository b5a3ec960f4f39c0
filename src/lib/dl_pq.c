/* libpq's function table (dl_pq.h). */
#define HV_DL_PQ_IMPL
#include "dl_pq.h"

#include "dl.h"

#include <stddef.h>

struct hv__pq_api hv__pq;

#define HV_PQ_NAME(f) #f,
#define HV_PQ_OFF(f) offsetof(struct hv__pq_api, f),
static const char *const names[] = {HV_PQ_FUNCS(HV_PQ_NAME)};
static const size_t offs[] = {HV_PQ_FUNCS(HV_PQ_OFF)};
#undef HV_PQ_NAME
#undef HV_PQ_OFF

static struct hv__dl_lib lib = {
	.soname = HV_PQ_SONAME,
	.test_env = "HARVEST_TEST_LIBPQ",
	.names = names,
	.offs = offs,
	.n = sizeof(names) / sizeof(names[0]),
	.table = &hv__pq,
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

int hv__pq_load(char *why, size_t cap)
{
	return hv__dl_load(&lib, why, cap);
}
