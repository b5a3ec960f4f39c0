/* Change tracking with fanotify: what a run changed below a directory, from the kernel's
 * events instead of a snapshot before the run and a walk after it. Internal to libharvest.
 *
 * hv_changes_start() marks every file system with a mount at or below root (FAN_MARK_FILESYSTEM,
 * FAN_REPORT_DFID_NAME_TARGET, FAN_UNLIMITED_QUEUE); while the command runs, the caller's
 * run loop reads the events as they come (hv_changes_fd, hv_changes_pump), until they are many
 * and a thread of their own takes over; hv_changes_stop() (after the command ended) reads what
 * is left and stops the thread if one was started;
 * hv_changes_result() turns the events into the paths to examine and the deleted files. */
#ifndef HARVEST_CHANGES_H
#define HARVEST_CHANGES_H

#include "harvest/collect.h"

typedef struct hv_changes hv_changes;

/* What a run changed below root, in walk order (hv_store_path_cmp). */
typedef struct hv_change_set {
	char **paths;        /* relative paths to examine after the run */
	const char **change; /* for each: "created" or "modified" */
	bool *time_check;    /* for each: only opened for writing, produced when its ctime is
	                      * not older than the run (closed after an unchanged mmap, say) */
	size_t n;
	char **deleted;      /* regular files there before the run and not after */
	size_t n_deleted;
	int64_t start_ns;    /* the coarse clock when tracking started (file times' clock) */
} hv_change_set;

/* Starts tracking root (an absolute, realpath'd directory). HV_OK: tracking, free with
 * hv_changes_free(). HV_EIO with a message saying why when events cannot be used for root
 * (fanotify refused, a file system without file handles, the same file system mounted twice
 * below root...): the caller compares snapshots instead. */
hv_status hv_changes_start(const char *root, const hv_collect_opts *opts, hv_changes **out);

/* The descriptor to poll for events while the command runs (-1: none to poll, a thread reads
 * them), and what to call, on the caller's thread, each time it is readable: reads what is
 * queued; false when it is no longer to be polled (a thread took over, or reading failed:
 * the result will say so). The two fit hv__run_watched(). */
int hv_changes_fd(const hv_changes *c);
bool hv_changes_pump(void *c);
/* fn(ctx) is called once, by hv_changes_pump() (on the caller's thread, with no thread of c's
 * running), after it has read the first event of a name in a directory known to be below
 * root: the run is changing something there. (A link count's event, which has no name, and
 * one in a directory whose handle did not resolve, may be anyone's.) */
void hv_changes_on_first(hv_changes *c, void (*fn)(void *), void *ctx);

/* Stops tracking: reads the events still queued, stops the thread. */
hv_status hv_changes_stop(hv_changes *c);

/* After hv_changes_stop(): the changes (free with hv_change_set_free). HV_EIO when the events
 * cannot tell what changed (an overflow, a directory renamed, an unresolvable directory): the
 * message says why. st (may be NULL) names the database files to leave out. */
hv_status hv_changes_result(hv_changes *c, const hv_store *st, hv_change_set *out);

/* After hv_changes_result() failed for want of a state from before the run (HV_EIO; the
 * reason in hv_changes_why()): every regular file whose ctime is not older than the start of
 * tracking, and every file below a directory whose ctime is not, by one walk of root;
 * deleted: what the events show (others may be missing). */
hv_status hv_changes_result_since(hv_changes *c, const hv_store *st, hv_change_set *out);

/* Why the last hv_changes_result() failed for want of a state from before the run (a short
 * phrase), NULL if it did not. */
const char *hv_changes_why(const hv_changes *c);

void hv_change_set_free(hv_change_set *s);
/* Stops tracking if need be and frees c. The last reference to the fanotify descriptor goes
 * to a process of its own, whose close waits for the kernel to free the marks; the short-lived
 * child of ours that starts that process is left running: hv_changes_reap() waits for it. */
void hv_changes_free(hv_changes *c);
/* Reaps the child hv_changes_free() left, if any: to call before returning to a caller who
 * must see no child of ours. */
void hv_changes_reap(void);

/* hv_collect() of exactly the paths of cs below dir (no walk), with their deleted list. */
hv_status hv_collect_change_set(hv_store *st, const char *dir, const hv_collect_opts *opts,
				const hv_change_set *cs, hv_collection **out);

#endif
