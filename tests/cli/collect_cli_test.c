/* End-to-end tests of `harvest snapshot` and `harvest collect` (SPEC sections 1, 2 "What
 * produced means" and "Collect rules and limits", 3, 5 and 6): every OutputFile field checked
 * against the real bytes (SHA-256 computed here with OpenSSL, base64 decoded here), the
 * produced set after a snapshot, the racy rule, excludes, symlinks, FIFOs, sparse giants,
 * limits, the database's own files, bad databases and permission errors. Each case builds its
 * fixture in a fresh temp directory and removes it. */
#include "testutil.h"
#include "tjson.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <signal.h>
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

static int b64val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Strict standard base64 (with padding) to bytes; fails the test on anything else. */
static unsigned char *b64_decode(const char *s, size_t len, size_t *out_len)
{
	if (len % 4 != 0)
		fail_msg("base64 length %zu is not a multiple of 4", len);
	unsigned char *out = malloc(len / 4 * 3 + 1);
	assert_non_null(out);
	size_t o = 0;
	for (size_t i = 0; i < len; i += 4) {
		int v[4];
		int pad = 0;
		for (int k = 0; k < 4; k++) {
			unsigned char c = (unsigned char)s[i + k];
			if (c == '=' && i + 4 == len && k >= 2) {
				v[k] = 0;
				pad++;
			} else {
				if (pad)
					fail_msg("base64: data after padding");
				v[k] = b64val(c);
				if (v[k] < 0)
					fail_msg("base64: bad character 0x%02x", c);
			}
		}
		unsigned n = ((unsigned)v[0] << 18) | ((unsigned)v[1] << 12) | ((unsigned)v[2] << 6) |
			     (unsigned)v[3];
		out[o++] = (unsigned char)(n >> 16);
		if (pad < 2)
			out[o++] = (unsigned char)(n >> 8);
		if (pad < 1)
			out[o++] = (unsigned char)n;
	}
	*out_len = o;
	return out;
}

static const char b64chars[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *d, size_t len)
{
	char *out = malloc((len + 2) / 3 * 4 + 1);
	assert_non_null(out);
	size_t o = 0;
	for (size_t i = 0; i < len; i += 3) {
		unsigned n = (unsigned)d[i] << 16;
		if (i + 1 < len)
			n |= (unsigned)d[i + 1] << 8;
		if (i + 2 < len)
			n |= d[i + 2];
		out[o++] = b64chars[(n >> 18) & 63];
		out[o++] = b64chars[(n >> 12) & 63];
		out[o++] = i + 1 < len ? b64chars[(n >> 6) & 63] : '=';
		out[o++] = i + 2 < len ? b64chars[n & 63] : '=';
	}
	out[o] = '\0';
	return out;
}

/* Runs harvest with args (NULL-terminated, without argv[0]) and parses stdout as one JSON
 * document of collect's shape; *doc is NULL when stdout is empty. */
static void run_json(tu_result *r, tj_value **doc, const char *const *args)
{
	tu_harvestv(r, NULL, NULL, args);
	*doc = NULL;
	if (r->out_len == 0)
		return;
	*doc = tj_parse(r->out, r->out_len);
	if (!*doc)
		fail_msg("output is not one valid JSON document:\n%s\nstderr: %s", r->out, r->err);
	assert_int_equal(tj_type(*doc), TJ_OBJECT);
}

/* collect --db db d, which must succeed. */
static void collect_ok(const char *db, const char *d)
{
	tu_result r;
	tj_value *doc;
	const char *args[] = {"collect", "--db", db, d, NULL};
	run_json(&r, &doc, args);
	if (r.status != 0)
		fail_msg("collect %s: exit %d: %s", d, r.status, r.err);
	tj_free(doc);
	tu_result_free(&r);
}

static void collect_shape(const tj_value *doc)
{
	assert_int_equal(tj_type(tj_get(doc, "output_files")), TJ_ARRAY);
	assert_int_equal(tj_type(tj_get(doc, "skipped")), TJ_ARRAY);
	const tj_value *rid = tj_get(doc, "run_id");
	assert_non_null(rid);
	assert_true(tj_is_null(rid) || (tj_type(rid) == TJ_INT && tj_int(rid) > 0));
}

/* The output file (or skipped entry) of list whose "path" is exactly these bytes. */
static const tj_value *find_path(const tj_value *doc, const char *list, const char *path,
				 size_t path_len)
{
	const tj_value *a = tj_get(doc, list);
	for (size_t i = 0; i < tj_len(a); i++) {
		size_t len;
		const char *p = tj_str(tj_get(tj_at(a, i), "path"), &len);
		if (p && len == path_len && memcmp(p, path, len) == 0)
			return tj_at(a, i);
	}
	return NULL;
}

static const tj_value *of_find(const tj_value *doc, const char *path)
{
	return find_path(doc, "output_files", path, strlen(path));
}

static const tj_value *skipped_find(const tj_value *doc, const char *path)
{
	return find_path(doc, "skipped", path, strlen(path));
}

/* Fails unless the output files' paths are exactly the '|'-separated list (any order). */
static void assert_paths(const tj_value *doc, const char *expect)
{
	const tj_value *a = tj_get(doc, "output_files");
	size_t want = 0;
	char *copy = strdup(expect);
	assert_non_null(copy);
	char *save = NULL;
	for (char *p = strtok_r(copy, "|", &save); p; p = strtok_r(NULL, "|", &save)) {
		want++;
		if (!of_find(doc, p))
			fail_msg("%s is not in output_files", p);
	}
	free(copy);
	if (tj_len(a) != want) {
		for (size_t i = 0; i < tj_len(a); i++)
			print_error("output file: %s\n", tj_str(tj_get(tj_at(a, i), "path"), NULL));
		fail_msg("%zu output files, expected %zu (%s)", tj_len(a), want, expect);
	}
}

/* Checks one OutputFile against the file root/rel: every field, exactly. */
static void check_output_file(const tj_value *of, const char *root, const char *rel,
			      size_t rel_len, const char *mime, bool with_content)
{
	if (!of)
		fail_msg("no output file for %.*s", (int)rel_len, rel);
	char relz[4096];
	memcpy(relz, rel, rel_len);
	relz[rel_len] = '\0';
	char *full = tu_path(root, relz);
	size_t flen;
	char *bytes = tu_read_file(full, &flen);
	assert_non_null(bytes);
	/* Against a snapshot, a seventh member says how the file changed. */
	const tj_value *change = tj_get(of, "change");
	if (change) {
		const char *cv = tj_str(change, NULL);
		assert_non_null(cv);
		assert_true(!strcmp(cv, "created") || !strcmp(cv, "modified"));
	}
	assert_int_equal(tj_len(of), change ? 7 : 6);
	const char *base = strrchr(relz, '/');
	base = base ? base + 1 : relz;
	size_t len;
	const char *name = tj_str(tj_get(of, "name"), &len);
	assert_non_null(name);
	assert_int_equal(len, strlen(base));
	assert_memory_equal(name, base, len);
	const char *path = tj_str(tj_get(of, "path"), &len);
	assert_non_null(path);
	assert_int_equal(len, rel_len);
	assert_memory_equal(path, rel, len);
	const char *mt = tj_str(tj_get(of, "mime_type"), NULL);
	assert_non_null(mt);
	if (mime && strcmp(mt, mime) != 0)
		fail_msg("%s: mime_type %s, expected %s", relz, mt, mime);
	assert_int_equal(tj_type(tj_get(of, "size")), TJ_INT);
	assert_int_equal(tj_int(tj_get(of, "size")), (int64_t)flen);
	char hex[65];
	tu_sha256_hex(bytes, flen, hex);
	const char *sha = tj_str(tj_get(of, "sha256"), NULL);
	assert_non_null(sha);
	assert_string_equal(sha, hex);
	const tj_value *c = tj_get(of, "content");
	assert_non_null(c);
	if (!with_content) {
		assert_true(tj_is_null(c));
	} else {
		size_t clen;
		const char *b64 = tj_str(c, &clen);
		assert_non_null(b64);
		size_t dlen;
		unsigned char *dec = b64_decode(b64, clen, &dlen);
		assert_int_equal(dlen, flen);
		assert_memory_equal(dec, bytes, flen);
		free(dec);
	}
	free(bytes);
	free(full);
}

static void check_skipped(const tj_value *doc, const char *path, const char *reason,
			  int64_t size)
{
	const tj_value *s = skipped_find(doc, path);
	if (!s)
		fail_msg("%s is not in skipped", path);
	const char *r = tj_str(tj_get(s, "reason"), NULL);
	assert_non_null(r);
	if (strcmp(r, reason) != 0)
		fail_msg("%s skipped as %s, expected %s", path, r, reason);
	if (size >= 0)
		assert_int_equal(tj_int(tj_get(s, "size")), size);
}

static int count_lines(const char *s, size_t len)
{
	int n = 0;
	for (size_t i = 0; i < len; i++)
		n += s[i] == '\n';
	return n;
}

/* ---- the OutputFile fields ---- */

static void make_tree(const char *root)
{
	tu_mkdir(root, "d");
	tu_mkdir(root, "d/sub");
	tu_mkdir(root, "d/sub/deeper");
	tu_write(root, "d/a.txt", "hello\n", 6);
	unsigned char all[1024];
	for (size_t i = 0; i < sizeof(all); i++)
		all[i] = (unsigned char)(i * 7 + 3);
	tu_write(root, "d/sub/b.bin", all, sizeof(all));
	tu_write(root, "d/sub/deeper/c.md", "# Title\n\n- item\n", 16);
	tu_write(root, "d/img.png", png_bytes, sizeof(png_bytes));
	tu_write(root, "d/empty.txt", "", 0);
	tu_write(root, "d/data.json", "{\"a\": [1, 2, 3]}\n", 17);
	tu_write(root, "d/caf\xe9.txt", "latin-1 name\n", 13); /* a name that is not UTF-8 */
}

static void check_tree(const char *d, const tj_value *doc, bool with_content)
{
	assert_int_equal(tj_len(tj_get(doc, "output_files")), 7);
	assert_int_equal(tj_len(tj_get(doc, "skipped")), 0);
	check_output_file(of_find(doc, "a.txt"), d, "a.txt", 5, "text/plain", with_content);
	check_output_file(of_find(doc, "sub/b.bin"), d, "sub/b.bin", 9, "application/octet-stream",
			  with_content);
	check_output_file(of_find(doc, "sub/deeper/c.md"), d, "sub/deeper/c.md", 15,
			  "text/markdown", with_content);
	check_output_file(of_find(doc, "img.png"), d, "img.png", 7, "image/png", with_content);
	check_output_file(of_find(doc, "empty.txt"), d, "empty.txt", 9, "inode/x-empty",
			  with_content);
	check_output_file(of_find(doc, "data.json"), d, "data.json", 9, "application/json",
			  with_content);
	check_output_file(find_path(doc, "output_files", "caf\xe9.txt", 8), d, "caf\xe9.txt", 8,
			  "text/plain", with_content);
}

static void test_output_file_fields(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	make_tree(root);
	tu_result r;
	tj_value *doc;
	const char *args[] = {"collect", "--db", db, d, NULL};
	run_json(&r, &doc, args);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	collect_shape(doc);
	assert_int_equal(tj_len(doc), 3);
	check_tree(d, doc, true);
	/* The non-UTF-8 byte is written as the \udcXX escape, the output staying UTF-8. */
	assert_non_null(strstr(r.out, "caf\\udce9.txt"));
	/* A run was recorded. */
	int64_t run1 = tj_int(tj_get(doc, "run_id"));
	assert_true(run1 > 0);
	tj_free(doc);
	tu_result_free(&r);

	/* --no-content: the same records with content null; the next run id. */
	const char *nc[] = {"collect", "--no-content", "--db", db, d, NULL};
	run_json(&r, &doc, nc);
	assert_int_equal(r.status, 0);
	collect_shape(doc);
	check_tree(d, doc, false);
	assert_true(tj_int(tj_get(doc, "run_id")) > run1);
	tj_free(doc);
	tu_result_free(&r);

	/* --no-history: run_id null, the same files. */
	const char *nh[] = {"collect", "--no-history", "--db", db, d, NULL};
	run_json(&r, &doc, nh);
	assert_int_equal(r.status, 0);
	collect_shape(doc);
	assert_true(tj_is_null(tj_get(doc, "run_id")));
	check_tree(d, doc, true);
	tj_free(doc);
	tu_result_free(&r);

	/* Options after the positional argument work too, and a trailing slash changes nothing. */
	char *dslash = malloc(strlen(d) + 2);
	assert_non_null(dslash);
	sprintf(dslash, "%s/", d);
	const char *after[] = {"collect", dslash, "--db", db, "--no-content", NULL};
	run_json(&r, &doc, after);
	assert_int_equal(r.status, 0);
	check_tree(d, doc, false);
	tj_free(doc);
	tu_result_free(&r);

	free(dslash);
	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- excludes ---- */

/* --threads N: the same files with one thread as with several; 0 and non-numbers refused. */
static void test_threads(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	make_tree(root);
	const char *counts[] = {"1", "3"};
	for (size_t i = 0; i < 2; i++) {
		tu_result r;
		tj_value *doc;
		const char *args[] = {"collect", "--threads", counts[i], "--db", db, d, NULL};
		run_json(&r, &doc, args);
		if (r.status != 0)
			fail_msg("--threads %s: exit %d: %s", counts[i], r.status, r.err);
		collect_shape(doc);
		check_tree(d, doc, true);
		tj_free(doc);
		tu_result_free(&r);
	}
	const char *bad[] = {"0", "x"};
	for (size_t i = 0; i < 2; i++) {
		tu_result r;
		tu_harvest(&r, "collect", "--threads", bad[i], "--db", db, d, NULL);
		assert_int_equal(r.status, 2);
		assert_non_null(strstr(r.err, "--threads"));
		tu_result_free(&r);
	}
	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

static void test_excludes(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_mkdir(root, "d/__pycache__");
	tu_mkdir(root, "d/.git");
	tu_mkdir(root, "d/sub");
	tu_mkdir(root, "d/sub/__pycache__");
	tu_mkdir(root, "d/build");
	tu_write(root, "d/a.py", "print(1)\n", 9);
	tu_write(root, "d/.env", "SECRET=1\n", 9);
	tu_write(root, "d/__pycache__/a.cpython-311.pyc", "\x0d\x0d\x0d\x0a", 4);
	tu_write(root, "d/.git/config", "[core]\n", 7);
	tu_write(root, "d/sub/.hidden.txt", "h\n", 2);
	tu_write(root, "d/sub/keep.txt", "k\n", 2);
	tu_write(root, "d/sub/__pycache__/m.pyc", "\x0d\x0d\x0d\x0a", 4);
	tu_write(root, "d/debug.log", "log\n", 4);
	tu_write(root, "d/build/out.o", "obj\n", 4);
	tu_write(root, "d/build/x.txt", "x\n", 2);

	tu_result r;
	tj_value *doc;
	/* Default: dot-files and __pycache__ are neither artifacts nor skipped. */
	const char *a1[] = {"collect", "--no-content", "--db", db, d, NULL};
	run_json(&r, &doc, a1);
	assert_int_equal(r.status, 0);
	assert_paths(doc, "a.py|sub/keep.txt|debug.log|build/out.o|build/x.txt");
	assert_int_equal(tj_len(tj_get(doc, "skipped")), 0);
	tj_free(doc);
	tu_result_free(&r);

	/* --include-hidden: everything. */
	const char *a2[] = {"collect", "--include-hidden", "--no-content", "--db", db, d, NULL};
	run_json(&r, &doc, a2);
	assert_int_equal(r.status, 0);
	assert_paths(doc, "a.py|.env|__pycache__/a.cpython-311.pyc|.git/config|sub/.hidden.txt|"
			  "sub/keep.txt|sub/__pycache__/m.pyc|debug.log|build/out.o|build/x.txt");
	check_output_file(of_find(doc, ".env"), d, ".env", 4, NULL, false);
	assert_int_equal(tj_len(tj_get(doc, "skipped")), 0);
	tj_free(doc);
	tu_result_free(&r);

	/* --exclude GLOB (repeatable) on names: a matching directory is not entered; the default
	 * excludes still apply. */
	const char *a3[] = {"collect", "--exclude", "*.log", "--exclude", "build", "--no-content",
			    "--db",    db,          d,       NULL};
	run_json(&r, &doc, a3);
	assert_int_equal(r.status, 0);
	assert_paths(doc, "a.py|sub/keep.txt");
	assert_int_equal(tj_len(tj_get(doc, "skipped")), 0);
	tj_free(doc);
	tu_result_free(&r);

	/* A glob matching a file name below the root, with --include-hidden. */
	const char *a4[] = {"collect", "--include-hidden", "--exclude", "*.pyc", "--exclude",
			    ".git",    "--no-content",     "--db",      db,      d,
			    NULL};
	run_json(&r, &doc, a4);
	assert_int_equal(r.status, 0);
	assert_paths(doc, "a.py|.env|sub/.hidden.txt|sub/keep.txt|debug.log|build/out.o|"
			  "build/x.txt");
	tj_free(doc);
	tu_result_free(&r);

	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- produced since a snapshot ---- */

static int64_t take_snapshot(const char *db, const char *d, int64_t *entries)
{
	tu_result r;
	tj_value *doc;
	const char *args[] = {"snapshot", "--db", db, d, NULL};
	run_json(&r, &doc, args);
	if (r.status != 0)
		fail_msg("snapshot: exit %d: %s", r.status, r.err);
	int64_t id = tj_int(tj_get(doc, "snapshot_id"));
	assert_true(id > 0);
	char *real = realpath(d, NULL);
	assert_non_null(real);
	assert_string_equal(tj_str(tj_get(doc, "root"), NULL), real);
	free(real);
	if (entries)
		*entries = tj_int(tj_get(doc, "entries"));
	tj_free(doc);
	tu_result_free(&r);
	return id;
}

static void test_since(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_mkdir(root, "d/sub");
	tu_write(root, "d/keep.txt", "unchanged\n", 10);
	tu_write(root, "d/modify.txt", "before\n", 7);
	tu_write(root, "d/grow.csv", "a,b\n", 4);
	tu_write(root, "d/old-name.txt", "renamed\n", 8);
	tu_write(root, "d/delete.txt", "bye\n", 4);
	tu_write(root, "d/sub/inner.txt", "inner\n", 6);
	int64_t entries;
	int64_t id = take_snapshot(db, d, &entries);
	assert_true(entries >= 7);

	/* create, modify (other size), append, rename, delete */
	tu_write(root, "d/new.md", "# new\n", 6);
	tu_mkdir(root, "d/newdir");
	tu_write(root, "d/newdir/made.png", png_bytes, sizeof(png_bytes));
	tu_write(root, "d/modify.txt", "after, longer\n", 14);
	char *grow = tu_path(root, "d/grow.csv");
	FILE *f = fopen(grow, "a");
	assert_non_null(f);
	fputs("1,2\n", f);
	fclose(f);
	char *from = tu_path(root, "d/old-name.txt"), *to = tu_path(root, "d/sub/new-name.txt");
	assert_int_equal(rename(from, to), 0);
	char *del = tu_path(root, "d/delete.txt");
	assert_int_equal(unlink(del), 0);

	char ids[32];
	snprintf(ids, sizeof(ids), "%lld", (long long)id);
	tu_result r;
	tj_value *doc;
	const char *args[] = {"collect", "--since", ids, "--db", db, d, NULL};
	run_json(&r, &doc, args);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	collect_shape(doc);
	assert_paths(doc, "new.md|newdir/made.png|modify.txt|grow.csv|sub/new-name.txt");
	check_output_file(of_find(doc, "new.md"), d, "new.md", 6, "text/markdown", true);
	check_output_file(of_find(doc, "newdir/made.png"), d, "newdir/made.png", 15, "image/png",
			  true);
	check_output_file(of_find(doc, "modify.txt"), d, "modify.txt", 10, "text/plain", true);
	check_output_file(of_find(doc, "grow.csv"), d, "grow.csv", 8, "text/csv", true);
	check_output_file(of_find(doc, "sub/new-name.txt"), d, "sub/new-name.txt", 16,
			  "text/plain", true);
	assert_int_equal(tj_len(tj_get(doc, "skipped")), 0);
	/* How each changed, and the regular files that are gone (the renamed one too). */
	assert_string_equal(tj_str(tj_get(of_find(doc, "new.md"), "change"), NULL), "created");
	assert_string_equal(tj_str(tj_get(of_find(doc, "newdir/made.png"), "change"), NULL),
			    "created");
	assert_string_equal(tj_str(tj_get(of_find(doc, "modify.txt"), "change"), NULL),
			    "modified");
	assert_string_equal(tj_str(tj_get(of_find(doc, "grow.csv"), "change"), NULL), "modified");
	assert_string_equal(tj_str(tj_get(of_find(doc, "sub/new-name.txt"), "change"), NULL),
			    "created");
	const tj_value *gone = tj_get(doc, "deleted");
	assert_int_equal(tj_type(gone), TJ_ARRAY);
	if (tj_len(gone) != 2)
		fail_msg("deleted: expected delete.txt and old-name.txt: %s", strstr(r.out, "\"deleted\""));
	assert_string_equal(tj_str(tj_at(gone, 0), NULL), "delete.txt");
	assert_string_equal(tj_str(tj_at(gone, 1), NULL), "old-name.txt");
	tj_free(doc);
	tu_result_free(&r);

	/* A collect of everything has no change to tell and nothing deleted. */
	const char *all[] = {"collect", "--no-history", "--db", db, d, NULL};
	run_json(&r, &doc, all);
	assert_int_equal(r.status, 0);
	assert_null(tj_get(doc, "deleted"));
	assert_null(tj_get(of_find(doc, "new.md"), "change"));
	tj_free(doc);
	tu_result_free(&r);

	/* An unknown snapshot id is an error, not "everything". */
	const char *bad[] = {"collect", "--since", "999999", "--db", db, d, NULL};
	tu_harvestv(&r, NULL, NULL, bad);
	assert_true(r.status == 1 || r.status == 2);
	assert_int_equal(r.out_len, 0);
	assert_true(r.err_len > 0);
	tu_result_free(&r);
	/* Nor is a --db that does not exist (a typo): said, and no database left behind there. */
	char *typo = tu_path(root, "typo.db");
	const char *typod[] = {"collect", "--since", ids, "--db", typo, d, NULL};
	tu_harvestv(&r, NULL, NULL, typod);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "does not exist"));
	assert_int_equal(access(typo, F_OK), -1);
	tu_result_free(&r);
	free(typo);
	/* With a PostgreSQL history the snapshot is in the local file (--cache-db), which the
	 * store finds: no check of another file, and never the URI's password in a message. */
	const char *pg[] = {"collect", "--no-history", "--since", ids, "--db",
			    "postgresql://alice:s3cret@127.0.0.1:1/db", "--cache-db", db, d, NULL};
	tu_harvestv(&r, NULL, NULL, pg);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	assert_null(strstr(r.err, "s3cret"));
	tu_result_free(&r);

	free(del);
	free(from);
	free(to);
	free(grow);
	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* Runs `harvest ARGS...` (a snapshot) and returns its snapshot_id, as text in ids. */
static void snapshot_args(const char *const *args, char ids[32])
{
	tu_result r;
	tj_value *doc;
	run_json(&r, &doc, args);
	if (r.status != 0)
		fail_msg("snapshot: exit %d: %s", r.status, r.err);
	snprintf(ids, 32, "%lld", (long long)tj_int(tj_get(doc, "snapshot_id")));
	tj_free(doc);
	tu_result_free(&r);
}

/* A collect --since with other filters than its snapshot's would call what only it sees
 * created (or what only the snapshot saw, deleted): refused with exit 2, naming both, and
 * nothing recorded. The same filters in another order, or repeated, are the same. */
static void test_since_filters(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_mkdir(root, "d/.git");
	tu_write(root, "d/a.txt", "a\n", 2);
	tu_write(root, "d/.env", "x=1\n", 4);
	tu_write(root, "d/.git/config", "[core]\n", 7);
	tu_write(root, "d/run.log", "log\n", 4);
	tu_write(root, "d/t.tmp", "tmp\n", 4);
	char plain[32], filtered[32];
	const char *snap_plain[] = {"snapshot", "--db", db, d, NULL};
	snapshot_args(snap_plain, plain);
	const char *snap_filtered[] = {"snapshot", "--include-hidden", "--exclude", "*.log",
				       "--exclude", "*.tmp", "--db", db, d, NULL};
	snapshot_args(snap_filtered, filtered);

	struct {
		const char *since, *a, *b, *c, *d, *e; /* collect's filters (NULL-ended) */
		const char *err;                        /* NULL: accepted, nothing produced */
	} cases[] = {
		{plain, NULL, NULL, NULL, NULL, NULL, NULL},
		{plain, "--include-hidden", NULL, NULL, NULL, NULL,
		 "was taken with none of --include-hidden, --exclude, --xdev; this collect has "
		 "--include-hidden: a collect compared with a snapshot needs the same ones\n"},
		{plain, "--xdev", NULL, NULL, NULL, NULL, "; this collect has --xdev:"},
		{plain, "--exclude", "*.log", NULL, NULL, NULL, "; this collect has --exclude '*.log':"},
		{filtered, "--exclude", "*.tmp", "--include-hidden", "--exclude", "*.log", NULL},
		{filtered, "--exclude", "*.tmp", "--exclude", "*.log", "--include-hidden", NULL},
		{filtered, NULL, NULL, NULL, NULL, NULL,
		 " was taken with --include-hidden --exclude '*.log' --exclude '*.tmp'; this "
		 "collect has none of"},
		{filtered, "--include-hidden", "--exclude", "*.log", NULL, NULL,
		 "; this collect has --include-hidden --exclude '*.log':"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[] = {"collect", "--db", db, "--since", cases[i].since,
				      "--no-content", d, NULL, NULL, NULL, NULL, NULL, NULL};
		const char *extra[] = {cases[i].a, cases[i].b, cases[i].c, cases[i].d, cases[i].e};
		for (size_t k = 0; k < 5 && extra[k]; k++)
			args[7 + k] = extra[k];
		tu_result r;
		tu_harvestv(&r, NULL, NULL, args);
		if (!cases[i].err) {
			if (r.status != 0)
				fail_msg("case %zu: exit %d: %s", i, r.status, r.err);
			tj_value *doc = tj_parse(r.out, r.out_len);
			assert_non_null(doc);
			assert_paths(doc, "");
			assert_int_equal(tj_len(tj_get(doc, "deleted")), 0);
			tj_free(doc);
		} else {
			if (r.status != 2 || !strstr(r.err, cases[i].err))
				fail_msg("case %zu: exit %d: %s", i, r.status, r.err);
			char want[64];
			snprintf(want, sizeof(want), "harvest: snapshot %s was taken with ",
				 cases[i].since);
			assert_memory_equal(r.err, want, strlen(want));
			assert_int_equal(r.out_len, 0);
			assert_non_null(strchr(r.err, '\n'));
			assert_int_equal(strchr(r.err, '\n')[1], '\0'); /* one line */
		}
		tu_result_free(&r);
	}
	/* Only the accepted collects were recorded. */
	tu_result r;
	const char *runs[] = {"history", "runs", "--db", db, NULL};
	tu_harvestv(&r, NULL, NULL, runs);
	assert_int_equal(r.status, 0);
	tj_value *doc = tj_parse(r.out, r.out_len);
	assert_non_null(doc);
	assert_int_equal(tj_len(doc), 3);
	tj_free(doc);
	tu_result_free(&r);
	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* A same-size rewrite right after the snapshot, with the mtime put back: caught (the file was
 * racy when the snapshot was taken, so its hash was recorded). An untouched racy file is not
 * produced. */
static void test_since_racy(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_write(root, "d/same.txt", "AAAA-first-version\n", 19);
	tu_write(root, "d/untouched.txt", "stays the same\n", 15);
	char *same = tu_path(root, "d/same.txt");
	struct stat before;
	assert_int_equal(stat(same, &before), 0);
	int64_t id = take_snapshot(db, d, NULL);

	int fd = open(same, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "BBBB-other-version\n", 19, 0), 19);
	struct timespec times[2] = {before.st_atim, before.st_mtim};
	assert_int_equal(futimens(fd, times), 0);
	close(fd);
	struct stat after;
	assert_int_equal(stat(same, &after), 0);
	assert_int_equal(after.st_ino, before.st_ino);
	assert_int_equal(after.st_size, before.st_size);
	assert_int_equal(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);

	char ids[32];
	snprintf(ids, sizeof(ids), "%lld", (long long)id);
	tu_result r;
	tj_value *doc;
	const char *args[] = {"collect", "--since", ids, "--db", db, d, NULL};
	run_json(&r, &doc, args);
	assert_int_equal(r.status, 0);
	assert_paths(doc, "same.txt");
	check_output_file(of_find(doc, "same.txt"), d, "same.txt", 8, "text/plain", true);
	tj_free(doc);
	tu_result_free(&r);

	free(same);
	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- symlinks, FIFOs, sparse giants ---- */

static void test_symlink_outside(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *outside = tu_mkdtemp();
	static const char secret[] = "TOP-SECRET-7f3a9c-do-not-leak\n";
	tu_write(outside, "secret.txt", secret, strlen(secret));
	char *secret_path = tu_path(outside, "secret.txt");
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_write(root, "d/ok.txt", "ok\n", 3);
	char *l1 = tu_path(root, "d/leak.txt");
	assert_int_equal(symlink(secret_path, l1), 0);
	char *l2 = tu_path(root, "d/leakdir");
	assert_int_equal(symlink(outside, l2), 0);
	char *l3 = tu_path(root, "d/rel.txt");
	assert_int_equal(symlink("ok.txt", l3), 0); /* even one inside the root is not read */

	char hex[65];
	tu_sha256_hex(secret, strlen(secret), hex);
	char *b64 = b64_encode((const unsigned char *)secret, strlen(secret));
	char snap_id[32];
	snprintf(snap_id, sizeof(snap_id), "%lld", (long long)take_snapshot(db, d, NULL));
	for (int since = 0; since < 2; since++) {
		if (since) {
			/* Links created after the snapshot: listed as skipped too. */
			char *l4 = tu_path(root, "d/leak2.txt");
			assert_int_equal(symlink(secret_path, l4), 0);
			free(l4);
		}
		tu_result r;
		tj_value *doc;
		const char *args[] = {"collect", "--db", db, d, since ? "--since" : NULL, snap_id,
				      NULL};
		run_json(&r, &doc, args);
		assert_int_equal(r.status, 0);
		if (!since) {
			assert_paths(doc, "ok.txt");
			check_output_file(of_find(doc, "ok.txt"), d, "ok.txt", 6, "text/plain", true);
			check_skipped(doc, "leak.txt", "symlink", -1);
			check_skipped(doc, "leakdir", "symlink", -1);
			check_skipped(doc, "rel.txt", "symlink", -1);
		} else {
			assert_paths(doc, "");
			check_skipped(doc, "leak2.txt", "symlink", -1);
		}
		/* The target's bytes are nowhere. */
		assert_null(strstr(r.out, "TOP-SECRET"));
		assert_null(strstr(r.out, b64));
		assert_null(strstr(r.out, hex));
		assert_null(strstr(r.out, "secret.txt"));
		tj_free(doc);
		tu_result_free(&r);
	}

	free(b64);
	free(l1);
	free(l2);
	free(l3);
	free(secret_path);
	free(d);
	free(db);
	tu_rmrf(root);
	tu_rmrf(outside);
	free(root);
	free(outside);
}

static void test_fifo(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_write(root, "d/ok.txt", "ok\n", 3);
	char *fifo = tu_path(root, "d/pipe");
	assert_int_equal(mkfifo(fifo, 0666), 0);
	tu_result r;
	char *argv[] = {"timeout", "20", HARVEST_BIN, "collect", "--db", db, d, NULL};
	double t0 = tu_now_s();
	tu_run(&r, NULL, NULL, argv);
	if (r.status == 124)
		fail_msg("harvest collect hung on a FIFO");
	assert_true(tu_now_s() - t0 < 10);
	assert_int_equal(r.status, 0); /* not_regular is no failure */
	tj_value *doc = tj_parse(r.out, r.out_len);
	assert_non_null(doc);
	assert_paths(doc, "ok.txt");
	check_skipped(doc, "pipe", "not_regular", -1);
	tj_free(doc);
	tu_result_free(&r);
	free(fifo);
	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

static void test_sparse_giant(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_write(root, "d/ok.txt", "ok\n", 3);
	char *big = tu_path(root, "d/huge.bin");
	int fd = open(big, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	const int64_t size = 100LL * 1024 * 1024 * 1024;
	assert_int_equal(ftruncate(fd, size), 0);
	close(fd);
	tu_result r;
	char *argv[] = {"timeout", "60", HARVEST_BIN, "collect", "--db", db, d, NULL};
	double t0 = tu_now_s();
	tu_run(&r, NULL, NULL, argv);
	double took = tu_now_s() - t0;
	assert_true(took < 10);
	assert_int_equal(r.status, 1);
	tj_value *doc = tj_parse(r.out, r.out_len);
	assert_non_null(doc);
	assert_paths(doc, "ok.txt");
	check_skipped(doc, "huge.bin", "too_large", size);
	tj_free(doc);
	tu_result_free(&r);
	free(big);
	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- limits ---- */

static void test_limits(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	char forty[41];
	memset(forty, 'x', 40);
	forty[40] = '\0';
	tu_write(root, "d/f1.txt", forty, 40);
	tu_write(root, "d/f2.txt", forty, 40);
	tu_write(root, "d/f3.txt", forty, 40);
	tu_write(root, "d/ten.txt", "123456789\n", 10);
	tu_write(root, "d/eleven.txt", "1234567890\n", 11);
	tu_result r;
	tj_value *doc;

	/* --max-file-bytes 10: ten.txt fits, the others are too_large. */
	const char *a1[] = {"collect", "--max-file-bytes", "10", "--db", db, d, NULL};
	run_json(&r, &doc, a1);
	assert_int_equal(r.status, 1);
	assert_paths(doc, "ten.txt");
	check_output_file(of_find(doc, "ten.txt"), d, "ten.txt", 7, "text/plain", true);
	check_skipped(doc, "eleven.txt", "too_large", 11);
	check_skipped(doc, "f1.txt", "too_large", 40);
	check_skipped(doc, "f2.txt", "too_large", 40);
	check_skipped(doc, "f3.txt", "too_large", 40);
	assert_int_equal(tj_len(tj_get(doc, "skipped")), 4);
	/* Exit status 1 says why on stderr: each file too large, named, with the limit. */
	assert_non_null(strstr(r.err, "/eleven.txt: 11 bytes, more than --max-file-bytes (10)"));
	assert_non_null(strstr(r.err, "/f3.txt: 40 bytes, more than --max-file-bytes (10)"));
	tj_free(doc);
	tu_result_free(&r);

	/* --max-files 2: two artifacts, the three others listed as limit, none dropped. */
	const char *a2[] = {"collect", "--max-files", "2", "--db", db, d, NULL};
	run_json(&r, &doc, a2);
	assert_int_equal(r.status, 1);
	const tj_value *ofs = tj_get(doc, "output_files"), *sk = tj_get(doc, "skipped");
	assert_int_equal(tj_len(ofs), 2);
	assert_int_equal(tj_len(sk), 3);
	for (size_t i = 0; i < tj_len(sk); i++)
		assert_string_equal(tj_str(tj_get(tj_at(sk, i), "reason"), NULL), "limit");
	static const char *const all[] = {"f1.txt", "f2.txt", "f3.txt", "ten.txt", "eleven.txt"};
	for (size_t i = 0; i < 5; i++)
		assert_true((of_find(doc, all[i]) != NULL) != (skipped_find(doc, all[i]) != NULL));
	assert_non_null(strstr(r.err, ": 3 more files not collected: --max-files (2) reached\n"));
	tj_free(doc);
	tu_result_free(&r);

	/* --max-total-bytes 100: artifacts add up to at most 100 bytes; the rest is limit. */
	const char *a3[] = {"collect", "--max-total-bytes", "100", "--db", db, d, NULL};
	run_json(&r, &doc, a3);
	assert_int_equal(r.status, 1);
	ofs = tj_get(doc, "output_files");
	sk = tj_get(doc, "skipped");
	int64_t total = 0;
	for (size_t i = 0; i < tj_len(ofs); i++)
		total += tj_int(tj_get(tj_at(ofs, i), "size"));
	assert_true(total <= 100);
	assert_true(tj_len(ofs) >= 2); /* at least two of the files fit */
	assert_true(tj_len(sk) >= 1);
	assert_int_equal(tj_len(ofs) + tj_len(sk), 5);
	for (size_t i = 0; i < tj_len(sk); i++)
		assert_string_equal(tj_str(tj_get(tj_at(sk, i), "reason"), NULL), "limit");
	for (size_t i = 0; i < 5; i++)
		assert_true((of_find(doc, all[i]) != NULL) != (skipped_find(doc, all[i]) != NULL));
	assert_non_null(strstr(r.err, " not collected: --max-total-bytes (100) reached\n"));
	tj_free(doc);
	tu_result_free(&r);

	/* Limits that are not reached: exit 0. */
	const char *a4[] = {"collect", "--max-files", "5", "--max-total-bytes", "141",
			    "--max-file-bytes", "40", "--db", db, d, NULL};
	run_json(&r, &doc, a4);
	assert_int_equal(r.status, 0);
	assert_int_equal(tj_len(tj_get(doc, "output_files")), 5);
	assert_null(strstr(r.err, "not collected"));
	tj_free(doc);
	tu_result_free(&r);

	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- the database ---- */

/* A MIME cache damaged inside (its table's page, found at the first lookup): the cache only
 * saves time, so collect warns once and types every file with libmagic (never an "error" skip
 * for a readable file), exit 1; --no-content the same. A run in the same database likewise,
 * its status the command's. */
static void test_damaged_cache(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_write(root, "d/a.txt", "words\n", 6);
	tu_write(root, "d/b.md", "# B\n", 4);
	collect_ok(db, d);
	tu_damage_table(db, "mime_cache");
	tu_result r;
	tj_value *doc;
	const char *with[] = {"collect", "--db", db, d, NULL};
	const char *without[] = {"collect", "--no-content", "--db", db, d, NULL};
	const char *const *cases[] = {with, without};
	for (size_t c = 0; c < 2; c++) {
		run_json(&r, &doc, cases[c]);
		if (r.status != 1)
			fail_msg("case %zu: exit %d: %s", c, r.status, r.err);
		assert_non_null(strstr(r.err, "collecting without the MIME cache"));
		assert_ptr_equal(memchr(r.err, '\n', r.err_len), r.err + r.err_len - 1);
		assert_int_equal(tj_len(tj_get(doc, "skipped")), 0);
		check_output_file(of_find(doc, "a.txt"), d, "a.txt", 5, "text/plain", c == 0);
		check_output_file(of_find(doc, "b.md"), d, "b.md", 4, "text/markdown", c == 0);
		tj_free(doc);
		tu_result_free(&r);
	}
	const char *run[] = {"run", "--db", db, "--dir", d, "--format", "json", "--", "sh", "-c",
			     "echo new > c.txt", NULL};
	run_json(&r, &doc, run);
	if (r.status != 0)
		fail_msg("run: exit %d: %s", r.status, r.err);
	assert_non_null(strstr(r.err, "without the MIME cache"));
	const tj_value *ofs = tj_get(doc, "output_files");
	assert_int_equal(tj_len(ofs), 1);
	assert_string_equal(tj_str(tj_get(tj_at(ofs, 0), "mime_type"), NULL), "text/plain");
	assert_int_equal(tj_len(tj_get(doc, "skipped")), 0);
	tj_free(doc);
	tu_result_free(&r);
	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

static void assert_no_db_file(const tj_value *doc)
{
	const tj_value *a = tj_get(doc, "output_files");
	for (size_t i = 0; i < tj_len(a); i++) {
		const char *name = tj_str(tj_get(tj_at(a, i), "name"), NULL);
		assert_non_null(name);
		if (strncmp(name, "h.db", 4) == 0)
			fail_msg("the database's own file %s is an artifact",
				 tj_str(tj_get(tj_at(a, i), "path"), NULL));
	}
}

static void test_db_inside(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_mkdir(root, "d/sub");
	tu_write(root, "d/a.txt", "a\n", 2);
	tu_write(root, "d/sub/b.txt", "b\n", 2);
	static const char *const dbs[] = {"d/h.db", "d/sub/h.db"};
	for (int k = 0; k < 2; k++) {
		char *db = tu_path(root, dbs[k]);
		tu_result r;
		tj_value *doc;
		/* Twice: the second time the database exists before the walk starts. */
		for (int pass = 0; pass < 2; pass++) {
			const char *args[] = {"collect", "--db", db, d, NULL};
			run_json(&r, &doc, args);
			assert_int_equal(r.status, 0);
			assert_paths(doc, "a.txt|sub/b.txt");
			assert_no_db_file(doc);
			tj_free(doc);
			tu_result_free(&r);
		}
		/* A snapshot, then the database changes (the collect itself writes to it), and
		 * a file is added: only that file. */
		char ids[32];
		snprintf(ids, sizeof(ids), "%lld", (long long)take_snapshot(db, d, NULL));
		tu_write(root, "d/new.txt", "new\n", 4);
		const char *since[] = {"collect", "--since", ids, "--db", db, d, NULL};
		run_json(&r, &doc, since);
		assert_int_equal(r.status, 0);
		assert_paths(doc, "new.txt");
		assert_no_db_file(doc);
		tj_free(doc);
		tu_result_free(&r);
		/* And a run of collect with --since the same snapshot a second time. */
		run_json(&r, &doc, since);
		assert_int_equal(r.status, 0);
		assert_paths(doc, "new.txt");
		assert_no_db_file(doc);
		tj_free(doc);
		tu_result_free(&r);
		char *nt = tu_path(root, "d/new.txt");
		unlink(nt);
		free(nt);
		/* The database files themselves are gone from the tree before the next case. */
		static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
		for (int i = 0; i < 4; i++) {
			char p[4096];
			snprintf(p, sizeof(p), "%s%s", db, sfx[i]);
			unlink(p);
		}
		free(db);
	}
	free(d);
	tu_rmrf(root);
	free(root);
}

static void test_not_a_database(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_write(root, "d/a.txt", "a\n", 2);
	/* A small text file and a larger binary one. */
	char text[5000];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = (char)('a' + i % 26);
	tu_write(root, "notes.txt", "these are my notes, not a database\n", 35);
	tu_write(root, "big.dat", text, sizeof(text));
	static const char *const names[] = {"notes.txt", "big.dat"};
	for (int k = 0; k < 2; k++) {
		char *db = tu_path(root, names[k]);
		size_t blen;
		char *before = tu_read_file(db, &blen);
		struct stat sb;
		assert_int_equal(stat(db, &sb), 0);
		static const char *const cmds[] = {"collect", "snapshot"};
		for (int c = 0; c < 2; c++) {
			tu_result r;
			const char *args[] = {cmds[c], "--db", db, d, NULL};
			tu_harvestv(&r, NULL, NULL, args);
			assert_int_equal(r.status, 1);
			assert_int_equal(r.out_len, 0);
			if (count_lines(r.err, r.err_len) != 1 || !strstr(r.err, db))
				fail_msg("expected one error line naming %s, got: %s", db, r.err);
			tu_result_free(&r);
		}
		size_t alen;
		char *after = tu_read_file(db, &alen);
		assert_int_equal(alen, blen);
		assert_memory_equal(after, before, blen);
		struct stat sa;
		assert_int_equal(stat(db, &sa), 0);
		assert_int_equal(sa.st_mtim.tv_sec, sb.st_mtim.tv_sec);
		assert_int_equal(sa.st_mtim.tv_nsec, sb.st_mtim.tv_nsec);
		assert_int_equal(sa.st_mode, sb.st_mode);
		/* No journal or WAL left beside it. */
		static const char *const sfx[] = {"-wal", "-shm", "-journal"};
		for (int i = 0; i < 3; i++) {
			char p[4096];
			snprintf(p, sizeof(p), "%s%s", db, sfx[i]);
			if (access(p, F_OK) == 0)
				fail_msg("%s was left behind", p);
		}
		free(before);
		free(after);
		free(db);
	}
	free(d);
	tu_rmrf(root);
	free(root);
}

static void test_read_only_database(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *dbdir = tu_path(root, "dbdir");
	tu_mkdir(root, "dbdir");
	char *db = tu_path(root, "dbdir/h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_write(root, "d/a.txt", "a\n", 2);
	collect_ok(db, d);
	tu_result r;
	const char *args[] = {"collect", "--db", db, d, NULL};
	assert_int_equal(chmod(db, 0444), 0);
	assert_int_equal(chmod(dbdir, 0777), 0); /* only the file's mode stands in the way */
	size_t blen;
	char *before = tu_read_file(db, &blen);
	assert_non_null(before);

	tu_harvest_as_nobody(&r, NULL, args);
	print_message("read-only: exit %d, stderr: %s", r.status, r.err);
	assert_int_equal(r.status, 1);
	if (count_lines(r.err, r.err_len) != 1 || !strstr(r.err, db))
		fail_msg("expected one error line naming %s, got: %s", db, r.err);
	tu_result_free(&r);
	size_t alen;
	char *after = tu_read_file(db, &alen);
	assert_int_equal(alen, blen);
	assert_memory_equal(after, before, blen);
	struct stat st;
	assert_int_equal(stat(db, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0444);

	free(before);
	free(after);
	free(d);
	free(db);
	free(dbdir);
	tu_rmrf(root);
	free(root);
}

/* ---- usage and path errors ---- */

static void test_bad_arguments(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	char *missing = tu_path(root, "no-such-dir");
	char *file = tu_path(root, "file.txt");
	tu_write(root, "file.txt", "x\n", 2);
	tu_result r;
	/* A missing DIR, or a file where a directory is expected: 3, naming the path. */
	const char *const paths[] = {missing, file};
	for (int i = 0; i < 2; i++) {
		const char *a[] = {"collect", "--db", db, paths[i], NULL};
		tu_harvestv(&r, NULL, NULL, a);
		assert_int_equal(r.status, 3);
		assert_int_equal(r.out_len, 0);
		assert_non_null(strstr(r.err, paths[i]));
		assert_int_equal(count_lines(r.err, r.err_len), 1);
		tu_result_free(&r);
		const char *s[] = {"snapshot", "--db", db, paths[i], NULL};
		tu_harvestv(&r, NULL, NULL, s);
		assert_int_equal(r.status, 3);
		assert_int_equal(r.out_len, 0);
		tu_result_free(&r);
	}
	/* Bad option values: 2, one line naming the option. */
	static const char *const bad[][2] = {
		{"--max-files", "x"},       {"--max-file-bytes", "-5"}, {"--max-total-bytes", "lots"},
		{"--since", "abc"},         {"--since", "0"},           {"--format", "yaml"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *a[] = {"collect", bad[i][0], bad[i][1], "--db", db, root, NULL};
		tu_harvestv(&r, NULL, NULL, a);
		if (r.status != 2)
			fail_msg("%s %s: exit %d", bad[i][0], bad[i][1], r.status);
		assert_int_equal(r.out_len, 0);
		assert_non_null(strstr(r.err, bad[i][0]));
		tu_result_free(&r);
	}
	const char *none[] = {"collect", "--db", db, NULL};
	tu_harvestv(&r, NULL, NULL, none);
	assert_int_equal(r.status, 2);
	tu_result_free(&r);
	const char *unknown[] = {"collect", "--frobnicate", "--db", db, root, NULL};
	tu_harvestv(&r, NULL, NULL, unknown);
	assert_int_equal(r.status, 2);
	tu_result_free(&r);
	free(file);
	free(missing);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* ---- permissions (as nobody) ---- */

static void test_unreadable_subdir(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *dbdir = tu_path(root, "dbdir");
	tu_mkdir(root, "dbdir");
	assert_int_equal(chmod(dbdir, 0777), 0);
	char *db = tu_path(root, "dbdir/h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_mkdir(root, "d/locked");
	tu_write(root, "d/ok.txt", "ok\n", 3);
	tu_write(root, "d/locked/inside.txt", "LOCKED-CONTENT\n", 15);
	tu_write(root, "d/private.txt", "PRIVATE-CONTENT\n", 16);
	char *locked = tu_path(root, "d/locked");
	char *priv = tu_path(root, "d/private.txt");
	assert_int_equal(chmod(locked, 0700), 0);
	assert_int_equal(chmod(priv, 0600), 0);

	tu_result r;
	const char *args[] = {"collect", "--db", db, d, NULL};
	tu_harvest_as_nobody(&r, NULL, args);
	print_message("as nobody: exit %d, stderr: %s", r.status, r.err);
	assert_int_equal(r.status, 1);
	tj_value *doc = tj_parse(r.out, r.out_len);
	if (!doc)
		fail_msg("no valid output: %s", r.out);
	collect_shape(doc);
	/* A warning names the directory; the readable file is still collected; the unreadable
	 * file is skipped as error. */
	assert_non_null(strstr(r.err, "locked"));
	assert_paths(doc, "ok.txt");
	check_output_file(of_find(doc, "ok.txt"), d, "ok.txt", 6, "text/plain", true);
	check_skipped(doc, "private.txt", "error", 16);
	/* On stderr the file is named with DIR, a path that can be opened from here. */
	char *named = tu_path(d, "private.txt: Permission denied");
	assert_non_null(strstr(r.err, named));
	free(named);
	assert_null(strstr(r.out, "LOCKED-CONTENT"));
	tj_free(doc);
	tu_result_free(&r);
	/* DIR given relative to the working directory: both lines name the paths below it as
	 * given, as walk does (not below its real path). */
	const char *rel[] = {"collect", "--db", db, "d", NULL};
	tu_harvest_as_nobody(&r, root, rel);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "harvest: d/locked: Permission denied\n"));
	assert_non_null(strstr(r.err, "harvest: d/private.txt: Permission denied\n"));
	tu_result_free(&r);
	/* A snapshot that lacks the directory is incomplete: exit 1, also when --quiet keeps
	 * the warning off stderr. */
	const char *snap[] = {"snapshot", "--db", db, "d", NULL};
	tu_harvest_as_nobody(&r, root, snap);
	assert_int_equal(r.status, 1);
	assert_string_equal(r.err, "harvest: d/locked: Permission denied\n");
	tu_result_free(&r);
	const char *snap_quiet[] = {"snapshot", "--quiet", "--db", db, "d", NULL};
	tu_harvest_as_nobody(&r, root, snap_quiet);
	assert_int_equal(r.status, 1);
	assert_string_equal(r.err, "");
	assert_non_null(strstr(r.out, "\"snapshot_id\""));
	tu_result_free(&r);
	/* DIR itself unreadable: named as given too, by each command that takes a DIR. */
	const char *whole[][8] = {
		{"collect", "--db", db, "d/locked", NULL},
		{"snapshot", "--db", db, "d/locked", NULL},
		{"run", "--db", db, "--dir", "d/locked", "--", "true", NULL},
	};
	for (size_t i = 0; i < sizeof(whole) / sizeof(whole[0]); i++) {
		tu_harvest_as_nobody(&r, root, whole[i]);
		assert_int_equal(r.status, i == 2 ? 125 : 1);
		assert_string_equal(r.err, "harvest: d/locked: Permission denied\n");
		tu_result_free(&r);
	}

	free(priv);
	free(locked);
	free(d);
	free(db);
	free(dbdir);
	tu_rmrf(root);
	free(root);
}

/* ---- --xdev: other file systems below DIR ---- */

/* Mounts a tmpfs holding "secret" at d/tmp and binds a directory holding "shadow" of another
 * tmpfs, outside the tree, at d/bind; skips the case where mounts cannot be made (not root).
 * (--xdev compares devices, as find -xdev does: a bind of DIR's own file system is not another
 * file system.) */
static void mount_inside(const char *root, const char *d)
{
	char *tmp = tu_path(d, "tmp"), *bind = tu_path(d, "bind"), *src = tu_path(root, "outside");
	tu_mkdir(d, "tmp");
	tu_mkdir(d, "bind");
	tu_mkdir(root, "outside");
	if (mount("harvest-test", tmp, "tmpfs", 0, "size=1m") != 0) {
		print_message("[   INFO   ] mount: %s\n", strerror(errno));
		free(tmp);
		free(bind);
		free(src);
		skip();
	}
	tu_cleanup_umount(tmp);
	assert_int_equal(mount("harvest-test", src, "tmpfs", 0, "size=1m"), 0);
	tu_cleanup_umount(src);
	tu_write(root, "outside/shadow", "hash\n", 5);
	assert_int_equal(mount(src, bind, "none", MS_BIND, NULL), 0);
	tu_cleanup_umount(bind);
	tu_write(d, "tmp/secret", "mounted\n", 8);
	free(tmp);
	free(bind);
	free(src);
}

static void test_xdev(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *db = tu_path(root, "h.db");
	char *d = tu_path(root, "d");
	tu_mkdir(root, "d");
	tu_write(d, "here.txt", "here\n", 5);
	mount_inside(root, d);
	tu_result r;
	tj_value *doc;

	/* Without --xdev, what a mount below DIR holds is collected like any file. */
	const char *all[] = {"collect", "--no-history", "--db", db, d, NULL};
	run_json(&r, &doc, all);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	assert_paths(doc, "here.txt|tmp/secret|bind/shadow");
	tj_free(doc);
	tu_result_free(&r);
	const char *one[] = {"collect", "--xdev", "--no-history", "--db", db, d, NULL};
	run_json(&r, &doc, one);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	collect_shape(doc);
	assert_paths(doc, "here.txt");
	tj_free(doc);
	tu_result_free(&r);

	/* snapshot --xdev records the mount points but not what is below them: 3 entries. */
	const char *snap[] = {"snapshot", "--xdev", "--db", db, d, NULL};
	run_json(&r, &doc, snap);
	if (r.status != 0)
		fail_msg("snapshot: exit %d: %s", r.status, r.err);
	assert_int_equal(tj_int(tj_get(doc, "entries")), 3);
	char ids[32];
	snprintf(ids, sizeof(ids), "%lld", (long long)tj_int(tj_get(doc, "snapshot_id")));
	tj_free(doc);
	tu_result_free(&r);
	tu_write(d, "new.txt", "new\n", 4);
	tu_write(d, "tmp/new-secret", "new\n", 4);
	const char *since[] = {"collect", "--xdev", "--since", ids, "--no-history", "--db", db,
			       d, NULL};
	run_json(&r, &doc, since);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	assert_paths(doc, "new.txt");
	tj_free(doc);
	tu_result_free(&r);

	/* run --xdev: a file the command writes into a mount is not an artifact. */
	const char *run[] = {"run", "--xdev", "--no-history", "--format", "json", "--db", db,
			     "--dir", d, "--", "sh", "-c", "echo a > made.txt; echo b > tmp/made",
			     NULL};
	run_json(&r, &doc, run);
	if (r.status != 0)
		fail_msg("run: exit %d: %s", r.status, r.err);
	assert_paths(doc, "made.txt");
	tj_free(doc);
	tu_result_free(&r);
	const char *run_all[] = {"run", "--no-history", "--format", "json", "--db", db, "--dir",
				 d, "--", "sh", "-c", "echo c > tmp/made2", NULL};
	run_json(&r, &doc, run_all);
	if (r.status != 0)
		fail_msg("run: exit %d: %s", r.status, r.err);
	assert_paths(doc, "tmp/made2");
	tj_free(doc);
	tu_result_free(&r);
	free(d);
	free(db);
}

/* libmagic's worker crashing on a produced file: the file is still an artifact, typed
 * application/octet-stream, with one warning naming it (exit 1), and the other files keep
 * their answers. That answer is not cached: the next collect, without the fault, types the
 * file as it is. The crash comes from the test-only switch (a file starting
 * "HARVEST-TEST-CRASH"). */
static void test_worker_crash_is_artifact(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *db = tu_path(root, "h.db");
	tu_mkdir(root, "d");
	char *d = tu_path(root, "d");
	tu_write(d, "a.txt", "hello\n", 6);
	tu_write(d, "bad", "HARVEST-TEST-CRASH\n", 19);
	/* named as text and CSV: the fallback is still octet-stream, never refined by the name
	 * (libmagic never finished reading the bytes) */
	tu_write(d, "bad.csv", "HARVEST-TEST-CRASH,1\n", 21);
	tu_write(d, "bad.txt", "HARVEST-TEST-CRASH 2\n", 21);
	tu_result r;
	tj_value *doc;
	const char *args[] = {"collect", "--no-history", "--db", db, d, NULL};
	setenv("HARVEST_TEST_WORKER_FAULT", "1", 1);
	run_json(&r, &doc, args);
	unsetenv("HARVEST_TEST_WORKER_FAULT");
	assert_int_equal(r.status, 1);
	assert_non_null(doc);
	assert_paths(doc, "a.txt|bad|bad.csv|bad.txt");
	assert_string_equal(tj_str(tj_get(of_find(doc, "bad"), "mime_type"), NULL),
			    "application/octet-stream");
	assert_string_equal(tj_str(tj_get(of_find(doc, "bad.csv"), "mime_type"), NULL),
			    "application/octet-stream");
	assert_string_equal(tj_str(tj_get(of_find(doc, "bad.txt"), "mime_type"), NULL),
			    "application/octet-stream");
	assert_string_equal(tj_str(tj_get(of_find(doc, "a.txt"), "mime_type"), NULL),
			    "text/plain");
	assert_null(skipped_find(doc, "bad"));
	/* named as DIR was given, as the collect's other warnings are */
	char want[4200];
	snprintf(want, sizeof(want), "harvest: %s/bad: the libmagic worker was killed by signal", d);
	if (!strstr(r.err, want))
		fail_msg("expected '%s' in '%s'", want, r.err);
	tj_free(doc);
	tu_result_free(&r);

	run_json(&r, &doc, args);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	assert_string_equal(tj_str(tj_get(of_find(doc, "bad"), "mime_type"), NULL),
			    "text/plain");
	assert_string_equal(tj_str(tj_get(of_find(doc, "bad.csv"), "mime_type"), NULL),
			    "text/csv");
	tj_free(doc);
	tu_result_free(&r);

	/* Copies of bytes a worker died on get the same answer within one collect, said of
	 * each, without another worker dying on them (one thread: the first is detected before
	 * its copies are reached). */
	tu_write(d, "bad-copy", "HARVEST-TEST-CRASH\n", 19);
	tu_write(d, "bad-copy2", "HARVEST-TEST-CRASH\n", 19);
	const char *one[] = {"collect", "--no-history", "--no-cache", "--threads", "1", d, NULL};
	setenv("HARVEST_TEST_WORKER_FAULT", "1", 1);
	run_json(&r, &doc, one);
	unsetenv("HARVEST_TEST_WORKER_FAULT");
	assert_int_equal(r.status, 1);
	assert_string_equal(tj_str(tj_get(of_find(doc, "bad-copy"), "mime_type"), NULL),
			    "application/octet-stream");
	assert_string_equal(tj_str(tj_get(of_find(doc, "bad-copy2"), "mime_type"), NULL),
			    "application/octet-stream");
	snprintf(want, sizeof(want),
		 "harvest: %s/bad-copy: the same bytes as bad: the libmagic worker was killed by "
		 "signal", d);
	if (!strstr(r.err, want))
		fail_msg("expected '%s' in '%s'", want, r.err);
	snprintf(want, sizeof(want), "harvest: %s/bad-copy2: the same bytes as bad: ", d);
	if (!strstr(r.err, want))
		fail_msg("expected '%s' in '%s'", want, r.err);
	tj_free(doc);
	tu_result_free(&r);
	free(d);
	free(db);
	tu_rmrf(root);
	free(root);
}

/* Under `ulimit -f` (RLIMIT_FSIZE) a write past the limit is an error with its reason, never
 * SIGXFSZ ending harvest unannounced: the database's failed commit says "File too large", an archive too large leaves no file, and a command `run`
 * starts gets the signal's default back (its own write past the limit ends it, 153). */
static void test_file_size_limit(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	tu_mkdir(dir, "out");
	char *out = tu_path(dir, "out");
	char *big = calloc(1, 300 << 10);
	assert_non_null(big);
	for (size_t i = 0; i < (300u << 10); i++)
		big[i] = (char)(i * 2654435761u >> 24); /* incompressible enough, not text */
	tu_write(out, "big.bin", big, 300 << 10);
	free(big);
	char *db = tu_path(dir, "h.db");
	char *tar = tu_path(dir, "a.tar");
	/* 100 blocks of 1 KiB: the spool, the database's content and the archive pass it. */
	tu_result r;
	tu_harvest_limited(&r, "-f 100", "collect", "--db", db, out, NULL);
	print_message("collect: exit %d\nstderr: %s", r.status, r.err);
	assert_int_equal(r.status, 1); /* not 128 + SIGXFSZ */
	assert_non_null(strstr(r.err, "cannot commit: disk I/O error (File too large)"));
	assert_int_equal(r.out_len, 0); /* a recording that failed prints nothing, as documented */
	tu_result_free(&r);
	tu_harvest_limited(&r, "-f 100", "archive", "-o", tar, out, NULL);
	print_message("archive: exit %d\nstderr: %s", r.status, r.err);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "File too large"));
	assert_int_equal(access(tar, F_OK), -1);
	tu_result_free(&r);
	tu_harvest_limited(&r, "-f 100", "run", "--no-history", "--dir", out, "--", "sh", "-c",
			   "head -c 200000 /dev/zero > made", NULL);
	print_message("run: exit %d\nstderr: %s", r.status, r.err);
	assert_int_equal(r.status, 128 + SIGXFSZ);
	assert_non_null(strstr(r.out, "\"exit_code\":153"));
	tu_result_free(&r);
	free(tar);
	free(db);
	free(out);
}

/* SQLite's "unable to open database file" carries the system's reason: under `ulimit -n 5`
 * the healthy database is not suspected, "Too many open files" is named. */
static void test_database_open_reason(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *db = tu_path(dir, "h.db");
	tu_result r;
	tu_harvest(&r, "collect", "--db", db, dir, NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	tu_harvest_limited(&r, "-n 5", "history", "runs", "--db", db, NULL);
	print_message("history runs under ulimit -n 5: exit %d, stderr: %s", r.status, r.err);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "unable to open database file (Too many open files)\n"));
	tu_result_free(&r);
	free(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_output_file_fields),
		cmocka_unit_test(test_worker_crash_is_artifact),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_excludes),
		cmocka_unit_test(test_since),
		cmocka_unit_test(test_since_filters),
		cmocka_unit_test(test_since_racy),
		cmocka_unit_test(test_symlink_outside),
		cmocka_unit_test(test_fifo),
		cmocka_unit_test(test_sparse_giant),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_damaged_cache),
		cmocka_unit_test(test_db_inside),
		cmocka_unit_test(test_not_a_database),
		cmocka_unit_test(test_read_only_database),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_unreadable_subdir),
		cmocka_unit_test_teardown(test_xdev, tu_cleanup),
		cmocka_unit_test_teardown(test_file_size_limit, tu_cleanup),
		cmocka_unit_test_teardown(test_database_open_reason, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
