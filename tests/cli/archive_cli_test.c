/* End-to-end tests of `harvest archive` and `harvest history get --run`: archives extracted
 * with GNU tar, bsdtar and unzip and compared with the tree (walking both: type, bytes,
 * symlink targets, modes, file mtimes); symlinks kept (relative, absolute outside, dangling);
 * hostile names exact (newline, invalid UTF-8, tab, markup, a long path); a FIFO skipped with
 * a warning, no hang; no member absolute or with ".."; a 5 GiB sparse file streamed in bounded
 * memory (peak RSS of the harvest child by getrusage); a terminal stdout refused; write errors
 * (/dev/full, EPIPE, a full tmpfs) as one line and a nonzero status, leaving no half file;
 * unknown extensions refused; a run's stored artifacts as tar.gz and zip with MANIFEST.json. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- trees ------------------------------------------------------------------------------ */

static void sym(const char *root, const char *target, const char *rel)
{
	char *p = tu_path(root, rel);
	if (symlink(target, p) != 0)
		fail_msg("symlink %s: %s", p, strerror(errno));
	free(p);
}

static void mode(const char *root, const char *rel, mode_t m)
{
	char *p = tu_path(root, rel);
	assert_int_equal(chmod(p, m), 0);
	free(p);
}

/* A tree with files (empty, binary, executable), nested directories, symlinks (relative,
 * absolute outside, dangling, to a directory) and, when hostile, names with a newline, a tab,
 * bytes that are not UTF-8, markup and a path longer than ustar's 100 bytes. */
static char *make_tree(const char *dir, bool hostile)
{
	char *root = tu_path(dir, "tree");
	tu_mkdir(dir, "tree");
	tu_write(root, "a.txt", "alpha\n", 6);
	tu_write(root, "empty", "", 0);
	char bin[200000];
	for (size_t i = 0; i < sizeof(bin); i++)
		bin[i] = (char)((i * 2654435761u) >> 13);
	tu_write(root, "bin.dat", bin, sizeof(bin));
	tu_mkdir(root, "sub");
	tu_mkdir(root, "sub/deep");
	tu_write(root, "sub/deep/run.sh", "#!/bin/sh\n", 10);
	mode(root, "sub/deep/run.sh", 0750);
	tu_mkdir(root, "private");
	tu_write(root, "private/key", "k", 1);
	mode(root, "private", 0700);
	tu_write(root, ".hidden", "h", 1);
	tu_write(root, "caf\xc3\xa9.txt", "utf8", 4);
	sym(root, "../a.txt", "sub/up");
	sym(root, "/etc/passwd", "outside");
	sym(root, "does/not/exist", "dangling");
	sym(root, "sub", "subdir-link");
	if (hostile) {
		tu_write(root, "new\nline", "nl", 2);
		tu_write(root, "tab\tname", "tab", 3);
		tu_write(root, "bad\xff\xfe\x80name", "bad", 3);
		tu_write(root, "<img src=x onerror=alert(1)>.txt", "x", 1);
		tu_write(root, "-rf", "dash", 4);
		char longname[201];
		memset(longname, 'L', 200);
		longname[200] = '\0';
		tu_write(root, longname, "long", 4);
		tu_mkdir(root, "sub/deep/a-directory-with-a-rather-long-name-to-make-the-path-long");
		tu_write(root,
			 "sub/deep/a-directory-with-a-rather-long-name-to-make-the-path-long/"
			 "and-a-file-with-a-long-name-too\xff.txt",
			 "deep", 4);
		sym(root, "\xff\n", "link-to-hostile");
	}
	return root;
}

/* Compares the trees a and b entry by entry (both ways): same names, types, file bytes,
 * symlink targets, permission bits (dirs too when dir_modes) and file mtimes (seconds). */
static void compare_dirs(const char *a, const char *b, bool dir_modes);

static void compare_entry(const char *pa, const char *pb, bool dir_modes)
{
	struct stat sa, sb;
	if (lstat(pa, &sa) != 0)
		fail_msg("%s: %s", pa, strerror(errno));
	if (lstat(pb, &sb) != 0)
		fail_msg("missing after extraction: %s", pb);
	if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT))
		fail_msg("%s: type %o, extracted %o", pa, sa.st_mode & S_IFMT, sb.st_mode & S_IFMT);
	if (S_ISLNK(sa.st_mode)) {
		char ta[4096], tb[4096];
		ssize_t na = readlink(pa, ta, sizeof(ta)), nb = readlink(pb, tb, sizeof(tb));
		if (na != nb || na < 0 || memcmp(ta, tb, (size_t)na) != 0)
			fail_msg("%s: symlink target differs", pa);
		return;
	}
	if (S_ISDIR(sa.st_mode)) {
		if (dir_modes && (sa.st_mode & 07777) != (sb.st_mode & 07777))
			fail_msg("%s: mode %o, extracted %o", pa, sa.st_mode & 07777, sb.st_mode & 07777);
		compare_dirs(pa, pb, dir_modes);
		return;
	}
	if ((sa.st_mode & 07777) != (sb.st_mode & 07777))
		fail_msg("%s: mode %o, extracted %o", pa, sa.st_mode & 07777, sb.st_mode & 07777);
	if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec)
		fail_msg("%s: mtime %lld, extracted %lld", pa, (long long)sa.st_mtim.tv_sec,
			 (long long)sb.st_mtim.tv_sec);
	size_t la, lb;
	char *da = tu_read_file(pa, &la), *db = tu_read_file(pb, &lb);
	assert_non_null(da);
	assert_non_null(db);
	if (la != lb || memcmp(da, db, la) != 0)
		fail_msg("%s: bytes differ", pa);
	free(da);
	free(db);
}

static size_t count_entries(const char *d)
{
	DIR *dh = opendir(d);
	assert_non_null(dh);
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(dh)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(dh);
	return n;
}

static void compare_dirs(const char *a, const char *b, bool dir_modes)
{
	if (count_entries(a) != count_entries(b))
		fail_msg("%s: %zu entries, extracted %zu", a, count_entries(a), count_entries(b));
	DIR *dh = opendir(a);
	assert_non_null(dh);
	struct dirent *e;
	while ((e = readdir(dh))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *pa = tu_path(a, e->d_name), *pb = tu_path(b, e->d_name);
		compare_entry(pa, pb, dir_modes);
		free(pa);
		free(pb);
	}
	closedir(dh);
}

/* ---- running ---------------------------------------------------------------------------- */

static void run_ok(const char *cwd, char *const argv[])
{
	tu_result r;
	tu_run(&r, cwd, NULL, argv);
	if (r.status != 0)
		fail_msg("%s exited %d: %s", argv[0], r.status, r.err);
	tu_result_free(&r);
}

/* harvest archive root -o file [extra]; asserts exit status want and a quiet stderr (when 0). */
static void archive(const char *root, const char *file, const char *extra, int want)
{
	tu_result r;
	if (extra)
		tu_harvest(&r, "archive", root, "-o", file, "--format", extra, NULL);
	else
		tu_harvest(&r, "archive", root, "-o", file, NULL);
	if (r.status != want)
		fail_msg("harvest archive exited %d (want %d): %s", r.status, want, r.err);
	if (want == 0)
		assert_int_equal(r.err_len, 0);
	tu_result_free(&r);
}

/* Extracts file into a new directory dir/name with argv-style command parts. */
static char *extract(const char *dir, const char *name, const char *tool, const char *file)
{
	char *out = tu_path(dir, name);
	tu_mkdir(dir, name);
	if (!strcmp(tool, "tar")) {
		char *argv[] = {"tar", "-xf", (char *)file, "-C", out, NULL};
		run_ok(NULL, argv);
	} else if (!strcmp(tool, "bsdtar")) {
		char *argv[] = {"bsdtar", "-xpf", (char *)file, "-C", out, NULL};
		run_ok(NULL, argv);
	} else {
		char *argv[] = {"unzip", "-q", (char *)file, "-d", out, NULL};
		run_ok(NULL, argv);
	}
	return out;
}

/* The member names of an archive as bsdtar -t lists them (raw bytes, one a line). */
static void check_member_names(const char *file)
{
	char *argv[] = {"bsdtar", "-tf", (char *)file, NULL};
	tu_result r;
	tu_run(&r, NULL, NULL, argv);
	assert_int_equal(r.status, 0);
	assert_true(r.out_len > 0);
	/* Names with a newline make lines of their own: each line still must not be absolute
	 * or hold a ".." component. */
	char *save = NULL;
	for (char *line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		assert_true(line[0] != '/');
		assert_null(strstr(line, "/../"));
		assert_true(strncmp(line, "../", 3) != 0);
		assert_true(strcmp(line, "..") != 0);
	}
	tu_result_free(&r);
}

/* ---- a tree, each format, each extractor ------------------------------------------------ */

static void roundtrip(const char *fmt_file, const char *tool, bool hostile)
{
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, hostile);
	char *file = tu_path(dir, fmt_file);
	archive(root, file, NULL, 0);
	check_member_names(file);
	char *out = extract(dir, "x", tool, file);
	compare_dirs(root, out, true);
	free(out);
	free(file);
	free(root);
}

static void test_tar_gnu_tar(void **s) { (void)s; roundtrip("t.tar", "tar", true); }
static void test_tar_bsdtar(void **s) { (void)s; roundtrip("t.tar", "bsdtar", true); }
static void test_tgz_gnu_tar(void **s) { (void)s; roundtrip("t.tar.gz", "tar", true); }
static void test_tgz_bsdtar(void **s) { (void)s; roundtrip("t.tgz", "bsdtar", true); }
static void test_zip_bsdtar(void **s) { (void)s; roundtrip("t.zip", "bsdtar", true); }

/* unzip rewrites control characters and bytes that are not UTF-8 in names (its own safety
 * rule), so it gets the tree without them; directory modes are not compared (unzip -q leaves
 * them to the umask for directories it creates before their entry). */
static void test_zip_unzip(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, false);
	char *file = tu_path(dir, "t.zip");
	archive(root, file, NULL, 0);
	char *out = extract(dir, "x", "unzip", file);
	compare_dirs(root, out, false);
	free(out);
	free(file);
	free(root);
}

/* Standard output, the default: a tar. */
static void test_stdout_is_tar(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, true);
	char *file = tu_path(dir, "stdout.bin");
	char *argv[] = {HARVEST_BIN, "archive", root, NULL};
	char *err = NULL;
	size_t err_len;
	assert_int_equal(tu_run_to_file(NULL, argv, file, &err, &err_len), 0);
	assert_int_equal(err_len, 0);
	free(err);
	char *out = extract(dir, "x", "tar", file);
	compare_dirs(root, out, true);
	free(out);
	free(file);
	free(root);
}

static void test_excludes_and_hidden(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, false);
	char *file = tu_path(dir, "t.tar");
	tu_result r;
	tu_harvest(&r, "archive", "--no-hidden", "--exclude", "sub", "-o", file, root, NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	char *out = extract(dir, "x", "bsdtar", file);
	struct stat st;
	char *p = tu_path(out, ".hidden");
	assert_int_equal(lstat(p, &st), -1);
	free(p);
	p = tu_path(out, "sub");
	assert_int_equal(lstat(p, &st), -1);
	free(p);
	p = tu_path(out, "a.txt");
	assert_int_equal(lstat(p, &st), 0);
	free(p);
	free(out);
	free(file);
	free(root);
}

/* `archive . -o ./a.tar` again and again: the new archive, written under a temporary name,
 * leaves out both itself and the a.tar it replaces, so it never holds an earlier archive
 * and does not grow. */
static void test_rerun_inside_tree(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	tu_mkdir(dir, "t");
	char *root = tu_path(dir, "t");
	tu_write(root, "f.txt", "hello\n", 6);
	off_t sizes[3];
	for (int i = 0; i < 3; i++) {
		const char *args[] = {"archive", "-o", "./a.tar", ".", NULL};
		tu_result r;
		tu_harvestv(&r, root, NULL, args);
		assert_int_equal(r.status, 0);
		tu_result_free(&r);
		char *a = tu_path(root, "a.tar");
		struct stat st;
		assert_int_equal(stat(a, &st), 0);
		sizes[i] = st.st_size;
		char *argv[] = {"tar", "-tf", a, NULL};
		tu_result l;
		tu_run(&l, NULL, NULL, argv);
		assert_int_equal(l.status, 0);
		if (strstr(l.out, "a.tar") || !strstr(l.out, "f.txt"))
			fail_msg("run %d: the archive holds: %s", i + 1, l.out);
		tu_result_free(&l);
		free(a);
	}
	assert_int_equal(sizes[1], sizes[0]);
	assert_int_equal(sizes[2], sizes[0]);
	free(root);
}

/* -o /dev/stdout, and /proc/self/fd/1, when standard output is a pipe: links to no path but
 * to the pipe ("pipe:[N]"), written in place as the shell's > writes them, a tar by default
 * as standard output is. */
static void test_dev_stdout_pipe(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, true);
	const char *targets[] = {"/dev/stdout", "/proc/self/fd/1"};
	for (size_t i = 0; i < 2; i++) {
		char *file = tu_path(dir, "piped.tar");
		char script[8192];
		snprintf(script, sizeof(script), "'%s' archive -o %s '%s' | cat > '%s'", HARVEST_BIN,
			 targets[i], root, file);
		char *argv[] = {"bash", "-o", "pipefail", "-c", script, NULL};
		tu_result r;
		tu_run(&r, NULL, NULL, argv);
		if (r.status != 0)
			fail_msg("-o %s into a pipe: exit %d: %s", targets[i], r.status, r.err);
		tu_result_free(&r);
		char *out = extract(dir, i ? "y" : "x", "tar", file);
		compare_dirs(root, out, true);
		free(out);
		free(file);
	}
	free(root);
}

/* harvest processes sharing one stderr, as commands run side by side in a sandbox do: each
 * warning is one write, so every line arrives whole (a message written piece by piece had
 * three processes' lines mixed character by character). */
static void test_shared_stderr_lines_whole(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	tu_mkdir(dir, "fifos");
	char *fifos = tu_path(dir, "fifos");
	enum { N = 600 };
	for (int i = 0; i < N; i++) {
		char name[64];
		snprintf(name, sizeof(name), "fifo_with_a_rather_long_name_%d", i);
		char *p = tu_path(fifos, name);
		assert_int_equal(mkfifo(p, 0644), 0);
		free(p);
	}
	char script[8192];
	snprintf(script, sizeof(script),
		 "for i in 1 2 3 4; do '%s' archive '%s' >/dev/null & done; wait", HARVEST_BIN,
		 fifos);
	char *argv[] = {"sh", "-c", script, NULL};
	tu_result r;
	tu_run(&r, NULL, NULL, argv);
	size_t lines = 0;
	for (char *line = r.err, *nl; *line; line = nl + 1) {
		nl = strchr(line, '\n');
		if (!nl)
			fail_msg("a last line without its newline: %s", line);
		*nl = '\0';
		/* "harvest: FIFOS/fifo_with_a_rather_long_name_K: a fifo, not archived" */
		char head[4200];
		snprintf(head, sizeof(head), "harvest: %s/fifo_with_a_rather_long_name_", fifos);
		const char *tail = ": a fifo, not archived";
		size_t len = strlen(line), hl = strlen(head), tl = strlen(tail);
		bool whole = len > hl + tl && strncmp(line, head, hl) == 0 &&
			     strcmp(line + len - tl, tail) == 0;
		for (size_t i = hl; whole && i < len - tl; i++)
			whole = line[i] >= '0' && line[i] <= '9';
		if (!whole)
			fail_msg("a mixed line: %s", line);
		lines++;
	}
	assert_int_equal(lines, 4 * N);
	tu_result_free(&r);
	free(fifos);
}

/* root (holding ok.txt) archived as a tar lists tar_has; a collect of it into dir's h.db,
 * then that run written to zip: exit 1 (the stderr saying why, when given), the manifest
 * naming the artifact left out as unsafe_path and ok.txt archived, and the zip sound. */
static void check_left_out_of_run_zip(const char *dir, const char *root, const char *zip,
				      const char *tar_has, const char *why)
{
	char *tar = tu_path(dir, "t.tar"), *db = tu_path(dir, "h.db");
	tu_result r;
	tu_harvest(&r, "archive", "-o", tar, root, NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	char *list[] = {"tar", "-tf", tar, NULL};
	tu_run(&r, NULL, NULL, list);
	assert_int_equal(r.status, 0);
	if (!strstr(r.out, tar_has))
		fail_msg("the tar does not list '%s'", tar_has);
	tu_result_free(&r);
	tu_harvest(&r, "collect", "--db", db, "--no-cache", root, NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	unlink(zip);
	tu_harvest(&r, "history", "get", "--db", db, "--run", "1", "-o", zip, NULL);
	if (r.status != 1 || (why && !strstr(r.err, why)))
		fail_msg("history get: exit %d: %.300s", r.status, r.err);
	tu_result_free(&r);
	char *manifest[] = {"unzip", "-p", (char *)zip, "MANIFEST.json", NULL};
	tu_run(&r, NULL, NULL, manifest);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "\"archived\":false,\"reason\":\"unsafe_path\""));
	assert_non_null(strstr(r.out, "\"path\":\"ok.txt\""));
	tu_result_free(&r);
	char *test[] = {"unzip", "-tq", (char *)zip, NULL};
	tu_run(&r, NULL, NULL, test);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	free(db);
	free(tar);
}

/* A member path longer than a zip name holds (16-bit length; libarchive builds the header in
 * a 64 KiB buffer): left out of a zip with a warning, before libarchive sees it, the shorter
 * ones kept and the zip sound; kept by a tar; unsafe_path in a run's zip manifest. */
static void test_long_paths_in_zip(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	tu_mkdir(dir, "t");
	char *root = tu_path(dir, "t");
	/* 262 levels of 250-byte names: the file's path is 65,752 bytes, deeper than PATH_MAX. */
	char name[251];
	memset(name, 'n', 250);
	name[250] = '\0';
	int fd = tu_deep_dir(root, name, 262);
	tu_write_at(fd, "deep.txt", 0644, "deep\n");
	close(fd);
	tu_write(root, "ok.txt", "o", 1);
	char *zip = tu_path(dir, "t.zip");
	tu_result r;
	tu_harvest(&r, "archive", "-o", zip, root, NULL);
	if (r.status != 1 || !strstr(r.err, "a path too long for zip"))
		fail_msg("zip: exit %d: %.300s", r.status, r.err);
	tu_result_free(&r);
	char *argv[] = {"bsdtar", "-tf", zip, NULL};
	tu_run(&r, NULL, NULL, argv);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "ok.txt\n"));
	assert_null(strstr(r.out, "deep.txt"));
	assert_non_null(strstr(r.out, name)); /* the shallower directories are kept */
	tu_result_free(&r);
	/* a tar holds it; a run's zip leaves the recorded deep file out */
	check_left_out_of_run_zip(dir, root, zip, "/deep.txt\n", "a path too long for zip");
	free(zip);
	free(root);
}

/* A name with a backslash: kept by a tar, left out of a zip (zip readers take it for a
 * separator: "..\\x" would leave the directory), with a warning, and as unsafe_path in a
 * run's manifest. */
static void test_backslash_names_in_zip(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	tu_mkdir(dir, "t");
	char *root = tu_path(dir, "t");
	tu_write(root, "a\\b.txt", "a", 1);
	tu_write(root, "..\\up.txt", "u", 1);
	tu_write(root, "ok.txt", "o", 1);
	char *zip = tu_path(dir, "t.zip");
	tu_result r;
	tu_harvest(&r, "archive", "-o", zip, root, NULL);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "up.txt: not a safe member path"));
	assert_non_null(strstr(r.err, "b.txt: not a safe member path"));
	tu_result_free(&r);
	char *argv[] = {"bsdtar", "-tf", zip, NULL};
	tu_run(&r, NULL, NULL, argv);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "ok.txt\n");
	tu_result_free(&r);
	/* a tar keeps them (GNU tar shows a backslash as \\); a run's zip leaves them out */
	check_left_out_of_run_zip(dir, root, zip, "..\\\\up.txt\n", NULL);
	free(zip);
	free(root);
}

/* ---- special files, a huge sparse file -------------------------------------------------- */

/* A file dated 2300 (past what nanoseconds in an int64 reach) keeps its date in a tar, to the
 * nanosecond, as tar keeps it; a zip, whose times (its 32-bit Unix time field) end in
 * February 2106, holds its last time. */
static void test_far_future_time(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	tu_mkdir(dir, "t");
	char *root = tu_path(dir, "t");
	tu_write(root, "far", "x", 1);
	char *f = tu_path(root, "far");
	tu_make_far_future(f);
	struct stat st;
	char *file = tu_path(dir, "t.tar");
	tu_result r;
	tu_harvest(&r, "archive", root, "-o", file, NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	char *out = extract(dir, "x", "tar", file);
	char *g = tu_path(out, "far");
	assert_int_equal(stat(g, &st), 0);
	if (st.st_mtim.tv_sec != TU_FAR_FUTURE_SEC || st.st_mtim.tv_nsec != 500000000)
		fail_msg("extracted mtime %lld.%09ld, archived %lld.500000000",
			 (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec,
			 (long long)TU_FAR_FUTURE_SEC);
	free(g);
	free(out);
	free(file);
	file = tu_path(dir, "t.zip");
	tu_harvest(&r, "archive", "--format", "zip", root, "-o", file, NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	char *argv[] = {"unzip", "-Z", "-T", file, NULL};
	tu_run(&r, NULL, NULL, argv);
	assert_int_equal(r.status, 0);
	/* zipinfo -T: yyyymmdd.hhmmss, from the Unix time field */
	if (!strstr(r.out, " 210602"))
		fail_msg("zip listing: %s", r.out);
	tu_result_free(&r);
	free(file);
	free(f);
	free(root);
}

static void test_fifo_skipped(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, false);
	char *p = tu_path(root, "sub/pipe");
	assert_int_equal(mkfifo(p, 0644), 0);
	free(p);
	char *file = tu_path(dir, "t.tar");
	tu_result r;
	/* a FIFO opened for reading would block forever (the test's timeout would end it) */
	tu_harvest(&r, "archive", root, "-o", file, NULL);
	assert_int_equal(r.status, 1);
	/* named under DIR as given, as the walk's own warnings are */
	char want[4200];
	snprintf(want, sizeof(want), "harvest: %s/sub/pipe: a fifo, not archived\n", root);
	assert_string_equal(r.err, want);
	tu_result_free(&r);
	/* the rest is archived all the same */
	char *out = extract(dir, "x", "tar", file);
	p = tu_path(root, "sub/pipe");
	assert_int_equal(unlink(p), 0);
	free(p);
	compare_dirs(root, out, true);
	/* --quiet: no warning, same status */
	p = tu_path(root, "pipe2");
	assert_int_equal(mkfifo(p, 0644), 0);
	free(p);
	tu_harvest(&r, "archive", "--quiet", root, "-o", file, NULL);
	assert_int_equal(r.status, 1);
	assert_int_equal(r.err_len, 0);
	tu_result_free(&r);
	free(out);
	free(file);
	free(root);
}

struct sparse_ctx {
	const char *root;
	uint64_t bytes;
};

/* In a child of its own (so RUSAGE_CHILDREN covers harvest alone): harvest archive ROOT with
 * stdout on a pipe read here; exits 0 when the stream held the whole file and harvest's peak
 * RSS stayed under 256 MiB. */
static int sparse_child(void *arg)
{
	struct sparse_ctx *c = arg;
	int p[2];
	if (pipe(p) != 0)
		return 10;
	pid_t pid = fork();
	if (pid < 0)
		return 11;
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		close(p[0]);
		close(p[1]);
		execl(HARVEST_BIN, HARVEST_BIN, "archive", c->root, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char *buf = tu_xmalloc(1 << 20);
	uint64_t total = 0;
	bool header_ok = false;
	ssize_t n;
	while ((n = read(p[0], buf, 1 << 20)) > 0) {
		/* The first header names big: its own, or the pax header (type 'x') of its
		 * mtime's nanoseconds, named for it. */
		if (total == 0 && n >= 512)
			header_ok = memcmp(buf, "big", 4) == 0 ||
				    (buf[156] == 'x' && memmem(buf, 100, "/big", 5) != NULL);
		total += (uint64_t)n;
	}
	free(buf);
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 12;
	struct rusage ru;
	getrusage(RUSAGE_CHILDREN, &ru);
	fprintf(stderr, "archive of a 5 GiB sparse file: %llu bytes, peak RSS %ld KiB\n",
		(unsigned long long)total, ru.ru_maxrss);
	if (!header_ok)
		return 13;
	if (total < (5ull << 30) + 512)
		return 14;
	if (ru.ru_maxrss > 256 * 1024)
		return 15;
	return 0;
}

static void test_sparse_5g_bounded_memory(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = tu_path(dir, "tree");
	tu_mkdir(dir, "tree");
	char *big = tu_path(root, "big");
	int fd = open(big, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 5ll << 30), 0);
	assert_int_equal(pwrite(fd, "end", 3, (5ll << 30) - 3), 3);
	close(fd);
	struct sparse_ctx c = {.root = root};
	assert_int_equal(tu_in_child(sparse_child, &c), 0);
	free(big);
	free(root);
}

/* ---- output: terminals, errors, temporary files ----------------------------------------- */

static void test_terminal_refused(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, false);
	int master, slave;
	assert_int_equal(openpty(&master, &slave, NULL, NULL, NULL), 0);
	int errp[2];
	assert_int_equal(pipe(errp), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(slave, STDOUT_FILENO);
		dup2(errp[1], STDERR_FILENO);
		close(master);
		execl(HARVEST_BIN, HARVEST_BIN, "archive", root, (char *)NULL);
		_exit(127);
	}
	close(slave);
	close(errp[1]);
	char err[1024] = {0};
	ssize_t n, got = 0;
	while ((n = read(errp[0], err + got, sizeof(err) - 1 - (size_t)got)) > 0)
		got += n;
	close(errp[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 2);
	assert_non_null(strstr(err, "refusing to write an archive to a terminal"));
	close(master);
	free(root);
}

static void test_dev_full(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, false);
	const char *fmts[] = {"tar", "tar.gz", "zip"};
	for (size_t i = 0; i < 3; i++) {
		tu_result r;
		tu_harvest(&r, "archive", root, "-o", "/dev/full", "--format", fmts[i], NULL);
		assert_int_equal(r.status, 1);
		assert_string_equal(r.err,
				    "harvest: /dev/full: writing the archive: No space left on device\n");
		tu_result_free(&r);
	}
	struct stat st;
	assert_int_equal(stat("/dev/full", &st), 0);
	assert_true(S_ISCHR(st.st_mode)); /* written in place, never replaced */
	free(root);
}

static void test_broken_pipe(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = tu_path(dir, "tree");
	tu_mkdir(dir, "tree");
	size_t n = 8u << 20;
	char *big = tu_xmalloc(n);
	memset(big, 'p', n);
	tu_write(root, "big", big, n);
	free(big);
	char script[4096];
	snprintf(script, sizeof(script),
		 "{ '%s' archive '%s' 2>'%s/err'; echo $? >'%s/rc'; } | head -c 10 >/dev/null",
		 HARVEST_BIN, root, dir, dir);
	char *argv[] = {"sh", "-c", script, NULL};
	run_ok(NULL, argv);
	char *p = tu_path(dir, "rc");
	char *rc = tu_read_file(p, NULL);
	free(p);
	assert_non_null(rc);
	assert_string_equal(rc, "1\n");
	p = tu_path(dir, "err");
	char *err = tu_read_file(p, NULL);
	free(p);
	assert_string_equal(err, "harvest: standard output: writing the archive: Broken pipe\n");
	free(rc);
	free(err);
	free(root);
}

static void test_no_space_leaves_no_file(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = tu_path(dir, "tree");
	tu_mkdir(dir, "tree");
	size_t n = 4u << 20;
	char *big = tu_xmalloc(n);
	for (size_t i = 0; i < n; i++)
		big[i] = (char)(i * 7919u >> 5);
	tu_write(root, "big", big, n);
	free(big);
	tu_mkdir(dir, "small");
	char *small = tu_path(dir, "small");
	if (mount("none", small, "tmpfs", 0, "size=1m") != 0)
		fail_msg("mount tmpfs: %s", strerror(errno));
	tu_cleanup_umount(small);
	char *file = tu_path(small, "out.tar");
	tu_result r;
	tu_harvest(&r, "archive", root, "-o", file, NULL);
	assert_int_equal(r.status, 1);
	char want[4096];
	snprintf(want, sizeof(want), "harvest: %s: writing the archive: No space left on device\n",
		 file);
	assert_string_equal(r.err, want);
	tu_result_free(&r);
	assert_int_equal(count_entries(small), 0); /* no half file, no temporary file */
	/* an existing FILE is kept as it was */
	tu_write(small, "out.tar", "old", 3);
	tu_harvest(&r, "archive", root, "-o", file, NULL);
	assert_int_equal(r.status, 1);
	tu_result_free(&r);
	assert_int_equal(count_entries(small), 1);
	size_t len;
	char *old = tu_read_file(file, &len);
	assert_int_equal(len, 3);
	assert_memory_equal(old, "old", 3);
	free(old);
	free(file);
	free(small);
	free(root);
}

static void test_usage_errors(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, false);
	char *file = tu_path(dir, "t.rar");
	tu_result r;
	tu_harvest(&r, "archive", root, "-o", file, NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "unknown archive extension"));
	tu_result_free(&r);
	struct stat st;
	assert_int_equal(stat(file, &st), -1); /* nothing written */
	/* --format decides for any name */
	archive(root, file, "zip", 0);
	char *argv[] = {"unzip", "-tq", file, NULL};
	run_ok(NULL, argv);
	tu_harvest(&r, "archive", root, "--format", "rar", NULL);
	assert_int_equal(r.status, 2);
	tu_result_free(&r);
	tu_harvest(&r, "archive", NULL);
	assert_int_equal(r.status, 2);
	tu_result_free(&r);
	char *missing = tu_path(dir, "missing");
	char *tarfile = tu_path(dir, "t.tar");
	tu_harvest(&r, "archive", missing, "-o", tarfile, NULL);
	assert_int_equal(r.status, 3);
	assert_non_null(strstr(r.err, "missing"));
	assert_int_equal(stat(tarfile, &st), -1);
	free(tarfile);
	tu_result_free(&r);
	tu_harvest(&r, "archive", "--help", NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "usage: harvest archive"));
	tu_result_free(&r);
	/* -o '': a usage error naming the option, for archive and history get alike */
	tu_harvest(&r, "archive", root, "-o", "", NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "-o: empty path"));
	tu_result_free(&r);
	char *db = tu_path(dir, "h.db");
	tu_harvest(&r, "history", "get", "--db", db, "1", "-o", "", NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "-o: empty path"));
	tu_result_free(&r);
	assert_int_equal(stat(db, &st), -1); /* refused before anything was opened */
	free(db);
	free(missing);
	free(file);
	free(root);
}

/* A FILE whose name is as long as a name may be (255 bytes): the temporary file beside it has a
 * short name of its own, so -o works, creating and then replacing it. */
static void test_longest_name(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, false);
	char name[256];
	memset(name, 'n', 251);
	memcpy(name + 251, ".tar", 5);
	assert_int_equal(strlen(name), 255);
	char *file = tu_path(dir, name);
	for (int round = 0; round < 2; round++) {
		tu_result r;
		tu_harvest(&r, "archive", root, "-o", file, NULL);
		if (r.status != 0)
			fail_msg("round %d: status %d: %s", round, r.status, r.err);
		tu_result_free(&r);
		char *argv[] = {"tar", "-tf", file, NULL};
		run_ok(NULL, argv);
	}
	/* Nothing but the tree and the archive is left in the directory. */
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *de;
	int others = 0;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		    strcmp(de->d_name, name) && strcmp(de->d_name, "tree"))
			others++;
	closedir(d);
	assert_int_equal(others, 0);
	free(file);
	free(root);
}

/* ---- a run's artifacts ------------------------------------------------------------------ */

static void test_history_get_run(void **s)
{
	(void)s;
	char *dir = tu_tmpdir();
	char *root = make_tree(dir, true);
	char *db = tu_path(dir, "h.db");
	tu_result r;
	tu_harvest(&r, "collect", "--db", db, "--no-cache", root, NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	/* the artifacts are the regular files collect takes: the tree without the dot-file
	 * and the symlinks */
	char *p = tu_path(root, ".hidden");
	assert_int_equal(unlink(p), 0);
	free(p);
	const char *links[] = {"sub/up", "outside", "dangling", "subdir-link", "link-to-hostile"};
	for (size_t i = 0; i < 5; i++) {
		p = tu_path(root, links[i]);
		assert_int_equal(unlink(p), 0);
		free(p);
	}
	const char *names[] = {"run.tar.gz", "run.zip", "run.tar"};
	for (size_t i = 0; i < 3; i++) {
		char *file = tu_path(dir, names[i]);
		tu_harvest(&r, "history", "get", "--db", db, "--run", "1", "-o", file, NULL);
		if (r.status != 0)
			fail_msg("history get --run: %d %s", r.status, r.err);
		tu_result_free(&r);
		check_member_names(file);
		char xname[16];
		snprintf(xname, sizeof(xname), "x%zu", i);
		char *out = extract(dir, xname, "bsdtar", file);
		char *man = tu_path(out, "MANIFEST.json");
		size_t mlen;
		char *m = tu_read_file(man, &mlen);
		assert_non_null(m);
		assert_non_null(strstr(m, "{\"run_id\":1,\"artifacts\":[{\"path\":"));
		assert_non_null(strstr(m, "\"path\":\"new\\nline\",\"mime_type\":\"text/plain\","
					  "\"size\":2,\"sha256\":\"1843653496800edfd0d30326c82f53b0"));
		assert_null(strstr(m, "\"archived\":false"));
		free(m);
		assert_int_equal(unlink(man), 0);
		free(man);
		/* stored files have mode 0644 and the time they were recorded: bytes and names
		 * are compared here */
		char *argv[] = {"sh", "-c", "cd \"$0\" && find . -type f -exec chmod 0644 {} + && "
			       "find . -type d -exec chmod 0755 {} + && find . -exec touch -h -d @0 {} +",
			       root, NULL};
		run_ok(NULL, argv);
		char *argv2[] = {"sh", "-c", "find \"$0\" -exec touch -h -d @0 {} +", out, NULL};
		run_ok(NULL, argv2);
		compare_dirs(root, out, false);
		free(out);
		free(file);
	}
	/* a run that does not exist, an unknown extension: an error, and no file left behind */
	char *empty = tu_path(dir, "empty-dir");
	tu_mkdir(dir, "empty-dir");
	char *zip = tu_path(empty, "x.zip"), *rar = tu_path(empty, "x.rar");
	tu_harvest(&r, "history", "get", "--db", db, "--run", "2", "-o", zip, NULL);
	assert_int_equal(r.status, 1);
	assert_string_equal(r.err, "harvest: no run 2\n");
	tu_result_free(&r);
	tu_harvest(&r, "history", "get", "--db", db, "--run", "1", "-o", rar, NULL);
	assert_int_equal(r.status, 2);
	tu_result_free(&r);
	assert_int_equal(count_entries(empty), 0);
	/* -o a symlink: refused without --follow, as history get refuses one for an artifact
	 * (link and target left alone); with it the target is written. harvest archive writes
	 * through one, as tar -f and the shell's > do. */
	tu_write(empty, "target", "precious", 8);
	char *target = tu_path(empty, "target"), *link = tu_path(empty, "link.tar");
	assert_int_equal(symlink("target", link), 0);
	tu_harvest(&r, "history", "get", "--db", db, "--run", "1", "-o", link, NULL);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "symbolic link"));
	assert_ptr_equal(strchr(r.err, '\n'), r.err + strlen(r.err) - 1); /* one line */
	tu_result_free(&r);
	size_t tlen;
	char *t = tu_read_file(target, &tlen);
	assert_int_equal(tlen, 8);
	assert_memory_equal(t, "precious", 8);
	free(t);
	struct stat sb;
	assert_int_equal(lstat(link, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	tu_harvest(&r, "history", "get", "--db", db, "--run", "1", "-o", link, "--follow", NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	check_member_names(target);
	assert_int_equal(lstat(link, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	assert_int_equal(unlink(target), 0);
	tu_write(empty, "target", "precious", 8);
	tu_harvest(&r, "archive", root, "-o", link, NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	check_member_names(target);
	assert_int_equal(lstat(link, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	free(target);
	free(link);
	free(zip);
	free(rar);
	free(empty);
	free(db);
	free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_tar_gnu_tar, tu_cleanup),
		cmocka_unit_test_teardown(test_tar_bsdtar, tu_cleanup),
		cmocka_unit_test_teardown(test_tgz_gnu_tar, tu_cleanup),
		cmocka_unit_test_teardown(test_tgz_bsdtar, tu_cleanup),
		cmocka_unit_test_teardown(test_zip_bsdtar, tu_cleanup),
		cmocka_unit_test_teardown(test_zip_unzip, tu_cleanup),
		cmocka_unit_test_teardown(test_stdout_is_tar, tu_cleanup),
		cmocka_unit_test_teardown(test_excludes_and_hidden, tu_cleanup),
		cmocka_unit_test_teardown(test_rerun_inside_tree, tu_cleanup),
		cmocka_unit_test_teardown(test_dev_stdout_pipe, tu_cleanup),
		cmocka_unit_test_teardown(test_shared_stderr_lines_whole, tu_cleanup),
		cmocka_unit_test_teardown(test_backslash_names_in_zip, tu_cleanup),
		cmocka_unit_test_teardown(test_long_paths_in_zip, tu_cleanup),
		cmocka_unit_test_teardown(test_far_future_time, tu_cleanup),
		cmocka_unit_test_teardown(test_fifo_skipped, tu_cleanup),
		cmocka_unit_test_teardown(test_sparse_5g_bounded_memory, tu_cleanup),
		cmocka_unit_test_teardown(test_terminal_refused, tu_cleanup),
		cmocka_unit_test_teardown(test_dev_full, tu_cleanup),
		cmocka_unit_test_teardown(test_broken_pipe, tu_cleanup),
		cmocka_unit_test_teardown(test_no_space_leaves_no_file, tu_cleanup),
		cmocka_unit_test_teardown(test_usage_errors, tu_cleanup),
		cmocka_unit_test_teardown(test_longest_name, tu_cleanup),
		cmocka_unit_test_teardown(test_history_get_run, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
