/* Test hooks: points inside libharvest where a test can run code at the exact moment of a
 * race (swap a file for a symlink right before it is opened...). Not part of the API: neither
 * declared in include/ nor exported from the shared library; the tests link the static one. */
#ifndef HARVEST_TEST_HOOK_H
#define HARVEST_TEST_HOOK_H

typedef enum hv__hook_point {
	/* The collector, with a file's relative path, right before it opens the file. */
	HV__HOOK_COLLECT_BEFORE_OPEN,
	/* The collector, with a file's relative path, after its fstat and right before it reads
	 * it (on whichever thread reads it). */
	HV__HOOK_COLLECT_BEFORE_READ,
	/* hv_file_write, with a parent directory's path right after it created it and before it
	 * opens it, and with the destination path right before the rename. */
	HV__HOOK_FILE_WRITE,
	/* hv_remove, with a directory's path right before the tree removal opens it. */
	HV__HOOK_REMOVE,
	HV__HOOK_COUNT
} hv__hook_point;

typedef void (*hv__hook_fn)(void *ctx, const char *path);

/* Installs fn (NULL: none) at point p for the whole process. Set it before the call under test
 * and clear it after: the library's threads read it without a lock. */
void hv__test_hook_set(hv__hook_point p, hv__hook_fn fn, void *ctx);

/* Whether a hook is set at p (so a caller builds the path it passes only then). */
int hv__test_hook_active(hv__hook_point p);

/* Calls the hook at p, if any, with path. */
void hv__test_hook_call(hv__hook_point p, const char *path);

#endif
