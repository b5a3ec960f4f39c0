/* Test helpers: fresh temp directories, files, and running a program with captured output. */
#ifndef HV_TESTUTIL_H
#define HV_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

/* A fresh directory under $TMPDIR (or /tmp); the caller frees the string. */
char *tu_mkdtemp(void);
/* Removes a tree (no symlink is followed). */
void tu_rmrf(const char *path);
/* "dir/rel" in a new string. */
char *tu_path(const char *dir, const char *rel);
/* Writes len bytes to dir/rel (creating or truncating it); fails the test on error. */
void tu_write(const char *dir, const char *rel, const void *data, size_t len);
/* Creates dir/rel as a directory (parents must exist). */
void tu_mkdir(const char *dir, const char *rel);

typedef struct tu_result {
	int status;       /* exit code, or 128+N when killed by signal N */
	char *out;        /* everything written to stdout, NUL-terminated */
	size_t out_len;
	char *err;        /* everything written to stderr, NUL-terminated */
	size_t err_len;
} tu_result;

/* Runs argv (argv[0] looked up in PATH) in cwd (NULL: the current one) with stdin_data (NULL:
 * /dev/null), waits for it, and captures both streams. Fails the test if it cannot run. */
void tu_run(tu_result *r, const char *cwd, const char *stdin_data, char *const argv[]);
/* Runs the built harvest binary with the NULL-terminated arguments after it. */
void tu_harvest(tu_result *r, const char *arg, ...);
/* The same with an argument vector (without argv[0]). */
void tu_harvestv(tu_result *r, const char *cwd, const char *stdin_data, const char *const *args);
void tu_result_free(tu_result *r);

/* Runs fn(arg) in a child that first drops root privileges to nobody (setresuid), and
 * returns the child's exit status. For permission-denied tests, which root would pass. */
int tu_as_nobody(int (*fn)(void *arg), void *arg);

#endif
