/* The isolated libmagic worker: sandboxed (one descriptor, seccomp), replaced when it crashes,
 * hangs or tries to open a file (that file gets application/octet-stream and a warning, later
 * files their real answers); answers equal to in-process libmagic; lazy loading and one read
 * transaction per batch in the cached path. Faults come from the test-only switch
 * HARVEST_TEST_WORKER_FAULT=1: a file starting "HARVEST-TEST-CRASH" makes the worker abort,
 * "-HANG" sleep forever, "-OPEN" call open(2). */
#include "testutil.h"
#include "harvest/collect.h"
#include "harvest/mime.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"
#include "mime_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Under valgrind (no seccomp there) the worker runs unfiltered: a refused open is an exit(3). */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef UNDER_VALGRIND
#define UNDER_VALGRIND() false
#endif

#define LIMIT_MS (UNDER_VALGRIND() ? 20000 : 500)

static const char good_text[] = "hello, world\n";
static const char good_sh[] = "#!/bin/sh\necho hi\n";

static char *make_corpus(void)
{
	char *dir = tu_mkdtemp();
	tu_write(dir, "a.txt", good_text, strlen(good_text));
	tu_write(dir, "crash", "HARVEST-TEST-CRASH\n", 19);
	tu_write(dir, "b.sh", good_sh, strlen(good_sh));
	tu_write(dir, "hang", "HARVEST-TEST-HANG\n", 18);
	tu_write(dir, "c.txt", good_text, strlen(good_text));
	tu_write(dir, "open", "HARVEST-TEST-OPEN\n", 18);
	tu_write(dir, "d.sh", good_sh, strlen(good_sh));
	return dir;
}

static int setup(void **state)
{
	(void)state;
	setenv("HARVEST_TEST_WORKER_FAULT", "1", 1);
	/* A short limit: the hang test waits this long (valgrind's workers need more). */
	hv_magic_set_isolation(true, LIMIT_MS);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unsetenv("HARVEST_TEST_WORKER_FAULT");
	hv_magic_set_isolation(true, 0);
	return 0;
}

/* A crash, a hang and an open each give octet-stream and a warning saying why; the files after
 * each get their real answer from a replacement worker. */
static void test_faults_replaced(void **state)
{
	(void)state;
	char *dir = make_corpus();
	static const char *names[] = {"a.txt", "crash", "b.sh", "hang", "c.txt", "open", "d.sh"};
	enum { N = sizeof(names) / sizeof(names[0]) };
	char *paths[N];
	for (size_t i = 0; i < N; i++)
		paths[i] = tu_path(dir, names[i]);
	hv_mime_opts o;
	hv_mime_opts_init(&o);
	o.threads = 1; /* one worker: each fault must be followed by a replacement */
	o.raw = true;
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_paths((const char *const *)paths, N, &o, &r), HV_WARN);
	assert_string_equal(hv_error_last(), "3 of 7 paths could not be examined");
	for (size_t i = 0; i < N; i++)
		assert_non_null(r[i].mime_type);
	assert_string_equal(r[0].mime_type, "text/plain");
	assert_string_equal(r[2].mime_type, "text/x-shellscript");
	assert_string_equal(r[4].mime_type, "text/plain");
	assert_string_equal(r[6].mime_type, "text/x-shellscript");
	for (size_t i = 1; i < N; i += 2) {
		assert_string_equal(r[i].mime_type, "application/octet-stream");
		assert_int_equal(r[i].status, HV_WARN);
		assert_non_null(r[i].error);
		assert_non_null(strstr(r[i].error, paths[i]));
		assert_non_null(strstr(r[i].error, "typed application/octet-stream"));
	}
	for (size_t i = 0; i < N; i += 2)
		assert_null(r[i].error);
	char want[96];
	snprintf(want, sizeof(want), "killed by signal %d", SIGABRT);
	assert_non_null(strstr(r[1].error, want));
	snprintf(want, sizeof(want), "took longer than %d ms", LIMIT_MS);
	assert_non_null(strstr(r[3].error, want));
	/* The open was refused by seccomp: SIGSYS, not the exit(3) a permitted open leads to. */
	if (UNDER_VALGRIND())
		snprintf(want, sizeof(want), "exited with status 3");
	else
		snprintf(want, sizeof(want), "killed by signal %d", SIGSYS);
	assert_non_null(strstr(r[5].error, want));
	hv_mime_results_free(r, N);
	for (size_t i = 0; i < N; i++)
		free(paths[i]);
	tu_rmrf(dir);
	free(dir);
}

/* The same through hv_magic_buffer (inline bytes and, above 64 KiB, a memfd) and hv_magic_fd,
 * on one handle: each fault is answered and the handle keeps working. */
static void test_faults_buffer_and_fd(void **state)
{
	(void)state;
	hv_magic *m;
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
	pid_t first = hvm_magic_worker_pid(m);
	assert_true(first > 0);
	const char *t;
	assert_int_equal(hv_magic_buffer(m, "HARVEST-TEST-CRASH", 18, -1, "x", &t), HV_WARN);
	assert_string_equal(t, "application/octet-stream");
	assert_int_equal(hvm_magic_worker_pid(m), -1);
	assert_int_equal(hv_magic_buffer(m, good_sh, strlen(good_sh), -1, "y", &t), HV_OK);
	assert_string_equal(t, "text/x-shellscript");
	assert_true(hvm_magic_worker_pid(m) > 0);
	assert_int_not_equal(hvm_magic_worker_pid(m), first);
	size_t big_len = 200 * 1024;
	char *big = malloc(big_len);
	assert_non_null(big);
	memset(big, 'a', big_len);
	memcpy(big, "HARVEST-TEST-OPEN", 17);
	assert_int_equal(hv_magic_buffer(m, big, big_len, -1, "big", &t), HV_WARN);
	assert_string_equal(t, "application/octet-stream");
	assert_non_null(strstr(hv_error_last(), UNDER_VALGRIND() ? "big: the libmagic worker exited"
								 : "big: the libmagic worker was killed by signal"));
	memcpy(big, "plain text, long", 16);
	assert_int_equal(hv_magic_buffer(m, big, big_len, -1, "big", &t), HV_OK);
	assert_string_equal(t, "text/plain");
	free(big);
	char *dir = make_corpus();
	char *crash = tu_path(dir, "crash");
	int fd = open(crash, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(hv_magic_fd(m, fd, crash, &t), HV_WARN);
	assert_string_equal(t, "application/octet-stream");
	close(fd);
	hv_magic_close(m);
	free(crash);
	tu_rmrf(dir);
	free(dir);
}

/* The worker holds one descriptor (its socket) and runs under a seccomp filter. */
static void test_worker_sandboxed(void **state)
{
	(void)state;
	hv_magic *m;
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
	pid_t pid = hvm_magic_worker_pid(m);
	assert_true(pid > 0);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	assert_non_null(d);
	int fds = 0;
	const struct dirent *e;
	while ((e = readdir(d)) != NULL)
		/* (valgrind keeps descriptors of its own, numbered from 1024 up, in every process) */
		fds += e->d_name[0] != '.' && (!UNDER_VALGRIND() || atoi(e->d_name) < 1024);
	closedir(d);
	assert_int_equal(fds, 1);
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[256];
	int mode = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Seccomp: %d", &mode) == 1)
			break;
	fclose(f);
	assert_int_equal(mode, UNDER_VALGRIND() ? 0 : 2); /* 2: SECCOMP_MODE_FILTER */
	hv_magic_close(m);
}

/* Isolated answers equal in-process ones on the files of a system directory. */
static void test_isolated_equals_in_process(void **state)
{
	(void)state;
	const char *dirs[] = {"/usr/bin", "/usr/share/mime", "/etc"};
	char *paths[240];
	size_t n = 0;
	for (size_t k = 0; k < 3; k++) {
		DIR *d = opendir(dirs[k]);
		if (!d)
			continue;
		const struct dirent *e;
		size_t taken = 0;
		while ((e = readdir(d)) != NULL && taken < 80) {
			if (e->d_name[0] == '.')
				continue;
			char *p = tu_path(dirs[k], e->d_name);
			struct stat s;
			if (lstat(p, &s) == 0 && S_ISREG(s.st_mode) && access(p, R_OK) == 0) {
				paths[n++] = p;
				taken++;
			} else {
				free(p);
			}
		}
		closedir(d);
	}
	assert_true(n >= 100);
	hv_mime_opts o;
	hv_mime_opts_init(&o);
	hv_mime_result *iso = NULL, *local = NULL;
	assert_int_equal(hv_mime_detect_paths((const char *const *)paths, n, &o, &iso), HV_OK);
	hv_magic_set_isolation(false, 0);
	assert_int_equal(hv_mime_detect_paths((const char *const *)paths, n, &o, &local), HV_OK);
	hv_magic_set_isolation(true, LIMIT_MS);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(iso[i].mime_type, local[i].mime_type);
	hv_mime_results_free(iso, n);
	hv_mime_results_free(local, n);
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
}

/* A fully cached run loads no libmagic database (nor starts a worker); its answers equal the
 * cold run's and an uncached run's, for regular files, a directory, a symlink and a missing
 * path mixed in one batch. Old system files, so the cache's 2 s rule admits them at once. */
static void test_cached_lazy_and_batched(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *dbpath = tu_path(dir, "h.db");
	char *link = tu_path(dir, "link");
	char *missing = tu_path(dir, "missing");
	assert_int_equal(symlink("/etc/passwd", link), 0);
	const char *paths[] = {"/etc/passwd", "/bin/sh", dir, link, "/usr/share/mime/globs2",
			       missing, "/usr/share/mime/subclasses"};
	enum { N = sizeof(paths) / sizeof(paths[0]) };
	hv_store *st;
	assert_int_equal(hv_store_open(&st, dbpath, 0), HV_OK);
	hv_mime_result *cold = NULL, *warm = NULL, *plain = NULL;
	unsigned before = hvm_magic_loads();
	assert_int_equal(hv_mime_detect_cached(st, paths, N, NULL, &cold), HV_WARN);
	assert_true(hvm_magic_loads() > before);
	assert_int_equal(hv_store_flush(st), HV_OK);
	before = hvm_magic_loads();
	assert_int_equal(hv_mime_detect_cached(st, paths, N, NULL, &warm), HV_WARN);
	assert_int_equal(hvm_magic_loads(), before); /* every regular file was a hit */
	assert_string_equal(hv_error_last(), "1 of 7 paths could not be examined");
	assert_int_equal(hv_mime_detect_paths(paths, N, NULL, &plain), HV_WARN);
	for (size_t i = 0; i < N; i++) {
		if (i == 5) {
			assert_null(warm[i].mime_type);
			assert_null(plain[i].mime_type);
			assert_string_equal(warm[i].error, plain[i].error);
			continue;
		}
		assert_string_equal(cold[i].mime_type, plain[i].mime_type);
		assert_string_equal(warm[i].mime_type, plain[i].mime_type);
	}
	assert_string_equal(warm[2].mime_type, "inode/directory");
	assert_string_equal(warm[3].mime_type, "inode/symlink");
	hv_mime_results_free(cold, N);
	hv_mime_results_free(warm, N);
	hv_mime_results_free(plain, N);
	assert_int_equal(hv_store_close(st), HV_OK);
	unlink(link);
	free(link);
	free(missing);
	free(dbpath);
	tu_rmrf(dir);
	free(dir);
}

/* A worker's fallback answer is never cached: the next run asks libmagic again. */
static void test_fallback_not_cached(void **state)
{
	(void)state;
	char *dir = make_corpus();
	char *dbpath = tu_path(dir, "h.db");
	char *crash = tu_path(dir, "crash");
	/* Back-date it, so the 2 s rule does not keep it out of the cache anyway. */
	struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
	assert_int_equal(utimensat(AT_FDCWD, crash, old, 0), 0);
	hv_store *st;
	assert_int_equal(hv_store_open(&st, dbpath, 0), HV_OK);
	const char *paths[] = {crash};
	hv_mime_result *r = NULL;
	hv_mime_opts o;
	hv_mime_opts_init(&o);
	o.threads = 1;
	assert_int_equal(hv_mime_detect_cached(st, paths, 1, &o, &r), HV_WARN);
	assert_string_equal(r[0].mime_type, "application/octet-stream");
	hv_mime_results_free(r, 1);
	assert_int_equal(hv_store_flush(st), HV_OK);
	hv_stat s;
	struct stat ls;
	assert_int_equal(lstat(crash, &ls), 0);
	HV_STAT_FROM(&ls, &s);
	hv_magic *m;
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
	char *cached = NULL;
	assert_int_equal(hv_store_mime_lookup(st, &s, hv_magic_fingerprint(m), &cached), HV_OK);
	assert_null(cached);
	hv_magic_close(m);
	assert_int_equal(hv_store_close(st), HV_OK);
	free(crash);
	free(dbpath);
	tu_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_faults_replaced),
		cmocka_unit_test(test_faults_buffer_and_fd),
		cmocka_unit_test(test_worker_sandboxed),
		cmocka_unit_test(test_isolated_equals_in_process),
		cmocka_unit_test(test_cached_lazy_and_batched),
		cmocka_unit_test(test_fallback_not_cached),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
