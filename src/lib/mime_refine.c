/* Refinement of libmagic's answer by the file name: shared-mime-info's globs2, subclasses and
 * aliases, plus a built-in table for what agents write (see hv_mime_refine in mime.h).
 *
 * Glob matching follows xdgmime (the reference implementation of the shared-mime-info spec):
 * literal names beat "*.suffix" globs, the longest matching suffix beats shorter ones, other
 * globs come last. A pattern matches the name as it is, or (unless flagged "cs") the name in
 * lower case: globs2 writes case-insensitive patterns in lower case, so "*.md" matches
 * "README.MD", while "*.C:cs" matches only "x.C". Among the matches the higher weight wins,
 * then a match of the name as it is, then file order. The db is immutable once parsed, so one
 * db serves any number of threads. */
#include "internal.h"
#include "mime_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HV_MIME_DEFAULT_DIR "/usr/share/mime"
#define MAX_CANDIDATES 32   /* glob matches kept per name; a real name has a handful */
#define MAX_ANCESTORS 128   /* types visited by one subclass search; the real depth is < 10 */

typedef struct glob_entry {
	const char *key;  /* literal name, suffix after '*', or fnmatch pattern, as in globs2 */
	const char *type;
	int weight;
	bool cs;
	unsigned order;   /* line order in globs2, for stable ties */
} glob_entry;

typedef struct type_pair {
	const char *a; /* child (subclasses) or alias (aliases) */
	const char *b; /* parent, or canonical name */
} type_pair;

typedef struct entry_vec {
	glob_entry *v;
	size_t n, cap;
} entry_vec;

struct hv_mime_db {
	char *globs_text; /* the files' contents; every string above points into them */
	char *subclasses_text;
	char *aliases_text;
	entry_vec literals; /* sorted by key */
	entry_vec suffixes; /* sorted by key */
	/* The suffix search's filter: a name position can start a match only if its byte starts
	 * some suffix key (nearly always '.') and it is within the longest key of the end. */
	bool suffix_first[256];
	size_t suffix_max;
	entry_vec globs;    /* file order */
	type_pair *parents; /* sorted by child */
	size_t n_parents;
	type_pair *aliases; /* sorted by alias */
	size_t n_aliases;
};

/* ---- The built-in table ------------------------------------------------------------------- */

/* Types for what agents produce, tried before shared-mime-info's globs. Where shared-mime-info
 * has no entry or a dated one (x-yaml), the registered or de-facto type is used:
 * application/yaml (RFC 9512); application/x-ndjson, libmagic's own answer for JSON Lines, so
 * that the raw and refined answers agree for .jsonl and .ndjson. */
static const struct {
	const char *ext;
	const char *type;
} builtin_exts[] = {
	{"arrow", "application/vnd.apache.arrow.file"},
	{"csv", "text/csv"},
	{"cts", "text/x-typescript"},
	{"feather", "application/vnd.apache.arrow.file"},
	{"ipynb", "application/x-ipynb+json"},
	{"json", "application/json"},
	{"jsonl", "application/x-ndjson"},
	{"markdown", "text/markdown"},
	{"md", "text/markdown"},
	{"mts", "text/x-typescript"},
	{"ndjson", "application/x-ndjson"},
	{"npy", "application/x-npy"},
	{"npz", "application/x-npz"},
	{"parquet", "application/vnd.apache.parquet"},
	{"pickle", "application/x-pickle"},
	{"pkl", "application/x-pickle"},
	{"toml", "application/toml"},
	{"ts", "text/x-typescript"},
	{"tsv", "text/tab-separated-values"},
	{"yaml", "application/yaml"},
	{"yml", "application/yaml"},
};

/* Subclass relations of the built-in types that shared-mime-info may not know. */
static const type_pair builtin_parents[] = {
	{"application/yaml", "text/plain"},
	{"application/toml", "text/plain"},
	{"text/csv", "text/plain"},
	{"text/tab-separated-values", "text/plain"},
	{"text/markdown", "text/plain"},
	{"application/json", "application/javascript"},
	{"application/javascript", "text/plain"},
	{"application/x-ipynb+json", "application/json"},
	/* A one-record JSON Lines file is a JSON document, which libmagic calls application/json:
	 * .jsonl may narrow it. */
	{"application/x-ndjson", "application/json"},
	{"application/x-npz", "application/zip"}, /* numpy's savez writes a zip */
};

static const type_pair builtin_aliases[] = {
	{"application/x-yaml", "application/yaml"},
	{"text/x-yaml", "application/yaml"},
	{"text/yaml", "application/yaml"},
	{"application/jsonl", "application/x-ndjson"},
	{"application/x-jsonlines", "application/x-ndjson"},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- Parsing ------------------------------------------------------------------------------ */

static void lower_ascii(char *s)
{
	for (; *s; s++)
		if (*s >= 'A' && *s <= 'Z')
			*s = (char)(*s - 'A' + 'a');
}

/* Reads dir/name whole into *text (NUL-terminated). A missing file gives *text == NULL and
 * HV_OK: shared-mime-info may not be installed. */
static hv_status read_text(const char *dir, const char *name, char **text)
{
	hv_buf path = {0}, data = {0};
	*text = NULL;
	int rc = hv_buf_printf(&path, "%s/%s", dir, name);
	if (rc != HV_OK)
		return rc;
	int fd = open(path.data, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		rc = errno == ENOENT ? HV_OK : hv_error_errno(HV_EIO, path.data, errno);
		hv_buf_free(&path);
		return rc;
	}
	for (;;) {
		if ((rc = hv_buf_reserve(&data, 65536)) != HV_OK)
			break;
		ssize_t n = read(fd, data.data + data.len, data.cap - data.len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = hv_error_errno(HV_EIO, path.data, errno);
			break;
		}
		if (n == 0)
			break;
		data.len += (size_t)n;
	}
	close(fd);
	hv_buf_free(&path);
	if (rc != HV_OK) {
		hv_buf_free(&data);
		return rc;
	}
	data.data[data.len] = '\0';
	/* A NUL inside would cut lines short silently; the files are text. */
	for (size_t i = 0; i < data.len; i++)
		if (data.data[i] == '\0')
			data.data[i] = '\n';
	*text = data.data;
	return HV_OK;
}

static hv_status vec_push(entry_vec *v, const glob_entry *e)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 256;
		glob_entry *p = realloc(v->v, cap * sizeof(*p));
		if (!p)
			return hv_error_set(HV_ENOMEM, "out of memory");
		v->v = p;
		v->cap = cap;
	}
	v->v[v->n++] = *e;
	return HV_OK;
}

static bool has_wildcard(const char *s)
{
	return strpbrk(s, "*?[") != NULL;
}

/* Lines "weight:type:glob[:flags[:...]]"; lines that do not parse are skipped. */
static hv_status parse_globs2(hv_mime_db *db)
{
	unsigned order = 0;
	char *save = NULL;
	for (char *line = strtok_r(db->globs_text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#')
			continue;
		char *f[4] = {line, NULL, NULL, NULL};
		for (int i = 1; i < 4; i++) {
			char *c = f[i - 1] ? strchr(f[i - 1], ':') : NULL;
			if (c) {
				*c = '\0';
				f[i] = c + 1;
			}
		}
		char *end;
		long weight = strtol(f[0], &end, 10);
		if (end == f[0] || *end || !f[1] || !*f[1] || !f[2] || !*f[2] || weight < 0 ||
		    weight > 100 || strcmp(f[2], "__NOGLOBS__") == 0)
			continue;
		bool cs = false;
		if (f[3]) {
			char *fsave = NULL;
			char *flags = f[3];
			char *colon = strchr(flags, ':');
			if (colon)
				*colon = '\0';
			for (char *fl = strtok_r(flags, ",", &fsave); fl; fl = strtok_r(NULL, ",", &fsave))
				cs |= strcmp(fl, "cs") == 0;
		}
		char *pat = f[2];
		/* cppcheck-suppress unknownEvaluationOrder ; order is read only by order++ here */
		glob_entry e = {.type = f[1], .weight = (int)weight, .cs = cs, .order = order++};
		int rc;
		if (!has_wildcard(pat)) {
			e.key = pat;
			rc = vec_push(&db->literals, &e);
		} else if (pat[0] == '*' && pat[1] && !has_wildcard(pat + 1)) {
			e.key = pat + 1;
			rc = vec_push(&db->suffixes, &e);
		} else {
			e.key = pat;
			rc = vec_push(&db->globs, &e);
		}
		if (rc != HV_OK)
			return rc;
	}
	return HV_OK;
}

/* Lines "first second" (subclasses: child parent; aliases: alias canonical). */
static hv_status parse_pairs(char *text, type_pair **out, size_t *count)
{
	size_t cap = 0, n = 0;
	type_pair *v = NULL;
	char *save = NULL;
	*out = NULL;
	*count = 0;
	if (!text)
		return HV_OK;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *lsave = NULL;
		char *a = strtok_r(line, " \t\r", &lsave);
		char *b = a ? strtok_r(NULL, " \t\r", &lsave) : NULL;
		if (!a || !b || a[0] == '#')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			type_pair *p = realloc(v, cap * sizeof(*p));
			if (!p) {
				free(v);
				return hv_error_set(HV_ENOMEM, "out of memory");
			}
			v = p;
		}
		v[n].a = a;
		v[n].b = b;
		n++;
	}
	*out = v;
	*count = n;
	return HV_OK;
}

static int cmp_entry(const void *x, const void *y)
{
	const glob_entry *a = x, *b = y;
	int c = strcmp(a->key, b->key);
	return c ? c : (a->order > b->order) - (a->order < b->order);
}

static int cmp_pair(const void *x, const void *y)
{
	const type_pair *a = x, *b = y;
	return strcmp(a->a, b->a);
}

hv_status hv_mime_db_open(hv_mime_db **out, const char *dir)
{
	HV_NEED(out);
	*out = NULL;
	if (!dir)
		dir = HV_MIME_DEFAULT_DIR;
	hv_mime_db *db = calloc(1, sizeof(*db));
	if (!db)
		return hv_error_set(HV_ENOMEM, "out of memory");
	hv_status rc = read_text(dir, "globs2", &db->globs_text);
	if (rc == HV_OK)
		rc = read_text(dir, "subclasses", &db->subclasses_text);
	if (rc == HV_OK)
		rc = read_text(dir, "aliases", &db->aliases_text);
	if (rc == HV_OK && db->globs_text)
		rc = parse_globs2(db);
	if (rc == HV_OK)
		rc = parse_pairs(db->subclasses_text, &db->parents, &db->n_parents);
	if (rc == HV_OK)
		rc = parse_pairs(db->aliases_text, &db->aliases, &db->n_aliases);
	if (rc != HV_OK) {
		hv_mime_db_close(db);
		return rc;
	}
	if (db->literals.n)
		qsort(db->literals.v, db->literals.n, sizeof(glob_entry), cmp_entry);
	if (db->suffixes.n)
		qsort(db->suffixes.v, db->suffixes.n, sizeof(glob_entry), cmp_entry);
	for (size_t i = 0; i < db->suffixes.n; i++) {
		const char *k = db->suffixes.v[i].key;
		size_t len = strlen(k);
		db->suffix_first[(unsigned char)k[0]] = true;
		if (len > db->suffix_max)
			db->suffix_max = len;
	}
	/* Stable for equal children: qsort is not, but the order of a type's parents does not
	 * matter to the (transitive) search. */
	if (db->n_parents)
		qsort(db->parents, db->n_parents, sizeof(type_pair), cmp_pair);
	if (db->n_aliases)
		qsort(db->aliases, db->n_aliases, sizeof(type_pair), cmp_pair);
	*out = db;
	return HV_OK;
}

void hv_mime_db_close(hv_mime_db *db)
{
	if (!db)
		return;
	free(db->literals.v);
	free(db->suffixes.v);
	free(db->globs.v);
	free(db->parents);
	free(db->aliases);
	free(db->globs_text);
	free(db->subclasses_text);
	free(db->aliases_text);
	free(db);
}

/* ---- The default db ----------------------------------------------------------------------- */

/* Set once under pthread_once and never changed after: shared read-only by every thread. */
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static hv_mime_db *default_db;
static hv_status default_status;
static char default_error[512];

/* ---- The refinement tables' fingerprint (hvm_refine_fingerprint) ---- */

/* Bump when the refinement rules in this file change in a way that changes an answer: cached
 * refined answers made by the old rules are then refined again. */
#define HV_REFINE_RULES 1

static pthread_mutex_t fp_mu = PTHREAD_MUTEX_INITIALIZER;
static char fp_text[64];   /* the fingerprint handed out, "" until asked for */
static bool fp_taken;      /* fp_text describes the files as they are now, or were loaded */
static bool fp_loaded;     /* the default db was read (its files were as fp_loaded_text) */
static bool fp_unstable;   /* the files changed around the db's load: no fingerprint */
static char fp_loaded_text[64];

static uint64_t fnv1a(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * UINT64_C(1099511628211);
	return h;
}

#define FNV_START UINT64_C(14695981039346656037)

/* FNV-1a over the built-in tables: any change to them changes the fingerprint. */
static uint64_t builtin_hash(void)
{
	uint64_t h = FNV_START;
	const char *strs[2 * (COUNT(builtin_exts) + COUNT(builtin_parents) + COUNT(builtin_aliases))];
	size_t n = 0;
	for (size_t i = 0; i < COUNT(builtin_exts); i++) {
		strs[n++] = builtin_exts[i].ext;
		strs[n++] = builtin_exts[i].type;
	}
	for (size_t i = 0; i < COUNT(builtin_parents); i++) {
		strs[n++] = builtin_parents[i].a;
		strs[n++] = builtin_parents[i].b;
	}
	for (size_t i = 0; i < COUNT(builtin_aliases); i++) {
		strs[n++] = builtin_aliases[i].a;
		strs[n++] = builtin_aliases[i].b;
	}
	for (size_t i = 0; i < n; i++) /* the NULs too: "ab","c" is not "a","bc" */
		h = fnv1a(h, strs[i], strlen(strs[i]) + 1);
	return h;
}

/* "rules=R;builtin=H;NAME=ino:size:mtime_ns,..." of the default db's files as they are now
 * (stat: the db reads through symlinks); false when it does not fit. */
static bool smi_describe(char *out, size_t cap)
{
	static const char *const names[] = {"globs2", "subclasses", "aliases"};
	int len = snprintf(out, cap, "rules=%d;builtin=%016llx", HV_REFINE_RULES,
			   (unsigned long long)builtin_hash());
	for (size_t i = 0; len > 0 && (size_t)len < cap && i < COUNT(names); i++) {
		char path[64];
		struct stat s;
		snprintf(path, sizeof(path), "%s/%s", HV_MIME_DEFAULT_DIR, names[i]);
		if (stat(path, &s) == 0)
			len += snprintf(out + len, cap - (size_t)len, ";%s=%llu:%lld:%lld", names[i],
					(unsigned long long)s.st_ino, (long long)s.st_size,
					(long long)s.st_mtim.tv_sec * 1000000000LL + s.st_mtim.tv_nsec);
		else
			len += snprintf(out + len, cap - (size_t)len, ";%s=%d", names[i], errno);
	}
	return len > 0 && (size_t)len < cap;
}

/* The description's 64-bit hash, as "rN-HEX": every cache row keeps one, so it is kept short.
 * Two descriptions colliding would take 2^32 versions of the tables. */
static bool smi_fingerprint(char *out, size_t cap)
{
	char text[512];
	if (!smi_describe(text, sizeof(text)))
		return false;
	int len = snprintf(out, cap, "r%d-%016llx", HV_REFINE_RULES,
			   (unsigned long long)fnv1a(FNV_START, text, strlen(text)));
	return len > 0 && (size_t)len < cap;
}

static void load_default_db(void)
{
	/* The files' fingerprint before and after the read: equal, the db read is the one they
	 * describe (short of a rewrite keeping inode, size and mtime). */
	char before[sizeof(fp_loaded_text)], after[sizeof(fp_loaded_text)];
	bool ok = smi_fingerprint(before, sizeof(before));
	default_status = hv_mime_db_open(&default_db, NULL);
	if (default_status != HV_OK)
		snprintf(default_error, sizeof(default_error), "%s", hv_error_last());
	ok = ok && smi_fingerprint(after, sizeof(after)) && strcmp(before, after) == 0;
	pthread_mutex_lock(&fp_mu);
	fp_loaded = true;
	/* A fingerprint handed out earlier must describe this db too. */
	if (!ok || default_status != HV_OK || (fp_taken && strcmp(fp_text, before) != 0))
		fp_unstable = true;
	else
		memcpy(fp_loaded_text, before, sizeof(before));
	pthread_mutex_unlock(&fp_mu);
}

const char *hvm_refine_fingerprint(void)
{
	const char *out = NULL;
	pthread_mutex_lock(&fp_mu);
	if (!fp_taken && !fp_unstable) {
		if (fp_loaded)
			memcpy(fp_text, fp_loaded_text, sizeof(fp_text));
		else if (!smi_fingerprint(fp_text, sizeof(fp_text)))
			fp_unstable = true;
		fp_taken = true;
	}
	if (!fp_unstable)
		out = fp_text;
	pthread_mutex_unlock(&fp_mu);
	return out;
}

hv_status hv_mime_default_db(const hv_mime_db **out)
{
	pthread_once(&default_once, load_default_db);
	*out = default_db;
	if (default_status != HV_OK)
		return hv_error_set(default_status, "%s", default_error);
	return HV_OK;
}

/* ---- Lookups ------------------------------------------------------------------------------ */

/* The index of the first element of a sorted vector whose key is >= key. */
static size_t lower_bound(const entry_vec *v, const char *key)
{
	size_t lo = 0, hi = v->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(v->v[mid].key, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

typedef struct candidate {
	const glob_entry *e;
	bool as_is; /* matched the name as it is, not its lower-case form */
} candidate;

typedef struct candidates {
	candidate v[MAX_CANDIDATES];
	size_t n;
} candidates;

static void add_candidate(candidates *c, const glob_entry *e, bool as_is)
{
	if (c->n < MAX_CANDIDATES)
		c->v[c->n++] = (candidate){e, as_is};
}

/* Adds the entries of v whose key is the name as it is (any entry) or, when the name has
 * upper-case letters, its lower-case form (entries not flagged "cs"). */
static void add_key_matches(candidates *c, const entry_vec *v, const char *name,
			    const char *lower)
{
	for (size_t i = lower_bound(v, name); i < v->n && strcmp(v->v[i].key, name) == 0; i++)
		add_candidate(c, &v->v[i], true);
	if (strcmp(name, lower) == 0)
		return;
	for (size_t i = lower_bound(v, lower); i < v->n && strcmp(v->v[i].key, lower) == 0; i++)
		if (!v->v[i].cs)
			add_candidate(c, &v->v[i], false);
}

/* shared-mime-info's matches for a base name (name) and its lower-case form (lower). */
static void glob_matches(const hv_mime_db *db, const char *name, const char *lower,
			 candidates *c)
{
	c->n = 0;
	add_key_matches(c, &db->literals, name, lower);
	if (c->n)
		return;
	size_t len = strlen(name);
	/* The longest suffix first; positions no key can start at are skipped without a search. */
	for (size_t i = len > db->suffix_max ? len - db->suffix_max : 0; i < len && !c->n; i++)
		if (db->suffix_first[(unsigned char)name[i]] ||
		    db->suffix_first[(unsigned char)lower[i]])
			add_key_matches(c, &db->suffixes, name + i, lower + i);
	if (c->n)
		return;
	bool has_upper = strcmp(name, lower) != 0;
	for (size_t i = 0; i < db->globs.n; i++) {
		const glob_entry *e = &db->globs.v[i];
		if (fnmatch(e->key, name, 0) == 0)
			add_candidate(c, e, true);
		else if (has_upper && !e->cs && fnmatch(e->key, lower, 0) == 0)
			add_candidate(c, e, false);
	}
}

/* Orders matches: higher weight, then a match of the name as it is, then globs2 order.
 * Insertion sort: a handful of elements. */
static void sort_candidates(candidates *c)
{
	for (size_t i = 1; i < c->n; i++) {
		for (size_t j = i; j > 0; j--) {
			candidate a = c->v[j - 1], b = c->v[j];
			bool swap = a.e->weight != b.e->weight ? a.e->weight < b.e->weight
				  : a.as_is != b.as_is       ? b.as_is
							     : a.e->order > b.e->order;
			if (!swap)
				break;
			c->v[j - 1] = b;
			c->v[j] = a;
		}
	}
}

static const char *find_pair(const type_pair *v, size_t n, const char *key)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(v[mid].a, key);
		if (c == 0)
			return v[mid].b;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The canonical name of a type, through shared-mime-info's and the built-in aliases. */
static const char *canonical(const hv_mime_db *db, const char *type)
{
	for (int hop = 0; hop < 4; hop++) { /* an alias of an alias: at most a few hops */
		const char *c = db ? find_pair(db->aliases, db->n_aliases, type) : NULL;
		for (size_t i = 0; !c && i < COUNT(builtin_aliases); i++)
			if (strcmp(builtin_aliases[i].a, type) == 0)
				c = builtin_aliases[i].b;
		if (!c || strcmp(c, type) == 0)
			break;
		type = c;
	}
	return type;
}

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Whether canonical type t is canonical parent p, or reaches it through the relation. */
static bool reaches(const hv_mime_db *db, const char *t, const char *p)
{
	const char *seen[MAX_ANCESTORS];
	size_t n = 0, next = 0;
	bool p_is_text = strcmp(p, "text/plain") == 0;
	if (strcmp(p, "application/octet-stream") == 0)
		return !starts_with(t, "inode/"); /* every stream is one */
	seen[n++] = t;
	while (next < n) { /* breadth-first over the ancestors, each visited once */
		const char *x = seen[next++];
		if (strcmp(x, p) == 0 || (p_is_text && starts_with(x, "text/")))
			return true;
		const char *parents[MAX_ANCESTORS];
		size_t np = 0;
		if (db) {
			size_t lo = 0, hi = db->n_parents;
			while (lo < hi) {
				size_t mid = lo + (hi - lo) / 2;
				if (strcmp(db->parents[mid].a, x) < 0)
					lo = mid + 1;
				else
					hi = mid;
			}
			for (; lo < db->n_parents && strcmp(db->parents[lo].a, x) == 0 &&
			       np < MAX_ANCESTORS;
			     lo++)
				parents[np++] = db->parents[lo].b;
		}
		for (size_t i = 0; i < COUNT(builtin_parents) && np < MAX_ANCESTORS; i++)
			if (strcmp(builtin_parents[i].a, x) == 0)
				parents[np++] = builtin_parents[i].b;
		for (size_t i = 0; i < np; i++) {
			const char *y = canonical(db, parents[i]);
			bool known = false;
			for (size_t k = 0; k < n && !known; k++)
				known = strcmp(seen[k], y) == 0;
			if (!known && n < MAX_ANCESTORS)
				seen[n++] = y;
		}
	}
	return false;
}

static bool is_subclass(const hv_mime_db *db, const char *type, const char *parent)
{
	return reaches(db, canonical(db, type), canonical(db, parent));
}

bool hv_mime_is_subclass(const hv_mime_db *db, const char *type, const char *parent)
{
	if (!type || !parent)
		return false;
	if (!db && hv_mime_default_db(&db) != HV_OK)
		return false;
	return is_subclass(db, type, parent);
}

/* The built-in type for the name's extension (after its last '.'), or NULL. */
static const char *builtin_type(const char *lower)
{
	const char *dot = strrchr(lower, '.');
	if (!dot || !dot[1])
		return NULL;
	size_t lo = 0, hi = COUNT(builtin_exts);
	while (lo < hi) { /* the table is sorted by extension */
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(builtin_exts[mid].ext, dot + 1);
		if (c == 0)
			return builtin_exts[mid].type;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Whether the name's candidate type may stand for libmagic's raw answer (see mime.h). */
static bool acceptable(const hv_mime_db *db, const char *cand, const char *raw)
{
	if (starts_with(cand, "inode/"))
		return false;
	/* libmagic's weak answers say little about the bytes: the name's type replaces them
	 * (SPEC 2). Every other answer may only be narrowed to a declared subclass. */
	static const char *const weak[] = {"application/octet-stream", "text/plain",
					   "application/zip", "text/xml"};
	for (size_t i = 0; i < sizeof(weak) / sizeof(weak[0]); i++)
		if (strcmp(raw, weak[i]) == 0)
			return true;
	return is_subclass(db, cand, raw);
}

hv_status hv_mime_refine(const hv_mime_db *db, const char *name, const char *raw_type,
			 const char **type)
{
	HV_NEED(type);
	*type = raw_type;
	/* Before the db: an answer no name can change needs no tables loaded. */
	if (!raw_type || !*raw_type || !name || starts_with(raw_type, "inode/"))
		return HV_OK;
	if (!db) {
		hv_status rc = hv_mime_default_db(&db);
		if (rc != HV_OK)
			return rc;
	}
	const char *slash = strrchr(name, '/');
	const char *base = slash ? slash + 1 : name;
	size_t len = strlen(base);
	if (len == 0)
		return HV_OK;
	char small[256];
	char *lower = len < sizeof(small) ? small : malloc(len + 1);
	if (!lower)
		return hv_error_set(HV_ENOMEM, "out of memory");
	memcpy(lower, base, len + 1);
	lower_ascii(lower);

	const char *raw = canonical(db, raw_type);
	const char *cands[MAX_CANDIDATES + 1];
	size_t n = 0;
	const char *b = builtin_type(lower);
	if (b)
		cands[n++] = b;
	candidates c;
	glob_matches(db, base, lower, &c);
	sort_candidates(&c);
	for (size_t i = 0; i < c.n; i++)
		cands[n++] = c.v[i].e->type;

	for (size_t i = 0; i < n; i++) {
		const char *cand = canonical(db, cands[i]);
		if (strcmp(cand, raw) == 0)
			break; /* the name agrees with the content: keep libmagic's spelling */
		if (acceptable(db, cand, raw)) {
			*type = cand;
			break;
		}
	}
	if (lower != small)
		free(lower);
	return HV_OK;
}
