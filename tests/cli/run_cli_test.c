/* End-to-end tests of `harvest run` (SPEC sections 1, 2, 3 and 4): exit statuses as
 * timeout(1) gives them, the timeout killing the whole process group, streaming (a chunk
 * arrives while the command still runs, never split inside a UTF-8 character, non-UTF-8 bytes
 * as \udcXX), stdin, --language, --env, --max-output-bytes, the produced files, camelCase,
 * --format json, and many runs at once into one database. Each case builds its fixture in a
 * fresh temp directory and removes it. */
#include "testutil.h"
#include "tjson.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* A fresh temp dir with the sandbox directory "d" in it; *db is the database beside it. */
typedef struct fixture {
	char *root, *d, *db;
} fixture;

static void fx_open(fixture *f)
{
	f->root = tu_mkdtemp();
	f->d = tu_path(f->root, "d");
	f->db = tu_path(f->root, "h.db");
	tu_mkdir(f->root, "d");
}

static void fx_close(fixture *f)
{
	tu_rmrf(f->root);
	free(f->root);
	free(f->d);
	free(f->db);
}

/* The arguments of `harvest run --db DB --dir D EXTRA... -- CMD...` into args (room for 128):
 * extra and cmd are NULL-terminated (cmd may be NULL for --language). */
static void run_args(const char **args, const fixture *f, const char *const *extra,
		     const char *const *cmd)
{
	size_t n = 0;
	args[n++] = "run";
	args[n++] = "--db";
	args[n++] = f->db;
	args[n++] = "--dir";
	args[n++] = f->d;
	for (size_t i = 0; extra && extra[i]; i++)
		args[n++] = extra[i];
	if (cmd) {
		args[n++] = "--";
		for (size_t i = 0; cmd[i]; i++)
			args[n++] = cmd[i];
	}
	args[n] = NULL;
	assert_true(n < 128);
}

static void hv_run(tu_result *r, const fixture *f, const char *stdin_data,
		   const char *const *extra, const char *const *cmd)
{
	const char *args[128];
	run_args(args, f, extra, cmd);
	tu_harvestv(r, NULL, stdin_data, args);
}

/* The runs `harvest history runs` lists in the fixture's database (a JSON array). */
static tj_value *history_runs(const fixture *f)
{
	tu_result r;
	const char *args[] = {"history", "runs", "--db", f->db, NULL};
	tu_harvestv(&r, NULL, NULL, args);
	if (r.status != 0)
		fail_msg("history runs: exit %d: %s", r.status, r.err);
	tj_value *doc = tj_parse(r.out, r.out_len);
	if (tj_type(doc) != TJ_ARRAY)
		fail_msg("history runs is not an array: %s", r.out);
	tu_result_free(&r);
	return doc;
}

/* The events of run's jsonl output: every line but the last a stream chunk, the last the
 * execution result (of the given case). */
typedef struct events {
	tj_value *doc;
	size_t n;
	const tj_value *result;
} events;

static void parse_events(events *ev, const tu_result *r, bool camel)
{
	ev->doc = tj_parse_lines(r->out, r->out_len, &ev->n);
	if (!ev->doc || ev->n == 0)
		fail_msg("run's output is not valid jsonl (exit %d):\n%s\nstderr: %s", r->status,
			 r->out, r->err);
	const char *chunk_type = camel ? "streamChunk" : "stream_chunk";
	const char *stream_key = camel ? "streamType" : "stream_type";
	for (size_t i = 0; i + 1 < ev->n; i++) {
		const tj_value *c = tj_at(ev->doc, i);
		const char *t = tj_str(tj_get(c, "type"), NULL);
		if (!t || strcmp(t, chunk_type) != 0)
			fail_msg("line %zu: type %s, expected %s", i + 1, t ? t : "(none)",
				 chunk_type);
		const char *s = tj_str(tj_get(c, stream_key), NULL);
		assert_non_null(s);
		assert_true(strcmp(s, "stdout") == 0 || strcmp(s, "stderr") == 0);
		assert_int_equal(tj_type(tj_get(c, "data")), TJ_STRING);
		assert_int_equal(tj_len(c), 3);
	}
	ev->result = tj_at(ev->doc, ev->n - 1);
	const char *t = tj_str(tj_get(ev->result, "type"), NULL);
	assert_non_null(t);
	assert_string_equal(t, camel ? "executionResult" : "execution_result");
}

/* All chunk data of one stream, concatenated (malloc'd bytes, length in *len). */
static char *stream_bytes(const events *ev, const char *which, size_t *len, bool camel)
{
	size_t cap = 1, n = 0;
	for (size_t i = 0; i + 1 < ev->n; i++) {
		size_t l;
		tj_str(tj_get(tj_at(ev->doc, i), "data"), &l);
		cap += l;
	}
	char *out = malloc(cap);
	assert_non_null(out);
	for (size_t i = 0; i + 1 < ev->n; i++) {
		const tj_value *c = tj_at(ev->doc, i);
		if (strcmp(tj_str(tj_get(c, camel ? "streamType" : "stream_type"), NULL), which) != 0)
			continue;
		size_t l;
		const char *d = tj_str(tj_get(c, "data"), &l);
		memcpy(out + n, d, l);
		n += l;
	}
	out[n] = '\0';
	*len = n;
	return out;
}

static void assert_bytes(const tj_value *v, const char *want, size_t want_len)
{
	size_t len;
	const char *s = tj_str(v, &len);
	if (!s)
		fail_msg("not a string");
	if (len != want_len || memcmp(s, want, len) != 0)
		fail_msg("got %zu bytes '%s', expected %zu bytes '%s'", len, s, want_len, want);
}

static void events_free(events *ev)
{
	tj_free(ev->doc);
	memset(ev, 0, sizeof(*ev));
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

/* The output file of a result with exactly this path, or NULL. */
static const tj_value *find_output(const tj_value *result, const char *key, const char *path)
{
	const tj_value *a = tj_get(result, key);
	for (size_t i = 0; i < tj_len(a); i++) {
		const char *p = tj_str(tj_get(tj_at(a, i), "path"), NULL);
		if (p && strcmp(p, path) == 0)
			return tj_at(a, i);
	}
	return NULL;
}

/* Checks one output file against the file d/rel: every field. */
static void check_output(const tj_value *of, const char *d, const char *rel, const char *mime,
			 const char *mime_key)
{
	if (!of)
		fail_msg("%s is not in output_files", rel);
	char *full = tu_path(d, rel);
	size_t len;
	char *bytes = tu_read_file(full, &len);
	assert_non_null(bytes);
	const char *base = strrchr(rel, '/');
	assert_string_equal(tj_str(tj_get(of, "name"), NULL), base ? base + 1 : rel);
	assert_string_equal(tj_str(tj_get(of, mime_key), NULL), mime);
	assert_int_equal(tj_int(tj_get(of, "size")), (int64_t)len);
	char hex[65];
	tu_sha256_hex(bytes, len, hex);
	assert_string_equal(tj_str(tj_get(of, "sha256"), NULL), hex);
	char *b64 = b64_encode((const unsigned char *)bytes, len);
	assert_string_equal(tj_str(tj_get(of, "content"), NULL), b64);
	free(b64);
	free(bytes);
	free(full);
}

/* ---- exit statuses ---- */

static void expect_exit(const fixture *f, const char *const *cmd, int want, const char *err_has)
{
	tu_result r;
	hv_run(&r, f, NULL, NULL, cmd);
	if (r.status != want)
		fail_msg("%s: exit %d, expected %d; stderr: %s", cmd[0], r.status, want, r.err);
	events ev;
	parse_events(&ev, &r, false);
	assert_int_equal(tj_type(tj_get(ev.result, "exit_code")), TJ_INT);
	assert_int_equal(tj_int(tj_get(ev.result, "exit_code")), want);
	assert_false(tj_bool(tj_get(ev.result, "timed_out")));
	assert_int_equal(tj_type(tj_get(ev.result, "run_id")), TJ_INT);
	if (err_has) {
		/* The reason is in the run's stderr (the stream and the result). */
		size_t len;
		char *e = stream_bytes(&ev, "stderr", &len, false);
		if (!strstr(e, err_has))
			fail_msg("stderr stream lacks '%s': %s", err_has, e);
		assert_non_null(strstr(tj_str(tj_get(ev.result, "stderr"), NULL), err_has));
		free(e);
	}
	events_free(&ev);
	tu_result_free(&r);
}

static void test_exit_codes(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_write(f.root, "not-exec.sh", "echo hi\n", 8);
	char *ne = tu_path(f.root, "not-exec.sh");
	assert_int_equal(chmod(ne, 0644), 0);
	expect_exit(&f, (const char *const[]){"true", NULL}, 0, NULL);
	expect_exit(&f, (const char *const[]){"sh", "-c", "exit 7", NULL}, 7, NULL);
	expect_exit(&f, (const char *const[]){"no-such-command-hv42", NULL}, 127,
		    "no-such-command-hv42");
	expect_exit(&f, (const char *const[]){ne, NULL}, 126, "not-exec.sh");
	expect_exit(&f, (const char *const[]){"sh", "-c", "kill -9 $$", NULL}, 137, NULL);
	expect_exit(&f, (const char *const[]){"sh", "-c", "kill -TERM $$", NULL}, 143, NULL);
	/* --shell: one string for sh -c. */
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--shell", NULL},
	       (const char *const[]){"echo one two | wc -w; exit 3", NULL});
	assert_int_equal(r.status, 3);
	events ev;
	parse_events(&ev, &r, false);
	assert_bytes(tj_get(ev.result, "stdout"), "2\n", 2);
	events_free(&ev);
	tu_result_free(&r);
	/* The shell is /bin/sh whatever PATH the command gets (that PATH is for the command's
	 * own lookups: it used to make `sh` itself not found, 127), and a script starting with
	 * '-' or '+' is a command, not sh's options ("-c requires an argument", 2). */
	hv_run(&r, &f, NULL, (const char *const[]){"--shell", "--env", "PATH=/nonexistent-hv", NULL},
	       (const char *const[]){"echo \"$PATH\"; -hv42x; +hv42y", NULL});
	assert_int_equal(r.status, 127);
	parse_events(&ev, &r, false);
	assert_bytes(tj_get(ev.result, "stdout"), "/nonexistent-hv\n", 16);
	size_t elen;
	const char *e = tj_str(tj_get(ev.result, "stderr"), &elen);
	print_message("stderr: %s", e);
	assert_non_null(strstr(e, "-hv42x: not found"));
	assert_non_null(strstr(e, "+hv42y: not found"));
	events_free(&ev);
	tu_result_free(&r);
	for (int i = 0; i < 2; i++) {
		hv_run(&r, &f, NULL, (const char *const[]){"--shell", NULL},
		       (const char *const[]){i ? "+hv42y" : "-hv42x", NULL});
		assert_int_equal(r.status, 127);
		parse_events(&ev, &r, false);
		e = tj_str(tj_get(ev.result, "stderr"), &elen);
		if (!strstr(e, i ? "+hv42y: not found" : "-hv42x: not found"))
			fail_msg("--shell -- %s: stderr: %s", i ? "+hv42y" : "-hv42x", e);
		events_free(&ev);
		tu_result_free(&r);
	}
	free(ne);
	fx_close(&f);
}

/* Gone: no such process, or (when nothing reaps orphans here) a zombie, which is dead. */
static bool process_gone(pid_t pid)
{
	for (int i = 0; i < 60; i++) {
		if (kill(pid, 0) != 0 && errno == ESRCH)
			return true;
		char p[64], buf[512];
		snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
		int fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
			if (n > 0) {
				buf[n] = '\0';
				char *rp = strrchr(buf, ')');
				if (rp && rp[1] == ' ' && rp[2] == 'Z' && i >= 20)
					return true;
			}
		}
		struct timespec t = {0, 50 * 1000 * 1000};
		nanosleep(&t, NULL);
	}
	return false;
}

static void test_timeout(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	/* The second command ignores SIGTERM (and so does its background child): SIGKILL 2 s
	 * later ends them. In the third, the background child ignores SIGTERM and holds no
	 * pipe: it must not outlive the run either. */
	static const char *const scripts[] = {
		"sleep 100 & echo $!; sleep 100",
		"trap '' TERM; sleep 100 & echo $!; sleep 100",
		"(trap '' TERM; exec sleep 100) >/dev/null 2>&1 & echo $!; sleep 100",
	};
	for (int k = 0; k < 3; k++) {
		tu_result r;
		double t0 = tu_now_s();
		/* 2 s: long enough for a loaded machine to start the shell and print the pid */
		hv_run(&r, &f, NULL, (const char *const[]){"--timeout", "2", NULL},
		       (const char *const[]){"sh", "-c", scripts[k], NULL});
		double took = tu_now_s() - t0;
		assert_int_equal(r.status, 124);
		assert_true(took >= 1.9);
		assert_true(took < (k == 1 ? 9.0 : 7.0));
		events ev;
		parse_events(&ev, &r, false);
		assert_true(tj_bool(tj_get(ev.result, "timed_out")));
		assert_int_equal(tj_int(tj_get(ev.result, "exit_code")), 124);
		assert_true(tj_int(tj_get(ev.result, "duration_ms")) >= 1900);
		/* The partial output is kept: the background child's pid. */
		const char *out = tj_str(tj_get(ev.result, "stdout"), NULL);
		assert_non_null(out);
		long pid = strtol(out, NULL, 10);
		assert_true(pid > 1);
		size_t len;
		char *streamed = stream_bytes(&ev, "stdout", &len, false);
		assert_string_equal(streamed, out);
		free(streamed);
		if (!process_gone((pid_t)pid)) {
			kill((pid_t)pid, SIGKILL);
			fail_msg("the background grandchild %ld survived the timeout", pid);
		}
		events_free(&ev);
		tu_result_free(&r);
	}
	fx_close(&f);
}

/* ---- streaming ---- */

static void test_chunk_while_running(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	double t0 = tu_now_s();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 2);
		dup2(p[1], 1);
		execl(HARVEST_BIN, HARVEST_BIN, "run", "--db", f.db, "--dir", f.d, "--", "sh", "-c",
		      "echo first; sleep 3; echo second", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char buf[65536];
	size_t n = 0;
	double t_first = -1;
	for (;;) {
		ssize_t got = read(p[0], buf + n, sizeof(buf) - 1 - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		n += (size_t)got;
		if (t_first < 0 && memchr(buf, '\n', n))
			t_first = tu_now_s();
	}
	double t_end = tu_now_s();
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	buf[n] = '\0';
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_true(t_first > 0);
	print_message("first line after %.3f s, end after %.3f s\n", t_first - t0, t_end - t0);
	/* The first line came while the command was still sleeping (3 s), not at its end. */
	assert_true(t_end - t_first > 1.0);
	char *nl = strchr(buf, '\n');
	tj_value *first = tj_parse(buf, (size_t)(nl - buf));
	assert_non_null(first);
	assert_string_equal(tj_str(tj_get(first, "type"), NULL), "stream_chunk");
	assert_string_equal(tj_str(tj_get(first, "data"), NULL), "first\n");
	tj_free(first);
	fx_close(&f);
}

static void test_utf8_split(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv_run(&r, &f, NULL, NULL,
	       (const char *const[]){"sh", "-c",
				     "printf '\\303'; sleep 0.3; printf '\\251'; sleep 0.3; "
				     "printf '\\342\\202'; sleep 0.3; printf '\\254'",
				     NULL});
	assert_int_equal(r.status, 0);
	events ev;
	parse_events(&ev, &r, false);
	/* "é" (C3 A9) then "€" (E2 82 AC), each whole in one chunk, never a lone lead byte. */
	bool e_whole = false, euro_whole = false;
	for (size_t i = 0; i + 1 < ev.n; i++) {
		size_t len;
		const char *d = tj_str(tj_get(tj_at(ev.doc, i), "data"), &len);
		if (memmem(d, len, "\xc3\xa9", 2))
			e_whole = true;
		if (memmem(d, len, "\xe2\x82\xac", 3))
			euro_whole = true;
		if (len > 0 && ((unsigned char)d[len - 1] == 0xc3 || (unsigned char)d[len - 1] == 0xe2 ||
				(unsigned char)d[len - 1] == 0x82))
			fail_msg("chunk %zu ends inside a UTF-8 character", i);
	}
	assert_true(e_whole);
	assert_true(euro_whole);
	size_t len;
	char *all = stream_bytes(&ev, "stdout", &len, false);
	assert_int_equal(len, 5);
	assert_memory_equal(all, "\xc3\xa9\xe2\x82\xac", 5);
	assert_bytes(tj_get(ev.result, "stdout"), "\xc3\xa9\xe2\x82\xac", 5);
	/* Written as the characters (or their \u escapes), not as surrogate escapes. */
	assert_null(strstr(r.out, "\\udc"));
	free(all);
	events_free(&ev);
	tu_result_free(&r);
	fx_close(&f);
}

static void test_non_utf8_bytes(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv_run(&r, &f, NULL, NULL,
	       (const char *const[]){"sh", "-c",
				     "printf 'a\\377b\\200c\\300\\257'; printf 'x\\376' >&2; "
				     "sleep 0.2; printf '\\303'",
				     NULL});
	assert_int_equal(r.status, 0);
	assert_true(tj_utf8_valid(r.out, r.out_len));
	events ev;
	parse_events(&ev, &r, false);
	static const char want[] = "a\xff" "b\x80" "c\xc0\xaf\xc3";
	size_t len;
	char *all = stream_bytes(&ev, "stdout", &len, false);
	assert_int_equal(len, sizeof(want) - 1);
	assert_memory_equal(all, want, len);
	assert_bytes(tj_get(ev.result, "stdout"), want, sizeof(want) - 1);
	assert_bytes(tj_get(ev.result, "stderr"), "x\xfe", 2);
	/* As the escapes \udcXX in the text itself (an overlong form too). */
	assert_non_null(strstr(r.out, "\\udcff"));
	assert_non_null(strstr(r.out, "\\udc80"));
	assert_non_null(strstr(r.out, "\\udcc0\\udcaf"));
	assert_non_null(strstr(r.out, "\\udcc3"));
	assert_non_null(strstr(r.out, "\\udcfe"));
	free(all);
	events_free(&ev);
	tu_result_free(&r);
	fx_close(&f);
}

/* ---- stdin, --language, --env ---- */

static void test_stdin_is_dev_null(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	double t0 = tu_now_s();
	hv_run(&r, &f, "harvest's own stdin must not reach the child\n", NULL,
	       (const char *const[]){"cat", NULL});
	assert_true(tu_now_s() - t0 < 10);
	assert_int_equal(r.status, 0);
	events ev;
	parse_events(&ev, &r, false);
	assert_int_equal(ev.n, 1); /* no chunk at all */
	assert_bytes(tj_get(ev.result, "stdout"), "", 0);
	events_free(&ev);
	tu_result_free(&r);

	hv_run(&r, &f, "data\n", NULL,
	       (const char *const[]){"sh", "-c", "readlink /proc/self/fd/0", NULL});
	assert_int_equal(r.status, 0);
	parse_events(&ev, &r, false);
	assert_bytes(tj_get(ev.result, "stdout"), "/dev/null\n", 10);
	events_free(&ev);
	tu_result_free(&r);
	fx_close(&f);
}

static void test_language(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	static const char code[] = "import sys\n"
				   "print('py', 6 * 7)\n"
				   "print('to stderr', file=sys.stderr)\n"
				   "open('made.txt', 'w').write('from python\\n')\n"
				   "sys.exit(5)\n";
	hv_run(&r, &f, code, (const char *const[]){"--language", "python3", NULL}, NULL);
	if (r.status != 5)
		fail_msg("exit %d: %s%s", r.status, r.out, r.err);
	events ev;
	parse_events(&ev, &r, false);
	assert_bytes(tj_get(ev.result, "stdout"), "py 42\n", 6);
	assert_bytes(tj_get(ev.result, "stderr"), "to stderr\n", 10);
	assert_int_equal(tj_int(tj_get(ev.result, "exit_code")), 5);
	assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 1);
	check_output(find_output(ev.result, "output_files", "made.txt"), f.d, "made.txt",
		     "text/plain", "mime_type");
	events_free(&ev);
	tu_result_free(&r);

	/* Invalid interpreter names: 125 with a message, nothing run. */
	static const char *const bad[] = {"py thon", "../bin/sh", "python3;rm", "", "sh\n"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		hv_run(&r, &f, "print(1)\n", (const char *const[]){"--language", bad[i], NULL},
		       NULL);
		if (r.status != 125)
			fail_msg("--language '%s': exit %d", bad[i], r.status);
		assert_int_equal(r.out_len, 0);
		assert_non_null(strstr(r.err, "--language"));
		tu_result_free(&r);
	}
	/* A valid name that is not installed: 127, as a missing command. */
	hv_run(&r, &f, "x\n", (const char *const[]){"--language", "no-such-lang-hv42", NULL},
	       NULL);
	assert_int_equal(r.status, 127);
	tu_result_free(&r);
	fx_close(&f);
}

static void test_env(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv_run(&r, &f, NULL,
	       (const char *const[]){"--env", "HV_TEST_VAR=hello world=x", "--env", "HV_EMPTY=",
				     NULL},
	       (const char *const[]){"sh", "-c",
				     "printf '%s|%s|%s' \"$HV_TEST_VAR\" \"${HV_EMPTY-unset}\" "
				     "\"${PATH:+path}\"",
				     NULL});
	assert_int_equal(r.status, 0);
	events ev;
	parse_events(&ev, &r, false);
	assert_bytes(tj_get(ev.result, "stdout"), "hello world=x||path", 19);
	events_free(&ev);
	tu_result_free(&r);

	static const char *const bad[] = {"1BAD=x", "=x", "A-B=x", "NOEQUALS"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		hv_run(&r, &f, NULL, (const char *const[]){"--env", bad[i], NULL},
		       (const char *const[]){"true", NULL});
		if (r.status != 125)
			fail_msg("--env '%s': exit %d", bad[i], r.status);
		assert_int_equal(r.out_len, 0);
		assert_non_null(strstr(r.err, "--env"));
		tu_result_free(&r);
	}
	fx_close(&f);
}

/* ---- output limits ---- */

static void test_max_output_bytes(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--max-output-bytes", "1000", NULL},
	       (const char *const[]){"sh", "-c",
				     "head -c 5000 /dev/zero | tr '\\0' a; "
				     "head -c 300 /dev/zero | tr '\\0' b >&2",
				     NULL});
	assert_int_equal(r.status, 0);
	events ev;
	parse_events(&ev, &r, false);
	size_t len;
	const char *kept = tj_str(tj_get(ev.result, "stdout"), &len);
	assert_non_null(kept);
	assert_true(len > 0 && len <= 1000);
	for (size_t i = 0; i < len; i++)
		assert_int_equal(kept[i], 'a');
	assert_true(tj_bool(tj_get(ev.result, "stdout_truncated")));
	assert_int_equal(tj_type(tj_get(ev.result, "stderr_truncated")), TJ_BOOL);
	assert_false(tj_bool(tj_get(ev.result, "stderr_truncated")));
	char bs[300];
	memset(bs, 'b', sizeof(bs));
	assert_bytes(tj_get(ev.result, "stderr"), bs, sizeof(bs));
	/* The stream itself is complete. */
	char *all = stream_bytes(&ev, "stdout", &len, false);
	assert_int_equal(len, 5000);
	for (size_t i = 0; i < len; i++)
		assert_int_equal(all[i], 'a');
	free(all);
	events_free(&ev);
	tu_result_free(&r);

	/* Below the limit: nothing truncated. */
	hv_run(&r, &f, NULL, (const char *const[]){"--max-output-bytes", "1000", NULL},
	       (const char *const[]){"sh", "-c", "head -c 1000 /dev/zero | tr '\\0' a", NULL});
	assert_int_equal(r.status, 0);
	parse_events(&ev, &r, false);
	tj_str(tj_get(ev.result, "stdout"), &len);
	assert_int_equal(len, 1000);
	assert_false(tj_bool(tj_get(ev.result, "stdout_truncated")));
	events_free(&ev);
	tu_result_free(&r);
	fx_close(&f);
}

/* ---- produced files ---- */

static void test_produced_files(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_write(f.root, "src.png", png_bytes, sizeof(png_bytes));
	tu_write(f.root, "d/keep.txt", "kept as is\n", 11);
	tu_write(f.root, "d/mod.txt", "before\n", 7);
	tu_mkdir(f.root, "d/old");
	tu_write(f.root, "d/old/same.csv", "a,b\n", 4);
	char *src = tu_path(f.root, "src.png");
	char script[8192];
	snprintf(script, sizeof(script),
		 "echo more >> mod.txt; printf '# New\\n' > new.md; mkdir -p n1/n2; "
		 "cp '%s' n1/n2/img.png; printf '1,2\\n3,4\\n' > old/made.csv; "
		 "printf 'x' > .hidden; ln -s keep.txt link.txt; echo done",
		 src);
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--shell", NULL},
	       (const char *const[]){script, NULL});
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	events ev;
	parse_events(&ev, &r, false);
	const tj_value *res = ev.result;
	assert_bytes(tj_get(res, "stdout"), "done\n", 5);
	const tj_value *ofs = tj_get(res, "output_files");
	for (size_t i = 0; i < tj_len(ofs); i++)
		print_message("output file: %s\n", tj_str(tj_get(tj_at(ofs, i), "path"), NULL));
	assert_int_equal(tj_len(ofs), 4);
	check_output(find_output(res, "output_files", "mod.txt"), f.d, "mod.txt", "text/plain",
		     "mime_type");
	check_output(find_output(res, "output_files", "new.md"), f.d, "new.md", "text/markdown",
		     "mime_type");
	check_output(find_output(res, "output_files", "n1/n2/img.png"), f.d, "n1/n2/img.png",
		     "image/png", "mime_type");
	check_output(find_output(res, "output_files", "old/made.csv"), f.d, "old/made.csv",
		     "text/csv", "mime_type");
	const tj_value *sk = find_output(res, "skipped", "link.txt");
	assert_non_null(sk);
	assert_string_equal(tj_str(tj_get(sk, "reason"), NULL), "symlink");
	assert_int_equal(tj_len(tj_get(res, "skipped")), 1);
	assert_int_equal(tj_type(tj_get(res, "run_id")), TJ_INT);
	assert_int_equal(tj_type(tj_get(res, "duration_ms")), TJ_INT);
	events_free(&ev);
	tu_result_free(&r);

	/* --no-content: the same files, content null. */
	hv_run(&r, &f, NULL, (const char *const[]){"--no-content", NULL},
	       (const char *const[]){"sh", "-c", "echo again >> mod.txt", NULL});
	assert_int_equal(r.status, 0);
	parse_events(&ev, &r, false);
	assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 1);
	const tj_value *of = find_output(ev.result, "output_files", "mod.txt");
	assert_non_null(of);
	assert_true(tj_is_null(tj_get(of, "content")));
	events_free(&ev);
	tu_result_free(&r);
	free(src);
	fx_close(&f);
}

/* What the run changed: how each produced file changed, and the regular files that are gone
 * (removed, renamed away, replaced by a directory); a file renamed in counts as created. And
 * the run's before-state is held in memory: while the command runs, the database holds no
 * snapshot (the command's own `harvest snapshot` gets the first id). */
static void test_changes_and_deleted(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_write(f.root, "d/gone.txt", "bye\n", 4);
	tu_write(f.root, "d/mod.txt", "before\n", 7);
	tu_write(f.root, "d/away.txt", "moving\n", 7);
	tu_write(f.root, "d/now-dir", "a file\n", 7);
	tu_write(f.root, "d/keep.txt", "kept\n", 5);
	char script[8192];
	snprintf(script, sizeof(script),
		 "rm gone.txt; echo more >> mod.txt; mkdir sub; mv away.txt sub/away.txt; "
		 "rm now-dir; mkdir now-dir; echo new > new.txt; '%s' snapshot --db '%s' '%s'",
		 HARVEST_BIN, f.db, f.root);
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--shell", NULL},
	       (const char *const[]){script, NULL});
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	events ev;
	parse_events(&ev, &r, false);
	const tj_value *res = ev.result;
	tj_value *snap = tj_parse(tj_str(tj_get(res, "stdout"), NULL),
				  strlen(tj_str(tj_get(res, "stdout"), NULL)));
	assert_non_null(snap);
	assert_int_equal(tj_int(tj_get(snap, "snapshot_id")), 1);
	tj_free(snap);
	const tj_value *ofs = tj_get(res, "output_files");
	assert_int_equal(tj_len(ofs), 3);
	assert_string_equal(
		tj_str(tj_get(find_output(res, "output_files", "mod.txt"), "change"), NULL),
		"modified");
	assert_string_equal(
		tj_str(tj_get(find_output(res, "output_files", "new.txt"), "change"), NULL),
		"created");
	assert_string_equal(
		tj_str(tj_get(find_output(res, "output_files", "sub/away.txt"), "change"), NULL),
		"created");
	const tj_value *del = tj_get(res, "deleted");
	assert_int_equal(tj_type(del), TJ_ARRAY);
	assert_int_equal(tj_len(del), 3);
	assert_string_equal(tj_str(tj_at(del, 0), NULL), "away.txt");
	assert_string_equal(tj_str(tj_at(del, 1), NULL), "gone.txt");
	assert_string_equal(tj_str(tj_at(del, 2), NULL), "now-dir");
	events_free(&ev);
	tu_result_free(&r);

	/* A run that changes nothing: empty lists, still there. */
	hv_run(&r, &f, NULL, NULL, (const char *const[]){"true", NULL});
	assert_int_equal(r.status, 0);
	parse_events(&ev, &r, false);
	assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 0);
	assert_int_equal(tj_type(tj_get(ev.result, "deleted")), TJ_ARRAY);
	assert_int_equal(tj_len(tj_get(ev.result, "deleted")), 0);
	events_free(&ev);
	tu_result_free(&r);
	fx_close(&f);
}

/* A directory removed with its files and made again (or another moved to its place) within
 * the run: a file at one of its names now was there before (modified, not deleted), one not
 * written again is deleted; the same with the kernel's events as with the snapshots. */
static void test_directory_made_again(void **state)
{
	(void)state;
	static const char *const modes[] = {"events", "snapshot"};
	for (size_t m = 0; m < 2; m++) {
		fixture f;
		fx_open(&f);
		tu_mkdir(f.d, "re");
		tu_mkdir(f.d, "mv");
		tu_write(f.root, "d/re/a.txt", "one\n", 4);
		tu_write(f.root, "d/re/b.txt", "two\n", 4);
		tu_write(f.root, "d/mv/c.txt", "three\n", 6);
		tu_result r;
		hv_run(&r, &f, NULL, (const char *const[]){"--no-history", "--changes", modes[m], NULL},
		       (const char *const[]){"sh", "-c",
					     "rm -rf re; mkdir re; echo again > re/a.txt; mkdir t; "
					     "echo c > t/c.txt; rm -rf mv; mv t mv",
					     NULL});
		if (r.status != 0)
			fail_msg("%s: exit %d: %s", modes[m], r.status, r.err);
		events ev;
		parse_events(&ev, &r, false);
		const tj_value *res = ev.result;
		assert_int_equal(tj_len(tj_get(res, "output_files")), 2);
		const char *paths[] = {"re/a.txt", "mv/c.txt"};
		for (size_t i = 0; i < 2; i++) {
			const tj_value *of = find_output(res, "output_files", paths[i]);
			if (!of || strcmp(tj_str(tj_get(of, "change"), NULL), "modified") != 0)
				fail_msg("%s: %s: %s", modes[m], paths[i],
					 of ? tj_str(tj_get(of, "change"), NULL) : "not produced");
		}
		const tj_value *del = tj_get(res, "deleted");
		assert_int_equal(tj_len(del), 1);
		assert_string_equal(tj_str(tj_at(del, 0), NULL), "re/b.txt");
		events_free(&ev);
		tu_result_free(&r);
		fx_close(&f);
	}
}

/* Names whose object the run only used: a FIFO written through, a symlink touched, a file
 * made with O_TMPFILE (its name in the kernel's events is "#<inode>", no directory entry) are
 * not deleted, in either mode; a regular file replaced by a FIFO is. */
static void test_used_special_files_not_deleted(void **state)
{
	(void)state;
	static const char *const modes[] = {"events", "snapshot"};
	for (size_t m = 0; m < 2; m++) {
		fixture f;
		fx_open(&f);
		char *p = tu_path(f.d, "p");
		char *l = tu_path(f.d, "l");
		assert_int_equal(mkfifo(p, 0644), 0);
		assert_int_equal(symlink("elsewhere", l), 0);
		tu_write(f.root, "d/f.txt", "a regular file\n", 15);
		tu_result r;
		hv_run(&r, &f, NULL, (const char *const[]){"--no-history", "--changes", modes[m], NULL},
		       (const char *const[]){"sh", "-c",
					     "cat p >/dev/null & echo hi > p; wait; chmod 600 p; "
					     "touch -h l; echo more >> f.txt; rm f.txt; mkfifo f.txt; "
					     "python3 -c 'import os; fd = os.open(\".\", "
					     "os.O_TMPFILE | os.O_WRONLY, 0o600); os.write(fd, b\"x\")'",
					     NULL});
		if (r.status != 0)
			fail_msg("%s: exit %d: %s", modes[m], r.status, r.err);
		events ev;
		parse_events(&ev, &r, false);
		const tj_value *del = tj_get(ev.result, "deleted");
		if (tj_len(del) != 1 || strcmp(tj_str(tj_at(del, 0), NULL), "f.txt") != 0)
			fail_msg("%s: deleted is not [\"f.txt\"]: %s", modes[m], r.out);
		assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 0);
		events_free(&ev);
		tu_result_free(&r);
		free(p);
		free(l);
		fx_close(&f);
	}
}

/* ---- shapes ---- */

/* Fails when any key of v (recursively) has an underscore. */
static void assert_no_snake_keys(const tj_value *v)
{
	if (tj_type(v) == TJ_OBJECT) {
		for (size_t i = 0; i < tj_len(v); i++) {
			const char *k = tj_key(v, i, NULL);
			if (strchr(k, '_'))
				fail_msg("snake_case key '%s' with --case camel", k);
			assert_no_snake_keys(tj_at(v, i));
		}
	} else if (tj_type(v) == TJ_ARRAY) {
		for (size_t i = 0; i < tj_len(v); i++)
			assert_no_snake_keys(tj_at(v, i));
	}
}

static void test_camel_case(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--case", "camel", NULL},
	       (const char *const[]){"sh", "-c",
				     "echo out; echo err >&2; echo hi > f.txt; ln -s f.txt l", NULL});
	assert_int_equal(r.status, 0);
	events ev;
	parse_events(&ev, &r, true);
	assert_true(ev.n >= 3);
	for (size_t i = 0; i < ev.n; i++)
		assert_no_snake_keys(tj_at(ev.doc, i));
	const tj_value *res = ev.result;
	static const char *const keys[] = {"exitCode", "stdout",  "stderr", "outputFiles",
					   "skipped",  "runId",   "timedOut", "durationMs",
					   "stdoutTruncated", "stderrTruncated"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!tj_get(res, keys[i]))
			fail_msg("the result has no '%s'", keys[i]);
	assert_int_equal(tj_int(tj_get(res, "exitCode")), 0);
	check_output(find_output(res, "outputFiles", "f.txt"), f.d, "f.txt", "text/plain",
		     "mimeType");
	size_t len;
	char *out = stream_bytes(&ev, "stdout", &len, true);
	assert_string_equal(out, "out\n");
	free(out);
	char *err = stream_bytes(&ev, "stderr", &len, true);
	assert_string_equal(err, "err\n");
	free(err);
	events_free(&ev);
	tu_result_free(&r);
	/* --no-content: an OutputFile keeps its members in camel case too, content null (SPEC
	 * 1: "same keys in camelCase"; only FileInfo leaves unknown members out). */
	hv_run(&r, &f, NULL, (const char *const[]){"--case", "camel", "--no-content", NULL},
	       (const char *const[]){"sh", "-c", "echo again > g.txt", NULL});
	assert_int_equal(r.status, 0);
	parse_events(&ev, &r, true);
	const tj_value *g = find_output(ev.result, "outputFiles", "g.txt");
	assert_non_null(g);
	assert_non_null(tj_get(g, "content"));
	assert_true(tj_is_null(tj_get(g, "content")));
	assert_int_equal(tj_type(tj_get(g, "sha256")), TJ_STRING);
	events_free(&ev);
	tu_result_free(&r);
	fx_close(&f);
}

static void test_format_json(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--format", "json", NULL},
	       (const char *const[]){"sh", "-c", "echo one; sleep 0.1; echo two; echo x > o.txt",
				     NULL});
	assert_int_equal(r.status, 0);
	tj_value *doc = tj_parse(r.out, r.out_len); /* exactly one document */
	if (!doc)
		fail_msg("not one JSON document: %s", r.out);
	assert_string_equal(tj_str(tj_get(doc, "type"), NULL), "execution_result");
	assert_string_equal(tj_str(tj_get(doc, "stdout"), NULL), "one\ntwo\n");
	assert_int_equal(tj_len(tj_get(doc, "output_files")), 1);
	assert_non_null(strstr(r.out, "execution_result"));
	assert_null(strstr(r.out, "stream_chunk"));
	tj_free(doc);
	tu_result_free(&r);
	fx_close(&f);
}

static void test_harvest_failures(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	/* --dir missing */
	char *missing = tu_path(f.root, "no-such-dir");
	const char *a1[] = {"run", "--db", f.db, "--dir", missing, "--", "true", NULL};
	tu_harvestv(&r, NULL, NULL, a1);
	assert_int_equal(r.status, 125);
	assert_int_equal(r.out_len, 0);
	assert_non_null(strstr(r.err, "no-such-dir"));
	tu_result_free(&r);
	/* Usage errors are 125 too (not 2). */
	static const char *const bad[][2] = {{"--timeout", "abc"}, {"--timeout", "-1"},
					     {"--max-output-bytes", "x"}, {"--format", "text"},
					     {"--case", "kebab"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *a[] = {"run", "--db", f.db, "--dir", f.d, bad[i][0], bad[i][1], "--",
				   "true", NULL};
		tu_harvestv(&r, NULL, NULL, a);
		if (r.status != 125)
			fail_msg("%s %s: exit %d", bad[i][0], bad[i][1], r.status);
		assert_int_equal(r.out_len, 0);
		tu_result_free(&r);
	}
	const char *nocmd[] = {"run", "--db", f.db, "--dir", f.d, NULL};
	tu_harvestv(&r, NULL, NULL, nocmd);
	assert_int_equal(r.status, 125);
	tu_result_free(&r);
	/* A database that is not one: 125, nothing run. */
	tu_write(f.root, "notdb", "plain text, not a database\n", 27);
	char *notdb = tu_path(f.root, "notdb");
	const char *a2[] = {"run", "--db", notdb, "--dir", f.d, "--", "sh", "-c",
			    "echo ran > ran.txt", NULL};
	tu_harvestv(&r, NULL, NULL, a2);
	assert_int_equal(r.status, 125);
	assert_non_null(strstr(r.err, "notdb"));
	char *ran = tu_path(f.d, "ran.txt");
	assert_int_not_equal(access(ran, F_OK), 0);
	tu_result_free(&r);
	free(ran);
	free(notdb);
	free(missing);
	fx_close(&f);
}

/* ---- option conflicts, --help, harvest's own stdin ---- */

/* Options that contradict each other are usage errors and so harvest's own failure (125,
 * not 2): a one-line reason, nothing run, no database made. */
static void test_option_conflicts(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	static const struct {
		const char *extra[4];
		const char *cmd[4];
		const char *says;
	} bad[] = {
		{{"--shell", "--language", "sh", NULL}, {"touch ran.txt", NULL}, "do not go together"},
		{{"--shell", NULL}, {"touch", "ran.txt", NULL}, "one string"},
		{{"--language", "sh", NULL}, {"touch", "ran.txt", NULL}, "no COMMAND"},
		{{"--shell", NULL}, {NULL}, "missing COMMAND"},
	};
	char *ran = tu_path(f.d, "ran.txt");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tu_result r;
		hv_run(&r, &f, "touch ran.txt\n", bad[i].extra, bad[i].cmd[0] ? bad[i].cmd : NULL);
		if (r.status != 125)
			fail_msg("case %zu: exit %d, expected 125", i, r.status);
		assert_int_equal(r.out_len, 0);
		if (!strstr(r.err, bad[i].says) || strchr(r.err, '\n') != r.err + r.err_len - 1)
			fail_msg("case %zu: expected one line saying '%s': %s", i, bad[i].says, r.err);
		tu_result_free(&r);
	}
	assert_int_not_equal(access(ran, F_OK), 0);
	assert_int_not_equal(access(f.db, F_OK), 0);

	/* --help: the usage on stdout, exit 0, nothing run either. */
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--help", NULL},
	       (const char *const[]){"touch", "ran.txt", NULL});
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "usage: harvest run"));
	assert_non_null(strstr(r.out, "--language"));
	assert_int_equal(r.err_len, 0);
	tu_result_free(&r);
	assert_int_not_equal(access(ran, F_OK), 0);
	assert_int_not_equal(access(f.db, F_OK), 0);
	free(ran);
	fx_close(&f);
}

/* --language feeds all of harvest's stdin to the interpreter, however long: a program of
 * 200 kB reaches `cat` whole, and comes back as its output. */
static void test_language_long_program(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	enum { LINES = 20000 };
	char *code = malloc(LINES * 10 + 1);
	assert_non_null(code);
	size_t n = 0;
	for (int i = 0; i < LINES; i++)
		n += (size_t)sprintf(code + n, "line%05d\n", i);
	assert_int_equal(n, LINES * 10);
	tu_result r;
	hv_run(&r, &f, code, (const char *const[]){"--language", "cat", NULL}, NULL);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	events ev;
	parse_events(&ev, &r, false);
	assert_bytes(tj_get(ev.result, "stdout"), code, n);
	size_t len;
	char *streamed = stream_bytes(&ev, "stdout", &len, false);
	assert_int_equal(len, n);
	assert_memory_equal(streamed, code, n);
	free(streamed);
	events_free(&ev);
	tu_result_free(&r);
	free(code);
	fx_close(&f);
}

/* harvest's own stdin cannot be read (it is a directory): 125 naming standard input and the
 * reason, nothing run or recorded. */
static void test_language_stdin_unreadable(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *argv[] = {"sh", "-c", "exec \"$@\" < \"$0\"", f.root, HARVEST_BIN, "run", "--db", f.db,
			"--dir", f.d, "--language", "sh", NULL};
	tu_result r;
	tu_run(&r, NULL, NULL, argv);
	assert_int_equal(r.status, 125);
	assert_int_equal(r.out_len, 0);
	assert_non_null(strstr(r.err, "standard input"));
	assert_non_null(strstr(r.err, "Is a directory"));
	assert_int_not_equal(access(f.db, F_OK), 0);
	tu_result_free(&r);
	fx_close(&f);
}

/* ---- what is recorded ---- */

/* --no-history: the files are still collected and shown, but run_id is null and the history
 * stays empty. */
static void test_no_history(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--no-history", NULL},
	       (const char *const[]){"sh", "-c", "printf 'a,b\\n' > t.csv", NULL});
	assert_int_equal(r.status, 0);
	events ev;
	parse_events(&ev, &r, false);
	assert_true(tj_is_null(tj_get(ev.result, "run_id")));
	assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 1);
	check_output(find_output(ev.result, "output_files", "t.csv"), f.d, "t.csv", "text/csv",
		     "mime_type");
	events_free(&ev);
	tu_result_free(&r);
	tj_value *runs = history_runs(&f);
	assert_int_equal(tj_len(runs), 0);
	tj_free(runs);
	fx_close(&f);
}

/* --no-history with nothing produced: the store (only a MIME cache then) is never opened,
 * so no database file is created; a produced file still gets its MIME type through the
 * cache, which then exists. Both with the kernel's events and with snapshots. */
static void test_no_history_nothing_produced_no_database(void **state)
{
	(void)state;
	static const char *const modes[] = {"auto", "snapshot"};
	for (size_t m = 0; m < 2; m++) {
		fixture f;
		fx_open(&f);
		tu_result r;
		hv_run(&r, &f, NULL, (const char *const[]){"--no-history", "--changes", modes[m], NULL},
		       (const char *const[]){"true", NULL});
		assert_int_equal(r.status, 0);
		events ev;
		parse_events(&ev, &r, false);
		assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 0);
		events_free(&ev);
		tu_result_free(&r);
		struct stat sb;
		/* With snapshots the after-walk still reads the cache: only events skip it. */
		if (m == 0)
			assert_int_equal(lstat(f.db, &sb), -1);
		hv_run(&r, &f, NULL, (const char *const[]){"--no-history", "--changes", modes[m], NULL},
		       (const char *const[]){"sh", "-c", "printf 'a,b\\n' > t.csv", NULL});
		assert_int_equal(r.status, 0);
		parse_events(&ev, &r, false);
		check_output(find_output(ev.result, "output_files", "t.csv"), f.d, "t.csv",
			     "text/csv", "mime_type");
		events_free(&ev);
		tu_result_free(&r);
		assert_int_equal(lstat(f.db, &sb), 0);
		fx_close(&f);
	}
}

/* libmagic's spawner is forked only once a produced file needs examining, after the
 * command: while an empty run's command runs, harvest's only child is the command itself
 * (the spawner used to be forked at startup and was a second child). */
static void test_run_forks_no_spawner_during_command(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--no-history", NULL},
	       (const char *const[]){"sh", "-c", "cat /proc/$PPID/task/*/children", NULL});
	assert_int_equal(r.status, 0);
	events ev;
	parse_events(&ev, &r, false);
	const char *out = tj_str(tj_get(ev.result, "stdout"), NULL);
	assert_non_null(out);
	unsigned long a = 0, b = 0;
	int n = sscanf(out, "%lu %lu", &a, &b);
	if (n != 1)
		fail_msg("harvest's children during the run: '%s'", out);
	events_free(&ev);
	tu_result_free(&r);
	fx_close(&f);
}

/* --no-history with a database that cannot be opened (its parent is a regular file): a run
 * that produced nothing needs no store and succeeds; one that produced a file fails as
 * harvest's (125), naming the database, with the command's result still printed; with
 * --no-cache too nothing needs the store, and it is not opened. */
static void test_no_history_unopenable_db_only_when_needed(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_write(f.root, "plain", "x", 1);
	free(f.db);
	f.db = tu_path(f.root, "plain/h.db");
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--no-history", NULL},
	       (const char *const[]){"true", NULL});
	assert_int_equal(r.status, 0);
	assert_int_equal(r.err_len, 0);
	events ev;
	parse_events(&ev, &r, false);
	assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 0);
	events_free(&ev);
	tu_result_free(&r);
	/* Both ways of finding the changes: events open the store on a thread of their own at
	 * the first change, a snapshot only after the command. */
	const char *const modes[][4] = {{"--no-history", NULL},
					{"--no-history", "--changes", "snapshot", NULL}};
	for (size_t m = 0; m < 2; m++) {
		hv_run(&r, &f, NULL, modes[m],
		       (const char *const[]){"sh", "-c", "echo hi > t.txt; exit 3", NULL});
		assert_int_equal(r.status, 125);
		if (!strstr(r.err, "plain/h.db") ||
		    memchr(r.err, '\n', r.err_len) != r.err + r.err_len - 1)
			fail_msg("%s: not one line naming the database: %s",
				 modes[m][1] ? "snapshot" : "events", r.err);
		parse_events(&ev, &r, false);
		assert_int_equal(tj_int(tj_get(ev.result, "exit_code")), 3);
		assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 0);
		events_free(&ev);
		tu_result_free(&r);
		char *t = tu_path(f.d, "t.txt");
		assert_int_equal(unlink(t), 0);
		free(t);
	}
	/* With --no-cache too, nothing needs the store: it is neither opened nor warned about,
	 * and a database that could be made is not. */
	hv_run(&r, &f, NULL, (const char *const[]){"--no-history", "--no-cache", NULL},
	       (const char *const[]){"sh", "-c", "echo hi > t.txt", NULL});
	assert_int_equal(r.status, 0);
	if (r.err_len != 0)
		fail_msg("--no-history --no-cache: %s", r.err);
	tu_result_free(&r);
	free(f.db);
	f.db = tu_path(f.root, "made.db");
	hv_run(&r, &f, NULL, (const char *const[]){"--no-history", "--no-cache", NULL},
	       (const char *const[]){"sh", "-c", "echo ho > u.txt", NULL});
	assert_int_equal(r.status, 0);
	assert_int_equal(r.err_len, 0);
	if (access(f.db, F_OK) == 0)
		fail_msg("--no-history --no-cache made the database %s", f.db);
	tu_result_free(&r);
	fx_close(&f);
}

/* A file the command made that harvest cannot read (run as nobody, so root's override does
 * not apply): skipped as error and warned about on stderr (not with --quiet); the other files
 * are collected and the exit status is still the command's. */
static void test_unreadable_output_as_nobody(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	assert_int_equal(chmod(f.root, 0777), 0);
	assert_int_equal(chmod(f.d, 0777), 0);
	for (int quiet = 0; quiet < 2; quiet++) {
		const char *args[128];
		run_args(args, &f, (const char *const[]){quiet ? "--quiet" : NULL, NULL},
			 (const char *const[]){"sh", "-c",
					       "printf s > secret.txt; chmod 0 secret.txt; "
					       "printf o > open.txt",
					       NULL});
		tu_result r;
		tu_harvest_as_nobody(&r, NULL, args);
		if (r.status != 0)
			fail_msg("exit %d: %s", r.status, r.err);
		events ev;
		parse_events(&ev, &r, false);
		assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 1);
		check_output(find_output(ev.result, "output_files", "open.txt"), f.d, "open.txt",
			     "text/plain", "mime_type");
		const tj_value *sk = find_output(ev.result, "skipped", "secret.txt");
		assert_non_null(sk);
		assert_string_equal(tj_str(tj_get(sk, "reason"), NULL), "error");
		assert_int_equal(tj_int(tj_get(sk, "size")), 1);
		assert_int_equal(tj_len(tj_get(ev.result, "skipped")), 1);
		if (quiet) {
			assert_int_equal(r.err_len, 0);
		} else {
			assert_non_null(strstr(r.err, "secret.txt"));
			assert_non_null(strstr(r.err, "Permission denied"));
		}
		events_free(&ev);
		tu_result_free(&r);
		char *secret = tu_path(f.d, "secret.txt");
		char *open_txt = tu_path(f.d, "open.txt");
		assert_int_equal(unlink(secret), 0);
		assert_int_equal(unlink(open_txt), 0);
		free(secret);
		free(open_txt);
	}
	fx_close(&f);
}

/* The command removes the directory it ran in: collecting fails, which stderr says, and
 * harvest exits 125 (its own failure), but the ExecutionResult still comes (with no files,
 * the command's exit code and run_id null). */
static void test_collect_failure_after_run(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *real_d = realpath(f.d, NULL); /* as the message names it */
	assert_non_null(real_d);
	tu_result r;
	hv_run(&r, &f, NULL, NULL,
	       (const char *const[]){"sh", "-c", "cd .. && rm -rf d && echo bye && exit 3", NULL});
	events ev;
	parse_events(&ev, &r, false);
	assert_int_equal(tj_int(tj_get(ev.result, "exit_code")), 3);
	assert_bytes(tj_get(ev.result, "stdout"), "bye\n", 4);
	assert_int_equal(tj_type(tj_get(ev.result, "output_files")), TJ_ARRAY);
	assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 0);
	assert_int_equal(tj_type(tj_get(ev.result, "skipped")), TJ_ARRAY);
	assert_int_equal(tj_len(tj_get(ev.result, "skipped")), 0);
	assert_non_null(strstr(r.err, "collecting the produced files"));
	assert_non_null(strstr(r.err, real_d));
	assert_int_equal(r.status, 125); /* harvest's own failure; the command's 3 is above */
	free(real_d);
	/* Not completely recorded (what it produced is unknown): no run_id to give, and the
	 * history does not show it as a run that ended with no artifacts. */
	assert_int_equal(tj_type(tj_get(ev.result, "run_id")), TJ_NULL);
	events_free(&ev);
	tu_result_free(&r);
	tj_value *runs = history_runs(&f);
	assert_int_equal(tj_len(runs), 1);
	const tj_value *run = tj_at(runs, 0);
	assert_int_equal(tj_type(tj_get(run, "ended_at")), TJ_STRING);
	assert_bytes(tj_get(run, "end_reason"), "not_recorded", 12);
	assert_int_equal(tj_int(tj_get(run, "artifacts")), 0);
	tj_free(runs);
	fx_close(&f);
}

/* sig to harvest (group: to its whole process group, as a terminal's Ctrl-C or timeout(1)
 * sends it) is passed on to the command's process group, as timeout(1) passes it on, and the
 * run is still collected, printed and recorded, as "cancelled"; the status is the command's
 * (killed by that signal: 128 + sig), and timed_out stays false. libmagic's worker, in
 * harvest's process group, is not the command's: the file made is typed by it, not given
 * octet-stream. */
static void check_signal_ends_the_run(int sig, bool group)
{
	fixture f;
	fx_open(&f);
	char *out = tu_path(f.root, "out"), *err = tu_path(f.root, "err");
	char *started = tu_path(f.d, "started.txt");
	/* setsid(1), not a group leader here, execs harvest in a process group of its own. */
	char *argv[] = {"setsid", HARVEST_BIN, "run", "--db", f.db, "--dir", f.d, "--", "sh", "-c",
			"echo hi; echo started > started.txt; exec sleep 60", NULL};
	double t0 = tu_now_s();
	pid_t pid = tu_spawn(group ? argv : argv + 1, out, err);
	/* Written, not only created: the shell's redirection makes the file before echo writes. */
	struct stat sst;
	while (stat(started, &sst) != 0 || sst.st_size == 0) {
		if (tu_now_s() - t0 > 30)
			tu_kill_fail(pid, "the command never started: %s still empty after 30 s",
				     started);
		struct timespec nap = {0, 20 * 1000 * 1000};
		nanosleep(&nap, NULL);
	}
	if (group) {
		/* The file is seen, then typed once the command ends: wait for harvest to have
		 * started its worker (it starts at the first change) before the group's signal. */
		struct timespec settle = {0, 300 * 1000 * 1000};
		nanosleep(&settle, NULL);
	}
	assert_int_equal(kill(group ? -pid : pid, sig), 0);
	int status = tu_wait(pid);
	assert_true(tu_now_s() - t0 < 30); /* not the 60 s of the command */
	tu_result r = {0};
	r.out = tu_read_file(out, &r.out_len);
	r.err = tu_read_file(err, &r.err_len);
	assert_non_null(r.out);
	assert_non_null(r.err);
	if (status != 128 + sig)
		fail_msg("exit %d, expected %d: %s", status, 128 + sig, r.err);
	assert_null(strstr(r.err, "libmagic worker"));
	events ev;
	parse_events(&ev, &r, false);
	assert_int_equal(tj_int(tj_get(ev.result, "exit_code")), 128 + sig);
	assert_false(tj_bool(tj_get(ev.result, "timed_out")));
	assert_bytes(tj_get(ev.result, "end_reason"), "cancelled", 9);
	assert_bytes(tj_get(ev.result, "stdout"), "hi\n", 3);
	check_output(find_output(ev.result, "output_files", "started.txt"), f.d, "started.txt",
		     "text/plain", "mime_type");
	int64_t id = tj_int(tj_get(ev.result, "run_id"));
	events_free(&ev);
	tu_result_free(&r);
	tj_value *runs = history_runs(&f);
	assert_int_equal(tj_len(runs), 1);
	assert_int_equal(tj_int(tj_get(tj_at(runs, 0), "run_id")), id);
	assert_int_equal(tj_int(tj_get(tj_at(runs, 0), "exit_code")), 128 + sig);
	assert_bytes(tj_get(tj_at(runs, 0), "end_reason"), "cancelled", 9);
	assert_int_equal(tj_int(tj_get(tj_at(runs, 0), "artifacts")), 1);
	tj_free(runs);
	free(out);
	free(err);
	free(started);
	fx_close(&f);
}

static void test_sigterm_ends_the_run(void **state)
{
	(void)state;
	check_signal_ends_the_run(SIGTERM, false);
}

/* Ctrl-C at a terminal: SIGINT to the whole foreground process group. */
static void test_group_sigint_ends_the_run(void **state)
{
	(void)state;
	check_signal_ends_the_run(SIGINT, true);
}

/* ---- what the command can reach ---- */

/* Waits (at most 30 s) until path holds a pid; 0 when it never does. */
static pid_t wait_pid_file(const char *path)
{
	double t0 = tu_now_s();
	while (tu_now_s() - t0 < 30) {
		char *s = tu_read_file(path, NULL);
		long pid = s ? strtol(s, NULL, 10) : 0;
		free(s);
		if (pid > 1)
			return (pid_t)pid;
		struct timespec nap = {0, 20 * 1000 * 1000};
		nanosleep(&nap, NULL);
	}
	return 0;
}

/* harvest's own variables (HARVEST_DB, which names the history, and every other HARVEST_*)
 * do not reach the command unless passed with --env. */
static void test_env_without_harvest_vars(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	assert_int_equal(setenv("HARVEST_DB", f.db, 1), 0);
	assert_int_equal(setenv("HARVEST_SOMETHING", "x", 1), 0);
	assert_int_equal(setenv("NOT_HARVEST_DB", "kept", 1), 0);
	tu_result r;
	hv_run(&r, &f, NULL, NULL, (const char *const[]){"env", NULL});
	unsetenv("HARVEST_DB");
	unsetenv("HARVEST_SOMETHING");
	assert_int_equal(r.status, 0);
	events ev;
	parse_events(&ev, &r, false);
	const char *out = tj_str(tj_get(ev.result, "stdout"), NULL);
	assert_non_null(out);
	if (strstr(out, "\nHARVEST_") || strncmp(out, "HARVEST_", 8) == 0)
		fail_msg("the command got harvest's variables:\n%s", out);
	assert_non_null(strstr(out, "NOT_HARVEST_DB=kept\n"));
	events_free(&ev);
	tu_result_free(&r);
	/* Passed explicitly, it is there. */
	hv_run(&r, &f, NULL, (const char *const[]){"--env", "HARVEST_DB=/given", NULL},
	       (const char *const[]){"sh", "-c", "echo \"[$HARVEST_DB]\"", NULL});
	assert_int_equal(r.status, 0);
	parse_events(&ev, &r, false);
	assert_bytes(tj_get(ev.result, "stdout"), "[/given]\n", 9);
	events_free(&ev);
	tu_result_free(&r);
	unsetenv("NOT_HARVEST_DB");
	fx_close(&f);
}

/* A daemon the command starts in a session of its own (setsid), holding no pipe, ends with
 * the run: harvest is a child subreaper, and ends what the command left behind. */
static void test_setsid_daemon_ends_with_the_run(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *pidfile = tu_path(f.root, "daemon.pid");
	char script[512];
	snprintf(script, sizeof(script),
		 "setsid sh -c 'echo $$ > %s; exec sleep 1000' </dev/null >/dev/null 2>&1 & "
		 "while [ ! -s %s ]; do sleep 0.01; done",
		 pidfile, pidfile);
	tu_result r;
	hv_run(&r, &f, NULL, NULL, (const char *const[]){"sh", "-c", script, NULL});
	pid_t pid = wait_pid_file(pidfile);
	assert_true(pid > 1);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	if (!process_gone(pid)) {
		kill(pid, SIGKILL);
		fail_msg("the setsid daemon %d outlived the run", (int)pid);
	}
	tu_result_free(&r);
	free(pidfile);
	fx_close(&f);
}

/* The setsid grandchild holding the pipes is ended by the timeout too (not only the process
 * group), and the exit status is 124. */
static void test_setsid_grandchild_ends_on_timeout(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *pidfile = tu_path(f.root, "grandchild.pid");
	char script[512];
	snprintf(script, sizeof(script),
		 "setsid sh -c 'echo $$ > %s; exec sleep 1000' & "
		 "while [ ! -s %s ]; do sleep 0.01; done; sleep 100",
		 pidfile, pidfile);
	tu_result r;
	hv_run(&r, &f, NULL, (const char *const[]){"--timeout", "3", NULL},
	       (const char *const[]){"sh", "-c", script, NULL});
	pid_t pid = wait_pid_file(pidfile);
	assert_true(pid > 1);
	bool gone = process_gone(pid);
	if (!gone)
		kill(pid, SIGKILL);
	assert_int_equal(r.status, 124);
	events ev;
	parse_events(&ev, &r, false);
	assert_true(tj_bool(tj_get(ev.result, "timed_out")));
	events_free(&ev);
	if (!gone)
		fail_msg("the setsid grandchild %d survived the timeout", (int)pid);
	tu_result_free(&r);
	free(pidfile);
	fx_close(&f);
}

/* harvest killed outright (SIGKILL, no chance to clean up): its command gets SIGKILL from
 * the kernel (PR_SET_PDEATHSIG) instead of running on. */
static void test_command_dies_with_harvest(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *pidfile = tu_path(f.root, "command.pid");
	char script[256];
	snprintf(script, sizeof(script), "echo $$ > %s; exec sleep 1000", pidfile);
	char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--dir", f.d, "--", "sh", "-c", script,
			NULL};
	pid_t h = tu_spawn(argv, NULL, NULL);
	pid_t pid = wait_pid_file(pidfile);
	if (pid <= 1) {
		kill(h, SIGKILL);
		tu_wait(h);
		fail_msg("the command never started");
	}
	assert_int_equal(kill(h, SIGKILL), 0);
	assert_int_equal(tu_wait(h), 128 + SIGKILL);
	if (!process_gone(pid)) {
		kill(pid, SIGKILL);
		fail_msg("the command %d outlived the SIGKILLed harvest", (int)pid);
	}
	free(pidfile);
	fx_close(&f);
}

/* ---- what a caller gets when harvest itself fails late ---- */

/* Recording the run fails (the database is locked past the busy timeout when the command has
 * ended): the result still shows the files collected, but run_id is null, stderr says why,
 * the exit status is 125, and the history does not show the run as a finished one. */
static void test_record_failure_locked(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	char *out = tu_path(f.root, "out"), *err = tu_path(f.root, "err");
	char *started = tu_path(f.root, "started"), *go = tu_path(f.root, "go");
	char script[512];
	snprintf(script, sizeof(script),
		 "echo data > made.txt; : > %s; while [ ! -e %s ]; do sleep 0.01; done", started,
		 go);
	char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--dir", f.d, "--", "sh", "-c", script,
			NULL};
	pid_t pid = tu_spawn(argv, out, err);
	if (!tu_wait_for_file(started, 30000))
		tu_kill_fail(pid, "the command never started: no %s after 30 s", started);
	sqlite3 *h;
	assert_int_equal(sqlite3_open_v2(f.db, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	tu_write(f.root, "go", "", 0);
	int status = tu_wait(pid); /* the busy timeout, then the failure */
	assert_int_equal(sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_close(h), SQLITE_OK);
	tu_result r = {0};
	r.out = tu_read_file(out, &r.out_len);
	r.err = tu_read_file(err, &r.err_len);
	assert_non_null(r.out);
	assert_non_null(r.err);
	events ev;
	parse_events(&ev, &r, false);
	assert_int_equal(tj_type(tj_get(ev.result, "run_id")), TJ_NULL);
	if (status != 125)
		fail_msg("exit %d, expected 125: %s", status, r.err);
	assert_non_null(strstr(r.err, "recording the run"));
	assert_non_null(strstr(r.err, "locked"));
	assert_int_equal(tj_int(tj_get(ev.result, "exit_code")), 0);
	check_output(find_output(ev.result, "output_files", "made.txt"), f.d, "made.txt",
		     "text/plain", "mime_type");
	events_free(&ev);
	tu_result_free(&r);
	/* The history has the run as begun and never ended, without artifacts. */
	tj_value *runs = history_runs(&f);
	assert_int_equal(tj_len(runs), 1);
	assert_int_equal(tj_type(tj_get(tj_at(runs, 0), "ended_at")), TJ_NULL);
	assert_int_equal(tj_int(tj_get(tj_at(runs, 0), "artifacts")), 0);
	tj_free(runs);
	free(out);
	free(err);
	free(started);
	free(go);
	fx_close(&f);
}

/* The command removes the database, or puts another file in its place: what harvest records
 * goes to a file no one can open again, so the run gets no id (run_id null, exit 125, the
 * files still printed), as for any recording that fails. */
static void test_record_database_removed(void **state)
{
	(void)state;
	for (int replace = 0; replace < 2; replace++) {
		fixture f;
		fx_open(&f);
		char script[1024];
		if (replace)
			snprintf(script, sizeof(script),
				 "echo data > made.txt; echo not a database > '%s.x'; mv '%s.x' '%s'",
				 f.db, f.db, f.db);
		else
			snprintf(script, sizeof(script), "echo data > made.txt; rm -f '%s'*", f.db);
		tu_result r;
		tu_harvest(&r, "run", "--db", f.db, "--dir", f.d, "--", "sh", "-c", script, NULL);
		events ev;
		parse_events(&ev, &r, false);
		if (r.status != 125)
			fail_msg("exit %d, expected 125: %s", r.status, r.err);
		assert_int_equal(tj_type(tj_get(ev.result, "run_id")), TJ_NULL);
		assert_non_null(strstr(r.err, "recording the run in the history (run_id is null): "));
		assert_non_null(strstr(r.err, replace ? ": the database was replaced by another file"
						      : ": the database was removed while it was"));
		assert_int_equal(tj_int(tj_get(ev.result, "exit_code")), 0);
		check_output(find_output(ev.result, "output_files", "made.txt"), f.d, "made.txt",
			     "text/plain", "mime_type");
		events_free(&ev);
		tu_result_free(&r);
		fx_close(&f);
	}
	/* Moved with its directory, the database holds the run where it now is: not lost. */
	char *top = tu_mkdtemp();
	char *d = tu_path(top, "ws"), *db = tu_path(top, "a/h.db"), *moved = tu_path(top, "b/h.db");
	tu_mkdir(top, "ws");
	tu_mkdir(top, "a");
	char script[1024];
	snprintf(script, sizeof(script), "echo data > made.txt; mv '%s/a' '%s/b'", top, top);
	tu_result r;
	tu_harvest(&r, "run", "--db", db, "--dir", d, "--", "sh", "-c", script, NULL);
	if (r.status != 0)
		fail_msg("exit %d: %s", r.status, r.err);
	assert_non_null(strstr(r.out, "\"run_id\":1,"));
	tu_result_free(&r);
	tu_harvest(&r, "history", "show", "1", "--db", moved, NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "\"made.txt\""));
	tu_result_free(&r);
	tu_rmrf(top);
	free(top);
	free(d);
	free(db);
	free(moved);
}

/* The database's filesystem is full when the artifacts are recorded: the same as a locked
 * database (run_id null, exit 125, the files still printed), and no run in the history
 * claims to have ended normally with fewer artifacts than it made. */
static void test_record_failure_disk_full(void **state)
{
	(void)state;
	char *top = tu_tmpdir();
	char *mnt = tu_path(top, "small");
	tu_mkdir(top, "small");
	assert_int_equal(mount("harvest-test", mnt, "tmpfs", 0, "size=1m"), 0);
	tu_cleanup_umount(mnt);
	fixture f;
	fx_open(&f);
	free(f.db);
	f.db = tu_path(mnt, "h.db");
	/* Incompressible bytes, twice the room of the filesystem. */
	char script[256];
	snprintf(script, sizeof(script), "head -c 2097152 /dev/urandom > big.bin");
	tu_result r;
	hv_run(&r, &f, NULL, NULL, (const char *const[]){"sh", "-c", script, NULL});
	events ev;
	parse_events(&ev, &r, false);
	assert_int_equal(tj_type(tj_get(ev.result, "run_id")), TJ_NULL);
	if (r.status != 125)
		fail_msg("exit %d, expected 125: %s", r.status, r.err);
	assert_non_null(strstr(r.err, "recording the run"));
	assert_int_equal(tj_int(tj_get(ev.result, "exit_code")), 0);
	assert_non_null(find_output(ev.result, "output_files", "big.bin"));
	events_free(&ev);
	tu_result_free(&r);
	/* A run of the history is unended, or ended with a reason saying it is incomplete: none
	 * ended normally. */
	tj_value *runs = history_runs(&f);
	for (size_t i = 0; i < tj_len(runs); i++) {
		const tj_value *run = tj_at(runs, i);
		const tj_value *reason = tj_get(run, "end_reason");
		if (tj_type(tj_get(run, "ended_at")) != TJ_NULL &&
		    (!reason || tj_type(reason) == TJ_NULL))
			fail_msg("run %lld is recorded as ended normally, with %lld artifacts",
				 (long long)tj_int(tj_get(run, "run_id")),
				 (long long)tj_int(tj_get(run, "artifacts")));
	}
	tj_free(runs);
	free(mnt);
	fx_close(&f);
}

/* stdout cannot take the output (/dev/full): an error line and 125, not a silent 0; the
 * command still ran to its end and was recorded. */
static void test_stdout_write_failure(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	static const char *const formats[] = {"jsonl", "json"};
	for (int k = 0; k < 2; k++) {
		char *argv[] = {HARVEST_BIN, "run", "--db", f.db, "--dir", f.d, "--format",
				(char *)formats[k], "--", "sh", "-c", "echo hello", NULL};
		char *err = NULL;
		size_t err_len = 0;
		int status = tu_run_to_file(NULL, argv, "/dev/full", &err, &err_len);
		if (status != 125)
			fail_msg("--format %s > /dev/full: exit %d, expected 125: %s", formats[k],
				 status, err);
		assert_non_null(strstr(err, "standard output"));
		assert_non_null(strstr(err, "No space left on device"));
		free(err);
	}
	tj_value *runs = history_runs(&f);
	assert_int_equal(tj_len(runs), 2);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(tj_type(tj_get(tj_at(runs, i), "ended_at")), TJ_STRING);
		assert_int_equal(tj_int(tj_get(tj_at(runs, i), "exit_code")), 0);
	}
	tj_free(runs);
	fx_close(&f);
}

/* --language streams harvest's stdin to the interpreter: 160 MB through it must not cost
 * harvest 160 MB of memory (the peak RSS of the child harvest, against an empty input). */
static long language_peak_rss_kb(const fixture *f, const char *bin, size_t bytes)
{
	char path[4096];
	snprintf(path, sizeof(path), "PATH=%s:/usr/bin:/bin", bin);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		if (dup2(p[0], 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
			_exit(126);
		execl(HARVEST_BIN, HARVEST_BIN, "run", "--db", f->db, "--dir", f->d, "--env", path,
		      "--format", "json", "--language", "swallow", (char *)NULL);
		_exit(127);
	}
	close(p[0]);
	static char block[65536];
	memset(block, '#', sizeof(block));
	block[sizeof(block) - 1] = '\n';
	for (size_t sent = 0; sent < bytes;) {
		size_t want = bytes - sent < sizeof(block) ? bytes - sent : sizeof(block);
		ssize_t n = write(p[1], block, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail_msg("writing harvest's stdin: %s", strerror(errno));
		sent += (size_t)n;
	}
	close(p[1]);
	int st;
	struct rusage ru;
	while (wait4(pid, &st, 0, &ru) < 0)
		assert_int_equal(errno, EINTR);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	return ru.ru_maxrss;
}

static void test_language_streams_stdin(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	tu_mkdir(f.root, "bin");
	char *bin = tu_path(f.root, "bin");
	tu_write(bin, "swallow", "#!/bin/sh\nexec cat >/dev/null\n", 30);
	char *swallow = tu_path(bin, "swallow");
	assert_int_equal(chmod(swallow, 0755), 0);
	long base = language_peak_rss_kb(&f, bin, 0);
	size_t big = (size_t)160 << 20;
	long peak = language_peak_rss_kb(&f, bin, big);
	if (peak - base > (long)(big / 1024 / 4))
		fail_msg("%zu MiB of stdin raised harvest's peak RSS from %ld to %ld KiB",
			 big >> 20, base, peak);
	free(swallow);
	free(bin);
	fx_close(&f);
}

/* ---- many at once ---- */

/* N `harvest run` processes started at once into db, each in its own directory w<round>-<i>;
 * all must succeed; their run ids go to ids[0..N-1]. */
enum { N_CONCURRENT = 8 };

static void concurrent_round(const fixture *f, const char *db, int round, int64_t *ids)
{
	enum { N = N_CONCURRENT };
	pid_t pids[N];
	char *outs[N], *errs[N], *dirs[N];
	for (int i = 0; i < N; i++) {
		char name[64];
		snprintf(name, sizeof(name), "w%d-%d", round, i);
		tu_mkdir(f->root, name);
		dirs[i] = tu_path(f->root, name);
		snprintf(name, sizeof(name), "out%d-%d", round, i);
		outs[i] = tu_path(f->root, name);
		snprintf(name, sizeof(name), "err%d-%d", round, i);
		errs[i] = tu_path(f->root, name);
	}
	/* All started before any ends. */
	for (int i = 0; i < N; i++) {
		char idx[16];
		snprintf(idx, sizeof(idx), "%d", i);
		char *argv[] = {HARVEST_BIN, "run", "--db", (char *)db, "--dir", dirs[i], "--", "sh",
				"-c", "echo \"run $1\"; echo \"$1\" > made-$1.txt; sleep 0.3", "sh",
				idx, NULL};
		pids[i] = tu_spawn(argv, outs[i], errs[i]);
	}
	int sts[N];
	for (int i = 0; i < N; i++)
		sts[i] = tu_wait(pids[i]);
	for (int i = 0; i < N; i++) {
		size_t olen, elen;
		char *out = tu_read_file(outs[i], &olen);
		char *err = tu_read_file(errs[i], &elen);
		assert_non_null(out);
		assert_non_null(err);
		if (sts[i] != 0)
			fail_msg("round %d, run %d: exit %d, stderr: %s", round, i, sts[i], err);
		tu_result r = {.status = 0, .out = out, .out_len = olen, .err = err, .err_len = elen};
		events ev;
		parse_events(&ev, &r, false);
		char want[32];
		snprintf(want, sizeof(want), "run %d\n", i);
		assert_string_equal(tj_str(tj_get(ev.result, "stdout"), NULL), want);
		assert_int_equal(tj_type(tj_get(ev.result, "run_id")), TJ_INT);
		ids[i] = tj_int(tj_get(ev.result, "run_id"));
		assert_true(ids[i] > 0);
		snprintf(want, sizeof(want), "made-%d.txt", i);
		assert_int_equal(tj_len(tj_get(ev.result, "output_files")), 1);
		assert_non_null(find_output(ev.result, "output_files", want));
		events_free(&ev);
		tu_result_free(&r);
	}
	for (int i = 0; i < N; i++) {
		free(outs[i]);
		free(errs[i]);
		free(dirs[i]);
	}
}

static void assert_distinct(const int64_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			if (ids[i] == ids[j])
				fail_msg("runs %zu and %zu share run_id %lld", i, j, (long long)ids[i]);
}

static void test_concurrent_runs(void **state)
{
	(void)state;
	fixture f;
	fx_open(&f);
	/* Rounds 0 and 1 share a database that round 0 creates (8 processes racing to create
	 * it); rounds 2 and 3 race to create fresh ones again (the race is short: repeat it). */
	int64_t ids[2 * N_CONCURRENT];
	concurrent_round(&f, f.db, 0, ids);
	concurrent_round(&f, f.db, 1, ids + N_CONCURRENT);
	assert_distinct(ids, 2 * N_CONCURRENT);
	for (int round = 2; round < 4; round++) {
		char name[32];
		snprintf(name, sizeof(name), "h%d.db", round);
		char *db = tu_path(f.root, name);
		concurrent_round(&f, db, round, ids);
		assert_distinct(ids, N_CONCURRENT);
		free(db);
	}
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exit_codes),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_chunk_while_running),
		cmocka_unit_test(test_utf8_split),
		cmocka_unit_test(test_non_utf8_bytes),
		cmocka_unit_test(test_stdin_is_dev_null),
		cmocka_unit_test(test_language),
		cmocka_unit_test(test_env),
		cmocka_unit_test(test_max_output_bytes),
		cmocka_unit_test(test_produced_files),
		cmocka_unit_test(test_changes_and_deleted),
		cmocka_unit_test(test_directory_made_again),
		cmocka_unit_test(test_used_special_files_not_deleted),
		cmocka_unit_test(test_camel_case),
		cmocka_unit_test(test_format_json),
		cmocka_unit_test(test_harvest_failures),
		cmocka_unit_test(test_option_conflicts),
		cmocka_unit_test(test_language_long_program),
		cmocka_unit_test(test_language_stdin_unreadable),
		cmocka_unit_test(test_no_history),
		cmocka_unit_test(test_no_history_nothing_produced_no_database),
		cmocka_unit_test(test_no_history_unopenable_db_only_when_needed),
		cmocka_unit_test(test_run_forks_no_spawner_during_command),
		cmocka_unit_test(test_unreadable_output_as_nobody),
		cmocka_unit_test(test_collect_failure_after_run),
		cmocka_unit_test(test_sigterm_ends_the_run),
		cmocka_unit_test(test_group_sigint_ends_the_run),
		cmocka_unit_test(test_concurrent_runs),
		cmocka_unit_test(test_env_without_harvest_vars),
		cmocka_unit_test(test_setsid_daemon_ends_with_the_run),
		cmocka_unit_test(test_setsid_grandchild_ends_on_timeout),
		cmocka_unit_test(test_command_dies_with_harvest),
		cmocka_unit_test(test_record_failure_locked),
		cmocka_unit_test(test_record_database_removed),
		cmocka_unit_test_teardown(test_record_failure_disk_full, tu_cleanup),
		cmocka_unit_test(test_stdout_write_failure),
		cmocka_unit_test(test_language_streams_stdin),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
