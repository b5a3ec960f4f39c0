/* A small, strict JSON reader for tests: see tjson.h. Recursive descent, with a depth limit
 * so that a hostile document cannot blow the stack. */
#include "tjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TJ_MAX_DEPTH 1000

struct tj_value {
	tj_kind kind;
	bool b;
	bool neg;      /* TJ_INT: the value is -mag */
	uint64_t mag;  /* TJ_INT: magnitude */
	double d;      /* TJ_INT and TJ_DOUBLE */
	char *s;       /* TJ_STRING: decoded bytes, NUL-terminated */
	size_t slen;
	size_t n, cap; /* TJ_ARRAY, TJ_OBJECT */
	tj_value **items;
	tj_value **keys; /* TJ_OBJECT: string values, parallel to items */
};

typedef struct tj_parser {
	const unsigned char *p, *end;
	unsigned flags;
	int depth;
} tj_parser;

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		fputs("tjson: out of memory\n", stderr);
		abort();
	}
	return p;
}

static tj_value *new_value(tj_kind kind)
{
	tj_value *v = xrealloc(NULL, sizeof(*v));
	memset(v, 0, sizeof(*v));
	v->kind = kind;
	return v;
}

void tj_free(tj_value *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		tj_free(v->items[i]);
		if (v->keys)
			tj_free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->s);
	free(v);
}

/* The length of the strict UTF-8 sequence at s (at most avail bytes), 0 if there is none.
 * The ranges are those of RFC 3629's table (Unicode 3.9, table 3-7). */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	if (c < 0xC2 || c > 0xF4)
		return 0;
	size_t n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	if (avail < n)
		return 0;
	unsigned lo = 0x80, hi = 0xBF;
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	return n;
}

bool tj_utf8_valid(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < len;) {
		size_t n = utf8_len(u + i, len - i);
		if (!n)
			return false;
		i += n;
	}
	return true;
}

static void skip_ws(tj_parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static bool literal(tj_parser *ps, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
		return false;
	ps->p += n;
	return true;
}

static int hex4(const unsigned char *p, const unsigned char *end)
{
	if (end - p < 4)
		return -1;
	int v = 0;
	for (int i = 0; i < 4; i++) {
		int c = p[i], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static size_t put_utf8(unsigned char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (unsigned char)(0xC0 | cp >> 6);
		o[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xE0 | cp >> 12);
		o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | cp >> 18);
	o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
	o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
	o[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

/* A string, the opening quote at ps->p. Decoding never makes text longer, so the output
 * buffer is the size of the rest of the input. */
static tj_value *parse_string(tj_parser *ps)
{
	ps->p++;
	/* The decoded string is never longer than its JSON text: size the buffer by the text up
	 * to the closing quote, not by the rest of the document (which made big arrays
	 * quadratic). */
	const unsigned char *q = ps->p;
	while (q < ps->end && *q != '"')
		q += *q == '\\' && q + 1 < ps->end ? 2 : 1;
	unsigned char *out = xrealloc(NULL, (size_t)(q - ps->p) + 1), *o = out;
	while (ps->p < ps->end && *ps->p != '"') {
		const unsigned char *p = ps->p;
		if (*p < 0x20)
			goto bad;
		if (*p == 0xED && (ps->flags & TJ_RAW_SURROGATES) && ps->end - p >= 3 &&
		    (p[1] == 0xB2 || p[1] == 0xB3) && (p[2] & 0xC0) == 0x80) {
			*o++ = (unsigned char)((p[1] & 1) << 6 | (p[2] & 0x3F) | 0x80);
			ps->p += 3;
			continue;
		}
		if (*p != '\\') {
			size_t n = utf8_len(p, (size_t)(ps->end - p));
			if (!n)
				goto bad;
			memcpy(o, p, n);
			o += n;
			ps->p += n;
			continue;
		}
		if (ps->end - p < 2)
			goto bad;
		ps->p += 2;
		switch (p[1]) {
		case '"': *o++ = '"'; continue;
		case '\\': *o++ = '\\'; continue;
		case '/': *o++ = '/'; continue;
		case 'b': *o++ = '\b'; continue;
		case 'f': *o++ = '\f'; continue;
		case 'n': *o++ = '\n'; continue;
		case 'r': *o++ = '\r'; continue;
		case 't': *o++ = '\t'; continue;
		case 'u': break;
		default: goto bad;
		}
		int cp = hex4(ps->p, ps->end);
		if (cp < 0)
			goto bad;
		ps->p += 4;
		if (cp >= 0xD800 && cp <= 0xDBFF) {
			int lo = ps->end - ps->p >= 2 && ps->p[0] == '\\' && ps->p[1] == 'u'
					 ? hex4(ps->p + 2, ps->end) : -1;
			if (lo < 0xDC00 || lo > 0xDFFF)
				goto bad; /* a lone high surrogate has no byte meaning */
			ps->p += 6;
			o += put_utf8(o, 0x10000 + ((unsigned)(cp - 0xD800) << 10) + (unsigned)(lo - 0xDC00));
		} else if (cp >= 0xDC00 && cp <= 0xDFFF) {
			if (cp < 0xDC80 || cp > 0xDCFF)
				goto bad; /* surrogateescape only maps bytes 0x80..0xFF */
			*o++ = (unsigned char)(cp - 0xDC00);
		} else {
			o += put_utf8(o, (unsigned)cp);
		}
	}
	if (ps->p >= ps->end)
		goto bad;
	ps->p++;
	*o = '\0';
	tj_value *v = new_value(TJ_STRING);
	v->s = (char *)out;
	v->slen = (size_t)(o - out);
	return v;
bad:
	free(out);
	return NULL;
}

static bool is_digit(const tj_parser *ps)
{
	return ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9';
}

static tj_value *parse_number(tj_parser *ps)
{
	const unsigned char *start = ps->p;
	bool neg = false, integer = true, overflow = false;
	uint64_t mag = 0;
	if (*ps->p == '-')
		neg = true, ps->p++;
	if (!is_digit(ps))
		return NULL;
	if (*ps->p == '0') {
		ps->p++;
	} else {
		while (is_digit(ps)) {
			unsigned d = (unsigned)(*ps->p++ - '0');
			if (mag > (UINT64_MAX - d) / 10)
				overflow = true;
			mag = mag * 10 + d;
		}
	}
	if (ps->p < ps->end && *ps->p == '.') {
		integer = false;
		ps->p++;
		if (!is_digit(ps))
			return NULL;
		while (is_digit(ps))
			ps->p++;
	}
	if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
		integer = false;
		ps->p++;
		if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
			ps->p++;
		if (!is_digit(ps))
			return NULL;
		while (is_digit(ps))
			ps->p++;
	}
	char tmp[512];
	size_t n = (size_t)(ps->p - start);
	if (n >= sizeof(tmp))
		n = sizeof(tmp) - 1; /* only the double's precision suffers */
	memcpy(tmp, start, n);
	tmp[n] = '\0';
	tj_value *v = new_value(integer && !overflow ? TJ_INT : TJ_DOUBLE);
	v->neg = neg;
	v->mag = mag;
	v->d = strtod(tmp, NULL);
	return v;
}

static tj_value *parse_value(tj_parser *ps);

static void push(tj_value *c, tj_value *item, tj_value *key)
{
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 4;
		c->items = xrealloc(c->items, c->cap * sizeof(*c->items));
		if (c->kind == TJ_OBJECT)
			c->keys = xrealloc(c->keys, c->cap * sizeof(*c->keys));
	}
	if (key)
		c->keys[c->n] = key;
	c->items[c->n++] = item;
}

/* An array or an object, the opening bracket at ps->p. */
static tj_value *parse_container(tj_parser *ps, bool object)
{
	tj_value *c = new_value(object ? TJ_OBJECT : TJ_ARRAY);
	unsigned char close = object ? '}' : ']';
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == close) {
		ps->p++;
		return c;
	}
	for (;;) {
		tj_value *key = NULL;
		skip_ws(ps);
		if (object) {
			if (ps->p >= ps->end || *ps->p != '"' || !(key = parse_string(ps)))
				goto bad;
			for (size_t i = 0; i < c->n; i++)
				if (c->keys[i]->slen == key->slen && !memcmp(c->keys[i]->s, key->s, key->slen))
					goto bad_key; /* a repeated key */
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p++ != ':')
				goto bad_key;
		}
		tj_value *item = parse_value(ps);
		if (!item)
			goto bad_key;
		push(c, item, key);
		skip_ws(ps);
		if (ps->p < ps->end && *ps->p == ',') {
			ps->p++;
			continue;
		}
		if (ps->p < ps->end && *ps->p == close) {
			ps->p++;
			return c;
		}
		goto bad;
bad_key:
		tj_free(key);
		goto bad;
	}
bad:
	tj_free(c);
	return NULL;
}

static tj_value *parse_value(tj_parser *ps)
{
	skip_ws(ps);
	if (ps->p >= ps->end || ps->depth >= TJ_MAX_DEPTH)
		return NULL;
	tj_value *v = NULL;
	switch (*ps->p) {
	case '{':
	case '[':
		ps->depth++;
		v = parse_container(ps, *ps->p == '{');
		ps->depth--;
		return v;
	case '"':
		return parse_string(ps);
	case 't':
		if (literal(ps, "true"))
			(v = new_value(TJ_BOOL))->b = true;
		return v;
	case 'f':
		return literal(ps, "false") ? new_value(TJ_BOOL) : NULL;
	case 'n':
		return literal(ps, "null") ? new_value(TJ_NULL) : NULL;
	default:
		return parse_number(ps);
	}
}

tj_value *tj_parse_flags(const char *text, size_t len, unsigned flags)
{
	tj_parser ps = {(const unsigned char *)text, (const unsigned char *)text + len, flags, 0};
	tj_value *v = parse_value(&ps);
	skip_ws(&ps);
	if (v && ps.p != ps.end) {
		tj_free(v);
		return NULL;
	}
	return v;
}

tj_value *tj_parse(const char *text, size_t len)
{
	return tj_parse_flags(text, len, 0);
}

tj_value *tj_parse_lines(const char *text, size_t len, size_t *count)
{
	tj_value *all = new_value(TJ_ARRAY);
	size_t i = 0;
	while (i < len) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t end = nl ? (size_t)(nl - text) : len;
		tj_value *doc = tj_parse(text + i, end - i);
		if (!doc) {
			tj_free(all);
			if (count)
				*count = 0;
			return NULL;
		}
		push(all, doc, NULL);
		i = end + 1;
	}
	if (count)
		*count = all->n;
	return all;
}

tj_kind tj_type(const tj_value *v)
{
	return v ? v->kind : TJ_NULL;
}

bool tj_is_null(const tj_value *v)
{
	return v && v->kind == TJ_NULL;
}

const tj_value *tj_get(const tj_value *v, const char *key)
{
	if (!v || v->kind != TJ_OBJECT)
		return NULL;
	size_t n = strlen(key);
	for (size_t i = 0; i < v->n; i++)
		if (v->keys[i]->slen == n && !memcmp(v->keys[i]->s, key, n))
			return v->items[i];
	return NULL;
}

size_t tj_len(const tj_value *v)
{
	return v && (v->kind == TJ_ARRAY || v->kind == TJ_OBJECT) ? v->n : 0;
}

const tj_value *tj_at(const tj_value *v, size_t i)
{
	return i < tj_len(v) ? v->items[i] : NULL;
}

const char *tj_key(const tj_value *v, size_t i, size_t *len)
{
	if (!v || v->kind != TJ_OBJECT || i >= v->n)
		return NULL;
	if (len)
		*len = v->keys[i]->slen;
	return v->keys[i]->s;
}

const char *tj_str(const tj_value *v, size_t *len)
{
	if (!v || v->kind != TJ_STRING)
		return NULL;
	if (len)
		*len = v->slen;
	return v->s;
}

int64_t tj_int(const tj_value *v)
{
	if (!v || v->kind != TJ_INT)
		return 0;
	if (v->neg) {
		if (v->mag == (uint64_t)INT64_MAX + 1)
			return INT64_MIN;
		return v->mag <= INT64_MAX ? -(int64_t)v->mag : 0;
	}
	return v->mag <= INT64_MAX ? (int64_t)v->mag : 0;
}

uint64_t tj_uint(const tj_value *v)
{
	return v && v->kind == TJ_INT && (!v->neg || v->mag == 0) ? v->mag : 0;
}

double tj_double(const tj_value *v)
{
	return v && (v->kind == TJ_INT || v->kind == TJ_DOUBLE) ? v->d : 0;
}

bool tj_bool(const tj_value *v)
{
	return v && v->kind == TJ_BOOL && v->b;
}
