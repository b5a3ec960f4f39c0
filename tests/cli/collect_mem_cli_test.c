/* Peak memory of `harvest collect` and `harvest run` with contents: whatever the total size of
 * the artifacts, harvest's peak RSS stays under 48 MiB, for --format json, jsonl and html alike
 * (the contents wait in a temporary file and are read, stored and printed in pieces; the page
 * reads one content at a time). The tree is
 * ~200 MiB of random bytes written here: files of 4 MiB (several in the read-ahead window at
 * once) and one of 24 MiB (larger than the window, under --max-file-bytes). Under valgrind
 * (whose own memory is what a child's RSS then measures) the tree is smaller and only the
 * growth over a collect of one small file is bounded. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <valgrind/valgrind.h>

#define MIB (1024 * 1024)
/* The bound of the issue, and the growth over a tiny collect allowed where sanitizers or
 * valgrind make the absolute figure meaningless. */
#define PEAK_MAX_KIB (48 * 1024)
#define GROWTH_MAX_KIB (32 * 1024)

/* Fills a file of size bytes with a cheap pseudo-random stream (xorshift64*): contents that
 * do not compress and do not repeat between files. */
static void write_random(const char *dir, const char *name, size_t size, uint64_t seed)
{
	char *path = tu_path(dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	enum { BLOCK = 1 << 20 };
	uint64_t *block = tu_xmalloc(BLOCK);
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t done = 0; done < size;) {
		for (size_t i = 0; i < BLOCK / 8; i++) {
			x ^= x >> 12;
			x ^= x << 25;
			x ^= x >> 27;
			block[i] = x * 0x2545F4914F6CDD1Dull;
		}
		size_t n = size - done < BLOCK ? size - done : BLOCK;
		assert_int_equal(write(fd, block, n), (ssize_t)n);
		done += n;
	}
	assert_int_equal(close(fd), 0);
	free(block);
	free(path);
}

struct peak {
	long maxrss_kib;
	int status;
	uint64_t out_bytes;
	char tail[64]; /* the output's last bytes */
};

/* When set, measure() runs harvest under time(1) writing its peak RSS here. A forked child's
 * peak counts the pages it shares with this process until its exec, so wait4 reports at least
 * this process's RSS (150 MiB under ASan, after writing the tree); time(1) forks from a small
 * process, and its figure is harvest's own. */
static const char *time_out;

/* Runs harvest with args (NULL-terminated, without argv[0]) in cwd, its stdout read and
 * counted here, and returns its peak RSS (wait4: this child alone, with what it reaped). */
static struct peak measure(const char *cwd, const char *const *args)
{
	struct peak r = {0};
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		if (dup2(p[1], 1) < 0 || dup2(null, 0) < 0 || dup2(null, 2) < 0)
			_exit(126);
		close(p[0]);
		close(p[1]);
		if (cwd && chdir(cwd) != 0)
			_exit(126);
		size_t n = 0;
		while (args[n])
			n++;
		const char **argv = tu_xmalloc((n + 7) * sizeof(*argv));
		size_t k = 0;
		if (time_out) {
			const char *pre[] = {"/usr/bin/time", "-f", "%M", "-o", time_out};
			memcpy(argv, pre, sizeof(pre));
			k = 5;
		}
		argv[k] = HARVEST_BIN;
		memcpy(argv + k + 1, args, (n + 1) * sizeof(*argv));
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	char *buf = tu_xmalloc(1 << 20);
	char *tail = r.tail;
	ssize_t n;
	while ((n = read(p[0], buf, 1 << 20)) > 0 || (n < 0 && errno == EINTR)) {
		if (n <= 0)
			continue;
		r.out_bytes += (uint64_t)n;
		size_t keep = (size_t)n < sizeof(r.tail) - 1 ? (size_t)n : sizeof(r.tail) - 1;
		size_t have = strlen(tail);
		if (have + keep > sizeof(r.tail) - 1) {
			size_t drop = have + keep - (sizeof(r.tail) - 1);
			memmove(tail, tail + drop, have - drop + 1);
		}
		strncat(tail, buf + n - (ssize_t)keep, keep);
	}
	free(buf);
	close(p[0]);
	int st;
	struct rusage ru;
	while (wait4(pid, &st, 0, &ru) < 0)
		assert_int_equal(errno, EINTR);
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r.maxrss_kib = ru.ru_maxrss;
	if (time_out) {
		size_t len;
		char *text = tu_read_file(time_out, &len);
		assert_non_null(text);
		/* the last line (a harvest that failed has "Command exited with non-zero status
		 * N" before it) */
		for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
			r.maxrss_kib = atol(line);
		free(text);
		assert_true(r.maxrss_kib > 0);
	}
	return r;
}

static bool sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
	return true;
#else
	return false;
#endif
#else
	return false;
#endif
}

struct tree {
	char *dir, *src, *small, *db, *ws;
	uint64_t bytes;
	uint64_t embedded; /* the bytes of the files a page embeds (HV_PAGE_EMBED_MAX: 10 MiB) */
};

static void tree_make(struct tree *t)
{
	t->dir = tu_mkdtemp();
	tu_mkdir(t->dir, "src");
	tu_mkdir(t->dir, "small");
	tu_mkdir(t->dir, "ws");
	t->src = tu_path(t->dir, "src");
	t->small = tu_path(t->dir, "small");
	t->ws = tu_path(t->dir, "ws");
	t->db = tu_path(t->dir, "harvest.db");
	tu_write(t->small, "a.txt", "a\n", 2);
	bool vg = RUNNING_ON_VALGRIND;
	/* ~200 MiB natively; under valgrind (20-50x slower) 48 MiB, still more than the growth
	 * allowed. */
	int n4 = vg ? 6 : 44;
	for (int i = 0; i < n4; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%02d.bin", i);
		write_random(t->src, name, 4 * MIB, (uint64_t)i + 1);
	}
	write_random(t->src, "huge.bin", 24 * MIB, 999);
	t->bytes = (uint64_t)n4 * 4 * MIB + 24 * MIB;
	t->embedded = (uint64_t)n4 * 4 * MIB;
	/* ASan keeps freed memory in a quarantine (256 MiB by default) that would be counted as
	 * harvest's: the children return it at once. */
	const char *asan = getenv("ASAN_OPTIONS");
	char *opts = NULL;
	assert_true(asprintf(&opts, "%s%squarantine_size_mb=0:thread_local_quarantine_size_kb=0",
			     asan ? asan : "", asan && *asan ? ":" : "") > 0);
	setenv("ASAN_OPTIONS", opts, 1);
	free(opts);
}

static void tree_free(struct tree *t)
{
	tu_rmrf(t->dir);
	free(t->dir);
	free(t->src);
	free(t->small);
	free(t->ws);
	free(t->db);
}

/* The peak of a run with args in format fmt is bounded: absolutely where it can be measured,
 * and in its growth over base (the same command on one small file) everywhere. */
static void expect_bounded(const struct tree *t, const struct peak *r, long base_kib,
			   const char *fmt, const char *what)
{
	bool html = !strcmp(fmt, "html");
	/* A record ends with its closing brace, a page with its closing tag. */
	const char *end = html ? "</html>\n" : "}\n";
	size_t tl = strlen(r->tail), el = strlen(end);
	bool tail_ok = tl >= el && !strcmp(r->tail + tl - el, end);
	/* The page embeds the files up to 10 MiB only (the 24 MiB one it names), and only until
	 * it is 32 MiB long (the rest it names too): one more embedded file at most past that. */
	uint64_t page_max = (uint64_t)32 * MIB;
	uint64_t want = html ? (t->embedded < page_max ? t->embedded : page_max / 4 * 3) : t->bytes;
	if (html && r->out_bytes > page_max + (uint64_t)15 * MIB)
		fail_msg("%s: a page of %llu bytes", what, (unsigned long long)r->out_bytes);
	fprintf(stderr, "%s: %.1f MiB of artifacts, %llu bytes of output, peak RSS %ld KiB"
		" (one small file: %ld KiB)\n",
		what, (double)t->bytes / MIB, (unsigned long long)r->out_bytes, r->maxrss_kib,
		base_kib);
	if (r->status != 0)
		fail_msg("%s: exit status %d", what, r->status);
	/* Every content is in the output, as base64. */
	if (r->out_bytes < want / 3 * 4 || !tail_ok)
		fail_msg("%s: %llu bytes of output for %llu of artifacts", what,
			 (unsigned long long)r->out_bytes, (unsigned long long)want);
	if (!sanitized() && !RUNNING_ON_VALGRIND && r->maxrss_kib > PEAK_MAX_KIB)
		fail_msg("%s: peak RSS %ld KiB, more than %d", what, r->maxrss_kib, PEAK_MAX_KIB);
	if (r->maxrss_kib - base_kib > GROWTH_MAX_KIB)
		fail_msg("%s: peak RSS grew from %ld KiB (one small file) to %ld KiB", what,
			 base_kib, r->maxrss_kib);
}

static void test_collect_bounded(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	const char *fmts[] = {"json", "jsonl", "html"};
	for (size_t i = 0; i < 3; i++) {
		const char *small[] = {"collect", "--db", t.db, "--format", fmts[i], t.small, NULL};
		struct peak base = measure(NULL, small);
		assert_int_equal(base.status, 0);
		/* Recorded in the history (contents stored) and printed. */
		const char *big[] = {"collect", "--db", t.db, "--format", fmts[i], t.src, NULL};
		struct peak r = measure(NULL, big);
		char what[64];
		snprintf(what, sizeof(what), "collect --format %s", fmts[i]);
		expect_bounded(&t, &r, base.maxrss_kib, fmts[i], what);
	}
	tree_free(&t);
}

static void test_run_bounded(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	char *out = tu_path(t.ws, "out");
	char *a_src = tu_path(t.small, "a.txt");
	const char *fmts[] = {"json", "jsonl", "html"};
	for (size_t i = 0; i < 3; i++) {
		const char *small[] = {"run", "--db", t.db, "--format", fmts[i], "--dir", t.ws,
				       "--", "cp", a_src, "a.txt", NULL};
		struct peak base = measure(t.dir, small);
		assert_int_equal(base.status, 0);
		/* The tree moved into the run's directory: every file of it produced. */
		const char *big[] = {"run", "--db", t.db, "--format", fmts[i], "--dir", t.ws,
				     "--", "mv", t.src, out, NULL};
		struct peak r = measure(NULL, big);
		char what[64];
		snprintf(what, sizeof(what), "run --format %s", fmts[i]);
		expect_bounded(&t, &r, base.maxrss_kib, fmts[i], what);
		assert_int_equal(rename(out, t.src), 0);
		char *a = tu_path(t.ws, "a.txt");
		assert_int_equal(unlink(a), 0);
		free(a);
	}
	free(a_src);
	free(out);
	tree_free(&t);
}

/* The id of the newest artifact named name, read with sqlite3(1). */
static char *artifact_id(const char *db, const char *name)
{
	char sql[128];
	snprintf(sql, sizeof(sql), "SELECT max(id) FROM artifacts WHERE CAST(name AS TEXT) = '%s';", name);
	char *argv[] = {"sqlite3", (char *)db, sql, NULL};
	tu_result r;
	tu_run(&r, NULL, NULL, argv);
	assert_int_equal(r.status, 0);
	r.out[strcspn(r.out, "\n")] = '\0';
	assert_true(r.out[0] >= '1' && r.out[0] <= '9');
	char *id = strdup(r.out);
	assert_non_null(id);
	tu_result_free(&r);
	return id;
}

/* `history get` of a stored content holds it in memory once: read from SQLite piece by piece
 * into one buffer, not read whole by SQLite and copied (twice its size at the peak). */
static void test_history_get_once(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	const char *small[] = {"collect", "--db", t.db, "--format", "jsonl", t.small, NULL};
	const char *big[] = {"collect", "--db", t.db, "--format", "jsonl", t.src, NULL};
	assert_int_equal(measure(NULL, small).status, 0);
	assert_int_equal(measure(NULL, big).status, 0);
	char *id_small = artifact_id(t.db, "a.txt"), *id_huge = artifact_id(t.db, "huge.bin");
	char *rss = tu_path(t.dir, "rss");
	time_out = rss;
	const char *get_small[] = {"history", "get", id_small, "--db", t.db, NULL};
	const char *get_huge[] = {"history", "get", id_huge, "--db", t.db, NULL};
	struct peak base = measure(NULL, get_small), r = measure(NULL, get_huge);
	assert_int_equal(base.status, 0);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.out_bytes, 24 * MIB);
	long growth = r.maxrss_kib - base.maxrss_kib;
	fprintf(stderr, "history get of 24 MiB: peak RSS %ld KiB (of 2 bytes: %ld KiB)\n",
		r.maxrss_kib, base.maxrss_kib);
	/* One copy (24 MiB) and SQLite's page cache (2 MiB); two copies would be 48 MiB. Under
	 * valgrind its shadow of the buffer (a quarter of it) is counted too. */
	long max_kib = (24 + 8 + (RUNNING_ON_VALGRIND ? 8 : 0)) * 1024;
	if (growth > max_kib)
		fail_msg("history get of 24 MiB: peak RSS grew by %ld KiB, more than %ld", growth,
			 max_kib);
	time_out = NULL;
	free(rss);
	free(id_small);
	free(id_huge);
	tree_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_collect_bounded),
		cmocka_unit_test(test_run_bounded),
		cmocka_unit_test(test_history_get_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
