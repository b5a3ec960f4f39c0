/* harvest — a run and its artifacts as one self-contained HTML page, for people to look at.
 *
 * The page needs no network and runs no script: a Content-Security-Policy meta tag
 * (`default-src 'none'; img-src data:; style-src 'unsafe-inline'`) comes before anything
 * else, the page has no <script>, and no artifact's markup is ever put into it. Every name,
 * path, label and output byte is HTML-escaped; control characters and bytes that are not
 * UTF-8 are shown as \xNN (as hv_text_escape does); ANSI colour codes in stdout and stderr
 * become <span>s (SGR colours, bold, dim, italic, underline) and every other escape sequence
 * is removed.
 *
 * Each artifact is shown by its MIME type:
 *   image/png, image/jpeg, image/gif, image/webp  an <img> with a data: URI;
 *   image/svg+xml                                 only through <img src="data:image/svg+xml;
 *                                                 base64,...">, where a script cannot run;
 *   text/csv, text/tab-separated-values           a table of the first 50 records (RFC 4180:
 *                                                 quoted fields with commas, "" and newlines);
 *   text/html, application/xhtml+xml              a download link, never shown;
 *   other text types, JSON, XML, JavaScript, shells the first 200 lines, escaped, in <pre>;
 *   everything else                               a download link.
 * A content larger than the embed cap is not embedded: the page shows the
 * `harvest history get ... -o NAME` command that fetches it instead.
 *
 * Memory: the page is written as it is made, one artifact at a time (hv_page_write_run reads
 * each stored content only when it writes that artifact's section). */
#ifndef HARVEST_PAGE_H
#define HARVEST_PAGE_H

#include "collect.h"
#include "store.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default embed cap: 10 MiB of content (13.4 MiB of base64 in the page). */
#define HV_PAGE_EMBED_MAX ((uint64_t)10 << 20)

/* Where the page goes: called with each piece in order; returns 0, or -1 with errno set. */
typedef int (*hv_page_write_fn)(void *ctx, const void *data, size_t len);

/* An hv_page_write_fn writing to the FILE * given as ctx. */
HV_EXTERN int hv_page_write_file(void *file, const void *data, size_t len);

typedef struct hv_page_opts {
	uint64_t embed_max;           /* 0: HV_PAGE_EMBED_MAX */
	const char *host;             /* the host the run ran on, shown when not NULL (for
	                               * hv_page_write_run, NULL: the one the history recorded) */
	const char *const *deleted;   /* paths the run deleted, shown when n_deleted > 0; else the
	                               * page shows the collection's (compared with a snapshot) or
	                               * the recorded run's own */
	size_t n_deleted;
	const char *generated_by;     /* the footer's "harvest VERSION"; NULL: hv_version() */
	const char *db;               /* the history the page's `harvest history get` commands
	                               * name with --db (shell-quoted, a URI's password shown as
	                               * ***); NULL: none, the reader's default database */
} hv_page_opts;

/* Fills opts with the defaults: every member 0 or NULL (the page's own defaults above). */
HV_EXTERN void hv_page_opts_init(hv_page_opts *opts);

/* Writes the page of history run run_id with its artifacts and their stored contents.
 * HV_ENOTFOUND (hv_error_last() says so) when there is no such run; HV_EIO when fn failed (the page is then
 * cut short); HV_EDB when reading the store failed. */
HV_EXTERN hv_status hv_page_write_run(hv_store *st, int64_t run_id, const hv_page_opts *o,
			    hv_page_write_fn fn, void *ctx);

/* Writes the page of a run that is described by run (its with_output fields included; its
 * skipped_json and artifacts are not used) and produced the collection c (may be NULL: no
 * files). run->run_id 0 means the run was not recorded: contents too large to embed are then
 * only named. Spooled contents (hv_collect_opts.spool_content) are read from c's temporary
 * file, one file at a time (HV_EIO, the page cut short, when that read fails). */
HV_EXTERN hv_status hv_page_write_collection(const hv_run_row *run, const hv_collection *c,
				   const hv_page_opts *o, hv_page_write_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
