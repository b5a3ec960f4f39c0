/* Loading a shared library on first use (dl.h). */
#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

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
