/* Test hooks (test_hook.h): one function and context per point, process-wide. */
#include "test_hook.h"

#include <stddef.h>

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
