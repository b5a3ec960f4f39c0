/* The literal prefilter of libmagic's regular expressions (src/lib/mime_rx.c): the literals it
 * derives from expressions written to exercise each rule of the syntax; its soundness against
 * glibc's own regexec on random expressions and subjects (a subject the filter rejects is never one
 * regexec matches); and libmagic behind the rewritten GOT entries giving the same answers as
 * libmagic without them, while most expressions are answered by the filter. */
#include "testutil.h"
#include "mime_internal.h"

#include <magic.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The condition as "lit|lit|...", "" for none. */
static void show(const struct hvm_rx_need *need, char *out, size_t cap)
{
	size_t at = 0;
	out[0] = '\0';
	for (unsigned i = 0; i < need->n; i++)
		at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? "|" : "", need->lit[i]);
}

static void expect(const char *pattern, int cflags, const char *want)
{
	struct hvm_rx_need need;
	char got[HVM_RX_LITS * (HVM_RX_LIT_MAX + 1) + 1];
	hvm_rx_analyze(pattern, cflags, &need);
	show(&need, got, sizeof(got));
	if (strcmp(got, want) != 0)
		fail_msg("/%s/ (flags %d): required \"%s\", expected \"%s\"", pattern, cflags, got,
			 want);
}

static void test_literals(void **state)
{
	(void)state;
	const int E = REG_EXTENDED, N = REG_EXTENDED | REG_NEWLINE;
	expect("abc", E, "abc");
	expect("abc", 0, "");             /* basic syntax: not modelled */
	expect("abc", E | REG_ICASE, ""); /* case-folded: not modelled */
	expect("ab?c", E, "a");           /* b optional: "a" and "c" each required */
	expect("abcd?ef", E, "abc");      /* the longest of "abc" and "ef" */
	expect("ab+cd", E, "ab");         /* one b at least, but not "bc" */
	expect("x*yz", E, "yz");
	expect("a{0,3}bc", E, "bc");
	expect("a{2}bcd", E, "bcd");
	expect("a{2,}b", E, "a");
	expect("a{,3}b", E, ""); /* an interval it does not read */
	expect("a{x}", E, "");
	expect("*abc", E, ""); /* nothing to repeat */
	expect("^(import|export).* from ", N, " from ");
	expect("^[[:space:]]*(class|module)[[:space:]][A-Z]", N, "class|module");
	expect("^(:|;)", N, ":|;");
	expect("(foo|ba*r)", E, "foo|b");
	expect("(foo|.*)", E, ""); /* a branch that needs nothing */
	expect("ab|", E, "");      /* an empty branch */
	expect("(foo)*bar", E, "bar");
	expect("(foobar)?x", E, "x");
	expect("(foobar)+x", E, "foobar");
	expect("(foobar){0,2}x", E, "x");
	expect("((ab|cd)ef|gh)", E, "ef|gh");
	expect("a|b|c|d|e|f|g|h|i", E, ""); /* more alternatives than it keeps */
	expect("a|b|c|d|e|f|g|h", E, "a|b|c|d|e|f|g|h");
	expect("\\.asciiz", N, ".asciiz");
	expect("\\(ns[[:space:]]", N, "(ns");
	expect("\\<word", E, "word"); /* \< is an anchor, not '<' */
	expect("a\\`bc", E, "bc");
	expect("\\wfoo", E, "foo"); /* \w is a class */
	expect("ab\\1cd", E, "ab"); /* a back reference */
	expect("[abc]def", E, "def");
	expect("[]x]yz", E, "yz"); /* ']' first is a member */
	expect("[^]x]yz", E, "yz");
	expect("[[:space:]]+end", E, "end");
	expect("[[.-.]]xy", E, "xy");
	expect("[a\\]bcd", E, "");   /* a backslash in a bracket: not modelled */
	expect("[[:alpha:]", E, ""); /* unterminated */
	expect("abc(", E, "");
	expect("a)bc", E, "");
	expect("}ab", E, "}ab"); /* a lone '}' is an ordinary character */
	expect("ab$c", E, "ab");
	expect("a.b", E, "a");
	expect("a\nbc", N, "a\nbc");
	expect("", E, "");
	expect("0123456789012345678901234567890123456789", E, "01234567890123456789012345678901");
	char deep[64] = "";
	for (int i = 0; i < 20; i++)
		strcat(deep, "(");
	strcat(deep, "abc");
	for (int i = 0; i < 20; i++)
		strcat(deep, ")");
	expect(deep, E, ""); /* nested deeper than it follows */
}

/* ---- Soundness against glibc ---- */

static uint64_t rng = 0x243f6a8885a308d3ull;

static unsigned roll(unsigned n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng % n);
}

struct text {
	char s[256];
	size_t n;
};

static void put(struct text *t, const char *s)
{
	size_t l = strlen(s);
	if (t->n + l < sizeof(t->s)) {
		memcpy(t->s + t->n, s, l);
		t->n += l;
		t->s[t->n] = '\0';
	}
}

/* A random expression over a small alphabet, with every construct the analysis reads or refuses but
 * back references (glibc's regexec recurses without bound on some of them; the table above covers
 * how the analysis reads one). */
static void gen(struct text *t, int depth)
{
	static const char *const atoms[] = {"a",           "b",     "c",   "}",    " ",    "\n",
					    "ab",          "ba",    ".",   "^",    "$",    "\\.",
					    "\\(",         "\\<",   "\\w", "[ab]", "[^a]", "[]a]",
					    "[[:space:]]", "[a\\]", "{",   "*",    "|"};
	static const char *const quants[] = {"",  "",      "",    "",     "*",    "+",
					     "?", "{0,2}", "{1}", "{2,}", "{,2}", "+?"};
	int branches = roll(4) == 0 ? 2 + (int)roll(2) : 1;
	for (int b = 0; b < branches; b++) {
		if (b)
			put(t, "|");
		int pieces = 1 + (int)roll(5);
		for (int p = 0; p < pieces; p++) {
			if (depth > 0 && roll(5) == 0) {
				put(t, "(");
				gen(t, depth - 1);
				put(t, ")");
			} else {
				put(t, atoms[roll(sizeof(atoms) / sizeof(atoms[0]))]);
			}
			put(t, quants[roll(sizeof(quants) / sizeof(quants[0]))]);
		}
	}
}

static void test_sound_against_glibc(void **state)
{
	(void)state;
	static const char alphabet[] = "aabbcc} \n.(<w";
	int patterns = UNDER_VALGRIND() ? 3000 : 30000;
	unsigned long compiled = 0, conditioned = 0, rejected = 0, matched = 0;
	for (int i = 0; i < patterns; i++) {
		struct text pat = {.n = 0};
		gen(&pat, 2);
		int cflags = REG_EXTENDED | (roll(2) ? REG_NEWLINE : 0) | (roll(8) ? 0 : REG_ICASE);
		regex_t re;
		if (regcomp(&re, pat.s, cflags) != 0)
			continue;
		compiled++;
		struct hvm_rx_need need;
		hvm_rx_analyze(pat.s, cflags, &need);
		conditioned += need.n > 0;
		for (int k = 0; k < 24; k++) {
			struct text subj = {.n = 0};
			int len = (int)roll(24);
			for (int c = 0; c < len; c++) {
				if (need.n && roll(6) == 0) {
					put(&subj, need.lit[roll(need.n)]);
				} else {
					char one[2] = {alphabet[roll(sizeof(alphabet) - 1)], '\0'};
					put(&subj, one);
				}
			}
			regmatch_t m;
			bool may = hvm_rx_may_match(&need, subj.s);
			bool does = regexec(&re, subj.s, 1, &m, 0) == 0;
			rejected += !may;
			matched += does;
			if (does && !may)
				fail_msg("/%s/ (flags %d) matches \"%s\", which the filter rejects",
					 pat.s, cflags, subj.s);
		}
		regfree(&re);
	}
	/* Not vacuous: many expressions compiled and got a condition, and the filter both passed
	 * matching subjects and rejected others. */
	print_message("%lu expressions compiled, %lu with a condition; %lu subjects "
		      "matched, %lu "
		      "rejected by the filter\n",
		      compiled, conditioned, matched, rejected);
	assert_true(compiled > (unsigned long)patterns / 4);
	assert_true(conditioned > compiled / 4);
	assert_true(matched > (unsigned long)patterns);
	assert_true(rejected > (unsigned long)patterns / 4);
}

/* ---- libmagic through the rewritten entries ---- */

static const char *const samples[] = {
    "import x from './x.js';\nexport default function f() { return x; }\n",
    "const fs = require('fs');\nmodule.exports = { fs };\n",
    "require 'json'\nmodule Foo\n  class Bar < Base\n    def baz\n    end\n  "
    "end\nend\n",
    "#include <stdio.h>\nstruct s { int a; };\nint main(void) { char *p = 0; "
    "return 0; }\n",
    "#include <vector>\nnamespace n {\nclass A {\npublic:\n  virtual "
    "~A();\n};\n}\n",
    "#!/usr/bin/perl\nuse strict;\nprint \"hi\\n\";\n",
    "CFLAGS = -O2\nall: prog\nprog: prog.o\n\t$(CC) -o $@ $^\n",
    "\t.file \"a.c\"\n\t.text\n\t.globl main\n\t.type main, "
    "@function\nmain:\n\tret\n",
    "1\n00:00:01,000 --> 00:00:02,000\nHello\n\n2\n00:00:03,000 --> "
    "00:00:04,000\nWorld\n",
    "(ns example.core\n  (:require [clojure.string :as s]))\n(defn f [] 1)\n",
    "from os import path\nimport sys\n\nclass A:\n    pass\n\ndef f():\n    "
    "return 1\n",
    "[version]\nsignature=\"$CHICAGO$\"\n[strings]\nx=1\n",
    "Plain words, nothing more, on a line of their own.\n",
    "",
};
enum { N_SAMPLES = sizeof(samples) / sizeof(samples[0]) };

/* One answer per line, from a fresh libmagic handle. */
static char *answers(void)
{
	magic_t m = magic_open(MAGIC_MIME_TYPE | MAGIC_NO_COMPRESS_FORK);
	if (!m || magic_load(m, NULL) != 0)
		return NULL;
	size_t cap = 4096, at = 0;
	char *out = tu_xmalloc(cap);
	out[0] = '\0';
	for (int i = 0; i < N_SAMPLES; i++) {
		const char *r = magic_buffer(m, samples[i], strlen(samples[i]));
		at += (size_t)snprintf(out + at, cap - at, "%s\n", r ? r : "(error)");
	}
	magic_close(m);
	return out;
}

struct hooked {
	int fd; /* where the child writes "hooked skipped\n" and its answers */
};

static int hooked_child(void *arg)
{
	struct hooked *h = arg;
	bool hooked = hvm_rx_hook_libmagic();
	char *a = answers();
	if (!a)
		return 2;
	dprintf(h->fd, "%d %lu\n%s", hooked ? 1 : 0, hvm_rx_skipped(), a);
	free(a);
	return 0;
}

static void test_libmagic_same_answers(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	struct hooked h = {.fd = p[1]};
	/* The child's whole output fits in the pipe's buffer: it is read after the child ends. */
	assert_int_equal(tu_in_child(hooked_child, &h), 0);
	close(p[1]);
	char buf[8192];
	size_t got = 0;
	ssize_t r;
	while ((r = read(p[0], buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)r;
	close(p[0]);
	buf[got] = '\0';
	int hooked = 0;
	unsigned long skipped = 0;
	assert_int_equal(sscanf(buf, "%d %lu", &hooked, &skipped), 2);
	assert_int_equal(hooked, 1);
	const char *child = strchr(buf, '\n') + 1;

	/* This process's libmagic was never rerouted: its answers are libmagic's own.
	 */
	assert_int_equal(hvm_rx_skipped(), 0);
	char *own = answers();
	assert_non_null(own);
	assert_string_equal(child, own);
	/* The samples reach libmagic's expressions, and most of those are decided by the filter. */
	print_message("skipped %lu expressions in the child; answers:\n%s", skipped, own);
	assert_true(skipped > 100);
	int distinct = 0;
	for (const char *l = own; *l; l = strchr(l, '\n') + 1) {
		size_t len = (size_t)(strchr(l, '\n') - l);
		bool seen = false;
		for (const char *e = own; e < l; e = strchr(e, '\n') + 1)
			if ((size_t)(strchr(e, '\n') - e) == len && memcmp(e, l, len) == 0)
				seen = true;
		distinct += !seen;
	}
	assert_true(distinct >= 6);
	free(own);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_literals),
	    cmocka_unit_test(test_sound_against_glibc),
	    cmocka_unit_test(test_libmagic_same_answers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
