/* Fuzz target: the literal prefilter of libmagic's regular expressions (src/lib/mime_rx.c).
 *
 * The filter may answer "no match" without running an expression only when glibc's regexec would
 * say the same: every literal condition hvm_rx_analyze() derives must hold in every subject the
 * expression matches.
 *
 * Input: byte 0 chooses the flags (bit 0 REG_NEWLINE, bit 1 REG_ICASE, bit 2 basic syntax instead
 * of REG_EXTENDED); then the expression up to the first NUL byte; the rest is the subject.
 * Expressions that would take glibc itself down a slow or unbounded path are skipped: back
 * references (its regexec recurses without bound on some), more than 2 intervals or a bound above 9
 * (each repeats a copy of the subtree: three nested "{0,9}" make 729 copies, and glibc's regexec
 * then takes 10 s on a 500-byte subject under the sanitizers), more than 8 quantifiers in all
 * (stacked ones make its automaton's states explode), more than 12 groups or 96 bytes.
 *
 * Checked, against glibc's regcomp and regexec (the reference; not harvest's code):
 *   - the condition is well formed: at most HVM_RX_LITS literals, each non-empty, NUL-free and
 *     at most HVM_RX_LIT_MAX bytes long;
 *   - for the subject, for the subject with each literal of the condition appended, and for the
 *     expression's own text with its backslashes dropped (a subject that often matches):
 *     whenever regexec matches, hvm_rx_may_match() says it may. */
#include "mime_internal.h"

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_regex: check failed: %s (%s:%d)\n", #cond, __FILE__, \
				__LINE__);                                                         \
			fprintf(stderr, "  " __VA_ARGS__);                                         \
			fprintf(stderr, "\n");                                                     \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* Whether glibc can be trusted to compile and run pat quickly. */
static bool tame(const char *pat)
{
	size_t len = strlen(pat);
	int braces = 0, groups = 0, quants = 0;
	if (len > 96)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (pat[i] == '\\' && i + 1 < len && pat[i + 1] >= '0' && pat[i + 1] <= '9')
			return false;
		if (pat[i] == '(')
			groups++;
		if (strchr("*+?", pat[i]))
			quants++;
		if (pat[i] != '{')
			continue;
		braces++;
		/* the bounds after it: each at most 9 */
		for (size_t j = i + 1, digits = 0; j < len && pat[j] != '}'; j++) {
			digits = (pat[j] >= '0' && pat[j] <= '9') ? digits + 1 : 0;
			if (digits > 1)
				return false;
		}
	}
	return braces <= 2 && groups <= 12 && braces + quants <= 8;
}

static void check_subject(const regex_t *re, const struct hvm_rx_need *need, const char *pat,
			  int cflags, const char *subject)
{
	regmatch_t m;
	bool does = regexec(re, subject, 1, &m, 0) == 0;
	if (does)
		CHECK(hvm_rx_may_match(need, subject),
		      "/%s/ (flags %d) matches \"%s\", which the filter rejects", pat, cflags,
		      subject);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int cflags = ((data[0] & 1) ? REG_NEWLINE : 0) | ((data[0] & 2) ? REG_ICASE : 0) |
		     ((data[0] & 4) ? 0 : REG_EXTENDED);
	const uint8_t *p = data + 1, *end = data + size;
	const uint8_t *nul = memchr(p, '\0', (size_t)(end - p));
	if (!nul)
		return 0;
	char *pat = strndup((const char *)p, (size_t)(nul - p));
	size_t slen = (size_t)(end - (nul + 1));
	char *subject = malloc(slen + 1);
	if (!pat || !subject) {
		free(pat);
		free(subject);
		return 0;
	}
	memcpy(subject, nul + 1, slen);
	subject[slen] = '\0'; /* regexec and the filter both stop at the first NUL */
	regex_t re;
	if (!tame(pat) || regcomp(&re, pat, cflags) != 0) {
		free(pat);
		free(subject);
		return 0;
	}
	struct hvm_rx_need need;
	hvm_rx_analyze(pat, cflags, &need);
	CHECK(need.n <= HVM_RX_LITS, "%u literals", need.n);
	for (unsigned i = 0; i < need.n; i++) {
		size_t l = strlen(need.lit[i]);
		CHECK(l > 0 && l == need.len[i] && l <= HVM_RX_LIT_MAX,
		      "/%s/: literal %u has length %zu, recorded %u", pat, i, l, need.len[i]);
	}
	check_subject(&re, &need, pat, cflags, subject);

	size_t cap = strlen(subject) + HVM_RX_LIT_MAX + strlen(pat) + 1;
	char *var = malloc(cap);
	if (var) {
		for (unsigned i = 0; i < need.n; i++) {
			snprintf(var, cap, "%s%s", subject, need.lit[i]);
			check_subject(&re, &need, pat, cflags, var);
		}
		size_t k = 0;
		for (const char *c = pat; *c; c++)
			if (*c != '\\')
				var[k++] = *c;
		var[k] = '\0';
		check_subject(&re, &need, pat, cflags, var);
		free(var);
	}
	regfree(&re);
	free(pat);
	free(subject);
	return 0;
}
