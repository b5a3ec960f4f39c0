/* Snapshots: the lstat state of every entry below a root, written in batches and read back in
 * walk order.
 *
 * Why batches and a `complete` flag rather than one transaction: a snapshot of a large tree is
 * taken while the walk runs, and one transaction would hold the database's write lock for the
 * whole walk, making every other harvest process wait (and give up after the busy timeout).
 * Entries are buffered (at most SNAP_BATCH) and each batch is one short transaction; the
 * snapshot row is marked complete in the transaction of the last batch, and only complete
 * snapshots can be opened. A process killed mid-snapshot leaves an incomplete one that nobody
 * reads and hv_store_prune() deletes.
 *
 * Why (parent, name) rather than paths: an entry stores its own name and the id of its
 * directory's entry, so a snapshot grows with the number of entries and the length of their
 * names, not with their depth (a path per entry is quadratic in a deep chain: 10 GB for
 * 100,000 levels). Ids are given in the order entries are added, 0 being the root. The
 * writer keeps the ids of the last path's directories (in walk order an entry's directory is
 * always among them); a path whose directory is not there is resolved component by component,
 * from a map of the ids resolved so, then the database, and a directory never added gets an
 * entry without a state (NULL) that readers pass over, and that fills in if it is added later.
 * The reader walks the tree depth-first, each directory's entries sorted by name, a page at a
 * time, entering the entries that have entries below them. */
#include "store_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SNAP_BATCH 4096
#define SNAP_PAGE 1024
#define SNAP_DELETE_CHUNK "8192" /* entries deleted per transaction */

/* An entry to write (writer) or read (reader). */
typedef struct snap_item {
	int64_t parent, id;
	size_t off;          /* its name, in the writer's or the frame's names buffer */
	size_t len;
	hv_stat st;
	bool added;          /* false: a directory not added itself, there for its entries */
	bool has_below;      /* (reader) entries lie below it */
	bool has_sha;
	char sha[65];
} snap_item;

/* One directory of the last path added: where its path ends, and its id. */
typedef struct snap_level {
	size_t end;
	int64_t id;
} snap_level;

/* A (parent, name) -> id map, open addressing. */
typedef struct snap_map_ent {
	int64_t parent, id; /* id 0: an empty slot */
	size_t off, len;    /* the name, in names */
} snap_map_ent;

typedef struct snap_map {
	snap_map_ent *v;
	size_t n, cap;
	hv_buf names;
} snap_map;

struct hv_snapshot_writer {
	hv_store *st;
	int64_t id;
	int64_t created_at_ns;
	uint64_t count;
	int64_t next_id;     /* the next entry's id */
	hv_buf names;        /* the pending entries' names, back to back */
	snap_item *items;
	size_t n_items;
	hv_buf last;         /* the last path added */
	snap_level *levels;  /* its directories and itself */
	size_t n_levels, levels_cap;
	snap_map map;
	hv_buf filters;      /* hv__snapshot_writer_filters()'s key */
	bool has_filters;
	hv_buf unread;       /* hv__snapshot_writer_unread()'s paths, each ended by a NUL */
};

/* A directory being read: its entries, a page at a time. */
typedef struct snap_frame {
	int64_t id;
	size_t path_len;     /* its path's length in hv_snapshot.path */
	snap_item *page;
	size_t n_page, pos;
	hv_buf names;
	bool started, at_end;
} snap_frame;

struct hv_snapshot {
	hv_store *st;
	int64_t id;
	int64_t created_at_ns;
	uint64_t entries;
	char *root;
	size_t root_len;
	snap_frame *frames;
	size_t n_frames, frames_cap;
	hv_buf path;         /* the current entry's path */
	bool started;
	hv_snapshot_entry cur;
	char cur_sha[65];
	hv_buf lookup_path;
	char lookup_sha[65];
	char *filters;       /* the recorded filters, or NULL */
	size_t filters_len;
	char *unread;        /* the directories it could not read, each ended by a NUL */
	size_t unread_len;
};

static void fill_stat(sqlite3_stmt *q, int col, hv_stat *s)
{
	s->dev = (uint64_t)sqlite3_column_int64(q, col);
	s->ino = (uint64_t)sqlite3_column_int64(q, col + 1);
	s->size = (uint64_t)sqlite3_column_int64(q, col + 2);
	s->mode = (uint32_t)sqlite3_column_int64(q, col + 3);
	hv_stat_set_mtime_ns(s, sqlite3_column_int64(q, col + 4));
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

/* ---- The (parent, name) map -------------------------------------------------------------- */

static size_t map_hash(int64_t parent, const char *name, size_t len)
{
	uint64_t h = 1469598103934665603ull ^ (uint64_t)parent;
	h *= 1099511628211ull;
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)name[i];
		h *= 1099511628211ull;
	}
	return (size_t)(h ^ (h >> 29));
}

static snap_map_ent *map_slot(snap_map *m, int64_t parent, const char *name, size_t len)
{
	size_t i = map_hash(parent, name, len) & (m->cap - 1);
	for (;; i = (i + 1) & (m->cap - 1)) {
		snap_map_ent *e = &m->v[i];
		if (e->id == 0 || (e->parent == parent && e->len == len &&
				   memcmp(m->names.data + e->off, name, len) == 0))
			return e;
	}
}

/* The id of (parent, name), or 0. */
static int64_t map_get(snap_map *m, int64_t parent, const char *name, size_t len)
{
	if (m->n == 0)
		return 0;
	return map_slot(m, parent, name, len)->id;
}

static hv_status map_put(snap_map *m, int64_t parent, const char *name, size_t len, int64_t id)
{
	if (2 * (m->n + 1) > m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		snap_map_ent *v = calloc(cap, sizeof(*v));
		if (!v)
			return hv_error_set(HV_ENOMEM, "out of memory");
		snap_map old = *m;
		m->v = v;
		m->cap = cap;
		for (size_t i = 0; i < old.cap; i++)
			if (old.v[i].id)
				*map_slot(m, old.v[i].parent, old.names.data + old.v[i].off,
					  old.v[i].len) = old.v[i];
		free(old.v);
	}
	snap_map_ent *e = map_slot(m, parent, name, len);
	if (e->id)
		return HV_OK;
	size_t off = m->names.len;
	int rc = hv_buf_append(&m->names, name, len);
	if (rc != HV_OK)
		return rc;
	*e = (snap_map_ent){.parent = parent, .id = id, .off = off, .len = len};
	m->n++;
	return HV_OK;
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
	w->next_id = 1;

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

hv_status hv__snapshot_writer_unread(hv_snapshot_writer *w, const char *path, size_t len)
{
	int rc = hv_buf_append(&w->unread, path, len);
	return rc == HV_OK ? hv_buf_append_char(&w->unread, '\0') : rc;
}

hv_status hv__snapshot_writer_filters(hv_snapshot_writer *w, const char *key, size_t len)
{
	hv_buf_truncate(&w->filters, 0);
	int rc = hv_buf_append(&w->filters, key, len);
	w->has_filters = rc == HV_OK;
	return rc;
}

/* Writes the pending entries in one transaction; with `finish`, marks the snapshot complete in
 * the same transaction. An entry whose (parent, name) is there already fills it in if it was a
 * directory not added itself (mode NULL), and is an entry added twice otherwise. */
static hv_status writer_flush(hv_snapshot_writer *w, bool finish)
{
	hv_store *st = w->st;
	sqlite3_stmt *q = hvst_stmt(st, STMT_SNAP_ENTRY_PUT);
	if (!q)
		return hv_error_last_status();
	int rc = hvst_tx_begin(st);
	for (size_t i = 0; rc == HV_OK && i < w->n_items; i++) {
		const snap_item *it = &w->items[i];
		sqlite3_bind_int64(q, 1, w->id);
		sqlite3_bind_int64(q, 2, it->parent);
		hvst_bind_bytes(q, 3, w->names.data + it->off, it->len);
		sqlite3_bind_int64(q, 4, it->id);
		if (it->added) { /* else NULL: a directory there only for its entries */
			sqlite3_bind_int64(q, 5, (int64_t)it->st.dev);
			sqlite3_bind_int64(q, 6, (int64_t)it->st.ino);
			sqlite3_bind_int64(q, 7, (int64_t)it->st.size);
			sqlite3_bind_int64(q, 8, (int64_t)it->st.mode);
			sqlite3_bind_int64(q, 9, it->st.mtime_ns);
			sqlite3_bind_int64(q, 10, it->st.ctime_ns);
		}
		if (it->has_sha)
			sqlite3_bind_text(q, 11, it->sha, 64, SQLITE_STATIC);
		else
			sqlite3_bind_null(q, 11);
		int src = hvst_step_done(q);
		if (src != SQLITE_DONE) {
			rc = hvst_db_error(st, src, "cannot write the snapshot");
		} else if (sqlite3_changes(st->db) != 1) {
			rc = hv_error_set(HV_EUSAGE, "%.*s: added twice to snapshot %lld",
					  (int)it->len, w->names.data + it->off, (long long)w->id);
		}
	}
	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
	if (rc == HV_OK && finish) {
		sqlite3_stmt *u = NULL;
		int src = sqlite3_prepare_v2(st->db,
					     "UPDATE snapshots SET entries = ?1, complete = 1,"
					     " filters = ?3, unread = ?4 WHERE id = ?2", -1, &u, NULL);
		if (src == SQLITE_OK) {
			sqlite3_bind_int64(u, 1, (int64_t)w->count);
			sqlite3_bind_int64(u, 2, w->id);
			if (w->has_filters) /* else NULL: not recorded */
				hvst_bind_bytes(u, 3, w->filters.data, w->filters.len);
			if (w->unread.len) /* else NULL: none */
				hvst_bind_bytes(u, 4, w->unread.data, w->unread.len);
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
	hv_buf_truncate(&w->names, 0);
	return rc;
}

/* Queues one row: (parent, name) -> id with s (NULL: a directory not added itself). */
static hv_status writer_queue(hv_snapshot_writer *w, int64_t parent, const char *name, size_t len,
			      int64_t id, const hv_stat *s, const char *sha)
{
	if (w->n_items == SNAP_BATCH) {
		int rc = writer_flush(w, false);
		if (rc != HV_OK)
			return rc;
	}
	snap_item *it = &w->items[w->n_items];
	it->parent = parent;
	it->id = id;
	it->off = w->names.len;
	it->len = len;
	it->added = s != NULL;
	if (s)
		it->st = *s;
	it->has_sha = sha != NULL;
	if (sha)
		memcpy(it->sha, sha, 65);
	int rc = hv_buf_append(&w->names, name, len);
	if (rc != HV_OK)
		return rc;
	w->n_items++;
	return HV_OK;
}

/* The id of the entry (parent, name) as the database has it (after writing what is pending),
 * or 0. */
static hv_status writer_lookup(hv_snapshot_writer *w, int64_t parent, const char *name, size_t len,
			       int64_t *id)
{
	*id = 0;
	if (w->n_items) {
		int rc = writer_flush(w, false);
		if (rc != HV_OK)
			return rc;
	}
	sqlite3_stmt *q = hvst_stmt(w->st, STMT_SNAP_LOOKUP);
	if (!q)
		return hv_error_last_status();
	sqlite3_bind_int64(q, 1, w->id);
	sqlite3_bind_int64(q, 2, parent);
	hvst_bind_bytes(q, 3, name, len);
	int rc = HV_OK;
	int src = sqlite3_step(q);
	if (src == SQLITE_ROW)
		*id = sqlite3_column_int64(q, 0);
	else if (src != SQLITE_DONE)
		rc = hvst_db_error(w->st, src, "cannot write the snapshot");
	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
	return rc;
}

static hv_status writer_level(hv_snapshot_writer *w, size_t depth, size_t end, int64_t id)
{
	if (depth == w->levels_cap) {
		size_t cap = w->levels_cap ? w->levels_cap * 2 : 64;
		snap_level *v = realloc(w->levels, cap * sizeof(*v));
		if (!v)
			return hv_error_set(HV_ENOMEM, "out of memory");
		w->levels = v;
		w->levels_cap = cap;
	}
	w->levels[depth] = (snap_level){.end = end, .id = id};
	w->n_levels = depth + 1;
	return HV_OK;
}

/* The id of path's directory (the first dir_len bytes of path) when it is one of the last
 * path's: *depth gets its level + 1; else -1. */
static int64_t writer_parent_fast(const hv_snapshot_writer *w, const char *path, size_t dir_len,
				  size_t *depth)
{
	if (dir_len == 0) {
		*depth = 0;
		return 0;
	}
	if (dir_len > w->last.len || memcmp(w->last.data, path, dir_len) != 0)
		return -1;
	/* The levels' ends grow with depth: bisect for dir_len. */
	size_t lo = 0, hi = w->n_levels;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (w->levels[mid].end < dir_len)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == w->n_levels || w->levels[lo].end != dir_len)
		return -1;
	*depth = lo + 1;
	return w->levels[lo].id;
}

/* Resolves path's directory (dir_len bytes) component by component, adding the directories
 * that are not there as mode 0 entries; the levels become its components. */
static hv_status writer_parent_slow(hv_snapshot_writer *w, const char *path, size_t dir_len,
				    int64_t *parent, size_t *depth)
{
	int64_t pid = 0;
	size_t d = 0;
	for (size_t start = 0; start < dir_len; d++) {
		const char *slash = memchr(path + start, '/', dir_len - start);
		size_t end = slash ? (size_t)(slash - path) : dir_len;
		const char *name = path + start;
		size_t len = end - start;
		int64_t id = map_get(&w->map, pid, name, len);
		int rc = HV_OK;
		if (!id)
			rc = writer_lookup(w, pid, name, len, &id);
		if (rc == HV_OK && !id) {
			id = w->next_id++;
			rc = writer_queue(w, pid, name, len, id, NULL, NULL);
		}
		if (rc == HV_OK)
			rc = map_put(&w->map, pid, name, len, id);
		if (rc == HV_OK)
			rc = writer_level(w, d, end, id);
		if (rc != HV_OK)
			return rc;
		pid = id;
		start = end + 1;
	}
	*parent = pid;
	*depth = d;
	return HV_OK;
}

hv_status hv_snapshot_writer_add(hv_snapshot_writer *w, const char *path, size_t path_len,
				 const hv_stat *s, const char *sha256_hex)
{
	if (!w || !path || !s)
		return hv_error_set(HV_EUSAGE, "hv_snapshot_writer_add: missing argument");
	if (path_len == 0 || memchr(path, '\0', path_len) || path[0] == '/' ||
	    path[path_len - 1] == '/' || memmem(path, path_len, "//", 2))
		return hv_error_set(HV_EUSAGE, "snapshot entry: an empty path, an empty component or"
					       " a NUL byte");
	char sha[65];
	if (sha256_hex) {
		int rc = hvst_hex_norm(sha256_hex, true, sha);
		if (rc != HV_OK)
			return rc;
	}
	const char *slash = memrchr(path, '/', path_len);
	size_t dir_len = slash ? (size_t)(slash - path) : 0;
	const char *name = slash ? slash + 1 : path;
	size_t name_len = path_len - (size_t)(name - path);
	size_t depth = 0;
	int64_t parent = writer_parent_fast(w, path, dir_len, &depth);
	int rc = HV_OK;
	if (parent < 0)
		rc = writer_parent_slow(w, path, dir_len, &parent, &depth);
	/* A directory met before as the directory of another path has its id already. */
	int64_t id = rc == HV_OK ? map_get(&w->map, parent, name, name_len) : 0;
	if (rc == HV_OK && !id)
		id = w->next_id++;
	if (rc == HV_OK)
		rc = writer_queue(w, parent, name, name_len, id, s, sha256_hex ? sha : NULL);
	if (rc == HV_OK)
		rc = writer_level(w, depth, path_len, id);
	if (rc == HV_OK) {
		hv_buf_truncate(&w->last, 0);
		rc = hv_buf_append(&w->last, path, path_len);
	}
	if (rc != HV_OK) {
		w->n_levels = 0; /* nothing known: the next path is resolved the slow way */
		hv_buf_truncate(&w->last, 0);
		return rc;
	}
	w->count++;
	return HV_OK;
}

static void writer_free(hv_snapshot_writer *w)
{
	hv_buf_free(&w->names);
	hv_buf_free(&w->last);
	hv_buf_free(&w->map.names);
	hv_buf_free(&w->filters);
	hv_buf_free(&w->unread);
	free(w->map.v);
	free(w->levels);
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
	return rc == HV_ENOTFOUND ? HV_OK : rc;
}

/* Runs a statement binding ?1 to id, in its own write transaction; *changes gets the rows. */
static hv_status exec_id(hv_store *st, const char *sql, int64_t id, int *changes)
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
		return hv_error_set(HV_ENOTFOUND, "no snapshot %lld", (long long)id);
	do {
		rc = exec_id(st,
			     "DELETE FROM snapshot_entries WHERE snapshot_id = ?1 AND (parent, name) IN"
			     " (SELECT parent, name FROM snapshot_entries WHERE snapshot_id = ?1"
			     " LIMIT " SNAP_DELETE_CHUNK ")",
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
				     "SELECT root, created_at_ns, entries, filters, unread FROM snapshots"
				     " WHERE id = ?1 AND complete = 1", -1, &q, NULL);
	if (src != SQLITE_OK)
		return hvst_db_error(st, src, "cannot read the snapshot");
	sqlite3_bind_int64(q, 1, id);
	src = sqlite3_step(q);
	int rc = HV_OK;
	hv_snapshot *sn = NULL;
	if (src == SQLITE_DONE) {
		rc = hv_error_set(HV_ENOTFOUND, "no snapshot %lld", (long long)id);
	} else if (src != SQLITE_ROW) {
		rc = hvst_db_error(st, src, "cannot read the snapshot");
	} else if (!(sn = calloc(1, sizeof(*sn))) ||
		   !(sn->frames = calloc(1, sizeof(*sn->frames)))) {
		rc = hv_error_set(HV_ENOMEM, "out of memory");
	} else {
		sn->st = st;
		sn->id = id;
		sn->frames_cap = 1;
		sn->n_frames = 1; /* the root: id 0 */
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
		if (rc == HV_OK && sqlite3_column_type(q, 3) != SQLITE_NULL) {
			sn->filters_len = (size_t)sqlite3_column_bytes(q, 3);
			sn->filters = malloc(sn->filters_len + 1);
			if (!sn->filters)
				rc = hv_error_set(HV_ENOMEM, "out of memory");
			else if (sn->filters_len)
				memcpy(sn->filters, sqlite3_column_blob(q, 3), sn->filters_len);
		}
		if (rc == HV_OK && sqlite3_column_bytes(q, 4) > 0) {
			sn->unread_len = (size_t)sqlite3_column_bytes(q, 4);
			sn->unread = malloc(sn->unread_len + 1);
			if (!sn->unread) {
				rc = hv_error_set(HV_ENOMEM, "out of memory");
			} else {
				memcpy(sn->unread, sqlite3_column_blob(q, 4), sn->unread_len);
				sn->unread[sn->unread_len] = '\0'; /* a damaged one ends here too */
			}
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

const char *hv__snapshot_unread(const hv_snapshot *sn, size_t *len)
{
	*len = sn->unread_len;
	return sn->unread;
}

const char *hv__snapshot_filters(const hv_snapshot *sn, size_t *len)
{
	*len = sn->filters_len;
	return sn->filters;
}

/* Reads the next page of frame f's entries (sorted by name, after the last one read), then
 * resets the statement, so no read transaction stays open between two hv_snapshot_next()
 * calls. */
static hv_status load_page(hv_snapshot *sn, snap_frame *f)
{
	hv_store *st = sn->st;
	if (!f->page && !(f->page = malloc(SNAP_PAGE * sizeof(*f->page))))
		return hv_error_set(HV_ENOMEM, "out of memory");
	sqlite3_stmt *q = hvst_stmt(st, f->started ? STMT_SNAP_PAGE_NEXT : STMT_SNAP_PAGE_FIRST);
	if (!q)
		return hv_error_last_status();
	sqlite3_bind_int64(q, 1, sn->id);
	sqlite3_bind_int64(q, 2, f->id);
	sqlite3_bind_int(q, 3, SNAP_PAGE);
	/* The last name read is the last of the page: bound before the buffer is reused. */
	hv_buf last = {0};
	int rc = HV_OK;
	if (f->started && f->n_page) {
		const snap_item *l = &f->page[f->n_page - 1];
		rc = hv_buf_append(&last, f->names.data + l->off, l->len);
		hvst_bind_bytes(q, 4, last.data, last.len);
	}
	f->n_page = f->pos = 0;
	hv_buf_truncate(&f->names, 0);
	int src = SQLITE_DONE;
	while (rc == HV_OK && (src = sqlite3_step(q)) == SQLITE_ROW) {
		snap_item *it = &f->page[f->n_page];
		it->len = (size_t)sqlite3_column_bytes(q, 0);
		it->off = f->names.len;
		rc = hv_buf_append(&f->names, sqlite3_column_blob(q, 0), it->len);
		it->id = sqlite3_column_int64(q, 1);
		fill_stat(q, 2, &it->st);
		it->added = sqlite3_column_type(q, 5) != SQLITE_NULL;
		it->has_sha = fill_sha(q, 8, it->sha);
		it->has_below = sqlite3_column_int(q, 9) != 0;
		if (rc == HV_OK)
			f->n_page++;
	}
	if (rc == HV_OK && src != SQLITE_DONE)
		rc = hvst_db_error(st, src, "cannot read the snapshot");
	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
	hv_buf_free(&last);
	if (rc != HV_OK)
		return rc;
	f->started = true;
	if (f->n_page < SNAP_PAGE)
		f->at_end = true;
	return HV_OK;
}

static void frame_free(snap_frame *f)
{
	free(f->page);
	hv_buf_free(&f->names);
	memset(f, 0, sizeof(*f));
}

hv_status hv_snapshot_next(hv_snapshot *sn, const hv_snapshot_entry **out)
{
	if (!sn || !out)
		return hv_error_set(HV_EUSAGE, "hv_snapshot_next: missing argument");
	for (;;) {
		if (sn->n_frames == 0)
			return HV_DONE;
		snap_frame *f = &sn->frames[sn->n_frames - 1];
		if (f->pos == f->n_page) {
			if (f->started && f->at_end) {
				frame_free(f);
				sn->n_frames--;
				continue;
			}
			int rc = load_page(sn, f);
			if (rc != HV_OK)
				return rc;
			continue;
		}
		const snap_item *it = &f->page[f->pos++];
		hv_buf_truncate(&sn->path, f->path_len);
		int rc = HV_OK;
		if (f->path_len)
			rc = hv_buf_append_char(&sn->path, '/');
		if (rc == HV_OK)
			rc = hv_buf_append(&sn->path, f->names.data + it->off, it->len);
		if (rc != HV_OK)
			return rc;
		bool added = it->added;
		sn->cur.st = it->st;
		sn->cur.sha256 = NULL;
		if (it->has_sha) {
			memcpy(sn->cur_sha, it->sha, 65);
			sn->cur.sha256 = sn->cur_sha;
		}
		if (it->has_below) {
			/* Its entries come next. (it and f are not used past this.) When f has
			 * nothing left, its frame is reused: a chain of any depth needs one. */
			int64_t id = it->id;
			snap_frame *c = f;
			if (f->pos < f->n_page || !f->at_end) {
				if (sn->n_frames == sn->frames_cap) {
					size_t cap = sn->frames_cap * 2;
					snap_frame *v = realloc(sn->frames, cap * sizeof(*v));
					if (!v)
						return hv_error_set(HV_ENOMEM, "out of memory");
					sn->frames = v;
					sn->frames_cap = cap;
				}
				c = &sn->frames[sn->n_frames++];
				memset(c, 0, sizeof(*c));
			}
			c->id = id;
			c->path_len = sn->path.len;
			c->n_page = c->pos = 0;
			c->started = c->at_end = false;
		}
		if (!added)
			continue; /* a directory only there for its entries */
		sn->cur.path = sn->path.data;
		sn->cur.path_len = sn->path.len;
		*out = &sn->cur;
		return HV_OK;
	}
}

/* A path the snapshot has no entry for (not a failure of the store: HV_ENOTFOUND). */
static hv_status not_in_snapshot(const char *path, size_t path_len)
{
	return hv_error_set(HV_ENOTFOUND, "%.*s: not in the snapshot",
			    (int)(path_len > 4096 ? 4096 : path_len), path);
}

hv_status hv_snapshot_lookup(hv_snapshot *sn, const char *path, size_t path_len,
			     hv_snapshot_entry *out)
{
	if (!sn || !path || !out)
		return hv_error_set(HV_EUSAGE, "hv_snapshot_lookup: missing argument");
	if (path_len == 0 || memchr(path, '\0', path_len))
		return not_in_snapshot(path, path_len); /* no name holds a NUL */
	hv_store *st = sn->st;
	sqlite3_stmt *q = hvst_stmt(st, STMT_SNAP_LOOKUP);
	if (!q)
		return hv_error_last_status();
	int64_t pid = 0;
	int rc = HV_ENOTFOUND;
	for (size_t start = 0; start <= path_len;) {
		const char *slash = memchr(path + start, '/', path_len - start);
		size_t end = slash ? (size_t)(slash - path) : path_len;
		sqlite3_bind_int64(q, 1, sn->id);
		sqlite3_bind_int64(q, 2, pid);
		hvst_bind_bytes(q, 3, path + start, end - start);
		int src = sqlite3_step(q);
		rc = HV_ENOTFOUND;
		if (src == SQLITE_ROW) {
			pid = sqlite3_column_int64(q, 0);
			if (end == path_len) {
				fill_stat(q, 1, &out->st);
				bool has_sha = fill_sha(q, 7, sn->lookup_sha);
				out->sha256 = has_sha ? sn->lookup_sha : NULL;
				rc = sqlite3_column_type(q, 4) != SQLITE_NULL ? HV_OK : HV_ENOTFOUND;
			} else {
				rc = HV_OK;
			}
		} else if (src != SQLITE_DONE) {
			rc = hvst_db_error(st, src, "cannot read the snapshot");
		}
		sqlite3_reset(q);
		sqlite3_clear_bindings(q);
		if (rc != HV_OK || end == path_len)
			break;
		start = end + 1;
	}
	if (rc == HV_ENOTFOUND)
		return not_in_snapshot(path, path_len);
	if (rc != HV_OK)
		return rc;
	hv_buf_truncate(&sn->lookup_path, 0);
	rc = hv_buf_append(&sn->lookup_path, path, path_len);
	if (rc != HV_OK)
		return rc;
	out->path = sn->lookup_path.data;
	out->path_len = sn->lookup_path.len;
	return HV_OK;
}

void hv_snapshot_close(hv_snapshot *sn)
{
	if (!sn)
		return;
	for (size_t i = 0; i < sn->n_frames; i++)
		frame_free(&sn->frames[i]);
	free(sn->frames);
	free(sn->root);
	free(sn->filters);
	free(sn->unread);
	hv_buf_free(&sn->path);
	hv_buf_free(&sn->lookup_path);
	free(sn);
}
