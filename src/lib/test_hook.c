/* Test hooks (test_hook.h): one function and context per point, process-wide; and the test
 * switches, read from the environment once. */
#include "test_hook.h"
#include "internal.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

static struct {
	hv__hook_fn fn;
	void *ctx;
} hooks[HV__HOOK_COUNT];

void hv__test_hook_set(hv__hook_point p, hv__hook_fn fn, void *ctx)
{
	hooks[p].fn = fn;
	hooks[p].ctx = ctx;
}

int hv__test_hook_active(hv__hook_point p)
{
	return hooks[p].fn != NULL;
}

void hv__test_hook_call(hv__hook_point p, const char *path)
{
	if (hooks[p].fn)
		hooks[p].fn(hooks[p].ctx, path);
}

#ifdef HARVEST_TEST_HOOKS
static const char *const switch_vars[HV__SWITCH_COUNT] = {
	[HV__SWITCH_WALK_BLOCKED] = "HARVEST_TEST_WALK_BLOCKED",
	[HV__SWITCH_WALK_SLOW_CLAIMS] = "HARVEST_TEST_WALK_SLOW_CLAIMS",
	[HV__SWITCH_CHANGES_LOST] = "HARVEST_TEST_CHANGES_LOST",
	[HV__SWITCH_CHANGES_READ_LATE] = "HARVEST_TEST_CHANGES_READ_LATE",
	[HV__SWITCH_CHANGES_READ_SLOW] = "HARVEST_TEST_CHANGES_READ_SLOW",
	[HV__SWITCH_SNAPSHOT_LSTAT] = "HARVEST_TEST_SNAPSHOT_LSTAT",
	[HV__SWITCH_PG_SILENCE] = "HARVEST_TEST_PG_SILENCE",
	[HV__SWITCH_MIME_DIR_LATE] = "HARVEST_TEST_MIME_DIR_LATE",
	[HV__SWITCH_MIME_ONE_WORKER] = "HARVEST_TEST_MIME_ONE_WORKER",
	[HV__SWITCH_WALK_NO_DTYPE] = "HARVEST_TEST_WALK_NO_DTYPE",
};
#endif

/* Bit s: switch s is on. SWITCHES_READ: the environment was read (so 0 means "not yet"). */
#define SWITCHES_READ (1u << HV__SWITCH_COUNT)
_Static_assert(HV__SWITCH_COUNT < 32, "one bit per switch, and one for SWITCHES_READ");
static atomic_uint switches;

static unsigned read_switches(void)
{
	unsigned v = SWITCHES_READ;
#ifdef HARVEST_TEST_HOOKS
	for (unsigned s = 0; s < HV__SWITCH_COUNT; s++) {
		const char *e = getenv(switch_vars[s]);
		if (e && e[0] == '1' && e[1] == '\0')
			v |= 1u << s;
	}
#endif
	/* Without the test hooks (a release build) no variable is read: every switch is off. */
	/* Threads that race here all read the same environment and store the same word. */
	atomic_store_explicit(&switches, v, memory_order_relaxed);
	return v;
}

bool hv__test_switch_on(hv__test_switch s)
{
	unsigned v = atomic_load_explicit(&switches, memory_order_relaxed);
	if (HV_UNLIKELY(v == 0))
		v = read_switches();
	return (v >> s) & 1u;
}

void hv__test_switches_reload(void)
{
	read_switches();
}
