/* A spooled collection (hv_collect_opts.spool_content: the contents in a temporary file, not in
 * memory) given to the writers that take one file or the whole collection: hv_record_output_file
 * refuses a spooled content it cannot reach, with nothing written, and the HTML page reads the
 * spool, one file at a time, into the same page as from memory; a spool that cannot be read
 * fails the page with the reason. */
#include "testutil.h"

#include "harvest/collect.h"
#include "harvest/page.h"
#include "harvest/records.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fx {
	char *dir;  /* the collected tree */
	char *tmp;  /* $TMPDIR of the spool */
	char *old_tmpdir;
} fx;

static int setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->dir = tu_mkdtemp();
	f->tmp = tu_mkdtemp();
	const char *t = getenv("TMPDIR");
	f->old_tmpdir = t ? strdup(t) : NULL;
	setenv("TMPDIR", f->tmp, 1);
	tu_write(f->dir, "notes.txt", "hello from the spool\nsecond line\n", 33);
	tu_write(f->dir, "table.csv", "a,b\n1,2\n", 8);
	static const unsigned char bin[] = {0x7f, 0x00, 0xff, 0x10, 0x80, 0x01, 0x02, 0x03, 0xfe};
	tu_write(f->dir, "blob.bin", bin, sizeof(bin));
	tu_write(f->dir, "empty", "", 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fx *f = *state;
	if (f->old_tmpdir)
		setenv("TMPDIR", f->old_tmpdir, 1);
	else
		unsetenv("TMPDIR");
	tu_rmrf(f->dir);
	tu_rmrf(f->tmp);
	free(f->dir);
	free(f->tmp);
	free(f->old_tmpdir);
	free(f);
	return 0;
}

/* base64 of notes.txt, "hello from the spool\nsecond line\n", as its record has it */
#define NOTES_CONTENT "\"content\":\"aGVsbG8gZnJvbSB0aGUgc3Bvb2wKc2Vjb25kIGxpbmUK\""

/* The files of f's tree, their contents spooled or in memory (no store: no cache). */
static hv_collection *collect(const fx *f, bool spool)
{
	hv_collect_opts o;
	hv_collect_opts_init(&o);
	o.no_cache = true;
	o.spool_content = spool;
	hv_collection *c = NULL;
	hv_status rc = hv_collect(NULL, f->dir, &o, &c);
	if (rc != HV_OK)
		fail_msg("collect: %s", hv_error_last());
	assert_non_null(c);
	assert_int_equal(c->n_files, 4);
	if (spool) {
		assert_non_null(c->spool);
		for (size_t i = 0; i < c->n_files; i++) {
			assert_true(c->files[i].spooled);
			assert_null(c->files[i].content);
		}
	}
	return c;
}

static const hv_output_file *file_named(const hv_collection *c, const char *path)
{
	for (size_t i = 0; i < c->n_files; i++)
		if (!strcmp(c->files[i].path, path))
			return &c->files[i];
	fail_msg("no %s in the collection", path);
	return NULL;
}

/* hv_record_output_file of a spooled file with its content: HV_EUSAGE naming the file and the
 * call that reads the spool, and not a byte written (before, "content": null, as if the file
 * had none). Without the content, the record as always; in memory, the content as always. */
static void test_output_file_spooled(void **state)
{
	fx *f = *state;
	hv_collection *c = collect(f, true);
	const hv_output_file *notes = file_named(c, "notes.txt");
	hv_json *j = NULL;
	assert_int_equal(hv_json_new_buffer(&j, HV_CASE_SNAKE), HV_OK);
	assert_int_equal(hv_record_output_file(j, notes, true), HV_EUSAGE);
	assert_non_null(strstr(hv_error_last(), "notes.txt"));
	assert_non_null(strstr(hv_error_last(), "hv_record_collection_file"));
	size_t len = 1;
	hv_json_buffer(j, &len);
	assert_int_equal(len, 0);
	assert_int_equal(hv_json_status(j), HV_OK);
	/* An empty file has nothing to lose, but it is spooled all the same: refused too, so
	 * that a caller learns of the rule on every file, not only on some. */
	assert_int_equal(hv_record_output_file(j, file_named(c, "empty"), true), HV_EUSAGE);
	assert_int_equal(hv_record_output_file(j, notes, false), HV_OK);
	const char *got = hv_json_buffer(j, &len);
	assert_non_null(strstr(got, "\"path\":\"notes.txt\""));
	assert_non_null(strstr(got, "\"content\":null"));
	hv_json_buffer_reset(j);
	/* What the refusal points to writes the content, read from the spool. */
	size_t idx = (size_t)(notes - c->files);
	assert_int_equal(hv_record_collection_file(j, c, idx, true), HV_OK);
	got = hv_json_buffer(j, &len);
	assert_non_null(strstr(got, NOTES_CONTENT));
	hv_json_free(j);
	hv_collection_free(c);

	c = collect(f, false);
	assert_int_equal(hv_json_new_buffer(&j, HV_CASE_SNAKE), HV_OK);
	assert_int_equal(hv_record_output_file(j, file_named(c, "notes.txt"), true), HV_OK);
	got = hv_json_buffer(j, &len);
	assert_non_null(strstr(got, NOTES_CONTENT));
	hv_json_free(j);
	hv_collection_free(c);
}

typedef struct sink {
	char *p;
	size_t n;
} sink;

static int sink_write(void *ctx, const void *data, size_t len)
{
	sink *s = ctx;
	s->p = tu_xrealloc(s->p, s->n + len + 1);
	memcpy(s->p + s->n, data, len);
	s->n += len;
	s->p[s->n] = '\0';
	return 0;
}

static const hv_run_row run_row = {
	.run_id = 0,
	.dir = "/tmp/out",
	.dir_len = 8,
	.started_at_ns = INT64_C(1764547200000000000),
	.ended = true,
	.ended_at_ns = INT64_C(1764547201000000000),
};

/* The page of c with o; fails the test unless it is written. */
static char *page_of(const hv_collection *c, const hv_page_opts *o)
{
	sink s = {0};
	hv_status rc = hv_page_write_collection(&run_row, c, o, sink_write, &s);
	if (rc != HV_OK)
		fail_msg("page: %s", hv_error_last());
	assert_non_null(s.p);
	return s.p;
}

/* The page of a spooled collection is the page of the same collection in memory, byte for
 * byte: the text shown, the table parsed, the binary offered for download (before, every
 * spooled file was "The content was not stored"). */
static void test_page_reads_spool(void **state)
{
	fx *f = *state;
	hv_collection *mem = collect(f, false);
	hv_collection *sp = collect(f, true);
	char *want = page_of(mem, NULL);
	char *got = page_of(sp, NULL);
	assert_non_null(strstr(got, "hello from the spool"));
	assert_null(strstr(got, "The content was not stored"));
	assert_string_equal(got, want);
	free(want);
	free(got);
	/* A download above the embed cap is only named, as from memory, and not read. */
	hv_page_opts o = {.embed_max = 4};
	want = page_of(mem, &o);
	got = page_of(sp, &o);
	assert_non_null(strstr(got, "Too large to embed"));
	assert_string_equal(got, want);
	free(want);
	free(got);
	hv_collection_free(mem);
	hv_collection_free(sp);
}

/* The descriptor of the spool: the one open file of $TMPDIR (f->tmp), unnamed or removed. */
static int spool_fd(const fx *f)
{
	int found = -1;
	DIR *d = opendir("/proc/self/fd");
	assert_non_null(d);
	const struct dirent *e;
	while ((e = readdir(d))) {
		char link[300], target[PATH_MAX];
		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		size_t tl = strlen(f->tmp);
		if (!strncmp(target, f->tmp, tl) && target[tl] == '/') {
			assert_int_equal(found, -1);
			found = atoi(e->d_name);
		}
	}
	closedir(d);
	assert_true(found >= 0);
	return found;
}

/* A spool that has lost its bytes (cut short under harvest): the page fails with HV_EIO and the
 * reason, never a page that silently says the content was not stored. */
static void test_page_spool_unreadable(void **state)
{
	fx *f = *state;
	hv_collection *sp = collect(f, true);
	assert_int_equal(ftruncate(spool_fd(f), 0), 0);
	sink s = {0};
	assert_int_equal(hv_page_write_collection(&run_row, sp, NULL, sink_write, &s), HV_EIO);
	/* The artifact whose content could not be read, and why. */
	const char *first = sp->files[0].path;
	if (strncmp(hv_error_last(), first, strlen(first)) != 0 ||
	    !strstr(hv_error_last(), ": the temporary file of the contents: "))
		fail_msg("message: %s", hv_error_last());
	free(s.p);
	hv_collection_free(sp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_output_file_spooled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_page_reads_spool, setup, teardown),
		cmocka_unit_test_setup_teardown(test_page_spool_unreadable, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
