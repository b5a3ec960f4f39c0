/* Unit tests of the directory walker's library API (include/harvest/walk.h; SPEC sections 1, 2
 * `walk`, 6 and 7). Every test builds its fixture in a fresh temp directory and removes it.
 *
 * The output is compared record by record (path, name, depth, type, have_lstat, have_stat,
 * is_dir, size, inode) with a reference listing the test builds itself with
 * opendir/readdir/fstatat and a memcmp sort. Checks that must run in a child process (an
 * RLIMIT_NOFILE lowered, privileges dropped to nobody) use the non-cmocka helpers, which print
 * what differs on stderr and return false; the parent asserts on the child's exit status. */
#include "testutil.h"
#include "harvest/walk.h"
#include "test_hook.h"

/* internal.h: the time a walk waited for descriptors */
int hv__walk_fd_waited_ms(hv_walk *w);

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <sys/inotify.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- small helpers (no cmocka: also used in child processes) ---------------------------- */

/* A printable rendering of bytes for messages, into buf. */
static const char *show(char *buf, size_t cap, const char *s, size_t len)
{
	size_t o = 0;
	size_t i;
	for (i = 0; i < len && o + 12 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
	}
	if (i < len)
		o += (size_t)snprintf(buf + o, cap - o, "...(%zu)", len);
	buf[o] = '\0';
	return buf;
}

#define SHOW(b, s, len) show(b, sizeof(b), s, len)

/* Sets a test switch's variable to value (NULL: unsets it) and has the library read the
 * switches again: it reads them once per process otherwise. */
static void set_switch(const char *name, const char *value)
{
	int rc = value ? setenv(name, value, 1) : unsetenv(name);
	if (rc != 0)
		abort();
	hv__test_switches_reload();
}

static hv_ftype mode_type(mode_t m)
{
	if (S_ISREG(m))
		return HV_FT_FILE;
	if (S_ISDIR(m))
		return HV_FT_DIR;
	if (S_ISLNK(m))
		return HV_FT_SYMLINK;
	if (S_ISFIFO(m))
		return HV_FT_FIFO;
	if (S_ISSOCK(m))
		return HV_FT_SOCKET;
	if (S_ISCHR(m))
		return HV_FT_CHAR;
	if (S_ISBLK(m))
		return HV_FT_BLOCK;
	return HV_FT_UNKNOWN;
}

static hv_ftype dtype_type(unsigned char d)
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

/* Runs fn(arg) in a forked child; returns its exit code (128+N when killed by signal N). */
static int run_child(int (*fn)(void *), void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(fn(arg));
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- records ------------------------------------------------------------------------------ */

typedef struct rec {
	char *path;
	size_t path_len;
	const char *name; /* into path */
	size_t name_len;
	int depth;
	hv_ftype type;
	bool have_lstat, have_stat, is_dir;
	uint64_t size;
	uint64_t ino;     /* lstat's, when have_lstat */
	char *target;     /* a walk's hv_entry.target, copied */
	size_t target_len;
} rec;

typedef struct recs {
	rec *v;
	size_t n, cap;
} recs;

static rec *recs_push(recs *rs)
{
	if (rs->n == rs->cap) {
		rs->cap = rs->cap ? rs->cap * 2 : 64;
		rs->v = tu_xrealloc(rs->v, rs->cap * sizeof(*rs->v));
	}
	rec *r = &rs->v[rs->n++];
	memset(r, 0, sizeof(*r));
	return r;
}

static void recs_free(recs *rs)
{
	for (size_t i = 0; i < rs->n; i++) {
		free(rs->v[i].path);
		free(rs->v[i].target);
	}
	free(rs->v);
	memset(rs, 0, sizeof(*rs));
}

static const rec *recs_find(const recs *rs, const char *path)
{
	size_t len = strlen(path);
	for (size_t i = 0; i < rs->n; i++)
		if (rs->v[i].path_len == len && memcmp(rs->v[i].path, path, len) == 0)
			return &rs->v[i];
	return NULL;
}

static int bytes_cmp(const char *a, size_t la, const char *b, size_t lb)
{
	int c = memcmp(a, b, la < lb ? la : lb);
	if (c)
		return c;
	return la < lb ? -1 : la > lb;
}

/* Compares one record field by field; prints what differs. */
static bool rec_equal(const rec *g, const rec *w, size_t i, const char *what)
{
	char b1[300], b2[300];
	const char *bad = NULL;
	if (g->path_len != w->path_len || memcmp(g->path, w->path, g->path_len) != 0)
		bad = "path";
	else if (g->name_len != w->name_len || memcmp(g->name, w->name, g->name_len) != 0)
		bad = "name";
	else if (g->depth != w->depth)
		bad = "depth";
	else if (g->type != w->type)
		bad = "type";
	else if (g->have_lstat != w->have_lstat)
		bad = "have_lstat";
	else if (g->have_lstat && g->ino != w->ino)
		bad = "lstat inode";
	else if (g->have_stat != w->have_stat)
		bad = "have_stat";
	else if (g->have_stat && g->is_dir != w->is_dir)
		bad = "is_dir";
	else if (g->have_stat && g->size != w->size)
		bad = "size";
	if (!bad)
		return true;
	fprintf(stderr,
		"%s: record %zu differs in %s:\n  got  %s depth %d type %s lstat %d stat %d dir %d "
		"size %llu\n  want %s depth %d type %s lstat %d stat %d dir %d size %llu\n",
		what, i, bad, SHOW(b1, g->path, g->path_len), g->depth, hv_ftype_name(g->type),
		g->have_lstat, g->have_stat, g->is_dir, (unsigned long long)g->size,
		SHOW(b2, w->path, w->path_len), w->depth, hv_ftype_name(w->type), w->have_lstat,
		w->have_stat, w->is_dir, (unsigned long long)w->size);
	return false;
}

/* The same records in the same order. */
static bool recs_equal(const recs *got, const recs *want, const char *what)
{
	size_t n = got->n < want->n ? got->n : want->n;
	int bad = 0;
	for (size_t i = 0; i < n && bad < 5; i++)
		if (!rec_equal(&got->v[i], &want->v[i], i, what))
			bad++;
	if (got->n != want->n) {
		char b[300];
		fprintf(stderr, "%s: %zu records, want %zu\n", what, got->n, want->n);
		if (got->n > want->n)
			fprintf(stderr, "  first extra: %s\n",
				SHOW(b, got->v[n].path, got->v[n].path_len));
		else
			fprintf(stderr, "  first missing: %s\n",
				SHOW(b, want->v[n].path, want->v[n].path_len));
		bad++;
	}
	return bad == 0;
}

static int recp_cmp(const void *a, const void *b)
{
	const rec *x = *(const rec *const *)a, *y = *(const rec *const *)b;
	return bytes_cmp(x->path, x->path_len, y->path, y->path_len);
}

static const rec **recs_sorted_by_path(const recs *rs)
{
	const rec **v = tu_xmalloc(rs->n * sizeof(*v));
	for (size_t i = 0; i < rs->n; i++)
		v[i] = &rs->v[i];
	qsort(v, rs->n, sizeof(*v), recp_cmp);
	return v;
}

/* The same records in any order. */
static bool recs_same_set(const recs *got, const recs *want, const char *what)
{
	if (got->n != want->n) {
		fprintf(stderr, "%s: %zu records, want %zu\n", what, got->n, want->n);
		return false;
	}
	const rec **g = recs_sorted_by_path(got), **w = recs_sorted_by_path(want);
	int bad = 0;
	for (size_t i = 0; i < got->n && bad < 5; i++)
		if (!rec_equal(g[i], w[i], i, what))
			bad++;
	free(g);
	free(w);
	return bad == 0;
}

/* Pre-order: every record's parent directory is the innermost directory still open, i.e. a
 * directory's contents come right after its record, in one block. The directories entered
 * are those of type dir above max_depth (no follow). */
static bool recs_preorder(const recs *rs, int max_depth, const char *what)
{
	size_t *stack = tu_xmalloc((rs->n + 1) * sizeof(*stack));
	size_t top = 0;
	bool ok = true;
	for (size_t i = 0; i < rs->n && ok; i++) {
		const rec *r = &rs->v[i];
		size_t parent_len = r->depth > 1 ? r->path_len - r->name_len - 1 : 0;
		while (top > 0) {
			const rec *p = &rs->v[stack[top - 1]];
			if (p->path_len == parent_len && memcmp(p->path, r->path, parent_len) == 0)
				break;
			top--;
		}
		if (r->depth > 1 && top == 0) {
			char b[300];
			fprintf(stderr, "%s: record %zu (%s) is not inside its parent's block\n", what, i,
				SHOW(b, r->path, r->path_len));
			ok = false;
		}
		if (r->type == HV_FT_DIR && (max_depth < 0 || r->depth < max_depth))
			stack[top++] = i;
	}
	free(stack);
	return ok;
}

/* ---- the reference listing -------------------------------------------------------------- */

typedef struct ref_opts {
	int max_depth;
	bool no_hidden;
	const char *const *excludes;
	size_t n_excludes;
	int fnm_flags;
} ref_opts;

static const ref_opts REF_ALL = {-1, false, NULL, 0, 0};

static bool ref_excluded(const ref_opts *o, const char *name)
{
	if (o->no_hidden && name[0] == '.')
		return true;
	for (size_t i = 0; i < o->n_excludes; i++)
		if (fnmatch(o->excludes[i], name, o->fnm_flags) == 0)
			return true;
	return false;
}

static int name_cmp(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	return bytes_cmp(x, strlen(x), y, strlen(y));
}

/* Lists the directory rel (relative to rootfd; "" is the root) at depth, recursively. */
static bool ref_dir(recs *out, int rootfd, const char *rel, size_t rel_len, int depth,
		    const ref_opts *o)
{
	int dfd = openat(rootfd, rel_len ? rel : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		fprintf(stderr, "reference: cannot open %s: %s\n", rel, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return false;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (ref_excluded(o, e->d_name))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			names = tu_xrealloc(names, cap * sizeof(*names));
		}
		names[n++] = tu_xmemdup(e->d_name, strlen(e->d_name));
	}
	closedir(d);
	if (n > 1)
		qsort(names, n, sizeof(*names), name_cmp);
	bool ok = true;
	for (size_t i = 0; i < n; i++) {
		size_t nl = strlen(names[i]);
		size_t plen = rel_len ? rel_len + 1 + nl : nl;
		char *p = tu_xmalloc(plen + 1);
		if (rel_len) {
			memcpy(p, rel, rel_len);
			p[rel_len] = '/';
		}
		memcpy(p + plen - nl, names[i], nl + 1);
		rec *r = recs_push(out);
		r->path = p;
		r->path_len = plen;
		r->name = p + plen - nl;
		r->name_len = nl;
		r->depth = depth + 1;
		struct stat st;
		if (fstatat(rootfd, p, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			r->have_lstat = true;
			r->type = mode_type(st.st_mode);
			r->ino = st.st_ino;
		}
		if (fstatat(rootfd, p, &st, 0) == 0) {
			r->have_stat = true;
			r->is_dir = S_ISDIR(st.st_mode);
			r->size = (uint64_t)st.st_size;
		}
		bool enter = r->have_lstat && r->type == HV_FT_DIR &&
			     (o->max_depth < 0 || depth + 1 < o->max_depth);
		/* r is not used after this: the recursion may move the array. */
		if (enter && !ref_dir(out, rootfd, p, plen, depth + 1, o))
			ok = false;
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return ok;
}

static bool ref_build(recs *out, const char *root, const ref_opts *o)
{
	memset(out, 0, sizeof(*out));
	if (o->max_depth == 0)
		return true;
	int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		fprintf(stderr, "reference: %s: %s\n", root, strerror(errno));
		return false;
	}
	bool ok = ref_dir(out, rootfd, "", 0, 0, o);
	close(rootfd);
	return ok;
}

/* ---- running a walk ----------------------------------------------------------------------- */

typedef struct walk_log {
	recs r;
	char **warn;      /* hv_error_last() at each HV_WARN */
	size_t *warn_at;  /* records returned before it */
	size_t n_warn;
	hv_status end;    /* HV_DONE, or the failing status */
	uint64_t count, warnings;
} walk_log;

static void walk_log_free(walk_log *lg)
{
	recs_free(&lg->r);
	for (size_t i = 0; i < lg->n_warn; i++)
		free(lg->warn[i]);
	free(lg->warn);
	free(lg->warn_at);
	memset(lg, 0, sizeof(*lg));
}

/* The invariants of one entry on its own. */
static bool entry_sane(const hv_entry *e)
{
	char b[300];
	if (!e->path || !e->name || strlen(e->path) != e->path_len ||
	    strlen(e->name) != e->name_len || e->name_len == 0 || e->name_len > e->path_len ||
	    memcmp(e->path + e->path_len - e->name_len, e->name, e->name_len) != 0) {
		fprintf(stderr, "entry %s: path/name/lengths inconsistent\n",
			e->path ? SHOW(b, e->path, strlen(e->path)) : "(null)");
		return false;
	}
	int slashes = 0;
	for (size_t i = 0; i < e->path_len; i++)
		slashes += e->path[i] == '/';
	if (e->depth != slashes + 1 ||
	    (e->depth > 1 && e->path[e->path_len - e->name_len - 1] != '/')) {
		fprintf(stderr, "entry %s: depth %d does not match its path\n",
			SHOW(b, e->path, e->path_len), e->depth);
		return false;
	}
	if (e->have_lstat && e->type != mode_type(e->lst.mode)) {
		fprintf(stderr, "entry %s: type %s but lstat mode %o\n", SHOW(b, e->path, e->path_len),
			hv_ftype_name(e->type), (unsigned)e->lst.mode);
		return false;
	}
	if (e->target && (strlen(e->target) != e->target_len || e->type != HV_FT_SYMLINK)) {
		fprintf(stderr, "entry %s: bad target\n", SHOW(b, e->path, e->path_len));
		return false;
	}
	return true;
}

/* Reads the regular file of the entry just returned through hv_walk_openat(): the fixtures
 * that ask for this check hold each file's own relative path as its content. */
static bool check_file_content(hv_walk *w, const hv_entry *e)
{
	char b[300];
	int fd = hv_walk_openat(w, O_RDONLY);
	if (fd < 0) {
		fprintf(stderr, "hv_walk_openat(%s): %s\n", SHOW(b, e->path, e->path_len),
			strerror(errno));
		return false;
	}
	size_t cap = e->path_len + 64, len = 0;
	char *buf = tu_xmalloc(cap);
	for (;;) {
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == cap)
			break;
	}
	close(fd);
	bool ok = len == e->path_len && memcmp(buf, e->path, len) == 0;
	if (!ok)
		fprintf(stderr, "hv_walk_openat(%s): read %zu bytes that are not its path\n",
			SHOW(b, e->path, e->path_len), len);
	free(buf);
	return ok;
}

typedef struct walk_how {
	bool check_files;            /* check_file_content() on every regular file */
	void (*after_open)(void);    /* called right after hv_walk_open */
} walk_how;

static void rec_from_entry(rec *r, const hv_entry *e)
{
	r->path = tu_xmemdup(e->path, e->path_len);
	r->path_len = e->path_len;
	r->name = r->path + e->path_len - e->name_len;
	r->name_len = e->name_len;
	r->depth = e->depth;
	r->type = e->type;
	r->have_lstat = e->have_lstat;
	r->ino = e->have_lstat ? e->lst.ino : 0;
	r->have_stat = e->have_stat;
	r->is_dir = e->is_dir;
	r->size = e->size;
	if (e->target) {
		r->target = tu_xmemdup(e->target, e->target_len);
		r->target_len = e->target_len;
	}
}

/* Walks root to the end, logging every record and warning. False (with a message) when the
 * walk fails or an entry is not sane; warnings are only logged. */
static bool walk_run(walk_log *lg, const char *root, const hv_walk_opts *o, const walk_how *how)
{
	memset(lg, 0, sizeof(*lg));
	hv_walk *w = NULL;
	hv_status st = hv_walk_open(&w, root, o);
	if (st != HV_OK) {
		fprintf(stderr, "hv_walk_open(%s): status %d: %s\n", root, st, hv_error_last());
		lg->end = st;
		return false;
	}
	if (how && how->after_open)
		how->after_open();
	bool ok = true;
	size_t cap_warn = 0;
	for (size_t guard = 0;; guard++) {
		if (guard > 20000000) {
			fprintf(stderr, "walk of %s does not end\n", root);
			ok = false;
			break;
		}
		const hv_entry *e = NULL;
		st = hv_walk_next(w, &e);
		if (st == HV_OK) {
			if (!e) {
				fprintf(stderr, "HV_OK without an entry\n");
				ok = false;
				break;
			}
			if (!entry_sane(e))
				ok = false;
			rec_from_entry(recs_push(&lg->r), e);
			if (how && how->check_files && e->have_lstat && e->type == HV_FT_FILE &&
			    !check_file_content(w, e))
				ok = false;
			continue;
		}
		if (st == HV_WARN) {
			if (e) {
				fprintf(stderr, "HV_WARN with an entry\n");
				ok = false;
			}
			if (lg->n_warn == cap_warn) {
				cap_warn = cap_warn ? cap_warn * 2 : 8;
				lg->warn = tu_xrealloc(lg->warn, cap_warn * sizeof(*lg->warn));
				lg->warn_at = tu_xrealloc(lg->warn_at, cap_warn * sizeof(*lg->warn_at));
			}
			const char *m = hv_error_last();
			lg->warn[lg->n_warn] = tu_xmemdup(m, strlen(m));
			lg->warn_at[lg->n_warn++] = lg->r.n;
			continue;
		}
		lg->end = st;
		if (st != HV_DONE) {
			fprintf(stderr, "hv_walk_next: status %d: %s\n", st, hv_error_last());
			ok = false;
		}
		break;
	}
	lg->count = hv_walk_count(w);
	lg->warnings = hv_walk_warnings(w);
	hv_walk_close(w);
	if (ok && lg->count != lg->r.n) {
		fprintf(stderr, "hv_walk_count %llu, records %zu\n", (unsigned long long)lg->count,
			lg->r.n);
		ok = false;
	}
	if (ok && lg->warnings != lg->n_warn) {
		fprintf(stderr, "hv_walk_warnings %llu, warnings %zu\n",
			(unsigned long long)lg->warnings, lg->n_warn);
		ok = false;
	}
	return ok;
}

static void print_warnings(const walk_log *lg, const char *what)
{
	for (size_t i = 0; i < lg->n_warn; i++)
		fprintf(stderr, "%s: warning after %zu records: %s\n", what, lg->warn_at[i],
			lg->warn[i]);
}

/* Walks root and compares with ref, in order (sorted) or as a set plus pre-order; no
 * warnings are expected. */
static bool walk_matches(const char *root, const hv_walk_opts *o, const recs *ref,
			 const walk_how *how, const char *what)
{
	walk_log lg;
	bool ok = walk_run(&lg, root, o, how);
	if (lg.n_warn) {
		print_warnings(&lg, what);
		ok = false;
	}
	if (ok)
		ok = o->sort == HV_SORT_NAME ? recs_equal(&lg.r, ref, what)
					     : recs_same_set(&lg.r, ref, what) &&
						   recs_preorder(&lg.r, o->max_depth, what);
	walk_log_free(&lg);
	return ok;
}

/* An expected event: a record's path, or "!W:" and a part of the warning message, which must
 * also contain the root. */
static bool events_match(const walk_log *lg, const char *root, const char *const *expect,
			 size_t n_expect, const char *what)
{
	size_t ri = 0, wi = 0, k = 0;
	bool ok = true;
	char b[300];
	for (; k < n_expect && ok; k++) {
		const char *x = expect[k];
		bool want_warn = strncmp(x, "!W:", 3) == 0;
		bool is_warn = wi < lg->n_warn && lg->warn_at[wi] == ri;
		if (want_warn) {
			if (!is_warn) {
				fprintf(stderr, "%s: event %zu: want a warning with \"%s\", got %s\n", what, k,
					x + 3,
					ri < lg->r.n ? SHOW(b, lg->r.v[ri].path, lg->r.v[ri].path_len)
						     : "the end");
				ok = false;
			} else if (!strstr(lg->warn[wi], x + 3) || !strstr(lg->warn[wi], root)) {
				fprintf(stderr, "%s: event %zu: warning \"%s\" lacks \"%s\" or the root\n",
					what, k, lg->warn[wi], x + 3);
				ok = false;
			}
			wi++;
			continue;
		}
		if (is_warn) {
			fprintf(stderr, "%s: event %zu: want %s, got the warning \"%s\"\n", what, k, x,
				lg->warn[wi]);
			ok = false;
		} else if (ri >= lg->r.n) {
			fprintf(stderr, "%s: event %zu: want %s, got the end\n", what, k, x);
			ok = false;
		} else if (strlen(x) != lg->r.v[ri].path_len ||
			   memcmp(x, lg->r.v[ri].path, lg->r.v[ri].path_len) != 0) {
			fprintf(stderr, "%s: event %zu: want %s, got %s\n", what, k, x,
				SHOW(b, lg->r.v[ri].path, lg->r.v[ri].path_len));
			ok = false;
		}
		ri++;
	}
	if (ok && (ri != lg->r.n || wi != lg->n_warn)) {
		fprintf(stderr, "%s: more events than expected (%zu records, %zu warnings)\n", what,
			lg->r.n, lg->n_warn);
		print_warnings(lg, what);
		ok = false;
	}
	return ok;
}

/* ---- fixtures ----------------------------------------------------------------------------- */

static void mkdir_abs(const char *path)
{
	if (mkdir(path, 0755) != 0)
		fail_msg("mkdir %s: %s", path, strerror(errno));
}

static void mklink(const char *dir, const char *target, const char *rel)
{
	char *p = tu_path(dir, rel);
	if (symlink(target, p) != 0)
		fail_msg("symlink %s: %s", p, strerror(errno));
	free(p);
}

static void write_str(const char *dir, const char *rel, const char *s)
{
	tu_write(dir, rel, s, strlen(s));
}

/* A file holding its own relative path (for check_file_content). */
static void write_self(const char *root, const char *rel)
{
	tu_write(root, rel, rel, strlen(rel));
}

/* xorshift64*: a fixed-seed generator, the same tree on every run. */
typedef struct gen {
	uint64_t s;
	long budget;
} gen;

static uint64_t rnd(gen *g)
{
	g->s ^= g->s >> 12;
	g->s ^= g->s << 25;
	g->s ^= g->s >> 27;
	return g->s * 0x2545F4914F6CDD1DULL;
}

static unsigned rndn(gen *g, unsigned n)
{
	return (unsigned)(rnd(g) >> 33) % n;
}

/* A random name: mostly ASCII, some bytes >= 0x80, some control characters and a newline. */
static void gen_name(gen *g, char *buf)
{
	static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._- ";
	static const char special[] = "\n\t\"\\\x01\x7f '*?[";
	for (;;) {
		size_t len = 1 + rndn(g, 10);
		for (size_t i = 0; i < len; i++) {
			unsigned k = rndn(g, 100);
			if (k < 70)
				buf[i] = alpha[rndn(g, sizeof(alpha) - 1)];
			else if (k < 92)
				buf[i] = (char)(0x80 + rndn(g, 128));
			else
				buf[i] = special[rndn(g, sizeof(special) - 1)];
		}
		buf[len] = '\0';
		if (strcmp(buf, ".") != 0 && strcmp(buf, "..") != 0)
			return;
	}
}

/* The directories made and not yet filled, breadth first. */
typedef struct gen_queue {
	char **rel; /* relative to the root */
	int *depth; /* of the directory (children of the root: 1) */
	size_t n, cap;
} gen_queue;

enum { GEN_DIR, GEN_FILE, GEN_LINK, GEN_FIFO };

/* Makes one entry name in dfd (the directory rel, at depth); a name already taken is skipped. */
static void gen_entry(gen *g, int dfd, const char *rel, int depth, const char *name, int kind,
		      gen_queue *q)
{
	static char content[4096];
	if (content[0] == 0)
		for (size_t i = 0; i < sizeof(content); i++)
			content[i] = (char)(i * 131 + 7);
	int rc;
	if (kind == GEN_DIR) {
		rc = mkdirat(dfd, name, 0755);
		if (rc == 0) {
			size_t rl = strlen(rel), nl = strlen(name);
			char *p = tu_xmalloc(rl + nl + 2);
			if (rl) {
				memcpy(p, rel, rl);
				p[rl] = '/';
				memcpy(p + rl + 1, name, nl + 1);
			} else {
				memcpy(p, name, nl + 1);
			}
			if (q->n == q->cap) {
				q->cap = q->cap ? q->cap * 2 : 64;
				q->rel = tu_xrealloc(q->rel, q->cap * sizeof(*q->rel));
				q->depth = tu_xrealloc(q->depth, q->cap * sizeof(*q->depth));
			}
			q->rel[q->n] = p;
			q->depth[q->n++] = depth + 1;
		}
	} else if (kind == GEN_FILE) {
		int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		rc = fd < 0 ? -1 : 0;
		if (fd >= 0) {
			size_t size = rndn(g, 8) == 0 ? 0 : rndn(g, sizeof(content));
			assert_int_equal(write(fd, content, size), (ssize_t)size);
			close(fd);
		}
	} else if (kind == GEN_LINK) { /* dangling, a loop, to a directory, to a sibling */
		static const char *const targets[] = {"nowhere", "..", ".", "../..", NULL};
		unsigned t = rndn(g, 5);
		rc = symlinkat(targets[t] ? targets[t] : name, dfd, name);
	} else {
		rc = mkfifoat(dfd, name, 0644);
	}
	if (rc != 0 && errno != EEXIST)
		fail_msg("making %s/%s: %s", rel, name, strerror(errno));
	if (rc == 0)
		g->budget--;
}

/* A random tree of about budget entries below root, breadth first, directories up to 6
 * levels deep, plus fixed names that test the byte order of the sort. */
static void gen_tree(const char *root, uint64_t seed, long budget)
{
	gen g = {seed * 0x9E3779B97F4A7C15ULL + 1, budget};
	gen_queue q = {0};
	int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(rootfd >= 0);
	static const char *const fixed_files[] = {"new\nline", "\x80\xff", "a", "a\x80", "ab",
						  "B", "a\n", "\xc3\xa9t\xc3\xa9", "\xff", "~"};
	for (size_t i = 0; i < sizeof(fixed_files) / sizeof(fixed_files[0]); i++)
		gen_entry(&g, rootfd, "", 0, fixed_files[i], GEN_FILE, &q);
	gen_entry(&g, rootfd, "", 0, ".hidden", GEN_DIR, &q);
	gen_entry(&g, rootfd, "", 0, "dir\xe9\n", GEN_DIR, &q);
	/* The root's own random entries, then each queued directory's. */
	size_t qi = 0;
	for (bool at_root = true; g.budget > 0; at_root = false) {
		const char *rel = "";
		int depth = 0;
		int dfd = rootfd;
		if (!at_root) {
			if (qi >= q.n)
				break;
			rel = q.rel[qi];
			depth = q.depth[qi];
			qi++;
			dfd = openat(rootfd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			assert_true(dfd >= 0);
		}
		unsigned n = 2 + rndn(&g, depth == 0 ? 40 : 24);
		for (unsigned k = 0; k < n && g.budget > 0; k++) {
			char name[32];
			gen_name(&g, name);
			unsigned x = rndn(&g, 100);
			int kind = x < 22 && depth < 6 ? GEN_DIR
				   : x < 88	       ? GEN_FILE
				   : x < 96	       ? GEN_LINK
							: GEN_FIFO;
			gen_entry(&g, dfd, rel, depth, name, kind, &q);
		}
		if (dfd != rootfd)
			close(dfd);
	}
	for (size_t i = 0; i < q.n; i++)
		free(q.rel[i]);
	free(q.rel);
	free(q.depth);
	close(rootfd);
}

/* A fresh temp dir with a generated tree in "root" below it; returns the root's path. */
static char *gen_fixture(char **base, uint64_t seed, long budget)
{
	*base = tu_mkdtemp();
	char *root = tu_path(*base, "root");
	mkdir_abs(root);
	gen_tree(root, seed, budget);
	return root;
}

static void opts_threads(hv_walk_opts *o, int threads, hv_walk_sort sort)
{
	hv_walk_opts_init(o);
	o->threads = threads;
	o->sort = sort;
}

/* ---- pre-order, sorting, threads ---------------------------------------------------------- */

static void test_sorted_matches_reference(void **state)
{
	(void)state;
	char *base;
	char *root = gen_fixture(&base, 1, 3000);
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	assert_true(ref.n >= 2500);
	/* The fixture really has what it is meant to test. */
	assert_non_null(recs_find(&ref, "new\nline"));
	const rec *hi = recs_find(&ref, "\xff");
	assert_non_null(hi);
	assert_true(hi->depth == 1 && hi->have_stat && !hi->is_dir);
	int dirs = 0, links = 0, fifos = 0, deep = 0, unknown = 0;
	for (size_t i = 0; i < ref.n; i++) {
		dirs += ref.v[i].type == HV_FT_DIR;
		links += ref.v[i].type == HV_FT_SYMLINK;
		fifos += ref.v[i].type == HV_FT_FIFO;
		deep += ref.v[i].depth >= 4;
		unknown += !ref.v[i].have_stat;
	}
	assert_true(dirs > 100 && links > 20 && fifos > 5 && deep > 100 && unknown > 5);

	/* Byte order: "a" < "a\n" < "a\x80" < "ab" among the root's entries, "\xff" last. */
	const char *order[] = {"B", "a", "a\n", "ab", "a\x80", "~", "\x80\xff", "\xff"};
	size_t last = 0;
	for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		const rec *r = recs_find(&ref, order[k]);
		assert_non_null(r);
		size_t at = (size_t)(r - ref.v);
		if (k)
			assert_true(at > last);
		last = at;
	}

	const int threads[] = {1, 2, 8, 0};
	for (size_t i = 0; i < sizeof(threads) / sizeof(threads[0]); i++) {
		hv_walk_opts o;
		opts_threads(&o, threads[i], HV_SORT_NAME);
		char what[64];
		snprintf(what, sizeof(what), "sorted walk, %d threads", threads[i]);
		assert_true(walk_matches(root, &o, &ref, NULL, what));
		/* Also with the root given with a trailing slash. */
		if (threads[i] == 2) {
			char *slash = tu_path(root, "");
			assert_true(walk_matches(slash, &o, &ref, NULL, "root with a trailing slash"));
			free(slash);
		}
	}
	recs_free(&ref);
	tu_rmrf(base);
	free(root);
	free(base);
}

static void test_sort_none_same_set_preorder(void **state)
{
	(void)state;
	char *base;
	char *root = gen_fixture(&base, 2, 3000);
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	const int threads[] = {1, 2, 8};
	for (size_t i = 0; i < 3; i++) {
		hv_walk_opts o;
		opts_threads(&o, threads[i], HV_SORT_NONE);
		char what[64];
		snprintf(what, sizeof(what), "unsorted walk, %d threads", threads[i]);
		assert_true(walk_matches(root, &o, &ref, NULL, what));
	}
	/* The pre-order checker itself catches a record outside its parent's block. */
	if (ref.n > 3) {
		recs bad = ref;
		bad.v = tu_xmalloc(ref.n * sizeof(*bad.v));
		memcpy(bad.v, ref.v, ref.n * sizeof(*bad.v));
		size_t d = 0;
		while (d < ref.n && !(bad.v[d].type == HV_FT_DIR && d + 1 < ref.n &&
				       bad.v[d + 1].depth == bad.v[d].depth + 1))
			d++;
		assert_true(d + 1 < ref.n);
		rec t = bad.v[d];
		bad.v[d] = bad.v[d + 1];
		bad.v[d + 1] = t;
		fprintf(stderr, "(an expected pre-order complaint follows)\n");
		assert_false(recs_preorder(&bad, -1, "checker self-test"));
		free(bad.v);
	}
	recs_free(&ref);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- symlinks ----------------------------------------------------------------------------- */

/* root/{dang -> nowhere, loop -> loop, realdir/{f, up -> ..}, ldir -> realdir,
 * lfile -> realdir/f} */
static char *symlink_fixture(char **base)
{
	*base = tu_mkdtemp();
	char *root = tu_path(*base, "root");
	mkdir_abs(root);
	mklink(root, "nowhere", "dang");
	mklink(root, "loop", "loop");
	tu_mkdir(root, "realdir");
	write_str(root, "realdir/f", "abc");
	mklink(root, "..", "realdir/up");
	mklink(root, "realdir", "ldir");
	mklink(root, "realdir/f", "lfile");
	return root;
}

static void test_symlinks_not_followed(void **state)
{
	(void)state;
	char *base;
	char *root = symlink_fixture(&base);
	struct stat real;
	char *rd = tu_path(root, "realdir");
	assert_int_equal(stat(rd, &real), 0);
	free(rd);
	const int threads[] = {1, 4};
	for (size_t t = 0; t < 2; t++) {
		hv_walk_opts o;
		opts_threads(&o, threads[t], HV_SORT_NAME);
		walk_log lg;
		assert_true(walk_run(&lg, root, &o, NULL));
		const char *const expect[] = {"dang", "ldir", "lfile", "loop", "realdir", "realdir/f",
					      "realdir/up"};
		assert_true(events_match(&lg, root, expect, 7, "symlinks, no follow"));
		assert_int_equal(lg.end, HV_DONE);
		for (size_t i = 0; i < 2; i++) {
			const rec *r = recs_find(&lg.r, i == 0 ? "dang" : "loop");
			assert_true(r->have_lstat);
			assert_int_equal(r->type, HV_FT_SYMLINK);
			assert_false(r->have_stat); /* is_dir and size unknown */
			assert_false(r->is_dir);
		}
		const rec *l = recs_find(&lg.r, "ldir");
		assert_true(l->have_lstat && l->have_stat && l->is_dir);
		assert_int_equal(l->type, HV_FT_SYMLINK);
		assert_int_equal(l->size, (uint64_t)real.st_size);
		const rec *f = recs_find(&lg.r, "lfile");
		assert_true(f->have_stat && !f->is_dir);
		assert_int_equal(f->size, 3);
		assert_int_equal(f->type, HV_FT_SYMLINK);
		const rec *up = recs_find(&lg.r, "realdir/up");
		assert_true(up->have_stat && up->is_dir);
		assert_int_equal(up->type, HV_FT_SYMLINK);
		/* Without readlink, no target. */
		assert_null(l->target);
		walk_log_free(&lg);
	}
	tu_rmrf(base);
	free(root);
	free(base);
}

static void test_follow_enters_and_warns_on_ancestor(void **state)
{
	(void)state;
	char *base;
	char *root = symlink_fixture(&base);
	const int threads[] = {1, 3};
	for (size_t t = 0; t < 2; t++) {
		hv_walk_opts o;
		opts_threads(&o, threads[t], HV_SORT_NAME);
		o.follow = true;
		o.max_entries = 1000; /* a walk that does not see the loop ends, and fails */
		walk_log lg;
		assert_true(walk_run(&lg, root, &o, NULL));
		/* ldir is entered; ldir/up and realdir/up lead back to the root: each listed once,
		 * not entered, and the next call is a warning naming it. */
		const char *const expect[] = {"dang",      "ldir",  "ldir/f",     "ldir/up",
					      "!W:/ldir/up", "lfile", "loop",       "realdir",
					      "realdir/f", "realdir/up", "!W:/realdir/up"};
		assert_true(events_match(&lg, root, expect, 11, "symlinks, follow"));
		assert_int_equal(lg.end, HV_DONE);
		const rec *lf = recs_find(&lg.r, "ldir/f");
		assert_true(lf->have_stat && !lf->is_dir);
		assert_int_equal(lf->size, 3);
		assert_int_equal(lf->type, HV_FT_FILE);
		assert_int_equal(lf->depth, 2);
		const rec *d = recs_find(&lg.r, "dang");
		assert_false(d->have_stat);
		assert_int_equal(lg.warnings, 2);
		walk_log_free(&lg);
	}
	/* root2/{a/b/{x, toa -> ..}, c/tob -> ../a/b}: under c/tob, "toa" leads to a, which is
	 * not an ancestor there (entered), and a's "b" is c/tob itself (an ancestor: warned). */
	char *root2 = tu_path(base, "root2");
	mkdir_abs(root2);
	tu_mkdir(root2, "a");
	tu_mkdir(root2, "a/b");
	write_str(root2, "a/b/x", "x");
	mklink(root2, "..", "a/b/toa");
	tu_mkdir(root2, "c");
	mklink(root2, "../a/b", "c/tob");
	const char *const expect2[] = {"a",         "a/b",         "a/b/toa", "!W:/a/b/toa",
				       "a/b/x",     "c",           "c/tob",   "c/tob/toa",
				       "c/tob/toa/b", "!W:/c/tob/toa/b", "c/tob/x"};
	for (int nt = 1; nt <= 2; nt++) {
		hv_walk_opts o;
		opts_threads(&o, nt, HV_SORT_NAME);
		o.follow = true;
		o.max_entries = 1000;
		walk_log lg;
		assert_true(walk_run(&lg, root2, &o, NULL));
		assert_true(events_match(&lg, root2, expect2, 11, "follow, nested links"));
		walk_log_free(&lg);
	}
	free(root2);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- opening ------------------------------------------------------------------------------ */

static void test_open_errors_and_symlink_root(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	tu_mkdir(root, "sub");
	write_str(root, "sub/f", "hello");
	write_str(root, "g", "x");
	hv_walk *w = (hv_walk *)&w; /* must be reset to NULL on failure */
	char *missing = tu_path(base, "missing");
	assert_int_equal(hv_walk_open(&w, missing, NULL), HV_ENOTDIR);
	assert_null(w);
	assert_non_null(strstr(hv_error_last(), "missing"));
	char *file = tu_path(root, "g");
	assert_int_equal(hv_walk_open(&w, file, NULL), HV_ENOTDIR);
	assert_null(w);
	char *dangling = tu_path(base, "dangling");
	assert_int_equal(symlink("nowhere", dangling), 0);
	assert_int_equal(hv_walk_open(&w, dangling, NULL), HV_ENOTDIR);
	char *tofile = tu_path(base, "tofile");
	assert_int_equal(symlink(file, tofile), 0);
	assert_int_equal(hv_walk_open(&w, tofile, NULL), HV_ENOTDIR);
	hv_walk_opts o;
	hv_walk_opts_init(&o);
	o.threads = -1;
	assert_int_equal(hv_walk_open(&w, root, &o), HV_EUSAGE);
	assert_null(w);
	/* No root (or nowhere to put the walk): a usage error, not "(null): Bad address". */
	assert_int_equal(hv_walk_open(&w, NULL, NULL), HV_EUSAGE);
	assert_null(w);
	assert_string_equal(hv_error_last(), "hv_walk_open: missing argument");
	assert_int_equal(hv_walk_open(NULL, root, NULL), HV_EUSAGE);
	/* Options outside their documented values are refused, never walked or crashed on. */
	hv_walk_opts_init(&o);
	o.max_depth = -2;
	assert_int_equal(hv_walk_open(&w, root, &o), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "max_depth"));
	hv_walk_opts_init(&o);
	o.sort = (hv_walk_sort)7;
	assert_int_equal(hv_walk_open(&w, root, &o), HV_EUSAGE);
	hv_walk_opts_init(&o);
	o.n_excludes = 2;
	assert_int_equal(hv_walk_open(&w, root, &o), HV_EUSAGE);
	const char *holes[] = {"*.o", NULL};
	o.excludes = holes;
	assert_int_equal(hv_walk_open(&w, root, &o), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "excludes[1]"));
	assert_null(w);

	/* A root that is a symlink to a directory is followed (find -H). */
	char *lroot = tu_path(base, "lroot");
	assert_int_equal(symlink("root", lroot), 0);
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	assert_int_equal(ref.n, 3);
	for (int threads = 1; threads <= 2; threads++) {
		opts_threads(&o, threads, HV_SORT_NAME);
		assert_true(walk_matches(lroot, &o, &ref, NULL, "symlinked root"));
	}
	assert_int_equal(hv_walk_open(&w, lroot, NULL), HV_OK);
	assert_string_equal(hv_walk_root(w), lroot);
	hv_walk_close(w);
	/* The defaults (opts NULL) walk everything, sorted. */
	walk_log lg;
	assert_true(walk_run(&lg, root, NULL, NULL));
	assert_true(recs_equal(&lg.r, &ref, "opts NULL"));
	walk_log_free(&lg);
	/* An empty directory: HV_DONE at once, and again. */
	char *empty = tu_path(base, "empty");
	mkdir_abs(empty);
	assert_int_equal(hv_walk_open(&w, empty, NULL), HV_OK);
	const hv_entry *e = (const hv_entry *)&e;
	assert_int_equal(hv_walk_next(w, &e), HV_DONE);
	assert_null(e);
	assert_int_equal(hv_walk_next(w, &e), HV_DONE);
	assert_int_equal(hv_walk_count(w), 0);
	hv_walk_close(w);
	hv_walk_close(NULL);
	recs_free(&ref);
	free(empty);
	free(lroot);
	free(tofile);
	free(dangling);
	free(file);
	free(missing);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- options ------------------------------------------------------------------------------ */

static void test_max_depth(void **state)
{
	(void)state;
	char *base;
	char *root = gen_fixture(&base, 3, 1500);
	for (int md = 0; md <= 4; md++) {
		ref_opts ro = REF_ALL;
		ro.max_depth = md;
		recs ref;
		assert_true(ref_build(&ref, root, &ro));
		for (int t = 0; t < 2; t++) {
			hv_walk_opts o;
			opts_threads(&o, t ? 4 : 1, t ? HV_SORT_NONE : HV_SORT_NAME);
			o.max_depth = md;
			char what[64];
			snprintf(what, sizeof(what), "max_depth %d, %d threads", md, o.threads);
			assert_true(walk_matches(root, &o, &ref, NULL, what));
		}
		if (md == 0) {
			assert_int_equal(ref.n, 0);
		} else {
			for (size_t i = 0; i < ref.n; i++)
				assert_true(ref.v[i].depth <= md);
			bool at_md = false;
			for (size_t i = 0; i < ref.n; i++)
				at_md |= ref.v[i].depth == md;
			assert_true(at_md);
		}
		recs_free(&ref);
	}
	tu_rmrf(base);
	free(root);
	free(base);
}

/* root/{keep/{x.tmp, y.txt, skipdir/{z}, b7/{q}}, skipdir/{w}, a.tmp, b1, b22/{r},
 *       .hid/{q}, .h/{p.txt}, c.txt} */
static char *options_fixture(char **base)
{
	*base = tu_mkdtemp();
	char *root = tu_path(*base, "root");
	mkdir_abs(root);
	tu_mkdir(root, "keep");
	write_str(root, "keep/x.tmp", "1");
	write_str(root, "keep/y.txt", "22");
	tu_mkdir(root, "keep/skipdir");
	write_str(root, "keep/skipdir/z", "z");
	tu_mkdir(root, "keep/b7");
	write_str(root, "keep/b7/q", "q");
	tu_mkdir(root, "skipdir");
	write_str(root, "skipdir/w", "w");
	write_str(root, "a.tmp", "a");
	write_str(root, "b1", "b");
	tu_mkdir(root, "b22");
	write_str(root, "b22/r", "r");
	tu_mkdir(root, ".hid");
	write_str(root, ".hid/q", "q");
	tu_mkdir(root, ".h");
	write_str(root, ".h/p.txt", "p");
	write_str(root, "c.txt", "ccc");
	return root;
}

static void test_excludes_and_no_hidden(void **state)
{
	(void)state;
	char *base;
	char *root = options_fixture(&base);
	const char *const ex[] = {"*.tmp", "skipdir", "b?"};
	for (int variant = 0; variant < 3; variant++) {
		ref_opts ro = REF_ALL;
		hv_walk_opts o;
		opts_threads(&o, variant == 2 ? 4 : 1, HV_SORT_NAME);
		if (variant != 1) {
			ro.excludes = o.excludes = ex;
			ro.n_excludes = o.n_excludes = 3;
		}
		if (variant != 0)
			ro.no_hidden = o.no_hidden = true;
		recs ref;
		assert_true(ref_build(&ref, root, &ro));
		char what[64];
		snprintf(what, sizeof(what), "excludes/no_hidden variant %d", variant);
		assert_true(walk_matches(root, &o, &ref, NULL, what));
		/* The reference itself is what the options mean. */
		assert_int_equal(recs_find(&ref, "skipdir/w") == NULL, variant != 1);
		assert_int_equal(recs_find(&ref, "keep/skipdir") == NULL, variant != 1);
		assert_int_equal(recs_find(&ref, "keep/b7/q") == NULL, variant != 1);
		assert_int_equal(recs_find(&ref, ".hid") == NULL, variant != 0);
		assert_int_equal(recs_find(&ref, ".h/p.txt") == NULL, variant != 0);
		assert_non_null(recs_find(&ref, "b22"));
		assert_non_null(recs_find(&ref, "b22/r"));
		assert_non_null(recs_find(&ref, "keep/y.txt"));
		recs_free(&ref);
	}
	/* The excludes array is copied: the caller's may go away after hv_walk_open. */
	char *pat = strdup("keep");
	const char *exs[] = {pat};
	hv_walk_opts o;
	opts_threads(&o, 2, HV_SORT_NAME);
	o.excludes = exs;
	o.n_excludes = 1;
	hv_walk *w;
	assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
	pat[0] = 'X';
	exs[0] = NULL;
	const hv_entry *e;
	hv_status st;
	while ((st = hv_walk_next(w, &e)) == HV_OK)
		assert_true(strncmp(e->path, "keep", 4) != 0);
	assert_int_equal(st, HV_DONE);
	hv_walk_close(w);
	free(pat);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* An exclude glob matches a name the way find -name (and rsync, .gitignore) match it: "*.tmp"
 * matches ".x.tmp" too, a leading dot is not special. */
static void test_exclude_glob_matches_leading_dot(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	write_str(root, ".x.tmp", "1");
	write_str(root, "y.tmp", "1");
	tu_mkdir(root, ".cache");
	write_str(root, ".cache/f", "1");
	write_str(root, "keep", "1");
	const char *const ex[] = {"*.tmp", "*cache"};
	hv_walk_opts o;
	opts_threads(&o, 1, HV_SORT_NAME);
	o.excludes = ex;
	o.n_excludes = 2;
	walk_log lg;
	assert_true(walk_run(&lg, root, &o, NULL));
	const char *const expect[] = {"keep"};
	assert_true(events_match(&lg, root, expect, 1, "exclude globs on dot-names"));
	walk_log_free(&lg);
	tu_rmrf(base);
	free(root);
	free(base);
}

static void test_max_entries(void **state)
{
	(void)state;
	char *base;
	char *root = gen_fixture(&base, 4, 1200);
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	const uint64_t limits[] = {1, 7, 100, 1000};
	for (size_t li = 0; li < 4; li++) {
		for (int threads = 1; threads <= 8; threads += 7) {
			uint64_t n = limits[li];
			assert_true(n < ref.n);
			hv_walk_opts o;
			opts_threads(&o, threads, HV_SORT_NAME);
			o.max_entries = n;
			hv_walk *w;
			assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
			const hv_entry *e;
			recs got = {0};
			for (uint64_t i = 0; i < n; i++) {
				assert_int_equal(hv_walk_next(w, &e), HV_OK);
				rec_from_entry(recs_push(&got), e);
			}
			recs want = ref;
			want.n = n;
			assert_true(recs_equal(&got, &want, "max_entries prefix"));
			recs_free(&got);
			assert_int_equal(hv_walk_next(w, &e), HV_WARN);
			assert_null(e);
			assert_non_null(strstr(hv_error_last(), root));
			assert_int_equal(hv_walk_next(w, &e), HV_DONE);
			assert_int_equal(hv_walk_next(w, &e), HV_DONE);
			assert_int_equal(hv_walk_count(w), n);
			assert_int_equal(hv_walk_warnings(w), 1);
			hv_walk_close(w);
		}
	}
	recs_free(&ref);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* A limit that the tree does not exceed cuts nothing: all N records, then HV_DONE, and no
 * warning (a warning, and the CLI's exit status 1, would tell the caller that the output is
 * incomplete when it is not). */
static void test_max_entries_not_exceeded(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	write_str(root, "a", "a");
	tu_mkdir(root, "d");
	write_str(root, "d/b", "b");
	bool ok = true;
	for (uint64_t limit = 3; limit <= 4; limit++) {
		for (int threads = 1; threads <= 2; threads++) {
			hv_walk_opts o;
			opts_threads(&o, threads, HV_SORT_NAME);
			o.max_entries = limit;
			walk_log lg;
			const char *const expect[] = {"a", "d", "d/b"};
			if (!walk_run(&lg, root, &o, NULL) ||
			    !events_match(&lg, root, expect, 3, "max_entries not exceeded")) {
				fprintf(stderr, "max_entries %llu, %d threads, on a tree of 3 entries\n",
					(unsigned long long)limit, threads);
				ok = false;
			}
			walk_log_free(&lg);
		}
	}
	tu_rmrf(base);
	free(root);
	free(base);
	assert_true(ok);
}

static void test_readlink_target(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	mklink(root, "target\x80\nx", "l1");
	char longt[1001];
	for (size_t i = 0; i < 1000; i++)
		longt[i] = i % 2 ? '/' : 'x';
	longt[1000] = '\0';
	mklink(root, longt, "l2");
	write_str(root, "f", "data");
	tu_mkdir(root, "d");
	mklink(root, "../f", "d/l3");
	for (int threads = 1; threads <= 2; threads++) {
		for (int rl = 0; rl < 2; rl++) {
			hv_walk_opts o;
			opts_threads(&o, threads, HV_SORT_NAME);
			o.readlink = rl;
			walk_log lg;
			assert_true(walk_run(&lg, root, &o, NULL));
			const char *const expect[] = {"d", "d/l3", "f", "l1", "l2"};
			assert_true(events_match(&lg, root, expect, 5, "readlink"));
			const rec *l1 = recs_find(&lg.r, "l1"), *l2 = recs_find(&lg.r, "l2"),
				  *l3 = recs_find(&lg.r, "d/l3");
			assert_null(recs_find(&lg.r, "f")->target);
			assert_null(recs_find(&lg.r, "d")->target);
			if (!rl) {
				assert_null(l1->target);
				assert_null(l2->target);
				assert_null(l3->target);
			} else {
				assert_non_null(l1->target);
				assert_int_equal(l1->target_len, 9);
				assert_memory_equal(l1->target, "target\x80\nx", 9);
				assert_non_null(l2->target);
				assert_int_equal(l2->target_len, 1000);
				assert_memory_equal(l2->target, longt, 1000);
				assert_non_null(l3->target);
				assert_string_equal(l3->target, "../f");
			}
			walk_log_free(&lg);
		}
	}
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- the descriptor cache under pressure -------------------------------------------------- */

typedef struct pressure {
	const char *root;
	const recs *ref;
	int threads;
	bool lower_after_open; /* lower RLIMIT_NOFILE after hv_walk_open, not before */
} pressure;

/* The lowest descriptor limit under which exactly want descriptor numbers are free (the
 * process may hold descriptors anywhere, e.g. inherited high ones). */
static int limit_with_free(int want)
{
	static bool used[65536];
	memset(used, 0, sizeof(used));
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		_exit(92);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);
		if (e->d_name[0] != '.' && fd != dirfd(d) && fd >= 0 && fd < 65536)
			used[fd] = true;
	}
	closedir(d);
	int lim = 0;
	for (int free_n = 0; free_n < want; lim++)
		free_n += !used[lim];
	return lim;
}

/* Leaves the walk 24 free descriptors, while its cache was sized for the limit it saw when it
 * opened. */
static void lower_limit_now(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		_exit(90);
	rl.rlim_cur = (rlim_t)limit_with_free(24);
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		_exit(91);
}

static int pressure_child(void *arg)
{
	const pressure *p = arg;
	if (!p->lower_after_open) {
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
			return 90;
		rl.rlim_cur = 32;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			return 91;
	}
	hv_walk_opts o;
	opts_threads(&o, p->threads, HV_SORT_NAME);
	walk_how how = {true, p->lower_after_open ? lower_limit_now : NULL};
	char what[96];
	snprintf(what, sizeof(what), "descriptor pressure (%s), %d threads",
		 p->lower_after_open ? "limit lowered after open" : "RLIMIT_NOFILE 32", p->threads);
	if (!walk_matches(p->root, &o, p->ref, &how, what))
		return 1;
	return 0;
}

static void run_pressure(const char *root, const recs *ref)
{
	const int threads[] = {1, 4};
	for (size_t t = 0; t < 2; t++)
		for (int after = 0; after < 2; after++) {
			pressure p = {root, ref, threads[t], after};
			int st = run_child(pressure_child, &p);
			if (st != 0)
				fail_msg("descriptor pressure (%s), %d threads: child exit %d",
					 after ? "limit lowered after open" : "RLIMIT_NOFILE 32",
					 threads[t], st);
		}
}

/* Many small directories three levels deep, walked by pools of 2, 4 and 8 workers under
 * RLIMIT_NOFILE 32, sorted and not: workers hand jobs back for want of descriptors all the
 * time, batches are small, and the records still come once each, in order. */
typedef struct batch_walk {
	const char *root;
	const recs *ref;
	int limit;        /* RLIMIT_NOFILE for the walks, 0: unchanged */
} batch_walk;

static int batch_walk_child(void *arg)
{
	const batch_walk *p = arg;
	if (p->limit) {
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
			return 90;
		rl.rlim_cur = (rlim_t)p->limit;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			return 91;
	}
	const int threads[] = {2, 4, 8};
	for (int round = 0; round < 6; round++) {
		hv_walk_opts o;
		opts_threads(&o, threads[round % 3], round < 3 ? HV_SORT_NAME : HV_SORT_NONE);
		walk_how how = {round == 0, NULL};
		char what[96];
		snprintf(what, sizeof(what), "RLIMIT_NOFILE %d, %d threads, %s", p->limit,
			 threads[round % 3], round < 3 ? "sorted" : "unsorted");
		if (!walk_matches(p->root, &o, p->ref, &how, what))
			return 1;
	}
	return 0;
}

static void test_fd_pressure_batches(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	for (int i = 0; i < 24; i++)
		for (int j = 0; j < 24; j++) {
			char rel[64];
			snprintf(rel, sizeof(rel), "a%02d", i);
			if (j == 0)
				tu_mkdir(root, rel);
			snprintf(rel, sizeof(rel), "a%02d/b%02d", i, j);
			tu_mkdir(root, rel);
			snprintf(rel, sizeof(rel), "a%02d/b%02d/c", i, j);
			tu_mkdir(root, rel);
			snprintf(rel, sizeof(rel), "a%02d/b%02d/c/f", i, j);
			write_self(root, rel);
			snprintf(rel, sizeof(rel), "a%02d/b%02d/g", i, j);
			write_self(root, rel);
		}
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	assert_int_equal(ref.n, 24 + 24 * 24 * 4);
	batch_walk p = {root, &ref, 32};
	assert_int_equal(run_child(batch_walk_child, &p), 0);
	recs_free(&ref);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* A shortage of descriptors that does not pass: every free descriptor taken by the caller
 * (as its other threads might), after the walk opened its root. The root's listing comes out
 * whole and each subdirectory is warned of, as openat failed (EMFILE); the walk waits for a
 * descriptor a few seconds in all, not a few seconds per directory (a walk of a big tree would
 * then never end). */
static int exhausted_child(void *arg)
{
	const char *root = arg;
	hv_walk_opts o;
	opts_threads(&o, 1, HV_SORT_NAME);
	hv_walk *w = NULL;
	if (hv_walk_open(&w, root, &o) != HV_OK)
		return 80;
	while (dup(0) >= 0)
		;
	if (errno != EMFILE)
		return 81;
	size_t records = 0, warned = 0, emfile = 0;
	for (;;) {
		const hv_entry *e = NULL;
		hv_status st = hv_walk_next(w, &e);
		if (st == HV_DONE)
			break;
		if (st == HV_WARN) {
			warned++;
			emfile += strstr(hv_error_last(), ": Too many open files") != NULL;
			continue;
		}
		if (st != HV_OK)
			return 82;
		records++;
	}
	int waited = hv__walk_fd_waited_ms(w);
	hv_walk_close(w);
	if (records != 12 || warned != 6 || emfile != 6) {
		fprintf(stderr, "%zu records, %zu warnings (%zu EMFILE); want 12, 6, 6\n", records,
			warned, emfile);
		return 1;
	}
	if (waited > 5000) {
		fprintf(stderr, "waited %d ms for descriptors in all; at most 5000\n", waited);
		return 2;
	}
	return 0;
}

static void test_fd_shortage_that_lasts(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	for (int i = 0; i < 6; i++) {
		char rel[32];
		snprintf(rel, sizeof(rel), "d%d", i);
		tu_mkdir(root, rel);
		snprintf(rel, sizeof(rel), "d%d/f", i);
		write_self(root, rel);
		snprintf(rel, sizeof(rel), "f%d", i);
		write_self(root, rel);
	}
	assert_int_equal(run_child(exhausted_child, root), 0);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* Chains of directories, each level holding only the next: the consumer reaches every level
 * just as a worker claims it, and with HARVEST_TEST_WALK_SLOW_CLAIMS=1 a worker starts the
 * job while the consumer is between seeing it claimed and trying to take it (what a
 * preemption there does). Exactly one of them may read it: read by both at once, the records
 * are realloc'ed under the other's sort (an ASan report) or come out twice. With plenty of
 * descriptors and under RLIMIT_NOFILE 32. */
static void test_consumer_and_worker_race_for_claimed(void **state)
{
	(void)state;
	set_switch("HARVEST_TEST_WALK_SLOW_CLAIMS", "1");
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	for (int i = 0; i < 4; i++) {
		char rel[1024];
		int n = snprintf(rel, sizeof(rel), "c%d", i);
		tu_mkdir(root, rel);
		for (int l = 0; l < 150; l++) {
			n += snprintf(rel + n, sizeof(rel) - (size_t)n, "/%d", l % 10);
			tu_mkdir(root, rel);
			if (l % 10 == 9) {
				snprintf(rel + n, sizeof(rel) - (size_t)n, "/f");
				write_self(root, rel);
				rel[n] = '\0';
			}
		}
	}
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	assert_int_equal(ref.n, 4 + 4 * 150 + 4 * 15);
	const int limits[] = {0, 32};
	for (size_t i = 0; i < 2; i++) {
		batch_walk p = {root, &ref, limits[i]};
		assert_int_equal(run_child(batch_walk_child, &p), 0);
	}
	set_switch("HARVEST_TEST_WALK_SLOW_CLAIMS", NULL);
	recs_free(&ref);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* 2,000 levels: each holds a file "a" (its path as content) and the next level "d"; every
 * 100th level also "e/x", reached after the whole deep subtree of "d" has evicted every
 * descriptor, so its parent is reopened component by component from an ancestor. */
static void test_fd_pressure_deep(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	size_t cap = 8192, len = 0;
	char *rel = tu_xmalloc(cap);
	for (int level = 0; level < 2000; level++) {
		size_t l0 = len;
		memcpy(rel + len, len ? "/a" : "a", len ? 3 : 2);
		int f = openat(fd, "a", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		assert_true(f >= 0);
		size_t flen = strlen(rel);
		assert_int_equal(write(f, rel, flen), (ssize_t)flen);
		close(f);
		if (level % 100 == 0) {
			assert_int_equal(mkdirat(fd, "e", 0755), 0);
			memcpy(rel + l0, l0 ? "/e/x" : "e/x", l0 ? 5 : 4);
			int e = openat(fd, "e", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			assert_true(e >= 0);
			f = openat(e, "x", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			assert_true(f >= 0);
			flen = strlen(rel);
			assert_int_equal(write(f, rel, flen), (ssize_t)flen);
			close(f);
			close(e);
		}
		assert_int_equal(mkdirat(fd, "d", 0755), 0);
		int nfd = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(nfd >= 0);
		close(fd);
		fd = nfd;
		memcpy(rel + l0, l0 ? "/d" : "d", l0 ? 3 : 2);
		len = strlen(rel);
	}
	close(fd);
	free(rel);
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	assert_int_equal(ref.n, 2000 * 2 + 20 * 2);
	run_pressure(root, &ref);
	recs_free(&ref);
	tu_rmrf_deep(base);
	free(root);
	free(base);
}

/* 300 sibling directories, each with a file and a subdirectory holding a file. */
static void test_fd_pressure_wide(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	for (int i = 0; i < 300; i++) {
		char rel[64];
		snprintf(rel, sizeof(rel), "w%03d", i);
		tu_mkdir(root, rel);
		snprintf(rel, sizeof(rel), "w%03d/g", i);
		write_self(root, rel);
		snprintf(rel, sizeof(rel), "w%03d/s", i);
		tu_mkdir(root, rel);
		snprintf(rel, sizeof(rel), "w%03d/s/f", i);
		write_self(root, rel);
	}
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	assert_int_equal(ref.n, 1200);
	run_pressure(root, &ref);
	recs_free(&ref);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- 20,000 levels ------------------------------------------------------------------------ */

#define CHAIN 20000

static void chain_remove(const char *root)
{
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	long depth = 0;
	for (;;) {
		int nfd = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0)
			break;
		close(fd);
		fd = nfd;
		depth++;
	}
	unlinkat(fd, "bottom", 0);
	for (; depth > 0; depth--) {
		int pfd = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		close(fd);
		if (pfd < 0)
			return;
		fd = pfd;
		if (unlinkat(fd, "d", AT_REMOVEDIR) != 0)
			fprintf(stderr, "chain_remove: %s\n", strerror(errno));
	}
	close(fd);
}

static void test_deep_chain_20000(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	int fd = tu_deep_dir(root, "d", CHAIN);
	tu_write_at(fd, "bottom", 0644, "deep");
	close(fd);

	char *want = tu_xmalloc(2 * CHAIN + 16);
	for (int threads = 0; threads <= 1; threads++) {
		hv_walk *w;
		hv_walk_opts o;
		opts_threads(&o, threads, HV_SORT_NAME);
		assert_int_equal(hv_walk_open(&w, root, threads ? &o : NULL), HV_OK);
		const hv_entry *e;
		size_t wl = 0;
		for (int i = 1; i <= CHAIN; i++) {
			hv_status st = hv_walk_next(w, &e);
			if (st != HV_OK)
				fail_msg("level %d: status %d: %s", i, st, hv_error_last());
			memcpy(want + wl, i > 1 ? "/d" : "d", i > 1 ? 2 : 1);
			wl += i > 1 ? 2 : 1;
			if (e->path_len != wl || memcmp(e->path, want, wl) != 0 || e->depth != i ||
			    e->name_len != 1 || strcmp(e->name, "d") != 0 || e->type != HV_FT_DIR ||
			    !e->have_stat || !e->is_dir)
				fail_msg("level %d: wrong record (depth %d, path length %zu)", i, e->depth,
					 e->path_len);
		}
		assert_int_equal(hv_walk_next(w, &e), HV_OK);
		memcpy(want + wl, "/bottom", 7);
		wl += 7;
		assert_int_equal(e->path_len, wl);
		assert_memory_equal(e->path, want, wl);
		assert_int_equal(e->depth, CHAIN + 1);
		assert_int_equal(e->type, HV_FT_FILE);
		assert_int_equal(e->size, 4);
		int bfd = hv_walk_openat(w, O_RDONLY);
		assert_true(bfd >= 0);
		char buf[8];
		assert_int_equal(read(bfd, buf, sizeof(buf)), 4);
		assert_memory_equal(buf, "deep", 4);
		close(bfd);
		assert_int_equal(hv_walk_next(w, &e), HV_DONE);
		assert_int_equal(hv_walk_count(w), CHAIN + 1);
		assert_int_equal(hv_walk_warnings(w), 0);
		hv_walk_close(w);
	}
	free(want);
	chain_remove(root);
	assert_int_equal(rmdir(root), 0);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- hv_walk_openat ----------------------------------------------------------------------- */

static void test_openat(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	write_self(root, "f1");
	tu_mkdir(root, "sub");
	write_self(root, "sub/f2");
	mklink(root, "f2", "sub/lnk");
	mklink(root, ".", "sub/ldir");
	tu_mkdir(root, "sub/z");
	write_self(root, "sub/z/f3");
	for (int threads = 1; threads <= 4; threads += 3) {
		hv_walk_opts o;
		opts_threads(&o, threads, HV_SORT_NAME);
		hv_walk *w;
		assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
		/* Nothing returned yet. */
		assert_int_equal(hv_walk_openat(w, O_RDONLY), -1);
		const hv_entry *e;
		int files = 0, links = 0, dirs = 0;
		hv_status st;
		while ((st = hv_walk_next(w, &e)) == HV_OK) {
			if (e->type == HV_FT_FILE) {
				assert_true(check_file_content(w, e));
				files++;
			} else if (e->type == HV_FT_SYMLINK) {
				errno = 0;
				assert_int_equal(hv_walk_openat(w, O_RDONLY), -1);
				assert_int_equal(errno, ELOOP);
				links++;
			} else if (e->type == HV_FT_DIR) {
				int dfd = hv_walk_openat(w, O_RDONLY | O_DIRECTORY);
				assert_true(dfd >= 0);
				struct stat st2;
				assert_int_equal(fstat(dfd, &st2), 0);
				assert_int_equal(st2.st_ino, e->lst.ino);
				close(dfd);
				dirs++;
			}
			/* Relative to the parent's descriptor, not by path: once "sub/f2" is returned,
			 * "sub" is renamed away, and the file still opens. */
			if (strcmp(e->path, "sub/f2") == 0) {
				char *from = tu_path(root, "sub"), *to = tu_path(base, "moved");
				assert_int_equal(rename(from, to), 0);
				assert_true(check_file_content(w, e));
				assert_int_equal(rename(to, from), 0);
				free(from);
				free(to);
			}
		}
		assert_int_equal(st, HV_DONE);
		assert_int_equal(files, 3);
		assert_int_equal(links, 2);
		assert_int_equal(dirs, 2);
		/* After the end there is no entry. */
		assert_int_equal(hv_walk_openat(w, O_RDONLY), -1);
		hv_walk_close(w);
	}
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- descriptors of directories with nothing to enter ------------------------------------- */

#define LEAVES 24

/* Counts the open and close events of buf[0..n) per watch (and in all, in *n_open and
 * *n_close). */
static void count_events(const char *buf, ssize_t n, int opened[], int closed[], const int wd[],
			 int n_wd, int *n_open, int *n_close)
{
	for (ssize_t off = 0; n > 0 && off < n;) {
		const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
		off += (ssize_t)(sizeof(*ev) + ev->len);
		for (int i = 0; i < n_wd; i++) {
			if (wd[i] != ev->wd)
				continue;
			if (ev->mask & IN_OPEN) {
				opened[i]++;
				(*n_open)++;
			}
			if (ev->mask & IN_CLOSE_NOWRITE) {
				closed[i]++;
				(*n_close)++;
			}
		}
	}
}

/* Reads inotify events from ifd until want_open opens and want_close closes have arrived on
 * the watches (or nothing comes for 10 s: a failure, not a measure of speed), counting them
 * per watch. */
static void read_events(int ifd, int want_open, int want_close, int opened[], int closed[],
			const int wd[], int n_wd)
{
	int n_open = 0, n_close = 0;
	for (int i = 0; i < n_wd; i++) {
		n_open += opened[i];
		n_close += closed[i];
	}
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	while (n_open < want_open || n_close < want_close) {
		struct pollfd p = {.fd = ifd, .events = POLLIN};
		if (poll(&p, 1, 10000) <= 0)
			break;
		ssize_t n = read(ifd, buf, sizeof(buf));
		count_events(buf, n, opened, closed, wd, n_wd, &n_open, &n_close);
	}
}

/* Counts the events that have arrived on ifd, waiting for none. */
static void drain_events(int ifd, int opened[], int closed[], const int wd[], int n_wd)
{
	int n_open = 0, n_close = 0;
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct pollfd p = {.fd = ifd, .events = POLLIN};
	while (poll(&p, 1, 0) > 0) {
		ssize_t n = read(ifd, buf, sizeof(buf));
		if (n <= 0)
			break;
		count_events(buf, n, opened, closed, wd, n_wd, &n_open, &n_close);
	}
}

/* A directory with no subdirectory to enter, read ahead by a worker, is closed at once by
 * that worker (while the consumer has not reached it) unless the walk's caller has opened an
 * entry through hv_walk_openat; either way the records are the reference's, and files in
 * the closed ones still open through hv_walk_openat (reopened from the parent). */
static void test_leaf_dirs_closed_when_read_ahead(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	write_self(root, "0first");
	for (int i = 0; i < LEAVES; i++) {
		char rel[64];
		snprintf(rel, sizeof(rel), "d%02d", i);
		tu_mkdir(root, rel);
		snprintf(rel, sizeof(rel), "d%02d/f", i);
		write_self(root, rel);
	}
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	for (int opens = 0; opens < 2; opens++) {
		int ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
		assert_true(ifd >= 0);
		int wd[LEAVES], opened[LEAVES] = {0}, closed[LEAVES] = {0};
		for (int i = 0; i < LEAVES; i++) {
			char rel[64];
			snprintf(rel, sizeof(rel), "d%02d", i);
			char *d = tu_path(root, rel);
			wd[i] = inotify_add_watch(ifd, d, IN_OPEN | IN_CLOSE_NOWRITE | IN_ONLYDIR);
			assert_true(wd[i] >= 0);
			free(d);
		}
		hv_walk_opts o;
		opts_threads(&o, 2, HV_SORT_NAME);
		hv_walk *w;
		assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
		const hv_entry *e;
		assert_int_equal(hv_walk_next(w, &e), HV_OK);
		assert_string_equal(e->path, "0first");
		/* before[i]: d<i> was opened before the caller asked for a descriptor. A worker
		 * reads ahead from the walk's open on, so on a slow run (valgrind, a loaded
		 * machine) some leaves are read, and closed, before the first hv_walk_openat;
		 * every leaf opened after it returned must be kept. */
		int before[LEAVES] = {0};
		if (opens) {
			assert_true(check_file_content(w, e));
			drain_events(ifd, opened, closed, wd, LEAVES);
			memcpy(before, opened, sizeof(before));
		}
		/* The consumer stays on the first record: only the workers read the others, and
		 * close each at once (without opens), or keep them (with). */
		read_events(ifd, LEAVES, opens ? 0 : LEAVES, opened, closed, wd, LEAVES);
		if (opens) {
			/* A short look for closes that should not come: one would follow its
			 * directory's read at once. */
			struct pollfd p = {.fd = ifd, .events = POLLIN};
			if (poll(&p, 1, 200) > 0)
				read_events(ifd, LEAVES, 1, opened, closed, wd, LEAVES);
		}
		int kept = 0;
		for (int i = 0; i < LEAVES; i++) {
			assert_int_equal(opened[i], 1);
			if (!opens)
				assert_int_equal(closed[i], 1);
			else if (!before[i])
				assert_int_equal(closed[i], 0);
			kept += opens && !before[i];
		}
		if (opens)
			print_message("%d of %d leaves read after the first hv_walk_openat, all kept\n",
				      kept, LEAVES);
		/* The rest of the walk: the reference's records, every file opening. */
		recs got = {0};
		rec_from_entry(recs_push(&got), e);
		hv_status st;
		while ((st = hv_walk_next(w, &e)) == HV_OK) {
			if (e->type == HV_FT_FILE)
				assert_true(check_file_content(w, e));
			rec_from_entry(recs_push(&got), e);
		}
		assert_int_equal(st, HV_DONE);
		assert_true(recs_equal(&got, &ref, opens ? "leaves kept" : "leaves closed"));
		recs_free(&got);
		hv_walk_close(w);
		close(ifd);
	}
	recs_free(&ref);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- safety: a directory swapped for a symlink mid-walk ------------------------------------ */

static void swap_walk(const char *base, const char *root, int threads, bool real_dir)
{
	hv_walk_opts o;
	opts_threads(&o, threads, HV_SORT_NAME);
	hv_walk *w;
	assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
	const hv_entry *e;
	hv_status st;
	bool swapped = false, warned = false;
	int under_d = 0;
	char b[300];
	while ((st = hv_walk_next(w, &e)) != HV_DONE) {
		if (st == HV_WARN) {
			if (strstr(hv_error_last(), "/d"))
				warned = true;
			continue;
		}
		assert_int_equal(st, HV_OK);
		if (strstr(e->path, "secret"))
			fail_msg("the walk left the root: %s (%d threads)", SHOW(b, e->path, e->path_len),
				 threads);
		if (strncmp(e->path, "d/", 2) == 0) {
			/* Only what d held (read before the swap), or the new real directory's. */
			if (strcmp(e->path, "d/x") != 0 && strcmp(e->path, "d/y") != 0 &&
			    !(real_dir && strcmp(e->path, "d/fresh") == 0))
				fail_msg("unexpected record %s", SHOW(b, e->path, e->path_len));
			under_d++;
		}
		if (!swapped && strcmp(e->path, "d") == 0) {
			char *d = tu_path(root, "d");
			char *moved = tu_path(base, "moved");
			char *repl = tu_path(base, "repl");
			if (real_dir) {
				mkdir_abs(repl);
				write_str(repl, "fresh", "f");
			} else {
				char *outside = tu_path(base, "outside");
				assert_int_equal(symlink(outside, repl), 0);
				free(outside);
			}
			/* One atomic exchange: a worker opening d finds the old directory or its
			 * replacement, never nothing (a vanished directory is skipped silently). */
			assert_int_equal(renameat2(AT_FDCWD, repl, AT_FDCWD, d, RENAME_EXCHANGE), 0);
			assert_int_equal(rename(repl, moved), 0);
			free(repl);
			free(moved);
			free(d);
			swapped = true;
		}
	}
	assert_true(swapped);
	if (threads == 1) {
		/* Nothing was read ahead: d is read after the swap. */
		if (real_dir)
			assert_true(under_d == 1 || warned);
		else
			assert_true(under_d == 0 && warned);
	}
	assert_true(under_d > 0 || warned);
	hv_walk_close(w);
	/* Put things back for the next round. */
	char *d = tu_path(root, "d");
	char *moved = tu_path(base, "moved");
	if (real_dir) {
		char *fresh = tu_path(d, "fresh");
		unlink(fresh);
		free(fresh);
		rmdir(d);
	} else {
		unlink(d);
	}
	assert_int_equal(rename(moved, d), 0);
	free(moved);
	free(d);
}

static void test_swap_dir_for_symlink(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	char *outside = tu_path(base, "outside");
	mkdir_abs(outside);
	write_str(outside, "secret", "s");
	tu_mkdir(outside, "secretdir");
	write_str(outside, "secretdir/secret2", "s");
	write_str(root, "a", "a");
	tu_mkdir(root, "d");
	write_str(root, "d/x", "x");
	write_str(root, "d/y", "y");
	tu_mkdir(root, "z");
	write_str(root, "z/w", "w");
	const int threads[] = {1, 4};
	for (size_t t = 0; t < 2; t++) {
		swap_walk(base, root, threads[t], false);
		swap_walk(base, root, threads[t], true);
	}
	free(outside);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* An ancestor swapped while its descriptor was out of the cache: the walk reopens it from the
 * root, component by component, with O_NOFOLLOW and a device/inode check. root/p/{a/d/d/...
 * (40 levels), q/{k}}; with RLIMIT_NOFILE 32 (a cache of 16) and one thread, the 40 levels
 * below a, all open at once, evict p; once the record of p/q is out, p is replaced, and
 * reading q must reopen p. */
typedef struct ancestor_swap {
	const char *base, *root;
	bool real_dir; /* replace p with a new real directory, else with a symlink outside */
} ancestor_swap;

static int ancestor_swap_child(void *arg)
{
	const ancestor_swap *as = arg;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 90;
	rl.rlim_cur = 32;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 91;
	hv_walk_opts o;
	opts_threads(&o, 1, HV_SORT_NAME);
	hv_walk *w;
	if (hv_walk_open(&w, as->root, &o) != HV_OK)
		return 92;
	const hv_entry *e;
	hv_status st;
	bool swapped = false, warned = false;
	int rc = 0;
	char b[300];
	while ((st = hv_walk_next(w, &e)) != HV_DONE) {
		if (st == HV_WARN) {
			if (swapped && strstr(hv_error_last(), "/p/q"))
				warned = true;
			continue;
		}
		if (st != HV_OK) {
			rc = 93;
			break;
		}
		if (strstr(e->path, "secret") || strstr(e->path, "newfile")) {
			fprintf(stderr, "listed %s from the swapped-in %s\n", SHOW(b, e->path, e->path_len),
				as->real_dir ? "directory" : "symlink's target");
			rc = 94;
		}
		if (strcmp(e->path, "p/q") == 0) {
			char p[PATH_MAX], moved[PATH_MAX], outside[PATH_MAX];
			snprintf(p, sizeof(p), "%s/p", as->root);
			snprintf(moved, sizeof(moved), "%s/p_moved", as->base);
			snprintf(outside, sizeof(outside), "%s/outside", as->base);
			if (rename(p, moved) != 0)
				return 95;
			if (as->real_dir) {
				char q[PATH_MAX + 8], f[PATH_MAX + 16];
				snprintf(q, sizeof(q), "%s/q", p);
				snprintf(f, sizeof(f), "%s/q/newfile", p);
				if (mkdir(p, 0755) != 0 || mkdir(q, 0755) != 0)
					return 96;
				int fd = open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
				if (fd < 0)
					return 97;
				close(fd);
			} else if (symlink(outside, p) != 0) {
				return 98;
			}
			swapped = true;
		}
	}
	hv_walk_close(w);
	if (!swapped)
		return 99;
	if (!warned) {
		fprintf(stderr, "no warning naming p/q after p was swapped\n");
		return 100;
	}
	return rc;
}

static void test_swap_evicted_ancestor(void **state)
{
	(void)state;
	for (int real_dir = 0; real_dir < 2; real_dir++) {
		char *base = tu_mkdtemp();
		char *root = tu_path(base, "root");
		mkdir_abs(root);
		char *outside = tu_path(base, "outside");
		mkdir_abs(outside);
		tu_mkdir(outside, "q");
		write_str(outside, "q/secret", "s");
		tu_mkdir(root, "p");
		tu_mkdir(root, "p/a");
		char rel[128] = "p/a";
		for (int i = 0; i < 40; i++) {
			strcat(rel, "/d");
			tu_mkdir(root, rel);
		}
		tu_mkdir(root, "p/q");
		write_str(root, "p/q/k", "k");
		ancestor_swap as = {base, root, real_dir};
		int st = run_child(ancestor_swap_child, &as);
		if (st != 0)
			fail_msg("ancestor swapped for a %s: child exit %d",
				 real_dir ? "new directory" : "symlink", st);
		free(outside);
		tu_rmrf(base);
		free(root);
		free(base);
	}
}

/* ---- permissions, as nobody --------------------------------------------------------------- */

typedef struct perm_case {
	const char *root;
	hv_ftype e1_type, e2_type; /* what readdir says of r/e1 and r/e2 */
} perm_case;

static int perm_child(void *arg)
{
	const perm_case *pc = arg;
	if (geteuid() == 0)
		return 97; /* the privileges were not dropped */
	const char *const ex[] = {"ex"};
	for (int threads = 1; threads <= 4; threads += 3) {
		hv_walk_opts o;
		opts_threads(&o, threads, HV_SORT_NAME);
		o.excludes = ex;
		o.n_excludes = 1;
		walk_log lg;
		if (!walk_run(&lg, pc->root, &o, NULL))
			return 1;
		/* b's record, then the warning naming it, then its siblings go on; r/e2, a
		 * directory by its entry's type that cannot be examined, is warned of too, with
		 * lstat's reason; so is an entry of no type in the listing (what may be a
		 * directory), and not a file the listing calls one. */
		bool e2_dir = pc->e2_type == HV_FT_DIR;
		bool unknown = pc->e1_type == HV_FT_UNKNOWN;
		const char *const expect_typed[] = {
			"a", "a/x", "b", "!W:/b: Permission denied", "c", "c/y", "r", "r/e1", "r/e2",
			"!W:/r/e2: not entered: it cannot be examined (lstat: Permission denied)"};
		const char *const expect_untyped[] = {
			"a", "a/x", "b", "!W:/b: Permission denied", "c", "c/y", "r", "r/e1",
			"!W:/r/e1: not entered: it cannot be examined (lstat: Permission denied); it "
			"may be a directory",
			"r/e2",
			"!W:/r/e2: not entered: it cannot be examined (lstat: Permission denied); it "
			"may be a directory"};
		if (!(unknown ? events_match(&lg, pc->root, expect_untyped, 11, "unreadable directory")
			      : events_match(&lg, pc->root, expect_typed, e2_dir ? 10 : 9,
					     "unreadable directory")))
			return 2;
		const rec *b = recs_find(&lg.r, "b");
		if (!b->have_stat || !b->is_dir || b->type != HV_FT_DIR)
			return 3;
		const rec *r = recs_find(&lg.r, "r");
		if (!r->have_stat || !r->is_dir)
			return 4;
		/* r can be read but not searched: its entries are listed, nothing is known of
		 * them beyond the directory entry's type, and e2 is not entered. */
		const rec *e1 = recs_find(&lg.r, "r/e1"), *e2 = recs_find(&lg.r, "r/e2");
		if (e1->have_stat || e1->have_lstat || e2->have_stat || e2->have_lstat) {
			fprintf(stderr, "entries of a 0400 directory have stat data\n");
			return 5;
		}
		if (e1->type != pc->e1_type || e2->type != pc->e2_type) {
			fprintf(stderr, "r/e1 type %s, r/e2 type %s\n", hv_ftype_name(e1->type),
				hv_ftype_name(e2->type));
			return 6;
		}
		/* The message is "ROOT/b: Permission denied". */
		size_t rl = strlen(pc->root);
		if (strncmp(lg.warn[0], pc->root, rl) != 0 ||
		    strcmp(lg.warn[0] + rl, "/b: Permission denied") != 0) {
			fprintf(stderr, "warning: %s\n", lg.warn[0]);
			return 7;
		}
		if (lg.warnings != (unknown ? 3u : e2_dir ? 2u : 1u))
			return 8;
		walk_log_free(&lg);
	}
	/* An unreadable root fails the open. */
	char *b = tu_path(pc->root, "b");
	hv_walk *w;
	hv_status st = hv_walk_open(&w, b, NULL);
	free(b);
	if (st >= 0 || !strstr(hv_error_last(), "Permission denied")) {
		fprintf(stderr, "open of an unreadable root: %d %s\n", st, hv_error_last());
		return 9;
	}
	return 0;
}

static void test_unreadable_dirs_as_nobody(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "root");
	mkdir_abs(root);
	tu_mkdir(root, "a");
	write_str(root, "a/x", "x");
	tu_mkdir(root, "b");
	write_str(root, "b/inner", "i");
	tu_mkdir(root, "c");
	write_str(root, "c/y", "y");
	tu_mkdir(root, "ex"); /* excluded: never opened, so no warning */
	tu_mkdir(root, "r");
	write_str(root, "r/e1", "1");
	tu_mkdir(root, "r/e2");
	write_str(root, "r/e2/z", "z");
	perm_case pc = {root, HV_FT_UNKNOWN, HV_FT_UNKNOWN};
	char *r = tu_path(root, "r");
	DIR *d = opendir(r);
	assert_non_null(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, "e1") == 0)
			pc.e1_type = dtype_type(e->d_type);
		if (strcmp(e->d_name, "e2") == 0)
			pc.e2_type = dtype_type(e->d_type);
	}
	closedir(d);
	struct passwd *pw = getpwnam("nobody");
	uid_t nobody = pw ? pw->pw_uid : 65534;
	assert_int_equal(chown(r, nobody, (gid_t)-1), 0);
	assert_int_equal(chmod(r, 0400), 0);
	char *b = tu_path(root, "b");
	assert_int_equal(chmod(b, 0), 0);
	char *ex = tu_path(root, "ex");
	assert_int_equal(chmod(ex, 0), 0);
	int st = tu_as_nobody(perm_child, &pc);
	if (st != 0)
		fail_msg("as nobody: child exit %d", st);
	/* And as on a file system whose listings give no types. */
	set_switch("HARVEST_TEST_WALK_NO_DTYPE", "1");
	perm_case untyped = {root, HV_FT_UNKNOWN, HV_FT_UNKNOWN};
	st = tu_as_nobody(perm_child, &untyped);
	set_switch("HARVEST_TEST_WALK_NO_DTYPE", NULL);
	if (st != 0)
		fail_msg("as nobody, no types in the listings: child exit %d", st);
	free(ex);
	free(b);
	free(r);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- two walks in two threads ------------------------------------------------------------- */

typedef struct twin {
	const char *root, *other_root;
	const recs *ref;
	bool ok;
	char msg[256];
} twin;

static void *twin_main(void *arg)
{
	twin *t = arg;
	t->ok = true;
	const int threads[] = {2, 8, 1, 4, 3};
	for (size_t i = 0; i < 5 && t->ok; i++) {
		hv_walk_opts o;
		opts_threads(&o, threads[i], i % 2 ? HV_SORT_NONE : HV_SORT_NAME);
		if (!walk_matches(t->root, &o, t->ref, NULL, t->root)) {
			snprintf(t->msg, sizeof(t->msg), "walk %zu differs from the reference", i);
			t->ok = false;
		}
		/* Each thread's last error is its own. */
		o.max_entries = 5 + i;
		walk_log lg;
		walk_run(&lg, t->root, &o, NULL);
		if (lg.r.n != 5 + i || lg.n_warn != 1 || !strstr(lg.warn[0], t->root) ||
		    strstr(lg.warn[0], t->other_root)) {
			snprintf(t->msg, sizeof(t->msg), "limited walk %zu: %zu records, %zu warnings", i,
				 lg.r.n, lg.n_warn);
			t->ok = false;
		}
		walk_log_free(&lg);
	}
	return NULL;
}

static void test_two_walks_two_threads(void **state)
{
	(void)state;
	char *base1, *base2;
	char *root1 = gen_fixture(&base1, 5, 2500);
	char *root2 = gen_fixture(&base2, 6, 2500);
	recs ref1, ref2;
	assert_true(ref_build(&ref1, root1, &REF_ALL));
	assert_true(ref_build(&ref2, root2, &REF_ALL));
	twin a = {root1, root2, &ref1, false, ""}, b = {root2, root1, &ref2, false, ""};
	pthread_t ta, tb;
	assert_int_equal(pthread_create(&ta, NULL, twin_main, &a), 0);
	assert_int_equal(pthread_create(&tb, NULL, twin_main, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	if (!a.ok || !b.ok)
		fail_msg("concurrent walks: %s / %s", a.msg, b.msg);
	recs_free(&ref1);
	recs_free(&ref2);
	tu_rmrf(base1);
	tu_rmrf(base2);
	free(root1);
	free(root2);
	free(base1);
	free(base2);
}

/* ---- closing early ------------------------------------------------------------------------ */

static void test_close_early(void **state)
{
	(void)state;
	char *base;
	char *root = gen_fixture(&base, 7, 2000);
	for (int k = 0; k < 20; k++) {
		hv_walk_opts o;
		opts_threads(&o, 8, k % 2 ? HV_SORT_NONE : HV_SORT_NAME);
		hv_walk *w;
		assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
		const hv_entry *e;
		for (int i = 0; i < k * 7; i++)
			if (hv_walk_next(w, &e) != HV_OK)
				break;
		hv_walk_close(w); /* with workers still reading ahead; ASan checks for leaks */
	}
	tu_rmrf(base);
	free(root);
	free(base);
}

/* ---- a pool that grows mid-walk ----------------------------------------------------------- */

/* With every batch taken for blocked on I/O, workers are added while the walk runs: the
 * walk still gives every record once, in pre-order, sorted or not, with the same warnings
 * at the same places, under descriptor pressure, as nobody, and when closed early. */
static void test_pool_grows_when_blocked(void **state)
{
	set_switch("HARVEST_TEST_WALK_BLOCKED", "1");
	char *base;
	char *root = gen_fixture(&base, 7, 3000);
	recs ref;
	assert_true(ref_build(&ref, root, &REF_ALL));
	const int threads[] = {2, 0};
	for (size_t t = 0; t < 2; t++) {
		hv_walk_opts o;
		opts_threads(&o, threads[t], HV_SORT_NAME);
		hv_walk *w;
		assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
		int first = hv_walk_workers(w, NULL);
		const hv_entry *e;
		hv_status st;
		size_t n = 0;
		while ((st = hv_walk_next(w, &e)) == HV_OK) {
			/* The records come in the reference's order while workers are added. */
			assert_true(n < ref.n);
			assert_int_equal(e->path_len, ref.v[n].path_len);
			assert_memory_equal(e->path, ref.v[n].path, e->path_len);
			n++;
		}
		assert_int_equal(st, HV_DONE);
		assert_int_equal(n, ref.n);
		uint64_t grown = 0;
		int now = hv_walk_workers(w, &grown);
		fprintf(stderr, "threads %d: %d workers at first, %d at the end, %llu added\n",
			threads[t], first, now, (unsigned long long)grown);
		assert_true(grown > 0);
		assert_int_equal(now, first + (int)grown);
		assert_true(now <= 32);
		hv_walk_close(w);
	}
	recs_free(&ref);
	tu_rmrf(base);
	free(root);
	free(base);

	/* The other tests of order, limits, errors and descriptors, on a growing pool. */
	test_sorted_matches_reference(state);
	test_sort_none_same_set_preorder(state);
	test_follow_enters_and_warns_on_ancestor(state);
	test_max_entries(state);
	test_max_entries_not_exceeded(state);
	test_fd_pressure_wide(state);
	test_fd_pressure_deep(state);
	test_unreadable_dirs_as_nobody(state);
	test_close_early(state);
	set_switch("HARVEST_TEST_WALK_BLOCKED", NULL);
}

/* Without the test switch, a warm tree read by a count of workers asked for never grows the
 * pool. */
static void test_pool_kept_when_asked(void **state)
{
	(void)state;
	/* (Not left set by a failed test before this one.) */
	set_switch("HARVEST_TEST_WALK_BLOCKED", NULL);
	char *base;
	char *root = gen_fixture(&base, 8, 2000);
	hv_walk_opts o;
	opts_threads(&o, 2, HV_SORT_NONE);
	hv_walk *w;
	assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
	const hv_entry *e;
	while (hv_walk_next(w, &e) == HV_OK)
		;
	uint64_t grown = 1;
	assert_int_equal(hv_walk_workers(w, &grown), 2);
	assert_int_equal(grown, 0);
	hv_walk_close(w);
	opts_threads(&o, 1, HV_SORT_NONE);
	assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
	assert_int_equal(hv_walk_workers(w, NULL), 0);
	hv_walk_close(w);
	tu_rmrf(base);
	free(root);
	free(base);
}

/* getdents64 calls per directory name, counted by the walker's hook. */
struct dents_count {
	pthread_mutex_t lock;
	int big, small, empty, mnt, other;
};

static void count_getdents(void *ctx, const char *name)
{
	struct dents_count *c = ctx;
	pthread_mutex_lock(&c->lock);
	if (strcmp(name, "big") == 0)
		c->big++;
	else if (strcmp(name, "small") == 0)
		c->small++;
	else if (strcmp(name, "empty") == 0)
		c->empty++;
	else if (strcmp(name, "mnt") == 0)
		c->mnt++;
	else
		c->other++;
	pthread_mutex_unlock(&c->lock);
}

#define EXT4_SUPER_MAGIC_TEST 0xEF53

/* On ext4 a directory's listing ends where its last entry's offset is the end of the hash
 * space: one getdents64 for a directory that fits the buffer, none more to see it return
 * nothing; a directory larger than the buffer is read in several calls and listed whole,
 * and a file system mounted below the root (tmpfs) is read until getdents64 returns 0. The
 * tree is put on ext4: the temp directory when it is one, else an ext4 image mounted on it
 * (root only: mounting). */
static void test_ext4_listing_ends_at_htree_end(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* mounting needs root */
	char *d = tu_tmpdir();
	struct statfs sf;
	assert_int_equal(statfs(d, &sf), 0);
	if (sf.f_type != EXT4_SUPER_MAGIC_TEST) {
		char *img = tu_path(d, "ext4.img"), *fs = tu_path(d, "fs");
		tu_mkdir(d, "fs");
		tu_result r;
		char *mkfs[] = {"mkfs.ext4", "-q", "-F", img, "8M", NULL};
		tu_run(&r, NULL, NULL, mkfs);
		if (r.status != 0)
			fail_msg("mkfs.ext4: %s", r.err);
		tu_result_free(&r);
		char *mnt[] = {"mount", "-o", "loop", img, fs, NULL};
		tu_run(&r, NULL, NULL, mnt);
		if (r.status != 0)
			fail_msg("mount -o loop: %s", r.err);
		tu_result_free(&r);
		tu_cleanup_umount(fs);
		d = fs;
		free(img);
		assert_int_equal(statfs(d, &sf), 0);
		assert_int_equal(sf.f_type, EXT4_SUPER_MAGIC_TEST);
	}
	char *root = tu_path(d, "root");
	assert_int_equal(mkdir(root, 0755), 0);
	tu_mkdir(root, "big");
	tu_mkdir(root, "small");
	tu_mkdir(root, "empty");
	tu_mkdir(root, "mnt");
	char *big = tu_path(root, "big"), *small = tu_path(root, "small");
	char *mnt = tu_path(root, "mnt");
	/* 2,000 names of 60 bytes: about 150 KiB of records, more than one 64 KiB call. */
	for (int i = 0; i < 2000; i++) {
		char name[80];
		snprintf(name, sizeof(name), "%04d_%s", i,
			 "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz0123");
		tu_write(big, name, "x", 1);
	}
	for (int i = 0; i < 5; i++) {
		char name[16];
		snprintf(name, sizeof(name), "s%d", i);
		tu_write(small, name, "x", 1);
	}
	if (mount("none", mnt, "tmpfs", 0, "size=1m") != 0)
		fail_msg("mount tmpfs: %s", strerror(errno));
	tu_cleanup_umount(mnt);
	for (int i = 0; i < 3; i++) {
		char name[16];
		snprintf(name, sizeof(name), "m%d", i);
		tu_write(mnt, name, "x", 1);
	}
	const hv_walk_sort sorts[2] = {HV_SORT_NONE, HV_SORT_NAME};
	for (int t = 1; t <= 2; t++) {
		for (int so = 0; so < 2; so++) {
			struct dents_count c = {.lock = PTHREAD_MUTEX_INITIALIZER};
			hv__test_hook_set(HV__HOOK_WALK_GETDENTS, count_getdents, &c);
			hv_walk_opts o;
			opts_threads(&o, t, sorts[so]);
			hv_walk *w = NULL;
			assert_int_equal(hv_walk_open(&w, root, &o), HV_OK);
			const hv_entry *e;
			hv_status st;
			size_t n = 0, in_big = 0, in_mnt = 0;
			while ((st = hv_walk_next(w, &e)) == HV_OK) {
				n++;
				in_big += strncmp(e->path, "big/", 4) == 0;
				in_mnt += strncmp(e->path, "mnt/", 4) == 0;
			}
			assert_int_equal(st, HV_DONE);
			hv_walk_close(w);
			hv__test_hook_set(HV__HOOK_WALK_GETDENTS, NULL, NULL);
			assert_int_equal(in_big, 2000);
			assert_int_equal(in_mnt, 3);
			assert_int_equal(n, 4 + 2000 + 5 + 3);
			/* ext4: one call each for the root, small and empty (each fits the
			 * buffer), several for big, but not one past its end: an empty last
			 * call would make it the number of 64 KiB buffers big fills, plus one. */
			assert_int_equal(c.other, 1);
			assert_int_equal(c.small, 1);
			assert_int_equal(c.empty, 1);
			assert_in_range(c.big, 2, 3);
			/* tmpfs: read until getdents64 returns nothing. */
			assert_int_equal(c.mnt, 2);
		}
	}
	free(root);
	free(big);
	free(small);
	free(mnt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sorted_matches_reference),
		cmocka_unit_test(test_sort_none_same_set_preorder),
		cmocka_unit_test(test_symlinks_not_followed),
		cmocka_unit_test(test_follow_enters_and_warns_on_ancestor),
		cmocka_unit_test(test_open_errors_and_symlink_root),
		cmocka_unit_test(test_max_depth),
		cmocka_unit_test(test_excludes_and_no_hidden),
		cmocka_unit_test(test_exclude_glob_matches_leading_dot),
		cmocka_unit_test(test_max_entries),
		cmocka_unit_test(test_max_entries_not_exceeded),
		cmocka_unit_test(test_readlink_target),
		cmocka_unit_test(test_fd_pressure_deep),
		cmocka_unit_test(test_fd_pressure_wide),
		cmocka_unit_test(test_fd_pressure_batches),
		cmocka_unit_test(test_fd_shortage_that_lasts),
		cmocka_unit_test(test_consumer_and_worker_race_for_claimed),
		cmocka_unit_test(test_deep_chain_20000),
		cmocka_unit_test(test_openat),
		cmocka_unit_test(test_swap_dir_for_symlink),
		cmocka_unit_test(test_swap_evicted_ancestor),
		cmocka_unit_test(test_unreadable_dirs_as_nobody),
		cmocka_unit_test(test_two_walks_two_threads),
		cmocka_unit_test(test_close_early),
		cmocka_unit_test(test_leaf_dirs_closed_when_read_ahead),
		cmocka_unit_test(test_pool_grows_when_blocked),
		cmocka_unit_test(test_pool_kept_when_asked),
		cmocka_unit_test_teardown(test_ext4_listing_ends_at_htree_end, tu_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
