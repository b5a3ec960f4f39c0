/* What `harvest run` reports when the command renames or moves directories that were in the
 * tree before it: with the kernel's events (--changes events, and auto, the default), what such
 * a directory held before the run is rebuilt from its handle, and its old and new places are
 * compared as a snapshot would compare them. When the events cannot tell (forced here by
 * HARVEST_TEST_CHANGES_LOST), auto reports the files changed since the run started and says so
 * on stderr, and --changes events refuses. And the default run walks nothing before the
 * command: no getdents64 of the tree (strace). */
#include "testutil.h"
#include "tjson.h"

#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char self_exe[4096];

struct tree {
	char *base, *root, *db;
};

/* root/old/f, root/old/sub/g, root/keep/x, and an empty directory root/empty (that held
 * root/empty/gone). */
static void tree_make(struct tree *t)
{
	t->base = tu_mkdtemp();
	t->root = tu_path(t->base, "w");
	t->db = tu_path(t->base, "h.db");
	tu_mkdir(t->base, "w");
	tu_mkdir(t->base, "out");
	tu_mkdir(t->root, "old");
	tu_mkdir(t->root, "old/sub");
	tu_mkdir(t->root, "keep");
	tu_mkdir(t->root, "empty");
	tu_write(t->root, "old/f", "f\n", 2);
	tu_write(t->root, "old/sub/g", "g\n", 2);
	tu_write(t->root, "keep/x", "x\n", 2);
	tu_write(t->root, "empty/gone", "gone\n", 5);
}

static void tree_free(struct tree *t)
{
	tu_rmrf(t->base);
	free(t->base);
	free(t->root);
	free(t->db);
}

/* Runs script in root under mode (NULL: the default); the parsed result. */
static tj_value *run(const struct tree *t, const char *mode, const char *script, tu_result *r)
{
	const char *args[16];
	size_t n = 0;
	const char *fixed[] = {"run", "--db", t->db, "--no-history", "--format", "json",
			       "--no-content", "--dir", t->root};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		args[n++] = fixed[i];
	if (mode) {
		args[n++] = "--changes";
		args[n++] = mode;
	}
	args[n++] = "--shell";
	args[n++] = script;
	args[n] = NULL;
	tu_harvestv(r, t->root, NULL, args);
	return tj_parse(r->out, r->out_len);
}

/* "path:change,..." of the output files, and "path,..." of deleted, in their order. */
static char *files_text(const tj_value *doc)
{
	char buf[4096] = "";
	const tj_value *files = tj_get(doc, "output_files");
	for (size_t i = 0; i < tj_len(files); i++) {
		const tj_value *f = tj_at(files, i);
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s:%s", i ? "," : "",
			 tj_str(tj_get(f, "path"), NULL), tj_str(tj_get(f, "change"), NULL));
	}
	return strdup(buf);
}

static char *deleted_text(const tj_value *doc)
{
	char buf[4096] = "";
	const tj_value *del = tj_get(doc, "deleted");
	for (size_t i = 0; i < tj_len(del); i++)
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s", i ? "," : "",
			 tj_str(tj_at(del, i), NULL));
	return strdup(buf);
}

/* The script under events and under the default: exit 0, nothing on stderr, these files;
 * with x2, keep/x has a second name, keep/x2, before the run. */
static void expect_tree(const char *script, const char *files, const char *deleted, bool x2)
{
	const char *modes[] = {"events", NULL};
	for (size_t m = 0; m < 2; m++) {
		struct tree t;
		tree_make(&t);
		if (x2) {
			char *x = tu_path(t.root, "keep/x"), *xx = tu_path(t.root, "keep/x2");
			assert_int_equal(link(x, xx), 0);
			free(x);
			free(xx);
		}
		tu_result r;
		tj_value *doc = run(&t, modes[m], script, &r);
		if (r.status != 0 || r.err_len)
			print_message("%s: exit %d: %s\n", script, r.status, r.err);
		assert_int_equal(r.status, 0);
		assert_int_equal(r.err_len, 0);
		assert_non_null(doc);
		char *f = files_text(doc), *d = deleted_text(doc);
		assert_string_equal(f, files);
		assert_string_equal(d, deleted);
		free(f);
		free(d);
		tj_free(doc);
		tu_result_free(&r);
		tree_free(&t);
	}
}

static void expect(const char *script, const char *files, const char *deleted)
{
	expect_tree(script, files, deleted, false);
}

static void test_renamed_within(void **state)
{
	(void)state;
	expect("mv old new", "new/f:created,new/sub/g:created", "old/f,old/sub/g");
}

static void test_renamed_and_back(void **state)
{
	(void)state;
	expect("mv old x && mv x old", "", "");
}

static void test_moved_out(void **state)
{
	(void)state;
	expect("mv old ../out/x", "", "old/f,old/sub/g");
}

static void test_moved_out_and_removed(void **state)
{
	(void)state;
	expect("mv old ../out/x && rm -rf ../out/x", "", "old/f,old/sub/g");
}

static void test_moved_out_changed_and_back(void **state)
{
	(void)state;
	expect("mv old ../out/x && echo q > ../out/x/q && rm ../out/x/f && mv ../out/x old",
	       "old/q:created", "old/f");
}

static void test_renamed_then_changed(void **state)
{
	(void)state;
	expect("mv old new && echo z >> new/f && rm new/sub/g && echo n > new/sub/n",
	       "new/f:created,new/sub/n:created", "old/f,old/sub/g");
}

static void test_subdir_of_renamed_moved(void **state)
{
	(void)state;
	expect("mv old new && mv new/sub keep/sub", "keep/sub/g:created,new/f:created",
	       "old/f,old/sub/g");
}

/* rename(2) replaces an empty directory: what it held before the run (its events say) is
 * deleted, what the renamed one brings is created. */
static void test_renamed_over_empty_dir(void **state)
{
	(void)state;
	expect("rm empty/gone && mv -T old empty", "empty/f:created,empty/sub/g:created",
	       "empty/gone,old/f,old/sub/g");
}

/* A new directory where the renamed one was: a file at a path that held one before the
 * run is modified, not created. */
static void test_new_dir_at_old_place(void **state)
{
	(void)state;
	expect("mv old x && mkdir old && echo f2 > old/f",
	       "old/f:modified,x/f:created,x/sub/g:created", "old/sub/g");
}

/* Opened for writing only, in a renamed directory moved back: unchanged. */
static void test_renamed_back_opened_only(void **state)
{
	(void)state;
	expect("mv old x && mv x old && : >> old/f", "", "");
}

/* Whether process pid holds a fanotify descriptor (the harvest that reads the events). */
static bool has_fanotify(pid_t pid)
{
	char d[64], l[128], target[64];
	snprintf(d, sizeof(d), "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(d);
	const struct dirent *de;
	bool found = false;
	while (dir && !found && (de = readdir(dir)) != NULL) {
		snprintf(l, sizeof(l), "%s/%.16s", d, de->d_name);
		ssize_t n = readlink(l, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = '\0';
			found = strcmp(target, "anon_inode:[fanotify]") == 0;
		}
	}
	if (dir)
		closedir(dir);
	return found;
}

/* The parent of pid, 0 if none is known. */
static pid_t parent_of(pid_t pid)
{
	char p[64], buf[512];
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = '\0';
	const char *e = strrchr(buf, ')');
	int ppid = 0;
	if (!e || sscanf(e + 1, " %*c %d", &ppid) != 1)
		return 0;
	return ppid;
}

/* Whether every thread of pid is stopped. */
static bool all_stopped(pid_t pid)
{
	char d[64], p[128], buf[512];
	snprintf(d, sizeof(d), "/proc/%d/task", (int)pid);
	DIR *dir = opendir(d);
	const struct dirent *de;
	bool all = dir != NULL;
	while (dir && all && (de = readdir(dir)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%.16s/stat", d, de->d_name);
		FILE *f = fopen(p, "r");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
		if (f)
			fclose(f);
		buf[n] = '\0';
		const char *e = strrchr(buf, ')');
		char state = 0;
		all = e && sscanf(e + 1, " %c", &state) == 1 && (state == 'T' || state == 't');
	}
	if (dir)
		closedir(dir);
	return all;
}

/* The command of the tests of a merged unlink, in one thread, run in the tree: keep/x
 * written, old renamed to new (dir), empty/gone to keep/new (file) or nothing renamed
 * (none), keep/x removed, all while the harvest that reads the events
 * is stopped, so that they wait in the kernel's queue together and the removal of keep/x
 * is merged into the event of its write, queued before the rename: what harvest reads is
 * the write and removal of keep/x, the rename, then keep/x's link count (from the unlink),
 * with nothing after it that shows whose count it is. */
static int merged_ops(const char *what)
{
	pid_t reader = getppid();
	for (int up = 0; reader > 1 && !has_fanotify(reader) && up < 8; up++)
		reader = parent_of(reader);
	if (reader <= 1 || !has_fanotify(reader) || kill(reader, SIGSTOP) != 0)
		return 2;
	for (int i = 0; i < 20000 && !all_stopped(reader); i++) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	int status = all_stopped(reader) ? 0 : 3;
	if (!strcmp(what, "unlink-rename")) {
		/* keep/x removed (its count, then its name's event), then a rename to a new name
		 * (no count after it) */
		if (unlink("keep/x") != 0 || rename("empty/gone", "keep/new") != 0)
			status = 5;
		kill(reader, SIGCONT);
		return status;
	}
	int fd = open("keep/x", O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0 || write(fd, "y\n", 2) != 2)
		status = 4;
	if (fd >= 0)
		close(fd);
	int moved = 0;
	if (!strcmp(what, "dir"))
		moved = rename("old", "new");
	else if (!strcmp(what, "file"))
		moved = rename("empty/gone", "keep/new");
	if (moved != 0 || unlink("keep/x") != 0)
		status = 5;
	kill(reader, SIGCONT);
	return status;
}

/* A directory renamed by a thread whose next events are a file's link count and nothing
 * after it that names the file (its removal merged by the kernel into an earlier event of
 * the same file): the count is the unlink's, and the renamed directory is not reported
 * deleted. */
static void test_dir_rename_then_unlink_merged(void **state)
{
	(void)state;
	char script[4200];
	snprintf(script, sizeof(script), "exec '%s' merged-ops dir", self_exe);
	expect(script, "new/f:created,new/sub/g:created", "keep/x,old/f,old/sub/g");
}

/* The same after a file's rename to a new name: created there, not modified. */
static void test_file_rename_then_unlink_merged(void **state)
{
	(void)state;
	char script[4200];
	snprintf(script, sizeof(script), "exec '%s' merged-ops file", self_exe);
	expect(script, "keep/new:created", "empty/gone,keep/x");
}

/* A file with two names, one written then removed, its removal merged into the write's
 * event: the count read after it is the unlink's, and the other name (its ctime changed) is
 * modified. */
static void test_unlink_merged_other_name(void **state)
{
	(void)state;
	char script[4200];
	snprintf(script, sizeof(script), "exec '%s' merged-ops none", self_exe);
	expect_tree(script, "keep/x2:modified", "keep/x", true);
}

/* A file removed, then another renamed to a new name, by one thread, while the reader is
 * stopped: the removal's count comes before its name's event and nothing follows the
 * rename, which replaced nothing: created, and both old names deleted. */
static void test_unlink_then_rename_merged(void **state)
{
	(void)state;
	char script[4200];
	snprintf(script, sizeof(script), "exec '%s' merged-ops unlink-rename", self_exe);
	expect(script, "keep/new:created", "empty/gone,keep/x");
}

/* A file with two names, one removed, whose other name is no longer in the kernel's dentry
 * cache when the run ends (dropped here, as memory pressure would): the file's handle then
 * opens as a disconnected object whose path reads "/", which must not be taken for a place
 * outside the tree. The other name is found (one walk) and modified. Root only (the cache is
 * dropped through /proc/sys/vm/drop_caches). */
static void test_other_name_not_cached(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	expect_tree("rm keep/x && sync && echo 2 > /proc/sys/vm/drop_caches", "keep/x2:modified",
		    "keep/x", true);
}

/* When the events cannot tell (the test switch makes every run so): auto reports every file
 * whose ctime is not older than the run's start, and the files of a directory whose ctime is
 * not (renamed: its files keep their times), says so in one line, and exits as the command
 * did; the deletions are the events' (old/f is missing: it was only moved). --quiet silences
 * the line. --changes events refuses: exit 125. */
static void test_incomplete_events(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	/* The tree's times older than the run's start (the coarse clock's tick). */
	struct timespec ts = {0, 30 * 1000 * 1000};
	nanosleep(&ts, NULL);
	setenv("HARVEST_TEST_CHANGES_LOST", "1", 1);
	tu_result r;
	const char *script = "echo n > new.txt && mv old renamed && rm keep/x && exit 3";
	tj_value *doc = run(&t, NULL, script, &r);
	assert_int_equal(r.status, 3);
	assert_string_equal(r.err, "harvest: change events incomplete (HARVEST_TEST_CHANGES_LOST): "
				   "reporting the files changed since the run started; deleted "
				   "files may be missing\n");
	assert_non_null(doc);
	char *f = files_text(doc), *d = deleted_text(doc);
	assert_string_equal(f, "new.txt:created,renamed/f:modified,renamed/sub/g:modified");
	assert_string_equal(d, "keep/x");
	free(f);
	free(d);
	tj_free(doc);
	tu_result_free(&r);

	const char *quiet[] = {"run", "--quiet", "--no-history", "--format", "json", "--dir",
			       t.root, "--", "true", NULL};
	tu_harvestv(&r, NULL, NULL, quiet);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.err_len, 0);
	tu_result_free(&r);

	doc = run(&t, "events", "echo m > more.txt", &r);
	assert_int_equal(r.status, 125);
	assert_non_null(strstr(r.err, "the change events cannot tell what the run changed "
				      "(HARVEST_TEST_CHANGES_LOST)"));
	tj_free(doc);
	tu_result_free(&r);
	unsetenv("HARVEST_TEST_CHANGES_LOST");
	tree_free(&t);
}

/* Lines of the strace log at path that read the directories of root (getdents64 on a
 * descriptor strace -y names by a path below root). */
static size_t tree_reads(const char *log, const char *root)
{
	size_t len;
	char *text = tu_read_file(log, &len);
	assert_non_null(text);
	char pat[4200];
	snprintf(pat, sizeof(pat), "getdents64(");
	size_t n = 0;
	for (char *line = text; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		char *g = strstr(line, pat);
		if (g) {
			char *lt = strchr(g, '<');
			if (lt && !strncmp(lt + 1, root, strlen(root)) &&
			    (lt[1 + strlen(root)] == '>' || lt[1 + strlen(root)] == '/'))
				n++;
		}
		line = nl ? nl + 1 : NULL;
	}
	free(text);
	return n;
}

/* The default run lists nothing of the tree, before the command or after it; the snapshot
 * comparison (the control) lists it. */
static void test_default_walks_nothing(void **state)
{
	(void)state;
	/* scripts/deps.sh installs strace: without it this check fails rather than pass unseen */
	if (access("/usr/bin/strace", X_OK) != 0)
		fail_msg("/usr/bin/strace is needed to count the run's getdents64 calls");
	struct tree t;
	tree_make(&t);
	char *log = tu_path(t.base, "strace.log");
	const char *modes[] = {"auto", "snapshot"};
	/* LeakSanitizer cannot run under ptrace: the sanitized build's exit would fail. */
	setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
	for (size_t m = 0; m < 2; m++) {
		char *argv[] = {"/usr/bin/strace", "-f", "-y", "-qq", "-e", "trace=getdents64",
				"-o", log, HARVEST_BIN, "run", "--no-history", "--format", "json",
				"--changes", (char *)modes[m], "--dir", t.root, "--", "true", NULL};
		tu_result r;
		tu_run(&r, NULL, NULL, argv);
		assert_int_equal(r.status, 0);
		size_t reads = tree_reads(log, t.root);
		if (m == 0)
			assert_int_equal(reads, 0);
		else
			assert_true(reads >= 4); /* root, old, old/sub, keep, empty */
		tu_result_free(&r);
	}
	unsetenv("ASAN_OPTIONS");
	free(log);
	tree_free(&t);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "merged-ops"))
		return merged_ops(argv[2]);
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		return 1;
	self_exe[n] = '\0';
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_renamed_within),
		cmocka_unit_test(test_renamed_and_back),
		cmocka_unit_test(test_moved_out),
		cmocka_unit_test(test_moved_out_and_removed),
		cmocka_unit_test(test_moved_out_changed_and_back),
		cmocka_unit_test(test_renamed_then_changed),
		cmocka_unit_test(test_subdir_of_renamed_moved),
		cmocka_unit_test(test_renamed_over_empty_dir),
		cmocka_unit_test(test_new_dir_at_old_place),
		cmocka_unit_test(test_renamed_back_opened_only),
		cmocka_unit_test(test_dir_rename_then_unlink_merged),
		cmocka_unit_test(test_file_rename_then_unlink_merged),
		cmocka_unit_test(test_unlink_merged_other_name),
		cmocka_unit_test(test_other_name_not_cached),
		cmocka_unit_test(test_unlink_then_rename_merged),
		cmocka_unit_test(test_incomplete_events),
		cmocka_unit_test(test_default_walks_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, tu_cleanup);
}
