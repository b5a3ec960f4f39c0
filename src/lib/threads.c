/* The default number of worker threads, shared by the walker, the collector and MIME
 * detection, so "0: the default" means one thing everywhere. */
#include "internal.h"

#include <unistd.h>

int hv_default_threads(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus < 1)
		return 1; /* unknown: a single thread is always right */
	return cpus > HV_DEFAULT_THREADS_MAX ? HV_DEFAULT_THREADS_MAX : (int)cpus;
}
