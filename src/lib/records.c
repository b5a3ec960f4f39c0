/* The records of the SPEC as JSON: every key harvest prints is written in this file. */
#include "harvest/records.h"
#include "harvest/parse.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hv_record_fileinfo(hv_json *j, const hv_entry *e, int flags)
{
	if (!j || !e) {
		hv__json_fail(j);
		return;
	}
	/* The keys of every walk record: plain literals, written without a scan. */
	hv_json_object_begin(j);
	HV_JSON_KEY(j, "name");
	hv_json_string(j, e->name, e->name_len);
	if (flags & HV_FILEINFO_PATH) {
		HV_JSON_KEY(j, "path");
		hv_json_string(j, e->path, e->path_len);
	}
	/* Never guessed: a dangling link or an entry that vanished has neither (SPEC 1). */
	if (e->have_stat) {
		HV_JSON_KEY(j, "is_dir");
		hv_json_bool(j, e->is_dir);
		HV_JSON_KEY(j, "size");
		hv_json_uint(j, e->size);
	} else {
		hv_json_key_null(j, "is_dir");
		hv_json_key_null(j, "size");
	}
	if (flags & HV_FILEINFO_LONG) {
		hv_json_key(j, "type");
		hv_json_cstring(j, hv_ftype_name(e->type));
		if (e->have_lstat) {
			char buf[64];
			int n = snprintf(buf, sizeof(buf), "%04o", (unsigned)(e->lst.mode & 07777));
			hv_json_key(j, "mode");
			hv_json_string(j, buf, n > 0 ? (size_t)n : 0);
			hv_json_key(j, "mtime");
			hv_json_string(j, buf, hv_format_mtime(&e->lst, buf, sizeof(buf)));
		} else {
			hv_json_key_null(j, "mode");
			hv_json_key_null(j, "mtime");
		}
		if (e->type == HV_FT_SYMLINK) {
			if (e->target) {
				hv_json_key(j, "target");
				hv_json_string(j, e->target, e->target_len);
			} else {
				hv_json_key_null(j, "target");
			}
		}
	}
	hv_json_object_end(j);
}

void hv_record_mime(hv_json *j, const char *path, size_t path_len, const char *mime_type)
{
	if (!j || (!path && path_len)) {
		hv__json_fail(j);
		return;
	}
	hv_json_object_begin(j);
	hv_json_key(j, "path");
	hv_json_string(j, path, path_len);
	hv_json_key(j, "mime_type");
	hv_json_cstring(j, mime_type);
	hv_json_object_end(j);
}

/* The pieces in which a spooled content is read and encoded: a multiple of 3 (whole base64
 * groups), so that a 32 MiB file costs 768 KiB of memory, not 32 MiB. */
#define SPOOL_PIECE (3u << 18)

/* An OutputFile of c (NULL: f's content is in memory or none), its content read from c's
 * spool when it is there. HV_OK, or the read's failure (j then holds an unfinished record). */
static hv_status output_file(hv_json *j, const hv_collection *c, const hv_output_file *f,
			     bool with_content)
{
	hv_status rc = HV_OK;
	hv_json_object_begin(j);
	hv_json_key(j, "name");
	hv_json_string(j, f->name, f->name_len);
	hv_json_key(j, "path");
	hv_json_string(j, f->path, f->path_len);
	hv_json_key(j, "mime_type");
	hv_json_cstring(j, f->mime_type);
	hv_json_key(j, "size");
	hv_json_uint(j, f->size);
	/* An OutputFile has the same members in either case: sha256 and content are null, not
	 * left out, when they are not there (SPEC 1; only FileInfo leaves members out). */
	hv_json_key(j, "sha256");
	if (f->sha256[0])
		hv_json_cstring(j, f->sha256);
	else
		hv_json_null(j);
	if (with_content && f->content) {
		hv_json_key(j, "content");
		hv_json_base64(j, f->content, f->content_len);
	} else if (with_content && c && f->spooled) {
		size_t cap = f->content_len < SPOOL_PIECE ? f->content_len : SPOOL_PIECE;
		unsigned char *piece = malloc(cap ? cap : 1);
		if (!piece)
			return hv_error_set(HV_ENOMEM, "out of memory");
		hv_json_key(j, "content");
		hv_json_base64_begin(j);
		for (size_t off = 0; off < f->content_len;) {
			size_t n = f->content_len - off < cap ? f->content_len - off : cap;
			rc = hv_collection_content_read(c, f, off, piece, n);
			if (rc != HV_OK)
				break;
			hv_json_base64_part(j, piece, n);
			off += n;
		}
		free(piece);
		if (rc != HV_OK)
			return rc;
		hv_json_base64_end(j);
	} else {
		hv_json_key(j, "content");
		hv_json_null(j);
	}
	if (f->change) {
		hv_json_key(j, "change");
		hv_json_enum(j, f->change);
	}
	hv_json_object_end(j);
	return HV_OK;
}

hv_status hv_record_output_file(hv_json *j, const hv_output_file *f, bool with_content)
{
	HV_NEED(j && f);
	/* A spooled content is in its collection's temporary file, which f alone does not reach:
	 * refused before anything is written, rather than written as "content": null (a file
	 * that looks as if it had none). */
	if (with_content && f->spooled && !f->content)
		return hv_error_set(HV_EUSAGE,
				    "%.*s: the content is in the collection's temporary file"
				    " (spool_content): write it with hv_record_collection_file",
				    (int)f->path_len, f->path);
	return output_file(j, NULL, f, with_content);
}

hv_status hv_record_collection_file(hv_json *j, const hv_collection *c, size_t i,
				    bool with_content)
{
	HV_NEED(j && c && i < c->n_files);
	return output_file(j, c, &c->files[i], with_content);
}

void hv_record_skipped(hv_json *j, const hv_skipped_file *skipped, size_t n)
{
	if (!j || (!skipped && n)) {
		hv__json_fail(j);
		return;
	}
	hv_json_array_begin(j);
	for (size_t i = 0; i < n; i++) {
		const hv_skipped_file *s = &skipped[i];
		hv_json_object_begin(j);
		hv_json_key(j, "path");
		hv_json_string(j, s->path, s->path_len);
		hv_json_key(j, "reason");
		hv_json_cstring(j, s->reason);
		if (s->has_size) {
			hv_json_key(j, "size");
			hv_json_uint(j, s->size);
		} else {
			hv_json_key_null(j, "size");
		}
		if (s->error) {
			hv_json_key(j, "error");
			hv_json_string(j, s->error, strlen(s->error));
		}
		hv_json_object_end(j);
	}
	hv_json_array_end(j);
}

void hv_record_deleted(hv_json *j, const hv_deleted_file *deleted, size_t n)
{
	if (!j || (!deleted && n)) {
		hv__json_fail(j);
		return;
	}
	hv_json_array_begin(j);
	for (size_t i = 0; i < n; i++)
		hv_json_string(j, deleted[i].path, deleted[i].path_len);
	hv_json_array_end(j);
}

hv_status hv_record_collection_members(hv_json *j, const hv_collection *c, bool with_content)
{
	HV_NEED(j && c);
	hv_json_key(j, "output_files");
	hv_json_array_begin(j);
	for (size_t i = 0; i < c->n_files; i++) {
		hv_status rc = output_file(j, c, &c->files[i], with_content);
		if (rc != HV_OK)
			return rc;
	}
	hv_json_array_end(j);
	hv_json_key(j, "skipped");
	hv_record_skipped(j, c->skipped, c->n_skipped);
	if (c->compared) {
		hv_json_key(j, "deleted");
		hv_record_deleted(j, c->deleted, c->n_deleted);
	}
	return HV_OK;
}

static void id_member(hv_json *j, const char *key, int64_t id)
{
	hv_json_key(j, key);
	if (id > 0)
		hv_json_int(j, id);
	else
		hv_json_null(j);
}

hv_status hv_record_collection(hv_json *j, int64_t run_id, const hv_collection *c,
			       bool with_content)
{
	HV_NEED(j && c);
	hv_json_object_begin(j);
	id_member(j, "run_id", run_id);
	hv_status rc = hv_record_collection_members(j, c, with_content);
	if (rc == HV_OK)
		hv_json_object_end(j);
	return rc;
}

void hv_record_snapshot(hv_json *j, int64_t snapshot_id, const char *root, uint64_t entries)
{
	hv_json_object_begin(j);
	hv_json_key(j, "snapshot_id");
	hv_json_int(j, snapshot_id);
	hv_json_key(j, "root");
	hv_json_cstring(j, root);
	hv_json_key(j, "entries");
	hv_json_uint(j, entries);
	hv_json_object_end(j);
}

void hv_record_stream_chunk(hv_json *j, hv_stream which, const char *data, size_t len)
{
	if (!j || (!data && len)) {
		hv__json_fail(j);
		return;
	}
	hv_json_object_begin(j);
	hv_json_key(j, "type");
	hv_json_enum(j, "stream_chunk");
	hv_json_key(j, "stream_type");
	hv_json_cstring(j, hv_stream_name(which));
	hv_json_key(j, "data");
	hv_json_string(j, data, len);
	hv_json_object_end(j);
}

/* A skipped list the history kept as the JSON text hv_record_skipped wrote in snake case.
 * Its keys are single words, the same in both cases; but camel case leaves an unknown size
 * out rather than writing null, so `,"size":null` members are dropped. That text can only be
 * a member: inside a JSON string a quote is always escaped, and this quote follows a comma. */
static void raw_skipped(hv_json *j, const char *text)
{
	static const char null_size[] = ",\"size\":null";
	size_t len = strlen(text);
	if (hv_json_case(j) != HV_CASE_CAMEL || !strstr(text, null_size)) {
		hv_json_raw(j, text, len);
		return;
	}
	hv_buf b = {0};
	for (const char *p = text; *p;) {
		const char *hit = strstr(p, null_size);
		size_t n = hit ? (size_t)(hit - p) : strlen(p);
		hv_buf_append(&b, p, n);
		p += n;
		if (hit)
			p += sizeof(null_size) - 1;
	}
	if (b.failed || !b.data)
		hv_json_raw(j, text, len); /* out of memory: as recorded, still valid JSON */
	else
		hv_json_raw(j, b.data, b.len);
	hv_buf_free(&b);
}

void hv_record_result_begin(hv_json *j, const hv_run_end *r)
{
	if (!j || !r) {
		hv__json_fail(j);
		return;
	}
	hv_json_object_begin(j);
	hv_json_key(j, "type");
	hv_json_enum(j, "execution_result");
	if (r->has_exit_code) {
		hv_json_key(j, "exit_code");
		hv_json_int(j, r->exit_code);
	} else {
		hv_json_key_null(j, "exit_code");
	}
	hv_json_key(j, "stdout");
	hv_json_string(j, r->stdout_data ? r->stdout_data : "", r->stdout_len);
	hv_json_key(j, "stderr");
	hv_json_string(j, r->stderr_data ? r->stderr_data : "", r->stderr_len);
	hv_json_key(j, "output_files");
	hv_json_array_begin(j);
}

void hv_record_result_end(hv_json *j, const hv_run_end *r, const hv_collection *c, int64_t run_id)
{
	if (!j || !r) {
		hv__json_fail(j);
		return;
	}
	hv_json_array_end(j);
	hv_json_key(j, "skipped");
	if (c) {
		hv_record_skipped(j, c->skipped, c->n_skipped);
	} else {
		raw_skipped(j, r->skipped_json ? r->skipped_json : "[]");
	}
	if (c && c->compared) {
		hv_json_key(j, "deleted");
		hv_record_deleted(j, c->deleted, c->n_deleted);
	} else if (!c && r->deleted_json) {
		hv_json_key(j, "deleted");
		hv_json_raw(j, r->deleted_json, strlen(r->deleted_json));
	}
	/* Only when the run did not end as its command did (interrupted, not recorded). */
	if (r->end_reason) {
		hv_json_key(j, "end_reason");
		hv_json_cstring(j, r->end_reason);
	}
	id_member(j, "run_id", run_id);
	hv_json_key(j, "timed_out");
	hv_json_bool(j, r->timed_out);
	if (r->duration_ms >= 0) {
		hv_json_key(j, "duration_ms");
		hv_json_int(j, r->duration_ms);
	} else {
		hv_json_key_null(j, "duration_ms");
	}
	hv_json_key(j, "stdout_truncated");
	hv_json_bool(j, r->stdout_truncated);
	hv_json_key(j, "stderr_truncated");
	hv_json_bool(j, r->stderr_truncated);
	hv_json_object_end(j);
}

hv_status hv_record_result(hv_json *j, const hv_run_end *r, const hv_collection *c,
			   int64_t run_id, bool with_content)
{
	HV_NEED(j && r);
	hv_record_result_begin(j, r);
	if (c) {
		for (size_t i = 0; i < c->n_files; i++) {
			hv_status rc = output_file(j, c, &c->files[i], with_content);
			if (rc != HV_OK)
				return rc;
		}
		hv_record_result_end(j, r, c, run_id);
		return HV_OK;
	}
	/* Nothing was collected (collecting failed): empty lists, not missing ones, so a reader
	 * finds the shape it always finds. */
	hv_run_end none = *r;
	none.skipped_json = "[]";
	none.deleted_json = "[]";
	hv_record_result_end(j, &none, NULL, run_id);
	return HV_OK;
}

char *hv_collection_skipped_json(const hv_collection *c, int kase)
{
	if (!c)
		return NULL;
	hv_json *j;
	if (hv_json_new_buffer(&j, (hv_case)kase) != HV_OK)
		return NULL;
	hv_record_skipped(j, c->skipped, c->n_skipped);
	char *out = hv_json_buffer_strdup(j);
	hv_json_free(j);
	return out;
}

char *hv_collection_deleted_json(const hv_collection *c)
{
	if (!c)
		return NULL;
	hv_json *j;
	if (hv_json_new_buffer(&j, HV_CASE_SNAKE) != HV_OK)
		return NULL;
	hv_record_deleted(j, c->deleted, c->n_deleted);
	char *out = hv_json_buffer_strdup(j);
	hv_json_free(j);
	return out;
}

static void time_member(hv_json *j, const char *key, bool has, int64_t ns)
{
	if (!has) {
		hv_json_key_null(j, key);
		return;
	}
	char buf[64];
	hv_json_key(j, key);
	hv_json_string(j, buf, hv_format_time(ns, buf, sizeof(buf)));
}

void hv_record_run_row(hv_json *j, const hv_run_row *r)
{
	if (!j || !r) {
		hv__json_fail(j);
		return;
	}
	hv_json_object_begin(j);
	hv_json_key(j, "run_id");
	hv_json_int(j, r->run_id);
	if (r->label) {
		hv_json_key(j, "label");
		hv_json_string(j, r->label, r->label_len);
	} else {
		hv_json_key_null(j, "label");
	}
	if (r->host) {
		hv_json_key(j, "host");
		hv_json_cstring(j, r->host);
	} else {
		hv_json_key_null(j, "host");
	}
	if (r->command_json) {
		hv_json_key(j, "command");
		hv_json_raw(j, r->command_json, strlen(r->command_json));
	} else {
		hv_json_key_null(j, "command");
	}
	hv_json_key(j, "dir");
	hv_json_string(j, r->dir, r->dir_len);
	time_member(j, "started_at", true, r->started_at_ns);
	time_member(j, "ended_at", r->ended, r->ended_at_ns);
	if (r->end_reason) {
		hv_json_key(j, "end_reason");
		hv_json_cstring(j, r->end_reason);
	} else {
		hv_json_key_null(j, "end_reason");
	}
	if (r->has_exit_code) {
		hv_json_key(j, "exit_code");
		hv_json_int(j, r->exit_code);
	} else {
		hv_json_key_null(j, "exit_code");
	}
	hv_json_key(j, "timed_out");
	hv_json_bool(j, r->timed_out);
	hv_json_key(j, "artifacts");
	hv_json_uint(j, r->artifacts);
	hv_json_object_end(j);
}

/* What a stored artifact is: its MIME type, size and digest (history rows, manifests). */
static void artifact_type_fields(hv_json *j, const hv_artifact_row *a)
{
	hv_json_key(j, "mime_type");
	hv_json_cstring(j, a->mime_type);
	hv_json_key(j, "size");
	hv_json_uint(j, a->size);
	hv_json_key(j, "sha256");
	hv_json_cstring(j, a->sha256);
}

void hv_record_artifact_row(hv_json *j, const hv_artifact_row *a)
{
	if (!j || !a) {
		hv__json_fail(j);
		return;
	}
	hv_json_object_begin(j);
	hv_json_key(j, "artifact_id");
	hv_json_int(j, a->artifact_id);
	hv_json_key(j, "run_id");
	hv_json_int(j, a->run_id);
	hv_json_key(j, "path");
	hv_json_string(j, a->path, a->path_len);
	hv_json_key(j, "name");
	hv_json_string(j, a->name, a->name_len);
	artifact_type_fields(j, a);
	time_member(j, "recorded_at", true, a->recorded_at_ns);
	hv_json_object_end(j);
}

void hv_record_manifest_artifact(hv_json *j, const hv_artifact_row *a, const char *reason)
{
	if (!j || !a) {
		hv__json_fail(j);
		return;
	}
	hv_json_object_begin(j);
	hv_json_key(j, "path");
	hv_json_string(j, a->path, a->path_len);
	artifact_type_fields(j, a);
	hv_json_key(j, "archived");
	hv_json_bool(j, reason == NULL);
	hv_json_key(j, "reason");
	if (reason)
		hv_json_cstring(j, reason);
	else
		hv_json_null(j);
	hv_json_object_end(j);
}

void hv_record_prune(hv_json *j, const hv_prune_result *r)
{
	if (!j || !r) {
		hv__json_fail(j);
		return;
	}
	hv_json_object_begin(j);
	hv_json_key(j, "runs");
	hv_json_uint(j, r->runs);
	hv_json_key(j, "artifacts");
	hv_json_uint(j, r->artifacts);
	hv_json_key(j, "contents");
	hv_json_uint(j, r->contents);
	hv_json_key(j, "content_bytes");
	hv_json_uint(j, r->content_bytes);
	hv_json_key(j, "snapshots");
	hv_json_uint(j, r->snapshots);
	hv_json_object_end(j);
}

void hv_record_push(hv_json *j, uint64_t pushed)
{
	hv_json_object_begin(j);
	hv_json_key(j, "pushed");
	hv_json_uint(j, pushed);
	hv_json_object_end(j);
}

void hv_run_row_end(const hv_run_row *r, hv_run_end *out)
{
	if (!r || !out)
		return; /* (nothing to read, or nowhere to write) */
	*out = (hv_run_end){
		.ended_at_ns = r->ended_at_ns,
		.has_exit_code = r->has_exit_code,
		.exit_code = r->exit_code,
		.timed_out = r->timed_out,
		.duration_ms = r->duration_ms,
		.stdout_data = r->stdout_data,
		.stdout_len = r->stdout_len,
		.stdout_truncated = r->stdout_truncated,
		.stderr_data = r->stderr_data,
		.stderr_len = r->stderr_len,
		.stderr_truncated = r->stderr_truncated,
		.skipped_json = r->skipped_json,
		.deleted_json = r->deleted_json,
		/* Only when the run did not end as its command did: otherwise the result is
		 * exactly what `run` printed. */
		.end_reason = r->end_reason,
	};
}

/* An artifact row as the OutputFile it was: a view, nothing copied but the digest. */
static void output_file_of_row(const hv_artifact_row *a, hv_output_file *f)
{
	*f = (hv_output_file){
		/* The writer only reads them: hv_output_file's members are not const because a
		 * collection owns its strings. */
		.path = (char *)a->path,
		.path_len = a->path_len,
		.name = a->name,
		.name_len = a->name_len,
		.mime_type = (char *)a->mime_type,
		.size = a->size,
		.content = (unsigned char *)a->content,
		.content_len = a->content_len,
		.change = a->change,
	};
	if (a->sha256)
		snprintf(f->sha256, sizeof(f->sha256), "%s", a->sha256);
}

hv_status hv_record_history_result(hv_json *j, hv_store *st, int64_t run_id, bool with_content)
{
	HV_NEED(j && st);
	/* Run ids start at 1, and a run_id of 0 in a filter means "any run". */
	if (run_id < 1)
		return hv_error_set(HV_ENOTFOUND, "no run %lld", (long long)run_id);
	hv_run_filter f = {.run_id = run_id, .with_output = true};
	hv_run_iter *it;
	hv_status rc = hv_store_runs(st, &f, &it);
	if (rc != HV_OK)
		return rc;
	const hv_run_row *r;
	rc = hv_run_iter_next(it, &r);
	if (rc != HV_OK) {
		hv_run_iter_free(it);
		if (rc == HV_DONE)
			return hv_error_set(HV_ENOTFOUND, "no run %lld", (long long)run_id);
		return rc;
	}
	hv_run_end end = {0};
	hv_run_row_end(r, &end);
	hv_record_result_begin(j, &end);
	hv_artifact_filter af = {.run_id = run_id, .with_content = with_content};
	hv_artifact_iter *ai;
	rc = hv_store_artifacts(st, &af, &ai);
	if (rc == HV_OK) {
		const hv_artifact_row *a;
		while ((rc = hv_artifact_iter_next(ai, &a)) == HV_OK) {
			hv_output_file of;
			output_file_of_row(a, &of);
			rc = output_file(j, NULL, &of, with_content); /* (in memory: cannot fail) */
			if (rc != HV_OK)
				break;
		}
		if (rc == HV_DONE)
			rc = HV_OK;
		hv_artifact_iter_free(ai);
	}
	hv_record_result_end(j, &end, NULL, r->run_id);
	hv_run_iter_free(it);
	return rc;
}
