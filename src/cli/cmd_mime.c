/* harvest mime: the MIME answer record of each file; a directory means every regular file
 * below it. */
#include "cli.h"
#include "../lib/fdio.h"
#include "../lib/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
	OPT_RAW = OPT_OWN,
	OPT_MIME_NO_CACHE,
	OPT_MIME_THREADS,
	OPT_MIME_INCLUDE_HIDDEN,
	OPT_MIME_EXCLUDE,
	OPT_MIME_XDEV,
	OPT_MIME_FILES_FROM,
	OPT_MIME_FILES0_FROM,
};

static const cli_opt mime_opts[] = {
	{"help", 'h', 0, OPT_HELP},  {"format", 0, 1, OPT_FORMAT},
	{"case", 0, 1, OPT_CASE},    {"quiet", 'q', 0, OPT_QUIET},
	{"db", 0, 1, OPT_DB},        {"raw", 0, 0, OPT_RAW},
	{"no-cache", 0, 0, OPT_MIME_NO_CACHE}, {"threads", 0, 1, OPT_MIME_THREADS},
	{"include-hidden", 0, 0, OPT_MIME_INCLUDE_HIDDEN}, {"exclude", 0, 1, OPT_MIME_EXCLUDE},
	{"xdev", 0, 0, OPT_MIME_XDEV}, {"cache-db", 0, 1, OPT_CACHE_DB},
	{"files-from", 'f', 1, OPT_MIME_FILES_FROM}, {"files0-from", 0, 1, OPT_MIME_FILES0_FROM},
	{NULL, 0, 0, 0},
};

static const char mime_usage[] =
	"usage: harvest mime [options] PATH...\n"
	"       harvest mime [options] --files-from LIST [PATH...]\n"
	"The MIME type of each file, from libmagic, refined by the file name's extension;\n"
	"a directory means every regular file below it, walked as collect walks it.\n"
	"  --raw             libmagic's answer alone (equal to `file --mime-type -b`)\n"
	"  --no-cache        neither use nor fill the MIME cache\n"
	"  --threads N       detection threads (default: online CPUs, at most 8)\n"
	"  --include-hidden  below a directory, also dot-files and __pycache__ (left out by\n"
	"                    default, as collect leaves them out)\n"
	"  --exclude GLOB    below a directory, leave out names matching GLOB (repeatable)\n"
	"  --xdev            below a directory, stay on its file system\n"
	"  -f, --files-from LIST  also the paths listed in LIST, one a line (- : standard\n"
	"                    input), after the PATH arguments; an empty list answers nothing\n"
	"  --files0-from LIST  the same, each path ended by a NUL byte (find -print0)\n"
	"  --db PATH         the database holding the cache\n"
	"  --cache-db PATH   the cache with a PostgreSQL --db (default: the XDG location)\n"
	"  --format F        jsonl (default), json, text (\"path: type\") or nul (each path\n"
	"                    and its type, each ended by a NUL byte)\n"
	"  --case C, --quiet\n"
	"Environment: HARVEST_MIME_REGEX_FILTER=0 runs every libmagic expression, none\n"
	"skipped by the literal prefilter (the answers are the same either way).\n"
	"Exit status: 0 all answered; 1 some path could not be read, or was typed\n"
	"application/octet-stream because libmagic's sandboxed worker crashed or hung on it\n"
	"(named on stderr); 2 usage.\n";

struct mime_cli {
	hv_mime_opts opts;
	bool no_cache;
	hv_collect_opts walk;  /* how a directory is walked: collect's rules */
	const char **excludes;
	size_t n_excludes;
	/* --files-from and --files0-from, in order: the list's name, and its separator. */
	struct mime_list {
		const char *name;
		char sep;
	} *lists;
	size_t n_lists;
};

static int mime_opt(void *ctx, cli_common *c, int id, const char *v)
{
	struct mime_cli *m = ctx;
	switch (id) {
	case OPT_RAW: m->opts.raw = true; return 0;
	case OPT_MIME_NO_CACHE: m->no_cache = true; return 0;
	case OPT_MIME_THREADS: return cli_parse_int(c, "--threads", v, 1, 1024, &m->opts.threads);
	case OPT_MIME_INCLUDE_HIDDEN: m->walk.include_hidden = true; return 0;
	case OPT_MIME_XDEV: m->walk.xdev = true; return 0;
	case OPT_MIME_FILES_FROM:
	case OPT_MIME_FILES0_FROM: {
		struct mime_list *l = realloc(m->lists, (m->n_lists + 1) * sizeof(*l));
		if (!l)
			return cli_usage_error(c, "out of memory");
		m->lists = l;
		l[m->n_lists].name = v;
		l[m->n_lists++].sep = id == OPT_MIME_FILES_FROM ? '\n' : '\0';
		return 0;
	}
	case OPT_MIME_EXCLUDE: {
		const char **e = realloc(m->excludes, (m->n_excludes + 1) * sizeof(*e));
		if (!e)
			return cli_usage_error(c, "out of memory");
		m->excludes = e;
		e[m->n_excludes++] = v;
		return 0;
	}
	}
	return 0;
}

/* Where the answers go, and how things went. */
struct mime_out {
	const cli_common *c;
	hv_json *j;
	cli_progress progress;
	uint64_t count;
	int rc;
	const char *prefix;    /* the directory argument, for answers below it */
	size_t prefix_len;
	char *joined;          /* "prefix/path" */
	size_t joined_cap;
	bool oom;
};

static void print_answer(struct mime_out *o, const char *path, size_t path_len,
			 const hv_mime_result *r)
{
	o->count++;
	cli_progress_update(&o->progress, o->count, o->count, 0);
	if (!r->mime_type) {
		cli_progress_end(&o->progress);
		cli_error("%s", r->error ? r->error : path);
		o->rc = EXIT_WARN;
		return;
	}
	if (r->error) {
		/* Answered, but not by libmagic (its worker crashed or hung): say so. */
		cli_progress_end(&o->progress);
		cli_warn(o->c, "%s", r->error);
		o->rc = EXIT_WARN;
	}
	if (o->j) {
		hv_record_mime(o->j, path, path_len, r->mime_type);
		cli_output_record(o->j, o->c);
	} else if (o->c->format == FMT_TEXT) {
		cli_put_escaped(stdout, path, path_len);
		fputs(": ", stdout);
		cli_put_escaped(stdout, r->mime_type, strlen(r->mime_type));
		fputc('\n', stdout);
	} else {
		fwrite(path, 1, path_len, stdout);
		putchar('\0');
		fputs(r->mime_type, stdout);
		putchar('\0');
	}
}

/* An answer below a directory argument: named "ARG/path", as the argument was given. */
static hv_status on_dir_answer(void *ctx, const char *path, size_t path_len,
			       const hv_mime_result *r)
{
	struct mime_out *o = ctx;
	bool slash = o->prefix_len > 0 && o->prefix[o->prefix_len - 1] == '/';
	size_t need = o->prefix_len + 1 + path_len + 1;
	if (need > o->joined_cap) {
		char *p = realloc(o->joined, need);
		if (!p) {
			o->oom = true;
			return HV_ENOMEM;
		}
		o->joined = p;
		o->joined_cap = need;
	}
	memcpy(o->joined, o->prefix, o->prefix_len);
	size_t n = o->prefix_len;
	if (!slash)
		o->joined[n++] = '/';
	memcpy(o->joined + n, path, path_len);
	n += path_len;
	o->joined[n] = '\0';
	/* The library names the file by its path below the directory ("sub/f: Permission
	 * denied"): the message names it as the answer does, under the argument as given. */
	hv_mime_result shown = *r;
	char *msg = NULL;
	if (r->error && !strncmp(r->error, path, path_len) && r->error[path_len] == ':' &&
	    asprintf(&msg, "%s%s", o->joined, r->error + path_len) >= 0)
		shown.error = msg;
	print_answer(o, o->joined, n, &shown);
	free(msg);
	return HV_OK;
}

static void on_walk_warning(void *ctx, const char *message)
{
	struct mime_out *o = ctx;
	cli_progress_end(&o->progress);
	cli_warn(o->c, "%s", message);
	o->rc = EXIT_WARN;
}

/* Every argument's lstat, before any is answered. Each is a path walk in the kernel: the 4,000
 * of a warm run take 12 ms on one thread, and they are independent, so a long list is shared
 * among up to LSTAT_THREADS threads (one per LSTAT_PER_THREAD arguments, at most `threads`, 0
 * meaning the online CPUs), the calling one included. The threads take LSTAT_CHUNK arguments
 * at a time from a shared counter, so the calling thread can open the MIME cache meanwhile
 * (lstat_begin, then the store, then lstat_finish) and join in late without leaving the
 * others a longer share. They are joined before lstat_finish returns, so the process is
 * single-threaded again when libmagic's spawner is forked (it must be: see cmd_mime). A
 * thread that cannot be started leaves its share to the others. */
enum { LSTAT_THREADS = 4, LSTAT_PER_THREAD = 512, LSTAT_CHUNK = 64 };

struct lstat_job {
	char *const *paths;
	struct stat *lst; /* out: the lstat of paths[i] */
	int *lerr;        /* out: 0, or lstat's errno for paths[i] */
	size_t n;
	atomic_size_t next; /* the first argument no thread has taken */
	pthread_t tids[LSTAT_THREADS - 1];
	bool started[LSTAT_THREADS - 1];
};

static void *lstat_run(void *arg)
{
	struct lstat_job *j = arg;
	for (;;) {
		size_t b = atomic_fetch_add(&j->next, LSTAT_CHUNK);
		if (b >= j->n)
			return NULL;
		size_t e = j->n - b < LSTAT_CHUNK ? j->n : b + LSTAT_CHUNK;
		for (size_t i = b; i < e; i++)
			j->lerr[i] = lstat(j->paths[i], &j->lst[i]) != 0 ? errno : 0;
	}
}

/* Starts the helper threads of j (set up by the caller but for next and the threads). */
static void lstat_begin(struct lstat_job *j, int threads)
{
	long cpus = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
	size_t k = j->n / LSTAT_PER_THREAD;
	if (cpus > 0 && k > (size_t)cpus)
		k = (size_t)cpus;
	if (k > LSTAT_THREADS)
		k = LSTAT_THREADS;
	atomic_init(&j->next, 0);
	for (size_t t = 0; t + 1 < LSTAT_THREADS; t++)
		j->started[t] = t + 1 < k && pthread_create(&j->tids[t], NULL, lstat_run, j) == 0;
}

/* Takes the calling thread's share of j, then joins the helpers: every lstat is then done. */
static void lstat_finish(struct lstat_job *j)
{
	(void)lstat_run(j);
	for (size_t t = 0; t + 1 < LSTAT_THREADS; t++) {
		if (j->started[t])
			(void)pthread_join(j->tids[t], NULL);
	}
}

/* Answers files[0..n): the arguments that are not directories, with their lstat (or its
 * errno) from the directory decision, so the library does not lstat them again. */
static int answer_files(struct mime_out *o, hv_store **st, const hv_mime_opts *mo,
			char *const *files, const struct stat *lst, const int *lerr, size_t n)
{
	hv_mime_result *res = NULL;
	hv_status s = hv_mime_detect_cached_lstat(*st, (const char *const *)files, lst, lerr, n,
						  mo, &res);
	if (s == HV_EDB && *st) {
		/* The cache could not be read or written (a page of it damaged): it only saves
		 * time, so these files and the rest are answered without it, and it is not used
		 * again. Any other failure (libmagic cannot be loaded) is the call's. */
		cli_warn(o->c, "%s; answering without the MIME cache", hv_error_last());
		hv_store_close(*st);
		*st = NULL;
		o->rc = EXIT_WARN;
		s = hv_mime_detect_cached_lstat(NULL, (const char *const *)files, lst, lerr, n, mo,
						&res);
	}
	if (s < 0) {
		cli_error("%s", hv_error_last());
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		print_answer(o, files[i], strlen(files[i]), &res[i]);
	hv_mime_results_free(res, n);
	return 0;
}

static void mime_cli_free(struct mime_cli *m, char **list_bufs)
{
	for (size_t i = 0; list_bufs && i < m->n_lists; i++)
		free(list_bufs[i]);
	free(list_bufs);
	free(m->lists);
	free(m->excludes);
}

/* Reads list l (whole: its paths are answered as arguments are) into *buf, and appends a
 * pointer to each of its paths to *pos: a path ends at the separator (or the list's end),
 * and empty ones are skipped. 0, or EXIT_USAGE with the error printed: a list that cannot
 * be read, or a NUL byte in a list of lines (a path holds none: the list is not lines). */
static int read_list(const cli_common *c, const struct mime_list *l, char **buf, char ***pos,
		     int *npos)
{
	bool std_in = strcmp(l->name, "-") == 0;
	const char *opt = l->sep ? "--files-from" : "--files0-from";
	int fd = std_in ? STDIN_FILENO : open(l->name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cli_usage_error(c, "%s %s: %s", opt, l->name, strerror(errno));
	/* A regular file's size is known: one buffer of that size, made present at once
	 * (hv_bulk_calloc: a 4,000-path list is 80 pages, and faulting them one by one cost a warm
	 * run more than a millisecond). A list that grows meanwhile, or a pipe, doubles it as it
	 * fills. */
	struct stat fs;
	size_t len = 0, cap = 65536;
	if (fstat(fd, &fs) == 0 && S_ISREG(fs.st_mode) && fs.st_size > 0 &&
	    (uint64_t)fs.st_size < SIZE_MAX / 4)
		cap = (size_t)fs.st_size + 1; /* + 1: the read that returns 0 has room */
	char *b = hv_bulk_calloc(cap + 1);
	int err = b ? 0 : ENOMEM;
	bool nul = false;
	while (!err) {
		if (len == cap) {
			char *nb = cap < SIZE_MAX / 4 ? realloc(b, cap * 2 + 1) : NULL;
			if (!nb) {
				err = ENOMEM;
				break;
			}
			b = nb;
			cap *= 2;
		}
		ssize_t got = read(fd, b + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		/* A non-blocking stdin (as Node hands pipes out): wait for the list. */
		if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		    hv_fd_wait(fd, POLLIN) == 0)
			continue;
		if (got < 0) {
			err = errno;
		} else if (got == 0) {
			break;
		} else if (l->sep && memchr(b + len, '\0', (size_t)got)) {
			nul = true; /* said at once: not a list to read to its end */
			break;
		} else {
			/* Empty paths (runs of separators) are dropped as they come: a list of
			 * nothing else (--files0-from /dev/zero) never grows the buffer. */
			char sep = l->sep;
			size_t w = len;
			for (size_t i = len; i < len + (size_t)got; i++)
				if (b[i] != sep || (w > 0 && b[w - 1] != sep))
					b[w++] = b[i];
			len = w;
		}
	}
	if (!std_in)
		(void)close(fd); /* read only: everything was read, or err says why not */
	if (!err && !b)
		err = ENOMEM;
	if (err) {
		free(b);
		return cli_usage_error(c, "%s %s: %s", opt, l->name, strerror(err));
	}
	if (nul) {
		free(b);
		return cli_usage_error(c, "%s %s: a NUL byte: not a list of lines (--files0-from reads "
					  "one of NUL-ended paths)",
				       opt, l->name);
	}
	b[len] = '\0';
	size_t n = 0;
	for (const char *q = b; (q = memchr(q, l->sep, len - (size_t)(q - b))); q++)
		n++;
	char **np = realloc(*pos, ((size_t)*npos + n + 2) * sizeof(*np));
	if (!np) {
		free(b);
		return cli_usage_error(c, "out of memory");
	}
	*pos = np;
	for (size_t i = 0; i < len;) {
		char *end = memchr(b + i, l->sep, len - i);
		size_t e = end ? (size_t)(end - b) : len;
		b[e] = '\0';
		if (e > i)
			np[(*npos)++] = b + i;
		i = e + 1;
	}
	np[*npos] = NULL;
	*buf = b;
	return 0;
}

int cmd_mime(int argc, char **argv)
{
	cli_common c = {.cmd = "mime"};
	struct mime_cli m = {0};
	hv_mime_opts_init(&m.opts);
	hv_collect_opts_init(&m.walk);
	char **pos = NULL;
	int npos = 0;
	int rc = cli_parse(&c, argc, argv, mime_opts, mime_opt, &m, mime_usage, &pos, &npos);
	if (rc == 0 && npos == 0 && m.n_lists == 0)
		rc = cli_usage_error(&c, "missing PATH");
	char **list_bufs = m.n_lists ? calloc(m.n_lists, sizeof(*list_bufs)) : NULL;
	if (rc == 0 && m.n_lists && !list_bufs)
		rc = cli_usage_error(&c, "out of memory");
	for (size_t i = 0; rc == 0 && list_bufs && i < m.n_lists; i++)
		rc = read_list(&c, &m.lists[i], &list_bufs[i], &pos, &npos);
	if (rc == 0)
		rc = cli_check_format(&c, FMT_JSONL, "json,jsonl,text,nul");
	if (rc != 0) {
		free(pos);
		mime_cli_free(&m, list_bufs);
		return rc < 0 ? EXIT_DONE : rc;
	}
	cli_check_excludes(&c, m.excludes, m.n_excludes);
	/* Each argument's lstat: the directory decision and, for a file, its answer's. */
	size_t nargs = npos > 0 ? (size_t)npos : 1; /* npos > 0 here; never calloc(0) */
	/* Each element is written by an lstat thread and read here: made present at once. */
	bool fits = nargs < SIZE_MAX / sizeof(struct stat);
	struct stat *lst = fits ? hv_bulk_calloc(nargs * sizeof(*lst)) : NULL;
	int *lerr = fits ? hv_bulk_calloc(nargs * sizeof(*lerr)) : NULL;
	if (!lst || !lerr) {
		cli_error("out of memory");
		free(lst);
		free(lerr);
		free(pos);
		mime_cli_free(&m, list_bufs);
		return EXIT_WARN;
	}
	/* libmagic's sandboxed workers are forked by a spawner, which must be forked while this
	 * process has one thread. File arguments fork it at their first cache miss (the library
	 * does, before its detection threads start), so a fully cached run forks nothing; a
	 * directory's walk runs threads while it detects, so it is started before the first
	 * directory is walked. HARVEST_BENCH_MIME_IN_PROCESS=1 runs libmagic in this process
	 * instead, for scripts/bench.sh to measure what the isolation costs: not for use. */
	const char *in_process = getenv("HARVEST_BENCH_MIME_IN_PROCESS");
	bool isolate = !(in_process && strcmp(in_process, "1") == 0);
	if (!isolate)
		hv_magic_set_isolation(false, 0);
	bool spawner_started = false;
	struct lstat_job lj = {.paths = pos, .lst = lst, .lerr = lerr, .n = (size_t)npos};
	lstat_begin(&lj, m.opts.threads);
	struct mime_out o = {.c = &c, .rc = EXIT_DONE};
	hv_store *st = NULL;
	hv_status open_rc = m.no_cache ? HV_OK : hv_store_open_with_cache(&st, c.db, c.cache_db,
									  HV_STORE_NO_HISTORY);
	lstat_finish(&lj);
	if (open_rc != HV_OK) {
		/* The cache only saves time: without it every answer is still right. Exit 1, as for
		 * any warning: the output is complete, but something was wrong. */
		cli_warn(&c, "%s; answering without the MIME cache", hv_error_last());
		st = NULL;
		o.rc = EXIT_WARN;
	}
	if (c.format == FMT_JSON || c.format == FMT_JSONL) {
		if (!(o.j = cli_json_stdout(&c))) {
			hv_store_close(st);
			free(lst);
			free(lerr);
			free(pos);
			mime_cli_free(&m, list_bufs);
			return EXIT_WARN;
		}
		if (c.format == FMT_JSON)
			hv_json_array_begin(o.j);
	}
	m.walk.excludes = m.excludes;
	m.walk.n_excludes = m.n_excludes;
	m.walk.threads = m.opts.threads;
	m.walk.on_warning = on_walk_warning;
	m.walk.ctx = &o;
	cli_progress_init(&o.progress, &c);
	/* In argument order; runs of file arguments are answered together (at most CHUNK at a
	 * time), each directory as it is walked: nothing is listed ahead. */
	enum { CHUNK = 4096 };
	int first = 0; /* the first file argument not answered yet */
	bool fatal = false;
	for (int i = 0; i <= npos && !fatal; i++) {
		bool is_dir = false;
		if (i < npos) {
			is_dir = !lerr[i] && S_ISDIR(lst[i].st_mode);
			/* A symlink to a directory is walked as that directory: only a symlink
			 * costs a second call. */
			struct stat target;
			if (!lerr[i] && S_ISLNK(lst[i].st_mode))
				is_dir = stat(pos[i], &target) == 0 && S_ISDIR(target.st_mode);
		}
		if ((i == npos || is_dir || i - first == CHUNK) && i > first) {
			fatal = answer_files(&o, &st, &m.opts, pos + first, lst + first, lerr + first,
					     (size_t)(i - first)) != 0;
			first = i;
		}
		if (!is_dir || fatal)
			continue;
		if (isolate && !spawner_started) {
			hv_magic_set_isolation(true, 0);
			spawner_started = true;
		}
		o.prefix = pos[i];
		o.prefix_len = strlen(pos[i]);
		hv_status s = hv_mime_detect_dir(st, pos[i], &m.walk, &m.opts, on_dir_answer, &o);
		if (s < 0) {
			/* This argument failed; the others are still answered. */
			cli_progress_end(&o.progress);
			cli_error("%s", o.oom ? "out of memory" : hv_error_last());
			o.rc = EXIT_WARN;
			fatal = s == HV_ENOMEM;
		} else if (s == HV_WARN) {
			o.rc = EXIT_WARN;
		}
		first = i + 1;
	}
	if (fatal)
		o.rc = EXIT_WARN;
	cli_progress_end(&o.progress);
	if (st && hv_store_close(st) != HV_OK) {
		cli_error("%s", hv_error_last());
		o.rc = EXIT_WARN;
	}
	if (o.j) {
		if (c.format == FMT_JSON) {
			hv_json_array_end(o.j);
			hv_json_newline(o.j);
		}
		if (cli_json_finish(o.j) != EXIT_DONE)
			o.rc = EXIT_WARN;
	} else if (fflush(stdout) != 0 || ferror(stdout)) {
		cli_error("standard output: %s", cli_stdout_error());
		o.rc = EXIT_WARN;
	}
	free(o.joined);
	free(lst);
	free(lerr);
	free(pos);
	mime_cli_free(&m, list_bufs);
	return o.rc;
}
