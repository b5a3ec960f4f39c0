#include "testutil.h"

#include <openssl/evp.h>
#include <sqlite3.h>

#include "harvest/execute.h"
#include "harvest/store.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

char *tu_mkdtemp(void)
{
	const char *tmp = getenv("TMPDIR");
	char *t = tu_path(tmp && *tmp ? tmp : "/tmp", "harvest-test.XXXXXX");
	if (!mkdtemp(t))
		fail_msg("mkdtemp: %s", strerror(errno));
	chmod(t, 0755); /* privilege-dropping tests must be able to reach it */
	return t;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP || flag == FTW_D)
		chmod(path, 0700), rmdir(path);
	else
		unlink(path);
	return 0;
}

void tu_rmrf(const char *path)
{
	/* Unreadable directories left by a test are opened up first, then removed. */
	pid_t pid = fork();
	if (pid == 0) {
		execlp("chmod", "chmod", "-R", "u+rwx", path, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
	nftw(path, rm_one, 64, FTW_DEPTH | FTW_PHYS);
}

char *tu_path(const char *dir, const char *rel)
{
	size_t a = strlen(dir), b = strlen(rel);
	char *p = malloc(a + b + 2);
	assert_non_null(p);
	memcpy(p, dir, a);
	p[a] = '/';
	memcpy(p + a + 1, rel, b + 1);
	return p;
}

void tu_write(const char *dir, const char *rel, const void *data, size_t len)
{
	char *p = tu_path(dir, rel);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		fail_msg("%s: %s", p, strerror(errno));
	const char *c = data;
	while (len > 0) {
		ssize_t n = write(fd, c, len);
		if (n < 0)
			fail_msg("write %s: %s", p, strerror(errno));
		c += n;
		len -= (size_t)n;
	}
	close(fd);
	free(p);
}

void tu_make_young(const char *path)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = now.tv_sec + 3600}};
	if (utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW) != 0)
		fail_msg("utimensat %s: %s", path, strerror(errno));
}

void tu_make_far_future(const char *path)
{
	struct timespec t[2] = {{TU_FAR_FUTURE_SEC, 500000000}, {TU_FAR_FUTURE_SEC, 500000000}};
	if (utimensat(AT_FDCWD, path, t, 0) != 0)
		fail_msg("utimensat %s: %s", path, strerror(errno));
	struct stat st;
	if (stat(path, &st) != 0)
		fail_msg("stat %s: %s", path, strerror(errno));
	if (st.st_mtim.tv_sec != TU_FAR_FUTURE_SEC)
		fail_msg("the test's file system cannot hold 2300-01-01 (mtime %lld): run the "
			 "tests on ext4 with 256-byte inodes, XFS, Btrfs or tmpfs",
			 (long long)st.st_mtim.tv_sec);
}

void tu_mkdir(const char *dir, const char *rel)
{
	char *p = tu_path(dir, rel);
	if (mkdir(p, 0755) != 0)
		fail_msg("mkdir %s: %s", p, strerror(errno));
	free(p);
}

static void append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = *cap ? *cap : 4096;
		while (*len + n + 1 > c)
			c *= 2;
		*buf = realloc(*buf, c);
		assert_non_null(*buf);
		*cap = c;
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
}

char *tu_read_fd(int fd, size_t *len)
{
	char *buf = NULL;
	size_t cap = 0;
	*len = 0;
	append(&buf, len, &cap, "", 0);
	char chunk[65536];
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		append(&buf, len, &cap, chunk, (size_t)n);
	}
	return buf;
}

void tu_run(tu_result *r, const char *cwd, const char *stdin_data, char *const argv[])
{
	int out[2], err[2], in[2];
	memset(r, 0, sizeof(*r));
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	assert_int_equal(pipe2(err, O_CLOEXEC), 0);
	assert_int_equal(pipe2(in, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (cwd && chdir(cwd) != 0)
			_exit(126);
		if (stdin_data) {
			dup2(in[0], 0);
		} else {
			int fd = open("/dev/null", O_RDONLY);
			dup2(fd, 0);
		}
		dup2(out[1], 1);
		dup2(err[1], 2);
		signal(SIGPIPE, SIG_DFL);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	close(in[0]);
	signal(SIGPIPE, SIG_IGN);
	size_t in_left = stdin_data ? strlen(stdin_data) : 0;
	if (in_left == 0)
		close(in[1]), in[1] = -1;
	/* POLLOUT promises room for some bytes, not all: a blocking write of the rest would wait
	 * for a child that itself waits for us to read its output. */
	if (in[1] >= 0)
		assert_int_equal(fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK), 0);
	size_t ocap = 0, ecap = 0;
	append(&r->out, &r->out_len, &ocap, "", 0);
	append(&r->err, &r->err_len, &ecap, "", 0);
	int open_fds = 2;
	char buf[65536];
	while (open_fds > 0 || in[1] >= 0) {
		struct pollfd p[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {in[1], POLLOUT, 0}};
		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			fail_msg("poll: %s", strerror(errno));
		}
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t n = read(p[i].fd, buf, sizeof(buf));
			if (n <= 0) {
				close(p[i].fd);
				if (i == 0)
					out[0] = -1;
				else
					err[0] = -1;
				open_fds--;
			} else if (i == 0) {
				append(&r->out, &r->out_len, &ocap, buf, (size_t)n);
			} else {
				append(&r->err, &r->err_len, &ecap, buf, (size_t)n);
			}
		}
		if (in[1] >= 0 && (p[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
			ssize_t n = write(in[1], stdin_data, in_left);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0) {
				in_left = 0;
			} else {
				stdin_data += n;
				in_left -= (size_t)n;
			}
			if (in_left == 0)
				close(in[1]), in[1] = -1;
		}
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void tu_harvestv(tu_result *r, const char *cwd, const char *stdin_data, const char *const *args)
{
	size_t n = 0;
	while (args[n])
		n++;
	char **argv = calloc(n + 2, sizeof(*argv));
	assert_non_null(argv);
	argv[0] = (char *)HARVEST_BIN;
	for (size_t i = 0; i < n; i++)
		argv[i + 1] = (char *)args[i];
	tu_run(r, cwd, stdin_data, argv);
	free(argv);
}

/* The NULL-terminated variadic arguments from arg on, into args (256 slots). */
static void gather_args(const char **args, const char *arg, va_list ap)
{
	size_t n = 0;
	for (const char *a = arg; a && n < 255; a = va_arg(ap, const char *))
		args[n++] = a;
	args[n] = NULL;
}

void tu_harvest(tu_result *r, const char *arg, ...)
{
	const char *args[256];
	va_list ap;
	va_start(ap, arg);
	gather_args(args, arg, ap);
	va_end(ap);
	tu_harvestv(r, NULL, NULL, args);
}

void tu_harvest_limitedv(tu_result *r, const char *limit, const char *const *args)
{
	size_t n = 0;
	while (args[n])
		n++;
	char script[256];
	int len = snprintf(script, sizeof(script),
			   "exec 3<&- 4<&- 5<&- 6<&- 7<&- 8<&- 9<&-; ulimit %s && exec \"$@\"", limit);
	assert_true(len > 0 && (size_t)len < sizeof(script));
	char **argv = calloc(n + 6, sizeof(*argv));
	assert_non_null(argv);
	argv[0] = "sh";
	argv[1] = "-c";
	argv[2] = script;
	argv[3] = "sh";
	argv[4] = (char *)HARVEST_BIN;
	for (size_t i = 0; i < n; i++)
		argv[i + 5] = (char *)args[i];
	tu_run(r, NULL, NULL, argv);
	free(argv);
}

void tu_harvest_limited(tu_result *r, const char *limit, const char *arg, ...)
{
	const char *args[256];
	va_list ap;
	va_start(ap, arg);
	gather_args(args, arg, ap);
	va_end(ap);
	tu_harvest_limitedv(r, limit, args);
}

void tu_result_free(tu_result *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

/* libgcov's, linked in a coverage build only (a weak reference: NULL in any other). */
extern void __gcov_dump_one(void *root) __attribute__((weak));

/* Ends a forked child with status. In a coverage build through exit(), which writes the
 * counters of what the child ran (_exit would lose them: a test's child would count as code
 * no test ran); in any other build with _exit(), which runs nothing of the parent's (atexit
 * handlers, stdio buffers, the leak checker). */
static _Noreturn void child_exit(int status)
{
	if (__gcov_dump_one)
		exit(status);
	_exit(status);
}

/* Forks; the child runs fn(arg) after prepare() (NULL: nothing; a nonzero return is the
 * child's status) and exits with fn's return. Returns the child's exit status. */
static int fork_run(int (*prepare)(void), int (*fn)(void *arg), void *arg)
{
	fflush(NULL); /* nothing buffered is written twice when the child exits */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int rc = prepare ? prepare() : 0;
		child_exit(rc ? rc : fn(arg));
	}
	return tu_wait(pid);
}

static int drop_to_nobody(void)
{
	if (geteuid() != 0)
		return 0;
	struct passwd *pw = getpwnam("nobody");
	uid_t uid = pw ? pw->pw_uid : 65534;
	gid_t gid = pw ? pw->pw_gid : 65534;
	if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 ||
	    setresuid(uid, uid, uid) != 0)
		return 99;
	return 0;
}

int tu_as_nobody(int (*fn)(void *arg), void *arg)
{
	return fork_run(drop_to_nobody, fn, arg);
}

int tu_in_child(int (*fn)(void *arg), void *arg)
{
	return fork_run(NULL, fn, arg);
}

/* ---- Helpers for the ls/walk end-to-end tests. ---- */
#include <dirent.h>

#include "tjson.h"

int tu_deep_dir(const char *root, const char *name, int levels)
{
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		fail_msg("%s: %s", root, strerror(errno));
	for (int i = 0; i < levels; i++) {
		if (mkdirat(fd, name, 0755) != 0)
			fail_msg("mkdirat at depth %d: %s", i + 1, strerror(errno));
		int next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0)
			fail_msg("openat at depth %d: %s", i + 1, strerror(errno));
		close(fd);
		fd = next;
	}
	return fd;
}

void tu_write_at(int dfd, const char *file, unsigned mode, const char *data)
{
	int f = openat(dfd, file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
	if (f < 0)
		fail_msg("%s: %s", file, strerror(errno));
	size_t len = strlen(data);
	if (write(f, data, len) != (ssize_t)len)
		fail_msg("%s: short write", file);
	close(f);
}

void tu_rmrf_deep(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return;
	if (!S_ISDIR(st.st_mode)) {
		unlink(path);
		return;
	}
	chmod(path, 0700);
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rmdir(path);
		return;
	}
	/* The names of the directories entered below path: the way back up by "..". */
	char **names = NULL;
	size_t depth = 0, cap = 0;
	for (;;) {
		int dfd = dup(fd);
		DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
		if (!d) {
			if (dfd >= 0)
				close(dfd);
			break;
		}
		rewinddir(d); /* the dup shares the offset of an earlier scan of this directory */
		char *sub = NULL;
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			struct stat s;
			if (fstatat(fd, e->d_name, &s, AT_SYMLINK_NOFOLLOW) != 0)
				continue;
			if (!S_ISDIR(s.st_mode))
				unlinkat(fd, e->d_name, 0);
			else if (!sub)
				sub = strdup(e->d_name);
		}
		closedir(d);
		if (sub) {
			/* Best effort: if it stays unreadable, the openat below says so. */
			int chmod_rc = fchmodat(fd, sub, 0700, 0);
			(void)chmod_rc;
			int nfd = openat(fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (nfd < 0) {
				int gone = unlinkat(fd, sub, AT_REMOVEDIR) == 0;
				free(sub);
				if (gone)
					continue;
				break; /* stuck: give up rather than loop */
			}
			if (depth == cap) {
				cap = cap ? cap * 2 : 64;
				char **n = realloc(names, cap * sizeof(*names));
				if (!n) {
					close(nfd);
					free(sub);
					break;
				}
				names = n;
			}
			names[depth++] = sub;
			close(fd);
			fd = nfd;
			continue;
		}
		if (depth == 0)
			break;
		int pfd = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (pfd < 0)
			break;
		close(fd);
		fd = pfd;
		char *name = names[--depth];
		int removed = unlinkat(fd, name, AT_REMOVEDIR) == 0;
		free(name);
		if (!removed)
			break; /* e.g. a mount point (EBUSY): entering it again would loop */
	}
	close(fd);
	while (depth > 0)
		free(names[--depth]);
	free(names);
	rmdir(path);
}

int tu_run_to_file(const char *cwd, char *const argv[], const char *out_path, char **err,
		   size_t *err_len)
{
	int ep[2];
	assert_int_equal(pipe2(ep, O_CLOEXEC), 0);
	int ofd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (ofd < 0)
		fail_msg("%s: %s", out_path, strerror(errno));
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (cwd && chdir(cwd) != 0)
			_exit(126);
		int in = open("/dev/null", O_RDONLY);
		dup2(in, 0);
		dup2(ofd, 1);
		dup2(ep[1], 2);
		signal(SIGPIPE, SIG_DFL);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(ofd);
	close(ep[1]);
	size_t len;
	char *buf = tu_read_fd(ep[0], &len);
	close(ep[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (err) {
		*err = buf;
	} else {
		free(buf);
	}
	if (err_len)
		*err_len = len;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A short, printable rendering of bytes for failure messages (static buffer: one at a time). */
static const char *tu_show(const char *s, size_t len)
{
	static char buf[512];
	size_t o = 0;
	for (size_t i = 0; i < len && o + 8 < sizeof(buf); i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\\x%02x", c);
	}
	buf[o] = '\0';
	return buf;
}

void tu_recs_parse(tu_recs *rs, const char *out, size_t len, bool jsonl, const char *key,
		   bool camel)
{
	memset(rs, 0, sizeof(*rs));
	if (!tj_utf8_valid(out, len))
		fail_msg("harvest's output is not valid UTF-8");
	if (jsonl && len == 0)
		return;
	if (jsonl) {
		if (len > 0 && out[len - 1] != '\n')
			fail_msg("jsonl output does not end with a newline");
		rs->doc = tj_parse_lines(out, len, NULL);
	} else {
		rs->doc = tj_parse(out, len);
	}
	if (!rs->doc)
		fail_msg("harvest's output is not valid %s: %.300s", jsonl ? "jsonl" : "json", out);
	if (tj_type(rs->doc) != TJ_ARRAY)
		fail_msg("json output is not an array: %.300s", out);
	rs->n = tj_len(rs->doc);
	rs->v = calloc(rs->n ? rs->n : 1, sizeof(*rs->v));
	assert_non_null(rs->v);
	const char *dir_key = camel ? "isDir" : "is_dir";
	const char *other_dir_key = camel ? "is_dir" : "isDir";
	for (size_t i = 0; i < rs->n; i++) {
		const tj_value *o = tj_at(rs->doc, i);
		tu_rec *r = &rs->v[i];
		r->obj = o;
		if (tj_type(o) != TJ_OBJECT)
			fail_msg("record %zu is not an object", i);
		r->key = tj_str(tj_get(o, key), &r->key_len);
		if (!r->key)
			fail_msg("record %zu has no string \"%s\"", i, key);
		if (tj_get(o, other_dir_key))
			fail_msg("record %zu (%s) has the key \"%s\" in %s case", i,
				 tu_show(r->key, r->key_len), other_dir_key, camel ? "camel" : "snake");
		const tj_value *d = tj_get(o, dir_key), *s = tj_get(o, "size");
		if (!d)
			r->is_dir = TU_ABSENT;
		else if (tj_is_null(d))
			r->is_dir = TU_NULL;
		else if (tj_type(d) == TJ_BOOL)
			r->is_dir = tj_bool(d);
		else
			fail_msg("record %zu (%s): \"%s\" is not a bool", i, tu_show(r->key, r->key_len),
				 dir_key);
		if (!s)
			r->size = TU_ABSENT;
		else if (tj_is_null(s))
			r->size = TU_NULL;
		else if (tj_type(s) == TJ_INT && tj_int(s) >= 0)
			r->size = tj_int(s);
		else
			fail_msg("record %zu (%s): \"size\" is not a size", i, tu_show(r->key, r->key_len));
		/* Unknown values: null in snake case, left out in camel case — never mixed. */
		if (camel ? (r->is_dir == TU_NULL || r->size == TU_NULL)
			  : (r->is_dir == TU_ABSENT || r->size == TU_ABSENT))
			fail_msg("record %zu (%s): unknown is_dir/size must be %s in %s case", i,
				 tu_show(r->key, r->key_len), camel ? "left out" : "null",
				 camel ? "camel" : "snake");
		if ((r->is_dir < 0) != (r->size < 0))
			fail_msg("record %zu (%s): is_dir and size must be known or unknown together", i,
				 tu_show(r->key, r->key_len));
		if (strcmp(key, "path") == 0 && tj_get(o, "name")) {
			size_t nlen;
			const char *name = tj_str(tj_get(o, "name"), &nlen);
			const char *slash = memrchr(r->key, '/', r->key_len);
			const char *base = slash ? slash + 1 : r->key;
			size_t blen = r->key_len - (size_t)(base - r->key);
			if (!name || nlen != blen || memcmp(name, base, blen) != 0)
				fail_msg("record %zu: \"name\" is not the last component of \"path\" (%s)", i,
					 tu_show(r->key, r->key_len));
		}
	}
}

const tu_rec *tu_recs_find(const tu_recs *rs, const char *key, size_t len)
{
	for (size_t i = 0; i < rs->n; i++)
		if (rs->v[i].key_len == len && memcmp(rs->v[i].key, key, len) == 0)
			return &rs->v[i];
	return NULL;
}

void tu_recs_free(tu_recs *rs)
{
	free(rs->v);
	tj_free(rs->doc);
	memset(rs, 0, sizeof(*rs));
}

/* ---- Helpers for the mime/collect/run end-to-end tests. ---- */

char *tu_read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *buf = NULL;
	size_t n = 0, cap = 0;
	append(&buf, &n, &cap, "", 0);
	char chunk[65536];
	for (;;) {
		ssize_t got = read(fd, chunk, sizeof(chunk));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			close(fd);
			free(buf);
			return NULL;
		}
		if (got == 0)
			break;
		append(&buf, &n, &cap, chunk, (size_t)got);
	}
	close(fd);
	if (len)
		*len = n;
	return buf;
}

struct nobody_exec {
	const char *cwd;
	char **argv;
	int out, err;
};

static int nobody_exec_fn(void *arg)
{
	struct nobody_exec *x = arg;
	if (x->cwd && chdir(x->cwd) != 0)
		return 126;
	int in = open("/dev/null", O_RDONLY);
	if (in < 0 || dup2(in, 0) < 0 || dup2(x->out, 1) < 0 || dup2(x->err, 2) < 0)
		return 126;
	signal(SIGPIPE, SIG_DFL);
	execv(x->argv[0], x->argv);
	return 127;
}

/* An unnamed file for a child's output: written by the child through the inherited
 * descriptor, whatever user it runs as. */
static int tu_anon_file(void)
{
	FILE *f = tmpfile();
	assert_non_null(f);
	int fd = dup(fileno(f));
	fclose(f);
	assert_true(fd >= 0);
	return fd;
}

/* All of the file fd is open on, from its start (pread: the offset is left alone). */
static char *read_from_start(int fd, size_t *len)
{
	char *buf = NULL;
	size_t n = 0, cap = 0;
	append(&buf, &n, &cap, "", 0);
	char chunk[65536];
	off_t off = 0;
	for (;;) {
		ssize_t got = pread(fd, chunk, sizeof(chunk), off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		append(&buf, &n, &cap, chunk, (size_t)got);
		off += got;
	}
	*len = n;
	return buf;
}

pid_t tu_spawn(char *const argv[], const char *out_path, const char *err_path)
{
	int o = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		     0644);
	int e = open(err_path ? err_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		     0644);
	if (o < 0 || e < 0)
		fail_msg("%s, %s: %s", out_path ? out_path : "/dev/null",
			 err_path ? err_path : "/dev/null", strerror(errno));
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		if (in < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		signal(SIGPIPE, SIG_DFL);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(o);
	close(e);
	return pid;
}

int tu_wait(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			fail_msg("waitpid %d: %s", pid, strerror(errno));
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void tu_harvest_as_nobody(tu_result *r, const char *cwd, const char *const *args)
{
	size_t n = 0;
	while (args[n])
		n++;
	char **argv = calloc(n + 2, sizeof(*argv));
	assert_non_null(argv);
	argv[0] = (char *)HARVEST_BIN;
	for (size_t i = 0; i < n; i++)
		argv[i + 1] = (char *)args[i];
	memset(r, 0, sizeof(*r));
	struct nobody_exec x = {cwd, argv, tu_anon_file(), tu_anon_file()};
	r->status = tu_as_nobody(nobody_exec_fn, &x);
	r->out = read_from_start(x.out, &r->out_len);
	r->err = read_from_start(x.err, &r->err_len);
	close(x.out);
	close(x.err);
	free(argv);
}

#include <sys/mount.h>

static char *tu_cleanup_dirs[64], *tu_cleanup_mounts[8];
static size_t tu_n_cleanup_dirs, tu_n_cleanup_mounts;

char *tu_tmpdir(void)
{
	assert_true(tu_n_cleanup_dirs < sizeof(tu_cleanup_dirs) / sizeof(tu_cleanup_dirs[0]));
	char *d = tu_mkdtemp();
	tu_cleanup_dirs[tu_n_cleanup_dirs++] = d;
	return d;
}

void tu_cleanup_umount(const char *path)
{
	assert_true(tu_n_cleanup_mounts < sizeof(tu_cleanup_mounts) / sizeof(tu_cleanup_mounts[0]));
	char *p = strdup(path);
	assert_non_null(p);
	tu_cleanup_mounts[tu_n_cleanup_mounts++] = p;
}

int tu_cleanup(void **state)
{
	(void)state;
	while (tu_n_cleanup_mounts > 0) {
		char *m = tu_cleanup_mounts[--tu_n_cleanup_mounts];
		umount2(m, MNT_DETACH);
		free(m);
	}
	while (tu_n_cleanup_dirs > 0) {
		char *d = tu_cleanup_dirs[--tu_n_cleanup_dirs];
		tu_rmrf_deep(d);
		free(d);
	}
	return 0;
}

int tu_run_sink(const char *cwd, char *const argv[],
		void (*sink)(void *ctx, const char *data, size_t n), void *ctx, char **err,
		size_t *err_len)
{
	int op[2], ep[2];
	assert_int_equal(pipe2(op, O_CLOEXEC), 0);
	assert_int_equal(pipe2(ep, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (cwd && chdir(cwd) != 0)
			_exit(126);
		int in = open("/dev/null", O_RDONLY);
		dup2(in, 0);
		dup2(op[1], 1);
		dup2(ep[1], 2);
		signal(SIGPIPE, SIG_DFL);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(op[1]);
	close(ep[1]);
	char *ebuf = NULL;
	size_t elen = 0, ecap = 0;
	append(&ebuf, &elen, &ecap, "", 0);
	static char chunk[1 << 20];
	int fds[2] = {op[0], ep[0]};
	while (fds[0] >= 0 || fds[1] >= 0) {
		struct pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			fail_msg("poll: %s", strerror(errno));
		}
		for (int i = 0; i < 2; i++) {
			if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t n = read(fds[i], chunk, sizeof(chunk));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(fds[i]);
				fds[i] = -1;
			} else if (i == 0) {
				sink(ctx, chunk, (size_t)n);
			} else {
				append(&ebuf, &elen, &ecap, chunk, (size_t)n);
			}
		}
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (err)
		*err = ebuf;
	else
		free(ebuf);
	if (err_len)
		*err_len = elen;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void tu_sha256_hex(const void *data, size_t len, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	assert_int_equal(EVP_Digest(data, len, md, &n, EVP_sha256(), NULL), 1);
	assert_int_equal(n, 32);
	for (unsigned i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

tu_fx *tu_fx_new(void)
{
	tu_fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->dir = tu_mkdtemp();
	f->root = tu_path(f->dir, "root");
	assert_int_equal(mkdir(f->root, 0755), 0);
	f->db = tu_path(f->dir, "harvest.db");
	if (hv_store_open(&f->st, f->db, 0) != HV_OK)
		fail_msg("hv_store_open: %s", hv_error_last());
	return f;
}

void tu_fx_free(tu_fx *f)
{
	hv_store_close(f->st);
	tu_rmrf(f->dir);
	free(f->dir);
	free(f->root);
	free(f->db);
	free(f);
}

void tu_execute_opts_events(hv_execute_opts *o, const char *const *argv)
{
	memset(o, 0, sizeof(*o));
	hv_run_opts_init(&o->run);
	hv_collect_opts_init(&o->collect);
	o->collect.no_content = true;
	o->run.argv = argv;
	o->run.end_descendants = true;
	o->no_history = true;
	o->changes = HV_CHANGES_EVENTS;
}

int tu_fx_setup(void **state)
{
	*state = tu_fx_new();
	return 0;
}

int tu_fx_teardown(void **state)
{
	tu_fx_free(*state);
	return 0;
}

void *tu_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		fputs("out of memory\n", stderr);
		abort();
	}
	return p;
}

void *tu_xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		fputs("out of memory\n", stderr);
		abort();
	}
	return p;
}

char *tu_xmemdup(const void *s, size_t len)
{
	char *p = tu_xmalloc(len + 1);
	memcpy(p, s, len);
	p[len] = '\0';
	return p;
}

/* ---- A corpus of small files for the MIME cache tests ---- */

tu_corpus *tu_corpus_new(size_t n, size_t extra,
			 const char *(*make)(size_t i, char *buf, size_t cap))
{
	tu_corpus *c = tu_xmalloc(sizeof(*c));
	c->dir = tu_mkdtemp();
	c->db = tu_path(c->dir, "h.db");
	c->cap = n + extra;
	c->paths = tu_xmalloc((c->cap ? c->cap : 1) * sizeof(*c->paths));
	c->n = 0;
	for (size_t i = 0; i < n; i++) {
		char buf[256];
		const char *bytes = make(i, buf, sizeof(buf));
		tu_write(c->dir, buf, bytes, strlen(bytes));
		c->paths[c->n++] = tu_path(c->dir, buf);
	}
	return c;
}

const char *tu_corpus_add(tu_corpus *c, const char *rel)
{
	if (c->n == c->cap)
		fail_msg("tu_corpus_add %s: no room kept", rel);
	c->paths[c->n] = tu_path(c->dir, rel);
	return c->paths[c->n++];
}

void tu_corpus_age(const tu_corpus *c)
{
	(void)c;
	/* The 2 s rule counts from the last change: a second more for the clock's granularity. */
	sleep(3);
}

void tu_corpus_free(tu_corpus *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		free(c->paths[i]);
	free(c->paths);
	tu_rmrf(c->dir);
	free(c->dir);
	free(c->db);
	free(c);
}

/* Overwrites the root page of table in the SQLite database db (its WAL checkpointed into it
 * first) with 0xff bytes: the database opens, and the first read of that table fails as
 * corrupt. */
void tu_damage_table(const char *db, const char *table)
{
	sqlite3 *h = NULL;
	assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_exec(h, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_stmt *q = NULL;
	assert_int_equal(sqlite3_prepare_v2(h,
					    "SELECT rootpage, (SELECT page_size FROM pragma_page_size)"
					    " FROM sqlite_schema WHERE name = ?1",
					    -1, &q, NULL),
			 SQLITE_OK);
	sqlite3_bind_text(q, 1, table, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	int64_t page = sqlite3_column_int64(q, 0), size = sqlite3_column_int64(q, 1);
	sqlite3_finalize(q);
	assert_int_equal(sqlite3_close(h), SQLITE_OK);
	assert_true(page > 1 && size >= 512);
	char *junk = malloc((size_t)size);
	assert_non_null(junk);
	memset(junk, 0xff, (size_t)size);
	int fd = open(db, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, junk, (size_t)size, (off_t)((page - 1) * size)), size);
	close(fd);
	free(junk);
}

double tu_now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void tu_sleep_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&t, &t) != 0 && errno == EINTR)
		;
}

bool tu_wait_for_file(const char *path, long ms)
{
	double end = tu_now_s() + (double)ms / 1000;
	for (;;) {
		struct stat sb;
		if (stat(path, &sb) == 0)
			return true;
		if (tu_now_s() >= end)
			return false;
		tu_sleep_ms(10);
	}
}

void tu_kill_fail(pid_t pid, const char *fmt, ...)
{
	char msg[4608];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	kill(pid, SIGKILL);
	(void)tu_wait(pid);
	fail_msg("%s", msg);
	abort(); /* (fail_msg does not return) */
}
