/* harvest's SHA-256 (src/lib/sha256.c): the FIPS 180-4 examples, and OpenSSL's digest of
 * random bytes of every length around the block and padding boundaries, fed whole and in
 * random pieces, through the CPU's SHA extensions (where this machine has them) and through
 * the portable rounds alike. */
#include "testutil.h"

#include "sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The digest of p[0..n) given in pieces of at most step bytes (0: random sizes), through the
 * portable rounds or not. */
static void digest(const unsigned char *p, size_t n, size_t step, bool portable, unsigned *seed,
		   char hex[65])
{
	hv__sha256 s;
	if (portable)
		hv__sha256_init_portable(&s);
	else
		hv__sha256_init(&s);
	for (size_t off = 0; off < n;) {
		size_t k = step ? step : (size_t)rand_r(seed) % 150;
		if (k > n - off)
			k = n - off;
		hv__sha256_update(&s, p + off, k);
		off += k;
	}
	unsigned char md[32];
	hv__sha256_final(&s, md);
	hv__sha256_to_hex(md, hex);
}

static void test_fips_examples(void **state)
{
	(void)state;
	static const struct {
		const char *msg;
		const char *sha;
	} v[] = {
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
		{"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklm"
		 "nopqrlmnopqrsmnopqrstnopqrstu",
		 "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
	};
	unsigned seed = 1;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		char hex[65];
		size_t n = strlen(v[i].msg);
		for (int portable = 0; portable < 2; portable++) {
			digest((const unsigned char *)v[i].msg, n, n ? n : 1, portable, &seed, hex);
			assert_string_equal(hex, v[i].sha);
			digest((const unsigned char *)v[i].msg, n, 1, portable, &seed, hex);
			assert_string_equal(hex, v[i].sha);
		}
		hv__sha256_hex(v[i].msg, n, hex);
		assert_string_equal(hex, v[i].sha);
	}
	/* A million times "a". */
	size_t n = 1000000;
	unsigned char *a = tu_xmalloc(n);
	memset(a, 'a', n);
	for (int portable = 0; portable < 2; portable++) {
		char hex[65];
		digest(a, n, 4096, portable, &seed, hex);
		assert_string_equal(hex,
				    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	}
	free(a);
}

static void test_random_against_openssl(void **state)
{
	(void)state;
	enum { MAX = 4200 };
	unsigned char *buf = tu_xmalloc(MAX);
	unsigned seed = 7;
	for (size_t i = 0; i < MAX; i++)
		buf[i] = (unsigned char)rand_r(&seed);
	for (size_t n = 0; n <= MAX; n += n < 300 ? 1 : 37) {
		char want[65], got[65];
		tu_sha256_hex(buf, n, want);
		hv__sha256_hex(buf, n, got);
		if (strcmp(want, got) != 0)
			fail_msg("%zu bytes: %s, OpenSSL %s", n, got, want);
		for (int portable = 0; portable < 2; portable++) {
			digest(buf, n, 0, portable, &seed, got);
			if (strcmp(want, got) != 0)
				fail_msg("%zu bytes in pieces (portable %d): %s, OpenSSL %s", n,
					 portable, got, want);
		}
	}
	free(buf);
	/* Several megabytes, the size of a real artifact, in 64 KiB pieces as a collect reads. */
	size_t big = (5u << 20) + 11;
	unsigned char *b = tu_xmalloc(big);
	for (size_t i = 0; i < big; i++)
		b[i] = (unsigned char)rand_r(&seed);
	char want[65], got[65];
	tu_sha256_hex(b, big, want);
	for (int portable = 0; portable < 2; portable++) {
		digest(b, big, 65536, portable, &seed, got);
		assert_string_equal(got, want);
	}
	free(b);
	/* Say which rounds the first half checked (the portable ones are always checked). */
	printf("sha256_test: the CPU's SHA extensions are %s\n",
	       hv__sha256_accelerated() ? "used" : "absent: portable rounds only");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fips_examples),
		cmocka_unit_test(test_random_against_openssl),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
