/* The per-thread last error, and the version strings. Thread-local, so two handles used from
 * two threads never see each other's messages. */
#include "dl_magic.h"
#include "dl_sqlite.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_message[HV_ERROR_MAX];
static _Thread_local hv_status last_status;

const char *hv_error_last(void)
{
	return last_message;
}

int hv_error_last_status(void)
{
	return last_status;
}

void hv_error_clear(void)
{
	last_message[0] = '\0';
	last_status = HV_OK;
}

/* A message longer than the buffer keeps its start and its end, with "..." between: the
 * end carries the reason ("...: Permission denied"), the start the beginning of the path. The
 * cuts fall between UTF-8 characters, so a cut name does not gain invalid bytes. */
static void elide_middle(const char *full, size_t len)
{
	enum { HEAD = 1024 };
	size_t head = HEAD, tail = len - (HV_ERROR_MAX - 1 - HEAD - 3);
	while (head > 0 && ((unsigned char)full[head] & 0xc0) == 0x80)
		head--;
	while (tail < len && ((unsigned char)full[tail] & 0xc0) == 0x80)
		tail++;
	memcpy(last_message, full, head);
	memcpy(last_message + head, "...", 3);
	memcpy(last_message + head + 3, full + tail, len - tail);
	last_message[head + 3 + len - tail] = '\0';
}

hv_status hv_error_set(hv_status status, const char *fmt, ...)
{
	/* Formatted aside first: an argument may be hv_error_last() itself. */
	char local[HV_ERROR_MAX];
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(local, sizeof(local), fmt, ap);
	va_end(ap);
	char *full = n >= (int)sizeof(local) ? malloc((size_t)n + 1) : NULL;
	if (full) {
		vsnprintf(full, (size_t)n + 1, fmt, ap2);
		elide_middle(full, (size_t)n);
		free(full);
	} else {
		/* it fits (or, out of memory, is cut at the end) */
		size_t m = n < 0 ? 0 : (size_t)n < sizeof(local) ? (size_t)n : sizeof(local) - 1;
		memcpy(last_message, local, m);
		last_message[m] = '\0';
	}
	va_end(ap2);
	last_status = status;
	return status;
}

void hv_error_save(hv_error_saved *saved)
{
	memcpy(saved->message, last_message, sizeof(saved->message));
	saved->status = last_status;
}

hv_status hv_error_restore(const hv_error_saved *saved, hv_status status)
{
	memcpy(last_message, saved->message, sizeof(last_message));
	last_status = status;
	return status;
}

hv_status hv__callback_failed(hv_status rc, const char *what)
{
	/* The error was cleared before the call: a message now is the callback's (its own, or a
	 * libharvest failure it passed on, whatever status that had). */
	if (last_status < 0 && last_message[0]) {
		last_status = rc; /* the status the call returns with */
		return rc;
	}
	return hv_error_set(rc, "%s failed (status %d) without saying why", what, (int)rc);
}

void hv__call_message_fn(void (*fn)(void *ctx, const char *msg), void *ctx, const char *msg)
{
	hv_error_saved saved;
	hv_error_save(&saved);
	fn(ctx, msg == last_message ? saved.message : msg);
	hv_error_restore(&saved, saved.status);
}

hv_status hv_error_errno(hv_status status, const char *path, int errnum)
{
	return hv_error_set(status, "%s: %s", path, strerror(errnum));
}

const char *hv_version(void)
{
	return HARVEST_VERSION;
}

const char *hv_libmagic_version(void)
{
	static _Thread_local char text[32];
	char why[512];
	if (hv__magic_load(why, sizeof(why)) != 0)
		return "unavailable"; /* what is missing is said when detection is asked for */
	int v = magic_version();
	snprintf(text, sizeof(text), "%d.%02d", v / 100, v % 100);
	return text;
}

const char *hv_sqlite_version(void)
{
	char why[512];
	if (hv__sqlite_load(why, sizeof(why)) != 0)
		return "unavailable"; /* what is missing is said when a store is opened */
	return sqlite3_libversion();
}
