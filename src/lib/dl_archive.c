/* libarchive's function table (dl_archive.h). */
#define HV_DL_ARCHIVE_IMPL
#include "dl_archive.h"

#include "dl.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

struct hv__archive_api hv__archive;

static pthread_mutex_t archive_lock = PTHREAD_MUTEX_INITIALIZER;
static bool archive_loaded;

/* Resolves every symbol into a local table first: hv__archive is written only whole, so a
 * failed load leaves no half-filled table behind. */
static int resolve(void *h, struct hv__archive_api *api, char *why, size_t cap)
{
	void *p;
#define HV_ARCHIVE_RESOLVE(f)                                                                  \
	if (!(p = hv__dl_sym(h, HV_ARCHIVE_SONAME, #f, why, cap)))                             \
		return -1;                                                                     \
	memcpy(&api->f, &p, sizeof(p));
	HV_ARCHIVE_FUNCS(HV_ARCHIVE_RESOLVE)
#undef HV_ARCHIVE_RESOLVE
	return 0;
}

int hv__archive_load(char *why, size_t cap)
{
	int rc = 0;
	pthread_mutex_lock(&archive_lock);
	if (!archive_loaded) {
		struct hv__archive_api api;
		void *h = hv__dl_open(HV_ARCHIVE_SONAME, "HARVEST_TEST_LIBARCHIVE", why, cap);
		if (!h || resolve(h, &api, why, cap) != 0) {
			rc = -1;
		} else {
			hv__archive = api;
			archive_loaded = true;
		}
		/* A handle without every symbol is kept open: dlclose of a library that may have
		 * run constructors is not worth the risk for an error path. */
	}
	pthread_mutex_unlock(&archive_lock);
	return rc;
}
