/* Fuzz target: the snapshot diff, "what produced means" (SPEC 2), through the public API.
 *
 * Each input builds a tiny tree on tmpfs (the "before" state), takes a snapshot with
 * hv_snapshot_take(), changes the tree (the "after" state), collects with since_snapshot and
 * compares the collection with a reference of the rule computed here from our own lstat walks
 * and SHA-256s (OpenSSL), not from collect.c:
 *   - a regular file is produced when its path is new, or its type, inode, size, mtime_ns or
 *     ctime_ns changed, or when it was racy at the snapshot (mtime or ctime no more than 2 s
 *     before the snapshot's time, or after it) and its content hash changed;
 *   - a produced regular file is an OutputFile with its size, SHA-256 and exact content (or
 *     skipped as too_large when bigger than max_file_bytes);
 *   - a symlink created or changed is skipped as "symlink", a FIFO or socket as "not_regular";
 *     directories are neither; nothing else is listed, nothing is "error";
 *   - the database's own files are never artifacts, also when the database lives in the tree;
 *   - excluded names (hidden ones unless include_hidden, globs) are neither artifacts nor
 *     skipped.
 * The snapshot itself is checked too: its entries are exactly our "before" walk, in walk order
 * (hv_store_path_cmp: '/' below every other byte), with the same lstat fields, and a SHA-256
 * exactly for racy regular files within max_file_bytes. Two files made when the fuzzer starts
 * (and more than 2 s old by the first snapshot) stand for the non-racy case.
 *
 * Input (at most 1 + 2 * 12 bytes are used):
 *   byte 0: bit 0 include_hidden; bit 1 the database lives inside the tree (root/s/h.db), else
 *           outside it and "s" is an --exclude glob; bit 2 max_file_bytes = 8 (else the
 *           default); bits 3..5 the number of "before" operations (at most 6); the other
 *           operations (at most 6) are "after" ones.
 *   then two bytes per operation: (kind << 4 | slot), arg, kind an enum op_kind. Slots name
 *   16 paths chosen for their walk order ("a/x" < "a b" < "a!" < "a-b" < "a.b"), invalid UTF-8 and control
 *   characters, hidden names and nesting. Operations that do not apply (a parent is a file)
 *   simply fail: the reference is computed from what is on disk, not from the operations. */
#include "harvest/collect.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "fuzz_produced: check failed: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                                      \
			fprintf(stderr, "  " __VA_ARGS__);                                \
			fprintf(stderr, "\n");                                            \
			dump_state();                                                     \
			abort();                                                          \
		}                                                                         \
	} while (0)

#define MAX_FILE_SMALL 8
#define RACY_NS INT64_C(2000000000)

static const char *const slots[16] = {
	"a",   "b",     "a-b",  "a.b",   "\xff", "\xc3\xa9", ".h",  "a b",
	"a/x", "a/\xff", "a/-", "a/x/z", "a!/q", "b/a",      "a/.h", "\x01\n",
};

enum op_kind {
	K_CREATE,          /* a file with arg & 15 bytes */
	K_SAME_SIZE,       /* rewrite in place, same size, new bytes (maybe the same ones) */
	K_SAME_SIZE_MTIME, /* the same, then put atime and mtime back: the racy-git case */
	K_APPEND,
	K_RENAME,          /* to slot arg & 15 */
	K_DELETE,
	K_SYMLINK,         /* replace with a symlink */
	K_MKDIR,           /* replace with a directory */
	K_FIFO,            /* replace with a FIFO */
	K_TOUCH,           /* mtime to arg * 1000 s ago (0: now; F8..FF: far past and future) */
	K_CHMOD,
	K_LINK,            /* hard link to slot arg & 15 */
	K_TRUNCATE,        /* to arg & 15 bytes */
	K_REWRITE,         /* O_TRUNC and new content of arg & 15 bytes */
	K_SOCKET,          /* replace with a socket */
	K_MMAP,            /* change bytes through a shared mapping: on tmpfs, no time changes */
};

static char base[128];   /* the fuzzer's temp directory */
static char root[192];   /* the collected tree: base/root */
static hv_store *st_in;  /* root/s/h.db */
static hv_store *st_out; /* base/ext/h.db */

/* ---- our own view of the tree ------------------------------------------------------------ */

struct ent {
	char *path;
	size_t path_len;
	struct stat sb;
	char sha[65];            /* regular files */
	unsigned char *content;  /* regular files */
	size_t content_len;
};

struct tree {
	struct ent *e;
	size_t n, cap;
};

static struct tree before, after;
static const uint8_t *cur_data;
static size_t cur_size;

static void dump_tree(const char *what, const struct tree *t)
{
	fprintf(stderr, "  %s:\n", what);
	for (size_t i = 0; i < t->n; i++) {
		const struct ent *e = &t->e[i];
		fprintf(stderr, "    '");
		for (size_t k = 0; k < e->path_len; k++) {
			unsigned char c = (unsigned char)e->path[k];
			fprintf(stderr, c >= 0x20 && c < 0x7f ? "%c" : "\\x%02x", c);
		}
		fprintf(stderr, "' mode %o ino %llu size %lld mtime %lld.%09ld ctime %lld.%09ld %s\n",
			(unsigned)e->sb.st_mode, (unsigned long long)e->sb.st_ino,
			(long long)e->sb.st_size, (long long)e->sb.st_mtim.tv_sec,
			e->sb.st_mtim.tv_nsec, (long long)e->sb.st_ctim.tv_sec, e->sb.st_ctim.tv_nsec,
			e->sha[0] ? e->sha : "");
	}
}

static void dump_state(void)
{
	fprintf(stderr, "  input:");
	for (size_t i = 0; i < cur_size; i++)
		fprintf(stderr, " %02x", cur_data[i]);
	fprintf(stderr, "\n");
	dump_tree("before", &before);
	dump_tree("after", &after);
}

static void tree_clear(struct tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->e[i].path);
		free(t->e[i].content);
	}
	t->n = 0;
}

static void sha_hex(const void *data, size_t len, char hex[65])
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	CHECK(EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) == 1 && mdlen == 32,
	      "EVP_Digest");
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static unsigned char *read_file(const char *abs, size_t *len)
{
	int fd = open(abs, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	CHECK(fd >= 0, "open %s: %s", abs, strerror(errno));
	size_t cap = 64, n = 0;
	unsigned char *buf = malloc(cap);
	CHECK(buf, "out of memory");
	for (;;) {
		if (n == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			CHECK(buf, "out of memory");
		}
		ssize_t got = read(fd, buf + n, cap - n);
		CHECK(got >= 0, "read %s: %s", abs, strerror(errno));
		if (got == 0)
			break;
		n += (size_t)got;
	}
	close(fd);
	*len = n;
	return buf;
}

/* In the database's own area (root/s): never read, never compared. */
static bool in_db_area(const char *path)
{
	return !strcmp(path, "s") || !strncmp(path, "s/", 2);
}

struct walk_opts {
	bool include_hidden;
	bool exclude_s; /* the --exclude glob "s" */
};

/* A plain recursive walk with lstat: the tree is at most a few levels deep. */
static void walk_dir(struct tree *t, const char *abs, const char *rel, const struct walk_opts *o)
{
	DIR *d = opendir(abs);
	CHECK(d, "opendir %s: %s", abs, strerror(errno));
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *name = de->d_name;
		if (!strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		if ((!o->include_hidden && name[0] == '.') || !strcmp(name, "__pycache__"))
			continue;
		if (o->exclude_s && !strcmp(name, "s"))
			continue;
		char cabs[1024], crel[1024];
		snprintf(cabs, sizeof(cabs), "%s/%s", abs, name);
		snprintf(crel, sizeof(crel), "%s%s%s", rel, *rel ? "/" : "", name);
		if (t->n == t->cap) {
			t->cap = t->cap ? t->cap * 2 : 32;
			t->e = realloc(t->e, t->cap * sizeof(*t->e));
			CHECK(t->e, "out of memory");
		}
		struct ent *e = &t->e[t->n++];
		memset(e, 0, sizeof(*e));
		e->path = strdup(crel);
		e->path_len = strlen(crel);
		CHECK(lstat(cabs, &e->sb) == 0, "lstat %s: %s", cabs, strerror(errno));
		if (S_ISREG(e->sb.st_mode) && !in_db_area(crel)) {
			e->content = read_file(cabs, &e->content_len);
			sha_hex(e->content, e->content_len, e->sha);
		}
		if (S_ISDIR(e->sb.st_mode))
			walk_dir(t, cabs, crel, o);
	}
	closedir(d);
}

static const struct ent *tree_find(const struct tree *t, const char *path, size_t len)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->e[i].path_len == len && !memcmp(t->e[i].path, path, len))
			return &t->e[i];
	return NULL;
}

/* Walk order: component by component, bytewise, '/' below every other byte. */
static int walk_order(const char *a, size_t al, const char *b, size_t bl)
{
	for (size_t i = 0;; i++) {
		int ca = i < al ? (a[i] == '/' ? 0 : (unsigned char)a[i] + 1) : -1;
		int cb = i < bl ? (b[i] == '/' ? 0 : (unsigned char)b[i] + 1) : -1;
		if (ca != cb)
			return ca < cb ? -1 : 1;
		if (ca < 0)
			return 0;
	}
}

/* Nanoseconds since the epoch, without overflow (a file's time may be beyond int64 ns). */
static __int128 ns_of(const struct timespec *ts)
{
	return (__int128)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* Whether ns is what the library should report for a time of t: equal when t fits int64 ns.
 * For times beyond, SPEC says nothing: anything is accepted here (but the computation must
 * not overflow, which UBSan checks). */
static bool ns_matches(int64_t ns, const struct timespec *t)
{
	__int128 want = ns_of(t);
	return want < INT64_MIN || want > INT64_MAX || ns == (int64_t)want;
}

/* ---- building and changing the tree ------------------------------------------------------ */

static void slot_path(char *out, size_t cap, unsigned slot)
{
	snprintf(out, cap, "%s/%s", root, slots[slot & 15]);
}

static void rm_rf(const char *abs)
{
	struct stat sb;
	if (lstat(abs, &sb) != 0)
		return;
	if (S_ISDIR(sb.st_mode)) {
		DIR *d = opendir(abs);
		if (d) {
			struct dirent *de;
			while ((de = readdir(d))) {
				if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
					continue;
				char c[1024];
				snprintf(c, sizeof(c), "%s/%s", abs, de->d_name);
				rm_rf(c);
			}
			closedir(d);
		}
		rmdir(abs);
	} else {
		unlink(abs);
	}
}

/* mkdir -p of the parents of abs (below root); failures are left to the operation. */
static void make_parents(const char *abs)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s", abs);
	for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		mkdir(p, 0755);
		*s = '/';
	}
}

static void fill(unsigned char *buf, size_t n, unsigned arg)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)("harvest!"[(i + arg) % 8] ^ (arg >> 4));
}

static void write_new(const char *abs, size_t n, unsigned arg, int extra_flags)
{
	make_parents(abs);
	/* O_NONBLOCK: a FIFO at that path must not block the open. */
	int fd = open(abs, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | extra_flags,
		      0644);
	if (fd < 0)
		return;
	unsigned char buf[16];
	fill(buf, n, arg);
	if (write(fd, buf, n) < 0) {
		/* nothing to do: the reference reads what is there */
	}
	close(fd);
}

static bool is_regular(const char *abs, struct stat *sb)
{
	return lstat(abs, sb) == 0 && S_ISREG(sb->st_mode);
}

static void apply(unsigned kind, unsigned slot, unsigned arg)
{
	char p[1024], q[1024];
	slot_path(p, sizeof(p), slot);
	slot_path(q, sizeof(q), arg & 15);
	struct stat sb;
	switch ((enum op_kind)kind) {
	case K_CREATE:
		write_new(p, arg & 15, arg, O_TRUNC);
		break;
	case K_MMAP: {
		/* tmpfs updates no time for a store into a page already mapped: the content
		 * changes, the metadata does not, and only the racy rule's digest can tell. */
		if (!is_regular(p, &sb) || sb.st_size == 0)
			break;
		int fd = open(p, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			break;
		unsigned char *m = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
					fd, 0);
		if (m != MAP_FAILED) {
			volatile unsigned char first = m[0]; /* fault the page in for reading first */
			(void)first;
			for (off_t i = 0; i < sb.st_size; i++)
				m[i] ^= (unsigned char)(arg | 1);
			munmap(m, (size_t)sb.st_size);
		}
		close(fd);
		break;
	}
	case K_SAME_SIZE:
	case K_SAME_SIZE_MTIME: {
		if (!is_regular(p, &sb) || sb.st_size > 64)
			break;
		int fd = open(p, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			break;
		unsigned char buf[64];
		fill(buf, (size_t)sb.st_size, arg);
		if (pwrite(fd, buf, (size_t)sb.st_size, 0) < 0) {
			/* the reference reads what is there */
		}
		if (kind == K_SAME_SIZE_MTIME) {
			struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
			futimens(fd, ts);
		}
		close(fd);
		break;
	}
	case K_APPEND:
		if (is_regular(p, &sb))
			write_new(p, (arg & 7) + 1, arg, O_APPEND);
		break;
	case K_RENAME:
		make_parents(q);
		rename(p, q);
		break;
	case K_DELETE:
		rm_rf(p);
		break;
	case K_SYMLINK: {
		rm_rf(p);
		make_parents(p);
		char target[16];
		snprintf(target, sizeof(target), "t%u", arg);
		if (symlink(target, p) != 0) {
			/* a parent is not a directory */
		}
		break;
	}
	case K_MKDIR:
		rm_rf(p);
		make_parents(p);
		mkdir(p, 0755);
		break;
	case K_FIFO:
		rm_rf(p);
		make_parents(p);
		mkfifo(p, 0644);
		break;
	case K_TOUCH: {
		/* Code in a sandbox may set any time: some that int64 nanoseconds cannot hold. */
		static const struct timespec far[] = {
			{INT64_C(10413792000), 0},      /* 2300-01-01 */
			{INT64_C(-11676096000), 0},     /* 1600-01-01 */
			{INT64_C(9223372036), 854775807}, /* the last int64 ns */
			{INT64_C(9223372036), 854775808}, /* one past it */
			{INT64_C(-9223372037), 145224192}, /* the first int64 ns */
			{INT64_C(-9223372037), 145224191}, /* one before it */
			{INT64_MAX / 4, 0},
			{-1, 999999999},
		};
		struct timespec ts[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
		if (arg >= 0xF8) {
			ts[1] = far[arg - 0xF8];
		} else if (arg) {
			struct timespec now;
			clock_gettime(CLOCK_REALTIME, &now);
			ts[1].tv_sec = now.tv_sec - (time_t)arg * 1000;
			ts[1].tv_nsec = now.tv_nsec;
		}
		utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW);
		break;
	}
	case K_CHMOD:
		if (lstat(p, &sb) == 0 && !S_ISLNK(sb.st_mode))
			chmod(p, (sb.st_mode & 07777) ^ (0100 | (arg & 077)));
		break;
	case K_LINK:
		if (is_regular(p, &sb)) {
			make_parents(q);
			link(p, q);
		}
		break;
	case K_TRUNCATE:
		if (is_regular(p, &sb))
			truncate(p, arg & 15);
		break;
	case K_REWRITE:
		if (is_regular(p, &sb))
			write_new(p, arg & 15, arg, O_TRUNC);
		break;
	case K_SOCKET: {
		rm_rf(p);
		make_parents(p);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			break;
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (strlen(p) < sizeof(sa.sun_path)) {
			memcpy(sa.sun_path, p, strlen(p) + 1);
			if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
				/* a parent is not a directory */
			}
		}
		close(fd);
		break;
	}
	}
}

/* Empties root but for the old files (o) and the database area (s). */
static void reset_tree(void)
{
	DIR *d = opendir(root);
	CHECK(d, "opendir %s", root);
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "o") || !strcmp(n, "s"))
			continue;
		char p[1024];
		snprintf(p, sizeof(p), "%s/%s", root, n);
		rm_rf(p);
	}
	closedir(d);
}

/* ---- the reference and the comparison ----------------------------------------------------- */

struct expect {
	const char *path;
	size_t path_len;
	const char *reason;       /* NULL: an OutputFile */
	const struct ent *e;      /* the after state */
};

static int cmp_expect(const void *a, const void *b)
{
	const struct expect *x = a, *y = b;
	size_t n = x->path_len < y->path_len ? x->path_len : y->path_len;
	int c = memcmp(x->path, y->path, n);
	return c ? c : (x->path_len > y->path_len) - (x->path_len < y->path_len);
}

static unsigned long stat_execs, stat_new, stat_meta, stat_racy_content, stat_racy_same,
	stat_old_unchanged, stat_skipped, stat_too_large, stat_db_inside;

static void report(void)
{
	fprintf(stderr,
		"fuzz_produced: %lu inputs; produced: %lu new, %lu by metadata, %lu by content "
		"alone (racy, same metadata); not produced: %lu racy with the same content, %lu "
		"old and unchanged; %lu skipped (%lu too_large); %lu with the database in the tree\n",
		stat_execs, stat_new, stat_meta, stat_racy_content, stat_racy_same,
		stat_old_unchanged, stat_skipped, stat_too_large, stat_db_inside);
	hv_store_close(st_in);
	hv_store_close(st_out);
	st_in = st_out = NULL;
	rm_rf(base);
}

static bool same_meta(const struct stat *a, const struct stat *b)
{
	return (a->st_mode & S_IFMT) == (b->st_mode & S_IFMT) && a->st_ino == b->st_ino &&
	       a->st_dev == b->st_dev && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static void check_snapshot(hv_store *st, int64_t id, uint64_t entries, bool db_inside,
			   uint64_t max_file_bytes, int64_t *created)
{
	hv_snapshot *sn;
	CHECK(hv_store_snapshot_open(st, id, &sn) == HV_OK, "snapshot %lld does not open: %s",
	      (long long)id, hv_error_last());
	*created = hv_snapshot_created_at(sn);
	CHECK(hv_snapshot_entries(sn) == entries, "the snapshot says %llu entries, take said %llu",
	      (unsigned long long)hv_snapshot_entries(sn), (unsigned long long)entries);
	const hv_snapshot_entry *e;
	uint64_t n = 0, matched = 0;
	char *prev = NULL;
	size_t prev_len = 0;
	hv_status rc;
	while ((rc = hv_snapshot_next(sn, &e)) == HV_OK) {
		n++;
		if (prev)
			CHECK(walk_order(prev, prev_len, e->path, e->path_len) < 0,
			      "snapshot entries out of walk order: '%s' then '%s'", prev, e->path);
		free(prev);
		prev = malloc(e->path_len + 1);
		CHECK(prev, "out of memory");
		memcpy(prev, e->path, e->path_len + 1);
		prev_len = e->path_len;
		if (db_inside && in_db_area(e->path))
			continue;
		const struct ent *b = tree_find(&before, e->path, e->path_len);
		CHECK(b, "the snapshot has '%s', which our walk did not see", e->path);
		matched++;
		CHECK(e->st.ino == (uint64_t)b->sb.st_ino && e->st.dev == (uint64_t)b->sb.st_dev &&
			      e->st.size == (uint64_t)b->sb.st_size && e->st.mode == b->sb.st_mode &&
			      ns_matches(e->st.mtime_ns, &b->sb.st_mtim) &&
			      ns_matches(e->st.ctime_ns, &b->sb.st_ctim),
		      "the snapshot's lstat of '%s' differs from ours", e->path);
		bool racy = *created - ns_of(&b->sb.st_mtim) <= RACY_NS ||
			    *created - ns_of(&b->sb.st_ctim) <= RACY_NS;
		bool want_sha = S_ISREG(b->sb.st_mode) && racy &&
				(uint64_t)b->sb.st_size <= max_file_bytes;
		if (want_sha)
			CHECK(e->sha256 && !strcmp(e->sha256, b->sha),
			      "racy '%s': the snapshot's SHA-256 is %s, want %s", e->path,
			      e->sha256 ? e->sha256 : "(none)", b->sha);
		else
			CHECK(!e->sha256, "'%s' (%s) has a SHA-256 in the snapshot", e->path,
			      racy ? "racy but not a small regular file" : "not racy");
	}
	free(prev);
	CHECK(rc == HV_DONE, "hv_snapshot_next: %s", hv_error_last());
	CHECK(n == entries, "read %llu snapshot entries, take said %llu", (unsigned long long)n,
	      (unsigned long long)entries);
	size_t ours = 0;
	for (size_t i = 0; i < before.n; i++)
		ours += !(db_inside && in_db_area(before.e[i].path));
	CHECK(matched == ours, "the snapshot has %llu of our %zu entries",
	      (unsigned long long)matched, ours);
	hv_snapshot_close(sn);
}

static void run(const uint8_t *data, size_t size)
{
	unsigned flags = size ? data[0] : 0;
	bool include_hidden = flags & 1, db_inside = flags & 2, small = flags & 4;
	size_t n_ops = size > 1 ? (size - 1) / 2 : 0;
	size_t n_before = (flags >> 3) & 7;
	if (n_before > 6)
		n_before = 6;
	if (n_before > n_ops)
		n_before = n_ops;
	if (n_ops > n_before + 6)
		n_ops = n_before + 6;
	hv_store *st = db_inside ? st_in : st_out;
	stat_db_inside += db_inside;

	hv_collect_opts opts;
	hv_collect_opts_init(&opts);
	opts.include_hidden = include_hidden;
	opts.no_cache = true;
	opts.threads = 1;
	static const char *const exclude_s[] = {"s"};
	if (!db_inside) {
		opts.excludes = exclude_s;
		opts.n_excludes = 1;
	}
	if (small)
		opts.max_file_bytes = MAX_FILE_SMALL;
	struct walk_opts wo = {.include_hidden = include_hidden, .exclude_s = !db_inside};

	reset_tree();
	tree_clear(&before);
	tree_clear(&after);
	for (size_t i = 0; i < n_before; i++)
		apply(data[1 + 2 * i] >> 4, data[1 + 2 * i] & 15, data[2 + 2 * i]);
	walk_dir(&before, root, "", &wo);

	int64_t id = 0;
	uint64_t entries = 0;
	hv_status rc = hv_snapshot_take(st, root, &opts, &id, &entries, NULL);
	CHECK(rc == HV_OK, "hv_snapshot_take: %s", hv_error_last());
	int64_t created;
	check_snapshot(st, id, entries, db_inside, opts.max_file_bytes, &created);

	for (size_t i = n_before; i < n_ops; i++)
		apply(data[1 + 2 * i] >> 4, data[1 + 2 * i] & 15, data[2 + 2 * i]);
	walk_dir(&after, root, "", &wo);

	opts.since_snapshot = id;
	hv_collection *c = NULL;
	rc = hv_collect(st, root, &opts, &c);
	CHECK(rc == HV_OK, "hv_collect: %s", hv_error_last());

	/* The reference. */
	struct expect *want = calloc(after.n + 1, sizeof(*want));
	CHECK(want, "out of memory");
	size_t n_want = 0;
	bool incomplete = false;
	for (size_t i = 0; i < after.n; i++) {
		const struct ent *a = &after.e[i];
		if (S_ISDIR(a->sb.st_mode) || (db_inside && in_db_area(a->path)))
			continue;
		const struct ent *b = tree_find(&before, a->path, a->path_len);
		bool produced;
		if (!b) {
			produced = true;
			stat_new++;
		} else if (!same_meta(&a->sb, &b->sb)) {
			produced = true;
			stat_meta++;
		} else {
			bool racy = created - ns_of(&b->sb.st_mtim) <= RACY_NS ||
				    created - ns_of(&b->sb.st_ctim) <= RACY_NS;
			bool hashed = S_ISREG(b->sb.st_mode) && racy &&
				      (uint64_t)b->sb.st_size <= opts.max_file_bytes;
			produced = hashed && strcmp(a->sha, b->sha) != 0;
			if (produced)
				stat_racy_content++;
			else if (hashed)
				stat_racy_same++;
			else if (!racy)
				stat_old_unchanged++;
		}
		if (!produced)
			continue;
		struct expect *x = &want[n_want++];
		x->path = a->path;
		x->path_len = a->path_len;
		x->e = a;
		if (S_ISLNK(a->sb.st_mode)) {
			x->reason = "symlink";
		} else if (!S_ISREG(a->sb.st_mode)) {
			x->reason = "not_regular";
		} else if ((uint64_t)a->sb.st_size > opts.max_file_bytes) {
			x->reason = "too_large";
			incomplete = true;
		}
	}
	qsort(want, n_want, sizeof(*want), cmp_expect);

	/* What harvest said, in the same shape. */
	struct expect *got = calloc(c->n_files + c->n_skipped + 1, sizeof(*got));
	CHECK(got, "out of memory");
	size_t n_got = 0;
	for (size_t i = 0; i < c->n_files; i++)
		got[n_got++] = (struct expect){c->files[i].path, c->files[i].path_len, NULL, NULL};
	for (size_t i = 0; i < c->n_skipped; i++)
		got[n_got++] = (struct expect){c->skipped[i].path, c->skipped[i].path_len,
					       c->skipped[i].reason, NULL};
	qsort(got, n_got, sizeof(*got), cmp_expect);

	for (size_t i = 0; i < n_want || i < n_got; i++) {
		const struct expect *w = i < n_want ? &want[i] : NULL;
		const struct expect *g = i < n_got ? &got[i] : NULL;
		int order = !w ? 1 : !g ? -1 : cmp_expect(w, g);
		CHECK(order <= 0, "'%s' was listed (%s) but is not produced", g->path,
		      g->reason ? g->reason : "an OutputFile");
		CHECK(order >= 0, "'%s' is produced (%s) but was not listed", w->path,
		      w->reason ? w->reason : "an OutputFile");
		CHECK((w->reason == NULL) == (g->reason == NULL) &&
			      (!w->reason || !strcmp(w->reason, g->reason)),
		      "'%s': listed as %s, want %s", w->path, g->reason ? g->reason : "an OutputFile",
		      w->reason ? w->reason : "an OutputFile");
	}
	/* The details: sizes, digests and contents. */
	for (size_t i = 0; i < c->n_files; i++) {
		const hv_output_file *f = &c->files[i];
		const struct ent *a = tree_find(&after, f->path, f->path_len);
		CHECK(f->size == (uint64_t)a->sb.st_size && !strcmp(f->sha256, a->sha) &&
			      f->content_len == a->content_len &&
			      (a->content_len == 0 || (f->content &&
						       !memcmp(f->content, a->content, a->content_len))),
		      "'%s': size %llu sha %s, want size %lld sha %s (or the content differs)",
		      f->path, (unsigned long long)f->size, f->sha256, (long long)a->sb.st_size,
		      a->sha);
		const char *slash = memrchr(f->path, '/', f->path_len);
		const char *name = slash ? slash + 1 : f->path;
		CHECK(f->name_len == f->path_len - (size_t)(name - f->path) &&
			      !memcmp(f->name, name, f->name_len),
		      "'%s': name is not the base name", f->path);
	}
	for (size_t i = 0; i < c->n_skipped; i++) {
		const hv_skipped_file *s = &c->skipped[i];
		const struct ent *a = tree_find(&after, s->path, s->path_len);
		CHECK(s->has_size && s->size == (uint64_t)a->sb.st_size,
		      "skipped '%s' (%s): size %llu, want %lld", s->path, s->reason,
		      (unsigned long long)s->size, (long long)a->sb.st_size);
		stat_skipped++;
		stat_too_large += !strcmp(s->reason, "too_large");
	}
	CHECK(c->incomplete == incomplete, "incomplete is %d, want %d", c->incomplete, incomplete);

	free(got);
	free(want);
	hv_collection_free(c);
	CHECK(hv_store_snapshot_delete(st, id) == HV_OK, "hv_store_snapshot_delete: %s",
	      hv_error_last());
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* $HV_FUZZ_TMPDIR (scripts/fuzz.sh removes it after the run, also after a crash), else
	 * tmpfs. */
	const char *tmp = getenv("HV_FUZZ_TMPDIR");
	if (!tmp || !*tmp)
		tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(base, sizeof(base), "%s/harvest-fuzz-produced-XXXXXX", tmp);
	CHECK(mkdtemp(base), "mkdtemp: %s", strerror(errno));
	char p[256];
	snprintf(root, sizeof(root), "%s/root", base);
	CHECK(mkdir(root, 0755) == 0, "mkdir %s", root);
	snprintf(p, sizeof(p), "%s/s", root);
	CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
	snprintf(p, sizeof(p), "%s/o", root);
	CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
	snprintf(p, sizeof(p), "%s/o/old", root);
	write_new(p, 5, 1, O_TRUNC);
	snprintf(p, sizeof(p), "%s/o/empty", root);
	write_new(p, 0, 0, O_TRUNC);
	snprintf(p, sizeof(p), "%s/ext", base);
	CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
	snprintf(p, sizeof(p), "%s/ext/h.db", base);
	CHECK(hv_store_open(&st_out, p, 0) == HV_OK, "hv_store_open %s: %s", p, hv_error_last());
	snprintf(p, sizeof(p), "%s/s/h.db", root);
	CHECK(hv_store_open(&st_in, p, 0) == HV_OK, "hv_store_open %s: %s", p, hv_error_last());
	atexit(report);
	/* The old files must be more than 2 s old by the first snapshot: not racy. */
	struct timespec pause = {2, 200000000};
	nanosleep(&pause, NULL);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cur_data = data;
	cur_size = size;
	stat_execs++;
	run(data, size);
	return 0;
}
