/* MIME detection: one libmagic cookie per hv_magic, answers equal to `file --mime-type -b`,
 * and the batch helper behind `harvest mime`.
 *
 * How file(1) 5.44 gets its answer for a regular file, and how we match it:
 *   - it stats the path first, and a size of 0 is "inode/x-empty" without reading (libmagic's
 *     own answer for 0 bytes read through a descriptor is "application/x-empty"), so we check
 *     st_size ourselves;
 *   - it reads MAGIC_PARAM_BYTES_MAX bytes and hands libmagic the descriptor too: ELF details
 *     (DF_1_PIE decides "application/x-pie-executable" vs "application/x-sharedlib") and OLE2
 *     directories are read through the descriptor, so magic_buffer() alone says
 *     "application/x-sharedlib" for every PIE executable. hv_magic_buffer() therefore sends
 *     those two formats through a descriptor.
 * magic_descriptor() reads from the descriptor's current offset and seeks back to it; we seek
 * to 0 first and restore the caller's offset after. */
#include "collect_internal.h"
#include "dl_magic.h"
#include "harvest/sys/store.h"
#include "internal.h"
#include "mime_internal.h"
#include "store_internal.h"
#include "test_hook.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Flags a caller may add: they only switch libmagic's tests off. */
#ifndef MAGIC_NO_CHECK_CSV
#define MAGIC_NO_CHECK_CSV 0
#endif
#ifndef MAGIC_NO_CHECK_JSON
#define MAGIC_NO_CHECK_JSON 0
#endif
#define HV_MAGIC_ALLOWED_FLAGS                                                                 \
	(MAGIC_NO_CHECK_COMPRESS | MAGIC_NO_CHECK_TAR | MAGIC_NO_CHECK_SOFT |                  \
	 MAGIC_NO_CHECK_APPTYPE | MAGIC_NO_CHECK_ELF | MAGIC_NO_CHECK_TEXT | MAGIC_NO_CHECK_CDF | \
	 MAGIC_NO_CHECK_CSV | MAGIC_NO_CHECK_TOKENS | MAGIC_NO_CHECK_ENCODING |                 \
	 MAGIC_NO_CHECK_JSON)
/* MAGIC_NO_COMPRESS_FORK changes no answer without MAGIC_COMPRESS; it is a second guarantee
 * that detection never forks a decompressor. */
#define HV_MAGIC_BASE_FLAGS (MAGIC_MIME_TYPE | MAGIC_NO_COMPRESS_FORK)

struct hv_magic {
	magic_t cookie;      /* loaded in-process, or (isolated) only for libmagic's parameters */
	hvm_worker *worker;  /* isolated: the process that runs libmagic; NULL until loaded */
	bool loaded;         /* the database is loaded (in the cookie or the worker) */
	bool isolated;
	int flags;
	size_t bytes_max;
	char *database;
	char *fingerprint;
	hv_buf answer; /* the last answer, copied out of libmagic's buffer at once */
};

/* Appends "path:size:mtime_ns:ino:ctime_ns" of the file libmagic loads for one database
 * component: like libmagic's apprentice, "X.mgc" when it exists, else X itself (a source file
 * or directory). The inode and ctime as a file's cache key has them: a database rebuilt to the
 * same size with its mtime put back (as some packaging tools do) is still another database. */
static hv_status fingerprint_component(hv_buf *fp, const char *comp, size_t len)
{
	hv_buf p = {0};
	struct stat st;
	int rc = hv_buf_append(&p, comp, len);
	if (rc != HV_OK)
		return rc;
	bool is_mgc = len >= 4 && memcmp(comp + len - 4, ".mgc", 4) == 0;
	if (!is_mgc) {
		rc = hv_buf_append_str(&p, ".mgc");
		if (rc == HV_OK && stat(p.data, &st) != 0)
			hv_buf_truncate(&p, len);
	}
	if (rc == HV_OK) {
		if (stat(p.data, &st) == 0)
			rc = hv_buf_printf(fp, "%s:%lld:%lld:%llu:%lld", p.data, (long long)st.st_size,
					   (long long)hv_ns_from_timespec(st.st_mtim.tv_sec,
									  st.st_mtim.tv_nsec),
					   (unsigned long long)st.st_ino,
					   (long long)hv_ns_from_timespec(st.st_ctim.tv_sec,
									  st.st_ctim.tv_nsec));
		else
			rc = hv_buf_printf(fp, "%s:missing", p.data);
	}
	hv_buf_free(&p);
	return rc;
}

static hv_status make_fingerprint(hv_magic *m)
{
	hv_buf fp = {0};
	int rc = hv_buf_printf(&fp, "libmagic=%d;flags=0x%x;bytes=%zu;db=", magic_version(),
			       (unsigned)m->flags, m->bytes_max);
	const char *s = m->database;
	bool first = true;
	while (rc == HV_OK && *s) {
		size_t len = strcspn(s, ":");
		if (len > 0) {
			if (!first)
				rc = hv_buf_append_char(&fp, ',');
			if (rc == HV_OK)
				rc = fingerprint_component(&fp, s, len);
			first = false;
		}
		s += len;
		if (*s == ':')
			s++;
	}
	if (rc != HV_OK) {
		hv_buf_free(&fp);
		return rc;
	}
	m->fingerprint = fp.data;
	return HV_OK;
}

static atomic_uint magic_loads;

unsigned hvm_magic_loads(void)
{
	return atomic_load(&magic_loads);
}

/* Loads the database: into the cookie, or into a new worker process when isolated. */
static hv_status magic_load_now(hv_magic *m)
{
	/* m is not NULL (see set_answer).
	 * NOLINTNEXTLINE(clang-analyzer-core.NullDereference) */
	if (m->loaded)
		return HV_OK;
	atomic_fetch_add(&magic_loads, 1);
	if (m->isolated) {
		hv_status rc = hvm_worker_start(&m->worker, m->database, m->fingerprint, m->flags,
						 m->bytes_max);
		if (rc != HV_OK)
			return rc;
	} else if (hv__magic_load_whole(m->cookie, m->database) != 0) {
		const char *why = magic_error(m->cookie);
		return hv_error_set(HV_EIO, "%s: %s", m->database, why ? why : "cannot load");
	}
	m->loaded = true;
	return HV_OK;
}

hv_status hv_magic_open(hv_magic **out, const char *database, int extra_flags)
{
	HV_NEED(out);
	hv_status rc = hvm_magic_open_lazy(out, database, extra_flags);
	if (rc != HV_OK)
		return rc;
	rc = magic_load_now(*out);
	if (rc != HV_OK) {
		hv_magic_close(*out);
		*out = NULL;
	}
	return rc;
}

hv_status hvm_magic_open_lazy(hv_magic **out, const char *database, int extra_flags)
{
	*out = NULL;
	if (extra_flags & ~HV_MAGIC_ALLOWED_FLAGS)
		return hv_error_set(HV_EUSAGE,
				    "libmagic flags 0x%x are not allowed (only MAGIC_NO_CHECK_*)",
				    (unsigned)(extra_flags & ~HV_MAGIC_ALLOWED_FLAGS));
	/* libmagic is loaded on the first detector, not when harvest starts (dl_magic.h). */
	char why[512];
	if (hv__magic_load(why, sizeof(why)) != 0)
		return hv_error_set(HV_EIO, "cannot detect MIME types: %s", why);
	hv_magic *m = calloc(1, sizeof(*m));
	if (!m)
		return hv_error_set(HV_ENOMEM, "out of memory");
	m->flags = HV_MAGIC_BASE_FLAGS | extra_flags;
	if (database) {
		m->database = strdup(database);
	} else {
		/* $MAGIC, else the compiled-in default, or ~/.magic before it: libmagic builds that
		 * one in a static buffer it frees at the next call, so two threads opening handles
		 * at once take turns, and each keeps its own copy. */
		static pthread_mutex_t getpath_mu = PTHREAD_MUTEX_INITIALIZER;
		pthread_mutex_lock(&getpath_mu);
		const char *def = magic_getpath(NULL, 0);
		bool none = !def || !*def;
		if (!none)
			m->database = strdup(def);
		pthread_mutex_unlock(&getpath_mu);
		if (none) {
			free(m);
			return hv_error_set(HV_EIO, "libmagic has no default database path");
		}
	}
	if (!m->database) {
		free(m);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	errno = 0;
	m->cookie = magic_open(m->flags);
	if (!m->cookie) {
		int err = errno ? errno : ENOMEM;
		hv_magic_close(m);
		return hv_error_set(err == ENOMEM ? HV_ENOMEM : HV_EIO, "libmagic: %s",
				    strerror(err));
	}
	m->isolated = hvm_isolation();
	m->bytes_max = 1024 * 1024; /* libmagic's default before the parameter existed */
#ifdef MAGIC_PARAM_BYTES_MAX
	size_t bytes = 0;
	if (magic_getparam(m->cookie, MAGIC_PARAM_BYTES_MAX, &bytes) == 0 && bytes > 0)
		m->bytes_max = bytes;
#endif
	int rc = make_fingerprint(m);
	if (rc != HV_OK) {
		hv_magic_close(m);
		return rc;
	}
	*out = m;
	return HV_OK;
}

void hv_magic_close(hv_magic *m)
{
	if (!m)
		return;
	if (m->cookie)
		magic_close(m->cookie);
	hvm_worker_stop(m->worker);
	free(m->database);
	free(m->fingerprint);
	hv_buf_free(&m->answer);
	free(m);
}

pid_t hvm_magic_worker_pid(const hv_magic *m)
{
	return hvm_worker_pid(m->worker);
}

bool hvm_magic_worker_inherited(const hv_magic *m)
{
	return hvm_worker_inherited(m->worker);
}

int hvm_magic_flags(const hv_magic *m)
{
	return m->flags;
}

const char *hv_magic_fingerprint(const hv_magic *m)
{
	return m ? m->fingerprint : NULL;
}

const char *hv_magic_database(const hv_magic *m)
{
	return m ? m->database : NULL;
}

size_t hv_magic_bytes_max(const hv_magic *m)
{
	return m ? m->bytes_max : 0;
}

const char *hv_mime_for_mode(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return "inode/directory";
	case S_IFLNK:
		return "inode/symlink";
	case S_IFIFO:
		return "inode/fifo";
	case S_IFSOCK:
		return "inode/socket";
	case S_IFCHR:
		return "inode/chardevice";
	case S_IFBLK:
		return "inode/blockdevice";
	default:
		return NULL;
	}
}

/* Copies s into the handle's answer buffer and points *type at it. */
static hv_status set_answer(hv_magic *m, const char *s, const char **type)
{
	hv_buf_truncate(&m->answer, 0);
	int rc = hv_buf_append_str(&m->answer, s);
	if (rc != HV_OK)
		return rc;
	/* m is not NULL: the analyzer thinks a failed hv_magic_open could return HV_OK, as it
	 * cannot see that hv_error_set (error.c) never does.
	 * NOLINTNEXTLINE(clang-analyzer-core.NullDereference) */
	*type = m->answer.data;
	return HV_OK;
}

/* "path" for messages, or "fd N" when the caller gave no path. */
static const char *label(const char *path, int fd, char *tmp, size_t n)
{
	if (path)
		return path;
	snprintf(tmp, n, "fd %d", fd);
	return tmp;
}

/* The libmagic failure after a NULL answer, as "<what>: <reason>". */
static hv_status magic_failure(hv_magic *m, const char *what)
{
	int err = magic_errno(m->cookie);
	if (err > 0)
		return hv_error_errno(HV_EIO, what, err);
	const char *why = magic_error(m->cookie);
	return hv_error_set(HV_EIO, "%s: %s", what, why ? why : "libmagic failed");
}

/* magic_descriptor() on a regular file's fd, from offset 0, keeping the caller's offset; fresh:
 * the fd was just opened here and is closed after, so it is at 0 and its offset is nobody's
 * (two syscalls fewer per file). */
static hv_status describe_fd(hv_magic *m, int fd, const char *what, const char **type, bool fresh)
{
	off_t pos = fresh ? 0 : lseek(fd, 0, SEEK_CUR);
	if (pos < 0 || (pos != 0 && lseek(fd, 0, SEEK_SET) != 0))
		return hv_error_errno(HV_EIO, what, errno);
	hv_status rc = magic_load_now(m);
	if (rc == HV_OK && m->isolated) {
		rc = hvm_worker_detect(m->worker, fd, NULL, 0, what, &m->answer);
		if (rc == HV_OK || rc == HV_WARN)
			*type = m->answer.data;
	} else if (rc == HV_OK) {
		/* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): m is not NULL */
		const char *r = magic_descriptor(m->cookie, fd);
		/* Copy at once: the next libmagic call on this cookie reuses its buffer. */
		rc = r ? set_answer(m, r, type) : magic_failure(m, what);
	}
	if (!fresh && lseek(fd, pos, SEEK_SET) != pos && rc == HV_OK)
		rc = hv_error_errno(HV_EIO, what, errno);
	return rc;
}

/* hv_magic_fd; fresh as for describe_fd. */
static hv_status magic_fd(hv_magic *m, int fd, const char *path, const char **type, bool fresh)
{
	char tmp[32];
	const char *what = label(path, fd, tmp, sizeof(tmp));
	struct stat st;
	*type = NULL;
	if (fstat(fd, &st) != 0)
		return hv_error_errno(HV_EIO, what, errno);
	if (!S_ISREG(st.st_mode)) {
		const char *t = hv_mime_for_mode(st.st_mode);
		if (!t)
			return hv_error_set(HV_EIO, "%s: unknown file type", what);
		return set_answer(m, t, type); /* never read: a FIFO would block or be drained */
	}
	if (st.st_size == 0)
		return set_answer(m, "inode/x-empty", type); /* file(1) decides this from stat */
	return describe_fd(m, fd, what, type, fresh);
}

hv_status hv_magic_fd(hv_magic *m, int fd, const char *path, const char **type)
{
	HV_NEED(m && type);
	return magic_fd(m, fd, path, type, false);
}

/* Formats whose libmagic detection reads the file itself, beyond the buffer. */
static bool needs_descriptor(const unsigned char *b, size_t len)
{
	static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
	static const unsigned char cdf[8] = {0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1};
	return (len >= sizeof(elf) && memcmp(b, elf, sizeof(elf)) == 0) ||
	       (len >= sizeof(cdf) && memcmp(b, cdf, sizeof(cdf)) == 0);
}

/* Detects buf through a descriptor of an in-memory copy of it (no fd from the caller). */
static hv_status describe_copy(hv_magic *m, const void *buf, size_t len, const char *what,
			       const char **type)
{
	int fd = memfd_create("harvest-magic", MFD_CLOEXEC);
	if (fd < 0)
		return hv_error_errno(HV_EIO, what, errno);
	const char *p = buf;
	size_t left = len;
	while (left > 0) {
		ssize_t n = write(fd, p, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int err = n < 0 ? errno : EIO;
			close(fd);
			return hv_error_errno(HV_EIO, what, err);
		}
		p += n;
		left -= (size_t)n;
	}
	if (lseek(fd, 0, SEEK_SET) != 0) {
		int err = errno;
		close(fd);
		return hv_error_errno(HV_EIO, what, err);
	}
	hv_status rc = describe_fd(m, fd, what, type, true);
	close(fd);
	return rc;
}

hv_status hv_magic_buffer(hv_magic *m, const void *buf, size_t len, int fd, const char *path,
			  const char **type)
{
	HV_NEED(m && type && (buf || len == 0));
	char tmp[32];
	const char *what = path ? path : "buffer";
	*type = NULL;
	if (len == 0)
		return set_answer(m, "inode/x-empty", type);
	if (needs_descriptor(buf, len)) {
		if (fd >= 0)
			return hv_magic_fd(m, fd, path ? path : label(NULL, fd, tmp, sizeof(tmp)),
					   type);
		return describe_copy(m, buf, len, what, type);
	}
	/* file(1) looks at no more than bytes_max bytes; more could change a text verdict. */
	size_t n = len < m->bytes_max ? len : m->bytes_max;
	hv_status rc = magic_load_now(m);
	if (rc != HV_OK)
		return rc;
	if (m->isolated) {
		rc = hvm_worker_detect(m->worker, -1, buf, n, what, &m->answer);
		if (rc == HV_OK || rc == HV_WARN)
			*type = m->answer.data;
		return rc;
	}
	const char *r = magic_buffer(m->cookie, buf, n);
	return r ? set_answer(m, r, type) : magic_failure(m, what);
}

/* One file's outcome of hvm_magic_buffers, from a call that gave rc and t. */
static void buffer_result(hv_status rc, const char *t, char **type, hv_status *rcp, char **err)
{
	*rcp = rc;
	*type = t && (rc == HV_OK || rc == HV_WARN) ? strdup(t) : NULL;
	*err = rc != HV_OK ? strdup(hv_error_last()) : NULL;
}

/* The k buffers collected for one round trip to m's worker; at[j] is each one's index in the
 * caller's arrays. */
struct buffers_batch {
	const void *bufs[HVM_WORKER_BATCH_MAX];
	size_t lens[HVM_WORKER_BATCH_MAX], at[HVM_WORKER_BATCH_MAX], k, bytes;
	const char *whats[HVM_WORKER_BATCH_MAX];
};

static void buffers_flush(hv_magic *m, struct buffers_batch *b, char **types, hv_status *rcs,
			  char **errs)
{
	hv_buf answers[HVM_WORKER_BATCH_MAX] = {0};
	hv_status brc[HVM_WORKER_BATCH_MAX];
	char *berr[HVM_WORKER_BATCH_MAX] = {0};
	hv_status rc = magic_load_now(m);
	if (rc == HV_OK)
		rc = hvm_worker_detect_bufs(m->worker, b->bufs, b->lens, b->k, b->whats, answers,
					    brc, berr);
	for (size_t j = 0; j < b->k; j++) {
		size_t i = b->at[j];
		if (rc != HV_OK) {
			buffer_result(rc, NULL, &types[i], &rcs[i], &errs[i]);
		} else {
			rcs[i] = brc[j];
			errs[i] = berr[j];
			types[i] = brc[j] == HV_OK || brc[j] == HV_WARN ? strdup(answers[j].data)
								      : NULL;
		}
		hv_buf_free(&answers[j]);
	}
	b->k = 0;
	b->bytes = 0;
}

void hvm_magic_buffers(hv_magic *m, size_t k, const void *const *bufs, const size_t *lens,
		       const int *fds, const char *const *paths, char **types, hv_status *rcs,
		       char **errs)
{
	struct buffers_batch b = {.k = 0};
	for (size_t i = 0; i < k; i++) {
		/* Bytes that hv_magic_buffer would send its worker inline go in the batch. */
		size_t n = lens[i] < m->bytes_max ? lens[i] : m->bytes_max;
		if (m->isolated && n > 0 && n <= HVM_WORKER_BATCH_BYTES &&
		    !needs_descriptor(bufs[i], lens[i])) {
			if (b.k == HVM_WORKER_BATCH_MAX || b.bytes + n > HVM_WORKER_BATCH_BYTES)
				buffers_flush(m, &b, types, rcs, errs);
			b.bufs[b.k] = bufs[i];
			b.lens[b.k] = n;
			b.whats[b.k] = paths[i] ? paths[i] : "buffer";
			b.at[b.k++] = i;
			b.bytes += n;
			continue;
		}
		const char *t = NULL;
		hv_status rc = hv_magic_buffer(m, bufs[i], lens[i], fds[i], paths[i], &t);
		buffer_result(rc, t, &types[i], &rcs[i], &errs[i]);
	}
	if (b.k > 0)
		buffers_flush(m, &b, types, rcs, errs);
}

/* ---- The batch helper ---------------------------------------------------------------------- */

void hv_mime_opts_init(hv_mime_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
}

typedef struct batch {
	const char *const *paths;
	size_t n;
	bool raw;
	const hv_mime_db *db;
	const char *database;
	int extra_flags;
	bool regular; /* every path was just lstat'ed as a regular file: skip the lstat */
	const hv_stat *const *expect; /* that lstat of each path, or NULL (hvm_detect_regular) */
	unsigned char *moved;         /* set where the file opened is not expect's */
	size_t chunk; /* files a thread takes at once: > 1, a sandboxed worker's batch */
	hv_mime_result *results;
	atomic_size_t next;
	atomic_bool oom;
} batch;

/* The last error as a message naming path (malloc'd; NULL when out of memory): a failure that
 * is not the file's own ("libmagic worker: Too many open files") must still say which file
 * went unanswered. */
static char *error_naming(const char *path)
{
	const char *msg = hv_error_last();
	size_t len = strlen(path);
	if (!strncmp(msg, path, len) && msg[len] == ':')
		return strdup(msg);
	char *s = NULL;
	return asprintf(&s, "%s: %s", path, msg) >= 0 ? s : NULL;
}

/* Records hv_error_last() as path i's error. */
static void record_error(batch *b, size_t i, hv_status st)
{
	hv_mime_result *r = &b->results[i];
	r->status = st;
	r->error = error_naming(b->paths[i]);
	if (!r->error)
		atomic_store(&b->oom, true);
}

/* Path i's result from libmagic's answer type (rc HV_OK), the worker's fallback (HV_WARN,
 * with hv_error_last() saying why), or its failure (hv_error_last()). */
static void detect_finish(batch *b, size_t i, hv_status rc, const char *type)
{
	if (rc == HV_WARN) {
		/* The worker died or hung on this file: octet-stream, never refined, and why. */
		record_error(b, i, rc);
		b->results[i].mime_type = strdup(type ? type : "application/octet-stream");
		if (!b->results[i].mime_type)
			atomic_store(&b->oom, true);
		return;
	}
	if (rc == HV_OK && !b->raw)
		rc = hv_mime_refine(b->db, b->paths[i], type, &type);
	if (rc != HV_OK) {
		record_error(b, i, rc);
		return;
	}
	b->results[i].status = HV_OK;
	/* type is set whenever rc is HV_OK: the analyzer cannot see that hv_error_errno
	 * (error.c) never returns HV_OK.
	 * NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker) */
	b->results[i].mime_type = strdup(type);
	if (!b->results[i].mime_type)
		atomic_store(&b->oom, true);
}

/* Opens path i for libmagic: its descriptor (a regular file with bytes, at offset 0), or -1
 * when its result is already set (answered from its type or size, or failed). Devices, FIFOs
 * and sockets are never opened; symlinks are not followed; a file swapped for a FIFO after the
 * lstat is caught by the fstat of what was opened. */
static int detect_open(batch *b, size_t i)
{
	const char *path = b->paths[i];
	struct stat st;
	if (b->regular) {
		st.st_mode = S_IFREG;
	} else if (lstat(path, &st) != 0) {
		record_error(b, i, hv_error_errno(HV_EIO, path, errno));
		return -1;
	}
	if (S_ISREG(st.st_mode)) {
		if (HV_UNLIKELY(hv__test_hook_active(HV__HOOK_MIME_BEFORE_OPEN)))
			hv__test_hook_call(HV__HOOK_MIME_BEFORE_OPEN, path);
		int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
		if (fd < 0 && errno == ELOOP) {
			if (b->expect)
				b->moved[i] = 1; /* not the regular file the lstat found */
			detect_finish(b, i, HV_OK, "inode/symlink"); /* a symlink since the lstat */
			return -1;
		}
		if (fd < 0) {
			record_error(b, i, hv_error_errno(HV_EIO, path, errno));
			return -1;
		}
		if (fstat(fd, &st) != 0) {
			record_error(b, i, hv_error_errno(HV_EIO, path, errno));
			close(fd);
			return -1;
		}
		if (b->expect) {
			hv_stat opened;
			HV_STAT_FROM(&st, &opened);
			b->moved[i] = !hvm_same_state(&opened, b->expect[i]);
		}
		if (S_ISREG(st.st_mode) && st.st_size > 0)
			return fd;
		close(fd);
		if (S_ISREG(st.st_mode)) {
			detect_finish(b, i, HV_OK, "inode/x-empty"); /* file(1) decides this from stat */
			return -1;
		}
	}
	const char *type = hv_mime_for_mode(st.st_mode);
	detect_finish(b, i, type ? HV_OK : hv_error_set(HV_EIO, "%s: unknown file type", path),
		      type);
	return -1;
}

static void detect_one(batch *b, hv_magic *m, size_t i)
{
	int fd = detect_open(b, i);
	if (fd < 0)
		return;
	const char *type = NULL;
	hv_status rc = describe_fd(m, fd, b->paths[i], &type, true);
	close(fd);
	detect_finish(b, i, rc, type);
}

/* hvm_worker_detect_fds through m's worker, loaded first; a failure of the call itself (no
 * worker, out of memory) becomes every file's status and message. */
static void magic_fds(hv_magic *m, const int *fds, size_t k, const char *const *whats,
		      hv_buf *answers, hv_status *rcs, char **errs)
{
	hv_status rc = magic_load_now(m);
	if (rc == HV_OK)
		rc = hvm_worker_detect_fds(m->worker, fds, k, whats, answers, rcs, errs);
	if (rc == HV_OK)
		return;
	for (size_t j = 0; j < k; j++) {
		rcs[j] = rc;
		errs[j] = strdup(hv_error_last());
	}
}

/* Files [i0, i1) (at most HVM_WORKER_BATCH_MAX) through m's sandboxed worker in one round
 * trip. */
static void detect_chunk(batch *b, hv_magic *m, size_t i0, size_t i1, hv_buf *answers)
{
	int fds[HVM_WORKER_BATCH_MAX];
	size_t idx[HVM_WORKER_BATCH_MAX];
	const char *whats[HVM_WORKER_BATCH_MAX];
	hv_status rcs[HVM_WORKER_BATCH_MAX];
	char *errs[HVM_WORKER_BATCH_MAX] = {0};
	size_t k = 0;
	for (size_t i = i0; i < i1; i++) {
		int fd = detect_open(b, i);
		if (fd >= 0) {
			fds[k] = fd;
			idx[k] = i;
			whats[k++] = b->paths[i];
		}
	}
	if (k == 0)
		return;
	magic_fds(m, fds, k, whats, answers, rcs, errs);
	for (size_t j = 0; j < k; j++) {
		close(fds[j]);
		hv_status r = rcs[j];
		if (r != HV_OK)
			hv_error_set(r, "%s", errs[j] ? errs[j] : "out of memory");
		detect_finish(b, idx[j], r, r == HV_OK || r == HV_WARN ? answers[j].data : NULL);
		free(errs[j]);
	}
}

static void run_batch(batch *b, hv_magic *m)
{
	if (b->chunk > 1 && m->isolated) {
		hv_buf answers[HVM_WORKER_BATCH_MAX] = {0};
		for (;;) {
			size_t i = atomic_fetch_add(&b->next, b->chunk);
			if (i >= b->n || atomic_load(&b->oom))
				break;
			detect_chunk(b, m, i, b->n - i < b->chunk ? b->n : i + b->chunk, answers);
		}
		for (size_t j = 0; j < HVM_WORKER_BATCH_MAX; j++)
			hv_buf_free(&answers[j]);
		return;
	}
	for (;;) {
		size_t i = atomic_fetch_add(&b->next, 1);
		if (i >= b->n || atomic_load(&b->oom))
			return;
		detect_one(b, m, i);
	}
}

static void *batch_worker(void *arg)
{
	batch *b = arg;
	hv_magic *m;
	/* A worker that cannot open its own cookie just leaves the work to the others: the calling
	 * thread always has one. */
	if (hv_magic_open(&m, b->database, b->extra_flags) != HV_OK)
		return NULL;
	run_batch(b, m);
	hv_magic_close(m);
	return NULL;
}

static hv_status detect(const char *const *paths, size_t n, const hv_mime_opts *opts,
			bool regular, const hv_stat *const *expect, unsigned char *moved,
			hv_mime_result **results);

hv_status hv_mime_detect_paths(const char *const *paths, size_t n, const hv_mime_opts *opts,
			       hv_mime_result **results)
{
	HV_NEED((paths || n == 0) && results);
	return detect(paths, n, opts, false, NULL, NULL, results);
}

hv_status hvm_detect_regular(const char *const *paths, size_t n, const hv_mime_opts *opts,
			     const hv_stat *const *expect, unsigned char *moved,
			     hv_mime_result **results)
{
	return detect(paths, n, opts, true, expect, moved, results);
}

/* Descriptors a detection thread holds (the file, its worker's socket), and those kept free
 * for the rest (SQLite's files, the spawner's socket, a walk's directories). */
enum { DETECT_FDS_PER_THREAD = 2, DETECT_FDS_KEPT = 8 };

/* The results of b's n paths into *results: HV_WARN when some could not be examined. */
static hv_status detect_end(batch *b, size_t n, hv_mime_result **results)
{
	if (atomic_load(&b->oom)) {
		hv_mime_results_free(b->results, n);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	size_t failed = 0;
	for (size_t i = 0; i < n; i++)
		failed += b->results[i].status != HV_OK;
	*results = b->results;
	if (failed)
		return hv_error_set(HV_WARN, "%zu of %zu paths could not be examined", failed, n);
	return HV_OK;
}

/* moved is written through the batch (b.moved), which the check does not follow. */
static hv_status detect(const char *const *paths, size_t n, const hv_mime_opts *opts,
			/* NOLINTNEXTLINE(readability-non-const-parameter) */
			bool regular, const hv_stat *const *expect, unsigned char *moved,
			hv_mime_result **results)
{
	hv_mime_opts defaults;
	if (!opts) {
		hv_mime_opts_init(&defaults);
		opts = &defaults;
	}
	*results = NULL;
	if (opts->threads < 0)
		return hv_error_set(HV_EUSAGE, "threads must be 0 or more, not %d", opts->threads);
	batch b = {
		.paths = paths,
		.n = n,
		.raw = opts->raw,
		.db = opts->db,
		.database = opts->database,
		.extra_flags = opts->extra_flags,
		.regular = regular,
		.expect = expect,
		.moved = moved,
	};
	atomic_init(&b.next, 0);
	atomic_init(&b.oom, false);
	hv_status rc;
	if (!b.raw && !b.db && (rc = hv_mime_default_db(&b.db)) != HV_OK)
		return rc; /* load the default db here, so its failure is this thread's error */
	b.results = calloc(n ? n : 1, sizeof(*b.results));
	if (!b.results)
		return hv_error_set(HV_ENOMEM, "out of memory");
	/* The sandboxed workers' spawner is forked now, before this call's threads exist (a
	 * caller that forked it already, or runs libmagic in-process, pays nothing here). */
	if (n > 0 && hvm_isolation())
		hvm_spawner_prepare();
	hv_magic *m;
	if ((rc = hv_magic_open(&m, opts->database, opts->extra_flags)) != HV_OK) {
		if (rc == HV_ENOMEM || rc == HV_EUSAGE || opts->database) {
			free(b.results);
			return rc;
		}
		/* No detector (libmagic missing, no worker allowed; a database the caller named
		 * that does not load is the caller's to fix): each path is still looked
		 * at, so what needs no libmagic is answered (empty files, directories, devices)
		 * and what cannot be opened says why; the others get the reason, each naming its
		 * file, as a `mime DIR` gives it. */
		char *why = strdup(hv_error_last());
		if (!why) {
			free(b.results);
			return hv_error_set(HV_ENOMEM, "out of memory");
		}
		for (size_t i = 0; i < n && !atomic_load(&b.oom); i++) {
			int fd = detect_open(&b, i);
			if (fd < 0)
				continue;
			close(fd);
			record_error(&b, i, hv_error_set(rc, "%s", why));
		}
		free(why);
		return detect_end(&b, n, results);
	}

	size_t threads = (size_t)(opts->threads ? opts->threads : hv_default_threads());
	if (threads > n)
		threads = n;
	/* Sandboxed, a thread hands its worker up to HVM_WORKER_BATCH_MAX files at once (one round
	 * trip between the processes for all of them), taking a quarter of its share of the
	 * files or fewer, so that the threads still end together. */
	b.chunk = 1;
	if (m->isolated) {
		size_t quarter = threads > 0 ? n / (threads * 4) : 0;
		b.chunk = quarter < 1 ? 1 : quarter > HVM_WORKER_BATCH_MAX ? HVM_WORKER_BATCH_MAX : quarter;
	}
	/* Each thread holds its files open and, isolated, its worker's socket: no more threads
	 * and files than the free descriptors give room for (keeping some for SQLite and the
	 * spawner), or the files past that would fail with EMFILE one by one. Counting them
	 * costs a call or two, so a call with one thread and one file at a time never pays it. */
	if (threads > 1 || b.chunk > 1) {
		int limit, avail = hv__free_fds(&limit);
		size_t spare = avail > DETECT_FDS_KEPT ? (size_t)(avail - DETECT_FDS_KEPT) : 0;
		size_t room = spare / DETECT_FDS_PER_THREAD;
		if (threads > room)
			threads = room ? room : 1;
		/* a thread's files, and its worker's socket */
		size_t files = spare / threads > 1 ? spare / threads - 1 : 1;
		if (b.chunk > files)
			b.chunk = files;
	}
	pthread_t *tids = threads > 1 ? calloc(threads - 1, sizeof(*tids)) : NULL;
	size_t started = 0;
	for (size_t t = 0; tids && t + 1 < threads; t++) {
		if (pthread_create(&tids[t], NULL, batch_worker, &b) != 0)
			break; /* fewer workers; the calling thread still does the rest */
		started++;
	}
	run_batch(&b, m);
	for (size_t t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	free(tids);
	hv_magic_close(m);
	return detect_end(&b, n, results);
}

void hv_mime_results_free(hv_mime_result *results, size_t n)
{
	if (!results)
		return;
	for (size_t i = 0; i < n; i++) {
		free(results[i].mime_type);
		free(results[i].error);
	}
	free(results);
}

/* ---- Every regular file below a directory ----------------------------------------------
 *
 * The walk is collect's (hv_collect_walk_open: the same excludes, per-component O_NOFOLLOW),
 * and each file is opened through it (hv_walk_openat, relative to its directory's descriptor),
 * never again by path. Files are answered in batches of DIR_BATCH, in walk order: the cache
 * is looked up as the walk goes, the misses of a batch are detected on worker threads (each
 * with its own hv_magic, kept for the whole call), then the batch is handed out and
 * forgotten, so memory and descriptors stay bounded whatever the size of the tree. A batch's
 * lookups share one read transaction, and the cache keeps each answer refined by its name as
 * hv_mime_detect_cached() does: a tree answered from the cache under the same names reads no
 * shared-mime-info. */
#define DIR_BATCH 64

/* What the cache learns from an item once it is answered. */
enum dir_learn {
	DIR_LEARN_NOTHING,
	DIR_LEARN_RAW,        /* a miss: libmagic's answer, and its refinement for this name */
	DIR_LEARN_REFINEMENT, /* a hit without a refinement for this name: that refinement */
	DIR_LEARN_REFINED,    /* refined from the cache: nothing to refine or to learn */
};

typedef struct dir_item {
	char *path;           /* relative to the root */
	size_t path_len;
	int fd;               /* open on the file, while it waits for detection; else -1 */
	hv_stat st;           /* fstat of fd (a miss) or the lstat that hit, for the cache */
	unsigned char learn;  /* enum dir_learn */
	char sha256[65];      /* a hit's stored SHA-256, kept with its refinement ("": none) */
	hv_mime_result r;
} dir_item;

typedef struct dir_batch {
	dir_item items[DIR_BATCH];
	size_t n;
	size_t max;           /* items a batch holds (each may hold a file open): the descriptors
	                       * left beside the walk's, the workers' and SQLite's, at most
	                       * DIR_BATCH */
	hv_magic **magic;     /* one per thread */
	size_t threads;
	size_t chunk;         /* items a thread takes at once: > 1, a sandboxed worker's batch */
	atomic_size_t next;
	const char *rfp;      /* the refinement tables' fingerprint; NULL: no refined answers */
	bool reading;         /* the batch's read transaction is open */
	bool cache_lost;      /* a lookup failed (a damaged cache): the rest is answered without */
	bool flushed;         /* a batch was detected already */
	bool waiting;         /* this batch has files for libmagic (not all answered already) */
	char cache_error[512]; /* then: why */
} dir_batch;

static void dir_detect_one(dir_item *it, hv_magic *m)
{
	const char *type = NULL;
	hv_status rc = hv_magic_fd(m, it->fd, it->path, &type);
	close(it->fd);
	it->fd = -1;
	it->r.status = rc;
	if (rc != HV_OK)
		it->r.error = error_naming(it->path);
	/* HV_WARN: the worker died or hung on it; octet-stream, said so, never cached */
	if (rc == HV_OK || rc == HV_WARN)
		it->r.mime_type = strdup(type ? type : "application/octet-stream");
	it->learn = rc == HV_OK ? DIR_LEARN_RAW : DIR_LEARN_NOTHING;
}

/* Items [i0, i1) of b, sandboxed: those with bytes go to m's worker in one round trip
 * (hvm_worker_detect_fds), the rest (emptied or swapped for a special file since the walk)
 * are answered as dir_detect_one answers them. */
static void dir_detect_chunk(dir_batch *b, size_t i0, size_t i1, hv_magic *m, hv_buf *answers)
{
	int fds[HVM_WORKER_BATCH_MAX];
	dir_item *its[HVM_WORKER_BATCH_MAX];
	const char *whats[HVM_WORKER_BATCH_MAX];
	hv_status rcs[HVM_WORKER_BATCH_MAX];
	char *errs[HVM_WORKER_BATCH_MAX] = {0};
	size_t k = 0;
	for (size_t i = i0; i < i1; i++) {
		dir_item *it = &b->items[i];
		if (it->fd < 0)
			continue;
		if (!S_ISREG(it->st.mode) || it->st.size == 0) {
			dir_detect_one(it, m);
			continue;
		}
		fds[k] = it->fd;
		its[k] = it;
		whats[k++] = it->path;
	}
	if (k == 0)
		return;
	magic_fds(m, fds, k, whats, answers, rcs, errs);
	for (size_t j = 0; j < k; j++) {
		dir_item *it = its[j];
		close(it->fd);
		it->fd = -1;
		hv_status r = rcs[j];
		it->r.status = r;
		if (r != HV_OK) {
			hv_error_set(r, "%s", errs[j] ? errs[j] : "out of memory");
			it->r.error = error_naming(it->path);
		}
		/* HV_WARN: the worker died or hung on it; octet-stream, said so, never cached */
		if (r == HV_OK || r == HV_WARN)
			it->r.mime_type = strdup(answers[j].data ? answers[j].data
								 : "application/octet-stream");
		it->learn = r == HV_OK ? DIR_LEARN_RAW : DIR_LEARN_NOTHING;
		free(errs[j]);
	}
}

/* Refines the item's answer by its name (o->db, else the default tables, loaded on the first
 * call) and hands what the cache learns to st. A failure to load the tables is the call's error;
 * any other leaves libmagic's answer and costs only the cache entry. */
static hv_status dir_refine_learn(dir_item *it, hv_store *st, const char *fp, const char *rfp,
				  const hv_mime_opts *o)
{
	if (it->learn == DIR_LEARN_REFINED)
		return HV_OK;
	const char *name = strrchr(it->path, '/');
	name = name ? name + 1 : it->path;
	char *raw = NULL;
	if (st && it->learn != DIR_LEARN_NOTHING && !(raw = strdup(it->r.mime_type)))
		it->learn = DIR_LEARN_NOTHING; /* out of memory: only the cache entry is lost */
	bool refined = false;
	const char *type = NULL;
	if (it->r.status == HV_OK && !o->raw) {
		/* The tables are loaded on the first refinement; that they cannot be is the call's
		 * error, as it was before the first file. */
		const hv_mime_db *db = o->db;
		hv_status rc = db ? HV_OK : hv_mime_default_db(&db);
		if (rc != HV_OK) {
			free(raw);
			return rc;
		}
		refined = hv_mime_refine(db, it->path, it->r.mime_type, &type) == HV_OK;
	}
	if (refined) {
		if (type != it->r.mime_type) {
			char *copy = strdup(type);
			if (copy) {
				free(it->r.mime_type);
				it->r.mime_type = copy;
			} else {
				refined = false; /* libmagic's answer stays; no refinement kept */
			}
		}
	}
	bool with_refined = rfp && refined && *name;
	if (raw && (it->learn == DIR_LEARN_RAW || with_refined))
		(void)hvst_mime_put_refined(st, &it->st, fp, raw, it->sha256[0] ? it->sha256 : NULL,
					    name, strlen(name), with_refined ? it->r.mime_type : NULL,
					    with_refined ? rfp : NULL); /* only speed */
	free(raw);
	return HV_OK;
}

typedef struct dir_worker {
	dir_batch *b;
	hv_magic *m;
	bool last_resort; /* answers what no thread took, each file with the reason if need be */
} dir_worker;

static void *dir_worker_main(void *arg)
{
	dir_worker *w = arg;
	dir_batch *b = w->b;
	/* A thread whose libmagic cannot start (a worker not forked under a process limit:
	 * EAGAIN) leaves the files to the threads whose can, rather than fail each one it takes;
	 * it tries again with the next batch. */
	if (!w->last_resort && b->waiting && atomic_load(&b->next) < b->n &&
	    magic_load_now(w->m) != HV_OK) {
		hv_error_clear();
		return NULL;
	}
	if (b->chunk > 1 && w->m->isolated) {
		hv_buf answers[HVM_WORKER_BATCH_MAX] = {0};
		for (;;) {
			size_t i = atomic_fetch_add(&b->next, b->chunk);
			if (i >= b->n)
				break;
			dir_detect_chunk(b, i, b->n - i < b->chunk ? b->n : i + b->chunk, w->m,
					 answers);
		}
		for (size_t j = 0; j < HVM_WORKER_BATCH_MAX; j++)
			hv_buf_free(&answers[j]);
		return NULL;
	}
	for (;;) {
		size_t i = atomic_fetch_add(&b->next, 1);
		if (i >= b->n)
			return NULL;
		if (b->items[i].fd >= 0)
			dir_detect_one(&b->items[i], w->m);
	}
}

/* Detects the batch's waiting files, caches, refines and hands every item out in order. */
static hv_status dir_flush(dir_batch *b, hv_store *st, const char *fp, const hv_mime_opts *o,
			   hv_mime_dir_fn fn, void *ctx, size_t *failed)
{
	/* The lookups are done: the cache may be written from here on. */
	hvm_read_end(st, b->reading);
	b->reading = false;
	size_t waiting = 0;
	for (size_t i = 0; i < b->n; i++)
		waiting += b->items[i].fd >= 0;
	if (!b->flushed && waiting > 0 && hv__test_switch_on(HV__SWITCH_MIME_DIR_LATE)) {
		struct timespec late = {0, 100 * 1000000L};
		nanosleep(&late, NULL);
	}
	b->flushed = b->flushed || waiting > 0;
	b->waiting = waiting > 0; /* a tree answered from the cache never loads libmagic */
	atomic_store(&b->next, 0);
	size_t threads = b->threads < waiting ? b->threads : waiting;
	/* Sandboxed, a thread hands its worker several of the batch's files at once (one round
	 * trip for them all): a quarter of its share of the batch, so the threads end together. */
	size_t quarter = threads > 0 ? b->n / (threads * 4) : 0;
	b->chunk = quarter < 1 ? 1 : quarter > HVM_WORKER_BATCH_MAX ? HVM_WORKER_BATCH_MAX : quarter;
	pthread_t tids[HV_DEFAULT_THREADS_MAX];
	dir_worker ws[HV_DEFAULT_THREADS_MAX];
	size_t started = 0;
	for (size_t t = 1; t < threads; t++) {
		ws[t] = (dir_worker){.b = b, .m = b->magic[t]};
		if (pthread_create(&tids[started], NULL, dir_worker_main, &ws[t]) != 0)
			break; /* fewer workers; the calling thread does the rest */
		started++;
	}
	ws[0] = (dir_worker){.b = b, .m = b->magic[0]};
	dir_worker_main(&ws[0]);
	for (size_t t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	if (atomic_load(&b->next) < b->n) {
		/* No thread's libmagic could start: the files get the reason, one by one. */
		ws[0].last_resort = true;
		dir_worker_main(&ws[0]);
	}

	hv_status rc = HV_OK;
	for (size_t i = 0; i < b->n; i++) {
		dir_item *it = &b->items[i];
		if (rc == HV_OK && !it->r.mime_type && !it->r.error)
			rc = hv_error_set(HV_ENOMEM, "out of memory");
		if (rc == HV_OK)
			rc = dir_refine_learn(it, st, fp, b->rfp, o);
		if (rc == HV_OK) {
			*failed += it->r.status != HV_OK;
			hv_error_clear();
			rc = fn(ctx, it->path, it->path_len, &it->r);
			if (rc > 0)
				rc = HV_OK;
			else if (rc < 0)
				rc = hv__callback_failed(rc, "the answer callback");
		}
		free(it->path);
		free(it->r.mime_type);
		free(it->r.error);
		if (it->fd >= 0)
			close(it->fd);
	}
	b->n = 0;
	return rc;
}

/* Fills the next item of the batch for the regular file e: a cached answer, or the file
 * opened through the walk, waiting for detection, or why it could not be opened. */
static hv_status dir_add(dir_batch *b, hv_walk *w, const hv_entry *e, hv_store *st,
			 const char *fp)
{
	dir_item *it = &b->items[b->n];
	memset(it, 0, sizeof(*it));
	it->fd = -1;
	if (!(it->path = malloc(e->path_len + 1)))
		return hv_error_set(HV_ENOMEM, "out of memory");
	memcpy(it->path, e->path, e->path_len + 1);
	it->path_len = e->path_len;
	b->n++;
	if (st && e->have_lstat) {
		if (!b->reading)
			hvm_read_begin(st, &b->reading);
		const char *name = strrchr(it->path, '/');
		name = name ? name + 1 : it->path;
		hvst_mime_hit hit = {0};
		hv_status rc = hvst_mime_lookup_refined(st, &e->lst, fp, name, strlen(name), b->rfp,
							&hit);
		if (rc == HV_ENOMEM)
			return rc;
		if (rc != HV_OK) {
			/* The cache cannot be read (a page of it damaged): it only saves time, so
			 * this file and the rest are answered by libmagic, and nothing is written
			 * to a database that is not sound. */
			snprintf(b->cache_error, sizeof(b->cache_error), "%s", hv_error_last());
			b->cache_lost = true;
			hvm_read_end(st, b->reading);
			b->reading = false;
		} else if ((hit.refined || hit.raw) && hv__walk_access(w, R_OK) != 0) {
			/* Answered from the cache only for a caller who could read the file (see
			 * detect_cached): else the error that opening it gives. */
			it->r.status = hv_error_errno(HV_EIO, e->path, errno);
			it->r.error = strdup(hv_error_last());
			free(hit.refined);
			free(hit.raw);
			return HV_OK;
		} else if (hit.refined) {
			/* The same name under the same tables: refined before, nothing to redo. */
			it->r.mime_type = hit.refined;
			it->learn = DIR_LEARN_REFINED;
			hvm_count_refined_hit();
			return HV_OK;
		} else if (hit.raw) {
			it->r.mime_type = hit.raw;
			it->st = e->lst;
			memcpy(it->sha256, hit.sha256, sizeof(it->sha256));
			it->learn = b->rfp ? DIR_LEARN_REFINEMENT : DIR_LEARN_NOTHING;
			return HV_OK;
		}
	}
	/* O_NONBLOCK: a file swapped for a FIFO since the walk must not hang the open. */
	int fd = hv_walk_openat(w, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0 && errno == ELOOP) {
		it->r.mime_type = strdup("inode/symlink"); /* replaced by a symlink since */
		return HV_OK;
	}
	if (fd < 0) {
		it->r.status = hv_error_errno(HV_EIO, e->path, errno);
		it->r.error = strdup(hv_error_last());
		return HV_OK;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		it->r.status = hv_error_errno(HV_EIO, e->path, errno);
		it->r.error = strdup(hv_error_last());
		close(fd);
		return HV_OK;
	}
	HV_STAT_FROM(&sb, &it->st);
	it->fd = fd;
	return HV_OK;
}

/* The warning of a batch whose cache could not be read (b->cache_lost). */
static const char *cache_lost_message(dir_batch *b)
{
	static const char tail[] = "; answering without the MIME cache";
	size_t len = strlen(b->cache_error);
	if (len + sizeof(tail) <= sizeof(b->cache_error) &&
	    (len < sizeof(tail) - 1 || strcmp(b->cache_error + len - (sizeof(tail) - 1), tail) != 0))
		memcpy(b->cache_error + len, tail, sizeof(tail));
	return b->cache_error;
}

hv_status hv_mime_detect_dir(hv_store *st, const char *dir, const hv_collect_opts *co,
			     const hv_mime_opts *mo, hv_mime_dir_fn fn, void *ctx)
{
	HV_NEED(dir && fn);
	hv_mime_opts o;
	if (mo)
		o = *mo;
	else
		hv_mime_opts_init(&o);
	if (o.threads < 0)
		return hv_error_set(HV_EUSAGE, "threads must be 0 or more, not %d", o.threads);
	hv_status rc;
	hv_collect_opts walk_opts;
	if (!co)
		hv_collect_opts_init(&walk_opts);
	else
		walk_opts = *co;
	if (walk_opts.no_cache)
		st = NULL;
	/* The walk needs its few descriptors, and the batch holds files open for detection: with
	 * few free, a batch that took them would leave the walk waiting for descriptors only the
	 * batch's end gives back. So the walk's directory cache is capped at its few and a third
	 * of the spare (by default it keeps up to half the limit, and a full cache beside a full
	 * batch left a libmagic worker none to start with), and the batch takes what is free
	 * beyond the cache's, the detection threads' and SQLite's, and one descriptor at the
	 * least; too few for even that is an error, as for collect. */
	int avail = 0;
	rc = hvc_check_fds(dir, 3, &avail);
	if (rc != HV_OK)
		return rc;
	dir_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return hv_error_set(HV_ENOMEM, "out of memory");
	/* Refined answers are cached for the default tables only (loaded on the first
	 * refinement): a caller's own db has no fingerprint. */
	b->rfp = !o.raw && !o.db ? hvm_refine_fingerprint() : NULL;
	b->threads = (size_t)(o.threads ? o.threads : hv_default_threads());
	if (b->threads > HV_DEFAULT_THREADS_MAX)
		b->threads = HV_DEFAULT_THREADS_MAX;
	if (b->threads < 1)
		b->threads = 1;
	int spare = avail == INT_MAX ? INT_MAX : avail - HVC_WALK_FDS - DETECT_FDS_KEPT;
	size_t fit = spare > 0 ? (size_t)spare / 4 : 0; /* a worker's socket and a file each */
	if (spare != INT_MAX && b->threads > fit)
		b->threads = fit > 0 ? fit : 1;
	b->max = DIR_BATCH;
	int cache = spare == INT_MAX ? INT_MAX : spare > 0 ? spare / 3 : 0;
	if (spare != INT_MAX) {
		int left = spare - cache - (int)b->threads * DETECT_FDS_PER_THREAD;
		b->max = left < 1 ? 1 : left < DIR_BATCH ? (size_t)left : DIR_BATCH;
	}
	b->magic = calloc(b->threads, sizeof(hv_magic *));
	if (!b->magic) {
		free(b);
		hv_error_set(HV_ENOMEM, "out of memory");
		return HV_ENOMEM;
	}
	hv_walk *w = NULL;
	rc = HV_OK;
	/* Loaded lazily: a tree answered from the cache never loads libmagic's database. */
	for (size_t t = 0; rc == HV_OK && t < b->threads; t++)
		rc = hvm_magic_open_lazy(&b->magic[t], o.database, o.extra_flags);
	if (rc == HV_OK)
		rc = hv_collect_walk_open(&w, dir, &walk_opts, HV_SORT_NAME);
	if (rc == HV_OK && cache != INT_MAX)
		hv__walk_cap_fds(w, HVC_WALK_FDS + cache);
	const char *fp = NULL;
	if (rc == HV_OK && b->magic[0])
		fp = hv_magic_fingerprint(b->magic[0]);
	size_t failed = 0, files = 0;
	bool warned = false;
	const hv_entry *e;
	while (rc == HV_OK) {
		hv_status s = hv_walk_next(w, &e);
		if (s == HV_DONE)
			break;
		if (s == HV_WARN) {
			warned = true;
			if (walk_opts.on_warning)
				hv__call_message_fn(walk_opts.on_warning, walk_opts.ctx, hv_error_last());
			continue;
		}
		if (s != HV_OK) {
			rc = s;
			break;
		}
		if (walk_opts.on_progress)
			walk_opts.on_progress(walk_opts.ctx, hv_walk_count(w), files, 0);
		/* Every regular file below dir; the database's own files are answered too (they
		 * are files like any other here: nothing is recorded). */
		if (e->type != HV_FT_FILE)
			continue;
		files++;
		rc = dir_add(b, w, e, b->cache_lost ? NULL : st, fp);
		if (rc == HV_OK && b->cache_lost && st) {
			if (walk_opts.on_warning)
				hv__call_message_fn(walk_opts.on_warning, walk_opts.ctx, cache_lost_message(b));
			st = NULL; /* not read again, nor written */
		}
		if (rc == HV_OK && b->n == b->max)
			rc = dir_flush(b, st, fp, &o, fn, ctx, &failed);
	}
	if (rc == HV_OK && b->n)
		rc = dir_flush(b, st, fp, &o, fn, ctx, &failed);
	if (rc != HV_OK) {
		/* What is left of the batch is dropped, its descriptors closed. */
		hv_error_saved saved;
		hv_error_save(&saved);
		for (size_t i = 0; i < b->n; i++) {
			free(b->items[i].path);
			free(b->items[i].r.mime_type);
			free(b->items[i].r.error);
			if (b->items[i].fd >= 0)
				close(b->items[i].fd);
		}
		hv_error_restore(&saved, rc);
	}
	hvm_read_end(st, b->reading);
	if (rc == HV_OK && st)
		rc = hv_store_flush(st);
	hv_walk_close(w);
	for (size_t t = 0; b->magic && t < b->threads; t++)
		hv_magic_close(b->magic[t]);
	free(b->magic);
	bool lost = b->cache_lost;
	char lost_why[sizeof(b->cache_error) + 64];
	snprintf(lost_why, sizeof(lost_why), "%s", lost ? cache_lost_message(b) : "");
	free(b);
	if (rc == HV_OK && lost)
		return hv_error_set(HV_WARN, "%s", lost_why);
	if (rc == HV_OK && failed)
		return hv_error_set(HV_WARN, "%zu of %zu files could not be examined", failed, files);
	if (rc == HV_OK && warned)
		return hv_error_set(HV_WARN, "some directories below %s could not be read", dir);
	return rc;
}
