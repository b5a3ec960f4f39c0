/* harvest — archives: a directory tree, or the stored artifacts of a run, as tar, tar.gz or zip.
 *
 * A tree is archived through the walker with its safety rules: every entry is reached through
 * directory descriptors, a regular file is opened relative to its directory with
 * O_NOFOLLOW|O_NONBLOCK and checked with fstat (a file swapped for a symlink or a FIFO after the
 * walk saw it is never read), symlinks are stored as symlinks and never followed, and FIFOs,
 * sockets and devices are never opened (skipped, with a warning). The archive is streamed:
 * memory stays bounded whatever the size of the files.
 *
 * Member paths are relative, '/'-separated, never empty, never absolute and never contain a
 * "." or ".." component. Names are stored as their exact bytes: tar is POSIX pax (a pax header
 * carries names that ustar cannot hold, with hdrcharset=BINARY when they are not UTF-8); zip
 * stores the raw bytes and sets the UTF-8 flag only on a name that is valid UTF-8. Modes keep
 * the permission and sticky bits (setuid and setgid are dropped); owners are stored as 0/0
 * without names; mtimes are kept to the second (nanoseconds in pax). */
#ifndef HARVEST_ARCHIVE_H
#define HARVEST_ARCHIVE_H

#include "store.h"
#include "types.h"
#include "walk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hv_archive_format {
	HV_ARCHIVE_TAR = 0,  /* POSIX pax (ustar where it suffices) */
	HV_ARCHIVE_TAR_GZ,   /* the same, gzip-compressed */
	HV_ARCHIVE_ZIP       /* zip, deflated, with zip64 where needed */
} hv_archive_format;

/* The format a file name asks for by its extension: .tar, .tar.gz or .tgz, .zip (in any case).
 * HV_EUSAGE (with a message naming the name) for any other name. */
HV_EXTERN hv_status hv_archive_format_from_name(const char *name, hv_archive_format *out);
/* The format named "tar", "tar.gz" (or "tgz") or "zip": HV_EUSAGE for another. */
HV_EXTERN hv_status hv_archive_format_parse(const char *s, hv_archive_format *out);
/* "tar", "tar.gz" or "zip"; "unknown" for a value that is none of the formats. */
HV_EXTERN const char *hv_archive_format_name(hv_archive_format f);

typedef struct hv_archive_opts {
	hv_archive_format format;
	/* Walk options, as hv_walk_opts: max_depth, xdev, no_hidden, excludes. (A tree archive
	 * never follows symlinks and always reads their targets; sort is always by name.) */
	int max_depth;
	bool xdev;
	bool no_hidden;
	const char *const *excludes;
	size_t n_excludes;
	int threads;
	/* Each warning (an entry skipped, a file that changed while it was read), as a one-line
	 * message naming the path; NULL: warnings are only counted. */
	void (*warn)(void *ctx, const char *message);
	void *ctx;
	/* A regular file left out besides out_fd, by its st_dev and st_ino (leave_out false:
	 * none): the file an archive written under a temporary name is to replace, which may lie
	 * in the tree (`archive . -o ./a.tar` run again must not hold the last a.tar). */
	bool leave_out;
	uint64_t leave_out_dev, leave_out_ino;
} hv_archive_opts;

/* Fills opts with the defaults: tar, no limits, default threads. */
HV_EXTERN void hv_archive_opts_init(hv_archive_opts *opts);

/* What an archive holds. */
typedef struct hv_archive_stats {
	uint64_t members;   /* members written */
	uint64_t bytes;     /* file bytes written */
	uint64_t warnings;  /* entries skipped or changed */
} hv_archive_stats;

/* Writes the tree below the directory root (a symlink given as root is followed, as the walker
 * does) to out_fd as an archive. A regular file that is out_fd itself (an archive written
 * inside the tree it archives) is left out. A file whose size changes while it is read is
 * stored with the size fstat gave when it was opened (cut, or padded with zeros) and warned
 * about, as tar's "file changed as we read it".
 * HV_OK when complete; HV_WARN when something was skipped or changed (each was passed to
 * opts->warn); HV_ENOTDIR when root is missing or not a directory; HV_EIO when writing failed
 * (the message says why: "No space left on device", "Broken pipe") — out_fd then holds a
 * partial archive; HV_EUSAGE for bad options. opts may be NULL (the defaults of
 * hv_archive_opts_init), and stats too. */
HV_EXTERN hv_status hv_archive_dir(int out_fd, const char *root, const hv_archive_opts *opts,
			 hv_archive_stats *stats);

/* Writes the stored artifacts of run run_id to out_fd as an archive of opts->format (the walk
 * options are unused): first MANIFEST.json, then each artifact whose content the store holds,
 * at its recorded path. The manifest lists every artifact of the run in recorded order:
 *   {"run_id": N, "artifacts": [{"path": P, "mime_type": M, "size": S, "sha256": H,
 *     "archived": true|false, "reason": null|"not_stored"|"unsafe_path"|"reserved"}]}
 * "not_stored": the run recorded the artifact without its content; "unsafe_path": the recorded
 * path is empty, absolute or has an empty, "." or ".." component (in a zip also: has a '\\',
 * or is longer than a zip name holds, about 64 KiB), and is never used as a member path;
 * "reserved": the path is MANIFEST.json itself. Each artifact left out is also
 * passed to opts->warn. HV_OK when every artifact was archived, HV_WARN when some were left
 * out, HV_ENOTFOUND when there is no such run (any run_id below 1 included: 0 is not "every
 * run" here), else a failure as hv_archive_dir. opts and stats may be NULL. */
HV_EXTERN hv_status hv_archive_run(int out_fd, hv_store *st, int64_t run_id, const hv_archive_opts *opts,
			 hv_archive_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
