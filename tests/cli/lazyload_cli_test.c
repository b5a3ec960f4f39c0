/* libpq and libarchive are opened with dlopen on first use, not linked: neither the harvest
 * binary nor libharvest.so names them in its ELF dynamic section (DT_NEEDED), the real
 * libraries load when a PostgreSQL history or an archive is used (the history_pg and archive
 * tests cover what they do), and a library that cannot be loaded (a test-only switch naming a
 * missing file, or one without its functions) gives one line naming it and the documented
 * status: 125 and the command not started for run, 1 for a history query, 1 and no half file
 * for an archive. libcrypto is neither linked nor loaded: SHA-256 is harvest's own. */
#include "testutil.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the dynamic section ---------------------------------------------------------------- */

/* The DT_NEEDED names of an ELF64 file, each followed by '\n', in a new string. */
static char *needed_of(const char *file)
{
	size_t len = 0;
	char *b = tu_read_file(file, &len);
	if (!b)
		fail_msg("%s: %s", file, strerror(errno));
	assert_true(len >= sizeof(Elf64_Ehdr));
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)b;
	assert_memory_equal(eh->e_ident, ELFMAG, SELFMAG);
	assert_int_equal(eh->e_ident[EI_CLASS], ELFCLASS64);
	assert_true(eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) <= len);
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(b + eh->e_shoff);
	char *out = tu_xmalloc(1);
	size_t out_len = 0;
	out[0] = '\0';
	bool found = false;
	for (size_t i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_DYNAMIC)
			continue;
		found = true;
		assert_true(sh[i].sh_link < eh->e_shnum);
		const Elf64_Shdr *str = &sh[sh[i].sh_link];
		assert_true(sh[i].sh_offset + sh[i].sh_size <= len);
		assert_true(str->sh_offset + str->sh_size <= len);
		const Elf64_Dyn *d = (const Elf64_Dyn *)(b + sh[i].sh_offset);
		size_t n = sh[i].sh_size / sizeof(*d);
		for (size_t k = 0; k < n && d[k].d_tag != DT_NULL; k++) {
			if (d[k].d_tag != DT_NEEDED)
				continue;
			assert_true(d[k].d_un.d_val < str->sh_size);
			const char *name = b + str->sh_offset + d[k].d_un.d_val;
			size_t nl = strnlen(name, str->sh_size - d[k].d_un.d_val);
			out = tu_xrealloc(out, out_len + nl + 2);
			memcpy(out + out_len, name, nl);
			out_len += nl;
			out[out_len++] = '\n';
			out[out_len] = '\0';
		}
	}
	assert_true(found);
	free(b);
	return out;
}

static void expect_lazy(const char *file)
{
	char *needed = needed_of(file);
	/* The parser reads the section: libc and SQLite are still linked as before. */
	if (!strstr(needed, "libc.so.6\n") || !strstr(needed, "libsqlite3.so"))
		fail_msg("%s: the dynamic section was not read: '%s'", file, needed);
	if (strstr(needed, "libpq") || strstr(needed, "libarchive") || strstr(needed, "libcrypto"))
		fail_msg("%s: still linked against libpq, libarchive or libcrypto:\n%s", file,
			 needed);
	free(needed);
}

static void test_not_needed(void **state)
{
	(void)state;
	expect_lazy(HARVEST_BIN);
	char *bin = strdup(HARVEST_BIN);
	assert_non_null(bin);
	char *lib = tu_path(dirname(bin), "libharvest.so");
	expect_lazy(lib);
	free(lib);
	free(bin);
}

/* ---- a library that cannot be loaded ---------------------------------------------------- */

static void expect_one_line(const tu_result *r, const char *has, const char *what)
{
	const char *nl = strchr(r->err, '\n');
	if (!nl || nl[1] != '\0' || !strstr(r->err, has))
		fail_msg("%s: expected one line with '%s', got '%s'", what, has, r->err);
}

/* No server listens there: without the switch, libpq loads and the connection fails. */
static const char NO_SERVER[] = "postgresql:///db?host=/nonexistent-dir&user=u";

static void test_libpq_missing(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *cache = tu_path(root, "cache.db");
	char *marker = tu_path(root, "started");
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "touch %s", marker);
	const char *run[] = {"run", "--db", NO_SERVER, "--cache-db", cache, "--dir", root,
			     "--shell", "--", cmd, NULL};
	const char *query[] = {"history", "runs", "--db", NO_SERVER, "--cache-db", cache, NULL};
	tu_result r;

	/* The real libpq loads: the failure is the connection's. */
	tu_harvestv(&r, NULL, NULL, query);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "cannot connect to the history database", "history runs");
	assert_null(strstr(r.err, "cannot load"));
	tu_result_free(&r);

	assert_int_equal(setenv("HARVEST_TEST_LIBPQ", "libharvest-no-such-libpq.so.5", 1), 0);
	tu_harvestv(&r, NULL, NULL, run);
	assert_int_equal(r.status, 125);
	expect_one_line(&r, "cannot connect to the history database: cannot load libpq.so.5: ",
			"run, libpq missing");
	expect_one_line(&r, "libharvest-no-such-libpq.so.5", "run, libpq missing");
	assert_int_equal(r.out_len, 0);
	struct stat sb;
	assert_int_not_equal(stat(marker, &sb), 0); /* the command never started */
	tu_result_free(&r);

	tu_harvestv(&r, NULL, NULL, query);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "cannot load libpq.so.5: ", "history runs, libpq missing");
	assert_int_equal(r.out_len, 0);
	tu_result_free(&r);

	/* --no-history never needs libpq. */
	const char *nohist[] = {"run", "--db", NO_SERVER, "--cache-db", cache, "--dir", root,
				"--no-history", "--shell", "--", cmd, NULL};
	tu_harvestv(&r, NULL, NULL, nohist);
	assert_int_equal(r.status, 0);
	assert_int_equal(stat(marker, &sb), 0);
	tu_result_free(&r);
	unsetenv("HARVEST_TEST_LIBPQ");
	tu_rmrf(root);
	free(root);
	free(cache);
	free(marker);
}

static void test_libarchive_missing(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *tree = tu_path(root, "tree");
	tu_mkdir(root, "tree");
	tu_write(tree, "a.txt", "alpha\n", 6);
	char *file = tu_path(root, "out.tar");
	tu_result r;

	assert_int_equal(setenv("HARVEST_TEST_LIBARCHIVE", "libharvest-no-such-archive.so", 1),
			 0);
	tu_harvest(&r, "archive", tree, "-o", file, NULL);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "cannot load libarchive.so.13: ", "archive, libarchive missing");
	expect_one_line(&r, "libharvest-no-such-archive.so", "archive, libarchive missing");
	struct stat sb;
	assert_int_not_equal(stat(file, &sb), 0); /* no half file */
	tu_result_free(&r);

	/* A library that loads but lacks libarchive's functions (zlib, which every harvest
	 * already maps through libmagic): the missing symbol is named. */
	assert_int_equal(setenv("HARVEST_TEST_LIBARCHIVE", "libz.so.1", 1), 0);
	tu_harvest(&r, "archive", tree, "-o", file, NULL);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "cannot load libarchive.so.13: ", "archive, not libarchive");
	expect_one_line(&r, "undefined symbol: archive_", "archive, not libarchive");
	assert_int_not_equal(stat(file, &sb), 0);
	tu_result_free(&r);
	unsetenv("HARVEST_TEST_LIBARCHIVE");

	/* The real libarchive loads. */
	tu_harvest(&r, "archive", tree, "-o", file, NULL);
	assert_int_equal(r.status, 0);
	assert_int_equal(stat(file, &sb), 0);
	assert_true(sb.st_size > 0);
	tu_result_free(&r);
	tu_rmrf(root);
	free(root);
	free(tree);
	free(file);
}

/* ---- libcrypto: never loaded ------------------------------------------------------------ */

/* Whether any of the dynamic loader's logs in dir (LD_DEBUG_OUTPUT) names has. */
static bool logs_name(const char *dir, const char *has)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	bool found = false;
	size_t logs = 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		if (e->d_name[0] == '.')
			continue;
		char *f = tu_path(dir, e->d_name);
		size_t len = 0;
		char *b = tu_read_file(f, &len);
		assert_non_null(b);
		logs++;
		found = found || strstr(b, has) != NULL;
		free(b);
		assert_int_equal(unlink(f), 0);
		free(f);
	}
	closedir(d);
	assert_true(logs > 0); /* the loader did write its log */
	return found;
}

/* SHA-256 is harvest's own: no command maps libcrypto, the ones that hash included, and the
 * digests are OpenSSL's. */
static void test_no_libcrypto(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	char *tree = tu_path(root, "tree");
	char *logs = tu_path(root, "logs");
	char *db = tu_path(root, "h.db");
	char *file = tu_path(tree, "a.txt");
	char *log = tu_path(logs, "ld");
	tu_mkdir(root, "tree");
	tu_mkdir(root, "logs");
	tu_write(tree, "a.txt", "alpha\n", 6);
	tu_result r;
	char sha[65];

	/* The dynamic loader logs every library it maps, at start or through dlopen. */
	assert_int_equal(setenv("LD_DEBUG", "files", 1), 0);
	assert_int_equal(setenv("LD_DEBUG_OUTPUT", log, 1), 0);
	tu_harvest(&r, "mime", "--db", db, file, NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "text/plain"));
	tu_result_free(&r);
	assert_false(logs_name(logs, "libcrypto"));
	/* collect hashes the content. */
	tu_harvest(&r, "collect", "--db", db, "--no-content", tree, NULL);
	assert_int_equal(r.status, 0);
	tu_sha256_hex("alpha\n", 6, sha);
	assert_non_null(strstr(r.out, sha));
	tu_result_free(&r);
	assert_false(logs_name(logs, "libcrypto"));
	/* A run that writes a file, recorded in the history (which hashes it again). */
	tu_harvest(&r, "run", "--db", db, "--dir", tree, "--", "sh", "-c",
		   "printf 'beta gamma\\n' > b.txt", NULL);
	assert_int_equal(r.status, 0);
	tu_sha256_hex("beta gamma\n", 11, sha);
	assert_non_null(strstr(r.out, sha));
	tu_result_free(&r);
	assert_false(logs_name(logs, "libcrypto"));
	unsetenv("LD_DEBUG");
	unsetenv("LD_DEBUG_OUTPUT");

	tu_rmrf(root);
	free(root);
	free(tree);
	free(logs);
	free(db);
	free(file);
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_not_needed),
		cmocka_unit_test(test_libpq_missing),
		cmocka_unit_test(test_libarchive_missing),
		cmocka_unit_test(test_no_libcrypto),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
