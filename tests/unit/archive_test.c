/* The archive writer at the library level, read back with libarchive's reader: a tree's members
 * (types, bytes, symlink targets, modes, setuid dropped, no "..", the archive itself left out),
 * a file swapped for a symlink or a FIFO through the test hook (never followed, never opened),
 * a file that grows or shrinks while it is copied, write errors (ENOSPC, EPIPE), the format
 * names, and a run's archive: MANIFEST.json exact, contents not stored and hostile stored paths
 * left out. */
#include "testutil.h"

#include "harvest/archive.h"
#include "harvest/store.h"
#include "test_hook.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- reading an archive back ------------------------------------------------------------ */

typedef struct member {
	char *path;
	unsigned type;   /* AE_IFREG, AE_IFDIR, AE_IFLNK */
	unsigned perm;
	char *data;      /* regular files */
	size_t len;
	char *target;    /* symlinks */
	int64_t mtime;
	long mtime_nsec;
	int64_t uid;
} member;

typedef struct members {
	member v[64];
	size_t n;
} members;

static void members_free(members *m)
{
	for (size_t i = 0; i < m->n; i++) {
		free(m->v[i].path);
		free(m->v[i].data);
		free(m->v[i].target);
	}
	m->n = 0;
}

static void read_members(const char *file, members *m)
{
	memset(m, 0, sizeof(*m));
	struct archive *a = archive_read_new();
	archive_read_support_format_all(a);
	archive_read_support_filter_all(a);
	if (archive_read_open_filename(a, file, 65536) != ARCHIVE_OK)
		fail_msg("%s: %s", file, archive_error_string(a));
	struct archive_entry *e;
	int r;
	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		assert_true(m->n < 64);
		member *x = &m->v[m->n++];
		x->path = strdup(archive_entry_pathname(e));
		x->type = archive_entry_filetype(e);
		x->perm = archive_entry_perm(e);
		x->mtime = archive_entry_mtime(e);
		x->mtime_nsec = archive_entry_mtime_nsec(e);
		x->uid = archive_entry_uid(e);
		if (x->type == AE_IFLNK)
			x->target = strdup(archive_entry_symlink(e));
		if (x->type == AE_IFREG) {
			size_t cap = 1024;
			x->data = malloc(cap);
			char buf[4096];
			la_ssize_t n;
			while ((n = archive_read_data(a, buf, sizeof(buf))) > 0) {
				while (x->len + (size_t)n > cap)
					x->data = realloc(x->data, cap *= 2);
				memcpy(x->data + x->len, buf, (size_t)n);
				x->len += (size_t)n;
			}
			assert_true(n == 0);
		}
	}
	assert_int_equal(r, ARCHIVE_EOF);
	archive_read_free(a);
}

static const member *find(const members *m, const char *path)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->v[i].path, path) == 0)
			return &m->v[i];
	return NULL;
}

/* ---- the hooks -------------------------------------------------------------------------- */

typedef struct hook {
	const char *root;
	const char *target;     /* the path to act on */
	const char *link_to;    /* swap it for a symlink to this */
	bool fifo;              /* or for a FIFO */
	long resize;            /* after the header: append (>0) or truncate to (<0: -size) */
	bool done;
	char warnings[8][512];
	size_t n_warnings;
} hook;

static void before_open(void *ctx, const char *path)
{
	hook *h = ctx;
	if (h->done || !h->target || strcmp(path, h->target) != 0 || h->resize)
		return;
	h->done = true;
	char *p = tu_path(h->root, path);
	assert_int_equal(unlink(p), 0);
	if (h->fifo)
		assert_int_equal(mkfifo(p, 0644), 0);
	else
		assert_int_equal(symlink(h->link_to, p), 0);
	free(p);
}

static void after_header(void *ctx, const char *path)
{
	hook *h = ctx;
	if (h->done || !h->target || strcmp(path, h->target) != 0 || !h->resize)
		return;
	h->done = true;
	char *p = tu_path(h->root, path);
	if (h->resize > 0) {
		int wfd = open(p, O_WRONLY | O_APPEND);
		assert_true(wfd >= 0);
		char junk[64];
		memset(junk, 'G', sizeof(junk));
		assert_int_equal(write(wfd, junk, (size_t)h->resize), h->resize);
		close(wfd);
	} else {
		assert_int_equal(truncate(p, -h->resize), 0);
	}
	free(p);
}

static void warn_fn(void *ctx, const char *msg)
{
	hook *h = ctx;
	if (h->n_warnings < 8)
		snprintf(h->warnings[h->n_warnings++], sizeof(h->warnings[0]), "%s", msg);
}

/* A warning callback that calls libharvest, which fails and sets its own error. */
static void meddling_warn(void *ctx, const char *msg)
{
	(void)ctx, (void)msg;
	hv_walk *w = NULL;
	assert_int_equal(hv_walk_open(&w, "/nonexistent-from-the-callback", NULL), HV_ENOTDIR);
}

static bool warned(const hook *h, const char *needle)
{
	for (size_t i = 0; i < h->n_warnings; i++)
		if (strstr(h->warnings[i], needle))
			return true;
	return false;
}

static void opts_for(hv_archive_opts *o, hook *h, hv_archive_format f)
{
	hv_archive_opts_init(o);
	o->format = f;
	o->warn = warn_fn;
	o->ctx = h;
	/* The writer's test hooks (test_hook.h, not the API): h lives until the test's end,
	 * where teardown takes them away. */
	hv__test_hook_set(HV__HOOK_ARCHIVE_BEFORE_OPEN, before_open, h);
	hv__test_hook_set(HV__HOOK_ARCHIVE_AFTER_HEADER, after_header, h);
}

static int teardown(void **state)
{
	hv__test_hook_set(HV__HOOK_ARCHIVE_BEFORE_OPEN, NULL, NULL);
	hv__test_hook_set(HV__HOOK_ARCHIVE_AFTER_HEADER, NULL, NULL);
	return tu_cleanup(state);
}

/* Archives root into dir/out.<ext> with o; returns the status and the file's path in *file. */
static hv_status archive_to(const char *dir, const char *root, const hv_archive_opts *o,
			    char **file)
{
	*file = tu_path(dir, o->format == HV_ARCHIVE_ZIP ? "out.zip" : "out.tar");
	int fd = open(*file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	hv_status s = hv_archive_dir(fd, root, o, NULL);
	assert_int_equal(close(fd), 0);
	return s;
}

/* dir/root with a file, a setuid file, a subdirectory, symlinks (relative, absolute outside,
 * dangling) and a file outside the root, dir/secret. */
static char *make_tree(const char *dir)
{
	char *root = tu_path(dir, "root");
	tu_mkdir(dir, "root");
	tu_write(root, "a.txt", "alpha\n", 6);
	tu_write(root, "suid", "s", 1);
	char *p = tu_path(root, "suid");
	assert_int_equal(chmod(p, 04750), 0);
	free(p);
	tu_mkdir(root, "sub");
	tu_write(root, "sub/b.bin", "\0\1\2", 3);
	p = tu_path(root, "sub/up");
	assert_int_equal(symlink("../a.txt", p), 0);
	free(p);
	p = tu_path(root, "abs");
	assert_int_equal(symlink("/etc/passwd", p), 0);
	free(p);
	p = tu_path(root, "dangling");
	assert_int_equal(symlink("nowhere/at/all", p), 0);
	free(p);
	tu_write(dir, "secret", "SECRET", 6);
	return root;
}

/* ---- a tree ----------------------------------------------------------------------------- */

static void check_tree_members(const members *m)
{
	const member *x = find(m, "a.txt");
	assert_non_null(x);
	assert_int_equal(x->type, AE_IFREG);
	assert_int_equal(x->len, 6);
	assert_memory_equal(x->data, "alpha\n", 6);
	assert_int_equal(x->uid, 0);
	x = find(m, "suid");
	assert_non_null(x);
	assert_int_equal(x->perm, 0750); /* setuid dropped, the rest kept */
	x = find(m, "sub");
	if (!x)
		x = find(m, "sub/");
	assert_non_null(x);
	assert_int_equal(x->type, AE_IFDIR);
	x = find(m, "sub/b.bin");
	assert_non_null(x);
	assert_int_equal(x->len, 3);
	assert_memory_equal(x->data, "\0\1\2", 3);
	x = find(m, "sub/up");
	assert_non_null(x);
	assert_int_equal(x->type, AE_IFLNK);
	assert_string_equal(x->target, "../a.txt");
	x = find(m, "abs");
	assert_non_null(x);
	assert_int_equal(x->type, AE_IFLNK);
	assert_string_equal(x->target, "/etc/passwd");
	x = find(m, "dangling");
	assert_non_null(x);
	assert_string_equal(x->target, "nowhere/at/all");
	for (size_t i = 0; i < m->n; i++) {
		const char *p = m->v[i].path;
		assert_true(p[0] != '/');
		assert_null(strstr(p, ".."));
		if (m->v[i].data)
			assert_null(memmem(m->v[i].data, m->v[i].len, "SECRET", 6));
	}
	assert_int_equal(m->n, 7);
}

static void test_tree_formats(void **state)
{
	(void)state;
	const hv_archive_format fmts[] = {HV_ARCHIVE_TAR, HV_ARCHIVE_TAR_GZ, HV_ARCHIVE_ZIP};
	for (size_t i = 0; i < 3; i++) {
		char *dir = tu_tmpdir();
		char *root = make_tree(dir);
		hook h = {.root = root};
		hv_archive_opts o;
		opts_for(&o, &h, fmts[i]);
		char *file;
		assert_int_equal(archive_to(dir, root, &o, &file), HV_OK);
		assert_int_equal(h.n_warnings, 0);
		members m;
		read_members(file, &m);
		check_tree_members(&m);
		members_free(&m);
		free(file);
		free(root);
	}
}

/* mtimes: pax tar keeps any, 2300 (past what int64 nanoseconds reach) too, nanoseconds
 * included, whatever the name (not only where a pax header is needed
 * for something else); zip stores one outside its range (1980 to 2106-02-07T06:28:15Z) as the
 * nearest it can hold, never wrapped around, in whole seconds. */
static void test_times(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		int64_t sec;
		int64_t tar;
		int64_t zip;
	} t[] = {
		{"before-epoch", -31536000, -31536000, 315532800}, /* 1969 */
		{"y1979", 315532799, 315532799, 315532800},
		{"y2030", 1893456000, 1893456000, 1893456000},
		{"y2100", 4102444800, 4102444800, 4102444800},
		{"y2300", 10413792000, 10413792000, 4294967295},
	};
	enum { N = sizeof(t) / sizeof(t[0]) };
	const hv_archive_format fmts[] = {HV_ARCHIVE_TAR, HV_ARCHIVE_ZIP};
	for (size_t f = 0; f < 2; f++) {
		char *dir = tu_tmpdir();
		tu_mkdir(dir, "root");
		char *root = tu_path(dir, "root");
		for (size_t i = 0; i < N; i++) {
			tu_write(root, t[i].name, "x", 1);
			char *p = tu_path(root, t[i].name);
			struct timespec ts[2] = {{.tv_sec = (time_t)t[i].sec, .tv_nsec = 5},
						 {.tv_sec = (time_t)t[i].sec, .tv_nsec = 5}};
			assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
			free(p);
		}
		hook h = {.root = root};
		hv_archive_opts o;
		opts_for(&o, &h, fmts[f]);
		char *file;
		assert_int_equal(archive_to(dir, root, &o, &file), HV_OK);
		members m;
		read_members(file, &m);
		for (size_t i = 0; i < N; i++) {
			const member *x = find(&m, t[i].name);
			assert_non_null(x);
			if (x->mtime != (fmts[f] == HV_ARCHIVE_ZIP ? t[i].zip : t[i].tar))
				fail_msg("%s in %s: mtime %lld", t[i].name, file, (long long)x->mtime);
			long nsec = fmts[f] == HV_ARCHIVE_ZIP || t[i].tar != t[i].sec ? x->mtime_nsec : 5;
			if (x->mtime_nsec != nsec || (fmts[f] == HV_ARCHIVE_ZIP && nsec != 0))
				fail_msg("%s in %s: mtime's nanoseconds %ld", t[i].name, file,
					 x->mtime_nsec);
		}
		members_free(&m);
		free(file);
		free(root);
	}
}

static void test_symlink_swap_not_followed(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir);
	char *secret = tu_path(dir, "secret");
	hook h = {.root = root, .target = "a.txt", .link_to = secret};
	hv_archive_opts o;
	opts_for(&o, &h, HV_ARCHIVE_TAR);
	char *file;
	assert_int_equal(archive_to(dir, root, &o, &file), HV_WARN);
	assert_true(h.done);
	assert_true(warned(&h, "a.txt: became a symlink"));
	members m;
	read_members(file, &m);
	assert_null(find(&m, "a.txt"));
	for (size_t i = 0; i < m.n; i++)
		if (m.v[i].data)
			assert_null(memmem(m.v[i].data, m.v[i].len, "SECRET", 6));
	assert_non_null(find(&m, "sub/b.bin")); /* the rest is there */
	members_free(&m);
	free(file);
	free(secret);
	free(root);
}

static void test_fifo_swap_not_opened(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir);
	hook h = {.root = root, .target = "sub/b.bin", .fifo = true};
	hv_archive_opts o;
	opts_for(&o, &h, HV_ARCHIVE_ZIP);
	char *file;
	alarm(60); /* a FIFO opened for reading would block here forever */
	assert_int_equal(archive_to(dir, root, &o, &file), HV_WARN);
	alarm(0);
	assert_true(warned(&h, "sub/b.bin: became a special file"));
	members m;
	read_members(file, &m);
	assert_null(find(&m, "sub/b.bin"));
	assert_non_null(find(&m, "a.txt"));
	members_free(&m);
	free(file);
	free(root);
}

static void test_fifo_in_tree_skipped(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir);
	char *p = tu_path(root, "pipe");
	assert_int_equal(mkfifo(p, 0644), 0);
	free(p);
	hook h = {.root = root};
	hv_archive_opts o;
	opts_for(&o, &h, HV_ARCHIVE_TAR);
	char *file;
	alarm(60);
	assert_int_equal(archive_to(dir, root, &o, &file), HV_WARN);
	alarm(0);
	assert_int_equal(h.n_warnings, 1);
	assert_true(warned(&h, "pipe: a fifo, not archived"));
	/* HV_WARN comes with its message, whatever the warn callback did meanwhile (this one
	 * calls libharvest, which fails), and without a callback too. */
	assert_string_equal(hv_error_last(), "1 entry skipped or changed while archived");
	assert_int_equal(hv_error_last_status(), HV_WARN);
	free(file);
	o.warn = meddling_warn;
	assert_int_equal(archive_to(dir, root, &o, &file), HV_WARN);
	assert_string_equal(hv_error_last(), "1 entry skipped or changed while archived");
	free(file);
	o.warn = NULL;
	assert_int_equal(archive_to(dir, root, &o, &file), HV_WARN);
	assert_string_equal(hv_error_last(), "1 entry skipped or changed while archived");
	members m;
	read_members(file, &m);
	assert_null(find(&m, "pipe"));
	check_tree_members(&m);
	members_free(&m);
	free(file);
	free(root);
}

static void test_file_changes_size(void **state)
{
	(void)state;
	for (int grow = 0; grow < 2; grow++) {
		char *dir = tu_tmpdir();
		char *root = make_tree(dir);
		hook h = {.root = root, .target = "a.txt", .resize = grow ? 10 : -2};
		hv_archive_opts o;
		opts_for(&o, &h, HV_ARCHIVE_TAR);
		char *file;
		assert_int_equal(archive_to(dir, root, &o, &file), HV_WARN);
		assert_true(h.done);
		assert_true(warned(&h, grow ? "a.txt: file grew as we read it"
					    : "a.txt: file shrank as we read it"));
		members m;
		read_members(file, &m);
		const member *x = find(&m, "a.txt");
		assert_non_null(x);
		/* the size the header promised: cut, or padded with zeros */
		assert_int_equal(x->len, 6);
		assert_memory_equal(x->data, grow ? "alpha\n" : "al\0\0\0\0", 6);
		assert_non_null(find(&m, "sub/b.bin")); /* the archive stays readable after it */
		members_free(&m);
		free(file);
		free(root);
	}
}

static void test_archive_inside_tree_left_out(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir);
	hook h = {.root = root};
	hv_archive_opts o;
	opts_for(&o, &h, HV_ARCHIVE_TAR);
	char *file;
	assert_int_equal(archive_to(root, root, &o, &file), HV_OK);
	members m;
	read_members(file, &m);
	assert_null(find(&m, "out.tar"));
	check_tree_members(&m);
	members_free(&m);
	free(file);
	free(root);
}

static void test_walk_options(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir);
	tu_write(root, ".hidden", "h", 1);
	hook h = {.root = root};
	hv_archive_opts o;
	opts_for(&o, &h, HV_ARCHIVE_TAR);
	const char *ex[] = {"sub"};
	o.excludes = ex;
	o.n_excludes = 1;
	o.no_hidden = true;
	char *file;
	assert_int_equal(archive_to(dir, root, &o, &file), HV_OK);
	members m;
	read_members(file, &m);
	assert_null(find(&m, ".hidden"));
	assert_null(find(&m, "sub/b.bin"));
	assert_non_null(find(&m, "a.txt"));
	members_free(&m);
	/* without them, the hidden file is archived */
	opts_for(&o, &h, HV_ARCHIVE_TAR);
	o.max_depth = 1;
	free(file);
	assert_int_equal(archive_to(dir, root, &o, &file), HV_OK);
	read_members(file, &m);
	assert_non_null(find(&m, ".hidden"));
	assert_null(find(&m, "sub/b.bin")); /* depth 2 */
	members_free(&m);
	free(file);
	free(root);
}

static void test_missing_root(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *missing = tu_path(dir, "nope");
	hv_archive_opts o;
	hv_archive_opts_init(&o);
	int fd = open("/dev/null", O_WRONLY);
	assert_int_equal(hv_archive_dir(fd, missing, &o, NULL), HV_ENOTDIR);
	close(fd);
	free(missing);
}

static void test_write_errors(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir);
	char big[65536];
	memset(big, 'b', sizeof(big));
	for (int i = 0; i < 32; i++) {
		char name[32];
		snprintf(name, sizeof(name), "big%02d", i);
		tu_write(root, name, big, sizeof(big));
	}
	const hv_archive_format fmts[] = {HV_ARCHIVE_TAR, HV_ARCHIVE_TAR_GZ, HV_ARCHIVE_ZIP};
	for (size_t i = 0; i < 3; i++) {
		hv_archive_opts o;
		hv_archive_opts_init(&o);
		o.format = fmts[i];
		int fd = open("/dev/full", O_WRONLY);
		assert_true(fd >= 0);
		assert_int_equal(hv_archive_dir(fd, root, &o, NULL), HV_EIO);
		assert_non_null(strstr(hv_error_last(), "No space left on device"));
		close(fd);
	}
	/* a reader that went away: EPIPE (with SIGPIPE ignored, as the CLI does) */
	void (*old)(int) = signal(SIGPIPE, SIG_IGN);
	int p[2];
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	hv_archive_opts o;
	hv_archive_opts_init(&o);
	assert_int_equal(hv_archive_dir(p[1], root, &o, NULL), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "Broken pipe"));
	close(p[1]);
	signal(SIGPIPE, old);
	free(root);
}

static void test_format_names(void **state)
{
	(void)state;
	hv_archive_format f;
	assert_int_equal(hv_archive_format_from_name("a.tar", &f), HV_OK);
	assert_int_equal(f, HV_ARCHIVE_TAR);
	assert_int_equal(hv_archive_format_from_name("x/A.TAR.GZ", &f), HV_OK);
	assert_int_equal(f, HV_ARCHIVE_TAR_GZ);
	assert_int_equal(hv_archive_format_from_name("b.tgz", &f), HV_OK);
	assert_int_equal(f, HV_ARCHIVE_TAR_GZ);
	assert_int_equal(hv_archive_format_from_name("c.zip", &f), HV_OK);
	assert_int_equal(f, HV_ARCHIVE_ZIP);
	assert_int_equal(hv_archive_format_from_name("c.gz", &f), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "c.gz: unknown archive extension"));
	assert_int_equal(hv_archive_format_from_name("tar", &f), HV_EUSAGE);
	assert_int_equal(hv_archive_format_parse("zip", &f), HV_OK);
	assert_int_equal(f, HV_ARCHIVE_ZIP);
	assert_int_equal(hv_archive_format_parse("tgz", &f), HV_OK);
	assert_int_equal(f, HV_ARCHIVE_TAR_GZ);
	assert_int_equal(hv_archive_format_parse("rar", &f), HV_EUSAGE);
	assert_string_equal(hv_archive_format_name(HV_ARCHIVE_TAR_GZ), "tar.gz");
	assert_string_equal(hv_archive_format_name(HV_ARCHIVE_ZIP), "zip");
	assert_string_equal(hv_archive_format_name(HV_ARCHIVE_TAR), "tar");
	/* a value that is no format: named so, and refused by the writers */
	assert_string_equal(hv_archive_format_name((hv_archive_format)99), "unknown");
	assert_string_equal(hv_archive_format_name(HV_ARCHIVE_TAR), "tar");
	hv_archive_opts bad;
	hv_archive_opts_init(&bad);
	bad.format = (hv_archive_format)99;
	char *d = tu_tmpdir();
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(hv_archive_dir(fd, d, &bad, NULL), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "bad archive format"));
	close(fd);
}

/* ---- a run ------------------------------------------------------------------------------ */

static int64_t record(hv_store *st)
{
	int64_t id;
	hv_run_start rs = {.dir = "/work/dir", .started_at_ns = 1700000000000000000};
	assert_int_equal(hv_store_run_begin(st, &rs, &id), HV_OK);
	static const struct {
		const char *path, *name, *mime, *content;
		bool store;
	} a[] = {
		{"plot.png", "plot.png", "image/png", "PNGDATA", true},
		{"out/new\nline.txt", "new\nline.txt", "text/plain", "nl", true},
		{"big.bin", "big.bin", "application/octet-stream", "not kept", false},
		{"../escape.txt", "escape.txt", "text/plain", "evil", true},
		{"/abs.txt", "abs.txt", "text/plain", "evil2", true},
		{"MANIFEST.json", "MANIFEST.json", "application/json", "{}", true},
	};
	hv_artifact_in in[6];
	static char sha[6][65];
	for (size_t i = 0; i < 6; i++) {
		tu_sha256_hex(a[i].content, strlen(a[i].content), sha[i]);
		in[i] = (hv_artifact_in){
			.path = a[i].path, .path_len = strlen(a[i].path), .name = a[i].name,
			.name_len = strlen(a[i].name), .mime_type = a[i].mime,
			.size = strlen(a[i].content), .sha256 = sha[i],
			.content = a[i].store ? a[i].content : NULL,
			.content_len = a[i].store ? strlen(a[i].content) : 0,
		};
	}
	hv_run_end end = {.ended_at_ns = 1700000001000000000, .duration_ms = -1};
	assert_int_equal(hv_store_run_finish(st, id, &end, in, 6), HV_OK);
	return id;
}

static void test_run_archive(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *db = tu_path(dir, "h.db");
	hv_store *st;
	assert_int_equal(hv_store_open(&st, db, 0), HV_OK);
	int64_t id = record(st);
	char sha[6][65];
	tu_sha256_hex("PNGDATA", 7, sha[0]);
	tu_sha256_hex("nl", 2, sha[1]);
	tu_sha256_hex("not kept", 8, sha[2]);
	tu_sha256_hex("evil", 4, sha[3]);
	tu_sha256_hex("evil2", 5, sha[4]);
	tu_sha256_hex("{}", 2, sha[5]);
	char expect[4096];
	snprintf(expect, sizeof(expect),
		 "{\"run_id\":%lld,\"artifacts\":["
		 "{\"path\":\"plot.png\",\"mime_type\":\"image/png\",\"size\":7,\"sha256\":\"%s\","
		 "\"archived\":true,\"reason\":null},"
		 "{\"path\":\"out/new\\nline.txt\",\"mime_type\":\"text/plain\",\"size\":2,"
		 "\"sha256\":\"%s\",\"archived\":true,\"reason\":null},"
		 "{\"path\":\"big.bin\",\"mime_type\":\"application/octet-stream\",\"size\":8,"
		 "\"sha256\":\"%s\",\"archived\":false,\"reason\":\"not_stored\"},"
		 "{\"path\":\"../escape.txt\",\"mime_type\":\"text/plain\",\"size\":4,"
		 "\"sha256\":\"%s\",\"archived\":false,\"reason\":\"unsafe_path\"},"
		 "{\"path\":\"/abs.txt\",\"mime_type\":\"text/plain\",\"size\":5,"
		 "\"sha256\":\"%s\",\"archived\":false,\"reason\":\"unsafe_path\"},"
		 "{\"path\":\"MANIFEST.json\",\"mime_type\":\"application/json\",\"size\":2,"
		 "\"sha256\":\"%s\",\"archived\":false,\"reason\":\"reserved\"}]}\n",
		 (long long)id, sha[0], sha[1], sha[2], sha[3], sha[4], sha[5]);
	const hv_archive_format fmts[] = {HV_ARCHIVE_TAR, HV_ARCHIVE_TAR_GZ, HV_ARCHIVE_ZIP};
	for (size_t i = 0; i < 3; i++) {
		hook h = {0};
		hv_archive_opts o;
		opts_for(&o, &h, fmts[i]);
		char *file = tu_path(dir, "run.archive");
		int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		hv_archive_stats stats;
		assert_int_equal(hv_archive_run(fd, st, id, &o, &stats), HV_WARN);
		close(fd);
		assert_int_equal(stats.members, 3);
		assert_int_equal(h.n_warnings, 4);
		assert_true(warned(&h, "big.bin: content not stored"));
		assert_true(warned(&h, "../escape.txt: unsafe path"));
		members m;
		read_members(file, &m);
		assert_int_equal(m.n, 3);
		assert_string_equal(m.v[0].path, "MANIFEST.json");
		assert_int_equal(m.v[0].len, strlen(expect));
		assert_memory_equal(m.v[0].data, expect, strlen(expect));
		const member *x = find(&m, "plot.png");
		assert_non_null(x);
		assert_int_equal(x->len, 7);
		assert_memory_equal(x->data, "PNGDATA", 7);
		x = find(&m, "out/new\nline.txt");
		assert_non_null(x);
		assert_memory_equal(x->data, "nl", 2);
		for (size_t k = 0; k < m.n; k++) {
			assert_true(m.v[k].path[0] != '/');
			assert_null(strstr(m.v[k].path, ".."));
		}
		members_free(&m);
		free(file);
	}
	int fd = open("/dev/null", O_WRONLY);
	hv_archive_opts o;
	hv_archive_opts_init(&o);
	assert_int_equal(hv_archive_run(fd, st, id + 100, &o, NULL), HV_ENOTFOUND);
	assert_non_null(strstr(hv_error_last(), "no run "));
	close(fd);
	/* Run 0 is no run (a filter's 0 means every run: all their artifacts, archived as one),
	 * and nothing is written for it. */
	char *zero = tu_path(dir, "zero.tar");
	fd = open(zero, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_int_equal(hv_archive_run(fd, st, 0, &o, NULL), HV_ENOTFOUND);
	assert_string_equal(hv_error_last(), "no run 0");
	close(fd);
	struct stat sb;
	assert_int_equal(stat(zero, &sb), 0);
	assert_int_equal(sb.st_size, 0);
	/* NULL options are the defaults (a tar), as for the other calls taking options. */
	fd = open(zero, O_WRONLY | O_TRUNC);
	hv_archive_stats stats;
	assert_int_equal(hv_archive_run(fd, st, id, NULL, &stats), HV_WARN);
	close(fd);
	assert_int_equal(stats.members, 3);
	members m;
	read_members(zero, &m);
	assert_int_equal(m.n, 3);
	assert_string_equal(m.v[0].path, "MANIFEST.json");
	members_free(&m);
	/* (the hooks the loop above set point into its scope) */
	hv__test_hook_set(HV__HOOK_ARCHIVE_BEFORE_OPEN, NULL, NULL);
	hv__test_hook_set(HV__HOOK_ARCHIVE_AFTER_HEADER, NULL, NULL);
	char *sub = tu_path(dir, "sub");
	assert_int_equal(mkdir(sub, 0755), 0);
	tu_write(sub, "a.txt", "abc", 3);
	fd = open(zero, O_WRONLY | O_TRUNC);
	assert_int_equal(hv_archive_dir(fd, sub, NULL, &stats), HV_OK);
	close(fd);
	read_members(zero, &m);
	const member *a = find(&m, "a.txt");
	assert_non_null(a);
	assert_memory_equal(a->data, "abc", 3);
	members_free(&m);
	free(sub);
	free(zero);
	assert_int_equal(hv_store_close(st), HV_OK);
	free(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_tree_formats, teardown),
		cmocka_unit_test_teardown(test_times, teardown),
		cmocka_unit_test_teardown(test_symlink_swap_not_followed, teardown),
		cmocka_unit_test_teardown(test_fifo_swap_not_opened, teardown),
		cmocka_unit_test_teardown(test_fifo_in_tree_skipped, teardown),
		cmocka_unit_test_teardown(test_file_changes_size, teardown),
		cmocka_unit_test_teardown(test_archive_inside_tree_left_out, teardown),
		cmocka_unit_test_teardown(test_walk_options, teardown),
		cmocka_unit_test_teardown(test_missing_root, teardown),
		cmocka_unit_test_teardown(test_write_errors, teardown),
		cmocka_unit_test(test_format_names),
		cmocka_unit_test_teardown(test_run_archive, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
