/* The records of the SPEC as JSON: every key harvest prints is written in this file. */
#include "harvest/records.h"
#include "harvest/parse.h"

#include <stdio.h>
#include <string.h>

void hv_record_fileinfo(hv_json *j, const hv_entry *e, int flags)
{
	hv_json_object_begin(j);
	hv_json_key(j, "name");
	hv_json_string(j, e->name, e->name_len);
	if (flags & HV_FILEINFO_PATH) {
		hv_json_key(j, "path");
		hv_json_string(j, e->path, e->path_len);
	}
	/* Never guessed: a dangling link or an entry that vanished has neither (SPEC 1). */
	if (e->have_stat) {
		hv_json_key(j, "is_dir");
		hv_json_bool(j, e->is_dir);
		hv_json_key(j, "size");
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
			hv_json_string(j, buf, hv_format_time(e->lst.mtime_ns, buf, sizeof(buf)));
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
	hv_json_object_begin(j);
	hv_json_key(j, "path");
	hv_json_string(j, path, path_len);
	hv_json_key(j, "mime_type");
	hv_json_cstring(j, mime_type);
	hv_json_object_end(j);
}

void hv_record_output_file(hv_json *j, const hv_output_file *f, bool with_content)
{
	hv_json_object_begin(j);
	hv_json_key(j, "name");
	hv_json_string(j, f->name, f->name_len);
	hv_json_key(j, "path");
	hv_json_string(j, f->path, f->path_len);
	hv_json_key(j, "mime_type");
	hv_json_cstring(j, f->mime_type);
	hv_json_key(j, "size");
	hv_json_uint(j, f->size);
	if (f->sha256[0]) {
		hv_json_key(j, "sha256");
		hv_json_cstring(j, f->sha256);
	} else {
		hv_json_key_null(j, "sha256");
	}
	if (with_content && f->content) {
		hv_json_key(j, "content");
		hv_json_base64(j, f->content, f->content_len);
	} else {
		hv_json_key_null(j, "content");
	}
	if (f->change) {
		hv_json_key(j, "change");
		hv_json_enum(j, f->change);
	}
	hv_json_object_end(j);
}

void hv_record_skipped(hv_json *j, const hv_skipped_file *skipped, size_t n)
{
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
	hv_json_array_begin(j);
	for (size_t i = 0; i < n; i++)
		hv_json_string(j, deleted[i].path, deleted[i].path_len);
	hv_json_array_end(j);
}

void hv_record_collection_members(hv_json *j, const hv_collection *c, bool with_content)
{
	hv_json_key(j, "output_files");
	hv_json_array_begin(j);
	for (size_t i = 0; i < c->n_files; i++)
		hv_record_output_file(j, &c->files[i], with_content);
	hv_json_array_end(j);
	hv_json_key(j, "skipped");
	hv_record_skipped(j, c->skipped, c->n_skipped);
	if (c->compared) {
		hv_json_key(j, "deleted");
		hv_record_deleted(j, c->deleted, c->n_deleted);
	}
}

static void id_member(hv_json *j, const char *key, int64_t id)
{
	hv_json_key(j, key);
	if (id > 0)
		hv_json_int(j, id);
	else
		hv_json_null(j);
}

void hv_record_collection(hv_json *j, int64_t run_id, const hv_collection *c, bool with_content)
{
	hv_json_object_begin(j);
	id_member(j, "run_id", run_id);
	hv_record_collection_members(j, c, with_content);
	hv_json_object_end(j);
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
	hv_json_object_begin(j);
	hv_json_key(j, "type");
	hv_json_enum(j, "stream_chunk");
	hv_json_key(j, "stream_type");
	hv_json_cstring(j, hv_stream_name(which));
	hv_json_key(j, "data");
	hv_json_string(j, data, len);
	hv_json_object_end(j);
}

void hv_record_result_begin(hv_json *j, const hv_run_end *r)
{
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
	hv_json_array_end(j);
	hv_json_key(j, "skipped");
	if (c) {
		hv_record_skipped(j, c->skipped, c->n_skipped);
	} else {
		/* The history keeps the list as the JSON text it was written as. */
		const char *skipped = r->skipped_json ? r->skipped_json : "[]";
		hv_json_raw(j, skipped, strlen(skipped));
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

void hv_record_result(hv_json *j, const hv_run_end *r, const hv_collection *c, int64_t run_id,
		      bool with_content)
{
	hv_record_result_begin(j, r);
	if (c) {
		for (size_t i = 0; i < c->n_files; i++)
			hv_record_output_file(j, &c->files[i], with_content);
		hv_record_result_end(j, r, c, run_id);
		return;
	}
	/* Nothing was collected (collecting failed): empty lists, not missing ones, so a reader
	 * finds the shape it always finds. */
	hv_run_end none = *r;
	none.skipped_json = "[]";
	none.deleted_json = "[]";
	hv_record_result_end(j, &none, NULL, run_id);
}

char *hv_collection_skipped_json(const hv_collection *c, int kase)
{
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
	hv_json *j;
	if (hv_json_new_buffer(&j, HV_CASE_SNAKE) != HV_OK)
		return NULL;
	hv_record_deleted(j, c->deleted, c->n_deleted);
	char *out = hv_json_buffer_strdup(j);
	hv_json_free(j);
	return out;
}
