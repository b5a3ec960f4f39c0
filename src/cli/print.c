/* The CLI's shared printers: messages on stderr (escaped), the exit status of a library
 * status, progress on a terminal, and the JSON writer on stdout. Records themselves are written
 * by the library (harvest/records.h). */
#include "cli.h"
#include "../lib/fdio.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- standard output through stdio ---- */

/* The reason the last write to standard output failed (0: none yet). */
static int stdout_errno;

/* stdio's writes to fd 1: waits out a non-blocking pipe (as Node hands them to children)
 * instead of failing at its first EAGAIN, and keeps the reason of a failure. */
static ssize_t stdout_write(void *cookie, const char *buf, size_t n)
{
	(void)cookie;
	if (hv_write_all(STDOUT_FILENO, buf, n) == 0)
		return (ssize_t)n;
	stdout_errno = errno;
	return 0; /* fopencookie(3): 0 is the error, never a negative value */
}

void cli_stdout_init(void)
{
	cookie_io_functions_t io = {.write = stdout_write};
	FILE *f = fopencookie(NULL, "w", io);
	if (!f)
		return; /* stdio's own stream, as before */
	if (isatty(STDOUT_FILENO))
		setvbuf(f, NULL, _IOLBF, 0);
	stdout = f;
}

const char *cli_stdout_error(void)
{
	return stdout_errno ? strerror(stdout_errno) : "write error";
}

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

/* Writes prefix, the formatted message escaped (messages carry names: paths, option values
 * that must not reach the terminal raw) and suffix as one line on stderr, in one write: the
 * lines of harvest processes that share a stderr (commands run side by side in a sandbox)
 * never mix. */
static void put_line(const char *prefix, const char *suffix, const char *fmt, va_list ap)
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
	char *line = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&line, &len);
	FILE *out = m ? m : stderr; /* out of memory: piece by piece */
	fputs(prefix, out);
	if (n > 0)
		cli_put_escaped(out, text, (size_t)n);
	fputs(suffix, out);
	fputc('\n', out);
	if (m && fclose(m) == 0)
		fwrite(line, 1, len, stderr);
	free(line);
	if (text != small)
		free(text);
}

int cli_usage_error(const cli_common *c, const char *fmt, ...)
{
	char prefix[64], suffix[96];
	snprintf(prefix, sizeof(prefix), "harvest %s: ", c->cmd);
	snprintf(suffix, sizeof(suffix), " (see 'harvest %s --help')", c->cmd);
	va_list ap;
	va_start(ap, fmt);
	put_line(prefix, suffix, fmt, ap);
	va_end(ap);
	return EXIT_USAGE;
}

int cli_output_opt(const cli_common *c, const char *v, const char **out)
{
	if (!*v)
		return cli_usage_error(c, "-o: empty path (give a file name, or - for standard "
					  "output)");
	*out = v;
	return 0;
}

void cli_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	put_line("harvest: ", "", fmt, ap);
	va_end(ap);
}

void cli_warn(const cli_common *c, const char *fmt, ...)
{
	if (c->quiet)
		return;
	va_list ap;
	va_start(ap, fmt);
	put_line("harvest: ", "", fmt, ap);
	va_end(ap);
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

/* The clock the jsonl flush looks at after every record: the coarse one (a tick's
 * resolution, a few ms, plenty against 50 ms) is a plain read of a vDSO page, while the
 * precise one reads the TSC, which under a hypervisor costs far more; at 200,000 records
 * that was more than 1% of a walk. */
static uint64_t coarse_now_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		return cli_now_ns();
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

hv_json *cli_json_stdout(const cli_common *c)
{
	hv_json *j = NULL;
	if (hv_json_new_fd(&j, STDOUT_FILENO, c->kase) != HV_OK) {
		cli_error("%s", hv_error_last());
		return NULL;
	}
	last_flush_ns = coarse_now_ns();
	return j;
}

void cli_output_record(hv_json *j, const cli_common *c)
{
	if (c->format != FMT_JSONL)
		return;
	hv_json_newline(j);
	/* jsonl is flushed as produced, in batches: what is buffered goes out once it has
	 * waited 50 ms, so a reader sees records promptly and a fast walk is not slowed down by
	 * one write() per line. */
	uint64_t now = coarse_now_ns();
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

/* The exit status of a library status (SPEC 3): 0 done, 1 warnings and runtime failures
 * (a missing run or artifact included), 2 a usage error, 3 a path that is missing or not a
 * directory. Every command but run (whose own failures are all 125) maps through it. */
int cli_exit_status(hv_status s)
{
	switch (s) {
	case HV_OK:
	case HV_DONE: return EXIT_DONE;
	case HV_EUSAGE: return EXIT_USAGE;
	case HV_ENOTDIR: return EXIT_NOTDIR;
	default: return EXIT_WARN;
	}
}
