/* End-to-end tests of `harvest walk` on big trees and hard conditions: a directory of
 * 100,000 entries; chains of 20,000 and 100,000 directories (deeper than PATH_MAX: built,
 * checked and removed without full paths; progress on a terminal, none on a pipe); a generated
 * tree compared record by record with a reference listing built here independently
 * (opendir/readdir/lstat/stat, memcmp order, pre-order); a walk with 16 descriptors (the fd
 * cache must fall back); and directories swapped for symlinks to outside while walks run.
 * HV_TEST_FILTER=<test name> runs one case. */
#include "testutil.h"
#include "tjson.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void assert_clean(const tu_result *r)
{
	if (r->status != 0 || r->err_len != 0)
		fail_msg("exit status %d (expected 0), stderr: %.500s", r->status, r->err);
}

static const char *show(const char *s, size_t len)
{
	static char buf[400];
	size_t o = 0;
	for (size_t i = 0; i < len && o + 8 < sizeof(buf); i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\\x%02x", c);
	}
	buf[o] = '\0';
	return buf;
}

static int bytes_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	return c ? c : (al > bl) - (al < bl);
}

/* ---- a directory of 100,000 entries ---- */

#define WIDE 100000

static void test_wide_directory(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	for (int i = 0; i < WIDE; i++) {
		char name[16];
		/* Created in a scrambled order, so the directory's own order is not the sorted one. */
		int k = (int)(((long long)i * 7919) % WIDE);
		snprintf(name, sizeof(name), "f%06d", k);
		int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			fail_msg("create %s: %s", name, strerror(errno));
		if (k % 1000 == 0)
			assert_int_equal(write(fd, "abc", 3), 3);
		close(fd);
	}
	close(dfd);

	static const char *const variants[][6] = {
		{"walk", NULL},
		{"walk", "--threads", "1", NULL},
		{"walk", "--sort", "none", NULL},
		{"walk", "--sort", "none", "--threads", "4", NULL},
		/* jsonl: tjson's tj_parse() of one big array costs O(n^2) under ASan (each string
		 * allocates the rest of the input), and the array form is checked on small trees. */
		{"ls", "--format", "jsonl", NULL},
	};
	for (size_t v = 0; v < 5; v++) {
		const char *args[10];
		size_t n = 0;
		for (size_t i = 0; variants[v][i]; i++)
			args[n++] = variants[v][i];
		args[n++] = root;
		args[n] = NULL;
		tu_result r;
		tu_harvestv(&r, NULL, NULL, args);
		assert_clean(&r);
		bool is_ls = v == 4, sorted = v < 2 || is_ls;
		tu_recs rs;
		tu_recs_parse(&rs, r.out, r.out_len, true, is_ls ? "name" : "path", false);
		if (rs.n != WIDE)
			fail_msg("%s %s: %zu records, expected %d", args[0], args[1], rs.n, WIDE);
		unsigned char *seen = calloc(WIDE, 1);
		assert_non_null(seen);
		for (size_t i = 0; i < rs.n; i++) {
			const tu_rec *rec = &rs.v[i];
			if (rec->key_len != 7 || rec->key[0] != 'f')
				fail_msg("unexpected record %s", show(rec->key, rec->key_len));
			int k = atoi(rec->key + 1);
			if (seen[k]++)
				fail_msg("%s listed twice", rec->key);
			if (sorted && k != (int)i)
				fail_msg("record %zu is %s: not sorted", i, rec->key);
			assert_int_equal(rec->is_dir, 0);
			assert_int_equal(rec->size, k % 1000 == 0 ? 3 : 0);
		}
		free(seen);
		tu_recs_free(&rs);
		tu_result_free(&r);
	}
}

/* ---- a chain 20,000 directories deep ---- */

#define DEEP 20000

/* Checks --format nul output of the chain: record k (1-based) is "d" + "/d" * (k-1), then the
 * leaf; returns nothing, fails the test on the first difference. */
static void check_chain_nul(const char *buf, size_t len, bool sorted)
{
	size_t off = 0, k = 0;
	size_t leaf_seen = 0;
	unsigned char *depth_seen = calloc(DEEP + 1, 1);
	assert_non_null(depth_seen);
	while (off < len) {
		const char *p = buf + off;
		const char *z = memchr(p, '\0', len - off);
		if (!z)
			fail_msg("the last path is not NUL-terminated");
		size_t l = (size_t)(z - p);
		k++;
		bool is_leaf = l >= 4 && memcmp(p + l - 4, "leaf", 4) == 0;
		size_t dirs = is_leaf ? (l - 4) / 2 : (l + 1) / 2;
		/* the directory components: "d/d/.../d" */
		size_t dlen = is_leaf ? l - 5 : l;
		if (is_leaf && (l < 5 || p[l - 5] != '/'))
			fail_msg("record %zu: bad leaf path", k);
		if (dlen % 2 != 1)
			fail_msg("record %zu: bad path length %zu", k, l);
		for (size_t i = 0; i < dlen; i++)
			if (p[i] != (i % 2 ? '/' : 'd'))
				fail_msg("record %zu: bad byte at %zu", k, i);
		if (is_leaf) {
			if (dirs != DEEP)
				fail_msg("the leaf is at depth %zu, expected %d", dirs + 1, DEEP + 1);
			leaf_seen++;
		} else {
			if (dirs > DEEP || depth_seen[dirs]++)
				fail_msg("record %zu: depth %zu repeated or too deep", k, dirs);
			if (sorted && dirs != k)
				fail_msg("record %zu is at depth %zu: not pre-order", k, dirs);
		}
		off += l + 1;
	}
	free(depth_seen);
	if (k != DEEP + 1 || leaf_seen != 1)
		fail_msg("%zu records (leaf %zu), expected %d", k, leaf_seen, DEEP + 1);
}

static char *map_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	*len = (size_t)st.st_size;
	char *p = NULL;
	if (*len) {
		p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
		assert_true(p != MAP_FAILED);
	}
	close(fd);
	return p;
}

static void test_deep_chain(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *outdir = tu_tmpdir();
	int fd = tu_deep_dir(root, "d", DEEP);
	tu_write_at(fd, "leaf", 0644, "leaf");
	close(fd);
	assert_true(2 * DEEP > PATH_MAX);

	char *out = tu_path(outdir, "out");
	static const char *const variants[][8] = {
		{"walk", "--format", "nul", NULL},
		{"walk", "--format", "nul", "--sort", "none", "--threads", "4", NULL},
	};
	for (size_t v = 0; v < 2; v++) {
		char *argv[12];
		size_t n = 0;
		argv[n++] = (char *)HARVEST_BIN;
		for (size_t i = 0; variants[v][i]; i++)
			argv[n++] = (char *)variants[v][i];
		argv[n++] = root;
		argv[n] = NULL;
		char *err;
		size_t err_len;
		int status = tu_run_to_file(NULL, argv, out, &err, &err_len);
		if (status != 0 || err_len != 0)
			fail_msg("walk of a 20,000-deep chain: exit %d, stderr: %.500s", status, err);
		free(err);
		size_t len;
		char *buf = map_file(out, &len);
		check_chain_nul(buf, len, v == 0);
		if (buf)
			munmap(buf, len);
	}

	/* The default format: one record a line; the deepest records decode to the right path. */
	{
		char *argv[] = {(char *)HARVEST_BIN, "walk", root, NULL};
		char *err;
		size_t err_len;
		int status = tu_run_to_file(NULL, argv, out, &err, &err_len);
		if (status != 0 || err_len != 0)
			fail_msg("walk (jsonl) of a 20,000-deep chain: exit %d, stderr: %.500s", status,
				 err);
		free(err);
		size_t len;
		char *buf = map_file(out, &len);
		assert_non_null(buf);
		assert_int_equal(buf[len - 1], '\n');
		size_t lines = 0, start = 0, last_dir = 0;
		const char *p = buf;
		for (size_t i = 0; i < len; i++) {
			if (p[i] != '\n')
				continue;
			lines++;
			if (lines == 1 || lines == DEEP || lines == DEEP + 1) {
				tj_value *doc = tj_parse(p + start, i - start);
				if (!doc)
					fail_msg("line %zu is not valid JSON", lines);
				size_t pl;
				const char *path = tj_str(tj_get(doc, "path"), &pl);
				assert_non_null(path);
				bool leaf = lines == DEEP + 1;
				size_t want = leaf ? 2 * DEEP + 4 : 2 * lines - 1;
				if (pl != want)
					fail_msg("line %zu: path of %zu bytes, expected %zu", lines, pl, want);
				if (leaf) {
					assert_memory_equal(path + pl - 5, "/leaf", 5);
					assert_false(tj_bool(tj_get(doc, "is_dir")));
					assert_int_equal(tj_int(tj_get(doc, "size")), 4);
				} else {
					assert_true(tj_bool(tj_get(doc, "is_dir")));
					last_dir = lines;
				}
				tj_free(doc);
			}
			start = i + 1;
		}
		assert_int_equal(lines, DEEP + 1);
		assert_int_equal(last_dir, DEEP);
		munmap(buf, len);
	}
	unlink(out);
	free(out);

	tu_rmrf_deep(root);
	struct stat st;
	if (lstat(root, &st) == 0)
		fail_msg("tu_rmrf_deep left %s behind", root);
}

/* ---- a chain 100,000 directories deep (SPEC 6): ~10 GB of paths, counted as they stream ---- */

#define DEEPEST 100000

struct chain_count {
	uint64_t records, cur_len, max_len;
};

static void count_records(void *ctx, const char *data, size_t n)
{
	struct chain_count *c = ctx;
	while (n > 0) {
		const char *z = memchr(data, '\0', n);
		size_t l = z ? (size_t)(z - data) : n;
		c->cur_len += l;
		if (!z)
			return;
		c->records++;
		if (c->cur_len > c->max_len)
			c->max_len = c->cur_len;
		c->cur_len = 0;
		data += l + 1;
		n -= l + 1;
	}
}

/* Runs argv with stdout to sink (as tu_run_sink does) and stderr on a pseudo-terminal,
 * whose output is returned in *tty (malloc'd). */
static int run_with_tty_stderr(char *const argv[], void (*sink)(void *, const char *, size_t),
			       void *ctx, char **tty, size_t *tty_len)
{
	int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	assert_true(master >= 0);
	assert_int_equal(grantpt(master), 0);
	assert_int_equal(unlockpt(master), 0);
	char *slave_name = ptsname(master);
	assert_non_null(slave_name);
	int slave = open(slave_name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	assert_true(slave >= 0);
	int op[2];
	assert_int_equal(pipe2(op, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		dup2(in, 0);
		dup2(op[1], 1);
		dup2(slave, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(op[1]);
	close(slave);
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	assert_non_null(buf);
	static char chunk[1 << 20];
	int fds[2] = {op[0], master};
	while (fds[0] >= 0) {
		struct pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			fail_msg("poll: %s", strerror(errno));
		}
		if (fds[1] >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(fds[1], chunk, 65536);
			if (n <= 0) { /* EIO once the slave side is closed */
				fds[1] = -1;
			} else {
				while (len + (size_t)n + 1 > cap)
					cap *= 2;
				buf = realloc(buf, cap);
				assert_non_null(buf);
				memcpy(buf + len, chunk, (size_t)n);
				len += (size_t)n;
			}
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(fds[0], chunk, sizeof(chunk));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(fds[0]);
				fds[0] = -1;
			} else {
				sink(ctx, chunk, (size_t)n);
			}
		}
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	/* what the terminal still holds */
	for (;;) {
		struct pollfd p = {master, POLLIN, 0};
		if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
			break;
		ssize_t n = read(master, chunk, 65536);
		if (n <= 0)
			break;
		while (len + (size_t)n + 1 > cap)
			cap *= 2;
		buf = realloc(buf, cap);
		assert_non_null(buf);
		memcpy(buf + len, chunk, (size_t)n);
		len += (size_t)n;
	}
	close(master);
	buf[len] = '\0';
	*tty = buf;
	*tty_len = len;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_chain_100k(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (int i = 0; i < DEEPEST; i++) {
		if (mkdirat(fd, "d", 0755) != 0)
			fail_msg("mkdirat at depth %d: %s", i + 1, strerror(errno));
		int nfd = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		assert_true(nfd >= 0);
		close(fd);
		fd = nfd;
	}
	int lf = openat(fd, "leaf", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(lf >= 0);
	close(lf);
	close(fd);

	char *argv[] = {(char *)HARVEST_BIN, "walk", "--format", "nul", root, NULL};
	struct chain_count c = {0, 0, 0};
	char *err;
	size_t err_len;
	int status = tu_run_sink(NULL, argv, count_records, &c, &err, &err_len);
	if (status != 0 || err_len != 0)
		fail_msg("walk of a 100,000-deep chain: exit %d, stderr: %.500s", status, err);
	free(err);
	assert_int_equal(c.cur_len, 0); /* the last path is NUL-terminated */
	assert_int_equal(c.records, DEEPEST + 1);
	assert_int_equal(c.max_len, 2 * DEEPEST - 1 + 5); /* d/d/.../d/leaf */
	/* That walk takes seconds and its stderr was a pipe: no progress (err_len was 0). Now
	 * with stderr a terminal: progress is shown, and cleared at the end. */
	char *tty_out;
	size_t tty_len;
	memset(&c, 0, sizeof(c));
	status = run_with_tty_stderr(argv, count_records, &c, &tty_out, &tty_len);
	assert_int_equal(status, 0);
	assert_int_equal(c.records, DEEPEST + 1);
	if (!memmem(tty_out, tty_len, "entries", 7))
		fail_msg("no progress (entries, ...) on a terminal during a long walk: \"%.300s\"",
			 tty_out);
	if (memchr(tty_out, '\n', tty_len))
		fail_msg("progress must stay on one line (\\r), got: \"%.300s\"", tty_out);
	static const char *const erase[] = {"\033[K", "\033[0K", "\033[2K", "\033[K\r",
					    "\033[2K\r", "\033[0K\r"};
	bool cleared = false;
	for (size_t i = 0; i < sizeof(erase) / sizeof(erase[0]); i++) {
		size_t l = strlen(erase[i]);
		cleared |= tty_len >= l && memcmp(tty_out + tty_len - l, erase[i], l) == 0;
	}
	if (!cleared)
		fail_msg("the progress line is not cleared at the end: \"...%s\"",
			 show(tty_out + (tty_len > 60 ? tty_len - 60 : 0), tty_len > 60 ? 60 : tty_len));
	free(tty_out);
}

/* ---- a generated tree against an independent reference listing ---- */

static uint64_t rng;

static uint64_t rnd(void)
{
	/* xorshift64*: deterministic for a fixed seed */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 2685821657736338717ULL;
}

static size_t rand_name(char *buf)
{
	static const char plain[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._- ";
	static const char odd[] = "\n\t\"\\\x01\x7f:*?[";
	size_t len = 1 + rnd() % 12, o = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned r = (unsigned)(rnd() % 100);
		if (r < 60)
			buf[o++] = plain[rnd() % (sizeof(plain) - 1)];
		else if (r < 85)
			buf[o++] = (char)(0x80 + rnd() % 128); /* mostly invalid UTF-8 */
		else if (r < 93)
			buf[o++] = '\xc3', buf[o++] = (char)(0x80 + rnd() % 64); /* valid 2-byte */
		else
			buf[o++] = odd[rnd() % (sizeof(odd) - 1)];
	}
	buf[o] = '\0';
	if (strcmp(buf, ".") == 0 || strcmp(buf, "..") == 0)
		buf[0] = 'x';
	return o;
}

#define GEN_TARGET 3000
static size_t gen_count;

static void gen_dir(int dfd, int depth)
{
	size_t n = depth == 0 ? 40 : rnd() % 14;
	for (size_t i = 0; i < n && gen_count < GEN_TARGET; i++) {
		char name[64];
		rand_name(name);
		unsigned kind = (unsigned)(rnd() % 100);
		if (kind < 62) {
			int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			if (fd < 0)
				continue; /* a repeated name */
			size_t size = rnd() % 4 == 0 ? 0 : rnd() % 3000;
			char buf[3000];
			memset(buf, 'x', size);
			assert_true(write(fd, buf, size) == (ssize_t)size);
			close(fd);
		} else if (kind < 90 && depth < 7) {
			if (mkdirat(dfd, name, 0755) != 0)
				continue;
			int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			assert_true(sub >= 0);
			gen_count++;
			gen_dir(sub, depth + 1);
			close(sub);
			continue;
		} else if (kind < 97) {
			static const char *const targets[] = {"..", ".", "nowhere", "../..", "/"};
			unsigned t = (unsigned)(rnd() % 6);
			if (symlinkat(t == 5 ? name : targets[t], dfd, name) != 0) /* 5: a loop */
				continue;
		} else {
			if (mkfifoat(dfd, name, 0644) != 0)
				continue;
		}
		gen_count++;
	}
}

typedef struct ref {
	char *path;
	size_t len;
	int is_dir;
	int64_t size;
} ref;

typedef struct refs {
	ref *v;
	size_t n, cap;
} refs;

static int name_cmp(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	return bytes_cmp(x, strlen(x), y, strlen(y));
}

/* The reference: opendir/readdir, names sorted with memcmp, lstat to decide whether to enter
 * (real directories only), stat for is_dir/size (unknown when it fails), pre-order. */
static void ref_list(const char *abs, const char *rel, refs *out)
{
	DIR *d = opendir(abs);
	if (!d)
		fail_msg("opendir %s: %s", abs, strerror(errno));
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			names = realloc(names, cap * sizeof(*names));
			assert_non_null(names);
		}
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	if (n > 1)
		qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; i < n; i++) {
		char *cabs = tu_path(abs, names[i]);
		char *crel = rel ? tu_path(rel, names[i]) : strdup(names[i]);
		assert_non_null(crel);
		struct stat lst, st;
		assert_int_equal(lstat(cabs, &lst), 0);
		if (out->n == out->cap) {
			out->cap = out->cap ? 2 * out->cap : 1024;
			out->v = realloc(out->v, out->cap * sizeof(*out->v));
			assert_non_null(out->v);
		}
		ref *r = &out->v[out->n++];
		r->path = crel;
		r->len = strlen(crel);
		if (stat(cabs, &st) == 0) {
			r->is_dir = S_ISDIR(st.st_mode);
			r->size = (int64_t)st.st_size;
		} else {
			r->is_dir = TU_NULL;
			r->size = TU_NULL;
		}
		if (S_ISDIR(lst.st_mode))
			ref_list(cabs, crel, out);
		free(cabs);
		free(names[i]);
	}
	free(names);
}

static int ref_cmp(const void *a, const void *b)
{
	const ref *x = a, *y = b;
	return bytes_cmp(x->path, x->len, y->path, y->len);
}

static int rec_cmp(const void *a, const void *b)
{
	const tu_rec *x = a, *y = b;
	return bytes_cmp(x->key, x->key_len, y->key, y->key_len);
}

/* Compares records with the reference entries, in order. */
static void compare(const char *what, const tu_rec *got, size_t n_got, const ref *want,
		    size_t n_want)
{
	size_t n = n_got < n_want ? n_got : n_want;
	for (size_t i = 0; i < n; i++) {
		const tu_rec *g = &got[i];
		const ref *w = &want[i];
		if (g->key_len != w->len || memcmp(g->key, w->path, w->len) != 0) {
			char gs[400];
			snprintf(gs, sizeof(gs), "%s", show(g->key, g->key_len));
			fail_msg("%s: record %zu is \"%s\", expected \"%s\"", what, i, gs,
				 show(w->path, w->len));
		}
		if (g->is_dir != w->is_dir || g->size != w->size)
			fail_msg("%s: \"%s\": is_dir %d size %lld, expected is_dir %d size %lld", what,
				 show(w->path, w->len), g->is_dir, (long long)g->size, w->is_dir,
				 (long long)w->size);
	}
	if (n_got != n_want)
		fail_msg("%s: %zu records, expected %zu", what, n_got, n_want);
}

static bool any_component(const ref *r, bool (*pred)(const char *name, size_t len))
{
	const char *p = r->path, *end = r->path + r->len;
	while (p < end) {
		const char *slash = memchr(p, '/', (size_t)(end - p));
		size_t l = slash ? (size_t)(slash - p) : (size_t)(end - p);
		if (pred(p, l))
			return true;
		p += l + 1;
	}
	return false;
}

static bool is_hidden(const char *name, size_t len)
{
	return len > 0 && name[0] == '.';
}

static bool matches_glob(const char *name, size_t len)
{
	char buf[128];
	assert_true(len < sizeof(buf));
	memcpy(buf, name, len);
	buf[len] = '\0';
	return fnmatch("[a-m]*", buf, 0) == 0;
}

static size_t depth_of(const ref *r)
{
	size_t d = 1;
	for (size_t i = 0; i < r->len; i++)
		d += r->path[i] == '/';
	return d;
}

static void test_reference_tree(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	rng = 0x9E3779B97F4A7C15ULL;
	gen_count = 0;
	gen_dir(dfd, 0);
	/* and a big directory, so parallel readers have something to split */
	assert_int_equal(mkdirat(dfd, "many", 0755), 0);
	int many = openat(dfd, "many", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(many >= 0);
	gen_count = 0;
	for (int i = 0; i < 1500 && gen_count < 1200; i++) {
		char name[64];
		rand_name(name);
		int fd = openat(many, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd >= 0) {
			assert_int_equal(write(fd, name, strlen(name)), (ssize_t)strlen(name));
			close(fd);
			gen_count++;
		}
	}
	close(many);
	close(dfd);

	refs want = {0};
	ref_list(root, NULL, &want);
	print_message("[   INFO   ] reference tree: %zu entries\n", want.n);
	assert_true(want.n >= 3000);

	ref *sorted = malloc(want.n * sizeof(*sorted));
	assert_non_null(sorted);
	memcpy(sorted, want.v, want.n * sizeof(*sorted));
	qsort(sorted, want.n, sizeof(*sorted), ref_cmp);

	static const char *const variants[][8] = {
		{"walk", "--sort", "name", NULL},
		{"walk", "--sort", "name", "--threads", "1", NULL},
		{"walk", "--sort", "name", "--threads", "4", NULL},
		{"walk", NULL},
		{"walk", "--sort", "none", NULL},
		{"walk", "--sort", "none", "--threads", "1", NULL},
		{"walk", "--sort", "none", "--threads", "4", NULL},
		{"walk", "--sort", "name", "--format", "json", "--threads", "4", NULL},
	};
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		const char *args[12];
		size_t n = 0;
		char what[128] = "walk";
		for (size_t i = 0; variants[v][i]; i++) {
			args[n++] = variants[v][i];
			if (i) {
				strncat(what, " ", sizeof(what) - strlen(what) - 1);
				strncat(what, variants[v][i], sizeof(what) - strlen(what) - 1);
			}
		}
		args[n++] = root;
		args[n] = NULL;
		tu_result r;
		tu_harvestv(&r, NULL, NULL, args);
		assert_clean(&r);
		tu_recs rs;
		bool json = v == 7;
		tu_recs_parse(&rs, r.out, r.out_len, !json, "path", false);
		bool unsorted = v >= 4 && v <= 6;
		if (unsorted) {
			if (rs.n > 1)
				qsort(rs.v, rs.n, sizeof(*rs.v), rec_cmp);
			compare(what, rs.v, rs.n, sorted, want.n);
		} else {
			compare(what, rs.v, rs.n, want.v, want.n);
		}
		tu_recs_free(&rs);
		tu_result_free(&r);
	}

	/* --format nul: the raw paths, in the same order. */
	{
		tu_result r;
		tu_harvest(&r, "walk", "--format", "nul", root, NULL);
		assert_clean(&r);
		size_t off = 0, i = 0;
		while (off < r.out_len && i < want.n) {
			size_t l = strnlen(r.out + off, r.out_len - off);
			if (l != want.v[i].len || memcmp(r.out + off, want.v[i].path, l) != 0)
				fail_msg("--format nul: record %zu differs from \"%s\"", i,
					 show(want.v[i].path, want.v[i].len));
			off += l + 1;
			i++;
		}
		assert_int_equal(i, want.n);
		assert_int_equal(off, r.out_len);
		tu_result_free(&r);
	}

	/* ls: the reference's top level. */
	{
		tu_result r;
		tu_harvest(&r, "ls", root, NULL);
		assert_clean(&r);
		tu_recs rs;
		tu_recs_parse(&rs, r.out, r.out_len, false, "name", false);
		ref *top = malloc(want.n * sizeof(*top));
		assert_non_null(top);
		size_t nt = 0;
		for (size_t i = 0; i < want.n; i++)
			if (!memchr(want.v[i].path, '/', want.v[i].len))
				top[nt++] = want.v[i];
		compare("ls", rs.v, rs.n, top, nt);
		free(top);
		tu_recs_free(&rs);
		tu_result_free(&r);
	}

	/* Filters, against the reference filtered the same way. */
	ref *sub = malloc(want.n * sizeof(*sub));
	assert_non_null(sub);
	for (int f = 0; f < 3; f++) {
		size_t ns = 0;
		for (size_t i = 0; i < want.n; i++) {
			const ref *w = &want.v[i];
			bool keep = f == 0   ? depth_of(w) <= 2
				    : f == 1 ? !any_component(w, is_hidden)
					     : !any_component(w, matches_glob);
			if (keep)
				sub[ns++] = *w;
		}
		tu_result r;
		if (f == 0)
			tu_harvest(&r, "walk", "--max-depth", "2", "--threads", "4", root, NULL);
		else if (f == 1)
			tu_harvest(&r, "walk", "--no-hidden", root, NULL);
		else
			tu_harvest(&r, "walk", "--exclude", "[a-m]*", root, NULL);
		assert_clean(&r);
		tu_recs rs;
		tu_recs_parse(&rs, r.out, r.out_len, true, "path", false);
		compare(f == 0 ? "--max-depth 2" : f == 1 ? "--no-hidden" : "--exclude [a-m]*", rs.v,
			rs.n, sub, ns);
		tu_recs_free(&rs);
		tu_result_free(&r);
	}
	free(sub);

	free(sorted);
	for (size_t i = 0; i < want.n; i++)
		free(want.v[i].path);
	free(want.v);
}

/* ---- few descriptors: the walker's directory-fd cache must fall back, not fail ---- */

static void test_fd_limit(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (int i = 0; i < 200; i++) {
		/* at each level: two files and a side directory with files, then the chain goes on */
		static const char *const files[] = {"a", "z", "s/1", "s/2", "s/3"};
		assert_int_equal(mkdirat(fd, "s", 0755), 0);
		for (size_t k = 0; k < 5; k++) {
			int f = openat(fd, files[k], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			assert_true(f >= 0);
			assert_int_equal(write(f, "x", k % 2), (ssize_t)(k % 2));
			close(f);
		}
		assert_int_equal(mkdirat(fd, "d", 0755), 0);
		int nfd = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		assert_true(nfd >= 0);
		close(fd);
		fd = nfd;
	}
	close(fd);
	refs want = {0};
	ref_list(root, NULL, &want);
	assert_int_equal(want.n, 200 * 7);
	ref *sorted = malloc(want.n * sizeof(*sorted));
	assert_non_null(sorted);
	memcpy(sorted, want.v, want.n * sizeof(*sorted));
	qsort(sorted, want.n, sizeof(*sorted), ref_cmp);

	static const char *const variants[][6] = {
		{"--threads", "1", NULL},
		{"--threads", "4", NULL},
		{"--threads", "4", "--sort", "none", NULL},
	};
	for (size_t v = 0; v < 3; v++) {
		const char *args[16];
		size_t n = 0;
		args[n++] = "walk";
		for (size_t i = 0; variants[v][i]; i++)
			args[n++] = variants[v][i];
		args[n++] = root;
		args[n] = NULL;
		tu_result r;
		tu_harvest_limitedv(&r, "-n 16", args);
		if (r.status != 0 || r.err_len != 0)
			fail_msg("walk %s %s with 16 descriptors: exit %d, stderr: %.500s", variants[v][0],
				 variants[v][1], r.status, r.err);
		tu_recs rs;
		tu_recs_parse(&rs, r.out, r.out_len, true, "path", false);
		if (v == 2) {
			if (rs.n > 1)
				qsort(rs.v, rs.n, sizeof(*rs.v), rec_cmp);
			compare("walk --sort none, 16 descriptors", rs.v, rs.n, sorted, want.n);
		} else {
			compare("walk with 16 descriptors", rs.v, rs.n, want.v, want.n);
		}
		tu_recs_free(&rs);
		tu_result_free(&r);
	}
	free(sorted);
	for (size_t i = 0; i < want.n; i++)
		free(want.v[i].path);
	free(want.v);
}

/* ---- SPEC 6: a directory swapped for a symlink mid-walk does not lead outside the root ---- */

/* Builds base/sub/d1/.../d30, each level with files; the same shape under outside/ but with
 * files named "outside-secret" that must never appear in a walk of base. */
static void make_mirror(const char *top, const char *file)
{
	int fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (int i = 0; i < 30; i++) {
		char name[16];
		for (int k = 0; k < 5; k++) {
			snprintf(name, sizeof(name), "%s%d", file, k);
			int f = openat(fd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
			assert_true(f >= 0);
			close(f);
		}
		snprintf(name, sizeof(name), "d%d", i);
		assert_int_equal(mkdirat(fd, name, 0755), 0);
		int nfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(nfd >= 0);
		close(fd);
		fd = nfd;
	}
	close(fd);
}

static pid_t swapper = -1;

/* Stops the swapper whatever way the test ended, then removes the trees. */
static int swap_teardown(void **state)
{
	if (swapper > 0) {
		kill(swapper, SIGKILL);
		waitpid(swapper, NULL, 0);
		swapper = -1;
	}
	return tu_cleanup(state);
}

static void test_swap_race(void **state)
{
	(void)state;
	char *root = tu_tmpdir(), *outside = tu_tmpdir();
	tu_mkdir(root, "sub");
	char *sub = tu_path(root, "sub"), *away = tu_path(root, "sub.away");
	make_mirror(sub, "in");
	make_mirror(outside, "outside-secret");
	for (int i = 0; i < 40; i++) {
		char name[16];
		snprintf(name, sizeof(name), "top%d", i);
		tu_write(root, name, "", 0);
	}

	swapper = fork();
	assert_true(swapper >= 0);
	if (swapper == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* Swap sub for a symlink to outside and back until killed: ~0.3 ms each way, so a
		 * walk sees the directory when it starts on sub and the link while it descends. */
		struct timespec pause = {0, 300000};
		for (;;) {
			if (rename(sub, away) == 0) {
				if (symlink(outside, sub) == 0) {
					nanosleep(&pause, NULL);
					unlink(sub);
				}
				rename(away, sub);
			}
			nanosleep(&pause, NULL);
		}
	}

	static const char *const variants[][8] = {
		{"--threads", "1", NULL},
		{"--threads", "4", "--sort", "none", NULL},
		{"--threads", "4", NULL},
	};
	double start = 0;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	start = (double)ts.tv_sec + ts.tv_nsec / 1e9;
	size_t runs = 0, warned = 0;
	for (;; runs++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if ((double)ts.tv_sec + ts.tv_nsec / 1e9 - start > 6.0 && runs >= 30)
			break;
		const char *args[16];
		size_t n = 0;
		bool few_fds = runs % 2 == 1; /* evictions: directories are reopened mid-walk */
		args[n++] = "walk";
		for (size_t i = 0; variants[runs % 3][i]; i++)
			args[n++] = variants[runs % 3][i];
		args[n++] = root;
		args[n] = NULL;
		tu_result r;
		if (few_fds)
			tu_harvest_limitedv(&r, "-n 12", args);
		else
			tu_harvestv(&r, NULL, NULL, args);
		if (r.status != 0 && r.status != 1) {
			fail_msg("walk during swaps: exit %d, stderr: %.500s", r.status, r.err);
		}
		warned += r.status == 1;
		if (memmem(r.out, r.out_len, "outside-secret", 14)) {
			fail_msg("walk (%s %s%s) listed an entry from outside the root: a directory "
				 "swapped for a symlink was followed",
				 variants[runs % 3][0], variants[runs % 3][1],
				 few_fds ? ", 12 descriptors" : "");
		}
		tu_recs rs;
		tu_recs_parse(&rs, r.out, r.out_len, true, "path", false);
		tu_recs_free(&rs);
		tu_result_free(&r);
	}
	kill(swapper, SIGKILL);
	waitpid(swapper, NULL, 0);
	swapper = -1;
	/* put sub back where it was if the swapper was killed mid-swap */
	struct stat st;
	if (lstat(sub, &st) == 0 && S_ISLNK(st.st_mode))
		unlink(sub);
	if (lstat(away, &st) == 0)
		rename(away, sub);
	print_message("[   INFO   ] %zu walks during swaps, %zu with a warning\n", runs, warned);
	free(sub);
	free(away);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_reference_tree, tu_cleanup),
		cmocka_unit_test_teardown(test_wide_directory, tu_cleanup),
		cmocka_unit_test_teardown(test_deep_chain, tu_cleanup),
		cmocka_unit_test_teardown(test_fd_limit, tu_cleanup),
		cmocka_unit_test_teardown(test_swap_race, swap_teardown),
		cmocka_unit_test_teardown(test_chain_100k, tu_cleanup),
	};
	const char *filter = getenv("HV_TEST_FILTER"); /* e.g. HV_TEST_FILTER=test_deep_chain */
	if (filter && *filter)
		cmocka_set_test_filter(filter);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
