/* The differential test of how `harvest run` finds what a command changed: the same random
 * workloads under --changes events, under --changes snapshot, under the default (auto: the
 * events as root, the snapshots as nobody) and against an oracle written
 * here (a listing of the tree before and after the run, with content hashes), which must all
 * give the same produced and deleted sets.
 *
 * The snapshots run twice: as they are (on the file systems whose ctime they trust, files
 * listed by name and inode number before the run) and keeping every entry's lstat state
 * (HARVEST_TEST_SNAPSHOT_LSTAT), on other seeds.
 *
 * A workload is made from a seed: a tree (deep directories, files of a few sizes, hard links,
 * as root a tmpfs mounted below the directory), then operations run by the command (this
 * program again, as `changes_diff_test ops SEED DIR OUT`): creations in new deep directories,
 * same-size rewrites within the same clock tick, times set into the past, renames into, out
 * of and within the tree and over existing files, hard links, writes through mmap,
 * truncations, chmod only, deletions, deletion and re-creation under the same name (of a
 * file, and of a directory with some of its files),
 * directories made during the run and renamed, directories moved in from outside,
 * directories of the tree before the run renamed within it, moved out of it (and removed
 * there, or changed there and moved back), renamed and back, renamed then changed, a
 * subdirectory of a renamed one moved elsewhere, a rename over an empty directory, a
 * background process (setsid) still writing when the command exits, and a second process
 * outside the run writing in the tree meanwhile.
 *
 * What "the same" means: the oracle's listing after the run is taken once harvest has exited,
 * when the run has ended every descendant of the command (the background writer included):
 * what the run reports is the tree as it was then. The outside writer is done before the
 * command ends (the command waits for its mark), so its changes are in the tree both see.
 * A regular file is produced when it was not a regular file before, or its inode, size,
 * mtime, ctime or content changed, and its change is "modified" when it was a regular file
 * before, else "created"; deleted when it was a regular file before and is not after. */
#include "testutil.h"
#include "tjson.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char self_exe[4096];

/* ---- a small deterministic generator ---- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

static unsigned rnd(uint64_t *s, unsigned n)
{
	return (unsigned)(rng_next(s) % n);
}

static void xwrite_file(const char *path, const char *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return;
	if (write(fd, data, len) < 0) {
		/* a workload's write may fail (a full tmpfs): the listing says what happened */
	}
	close(fd);
}

static void mkdirs(const char *path)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			mkdir(buf, 0755);
			*p = '/';
		}
	}
	mkdir(buf, 0755);
}

/* The workload's names: files f0..f(N-1) in a few directories, some in the tmpfs. */
#define N_FILES 24
static const char *const dirs[] = {"", "a", "a/b", "c", "c/d/e", "m"};

static void file_path(char *out, size_t n, const char *root, unsigned i)
{
	const char *d = dirs[i % (sizeof(dirs) / sizeof(dirs[0]))];
	snprintf(out, n, "%s/%s%sf%u", root, d, *d ? "/" : "", i);
}

/* The tree before the run (m is the tmpfs as root, a plain directory otherwise). */
static void make_tree(uint64_t seed, const char *root, bool tmpfs)
{
	uint64_t s = seed * 2654435761u + 1;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		char p[4096];
		snprintf(p, sizeof(p), "%s/%s", root, dirs[i]);
		mkdirs(p);
	}
	if (tmpfs) {
		char m[4096];
		snprintf(m, sizeof(m), "%s/m", root);
		if (mount("tmpfs", m, "tmpfs", 0, "size=4m") != 0)
			fail_msg("mount tmpfs on %s: %s", m, strerror(errno));
	}
	for (unsigned i = 0; i < N_FILES; i++) {
		if (rnd(&s, 5) == 0)
			continue; /* some names are free */
		char p[4096], data[256];
		file_path(p, sizeof(p), root, i);
		int len = snprintf(data, sizeof(data), "file %u seed %llu %u\n", i,
				   (unsigned long long)seed, rnd(&s, 1000));
		xwrite_file(p, data, (size_t)len, 0644);
	}
	/* a hard link pair in the tree */
	char a[4096], b[4096];
	snprintf(a, sizeof(a), "%s/a/h1", root);
	snprintf(b, sizeof(b), "%s/c/h2", root);
	xwrite_file(a, "linked\n", 7, 0644);
	if (link(a, b) != 0)
		fail_msg("link %s: %s", b, strerror(errno));
	/* an empty directory, for a rename over it */
	snprintf(a, sizeof(a), "%s/a/empty", root);
	mkdirs(a);
}

/* A directory of the tree before the run, by number. */
static const char *const old_dirs[] = {"a", "a/b", "c", "c/d", "c/d/e", "a/empty"};

static void old_dir(char *out, size_t n, const char *root, uint64_t *s)
{
	snprintf(out, n, "%s/%s", root, old_dirs[rnd(s, sizeof(old_dirs) / sizeof(old_dirs[0]))]);
}

/* Directories of the tree before the run renamed and moved (what they held before is in no
 * event but their handles'). */
static void dir_op(uint64_t *s, const char *root, const char *out, unsigned k)
{
	char d[4096], e[4096], f[8200];
	old_dir(d, sizeof(d), root, s);
	switch (rnd(s, 9)) {
	case 0: /* renamed within the tree */
		snprintf(e, sizeof(e), "%s/r%u", root, k);
		rename(d, e);
		break;
	case 1: /* moved out of the tree */
		snprintf(e, sizeof(e), "%s/o%u", out, k);
		rename(d, e);
		break;
	case 2: { /* moved out, then removed there */
		snprintf(e, sizeof(e), "%s/rm%u", out, k);
		if (rename(d, e) == 0) {
			char cmd[8300];
			snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e);
			if (system(cmd) != 0) {
				/* the listing says what happened */
			}
		}
		break;
	}
	case 3: /* renamed, then back */
		snprintf(e, sizeof(e), "%s/back%u", root, k);
		if (rename(d, e) == 0)
			rename(e, d);
		break;
	case 4: /* renamed, then its files changed, deleted, added */
		snprintf(e, sizeof(e), "%s/ch%u", root, k);
		if (rename(d, e) == 0) {
			DIR *dd = opendir(e);
			const struct dirent *de;
			unsigned n = 0;
			while (dd && (de = readdir(dd)) != NULL) {
				if (de->d_name[0] != 'f')
					continue;
				snprintf(f, sizeof(f), "%s/%s", e, de->d_name);
				if (n++ % 2)
					unlink(f);
				else
					xwrite_file(f, "changed\n", 8, 0644);
			}
			if (dd)
				closedir(dd);
			snprintf(f, sizeof(f), "%s/added%u", e, k);
			xwrite_file(f, "added\n", 6, 0644);
		}
		break;
	case 5: /* renamed, then a subdirectory of it moved elsewhere */
		snprintf(e, sizeof(e), "%s/p%u", root, k);
		if (rename(d, e) == 0) {
			DIR *dd = opendir(e);
			const struct dirent *de;
			while (dd && (de = readdir(dd)) != NULL) {
				struct stat st;
				snprintf(f, sizeof(f), "%s/%s", e, de->d_name);
				if (de->d_name[0] == '.' || lstat(f, &st) != 0 || !S_ISDIR(st.st_mode))
					continue;
				char g[4096];
				snprintf(g, sizeof(g), "%s/sub%u", root, k);
				rename(f, g);
				break;
			}
			if (dd)
				closedir(dd);
		}
		break;
	case 6: { /* renamed over an existing empty directory */
		snprintf(e, sizeof(e), "%s/a/empty", root);
		rename(d, e);
		break;
	}
	case 7: { /* removed with all it held and made again, half its files written again
		   * under their names (the new directory's events call them new) */
		char names[16][256];
		unsigned n = 0;
		DIR *dd = opendir(d);
		const struct dirent *de;
		while (dd && n < 16 && (de = readdir(dd)) != NULL)
			if (de->d_name[0] == 'f')
				snprintf(names[n++], sizeof(names[0]), "%s", de->d_name);
		if (dd)
			closedir(dd);
		char cmd[8300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
		if (system(cmd) != 0) {
			/* the listing says what happened */
		}
		mkdirs(d);
		for (unsigned i = 0; i < n; i += 2) {
			snprintf(f, sizeof(f), "%s/%s", d, names[i]);
			xwrite_file(f, "again\n", 6, 0644);
		}
		break;
	}
	default: /* moved out, changed there, moved back */
		snprintf(e, sizeof(e), "%s/away%u", out, k);
		if (rename(d, e) == 0) {
			snprintf(f, sizeof(f), "%s/f%u", e, k);
			xwrite_file(f, "away\n", 5, 0644);
			rename(e, d);
		}
		break;
	}
}

/* ---- the operations, run by the command ---- */

static void op(uint64_t *s, const char *root, const char *out, unsigned k)
{
	char p[4096], q[4096], data[256];
	unsigned i = rnd(s, N_FILES), j = rnd(s, N_FILES);
	file_path(p, sizeof(p), root, i);
	file_path(q, sizeof(q), root, j);
	switch (rnd(s, 20)) {
	case 18:
	case 19:
		dir_op(s, root, out, k);
		break;
	case 16: { /* a directory made during the run, filled, then renamed within the tree */
		char d[4096], e[4096], f[8200];
		snprintf(d, sizeof(d), "%s/a/mk%u", root, k);
		snprintf(e, sizeof(e), "%s/c/mv%u", root, k);
		mkdirs(d);
		snprintf(f, sizeof(f), "%s/inner", d);
		xwrite_file(f, "inner\n", 6, 0644);
		rename(d, e);
		break;
	}
	case 17: { /* a directory moved in from outside, with a file in a subdirectory, then a
		    * file made in it and one of the tree's moved into it (made outside, its
		    * events are not followed: it is walked where it ends) */
		char d[4096], f[8200], e[4096];
		snprintf(d, sizeof(d), "%s/dir%u/sub", out, k);
		mkdirs(d);
		snprintf(f, sizeof(f), "%s/x", d);
		xwrite_file(f, "x\n", 2, 0644);
		snprintf(d, sizeof(d), "%s/dir%u", out, k);
		snprintf(e, sizeof(e), "%s/in-dir%u", root, k);
		if (rename(d, e) == 0) {
			snprintf(f, sizeof(f), "%s/sub/after", e);
			xwrite_file(f, "after\n", 6, 0644);
			snprintf(f, sizeof(f), "%s/moved", e);
			rename(p, f);
		}
		break;
	}
	case 0: { /* a creation in new deep directories */
		char d[4096];
		snprintf(d, sizeof(d), "%s/new%u/x/y/z%u", root, k, rnd(s, 3));
		mkdirs(d);
		snprintf(d + strlen(d), sizeof(d) - strlen(d), "/deep%u", k);
		xwrite_file(d, "deep\n", 5, 0644);
		break;
	}
	case 1: { /* the same size, other bytes, in the same tick */
		struct stat st;
		int fd = open(p, O_RDWR | O_CLOEXEC);
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0) {
			char c = 'Z';
			if (pwrite(fd, &c, 1, 0) < 0) {
				/* see xwrite_file */
			}
		}
		if (fd >= 0)
			close(fd);
		break;
	}
	case 2: { /* times set into the past */
		struct timespec ts[2] = {{946684800, 0}, {946684800, 0}};
		utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW);
		break;
	}
	case 3: { /* a rename into the tree */
		char o[4096];
		snprintf(o, sizeof(o), "%s/in%u", out, k);
		xwrite_file(o, "from outside\n", 13, 0644);
		if (rename(o, p) != 0)
			unlink(o);
		break;
	}
	case 4: { /* a rename out of the tree */
		char o[4096];
		snprintf(o, sizeof(o), "%s/out%u", out, k);
		rename(p, o);
		break;
	}
	case 5: /* a rename within (maybe over an existing file) */
		rename(p, q);
		break;
	case 6: /* a hard link */
		link(p, q);
		break;
	case 7: { /* a write through mmap */
		int fd = open(p, O_RDWR | O_CLOEXEC);
		struct stat st;
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0) {
			char *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
				       0);
			if (m != MAP_FAILED) {
				m[0] = (char)('a' + rnd(s, 26));
				munmap(m, (size_t)st.st_size);
			}
		}
		if (fd >= 0)
			close(fd);
		break;
	}
	case 8: /* truncation */
		truncate(p, rnd(s, 3));
		break;
	case 9: /* chmod only */
		chmod(p, 0600 | rnd(s, 2) * 0044);
		break;
	case 10: /* a deletion */
		unlink(p);
		break;
	case 11: { /* deleted and created again under the same name */
		unlink(p);
		int len = snprintf(data, sizeof(data), "again %u\n", k);
		xwrite_file(p, data, (size_t)len, 0644);
		break;
	}
	case 12: { /* a new file */
		int len = snprintf(data, sizeof(data), "new %u\n", k);
		xwrite_file(p, data, (size_t)len, 0644);
		break;
	}
	case 13: { /* a file created and deleted during the run: neither produced nor deleted */
		char t[4096];
		snprintf(t, sizeof(t), "%s/a/tmp%u", root, k);
		xwrite_file(t, "t\n", 2, 0644);
		unlink(t);
		break;
	}
	case 14: { /* opened for writing, nothing written */
		int fd = open(p, O_WRONLY | O_CLOEXEC);
		if (fd >= 0)
			close(fd);
		break;
	}
	default: { /* an append */
		int fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, "+\n", 2) < 0) {
				/* see xwrite_file */
			}
			close(fd);
		}
		break;
	}
	}
}

/* The background writer: out of the command's process group and session, writing until the
 * run ends it. */
static void background_writer(const char *root, uint64_t seed)
{
	pid_t pid = fork();
	if (pid != 0)
		return;
	setsid();
	/* Not holding the run's output pipes: a daemon's way, `server >log 2>&1 &`. */
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	dup2(null, 1);
	dup2(null, 2);
	char p[4096];
	snprintf(p, sizeof(p), "%s/c/bg%llu", root, (unsigned long long)(seed % 3));
	for (unsigned n = 0;; n++) {
		int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			if (write(fd, "bg\n", 3) < 0) {
				/* see xwrite_file */
			}
			close(fd);
		}
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
}

/* The workloads seed..seed+BATCH-1, each in its own tree root/sK: one run does them all. */
#define BATCH 8

static void sub_root(char *out, size_t n, const char *root, unsigned k)
{
	snprintf(out, n, "%s/s%u", root, k);
}

/* HV_DIFF_OPS_JITTER=1: a pause of 0-1 ms after each operation, from a generator of its own
 * (the workload stays the seed's), so that harvest's reads of the events (with
 * HARVEST_TEST_CHANGES_READ_SLOW) end between other operations each run. */
static void ops_jitter(uint64_t *j)
{
	if (!*j)
		return;
	struct timespec ts = {0, (long)(rng_next(j) % 1000000)};
	nanosleep(&ts, NULL);
}

static int ops_main(uint64_t seed, const char *root, const char *out)
{
	const char *jv = getenv("HV_DIFF_OPS_JITTER");
	uint64_t jitter = jv && !strcmp(jv, "1") ? ((uint64_t)getpid() << 20 | 1) : 0;
	char started[4096];
	snprintf(started, sizeof(started), "%s/started", out);
	xwrite_file(started, "", 0, 0644);
	for (unsigned b = 0; b < BATCH; b++) {
		uint64_t s = (seed + b) * 40503u + 7;
		unsigned n = 4 + rnd(&s, 12);
		char r[4096];
		sub_root(r, sizeof(r), root, b);
		if (rnd(&s, 4) == 0)
			background_writer(r, seed + b);
		for (unsigned k = 0; k < n; k++) {
			op(&s, r, out, k);
			ops_jitter(&jitter);
		}
	}
	/* The outside writer is done before the command ends (it waits as long for "started"). */
	char mark[4096];
	snprintf(mark, sizeof(mark), "%s/outside-done", out);
	(void)tu_wait_for_file(mark, 20000);
	return 0;
}

/* A process outside the run, writing in the tree meanwhile. */
static pid_t outside_writer(const char *root, const char *out, uint64_t seed)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid != 0)
		return pid;
	uint64_t s = seed * 7919u + 3;
	char p[4096], r[4096];
	/* From the moment the command runs: both modes track the tree by then. */
	snprintf(p, sizeof(p), "%s/started", out);
	(void)tu_wait_for_file(p, 20000);
	for (unsigned k = 0; k < 6; k++) {
		sub_root(r, sizeof(r), root, rnd(&s, BATCH));
		file_path(p, sizeof(p), r, rnd(&s, N_FILES));
		if (rnd(&s, 2))
			unlink(p);
		else
			xwrite_file(p, "outside\n", 8, 0644);
	}
	char mark[4096];
	snprintf(mark, sizeof(mark), "%s/outside-done", out);
	xwrite_file(mark, "", 0, 0644);
	_exit(0);
}

/* ---- the oracle ---- */

struct ent {
	char *path;
	struct stat st;
	char sha[65];
};

struct listing {
	struct ent *v;
	size_t n, cap;
};

static void list_dir(struct listing *l, const char *root, const char *rel)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s%s%s", root, *rel ? "/" : "", rel);
	DIR *d = opendir(p);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue; /* harvest's default: dot-files are not artifacts */
		char r[4096], full[8200];
		snprintf(r, sizeof(r), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		snprintf(full, sizeof(full), "%s/%s", root, r);
		struct stat st;
		if (lstat(full, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			list_dir(l, root, r);
			continue;
		}
		if (!S_ISREG(st.st_mode))
			continue;
		if (l->n == l->cap) {
			l->cap = l->cap ? l->cap * 2 : 64;
			l->v = realloc(l->v, l->cap * sizeof(*l->v));
			assert_non_null(l->v);
		}
		struct ent *e = &l->v[l->n++];
		e->path = strdup(r);
		e->st = st;
		size_t len;
		char *data = tu_read_file(full, &len);
		tu_sha256_hex(data ? data : "", data ? len : 0, e->sha);
		free(data);
	}
	closedir(d);
}

static const struct ent *find(const struct listing *l, const char *path)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->v[i].path, path))
			return &l->v[i];
	return NULL;
}

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].path);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/* A sorted, newline-joined set of paths, for comparing and printing. */
struct set {
	char **v;
	size_t n;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void set_add(struct set *s, const char *p)
{
	s->v = realloc(s->v, (s->n + 1) * sizeof(*s->v));
	assert_non_null(s->v);
	s->v[s->n++] = strdup(p);
}

static char *set_text(struct set *s)
{
	if (s->n > 1)
		qsort(s->v, s->n, sizeof(*s->v), cmp_str);
	size_t len = 1;
	for (size_t i = 0; i < s->n; i++)
		len += strlen(s->v[i]) + 1;
	char *t = calloc(1, len);
	assert_non_null(t);
	for (size_t i = 0; i < s->n; i++) {
		strcat(t, s->v[i]);
		strcat(t, "\n");
	}
	return t;
}

static void set_free(struct set *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

static bool changed(const struct ent *b, const struct ent *a)
{
	return b->st.st_ino != a->st.st_ino || b->st.st_dev != a->st.st_dev ||
	       b->st.st_size != a->st.st_size || b->st.st_mtim.tv_sec != a->st.st_mtim.tv_sec ||
	       b->st.st_mtim.tv_nsec != a->st.st_mtim.tv_nsec ||
	       b->st.st_ctim.tv_sec != a->st.st_ctim.tv_sec ||
	       b->st.st_ctim.tv_nsec != a->st.st_ctim.tv_nsec || strcmp(b->sha, a->sha) != 0;
}

/* ---- one workload ---- */

struct outcome {
	char *produced, *deleted; /* harvest's */
	char *o_produced, *o_deleted; /* the oracle's */
	/* Produced files whose change is not the oracle's ("path: change"), under the
	 * snapshots. The events can label a rename over a file with another hard link
	 * "created" (README: the kernel merges the replaced file's link count into the link's),
	 * so their labels are checked by run_cli_test's fixed cases instead. */
	char *mislabeled;
	char *err;
	char *out; /* harvest's stdout, for the failure message */
	int status;
};

static void outcome_free(struct outcome *o)
{
	free(o->produced);
	free(o->deleted);
	free(o->o_produced);
	free(o->o_deleted);
	free(o->mislabeled);
	free(o->err);
	free(o->out);
}

struct nobody_run {
	const char *const *args;
	tu_result *r;
};

static void run_workload(uint64_t seed, const char *mode, bool as_nobody, struct outcome *o)
{
	memset(o, 0, sizeof(*o));
	char *base = tu_mkdtemp();
	char *root = tu_path(base, "w");
	char *out = tu_path(base, "out");
	char *db = tu_path(base, "h.db");
	mkdirs(root);
	mkdirs(out);
	bool tmpfs = !as_nobody && geteuid() == 0;
	for (unsigned b = 0; b < BATCH; b++) {
		char r[4096];
		sub_root(r, sizeof(r), root, b);
		mkdirs(r);
		make_tree(seed + b, r, tmpfs && b == 0);
	}
	if (as_nobody) {
		char cmd[8192];
		snprintf(cmd, sizeof(cmd), "chown -R nobody %s", base);
		assert_int_equal(system(cmd), 0);
	}
	struct listing before = {0}, after = {0};
	list_dir(&before, root, "");
	/* The events count a file only opened for writing as produced when its ctime is not older
	 * than the run's start on the coarse clock (README): a file of the tree made in the run's
	 * first tick would be, though nothing about it changes, and the oracle cannot tell. So the
	 * run starts a tick after the tree's last change (a fast machine made the last tree and
	 * started the run within one tick: "produced, not by the oracle" for such a file). */
	struct timespec newest = {0, 0};
	for (size_t i = 0; i < before.n; i++) {
		const struct timespec *c = &before.v[i].st.st_ctim;
		if (c->tv_sec > newest.tv_sec ||
		    (c->tv_sec == newest.tv_sec && c->tv_nsec > newest.tv_nsec))
			newest = *c;
	}
	for (int i = 0; i < 1000; i++) {
		struct timespec now, ms = {0, 1000000};
		clock_gettime(CLOCK_REALTIME_COARSE, &now);
		if (now.tv_sec > newest.tv_sec ||
		    (now.tv_sec == newest.tv_sec && now.tv_nsec > newest.tv_nsec))
			break;
		nanosleep(&ms, NULL);
	}
	char seed_s[32];
	snprintf(seed_s, sizeof(seed_s), "%llu", (unsigned long long)seed);
	const char *args[] = {"run",      "--db",  db,       "--no-history", "--format", "json",
			      "--dir",    root,    "--no-content",
			      "--changes", mode,   "--",     self_exe, "ops",        seed_s,
			      root,       out,     NULL};
	if (!strcmp(mode, "auto")) {
		/* no --changes: the default */
		args[9] = "--changes";
		args[10] = "auto";
	}
	tu_result r;
	pid_t writer = outside_writer(root, out, seed);
	if (as_nobody)
		tu_harvest_as_nobody(&r, NULL, args);
	else
		tu_harvestv(&r, NULL, NULL, args);
	tu_wait(writer);
	list_dir(&after, root, "");
	o->status = r.status;
	o->err = strdup(r.err ? r.err : "");
	o->out = strndup(r.out ? r.out : "", 4000);
	struct set p = {0}, d = {0}, op_ = {0}, od = {0}, ml = {0};
	tj_value *doc = tj_parse(r.out, r.out_len);
	if (doc) {
		const tj_value *files = tj_get(doc, "output_files");
		for (size_t i = 0; i < tj_len(files); i++) {
			const char *path = tj_str(tj_get(tj_at(files, i), "path"), NULL);
			const char *change = tj_str(tj_get(tj_at(files, i), "change"), NULL);
			set_add(&p, path);
			/* "modified" exactly when a regular file was at its path before */
			const char *want = path && find(&before, path) ? "modified" : "created";
			bool snapshots = !strcmp(mode, "snapshot") || as_nobody;
			if (snapshots && path && change && strcmp(change, want) != 0) {
				char line[4200];
				snprintf(line, sizeof(line), "%s: %s", path, change);
				set_add(&ml, line);
			}
		}
		const tj_value *skipped = tj_get(doc, "skipped");
		for (size_t i = 0; i < tj_len(skipped); i++)
			set_add(&p, tj_str(tj_get(tj_at(skipped, i), "path"), NULL));
		const tj_value *del = tj_get(doc, "deleted");
		for (size_t i = 0; i < tj_len(del); i++)
			set_add(&d, tj_str(tj_at(del, i), NULL));
	}
	tj_free(doc);
	for (size_t i = 0; i < after.n; i++) {
		const struct ent *b = find(&before, after.v[i].path);
		if (!b || changed(b, &after.v[i]))
			set_add(&op_, after.v[i].path);
	}
	for (size_t i = 0; i < before.n; i++)
		if (!find(&after, before.v[i].path))
			set_add(&od, before.v[i].path);
	o->produced = set_text(&p);
	o->deleted = set_text(&d);
	o->o_produced = set_text(&op_);
	o->o_deleted = set_text(&od);
	o->mislabeled = set_text(&ml);
	set_free(&ml);
	set_free(&p);
	set_free(&d);
	set_free(&op_);
	set_free(&od);
	listing_free(&before);
	listing_free(&after);
	tu_result_free(&r);
	if (tmpfs) {
		char m[4096];
		snprintf(m, sizeof(m), "%s/s0/m", root);
		umount2(m, MNT_DETACH);
	}
	tu_rmrf(base);
	free(root);
	free(out);
	free(db);
	free(base);
}

/* Prints the lines of a (newline-joined, sorted) that are not in b. */
static void print_missing(const char *what, const char *a, const char *b)
{
	const char *p = a;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		bool found = false;
		for (const char *q = b; *q && !found;) {
			const char *ql = strchr(q, '\n');
			size_t m = ql ? (size_t)(ql - q) : strlen(q);
			found = m == n && memcmp(p, q, n) == 0;
			q += m + (ql != NULL);
		}
		if (!found)
			print_message("  %s: %.*s\n", what, (int)n, p);
		p += n + (nl != NULL);
	}
}

/* The refusal of --changes events when the events cannot tell (exit 125, nothing reported). */
#define REFUSAL "the change events cannot tell what the run changed"

/* Runs the workloads seed.. under mode and fails unless harvest's sets are the oracle's, or,
 * when may_refuse, harvest refused as it must when the events cannot tell (exit 125, one
 * line saying so, no file reported): never a wrong answer. Whether it answered. */
static bool check_or_refused(uint64_t seed, const char *mode, bool as_nobody,
			     const char *want_note, bool may_refuse)
{
	struct outcome o;
	run_workload(seed, mode, as_nobody, &o);
	const char *nl = strchr(o.err, '\n');
	if (may_refuse && o.status == 125 && strstr(o.err, REFUSAL) && !o.produced[0] &&
	    !o.deleted[0] && nl && !nl[1]) {
		print_message("seeds %llu..%llu, --changes %s: refused (%.300s)\n",
			      (unsigned long long)seed, (unsigned long long)seed + BATCH - 1, mode,
			      o.err);
		outcome_free(&o);
		return false;
	}
	if (o.status != 0 || strcmp(o.produced, o.o_produced) != 0 ||
	    strcmp(o.deleted, o.o_deleted) != 0 || o.mislabeled[0] ||
	    (want_note && !strstr(o.err, want_note)) ||
	    (!want_note && o.err[0])) {
		print_message("seeds %llu..%llu (HV_DIFF_SEEDS=%llu:%d), --changes %s%s: exit %d\n",
			      (unsigned long long)seed, (unsigned long long)seed + BATCH - 1,
			      (unsigned long long)seed, BATCH, mode, as_nobody ? " as nobody" : "",
			      o.status);
		print_message("stderr: %.2000s\n", o.err);
		print_missing("produced, not by the oracle", o.produced, o.o_produced);
		print_missing("produced by the oracle, not reported", o.o_produced, o.produced);
		print_missing("deleted, not by the oracle", o.deleted, o.o_deleted);
		print_missing("deleted by the oracle, not reported", o.o_deleted, o.deleted);
		print_missing("change not the oracle's", o.mislabeled, "");
		print_message("stdout: %.3000s\n", o.out);
		outcome_free(&o);
		fail();
	}
	outcome_free(&o);
	return true;
}

static void check(uint64_t seed, const char *mode, bool as_nobody, const char *want_note)
{
	(void)check_or_refused(seed, mode, as_nobody, want_note, false);
}

#define N_SEEDS 200        /* workloads as root, under each mode */
#define N_SEEDS_NOBODY 32  /* as nobody */
#define N_SEEDS_AUTO 96    /* the default as root: the events path, on other seeds */
#define N_SEEDS_LATE 48    /* events read late, and read slowly */
#define N_SEEDS_LSTAT 48   /* snapshots keeping every lstat state */

/* The seeds: 1..n, or HV_DIFF_SEEDS=FIRST:COUNT to run others (a failure prints its seed). */
static void seeds(uint64_t dflt_first, uint64_t dflt_n, uint64_t *first, uint64_t *n)
{
	*first = dflt_first;
	*n = dflt_n;
	const char *e = getenv("HV_DIFF_SEEDS");
	unsigned long long a, b;
	if (e && sscanf(e, "%llu:%llu", &a, &b) == 2) {
		*first = a;
		*n = b;
	}
}

static void test_events_against_oracle(void **state)
{
	(void)state;
	uint64_t first, n;
	seeds(1, N_SEEDS, &first, &n);
	for (uint64_t seed = first; seed < first + n; seed += BATCH)
		check(seed, "events", false, NULL);
}

/* The default, as root: the events, with nothing walked before the run. */
static void test_auto_against_oracle(void **state)
{
	(void)state;
	uint64_t first, n;
	seeds(2001, N_SEEDS_AUTO, &first, &n);
	for (uint64_t seed = first; seed < first + n; seed += BATCH)
		check(seed, "auto", false, NULL);
}

/* The events as a reader that falls behind sees them (under valgrind, on a loaded machine):
 * read only once the command has ended, every event the kernel could merge into one still
 * queued (a write and the removal of the same name, a file's link counts) merged. A
 * directory resolved that late may no longer tell where it was (moved, then removed): harvest
 * may then refuse, as it must, but never answer wrong; at least half the runs answer. */
static void test_events_read_late_against_oracle(void **state)
{
	(void)state;
	uint64_t first, n;
	seeds(3001, N_SEEDS_LATE, &first, &n);
	setenv("HARVEST_TEST_CHANGES_READ_LATE", "1", 1);
	unsigned answered = 0, runs = 0;
	for (uint64_t seed = first; seed < first + n; seed += BATCH, runs++)
		answered += check_or_refused(seed, "events", false, NULL, true);
	unsetenv("HARVEST_TEST_CHANGES_READ_LATE");
	print_message("read late: %u of %u runs answered, the others refused\n", answered, runs);
	assert_true(answered * 2 >= runs);
}

/* And read at other moments each run: harvest pauses 0-4 ms before each read, the workload
 * 0-1 ms after each operation, so a directory is placed while a tree is being moved or
 * removed around it, and some events are merged and others not. */
static void test_events_read_slow_against_oracle(void **state)
{
	(void)state;
	uint64_t first, n;
	seeds(4001, N_SEEDS_LATE, &first, &n);
	setenv("HARVEST_TEST_CHANGES_READ_SLOW", "1", 1);
	setenv("HV_DIFF_OPS_JITTER", "1", 1);
	unsigned answered = 0, runs = 0;
	for (uint64_t seed = first; seed < first + n; seed += BATCH, runs++)
		answered += check_or_refused(seed, "events", false, NULL, true);
	print_message("read slowly: %u of %u runs answered, the others refused\n", answered, runs);
	assert_true(answered * 2 >= runs);
	unsetenv("HARVEST_TEST_CHANGES_READ_SLOW");
	unsetenv("HV_DIFF_OPS_JITTER");
}

static void test_snapshot_against_oracle(void **state)
{
	(void)state;
	uint64_t first, n;
	seeds(1, N_SEEDS, &first, &n);
	for (uint64_t seed = first; seed < first + n; seed += BATCH)
		check(seed, "snapshot", false, NULL);
}

/* The snapshot on a file system whose ctime it does not trust (a test switch makes every one
 * so): each entry's lstat state before the run, and the racy rule, on other seeds. */
static void test_snapshot_lstat_against_oracle(void **state)
{
	(void)state;
	uint64_t first, n;
	seeds(5001, N_SEEDS_LSTAT, &first, &n);
	setenv("HARVEST_TEST_SNAPSHOT_LSTAT", "1", 1);
	for (uint64_t seed = first; seed < first + n; seed += BATCH)
		check(seed, "snapshot", false, NULL);
	unsetenv("HARVEST_TEST_SNAPSHOT_LSTAT");
}

/* As nobody, fanotify is refused: auto says so and compares snapshots, with the same result;
 * --changes events is refused outright. */
static void test_nobody_auto_falls_back(void **state)
{
	(void)state;
	uint64_t first, n;
	seeds(1000, N_SEEDS_NOBODY, &first, &n);
	for (uint64_t seed = first; seed < first + n; seed += BATCH)
		check(seed, "auto", true, "change events not used, comparing snapshots");
}

static void test_nobody_events_refused(void **state)
{
	(void)state;
	struct outcome o;
	run_workload(7, "events", true, &o);
	assert_int_equal(o.status, 125);
	assert_non_null(strstr(o.err, "--changes events: fanotify: Operation not permitted"));
	assert_non_null(strchr(o.err, '\n'));
	assert_null(strchr(strchr(o.err, '\n') + 1, '\n')); /* one line */
	outcome_free(&o);
}

/* A --changes value that is none of the three: a usage error, 125 as for every run usage
 * error, before anything runs. */
static void test_changes_bad_value(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *mark = tu_path(base, "ran");
	const char *args[] = {"run", "--no-history", "--dir", base, "--changes", "inotify", "--",
			      "touch", mark, NULL};
	tu_result r;
	tu_harvestv(&r, NULL, NULL, args);
	assert_int_equal(r.status, 125);
	assert_non_null(strstr(r.err, "--changes: expected events, snapshot or auto, not 'inotify'"));
	assert_int_not_equal(access(mark, F_OK), 0);
	tu_result_free(&r);
	tu_rmrf(base);
	free(mark);
	free(base);
}

/* A file system mounted below DIR during the run was never marked: events refuse to answer;
 * and with --xdev, auto compares snapshots and says so. */
static void test_events_mount_during_run_refused(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *m = tu_path(base, "mnt");
	char *db = tu_path(base, "h.db");
	mkdirs(m);
	char script[8192];
	snprintf(script, sizeof(script), "mount -t tmpfs tmpfs %s && echo x > %s/f", m, m);
	const char *args[] = {"run", "--db", db, "--no-history", "--format", "json", "--dir", base,
			      "--changes", "events", "--shell", script, NULL};
	tu_result r;
	tu_harvestv(&r, NULL, NULL, args);
	umount2(m, MNT_DETACH);
	assert_int_equal(r.status, 125);
	assert_non_null(strstr(r.err, "a file system was mounted or unmounted below it"));
	tu_result_free(&r);

	const char *xdev[] = {"run", "--db", db, "--no-history", "--format", "json", "--dir", base,
			      "--xdev", "--", "touch", "new", NULL};
	tu_harvestv(&r, NULL, NULL, xdev);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.err, "harvest: change events not used, comparing snapshots: "));
	assert_non_null(strstr(r.err, "not used with --xdev"));
	tj_value *doc = tj_parse(r.out, r.out_len);
	assert_non_null(doc);
	assert_int_equal(tj_len(tj_get(doc, "output_files")), 1);
	tj_free(doc);
	tu_result_free(&r);
	tu_rmrf(base);
	free(m);
	free(db);
	free(base);
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "ops"))
		return ops_main(strtoull(argv[2], NULL, 10), argv[3], argv[4]);
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		return 1;
	self_exe[n] = '\0';
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_events_against_oracle),
		cmocka_unit_test(test_events_read_late_against_oracle),
		cmocka_unit_test(test_events_read_slow_against_oracle),
		cmocka_unit_test(test_snapshot_against_oracle),
		cmocka_unit_test(test_snapshot_lstat_against_oracle),
		cmocka_unit_test(test_auto_against_oracle),
		cmocka_unit_test(test_nobody_auto_falls_back),
		cmocka_unit_test(test_nobody_events_refused),
		cmocka_unit_test(test_changes_bad_value),
		cmocka_unit_test(test_events_mount_during_run_refused),
	};
	return cmocka_run_group_tests(tests, NULL, tu_cleanup);
}
