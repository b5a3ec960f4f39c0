/* Shared libraries loaded on first use rather than when harvest starts: libpq and libarchive
 * (with the ~25 libraries they need: Kerberos, LDAP, GnuTLS, ICU, xml2, the compressors...)
 * serve only the PostgreSQL history and archives, libmagic (with liblzma, libbz2 and zlib) and
 * libseccomp only MIME detection, and SQLite (with libm) only the store; loading them cost
 * every harvest process its start-up time, `harvest ls` of one directory included. Each is
 * opened with dlopen on its first use and its functions resolved into a table (dl_pq.h,
 * dl_archive.h, dl_magic.h, dl_sqlite.h); it stays loaded until the process ends. */
#ifndef HARVEST_DL_H
#define HARVEST_DL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* A library's table of functions, loaded once per process (dl_pq.c, dl_archive.c): names[i]
 * is resolved into the function pointer at offs[i] in table. */
struct hv__dl_lib {
	const char *soname;
	const char *test_env; /* see hv__dl_open */
	const char *const *names;
	const size_t *offs;
	size_t n; /* at most HV_DL_MAX_FUNCS */
	void *table;
	pthread_mutex_t lock;
	bool loaded;
};
#define HV_DL_MAX_FUNCS 64

/* Defines a library's table and its struct hv__dl_lib, named lib, in its dl_*.c file:
 * HV_DL_API names the table's struct type there, funcs is the library's list of functions
 * (an X macro), api the table's name and env the test switch (hv__dl_open). */
#define HV_DL_NAME(f) #f,
#define HV_DL_OFF(f) offsetof(HV_DL_API, f),
#define HV_DL_DEFINE(lib, api, funcs, so, env)                                                 \
	HV_DL_API api;                                                                         \
	static const char *const lib##_names[] = {funcs(HV_DL_NAME)};                           \
	static const size_t lib##_offs[] = {funcs(HV_DL_OFF)};                                  \
	static struct hv__dl_lib lib = {                                                       \
		.soname = (so),                                                                \
		.test_env = (env),                                                             \
		.names = lib##_names,                                                          \
		.offs = lib##_offs,                                                            \
		.n = sizeof(lib##_names) / sizeof(lib##_names[0]),                             \
		.table = &(api),                                                               \
		.lock = PTHREAD_MUTEX_INITIALIZER,                                             \
	}

/* Loads lib once (thread-safe; a failure is retried on the next call): 0, or -1 with why =
 * "cannot load <soname>: <reason>". Every symbol is resolved before the table is written, and
 * the table is written whole, so a failed load leaves no half-filled table behind. */
int hv__dl_load(struct hv__dl_lib *lib, char *why, size_t cap);

/* Opens soname (RTLD_NOW | RTLD_LOCAL). In builds with the test hooks, a non-empty
 * environment variable test_env names the file to open instead (a missing one tests the
 * failure). NULL on failure with why = "cannot load <soname>: <dlerror's reason>". */
void *hv__dl_open(const char *soname, const char *test_env, char *why, size_t cap);

/* The address of name in h; NULL with why set when h lacks it. */
void *hv__dl_sym(void *h, const char *soname, const char *name, char *why, size_t cap);

#endif
