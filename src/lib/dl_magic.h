/* libmagic and libseccomp through dlopen on the first MIME detection (dl.h): a `harvest ls`,
 * `walk` or `cat` loads neither, nor libmagic's liblzma, libbz2 and zlib. Included by the
 * MIME code only (mime.c, mime_worker.c, error.c): after this header, its magic_* and
 * seccomp_* calls go through the tables, so the calls read as the libraries' own.
 *
 * A detector worker never loads anything: the spawner's parent loads both libraries before
 * it forks the spawner (hvm_detect_libs_load), the workers inherit them, and the seccomp
 * filter that forbids opening files is installed after that. */
#ifndef HARVEST_DL_MAGIC_H
#define HARVEST_DL_MAGIC_H

#include <magic.h>
#include <seccomp.h>
#include <stddef.h>

#define HV_MAGIC_SONAME "libmagic.so.1"
#define HV_SECCOMP_SONAME "libseccomp.so.2"

/* Every libmagic function harvest calls. */
#define HV_MAGIC_FUNCS(X)                                                                      \
	X(magic_buffer)                                                                        \
	X(magic_close)                                                                         \
	X(magic_descriptor)                                                                    \
	X(magic_errno)                                                                         \
	X(magic_error)                                                                         \
	X(magic_getparam)                                                                      \
	X(magic_getpath)                                                                       \
	X(magic_load)                                                                          \
	X(magic_open)                                                                          \
	X(magic_setflags)                                                                      \
	X(magic_version)

/* Every libseccomp function harvest calls. */
#define HV_SECCOMP_FUNCS(X)                                                                    \
	X(seccomp_init)                                                                        \
	X(seccomp_load)                                                                        \
	X(seccomp_release)                                                                     \
	X(seccomp_rule_add)

/* NOLINTNEXTLINE(bugprone-macro-parentheses): f is a declarator here, not an expression */
#define HV_DL_MEMBER(f) __typeof__(f) *f;
struct hv__magic_api {
	HV_MAGIC_FUNCS(HV_DL_MEMBER)
};
struct hv__seccomp_api {
	HV_SECCOMP_FUNCS(HV_DL_MEMBER)
};
#undef HV_DL_MEMBER

/* Filled by hv__magic_load / hv__seccomp_load; read only after it succeeded. */
extern struct hv__magic_api hv__magic;
extern struct hv__seccomp_api hv__seccomp;

/* Load each library once per process (thread-safe; a failure is retried on the next call):
 * 0, or -1 with why = "cannot load <soname>: <reason>". */
int hv__magic_load(char *why, size_t cap);
int hv__seccomp_load(char *why, size_t cap);

/* magic_load(cookie, database), and 0 only when no part of the list that exists failed to be
 * read: libmagic's own load succeeds when any one part does, so with magic.mgc's map refused
 * (`ulimit -v`: ENOMEM) it types with /etc/magic alone (text/plain, octet-stream for a GIF),
 * says so only in magic_error(), and its answers would be cached as the database's. -1:
 * magic_error(cookie) says why. As for file(1), a part that does not exist is no error, nor
 * is one libmagic read but found malformed ("bad magic", "too small": no errno), which gives
 * the same answers at every load. */
int hv__magic_load_whole(magic_t cookie, const char *database);

#ifndef HV_DL_MAGIC_IMPL
#define magic_buffer (hv__magic.magic_buffer)
#define magic_close (hv__magic.magic_close)
#define magic_descriptor (hv__magic.magic_descriptor)
#define magic_errno (hv__magic.magic_errno)
#define magic_error (hv__magic.magic_error)
#define magic_getparam (hv__magic.magic_getparam)
#define magic_getpath (hv__magic.magic_getpath)
#define magic_load (hv__magic.magic_load)
#define magic_open (hv__magic.magic_open)
#define magic_setflags (hv__magic.magic_setflags)
#define magic_version (hv__magic.magic_version)
#define seccomp_init (hv__seccomp.seccomp_init)
#define seccomp_load (hv__seccomp.seccomp_load)
#define seccomp_release (hv__seccomp.seccomp_release)
#define seccomp_rule_add (hv__seccomp.seccomp_rule_add)
#endif

#endif
