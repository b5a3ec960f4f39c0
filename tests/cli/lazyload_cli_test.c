/* libpq, libarchive, libmagic, libseccomp and SQLite are opened with dlopen on first use, not
 * linked: neither the harvest binary nor libharvest.so names them in its ELF dynamic section
 * (DT_NEEDED), the real libraries load when a PostgreSQL history, an archive, MIME detection or
 * a store is used (the history_pg, archive, mime and store tests cover what they do) and only
 * then, and a library that cannot be loaded (a test-only switch naming a missing file, or one
 * without its functions) gives one line naming it and the documented status: 125 and the
 * command not started for run, 1 for a history query, 1 and no half file for an archive, 1 for
 * mime and collect, while the commands that need none of them work on. libcrypto is neither
 * linked nor loaded: SHA-256 is harvest's own. */
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
	/* The parser reads the section: libc is still linked. */
	if (!strstr(needed, "libc.so.6\n"))
		fail_msg("%s: the dynamic section was not read: '%s'", file, needed);
	static const char *const lazy[] = {"libpq",   "libarchive", "libcrypto",
					    "libmagic", "libseccomp", "liblzma",
					    "libbz2",  "libz.so",    "libsqlite3"};
	for (size_t i = 0; i < sizeof(lazy) / sizeof(lazy[0]); i++)
		if (strstr(needed, lazy[i]))
			fail_msg("%s: still linked against %s:\n%s", file, lazy[i], needed);
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

	/* A library that loads but lacks libarchive's functions (zlib): the missing symbol is
	 * named. */
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

/* The dynamic loader's logs in dir (LD_DEBUG_OUTPUT), all in one new string; the files are
 * removed, so the next command's logs are read alone. */
static char *take_logs(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	char *all = tu_xmalloc(1);
	size_t len = 0, logs = 0;
	all[0] = '\0';
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		if (e->d_name[0] == '.')
			continue;
		char *f = tu_path(dir, e->d_name);
		size_t n = 0;
		char *b = tu_read_file(f, &n);
		assert_non_null(b);
		logs++;
		all = tu_xrealloc(all, len + n + 1);
		memcpy(all + len, b, n);
		len += n;
		all[len] = '\0';
		free(b);
		assert_int_equal(unlink(f), 0);
		free(f);
	}
	closedir(d);
	assert_true(logs > 0); /* the loader did write its log */
	return all;
}

/* Whether any of the dynamic loader's logs in dir names has. */
static bool logs_name(const char *dir, const char *has)
{
	char *all = take_logs(dir);
	bool found = strstr(all, has) != NULL;
	free(all);
	return found;
}

/* A test's scratch directory: tree/a.txt ("alpha\n", file), logs/ for the loader's logs (log
 * the prefix LD_DEBUG_OUTPUT names), and h.db, not made yet. */
struct fx {
	char *root, *tree, *file, *logs, *log, *db;
};

static void fx_init(struct fx *f)
{
	f->root = tu_mkdtemp();
	f->tree = tu_path(f->root, "tree");
	f->file = tu_path(f->tree, "a.txt");
	f->logs = tu_path(f->root, "logs");
	f->log = tu_path(f->logs, "ld");
	f->db = tu_path(f->root, "h.db");
	tu_mkdir(f->root, "tree");
	tu_mkdir(f->root, "logs");
	tu_write(f->tree, "a.txt", "alpha\n", 6);
}

static void fx_free(struct fx *f)
{
	tu_rmrf(f->root);
	free(f->root);
	free(f->tree);
	free(f->file);
	free(f->logs);
	free(f->log);
	free(f->db);
}

/* SHA-256 is harvest's own: no command maps libcrypto, the ones that hash included, and the
 * digests are OpenSSL's. */
static void test_no_libcrypto(void **state)
{
	(void)state;
	struct fx f;
	fx_init(&f);
	const char *tree = f.tree, *logs = f.logs, *db = f.db, *file = f.file, *log = f.log;
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
	fx_free(&f);
}

/* ---- libmagic and libseccomp: loaded by MIME detection only ------------------------------ */

/* Runs harvest with args (which must succeed) under the dynamic loader's log in logs, and
 * says whether it mapped libmagic (with its compressors), in *seccomp libseccomp and in
 * *sqlite SQLite. */
static bool maps_lazy_libs(const char *logs, const char *log, const char *const *args,
			   bool *seccomp, bool *sqlite)
{
	tu_result r;
	assert_int_equal(setenv("LD_DEBUG", "files", 1), 0);
	assert_int_equal(setenv("LD_DEBUG_OUTPUT", log, 1), 0);
	tu_harvestv(&r, NULL, NULL, args);
	unsetenv("LD_DEBUG");
	unsetenv("LD_DEBUG_OUTPUT");
	if (r.status != 0)
		fail_msg("harvest %s: status %d: %s", args[0], r.status, r.err);
	tu_result_free(&r);
	char *all = take_logs(logs);
	assert_non_null(strstr(all, "libc.so.6")); /* the log names what it maps */
	bool magic = strstr(all, "libmagic.so") != NULL;
	bool compressors = strstr(all, "liblzma.so") != NULL;
	*seccomp = strstr(all, "libseccomp.so") != NULL;
	*sqlite = strstr(all, "libsqlite3.so") != NULL;
	free(all);
	/* libmagic brings its compressors (which libarchive needs too). */
	if (magic)
		assert_true(compressors);
	return magic;
}

/* Listing, walking, reading, writing and archiving files never map libmagic, libseccomp or
 * SQLite; a MIME detection maps SQLite for its cache and libmagic, and libseccomp with the
 * first sandboxed worker, which a run answered wholly from the cache never starts. */
static void test_lazy_libs_on_first_use(void **state)
{
	(void)state;
	struct fx f;
	fx_init(&f);
	const char *tree = f.tree, *logs = f.logs, *log = f.log, *db = f.db, *file = f.file;
	char *put = tu_path(tree, "b.txt");
	char *tar = tu_path(f.root, "t.tar");
	bool seccomp, sqlite;

	const char *ls[] = {"ls", tree, NULL};
	const char *walk[] = {"walk", f.root, NULL};
	const char *cat[] = {"cat", file, NULL};
	const char *rm[] = {"rm", put, NULL};
	const char *archive[] = {"archive", tree, "-o", tar, NULL};
	const char *version[] = {"--version", NULL};
	const char *const *plain[] = {ls, walk, cat, rm, archive};
	tu_write(tree, "b.txt", "beta\n", 5);
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		if (maps_lazy_libs(logs, log, plain[i], &seccomp, &sqlite) || seccomp || sqlite)
			fail_msg("harvest %s mapped libmagic, libseccomp or SQLite", plain[i][0]);
	}
	/* --version names libmagic's and SQLite's versions: it loads both, to ask. */
	assert_true(maps_lazy_libs(logs, log, version, &seccomp, &sqlite));
	assert_false(seccomp);
	assert_true(sqlite);

	/* A miss: libmagic, in a sandboxed worker. The cache takes a file whose change is more
	 * than 2 s old: a second more for the clock's granularity. */
	sleep(3);
	const char *mime[] = {"mime", "--db", db, file, NULL};
	assert_true(maps_lazy_libs(logs, log, mime, &seccomp, &sqlite));
	assert_true(seccomp);
	assert_true(sqlite);
	/* The same file again, a hit: libmagic for the fingerprint, no worker, no libseccomp. */
	assert_true(maps_lazy_libs(logs, log, mime, &seccomp, &sqlite));
	assert_false(seccomp);
	assert_true(sqlite);
	free(put);
	free(tar);
	fx_free(&f);
}

/* With a library missing: listing (harvest cmd tree) still works, and --version says the
 * library is unavailable (line gone, as "libmagic unavailable\n") and still names the other
 * library's version (kept, as "SQLite 3."). */
static void expect_listing_and_version(const char *cmd, const char *tree, const char *gone,
				       const char *kept)
{
	tu_result r;
	tu_harvest(&r, cmd, tree, NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "\"a.txt\""));
	tu_result_free(&r);
	tu_harvest(&r, "--version", NULL);
	assert_int_equal(r.status, 0);
	if (!strstr(r.out, gone) || !strstr(r.out, kept))
		fail_msg("--version: expected '%s' and '%s' in '%s'", gone, kept, r.out);
	tu_result_free(&r);
}

static void test_detect_libs_missing(void **state)
{
	(void)state;
	struct fx f;
	fx_init(&f);
	const char *tree = f.tree, *db = f.db, *file = f.file;
	tu_result r;

	/* Without libmagic: what detects nothing works, what detects fails in one line. */
	assert_int_equal(setenv("HARVEST_TEST_LIBMAGIC", "libharvest-no-such-magic.so", 1), 0);
	expect_listing_and_version("walk", tree, "libmagic unavailable\n", "SQLite 3.");
	tu_harvest(&r, "mime", "--db", db, file, NULL);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "cannot load libmagic.so.1: ", "mime, libmagic missing");
	expect_one_line(&r, "libharvest-no-such-magic.so", "mime, libmagic missing");
	assert_int_equal(r.out_len, 0);
	tu_result_free(&r);
	/* Several paths: each one libmagic would read names the reason; an empty file is still
	 * answered, a missing one says so. */
	char *empty = tu_path(f.root, "empty"), *missing = tu_path(f.root, "missing");
	tu_write(f.root, "empty", "", 0);
	tu_harvest(&r, "mime", "--no-cache", "--format", "text", file, empty, missing, NULL);
	assert_int_equal(r.status, 1);
	char want[8192];
	snprintf(want, sizeof(want), "harvest: %s: cannot detect MIME types: cannot load libmagic.so.1: ",
		 file);
	if (!strstr(r.err, want))
		fail_msg("mime, libmagic missing, several paths: '%s'", r.err);
	snprintf(want, sizeof(want), "harvest: %s: No such file or directory\n", missing);
	if (!strstr(r.err, want))
		fail_msg("mime, libmagic missing, a missing path: '%s'", r.err);
	snprintf(want, sizeof(want), "%s: inode/x-empty\n", empty);
	if (strcmp(r.out, want) != 0)
		fail_msg("mime, libmagic missing, an empty file: '%s'", r.out);
	tu_result_free(&r);
	free(empty);
	free(missing);
	/* collect still collects, each file whole and typed octet-stream, and says why once. */
	tu_harvest(&r, "collect", "--db", db, tree, NULL);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "cannot load libmagic.so.1: ", "collect, libmagic missing");
	expect_one_line(&r, ": every file is typed application/octet-stream",
			"collect, libmagic missing");
	if (!strstr(r.out, "\"path\":\"a.txt\",\"mime_type\":\"application/octet-stream\",\"size\":6,"
			   "\"sha256\":\"") ||
	    !strstr(r.out, "\"content\":\"YWxwaGEK\""))
		fail_msg("collect without libmagic: %s", r.out);
	tu_result_free(&r);
	/* With libmagic back, the same file is typed as it is (without the cache, which the
	 * libseccomp case below must find empty however slow this machine is). */
	unsetenv("HARVEST_TEST_LIBMAGIC");
	tu_harvest(&r, "collect", "--db", db, "--no-content", "--no-cache", tree, NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "\"path\":\"a.txt\",\"mime_type\":\"text/plain\""));
	tu_result_free(&r);
	assert_int_equal(setenv("HARVEST_TEST_LIBMAGIC", "libharvest-no-such-magic.so", 1), 0);
	/* A library without libmagic's functions: the missing symbol is named. */
	assert_int_equal(setenv("HARVEST_TEST_LIBMAGIC", "libz.so.1", 1), 0);
	tu_harvest(&r, "mime", "--db", db, file, NULL);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "undefined symbol: magic_", "mime, not libmagic");
	tu_result_free(&r);
	unsetenv("HARVEST_TEST_LIBMAGIC");

	/* Without libseccomp no worker starts: a miss fails in one line, never unsandboxed. */
	assert_int_equal(setenv("HARVEST_TEST_LIBSECCOMP", "libharvest-no-such-seccomp.so", 1), 0);
	tu_harvest(&r, "mime", "--db", db, file, NULL);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "cannot load libseccomp.so.2: ", "mime, libseccomp missing");
	assert_int_equal(r.out_len, 0);
	tu_result_free(&r);
	unsetenv("HARVEST_TEST_LIBSECCOMP");

	/* Both real libraries load; then a hit needs no libseccomp at all (once the file is old
	 * enough for the cache to take it). */
	sleep(3);
	tu_harvest(&r, "mime", "--db", db, file, NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "\"text/plain\""));
	tu_result_free(&r);
	assert_int_equal(setenv("HARVEST_TEST_LIBSECCOMP", "libharvest-no-such-seccomp.so", 1), 0);
	tu_harvest(&r, "mime", "--db", db, file, NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "\"text/plain\""));
	tu_result_free(&r);
	unsetenv("HARVEST_TEST_LIBSECCOMP");
	fx_free(&f);
}

/* Without SQLite: listing works; the store's commands fail in one line naming it, mime answers
 * without its cache (saying so, exit 1) and a run is not started. */
static void test_sqlite_missing(void **state)
{
	(void)state;
	struct fx f;
	fx_init(&f);
	const char *root = f.root, *tree = f.tree, *db = f.db, *file = f.file;
	char *marker = tu_path(root, "started");
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "touch %s", marker);
	tu_result r;

	assert_int_equal(setenv("HARVEST_TEST_LIBSQLITE", "libharvest-no-such-sqlite.so", 1), 0);
	expect_listing_and_version("ls", tree, "SQLite unavailable\n", "libmagic 5.");
	tu_harvest(&r, "history", "runs", "--db", db, NULL);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, ": cannot open the database: cannot load libsqlite3.so.0: ",
			"history, SQLite missing");
	expect_one_line(&r, "libharvest-no-such-sqlite.so", "history, SQLite missing");
	assert_int_equal(r.out_len, 0);
	tu_result_free(&r);
	tu_harvest(&r, "mime", "--db", db, file, NULL);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "cannot load libsqlite3.so.0: ", "mime, SQLite missing");
	assert_non_null(strstr(r.out, "\"text/plain\""));
	tu_result_free(&r);
	tu_harvest(&r, "run", "--db", db, "--dir", root, "--shell", "--", cmd, NULL);
	assert_int_equal(r.status, 125);
	expect_one_line(&r, "cannot load libsqlite3.so.0: ", "run, SQLite missing");
	struct stat sb;
	assert_int_not_equal(stat(marker, &sb), 0); /* the command never started */
	tu_result_free(&r);
	/* A library without SQLite's functions: the missing symbol is named. */
	assert_int_equal(setenv("HARVEST_TEST_LIBSQLITE", "libz.so.1", 1), 0);
	tu_harvest(&r, "history", "runs", "--db", db, NULL);
	assert_int_equal(r.status, 1);
	expect_one_line(&r, "undefined symbol: sqlite3_", "history, not SQLite");
	tu_result_free(&r);
	unsetenv("HARVEST_TEST_LIBSQLITE");

	/* The real SQLite loads: the same run starts and is recorded. */
	tu_harvest(&r, "run", "--db", db, "--dir", root, "--shell", "--", cmd, NULL);
	assert_int_equal(r.status, 0);
	assert_int_equal(stat(marker, &sb), 0);
	tu_result_free(&r);
	tu_harvest(&r, "history", "runs", "--db", db, NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "touch"));
	tu_result_free(&r);
	free(marker);
	fx_free(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_not_needed),
		cmocka_unit_test(test_libpq_missing),
		cmocka_unit_test(test_libarchive_missing),
		cmocka_unit_test(test_no_libcrypto),
		cmocka_unit_test(test_lazy_libs_on_first_use),
		cmocka_unit_test(test_detect_libs_missing),
		cmocka_unit_test(test_sqlite_missing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
