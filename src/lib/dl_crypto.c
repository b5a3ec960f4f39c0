/* libcrypto's function table (dl_crypto.h). */
#define HV_DL_CRYPTO_IMPL
#include "dl_crypto.h"

#include "dl.h"
#include "internal.h"

#include <stddef.h>

struct hv__crypto_api hv__crypto;

#define HV_CRYPTO_NAME(f) #f,
#define HV_CRYPTO_OFF(f) offsetof(struct hv__crypto_api, f),
static const char *const names[] = {HV_CRYPTO_FUNCS(HV_CRYPTO_NAME)};
static const size_t offs[] = {HV_CRYPTO_FUNCS(HV_CRYPTO_OFF)};
#undef HV_CRYPTO_NAME
#undef HV_CRYPTO_OFF

static struct hv__dl_lib lib = {
	.soname = HV_CRYPTO_SONAME,
	.test_env = "HARVEST_TEST_LIBCRYPTO",
	.names = names,
	.offs = offs,
	.n = sizeof(names) / sizeof(names[0]),
	.table = &hv__crypto,
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

hv_status hv__crypto_need(void)
{
	char why[512];
	if (hv__dl_load(&lib, why, sizeof(why)) != 0)
		return hv_error_set(HV_EIO, "%s", why);
	return HV_OK;
}
