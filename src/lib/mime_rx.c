/* libmagic's regular expressions, prefiltered by the literals every match must contain.
 *
 * A third of libmagic's time on text files goes to glibc's regexec(): about 180 of the database's
 * entries are POSIX extended expressions ("^[[:space:]]*(class|module)[[:space:]]",
 * "^(import|export).* from "), each run over up to several KiB of every text file, and almost none
 * of them match. glibc has no literal prefilter: it walks its automaton over the whole buffer. Most
 * of these expressions cannot match unless some fixed string occurs in the buffer (" from ",
 * "class" or "module"), and a memmem-class search for that string costs a small part of the
 * automaton's walk.
 *
 * hvm_rx_analyze() derives such a condition from an expression's text: a set of literals of which
 * any match contains at least one. It understands the syntax glibc's regcomp accepts with
 * REG_EXTENDED and gives up (no condition: the expression is always run) on anything it does not
 * model exactly (REG_ICASE, a backslash inside a bracket expression, an interval it cannot read, a
 * quantifier with nothing before it). Giving up is always safe; a wrong condition would change
 * answers, so the analysis only ever drops literals it is unsure of.
 *
 * hvm_rx_hook_libmagic() makes libmagic's calls to regcomp, regexec and regfree go through this
 * filter, by rewriting libmagic's own GOT entries for them. It is called in the detector spawner, a
 * process of harvest's own that only loads databases and forks workers, before any database is
 * loaded there: the workers inherit the rewritten entries. Nothing in the caller's process is
 * touched, and answers do not change: an expression the filter rejects is one regexec() would have
 * rejected. */
#include "mime_internal.h"

#include <ctype.h>
#include <elf.h>
#include <link.h>
#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- The analysis ---- */

/* One parse: the pattern's end and how deep the groups nest (bounded, so a hostile database cannot
 * exhaust the stack). */
enum { RX_DEPTH_MAX = 16 };

/* Where the bracket expression starting at p ('[') ends (one past its ']'), NULL if it does not end
 * or holds a backslash (literal in POSIX brackets; not modelled, to be safe). */
static const char *bracket_end(const char *p, const char *end)
{
	p++;
	if (p < end && *p == '^')
		p++;
	if (p < end && *p == ']')
		p++;
	while (p < end) {
		if (*p == ']')
			return p + 1;
		if (*p == '\\')
			return NULL;
		if (*p == '[' && p + 1 < end && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
			char close = p[1];
			p += 2;
			while (p + 1 < end && !(p[0] == close && p[1] == ']'))
				p++;
			if (p + 1 >= end)
				return NULL;
			p += 2;
			continue;
		}
		p++;
	}
	return NULL;
}

/* Where the atom starting at p ends: a bracket expression, a group with its parentheses, an escape,
 * or one byte. NULL when the syntax is not one this analysis reads. */
/* NOLINTNEXTLINE(misc-no-recursion): a group's inside, at most RX_DEPTH_MAX deep */
static const char *atom_end(const char *p, const char *end, int depth)
{
	switch (*p) {
	case '[':
		return bracket_end(p, end);
	case '\\':
		return p + 1 < end ? p + 2 : NULL;
	case '(': {
		if (depth >= RX_DEPTH_MAX)
			return NULL;
		const char *q = p + 1;
		while (q < end && *q != ')') {
			q = atom_end(q, end, depth + 1);
			if (!q)
				return NULL;
		}
		return q < end ? q + 1 : NULL;
	}
	case ')':
		return NULL; /* unmatched: an ordinary character to some syntaxes; not
				modelled */
	default:
		return p + 1;
	}
}

/* Whether the escape "\c" is the literal character c in glibc's extended syntax: punctuation other
 * than its GNU anchors \< \> \` \'. (Letters and digits are classes, anchors or back references.)
 */
static bool escape_is_literal(unsigned char c)
{
	return c < 0x80 && ispunct(c) && !strchr("<>`'", c);
}

/* A condition under construction: any one of n literals. */
typedef struct hvm_rx_need rx_need;

/* Adds lit[0..len) to *into as one more alternative; false when there is no room. */
static bool need_add(rx_need *into, const char *lit, size_t len)
{
	if (into->n >= HVM_RX_LITS)
		return false;
	if (len > HVM_RX_LIT_MAX)
		len = HVM_RX_LIT_MAX; /* a prefix of a required string is required too */
	memcpy(into->lit[into->n], lit, len);
	into->lit[into->n][len] = '\0';
	into->len[into->n] = (unsigned char)len;
	into->n++;
	return true;
}

/* How selective a condition is: its shortest literal's length (0: no condition), and, at equal
 * length, the fewer the alternatives the better. */
static unsigned need_score(const rx_need *c)
{
	if (c->n == 0)
		return 0;
	unsigned shortest = HVM_RX_LIT_MAX;
	for (unsigned i = 0; i < c->n; i++)
		if (c->len[i] < shortest)
			shortest = c->len[i];
	return shortest * (HVM_RX_LITS + 1) + (HVM_RX_LITS - c->n);
}

static void keep_best(rx_need *best, const rx_need *cand)
{
	if (need_score(cand) > need_score(best))
		*best = *cand;
}

static int analyze_alt(const char *p, const char *end, int depth, rx_need *out);

/* The quantifiers after an atom, from q: where they end, and whether together they allow the atom
 * zero times. -1 for an interval this analysis does not read. */
static int quantifiers(const char **q, const char *end, bool *any, bool *zero)
{
	*any = *zero = false;
	while (*q < end && strchr("*+?{", **q)) {
		*any = true;
		if (**q != '{') {
			if (**q != '+')
				*zero = true;
			(*q)++;
			continue;
		}
		const char *s = *q + 1;
		unsigned long min = 0;
		if (s >= end || !isdigit((unsigned char)*s))
			return -1;
		while (s < end && isdigit((unsigned char)*s)) {
			min = min * 10 + (unsigned long)(*s - '0');
			if (min > 100000)
				return -1;
			s++;
		}
		if (s < end && *s == ',') {
			s++;
			while (s < end && isdigit((unsigned char)*s))
				s++;
		}
		if (s >= end || *s != '}')
			return -1;
		if (min == 0)
			*zero = true;
		*q = s + 1;
	}
	return 0;
}

/* A sequence of atoms (one branch of an alternation): its most selective required literal or
 * required group condition into *out (n == 0: none). -1: syntax not modelled. */
/* NOLINTNEXTLINE(misc-no-recursion): through a group's analyze_alt, at most RX_DEPTH_MAX deep */
static int analyze_seq(const char *p, const char *end, int depth, rx_need *out)
{
	rx_need best = {0}, cand;
	char run[HVM_RX_LIT_MAX];
	size_t rl = 0;
#define FLUSH()                                                                                    \
	do {                                                                                       \
		if (rl > 0) {                                                                      \
			cand.n = 0;                                                                \
			need_add(&cand, run, rl);                                                  \
			keep_best(&best, &cand);                                                   \
			rl = 0;                                                                    \
		}                                                                                  \
	} while (0)
	while (p < end) {
		if (strchr("*+?{", *p))
			return -1; /* a quantifier with nothing to repeat */
		const char *a = p, *ae = atom_end(p, end, depth);
		if (!ae)
			return -1;
		const char *q = ae;
		bool quant, zero;
		if (quantifiers(&q, end, &quant, &zero) < 0)
			return -1;
		int lit = -1; /* the literal byte this atom is, if it is one */
		if (ae - a == 1 && !strchr(".[]()^$|\\", *a))
			lit = (unsigned char)*a;
		else if (ae - a == 2 && a[0] == '\\' && escape_is_literal((unsigned char)a[1]))
			lit = (unsigned char)a[1];
		if (lit >= 0 && !zero) {
			if (rl == sizeof(run))
				FLUSH();
			run[rl++] = (char)lit;
			if (quant) /* "ab+c": "ab" is required, and "bc" need not follow */
				FLUSH();
		} else {
			FLUSH();
			if (*a == '(' && !zero) {
				if (analyze_alt(a + 1, ae - 1, depth + 1, &cand) < 0)
					return -1;
				keep_best(&best, &cand);
			}
		}
		p = q;
	}
	FLUSH();
#undef FLUSH
	*out = best;
	return 0;
}

/* An alternation: at least one branch's condition holds, so the union of the branches' literals is
 * required; a branch with no condition (or too many literals in all) leaves none. */
/* NOLINTNEXTLINE(misc-no-recursion): see analyze_seq */
static int analyze_alt(const char *p, const char *end, int depth, rx_need *out)
{
	out->n = 0;
	bool some = true;
	for (;;) {
		const char *bar = p;
		while (bar < end && *bar != '|') {
			bar = atom_end(bar, end, depth);
			if (!bar)
				return -1;
		}
		rx_need branch;
		if (analyze_seq(p, bar, depth, &branch) < 0)
			return -1;
		if (branch.n == 0 || out->n + branch.n > HVM_RX_LITS)
			some = false;
		for (unsigned i = 0; some && i < branch.n; i++)
			need_add(out, branch.lit[i], branch.len[i]);
		if (bar >= end)
			break;
		p = bar + 1;
	}
	if (!some)
		out->n = 0;
	return 0;
}

void hvm_rx_analyze(const char *pattern, int cflags, struct hvm_rx_need *out)
{
	out->n = 0;
	if (!(cflags & REG_EXTENDED) || (cflags & REG_ICASE))
		return;
	size_t len = strlen(pattern);
	if (analyze_alt(pattern, pattern + len, 0, out) < 0)
		out->n = 0;
}

bool hvm_rx_may_match(const struct hvm_rx_need *need, const char *s)
{
	if (need->n == 0)
		return true;
	for (unsigned i = 0; i < need->n; i++)
		if (strstr(s, need->lit[i]))
			return true;
	return false;
}

/* ---- libmagic's calls, through the filter ---- */

/* The conditions of the expressions libmagic compiled in this process, by the address of their
 * regex_t: open addressing, linear probing, tombstones cleared when the table is rebuilt. Only the
 * spawner and the workers use it, each single-threaded. */
struct rx_slot {
	const regex_t *key; /* NULL: empty; RX_GONE: a removed entry */
	struct hvm_rx_need need;
};
static struct rx_slot *rx_slots;
static size_t rx_cap, rx_used; /* rx_used counts tombstones too */
static unsigned long rx_skips;
static const regex_t rx_gone_mark;
#define RX_GONE (&rx_gone_mark)

static size_t rx_hash(const regex_t *key, size_t cap)
{
	uintptr_t h = (uintptr_t)key;
	h ^= h >> 17;
	h *= (uintptr_t)0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 7) & (cap - 1);
}

static struct rx_slot *rx_find(const regex_t *key)
{
	if (!rx_slots)
		return NULL;
	for (size_t i = rx_hash(key, rx_cap);; i = (i + 1) & (rx_cap - 1)) {
		if (rx_slots[i].key == key)
			return &rx_slots[i];
		if (!rx_slots[i].key)
			return NULL;
	}
}

static void rx_forget(const regex_t *key)
{
	struct rx_slot *s = rx_find(key);
	if (s)
		s->key = RX_GONE;
}

/* Records need for key (absent from the table); on failure the expression runs unfiltered. */
static void rx_remember(const regex_t *key, const struct hvm_rx_need *need)
{
	if ((rx_used + 1) * 2 > rx_cap) {
		size_t cap = rx_cap ? rx_cap * 2 : 256;
		struct rx_slot *slots = calloc(cap, sizeof(*slots));
		if (!slots)
			return;
		size_t used = 0;
		for (size_t i = 0; i < rx_cap; i++) {
			const regex_t *k = rx_slots[i].key;
			if (!k || k == RX_GONE)
				continue;
			size_t j = rx_hash(k, cap);
			while (slots[j].key)
				j = (j + 1) & (cap - 1);
			slots[j] = rx_slots[i];
			used++;
		}
		free(rx_slots);
		rx_slots = slots;
		rx_cap = cap;
		rx_used = used;
	}
	size_t j = rx_hash(key, rx_cap);
	while (rx_slots[j].key && rx_slots[j].key != RX_GONE)
		j = (j + 1) & (rx_cap - 1);
	if (!rx_slots[j].key)
		rx_used++;
	rx_slots[j].key = key;
	rx_slots[j].need = *need;
}

static int rx_regcomp(regex_t *re, const char *pattern, int cflags)
{
	int rc = regcomp(re, pattern, cflags);
	rx_forget(re); /* whatever was compiled at this address before is gone */
	if (rc == 0) {
		struct hvm_rx_need need;
		hvm_rx_analyze(pattern, cflags, &need);
		if (need.n > 0)
			rx_remember(re, &need);
	}
	return rc;
}

static int rx_regexec(const regex_t *re, const char *s, size_t nmatch, regmatch_t *match,
		      int eflags)
{
	if (!(eflags & REG_STARTEND)) {
		const struct rx_slot *slot = rx_find(re);
		if (slot && !hvm_rx_may_match(&slot->need, s)) {
			rx_skips++;
			return REG_NOMATCH;
		}
	}
	return regexec(re, s, nmatch, match, eflags);
}

static void rx_regfree(regex_t *re)
{
	rx_forget(re);
	regfree(re);
}

unsigned long hvm_rx_skipped(void)
{
	return rx_skips;
}

#if defined(__x86_64__)
#define RX_JUMP_SLOT R_X86_64_JUMP_SLOT
#define RX_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define RX_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define RX_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

#ifdef RX_JUMP_SLOT
/* libmagic's entries for the three functions, found in its dynamic section. */
struct rx_got {
	void **slot[3]; /* regfree, regcomp, regexec */
	const char *relro_start, *relro_end;
	bool found;
};

static const char *const rx_names[3] = {"regfree", "regcomp", "regexec"};

static char *rx_addr(char *base, ElfW(Addr) v)
{
	/* glibc's loader stores the dynamic section's addresses relocated, other loaders do not */
	if (v >= (uintptr_t)base)
		return (char *)v; /* NOLINT(performance-no-int-to-ptr): an address, as an integer */
	return base + v;
}

static void rx_scan_relocs(struct rx_got *got, char *base, const ElfW(Rela) * r, size_t bytes,
			   const ElfW(Sym) * syms, const char *strs, size_t strsz)
{
	for (size_t i = 0; i < bytes / sizeof(*r); i++) {
		unsigned long type = ELF64_R_TYPE(r[i].r_info), sym = ELF64_R_SYM(r[i].r_info);
		if ((type != RX_JUMP_SLOT && type != RX_GLOB_DAT) || sym == 0)
			continue;
		ElfW(Word) name = syms[sym].st_name;
		if (name >= strsz)
			continue;
		for (int k = 0; k < 3; k++)
			if (strcmp(strs + name, rx_names[k]) == 0)
				got->slot[k] = (void **)(void *)(base + r[i].r_offset);
	}
}

static int rx_find_libmagic(struct dl_phdr_info *info, size_t size, void *data)
{
	struct rx_got *got = data;
	(void)size;
	const char *base_name = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	base_name = base_name ? base_name + 1 : info->dlpi_name;
	if (!base_name || strncmp(base_name, "libmagic.so", 11) != 0)
		return 0;
	got->found = true;
	/* NOLINTNEXTLINE(performance-no-int-to-ptr): the object's load address, as an integer */
	char *base = (char *)info->dlpi_addr;
	const ElfW(Dyn) *dyn = NULL;
	for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
		else if (ph->p_type == PT_GNU_RELRO) {
			got->relro_start = base + ph->p_vaddr;
			got->relro_end = got->relro_start + ph->p_memsz;
		}
	}
	if (!dyn)
		return 1;
	const ElfW(Rela) *jmprel = NULL, *rela = NULL;
	size_t jmpsz = 0, relasz = 0, strsz = 0;
	const ElfW(Sym) *syms = NULL;
	const char *strs = NULL;
	bool pltrela = false;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_JMPREL:
			jmprel = (const ElfW(Rela) *)rx_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			jmpsz = dyn->d_un.d_val;
			break;
		case DT_PLTREL:
			pltrela = dyn->d_un.d_val == DT_RELA;
			break;
		case DT_RELA:
			rela = (const ElfW(Rela) *)rx_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_RELASZ:
			relasz = dyn->d_un.d_val;
			break;
		case DT_SYMTAB:
			syms = (const ElfW(Sym) *)rx_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_STRTAB:
			strs = (const char *)rx_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_STRSZ:
			strsz = dyn->d_un.d_val;
			break;
		default:
			break;
		}
	}
	if (!syms || !strs)
		return 1;
	if (jmprel && pltrela)
		rx_scan_relocs(got, base, jmprel, jmpsz, syms, strs, strsz);
	if (rela)
		rx_scan_relocs(got, base, rela, relasz, syms, strs, strsz);
	return 1;
}

/* Points *slot at fn, lifting the page's write protection for the moment it takes. */
static bool rx_patch(const struct rx_got *got, void **slot, void *fn)
{
	long page = sysconf(_SC_PAGESIZE);
	if (page <= 0)
		return false;
	char *start = (char *)slot - ((uintptr_t)slot & ((uintptr_t)page - 1));
	size_t len = (size_t)((char *)(slot + 1) - start);
	if (mprotect(start, len, PROT_READ | PROT_WRITE) != 0)
		return false;
	__atomic_store_n(slot, fn, __ATOMIC_RELEASE);
	bool relro = (const char *)slot >= got->relro_start && (const char *)slot < got->relro_end;
	if (relro)
		(void)mprotect(start, len, PROT_READ);
	return true;
}

bool hvm_rx_hook_libmagic(void)
{
	struct rx_got got = {0};
	dl_iterate_phdr(rx_find_libmagic, &got);
	if (!got.found || !got.slot[0] || !got.slot[1] || !got.slot[2])
		return false;
	/* regfree first, regexec last: at every step the entries in place are consistent (an
	 * expression is filtered only once every compile and free at its address is seen). */
	if (!rx_patch(&got, got.slot[0], (void *)rx_regfree))
		return false;
	if (!rx_patch(&got, got.slot[1], (void *)rx_regcomp))
		return false;
	return rx_patch(&got, got.slot[2], (void *)rx_regexec);
}
#else
bool hvm_rx_hook_libmagic(void)
{
	return false; /* no relocation types known for this architecture: run
			 unfiltered */
}
#endif
