/* Snapshots: the state of a directory taken before a run, in the store or in memory, that
 * a collect compares against (see collect.c). */
#include "harvest/collect.h"
#include "harvest/sys/store.h"
#include "collect_internal.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where a snapshot walk puts each entry: the store's writer or memory. */
typedef hv_status (*snap_add_fn)(void *ctx, const hv_entry *e, const char *sha);

/* The walk of a snapshot taken at time at (ns): each entry, with its SHA-256 when racy. */
static hv_status snapshot_walk(const char *root, const hv_collect_opts *opts, int64_t at,
			       hv_walk_sort sort, snap_add_fn add, void *ctx, uint64_t *entries)
{
	hv_walk *w;
	int rc = hv_collect_walk_open(&w, root, opts, sort);
	if (rc != HV_OK)
		return rc;
	uint64_t count = 0;
	const hv_entry *e;
	while ((rc = hv_walk_next(w, &e)) != HV_DONE) {
		if (rc == HV_WARN) {
			hvc_warn(opts, hv_error_last());
			continue;
		}
		if (rc != HV_OK)
			break;
		if (!e->have_lstat)
			continue; /* vanished: not there to compare against */
		char hex[65];
		const char *sha = NULL;
		if (S_ISREG(e->lst.mode) && hv_store_stat_is_racy(&e->lst, at) &&
		    e->lst.size <= opts->max_file_bytes) {
			/* Changed within the clock's resolution of the snapshot: remember the content,
			 * so a same-size rewrite in the same tick is still seen (the racy rule). */
			int fd = hv_walk_openat(w, O_RDONLY | O_NONBLOCK);
			struct stat fst;
			if (fd >= 0 && fstat(fd, &fst) == 0 && S_ISREG(fst.st_mode) &&
			    hv_sha256_fd(fd, opts->max_file_bytes, e->path, hex) == HV_OK)
				sha = hex;
			if (fd >= 0)
				close(fd);
		}
		rc = add(ctx, e, sha);
		if (rc != HV_OK)
			break;
		count++;
		if (opts->on_progress)
			opts->on_progress(opts->ctx, count, 0, 0);
	}
	hv_walk_close(w);
	*entries = count;
	return rc == HV_DONE ? HV_OK : rc;
}

static hv_status writer_add(void *ctx, const hv_entry *e, const char *sha)
{
	return hv_snapshot_writer_add(ctx, e->path, e->path_len, &e->lst, sha);
}

static hv_status snapshot_prepare(const char *dir, char **root)
{
	int rc = hvc_abs_root(dir, root);
	if (rc != HV_OK)
		return rc;
	int avail;
	rc = hvc_check_fds(dir, 0, &avail);
	if (rc != HV_OK) {
		free(*root);
		*root = NULL;
	}
	return rc;
}

hv_status hv_snapshot_take(hv_store *st, const char *dir, const hv_collect_opts *opts, int64_t *id,
			   uint64_t *entries, char **root_out)
{
	if (root_out)
		*root_out = NULL;
	hv_collect_opts defaults;
	opts = hvc_opts_or_defaults(opts, &defaults);
	char *root;
	int rc = snapshot_prepare(dir, &root);
	if (rc != HV_OK)
		return rc;
	hv_snapshot_writer *sw;
	rc = hv_store_snapshot_begin(st, root, &sw);
	if (rc != HV_OK) {
		free(root);
		return rc;
	}
	uint64_t count = 0;
	/* The store sorts the entries itself: the walk need not. */
	rc = snapshot_walk(root, opts, hv_snapshot_writer_created_at(sw), HV_SORT_NONE, writer_add,
			   sw, &count);
	if (rc != HV_OK) {
		free(root);
		hv_error_saved saved;
		hv_error_save(&saved);
		hv_snapshot_writer_abort(sw);
		return hv_error_restore(&saved, rc);
	}
	int64_t sid = 0;
	rc = hv_snapshot_writer_finish(sw, &sid);
	if (rc != HV_OK) {
		free(root);
		return rc;
	}
	if (id)
		*id = sid;
	if (entries)
		*entries = count;
	if (root_out)
		*root_out = root;
	else
		free(root);
	return HV_OK;
}

static hv_status mem_add(void *ctx, const hv_entry *e, const char *sha)
{
	hv_mem_snapshot *m = ctx;
	/* The database's own files are never artifacts: not there to compare against either. */
	if (hvc_is_db_file(&m->dbf, &e->lst) || hvc_is_db_path(m->root, m->st, e))
		return HV_OK;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 256;
		struct hvc_mem_entry *ne = realloc(m->e, cap * sizeof(*ne));
		if (!ne)
			return hv_error_set(HV_ENOMEM, "out of memory");
		m->e = ne;
		m->cap = cap;
		m->e_present = 0; /* moved, or grown in place: made present again from n on */
	}
	/* A workspace of 200,000 entries fills about 30 MB here: 4,900 page faults, 90 ms of a
	 * 700 ms run, when each page is first touched by its write. */
	hv_prefault_ahead(m->e, m->n * sizeof(*m->e), m->cap * sizeof(*m->e), &m->e_present);
	struct hvc_mem_entry *me = &m->e[m->n];
	me->off = m->paths.len;
	me->len = e->path_len;
	me->st = e->lst;
	me->sha = 0;
	char *before = m->paths.data;
	if (hv_buf_append(&m->paths, e->path, e->path_len + 1) != HV_OK)
		return HV_ENOMEM;
	if (m->paths.data != before)
		m->paths_present = 0;
	hv_prefault_ahead(m->paths.data, m->paths.len, m->paths.cap, &m->paths_present);
	if (sha) {
		if (m->n_shas == m->cap_shas) {
			size_t cap = m->cap_shas ? m->cap_shas * 2 : 16;
			char(*ns)[65] = realloc(m->shas, cap * sizeof(*ns));
			if (!ns)
				return hv_error_set(HV_ENOMEM, "out of memory");
			m->shas = ns;
			m->cap_shas = cap;
		}
		memcpy(m->shas[m->n_shas++], sha, 65);
		me->sha = m->n_shas;
	}
	m->n++;
	return HV_OK;
}

hv_status hv_snapshot_take_mem(hv_store *st, const char *dir, const hv_collect_opts *opts,
			       hv_mem_snapshot **out)
{
	*out = NULL;
	hv_collect_opts defaults;
	opts = hvc_opts_or_defaults(opts, &defaults);
	hv_mem_snapshot *m = calloc(1, sizeof(*m));
	if (!m)
		return hv_error_set(HV_ENOMEM, "out of memory");
	m->st = st;
	hvc_db_files_init(&m->dbf, st);
	int rc = snapshot_prepare(dir, &m->root);
	if (rc == HV_OK) {
		uint64_t count;
		rc = snapshot_walk(m->root, opts, hv_store_now_ns(), HV_SORT_NAME, mem_add, m, &count);
	}
	if (rc != HV_OK) {
		hv_mem_snapshot_free(m);
		return rc;
	}
	*out = m;
	return HV_OK;
}

uint64_t hv_mem_snapshot_entries(const hv_mem_snapshot *m)
{
	return m ? m->n : 0;
}

void hv_mem_snapshot_free(hv_mem_snapshot *m)
{
	if (!m)
		return;
	free(m->root);
	hv_buf_free(&m->paths);
	free(m->e);
	free(m->shas);
	free(m);
}
