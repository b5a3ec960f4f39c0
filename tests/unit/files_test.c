/* The file commands at the library level (include/harvest/files.h): hv_file_copy_to_fd
 * (regular files only, no hang on a FIFO, read and write errors named), hv_file_write
 * (atomic replacement seen from the test hook and from a reader holding the old file,
 * parents, modes, owners, symlinks replaced not followed, a parent swapped for a symlink
 * mid-way, the named fallback without O_TMPFILE's /proc, failures leaving nothing behind) and
 * hv_remove (files, symlinks, refusals, trees with symlinks out, a directory swapped mid-way,
 * a directory moved away while below it, a 100,000-level tree, permission denied as nobody).
 * HV_TEST_FILTER=<test name> runs one case. */
#include "testutil.h"

#include "harvest/files.h"
#include "harvest/walk.h"
#include "test_hook.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------------------- */

static char *P(const char *dir, const char *rel)
{
	return tu_path(dir, rel);
}

static void mkdirs(const char *dir, const char *rel)
{
	char *p = P(dir, rel);
	if (mkdir(p, 0755) != 0)
		fail_msg("mkdir %s: %s", p, strerror(errno));
	free(p);
}

static void mklink(const char *target, const char *dir, const char *rel)
{
	char *p = P(dir, rel);
	if (symlink(target, p) != 0)
		fail_msg("symlink %s: %s", p, strerror(errno));
	free(p);
}

static bool exists(const char *dir, const char *rel)
{
	char *p = P(dir, rel);
	struct stat st;
	bool r = lstat(p, &st) == 0;
	free(p);
	return r;
}

static void assert_content(const char *dir, const char *rel, const char *want, size_t len)
{
	char *p = P(dir, rel);
	size_t n = 0;
	char *got = tu_read_file(p, &n);
	if (!got)
		fail_msg("%s: cannot read", p);
	if (n != len || memcmp(got, want, len) != 0)
		fail_msg("%s: %zu bytes, not the %zu expected", p, n, len);
	free(got);
	free(p);
}

/* The number of entries of dir other than . and .. (temporary files would show here). */
static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

static mode_t mode_of(const char *dir, const char *rel)
{
	char *p = P(dir, rel);
	struct stat st;
	if (lstat(p, &st) != 0)
		fail_msg("lstat %s: %s", p, strerror(errno));
	free(p);
	return st.st_mode;
}

static ino_t ino_of(const char *dir, const char *rel)
{
	char *p = P(dir, rel);
	struct stat st;
	if (lstat(p, &st) != 0)
		fail_msg("lstat %s: %s", p, strerror(errno));
	free(p);
	return st.st_ino;
}

static void put(const char *dir, const char *rel, const char *data, int mode)
{
	char *p = P(dir, rel);
	hv_file_write_opts o;
	hv_file_write_opts_init(&o);
	o.mode = mode;
	hv_status st = hv_file_write_buffer(p, data, strlen(data), &o);
	if (st != HV_OK)
		fail_msg("put %s: %s", p, hv_error_last());
	free(p);
}

/* hv_file_copy_to_fd of dir/rel into a temp file; returns the status and the bytes. */
static hv_status cat(const char *dir, const char *rel, char **out, size_t *len)
{
	char *p = P(dir, rel);
	char *o = P(dir, ".cat-out");
	int fd = open(o, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	hv_status st = hv_file_copy_to_fd(p, fd, "the test's file");
	close(fd);
	*out = tu_read_file(o, len);
	assert_non_null(*out);
	unlink(o);
	free(o);
	free(p);
	return st;
}

/* ---- hv_file_copy_to_fd ----------------------------------------------------------------- */

static void test_copy_bytes(void **state)
{
	char *d = tu_tmpdir();
	char data[512];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 7); /* every byte value, NULs included */
	tu_write(d, "bin", data, sizeof(data));
	mklink("bin", d, "link");
	char *out;
	size_t len;
	assert_int_equal(cat(d, "bin", &out, &len), HV_OK);
	assert_int_equal(len, sizeof(data));
	assert_memory_equal(out, data, sizeof(data));
	free(out);
	/* a symlink FILE is followed, as cat(1) does */
	assert_int_equal(cat(d, "link", &out, &len), HV_OK);
	assert_int_equal(len, sizeof(data));
	free(out);
	tu_write(d, "empty", "", 0);
	assert_int_equal(cat(d, "empty", &out, &len), HV_OK);
	assert_int_equal(len, 0);
	free(out);
}

static void test_copy_missing(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "file", "x", 1);
	mklink("nowhere", d, "dangling");
	char *out;
	size_t len;
	const char *missing[] = {"nope", "no/such", "file/x", "dangling", "file/"};
	for (size_t i = 0; i < sizeof(missing) / sizeof(*missing); i++) {
		hv_status st = cat(d, missing[i], &out, &len);
		free(out);
		if (st != HV_ENOTDIR)
			fail_msg("%s: status %d (%s), not HV_ENOTDIR", missing[i], st, hv_error_last());
		assert_non_null(strstr(hv_error_last(), missing[i]));
	}
}

static void test_copy_refuses_non_regular(void **state)
{
	char *d = tu_tmpdir();
	char *fifo = P(d, "fifo");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	mkdirs(d, "dir");
	alarm(60); /* a hang fails the test (SIGALRM) instead of stalling the suite */
	char *out;
	size_t len;
	assert_int_equal(cat(d, "fifo", &out, &len), HV_EIO);
	free(out);
	assert_non_null(strstr(hv_error_last(), "not a regular file (fifo)"));
	assert_int_equal(cat(d, "dir", &out, &len), HV_EIO);
	free(out);
	assert_non_null(strstr(hv_error_last(), "Is a directory"));
	char *o = P(d, ".o");
	int fd = open(o, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_int_equal(hv_file_copy_to_fd("/dev/zero", fd, NULL), HV_EIO);
	close(fd);
	free(o);
	assert_string_equal(hv_error_last(), "/dev/zero: not a regular file (char)");
	/* a UNIX socket cannot even be opened: it is named as what it is all the same */
	int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_int_equal(chdir(d), 0);
	int sk = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX, .sun_path = "sock"};
	assert_int_equal(bind(sk, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(fchdir(cwd), 0);
	close(cwd);
	assert_int_equal(cat(d, "sock", &out, &len), HV_EIO);
	free(out);
	close(sk);
	assert_non_null(strstr(hv_error_last(), "sock: not a regular file (socket)"));
	alarm(0);
	free(fifo);
}

static void test_copy_write_error(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "f", "some bytes", 10);
	char *p = P(d, "f");
	int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
	assert_true(full >= 0);
	assert_int_equal(hv_file_copy_to_fd(p, full, "standard output"), HV_EIO);
	assert_string_equal(hv_error_last(), "standard output: No space left on device");
	close(full);
	/* a read error names the file: reading through a descriptor that is not open for
	 * writing fails on the write side, so use a closed pipe for EPIPE instead */
	int pp[2];
	assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
	close(pp[0]);
	signal(SIGPIPE, SIG_IGN);
	assert_int_equal(hv_file_copy_to_fd(p, pp[1], NULL), HV_EIO);
	assert_string_equal(hv_error_last(), "output: Broken pipe");
	signal(SIGPIPE, SIG_DFL);
	close(pp[1]);
	free(p);
}

/* Copying a file into itself (cat f >> f) is refused: it would never end (an empty one has
 * nothing to copy and is not refused). In a 1 MiB tmpfs,
 * so a broken refusal fills that, not the disk (root only: mounting). */
static void test_copy_into_itself(void **state)
{
	if (geteuid() != 0)
		skip(); /* mounting needs root */
	char *d = tu_tmpdir();
	mkdirs(d, "small");
	char *small = P(d, "small");
	if (mount("none", small, "tmpfs", 0, "size=1m") != 0)
		fail_msg("mount tmpfs: %s", strerror(errno));
	tu_cleanup_umount(small);
	tu_write(small, "f", "grow", 4);
	char *p = P(small, "f");
	int fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
	assert_true(fd >= 0);
	hv_status st = hv_file_copy_to_fd(p, fd, "standard output");
	close(fd);
	assert_int_equal(st, HV_EIO);
	char want[1024];
	snprintf(want, sizeof(want), "%s: input file is output file", p);
	assert_string_equal(hv_error_last(), want);
	assert_content(small, "f", "grow", 4);
	/* cat f > f: the shell truncated f, so there is nothing to copy, and that is no error */
	fd = open(p, O_WRONLY | O_TRUNC | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(hv_file_copy_to_fd(p, fd, "standard output"), HV_OK);
	close(fd);
	assert_content(small, "f", "", 0);
	free(p);
	free(small);
}

struct nobody_cat {
	const char *path;
	hv_status want;
	const char *msg;
};

static int nobody_cat_fn(void *arg)
{
	const struct nobody_cat *c = arg;
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	hv_status st = hv_file_copy_to_fd(c->path, fd, NULL);
	if (st != c->want)
		return 10;
	return strstr(hv_error_last(), c->msg) ? 0 : 11;
}

static void test_copy_permission_denied_as_nobody(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "secret", "s", 1);
	char *p = P(d, "secret");
	chmod(p, 0600);
	struct nobody_cat c = {p, HV_EIO, ": Permission denied"};
	assert_int_equal(tu_as_nobody(nobody_cat_fn, &c), 0);
	free(p);
}

/* ---- hv_file_write ---------------------------------------------------------------------- */

static void test_write_parents_and_modes(void **state)
{
	char *d = tu_tmpdir();
	mode_t old = umask(022);
	put(d, "a/b/c/new", "new", -1);
	assert_content(d, "a/b/c/new", "new", 3);
	assert_int_equal(mode_of(d, "a/b/c/new") & 07777, 0644);
	assert_int_equal(mode_of(d, "a") & 07777, 0755);
	assert_int_equal(mode_of(d, "a/b/c") & 07777, 0755);
	/* --mode is exact, not masked by the umask */
	umask(077);
	put(d, "a/exact", "x", 0664);
	assert_int_equal(mode_of(d, "a/exact") & 07777, 0664);
	/* an existing file keeps its mode; a given mode replaces it */
	char *p = P(d, "a/exact");
	chmod(p, 0751);
	put(d, "a/exact", "y", -1);
	assert_int_equal(mode_of(d, "a/exact") & 07777, 0751);
	put(d, "a/exact", "z", 0600);
	assert_int_equal(mode_of(d, "a/exact") & 07777, 0600);
	umask(old);
	/* ".." and "." in the part created, and repeated slashes */
	put(d, "x//y/../z/./f", "f", -1);
	assert_content(d, "x/z/f", "f", 1);
	assert_true(exists(d, "x/y"));
	/* an absolute path */
	char *abs = P(d, "abs/f");
	assert_int_equal(hv_file_write_buffer(abs, "abs", 3, NULL), HV_OK);
	assert_content(d, "abs/f", "abs", 3);
	free(abs);
	free(p);
}

static void test_write_bad_arguments(void **state)
{
	char *d = tu_tmpdir();
	const char *bad[] = {"", "d/", "d/.", "d/..", "..", "."};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		char *p = *bad[i] ? P(d, bad[i]) : strdup("");
		if (hv_file_write_buffer(p, "x", 1, NULL) != HV_EUSAGE)
			fail_msg("'%s' was not refused as usage", bad[i]);
		free(p);
	}
	hv_file_write_opts o;
	hv_file_write_opts_init(&o);
	o.mode = 010000;
	char *p = P(d, "f");
	assert_int_equal(hv_file_write_buffer(p, "x", 1, &o), HV_EUSAGE);
	assert_false(exists(d, "f"));
	assert_false(exists(d, "d"));
	free(p);
}

static void test_write_parent_not_directory(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "file", "keep", 4);
	char *p = P(d, "file/sub/x");
	assert_int_equal(hv_file_write_buffer(p, "x", 1, NULL), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "Not a directory"));
	assert_content(d, "file", "keep", 4);
	/* without parents, a missing parent is HV_ENOTDIR */
	hv_file_write_opts o;
	hv_file_write_opts_init(&o);
	o.parents = false;
	char *q = P(d, "missing/x");
	assert_int_equal(hv_file_write_buffer(q, "x", 1, &o), HV_ENOTDIR);
	assert_false(exists(d, "missing"));
	free(q);
	free(p);
}

struct at_rename {
	const char *dir;
	int calls;
	bool old_intact;
	int entries;
};

static void check_before_rename(void *ctx, const char *path)
{
	struct at_rename *a = ctx;
	a->calls++;
	/* right before the rename: the destination still holds all of the old bytes */
	char *got = tu_read_file(path, NULL);
	a->old_intact = got && strcmp(got, "old old old") == 0;
	free(got);
	a->entries = count_entries(a->dir);
}

static void test_write_replaces_atomically(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "f", "old old old", 11);
	ino_t before = ino_of(d, "f");
	char *p = P(d, "f");
	int reader = open(p, O_RDONLY | O_CLOEXEC);
	assert_true(reader >= 0);
	struct at_rename a = {.dir = d};
	hv_file_write_opts o;
	hv_file_write_opts_init(&o);
	hv__test_hook_set(HV__HOOK_FILE_WRITE, check_before_rename, &a);
	assert_int_equal(hv_file_write_buffer(p, "new", 3, &o), HV_OK);
	assert_int_equal(a.calls, 1);
	assert_true(a.old_intact);
	assert_content(d, "f", "new", 3);
	assert_true(ino_of(d, "f") != before);
	char buf[32];
	assert_int_equal(read(reader, buf, sizeof(buf)), 11);
	assert_memory_equal(buf, "old old old", 11);
	close(reader);
	assert_int_equal(count_entries(d), 1); /* no temporary file left */
	free(p);
}

/* A source that fails after some bytes: the write must leave the destination as it was. */
static hv_status failing_source(void *ctx, void *buf, size_t cap, size_t *got)
{
	int *calls = ctx;
	if ((*calls)++ == 0) {
		memset(buf, 'n', cap);
		*got = cap;
		return HV_OK;
	}
	return HV_EIO;
}

static hv_status telling_source(void *ctx, void *buf, size_t cap, size_t *got)
{
	(void)ctx, (void)buf, (void)cap, (void)got;
	return hv_error_set(HV_EIO, "upstream: %s", "connection reset");
}

static hv_status passing_on_source(void *ctx, void *buf, size_t cap, size_t *got)
{
	(void)ctx, (void)buf, (void)cap, (void)got;
	hv_walk *w = NULL;
	assert_int_equal(hv_walk_open(&w, "/nonexistent-source", NULL), HV_ENOTDIR);
	return HV_EIO;
}

static hv_status overlong_source(void *ctx, void *buf, size_t cap, size_t *got)
{
	(void)ctx, (void)buf;
	*got = cap + 100;
	return HV_OK;
}

/* "abc", then the end, said with a positive status (no failure: types.h). */
static hv_status warning_source(void *ctx, void *buf, size_t cap, size_t *got)
{
	int *calls = ctx;
	(void)cap;
	if ((*calls)++ == 0) {
		memcpy(buf, "abc", 3);
		*got = 3;
		return HV_OK;
	}
	*got = 0;
	return HV_WARN;
}

static void test_write_failure_leaves_file(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "f", "old", 3);
	char *p = P(d, "f");
	int calls = 0;
	assert_int_equal(hv_file_write(p, failing_source, &calls, NULL), HV_EIO);
	assert_int_equal(calls, 2);
	/* It said nothing: the message names the callback, never a stale or empty one. */
	assert_non_null(strstr(hv_error_last(), "the read callback failed"));
	assert_content(d, "f", "old", 3);
	assert_int_equal(count_entries(d), 1);
	/* A source that says why, with hv_error_set: its message is the failure's. */
	assert_int_equal(hv_file_write(p, telling_source, NULL, NULL), HV_EIO);
	assert_string_equal(hv_error_last(), "upstream: connection reset");
	assert_int_equal(hv_error_last_status(), HV_EIO);
	/* A source that passes on a libharvest failure of another status: that message, with the
	 * source's status. */
	assert_int_equal(hv_file_write(p, passing_on_source, NULL, NULL), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "/nonexistent-source"));
	assert_int_equal(hv_error_last_status(), HV_EIO);
	/* A source that claims more bytes than the buffer holds: refused, nothing written. */
	assert_int_equal(hv_file_write(p, overlong_source, NULL, NULL), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "into a buffer of"));
	assert_content(d, "f", "old", 3);
	assert_int_equal(count_entries(d), 1);
	/* A source that ends with HV_WARN has not failed: the file is written. */
	calls = 0;
	assert_int_equal(hv_file_write(p, warning_source, &calls, NULL), HV_OK);
	assert_content(d, "f", "abc", 3);
	free(p);
}

/* A file system that fills up mid-write: the error names the file, the old bytes stay and
 * no temporary file is left (a 1 MiB tmpfs, so root only). */
static void test_write_no_space(void **state)
{
	if (geteuid() != 0)
		skip(); /* mounting needs root */
	char *d = tu_tmpdir();
	mkdirs(d, "small");
	char *small = P(d, "small");
	if (mount("none", small, "tmpfs", 0, "size=1m") != 0)
		fail_msg("mount tmpfs: %s", strerror(errno));
	tu_cleanup_umount(small);
	tu_write(small, "f", "old", 3);
	size_t n = 4u << 20;
	char *big = tu_xmalloc(n);
	memset(big, 'b', n);
	char *p = P(small, "f");
	assert_int_equal(hv_file_write_buffer(p, big, n, NULL), HV_EIO);
	char want[1024];
	snprintf(want, sizeof(want), "%s: No space left on device", p);
	assert_string_equal(hv_error_last(), want);
	assert_content(small, "f", "old", 3);
	assert_int_equal(count_entries(small), 1);
	free(p);
	free(big);
	free(small);
}

/* Swaps the directory the write just created for a symlink to outside. */
struct swap {
	const char *match;  /* path suffix that triggers the swap */
	const char *outside;
	int done;
};

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void swap_for_symlink(void *ctx, const char *path)
{
	struct swap *s = ctx;
	if (!ends_with(path, s->match))
		return;
	char *moved = tu_path(s->outside, "../moved-away");
	if (rename(path, moved) != 0 || symlink(s->outside, path) != 0)
		fail_msg("swapping %s: %s", path, strerror(errno));
	free(moved);
	s->done++;
}

static void test_write_parent_swapped_for_symlink(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "outside");
	mkdirs(d, "root");
	char *outside = P(d, "outside");
	struct swap s = {.match = "/root/a/b", .outside = outside};
	hv_file_write_opts o;
	hv_file_write_opts_init(&o);
	hv__test_hook_set(HV__HOOK_FILE_WRITE, swap_for_symlink, &s);
	char *p = P(d, "root/a/b/c/f");
	assert_int_equal(hv_file_write_buffer(p, "x", 1, &o), HV_EIO);
	assert_int_equal(s.done, 1);
	assert_non_null(strstr(hv_error_last(), "root/a/b: a symlink where a directory is made; not followed"));
	assert_int_equal(count_entries(outside), 0);
	free(p);
	/* a dangling symlink where a parent is to be made: refused, its target not created */
	mklink("../nowhere", d, "root/dangling");
	char *q = P(d, "root/dangling/f");
	assert_int_equal(hv_file_write_buffer(q, "x", 1, NULL), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "root/dangling: a symlink where a directory is made"));
	assert_false(exists(d, "nowhere"));
	free(q);
	free(outside);
}

struct dir_swap {
	const char *dir;      /* the directory to move away */
	const char *moved;    /* where it goes */
	const char *outside;  /* what the symlink left in its place points to */
	int done;
};

static void swap_dir_hook(void *ctx, const char *path)
{
	struct dir_swap *s = ctx;
	(void)path;
	if (s->done++)
		return;
	if (rename(s->dir, s->moved) != 0 || symlink(s->outside, s->dir) != 0)
		fail_msg("swapping %s: %s", s->dir, strerror(errno));
}

static void test_write_dir_swapped_before_rename(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "outside");
	mkdirs(d, "root");
	mkdirs(d, "root/a");
	tu_write(d, "root/a/f", "old", 3);
	char *dir = P(d, "root/a"), *moved = P(d, "root/moved"), *outside = P(d, "outside");
	struct dir_swap s = {dir, moved, outside, 0};
	hv_file_write_opts o;
	hv_file_write_opts_init(&o);
	hv__test_hook_set(HV__HOOK_FILE_WRITE, swap_dir_hook, &s);
	char *p = P(d, "root/a/f");
	assert_int_equal(hv_file_write_buffer(p, "new", 3, &o), HV_OK);
	assert_int_equal(s.done, 1);
	/* the bytes went to the directory the write had opened, not through the symlink */
	assert_content(d, "root/moved/f", "new", 3);
	assert_int_equal(count_entries(outside), 0);
	assert_int_equal(count_entries(moved), 1);
	free(p);
	free(dir);
	free(moved);
	free(outside);
}

static void test_write_symlink_replaced_not_followed(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "target", "target bytes", 12);
	mklink("target", d, "link");
	mklink("nowhere", d, "dangling");
	put(d, "link", "new", -1);
	assert_true(S_ISREG(mode_of(d, "link")));
	assert_content(d, "link", "new", 3);
	assert_content(d, "target", "target bytes", 12);
	put(d, "dangling", "new", -1);
	assert_true(S_ISREG(mode_of(d, "dangling")));
	assert_false(exists(d, "nowhere"));
	/* a symlinked parent named by the caller is followed, as mkdir -p follows it */
	mkdirs(d, "real");
	mklink("real", d, "via");
	put(d, "via/f", "v", -1);
	assert_content(d, "real/f", "v", 1);
}

static void test_write_refuses_non_regular(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "dir");
	char *fifo = P(d, "fifo");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	char *dir = P(d, "dir");
	assert_int_equal(hv_file_write_buffer(dir, "x", 1, NULL), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "Is a directory"));
	assert_true(S_ISDIR(mode_of(d, "dir")));
	assert_int_equal(hv_file_write_buffer(fifo, "x", 1, NULL), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "not a regular file (fifo); not replaced"));
	assert_true(S_ISFIFO(mode_of(d, "fifo")));
	assert_int_equal(count_entries(d), 2);
	free(dir);
	free(fifo);
}

static void test_write_long_names(void **state)
{
	char *d = tu_tmpdir();
	char name[256];
	memset(name, 'n', 255);
	name[255] = '\0';
	put(d, name, "first", -1);
	put(d, name, "second", -1); /* a replacement needs a temporary name beside it */
	assert_content(d, name, "second", 6);
	/* a newline and bytes that are not UTF-8 */
	put(d, "new\nline\xff\xfe", "odd", -1);
	assert_content(d, "new\nline\xff\xfe", "odd", 3);
	assert_int_equal(count_entries(d), 2);
}

static void test_write_keeps_owner_for_root(void **state)
{
	if (geteuid() != 0) {
		skip(); /* only root can give a file to another user */
	}
	char *d = tu_tmpdir();
	tu_write(d, "f", "old", 3);
	char *p = P(d, "f");
	assert_int_equal(chown(p, 65534, 65534), 0);
	put(d, "f", "new", -1);
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_uid, 65534);
	assert_int_equal(st.st_gid, 65534);
	free(p);
}

struct nobody_put {
	const char *path;
};

static int nobody_put_fn(void *arg)
{
	const struct nobody_put *c = arg;
	hv_status st = hv_file_write_buffer(c->path, "x", 1, NULL);
	if (st != HV_EIO)
		return 10;
	return strstr(hv_error_last(), "Permission denied") ? 0 : 11;
}

static void test_write_permission_denied_as_nobody(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "ro");
	char *p = P(d, "ro/f"), *q = P(d, "ro/sub/f");
	struct nobody_put a = {p}, b = {q};
	assert_int_equal(tu_as_nobody(nobody_put_fn, &a), 0);
	assert_int_equal(tu_as_nobody(nobody_put_fn, &b), 0);
	char *ro = P(d, "ro");
	assert_int_equal(count_entries(ro), 0);
	free(ro);
	free(p);
	free(q);
}

struct temp_seen {
	const char *dir;
	int calls;
	int temps;    /* .hv.XXXXXX files seen while the bytes are read */
	int private_; /* ... with no permission for group and others */
	const char *data;
};

/* A source that looks at the directory while it is read: the bytes, then the end. */
static hv_status source_seeing_temp(void *ctx, void *buf, size_t cap, size_t *got)
{
	struct temp_seen *t = ctx;
	*got = 0;
	if (t->calls++)
		return HV_OK;
	DIR *dir = opendir(t->dir);
	if (!dir)
		return HV_EIO;
	struct dirent *e;
	while ((e = readdir(dir))) {
		if (strncmp(e->d_name, ".hv.", 4) != 0 || strlen(e->d_name) != 10)
			continue;
		t->temps++;
		struct stat st;
		if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    (st.st_mode & 077) == 0)
			t->private_++;
	}
	closedir(dir);
	*got = strlen(t->data);
	memcpy(buf, t->data, *got);
	return HV_OK;
}

/* Without /proc (hidden by an empty tmpfs in a private mount namespace), O_TMPFILE cannot be
 * named: the write uses a short .hv.XXXXXX name instead. */
static int named_fallback_fn(void *arg)
{
	const char *d = arg;
	if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("none", "/proc", "tmpfs", 0, NULL) != 0)
		return 77;
	if (access("/proc/self/fd", X_OK) == 0)
		return 12;
	char name[300];
	snprintf(name, sizeof(name), "%s/", d);
	size_t n = strlen(name);
	memset(name + n, 'm', 255);
	name[n + 255] = '\0';
	hv_file_write_opts o;
	hv_file_write_opts_init(&o);
	o.mode = 0644;
	for (int i = 0; i < 2; i++) {
		struct temp_seen seen = {d, 0, 0, 0, i ? "two" : "one"};
		if (hv_file_write(name, source_seeing_temp, &seen, &o) != HV_OK)
			return 10 + i;
		/* the named temporary file was there while the bytes came, private */
		if (seen.temps != 1 || seen.private_ != 1)
			return 14;
	}
	char *got = tu_read_file(name, NULL);
	int rc = got && strcmp(got, "two") == 0 ? 0 : 13;
	free(got);
	struct stat st;
	if (stat(name, &st) != 0 || (st.st_mode & 07777) != 0644)
		rc = 15;
	return rc;
}

static void test_write_named_fallback(void **state)
{
	if (geteuid() != 0)
		skip(); /* mount namespaces need root */
	char *d = tu_tmpdir();
	assert_int_equal(tu_in_child(named_fallback_fn, d), 0);
	assert_int_equal(count_entries(d), 1);
}

/* ---- hv_remove -------------------------------------------------------------------------- */

static hv_status rm(const char *dir, const char *rel, bool recursive)
{
	char *p = P(dir, rel);
	hv_remove_opts o = {.recursive = recursive};
	hv_status st = hv_remove(p, &o);
	free(p);
	return st;
}

static void test_remove_files_and_links(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "f", "x", 1);
	tu_write(d, "target", "t", 1);
	mkdirs(d, "dir");
	tu_write(d, "dir/inner", "i", 1);
	mklink("target", d, "link");
	mklink("dir", d, "dirlink");
	mklink("nowhere", d, "dangling");
	char *fifo = P(d, "fifo");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	assert_int_equal(rm(d, "f", false), HV_OK);
	assert_false(exists(d, "f"));
	assert_int_equal(rm(d, "link", false), HV_OK);
	assert_false(exists(d, "link"));
	assert_content(d, "target", "t", 1);
	assert_int_equal(rm(d, "dirlink", true), HV_OK); /* -r on a symlink: the link only */
	assert_false(exists(d, "dirlink"));
	assert_content(d, "dir/inner", "i", 1);
	assert_int_equal(rm(d, "dangling", false), HV_OK);
	assert_false(exists(d, "dangling"));
	assert_int_equal(rm(d, "fifo", false), HV_OK);
	assert_false(exists(d, "fifo"));
	free(fifo);
}

static void test_remove_refusals(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "dir");
	tu_write(d, "dir/inner", "i", 1);
	tu_write(d, "file", "f", 1);
	mklink("dir", d, "dirlink");
	assert_int_equal(rm(d, "dir", false), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "dir: Is a directory"));
	assert_true(exists(d, "dir/inner"));
	assert_int_equal(rm(d, "missing", false), HV_ENOTDIR);
	assert_int_equal(rm(d, "missing/x", true), HV_ENOTDIR);
	assert_int_equal(rm(d, "file/x", false), HV_ENOTDIR);
	assert_int_equal(rm(d, "file/", false), HV_ENOTDIR);
	assert_true(exists(d, "file"));
	/* a trailing '/' does not make rm follow a symlink */
	assert_int_equal(rm(d, "dirlink/", true), HV_EIO);
	assert_true(exists(d, "dirlink"));
	assert_true(exists(d, "dir/inner"));
	assert_int_equal(rm(d, "dir/.", true), HV_EUSAGE);
	assert_int_equal(rm(d, "dir/..", true), HV_EUSAGE);
	assert_int_equal(rm(d, "dir/../dir/./..", true), HV_EUSAGE);
	assert_true(exists(d, "dir/inner"));
	assert_int_equal(hv_remove("", NULL), HV_ENOTDIR);
	/* a directory given with a trailing '/' is fine */
	assert_int_equal(rm(d, "dir//", true), HV_OK);
	assert_false(exists(d, "dir"));
}

/* "/" in a chroot of a temp directory: a broken refusal removes only the temp directory. */
static int remove_root_fn(void *arg)
{
	const char *d = arg;
	if (chroot(d) != 0 || chdir("/") != 0)
		return 77;
	hv_remove_opts o = {.recursive = true};
	if (hv_remove("/", &o) != HV_EUSAGE || hv_remove("///", &o) != HV_EUSAGE)
		return 10;
	if (hv_remove(".", &o) != HV_EUSAGE || hv_remove("..", &o) != HV_EUSAGE)
		return 11;
	return strstr(hv_error_last(), "refusing") ? 0 : 12;
}

static void test_remove_refuses_root(void **state)
{
	if (geteuid() != 0)
		skip(); /* chroot needs root */
	char *d = tu_tmpdir();
	tu_write(d, "keep", "k", 1);
	assert_int_equal(tu_in_child(remove_root_fn, d), 0);
	assert_true(exists(d, "keep"));
}

struct errors {
	int n;
	char last[512];
	char all[4096]; /* every message, each ending in a newline */
};

static void collect_error(void *ctx, const char *message)
{
	struct errors *e = ctx;
	e->n++;
	snprintf(e->last, sizeof(e->last), "%s", message);
	size_t len = strlen(e->all);
	snprintf(e->all + len, sizeof(e->all) - len, "%s\n", message);
}

static void test_remove_tree_with_links_out(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "outside");
	tu_write(d, "outside/precious", "p", 1);
	mkdirs(d, "outside/sub");
	mkdirs(d, "t");
	mkdirs(d, "t/a");
	mkdirs(d, "t/a/b");
	tu_write(d, "t/a/b/f", "f", 1);
	tu_write(d, "t/a/g", "g", 1);
	mkdirs(d, "t/empty");
	char *outside = P(d, "outside");
	mklink(outside, d, "t/out");
	mklink(outside, d, "t/a/b/out");
	mklink("../../outside/precious", d, "t/a/file-out");
	mklink("nowhere", d, "t/dangling");
	char *fifo = P(d, "t/a/fifo");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	struct errors e = {0};
	hv_remove_opts o = {.recursive = true, .on_error = collect_error, .ctx = &e};
	char *t = P(d, "t");
	assert_int_equal(hv_remove(t, &o), HV_OK);
	assert_int_equal(e.n, 0);
	assert_false(exists(d, "t"));
	assert_content(d, "outside/precious", "p", 1);
	assert_true(exists(d, "outside/sub"));
	free(t);
	free(fifo);
	free(outside);
}

/* Before the removal opens t/a/sub, it becomes a symlink to outside (the real directory moved
 * out of the tree). */
static void test_remove_dir_swapped_for_symlink(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "outside");
	tu_write(d, "outside/precious", "p", 1);
	mkdirs(d, "t");
	mkdirs(d, "t/a");
	mkdirs(d, "t/a/sub");
	tu_write(d, "t/a/sub/f", "f", 1);
	char *outside = P(d, "outside");
	struct swap s = {.match = "/t/a/sub", .outside = outside};
	hv_remove_opts o = {.recursive = true};
	hv__test_hook_set(HV__HOOK_REMOVE, swap_for_symlink, &s);
	char *t = P(d, "t");
	assert_int_equal(hv_remove(t, &o), HV_OK);
	assert_int_equal(s.done, 1);
	assert_false(exists(d, "t"));
	assert_content(d, "outside/precious", "p", 1);
	assert_content(d, "moved-away/f", "f", 1); /* moved out of the tree before it was reached */
	free(t);
	free(outside);
}

/* Swaps the tree's root for another directory (the one the lstat saw moved away). */
static void swap_root_for_dir(void *ctx, const char *path)
{
	int *done = ctx;
	if ((*done)++)
		return;
	char *moved = tu_path(path, "../t.moved");
	if (rename(path, moved) != 0 || mkdir(path, 0755) != 0)
		fail_msg("swapping %s: %s", path, strerror(errno));
	free(moved);
	tu_write(path, "newcomer", "n", 1);
}

static void test_remove_root_swapped_for_other_dir(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "t");
	tu_write(d, "t/f", "f", 1);
	int done = 0;
	hv_remove_opts o = {.recursive = true};
	hv__test_hook_set(HV__HOOK_REMOVE, swap_root_for_dir, &done);
	char *t = P(d, "t");
	assert_int_equal(hv_remove(t, &o), HV_EIO);
	free(t);
	assert_int_equal(done, 1);
	assert_non_null(strstr(hv_error_last(), "changed while being removed"));
	/* neither the directory that was checked nor the one that came is touched */
	assert_true(exists(d, "t/newcomer"));
	assert_true(exists(d, "t.moved/f"));
}

static void test_remove_root_swapped_for_symlink(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "outside");
	tu_write(d, "outside/precious", "p", 1);
	mkdirs(d, "t");
	char *outside = P(d, "outside");
	struct swap s = {.match = "/t", .outside = outside};
	hv_remove_opts o = {.recursive = true};
	hv__test_hook_set(HV__HOOK_REMOVE, swap_for_symlink, &s);
	char *t = P(d, "t");
	assert_int_equal(hv_remove(t, &o), HV_EIO);
	assert_int_equal(s.done, 1);
	assert_non_null(strstr(hv_error_last(), "changed while being removed"));
	assert_content(d, "outside/precious", "p", 1);
	free(t);
	free(outside);
}

/* Deeper than the descriptors kept open: while the removal is at the bottom, t/d1/d2 moves to
 * other/d1/d2, so ".." of d2 no longer leads to t/d1. The removal must notice (device and
 * inode) and stop, not go on in other/. */
struct move_ctx {
	const char *from, *to;
	int done;
};

static void move_hook(void *ctx, const char *path)
{
	struct move_ctx *m = ctx;
	if (m->done || !ends_with(path, "/d80"))
		return;
	m->done++;
	if (rename(m->from, m->to) != 0)
		fail_msg("rename %s: %s", m->from, strerror(errno));
}

static void test_remove_tree_moved_while_below(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "t");
	mkdirs(d, "other");
	mkdirs(d, "other/d1");
	tu_write(d, "other/d1/keep", "k", 1);
	char rel[1024] = "t";
	for (int i = 1; i <= 80; i++) {
		size_t n = strlen(rel);
		snprintf(rel + n, sizeof(rel) - n, "/d%d", i);
		mkdirs(d, rel);
	}
	char *from = P(d, "t/d1/d2"), *to = P(d, "other/d1/d2");
	struct move_ctx m = {from, to, 0};
	struct errors e = {0};
	hv_remove_opts o = {.recursive = true, .on_error = collect_error, .ctx = &e};
	hv__test_hook_set(HV__HOOK_REMOVE, move_hook, &m);
	char *t = P(d, "t");
	assert_int_equal(hv_remove(t, &o), HV_EIO);
	assert_int_equal(m.done, 1);
	assert_int_equal(e.n, 1);
	assert_non_null(strstr(e.last, "moved during the removal"));
	assert_content(d, "other/d1/keep", "k", 1);
	assert_true(exists(d, "other/d1"));
	assert_true(exists(d, "t/d1"));
	free(t);
	free(from);
	free(to);
}

/* Entries made in a directory after the removal listed it: it is listed again when it is
 * not empty at the end, so the tree still goes. */
struct late_ctx {
	const char *dir;
	int done;
};

static void add_late_entries(void *ctx, const char *path)
{
	struct late_ctx *l = ctx;
	if (l->done || !ends_with(path, "/t/sub"))
		return;
	l->done++;
	tu_write(l->dir, "t/late", "l", 1);
	mkdirs(l->dir, "t/late-dir");
	tu_write(l->dir, "t/late-dir/f", "f", 1);
}

static void test_remove_tree_entries_made_meanwhile(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "t");
	mkdirs(d, "t/sub");
	tu_write(d, "t/sub/f", "f", 1);
	struct late_ctx l = {d, 0};
	struct errors e = {0};
	hv_remove_opts o = {.recursive = true, .on_error = collect_error, .ctx = &e};
	hv__test_hook_set(HV__HOOK_REMOVE, add_late_entries, &l);
	char *t = P(d, "t");
	hv_status st = hv_remove(t, &o);
	free(t);
	if (st != HV_OK)
		fail_msg("status %d: %s", st, e.last);
	assert_int_equal(l.done, 1);
	assert_false(exists(d, "t"));
}

/* 100,000 levels (the SPEC's depth): removal recursing on the C stack would overflow it. */
static void test_remove_deep_tree(void **state)
{
	char *d = tu_tmpdir();
	mkdirs(d, "t");
	char *t = P(d, "t");
	int fd = open(t, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (int i = 0; i < 100000; i++) {
		assert_int_equal(mkdirat(fd, "d", 0755), 0);
		if (i % 1000 == 0) {
			int f = openat(fd, "file", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
			assert_true(f >= 0);
			close(f);
			assert_int_equal(symlinkat("..", fd, "up"), 0);
		}
		int n = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(n >= 0);
		close(fd);
		fd = n;
	}
	close(fd);
	hv_remove_opts o = {.recursive = true};
	assert_int_equal(hv_remove(t, &o), HV_OK);
	assert_false(exists(d, "t"));
	free(t);
}

static void meddling_error(void *ctx, const char *msg)
{
	(void)ctx, (void)msg;
	hv_walk *w = NULL;
	(void)hv_walk_open(&w, "/nonexistent-from-the-callback", NULL);
}

/* A removal's error callback that calls libharvest (which fails) does not change the message
 * the removal returns with: still the failure's own. The failure: a mount point in the tree
 * (EBUSY; root only, to mount). */
static void test_remove_callback_keeps_the_error(void **state)
{
	if (geteuid() != 0)
		skip(); /* mounting needs root */
	char *d = tu_tmpdir();
	mkdirs(d, "t");
	mkdirs(d, "t/m");
	char *m = P(d, "t/m");
	if (mount("none", m, "tmpfs", 0, "size=1m") != 0)
		fail_msg("mount tmpfs: %s", strerror(errno));
	tu_cleanup_umount(m);
	char *t = P(d, "t");
	hv_remove_opts o = {.recursive = true, .on_error = meddling_error};
	assert_int_equal(hv_remove(t, &o), HV_EIO);
	if (!strstr(hv_error_last(), "t/m: Device or resource busy"))
		fail_msg("the removal's message: '%s'", hv_error_last());
	assert_int_equal(hv_error_last_status(), HV_EIO);
	free(t);
	free(m);
}

struct nobody_rm {
	const char *path;
	const char *empty_root;
};

static int nobody_rm_fn(void *arg)
{
	struct nobody_rm *c = arg;
	struct errors e = {0};
	hv_remove_opts o = {.recursive = true, .on_error = collect_error, .ctx = &e};
	hv_status st = hv_remove(c->path, &o);
	if (st != HV_EIO)
		return 10;
	if (e.n != 2)
		return 20 + e.n;
	if (!strstr(e.all, "/t/locked/f: Permission denied\n") ||
	    !strstr(e.all, "/t/unreadable-full: Permission denied\n"))
		return 12;

	/* an unreadable but empty directory is removed, also as the tree's root */
	o.on_error = NULL;
	return hv_remove(c->empty_root, &o) == HV_OK ? 0 : 13;
}

static void test_remove_permission_denied_as_nobody(void **state)
{
	if (geteuid() != 0)
		skip(); /* needs a tree nobody owns part of */
	char *d = tu_tmpdir();
	mkdirs(d, "t");
	tu_write(d, "t/mine", "m", 1);
	mkdirs(d, "t/sub");
	tu_write(d, "t/sub/mine", "m", 1);
	mkdirs(d, "t/locked"); /* root's, 0755: nobody cannot remove what is in it */
	tu_write(d, "t/locked/f", "f", 1);
	/* nobody's, but unreadable (0300): removable only when empty */
	mkdirs(d, "t/unreadable-empty");
	mkdirs(d, "t/unreadable-full");
	tu_write(d, "t/unreadable-full/f", "f", 1);
	mkdirs(d, "w");
	mkdirs(d, "w/u");
	const char *own[] = {"t",	"t/mine", "t/sub", "t/sub/mine", "t/unreadable-empty",
			     "t/unreadable-full", "t/unreadable-full/f", "w", "w/u"};
	for (size_t i = 0; i < sizeof(own) / sizeof(*own); i++) {
		char *p = P(d, own[i]);
		assert_int_equal(lchown(p, 65534, 65534), 0);
		if (strncmp(own[i], "t/unreadable-", 13) == 0 && !strchr(own[i] + 2, '/'))
			assert_int_equal(chmod(p, 0300), 0);
		if (strcmp(own[i], "w/u") == 0)
			assert_int_equal(chmod(p, 0300), 0);
		free(p);
	}
	char *t = P(d, "t"), *u = P(d, "w/u");
	struct nobody_rm c = {t, u};
	int rc = tu_as_nobody(nobody_rm_fn, &c);
	free(t);
	free(u);
	assert_int_equal(rc, 0);
	assert_false(exists(d, "w/u"));
	assert_false(exists(d, "t/unreadable-empty"));
	assert_true(exists(d, "t/unreadable-full/f"));
	/* what could be removed is gone; the rest is there */
	assert_false(exists(d, "t/mine"));
	assert_false(exists(d, "t/sub"));
	assert_true(exists(d, "t/locked/f"));
}

/* Teardown: clears the hooks a test set (their contexts lived on its stack), then the usual. */
static int cleanup(void **state)
{
	hv__test_hook_set(HV__HOOK_FILE_WRITE, NULL, NULL);
	hv__test_hook_set(HV__HOOK_REMOVE, NULL, NULL);
	return tu_cleanup(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_copy_bytes, cleanup),
		cmocka_unit_test_teardown(test_copy_missing, cleanup),
		cmocka_unit_test_teardown(test_copy_refuses_non_regular, cleanup),
		cmocka_unit_test_teardown(test_copy_write_error, cleanup),
		cmocka_unit_test_teardown(test_copy_permission_denied_as_nobody, cleanup),
		cmocka_unit_test_teardown(test_copy_into_itself, cleanup),
		cmocka_unit_test_teardown(test_write_parents_and_modes, cleanup),
		cmocka_unit_test_teardown(test_write_bad_arguments, cleanup),
		cmocka_unit_test_teardown(test_write_parent_not_directory, cleanup),
		cmocka_unit_test_teardown(test_write_replaces_atomically, cleanup),
		cmocka_unit_test_teardown(test_write_failure_leaves_file, cleanup),
		cmocka_unit_test_teardown(test_write_no_space, cleanup),
		cmocka_unit_test_teardown(test_write_parent_swapped_for_symlink, cleanup),
		cmocka_unit_test_teardown(test_write_dir_swapped_before_rename, cleanup),
		cmocka_unit_test_teardown(test_write_symlink_replaced_not_followed, cleanup),
		cmocka_unit_test_teardown(test_write_refuses_non_regular, cleanup),
		cmocka_unit_test_teardown(test_write_long_names, cleanup),
		cmocka_unit_test_teardown(test_write_keeps_owner_for_root, cleanup),
		cmocka_unit_test_teardown(test_write_permission_denied_as_nobody, cleanup),
		cmocka_unit_test_teardown(test_write_named_fallback, cleanup),
		cmocka_unit_test_teardown(test_remove_files_and_links, cleanup),
		cmocka_unit_test_teardown(test_remove_refusals, cleanup),
		cmocka_unit_test_teardown(test_remove_refuses_root, cleanup),
		cmocka_unit_test_teardown(test_remove_tree_with_links_out, cleanup),
		cmocka_unit_test_teardown(test_remove_dir_swapped_for_symlink, cleanup),
		cmocka_unit_test_teardown(test_remove_root_swapped_for_symlink, cleanup),
		cmocka_unit_test_teardown(test_remove_root_swapped_for_other_dir, cleanup),
		cmocka_unit_test_teardown(test_remove_tree_moved_while_below, cleanup),
		cmocka_unit_test_teardown(test_remove_tree_entries_made_meanwhile, cleanup),
		cmocka_unit_test_teardown(test_remove_deep_tree, cleanup),
		cmocka_unit_test_teardown(test_remove_callback_keeps_the_error, tu_cleanup),
		cmocka_unit_test_teardown(test_remove_permission_denied_as_nobody, cleanup),
	};
	const char *filter = getenv("HV_TEST_FILTER");
	if (filter)
		cmocka_set_test_filter(filter);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
