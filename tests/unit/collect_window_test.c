/* The collector's read-ahead window (src/lib/collect_pipe.c, "The read-ahead pipeline"): files are
 * read, digested and detected on worker threads ahead of the walk, and the collection must be
 * the one a single thread gives (the same order, limits and skip reasons), each file's
 * digest, content and type those of its bytes on disk. Trees are larger than the window (64
 * files, 64 MiB) so that it fills, drains and wraps around. */
#include "testutil.h"
#include "test_hook.h"

#include "harvest/collect.h"
#include "harvest/mime.h"
#include "harvest/store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef tu_fx fx;


/* The bytes of file i: kinds libmagic tells apart (text, CSV, PNG, PDF, ELF, gzip headers,
 * empty), of sizes from 0 to about 40 KiB. */
static size_t file_bytes(int i, unsigned *seed, unsigned char *buf, size_t cap)
{
	static const char *const heads[] = {
		"plain words and more words\n", "a,b,c\n1,2,3\n4,5,6\n",
		"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "%PDF-1.4\n%\xe2\xe3\xcf\xd3\n",
		"\x7f" "ELF\x02\x01\x01", "\x1f\x8b\x08\0\0\0\0\0\0\x03",
	};
	if (i % 13 == 5)
		return 0;
	const char *h = heads[i % 6];
	size_t hl = i % 6 == 2 ? 16 : i % 6 == 4 ? 7 : i % 6 == 5 ? 10 : strlen(h);
	size_t n = hl + (size_t)(rand_r(seed) % 40000);
	if (n > cap)
		n = cap;
	memcpy(buf, h, hl);
	for (size_t k = hl; k < n; k++)
		buf[k] = i % 6 < 2 ? (unsigned char)('a' + rand_r(seed) % 26)
				   : (unsigned char)rand_r(seed);
	return n;
}

/* A flat tree of n entries e000, e001...: regular files, with every 7th a symlink and every
 * 11th a FIFO (neither is ever opened). */
static void make_tree(const char *root, int n, unsigned seed)
{
	static unsigned char buf[48 * 1024];
	for (int i = 0; i < n; i++) {
		char name[16];
		snprintf(name, sizeof(name), "e%03d", i);
		char *p = tu_path(root, name);
		if (i % 7 == 3) {
			assert_int_equal(symlink("e000", p), 0);
		} else if (i % 11 == 4) {
			assert_int_equal(mkfifo(p, 0644), 0);
		} else {
			size_t len = file_bytes(i, &seed, buf, sizeof(buf));
			tu_write(root, name, buf, len);
		}
		free(p);
	}
}

static hv_collection *collect(fx *f, hv_collect_opts *o, int threads)
{
	o->threads = threads;
	hv_collection *c = NULL;
	int rc = hv_collect(f->st, f->root, o, &c);
	if (rc != HV_OK)
		fail_msg("hv_collect: %d %s", rc, hv_error_last());
	return c;
}

static void expect_same(const hv_collection *a, const hv_collection *b)
{
	assert_int_equal(a->n_files, b->n_files);
	assert_int_equal(a->n_skipped, b->n_skipped);
	assert_int_equal(a->incomplete, b->incomplete);
	for (size_t i = 0; i < a->n_files; i++) {
		const hv_output_file *x = &a->files[i], *y = &b->files[i];
		assert_string_equal(x->path, y->path);
		assert_string_equal(x->mime_type, y->mime_type);
		assert_int_equal(x->size, y->size);
		assert_string_equal(x->sha256, y->sha256);
		assert_int_equal(x->content_len, y->content_len);
		assert_int_equal(x->content == NULL, y->content == NULL);
		if (x->content_len)
			assert_memory_equal(x->content, y->content, x->content_len);
	}
	for (size_t i = 0; i < a->n_skipped; i++) {
		const hv_skipped_file *x = &a->skipped[i], *y = &b->skipped[i];
		assert_string_equal(x->path, y->path);
		assert_string_equal(x->reason, y->reason);
		assert_int_equal(x->has_size, y->has_size);
		assert_int_equal(x->size, y->size);
		assert_int_equal(x->error == NULL, y->error == NULL);
		if (x->error)
			assert_string_equal(x->error, y->error);
	}
}

/* Every artifact against its file: in path order, content and digest of the bytes on disk,
 * and the type libmagic (refined by name) gives the file on this thread. */
static void expect_true_to_disk(const fx *f, const hv_collection *c, bool content)
{
	hv_magic *m = NULL;
	assert_int_equal(hv_magic_open(&m, NULL, 0), HV_OK);
	for (size_t i = 0; i < c->n_files; i++) {
		const hv_output_file *o = &c->files[i];
		if (i > 0)
			assert_true(strcmp(c->files[i - 1].path, o->path) < 0);
		char *p = tu_path(f->root, o->path);
		int fd = open(p, O_RDONLY);
		assert_true(fd >= 0);
		struct stat sb;
		assert_int_equal(fstat(fd, &sb), 0);
		unsigned char *data = malloc((size_t)sb.st_size + 1);
		assert_non_null(data);
		assert_int_equal(read(fd, data, (size_t)sb.st_size + 1), sb.st_size);
		assert_int_equal(o->size, (uint64_t)sb.st_size);
		char sha[65];
		tu_sha256_hex(data, (size_t)sb.st_size, sha);
		assert_string_equal(o->sha256, sha);
		if (content) {
			assert_int_equal(o->content_len, (size_t)sb.st_size);
			if (sb.st_size)
				assert_memory_equal(o->content, data, (size_t)sb.st_size);
		} else {
			assert_null(o->content);
		}
		const char *raw, *type;
		assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
		assert_int_equal(hv_magic_fd(m, fd, p, &raw), HV_OK);
		assert_int_equal(hv_mime_refine(NULL, o->name, raw, &type), HV_OK);
		assert_string_equal(o->mime_type, type);
		close(fd);
		free(data);
		free(p);
	}
	hv_magic_close(m);
}

/* The kind of entry i of make_tree(): 0 a regular file, else its skip reason. */
static const char *skip_reason(int i)
{
	return i % 7 == 3 ? "symlink" : i % 11 == 4 ? "not_regular" : NULL;
}

static void test_same_as_one_thread(void **state)
{
	fx *f = *state;
	enum { N = 400 };
	make_tree(f->root, N, 7);
	for (int no_content = 0; no_content < 2; no_content++) {
		hv_collect_opts o;
		hv_collect_opts_init(&o);
		o.no_cache = true;
		o.no_content = no_content;
		hv_collection *one = collect(f, &o, 1);
		hv_collection *many = collect(f, &o, 4);
		expect_same(one, many);
		expect_true_to_disk(f, many, !no_content);
		/* Every regular file is an artifact; symlinks and FIFOs are skipped, in order. */
		size_t files = 0, skipped = 0;
		for (int i = 0; i < N; i++) {
			char name[16];
			snprintf(name, sizeof(name), "e%03d", i);
			if (skip_reason(i)) {
				assert_true(skipped < many->n_skipped);
				assert_string_equal(many->skipped[skipped].path, name);
				assert_string_equal(many->skipped[skipped].reason, skip_reason(i));
				skipped++;
			} else {
				assert_true(files < many->n_files);
				assert_string_equal(many->files[files].path, name);
				files++;
			}
		}
		assert_int_equal(many->n_files, files);
		assert_int_equal(many->n_skipped, skipped);
		assert_false(many->incomplete);
		hv_collection_free(one);
		hv_collection_free(many);
	}
}

/* The limits cut in walk order, as they would with one file at a time: the file count after
 * max_files regular files; the byte total file by file (a file that would pass it is
 * skipped, a later smaller one may still fit). */
static void test_limits_in_walk_order(void **state)
{
	fx *f = *state;
	enum { N = 300 };
	make_tree(f->root, N, 11);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	o.max_files = 57;
	hv_collection *one = collect(f, &o, 1);
	hv_collection *many = collect(f, &o, 3);
	expect_same(one, many);
	assert_int_equal(many->n_files, 57);
	assert_true(many->incomplete);
	size_t limited = 0;
	for (size_t i = 0; i < many->n_skipped; i++)
		limited += strcmp(many->skipped[i].reason, "limit") == 0;
	size_t regular = 0;
	for (int i = 0; i < N; i++)
		regular += skip_reason(i) == NULL;
	assert_int_equal(limited, regular - 57);
	hv_collection_free(one);
	hv_collection_free(many);

	hv_collect_opts_init(&o);
	o.no_cache = true;
	o.max_total_bytes = 2500000;
	one = collect(f, &o, 1);
	many = collect(f, &o, 4);
	expect_same(one, many);
	expect_true_to_disk(f, many, true);
	/* The expected cut, from the sizes on disk in name order. */
	uint64_t total = 0;
	size_t fi = 0, si = 0;
	for (int i = 0; i < N; i++) {
		char name[16];
		snprintf(name, sizeof(name), "e%03d", i);
		if (skip_reason(i)) {
			assert_string_equal(many->skipped[si++].path, name);
			continue;
		}
		char *p = tu_path(f->root, name);
		struct stat sb;
		assert_int_equal(stat(p, &sb), 0);
		free(p);
		if (total + (uint64_t)sb.st_size > o.max_total_bytes) {
			assert_string_equal(many->skipped[si].path, name);
			assert_string_equal(many->skipped[si].reason, "limit");
			si++;
		} else {
			assert_string_equal(many->files[fi++].path, name);
			total += (uint64_t)sb.st_size;
		}
	}
	assert_int_equal(many->n_files, fi);
	assert_int_equal(many->n_skipped, si);
	hv_collection_free(one);
	hv_collection_free(many);
}

/* Files whose sizes add up to more than the window's 64 MiB: the window holds back, and
 * every file still arrives whole. */
static void test_more_bytes_than_the_window(void **state)
{
	fx *f = *state;
	enum { FILES = 9, SIZE = 9 << 20 };
	unsigned char *buf = malloc(SIZE);
	assert_non_null(buf);
	for (int i = 0; i < FILES; i++) {
		for (size_t k = 0; k < SIZE; k += 4096)
			memset(buf + k, 'a' + i + (int)(k / 4096 % 7), 4096);
		char name[16];
		snprintf(name, sizeof(name), "big%d.txt", i);
		tu_write(f->root, name, buf, SIZE);
	}
	free(buf);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	hv_collection *c = collect(f, &o, 4);
	assert_int_equal(c->n_files, FILES);
	assert_int_equal(c->n_skipped, 0);
	expect_true_to_disk(f, c, true);
	hv_collection_free(c);
}

/* Against a snapshot taken right after the tree was written (so its files are racy and
 * the snapshot keeps their digests): unchanged files are read in the window, found equal to
 * the snapshot's digest and left out; files rewritten in place are artifacts. */
static void test_racy_files_in_the_window(void **state)
{
	fx *f = *state;
	enum { N = 200 };
	make_tree(f->root, N, 3);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	int64_t snap = 0;
	assert_int_equal(hv_snapshot_take(f->st, f->root, &o, &snap, NULL, NULL), HV_OK);
	size_t changed = 0;
	for (int i = 0; i < N; i += 9) {
		if (skip_reason(i))
			continue;
		char name[16];
		snprintf(name, sizeof(name), "e%03d", i);
		char *p = tu_path(f->root, name);
		struct stat sb;
		assert_int_equal(stat(p, &sb), 0);
		if (sb.st_size == 0) {
			free(p);
			continue;
		}
		/* One new byte, the size and mtime kept (the ctime moves). */
		int fd = open(p, O_WRONLY);
		assert_true(fd >= 0);
		assert_int_equal(pwrite(fd, "Z", 1, sb.st_size / 2), 1);
		struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
		assert_int_equal(futimens(fd, ts), 0);
		close(fd);
		free(p);
		changed++;
	}
	o.since_snapshot = snap;
	hv_collection *one = collect(f, &o, 1);
	hv_collection *many = collect(f, &o, 4);
	expect_same(one, many);
	expect_true_to_disk(f, many, true);
	assert_int_equal(many->n_files, changed);
	hv_collection_free(one);
	hv_collection_free(many);
}

/* The threads that read files, as the collector's read hook sees them. */
struct readers {
	pthread_mutex_t mu;
	pid_t tids[8];
	int n_tids, calls;
};

static void note_reader(void *ctx, const char *path)
{
	(void)path;
	struct readers *r = ctx;
	pid_t me = (pid_t)syscall(SYS_gettid);
	pthread_mutex_lock(&r->mu);
	r->calls++;
	int k = 0;
	while (k < r->n_tids && r->tids[k] != me)
		k++;
	if (k == r->n_tids && k < 8)
		r->tids[r->n_tids++] = me;
	pthread_mutex_unlock(&r->mu);
}

static int readers_in(fx *f, int threads, struct readers *r)
{
	*r = (struct readers){.mu = PTHREAD_MUTEX_INITIALIZER};
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	hv__test_hook_set(HV__HOOK_COLLECT_BEFORE_READ, note_reader, r);
	hv_collection *c = collect(f, &o, threads);
	hv__test_hook_set(HV__HOOK_COLLECT_BEFORE_READ, NULL, NULL);
	int n = (int)c->n_files;
	hv_collection_free(c);
	return n;
}

/* A worker thread costs a libmagic detector of its own before its first answer: a collect of
 * a handful of files is read by the calling thread alone, a larger one by more. */
static void test_threads_follow_the_work(void **state)
{
	fx *f = *state;
	static unsigned char buf[48 * 1024];
	unsigned seed = 11;
	for (int i = 0; i < 10; i++) {
		char name[16];
		snprintf(name, sizeof(name), "few%02d", i);
		tu_write(f->root, name, buf, file_bytes(i == 5 ? 6 : i, &seed, buf, sizeof(buf)));
	}
	struct readers r;
	assert_int_equal(readers_in(f, 4, &r), 10);
	assert_int_equal(r.calls, 10);
	assert_int_equal(r.n_tids, 1);
	assert_int_equal(r.tids[0], (pid_t)syscall(SYS_gettid));

	/* 200 files of a few bytes each: past the file count, a second thread reads some. */
	for (int i = 0; i < 200; i++) {
		char name[16];
		snprintf(name, sizeof(name), "many%03d", i);
		tu_write(f->root, name, name, strlen(name));
	}
	assert_int_equal(readers_in(f, 4, &r), 210);
	assert_int_equal(r.calls, 210);
	assert_true(r.n_tids >= 2);

	/* With one thread asked for, never another. */
	assert_int_equal(readers_in(f, 1, &r), 210);
	assert_int_equal(r.n_tids, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_same_as_one_thread, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_limits_in_walk_order, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_more_bytes_than_the_window, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_racy_files_in_the_window, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_threads_follow_the_work, tu_fx_setup, tu_fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
