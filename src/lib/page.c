/* A run and its artifacts as one self-contained HTML page (see harvest/page.h). */
#include "internal.h"
#include "store_internal.h"

#include "harvest/json.h"
#include "harvest/page.h"
#include "harvest/parse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CSV_ROWS 50
#define CSV_COLS 100        /* cells shown of one record; the rest are parsed, not shown */
#define CSV_CELL_MAX 2000   /* bytes of one cell shown; the rest is cut with an ellipsis */
#define TEXT_LINES 200
#define TEXT_BYTES (256u << 10) /* a 200-line cut of a file of huge lines stays small */
/* Of a longer stdout or stderr, the first STREAM_HEAD and the last STREAM_TAIL bytes are shown
 * (where a command starts and where it fails), cut at lines. */
#define STREAM_HEAD (64u << 10)
#define STREAM_TAIL (192u << 10)
#define SKIPPED_ROWS 1000
#define DELETED_ROWS 1000
/* A CSV table shows its records until it has read this much of the file (one record more at
 * most: 100 cells of 2,000 bytes), so a table of long cells, escaped, stays a few MiB. */
#define CSV_BYTES TEXT_BYTES
/* Once the page is this long, the artifacts after it show their facts only, not their
 * contents (a browser takes seconds per ten megabytes of markup): 1,000 text files of quotes,
 * escaped six times over, made a 1.2 GB page. */
#define PAGE_CONTENT_MAX ((uint64_t)32 << 20)

/* ---- output ------------------------------------------------------------------------------ */

typedef struct pw {
	hv_page_write_fn fn;
	void *ctx;
	char buf[16384];
	size_t n;
	int err;          /* errno of the first failed write; nothing is written after it */
	uint64_t embed_max;
	bool recorded;    /* the run is in the history: `history get` can fetch its contents */
	int64_t run_id;   /* its id there (0: not recorded) */
	const char *db;   /* hv_page_opts.db: the --db of the get command, or NULL */
	bool mute;        /* output is dropped (the columns of a CSV record past CSV_COLS) */
	uint64_t written; /* bytes of the page so far */
	size_t deleted_total, deleted_shown; /* of the Deleted list */
} pw;

static void pw_flush(pw *w)
{
	if (w->n && !w->err && w->fn(w->ctx, w->buf, w->n) != 0)
		w->err = errno ? errno : EIO;
	w->n = 0;
}

static void put(pw *w, const char *s, size_t len)
{
	if (w->mute)
		return;
	w->written += len;
	while (len > 0 && !w->err) {
		size_t k = sizeof(w->buf) - w->n;
		if (k > len)
			k = len;
		memcpy(w->buf + w->n, s, k);
		w->n += k;
		s += k;
		len -= k;
		if (w->n == sizeof(w->buf))
			pw_flush(w);
	}
}

static void puts_(pw *w, const char *s) { put(w, s, strlen(s)); }

static void putf(pw *w, const char *fmt, ...) HV_ATTR_PRINTF(2, 3);
static void putf(pw *w, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		put(w, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Escaping modes of put_text. */
enum {
	ESC_NAME = 0,   /* a name on one line: every control character as \xNN */
	ESC_PRE = 1,    /* text in <pre>: newlines and tabs kept, CR of CRLF dropped */
	ESC_FILE = 2,   /* a name to save a download under (a download attribute): a backslash
	                 * kept as one, each character that would be \xNN as one '_' */
};

/* Whether the UTF-8 character at s (k bytes) reorders the text around it: the bidirectional
 * marks, embeddings, overrides and isolates (U+061C, U+200E-200F, U+202A-202E, U+2066-2069).
 * A name holding U+202E would be shown reversed ("d<RLO>nib.exe" as "dexe.bin"), on its
 * heading and its download button alike. */
static bool is_bidi_control(const unsigned char *s, size_t k)
{
	if (k == 2)
		return s[0] == 0xd8 && s[1] == 0x9c;
	if (k != 3)
		return false;
	if (s[0] == 0xe2 && s[1] == 0x80)
		return s[2] == 0x8e || s[2] == 0x8f || (s[2] >= 0xaa && s[2] <= 0xae);
	return s[0] == 0xe2 && s[1] == 0x81 && s[2] >= 0xa6 && s[2] <= 0xa9;
}

/* The bytes as HTML text (also safe inside a double- or single-quoted attribute): markup
 * characters as entities; controls, C1 controls, bidirectional controls and bytes that are
 * not UTF-8 as \xNN (every byte of such a character); a backslash as \\ only in names (so a
 * name's \xNN cannot be mistaken for its bytes). In <pre> text (ESC_PRE, never an attribute)
 * a backslash stays one, as the program wrote it, and each \xNN is a <span class="x">, set
 * apart by its style: a literal "\xff" in the output is not mistaken for the byte 0xff. */
static void put_text(pw *w, const char *s, size_t len, int mode)
{
	size_t run = 0; /* start of the pending plain bytes */
	size_t i = 0;
	char hex[8];
	while (i < len) {
		unsigned char c = (unsigned char)s[i];
		const char *rep = NULL;
		size_t step = 1;
		size_t c1 = 0; /* a control character of this many bytes, each shown as \xNN */
		if (c == '&')
			rep = "&amp;";
		else if (c == '<')
			rep = "&lt;";
		else if (c == '>')
			rep = "&gt;";
		else if (c == '"')
			rep = "&quot;";
		else if (c == '\'')
			rep = "&#39;";
		else if (c == '\\' && mode == ESC_NAME)
			rep = "\\\\";
		else if (mode == ESC_PRE && (c == '\n' || c == '\t'))
			rep = NULL;
		else if (mode == ESC_PRE && c == '\r' && i + 1 < len && s[i + 1] == '\n')
			rep = "";
		else if (c < 0x20 || c == 0x7f) {
			snprintf(hex, sizeof(hex), "\\x%02x", c);
			rep = hex;
		} else if (c >= 0x80) {
			size_t k = hv_utf8_char_length(s + i, len - i);
			if ((k == 2 && c == 0xc2 && (unsigned char)s[i + 1] <= 0x9f) ||
			    is_bidi_control((const unsigned char *)s + i, k)) {
				snprintf(hex, sizeof(hex), "\\x%02x", c);
				rep = hex;
				c1 = k;
			} else if (k == 0) {
				snprintf(hex, sizeof(hex), "\\x%02x", c);
				rep = hex;
			} else {
				step = k;
			}
		}
		if (rep == hex && mode == ESC_FILE) {
			put(w, s + run, i - run);
			puts_(w, "_");
			i += c1 ? c1 : 1;
			run = i;
			continue;
		}
		if (rep) {
			put(w, s + run, i - run);
			bool span = mode == ESC_PRE && rep == hex;
			if (span)
				puts_(w, "<span class=\"x\">");
			puts_(w, rep);
			i += 1;
			run = i;
			for (size_t b = 1; b < c1; b++) { /* the UTF-8 check saw these bytes */
				snprintf(hex, sizeof(hex), "\\x%02x", (unsigned char)s[i]);
				puts_(w, hex);
				i++;
				run = i;
			}
			if (span)
				puts_(w, "</span>");
			continue;
		}
		i += step;
	}
	put(w, s + run, len - run);
}

static void put_name(pw *w, const char *s, size_t len) { put_text(w, s, len, ESC_NAME); }
static void put_cname(pw *w, const char *s) { put_text(w, s, strlen(s), ESC_NAME); }

static void put_base64(pw *w, const unsigned char *p, size_t len)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char out[4];
	size_t i = 0;
	for (; i + 3 <= len; i += 3) {
		unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
		out[0] = tab[v >> 18];
		out[1] = tab[(v >> 12) & 63];
		out[2] = tab[(v >> 6) & 63];
		out[3] = tab[v & 63];
		put(w, out, 4);
	}
	if (i < len) {
		unsigned v = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0);
		out[0] = tab[v >> 18];
		out[1] = tab[(v >> 12) & 63];
		out[2] = '=';
		if (i + 1 < len)
			out[2] = tab[(v >> 6) & 63];
		out[3] = '=';
		put(w, out, 4);
	}
}

static void put_size(pw *w, uint64_t n)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
	if (n < 1024) {
		putf(w, "%llu B", (unsigned long long)n);
		return;
	}
	size_t u = 0;
	uint64_t unit = 1024;
	while (u + 1 < sizeof(units) / sizeof(units[0]) && n / unit >= 1024) {
		unit *= 1024;
		u++;
	}
	double v = (double)n / (double)unit;
	putf(w, "%.*f %s", v < 10 ? 1 : 0, v, units[u]);
}

static void put_time(pw *w, int64_t ns)
{
	char buf[64];
	size_t n = hv_format_time(ns, buf, sizeof(buf));
	put_name(w, buf, n < sizeof(buf) ? n : sizeof(buf) - 1);
}

/* ---- a small JSON reader for the texts the history keeps (command, skipped) -------------- */

typedef struct sbuf {
	char *p;
	size_t n, cap;
	bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *q = realloc(b->p, cap);
		if (!q) {
			b->oom = true;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
		p++;
	return p;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool hex4(const char *p, const char *end, unsigned *out)
{
	if (end - p < 4)
		return false;
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval(p[i]);
		if (h < 0)
			return false;
		v = v << 4 | (unsigned)h;
	}
	*out = v;
	return true;
}

static void sb_utf8(sbuf *b, unsigned cp)
{
	char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 63));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | cp >> 12);
		u[1] = (char)(0x80 | ((cp >> 6) & 63));
		u[2] = (char)(0x80 | (cp & 63));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | cp >> 18);
		u[1] = (char)(0x80 | ((cp >> 12) & 63));
		u[2] = (char)(0x80 | ((cp >> 6) & 63));
		u[3] = (char)(0x80 | (cp & 63));
		n = 4;
	}
	sb_add(b, u, n);
}

/* Reads the JSON string at *pp (which starts with '"') into b, undoing hv_json_string's
 * escapes; false when malformed (the caller then shows the text as it is). */
static bool json_string(const char **pp, const char *end, sbuf *b)
{
	const char *p = *pp;
	if (p >= end || *p != '"')
		return false;
	p++;
	b->n = 0;
	sb_add(b, "", 0);
	while (p < end && *p != '"') {
		if (*p != '\\') {
			const char *q = p;
			while (q < end && *q != '"' && *q != '\\')
				q++;
			sb_add(b, p, (size_t)(q - p));
			p = q;
			continue;
		}
		if (++p >= end)
			return false;
		char c = *p++;
		unsigned cp;
		switch (c) {
		case 'n': sb_add(b, "\n", 1); break;
		case 't': sb_add(b, "\t", 1); break;
		case 'r': sb_add(b, "\r", 1); break;
		case 'b': sb_add(b, "\b", 1); break;
		case 'f': sb_add(b, "\f", 1); break;
		case 'u':
			if (!hex4(p, end, &cp))
				return false;
			p += 4;
			if (cp >= 0xd800 && cp < 0xdc00 && end - p >= 6 && p[0] == '\\' &&
			    p[1] == 'u') {
				unsigned lo;
				if (hex4(p + 2, end, &lo) && lo >= 0xdc00 && lo < 0xe000) {
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
					p += 6;
				}
			}
			if (cp >= 0xdc80 && cp <= 0xdcff) {
				/* A lone U+DC80..U+DCFF is the byte 0x80..0xFF that was not UTF-8
				 * (the surrogateescape of SPEC §1): that byte again. */
				char byte = (char)(cp & 0xff);
				sb_add(b, &byte, 1);
			} else {
				sb_utf8(b, cp);
			}
			break;
		default: sb_add(b, &c, 1); break;
		}
	}
	if (p >= end)
		return false;
	*pp = p + 1;
	return !b->oom;
}

/* Skips a scalar (number, true, false, null) and returns its text in *v, *vlen. */
static bool json_scalar(const char **pp, const char *end, const char **v, size_t *vlen)
{
	const char *p = *pp;
	const char *q = p;
	while (q < end && *q != ',' && *q != '}' && *q != ']' && *q != ' ' && *q != '\n')
		q++;
	if (q == p)
		return false;
	*v = p;
	*vlen = (size_t)(q - p);
	*pp = q;
	return true;
}

static void put_shell_word(pw *w, const char *s, size_t len);

/* Whether the plain word s, first on a line, is not read by bash as a command's name: a
 * reserved word (`time -f %e true` would be bash's own `time`), or NAME=VALUE, an assignment
 * before the command. Quoted, either is the command's name again. */
static bool shell_keyword_or_assignment(const char *s, size_t len)
{
	static const char *const reserved[] = {"case", "coproc", "do",	   "done",  "elif",
					       "else", "esac",	 "fi",	   "for",   "function",
					       "if",   "in",	 "select", "then",  "time",
					       "until", "while"};
	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
		if (strlen(reserved[i]) == len && !memcmp(reserved[i], s, len))
			return true;
	/* NAME=: a letter or '_', then letters, digits or '_', then '=' */
	size_t i = 0;
	while (i < len && (s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
			   (i > 0 && s[i] >= '0' && s[i] <= '9')))
		i++;
	return i > 0 && i < len && s[i] == '=';
}

/* The command as a line a shell reads back into the same argv: each argument of the JSON
 * array, plain words as they are, the others quoted as put_shell_word() does. */
static void put_command(pw *w, const char *json)
{
	const char *p = json, *end = json + strlen(json);
	sbuf b = {0};
	p = skip_ws(p, end);
	bool ok = p < end && *p == '[';
	if (ok)
		p = skip_ws(p + 1, end);
	bool first = true, first_word = true;
	while (ok && p < end && *p != ']') {
		if (!json_string(&p, end, &b)) {
			ok = false;
			break;
		}
		if (!first)
			puts_(w, " ");
		first = false;
		bool plain = b.n > 0;
		for (size_t i = 0; i < b.n && plain; i++)
			plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
				       "_./:=@%+,-",
				       b.p[i]) != NULL && b.p[i] != '\0';
		if (plain && first_word)
			plain = !shell_keyword_or_assignment(b.p, b.n);
		first_word = false;
		if (plain)
			put_name(w, b.p, b.n);
		else
			put_shell_word(w, b.p, b.n);
		p = skip_ws(p, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	if (!ok) /* not an array of strings: the text itself */
		put_cname(w, json);
	free(b.p);
}

/* ---- ANSI colour codes -------------------------------------------------------------------- */

typedef struct sgr {
	int fg, bg;      /* -1 default, 0..15 */
	bool bold, dim, italic, underline;
} sgr;

#define SGR_RESET ((sgr){.fg = -1, .bg = -1})

static bool sgr_plain(const sgr *g)
{
	return g->fg < 0 && g->bg < 0 && !g->bold && !g->dim && !g->italic && !g->underline;
}

static void sgr_apply(sgr *g, const char *params, size_t len)
{
	size_t i = 0;
	if (len == 0) {
		*g = SGR_RESET;
		return;
	}
	while (i <= len) {
		int v = 0;
		bool any = false;
		while (i < len && params[i] >= '0' && params[i] <= '9') {
			if (v < 1000)
				v = v * 10 + (params[i] - '0');
			i++;
			any = true;
		}
		if (!any)
			v = 0;
		if (v == 0)
			*g = SGR_RESET;
		else if (v == 1)
			g->bold = true;
		else if (v == 2)
			g->dim = true;
		else if (v == 3)
			g->italic = true;
		else if (v == 4)
			g->underline = true;
		else if (v == 22)
			g->bold = g->dim = false;
		else if (v == 23)
			g->italic = false;
		else if (v == 24)
			g->underline = false;
		else if (v >= 30 && v <= 37)
			g->fg = v - 30;
		else if (v >= 90 && v <= 97)
			g->fg = v - 90 + 8;
		else if (v == 39)
			g->fg = -1;
		else if (v >= 40 && v <= 47)
			g->bg = v - 40;
		else if (v >= 100 && v <= 107)
			g->bg = v - 100 + 8;
		else if (v == 49)
			g->bg = -1;
		else if (v == 38 || v == 48) {
			/* 256-colour and RGB forms: the first 16 of the 256 are the 16 colours;
			 * other colours' arguments are skipped, not shown */
			size_t save = i;
			int sub = 0, n = 0;
			if (i < len && (params[i] == ';' || params[i] == ':')) {
				i++;
				while (i < len && params[i] >= '0' && params[i] <= '9') {
					if (sub < 1000)
						sub = sub * 10 + (params[i] - '0');
					i++;
					n = 1;
				}
			}
			int skip = n ? (sub == 5 ? 1 : sub == 2 ? 3 : 0) : 0;
			if (!n)
				i = save;
			bool first = true;
			for (; skip > 0 && i < len; skip--) {
				i++; /* the separator */
				int c = 0;
				size_t from = i;
				while (i < len && params[i] >= '0' && params[i] <= '9') {
					if (c < 1000)
						c = c * 10 + (params[i] - '0');
					i++;
				}
				if (first && sub == 5 && i > from && c < 16)
					*(v == 38 ? &g->fg : &g->bg) = c;
				first = false;
			}
		}
		if (i >= len)
			break;
		i++; /* ';' or ':' */
	}
}

static void sgr_open(pw *w, const sgr *g)
{
	if (sgr_plain(g))
		return;
	puts_(w, "<span class=\"");
	const char *sep = "";
	if (g->fg >= 0) {
		putf(w, "c%d", g->fg);
		sep = " ";
	}
	if (g->bg >= 0) {
		putf(w, "%sg%d", sep, g->bg);
		sep = " ";
	}
	if (g->bold)
		putf(w, "%sb", sep), sep = " ";
	if (g->dim)
		putf(w, "%sd", sep), sep = " ";
	if (g->italic)
		putf(w, "%si", sep), sep = " ";
	if (g->underline)
		putf(w, "%su", sep);
	puts_(w, "\">");
}

/* The end of the escape sequence at s[i] (an ESC): the index after it. A CSI's parameters are
 * s[*ps, *pe) (both i when it is no CSI; *final its final byte, 0 when none). */
static size_t esc_end(const char *s, size_t len, size_t i, size_t *ps, size_t *pe, char *final)
{
	size_t j = i + 1;
	*ps = *pe = i;
	*final = 0;
	if (j < len && s[j] == '[') {
		*ps = ++j;
		while (j < len && (unsigned char)s[j] >= 0x30 && (unsigned char)s[j] <= 0x3f)
			j++;
		*pe = j;
		while (j < len && (unsigned char)s[j] >= 0x20 && (unsigned char)s[j] <= 0x2f)
			j++;
		if (j < len && (unsigned char)s[j] >= 0x40 && (unsigned char)s[j] <= 0x7e)
			*final = s[j++];
	} else if (j < len && (s[j] == ']' || s[j] == 'P' || s[j] == '_' || s[j] == '^')) {
		/* OSC, DCS, APC, PM: up to BEL or ESC \ on the same line. One that is not ended
		 * there loses its introducer only: the rest is shown, so one stray ESC ] cannot
		 * hide all the output after it. */
		size_t k = ++j;
		while (k < len && s[k] != '\a' && s[k] != '\n' &&
		       !(s[k] == '\x1b' && k + 1 < len && s[k + 1] == '\\'))
			k++;
		if (k < len && s[k] != '\n')
			j = k + (s[k] == '\a' ? 1 : 2);
	} else {
		/* ESC, intermediates, a final byte: ESC c, ESC =, ESC ( B ... A control character
		 * (a newline, another ESC) is no final byte: the ESC alone goes, and what follows
		 * is kept (a line that ended in a stray ESC keeps its newline). */
		while (j < len && (unsigned char)s[j] >= 0x20 && (unsigned char)s[j] <= 0x2f)
			j++;
		if (j < len && (unsigned char)s[j] >= 0x30 && (unsigned char)s[j] <= 0x7e)
			j++;
	}
	return j;
}

/* Where a tail cut at data[tail], with no newline near, starts: after the escape sequence it
 * falls inside (one that began in the 256 bytes before), else at a character's start. */
static size_t tail_start(const char *data, size_t len, size_t tail)
{
	for (size_t k = tail; k > 0 && tail - k < 256; k--) {
		if (data[k - 1] != '\x1b')
			continue;
		size_t ps, pe;
		char final;
		size_t end = esc_end(data, len, k - 1, &ps, &pe, &final);
		if (end > tail)
			return end;
		break;
	}
	for (int k = 0; k < 3 && tail < len && ((unsigned char)data[tail] & 0xc0) == 0x80; k++)
		tail++;
	return tail;
}

/* Terminal output: SGR colours become spans, every other escape sequence is dropped. */
static void put_terminal(pw *w, const char *s, size_t len)
{
	sgr g = SGR_RESET;
	size_t i = 0, run = 0;
	while (i < len) {
		if (s[i] != '\x1b') {
			i++;
			continue;
		}
		put_text(w, s + run, i - run, ESC_PRE);
		size_t ps, pe;
		char final;
		size_t j = esc_end(s, len, i, &ps, &pe, &final);
		if (final == 'm' && pe > i) {
			sgr old = g;
			sgr_apply(&g, s + ps, pe - ps);
			if (memcmp(&old, &g, sizeof(g)) != 0) {
				if (!sgr_plain(&old))
					puts_(w, "</span>");
				sgr_open(w, &g);
			}
		}
		i = run = j;
	}
	put_text(w, s + run, len - run, ESC_PRE);
	if (!sgr_plain(&g))
		puts_(w, "</span>");
}

/* ---- the page ---------------------------------------------------------------------------- */

static const char page_css[] =
	":root{--bg:#f6f7f9;--card:#fff;--fg:#1d2330;--muted:#5d6677;--line:#dfe3ea;"
	"--code:#f1f3f6;--accent:#2f6fde;--ok:#1a7f37;--okbg:#dcf3e3;--bad:#c62828;"
	"--badbg:#fde2e1;--warn:#9a6700;--warnbg:#fff1c7;--th:#eef1f5;"
	"--t0:#1d2330;--t1:#c62828;--t2:#1a7f37;--t3:#9a6700;--t4:#2f6fde;--t5:#8e44ad;"
	"--t6:#0e7c86;--t7:#6b7280;color-scheme:light dark}\n"
	"@media (prefers-color-scheme:dark){:root{--bg:#0f1218;--card:#171b23;--fg:#e3e7ee;"
	"--muted:#98a2b3;--line:#2a303b;--code:#0c0f14;--accent:#7aa7ff;--ok:#56d364;"
	"--okbg:#12351d;--bad:#ff7b72;--badbg:#3d1514;--warn:#e3b341;--warnbg:#3a2c06;"
	"--th:#1e232d;--t0:#c9d1d9;--t1:#ff7b72;--t2:#56d364;--t3:#e3b341;--t4:#79c0ff;"
	"--t5:#d2a8ff;--t6:#56d4dd;--t7:#8b949e}}\n"
	"*{box-sizing:border-box}\n"
	"html{-webkit-text-size-adjust:100%;text-size-adjust:100%}\n"
	"body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 system-ui,"
	"-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif}\n"
	"main{max-width:1080px;margin:0 auto;padding:24px 20px 48px}\n"
	"code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"
	"'Liberation Mono',monospace;font-size:13px}\n"
	"h1,h2,h3{line-height:1.25;margin:0}\n"
	".kicker{color:var(--muted);font-size:13px;letter-spacing:.02em;margin-bottom:6px}\n"
	".kicker b{color:var(--fg);font-weight:600}\n"
	"h1{font-size:20px;font-weight:600;word-break:break-word}\n"
	"h1 code{font-size:18px}\n"
	".badges{display:flex;flex-wrap:wrap;gap:8px;margin:12px 0 0}\n"
	".badge{display:inline-block;padding:2px 10px;border-radius:999px;font-size:13px;"
	"font-weight:600;background:var(--th);color:var(--muted)}\n"
	".badge.ok{background:var(--okbg);color:var(--ok)}\n"
	".badge.bad{background:var(--badbg);color:var(--bad)}\n"
	".badge.warn{background:var(--warnbg);color:var(--warn)}\n"
	".card{background:var(--card);border:1px solid var(--line);border-radius:10px;"
	"padding:16px 18px;margin:16px 0}\n"
	"dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:6px 18px;margin:16px 0 0}\n"
	"dl.meta dt{color:var(--muted)}\n"
	"dl.meta dd{margin:0;word-break:break-all}\n"
	"h2{font-size:16px;font-weight:600;margin:28px 0 0;display:flex;align-items:center;"
	"gap:8px}\n"
	".count{font-size:12px;font-weight:600;background:var(--th);color:var(--muted);"
	"border-radius:999px;padding:1px 8px}\n"
	"details>summary{cursor:pointer;color:var(--muted);font-weight:600;font-size:13px}\n"
	"pre{background:var(--code);border:1px solid var(--line);border-radius:8px;"
	"padding:10px 12px;margin:8px 0 0;overflow:auto;max-height:36em;white-space:pre;"
	"tab-size:4}\n"
	".term .b{font-weight:700}.term .d{opacity:.7}.term .i{font-style:italic}"
	".term .u{text-decoration:underline}\n"
	".c0,.c8{color:var(--t0)}.c1,.c9{color:var(--t1)}.c2,.c10{color:var(--t2)}"
	".c3,.c11{color:var(--t3)}.c4,.c12{color:var(--t4)}.c5,.c13{color:var(--t5)}"
	".c6,.c14{color:var(--t6)}.c7,.c15{color:var(--t7)}\n"
	".g0,.g8{background:var(--t0)}.g1,.g9{background:var(--t1)}"
	".g2,.g10{background:var(--t2)}.g3,.g11{background:var(--t3)}"
	".g4,.g12{background:var(--t4)}.g5,.g13{background:var(--t5)}"
	".g6,.g14{background:var(--t6)}.g7,.g15{background:var(--t7)}\n"
	".art{padding:0;overflow:hidden}\n"
	".art>header{padding:12px 16px;border-bottom:1px solid var(--line)}\n"
	".art h3{font-size:15px;font-weight:600;word-break:break-all}\n"
	".art h3 .dir{color:var(--muted);font-weight:400}\n"
	".facts{display:flex;flex-wrap:wrap;gap:4px 14px;color:var(--muted);font-size:13px;"
	"margin-top:4px}\n"
	".facts .sha{word-break:break-all}\n"
	".body{padding:14px 16px}\n"
	".body pre{margin:0}\n"
	/* an escaped byte in output or a preview, told apart from the same characters written */
	".x{color:var(--warn);background:var(--warnbg);border-radius:3px}\n"
	".img{display:flex;justify-content:center;background-color:#fff;"
	"background-image:linear-gradient(45deg,#eee 25%,transparent 25%),linear-gradient(-45deg,"
	"#eee 25%,transparent 25%),linear-gradient(45deg,transparent 75%,#eee 75%),"
	"linear-gradient(-45deg,transparent 75%,#eee 75%);background-size:16px 16px;"
	"background-position:0 0,0 8px,8px -8px,-8px 0;border-radius:6px;padding:8px}\n"
	".img img{max-width:100%;height:auto;max-height:70vh;display:block}\n"
	".table{overflow:auto;max-height:36em;border:1px solid var(--line);border-radius:8px}\n"
	"table{border-collapse:collapse;font-size:13px;width:100%}\n"
	"th,td{text-align:left;vertical-align:top;padding:6px 10px;border-bottom:1px solid "
	"var(--line);white-space:pre-wrap;word-break:break-word;min-width:4em}\n"
	"thead th{background:var(--th);position:sticky;top:0;font-weight:600}\n"
	"tbody tr:last-child td{border-bottom:0}\n"
	".note{color:var(--muted);font-size:13px;margin:8px 0 0}\n"
	".dl{display:inline-flex;align-items:center;gap:6px;padding:6px 14px;border-radius:8px;"
	"background:var(--accent);color:#fff;text-decoration:none;font-weight:600;font-size:14px}\n"
	"@media (prefers-color-scheme:dark){.dl{color:#0f1218}}\n"
	".cmd{display:block;white-space:pre-wrap;word-break:break-all;background:var(--code);"
	"border:1px solid var(--line);border-radius:8px;padding:8px 10px;margin-top:6px}\n"
	".list td:first-child{word-break:break-all}\n"
	"footer{color:var(--muted);font-size:12px;margin-top:32px;text-align:center}\n"
	"@media (max-width:600px){main{padding:14px 10px 32px}.card{padding:12px 12px;"
	"border-radius:8px}.art{padding:0}.art>header,.body{padding:10px 12px}"
	"dl.meta{grid-template-columns:1fr;gap:0}dl.meta dd{margin-bottom:6px}"
	"h1{font-size:17px}h1 code{font-size:15px}}\n";

static void page_head(pw *w, const hv_run_row *r, const hv_page_opts *o, size_t n_art)
{
	/* The CSP comes first of all, before anything an artifact or a name could contribute. */
	puts_(w, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
		 "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
		 "img-src data:; style-src 'unsafe-inline'\">\n"
		 "<meta name=\"referrer\" content=\"no-referrer\">\n"
		 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
		 "<meta name=\"color-scheme\" content=\"light dark\">\n<title>");
	if (r->run_id > 0)
		putf(w, "%s %lld", r->command_json ? "Run" : "Collect", (long long)r->run_id);
	else
		puts_(w, r->command_json ? "Run" : "Collect");
	if (r->label) {
		puts_(w, " \xe2\x80\x94 ");
		put_name(w, r->label, r->label_len);
	}
	puts_(w, " \xc2\xb7 harvest</title>\n<style>\n");
	put(w, page_css, sizeof(page_css) - 1);
	puts_(w, "</style>\n</head>\n<body>\n<main>\n<header class=\"card\">\n<div class=\"kicker\">"
		 "harvest \xc2\xb7 ");
	puts_(w, r->command_json ? "run" : "collect");
	if (r->run_id > 0)
		putf(w, " <b>%lld</b>", (long long)r->run_id);
	if (r->label) {
		puts_(w, " \xc2\xb7 <b>");
		put_name(w, r->label, r->label_len);
		puts_(w, "</b>");
	}
	puts_(w, "</div>\n<h1>");
	if (r->command_json) {
		puts_(w, "<code>");
		put_command(w, r->command_json);
		puts_(w, "</code>");
	} else {
		puts_(w, "Files collected in <code>");
		put_name(w, r->dir, r->dir_len);
		puts_(w, "</code>");
	}
	puts_(w, "</h1>\n<div class=\"badges\">");
	if (!r->ended)
		puts_(w, "<span class=\"badge warn\">not finished</span>");
	if (r->end_reason) {
		/* "interrupted", "not_recorded": shown as words */
		puts_(w, "<span class=\"badge warn\">");
		for (const char *p = r->end_reason; *p; p++)
			put_text(w, *p == '_' ? " " : p, 1, ESC_NAME);
		puts_(w, "</span>");
	}
	else if (r->timed_out)
		puts_(w, "<span class=\"badge warn\">timed out</span>");
	if (r->ended && r->has_exit_code)
		putf(w, "<span class=\"badge %s\">exit %d</span>", r->exit_code ? "bad" : "ok",
		     r->exit_code);
	if (r->duration_ms >= 0)
		putf(w, "<span class=\"badge\">%.*f s</span>", r->duration_ms < 10000 ? 2 : 1,
		     (double)r->duration_ms / 1000.0);
	putf(w, "<span class=\"badge\">%zu artifact%s</span>", n_art, n_art == 1 ? "" : "s");
	puts_(w, "</div>\n<dl class=\"meta\">\n");
	if (r->label) {
		puts_(w, "<dt>Label</dt><dd>");
		put_name(w, r->label, r->label_len);
		puts_(w, "</dd>\n");
	}
	if (o->host) {
		puts_(w, "<dt>Host</dt><dd>");
		put_cname(w, o->host);
		puts_(w, "</dd>\n");
	}
	puts_(w, "<dt>Directory</dt><dd class=\"mono\">");
	put_name(w, r->dir, r->dir_len);
	puts_(w, "</dd>\n<dt>Started</dt><dd>");
	put_time(w, r->started_at_ns);
	puts_(w, "</dd>\n<dt>Ended</dt><dd>");
	if (r->ended)
		put_time(w, r->ended_at_ns);
	else
		puts_(w, "\xe2\x80\x94");
	puts_(w, "</dd>\n");
	if (r->duration_ms >= 0)
		putf(w, "<dt>Duration</dt><dd>%lld ms</dd>\n", (long long)r->duration_ms);
	if (r->command_json) {
		puts_(w, "<dt>Exit status</dt><dd>");
		if (r->ended && r->has_exit_code)
			putf(w, "%d", r->exit_code);
		else
			puts_(w, "\xe2\x80\x94");
		if (r->timed_out)
			puts_(w, " (timed out)");
		puts_(w, "</dd>\n");
	}
	puts_(w, "</dl>\n</header>\n");
}

/* at, moved back to the start of the UTF-8 character it is in: at most 3 bytes (bytes that
 * are not UTF-8 are cut anywhere). */
static size_t utf8_back(const char *s, size_t at)
{
	size_t b = at;
	for (size_t k = 0; k < 3 && b > 0 && ((unsigned char)s[b] & 0xc0) == 0x80; k++)
		b--;
	return ((unsigned char)s[b] & 0xc0) == 0x80 ? at : b;
}

static void page_stream(pw *w, const char *name, const char *data, size_t len, bool cut)
{
	puts_(w, "<details open class=\"card\"><summary>");
	puts_(w, name);
	putf(w, " \xc2\xb7 ");
	put_size(w, len);
	if (cut)
		puts_(w, " (cut short: the rest was not kept)");
	puts_(w, "</summary>");
	if (len == 0) {
		puts_(w, "<p class=\"note\">empty</p>");
	} else if (len <= STREAM_HEAD + STREAM_TAIL) {
		puts_(w, "<pre class=\"term\">");
		put_terminal(w, data, len);
		puts_(w, "</pre>");
	} else {
		/* The head ends after its last newline, the tail starts after its first one (each
		 * within 4 KiB, else at a character's start): no line, character or escape sequence
		 * is cut in two where a line can be kept whole. */
		size_t head = STREAM_HEAD, tail = len - STREAM_TAIL;
		for (size_t k = head; k > 0 && head - k < 4096; k--)
			if (data[k - 1] == '\n') {
				head = k;
				break;
			}
		head = utf8_back(data, head);
		const char *nl = memchr(data + tail, '\n', 4096);
		if (nl)
			tail = (size_t)(nl - data) + 1;
		else
			tail = tail_start(data, len, tail);
		puts_(w, "<pre class=\"term\">");
		put_terminal(w, data, head);
		puts_(w, "</pre><p class=\"note\">");
		put_size(w, tail - head);
		puts_(w, " not shown here: the first ");
		put_size(w, head);
		puts_(w, " and the last ");
		put_size(w, len - tail);
		puts_(w, " are.</p><pre class=\"term\">");
		put_terminal(w, data + tail, len - tail);
		puts_(w, "</pre>");
	}
	puts_(w, "</details>\n");
}

/* ---- artifacts ---------------------------------------------------------------------------- */

typedef enum view { V_IMAGE, V_TABLE, V_TEXT, V_DOWNLOAD } view;

static bool prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool suffix(const char *s, size_t len, const char *x)
{
	size_t n = strlen(x);
	return len >= n && strcmp(s + len - n, x) == 0;
}

/* Whether name ends in one of the extensions of HTML documents (case-insensitive). */
static bool html_name(const char *name, size_t len)
{
	static const char *const exts[] = {".html", ".htm", ".xhtml", ".shtml", ".mhtml"};
	const char *dot = memrchr(name, '.', len);
	if (!dot)
		return true; /* no extension: taken for what libmagic says */
	size_t n = len - (size_t)(dot - name);
	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++)
		if (n == strlen(exts[i]) && strncasecmp(dot, exts[i], n) == 0)
			return true;
	return false;
}

static view view_of(const char *mime, const char *name, size_t name_len, char *sep)
{
	/* the type without its parameters */
	char t[128];
	size_t n = strcspn(mime, "; ");
	if (n >= sizeof(t))
		return V_DOWNLOAD;
	memcpy(t, mime, n);
	t[n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (t[i] >= 'A' && t[i] <= 'Z')
			t[i] = (char)(t[i] - 'A' + 'a');
	if (!strcmp(t, "image/png") || !strcmp(t, "image/jpeg") || !strcmp(t, "image/gif") ||
	    !strcmp(t, "image/webp") || !strcmp(t, "image/svg+xml"))
		return V_IMAGE;
	if (!strcmp(t, "text/csv") || !strcmp(t, "application/csv")) {
		*sep = ',';
		return V_TABLE;
	}
	if (!strcmp(t, "text/tab-separated-values")) {
		*sep = '\t';
		return V_TABLE;
	}
	/* An HTML document is only offered as a download. libmagic also says text/html of
	 * Markdown or plain text that holds a tag: with another extension, such a file is
	 * shown as escaped text, where its markup is inert. */
	if (!strcmp(t, "text/html") || !strcmp(t, "application/xhtml+xml"))
		return html_name(name, name_len) ? V_DOWNLOAD : V_TEXT;
	if (prefix(t, "text/") || !strcmp(t, "application/json") ||
	    !strcmp(t, "application/x-ndjson") || !strcmp(t, "application/xml") ||
	    !strcmp(t, "application/javascript") || !strcmp(t, "application/x-sh") ||
	    !strcmp(t, "application/x-shellscript") || !strcmp(t, "application/toml") ||
	    !strcmp(t, "application/yaml") || !strcmp(t, "application/x-yaml") ||
	    !strcmp(t, "application/sql") || !strcmp(t, "application/x-python") ||
	    !strcmp(t, "application/x-ipynb+json") || !strcmp(t, "application/ld+json") ||
	    suffix(t, n, "+json") || suffix(t, n, "+xml"))
		return V_TEXT;
	return V_DOWNLOAD;
}

/* m bytes of the k at s, fewer when the m-th would cut a UTF-8 character in two. */
static size_t utf8_cut(const char *s, size_t k, size_t m)
{
	if (m >= k)
		return k;
	return utf8_back(s, m);
}

/* The CSV/TSV records, RFC 4180: fields separated by sep, a quoted field may hold sep, CR,
 * LF and "" (a quote); records end at LF, CRLF or a lone CR (old Mac files). A quote left
 * open runs to the end. A byte order mark and blank lines before the header are skipped. */
static void put_table(pw *w, const char *s, size_t len, char sep)
{
	puts_(w, "<div class=\"table\"><table>");
	size_t i = 0, rows = 0, unclosed = 0; /* the record (from 1) whose quote is left open */
	if (len >= 3 && !memcmp(s, "\xef\xbb\xbf", 3))
		i = 3;
	while (i < len && (s[i] == '\n' || s[i] == '\r'))
		i++;
	while (i < len && rows < CSV_ROWS && i < CSV_BYTES) {
		puts_(w, rows == 0 ? "<thead><tr>" : "<tr>");
		const char *cell = rows == 0 ? "th" : "td";
		for (size_t col = 0;; col++) {
			if (col == CSV_COLS) {
				putf(w, "<%s>\xe2\x80\xa6</%s>", cell, cell);
				w->mute = true;
			}
			putf(w, "<%s>", cell);
			size_t shown = 0;
			bool quoted = i < len && s[i] == '"';
			if (quoted) {
				i++;
				for (;;) {
					size_t st = i;
					while (i < len && s[i] != '"')
						i++;
					size_t k = i - st;
					if (shown < CSV_CELL_MAX)
						put_text(w, s + st,
							 utf8_cut(s + st, k, CSV_CELL_MAX - shown),
							 ESC_PRE);
					shown += k;
					if (i >= len) {
						unclosed = rows + 1;
						break;
					}
					if (i + 1 < len && s[i + 1] == '"') {
						if (shown++ < CSV_CELL_MAX)
							puts_(w, "&quot;");
						i += 2;
						continue;
					}
					i++; /* the closing quote */
					break;
				}
			}
			/* unquoted text (or what follows a closing quote) up to the separator */
			size_t st = i;
			while (i < len && s[i] != sep && s[i] != '\n' && s[i] != '\r')
				i++;
			size_t k = i - st;
			if (shown < CSV_CELL_MAX)
				put_text(w, s + st, utf8_cut(s + st, k, CSV_CELL_MAX - shown), ESC_PRE);
			shown += k;
			if (shown > CSV_CELL_MAX)
				puts_(w, "\xe2\x80\xa6");
			putf(w, "</%s>", cell);
			if (i < len && s[i] == sep) {
				i++;
				continue;
			}
			if (i < len && s[i] == '\r')
				i++;
			if (i < len && s[i] == '\n')
				i++;
			w->mute = false;
			break;
		}
		puts_(w, rows == 0 ? "</tr></thead><tbody>\n" : "</tr>\n");
		rows++;
	}
	if (rows == 0)
		puts_(w, "<tbody>");
	puts_(w, "</tbody></table></div>");
	if (i < len)
		putf(w, "<p class=\"note\">The first %zu rows are shown.</p>", rows);
	else if (unclosed)
		putf(w, "<p class=\"note\">Record %zu opens a quote that is never closed: the rest "
			"of the file is its last cell.</p>", unclosed);
}

static void put_lines(pw *w, const char *s, size_t len)
{
	size_t i = 0, lines = 0;
	while (i < len && lines < TEXT_LINES && i < TEXT_BYTES) {
		const char *nl = memchr(s + i, '\n', len - i);
		i = nl ? (size_t)(nl - s) + 1 : len;
		lines++;
	}
	bool cut_bytes = i > TEXT_BYTES;
	size_t shown = cut_bytes ? TEXT_BYTES : i;
	/* never cut a UTF-8 character in two */
	if (cut_bytes)
		shown = utf8_back(s, shown);
	puts_(w, "<pre>");
	put_text(w, s, shown, ESC_PRE);
	puts_(w, "</pre>");
	if (shown < len) {
		size_t total = lines;
		for (const char *p = s + i; p < s + len;) {
			const char *nl = memchr(p, '\n', (size_t)(s + len - p));
			total++;
			p = nl ? nl + 1 : s + len;
		}
		if (cut_bytes)
			putf(w, "<p class=\"note\">The first %zu bytes are shown.</p>", shown);
		else
			putf(w, "<p class=\"note\">The first %d of %zu lines are shown.</p>",
			     TEXT_LINES, total);
	}
}

/* Whether put_name shows some byte of s as an escape (a backslash, a control character,
 * bytes that are not UTF-8): then the escapes are what the shell must read. */
static bool shown_escaped(const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\\' || c < 0x20 || c == 0x7f)
			return true;
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t k = hv_utf8_char_length(s + i, len - i);
		if (k == 0 || (k == 2 && c == 0xc2 && (unsigned char)s[i + 1] <= 0x9f) ||
		    is_bidi_control((const unsigned char *)s + i, k))
			return true;
		i += k;
	}
	return false;
}

/* A name as one shell word (escaped for HTML by put_name): in single quotes, or, when the page
 * shows some byte of it as \xNN or \\, in bash's $'...', which reads those escapes back into
 * the name's own bytes. */
static void put_shell_word(pw *w, const char *s, size_t len)
{
	bool ansi = shown_escaped(s, len);
	puts_(w, ansi ? "$&#39;" : "&#39;");
	size_t st = 0;
	for (size_t i = 0; i <= len; i++)
		if (i == len || s[i] == '\'') {
			put_name(w, s + st, i - st);
			if (i < len)
				puts_(w, ansi ? "\\&#39;" : "&#39;\\&#39;&#39;");
			st = i + 1;
		}
	puts_(w, "&#39;");
}

/* "--db DB " of a command the page suggests, when the page was given its database. */
static void put_db_option(pw *w)
{
	if (!w->db)
		return;
	/* A URI's password is not written into a page that may be shared; a file's path is
	 * written as it is (its bytes, whatever they are). */
	char masked[4096];
	const char *db = w->db;
	if (hvst_is_pg_uri(db)) {
		hvst_mask_secret(db, masked, sizeof(masked));
		db = masked;
	}
	puts_(w, "--db ");
	put_shell_word(w, db, strlen(db));
	puts_(w, " ");
}

static void put_get_command(pw *w, const hv_artifact_row *a)
{
	puts_(w, "<code class=\"cmd\">harvest history get ");
	put_db_option(w);
	if (a->artifact_id > 0)
		putf(w, "%lld", (long long)a->artifact_id);
	else
		puts_(w, a->sha256);
	/* `-o -` is standard output: a file named "-" is saved as ./- */
	puts_(w, a->name_len == 1 && a->name[0] == '-' ? " -o ./" : " -o ");
	put_shell_word(w, a->name, a->name_len);
	puts_(w, "</code>");
}

static void page_artifact(pw *w, const hv_artifact_row *a)
{
	char sep = ',';
	view v = view_of(a->mime_type, a->name, a->name_len, &sep);
	putf(w, "<article class=\"card art\"");
	if (a->artifact_id > 0)
		putf(w, " id=\"artifact-%lld\"", (long long)a->artifact_id);
	puts_(w, "><header><h3>");
	size_t dirlen = a->path_len > a->name_len ? a->path_len - a->name_len : 0;
	if (dirlen) {
		puts_(w, "<span class=\"dir\">");
		put_name(w, a->path, dirlen);
		puts_(w, "</span>");
	}
	put_name(w, a->path + dirlen, a->path_len - dirlen);
	puts_(w, "</h3><div class=\"facts\"><span class=\"mono\">");
	put_cname(w, a->mime_type);
	puts_(w, "</span><span>");
	put_size(w, a->size);
	if (a->size >= 1024)
		putf(w, " (%llu bytes)", (unsigned long long)a->size);
	puts_(w, "</span><span class=\"mono sha\">sha256 ");
	put_cname(w, a->sha256);
	puts_(w, "</span></div></header>\n<div class=\"body\">");
	const unsigned char *data = a->content;
	size_t len = a->content_len;
	if (!data) {
		puts_(w, "<p class=\"note\">The content was not stored");
		puts_(w, w->recorded ? " (collected with --no-content).</p>" : ".</p>");
	} else if (len == 0) {
		puts_(w, "<p class=\"note\">empty</p>");
	} else if (w->written > PAGE_CONTENT_MAX) {
		puts_(w, "<p class=\"note\">Not shown: the page is over ");
		put_size(w, PAGE_CONTENT_MAX);
		puts_(w, w->recorded ? " already; fetch it with:</p>" : " already.</p>");
		if (w->recorded)
			put_get_command(w, a);
	} else if ((v == V_IMAGE || v == V_DOWNLOAD) && len > w->embed_max) {
		puts_(w, "<p class=\"note\">Too large to embed (over ");
		put_size(w, w->embed_max);
		puts_(w, w->recorded ? "); fetch it with:</p>" : ").</p>");
		if (w->recorded)
			put_get_command(w, a);
	} else if (v == V_IMAGE) {
		char t[128];
		size_t n = strcspn(a->mime_type, "; ");
		n = n < sizeof(t) ? n : sizeof(t) - 1;
		memcpy(t, a->mime_type, n);
		t[n] = '\0';
		puts_(w, "<div class=\"img\"><img loading=\"lazy\" alt=\"");
		put_name(w, a->name, a->name_len);
		puts_(w, "\" src=\"data:");
		put_cname(w, t);
		puts_(w, ";base64,");
		put_base64(w, data, len);
		puts_(w, "\"></div>");
	} else if (v == V_TABLE || v == V_TEXT) {
		if (v == V_TABLE)
			put_table(w, (const char *)data, len, sep);
		else
			put_lines(w, (const char *)data, len);
		/* Its start is shown; the whole of a file too large to embed is fetched. */
		if (len > w->embed_max && w->recorded) {
			puts_(w, "<p class=\"note\">The whole file (over ");
			put_size(w, w->embed_max);
			puts_(w, "): </p>");
			put_get_command(w, a);
		}
	} else {
		/* octet-stream whatever the type: the browser saves it and never renders it */
		puts_(w, "<a class=\"dl\" download=\"");
		put_text(w, a->name, a->name_len, ESC_FILE);
		puts_(w, "\" href=\"data:application/octet-stream;base64,");
		put_base64(w, data, len);
		puts_(w, "\">\xe2\xac\x87 Download ");
		put_name(w, a->name, a->name_len);
		puts_(w, "</a>");
	}
	puts_(w, "</div></article>\n");
}

/* The skipped list as the history keeps it: [{"path","reason","size","error"?}...], under a
 * heading that counts total; w NULL: only counted. Returns how many entries were read. */
/* The line that ends a list cut short: where the rest is (the page is all a --format html
 * command prints, so "the JSON result" would be nowhere). */
static void put_more(pw *w, size_t more)
{
	putf(w, "and %zu more: ", more);
	if (w->run_id > 0) {
		puts_(w, "<code class=\"cmd\">harvest history show ");
		put_db_option(w);
		putf(w, "%lld</code> lists them all", (long long)w->run_id);
	} else {
		puts_(w, "the same command with <code>--format json</code> lists them all");
	}
}

static size_t skipped_rows(pw *w, const char *json, size_t total)
{
	const char *p = json ? json : "[]", *end = p + strlen(p);
	sbuf key = {0}, path = {0}, reason = {0}, err = {0};
	size_t n = 0;
	bool ok = true;
	p = skip_ws(p, end);
	if (p >= end || *p != '[')
		ok = false;
	else
		p = skip_ws(p + 1, end);
	while (ok && p < end && *p == '{') {
		p = skip_ws(p + 1, end);
		path.n = reason.n = err.n = 0;
		const char *size = NULL;
		size_t size_len = 0;
		while (ok && p < end && *p == '"') {
			ok = json_string(&p, end, &key);
			p = skip_ws(p, end);
			if (!ok || p >= end || *p != ':') {
				ok = false;
				break;
			}
			p = skip_ws(p + 1, end);
			sbuf *dst = !strcmp(key.p, "path") ? &path
				    : !strcmp(key.p, "reason") ? &reason
				    : !strcmp(key.p, "error") ? &err
								: NULL;
			if (p < end && *p == '"') {
				sbuf junk = {0};
				ok = json_string(&p, end, dst ? dst : &junk);
				free(junk.p);
			} else {
				const char *v;
				size_t vl;
				ok = json_scalar(&p, end, &v, &vl);
				if (ok && !strcmp(key.p, "size") && vl && v[0] >= '0' && v[0] <= '9') {
					size = v;
					size_len = vl;
				}
			}
			p = skip_ws(p, end);
			if (p < end && *p == ',')
				p = skip_ws(p + 1, end);
		}
		if (!ok || p >= end || *p != '}')
			break;
		p = skip_ws(p + 1, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
		if (n++ == 0 && w)
			putf(w, "<h2 id=\"skipped\">Skipped <span class=\"count\">%zu</span></h2>\n"
				"<div class=\"card table list\"><table><thead><tr><th>Path</th>"
				"<th>Reason</th><th>Size</th></tr></thead><tbody>\n",
			     total);
		if (!w || n > SKIPPED_ROWS)
			continue; /* counted, for the row that says how many more */
		puts_(w, "<tr><td class=\"mono\">");
		put_name(w, path.p ? path.p : "", path.n);
		puts_(w, "</td><td>");
		put_name(w, reason.p ? reason.p : "", reason.n);
		if (err.n) {
			puts_(w, ": ");
			put_name(w, err.p, err.n);
		}
		puts_(w, "</td><td>");
		if (size) {
			char num[32];
			size_t k = size_len < sizeof(num) - 1 ? size_len : sizeof(num) - 1;
			memcpy(num, size, k);
			num[k] = '\0';
			put_size(w, strtoull(num, NULL, 10));
		} else {
			puts_(w, "\xe2\x80\x94");
		}
		puts_(w, "</td></tr>\n");
	}
	if (w && n > SKIPPED_ROWS) {
		puts_(w, "<tr><td colspan=\"3\" class=\"note\">");
		put_more(w, n - SKIPPED_ROWS);
		puts_(w, "</td></tr>\n");
	}
	if (w && n)
		puts_(w, "</tbody></table></div>\n");
	free(key.p);
	free(path.p);
	free(reason.p);
	free(err.p);
	return n;
}

static void page_skipped_json(pw *w, const char *json)
{
	skipped_rows(w, json, skipped_rows(NULL, json, 0));
}

static void page_deleted_begin(pw *w, size_t n)
{
	putf(w, "<h2 id=\"deleted\">Deleted <span class=\"count\">%zu</span></h2>\n"
		"<div class=\"card\"><ul class=\"mono\">",
	     n);
	w->deleted_total = n;
	w->deleted_shown = 0;
}

/* The first DELETED_ROWS paths, then one line for the rest (the count is in the heading). */
static void page_deleted_path(pw *w, const char *path, size_t len)
{
	if (w->deleted_shown == DELETED_ROWS) {
		puts_(w, "<li class=\"note\">");
		put_more(w, w->deleted_total - DELETED_ROWS);
		puts_(w, "</li>");
		w->deleted_shown++;
	}
	if (w->deleted_shown > DELETED_ROWS)
		return;
	w->deleted_shown++;
	puts_(w, "<li>");
	put_text(w, path, len, ESC_NAME);
	puts_(w, "</li>");
}

/* Counts the paths of a JSON array of strings (a run's recorded `deleted`), writing each to
 * w when w is not NULL: how many, or -1 when json is not such an array. */
static long deleted_json_each(const char *json, pw *w, sbuf *b)
{
	const char *p = json, *end = json + strlen(json);
	long n = 0;
	p = skip_ws(p, end);
	if (p >= end || *p != '[')
		return -1;
	p = skip_ws(p + 1, end);
	while (p < end && *p == '"') {
		if (!json_string(&p, end, b))
			return -1;
		if (w)
			page_deleted_path(w, b->p, b->n);
		n++;
		p = skip_ws(p, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	return p < end && *p == ']' ? n : -1;
}

/* The Deleted section: the caller's list (o->deleted) when it gives one, else the
 * collection's (c compared with a snapshot) or the recorded run's (deleted_json). */
static void page_deleted(pw *w, const hv_page_opts *o, const hv_collection *c,
			 const char *deleted_json)
{
	if (o->n_deleted > 0) {
		page_deleted_begin(w, o->n_deleted);
		for (size_t i = 0; i < o->n_deleted; i++)
			page_deleted_path(w, o->deleted[i], strlen(o->deleted[i]));
	} else if (c && c->compared && c->n_deleted > 0) {
		page_deleted_begin(w, c->n_deleted);
		for (size_t i = 0; i < c->n_deleted; i++)
			page_deleted_path(w, c->deleted[i].path, c->deleted[i].path_len);
	} else if (deleted_json) {
		sbuf b = {0};
		long n = deleted_json_each(deleted_json, NULL, &b);
		if (n > 0) {
			page_deleted_begin(w, (size_t)n);
			(void)deleted_json_each(deleted_json, w, &b);
		}
		free(b.p);
		if (n <= 0)
			return;
	} else {
		return;
	}
	puts_(w, "</ul></div>\n");
}

static void page_tail(pw *w, const hv_page_opts *o, const hv_collection *c,
		      const char *deleted_json)
{
	page_deleted(w, o, c, deleted_json);
	puts_(w, "<footer>Made by ");
	if (o->generated_by) {
		put_cname(w, o->generated_by);
	} else {
		puts_(w, "harvest ");
		put_cname(w, hv_version());
	}
	puts_(w, " \xc2\xb7 a self-contained page: no scripts, no network.</footer>\n"
		 "</main>\n</body>\n</html>\n");
}

static hv_status pw_end(pw *w)
{
	pw_flush(w);
	if (w->err)
		return hv_error_set(HV_EIO, "writing the page: %s", strerror(w->err));
	return HV_OK;
}

static void pw_init(pw *w, const hv_page_opts *o, hv_page_write_fn fn, void *ctx)
{
	w->fn = fn;
	w->ctx = ctx;
	w->n = 0;
	w->err = 0;
	w->mute = false;
	w->written = 0;
	w->embed_max = o->embed_max ? o->embed_max : HV_PAGE_EMBED_MAX;
	w->db = o->db && *o->db ? o->db : NULL;
}

static void page_outputs(pw *w, const hv_run_row *r)
{
	if (!r->command_json)
		return;
	puts_(w, "<h2 id=\"output\">Output</h2>\n");
	if (!r->ended) {
		/* Nothing of it is known yet: not "empty", which it may not be. */
		puts_(w, "<p class=\"note\">The run has not ended: its output and the files it "
			 "produced are recorded when it does.</p>\n");
		return;
	}
	page_stream(w, "stdout", r->stdout_data, r->stdout_len, r->stdout_truncated);
	page_stream(w, "stderr", r->stderr_data, r->stderr_len, r->stderr_truncated);
}

static void page_artifacts_title(pw *w, uint64_t n, bool ended)
{
	putf(w, "<h2 id=\"artifacts\">Artifacts <span class=\"count\">%llu</span></h2>\n",
	     (unsigned long long)n);
	if (n == 0)
		puts_(w, ended ? "<p class=\"note\">No files were produced.</p>\n"
			       : "<p class=\"note\">None yet: the run has not ended.</p>\n");
}

int hv_page_write_file(void *file, const void *data, size_t len)
{
	errno = 0;
	if (fwrite(data, 1, len, file) != len)
		return -1;
	return 0;
}

/* f's content when it is in c's temporary file (hv_collect_opts.spool_content): read for the
 * page one file at a time (malloc'd in *out), unless the page will only name it (too large to
 * embed, or the page is over PAGE_CONTENT_MAX already: *out stays NULL). *spooled says whether f is spooled at all. HV_OK, or the read's
 * failure. */
static hv_status read_spooled(const pw *w, const hv_collection *c, const hv_output_file *f,
			      unsigned char **out, bool *spooled)
{
	*out = NULL;
	*spooled = !f->content && f->spooled && c->spool;
	if (!*spooled)
		return HV_OK;
	char sep = ',';
	view v = view_of(f->mime_type, f->name, f->name_len, &sep);
	if (((v == V_IMAGE || v == V_DOWNLOAD) && f->content_len > w->embed_max) ||
	    w->written > PAGE_CONTENT_MAX)
		return HV_OK;
	unsigned char *buf = malloc(f->content_len ? f->content_len : 1);
	if (!buf)
		return hv_error_set(HV_ENOMEM, "out of memory");
	hv_status rc = hv_collection_content_read(c, f, 0, buf, f->content_len);
	if (rc != HV_OK) {
		free(buf);
		/* The reason names the temporary file: say which artifact's content it was. */
		char reason[512];
		snprintf(reason, sizeof(reason), "%s", hv_error_last());
		return hv_error_set(rc, "%.*s: %s", (int)f->path_len, f->path, reason);
	}
	*out = buf;
	return HV_OK;
}

hv_status hv_page_write_collection(const hv_run_row *run, const hv_collection *c,
				   const hv_page_opts *o, hv_page_write_fn fn, void *ctx)
{
	HV_NEED(run && fn);
	static const hv_page_opts none;
	if (!o)
		o = &none;
	pw *w = malloc(sizeof(*w));
	if (!w)
		return hv_error_set(HV_ENOMEM, "out of memory");
	pw_init(w, o, fn, ctx);
	w->recorded = run->run_id > 0;
	w->run_id = run->run_id;
	size_t n = c ? c->n_files : 0;
	page_head(w, run, o, n);
	page_outputs(w, run);
	page_artifacts_title(w, n, run->ended || !run->command_json);
	hv_status rc = HV_OK;
	for (size_t i = 0; i < n && rc == HV_OK; i++) {
		const hv_output_file *f = &c->files[i];
		unsigned char *read = NULL;
		bool spooled;
		rc = read_spooled(w, c, f, &read, &spooled);
		if (rc != HV_OK)
			break;
		hv_artifact_row a = {
			.run_id = run->run_id,
			.path = f->path,
			.path_len = f->path_len,
			.name = f->name,
			.name_len = f->name_len,
			.mime_type = f->mime_type,
			.size = f->size,
			.sha256 = f->sha256,
			.content_stored = f->content != NULL,
			.content = f->content,
			.content_len = f->content_len,
		};
		if (f->content && f->content_len == 0)
			a.content = "";
		if (spooled) {
			/* (not read when only its length is shown: "" stands for it, as for an
			 * empty content) */
			a.content_stored = true;
			a.content = read ? (const void *)read : (const void *)"";
		}
		page_artifact(w, &a);
		free(read);
	}
	if (rc != HV_OK) {
		free(w);
		return rc;
	}
	if (c && c->n_skipped) {
		char *sk = hv_collection_skipped_json(c, HV_CASE_SNAKE);
		if (!sk) {
			free(w);
			return hv_error_set(HV_ENOMEM, "out of memory");
		}
		page_skipped_json(w, sk);
		free(sk);
	}
	page_tail(w, o, c, NULL);
	hv_status s = pw_end(w);
	free(w);
	return s;
}

/* The host name the run's owner recorded (the last word of "PID START PIDNS BOOT HOST"):
 * malloc'd, or NULL when the run has no owner (recorded by schema version 1) or it cannot be
 * read. hv_run_row does not carry it; the page shows it when there is one. */
static char *run_host(hv_store *st, int64_t run_id)
{
	sqlite3_stmt *q = NULL;
	char *host = NULL;
	if (sqlite3_prepare_v2(st->db, "SELECT owner FROM runs WHERE id = ?1", -1, &q, NULL) ==
	    SQLITE_OK) {
		sqlite3_bind_int64(q, 1, run_id);
		if (sqlite3_step(q) == SQLITE_ROW) {
			const char *owner = (const char *)sqlite3_column_text(q, 0);
			for (int word = 0; owner && word < 4; word++) {
				owner = strchr(owner, ' ');
				owner = owner ? owner + 1 : NULL;
			}
			if (owner && *owner)
				host = strdup(owner);
		}
	}
	sqlite3_finalize(q);
	return host;
}

void hv_page_opts_init(hv_page_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
}

hv_status hv_page_write_run(hv_store *st, int64_t run_id, const hv_page_opts *o,
			    hv_page_write_fn fn, void *ctx)
{
	HV_NEED(st && fn);
	static const hv_page_opts none;
	if (!o)
		o = &none;
	/* run ids start at 1 (and 0 in a filter means any run) */
	if (run_id < 1)
		return hv_error_set(HV_ENOTFOUND, "no run %lld", (long long)run_id);
	hv_run_filter f = {.run_id = run_id, .with_output = true};
	hv_run_iter *it;
	const hv_run_row *r;
	hv_status s = hv_store_runs(st, &f, &it);
	if (s != HV_OK)
		return s;
	s = hv_run_iter_next(it, &r);
	if (s != HV_OK) {
		hv_run_iter_free(it);
		if (s == HV_DONE)
			return hv_error_set(HV_ENOTFOUND, "no run %lld", (long long)run_id);
		return s;
	}
	pw *w = malloc(sizeof(*w));
	if (!w) {
		hv_run_iter_free(it);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	pw_init(w, o, fn, ctx);
	w->recorded = true;
	w->run_id = run_id;
	/* The host the run was recorded on (--host, else the hostname), else, for runs recorded
	 * before hosts were, the one its owner names. */
	hv_page_opts with_host = *o;
	char *host = o->host || r->host ? NULL : run_host(st, run_id);
	if (host)
		with_host.host = host;
	else if (!o->host && r->host)
		with_host.host = r->host;
	page_head(w, r, &with_host, (size_t)r->artifacts);
	free(host);
	page_outputs(w, r);
	page_artifacts_title(w, r->artifacts, r->ended || !r->command_json);
	/* one artifact (and its content) at a time: the iterator reads row by row */
	hv_artifact_filter af = {.run_id = run_id, .with_content = true};
	hv_artifact_iter *ai;
	s = hv_store_artifacts(st, &af, &ai);
	if (s == HV_OK) {
		const hv_artifact_row *a;
		while (!w->err && (s = hv_artifact_iter_next(ai, &a)) == HV_OK) {
			hv_artifact_row row = *a;
			if (row.content_stored && !row.content)
				row.content = "";
			page_artifact(w, &row);
		}
		hv_artifact_iter_free(ai);
		if (s == HV_DONE || w->err)
			s = HV_OK;
	}
	if (s == HV_OK) {
		page_skipped_json(w, r->skipped_json);
		page_tail(w, o, NULL, r->deleted_json);
		s = pw_end(w);
	}
	hv_run_iter_free(it);
	free(w);
	return s;
}
