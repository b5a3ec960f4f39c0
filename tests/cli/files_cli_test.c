/* End-to-end tests of `harvest cat`, `harvest put` and `harvest rm`: bytes through the built
 * binary's stdin and stdout (every byte value, 100 MiB), hostile names, parents, --mode,
 * atomic replacement seen by a reader of the old file, FIFOs refused without hanging, a
 * write error on /dev/full, symlinks never followed by rm, trees with links out, a
 * 20,000-level tree, permission denied as nobody, missing paths (exit 3), usage (exit 2)
 * and --help. The races (a directory swapped mid-way) are in tests/unit/files_test.c,
 * through the library's test hooks. HV_TEST_FILTER=<test name> runs one case. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------------------- */

/* Runs harvest ARGS... in cwd (NULL: here) with stdin from in_path and stdout to out_path
 * (NULL: /dev/null for both), stderr kept in *err (may be NULL). Returns the exit status. */
/* As hv_io's out_path: harvest's stdout closed (as by `>&-`). */
#define STDOUT_CLOSED "<closed>"

static int hv_io(const char *cwd, const char *in_path, const char *out_path, char **err, ...)
{
	const char *args[32] = {HARVEST_BIN};
	size_t n = 1;
	va_list ap;
	va_start(ap, err);
	for (const char *a = va_arg(ap, const char *); a && n < 31; a = va_arg(ap, const char *))
		args[n++] = a;
	va_end(ap);
	args[n] = NULL;
	int ep[2];
	assert_int_equal(pipe2(ep, O_CLOEXEC), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
		bool closed = out_path && !strcmp(out_path, STDOUT_CLOSED);
		int out = open(out_path && !closed ? out_path : "/dev/null",
			       O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (in < 0 || out < 0 || (cwd && chdir(cwd) != 0))
			_exit(126);
		dup2(in, 0);
		dup2(out, 1);
		dup2(ep[1], 2);
		if (closed)
			close(1);
		execv(HARVEST_BIN, (char *const *)args);
		_exit(127);
	}
	close(ep[1]);
	size_t len;
	char *buf = tu_read_fd(ep[0], &len);
	close(ep[0]);
	int status = tu_wait(pid);
	if (err)
		*err = buf;
	else
		free(buf);
	return status;
}

static char *P(const char *dir, const char *rel)
{
	return tu_path(dir, rel);
}

static bool exists(const char *dir, const char *rel)
{
	char *p = P(dir, rel);
	struct stat st;
	bool r = lstat(p, &st) == 0;
	free(p);
	return r;
}

static void mklink(const char *target, const char *dir, const char *rel)
{
	char *p = P(dir, rel);
	if (symlink(target, p) != 0)
		fail_msg("symlink %s: %s", p, strerror(errno));
	free(p);
}

static void assert_same_file(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	assert_non_null(fa);
	assert_non_null(fb);
	static char ba[1 << 16], bb[1 << 16];
	uint64_t off = 0;
	for (;;) {
		size_t na = fread(ba, 1, sizeof(ba), fa), nb = fread(bb, 1, sizeof(bb), fb);
		if (na != nb || memcmp(ba, bb, na) != 0)
			fail_msg("%s and %s differ near byte %llu", a, b, (unsigned long long)off);
		if (na == 0)
			break;
		off += na;
	}
	fclose(fa);
	fclose(fb);
}

/* stderr is exactly one line "harvest: <path>: <reason>" with reason containing want. */
static void assert_one_error(const char *err, const char *path, const char *want)
{
	size_t n = strlen(err);
	if (n == 0 || err[n - 1] != '\n' || strchr(err, '\n') != err + n - 1)
		fail_msg("not one line on stderr: '%s'", err);
	char prefix[4096];
	snprintf(prefix, sizeof(prefix), "harvest: %s: ", path);
	if (strncmp(err, prefix, strlen(prefix)) != 0 || !strstr(err, want))
		fail_msg("stderr '%s' is not '%s...%s'", err, prefix, want);
}

/* ---- cat and put ------------------------------------------------------------------------- */

static void test_binary_round_trip(void **state)
{
	char *d = tu_tmpdir();
	char data[4096];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)((i * 131) ^ (i >> 8)); /* every byte value, NULs included */
	tu_write(d, "in", data, sizeof(data));
	char *in = P(d, "in"), *out = P(d, "out"), *dst = P(d, "put/here.bin");
	char *err;
	assert_int_equal(hv_io(NULL, in, out, &err, "put", dst, NULL), 0);
	assert_string_equal(err, ""); /* nothing on success */
	free(err);
	size_t n;
	char *got = tu_read_file(out, &n);
	assert_int_equal(n, 0); /* put prints nothing */
	free(got);
	assert_same_file(in, dst);
	assert_int_equal(hv_io(NULL, NULL, out, &err, "cat", dst, NULL), 0);
	assert_string_equal(err, "");
	free(err);
	assert_same_file(in, out);
	/* an empty stdin makes an empty file */
	assert_int_equal(hv_io(NULL, NULL, NULL, NULL, "put", dst, NULL), 0);
	struct stat st;
	assert_int_equal(stat(dst, &st), 0);
	assert_int_equal(st.st_size, 0);
	free(in);
	free(out);
	free(dst);
}

static void test_100mib_round_trip(void **state)
{
	char *d = tu_tmpdir();
	char *in = P(d, "in"), *out = P(d, "out"), *dst = P(d, "a/b/big");
	FILE *f = fopen(in, "wb");
	assert_non_null(f);
	static uint32_t block[1 << 14];
	uint32_t x = 2463534242u;
	for (int b = 0; b < 100 * 16; b++) { /* 1600 x 64 KiB */
		for (size_t i = 0; i < sizeof(block) / 4; i++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			block[i] = x & (i % 7 == 0 ? 0xff00ff00u : 0xffffffffu); /* NULs too */
		}
		assert_int_equal(fwrite(block, 1, sizeof(block), f), sizeof(block));
	}
	assert_int_equal(fclose(f), 0);
	assert_int_equal(hv_io(NULL, in, NULL, NULL, "put", dst, NULL), 0);
	assert_same_file(in, dst);
	assert_int_equal(hv_io(NULL, NULL, out, NULL, "cat", dst, NULL), 0);
	assert_same_file(in, out);
	struct stat st;
	assert_int_equal(stat(out, &st), 0);
	assert_int_equal(st.st_size, 100 << 20);
	free(in);
	free(out);
	free(dst);
}

static void test_hostile_names(void **state)
{
	char *d = tu_tmpdir();
	char long_name[256];
	memset(long_name, 'L', 255);
	long_name[255] = '\0';
	const char *names[] = {"new\nline", "bad\xff\xfeutf8", long_name, "-dash", " space ",
			       "tab\there"};
	tu_write(d, "in", "hostile\0bytes", 13);
	char *in = P(d, "in"), *out = P(d, "out");
	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
		char *dst = P(d, names[i]);
		/* twice: creating, then replacing (a temporary name must fit beside 255 bytes) */
		for (int k = 0; k < 2; k++)
			if (hv_io(NULL, in, NULL, NULL, "put", "--", dst, NULL) != 0)
				fail_msg("put %s failed", names[i]);
		assert_same_file(in, dst);
		assert_int_equal(hv_io(NULL, NULL, out, NULL, "cat", "--", dst, NULL), 0);
		assert_same_file(in, out);
		assert_int_equal(hv_io(NULL, NULL, NULL, NULL, "rm", "--", dst, NULL), 0);
		assert_false(exists(d, names[i]));
		free(dst);
	}
	/* a relative name starting with '-' after "--", in the directory itself */
	assert_int_equal(hv_io(d, in, NULL, NULL, "put", "--", "-n", NULL), 0);
	assert_true(exists(d, "-n"));
	assert_int_equal(hv_io(d, NULL, NULL, NULL, "rm", "--", "-n", NULL), 0);
	assert_false(exists(d, "-n"));
	free(in);
	free(out);
}

static void test_put_parents_and_mode(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "in", "data", 4);
	char *in = P(d, "in"), *dst = P(d, "x/y/z/f");
	/* the option after the argument, and --mode=VALUE */
	assert_int_equal(hv_io(NULL, in, NULL, NULL, "put", dst, "--mode", "0640", NULL), 0);
	struct stat st;
	assert_int_equal(stat(dst, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	char *z = P(d, "x/y/z");
	assert_int_equal(stat(z, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(hv_io(NULL, in, NULL, NULL, "put", "--mode=4711", dst, NULL), 0);
	assert_int_equal(stat(dst, &st), 0);
	assert_int_equal(st.st_mode & 07777, 04711);
	/* an existing file keeps its mode */
	assert_int_equal(chmod(dst, 0604), 0);
	assert_int_equal(hv_io(NULL, in, NULL, NULL, "put", dst, NULL), 0);
	assert_int_equal(stat(dst, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0604);
	/* bad modes are usage errors that write nothing */
	const char *bad[] = {"", "8", "0x1ff", "-1", "77777", "12345", "rw"};
	char *err;
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		char *other = P(d, "never");
		if (hv_io(NULL, in, NULL, &err, "put", "--mode", bad[i], other, NULL) != 2)
			fail_msg("--mode '%s' was not a usage error", bad[i]);
		assert_non_null(strstr(err, "harvest put: --mode"));
		free(err);
		assert_false(exists(d, "never"));
		free(other);
	}
	free(z);
	free(in);
	free(dst);
}

static void test_put_replaces_atomically(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "f", "the old bytes", 13);
	tu_write(d, "in", "new", 3);
	char *in = P(d, "in"), *dst = P(d, "f");
	struct stat before, after;
	assert_int_equal(stat(dst, &before), 0);
	int reader = open(dst, O_RDONLY | O_CLOEXEC);
	assert_true(reader >= 0);
	assert_int_equal(hv_io(NULL, in, NULL, NULL, "put", dst, NULL), 0);
	assert_int_equal(stat(dst, &after), 0);
	assert_true(before.st_ino != after.st_ino);
	assert_same_file(in, dst);
	char buf[64];
	assert_int_equal(read(reader, buf, sizeof(buf)), 13);
	assert_memory_equal(buf, "the old bytes", 13);
	close(reader);
	/* nothing but the two files: no temporary file left behind */
	char *err;
	tu_result r;
	const char *args[] = {"ls", "--format", "nul", d, NULL};
	tu_harvestv(&r, NULL, NULL, args);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.out_len, strlen("f") + 1 + strlen("in") + 1);
	tu_result_free(&r);
	/* a failed put (FILE is a directory) leaves FILE as it was */
	char *sub = P(d, "sub");
	assert_int_equal(mkdir(sub, 0755), 0);
	assert_int_equal(hv_io(NULL, in, NULL, &err, "put", sub, NULL), 1);
	assert_one_error(err, sub, "Is a directory");
	free(err);
	free(sub);
	free(in);
	free(dst);
}

static void test_put_failures(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "file", "keep", 4);
	char *in = P(d, "file");
	char *err;
	/* a parent that is a file: exit 1 (put creates what is missing; this it cannot) */
	char *under = P(d, "file/x/y");
	char *file_x = P(d, "file/x");
	assert_int_equal(hv_io(NULL, in, NULL, &err, "put", under, NULL), 1);
	assert_one_error(err, file_x, "Not a directory");
	free(err);
	/* a FIFO or a device at FILE is refused, not replaced, and put does not hang on it */
	char *fifo = P(d, "fifo");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	assert_int_equal(hv_io(NULL, in, NULL, &err, "put", fifo, NULL), 1);
	assert_one_error(err, fifo, "not a regular file (fifo)");
	free(err);
	struct stat st;
	assert_int_equal(lstat(fifo, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
	/* names that are no file: usage */
	char *slash = P(d, "dir/");
	assert_int_equal(hv_io(NULL, in, NULL, &err, "put", slash, NULL), 2);
	free(err);
	assert_false(exists(d, "dir"));
	/* stdin that cannot be read: a directory as stdin */
	char *dst = P(d, "new");
	assert_int_equal(hv_io(NULL, d, NULL, &err, "put", dst, NULL), 1);
	assert_one_error(err, "standard input", "Is a directory");
	free(err);
	assert_false(exists(d, "new"));
	free(dst);
	free(slash);
	free(fifo);
	free(file_x);
	free(under);
	free(in);
}

static void test_put_symlink_replaced(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "target", "target", 6);
	mklink("target", d, "link");
	tu_write(d, "in", "new", 3);
	char *in = P(d, "in"), *link = P(d, "link"), *target = P(d, "target");
	assert_int_equal(hv_io(NULL, in, NULL, NULL, "put", link, NULL), 0);
	struct stat st;
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_same_file(in, link);
	size_t n;
	char *t = tu_read_file(target, &n);
	assert_string_equal(t, "target");
	free(t);
	free(in);
	free(link);
	free(target);
}

static void test_cat_refusals(void **state)
{
	char *d = tu_tmpdir();
	char *fifo = P(d, "fifo"), *dir = P(d, "dir"), *missing = P(d, "missing");
	char *under = P(d, "f/under"), *f = P(d, "f"), *dangling = P(d, "dangling");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	assert_int_equal(mkdir(dir, 0755), 0);
	tu_write(d, "f", "x", 1);
	mklink("nowhere", d, "dangling");
	char *err;
	/* a FIFO with no writer: refused at once, not waited on (timeout(1) guards a hang) */
	tu_result r;
	char *argv[] = {"timeout", "120", HARVEST_BIN, "cat", fifo, NULL};
	tu_run(&r, NULL, NULL, argv);
	assert_int_equal(r.status, 1);
	assert_int_equal(r.out_len, 0);
	assert_one_error(r.err, fifo, "not a regular file (fifo)");
	tu_result_free(&r);
	assert_int_equal(hv_io(NULL, NULL, NULL, &err, "cat", dir, NULL), 1);
	assert_one_error(err, dir, "Is a directory");
	free(err);
	assert_int_equal(hv_io(NULL, NULL, NULL, &err, "cat", "/dev/zero", NULL), 1);
	assert_one_error(err, "/dev/zero", "not a regular file (char)");
	free(err);
	assert_int_equal(hv_io(NULL, NULL, NULL, &err, "cat", missing, NULL), 3);
	assert_one_error(err, missing, "No such file or directory");
	free(err);
	assert_int_equal(hv_io(NULL, NULL, NULL, &err, "cat", under, NULL), 3);
	assert_one_error(err, under, "Not a directory");
	free(err);
	assert_int_equal(hv_io(NULL, NULL, NULL, &err, "cat", dangling, NULL), 3);
	free(err);
	/* a write error on stdout */
	assert_int_equal(hv_io(NULL, NULL, "/dev/full", &err, "cat", f, NULL), 1);
	assert_one_error(err, "standard output", "No space left on device");
	free(err);
	/* no stdout at all: said as such (the file opened could have taken its number, and was
	 * once called its own output). Not under valgrind: there harvest has no closed stdout,
	 * since memcheck opens its --log-file at the lowest free descriptor, 1 (the suite step
	 * checks this case natively). */
	if (!UNDER_VALGRIND()) {
		assert_int_equal(hv_io(NULL, NULL, STDOUT_CLOSED, &err, "cat", f, NULL), 1);
		assert_one_error(err, "standard output", "Bad file descriptor");
		free(err);
	}
	/* the versions and a usage text are output like any other */
	const char *const printing[][3] = {{"--version", NULL}, {"--help", NULL}, {"cat", "--help"}};
	for (size_t i = 0; i < sizeof(printing) / sizeof(printing[0]); i++) {
		assert_int_equal(hv_io(NULL, NULL, "/dev/full", &err, printing[i][0], printing[i][1],
				       NULL),
				 1);
		assert_one_error(err, "standard output", "No space left on device");
		free(err);
	}
	free(fifo);
	free(dir);
	free(missing);
	free(under);
	free(f);
	free(dangling);
}

/* Starts harvest ARGS... with stdin in_fd and stdout out_fd (-1: /dev/null); returns the
 * pid. */
static pid_t hv_start(int in_fd, int out_fd, const char *const *args)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(in_fd >= 0 ? in_fd : null, 0);
		dup2(out_fd >= 0 ? out_fd : null, 1);
		execv(HARVEST_BIN, (char *const *)args);
		_exit(127);
	}
	return pid;
}

/* Waits until the pipe whose write end is wfd is empty and process pid sleeps in a system
 * call (state S), or has exited: returns -1, or its exit status when it exited. No timing:
 * it spins (yielding) on what the kernel reports. */
static int wait_drained_and_asleep(int wfd, pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (;;) {
		int st;
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		int queued = 0;
		assert_int_equal(ioctl(wfd, FIONREAD, &queued), 0);
		char buf[512] = "";
		FILE *f = fopen(path, "r");
		if (f) {
			if (!fgets(buf, sizeof(buf), f))
				buf[0] = '\0';
			fclose(f);
		}
		const char *close_paren = strrchr(buf, ')');
		if (queued == 0 && close_paren && close_paren[1] == ' ' && close_paren[2] == 'S')
			return -1;
		sched_yield();
	}
}

/* A caller may hand harvest pipes in non-blocking mode (a Node.js parent shares them so):
 * EAGAIN is waited out, not an error, on stdout for cat and on stdin for put. */
static void test_nonblocking_pipes(void **state)
{
	char *d = tu_tmpdir();
	size_t n = 4u << 20;
	char *data = tu_xmalloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)(i * 2654435761u >> 13);
	tu_write(d, "src", data, n);
	char *src = P(d, "src"), *dst = P(d, "dst");

	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(fcntl(p[1], F_SETFL, O_NONBLOCK), 0); /* cat's stdout */
	const char *cat_args[] = {HARVEST_BIN, "cat", src, NULL};
	pid_t pid = hv_start(-1, p[1], cat_args);
	close(p[1]);
	char *got = tu_xmalloc(n + 1);
	size_t len = 0;
	for (;;) {
		ssize_t r = read(p[0], got + len, n + 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(p[0]);
	assert_int_equal(tu_wait(pid), 0);
	assert_int_equal(len, n);
	assert_memory_equal(got, data, n);
	free(got);

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0); /* put's stdin */
	const char *put_args[] = {HARVEST_BIN, "put", dst, NULL};
	pid = hv_start(p[0], -1, put_args);
	close(p[0]);
	int status = -1;
	for (size_t off = 0; off < n && status < 0; off += 65536) {
		size_t left = n - off < 65536 ? n - off : 65536;
		for (size_t w = 0; w < left;) {
			ssize_t r = write(p[1], data + off + w, left - w);
			assert_true(r > 0);
			w += (size_t)r;
		}
		/* Once, let put find its stdin empty: wait until it has read everything and
		 * sleeps (waiting for more, as it must) or has ended (failing on EAGAIN). */
		if (off == 0)
			status = wait_drained_and_asleep(p[1], pid);
	}
	close(p[1]);
	if (status < 0)
		status = tu_wait(pid);
	assert_int_equal(status, 0);
	assert_same_file(src, dst);
	free(data);
	free(src);
	free(dst);
}

/* A 5 GiB file (sparse, with a marker at the end) goes through cat in bounded memory: the
 * bytes all arrive, and the process's peak resident size stays far below the file's. */
static void test_cat_5gib_bounded_memory(void **state)
{
	char *d = tu_tmpdir();
	char *big = P(d, "big");
	int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	const off_t size = (off_t)5 << 30;
	assert_int_equal(pwrite(fd, "END", 3, size - 3), 3);
	close(fd);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	const char *args[] = {HARVEST_BIN, "cat", big, NULL};
	pid_t pid = hv_start(-1, p[1], args);
	close(p[1]);
	static char buf[1 << 20], zero_block[1 << 20];
	uint64_t total = 0;
	char tail[3] = {0};
	bool zeros = true;
	for (;;) {
		ssize_t r = read(p[0], buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		uint64_t body = (uint64_t)size - 3; /* the bytes before the marker */
		size_t z = total >= body ? 0 : body - total < (uint64_t)r ? (size_t)(body - total)
									    : (size_t)r;
		/* every 16th MiB is compared: enough to see garbage, cheap under valgrind */
		if ((total >> 20) % 16 == 0)
			zeros &= memcmp(buf, zero_block, z) == 0;
		for (size_t i = z; i < (size_t)r; i++)
			if (total + i - body < 3)
				tail[total + i - body] = buf[i];
		total += (uint64_t)r;
	}
	close(p[0]);
	int st;
	struct rusage ru;
	assert_int_equal(wait4(pid, &st, 0, &ru), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(total, (uint64_t)size);
	assert_true(zeros);
	assert_memory_equal(tail, "END", 3);
	/* ru_maxrss is in KiB; sanitizer and valgrind runtimes included, 512 MiB is generous */
	if (ru.ru_maxrss > 512 * 1024)
		fail_msg("cat of 5 GiB peaked at %ld KiB resident", ru.ru_maxrss);
	free(big);
}

/* ---- rm ----------------------------------------------------------------------------------- */

static void test_rm_files_and_links(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "f", "x", 1);
	tu_write(d, "target", "t", 1);
	char *dir = P(d, "dir");
	assert_int_equal(mkdir(dir, 0755), 0);
	tu_write(d, "dir/inner", "i", 1);
	mklink("target", d, "link");
	mklink(dir, d, "dirlink");
	mklink("nowhere", d, "dangling");
	const char *gone[] = {"f", "link", "dangling"};
	for (size_t i = 0; i < 3; i++) {
		char *p = P(d, gone[i]);
		assert_int_equal(hv_io(NULL, NULL, NULL, NULL, "rm", p, NULL), 0);
		assert_false(exists(d, gone[i]));
		free(p);
	}
	assert_true(exists(d, "target"));
	char *dirlink = P(d, "dirlink"), *err;
	assert_int_equal(hv_io(NULL, NULL, NULL, NULL, "rm", "-r", dirlink, NULL), 0);
	assert_false(exists(d, "dirlink"));
	assert_true(exists(d, "dir/inner"));
	/* a directory needs -r */
	assert_int_equal(hv_io(NULL, NULL, NULL, &err, "rm", dir, NULL), 1);
	assert_one_error(err, dir, "Is a directory");
	free(err);
	assert_true(exists(d, "dir/inner"));
	assert_int_equal(hv_io(NULL, NULL, NULL, NULL, "rm", dir, "--recursive", NULL), 0);
	assert_false(exists(d, "dir"));
	/* missing: 3 */
	assert_int_equal(hv_io(NULL, NULL, NULL, &err, "rm", dir, NULL), 3);
	assert_one_error(err, dir, "No such file or directory");
	free(err);
	assert_int_equal(hv_io(NULL, NULL, NULL, &err, "rm", "-r", dir, NULL), 3);
	free(err);
	free(dirlink);
	free(dir);
}

static void test_rm_tree_with_links_out(void **state)
{
	char *d = tu_tmpdir();
	char *outside = P(d, "outside"), *t = P(d, "t");
	assert_int_equal(mkdir(outside, 0755), 0);
	tu_write(d, "outside/precious", "p", 1);
	assert_int_equal(mkdir(t, 0755), 0);
	char *a = P(d, "t/a"), *b = P(d, "t/a/b");
	assert_int_equal(mkdir(a, 0755), 0);
	assert_int_equal(mkdir(b, 0755), 0);
	tu_write(d, "t/a/b/f", "f", 1);
	tu_write(d, "t/a/new\nline\xff", "n", 1);
	mklink(outside, d, "t/out");
	mklink(outside, d, "t/a/b/out");
	mklink("../../outside/precious", d, "t/a/precious");
	mklink("/", d, "t/root");
	assert_int_equal(hv_io(NULL, NULL, NULL, NULL, "rm", t, "-R", NULL), 0);
	assert_false(exists(d, "t"));
	assert_true(exists(d, "outside/precious"));
	free(a);
	free(b);
	free(t);
	free(outside);
}

static void test_rm_refusals(void **state)
{
	char *d = tu_tmpdir();
	char *a = P(d, "a"), *ab = P(d, "a/b");
	assert_int_equal(mkdir(a, 0755), 0);
	assert_int_equal(mkdir(ab, 0755), 0);
	tu_write(d, "a/keep", "k", 1);
	char *err;
	const char *refused[] = {".", "..", "./..", "../.", "x/..", "../b/."};
	for (size_t i = 0; i < sizeof(refused) / sizeof(*refused); i++) {
		if (hv_io(ab, NULL, NULL, &err, "rm", "-r", refused[i], NULL) != 2)
			fail_msg("rm -r %s was not refused", refused[i]);
		assert_non_null(strstr(err, "refusing to remove"));
		free(err);
	}
	assert_true(exists(d, "a/keep"));
	assert_true(exists(d, "a/b"));
	free(a);
	free(ab);
}

static void test_rm_deep_tree(void **state)
{
	char *d = tu_tmpdir();
	char *t = P(d, "t");
	assert_int_equal(mkdir(t, 0755), 0);
	int fd = open(t, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (int i = 0; i < 20000; i++) {
		assert_int_equal(mkdirat(fd, "d", 0755), 0);
		if (i % 997 == 0) {
			int f = openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
			assert_true(f >= 0);
			close(f);
		}
		int n = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(n >= 0);
		close(fd);
		fd = n;
	}
	close(fd);
	char *err;
	assert_int_equal(hv_io(NULL, NULL, NULL, &err, "rm", "-r", t, NULL), 0);
	assert_string_equal(err, "");
	free(err);
	assert_false(exists(d, "t"));
	free(t);
}

/* Under a low `ulimit -n` the removal still reaches any depth: it closes the descriptors of
 * the directories furthest up when it runs out (it used to keep 64, and failed at about the
 * limit's depth with "Too many open files", removing nothing). */
static void test_rm_deep_tree_few_descriptors(void **state)
{
	(void)state;
	char *d = tu_tmpdir();
	char path[4096];
	int n = snprintf(path, sizeof(path), "%s/t", d);
	for (int i = 0; i < 100; i++)
		n += snprintf(path + n, sizeof(path) - (size_t)n, "/x");
	char *argv0[] = {"mkdir", "-p", path, NULL};
	tu_result r;
	tu_run(&r, NULL, NULL, argv0);
	assert_int_equal(r.status, 0);
	tu_result_free(&r);
	tu_write(path, "f", "f", 1);
	char *t = P(d, "t");
	tu_harvest_limited(&r, "-n 8", "rm", "-r", t, NULL);
	free(t);
	print_message("rm -r under ulimit -n 8: exit %d, stderr: %s", r.status, r.err);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.err_len, 0);
	tu_result_free(&r);
	assert_false(exists(d, "t"));
}

static void test_permission_denied_as_nobody(void **state)
{
	char *d = tu_tmpdir();
	tu_write(d, "secret", "s", 1);
	char *secret = P(d, "secret");
	assert_int_equal(chmod(secret, 0600), 0);
	tu_result r;
	const char *cat_args[] = {"cat", secret, NULL};
	tu_harvest_as_nobody(&r, NULL, cat_args);
	assert_int_equal(r.status, 1);
	assert_one_error(r.err, secret, "Permission denied");
	assert_int_equal(r.out_len, 0);
	tu_result_free(&r);
	/* put into root's directory: refused, nothing left there */
	char *dst = P(d, "new/f");
	const char *put_args[] = {"put", dst, NULL};
	tu_harvest_as_nobody(&r, NULL, put_args);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "Permission denied"));
	tu_result_free(&r);
	assert_false(exists(d, "new"));
	/* rm of root's file in root's directory */
	const char *rm_args[] = {"rm", secret, NULL};
	tu_harvest_as_nobody(&r, NULL, rm_args);
	assert_int_equal(r.status, 1);
	assert_one_error(r.err, secret, "Permission denied");
	tu_result_free(&r);
	assert_true(exists(d, "secret"));
	/* rm -r of a tree of which nobody owns a part: that part goes, the rest is named */
	char *t = P(d, "t"), *mine = P(d, "t/mine"), *locked = P(d, "t/locked");
	assert_int_equal(mkdir(t, 0777), 0);
	assert_int_equal(chmod(t, 0777), 0);
	assert_int_equal(mkdir(mine, 0755), 0);
	tu_write(d, "t/mine/f", "m", 1);
	assert_int_equal(mkdir(locked, 0755), 0);
	tu_write(d, "t/locked/f", "l", 1);
	char *mf = P(d, "t/mine/f"), *lf = P(d, "t/locked/f");
	if (geteuid() == 0) {
		assert_int_equal(chown(mine, 65534, 65534), 0);
		assert_int_equal(chown(mf, 65534, 65534), 0);
	}
	const char *rmr_args[] = {"rm", "-r", t, NULL};
	tu_harvest_as_nobody(&r, NULL, rmr_args);
	assert_int_equal(r.status, 1);
	assert_one_error(r.err, lf, "Permission denied");
	tu_result_free(&r);
	assert_false(exists(d, "t/mine"));
	assert_true(exists(d, "t/locked/f"));
	free(mf);
	free(lf);
	free(t);
	free(mine);
	free(locked);
	free(dst);
	free(secret);
}

/* ---- the command line --------------------------------------------------------------------- */

static void test_usage_and_help(void **state)
{
	const char *cmds[] = {"cat", "put", "rm"};
	for (size_t i = 0; i < 3; i++) {
		tu_result r;
		tu_harvest(&r, cmds[i], "--help", NULL);
		assert_int_equal(r.status, 0);
		char want[64];
		snprintf(want, sizeof(want), "usage: harvest %s ", cmds[i]);
		assert_true(strncmp(r.out, want, strlen(want)) == 0);
		assert_non_null(strstr(r.out, "Exit status:"));
		tu_result_free(&r);
		tu_harvest(&r, cmds[i], NULL);
		assert_int_equal(r.status, 2);
		assert_non_null(strstr(r.err, "missing"));
		tu_result_free(&r);
		tu_harvest(&r, cmds[i], "a", "b", NULL);
		assert_int_equal(r.status, 2);
		assert_non_null(strstr(r.err, "one "));
		tu_result_free(&r);
		tu_harvest(&r, cmds[i], "--bogus", "a", NULL);
		assert_int_equal(r.status, 2);
		tu_result_free(&r);
		/* --case, as every command takes it (no JSON here), is checked all the same */
		tu_harvest(&r, cmds[i], "--case", "kebab", "a", NULL);
		assert_int_equal(r.status, 2);
		tu_result_free(&r);
		tu_harvest(&r, cmds[i], "--format", "json", "a", NULL);
		assert_int_equal(r.status, 2); /* no --format: nothing to format */
		tu_result_free(&r);
		if (i != 1) { /* put would create it */
			tu_harvest(&r, cmds[i], "--quiet", "--case=camel", "/nonexistent/harvest-test",
				   NULL);
			assert_int_equal(r.status, 3);
			tu_result_free(&r);
		}
	}
	tu_result r;
	tu_harvest(&r, "--help", NULL);
	assert_non_null(strstr(r.out, "  cat "));
	assert_non_null(strstr(r.out, "  put "));
	assert_non_null(strstr(r.out, "  rm "));
	tu_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_binary_round_trip, tu_cleanup),
		cmocka_unit_test_teardown(test_100mib_round_trip, tu_cleanup),
		cmocka_unit_test_teardown(test_hostile_names, tu_cleanup),
		cmocka_unit_test_teardown(test_put_parents_and_mode, tu_cleanup),
		cmocka_unit_test_teardown(test_put_replaces_atomically, tu_cleanup),
		cmocka_unit_test_teardown(test_put_failures, tu_cleanup),
		cmocka_unit_test_teardown(test_put_symlink_replaced, tu_cleanup),
		cmocka_unit_test_teardown(test_cat_refusals, tu_cleanup),
		cmocka_unit_test_teardown(test_nonblocking_pipes, tu_cleanup),
		cmocka_unit_test_teardown(test_cat_5gib_bounded_memory, tu_cleanup),
		cmocka_unit_test_teardown(test_rm_files_and_links, tu_cleanup),
		cmocka_unit_test_teardown(test_rm_tree_with_links_out, tu_cleanup),
		cmocka_unit_test_teardown(test_rm_refusals, tu_cleanup),
		cmocka_unit_test_teardown(test_rm_deep_tree, tu_cleanup),
		cmocka_unit_test_teardown(test_rm_deep_tree_few_descriptors, tu_cleanup),
		cmocka_unit_test_teardown(test_permission_denied_as_nobody, tu_cleanup),
		cmocka_unit_test(test_usage_and_help),
	};
	const char *filter = getenv("HV_TEST_FILTER");
	if (filter)
		cmocka_set_test_filter(filter);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
