/* End-to-end tests of `harvest ls` and `harvest walk` (SPEC sections 1, 2, 3, 6): each case
 * builds a fresh tree in a temp directory, runs the built binary and checks its output after
 * decoding the JSON, byte for byte. The big trees (100,000 entries, 20,000 levels) and the
 * comparison with an independent reference listing are in walk_big_cli_test.c.
 * HV_TEST_FILTER=<test name> runs one case. */
#include "testutil.h"
#include "tjson.h"

#include <errno.h>
#include <fcntl.h>
#include <magic.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- small helpers ---- */

static void mklink(const char *dir, const char *target, const char *rel)
{
	char *p = tu_path(dir, rel);
	if (symlink(target, p) != 0)
		fail_msg("symlink %s: %s", p, strerror(errno));
	free(p);
}

static void mkfifo_at(const char *dir, const char *rel, mode_t mode)
{
	char *p = tu_path(dir, rel);
	if (mkfifo(p, mode) != 0)
		fail_msg("mkfifo %s: %s", p, strerror(errno));
	chmod(p, mode);
	free(p);
}

/* A UNIX socket bound at dir/rel (bound relative to dir, so a long TMPDIR does not matter). */
static void mksock_at(const char *dir, const char *rel)
{
	int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(cwd >= 0);
	assert_int_equal(chdir(dir), 0);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s >= 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	assert_true(strlen(rel) < sizeof(a.sun_path));
	strcpy(a.sun_path, rel);
	int rc = bind(s, (struct sockaddr *)&a, sizeof(a));
	int e = errno;
	close(s);
	assert_int_equal(fchdir(cwd), 0);
	close(cwd);
	if (rc != 0)
		fail_msg("bind %s/%s: %s", dir, rel, strerror(e));
}

static int64_t st_size_of(const char *dir, const char *rel)
{
	char *p = tu_path(dir, rel);
	struct stat st;
	if (stat(p, &st) != 0)
		fail_msg("stat %s: %s", p, strerror(errno));
	free(p);
	return (int64_t)st.st_size;
}

/* Runs harvest with the NULL-terminated arguments and parses its FileInfo output. */
static void hv_recs(tu_recs *rs, tu_result *r, bool jsonl, const char *key, bool camel,
		    const char *arg, ...)
{
	const char *args[64];
	size_t n = 0;
	va_list ap;
	va_start(ap, arg);
	for (const char *a = arg; a && n < 63; a = va_arg(ap, const char *))
		args[n++] = a;
	va_end(ap);
	args[n] = NULL;
	tu_harvestv(r, NULL, NULL, args);
	tu_recs_parse(rs, r->out, r->out_len, jsonl, key, camel);
}

#define FIND(rs, s) tu_recs_find((rs), (s), strlen(s))

static void assert_rec(const tu_recs *rs, const char *key, int is_dir, int64_t size)
{
	const tu_rec *r = FIND(rs, key);
	if (!r)
		fail_msg("no record for \"%s\"", key);
	if (r->is_dir != is_dir)
		fail_msg("\"%s\": is_dir %d, expected %d", key, r->is_dir, is_dir);
	if (r->size != size)
		fail_msg("\"%s\": size %lld, expected %lld", key, (long long)r->size, (long long)size);
}

static void assert_absent(const tu_recs *rs, const char *key)
{
	if (FIND(rs, key))
		fail_msg("\"%s\" must not be listed", key);
}

/* The keys of the records, in order, joined with '|' (for order checks in messages). */
static char *joined_keys(const tu_recs *rs)
{
	size_t len = 1;
	for (size_t i = 0; i < rs->n; i++)
		len += rs->v[i].key_len + 1;
	char *s = malloc(len), *o = s;
	assert_non_null(s);
	for (size_t i = 0; i < rs->n; i++) {
		if (i)
			*o++ = '|';
		memcpy(o, rs->v[i].key, rs->v[i].key_len);
		o += rs->v[i].key_len;
	}
	*o = '\0';
	return s;
}

static void assert_order(const tu_recs *rs, const char *expected)
{
	char *got = joined_keys(rs);
	if (strcmp(got, expected) != 0)
		fail_msg("order:\n  got      %s\n  expected %s", got, expected);
	free(got);
}

static void assert_clean(const tu_result *r)
{
	if (r->status != 0 || r->err_len != 0)
		fail_msg("exit status %d (expected 0), stderr: %s", r->status, r->err);
}

static size_t count_char(const char *s, size_t len, char c)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		n += s[i] == c;
	return n;
}

/* A usage or path error: the status, nothing on stdout, one line on stderr. */
static void assert_one_line_error(const tu_result *r, int status, const char *what)
{
	if (r->status != status)
		fail_msg("%s: exit status %d, expected %d (stderr: %s)", what, r->status, status,
			 r->err);
	if (r->out_len != 0)
		fail_msg("%s: stdout must be empty, got: %.200s", what, r->out);
	if (r->err_len == 0 || r->err[r->err_len - 1] != '\n' ||
	    count_char(r->err, r->err_len, '\n') != 1)
		fail_msg("%s: stderr must be exactly one line, got: \"%s\"", what, r->err);
}

/* ---- strings are exact ---- */

static const char *const odd_names[] = {
	"new\nline",
	"tab\there",
	"quo\"te",
	"back\\slash",
	"ctl\x01\x1f" "x",
	"del\x7f",
	"esc\x1b[0m",
	"bad\xff\x80utf",
	"caf\xc3\xa9",
	"surrogate\xed\xa0\x80",
	"overlong\xc0\xaf",
	"cut\xe6\x97",
	"emoji\xf0\x9f\x98\x80",
	"beyond\xf4\x90\x80\x80",
	"\xdc\x80",
	" lead space",
};
#define N_ODD (sizeof(odd_names) / sizeof(odd_names[0]))

static void make_odd_tree(const char *root)
{
	tu_mkdir(root, "sub\n\xff");
	for (size_t i = 0; i < N_ODD; i++) {
		char content[64];
		memset(content, 'x', sizeof(content));
		tu_write(root, odd_names[i], content, i + 1);
		char *rel = tu_path("sub\n\xff", odd_names[i]);
		tu_write(root, rel, content, 2 * i + 1);
		free(rel);
	}
}

static void check_odd_records(const tu_recs *rs, bool with_sub, bool camel)
{
	assert_int_equal(rs->n, N_ODD * (with_sub ? 2 : 1) + 1);
	(void)camel;
	for (size_t i = 0; i < N_ODD; i++) {
		const tu_rec *r = tu_recs_find(rs, odd_names[i], strlen(odd_names[i]));
		if (!r)
			fail_msg("name %zu is missing or not decoded to its exact bytes", i);
		assert_int_equal(r->is_dir, 0);
		assert_int_equal(r->size, (int64_t)i + 1);
		if (with_sub) {
			char *rel = tu_path("sub\n\xff", odd_names[i]);
			r = tu_recs_find(rs, rel, strlen(rel));
			if (!r)
				fail_msg("path sub\\n\\xff/<name %zu> is missing or not exact", i);
			assert_int_equal(r->size, (int64_t)(2 * i + 1));
			free(rel);
		}
	}
	assert_non_null(FIND(rs, "sub\n\xff"));
}

static void test_names_exact(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	make_odd_tree(root);
	tu_result r;
	tu_recs rs;

	hv_recs(&rs, &r, true, "path", false, "walk", root, NULL);
	assert_clean(&r);
	check_odd_records(&rs, true, false);
	/* Sorted bytewise within each directory: the records of the root come in memcmp order. */
	const tu_rec *prev = NULL;
	for (size_t i = 0; i < rs.n; i++) {
		const tu_rec *b = &rs.v[i];
		if (memchr(b->key, '/', b->key_len))
			continue;
		if (prev) {
			size_t m = prev->key_len < b->key_len ? prev->key_len : b->key_len;
			int c = memcmp(prev->key, b->key, m);
			if (!(c < 0 || (c == 0 && prev->key_len < b->key_len)))
				fail_msg("walk --sort name: the root's entries are not in bytewise order");
		}
		prev = b;
	}
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, false, "path", false, "walk", "--format", "json", root, NULL);
	assert_clean(&r);
	check_odd_records(&rs, true, false);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, true, "path", true, "walk", "--case", "camel", "--sort", "none", root,
		NULL);
	assert_clean(&r);
	check_odd_records(&rs, true, true);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, false, "name", false, "ls", root, NULL);
	assert_clean(&r);
	check_odd_records(&rs, false, false);
	tu_recs_free(&rs);
	tu_result_free(&r);

	/* --format nul: the raw bytes, each path ended by a NUL. */
	tu_harvest(&r, "walk", "--format", "nul", root, NULL);
	assert_clean(&r);
	size_t found = 0, recs = 0;
	for (size_t off = 0; off < r.out_len;) {
		const char *p = r.out + off;
		const char *z = memchr(p, '\0', r.out_len - off);
		if (!z)
			fail_msg("--format nul: the last path is not NUL-terminated");
		size_t len = (size_t)(z - p);
		for (size_t i = 0; i < N_ODD; i++)
			if (len == strlen(odd_names[i]) && memcmp(p, odd_names[i], len) == 0)
				found++;
		recs++;
		off += len + 1;
	}
	assert_int_equal(found, N_ODD);
	assert_int_equal(recs, 2 * N_ODD + 1);
	tu_result_free(&r);

}

/* ---- symlinks ---- */

static void test_dangling_and_loop(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	mklink(root, "nowhere", "dangle");
	mklink(root, "self", "self");
	mklink(root, "loop-b", "loop-a");
	mklink(root, "loop-a", "loop-b");
	tu_write(root, "file", "abc", 3);
	static const char *const links[] = {"dangle", "self", "loop-a", "loop-b"};
	tu_result r;
	tu_recs rs;

	for (int pass = 0; pass < 3; pass++) {
		bool camel = pass == 1;
		if (pass == 0)
			hv_recs(&rs, &r, true, "path", false, "walk", root, NULL);
		else if (pass == 1)
			hv_recs(&rs, &r, true, "path", true, "walk", "--case", "camel", root, NULL);
		else
			hv_recs(&rs, &r, false, "name", false, "ls", root, NULL);
		assert_clean(&r);
		assert_int_equal(rs.n, 5);
		for (size_t i = 0; i < 4; i++)
			assert_rec(&rs, links[i], camel ? TU_ABSENT : TU_NULL,
				   camel ? TU_ABSENT : TU_NULL);
		assert_rec(&rs, "file", 0, 3);
		tu_recs_free(&rs);
		tu_result_free(&r);
	}

	/* --long still knows what the link is and where it points. */
	hv_recs(&rs, &r, true, "path", false, "walk", "--long", root, NULL);
	assert_clean(&r);
	const tu_rec *d = FIND(&rs, "dangle");
	assert_non_null(d);
	assert_string_equal(tj_str(tj_get(d->obj, "type"), NULL), "symlink");
	assert_string_equal(tj_str(tj_get(d->obj, "target"), NULL), "nowhere");
	assert_string_equal(tj_str(tj_get(FIND(&rs, "loop-a")->obj, "target"), NULL), "loop-b");
	tu_recs_free(&rs);
	tu_result_free(&r);

	/* --follow does not change what a dangling link or a loop is. */
	hv_recs(&rs, &r, true, "path", false, "walk", "--follow", root, NULL);
	assert_int_equal(rs.n, 5);
	for (size_t i = 0; i < 4; i++)
		assert_rec(&rs, links[i], TU_NULL, TU_NULL);
	tu_recs_free(&rs);
	tu_result_free(&r);

}

static void test_symlink_to_dir(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_mkdir(root, "real");
	tu_write(root, "real/f", "abc", 3);
	mklink(root, "real", "link");
	int64_t dsize = st_size_of(root, "real");
	tu_result r;
	tu_recs rs;

	hv_recs(&rs, &r, true, "path", false, "walk", root, NULL);
	assert_clean(&r);
	assert_order(&rs, "link|real|real/f");
	assert_rec(&rs, "link", 1, dsize);
	assert_absent(&rs, "link/f");
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, false, "name", false, "ls", root, NULL);
	assert_clean(&r);
	assert_rec(&rs, "link", 1, dsize);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, true, "path", false, "walk", "--follow", root, NULL);
	assert_clean(&r);
	assert_order(&rs, "link|link/f|real|real/f");
	assert_rec(&rs, "link", 1, dsize);
	assert_rec(&rs, "link/f", 0, 3);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, true, "path", false, "walk", "--follow", "--sort", "none", "--threads",
		"4", root, NULL);
	assert_clean(&r);
	assert_int_equal(rs.n, 4);
	assert_rec(&rs, "link/f", 0, 3);
	tu_recs_free(&rs);
	tu_result_free(&r);

}

static void test_follow_ancestor_link(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_mkdir(root, "a");
	tu_mkdir(root, "a/b");
	tu_write(root, "a/b/f", "x", 1);
	mklink(root, "../..", "a/b/up");  /* the root */
	mklink(root, ".", "a/self");      /* a itself */
	const char *expected = "a|a/b|a/b/f|a/b/up|a/self";
	tu_result r;
	tu_recs rs;

	/* Without --follow: plain symlinks to directories, nothing to warn about. */
	hv_recs(&rs, &r, true, "path", false, "walk", root, NULL);
	assert_clean(&r);
	assert_order(&rs, expected);
	tu_recs_free(&rs);
	tu_result_free(&r);

	for (int threads = 1; threads <= 4; threads += 3) {
		char t[32];
		snprintf(t, sizeof(t), "%d", threads);
		hv_recs(&rs, &r, true, "path", false, "walk", "--follow", "--threads", t, root, NULL);
		/* Listed once, not entered, warned about: a warning is exit status 1. */
		assert_order(&rs, expected);
		assert_rec(&rs, "a/b/up", 1, st_size_of(root, "."));
		assert_rec(&rs, "a/self", 1, st_size_of(root, "a"));
		if (r.status != 1)
			fail_msg("--follow with a link to an ancestor: exit %d, expected 1", r.status);
		if (!strstr(r.err, "a/b/up") || !strstr(r.err, "a/self"))
			fail_msg("the warning must name both links, stderr: %s", r.err);
		tu_recs_free(&rs);
		tu_result_free(&r);
	}

	/* --quiet: no warnings, same status. */
	hv_recs(&rs, &r, true, "path", false, "walk", "--follow", "--quiet", root, NULL);
	assert_order(&rs, expected);
	assert_int_equal(r.status, 1);
	assert_int_equal(r.err_len, 0);
	tu_recs_free(&rs);
	tu_result_free(&r);

}

/* Two links that lead into each other's directory: under --follow each is entered once
 * from the other side, and the link back to a directory already on the path (by device and
 * inode, whatever its name) is listed, not entered. */
static void test_follow_mutual_links(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_mkdir(root, "a");
	tu_mkdir(root, "b");
	tu_write(root, "a/fa", "1", 1);
	tu_write(root, "b/fb", "22", 2);
	mklink(root, "../b", "a/to-b");
	mklink(root, "../a", "b/to-a");
	tu_result r;
	tu_recs rs;
	hv_recs(&rs, &r, true, "path", false, "walk", "--follow", root, NULL);
	assert_order(&rs, "a|a/fa|a/to-b|a/to-b/fb|a/to-b/to-a|"
			  "b|b/fb|b/to-a|b/to-a/fa|b/to-a/to-b");
	assert_rec(&rs, "a/to-b/fb", 0, 2);
	assert_rec(&rs, "a/to-b/to-a", 1, st_size_of(root, "a"));
	if (r.status != 1 || !strstr(r.err, "a/to-b/to-a") || !strstr(r.err, "b/to-a/to-b"))
		fail_msg("links back to an ancestor: exit %d (expected 1), stderr: %s", r.status,
			 r.err);
	tu_recs_free(&rs);
	tu_result_free(&r);
}

/* ---- special files ---- */

static void test_fifo_and_socket(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	mkfifo_at(root, "fifo", 0600);
	mksock_at(root, "sock");
	tu_write(root, "file", "12345", 5);
	/* Any open of the FIFO (even one that would not block) shows up as IN_OPEN. */
	int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	assert_true(ino >= 0);
	char *fifo = tu_path(root, "fifo");
	assert_true(inotify_add_watch(ino, fifo, IN_OPEN | IN_ACCESS) >= 0);

	static const char *const modes[][6] = {
		{"walk", "--long", NULL},
		{"walk", "--sort", "none", "--threads", "4", NULL},
		{"ls", "--long", NULL},
	};
	for (size_t m = 0; m < 3; m++) {
		char *argv[12];
		size_t n = 0;
		argv[n++] = "timeout";
		argv[n++] = "20";
		argv[n++] = (char *)HARVEST_BIN;
		for (size_t i = 0; modes[m][i]; i++)
			argv[n++] = (char *)modes[m][i];
		argv[n++] = root;
		argv[n] = NULL;
		tu_result r;
		tu_run(&r, NULL, NULL, (char *const *)argv);
		if (r.status == 124)
			fail_msg("harvest %s %s hung on a FIFO", modes[m][0], modes[m][1]);
		assert_clean(&r);
		tu_recs rs;
		bool is_ls = m == 2;
		tu_recs_parse(&rs, r.out, r.out_len, !is_ls, is_ls ? "name" : "path", false);
		assert_int_equal(rs.n, 3);
		assert_rec(&rs, "fifo", 0, 0);
		assert_rec(&rs, "sock", 0, 0);
		assert_rec(&rs, "file", 0, 5);
		if (m != 1) {
			assert_string_equal(tj_str(tj_get(FIND(&rs, "fifo")->obj, "type"), NULL), "fifo");
			assert_string_equal(tj_str(tj_get(FIND(&rs, "sock")->obj, "type"), NULL),
					    "socket");
		}
		tu_recs_free(&rs);
		tu_result_free(&r);
	}
	char ev[4096];
	ssize_t got = read(ino, ev, sizeof(ev));
	if (got > 0)
		fail_msg("harvest opened the FIFO (inotify IN_OPEN/IN_ACCESS)");
	close(ino);
	free(fifo);
}

/* ---- permission denied, as nobody ---- */

struct nobody_run {
	char *const *argv;
	int out_fd, err_fd;
};

static int exec_as_nobody(void *arg)
{
	struct nobody_run *nr = arg;
	int in = open("/dev/null", O_RDONLY);
	if (in < 0 || dup2(in, 0) < 0 || dup2(nr->out_fd, 1) < 0 || dup2(nr->err_fd, 2) < 0)
		return 98;
	execv(nr->argv[0], nr->argv);
	return 97;
}

static char *read_fd_all(int fd, size_t *len)
{
	off_t end = lseek(fd, 0, SEEK_END);
	assert_true(end >= 0);
	char *buf = malloc((size_t)end + 1);
	assert_non_null(buf);
	assert_true(pread(fd, buf, (size_t)end, 0) == end);
	buf[end] = '\0';
	*len = (size_t)end;
	return buf;
}

/* Runs harvest as nobody (a copy of the binary in a directory nobody can reach, since the
 * build tree may not be), capturing both streams through files opened here as root. */
static int harvest_as_nobody(const char *bin, const char *const *args, char **out,
			     size_t *out_len, char **err, size_t *err_len)
{
	char *argv[16];
	size_t n = 0;
	argv[n++] = (char *)bin;
	for (size_t i = 0; args[i] && n < 15; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	FILE *o = tmpfile(), *e = tmpfile();
	assert_non_null(o);
	assert_non_null(e);
	struct nobody_run nr = {argv, fileno(o), fileno(e)};
	int status = tu_as_nobody(exec_as_nobody, &nr);
	if (status == 99)
		fail_msg("could not drop privileges to nobody");
	if (status == 97 || status == 98)
		fail_msg("could not exec %s as nobody", bin);
	*out = read_fd_all(fileno(o), out_len);
	*err = read_fd_all(fileno(e), err_len);
	fclose(o);
	fclose(e);
	return status;
}

static char *copy_binary_for_nobody(char **bindir)
{
	*bindir = tu_tmpdir();
	char *dst = tu_path(*bindir, "harvest");
	char *argv[] = {"cp", (char *)HARVEST_BIN, dst, NULL};
	tu_result r;
	tu_run(&r, NULL, NULL, argv);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	assert_int_equal(chmod(dst, 0755), 0);
	return dst;
}

/* Runs walk variant (its arguments, NULL-ended) on root as nobody, with bin. */
static int walk_variant_as_nobody(const char *bin, const char *const *variant, const char *root,
				  char **out, size_t *out_len, char **err, size_t *err_len)
{
	const char *args[10];
	size_t n = 0;
	for (size_t i = 0; variant[i] && n < 8; i++)
		args[n++] = variant[i];
	args[n++] = root;
	args[n] = NULL;
	return harvest_as_nobody(bin, args, out, out_len, err, err_len);
}

static void test_unreadable_dir(void **state)
{
	(void)state;
	char *bindir;
	char *bin = copy_binary_for_nobody(&bindir);
	char *root = tu_tmpdir();
	tu_mkdir(root, "open");
	tu_write(root, "open/f", "ab", 2);
	tu_mkdir(root, "locked");
	tu_write(root, "locked/secret", "s", 1);
	tu_mkdir(root, "locked/inner");
	tu_write(root, "z", "zz", 2);
	int64_t lsize = st_size_of(root, "locked");
	char *locked = tu_path(root, "locked");
	assert_int_equal(chmod(locked, 0), 0);

	const char *variants[][6] = {
		{"walk", NULL},
		{"walk", "--sort", "none", "--threads", "4", NULL},
		{"walk", "--format", "json", NULL},
	};
	for (size_t v = 0; v < 3; v++) {
		char *out, *err;
		size_t out_len, err_len;
		int status = walk_variant_as_nobody(bin, variants[v], root, &out, &out_len, &err,
						    &err_len);
		tu_recs rs;
		tu_recs_parse(&rs, out, out_len, v != 2, "path", false);
		assert_rec(&rs, "locked", 1, lsize);
		assert_rec(&rs, "open/f", 0, 2);
		assert_rec(&rs, "z", 0, 2);
		assert_absent(&rs, "locked/secret");
		assert_absent(&rs, "locked/inner");
		assert_int_equal(rs.n, 4);
		if (status != 1)
			fail_msg("walk with an unreadable directory: exit %d, expected 1 (stderr: %s)",
				 status, err);
		if (!strstr(err, "locked") || !strstr(err, "Permission denied"))
			fail_msg("the warning must name the directory and the reason: %s", err);
		tu_recs_free(&rs);
		free(out);
		free(err);
	}

	/* --quiet: the same output and status, no warning. */
	{
		const char *args[] = {"walk", "--quiet", root, NULL};
		char *out, *err;
		size_t out_len, err_len;
		int status = harvest_as_nobody(bin, args, &out, &out_len, &err, &err_len);
		assert_int_equal(status, 1);
		assert_int_equal(err_len, 0);
		free(out);
		free(err);
	}

	/* The root itself unreadable: a runtime failure with a message naming it. */
	for (int c = 0; c < 2; c++) {
		const char *args[] = {c ? "ls" : "walk", locked, NULL};
		char *out, *err;
		size_t out_len, err_len;
		int status = harvest_as_nobody(bin, args, &out, &out_len, &err, &err_len);
		if (status != 1)
			fail_msg("%s of an unreadable directory: exit %d, expected 1", args[0], status);
		if (!strstr(err, "locked") || !strstr(err, "Permission denied"))
			fail_msg("%s: the error must name the directory and the reason: %s", args[0],
				 err);
		free(out);
		free(err);
	}

	free(locked);
	free(bin);
}

/* A directory that can be read but not searched (r--): its entries are listed with nulls (their
 * lstat fails), and a subdirectory among them, which cannot be entered, is warned of, exit 1,
 * as for a directory that cannot be opened: nothing below it is left out silently. */
static void test_unsearchable_dir(void **state)
{
	(void)state;
	char *bindir;
	char *bin = copy_binary_for_nobody(&bindir);
	char *root = tu_tmpdir();
	tu_mkdir(root, "rn");
	tu_write(root, "rn/f", "ab", 2);
	tu_mkdir(root, "rn/sd");
	tu_write(root, "rn/sd/deep", "d", 1);
	int64_t rsize = st_size_of(root, "rn");
	char *rn = tu_path(root, "rn");
	assert_int_equal(chmod(rn, 0444), 0);
	const char *variants[][6] = {
		{"walk", NULL},
		{"walk", "--sort", "none", "--threads", "4", NULL},
	};
	for (size_t v = 0; v < 2; v++) {
		char *out, *err;
		size_t out_len, err_len;
		int status = walk_variant_as_nobody(bin, variants[v], root, &out, &out_len, &err,
						    &err_len);
		tu_recs rs;
		tu_recs_parse(&rs, out, out_len, true, "path", false);
		assert_rec(&rs, "rn", 1, rsize);
		assert_rec(&rs, "rn/f", TU_NULL, TU_NULL);
		assert_rec(&rs, "rn/sd", TU_NULL, TU_NULL);
		assert_absent(&rs, "rn/sd/deep");
		assert_int_equal(rs.n, 3);
		if (status != 1)
			fail_msg("walk with an unsearchable directory: exit %d, expected 1 (stderr: %s)",
				 status, err);
		if (!strstr(err, "rn/sd: not entered: it cannot be examined"))
			fail_msg("the warning must name the directory left unentered: %s", err);
		tu_recs_free(&rs);
		free(out);
		free(err);
	}
	/* ls lists one directory and enters none: nothing to warn of. */
	{
		const char *args[] = {"ls", rn, NULL};
		char *out, *err;
		size_t out_len, err_len;
		int status = harvest_as_nobody(bin, args, &out, &out_len, &err, &err_len);
		assert_int_equal(status, 0);
		assert_int_equal(err_len, 0);
		free(out);
		free(err);
	}
	/* In text, an entry that cannot be examined has its mode unknown ("????"), never 0000
	 * (JSON says null). */
	{
		const char *args[] = {"ls", "--long", "--format", "text", rn, NULL};
		char *out, *err;
		size_t out_len, err_len;
		int status = harvest_as_nobody(bin, args, &out, &out_len, &err, &err_len);
		assert_int_equal(status, 0);
		if (!strstr(out, "-????????? ") || strstr(out, "---------- "))
			fail_msg("ls --long --format text of unexamined entries: %s", out);
		free(out);
		free(err);
	}
	assert_int_equal(chmod(rn, 0755), 0);
	free(rn);
	free(bin);
}

/* ---- errors and usage ---- */

static void test_missing_and_file_paths(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_write(root, "file", "x", 1);
	char *missing = tu_path(root, "missing");
	char *file = tu_path(root, "file");
	char *dangling = tu_path(root, "dangling");
	mklink(root, "missing", "dangling");
	char *under_file = tu_path(root, "file/x");
	const char *paths[] = {missing, file, dangling, under_file};
	for (int c = 0; c < 2; c++) {
		for (size_t i = 0; i < 4; i++) {
			tu_result r;
			tu_harvest(&r, c ? "ls" : "walk", paths[i], NULL);
			char what[64];
			snprintf(what, sizeof(what), "%s of a %s", c ? "ls" : "walk",
				 i == 0 ? "missing path" : i == 1 ? "file" : i == 2 ? "dangling link" : "path under a file");
			assert_one_line_error(&r, 3, what);
			if (!strstr(r.err, paths[i]))
				fail_msg("%s: the error must name the path: %s", what, r.err);
			tu_result_free(&r);
		}
	}
	free(missing);
	free(file);
	free(dangling);
	free(under_file);
	/* A path that exists but cannot be looked up is not "not found" (3): a symlink loop and
	 * a name too long are exit 1, with the reason, as cat and rm say them. */
	char *loop = tu_path(root, "loop");
	mklink(root, "loop", "loop");
	char longname[300];
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	char *toolong = tu_path(root, longname);
	const char *odd[] = {loop, toolong};
	const char *why[] = {"Too many levels of symbolic links", "File name too long"};
	for (int c = 0; c < 2; c++) {
		for (size_t i = 0; i < 2; i++) {
			tu_result r;
			tu_harvest(&r, c ? "ls" : "walk", odd[i], NULL);
			assert_one_line_error(&r, 1, why[i]);
			if (!strstr(r.err, why[i]))
				fail_msg("%s: the reason must be given: %s", c ? "ls" : "walk", r.err);
			tu_result_free(&r);
		}
	}
	free(loop);
	free(toolong);
}

static void test_bad_options(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	const char *cases[][6] = {
		{"walk", "--max-depth", "x", NULL},
		{"walk", "--max-depth", "3x", NULL},
		{"walk", "--max-depth", "", NULL},
		{"walk", "--sort", "what", NULL},
		{"walk", "--bogus", NULL},
		{"walk", "--format", "xml", NULL},
		{"walk", "--case", "kebab", NULL},
		{"walk", "--max-entries", "many", NULL},
		{"walk", "--threads", "lots", NULL},
		{"ls", "--bogus", NULL},
		{"ls", "--sort", "size", NULL},
		{"ls", "--format", "yaml", NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[10];
		size_t n = 0;
		char what[128] = "harvest";
		for (size_t k = 0; cases[i][k]; k++) {
			args[n++] = cases[i][k];
			strncat(what, " ", sizeof(what) - strlen(what) - 1);
			strncat(what, cases[i][k], sizeof(what) - strlen(what) - 1);
		}
		args[n++] = root;
		args[n] = NULL;
		tu_result r;
		tu_harvestv(&r, NULL, NULL, args);
		assert_one_line_error(&r, 2, what);
		tu_result_free(&r);
	}
	/* An option without its value, a missing DIR, an unknown command, a second DIR. */
	const char *more[][4] = {
		{"walk", "--max-depth", NULL},
		{"walk", NULL},
		{"ls", NULL},
		{"frobnicate", NULL},
		{"--version", "extra", NULL},
		{"help", "frobnicate", NULL},
		{"help", "walk", "ls", NULL},
	};
	for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
		tu_result r;
		tu_harvestv(&r, NULL, NULL, more[i]);
		char what[64];
		snprintf(what, sizeof(what), "harvest %s %s", more[i][0], more[i][1] ? more[i][1] : "");
		assert_one_line_error(&r, 2, what);
		tu_result_free(&r);
	}
}

static void test_version_and_help(void **state)
{
	(void)state;
	tu_result r;
	tu_harvest(&r, "--version", NULL);
	assert_clean(&r);
	assert_non_null(strstr(r.out, HARVEST_VERSION));
	char magic[32];
	int mv = magic_version();
	snprintf(magic, sizeof(magic), "%d.%02d", mv / 100, mv % 100);
	if (!strstr(r.out, sqlite3_libversion()))
		fail_msg("--version must mention SQLite %s: %s", sqlite3_libversion(), r.out);
	if (!strstr(r.out, magic))
		fail_msg("--version must mention libmagic %s: %s", magic, r.out);
	if (!strcasestr(r.out, "magic") || !strcasestr(r.out, "sqlite"))
		fail_msg("--version must name libmagic and SQLite: %s", r.out);
	tu_result_free(&r);

	const char *helps[][3] = {{"--help", NULL}, {"walk", "--help", NULL}, {"ls", "--help", NULL}};
	for (size_t i = 0; i < 3; i++) {
		tu_harvestv(&r, NULL, NULL, helps[i]);
		if (r.status != 0 || r.out_len == 0)
			fail_msg("%s %s: exit %d, %zu bytes of help", helps[i][0],
				 helps[i][1] ? helps[i][1] : "", r.status, r.out_len);
		if (i == 1 && (!strstr(r.out, "--max-depth") || !strstr(r.out, "--follow")))
			fail_msg("walk --help must describe its options: %s", r.out);
		tu_result_free(&r);
	}
	/* "harvest help COMMAND" prints what "harvest COMMAND --help" does, byte for byte. */
	const char *pairs[][2][3] = {{{"help", "walk", NULL}, {"walk", "--help", NULL}},
				     {{"--help", "run", NULL}, {"run", "--help", NULL}},
				     {{"-h", "history", NULL}, {"history", "--help", NULL}},
				     {{"help", "help", NULL}, {"--help", NULL, NULL}},
				     {{"help", "--help", NULL}, {"help", NULL, NULL}}};
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		tu_result a, b;
		tu_harvestv(&a, NULL, NULL, pairs[i][0]);
		tu_harvestv(&b, NULL, NULL, pairs[i][1]);
		assert_clean(&a);
		assert_clean(&b);
		if (a.out_len == 0 || a.out_len != b.out_len || memcmp(a.out, b.out, a.out_len) != 0)
			fail_msg("harvest %s %s differs from harvest %s %s: %s", pairs[i][0][0],
				 pairs[i][0][1], pairs[i][1][0],
				 pairs[i][1][1] ? pairs[i][1][1] : "", a.out);
		tu_result_free(&a);
		tu_result_free(&b);
	}
}

/* ---- ls and walk ---- */

/* a/ (x, .h), a-b, a.txt, B, .hidden, b, caf\xc3\xa9, \xff */
static char *make_small_tree(void)
{
	char *root = tu_tmpdir();
	tu_mkdir(root, "a");
	tu_write(root, "a/x", "xx", 2);
	tu_write(root, "a/.h", "h", 1);
	tu_write(root, "a-b", "1", 1);
	tu_write(root, "a.txt", "12", 2);
	tu_write(root, "B", "123", 3);
	tu_write(root, ".hidden", "1234", 4);
	tu_write(root, "b", "", 0);
	tu_write(root, "caf\xc3\xa9", "e", 1);
	tu_write(root, "\xff", "f", 1);
	return root;
}

static void test_ls_vs_walk(void **state)
{
	(void)state;
	char *root = make_small_tree();
	int64_t asize = st_size_of(root, "a");
	tu_result r;
	tu_recs rs;

	/* ls: one JSON array, not recursive, dot-files included, sorted bytewise. */
	tu_harvest(&r, "ls", root, NULL);
	assert_clean(&r);
	size_t lead = strspn(r.out, " \t\r\n");
	assert_int_equal(r.out[lead], '[');
	tu_recs_parse(&rs, r.out, r.out_len, false, "name", false);
	assert_order(&rs, ".hidden|B|a|a-b|a.txt|b|caf\xc3\xa9|\xff");
	assert_rec(&rs, "a", 1, asize);
	assert_rec(&rs, ".hidden", 0, 4);
	assert_rec(&rs, "b", 0, 0);
	assert_absent(&rs, ".");
	assert_absent(&rs, "..");
	assert_absent(&rs, "x");
	tu_recs_free(&rs);
	tu_result_free(&r);

	/* ls --sort none: the same set. */
	hv_recs(&rs, &r, false, "name", false, "ls", "--sort", "none", root, NULL);
	assert_clean(&r);
	assert_int_equal(rs.n, 8);
	assert_rec(&rs, "\xff", 0, 1);
	tu_recs_free(&rs);
	tu_result_free(&r);

	/* walk: jsonl by default, recursive, pre-order sorted within each directory (so "a/x"
	 * comes right after "a", before "a-b", although '-' < '/' bytewise). */
	tu_harvest(&r, "walk", root, NULL);
	assert_clean(&r);
	assert_int_equal(count_char(r.out, r.out_len, '\n'), 10);
	tu_recs_parse(&rs, r.out, r.out_len, true, "path", false);
	assert_order(&rs, ".hidden|B|a|a/.h|a/x|a-b|a.txt|b|caf\xc3\xa9|\xff");
	assert_rec(&rs, "a", 1, asize);
	assert_rec(&rs, "a/x", 0, 2);
	assert_rec(&rs, "a.txt", 0, 2);
	assert_string_equal(tj_str(tj_get(FIND(&rs, "a/x")->obj, "name"), NULL), "x");
	assert_null(tj_get(FIND(&rs, "a/x")->obj, "type")); /* only with --long */
	tu_recs_free(&rs);
	tu_result_free(&r);

}

static void test_max_depth(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_mkdir(root, "a");
	tu_mkdir(root, "a/b");
	tu_mkdir(root, "a/b/c");
	tu_write(root, "a/b/c/f", "", 0);
	tu_write(root, "top", "", 0);
	static const char *const expect[] = {
		"", "a|top", "a|a/b|top", "a|a/b|a/b/c|top", "a|a/b|a/b/c|a/b/c/f|top",
		"a|a/b|a/b/c|a/b/c/f|top",
	};
	for (int d = 0; d <= 5; d++) {
		char ds[32];
		snprintf(ds, sizeof(ds), "%d", d);
		tu_result r;
		tu_recs rs;
		hv_recs(&rs, &r, true, "path", false, "walk", "--max-depth", ds, root, NULL);
		assert_clean(&r);
		assert_order(&rs, expect[d]);
		tu_recs_free(&rs);
		tu_result_free(&r);
		hv_recs(&rs, &r, true, "path", false, "walk", "--max-depth", ds, "--sort", "none",
			"--threads", "4", root, NULL);
		assert_clean(&r);
		assert_int_equal(rs.n, d == 0 ? 0 : (size_t)(d < 4 ? d + 1 : 5));
		tu_recs_free(&rs);
		tu_result_free(&r);
	}
}

static void test_exclude_and_no_hidden(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_mkdir(root, "keep");
	tu_write(root, "keep/f", "", 0);
	tu_write(root, "keep/g.log", "", 0);
	tu_mkdir(root, "skip");
	tu_write(root, "skip/f", "", 0);
	tu_mkdir(root, "skip/deeper");
	tu_write(root, "x.log", "", 0);
	tu_write(root, "y.txt", "", 0);
	tu_mkdir(root, ".hd");
	tu_write(root, ".hd/inner", "", 0);
	tu_write(root, ".hf", "", 0);
	tu_write(root, "keep/.hf", "", 0);
	tu_result r;
	tu_recs rs;

	/* Globs match the name: "skip" is neither listed nor entered, "*.log" anywhere. */
	hv_recs(&rs, &r, true, "path", false, "walk", "--exclude", "skip", "--exclude", "*.log",
		root, NULL);
	assert_clean(&r);
	assert_order(&rs, ".hd|.hd/inner|.hf|keep|keep/.hf|keep/f|y.txt");
	tu_recs_free(&rs);
	tu_result_free(&r);

	/* A glob with a '/' is matched on the name, so it matches nothing here: said in a
	 * warning (which does not change the exit status). */
	hv_recs(&rs, &r, true, "path", false, "walk", "--exclude", "keep/f", "--exclude", "s?ip",
		root, NULL);
	assert_int_equal(r.status, 0);
	if (!strstr(r.err, "'keep/f'") || !strstr(r.err, "never contain '/'") ||
	    count_char(r.err, r.err_len, '\n') != 1)
		fail_msg("one warning about --exclude keep/f expected, stderr: %s", r.err);
	assert_non_null(FIND(&rs, "keep/f"));
	assert_absent(&rs, "skip");
	assert_absent(&rs, "skip/f");
	assert_int_equal(rs.n, 9);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, true, "path", false, "walk", "--no-hidden", root, NULL);
	assert_clean(&r);
	assert_order(&rs, "keep|keep/f|keep/g.log|skip|skip/deeper|skip/f|x.log|y.txt");
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, true, "path", false, "walk", "--no-hidden", "--exclude", "*.log",
		"--sort", "none", "--threads", "4", root, NULL);
	assert_clean(&r);
	assert_int_equal(rs.n, 6);
	assert_absent(&rs, ".hd/inner");
	assert_absent(&rs, "keep/g.log");
	tu_recs_free(&rs);
	tu_result_free(&r);

}

static void test_max_entries(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	for (int i = 0; i < 10; i++) {
		char n[32];
		snprintf(n, sizeof(n), "f%d", i);
		tu_write(root, n, "", 0);
	}
	tu_mkdir(root, "d");
	for (int i = 0; i < 10; i++) {
		char n[32];
		snprintf(n, sizeof(n), "d/g%d", i);
		tu_write(root, n, "", 0);
	}
	tu_result r;
	tu_recs rs;
	hv_recs(&rs, &r, true, "path", false, "walk", "--max-entries", "3", root, NULL);
	assert_order(&rs, "d|d/g0|d/g1");
	if (r.status != 1 || r.err_len == 0)
		fail_msg("--max-entries reached: exit %d (expected 1), stderr: %s", r.status, r.err);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, true, "path", false, "walk", "--max-entries", "5", "--sort", "none",
		"--threads", "4", root, NULL);
	assert_int_equal(rs.n, 5);
	assert_int_equal(r.status, 1);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, false, "path", false, "walk", "--max-entries", "3", "--format", "json",
		root, NULL);
	assert_int_equal(rs.n, 3); /* still one valid document */
	assert_int_equal(r.status, 1);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, true, "path", false, "walk", "--max-entries", "100", root, NULL);
	assert_clean(&r);
	assert_int_equal(rs.n, 21);
	tu_recs_free(&rs);
	tu_result_free(&r);

}

/* Exactly N entries and --max-entries N: nothing was left out, so nothing to warn about
 * (exit 1 means the caller did not get all it asked for). */
static void test_max_entries_exact(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_write(root, "a", "", 0);
	tu_mkdir(root, "d");
	tu_write(root, "d/b", "", 0);
	tu_result r;
	tu_recs rs;
	hv_recs(&rs, &r, true, "path", false, "walk", "--max-entries", "3", root, NULL);
	assert_order(&rs, "a|d|d/b");
	if (r.status != 0 || r.err_len != 0)
		fail_msg("--max-entries 3 on exactly 3 entries: exit %d (expected 0), stderr: %s",
			 r.status, r.err);
	tu_recs_free(&rs);
	tu_result_free(&r);
}

static void test_xdev(void **state)
{
	(void)state;
	char *root = make_small_tree();
	tu_mkdir(root, "mnt");
	tu_result r1, r2;
	tu_harvest(&r1, "walk", root, NULL);
	tu_harvest(&r2, "walk", "--xdev", root, NULL);
	assert_clean(&r1);
	assert_clean(&r2);
	assert_int_equal(r1.out_len, r2.out_len);
	assert_memory_equal(r1.out, r2.out, r1.out_len);
	tu_result_free(&r1);
	tu_result_free(&r2);

	/* Where a mount is allowed (root with CAP_SYS_ADMIN), a real second file system. */
	char *mnt = tu_path(root, "mnt");
	if (mount("harvest-test", mnt, "tmpfs", 0, "size=1m") == 0) {
		tu_cleanup_umount(mnt);
		tu_write(root, "mnt/inside", "i", 1);
		tu_recs rs;
		hv_recs(&rs, &r1, true, "path", false, "walk", "--xdev", root, NULL);
		assert_clean(&r1);
		assert_non_null(FIND(&rs, "mnt")); /* the mount point is listed, not entered */
		assert_absent(&rs, "mnt/inside");
		assert_non_null(FIND(&rs, "a/x"));
		tu_recs_free(&rs);
		tu_result_free(&r1);
		hv_recs(&rs, &r1, true, "path", false, "walk", root, NULL);
		assert_clean(&r1);
		assert_rec(&rs, "mnt/inside", 0, 1);
		tu_recs_free(&rs);
		tu_result_free(&r1);
		umount2(mnt, MNT_DETACH);
	} else {
		print_message("[   INFO   ] --xdev across a mount not checked: mount: %s\n",
			      strerror(errno));
	}
	free(mnt);
}

/* A file dated after 2262 (past what nanoseconds in an int64 reach: `touch -d 2300-01-01`, as
 * untrusted code may) is shown with its own date by --long, in JSON and text, not 2262's. */
static void test_long_far_future(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_write(root, "far", "x", 1);
	char *f = tu_path(root, "far");
	tu_make_far_future(f);
	tu_result r;
	tu_harvest(&r, "ls", "--long", root, NULL);
	assert_clean(&r);
	if (!strstr(r.out, "\"mtime\":\"2300-01-01T00:00:00.500000000Z\""))
		fail_msg("ls --long: %s", r.out);
	tu_result_free(&r);
	tu_harvest(&r, "walk", "--long", "--format", "text", root, NULL);
	assert_clean(&r);
	if (!strstr(r.out, " 2300-01-01T00:00:00.500000000Z far\n"))
		fail_msg("walk --long --format text: %s", r.out);
	tu_result_free(&r);
	free(f);
}

static void test_long(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_write(root, "f", "hello", 5);
	tu_mkdir(root, "d");
	mklink(root, "f", "l");
	mkfifo_at(root, "p", 0600);
	char *f = tu_path(root, "f"), *d = tu_path(root, "d"), *l = tu_path(root, "l");
	assert_int_equal(chmod(f, 0640), 0);
	assert_int_equal(chmod(d, 0750), 0);
	struct timespec tf[2] = {{1700000000, 123456789}, {1700000000, 123456789}};
	struct timespec tl[2] = {{1600000000, 5}, {1600000000, 5}};
	struct timespec td[2] = {{1000000000, 999999999}, {1000000000, 999999999}};
	assert_int_equal(utimensat(AT_FDCWD, f, tf, 0), 0);
	assert_int_equal(utimensat(AT_FDCWD, l, tl, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(utimensat(AT_FDCWD, d, td, 0), 0);
	static const struct {
		const char *name, *type, *mode, *mtime, *target;
		int is_dir;
		int64_t size;
	} want[] = {
		{"d", "dir", "0750", "2001-09-09T01:46:40.999999999", NULL, 1, -1},
		{"f", "file", "0640", "2023-11-14T22:13:20.123456789", NULL, 0, 5},
		{"l", "symlink", "0777", "2020-09-13T12:26:40.000000005", "f", 0, 5},
		{"p", "fifo", "0600", NULL, NULL, 0, 0},
	};
	for (int pass = 0; pass < 3; pass++) {
		tu_result r;
		tu_recs rs;
		if (pass == 0)
			hv_recs(&rs, &r, true, "path", false, "walk", "--long", root, NULL);
		else if (pass == 1)
			hv_recs(&rs, &r, true, "path", true, "walk", "--long", "--case", "camel", root,
				NULL);
		else
			hv_recs(&rs, &r, false, "name", false, "ls", "--long", root, NULL);
		assert_clean(&r);
		assert_int_equal(rs.n, 4);
		for (size_t i = 0; i < 4; i++) {
			const tu_rec *rec = FIND(&rs, want[i].name);
			assert_non_null(rec);
			const tj_value *o = rec->obj;
			const char *type = tj_str(tj_get(o, "type"), NULL);
			const char *mode = tj_str(tj_get(o, "mode"), NULL);
			const char *mtime = tj_str(tj_get(o, "mtime"), NULL);
			if (!type || strcmp(type, want[i].type) != 0)
				fail_msg("%s: type %s, expected %s", want[i].name, type ? type : "(none)",
					 want[i].type);
			if (!mode || strcmp(mode, want[i].mode) != 0)
				fail_msg("%s: mode %s, expected %s", want[i].name, mode ? mode : "(none)",
					 want[i].mode);
			assert_non_null(mtime);
			if (want[i].mtime) {
				size_t k = strlen(want[i].mtime);
				if (strncmp(mtime, want[i].mtime, k) != 0 ||
				    (strcmp(mtime + k, "Z") != 0 && strcmp(mtime + k, "+00:00") != 0))
					fail_msg("%s: mtime %s, expected %sZ", want[i].name, mtime,
						 want[i].mtime);
			} else {
				/* YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ */
				assert_true(strlen(mtime) >= 30);
				assert_int_equal(mtime[10], 'T');
				assert_int_equal(mtime[19], '.');
			}
			const tj_value *t = tj_get(o, "target");
			if (want[i].target) {
				const char *ts = tj_str(t, NULL);
				if (!ts || strcmp(ts, want[i].target) != 0)
					fail_msg("%s: target %s, expected %s", want[i].name, ts ? ts : "(none)",
						 want[i].target);
			} else if (t && !tj_is_null(t)) {
				fail_msg("%s: a target on something that is not a symlink", want[i].name);
			}
			assert_int_equal(rec->is_dir, want[i].is_dir);
			if (want[i].size >= 0)
				assert_int_equal(rec->size, want[i].size);
		}
		tu_recs_free(&rs);
		tu_result_free(&r);
	}
	/* The text format spells the mode as ls -l does, the set-id and sticky bits included. */
	tu_write(root, "suid", "", 0);
	tu_write(root, "sgid", "", 0);
	tu_mkdir(root, "tmp");
	tu_mkdir(root, "sticky");
	static const struct {
		const char *name;
		mode_t mode;
		const char *line;
	} sym[] = {
		{"suid", 04755, "\n-rwsr-xr-x "},  {"sgid", 02640, "\n-rw-r-S--- "},
		{"tmp", 01777, "\ndrwxrwxrwt "},   {"sticky", 01754, "\ndrwxr-xr-T "},
		{"d", 0750, "\ndrwxr-x--- "},      {"f", 0640, "\n-rw-r----- "},
		{"l", 0, "\nlrwxrwxrwx "},         {"p", 0600, "\nprw------- "},
	};
	for (size_t i = 0; i < sizeof(sym) / sizeof(sym[0]); i++) {
		char *p = tu_path(root, sym[i].name);
		if (sym[i].mode)
			assert_int_equal(chmod(p, sym[i].mode), 0);
		free(p);
	}
	for (int pass = 0; pass < 2; pass++) {
		tu_result r;
		tu_harvest(&r, pass ? "walk" : "ls", "--long", "--format", "text", root, NULL);
		assert_clean(&r);
		/* a newline before every line, the first one included, so each starts with one */
		size_t n = r.out_len + 2;
		char *text = malloc(n);
		assert_non_null(text);
		snprintf(text, n, "\n%s", r.out);
		for (size_t i = 0; i < sizeof(sym) / sizeof(sym[0]); i++) {
			/* the line of that name: " NAME" then "/" (a directory), " -> " or its end */
			bool found = false;
			for (const char *at = strstr(text, sym[i].line); at && !found;
			     at = strstr(at + 1, sym[i].line)) {
				const char *end = strchr(at + 1, '\n');
				size_t len = end ? (size_t)(end - at) : strlen(at);
				char *line = strndup(at + 1, len - 1);
				assert_non_null(line);
				char tail[64];
				for (int k = 0; k < 3 && !found; k++) {
					snprintf(tail, sizeof(tail), " %s%s", sym[i].name,
						 k == 0 ? "" : k == 1 ? "/" : " -> ");
					size_t tn = strlen(tail), ll = strlen(line);
					found = k < 2 ? ll >= tn && strcmp(line + ll - tn, tail) == 0
						      : strstr(line, tail) != NULL;
				}
				free(line);
			}
			if (!found)
				fail_msg("%s --long --format text: no line '%s...' for %s in:\n%s",
					 pass ? "walk" : "ls", sym[i].line + 1, sym[i].name, r.out);
		}
		free(text);
		tu_result_free(&r);
	}
	free(f);
	free(d);
	free(l);
}

static void test_formats(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_write(root, "a", "1", 1);
	tu_mkdir(root, "b");
	tu_write(root, "b/c", "22", 2);
	tu_write(root, "b/d e", "333", 3);
	tu_result r;
	tu_recs rs;

	const char *order = "a|b|b/c|b/d e";
	hv_recs(&rs, &r, true, "path", false, "walk", "--format", "jsonl", root, NULL);
	assert_clean(&r);
	assert_order(&rs, order);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, false, "path", false, "walk", "--format", "json", root, NULL);
	assert_clean(&r);
	assert_order(&rs, order);
	assert_rec(&rs, "b/d e", 0, 3);
	tu_recs_free(&rs);
	tu_result_free(&r);

	hv_recs(&rs, &r, true, "name", false, "ls", "--format", "jsonl", root, NULL);
	assert_clean(&r);
	assert_order(&rs, "a|b");
	tu_recs_free(&rs);
	tu_result_free(&r);

	tu_harvest(&r, "walk", "--format", "nul", root, NULL);
	assert_clean(&r);
	static const char nul_walk[] = "a\0b\0b/c\0b/d e\0";
	assert_int_equal(r.out_len, sizeof(nul_walk) - 1);
	assert_memory_equal(r.out, nul_walk, sizeof(nul_walk) - 1);
	tu_result_free(&r);

	tu_harvest(&r, "ls", "--format", "nul", root, NULL);
	assert_clean(&r);
	assert_int_equal(r.out_len, 4);
	assert_memory_equal(r.out, "a\0b\0", 4);
	tu_result_free(&r);

	/* text is for people: every path is there, a line (at least) each, and it is not JSON. */
	tu_harvest(&r, "walk", "--format", "text", root, NULL);
	assert_clean(&r);
	assert_true(tj_utf8_valid(r.out, r.out_len));
	assert_true(count_char(r.out, r.out_len, '\n') >= 4);
	assert_non_null(strstr(r.out, "b/c"));
	assert_non_null(strstr(r.out, "b/d e"));
	assert_null(strchr(r.out, '{'));
	tu_result_free(&r);

	tu_harvest(&r, "ls", "--format", "text", root, NULL);
	assert_clean(&r);
	assert_true(count_char(r.out, r.out_len, '\n') >= 2);
	assert_null(strstr(r.out, "b/c"));
	tu_result_free(&r);

	/* camel keys */
	hv_recs(&rs, &r, true, "path", true, "walk", "--case", "camel", root, NULL);
	assert_clean(&r);
	assert_non_null(tj_get(FIND(&rs, "b")->obj, "isDir"));
	assert_rec(&rs, "b", 1, st_size_of(root, "b"));
	tu_recs_free(&rs);
	tu_result_free(&r);
	hv_recs(&rs, &r, false, "name", true, "ls", "--case", "camel", root, NULL);
	assert_clean(&r);
	assert_rec(&rs, "a", 0, 1);
	tu_recs_free(&rs);
	tu_result_free(&r);
	hv_recs(&rs, &r, true, "path", false, "walk", "--case", "snake", root, NULL);
	assert_clean(&r);
	assert_non_null(tj_get(FIND(&rs, "b")->obj, "is_dir"));
	tu_recs_free(&rs);
	tu_result_free(&r);

}

/* Runs harvest ARGS with stdout (and, given in, stdin) a pipe set O_NONBLOCK, as Node hands
 * them to its children, read (and written) only after a pause: the output in *out, the exit
 * status returned. */
static int run_nonblocking(const char *const *args, const char *in, char **out, size_t *len)
{
	int op[2], ip[2];
	assert_int_equal(pipe2(op, O_CLOEXEC), 0);
	assert_int_equal(pipe2(ip, O_CLOEXEC), 0);
	assert_int_equal(fcntl(op[1], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(fcntl(ip[0], F_SETFL, O_NONBLOCK), 0);
	const char *argv[32] = {HARVEST_BIN};
	size_t n = 1;
	for (; args[n - 1] && n < 31; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(ip[0], 0);
		dup2(op[1], 1);
		execv(HARVEST_BIN, (char *const *)argv);
		_exit(127);
	}
	close(op[1]);
	close(ip[0]);
	tu_sleep_ms(300); /* harvest meets a full pipe, and an empty one */
	if (in && write(ip[1], in, strlen(in)) != (ssize_t)strlen(in))
		fail_msg("writing stdin: %s", strerror(errno));
	close(ip[1]);
	*out = tu_read_fd(op[0], len);
	close(op[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Output to a non-blocking pipe (Node's) is written whole in every format and as an archive, a
 * list read from a non-blocking stdin is waited for; and a write that fails says why. */
static void test_nonblocking_and_full_stdout(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	enum { FILES = 6000 };
	for (int i = 0; i < FILES; i++) {
		char name[32];
		snprintf(name, sizeof(name), "file-with-a-longer-name-%05d", i);
		tu_write(root, name, "", 0);
	}
	static const char *const fmts[] = {"text", "nul", "jsonl"};
	static const char seps[] = {'\n', '\0', '\n'};
	for (size_t k = 0; k < 3; k++) {
		const char *args[] = {"walk", "--format", fmts[k], root, NULL};
		char *out;
		size_t len;
		int st = run_nonblocking(args, NULL, &out, &len);
		if (st != 0 || count_char(out, len, seps[k]) != FILES)
			fail_msg("--format %s: exit %d, %zu separators in %zu bytes", fmts[k], st,
				 count_char(out, len, seps[k]), len);
		free(out);
	}
	/* An archive streamed to such a pipe too: a tar header per file, the whole of it. */
	{
		const char *args[] = {"archive", root, NULL};
		char *out;
		size_t len;
		int st = run_nonblocking(args, NULL, &out, &len);
		if (st != 0 || len < (size_t)FILES * 512)
			fail_msg("archive: exit %d, %zu bytes", st, len);
		free(out);
	}
	char *db = tu_path(root, "h.db"), *list = NULL;
	assert_true(asprintf(&list, "%s/file-with-a-longer-name-00001\n", root) > 0);
	const char *mime[] = {"mime", "--db", db, "-f", "-", NULL};
	char *out;
	size_t len;
	assert_int_equal(run_nonblocking(mime, list, &out, &len), 0);
	assert_non_null(strstr(out, "\"mime_type\":\"inode/x-empty\""));
	free(out);
	free(list);
	free(db);
	for (size_t k = 0; k < 2; k++) {
		const char *argv[] = {"sh", "-c", "exec \"$@\" > /dev/full", "sh", HARVEST_BIN, "ls",
				      "--format", fmts[k], root, NULL};
		tu_result r;
		tu_run(&r, NULL, NULL, (char *const *)argv);
		assert_int_equal(r.status, 1);
		assert_non_null(strstr(r.err, "harvest: standard output: No space left on device\n"));
		tu_result_free(&r);
	}
	/* A write that fails ends the walk: a warning that the rest of the tree would give (a
	 * link back to an ancestor, under --follow, after the files in name order) never comes,
	 * and the write error is said once. */
	char *zz = tu_path(root, "zz"), *loop = tu_path(root, "zz/loop");
	assert_int_equal(mkdir(zz, 0755), 0);
	assert_int_equal(symlink("..", loop), 0);
	for (size_t k = 0; k < 3; k++) {
		const char *argv[] = {"sh", "-c", "exec \"$@\" > /dev/full", "sh", HARVEST_BIN, "walk",
				      "--follow", "--format", fmts[k], root, NULL};
		tu_result r;
		tu_run(&r, NULL, NULL, (char *const *)argv);
		if (r.status != 1 || strstr(r.err, "leads back") ||
		    !strstr(r.err, "No space left on device") ||
		    strstr(strstr(r.err, "No space left on device") + 1, "No space left on device"))
			fail_msg("walk --format %s > /dev/full: exit %d, stderr: %s", fmts[k], r.status,
				 r.err);
		tu_result_free(&r);
	}
	free(loop);
	free(zz);
}

static void test_option_placement(void **state)
{
	(void)state;
	char *root = make_small_tree();
	tu_result r1, r2;
	tu_harvest(&r1, "walk", "--max-depth", "1", "--format", "json", "--case", "camel", root,
		   NULL);
	tu_harvest(&r2, "walk", root, "--max-depth", "1", "--format", "json", "--case", "camel",
		   NULL);
	assert_clean(&r1);
	assert_clean(&r2);
	assert_true(r1.out_len > 0);
	assert_int_equal(r1.out_len, r2.out_len);
	assert_memory_equal(r1.out, r2.out, r1.out_len);
	tu_result_free(&r1);
	tu_result_free(&r2);
	tu_harvest(&r1, "ls", "--format", "nul", root, NULL);
	tu_harvest(&r2, "ls", root, "--format", "nul", NULL);
	assert_clean(&r2);
	assert_int_equal(r1.out_len, r2.out_len);
	assert_memory_equal(r1.out, r2.out, r1.out_len);
	tu_result_free(&r1);
	tu_result_free(&r2);

	/* "--" ends the options: a directory named like an option. */
	tu_mkdir(root, "--max-depth");
	tu_write(root, "--max-depth/x", "x", 1);
	const char *w[] = {"walk", "--format", "nul", "--", "--max-depth", NULL};
	tu_harvestv(&r1, root, NULL, w);
	assert_clean(&r1);
	assert_int_equal(r1.out_len, 2);
	assert_memory_equal(r1.out, "x\0", 2);
	tu_result_free(&r1);
	const char *l[] = {"ls", "--", "--max-depth", NULL};
	tu_recs rs;
	tu_harvestv(&r1, root, NULL, l);
	assert_clean(&r1);
	tu_recs_parse(&rs, r1.out, r1.out_len, false, "name", false);
	assert_order(&rs, "x");
	tu_recs_free(&rs);
	tu_result_free(&r1);
	/* Without "--" the same words are an option missing its value. */
	const char *bad[] = {"walk", "--max-depth", NULL};
	tu_harvestv(&r1, root, NULL, bad);
	assert_int_equal(r1.status, 2);
	tu_result_free(&r1);

}

static void test_root_symlink_followed(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_mkdir(root, "real");
	tu_write(root, "real/f", "abc", 3);
	tu_mkdir(root, "real/sub");
	mklink(root, "real", "rl");
	mklink(root, "rl", "rl2"); /* a chain of links to the directory */
	char *rl = tu_path(root, "rl"), *rl2 = tu_path(root, "rl2");
	tu_result r;
	tu_recs rs;
	for (int i = 0; i < 2; i++) {
		hv_recs(&rs, &r, true, "path", false, "walk", i ? rl2 : rl, NULL);
		assert_clean(&r);
		assert_order(&rs, "f|sub");
		assert_rec(&rs, "f", 0, 3);
		tu_recs_free(&rs);
		tu_result_free(&r);
		hv_recs(&rs, &r, false, "name", false, "ls", i ? rl2 : rl, NULL);
		assert_clean(&r);
		assert_order(&rs, "f|sub");
		tu_recs_free(&rs);
		tu_result_free(&r);
	}
	/* A root given with a trailing slash or as "." gives the same relative paths. */
	char *slash = malloc(strlen(root) + 7);
	assert_non_null(slash);
	sprintf(slash, "%s/real/", root);
	hv_recs(&rs, &r, true, "path", false, "walk", slash, NULL);
	assert_clean(&r);
	assert_order(&rs, "f|sub");
	tu_recs_free(&rs);
	tu_result_free(&r);
	char *real = tu_path(root, "real");
	const char *dot[] = {"walk", ".", NULL};
	tu_harvestv(&r, real, NULL, dot);
	assert_clean(&r);
	tu_recs_parse(&rs, r.out, r.out_len, true, "path", false);
	assert_order(&rs, "f|sub");
	tu_recs_free(&rs);
	tu_result_free(&r);

	free(real);
	free(slash);
	free(rl);
	free(rl2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_names_exact, tu_cleanup),
		cmocka_unit_test_teardown(test_dangling_and_loop, tu_cleanup),
		cmocka_unit_test_teardown(test_symlink_to_dir, tu_cleanup),
		cmocka_unit_test_teardown(test_follow_ancestor_link, tu_cleanup),
		cmocka_unit_test_teardown(test_follow_mutual_links, tu_cleanup),
		cmocka_unit_test_teardown(test_fifo_and_socket, tu_cleanup),
		cmocka_unit_test_teardown(test_unreadable_dir, tu_cleanup),
		cmocka_unit_test_teardown(test_unsearchable_dir, tu_cleanup),
		cmocka_unit_test_teardown(test_missing_and_file_paths, tu_cleanup),
		cmocka_unit_test_teardown(test_bad_options, tu_cleanup),
		cmocka_unit_test_teardown(test_version_and_help, tu_cleanup),
		cmocka_unit_test_teardown(test_ls_vs_walk, tu_cleanup),
		cmocka_unit_test_teardown(test_max_depth, tu_cleanup),
		cmocka_unit_test_teardown(test_exclude_and_no_hidden, tu_cleanup),
		cmocka_unit_test_teardown(test_max_entries, tu_cleanup),
		cmocka_unit_test_teardown(test_max_entries_exact, tu_cleanup),
		cmocka_unit_test_teardown(test_xdev, tu_cleanup),
		cmocka_unit_test_teardown(test_long, tu_cleanup),
		cmocka_unit_test_teardown(test_long_far_future, tu_cleanup),
		cmocka_unit_test_teardown(test_formats, tu_cleanup),
		cmocka_unit_test_teardown(test_nonblocking_and_full_stdout, tu_cleanup),
		cmocka_unit_test_teardown(test_option_placement, tu_cleanup),
		cmocka_unit_test_teardown(test_root_symlink_followed, tu_cleanup),
	};
	const char *filter = getenv("HV_TEST_FILTER"); /* e.g. HV_TEST_FILTER=test_deep_chain */
	if (filter && *filter)
		cmocka_set_test_filter(filter);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
