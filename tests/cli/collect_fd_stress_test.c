/* `harvest collect`, `snapshot`, `run` and `mime` under low descriptor limits (RLIMIT_NOFILE set in the
 * child before exec): at every limit from the documented minimum up, each command ends (a
 * watchdog kills it after a generous bound, and that fails the case), and when it exits 0 its
 * output is complete: every file of the tree, each entry of the snapshot, the files the
 * command made. Below the minimum, each one refuses with a one-line error.
 *
 * The tree has wide directories (many files read ahead at once) and a 300-level chain (the
 * walker reopens evicted directories from their ancestors): both need descriptors while the
 * read-ahead holds some. */
#include "testutil.h"
#include "tjson.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WATCHDOG_S 120
#define WIDE_DIRS 10
#define WIDE_DEPTH 6
#define WIDE_FILES 30
#define CHAIN_DEPTH 300
/* The documented minimums, with only the standard streams open: collect and snapshot with a
 * database, collect without one, and run (its pipes). */
#define MIN_DB 14
#define MIN_SNAP 10
#define MIN_WALK 7 /* the README: 3 streams and the walker's 4 */
#define MIN_NO_DB 10
#define MIN_RUN 24
/* mime of file arguments, without and with the cache (a worker's socket, a file's bytes) */
#define MIN_MIME_NO_DB 6
#define MIN_MIME_DB 9
/* Below this the isolated libmagic detector may not get its descriptors (exit 1, one line). */
#define MIN_DETECTOR 24

typedef struct tree {
	char *root;   /* the scratch directory (tu_tmpdir) */
	char *dir;    /* root/t: the tree */
	char *db;     /* root/h.db */
	char **files; /* every regular file, relative to dir, sorted by strcmp */
	size_t n_files, n_dirs;
	char *chain_bottom; /* the deepest directory of the chain, relative */
} tree;

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_file(tree *t, const char *rel)
{
	t->files = tu_xrealloc(t->files, (t->n_files + 1) * sizeof(*t->files));
	t->files[t->n_files++] = tu_xmemdup(rel, strlen(rel));
	tu_write(t->dir, rel, rel, strlen(rel));
}

static void make_tree(tree *t)
{
	memset(t, 0, sizeof(*t));
	t->root = tu_tmpdir();
	t->dir = tu_path(t->root, "t");
	t->db = tu_path(t->root, "h.db");
	tu_mkdir(t->root, "t");
	char rel[8192];
	for (int d = 0; d < WIDE_DIRS; d++) {
		int n = snprintf(rel, sizeof(rel), "w%d", d);
		tu_mkdir(t->dir, rel);
		t->n_dirs++;
		for (int l = 0; l < WIDE_DEPTH; l++) {
			n += snprintf(rel + n, sizeof(rel) - (size_t)n, "/l%d", l);
			tu_mkdir(t->dir, rel);
			t->n_dirs++;
		}
		for (int f = 0; f < WIDE_FILES; f++) {
			snprintf(rel + n, sizeof(rel) - (size_t)n, "/f%d", f);
			add_file(t, rel);
		}
	}
	int n = snprintf(rel, sizeof(rel), "c");
	tu_mkdir(t->dir, rel);
	t->n_dirs++;
	for (int l = 0; l < CHAIN_DEPTH; l++) {
		n += snprintf(rel + n, sizeof(rel) - (size_t)n, "/%d", l % 10);
		tu_mkdir(t->dir, rel);
		t->n_dirs++;
		if (l % 10 == 9) {
			int m = snprintf(rel + n, sizeof(rel) - (size_t)n, "/f");
			add_file(t, rel);
			rel[n] = '\0';
			(void)m;
		}
	}
	t->chain_bottom = tu_xmemdup(rel, strlen(rel));
	qsort(t->files, t->n_files, sizeof(*t->files), cmp_str);
}

static void free_tree(tree *t)
{
	for (size_t i = 0; i < t->n_files; i++)
		free(t->files[i]);
	free(t->files);
	free(t->chain_bottom);
	free(t->dir);
	free(t->db);
}

/* Runs harvest args with the descriptor limit limit (soft; only the standard streams open),
 * stdout and stderr into files; returns the exit status. A run that outlives the watchdog is
 * killed and fails the case. */
static int run_limited(int limit, const char *out, const char *err, const char *const *args)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int z = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (o < 0 || e < 0 || z < 0 || dup2(z, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(120);
		/* Nothing else open: the limits of the README hold for what harvest itself opens. */
		for (int fd = 3; fd < 4096; fd++)
			close(fd);
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(121);
		rl.rlim_cur = (rlim_t)limit;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(122);
		const char *argv[32];
		size_t n = 0;
		argv[n++] = HARVEST_BIN;
		for (size_t i = 0; args[i] && n < 31; i++)
			argv[n++] = args[i];
		argv[n] = NULL;
		execv(HARVEST_BIN, (char *const *)argv);
		_exit(123);
	}
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int status;
		pid_t got = waitpid(pid, &status, WNOHANG);
		assert_true(got >= 0);
		if (got == pid) {
			if (WIFSIGNALED(status))
				fail_msg("%s at limit %d: killed by signal %d: %s", args[0], limit,
					 WTERMSIG(status), tu_read_file(err, NULL));
			return WEXITSTATUS(status);
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > WATCHDOG_S) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("%s at limit %d: still running after %d s (a hang)", args[0], limit,
				 WATCHDOG_S);
		}
		struct timespec ms = {0, 5 * 1000000L};
		nanosleep(&ms, NULL);
	}
}

static char *slurp(const char *path, size_t *len)
{
	char *s = tu_read_file(path, len);
	assert_non_null(s);
	return s;
}

/* Fails unless the output files of the collect document in path are exactly want[0..n). */
static void check_paths(const char *path, const char *const *want, size_t n, const char *what,
			int limit)
{
	size_t len;
	char *out = slurp(path, &len);
	tj_value *doc = tj_parse(out, len);
	if (!doc)
		fail_msg("%s at limit %d: output is not JSON: %.200s", what, limit, out);
	const tj_value *a = tj_get(doc, "output_files");
	assert_non_null(a);
	size_t got = tj_len(a);
	char **paths = tu_xmalloc((got ? got : 1) * sizeof(*paths));
	for (size_t i = 0; i < got; i++) {
		size_t pl;
		const char *p = tj_str(tj_get(tj_at(a, i), "path"), &pl);
		assert_non_null(p);
		paths[i] = tu_xmemdup(p, pl);
	}
	qsort(paths, got, sizeof(*paths), cmp_str);
	if (got != n)
		fail_msg("%s at limit %d: %zu output files, expected %zu", what, limit, got, n);
	for (size_t i = 0; i < n; i++)
		if (strcmp(paths[i], want[i]) != 0)
			fail_msg("%s at limit %d: %s where %s was expected", what, limit, paths[i],
				 want[i]);
	assert_int_equal(tj_len(tj_get(doc, "skipped")), 0);
	for (size_t i = 0; i < got; i++)
		free(paths[i]);
	free(paths);
	tj_free(doc);
	free(out);
}

/* Fails unless the error file holds exactly one line saying that descriptors ran out (before
 * the walk: "too few file descriptors"; for run's pipes: "Too many open files"). */
static void check_one_line(const char *path, const char *what, int limit)
{
	size_t len;
	char *err = slurp(path, &len);
	if (len == 0 || err[len - 1] != '\n' || memchr(err, '\n', len - 1) ||
	    !(strstr(err, "too few file descriptors") || strstr(err, "Too many open files")))
		fail_msg("%s at limit %d: expected one line about descriptors on stderr, got: %s",
			 what, limit, err);
	free(err);
}

/* The paths of the mime answers (JSON lines) in out[0..len), appended to *paths. */
static void answer_paths(char *out, size_t len, char ***paths, size_t *n, const char *what,
			 int limit)
{
	for (char *line = out; line < out + len;) {
		char *nl = memchr(line, '\n', (size_t)(out + len - line));
		if (!nl)
			fail_msg("%s at limit %d: an unended answer: %s", what, limit, line);
		tj_value *doc = tj_parse(line, (size_t)(nl - line));
		size_t pl;
		const char *p = doc ? tj_str(tj_get(doc, "path"), &pl) : NULL;
		if (!p || !tj_str(tj_get(doc, "mime_type"), NULL))
			fail_msg("%s at limit %d: not an answer: %.*s", what, limit, (int)(nl - line),
				 line);
		*paths = tu_xrealloc(*paths, (*n + 1) * sizeof(**paths));
		(*paths)[(*n)++] = tu_xmemdup(p, pl);
		tj_free(doc);
		line = nl + 1;
	}
}

/* Fails unless paths[0..n) are exactly the tree's files below dir, each once. Frees them. */
static void check_cover(const tree *t, char **paths, size_t n, const char *what, int limit)
{
	qsort(paths, n, sizeof(*paths), cmp_str);
	if (n != t->n_files)
		fail_msg("%s at limit %d: %zu files accounted for, expected %zu", what, limit, n,
			 t->n_files);
	size_t dl = strlen(t->dir);
	/* t->files is sorted, and a common prefix keeps the order. */
	for (size_t i = 0; i < n; i++)
		if (strncmp(paths[i], t->dir, dl) != 0 || paths[i][dl] != '/' ||
		    strcmp(paths[i] + dl + 1, t->files[i]) != 0)
			fail_msg("%s at limit %d: %s where %s/%s was expected (a file twice, or one "
				 "missing)",
				 what, limit, paths[i], t->dir, t->files[i]);
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
}

/* Fails unless the mime answers in path are one per file of the tree, each once. */
static void check_answers(const char *path, const tree *t, const char *what, int limit)
{
	size_t len, n = 0;
	char *out = slurp(path, &len);
	char **paths = NULL;
	answer_paths(out, len, &paths, &n, what, limit);
	check_cover(t, paths, n, what, limit);
	free(out);
}

/* Below MIN_DETECTOR (exit 1): refused on one line, or every file answered or named on a line
 * of its own (the detector, or a worker for it, could not get a descriptor), each once: none
 * missing unsaid. */
static void check_accounted(const char *out, const char *err, const tree *t, const char *what,
			    int limit)
{
	size_t olen, elen, n = 0;
	char *o = slurp(out, &olen), *e = slurp(err, &elen);
	char prefix[4200];
	snprintf(prefix, sizeof(prefix), "harvest: %s/", t->dir);
	size_t skip = strlen("harvest: ");
	if (strncmp(e, prefix, strlen(prefix)) != 0) {
		/* Refused before the walk: one line that names no file below DIR. (A file's own
		 * line may also say "too few file descriptors": its worker could not start.) */
		check_one_line(err, what, limit);
	} else {
		char **paths = NULL;
		answer_paths(o, olen, &paths, &n, what, limit);
		for (char *line = e; line < e + elen;) {
			char *nl = memchr(line, '\n', (size_t)(e + elen - line));
			if (!nl || strncmp(line, prefix, strlen(prefix)) != 0)
				fail_msg("%s at limit %d: a line that names no file: %s", what, limit, e);
			/* "harvest: DIR/REL: why" (the tree's names hold no ": ") */
			char *end = strstr(line + strlen(prefix), ": ");
			if (!end || end > nl)
				fail_msg("%s at limit %d: a line without its reason: %s", what, limit, e);
			paths = tu_xrealloc(paths, (n + 1) * sizeof(*paths));
			paths[n++] = tu_xmemdup(line + skip, (size_t)(end - line - skip));
			line = nl + 1;
		}
		check_cover(t, paths, n, what, limit);
	}
	free(o);
	free(e);
}

static int64_t snapshot_entries(const char *path, int limit)
{
	size_t len;
	char *out = slurp(path, &len);
	tj_value *doc = tj_parse(out, len);
	if (!doc)
		fail_msg("snapshot at limit %d: output is not JSON: %.200s", limit, out);
	int64_t n = tj_int(tj_get(doc, "entries"));
	tj_free(doc);
	free(out);
	return n;
}

/* A run refused for want of descriptors is refused before its history row is begun: the
 * history holds no run ended "not recorded" (one used to be left for each such refusal). */
static void check_nothing_begun(const char *db, int limit)
{
	tu_result r;
	tu_harvest(&r, "history", "runs", "--db", db, NULL);
	if (r.status != 0)
		fail_msg("history runs after the run at limit %d: exit %d: %s", limit, r.status,
			 r.err);
	if (memmem(r.out, r.out_len, "not_recorded", 12))
		fail_msg("run at limit %d was refused after its history row was begun: %s", limit,
			 r.out);
	tu_result_free(&r);
}

/* The limits tried: every one from 11 to 24 (where the shortage is), then a few up to 64. */
static const int limits[] = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 24, 32, 48, 64};

static void test_limits(void **state)
{
	(void)state;
	tree t;
	make_tree(&t);
	char *out = tu_path(t.root, "out"), *err = tu_path(t.root, "err");
	const char *const *want = (const char *const *)t.files;
	char made_deep[8192];
	snprintf(made_deep, sizeof(made_deep), "%s/made", t.chain_bottom);
	const char *made[] = {made_deep, "made"};
	qsort(made, 2, sizeof(made[0]), cmp_str);
	char script[8300];
	snprintf(script, sizeof(script), "echo a > made; echo b > '%s'", made_deep);
	char *made_paths[2] = {tu_path(t.dir, "made"), tu_path(t.dir, made_deep)};
	/* Every file as a list for mime -f, which reads it whole before it opens anything. */
	char *list = tu_path(t.root, "list");
	FILE *lf = fopen(list, "w");
	assert_non_null(lf);
	for (size_t i = 0; i < t.n_files; i++)
		fprintf(lf, "%s/%s\n", t.dir, t.files[i]);
	assert_int_equal(fclose(lf), 0);

	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		int L = limits[i];
		/* The repro: no database at all, so the most descriptors for the read-ahead. */
		const char *bare[] = {"collect", "--no-history", "--no-content", "--no-cache",
				      "--max-files", "100000", t.dir, NULL};
		int rc = run_limited(L, out, err, bare);
		if (L < MIN_DETECTOR && rc == 1) {
			/* The libmagic detector could not be started: one clear line, no hang. */
			check_one_line(err, "collect --no-cache", L);
		} else {
			if (rc != 0)
				fail_msg("collect --no-cache at limit %d: exit %d: %s", L, rc,
					 tu_read_file(err, NULL));
			check_paths(out, want, t.n_files, "collect --no-cache", L);
		}

		/* With the database: history, contents and the MIME cache. */
		const char *full[] = {"collect", "--db", t.db, "--max-files", "100000", t.dir, NULL};
		rc = run_limited(L, out, err, full);
		if ((L < MIN_DB || L < MIN_DETECTOR) && rc == 1) {
			/* Below the documented minimum it may be refused, at once and on one line; below
			 * MIN_DETECTOR the libmagic detector may fail to start, said on one line. */
			check_one_line(err, "collect", L);
		} else {
			if (rc != 0)
				fail_msg("collect at limit %d: exit %d: %s", L, rc,
					 tu_read_file(err, NULL));
			check_paths(out, want, t.n_files, "collect", L);
		}

		const char *snap[] = {"snapshot", "--db", t.db, t.dir, NULL};
		rc = run_limited(L, out, err, snap);
		if (rc != 0)
			fail_msg("snapshot at limit %d: exit %d: %s", L, rc, tu_read_file(err, NULL));
		assert_int_equal(snapshot_entries(out, L), (int64_t)(t.n_files + t.n_dirs));

		const char *run[] = {"run",   "--db", t.db, "--format", "json", "--max-files",
				     "100000", "--dir", t.dir, "--", "sh", "-c", script, NULL};
		rc = run_limited(L, out, err, run);
		if (L >= MIN_RUN) {
			if (rc != 0)
				fail_msg("run at limit %d: exit %d: %s", L, rc,
					 tu_read_file(err, NULL));
			check_paths(out, made, 2, "run", L);
		} else if (rc != 0) {
			/* Not enough for its pipes: harvest's own failure, said on one line. */
			assert_int_equal(rc, 125);
			check_one_line(err, "run", L);
			check_nothing_begun(t.db, L);
		}
		unlink(made_paths[0]);
		unlink(made_paths[1]);

		/* mime below a directory holds files open for detection in batches: sized by the
		 * free descriptors, never waiting for ones only the batch gives back (a hang), never
		 * dropping a file unsaid; too few for the walk itself is one line. */
		const char *mdir[] = {"mime", "--no-cache", t.dir, NULL};
		rc = run_limited(L, out, err, mdir);
		if (rc == 1 && L < MIN_DETECTOR) {
			check_accounted(out, err, &t, "mime DIR", L);
		} else {
			if (rc != 0)
				fail_msg("mime DIR at limit %d: exit %d: %s", L, rc,
					 tu_read_file(err, NULL));
			check_answers(out, &t, "mime DIR", L);
		}
		/* A list with far more threads asked for than descriptors: as many as fit. */
		const char *mlist[] = {"mime", "--no-cache", "--threads", "1024", "-f", list, NULL};
		rc = run_limited(L, out, err, mlist);
		if (rc == 1 && L < MIN_DETECTOR) {
			check_accounted(out, err, &t, "mime -f", L);
		} else {
			if (rc != 0)
				fail_msg("mime -f at limit %d: exit %d: %s", L, rc,
					 tu_read_file(err, NULL));
			check_answers(out, &t, "mime -f", L);
		}
	}
	free(list);
	free(made_paths[0]);
	free(made_paths[1]);
	free(out);
	free(err);
	free_tree(&t);
}

/* mime below a directory, at limits above the detector's minimum, many times: the walk's
 * directory cache, the batch's open files and the libmagic workers share the descriptors, so
 * none of them ever leaves a worker's start without one. (The cache used to keep up to half the
 * limit beside a full batch: a worker then failed to start for a file in about one run in
 * three, depending on how far the walk had read ahead.) Every other round with
 * HARVEST_TEST_MIME_DIR_LATE, which lets the walk read ahead as far as it can before the first
 * worker starts: the cache is then full on any machine. */
static void test_mime_dir_repeated(void **state)
{
	(void)state;
	tree t;
	make_tree(&t);
	char *out = tu_path(t.root, "out"), *err = tu_path(t.root, "err");
	static const int some[] = {MIN_DETECTOR, 28, 32, 40};
	const char *mdir[] = {"mime", "--no-cache", t.dir, NULL};
	for (size_t i = 0; i < sizeof(some) / sizeof(some[0]); i++)
		for (int round = 0; round < 8; round++) {
			if (round % 2)
				assert_int_equal(setenv("HARVEST_TEST_MIME_DIR_LATE", "1", 1), 0);
			int rc = run_limited(some[i], out, err, mdir);
			assert_int_equal(unsetenv("HARVEST_TEST_MIME_DIR_LATE"), 0);
			if (rc != 0)
				fail_msg("mime DIR at limit %d, round %d: exit %d: %s", some[i], round,
					 rc, tu_read_file(err, NULL));
			check_answers(out, &t, "mime DIR", some[i]);
		}
	free(out);
	free(err);
	free_tree(&t);
}

/* The smallest limit at which args exits 0: at most documented; every smaller limit from from
 * exits refused_status with one line on stderr, and the next 3 limits work too. */
static void check_minimum(const char *const *args, const char *what, int from, int documented,
			  int refused_status, const char *out, const char *err)
{
	int min = 0;
	for (int L = from; L <= documented && !min; L++) {
		int rc = run_limited(L, out, err, args);
		if (rc == 0) {
			min = L;
			break;
		}
		if (rc != refused_status)
			fail_msg("%s at limit %d: exit %d: %s", what, L, rc, tu_read_file(err, NULL));
		check_one_line(err, what, L);
	}
	if (!min)
		fail_msg("%s does not work at its documented minimum limit %d", what, documented);
	for (int L = min + 1; L <= min + 3; L++)
		if (run_limited(L, out, err, args) != 0)
			fail_msg("%s works at limit %d but not at %d", what, min, L);
	print_message("%s: minimum descriptor limit %d (documented: %d)\n", what, min, documented);
}

/* Below the minimum: one clear line and exit 1 (125 for run), never a hang or a partial
 * result. At the minimum itself, the command works. */
static void test_below_minimum(void **state)
{
	(void)state;
	char *root = tu_tmpdir();
	char *dir = tu_path(root, "t"), *db = tu_path(root, "h.db");
	char *out = tu_path(root, "out"), *err = tu_path(root, "err");
	tu_mkdir(root, "t");
	tu_write(dir, "f", "x", 1);
	const char *bare[] = {"collect", "--no-history", "--no-cache", dir, NULL};
	const char *full[] = {"collect", "--db", db, dir, NULL};
	const char *snap[] = {"snapshot", "--db", db, dir, NULL};
	const char *run[] = {"run", "--db", db, "--dir", dir, "--", "true", NULL};
	const char *walk[] = {"walk", dir, NULL};
	char *file = tu_path(dir, "f");
	const char *mime_bare[] = {"mime", "--no-cache", file, NULL};
	/* Each command's own minimum is found here (it depends on what the process has open
	 * when it starts), must be at most the documented one (README), and below it the
	 * command is refused on one line; from it on (4 limits) it works. run is checked from
	 * the snapshot's minimum up: below that its database cannot even be opened. */
	check_minimum(bare, "collect --no-cache", 4, MIN_NO_DB, 1, out, err);
	check_minimum(full, "collect", 4, MIN_DB, 1, out, err);
	check_minimum(snap, "snapshot", 4, MIN_SNAP, 1, out, err);
	check_minimum(run, "run", MIN_RUN, MIN_RUN, 125, out, err);
	/* walk: below its minimum a directory was retried for seconds, then left out. */
	check_minimum(walk, "walk", 4, MIN_WALK, 1, out, err);
	/* mime FILE: below its minimum, one line naming the limit, not "Too many open files"
	 * alone. A fresh database each time: a cached answer would need no worker. */
	check_minimum(mime_bare, "mime --no-cache FILE", 4, MIN_MIME_NO_DB, 1, out, err);
	for (int L = 4; L < MIN_MIME_NO_DB; L++) {
		if (run_limited(L, out, err, mime_bare) != 1)
			continue;
		char *e = tu_read_file(err, NULL);
		if (!strstr(e, "ulimit -n"))
			fail_msg("mime --no-cache FILE at limit %d: the limit is not named: %s", L, e);
		free(e);
	}
	char *mdb = tu_path(root, "m.db");
	const char *mime_fresh[] = {"mime", "--db", mdb, file, NULL};
	for (int L = 4; L <= MIN_MIME_DB + 3; L++) {
		unlink(mdb);
		int rc = run_limited(L, out, err, mime_fresh);
		if (L >= MIN_MIME_DB && rc != 0)
			fail_msg("mime FILE at limit %d (documented minimum %d): exit %d: %s", L,
				 MIN_MIME_DB, rc, tu_read_file(err, NULL));
		if (rc == 0)
			continue;
		/* The cache that could not be opened or read (a warning: SQLite may say only
		 * "unable to open database file"), then the refusal, which names the limit. */
		char *e = tu_read_file(err, NULL);
		const char *last = "";
		for (char *line = e, *nl; *line; line = nl + 1) {
			nl = strchr(line, '\n');
			if (!nl)
				fail_msg("mime FILE at limit %d: unended line: %s", L, line);
			*nl = '\0';
			if (*last && !strstr(last, "; answering without the MIME cache"))
				fail_msg("mime FILE at limit %d: more than the refusal: %s", L, last);
			last = line;
		}
		if (!strstr(last, "too few file descriptors") && !strstr(last, "Too many open files"))
			fail_msg("mime FILE at limit %d: not a line about descriptors: %s", L, last);
		free(e);
	}
	free(mdb);
	free(file);
	free(dir);
	free(db);
	free(out);
	free(err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_limits, tu_cleanup),
		cmocka_unit_test_teardown(test_below_minimum, tu_cleanup),
		cmocka_unit_test_teardown(test_mime_dir_repeated, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
