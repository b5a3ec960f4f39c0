/* Fuzz target: opening the store (include/harvest/store.h) on arbitrary bytes as the database
 * file.
 *
 * SPEC 5: "A file that is not a harvest database, or is corrupt, or is read-only gets a clear
 * error and is never modified." store.h adds: no -wal/-shm/-journal file is created next to a
 * refused file, and a HV_STORE_READONLY open writes and creates nothing.
 *
 * Each input is written as <tmp>/h.db, then:
 *   1. a read-only open: HV_OK or HV_EDB with a message; either way the file is unchanged
 *      byte for byte and no side file exists afterwards; when it opened, every reader runs
 *      (runs with output, artifacts with content, snapshots 1..3 and their entries, a MIME
 *      cache lookup) and must return a status, never crash;
 *   2. a writing open: HV_EDB with a message and the file unchanged and no side file, or a
 *      working store: the readers again, then one small write (a run with an artifact and its
 *      content, and a snapshot with one entry). When PRAGMA integrity_check was "ok" before
 *      the write and the write succeeded, it must still be "ok" after it, and the run must read
 *      back. A write may fail on a damaged database, with HV_EDB and a message. After the
 *      close no -journal is left behind.
 * A database that opens but is already corrupt (integrity check not "ok") is counted and
 * printed at exit: store.h promises a full check only when a writing open adopts a database
 * that is not in WAL mode, so such a database must be left unchanged by the open itself (a
 * finding otherwise); the small write after it may still change it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "harvest/store.h"
#include "harvest/sys/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "fuzz_store: check failed: %s (%s:%d)\n", #cond,   \
				__FILE__, __LINE__);                                      \
			fprintf(stderr, "  " __VA_ARGS__);                                \
			fprintf(stderr, "\n");                                            \
			abort();                                                          \
		}                                                                         \
	} while (0)

static char dir[256];
static char db[300];
static const char *const side_suffixes[] = {"-wal", "-shm", "-journal"};

static unsigned long n_inputs, n_ro_ok, n_rw_ok, n_corrupt_accepted, n_write_failed,
	n_intact_write_failed, n_corrupt_changed;

static void side_path(char *out, size_t cap, const char *suffix)
{
	snprintf(out, cap, "%s%s", db, suffix);
}

static void remove_all(void)
{
	char p[320];
	unlink(db);
	for (size_t i = 0; i < 3; i++) {
		side_path(p, sizeof(p), side_suffixes[i]);
		unlink(p);
	}
}

/* The side file that exists, or NULL. */
static const char *side_file_left(void)
{
	static char p[320];
	for (size_t i = 0; i < 3; i++) {
		side_path(p, sizeof(p), side_suffixes[i]);
		struct stat sb;
		if (lstat(p, &sb) == 0)
			return p;
	}
	return NULL;
}

static void write_file(const uint8_t *data, size_t size)
{
	int fd = open(db, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0, "open %s: %s", db, strerror(errno));
	size_t off = 0;
	while (off < size) {
		ssize_t w = write(fd, data + off, size - off);
		CHECK(w > 0, "write %s: %s", db, strerror(errno));
		off += (size_t)w;
	}
	close(fd);
}

static bool file_equals(const uint8_t *data, size_t size)
{
	int fd = open(db, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	struct stat sb;
	bool same = fstat(fd, &sb) == 0 && (size_t)sb.st_size == size;
	uint8_t *buf = same ? malloc(size + 1) : NULL;
	if (same && buf)
		same = pread(fd, buf, size, 0) == (ssize_t)size && memcmp(buf, data, size) == 0;
	free(buf);
	close(fd);
	return same;
}

static void check_refusal(hv_status rc, const char *what)
{
	CHECK(rc == HV_EDB || rc == HV_ENOMEM, "%s: status %d, not HV_EDB (%s)", what, rc,
	      hv_error_last());
	const char *msg = hv_error_last();
	CHECK(msg[0] != '\0' && strchr(msg, '\n') == NULL,
	      "%s: refused without a one-line message ('%s')", what, msg);
	CHECK(strstr(msg, db) != NULL, "%s: the message '%s' does not name the path", what, msg);
}

/* Every reader: they may fail (a damaged database), but with a status. */
static void read_everything(hv_store *st)
{
	hv_run_filter rf = {.with_output = true, .limit = 20};
	hv_run_iter *ri;
	if (hv_store_runs(st, &rf, &ri) == HV_OK) {
		const hv_run_row *row;
		int n = 0;
		while (n++ < 50 && hv_run_iter_next(ri, &row) == HV_OK) {
			CHECK(row->dir || row->dir_len == 0, "a run row without dir");
			volatile size_t sink = row->label_len + row->dir_len + row->stdout_len +
					       row->stderr_len;
			(void)sink;
		}
		hv_run_iter_free(ri);
	}
	hv_artifact_filter af = {.with_content = true, .limit = 20};
	hv_artifact_iter *ai;
	if (hv_store_artifacts(st, &af, &ai) == HV_OK) {
		const hv_artifact_row *row;
		int n = 0;
		while (n++ < 50 && hv_artifact_iter_next(ai, &row) == HV_OK) {
			if (row->sha256 && strlen(row->sha256) == 64) {
				void *data;
				size_t len;
				if (hv_store_content_get(st, row->sha256, &data, &len) == HV_OK)
					free(data);
			}
		}
		hv_artifact_iter_free(ai);
	}
	for (int64_t id = 1; id <= 3; id++) {
		hv_snapshot *sn;
		if (hv_store_snapshot_open(st, id, &sn) != HV_OK)
			continue;
		size_t rl;
		(void)hv_snapshot_root(sn, &rl);
		(void)hv_snapshot_created_at(sn);
		const hv_snapshot_entry *e;
		int n = 0;
		while (n++ < 100 && hv_snapshot_next(sn, &e) == HV_OK)
			CHECK(e->path && e->path[e->path_len] == '\0',
			      "a snapshot entry path is not NUL-terminated");
		hv_snapshot_entry one;
		(void)hv_snapshot_lookup(sn, "a", 1, &one);
		hv_snapshot_close(sn);
	}
	hv_stat s = {.dev = 1, .ino = 1, .size = 0, .mode = S_IFREG | 0644};
	char *mime = NULL;
	if (hv_store_mime_lookup(st, &s, "fp", &mime) == HV_OK)
		free(mime);
}

/* The artifact's content: unique to this process and input, so a content a damaged database
 * already holds under the same digest cannot be mistaken for ours. */
static char content[64];
static size_t content_len;
static char content_sha[65];

static void make_content(void)
{
	content_len = (size_t)snprintf(content, sizeof(content), "fuzz-%ld-%lu", (long)getpid(),
				       n_inputs);
	unsigned char md[32];
	unsigned int mdlen = 0;
	CHECK(EVP_Digest(content, content_len, md, &mdlen, EVP_sha256(), NULL) == 1 && mdlen == 32,
	      "EVP_Digest");
	for (int i = 0; i < 32; i++)
		snprintf(content_sha + 2 * i, 3, "%02x", md[i]);
}

/* One small write: a run with one artifact (content stored) and a snapshot with one entry. */
static hv_status small_write(hv_store *st, int64_t *run_id)
{
	hv_run_start start = {.label = "fuzz", .command_json = "[\"true\"]", .dir = "/fuzz"};
	hv_status rc = hv_store_run_begin(st, &start, run_id);
	if (rc != HV_OK)
		return rc;
	make_content();
	hv_artifact_in a = {.path = "out/a.txt", .path_len = 9, .name = "a.txt", .name_len = 5,
			    .mime_type = "text/plain", .size = content_len, .sha256 = content_sha,
			    .content = content, .content_len = content_len};
	hv_run_end end = {.has_exit_code = true, .duration_ms = 1, .stdout_data = "x",
			  .stdout_len = 1};
	rc = hv_store_run_finish(st, *run_id, &end, &a, 1);
	if (rc != HV_OK)
		return rc;
	hv_snapshot_writer *w;
	rc = hv_store_snapshot_begin(st, "/fuzz", &w);
	if (rc != HV_OK)
		return rc;
	hv_stat s = {.dev = 1, .ino = 2, .size = 5, .mode = S_IFREG | 0644, .mtime_ns = 1,
		     .ctime_ns = 1};
	rc = hv_snapshot_writer_add(w, "a", 1, &s, NULL);
	if (rc != HV_OK) {
		hv_snapshot_writer_abort(w);
		return rc;
	}
	return hv_snapshot_writer_finish(w, NULL);
}

static void report(void)
{
	fprintf(stderr,
		"fuzz_store: %lu inputs: %lu opened read-only, %lu opened for writing, %lu of those "
		"already corrupt (accepted; %lu of them modified by the open), %lu small writes failed "
		"(%lu on an intact database)\n",
		n_inputs, n_ro_ok, n_rw_ok, n_corrupt_accepted, n_corrupt_changed, n_write_failed,
		n_intact_write_failed);
	remove_all();
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* $HV_FUZZ_TMPDIR (scripts/fuzz.sh removes it after the run, also after a crash), else
	 * tmpfs. */
	const char *base = getenv("HV_FUZZ_TMPDIR");
	if (!base || !*base)
		base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/harvest-fuzz-store-XXXXXX", base);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		abort();
	}
	snprintf(db, sizeof(db), "%s/h.db", dir);
	atexit(report);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	n_inputs++;
	remove_all();
	write_file(data, size);

	/* 1. Read-only: nothing written, nothing created, whatever the outcome. */
	hv_store *st = NULL;
	hv_status rc = hv_store_open(&st, db, HV_STORE_READONLY);
	if (rc == HV_OK) {
		n_ro_ok++;
		read_everything(st);
		hv_store_close(st);
	} else {
		CHECK(st == NULL, "a failed open left a handle");
		check_refusal(rc, "read-only open");
	}
	CHECK(file_equals(data, size), "the read-only open (status %d: %s) modified the file", rc,
	      rc == HV_OK ? "opened" : hv_error_last());
	const char *left = side_file_left();
	CHECK(!left, "the read-only open (status %d) left %s behind", rc, left);

	/* 2. Writing. */
	st = NULL;
	rc = hv_store_open(&st, db, 0);
	if (rc != HV_OK) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", hv_error_last());
		CHECK(st == NULL, "a failed open left a handle");
		check_refusal(rc, "writing open");
		CHECK(file_equals(data, size), "refused (%s), but the file was modified", msg);
		left = side_file_left();
		CHECK(!left, "refused (%s), but %s was left behind", msg, left);
		return 0;
	}
	n_rw_ok++;
	read_everything(st);
	bool intact = hv_store_integrity_check(st) == HV_OK;
	char corrupt_msg[256];
	snprintf(corrupt_msg, sizeof(corrupt_msg), "%s", intact ? "" : hv_error_last());
	if (!intact) {
		n_corrupt_accepted++;
		if (!file_equals(data, size)) {
			n_corrupt_changed++; /* by the open itself, before any write of ours */
			/* SPEC 5: a corrupt file is refused and never modified. A database the
			 * open would switch to WAL is fully checked first. */
			CHECK(false, "a corrupt database (%s) was accepted and modified by the open",
			      corrupt_msg);
		}
	}
	int64_t run_id = 0;
	rc = small_write(st, &run_id);
	if (rc != HV_OK) {
		n_write_failed++;
		CHECK(rc == HV_EDB || rc == HV_ENOMEM || rc == HV_EUSAGE || rc == HV_ENOTFOUND,
		      "the small write failed with status %d (%s)", rc, hv_error_last());
		CHECK(hv_error_last()[0] != '\0', "the small write failed without a message");
		/* Refusing the write is fine when the database is damaged, and SQLite's integrity
		 * check does not see every damage: a schema changed by a byte (a column renamed)
		 * is a consistent SQLite database that is no longer harvest's. */
		if (intact)
			n_intact_write_failed++;
	} else if (intact) {
		rc = hv_store_integrity_check(st);
		CHECK(rc == HV_OK, "the database was intact, then a small write broke it: %s",
		      hv_error_last());
		hv_run_filter rf = {.run_id = run_id, .with_output = true};
		hv_run_iter *ri;
		CHECK(hv_store_runs(st, &rf, &ri) == HV_OK, "cannot list the new run: %s",
		      hv_error_last());
		const hv_run_row *row;
		CHECK(hv_run_iter_next(ri, &row) == HV_OK && row->run_id == run_id &&
			      row->stdout_len == 1 && row->artifacts == 1,
		      "the new run does not read back");
		hv_run_iter_free(ri);
		void *got;
		size_t len;
		CHECK(hv_store_content_get(st, content_sha, &got, &len) == HV_OK &&
			      len == content_len && memcmp(got, content, len) == 0,
		      "the new content does not read back");
		free(got);
	}
	hv_store_close(st);
	char p[320];
	side_path(p, sizeof(p), "-journal");
	struct stat sb;
	CHECK(lstat(p, &sb) != 0, "a -journal file was left behind after the close");
	return 0;
}
