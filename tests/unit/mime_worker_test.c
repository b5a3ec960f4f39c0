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
#include "collect_internal.h"
#include "mime_internal.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Under valgrind (no seccomp there) the worker runs unfiltered: a refused open is an exit(3). */
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

/* r's answer is the fallback of a fault: octet-stream, and a warning naming path and why
 * (a crash: SIGABRT; a hang: the limit; an open: refused by seccomp with SIGSYS, not the
 * exit(3) a permitted open leads to). */
enum fault { FAULT_CRASH, FAULT_HANG, FAULT_OPEN };

static void assert_fault(const hv_mime_result *r, const char *path, enum fault f)
{
	assert_int_equal(r->status, HV_WARN);
	assert_string_equal(r->mime_type, "application/octet-stream");
	assert_non_null(r->error);
	assert_non_null(strstr(r->error, path));
	assert_non_null(strstr(r->error, "typed application/octet-stream"));
	char why[96];
	if (f == FAULT_CRASH)
		snprintf(why, sizeof(why), "killed by signal %d", SIGABRT);
	else if (f == FAULT_HANG)
		snprintf(why, sizeof(why), "took longer than %d ms", LIMIT_MS);
	else if (UNDER_VALGRIND())
		snprintf(why, sizeof(why), "exited with status 3");
	else
		snprintf(why, sizeof(why), "killed by signal %d", SIGSYS);
	assert_non_null(strstr(r->error, why));
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
	assert_fault(&r[1], paths[1], FAULT_CRASH);
	assert_fault(&r[3], paths[3], FAULT_HANG);
	assert_fault(&r[5], paths[5], FAULT_OPEN);
	for (size_t i = 0; i < N; i += 2)
		assert_null(r[i].error);
	hv_mime_results_free(r, N);
	for (size_t i = 0; i < N; i++)
		free(paths[i]);
	tu_rmrf(dir);
	free(dir);
}

/* A worker may signal itself (abort) but no other process: asked whether it may signal its
 * parent, it is refused (EPERM) and types the file. Under valgrind, which runs it without the
 * filter, the signal is allowed and the worker's exit(3) is the fault seen. */
static void test_signal_to_another_refused(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	tu_write(dir, "sgnl", "HARVEST-TEST-SGNL\n", 18);
	char *path = tu_path(dir, "sgnl");
	hv_mime_opts o;
	hv_mime_opts_init(&o);
	o.threads = 1;
	o.raw = true;
	hv_mime_result *r = NULL;
	const char *paths[] = {path};
	hv_status rc = hv_mime_detect_paths(paths, 1, &o, &r);
	if (UNDER_VALGRIND()) {
		assert_int_equal(rc, HV_WARN);
		assert_non_null(strstr(r[0].error, "exited with status 3"));
	} else {
		if (rc != HV_OK)
			fail_msg("%s", r && r[0].error ? r[0].error : hv_error_last());
		assert_string_equal(r[0].mime_type, "text/plain");
	}
	hv_mime_results_free(r, 1);
	free(path);
	tu_rmrf(dir);
	free(dir);
}

/* hv_mime_detect_dir's answers, by file name "fNN" (every one once). */
struct dir_answers {
	hv_mime_result r[64];
	int seen[64];
};

static hv_status on_dir_answer(void *ctx, const char *path, size_t path_len,
			       const hv_mime_result *r)
{
	struct dir_answers *a = ctx;
	assert_int_equal(path_len, 3);
	int i = atoi(path + 1);
	assert_true(i >= 0 && i < 64);
	a->seen[i]++;
	a->r[i].status = r->status;
	a->r[i].mime_type = r->mime_type ? strdup(r->mime_type) : NULL;
	a->r[i].error = r->error ? strdup(r->error) : NULL;
	return HV_OK;
}

/* Sandboxed detection of many files goes to each worker in batches (one round trip for up
 * to HVM_WORKER_BATCH_MAX files); a crash, a hang or an open in the middle of a batch still
 * gives only that file octet-stream and its warning, every other file of the batch (before
 * and after it) its real answer, and the files are answered in their order. */
static void test_faults_in_batches(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	enum { N = 64 };
	char *paths[N];
	const char *want[N];
	for (size_t i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%02zu", i);
		const char *body = i % 3 == 0 ? good_sh : good_text;
		want[i] = i % 3 == 0 ? "text/x-shellscript" : "text/plain";
		if (i == 5) {
			body = "HARVEST-TEST-CRASH\n";
			want[i] = NULL;
		} else if (i == 20) {
			body = "HARVEST-TEST-HANG\n";
			want[i] = NULL;
		} else if (i == 37) {
			body = "HARVEST-TEST-OPEN\n";
			want[i] = NULL;
		} else if (i == 50) {
			body = "";
			want[i] = "inode/x-empty";
		}
		tu_write(dir, name, body, strlen(body));
		paths[i] = tu_path(dir, name);
	}
	hv_mime_opts o;
	hv_mime_opts_init(&o);
	o.threads = 1;
	o.raw = true;
	unsigned long batches = hvm_worker_batches();
	hv_mime_result *r = NULL;
	assert_int_equal(hv_mime_detect_paths((const char *const *)paths, N, &o, &r), HV_WARN);
	assert_string_equal(hv_error_last(), "3 of 64 paths could not be examined");
	/* 64 files on one thread: four batches of 16, and the three with a fault asked again one
	 * file at a time: one answered whole */
	assert_int_equal(hvm_worker_batches() - batches, 1);
	for (size_t i = 0; i < N; i++) {
		if (!want[i])
			continue;
		assert_int_equal(r[i].status, HV_OK);
		assert_string_equal(r[i].mime_type, want[i]);
		assert_null(r[i].error);
	}
	assert_fault(&r[5], paths[5], FAULT_CRASH);
	assert_fault(&r[20], paths[20], FAULT_HANG);
	assert_fault(&r[37], paths[37], FAULT_OPEN);
	hv_mime_results_free(r, N);

	/* The 61 good files alone: batches of 15, each answered whole, and the last file on its
	 * own; the same answers. */
	const char *good[N];
	size_t n_good = 0;
	for (size_t i = 0; i < N; i++)
		if (want[i])
			good[n_good++] = paths[i];
	batches = hvm_worker_batches();
	assert_int_equal(hv_mime_detect_paths(good, n_good, &o, &r), HV_OK);
	assert_int_equal(hvm_worker_batches() - batches, 4);
	for (size_t i = 0, g = 0; i < N; i++) {
		if (!want[i])
			continue;
		assert_int_equal(r[g].status, HV_OK);
		assert_string_equal(r[g++].mime_type, want[i]);
	}
	hv_mime_results_free(r, n_good);

	/* The directory itself (hv_mime_detect_dir, no cache): its 64 files are one walk batch,
	 * handed to the worker 16 at a time; the same answers, the faults' warnings naming the
	 * file by its path under the directory. */
	struct dir_answers a;
	memset(&a, 0, sizeof(a));
	hv_collect_opts co;
	hv_collect_opts_init(&co);
	co.no_cache = true;
	batches = hvm_worker_batches();
	assert_int_equal(hv_mime_detect_dir(NULL, dir, &co, &o, on_dir_answer, &a), HV_WARN);
	assert_int_equal(hvm_worker_batches() - batches, 1);
	for (size_t i = 0; i < N; i++) {
		assert_int_equal(a.seen[i], 1);
		if (want[i]) {
			assert_int_equal(a.r[i].status, HV_OK);
			assert_string_equal(a.r[i].mime_type, want[i]);
			assert_null(a.r[i].error);
		} else {
			char name[32];
			snprintf(name, sizeof(name), "f%02zu: ", i);
			assert_int_equal(a.r[i].status, HV_WARN);
			assert_string_equal(a.r[i].mime_type, "application/octet-stream");
			assert_non_null(strstr(a.r[i].error, name));
			assert_non_null(strstr(a.r[i].error, "typed application/octet-stream"));
		}
	}
	for (size_t i = 0; i < N; i++) {
		free(a.r[i].mime_type);
		free(a.r[i].error);
		free(paths[i]);
	}
	tu_rmrf(dir);
	free(dir);
}

/* hvm_magic_buffers hands the sandboxed worker the buffers it would send inline in batches
 * (at most 16 files, 60 KiB); a crash, a hang or an open in a batch still costs only that
 * buffer. An empty buffer, an ELF header (read through a descriptor) and one above the batch's
 * bytes are each asked alone, as hv_magic_buffer asks them. */
static void test_buffers_in_batches(void **state)
{
	(void)state;
	enum { N = 24, EMPTY = 17, BIG = 19, ELF = 21 };
	static char big[100 * 1024];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = i % 12 == 11 ? '\n' : "lorem ipsum "[i % 12];
	static const unsigned char elf[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
	const void *bufs[N];
	size_t lens[N];
	int fds[N];
	const char *paths[N];
	char names[N][16];
	const char *want[N] = {0};
	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "b%02zu", i);
		paths[i] = names[i];
		fds[i] = -1;
		bufs[i] = i % 2 ? good_sh : good_text;
		lens[i] = i % 2 ? strlen(good_sh) : strlen(good_text);
		want[i] = i % 2 ? "text/x-shellscript" : "text/plain";
	}
	/* The faults are in the first batch (the first 16 buffers that go in one); the second
	 * (16, 18, 20, 22, 23) has none. */
	bufs[2] = "HARVEST-TEST-CRASH\n";
	bufs[9] = "HARVEST-TEST-HANG\n";
	bufs[14] = "HARVEST-TEST-OPEN\n";
	lens[2] = lens[9] = lens[14] = 18;
	lens[2] = 19;
	want[2] = want[9] = want[14] = NULL;
	lens[EMPTY] = 0;
	want[EMPTY] = "inode/x-empty";
	bufs[BIG] = big;
	lens[BIG] = sizeof(big);
	want[BIG] = "text/plain";
	bufs[ELF] = elf;
	lens[ELF] = sizeof(elf);
	want[ELF] = NULL; /* hv_magic_buffer's answer, below */
	hv_magic *m = NULL;
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
	const char *t = NULL;
	assert_int_equal(hv_magic_buffer(m, elf, sizeof(elf), -1, "elf", &t), HV_OK);
	char *elf_type = strdup(t);
	char *types[N], *errs[N];
	hv_status rcs[N];
	unsigned long batches = hvm_worker_batches();
	hvm_magic_buffers(m, N, bufs, lens, fds, paths, types, rcs, errs);
	assert_int_equal(hvm_worker_batches() - batches, 1);
	for (size_t i = 0; i < N; i++) {
		if (i == 2 || i == 9 || i == 14)
			continue;
		if (rcs[i] != HV_OK)
			fail_msg("%s: %d %s", paths[i], rcs[i], errs[i] ? errs[i] : "");
		assert_null(errs[i]);
		assert_string_equal(types[i], i == ELF ? elf_type : want[i]);
	}
	hv_mime_result r[3] = {{.status = rcs[2], .mime_type = types[2], .error = errs[2]},
			       {.status = rcs[9], .mime_type = types[9], .error = errs[9]},
			       {.status = rcs[14], .mime_type = types[14], .error = errs[14]}};
	assert_fault(&r[0], paths[2], FAULT_CRASH);
	assert_fault(&r[1], paths[9], FAULT_HANG);
	assert_fault(&r[2], paths[14], FAULT_OPEN);
	for (size_t i = 0; i < N; i++) {
		free(types[i]);
		free(errs[i]);
	}
	free(elf_type);
	hv_magic_close(m);
}

static void on_collect_warning(void *ctx, const char *message)
{
	hv_buf *b = ctx;
	assert_int_equal(hv_buf_append_str(b, message), HV_OK);
	assert_int_equal(hv_buf_append_char(b, '\n'), HV_OK);
}

/* A collect reads several files at once and hands their bytes to its worker in one batch: the
 * answers are those of one file at a time, a crash costs only its file, and a copy of the
 * crashing bytes in the same batch is told so, as a later copy is. */
static void test_collect_batches(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	enum { N = 40 };
	char names[N][16];
	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "f%02zu%s", i, i % 3 ? ".txt" : "");
		char body[64];
		int n = i % 2 ? snprintf(body, sizeof(body), "#!/bin/sh\necho %zu\n", i)
			      : snprintf(body, sizeof(body), "line %zu\nof text\n", i);
		if (i == 5 || i == 6)
			n = snprintf(body, sizeof(body), "HARVEST-TEST-CRASH\n");
		if (i == 21) /* the same bytes as f20 */
			n = snprintf(body, sizeof(body), "line %d\nof text\n", 20);
		tu_write(dir, names[i], body, (size_t)n);
	}
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	o.threads = 1;
	hv_buf warnings = {0};
	o.on_warning = on_collect_warning;
	o.ctx = &warnings;
	hv_collection *c = NULL;
	unsigned long batches = hvm_worker_batches(), hits = hvm_memo_hits();
	hv_status rc = hv_collect(NULL, dir, &o, &c);
	assert_true(rc == HV_OK || rc == HV_WARN);
	assert_true(hvm_worker_batches() > batches);
	/* f06 and f21 are copies: each answered from the memo, once. */
	assert_int_equal(hvm_memo_hits() - hits, 2);
	assert_int_equal(c->n_files, N);
	for (size_t i = 0; i < N; i++) {
		const hv_output_file *f = &c->files[i];
		assert_string_equal(f->path, names[i]);
		const char *want = i == 5 || i == 6 ? "application/octet-stream"
				   : i % 2 && i != 21 ? "text/x-shellscript"
						       : "text/plain";
		assert_string_equal(f->mime_type, want);
	}
	assert_non_null(warnings.data);
	char want[128];
	snprintf(want, sizeof(want), "%s: the libmagic worker was killed by signal %d", names[5],
		 SIGABRT);
	assert_non_null(strstr(warnings.data, want));
	snprintf(want, sizeof(want), "%s: the same bytes as %s: ", names[6], names[5]);
	assert_non_null(strstr(warnings.data, want));
	hv_buf_free(&warnings);
	hv_collection_free(c);
	tu_rmrf(dir);
	free(dir);
}

/* Two files with the same bytes in one batch, which libmagic fails on (an error, not a crash:
 * nothing is left to reuse): the copy is asked again on its own, and both are skipped as
 * "error" with libmagic's message under their own names; the files around them are typed. */
static void test_collect_copy_of_a_failure(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	static const char *names[] = {"a.txt", "fail1", "fail2", "z.sh"};
	tu_write(dir, names[0], "plain words\n", 12);
	tu_write(dir, names[1], "HARVEST-TEST-FAIL\n", 18);
	tu_write(dir, names[2], "HARVEST-TEST-FAIL\n", 18);
	tu_write(dir, names[3], "#!/bin/sh\necho z\n", 17);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	o.threads = 1;
	hv_collection *c = NULL;
	unsigned long alone = hvc_copies_detected_alone(), hits = hvm_memo_hits();
	hv_status rc = hv_collect(NULL, dir, &o, &c);
	assert_int_equal(rc, HV_OK); /* skipped files make it incomplete, not failed */
	assert_int_equal(hvc_copies_detected_alone() - alone, 1);
	assert_int_equal(hvm_memo_hits() - hits, 0);
	assert_int_equal(c->n_files, 2);
	assert_string_equal(c->files[0].path, names[0]);
	assert_string_equal(c->files[0].mime_type, "text/plain");
	assert_string_equal(c->files[1].path, names[3]);
	assert_string_equal(c->files[1].mime_type, "text/x-shellscript");
	assert_int_equal(c->n_skipped, 2);
	assert_true(c->incomplete);
	for (size_t i = 0; i < 2; i++) {
		const hv_skipped_file *f = &c->skipped[i];
		assert_string_equal(f->path, names[1 + i]);
		assert_string_equal(f->reason, "error");
		assert_non_null(f->error);
		assert_non_null(strstr(f->error, names[1 + i]));
		assert_non_null(strstr(f->error, "libmagic failed"));
	}
	hv_collection_free(c);
	tu_rmrf(dir);
	free(dir);
}

/* The spawner's children (zombies included), as the kernel lists them. */
static int spawner_children(pid_t spawner)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)spawner, (int)spawner);
	FILE *fp = fopen(path, "re");
	assert_non_null(fp);
	int n = 0, pid;
	while (fscanf(fp, "%d", &pid) == 1)
		n++;
	fclose(fp);
	return n;
}

/* The state letter of pid in /proc/PID/stat ('?' when it cannot be read: gone). */
static char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *fp = fopen(path, "re");
	if (!fp)
		return '?';
	size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] ? p[2] : '?';
}

/* A handle closed with nothing wrong releases its worker: the caller does not wait for the
 * worker's exit (one told by the test switch to take 3 s over it is still running when the
 * close has returned), and the spawner reaps it by itself. More handles than the spawner
 * keeps unreaped at once are opened, used and closed; at the end the spawner has no more
 * children than the one worker it just started. */
static void test_closed_workers_reaped_by_the_spawner(void **state)
{
	(void)state;
	enum { HANDLES = 70 };
	const char *t;
	hv_magic *lm;
	assert_int_equal(hv_magic_open(&lm, NULL, 0), HV_OK);
	pid_t lingering = hvm_magic_worker_pid(lm);
	assert_true(lingering > 0);
	assert_int_equal(hv_magic_buffer(lm, "HARVEST-TEST-LINGER\n", 20, -1, "l", &t), HV_OK);
	assert_string_equal(t, "text/plain");
	hv_magic_close(lm);
	char st = proc_state(lingering);
	assert_true(st != '?' && st != 'Z' && st != 'X');
	for (int i = 0; i < HANDLES; i++) {
		hv_magic *m;
		assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
		assert_true(hvm_magic_worker_pid(m) > 0);
		assert_int_equal(hv_magic_buffer(m, good_sh, strlen(good_sh), -1, "a.sh", &t), HV_OK);
		assert_string_equal(t, "text/x-shellscript");
		hv_magic_close(m);
	}
	pid_t spawner = hvm_spawner_pid();
	assert_true(spawner > 0);
	/* Each request first reaps the released workers that have exited: one more handle, until
	 * the last released, and the lingering one, have exited too (15 s at most). */
	int children = -1;
	for (int tries = 0; tries < 300 && children != 1; tries++) {
		hv_magic *m;
		assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
		children = spawner_children(spawner);
		hv_magic_close(m);
		if (children != 1)
			usleep(50000);
	}
	assert_int_equal(children, 1);
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

/* HARVEST_TEST_WORKER_FAULT is read once per process, not at each spawn: unset after the first
 * spawn, a new worker still obeys it, until hvm_worker_faults_reload() reads it again. */
static void test_faults_switch_read_once(void **state)
{
	(void)state;
	hv_magic *m;
	const char *t;
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK); /* a spawn: the switch is read */
	assert_int_equal(hv_magic_buffer(m, "HARVEST-TEST-CRASH", 18, -1, "x", &t), HV_WARN);
	hv_magic_close(m);
	unsetenv("HARVEST_TEST_WORKER_FAULT");
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK); /* a new worker, the switch as read */
	assert_int_equal(hv_magic_buffer(m, "HARVEST-TEST-CRASH", 18, -1, "x", &t), HV_WARN);
	assert_string_equal(t, "application/octet-stream");
	hv_magic_close(m);
	hvm_worker_faults_reload();
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
	assert_int_equal(hv_magic_buffer(m, "HARVEST-TEST-CRASH", 18, -1, "x", &t), HV_OK);
	assert_string_equal(t, "text/plain");
	hv_magic_close(m);
	setenv("HARVEST_TEST_WORKER_FAULT", "1", 1);
	hvm_worker_faults_reload();
}

/* A busy loop on CPU 0 for ms milliseconds; then the worker gets back the scheduling it had
 * (any CPU, the normal class), so that it waits for a core only while the loop runs. */
struct spin {
	long ms;
	pid_t worker;
	cpu_set_t cpus; /* the worker's CPUs before it was pinned */
};

static void *spin_cpu0(void *arg)
{
	struct spin *sp = arg;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < sp->ms);
	struct sched_param normal = {0};
	(void)sched_setscheduler(sp->worker, SCHED_OTHER, &normal);
	(void)sched_setaffinity(sp->worker, sizeof(sp->cpus), &sp->cpus);
	return NULL;
}

/* A worker that is only waiting for a core when its time limit passes (on a loaded machine)
 * is given more time, not killed: here it runs at the idle priority on a core a busy thread
 * holds for three times the limit, so it has used almost no CPU when the limit passes. Then
 * it is scheduled as before, with three times the limit left of the six it may wait in all:
 * at the idle priority to the end, any other load on the machine (a CI running other tests)
 * would starve it past them. */
static void test_worker_waiting_for_a_core_not_killed(void **state)
{
	(void)state;
	/* valgrind's LIMIT_MS would make the busy thread run for a minute: a limit of its own */
	const long limit = UNDER_VALGRIND() ? 3000 : 1000;
	hv_magic_set_isolation(true, (unsigned)limit);
	hv_magic *m;
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
	pid_t pid = hvm_magic_worker_pid(m);
	assert_true(pid > 0);
	struct spin sp = {.ms = 3 * limit, .worker = pid};
	assert_int_equal(sched_getaffinity(pid, sizeof(sp.cpus), &sp.cpus), 0);
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	assert_int_equal(sched_setaffinity(pid, sizeof(one), &one), 0);
	struct sched_param idle = {0};
	assert_int_equal(sched_setscheduler(pid, SCHED_IDLE, &idle), 0);
	/* Enough text that libmagic needs several milliseconds of CPU for it. */
	size_t len = 1024 * 1024;
	char *text = malloc(len);
	assert_non_null(text);
	for (size_t i = 0; i < len; i++)
		text[i] = (i % 61 == 60) ? '\n' : (char)('a' + (i * 7) % 26);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, spin_cpu0, &sp), 0);
	struct timespec settle = {0, 50 * 1000000L};
	nanosleep(&settle, NULL);
	const char *t = NULL;
	hv_status rc = hv_magic_buffer(m, text, len, -1, "slow.txt", &t);
	pthread_join(th, NULL);
	free(text);
	if (rc != HV_OK)
		fail_msg("status %d: %s", rc, hv_error_last());
	assert_string_equal(t, "text/plain");
	assert_int_equal(hvm_magic_worker_pid(m), pid); /* the same worker answered */
	hv_magic_close(m);
	hv_magic_set_isolation(true, LIMIT_MS);
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

static hv_status count_answer(void *ctx, const char *path, size_t path_len,
			      const hv_mime_result *r)
{
	(void)path;
	(void)path_len;
	size_t *n = ctx;
	*n += r->mime_type != NULL;
	return HV_OK;
}

/* The same for a directory: a tree answered from the cache loads no libmagic (nor starts a
 * worker), however many detection threads it has. System files, old enough to be cached. */
static void test_cached_dir_loads_nothing(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *dbpath = tu_path(dir, "h.db");
	hv_store *st;
	assert_int_equal(hv_store_open(&st, dbpath, 0), HV_OK);
	hv_mime_opts o;
	hv_mime_opts_init(&o);
	o.threads = 2;
	size_t cold = 0, warm = 0;
	unsigned before = hvm_magic_loads();
	assert_int_equal(hv_mime_detect_dir(st, "/usr/share/mime/text", NULL, &o, count_answer,
					    &cold),
			 HV_OK);
	assert_true(cold > 10);
	assert_true(hvm_magic_loads() > before);
	before = hvm_magic_loads();
	assert_int_equal(hv_mime_detect_dir(st, "/usr/share/mime/text", NULL, &o, count_answer,
					    &warm),
			 HV_OK);
	assert_int_equal(warm, cold);
	assert_int_equal(hvm_magic_loads(), before);
	assert_int_equal(hv_store_close(st), HV_OK);
	free(dbpath);
	tu_rmrf(dir);
	free(dir);
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

/* One cached answer, checked against an uncached run of the same path and options. */
static void check_cached(hv_store *st, const char *path, const hv_mime_opts *o,
			 unsigned long refined_hits_gained, const char *want)
{
	hv_mime_result *cached = NULL, *plain = NULL;
	unsigned long before = hvm_refined_hits();
	assert_int_equal(hv_mime_detect_cached(st, &path, 1, o, &cached), HV_OK);
	assert_int_equal(hvm_refined_hits() - before, refined_hits_gained);
	assert_int_equal(hv_mime_detect_paths(&path, 1, o, &plain), HV_OK);
	assert_string_equal(cached[0].mime_type, plain[0].mime_type);
	if (want)
		assert_string_equal(cached[0].mime_type, want);
	hv_mime_results_free(cached, 1);
	hv_mime_results_free(plain, 1);
}

/* The cache keeps an answer refined by its file's name, reused only under that very name: one
 * inode under four names (hard links) and a copy of it under a fourth get each the answer an
 * uncached run gives, and a repeated name is answered refined from the cache. --raw and a
 * caller's own refinement db never take a cached refinement. */
static void test_cached_refined_by_name(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *dbpath = tu_path(dir, "h.db");
	static const char text[] = "plain words\nand more words\n";
	tu_write(dir, "notes.md", text, sizeof(text) - 1);
	tu_write(dir, "copy.md", text, sizeof(text) - 1);
	char *md = tu_path(dir, "notes.md");
	char *csv = tu_path(dir, "notes.csv");
	char *bare = tu_path(dir, "NOTES");
	char *ts = tu_path(dir, "notes.ts"); /* as long as notes.md */
	char *copy = tu_path(dir, "copy.md");
	assert_int_equal(link(md, ts), 0);
	assert_int_equal(link(md, csv), 0);
	assert_int_equal(link(md, bare), 0);
	/* The cache takes only files whose change time is more than 2 s old. */
	sleep(3);
	hv_store *st;
	assert_int_equal(hv_store_open(&st, dbpath, 0), HV_OK);
	hv_mime_opts o;
	hv_mime_opts_init(&o);
	check_cached(st, md, &o, 0, "text/markdown");  /* a miss */
	check_cached(st, md, &o, 1, "text/markdown");  /* the same name: refined from the cache */
	check_cached(st, ts, &o, 0, "text/x-typescript"); /* the same inode, another name */
	check_cached(st, ts, &o, 1, "text/x-typescript");
	check_cached(st, csv, &o, 0, "text/csv");
	check_cached(st, csv, &o, 1, "text/csv");
	check_cached(st, md, &o, 0, "text/markdown");  /* the row now holds notes.csv's */
	check_cached(st, bare, &o, 0, "text/plain");
	check_cached(st, bare, &o, 1, "text/plain");
	check_cached(st, copy, &o, 0, "text/markdown");
	check_cached(st, copy, &o, 1, "text/markdown");
	o.raw = true;
	check_cached(st, copy, &o, 0, "text/plain");
	o.raw = false;
	hv_mime_db *own;
	assert_int_equal(hv_mime_db_open(&own, "/usr/share/mime"), HV_OK);
	o.db = own;
	check_cached(st, copy, &o, 0, "text/markdown");
	hv_mime_db_close(own);
	assert_int_equal(hv_store_close(st), HV_OK);
	free(md);
	free(csv);
	free(bare);
	free(ts);
	free(copy);
	free(dbpath);
	tu_rmrf(dir);
	free(dir);
}

static void raw_exec(const char *path, const char *sql)
{
	sqlite3 *h;
	assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
	char *err = NULL;
	int rc = sqlite3_exec(h, sql, NULL, NULL, &err);
	if (rc != SQLITE_OK)
		fail_msg("%s: %s", sql, err ? err : "?");
	sqlite3_close(h);
}

static long long raw_int(const char *path, const char *sql)
{
	sqlite3 *h;
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	long long v = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(h);
	return v;
}

/* A version 5 MIME cache is upgraded in place: its rows stay hits, gain the name refinement on
 * their next use, and are answered refined from the cache after that. */
static void test_schema_v5_upgrade(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *dbpath = tu_path(dir, "h.db");
	const char *path = "/etc/passwd";
	hv_store *st;
	assert_int_equal(hv_store_open(&st, dbpath, 0), HV_OK);
	hv_mime_result *res = NULL;
	assert_int_equal(hv_mime_detect_cached(st, &path, 1, NULL, &res), HV_OK);
	hv_mime_results_free(res, 1);
	assert_int_equal(hv_store_close(st), HV_OK);
	/* Back to version 5's table, as an older harvest left it. */
	raw_exec(dbpath, "ALTER TABLE mime_cache DROP COLUMN refined_name;"
			 "ALTER TABLE mime_cache DROP COLUMN refined_type;"
			 "ALTER TABLE mime_cache DROP COLUMN refine_fp;"
			 "ALTER TABLE snapshots DROP COLUMN filters;"
			 "ALTER TABLE snapshots DROP COLUMN unread;"
			 "PRAGMA user_version = 5;");
	assert_int_equal(raw_int(dbpath, "SELECT count(*) FROM mime_cache"), 1);
	assert_int_equal(hv_store_open(&st, dbpath, 0), HV_OK);
	assert_int_equal(raw_int(dbpath, "PRAGMA user_version"), HV_STORE_SCHEMA_VERSION);
	/* The upgraded row is a hit: no libmagic load, and no refinement from the cache yet. */
	unsigned loads = hvm_magic_loads();
	unsigned long before = hvm_refined_hits();
	hv_mime_result *hit = NULL;
	assert_int_equal(hv_mime_detect_cached(st, &path, 1, NULL, &hit), HV_OK);
	assert_int_equal(hvm_magic_loads(), loads);
	assert_int_equal(hvm_refined_hits(), before);
	hv_mime_results_free(hit, 1);
	hv_mime_opts o;
	hv_mime_opts_init(&o);
	check_cached(st, path, &o, 1, NULL);
	check_cached(st, path, &o, 1, NULL);
	assert_int_equal(hv_store_close(st), HV_OK);
	assert_int_equal(raw_int(dbpath, "SELECT count(refined_type) FROM mime_cache"), 1);
	free(dbpath);
	tu_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_faults_replaced),
		cmocka_unit_test(test_signal_to_another_refused),
		cmocka_unit_test(test_faults_in_batches),
		cmocka_unit_test(test_buffers_in_batches),
		cmocka_unit_test(test_collect_batches),
		cmocka_unit_test(test_collect_copy_of_a_failure),
		cmocka_unit_test(test_faults_buffer_and_fd),
		cmocka_unit_test(test_closed_workers_reaped_by_the_spawner),
		cmocka_unit_test(test_faults_switch_read_once),
		cmocka_unit_test(test_worker_waiting_for_a_core_not_killed),
		cmocka_unit_test(test_worker_sandboxed),
		cmocka_unit_test(test_isolated_equals_in_process),
		cmocka_unit_test(test_cached_lazy_and_batched),
		cmocka_unit_test(test_cached_dir_loads_nothing),
		cmocka_unit_test(test_fallback_not_cached),
		cmocka_unit_test(test_cached_refined_by_name),
		cmocka_unit_test(test_schema_v5_upgrade),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
