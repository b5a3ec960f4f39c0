/* Walker stress test (issue 5): random trees walked by harvest and by an independent
 * reference written here, compared record by record, over many seeds and option sets.
 *
 * Each seed builds a tree below TMP/s<seed>/t: random depth (up to 12) and width, names of
 * random bytes (anything but '/' and NUL: control bytes, newlines, 0x80-0xff, leading dots,
 * prefixes and near-copies of sibling names, up to 255 bytes), regular files of 0-4 KiB with
 * assorted modes, hard links, FIFOs, sockets, a character device when mknod is allowed,
 * symlinks (to files, to FIFOs, to directories inside and outside the root, absolute and
 * relative, dangling, through a file, to themselves, in pairs and chains, to every ancestor
 * and to the directory holding the root), random timestamps with nanoseconds, and a few
 * directories made unreadable (modes 000, 0400, 0100, 0300, 0700, some owned by nobody).
 *
 * Every option set (sorted and unsorted; threads 1, 2 and 8; follow; max_depth; no_hidden;
 * exclude globs; max_entries; readlink; RLIMIT_NOFILE lowered so that the descriptor cache
 * evicts and reopens; the root given with a trailing slash or through a symlink) is walked
 * twice per seed: as the test's user (root in CI) in this process, and as nobody in a child
 * (tu_as_nobody), where the unreadable directories give warnings.
 *
 * The reference lists each directory with fdopendir/readdir, lstat and stat with fstatat,
 * sorts with memcmp, and enters directories recursively with openat. Follow semantics
 * (SPEC 2, walk --follow): a symlink whose target is a directory is entered, except when the
 * target is (by dev, ino) the directory holding the link or one of its ancestors up to the
 * root: then it is listed, not entered, and a warning names it. A directory that cannot be
 * opened is listed and gives a warning "ROOT/path: <strerror>"; an entry whose lstat fails
 * (in a readable but not searchable directory) keeps the directory entry's type and is not
 * entered. Records at depth max_depth are listed and not entered (and so not checked for
 * loops).
 *
 * Compared: path bytes, name, depth, type, have_lstat (dev, ino, size, mode, mtime, ctime),
 * have_stat (is_dir, size), the readlink target, what hv_walk_openat opens for regular files,
 * the counters, and the set of warnings. Sorted walks must give the reference's order
 * exactly; unsorted walks the same set, in a pre-order (every record's parent directory is
 * the latest open directory on the path: each subtree is contiguous, right after its
 * directory).
 *
 * test_fd_pressure_read_ahead walks a few of the same trees with 8 threads and only 10 free
 * descriptors: it fails today (read-ahead workers turn EMFILE into lost subtrees; see there).
 *
 * Environment: HV_STRESS_SEEDS=N runs seeds 1..N (default 40; 20 under valgrind, whose step
 * checks memory, not more shapes: the suite's own run has all 40); HV_STRESS_SEED=S runs seed S
 * alone; HV_STRESS_KEEP=1 leaves the trees of failing seeds on disk and prints where;
 * HV_STRESS_FREE_FDS and HV_STRESS_PRESSURE_SEEDS tune test_fd_pressure_read_ahead. Each seed
 * prints a line (its tree, timings) and, per user, the walks, records and warnings checked. */
#include "testutil.h"
#include "harvest/walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SEEDS 40
#define VALGRIND_SEEDS 20
#define MAX_DEPTH 12
/* Relative paths in the tree stay below this, so every path fits a syscall and a message. */
#define MAX_REL 2400
/* Under follow, a tree is pruned (symlinks to directories removed) until a walk gives at
 * most this many records. */
#define FOLLOW_CAP 3000
#define MAX_OPTSETS 16

/* ---- small helpers (no cmocka: they also run in the nobody child) ------------------------ */

/* a + sep + b in a new string (sep only when both are non-empty). */
static char *join(const char *a, size_t la, const char *b, size_t lb, size_t *out_len)
{
	size_t n = la + (la && lb ? 1 : 0) + lb;
	char *p = tu_xmalloc(n + 1);
	memcpy(p, a, la);
	size_t o = la;
	if (la && lb)
		p[o++] = '/';
	memcpy(p + o, b, lb);
	p[n] = '\0';
	if (out_len)
		*out_len = n;
	return p;
}

/* Bytes shown printable for messages: \xNN for anything else. */
static const char *show(char *buf, size_t cap, const char *s, size_t len)
{
	size_t o = 0, i;
	if (!s)
		return "(null)";
	if (cap < 40)
		return "";
	for (i = 0; i < len && o + 32 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
	}
	if (i < len)
		o += (size_t)snprintf(buf + o, cap - o, "...(%zu bytes)", len);
	if (o >= cap)
		o = cap - 1;
	buf[o] = '\0';
	return buf;
}

#define SHOW(b, s, len) show(b, sizeof(b), s, len)

static int bytes_cmp(const char *a, size_t la, const char *b, size_t lb)
{
	int c = memcmp(a, b, la < lb ? la : lb);
	if (c)
		return c;
	return la < lb ? -1 : la > lb;
}

static hv_ftype type_of_mode(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFREG: return HV_FT_FILE;
	case S_IFDIR: return HV_FT_DIR;
	case S_IFLNK: return HV_FT_SYMLINK;
	case S_IFIFO: return HV_FT_FIFO;
	case S_IFSOCK: return HV_FT_SOCKET;
	case S_IFCHR: return HV_FT_CHAR;
	case S_IFBLK: return HV_FT_BLOCK;
	default: return HV_FT_UNKNOWN;
	}
}

static hv_ftype type_of_dtype(unsigned char d)
{
	switch (d) {
	case DT_REG: return HV_FT_FILE;
	case DT_DIR: return HV_FT_DIR;
	case DT_LNK: return HV_FT_SYMLINK;
	case DT_FIFO: return HV_FT_FIFO;
	case DT_SOCK: return HV_FT_SOCKET;
	case DT_CHR: return HV_FT_CHAR;
	case DT_BLK: return HV_FT_BLOCK;
	default: return HV_FT_UNKNOWN;
	}
}

/* ---- a seeded generator (splitmix64) ----------------------------------------------------- */

typedef struct rng {
	uint64_t s;
} rng;

static uint64_t rnext(rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static unsigned rn(rng *r, unsigned n)
{
	return n ? (unsigned)(rnext(r) % n) : 0;
}

static bool chance(rng *r, unsigned pct)
{
	return rn(r, 100) < pct;
}

/* ---- the random tree ----------------------------------------------------------------------- */

typedef struct gent {
	char *rel;  /* relative to the root; "" for the root */
	size_t len;
	int depth;  /* the root is 0 */
	bool gone;  /* removed by pruning */
} gent;

typedef struct glist {
	gent *v;
	size_t n, cap;
} glist;

static gent *glist_add(glist *l, const char *rel, size_t len, int depth)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 32;
		l->v = tu_xrealloc(l->v, l->cap * sizeof(*l->v));
	}
	gent *g = &l->v[l->n++];
	g->rel = tu_xmemdup(rel, len);
	g->len = len;
	g->depth = depth;
	g->gone = false;
	return g;
}

static void glist_free(glist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].rel);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

typedef struct tree {
	unsigned seed;
	char *base;      /* TMP/s<seed>: holds the root t, a directory out, and rl -> t */
	char *root;      /* base/t */
	char *rootlink;  /* base/rl */
	int rootfd;
	glist dirs;      /* dirs.v[0] is the root */
	glist regs;      /* regular files (hard link and symlink targets) */
	glist others;    /* FIFOs, sockets, devices (symlink targets) */
	glist links;     /* symlinks made */
	glist pending;   /* symlinks to make, after everything else exists */
	unsigned budget, n_entries;
	int target_depth, deepest;
	bool wide_pending;
	unsigned n_unreadable;
	int pressure_fds; /* > 0: walk only with 8 threads and this many free descriptors */
	char modes[256]; /* the directories whose modes were changed, for messages */
} tree;

static char rand_byte(rng *r)
{
	unsigned p = rn(r, 100);
	int c;
	if (p < 40)
		c = 'a' + (int)rn(r, 26);
	else if (p < 58)
		c = 0x20 + (int)rn(r, 0x5f); /* printable ASCII, with space, '*', '?', '[', ... */
	else if (p < 66)
		c = p < 61 ? '\n' : 1 + (int)rn(r, 31);
	else
		c = 0x7f + (int)rn(r, 0x81); /* 0x7f-0xff: invalid UTF-8 alone, some sequences */
	if (c == '/')
		c = '_';
	return (char)c;
}

typedef struct names {
	char **v;
	size_t *len;
	size_t n, cap;
} names;

static bool names_has(const names *ns, const char *s, size_t len)
{
	for (size_t i = 0; i < ns->n; i++)
		if (ns->len[i] == len && memcmp(ns->v[i], s, len) == 0)
			return true;
	return false;
}

static void names_add(names *ns, const char *s, size_t len)
{
	if (ns->n == ns->cap) {
		ns->cap = ns->cap ? ns->cap * 2 : 16;
		ns->v = tu_xrealloc(ns->v, ns->cap * sizeof(*ns->v));
		ns->len = tu_xrealloc(ns->len, ns->cap * sizeof(*ns->len));
	}
	ns->v[ns->n] = tu_xmemdup(s, len);
	ns->len[ns->n++] = len;
}

static void names_free(names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
	free(ns->len);
	memset(ns, 0, sizeof(*ns));
}

/* A fresh name (1..maxlen bytes, unique among sibs) into buf; returns its length. */
static size_t rand_name(rng *r, char *buf, size_t maxlen, names *sibs)
{
	for (;;) {
		size_t len;
		if (sibs->n && chance(r, 15)) {
			/* A near-copy of a sibling: a prefix, an extension or a last byte changed,
			 * which is where bytewise sorting and string handling go wrong. */
			size_t k = rn(r, (unsigned)sibs->n);
			len = sibs->len[k] < maxlen ? sibs->len[k] : maxlen;
			memcpy(buf, sibs->v[k], len);
			switch (rn(r, 3)) {
			case 0:
				if (len > 1)
					len--;
				break;
			case 1:
				if (len < maxlen)
					buf[len++] = rand_byte(r);
				break;
			default:
				buf[len - 1] = rand_byte(r);
			}
		} else {
			unsigned p = rn(r, 100);
			len = p < 70 ? 1 + rn(r, 12) : p < 95 ? 13 + rn(r, 28) : 100 + rn(r, 156);
			if (len > maxlen)
				len = maxlen;
			for (size_t i = 0; i < len; i++)
				buf[i] = rand_byte(r);
			if (chance(r, 15))
				buf[0] = '.';
		}
		buf[len] = '\0';
		if ((len == 1 && buf[0] == '.') || (len == 2 && buf[0] == '.' && buf[1] == '.'))
			continue;
		if (names_has(sibs, buf, len))
			continue;
		names_add(sibs, buf, len);
		return len;
	}
}

static void rand_times(rng *r, struct timespec ts[2])
{
	ts[0].tv_sec = 1600000000 + (time_t)rn(r, 100000000);
	ts[0].tv_nsec = (long)rn(r, 1000000000);
	/* mtimes from 1954 to 2065, with nanoseconds; a few whole seconds. */
	ts[1].tv_sec = (time_t)((int64_t)rn(r, 3500000000u) - 500000000);
	ts[1].tv_nsec = chance(r, 10) ? 0 : (long)rn(r, 1000000000);
}

static int must(int rc, const char *what, tree *t)
{
	if (rc != 0)
		fail_msg("seed %u: %s: %s", t->seed, what, strerror(errno));
	return rc;
}

static void make_file(tree *t, rng *r, int dfd, const char *name)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		fail_msg("seed %u: create file: %s", t->seed, strerror(errno));
	size_t size = chance(r, 10) ? 0 : rn(r, 4097);
	char buf[4096];
	for (size_t i = 0; i < size; i++)
		buf[i] = (char)rnext(r);
	if (size && write(fd, buf, size) != (ssize_t)size)
		fail_msg("seed %u: write: %s", t->seed, strerror(errno));
	if (chance(r, 15)) {
		static const mode_t modes[] = {0600, 0, 0755, 0444, 0604};
		must(fchmod(fd, modes[rn(r, 5)]), "fchmod", t);
	}
	close(fd);
}

/* Fills directory dirs.v[di] (already made) with children, then each new subdirectory. */
static void gen_dir(tree *t, rng *r, size_t di, bool spine)
{
	char *drel = tu_xmemdup(t->dirs.v[di].rel, t->dirs.v[di].len);
	size_t dlen = t->dirs.v[di].len;
	int depth = t->dirs.v[di].depth;
	int dfd = di == 0 ? dup(t->rootfd)
			  : openat(t->rootfd, drel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		fail_msg("seed %u: open a new directory: %s", t->seed, strerror(errno));
	if (depth > t->deepest)
		t->deepest = depth;

	unsigned width = depth == 0 ? 3 + rn(r, 8) : rn(r, 11);
	if (t->wide_pending && depth >= 1 && chance(r, 30)) {
		/* Hundreds of entries, some long: several getdents64 calls for one directory. */
		width = 300 + rn(r, 500);
		t->wide_pending = false;
		t->budget += width;
	}
	size_t room = MAX_REL - dlen - 1;
	if (dlen + 2 >= MAX_REL)
		width = 0;
	size_t maxlen = room < 255 ? room : 255;

	names sibs = {0};
	size_t first_sub = t->dirs.n;
	bool spine_made = false;
	char name[256];
	struct timespec ts[2];
	for (unsigned i = 0; i < width && (t->n_entries < t->budget || (i == 0 && spine)); i++) {
		size_t nlen = rand_name(r, name, maxlen, &sibs);
		size_t rlen;
		char *rel = join(drel, dlen, name, nlen, &rlen);
		unsigned k = rn(r, 100);
		bool spine_child = i == 0 && spine && depth < t->target_depth;
		t->n_entries++;
		if (spine_child || (depth < t->target_depth && k < 30)) {
			must(mkdirat(dfd, name, 0755), "mkdir", t);
			glist_add(&t->dirs, rel, rlen, depth + 1);
			if (spine_child)
				spine_made = true;
		} else if (k < 64) {
			make_file(t, r, dfd, name);
			glist_add(&t->regs, rel, rlen, depth + 1);
		} else if (k < 71) {
			must(mkfifoat(dfd, name, chance(r, 20) ? 0600 : 0644), "mkfifo", t);
			glist_add(&t->others, rel, rlen, depth + 1);
		} else if (k < 73) {
			must(mknodat(dfd, name, S_IFSOCK | 0644, 0), "mknod socket", t);
			glist_add(&t->others, rel, rlen, depth + 1);
		} else if (k < 74 && mknodat(dfd, name, S_IFCHR | 0666, makedev(1, 3)) == 0) {
			glist_add(&t->others, rel, rlen, depth + 1);
		} else if (k < 77 && t->regs.n) {
			const gent *f = &t->regs.v[rn(r, (unsigned)t->regs.n)];
			must(linkat(t->rootfd, f->rel, dfd, name, 0), "link", t);
			glist_add(&t->regs, rel, rlen, depth + 1);
		} else if (k < 77) {
			make_file(t, r, dfd, name);
			glist_add(&t->regs, rel, rlen, depth + 1);
		} else {
			glist_add(&t->pending, rel, rlen, depth + 1);
		}
		if (!(k >= 77 && !spine_child)) {
			/* Not a pending symlink: the entry exists; give it its times. Directories
			 * get theirs at the end, when nothing more is made in them. */
			struct stat st;
			if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
				rand_times(r, ts);
				must(utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW), "utimensat", t);
			}
		}
		free(rel);
	}
	names_free(&sibs);
	close(dfd);
	free(drel);
	size_t end = t->dirs.n;
	for (size_t s = first_sub; s < end; s++)
		gen_dir(t, r, s, spine && spine_made && s == first_sub);
}

/* "../" depth times then rel: rel (relative to the root) seen from a directory at depth. */
static char *rel_from(int depth, const char *rel, size_t rlen)
{
	size_t n = (size_t)depth * 3 + rlen + 2;
	char *p = tu_xmalloc(n);
	size_t o = 0;
	for (int i = 0; i < depth; i++) {
		memcpy(p + o, "../", 3);
		o += 3;
	}
	memcpy(p + o, rel, rlen);
	o += rlen;
	if (o == 0)
		p[o++] = '.';
	else if (rlen == 0)
		o--; /* "../.." rather than "../../" */
	p[o] = '\0';
	return p;
}

/* The symlink at pending.v[i], its target chosen among everything in the tree. */
static void make_link(tree *t, rng *r, size_t i, char **forced)
{
	const gent *p = &t->pending.v[i];
	int dd = p->depth - 1; /* the depth of the directory holding the link */
	char *target = NULL;
	char buf[300];
	if (forced[i]) {
		target = forced[i];
		forced[i] = NULL;
	}
	while (!target) {
		unsigned k = rn(r, 100);
		if (k < 16 && t->regs.n) {
			const gent *g = &t->regs.v[rn(r, (unsigned)t->regs.n)];
			target = rel_from(dd, g->rel, g->len);
		} else if (k < 20 && t->others.n) {
			const gent *g = &t->others.v[rn(r, (unsigned)t->others.n)];
			target = rel_from(dd, g->rel, g->len);
		} else if (k < 36) {
			const gent *g = &t->dirs.v[rn(r, (unsigned)t->dirs.n)];
			target = rel_from(dd, g->rel, g->len);
		} else if (k < 48) {
			/* The directory holding the link, or an ancestor up to the root. */
			int up = (int)rn(r, (unsigned)dd + 1);
			target = rel_from(up, "", 0);
		} else if (k < 53) {
			const gent *g = &t->dirs.v[rn(r, (unsigned)t->dirs.n)];
			target = join(t->root, strlen(t->root), g->rel, g->len, NULL);
		} else if (k < 60) {
			/* Out of the root: the directory holding the root, or a tree beside it. */
			static const char *const outs[] = {"", "out", "out/sub", "rl"};
			const char *o = outs[rn(r, 4)];
			target = rel_from(dd + 1, o, strlen(o));
		} else if (k < 68) {
			/* Dangling, with odd bytes; sometimes through a regular file (ENOTDIR). */
			size_t n = 0;
			memcpy(buf, "zz\x7f", 3);
			n = 3;
			for (unsigned j = 1 + rn(r, 20); j > 0; j--) {
				char c = rand_byte(r);
				buf[n++] = c;
			}
			buf[n] = '\0';
			if (chance(r, 30) && t->regs.n) {
				const gent *g = &t->regs.v[rn(r, (unsigned)t->regs.n)];
				char *f = rel_from(dd, g->rel, g->len);
				target = join(f, strlen(f), "x", 1, NULL);
				free(f);
			} else {
				target = rel_from(rn(r, (unsigned)dd + 1), buf, n);
			}
		} else if (k < 74) {
			/* Itself: ELOOP. */
			const char *slash = strrchr(p->rel, '/');
			target = tu_xmemdup(slash ? slash + 1 : p->rel, strlen(slash ? slash + 1 : p->rel));
		} else if (k < 86) {
			/* Another symlink, made or to be made: chains, and loops through several. */
			const gent *g = chance(r, 50) && t->links.n
					     ? &t->links.v[rn(r, (unsigned)t->links.n)]
					     : &t->pending.v[rn(r, (unsigned)t->pending.n)];
			target = rel_from(dd, g->rel, g->len);
		} else {
			/* A pair pointing at each other. */
			size_t j = i + 1 + rn(r, 4);
			if (j >= t->pending.n || forced[j])
				continue;
			const gent *q = &t->pending.v[j];
			target = rel_from(dd, q->rel, q->len);
			forced[j] = rel_from(q->depth - 1, p->rel, p->len);
		}
		if (strlen(target) >= 4000) {
			free(target);
			target = NULL;
		}
	}
	must(symlinkat(target, t->rootfd, p->rel), "symlink", t);
	free(target);
	struct timespec ts[2];
	rand_times(r, ts);
	must(utimensat(t->rootfd, p->rel, ts, AT_SYMLINK_NOFOLLOW), "utimensat symlink", t);
	glist_add(&t->links, p->rel, p->len, p->depth);
}

/* ---- records, the reference walk and harvest's walk --------------------------------------- */

typedef struct xrec {
	char *path;
	size_t path_len;
	size_t name_len;     /* the name is the last name_len bytes of path */
	int depth;
	hv_ftype type;
	bool have_lstat, have_stat, is_dir;
	uint64_t size;       /* when have_stat */
	hv_stat lst;         /* when have_lstat */
	char *target;        /* when read */
	size_t target_len;
	int open_err;        /* regular files: 0 when opening worked, else errno; -1 not tried */
	bool open_wrong;     /* hv_walk_openat opened another inode */
} xrec;

enum { W_ERRNO, W_LOOP, W_LIMIT };

typedef struct xwarn {
	char *msg;           /* harvest: the message; reference: the prefix "ROOT/path: " */
	size_t after;        /* records given before it */
	int kind, err;       /* reference only */
	bool used;
} xwarn;

typedef struct xwalk {
	xrec *r;
	size_t n, cap;
	xwarn *w;
	size_t nw, capw;
	bool over;           /* stopped at the cap */
	uint64_t count, warnings;  /* harvest's counters */
} xwalk;

static xrec *xwalk_rec(xwalk *x)
{
	if (x->n == x->cap) {
		x->cap = x->cap ? x->cap * 2 : 128;
		x->r = tu_xrealloc(x->r, x->cap * sizeof(*x->r));
	}
	xrec *r = &x->r[x->n++];
	memset(r, 0, sizeof(*r));
	r->open_err = -1;
	return r;
}

static void xwalk_warn(xwalk *x, char *msg, int kind, int err)
{
	if (x->nw == x->capw) {
		x->capw = x->capw ? x->capw * 2 : 16;
		x->w = tu_xrealloc(x->w, x->capw * sizeof(*x->w));
	}
	xwarn *w = &x->w[x->nw++];
	w->msg = msg;
	w->after = x->n;
	w->kind = kind;
	w->err = err;
	w->used = false;
}

static void xwalk_free(xwalk *x)
{
	for (size_t i = 0; i < x->n; i++) {
		free(x->r[i].path);
		free(x->r[i].target);
	}
	for (size_t i = 0; i < x->nw; i++)
		free(x->w[i].msg);
	free(x->r);
	free(x->w);
	memset(x, 0, sizeof(*x));
}

typedef struct wopts {
	char label[128];
	bool sorted;
	int threads;
	bool follow;
	int max_depth;
	bool no_hidden;
	const char *excl[2];
	size_t n_excl;
	uint64_t max_entries;
	bool readlink;
	int free_fds;  /* > 0: RLIMIT_NOFILE lowered to leave this many descriptors free */
	int root_kind; /* 0: the root's path; 1: with a trailing slash; 2: a symlink to it */
} wopts;

static void stat_fill(const struct stat *st, hv_stat *o)
{
	o->dev = (uint64_t)st->st_dev;
	o->ino = (uint64_t)st->st_ino;
	o->size = (uint64_t)st->st_size;
	o->mode = (uint32_t)st->st_mode;
	o->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
	o->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec;
}

typedef struct rent {
	char *name;
	size_t len;
	unsigned char dtype;
} rent;

static int rent_cmp(const void *a, const void *b)
{
	const rent *x = a, *y = b;
	return bytes_cmp(x->name, x->len, y->name, y->len);
}

typedef struct refctx {
	const wopts *o;
	const char *msgroot;
	xwalk *out;
	size_t cap;
	bool count_only; /* no link targets, no opening of files */
	struct { uint64_t dev, ino; } *anc;
	size_t nanc, capanc;
} refctx;

static bool ref_excluded(const wopts *o, const char *name)
{
	if (o->no_hidden && name[0] == '.')
		return true;
	for (size_t i = 0; i < o->n_excl; i++)
		if (fnmatch(o->excl[i], name, 0) == 0)
			return true;
	return false;
}

static char *ref_msg(const refctx *c, const char *path, size_t plen)
{
	size_t rl = strlen(c->msgroot);
	char *m = tu_xmalloc(rl + 1 + plen + 3);
	memcpy(m, c->msgroot, rl);
	m[rl] = '/';
	memcpy(m + rl + 1, path, plen);
	memcpy(m + rl + 1 + plen, ": ", 3);
	return m;
}

/* Lists directory dfd (at path rel, depth) and what it leads to, recursively. */
static void ref_dir(refctx *c, int dfd, const char *rel, size_t rel_len, int depth)
{
	int dup_fd = dup(dfd);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d) {
		fprintf(stderr, "reference: fdopendir: %s\n", strerror(errno));
		abort();
	}
	rent *ents = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		const char *nm = de->d_name;
		if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 || ref_excluded(c->o, nm))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			ents = tu_xrealloc(ents, cap * sizeof(*ents));
		}
		ents[n].len = strlen(nm);
		ents[n].name = tu_xmemdup(nm, ents[n].len);
		ents[n].dtype = de->d_type;
		n++;
	}
	closedir(d);
	/* Always sorted: one reference serves the sorted walks (in order) and the unsorted
	 * ones (as a set). */
	if (n > 1)
		qsort(ents, n, sizeof(*ents), rent_cmp);

	for (size_t i = 0; i < n; i++) {
		const char *name = ents[i].name;
		if (c->out->n >= c->cap) {
			c->out->over = true;
			break;
		}
		xrec *x = xwalk_rec(c->out);
		x->path = join(rel, rel_len, name, ents[i].len, &x->path_len);
		x->name_len = ents[i].len;
		x->depth = depth + 1;
		struct stat ls, st;
		x->have_lstat = fstatat(dfd, name, &ls, AT_SYMLINK_NOFOLLOW) == 0;
		x->type = x->have_lstat ? type_of_mode(ls.st_mode) : type_of_dtype(ents[i].dtype);
		bool link = x->have_lstat && S_ISLNK(ls.st_mode);
		if (x->have_lstat) {
			stat_fill(&ls, &x->lst);
			if (link)
				x->have_stat = fstatat(dfd, name, &st, 0) == 0;
			else
				st = ls, x->have_stat = true;
		}
		if (x->have_stat) {
			x->is_dir = S_ISDIR(st.st_mode);
			x->size = (uint64_t)st.st_size;
		}
		if (link && !c->count_only) {
			char tb[PATH_MAX + 1];
			ssize_t tl = readlinkat(dfd, name, tb, sizeof(tb));
			if (tl >= 0 && (size_t)tl < sizeof(tb)) {
				x->target = tu_xmemdup(tb, (size_t)tl);
				x->target_len = (size_t)tl;
			}
		}
		if (x->type == HV_FT_FILE && x->have_lstat && !c->count_only) {
			int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
			x->open_err = fd >= 0 ? 0 : errno;
			if (fd >= 0)
				close(fd);
		}

		/* Entered? */
		if (c->o->max_depth >= 0 && depth + 1 >= c->o->max_depth)
			continue;
		if (!x->have_lstat)
			continue;
		if (link ? !(c->o->follow && x->have_stat && S_ISDIR(st.st_mode))
			 : !S_ISDIR(ls.st_mode))
			continue;
		uint64_t dev = (uint64_t)(link ? st.st_dev : ls.st_dev);
		uint64_t ino = (uint64_t)(link ? st.st_ino : ls.st_ino);
		char *path = tu_xmemdup(x->path, x->path_len);
		size_t plen = x->path_len;
		bool loop = false;
		for (size_t a = 0; c->o->follow && a < c->nanc; a++)
			if (c->anc[a].dev == dev && c->anc[a].ino == ino)
				loop = true;
		if (loop) {
			xwalk_warn(c->out, ref_msg(c, path, plen), W_LOOP, 0);
			free(path);
			continue;
		}
		int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (link ? 0 : O_NOFOLLOW));
		if (sub < 0) {
			xwalk_warn(c->out, ref_msg(c, path, plen), W_ERRNO, errno);
			free(path);
			continue;
		}
		if (c->nanc == c->capanc) {
			c->capanc = c->capanc ? c->capanc * 2 : 16;
			c->anc = tu_xrealloc(c->anc, c->capanc * sizeof(*c->anc));
		}
		c->anc[c->nanc].dev = dev;
		c->anc[c->nanc].ino = ino;
		c->nanc++;
		ref_dir(c, sub, path, plen, depth + 1);
		c->nanc--;
		close(sub);
		free(path);
		if (c->out->over)
			break;
	}
	for (size_t i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
}

static const char *root_arg(const tree *t, const wopts *o, char *buf, size_t cap)
{
	if (o->root_kind == 2)
		return t->rootlink;
	snprintf(buf, cap, "%s%s", t->root, o->root_kind == 1 ? "/" : "");
	return buf;
}

/* The reference walk; false when the root cannot be opened. With a cap (> 0) it only counts:
 * it stops past cap records and neither reads links nor opens files. */
static bool ref_walk(const tree *t, const wopts *o, xwalk *out, size_t cap)
{
	char rb[PATH_MAX];
	const char *root = root_arg(t, o, rb, sizeof(rb));
	refctx c = {o, o->root_kind == 2 ? t->rootlink : t->root, out, cap ? cap : (size_t)-1,
		    cap > 0, NULL, 0, 0};
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return false;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return false;
	}
	c.anc = tu_xmalloc(16 * sizeof(*c.anc));
	c.capanc = 16;
	c.anc[0].dev = (uint64_t)st.st_dev;
	c.anc[0].ino = (uint64_t)st.st_ino;
	c.nanc = 1;
	if (o->max_depth != 0)
		ref_dir(&c, fd, "", 0, 0);
	free(c.anc);
	close(fd);
	return true;
}

static unsigned env_uint(const char *name, unsigned dflt)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return dflt;
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	return *end ? dflt : (unsigned)v;
}

/* The descriptor limit that leaves want descriptor numbers free. */
static int limit_with_free(int want)
{
	bool used[4096];
	memset(used, 0, sizeof(used));
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return want + 16;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);
		if (e->d_name[0] != '.' && fd != dirfd(d) && fd >= 0 && fd < 4096)
			used[fd] = true;
	}
	closedir(d);
	int lim = 0, n_free = 0;
	while (n_free < want && lim < 4096)
		n_free += !used[lim++];
	return lim;
}

/* harvest's walk; false (with a message) on a failure that stops it. */
static bool hv_collect(const tree *t, const wopts *o, xwalk *out, size_t cap, const char *who)
{
	char rb[PATH_MAX], b1[200];
	const char *root = root_arg(t, o, rb, sizeof(rb));
	hv_walk_opts ho;
	hv_walk_opts_init(&ho);
	ho.sort = o->sorted ? HV_SORT_NAME : HV_SORT_NONE;
	ho.threads = o->threads;
	ho.follow = o->follow;
	ho.max_depth = o->max_depth;
	ho.no_hidden = o->no_hidden;
	ho.excludes = o->excl;
	ho.n_excludes = o->n_excl;
	ho.max_entries = o->max_entries;
	ho.readlink = o->readlink;

	struct rlimit saved;
	getrlimit(RLIMIT_NOFILE, &saved);
	if (o->free_fds) {
		/* A small cache for trees up to 12 deep and more through links, with workers
		 * reading ahead: eviction and reopening. */
		struct rlimit low = saved;
		low.rlim_cur = (rlim_t)limit_with_free(o->free_fds);
		setrlimit(RLIMIT_NOFILE, &low);
	}
	hv_walk *w;
	hv_status s = hv_walk_open(&w, root, &ho);
	if (s != HV_OK) {
		setrlimit(RLIMIT_NOFILE, &saved);
		fprintf(stderr, "seed %u [%s] as %s: hv_walk_open: %d %s\n", t->seed, o->label, who,
			s, hv_error_last());
		return false;
	}
	bool ok = true;
	for (;;) {
		const hv_entry *e = NULL;
		s = hv_walk_next(w, &e);
		if (s == HV_DONE)
			break;
		if (s == HV_WARN) {
			xwalk_warn(out, tu_xmemdup(hv_error_last(), strlen(hv_error_last())), 0, 0);
			if (out->nw > cap + 100) {
				fprintf(stderr, "seed %u [%s] as %s: runaway warnings\n", t->seed,
					o->label, who);
				ok = false;
				break;
			}
			continue;
		}
		if (s != HV_OK || !e) {
			fprintf(stderr, "seed %u [%s] as %s: hv_walk_next: %d %s\n", t->seed, o->label,
				who, s, hv_error_last());
			ok = false;
			break;
		}
		if (out->n > cap + 100) {
			fprintf(stderr, "seed %u [%s] as %s: runaway walk (over %zu records)\n",
				t->seed, o->label, who, out->n);
			ok = false;
			break;
		}
		/* The entry's own consistency: NUL-terminated strings, the name at the end of
		 * the path after a '/', a depth one more than the path's slashes. */
		size_t slashes = 0;
		for (size_t i = 0; i < e->path_len; i++)
			slashes += e->path[i] == '/';
		if (e->path[e->path_len] != '\0' || e->name[e->name_len] != '\0' ||
		    e->name_len == 0 || e->name_len > e->path_len ||
		    memcmp(e->path + e->path_len - e->name_len, e->name, e->name_len) != 0 ||
		    (e->path_len > e->name_len && e->path[e->path_len - e->name_len - 1] != '/') ||
		    e->depth != (int)slashes + 1 || memchr(e->name, '/', e->name_len)) {
			fprintf(stderr, "seed %u [%s] as %s: inconsistent entry %s (name_len %zu, "
					"depth %d)\n",
				t->seed, o->label, who, SHOW(b1, e->path, e->path_len), e->name_len,
				e->depth);
			ok = false;
		}
		xrec *x = xwalk_rec(out);
		x->path = tu_xmemdup(e->path, e->path_len);
		x->path_len = e->path_len;
		x->name_len = e->name_len;
		x->depth = e->depth;
		x->type = e->type;
		x->have_lstat = e->have_lstat;
		x->have_stat = e->have_stat;
		if (e->have_lstat)
			x->lst = e->lst;
		if (e->have_stat) {
			x->is_dir = e->is_dir;
			x->size = e->size;
		}
		if (e->target) {
			x->target = tu_xmemdup(e->target, e->target_len);
			x->target_len = e->target_len;
		}
		if (e->type == HV_FT_FILE && e->have_lstat) {
			int fd = hv_walk_openat(w, O_RDONLY | O_NONBLOCK);
			x->open_err = fd >= 0 ? 0 : errno;
			if (fd >= 0) {
				struct stat st;
				x->open_wrong = fstat(fd, &st) != 0 ||
						(uint64_t)st.st_ino != e->lst.ino ||
						(uint64_t)st.st_dev != e->lst.dev;
				close(fd);
			}
		}
	}
	out->count = hv_walk_count(w);
	out->warnings = hv_walk_warnings(w);
	if (ok) {
		const hv_entry *e = NULL;
		s = hv_walk_next(w, &e);
		if (s != HV_DONE || e) {
			fprintf(stderr, "seed %u [%s] as %s: hv_walk_next after the end: %d\n",
				t->seed, o->label, who, s);
			ok = false;
		}
		const char *wr = hv_walk_root(w);
		const char *want = o->root_kind == 2 ? t->rootlink : t->root;
		if (!wr || strcmp(wr, want) != 0) {
			fprintf(stderr, "seed %u [%s] as %s: hv_walk_root %s, expected %s\n", t->seed,
				o->label, who, wr ? wr : "(null)", want);
			ok = false;
		}
	}
	hv_walk_close(w);
	setrlimit(RLIMIT_NOFILE, &saved);
	return ok;
}

/* ---- comparing ----------------------------------------------------------------------------- */

/* The first field where got differs from want, or NULL. */
static const char *rec_diff(const xrec *want, const xrec *got, const wopts *o)
{
	if (bytes_cmp(want->path, want->path_len, got->path, got->path_len) != 0)
		return "path";
	if (want->name_len != got->name_len)
		return "name";
	if (want->depth != got->depth)
		return "depth";
	if (want->type != got->type)
		return "type";
	if (want->have_lstat != got->have_lstat)
		return "have_lstat";
	if (want->have_lstat) {
		if (want->lst.dev != got->lst.dev || want->lst.ino != got->lst.ino)
			return "lstat dev/ino";
		if (want->lst.size != got->lst.size)
			return "lstat size";
		if (want->lst.mode != got->lst.mode)
			return "lstat mode";
		if (want->lst.mtime_ns != got->lst.mtime_ns)
			return "lstat mtime";
		if (want->lst.ctime_ns != got->lst.ctime_ns)
			return "lstat ctime";
	}
	if (want->have_stat != got->have_stat)
		return "have_stat";
	if (want->have_stat && want->is_dir != got->is_dir)
		return "is_dir";
	if (want->have_stat && want->size != got->size)
		return "size";
	if (o->readlink) {
		if ((want->target == NULL) != (got->target == NULL) ||
		    (want->target &&
		     bytes_cmp(want->target, want->target_len, got->target, got->target_len) != 0))
			return "target";
	} else if (got->target) {
		return "target (not asked for)";
	}
	if (got->open_wrong)
		return "hv_walk_openat opened another inode";
	if (want->open_err != got->open_err)
		return "hv_walk_openat result";
	return NULL;
}

static void print_rec(const char *tag, const xrec *x)
{
	char b1[400], b2[200];
	if (!x) {
		fprintf(stderr, "    %s: (none)\n", tag);
		return;
	}
	fprintf(stderr,
		"    %s: path=%s depth=%d type=%s lstat=%d(ino %llu size %llu mode %o mtime %lld) "
		"stat=%d(dir %d size %llu) target=%s open=%d%s\n",
		tag, SHOW(b1, x->path, x->path_len), x->depth, hv_ftype_name(x->type),
		x->have_lstat, (unsigned long long)x->lst.ino, (unsigned long long)x->lst.size,
		(unsigned)x->lst.mode, (long long)x->lst.mtime_ns, x->have_stat, x->is_dir,
		(unsigned long long)x->size, x->target ? SHOW(b2, x->target, x->target_len) : "-",
		x->open_err, x->open_wrong ? " (wrong inode)" : "");
}

static int xrec_cmp(const void *a, const void *b)
{
	const xrec *x = a, *y = b;
	return bytes_cmp(x->path, x->path_len, y->path, y->path_len);
}

/* Every record's parent is the directory on top of the path stack: pre-order, each subtree
 * contiguous right after its directory. */
static bool check_preorder(const xwalk *g, const char *ctx)
{
	size_t *stack = tu_xmalloc((g->n + 1) * sizeof(*stack));
	size_t sp = 0;
	bool ok = true;
	char b1[300];
	for (size_t i = 0; i < g->n && ok; i++) {
		const xrec *x = &g->r[i];
		if (x->depth < 1 || (size_t)(x->depth - 1) > sp) {
			ok = false;
		} else {
			sp = (size_t)x->depth - 1;
			if (sp == 0) {
				ok = x->path_len == x->name_len;
			} else {
				const xrec *p = &g->r[stack[sp - 1]];
				ok = x->path_len == p->path_len + 1 + x->name_len &&
				     memcmp(x->path, p->path, p->path_len) == 0 &&
				     x->path[p->path_len] == '/';
			}
		}
		if (!ok)
			fprintf(stderr, "%s: not pre-order at record %zu: %s (depth %d)\n", ctx, i,
				SHOW(b1, x->path, x->path_len), x->depth);
		stack[sp++] = i;
	}
	free(stack);
	return ok;
}

/* Matches harvest's warnings to the expected ones; prints and counts the differences. */
static int compare_warnings(xwalk *want, size_t n_want_recs, xwalk *got, const char *ctx,
			    const char *msgroot, bool limit_expected)
{
	int bad = 0;
	char b1[600];
	/* Longest prefix first, so "a" cannot take the warning of "a: b". */
	size_t *order = tu_xmalloc((want->nw + 1) * sizeof(*order));
	size_t n = 0;
	for (size_t i = 0; i < want->nw; i++)
		if (want->w[i].after <= n_want_recs)
			order[n++] = i;
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && strlen(want->w[order[j]].msg) >
						 strlen(want->w[order[j - 1]].msg);
		     j--) {
			size_t tmp = order[j];
			order[j] = order[j - 1];
			order[j - 1] = tmp;
		}
	for (size_t k = 0; k < n; k++) {
		xwarn *ew = &want->w[order[k]];
		size_t pl = strlen(ew->msg);
		bool found = false;
		for (size_t i = 0; i < got->nw && !found; i++) {
			xwarn *gw = &got->w[i];
			if (gw->used || strncmp(gw->msg, ew->msg, pl) != 0)
				continue;
			const char *rest = gw->msg + pl;
			if (ew->kind == W_ERRNO ? strcmp(rest, strerror(ew->err)) != 0
						: strstr(rest, "ancestor") == NULL)
				continue;
			gw->used = found = true;
		}
		if (!found && ++bad <= 5)
			fprintf(stderr, "%s: missing warning: %s%s\n", ctx, SHOW(b1, ew->msg, pl),
				ew->kind == W_ERRNO ? strerror(ew->err) : "(a loop)");
	}
	free(order);
	if (limit_expected) {
		size_t rl = strlen(msgroot);
		bool found = false;
		for (size_t i = 0; i < got->nw && !found; i++) {
			xwarn *gw = &got->w[i];
			if (!gw->used && strncmp(gw->msg, msgroot, rl) == 0 &&
			    strncmp(gw->msg + rl, ": ", 2) == 0 && strstr(gw->msg, "max-entries")) {
				gw->used = found = true;
			}
		}
		if (!found) {
			bad++;
			fprintf(stderr, "%s: missing warning: %s: stopped after N (--max-entries)\n",
				ctx, msgroot);
		}
	}
	int missing = bad, extra = 0;
	for (size_t i = 0; i < got->nw; i++)
		if (!got->w[i].used && ++extra <= 5)
			fprintf(stderr, "%s: unexpected warning: %s\n", ctx,
				SHOW(b1, got->w[i].msg, strlen(got->w[i].msg)));
	if (missing > 5 || extra > 5)
		fprintf(stderr, "%s: %d warnings missing, %d unexpected in all\n", ctx, missing,
			extra);
	return missing + extra;
}

static int compare(const tree *t, const wopts *o, xwalk *want, xwalk *got, const char *who)
{
	char ctx[300];
	snprintf(ctx, sizeof(ctx), "seed %u [%.200s] as %.60s", t->seed, o->label, who);
	int bad = 0;
	size_t n_want = want->n;
	bool limit = false;
	if (o->max_entries && n_want > o->max_entries) {
		n_want = (size_t)o->max_entries;
		limit = true;
	}
	if (got->count != got->n) {
		bad++;
		fprintf(stderr, "%s: hv_walk_count %llu, records %zu\n", ctx,
			(unsigned long long)got->count, got->n);
	}
	if (got->warnings != got->nw) {
		bad++;
		fprintf(stderr, "%s: hv_walk_warnings %llu, warnings %zu\n", ctx,
			(unsigned long long)got->warnings, got->nw);
	}
	if (got->n != n_want) {
		bad++;
		fprintf(stderr, "%s: %zu records, expected %zu\n", ctx, got->n, n_want);
	}
	int shown = 0;
	if (o->sorted) {
		size_t m = got->n > n_want ? got->n : n_want;
		for (size_t i = 0; i < m && shown < 3; i++) {
			const xrec *w = i < n_want ? &want->r[i] : NULL;
			const xrec *g = i < got->n ? &got->r[i] : NULL;
			const char *d = w && g ? rec_diff(w, g, o) : "missing or extra record";
			if (!d)
				continue;
			bad++;
			shown++;
			fprintf(stderr, "%s: record %zu differs (%s):\n", ctx, i, d);
			print_rec("expected", w);
			print_rec("harvest ", g);
		}
	} else {
		if (!check_preorder(got, ctx))
			bad++;
		xrec *ws = tu_xmalloc((n_want + 1) * sizeof(*ws));
		xrec *gs = tu_xmalloc((got->n + 1) * sizeof(*gs));
		if (n_want)
			memcpy(ws, want->r, n_want * sizeof(*ws));
		if (got->n)
			memcpy(gs, got->r, got->n * sizeof(*gs));
		qsort(ws, n_want, sizeof(*ws), xrec_cmp);
		qsort(gs, got->n, sizeof(*gs), xrec_cmp);
		size_t i = 0, j = 0;
		while ((i < n_want || j < got->n) && shown < 3) {
			int c = i >= n_want ? 1 : j >= got->n ? -1 : xrec_cmp(&ws[i], &gs[j]);
			const char *d = c ? NULL : rec_diff(&ws[i], &gs[j], o);
			if (c < 0) {
				fprintf(stderr, "%s: record missing:\n", ctx);
				print_rec("expected", &ws[i]);
			} else if (c > 0) {
				fprintf(stderr, "%s: record not expected:\n", ctx);
				print_rec("harvest ", &gs[j]);
			} else if (d) {
				fprintf(stderr, "%s: record differs (%s):\n", ctx, d);
				print_rec("expected", &ws[i]);
				print_rec("harvest ", &gs[j]);
			}
			if (c < 0 || c > 0 || d) {
				bad++;
				shown++;
			}
			if (c <= 0)
				i++;
			if (c >= 0)
				j++;
		}
		free(ws);
		free(gs);
	}
	bad += compare_warnings(want, n_want, got, ctx, o->root_kind == 2 ? t->rootlink : t->root,
				limit);
	return bad;
}

/* ---- option sets --------------------------------------------------------------------------- */

static const char *const globs[] = {"*[aeiou]*", "?", ".*", "*[!a-z]*", "*\n*", "[a-m]*",
				    "*.*", "*\xff*"};
#define N_GLOBS (sizeof(globs) / sizeof(globs[0]))

static size_t make_optsets(const tree *t, wopts *v, int pressure_fds)
{
	rng r = {(uint64_t)t->seed * 7919u + 17};
	size_t n = 0;
	wopts *o;
#define NEW(...)                                                                               \
	(o = &v[n++], memset(o, 0, sizeof(*o)), o->max_depth = -1,                            \
	 snprintf(o->label, sizeof(o->label), __VA_ARGS__), o)
	if (pressure_fds) {
		for (int k = 1; k <= 2; k++) {
			NEW("sorted, follow, %d free descriptors, 8 threads, #%d", pressure_fds, k)
				->sorted = true;
			o->threads = 8, o->follow = true, o->free_fds = pressure_fds;
		}
		return n;
	}
	NEW("sorted, 1 thread")->sorted = true, o->threads = 1;
	NEW("sorted, 2 threads")->sorted = true, o->threads = 2;
	NEW("sorted, 8 threads")->sorted = true, o->threads = 8;
	NEW("unsorted, 1 thread")->threads = 1;
	NEW("unsorted, 8 threads")->threads = 8;
	NEW("sorted, follow, 2 threads")->sorted = true, o->threads = 2, o->follow = true;
	NEW("unsorted, follow, 8 threads")->threads = 8, o->follow = true;
	NEW("sorted, follow, readlink, 1 thread")->sorted = true, o->threads = 1,
		o->follow = true, o->readlink = true;
	int md = (int)rn(&r, (unsigned)t->deepest + 2);
	bool f = chance(&r, 50);
	NEW("sorted, max_depth %d%s, 2 threads", md, f ? ", follow" : "")->sorted = true;
	o->threads = 2, o->max_depth = md, o->follow = f;
	{
		size_t g1 = rn(&r, N_GLOBS), g2 = rn(&r, N_GLOBS);
		o = NEW("sorted, no_hidden, exclude %s, 8 threads", globs[g1]);
		o->sorted = true, o->threads = 8, o->no_hidden = true;
		o->excl[0] = globs[g1], o->n_excl = 1;
		md = 1 + (int)rn(&r, (unsigned)t->deepest + 1);
		o = NEW("unsorted, follow, exclude %s + %s, max_depth %d, 2 threads", globs[g1],
			globs[g2], md);
		o->threads = 2, o->follow = true, o->max_depth = md;
		o->excl[0] = globs[g1], o->excl[1] = globs[g2], o->n_excl = 2;
	}
	uint64_t me = 1 + rn(&r, t->n_entries + 10);
	f = chance(&r, 50);
	NEW("sorted, max_entries %llu%s, 8 threads", (unsigned long long)me, f ? ", follow" : "")
		->sorted = true;
	o->threads = 8, o->max_entries = me, o->follow = f;
	/* Few descriptors: the cache evicts and reopens, through symlinks too. Read-ahead
	 * workers pin descriptors of their own, so more threads get more room (see
	 * test_fd_pressure_read_ahead for what happens with less). */
	NEW("sorted, follow, 6 free descriptors, root through a symlink, 1 thread")->sorted = true;
	o->threads = 1, o->follow = true, o->free_fds = 6, o->root_kind = 2;
	NEW("unsorted, 12 free descriptors, readlink, root with a trailing slash, 2 threads")
		->threads = 2;
	o->free_fds = 12, o->readlink = true, o->root_kind = 1;
	NEW("sorted, follow, 24 free descriptors, 8 threads")->sorted = true;
	o->threads = 8, o->follow = true, o->free_fds = 24;
#undef NEW
	return n;
}

/* Every option set against the reference, as whoever runs this. Returns the differences. */
/* Whether two option sets have the same reference walk (always sorted, always with link
 * targets; max_entries is applied when comparing). */
static bool same_reference(const wopts *a, const wopts *b)
{
	if (a->follow != b->follow || a->max_depth != b->max_depth ||
	    a->no_hidden != b->no_hidden || a->n_excl != b->n_excl ||
	    (a->root_kind == 2) != (b->root_kind == 2))
		return false;
	for (size_t i = 0; i < a->n_excl; i++)
		if (strcmp(a->excl[i], b->excl[i]) != 0)
			return false;
	return true;
}

/* Every option set against the reference, as whoever runs this. Returns the differences. */
static int run_optsets(const tree *t, const char *who)
{
	wopts v[MAX_OPTSETS];
	size_t n = make_optsets(t, v, t->pressure_fds);
	xwalk refs[MAX_OPTSETS];
	size_t ref_of[MAX_OPTSETS];
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		size_t k = 0;
		while (k < i && !same_reference(&v[ref_of[k]], &v[i]))
			k++;
		if (k < i) {
			ref_of[i] = ref_of[k];
			continue;
		}
		ref_of[i] = i;
		memset(&refs[i], 0, sizeof(refs[i]));
		if (!ref_walk(t, &v[i], &refs[i], 0)) {
			fprintf(stderr, "seed %u as %s: the reference cannot open the root\n", t->seed,
				who);
			bad++;
		}
	}
	size_t n_recs = 0, n_loops = 0, n_errs = 0;
	for (size_t i = 0; i < n && !bad; i++) {
		xwalk *want = &refs[ref_of[i]], got = {0};
		n_recs += want->n;
		for (size_t j = 0; j < want->nw; j++)
			*(want->w[j].kind == W_LOOP ? &n_loops : &n_errs) += 1;
		if (!hv_collect(t, &v[i], &got, want->n + want->nw, who))
			bad++;
		bad += compare(t, &v[i], want, &got, who);
		xwalk_free(&got);
	}
	for (size_t i = 0; i < n; i++)
		if (ref_of[i] == i)
			xwalk_free(&refs[i]);
	fprintf(stderr, "seed %u as %s: %zu walks, %zu records, %zu loop and %zu open warnings\n",
		t->seed, who, n, n_recs, n_loops, n_errs);
	return bad;
}

static int nobody_main(void *arg)
{
	int bad = run_optsets(arg, "nobody");
	return bad > 98 ? 98 : bad;
}

/* ---- building a tree ------------------------------------------------------------------------ */

static void tree_free(tree *t)
{
	if (t->rootfd >= 0)
		close(t->rootfd);
	glist_free(&t->dirs);
	glist_free(&t->regs);
	glist_free(&t->others);
	glist_free(&t->links);
	glist_free(&t->pending);
	free(t->base);
	free(t->root);
	free(t->rootlink);
}

/* Records under follow, as the test's user, stopping past cap. */
static size_t follow_count(const tree *t, size_t cap)
{
	wopts o;
	memset(&o, 0, sizeof(o));
	o.follow = true;
	o.max_depth = -1;
	xwalk x = {0};
	ref_walk(t, &o, &x, cap + 1);
	size_t n = x.n;
	xwalk_free(&x);
	return n;
}

static void build_tree(tree *t, const char *tmp, unsigned seed)
{
	memset(t, 0, sizeof(*t));
	t->seed = seed;
	t->rootfd = -1;
	rng r = {seed};
	char sub[32];
	snprintf(sub, sizeof(sub), "s%u", seed);
	t->base = tu_path(tmp, sub);
	tu_rmrf_deep(t->base);
	must(mkdir(t->base, 0755), "mkdir base", t);
	t->root = tu_path(t->base, "t");
	t->rootlink = tu_path(t->base, "rl");
	must(mkdir(t->root, 0755), "mkdir root", t);
	must(symlink("t", t->rootlink), "symlink rl", t);
	tu_mkdir(t->base, "out");
	tu_write(t->base, "out/f", "outside\n", 8);
	tu_mkdir(t->base, "out/sub");
	tu_write(t->base, "out/sub/g", "g", 1);
	t->rootfd = open(t->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->rootfd < 0)
		fail_msg("seed %u: open root: %s", seed, strerror(errno));

	t->budget = 30 + rn(&r, 900);
	t->target_depth = 1 + (int)rn(&r, MAX_DEPTH);
	t->wide_pending = chance(&r, 15);
	glist_add(&t->dirs, "", 0, 0);
	gen_dir(t, &r, 0, true);

	char **forced = calloc(t->pending.n + 1, sizeof(*forced));
	assert_non_null(forced);
	for (size_t i = 0; i < t->pending.n; i++)
		make_link(t, &r, i, forced);
	for (size_t i = 0; i < t->pending.n; i++)
		free(forced[i]);
	free(forced);

	/* Keep the followed walk small: drop symlinks to directories until it is. */
	while (follow_count(t, FOLLOW_CAP) > FOLLOW_CAP) {
		size_t *cand = tu_xmalloc((t->links.n + 1) * sizeof(*cand)), nc = 0;
		for (size_t i = 0; i < t->links.n; i++) {
			struct stat st;
			if (!t->links.v[i].gone && fstatat(t->rootfd, t->links.v[i].rel, &st, 0) == 0 &&
			    S_ISDIR(st.st_mode))
				cand[nc++] = i;
		}
		if (nc == 0)
			fail_msg("seed %u: a followed walk too big without links", seed);
		/* An eighth of them at a time: each round is a whole walk. */
		for (size_t k = 0; k < nc / 8 + 1; k++) {
			gent *g = &t->links.v[cand[rn(&r, (unsigned)nc)]];
			if (!g->gone) {
				must(unlinkat(t->rootfd, g->rel, 0), "unlink", t);
				g->gone = true;
			}
		}
		free(cand);
	}

	/* Directory times, now that nothing more is made in them. */
	struct timespec ts[2];
	for (size_t i = 0; i < t->dirs.n; i++) {
		rand_times(&r, ts);
		if (i == 0)
			must(futimens(t->rootfd, ts), "futimens", t);
		else
			must(utimensat(t->rootfd, t->dirs.v[i].rel, ts, AT_SYMLINK_NOFOLLOW),
			     "utimensat dir", t);
	}

	/* A few directories nobody cannot read, search, or either. */
	if (t->dirs.n > 1 && chance(&r, 70)) {
		static const mode_t modes[] = {0, 0400, 0100, 0300, 0700, 0500, 0000, 0400};
		struct passwd *pw = getpwnam("nobody");
		uid_t nobody = pw ? pw->pw_uid : 65534;
		size_t used = 0;
		for (unsigned k = 1 + rn(&r, 3); k > 0; k--) {
			size_t di = 1 + rn(&r, (unsigned)t->dirs.n - 1);
			mode_t m = modes[rn(&r, 8)];
			bool own = geteuid() == 0 && chance(&r, 25);
			if (own) {
				/* Owned by nobody: the owner bits apply, 0300 is search-only. */
				must(fchownat(t->rootfd, t->dirs.v[di].rel, nobody, (gid_t)-1,
					      AT_SYMLINK_NOFOLLOW),
				     "chown", t);
				m = m == 0700 ? 0300 : m;
			}
			must(fchmodat(t->rootfd, t->dirs.v[di].rel, m, 0), "chmod", t);
			t->n_unreadable++;
			used += (size_t)snprintf(t->modes + used, sizeof(t->modes) - used,
						 " dirs[%zu](depth %d)=%04o%s", di,
						 t->dirs.v[di].depth, (unsigned)m,
						 own ? " owner nobody" : "");
			if (used >= sizeof(t->modes))
				used = sizeof(t->modes) - 1;
		}
	}
}

/* ---- the tests ------------------------------------------------------------------------------ */

static double secs(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

/* Builds and checks one seed; returns true when everything matched. */
static bool run_seed(const char *tmp, unsigned seed, bool keep, int pressure_fds)
{
	tree t;
	struct timespec t0, t1, t2, t3;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	build_tree(&t, tmp, seed);
	t.pressure_fds = pressure_fds;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	int bad = run_optsets(&t, geteuid() == 0 ? "root" : "the test's user");
	clock_gettime(CLOCK_MONOTONIC, &t2);
	fflush(NULL);
	int st = geteuid() == 0 ? tu_as_nobody(nobody_main, &t) : 0;
	clock_gettime(CLOCK_MONOTONIC, &t3);
	bool ok = bad == 0 && st == 0;
	fprintf(stderr,
		"seed %u: %u entries, %zu dirs, %zu symlinks, depth %d%s%s: %s (build %.2f s, "
		"walks %.2f s + %.2f s as nobody)\n",
		seed, t.n_entries, t.dirs.n, t.links.n, t.deepest, t.modes[0] ? ", modes" : "",
		t.modes, ok ? "ok" : "FAILED", secs(&t0, &t1), secs(&t1, &t2), secs(&t2, &t3));
	if (!ok) {
		fprintf(stderr, "seed %u: %d differences as the test's user, nobody child exit %d\n",
			seed, bad, st);
		if (keep)
			fprintf(stderr, "seed %u: tree kept at %s\n", seed, t.base);
	}
	if (ok || !keep)
		tu_rmrf_deep(t.base);
	tree_free(&t);
	return ok;
}

/* Seeds list[0..n) (or first..first+n when list is NULL), each with every option set, or
 * with pressure_fds only the 8-thread walk with that many free descriptors. */
static void run_seeds(const unsigned *list, unsigned first, unsigned n, int pressure_fds)
{
	bool keep = env_uint("HV_STRESS_KEEP", 0) != 0;
	char *tmp = keep ? tu_mkdtemp() : tu_tmpdir();
	char failed[512] = "";
	size_t used = 0;
	unsigned n_failed = 0;
	for (unsigned i = 0; i < n; i++) {
		unsigned s = list ? list[i] : first + i;
		if (run_seed(tmp, s, keep, pressure_fds))
			continue;
		n_failed++;
		if (used < sizeof(failed) - 16)
			used += (size_t)snprintf(failed + used, sizeof(failed) - used, " %u", s);
	}
	if (keep) {
		if (!n_failed)
			tu_rmrf_deep(tmp);
		free(tmp);
	}
	if (n_failed)
		fail_msg("%u of %u seeds failed:%s (rerun one with HV_STRESS_SEED=N)", n_failed, n,
			 failed);
}

static void test_random_trees(void **state)
{
	(void)state;
	unsigned one = env_uint("HV_STRESS_SEED", 0);
	if (one)
		run_seeds(NULL, one, 1, 0);
	else
		run_seeds(NULL, 1, env_uint("HV_STRESS_SEEDS", UNDER_VALGRIND() ? VALGRIND_SEEDS : DEFAULT_SEEDS), 0);
}

/* Known failure (see the report on issue 5): with 8 threads and 10 free descriptors, the
 * read-ahead workers between them pin every descriptor the cache may close; a worker whose
 * openat then fails with EMFILE keeps the error as the directory's listing (walk.c run_job),
 * so the consumer reports "Too many open files" and leaves out a subtree that one thread
 * walks fine with 6 free descriptors, and hv_walk_openat fails with EMFILE too. These seeds
 * failed that way most often (it depends on timing: each walks twice as root and twice as
 * nobody); the walk should give the same records as with more descriptors.
 * HV_STRESS_FREE_FDS=N changes the 10, HV_STRESS_PRESSURE_SEEDS=N runs seeds 1..N instead. */
static void test_fd_pressure_read_ahead(void **state)
{
	(void)state;
	static const unsigned seeds[] = {6, 13, 14, 21, 35, 42, 55};
	int fds = (int)env_uint("HV_STRESS_FREE_FDS", 10);
	unsigned all = env_uint("HV_STRESS_PRESSURE_SEEDS", 0);
	if (all)
		run_seeds(NULL, 1, all, fds);
	else
		run_seeds(seeds, 0, sizeof(seeds) / sizeof(seeds[0]), fds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_random_trees, tu_cleanup),
		cmocka_unit_test_teardown(test_fd_pressure_read_ahead, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
