/* harvest — the directory walker: an iterator of FileInfo records below a root.
 *
 * Everything below the root is reached through directory descriptors opened one component at
 * a time with O_NOFOLLOW|O_DIRECTORY, so a directory swapped for a symlink mid-walk cannot lead
 * the walk outside the root (only `follow` leaves it, on request). The walk keeps no recursion
 * on the C stack and no fixed-size path buffers. Worker threads read and stat directories
 * ahead of the consumer; the order the consumer sees is pre-order (a directory's record comes
 * right before its contents), sorted by name bytewise within each directory when `sort`. */
#ifndef HARVEST_WALK_H
#define HARVEST_WALK_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The type of an entry itself, from lstat (a symlink is HV_FT_SYMLINK). */
typedef enum hv_ftype {
	HV_FT_UNKNOWN = 0,
	HV_FT_FILE,
	HV_FT_DIR,
	HV_FT_SYMLINK,
	HV_FT_FIFO,
	HV_FT_SOCKET,
	HV_FT_CHAR,
	HV_FT_BLOCK
} hv_ftype;

/* "file", "dir", "symlink", "fifo", "socket", "char", "block" or "unknown". */
HV_EXTERN const char *hv_ftype_name(hv_ftype t);
/* The hv_ftype of a st_mode. */
HV_EXTERN hv_ftype hv_ftype_from_mode(uint32_t mode);

/* What lstat said of an entry. */
typedef struct hv_stat {
	uint64_t dev;
	uint64_t ino;
	uint64_t size;
	uint32_t mode;     /* st_mode: type and permission bits */
	int64_t mtime_ns;  /* nanoseconds since the epoch; outside what an int64 of them reaches
	                    * (1677 to 2262) the nearest end, INT64_MIN or INT64_MAX */
	int64_t ctime_ns;  /* the same, of the status change time */
	/* The modification time exactly, read where mtime_ns is saturated (a file may be dated
	 * 2300 by `touch -d`): seconds and nanoseconds. harvest fills them; a caller that fills an
	 * hv_stat of its own may leave them 0 unless mtime_ns is at an end. */
	int64_t mtime_sec;
	uint32_t mtime_nsec;
} hv_stat;

/* One FileInfo record. Pointers are valid until the next hv_walk_next() or hv_walk_close(). */
typedef struct hv_entry {
	const char *name;    /* the base name, NUL-terminated */
	size_t name_len;
	const char *path;    /* relative to the root, '/'-separated, NUL-terminated */
	size_t path_len;
	int depth;           /* children of the root are at depth 1 */
	hv_ftype type;       /* from lstat, or from the directory entry's type when lstat failed */
	bool have_stat;      /* stat (following symlinks) succeeded: is_dir and size are known */
	bool is_dir;
	uint64_t size;       /* st_size from stat (following symlinks) */
	bool have_lstat;     /* lst is filled */
	hv_stat lst;         /* lstat of the entry itself */
	const char *target;  /* a symlink's target when the walk reads links, else NULL */
	size_t target_len;
} hv_entry;

typedef enum hv_walk_sort { HV_SORT_NAME = 0, HV_SORT_NONE = 1 } hv_walk_sort;

typedef struct hv_walk_opts {
	int max_depth;              /* deepest depth listed; -1: no limit */
	bool follow;                /* descend into symlinked directories (may leave the root) */
	bool xdev;                  /* do not descend into other file systems */
	bool no_hidden;             /* leave out names starting with '.' */
	const char *const *excludes;/* fnmatch globs matched on the name; excluded dirs not entered */
	size_t n_excludes;
	uint64_t max_entries;       /* stop after this many records; 0: no limit */
	int threads;                /* worker threads; 0: online CPUs, at most 8; 1: no workers */
	hv_walk_sort sort;
	bool readlink;              /* fill hv_entry.target for symlinks */
} hv_walk_opts;

typedef struct hv_walk hv_walk;

/* Fills opts with the defaults: no limits, sorted by name, default threads. */
HV_EXTERN void hv_walk_opts_init(hv_walk_opts *opts);

/* Opens a walk of the directory root (a symlink given as root is followed, as find -H does).
 * HV_ENOTDIR when root does not exist or is not a directory, HV_EIO when it cannot be looked
 * up (a symlink loop, a name too long, a parent that cannot be searched: the message says
 * which), HV_EUSAGE for bad options. */
HV_EXTERN hv_status hv_walk_open(hv_walk **out, const char *root, const hv_walk_opts *opts);

/* The next record in *out: HV_OK with a record; HV_DONE at the end (*out NULL); HV_WARN (*out
 * NULL, no record this time) when something could not be read (a directory that cannot be opened, a symlink loop under follow, the entry
 * limit reached) — hv_error_last() names the path and the reason and the walk goes on with
 * the next call; a negative status on a fatal failure. */
HV_EXTERN hv_status hv_walk_next(hv_walk *w, const hv_entry **out);

/* Opens the entry last returned by hv_walk_next() relative to its parent directory's
 * descriptor (never by path), with flags | O_NOFOLLOW | O_CLOEXEC. Returns the descriptor, or
 * -1 with errno set. */
HV_EXTERN int hv_walk_openat(hv_walk *w, int flags);

/* Counters so far: records returned and warnings raised. */
HV_EXTERN uint64_t hv_walk_count(const hv_walk *w);
HV_EXTERN uint64_t hv_walk_warnings(const hv_walk *w);

/* The worker threads reading ahead right now, and in *grown (when not NULL) how many of
 * them were added during the walk because the others spent their time blocked on I/O. */
HV_EXTERN int hv_walk_workers(hv_walk *w, uint64_t *grown);

/* The root as given to hv_walk_open, trailing slashes removed (a symlink stays as it was
 * given, not resolved): the path the walk's warnings begin with. */
HV_EXTERN const char *hv_walk_root(const hv_walk *w);

HV_EXTERN void hv_walk_close(hv_walk *w);

#ifdef __cplusplus
}
#endif
#endif
