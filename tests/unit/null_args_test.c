/* A NULL where a public function needs a pointer is the caller's mistake, and the library says
 * so: a function that returns a status returns HV_EUSAGE with "<function>: missing argument";
 * one that returns a value gives 0, NULL or -1; every _free and _close takes NULL. None of
 * these calls may crash (README, "Errors"). */
#include "testutil.h"

#include "harvest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* rc is HV_EUSAGE and the thread's message is "<fn>: missing argument". */
static void refused_as(hv_status rc, const char *fn)
{
	assert_int_equal(rc, HV_EUSAGE);
	assert_int_equal(hv_error_last_status(), HV_EUSAGE);
	char want[128];
	snprintf(want, sizeof(want), "%s: missing argument", fn);
	assert_string_equal(hv_error_last(), want);
	hv_error_clear();
}
#define REFUSED(fn, ...) refused_as(fn(__VA_ARGS__), #fn)

static hv_status read_nothing(void *ctx, void *buf, size_t cap, size_t *got)
{
	(void)ctx, (void)buf, (void)cap;
	*got = 0;
	return HV_OK;
}

static void test_walk(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	const hv_entry *e = (const hv_entry *)&e;
	REFUSED(hv_walk_next, NULL, &e);
	hv_walk *w = NULL;
	assert_int_equal(hv_walk_open(&w, dir, NULL), HV_OK);
	REFUSED(hv_walk_next, w, NULL);
	hv_walk_close(w);
	errno = 0;
	assert_int_equal(hv_walk_openat(NULL, O_RDONLY), -1);
	assert_int_equal(errno, EINVAL);
	assert_true(hv_walk_count(NULL) == 0);
	assert_true(hv_walk_warnings(NULL) == 0);
	uint64_t grown = 7;
	assert_int_equal(hv_walk_workers(NULL, &grown), 0);
	assert_true(grown == 0);
	assert_null(hv_walk_root(NULL));
	hv_walk_close(NULL);
	tu_rmrf(dir);
	free(dir);
}

static void test_run_and_execute(void **state)
{
	(void)state;
	hv_execute_opts eo;
	hv_execute_opts_init(&eo);
	hv_execution x;
	memset(&x, 0xab, sizeof(x));
	REFUSED(hv_execute, NULL, "/", NULL, NULL, NULL, &x);
	/* *out was zeroed before the refusal, so freeing it is safe */
	assert_null(x.files);
	hv_execution_free(&x);
	REFUSED(hv_execute, NULL, NULL, &eo, NULL, NULL, &x);
	hv_execution_free(&x);
	REFUSED(hv_execute, NULL, "/", &eo, NULL, NULL, NULL);
	hv_execution_free(NULL);
	/* No store and no way to open one: refused before the command runs (it would write
	 * the file), not after it with nothing collected. */
	char *dir = tu_mkdtemp();
	const char *argv[] = {"sh", "-c", "echo ran > ran.txt", NULL};
	eo.run.argv = argv;
	for (int no_history = 0; no_history < 2; no_history++) {
		eo.no_history = no_history;
		assert_int_equal(hv_execute(NULL, dir, &eo, NULL, NULL, &x), HV_EUSAGE);
		assert_non_null(strstr(hv_error_last(), no_history ? "collect.no_cache" : "no_history"));
		hv_execution_free(&x);
	}
	char *ran = tu_path(dir, "ran.txt");
	assert_int_equal(access(ran, F_OK), -1);
	eo.collect.no_cache = true; /* nothing needs a store: the command runs */
	assert_int_equal(hv_execute(NULL, dir, &eo, NULL, NULL, &x), HV_OK);
	assert_int_equal(x.run.exit_code, 0);
	assert_int_equal(access(ran, F_OK), 0);
	hv_execution_free(&x);
	free(ran);
	tu_rmrf(dir);
	free(dir);

	hv_run_result r;
	memset(&r, 0xab, sizeof(r));
	REFUSED(hv_run, NULL, NULL, NULL, &r);
	assert_null(r.stdout_data);
	hv_run_result_free(&r);
	hv_run_opts ro;
	hv_run_opts_init(&ro);
	REFUSED(hv_run, &ro, NULL, NULL, NULL);
	hv_run_result_free(NULL);

	REFUSED(hv_run_check_env, NULL);
	REFUSED(hv_run_argv_shell, NULL, "true");
	REFUSED(hv_run_argv_language, NULL, "python3");
}

static void test_files_and_archives(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *f = tu_path(dir, "f");
	REFUSED(hv_file_copy_to_fd, NULL, 1, NULL);
	REFUSED(hv_file_write, NULL, read_nothing, NULL, NULL);
	REFUSED(hv_file_write, f, NULL, NULL, NULL);
	REFUSED(hv_file_write_fd, NULL, 0, NULL, NULL);
	REFUSED(hv_file_write_buffer, NULL, "x", 1, NULL);
	REFUSED(hv_file_write_buffer, f, NULL, 3, NULL);
	/* nothing was made by the refused writes */
	assert_int_equal(access(f, F_OK), -1);
	assert_int_equal(hv_file_write_buffer(f, NULL, 0, NULL), HV_OK); /* an empty file */
	REFUSED(hv_remove, NULL, NULL);
	hv_archive_format fmt;
	REFUSED(hv_archive_format_parse, NULL, &fmt);
	REFUSED(hv_archive_format_parse, "tar", NULL);
	REFUSED(hv_archive_format_from_name, NULL, &fmt);
	REFUSED(hv_archive_dir, 1, NULL, NULL, NULL);
	REFUSED(hv_archive_run, 1, NULL, 1, NULL, NULL);
	REFUSED(hv_store_flush, NULL);
	REFUSED(hv_collect_check_fds, NULL, 0);
	hv_file_out *o = (hv_file_out *)&o;
	REFUSED(hv_file_out_open, NULL, f, 0);
	assert_int_equal(hv_file_out_fd(NULL), -1);
	hv_file_out_abort(NULL);
	REFUSED(hv_store_default_path, NULL);
	REFUSED(hv_store_integrity_check, NULL);
	assert_null(hv_store_path(NULL));
	assert_int_equal(hv_store_close(NULL), HV_OK);
	free(f);
	tu_rmrf(dir);
	free(dir);
}

static void test_json(void **state)
{
	(void)state;
	REFUSED(hv_json_new_fd, NULL, 1, HV_CASE_SNAKE);
	REFUSED(hv_json_new_buffer, NULL, HV_CASE_SNAKE);
	REFUSED(hv_json_flush, NULL);
	REFUSED(hv_json_status, NULL);
	size_t len = 9;
	assert_null(hv_json_buffer(NULL, &len));
	assert_true(len == 0);
	assert_null(hv_json_buffer_strdup(NULL));
	assert_true(hv_json_pending(NULL) == 0);
	assert_int_equal(hv_json_case(NULL), HV_CASE_SNAKE);
	hv_json_free(NULL);
	/* The void writers and record writers: a NULL writer does nothing; a NULL string, key or
	 * record makes the writer's status HV_EUSAGE; a NULL C string or enum writes null. */
	hv_json_object_begin(NULL);
	hv_json_string(NULL, "x", 1);
	hv_json_key(NULL, "k");
	hv_json_base64(NULL, "x", 1);
	hv_record_fileinfo(NULL, NULL, 0);
	hv_record_output_file(NULL, NULL, false);
	hv_error_clear();
	hv_json *j;
	assert_int_equal(hv_json_new_buffer(&j, HV_CASE_SNAKE), HV_OK);
	hv_json_array_begin(j);
	hv_json_cstring(j, NULL);
	hv_json_enum(j, NULL);
	hv_json_string(j, NULL, 0);
	hv_json_array_end(j);
	assert_int_equal(hv_json_status(j), HV_OK);
	const char *text = hv_json_buffer(j, &len);
	assert_int_equal(len, 14);
	assert_memory_equal(text, "[null,null,\"\"]", 14);
	hv_json_free(j);
	for (int k = 0; k < 9; k++) {
		assert_int_equal(hv_json_new_buffer(&j, HV_CASE_SNAKE), HV_OK);
		hv_json_object_begin(j);
		switch (k) {
		case 0: hv_json_string(j, NULL, 3); break;
		case 1: hv_json_key(j, NULL); break;
		case 2: hv_json_raw(j, NULL, 4); break;
		case 3: hv_json_base64(j, NULL, 4); break;
		case 4: hv_record_fileinfo(j, NULL, 0); break;
		case 5: REFUSED(hv_record_result, j, NULL, NULL, 0, false); break;
		case 6: hv_record_run_row(j, NULL); break;
		case 7: hv_record_stream_chunk(j, HV_STREAM_STDOUT, NULL, 2); break;
		default: hv_json_key_null(j, NULL); break;
		}
		if (k != 5) {
			assert_int_equal(hv_json_status(j), HV_EUSAGE);
			/* and flush says why */
			assert_int_equal(hv_json_flush(j), HV_EUSAGE);
			assert_non_null(strstr(hv_error_last(), "NULL"));
		}
		hv_json_free(j);
	}
	hv_run_end e = {.exit_code = 7};
	hv_run_row_end(NULL, &e);
	assert_int_equal(e.exit_code, 7);
	hv_run_row_end(NULL, NULL);
}

static void test_mime(void **state)
{
	(void)state;
	const char *type = "unset";
	REFUSED(hv_magic_open, NULL, NULL, 0);
	REFUSED(hv_magic_fd, NULL, 0, "x", &type);
	REFUSED(hv_magic_buffer, NULL, "x", 1, -1, NULL, &type);
	REFUSED(hv_mime_db_open, NULL, NULL);
	assert_null(hv_magic_fingerprint(NULL));
	assert_null(hv_magic_database(NULL));
	assert_true(hv_magic_bytes_max(NULL) == 0);
	hv_magic_close(NULL);
	assert_false(hv_mime_is_subclass(NULL, NULL, "text/plain"));
	assert_false(hv_mime_is_subclass(NULL, "text/x-c", NULL));
	hv_mime_db_close(NULL);
	hv_mime_result *res = NULL;
	REFUSED(hv_mime_detect_paths, NULL, 1, NULL, &res);
	const char *paths[] = {"/"};
	REFUSED(hv_mime_detect_paths, paths, 1, NULL, NULL);
	REFUSED(hv_mime_detect_cached, NULL, NULL, 1, NULL, &res);
	REFUSED(hv_mime_detect_cached_lstat, NULL, NULL, NULL, NULL, 1, NULL, &res);
	REFUSED(hv_mime_detect_dir, NULL, NULL, NULL, NULL, NULL, NULL);
	hv_mime_results_free(NULL, 3);
}

static void test_collect_and_page(void **state)
{
	(void)state;
	int64_t id = 0;
	REFUSED(hv_snapshot_take, NULL, NULL, NULL, &id, NULL, NULL);
	hv_mem_snapshot *m = NULL;
	REFUSED(hv_snapshot_take_mem, NULL, NULL, NULL, &m);
	REFUSED(hv_snapshot_take_mem, NULL, "/", NULL, NULL);
	assert_true(hv_mem_snapshot_entries(NULL) == 0);
	hv_mem_snapshot_free(NULL);
	hv_collection *c = (hv_collection *)&c;
	REFUSED(hv_collect_since_mem, NULL, "/", NULL, NULL, &c);
	assert_null(c); /* *out is NULL on every failure */
	REFUSED(hv_collection_record, NULL, NULL, NULL, NULL, &id);
	char buf[4];
	REFUSED(hv_collection_content_read, NULL, NULL, 0, buf, 1);
	assert_false(hv_collection_unstored(NULL, 0));
	assert_null(hv_collection_skipped_json(NULL, HV_CASE_SNAKE));
	assert_null(hv_collection_deleted_json(NULL));
	hv_collection_free(NULL);
	REFUSED(hv_page_write_collection, NULL, NULL, NULL, NULL, NULL);
	REFUSED(hv_page_write_run, NULL, 1, NULL, NULL, NULL);
}

/* Every option struct has its _init; the ones whose defaults are all zero say so. */
static void test_opts_init(void **state)
{
	(void)state;
	hv_page_opts po;
	memset(&po, 0xab, sizeof(po));
	hv_page_opts_init(&po);
	assert_null(po.host);
	assert_true(po.embed_max == 0 && po.n_deleted == 0);
	hv_remove_opts ro;
	memset(&ro, 0xab, sizeof(ro));
	hv_remove_opts_init(&ro);
	assert_false(ro.recursive);
	assert_null(ro.on_error);
	hv_prune_opts pr;
	memset(&pr, 0xab, sizeof(pr));
	hv_prune_opts_init(&pr);
	assert_true(pr.keep_runs == -1 && pr.before_ns == 0 && !pr.has_before);
}

static void test_parse(void **state)
{
	(void)state;
	uint64_t u;
	int64_t i;
	REFUSED(hv_parse_uint, NULL, 5, &u);
	REFUSED(hv_parse_uint, "5", 5, NULL);
	REFUSED(hv_parse_int, NULL, 0, 9, &i);
	REFUSED(hv_parse_int, "5", 0, 9, NULL);
	REFUSED(hv_parse_duration_ms, NULL, &u);
	REFUSED(hv_parse_size, NULL, &u);
	REFUSED(hv_parse_time, NULL, 0, &i);
	REFUSED(hv_parse_time, "1h", 0, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_walk),
		cmocka_unit_test(test_run_and_execute),
		cmocka_unit_test(test_files_and_archives),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_mime),
		cmocka_unit_test(test_collect_and_page),
		cmocka_unit_test(test_opts_init),
		cmocka_unit_test(test_parse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
