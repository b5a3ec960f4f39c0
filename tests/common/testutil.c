#include "testutil.h"

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

void tu_harvest(tu_result *r, const char *arg, ...)
{
	const char *args[256];
	size_t n = 0;
	va_list ap;
	va_start(ap, arg);
	for (const char *a = arg; a && n < 255; a = va_arg(ap, const char *))
		args[n++] = a;
	va_end(ap);
	args[n] = NULL;
	tu_harvestv(r, NULL, NULL, args);
}

void tu_result_free(tu_result *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

int tu_as_nobody(int (*fn)(void *arg), void *arg)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (geteuid() == 0) {
			struct passwd *pw = getpwnam("nobody");
			uid_t uid = pw ? pw->pw_uid : 65534;
			gid_t gid = pw ? pw->pw_gid : 65534;
			if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 ||
			    setresuid(uid, uid, uid) != 0)
				_exit(99);
		}
		_exit(fn(arg));
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
