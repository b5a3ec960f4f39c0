/* hv_execute: snapshot, run, collect what the command produced, record it in the history;
 * no_history; a missing directory; the snapshot dropped afterwards. */
#include "testutil.h"

#include "tjson.h"

#include "harvest/execute.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef tu_fx fx;


static void wr(const fx *f, const char *rel, const char *text)
{
	tu_write(f->root, rel, text, strlen(text));
}

static const char *sha_of(const char *text)
{
	static char buf[4][65];
	static int k;
	char *o = buf[k++ % 4];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	assert_int_equal(EVP_Digest(text, strlen(text), md, &n, EVP_sha256(), NULL), 1);
	for (unsigned i = 0; i < n; i++)
		snprintf(o + 2 * i, 3, "%02x", md[i]);
	return o;
}

typedef struct chunks {
	char out[4096];
	size_t out_len;
	char err[4096];
	size_t err_len;
} chunks;

static hv_status on_chunk(void *ctx, hv_stream which, const char *data, size_t len)
{
	chunks *c = ctx;
	char *buf = which == HV_STREAM_STDOUT ? c->out : c->err;
	size_t *n = which == HV_STREAM_STDOUT ? &c->out_len : &c->err_len;
	if (*n + len < sizeof(c->out)) {
		memcpy(buf + *n, data, len);
		*n += len;
	}
	return HV_OK;
}

static void opts_sh(hv_execute_opts *o, const char *argv[5], const char *script)
{
	hv_execute_opts_init(o);
	assert_int_equal(hv_run_argv_shell(argv, script), HV_OK);
	o->run.argv = argv;
	o->run.timeout_ms = 20000;
}

static const hv_output_file *find_file(const hv_collection *c, const char *path)
{
	for (size_t i = 0; i < c->n_files; i++)
		if (!strcmp(c->files[i].path, path))
			return &c->files[i];
	return NULL;
}

static void assert_file(const hv_collection *c, const char *path, const char *mime,
			const char *text)
{
	const hv_output_file *o = find_file(c, path);
	if (!o)
		fail_msg("%s is not an artifact (%zu files)", path, c->n_files);
	size_t n = strlen(text);
	assert_string_equal(o->mime_type, mime);
	assert_int_equal(o->size, n);
	assert_int_equal(o->content_len, n);
	assert_non_null(o->content);
	assert_memory_equal(o->content, text, n);
	assert_string_equal(o->sha256, sha_of(text));
	const char *slash = strrchr(path, '/');
	assert_string_equal(o->name, slash ? slash + 1 : path);
}

/* No snapshot is left over: hv_execute drops the one it took. */
static void assert_no_snapshots(const fx *f)
{
	for (int64_t id = 1; id <= 5; id++) {
		hv_snapshot *sn = NULL;
		int rc = hv_store_snapshot_open(f->st, id, &sn);
		if (rc != HV_ENOTFOUND) {
			hv_snapshot_close(sn);
			fail_msg("snapshot %lld is still there (status %d)", (long long)id, rc);
		}
	}
}

static size_t count_runs(const fx *f)
{
	hv_run_iter *it;
	assert_int_equal(hv_store_runs(f->st, NULL, &it), HV_OK);
	const hv_run_row *r;
	size_t n = 0;
	while (hv_run_iter_next(it, &r) == HV_OK)
		n++;
	hv_run_iter_free(it);
	return n;
}

static void test_execute_produces(void **state)
{
	fx *f = *state;
	wr(f, "existing.txt", "old");
	wr(f, "keep.txt", "untouched\n");
	tu_mkdir(f->root, "d");
	wr(f, "d/keep2.txt", "untouched too\n");
	const char *argv[5];
	hv_execute_opts o;
	opts_sh(&o, argv,
		"printf new > new.txt && mkdir -p d/e && printf '{\"a\": 1}\\n' > d/e/n.json && "
		"printf ' more' >> existing.txt && printf '# T\\n\\nx\\n' > d/notes.md && "
		"ln -s keep.txt link && mkfifo fifo && "
		"echo out && echo err >&2 && exit 3");
	o.label = "exec-label";
	chunks ch = {0};
	hv_execution ex;
	int rc = hv_execute(f->st, f->root, &o, on_chunk, &ch, &ex);
	if (rc != HV_OK)
		fail_msg("hv_execute: %d %s", rc, hv_error_last());
	assert_int_equal(ex.collect_status, HV_OK);
	assert_int_equal(ex.run.exit_code, 3);
	assert_false(ex.run.timed_out);
	assert_true(ex.run_id > 0);
	assert_int_equal(ch.out_len, 4);
	assert_memory_equal(ch.out, "out\n", 4);
	assert_int_equal(ch.err_len, 4);
	assert_memory_equal(ch.err, "err\n", 4);
	assert_int_equal(ex.run.stdout_len, 4);
	assert_string_equal(ex.run.stdout_data, "out\n");

	const hv_collection *c = ex.files;
	assert_non_null(c);
	assert_int_equal(c->n_files, 4);
	assert_file(c, "new.txt", "text/plain", "new");
	assert_file(c, "d/e/n.json", "application/json", "{\"a\": 1}\n");
	assert_file(c, "existing.txt", "text/plain", "old more");
	assert_file(c, "d/notes.md", "text/markdown", "# T\n\nx\n");
	assert_int_equal(c->n_skipped, 2);
	assert_false(c->incomplete);
	char *real = realpath(f->root, NULL);
	assert_string_equal(c->root, real);

	/* The history. */
	hv_run_filter rf = {.run_id = ex.run_id, .with_output = true};
	hv_run_iter *it;
	assert_int_equal(hv_store_runs(f->st, &rf, &it), HV_OK);
	const hv_run_row *r;
	assert_int_equal(hv_run_iter_next(it, &r), HV_OK);
	assert_int_equal(r->run_id, ex.run_id);
	assert_true(r->ended);
	assert_true(r->has_exit_code);
	assert_int_equal(r->exit_code, 3);
	assert_false(r->timed_out);
	assert_int_equal(r->artifacts, 4);
	assert_int_equal(r->stdout_len, 4);
	assert_memory_equal(r->stdout_data, "out\n", 4);
	assert_int_equal(r->stderr_len, 4);
	assert_memory_equal(r->stderr_data, "err\n", 4);
	assert_false(r->stdout_truncated);
	assert_int_equal(r->label_len, strlen("exec-label"));
	assert_memory_equal(r->label, "exec-label", r->label_len);
	assert_int_equal(r->dir_len, strlen(real));
	assert_memory_equal(r->dir, real, r->dir_len);
	char *cmd = hv_argv_json(argv);
	assert_non_null(r->command_json);
	assert_string_equal(r->command_json, cmd);
	free(cmd);
	assert_true(r->duration_ms >= 0);
	assert_non_null(r->skipped_json);
	tj_value *sk = tj_parse(r->skipped_json, strlen(r->skipped_json));
	if (!sk)
		fail_msg("skipped is not JSON: %s", r->skipped_json);
	assert_int_equal(tj_type(sk), TJ_ARRAY);
	assert_int_equal(tj_len(sk), 2);
	bool saw_link = false, saw_fifo = false;
	for (size_t i = 0; i < tj_len(sk); i++) {
		const char *p = tj_str(tj_get(tj_at(sk, i), "path"), NULL);
		const char *why = tj_str(tj_get(tj_at(sk, i), "reason"), NULL);
		assert_non_null(p);
		assert_non_null(why);
		if (!strcmp(p, "link")) {
			assert_string_equal(why, "symlink");
			saw_link = true;
		} else if (!strcmp(p, "fifo")) {
			assert_string_equal(why, "not_regular");
			saw_fifo = true;
		}
	}
	assert_true(saw_link && saw_fifo);
	tj_free(sk);
	assert_int_equal(hv_run_iter_next(it, &r), HV_DONE);
	hv_run_iter_free(it);

	/* The artifacts, with their contents. */
	hv_artifact_filter af = {.run_id = ex.run_id, .with_content = true};
	hv_artifact_iter *ai;
	assert_int_equal(hv_store_artifacts(f->st, &af, &ai), HV_OK);
	const hv_artifact_row *a;
	size_t n = 0;
	while (hv_artifact_iter_next(ai, &a) == HV_OK) {
		char path[256];
		snprintf(path, sizeof(path), "%.*s", (int)a->path_len, a->path);
		const hv_output_file *of = find_file(c, path);
		if (!of)
			fail_msg("recorded artifact %s was not collected", path);
		assert_string_equal(a->mime_type, of->mime_type);
		assert_string_equal(a->sha256, of->sha256);
		assert_int_equal(a->size, of->size);
		assert_true(a->content_stored);
		assert_int_equal(a->content_len, of->content_len);
		assert_memory_equal(a->content, of->content, of->content_len);
		n++;
	}
	hv_artifact_iter_free(ai);
	assert_int_equal(n, 4);
	free(real);
	hv_execution_free(&ex);
	assert_no_snapshots(f);

	/* A second run that changes nothing: no artifacts, the earlier files untouched. */
	opts_sh(&o, argv, "true");
	rc = hv_execute(f->st, f->root, &o, NULL, NULL, &ex);
	assert_int_equal(rc, HV_OK);
	assert_int_equal(ex.collect_status, HV_OK);
	assert_int_equal(ex.run.exit_code, 0);
	assert_non_null(ex.files);
	assert_int_equal(ex.files->n_files, 0);
	assert_int_equal(ex.files->n_skipped, 0);
	assert_true(ex.run_id > 0);
	hv_execution_free(&ex);
	assert_int_equal(count_runs(f), 2);
	assert_no_snapshots(f);
}

static void test_execute_no_history(void **state)
{
	fx *f = *state;
	const char *argv[5];
	hv_execute_opts o;
	opts_sh(&o, argv, "printf x > x.txt");
	o.no_history = true;
	hv_execution ex;
	assert_int_equal(hv_execute(f->st, f->root, &o, NULL, NULL, &ex), HV_OK);
	assert_int_equal(ex.run_id, 0);
	assert_int_equal(ex.collect_status, HV_OK);
	assert_non_null(ex.files);
	assert_int_equal(ex.files->n_files, 1);
	assert_file(ex.files, "x.txt", "text/plain", "x");
	hv_execution_free(&ex);
	assert_int_equal(count_runs(f), 0);
	hv_artifact_iter *ai;
	assert_int_equal(hv_store_artifacts(f->st, NULL, &ai), HV_OK);
	const hv_artifact_row *a;
	assert_int_equal(hv_artifact_iter_next(ai, &a), HV_DONE);
	hv_artifact_iter_free(ai);
	assert_no_snapshots(f);
}

static void test_execute_missing_dir(void **state)
{
	fx *f = *state;
	const char *argv[5];
	hv_execute_opts o;
	opts_sh(&o, argv, "printf x > /dev/null");
	hv_execution ex;
	char *missing = tu_path(f->dir, "missing");
	assert_int_equal(hv_execute(f->st, missing, &o, NULL, NULL, &ex), HV_ENOTDIR);
	assert_int_equal(ex.run_id, 0);
	hv_execution_free(&ex);
	/* A regular file is not a directory either. */
	wr(f, "file", "x");
	char *file = tu_path(f->root, "file");
	assert_int_equal(hv_execute(f->st, file, &o, NULL, NULL, &ex), HV_ENOTDIR);
	hv_execution_free(&ex);
	assert_int_equal(count_runs(f), 0);
	assert_no_snapshots(f);
	free(missing);
	free(file);
}

static void test_execute_not_found(void **state)
{
	/* A command that cannot be found still ran as far as hv_execute is concerned: 127, in
	 * the history, nothing produced. */
	fx *f = *state;
	const char *argv[] = {"harvest-no-such-command-xyz", NULL};
	hv_execute_opts o;
	memset(&o, 0, sizeof(o));
	hv_run_opts_init(&o.run);
	hv_collect_opts_init(&o.collect);
	o.run.argv = argv;
	hv_execution ex;
	assert_int_equal(hv_execute(f->st, f->root, &o, NULL, NULL, &ex), HV_OK);
	assert_int_equal(ex.run.exit_code, 127);
	assert_true(ex.run_id > 0);
	assert_int_equal(ex.collect_status, HV_OK);
	assert_int_equal(ex.files->n_files, 0);
	hv_run_filter rf = {.run_id = ex.run_id};
	hv_run_iter *it;
	assert_int_equal(hv_store_runs(f->st, &rf, &it), HV_OK);
	const hv_run_row *r;
	assert_int_equal(hv_run_iter_next(it, &r), HV_OK);
	assert_true(r->has_exit_code);
	assert_int_equal(r->exit_code, 127);
	hv_run_iter_free(it);
	hv_execution_free(&ex);
	assert_no_snapshots(f);
}

static void test_execute_timeout(void **state)
{
	/* Timed out: exit code 124, timed_out in the result and the history, and what the
	 * command wrote before it was stopped is still collected. */
	fx *f = *state;
	const char *argv[5];
	hv_execute_opts o;
	opts_sh(&o, argv, "printf early > early.txt; echo started; exec sleep 30");
	o.run.timeout_ms = 1500; /* long enough for a loaded machine to start the shell */
	hv_execution ex;
	assert_int_equal(hv_execute(f->st, f->root, &o, NULL, NULL, &ex), HV_OK);
	assert_true(ex.run.timed_out);
	assert_int_equal(ex.run.exit_code, 124);
	assert_int_equal(ex.collect_status, HV_OK);
	assert_int_equal(ex.files->n_files, 1);
	assert_file(ex.files, "early.txt", "text/plain", "early");
	hv_run_filter rf = {.run_id = ex.run_id, .with_output = true};
	hv_run_iter *it;
	assert_int_equal(hv_store_runs(f->st, &rf, &it), HV_OK);
	const hv_run_row *r;
	assert_int_equal(hv_run_iter_next(it, &r), HV_OK);
	assert_true(r->timed_out);
	assert_int_equal(r->exit_code, 124);
	assert_int_equal(r->artifacts, 1);
	assert_int_equal(r->stdout_len, strlen("started\n"));
	assert_memory_equal(r->stdout_data, "started\n", r->stdout_len);
	hv_run_iter_free(it);
	hv_execution_free(&ex);
	assert_no_snapshots(f);
}

static void test_execute_usage_error(void **state)
{
	/* A bad option is harvest's own failure: a negative status, no snapshot left behind. */
	fx *f = *state;
	const char *argv[] = {"true", NULL};
	const char *env[] = {"1BAD=x"};
	hv_execute_opts o;
	hv_execute_opts_init(&o);
	o.run.argv = argv;
	o.run.env = env;
	o.run.n_env = 1;
	hv_execution ex;
	assert_int_equal(hv_execute(f->st, f->root, &o, NULL, NULL, &ex), HV_EUSAGE);
	assert_null(ex.files);
	hv_execution_free(&ex);
	/* a changes mode that is none of the three */
	o.run.n_env = 0;
	o.changes = (hv_changes_mode)9;
	assert_int_equal(hv_execute(f->st, f->root, &o, NULL, NULL, &ex), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "bad changes mode"));
	hv_execution_free(&ex);
	assert_no_snapshots(f);
}

/* hv_execute_opts_init: the run's and the collect's own defaults, the rest zero; the frees
 * take NULL. */
static void test_execute_opts_init(void **state)
{
	(void)state;
	hv_execute_opts o, want;
	memset(&o, 0xa5, sizeof(o));
	hv_execute_opts_init(&o);
	memset(&want, 0, sizeof(want));
	hv_run_opts_init(&want.run);
	hv_collect_opts_init(&want.collect);
	assert_memory_equal(&o.run, &want.run, sizeof(want.run));
	assert_memory_equal(&o.collect, &want.collect, sizeof(want.collect));
	assert_null(o.label);
	assert_null(o.host);
	assert_false(o.no_history);
	assert_int_equal(o.changes, HV_CHANGES_AUTO);
	assert_null(o.open_store);
	assert_false(o.cache_optional);
	assert_true(o.collect.max_files > 0);
	hv_execution_free(NULL);
	hv_run_result_free(NULL);
}

static void test_execute_db_inside_dir(void **state)
{
	/* The database lives in the directory the command runs in: its files are never
	 * artifacts, though the run itself writes to them. */
	fx *f = *state;
	char *db = tu_path(f->root, "harvest.db");
	hv_store *st;
	assert_int_equal(hv_store_open(&st, db, 0), HV_OK);
	const char *argv[5];
	hv_execute_opts o;
	opts_sh(&o, argv, "printf a > a.txt && printf j > harvest.db-journal.txt");
	hv_execution ex;
	assert_int_equal(hv_execute(st, f->root, &o, NULL, NULL, &ex), HV_OK);
	assert_int_equal(ex.collect_status, HV_OK);
	assert_non_null(ex.files);
	for (size_t i = 0; i < ex.files->n_files; i++)
		if (strncmp(ex.files->files[i].path, "harvest.db", 10) == 0 &&
		    strcmp(ex.files->files[i].path, "harvest.db-journal.txt") != 0)
			fail_msg("the database's file %s is an artifact", ex.files->files[i].path);
	assert_int_equal(ex.files->n_files, 2);
	assert_file(ex.files, "a.txt", "text/plain", "a");
	assert_non_null(find_file(ex.files, "harvest.db-journal.txt"));
	assert_int_equal(ex.files->n_skipped, 0);
	hv_execution_free(&ex);

	/* Twice: the second run sees the database changed since its snapshot. */
	opts_sh(&o, argv, "printf b > b.txt");
	assert_int_equal(hv_execute(st, f->root, &o, NULL, NULL, &ex), HV_OK);
	assert_int_equal(ex.collect_status, HV_OK);
	assert_int_equal(ex.files->n_files, 1);
	assert_file(ex.files, "b.txt", "text/plain", "b");
	assert_int_equal(ex.files->n_skipped, 0);
	hv_execution_free(&ex);
	hv_store_close(st);
	free(db);
}

/* A missing or empty command is refused before anything happens: no run, no snapshot. */
static void test_execute_no_command(void **state)
{
	fx *f = *state;
	const char *none[] = {NULL};
	const char *empty[] = {"", "arg", NULL};
	const char *const *argvs[] = {NULL, none, empty};
	for (size_t i = 0; i < 3; i++) {
		hv_execute_opts o;
		memset(&o, 0, sizeof(o));
		hv_run_opts_init(&o.run);
		hv_collect_opts_init(&o.collect);
		o.run.argv = argvs[i];
		hv_execution ex;
		assert_int_equal(hv_execute(f->st, f->root, &o, NULL, NULL, &ex), HV_EUSAGE);
		assert_non_null(strstr(hv_error_last(), "no command"));
		assert_int_equal(ex.run_id, 0);
		assert_null(ex.files);
		hv_execution_free(&ex);
	}
	assert_int_equal(count_runs(f), 0);
	assert_no_snapshots(f);
}

/* The caller's chunk callback fails: the command is stopped, hv_execute returns that status
 * and collects nothing; the run has no id to give out, and the history ends it as not
 * recorded (its files are unknown), never as a run that ended normally with none. */
static hv_status failing_chunk(void *ctx, hv_stream which, const char *data, size_t len)
{
	(void)which, (void)data, (void)len;
	int *calls = ctx;
	(*calls)++;
	return HV_EIO;
}

static void test_execute_callback_failure(void **state)
{
	fx *f = *state;
	const char *argv[5];
	hv_execute_opts o;
	opts_sh(&o, argv, "printf x > x.txt; echo out; exec sleep 30");
	hv_execution ex;
	int calls = 0;
	time_t t0 = time(NULL);
	assert_int_equal(hv_execute(f->st, f->root, &o, failing_chunk, &calls, &ex), HV_EIO);
	assert_true(time(NULL) - t0 < 15); /* stopped, not the 30 s of the command */
	assert_int_equal(calls, 1);
	assert_null(ex.files);
	assert_int_equal(ex.run_id, 0);
	hv_execution_free(&ex);
	hv_run_iter *it;
	assert_int_equal(hv_store_runs(f->st, NULL, &it), HV_OK);
	const hv_run_row *r;
	assert_int_equal(hv_run_iter_next(it, &r), HV_OK);
	assert_true(r->ended);
	assert_false(r->has_exit_code);
	assert_int_equal(r->duration_ms, -1);
	assert_int_equal(r->artifacts, 0);
	assert_non_null(r->end_reason);
	assert_string_equal(r->end_reason, HV_END_NOT_RECORDED);
	assert_int_equal(hv_run_iter_next(it, &r), HV_DONE);
	hv_run_iter_free(it);
	assert_no_snapshots(f);
}

/* The command removes the directory it ran in: hv_execute still returns HV_OK (the command
 * ran) and reports the failure in collect_status; the run is not completely recorded, so it
 * has no run_id, and the history keeps it as begun but never ended (not as a run that
 * ended with no artifacts). */
static void test_execute_collect_failure(void **state)
{
	fx *f = *state;
	const char *argv[5];
	hv_execute_opts o;
	opts_sh(&o, argv, "cd .. && rm -rf root && exit 4");
	char *real = realpath(f->root, NULL); /* as the message names it */
	assert_non_null(real);
	hv_execution ex;
	assert_int_equal(hv_execute(f->st, f->root, &o, NULL, NULL, &ex), HV_OK);
	assert_int_equal(ex.run.exit_code, 4);
	assert_true(ex.collect_status < 0);
	assert_null(ex.files);
	assert_non_null(strstr(hv_error_last(), real));
	free(real);
	assert_int_equal(ex.run_id, 0);
	assert_false(ex.recording_failed);
	hv_execution_free(&ex);
	hv_run_iter *it;
	assert_int_equal(hv_store_runs(f->st, NULL, &it), HV_OK);
	const hv_run_row *r;
	assert_int_equal(hv_run_iter_next(it, &r), HV_OK);
	/* Ended, but as not recorded: never as a run that ended normally with no artifacts. */
	assert_true(r->ended);
	assert_non_null(r->end_reason);
	assert_string_equal(r->end_reason, HV_END_NOT_RECORDED);
	assert_int_equal(r->artifacts, 0);
	assert_int_equal(hv_run_iter_next(it, &r), HV_DONE);
	hv_run_iter_free(it);
	assert_no_snapshots(f);
}

/* An open_store that cannot give a store (as a database that cannot be opened). */
static hv_store *no_store(void *ctx)
{
	int *calls = ctx;
	(*calls)++;
	hv_error_set(HV_EDB, "nowhere.db: cannot open the database");
	return NULL;
}

static void collect_warning(void *ctx, const char *msg)
{
	char *buf = ctx;
	snprintf(buf + strlen(buf), 512 - strlen(buf), "%s|", msg);
}

/* Without the history, a store opened on demand that cannot be opened: a produced file fails
 * the collect (HV_EIO, the open's message kept) unless the caller marked the cache optional;
 * then the file is typed without it and the reason goes to on_warning, once. Both ways of
 * finding what changed. */
static void test_execute_cache_optional(void **state)
{
	fx *f = *state;
	const hv_changes_mode modes[] = {HV_CHANGES_AUTO, HV_CHANGES_SNAPSHOT};
	for (size_t m = 0; m < 2; m++) {
		for (int optional = 0; optional < 2; optional++) {
			const char *argv[5];
			hv_execute_opts o;
			char script[64];
			snprintf(script, sizeof(script), "printf 'a,b\\n' > t%zu%d.csv", m, optional);
			opts_sh(&o, argv, script);
			o.no_history = true;
			o.changes = modes[m];
			int calls = 0;
			char warned[512] = "";
			o.open_store = no_store;
			o.open_store_ctx = &calls;
			o.cache_optional = optional;
			o.collect.on_warning = collect_warning;
			o.collect.ctx = warned;
			hv_execution ex;
			assert_int_equal(hv_execute(NULL, f->root, &o, NULL, NULL, &ex), HV_OK);
			assert_true(calls >= 1);
			if (!optional) {
				assert_int_equal(ex.collect_status, HV_EIO);
				assert_non_null(strstr(hv_error_last(), "nowhere.db"));
				assert_null(ex.files);
				assert_string_equal(warned, "");
			} else {
				assert_int_equal(ex.collect_status, HV_OK);
				assert_non_null(ex.files);
				char name[16];
				snprintf(name, sizeof(name), "t%zu%d.csv", m, optional);
				assert_file(ex.files, name, "text/csv", "a,b\n");
				assert_string_equal(warned, "nowhere.db: cannot open the database; "
							    "collecting without the MIME cache|");
			}
			hv_execution_free(&ex);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_execute_produces, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_no_history, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_missing_dir, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_not_found, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_timeout, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test(test_execute_opts_init),
		cmocka_unit_test_setup_teardown(test_execute_usage_error, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_db_inside_dir, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_no_command, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_callback_failure, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_collect_failure, tu_fx_setup, tu_fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_cache_optional, tu_fx_setup, tu_fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
