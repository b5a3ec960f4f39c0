/* What reaches a terminal: every name in a warning, an error or text output is escaped (C0
 * and C1 controls, DEL, bytes that are not UTF-8 as \xNN), while JSON stays exact; long
 * messages keep their reason; the progress line is cleared when harvest is killed and is not
 * shown when records go to the same terminal. Also the CLI's number parsing, --timeout
 * rounding, --max-output-bytes 0, the exit status of a missing DIR and --exclude warnings. */
#include "testutil.h"
#include "tjson.h"

#include "harvest.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Names a terminal would act on: ESC sequences (clear screen, set title), a C1 CSI (U+009B,
 * valid UTF-8), BEL, a carriage return, and bytes that are not UTF-8 (a lone 0x9b is an 8-bit
 * CSI on some terminals). */
static const char *const hostile[] = {
	"\x1b[2J", "t\x1b]0;owned\x07", "c1\xc2\x9b" "2J", "cr\rx", "bad\xff", "raw\x9b" "31m",
};
#define N_HOSTILE (sizeof(hostile) / sizeof(hostile[0]))

/* Fails unless s holds no byte a terminal acts on: no control byte but '\n', no DEL, no C1
 * control, no invalid UTF-8. */
static void assert_no_raw(const char *what, const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		unsigned char ch = (unsigned char)s[i];
		if ((ch < 0x20 && ch != '\n') || ch == 0x7f)
			fail_msg("%s: raw control byte 0x%02x at %zu: %.300s", what, ch, i, s);
		size_t n = ch < 0x80 ? 1 : hv_utf8_char_length(s + i, len - i);
		if (n == 0)
			fail_msg("%s: byte 0x%02x at %zu is not UTF-8: %.300s", what, ch, i, s);
		if (n == 2 && ch == 0xc2 && (unsigned char)s[i + 1] < 0xa0)
			fail_msg("%s: raw C1 control at %zu: %.300s", what, i, s);
		i += n;
	}
}

/* The escaped form of name, as harvest shows it (a new string). */
static char *escaped(const char *name)
{
	size_t len = strlen(name);
	char *out = tu_xmalloc(4 * len + 1);
	hv_text_escape(name, len, out, 4 * len + 1);
	return out;
}

static void assert_has_escaped(const char *what, const char *s, const char *name)
{
	char *e = escaped(name);
	if (!strstr(s, e))
		fail_msg("%s: '%s' (escaped) not found in: %.500s", what, e, s);
	free(e);
}

/* A tree holding a directory of each hostile name, unreadable (mode 0) so that nobody gets a
 * warning naming it, and a readable file of each hostile name. */
static char *hostile_tree(void)
{
	char *root = tu_tmpdir();
	tu_mkdir(root, "locked");
	tu_mkdir(root, "files");
	for (size_t i = 0; i < N_HOSTILE; i++) {
		char rel[64];
		snprintf(rel, sizeof(rel), "locked/%s", hostile[i]);
		tu_mkdir(root, rel);
		char *p = tu_path(root, rel);
		tu_write(p, "inner.txt", "x\n", 2);
		assert_int_equal(chmod(p, 0), 0);
		free(p);
		snprintf(rel, sizeof(rel), "files/%s", hostile[i]);
		tu_write(root, rel, "# title\n", 8);
	}
	return root;
}

static void unlock_tree(const char *root)
{
	for (size_t i = 0; i < N_HOSTILE; i++) {
		char rel[64];
		snprintf(rel, sizeof(rel), "locked/%s", hostile[i]);
		char *p = tu_path(root, rel);
		chmod(p, 0755);
		free(p);
	}
}

/* Permission-denied warnings of walk, mime, snapshot and collect name the directory escaped;
 * the JSON on stdout still carries the exact bytes. */
static void test_warnings_escaped(void **state)
{
	(void)state;
	char *root = hostile_tree();
	char *locked = tu_path(root, "locked");
	tu_mkdir(root, "dbdir");
	char *dbdir = tu_path(root, "dbdir");
	assert_int_equal(chmod(dbdir, 0777), 0); /* nobody writes the database there */
	free(dbdir);
	char *db = tu_path(root, "dbdir/h.db");
	const char *walk[] = {"walk", locked, NULL};
	const char *mime[] = {"mime", "--no-cache", locked, NULL};
	const char *snap[] = {"snapshot", "--db", db, locked, NULL};
	const char *coll[] = {"collect", "--no-history", "--no-cache", locked, NULL};
	const char *const *cmds[] = {walk, mime, snap, coll};
	for (size_t c = 0; c < 4; c++) {
		tu_result r;
		tu_harvest_as_nobody(&r, NULL, cmds[c]);
		/* (snapshot records what it can read and exits 0: not what is tested here) */
		if (r.status != 1 && c != 2)
			fail_msg("%s: exit %d, expected 1 (warnings); stderr: %s", cmds[c][0], r.status,
				 r.err);
		assert_no_raw(cmds[c][0], r.err, r.err_len);
		for (size_t i = 0; i < N_HOSTILE; i++)
			assert_has_escaped(cmds[c][0], r.err, hostile[i]);
		assert_non_null(strstr(r.err, "Permission denied"));
		if (c == 0) {
			/* JSON is exact: ESC as \u001b, the C1 character as itself or \u009b, a
			 * byte that is not UTF-8 as \udcXX. */
			tu_recs rs;
			tu_recs_parse(&rs, r.out, r.out_len, true, "path", false);
			assert_int_equal(rs.n, N_HOSTILE);
			for (size_t i = 0; i < N_HOSTILE; i++)
				if (!tu_recs_find(&rs, hostile[i], strlen(hostile[i])))
					fail_msg("walk JSON lost the exact name #%zu", i);
			tu_recs_free(&rs);
		}
		tu_result_free(&r);
	}
	unlock_tree(root);
	free(locked);
	free(db);
}

/* A path that does not exist, named in the error of every command, escaped. */
static void test_missing_paths_escaped(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *db = tu_path(root, "h.db");
	for (size_t i = 0; i < N_HOSTILE; i++) {
		char *missing = tu_path(root, hostile[i]);
		const char *walk[] = {"walk", missing, NULL};
		const char *ls[] = {"ls", missing, NULL};
		const char *mime[] = {"mime", "--no-cache", missing, NULL};
		const char *snap[] = {"snapshot", "--db", db, missing, NULL};
		const char *coll[] = {"collect", "--db", db, missing, NULL};
		const char *run[] = {"run", "--db", db, "--dir", missing, "--", "true", NULL};
		const char *const *cmds[] = {walk, ls, mime, snap, coll, run};
		const int want[] = {3, 3, 1, 3, 3, 125};
		for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++) {
			tu_result r;
			tu_harvestv(&r, NULL, NULL, cmds[c]);
			if (r.status != want[c])
				fail_msg("%s of missing #%zu: exit %d, expected %d; stderr: %s",
					 cmds[c][0], i, r.status, want[c], r.err);
			assert_no_raw(cmds[c][0], r.err, r.err_len);
			assert_has_escaped(cmds[c][0], r.err, hostile[i]);
			tu_result_free(&r);
		}
		free(missing);
	}
	free(db);
}

/* --format text of walk, ls and mime: names escaped, valid UTF-8 kept as it is. */
static void test_text_formats_escaped(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	for (size_t i = 0; i < N_HOSTILE; i++)
		tu_write(root, hostile[i], "# title\n", 8);
	tu_write(root, "caf\xc3\xa9.md", "# title\n", 8);
	const char *walk[] = {"walk", "--format", "text", root, NULL};
	const char *ls[] = {"ls", "--format", "text", "--long", root, NULL};
	const char *mime[] = {"mime", "--no-cache", "--format", "text", root, NULL};
	const char *const *cmds[] = {walk, ls, mime};
	for (size_t c = 0; c < 3; c++) {
		tu_result r;
		tu_harvestv(&r, NULL, NULL, cmds[c]);
		if (r.status != 0)
			fail_msg("%s: exit %d, stderr: %s", cmds[c][0], r.status, r.err);
		assert_no_raw(cmds[c][0], r.out, r.out_len);
		for (size_t i = 0; i < N_HOSTILE; i++)
			assert_has_escaped(cmds[c][0], r.out, hostile[i]);
		assert_non_null(strstr(r.out, "caf\xc3\xa9.md"));
		if (c == 2)
			assert_non_null(strstr(r.out, "caf\xc3\xa9.md: text/markdown\n"));
		tu_result_free(&r);
	}
}

/* Option values and command names in usage errors are escaped too. */
static void test_usage_errors_escaped(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	const char *a1[] = {"walk", "--max-depth", "\x1b[2J", root, NULL};
	const char *a2[] = {"walk", "--sort", "c1\xc2\x9b" "2J", root, NULL};
	const char *a3[] = {"\x1b[2Jwalk", NULL};
	const char *a4[] = {"walk", "--\x1b[2J", root, NULL};
	const char *a5[] = {"history", "runs", "--since", "\x1b[2J", NULL};
	const char *const *cmds[] = {a1, a2, a3, a4, a5};
	for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++) {
		tu_result r;
		tu_harvestv(&r, NULL, NULL, cmds[c]);
		if (r.status != 2)
			fail_msg("usage #%zu: exit %d, stderr: %s", c, r.status, r.err);
		assert_no_raw("usage error", r.err, r.err_len);
		assert_non_null(strstr(r.err, "\\x1b[2J") ? strstr(r.err, "\\x1b[2J")
							   : strstr(r.err, "\\xc2\\x9b"));
		tu_result_free(&r);
	}
}

/* A message longer than the error buffer (a path deeper than PATH_MAX) keeps its reason. Such a
 * path cannot be looked up, which is not "not found": exit 1, as cat and rm report it. */
static void test_long_error_keeps_reason(void **state)
{
	(void)state;
	size_t n = 3000;
	char *path = tu_xmalloc(3 * n + 1);
	for (size_t i = 0; i < n; i++)
		memcpy(path + 3 * i, "xx/", 3);
	path[3 * n - 1] = '\0';
	const char *walk[] = {"walk", path, NULL};
	tu_result r;
	tu_harvestv(&r, NULL, NULL, walk);
	assert_int_equal(r.status, 1);
	const char *reason = ": File name too long\n";
	if (r.err_len < strlen(reason) || strcmp(r.err + r.err_len - strlen(reason), reason) != 0)
		fail_msg("the reason is lost: \"...%s\"", r.err + (r.err_len > 60 ? r.err_len - 60 : 0));
	assert_int_equal(strncmp(r.err, "harvest: xx/xx/", 15), 0);
	tu_result_free(&r);
	free(path);
}

/* A file deeper than PATH_MAX that cannot be opened: collect's skipped error (and its
 * warning) still ends with the reason. */
static void test_deep_unreadable_file_keeps_reason(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char name[201];
	memset(name, 'n', 200);
	name[200] = '\0';
	int fd = tu_deep_dir(root, name, 25); /* 25 * 201 bytes: beyond PATH_MAX (4096) */
	tu_write_at(fd, "secret.txt", 0, "x\n");
	close(fd);
	const char *args[] = {"collect", "--no-history", "--no-cache", root, NULL};
	tu_result r;
	tu_harvest_as_nobody(&r, NULL, args);
	assert_int_equal(r.status, 1);
	if (!strstr(r.out, "/secret.txt: Permission denied\""))
		fail_msg("the skipped error lost its reason: ...%s",
			 r.out + (r.out_len > 200 ? r.out_len - 200 : 0));
	if (!strstr(r.err, "/secret.txt: Permission denied\n"))
		fail_msg("the warning lost its reason: ...%s",
			 r.err + (r.err_len > 200 ? r.err_len - 200 : 0));
	tu_result_free(&r);
}

/* ---- numbers as users type them ---- */

static void expect_status(const char *const *args, int want, const char *in_err)
{
	tu_result r;
	tu_harvestv(&r, NULL, NULL, args);
	if (r.status != want || (in_err && !strstr(r.err, in_err)))
		fail_msg("harvest %s %s '%s': exit %d (expected %d), stderr: %s", args[0], args[1],
			 args[2], r.status, want, r.err);
	tu_result_free(&r);
}

/* Blanks on either side, a '+', hex, inf and nan are refused by every numeric option. */
static void test_numbers_strict(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *db = tu_path(root, "h.db");
	static const char *const bad[] = {" 5", "5 ", "\t5", "+5", "0x10", "inf", "nan", ""};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *v = bad[i];
		const char *a1[] = {"walk", "--max-depth", v, root, NULL};
		const char *a2[] = {"walk", "--threads", v, root, NULL};
		const char *a3[] = {"walk", "--max-entries", v, root, NULL};
		const char *a4[] = {"collect", "--max-files", v, "--db", db, root, NULL};
		const char *a5[] = {"collect", "--max-file-bytes", v, "--db", db, root, NULL};
		const char *a6[] = {"history", "runs", "--limit", v, "--db", db, NULL};
		const char *a7[] = {"mime", "--threads", v, root, NULL};
		expect_status(a1, 2, "--max-depth");
		expect_status(a2, 2, "--threads");
		expect_status(a3, 2, "--max-entries");
		expect_status(a4, 2, "--max-files");
		expect_status(a5, 2, "--max-file-bytes");
		expect_status(a6, 2, NULL);
		expect_status(a7, 2, "--threads");
		const char *r1[] = {"run", "--timeout", v, "--db", db, "--dir", root, "--", "true",
				    NULL};
		const char *r2[] = {"run", "--max-output-bytes", v, "--db", db, "--dir", root, "--",
				    "true", NULL};
		expect_status(r1, 125, "--timeout");
		expect_status(r2, 125, "--max-output-bytes");
	}
	/* Zero and negative timeouts are refused; so is one beyond 1e9 s. */
	static const char *const bad_timeout[] = {"0", "0.0", "-1", "1e10", "1e-7x"};
	for (size_t i = 0; i < sizeof(bad_timeout) / sizeof(bad_timeout[0]); i++) {
		const char *r1[] = {"run", "--timeout", bad_timeout[i], "--db", db, "--dir", root,
				    "--", "true", NULL};
		expect_status(r1, 125, "--timeout");
	}
	/* What is right still works. */
	const char *ok1[] = {"walk", "--max-depth", "010", "--threads", "2", root, NULL};
	expect_status(ok1, 0, NULL);
	const char *ok2[] = {"run", "--timeout", "2.5e1", "--db", db, "--dir", root, "--", "true",
			     NULL};
	expect_status(ok2, 0, NULL);
	free(db);
}

/* A positive --timeout below a millisecond is a timeout of 1 ms, not none. */
static void test_tiny_timeout(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *db = tu_path(root, "h.db");
	char *dir = tu_path(root, "d");
	tu_mkdir(root, "d");
	const char *args[] = {"run", "--timeout", "1e-7", "--db", db, "--dir", dir, "--format",
			      "json", "--", "sleep", "60", NULL};
	tu_result r;
	tu_harvestv(&r, NULL, NULL, args);
	if (r.status != 124 || !strstr(r.out, "\"timed_out\":true"))
		fail_msg("--timeout 1e-7: exit %d (expected 124), out: %s, err: %s", r.status, r.out,
			 r.err);
	tu_result_free(&r);
	free(db);
	free(dir);
}

/* --max-output-bytes 0 keeps nothing in the result; the stream is complete. */
static void test_max_output_zero(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *db = tu_path(root, "h.db");
	char *dir = tu_path(root, "d");
	tu_mkdir(root, "d");
	const char *args[] = {"run", "--max-output-bytes", "0", "--db", db, "--dir", dir, "--",
			      "sh", "-c", "echo hello; echo oops >&2", NULL};
	tu_result r;
	tu_harvestv(&r, NULL, NULL, args);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "\"stream_type\":\"stdout\",\"data\":\"hello\\n\""));
	assert_non_null(strstr(r.out, "\"stream_type\":\"stderr\",\"data\":\"oops\\n\""));
	const char *res = strstr(r.out, "\"type\":\"execution_result\"");
	assert_non_null(res);
	if (!strstr(res, "\"stdout\":\"\"") || !strstr(res, "\"stderr\":\"\"") ||
	    !strstr(res, "\"stdout_truncated\":true") || !strstr(res, "\"stderr_truncated\":true"))
		fail_msg("--max-output-bytes 0 kept output: %s", res);
	tu_result_free(&r);
	free(db);
	free(dir);
}

/* ---- smaller things ---- */

/* A missing DIR, or one that is not a directory, is exit 3 for snapshot and collect as for
 * walk, even when the database is unusable too. */
static void test_missing_dir_exit_3(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_write(root, "notdb", "plain text, not a database\n", 27);
	tu_write(root, "file", "x", 1);
	char *notdb = tu_path(root, "notdb");
	char *missing = tu_path(root, "missing");
	char *file = tu_path(root, "file");
	const char *const targets[] = {missing, file};
	for (size_t i = 0; i < 2; i++) {
		const char *s[] = {"snapshot", "--db", notdb, targets[i], NULL};
		const char *c[] = {"collect", "--db", notdb, targets[i], NULL};
		const char *w[] = {"walk", targets[i], NULL};
		expect_status(s, 3, targets[i]);
		expect_status(c, 3, targets[i]);
		expect_status(w, 3, targets[i]);
	}
	free(notdb);
	free(missing);
	free(file);
}

/* An entry whose lstat fails (its directory can be read but not searched) is skipped as an
 * error that names it. */
static void test_cannot_be_examined_names_path(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_mkdir(root, "sub");
	tu_write(root, "sub/hidden-from-lstat", "x\n", 2);
	char *sub = tu_path(root, "sub");
	assert_int_equal(chmod(sub, 0444), 0);
	const char *args[] = {"collect", "--no-history", "--no-cache", root, NULL};
	tu_result r;
	tu_harvest_as_nobody(&r, NULL, args);
	chmod(sub, 0755);
	assert_int_equal(r.status, 1);
	if (!strstr(r.err, "sub/hidden-from-lstat: cannot be examined"))
		fail_msg("the warning does not name the entry: %s", r.err);
	assert_non_null(strstr(r.out, "\"error\":\"sub/hidden-from-lstat: cannot be examined"));
	tu_result_free(&r);
	free(sub);
}

/* --exclude patterns that cannot match a name are warned about (once each, not with
 * --quiet, even when --quiet comes after them); the exit status stays 0. */
static void test_exclude_warnings(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	tu_mkdir(root, "build");
	tu_write(root, "build/a.o", "x", 1);
	tu_write(root, "keep.txt", "x", 1);
	char *db = tu_path(root, "h.db");
	const char *c[] = {"collect", "--no-history", "--no-cache", "--exclude", "build/*",
			   "--exclude", "sub/", "--exclude", "[", "--exclude", "*.o", root, NULL};
	const char *s[] = {"snapshot", "--db", db, "--exclude", "build/*", "--exclude", "sub/",
			   "--exclude", "[", "--exclude", "*.o", root, NULL};
	const char *w[] = {"walk", "--exclude", "build/*", "--exclude", "sub/", "--exclude", "[",
			   "--exclude", "*.o", root, NULL};
	const char *const *cmds[] = {c, s, w};
	for (size_t i = 0; i < 3; i++) {
		tu_result r;
		tu_harvestv(&r, NULL, NULL, cmds[i]);
		if (r.status != 0)
			fail_msg("%s: exit %d, stderr: %s", cmds[i][0], r.status, r.err);
		if (!strstr(r.err, "'build/*'") || !strstr(r.err, "'sub/'") ||
		    !strstr(r.err, "'[': a '[' without its ']'") || strstr(r.err, "'*.o'"))
			fail_msg("%s: expected warnings about build/*, sub/ and [: %s", cmds[i][0],
				 r.err);
		size_t lines = 0;
		for (size_t k = 0; k < r.err_len; k++)
			lines += r.err[k] == '\n';
		assert_int_equal(lines, 3);
		tu_result_free(&r);
	}
	/* Brackets that close, or are escaped, are fine; "[!]" is a '[' never closed. */
	const char *b[] = {"walk", "--exclude", "\\[", "--exclude", "[]]", "--exclude", "[a-z]*x",
			   "--exclude", "x\\", "--exclude", "[!]", "--exclude", "", root, NULL};
	tu_result rb;
	tu_harvestv(&rb, NULL, NULL, b);
	assert_int_equal(rb.status, 0);
	if (!strstr(rb.err, "'[!]'") || !strstr(rb.err, "empty pattern"))
		fail_msg("expected warnings about [!] and '': %s", rb.err);
	size_t nl = 0;
	for (size_t k = 0; k < rb.err_len; k++)
		nl += rb.err[k] == '\n';
	assert_int_equal(nl, 2);
	tu_result_free(&rb);
	const char *q[] = {"collect", "--no-history", "--no-cache", "--exclude", "build/*", root,
			   "--quiet", NULL};
	tu_result r;
	tu_harvestv(&r, NULL, NULL, q);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.err_len, 0);
	tu_result_free(&r);
	free(db);
}

/* ---- the progress line ---- */

/* A tree big enough that its jsonl does not fit in a pipe many times over. */
static char *wide_tree(size_t n)
{
	char *root = tu_tmpdir();
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (size_t i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%06zu", i);
		int f = openat(fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		assert_true(f >= 0);
		close(f);
	}
	close(fd);
	return root;
}

/* Reads what is available on fd into *buf within timeout_ms; returns bytes read, 0 at EOF or
 * when nothing came, -1 on error. */
static ssize_t read_some(int fd, char **buf, size_t *len, size_t *cap, int timeout_ms)
{
	struct pollfd p = {fd, POLLIN, 0};
	if (poll(&p, 1, timeout_ms) <= 0)
		return 0;
	char chunk[4096];
	ssize_t n = read(fd, chunk, sizeof(chunk));
	if (n <= 0)
		return n;
	while (*len + (size_t)n + 1 > *cap) {
		*cap = *cap ? *cap * 2 : 65536;
		*buf = tu_xrealloc(*buf, *cap);
	}
	memcpy(*buf + *len, chunk, (size_t)n);
	*len += (size_t)n;
	(*buf)[*len] = '\0';
	return n;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* SIGTERM while the progress line is shown: the line is cleared, and harvest dies of the
 * signal as it would without the handler. stdout is a pipe the test stops reading, so the
 * walk is held (blocked on write) with its progress on the terminal. */
static void test_progress_cleared_on_sigterm(void **state)
{
	(void)state;
	char *root = wide_tree(40000);
	int master, slave;
	assert_int_equal(openpty(&master, &slave, NULL, NULL, NULL), 0);
	int out[2];
	assert_int_equal(pipe(out), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(out[1], STDOUT_FILENO);
		dup2(slave, STDERR_FILENO);
		int dn = open("/dev/null", O_RDONLY);
		dup2(dn, STDIN_FILENO);
		execl(HARVEST_BIN, HARVEST_BIN, "walk", "--threads", "1", root, (char *)NULL);
		_exit(127);
	}
	close(slave);
	close(out[1]);
	char *tty = NULL, *recs = NULL;
	size_t tty_len = 0, tty_cap = 0, recs_len = 0, recs_cap = 0;
	/* Hold the walk past the one second after which progress shows, then let records flow
	 * slowly until the progress line appears. */
	tu_sleep_ms(1300);
	uint64_t give_up = mono_ms() + 120000;
	while (!(tty && strstr(tty, "entries")) && mono_ms() < give_up) {
		read_some(out[0], &recs, &recs_len, &recs_cap, 0);
		read_some(master, &tty, &tty_len, &tty_cap, 5);
	}
	if (!(tty && strstr(tty, "entries")))
		fail_msg("no progress line appeared (records read: %zu)", recs_len);
	/* Stop reading records: harvest blocks writing them, with the line on the screen. */
	tu_sleep_ms(200);
	while (read_some(master, &tty, &tty_len, &tty_cap, 50) > 0)
		;
	size_t before = tty_len;
	assert_int_equal(kill(pid, SIGTERM), 0);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	while (read_some(master, &tty, &tty_len, &tty_cap, 100) > 0)
		;
	close(master);
	close(out[0]);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGTERM)
		fail_msg("harvest did not die of SIGTERM (status 0x%x)", st);
	static const char erase[] = "\r\033[K";
	if (tty_len < before + sizeof(erase) - 1 ||
	    memcmp(tty + tty_len - (sizeof(erase) - 1), erase, sizeof(erase) - 1) != 0)
		fail_msg("the progress line was not cleared on SIGTERM (%zu bytes after the signal)",
			 tty_len - before);
	free(tty);
	free(recs);
}

/* stdout and stderr the same terminal: no progress line among the records. The walk is held
 * (the test does not read the terminal) past the second after which progress would show. */
static void test_no_progress_when_stdout_is_the_terminal(void **state)
{
	(void)state;
	char *root = wide_tree(20000);
	int master, slave;
	assert_int_equal(openpty(&master, &slave, NULL, NULL, NULL), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(slave, STDOUT_FILENO);
		dup2(slave, STDERR_FILENO);
		int dn = open("/dev/null", O_RDONLY);
		dup2(dn, STDIN_FILENO);
		execl(HARVEST_BIN, HARVEST_BIN, "walk", "--format", "nul", "--threads", "1", root,
		      (char *)NULL);
		_exit(127);
	}
	/* The slave stays open here until the end: once no process holds it, Linux may drop
	 * what the master has not read yet. */
	char *tty = NULL;
	size_t tty_len = 0, tty_cap = 0;
	int st = 0;
	/* Once the first records are out, harvest is running (its clock started): hold it. */
	uint64_t give_up = mono_ms() + 120000;
	while (tty_len == 0 && mono_ms() < give_up)
		read_some(master, &tty, &tty_len, &tty_cap, 100);
	tu_sleep_ms(1300);
	for (;;) {
		read_some(master, &tty, &tty_len, &tty_cap, 50);
		if (waitpid(pid, &st, WNOHANG) == pid)
			break;
	}
	while (read_some(master, &tty, &tty_len, &tty_cap, 300) > 0)
		;
	close(slave);
	close(master);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (tty_len < 20000 * 8) /* the records came through */
		fail_msg("%zu bytes on the terminal: %.200s", tty_len, tty ? tty : "");
	if (memmem(tty, tty_len, "entries", 7) || memmem(tty, tty_len, "\033[K", 3))
		fail_msg("a progress line among the records on the same terminal");
	free(tty);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_warnings_escaped, tu_cleanup),
		cmocka_unit_test_teardown(test_missing_paths_escaped, tu_cleanup),
		cmocka_unit_test_teardown(test_text_formats_escaped, tu_cleanup),
		cmocka_unit_test_teardown(test_usage_errors_escaped, tu_cleanup),
		cmocka_unit_test(test_long_error_keeps_reason),
		cmocka_unit_test_teardown(test_deep_unreadable_file_keeps_reason, tu_cleanup),
		cmocka_unit_test_teardown(test_numbers_strict, tu_cleanup),
		cmocka_unit_test_teardown(test_tiny_timeout, tu_cleanup),
		cmocka_unit_test_teardown(test_max_output_zero, tu_cleanup),
		cmocka_unit_test_teardown(test_missing_dir_exit_3, tu_cleanup),
		cmocka_unit_test_teardown(test_cannot_be_examined_names_path, tu_cleanup),
		cmocka_unit_test_teardown(test_exclude_warnings, tu_cleanup),
		cmocka_unit_test_teardown(test_progress_cleared_on_sigterm, tu_cleanup),
		cmocka_unit_test_teardown(test_no_progress_when_stdout_is_the_terminal, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
