/* End-to-end tests of `harvest walk` on big trees: a directory of 100,000 entries, a chain of
 * 20,000 directories (deeper than PATH_MAX: built, checked and removed without full paths),
 * and a generated tree compared record by record with a reference listing built here
 * independently (opendir/readdir/lstat/stat, memcmp order, pre-order). */
#include "testutil.h"
#include "tjson.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (int i = 0; i < DEEP; i++) {
		if (mkdirat(fd, "d", 0755) != 0)
			fail_msg("mkdirat at depth %d: %s", i + 1, strerror(errno));
		int nfd = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		assert_true(nfd >= 0);
		close(fd);
		fd = nfd;
	}
	int lf = openat(fd, "leaf", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(lf >= 0);
	assert_int_equal(write(lf, "leaf", 4), 4);
	close(lf);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_reference_tree, tu_cleanup),
		cmocka_unit_test_teardown(test_wide_directory, tu_cleanup),
		cmocka_unit_test_teardown(test_deep_chain, tu_cleanup),
	};
	const char *filter = getenv("HV_TEST_FILTER"); /* e.g. HV_TEST_FILTER=test_deep_chain */
	if (filter && *filter)
		cmocka_set_test_filter(filter);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
