/* The records: the exact JSON of every writer of records.h, in snake and camel case, with
 * unknown values (a failed stat, no exit code, no digest) as null in snake case and left out in
 * camel case. */
#include "testutil.h"

#include "harvest/records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hv_json *new_buffer(hv_case kase)
{
	hv_json *j = NULL;
	assert_int_equal(hv_json_new_buffer(&j, kase), HV_OK);
	assert_non_null(j);
	return j;
}

/* Asserts that j holds exactly want, then frees it. */
static void assert_json(hv_json *j, const char *want)
{
	assert_int_equal(hv_json_status(j), HV_OK);
	size_t len = 0;
	const char *got = hv_json_buffer(j, &len);
	if (len != strlen(want) || memcmp(got, want, len) != 0)
		fail_msg("got    %.*s\nwanted %s", (int)len, got, want);
	hv_json_free(j);
}

/* 2026-11-30T03:29:07.123456789Z */
#define MTIME_NS INT64_C(1796009347123456789)

static hv_entry file_entry(void)
{
	hv_entry e = {
		.name = "a.txt", .name_len = 5, .path = "d/a.txt", .path_len = 7, .depth = 2,
		.type = HV_FT_FILE, .have_stat = true, .is_dir = false, .size = 12,
		.have_lstat = true, .lst = {.size = 12, .mode = 0100644, .mtime_ns = MTIME_NS},
	};
	return e;
}

static void test_fileinfo(void **state)
{
	(void)state;
	hv_entry e = file_entry();
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_fileinfo(j, &e, 0);
	assert_json(j, "{\"name\":\"a.txt\",\"is_dir\":false,\"size\":12}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_fileinfo(j, &e, 0);
	assert_json(j, "{\"name\":\"a.txt\",\"isDir\":false,\"size\":12}");
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_fileinfo(j, &e, HV_FILEINFO_PATH);
	assert_json(j, "{\"name\":\"a.txt\",\"path\":\"d/a.txt\",\"is_dir\":false,\"size\":12}");
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_fileinfo(j, &e, HV_FILEINFO_PATH | HV_FILEINFO_LONG);
	assert_json(j, "{\"name\":\"a.txt\",\"path\":\"d/a.txt\",\"is_dir\":false,\"size\":12,"
		       "\"type\":\"file\",\"mode\":\"0644\","
		       "\"mtime\":\"2026-11-30T03:29:07.123456789Z\"}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_fileinfo(j, &e, HV_FILEINFO_LONG);
	assert_json(j, "{\"name\":\"a.txt\",\"isDir\":false,\"size\":12,\"type\":\"file\","
		       "\"mode\":\"0644\",\"mtime\":\"2026-11-30T03:29:07.123456789Z\"}");
}

/* A dangling symlink: stat failed, so is_dir and size are unknown, never guessed. */
static void test_fileinfo_stat_failed(void **state)
{
	(void)state;
	hv_entry e = {
		.name = "dang", .name_len = 4, .path = "dang", .path_len = 4, .depth = 1,
		.type = HV_FT_SYMLINK, .have_stat = false, .have_lstat = true,
		.lst = {.size = 7, .mode = 0120777, .mtime_ns = MTIME_NS},
		.target = "nowhere", .target_len = 7,
	};
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_fileinfo(j, &e, 0);
	assert_json(j, "{\"name\":\"dang\",\"is_dir\":null,\"size\":null}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_fileinfo(j, &e, 0);
	assert_json(j, "{\"name\":\"dang\"}");
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_fileinfo(j, &e, HV_FILEINFO_LONG);
	assert_json(j, "{\"name\":\"dang\",\"is_dir\":null,\"size\":null,\"type\":\"symlink\","
		       "\"mode\":\"0777\",\"mtime\":\"2026-11-30T03:29:07.123456789Z\","
		       "\"target\":\"nowhere\"}");
	/* A link whose target could not be read, an entry lstat could not see either. */
	e.target = NULL;
	e.target_len = 0;
	e.have_lstat = false;
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_fileinfo(j, &e, HV_FILEINFO_LONG);
	assert_json(j, "{\"name\":\"dang\",\"is_dir\":null,\"size\":null,\"type\":\"symlink\","
		       "\"mode\":null,\"mtime\":null,\"target\":null}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_fileinfo(j, &e, HV_FILEINFO_LONG);
	assert_json(j, "{\"name\":\"dang\",\"type\":\"symlink\"}");
}

/* Names that are not UTF-8 keep their bytes (\udcXX), in the record as everywhere. */
static void test_fileinfo_bytes(void **state)
{
	(void)state;
	hv_entry e = file_entry();
	e.name = "a\xff\n";
	e.name_len = 3;
	e.have_stat = true;
	e.is_dir = true;
	e.size = 4096;
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_fileinfo(j, &e, 0);
	assert_json(j, "{\"name\":\"a\\udcff\\n\",\"is_dir\":true,\"size\":4096}");
}

static void test_mime(void **state)
{
	(void)state;
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_mime(j, "x/p.png", 7, "image/png");
	assert_json(j, "{\"path\":\"x/p.png\",\"mime_type\":\"image/png\"}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_mime(j, "x/p.png", 7, "image/png");
	assert_json(j, "{\"path\":\"x/p.png\",\"mimeType\":\"image/png\"}");
}

static hv_output_file output_file(void)
{
	static char path[] = "figs/plot.png", mime[] = "image/png";
	static unsigned char bytes[] = "hi!";
	hv_output_file f = {
		.path = path, .path_len = 13, .name = path + 5, .name_len = 8, .mime_type = mime,
		.size = 3, .content = bytes, .content_len = 3,
	};
	memset(f.sha256, 'a', 64);
	return f;
}

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static void test_output_file(void **state)
{
	(void)state;
	hv_output_file f = output_file();
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_output_file(j, &f, true);
	assert_json(j, "{\"name\":\"plot.png\",\"path\":\"figs/plot.png\",\"mime_type\":\"image/png\","
		       "\"size\":3,\"sha256\":\"" SHA_A "\",\"content\":\"aGkh\"}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_output_file(j, &f, false);
	assert_json(j, "{\"name\":\"plot.png\",\"path\":\"figs/plot.png\",\"mimeType\":\"image/png\","
		       "\"size\":3,\"sha256\":\"" SHA_A "\",\"content\":null}");
	/* Against a snapshot: the change is known. No digest: null, in either case (an
	 * OutputFile keeps its members in camel case, SPEC 1). */
	f.change = "created";
	f.sha256[0] = '\0';
	f.content = NULL;
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_output_file(j, &f, true);
	assert_json(j, "{\"name\":\"plot.png\",\"path\":\"figs/plot.png\",\"mime_type\":\"image/png\","
		       "\"size\":3,\"sha256\":null,\"content\":null,\"change\":\"created\"}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_output_file(j, &f, true);
	assert_json(j, "{\"name\":\"plot.png\",\"path\":\"figs/plot.png\",\"mimeType\":\"image/png\","
		       "\"size\":3,\"sha256\":null,\"content\":null,\"change\":\"created\"}");
}

static void test_skipped_deleted(void **state)
{
	(void)state;
	char p1[] = "big.bin", p2[] = "link", p3[] = "locked", err[] = "locked: Permission denied";
	hv_skipped_file sk[] = {
		{.path = p1, .path_len = 7, .reason = "too_large", .has_size = true, .size = 99},
		{.path = p2, .path_len = 4, .reason = "symlink"},
		{.path = p3, .path_len = 6, .reason = "error", .has_size = true, .size = 1,
		 .error = err},
	};
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_skipped(j, sk, 3);
	assert_json(j, "[{\"path\":\"big.bin\",\"reason\":\"too_large\",\"size\":99},"
		       "{\"path\":\"link\",\"reason\":\"symlink\",\"size\":null},"
		       "{\"path\":\"locked\",\"reason\":\"error\",\"size\":1,"
		       "\"error\":\"locked: Permission denied\"}]");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_skipped(j, sk, 2);
	assert_json(j, "[{\"path\":\"big.bin\",\"reason\":\"too_large\",\"size\":99},"
		       "{\"path\":\"link\",\"reason\":\"symlink\"}]");
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_skipped(j, NULL, 0);
	assert_json(j, "[]");

	char d1[] = "gone.txt", d2[] = "x/\xfe";
	hv_deleted_file del[] = {{.path = d1, .path_len = 8}, {.path = d2, .path_len = 3}};
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_deleted(j, del, 2);
	assert_json(j, "[\"gone.txt\",\"x/\\udcfe\"]");

	/* The text forms the history keeps are the same writers' output. */
	hv_collection c = {.skipped = sk, .n_skipped = 2, .deleted = del, .n_deleted = 1};
	char *text = hv_collection_skipped_json(&c, HV_CASE_SNAKE);
	assert_non_null(text);
	assert_string_equal(text, "[{\"path\":\"big.bin\",\"reason\":\"too_large\",\"size\":99},"
				  "{\"path\":\"link\",\"reason\":\"symlink\",\"size\":null}]");
	free(text);
	text = hv_collection_deleted_json(&c);
	assert_non_null(text);
	assert_string_equal(text, "[\"gone.txt\"]");
	free(text);
}

static void test_collection_and_snapshot(void **state)
{
	(void)state;
	hv_output_file f = output_file();
	char d1[] = "old";
	hv_deleted_file del[] = {{.path = d1, .path_len = 3}};
	hv_collection c = {.files = &f, .n_files = 1, .deleted = del, .n_deleted = 1};
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_collection(j, 0, &c, false);
	assert_json(j, "{\"run_id\":null,\"output_files\":[{\"name\":\"plot.png\","
		       "\"path\":\"figs/plot.png\",\"mime_type\":\"image/png\",\"size\":3,"
		       "\"sha256\":\"" SHA_A "\",\"content\":null}],\"skipped\":[]}");
	c.compared = true;
	c.n_files = 0;
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_collection(j, 7, &c, true);
	assert_json(j, "{\"runId\":7,\"outputFiles\":[],\"skipped\":[],\"deleted\":[\"old\"]}");

	j = new_buffer(HV_CASE_SNAKE);
	hv_record_snapshot(j, 3, "/abs/dir", 12);
	assert_json(j, "{\"snapshot_id\":3,\"root\":\"/abs/dir\",\"entries\":12}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_snapshot(j, 3, "/abs/dir", 12);
	assert_json(j, "{\"snapshotId\":3,\"root\":\"/abs/dir\",\"entries\":12}");
}

static void test_stream_chunk(void **state)
{
	(void)state;
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_stream_chunk(j, HV_STREAM_STDOUT, "hi\n", 3);
	assert_json(j, "{\"type\":\"stream_chunk\",\"stream_type\":\"stdout\",\"data\":\"hi\\n\"}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_stream_chunk(j, HV_STREAM_STDERR, "\x80", 1);
	assert_json(j, "{\"type\":\"streamChunk\",\"streamType\":\"stderr\",\"data\":\"\\udc80\"}");
}

static hv_run_end run_end(void)
{
	hv_run_end r = {
		.has_exit_code = true, .exit_code = 3, .duration_ms = 15,
		.stdout_data = "out", .stdout_len = 3, .stderr_data = NULL, .stderr_len = 0,
		.stderr_truncated = true,
	};
	return r;
}

static void test_result(void **state)
{
	(void)state;
	hv_run_end r = run_end();
	hv_output_file f = output_file();
	char p1[] = "l";
	hv_skipped_file sk[] = {{.path = p1, .path_len = 1, .reason = "symlink"}};
	hv_collection c = {.files = &f, .n_files = 1, .skipped = sk, .n_skipped = 1,
			   .compared = true};
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_result(j, &r, &c, 5, false);
	assert_json(j, "{\"type\":\"execution_result\",\"exit_code\":3,\"stdout\":\"out\","
		       "\"stderr\":\"\",\"output_files\":[{\"name\":\"plot.png\","
		       "\"path\":\"figs/plot.png\",\"mime_type\":\"image/png\",\"size\":3,"
		       "\"sha256\":\"" SHA_A "\",\"content\":null}],"
		       "\"skipped\":[{\"path\":\"l\",\"reason\":\"symlink\",\"size\":null}],"
		       "\"deleted\":[],\"run_id\":5,\"timed_out\":false,\"duration_ms\":15,"
		       "\"stdout_truncated\":false,\"stderr_truncated\":true}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_result(j, &r, &c, 0, false);
	assert_json(j, "{\"type\":\"executionResult\",\"exitCode\":3,\"stdout\":\"out\","
		       "\"stderr\":\"\",\"outputFiles\":[{\"name\":\"plot.png\","
		       "\"path\":\"figs/plot.png\",\"mimeType\":\"image/png\",\"size\":3,"
		       "\"sha256\":\"" SHA_A "\",\"content\":null}],"
		       "\"skipped\":[{\"path\":\"l\",\"reason\":\"symlink\"}],"
		       "\"deleted\":[],\"runId\":null,\"timedOut\":false,\"durationMs\":15,"
		       "\"stdoutTruncated\":false,\"stderrTruncated\":true}");
	/* Nothing collected: empty lists, not missing ones. No exit code, unknown duration. */
	r.has_exit_code = false;
	r.duration_ms = -1;
	r.timed_out = true;
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_result(j, &r, NULL, 0, true);
	assert_json(j, "{\"type\":\"execution_result\",\"exit_code\":null,\"stdout\":\"out\","
		       "\"stderr\":\"\",\"output_files\":[],\"skipped\":[],\"deleted\":[],"
		       "\"run_id\":null,\"timed_out\":true,\"duration_ms\":null,"
		       "\"stdout_truncated\":false,\"stderr_truncated\":true}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_result(j, &r, NULL, 0, true);
	assert_json(j, "{\"type\":\"executionResult\",\"stdout\":\"out\",\"stderr\":\"\","
		       "\"outputFiles\":[],\"skipped\":[],\"deleted\":[],\"runId\":null,\"timedOut\":true,"
		       "\"stdoutTruncated\":false,\"stderrTruncated\":true}");
}

/* The two-step form, as the history writes it: lists from their recorded JSON text, the end
 * reason of a run that did not end as its command did, files streamed one by one. */
static void test_result_streamed(void **state)
{
	(void)state;
	hv_run_end r = run_end();
	r.skipped_json = "[{\"path\":\"l\",\"reason\":\"symlink\",\"size\":null}]";
	r.deleted_json = "[\"old\"]";
	r.end_reason = HV_END_NOT_RECORDED;
	hv_output_file f = output_file();
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_result_begin(j, &r);
	hv_record_output_file(j, &f, true);
	hv_record_output_file(j, &f, false);
	hv_record_result_end(j, &r, NULL, 9);
	assert_json(j, "{\"type\":\"execution_result\",\"exit_code\":3,\"stdout\":\"out\","
		       "\"stderr\":\"\",\"output_files\":[{\"name\":\"plot.png\","
		       "\"path\":\"figs/plot.png\",\"mime_type\":\"image/png\",\"size\":3,"
		       "\"sha256\":\"" SHA_A "\",\"content\":\"aGkh\"},{\"name\":\"plot.png\","
		       "\"path\":\"figs/plot.png\",\"mime_type\":\"image/png\",\"size\":3,"
		       "\"sha256\":\"" SHA_A "\",\"content\":null}],"
		       "\"skipped\":[{\"path\":\"l\",\"reason\":\"symlink\",\"size\":null}],"
		       "\"deleted\":[\"old\"],\"end_reason\":\"not_recorded\",\"run_id\":9,"
		       "\"timed_out\":false,\"duration_ms\":15,\"stdout_truncated\":false,"
		       "\"stderr_truncated\":true}");
	/* No recorded lists: skipped is empty, deleted unknown (left out). */
	r.skipped_json = NULL;
	r.deleted_json = NULL;
	r.end_reason = NULL;
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_result_begin(j, &r);
	hv_record_result_end(j, &r, NULL, 9);
	assert_json(j, "{\"type\":\"executionResult\",\"exitCode\":3,\"stdout\":\"out\","
		       "\"stderr\":\"\",\"outputFiles\":[],\"skipped\":[],\"runId\":9,"
		       "\"timedOut\":false,\"durationMs\":15,\"stdoutTruncated\":false,"
		       "\"stderrTruncated\":true}");
}

static void test_history_rows(void **state)
{
	(void)state;
	hv_run_row r = {
		.run_id = 4, .label = "nightly", .label_len = 7, .host = "box",
		.command_json = "[\"sh\",\"-c\",\"x\"]",
		.dir = "/w", .dir_len = 2, .started_at_ns = MTIME_NS, .ended = true,
		.ended_at_ns = MTIME_NS + 1000000000, .has_exit_code = true, .exit_code = 0,
		.artifacts = 2,
	};
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	hv_record_run_row(j, &r);
	assert_json(j, "{\"run_id\":4,\"label\":\"nightly\",\"host\":\"box\","
		       "\"command\":[\"sh\",\"-c\",\"x\"],"
		       "\"dir\":\"/w\",\"started_at\":\"2026-11-30T03:29:07.123456789Z\","
		       "\"ended_at\":\"2026-11-30T03:29:08.123456789Z\",\"end_reason\":null,"
		       "\"exit_code\":0,\"timed_out\":false,\"artifacts\":2}");
	/* A collect that is still running (or was killed): no label, command, end or exit code. */
	hv_run_row c = {.run_id = 5, .dir = "/w", .dir_len = 2, .started_at_ns = MTIME_NS,
			.end_reason = HV_END_INTERRUPTED};
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_run_row(j, &c);
	assert_json(j, "{\"run_id\":5,\"label\":null,\"host\":null,\"command\":null,\"dir\":\"/w\","
		       "\"started_at\":\"2026-11-30T03:29:07.123456789Z\",\"ended_at\":null,"
		       "\"end_reason\":\"interrupted\",\"exit_code\":null,\"timed_out\":false,"
		       "\"artifacts\":0}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_run_row(j, &c);
	assert_json(j, "{\"runId\":5,\"dir\":\"/w\",\"startedAt\":\"2026-11-30T03:29:07.123456789Z\","
		       "\"endReason\":\"interrupted\",\"timedOut\":false,\"artifacts\":0}");

	hv_artifact_row a = {
		.artifact_id = 9, .run_id = 4, .path = "figs/p.png", .path_len = 10, .name = "p.png",
		.name_len = 5, .mime_type = "image/png", .size = 3, .sha256 = SHA_A,
		.recorded_at_ns = MTIME_NS,
	};
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_artifact_row(j, &a);
	assert_json(j, "{\"artifact_id\":9,\"run_id\":4,\"path\":\"figs/p.png\",\"name\":\"p.png\","
		       "\"mime_type\":\"image/png\",\"size\":3,\"sha256\":\"" SHA_A "\","
		       "\"recorded_at\":\"2026-11-30T03:29:07.123456789Z\"}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_artifact_row(j, &a);
	assert_json(j, "{\"artifactId\":9,\"runId\":4,\"path\":\"figs/p.png\",\"name\":\"p.png\","
		       "\"mimeType\":\"image/png\",\"size\":3,\"sha256\":\"" SHA_A "\","
		       "\"recordedAt\":\"2026-11-30T03:29:07.123456789Z\"}");

	hv_prune_result pr = {.runs = 1, .artifacts = 2, .contents = 3, .content_bytes = 4,
			      .snapshots = 5};
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_prune(j, &pr);
	assert_json(j, "{\"runs\":1,\"artifacts\":2,\"contents\":3,\"content_bytes\":4,"
		       "\"snapshots\":5}");
	j = new_buffer(HV_CASE_SNAKE);
	hv_record_push(j, 12);
	assert_json(j, "{\"pushed\":12}");
	j = new_buffer(HV_CASE_CAMEL);
	hv_record_prune(j, &pr);
	assert_json(j, "{\"runs\":1,\"artifacts\":2,\"contents\":3,\"contentBytes\":4,"
		       "\"snapshots\":5}");
}

/* A recorded run prints as the ExecutionResult `run` printed: the same writer over the
 * hv_run_end the history kept, the output files read back one at a time. */
static void test_history_result(void **state)
{
	(void)state;
	char *dir = tu_tmpdir();
	char *db = tu_path(dir, "h.db");
	hv_store *st = NULL;
	assert_int_equal(hv_store_open(&st, db, 0), HV_OK);
	hv_run_start start = {.command_json = "[\"true\"]", .dir = "/w"};
	int64_t id = 0;
	assert_int_equal(hv_store_run_begin(st, &start, &id), HV_OK);
	char sha[65];
	memset(sha, 'a', 64);
	sha[64] = '\0';
	hv_artifact_in art = {.path = "figs/plot.png", .path_len = 13, .name = "plot.png",
			      .name_len = 8, .mime_type = "image/png", .size = 3, .sha256 = sha,
			      .change = "created"};
	hv_run_end end = run_end();
	end.skipped_json = "[{\"path\":\"l\",\"reason\":\"symlink\",\"size\":null}]";
	end.deleted_json = "[\"old\"]";
	assert_int_equal(hv_store_run_finish(st, id, &end, &art, 1), HV_OK);

	/* What run would have printed from the same end and files. */
	hv_output_file f = output_file();
	f.change = "created";
	f.content = NULL;
	char p1[] = "l", d1[] = "old";
	hv_skipped_file sk[] = {{.path = p1, .path_len = 1, .reason = "symlink"}};
	hv_deleted_file del[] = {{.path = d1, .path_len = 3}};
	hv_collection c = {.files = &f, .n_files = 1, .skipped = sk, .n_skipped = 1,
			   .deleted = del, .n_deleted = 1, .compared = true};
	for (int kase = 0; kase < 2; kase++) {
		hv_json *want = new_buffer((hv_case)kase);
		hv_record_result(want, &end, &c, id, false);
		char *text = hv_json_buffer_strdup(want);
		hv_json_free(want);
		hv_json *j = new_buffer((hv_case)kase);
		assert_int_equal(hv_record_history_result(j, st, id, false), HV_OK);
		assert_json(j, text);
		free(text);
	}
	hv_json *j = new_buffer(HV_CASE_SNAKE);
	assert_int_equal(hv_record_history_result(j, st, id + 1, false), HV_ENOTFOUND);
	assert_string_equal(hv_error_last(), "no run 2");
	assert_int_equal(hv_record_history_result(j, st, 0, false), HV_ENOTFOUND);
	hv_json_free(j);
	assert_int_equal(hv_store_close(st), HV_OK);
	free(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fileinfo),
		cmocka_unit_test(test_fileinfo_stat_failed),
		cmocka_unit_test(test_fileinfo_bytes),
		cmocka_unit_test(test_mime),
		cmocka_unit_test(test_output_file),
		cmocka_unit_test(test_skipped_deleted),
		cmocka_unit_test(test_collection_and_snapshot),
		cmocka_unit_test(test_stream_chunk),
		cmocka_unit_test(test_result),
		cmocka_unit_test(test_result_streamed),
		cmocka_unit_test(test_history_rows),
		cmocka_unit_test_teardown(test_history_result, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
