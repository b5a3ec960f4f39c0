/* Argument parsing shared by every command, and the small printing helpers. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void cli_put_escaped(FILE *out, const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		size_t n = (unsigned char)s[i] >= 0x80 ? hv_utf8_char_length(s + i, len - i) : 1;
		if (n == 0)
			n = 1; /* a byte that is not UTF-8: escaped alone */
		char buf[16];
		size_t k = hv_text_escape(s + i, n, buf, sizeof(buf));
		fwrite(buf, 1, k, out);
		i += n;
	}
}

/* Writes the formatted message to stderr escaped: messages carry names (paths, option
 * values) that must not reach the terminal raw. */
static void put_message(const char *fmt, va_list ap)
{
	char small[512];
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	char *text = small;
	if (n >= (int)sizeof(small)) {
		char *big = malloc((size_t)n + 1);
		if (big) {
			vsnprintf(big, (size_t)n + 1, fmt, ap2);
			text = big;
		} else {
			n = (int)sizeof(small) - 1; /* out of memory: the start of it */
		}
	}
	va_end(ap2);
	if (n > 0)
		cli_put_escaped(stderr, text, (size_t)n);
	if (text != small)
		free(text);
}

int cli_usage_error(const cli_common *c, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "harvest %s: ", c->cmd);
	va_start(ap, fmt);
	put_message(fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see 'harvest %s --help')\n", c->cmd);
	return EXIT_USAGE;
}

void cli_error(const char *fmt, ...)
{
	va_list ap;
	fputs("harvest: ", stderr);
	va_start(ap, fmt);
	put_message(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void cli_warn(const cli_common *c, const char *fmt, ...)
{
	if (c->quiet)
		return;
	va_list ap;
	fputs("harvest: ", stderr);
	va_start(ap, fmt);
	put_message(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const cli_opt *find_long(const cli_opt *opts, const char *name, size_t len)
{
	for (const cli_opt *o = opts; o->name; o++)
		if (strlen(o->name) == len && memcmp(o->name, name, len) == 0)
			return o;
	return NULL;
}

static const cli_opt *find_short(const cli_opt *opts, char ch)
{
	for (const cli_opt *o = opts; o->name; o++)
		if (o->short_name && o->short_name == ch)
			return o;
	return NULL;
}

static int common_opt(cli_common *c, int id, const char *v)
{
	/* v is not NULL for OPT_FORMAT, OPT_CASE and OPT_DB: every command's option table
	 * declares them with has_arg 1, so cli_parse always has a value for them; the analyzer
	 * cannot see the tables. */
	switch (id) {
	case OPT_FORMAT:
		/* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): has_arg 1, see above */
		if (strcmp(v, "json") == 0)
			c->format = FMT_JSON;
		else if (strcmp(v, "jsonl") == 0)
			c->format = FMT_JSONL;
		else if (strcmp(v, "text") == 0)
			c->format = FMT_TEXT;
		else if (strcmp(v, "nul") == 0)
			c->format = FMT_NUL;
		else if (strcmp(v, "html") == 0)
			c->format = FMT_HTML;
		else
			return cli_usage_error(c, "--format: unknown format '%s'", v);
		return 0;
	case OPT_CASE:
		/* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): has_arg 1, see above */
		if (strcmp(v, "snake") == 0)
			c->kase = HV_CASE_SNAKE;
		else if (strcmp(v, "camel") == 0)
			c->kase = HV_CASE_CAMEL;
		else
			return cli_usage_error(c, "--case: expected snake or camel, not '%s'", v);
		return 0;
	case OPT_QUIET:
		c->quiet = true;
		return 0;
	case OPT_DB:
		/* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): has_arg 1, see above */
		if (!*v)
			return cli_usage_error(c, "--db: empty path");
		c->db = v;
		return 0;
	case OPT_CACHE_DB:
		if (!v || !*v)
			return cli_usage_error(c, "--cache-db: empty path");
		c->cache_db = v;
		return 0;
	}
	return -2; /* not a common option */
}

int cli_parse(cli_common *common, int argc, char **argv, const cli_opt *opts, cli_opt_fn fn,
	      void *ctx, const char *usage, char ***pos, int *npos)
{
	char **out = calloc((size_t)argc + 1, sizeof(char *));
	if (!out) {
		cli_error("out of memory");
		return EXIT_WARN;
	}
	int n = 0;
	bool options_done = false;
	for (int i = 0; i < argc; i++) {
		char *a = argv[i];
		if (options_done || a[0] != '-' || a[1] == '\0') {
			out[n++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			options_done = true;
			continue;
		}
		const cli_opt *o;
		const char *value = NULL;
		char shown[64];
		if (a[1] == '-') {
			const char *name = a + 2;
			const char *eq = strchr(name, '=');
			size_t len = eq ? (size_t)(eq - name) : strlen(name);
			o = find_long(opts, name, len);
			snprintf(shown, sizeof(shown), "--%.*s", (int)(len > 40 ? 40 : len), name);
			if (!o) {
				free(out);
				return cli_usage_error(common, "unknown option '%s'", shown);
			}
			if (eq) {
				if (!o->has_arg) {
					free(out);
					return cli_usage_error(common, "%s takes no value", shown);
				}
				value = eq + 1;
			}
		} else {
			o = a[2] == '\0' ? find_short(opts, a[1]) : NULL;
			snprintf(shown, sizeof(shown), "%.40s", a);
			if (!o) {
				free(out);
				return cli_usage_error(common, "unknown option '%s'", shown);
			}
		}
		if (o->has_arg && !value) {
			if (i + 1 >= argc) {
				free(out);
				return cli_usage_error(common, "%s needs a value", shown);
			}
			value = argv[++i];
		}
		if (o->id == OPT_HELP) {
			fputs(usage, stdout);
			free(out);
			return -1;
		}
		int rc = common_opt(common, o->id, value);
		if (rc == -2)
			rc = fn ? fn(ctx, common, o->id, value) : 0;
		if (rc != 0) {
			free(out);
			return rc;
		}
	}
	out[n] = NULL;
	*pos = out;
	*npos = n;
	return 0;
}

int cli_parse_uint(const cli_common *c, const char *opt, const char *v, uint64_t max,
		   uint64_t *out)
{
	if (hv_parse_uint(v, max, out) != HV_OK)
		return cli_usage_error(c, "%s: %s", opt, hv_error_last());
	return 0;
}

int cli_parse_int(const cli_common *c, const char *opt, const char *v, int min, int max,
		  int *out)
{
	int64_t x;
	if (hv_parse_int(v, min, max, &x) != HV_OK)
		return cli_usage_error(c, "%s: %s", opt, hv_error_last());
	*out = (int)x;
	return 0;
}

int cli_parse_duration(const cli_common *c, const char *opt, const char *v, uint64_t *out_ms)
{
	if (hv_parse_duration_ms(v, out_ms) != HV_OK)
		return cli_usage_error(c, "%s: %s", opt, hv_error_last());
	return 0;
}

int cli_parse_size(const cli_common *c, const char *opt, const char *v, uint64_t *out)
{
	if (hv_parse_size(v, out) != HV_OK)
		return cli_usage_error(c, "%s: %s", opt, hv_error_last());
	return 0;
}

int cli_parse_time(const cli_common *c, const char *opt, const char *v, int64_t *out_ns)
{
	if (hv_parse_time(v, hv_store_now_ns(), out_ns) != HV_OK)
		return cli_usage_error(c, "%s: %s", opt, hv_error_last());
	return 0;
}

/* Whether pattern has a '[' that fnmatch(3) cannot close, and so matches literally. */
static bool unclosed_bracket(const char *p)
{
	for (; *p; p++) {
		if (*p == '\\') {
			if (!p[1])
				return false;
			p++;
			continue;
		}
		if (*p != '[')
			continue;
		const char *q = p + 1;
		if (*q == '!' || *q == '^')
			q++;
		if (*q == ']')
			q++; /* a ']' first in the set is a member */
		while (*q && *q != ']')
			q++;
		if (!*q)
			return true;
		p = q;
	}
	return false;
}

void cli_check_excludes(const cli_common *c, const char *const *patterns, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *p = patterns[i];
		if (!*p)
			cli_warn(c, "--exclude '': an empty pattern matches no name");
		else if (strchr(p, '/'))
			cli_warn(c, "--exclude '%s': patterns are matched on names, which never contain "
				 "'/', so this one matches nothing", p);
		else if (unclosed_bracket(p))
			cli_warn(c, "--exclude '%s': a '[' without its ']' matches a literal '['", p);
	}
}

int cli_check_format(cli_common *c, cli_format dflt, const char *allowed)
{
	static const char *const names[] = {"", "json", "jsonl", "text", "nul", "html"};
	if (c->format == FMT_DEFAULT) {
		c->format = dflt;
		return 0;
	}
	const char *name = names[c->format];
	size_t len = strlen(name);
	for (const char *p = allowed; (p = strstr(p, name)) != NULL; p += len)
		if ((p == allowed || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))
			return 0;
	return cli_usage_error(c, "--format %s is not offered here (choose from %s)", name,
			       allowed);
}

uint64_t cli_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Whether a progress line is on the terminal now, for the signal handler. */
static volatile sig_atomic_t progress_on_screen;

/* SIGINT/SIGTERM/SIGHUP while a progress line is shown: clear it (write(2) is
 * async-signal-safe), then die of the signal as without the handler (SA_RESETHAND restored
 * the default; the signal is blocked until the handler returns). */
static void progress_signal(int sig)
{
	if (progress_on_screen) {
		int saved = errno;
		if (write(STDERR_FILENO, "\r\033[K", 4) < 0) {
			/* nothing more can be done in a handler */
		}
		errno = saved;
	}
	if (raise(sig) != 0) {
		/* cannot fail for a valid signal number */
	}
}

static void progress_catch_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old;
		/* Only where nothing else handles (or ignores) the signal: run has its own. */
		if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
		    (old.sa_flags & SA_SIGINFO))
			continue;
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = progress_signal;
		sa.sa_flags = SA_RESETHAND;
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
}

/* Whether stdout is the same terminal as stderr: records and the progress line would then
 * share one screen line, so no progress is shown. */
static bool stdout_is_stderr_terminal(void)
{
	struct stat o, e;
	return isatty(STDOUT_FILENO) && fstat(STDOUT_FILENO, &o) == 0 &&
	       fstat(STDERR_FILENO, &e) == 0 && o.st_rdev == e.st_rdev && o.st_ino == e.st_ino &&
	       o.st_dev == e.st_dev;
}

void cli_progress_init(cli_progress *p, const cli_common *c)
{
	memset(p, 0, sizeof(*p));
	p->enabled = !c->quiet && isatty(STDERR_FILENO) && !stdout_is_stderr_terminal();
	if (p->enabled) {
		p->start_ns = p->last_ns = cli_now_ns();
		progress_catch_signals();
	}
}

void cli_progress_update(cli_progress *p, uint64_t entries, uint64_t files, uint64_t bytes)
{
	/* Look at the clock once every 256 records only: this sits in the hot loop. */
	if (!p->enabled || (++p->tick & 255) != 0)
		return;
	uint64_t now = cli_now_ns();
	if (now - p->start_ns < 1000000000u || now - p->last_ns < 200000000u)
		return;
	p->last_ns = now;
	p->shown = true;
	double secs = (double)(now - p->start_ns) / 1e9;
	fprintf(stderr, "\r\033[Kharvest: %llu entries, %llu files, %.1f MiB, %.0f entries/s",
		(unsigned long long)entries, (unsigned long long)files,
		(double)bytes / (1024.0 * 1024.0), (double)entries / secs);
	fflush(stderr);
	progress_on_screen = 1;
}

void cli_progress_end(cli_progress *p)
{
	if (p->shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	p->shown = false;
	progress_on_screen = 0;
}

static _Thread_local uint64_t last_flush_ns;

hv_json *cli_json_stdout(const cli_common *c)
{
	hv_json *j = NULL;
	if (hv_json_new_fd(&j, STDOUT_FILENO, c->kase) != HV_OK) {
		cli_error("%s", hv_error_last());
		return NULL;
	}
	last_flush_ns = cli_now_ns();
	return j;
}

void cli_output_record(hv_json *j, const cli_common *c)
{
	if (c->format != FMT_JSONL)
		return;
	hv_json_newline(j);
	/* jsonl is flushed as produced, in batches: what is buffered goes out once it has
	 * waited 50 ms, so a reader sees records promptly and a fast walk is not slowed down by
	 * one write() per line. (The clock read is a vDSO call, ~20 ns.) */
	uint64_t now = cli_now_ns();
	if (now - last_flush_ns >= 50000000u) {
		hv_json_flush(j);
		last_flush_ns = now;
	}
}

int cli_json_finish(hv_json *j)
{
	if (!j)
		return EXIT_WARN;
	hv_status st = hv_json_flush(j);
	hv_json_free(j);
	if (st != HV_OK) {
		cli_error("standard output: %s", hv_error_last());
		return EXIT_WARN;
	}
	return EXIT_DONE;
}
