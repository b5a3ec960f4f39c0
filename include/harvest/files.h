/* harvest — file commands: read a file out, write one atomically, remove a file or a tree.
 *
 * These are the sandbox's readFile, writeFile and removeFile, with the walker's safety:
 * - Reading opens the file once (O_NONBLOCK|O_NOCTTY) and checks what it opened with fstat, so
 *   a FIFO, socket or device is refused without hanging; the bytes stream through a bounded
 *   buffer, whatever the file's size.
 * - Writing goes to an unnamed (O_TMPFILE) or short-named (.hv.XXXXXX) temporary file in the
 *   destination's directory, synced, then renamed over the destination: a reader sees the old
 *   file or the whole new one, never a part. Parent directories harvest creates are opened
 *   with O_NOFOLLOW|O_DIRECTORY, so a symlink swapped in for one cannot lead the write
 *   elsewhere; the existing part of the path is resolved once, as open(2) resolves it.
 * - Removing never follows a symlink: a symlink is removed itself, a tree is removed through
 *   directory descriptors (O_NOFOLLOW|O_DIRECTORY, unlinkat) with an explicit stack, so any
 *   depth works, and a directory swapped for a symlink mid-way is not entered.
 * Paths are byte strings; nothing is assumed about their encoding. Every function is
 * thread-safe (no global state; the process's umask is not touched). */
#ifndef HARVEST_FILES_H
#define HARVEST_FILES_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the bytes of the regular file path to out_fd, in bounded memory (a 256 KiB buffer).
 * A symlink is followed, as cat(1) does. out_name names out_fd in messages ("standard
 * output"; NULL: "output"). Returns HV_OK; HV_ENOTDIR when path does not exist or a
 * component of it is not a directory; HV_EIO for the rest: a directory, a FIFO, socket or
 * device (refused without reading), permission denied, a read error (message naming path) or
 * a write error (message naming out_name). On HV_EIO after some bytes went out, out_fd has
 * received a prefix of the file. */
HV_EXTERN hv_status hv_file_copy_to_fd(const char *path, int out_fd, const char *out_name);

/* Where hv_file_write takes its bytes from: read up to cap bytes into buf, set *got (0 at the
 * end) and return HV_OK, or fail with a status and an hv_error_set-style message. */
typedef hv_status (*hv_file_read_fn)(void *ctx, void *buf, size_t cap, size_t *got);

typedef struct hv_file_write_opts {
	/* Permission bits (at most 07777) the file gets, applied exactly (not masked by the
	 * umask); -1: an existing file keeps its mode, a new one gets 0666 & ~umask. */
	int mode;
	/* Missing parent directories are created (0777 & ~umask, as mkdir -p); false: a
	 * missing parent fails with HV_ENOTDIR. */
	bool parents;
	/* fsync the file before it is renamed into place and the directory after (default
	 * true): after a crash, the path holds the old bytes or all of the new ones. */
	bool sync;
} hv_file_write_opts;

/* Fills opts with the defaults: mode -1, parents, sync. */
HV_EXTERN void hv_file_write_opts_init(hv_file_write_opts *opts);

/* Replaces (or creates) the file path with the bytes read from read_fn until it gives 0.
 * The destination's last component is never followed: an existing symlink there is replaced
 * by the file, not written through. An existing directory there is refused (HV_EIO). When
 * an existing file belongs to another user, root keeps its owner (best effort, as editors
 * do). opts may be NULL (the defaults). Returns HV_OK; HV_EUSAGE for a path that names no file
 * (empty, ending in '/', '.' or '..') or a mode above 07777; HV_ENOTDIR when a parent is
 * missing and !parents; HV_EIO for the rest (a parent that is not a directory, permission
 * denied, no space...), or read_fn's status. On failure path is as it was (the temporary
 * file is gone) and any parent directories made stay. */
HV_EXTERN hv_status hv_file_write(const char *path, hv_file_read_fn read_fn, void *ctx,
			const hv_file_write_opts *opts);

/* hv_file_write with the bytes read from in_fd until end of file; in_name names in_fd in
 * messages ("standard input"; NULL: "input"). */
HV_EXTERN hv_status hv_file_write_fd(const char *path, int in_fd, const char *in_name,
			   const hv_file_write_opts *opts);

/* hv_file_write with the bytes data[0..len). */
HV_EXTERN hv_status hv_file_write_buffer(const char *path, const void *data, size_t len,
			       const hv_file_write_opts *opts);

typedef struct hv_remove_opts {
	/* Remove a directory and everything below it; false: a directory is refused. */
	bool recursive;
	/* Called with each entry below path that could not be removed ("p/a/b: Permission
	 * denied"); the removal goes on with the rest. May be NULL. */
	void (*on_error)(void *ctx, const char *message);
	void *ctx;
} hv_remove_opts;

/* Fills opts with the defaults: not recursive, no error callback. */
HV_EXTERN void hv_remove_opts_init(hv_remove_opts *opts);

/* Removes path: a file, a symlink (itself, never what it points to; with a trailing '/' it
 * is refused, not followed) or another non-directory; with recursive, a directory tree. The
 * part of path before its last component is resolved as open(2) resolves it. Refuses '/'
 * and a last component '.' or '..' (HV_EUSAGE), as rm(1) does. opts may be NULL (not
 * recursive). Returns HV_OK; HV_ENOTDIR when path does not exist or a component of it is not
 * a directory; HV_EIO for the rest: a directory without recursive, permission denied, a tree
 * root swapped for something else after it was looked at (left alone), or a tree of which
 * some entries could not be removed (each one reported to on_error; what could be removed
 * is removed; hv_error_last() holds the last of them). */
HV_EXTERN hv_status hv_remove(const char *path, const hv_remove_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
