/* Test helpers: fresh temp directories, files, and running a program with captured output. */
#ifndef HV_TESTUTIL_H
#define HV_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

/* UNDER_VALGRIND(): whether this test runs under valgrind (scripts/test.sh --valgrind), where
 * there is no seccomp and everything is many times slower. */
#include <stdbool.h>
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef UNDER_VALGRIND
#define UNDER_VALGRIND() false
#endif

/* A fresh directory under $TMPDIR (or /tmp); the caller frees the string. */
char *tu_mkdtemp(void);
/* Removes a tree (no symlink is followed). */
void tu_rmrf(const char *path);
/* "dir/rel" in a new string. */
char *tu_path(const char *dir, const char *rel);
/* Writes len bytes to dir/rel (creating or truncating it); fails the test on error. */
void tu_write(const char *dir, const char *rel, const void *data, size_t len);
/* Puts the modification time of path an hour ahead: the MIME cache takes no answer for a file
 * changed less than 2 s ago, and a file dated in the future stays that young however slowly
 * a loaded machine runs the test (writing it "just now" does not: the test may reach the
 * cache more than 2 s later). */
void tu_make_young(const char *path);
/* Dates path 2300-01-01T00:00:00.5Z (TU_FAR_FUTURE_SEC, and half a second), past what int64
 * nanoseconds reach, and fails the test when its file system cannot hold that date. */
#define TU_FAR_FUTURE_SEC 10413792000LL
void tu_make_far_future(const char *path);
/* Creates dir/rel as a directory (parents must exist). */
void tu_mkdir(const char *dir, const char *rel);

typedef struct tu_result {
	int status;       /* exit code, or 128+N when killed by signal N */
	char *out;        /* everything written to stdout, NUL-terminated */
	size_t out_len;
	char *err;        /* everything written to stderr, NUL-terminated */
	size_t err_len;
} tu_result;

/* Runs argv (argv[0] looked up in PATH) in cwd (NULL: the current one) with stdin_data (NULL:
 * /dev/null), waits for it, and captures both streams. Fails the test if it cannot run. */
void tu_run(tu_result *r, const char *cwd, const char *stdin_data, char *const argv[]);
/* Runs the built harvest binary with the NULL-terminated arguments after it. */
void tu_harvest(tu_result *r, const char *arg, ...);
/* The same with an argument vector (without argv[0]). */
void tu_harvestv(tu_result *r, const char *cwd, const char *stdin_data, const char *const *args);
/* Runs the built harvest binary under `ulimit <limit>` (say "-n 5" or "-f 100"), through sh,
 * with descriptors 3 to 9 closed first: a limit on descriptors counts numbers, and the test's
 * own parent (valgrind's step) may have left some open. */
void tu_harvest_limited(tu_result *r, const char *limit, const char *arg, ...);
/* The same with an argument vector (without argv[0]). */
void tu_harvest_limitedv(tu_result *r, const char *limit, const char *const *args);
void tu_result_free(tu_result *r);

/* A test's scratch directory with a tree to work on and a store beside it, outside the
 * tree: the fixture of the library tests of collect and execute. */
typedef struct tu_fx {
	char *dir;  /* a fresh temp directory */
	char *root; /* dir/root (mode 0755): the tree */
	char *db;   /* dir/harvest.db, open as st */
	struct hv_store *st;
} tu_fx;
/* Makes one; fails the test on error. */
tu_fx *tu_fx_new(void);
/* Closes the store, removes the directory, frees f. */
void tu_fx_free(tu_fx *f);
/* The same as cmocka setup and teardown functions (*state is the tu_fx). */
int tu_fx_setup(void **state);
int tu_fx_teardown(void **state);

struct hv_execute_opts;
/* Sets *o (all of it) to run argv as `harvest run --no-history --changes events` runs it:
 * its descendants ended with it, changes from fanotify's events, and collecting no content. */
void tu_execute_opts_events(struct hv_execute_opts *o, const char *const *argv);

/* malloc, realloc and a NUL-terminated copy of len bytes that abort on failure (no cmocka:
 * usable in forked children). */
void *tu_xmalloc(size_t n);
void *tu_xrealloc(void *p, size_t n);
char *tu_xmemdup(const void *s, size_t len);

/* The SHA-256 of data as 64 lower-case hex digits, by OpenSSL: a reference independent of
 * harvest's own digest code. */
void tu_sha256_hex(const void *data, size_t len, char hex[65]);

/* Runs fn(arg) in a child that first drops root privileges to nobody (setresuid), and
 * returns the child's exit status. For permission-denied tests, which root would pass. */
int tu_as_nobody(int (*fn)(void *arg), void *arg);
/* Runs fn(arg) in a forked child, which may change its own process state (close its standard
 * streams, its environment...), and returns the child's exit status. */
int tu_in_child(int (*fn)(void *arg), void *arg);


/* ---- Helpers for the ls/walk end-to-end tests (tests/cli/walk*_cli_test.c). ---- */
#include <stdbool.h>

struct tj_value;

/* Removes a tree of any depth, deeper than PATH_MAX too: it never builds a full path, but
 * moves through the tree with directory descriptors (down by name, up by ".."), opening up
 * unreadable directories on the way. No symlink is followed. */
void tu_rmrf_deep(const char *path);
/* Makes levels nested directories, each named name, below the directory root (deeper than
 * PATH_MAX if asked: by descriptors, never by path), and returns the open descriptor of the
 * deepest, for the caller to close. */
int tu_deep_dir(const char *root, const char *name, int levels);
/* Creates file (O_EXCL, mode) in the directory dfd with the string data as its contents. */
void tu_write_at(int dfd, const char *file, unsigned mode, const char *data);

/* Runs argv (argv[0] looked up in PATH) in cwd (NULL: the current one) with stdin from
 * /dev/null, stdout written to the file out_path (created or truncated) and stderr captured
 * in *err (malloc'd, NUL-terminated; the caller frees it). Returns the exit code, or 128+N
 * when killed by signal N. For outputs too big to hold in memory comfortably. */
int tu_run_to_file(const char *cwd, char *const argv[], const char *out_path, char **err,
		   size_t *err_len);

/* Values of tu_rec.is_dir and tu_rec.size that are not a value. */
#define TU_NULL (-1)   /* the key is there with JSON null */
#define TU_ABSENT (-2) /* the key is not there */

/* One FileInfo record of harvest's output. */
typedef struct tu_rec {
	const char *key; /* the bytes of "path" (walk) or "name" (ls), decoded */
	size_t key_len;
	int is_dir;      /* 0, 1, TU_NULL or TU_ABSENT */
	int64_t size;    /* >= 0, TU_NULL or TU_ABSENT */
	const struct tj_value *obj;
} tu_rec;

typedef struct tu_recs {
	tu_rec *v;
	size_t n;
	struct tj_value *doc;
} tu_recs;

/* Parses FileInfo output: jsonl (one object a line) or json (one array of objects). key is
 * "path" or "name". Fails the test unless the output is valid, strict-UTF-8 JSON of the right
 * shape: every record an object with a string key, "name" equal to the last component of
 * "path" when both are there, "is_dir" a bool and "size" a non-negative integer or, when
 * unknown, null (snake case) or left out (camel case, where the key is "isDir" and "is_dir"
 * must not appear). */
void tu_recs_parse(tu_recs *rs, const char *out, size_t len, bool jsonl, const char *key,
		   bool camel);
/* The record whose key is exactly these bytes, or NULL. */
const tu_rec *tu_recs_find(const tu_recs *rs, const char *key, size_t len);
void tu_recs_free(tu_recs *rs);


/* A fresh temp directory that tu_cleanup() removes (with tu_rmrf_deep), so a test that fails
 * half-way leaves nothing behind: register tu_cleanup as the test's teardown
 * (cmocka_unit_test_teardown). The string belongs to the cleanup list: do not free it. */
char *tu_tmpdir(void);
/* Seconds on the monotonic clock: for measuring how long something took. */
double tu_now_s(void);
/* Sleeps ms milliseconds, the whole of them even when signals interrupt the sleep. */
void tu_sleep_ms(long ms);
/* Waits until path exists (stat), looking every 10 ms, for at most ms milliseconds. Returns
 * true once it does, false at the deadline: the caller fails the test then, naming path and
 * the time waited (after killing what it started, say). No cmocka: usable in a thread or a
 * forked child, which report a failure their own way. */
bool tu_wait_for_file(const char *path, long ms);
/* Ends a started harvest (tu_spawn) that the test gave up waiting on: SIGKILL, reaped, then
 * fails the test with the message fmt formats. */
__attribute__((noreturn, format(printf, 2, 3))) void tu_kill_fail(pid_t pid, const char *fmt,
								   ...);
/* Has tu_cleanup() unmount path (lazily) before it removes the directories. */
void tu_cleanup_umount(const char *path);
/* Unmounts and removes what tu_tmpdir() and tu_cleanup_umount() registered. Returns 0. */
int tu_cleanup(void **state);


/* Runs argv like tu_run_to_file(), but hands stdout to sink(ctx, bytes, n) as it arrives
 * instead of keeping it: for outputs of many gigabytes. stderr is captured in *err. */
int tu_run_sink(const char *cwd, char *const argv[],
		void (*sink)(void *ctx, const char *data, size_t n), void *ctx, char **err,
		size_t *err_len);


/* ---- A corpus of small files for the MIME cache tests (the mime batch and spawn tests). ---- */

/* n files in a fresh directory, with a database path beside them (not created). */
typedef struct tu_corpus {
	char *dir;
	char *db;     /* dir/h.db */
	char **paths; /* dir/NAME of each file, then of any tu_corpus_add()ed */
	size_t n;
	size_t cap;
} tu_corpus;
/* Writes n files: make(i, buf, cap) puts file i's NUL-terminated name into buf and returns
 * its NUL-terminated bytes. Room is kept for extra more paths. */
tu_corpus *tu_corpus_new(size_t n, size_t extra,
			 const char *(*make)(size_t i, char *buf, size_t cap));
/* Appends dir/rel (made by the caller) to paths; fails the test when no room was kept. */
const char *tu_corpus_add(tu_corpus *c, const char *rel);
/* Waits until every file is old enough for the MIME cache to take it (its change time more
 * than 2 s ago). */
void tu_corpus_age(const tu_corpus *c);
/* Removes the directory and frees c. */
void tu_corpus_free(tu_corpus *c);

#endif

/* ---- Helpers for the mime/collect/run end-to-end tests (tests/cli/{mime,collect,run}_cli_test.c). */

/* Starts argv (argv[0] looked up in PATH) in the background with stdin from /dev/null and
 * stdout and stderr written to the files out_path and err_path (created or truncated; NULL:
 * /dev/null); returns its pid, for tu_wait(). For runs a test signals or runs many of at
 * once. */
pid_t tu_spawn(char *const argv[], const char *out_path, const char *err_path);
/* Waits for the process pid; returns its exit code, or 128+N when killed by signal N. */
int tu_wait(pid_t pid);

/* Runs the built harvest binary with args (without argv[0], NULL-terminated) as the user
 * nobody (see tu_as_nobody), in cwd (NULL: the current one), stdin from /dev/null, and
 * captures both streams as tu_harvestv does. */
void tu_harvest_as_nobody(tu_result *r, const char *cwd, const char *const *args);
/* The whole contents of a file in a new NUL-terminated buffer (its length in *len, which may
 * be NULL); NULL when it cannot be read. */
/* Everything fd gives until end of file or an error (EINTR retried), NUL-terminated, malloc'd;
 * its length in *len. */
char *tu_read_fd(int fd, size_t *len);
char *tu_read_file(const char *path, size_t *len);
/* Overwrites the root page of table in the SQLite database db (its WAL checkpointed first)
 * with 0xff bytes: the database still opens, and the first read of that table fails as
 * corrupt. Fails the test when it cannot. */
void tu_damage_table(const char *db, const char *table);
