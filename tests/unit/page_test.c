/* The HTML page of a run: the CSP tag, escaping of hostile names and output, CSV parsing, the
 * 200-line cut, ANSI colour codes, no script whatever the artifacts hold, the embed cap, and
 * the page of a history run read from the store. */
#include "testutil.h"

#include "harvest/page.h"
#include "harvest/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct sink {
	char *p;
	size_t n;
	int fail_after; /* > 0: the write after this many fails */
} sink;

static int sink_write(void *ctx, const void *data, size_t len)
{
	sink *s = ctx;
	if (s->fail_after > 0 && --s->fail_after == 0) {
		errno = ENOSPC;
		return -1;
	}
	s->p = tu_xrealloc(s->p, s->n + len + 1);
	memcpy(s->p + s->n, data, len);
	s->n += len;
	s->p[s->n] = '\0';
	return 0;
}

typedef struct art {
	const char *path;
	const char *mime;
	const char *content; /* NUL-terminated unless len is given */
	size_t len;
} art;

/* The page of a run (run_id 7 unless run_id < 0: not recorded) that produced arts. */
static char *page_of(const hv_run_row *base, const art *arts, size_t n, const hv_page_opts *o)
{
	hv_collection c = {.n_files = n, .root = (char *)"/tmp/out"};
	c.files = calloc(n ? n : 1, sizeof(*c.files));
	for (size_t i = 0; i < n; i++) {
		hv_output_file *f = &c.files[i];
		f->path = (char *)arts[i].path;
		f->path_len = strlen(arts[i].path);
		const char *slash = strrchr(arts[i].path, '/');
		f->name = slash ? slash + 1 : arts[i].path;
		f->name_len = strlen(f->name);
		f->mime_type = (char *)arts[i].mime;
		if (arts[i].content) {
			f->content_len = arts[i].len ? arts[i].len : strlen(arts[i].content);
			f->content = (unsigned char *)arts[i].content;
		}
		f->size = f->content_len;
		tu_sha256_hex(arts[i].content ? arts[i].content : "", f->content_len, f->sha256);
	}
	hv_run_row r = {
		.run_id = 7,
		.command_json = "[\"python3\",\"plot.py\"]",
		.dir = "/tmp/out",
		.dir_len = 8,
		.started_at_ns = INT64_C(1764547200000000000),
		.ended = true,
		.ended_at_ns = INT64_C(1764547201000000000),
		.has_exit_code = true,
		.duration_ms = 1000,
	};
	if (base)
		r = *base;
	sink s = {0};
	assert_int_equal(hv_page_write_collection(&r, &c, o, sink_write, &s), HV_OK);
	free(c.files);
	assert_non_null(s.p);
	return s.p;
}

static void assert_no_script(const char *page)
{
	for (const char *p = page; *p; p++)
		assert_false(strncasecmp(p, "<script", 7) == 0);
	assert_null(strchr(page, '\x1b'));
}

static void test_csp_first(void **state)
{
	(void)state;
	char *p = page_of(NULL, NULL, 0, NULL);
	const char *csp = strstr(p, "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
				    "'none'; img-src data:; style-src 'unsafe-inline'\">");
	assert_non_null(csp);
	/* before anything else in the head, after the charset only */
	assert_true(csp < strstr(p, "<title>"));
	assert_true(csp < strstr(p, "<style>"));
	assert_null(strstr(csp + 40, "Content-Security-Policy"));
	assert_non_null(strstr(p, "No files were produced."));
	assert_non_null(strstr(p, "</html>\n"));
	assert_no_script(p);
	free(p);
}

static void test_hostile_names(void **state)
{
	(void)state;
	hv_run_row r = {
		.run_id = 3,
		.label = "<b>lab</b>",
		.label_len = 10,
		.command_json = "[\"sh\",\"-c\",\"echo 'hi' <x>\"]",
		.dir = "/tmp/<d>",
		.dir_len = 8,
		.ended = true,
		.duration_ms = -1,
	};
	art a[] = {
		{"<img src=x onerror=alert(1)>.txt", "text/plain", "<script>alert(1)</script>\n", 0},
		{"d\"ir/a'b&c\x1b[31m\xff.txt", "text/plain", "x", 0},
	};
	hv_page_opts o = {.host = "<host>", .deleted = (const char *[]){"gone/<i>.txt"}, .n_deleted = 1};
	char *p = page_of(&r, a, 2, &o);
	assert_null(strstr(p, "<img src=x"));
	assert_non_null(strstr(p, "&lt;img src=x onerror=alert(1)&gt;.txt"));
	assert_non_null(strstr(p, "&lt;script&gt;alert(1)&lt;/script&gt;"));
	assert_non_null(strstr(p, "<span class=\"dir\">d&quot;ir/</span>a&#39;b&amp;c\\x1b[31m\\xff.txt"));
	assert_non_null(strstr(p, "&lt;b&gt;lab&lt;/b&gt;"));
	assert_non_null(strstr(p, "<dt>Host</dt><dd>&lt;host&gt;</dd>"));
	assert_non_null(strstr(p, "/tmp/&lt;d&gt;"));
	assert_non_null(strstr(p, "<li>gone/&lt;i&gt;.txt</li>"));
	/* the command as shell words, quoted where needed */
	assert_non_null(strstr(p, "<code>sh -c &#39;echo &#39;\\&#39;&#39;hi&#39;\\&#39;&#39; &lt;x&gt;&#39;</code>"));
	assert_no_script(p);
	free(p);
	/* Backslashes and bytes shown as escapes: in bash's $'...', which reads them back, so
	 * the line pasted into bash is the same argv; a quote alone: in '...'. */
	r.command_json = "[\"printf\",\"a\\\\tb|\\\\n\",\"it's\",\"l\\nm\"]";
	p = page_of(&r, NULL, 0, NULL);
	assert_non_null(strstr(p, "<code>printf $&#39;a\\\\tb|\\\\n&#39; &#39;it&#39;\\&#39;&#39;s&#39; "
				  "$&#39;l\\x0am&#39;</code>"));
	free(p);
	/* First on the line, a reserved word or NAME=VALUE is not a command's name to bash
	 * (`time -f %e true` would be its own `time`): quoted there, plain elsewhere. */
	static const char *const first[][2] = {
		{"[\"time\",\"-f\",\"%e\",\"true\"]", "<code>&#39;time&#39; -f %e true</code>"},
		{"[\"a=b\",\"printf\",\"X\"]", "<code>&#39;a=b&#39; printf X</code>"},
		{"[\"_9=\"]", "<code>&#39;_9=&#39;</code>"},
		{"[\"if\",\"x\"]", "<code>&#39;if&#39; x</code>"},
		{"[\"function\"]", "<code>&#39;function&#39;</code>"},
		{"[\"echo\",\"time\",\"a=b\",\"if\"]", "<code>echo time a=b if</code>"},
		{"[\"timex\",\"9a=b\"]", "<code>timex 9a=b</code>"},
		{"[\"9a=b\"]", "<code>9a=b</code>"},
		{"[\"=x\"]", "<code>=x</code>"},
	};
	for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
		r.command_json = first[i][0];
		p = page_of(&r, NULL, 0, NULL);
		if (!strstr(p, first[i][1]))
			fail_msg("%s: no %s in the page", first[i][0], first[i][1]);
		free(p);
	}
}

static void test_no_script_whatever_the_artifacts(void **state)
{
	(void)state;
	static const char svg[] = "<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"x()\">"
				  "<script>top.x=1</script></svg>";
	art a[] = {
		{"page.html", "text/html", "<html><script>top.x=1</script></html>", 0},
		{"evil.svg", "image/svg+xml", svg, 0},
		{"notes.md", "text/html", "# hi <SCRIPT>x</SCRIPT>", 0},
		{"x.csv", "text/csv", "<script>,\"<script>\"\n", 0},
		{"<script>.json", "application/json", "{\"<script>\": 1}", 0},
	};
	char *p = page_of(NULL, a, 5, NULL);
	assert_no_script(p);
	/* the HTML document is a download, the SVG only an <img> of base64 */
	assert_non_null(strstr(p, "<a class=\"dl\" download=\"page.html\" "
				  "href=\"data:application/octet-stream;base64,"));
	assert_non_null(strstr(p, "src=\"data:image/svg+xml;base64,PHN2Zy"));
	assert_null(strstr(p, "<svg"));
	/* Markdown libmagic calls text/html: escaped text */
	assert_non_null(strstr(p, "<pre># hi &lt;SCRIPT&gt;x&lt;/SCRIPT&gt;</pre>"));
	free(p);
}

static void test_csv(void **state)
{
	(void)state;
	art a[] = {
		{"a.csv", "text/csv",
		 "h1,h2,h3\r\n\"a,b\",\"say \"\"hi\"\"\",\"multi\r\nline\"\nx,,\"\"\n<&>,last", 0},
		{"b.tsv", "text/tab-separated-values", "k\tv\n\"t\tab\"\t2\n", 0},
		{"open.csv", "text/csv; charset=utf-8", "h\n\"never closed,\nstill", 0},
	};
	char *p = page_of(NULL, a, 3, NULL);
	assert_non_null(strstr(p, "<thead><tr><th>h1</th><th>h2</th><th>h3</th></tr></thead><tbody>\n"
				  "<tr><td>a,b</td><td>say &quot;hi&quot;</td><td>multi\nline</td></tr>\n"
				  "<tr><td>x</td><td></td><td></td></tr>\n"
				  "<tr><td>&lt;&amp;&gt;</td><td>last</td></tr>\n</tbody>"));
	assert_non_null(strstr(p, "<th>k</th><th>v</th></tr></thead><tbody>\n"
				  "<tr><td>t\tab</td><td>2</td></tr>\n</tbody>"));
	assert_non_null(strstr(p, "<tr><td>never closed,\nstill</td></tr>"));
	free(p);
}

static void test_csv_first_50_rows(void **state)
{
	(void)state;
	char *csv = tu_xmalloc(100 * 16);
	size_t n = 0;
	for (int i = 0; i < 100; i++)
		n += (size_t)sprintf(csv + n, "r%d,\"%d\n\"\n", i, i);
	art a[] = {{"big.csv", "text/csv", csv, 0}};
	char *p = page_of(NULL, a, 1, NULL);
	assert_non_null(strstr(p, "<th>r0</th>"));
	assert_non_null(strstr(p, "<td>r49</td><td>49\n</td>"));
	assert_null(strstr(p, "r50"));
	assert_non_null(strstr(p, "The first 50 rows are shown."));
	free(p);
	free(csv);
}

static void test_200_lines(void **state)
{
	(void)state;
	char *txt = tu_xmalloc(300 * 16);
	size_t n = 0;
	for (int i = 1; i <= 300; i++)
		n += (size_t)sprintf(txt + n, "line %d\n", i);
	art a[] = {
		{"log.txt", "text/plain", txt, 0},
		{"short.txt", "text/plain", "one\r\ntwo\tcol\x07\n", 0},
	};
	char *p = page_of(NULL, a, 2, NULL);
	assert_non_null(strstr(p, "line 199\nline 200\n</pre>"));
	assert_null(strstr(p, "line 201"));
	assert_non_null(strstr(p, "The first 200 of 300 lines are shown."));
	/* CRLF as a newline, tabs kept, other controls visible */
	assert_non_null(strstr(p, "<pre>one\ntwo\tcol<span class=\"x\">\\x07</span>\n</pre>"));
	free(p);
	free(txt);
}

/* A run that has not ended: its output and files are not known yet, not "empty" or "none". */
static void test_not_ended(void **state)
{
	(void)state;
	hv_run_row r = {.run_id = 9, .command_json = "[\"sleep\",\"4\"]", .dir = "/", .dir_len = 1,
			.started_at_ns = INT64_C(1764547200000000000), .duration_ms = -1};
	char *p = page_of(&r, NULL, 0, NULL);
	assert_non_null(strstr(p, "<span class=\"badge warn\">not finished</span>"));
	assert_non_null(strstr(p, "The run has not ended: its output and the files it produced"));
	assert_non_null(strstr(p, "None yet: the run has not ended."));
	assert_null(strstr(p, "empty"));
	assert_null(strstr(p, "No files were produced."));
	free(p);
	r.ended = true;
	r.ended_at_ns = r.started_at_ns + 1;
	p = page_of(&r, NULL, 0, NULL);
	assert_non_null(strstr(p, "No files were produced."));
	assert_null(strstr(p, "has not ended"));
	free(p);
}

static void test_ansi(void **state)
{
	(void)state;
	static const char out[] = "\x1b[38;99999999999999999999;1;31mred bold\x1b[0m plain \x1b[2K\x1b[38;5;208mx\x1b[39m"
				  "\x1b]0;title\x07y\x1b]8;;http://e\x1b\\z\x1b[93m<hi>\x1b(Bq";
	hv_run_row r = {
		.run_id = 1,
		.command_json = "[\"x\"]",
		.dir = "/",
		.dir_len = 1,
		.ended = true,
		.has_exit_code = true,
		.exit_code = 2,
		.duration_ms = 5,
		.stdout_data = out,
		.stdout_len = sizeof(out) - 1,
		.end_reason = "not_recorded",
		.stderr_data = "\x1b[33mwarn\x1b[m",
		.stderr_len = 12,
	};
	char *p = page_of(&r, NULL, 0, NULL);
	assert_non_null(strstr(p, "<pre class=\"term\"><span class=\"c1 b\">red bold</span> plain "
				  "xyz<span class=\"c11\">&lt;hi&gt;q</span></pre>"));
	assert_non_null(strstr(p, "<pre class=\"term\"><span class=\"c3\">warn</span></pre>"));
	assert_non_null(strstr(p, "<span class=\"badge bad\">exit 2</span>"));
	assert_non_null(strstr(p, "<span class=\"badge warn\">not recorded</span>"));
	assert_no_script(p);
	free(p);
	/* A stray ESC before a newline or before another escape goes alone: the newline stays,
	 * and the next sequence is read (its colour applied, not shown as "[31m"). */
	static const char stray[] = "line1\x1b\nline2\nline3\x1b\x1b[31mred\x1b[0m\n";
	r.stdout_data = stray;
	r.stdout_len = sizeof(stray) - 1;
	p = page_of(&r, NULL, 0, NULL);
	if (!strstr(p, "<pre class=\"term\">line1\nline2\nline3<span class=\"c1\">red</span>\n</pre>"))
		fail_msg("stray ESC: %s", strstr(p, "line1") ? strstr(p, "line1") : p);
	free(p);
	/* Backgrounds (40-47, 100-107, 49), and the first 16 of the 256 colours in both places;
	 * another of the 256, and an RGB colour, leave the text as it was. */
	static const char bg[] = "\x1b[41mA\x1b[49m \x1b[38;5;2;48;5;9mB\x1b[0m "
				 "\x1b[38;5;200mC\x1b[48;2;1;2;3mD\x1b[103mE\x1b[m\n";
	r.stdout_data = bg;
	r.stdout_len = sizeof(bg) - 1;
	p = page_of(&r, NULL, 0, NULL);
	if (!strstr(p, "<pre class=\"term\"><span class=\"g1\">A</span> <span class=\"c2 g9\">B</span>"
		       " CD<span class=\"g11\">E</span>\n</pre>"))
		fail_msg("backgrounds: %s", strstr(p, "term") ? strstr(p, "term") : p);
	assert_non_null(strstr(p, ".g1,.g9{background:var(--t1)}"));
	free(p);
	/* An OSC that is not ended on its line (no BEL, no ESC \\) loses its introducer only:
	 * what follows it is shown, never hidden (a title set, then the rest of the output). */
	static const char osc[] = "before \x1b]0;x\nrm -rf / was here\nSECRET\n\x1bPq";
	r.stdout_data = osc;
	r.stdout_len = sizeof(osc) - 1;
	p = page_of(&r, NULL, 0, NULL);
	assert_non_null(strstr(p, "<pre class=\"term\">before 0;x\nrm -rf / was here\nSECRET\nq</pre>"));
	free(p);
}

/* C1 controls and bytes that are not UTF-8, also at the very end of a name. */
static void test_bytes(void **state)
{
	(void)state;
	art a[] = {
		{"c1\xc2\x9b[31m.txt", "text/plain", "x", 0},
		{"bad\xc2<b>.txt", "text/plain", "\xc3\xa9t\xc3\xa9 \\xe2 \xe2\x82", 0},
		{"end\xc2", "text/plain", "y", 0},
	};
	char *p = page_of(NULL, a, 3, NULL);
	assert_non_null(strstr(p, "c1\\xc2\\x9b[31m.txt"));
	assert_non_null(strstr(p, "bad\\xc2&lt;b&gt;.txt"));
	assert_non_null(strstr(p, "end\\xc2</h3>"));
	/* in text, the bytes' escapes are set apart; the same characters written stay plain */
	assert_non_null(strstr(p, "<pre>\xc3\xa9t\xc3\xa9 \\xe2 <span class=\"x\">\\xe2</span>"
				  "<span class=\"x\">\\x82</span></pre>"));
	free(p);
}

/* A page stays small enough for a browser: a long stdout shows its first 64 KiB and last
 * 192 KiB, cut at lines (page_cli_test: the skipped list its first 1,000 rows); and once
 * the page is over 32 MiB, the artifacts after it their facts and the command that fetches
 * them, not their contents. */
static void test_bounds(void **state)
{
	(void)state;
	enum { LINES = 300000 };
	char *out = tu_xmalloc((size_t)LINES * 16);
	size_t n = 0;
	for (int i = 0; i < LINES; i++)
		n += (size_t)sprintf(out + n, "line %d\n", i);
	hv_run_row r = {
		.run_id = 7, .command_json = "[\"x\"]", .dir = "/", .dir_len = 1, .ended = true,
		.has_exit_code = true, .stdout_data = out, .stdout_len = n,
	};
	char *p = page_of(&r, NULL, 0, NULL);
	assert_non_null(strstr(p, "<pre class=\"term\">line 0\nline 1\n"));
	assert_non_null(strstr(p, "\nline 299999\n</pre>"));
	assert_null(strstr(p, "\nline 150000\n"));
	const char *note = strstr(p, " not shown here: the first 64 KiB and the last 192 KiB are."
				     "</p><pre class=\"term\">line ");
	assert_non_null(note);
	/* the head ends with a whole line */
	const char *head_end = strstr(p, "</pre><p class=\"note\">");
	assert_true(head_end && head_end < note && head_end[-1] == '\n');
	assert_true(strlen(p) < 2u << 20);
	free(p);

	/* No newline and no UTF-8 to cut at: the cut is where the bytes say, not at 0. */
	memset(out, 0x80, 300000);
	r.stdout_len = 300000;
	p = page_of(&r, NULL, 0, NULL);
	assert_non_null(strstr(p, " not shown here: the first 64 KiB and the last 192 KiB are."));
	free(p);

	/* No newline, coloured: the tail starts after the escape sequence its cut falls inside
	 * (shown as "31m" text otherwise). 7-byte units "\x1b[31mab", the cut 2 bytes in. */
	n = 64u << 10;
	while ((n + 5) % 7 != 0 || n + (192u << 10) < 300000)
		n++;
	for (size_t i = 0; i < n + (192u << 10); i += 7)
		memcpy(out + i, "\x1b[31mab", 7);
	r.stdout_len = n + (192u << 10);
	assert_int_equal((r.stdout_len - (192u << 10)) % 7, 2);
	p = page_of(&r, NULL, 0, NULL);
	const char *t = strstr(p, " are.</p><pre class=\"term\">");
	assert_non_null(t);
	t += strlen(" are.</p><pre class=\"term\">");
	assert_true(!strncmp(t, "ab<span class=\"c1\">ab", strlen("ab<span class=\"c1\">ab")));
	free(p);

	/* The deleted list: 1,000 paths, then how many more (the heading has the count). */
	enum { GONE = 1005 };
	const char **gone = tu_xmalloc(GONE * sizeof(*gone));
	char (*gnames)[16] = tu_xmalloc(GONE * sizeof(*gnames));
	for (int i = 0; i < GONE; i++) {
		snprintf(gnames[i], sizeof(gnames[i]), "g%04d", i);
		gone[i] = gnames[i];
	}
	hv_page_opts go = {.deleted = gone, .n_deleted = GONE};
	p = page_of(NULL, NULL, 0, &go);
	assert_non_null(strstr(p, "Deleted <span class=\"count\">1005</span>"));
	assert_non_null(strstr(p, "<li>g0999</li><li class=\"note\">and 5 more: <code "
				  "class=\"cmd\">harvest history show 7</code> lists them all</li></ul>"));
	assert_null(strstr(p, "g1000"));
	free(p);
	free(gone);
	free(gnames);

	/* A table of long cells stops at 256 KiB of the file: 100 cells of 2,000 bytes a record,
	 * so two records, not 50 (30 MiB of cells, escaped up to six times over). */
	size_t clen = 50u * 100 * 2001;
	char *csv = tu_xmalloc(clen + 1);
	for (size_t i = 0; i < clen; i++)
		csv[i] = i % 2001 == 2000 ? ((i / 2001) % 100 == 99 ? '\n' : ',') : '<';
	csv[clen] = '\0';
	art big[] = {{"wide.csv", "text/csv", csv, clen}};
	p = page_of(NULL, big, 1, NULL);
	assert_non_null(strstr(p, "<p class=\"note\">The first 2 rows are shown.</p>"));
	assert_true(strlen(p) < 4u << 20);
	free(p);
	free(csv);

	/* 30 text files of quotes: each shown cut at 256 KiB, 1.5 MiB escaped. */
	enum { ARTS = 30, LEN = 512 << 10 };
	char *q = tu_xmalloc(LEN + 1);
	for (size_t i = 0; i < LEN; i++)
		q[i] = (i % 1000 == 999) ? '\n' : '"';
	q[LEN] = '\0';
	art a[ARTS];
	char names[ARTS][16];
	for (int i = 0; i < ARTS; i++) {
		snprintf(names[i], sizeof(names[i]), "q%02d.txt", i);
		a[i] = (art){names[i], "text/plain", q, LEN};
	}
	p = page_of(NULL, a, ARTS, NULL);
	size_t len = strlen(p);
	assert_true(len > (32u << 20) && len < (36u << 20));
	const char *first = strstr(p, "Not shown: the page is over 32 MiB already; fetch it with:");
	assert_non_null(first);
	/* every artifact after the first one not shown is not shown either, but is listed */
	assert_non_null(strstr(first, "<h3>q29.txt</h3>"));
	assert_null(strstr(first, "&quot;&quot;"));
	assert_non_null(strstr(first, "harvest history get "));
	free(p);
	free(q);
	free(out);
}

/* Characters that reorder the text around them are shown as their bytes, in names (the
 * heading and the download button) and in text alike, so "d<RLO>nib.exe" does not read as
 * "dexe.bin"; other characters of the same blocks are kept. */
static void test_bidi_controls(void **state)
{
	(void)state;
	art a[] = {
		{"d\xe2\x80\xaenib.exe", "application/x-ms-dos-executable", "MZ", 0},
		{"t\xe2\x81\xa7\xe2\x81\xa9.txt", "text/plain",
		 "a\xe2\x80\x8f\xe2\x80\x8e\xd8\x9c\xe2\x80\xaa\xe2\x81\xa6" "b \xe2\x80\x94 \xe2\x80\xa9 \xd8\xa7", 0},
	};
	char *p = page_of(NULL, a, 2, NULL);
	assert_null(strstr(p, "\xe2\x80\xae"));
	assert_non_null(strstr(p, "<h3>d\\xe2\\x80\\xaenib.exe</h3>"));
	/* the name to save under: the character as one '_' (a browser's own choice, too) */
	assert_non_null(strstr(p, "download=\"d_nib.exe\""));
	assert_non_null(strstr(p, "<h3>t\\xe2\\x81\\xa7\\xe2\\x81\\xa9.txt</h3>"));
	assert_non_null(strstr(p, "<pre>a<span class=\"x\">\\xe2\\x80\\x8f</span>"
				  "<span class=\"x\">\\xe2\\x80\\x8e</span><span class=\"x\">\\xd8\\x9c</span>"
				  "<span class=\"x\">\\xe2\\x80\\xaa</span><span class=\"x\">\\xe2\\x81\\xa6</span>"
				  "b \xe2\x80\x94 \xe2\x80\xa9 \xd8\xa7</pre>"));
	free(p);
}

/* A download keeps a name's backslash as one (the heading shows it doubled, so its \xNN is
 * not taken for a byte) and saves a control character or a byte that is not UTF-8 as '_'. */
static void test_download_name(void **state)
{
	(void)state;
	art a[] = {{"back\\slash\x01\xff.bin", "application/octet-stream", "xyz", 0}};
	char *p = page_of(NULL, a, 1, NULL);
	assert_non_null(strstr(p, "<h3>back\\\\slash\\x01\\xff.bin</h3>"));
	assert_non_null(strstr(p, "download=\"back\\slash__.bin\""));
	free(p);
}

/* The deleted files: the caller's list when it gives one, else the collection's when it was
 * compared with a snapshot; none, no section. */
static void test_deleted(void **state)
{
	(void)state;
	hv_deleted_file gone[] = {{.path = (char *)"a/old.csv", .path_len = 9},
				  {.path = (char *)"b<x>", .path_len = 4}};
	hv_collection c = {.root = (char *)"/tmp/out", .compared = true, .deleted = gone,
			   .n_deleted = 2};
	hv_run_row r = {.run_id = 0, .command_json = "[\"x\"]", .dir = "/tmp/out", .dir_len = 8,
			.ended = true, .has_exit_code = true};
	sink s = {0};
	assert_int_equal(hv_page_write_collection(&r, &c, NULL, sink_write, &s), HV_OK);
	assert_non_null(strstr(s.p, "<h2 id=\"deleted\">Deleted <span class=\"count\">2</span>"));
	assert_non_null(strstr(s.p, "<li>a/old.csv</li><li>b&lt;x&gt;</li></ul>"));
	free(s.p);

	const char *mine[] = {"only.txt"};
	hv_page_opts o = {.deleted = mine, .n_deleted = 1};
	s = (sink){0};
	assert_int_equal(hv_page_write_collection(&r, &c, &o, sink_write, &s), HV_OK);
	assert_non_null(strstr(s.p, "<span class=\"count\">1</span></h2>\n<div class=\"card\">"
				    "<ul class=\"mono\"><li>only.txt</li></ul>"));
	assert_null(strstr(s.p, "old.csv"));
	free(s.p);

	/* Past 1,000 paths (test_bounds counts them), one line says where the rest are: the
	 * page is all a --format html command prints, so the run's `history show` (with the
	 * page's --db), or the same command as JSON when the run is not recorded. */
	hv_deleted_file *many = tu_xmalloc(1003 * sizeof(*many));
	for (size_t i = 0; i < 1003; i++)
		many[i] = (hv_deleted_file){.path = (char *)"g", .path_len = 1};
	hv_collection m = {.root = (char *)"/tmp/out", .compared = true, .deleted = many,
			   .n_deleted = 1003};
	for (int recorded = 0; recorded < 2; recorded++) {
		r.run_id = recorded ? 12 : 0;
		hv_page_opts mo = {.db = recorded ? "/srv/h.db" : NULL};
		s = (sink){0};
		assert_int_equal(hv_page_write_collection(&r, &m, &mo, sink_write, &s), HV_OK);
		const char *want = recorded ? "<li class=\"note\">and 3 more: <code class=\"cmd\">harvest "
					      "history show --db &#39;/srv/h.db&#39; 12</code> lists "
					      "them all</li>"
					    : "<li class=\"note\">and 3 more: the same command with "
					      "<code>--format json</code> lists them all</li>";
		if (!strstr(s.p, want))
			fail_msg("no %s in the page", want);
		free(s.p);
	}
	free(many);
	r.run_id = 0;

	c.compared = false; /* not compared: nothing is known deleted */
	s = (sink){0};
	assert_int_equal(hv_page_write_collection(&r, &c, NULL, sink_write, &s), HV_OK);
	assert_null(strstr(s.p, "id=\"deleted\""));
	free(s.p);
}

/* A byte order mark and blank lines before the header are not part of it; a lone CR ends a
 * record as LF and CRLF do; a cell cut at 2,000 bytes keeps its last character whole; an
 * empty file says so rather than offer nothing to download. */
static void test_csv_edges(void **state)
{
	(void)state;
	char *cell = tu_xmalloc(3 * 700 + 16);
	size_t n = (size_t)sprintf(cell, "h\nx");
	for (int i = 0; i < 700; i++) /* 1 + 3 * 666 = 1999: the 667th character is cut */
		n += (size_t)sprintf(cell + n, "\xe6\x97\xa5");
	sprintf(cell + n, "\n");
	art a[] = {
		{"bom.csv", "text/csv", "\xef\xbb\xbf\r\n\nname,n\r\na,1\r\n", 0},
		{"mac.csv", "text/csv", "k,v\rp,1\rq,2\r", 0},
		{"cut.csv", "text/csv", cell, 0},
		{"none.bin", "application/octet-stream", "", 0},
		{"open.csv", "text/csv", "a,b\n1,2\n\"x,y\nz\n", 0},
	};
	char *p = page_of(NULL, a, 5, NULL);
	/* A quote never closed runs to the end, and the page says so (once: the other files'
	 * quotes are closed). */
	const char *open = strstr(p, "<h3>open.csv</h3>");
	assert_non_null(open);
	assert_non_null(strstr(open, "<tr><td>x,y\nz\n</td></tr>\n</tbody></table></div><p class=\"note\">"
				     "Record 3 opens a quote that is never closed: the rest of the file "
				     "is its last cell.</p>"));
	assert_ptr_equal(strstr(p, "opens a quote"), strstr(open, "opens a quote"));
	assert_non_null(strstr(p, "<thead><tr><th>name</th><th>n</th></tr></thead><tbody>\n"
				  "<tr><td>a</td><td>1</td></tr>"));
	assert_non_null(strstr(p, "<thead><tr><th>k</th><th>v</th></tr></thead><tbody>\n"
				  "<tr><td>p</td><td>1</td></tr>\n<tr><td>q</td><td>2</td></tr>"));
	const char *td = strstr(p, "<td>x\xe6\x97\xa5");
	assert_non_null(td);
	const char *end = strstr(td, "</td>");
	assert_non_null(end);
	/* 666 whole characters, then the ellipsis: no \xNN of a split one */
	assert_int_equal(end - td, 4 + 1 + 3 * 666 + 3);
	assert_memory_equal(end - 3, "\xe2\x80\xa6", 3);
	assert_non_null(strstr(p, "<h3>none.bin</h3>"));
	assert_non_null(strstr(strstr(p, "<h3>none.bin</h3>"), "<p class=\"note\">empty</p>"));
	assert_null(strstr(p, "download=\"none.bin\""));
	free(p);
	free(cell);
}

/* A record of 150 columns shows 100 and an ellipsis; the next record starts a new row. */
static void test_csv_columns(void **state)
{
	(void)state;
	char *csv = tu_xmalloc(150 * 8 + 64);
	size_t n = 0;
	for (int i = 0; i < 150; i++)
		n += (size_t)sprintf(csv + n, "%s\"c%d\"", i ? "," : "", i);
	n += (size_t)sprintf(csv + n, "\nnext,row\n");
	art a[] = {{"wide.csv", "text/csv", csv, 0}};
	char *p = page_of(NULL, a, 1, NULL);
	assert_non_null(strstr(p, "<th>c99</th><th>\xe2\x80\xa6</th></tr></thead>"));
	assert_null(strstr(p, "c100"));
	assert_non_null(strstr(p, "<tr><td>next</td><td>row</td></tr>"));
	free(p);
	free(csv);
}

static void test_embed_cap(void **state)
{
	(void)state;
	char big[200];
	memset(big, 'x', sizeof(big));
	art a[] = {
		{"dir/report one.pdf", "application/pdf", big, sizeof(big)},
		{"small.bin", "application/octet-stream", big, 100},
		{"pic.png", "image/png", big, 150},
	};
	hv_page_opts o = {.embed_max = 100};
	char *p = page_of(NULL, a, 3, &o);
	char sha[65];
	tu_sha256_hex(big, sizeof(big), sha);
	char want[160];
	snprintf(want, sizeof(want), "harvest history get %s -o &#39;report one.pdf&#39;", sha);
	assert_non_null(strstr(p, want));
	assert_non_null(strstr(p, "Too large to embed (over 100 B); fetch it with:"));
	free(p);
	/* A name the page shows with escapes (a backslash, a control character, a quote
	 * beside them) is offered in $'...', where the shell reads the escapes back into the
	 * name's bytes: `a\b\nit's.bin`. */
	art odd[] = {{"dir/a\\b\nit's.bin", "application/octet-stream", big, sizeof(big)}};
	p = page_of(NULL, odd, 1, &o);
	snprintf(want, sizeof(want), "harvest history get %s -o $&#39;a\\\\b\\x0ait\\&#39;s.bin&#39;",
		 sha);
	if (!strstr(p, want))
		fail_msg("no %s in the page", want);
	free(p);
	/* The database named with --db: a path as it is, a URI without its password. */
	o.db = "/srv/h d.db";
	p = page_of(NULL, a, 1, &o);
	snprintf(want, sizeof(want), "harvest history get --db &#39;/srv/h d.db&#39; %s -o ", sha);
	if (!strstr(p, want))
		fail_msg("no %s in the page", want);
	free(p);
	o.db = "postgresql://ann:s3cret@db.example/h?password=x";
	p = page_of(NULL, a, 1, &o);
	assert_non_null(strstr(p, "--db &#39;postgresql://ann:***@db.example/h?password=***&#39; "));
	assert_null(strstr(p, "s3cret"));
	free(p);
	o.db = NULL;
	p = page_of(NULL, a, 3, &o);
	/* at the cap: embedded */
	assert_non_null(strstr(p, "download=\"small.bin\" href=\"data:application/octet-stream;base64,eHh4"));
	assert_null(strstr(p, "data:image/png"));
	free(p);

	/* A text or CSV file over the cap: its start is shown, and the command fetches it all. */
	char lines[300];
	for (size_t i = 0; i < sizeof(lines); i++)
		lines[i] = i % 10 == 9 ? '\n' : 'a';
	art texts[] = {{"log.txt", "text/plain", lines, sizeof(lines)},
		       {"t.csv", "text/csv", lines, sizeof(lines)},
		       {"short.txt", "text/plain", lines, 50}};
	p = page_of(NULL, texts, 3, &o);
	assert_non_null(strstr(p, "<pre>aaaaaaaaa\naaaaaaaaa\n"));
	for (size_t i = 0; i < 2; i++) {
		tu_sha256_hex(lines, sizeof(lines), sha);
		snprintf(want, sizeof(want), "harvest history get %s -o &#39;%s&#39;", sha,
			 texts[i].path);
		if (!strstr(p, want))
			fail_msg("no %s in the page", want);
	}
	assert_null(strstr(p, "-o &#39;short.txt&#39;"));
	free(p);
	/* `-o -` would be standard output: a file named "-" is saved as ./- */
	art dash[] = {{"d/-", "application/pdf", big, sizeof(big)}};
	p = page_of(NULL, dash, 1, &o);
	tu_sha256_hex(big, sizeof(big), sha);
	snprintf(want, sizeof(want), "harvest history get %s -o ./&#39;-&#39;</code>", sha);
	if (!strstr(p, want))
		fail_msg("no %s in the page", want);
	free(p);

	/* not recorded: no command to offer */
	hv_run_row r = {.command_json = NULL, .dir = "/d", .dir_len = 2, .ended = true,
			.duration_ms = -1};
	p = page_of(&r, a, 1, &o);
	assert_non_null(strstr(p, "Too large to embed (over 100 B).</p>"));
	assert_null(strstr(p, "history get"));
	assert_non_null(strstr(p, "Files collected in <code>/d</code>"));
	free(p);
}

static void test_base64_and_no_content(void **state)
{
	(void)state;
	art a[] = {
		{"a.gif", "image/gif", "ab", 0},
		{"b.webp", "image/webp", "abcd", 0},
		{"c.jpg", "image/jpeg", NULL, 0},
	};
	char *p = page_of(NULL, a, 3, NULL);
	assert_non_null(strstr(p, "src=\"data:image/gif;base64,YWI=\""));
	assert_non_null(strstr(p, "src=\"data:image/webp;base64,YWJjZA==\""));
	assert_non_null(strstr(p, "The content was not stored (collected with --no-content)."));
	free(p);
}

static void test_write_failure(void **state)
{
	(void)state;
	char big[40000];
	memset(big, 'a', sizeof(big));
	art a[] = {{"x.bin", "application/octet-stream", big, sizeof(big)}};
	hv_collection c = {.n_files = 1, .root = (char *)"/"};
	hv_output_file f = {.path = (char *)"x.bin", .path_len = 5, .name = "x.bin", .name_len = 5,
			    .mime_type = (char *)a[0].mime, .size = sizeof(big),
			    .content = (unsigned char *)big, .content_len = sizeof(big)};
	c.files = &f;
	hv_run_row r = {.dir = "/", .dir_len = 1, .duration_ms = -1};
	sink s = {.fail_after = 2};
	assert_int_equal(hv_page_write_collection(&r, &c, NULL, sink_write, &s), HV_EIO);
	assert_non_null(strstr(hv_error_last(), "No space left on device"));
	free(s.p);
}

static void test_from_store(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	char *db = tu_path(dir, "h.db");
	hv_store *st;
	assert_int_equal(hv_store_open(&st, db, 0), HV_OK);
	/* "x\udcff": the command word x followed by the byte 0xFF that was not UTF-8 */
	hv_run_start start = {.label = "nightly", .command_json = "[\"make\",\"x\\udcff\"]",
			      .dir = "/w"};
	int64_t id;
	assert_int_equal(hv_store_run_begin(st, &start, &id), HV_OK);
	static const char csv[] = "a,b\n1,2\n";
	char sha[65], sha2[65];
	tu_sha256_hex(csv, strlen(csv), sha);
	tu_sha256_hex("", 0, sha2);
	hv_artifact_in arts[] = {
		{.path = "out/t.csv", .path_len = 9, .name = "t.csv", .name_len = 5,
		 .mime_type = "text/csv", .size = strlen(csv), .sha256 = sha, .content = csv,
		 .content_len = strlen(csv)},
		{.path = "empty.txt", .path_len = 9, .name = "empty.txt", .name_len = 9,
		 .mime_type = "text/plain", .size = 0, .sha256 = sha2, .content = "",
		 .content_len = 0},
	};
	hv_run_end end = {
		.has_exit_code = true, .duration_ms = 12, .stdout_data = "hello\n", .stdout_len = 6,
		.skipped_json = "[{\"path\":\"big/<f>.bin\",\"reason\":\"too_large\",\"size\":99999999},"
				"{\"path\":\"x\\u00e9\\ud83d\\ude00\",\"reason\":\"error\",\"size\":null,"
				"\"error\":\"x: Permission denied\"},"
				"{\"path\":\"m\\udcfd\",\"reason\":\"symlink\",\"size\":1}]",
		.deleted_json = "[\"gone.txt\", \"k\\udcfd\",\"<i>\"]",
	};
	assert_int_equal(hv_store_run_finish(st, id, &end, arts, 2), HV_OK);
	sink s = {0};
	hv_page_opts o = {.generated_by = "harvest test"};
	assert_int_equal(hv_page_write_run(st, id, &o, sink_write, &s), HV_OK);
	assert_non_null(strstr(s.p, "<title>Run 1 \xe2\x80\x94 nightly \xc2\xb7 harvest</title>"));
	assert_non_null(strstr(s.p, "<code>make $&#39;x\\xff&#39;</code>"));
	/* a lone U+DCxx is the byte xx, shown as \xNN like any byte that is not UTF-8 */
	assert_non_null(strstr(s.p, "<td class=\"mono\">m\\xfd</td><td>symlink</td>"));
	assert_null(strstr(s.p, "\xed\xb3"));
	/* the deleted files the history recorded */
	assert_non_null(strstr(s.p, "<h2 id=\"deleted\">Deleted <span class=\"count\">3</span>"));
	assert_non_null(strstr(s.p, "<li>gone.txt</li><li>k\\xfd</li><li>&lt;i&gt;</li></ul>"));
	assert_non_null(strstr(s.p, "<pre class=\"term\">hello\n</pre>"));
	assert_non_null(strstr(s.p, "id=\"artifact-1\""));
	assert_non_null(strstr(s.p, "<tr><td>1</td><td>2</td></tr>"));
	assert_non_null(strstr(s.p, "<span class=\"dir\">out/</span>t.csv"));
	assert_non_null(strstr(s.p, "<td class=\"mono\">big/&lt;f&gt;.bin</td><td>too_large</td>"
				    "<td>95 MiB</td>"));
	assert_non_null(strstr(s.p, "<td class=\"mono\">x\xc3\xa9\xf0\x9f\x98\x80</td><td>error: "
				    "x: Permission denied</td><td>\xe2\x80\x94</td>"));
	assert_non_null(strstr(s.p, "Made by harvest test"));
	/* the host the run's owner recorded */
	char host[256], want[300];
	assert_int_equal(gethostname(host, sizeof(host)), 0);
	snprintf(want, sizeof(want), "<dt>Host</dt><dd>%s</dd>", host);
	assert_non_null(strstr(s.p, want));
	assert_non_null(strstr(s.p, "<span class=\"badge\">2 artifacts</span>"));
	free(s.p);

	s = (sink){0};
	assert_int_equal(hv_page_write_run(st, id + 5, NULL, sink_write, &s), HV_ENOTFOUND);
	assert_non_null(strstr(hv_error_last(), "no run 6"));
	assert_null(s.p);
	/* 0 is no run (in a filter it would mean any run) */
	assert_int_equal(hv_page_write_run(st, 0, NULL, sink_write, &s), HV_ENOTFOUND);
	assert_non_null(strstr(hv_error_last(), "no run 0"));
	assert_null(s.p);
	hv_store_close(st);
	tu_rmrf(dir);
	free(db);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_csp_first),
		cmocka_unit_test(test_hostile_names),
		cmocka_unit_test(test_no_script_whatever_the_artifacts),
		cmocka_unit_test(test_csv),
		cmocka_unit_test(test_csv_first_50_rows),
		cmocka_unit_test(test_200_lines),
		cmocka_unit_test(test_not_ended),
		cmocka_unit_test(test_ansi),
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_bidi_controls),
		cmocka_unit_test(test_download_name),
		cmocka_unit_test(test_csv_edges),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_deleted),
		cmocka_unit_test(test_csv_columns),
		cmocka_unit_test(test_embed_cap),
		cmocka_unit_test(test_base64_and_no_content),
		cmocka_unit_test(test_write_failure),
		cmocka_unit_test(test_from_store),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
