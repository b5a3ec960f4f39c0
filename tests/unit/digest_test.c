/* SHA-256 as hex (the digests of artifacts and racy snapshot entries): the FIPS 180-2 test
 * vectors from a buffer and from a descriptor read in many chunks, the size cap that stops
 * reading, and a read error naming the path. */
#include "testutil.h"

#include "internal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char SHA_EMPTY[] =
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
static const char SHA_ABC[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
/* One million 'a' (FIPS 180-2, appendix B.3). */
static const char SHA_MILLION_A[] =
	"cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
enum { MILLION = 1000000 };

static void test_sha256_of_buffer(void **state)
{
	(void)state;
	char hex[65];
	assert_int_equal(hv_sha256_hex("", 0, hex), HV_OK);
	assert_string_equal(hex, SHA_EMPTY);
	assert_int_equal(hv_sha256_hex("abc", 3, hex), HV_OK);
	assert_string_equal(hex, SHA_ABC);
	char *a = malloc(MILLION);
	assert_non_null(a);
	memset(a, 'a', MILLION);
	assert_int_equal(hv_sha256_hex(a, MILLION, hex), HV_OK);
	assert_string_equal(hex, SHA_MILLION_A);
	free(a);
}

/* A file of one million 'a', open for reading; *dir and *path are the caller's to free. */
static int million_a_file(char **dir, char **path)
{
	*dir = tu_mkdtemp();
	char *a = malloc(MILLION);
	assert_non_null(a);
	memset(a, 'a', MILLION);
	tu_write(*dir, "a", a, MILLION);
	free(a);
	*path = tu_path(*dir, "a");
	int fd = open(*path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

/* Read to the end in chunks much smaller than the file: the digest of the whole. A cap equal
 * to the size is not exceeded. */
static void test_sha256_of_descriptor(void **state)
{
	(void)state;
	char *dir, *path;
	int fd = million_a_file(&dir, &path);
	char hex[65] = "";
	assert_int_equal(hv_sha256_fd(fd, MILLION, path, hex), HV_OK);
	assert_string_equal(hex, SHA_MILLION_A);
	close(fd);

	/* An empty file. */
	tu_write(dir, "empty", "", 0);
	char *empty = tu_path(dir, "empty");
	fd = open(empty, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(hv_sha256_fd(fd, 0, empty, hex), HV_OK);
	assert_string_equal(hex, SHA_EMPTY);
	close(fd);
	free(empty);
	tu_rmrf(dir);
	free(dir);
	free(path);
}

/* More bytes than the cap: HV_WARN (the caller treats the file as too large), and the hex
 * buffer is not written with a digest of part of the file. */
static void test_sha256_cap(void **state)
{
	(void)state;
	char *dir, *path;
	int fd = million_a_file(&dir, &path);
	char hex[65];
	memset(hex, 'x', sizeof(hex) - 1);
	hex[64] = '\0';
	assert_int_equal(hv_sha256_fd(fd, MILLION - 1, path, hex), HV_WARN);
	for (size_t i = 0; i < 64; i++)
		assert_int_equal(hex[i], 'x');
	close(fd);
	tu_rmrf(dir);
	free(dir);
	free(path);
}

/* A descriptor that cannot be read (a directory): HV_EIO, the message naming the path and the
 * reason. */
static void test_sha256_read_error(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	char hex[65];
	assert_int_equal(hv_sha256_fd(fd, MILLION, "some/dir", hex), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "some/dir"));
	assert_non_null(strstr(hv_error_last(), "Is a directory"));
	close(fd);
	tu_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256_of_buffer),
		cmocka_unit_test(test_sha256_of_descriptor),
		cmocka_unit_test(test_sha256_cap),
		cmocka_unit_test(test_sha256_read_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
