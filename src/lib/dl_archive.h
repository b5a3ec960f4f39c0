/* libarchive through dlopen("libarchive.so.13") on the first archive written (dl.h). Included
 * by archive.c only: after this header, its archive_* calls go through the table, so the
 * calls read as libarchive's own. */
#ifndef HARVEST_DL_ARCHIVE_H
#define HARVEST_DL_ARCHIVE_H

#include <archive.h>
#include <archive_entry.h>
#include <stddef.h>

#define HV_ARCHIVE_SONAME "libarchive.so.13"

/* Every libarchive function harvest calls. */
#define HV_ARCHIVE_FUNCS(X)                                                                    \
	X(archive_entry_clear)                                                                 \
	X(archive_entry_copy_pathname)                                                         \
	X(archive_entry_copy_symlink)                                                          \
	X(archive_entry_free)                                                                  \
	X(archive_entry_new)                                                                   \
	X(archive_entry_set_filetype)                                                          \
	X(archive_entry_set_gid)                                                               \
	X(archive_entry_set_mtime)                                                             \
	X(archive_entry_set_perm)                                                              \
	X(archive_entry_set_size)                                                              \
	X(archive_entry_set_uid)                                                               \
	X(archive_error_string)                                                                \
	X(archive_write_add_filter_gzip)                                                       \
	X(archive_write_close)                                                                 \
	X(archive_write_data)                                                                  \
	X(archive_write_free)                                                                  \
	X(archive_write_header)                                                                \
	X(archive_write_new)                                                                   \
	X(archive_write_open2)                                                                 \
	X(archive_write_set_bytes_in_last_block)                                               \
	X(archive_write_set_format_pax)                                                        \
	X(archive_write_set_format_zip)                                                        \
	X(archive_write_zip_set_compression_deflate)

/* Each member has the type of a pointer to the function libarchive's headers declare. */
/* NOLINTNEXTLINE(bugprone-macro-parentheses): f is a declarator here, not an expression */
#define HV_ARCHIVE_MEMBER(f) __typeof__(f) *f;
struct hv__archive_api {
	HV_ARCHIVE_FUNCS(HV_ARCHIVE_MEMBER)
};
#undef HV_ARCHIVE_MEMBER

/* Filled by hv__archive_load; read only after it succeeded. */
extern struct hv__archive_api hv__archive;

/* Loads libarchive once per process (thread-safe; a failure is retried on the next call): 0,
 * or -1 with why = "cannot load libarchive.so.13: <reason>". */
int hv__archive_load(char *why, size_t cap);

#ifndef HV_DL_ARCHIVE_IMPL
#define archive_entry_clear (hv__archive.archive_entry_clear)
#define archive_entry_copy_pathname (hv__archive.archive_entry_copy_pathname)
#define archive_entry_copy_symlink (hv__archive.archive_entry_copy_symlink)
#define archive_entry_free (hv__archive.archive_entry_free)
#define archive_entry_new (hv__archive.archive_entry_new)
#define archive_entry_set_filetype (hv__archive.archive_entry_set_filetype)
#define archive_entry_set_gid (hv__archive.archive_entry_set_gid)
#define archive_entry_set_mtime (hv__archive.archive_entry_set_mtime)
#define archive_entry_set_perm (hv__archive.archive_entry_set_perm)
#define archive_entry_set_size (hv__archive.archive_entry_set_size)
#define archive_entry_set_uid (hv__archive.archive_entry_set_uid)
#define archive_error_string (hv__archive.archive_error_string)
#define archive_write_add_filter_gzip (hv__archive.archive_write_add_filter_gzip)
#define archive_write_close (hv__archive.archive_write_close)
#define archive_write_data (hv__archive.archive_write_data)
#define archive_write_free (hv__archive.archive_write_free)
#define archive_write_header (hv__archive.archive_write_header)
#define archive_write_new (hv__archive.archive_write_new)
#define archive_write_open2 (hv__archive.archive_write_open2)
#define archive_write_set_bytes_in_last_block (hv__archive.archive_write_set_bytes_in_last_block)
#define archive_write_set_format_pax (hv__archive.archive_write_set_format_pax)
#define archive_write_set_format_zip (hv__archive.archive_write_set_format_zip)
#define archive_write_zip_set_compression_deflate                                              \
	(hv__archive.archive_write_zip_set_compression_deflate)
#endif

#endif
