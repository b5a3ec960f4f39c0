/* Snapshots: the lstat state of every entry below a root, written in batches and read back in
 * walk order.
 *
 * Why batches and a `complete` flag rather than one transaction: a snapshot of a large tree is
 * taken while the walk runs, and one transaction would hold the database's write lock for the
 * whole walk, making every other harvest process wait (and give up after the busy timeout).
 * Entries are buffered (at most SNAP_BATCH) and each batch is one short transaction; the
 * snapshot row is marked complete in the transaction of the last batch, and only complete
 * snapshots can be opened. A process killed mid-snapshot leaves an incomplete one that nobody
 * reads and hv_store_prune() deletes. */
#include "store_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SNAP_BATCH 4096
#define SNAP_PAGE 1024
#define SNAP_DELETE_CHUNK "8192" /* entries deleted per transaction */

typedef struct snap_item {
	size_t off;          /* into the key (writer) or path (reader) buffer */
	size_t len;
	hv_stat st;
	bool has_sha;
	char sha[65];
} snap_item;

struct hv_snapshot_writer {
	hv_store *st;
	int64_t id;
	int64_t created_at_ns;
	uint64_t count;
	hv_buf keys;         /* the pending entries' keys, back to back */
	snap_item *items;
	size_t n_items;
};

struct hv_snapshot {
	hv_store *st;
	int64_t id;
	int64_t created_at_ns;
	uint64_t entries;
	char *root;
	size_t root_len;
	/* The current page of entries, read in one short statement. */
	hv_buf paths;        /* NUL-terminated paths, back to back */
	snap_item *page;
	size_t n_page, pos;
	hv_buf last_key;     /* the last key read: the next page starts after it */
	bool started, at_end;
	hv_snapshot_entry cur;
	hv_buf lookup_path;
	char lookup_sha[65];
};

static void fill_stat(sqlite3_stmt *q, int col, hv_stat *s)
{
	s->dev = (uint64_t)sqlite3_column_int64(q, col);
	s->ino = (uint64_t)sqlite3_column_int64(q, col + 1);
	s->size = (uint64_t)sqlite3_column_int64(q, col + 2);
	s->mode = (uint32_t)sqlite3_column_int64(q, col + 3);
	s->mtime_ns = sqlite3_column_int64(q, col + 4);
	s->ctime_ns = sqlite3_column_int64(q, col + 5);
}

static bool fill_sha(sqlite3_stmt *q, int col, char out[65])
{
	const unsigned char *sha = sqlite3_column_text(q, col);
	if (!sha)
		return false;
	snprintf(out, 65, "%s", (const char *)sha);
	return true;
}

/* ---- Writing ------------------------------------------------------------------------------ */

hv_status hv_store_snapshot_begin(hv_store *st, const char *root, hv_snapshot_writer **out)
{
	if (!st || !root || !out)
		return hv_error_set(HV_EUSAGE, "hv_store_snapshot_begin: missing argument");
	*out = NULL;
	int rc = hvst_check_writable(st);
	if (rc != HV_OK)
		return rc;
	hv_snapshot_writer *w = calloc(1, sizeof(*w));
	if (!w || !(w->items = malloc(SNAP_BATCH * sizeof(*w->items)))) {
		free(w);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	w->st = st;
	w->created_at_ns = hv_store_now_ns();

	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(st->db,
				     "INSERT INTO snapshots(root, created_at_ns) VALUES (?1, ?2)", -1,
				     &q, NULL);
	if (src != SQLITE_OK) {
		rc = hvst_db_error(st, src, "cannot record a snapshot");
	} else if ((rc = hvst_tx_begin(st)) == HV_OK) {
		hvst_bind_bytes(q, 1, root, strlen(root));
		sqlite3_bind_int64(q, 2, w->created_at_ns);
		src = hvst_step_done(q);
		if (src != SQLITE_DONE) {
			rc = hvst_db_error(st, src, "cannot record a snapshot");
			hvst_tx_rollback(st);
		} else {
			w->id = sqlite3_last_insert_rowid(st->db);
			rc = hvst_tx_commit(st);
		}
	}
	sqlite3_finalize(q);
	if (rc != HV_OK) {
		free(w->items);
		free(w);
		return rc;
	}
	*out = w;
	return HV_OK;
}

int64_t hv_snapshot_writer_created_at(const hv_snapshot_writer *w)
{
	return w->created_at_ns;
}

/* Writes the pending entries in one transaction; with `finish`, marks the snapshot complete in
 * the same transaction. */
static int writer_flush(hv_snapshot_writer *w, bool finish)
{
	hv_store *st = w->st;
	sqlite3_stmt *q = hvst_stmt(st, STMT_SNAP_ENTRY_PUT);
	if (!q)
		return hv_error_last_status();
	int rc = hvst_tx_begin(st);
	for (size_t i = 0; rc == HV_OK && i < w->n_items; i++) {
		const snap_item *it = &w->items[i];
		sqlite3_bind_int64(q, 1, w->id);
		hvst_bind_bytes(q, 2, w->keys.data + it->off, it->len);
		sqlite3_bind_int64(q, 3, (int64_t)it->st.dev);
		sqlite3_bind_int64(q, 4, (int64_t)it->st.ino);
		sqlite3_bind_int64(q, 5, (int64_t)it->st.size);
		sqlite3_bind_int64(q, 6, (int64_t)it->st.mode);
		sqlite3_bind_int64(q, 7, it->st.mtime_ns);
		sqlite3_bind_int64(q, 8, it->st.ctime_ns);
		if (it->has_sha)
			sqlite3_bind_text(q, 9, it->sha, 64, SQLITE_STATIC);
		else
			sqlite3_bind_null(q, 9);
		int src = hvst_step_done(q);
		if ((src & 0xff) == SQLITE_CONSTRAINT) {
			char *path = strndup(w->keys.data + it->off, it->len);
			if (path)
				hvst_key_to_path(path, it->len);
			rc = hv_error_set(HV_EUSAGE, "%s: added twice to snapshot %lld",
					  path ? path : "a path", (long long)w->id);
			free(path);
		} else if (src != SQLITE_DONE) {
			rc = hvst_db_error(st, src, "cannot write the snapshot");
		}
	}
	sqlite3_clear_bindings(q);
	if (rc == HV_OK && finish) {
		sqlite3_stmt *u = NULL;
		int src = sqlite3_prepare_v2(st->db,
					     "UPDATE snapshots SET entries = ?1, complete = 1"
					     " WHERE id = ?2", -1, &u, NULL);
		if (src == SQLITE_OK) {
			sqlite3_bind_int64(u, 1, (int64_t)w->count);
			sqlite3_bind_int64(u, 2, w->id);
			src = hvst_step_done(u);
		}
		if (src != SQLITE_DONE)
			rc = hvst_db_error(st, src, "cannot finish the snapshot");
		else if (sqlite3_changes(st->db) != 1)
			rc = hv_error_set(HV_EDB, "%s: snapshot %lld was deleted while being taken",
					  st->path, (long long)w->id);
		sqlite3_finalize(u);
	}
	if (rc == HV_OK)
		rc = hvst_tx_commit(st);
	else if (st->in_tx)
		hvst_tx_rollback(st);
	w->n_items = 0;
	hv_buf_truncate(&w->keys, 0);
	return rc;
}

hv_status hv_snapshot_writer_add(hv_snapshot_writer *w, const char *path, size_t path_len,
				 const hv_stat *s, const char *sha256_hex)
{
	if (!w || !path || !s)
		return hv_error_set(HV_EUSAGE, "hv_snapshot_writer_add: missing argument");
	if (path_len == 0 || memchr(path, '\0', path_len))
		return hv_error_set(HV_EUSAGE, "snapshot entry: an empty path or one with a NUL byte");
	snap_item *it = &w->items[w->n_items];
	it->has_sha = sha256_hex != NULL;
	if (it->has_sha) {
		int rc = hvst_hex_norm(sha256_hex, true, it->sha);
		if (rc != HV_OK)
			return rc;
	}
	it->off = w->keys.len;
	it->len = path_len;
	it->st = *s;
	int rc = hv_buf_append(&w->keys, path, path_len);
	if (rc != HV_OK)
		return rc;
	for (size_t i = 0; i < path_len; i++)
		if (w->keys.data[it->off + i] == '/')
			w->keys.data[it->off + i] = '\0';
	w->n_items++;
	w->count++;
	if (w->n_items == SNAP_BATCH)
		return writer_flush(w, false);
	return HV_OK;
}

static void writer_free(hv_snapshot_writer *w)
{
	hv_buf_free(&w->keys);
	free(w->items);
	free(w);
}

hv_status hv_snapshot_writer_finish(hv_snapshot_writer *w, int64_t *id_out)
{
	if (!w)
		return hv_error_set(HV_EUSAGE, "hv_snapshot_writer_finish: no writer");
	int rc = writer_flush(w, true);
	if (rc == HV_OK) {
		if (id_out)
			*id_out = w->id;
		writer_free(w);
		return HV_OK;
	}
	hv_error_saved saved;
	hv_error_save(&saved);
	hv_store_snapshot_delete(w->st, w->id); /* best effort; prune removes what is left */
	writer_free(w);
	return hv_error_restore(&saved, rc);
}

hv_status hv_snapshot_writer_abort(hv_snapshot_writer *w)
{
	if (!w)
		return HV_OK;
	int rc = hv_store_snapshot_delete(w->st, w->id);
	writer_free(w);
	return rc == HV_DONE ? HV_OK : rc;
}

/* Runs a statement binding ?1 to id, in its own write transaction; *changes gets the rows. */
static int exec_id(hv_store *st, const char *sql, int64_t id, int *changes)
{
	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(st->db, sql, -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot delete the snapshot");
	int rc = hvst_tx_begin(st);
	if (rc == HV_OK) {
		sqlite3_bind_int64(q, 1, id);
		src = hvst_step_done(q);
		if (src == SQLITE_DONE) {
			*changes = sqlite3_changes(st->db);
			rc = hvst_tx_commit(st);
		} else {
			rc = hvst_db_error(st, src, "cannot delete the snapshot");
			hvst_tx_rollback(st);
		}
	}
	sqlite3_finalize(q);
	return rc;
}

hv_status hv_store_snapshot_delete(hv_store *st, int64_t id)
{
	if (!st)
		return hv_error_set(HV_EUSAGE, "hv_store_snapshot_delete: no store");
	int rc = hvst_check_writable(st);
	if (rc != HV_OK)
		return rc;
	/* Hide it first, then delete the entries a chunk per transaction (so a large snapshot
	 * does not hold the write lock for long), then the row. Killed midway, what is left is an
	 * incomplete snapshot, which prune removes. */
	int changes = 0;
	rc = exec_id(st, "UPDATE snapshots SET complete = 0 WHERE id = ?1", id, &changes);
	if (rc != HV_OK)
		return rc;
	if (changes == 0)
		return hv_error_set(HV_DONE, "no snapshot %lld", (long long)id);
	do {
		rc = exec_id(st,
			     "DELETE FROM snapshot_entries WHERE snapshot_id = ?1 AND path IN"
			     " (SELECT path FROM snapshot_entries WHERE snapshot_id = ?1 LIMIT "
			     SNAP_DELETE_CHUNK ")",
			     id, &changes);
	} while (rc == HV_OK && changes > 0);
	if (rc == HV_OK)
		rc = exec_id(st, "DELETE FROM snapshots WHERE id = ?1", id, &changes);
	return rc;
}

/* ---- Reading ------------------------------------------------------------------------------ */

hv_status hv_store_snapshot_open(hv_store *st, int64_t id, hv_snapshot **out)
{
	if (!st || !out)
		return hv_error_set(HV_EUSAGE, "hv_store_snapshot_open: missing argument");
	*out = NULL;
	sqlite3_stmt *q = NULL;
	int src = sqlite3_prepare_v2(st->db,
				     "SELECT root, created_at_ns, entries FROM snapshots"
				     " WHERE id = ?1 AND complete = 1", -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot read the snapshot");
	sqlite3_bind_int64(q, 1, id);
	src = sqlite3_step(q);
	int rc = HV_OK;
	hv_snapshot *sn = NULL;
	if (src == SQLITE_DONE) {
		rc = hv_error_set(HV_DONE, "no snapshot %lld", (long long)id);
	} else if (src != SQLITE_ROW) {
		rc = hvst_db_error(st, src, "cannot read the snapshot");
	} else if (!(sn = calloc(1, sizeof(*sn))) ||
		   !(sn->page = malloc(SNAP_PAGE * sizeof(*sn->page)))) {
		rc = hv_error_set(HV_ENOMEM, "out of memory");
	} else {
		sn->st = st;
		sn->id = id;
		sn->root_len = (size_t)sqlite3_column_bytes(q, 0);
		sn->created_at_ns = sqlite3_column_int64(q, 1);
		sn->entries = (uint64_t)sqlite3_column_int64(q, 2);
		sn->root = malloc(sn->root_len + 1);
		if (!sn->root) {
			rc = hv_error_set(HV_ENOMEM, "out of memory");
		} else {
			if (sn->root_len)
				memcpy(sn->root, sqlite3_column_blob(q, 0), sn->root_len);
			sn->root[sn->root_len] = '\0';
		}
	}
	sqlite3_finalize(q);
	if (rc != HV_OK) {
		hv_snapshot_close(sn);
		return rc;
	}
	*out = sn;
	return HV_OK;
}

int64_t hv_snapshot_id(const hv_snapshot *sn)
{
	return sn->id;
}

const char *hv_snapshot_root(const hv_snapshot *sn, size_t *len)
{
	if (len)
		*len = sn->root_len;
	return sn->root;
}

int64_t hv_snapshot_created_at(const hv_snapshot *sn)
{
	return sn->created_at_ns;
}

uint64_t hv_snapshot_entries(const hv_snapshot *sn)
{
	return sn->entries;
}

/* Reads the next page of entries (keyset pagination on the walk-order key), then resets the
 * statement, so no read transaction stays open between two hv_snapshot_next() calls. */
static int load_page(hv_snapshot *sn)
{
	hv_store *st = sn->st;
	sqlite3_stmt *q = hvst_stmt(st, sn->started ? STMT_SNAP_PAGE_NEXT : STMT_SNAP_PAGE_FIRST);
	if (!q)
		return hv_error_last_status();
	sqlite3_bind_int64(q, 1, sn->id);
	sqlite3_bind_int(q, 2, SNAP_PAGE);
	if (sn->started)
		hvst_bind_bytes(q, 3, sn->last_key.data, sn->last_key.len);
	sn->n_page = sn->pos = 0;
	hv_buf_truncate(&sn->paths, 0);
	int rc = HV_OK, src;
	while (rc == HV_OK && (src = sqlite3_step(q)) == SQLITE_ROW) {
		snap_item *it = &sn->page[sn->n_page];
		const void *key = sqlite3_column_blob(q, 0);
		it->len = (size_t)sqlite3_column_bytes(q, 0);
		it->off = sn->paths.len;
		fill_stat(q, 1, &it->st);
		it->has_sha = fill_sha(q, 7, it->sha);
		rc = hv_buf_append(&sn->paths, key, it->len);
		if (rc == HV_OK)
			rc = hv_buf_append_char(&sn->paths, '\0');
		if (rc == HV_OK)
			sn->n_page++;
	}
	if (rc == HV_OK && src != SQLITE_DONE)
		rc = hvst_db_error(st, src, "cannot read the snapshot");
	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
	if (rc != HV_OK)
		return rc;
	sn->started = true;
	if (sn->n_page < SNAP_PAGE)
		sn->at_end = true;
	if (sn->n_page) {
		const snap_item *last = &sn->page[sn->n_page - 1];
		hv_buf_truncate(&sn->last_key, 0);
		rc = hv_buf_append(&sn->last_key, sn->paths.data + last->off, last->len);
		for (size_t i = 0; i < sn->n_page; i++)
			hvst_key_to_path(sn->paths.data + sn->page[i].off, sn->page[i].len);
	}
	return rc;
}

hv_status hv_snapshot_next(hv_snapshot *sn, const hv_snapshot_entry **out)
{
	if (!sn || !out)
		return hv_error_set(HV_EUSAGE, "hv_snapshot_next: missing argument");
	if (sn->pos == sn->n_page) {
		if (sn->at_end)
			return HV_DONE;
		int rc = load_page(sn);
		if (rc != HV_OK)
			return rc;
		if (sn->n_page == 0)
			return HV_DONE;
	}
	const snap_item *it = &sn->page[sn->pos++];
	sn->cur.path = sn->paths.data + it->off;
	sn->cur.path_len = it->len;
	sn->cur.st = it->st;
	sn->cur.sha256 = it->has_sha ? it->sha : NULL;
	*out = &sn->cur;
	return HV_OK;
}

hv_status hv_snapshot_lookup(hv_snapshot *sn, const char *path, size_t path_len,
			     hv_snapshot_entry *out)
{
	if (!sn || !path || !out)
		return hv_error_set(HV_EUSAGE, "hv_snapshot_lookup: missing argument");
	if (memchr(path, '\0', path_len))
		return HV_DONE; /* no name holds a NUL (and keys use it for '/') */
	hv_store *st = sn->st;
	sqlite3_stmt *q = hvst_stmt(st, STMT_SNAP_LOOKUP);
	if (!q)
		return hv_error_last_status();
	int rc = hvst_path_to_key(&sn->lookup_path, path, path_len);
	if (rc != HV_OK)
		return rc;
	sqlite3_bind_int64(q, 1, sn->id);
	hvst_bind_bytes(q, 2, sn->lookup_path.data, sn->lookup_path.len);
	int src = sqlite3_step(q);
	if (src == SQLITE_ROW) {
		fill_stat(q, 0, &out->st);
		bool has_sha = fill_sha(q, 6, sn->lookup_sha);
		hvst_key_to_path(sn->lookup_path.data, sn->lookup_path.len);
		out->path = sn->lookup_path.data;
		out->path_len = sn->lookup_path.len;
		out->sha256 = has_sha ? sn->lookup_sha : NULL;
	} else if (src == SQLITE_DONE) {
		rc = HV_DONE;
	} else {
		rc = hvst_db_error(st, src, "cannot read the snapshot");
	}
	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
	return rc;
}

void hv_snapshot_close(hv_snapshot *sn)
{
	if (!sn)
		return;
	free(sn->root);
	free(sn->page);
	hv_buf_free(&sn->paths);
	hv_buf_free(&sn->last_key);
	hv_buf_free(&sn->lookup_path);
	free(sn);
}
