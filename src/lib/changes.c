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

#include <dirent.h>
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
 * whole process ("Valgrind does not support general clone()"), so there (HV_UNDER_VALGRIND,
 * internal.h) the holder is forked. */

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
	/* Where it was before the run (a directory renamed or replaced during it). */
	uint32_t first_ren;  /* 1 + the event of its first rename (by seq), 0: none */
	uint32_t replaced;   /* 1 + the rename event that replaced it, 0: none */
	int bstate;          /* B_*: before_path() computed */
	char *bpath;         /* its path before the run, relative to root (B_IN) */
	bool visited;        /* guard of before_list() */
	/* Its deletion was seen before its link count (see track_thread), by thread del_tid. */
	bool del_uncounted;
	int32_t del_tid;
};

struct ev {
	uint32_t mask;
	int32_t tid;
	uint32_t dir, dir2; /* 1 + node, 0: none (dir2: a rename's new directory) */
	uint32_t obj;       /* 1 + node of the object itself */
	uint32_t name, name2;
	bool over;          /* a rename that replaced a file at its new name */
	bool over_dir;      /* what it replaced was a directory (over_obj) */
	bool paired;        /* a link count event that goes with a kept name's event */
	uint32_t over_obj;  /* 1 + node of what a rename replaced, 0: not known */
	uint64_t seq;       /* the order the kernel queued it in (events kept late go last) */
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
	/* The same for a rename that was dropped (kept aside in maybe, by seq + 1). */
	uint64_t mrename;
	uint64_t mpending;
	uint32_t mpending_obj;
	size_t mpending_count;
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
	bool no_thread;      /* a thread could not be started: the caller's thread reads on */
	bool stopped;        /* hv_changes_stop() has read the last of it */
	size_t pumped;       /* events read by hv_changes_pump() */
	char *buf;           /* READ_BUF bytes to read events into, once needed */
	bool named_below;    /* an event of a name in a directory known to be below root was read */
	void (*on_first)(void *); /* hv_changes_on_first(), until called */
	void *on_first_ctx;
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
	uint64_t seq;
	/* Directories that were in root and were moved out of it during the run: their events
	 * are kept wherever they are, to know what they held before: each one's device + 1 and
	 * inode, taken when it was followed (0, 0: it was gone by then). */
	uint64_t (*followed_id)[2];
	size_t n_followed, cap_followed;
	/* The events dropped (outside root) since the queue was last empty: one read late may
	 * have placed outside a directory that was in root when the event happened, moved out
	 * since by a rename still queued. That rename takes them back. */
	struct ev *maybe;
	size_t n_maybe, cap_maybe;
	const char *why;  /* why the result failed for want of a state before the run */
	bool best_effort; /* hv_changes_result_since(): what the events tell, nothing refused */
};

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
/* What is left to read of fd (an open /proc/self/mountinfo: the whole mount table),
 * NUL-terminated, to free; NULL on a read error (errno set). */
static char *read_mountinfo(int fd)
{
	size_t cap = 8192, len = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (cap - len < 4096) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				errno = ENOMEM;
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno;
			free(buf);
			errno = err;
			return NULL;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (buf)
		buf[len] = 0;
	return buf;
}

/* The mount points at or below root, sorted, one a line, from the mount table fd reads (a new
 * open of /proc/self/mountinfo when fd is -1; fd is left open). */
static hv_status mounts_below(int fd, const char *root, size_t rl, char **out)
{
	*out = NULL;
	int own = fd < 0 ? open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC) : -1;
	char *table = (fd >= 0 || own >= 0) ? read_mountinfo(fd >= 0 ? fd : own) : NULL;
	int err = errno;
	if (own >= 0)
		close(own);
	if (!table)
		return hv_error_errno(HV_EIO, "/proc/self/mountinfo", err);
	char **v = NULL;
	size_t n = 0;
	hv_status rc = HV_OK;
	char *line_save = NULL;
	for (char *line = strtok_r(table, "\n", &line_save); line;
	     line = strtok_r(NULL, "\n", &line_save)) {
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
	free(table);
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

static const char *name_at(const hv_changes *c, uint32_t off);

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

/* Opens the node's object with flags (O_CLOEXEC added); -1 with errno. */
static int node_open_flags(const hv_changes *c, const struct node *n, int flags)
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
	return open_by_handle_at(mfd, &h.fh, flags | O_CLOEXEC);
}

/* Opens the node's object (O_PATH); -1 with errno. */
static int node_open(const hv_changes *c, const struct node *n)
{
	return node_open_flags(c, n, O_PATH);
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
	/* The path is trusted only if it names the same object now. A directory's handle opens
	 * connected to its tree, so a path that no longer names it is one it has just left; a
	 * file's may open disconnected (its names gone from the kernel's dentry cache), its path
	 * then "/" whatever its names are: nothing is known of where it is. */
	struct stat ls;
	if (lstat(buf, &ls) != 0 || ls.st_dev != st.st_dev || ls.st_ino != st.st_ino)
		return below(buf, c->root, c->root_len) || !S_ISDIR(st.st_mode) ? W_UNKNOWN
										 : W_OUT;
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

#define PATH_BUF 8192 /* a path read with readlink */
#define CLIMB_MAX 256 /* levels below_followed() climbs before it keeps the events anyway */

/* Whether directory id is now at or below a followed directory. Climbs from the directory's
 * own descriptor, one ".." at a time, comparing each ancestor's device and inode with the
 * followed directories': the answer holds for one moment, however the tree is being
 * changed meanwhile. (Comparing two paths read one after the other does not: a tree being
 * removed (`rm -rf`) can lose a followed directory between the two reads while the
 * directory was still below it at the first, and its deletions were then dropped.) A
 * directory deleted before or during the climb may have been below one, and keeping its
 * events costs little: true. */
static bool below_followed(const hv_changes *c, uint32_t id)
{
	int fd = node_open_flags(c, &c->nodes[id - 1], O_PATH | O_DIRECTORY);
	if (fd < 0)
		return true;
	bool below_one = true;
	for (size_t level = 0; level < CLIMB_MAX; level++) {
		struct stat st;
		if (fstat(fd, &st) != 0 || st.st_nlink == 0)
			break;
		bool hit = false;
		for (size_t i = 0; i < c->n_followed && !hit; i++)
			hit = c->followed_id[i][0] == (uint64_t)st.st_dev + 1 &&
			      c->followed_id[i][1] == (uint64_t)st.st_ino;
		if (hit)
			break;
		int up = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (up < 0)
			break;
		struct stat ups;
		if (fstat(up, &ups) != 0) {
			close(up);
			break;
		}
		close(fd);
		fd = up;
		if (ups.st_dev == st.st_dev && ups.st_ino == st.st_ino) {
			below_one = false; /* the top */
			break;
		}
	}
	close(fd);
	return below_one;
}

static hv_status ev_push(hv_changes *c, struct ev **v, size_t *n, size_t *cap,
			 const struct ev *e)
{
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 256;
		struct ev *ne = realloc(*v, ncap * sizeof(*ne));
		if (!ne) {
			c->fail_status = HV_ENOMEM;
			return HV_ENOMEM;
		}
		*v = ne;
		*cap = ncap;
	}
	(*v)[(*n)++] = *e;
	return HV_OK;
}

/* A directory of root moved out of it: its events are kept from now on, and those dropped
 * since the queue was last empty that are below it now are taken back (read after it had
 * moved, they may be of when it was still in root). Their order is their seq. */
static bool dir_relevant(hv_changes *c, uint32_t d);

static void follow(hv_changes *c, uint32_t obj)
{
	if (c->n_followed == c->cap_followed) {
		size_t cap = c->cap_followed ? c->cap_followed * 2 : 16;
		uint64_t(*ni)[2] = realloc(c->followed_id, cap * sizeof(*ni));
		if (!ni) {
			c->fail_status = HV_ENOMEM;
			return;
		}
		c->followed_id = ni;
		c->cap_followed = cap;
	}
	c->followed_id[c->n_followed][0] = c->followed_id[c->n_followed][1] = 0;
	int ffd = node_open(c, &c->nodes[obj - 1]);
	struct stat fst;
	if (ffd >= 0 && fstat(ffd, &fst) == 0 && fst.st_nlink > 0) {
		c->followed_id[c->n_followed][0] = (uint64_t)fst.st_dev + 1;
		c->followed_id[c->n_followed][1] = (uint64_t)fst.st_ino;
	}
	if (ffd >= 0)
		close(ffd);
	c->n_followed++;
	/* What was placed outside may have been placed from a directory read late (this one,
	 * still in root when its events happened, or one made in it, placed by one step up):
	 * everything outside is placed again when next seen. */
	for (size_t i = 0; i < c->n_nodes; i++)
		if (c->nodes[i].where == W_OUT)
			c->nodes[i].where = W_UNSEEN;
	c->nodes[obj - 1].where = W_IN;
	size_t kept = 0;
	for (size_t i = 0; i < c->n_maybe; i++) {
		struct ev *m = &c->maybe[i];
		bool back = dir_relevant(c, m->dir);
		back = dir_relevant(c, m->dir2) || back;
		if (!back) {
			c->maybe[kept++] = *m;
			continue;
		}
		if (ev_push(c, &c->evs, &c->n_evs, &c->cap_evs, m) != HV_OK)
			return;
	}
	c->n_maybe = kept;
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
		if (n->where == W_OUT && c->n_followed && below_followed(c, d))
			n->where = W_IN;
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
static struct ev *maybe_find(hv_changes *c, uint64_t seq)
{
	for (size_t i = c->n_maybe; i-- > 0;)
		if (c->maybe[i].seq == seq)
			return &c->maybe[i];
	return NULL;
}

static void track_thread(hv_changes *c, const struct ev *e, bool kept)
{
	struct tid_state *t = tid_get(c, e->tid ? e->tid : -1);
	if (!t) {
		c->fail_status = HV_ENOMEM;
		return;
	}
	bool linkcount = !e->dir && !e->dir2 && (e->mask & FAN_ATTRIB) && e->obj;
	/* A directory's own attribute event (its handle and "."): after a rename by the same
	 * thread, the count of the empty directory the rename replaced. */
	uint32_t dir_count = e->dir && !e->dir2 && (e->mask & FAN_ATTRIB) && (e->mask & FAN_ONDIR) &&
				     !strcmp(name_at(c, e->name), ".")
			     ? e->dir
			     : 0;
	uint32_t count = linkcount ? e->obj : dir_count;
	/* An unlink sends the file's link count, then its name's event; but the kernel merges
	 * that name's event into an earlier one of the same name still queued from the same
	 * thread (a write of the file), so the deletion can come first and its count later,
	 * after whatever the thread did meanwhile (a rename): that count is the unlink's, with
	 * its kept name's event, and not what a rename replaced. */
	if (linkcount && kept && c->nodes[e->obj - 1].del_uncounted &&
	    c->nodes[e->obj - 1].del_tid == e->tid) {
		c->nodes[e->obj - 1].del_uncounted = false;
		c->evs[c->n_evs - 1].paired = true;
		count = 0;
	}
	if (t->pending && (e->mask & (FAN_DELETE | FAN_CREATE)) && e->obj == t->pending) {
		c->evs[t->pending_idx].over = false; /* an unlink's or a link's count, not it */
		c->evs[t->pending_idx].over_obj = 0;
		c->evs[t->pending_idx].over_dir = false;
		c->evs[t->pending_count].paired = false;
	}
	if (t->mpending_obj && (e->mask & (FAN_DELETE | FAN_CREATE)) && e->obj == t->mpending_obj) {
		struct ev *m = maybe_find(c, t->mpending);
		if (m) {
			m->over = false;
			m->over_obj = 0;
			m->over_dir = false;
		}
		c->evs[t->mpending_count].paired = false;
	}
	t->mpending_obj = 0;
	/* An unlink or a link: the count first, then the name's event of the same file. */
	if (kept && t->count_obj && (e->mask & (FAN_DELETE | FAN_CREATE)) && e->obj == t->count_obj) {
		c->evs[t->count_idx].paired = true;
	} else if (kept && (e->mask & FAN_DELETE) && !(e->mask & FAN_ONDIR) && e->obj) {
		c->nodes[e->obj - 1].del_uncounted = true;
		c->nodes[e->obj - 1].del_tid = e->tid;
	}
	/* rename(2) replaces only what is of the same kind as what it moves (ENOTDIR, EISDIR):
	 * a file's count after a directory's rename (or a directory's after a file's) is
	 * another operation's. The unlink that follows a rename shows so by its name's event,
	 * unless the kernel merged that event into one of the same file still queued from
	 * before the rename (a write of it): then this is all that tells. */
	if (count && kept && t->mrename) {
		struct ev *m = maybe_find(c, t->mrename - 1);
		if (m && m->obj != count && !((m->mask ^ e->mask) & FAN_ONDIR)) {
			m->over = true;
			m->over_obj = count;
			m->over_dir = (e->mask & FAN_ONDIR) != 0;
			c->evs[c->n_evs - 1].paired = true;
			t->mpending = m->seq;
			t->mpending_obj = count;
			t->mpending_count = c->n_evs - 1;
		}
	}
	t->mrename = !kept && (e->mask & FAN_RENAME) ? e->seq + 1 : 0;
	t->pending = 0;
	t->count_obj = 0;
	if (count && kept && t->last_rename && count != c->evs[t->last_idx].obj &&
	    !((c->evs[t->last_idx].mask ^ e->mask) & FAN_ONDIR)) {
		c->evs[t->last_idx].over = true;
		c->evs[t->last_idx].over_obj = count;
		c->evs[t->last_idx].over_dir = (e->mask & FAN_ONDIR) != 0;
		c->evs[c->n_evs - 1].paired = true; /* the replaced file's count */
		t->pending = count;
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
		bool r1 = dir_relevant(c, e.dir), r2 = dir_relevant(c, e.dir2);
		keep = r1 || r2;
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
		/* Known to be below root, not only possibly (a directory whose handle did not
		 * resolve, another process's maybe, is kept too). */
		c->named_below |= (e.dir && c->nodes[e.dir - 1].where == W_IN) ||
				  (e.dir2 && c->nodes[e.dir2 - 1].where == W_IN);
	}
	e.seq = c->seq++;
	if (!keep) {
		if ((e.dir || e.dir2) &&
		    ev_push(c, &c->maybe, &c->n_maybe, &c->cap_maybe, &e) != HV_OK)
			return;
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
	/* A directory moved from root to outside it: followed (see follow()). */
	if ((e.mask & FAN_RENAME) && (e.mask & FAN_ONDIR) && e.obj && e.dir && e.dir2 &&
	    c->nodes[e.dir - 1].where != W_OUT && c->nodes[e.dir2 - 1].where == W_OUT)
		follow(c, e.obj);
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
		uint64_t seq0 = c->seq;
		ssize_t n = read(c->fan, buf, READ_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			c->n_maybe = 0;
			return 0;
		}
		if (n < 0) {
			c->fail_status = HV_EIO;
			return -1;
		}
		size_t got = take_events(c, buf, n);
		/* A read that did not fill the buffer emptied the queue: a rename that moved out
		 * a directory before an event dropped earlier than this read was resolved has
		 * been read by now (follow() took those back). */
		if (n < READ_BUF - 8192) {
			size_t kept = 0;
			for (size_t i = 0; i < c->n_maybe; i++)
				if (c->maybe[i].seq >= seq0)
					c->maybe[kept++] = c->maybe[i];
			c->n_maybe = kept;
		}
		return (ssize_t)got;
	}
}

/* The buffer events are read into: one for the life of c, used by one thread at a time (the
 * caller's, then the drain thread's once started). */
static char *read_buf(hv_changes *c)
{
	if (!c->buf && !(c->buf = malloc(READ_BUF)))
		c->fail_status = HV_ENOMEM;
	return c->buf;
}

/* The last of it, once the run has ended: what was queued then, and no more (other processes
 * may go on making events for ever). FIONREAD counts FAN_EVENT_METADATA_LEN bytes an event,
 * whatever its records add: it tells how many events are queued. */
static void read_rest(hv_changes *c)
{
	char *buf = read_buf(c);
	int queued = 0;
	if (c->fail_status == HV_OK && ioctl(c->fan, FIONREAD, &queued) != 0)
		c->fail_status = HV_EIO;
	size_t left = queued > 0 ? (size_t)queued / FAN_EVENT_METADATA_LEN : 0;
	while (buf && left > 0 && c->fail_status == HV_OK) {
		ssize_t n = read_some(c, buf);
		if (n <= 0)
			break;
		left = (size_t)n >= left ? 0 : left - (size_t)n;
	}
}

static void *drain(void *arg)
{
	hv_changes *c = arg;
	char *buf = read_buf(c);
	if (!buf)
		return NULL;
	bool late = hv__test_switch_on(HV__SWITCH_CHANGES_READ_LATE);
	bool slow = hv__test_switch_on(HV__SWITCH_CHANGES_READ_SLOW);
	uint64_t slow_seed = (uint64_t)getpid() ^ (uint64_t)hv_clock_ns(CLOCK_REALTIME_COARSE);
	for (;;) {
		struct pollfd pf[2] = {{late ? -1 : c->fan, POLLIN, 0}, {c->stop_pipe[0], POLLIN, 0}};
		int got = poll(pf, 2, -1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			break;
		if (pf[1].revents)
			break;
		if (slow) {
			slow_seed = slow_seed * 6364136223846793005ull + 1442695040888963407ull;
			struct timespec ts = {0, (long)((slow_seed >> 33) % 4000000)};
			nanosleep(&ts, NULL);
		}
		if (read_some(c, buf) < 0)
			break;
	}
	read_rest(c);
	return NULL;
}

/* Starts the thread that drains the events from now on. */
static hv_status start_thread(hv_changes *c)
{
	if (pipe2(c->stop_pipe, O_CLOEXEC) != 0)
		return hv_error_errno(HV_EIO, "pipe", errno);
	if (pthread_create(&c->thread, NULL, drain, c) != 0) {
		close(c->stop_pipe[0]);
		close(c->stop_pipe[1]);
		c->stop_pipe[0] = c->stop_pipe[1] = -1;
		return hv_error_set(HV_EIO, "fanotify: cannot start a thread");
	}
	c->thread_started = true;
	return HV_OK;
}

/* The events a run may make before a thread of their own drains them (see hv_changes_pump). */
#define PUMP_MAX_EVENTS 1024

void hv_changes_on_first(hv_changes *c, void (*fn)(void *), void *ctx)
{
	c->on_first = fn;
	c->on_first_ctx = ctx;
}

int hv_changes_fd(const hv_changes *c)
{
	return c->thread_started || c->stopped ? -1 : c->fan;
}

bool hv_changes_pump(void *arg)
{
	hv_changes *c = arg;
	if (c->thread_started || c->stopped)
		return false;
	char *buf = read_buf(c);
	ssize_t n = buf ? read_some(c, buf) : -1;
	if (n < 0)
		return false; /* the result says why (fail_status) */
	c->pumped += (size_t)n;
	if (c->on_first && c->named_below) {
		void (*fn)(void *) = c->on_first;
		c->on_first = NULL;
		fn(c->on_first_ctx);
	}
	if (c->pumped < PUMP_MAX_EVENTS || c->no_thread)
		return true;
	/* A run that makes many events: they are read beside the command and the relay of its
	 * output from now on, on a thread of their own. */
	if (start_thread(c) == HV_OK)
		return false;
	c->no_thread = true;
	return true;
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
	/* Read now, and polled after the run: the mount table has not changed since this open
	 * unless it says so (POLLPRI), and then only is it read again (a read does not reset
	 * what the poll compares with: the table as it was at the open). */
	if (rc == HV_OK) {
		c->mounts_watch = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
		rc = mounts_below(c->mounts_watch, root, c->root_len, &c->mounts_before);
	}
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
	if (rc == HV_OK) {
		/* The line of walk_since's ctime fallback, after an overflow: the coarse clock now,
		 * so a change from here on has a ctime not older. A file changed just before, in
		 * the same tick (or stamped finer than the tick), is then reported too: a false
		 * positive in a rare path. The snapshot's exact line (hv_snapshot_take_mem) waits
		 * for the tick to pass, which every run here would pay for. */
		c->start_ns = hv_clock_ns(CLOCK_REALTIME_COARSE);
		/* The events are read on the caller's thread (hv_changes_pump) until they are
		 * many; the test switches that read them late or slowly want the thread. */
		if (hv__test_switch_on(HV__SWITCH_CHANGES_READ_LATE) ||
		    hv__test_switch_on(HV__SWITCH_CHANGES_READ_SLOW))
			rc = start_thread(c);
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
	if (c->stopped)
		return HV_OK;
	c->stopped = true;
	if (!c->thread_started) {
		read_rest(c);
		return HV_OK;
	}
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
 * 0 means the stack is free. Whoever moves holder_tid from 0 owns the slot: the stacks and
 * holder_args. A release while a holder still waits takes the fork path.
 *
 * The holder is not our child: a relay (our child, on relay_stack, sharing our memory too)
 * starts it and exits at once, and is reaped by hv_changes_reap() (which hv_execute calls
 * before it returns, and the next release first); the holder, an
 * orphan, is adopted and reaped by init (or the nearest subreaper). A run so leaves its
 * caller no child and no zombie, and no waitpid(-1) or SIGCHLD handler of the caller's ever
 * sees the holder. */
#define HOLDER_STACK_SIZE (16 * 1024)
#define RELAY_STACK_SIZE (8 * 1024)
static _Alignas(64) char holder_stack[HOLDER_STACK_SIZE];
static _Alignas(64) char relay_stack[RELAY_STACK_SIZE];
static pid_t holder_tid;

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

/* The relay: starts the holder and exits; when the holder cannot be started, it does the
 * holder's work itself (its exit then waits for the close, which nobody waits for but the
 * reap in hv_changes_reap). The thread of ours that started it goes on meanwhile, and the
 * relay has no thread storage of its own: a clone that fails (EAGAIN, ENOMEM) stores its
 * errno in that thread's. That thread reads errno only right after a call of its own that
 * failed; a store landing in those few instructions would change the reason a message gives,
 * nothing else. */
SHARED_VM_CODE static int relay_main(void *arg)
{
	pid_t pid = clone(holder_main, holder_stack + HOLDER_STACK_SIZE,
			  CLONE_VM | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD, arg,
			  &holder_tid, NULL, &holder_tid);
	if (pid <= 0)
		holder_main(arg);
	return 0;
}

/* The relay started by the last release and not reaped yet, 0: none. */
static pid_t relay_pending;

void hv_changes_reap(void)
{
	pid_t relay = __atomic_exchange_n(&relay_pending, 0, __ATOMIC_ACQ_REL);
	if (relay <= 0)
		return;
	while (waitpid(relay, NULL, __WCLONE) < 0 && errno == EINTR)
		;
	/* The relay has exited (reaped here, or by a waitpid(__WALL) of the caller's: ECHILD).
	 * Its clone wrote the holder's tid before it returned: still -1, there was no holder
	 * (the relay did its work), and the slot is free again. Else the holder frees it when
	 * it exits (CLONE_CHILD_CLEARTID). */
	pid_t none = -1;
	__atomic_compare_exchange_n(&holder_tid, &none, 0, false, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
}

/* Gives the last reference to fan to a holder that shares our memory; false when that cannot
 * be done (the stack is in use, a clone is refused, or valgrind runs us) and nothing was
 * started. The relay is left to hv_changes_reap(): waiting for it here would wait for it to be
 * scheduled, on the other CPU more often than not. */
static bool release_fan_shared(int fan, int gate)
{
	hv_changes_reap();
	pid_t free_stack = 0;
	if (HV_UNDER_VALGRIND() ||
	    !__atomic_compare_exchange_n(&holder_tid, &free_stack, -1, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return false;
	holder_args = (fan_release){fan, gate};
	/* No exit signal: it is reaped here, never by a waitpid(-1) of the caller's. Its own copy
	 * of our descriptors (no CLONE_FILES) holds fan and gate from now on, whatever we close. */
	pid_t relay = clone(relay_main, relay_stack + RELAY_STACK_SIZE, CLONE_VM, &holder_args);
	if (relay <= 0) {
		__atomic_store_n(&holder_tid, 0, __ATOMIC_RELEASE);
		return false;
	}
	__atomic_store_n(&relay_pending, relay, __ATOMIC_RELEASE);
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
	for (size_t i = 0; i < c->n_nodes; i++) {
		free(c->nodes[i].path);
		free(c->nodes[i].bpath);
	}
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
	free(c->followed_id);
	free(c->maybe);
	free(c->buf);
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
	/* Regular files now, at paths where a directory deleted during the run had a file: that
	 * directory was made again (or another moved to its place), and these were there before. */
	char **was;
	size_t n_was, cap_was;
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

static hv_status path_push(char ***v, size_t *n, size_t *cap, char *path)
{
	if (!path)
		return hv_error_set(HV_ENOMEM, "out of memory");
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 64;
		char **nv = realloc(*v, ncap * sizeof(*nv));
		if (!nv) {
			free(path);
			return hv_error_set(HV_ENOMEM, "out of memory");
		}
		*v = nv;
		*cap = ncap;
	}
	(*v)[(*n)++] = path;
	return HV_OK;
}

static hv_status del_add(struct cands *k, char *path)
{
	return path_push(&k->del, &k->n_del, &k->cap_del, path);
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

static hv_status lost(hv_changes *c, const char *why)
{
	c->why = why;
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
	hv_status rc = mounts_below(-1, c->root, c->root_len, &mounts_after);
	if (rc != HV_OK)
		return rc;
	*changed = !(mounts_after && c->mounts_before && strcmp(mounts_after, c->mounts_before) == 0);
	free(mounts_after);
	return HV_OK;
}

/* ---- directories of root renamed or replaced during the run ----
 *
 * What such a directory held before the run is rebuilt from the kernel's handles: its
 * descriptor now (open_by_handle_at, wherever it is on its file system), listed through
 * that descriptor, corrected by the events under its handle (a name whose first event is an
 * appearance was not there before; one whose first event is anything else was; a name
 * without events was there as it is now), subdirectories by their handles (a deleted one
 * held exactly the names its events removed). The paths it covered before and covers now
 * are then compared path-wise, as a snapshot would: the files below those paths before the
 * run against those below them now. */

enum { B_UNSET = 0, B_IN, B_NONE, B_UNKNOWN };

/* Events that change neither a name nor what it names (a close after writing, maybe
 * nothing written: an mmap write is told by the ctime). */
#define QUIET_MASK (FAN_CLOSE_WRITE | FAN_ONDIR)

/* Every named event, of any directory, in (directory, name, seq) order: one table, sorted
 * once, read by the comparison of renamed directories and by the names' histories. A rename
 * has two slots, its old name (side 1) and its new one (side 2); any other event one. */
struct slot {
	uint32_t dir;
	uint32_t name;
	uint64_t seq;
	uint32_t ev;
	bool to; /* a rename's new name */
};

struct rent {
	char *path;
	uint64_t dev, ino;
	bool known;    /* dev and ino are the file's before the run (no event touched it) */
	uint32_t mask; /* the events of its name */
};

struct rents {
	struct rent *v;
	size_t n, cap;
};

struct recon {
	hv_changes *c;
	struct slot *fs; /* the slots (slots_build), sorted */
	size_t nfs;
	uint32_t root_id;
	char **roots;
	size_t n_roots;
	struct rents before, after;
	const char *lost; /* why the before state cannot be told, NULL: it can */
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
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return (int)x->to - (int)y->to;
}

static hv_status slots_build(struct recon *r)
{
	hv_changes *c = r->c;
	r->fs = calloc(c->n_evs * 2 + 1, sizeof(*r->fs));
	if (!r->fs)
		return hv_error_set(HV_ENOMEM, "out of memory");
	for (size_t i = 0; i < c->n_evs; i++) {
		const struct ev *e = &c->evs[i];
		if (e->dir && (*name_at(c, e->name) || (e->mask & FAN_RENAME)))
			r->fs[r->nfs++] = (struct slot){e->dir, e->name, e->seq, (uint32_t)i, false};
		if (e->dir2 && (e->mask & FAN_RENAME))
			r->fs[r->nfs++] = (struct slot){e->dir2, e->name2, e->seq, (uint32_t)i, true};
	}
	if (r->nfs > 1)
		qsort_r(r->fs, r->nfs, sizeof(*r->fs), slot_cmp, c);
	return HV_OK;
}

/* Whether the comparison of renamed directories reads the slots of this name: not those of
 * a directory's events on itself ("."), nor of events without a name. A rename's new name
 * is never either (rename(2) refuses them), so this leaves out whole (dir, name) runs. */
static bool recon_name(const char *name)
{
	return *name && strcmp(name, ".") != 0;
}

/* Whether, for the comparison of renamed directories, the slot's event made something
 * appear at the slot's name. */
static bool slot_appear(const hv_changes *c, const struct slot *s)
{
	return s->to || (c->evs[s->ev].mask & FAN_CREATE);
}

/* The slots of (dir, name): [*lo, *hi). */
static void slot_range(const struct recon *r, uint32_t dir, const char *name, size_t *lo,
		       size_t *hi)
{
	size_t a = 0, b = r->nfs;
	if (!recon_name(name)) {
		*lo = *hi = 0;
		return;
	}
	while (a < b) {
		size_t m = a + (b - a) / 2;
		const struct slot *s = &r->fs[m];
		int k = s->dir != dir ? (s->dir < dir ? -1 : 1) : strcmp(name_at(r->c, s->name), name);
		if (k < 0)
			a = m + 1;
		else
			b = m;
	}
	*lo = a;
	while (a < r->nfs && r->fs[a].dir == dir && !strcmp(name_at(r->c, r->fs[a].name), name))
		a++;
	*hi = a;
}

static uint32_t slot_mask(const struct recon *r, uint32_t dir, const char *name)
{
	size_t lo, hi;
	slot_range(r, dir, name, &lo, &hi);
	uint32_t m = 0;
	for (size_t i = lo; i < hi; i++)
		m |= r->c->evs[r->fs[i].ev].mask;
	return m;
}

/* The node of the directory open at fd (interned: may move c->nodes); 0 if none. */
static uint32_t fd_node(hv_changes *c, int fd)
{
	struct statfs sf;
	struct {
		struct file_handle fh;
		unsigned char buf[MAX_FH];
	} h;
	h.fh.handle_bytes = MAX_FH;
	int mnt_id;
	if (fstatfs(fd, &sf) != 0 || name_to_handle_at(fd, "", &h.fh, &mnt_id, AT_EMPTY_PATH) != 0)
		return 0;
	uint64_t fsid;
	memcpy(&fsid, &sf.f_fsid, sizeof(fsid));
	return intern(c, fsid, &h.fh);
}

/* A readable descriptor of directory node id, wherever it is; -1 (ESTALE: deleted). */
static int node_open_dir(const hv_changes *c, uint32_t id)
{
	int fd = node_open_flags(c, &c->nodes[id - 1], O_RDONLY | O_DIRECTORY);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_nlink == 0)) {
		close(fd);
		errno = ESTALE;
		return -1;
	}
	return fd;
}

/* One step up from directory id towards where it was before the run: B_UNSET with its
 * parent then (*parent) and its name in it (*name, malloc'd), or its final state. */
static int before_step(struct recon *r, uint32_t id, uint32_t *parent, char **name)
{
	hv_changes *c = r->c;
	const struct node *n = &c->nodes[id - 1];
	*parent = 0;
	*name = NULL;
	if (n->first_ren) {
		const struct ev *e = &c->evs[n->first_ren - 1];
		*parent = e->dir;
		*name = strdup(name_at(c, e->name));
	} else if (n->del_parent) {
		*parent = n->del_parent;
		*name = strdup(name_at(c, n->del_name));
	} else if (n->replaced) {
		const struct ev *e = &c->evs[n->replaced - 1];
		*parent = e->dir2;
		*name = strdup(name_at(c, e->name2));
	} else {
		/* Neither moved nor deleted: in its parent of now, under its name of now. */
		int fd = node_open(c, n);
		if (fd < 0)
			return B_UNKNOWN;
		char link[64], *buf = malloc(PATH_BUF);
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		ssize_t len = buf ? readlink(link, buf, PATH_BUF - 1) : -1;
		int up = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		struct stat s1, s2;
		bool top = up >= 0 && fstat(fd, &s1) == 0 && fstat(up, &s2) == 0 &&
			   s1.st_dev == s2.st_dev && s1.st_ino == s2.st_ino;
		close(fd);
		int state = B_UNSET;
		if (len <= 0 || buf[0] != '/' || up < 0) {
			state = B_UNKNOWN;
		} else if (top) {
			state = B_NONE; /* the top: root was not above */
		} else {
			buf[len] = '\0';
			/* Every file system at or below root is marked: an unmarked parent is
			 * outside. */
			struct statfs sf;
			uint64_t fsid = 0;
			if (fstatfs(up, &sf) == 0)
				memcpy(&fsid, &sf.f_fsid, sizeof(fsid));
			if (mount_fd(c, fsid) < 0) {
				state = B_NONE;
			} else if (!(*parent = fd_node(c, up))) {
				state = B_UNKNOWN;
			} else {
				*name = strdup(strrchr(buf, '/') + 1);
			}
		}
		if (up >= 0)
			close(up);
		free(buf);
		if (state != B_UNSET)
			return state;
	}
	return *name ? B_UNSET : B_UNKNOWN;
}

/* Where directory id was before the run: B_IN with its bpath, B_NONE (not in root, or not
 * there), B_UNKNOWN. Climbs to a directory whose place is known, then down again. */
static int before_path(struct recon *r, uint32_t id)
{
	hv_changes *c = r->c;
	uint32_t *chain = NULL;
	char **names = NULL;
	size_t len = 0, cap = 0;
	uint32_t cur = id;
	int top;
	for (;;) {
		struct node *n = &c->nodes[cur - 1];
		if (n->bstate != B_UNSET) {
			top = n->bstate;
			break;
		}
		if (cur == r->root_id) {
			n->bpath = strdup("");
			top = n->bstate = n->bpath ? B_IN : B_UNKNOWN;
			break;
		}
		if (n->created) {
			top = n->bstate = B_NONE;
			break;
		}
		uint32_t parent;
		char *name;
		int st = before_step(r, cur, &parent, &name);
		if (st == B_UNSET && len == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			uint32_t *nc = realloc(chain, ncap * sizeof(*nc));
			char **nn = nc ? realloc(names, ncap * sizeof(*nn)) : NULL;
			if (nc)
				chain = nc;
			if (nn) {
				names = nn;
				cap = ncap;
			} else {
				free(name);
				st = B_UNKNOWN;
			}
		}
		if (st != B_UNSET) {
			top = c->nodes[cur - 1].bstate = st;
			break;
		}
		c->nodes[cur - 1].bstate = B_UNKNOWN; /* a cycle's guard until it is known */
		chain[len] = cur;
		names[len++] = name;
		cur = parent;
	}
	/* Down: each is its parent's place and its name. */
	while (len > 0) {
		len--;
		struct node *n = &c->nodes[chain[len] - 1];
		const struct node *p = &c->nodes[cur - 1];
		if (top == B_IN) {
			n->bpath = join(p->bpath, names[len]);
			n->bstate = n->bpath ? B_IN : B_UNKNOWN;
			top = n->bstate;
		} else {
			n->bstate = top;
		}
		free(names[len]);
		cur = chain[len];
	}
	free(chain);
	free(names);
	return c->nodes[id - 1].bstate;
}

enum { K_NOTHING, K_FILE, K_DIR, K_UNKNOWN };

/* What the first event of a name says was there before the run (K_DIR: *obj). */
static int first_kind(const struct recon *r, size_t lo, uint32_t *obj)
{
	const struct slot *s = &r->fs[lo];
	const struct ev *e = &r->c->evs[s->ev];
	*obj = 0;
	if (slot_appear(r->c, s)) {
		if (!(e->mask & FAN_RENAME) || !e->over)
			return K_NOTHING;
		if (e->over_obj && e->over_dir) {
			/* A directory a rename replaced is gone: one still there was only changed by
			 * the same thread after the rename (a chmod), and nothing was replaced. */
			int fd = node_open_dir(r->c, e->over_obj);
			if (fd >= 0) {
				close(fd);
				return K_NOTHING;
			}
			*obj = e->over_obj;
			return K_DIR;
		}
		if (e->over_obj)
			return K_FILE;
		return (e->mask & FAN_ONDIR) ? K_UNKNOWN : K_FILE;
	}
	if (e->mask & FAN_ONDIR) {
		*obj = e->obj;
		return e->obj ? K_DIR : K_UNKNOWN;
	}
	return K_FILE;
}

static bool rent_add(struct recon *r, struct rents *l, char *path, const struct stat *st,
		     uint32_t mask)
{
	if (path && l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct rent *nv = realloc(l->v, cap * sizeof(*nv));
		if (nv) {
			l->v = nv;
			l->cap = cap;
		}
	}
	if (!path || l->n == l->cap) {
		free(path);
		r->lost = "out of memory";
		return false;
	}
	l->v[l->n++] = (struct rent){path, st ? st->st_dev : 0, st ? st->st_ino : 0, st != NULL,
				     mask};
	return true;
}

/* Directories still to list (before_list), each with its path. */
struct todo {
	uint32_t *id;
	char **path;
	size_t n, cap;
};

static void todo_push(struct recon *r, struct todo *t, uint32_t id, char *path)
{
	if (path && t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		uint32_t *ni = realloc(t->id, cap * sizeof(*ni));
		if (ni)
			t->id = ni;
		char **np = ni ? realloc(t->path, cap * sizeof(*np)) : NULL;
		if (np) {
			t->path = np;
			t->cap = cap;
		}
	}
	if (!path || t->n == t->cap) {
		free(path);
		r->lost = "out of memory";
		return;
	}
	t->id[t->n] = id;
	t->path[t->n++] = path;
}

/* The regular files directory id held before the run, below prefix; its subdirectories
 * into t. */
static void before_list_one(struct recon *r, struct todo *t, uint32_t id, const char *prefix)
{
	hv_changes *c = r->c;
	if (r->lost)
		return;
	if (c->nodes[id - 1].visited) {
		r->lost = "a directory was found twice where it was before the run";
		return;
	}
	c->nodes[id - 1].visited = true;
	int fd = node_open_dir(c, id);
	if (fd < 0 && errno != ESTALE && errno != ENOENT) {
		r->lost = "a directory's handle could not be opened";
		return;
	}
	if (fd >= 0) {
		/* Names without events: there before as they are now. */
		int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
		if (!d) {
			if (dfd >= 0)
				close(dfd);
			close(fd);
			r->lost = "a directory could not be listed";
			return;
		}
		const struct dirent *de;
		/* cppcheck-suppress readdirCalled ; d is this call's own stream: readdir is
		 * then thread-safe (glibc, POSIX 2024), and readdir_r is deprecated */
		while (!r->lost && (de = readdir(d)) != NULL) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			size_t lo, hi;
			slot_range(r, id, de->d_name, &lo, &hi);
			if (lo < hi)
				continue;
			struct stat st;
			if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
				continue; /* gone since: its deletion is an event of after the run */
			char *p = join(prefix, de->d_name);
			if (!p) {
				r->lost = "out of memory";
				break;
			}
			if (S_ISREG(st.st_mode)) {
				rent_add(r, &r->before, p, &st, 0);
				continue;
			}
			if (S_ISDIR(st.st_mode) && !excluded(c, NULL, p)) {
				int sfd = openat(fd, de->d_name,
						 O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				uint32_t sub = sfd >= 0 ? fd_node(c, sfd) : 0;
				if (sfd >= 0)
					close(sfd);
				if (sub) {
					todo_push(r, t, sub, p);
					p = NULL;
				} else if (sfd >= 0) {
					r->lost = "a directory gives no file handle";
				}
			}
			free(p);
		}
		closedir(d);
	}
	/* Names with events: their first event says what was there. */
	size_t lo = 0, hi = r->nfs;
	while (lo < hi) {
		size_t m = lo + (hi - lo) / 2;
		if (r->fs[m].dir < id)
			lo = m + 1;
		else
			hi = m;
	}
	for (size_t i = lo; !r->lost && i < r->nfs && r->fs[i].dir == id;) {
		size_t j = i;
		uint32_t mask = 0;
		while (j < r->nfs && r->fs[j].dir == id &&
		       !strcmp(name_at(c, r->fs[j].name), name_at(c, r->fs[i].name)))
			mask |= c->evs[r->fs[j++].ev].mask;
		if (!recon_name(name_at(c, r->fs[i].name))) {
			i = j;
			continue;
		}
		uint32_t obj;
		int k = first_kind(r, i, &obj);
		char *p = k == K_NOTHING ? NULL : join(prefix, name_at(c, r->fs[i].name));
		/* Only closed after writing: the name still names what it named before. */
		struct stat st;
		bool quiet = !(mask & ~QUIET_MASK) && fd >= 0 &&
			     fstatat(fd, name_at(c, r->fs[i].name), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			     S_ISREG(st.st_mode);
		if (k == K_FILE)
			rent_add(r, &r->before, p, quiet ? &st : NULL, mask);
		else if (k == K_DIR && p && !excluded(c, NULL, p)) {
			todo_push(r, t, obj, p);
			p = NULL;
		} else if (k == K_UNKNOWN) {
			r->lost = "what a directory held before the run is in no event";
		}
		if (k != K_FILE)
			free(p);
		i = j;
	}
	if (fd >= 0)
		close(fd);
}

/* The regular files directory id held before the run, below prefix, and below its
 * subdirectories then (a stack, not a recursion: trees may be deep). */
static void before_list(struct recon *r, uint32_t id, const char *prefix)
{
	struct todo t = {0};
	todo_push(r, &t, id, strdup(prefix));
	while (t.n > 0) {
		t.n--;
		char *p = t.path[t.n];
		before_list_one(r, &t, t.id[t.n], p);
		free(p);
	}
	free(t.id);
	free(t.path);
}

/* What was at rel (a region's root) before the run, into r->before. */
static void before_region(struct recon *r, const char *rel)
{
	hv_changes *c = r->c;
	uint32_t cur = r->root_id;
	const char *p = rel;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		char *comp = strndup(p, n);
		if (!comp) {
			r->lost = "out of memory";
			return;
		}
		size_t lo, hi;
		slot_range(r, cur, comp, &lo, &hi);
		int k;
		uint32_t obj = 0, mask = 0;
		struct stat st;
		bool have_st = false;
		if (lo < hi) {
			k = first_kind(r, lo, &obj);
			mask = slot_mask(r, cur, comp);
			int fd = !(mask & ~QUIET_MASK) ? node_open_dir(c, cur) : -1;
			have_st = fd >= 0 && fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
				  S_ISREG(st.st_mode);
			if (fd >= 0)
				close(fd);
		} else {
			int fd = node_open_dir(c, cur);
			if (fd < 0) {
				k = fd < 0 && (errno == ESTALE || errno == ENOENT) ? K_NOTHING
										  : K_UNKNOWN;
			} else if (fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) != 0) {
				k = K_NOTHING;
			} else if (S_ISDIR(st.st_mode)) {
				int sfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				obj = sfd >= 0 ? fd_node(c, sfd) : 0;
				if (sfd >= 0)
					close(sfd);
				k = obj ? K_DIR : K_UNKNOWN;
			} else {
				k = S_ISREG(st.st_mode) ? K_FILE : K_NOTHING;
				have_st = true;
			}
			if (fd >= 0)
				close(fd);
		}
		free(comp);
		if (k == K_UNKNOWN) {
			r->lost = "what was at a renamed directory's place before the run is in no event";
			return;
		}
		if (k == K_NOTHING)
			return;
		if (k == K_FILE) {
			/* A file there: only at the region's root itself is it one of its files. */
			if (!slash)
				rent_add(r, &r->before, strdup(rel), have_st ? &st : NULL, mask);
			return;
		}
		cur = obj;
		if (!slash)
			break;
		p = slash + 1;
	}
	before_list(r, cur, rel);
}

/* A descriptor of directory root/rel, each component opened with O_NOFOLLOW; -1 if none. */
static int open_below(const hv_changes *c, const char *rel)
{
	int fd = open(c->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	const char *p = rel;
	while (fd >= 0 && *p) {
		const char *slash = strchr(p, '/');
		char *comp = strndup(p, slash ? (size_t)(slash - p) : strlen(p));
		int nfd = comp ? openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
		free(comp);
		close(fd);
		fd = nfd;
		if (!slash)
			break;
		p = slash + 1;
	}
	return fd;
}

/* The regular files of directory root/rel now, its subdirectories into t (ids unused). */
static void after_list_one(struct recon *r, struct todo *t, const char *rel)
{
	hv_changes *c = r->c;
	int fd = open_below(c, rel);
	if (fd < 0)
		return; /* gone */
	uint32_t id = fd_node(c, fd);
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		close(fd);
		return;
	}
	const struct dirent *de;
	/* cppcheck-suppress readdirCalled ; d is this call's own stream: readdir is then
	 * thread-safe (glibc, POSIX 2024), and readdir_r is deprecated */
	while (!r->lost && (de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		struct stat st;
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		char *p = join(rel, de->d_name);
		if (!p) {
			r->lost = "out of memory";
			break;
		}
		if (S_ISREG(st.st_mode))
			rent_add(r, &r->after, p, &st, id ? slot_mask(r, id, de->d_name) : ~0u);
		else if (S_ISDIR(st.st_mode) && !excluded(c, NULL, p))
			todo_push(r, t, 0, p);
		else
			free(p);
	}
	closedir(d);
	close(fd);
}

static void after_region(struct recon *r, const char *rel)
{
	hv_changes *c = r->c;
	/* A regular file at rel itself. */
	const char *slash = strrchr(rel, '/');
	char *parent = slash ? strndup(rel, (size_t)(slash - rel)) : strdup("");
	int pfd = parent ? open_below(c, parent) : -1;
	free(parent);
	struct stat st;
	if (pfd >= 0 && fstatat(pfd, slash ? slash + 1 : rel, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISREG(st.st_mode)) {
		uint32_t id = fd_node(c, pfd);
		rent_add(r, &r->after, strdup(rel), &st,
			 id ? slot_mask(r, id, slash ? slash + 1 : rel) : ~0u);
	}
	if (pfd >= 0)
		close(pfd);
	struct todo t = {0};
	todo_push(r, &t, 0, strdup(rel));
	while (t.n > 0) {
		t.n--;
		char *p = t.path[t.n];
		after_list_one(r, &t, p);
		free(p);
	}
	free(t.id);
	free(t.path);
}

static int rent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct rent *)a)->path, ((const struct rent *)b)->path);
}

static void rents_free(struct rents *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].path);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/* Whether rel is at or below one of the regions' roots. */
static bool in_region(const struct recon *r, const char *rel)
{
	for (size_t i = 0; i < r->n_roots; i++)
		if (below(rel, r->roots[i], strlen(r->roots[i])))
			return true;
	return false;
}

static hv_status root_add(struct recon *r, const char *rel)
{
	char **nv = realloc(r->roots, (r->n_roots + 1) * sizeof(*nv));
	if (!nv)
		return hv_error_set(HV_ENOMEM, "out of memory");
	r->roots = nv;
	if (!(nv[r->n_roots] = strdup(rel)))
		return hv_error_set(HV_ENOMEM, "out of memory");
	r->n_roots++;
	return HV_OK;
}

/* The regions: the places before and after the run of every directory of root renamed or
 * replaced during it (HV_EIO through lost() when one cannot be placed). */
static hv_status regions_find(struct recon *r, bool *any)
{
	hv_changes *c = r->c;
	*any = false;
	for (size_t i = 0; i < c->n_evs; i++) {
		const struct ev *e = &c->evs[i];
		if (!(e->mask & FAN_RENAME))
			continue;
		if ((e->mask & FAN_ONDIR) && e->obj) {
			struct node *o = &c->nodes[e->obj - 1];
			if (!o->first_ren || c->evs[o->first_ren - 1].seq > e->seq)
				o->first_ren = (uint32_t)i + 1;
			*any = true;
		}
		if (e->over && e->over_obj && e->over_dir) {
			struct node *o = &c->nodes[e->over_obj - 1];
			if (!o->replaced)
				o->replaced = (uint32_t)i + 1;
			*any = true;
		}
	}
	if (!*any)
		return HV_OK;
	hv_status rc = HV_OK;
	int rfd = open(c->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0 || !(r->root_id = fd_node(c, rfd)))
		rc = lost(c, "the directory gives no file handle");
	if (rfd >= 0)
		close(rfd);
	for (size_t i = 0; rc == HV_OK && i < c->n_nodes; i++) {
		uint32_t id = (uint32_t)i + 1;
		const struct node *o = &c->nodes[i];
		if ((!o->first_ren && !o->replaced) || o->created)
			continue;
		int b = before_path(r, id);
		if (b == B_UNKNOWN) {
			rc = lost(c, "where a renamed directory was before the run is not known");
			break;
		}
		if (b == B_IN)
			rc = root_add(r, c->nodes[id - 1].bpath);
		node_resolve(c, id);
		o = &c->nodes[i];
		if (rc == HV_OK && o->where_end == W_UNKNOWN)
			rc = lost(c, "a renamed directory's handle could not be resolved");
		else if (rc == HV_OK && node_in(o))
			rc = root_add(r, o->path);
	}
	for (size_t i = 0; rc == HV_OK && i < r->n_roots; i++)
		if (!*r->roots[i])
			rc = lost(c, "the directory itself was moved or replaced");
	if (rc != HV_OK)
		return rc;
	/* The outermost only: a region holds those below it. */
	if (r->n_roots > 1)
		qsort(r->roots, r->n_roots, sizeof(*r->roots), cmp_str);
	size_t kept = 0;
	for (size_t i = 0; i < r->n_roots; i++) {
		if (kept && below(r->roots[i], r->roots[kept - 1], strlen(r->roots[kept - 1]))) {
			free(r->roots[i]);
			continue;
		}
		r->roots[kept++] = r->roots[i];
	}
	r->n_roots = kept;
	return HV_OK;
}

/* The regions compared path-wise: produced and deleted files into k. */
static hv_status regions_compare(struct recon *r, const hv_store *st, struct cands *k)
{
	hv_changes *c = r->c;
	for (size_t i = 0; !r->lost && i < r->n_roots; i++) {
		before_region(r, r->roots[i]);
		after_region(r, r->roots[i]);
	}
	if (r->lost)
		return lost(c, r->lost);
	if (r->before.n > 1)
		qsort(r->before.v, r->before.n, sizeof(*r->before.v), rent_cmp);
	if (r->after.n > 1)
		qsort(r->after.v, r->after.n, sizeof(*r->after.v), rent_cmp);
	hv_status rc = HV_OK;
	size_t i = 0, j = 0;
	while (rc == HV_OK && (i < r->before.n || j < r->after.n)) {
		const struct rent *b = i < r->before.n ? &r->before.v[i] : NULL;
		const struct rent *a = j < r->after.n ? &r->after.v[j] : NULL;
		int cmp = !b ? 1 : !a ? -1 : strcmp(b->path, a->path);
		const char *path = b && cmp <= 0 ? b->path : a ? a->path : NULL;
		if (!path)
			break;
		if (b && i > 0 && cmp <= 0 && !strcmp(r->before.v[i - 1].path, b->path)) {
			i++; /* a path found twice: once is enough */
			continue;
		}
		if (a && j > 0 && cmp >= 0 && !strcmp(r->after.v[j - 1].path, a->path)) {
			j++;
			continue;
		}
		if (!excluded(c, st, path)) {
			if (cmp < 0) {
				rc = del_add(k, strdup(path));
			} else if (cmp > 0) {
				rc = cand_add(k, strdup(path), "created", false, 0);
			} else {
				/* The same file, untouched, is unchanged; opened for writing only, it
				 * is changed when its ctime says so; anything else changed it. */
				bool same = b->known && a->known && b->dev == a->dev && b->ino == a->ino;
				bool quiet = !(b->mask & ~QUIET_MASK) && !(a->mask & ~QUIET_MASK);
				if (!same || !quiet)
					rc = cand_add(k, strdup(path), "modified", false, 0);
				else if (b->mask || a->mask)
					rc = cand_add(k, strdup(path), "modified", true, 0);
			}
		}
		if (cmp <= 0)
			i++;
		if (cmp >= 0)
			j++;
	}
	return rc;
}

static void recon_free(struct recon *r)
{
	free(r->fs);
	for (size_t i = 0; i < r->n_roots; i++)
		free(r->roots[i]);
	free(r->roots);
	rents_free(&r->before);
	rents_free(&r->after);
}

/* The checks of what no event can tell (HV_OK: none of it happened). */
static hv_status result_checks(hv_changes *c)
{
	if (c->fail_status == HV_ENOMEM)
		return hv_error_set(HV_ENOMEM, "out of memory");
	if (hv__test_switch_on(HV__SWITCH_CHANGES_LOST))
		return lost(c, "HARVEST_TEST_CHANGES_LOST");
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
	return HV_OK;
}

static hv_status result_impl(hv_changes *c, const hv_store *st, struct cands *k)
{
	hv_status rc = c->best_effort ? HV_OK : result_checks(c);
	if (rc != HV_OK)
		return rc;
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
	/* Directories of root renamed or replaced: their places compared path-wise. */
	struct recon r = {.c = c};
	rc = slots_build(&r);
	if (rc != HV_OK)
		return rc;
	bool any = false;
	rc = regions_find(&r, &any);
	if (c->best_effort) {
		/* Only to leave the places of renamed directories out of the deletions: a name's
		 * path there is not where it was before the run. */
		rc = HV_OK;
		any = false;
	}
	if (rc == HV_OK && any)
		rc = regions_compare(&r, st, k);
	if (rc != HV_OK) {
		recon_free(&r);
		return rc;
	}
	/* The slots each name's history is read from, by event: 1 its old name (or its only
	 * one), 2 a rename's new name. */
	uint8_t *use = calloc(c->n_evs + 1, 1);
	if (!use) {
		recon_free(&r);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < c->n_evs && rc == HV_OK; i++) {
		const struct ev *e = &c->evs[i];
		if (!e->dir && !e->dir2) {
			/* A link count changed: the file's other names changed too. */
			if (!e->obj || !e->paired || !c->nodes)
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
		if (((d && d->where_end == W_UNKNOWN) || (d2 && d2->where_end == W_UNKNOWN)) &&
		    c->best_effort)
			continue;
		if ((d && d->where_end == W_UNKNOWN) || (d2 && d2->where_end == W_UNKNOWN)) {
			rc = lost(c, "a directory's handle could not be resolved");
			break;
		}
		bool in1 = d && node_in(d), in2 = d2 && node_in(d2);
		if ((e->mask & FAN_RENAME) && (e->mask & FAN_ONDIR) && (in1 || in2)) {
			/* A directory made during the run holds only what the run made, each with
			 * its own events, which resolve to where it is now. Any other (one of root
			 * or one moved in from outside) is a region, compared above. */
			if (!e->obj && !c->best_effort) {
				rc = lost(c, "a directory was renamed and the event does not say which");
				break;
			}
			continue;
		}
		if (e->mask & FAN_RENAME)
			use[i] = (uint8_t)((in1 ? 1 : 0) | (in2 ? 2 : 0));
		else if (in1 && *name_at(c, e->name))
			use[i] = 1;
	}
	if (rc != HV_OK) {
		free(use);
		recon_free(&r);
		return rc;
	}
	const struct slot *sl = r.fs;
	size_t ns = r.nfs;
	for (size_t i = 0; i < ns && rc == HV_OK;) {
		if (!(use[sl[i].ev] & (sl[i].to ? 2 : 1))) {
			i++;
			continue;
		}
		size_t j = i;
		bool changed = false, closew = false, replaced = false;
		while (j < ns && sl[j].dir == sl[i].dir &&
		       strcmp(name_at(c, sl[j].name), name_at(c, sl[i].name)) == 0) {
			uint32_t m = c->evs[sl[j].ev].mask;
			if (use[sl[j].ev] & (sl[j].to ? 2 : 1)) {
				if (m & (FAN_CREATE | FAN_DELETE | FAN_MODIFY | FAN_ATTRIB | FAN_RENAME))
					changed = true;
				if (m & FAN_CLOSE_WRITE)
					closew = true;
			}
			/* The name lost what it held (deleted, renamed away) or got another (made,
			 * renamed to): its object now may not be its object before the run. */
			if ((m & (FAN_DELETE | FAN_CREATE)) || (m & FAN_RENAME))
				replaced = true;
			j++;
		}
		const struct slot *first = &sl[i];
		const struct ev *fe = &c->evs[first->ev];
		/* A rename's old name: nothing appeared there, whatever else its mask says. */
		bool appear = first->to || (!(fe->mask & FAN_RENAME) && (fe->mask & FAN_CREATE));
		bool over = first->to && fe->over;
		const struct node *d = &c->nodes[first->dir - 1];
		/* Before the run: nothing when the slot's history starts with an appearance (or
		 * the directory is new), a directory when with a directory's event, else a file. */
		bool had_file = !d->created && (!appear || over) &&
				!(fe->mask & FAN_ONDIR && !appear);
		char *rel = join(d->path, name_at(c, first->name));
		if (!rel) {
			rc = hv_error_set(HV_ENOMEM, "out of memory");
			break;
		}
		if (excluded(c, st, rel) || in_region(&r, rel)) {
			free(rel);
			i = j;
			continue;
		}
		struct stat fst;
		bool is_reg = d->where_end == W_IN && lstat_below(c, rel, &fst) == 0 &&
			      S_ISREG(fst.st_mode);
		bool exists = d->where_end == W_IN && (is_reg || lstat_below(c, rel, &fst) == 0);
		/* In a directory still in its place, a name that nothing was made at, renamed to
		 * or from, or deleted from holds now what it held before: a FIFO, device or
		 * symlink that was only used (written, touched, chmod'ed) was no regular file then
		 * either. A name with nothing at it now never was a directory entry: the kernel's
		 * name of an O_TMPFILE file ("#<inode>"), written and closed, or linked
		 * elsewhere. */
		if (had_file && !replaced && d->where_end == W_IN && !is_reg)
			had_file = false;
		if (exists && !S_ISDIR(fst.st_mode) && (changed || closew)) {
			if (is_reg && fst.st_nlink > 1)
				rc = inode_add(k, fst.st_dev, fst.st_ino);
			if (rc == HV_OK)
				rc = cand_add(k, strdup(rel), had_file ? "modified" : "created",
					      !changed, 0);
		}
		/* A name of a directory deleted during the run: what is at its path now (in a
		 * directory made there again) is not deleted when it is a regular file, and it was
		 * there before, whatever the new directory's own events say. */
		bool reg_now = is_reg;
		if (!reg_now && had_file && d->where_end == W_STALE) {
			struct stat now;
			reg_now = lstat_below(c, rel, &now) == 0 && S_ISREG(now.st_mode);
			if (reg_now && rc == HV_OK)
				rc = path_push(&k->was, &k->n_was, &k->cap_was, strdup(rel));
		}
		if (rc == HV_OK && had_file && !reg_now)
			rc = del_add(k, strdup(rel));
		free(rel);
		i = j;
	}
	free(use);
	recon_free(&r);
	if (rc == HV_OK && k->n_inodes)
		rc = walk_inodes(c, st, k);
	return rc;
}

/* The files below root whose ctime is not older than the start of tracking, and every file
 * below a directory whose ctime is not (renamed in or within: its files keep their times),
 * into k, replacing what the events proposed; their change is "created" when the events say
 * the name was not there before, else "modified". One walk. */
static hv_status walk_since(hv_changes *c, const hv_store *st, struct cands *k)
{
	if (k->n > 1)
		qsort(k->v, k->n, sizeof(*k->v), cand_cmp);
	struct cands nk = {0};
	hv_walk_opts wo;
	hv_walk_opts_init(&wo);
	wo.threads = c->opts.threads;
	wo.no_hidden = !c->opts.include_hidden;
	wo.excludes = (const char *const *)c->opts.excludes;
	wo.n_excludes = c->opts.n_excludes;
	hv_walk *w;
	hv_status rc = hv_walk_open(&w, c->root, &wo);
	if (rc != HV_OK)
		return rc;
	bool *fresh = NULL; /* by depth: the directory at that depth on the path is new */
	size_t cap = 0;
	const hv_entry *e;
	while ((rc = hv_walk_next(w, &e)) != HV_DONE) {
		if (rc == HV_WARN)
			continue;
		if (rc != HV_OK)
			break;
		if (!e->have_lstat)
			continue;
		size_t d = (size_t)e->depth;
		if (d + 1 > cap) {
			size_t ncap = (d + 1) * 2;
			bool *nf = realloc(fresh, ncap * sizeof(*nf));
			if (!nf) {
				rc = hv_error_set(HV_ENOMEM, "out of memory");
				break;
			}
			fresh = nf;
			cap = ncap;
		}
		/* Walk order: a directory's entries follow it, so fresh[d - 1] is the parent's. */
		bool under = d > 1 && fresh[d - 1];
		bool is_new = under || e->lst.ctime_ns >= c->start_ns;
		if (S_ISDIR(e->lst.mode)) {
			fresh[d] = is_new;
			continue;
		}
		if (!S_ISREG(e->lst.mode) || !is_new || excluded(c, st, e->path))
			continue;
		const char *change = "modified";
		size_t lo = 0, hi = k->n;
		while (lo < hi) {
			size_t m = lo + (hi - lo) / 2;
			int n = hv_store_path_cmp(k->v[m].path, strlen(k->v[m].path), e->path,
						  e->path_len);
			if (n < 0)
				lo = m + 1;
			else
				hi = m;
		}
		if (lo < k->n && !strcmp(k->v[lo].path, e->path))
			change = k->v[lo].change;
		rc = cand_add(&nk, strdup(e->path), change, false, 0);
		if (rc != HV_OK)
			break;
	}
	hv_walk_close(w);
	free(fresh);
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i].path);
	free(k->v);
	k->v = nk.v;
	k->n = nk.n;
	k->cap = nk.cap;
	return rc == HV_DONE ? HV_OK : rc;
}

static hv_status result_finish(hv_changes *c, const hv_store *st, hv_change_set *out,
			       bool since)
{
	memset(out, 0, sizeof(*out));
	out->start_ns = c->start_ns;
	struct cands k = {0};
	hv_status rc = result_impl(c, st, &k);
	if (rc == HV_OK && since)
		rc = walk_since(c, st, &k);
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
		if (rc == HV_OK && k.n_was > 1)
			qsort(k.was, k.n_was, sizeof(*k.was), str_cmp);
		for (size_t i = 0; rc == HV_OK && out->paths && out->change && k.n_was && i < out->n;
		     i++)
			if (out->change[i] && !strcmp(out->change[i], "created") &&
			    bsearch(&out->paths[i], k.was, k.n_was, sizeof(*k.was), str_cmp))
				out->change[i] = "modified";
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
	for (size_t i = 0; i < k.n_was; i++)
		free(k.was[i]);
	free(k.was);
	free(k.inodes);
	if (rc != HV_OK) {
		hv_error_saved saved;
		hv_error_save(&saved);
		hv_change_set_free(out);
		return hv_error_restore(&saved, rc);
	}
	return HV_OK;
}

hv_status hv_changes_result(hv_changes *c, const hv_store *st, hv_change_set *out)
{
	c->why = NULL;
	c->best_effort = false;
	return result_finish(c, st, out, false);
}

hv_status hv_changes_result_since(hv_changes *c, const hv_store *st, hv_change_set *out)
{
	c->best_effort = true;
	hv_status rc = result_finish(c, st, out, true);
	c->best_effort = false;
	return rc;
}

const char *hv_changes_why(const hv_changes *c)
{
	return c->why;
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
