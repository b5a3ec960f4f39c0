/* harvest — the export macro of libharvest's public functions.
 *
 * libharvest is built with -fvisibility=hidden: a function is part of the shared library's
 * interface only when its declaration in a public header carries HV_EXTERN, so internal
 * helpers (hv_buf_*, hvst_*, hv_error_set...) never leak into the dynamic symbol table and
 * programs cannot come to depend on them. */
#ifndef HARVEST_COMMON_H
#define HARVEST_COMMON_H

#if defined(__GNUC__) || defined(__clang__)
#define HV_EXTERN __attribute__((visibility("default")))
#else
#define HV_EXTERN
#endif

#endif
