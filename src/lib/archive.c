/* Archives of a directory tree (through the walker) and of a run's stored artifacts, written
 * with libarchive to a file descriptor, streamed in bounded memory. */
#include "harvest/archive.h"
#include "test_hook.h"

#include "dl_archive.h"
#include "harvest/json.h"
#include "harvest/records.h"
#include "fdio.h"
#include "internal.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* File contents are copied through a buffer of this size: the memory a file costs, whatever
 * its size. */
#define COPY_BUF (256 * 1024)

static const char MANIFEST_NAME[] = "MANIFEST.json";

const char *hv_archive_format_name(hv_archive_format f)
{
	switch (f) {
	case HV_ARCHIVE_TAR_GZ: return "tar.gz";
	case HV_ARCHIVE_ZIP: return "zip";
	case HV_ARCHIVE_TAR: return "tar";
	}
	return "unknown";
}

static bool ends_with(const char *s, size_t len, const char *suffix)
{
	size_t n = strlen(suffix);
	return len >= n && strcasecmp(s + len - n, suffix) == 0;
}

hv_status hv_archive_format_from_name(const char *name, hv_archive_format *out)
{
	HV_NEED(name && out);
	size_t len = strlen(name);
	if (ends_with(name, len, ".tar.gz") || ends_with(name, len, ".tgz"))
		*out = HV_ARCHIVE_TAR_GZ;
	else if (ends_with(name, len, ".tar"))
		*out = HV_ARCHIVE_TAR;
	else if (ends_with(name, len, ".zip"))
		*out = HV_ARCHIVE_ZIP;
	else
		return hv_error_set(HV_EUSAGE,
				    "%s: unknown archive extension (expected .tar, .tar.gz, .tgz or .zip)",
				    name);
	return HV_OK;
}

hv_status hv_archive_format_parse(const char *s, hv_archive_format *out)
{
	HV_NEED(s && out);
	if (strcmp(s, "tar") == 0)
		*out = HV_ARCHIVE_TAR;
	else if (strcmp(s, "tar.gz") == 0 || strcmp(s, "tgz") == 0)
		*out = HV_ARCHIVE_TAR_GZ;
	else if (strcmp(s, "zip") == 0)
		*out = HV_ARCHIVE_ZIP;
	else
		return hv_error_set(HV_EUSAGE, "expected tar, tar.gz or zip, not '%s'", s);
	return HV_OK;
}

void hv_archive_opts_init(hv_archive_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->format = HV_ARCHIVE_TAR;
	opts->max_depth = -1;
}

/* ---- The writer: libarchive over a descriptor ------------------------------------------ */

struct writer {
	struct archive *a;
	int fd;
	int write_errno;        /* the errno of the write that failed, 0 while none did */
	bool discard;           /* the archive failed: closing it writes nothing more */
	bool zip;
	locale_t utf8_loc;      /* names are handed to libarchive under this locale... */
	locale_t c_loc;         /* ...or this one, for a zip name that is not UTF-8 */
	locale_t saved_loc;
	const hv_archive_opts *o;
	hv_archive_stats *stats;
	char *buf;
	struct archive_entry *entry;
	const char *root;       /* a tree's root as given: what its members' warnings begin with */
	hv_buf shown;           /* root/path of the last member warned about */
};

/* A tree member's path as warnings name it: under the root as the caller gave it, as the
 * walk's own warnings do (a run's artifacts: the recorded path). */
static const char *shown(struct writer *wr, const char *path)
{
	if (!wr->root)
		return path;
	size_t n = strlen(wr->root);
	hv_buf_truncate(&wr->shown, 0);
	if (hv_buf_append(&wr->shown, wr->root, n) != HV_OK ||
	    (n && wr->root[n - 1] != '/' && hv_buf_append_char(&wr->shown, '/') != HV_OK) ||
	    hv_buf_append(&wr->shown, path, strlen(path) + 1) != HV_OK)
		return path;
	return wr->shown.data;
}

/* libarchive's write callback: the whole block, retrying short writes and EINTR, and waiting
 * out a non-blocking pipe (fdio.h). A failure (ENOSPC, EPIPE with SIGPIPE ignored, EIO) is
 * recorded and everything after it is discarded: the caller checks write_errno after each
 * libarchive call and stops there, so nothing retries forever. (Returning -1 would leave
 * libarchive in a fatal state in which closing it no longer frees its buffers.) */
static la_ssize_t write_cb(struct archive *a, void *ctx, const void *data, size_t len)
{
	struct writer *wr = ctx;
	if (!wr->write_errno && !wr->discard && hv_write_all(wr->fd, data, len) != 0)
		wr->write_errno = errno;
	(void)a;
	return (la_ssize_t)len;
}

static hv_status fail_archive(struct writer *wr, const char *what)
{
	if (wr->write_errno)
		return hv_error_set(HV_EIO, "writing the archive: %s", strerror(wr->write_errno));
	const char *msg = archive_error_string(wr->a);
	return hv_error_set(HV_EIO, "%s: %s", what, msg ? msg : "libarchive failed");
}

static void warnf(struct writer *wr, const char *fmt, ...) HV_ATTR_PRINTF(2, 3);
static void warnf(struct writer *wr, const char *fmt, ...)
{
	wr->stats->warnings++;
	if (!wr->o->warn)
		return;
	va_list ap;
	va_start(ap, fmt);
	char *msg = NULL;
	int n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	hv__call_message_fn(wr->o->warn, wr->o->ctx,
			    n >= 0 && msg ? msg : "out of memory formatting a warning");
	if (n >= 0)
		free(msg);
}

static hv_status writer_open(struct writer *wr, int fd, const hv_archive_opts *o, hv_archive_stats *st)
{
	memset(wr, 0, sizeof(*wr));
	wr->fd = fd;
	wr->o = o;
	wr->stats = st;
	wr->zip = o->format == HV_ARCHIVE_ZIP;
	if (o->format != HV_ARCHIVE_TAR && o->format != HV_ARCHIVE_TAR_GZ &&
	    o->format != HV_ARCHIVE_ZIP)
		return hv_error_set(HV_EUSAGE, "bad archive format: %d", (int)o->format);
	/* libarchive is loaded on the first archive, not when harvest starts (dl_archive.h). */
	char why[512];
	if (hv__archive_load(why, sizeof(why)) != 0)
		return hv_error_set(HV_EIO, "cannot write the archive: %s", why);
	/* libarchive reads names in the calling thread's locale: a UTF-8 one makes pax write valid
	 * UTF-8 names as they are (and the rest with hdrcharset=BINARY) and zip flag them as
	 * UTF-8. uselocale is per thread, so the caller's locale is untouched elsewhere. */
	wr->utf8_loc = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
	wr->c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
	wr->buf = malloc(COPY_BUF);
	wr->a = archive_write_new();
	wr->entry = archive_entry_new();
	if (!wr->buf || !wr->a || !wr->entry || !wr->c_loc)
		return hv_error_set(HV_ENOMEM, "out of memory");
	wr->saved_loc = uselocale(wr->utf8_loc ? wr->utf8_loc : wr->c_loc);
	int r;
	switch (o->format) {
	case HV_ARCHIVE_ZIP:
		r = archive_write_set_format_zip(wr->a);
		if (r == ARCHIVE_OK)
			r = archive_write_zip_set_compression_deflate(wr->a);
		if (r == ARCHIVE_OK)
			r = archive_write_set_bytes_in_last_block(wr->a, 1);
		break;
	case HV_ARCHIVE_TAR_GZ:
		r = archive_write_set_format_pax(wr->a);
		if (r == ARCHIVE_OK)
			r = archive_write_add_filter_gzip(wr->a);
		if (r == ARCHIVE_OK)
			r = archive_write_set_bytes_in_last_block(wr->a, 1);
		break;
	case HV_ARCHIVE_TAR:
		r = archive_write_set_format_pax(wr->a);
		break;
	default:
		return hv_error_set(HV_EUSAGE, "unknown archive format %d", (int)o->format);
	}
	if (r != ARCHIVE_OK)
		return fail_archive(wr, "setting up the archive");
	if (archive_write_open2(wr->a, wr, NULL, write_cb, NULL, NULL) != ARCHIVE_OK)
		return fail_archive(wr, "opening the archive");
	return HV_OK;
}

/* Ends the archive (the trailer, the zip central directory) when ok, and frees everything. */
static hv_status writer_close(struct writer *wr, int rc)
{
	if (wr->a) {
		wr->discard = rc < 0;
		if (archive_write_close(wr->a) != ARCHIVE_OK && rc >= 0)
			rc = fail_archive(wr, "closing the archive");
		if (rc >= 0 && wr->write_errno)
			rc = fail_archive(wr, "closing the archive");
		archive_write_free(wr->a);
	}
	if (wr->saved_loc)
		uselocale(wr->saved_loc);
	if (wr->utf8_loc)
		freelocale(wr->utf8_loc);
	if (wr->c_loc)
		freelocale(wr->c_loc);
	if (wr->entry) /* NULL when libarchive could not be loaded */
		archive_entry_free(wr->entry);
	free(wr->buf);
	hv_buf_free(&wr->shown);
	return rc;
}

static bool utf8_valid(const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		size_t n = hv_utf8_sequence_length(s + i, len - i);
		if (n == 0)
			return false;
		i += n;
	}
	return true;
}

/* A zip header holds a name of at most 65,535 bytes (a 16-bit length), and libarchive builds
 * the local header, the name and its extra fields in one 64 KiB buffer: a longer member path
 * is left out (warned of) before libarchive sees it. Room is left for the header (30 bytes),
 * the '/' a directory's name ends with and the extra fields (time, owner, zip64). */
#define ZIP_NAME_MAX (65535 - 1024)

/* A member path must be relative and stay inside the extraction directory: not empty, no
 * leading '/', no empty, "." or ".." component, no NUL. In a zip no '\\' either: zip's
 * separator is '/', but extractors on Windows, and bsdtar, read a '\\' as one too, so
 * "a\\b" would not come out as the name it is, and "..\\x" would leave the directory. */
static bool member_path_safe(const char *p, size_t len, bool zip)
{
	if (len == 0 || p[0] == '/' || memchr(p, '\0', len) || (zip && memchr(p, '\\', len)))
		return false;
	if (zip && len > ZIP_NAME_MAX)
		return false;
	size_t i = 0;
	while (i <= len) {
		const char *slash = memchr(p + i, '/', len - i);
		size_t end = slash ? (size_t)(slash - p) : len;
		size_t n = end - i;
		if (n == 0 || (n == 1 && p[i] == '.') || (n == 2 && p[i] == '.' && p[i + 1] == '.'))
			return false;
		i = end + 1;
	}
	return true;
}

/* Starts a member: clears the entry and sets its path (under the locale its bytes need). */
static void entry_begin(struct writer *wr, const char *path, size_t len)
{
	archive_entry_clear(wr->entry);
	if (wr->zip && wr->utf8_loc)
		uselocale(utf8_valid(path, len) ? wr->utf8_loc : wr->c_loc);
	archive_entry_copy_pathname(wr->entry, path);
	archive_entry_set_uid(wr->entry, 0);
	archive_entry_set_gid(wr->entry, 0);
}

/* Writes the header of the prepared entry (path: the member's; messages name it as shown()
 * does). 1: written; 0: libarchive refused this member (warned, the archive goes on); <0:
 * fatal. */
static hv_status entry_header(struct writer *wr, const char *path)
{
	int r = archive_write_header(wr->a, wr->entry);
	if (wr->write_errno)
		return fail_archive(wr, shown(wr, path));
	if (r == ARCHIVE_OK || r == ARCHIVE_WARN) {
		wr->stats->members++;
		return 1;
	}
	if (r == ARCHIVE_FATAL)
		return fail_archive(wr, shown(wr, path));
	const char *msg = archive_error_string(wr->a);
	warnf(wr, "%s: %s; skipped", shown(wr, path), msg ? msg : "cannot be archived");
	return 0;
}

static hv_status write_data(struct writer *wr, const void *data, size_t len, const char *path)
{
	const char *p = data;
	while (len > 0) {
		la_ssize_t n = archive_write_data(wr->a, p, len);
		if (n <= 0 || wr->write_errno)
			return fail_archive(wr, shown(wr, path));
		p += n;
		len -= (size_t)n;
	}
	return HV_OK;
}

/* Writes len zero bytes: the rest of a file that shrank while it was read. */
static hv_status write_zeros(struct writer *wr, uint64_t len, const char *path)
{
	memset(wr->buf, 0, COPY_BUF);
	while (len > 0) {
		size_t n = len < COPY_BUF ? (size_t)len : COPY_BUF;
		int rc = write_data(wr, wr->buf, n, path);
		if (rc != HV_OK)
			return rc;
		len -= n;
	}
	return HV_OK;
}

/* Copies exactly size bytes of fd into the current member; a file that holds fewer (it shrank,
 * or a read failed) is padded with zeros, one that holds more is cut, and both are warned
 * about, since the header already promised size bytes. */
static hv_status copy_file(struct writer *wr, int fd, uint64_t size, const char *path)
{
	uint64_t done = 0;
	int read_err = 0;
	while (done < size) {
		size_t want = size - done < COPY_BUF ? (size_t)(size - done) : COPY_BUF;
		ssize_t n = read(fd, wr->buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			read_err = errno;
		if (n <= 0)
			break;
		int rc = write_data(wr, wr->buf, (size_t)n, path);
		if (rc != HV_OK)
			return rc;
		done += (uint64_t)n;
		wr->stats->bytes += (uint64_t)n;
	}
	if (done < size) {
		int rc = write_zeros(wr, size - done, path);
		if (rc != HV_OK)
			return rc;
		if (read_err)
			warnf(wr, "%s: %s; the rest stored as zeros", shown(wr, path),
			      strerror(read_err));
		else
			warnf(wr, "%s: file shrank as we read it; padded with zeros",
			      shown(wr, path));
		return HV_OK;
	}
	char extra;
	ssize_t n;
	do
		n = read(fd, &extra, 1);
	while (n < 0 && errno == EINTR);
	if (n > 0)
		warnf(wr, "%s: file grew as we read it; stored its first %llu bytes",
		      shown(wr, path), (unsigned long long)size);
	return HV_OK;
}

/* ---- A tree ---------------------------------------------------------------------------- */

/* A zip member's time is an MS-DOS date (1980 to 2107) and the extended timestamp's
 * unsigned 32-bit seconds (to 2106-02-07T06:28:15Z), which readers wrap around when the time
 * is outside them (1969 read back as 2105): such a time is stored as the nearest one that
 * both can hold. pax tar holds any time. */
enum { ZIP_TIME_MIN = 315532800 /* 1980-01-01T00:00:00Z */ };
#define ZIP_TIME_MAX INT64_C(4294967295)

static void set_times(const struct writer *wr, struct archive_entry *ae, int64_t sec, long nsec)
{
	if (wr->zip && (sec < ZIP_TIME_MIN || sec > ZIP_TIME_MAX)) {
		sec = sec < ZIP_TIME_MIN ? ZIP_TIME_MIN : ZIP_TIME_MAX;
		nsec = 0;
	}
	archive_entry_set_mtime(ae, (time_t)sec, (long)nsec);
}

/* Permission and sticky bits only: an archive made of what a sandbox wrote must not extract
 * (as root, owner 0) into a setuid program. */
#define MODE_KEPT 01777u

static hv_status archive_file(struct writer *wr, hv_walk *w, const hv_entry *e, const struct stat *out)
{
	if (HV_UNLIKELY(hv__test_hook_active(HV__HOOK_ARCHIVE_BEFORE_OPEN)))
		hv__test_hook_call(HV__HOOK_ARCHIVE_BEFORE_OPEN, e->path);
	int fd = hv_walk_openat(w, O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		int err = errno;
		if (err == ELOOP)
			warnf(wr, "%s: became a symlink while being archived; skipped",
			      shown(wr, e->path));
		else if (err == ENXIO || err == ENODEV || err == EOPNOTSUPP)
			warnf(wr, "%s: became a special file while being archived; skipped",
			      shown(wr, e->path));
		else
			warnf(wr, "%s: %s; skipped", shown(wr, e->path), strerror(err));
		return HV_OK;
	}
	struct stat fst;
	int rc = HV_OK;
	if (fstat(fd, &fst) != 0) {
		warnf(wr, "%s: %s; skipped", shown(wr, e->path), strerror(errno));
	} else if (!S_ISREG(fst.st_mode)) {
		/* swapped for a FIFO or a device after the walk saw it: never read */
		warnf(wr, "%s: became a special file while being archived; skipped",
		      shown(wr, e->path));
	} else if ((out && fst.st_dev == out->st_dev && fst.st_ino == out->st_ino) ||
		   (wr->o->leave_out && (uint64_t)fst.st_dev == wr->o->leave_out_dev &&
		    (uint64_t)fst.st_ino == wr->o->leave_out_ino)) {
		/* the archive being written, or the one it replaces, inside the tree it archives:
		 * left out, as tar does */
	} else {
		entry_begin(wr, e->path, e->path_len);
		archive_entry_set_filetype(wr->entry, AE_IFREG);
		archive_entry_set_perm(wr->entry, fst.st_mode & MODE_KEPT);
		archive_entry_set_size(wr->entry, fst.st_size);
		set_times(wr, wr->entry, fst.st_mtim.tv_sec, fst.st_mtim.tv_nsec);
		rc = entry_header(wr, e->path);
		if (rc > 0 && HV_UNLIKELY(hv__test_hook_active(HV__HOOK_ARCHIVE_AFTER_HEADER)))
			hv__test_hook_call(HV__HOOK_ARCHIVE_AFTER_HEADER, e->path);
		if (rc > 0)
			rc = copy_file(wr, fd, (uint64_t)fst.st_size, e->path);
	}
	close(fd);
	return rc < 0 ? rc : HV_OK;
}

static hv_status archive_entry_of_walk(struct writer *wr, hv_walk *w, const hv_entry *e,
				 const struct stat *out)
{
	if (!member_path_safe(e->path, e->path_len, wr->zip)) {
		bool zip_long = wr->zip && e->path_len > ZIP_NAME_MAX;
		warnf(wr, "%s: %s%s; skipped", shown(wr, e->path),
		      zip_long ? "a path too long for zip" : "not a safe member path",
		      zip_long ? " (a zip name holds at most 64 KiB)"
		      : wr->zip && memchr(e->path, '\\', e->path_len)
			      ? " (zip readers take a backslash in a name for a separator)"
			      : "");
		return HV_OK;
	}
	if (e->type == HV_FT_FILE)
		return archive_file(wr, w, e, out);
	if (!e->have_lstat) {
		warnf(wr, "%s: cannot be examined; skipped", shown(wr, e->path));
		return HV_OK;
	}
	int rc;
	switch (e->type) {
	case HV_FT_DIR:
		entry_begin(wr, e->path, e->path_len);
		archive_entry_set_filetype(wr->entry, AE_IFDIR);
		archive_entry_set_perm(wr->entry, e->lst.mode & MODE_KEPT);
		set_times(wr, wr->entry, e->lst.mtime_sec, (long)e->lst.mtime_nsec);
		rc = entry_header(wr, e->path);
		return rc < 0 ? rc : HV_OK;
	case HV_FT_SYMLINK:
		if (!e->target) {
			warnf(wr, "%s: cannot read the symlink; skipped", shown(wr, e->path));
			return HV_OK;
		}
		entry_begin(wr, e->path, e->path_len);
		archive_entry_set_filetype(wr->entry, AE_IFLNK);
		archive_entry_set_perm(wr->entry, 0777);
		archive_entry_copy_symlink(wr->entry, e->target);
		set_times(wr, wr->entry, e->lst.mtime_sec, (long)e->lst.mtime_nsec);
		rc = entry_header(wr, e->path);
		return rc < 0 ? rc : HV_OK;
	default:
		/* never opened: reading a FIFO could block forever, a device is not a file */
		warnf(wr, "%s: a %s, not archived", shown(wr, e->path),
		      e->type == HV_FT_CHAR	 ? "character device"
		      : e->type == HV_FT_BLOCK ? "block device"
					       : hv_ftype_name(e->type));
		return HV_OK;
	}
}

/* HV_OK, or HV_WARN with a message (each warning went to opts->warn as it came). */
static hv_status archive_result(const hv_archive_stats *stats)
{
	if (!stats->warnings)
		return HV_OK;
	return hv_error_set(HV_WARN, "%llu entr%s skipped or changed while archived",
			    (unsigned long long)stats->warnings, stats->warnings == 1 ? "y" : "ies");
}

hv_status hv_archive_dir(int out_fd, const char *root, const hv_archive_opts *o,
			 hv_archive_stats *stats)
{
	HV_NEED(root);
	hv_archive_opts defaults;
	if (!o) {
		hv_archive_opts_init(&defaults);
		o = &defaults;
	}
	hv_archive_stats local;
	if (!stats)
		stats = &local;
	memset(stats, 0, sizeof(*stats));
	hv_walk_opts wo;
	hv_walk_opts_init(&wo);
	wo.max_depth = o->max_depth;
	wo.xdev = o->xdev;
	wo.no_hidden = o->no_hidden;
	wo.excludes = o->excludes;
	wo.n_excludes = o->n_excludes;
	wo.threads = o->threads;
	wo.sort = HV_SORT_NAME;
	wo.readlink = true;
	wo.follow = false;
	hv_walk *w = NULL;
	int rc = hv_walk_open(&w, root, &wo);
	if (rc != HV_OK)
		return rc;
	struct stat out_st;
	bool have_out = fstat(out_fd, &out_st) == 0 && S_ISREG(out_st.st_mode);
	struct writer wr;
	rc = writer_open(&wr, out_fd, o, stats);
	wr.root = root;
	while (rc == HV_OK) {
		const hv_entry *e;
		int s = hv_walk_next(w, &e);
		if (s == HV_DONE)
			break;
		if (s == HV_WARN) {
			warnf(&wr, "%s", hv_error_last());
			continue;
		}
		if (s < 0) {
			rc = s;
			break;
		}
		rc = archive_entry_of_walk(&wr, w, e, have_out ? &out_st : NULL);
	}
	hv_walk_close(w);
	if (rc < 0) {
		/* the first failure is the one to report, not what closing says after it */
		hv_error_saved saved;
		hv_error_save(&saved);
		writer_close(&wr, rc);
		return hv_error_restore(&saved, rc);
	}
	rc = writer_close(&wr, rc);
	if (rc < 0)
		return rc;
	return archive_result(stats);
}

/* ---- A run ----------------------------------------------------------------------------- */

struct art_plan {
	int64_t artifact_id;
	bool archived;
};

/* Why artifact a is left out of the archive, or NULL when it goes in. */
static const char *leave_out_reason(const hv_artifact_row *a, bool zip)
{
	if (!member_path_safe(a->path, a->path_len, zip))
		return "unsafe_path";
	if (a->path_len == sizeof(MANIFEST_NAME) - 1 && !memcmp(a->path, MANIFEST_NAME, a->path_len))
		return "reserved";
	if (!a->content_stored)
		return "not_stored";
	return NULL;
}

/* Reads the run's artifacts (without contents) into the manifest and the plan. */
static hv_status plan_run(hv_store *st, int64_t run_id, struct writer *wr, hv_json *j,
		    struct art_plan **plan, size_t *n_plan)
{
	hv_artifact_filter f = {.run_id = run_id};
	hv_artifact_iter *it = NULL;
	int rc = hv_store_artifacts(st, &f, &it);
	if (rc != HV_OK)
		return rc;
	size_t cap = 0;
	hv_json_object_begin(j);
	hv_json_key(j, "run_id");
	hv_json_int(j, run_id);
	hv_json_key(j, "artifacts");
	hv_json_array_begin(j);
	for (;;) {
		const hv_artifact_row *a;
		rc = hv_artifact_iter_next(it, &a);
		if (rc == HV_DONE) {
			rc = HV_OK;
			break;
		}
		if (rc != HV_OK)
			break;
		const char *reason = leave_out_reason(a, wr->zip);
		if (*n_plan == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct art_plan *np = realloc(*plan, ncap * sizeof(*np));
			if (!np) {
				rc = hv_error_set(HV_ENOMEM, "out of memory");
				break;
			}
			*plan = np;
			cap = ncap;
		}
		(*plan)[(*n_plan)++] = (struct art_plan){a->artifact_id, reason == NULL};
		hv_record_manifest_artifact(j, a, reason);
		if (reason)
			warnf(wr, "%s: %s, not archived (artifact %lld)", a->path,
			      !strcmp(reason, "not_stored") ? "content not stored"
			      : !strcmp(reason, "reserved") ? "the manifest's name"
			      : wr->zip && a->path_len > ZIP_NAME_MAX ? "a path too long for zip"
							    : "unsafe path",
			      (long long)a->artifact_id);
	}
	hv_artifact_iter_free(it);
	hv_json_array_end(j);
	hv_json_object_end(j);
	hv_json_newline(j);
	if (rc == HV_OK && hv_json_status(j) != HV_OK)
		rc = hv_error_set(HV_ENOMEM, "out of memory");
	return rc;
}

static hv_status write_member(struct writer *wr, const char *path, size_t path_len, const void *data,
			size_t len, int64_t mtime_ns)
{
	entry_begin(wr, path, path_len);
	archive_entry_set_filetype(wr->entry, AE_IFREG);
	archive_entry_set_perm(wr->entry, 0644);
	archive_entry_set_size(wr->entry, (la_int64_t)len);
	int64_t sec = mtime_ns / 1000000000;
	long nsec = (long)(mtime_ns % 1000000000);
	if (nsec < 0) {
		nsec += 1000000000;
		sec--;
	}
	set_times(wr, wr->entry, sec, nsec);
	int rc = entry_header(wr, path);
	if (rc <= 0)
		return rc;
	rc = write_data(wr, data, len, path);
	if (rc == HV_OK)
		wr->stats->bytes += len;
	return rc;
}

static hv_status archive_contents(hv_store *st, int64_t run_id, struct writer *wr,
			    const struct art_plan *plan, size_t n_plan)
{
	hv_artifact_filter f = {.run_id = run_id, .with_content = true};
	hv_artifact_iter *it = NULL;
	int rc = hv_store_artifacts(st, &f, &it);
	if (rc != HV_OK)
		return rc;
	size_t k = 0;
	for (;;) {
		const hv_artifact_row *a;
		rc = hv_artifact_iter_next(it, &a);
		if (rc == HV_DONE) {
			rc = HV_OK;
			break;
		}
		if (rc != HV_OK)
			break;
		while (k < n_plan && plan[k].artifact_id != a->artifact_id)
			k++;
		if (k == n_plan || !plan[k].archived)
			continue;
		if (!a->content) {
			rc = hv_error_set(HV_EIO, "run %lld: artifact %lld changed while archived",
					  (long long)run_id, (long long)a->artifact_id);
			break;
		}
		rc = write_member(wr, a->path, a->path_len, a->content, a->content_len,
				  a->recorded_at_ns);
		if (rc < 0)
			break;
	}
	hv_artifact_iter_free(it);
	return rc;
}

hv_status hv_archive_run(int out_fd, hv_store *st, int64_t run_id, const hv_archive_opts *o,
			 hv_archive_stats *stats)
{
	HV_NEED(st);
	hv_archive_opts defaults;
	if (!o) {
		hv_archive_opts_init(&defaults);
		o = &defaults;
	}
	hv_archive_stats local;
	if (!stats)
		stats = &local;
	memset(stats, 0, sizeof(*stats));
	/* Run ids start at 1; a filter's 0 would mean every run. */
	if (run_id < 1)
		return hv_error_set(HV_ENOTFOUND, "no run %lld", (long long)run_id);
	hv_run_filter rf = {.run_id = run_id, .limit = 1};
	hv_run_iter *ri = NULL;
	int rc = hv_store_runs(st, &rf, &ri);
	if (rc != HV_OK)
		return rc;
	const hv_run_row *row;
	rc = hv_run_iter_next(ri, &row);
	int64_t when = rc == HV_OK ? (row->ended ? row->ended_at_ns : row->started_at_ns) : 0;
	hv_run_iter_free(ri);
	if (rc == HV_DONE)
		return hv_error_set(HV_ENOTFOUND, "no run %lld", (long long)run_id);
	if (rc != HV_OK)
		return rc;
	hv_json *j = NULL;
	if (hv_json_new_buffer(&j, HV_CASE_SNAKE) != HV_OK)
		return hv_error_set(HV_ENOMEM, "out of memory");
	struct art_plan *plan = NULL;
	size_t n_plan = 0;
	struct writer wr;
	rc = writer_open(&wr, out_fd, o, stats);
	if (rc == HV_OK)
		rc = plan_run(st, run_id, &wr, j, &plan, &n_plan);
	if (rc == HV_OK) {
		size_t len;
		const char *text = hv_json_buffer(j, &len);
		rc = write_member(&wr, MANIFEST_NAME, sizeof(MANIFEST_NAME) - 1, text, len, when);
		rc = rc < 0 ? rc : HV_OK;
	}
	if (rc == HV_OK)
		rc = archive_contents(st, run_id, &wr, plan, n_plan);
	free(plan);
	hv_json_free(j);
	if (rc < 0) {
		hv_error_saved saved;
		hv_error_save(&saved);
		writer_close(&wr, rc);
		return hv_error_restore(&saved, rc);
	}
	rc = writer_close(&wr, rc);
	if (rc < 0)
		return rc;
	return archive_result(stats);
}
