/* Snapshots: the state of a directory taken before a run, in the store or in memory, that
 * a collect compares against (see collect.c). */
#include "harvest/collect.h"
#include "harvest/sys/store.h"
#include "collect_internal.h"
#include "internal.h"
#include "test_hook.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

/* Where a snapshot walk puts each entry: the store's writer or memory. named: e->lst holds
 * only the type and the inode number (see collect_internal.h). */
typedef hv_status (*snap_add_fn)(void *ctx, const hv_entry *e, const char *sha, bool named);
/* A directory the walk could not read (its path relative to the root, "" for the root). */
typedef hv_status (*snap_unread_fn)(void *ctx, const char *dir, size_t len);

/* The file systems of a names-only walk: which stamp ctime from this machine's clock at
 * nanoseconds, by device, and the device of each directory on the walk's current path. */
#define TRUST_DEVS 16
struct trust {
	struct {
		uint64_t dev;
		bool ok;
	} seen[TRUST_DEVS];
	size_t n_seen;
	uint64_t *dev_at; /* by depth: the directory at that depth on the path (0: the root) */
	size_t cap;
};

/* Local file systems whose times are the kernel's clock, kept in nanoseconds: ext2/3/4 (one
 * magic; an ext4 of 128-byte inodes keeps seconds, told by the directory's own ctime),
 * XFS, Btrfs, tmpfs. Not network or FUSE file systems, whose times may come from another
 * clock, nor overlayfs, whose listings may give other inode numbers than lstat. */
static bool fs_trusted(int64_t f_type)
{
	switch (f_type) {
	case 0xEF53:     /* EXT4_SUPER_MAGIC */
	case 0x58465342: /* XFS_SUPER_MAGIC */
	case 0x9123683E: /* BTRFS_SUPER_MAGIC */
	case 0x01021994: /* TMPFS_MAGIC */
		return true;
	default:
		return false;
	}
}

/* Whether the file system of dev (a directory of it: open as fd, its ctime ctime_ns) stamps
 * ctime from this clock at nanoseconds; once per device. fd < 0: not known, not trusted. */
static bool trust_dev(struct trust *t, uint64_t dev, int fd, int64_t ctime_ns)
{
	for (size_t i = 0; i < t->n_seen; i++)
		if (t->seen[i].dev == dev)
			return t->seen[i].ok;
	struct statfs sf;
	/* Whole seconds on this directory: a file system that keeps no more (or, once in a
	 * billion, a time on the second): its files are stat'ed. */
	bool ok = fd >= 0 && fstatfs(fd, &sf) == 0 && fs_trusted((int64_t)sf.f_type) &&
		  ctime_ns % 1000000000 != 0 && !hv__test_switch_on(HV__SWITCH_SNAPSHOT_LSTAT);
	if (t->n_seen < TRUST_DEVS) {
		t->seen[t->n_seen].dev = dev;
		t->seen[t->n_seen].ok = ok;
		t->n_seen++;
	}
	return ok;
}

/* Notes the directory e (lstat known) at its depth, and whether its device is trusted. */
static hv_status trust_note_dir(struct trust *t, hv_walk *w, const hv_entry *e)
{
	size_t d = (size_t)e->depth;
	if (d >= t->cap || !t->dev_at) {
		size_t cap = (d + 1) * 2;
		uint64_t *n = realloc(t->dev_at, cap * sizeof(*n));
		if (!n)
			return hv_error_set(HV_ENOMEM, "out of memory");
		t->dev_at = n;
		t->cap = cap;
	}
	t->dev_at[d] = e->lst.dev;
	bool known = false;
	for (size_t i = 0; i < t->n_seen && !known; i++)
		known = t->seen[i].dev == e->lst.dev;
	if (!known) {
		int fd = hv_walk_openat(w, O_PATH | O_DIRECTORY);
		trust_dev(t, e->lst.dev, fd, e->lst.ctime_ns);
		if (fd >= 0)
			close(fd);
	}
	return HV_OK;
}

static bool trust_parent(const struct trust *t, const hv_entry *e)
{
	size_t d = (size_t)e->depth - 1;
	if (d >= t->cap)
		return false;
	for (size_t i = 0; i < t->n_seen; i++)
		if (t->seen[i].dev == t->dev_at[d])
			return t->seen[i].ok;
	return false;
}

static void warn_unexamined(const hv_collect_opts *opts, const char *root, const char *path,
			    int err)
{
	char *msg = NULL;
	if (asprintf(&msg, "%s/%s: %s", strcmp(root, "/") ? root : "", path, strerror(err)) < 0)
		msg = NULL;
	hvc_warn(opts, msg ? msg : "an entry could not be examined");
	free(msg);
}

/* The length of the directory part of a path below the root ("a/b" of "a/b/c"; 0, the root
 * itself, for "c"). */
static size_t parent_len(const char *path, size_t len)
{
	while (len > 0 && path[len - 1] != '/')
		len--;
	return len > 0 ? len - 1 : 0;
}

/* The walk of a snapshot taken at time at (ns): each entry, with its SHA-256 when racy. With
 * names, a file on a trusted file system is given named (no lstat, no digest). */
static hv_status snapshot_walk(const char *root, const hv_collect_opts *opts, int64_t at,
			       hv_walk_sort sort, bool names, snap_add_fn add,
			       snap_unread_fn unread, void *ctx, uint64_t *entries)
{
	hv_walk *w;
	int rc = names ? hv_collect_walk_open_names(&w, root, opts)
		       : hv_collect_walk_open(&w, root, opts, sort);
	if (rc != HV_OK)
		return rc;
	struct trust t = {0};
	if (names) {
		/* The root, depth 0. */
		int fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
		struct stat rst;
		hv_entry re = {.depth = 0};
		if (fd >= 0 && fstat(fd, &rst) == 0) {
			HV_STAT_FROM(&rst, &re.lst);
			trust_dev(&t, re.lst.dev, fd, re.lst.ctime_ns);
			rc = trust_note_dir(&t, w, &re);
		}
		if (fd >= 0)
			close(fd);
	}
	uint64_t count = 0;
	const hv_entry *e;
	hv_entry copy;
	hv_buf last_unread = {0}; /* the directory last recorded for an entry not examined */
	bool have_last = false;
	while (rc == HV_OK && (rc = hv_walk_next(w, &e)) != HV_DONE) {
		if (rc == HV_WARN) {
			hvc_warn(opts, hv_error_last());
			size_t len;
			const char *dir = hv__walk_unread_dir(w, &len);
			rc = dir ? unread(ctx, dir, len) : HV_OK;
			continue;
		}
		if (rc != HV_OK)
			break;
		bool named = names && hv__walk_named(w);
		if ((named && !trust_parent(&t, e)) || (!named && !e->have_lstat)) {
			/* Not a file system whose ctime says it all, or lstat failed: its state now,
			 * as without names. Gone since it was listed: not there to compare against.
			 * Any other failure (a directory that can be read but not searched) leaves
			 * the snapshot without an entry that is there, which a collect would call
			 * created: warned of, so the snapshot is incomplete (exit 1), as for a
			 * directory not read. A directory (as its listing says) is warned of by the
			 * walk next, which records it as not read. */
			copy = *e;
			if (hv__walk_lstat(w, &copy.lst) != 0) {
				if (errno != ENOENT && e->type != HV_FT_DIR) {
					warn_unexamined(opts, root, e->path, errno);
					/* Its directory is recorded as not read (once), so a collect
					 * since says why what is below it is called created. */
					size_t plen = parent_len(e->path, e->path_len);
					if (!have_last || last_unread.len != plen ||
					    memcmp(last_unread.data, e->path, plen) != 0) {
						hv_buf_truncate(&last_unread, 0);
						have_last = true;
						rc = hv_buf_append(&last_unread, e->path, plen);
						if (rc == HV_OK)
							rc = unread(ctx, e->path, plen);
					}
				}
				continue;
			}
			copy.have_lstat = true;
			copy.type = hv_ftype_from_mode(copy.lst.mode);
			e = &copy;
			named = false;
		}
		if (names && e->type == HV_FT_DIR && (rc = trust_note_dir(&t, w, e)) != HV_OK)
			break;
		char hex[65];
		const char *sha = NULL;
		if (!named && S_ISREG(e->lst.mode) && hv_store_stat_is_racy(&e->lst, at) &&
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
		rc = add(ctx, e, sha, named);
		if (rc != HV_OK)
			break;
		count++;
		if (opts->on_progress)
			opts->on_progress(opts->ctx, count, 0, 0);
	}
	hv_walk_close(w);
	free(t.dev_at);
	hv_buf_free(&last_unread);
	*entries = count;
	return rc == HV_DONE ? HV_OK : rc;
}

static hv_status writer_add(void *ctx, const hv_entry *e, const char *sha, bool named)
{
	(void)named; /* never: a stored snapshot's walk lists with lstat */
	return hv_snapshot_writer_add(ctx, e->path, e->path_len, &e->lst, sha);
}

static hv_status writer_unread(void *ctx, const char *dir, size_t len)
{
	return hv__snapshot_writer_unread(ctx, dir, len);
}

static hv_status mem_unread(void *ctx, const char *dir, size_t len)
{
	hv_mem_snapshot *m = ctx;
	int rc = hv_buf_append(&m->unread, dir, len);
	return rc == HV_OK ? hv_buf_append_char(&m->unread, '\0') : rc;
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
	HV_NEED(dir);
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
	hv_buf key = {0};
	rc = hvc_filters_key(opts, &key);
	if (rc == HV_OK)
		rc = hv__snapshot_writer_filters(sw, key.data, key.len);
	hv_buf_free(&key);
	uint64_t count = 0;
	/* The store sorts the entries itself: the walk need not. */
	if (rc == HV_OK)
		rc = snapshot_walk(root, opts, hv_snapshot_writer_created_at(sw), HV_SORT_NONE,
				   false, writer_add, writer_unread, sw, &count);
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

static hv_status mem_add(void *ctx, const hv_entry *e, const char *sha, bool named)
{
	hv_mem_snapshot *m = ctx;
	/* The database's own files are never artifacts: not there to compare against either
	 * (a named entry has no device: known by name). */
	if ((!named && hvc_is_db_file(&m->dbf, &e->lst)) || hvc_is_db_path(m->root, m->st, e))
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
	/* Pre-order: the entry's directory is the last entry one level up (the root at depth 1).
	 * A walk that broke that would make the paths rebuilt from the names wrong. */
	if (e->depth < 1 || (size_t)e->depth > m->last_depth + 1 ||
	    e->path_len < e->name_len || memcmp(e->path + e->path_len - e->name_len, e->name,
					       e->name_len) != 0)
		return hv_error_set(HV_EIO, "%s: out of walk order in the snapshot", e->path);
	m->last_depth = (size_t)e->depth;
	struct hvc_mem_entry *me = &m->e[m->n];
	me->off = m->names.len;
	me->len = e->name_len;
	me->depth = (size_t)e->depth;
	me->st = e->lst;
	me->sha = 0;
	me->named = named;
	m->n_named += named;
	char *before = m->names.data;
	if (hv_buf_append(&m->names, e->name, e->name_len) != HV_OK)
		return HV_ENOMEM;
	if (m->names.data != before)
		m->names_present = 0;
	hv_prefault_ahead(m->names.data, m->names.len, m->names.cap, &m->names_present);
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
	HV_NEED(dir && out);
	*out = NULL;
	hv_collect_opts defaults;
	opts = hvc_opts_or_defaults(opts, &defaults);
	hv_mem_snapshot *m = calloc(1, sizeof(*m));
	if (!m)
		return hv_error_set(HV_ENOMEM, "out of memory");
	m->st = st;
	hvc_db_files_init(&m->dbf, st);
	int rc = hvc_filters_key(opts, &m->filters);
	if (rc == HV_OK)
		rc = snapshot_prepare(dir, &m->root);
	/* The real time before anything is listed: every change made before the listing has a
	 * ctime not later than this. Not the coarse clock's reading: a file time may be finer
	 * than it and ahead of it (the kernel's multigrain times), and the coarse clock may be
	 * more than a tick behind (a tick handled late). */
	int64_t start = hv_clock_ns(CLOCK_REALTIME);
	if (rc == HV_OK) {
		uint64_t count;
		rc = snapshot_walk(m->root, opts, hv_store_now_ns(), HV_SORT_NAME, true, mem_add,
				   mem_unread, m, &count);
	}
	if (rc == HV_OK && m->n_named) {
		/* Once the coarse clock is past start, a change from then on has a ctime not older
		 * than since_ns (a file time is the coarse clock's, or finer and later), and one
		 * before the listing is older. A walk shorter than a tick waits for it. */
		while ((m->since_ns = hv_clock_ns(CLOCK_REALTIME_COARSE)) <= start) {
			struct timespec ts = {0, 250000};
			nanosleep(&ts, NULL);
		}
		m->clock_off = hv_clock_ns(CLOCK_REALTIME) - hv_clock_ns(CLOCK_MONOTONIC);
	}
	if (rc != HV_OK) {
		hv_mem_snapshot_free(m);
		return rc;
	}
	*out = m;
	return HV_OK;
}

void hvc_since_clock_init(const hv_mem_snapshot *m, struct hvc_since_clock *c)
{
	c->now_ns = hv_clock_ns(CLOCK_REALTIME);
	int64_t back = m->clock_off - (c->now_ns - hv_clock_ns(CLOCK_MONOTONIC));
	c->since_ns = m->since_ns;
	c->no_upper = false;
	if (back > 1000000) {
		/* The clock was set back since (by back ns): changes since have older times than
		 * it said then, and files may have times later than now. */
		c->since_ns -= back;
		c->no_upper = true;
	}
}

bool hvc_mem_changed(struct hvc_since_clock *c, int64_t ctime_ns)
{
	if (ctime_ns < c->since_ns)
		return false;
	if (c->no_upper || ctime_ns <= c->now_ns)
		return true;
	/* Later than the clock was: read it again. A file changed since has a time not later
	 * than now; one still later was stamped before the snapshot, by a clock that was ahead,
	 * and has not changed (a change would have stamped it now). */
	c->now_ns = hv_clock_ns(CLOCK_REALTIME);
	return ctime_ns <= c->now_ns;
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
	hv_buf_free(&m->names);
	hv_buf_free(&m->filters);
	hv_buf_free(&m->unread);
	free(m->e);
	free(m->shas);
	free(m);
}
