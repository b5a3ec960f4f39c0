/* Loading a shared library on first use (dl.h). */
#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *hv__dl_open(const char *soname, const char *test_env, char *why, size_t cap)
{
	const char *file = soname;
#ifdef HARVEST_TEST_HOOKS
	const char *t = getenv(test_env);
	if (t && *t)
		file = t;
#else
	(void)test_env;
#endif
	void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		/* dlerror names the file and says why ("...: cannot open shared object file: No
		 * such file or directory"); the soname leads, so the message says which library
		 * is missing even when a test named another file. */
		const char *e = dlerror();
		(void)snprintf(why, cap, "cannot load %s: %s", soname, e ? e : "unknown error");
	}
	return h;
}

void *hv__dl_sym(void *h, const char *soname, const char *name, char *why, size_t cap)
{
	(void)dlerror();
	void *p = dlsym(h, name);
	if (!p) {
		const char *e = dlerror();
		(void)snprintf(why, cap, "cannot load %s: %s", soname, e ? e : name);
	}
	return p;
}

int hv__dl_load(struct hv__dl_lib *lib, char *why, size_t cap)
{
	int rc = 0;
	pthread_mutex_lock(&lib->lock);
	if (!lib->loaded) {
		void *fns[HV_DL_MAX_FUNCS];
		void *h = NULL;
		if (lib->n > HV_DL_MAX_FUNCS)
			(void)snprintf(why, cap, "cannot load %s: too many functions", lib->soname);
		else
			h = hv__dl_open(lib->soname, lib->test_env, why, cap);
		for (size_t i = 0; h && i < lib->n; i++) {
			if (!(fns[i] = hv__dl_sym(h, lib->soname, lib->names[i], why, cap)))
				h = NULL;
		}
		if (h) {
			for (size_t i = 0; i < lib->n; i++)
				memcpy((char *)lib->table + lib->offs[i], &fns[i], sizeof(fns[i]));
			lib->loaded = true;
		} else {
			rc = -1;
		}
		/* A handle without every symbol is kept open: dlclose of a library that may have
		 * run constructors is not worth the risk for an error path. */
	}
	pthread_mutex_unlock(&lib->lock);
	return rc;
}
