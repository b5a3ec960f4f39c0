/* Fuzz target: the HTML page (src/lib/page.c) of a run whose every text is the input.
 *
 * Input: byte 0 picks the artifact's MIME type (from the table below), byte 1 the embed cap
 * (0: the default, else that many bytes); the rest is used as the run's stdout, stderr, label,
 * command JSON and directory, and as the artifact's content and name (NULs in the names made
 * 'x'), so the ANSI, CSV, text, JSON-command readers and the escaping all see it.
 *
 * Checked: the page is complete ("<!DOCTYPE html>" ... "</html>\n"), the CSP tag comes before
 * any other tag but the charset's, no ESC byte reaches it, and every '<' in it opens or closes
 * one of the elements the page itself writes (so no input can add an element, a script or an
 * event handler). */
#include "harvest/page.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "fuzz_page: check failed: %s (%s:%d)\n", #cond,    \
				__FILE__, __LINE__);                                      \
			fprintf(stderr, "  " __VA_ARGS__);                                \
			fprintf(stderr, "\n");                                            \
			abort();                                                          \
		}                                                                         \
	} while (0)

typedef struct sink {
	char *p;
	size_t n, cap;
} sink;

static int sink_write(void *ctx, const void *data, size_t len)
{
	sink *s = ctx;
	if (s->n + len + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 65536;
		while (cap < s->n + len + 1)
			cap *= 2;
		char *q = realloc(s->p, cap);
		if (!q)
			abort();
		s->p = q;
		s->cap = cap;
	}
	memcpy(s->p + s->n, data, len);
	s->n += len;
	s->p[s->n] = '\0';
	return 0;
}

static const char *const mimes[] = {
	"text/csv", "text/tab-separated-values", "text/plain", "text/markdown", "application/json",
	"text/html", "image/svg+xml", "image/png", "application/pdf", "application/octet-stream",
	"text/csv; charset=utf-8", "TEXT/CSV",
};

static const char *const tags[] = {
	"!DOCTYPE", "html", "head", "meta", "title", "style", "body", "main", "header", "div",
	"h1", "h2", "h3", "code", "span", "b", "dl", "dt", "dd", "details", "summary", "pre", "p",
	"article", "img", "table", "thead", "tbody", "tr", "th", "td", "a", "ul", "li", "footer",
};

static bool known_tag(const char *p, size_t avail)
{
	size_t i = 1;
	if (i < avail && p[i] == '/')
		i++;
	size_t st = i;
	while (i < avail && (p[i] == '!' || (p[i] >= 'a' && p[i] <= 'z') ||
			     (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9')))
		i++;
	if (i >= avail || (p[i] != '>' && p[i] != ' '))
		return false;
	for (size_t k = 0; k < sizeof(tags) / sizeof(tags[0]); k++)
		if (strlen(tags[k]) == i - st && memcmp(tags[k], p + st, i - st) == 0)
			return true;
	return false;
}

static char *nul_free(const uint8_t *d, size_t n)
{
	char *s = malloc(n + 1);
	if (!s)
		abort();
	for (size_t i = 0; i < n; i++)
		s[i] = d[i] ? (char)d[i] : 'x';
	s[n] = '\0';
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	const char *mime = mimes[data[0] % (sizeof(mimes) / sizeof(mimes[0]))];
	uint64_t cap = data[1];
	const uint8_t *rest = data + 2;
	size_t n = size - 2;
	char *text = nul_free(rest, n);
	size_t name_len = n < 64 ? n : 64;
	hv_output_file f = {
		.path = text,
		.path_len = name_len,
		.name = text,
		.name_len = name_len,
		.mime_type = (char *)mime,
		.size = n,
		.sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		.content = (unsigned char *)rest,
		.content_len = n,
	};
	char *path = nul_free(rest, name_len);
	f.path = path;
	f.name = path;
	hv_skipped_file sk = {.path = path, .path_len = name_len, .reason = "error",
			      .error = text};
	hv_collection c = {.files = &f, .n_files = 1, .skipped = &sk, .n_skipped = 1,
			   .root = text};
	hv_run_row r = {
		.run_id = data[1] & 1,
		.label = text,
		.label_len = n,
		.command_json = text,
		.dir = text,
		.dir_len = n,
		.ended = true,
		.has_exit_code = true,
		.duration_ms = -1,
		.stdout_data = (const char *)rest,
		.stdout_len = n,
		.stderr_data = text,
		.stderr_len = n,
	};
	hv_page_opts o = {.embed_max = cap, .host = text};
	sink s = {0};
	hv_status st = hv_page_write_collection(&r, &c, &o, sink_write, &s);
	CHECK(st == HV_OK, "status %d", (int)st);
	CHECK(s.n > 16 && memcmp(s.p, "<!DOCTYPE html>\n", 16) == 0, "no doctype");
	CHECK(s.n >= 8 && memcmp(s.p + s.n - 8, "</html>\n", 8) == 0, "not complete");
	CHECK(memchr(s.p, '\x1b', s.n) == NULL, "an ESC byte in the page");
	const char *csp = strstr(s.p, "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
				      "'none'; img-src data:; style-src 'unsafe-inline'\">");
	const char *charset = strstr(s.p, "<meta charset=\"utf-8\">\n");
	CHECK(csp && charset && csp == charset + strlen("<meta charset=\"utf-8\">\n"),
	      "the CSP is not right after the charset");
	for (const char *p = s.p; (p = memchr(p, '<', (size_t)(s.p + s.n - p))) != NULL; p++)
		CHECK(known_tag(p, (size_t)(s.p + s.n - p)), "an element the page does not write at "
		      "%zu: %.40s", (size_t)(p - s.p), p);
	free(s.p);
	free(path);
	free(text);
	return 0;
}
