/* Change tracking with fanotify (see changes.h).
 *
 * The marks are whole file systems, so the events are of every process and every directory
 * of them; a thread reads them while the command runs and keeps only those that may concern
 * root: it resolves each directory handle once (open_by_handle_at through a descriptor of
 * the file system, then the descriptor's path), and drops events in directories that are
 * outside root. A handle that no longer resolves (the directory is gone) is kept: its path
 * is known later from the event that deleted it (FAN_REPORT_TARGET_FID gives the deleted
 * directory's own handle).
 *
 * After the run, each name an event touched (a slot: directory and name) says what was there
 * before the run: the first event of a slot tells it (a creation first: nothing; anything
 * else: something was). Paths are examined once, after the run. What events cannot tell
 * without a state before the run makes the result fail (HV_EIO) rather than be wrong: an
 * overflow, a directory renamed or moved in, out of or within root, a directory handle that
 * does not resolve, a mount or unmount below root. A change to a file with several names
 * (hard links) changes all of them: their names are found by one walk after the run. */
#include "changes.h"
#include "harvest/sys/store.h"
#include "harvest/walk.h"
#include "internal.h"
#include "test_hook.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

/* valgrind runs a clone that shares memory only as a thread or a vfork: any other ends the
 * whole process ("Valgrind does not support general clone()"), so there the holder is forked. */
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define HV_UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#ifndef HV_UNDER_VALGRIND
#define HV_UNDER_VALGRIND() false
#endif

#define EVENT_MASK                                                                           \
	(FAN_CREATE | FAN_DELETE | FAN_RENAME | FAN_MODIFY | FAN_ATTRIB | FAN_CLOSE_WRITE |      \
	 FAN_ONDIR)
#define READ_BUF 65536
#define MAX_FH 128 /* MAX_HANDLE_SZ */

enum where { W_UNSEEN = 0, W_IN, W_OUT, W_STALE, W_UNKNOWN };

/* A file handle seen in an event: a directory (of a name) or an object (the target). */
struct node {
	uint64_t fsid;
	int type;
	unsigned len;
	unsigned char h[MAX_FH];
	uint64_t hash;
	int where;          /* at the thread's first sight */
	int where_end;      /* at the end */
	char *path;         /* relative to root at the end (W_IN), malloc'd */
	uint32_t del_parent; /* 1 + node of the directory it was deleted from, 0: none */
	uint32_t del_name;   /* offset in names */
	bool created;        /* a directory created during the run */
	bool resolving;      /* guard while its path is built */
	bool done;           /* path, where_end final */
};

struct ev {
	uint32_t mask;
	int32_t tid;
	uint32_t dir, dir2; /* 1 + node, 0: none (dir2: a rename's new directory) */
	uint32_t obj;       /* 1 + node of the object itself */
	uint32_t name, name2;
	bool over;          /* a rename that replaced a file at its new name */
	bool paired;        /* a link count event that goes with a kept name's event */
};

/* What a thread's last events were: the kernel reports a rename over a file as the rename,
 * then the replaced file's link count (an event without a name) from the same thread; an
 * unlink or a link reports the link count first, then the name's event of the same file. */
struct tid_state {
	int32_t tid;       /* 0: empty slot */
	bool last_rename;  /* the thread's last event was a kept rename, at last_idx */
	size_t last_idx;
	uint32_t pending;  /* 1 + node of a link count after a rename, which a deletion or a
	                    * creation of the same file would show was not the rename's */
	size_t pending_idx, pending_count;
	uint32_t count_obj; /* the thread's last event, when a kept link count: its file */
	size_t count_idx;
};

struct mnt {
	uint64_t fsid;
	int fd;
};

struct hv_changes {
	int fan;
	char *root;
	size_t root_len;
	hv_collect_opts opts;
	struct stat root_st;
	struct mnt *mnts;
	size_t n_mnts;
	char *mounts_before; /* the mount points at or below root, one a line */
	int mounts_watch;    /* /proc/self/mountinfo opened before mounts_before was read, or -1 */
	int stop_pipe[2];
	pthread_t thread;
	bool thread_started;
	/* written by the thread until it is joined */
	struct node *nodes;
	size_t n_nodes, cap_nodes;
	uint32_t *table; /* open addressing: 1 + node, 0: empty */
	size_t table_cap;
	struct ev *evs;
	size_t n_evs, cap_evs;
	hv_buf names;
	bool overflow;
	int fail_status;
	char *fail_msg;
	int64_t start_ns;
	_Alignas(8) unsigned char scratch[8192];
	/* Directories known to be outside root, by device and inode: a directory made in one of
	 * them (a deep tree being built) is placed by one step up. */
	uint64_t (*outside)[2];
	size_t n_outside, cap_outside;
	struct tid_state *tids;
	size_t n_tids, cap_tids;
};

static int64_t coarse_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- mountinfo ---- */

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *o = s;
	for (char *p = s; *p; p++) {
		if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] >= '0' && p[2] <= '7' &&
		    p[3] >= '0' && p[3] <= '7') {
			*o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
			p += 3;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
}

static bool below(const char *path, const char *root, size_t rl)
{
	if (rl == 1)
		return path[0] == '/';
	return strncmp(path, root, rl) == 0 && (path[rl] == '\0' || path[rl] == '/');
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The mount points at or below root, sorted, one a line, into *out; HV_OK or HV_EIO. */
static hv_status mounts_below(const char *root, size_t rl, char **out)
{
	*out = NULL;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return hv_error_errno(HV_EIO, "/proc/self/mountinfo", errno);
	char *line = NULL;
	size_t cap = 0;
	char **v = NULL;
	size_t n = 0;
	hv_status rc = HV_OK;
	while (getline(&line, &cap, f) > 0) {
		char *save = NULL, *tok = strtok_r(line, " ", &save);
		for (int i = 0; tok && i < 4; i++)
			tok = strtok_r(NULL, " ", &save);
		if (!tok)
			continue;
		unescape(tok);
		if (!below(tok, root, rl))
			continue;
		char **nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv || !(nv[n] = strdup(tok))) {
			v = nv ? nv : v;
			rc = hv_error_set(HV_ENOMEM, "out of memory");
			break;
		}
		v = nv;
		n++;
	}
	free(line);
	(void)fclose(f);
	if (rc == HV_OK) {
		if (n > 1)
			qsort(v, n, sizeof(*v), cmp_str);
		hv_buf b = {0};
		for (size_t i = 0; i < n; i++) {
			hv_buf_append_str(&b, v[i]);
			hv_buf_append_char(&b, '\n');
		}
		hv_buf_append(&b, "", 0);
		if (b.failed) {
			hv_buf_free(&b);
			rc = hv_error_set(HV_ENOMEM, "out of memory");
		} else {
			*out = b.data;
		}
	}
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return rc;
}

/* Marks the file system of path and keeps a descriptor of it to resolve handles with. */
static hv_status mark_fs(hv_changes *c, const char *path)
{
	/* Not O_PATH: open_by_handle_at refuses one (EBADF). */
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return hv_error_errno(HV_EIO, path, errno);
	struct statfs sf;
	struct {
		struct file_handle fh;
		unsigned char buf[MAX_FH];
	} h;
	h.fh.handle_bytes = MAX_FH;
	int mnt_id;
	if (fstatfs(fd, &sf) != 0 ||
	    name_to_handle_at(fd, "", &h.fh, &mnt_id, AT_EMPTY_PATH) != 0) {
		int err = errno;
		close(fd);
		return hv_error_set(HV_EIO, "%s: the file system gives no file handles (%s)", path,
				    strerror(err));
	}
	uint64_t fsid;
	memcpy(&fsid, &sf.f_fsid, sizeof(fsid));
	for (size_t i = 0; i < c->n_mnts; i++) {
		if (c->mnts[i].fsid == fsid) {
			close(fd);
			return hv_error_set(HV_EIO,
					    "%s: its file system is mounted twice at or below %s",
					    path, c->root);
		}
	}
	if (fanotify_mark(c->fan, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, EVENT_MASK, AT_FDCWD,
			  path) != 0) {
		int err = errno;
		close(fd);
		return hv_error_set(HV_EIO, "%s: fanotify_mark: %s", path, strerror(err));
	}
	struct mnt *m = realloc(c->mnts, (c->n_mnts + 1) * sizeof(*m));
	if (!m) {
		close(fd);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	c->mnts = m;
	m[c->n_mnts++] = (struct mnt){fsid, fd};
	return HV_OK;
}

static int mount_fd(const hv_changes *c, uint64_t fsid)
{
	for (size_t i = 0; i < c->n_mnts; i++)
		if (c->mnts[i].fsid == fsid)
			return c->mnts[i].fd;
	return -1;
}

/* ---- handles ---- */

static uint64_t hash_bytes(uint64_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static hv_status table_grow(hv_changes *c)
{
	size_t cap = c->table_cap ? c->table_cap * 2 : 1024;
	uint32_t *t = calloc(cap, sizeof(*t));
	if (!t)
		return HV_ENOMEM;
	for (size_t i = 0; i < c->n_nodes; i++) {
		size_t at = c->nodes[i].hash & (cap - 1);
		while (t[at])
			at = (at + 1) & (cap - 1);
		t[at] = (uint32_t)i + 1;
	}
	free(c->table);
	c->table = t;
	c->table_cap = cap;
	return HV_OK;
}

/* The node of a handle (1 + index), interned; 0 when out of memory. */
static uint32_t intern(hv_changes *c, uint64_t fsid, const struct file_handle *fh)
{
	if (fh->handle_bytes > MAX_FH)
		return 0;
	uint64_t h = hash_bytes(1469598103934665603ull, (const unsigned char *)&fsid, 8);
	h = hash_bytes(h, (const unsigned char *)&fh->handle_type, sizeof(fh->handle_type));
	h = hash_bytes(h, fh->f_handle, fh->handle_bytes);
	if ((c->n_nodes + 1) * 2 > c->table_cap && table_grow(c) != HV_OK)
		return 0;
	size_t at = h & (c->table_cap - 1);
	while (c->table[at]) {
		const struct node *n = &c->nodes[c->table[at] - 1];
		if (n->hash == h && n->fsid == fsid && n->type == fh->handle_type &&
		    n->len == fh->handle_bytes && memcmp(n->h, fh->f_handle, n->len) == 0)
			return c->table[at];
		at = (at + 1) & (c->table_cap - 1);
	}
	if (c->n_nodes == c->cap_nodes) {
		size_t cap = c->cap_nodes ? c->cap_nodes * 2 : 256;
		struct node *nn = realloc(c->nodes, cap * sizeof(*nn));
		if (!nn)
			return 0;
		c->nodes = nn;
		c->cap_nodes = cap;
	}
	struct node *n = &c->nodes[c->n_nodes];
	memset(n, 0, sizeof(*n));
	n->fsid = fsid;
	n->type = fh->handle_type;
	n->len = fh->handle_bytes;
	memcpy(n->h, fh->f_handle, n->len);
	n->hash = h;
	c->table[at] = (uint32_t)++c->n_nodes;
	return (uint32_t)c->n_nodes;
}

/* Opens the node's object (O_PATH); -1 with errno. */
static int node_open(const hv_changes *c, const struct node *n)
{
	int mfd = mount_fd(c, n->fsid);
	if (mfd < 0) {
		errno = EXDEV;
		return -1;
	}
	struct {
		struct file_handle fh;
		unsigned char buf[MAX_FH];
	} h;
	h.fh.handle_bytes = n->len;
	h.fh.handle_type = n->type;
	memcpy(h.fh.f_handle, n->h, n->len);
	return open_by_handle_at(mfd, &h.fh, O_PATH | O_CLOEXEC);
}

static uint64_t devino_hash(uint64_t dev, uint64_t ino)
{
	return (dev * 1099511628211ull) ^ (ino * 0x9e3779b97f4a7c15ull);
}

static bool outside_has(const hv_changes *c, uint64_t dev, uint64_t ino)
{
	if (!c->cap_outside)
		return false;
	size_t at = devino_hash(dev, ino) & (c->cap_outside - 1);
	while (c->outside[at][0] || c->outside[at][1]) {
		if (c->outside[at][0] == dev + 1 && c->outside[at][1] == ino)
			return true;
		at = (at + 1) & (c->cap_outside - 1);
	}
	return false;
}

static void outside_add(hv_changes *c, uint64_t dev, uint64_t ino)
{
	if ((c->n_outside + 1) * 2 > c->cap_outside) {
		size_t cap = c->cap_outside ? c->cap_outside * 2 : 256;
		uint64_t(*t)[2] = calloc(cap, sizeof(*t));
		if (!t)
			return; /* only a cache */
		for (size_t i = 0; i < c->cap_outside; i++) {
			if (!c->outside[i][0] && !c->outside[i][1])
				continue;
			size_t at = devino_hash(c->outside[i][0] - 1, c->outside[i][1]) & (cap - 1);
			while (t[at][0] || t[at][1])
				at = (at + 1) & (cap - 1);
			t[at][0] = c->outside[i][0];
			t[at][1] = c->outside[i][1];
		}
		free(c->outside);
		c->outside = t;
		c->cap_outside = cap;
	}
	size_t at = devino_hash(dev, ino) & (c->cap_outside - 1);
	while (c->outside[at][0] || c->outside[at][1]) {
		if (c->outside[at][0] == dev + 1 && c->outside[at][1] == ino)
			return;
		at = (at + 1) & (c->cap_outside - 1);
	}
	c->outside[at][0] = dev + 1;
	c->outside[at][1] = ino;
	c->n_outside++;
}

#define JUMP 1000 /* levels climbed by one openat of "../../..." */
#define STEPS 16  /* single steps first, looking for a directory known to be outside */

/* The directory n levels above fd's (n <= JUMP; stops at the top), O_PATH; -1 if none. */
static int climb(int fd, size_t n)
{
	char up[3 * JUMP + 1];
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		memcpy(up + at, "../", 3);
		at += 3;
	}
	up[at ? at - 1 : 0] = '\0';
	return openat(fd, at ? up : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
}

static size_t path_depth(const char *p)
{
	size_t d = 0;
	for (; *p; p++)
		d += *p == '/' && p[1] && p[1] != '/';
	return d;
}

/* A directory whose path is too long to read (over a page): whether root is among its
 * ancestors. Climbs JUMP levels at a time until an ancestor's path can be read; when root
 * may lie between the two, compares the ancestor at root's depth with root. W_OUT, or
 * W_UNKNOWN (inside root, where its path cannot be had, or cannot tell). */
static int climb_jumps(hv_changes *c, int fd);

static int climb_where(hv_changes *c, int fd, const struct stat *st)
{
	if (!S_ISDIR(st->st_mode))
		return W_UNKNOWN;
	/* A few steps up first: a parent known to be outside settles it. */
	uint64_t seen[STEPS + 1][2];
	size_t n_seen = 0;
	int cur = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	struct stat cs = *st;
	for (size_t i = 0; cur >= 0 && i <= STEPS; i++) {
		if (cs.st_dev == c->root_st.st_dev && cs.st_ino == c->root_st.st_ino)
			break;
		if (outside_has(c, cs.st_dev, cs.st_ino)) {
			for (size_t k = 0; k < n_seen; k++)
				outside_add(c, seen[k][0], seen[k][1]);
			close(cur);
			return W_OUT;
		}
		seen[n_seen][0] = cs.st_dev;
		seen[n_seen][1] = cs.st_ino;
		n_seen++;
		if (i == STEPS)
			break;
		int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		close(cur);
		cur = up;
		if (cur < 0 || fstat(cur, &cs) != 0)
			break;
	}
	if (cur >= 0)
		close(cur);
	int w = climb_jumps(c, fd);
	if (w == W_OUT)
		for (size_t k = 0; k < n_seen; k++)
			outside_add(c, seen[k][0], seen[k][1]);
	return w;
}

/* climb_where() past the first steps: JUMP levels at a time. */
static int climb_jumps(hv_changes *c, int fd)
{
	int cur = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	size_t total = 0;
	char buf[4096];
	ssize_t n = -1;
	while (cur >= 0 && total < ((size_t)1 << 40)) {
		int up = climb(cur, JUMP);
		close(cur);
		cur = up;
		if (cur < 0)
			break;
		total += JUMP;
		char link[64];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", cur);
		n = readlink(link, buf, sizeof(buf) - 1);
		if (n >= 0 || errno != ENAMETOOLONG)
			break;
	}
	if (cur >= 0)
		close(cur);
	if (n <= 0 || buf[0] != '/')
		return W_UNKNOWN;
	buf[n] = '\0';
	if (below(buf, c->root, c->root_len))
		return W_UNKNOWN; /* deep inside root */
	if (!below(c->root, buf, (size_t)n) || (n == 1 && c->root_len == 1))
		return W_OUT; /* root is not below this ancestor: not below it either */
	if (n == 1)
		return W_UNKNOWN; /* climbed to the top: how far is not known */
	/* Root is below the ancestor: look at the directory's ancestor at root's depth. */
	size_t dr = path_depth(c->root), da = path_depth(buf);
	size_t dist = total - (dr - da);
	if (dr - da > total)
		return W_UNKNOWN;
	cur = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	while (cur >= 0 && dist > 0) {
		size_t k = dist < JUMP ? dist : JUMP;
		int up = climb(cur, k);
		close(cur);
		cur = up;
		dist -= k;
	}
	if (cur < 0)
		return W_UNKNOWN;
	struct stat as;
	int w = fstat(cur, &as) == 0 && (as.st_dev != c->root_st.st_dev ||
					 as.st_ino != c->root_st.st_ino)
			? W_OUT
			: W_UNKNOWN;
	close(cur);
	return w;
}

/* Where the object of fd is: W_IN with *rel (malloc'd, "" for root itself), W_OUT, W_STALE
 * (deleted), W_UNKNOWN (its path cannot be trusted). */
static int fd_where(hv_changes *c, int fd, char **rel)
{
	*rel = NULL;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return W_UNKNOWN;
	if (st.st_nlink == 0)
		return W_STALE;
	char link[64], buf[8192];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, buf, sizeof(buf) - 1);
	if (n < 0 && errno == ENAMETOOLONG)
		return climb_where(c, fd, &st);
	if (n <= 0 || n >= (ssize_t)sizeof(buf) - 1 || buf[0] != '/')
		return W_UNKNOWN;
	buf[n] = '\0';
	hv__test_hook_call(HV__HOOK_CHANGES_RESOLVE, buf);
	/* The path is trusted only if it names the same object now. */
	struct stat ls;
	if (lstat(buf, &ls) != 0 || ls.st_dev != st.st_dev || ls.st_ino != st.st_ino)
		return below(buf, c->root, c->root_len) ? W_UNKNOWN : W_OUT;
	if (!below(buf, c->root, c->root_len))
		return W_OUT;
	const char *r = buf + c->root_len;
	if (c->root_len > 1 && *r == '/')
		r++;
	else if (c->root_len == 1)
		r = buf + 1;
	*rel = strdup(r);
	return *rel ? W_IN : W_UNKNOWN;
}

static int node_where(hv_changes *c, const struct node *n, char **rel)
{
	*rel = NULL;
	int fd = node_open(c, n);
	if (fd < 0) {
		int err = errno;
		return err == ESTALE || err == ENOENT ? W_STALE : W_UNKNOWN;
	}
	int w = fd_where(c, fd, rel);
	close(fd);
	return w;
}

/* ---- the thread ---- */

static uint32_t add_name(hv_changes *c, const char *name)
{
	uint32_t off = (uint32_t)c->names.len;
	hv_buf_append(&c->names, name, strlen(name) + 1);
	return off;
}

/* Whether an event with these directories (1 + node, 0: none) may concern root. */
static bool dir_relevant(hv_changes *c, uint32_t d)
{
	if (!d)
		return false;
	struct node *n = &c->nodes[d - 1];
	if (n->where == W_UNSEEN) {
		char *rel;
		n->where = node_where(c, n, &rel);
		free(rel);
	}
	return n->where != W_OUT;
}

/* The state of thread tid, made when new; NULL when out of memory. */
static struct tid_state *tid_get(hv_changes *c, int32_t tid)
{
	if ((c->n_tids + 1) * 2 > c->cap_tids) {
		size_t cap = c->cap_tids ? c->cap_tids * 2 : 256;
		struct tid_state *t = calloc(cap, sizeof(*t));
		if (!t)
			return NULL;
		for (size_t i = 0; i < c->cap_tids; i++) {
			if (!c->tids[i].tid)
				continue;
			size_t at = (size_t)c->tids[i].tid & (cap - 1);
			while (t[at].tid)
				at = (at + 1) & (cap - 1);
			t[at] = c->tids[i];
		}
		free(c->tids);
		c->tids = t;
		c->cap_tids = cap;
	}
	size_t at = (size_t)tid & (c->cap_tids - 1);
	while (c->tids[at].tid && c->tids[at].tid != tid)
		at = (at + 1) & (c->cap_tids - 1);
	if (!c->tids[at].tid) {
		c->tids[at].tid = tid;
		c->n_tids++;
	}
	return &c->tids[at];
}

/* Follows each thread's events (all of them, kept or not) to tell renames over a file. */
static void track_thread(hv_changes *c, const struct ev *e, bool kept)
{
	struct tid_state *t = tid_get(c, e->tid ? e->tid : -1);
	if (!t) {
		c->fail_status = HV_ENOMEM;
		return;
	}
	bool linkcount = !e->dir && !e->dir2 && (e->mask & FAN_ATTRIB) && e->obj;
	if (t->pending && (e->mask & (FAN_DELETE | FAN_CREATE)) && e->obj == t->pending) {
		c->evs[t->pending_idx].over = false; /* an unlink's or a link's count, not it */
		c->evs[t->pending_count].paired = false;
	}
	/* An unlink or a link: the count first, then the name's event of the same file. */
	if (kept && t->count_obj && (e->mask & (FAN_DELETE | FAN_CREATE)) && e->obj == t->count_obj)
		c->evs[t->count_idx].paired = true;
	t->pending = 0;
	t->count_obj = 0;
	if (linkcount && kept && t->last_rename && e->obj != c->evs[t->last_idx].obj) {
		c->evs[t->last_idx].over = true;
		c->evs[c->n_evs - 1].paired = true; /* the replaced file's count */
		t->pending = e->obj;
		t->pending_idx = t->last_idx;
		t->pending_count = c->n_evs - 1;
	}
	if (linkcount && kept) {
		t->count_obj = e->obj;
		t->count_idx = c->n_evs - 1;
	}
	t->last_rename = kept && (e->mask & FAN_RENAME);
	t->last_idx = kept ? c->n_evs - 1 : 0;
}

static void take_event(hv_changes *c, const struct fanotify_event_metadata *m)
{
	if (m->mask & FAN_Q_OVERFLOW) {
		c->overflow = true;
		return;
	}
	struct ev e = {.mask = (uint32_t)m->mask, .tid = m->pid};
	const char *p = (const char *)(m + 1), *end = (const char *)m + m->event_len;
	while (p + sizeof(struct fanotify_event_info_header) <= end) {
		const struct fanotify_event_info_header *hdr = (const void *)p;
		if (hdr->len == 0 || p + hdr->len > end)
			break;
		int t = hdr->info_type;
		if (t == FAN_EVENT_INFO_TYPE_FID || t == FAN_EVENT_INFO_TYPE_DFID_NAME ||
		    t == FAN_EVENT_INFO_TYPE_DFID || t == FAN_EVENT_INFO_TYPE_OLD_DFID_NAME ||
		    t == FAN_EVENT_INFO_TYPE_NEW_DFID_NAME) {
			const struct fanotify_event_info_fid *fi = (const void *)p;
			const struct file_handle *fh = (const void *)fi->handle;
			uint64_t fsid;
			memcpy(&fsid, &fi->fsid, sizeof(fsid));
			uint32_t id = intern(c, fsid, fh);
			if (!id) {
				c->fail_status = HV_ENOMEM;
				return;
			}
			const char *name = (const char *)fh->f_handle + fh->handle_bytes;
			if (t == FAN_EVENT_INFO_TYPE_FID) {
				e.obj = id;
			} else if (t == FAN_EVENT_INFO_TYPE_NEW_DFID_NAME) {
				e.dir2 = id;
				e.name2 = add_name(c, name);
			} else {
				e.dir = id;
				e.name = t == FAN_EVENT_INFO_TYPE_DFID ? add_name(c, "")
								       : add_name(c, name);
			}
		}
		p += hdr->len;
	}
	bool keep;
	if (!e.dir && !e.dir2) {
		/* An inode event without a name: a link count changed (link, unlink, a rename
		 * over it). Kept, and looked at after the run only when it goes with a name's
		 * event that was kept (track_thread): opening every such file here could make
		 * harvest hold the last reference to a file some other process just deleted, and
		 * pay for freeing it. */
		keep = e.obj != 0;
	} else {
		keep = dir_relevant(c, e.dir) || dir_relevant(c, e.dir2);
		/* A directory made in one known to be outside root is outside too: placed without
		 * resolving its handle, which costs a system call or more for every directory that
		 * other processes make (and often delete at once) anywhere on the file system. If
		 * it is moved into root later, its rename says so (walked where it then is), as for
		 * any directory first seen outside. */
		if (!keep && (e.mask & FAN_CREATE) && (e.mask & FAN_ONDIR) && e.obj && e.dir &&
		    c->nodes[e.dir - 1].where == W_OUT && c->nodes[e.obj - 1].where == W_UNSEEN)
			c->nodes[e.obj - 1].where = W_OUT;
		/* The deletion of a directory whose events were kept tells where it was (one first
		 * seen outside had none kept). */
		if (!keep && (e.mask & FAN_DELETE) && (e.mask & FAN_ONDIR) && e.obj &&
		    c->nodes[e.obj - 1].where != W_UNSEEN && c->nodes[e.obj - 1].where != W_OUT)
			keep = true;
	}
	if (!keep) {
		track_thread(c, &e, false);
		return;
	}
	if (c->n_evs == c->cap_evs) {
		size_t cap = c->cap_evs ? c->cap_evs * 2 : 256;
		struct ev *ne = realloc(c->evs, cap * sizeof(*ne));
		if (!ne) {
			c->fail_status = HV_ENOMEM;
			return;
		}
		c->evs = ne;
		c->cap_evs = cap;
	}
	c->evs[c->n_evs++] = e;
	track_thread(c, &e, true);
}

/* Takes the events in buf[0..n); how many there were. */
static size_t take_events(hv_changes *c, const char *buf, ssize_t n)
{
	size_t count = 0;
	/* Events are packed: each is copied to an aligned place before it is read. */
	ssize_t at = 0;
	while (n - at >= (ssize_t)sizeof(struct fanotify_event_metadata)) {
		struct fanotify_event_metadata head;
		memcpy(&head, buf + at, sizeof(head));
		if (head.event_len < sizeof(head) || head.event_len > (size_t)(n - at))
			break;
		if (head.vers == FANOTIFY_METADATA_VERSION && head.event_len <= sizeof(c->scratch)) {
			memcpy(c->scratch, buf + at, head.event_len);
			take_event(c, (const struct fanotify_event_metadata *)(void *)c->scratch);
		} else if (head.vers == FANOTIFY_METADATA_VERSION) {
			c->fail_status = HV_EIO;
		}
		at += head.event_len;
		count++;
	}
	return count;
}

/* One read of what is queued: the number of events read, 0 when nothing was queued, -1 at a
 * fatal read error. */
static ssize_t read_some(hv_changes *c, char *buf)
{
	for (;;) {
		ssize_t n = read(c->fan, buf, READ_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n < 0) {
			c->fail_status = HV_EIO;
			return -1;
		}
		return (ssize_t)take_events(c, buf, n);
	}
}

static void *drain(void *arg)
{
	hv_changes *c = arg;
	char *buf = malloc(READ_BUF);
	if (!buf) {
		c->fail_status = HV_ENOMEM;
		return NULL;
	}
	for (;;) {
		struct pollfd pf[2] = {{c->fan, POLLIN, 0}, {c->stop_pipe[0], POLLIN, 0}};
		int got = poll(pf, 2, -1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			break;
		if (pf[1].revents)
			break;
		if (read_some(c, buf) < 0)
			break;
	}
	/* The last of it: what was queued when the run ended, and no more (other processes
	 * may go on making events for ever). FIONREAD counts FAN_EVENT_METADATA_LEN bytes an
	 * event, whatever its records add: it tells how many events are queued. */
	int queued = 0;
	if (c->fail_status == HV_OK && ioctl(c->fan, FIONREAD, &queued) != 0)
		c->fail_status = HV_EIO;
	size_t left = queued > 0 ? (size_t)queued / FAN_EVENT_METADATA_LEN : 0;
	while (left > 0 && c->fail_status == HV_OK) {
		ssize_t n = read_some(c, buf);
		if (n <= 0)
			break;
		left = (size_t)n >= left ? 0 : left - (size_t)n;
	}
	free(buf);
	return NULL;
}

/* ---- start, stop ---- */

hv_status hv_changes_start(const char *root, const hv_collect_opts *opts, hv_changes **out)
{
	*out = NULL;
	hv_changes *c = calloc(1, sizeof(*c));
	if (!c)
		return hv_error_set(HV_ENOMEM, "out of memory");
	c->fan = -1;
	c->mounts_watch = -1;
	c->stop_pipe[0] = c->stop_pipe[1] = -1;
	c->root = strdup(root);
	if (opts)
		c->opts = *opts;
	else
		hv_collect_opts_init(&c->opts);
	hv_status rc = c->root ? HV_OK : hv_error_set(HV_ENOMEM, "out of memory");
	if (rc == HV_OK) {
		c->root_len = strlen(root);
		if (stat(root, &c->root_st) != 0)
			rc = hv_error_errno(HV_ENOTDIR, root, errno);
	}
	if (rc == HV_OK && c->opts.xdev)
		rc = hv_error_set(HV_EIO, "%s: change events are not used with --xdev", root);
	if (rc == HV_OK) {
		c->fan = fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_DFID_NAME_TARGET |
					       FAN_UNLIMITED_QUEUE | FAN_REPORT_TID | FAN_CLOEXEC |
					       FAN_NONBLOCK,
				       O_RDONLY | O_CLOEXEC);
		if (c->fan < 0)
			rc = hv_error_set(HV_EIO, "fanotify: %s", strerror(errno));
	}
	/* Polled after the run: the mount table has not changed since this open unless it says
	 * so (POLLPRI), and then only is it read again. */
	if (rc == HV_OK)
		c->mounts_watch = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	if (rc == HV_OK)
		rc = mounts_below(root, c->root_len, &c->mounts_before);
	/* The file system of root itself, then each one mounted below it. */
	if (rc == HV_OK)
		rc = mark_fs(c, root);
	for (const char *p = c->mounts_before; rc == HV_OK && p && *p;) {
		const char *nl = strchr(p, '\n');
		char *mp = strndup(p, (size_t)(nl - p));
		if (!mp) {
			rc = hv_error_set(HV_ENOMEM, "out of memory");
			break;
		}
		if (strcmp(mp, root) != 0)
			rc = mark_fs(c, mp);
		free(mp);
		p = nl + 1;
	}
	if (rc == HV_OK && pipe2(c->stop_pipe, O_CLOEXEC) != 0)
		rc = hv_error_errno(HV_EIO, "pipe", errno);
	if (rc == HV_OK) {
		c->start_ns = coarse_now_ns();
		if (pthread_create(&c->thread, NULL, drain, c) != 0)
			rc = hv_error_set(HV_EIO, "fanotify: cannot start a thread");
		else
			c->thread_started = true;
	}
	if (rc != HV_OK) {
		hv_error_saved saved;
		hv_error_save(&saved);
		hv_changes_free(c);
		return hv_error_restore(&saved, rc);
	}
	*out = c;
	return HV_OK;
}

hv_status hv_changes_stop(hv_changes *c)
{
	if (!c->thread_started)
		return HV_OK;
	ssize_t w;
	do
		w = write(c->stop_pipe[1], "x", 1);
	while (w < 0 && errno == EINTR);
	pthread_join(c->thread, NULL);
	c->thread_started = false;
	return HV_OK;
}

/* Closes every descriptor but keep_a and keep_b (async-signal-safe). */
static void close_all_but(int keep_a, int keep_b)
{
	int lo = keep_a < keep_b ? keep_a : keep_b, hi = keep_a < keep_b ? keep_b : keep_a;
	if (lo > 0)
		syscall(SYS_close_range, 0U, (unsigned)lo - 1, 0U);
	if (hi > lo + 1)
		syscall(SYS_close_range, (unsigned)lo + 1, (unsigned)hi - 1, 0U);
	syscall(SYS_close_range, (unsigned)hi + 1, ~0U, 0U);
}

/* The processes below run on stacks the sanitizers know nothing of, and share our memory. */
#if defined(__GNUC__) || defined(__clang__)
#define SHARED_VM_CODE __attribute__((no_sanitize_address))
#else
#define SHARED_VM_CODE
#endif

/* The holder of the last reference (see release_fan) shares our memory (CLONE_VM: no page
 * table is copied) and runs on this stack, kept for it for the life of the process. The
 * kernel writes the holder's tid into holder_tid before it runs (CLONE_PARENT_SETTID) and
 * zeroes it once it has exited and will never touch the stack again (CLONE_CHILD_CLEARTID):
 * 0 means the stack is free. Whoever moves holder_tid from 0 owns the slot: the stack,
 * holder_args and holder_pid. A release while a holder still waits takes the fork path.
 *
 * The holder is our child, but one that sends no signal when it exits: waitpid(-1) without
 * __WCLONE (or __WALL) never sees it, and no SIGCHLD handler is surprised by it. Its zombie is
 * reaped by the next release, or by init once we have exited (an adopted child is reparented
 * with SIGCHLD). */
#define HOLDER_STACK_SIZE (16 * 1024)
static _Alignas(64) char holder_stack[HOLDER_STACK_SIZE];
static pid_t holder_tid;
static pid_t holder_pid;

typedef struct fan_release {
	int fan, gate;
} fan_release;
static fan_release holder_args;

/* The holder: keeps fan only, waits for the gate's EOF, closes it and exits. It shares the
 * errno of a thread of ours that goes on running: raw system calls, none of which can fail
 * here (all signals are blocked: no EINTR). */
SHARED_VM_CODE static int holder_main(void *arg)
{
	const fan_release *fr = arg;
	close_all_but(fr->fan, fr->gate);
	char b = 0;
	syscall(SYS_read, fr->gate, &b, 1);
	syscall(SYS_close, fr->gate);
	syscall(SYS_close, fr->fan);
	return 0;
}

/* Gives the last reference to fan to a holder that shares our memory; false when that cannot
 * be done (the stack is in use, the clone is refused, or valgrind runs us) and nothing was
 * started. */
static bool release_fan_shared(int fan, int gate)
{
	pid_t free_stack = 0;
	if (HV_UNDER_VALGRIND() ||
	    !__atomic_compare_exchange_n(&holder_tid, &free_stack, -1, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return false;
	if (holder_pid > 0) {
		/* The last holder has exited (its tid was cleared): its zombie is ours to reap. */
		while (waitpid(holder_pid, NULL, __WCLONE) < 0 && errno == EINTR)
			;
		holder_pid = 0;
	}
	holder_args = (fan_release){fan, gate};
	pid_t pid = clone(holder_main, holder_stack + HOLDER_STACK_SIZE,
			  CLONE_VM | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID, &holder_args,
			  &holder_tid, NULL, &holder_tid);
	if (pid < 0) {
		__atomic_store_n(&holder_tid, 0, __ATOMIC_RELEASE);
		return false;
	}
	holder_pid = pid;
	return true;
}

/* Closes the fanotify descriptor off the run's path. The kernel frees a group's marks after a
 * grace period, which the group's last close waits for (~10 ms, more under load): a run would
 * pay it for nothing. So the last reference goes to a process that holds nothing
 * else and closes it there; ours is then closed at once. The holder closes only once ours is
 * closed (the gate pipe's end of EOF): closing first would leave the last close, and its
 * wait, to us. The holder shares our memory when it can (see holder_tid): a fork copies our
 * page tables, twice for the grandchild of the fallback, which costs more than a run of
 * `true`. Without fork, the close is waited for here. */
static void release_fan(int fan)
{
	int gate[2] = {-1, -1};
	if (pipe2(gate, O_CLOEXEC) != 0)
		gate[0] = gate[1] = -1;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (gate[0] < 0 || !release_fan_shared(fan, gate[0])) {
		pid_t pid = fork();
		if (pid == 0) {
			/* async-signal-safe calls only: the caller may have threads */
			if (fork() == 0) {
				if (gate[0] >= 0) {
					close_all_but(fan, gate[0]);
					char b;
					while (read(gate[0], &b, 1) < 0 && errno == EINTR)
						;
					close(gate[0]);
				} else {
					close_all_but(fan, fan);
				}
				close(fan);
			}
			_exit(0);
		}
		if (pid > 0)
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(fan);
	if (gate[1] >= 0) {
		close(gate[1]); /* now the holder's close is the last one */
		close(gate[0]);
	}
}

void hv_changes_free(hv_changes *c)
{
	if (!c)
		return;
	hv_changes_stop(c);
	if (c->fan >= 0)
		release_fan(c->fan);
	if (c->mounts_watch >= 0)
		close(c->mounts_watch);
	for (size_t i = 0; i < c->n_mnts; i++)
		close(c->mnts[i].fd);
	for (size_t i = 0; i < c->n_nodes; i++)
		free(c->nodes[i].path);
	if (c->stop_pipe[0] >= 0)
		close(c->stop_pipe[0]);
	if (c->stop_pipe[1] >= 0)
		close(c->stop_pipe[1]);
	free(c->mnts);
	free(c->mounts_before);
	free(c->nodes);
	free(c->table);
	free(c->evs);
	hv_buf_free(&c->names);
	free(c->fail_msg);
	free(c->tids);
	free(c->outside);
	free(c->root);
	free(c);
}

/* ---- the result ---- */

static const char *name_at(const hv_changes *c, uint32_t off)
{
	return c->names.data + off;
}

/* Fills where_end and path of node id (1 + index): resolved now, or for a directory deleted
 * during the run, from the event that deleted it (iteratively: trees may be deep). */
static void node_resolve(hv_changes *c, uint32_t id)
{
	struct node *n = &c->nodes[id - 1];
	if (n->done)
		return;
	/* Climb while the nodes are stale and their deletion is known. */
	uint32_t *chain = NULL;
	size_t len = 0, cap = 0;
	uint32_t cur = id;
	for (;;) {
		struct node *x = &c->nodes[cur - 1];
		if (x->done)
			break;
		if (x->resolving) { /* a cycle: cannot be */
			x->where_end = W_UNKNOWN;
			x->done = true;
			break;
		}
		x->resolving = true;
		char *rel;
		int w = node_where(c, x, &rel);
		if (w != W_STALE || !x->del_parent) {
			x->where_end = w;
			x->path = rel;
			x->done = true;
			break;
		}
		free(rel);
		if (len == cap) {
			cap = cap ? cap * 2 : 16;
			uint32_t *nc = realloc(chain, cap * sizeof(*nc));
			if (!nc) {
				x->where_end = W_UNKNOWN;
				x->done = true;
				break;
			}
			chain = nc;
		}
		chain[len++] = cur;
		cur = x->del_parent;
	}
	/* Down again: each deleted directory is its parent's path and its name. */
	while (len > 0) {
		struct node *x = &c->nodes[chain[--len] - 1];
		const struct node *parent = &c->nodes[x->del_parent - 1];
		x->where_end = parent->where_end == W_IN ? W_STALE : parent->where_end;
		if (parent->where_end == W_IN || (parent->where_end == W_STALE && parent->path)) {
			const char *nm = name_at(c, x->del_name);
			if (!*parent->path)
				x->path = strdup(nm);
			else if (asprintf(&x->path, "%s/%s", parent->path, nm) < 0)
				x->path = NULL;
			x->where_end = x->path ? W_STALE : W_UNKNOWN;
		} else if (parent->where_end == W_STALE) {
			x->where_end = W_OUT; /* its parent's deletion was outside root */
		}
		x->done = true;
	}
	free(chain);
}

/* Whether a node's path (at the end, or where it was deleted) is inside root. */
static bool node_in(const struct node *n)
{
	return (n->where_end == W_IN || n->where_end == W_STALE) && n->path;
}

struct slot {
	uint32_t dir;
	uint32_t name;
	size_t ev; /* the event's position: the slot's history in order */
	uint32_t mask;
	bool appear; /* this event made something appear at the slot */
	bool over;   /* a rename over what was there */
};

/* qsort_r's comparator: runs in several threads at once must not share a context. */
static int slot_cmp(const void *a, const void *b, void *ctx)
{
	const hv_changes *c = ctx;
	const struct slot *x = a, *y = b;
	if (x->dir != y->dir)
		return x->dir < y->dir ? -1 : 1;
	int n = strcmp(name_at(c, x->name), name_at(c, y->name));
	if (n)
		return n;
	return x->ev < y->ev ? -1 : x->ev > y->ev ? 1 : 0;
}

/* The collect's excludes and the database's own files: never artifacts, never deleted. */
static bool excluded(const hv_changes *c, const hv_store *st, const char *rel)
{
	const char *p = rel;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		char comp[256];
		if (n == 0 || n >= sizeof(comp))
			return n != 0;
		memcpy(comp, p, n);
		comp[n] = '\0';
		if (!c->opts.include_hidden && (comp[0] == '.' || !strcmp(comp, "__pycache__")))
			return true;
		for (size_t i = 0; i < c->opts.n_excludes; i++)
			if (fnmatch(c->opts.excludes[i], comp, 0) == 0)
				return true;
		if (!slash)
			break;
		p = slash + 1;
	}
	if (st) {
		const char *db = hv_store_path(st);
		if (below(db, c->root, c->root_len)) {
			const char *dr = db + c->root_len + (c->root_len > 1);
			size_t dl = strlen(dr);
			if (strncmp(rel, dr, dl) == 0 &&
			    (!rel[dl] || !strcmp(rel + dl, "-wal") || !strcmp(rel + dl, "-shm") ||
			     !strcmp(rel + dl, "-journal")))
				return true;
		}
	}
	return false;
}

struct cand {
	char *path;
	const char *change;
	bool time_check;
	int prio; /* 0: from the name's own events, which know whether it was there before */
};

struct cands {
	struct cand *v;
	size_t n, cap;
	char **del;
	size_t n_del, cap_del;
	struct {
		uint64_t dev, ino;
	} *inodes; /* files with several names: all their names are looked for */
	size_t n_inodes, cap_inodes;
};

static hv_status cand_add(struct cands *k, char *path, const char *change, bool time_check,
			  int prio)
{
	if (!path)
		return hv_error_set(HV_ENOMEM, "out of memory");
	if (k->n == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 64;
		struct cand *nv = realloc(k->v, cap * sizeof(*nv));
		if (!nv) {
			free(path);
			return hv_error_set(HV_ENOMEM, "out of memory");
		}
		k->v = nv;
		k->cap = cap;
	}
	k->v[k->n++] = (struct cand){path, change, time_check, prio};
	return HV_OK;
}

static hv_status del_add(struct cands *k, char *path)
{
	if (!path)
		return hv_error_set(HV_ENOMEM, "out of memory");
	if (k->n_del == k->cap_del) {
		size_t cap = k->cap_del ? k->cap_del * 2 : 64;
		char **nv = realloc(k->del, cap * sizeof(*nv));
		if (!nv) {
			free(path);
			return hv_error_set(HV_ENOMEM, "out of memory");
		}
		k->del = nv;
		k->cap_del = cap;
	}
	k->del[k->n_del++] = path;
	return HV_OK;
}

static hv_status inode_add(struct cands *k, uint64_t dev, uint64_t ino)
{
	for (size_t i = 0; i < k->n_inodes; i++)
		if (k->inodes[i].dev == dev && k->inodes[i].ino == ino)
			return HV_OK;
	if (k->n_inodes == k->cap_inodes) {
		size_t cap = k->cap_inodes ? k->cap_inodes * 2 : 16;
		void *nv = realloc(k->inodes, cap * sizeof(*k->inodes));
		if (!nv)
			return hv_error_set(HV_ENOMEM, "out of memory");
		k->inodes = nv;
		k->cap_inodes = cap;
	}
	k->inodes[k->n_inodes].dev = dev;
	k->inodes[k->n_inodes].ino = ino;
	k->n_inodes++;
	return HV_OK;
}

static char *join(const char *dir, const char *name)
{
	char *p;
	if (!*dir)
		return strdup(name);
	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* lstat of root/rel without following a symlink on the way: 0 and *st, or -1. */
static int lstat_below(const hv_changes *c, const char *rel, struct stat *st)
{
	int fd = open(c->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	const char *p = rel;
	for (;;) {
		const char *slash = strchr(p, '/');
		if (!slash) {
			int r = fstatat(fd, p, st, AT_SYMLINK_NOFOLLOW);
			close(fd);
			return r;
		}
		char *comp = strndup(p, (size_t)(slash - p));
		int nfd = comp ? openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
		free(comp);
		close(fd);
		if (nfd < 0)
			return -1;
		fd = nfd;
		p = slash + 1;
	}
}

static hv_status lost(const hv_changes *c, const char *why)
{
	return hv_error_set(HV_EIO,
			    "%s: the change events cannot tell what the run changed (%s); nothing is "
			    "reported rather than something wrong: use --changes snapshot",
			    c->root, why);
}

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	int n = hv_store_path_cmp(x->path, strlen(x->path), y->path, strlen(y->path));
	return n ? n : x->prio - y->prio;
}

static int str_cmp(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	return hv_store_path_cmp(x, strlen(x), y, strlen(y));
}

/* One walk for the names of files with several links whose link count or content changed. */
/* The regular files of a directory moved into root during the run, at rel: all created. */
static hv_status walk_moved_in(const hv_changes *c, const hv_store *st, struct cands *k,
			       const char *rel)
{
	char *abs = NULL;
	if (asprintf(&abs, "%s%s%s", c->root, c->root_len > 1 ? "/" : "", rel) < 0)
		return hv_error_set(HV_ENOMEM, "out of memory");
	hv_walk_opts wo;
	hv_walk_opts_init(&wo);
	wo.sort = HV_SORT_NONE;
	wo.threads = 1;
	hv_walk *w;
	hv_status rc = hv_walk_open(&w, abs, &wo);
	free(abs);
	if (rc == HV_ENOTDIR)
		return HV_OK; /* gone again */
	if (rc != HV_OK)
		return rc;
	const hv_entry *e;
	while ((rc = hv_walk_next(w, &e)) != HV_DONE) {
		if (rc == HV_WARN)
			continue;
		if (rc != HV_OK)
			break;
		if (!e->have_lstat || S_ISDIR(e->lst.mode))
			continue;
		char *p = join(rel, e->path);
		if (p && excluded(c, st, p)) {
			free(p);
			continue;
		}
		rc = cand_add(k, p, "created", false, 1);
		if (rc != HV_OK)
			break;
	}
	hv_walk_close(w);
	return rc == HV_DONE ? HV_OK : rc;
}

static hv_status walk_inodes(const hv_changes *c, const hv_store *st, struct cands *k)
{
	hv_walk_opts wo;
	hv_walk_opts_init(&wo);
	wo.sort = HV_SORT_NONE;
	wo.threads = c->opts.threads;
	hv_walk *w;
	hv_status rc = hv_walk_open(&w, c->root, &wo);
	if (rc != HV_OK)
		return rc;
	const hv_entry *e;
	while ((rc = hv_walk_next(w, &e)) != HV_DONE) {
		if (rc == HV_WARN)
			continue;
		if (rc != HV_OK)
			break;
		if (!e->have_lstat || !S_ISREG(e->lst.mode) || excluded(c, st, e->path))
			continue;
		for (size_t i = 0; i < k->n_inodes; i++) {
			if (k->inodes[i].dev == e->lst.dev && k->inodes[i].ino == e->lst.ino) {
				rc = cand_add(k, strdup(e->path), "modified", false, 1);
				break;
			}
		}
		if (rc != HV_OK)
			break;
	}
	hv_walk_close(w);
	return rc == HV_DONE ? HV_OK : rc;
}

/* Whether the mount points at or below root differ from those before the run, in *changed. A
 * mount table that has not changed at all since mounts_watch was opened is not read again. */
static hv_status mounts_changed(const hv_changes *c, bool *changed)
{
	*changed = false;
	if (c->mounts_watch >= 0) {
		struct pollfd pf = {c->mounts_watch, POLLPRI, 0};
		int got;
		do
			got = poll(&pf, 1, 0);
		while (got < 0 && errno == EINTR);
		if (got == 0)
			return HV_OK;
	}
	char *mounts_after = NULL;
	hv_status rc = mounts_below(c->root, c->root_len, &mounts_after);
	if (rc != HV_OK)
		return rc;
	*changed = !(mounts_after && c->mounts_before && strcmp(mounts_after, c->mounts_before) == 0);
	free(mounts_after);
	return HV_OK;
}

static hv_status result_impl(hv_changes *c, const hv_store *st, struct cands *k)
{
	if (c->fail_status == HV_ENOMEM)
		return hv_error_set(HV_ENOMEM, "out of memory");
	if (c->fail_status != HV_OK)
		return lost(c, "reading the events failed");
	if (c->overflow)
		return lost(c, "the kernel's event queue overflowed");
	bool mounts_moved;
	hv_status rc = mounts_changed(c, &mounts_moved);
	if (rc != HV_OK)
		return rc;
	if (mounts_moved)
		return lost(c, "a file system was mounted or unmounted below it");
	struct stat rs;
	if (stat(c->root, &rs) != 0 || rs.st_dev != c->root_st.st_dev ||
	    rs.st_ino != c->root_st.st_ino)
		return lost(c, "the directory itself was moved or replaced");
	/* Where deleted and created directories were. */
	for (size_t i = 0; i < c->n_evs; i++) {
		const struct ev *e = &c->evs[i];
		if (!(e->mask & FAN_ONDIR) || !e->obj || !e->dir)
			continue;
		struct node *o = &c->nodes[e->obj - 1];
		if (e->mask & FAN_DELETE) {
			o->del_parent = e->dir;
			o->del_name = e->name;
		}
		if (e->mask & FAN_CREATE)
			o->created = true;
	}
	for (size_t i = 0; i < c->n_evs; i++) {
		const struct ev *e = &c->evs[i];
		if (e->dir)
			node_resolve(c, e->dir);
		if (e->dir2)
			node_resolve(c, e->dir2);
	}
	/* The slots, each event of each in order. */
	struct slot *sl = calloc(c->n_evs * 2 + 1, sizeof(*sl));
	if (!sl)
		return hv_error_set(HV_ENOMEM, "out of memory");
	size_t ns = 0;
	for (size_t i = 0; i < c->n_evs && rc == HV_OK; i++) {
		const struct ev *e = &c->evs[i];
		if (!e->dir && !e->dir2) {
			/* A link count changed: the file's other names changed too. */
			if (!e->obj || !e->paired)
				continue;
			int fd = node_open(c, &c->nodes[e->obj - 1]);
			struct stat st2;
			if (fd >= 0 && fstat(fd, &st2) == 0 && S_ISREG(st2.st_mode) && st2.st_nlink > 0) {
				char *rel = NULL;
				int w = st2.st_nlink == 1 ? fd_where(c, fd, &rel) : W_UNKNOWN;
				if (w == W_IN)
					rc = excluded(c, st, rel) ? HV_OK : cand_add(k, rel, "modified", false, 1);
				else if (w != W_OUT)
					rc = inode_add(k, st2.st_dev, st2.st_ino);
				if (w != W_IN)
					free(rel);
			}
			if (fd >= 0)
				close(fd);
			continue;
		}
		const struct node *d = e->dir ? &c->nodes[e->dir - 1] : NULL;
		const struct node *d2 = e->dir2 ? &c->nodes[e->dir2 - 1] : NULL;
		if ((d && d->where_end == W_UNKNOWN) || (d2 && d2->where_end == W_UNKNOWN)) {
			rc = lost(c, "a directory's handle could not be resolved");
			break;
		}
		bool in1 = d && node_in(d), in2 = d2 && node_in(d2);
		if ((e->mask & FAN_RENAME) && (e->mask & FAN_ONDIR) && (in1 || in2)) {
			struct node *o = e->obj ? &c->nodes[e->obj - 1] : NULL;
			/* A directory made during the run holds only what the run made, each with
			 * its own events, which resolve to where it is now. One moved in from
			 * outside brings everything in it: all created. A directory that was in root
			 * before the run and moved within it or out would need what it held before
			 * the run, which nothing recorded. */
			if (o && o->created)
				continue;
			if (!o || in1) {
				rc = lost(c, "a directory that was there before the run was renamed or "
					     "moved");
				break;
			}
			node_resolve(c, e->obj);
			if (o->where_end == W_IN && !excluded(c, st, o->path))
				rc = walk_moved_in(c, st, k, o->path);
			if (rc != HV_OK)
				break;
			continue;
		}
		if (e->mask & FAN_RENAME) {
			bool over = e->over;
			if (in1)
				sl[ns++] = (struct slot){e->dir, e->name, i, e->mask, false, false};
			if (in2)
				sl[ns++] = (struct slot){e->dir2, e->name2, i, e->mask, true, over};
			continue;
		}
		if (in1 && *name_at(c, e->name))
			sl[ns++] = (struct slot){e->dir, e->name, i, e->mask,
						 (e->mask & FAN_CREATE) != 0, false};
	}
	if (rc != HV_OK) {
		free(sl);
		return rc;
	}
	if (ns > 1)
		qsort_r(sl, ns, sizeof(*sl), slot_cmp, c);
	for (size_t i = 0; i < ns && rc == HV_OK;) {
		size_t j = i;
		bool changed = false, closew = false;
		while (j < ns && sl[j].dir == sl[i].dir &&
		       strcmp(name_at(c, sl[j].name), name_at(c, sl[i].name)) == 0) {
			if (sl[j].mask & (FAN_CREATE | FAN_DELETE | FAN_MODIFY | FAN_ATTRIB | FAN_RENAME))
				changed = true;
			if (sl[j].mask & FAN_CLOSE_WRITE)
				closew = true;
			j++;
		}
		const struct slot *first = &sl[i];
		const struct node *d = &c->nodes[first->dir - 1];
		/* Before the run: nothing when the slot's history starts with an appearance (or
		 * the directory is new), a directory when with a directory's event, else a file. */
		bool had_file = !d->created && (!first->appear || first->over) &&
				!(first->mask & FAN_ONDIR && !first->appear);
		char *rel = join(d->path, name_at(c, first->name));
		if (!rel) {
			rc = hv_error_set(HV_ENOMEM, "out of memory");
			break;
		}
		if (excluded(c, st, rel)) {
			free(rel);
			i = j;
			continue;
		}
		struct stat fst;
		bool is_reg = d->where_end == W_IN && lstat_below(c, rel, &fst) == 0 &&
			      S_ISREG(fst.st_mode);
		bool exists = d->where_end == W_IN && (is_reg || lstat_below(c, rel, &fst) == 0);
		if (exists && !S_ISDIR(fst.st_mode) && (changed || closew)) {
			if (is_reg && fst.st_nlink > 1)
				rc = inode_add(k, fst.st_dev, fst.st_ino);
			if (rc == HV_OK)
				rc = cand_add(k, strdup(rel), had_file ? "modified" : "created",
					      !changed, 0);
		}
		if (rc == HV_OK && had_file && !is_reg)
			rc = del_add(k, strdup(rel));
		free(rel);
		i = j;
	}
	free(sl);
	if (rc == HV_OK && k->n_inodes)
		rc = walk_inodes(c, st, k);
	return rc;
}

hv_status hv_changes_result(hv_changes *c, const hv_store *st, hv_change_set *out)
{
	memset(out, 0, sizeof(*out));
	out->start_ns = c->start_ns;
	struct cands k = {0};
	hv_status rc = result_impl(c, st, &k);
	if (rc == HV_OK) {
		/* In walk order, each path once (a name with several links may come twice). */
		if (k.n > 1)
			qsort(k.v, k.n, sizeof(*k.v), cand_cmp);
		if (k.n_del > 1)
			qsort(k.del, k.n_del, sizeof(*k.del), str_cmp);
		out->paths = calloc(k.n + 1, sizeof(char *));
		out->change = calloc(k.n + 1, sizeof(char *));
		out->time_check = calloc(k.n + 1, sizeof(bool));
		if (!out->paths || !out->change || !out->time_check)
			rc = hv_error_set(HV_ENOMEM, "out of memory");
		for (size_t i = 0; rc == HV_OK && out->paths && out->change && out->time_check &&
				   i < k.n; i++) {
			if (out->n && strcmp(out->paths[out->n - 1], k.v[i].path) == 0) {
				if (!k.v[i].time_check)
					out->time_check[out->n - 1] = false;
				free(k.v[i].path);
				k.v[i].path = NULL;
				continue;
			}
			out->paths[out->n] = k.v[i].path;
			out->change[out->n] = k.v[i].change;
			out->time_check[out->n] = k.v[i].time_check;
			out->n++;
			k.v[i].path = NULL;
		}
		if (rc == HV_OK) {
			out->deleted = k.del;
			out->n_deleted = k.n_del;
			k.del = NULL;
			k.n_del = 0;
		}
	}
	for (size_t i = 0; i < k.n; i++)
		free(k.v[i].path);
	free(k.v);
	for (size_t i = 0; i < k.n_del; i++)
		free(k.del[i]);
	free(k.del);
	free(k.inodes);
	if (rc != HV_OK) {
		hv_error_saved saved;
		hv_error_save(&saved);
		hv_change_set_free(out);
		return hv_error_restore(&saved, rc);
	}
	return HV_OK;
}

void hv_change_set_free(hv_change_set *s)
{
	for (size_t i = 0; s->paths && i < s->n; i++)
		free(s->paths[i]);
	for (size_t i = 0; i < s->n_deleted; i++)
		free(s->deleted[i]);
	free(s->paths);
	free(s->change);
	free(s->time_check);
	free(s->deleted);
	memset(s, 0, sizeof(*s));
}
