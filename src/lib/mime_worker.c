/* The libmagic detector worker: a child process that runs libmagic on bytes it is handed,
 * holding nothing of the parent's (no database handle, no directory descriptor: every fd but
 * its socket is closed), under a seccomp filter installed once its database is loaded.
 *
 * Why a process: libmagic parses untrusted bytes (CDF, ELF notes, regular expressions) and its
 * CVE history is why file(1) itself sandboxes it. A worker that crashes or takes too long is
 * killed and replaced; the file it was looking at gets application/octet-stream and a warning.
 *
 * Protocol over a SOCK_SEQPACKET socketpair (one message per request, one per answer):
 *   request: struct req, then for REQ_BUFFER `len` bytes in the same message; REQ_FD carries
 *            a read-only descriptor of the file (SCM_RIGHTS), positioned at offset 0;
 *            REQ_FDS carries `len` of them (at most HVM_WORKER_BATCH_MAX), answered together;
 *            REQ_BUFS carries `len` buffers (at most HVM_WORKER_BATCH_MAX) in the message:
 *            their lengths (uint32_t each), then their bytes one after the other.
 *   answer:  struct ans, then `len` bytes of the type or of libmagic's error message; to
 *            REQ_FDS and REQ_BUFS, one such record per file, in their order, in one message.
 * The first message from a new worker is an answer saying whether its database loaded.
 *
 * Why batches: a request and its answer are a round trip between two processes, two context
 * switches, about 27 us on this project's 2-core virtual machines against libmagic's few
 * hundred per file; a batch pays them once. */
#include "dl_magic.h"
#include "fdio.h"
#include "internal.h"
#include "mime_internal.h"
#include "test_hook.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Valgrind cannot run a seccomp filter (it has no seccomp(2), and a filter would refuse its own
 * syscalls): under it alone (HV_UNDER_VALGRIND, internal.h) the worker runs unfiltered, still
 * without descriptors. Anywhere else a filter that cannot be installed fails the worker's
 * start (closed, not open). */

enum { REQ_BUFFER = 1, REQ_FD = 2, REQ_MAPPED = 3, REQ_FDS = 4, REQ_BUFS = 5 };
/* The longest answer a batch's record carries (a MIME type, or libmagic's error message). */
enum { FDS_ANSWER_MAX = 1024 };
/* Bytes larger than this travel in a memfd (REQ_MAPPED: the worker maps it and runs
 * magic_buffer), as a socket message is limited by the socket's buffer size. A REQ_BUFS
 * message is no larger: its lengths and HVM_WORKER_BATCH_BYTES of bytes. */
enum { INLINE_MAX = 64 * 1024 };
_Static_assert(HVM_WORKER_BATCH_BYTES + HVM_WORKER_BATCH_MAX * sizeof(uint32_t) <= INLINE_MAX,
	       "a REQ_BUFS message fits where one inline buffer does");
enum { ANS_OK = 0, ANS_ERROR = 1 };

struct req {
	uint32_t op;
	uint32_t pad;
	uint64_t len;
};

struct ans {
	uint32_t kind;
	int32_t err; /* libmagic's errno for ANS_ERROR, 0 if none */
	uint32_t len;
	uint32_t pad;
};

struct hvm_worker {
	pid_t pid;
	int sock;
	clockid_t cpu_clock; /* the worker's CPU-time clock; valid when have_cpu_clock */
	bool have_cpu_clock;
	int flags;
	char *database;
	char *fingerprint; /* the handle's (hv_magic_fingerprint), or NULL */
	bool inherited;    /* the running worker's database is the spawner's (for tests) */
	bool faults;       /* started with the test faults on */
	size_t bytes_max;
	unsigned char *msg; /* request/answer buffer: header + bytes_max */
	size_t msg_cap;
};

/* Process-wide settings (hv_magic_set_isolation). */
static atomic_bool isolation_on = true;
static atomic_uint timeout_ms = 10000;

void hv_magic_set_isolation(bool isolate, unsigned timeout)
{
	atomic_store(&isolation_on, isolate);
	atomic_store(&timeout_ms, timeout ? timeout : 10000);
	if (isolate)
		hvm_spawner_prepare(); /* now, while the caller may still be single-threaded */
}

bool hvm_isolation(void)
{
	return atomic_load(&isolation_on);
}

/* ---- The child ------------------------------------------------------------------------- */

/* Test-only faults, chosen by the first bytes of the file (so a test can mix good and bad
 * files in one run) and enabled by HARVEST_TEST_WORKER_FAULT=1 in builds with tests. */
enum fault {
	FAULT_NONE, FAULT_CRASH, FAULT_HANG, FAULT_OPEN, FAULT_LIBC, FAULT_LINGER, FAULT_FAIL,
	FAULT_SIGNAL
};

static enum fault fault_of(const unsigned char *b, size_t n)
{
	static const char prefix[] = "HARVEST-TEST-";
	size_t p = sizeof(prefix) - 1;
	if (n < p + 4 || memcmp(b, prefix, p) != 0)
		return FAULT_NONE;
	if (memcmp(b + p, "CRAS", 4) == 0)
		return FAULT_CRASH;
	if (memcmp(b + p, "HANG", 4) == 0)
		return FAULT_HANG;
	if (memcmp(b + p, "OPEN", 4) == 0)
		return FAULT_OPEN;
	if (memcmp(b + p, "LIBC", 4) == 0)
		return FAULT_LIBC;
	if (memcmp(b + p, "LING", 4) == 0)
		return FAULT_LINGER;
	if (memcmp(b + p, "FAIL", 4) == 0)
		return FAULT_FAIL;
	if (memcmp(b + p, "SGNL", 4) == 0)
		return FAULT_SIGNAL;
	return FAULT_NONE;
}

/* FAULT_LINGER: the file is answered, and the worker, once its caller has closed it, takes
 * 3 s to exit (a caller that waited for that exit would be seen waiting). */
static bool linger_at_end;

/* FAULT_SIGNAL: the worker's parent (the spawner), known before the filter. */
static pid_t parent_pid;

/* FAULT_FAIL: the file's answer is libmagic's failure (an error record, as when libmagic
 * returns NULL), the worker unharmed: what a caller does with a real error is testable. */
static bool fail_next;

static void do_fault(enum fault f)
{
	switch (f) {
	case FAULT_CRASH:
		abort();
	case FAULT_HANG:
		for (;;)
			pause();
	case FAULT_OPEN: {
		/* Refused by the filter: the process is killed by SIGSYS before open returns. */
		int fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			close(fd);
		_exit(3); /* the filter failed to stop it: a distinct exit the test detects */
	}
	case FAULT_SIGNAL:
		/* A signal to another process (signal 0: only asked, nothing sent) is refused
		 * with EPERM, and the file is then typed; allowed, the worker exits 3, which the
		 * test sees as a fault. */
		if (syscall(SYS_tgkill, parent_pid, parent_pid, 0) == 0 || errno != EPERM)
			_exit(3);
		break;
	case FAULT_LIBC: {
		/* Not a fault: what libmagic may ask of libc on hostile bytes, which libc would
		 * otherwise do lazily with an open (see prepare_libc); the file is then typed. */
		void *block[64];
		for (size_t i = 0; i < 64; i++) {
			block[i] = malloc(100000);
			if (block[i])
				memset(block[i], 1, 100000);
		}
		for (size_t i = 64; i-- > 0;)
			free(block[i]);
		time_t t = time(NULL);
		struct tm tm;
		char when[64];
		if (localtime_r(&t, &tm) && ctime_r(&t, when))
			(void)mktime(&tm);
		(void)strerror(ENOENT);
		break;
	}
	case FAULT_LINGER:
		linger_at_end = true;
		break;
	case FAULT_FAIL:
		fail_next = true;
		break;
	default:
		break;
	}
}

/* The allowlist: what libmagic needs on loaded data, memory management, the socket, and a
 * signal to itself. Anything else fails with EPERM; opening files, exec, and network kill the
 * process. Installed by the worker itself, after the fork: getpid() is its own. */
static int install_filter(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!ctx)
		return -ENOMEM; /* libseccomp's one reason for no context */
	static const int allow[] = {
		SCMP_SYS(read),        SCMP_SYS(write),         SCMP_SYS(readv),
		SCMP_SYS(writev),      SCMP_SYS(pread64),       SCMP_SYS(lseek),
		SCMP_SYS(fstat),       SCMP_SYS(newfstatat),    SCMP_SYS(mmap),
		SCMP_SYS(munmap),      SCMP_SYS(mremap),        SCMP_SYS(mprotect),
		SCMP_SYS(brk),         SCMP_SYS(madvise),       SCMP_SYS(close),
		SCMP_SYS(recvmsg),     SCMP_SYS(sendmsg),       SCMP_SYS(recvfrom),
		SCMP_SYS(sendto),      SCMP_SYS(exit),          SCMP_SYS(exit_group),
		SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigaction),
		SCMP_SYS(futex),       SCMP_SYS(getpid),        SCMP_SYS(gettid),
		SCMP_SYS(clock_gettime), SCMP_SYS(getrandom),
		SCMP_SYS(fcntl),       SCMP_SYS(pause),         SCMP_SYS(nanosleep),
		SCMP_SYS(clock_nanosleep), SCMP_SYS(sigaltstack), SCMP_SYS(sched_yield),
		SCMP_SYS(sched_getaffinity), /* malloc counts the CPUs, else reads /sys */
	};
	static const int kill[] = {
		SCMP_SYS(open),     SCMP_SYS(openat),  SCMP_SYS(openat2),  SCMP_SYS(creat),
		SCMP_SYS(execve),   SCMP_SYS(execveat), SCMP_SYS(socket),  SCMP_SYS(socketpair),
		SCMP_SYS(connect),  SCMP_SYS(bind),    SCMP_SYS(listen),   SCMP_SYS(accept),
		SCMP_SYS(accept4),  SCMP_SYS(fork),    SCMP_SYS(vfork),    SCMP_SYS(clone),
		SCMP_SYS(clone3),   SCMP_SYS(ptrace),  SCMP_SYS(open_by_handle_at),
	};
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < sizeof(allow) / sizeof(allow[0]); i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allow[i], 0);
	for (size_t i = 0; rc == 0 && i < sizeof(kill) / sizeof(kill[0]); i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, kill[i], 0);
	/* A signal to itself only (abort() raises SIGABRT with tgkill): a worker libmagic's bytes
	 * took over cannot signal the user's other processes (any process, for root's). */
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
				      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid()));
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

/* What libc does lazily with an open, done before the filter, which would kill the worker at
 * that open:
 * - a thread's malloc arena, the first time its heap shrinks, reads
 *   /proc/sys/vm/overcommit_memory (the worker uses one when the spawner was forked by a thread
 *   other than the main one): the worker's heaps are never trimmed, its memory is the OS's
 *   again when it exits;
 * - localtime_r(), ctime_r() and mktime() (libmagic's dates, as in CDF properties) read the
 *   zone file each time TZ is unset: it is read now, TZ pinned to it;
 * - strerror() and regerror() look for translations unless the messages' locale is "C". */
static void prepare_libc(void)
{
	(void)mallopt(M_TRIM_THRESHOLD, INT_MAX);
	/* Setting one threshold turns off glibc's adaptive mmap threshold, which would otherwise
	 * learn to serve libmagic's per-file read buffer (MAGIC_PARAM_BYTES_MAX, 7 MiB) from the
	 * heap: every file would then cost an mmap, a munmap and a fault per page it reads into
	 * fresh zeroed memory. The largest threshold glibc takes keeps that buffer in the heap,
	 * where it is reused, file after file. */
	(void)mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
	if (!getenv("TZ"))
		(void)setenv("TZ", ":/etc/localtime", 1);
	tzset();
	(void)uselocale(LC_GLOBAL_LOCALE);
	(void)setlocale(LC_MESSAGES, "C"); /* "C" always exists */
}

static void child_answer(int sock, uint32_t kind, int err, const char *s)
{
	struct ans a = {.kind = kind, .err = err, .len = (uint32_t)strlen(s)};
	struct iovec iov[2] = {{&a, sizeof(a)}, {(void *)s, a.len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
		_exit(0); /* the parent is gone */
}

/* libmagic's answer r, or NULL (its failure) when FAULT_FAIL asked for one. */
static const char *answer_or_fault(const char *r)
{
	if (!fail_next)
		return r;
	fail_next = false;
	return NULL;
}

/* Why libmagic returned no answer. */
static const char *failure_text(magic_t cookie)
{
	const char *why = magic_error(cookie);
	return why ? why : "libmagic failed without saying why";
}

/* The errno of a failure: libmagic's, else the call's own when libmagic set no message (a
 * malloc refused under `ulimit -v` leaves ENOMEM and nothing else), else 0. */
static int failure_errno(magic_t cookie, int call_errno)
{
	int e = magic_errno(cookie);
	if (e > 0)
		return e;
	return magic_error(cookie) ? 0 : call_errno;
}

/* libmagic's answer for bytes or a descriptor, errno cleared first (failure_errno). */
static const char *type_bytes(magic_t cookie, const void *p, size_t len)
{
	errno = 0;
	return magic_buffer(cookie, p, len);
}

static const char *type_fd(magic_t cookie, int fd)
{
	errno = 0;
	return magic_descriptor(cookie, fd);
}

/* Appends one answer record (struct ans, then its text, cut at FDS_ANSWER_MAX) at *at. */
static void child_record(unsigned char *out, size_t *at, magic_t cookie, const char *r)
{
	int call_errno = r ? 0 : errno; /* a test's fault has no errno of its own */
	r = answer_or_fault(r);
	struct ans a = {.kind = r ? ANS_OK : ANS_ERROR,
			.err = r ? 0 : failure_errno(cookie, call_errno)};
	if (!r)
		r = failure_text(cookie);
	size_t len = strlen(r);
	a.len = (uint32_t)(len < FDS_ANSWER_MAX ? len : FDS_ANSWER_MAX);
	memcpy(out + *at, &a, sizeof(a));
	memcpy(out + *at + sizeof(a), r, a.len);
	*at += sizeof(a) + a.len;
}

static void child_reply(int sock, magic_t cookie, const char *r)
{
	int call_errno = r ? 0 : errno;
	r = answer_or_fault(r);
	if (r)
		child_answer(sock, ANS_OK, 0, r);
	else
		child_answer(sock, ANS_ERROR, failure_errno(cookie, call_errno),
			     failure_text(cookie));
}

/* A new process's first libmagic answer costs several times its later ones: each page of the
 * database (libmagic scans all of its entries for every file) and of libmagic's working
 * buffers is touched there for the first time, and on a virtual machine each first touch of a
 * page is a trip through the hypervisor. A worker started ahead of need (hvm_worker_prestart)
 * so types bytes of its own before it says it is ready, while its caller is busy with
 * something else, and the files it is then given are answered at the later, steady cost. (A
 * worker started when a file waits does not: its caller would wait for the warm-up, which
 * costs about what it saves.) Pseudo-random bytes, which no magic entry matches early, so
 * every entry is tried; more than 64 KiB of them, because a buffer above that size takes a
 * path a smaller one does not, whose first run cost another 2 ms here: after 32 KiB of
 * warm-up the first 100 KB file took 2.4-2.9 ms and the next ones 0.3-0.5; after 128 KiB,
 * which costs the warm-up no more (6-7 ms either way), the first took 0.4-0.5. */
static void warm_up(magic_t cookie)
{
	enum { WARM_BYTES = 128 * 1024 };
	unsigned char *b = malloc(WARM_BYTES);
	if (!b)
		return;
	uint32_t x = 0x9e3779b9u;
	for (size_t i = 0; i < WARM_BYTES; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		b[i] = (unsigned char)x;
	}
	(void)magic_buffer(cookie, b, WARM_BYTES);
	free(b);
}

/* REQ_BUFS: the k buffers of body[0..n) (their lengths, then their bytes), each answered in
 * turn, all in one reply built in out. A message that does not add up ends the worker. */
static void child_bufs(int sock, magic_t cookie, const unsigned char *body, size_t n, uint64_t k,
		       bool faults, unsigned char *out)
{
	uint32_t lens[HVM_WORKER_BATCH_MAX];
	if (k == 0 || k > HVM_WORKER_BATCH_MAX || n < k * sizeof(uint32_t))
		_exit(0);
	memcpy(lens, body, k * sizeof(uint32_t));
	size_t off = k * sizeof(uint32_t), at = 0;
	for (size_t i = 0; i < k; i++) {
		if (lens[i] > n - off)
			_exit(0);
		const unsigned char *data = body + off;
		off += lens[i];
		if (faults)
			do_fault(fault_of(data, lens[i]));
		child_record(out, &at, cookie, type_bytes(cookie, data, lens[i]));
	}
	if (off != n)
		_exit(0);
	if (send(sock, out, at, MSG_NOSIGNAL) < 0)
		_exit(0); /* the parent is gone */
}

/* A worker that cannot start says why, whole ("<database>: <libmagic's reason>", "libmagic
 * worker: ..."), as its first answer, and ends. */
static void start_failed(int sock, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void start_failed(int sock, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	child_answer(sock, ANS_ERROR, 0, why);
	_exit(0);
}

/* loaded: the database as the spawner loaded it before the fork (NULL: load it here). */
static void child_main(int sock, magic_t loaded, const char *database, int flags, bool faults,
		       bool warm)
{
	magic_t cookie = loaded;
	if (cookie && magic_setflags(cookie, flags) != 0)
		cookie = NULL; /* load afresh with these flags */
	if (!cookie)
		cookie = magic_open(flags);
	if (!cookie || (cookie != loaded && hv__magic_load_whole(cookie, database) != 0)) {
		const char *why = cookie ? magic_error(cookie) : strerror(errno);
		start_failed(sock, "%s: %s", database, why ? why : "cannot load");
	}
	size_t bytes_max = 1024 * 1024;
#ifdef MAGIC_PARAM_BYTES_MAX
	size_t bytes = 0;
	if (magic_getparam(cookie, MAGIC_PARAM_BYTES_MAX, &bytes) == 0 && bytes > 0)
		bytes_max = bytes;
#endif
	size_t cap = sizeof(struct req) + bytes_max;
	unsigned char *msg = malloc(cap);
	/* A batch's reply: its records, each at most FDS_ANSWER_MAX bytes of text. */
	unsigned char *fds_out = malloc(HVM_WORKER_BATCH_MAX * (sizeof(struct ans) + FDS_ANSWER_MAX));
	/* The database is loaded: from here on the filter refuses every open. */
	prepare_libc();
	parent_pid = getppid();
	if (!msg || !fds_out)
		start_failed(sock, "libmagic worker: out of memory for its buffers (%zu bytes)",
			     cap + HVM_WORKER_BATCH_MAX * (sizeof(struct ans) + FDS_ANSWER_MAX));
	int frc = HV_UNDER_VALGRIND() ? 0 : install_filter();
	if (frc != 0)
		start_failed(sock, "libmagic worker: cannot install its seccomp filter (%s)",
			     strerror(frc < 0 ? -frc : EINVAL));
	if (warm)
		warm_up(cookie);
	/* "inherited": the database is the spawner's, loaded before the fork (for tests). */
	child_answer(sock, ANS_OK, 0, cookie == loaded ? "inherited" : "ready");
	for (;;) {
		struct iovec iov = {msg, cap};
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * HVM_WORKER_BATCH_MAX)];
		} ctl;
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				    .msg_controllen = sizeof(ctl.buf)};
		ssize_t n = recvmsg(sock, &mh, 0);
		if (n <= 0 && linger_at_end) {
			struct timespec ts = {3, 0};
			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
		}
		if (n <= 0)
			_exit(0);
		int fds[HVM_WORKER_BATCH_MAX];
		size_t nfds = 0;
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			memcpy(fds, CMSG_DATA(c), nfds * sizeof(int));
		}
		int fd = nfds ? fds[0] : -1;
		struct req rq;
		if ((size_t)n < sizeof(rq))
			_exit(0);
		memcpy(&rq, msg, sizeof(rq));
		if (rq.op == REQ_FDS) {
			/* Every descriptor answered in turn (a fault on one takes the worker down, and
			 * the caller asks again one at a time), all in one reply. */
			if (rq.len != nfds || nfds == 0)
				_exit(0);
			size_t at = 0;
			for (size_t k = 0; k < nfds; k++) {
				if (faults) {
					unsigned char head[32];
					ssize_t h = pread(fds[k], head, sizeof(head), 0);
					do_fault(fault_of(head, h > 0 ? (size_t)h : 0));
				}
				child_record(fds_out, &at, cookie, type_fd(cookie, fds[k]));
				close(fds[k]);
			}
			if (send(sock, fds_out, at, MSG_NOSIGNAL) < 0)
				_exit(0); /* the parent is gone */
			continue;
		}
		if (rq.op == REQ_BUFS) {
			child_bufs(sock, cookie, msg + sizeof(rq), (size_t)n - sizeof(rq), rq.len,
				   faults, fds_out);
			continue;
		}
		const unsigned char *data = msg + sizeof(rq);
		size_t len = (size_t)n - sizeof(rq);
		if (faults) {
			unsigned char head[32];
			ssize_t h = 0;
			if (rq.op != REQ_BUFFER && fd >= 0)
				h = pread(fd, head, sizeof(head), 0);
			do_fault(rq.op != REQ_BUFFER ? fault_of(head, h > 0 ? (size_t)h : 0)
						     : fault_of(data, len));
		}
		if (rq.op == REQ_FD && fd >= 0) {
			child_reply(sock, cookie, type_fd(cookie, fd));
			close(fd);
		} else if (rq.op == REQ_BUFFER) {
			child_reply(sock, cookie, type_bytes(cookie, data, len));
		} else if (rq.op == REQ_MAPPED && fd >= 0 && rq.len > 0) {
			void *p = mmap(NULL, rq.len, PROT_READ, MAP_PRIVATE, fd, 0);
			close(fd);
			if (p == MAP_FAILED) {
				child_answer(sock, ANS_ERROR, errno, "mmap");
				continue;
			}
			child_reply(sock, cookie, type_bytes(cookie, p, rq.len));
			munmap(p, rq.len);
		} else {
			_exit(0);
		}
	}
}

/* ---- The spawner --------------------------------------------------------------------
 * Workers are not forked from the caller's process: it may be running other threads, and a
 * fork then copies locks another thread holds (a sanitizer's allocator, libc's locale lock),
 * which the child could wait on forever. Instead one spawner process is forked once, as early
 * as the caller allows (hv_magic_set_isolation(), or the first load), holding nothing but its
 * socket (and, from the first worker on, the loaded database the workers inherit); being
 * single-threaded, it forks workers safely on request and reaps them, reporting how each
 * ended. A worker stopped for no fault of its own (the caller is done with it) is released
 * instead: no answer is awaited, and the spawner reaps it once it has exited, so the caller
 * does not wait for the exit of a process holding the whole database (about 2 ms here). */

enum { ZY_SPAWN = 1, ZY_WAIT = 2, ZY_RELEASE = 3 };

/* The released workers the spawner has not reaped yet: reaped without waiting before each
 * request, and killed and reaped when the caller is gone. */
enum { ZY_RELEASED_MAX = 64 };
static pid_t zy_released[ZY_RELEASED_MAX];
static size_t zy_n_released;

/* The workers forked and neither released nor waited for: in use, or a spare not taken yet
 * (hvm_worker_prestart). When the caller is gone, or exiting with a spare it never took,
 * these are killed and reaped too, so that none outlives harvest as an orphan. A list that
 * cannot grow leaves a worker to its PR_SET_PDEATHSIG. */
static pid_t *zy_live;
static size_t zy_n_live, zy_live_cap;

static void live_add(pid_t pid)
{
	if (zy_n_live == zy_live_cap) {
		size_t cap = zy_live_cap ? zy_live_cap * 2 : 16;
		pid_t *p = realloc(zy_live, cap * sizeof(*p));
		if (!p)
			return;
		zy_live = p;
		zy_live_cap = cap;
	}
	zy_live[zy_n_live++] = pid;
}

static void live_remove(pid_t pid)
{
	for (size_t i = 0; i < zy_n_live; i++)
		if (zy_live[i] == pid) {
			zy_live[i] = zy_live[--zy_n_live];
			return;
		}
}

static void spawner_kill_live(void)
{
	for (size_t i = 0; i < zy_n_live; i++) {
		kill(zy_live[i], SIGKILL);
		while (waitpid(zy_live[i], NULL, 0) < 0 && errno == EINTR)
			;
	}
	zy_n_live = 0;
}

/* hang: wait for each (after SIGKILL, the caller being gone); else only the exited ones. */
static void spawner_reap_released(bool hang)
{
	size_t kept = 0;
	for (size_t i = 0; i < zy_n_released; i++) {
		pid_t pid = zy_released[i];
		if (hang)
			kill(pid, SIGKILL);
		pid_t r;
		while ((r = waitpid(pid, NULL, hang ? 0 : WNOHANG)) < 0 && errno == EINTR)
			;
		if (r == 0)
			zy_released[kept++] = pid; /* still exiting */
	}
	zy_n_released = kept;
}

struct zy_req {
	uint32_t op;
	int32_t flags;
	int32_t pid;   /* ZY_WAIT, ZY_RELEASE */
	uint32_t faults;
	uint32_t warm; /* the worker warms up before it says it is ready (see warm_up) */
	char database[4096];
	/* The handle's fingerprint (libmagic's version, the flags, each database file's size and
	 * mtime): a worker inherits the spawner's loaded database only when it was loaded under
	 * the same one. Empty when too long: the worker loads it itself. */
	char fingerprint[1024];
};

struct zy_ans {
	int32_t value; /* the pid (ZY_SPAWN), the wait status (ZY_WAIT) */
	int32_t err;
};

static pthread_mutex_t zy_mu = PTHREAD_MUTEX_INITIALIZER;
/* The worker whose spawn was sent ahead (hvm_worker_prestart) and whose answer, its pid, is
 * not read yet: the spawner answers in order, so that answer is read before any other (and
 * before the worker is used or stopped). Under zy_mu. */
static struct hvm_worker *zy_ahead;
static int zy_sock = -1;
static pid_t zy_pid = -1;

/* The database the spawner loaded, which every worker it forks for the same database list
 * inherits (copy-on-write) instead of loading it again: a collect's second worker is ready at
 * once, and magic.mgc is parsed once per process, not once per worker. The database is the
 * system's (or the caller's own), never a file being typed. */
static magic_t zy_loaded;
static char zy_loaded_key[sizeof(((struct zy_req *)0)->fingerprint)];

static magic_t spawner_load(const char *database, const char *fingerprint, int flags)
{
	if (!*fingerprint)
		return NULL;
	if (zy_loaded && strcmp(zy_loaded_key, fingerprint) == 0)
		return zy_loaded;
	if (zy_loaded)
		magic_close(zy_loaded);
	zy_loaded = magic_open(flags);
	if (zy_loaded && hv__magic_load_whole(zy_loaded, database) != 0) {
		magic_close(zy_loaded);
		zy_loaded = NULL;
	}
	if (zy_loaded)
		snprintf(zy_loaded_key, sizeof(zy_loaded_key), "%s", fingerprint);
	return zy_loaded; /* NULL: each worker loads it, and says why it cannot */
}

static void spawner_main(int sock)
{
	for (;;) {
		struct zy_req rq;
		struct iovec iov = {&rq, sizeof(rq)};
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int))];
		} ctl;
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				    .msg_controllen = sizeof(ctl.buf)};
		spawner_reap_released(false);
		ssize_t n = recvmsg(sock, &mh, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < (ssize_t)sizeof(rq)) {
			/* The caller is gone or exiting: its workers end with it. */
			spawner_reap_released(true);
			spawner_kill_live();
			_exit(0);
		}
		int fd = -1;
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(c), sizeof(fd));
		struct zy_ans a = {0};
		if (rq.op == ZY_SPAWN && fd >= 0) {
			rq.database[sizeof(rq.database) - 1] = '\0';
			rq.fingerprint[sizeof(rq.fingerprint) - 1] = '\0';
			magic_t loaded = spawner_load(rq.database, rq.fingerprint, rq.flags);
			pid_t pid = fork();
			if (pid == 0) {
				/* Nothing but the worker's socket: no database, no directory. */
				if (fd != 0 && dup2(fd, 0) != 0)
					_exit(0);
				close_range(1, ~0U, 0);
				prctl(PR_SET_PDEATHSIG, SIGKILL); /* the spawner is single-threaded */
				child_main(0, loaded, rq.database, rq.flags, rq.faults != 0,
					   rq.warm != 0);
				_exit(0);
			}
			a.value = pid;
			a.err = pid < 0 ? errno : 0;
			if (pid > 0)
				live_add(pid);
		} else if (rq.op == ZY_RELEASE) {
			live_remove(rq.pid);
			/* No answer. A full list is emptied by waiting: each has its EOF already. */
			if (zy_n_released == ZY_RELEASED_MAX)
				spawner_reap_released(true);
			zy_released[zy_n_released++] = rq.pid;
			continue;
		} else if (rq.op == ZY_WAIT) {
			int status = 0;
			pid_t r;
			while ((r = waitpid(rq.pid, &status, 0)) < 0 && errno == EINTR)
				;
			a.value = status;
			a.err = r == rq.pid ? 0 : errno ? errno : ECHILD;
			if (r == rq.pid)
				live_remove(rq.pid);
		} else {
			a.err = EINVAL;
		}
		if (fd >= 0)
			close(fd);
		if (send(sock, &a, sizeof(a), MSG_NOSIGNAL) < 0)
			_exit(0);
	}
}

static pid_t zy_owner = -1; /* the process that started the spawner */

/* At exit: ends the spawner and waits for it, so that no orphan is left behind and the
 * workers' CPU time (each reaped by the spawner) is counted in this process's children's. */
static void spawner_atexit(void)
{
	pthread_mutex_lock(&zy_mu);
	if (zy_sock >= 0 && getpid() == zy_owner) {
		close(zy_sock);
		zy_sock = -1;
		while (waitpid(zy_pid, NULL, 0) < 0 && errno == EINTR)
			;
		hv__own_child_remove(zy_pid);
	}
	pthread_mutex_unlock(&zy_mu);
}

/* Loads libmagic and libseccomp into this process (dl_magic.h): the spawner and its workers
 * find them loaded, as a worker, under its filter, could open nothing. 0, or -1 with why set. */
static int detect_libs_load(char *why, size_t cap)
{
	return hv__magic_load(why, cap) != 0 || hv__seccomp_load(why, cap) != 0 ? -1 : 0;
}

/* Starts the spawner unless it runs. Under zy_mu. */
static int spawner_start_locked(void)
{
	static bool at_exit;
	if (zy_sock >= 0)
		return 0;
	char why[512];
	if (detect_libs_load(why, sizeof(why)) != 0)
		return ELIBACC; /* said in full by spawn_send */
	if (!at_exit)
		at_exit = atexit(spawner_atexit) == 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return errno;
	hv__test_hook_call(HV__HOOK_SPAWNER_FORK, "");
	pid_t pid = fork();
	if (pid < 0) {
		int err = errno;
		close(sv[0]);
		close(sv[1]);
		return err;
	}
	if (pid == 0) {
		if (sv[1] != 0 && dup2(sv[1], 0) != 0)
			_exit(0);
		close_range(1, ~0U, 0);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGCHLD, SIG_DFL);
		/* The signals a terminal's Ctrl-C or timeout(1) send to harvest's whole process
		 * group are for the command harvest runs (and for harvest, which ends it and still
		 * types what it made): the spawner and its workers (which inherit this) end with
		 * harvest instead, at their socket's end or by PR_SET_PDEATHSIG. */
		signal(SIGINT, SIG_IGN);
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		/* Before any database is loaded here, so that every expression the workers compile
		 * is seen (mime_rx.c); HARVEST_MIME_REGEX_FILTER=0 runs them all unfiltered. */
		const char *rx = getenv("HARVEST_MIME_REGEX_FILTER");
		if (!rx || strcmp(rx, "0") != 0)
			(void)hvm_rx_hook_libmagic();
		spawner_main(0);
		_exit(0);
	}
	close(sv[1]);
	hv__own_child_add(pid); /* not the command's, when started while one runs */
	zy_sock = sv[0];
	__atomic_store_n(&zy_pid, pid, __ATOMIC_RELAXED);
	zy_owner = getpid();
	return 0;
}

/* The spawner's gone (killed, or a caller's waitpid(-1) reaped it): forget it. Under zy_mu. */
static void spawner_lost_locked(void)
{
	close(zy_sock);
	zy_sock = -1;
	waitpid(zy_pid, NULL, WNOHANG);
	hv__own_child_remove(zy_pid);
	__atomic_store_n(&zy_pid, -1, __ATOMIC_RELAXED);
}

/* Reads the answer to the spawn sent ahead, if one is unread, into its worker: its pid, or
 * -1 when it was not started (the worker's socket then reads EOF). Under zy_mu. */
static void settle_ahead_locked(void)
{
	struct hvm_worker *w = zy_ahead;
	if (!w)
		return;
	zy_ahead = NULL;
	struct zy_ans a = {0};
	ssize_t r;
	while ((r = recv(zy_sock, &a, sizeof(a), 0)) < 0 && errno == EINTR)
		;
	if (r != (ssize_t)sizeof(a)) {
		spawner_lost_locked();
		return;
	}
	if (a.err == 0 && a.value > 0) {
		w->pid = a.value;
		w->have_cpu_clock = clock_getcpuclockid(w->pid, &w->cpu_clock) == 0;
	}
}

/* The same for w, if its answer is the one unread (a worker's pid is only read after this,
 * under the lock another thread may be settling it with). */
static void settle_ahead(struct hvm_worker *w)
{
	pthread_mutex_lock(&zy_mu);
	if (zy_ahead == w)
		settle_ahead_locked();
	pthread_mutex_unlock(&zy_mu);
}

/* One request to the spawner and its answer; restarts a lost spawner once. errno-style.
 * With ahead (a ZY_SPAWN for that worker), the answer is not waited for: it is read later
 * (settle_ahead), and a is left alone. */
static int spawner_call(struct zy_req *rq, int fd, struct zy_ans *a, struct hvm_worker *ahead)
{
	pthread_mutex_lock(&zy_mu);
	settle_ahead_locked();
	int err = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		err = spawner_start_locked();
		if (err)
			break;
		struct iovec iov = {rq, sizeof(*rq)};
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int))];
		} ctl;
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		if (fd >= 0) {
			memset(&ctl, 0, sizeof(ctl));
			mh.msg_control = ctl.buf;
			mh.msg_controllen = sizeof(ctl.buf);
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &fd, sizeof(fd));
		}
		ssize_t r;
		while ((r = sendmsg(zy_sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
			;
		if (r == (ssize_t)sizeof(*rq) && ahead) {
			zy_ahead = ahead;
			break;
		}
		if (r == (ssize_t)sizeof(*rq) && rq->op == ZY_RELEASE)
			break; /* never answered */
		if (r == (ssize_t)sizeof(*rq)) {
			while ((r = recv(zy_sock, a, sizeof(*a), 0)) < 0 && errno == EINTR)
				;
			if (r == (ssize_t)sizeof(*a))
				break;
		}
		err = EPIPE;
		spawner_lost_locked();
		if (rq->op == ZY_WAIT || rq->op == ZY_RELEASE)
			break; /* a new spawner does not know the old one's children */
	}
	pthread_mutex_unlock(&zy_mu);
	return err;
}

pid_t hvm_spawner_pid(void)
{
	return __atomic_load_n(&zy_pid, __ATOMIC_RELAXED);
}

void hvm_spawner_prepare(void)
{
	pthread_mutex_lock(&zy_mu);
	(void)spawner_start_locked();
	pthread_mutex_unlock(&zy_mu);
}

/* ---- The parent ------------------------------------------------------------------------ */

static int64_t now_ms(void)
{
	return hv_clock_ns(CLOCK_MONOTONIC) / 1000000;
}

static void reap(hvm_worker *w, char *why, size_t why_len, bool timed_out)
{
	if (w->pid <= 0)
		return;
	if (timed_out)
		kill(w->pid, SIGKILL); /* not reaped yet: the pid is still this worker's */
	if (!why && !timed_out) {
		/* Nothing to report: the spawner reaps it once it has exited. */
		struct zy_req rq = {.op = ZY_RELEASE, .pid = w->pid};
		(void)spawner_call(&rq, -1, NULL, NULL);
		w->pid = -1;
		w->have_cpu_clock = false;
		return;
	}
	struct zy_req rq = {.op = ZY_WAIT, .pid = w->pid};
	struct zy_ans a = {0};
	int err = spawner_call(&rq, -1, &a, NULL);
	int status = a.value;
	pid_t r = err == 0 && a.err == 0 ? w->pid : -1;
	if (why) {
		if (timed_out)
			snprintf(why, why_len, "the libmagic worker took longer than %u ms",
				 atomic_load(&timeout_ms));
		else if (r == w->pid && WIFSIGNALED(status))
			snprintf(why, why_len, "the libmagic worker was killed by signal %d (%s)",
				 WTERMSIG(status), strsignal(WTERMSIG(status)));
		else if (r == w->pid && WIFEXITED(status))
			snprintf(why, why_len, "the libmagic worker exited with status %d",
				 WEXITSTATUS(status));
		else
			snprintf(why, why_len, "the libmagic worker vanished");
	}
	w->pid = -1;
	w->have_cpu_clock = false;
}

static void stop(hvm_worker *w, char *why, size_t why_len, bool timed_out)
{
	settle_ahead(w); /* its pid, to reap it */
	if (w->sock >= 0) {
		close(w->sock); /* a waiting worker reads EOF and exits */
		w->sock = -1;
	}
	reap(w, why, why_len, timed_out);
}

/* The worker's CPU time (user + system, ms) from its CPU-time clock: one syscall, with no
 * file to open, so it is read for every file; false when it cannot be. */
static bool worker_clock(const hvm_worker *w, int64_t *cpu_ms)
{
	struct timespec ts;
	if (!w->have_cpu_clock || clock_gettime(w->cpu_clock, &ts) != 0)
		return false;
	*cpu_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	return true;
}

/* The worker's state letter and CPU time (user + system, ms) from /proc/PID/stat; false
 * when they cannot be read. Only once a deadline has passed. */
static bool worker_cpu(pid_t pid, char *state, int64_t *cpu_ms)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (hv_read_small(path, buf, sizeof(buf)) <= 0)
		return false;
	const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
	if (!p || p[1] != ' ' || !p[2])
		return false;
	*state = p[2];
	/* After the state: ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt,
	 * then utime and stime (fields 14 and 15), in clock ticks. */
	char *q = (char *)p + 3;
	unsigned long long v[12];
	for (int i = 0; i < 12; i++) {
		char *end;
		errno = 0;
		v[i] = strtoull(q, &end, 10);
		if (end == q || errno)
			return false;
		q = end;
	}
	long hz = sysconf(_SC_CLK_TCK);
	*cpu_ms = (int64_t)((v[10] + v[11]) * 1000 / (unsigned long long)(hz > 0 ? hz : 100));
	return true;
}

/* Waits for one answer until the deadline. 1: got it into w->msg (*n bytes); 0: timeout;
 * -1: the worker is gone.
 *
 * The limit is on the time the worker spends on the file: a worker still runnable (or
 * waiting on the disk) that has used less CPU than the limit was only waiting for a core on
 * a loaded machine, so its deadline moves on, up to six times the limit in all. A worker
 * that sleeps (a hang) or has used the limit's CPU is over it. */
static int wait_answer(hvm_worker *w, size_t *n)
{
	int64_t limit = atomic_load(&timeout_ms);
	int64_t start = now_ms(), deadline = start + limit;
	int64_t cpu0 = 0;
	char st0 = 0;
	/* The CPU clock when there is one; else, as before it, /proc (a kernel without the
	 * clock for another process). */
	bool have_cpu0 = w->pid > 0 &&
			 (worker_clock(w, &cpu0) || worker_cpu(w->pid, &st0, &cpu0));
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0) {
			char st = 0;
			int64_t cpu = 0, clock_cpu = 0;
			if (have_cpu0 && deadline < start + 6 * limit && worker_cpu(w->pid, &st, &cpu) &&
			    (!w->have_cpu_clock || worker_clock(w, &clock_cpu)) &&
			    (st == 'R' || st == 'D') &&
			    (w->have_cpu_clock ? clock_cpu : cpu) - cpu0 < limit) {
				deadline += limit / 2 > 0 ? limit / 2 : 1;
				continue;
			}
			return 0;
		}
		struct pollfd p = {.fd = w->sock, .events = POLLIN};
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			continue; /* the deadline: extended above if the worker only waited for a core */
		if (r < 0)
			return -1;
		ssize_t got = recv(w->sock, w->msg, w->msg_cap, MSG_DONTWAIT);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got < (ssize_t)sizeof(struct ans))
			return -1;
		*n = (size_t)got;
		return 1;
	}
}

/* HARVEST_TEST_WORKER_FAULT, read once per process (as test_hook.h's switches are): a spawn
 * costs no getenv. -1: not read yet. Always off in builds without the test hooks. */
static atomic_int faults_switch = -1;

static bool read_faults_switch(void)
{
	bool on = false;
#ifdef HARVEST_TEST_HOOKS
	const char *f = getenv("HARVEST_TEST_WORKER_FAULT");
	on = f && strcmp(f, "1") == 0;
#endif
	atomic_store(&faults_switch, on ? 1 : 0);
	return on;
}

static bool test_faults(void)
{
	int v = atomic_load(&faults_switch);
	return v < 0 ? read_faults_switch() : v == 1;
}

void hvm_worker_faults_reload(void)
{
	(void)read_faults_switch();
}

/* A worker that could not be started: "libmagic worker: <why>", and for a shortage of
 * descriptors (here, or in the spawner: the new worker's) the limit to raise. */
static hv_status spawn_failed(int err)
{
	struct rlimit rl;
	if ((err == EMFILE || err == ENFILE) && getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_cur != RLIM_INFINITY)
		return hv_error_set(HV_EIO,
				    "libmagic worker: too few file descriptors to start it (%s, the "
				    "limit is %llu: ulimit -n)",
				    strerror(err), (unsigned long long)rl.rlim_cur);
	return hv_error_errno(HV_EIO, "libmagic worker", err);
}

/* Asks the spawner for a worker for w, not waiting for its first answer (spawn_ready); warm:
 * one started ahead of need, which warms up meanwhile. */
static hv_status spawn_send(hvm_worker *w, bool warm)
{
	char why[512];
	if (detect_libs_load(why, sizeof(why)) != 0)
		return hv_error_set(HV_EIO, "libmagic worker: %s", why);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return spawn_failed(errno);
	bool faults = test_faults();
	struct zy_req rq = {.op = ZY_SPAWN, .flags = w->flags, .faults = faults, .warm = warm};
	if (strlen(w->database) >= sizeof(rq.database)) {
		close(sv[0]);
		close(sv[1]);
		return hv_error_set(HV_EIO, "%s: database path too long", w->database);
	}
	memcpy(rq.database, w->database, strlen(w->database) + 1);
	if (w->fingerprint && strlen(w->fingerprint) < sizeof(rq.fingerprint))
		memcpy(rq.fingerprint, w->fingerprint, strlen(w->fingerprint) + 1);
	/* A worker started ahead of need: the spawner may load the database first, which takes
	 * milliseconds; its answer is read when the worker is wanted (settle_ahead). */
	struct zy_ans za = {0};
	int err = spawner_call(&rq, sv[1], &za, warm ? w : NULL);
	if (err == 0)
		err = za.err;
	if (err) {
		close(sv[0]);
		close(sv[1]);
		return spawn_failed(err);
	}
	close(sv[1]);
	w->sock = sv[0];
	w->faults = faults;
	if (!warm) {
		w->pid = za.value;
		w->have_cpu_clock = clock_getcpuclockid(w->pid, &w->cpu_clock) == 0;
	}
	return HV_OK;
}

/* Waits for the first answer of the worker spawn_send started: whether its database loaded. */
static hv_status spawn_ready(hvm_worker *w)
{
	settle_ahead(w);
	if (w->pid <= 0) {
		stop(w, NULL, 0, false);
		return hv_error_set(HV_EIO, "%s: the libmagic worker could not be started",
				    w->database);
	}
	size_t n = 0;
	int r = wait_answer(w, &n);
	struct ans a = {0};
	if (r == 1)
		memcpy(&a, w->msg, sizeof(a));
	if (r != 1 || a.kind != ANS_OK) {
		/* The worker's own words, whole; else how it ended ("the libmagic worker was
		 * killed by signal 9 (Killed)"). */
		char why[600] = "";
		if (r == 1) {
			size_t l = n - sizeof(a) < sizeof(why) - 1 ? n - sizeof(a) : sizeof(why) - 1;
			memcpy(why, w->msg + sizeof(a), l);
			why[l] = '\0';
		}
		stop(w, r == 1 ? NULL : why, sizeof(why), r == 0);
		if (r == 1)
			return hv_error_set(HV_EIO, "%s", why);
		return hv_error_set(HV_EIO, "%s: %s", w->database, why);
	}
	static const char inherited[] = "inherited";
	w->inherited = n - sizeof(a) == sizeof(inherited) - 1 &&
		       memcmp(w->msg + sizeof(a), inherited, sizeof(inherited) - 1) == 0;
	return HV_OK;
}

static hv_status spawn(hvm_worker *w)
{
	hv_status rc = spawn_send(w, false);
	return rc == HV_OK ? spawn_ready(w) : rc;
}

/* Whether w's end of the socket is closed: a spare that said it was ready and died while
 * it waited (killed, or the OOM killer's choice) is replaced, not handed its first file. */
static bool hung_up(const hvm_worker *w)
{
	struct pollfd p = {.fd = w->sock, .events = POLLRDHUP};
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

/* The worker hvm_worker_prestart started, not taken yet (its first answer unread). */
static pthread_mutex_t spare_mu = PTHREAD_MUTEX_INITIALIZER;
static hvm_worker *spare;

static hvm_worker *worker_new(const char *database, const char *fingerprint, int flags,
			      size_t bytes_max);

/* The spare, when it was started for this database, fingerprint and flags (and the test
 * faults as they are now); NULL otherwise. */
static hvm_worker *take_spare(const char *database, const char *fingerprint, int flags,
			      size_t bytes_max)
{
	pthread_mutex_lock(&spare_mu);
	hvm_worker *w = spare;
	if (w && strcmp(w->database, database) == 0 && fingerprint && w->fingerprint &&
	    strcmp(w->fingerprint, fingerprint) == 0 && w->flags == flags &&
	    w->bytes_max == bytes_max && w->faults == test_faults())
		spare = NULL;
	else
		w = NULL;
	pthread_mutex_unlock(&spare_mu);
	return w;
}

void hvm_worker_prestart(void)
{
	if (!hvm_isolation())
		return;
	pthread_mutex_lock(&spare_mu);
	bool have = spare != NULL;
	pthread_mutex_unlock(&spare_mu);
	if (have)
		return;
	hv_magic *m = NULL;
	if (hvm_magic_open_lazy(&m, NULL, 0) != HV_OK) {
		hv_error_clear(); /* the first real open says why */
		return;
	}
	hvm_worker *w = worker_new(hv_magic_database(m), hv_magic_fingerprint(m),
				   hvm_magic_flags(m), hv_magic_bytes_max(m));
	hv_magic_close(m);
	if (!w)
		return;
	if (spawn_send(w, true) != HV_OK) {
		hv_error_clear();
		hvm_worker_stop(w);
		return;
	}
	pthread_mutex_lock(&spare_mu);
	if (!spare) {
		spare = w;
		w = NULL;
	}
	pthread_mutex_unlock(&spare_mu);
	hvm_worker_stop(w); /* another thread's came first */
}

pid_t hvm_worker_spare_pid(void)
{
	pthread_mutex_lock(&spare_mu);
	if (spare)
		settle_ahead(spare);
	pid_t pid = spare ? spare->pid : -1;
	pthread_mutex_unlock(&spare_mu);
	return pid;
}

bool hvm_worker_spare_ready(int ms)
{
	pthread_mutex_lock(&spare_mu);
	if (spare)
		settle_ahead(spare);
	int fd = spare && spare->pid > 0 ? spare->sock : -1;
	pthread_mutex_unlock(&spare_mu);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return fd >= 0 && poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* A worker not started yet (NULL: out of memory). */
static hvm_worker *worker_new(const char *database, const char *fingerprint, int flags,
			      size_t bytes_max)
{
	hvm_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->pid = -1;
	w->sock = -1;
	w->flags = flags;
	w->bytes_max = bytes_max;
	w->msg_cap = sizeof(struct req) + bytes_max;
	w->database = strdup(database);
	w->fingerprint = fingerprint ? strdup(fingerprint) : NULL;
	w->msg = malloc(w->msg_cap);
	if (!w->database || !w->msg || (fingerprint && !w->fingerprint)) {
		hvm_worker_stop(w);
		return NULL;
	}
	return w;
}

hv_status hvm_worker_start(hvm_worker **out, const char *database, const char *fingerprint,
			   int flags, size_t bytes_max)
{
	*out = NULL;
	static atomic_uint started;
	if (hv__test_switch_on(HV__SWITCH_MIME_ONE_WORKER) && atomic_fetch_add(&started, 1) > 0)
		return hv_error_set(HV_EIO, "libmagic worker: %s", strerror(EAGAIN));
	hvm_worker *w = take_spare(database, fingerprint, flags, bytes_max);
	if (w) {
		if (spawn_ready(w) == HV_OK && !hung_up(w)) {
			*out = w;
			return HV_OK;
		}
		/* Lost meanwhile (killed, or its spawner): start one now, as without it. */
		hv_error_clear();
		hvm_worker_stop(w);
	}
	w = worker_new(database, fingerprint, flags, bytes_max);
	if (!w)
		return hv_error_set(HV_ENOMEM, "out of memory");
	hv_status rc = spawn(w);
	if (rc != HV_OK) {
		hvm_worker_stop(w);
		return rc;
	}
	*out = w;
	return HV_OK;
}

void hvm_worker_stop(hvm_worker *w)
{
	if (!w)
		return;
	stop(w, NULL, 0, false);
	free(w->database);
	free(w->fingerprint);
	free(w->msg);
	free(w);
}

pid_t hvm_worker_pid(const hvm_worker *w)
{
	return w ? w->pid : -1;
}

bool hvm_worker_inherited(const hvm_worker *w)
{
	return w && w->pid > 0 && w->inherited;
}

/* The answer record at *at of an answer message msg[0..n) into *answer, *at moved past it;
 * HV_DONE when there is no whole record there. */
static hv_status take_record(const unsigned char *msg, size_t n, size_t *at, const char *what,
			     hv_buf *answer)
{
	struct ans a;
	if (n - *at < sizeof(a))
		return HV_DONE;
	memcpy(&a, msg + *at, sizeof(a));
	size_t l = n - *at - sizeof(a);
	if (a.len < l)
		l = a.len;
	const char *text = (const char *)msg + *at + sizeof(a);
	*at += sizeof(a) + l;
	hv_buf_truncate(answer, 0);
	int rc = hv_buf_append(answer, text, l);
	if (rc != HV_OK)
		return rc;
	if (a.kind != ANS_OK) {
		if (a.err > 0)
			return hv_error_errno(HV_EIO, what, a.err);
		return hv_error_set(HV_EIO, "%s: %s", what, answer->data);
	}
	return HV_OK;
}

/* An in-memory copy of buf, for bytes too large for one socket message. */
static int to_memfd(const void *buf, size_t len, const char *what)
{
	int fd = memfd_create("harvest-magic", MFD_CLOEXEC);
	if (fd < 0) {
		hv_error_errno(HV_EIO, what, errno);
		return -1;
	}
	const char *p = buf;
	size_t left = len;
	while (left > 0) {
		ssize_t n = write(fd, p, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			hv_error_errno(HV_EIO, what, n < 0 ? errno : EIO);
			close(fd);
			return -1;
		}
		p += n;
		left -= (size_t)n;
	}
	return fd;
}

hv_status hvm_worker_detect(hvm_worker *w, int fd, const void *buf, size_t len, const char *what,
			    hv_buf *answer)
{
	if (w->sock < 0) {
		hv_status rc = spawn(w); /* the last one died: replace it */
		if (rc != HV_OK)
			return rc;
	}
	if (len > w->bytes_max)
		len = w->bytes_max;
	int memfd = -1;
	if (fd < 0 && len > INLINE_MAX) {
		memfd = to_memfd(buf, len, what);
		if (memfd < 0)
			return hv_error_last_status();
	}
	struct req rq = {.op = fd >= 0 ? REQ_FD : memfd >= 0 ? REQ_MAPPED : REQ_BUFFER,
			 .len = fd >= 0 ? 0 : len};
	struct iovec iov[2] = {{&rq, sizeof(rq)}, {(void *)buf, fd >= 0 || memfd >= 0 ? 0 : len}};
	if (memfd >= 0)
		fd = memfd;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	if (fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(fd));
	}
	int r;
	ssize_t sent;
	while ((sent = sendmsg(w->sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (memfd >= 0)
		close(memfd);
	size_t n = 0;
	r = sent < 0 ? -1 : wait_answer(w, &n);
	if (r != 1) {
		/* Timed out (0) or gone (-1): stopped, and the fallback with the warning. */
		char why[160];
		stop(w, why, sizeof(why), r == 0);
		hv_buf_truncate(answer, 0);
		if (hv_buf_append_str(answer, "application/octet-stream") != HV_OK)
			return hv_error_set(HV_ENOMEM, "out of memory");
		return hv_error_set(HV_WARN, "%s: %s; typed application/octet-stream", what, why);
	}
	size_t at = 0;
	return take_record(w->msg, n, &at, what, answer);
}

static atomic_ulong batches;

unsigned long hvm_worker_batches(void)
{
	return atomic_load(&batches);
}

/* rcs[i] = rc, and errs[i] its message when it is not HV_OK (NULL when out of memory). */
static hv_status batch_result(hv_status rc, hv_status *rcs, char **errs, size_t i)
{
	rcs[i] = rc;
	errs[i] = rc != HV_OK ? strdup(hv_error_last()) : NULL;
	return rc;
}

/* One file of a batch asked on its own: the descriptor fds[i] put back at 0, or bufs[i]. */
static hv_status batch_retry(hvm_worker *w, const int *fds, const void *const *bufs,
			     const size_t *lens, size_t i, const char *what, hv_buf *answer)
{
	if (!fds)
		return hvm_worker_detect(w, -1, bufs[i], lens[i], what, answer);
	if (lseek(fds[i], 0, SEEK_SET) != 0)
		return hv_error_errno(HV_EIO, what, errno);
	return hvm_worker_detect(w, fds[i], NULL, 0, what, answer);
}

/* Sends the batch request mh of k files (fds, or bufs and lens) and takes its k answers. */
static hv_status batch_call(hvm_worker *w, struct msghdr *mh, size_t k, const int *fds,
			    const void *const *bufs, const size_t *lens,
			    const char *const *whats, hv_buf *answers, hv_status *rcs,
			    char **errs)
{
	ssize_t sent;
	while ((sent = sendmsg(w->sock, mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	size_t n = 0;
	int r = sent < 0 ? -1 : wait_answer(w, &n);
	size_t at = 0, done = 0;
	if (r == 1) {
		for (; done < k; done++) {
			hv_status rc = take_record(w->msg, n, &at, whats[done], &answers[done]);
			if (rc == HV_ENOMEM || rc == HV_DONE)
				break;
			batch_result(rc, rcs, errs, done);
		}
		if (done == k) {
			atomic_fetch_add(&batches, 1);
			return HV_OK;
		}
		for (size_t i = 0; i < done; i++) {
			free(errs[i]);
			errs[i] = NULL;
		}
		r = -1; /* a reply short of records: the worker is not trusted further */
	}
	/* The worker crashed, hung or answered short: stopped, and each file is asked again on
	 * its own, so that only the file at fault gets the fallback, as without batches. (The
	 * worker shared the descriptors' offsets: each is put back at 0 first.) */
	char why[160];
	stop(w, why, sizeof(why), r == 0);
	for (size_t i = 0; i < k; i++) {
		hv_status rc = batch_retry(w, fds, bufs, lens, i, whats[i], &answers[i]);
		if (batch_result(rc, rcs, errs, i) == HV_ENOMEM) {
			for (size_t j = 0; j <= i; j++) {
				free(errs[j]);
				errs[j] = NULL;
			}
			return rc;
		}
	}
	return HV_OK;
}

hv_status hvm_worker_detect_fds(hvm_worker *w, const int *fds, size_t k,
				const char *const *whats, hv_buf *answers, hv_status *rcs,
				char **errs)
{
	if (k == 1) {
		hv_status rc = hvm_worker_detect(w, fds[0], NULL, 0, whats[0], &answers[0]);
		return batch_result(rc, rcs, errs, 0) == HV_ENOMEM ? rc : HV_OK;
	}
	if (k == 0 || k > HVM_WORKER_BATCH_MAX)
		return hv_error_set(HV_EUSAGE, "hvm_worker_detect_fds: %zu descriptors", k);
	if (w->sock < 0) {
		hv_status rc = spawn(w);
		if (rc != HV_OK)
			return rc;
	}
	struct req rq = {.op = REQ_FDS, .len = k};
	struct iovec iov = {&rq, sizeof(rq)};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * HVM_WORKER_BATCH_MAX)];
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			    .msg_controllen = CMSG_SPACE(sizeof(int) * k)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * k);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * k);
	return batch_call(w, &mh, k, fds, NULL, NULL, whats, answers, rcs, errs);
}

hv_status hvm_worker_detect_bufs(hvm_worker *w, const void *const *bufs, const size_t *lens,
				 size_t k, const char *const *whats, hv_buf *answers,
				 hv_status *rcs, char **errs)
{
	size_t total = 0;
	for (size_t i = 0; i < k; i++)
		total += lens[i];
	if (k == 0 || k > HVM_WORKER_BATCH_MAX || total > HVM_WORKER_BATCH_BYTES)
		return hv_error_set(HV_EUSAGE, "hvm_worker_detect_bufs: %zu buffers, %zu bytes", k,
				    total);
	if (k == 1) {
		hv_status rc = hvm_worker_detect(w, -1, bufs[0], lens[0], whats[0], &answers[0]);
		return batch_result(rc, rcs, errs, 0) == HV_ENOMEM ? rc : HV_OK;
	}
	if (w->sock < 0) {
		hv_status rc = spawn(w);
		if (rc != HV_OK)
			return rc;
	}
	struct req rq = {.op = REQ_BUFS, .len = k};
	uint32_t l32[HVM_WORKER_BATCH_MAX];
	struct iovec iov[2 + HVM_WORKER_BATCH_MAX];
	iov[0] = (struct iovec){&rq, sizeof(rq)};
	iov[1] = (struct iovec){l32, k * sizeof(uint32_t)};
	for (size_t i = 0; i < k; i++) {
		l32[i] = (uint32_t)lens[i];
		iov[2 + i] = (struct iovec){(void *)bufs[i], lens[i]};
	}
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2 + k};
	return batch_call(w, &mh, k, NULL, bufs, lens, whats, answers, rcs, errs);
}
