/* harvest — the records of the SPEC as JSON: one writer per record, over hv_json.
 *
 * Every JSON object harvest prints is written here, so a program that links libharvest writes
 * exactly what the CLI writes: FileInfo (with walk's path and --long's fields), the MIME
 * answer, OutputFile, the skipped and deleted lists, StreamChunk, ExecutionResult, the history's
 * run and artifact rows, the snapshot and prune summaries. Keys are given in snake_case; a
 * writer made with HV_CASE_CAMEL writes them in camelCase, and an unknown value (a failed stat)
 * is `null` in snake case and left out in camel case (hv_json_key_null).
 *
 * Each writer writes one value at the writer's current position (an array element, a member's
 * value, or a top-level value): the caller ends a jsonl line with hv_json_newline(). They do
 * not flush. Errors are the writer's sticky status (hv_json_status()). */
#ifndef HARVEST_RECORDS_H
#define HARVEST_RECORDS_H

#include "collect.h"
#include "json.h"
#include "run.h"
#include "store.h"
#include "types.h"
#include "walk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- FileInfo ------------------------------------------------------------------------------ */

/* Flags of hv_record_fileinfo(). */
enum {
	HV_FILEINFO_PATH = 1 << 0, /* add "path", relative to the walked root (walk) */
	HV_FILEINFO_LONG = 1 << 1  /* add "type", "mode", "mtime" and a symlink's "target" */
};

/* {"name", ["path",] "is_dir", "size" [, "type", "mode", "mtime", "target"]}: is_dir and size
 * are null when stat failed; mode and mtime null when lstat failed; target only for a symlink
 * (null when it could not be read, or the walk did not read links). */
HV_EXTERN void hv_record_fileinfo(hv_json *j, const hv_entry *e, int flags);

/* ---- MIME ------------------------------------------------------------------------------------ */

/* {"path", "mime_type"}: one answer of `harvest mime`. */
HV_EXTERN void hv_record_mime(hv_json *j, const char *path, size_t path_len, const char *mime_type);

/* ---- Collect ------------------------------------------------------------------------------- */

/* {"name", "path", "mime_type", "size", "sha256", "content" [, "change"]}: one OutputFile.
 * content is base64, or null when with_content is false or the file has none; sha256 null when
 * empty; change only when known (a collect against a snapshot). One file at a time, so a
 * caller can stream a collection's files out as they come. HV_OK; HV_EUSAGE, with nothing
 * written, for a spooled file (hv_collect_opts.spool_content) with with_content: its content is
 * in its collection's temporary file, which hv_record_collection_file reads. */
HV_EXTERN hv_status hv_record_output_file(hv_json *j, const hv_output_file *f,
					  bool with_content);

/* File i of c as hv_record_output_file writes it, its content read from c's temporary file
 * when it was spooled (hv_collect_opts.spool_content), in pieces: never the whole of it in
 * memory. HV_OK, or the failure to read it (j then holds an unfinished record: its output is
 * not to be used). */
HV_EXTERN hv_status hv_record_collection_file(hv_json *j, const hv_collection *c, size_t i,
					      bool with_content);

/* The skipped list: [{"path", "reason", "size" [, "error"]}...] (size null when unknown). */
HV_EXTERN void hv_record_skipped(hv_json *j, const hv_skipped_file *skipped, size_t n);

/* The deleted list: ["path"...]. */
HV_EXTERN void hv_record_deleted(hv_json *j, const hv_deleted_file *deleted, size_t n);

/* The members "output_files", "skipped" and, when c was compared with a snapshot, "deleted", of
 * an object the caller has begun. Spooled contents are read as hv_record_collection_file
 * reads them: HV_OK, or the failure to read one (j then holds an unfinished record). */
HV_EXTERN hv_status hv_record_collection_members(hv_json *j, const hv_collection *c,
						 bool with_content);

/* `harvest collect`'s object: {"run_id" (null when 0), "output_files", "skipped" [, "deleted"]}.
 * Returns as hv_record_collection_members. */
HV_EXTERN hv_status hv_record_collection(hv_json *j, int64_t run_id, const hv_collection *c,
					bool with_content);

/* `harvest snapshot`'s object: {"snapshot_id", "root", "entries"}. */
HV_EXTERN void hv_record_snapshot(hv_json *j, int64_t snapshot_id, const char *root,
				 uint64_t entries);

/* ---- Run ------------------------------------------------------------------------------------ */

/* {"type": "stream_chunk", "stream_type", "data"}: one chunk of a command's output. */
HV_EXTERN void hv_record_stream_chunk(hv_json *j, hv_stream which, const char *data, size_t len);

/* The ExecutionResult, written in two steps so its output files can be streamed between them:
 * hv_record_result_begin opens the object, writes "type", "exit_code" (null without one),
 * "stdout", "stderr" and opens "output_files"; the caller writes each OutputFile with
 * hv_record_output_file; hv_record_result_end closes the array and writes "skipped" and
 * "deleted" (from c when not NULL, "deleted" then only when c was compared; else from
 * r->skipped_json, "[]" when NULL, and r->deleted_json, left out when NULL), "end_reason"
 * (only when r has one), "run_id" (null when 0), "timed_out", "duration_ms" (null when < 0),
 * "stdout_truncated" and "stderr_truncated", and closes the object. */
HV_EXTERN void hv_record_result_begin(hv_json *j, const hv_run_end *r);
HV_EXTERN void hv_record_result_end(hv_json *j, const hv_run_end *r, const hv_collection *c,
				   int64_t run_id);

/* The whole ExecutionResult of a run: r with the output files, skipped and deleted lists of c
 * (NULL: none were collected; the lists are then empty). Returns as
 * hv_record_collection_members. */
HV_EXTERN hv_status hv_record_result(hv_json *j, const hv_run_end *r, const hv_collection *c,
				    int64_t run_id, bool with_content);

/* ---- History ------------------------------------------------------------------------------ */

/* A past run, as `history runs` lists it: {"run_id", "label", "host" (null when recorded before
 * hosts were), "command" (the argv array, null for a collect), "dir", "started_at", "ended_at" (null while running), "end_reason",
 * "exit_code" (null for a collect), "timed_out", "artifacts" (a count)}. */
HV_EXTERN void hv_record_run_row(hv_json *j, const hv_run_row *r);

/* A recorded artifact, as `history artifacts` lists it: {"artifact_id", "run_id", "path",
 * "name", "mime_type", "size", "sha256", "recorded_at"}. */
HV_EXTERN void hv_record_artifact_row(hv_json *j, const hv_artifact_row *a);

/* One artifact of an archive's MANIFEST.json: {"path", "mime_type", "size", "sha256",
 * "archived", "reason"}, reason NULL when the artifact is in the archive, else why it is
 * not ("not_stored", "reserved", "unsafe_path"). */
HV_EXTERN void hv_record_manifest_artifact(hv_json *j, const hv_artifact_row *a,
					   const char *reason);

/* What `history prune` removed: {"runs", "artifacts", "contents", "content_bytes",
 * "snapshots"}. */
HV_EXTERN void hv_record_prune(hv_json *j, const hv_prune_result *r);

/* What `history push` copied: {"pushed": N}, the runs added to the other history. */
HV_EXTERN void hv_record_push(hv_json *j, uint64_t pushed);

/* The ExecutionResult fields the history kept of run r (read with with_output), as the
 * hv_run_end hv_record_result_begin/_end write: the one place a history run becomes an
 * ExecutionResult again. The pointers point into r. */
HV_EXTERN void hv_run_row_end(const hv_run_row *r, hv_run_end *out);

/* The ExecutionResult of history run run_id, exactly as `harvest run` printed it, its output
 * files streamed from the store one at a time (their content only with with_content).
 * HV_ENOTFOUND when there is no such run (run ids start at 1); HV_EDB (or another failure)
 * when reading the store failed, after which what j holds is incomplete: write into a buffer
 * writer and print it only on HV_OK. */
HV_EXTERN hv_status hv_record_history_result(hv_json *j, hv_store *st, int64_t run_id,
					    bool with_content);

#ifdef __cplusplus
}
#endif
#endif
