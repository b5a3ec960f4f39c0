/* Argument parsing shared by every command (the printers are in print.c). */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
			return cli_usage_error(c, "--format: unknown format '%s' (one of json, jsonl, text, "
						  "nul, html, as the command offers)", v);
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
