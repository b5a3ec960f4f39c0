/* Recording a collection in the history, and freeing it. */
#include "harvest/collect.h"
#include "harvest/json.h"
#include "harvest/sys/store.h"
#include "collect_internal.h"
#include "internal.h"

#include <stdlib.h>

static hv_status read_spooled(void *ctx, const hv_artifact_in *a, uint64_t off, void *buf,
			      size_t n)
{
	const hv_collection *c = ctx;
	return hv_collection_content_read(c, &c->files[a->read_key], off, buf, n);
}

hv_status hv_collection_record(hv_store *st, const hv_collection *c, const hv_run_start *start,
			       const hv_run_end *end, int64_t *run_id)
{
	HV_NEED(st && c && run_id);
	int rc = HV_OK;
	if (*run_id <= 0) {
		hv_run_start s = {0};
		if (start)
			s = *start;
		if (!s.dir)
			s.dir = c->root;
		rc = hv_store_run_begin(st, &s, run_id);
		if (rc != HV_OK)
			return rc;
	}
	hv_artifact_in *arts = calloc(c->n_files ? c->n_files : 1, sizeof(*arts));
	char *skipped = hv_collection_skipped_json(c, HV_CASE_SNAKE);
	char *deleted = c->compared ? hv_collection_deleted_json(c) : NULL;
	if (!arts || !skipped || (c->compared && !deleted)) {
		free(arts);
		free(skipped);
		free(deleted);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	size_t n = 0;
	for (size_t i = 0; i < c->n_files; i++) {
		const hv_output_file *f = &c->files[i];
		hv_artifact_in *a = &arts[n++];
		a->path = f->path;
		a->path_len = f->path_len;
		a->name = f->name;
		a->name_len = f->name_len;
		a->mime_type = f->mime_type;
		a->size = f->size;
		a->sha256 = f->sha256;
		a->change = f->change;
		/* Bytes past what a history can hold in one value are not stored (the artifact
		 * is, its content not: hv_collection_unstored says which). */
		if (f->content_len > HV_STORE_CONTENT_MAX)
			continue;
		a->content = f->content;
		a->content_len = f->content_len;
		if (f->spooled) {
			/* Read back one at a time while the store records them. */
			a->read_content = read_spooled;
			a->read_ctx = (void *)c;
			a->read_key = i;
		}
	}
	hv_run_end e = {0};
	if (end)
		e = *end;
	else
		e.duration_ms = -1;
	if (!e.skipped_json)
		e.skipped_json = skipped;
	if (!e.deleted_json)
		e.deleted_json = deleted;
	rc = hv_store_run_finish(st, *run_id, &e, arts, n);
	free(arts);
	free(skipped);
	free(deleted);
	return rc;
}

bool hv_collection_unstored(const hv_collection *c, size_t i)
{
	return c && i < c->n_files && c->files[i].content_len > HV_STORE_CONTENT_MAX;
}

void hv_collection_free(hv_collection *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_files; i++) {
		free(c->files[i].path);
		free(c->files[i].mime_type);
		free(c->files[i].content);
	}
	for (size_t i = 0; i < c->n_skipped; i++) {
		free(c->skipped[i].path);
		free(c->skipped[i].error);
	}
	for (size_t i = 0; i < c->n_deleted; i++)
		free(c->deleted[i].path);
	free(c->deleted);
	hvc_spool_close(c->spool);
	free(c->files);
	free(c->skipped);
	free(c->root);
	free(c);
}
