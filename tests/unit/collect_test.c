/* The collector at the library level: the swap race through the test hook (FIFO, symlink,
 * bigger file, vanished, socket, directory, a parent directory swapped for a symlink), the
 * produced set against a snapshot (create, modify, same-size rewrite, rename, delete, chmod,
 * type changes, tricky name orders), the racy rule, the --no-content cache hit that opens
 * nothing, every limit and a 100 GB sparse file, excludes, the database's own files,
 * hv_collection_record and hv_mime_detect_cached (as nobody on unreadable files). */
#include "testutil.h"

#include "harvest/collect.h"
#include "harvest/json.h"
#include "harvest/mime.h"
#include "harvest/records.h"
#include "harvest/store.h"
#include "harvest/sys/store.h"
#include "collect_internal.h"
#include "test_hook.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- fixture and helpers ------------------------------------------------------------------ */

typedef tu_fx fx;

/* Collections still held by a test: freed by the teardown when an assertion ends the test
 * early, so a failing test reports its failure and no leak. */
static hv_collection *g_live[32];

static void track(hv_collection *c)
{
	for (size_t i = 0; i < 32; i++)
		if (!g_live[i]) {
			g_live[i] = c;
			return;
		}
}

static void cfree(hv_collection *c)
{
	for (size_t i = 0; i < 32; i++)
		if (g_live[i] == c)
			g_live[i] = NULL;
	hv_collection_free(c);
}


static int teardown(void **state)
{
	fx *f = *state;
	alarm(0);
	hv__test_hook_set(HV__HOOK_COLLECT_BEFORE_OPEN, NULL, NULL);
	hv__test_hook_set(HV__HOOK_COLLECT_BEFORE_READ, NULL, NULL);
	for (size_t i = 0; i < 32; i++) {
		hv_collection_free(g_live[i]);
		g_live[i] = NULL;
	}
	tu_fx_free(f);
	return 0;
}

static void wr(const fx *f, const char *rel, const char *text)
{
	tu_write(f->root, rel, text, strlen(text));
}

static void mkd(const fx *f, const char *rel)
{
	tu_mkdir(f->root, rel);
}

static char *rp(const fx *f, const char *rel)
{
	return tu_path(f->root, rel);
}

static const char *sha_of(const char *text)
{
	static char buf[4][65];
	static int k;
	char *o = buf[k++ % 4];
	tu_sha256_hex(text, strlen(text), o);
	return o;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Files old enough for the MIME cache (both mtime and ctime more than 2 s in the past). */
static void age_files(void)
{
	sleep_s(2.2);
}

/* Moves the clock's coarse tick on, so a change made now gets a ctime different from the
 * snapshot's (file system timestamps come from a clock that ticks every few ms). */
static void next_tick(void)
{
	sleep_s(0.05);
}

/* Every warning of a collect that does not look at them itself, on the test's output: when a
 * count of warnings is not the one expected, the log says which they were. */
static void print_warning(void *ctx, const char *message)
{
	(void)ctx;
	print_message("collect warning: %s\n", message);
}

static hv_collection *collect_st(hv_store *st, const char *dir, const hv_collect_opts *o)
{
	hv_collection *c = NULL;
	hv_collect_opts shown;
	if (o && !o->on_warning) {
		shown = *o;
		shown.on_warning = print_warning;
		o = &shown;
	}
	int rc = hv_collect(st, dir, o, &c);
	if (rc != HV_OK)
		fail_msg("hv_collect(%s): %d %s", dir, rc, hv_error_last());
	assert_non_null(c);
	track(c);
	return c;
}

static hv_collection *collect(const fx *f, const hv_collect_opts *o)
{
	return collect_st(f->st, f->root, o);
}

static int64_t snapshot(const fx *f, const hv_collect_opts *o, uint64_t *entries)
{
	int64_t id = 0;
	int rc = hv_snapshot_take(f->st, f->root, o, &id, entries, NULL);
	if (rc != HV_OK)
		fail_msg("hv_snapshot_take: %d %s", rc, hv_error_last());
	assert_true(id > 0);
	return id;
}

static const char *describe(const hv_collection *c)
{
	static char buf[8192];
	size_t o = 0;
	o += (size_t)snprintf(buf + o, sizeof(buf) - o, "files:");
	for (size_t i = 0; i < c->n_files && o < sizeof(buf) - 300; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, " [%s %s %llu]", c->files[i].path,
				      c->files[i].mime_type, (unsigned long long)c->files[i].size);
	o += (size_t)snprintf(buf + o, sizeof(buf) - o, "; skipped:");
	for (size_t i = 0; i < c->n_skipped && o < sizeof(buf) - 300; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, " [%s %s%s%s]", c->skipped[i].path,
				      c->skipped[i].reason, c->skipped[i].error ? " " : "",
				      c->skipped[i].error ? c->skipped[i].error : "");
	return buf;
}

static const hv_output_file *find_file(const hv_collection *c, const char *path)
{
	for (size_t i = 0; i < c->n_files; i++)
		if (c->files[i].path_len == strlen(path) && !memcmp(c->files[i].path, path, strlen(path)))
			return &c->files[i];
	return NULL;
}

static const hv_skipped_file *find_skipped(const hv_collection *c, const char *path)
{
	for (size_t i = 0; i < c->n_skipped; i++)
		if (c->skipped[i].path_len == strlen(path) &&
		    !memcmp(c->skipped[i].path, path, strlen(path)))
			return &c->skipped[i];
	return NULL;
}

typedef struct skip_want {
	const char *path;
	const char *reason;
} skip_want;

/* Exactly these artifacts (NULL-terminated) and exactly these skipped files ({NULL}-ended),
 * in any order; every record well formed. */
static void assert_collection(const hv_collection *c, const char *const *files,
			      const skip_want *skipped)
{
	size_t nf = 0, ns = 0;
	for (; files && files[nf]; nf++)
		if (!find_file(c, files[nf]))
			fail_msg("%s is not an artifact; %s", files[nf], describe(c));
	for (; skipped && skipped[ns].path; ns++) {
		const hv_skipped_file *s = find_skipped(c, skipped[ns].path);
		if (!s)
			fail_msg("%s is not skipped; %s", skipped[ns].path, describe(c));
		if (strcmp(s->reason, skipped[ns].reason) != 0)
			fail_msg("%s skipped as %s, expected %s; %s", skipped[ns].path, s->reason,
				 skipped[ns].reason, describe(c));
	}
	if (c->n_files != nf || c->n_skipped != ns)
		fail_msg("expected %zu artifacts and %zu skipped; %s", nf, ns, describe(c));
	for (size_t i = 0; i < c->n_files; i++) {
		const hv_output_file *o = &c->files[i];
		assert_int_equal(strlen(o->path), o->path_len);
		const char *slash = strrchr(o->path, '/');
		assert_string_equal(o->name, slash ? slash + 1 : o->path);
		assert_int_equal(strlen(o->name), o->name_len);
		assert_non_null(o->mime_type);
		assert_int_equal(strlen(o->sha256), 64);
	}
	for (size_t i = 0; i < c->n_skipped; i++) {
		const hv_skipped_file *s = &c->skipped[i];
		assert_int_equal(strlen(s->path), s->path_len);
		if (!strcmp(s->reason, "error"))
			assert_non_null(s->error);
	}
}

/* A file's content, size and digest equal text. */
static void assert_content(const hv_collection *c, const char *path, const char *text)
{
	const hv_output_file *o = find_file(c, path);
	if (!o)
		fail_msg("%s is not an artifact; %s", path, describe(c));
	size_t n = strlen(text);
	assert_int_equal(o->size, n);
	assert_int_equal(o->content_len, n);
	assert_non_null(o->content);
	assert_memory_equal(o->content, text, n);
	assert_string_equal(o->sha256, sha_of(text));
}

static bool bytes_in(const hv_collection *c, const char *needle)
{
	for (size_t i = 0; i < c->n_files; i++)
		if (c->files[i].content &&
		    memmem(c->files[i].content, c->files[i].content_len, needle, strlen(needle)))
			return true;
	char *j = hv_collection_skipped_json(c, 0);
	assert_non_null(j);
	bool in = strstr(j, needle) != NULL;
	free(j);
	return in;
}

/* ---- the test hook ------------------------------------------------------------------------ */

enum swap_action {
	SWAP_NONE,
	SWAP_FIFO,
	SWAP_SYMLINK,
	SWAP_BIGGER,
	SWAP_VANISH,
	SWAP_SOCKET,
	SWAP_DIR,
	SWAP_PARENT_SYMLINK, /* the file's directory renamed away and replaced by a symlink */
};

typedef struct hook {
	const char *root;
	const char *target; /* the relative path to act on (once) */
	enum swap_action action;
	const char *link_to;     /* SWAP_SYMLINK, SWAP_PARENT_SYMLINK */
	size_t big;              /* SWAP_BIGGER */
	int sock;                /* SWAP_SOCKET: the bound socket, closed by the test */
	int calls;
	char opened[64][256];
	int failed;              /* errno of a failed swap (asserted after the collect) */
	bool done;
} hook;

static void hook_init(hook *h, const fx *f, const char *target, enum swap_action a)
{
	memset(h, 0, sizeof(*h));
	h->root = f->root;
	h->target = target;
	h->action = a;
	h->sock = -1;
}

static void do_swap(hook *h, const char *path)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", h->root, path);
	switch (h->action) {
	case SWAP_NONE:
		return;
	case SWAP_FIFO:
		if (unlink(p) != 0 || mkfifo(p, 0644) != 0)
			h->failed = errno;
		return;
	case SWAP_SYMLINK:
		if (unlink(p) != 0 || symlink(h->link_to, p) != 0)
			h->failed = errno;
		return;
	case SWAP_BIGGER: {
		if (unlink(p) != 0) {
			h->failed = errno;
			return;
		}
		int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		char *buf = malloc(h->big);
		if (fd < 0 || !buf) {
			h->failed = fd < 0 ? errno : ENOMEM;
			free(buf);
			if (fd >= 0)
				close(fd);
			return;
		}
		memset(buf, 'X', h->big);
		if (write(fd, buf, h->big) != (ssize_t)h->big)
			h->failed = EIO;
		free(buf);
		close(fd);
		return;
	}
	case SWAP_VANISH:
		if (unlink(p) != 0)
			h->failed = errno;
		return;
	case SWAP_SOCKET: {
		if (unlink(p) != 0) {
			h->failed = errno;
			return;
		}
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		if (strlen(p) >= sizeof(a.sun_path)) {
			h->failed = ENAMETOOLONG;
			return;
		}
		strcpy(a.sun_path, p);
		h->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (h->sock < 0 || bind(h->sock, (struct sockaddr *)&a, sizeof(a)) != 0)
			h->failed = errno;
		return;
	}
	case SWAP_DIR:
		if (unlink(p) != 0 || mkdir(p, 0755) != 0)
			h->failed = errno;
		return;
	case SWAP_PARENT_SYMLINK: {
		char *slash = strrchr(p, '/');
		*slash = '\0';
		char moved[4200];
		snprintf(moved, sizeof(moved), "%s.moved", p);
		if (rename(p, moved) != 0 || symlink(h->link_to, p) != 0)
			h->failed = errno;
		return;
	}
	}
}

static void hook_fn(void *ctx, const char *path)
{
	hook *h = ctx;
	if (h->calls < 64)
		snprintf(h->opened[h->calls], sizeof(h->opened[0]), "%s", path);
	h->calls++;
	if (!h->done && h->target && strcmp(path, h->target) == 0) {
		h->done = true;
		do_swap(h, path);
	}
}

static void opts_with_hook(hv_collect_opts *o, hook *h)
{
	hv_collect_opts_init(o);
	hv__test_hook_set(HV__HOOK_COLLECT_BEFORE_OPEN, hook_fn, h);
}

static void assert_swapped(const hook *h)
{
	if (!h->done)
		fail_msg("the hook never saw %s", h->target);
	if (h->failed)
		fail_msg("swapping %s failed: %s", h->target, strerror(h->failed));
}

/* ---- plain collect -------------------------------------------------------------------------- */

static void test_collect_all(void **state)
{
	fx *f = *state;
	wr(f, "a.txt", "hello world\n");
	mkd(f, "sub");
	mkd(f, "sub/deeper");
	wr(f, "sub/notes.md", "# Notes\n\nsome text\n");
	wr(f, "sub/deeper/data.json", "{\"a\": [1, 2, 3]}\n");
	wr(f, "empty", "");
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	hv_collection *c = collect(f, &o);
	const char *files[] = {"a.txt", "sub/notes.md", "sub/deeper/data.json", "empty", NULL};
	assert_collection(c, files, NULL);
	assert_false(c->incomplete);
	assert_int_equal(c->warnings, 0);
	char *real = realpath(f->root, NULL);
	assert_string_equal(c->root, real);
	free(real);
	assert_content(c, "a.txt", "hello world\n");
	assert_content(c, "sub/notes.md", "# Notes\n\nsome text\n");
	assert_content(c, "sub/deeper/data.json", "{\"a\": [1, 2, 3]}\n");
	assert_string_equal(find_file(c, "a.txt")->mime_type, "text/plain");
	assert_string_equal(find_file(c, "sub/notes.md")->mime_type, "text/markdown");
	assert_string_equal(find_file(c, "sub/deeper/data.json")->mime_type, "application/json");
	assert_string_equal(find_file(c, "sub/deeper/data.json")->name, "data.json");
	const hv_output_file *e = find_file(c, "empty");
	assert_int_equal(e->size, 0);
	assert_string_equal(e->sha256, sha_of(""));
	assert_string_equal(e->mime_type, "inode/x-empty");
	/* Walk order: pre-order, names sorted. */
	assert_string_equal(c->files[0].path, "a.txt");
	assert_string_equal(c->files[1].path, "empty");
	assert_string_equal(c->files[2].path, "sub/deeper/data.json");
	assert_string_equal(c->files[3].path, "sub/notes.md");
	cfree(c);

	/* Without a store: only with no_cache and no snapshot. */
	o.no_cache = true;
	c = collect_st(NULL, f->root, &o);
	assert_int_equal(c->n_files, 4);
	cfree(c);
	o.no_cache = false;
	c = (hv_collection *)1;
	assert_int_equal(hv_collect(NULL, f->root, &o, &c), HV_EUSAGE);
	assert_null(c);
	o.no_cache = true;
	assert_int_equal(hv_collect(NULL, NULL, &o, &c), HV_EUSAGE);
	assert_string_equal(hv_error_last(), "hv_collect: missing argument");
	assert_int_equal(hv_collect(NULL, f->root, &o, NULL), HV_EUSAGE);
}

/* Pseudo-random bytes (not compressible, no two files alike). */
static void write_noise(const fx *f, const char *rel, size_t n, unsigned seed)
{
	unsigned char *b = tu_xmalloc(n ? n : 1);
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		b[i] = (unsigned char)x;
	}
	tu_write(f->root, rel, b, n);
	free(b);
}

/* The collection as `harvest collect` prints it. */
static char *collection_json(const hv_collection *c)
{
	hv_json *j = NULL;
	assert_int_equal(hv_json_new_buffer(&j, HV_CASE_SNAKE), HV_OK);
	assert_int_equal(hv_record_collection(j, 0, c, true), HV_OK);
	char *out = hv_json_buffer_strdup(j);
	hv_json_free(j);
	return out;
}

static void count_warning(void *ctx, const char *message)
{
	(void)message;
	(*(int *)ctx)++;
}

/* spool_content: the same collection, its contents in a temporary file instead of memory
 * (files larger than the pieces they are read in and than what libmagic looks at included),
 * read back exactly, printed exactly as from memory, recorded exactly; and, without a place
 * for the temporary file, in memory after a warning. */
static void test_spool_content(void **state)
{
	fx *f = *state;
	wr(f, "a.txt", "hello world\n");
	wr(f, "empty", "");
	mkd(f, "sub");
	write_noise(f, "sub/piece.bin", (256u << 10) * 3 + 7, 1);
	write_noise(f, "sub/big.bin", (9u << 20) + 1, 2); /* more than libmagic's 7 MiB */
	wr(f, "sub/same.txt", "hello world\n");
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	hv_collection *mem = collect(f, &o);
	o.spool_content = true;
	hv_collection *sp = collect(f, &o);
	assert_int_equal(sp->n_files, 5);
	assert_int_equal(mem->n_files, sp->n_files);
	assert_non_null(sp->spool);
	for (size_t i = 0; i < sp->n_files; i++) {
		const hv_output_file *a = &mem->files[i], *b = &sp->files[i];
		assert_string_equal(a->path, b->path);
		assert_string_equal(a->sha256, b->sha256);
		assert_string_equal(a->mime_type, b->mime_type);
		assert_int_equal(a->size, b->size);
		assert_false(a->spooled);
		assert_true(b->spooled);
		assert_null(b->content);
		assert_int_equal(b->content_len, a->content_len);
		unsigned char *back = tu_xmalloc(b->content_len + 1);
		assert_int_equal(hv_collection_content_read(sp, b, 0, back, b->content_len), HV_OK);
		assert_memory_equal(back, a->content, a->content_len);
		if (b->content_len > 10) {
			assert_int_equal(hv_collection_content_read(sp, b, 3, back, 7), HV_OK);
			assert_memory_equal(back, a->content + 3, 7);
		}
		/* Nothing past the end. */
		assert_int_equal(hv_collection_content_read(sp, b, b->content_len, back, 1),
				 HV_EUSAGE);
		assert_int_equal(hv_collection_content_read(mem, a, 1, back, a->content_len),
				 HV_EUSAGE);
		free(back);
	}
	char *jm = collection_json(mem), *js = collection_json(sp);
	assert_string_equal(jm, js);
	free(jm);
	free(js);
	/* Recorded from the temporary file: the stored bytes are the file's. */
	int64_t run = 0;
	assert_int_equal(hv_collection_record(f->st, sp, NULL, NULL, &run), HV_OK);
	for (size_t i = 0; i < mem->n_files; i++) {
		void *data = NULL;
		size_t len = 0;
		assert_int_equal(hv_store_content_get(f->st, mem->files[i].sha256, &data, &len),
				 HV_OK);
		assert_int_equal(len, mem->files[i].content_len);
		assert_memory_equal(data, mem->files[i].content, len);
		free(data);
	}
	cfree(sp);
	cfree(mem);

	/* No place for it: a warning, and the contents in memory. */
	char *old = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
	char *nowhere = rp(f, "a.txt"); /* not a directory */
	setenv("TMPDIR", nowhere, 1);
	int warned = 0;
	o.on_warning = count_warning;
	o.ctx = &warned;
	hv_collection *c = collect(f, &o);
	if (old)
		setenv("TMPDIR", old, 1);
	else
		unsetenv("TMPDIR");
	free(old);
	free(nowhere);
	assert_int_equal(warned, 1);
	assert_null(c->spool);
	assert_int_equal(c->n_files, 5);
	for (size_t i = 0; i < c->n_files; i++) {
		assert_false(c->files[i].spooled);
		assert_non_null(c->files[i].content);
	}
	assert_content(c, "a.txt", "hello world\n");
	cfree(c);

	/* A place that fills up (a 64 KiB tmpfs; root only): the file that does not fit and the
	 * rest are kept in memory after one warning, none lost; what fitted stays in the
	 * temporary file. */
	if (geteuid() != 0)
		return;
	char *small = rp(f, "../small");
	assert_int_equal(mkdir(small, 0700), 0);
	if (mount("none", small, "tmpfs", 0, "size=64k") != 0)
		fail_msg("mount tmpfs: %s", strerror(errno));
	tu_cleanup_umount(small);
	old = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
	setenv("TMPDIR", small, 1);
	warned = 0;
	o.threads = 1; /* in walk order: a.txt and empty fit, sub/big.bin does not */
	c = collect(f, &o);
	if (old)
		setenv("TMPDIR", old, 1);
	else
		unsetenv("TMPDIR");
	free(old);
	assert_int_equal(warned, 1);
	assert_non_null(c->spool);
	assert_int_equal(c->n_files, 5);
	assert_int_equal(c->n_skipped, 0);
	hv_collect_opts mo;
	hv_collect_opts_init(&mo);
	mo.no_cache = true;
	mem = collect(f, &mo);
	size_t spooled = 0;
	for (size_t i = 0; i < c->n_files; i++) {
		const hv_output_file *a = &mem->files[i], *b = &c->files[i];
		assert_string_equal(a->path, b->path);
		assert_string_equal(a->sha256, b->sha256);
		spooled += b->spooled;
		unsigned char *back = tu_xmalloc(b->content_len + 1);
		assert_int_equal(hv_collection_content_read(c, b, 0, back, b->content_len), HV_OK);
		assert_memory_equal(back, a->content, a->content_len);
		free(back);
	}
	assert_true(spooled >= 1 && spooled < c->n_files);
	cfree(mem);
	cfree(c);
	free(small);
}

struct grow {
	const char *root, *target;
	size_t add;
	int calls;
};

static void grow_before_read(void *ctx, const char *path)
{
	struct grow *g = ctx;
	if (strcmp(path, g->target) != 0)
		return;
	g->calls++;
	char *p = tu_path(g->root, path);
	int fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
	char *more = tu_xmalloc(g->add);
	memset(more, 'Z', g->add);
	if (fd < 0 || write(fd, more, g->add) != (ssize_t)g->add)
		g->calls = -1000;
	if (fd >= 0)
		close(fd);
	free(more);
	free(p);
}

/* A file that grows between its fstat and its read goes to the temporary file whole (its
 * region there moved to a larger one, more than once if need be), the files around it intact;
 * grown past max_file_bytes, it is too_large. */
static void test_spool_file_grows(void **state)
{
	fx *f = *state;
	wr(f, "a.txt", "first\n");
	wr(f, "b.txt", "0123456789");
	wr(f, "c.txt", "last\n");
	struct grow g = {.root = f->root, .target = "b.txt", .add = (256u << 10) * 5 + 3};
	hv__test_hook_set(HV__HOOK_COLLECT_BEFORE_READ, grow_before_read, &g);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	o.spool_content = true;
	o.threads = 1;
	hv_collection *c = collect(f, &o);
	assert_int_equal(g.calls, 1);
	const char *files[] = {"a.txt", "b.txt", "c.txt", NULL};
	assert_collection(c, files, NULL);
	const hv_output_file *b = find_file(c, "b.txt");
	assert_true(b->spooled);
	assert_int_equal(b->size, 10 + g.add);
	unsigned char *back = tu_xmalloc(b->content_len);
	assert_int_equal(hv_collection_content_read(c, b, 0, back, b->content_len), HV_OK);
	assert_memory_equal(back, "0123456789", 10);
	for (size_t i = 10; i < b->content_len; i++)
		if (back[i] != 'Z')
			fail_msg("byte %zu of the grown file is %d", i, back[i]);
	char want[65];
	tu_sha256_hex(back, b->content_len, want);
	assert_string_equal(b->sha256, want);
	free(back);
	for (const char *const *p = (const char *const[]){"a.txt", "c.txt", NULL}; *p; p++) {
		const hv_output_file *x = find_file(c, *p);
		char buf[16] = "";
		assert_int_equal(hv_collection_content_read(c, x, 0, buf, x->content_len), HV_OK);
		assert_memory_equal(buf, strcmp(*p, "a.txt") ? "last\n" : "first\n", x->content_len);
	}
	cfree(c);

	/* Past the limit: too_large, the others still there. */
	wr(f, "b.txt", "0123456789");
	g.calls = 0;
	o.max_file_bytes = 1u << 20;
	c = collect(f, &o);
	hv__test_hook_set(HV__HOOK_COLLECT_BEFORE_READ, NULL, NULL);
	assert_int_equal(g.calls, 1);
	const char *left[] = {"a.txt", "c.txt", NULL};
	const skip_want sk[] = {{"b.txt", "too_large"}, {NULL, NULL}};
	assert_collection(c, left, sk);
	cfree(c);
}

/* The kernel's files that say their size is 0 (/proc/sys) give all their bytes to the first
 * read only: with contents spooled, kept in memory or left out, each is read whole, so its
 * size and digest are those of its bytes (asked for one byte, "256\n" was collected as "2"). */
static void test_proc_sys_files(void **state)
{
	(void)state;
	const char *dir = "/proc/sys/kernel/random";
	char path[256], bytes[4096];
	snprintf(path, sizeof(path), "%s/poolsize", dir);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		fail_msg("%s: %s (the test needs /proc/sys)", path, strerror(errno));
	ssize_t n = read(fd, bytes, sizeof(bytes));
	close(fd);
	assert_true(n > 1);
	char want[65];
	tu_sha256_hex((const unsigned char *)bytes, (size_t)n, want);
	for (int mode = 0; mode < 3; mode++) {
		hv_collect_opts o;
		hv_collect_opts_init(&o);
		o.no_cache = true;
		o.no_content = mode == 1;
		o.spool_content = mode == 2;
		hv_collection *c = collect_st(NULL, dir, &o);
		const hv_output_file *x = find_file(c, "poolsize");
		assert_non_null(x);
		if (x->size != (uint64_t)n)
			fail_msg("mode %d: poolsize collected as %llu bytes, read as %zd", mode,
				 (unsigned long long)x->size, n);
		assert_string_equal(x->sha256, want);
		assert_string_equal(x->mime_type, "text/plain");
		const hv_output_file *id = find_file(c, "boot_id");
		assert_non_null(id);
		assert_int_equal(id->size, 37); /* a UUID and its newline */
		cfree(c);
	}
}

static void test_collect_errors(void **state)
{
	fx *f = *state;
	wr(f, "a.txt", "x");
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	hv_collection *c = (hv_collection *)1;
	char *missing = rp(f, "missing");
	assert_int_equal(hv_collect(f->st, missing, &o, &c), HV_ENOTDIR);
	assert_null(c);
	int64_t id = 7;
	assert_int_equal(hv_snapshot_take(f->st, missing, &o, &id, NULL, NULL), HV_ENOTDIR);
	char *file = rp(f, "a.txt");
	assert_int_equal(hv_collect(f->st, file, &o, &c), HV_ENOTDIR);
	assert_int_equal(hv_snapshot_take(f->st, file, &o, &id, NULL, NULL), HV_ENOTDIR);
	/* A snapshot that does not exist: a failure like the others (negative, so a caller
	 * testing rc < 0 never dereferences the NULL collection), and not the end of an
	 * iteration. */
	o.since_snapshot = 4242;
	c = (hv_collection *)1;
	hv_status rc = hv_collect(f->st, f->root, &o, &c);
	assert_int_equal(rc, HV_ENOTFOUND);
	assert_true(rc < 0);
	assert_null(c);
	assert_non_null(strstr(hv_error_last(), "no snapshot 4242"));
	/* A missing directory likewise. */
	c = (hv_collection *)1;
	rc = hv_collect(f->st, missing, &o, &c);
	assert_true(rc < 0);
	assert_null(c);
	free(missing);
	free(file);
}

/* NULL options are the defaults: dot-files and __pycache__ left out (and not entered), the
 * contents read. */
static void test_null_opts_are_defaults(void **state)
{
	fx *f = *state;
	wr(f, "a.txt", "alpha\n");
	wr(f, ".hidden", "h\n");
	mkd(f, "__pycache__");
	wr(f, "__pycache__/m.pyc", "p");
	mkd(f, "sub");
	wr(f, "sub/b.md", "# B\n");
	int64_t id = 0;
	uint64_t entries = 0;
	assert_int_equal(hv_snapshot_take(f->st, f->root, NULL, &id, &entries, NULL), HV_OK);
	assert_true(id > 0);
	assert_int_equal(entries, 3); /* a.txt, sub, sub/b.md */
	hv_collection *c = collect(f, NULL);
	const char *files[] = {"a.txt", "sub/b.md", NULL};
	assert_collection(c, files, NULL);
	assert_content(c, "a.txt", "alpha\n");
	assert_content(c, "sub/b.md", "# B\n");
	cfree(c);
}

/* --since a snapshot of another directory is refused (everything would look produced), with
 * a message naming both directories. */
static void test_since_other_directory(void **state)
{
	fx *f = *state;
	wr(f, "a.txt", "x");
	tu_mkdir(f->dir, "other");
	char *other = tu_path(f->dir, "other");
	int64_t id = 0;
	/* Given through a symlink, the snapshot's root is the directory itself, as recorded. */
	char *via = tu_path(f->dir, "via");
	assert_int_equal(symlink(other, via), 0);
	char *root = NULL;
	assert_int_equal(hv_snapshot_take(f->st, via, NULL, &id, NULL, &root), HV_OK);
	char *real = realpath(other, NULL);
	assert_non_null(root);
	assert_string_equal(root, real);
	free(real);
	free(root);
	free(via);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.since_snapshot = id;
	hv_collection *c = (hv_collection *)1;
	assert_int_equal(hv_collect(f->st, f->root, &o, &c), HV_EUSAGE);
	assert_null(c);
	char *real_other = realpath(other, NULL), *real_root = realpath(f->root, NULL);
	assert_non_null(strstr(hv_error_last(), real_other));
	assert_non_null(strstr(hv_error_last(), real_root));
	free(real_other);
	free(real_root);
	/* The snapshot is still good for its own directory. */
	c = collect_st(f->st, other, &o);
	assert_collection(c, NULL, NULL);
	cfree(c);
	free(other);
}

/* ---- the swap race ------------------------------------------------------------------------- */

static void three_files(const fx *f)
{
	wr(f, "a.txt", "first file\n");
	wr(f, "b.txt", "second file\n");
	wr(f, "c.txt", "third file\n");
}

static void test_swap_fifo(void **state)
{
	fx *f = *state;
	alarm(20); /* a blocking open of the FIFO would hang: fail instead */
	three_files(f);
	hook h;
	hook_init(&h, f, "b.txt", SWAP_FIFO);
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	hv_collection *c = collect(f, &o);
	assert_swapped(&h);
	const char *files[] = {"a.txt", "c.txt", NULL};
	const skip_want sk[] = {{"b.txt", "not_regular"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	assert_content(c, "a.txt", "first file\n");
	assert_content(c, "c.txt", "third file\n");
	assert_false(c->incomplete); /* a safety skip, not a limit */
	cfree(c);
	alarm(0);
}

static void test_swap_fifo_no_content(void **state)
{
	/* The same race with --no-content and no cache: still never read. */
	fx *f = *state;
	alarm(20);
	three_files(f);
	hook h;
	hook_init(&h, f, "c.txt", SWAP_FIFO);
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	o.no_content = true;
	o.no_cache = true;
	hv_collection *c = collect(f, &o);
	assert_swapped(&h);
	const char *files[] = {"a.txt", "b.txt", NULL};
	const skip_want sk[] = {{"c.txt", "not_regular"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	assert_null(find_file(c, "a.txt")->content);
	cfree(c);
	alarm(0);
}

static const char SECRET[] = "TOP-SECRET-7f3a9c1e-do-not-leak";

static char *write_secret(const fx *f)
{
	char *s = tu_path(f->dir, "secret.txt");
	tu_write(f->dir, "secret.txt", SECRET, strlen(SECRET));
	return s;
}

static void test_swap_symlink(void **state)
{
	fx *f = *state;
	three_files(f);
	char *secret = write_secret(f);
	hook h;
	hook_init(&h, f, "b.txt", SWAP_SYMLINK);
	h.link_to = secret;
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	hv_collection *c = collect(f, &o);
	assert_swapped(&h);
	const char *files[] = {"a.txt", "c.txt", NULL};
	const skip_want sk[] = {{"b.txt", "symlink"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	assert_false(bytes_in(c, SECRET));
	cfree(c);

	/* A relative link the same way, and a link that was there from the start. */
	char *b = rp(f, "b.txt");
	assert_int_equal(unlink(b), 0);
	assert_int_equal(symlink("../secret.txt", b), 0);
	wr(f, "d.txt", "fourth\n");
	hook_init(&h, f, "d.txt", SWAP_SYMLINK);
	h.link_to = "../secret.txt";
	opts_with_hook(&o, &h);
	c = collect(f, &o);
	assert_swapped(&h);
	const char *files2[] = {"a.txt", "c.txt", NULL};
	const skip_want sk2[] = {{"b.txt", "symlink"}, {"d.txt", "symlink"}, {NULL, NULL}};
	assert_collection(c, files2, sk2);
	assert_false(bytes_in(c, SECRET));
	cfree(c);
	free(b);
	free(secret);
}

static void test_swap_parent_dir_for_symlink(void **state)
{
	/* The file's directory is renamed away and a symlink to an outside directory holding a
	 * file of the same name put in its place, right before the open: the open goes through
	 * the directory descriptor (or fails), never through the link. */
	fx *f = *state;
	wr(f, "a.txt", "top\n");
	mkd(f, "sub");
	wr(f, "sub/b.txt", "inside b\n");
	wr(f, "sub/c.txt", "inside c\n");
	tu_mkdir(f->dir, "outside");
	tu_write(f->dir, "outside/b.txt", SECRET, strlen(SECRET));
	tu_write(f->dir, "outside/c.txt", SECRET, strlen(SECRET));
	char *outside = tu_path(f->dir, "outside");
	hook h;
	hook_init(&h, f, "sub/b.txt", SWAP_PARENT_SYMLINK);
	h.link_to = outside;
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	hv_collection *c = collect(f, &o);
	assert_swapped(&h);
	assert_false(bytes_in(c, SECRET));
	assert_content(c, "a.txt", "top\n");
	/* What the walk saw is either read from the renamed directory or skipped. */
	const hv_output_file *b = find_file(c, "sub/b.txt");
	if (b)
		assert_content(c, "sub/b.txt", "inside b\n");
	else
		assert_non_null(find_skipped(c, "sub/b.txt"));
	if (find_file(c, "sub/c.txt"))
		assert_content(c, "sub/c.txt", "inside c\n");
	cfree(c);
	free(outside);
}

static void test_swap_bigger(void **state)
{
	fx *f = *state;
	three_files(f);
	hook h;
	hook_init(&h, f, "b.txt", SWAP_BIGGER);
	h.big = 5000;
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	o.max_file_bytes = 1000;
	hv_collection *c = collect(f, &o);
	assert_swapped(&h);
	const char *files[] = {"a.txt", "c.txt", NULL};
	const skip_want sk[] = {{"b.txt", "too_large"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	const hv_skipped_file *s = find_skipped(c, "b.txt");
	assert_true(s->has_size);
	assert_int_equal(s->size, 5000);
	assert_true(c->incomplete);
	assert_false(bytes_in(c, "XXXXXXXX"));
	cfree(c);

	/* Bigger but within max_file_bytes: read whole, as it is now. */
	hook_init(&h, f, "c.txt", SWAP_BIGGER);
	h.big = 800;
	opts_with_hook(&o, &h);
	o.max_file_bytes = 1000;
	c = collect(f, &o);
	assert_swapped(&h);
	const hv_output_file *big = find_file(c, "c.txt");
	assert_non_null(big);
	assert_int_equal(big->size, 800);
	assert_int_equal(big->content_len, 800);
	cfree(c);
}

/* A file that grew between the walk and the read past what the total limit leaves is skipped
 * as limit, with the size read, and later files still fit. */
static void test_swap_bigger_past_total_limit(void **state)
{
	fx *f = *state;
	three_files(f);
	hook h;
	hook_init(&h, f, "b.txt", SWAP_BIGGER);
	h.big = 500;
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	o.max_total_bytes = 100;
	hv_collection *c = collect(f, &o);
	assert_swapped(&h);
	const char *files[] = {"a.txt", "c.txt", NULL};
	const skip_want sk[] = {{"b.txt", "limit"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	const hv_skipped_file *s = find_skipped(c, "b.txt");
	assert_true(s->has_size);
	assert_int_equal(s->size, 500);
	assert_true(c->incomplete);
	assert_false(bytes_in(c, "XXXXXXXX"));
	cfree(c);
}

static void test_swap_vanish(void **state)
{
	fx *f = *state;
	three_files(f);
	hook h;
	hook_init(&h, f, "b.txt", SWAP_VANISH);
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	hv_collection *c = collect(f, &o);
	assert_swapped(&h);
	const char *files[] = {"a.txt", "c.txt", NULL};
	const skip_want sk[] = {{"b.txt", "error"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	const hv_skipped_file *s = find_skipped(c, "b.txt");
	assert_non_null(strstr(s->error, "b.txt"));
	assert_true(c->incomplete);
	cfree(c);
}

static void test_swap_dir(void **state)
{
	fx *f = *state;
	three_files(f);
	hook h;
	hook_init(&h, f, "b.txt", SWAP_DIR);
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	hv_collection *c = collect(f, &o);
	assert_swapped(&h);
	const char *files[] = {"a.txt", "c.txt", NULL};
	const skip_want sk[] = {{"b.txt", "not_regular"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	cfree(c);
}

static void test_swap_socket(void **state)
{
	/* SPEC: sockets are never opened and are skipped as not_regular (not "error", which
	 * would mark the collection incomplete). */
	fx *f = *state;
	three_files(f);
	hook h;
	hook_init(&h, f, "b.txt", SWAP_SOCKET);
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	hv_collection *c = collect(f, &o);
	if (h.sock >= 0)
		close(h.sock);
	assert_swapped(&h);
	const char *files[] = {"a.txt", "c.txt", NULL};
	const skip_want sk[] = {{"b.txt", "not_regular"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	assert_false(c->incomplete);
	cfree(c);
}

/* ---- produced since a snapshot --------------------------------------------------------------- */

static void restore_mtime_rewrite(const fx *f, const char *rel, const char *text)
{
	char *p = rp(f, rel);
	struct stat before;
	assert_int_equal(lstat(p, &before), 0);
	assert_int_equal((size_t)before.st_size, strlen(text));
	wr(f, rel, text);
	struct timespec times[2] = {before.st_atim, before.st_mtim};
	assert_int_equal(utimensat(AT_FDCWD, p, times, AT_SYMLINK_NOFOLLOW), 0);
	struct stat after;
	assert_int_equal(lstat(p, &after), 0);
	assert_int_equal(after.st_size, before.st_size);
	assert_int_equal(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
	assert_int_equal(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
	assert_int_equal(after.st_ino, before.st_ino);
	free(p);
}

/* The changes of test_produced_set: how each file changed, and which regular files are gone
 * (a rename counts as a deletion and a creation; a file become a link, a directory or a FIFO
 * is gone), in walk order. */
static void check_changes(const hv_collection *c)
{
	static const char *const modified[] = {"mod.txt", "same.txt", "chmod.txt"};
	for (size_t i = 0; i < c->n_files; i++) {
		bool mod = false;
		for (size_t k = 0; k < 3; k++)
			mod |= !strcmp(c->files[i].path, modified[k]);
		if (!c->files[i].change || strcmp(c->files[i].change, mod ? "modified" : "created"))
			fail_msg("%s: change %s", c->files[i].path,
				 c->files[i].change ? c->files[i].change : "(null)");
	}
	static const char *const gone[] = {"del.txt", "ren.txt", "subren/x.txt",
					   "t_dir",   "t_fifo",  "t_link"};
	if (c->n_deleted != 6)
		fail_msg("%zu deleted, not 6", c->n_deleted);
	for (size_t i = 0; i < 6; i++)
		assert_string_equal(c->deleted[i].path, gone[i]);
}

static void test_produced_set(void **state)
{
	fx *f = *state;
	wr(f, "keep.txt", "unchanged\n");
	wr(f, "mod.txt", "hello");
	wr(f, "same.txt", "aaaa");
	wr(f, "ren.txt", "to be renamed\n");
	wr(f, "del.txt", "to be deleted\n");
	wr(f, "chmod.txt", "only the mode changes\n");
	wr(f, "t_link", "becomes a symlink\n");
	wr(f, "t_dir", "becomes a directory\n");
	wr(f, "t_fifo", "becomes a fifo\n");
	mkd(f, "sub");
	wr(f, "sub/keep2.txt", "unchanged too\n");
	mkd(f, "subren");
	wr(f, "subren/x.txt", "in a renamed dir\n");
	char *p = rp(f, "oldlink");
	assert_int_equal(symlink("keep.txt", p), 0);
	free(p);
	p = rp(f, "oldfifo");
	assert_int_equal(mkfifo(p, 0644), 0);
	free(p);

	hv_collect_opts o;
	hv_collect_opts_init(&o);
	uint64_t entries = 0;
	int64_t id = snapshot(f, &o, &entries);
	assert_int_equal(entries, 15);
	/* The same before-state held in memory, as `harvest run` keeps it. */
	hv_mem_snapshot *mem = NULL;
	assert_int_equal(hv_snapshot_take_mem(f->st, f->root, &o, &mem), HV_OK);
	assert_int_equal(hv_mem_snapshot_entries(mem), 15);

	/* Nothing changed yet: nothing produced, nothing skipped, nothing deleted. */
	o.since_snapshot = id;
	hv_collection *c = collect(f, &o);
	assert_collection(c, NULL, NULL);
	assert_false(c->incomplete);
	assert_true(c->compared);
	assert_int_equal(c->n_deleted, 0);
	cfree(c);
	assert_int_equal(hv_collect_since_mem(f->st, f->root, &o, mem, &c), HV_OK);
	assert_collection(c, NULL, NULL);
	assert_int_equal(c->n_deleted, 0);
	cfree(c);

	next_tick();
	wr(f, "mod.txt", "hello world");
	restore_mtime_rewrite(f, "same.txt", "bbbb");
	char *a = rp(f, "ren.txt"), *b = rp(f, "renamed.txt");
	assert_int_equal(rename(a, b), 0);
	free(a), free(b);
	a = rp(f, "subren"), b = rp(f, "subren2");
	assert_int_equal(rename(a, b), 0);
	free(a), free(b);
	p = rp(f, "del.txt");
	assert_int_equal(unlink(p), 0);
	free(p);
	p = rp(f, "chmod.txt");
	assert_int_equal(chmod(p, 0600), 0);
	free(p);
	p = rp(f, "t_link");
	assert_int_equal(unlink(p), 0);
	assert_int_equal(symlink("keep.txt", p), 0);
	free(p);
	p = rp(f, "t_dir");
	assert_int_equal(unlink(p), 0);
	free(p);
	mkd(f, "t_dir");
	wr(f, "t_dir/inner.txt", "inside the new dir\n");
	p = rp(f, "t_fifo");
	assert_int_equal(unlink(p), 0);
	assert_int_equal(mkfifo(p, 0644), 0);
	free(p);
	wr(f, "new.txt", "brand new\n");
	wr(f, "sub/new.txt", "new in sub\n");
	p = rp(f, "newlink");
	assert_int_equal(symlink("/etc/passwd", p), 0);
	free(p);
	p = rp(f, "newfifo");
	assert_int_equal(mkfifo(p, 0644), 0);
	free(p);

	alarm(20);
	c = collect(f, &o);
	alarm(0);
	const char *files[] = {"mod.txt",   "same.txt",        "renamed.txt", "subren2/x.txt",
			       "chmod.txt", "t_dir/inner.txt", "new.txt",     "sub/new.txt",
			       NULL};
	const skip_want sk[] = {{"t_link", "symlink"},
				{"t_fifo", "not_regular"},
				{"newlink", "symlink"},
				{"newfifo", "not_regular"},
				{NULL, NULL}};
	assert_collection(c, files, sk);
	assert_content(c, "mod.txt", "hello world");
	assert_content(c, "same.txt", "bbbb");
	assert_content(c, "renamed.txt", "to be renamed\n");
	assert_content(c, "chmod.txt", "only the mode changes\n");
	assert_content(c, "t_dir/inner.txt", "inside the new dir\n");
	assert_false(c->incomplete);
	check_changes(c);
	cfree(c);
	/* Against the snapshot in memory: exactly the same. */
	alarm(20);
	assert_int_equal(hv_collect_since_mem(f->st, f->root, &o, mem, &c), HV_OK);
	alarm(0);
	assert_collection(c, files, sk);
	assert_content(c, "same.txt", "bbbb");
	check_changes(c);
	cfree(c);
	/* Of another directory: refused, as for a stored snapshot. */
	char *sub = rp(f, "sub");
	c = (hv_collection *)1;
	assert_int_equal(hv_collect_since_mem(f->st, sub, &o, mem, &c), HV_EUSAGE);
	assert_null(c);
	free(sub);
	/* With other filters than the snapshot's: refused, in memory and stored alike (what only
	 * the collect sees would be created). */
	o.include_hidden = true;
	c = (hv_collection *)1;
	assert_int_equal(hv_collect_since_mem(f->st, f->root, &o, mem, &c), HV_EUSAGE);
	assert_null(c);
	assert_non_null(strstr(hv_error_last(), "the snapshot was taken with none of "));
	c = (hv_collection *)1;
	assert_int_equal(hv_collect(f->st, f->root, &o, &c), HV_EUSAGE);
	assert_null(c);
	assert_non_null(strstr(hv_error_last(), " was taken with none of "));
	o.include_hidden = false;
	const char *ex[] = {"*.txt"};
	o.excludes = ex;
	o.n_excludes = 1;
	assert_int_equal(hv_collect_since_mem(f->st, f->root, &o, mem, &c), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "; this collect has --exclude '*.txt':"));
	o.excludes = NULL;
	o.n_excludes = 0;
	hv_mem_snapshot_free(mem);

	/* The same tree without --since: every regular file, every link and FIFO skipped. */
	o.since_snapshot = 0;
	alarm(20);
	c = collect(f, &o);
	alarm(0);
	const char *all[] = {"keep.txt",    "mod.txt",   "same.txt",        "renamed.txt",
			     "subren2/x.txt", "chmod.txt", "t_dir/inner.txt", "new.txt",
			     "sub/new.txt", "sub/keep2.txt", NULL};
	const skip_want skall[] = {{"t_link", "symlink"},      {"t_fifo", "not_regular"},
				   {"newlink", "symlink"},     {"newfifo", "not_regular"},
				   {"oldlink", "symlink"},     {"oldfifo", "not_regular"},
				   {NULL, NULL}};
	assert_collection(c, all, skall);
	assert_false(c->compared);
	assert_int_equal(c->n_deleted, 0);
	assert_null(c->files[0].change);
	cfree(c);
}

/* The names of c's files and deleted paths, "f:PATH:CHANGE ... d:PATH ...", in order. */
static char *changes_text(const hv_collection *c)
{
	char *out = tu_xmemdup("", 0);
	for (size_t i = 0; i < c->n_files; i++) {
		char *n = NULL;
		assert_true(asprintf(&n, "%sf:%s:%s ", out, c->files[i].path,
				     c->files[i].change ? c->files[i].change : "-") > 0);
		free(out);
		out = n;
	}
	for (size_t i = 0; i < c->n_deleted; i++) {
		char *n = NULL;
		assert_true(asprintf(&n, "%sd:%s ", out, c->deleted[i].path) > 0);
		free(out);
		out = n;
	}
	return out;
}

static void names_tree(const char *root)
{
	tu_mkdir(root, "a");
	tu_mkdir(root, "c");
	tu_write(root, "a/x", "one\n", 4);
	tu_write(root, "c/x", "two\n", 4);
	tu_write(root, "c/y", "why\n", 4);
	tu_write(root, "keep.txt", "kept\n", 5);
	tu_write(root, "gone.txt", "gone\n", 5);
}

/* A snapshot in memory on tmpfs (a file system whose ctime it trusts) lists files by name and
 * inode number only, and tells what changed by their ctime after the run: the same answer as
 * the lstat state gives (HARVEST_TEST_SNAPSHOT_LSTAT), including a directory replaced by another
 * holding the same names (their files keep old times: only the inode numbers differ) and a
 * file rewritten with the same size just before the snapshot and again just after it. */
static void test_mem_snapshot_by_names(void **state)
{
	fx *f = *state;
	char tmpl[] = "/dev/shm/harvest-names-XXXXXX";
	assert_non_null(mkdtemp(tmpl));
	const char *root = tmpl;
	names_tree(root);
	const char *want = "f:a/x:modified f:a/y:created f:new.txt:created f:racy.txt:modified "
			   "f:tmp/x:created d:c/x d:c/y d:gone.txt ";
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_content = true;
	for (int lstat_mode = 0; lstat_mode < 2; lstat_mode++) {
		if (lstat_mode) {
			setenv("HARVEST_TEST_SNAPSHOT_LSTAT", "1", 1);
			hv__test_switches_reload();
		}
		/* Written just before the snapshot, in the same tick. */
		tu_write(root, "racy.txt", "aaaa", 4);
		tu_write(root, "same.txt", "bbbb", 4);
		hv_mem_snapshot *mem = NULL;
		assert_int_equal(hv_snapshot_take_mem(f->st, root, &o, &mem), HV_OK);
		assert_int_equal(hv_mem_snapshot_entries(mem), 9);
		/* Named: every file (the three directories are stat'ed); none with lstat. */
		assert_int_equal(mem->n_named, lstat_mode ? 0 : 7);
		tu_write(root, "racy.txt", "cccc", 4);
		char *a = tu_path(root, "a"), *c = tu_path(root, "c"), *t = tu_path(root, "tmp");
		assert_int_equal(rename(a, t), 0);
		assert_int_equal(rename(c, a), 0);
		free(a), free(c), free(t);
		char *g = tu_path(root, "gone.txt");
		assert_int_equal(unlink(g), 0);
		free(g);
		tu_write(root, "new.txt", "new\n", 4);
		hv_collection *col = NULL;
		assert_int_equal(hv_collect_since_mem(f->st, root, &o, mem, &col), HV_OK);
		track(col);
		char *got = changes_text(col);
		if (strcmp(got, want))
			fail_msg("%s: %s, not %s", lstat_mode ? "lstat" : "names", got, want);
		free(got);
		cfree(col);
		hv_mem_snapshot_free(mem);
		/* Back as before, for the other mode. */
		tu_rmrf(root);
		assert_int_equal(mkdir(root, 0700), 0);
		names_tree(root);
	}
	unsetenv("HARVEST_TEST_SNAPSHOT_LSTAT");
	hv__test_switches_reload();
	tu_rmrf(root);
}

/* A snapshot in memory of a chain of 3,000 directories (deeper than PATH_MAX) holds each
 * entry's name once, not its path: the names arena has the names' bytes, where paths would
 * have 9 MB (and 11 GB at 100,000 levels). The paths rebuilt from the names, at the bottom,
 * on the way up and beside the chain, compare as a stored snapshot's do. */
static void test_mem_snapshot_deep(void **state)
{
	fx *f = *state;
	enum { LEVELS = 3000 };
	tu_write(f->root, "a.txt", "a\n", 2);
	int fd = tu_deep_dir(f->root, "d", LEVELS);
	tu_write_at(fd, "leaf", 0644, "leaf\n");
	tu_write_at(fd, "gone", 0644, "gone\n");
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_content = true;
	hv_mem_snapshot *mem = NULL;
	assert_int_equal(hv_snapshot_take_mem(f->st, f->root, &o, &mem), HV_OK);
	assert_int_equal(hv_mem_snapshot_entries(mem), LEVELS + 3);
	assert_int_equal(mem->names.len, LEVELS + strlen("a.txt") + strlen("leaf") + strlen("gone"));

	next_tick();
	int lf = openat(fd, "leaf", O_WRONLY | O_APPEND);
	assert_true(lf >= 0);
	assert_int_equal(write(lf, "more\n", 5), 5);
	close(lf);
	assert_int_equal(unlinkat(fd, "gone", 0), 0);
	tu_write_at(fd, "new", 0644, "new\n");
	close(fd);
	wr(f, "a.txt", "changed\n");
	wr(f, "z.txt", "z\n");
	hv_collection *c = NULL;
	assert_int_equal(hv_collect_since_mem(f->st, f->root, &o, mem, &c), HV_OK);
	hv_mem_snapshot_free(mem);
	char *chain = malloc(2 * LEVELS);
	assert_non_null(chain);
	for (int i = 0; i < LEVELS; i++)
		memcpy(chain + 2 * i, i + 1 < LEVELS ? "d/" : "d", 2);
	chain[2 * LEVELS - 1] = '\0';
	char *want = NULL;
	assert_true(asprintf(&want, "f:a.txt:modified f:%s/leaf:modified f:%s/new:created "
				    "f:z.txt:created d:%s/gone ", chain, chain, chain) > 0);
	char *got = changes_text(c);
	if (strcmp(got, want) != 0)
		fail_msg("got %.300s...", got);
	free(got);
	free(want);
	free(chain);
	cfree(c);
	tu_rmrf_deep(f->root);
}

/* The clock a snapshot by names compares ctimes with: not older than the snapshot's tick and
 * not later than now; a time later than now is from a clock that was ahead before the
 * snapshot, unless the clock was set back since, which lowers the line by as much. */
static void test_mem_snapshot_clock(void **state)
{
	(void)state;
	struct timespec rt, mono;
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	int64_t now = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
	int64_t off = now - ((int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec);
	hv_mem_snapshot m = {.since_ns = now - 5000000000, .clock_off = off, .n_named = 1};
	struct hvc_since_clock c;
	hvc_since_clock_init(&m, &c);
	assert_false(c.no_upper);
	assert_int_equal(c.since_ns, m.since_ns);
	assert_false(hvc_mem_changed(&c, m.since_ns - 1));
	assert_true(hvc_mem_changed(&c, m.since_ns));
	assert_true(hvc_mem_changed(&c, now));
	assert_false(hvc_mem_changed(&c, now + 3600 * 1000000000LL)); /* stamped ahead, before */
	/* The clock set back an hour since the snapshot: as if the snapshot were an hour older,
	 * and times ahead of the clock now are changes. */
	m.clock_off = off + 3600 * 1000000000LL;
	hvc_since_clock_init(&m, &c);
	assert_true(c.no_upper);
	assert_true(c.since_ns <= m.since_ns - 3600 * 1000000000LL + 1000000);
	assert_true(hvc_mem_changed(&c, m.since_ns - 1800 * 1000000000LL));
	assert_true(hvc_mem_changed(&c, now + 1800 * 1000000000LL));
	assert_false(hvc_mem_changed(&c, m.since_ns - 7200 * 1000000000LL));
}

static void test_produced_merge_order(void **state)
{
	/* Names around '/' in byte order ("a" < "a b" < "a!b" < "a-b" < "a.txt" < "a0", and
	 * "a/x" sorts right after "a"), non-UTF-8 and non-ASCII names: the walk and the
	 * snapshot must merge in one pass without calling unchanged files produced. */
	fx *f = *state;
	mkd(f, "a");
	wr(f, "a/x", "ax");
	wr(f, "a/y.txt", "ay");
	mkd(f, "a/z");
	wr(f, "a/z/deep", "deep");
	wr(f, "a b", "space");
	wr(f, "a!b", "bang");
	wr(f, "a-b", "dash");
	wr(f, "a.txt", "dot");
	wr(f, "a0", "zero");
	wr(f, "\xff\xfe", "binary name");
	wr(f, "caf\xc3\xa9", "utf8 name");
	mkd(f, "b");
	mkd(f, "b/a");
	wr(f, "b/a/1", "1");
	wr(f, "b/a-", "2");
	wr(f, "Z", "upper");
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	uint64_t entries = 0;
	o.since_snapshot = snapshot(f, &o, &entries);
	assert_int_equal(entries, 17);
	hv_collection *c = collect(f, &o);
	assert_collection(c, NULL, NULL);
	cfree(c);

	next_tick();
	wr(f, "a/new", "n1");
	wr(f, "a b", "SPACE"); /* same size: ctime differs */
	wr(f, "b/a/0", "n2");
	wr(f, "\xff\xfe", "binary name changed");
	wr(f, "a.txu", "n3");
	c = collect(f, &o);
	const char *files[] = {"a/new", "a b", "b/a/0", "\xff\xfe", "a.txu", NULL};
	assert_collection(c, files, NULL);
	assert_content(c, "\xff\xfe", "binary name changed");
	cfree(c);
}

/* ---- the racy rule ---------------------------------------------------------------------------- */

static void stat_of(const fx *f, const char *rel, hv_stat *s)
{
	char *p = rp(f, rel);
	struct stat sb;
	assert_int_equal(lstat(p, &sb), 0);
	free(p);
	s->dev = (uint64_t)sb.st_dev;
	s->ino = (uint64_t)sb.st_ino;
	s->size = (uint64_t)sb.st_size;
	s->mode = sb.st_mode;
	s->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
	s->ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec;
}

static void test_racy_rule(void **state)
{
	fx *f = *state;
	wr(f, "old.txt", "old enough");
	age_files();
	wr(f, "r.txt", "AAAA");
	wr(f, "r2.txt", "CCCC");
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	int64_t id = snapshot(f, &o, NULL);

	/* The snapshot holds the digest of the racy files only. */
	hv_snapshot *sn;
	assert_int_equal(hv_store_snapshot_open(f->st, id, &sn), HV_OK);
	hv_snapshot_entry e;
	assert_int_equal(hv_snapshot_lookup(sn, "old.txt", 7, &e), HV_OK);
	assert_null(e.sha256);
	assert_int_equal(hv_snapshot_lookup(sn, "r.txt", 5, &e), HV_OK);
	assert_non_null(e.sha256);
	assert_string_equal(e.sha256, sha_of("AAAA"));
	assert_int_equal(hv_snapshot_lookup(sn, "r2.txt", 6, &e), HV_OK);
	assert_non_null(e.sha256);
	assert_string_equal(e.sha256, sha_of("CCCC"));
	hv_snapshot_close(sn);

	/* Same size, mtime put back: produced. The untouched racy file: not produced (its
	 * content is compared and found equal). */
	next_tick();
	restore_mtime_rewrite(f, "r.txt", "BBBB");
	o.since_snapshot = id;
	hv_collection *c = collect(f, &o);
	const char *files[] = {"r.txt", NULL};
	assert_collection(c, files, NULL);
	assert_content(c, "r.txt", "BBBB");
	cfree(c);

	/* The same-tick case, where not even ctime moved: a snapshot whose entries carry exactly
	 * the files' current lstat. x.txt's recorded digest is that of other bytes (the content
	 * was rewritten within the tick): produced, by its hash alone. y.txt's digest matches,
	 * z.txt has none (it was not racy): not produced. */
	wr(f, "x.txt", "XXXX");
	wr(f, "y.txt", "YYYY");
	wr(f, "z.txt", "ZZZZ");
	char *root = realpath(f->root, NULL);
	hv_snapshot_writer *w;
	assert_int_equal(hv_store_snapshot_begin(f->st, root, &w), HV_OK);
	const char *names[] = {"old.txt", "r.txt", "r2.txt", "x.txt", "y.txt", "z.txt"};
	for (size_t i = 0; i < 6; i++) {
		hv_stat s;
		stat_of(f, names[i], &s);
		const char *sha = NULL;
		if (!strcmp(names[i], "x.txt"))
			sha = sha_of("xxxx");
		else if (!strcmp(names[i], "y.txt"))
			sha = sha_of("YYYY");
		else if (!strcmp(names[i], "r2.txt"))
			sha = sha_of("CCCC");
		assert_int_equal(hv_snapshot_writer_add(w, names[i], strlen(names[i]), &s, sha),
				 HV_OK);
	}
	int64_t id2 = 0;
	assert_int_equal(hv_snapshot_writer_finish(w, &id2), HV_OK);
	free(root);
	o.since_snapshot = id2;
	c = collect(f, &o);
	const char *files2[] = {"x.txt", NULL};
	assert_collection(c, files2, NULL);
	assert_content(c, "x.txt", "XXXX");
	cfree(c);

	/* With --no-content too (the racy compare must read the file even then). */
	o.no_content = true;
	c = collect(f, &o);
	assert_collection(c, files2, NULL);
	assert_string_equal(find_file(c, "x.txt")->sha256, sha_of("XXXX"));
	assert_null(find_file(c, "x.txt")->content);
	cfree(c);

	/* A snapshot written through the store's writer alone records no filters (as one of a
	 * harvest before schema version 7): any collect may compare with it. */
	o.include_hidden = true;
	o.xdev = true;
	c = collect(f, &o);
	assert_collection(c, files2, NULL);
	cfree(c);
}

/* ---- --no-content answers from the cache ---------------------------------------------------- */

static void test_no_content_cache_hit(void **state)
{
	fx *f = *state;
	static const unsigned char bin[] = {0x00, 0x01, 0x02, 0xfe, 0xff, 0x10, 0x80, 0x00, 0x7f};
	wr(f, "a.txt", "plain text here\n");
	tu_write(f->root, "b.bin", bin, sizeof(bin));
	mkd(f, "d");
	wr(f, "d/c.md", "# Title\n\nbody\n");
	age_files();

	hook h;
	hook_init(&h, f, NULL, SWAP_NONE);
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	hv_collection *first = collect(f, &o);
	const char *files[] = {"a.txt", "b.bin", "d/c.md", NULL};
	assert_collection(first, files, NULL);
	assert_int_equal(h.calls, 3);

	/* Every answer is in the cache with its digest now: nothing is opened. */
	hook_init(&h, f, NULL, SWAP_NONE);
	opts_with_hook(&o, &h);
	o.no_content = true;
	hv_collection *c = collect(f, &o);
	assert_collection(c, files, NULL);
	if (h.calls != 0)
		fail_msg("%d files opened on a warm --no-content collect (first: %s)", h.calls,
			 h.opened[0]);
	for (size_t i = 0; i < first->n_files; i++) {
		const hv_output_file *a = &first->files[i], *b = find_file(c, a->path);
		assert_non_null(b);
		assert_string_equal(b->sha256, a->sha256);
		assert_string_equal(b->mime_type, a->mime_type);
		assert_int_equal(b->size, a->size);
		assert_null(b->content);
		assert_int_equal(b->content_len, 0);
	}
	assert_string_equal(find_file(c, "d/c.md")->mime_type, "text/markdown");
	cfree(c);

	/* One file changes: exactly that one is opened. */
	static const unsigned char more[] = {0x01, 0x02, 0x03};
	char *bp = rp(f, "b.bin");
	int fd = open(bp, O_WRONLY | O_APPEND | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, more, sizeof(more)), (ssize_t)sizeof(more));
	close(fd);
	free(bp);
	unsigned char both[sizeof(bin) + sizeof(more)];
	memcpy(both, bin, sizeof(bin));
	memcpy(both + sizeof(bin), more, sizeof(more));
	char want[65];
	tu_sha256_hex(both, sizeof(both), want);
	hook_init(&h, f, NULL, SWAP_NONE);
	opts_with_hook(&o, &h);
	o.no_content = true;
	c = collect(f, &o);
	assert_collection(c, files, NULL);
	assert_int_equal(h.calls, 1);
	assert_string_equal(h.opened[0], "b.bin");
	assert_string_equal(find_file(c, "b.bin")->sha256, want);
	assert_int_equal(find_file(c, "b.bin")->size, sizeof(both));
	assert_string_equal(find_file(c, "a.txt")->sha256, find_file(first, "a.txt")->sha256);
	cfree(c);

	/* --no-cache: everything is opened again. */
	hook_init(&h, f, NULL, SWAP_NONE);
	opts_with_hook(&o, &h);
	o.no_content = true;
	o.no_cache = true;
	c = collect(f, &o);
	assert_collection(c, files, NULL);
	assert_int_equal(h.calls, 3);
	cfree(c);
	cfree(first);
}

static void test_no_content_young_files_opened(void **state)
{
	/* Files younger than 2 s are never answered from the cache: they are opened. */
	fx *f = *state;
	wr(f, "a.txt", "young\n");
	char *a = rp(f, "a.txt");
	tu_make_young(a);
	free(a);
	hook h;
	hook_init(&h, f, NULL, SWAP_NONE);
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	hv_collection *c = collect(f, &o);
	cfree(c);
	hook_init(&h, f, NULL, SWAP_NONE);
	opts_with_hook(&o, &h);
	o.no_content = true;
	c = collect(f, &o);
	assert_int_equal(h.calls, 1);
	assert_string_equal(find_file(c, "a.txt")->sha256, sha_of("young\n"));
	cfree(c);
}

static void test_no_content_after_mime_cache(void **state)
{
	/* The cache was filled by hv_mime_detect_cached (`harvest mime`), which stores no digest.
	 * A collect with content then reads every file anyway: it must leave the digest in the
	 * cache, so a later --no-content collect of the unchanged files opens nothing. */
	fx *f = *state;
	wr(f, "a.txt", "plain text here\n");
	wr(f, "b.md", "# Title\n");
	age_files();
	char *paths[2] = {rp(f, "a.txt"), rp(f, "b.md")};
	hv_mime_result *res = NULL;
	assert_int_equal(hv_mime_detect_cached(f->st, (const char *const *)paths, 2, NULL, &res),
			 HV_OK);
	hv_mime_results_free(res, 2);
	free(paths[0]);
	free(paths[1]);

	hook h;
	hook_init(&h, f, NULL, SWAP_NONE);
	hv_collect_opts o;
	opts_with_hook(&o, &h);
	hv_collection *c = collect(f, &o);
	assert_int_equal(h.calls, 2);
	assert_content(c, "a.txt", "plain text here\n");
	cfree(c);

	hook_init(&h, f, NULL, SWAP_NONE);
	opts_with_hook(&o, &h);
	o.no_content = true;
	c = collect(f, &o);
	const char *files[] = {"a.txt", "b.md", NULL};
	assert_collection(c, files, NULL);
	assert_string_equal(find_file(c, "a.txt")->sha256, sha_of("plain text here\n"));
	if (h.calls != 0)
		fail_msg("%d unchanged files opened by --no-content after a full collect read them "
			 "(first: %s): the digest was not cached",
			 h.calls, h.opened[0]);
	cfree(c);
}

/* As nobody, on files root made 0600 (before they aged, so their ctime is old): a --no-content
 * collect answers from the cache without opening them; without the cache it cannot read them. */
typedef struct nobody_collect {
	const char *root;
	const char *db;
	char sha_a[65];
	char sha_b[65];
} nobody_collect;

static int nobody_collect_cached(void *arg)
{
	nobody_collect *x = arg;
	hv_store *st;
	if (hv_store_open(&st, x->db, 0) != HV_OK) {
		fprintf(stderr, "nobody: hv_store_open: %s\n", hv_error_last());
		return 30;
	}
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_content = true;
	hv_collection *c = NULL;
	int rc = hv_collect(st, x->root, &o, &c);
	int ret = 0;
	if (rc != HV_OK) {
		fprintf(stderr, "nobody: hv_collect: %s\n", hv_error_last());
		ret = 31;
	} else if (c->n_files != 2 || c->n_skipped != 0) {
		fprintf(stderr, "nobody: %s\n", describe(c));
		ret = 32;
	} else if (!find_file(c, "a.txt") || strcmp(find_file(c, "a.txt")->sha256, x->sha_a) ||
		   !find_file(c, "b.txt") || strcmp(find_file(c, "b.txt")->sha256, x->sha_b)) {
		ret = 33;
	}
	cfree(c);
	/* Control: without the cache, both files are opened and cannot be read. */
	o.no_cache = true;
	c = NULL;
	if (ret == 0 && hv_collect(st, x->root, &o, &c) == HV_OK) {
		if (c->n_files != 0 || c->n_skipped != 2 || !c->incomplete)
			ret = 34;
		for (size_t i = 0; ret == 0 && i < c->n_skipped; i++)
			if (strcmp(c->skipped[i].reason, "error") != 0 || !c->skipped[i].error ||
			    !strstr(c->skipped[i].error, "Permission denied"))
				ret = 35;
		if (ret)
			fprintf(stderr, "nobody (no cache): %s\n", describe(c));
	} else if (ret == 0) {
		ret = 36;
	}
	cfree(c);
	hv_store_close(st);
	return ret;
}

static void test_no_content_as_nobody(void **state)
{
	fx *f = *state;
	if (geteuid() != 0)
		skip();
	wr(f, "a.txt", "secret a\n");
	wr(f, "b.txt", "secret b\n");
	char *pa = rp(f, "a.txt"), *pb = rp(f, "b.txt");
	assert_int_equal(chmod(pa, 0600), 0);
	assert_int_equal(chmod(pb, 0600), 0);
	free(pa);
	free(pb);
	tu_mkdir(f->dir, "dbdir");
	char *dbdir = tu_path(f->dir, "dbdir");
	assert_int_equal(chmod(dbdir, 0777), 0);
	char *db = tu_path(dbdir, "c.db");
	age_files();
	hv_store *st;
	assert_int_equal(hv_store_open(&st, db, 0), HV_OK);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	hv_collection *c = collect_st(st, f->root, &o);
	const char *files[] = {"a.txt", "b.txt", NULL};
	assert_collection(c, files, NULL);
	nobody_collect x = {.root = f->root, .db = db};
	snprintf(x.sha_a, sizeof(x.sha_a), "%s", find_file(c, "a.txt")->sha256);
	snprintf(x.sha_b, sizeof(x.sha_b), "%s", find_file(c, "b.txt")->sha256);
	cfree(c);
	assert_int_equal(hv_store_close(st), HV_OK);
	assert_int_equal(chmod(db, 0666), 0);
	assert_int_equal(tu_as_nobody(nobody_collect_cached, &x), 0);
	free(db);
	free(dbdir);
}

/* The warnings a collect or a snapshot reported through on_warning: how many, and the last. */
typedef struct warnings {
	int n;
	char last[512];
} warnings;

static void on_warning(void *ctx, const char *msg)
{
	warnings *w = ctx;
	w->n++;
	snprintf(w->last, sizeof(w->last), "%s", msg);
}

/* Unreadable things as nobody: a file is skipped as error (with the reason), a directory
 * that cannot be opened is a warning; the rest is collected. */

static int nobody_collect_unreadable(void *arg)
{
	const char *root = arg;
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	warnings warned = {0};
	o.on_warning = on_warning;
	o.ctx = &warned;
	hv_collection *c = NULL;
	if (hv_collect(NULL, root, &o, &c) != HV_OK)
		return 40;
	int ret = 0;
	const hv_skipped_file *s = find_skipped(c, "closed.txt");
	if (c->n_files != 1 || !find_file(c, "open.txt"))
		ret = 41;
	else if (c->n_skipped != 1 || !s || strcmp(s->reason, "error") != 0 || !s->error ||
		 !strstr(s->error, "closed.txt") || !strstr(s->error, "Permission denied"))
		ret = 42;
	else if (!c->incomplete)
		ret = 43;
	else if (c->warnings != 1 || warned.n != 1)
		ret = 44;
	if (ret)
		fprintf(stderr, "nobody: warnings %llu/%d; %s\n", (unsigned long long)c->warnings,
			warned.n, describe(c));
	cfree(c);
	return ret;
}

static void test_unreadable_as_nobody(void **state)
{
	fx *f = *state;
	if (geteuid() != 0)
		skip();
	wr(f, "open.txt", "readable\n");
	wr(f, "closed.txt", "unreadable\n");
	mkd(f, "closeddir");
	wr(f, "closeddir/inside.txt", "hidden by its directory\n");
	char *p = rp(f, "closed.txt");
	assert_int_equal(chmod(p, 0600), 0);
	free(p);
	p = rp(f, "closeddir");
	assert_int_equal(chmod(p, 0700), 0);
	free(p);
	assert_int_equal(tu_as_nobody(nobody_collect_unreadable, f->root), 0);
}

/* What a test run as nobody works with: its own database, and collect options that count the
 * warnings. */
typedef struct nobody_run {
	char *db;
	hv_store *st;
	hv_collect_opts o;
	warnings warned;
} nobody_run;

/* Opens dbname in f's scratch directory; false (said on stderr) when it cannot. */
static bool nobody_begin(const fx *f, const char *dbname, nobody_run *nr)
{
	memset(nr, 0, sizeof(*nr));
	nr->db = tu_path(f->dir, dbname);
	hv_collect_opts_init(&nr->o);
	nr->o.on_warning = on_warning;
	nr->o.ctx = &nr->warned;
	if (hv_store_open(&nr->st, nr->db, 0) == HV_OK)
		return true;
	fprintf(stderr, "nobody: hv_store_open: %s\n", hv_error_last());
	nr->st = NULL;
	return false;
}

static void nobody_end(nobody_run *nr)
{
	hv_store_close(nr->st);
	free(nr->db);
}

/* A snapshot as nobody, which must give one warning holding `warning` and `entries` entries. */
struct nobody_snap {
	const fx *f;
	const char *db, *warning;
	uint64_t entries;
};

static int nobody_snapshot_warned(void *arg)
{
	const struct nobody_snap *x = arg;
	nobody_run nr;
	int64_t id = 0;
	uint64_t entries = 0;
	int ret = 0;
	if (!nobody_begin(x->f, x->db, &nr))
		ret = 50;
	else if (hv_snapshot_take(nr.st, x->f->root, &nr.o, &id, &entries, NULL) != HV_OK)
		ret = 51;
	else if (nr.warned.n != 1 || !strstr(nr.warned.last, x->warning))
		ret = 52;
	else if (entries != x->entries || id <= 0)
		ret = 53;
	if (ret)
		fprintf(stderr, "nobody: %d warnings (%s), %llu entries: %s\n", nr.warned.n,
			nr.warned.last, (unsigned long long)entries, hv_error_last());
	nobody_end(&nr);
	return ret;
}

/* A snapshot as nobody of a tree with a directory it cannot read: a warning naming it, and the
 * snapshot of the rest (the directory itself included) is still taken. Then a directory nobody
 * may list but not search: its entries cannot be examined, so the snapshot lacks them; warned
 * of (exit 1), never a silent gap a collect would fill with "created". */
static void test_snapshot_unreadable_as_nobody(void **state)
{
	fx *f = *state;
	wr(f, "open.txt", "readable\n");
	mkd(f, "closeddir");
	wr(f, "closeddir/inside.txt", "hidden by its directory\n");
	char *p = rp(f, "closeddir");
	assert_int_equal(chmod(p, 0), 0); /* unreadable even to its owner, when not root */
	assert_int_equal(chmod(f->dir, 0777), 0); /* where nobody makes its database */
	/* open.txt and closeddir */
	struct nobody_snap x = {f, "nobody.db", "/closeddir: Permission denied", 2};
	int rc = tu_as_nobody(nobody_snapshot_warned, &x);
	assert_int_equal(chmod(p, 0755), 0);
	free(p);
	assert_int_equal(rc, 0);

	mkd(f, "listonly");
	wr(f, "listonly/f.txt", "there all along\n");
	p = rp(f, "listonly");
	assert_int_equal(chmod(p, 0444), 0);
	/* open.txt, closeddir, closeddir/inside.txt, listonly */
	x = (struct nobody_snap){f, "nobody2.db", "/listonly/f.txt: Permission denied", 4};
	rc = tu_as_nobody(nobody_snapshot_warned, &x);
	assert_int_equal(chmod(p, 0755), 0);
	free(p);
	assert_int_equal(rc, 0);
}

/* Collected against a snapshot, as nobody, after a directory became unreadable: what the
 * snapshot held below it is not called deleted (the walk could not look: it may all be there),
 * only warned about; a file removed elsewhere is deleted. */
static int nobody_since_unreadable(void *arg)
{
	const fx *f = arg;
	char *closed = rp(f, "b-closed"), *gone = rp(f, "gone.txt");
	nobody_run nr;
	hv_collection *c = NULL;
	int64_t id = 0;
	uint64_t entries = 0;
	int ret = 0;
	if (!nobody_begin(f, "nobody-since.db", &nr))
		ret = 60;
	else if (hv_snapshot_take(nr.st, f->root, &nr.o, &id, &entries, NULL) != HV_OK ||
		 nr.warned.n)
		ret = 61;
	else if (unlink(gone) != 0 || chmod(closed, 0) != 0)
		ret = 62;
	nr.o.since_snapshot = id;
	if (!ret && hv_collect(nr.st, f->root, &nr.o, &c) != HV_OK)
		ret = 63;
	else if (!ret && (!c->compared || c->n_deleted != 1 ||
			  strcmp(c->deleted[0].path, "gone.txt") != 0))
		ret = 64;
	else if (!ret && (nr.warned.n != 1 || !strstr(nr.warned.last, "b-closed") ||
			  !strstr(nr.warned.last, "Permission denied")))
		ret = 65;
	if (ret)
		fprintf(stderr, "nobody: %zu deleted (%s), %d warnings (%s): %s\n",
			c ? c->n_deleted : 0, c && c->n_deleted ? c->deleted[0].path : "-",
			nr.warned.n, nr.warned.last, hv_error_last());
	(void)chmod(closed, 0755);
	hv_collection_free(c);
	nobody_end(&nr);
	free(gone);
	free(closed);
	return ret;
}

static void test_since_unreadable_as_nobody(void **state)
{
	fx *f = *state;
	/* a-open/ before it and c-after.txt after it in the walk's order: the directories on
	 * either side are read as usual */
	mkd(f, "a-open");
	mkd(f, "b-closed");
	mkd(f, "b-closed/deeper");
	wr(f, "a-open/x.txt", "x\n");
	wr(f, "b-closed/inside.txt", "hidden by its directory\n");
	wr(f, "b-closed/deeper/more.txt", "and this\n");
	wr(f, "c-after.txt", "after\n");
	wr(f, "gone.txt", "removed by the run\n");
	const char *mine[] = {"b-closed", "b-closed/inside.txt", "b-closed/deeper",
			      "b-closed/deeper/more.txt"};
	for (size_t i = 0; i < 4; i++) {
		char *p = rp(f, mine[i]);
		assert_int_equal(lchown(p, 65534, 65534), 0); /* nobody may chmod it */
		free(p);
	}
	assert_int_equal(chmod(f->root, 0777), 0); /* nobody removes gone.txt */
	assert_int_equal(chmod(f->dir, 0777), 0);  /* where nobody makes its database */
	int rc = tu_as_nobody(nobody_since_unreadable, f);
	char *p = rp(f, "b-closed");
	assert_int_equal(chmod(p, 0755), 0);
	free(p);
	assert_int_equal(rc, 0);
}

/* A directory nobody could not read when the snapshot was taken and can when it collects: its
 * files have no before-state and are called created, and the collect says so, once for the
 * directory (a stored snapshot and one in memory alike); one read both times is as usual. */
static int nobody_unreadable_before(void *arg)
{
	const fx *f = arg;
	char *shut = rp(f, "shut");
	nobody_run nr;
	hv_mem_snapshot *mem = NULL;
	hv_collection *c = NULL;
	int64_t id = 0;
	uint64_t entries = 0;
	int ret = 0;
	if (!nobody_begin(f, "nobody-before.db", &nr))
		ret = 70;
	else if (chmod(shut, 0) != 0 ||
		 hv_snapshot_take(nr.st, f->root, &nr.o, &id, &entries, NULL) != HV_OK ||
		 hv_snapshot_take_mem(nr.st, f->root, &nr.o, &mem) != HV_OK || nr.warned.n != 2 ||
		 chmod(shut, 0755) != 0)
		ret = 71;
	for (int stored = 0; !ret && stored < 2; stored++) {
		nr.warned.n = 0;
		nr.o.since_snapshot = id;
		if ((stored ? hv_collect(nr.st, f->root, &nr.o, &c)
			    : hv_collect_since_mem(nr.st, f->root, &nr.o, mem, &c)) != HV_OK)
			ret = 72;
		else if (c->n_files != 2 || strcmp(c->files[0].change, "created") != 0 ||
			 c->warnings != 1 || nr.warned.n != 1 ||
			 !strstr(nr.warned.last, "/shut: not read when the snapshot was taken: the "
						 "files below it are called created, new or not"))
			ret = 73;
		if (ret)
			fprintf(stderr, "nobody (%s): %zu files, %d warnings (%s): %s\n",
				stored ? "stored" : "memory", c ? c->n_files : 0, nr.warned.n,
				nr.warned.last, hv_error_last());
		hv_collection_free(c);
		c = NULL;
	}
	hv_mem_snapshot_free(mem);
	nobody_end(&nr);
	free(shut);
	return ret;
}

static void test_unreadable_before_as_nobody(void **state)
{
	fx *f = *state;
	wr(f, "open.txt", "read both times\n");
	mkd(f, "shut");
	wr(f, "shut/a.txt", "there all along\n");
	wr(f, "shut/b.txt", "and this\n");
	char *p = rp(f, "shut");
	assert_int_equal(lchown(p, 65534, 65534), 0); /* nobody may chmod it */
	assert_int_equal(chmod(f->dir, 0777), 0);     /* where nobody makes its database */
	int rc = tu_as_nobody(nobody_unreadable_before, f);
	assert_int_equal(chmod(p, 0755), 0);
	free(p);
	assert_int_equal(rc, 0);
}

/* A directory whose listing names a subdirectory nobody cannot lstat (lo is listed, not
 * searched): the walk does not enter sub and says so once. Collected against a snapshot taken
 * while it could: sub's file is not called deleted. A snapshot taken while it cannot: one
 * warning, and sub recorded as not read, which the next collect names. */
static int nobody_unexamined_dir(void *arg)
{
	const fx *f = arg;
	char *lo = rp(f, "lo");
	nobody_run nr;
	hv_collection *c = NULL;
	int64_t id = 0, id2 = 0;
	uint64_t entries = 0;
	int ret = 0;
	if (!nobody_begin(f, "nobody-unexamined.db", &nr))
		ret = 80;
	else if (hv_snapshot_take(nr.st, f->root, &nr.o, &id, &entries, NULL) != HV_OK ||
		 nr.warned.n || chmod(lo, 0444) != 0)
		ret = 81;
	nr.o.since_snapshot = id;
	if (!ret && hv_collect(nr.st, f->root, &nr.o, &c) != HV_OK)
		ret = 82;
	else if (!ret && (c->n_deleted != 0 || nr.warned.n != 1 ||
			  !strstr(nr.warned.last, "/lo/sub: not entered")))
		ret = 83;
	hv_collection_free(c);
	c = NULL;
	if (!ret) {
		nr.warned.n = 0;
		nr.o.since_snapshot = 0;
		if (hv_snapshot_take(nr.st, f->root, &nr.o, &id2, &entries, NULL) != HV_OK ||
		    nr.warned.n != 1 || !strstr(nr.warned.last, "/lo/sub: not entered") ||
		    chmod(lo, 0755) != 0)
			ret = 84;
	}
	nr.warned.n = 0;
	nr.o.since_snapshot = id2;
	if (!ret && hv_collect(nr.st, f->root, &nr.o, &c) != HV_OK)
		ret = 85;
	else if (!ret && (c->n_files != 1 || strcmp(c->files[0].path, "lo/sub/g.txt") != 0 ||
			  nr.warned.n != 1 ||
			  !strstr(nr.warned.last, "/lo/sub: not read when the snapshot was taken")))
		ret = 86;
	if (ret)
		fprintf(stderr, "nobody: %d: %zu deleted, %d warnings (%s): %s\n", ret,
			c ? c->n_deleted : 0, nr.warned.n, nr.warned.last, hv_error_last());
	(void)chmod(lo, 0755);
	hv_collection_free(c);
	nobody_end(&nr);
	free(lo);
	return ret;
}

static void test_unexamined_dir_as_nobody(void **state)
{
	fx *f = *state;
	wr(f, "keep.txt", "read every time\n");
	mkd(f, "lo");
	mkd(f, "lo/sub");
	wr(f, "lo/sub/g.txt", "there all along\n");
	char *p = rp(f, "lo");
	assert_int_equal(lchown(p, 65534, 65534), 0); /* nobody may chmod it */
	assert_int_equal(chmod(f->dir, 0777), 0);     /* where nobody makes its database */
	int rc = tu_as_nobody(nobody_unexamined_dir, f);
	assert_int_equal(chmod(p, 0755), 0);
	free(p);
	assert_int_equal(rc, 0);
}

/* A directory nobody can list but not search (0444) when the snapshot is taken: its files
 * have no before-state in a stored snapshot. It warns of each and records the directory as
 * not read, so a collect once it can be searched calls the files created and says why,
 * rather than calling them created in silence. A snapshot in memory knows them by name
 * (their ctimes say they are unchanged since): nothing is produced, nothing warned of. */
static int nobody_unsearchable_files(void *arg)
{
	const fx *f = arg;
	char *nx = rp(f, "nx");
	nobody_run nr;
	hv_mem_snapshot *mem = NULL;
	hv_collection *c = NULL;
	int64_t id = 0;
	uint64_t entries = 0;
	int ret = 0;
	if (!nobody_begin(f, "nobody-unsearchable.db", &nr))
		ret = 90;
	else if (chmod(nx, 0444) != 0 ||
		 hv_snapshot_take(nr.st, f->root, &nr.o, &id, &entries, NULL) != HV_OK ||
		 hv_snapshot_take_mem(nr.st, f->root, &nr.o, &mem) != HV_OK ||
		 nr.warned.n != 2 || !strstr(nr.warned.last, "/nx/q") ||
		 chmod(nx, 0755) != 0)
		ret = 91;
	for (int stored = 0; !ret && stored < 2; stored++) {
		nr.warned.n = 0;
		nr.o.since_snapshot = id;
		if ((stored ? hv_collect(nr.st, f->root, &nr.o, &c)
			    : hv_collect_since_mem(nr.st, f->root, &nr.o, mem, &c)) != HV_OK)
			ret = 92;
		else if (stored && (c->n_files != 2 || strcmp(c->files[0].change, "created") != 0 ||
				    strncmp(c->files[0].path, "nx/q", 4) != 0 || c->warnings != 1 ||
				    nr.warned.n != 1 ||
				    !strstr(nr.warned.last, "/nx: not read when the snapshot was taken: "
							    "the files below it are called created, "
							    "new or not")))
			ret = 93;
		else if (!stored && (c->n_files != 0 || c->warnings != 0 || nr.warned.n != 0))
			ret = 94;
		if (ret)
			fprintf(stderr, "nobody (%s): %zu files, %d warnings (%s): %s\n",
				stored ? "stored" : "memory", c ? c->n_files : 0, nr.warned.n,
				nr.warned.last, hv_error_last());
		hv_collection_free(c);
		c = NULL;
	}
	(void)chmod(nx, 0755);
	hv_mem_snapshot_free(mem);
	nobody_end(&nr);
	free(nx);
	return ret;
}

static void test_unsearchable_files_as_nobody(void **state)
{
	fx *f = *state;
	wr(f, "open.txt", "read both times\n");
	mkd(f, "nx");
	wr(f, "nx/q1.txt", "there all along\n");
	wr(f, "nx/q2.txt", "and this\n");
	char *p = rp(f, "nx");
	assert_int_equal(lchown(p, 65534, 65534), 0); /* nobody may chmod it */
	assert_int_equal(chmod(f->dir, 0777), 0);     /* where nobody makes its database */
	int rc = tu_as_nobody(nobody_unsearchable_files, f);
	assert_int_equal(chmod(p, 0755), 0);
	free(p);
	assert_int_equal(rc, 0);
}

/* ---- limits ------------------------------------------------------------------------------------ */

static void fill(const fx *f, const char *rel, size_t n, char ch)
{
	char *buf = malloc(n ? n : 1);
	memset(buf, ch, n);
	tu_write(f->root, rel, buf, n);
	free(buf);
}

static void test_limit_max_file_bytes(void **state)
{
	fx *f = *state;
	fill(f, "big.bin", 200, 'b');
	fill(f, "exact.bin", 100, 'e');
	fill(f, "small.bin", 10, 's');
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.max_file_bytes = 100;
	hv_collection *c = collect(f, &o);
	const char *files[] = {"exact.bin", "small.bin", NULL};
	const skip_want sk[] = {{"big.bin", "too_large"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	assert_true(find_skipped(c, "big.bin")->has_size);
	assert_int_equal(find_skipped(c, "big.bin")->size, 200);
	assert_true(c->incomplete);
	cfree(c);

	/* Under a snapshot too. */
	o.max_file_bytes = 100;
	int64_t id = snapshot(f, &o, NULL);
	next_tick();
	fill(f, "big2.bin", 150, 'c');
	o.since_snapshot = id;
	c = collect(f, &o);
	const skip_want sk2[] = {{"big2.bin", "too_large"}, {NULL, NULL}};
	assert_collection(c, NULL, sk2);
	assert_true(c->incomplete);
	cfree(c);

	/* Complete: a symlink alone does not make a collection incomplete. */
	o.since_snapshot = 0;
	o.max_file_bytes = 1000;
	char *p = rp(f, "link");
	assert_int_equal(symlink("small.bin", p), 0);
	free(p);
	c = collect(f, &o);
	const char *all[] = {"big.bin", "exact.bin", "small.bin", "big2.bin", NULL};
	const skip_want sk3[] = {{"link", "symlink"}, {NULL, NULL}};
	assert_collection(c, all, sk3);
	assert_false(c->incomplete);
	cfree(c);
}

static void test_limit_max_files(void **state)
{
	fx *f = *state;
	wr(f, "a", "1");
	wr(f, "b", "2");
	wr(f, "c", "3");
	wr(f, "d", "4");
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.max_files = 2;
	hv_collection *c = collect(f, &o);
	const char *files[] = {"a", "b", NULL};
	const skip_want sk[] = {{"c", "limit"}, {"d", "limit"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	assert_true(c->incomplete);
	assert_int_equal(find_skipped(c, "c")->size, 1);
	cfree(c);

	o.max_files = 4;
	c = collect(f, &o);
	assert_int_equal(c->n_files, 4);
	assert_false(c->incomplete);
	cfree(c);
}

static void test_limit_max_total_bytes(void **state)
{
	fx *f = *state;
	fill(f, "a", 100, 'a');
	fill(f, "b", 100, 'b');
	fill(f, "c", 100, 'c');
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.max_total_bytes = 250;
	hv_collection *c = collect(f, &o);
	const char *files[] = {"a", "b", NULL};
	const skip_want sk[] = {{"c", "limit"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	assert_true(c->incomplete);
	assert_int_equal(find_skipped(c, "c")->size, 100);
	uint64_t total = 0;
	for (size_t i = 0; i < c->n_files; i++)
		total += c->files[i].content_len;
	assert_true(total <= 250);
	cfree(c);

	o.max_total_bytes = 300;
	c = collect(f, &o);
	assert_int_equal(c->n_files, 3);
	assert_false(c->incomplete);
	cfree(c);
}

static void test_sparse_100g(void **state)
{
	fx *f = *state;
	wr(f, "small.txt", "small\n");
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	int64_t id = snapshot(f, &o, NULL);
	char *p = rp(f, "huge.bin");
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	const off_t size = (off_t)100 << 30;
	if (ftruncate(fd, size) != 0)
		fail_msg("ftruncate 100 GB: %s", strerror(errno));
	close(fd);
	free(p);

	hook h;
	hook_init(&h, f, NULL, SWAP_NONE);
	opts_with_hook(&o, &h);
	double t0 = tu_now_s();
	hv_collection *c = collect(f, &o);
	double dt = tu_now_s() - t0;
	const char *files[] = {"small.txt", NULL};
	const skip_want sk[] = {{"huge.bin", "too_large"}, {NULL, NULL}};
	assert_collection(c, files, sk);
	assert_int_equal(find_skipped(c, "huge.bin")->size, (uint64_t)size);
	assert_true(c->incomplete);
	for (int i = 0; i < h.calls && i < 64; i++)
		assert_string_not_equal(h.opened[i], "huge.bin");
	if (dt > 5.0)
		fail_msg("collect with a 100 GB file took %.1f s", dt);
	cfree(c);

	/* Since the snapshot (taken before it existed), and a snapshot now (it is racy, but
	 * too large to hash): both fast. */
	o.since_snapshot = id;
	t0 = tu_now_s();
	c = collect(f, &o);
	assert_collection(c, NULL, sk);
	cfree(c);
	o.since_snapshot = 0;
	(void)snapshot(f, &o, NULL);
	dt = tu_now_s() - t0;
	if (dt > 5.0)
		fail_msg("since-collect + snapshot with a 100 GB file took %.1f s", dt);

	/* No per-file limit: the total limit stops it, still without reading. */
	hook_init(&h, f, NULL, SWAP_NONE);
	opts_with_hook(&o, &h);
	o.max_file_bytes = UINT64_MAX;
	t0 = tu_now_s();
	c = collect(f, &o);
	dt = tu_now_s() - t0;
	const skip_want sk2[] = {{"huge.bin", "limit"}, {NULL, NULL}};
	assert_collection(c, files, sk2);
	for (int i = 0; i < h.calls && i < 64; i++)
		assert_string_not_equal(h.opened[i], "huge.bin");
	if (dt > 5.0)
		fail_msg("collect (no file limit) with a 100 GB file took %.1f s", dt);
	cfree(c);
}

/* ---- excludes ---------------------------------------------------------------------------------- */

static void test_excludes(void **state)
{
	fx *f = *state;
	wr(f, "a.txt", "a");
	wr(f, ".hidden", "h");
	mkd(f, ".hiddendir");
	wr(f, ".hiddendir/x.txt", "x");
	char *p = rp(f, ".hiddendir/fifo");
	assert_int_equal(mkfifo(p, 0644), 0);
	free(p);
	p = rp(f, ".hlink");
	assert_int_equal(symlink("a.txt", p), 0);
	free(p);
	mkd(f, "__pycache__");
	wr(f, "__pycache__/m.cpython-311.pyc", "pyc");
	mkd(f, "sub");
	wr(f, "sub/b.txt", "b");
	wr(f, "sub/.env", "SECRET=1");
	mkd(f, "sub/__pycache__");
	wr(f, "sub/__pycache__/n.pyc", "pyc");
	wr(f, "run.log", "log");
	mkd(f, "build");
	wr(f, "build/out.o", "obj");
	p = rp(f, "build/link");
	assert_int_equal(symlink("/etc/passwd", p), 0);
	free(p);

	alarm(20);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	hv_collection *c = collect(f, &o);
	const char *def[] = {"a.txt", "sub/b.txt", "run.log", "build/out.o", NULL};
	const skip_want defsk[] = {{"build/link", "symlink"}, {NULL, NULL}};
	assert_collection(c, def, defsk);
	cfree(c);

	o.include_hidden = true;
	c = collect(f, &o);
	const char *all[] = {"a.txt",
			     ".hidden",
			     ".hiddendir/x.txt",
			     "__pycache__/m.cpython-311.pyc",
			     "sub/b.txt",
			     "sub/.env",
			     "sub/__pycache__/n.pyc",
			     "run.log",
			     "build/out.o",
			     NULL};
	const skip_want allsk[] = {{".hiddendir/fifo", "not_regular"},
				   {".hlink", "symlink"},
				   {"build/link", "symlink"},
				   {NULL, NULL}};
	assert_collection(c, all, allsk);
	cfree(c);

	/* Extra excludes: on names, an excluded directory not entered (its link not skipped). */
	const char *ex[] = {"*.log", "build"};
	o.include_hidden = false;
	o.excludes = ex;
	o.n_excludes = 2;
	c = collect(f, &o);
	const char *some[] = {"a.txt", "sub/b.txt", NULL};
	assert_collection(c, some, NULL);
	cfree(c);

	o.include_hidden = true;
	c = collect(f, &o);
	const char *some2[] = {"a.txt",     ".hidden",  ".hiddendir/x.txt", "__pycache__/m.cpython-311.pyc",
			       "sub/b.txt", "sub/.env", "sub/__pycache__/n.pyc", NULL};
	const skip_want some2sk[] = {{".hiddendir/fifo", "not_regular"}, {".hlink", "symlink"},
				     {NULL, NULL}};
	assert_collection(c, some2, some2sk);
	cfree(c);

	/* The snapshot uses the same excludes: a change in an excluded place is not produced. */
	o.include_hidden = false;
	o.excludes = NULL;
	o.n_excludes = 0;
	int64_t id = snapshot(f, &o, NULL);
	next_tick();
	wr(f, ".hidden", "changed");
	wr(f, "sub/__pycache__/n.pyc", "changed");
	wr(f, "sub/new.txt", "new");
	o.since_snapshot = id;
	c = collect(f, &o);
	const char *nw[] = {"sub/new.txt", NULL};
	assert_collection(c, nw, NULL);
	cfree(c);

	/* Excludes apply below the root, never to the root's own name. */
	o.since_snapshot = 0;
	const char *ex_root[] = {"root"};
	o.excludes = ex_root;
	o.n_excludes = 1;
	c = collect(f, &o);
	assert_non_null(find_file(c, "a.txt"));
	cfree(c);
	tu_mkdir(f->dir, ".hiddenroot");
	char *hroot = tu_path(f->dir, ".hiddenroot");
	tu_write(hroot, "x.txt", "x", 1);
	o.excludes = NULL;
	o.n_excludes = 0;
	c = collect_st(f->st, hroot, &o);
	const char *hx[] = {"x.txt", NULL};
	assert_collection(c, hx, NULL);
	cfree(c);
	free(hroot);
	alarm(0);
}

/* ---- the database's own files ---------------------------------------------------------------- */

static void test_db_inside_root(void **state)
{
	fx *f = *state;
	wr(f, "a.txt", "artifact\n");
	mkd(f, "sub");
	wr(f, "sub/harvest.db-wal", "not ours: another directory\n");
	wr(f, "harvest.db.bak", "not ours: another name\n");
	wr(f, "harvest.db-walx", "not ours: another suffix\n");
	char *db = rp(f, "harvest.db");
	hv_store *st;
	assert_int_equal(hv_store_open(&st, db, 0), HV_OK);
	/* A journal made by hand next to it (SQLite's rollback journal name). */
	wr(f, "harvest.db-journal", "journal bytes\n");
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	int64_t id = 0;
	assert_int_equal(hv_snapshot_take(st, f->root, &o, &id, NULL, NULL), HV_OK);
	/* The store is busy: a WAL file exists now. */
	char *wal = rp(f, "harvest.db-wal");
	struct stat sb;
	assert_int_equal(lstat(wal, &sb), 0);
	free(wal);

	const char *files[] = {"a.txt", "sub/harvest.db-wal", "harvest.db.bak", "harvest.db-walx",
			       NULL};
	hv_collection *c = collect_st(st, f->root, &o);
	assert_collection(c, files, NULL);
	int64_t run = 0;
	assert_int_equal(hv_collection_record(st, c, NULL, NULL, &run), HV_OK);
	cfree(c);

	/* Since the snapshot: the database changed (it recorded a run), yet nothing of it shows. */
	wr(f, "new.txt", "new\n");
	o.since_snapshot = id;
	c = collect_st(st, f->root, &o);
	const char *nw[] = {"new.txt", NULL};
	assert_collection(c, nw, NULL);
	cfree(c);

	/* Through a symlinked path to the root, and a journal made after the store opened. */
	char *journal = rp(f, "harvest.db-journal");
	assert_int_equal(unlink(journal), 0);
	free(journal);
	char *link = tu_path(f->dir, "rootlink");
	assert_int_equal(symlink(f->root, link), 0);
	wr(f, "harvest.db-journal", "journal again\n");
	o.since_snapshot = 0;
	c = collect_st(st, link, &o);
	const char *files2[] = {"a.txt",           "sub/harvest.db-wal", "harvest.db.bak",
				"harvest.db-walx", "new.txt",            NULL};
	assert_collection(c, files2, NULL);
	cfree(c);
	hv_store_close(st);
	free(link);
	free(db);
}

static void test_db_in_subdir(void **state)
{
	/* The database below the root, opened by a path through a symlinked directory. */
	fx *f = *state;
	wr(f, "a.txt", "artifact\n");
	mkd(f, "data");
	char *link = tu_path(f->dir, "datalink");
	char *data = rp(f, "data");
	assert_int_equal(symlink(data, link), 0);
	char *db = tu_path(link, "h.db");
	hv_store *st;
	assert_int_equal(hv_store_open(&st, db, 0), HV_OK);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	int64_t id = 0;
	assert_int_equal(hv_snapshot_take(st, f->root, &o, &id, NULL, NULL), HV_OK);
	wr(f, "data/h.db-journal", "journal\n");
	wr(f, "data/h.db-shm2", "not ours\n");
	hv_collection *c = collect_st(st, f->root, &o);
	const char *files[] = {"a.txt", "data/h.db-shm2", NULL};
	assert_collection(c, files, NULL);
	cfree(c);
	hv_store_close(st);
	free(db);
	free(data);
	free(link);
}

static void test_db_symlinked_file(void **state)
{
	/* The database opened by a path that is a symlink to a file inside the root. */
	fx *f = *state;
	wr(f, "a.txt", "artifact\n");
	char *real = rp(f, "real.db");
	char *link = tu_path(f->dir, "link.db");
	assert_int_equal(symlink(real, link), 0);
	/* (Created through its real path: hv_store_open through a dangling link fails with "the
	 * new database vanished", a store matter outside this test.) */
	hv_store *st;
	assert_int_equal(hv_store_open(&st, real, 0), HV_OK);
	hv_store_close(st);
	assert_int_equal(hv_store_open(&st, link, 0), HV_OK);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	int64_t id = 0;
	assert_int_equal(hv_snapshot_take(st, f->root, &o, &id, NULL, NULL), HV_OK);
	wr(f, "real.db-journal", "journal\n");
	hv_collection *c = collect_st(st, f->root, &o);
	const char *files[] = {"a.txt", NULL};
	assert_collection(c, files, NULL);
	cfree(c);
	hv_store_close(st);
	free(real);
	free(link);
}

/* ---- hv_collection_record ------------------------------------------------------------------- */

static int64_t count_rows(const char *db, const char *sql)
{
	sqlite3 *h;
	assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	int64_t n = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(h);
	return n;
}

/* A --no-content collect of f's tree, excluding what *exclude matches (if not NULL): it must
 * hold `files` text files; the number of files it opened. */
static int no_content_opens(const fx *f, int max, const char **exclude, size_t files)
{
	hook h;
	hv_collect_opts o;
	hook_init(&h, f, NULL, SWAP_NONE);
	opts_with_hook(&o, &h);
	o.no_content = true;
	o.max_files = 10 * (uint64_t)max;
	o.excludes = exclude;
	o.n_excludes = exclude ? 1 : 0;
	hv_collection *c = collect(f, &o);
	assert_int_equal(c->n_files, files);
	for (size_t i = 0; i < c->n_files; i++)
		assert_string_equal(c->files[i].mime_type, "text/plain");
	cfree(c);
	return h.calls;
}

/* A --no-content collect looks its cached answers up in shared read transactions, which end
 * before an answer is written: half the files cached, the other half new, interleaved by
 * name, more than a write batch (256) and a transaction's share (1,024) of each. Every new
 * answer reaches the cache (none lost to a write begun inside the read), and the next
 * collect opens nothing. */
static void test_no_content_reads_then_writes(void **state)
{
	fx *f = *state;
	enum { N = 2200 };
	for (int i = 0; i < N; i++) {
		char name[32], text[32];
		snprintf(name, sizeof(name), "f%04d-%c.txt", i, i % 2 ? 'o' : 'e');
		snprintf(text, sizeof(text), "file %d\n", i);
		wr(f, name, text);
	}
	age_files();
	/* The even ones first: the odd ones excluded by name; no file cached, each one opened. */
	const char *odd[] = {"*-o.txt"};
	assert_int_equal(no_content_opens(f, N, odd, N / 2), N / 2);
	assert_int_equal(count_rows(f->db, "SELECT count(*) FROM mime_cache"), N / 2);
	/* All of them: the even ones are hits, the odd ones are opened and their answers put. */
	assert_int_equal(no_content_opens(f, N, NULL, N), N / 2);
	assert_int_equal(count_rows(f->db, "SELECT count(*) FROM mime_cache"), N);
	assert_int_equal(no_content_opens(f, N, NULL, N), 0);
}

/* A content over HV_STORE_CONTENT_MAX: its artifact is recorded without it (the run is
 * recorded all the same), and hv_collection_unstored says so; the others are stored. The
 * large file's bytes are never read (only its length is over the bound). */
static void test_record_content_too_large(void **state)
{
	fx *f = *state;
	static char small[] = "small\n";
	char sha_small[65], sha_big[65];
	tu_sha256_hex(small, strlen(small), sha_small);
	memset(sha_big, 'b', 64);
	sha_big[64] = '\0';
	hv_output_file files[2] = {
		{.path = (char *)"big.bin", .path_len = 7, .name = (char *)"big.bin", .name_len = 7,
		 .mime_type = (char *)"application/octet-stream",
		 .size = (uint64_t)HV_STORE_CONTENT_MAX + 1, .content = (unsigned char *)small,
		 .content_len = (size_t)HV_STORE_CONTENT_MAX + 1},
		{.path = (char *)"small.txt", .path_len = 9, .name = (char *)"small.txt",
		 .name_len = 9, .mime_type = (char *)"text/plain", .size = strlen(small),
		 .content = (unsigned char *)small, .content_len = strlen(small)},
	};
	memcpy(files[0].sha256, sha_big, 65);
	memcpy(files[1].sha256, sha_small, 65);
	hv_collection c = {.root = (char *)"/w", .files = files, .n_files = 2};
	assert_true(hv_collection_unstored(&c, 0));
	assert_false(hv_collection_unstored(&c, 1));
	int64_t run = 0;
	assert_int_equal(hv_collection_record(f->st, &c, NULL, NULL, &run), HV_OK);
	hv_artifact_filter af = {.run_id = run, .with_content = true};
	hv_artifact_iter *it;
	assert_int_equal(hv_store_artifacts(f->st, &af, &it), HV_OK);
	const hv_artifact_row *r;
	assert_int_equal(hv_artifact_iter_next(it, &r), HV_OK);
	assert_memory_equal(r->path, "big.bin", 7);
	assert_int_equal(r->size, (uint64_t)HV_STORE_CONTENT_MAX + 1);
	assert_false(r->content_stored);
	assert_int_equal(hv_artifact_iter_next(it, &r), HV_OK);
	assert_memory_equal(r->path, "small.txt", 9);
	assert_true(r->content_stored);
	assert_int_equal(r->content_len, strlen(small));
	assert_int_equal(hv_artifact_iter_next(it, &r), HV_DONE);
	hv_artifact_iter_free(it);
}

static void test_record(void **state)
{
	fx *f = *state;
	wr(f, "one.txt", "identical bytes\n");
	mkd(f, "sub");
	wr(f, "sub/two.txt", "identical bytes\n");
	wr(f, "three.md", "# other\n");
	char *p = rp(f, "link");
	assert_int_equal(symlink("one.txt", p), 0);
	free(p);
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	hv_collection *c = collect(f, &o);
	assert_int_equal(c->n_files, 3);
	hv_run_start start = {.label = "the label"};
	int64_t run = 0;
	assert_int_equal(hv_collection_record(f->st, c, &start, NULL, &run), HV_OK);
	assert_true(run > 0);

	hv_artifact_filter af = {.run_id = run, .with_content = true};
	hv_artifact_iter *it;
	assert_int_equal(hv_store_artifacts(f->st, &af, &it), HV_OK);
	const hv_artifact_row *r;
	size_t n = 0;
	while (hv_artifact_iter_next(it, &r) == HV_OK) {
		/* In the order recorded: the collection's order. */
		assert_true(n < c->n_files);
		const hv_output_file *o2 = &c->files[n++];
		assert_int_equal(r->run_id, run);
		assert_int_equal(r->path_len, o2->path_len);
		assert_memory_equal(r->path, o2->path, o2->path_len);
		assert_int_equal(r->name_len, o2->name_len);
		assert_memory_equal(r->name, o2->name, o2->name_len);
		assert_string_equal(r->mime_type, o2->mime_type);
		assert_int_equal(r->size, o2->size);
		assert_string_equal(r->sha256, o2->sha256);
		assert_true(r->content_stored);
		assert_int_equal(r->content_len, o2->content_len);
		assert_memory_equal(r->content, o2->content, o2->content_len);
	}
	hv_artifact_iter_free(it);
	assert_int_equal(n, 3);

	/* One content for the two identical files. */
	void *data = NULL;
	size_t len = 0;
	assert_int_equal(hv_store_content_get(f->st, sha_of("identical bytes\n"), &data, &len),
			 HV_OK);
	assert_int_equal(len, strlen("identical bytes\n"));
	assert_memory_equal(data, "identical bytes\n", len);
	free(data);
	assert_int_equal(count_rows(f->db, "SELECT count(*) FROM contents"), 2);

	/* The run: a collect (no command, no exit code), its label, dir, count, skipped. */
	hv_run_filter rf = {.run_id = run, .with_output = true};
	hv_run_iter *ri;
	assert_int_equal(hv_store_runs(f->st, &rf, &ri), HV_OK);
	const hv_run_row *row;
	assert_int_equal(hv_run_iter_next(ri, &row), HV_OK);
	assert_int_equal(row->run_id, run);
	assert_null(row->command_json);
	assert_false(row->has_exit_code);
	assert_true(row->ended);
	assert_int_equal(row->artifacts, 3);
	assert_int_equal(row->label_len, strlen("the label"));
	assert_memory_equal(row->label, "the label", row->label_len);
	assert_int_equal(row->dir_len, strlen(c->root));
	assert_memory_equal(row->dir, c->root, row->dir_len);
	assert_non_null(row->skipped_json);
	assert_non_null(strstr(row->skipped_json, "\"link\""));
	assert_non_null(strstr(row->skipped_json, "\"symlink\""));
	assert_int_equal(hv_run_iter_next(ri, &row), HV_DONE);
	hv_run_iter_free(ri);
	cfree(c);

	/* Recorded again with --no-content: metadata only, the same contents table. */
	wr(f, "four.txt", "only metadata\n");
	o.no_content = true;
	c = collect(f, &o);
	int64_t run2 = 0;
	assert_int_equal(hv_collection_record(f->st, c, NULL, NULL, &run2), HV_OK);
	assert_true(run2 > run);
	af.run_id = run2;
	assert_int_equal(hv_store_artifacts(f->st, &af, &it), HV_OK);
	n = 0;
	while (hv_artifact_iter_next(it, &r) == HV_OK) {
		n++;
		assert_false(r->content_stored);
		assert_null(r->content);
	}
	hv_artifact_iter_free(it);
	assert_int_equal(n, 4);
	data = NULL;
	assert_int_equal(hv_store_content_get(f->st, sha_of("only metadata\n"), &data, &len),
			 HV_ENOTFOUND);
	free(data);
	assert_int_equal(count_rows(f->db, "SELECT count(*) FROM contents"), 2);
	cfree(c);
}

/* ---- hv_mime_detect_cached ----------------------------------------------------------------------- */

static const unsigned char PNG[] = {
	0x89, 'P',  'N',  'G',  0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 'I',  'H',
	'D',  'R',  0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
	0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 'I',  'D',  'A',  'T',  0x78,
	0x9c, 0x63, 0x00, 0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00,
	0x00, 0x00, 0x00, 'I',  'E',  'N',  'D',  0xae, 0x42, 0x60, 0x82,
};

#define N_MIME 5

typedef struct nobody_ctx {
	const char *db;
	const char *const *paths;
	char want[N_MIME][128];
} nobody_ctx;

static int nobody_uncached(void *arg)
{
	/* Proof that nobody cannot read the files: detection without the cache fails. */
	nobody_ctx *x = arg;
	hv_mime_result *res = NULL;
	int rc = hv_mime_detect_paths(x->paths, N_MIME, NULL, &res);
	if (rc < 0 || !res)
		return 10;
	int unread = 0;
	for (size_t i = 0; i < N_MIME; i++)
		if (res[i].status != HV_OK || !res[i].mime_type)
			unread++;
	hv_mime_results_free(res, N_MIME);
	return unread == N_MIME ? 0 : 11;
}

static int nobody_cached(void *arg)
{
	nobody_ctx *x = arg;
	hv_store *st;
	if (hv_store_open(&st, x->db, 0) != HV_OK) {
		fprintf(stderr, "nobody: hv_store_open: %s\n", hv_error_last());
		return 20;
	}
	hv_mime_result *res = NULL;
	int rc = hv_mime_detect_cached(st, x->paths, N_MIME, NULL, &res);
	if (rc != HV_WARN || !res) {
		fprintf(stderr, "nobody: hv_mime_detect_cached: %d %s\n", rc, hv_error_last());
		hv_store_close(st);
		return 21;
	}
	/* Each answer is cached (root's x->want), but nobody may not read the files: each is
	 * the error reading it gives, as without the cache, and no cached type is told. */
	int bad = 0;
	for (size_t i = 0; i < N_MIME; i++) {
		if (res[i].status == HV_OK || res[i].mime_type || !res[i].error ||
		    !strstr(res[i].error, strerror(EACCES))) {
			fprintf(stderr, "nobody: %s: got %s (%s), want %s\n", x->paths[i],
				res[i].mime_type ? res[i].mime_type : "NULL",
				res[i].error ? res[i].error : "", strerror(EACCES));
			bad++;
		}
	}
	hv_mime_results_free(res, N_MIME);
	hv_store_close(st);
	return bad ? 22 : 0;
}

static void test_mime_detect_cached(void **state)
{
	fx *f = *state;
	if (geteuid() != 0)
		skip();
	wr(f, "a.txt", "just some text\n");
	tu_write(f->root, "b.png", PNG, sizeof(PNG));
	wr(f, "c.md", "# Heading\n\ntext\n");
	wr(f, "d.json", "{\"k\": \"v\"}\n");
	static const unsigned char bin[] = {0x00, 0xff, 0x00, 0xfe, 0x01, 0x02};
	tu_write(f->root, "e.bin", bin, sizeof(bin));
	const char *rel[N_MIME] = {"a.txt", "b.png", "c.md", "d.json", "e.bin"};
	char *paths[N_MIME];
	for (size_t i = 0; i < N_MIME; i++) {
		paths[i] = rp(f, rel[i]);
		assert_int_equal(chmod(paths[i], 0600), 0); /* before caching: ctime settles */
	}
	/* The database where nobody may use it: its own directory, open to all. */
	tu_mkdir(f->dir, "dbdir");
	char *dbdir = tu_path(f->dir, "dbdir");
	assert_int_equal(chmod(dbdir, 0777), 0);
	char *db = tu_path(dbdir, "mime.db");
	age_files();

	hv_store *st;
	assert_int_equal(hv_store_open(&st, db, 0), HV_OK);
	hv_mime_result *first = NULL, *second = NULL, *plain = NULL;
	assert_int_equal(hv_mime_detect_cached(st, (const char *const *)paths, N_MIME, NULL, &first),
			 HV_OK);
	assert_int_equal(hv_mime_detect_paths((const char *const *)paths, N_MIME, NULL, &plain),
			 HV_OK);
	assert_int_equal(hv_mime_detect_cached(st, (const char *const *)paths, N_MIME, NULL,
					       &second),
			 HV_OK);
	nobody_ctx x = {.db = db, .paths = (const char *const *)paths};
	for (size_t i = 0; i < N_MIME; i++) {
		assert_non_null(first[i].mime_type);
		assert_non_null(second[i].mime_type);
		assert_string_equal(first[i].mime_type, plain[i].mime_type);
		assert_string_equal(second[i].mime_type, first[i].mime_type);
		snprintf(x.want[i], sizeof(x.want[i]), "%s", first[i].mime_type);
	}
	assert_string_equal(first[0].mime_type, "text/plain");
	assert_string_equal(first[1].mime_type, "image/png");
	assert_string_equal(first[2].mime_type, "text/markdown");
	assert_string_equal(first[3].mime_type, "application/json");
	hv_mime_results_free(first, N_MIME);
	hv_mime_results_free(second, N_MIME);
	hv_mime_results_free(plain, N_MIME);

	/* Raw answers come from the same cache entries. */
	hv_mime_opts mo;
	hv_mime_opts_init(&mo);
	mo.raw = true;
	hv_mime_result *raw = NULL;
	assert_int_equal(hv_mime_detect_cached(st, (const char *const *)paths, N_MIME, &mo, &raw),
			 HV_OK);
	assert_string_equal(raw[2].mime_type, "text/plain");
	assert_string_equal(raw[1].mime_type, "image/png");
	hv_mime_results_free(raw, N_MIME);
	assert_int_equal(hv_store_close(st), HV_OK);
	assert_int_equal(chmod(db, 0666), 0);

	/* As nobody: the files cannot be read, and the cache answers none of them. */
	assert_int_equal(tu_as_nobody(nobody_uncached, &x), 0);
	assert_int_equal(tu_as_nobody(nobody_cached, &x), 0);

	for (size_t i = 0; i < N_MIME; i++)
		free(paths[i]);
	free(db);
	free(dbdir);
}

/* The descriptors hv__free_fds counts: the open ones below the soft limit, read from
 * /proc/self/fd, and asked of each slot when /proc cannot be opened (here: no descriptor
 * left to open it with). */
static int open_below(int limit)
{
	int used = 0;
	for (int fd = 0; fd < limit; fd++)
		used += fcntl(fd, F_GETFD) != -1;
	return used;
}

static void test_free_fds(void **state)
{
	(void)state;
	struct rlimit saved;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
	struct rlimit low = saved;
	low.rlim_cur = 64;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);

	int limit = 0;
	int before = hv__free_fds(&limit);
	assert_int_equal(limit, 64);
	assert_int_equal(before, 64 - open_below(64));
	assert_true(before > 5);

	int extra[64], n = 0;
	for (; n < 5; n++)
		assert_true((extra[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
	assert_int_equal(hv__free_fds(&limit), before - 5);

	/* none left: opendir fails with EMFILE and each slot is asked */
	int fd;
	while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		extra[n++] = fd;
	assert_int_equal(errno, EMFILE);
	assert_int_equal(hv__free_fds(&limit), 0);
	close(extra[--n]);
	assert_int_equal(hv__free_fds(&limit), 1);

	while (n > 0)
		close(extra[--n]);
	assert_int_equal(hv__free_fds(&limit), before);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_collect_all, tu_fx_setup, teardown),
		cmocka_unit_test(test_free_fds),
		cmocka_unit_test_setup_teardown(test_spool_content, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_spool_file_grows, tu_fx_setup, teardown),
		cmocka_unit_test(test_proc_sys_files),
		cmocka_unit_test_setup_teardown(test_collect_errors, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_null_opts_are_defaults, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_since_other_directory, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_fifo, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_fifo_no_content, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_symlink, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_parent_dir_for_symlink, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_bigger, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_bigger_past_total_limit, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_vanish, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_dir, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_socket, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_produced_set, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_mem_snapshot_by_names, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_mem_snapshot_deep, tu_fx_setup, teardown),
		cmocka_unit_test(test_mem_snapshot_clock),
		cmocka_unit_test_setup_teardown(test_produced_merge_order, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_racy_rule, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_content_cache_hit, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_content_young_files_opened, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_content_after_mime_cache, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_content_as_nobody, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_unreadable_as_nobody, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_unreadable_as_nobody, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_since_unreadable_as_nobody, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_unreadable_before_as_nobody, tu_fx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_unexamined_dir_as_nobody, tu_fx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_unsearchable_files_as_nobody, tu_fx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_limit_max_file_bytes, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_limit_max_files, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_limit_max_total_bytes, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_sparse_100g, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_excludes, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_db_inside_root, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_db_in_subdir, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_db_symlinked_file, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_content_reads_then_writes, tu_fx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_record, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_record_content_too_large, tu_fx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_mime_detect_cached, tu_fx_setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
