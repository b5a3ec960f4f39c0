/* libpq's function table (dl_pq.h). */
#define HV_DL_PQ_IMPL
#include "dl_pq.h"

#include "dl.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

struct hv__pq_api hv__pq;

static pthread_mutex_t pq_lock = PTHREAD_MUTEX_INITIALIZER;
static bool pq_loaded;

/* Resolves every symbol into a local table first: hv__pq is written only whole, so a failed
 * load leaves no half-filled table behind. */
static int resolve(void *h, struct hv__pq_api *api, char *why, size_t cap)
{
	void *p;
#define HV_PQ_RESOLVE(f)                                                                       \
	if (!(p = hv__dl_sym(h, HV_PQ_SONAME, #f, why, cap)))                                  \
		return -1;                                                                     \
	memcpy(&api->f, &p, sizeof(p));
	HV_PQ_FUNCS(HV_PQ_RESOLVE)
#undef HV_PQ_RESOLVE
	return 0;
}

int hv__pq_load(char *why, size_t cap)
{
	int rc = 0;
	pthread_mutex_lock(&pq_lock);
	if (!pq_loaded) {
		struct hv__pq_api api;
		void *h = hv__dl_open(HV_PQ_SONAME, "HARVEST_TEST_LIBPQ", why, cap);
		if (!h || resolve(h, &api, why, cap) != 0) {
			rc = -1;
		} else {
			hv__pq = api;
			pq_loaded = true;
		}
		/* A handle without every symbol is kept open: dlclose of a library that may have
		 * run constructors is not worth the risk for an error path. */
	}
	pthread_mutex_unlock(&pq_lock);
	return rc;
}
