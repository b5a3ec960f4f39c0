/* End-to-end tests of `harvest mime` (SPEC sections 2 and 5): libmagic's raw answer against
 * file(1) on real files of this machine, the refinement by extension, directories, FIFOs,
 * missing paths, and the MIME cache (its answers, and proof that a hit opens no file). Each
 * case builds its fixture in a fresh temp directory and removes it. */
#include "testutil.h"
#include "tjson.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A 1x1 PNG image. */
static const unsigned char png_bytes[] = {
	0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48,
	0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
	0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78,
	0x9c, 0x63, 0x60, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4,
	0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};

/* ---- helpers ---- */

/* A growing argument vector. */
typedef struct argvec {
	const char **v;
	size_t n, cap;
} argvec;

static void av_add(argvec *a, const char *s)
{
	if (a->n + 2 > a->cap) {
		a->cap = a->cap ? a->cap * 2 : 64;
		a->v = realloc(a->v, a->cap * sizeof(*a->v));
		assert_non_null(a->v);
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

/* One answer of `harvest mime` (jsonl). */
typedef struct answer {
	const char *path;
	const char *mime;
} answer;

/* Parses mime's jsonl output into answers (pointing into *doc); fails unless every line is
 * an object with a string "path" and a string "mime_type". */
static answer *parse_answers(const tu_result *r, tj_value **doc, size_t *n)
{
	*doc = tj_parse_lines(r->out, r->out_len, n);
	if (!*doc && r->out_len)
		fail_msg("mime's output is not valid jsonl:\n%s", r->out);
	answer *a = calloc(*n ? *n : 1, sizeof(*a));
	assert_non_null(a);
	for (size_t i = 0; i < *n; i++) {
		const tj_value *o = tj_at(*doc, i);
		a[i].path = tj_str(tj_get(o, "path"), NULL);
		a[i].mime = tj_str(tj_get(o, "mime_type"), NULL);
		if (!a[i].path || !a[i].mime)
			fail_msg("line %zu lacks a string path or mime_type", i + 1);
		assert_int_equal(tj_len(o), 2);
	}
	return a;
}

/* The mime type answered for path, or NULL when it is not in the answers. */
static const char *answer_for(const answer *a, size_t n, const char *path)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(a[i].path, path) == 0)
			return a[i].mime;
	return NULL;
}

static int count_lines(const char *s, size_t len)
{
	int n = 0;
	for (size_t i = 0; i < len; i++)
		n += s[i] == '\n';
	return n;
}

/* ---- real files against file(1) ---- */

typedef struct pathlist {
	char **v;
	size_t n, cap;
} pathlist;

static pathlist g_found;

static int collect_regular(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag != FTW_F || !S_ISREG(st->st_mode) || access(path, R_OK) != 0)
		return 0;
	for (const char *c = path; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
			return 0; /* one path a line in file(1)'s list: keep names plain */
	if (g_found.n == g_found.cap) {
		g_found.cap = g_found.cap ? g_found.cap * 2 : 1024;
		g_found.v = realloc(g_found.v, g_found.cap * sizeof(*g_found.v));
		assert_non_null(g_found.v);
	}
	g_found.v[g_found.n] = strdup(path);
	assert_non_null(g_found.v[g_found.n]);
	g_found.n++;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Up to per_root regular files of each root, evenly spread over its sorted list: the same
 * pick on every run of this machine. */
static void pick_real_files(pathlist *out, size_t per_root)
{
	static const char *const roots[] = {"/usr/bin", "/usr/lib/x86_64-linux-gnu",
					    "/usr/share/doc", "/etc"};
	memset(out, 0, sizeof(*out));
	for (size_t r = 0; r < sizeof(roots) / sizeof(roots[0]); r++) {
		memset(&g_found, 0, sizeof(g_found));
		nftw(roots[r], collect_regular, 32, FTW_PHYS);
		qsort(g_found.v, g_found.n, sizeof(*g_found.v), cmp_str);
		size_t take = g_found.n < per_root ? g_found.n : per_root;
		for (size_t i = 0; i < g_found.n; i++) {
			bool picked = take > 0 && (i * take) / g_found.n != ((i + 1) * take) / g_found.n;
			if (picked) {
				if (out->n == out->cap) {
					out->cap = out->cap ? out->cap * 2 : 512;
					out->v = realloc(out->v, out->cap * sizeof(*out->v));
					assert_non_null(out->v);
				}
				out->v[out->n++] = g_found.v[i];
			} else {
				free(g_found.v[i]);
			}
		}
		free(g_found.v);
	}
}

static void test_raw_equals_file(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *list = tu_path(root, "list");
	pathlist pl;
	pick_real_files(&pl, 75);
	assert_true(pl.n >= 250);

	/* file(1) once, with the list. */
	FILE *f = fopen(list, "w");
	assert_non_null(f);
	for (size_t i = 0; i < pl.n; i++)
		fprintf(f, "%s\n", pl.v[i]);
	fclose(f);
	tu_result fr;
	char *fargv[] = {"file", "--mime-type", "-b", "-f", list, NULL};
	tu_run(&fr, NULL, NULL, fargv);
	assert_int_equal(fr.status, 0);
	assert_int_equal(count_lines(fr.out, fr.out_len), (int)pl.n);
	char **expect = calloc(pl.n, sizeof(*expect));
	assert_non_null(expect);
	char *line = fr.out;
	for (size_t i = 0; i < pl.n; i++) {
		char *nl = strchr(line, '\n');
		*nl = '\0';
		expect[i] = line;
		line = nl + 1;
	}

	/* harvest once with every path, then again (answers from the cache). */
	argvec av = {0};
	av_add(&av, "mime");
	av_add(&av, "--raw");
	av_add(&av, "--db");
	av_add(&av, db);
	for (size_t i = 0; i < pl.n; i++)
		av_add(&av, pl.v[i]);
	tu_result first = {0};
	for (int pass = 0; pass < 2; pass++) {
		tu_result r;
		tu_harvestv(&r, NULL, NULL, av.v);
		if (r.status != 0)
			fail_msg("pass %d: exit %d, stderr:\n%s", pass, r.status, r.err);
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, pl.n);
		int mismatches = 0;
		for (size_t i = 0; i < n; i++) {
			assert_string_equal(a[i].path, pl.v[i]); /* input order */
			if (strcmp(a[i].mime, expect[i]) != 0) {
				print_error("pass %d: %s: harvest --raw says %s, file(1) says %s\n", pass,
					    pl.v[i], a[i].mime, expect[i]);
				mismatches++;
			}
		}
		assert_int_equal(mismatches, 0);
		free(a);
		tj_free(doc);
		if (pass == 0) {
			first = r;
		} else {
			/* The cached answers are the same, byte for byte. */
			assert_int_equal(r.out_len, first.out_len);
			assert_memory_equal(r.out, first.out, r.out_len);
			tu_result_free(&r);
		}
	}
	tu_result_free(&first);

	/* The refined answers too are the same from the cache as computed. */
	av.v[1] = "--quiet";
	tu_result r1, r2;
	tu_harvestv(&r1, NULL, NULL, av.v);
	tu_harvestv(&r2, NULL, NULL, av.v);
	assert_int_equal(r1.status, 0);
	assert_int_equal(r2.status, 0);
	assert_int_equal(r1.out_len, r2.out_len);
	assert_memory_equal(r1.out, r2.out, r1.out_len);
	assert_int_equal(count_lines(r1.out, r1.out_len), (int)pl.n);
	tu_result_free(&r1);
	tu_result_free(&r2);

	free(av.v);
	free(expect);
	tu_result_free(&fr);
	for (size_t i = 0; i < pl.n; i++)
		free(pl.v[i]);
	free(pl.v);
	free(list);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- refinement by name ---- */

static void test_refinement(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	tu_write(root, "notes.md", "# Notes\n\nSome *text*.\n", 22);
	tu_write(root, "x.txt", png_bytes, sizeof(png_bytes));
	tu_write(root, "a.ipynb", "{\"cells\": [], \"metadata\": {}, \"nbformat\": 4}\n", 45);
	tu_write(root, "data.csv", "name,value\nalpha,1\nbeta,2\n", 26);
	tu_write(root, "plain.txt", "just some words\n", 16);
	static const char *const names[] = {"notes.md", "x.txt", "a.ipynb", "data.csv",
					    "plain.txt"};
	static const char *const refined[] = {"text/markdown", "image/png",
					      "application/x-ipynb+json", "text/csv", "text/plain"};
	static const char *const raw[] = {"text/plain", "image/png", "application/json",
					  "text/csv", "text/plain"};
	char *paths[5];
	for (int i = 0; i < 5; i++)
		paths[i] = tu_path(root, names[i]);
	for (int mode = 0; mode < 3; mode++) {
		/* refined, refined with --no-cache, raw */
		argvec av = {0};
		av_add(&av, "mime");
		av_add(&av, "--db");
		av_add(&av, db);
		if (mode == 1)
			av_add(&av, "--no-cache");
		if (mode == 2)
			av_add(&av, "--raw");
		for (int i = 0; i < 5; i++)
			av_add(&av, paths[i]);
		tu_result r;
		tu_harvestv(&r, NULL, NULL, av.v);
		if (r.status != 0)
			fail_msg("mode %d: exit %d: %s", mode, r.status, r.err);
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, 5);
		for (int i = 0; i < 5; i++) {
			assert_string_equal(a[i].path, paths[i]);
			const char *want = mode == 2 ? raw[i] : refined[i];
			if (strcmp(a[i].mime, want) != 0)
				fail_msg("mode %d: %s: got %s, expected %s", mode, names[i], a[i].mime,
					 want);
		}
		free(a);
		tj_free(doc);
		tu_result_free(&r);
		free(av.v);
	}
	for (int i = 0; i < 5; i++)
		free(paths[i]);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* SPEC 2: "a weak answer (text/plain, application/octet-stream, application/zip, text/xml) is
 * replaced by the extension's type". libmagic answers application/octet-stream for a text file
 * of one byte (as file(1) does): a result.txt holding "1" is still text/plain by its name. */
static void test_refinement_of_octet_stream(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	tu_write(root, "result.txt", "1", 1);
	tu_write(root, "b.csv", "a", 1);
	char *p1 = tu_path(root, "result.txt"), *p2 = tu_path(root, "b.csv");
	for (int raw = 0; raw < 2; raw++) {
		const char *args[] = {"mime", "--no-cache", raw ? "--raw" : "--quiet", p1, p2, NULL};
		tu_result r;
		tu_harvestv(&r, NULL, NULL, args);
		assert_int_equal(r.status, 0);
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, 2);
		if (raw) {
			/* what file(1) says */
			assert_string_equal(a[0].mime, "application/octet-stream");
			assert_string_equal(a[1].mime, "application/octet-stream");
		} else {
			if (strcmp(a[0].mime, "text/plain") != 0 || strcmp(a[1].mime, "text/csv") != 0)
				fail_msg("weak application/octet-stream not refined by the name: "
					 "result.txt -> %s, b.csv -> %s", a[0].mime, a[1].mime);
		}
		free(a);
		tj_free(doc);
		tu_result_free(&r);
	}
	free(p1);
	free(p2);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- a directory argument ---- */

static void test_directory_argument(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	tu_mkdir(root, "tree");
	tu_mkdir(root, "tree/sub");
	tu_mkdir(root, "tree/sub/deeper");
	tu_mkdir(root, "tree/empty");
	tu_write(root, "tree/a.txt", "alpha\n", 6);
	tu_write(root, "tree/sub/b.md", "# b\n", 4);
	tu_write(root, "tree/sub/deeper/c.png", png_bytes, sizeof(png_bytes));
	tu_write(root, "tree/.hidden", "h\n", 2);
	tu_write(root, "tree/zero", "", 0);
	char *fifo = tu_path(root, "tree/sub/pipe");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	char *link = tu_path(root, "tree/link");
	assert_int_equal(symlink("a.txt", link), 0);
	char *tree = tu_path(root, "tree");
	char *other = tu_path(root, "other.md");
	tu_write(root, "other.md", "x\n", 2);

	tu_result r;
	const char *args[] = {"mime", "--db", db, tree, other, NULL};
	tu_run(&r, NULL, NULL,
	       (char *const[]){"timeout", "20", HARVEST_BIN, (char *)args[0], (char *)args[1],
			       (char *)args[2], (char *)args[3], (char *)args[4], NULL});
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	tj_value *doc;
	size_t n;
	answer *a = parse_answers(&r, &doc, &n);
	/* Every regular file below the directory, named DIR/rel, walked as collect walks it
	 * (so no dot-file), and nothing else; then the plain argument. */
	struct {
		const char *rel, *mime;
	} want[] = {
		{"tree/a.txt", "text/plain"},
		{"tree/sub/b.md", "text/markdown"},   {"tree/sub/deeper/c.png", "image/png"},
		{"tree/zero", "inode/x-empty"},       {"other.md", "text/markdown"},
	};
	size_t nwant = sizeof(want) / sizeof(want[0]);
	for (size_t i = 0; i < n; i++)
		print_message("answer: %s %s\n", a[i].path, a[i].mime);
	assert_int_equal(n, nwant);
	for (size_t i = 0; i < nwant; i++) {
		char *p = tu_path(root, want[i].rel);
		const char *got = answer_for(a, n, p);
		if (!got)
			fail_msg("%s is not answered", p);
		assert_string_equal(got, want[i].mime);
		free(p);
	}
	/* The plain argument comes after the directory's files, in input order. */
	assert_string_equal(a[n - 1].path, other);
	free(a);
	tj_free(doc);
	tu_result_free(&r);

	/* As for collect: --include-hidden brings dot-files back, --exclude leaves names out. */
	tu_run(&r, NULL, NULL,
	       (char *const[]){"timeout", "20", HARVEST_BIN, "mime", "--db", db, "--include-hidden",
			       "--exclude", "deeper", tree, NULL});
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	a = parse_answers(&r, &doc, &n);
	char *hidden = tu_path(root, "tree/.hidden"), *png = tu_path(root, "tree/sub/deeper/c.png");
	assert_int_equal(n, 4);
	assert_non_null(answer_for(a, n, hidden));
	assert_string_equal(answer_for(a, n, hidden), "text/plain");
	assert_null(answer_for(a, n, png));
	free(png);
	free(hidden);
	free(a);
	tj_free(doc);
	tu_result_free(&r);

	free(other);
	free(tree);
	free(link);
	free(fifo);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* A directory of DIR swapped for a symlink to elsewhere while mime runs: the walk never follows
 * it, and a file below it is opened through the directory's descriptor, never again by path,
 * so nothing outside DIR is answered. The swap happens once harvest has written its first
 * answers: with thousands of files before sub/, it is then still answering those (its output
 * is far larger than the pipe it blocks on), so a mime that listed the tree first and
 * reopened every file by path afterwards would open out/secret.txt through the new link. */
static void test_directory_swapped_for_symlink(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	tu_mkdir(root, "tree");
	tu_mkdir(root, "tree/sub");
	tu_mkdir(root, "out");
	char name[32];
	for (int i = 0; i < 5000; i++) {
		snprintf(name, sizeof(name), "tree/a%04d.txt", i);
		tu_write(root, name, "text\n", 5);
	}
	tu_write(root, "tree/sub/secret.txt", "inside\n", 7);
	tu_write(root, "out/secret.txt", png_bytes, sizeof(png_bytes));
	char *tree = tu_path(root, "tree");
	char *sub = tu_path(root, "tree/sub");
	char *moved = tu_path(root, "tree/moved");
	char *out = tu_path(root, "out");
	char *errp = tu_path(root, "err");
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int in = open("/dev/null", O_RDONLY);
		if (e < 0 || in < 0 || dup2(in, 0) < 0 || dup2(p[1], 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		close(p[0]);
		execl(HARVEST_BIN, HARVEST_BIN, "mime", "--no-cache", "--threads", "1", tree,
		      (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	FILE *f = fdopen(p[0], "r");
	assert_non_null(f);
	int ch = fgetc(f);
	assert_true(ch != EOF);
	/* harvest is answering the a*.txt files now: swap sub for a link out of the tree. */
	assert_int_equal(rename(sub, moved), 0);
	assert_int_equal(symlink(out, sub), 0);
	size_t cap = 1 << 20, len = 0;
	char *text = malloc(cap);
	assert_non_null(text);
	text[len++] = (char)ch;
	size_t got;
	while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
		len += got;
		if (len + 1 == cap) {
			cap *= 2;
			text = realloc(text, cap);
			assert_non_null(text);
		}
	}
	text[len] = '\0';
	fclose(f);
	int status = tu_wait(pid);
	char *err = tu_read_file(errp, NULL);
	print_message("status %d, stderr: %s\n", status, err ? err : "");
	/* 1 when the walk came to sub/ after the swap: it warns that it is no directory now. */
	if (status != 0) {
		assert_int_equal(status, 1);
		assert_non_null(strstr(err, "/sub"));
	}
	free(err);
	/* Nothing of out/ (a PNG) was answered; the file that was in sub/, if its directory was
	 * already open, is answered as itself. */
	assert_null(strstr(text, "image/png"));
	const char *secret = strstr(text, "/sub/secret.txt\"");
	if (secret)
		assert_non_null(strstr(secret, "\"mime_type\":\"text/plain\""));
	assert_non_null(strstr(text, "/a4999.txt\""));
	free(text);
	free(errp);
	free(out);
	free(moved);
	free(sub);
	free(tree);
	tu_rmrf(root);
	free(root);
}

/* ---- FIFO, missing path ---- */

static void test_fifo_no_hang(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *fifo = tu_path(root, "pipe");
	assert_int_equal(mkfifo(fifo, 0666), 0);
	char *txt = tu_path(root, "t.txt");
	tu_write(root, "t.txt", "text\n", 5);
	for (int nc = 0; nc < 2; nc++) {
		tu_result r;
		char *argv[] = {"timeout", "20", HARVEST_BIN, "mime", "--db", db,
				fifo,      txt,  nc ? "--no-cache" : "--quiet", NULL};
		time_t t0 = time(NULL);
		tu_run(&r, NULL, NULL, argv);
		if (r.status == 124)
			fail_msg("harvest mime hung on a FIFO");
		assert_true(time(NULL) - t0 < 10);
		if (r.status != 0)
			fail_msg("exit %d: %s", r.status, r.err);
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, 2);
		assert_string_equal(a[0].path, fifo);
		assert_string_equal(a[0].mime, "inode/fifo");
		assert_string_equal(a[1].mime, "text/plain");
		free(a);
		tj_free(doc);
		tu_result_free(&r);
	}
	free(txt);
	free(fifo);
	free(db);
	tu_rmrf(root);
	free(root);
}

static void test_missing_path(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *a1 = tu_path(root, "a.md");
	char *missing = tu_path(root, "no-such-file.bin");
	char *b1 = tu_path(root, "b.png");
	tu_write(root, "a.md", "# a\n", 4);
	tu_write(root, "b.png", png_bytes, sizeof(png_bytes));
	for (int nc = 0; nc < 2; nc++) {
		tu_result r;
		const char *args[] = {"mime", "--db", db, a1, missing, b1,
				      nc ? "--no-cache" : "--raw", NULL};
		tu_harvestv(&r, NULL, NULL, args);
		assert_int_equal(r.status, 1);
		/* An error line on stderr naming the path; the others are answered. */
		if (!strstr(r.err, missing))
			fail_msg("stderr does not name the missing path: %s", r.err);
		assert_int_equal(count_lines(r.err, r.err_len), 1);
		assert_non_null(strstr(r.err, "No such file"));
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, 2);
		assert_string_equal(a[0].path, a1);
		assert_string_equal(a[0].mime, nc ? "text/markdown" : "text/plain");
		assert_string_equal(a[1].path, b1);
		assert_string_equal(a[1].mime, "image/png");
		assert_null(strstr(r.out, "no-such-file"));
		free(a);
		tj_free(doc);
		tu_result_free(&r);
	}
	/* Non-regular paths get their inode/ type without being opened: a symlink (not
	 * followed, as file(1) without -L), a dangling one, a character device. */
	char *link = tu_path(root, "link.md"), *dangling = tu_path(root, "dangling");
	assert_int_equal(symlink("b.png", link), 0);
	assert_int_equal(symlink("nowhere", dangling), 0);
	for (int raw = 0; raw < 2; raw++) {
		tu_result r;
		const char *args[] = {"mime", "--db", db, link, dangling, "/dev/null",
				      raw ? "--raw" : "--quiet", NULL};
		tu_harvestv(&r, NULL, NULL, args);
		assert_int_equal(r.status, 0);
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, 3);
		assert_string_equal(a[0].mime, "inode/symlink");
		assert_string_equal(a[1].mime, "inode/symlink");
		assert_string_equal(a[2].mime, "inode/chardevice");
		free(a);
		tj_free(doc);
		tu_result_free(&r);
	}
	free(link);
	free(dangling);
	free(a1);
	free(missing);
	free(b1);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- the cache ---- */

static void chmod_db(const char *db)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
	for (size_t i = 0; i < 4; i++) {
		char p[4096];
		snprintf(p, sizeof(p), "%s%s", db, sfx[i]);
		chmod(p, 0666);
	}
}

/* A cached answer goes to a file's owner by the owner's read bit alone, as the kernel
 * decides: nobody's own 0400 file is answered from the cache, its own 0044 and 0000 files are
 * not (the group and other bits grant the owner nothing), whatever root cached for them. */
static void test_cache_owner_bits(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* the files must be nobody's, cached by root first */
	struct passwd *pw = getpwnam("nobody");
	uid_t uid = pw ? pw->pw_uid : 65534;
	gid_t gid = pw ? pw->pw_gid : 65534;
	char *root = tu_mkdtemp();
	assert_int_equal(chmod(root, 0777), 0);
	char *db = tu_path(root, "h.db");
	static const struct {
		const char *name;
		mode_t mode;
		bool answered;
	} f[] = {{"r.png", 0400, true}, {"go.png", 0044, false}, {"none.png", 0000, false}};
	char *paths[3];
	for (size_t i = 0; i < 3; i++) {
		tu_write(root, f[i].name, png_bytes, sizeof(png_bytes));
		paths[i] = tu_path(root, f[i].name);
		assert_int_equal(chown(paths[i], uid, gid), 0);
		assert_int_equal(chmod(paths[i], f[i].mode), 0);
	}
	struct timespec nap = {2, 300 * 1000 * 1000};
	nanosleep(&nap, NULL); /* more than 2 s old when cached */
	tu_result r;
	const char *args[] = {"mime", "--db", db, paths[0], paths[1], paths[2], NULL};
	tu_harvestv(&r, NULL, NULL, args);
	if (r.status != 0)
		fail_msg("root: exit %d: %s", r.status, r.err);
	tu_result_free(&r);
	chmod_db(db);
	/* Every answer comes from the cache: a worker asked would crash and say so. */
	setenv("HARVEST_TEST_WORKER_FAULT", "1", 1);
	tu_harvest_as_nobody(&r, NULL, args);
	unsetenv("HARVEST_TEST_WORKER_FAULT");
	print_message("as nobody: exit %d\nstdout: %sstderr: %s", r.status, r.out, r.err);
	assert_int_equal(r.status, 1);
	assert_int_equal(count_lines(r.err, r.err_len), 2);
	for (size_t i = 0; i < 3; i++) {
		char line[4200];
		snprintf(line, sizeof(line), "harvest: %s: Permission denied\n", paths[i]);
		bool denied = strstr(r.err, line) != NULL;
		bool answered = strstr(r.out, paths[i]) && strstr(r.out, "image/png");
		if (answered != f[i].answered || denied == f[i].answered)
			fail_msg("%s (mode %04o, nobody's own): answered %d, denied %d; stdout: %s"
				 "stderr: %s",
				 f[i].name, (unsigned)f[i].mode, answered, denied, r.out, r.err);
		free(paths[i]);
	}
	tu_result_free(&r);
	free(db);
	free(root);
}

/* Files old enough to be cached are answered from the cache without libmagic (a worker that
 * would crash on the file is never asked), but only to a caller who could read them: nobody
 * gets "Permission denied" for root's 0600 files, cached or not, as --no-cache gives it; a
 * file too young to be cached goes to libmagic; a rewrite invalidates the cached answer even
 * with the mtime put back. */
static void test_cache_used(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* the files must be someone else's: root's, unreadable to nobody */
	char *root = tu_mkdtemp();
	assert_int_equal(chmod(root, 0777), 0);
	char *db = tu_path(root, "h.db");
	/* Root-owned, mode 0600 from the start (a later chmod would change the ctime, which
	 * rightly invalidates the cached answer). */
	tu_write(root, "old.txt", png_bytes, sizeof(png_bytes)); /* PNG bytes named .txt */
	tu_write(root, "old.md", "# Old\n", 6);
	tu_write(root, "swap.bin", png_bytes, sizeof(png_bytes));
	/* Plain text that makes a worker crash under HARVEST_TEST_WORKER_FAULT=1. */
	tu_write(root, "crash.txt", "HARVEST-TEST-CRASH\n", 19);
	char *crash = tu_path(root, "crash.txt");
	char *old_txt = tu_path(root, "old.txt");
	char *old_md = tu_path(root, "old.md");
	char *swap = tu_path(root, "swap.bin");
	char *young = tu_path(root, "young.txt");
	assert_int_equal(chmod(old_txt, 0600), 0);
	assert_int_equal(chmod(old_md, 0600), 0);
	struct timespec nap = {2, 300 * 1000 * 1000};
	nanosleep(&nap, NULL); /* more than 2 s old when cached */
	tu_write(root, "young.txt", png_bytes, sizeof(png_bytes));
	assert_int_equal(chmod(young, 0600), 0);
	tu_make_young(young);

	/* Root fills the cache. */
	tu_result r;
	const char *args[] = {"mime", "--db", db, old_txt, old_md, young, swap, crash, NULL};
	tu_harvestv(&r, NULL, NULL, args);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	tj_value *doc;
	size_t n;
	answer *a = parse_answers(&r, &doc, &n);
	assert_int_equal(n, 5);
	assert_string_equal(a[0].mime, "image/png");
	assert_string_equal(a[1].mime, "text/markdown");
	assert_string_equal(a[2].mime, "image/png");
	assert_string_equal(a[3].mime, "image/png");
	assert_string_equal(a[4].mime, "text/plain");
	free(a);
	tj_free(doc);
	tu_result_free(&r);
	chmod_db(db);

	/* With workers that crash on crash.txt: the cached answer is given, libmagic never
	 * asked; without the cache the same file crashes its worker (so the switch is on). */
	setenv("HARVEST_TEST_WORKER_FAULT", "1", 1);
	const char *cargs[] = {"mime", "--db", db, crash, NULL};
	tu_harvestv(&r, NULL, NULL, cargs);
	const char *cnargs[] = {"mime", "--no-cache", "--db", db, crash, NULL};
	tu_result rn;
	tu_harvestv(&rn, NULL, NULL, cnargs);
	unsetenv("HARVEST_TEST_WORKER_FAULT");
	if (r.status != 0 || !strstr(r.out, "\"text/plain\""))
		fail_msg("cached, exit %d: %s%s", r.status, r.out, r.err);
	if (rn.status != 1 || !strstr(rn.err, "the libmagic worker was killed by signal"))
		fail_msg("--no-cache, exit %d: %s%s", rn.status, rn.out, rn.err);
	tu_result_free(&r);
	tu_result_free(&rn);

	/* nobody may not read the 0600 files: no answer for any, cached or not, and one
	 * "Permission denied" line naming each, as --no-cache gives below. */
	const char *nargs[] = {"mime", "--db", db, old_txt, old_md, young, NULL};
	tu_harvest_as_nobody(&r, NULL, nargs);
	print_message("as nobody: exit %d\nstdout: %sstderr: %s", r.status, r.out, r.err);
	assert_int_equal(r.status, 1);
	assert_int_equal(r.out_len, 0);
	assert_int_equal(count_lines(r.err, r.err_len), 3);
	const char *denied[] = {old_txt, old_md, young};
	for (size_t i = 0; i < 3; i++) {
		char want[4200];
		snprintf(want, sizeof(want), "harvest: %s: Permission denied\n", denied[i]);
		if (!strstr(r.err, want))
			fail_msg("stderr does not say '%s': %s", want, r.err);
	}
	tu_result_free(&r);
	/* The directory form gives the same: crash.txt (0644) answered, the rest refused. */
	const char *dargs[] = {"mime", "--db", db, root, NULL};
	tu_harvest_as_nobody(&r, NULL, dargs);
	assert_int_equal(r.status, 1);
	a = parse_answers(&r, &doc, &n);
	assert_null(answer_for(a, n, old_txt));
	assert_null(answer_for(a, n, old_md));
	assert_null(answer_for(a, n, young));
	assert_string_equal(answer_for(a, n, crash) ? answer_for(a, n, crash) : "(none)",
			    "text/plain");
	for (size_t i = 0; i < 3; i++)
		if (!strstr(r.err, denied[i]))
			fail_msg("stderr does not name %s: %s", denied[i], r.err);
	free(a);
	tj_free(doc);
	tu_result_free(&r);

	/* --no-cache: every file is opened, and nobody cannot. */
	const char *ncargs[] = {"mime", "--no-cache", "--db", db, old_txt, NULL};
	tu_harvest_as_nobody(&r, NULL, ncargs);
	assert_int_equal(r.status, 1);
	assert_int_equal(r.out_len, 0);
	assert_non_null(strstr(r.err, old_txt));
	assert_non_null(strstr(r.err, "Permission denied"));
	tu_result_free(&r);

	/* A same-size rewrite with the mtime put back (the ctime still moves): the cached
	 * image/png must not be reused for what is now text. */
	struct stat st;
	assert_int_equal(stat(swap, &st), 0);
	char text[sizeof(png_bytes)];
	memset(text, 'z', sizeof(text));
	text[sizeof(text) - 1] = '\n';
	int fd = open(swap, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, text, sizeof(text), 0), (ssize_t)sizeof(text));
	struct timespec times[2] = {st.st_atim, st.st_mtim};
	assert_int_equal(futimens(fd, times), 0);
	close(fd);
	const char *sargs[] = {"mime", "--raw", "--db", db, swap, NULL};
	tu_harvestv(&r, NULL, NULL, sargs);
	assert_int_equal(r.status, 0);
	a = parse_answers(&r, &doc, &n);
	assert_int_equal(n, 1);
	assert_string_equal(a[0].mime, "text/plain");
	free(a);
	tj_free(doc);
	tu_result_free(&r);

	free(old_txt);
	free(old_md);
	free(swap);
	free(young);
	free(crash);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* One content under names whose refinement differs, as hard links of one inode and as copies:
 * cached runs (the first filling the cache, the next answering from it, the last after the
 * names swapped inodes) answer exactly as --no-cache does, name by name. */
static void test_cache_refinement_by_name(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	static const char text[] = "a,b\n1,2\n";
	tu_mkdir(root, "d");
	tu_write(root, "d/data.md", text, sizeof(text) - 1);
	tu_write(root, "d/other.csv", text, sizeof(text) - 1);
	static const char *const names[] = {"data.csv", "data.ts", "DATA", "data.yaml"};
	char *first = tu_path(root, "d/data.md");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char rel[32];
		snprintf(rel, sizeof(rel), "d/%s", names[i]);
		char *p = tu_path(root, rel);
		assert_int_equal(link(first, p), 0);
		free(p);
	}
	struct timespec nap = {2, 300 * 1000 * 1000};
	nanosleep(&nap, NULL); /* more than 2 s old when cached */
	char *dir = tu_path(root, "d");
	const char *cold_args[] = {"mime", "--no-cache", "--format", "text", dir, NULL};
	tu_result cold;
	tu_harvestv(&cold, NULL, NULL, cold_args);
	assert_int_equal(cold.status, 0);
	assert_non_null(strstr(cold.out, "/data.csv: text/csv\n"));
	assert_non_null(strstr(cold.out, "/data.md: text/markdown\n"));
	assert_non_null(strstr(cold.out, "/data.ts: text/x-typescript\n"));
	assert_non_null(strstr(cold.out, "/DATA: text/"));
	const char *args[] = {"mime", "--db", db, "--format", "text", dir, NULL};
	for (int round = 0; round < 3; round++) {
		if (round == 2) {
			/* data.md and other.csv swap inodes: each name's cached refinement is
			 * another inode's now. */
			char *a = tu_path(root, "d/data.md"), *b = tu_path(root, "d/other.csv");
			char *t = tu_path(root, "d/tmp");
			assert_int_equal(rename(a, t), 0);
			assert_int_equal(rename(b, a), 0);
			assert_int_equal(rename(t, b), 0);
			free(a);
			free(b);
			free(t);
		}
		tu_result r;
		tu_harvestv(&r, NULL, NULL, args);
		assert_int_equal(r.status, 0);
		assert_string_equal(r.out, cold.out);
		tu_result_free(&r);
	}
	tu_result_free(&cold);
	free(first);
	free(dir);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- output formats, options, failures ---- */

/* Three files whose answers are known by their bytes and names. */
typedef struct trio {
	char *root, *md, *png, *txt;
} trio;

static void trio_open(trio *t)
{
	t->root = tu_mkdtemp();
	tu_write(t->root, "a.md", "# A\n", 4);
	tu_write(t->root, "b.png", png_bytes, sizeof(png_bytes));
	tu_write(t->root, "c.txt", "plain words\n", 12);
	t->md = tu_path(t->root, "a.md");
	t->png = tu_path(t->root, "b.png");
	t->txt = tu_path(t->root, "c.txt");
}

static void trio_close(trio *t)
{
	tu_rmrf(t->root);
	free(t->root);
	free(t->md);
	free(t->png);
	free(t->txt);
}

/* json is one array of the same objects jsonl gives a line each, in input order; --case camel
 * names the key mimeType; text is "PATH: TYPE" a line; nul is PATH NUL TYPE NUL. */
static void test_output_formats(void **state)
{
	(void)state;
	trio t;
	trio_open(&t);
	const char *const want[][2] = {{t.md, "text/markdown"}, {t.png, "image/png"},
				       {t.txt, "text/plain"}};
	tu_result r;

	const char *json_args[] = {"mime", "--no-cache", "--format", "json", t.md, t.png, t.txt,
				   NULL};
	tu_harvestv(&r, NULL, NULL, json_args);
	assert_int_equal(r.status, 0);
	tj_value *doc = tj_parse(r.out, r.out_len);
	if (!doc)
		fail_msg("--format json is not one JSON document:\n%s", r.out);
	assert_int_equal(tj_type(doc), TJ_ARRAY);
	assert_int_equal(tj_len(doc), 3);
	for (size_t i = 0; i < 3; i++) {
		const tj_value *o = tj_at(doc, i);
		assert_int_equal(tj_len(o), 2);
		assert_string_equal(tj_str(tj_get(o, "path"), NULL), want[i][0]);
		assert_string_equal(tj_str(tj_get(o, "mime_type"), NULL), want[i][1]);
	}
	tj_free(doc);
	tu_result_free(&r);

	const char *camel_args[] = {"mime", "--no-cache", "--case", "camel", t.png, NULL};
	tu_harvestv(&r, NULL, NULL, camel_args);
	assert_int_equal(r.status, 0);
	size_t n;
	doc = tj_parse_lines(r.out, r.out_len, &n);
	assert_non_null(doc);
	assert_int_equal(n, 1);
	assert_string_equal(tj_str(tj_get(tj_at(doc, 0), "mimeType"), NULL), "image/png");
	assert_null(tj_get(tj_at(doc, 0), "mime_type"));
	tj_free(doc);
	tu_result_free(&r);

	const char *text_args[] = {"mime", "--no-cache", "--format", "text", t.md, t.png, t.txt,
				   NULL};
	tu_harvestv(&r, NULL, NULL, text_args);
	assert_int_equal(r.status, 0);
	char expect[4096];
	snprintf(expect, sizeof(expect), "%s: %s\n%s: %s\n%s: %s\n", want[0][0], want[0][1],
		 want[1][0], want[1][1], want[2][0], want[2][1]);
	assert_string_equal(r.out, expect);
	tu_result_free(&r);

	const char *nul_args[] = {"mime", "--no-cache", "--format", "nul", t.md, t.png, t.txt,
				  NULL};
	tu_harvestv(&r, NULL, NULL, nul_args);
	assert_int_equal(r.status, 0);
	size_t off = 0;
	for (size_t i = 0; i < 3; i++) {
		for (int k = 0; k < 2; k++) {
			size_t len = strlen(want[i][k]);
			assert_true(off + len < r.out_len);
			assert_memory_equal(r.out + off, want[i][k], len);
			assert_int_equal(r.out[off + len], '\0');
			off += len + 1;
		}
	}
	assert_int_equal(off, r.out_len);
	tu_result_free(&r);
	trio_close(&t);
}

/* --files-from LIST (-f, as file(1)) and --files0-from LIST: the listed paths are answered
 * after the PATH arguments, in the list's order, empty lines skipped; "-" is standard
 * input; an empty list answers nothing (exit 0); a list that cannot be read, or a list of
 * lines holding a NUL byte, is a usage error (exit 2, one line, nothing on stdout). */
static void test_files_from(void **state)
{
	(void)state;
	trio t;
	trio_open(&t);
	char lines[8192], want[8192];
	snprintf(lines, sizeof(lines), "%s\n\n%s", t.png, t.txt); /* no newline at the end */
	tu_write(t.root, "list", lines, strlen(lines));
	char *list = tu_path(t.root, "list");
	tu_result r;
	const char *a1[] = {"mime", "--no-cache", "--format", "text", t.md, "-f", list, NULL};
	tu_harvestv(&r, NULL, NULL, a1);
	assert_int_equal(r.status, 0);
	snprintf(want, sizeof(want), "%s: text/markdown\n%s: image/png\n%s: text/plain\n", t.md,
		 t.png, t.txt);
	assert_string_equal(r.out, want);
	tu_result_free(&r);

	snprintf(lines, sizeof(lines), "%s\n", t.txt);
	const char *a2[] = {"mime", "--no-cache", "--format", "text", "--files-from", "-", NULL};
	tu_harvestv(&r, NULL, lines, a2);
	assert_int_equal(r.status, 0);
	snprintf(want, sizeof(want), "%s: text/plain\n", t.txt);
	assert_string_equal(r.out, want);
	tu_result_free(&r);

	size_t lp = strlen(t.png), lm = strlen(t.md);
	memcpy(lines, t.png, lp + 1);
	memcpy(lines + lp + 1, t.md, lm + 1);
	tu_write(t.root, "list0", lines, lp + lm + 2);
	char *list0 = tu_path(t.root, "list0");
	const char *a3[] = {"mime", "--no-cache", "--format", "text", "--files0-from", list0, NULL};
	tu_harvestv(&r, NULL, NULL, a3);
	assert_int_equal(r.status, 0);
	snprintf(want, sizeof(want), "%s: image/png\n%s: text/markdown\n", t.png, t.md);
	assert_string_equal(r.out, want);
	tu_result_free(&r);

	tu_write(t.root, "empty", "", 0);
	char *empty = tu_path(t.root, "empty");
	const char *a4[] = {"mime", "--no-cache", "--format", "json", "-f", empty, NULL};
	tu_harvestv(&r, NULL, NULL, a4);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "[]\n");
	tu_result_free(&r);

	char *missing = tu_path(t.root, "missing");
	const char *a5[] = {"mime", "--no-cache", t.md, "-f", missing, NULL};
	tu_harvestv(&r, NULL, NULL, a5);
	assert_int_equal(r.status, 2);
	assert_int_equal(r.out_len, 0);
	assert_int_equal(count_lines(r.err, r.err_len), 1);
	assert_non_null(strstr(r.err, "--files-from"));
	assert_non_null(strstr(r.err, "No such file or directory"));
	tu_result_free(&r);

	const char *a6[] = {"mime", "--no-cache", "-f", list0, NULL};
	tu_harvestv(&r, NULL, NULL, a6);
	assert_int_equal(r.status, 2);
	assert_int_equal(r.out_len, 0);
	assert_int_equal(count_lines(r.err, r.err_len), 1);
	assert_non_null(strstr(r.err, "a NUL byte"));
	tu_result_free(&r);
	/* An endless list of NULs as lines is refused at its first read, not read to its end
	 * (it has none: this test would never finish). */
	const char *a6z[] = {"mime", "--no-cache", "-f", "/dev/zero", NULL};
	tu_harvestv(&r, NULL, NULL, a6z);
	assert_int_equal(r.status, 2);
	assert_int_equal(r.out_len, 0);
	assert_non_null(strstr(r.err, "--files-from /dev/zero: a NUL byte"));
	tu_result_free(&r);

	/* A list longer than the first buffer, through a pipe (no size known ahead): the buffer
	 * grows, and every line is answered, the last one without its newline too. */
	{
		enum { LINES = 1500, DOTS = 60 };
		/* The text file's path, long: its directory then "./" DOTS times. */
		char path[4096];
		const char *slash = strrchr(t.txt, '/');
		int at = (int)(slash - t.txt) + 1;
		memcpy(path, t.txt, (size_t)at);
		for (int i = 0; i < DOTS; i++, at += 2)
			memcpy(path + at, "./", 2);
		snprintf(path + at, sizeof(path) - (size_t)at, "%s", slash + 1);
		size_t lt = strlen(path), cap = LINES * (lt + 2) + 1, len = 0;
		char *big = malloc(cap);
		assert_non_null(big);
		for (int i = 0; i < LINES; i++) {
			memcpy(big + len, path, lt);
			len += lt;
			big[len++] = i + 1 < LINES ? '\n' : '\0';
		}
		assert_true(len > 2 * 65536);
		const char *a7[] = {"mime", "--no-cache", "--format", "text", "-f", "-", NULL};
		tu_harvestv(&r, NULL, big, a7);
		assert_int_equal(r.status, 0);
		assert_int_equal(count_lines(r.out, r.out_len), LINES);
		snprintf(want, sizeof(want), "%s: text/plain\n", path);
		assert_int_equal(r.out_len, LINES * strlen(want));
		assert_memory_equal(r.out + r.out_len - strlen(want), want, strlen(want));
		tu_result_free(&r);
		free(big);
	}

	/* A directory as the list: read fails, a usage error naming it. */
	const char *a8[] = {"mime", "--no-cache", "-f", t.root, NULL};
	tu_harvestv(&r, NULL, NULL, a8);
	assert_int_equal(r.status, 2);
	assert_int_equal(r.out_len, 0);
	assert_int_equal(count_lines(r.err, r.err_len), 1);
	assert_non_null(strstr(r.err, "Is a directory"));
	tu_result_free(&r);
	free(list);
	free(list0);
	free(empty);
	free(missing);
	trio_close(&t);
}

/* Usage errors exit 2 with a one-line message naming the problem, print nothing on stdout and
 * create no database; --help prints the usage and exits 0. */
static void test_usage_errors(void **state)
{
	(void)state;
	trio t;
	trio_open(&t);
	char *db = tu_path(t.root, "h.db");
	static const struct {
		const char *opt, *val, *says;
	} bad[] = {
		{NULL, NULL, "missing PATH"},   {"--threads", "0", "--threads"},
		{"--threads", "x", "--threads"}, {"--threads", "1025", "--threads"},
		{"--format", "csv", "csv"},      {"--case", "kebab", "kebab"},
		{"--bogus", NULL, "--bogus"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *args[8];
		size_t k = 0;
		args[k++] = "mime";
		args[k++] = "--db";
		args[k++] = db;
		if (bad[i].opt)
			args[k++] = bad[i].opt;
		if (bad[i].val)
			args[k++] = bad[i].val;
		if (bad[i].opt)
			args[k++] = t.md;
		args[k] = NULL;
		tu_result r;
		tu_harvestv(&r, NULL, NULL, args);
		if (r.status != 2)
			fail_msg("%s %s: exit %d, expected 2", bad[i].opt ? bad[i].opt : "(no path)",
				 bad[i].val ? bad[i].val : "", r.status);
		assert_int_equal(r.out_len, 0);
		assert_int_equal(count_lines(r.err, r.err_len), 1);
		if (!strstr(r.err, bad[i].says))
			fail_msg("the message does not say '%s': %s", bad[i].says, r.err);
		tu_result_free(&r);
	}
	const char *help[] = {"mime", "--db", db, "--help", t.md, NULL};
	tu_result r;
	tu_harvestv(&r, NULL, NULL, help);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "usage: harvest mime"));
	assert_non_null(strstr(r.out, "--raw"));
	assert_null(strstr(r.out, "mime_type")); /* no answer: nothing was examined */
	tu_result_free(&r);
	assert_int_not_equal(access(db, F_OK), 0);
	free(db);
	trio_close(&t);
}

/* Detection runs on several threads, but the answers come in input order, each the same as
 * with one thread. */
static void test_threads_keep_input_order(void **state)
{
	(void)state;
	enum { N = 60 };
	char *root = tu_mkdtemp();
	char *paths[N];
	const char *types[N];
	for (int i = 0; i < N; i++) {
		char name[32];
		/* Names in reverse order of the arguments, so sorting would be noticed. */
		switch (i % 3) {
		case 0:
			snprintf(name, sizeof(name), "f%02d.png", N - i);
			tu_write(root, name, png_bytes, sizeof(png_bytes));
			types[i] = "image/png";
			break;
		case 1:
			snprintf(name, sizeof(name), "f%02d.md", N - i);
			tu_write(root, name, "# T\n", 4);
			types[i] = "text/markdown";
			break;
		default:
			snprintf(name, sizeof(name), "f%02d.txt", N - i);
			tu_write(root, name, "words\n", 6);
			types[i] = "text/plain";
		}
		paths[i] = tu_path(root, name);
	}
	for (int threads = 1; threads <= 4; threads += 3) {
		char tn[8];
		snprintf(tn, sizeof(tn), "%d", threads);
		argvec av = {0};
		av_add(&av, "mime");
		av_add(&av, "--no-cache");
		av_add(&av, "--threads");
		av_add(&av, tn);
		for (int i = 0; i < N; i++)
			av_add(&av, paths[i]);
		tu_result r;
		tu_harvestv(&r, NULL, NULL, av.v);
		if (r.status != 0)
			fail_msg("--threads %d: exit %d: %s", threads, r.status, r.err);
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, N);
		for (int i = 0; i < N; i++) {
			assert_string_equal(a[i].path, paths[i]);
			assert_string_equal(a[i].mime, types[i]);
		}
		free(a);
		tj_free(doc);
		tu_result_free(&r);
		free(av.v);
	}
	/* Threads whose libmagic worker cannot start (the switch: only the first starts, as
	 * under a process limit) leave their files to the one that did: every file answered,
	 * given as arguments and found in a directory. */
	setenv("HARVEST_TEST_MIME_ONE_WORKER", "1", 1);
	for (int dir = 0; dir < 2; dir++) {
		argvec av = {0};
		av_add(&av, "mime");
		av_add(&av, "--no-cache");
		av_add(&av, "--threads");
		av_add(&av, "4");
		for (int i = 0; i < (dir ? 1 : N); i++)
			av_add(&av, dir ? root : paths[i]);
		tu_result r;
		tu_harvestv(&r, NULL, NULL, av.v);
		if (r.status != 0)
			fail_msg("one worker, %s: exit %d: %s", dir ? "a directory" : "arguments",
				 r.status, r.err);
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, N);
		for (size_t k = 0; k < n; k++) {
			int i = 0;
			while (i < N && strcmp(a[k].path, paths[i]) != 0)
				i++;
			assert_true(i < N);
			assert_string_equal(a[k].mime, types[i]);
		}
		free(a);
		tj_free(doc);
		tu_result_free(&r);
		free(av.v);
	}
	unsetenv("HARVEST_TEST_MIME_ONE_WORKER");
	for (int i = 0; i < N; i++)
		free(paths[i]);
	tu_rmrf(root);
	free(root);
}

/* Many file arguments are lstat'ed on several threads, each taking chunks of the list from a
 * shared counter while the calling thread opens the cache: every argument still gets its own
 * lstat's answer, in argument order, whatever thread took it.
 * Missing paths, a FIFO, symlinks (to a file and to a directory, walked as that directory) and
 * a directory argument in the middle of the list, among regular files of three kinds, answer
 * as with one thread (--threads 1, no lstat thread), byte for byte, stderr and status too. */
static void test_many_arguments_lstat_in_slices(void **state)
{
	(void)state;
	enum { N = 1600 };
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	tu_mkdir(root, "d");
	tu_write(root, "d/inner.txt", "inner words\n", 12);
	char *paths[N];
	const char *types[N]; /* NULL: missing; "" a directory's (its one file's answer) */
	for (int i = 0; i < N; i++) {
		char name[32];
		switch (i % 8) {
		case 0:
			snprintf(name, sizeof(name), "missing%04d", i);
			types[i] = NULL;
			break;
		case 1:
			snprintf(name, sizeof(name), "link%04d", i);
			char *l = tu_path(root, name);
			assert_int_equal(symlink("f0002.txt", l), 0);
			free(l);
			types[i] = "inode/symlink";
			break;
		case 2:
			snprintf(name, sizeof(name), "f%04d.txt", i);
			tu_write(root, name, "words\n", 6);
			types[i] = "text/plain";
			break;
		case 3:
			snprintf(name, sizeof(name), "f%04d.md", i);
			tu_write(root, name, "# T\n", 4);
			types[i] = "text/markdown";
			break;
		default:
			snprintf(name, sizeof(name), "f%04d.png", i);
			tu_write(root, name, png_bytes, sizeof(png_bytes));
			types[i] = "image/png";
		}
		paths[i] = tu_path(root, name);
	}
	/* A FIFO, a directory and a symlink to it, near the middle: another slice's. */
	free(paths[801]);
	paths[801] = tu_path(root, "pipe");
	assert_int_equal(mkfifo(paths[801], 0666), 0);
	types[801] = "inode/fifo";
	free(paths[805]);
	paths[805] = tu_path(root, "d");
	types[805] = "";
	free(paths[806]);
	paths[806] = tu_path(root, "dlink");
	assert_int_equal(symlink("d", paths[806]), 0);
	types[806] = "";
	tu_result r[2];
	for (int k = 0; k < 2; k++) {
		argvec av = {0};
		av_add(&av, "mime");
		av_add(&av, "--db");
		av_add(&av, db);
		av_add(&av, "--threads");
		av_add(&av, k ? "4" : "1");
		for (int i = 0; i < N; i++)
			av_add(&av, paths[i]);
		tu_harvestv(&r[k], NULL, NULL, av.v);
		free(av.v);
	}
	assert_int_equal(r[1].status, 1); /* the missing paths */
	assert_int_equal(r[0].status, r[1].status);
	assert_string_equal(r[0].out, r[1].out);
	assert_string_equal(r[0].err, r[1].err);
	assert_int_equal(count_lines(r[1].err, r[1].err_len), N / 8);
	tj_value *doc;
	size_t n;
	answer *a = parse_answers(&r[1], &doc, &n);
	assert_int_equal(n, N - N / 8);
	size_t j = 0;
	for (int i = 0; i < N; i++) {
		if (!types[i]) {
			assert_non_null(strstr(r[1].err, paths[i]));
			continue;
		}
		assert_true(j < n);
		if (types[i][0]) {
			assert_string_equal(a[j].path, paths[i]);
			assert_string_equal(a[j].mime, types[i]);
		} else {
			char *inner = tu_path(paths[i], "inner.txt");
			assert_string_equal(a[j].path, inner);
			assert_string_equal(a[j].mime, "text/plain");
			free(inner);
		}
		j++;
	}
	assert_int_equal(j, n);
	free(a);
	tj_free(doc);
	for (int k = 0; k < 2; k++)
		tu_result_free(&r[k]);
	for (int i = 0; i < N; i++)
		free(paths[i]);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* As nobody: a directory argument with an unreadable subdirectory answers the rest and names
 * the subdirectory; an unreadable directory argument is named too; the exit status is 1.
 * --quiet leaves the warning about the subdirectory out, but not the error or the status. */
static void test_unreadable_directories(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	tu_mkdir(root, "tree");
	tu_mkdir(root, "tree/secret");
	tu_mkdir(root, "closed");
	tu_write(root, "tree/a.md", "# A\n", 4);
	tu_write(root, "tree/secret/s.txt", "s\n", 2);
	tu_write(root, "closed/c.txt", "c\n", 2);
	tu_write(root, "z.txt", "z\n", 2);
	tu_write(root, "tree/locked.txt", "l\n", 2);
	char *locked = tu_path(root, "tree/locked.txt");
	assert_int_equal(chmod(locked, 0), 0);
	char *tree = tu_path(root, "tree"), *secret = tu_path(root, "tree/secret");
	char *closed = tu_path(root, "closed"), *z = tu_path(root, "z.txt");
	char *a_md = tu_path(root, "tree/a.md");
	assert_int_equal(chmod(tree, 0755), 0);
	assert_int_equal(chmod(secret, 0), 0);
	assert_int_equal(chmod(closed, 0), 0);
	for (int quiet = 0; quiet < 2; quiet++) {
		const char *args[] = {"mime", "--no-cache", tree, closed, z,
				      quiet ? "--quiet" : NULL, NULL};
		tu_result r;
		tu_harvest_as_nobody(&r, NULL, args);
		assert_int_equal(r.status, 1);
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, 2);
		assert_string_equal(a[0].path, a_md);
		assert_string_equal(a[0].mime, "text/markdown");
		assert_string_equal(a[1].path, z);
		assert_string_equal(a[1].mime, "text/plain");
		/* The argument that cannot be opened is an error, the subdirectory below an
		 * argument a warning; a file below one that cannot be read an error naming it
		 * under the argument, as its answer would. */
		assert_int_equal(count_lines(r.err, r.err_len), quiet ? 2 : 3);
		if (!strstr(r.err, closed))
			fail_msg("stderr does not name %s: %s", closed, r.err);
		char want[4200];
		snprintf(want, sizeof(want), "harvest: %s: Permission denied\n", locked);
		if (!strstr(r.err, want))
			fail_msg("stderr does not name %s: %s", locked, r.err);
		if (quiet ? strstr(r.err, secret) != NULL : strstr(r.err, secret) == NULL)
			fail_msg("--quiet %d, but stderr: %s", quiet, r.err);
		assert_non_null(strstr(r.err, "Permission denied"));
		free(a);
		tj_free(doc);
		tu_result_free(&r);
	}
	assert_int_equal(chmod(secret, 0755), 0);
	assert_int_equal(chmod(closed, 0755), 0);
	free(locked);
	free(a_md);
	free(tree);
	free(secret);
	free(closed);
	free(z);
	tu_rmrf(root);
	free(root);
}

/* A --db that is not a database: the cache is only an optimisation, so mime warns once (the
 * path named), answers every file without the cache and exits 1 (a warning); the file is left
 * untouched. --no-cache never opens the database, so the same --db does not matter then. */
static void test_bad_database(void **state)
{
	(void)state;
	trio t;
	trio_open(&t);
	static const char text[] = "plain text, not a database\n";
	tu_write(t.root, "notdb", text, sizeof(text) - 1);
	char *notdb = tu_path(t.root, "notdb");
	const char *args[] = {"mime", "--db", notdb, t.md, NULL};
	tu_result r;
	tu_harvestv(&r, NULL, NULL, args);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, notdb));
	assert_non_null(strstr(r.err, "without the MIME cache"));
	assert_non_null(memchr(r.err, '\n', r.err_len));
	assert_ptr_equal(memchr(r.err, '\n', r.err_len), r.err + r.err_len - 1); /* one line */
	{
		tj_value *doc0;
		size_t n0;
		answer *a0 = parse_answers(&r, &doc0, &n0);
		assert_int_equal(n0, 1);
		assert_string_equal(a0[0].mime, "text/markdown");
		free(a0);
		tj_free(doc0);
	}
	tu_result_free(&r);
	/* With two paths (two chunks of work), still one warning. --quiet: none, same answers. */
	const char *two[] = {"mime", "--db", notdb, t.md, t.png, NULL};
	tu_harvestv(&r, NULL, NULL, two);
	assert_int_equal(r.status, 1);
	assert_ptr_equal(memchr(r.err, '\n', r.err_len), r.err + r.err_len - 1);
	tu_result_free(&r);
	/* Enough paths for lstat threads: the failed open (on the calling thread, while they
	 * run) still warns once, after which every path is answered. */
	{
		enum { MANY = 1200 };
		const char *many[MANY + 6] = {"mime", "--threads", "2", "--db", notdb};
		for (int i = 0; i < MANY; i++)
			many[5 + i] = t.md;
		tu_harvestv(&r, NULL, NULL, many);
		assert_int_equal(r.status, 1);
		assert_non_null(strstr(r.err, "without the MIME cache"));
		assert_ptr_equal(memchr(r.err, '\n', r.err_len), r.err + r.err_len - 1);
		tj_value *docm;
		size_t nm;
		answer *am = parse_answers(&r, &docm, &nm);
		assert_int_equal(nm, MANY);
		for (size_t i = 0; i < nm; i++)
			assert_string_equal(am[i].mime, "text/markdown");
		free(am);
		tj_free(docm);
		tu_result_free(&r);
	}
	const char *quiet[] = {"mime", "--quiet", "--db", notdb, t.md, NULL};
	tu_harvestv(&r, NULL, NULL, quiet);
	assert_int_equal(r.status, 1);
	assert_int_equal(r.err_len, 0);
	assert_non_null(strstr(r.out, "text/markdown"));
	tu_result_free(&r);
	size_t len;
	char *after = tu_read_file(notdb, &len);
	assert_non_null(after);
	assert_int_equal(len, sizeof(text) - 1);
	assert_memory_equal(after, text, len);
	free(after);

	const char *nc[] = {"mime", "--no-cache", "--db", notdb, t.md, NULL};
	tu_harvestv(&r, NULL, NULL, nc);
	assert_int_equal(r.status, 0);
	tj_value *doc;
	size_t n;
	answer *a = parse_answers(&r, &doc, &n);
	assert_int_equal(n, 1);
	assert_string_equal(a[0].mime, "text/markdown");
	free(a);
	tj_free(doc);
	tu_result_free(&r);
	free(notdb);
	trio_close(&t);
}

/* A part of the magic database list that exists but cannot be read or mapped (here a
 * directory named X.mgc: ENODEV; under `ulimit -v` magic.mgc itself, ENOMEM): libmagic's own
 * load still succeeds on the other parts and would type a PNG as octet-stream with exit 0,
 * and the cache would keep that. harvest fails that load instead: `mime` names the part and
 * exits 1, `collect` types every file octet-stream with one warning and exits 1, in the
 * worker and in process, and nothing is cached. */
static void test_database_part_unreadable(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_mkdir(root, "out");
	tu_mkdir(root, "m");
	tu_mkdir(root, "m/part.mgc");
	char *out = tu_path(root, "out");
	tu_write(out, "pic", png_bytes, sizeof(png_bytes)); /* no extension to refine by */
	char *pic = tu_path(out, "pic");
	char *db = tu_path(root, "h.db");
	struct timespec nap = {2, 300 * 1000 * 1000};
	nanosleep(&nap, NULL); /* old enough to be cached, were an answer given */
	char magic[4200];
	snprintf(magic, sizeof(magic), "%s/m/part:/usr/share/misc/magic", root);
	setenv("MAGIC", magic, 1);
	for (int in_process = 0; in_process < 2; in_process++) {
		if (in_process)
			setenv("HARVEST_BENCH_MIME_IN_PROCESS", "1", 1);
		tu_result r;
		const char *args[] = {"mime", "--raw", "--db", db, pic, NULL};
		tu_harvestv(&r, NULL, NULL, args);
		print_message("mime (in process %d): exit %d\nstdout: %sstderr: %s", in_process,
			      r.status, r.out, r.err);
		assert_int_equal(r.status, 1);
		assert_null(strstr(r.out, "octet-stream"));
		assert_non_null(strstr(r.err, "part.mgc"));
		assert_non_null(strstr(r.err, "No such device"));
		assert_ptr_equal(memchr(r.err, '\n', r.err_len), r.err + r.err_len - 1);
		tu_result_free(&r);
		unsetenv("HARVEST_BENCH_MIME_IN_PROCESS");
	}
	tu_result r;
	const char *cargs[] = {"collect", "--no-content", "--no-history", "--db", db, out, NULL};
	tu_harvestv(&r, NULL, NULL, cargs);
	print_message("collect: exit %d\nstdout: %sstderr: %s", r.status, r.out, r.err);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.out, "\"mime_type\":\"application/octet-stream\""));
	assert_non_null(strstr(r.err, "part.mgc"));
	assert_non_null(strstr(r.err, "every file is typed application/octet-stream"));
	assert_ptr_equal(memchr(r.err, '\n', r.err_len), r.err + r.err_len - 1);
	tu_result_free(&r);
	unsetenv("MAGIC");
	/* Nothing was cached. */
	char *argv[] = {"sqlite3", db, "SELECT count(*) FROM mime_cache", NULL};
	tu_run(&r, NULL, NULL, argv);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "0\n");
	tu_result_free(&r);
	/* A part that is not there is no error, as for file(1). */
	snprintf(magic, sizeof(magic), "%s/m/absent:/usr/share/misc/magic", root);
	setenv("MAGIC", magic, 1);
	const char *aargs[] = {"mime", "--raw", "--no-cache", pic, NULL};
	tu_harvestv(&r, NULL, NULL, aargs);
	unsetenv("MAGIC");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "image/png"));
	tu_result_free(&r);
	free(db);
	free(pic);
	free(out);
}

/* A cache damaged inside (its table's page, found at the first lookup, not at the open): mime
 * warns once, answers every file, as arguments and below a directory, without the cache, and
 * exits 1; the database is not written. */
static void test_damaged_cache(void **state)
{
	(void)state;
	trio t;
	trio_open(&t);
	char *dbdir = tu_mkdtemp();
	char *db = tu_path(dbdir, "h.db");
	tu_result r;
	const char *fill[] = {"mime", "--db", db, t.md, t.png, NULL};
	tu_harvestv(&r, NULL, NULL, fill);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	tu_damage_table(db, "mime_cache");
	size_t len0;
	char *before = tu_read_file(db, &len0);
	assert_non_null(before);
	const char *files[] = {"mime", "--db", db, t.md, t.png, NULL};
	const char *dir[] = {"mime", "--db", db, t.root, NULL};
	const char *const *cases[] = {files, dir};
	for (size_t c = 0; c < 2; c++) {
		tu_harvestv(&r, NULL, NULL, cases[c]);
		if (r.status != 1)
			fail_msg("case %zu: exit %d: %s", c, r.status, r.err);
		assert_non_null(strstr(r.err, "answering without the MIME cache"));
		assert_ptr_equal(memchr(r.err, '\n', r.err_len), r.err + r.err_len - 1);
		tj_value *doc;
		size_t n;
		answer *a = parse_answers(&r, &doc, &n);
		assert_int_equal(n, c == 0 ? 2 : 3);
		assert_string_equal(answer_for(a, n, t.md), "text/markdown");
		assert_string_equal(answer_for(a, n, t.png), "image/png");
		free(a);
		tj_free(doc);
		tu_result_free(&r);
	}
	size_t len1;
	char *after = tu_read_file(db, &len1);
	assert_non_null(after);
	assert_int_equal(len1, len0);
	assert_memory_equal(after, before, len0);
	free(before);
	free(after);
	free(db);
	tu_rmrf(dbdir);
	free(dbdir);
	trio_close(&t);
}

/* Standard output that cannot be written (a full disk): exit 1 with a message, in every
 * format, never a silent success. */
static void test_write_error(void **state)
{
	(void)state;
	if (access("/dev/full", W_OK) != 0)
		skip();
	trio t;
	trio_open(&t);
	static const char *const formats[] = {"jsonl", "json", "text", "nul"};
	for (size_t i = 0; i < 4; i++) {
		char *argv[] = {"sh", "-c", "exec \"$@\" > /dev/full", "sh", HARVEST_BIN, "mime",
				"--no-cache", "--format", (char *)formats[i], t.md, t.png, NULL};
		tu_result r;
		tu_run(&r, NULL, NULL, argv);
		if (r.status != 1)
			fail_msg("--format %s to /dev/full: exit %d", formats[i], r.status);
		if (!strstr(r.err, "standard output"))
			fail_msg("--format %s: no write error on stderr: %s", formats[i], r.err);
		tu_result_free(&r);
	}
	trio_close(&t);
}

/* libmagic's worker crashing on one file: that file is application/octet-stream with a warning
 * naming it, exit 1, and the files after it are answered (by a replacement worker). The crash
 * comes from the test-only switch (a file starting "HARVEST-TEST-CRASH"). */
static void test_worker_crash(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	tu_write(dir, "a.txt", "hello\n", 6);
	tu_write(dir, "bad", "HARVEST-TEST-CRASH\n", 19);
	tu_write(dir, "z.sh", "#!/bin/sh\necho\n", 15);
	char *a = tu_path(dir, "a.txt"), *bad = tu_path(dir, "bad"), *z = tu_path(dir, "z.sh");
	setenv("HARVEST_TEST_WORKER_FAULT", "1", 1);
	tu_result r;
	tu_harvest(&r, "mime", "--no-cache", "--threads", "1", "--raw", a, bad, z, NULL);
	unsetenv("HARVEST_TEST_WORKER_FAULT");
	assert_int_equal(r.status, 1);
	tj_value *doc;
	size_t n;
	answer *got = parse_answers(&r, &doc, &n);
	assert_int_equal(n, 3);
	assert_string_equal(answer_for(got, n, a), "text/plain");
	assert_string_equal(answer_for(got, n, bad), "application/octet-stream");
	assert_string_equal(answer_for(got, n, z), "text/x-shellscript");
	assert_non_null(strstr(r.err, bad));
	assert_non_null(strstr(r.err, "the libmagic worker was killed by signal"));
	assert_int_equal(count_lines(r.err, r.err_len), 1);
	free(got);
	tj_free(doc);
	tu_result_free(&r);
	free(a);
	free(bad);
	free(z);
	tu_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_raw_equals_file),
		cmocka_unit_test(test_worker_crash),
		cmocka_unit_test(test_refinement),
		cmocka_unit_test(test_refinement_of_octet_stream),
		cmocka_unit_test(test_directory_argument),
		cmocka_unit_test(test_directory_swapped_for_symlink),
		cmocka_unit_test(test_fifo_no_hang),
		cmocka_unit_test(test_missing_path),
		cmocka_unit_test(test_many_arguments_lstat_in_slices),
		cmocka_unit_test(test_cache_used),
		cmocka_unit_test(test_cache_owner_bits),
		cmocka_unit_test(test_cache_refinement_by_name),
		cmocka_unit_test(test_output_formats),
		cmocka_unit_test(test_usage_errors),
		cmocka_unit_test(test_threads_keep_input_order),
		cmocka_unit_test(test_unreadable_directories),
		cmocka_unit_test(test_bad_database),
		cmocka_unit_test_teardown(test_database_part_unreadable, tu_cleanup),
		cmocka_unit_test(test_damaged_cache),
		cmocka_unit_test(test_write_error),
		cmocka_unit_test(test_files_from),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
