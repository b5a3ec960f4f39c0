/* End-to-end tests of --format html: `history show RUN_ID --format html`, `run --format html`
 * (the page instead of the stream: no StreamChunk JSON) and `collect --format html`; hostile
 * names, a script in an HTML file and an SVG, the exit statuses, and the formats offered. */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char csp[] = "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
			  "'none'; img-src data:; style-src 'unsafe-inline'\">";

static void assert_page(const char *out)
{
	assert_true(strncmp(out, "<!DOCTYPE html>\n", 16) == 0);
	assert_non_null(strstr(out, csp));
	assert_non_null(strstr(out, "</html>\n"));
	for (const char *p = out; *p; p++)
		assert_false(strncasecmp(p, "<script", 7) == 0);
	assert_null(strchr(out, '\x1b'));
}

typedef struct fixture {
	char *dir, *tree, *db;
} fixture;

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	f->dir = tu_mkdtemp();
	f->tree = tu_path(f->dir, "tree");
	f->db = tu_path(f->dir, "h.db");
	tu_mkdir(f->dir, "tree");
	tu_write(f->tree, "<img src=x onerror=alert(1)>.txt", "<script>alert(1)</script>\n", 26);
	tu_write(f->tree, "page.html", "<html><body><script>top.x=1</script></body></html>", 51);
	static const char svg[] = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"4\" height=\"4\">"
				  "<script>top.x=1</script></svg>";
	tu_write(f->tree, "evil.svg", svg, sizeof(svg) - 1);
	tu_write(f->tree, "t.csv", "a,b\n\"x,y\",\"q\"\"q\"\n", 18);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	tu_rmrf(f->dir);
	free(f->dir);
	free(f->tree);
	free(f->db);
	free(f);
	return 0;
}

static void check_artifacts(const char *out)
{
	assert_non_null(strstr(out, "&lt;img src=x onerror=alert(1)&gt;.txt"));
	assert_null(strstr(out, "<img src=x"));
	assert_non_null(strstr(out, "download=\"page.html\" href=\"data:application/octet-stream;"));
	assert_non_null(strstr(out, "src=\"data:image/svg+xml;base64,"));
	assert_non_null(strstr(out, "<tr><td>x,y</td><td>q&quot;q</td></tr>"));
}

static void test_history_show_html(void **state)
{
	fixture *f = *state;
	tu_result r;
	tu_harvest(&r, "collect", "--db", f->db, "--label", "<lab>", f->tree, NULL);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	tu_harvest(&r, "history", "show", "1", "--format", "html", "--db", f->db, NULL);
	assert_int_equal(r.status, 0);
	assert_page(r.out);
	check_artifacts(r.out);
	assert_non_null(strstr(r.out, "&lt;lab&gt;"));
	assert_non_null(strstr(r.out, "id=\"artifact-"));
	char host[256], want[300];
	assert_int_equal(gethostname(host, sizeof(host)), 0);
	snprintf(want, sizeof(want), "<dt>Host</dt><dd>%s</dd>", host);
	assert_non_null(strstr(r.out, want));
	tu_result_free(&r);

	tu_harvest(&r, "history", "show", "9", "--format", "html", "--db", f->db, NULL);
	assert_int_equal(r.status, 1);
	assert_int_equal(r.out_len, 0);
	assert_non_null(strstr(r.err, "no run 9"));
	tu_result_free(&r);

	/* html is offered by show only */
	tu_harvest(&r, "history", "runs", "--format", "html", "--db", f->db, NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "--format html is not offered here"));
	tu_result_free(&r);
}

static void test_run_html(void **state)
{
	fixture *f = *state;
	tu_result r;
	/* run's artifacts are the files the command makes: it copies the tree */
	tu_mkdir(f->dir, "run");
	char *dir = tu_path(f->dir, "run");
	const char *cmd = ("cp -R \"$0\"/. . && printf '\\033[31mred\\033[0m <b>\\n'; echo oops >&2; exit 3");
	tu_harvest(&r, "run", "--db", f->db, "--format", "html", "--dir", dir, "--", "sh", "-c", cmd,
		   f->tree, NULL);
	free(dir);
	assert_int_equal(r.status, 3);
	assert_page(r.out);
	check_artifacts(r.out);
	/* no StreamChunk or ExecutionResult JSON: the page is the whole output */
	assert_null(strstr(r.out, "stream_chunk"));
	assert_null(strstr(r.out, "execution_result"));
	assert_non_null(strstr(r.out, "<span class=\"c1\">red</span> &lt;b&gt;\n"));
	assert_non_null(strstr(r.out, "oops\n"));
	assert_non_null(strstr(r.out, "<span class=\"badge bad\">exit 3</span>"));
	assert_non_null(strstr(r.out, "harvest \xc2\xb7 run <b>1</b>"));
	char host[256], want[300];
	assert_int_equal(gethostname(host, sizeof(host)), 0);
	snprintf(want, sizeof(want), "<dt>Host</dt><dd>%s</dd>", host);
	assert_non_null(strstr(r.out, want));
	/* The run's own page and the history's page of it show the same start, the recorded
	 * one. */
	const char *started = strstr(r.out, "<dt>Started</dt><dd>");
	assert_non_null(started);
	const char *end = strstr(started, "</dd>");
	assert_non_null(end);
	char *line = strndup(started, (size_t)(end - started));
	assert_non_null(line);
	tu_result h;
	tu_harvest(&h, "history", "show", "1", "--db", f->db, "--format", "html", NULL);
	assert_int_equal(h.status, 0);
	if (!strstr(h.out, line))
		fail_msg("the run's page says %s, the history's page another start", line);
	tu_result_free(&h);
	free(line);
	tu_result_free(&r);

	/* not recorded: no run id */
	tu_harvest(&r, "run", "--db", f->db, "--format", "html", "--no-history", "--dir", f->tree,
		   "--", "true", NULL);
	assert_int_equal(r.status, 0);
	assert_page(r.out);
	assert_non_null(strstr(r.out, "<title>Run \xc2\xb7 harvest</title>"));
	tu_result_free(&r);

	tu_harvest(&r, "run", "--db", f->db, "--format", "text", "--", "true", NULL);
	assert_int_equal(r.status, 125);
	assert_non_null(strstr(r.err, "choose from json,jsonl,html"));
	tu_result_free(&r);
}

static void test_collect_html(void **state)
{
	fixture *f = *state;
	tu_result r;
	tu_harvest(&r, "collect", "--db", f->db, "--format", "html", f->tree, NULL);
	assert_int_equal(r.status, 0);
	assert_page(r.out);
	check_artifacts(r.out);
	assert_non_null(strstr(r.out, "Files collected in <code>"));
	tu_result_free(&r);

	/* something skipped: the page shows it, and the exit status says so */
	tu_harvest(&r, "collect", "--db", f->db, "--format", "html", "--max-file-bytes", "20",
		   f->tree, NULL);
	assert_int_equal(r.status, 1);
	assert_page(r.out);
	/* its heading counts the rows */
	const char *sk = strstr(r.out, "<h2 id=\"skipped\">Skipped <span class=\"count\">");
	assert_non_null(sk);
	long counted = strtol(strchr(sk, '>') + 1 + strlen("Skipped <span class=\"count\">"),
			      NULL, 10);
	long rows = 0;
	for (const char *q = r.out; (q = strstr(q, "<td>too_large</td>")); q++)
		rows++;
	assert_true(rows > 0);
	assert_int_equal(counted, rows);
	tu_result_free(&r);

	tu_harvest(&r, "snapshot", "--db", f->db, "--format", "html", f->tree, NULL);
	assert_int_equal(r.status, 2);
	tu_result_free(&r);

	/* --host is the host the run is recorded on: the page and history show's say it, and
	 * both start and end the run when the collect did; neither gives a duration (a collect
	 * has none in the history: it ran no command). */
	tu_harvest(&r, "collect", "--db", f->db, "--format", "html", "--host", "box<7>", f->tree,
		   NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "<dt>Host</dt><dd>box&lt;7&gt;</dd>"));
	const char *at = strstr(r.out, "Started</dt><dd>");
	assert_non_null(at);
	char started[64], ended[64];
	snprintf(started, sizeof(started), "%.46s", at);
	at = strstr(r.out, "Ended</dt><dd>");
	assert_non_null(at);
	snprintf(ended, sizeof(ended), "%.44s", at);
	assert_null(strstr(r.out, "<dt>Duration</dt>"));
	tu_result_free(&r);
	tu_harvest(&r, "history", "show", "3", "--db", f->db, "--format", "html", NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "<dt>Host</dt><dd>box&lt;7&gt;</dd>"));
	assert_non_null(strstr(r.out, started));
	if (!strstr(r.out, ended))
		fail_msg("the collect's page said %s; history show's does not", ended);
	assert_null(strstr(r.out, "<dt>Duration</dt>"));
	tu_result_free(&r);
}

/* The skipped list shows its first 1,000 rows and says how many more there are, in the
 * collect's page and in history show's. */
static void test_skipped_rows(void **state)
{
	fixture *f = *state;
	char *many = tu_path(f->dir, "many");
	tu_mkdir(f->dir, "many");
	for (int i = 0; i < 1003; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%04d", i);
		tu_write(many, name, "x", 1);
	}
	tu_result r;
	tu_harvest(&r, "collect", "--db", f->db, "--format", "html", "--max-files", "1", many, NULL);
	assert_int_equal(r.status, 1);
	assert_page(r.out);
	for (int show = 0; show < 2; show++) {
		if (show) {
			tu_result_free(&r);
			tu_harvest(&r, "history", "show", "1", "--db", f->db, "--format", "html", NULL);
			assert_int_equal(r.status, 0);
			assert_page(r.out);
		}
		size_t rows = 0;
		for (const char *p = r.out; (p = strstr(p, "<tr><td class=\"mono\">f")); p++)
			rows++;
		assert_int_equal(rows, 1000);
		/* The page is all that was printed: the rest are in the run's history. */
		assert_non_null(strstr(r.out, ">and 2 more: <code class=\"cmd\">harvest history show --db "));
		assert_non_null(strstr(r.out, "h.db&#39; 1</code> lists them all</td>"));
	}
	tu_result_free(&r);
	free(many);
}

/* A content too large to embed is offered as a `harvest history get` command, which names
 * the database the page came from: --db as given, made absolute (the page may be read from
 * another directory), or $HARVEST_DB; none when the default database was used. */
static void test_fetch_command_names_db(void **state)
{
	fixture *f = *state;
	tu_mkdir(f->dir, "big");
	char *big = tu_path(f->dir, "big/zeros.bin");
	FILE *fp = fopen(big, "w");
	assert_non_null(fp);
	assert_int_equal(ftruncate(fileno(fp), (11 << 20)), 0); /* over HV_PAGE_EMBED_MAX */
	assert_int_equal(fclose(fp), 0);
	free(big);
	tu_result r;
	const char *args[] = {"collect", "--db", "it's.db", "--format", "html", "big", NULL};
	tu_harvestv(&r, f->dir, NULL, args);
	assert_int_equal(r.status, 0);
	assert_page(r.out);
	char want[PATH_MAX + 64];
	snprintf(want, sizeof(want), "harvest history get --db &#39;%s/it&#39;\\&#39;&#39;s.db&#39; ",
		 f->dir);
	if (!strstr(r.out, want))
		fail_msg("no %s in the collect's page", want);
	tu_result_free(&r);
	/* the history's page of it, the database named by $HARVEST_DB */
	char *db = tu_path(f->dir, "it's.db");
	assert_int_equal(setenv("HARVEST_DB", db, 1), 0);
	tu_harvest(&r, "history", "show", "1", "--format", "html", NULL);
	assert_int_equal(unsetenv("HARVEST_DB"), 0);
	free(db);
	assert_int_equal(r.status, 0);
	assert_page(r.out);
	if (!strstr(r.out, want))
		fail_msg("no %s in the history's page", want);
	assert_non_null(strstr(r.out, "&#39;s.db&#39; 1 -o &#39;zeros.bin&#39;</code>"));
	tu_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_history_show_html, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_html, setup, teardown),
		cmocka_unit_test_setup_teardown(test_collect_html, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skipped_rows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fetch_command_names_db, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
