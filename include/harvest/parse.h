/* harvest — parsers for the values users type: whole numbers, durations ("2.5" seconds), sizes
 * ("32MiB") and times ("7d", RFC 3339).
 * Pure functions of their input, so they can be fuzzed. */
#ifndef HARVEST_PARSE_H
#define HARVEST_PARSE_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A whole number in decimal digits only: no sign, no blanks, no "0x" (leading zeros are
 * decimal: "010" is 10). HV_EUSAGE (with a message) for anything else or a value above max. */
HV_EXTERN hv_status hv_parse_uint(const char *text, uint64_t max, uint64_t *out);

/* The same with an optional '-' (no '+'), from min to max. */
HV_EXTERN hv_status hv_parse_int(const char *text, int64_t min, int64_t max, int64_t *out);

/* A duration in seconds, as milliseconds: decimal digits with an optional fraction and
 * exponent ("10", "2.5", ".5", "1e-3"; no sign, blanks, hex, "inf" or "nan"), at most 1e9 s.
 * A positive duration is rounded up to the next whole millisecond, so it is never 0 (which
 * callers use for "none"); "0" (or "0.0") gives 0. HV_EUSAGE for anything else. */
HV_EXTERN hv_status hv_parse_duration_ms(const char *text, uint64_t *out_ms);

/* A size: a whole number with an optional unit, case-insensitive: B; K, KB, KiB; M, MB, MiB;
 * G, GB, GiB; T, TB, TiB — all binary (KB = KiB = 1024), as sizes of files are. HV_EUSAGE
 * (with a message) for anything else or an overflow. */
HV_EXTERN hv_status hv_parse_size(const char *text, uint64_t *out);

/* A point in time as nanoseconds since the epoch: RFC 3339 ("2026-11-30T03:29:07Z",
 * "2026-11-30T03:29:07.5+02:00", a space or 't' for 'T', 'z' for 'Z'), a date alone
 * ("2026-11-30", midnight UTC), or an age before now_ns: a whole number with s, m, h, d or w
 * ("90m", "12h", "7d"). A valid date beyond what nanoseconds in an int64 reach (before 1677
 * or after 2262-04-11) is that reach's end, INT64_MIN or INT64_MAX, so "--since 2999-01-01"
 * selects nothing rather than failing; an age longer than that reach is HV_EUSAGE ("age out
 * of range"), as it names no date. HV_EUSAGE for anything else. */
HV_EXTERN hv_status hv_parse_time(const char *text, int64_t now_ns, int64_t *out_ns);

/* Formats ns since the epoch as RFC 3339 UTC with nanoseconds ("2026-11-30T03:29:07.123456789Z",
 * 30 characters) into out; returns the text's length, as snprintf does: out holds all of it
 * when the length is less than cap, else its first cap - 1 characters (cap 0: nothing). */
HV_EXTERN size_t hv_format_time(int64_t ns, char *out, size_t cap);
/* The same of a time as seconds and nanoseconds since the epoch (0 to 999999999), which reach
 * any date a file system can hold (hv_stat's mtime_sec and mtime_nsec); a year past 9999 has
 * more digits. A time gmtime_r cannot convert (a year beyond an int) gives "" and 0. */
HV_EXTERN size_t hv_format_timespec(int64_t sec, long nsec, char *out, size_t cap);
/* The same of an hv_stat's modification time (walk.h): mtime_ns, or where that is saturated
 * (INT64_MIN or INT64_MAX) the exact mtime_sec and mtime_nsec. */
struct hv_stat;
HV_EXTERN size_t hv_format_mtime(const struct hv_stat *s, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
