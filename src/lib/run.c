/* The process runner: a vfork-style clone + exec with a close-on-exec error pipe, then one
 * poll() loop over the output pipes, the stdin pipe, a pidfd and an optional cancel descriptor.
 *
 * Why not posix_spawnp: (1) its PATH search uses the *caller's* PATH, while `env PATH=... cmd`
 * semantics want the child's; (2) glibc's posix_spawnp does not fall back to /bin/sh for an
 * executable without #! (ENOEXEC), which execvp and every shell do; (3) closing every
 * inherited descriptor needs the non-portable addclosefrom_np. So the child is started the way
 * posix_spawn starts it: clone(CLONE_VM | CLONE_VFORK) on a stack of its own. It shares the
 * caller's memory, and the calling thread sleeps until it has exec'd or exited, so no page
 * table is copied (a fork of a process with a dozen libraries mapped costs more than the
 * command `true` itself) and nothing is copied on write afterwards. Between clone and exec
 * the child calls only async-signal-safe functions and writes no memory of the caller's but
 * its own stack and errno (the sleeping thread's): everything it needs (the PATH candidates,
 * envp, the /bin/sh argv) is built beforehand, and exec failures travel back as an errno
 * through a pipe that exec closes (a pipe rather than a shared variable, so the same code is
 * right where the clone is a plain fork, as under valgrind). All signals are blocked around
 * the clone so no handler of the caller runs in the child, on the caller's memory, before it
 * resets them.
 *
 * The leader is detected as exited through a pidfd (or waitid(WNOWAIT) polling where
 * pidfd_open is missing) and reaped only at the very end: a zombie leader keeps its pid, and
 * with it the process group id, from being reused while we may still signal the group. */
#include "harvest/run.h"
#include "fdio.h"
#include "internal.h"
#include "run_internal.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* POSIX has the program declare environ; glibc declares it too, under _GNU_SOURCE only.
 * NOLINTNEXTLINE(readability-redundant-declaration) */
extern char **environ;

#define READ_SIZE 65536
#define GIVE_UP_MS 1000  /* after SIGKILL, how long pipes held by escaped processes are read */
#define POLL_FALLBACK_MS 20 /* exit polling interval when there is no pidfd */
#define NEVER INT64_MAX

/* ---- small pure helpers ---------------------------------------------------------------- */

const char *hv_stream_name(hv_stream which)
{
	return which == HV_STREAM_STDERR ? "stderr" : "stdout";
}

void hv_run_opts_init(hv_run_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->max_output_bytes = HV_RUN_DEFAULT_MAX_OUTPUT;
	opts->linger_ms = HV_RUN_DEFAULT_LINGER_MS;
	opts->cancel_fd = -1;
	opts->stdin_fd = -1;
}

static bool is_alpha_(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* The length of KEY in KEY=VALUE, or 0 when it is not a valid name followed by '='. */
static size_t env_key_length(const char *assignment)
{
	if (!assignment || !is_alpha_(assignment[0]))
		return 0;
	size_t i = 1;
	while (is_alpha_(assignment[i]) || is_digit(assignment[i]))
		i++;
	return assignment[i] == '=' ? i : 0;
}

hv_status hv_run_check_env(const char *assignment)
{
	HV_NEED(assignment);
	if (env_key_length(assignment) == 0)
		return hv_error_set(HV_EUSAGE,
				    "%s: not a KEY=VALUE assignment with KEY matching "
				    "[A-Za-z_][A-Za-z0-9_]*",
				    assignment ? assignment : "(null)");
	return HV_OK;
}

hv_status hv_run_check_language(const char *lang)
{
	if (!lang || !*lang)
		return hv_error_set(HV_EUSAGE, "empty language name");
	for (const char *p = lang; *p; p++) {
		if (!is_alpha_(*p) && !is_digit(*p) && !strchr(".+-", *p))
			return hv_error_set(HV_EUSAGE,
					    "%s: not a language name (allowed: A-Z a-z 0-9 . _ + -)",
					    lang);
	}
	return HV_OK;
}

hv_status hv_run_argv_shell(const char *argv[5], const char *script)
{
	HV_NEED(argv);
	if (!script)
		return hv_error_set(HV_EUSAGE, "--shell needs a command string");
	/* The system's shell whatever PATH the command is given (PATH=/opt/bin is for the
	 * command's own lookups); "--" before a script sh would take for options ("-x"). */
	size_t n = 0;
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	if (script[0] == '-' || script[0] == '+')
		argv[n++] = "--";
	argv[n++] = script;
	argv[n] = NULL;
	return HV_OK;
}

hv_status hv_run_argv_language(const char *argv[2], const char *lang)
{
	HV_NEED(argv);
	hv_status rc = hv_run_check_language(lang);
	if (rc != HV_OK)
		return rc;
	argv[0] = lang;
	argv[1] = NULL;
	return HV_OK;
}

void hv_run_result_free(hv_run_result *r)
{
	if (!r)
		return;
	free(r->message);
	free(r->stdout_data);
	free(r->stderr_data);
	memset(r, 0, sizeof(*r));
}

static int64_t mono_ms(void)
{
	return hv_clock_ns(CLOCK_MONOTONIC) / 1000000;
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/* Moves fd (close-on-exec) to a number >= 3, so that the child's dup2() onto 0, 1, 2 never
 * clobbers another of its descriptors when the caller runs with a standard stream closed. */
static int above_stdio(int fd)
{
	if (fd < 0 || fd > 2)
		return fd;
	int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	int saved = errno;
	close(fd);
	errno = saved;
	return moved;
}

static int make_pipe(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC) != 0)
		return -1;
	fds[0] = above_stdio(fds[0]);
	fds[1] = above_stdio(fds[1]);
	if (fds[0] < 0 || fds[1] < 0) {
		int saved = errno;
		close_fd(&fds[0]);
		close_fd(&fds[1]);
		errno = saved;
		return -1;
	}
	return 0;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ---- what the child needs, built before it starts ------------------------------------ */

typedef struct spawn_plan {
	char **envp;        /* environ + additions; strings borrowed */
	char **candidates;  /* paths to try with execve, in order (owned) */
	size_t n_candidates;
	bool has_slash;     /* argv[0] names a path: no search */
	char **sh_argv;     /* {"/bin/sh", <candidate>, argv[1..], NULL} for ENOEXEC */
	int max_fd;         /* for the close-on-exec loop where close_range is missing */
	pid_t parent;       /* the caller's pid, to see whether it died before PR_SET_PDEATHSIG */
	int dir_fd, in_fd, out_fd, err_fd, report_fd;
} spawn_plan;

/* Sent through the error pipe when the child fails before or at exec. */
typedef struct spawn_report {
	int stage; /* 1: fchdir, 2: exec, 3: descriptor setup */
	int err;
} spawn_report;

static void plan_free(spawn_plan *p)
{
	free(p->envp);
	for (size_t i = 0; i < p->n_candidates; i++)
		free(p->candidates[i]);
	free(p->candidates);
	free(p->sh_argv);
}

static hv_status build_env(spawn_plan *p, const hv_run_opts *opts)
{
	size_t n = 0;
	while (environ && environ[n])
		n++;
	p->envp = calloc(n + opts->n_env + 1, sizeof(char *));
	if (!p->envp)
		return hv_error_set(HV_ENOMEM, "out of memory");
	size_t len = 0;
	/* harvest's own variables (HARVEST_DB names the database the run is recorded in) are
	 * not the command's business: a command that knows where its history lives can rewrite
	 * it. They reach it only when the caller passes them in opts->env. */
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], HV_RUN_OWN_ENV_PREFIX, strlen(HV_RUN_OWN_ENV_PREFIX)) != 0)
			p->envp[len++] = environ[i];
	for (size_t a = 0; a < opts->n_env; a++) {
		const char *kv = opts->env[a];
		size_t klen = env_key_length(kv);
		size_t i = 0;
		/* a later assignment of the same key wins, as with env(1) */
		while (i < len && !(strncmp(p->envp[i], kv, klen + 1) == 0))
			i++;
		p->envp[i] = (char *)kv;
		if (i == len)
			len++;
	}
	p->envp[len] = NULL;
	return HV_OK;
}

static const char *env_lookup(char *const *envp, const char *key)
{
	size_t klen = strlen(key);
	for (; *envp; envp++)
		if (strncmp(*envp, key, klen) == 0 && (*envp)[klen] == '=')
			return *envp + klen + 1;
	return NULL;
}

/* The execvp() search list, from the child's PATH ("/bin:/usr/bin" when unset, as glibc). An
 * empty PATH element means the working directory, where a bare name is found relative. */
static hv_status build_candidates(spawn_plan *p, const char *cmd)
{
	p->has_slash = strchr(cmd, '/') != NULL;
	const char *path = p->has_slash ? "" : env_lookup(p->envp, "PATH");
	if (!path)
		path = "/bin:/usr/bin";
	size_t n = 1;
	for (const char *c = path; *c; c++)
		n += *c == ':';
	p->candidates = calloc(n, sizeof(char *));
	if (!p->candidates)
		return hv_error_set(HV_ENOMEM, "out of memory");
	if (!*cmd)
		return HV_OK; /* execvp("") fails with ENOENT: no candidate at all */
	size_t clen = strlen(cmd);
	const char *start = path;
	for (;;) {
		const char *end = strchr(start, ':');
		size_t dlen = end ? (size_t)(end - start) : strlen(start);
		char *c = malloc(dlen + clen + 2);
		if (!c)
			return hv_error_set(HV_ENOMEM, "out of memory");
		memcpy(c, start, dlen);
		size_t at = dlen;
		if (dlen > 0)
			c[at++] = '/';
		memcpy(c + at, cmd, clen + 1);
		p->candidates[p->n_candidates++] = c;
		if (!end)
			break;
		start = end + 1;
	}
	return HV_OK;
}

static hv_status build_plan(spawn_plan *p, const hv_run_opts *opts)
{
	hv_status rc = build_env(p, opts);
	if (rc == HV_OK)
		rc = build_candidates(p, opts->argv[0]);
	if (rc != HV_OK)
		return rc;
	size_t argc = 0;
	while (opts->argv[argc])
		argc++;
	p->sh_argv = calloc(argc + 2, sizeof(char *));
	if (!p->sh_argv)
		return hv_error_set(HV_ENOMEM, "out of memory");
	p->sh_argv[0] = (char *)"/bin/sh";
	for (size_t i = 1; i < argc; i++)
		p->sh_argv[i + 1] = (char *)opts->argv[i];
	struct rlimit rl;
	p->max_fd = 65536;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (rlim_t)p->max_fd)
		p->max_fd = (int)rl.rlim_cur;
	return HV_OK;
}

/* ---- the child, between clone and exec: async-signal-safe calls only ------------------- */

/* The child runs on a stack of its own that the sanitizers know nothing of, and never returns:
 * no redzone poisoned there may outlive it and be taken for a bug when the pages are reused. */
#if defined(__GNUC__) || defined(__clang__)
#define CHILD_CODE __attribute__((no_sanitize_address))
#else
#define CHILD_CODE
#endif

/* The child's stack: what its frames, the libc wrappers and execve need, with room to spare;
 * only the pages touched are ever allocated. A guard page below it. */
#define CHILD_STACK_SIZE (128 * 1024)

CHILD_CODE _Noreturn static void child_fail(const spawn_plan *p, int stage, int err)
{
	spawn_report r = {stage, err};
	ssize_t n;
	do
		n = write(p->report_fd, &r, sizeof(r));
	while (n < 0 && errno == EINTR);
	_exit(127);
}

CHILD_CODE _Noreturn static void child_exec(const spawn_plan *p, char *const *argv)
{
	/* Handlers of the caller mean nothing after exec, but would run until then (on the
	 * caller's memory); an ignored SIGPIPE or SIGXFSZ would be inherited and surprise the
	 * command (Python's subprocess resets the same two). Everything else ignored stays
	 * ignored, as with nohup. Without CLONE_SIGHAND the child has its own copy of the
	 * dispositions: resetting them here leaves the caller's alone. */
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction cur;
		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &cur) != 0)
			continue;
		if (cur.sa_handler == SIG_IGN ? (sig == SIGPIPE || sig == SIGXFSZ)
					      : cur.sa_handler != SIG_DFL)
			sigaction(sig, &dfl, NULL);
	}
	/* An empty mask: a SIGTERM the caller happened to block must still end the command. */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	setpgid(0, 0);
	/* A caller killed outright (SIGKILL) cannot end the command: the kernel does. If the
	 * caller died before this line, the signal will never come: we have a new parent. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != p->parent)
		_exit(127);
	if (p->dir_fd >= 0 && fchdir(p->dir_fd) != 0)
		child_fail(p, 1, errno);
	if (dup2(p->in_fd, 0) < 0 || dup2(p->out_fd, 1) < 0 || dup2(p->err_fd, 2) < 0)
		child_fail(p, 3, errno);
	/* Nothing of the caller's but 0, 1, 2 may reach the command: mark every other descriptor
	 * close-on-exec (the report pipe must stay usable until exec, so not close_range's
	 * plain closing). Without close_range (Linux < 5.11), one fcntl per possible number. */
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
		for (int fd = 3; fd < p->max_fd; fd++) {
			int fl = fcntl(fd, F_GETFD);
			if (fl >= 0 && !(fl & FD_CLOEXEC))
				fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
		}
	}

	/* The execvp() search, as glibc does it: go on past ENOENT-like failures, remember
	 * EACCES, run an executable without #! with /bin/sh, stop at anything else. */
	bool eacces = false;
	int err = ENOENT;
	for (size_t i = 0; i < p->n_candidates; i++) {
		execve(p->candidates[i], argv, p->envp);
		err = errno;
		if (err == ENOEXEC) {
			p->sh_argv[1] = p->candidates[i];
			execve(p->sh_argv[0], p->sh_argv, p->envp);
			child_fail(p, 2, errno);
		}
		if (p->has_slash)
			child_fail(p, 2, err);
		if (err == EACCES)
			eacces = true;
		else if (err != ENOENT && err != ENOTDIR && err != ESTALE && err != ENODEV &&
			 err != ETIMEDOUT)
			child_fail(p, 2, err);
	}
	child_fail(p, 2, eacces ? EACCES : ENOENT);
}

typedef struct child_start {
	spawn_plan *plan;
	char *const *argv;
} child_start;

CHILD_CODE static int child_main(void *arg)
{
	const child_start *cs = arg;
	child_exec(cs->plan, cs->argv);
}

/* A mapping of CHILD_STACK_SIZE with a guard page below it. */
static char *map_stack(size_t guard, size_t len)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE;
	/* cppcheck-suppress invalidFunctionArg ; an anonymous mapping takes fd -1 (mmap(2)) */
	char *stack = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (stack == MAP_FAILED)
		return NULL;
	if (mprotect(stack, guard, PROT_NONE) != 0) {
		int err = errno;
		munmap(stack, len);
		errno = err;
		return NULL;
	}
	return stack;
}

/* The child's stack, when no other spawn of this process is on it (kept_stack_taken): one
 * mapping made at the first spawn and kept for the life of the process. A mapping made and
 * unmapped for each spawn cost a TLB shootdown on the CPU the child ran on (the unmap of
 * memory it shared), which on a virtual machine took longer than the rest of the spawn. */
static char *kept_stack;
static int kept_stack_taken;

/* A stack for one spawn (its lowest address): the kept one, else a mapping of its own
 * (*mapped set). NULL with errno set when none can be had. */
static char *child_stack(size_t guard, size_t len, bool *mapped)
{
	*mapped = false;
	if (!__atomic_exchange_n(&kept_stack_taken, 1, __ATOMIC_ACQUIRE)) {
		/* Only the holder of kept_stack_taken gets here: no race on kept_stack. */
		if (!kept_stack)
			kept_stack = map_stack(guard, len);
		if (kept_stack)
			return kept_stack;
		__atomic_store_n(&kept_stack_taken, 0, __ATOMIC_RELEASE);
		return NULL;
	}
	char *stack = map_stack(guard, len);
	*mapped = stack != NULL;
	return stack;
}

/* Starts the child with clone(CLONE_VM | CLONE_VFORK): it returns once the child has exec'd or
 * exited. Its pid, or -1 with errno set. */
static pid_t spawn_child(spawn_plan *plan, char *const *argv)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t guard = page > 0 ? (size_t)page : 4096;
	size_t len = guard + CHILD_STACK_SIZE;
	bool mapped;
	char *stack = child_stack(guard, len, &mapped);
	if (!stack)
		return -1;
	child_start cs = {plan, argv};
	/* The stack grows down on every architecture Linux runs glibc's clone on but HP PA. */
	pid_t pid = clone(child_main, stack + len, CLONE_VM | CLONE_VFORK | SIGCHLD, &cs);
	int err = errno;
	/* The child has exec'd or exited: no one is on the stack any more. */
	if (mapped)
		munmap(stack, len);
	else
		__atomic_store_n(&kept_stack_taken, 0, __ATOMIC_RELEASE);
	errno = err;
	return pid;
}

/* ---- the parent's loop ----------------------------------------------------------------- */

typedef struct stream_state {
	hv_stream which;
	int fd;               /* our read end, -1 at EOF */
	char carry[4];        /* the cut UTF-8 tail of the last read (at most 3 bytes) */
	size_t carry_len;
	hv_buf kept;
	bool truncated;
	uint64_t total;
} stream_state;

/* One process as /proc shows it. */
typedef struct proc_ent {
	pid_t pid, ppid;
	bool zombie;
	bool ours;   /* a descendant of the caller that is not one of its earlier children */
} proc_ent;

typedef struct proc_list {
	proc_ent *v;
	size_t n, cap;
} proc_list;

typedef struct runner {
	const hv_run_opts *opts;
	hv_run_chunk_fn on_chunk;
	void *ctx;
	hv_status abort_status;   /* the callback's failure, HV_OK while delivering */
	pid_t pid;
	int pidfd;
	bool exited;              /* the leader is a zombie (not reaped yet) */
	int64_t deadline;         /* the timeout, NEVER without one */
	int64_t linger_at;        /* when pipes still open after the exit get the group ended */
	int kill_phase;           /* 0 none, 1 SIGTERM sent, 2 SIGKILL sent, 3 pipes given up */
	int64_t next_kill;        /* when phase 1 -> 2 or 2 -> 3 happens */
	stream_state out, err;
	int in_fd;                /* our end of the stdin pipe, -1 when done */
	const char *in_data;
	size_t in_left;
	int src_fd;               /* opts->stdin_fd until its EOF, then -1 (never closed) */
	char *in_buf;             /* READ_SIZE bytes read from src_fd, when there is one */
	int cancel_fd;
	bool timed_out, cancelled, lingered;
	char *buf;                /* READ_SIZE + 4 bytes */
	/* opts->end_descendants: */
	pid_t self;
	pid_t *before;            /* the caller's children before the fork: never ours */
	size_t n_before;
	int was_subreaper;        /* PR_GET_CHILD_SUBREAPER before the call, -1: not changed */
	proc_list procs;          /* the last scan of /proc */
	int watch_fd;             /* hv__run_watched(): polled too, -1 once on_watch said stop */
	bool (*on_watch)(void *);
	void *watch_ctx;
} runner;

/* Appends to the kept copy what still fits; a character the limit cuts is left out whole. */
static hv_status keep(const runner *r, stream_state *s, const char *data, size_t len)
{
	if (s->truncated)
		return HV_OK;
	size_t max = r->opts->max_output_bytes;
	size_t room = max - s->kept.len;
	size_t n = len;
	if (len > room) {
		n = room;
		size_t whole = hv_utf8_complete_prefix(data, n);
		if (whole < n && hv_utf8_sequence_length(data + whole, len - whole) > n - whole)
			n = whole;
		s->truncated = true;
	}
	return hv_buf_append(&s->kept, data, n);
}

static hv_status deliver(runner *r, stream_state *s, const char *data, size_t len)
{
	if (len == 0)
		return HV_OK;
	s->total += len;
	hv_status rc = keep(r, s, data, len);
	if (rc != HV_OK)
		return rc;
	if (r->on_chunk && r->abort_status == HV_OK) {
		hv_error_clear();
		hv_status cb = r->on_chunk(r->ctx, s->which, data, len);
		/* A positive status (HV_WARN, HV_DONE) is no failure: the run goes on (types.h). */
		if (cb < 0)
			r->abort_status = hv__callback_failed(cb, "the chunk callback");
	}
	return HV_OK;
}

static hv_status stream_eof(runner *r, stream_state *s)
{
	close_fd(&s->fd);
	hv_status rc = deliver(r, s, s->carry, s->carry_len); /* no more bytes can complete it */
	s->carry_len = 0;
	return rc;
}

/* One read (or, when draining, reads until the pipe is empty) from s. */
static hv_status stream_read(runner *r, stream_state *s, bool drain)
{
	while (s->fd >= 0) {
		memcpy(r->buf, s->carry, s->carry_len);
		ssize_t n = read(s->fd, r->buf + s->carry_len, READ_SIZE);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return HV_OK;
		if (n <= 0) /* EOF, or a read error we can only treat as one */
			return stream_eof(r, s);
		size_t have = s->carry_len + (size_t)n;
		size_t emit = hv_utf8_complete_prefix(r->buf, have);
		s->carry_len = have - emit;
		memcpy(s->carry, r->buf + emit, s->carry_len);
		hv_status rc = deliver(r, s, r->buf, emit);
		if (rc != HV_OK || !drain)
			return rc;
	}
	return HV_OK;
}

/* Writes what the child's stdin pipe takes now. SIGPIPE is blocked around the write, and one
 * our write raised is consumed before unblocking, so a child that closed its stdin gives EPIPE
 * here and never kills the caller — whatever the caller's SIGPIPE disposition. */
static void feed_stdin(runner *r)
{
	sigset_t pipe_set, old, pending;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	sigpending(&pending);
	bool was_pending = sigismember(&pending, SIGPIPE);
	size_t want = r->in_left < READ_SIZE ? r->in_left : READ_SIZE;
	ssize_t n = write(r->in_fd, r->in_data, want);
	int err = errno;
	if (n < 0 && err == EPIPE && !was_pending) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (n > 0) {
		r->in_data += n;
		r->in_left -= (size_t)n;
	} else if (!(n < 0 && (err == EAGAIN || err == EINTR))) {
		r->in_left = 0; /* EPIPE: the child does not want the rest */
		r->src_fd = -1; /* ... nor what is still to be read */
	}
	if (r->in_left == 0 && r->src_fd < 0)
		close_fd(&r->in_fd);
}

/* Reads the next piece of opts->stdin_fd, once the last one is in the pipe. EOF closes the
 * child's stdin. */
static hv_status read_source(runner *r)
{
	ssize_t n = read(r->src_fd, r->in_buf, READ_SIZE);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return HV_OK;
	if (n < 0)
		return hv_error_errno(HV_EIO, "standard input", errno);
	if (n == 0) {
		r->src_fd = -1;
		close_fd(&r->in_fd);
		return HV_OK;
	}
	r->in_data = r->in_buf;
	r->in_left = (size_t)n;
	return HV_OK;
}

/* ---- descendants (opts->end_descendants) ---------------------------------------------- */

static int cmp_pid(const void *a, const void *b)
{
	pid_t x = ((const proc_ent *)a)->pid, y = ((const proc_ent *)b)->pid;
	return (x > y) - (x < y);
}

static unsigned long proc_scans;

unsigned long hvr_proc_scans(void)
{
	return __atomic_load_n(&proc_scans, __ATOMIC_RELAXED);
}

/* Reads every process's pid, parent and state from /proc, sorted by pid. false when /proc
 * cannot be read (or memory runs out): then only the process group can be reached. */
static bool proc_scan(proc_list *pl)
{
	__atomic_fetch_add(&proc_scans, 1, __ATOMIC_RELAXED);
	pl->n = 0;
	DIR *d = opendir("/proc");
	if (!d)
		return false;
	bool ok = true;
	const struct dirent *e;
	/* cppcheck-suppress readdirCalled ; the stream is this call's own, no other thread uses it */
	while (ok && (e = readdir(d)) != NULL) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		char path[64], buf[256];
		snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
		if (hv_read_small(path, buf, sizeof(buf)) <= 0)
			continue; /* gone meanwhile */
		/* "pid (comm) state ppid ...": comm may hold anything, ')' included */
		const char *rp = strrchr(buf, ')');
		if (!rp || rp[1] != ' ' || !rp[2] || rp[3] != ' ')
			continue;
		char state = rp[2];
		char *pend;
		long ppid = strtol(rp + 4, &pend, 10);
		if (pend == rp + 4 || *pend != ' ')
			continue;
		if (pl->n == pl->cap) {
			size_t cap = pl->cap ? pl->cap * 2 : 256;
			proc_ent *v = realloc(pl->v, cap * sizeof(*v));
			if (!v) {
				ok = false;
				break;
			}
			pl->v = v;
			pl->cap = cap;
		}
		pl->v[pl->n++] = (proc_ent){.pid = (pid_t)pid, .ppid = (pid_t)ppid,
					    .zombie = state == 'Z' || state == 'X'};
	}
	closedir(d);
	if (ok && pl->n > 0)
		qsort(pl->v, pl->n, sizeof(*pl->v), cmp_pid);
	return ok;
}

static bool was_child_before(const runner *r, pid_t pid)
{
	for (size_t i = 0; i < r->n_before; i++)
		if (r->before[i] == pid)
			return true;
	return false;
}

/* The caller's children, from /proc/self/task/ID/children of each of its threads (a child
 * belongs to the thread that forked it, an orphan to one of the reaper's threads): what a
 * whole scan of /proc finds with ppid == self, in a few reads instead of one per process on
 * the machine. false when the kernel does not list children (CONFIG_PROC_CHILDREN). */
static bool own_children(pid_t **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return false;
	bool ok = true;
	size_t cap = 0;
	hv_buf text = {0};
	const struct dirent *de;
	/* cppcheck-suppress readdirCalled ; the stream is this call's own, no other thread uses it */
	while (ok && (de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/task/%.20s/children", de->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			/* No such file in this kernel (or the thread just ended): unknown, so the
			 * caller scans /proc as before. */
			ok = false;
			break;
		}
		hv_buf_truncate(&text, 0);
		char chunk[512];
		ssize_t got;
		bool full = false;
		while (!full && (got = read(fd, chunk, sizeof(chunk))) > 0)
			full = hv_buf_append(&text, chunk, (size_t)got) != HV_OK;
		close(fd);
		if (full || got < 0 || hv_buf_append(&text, "", 0) != HV_OK) {
			ok = false;
			break;
		}
		/* "PID PID ... " */
		for (char *p = text.data, *end; p && *p; p = end) {
			errno = 0;
			long pid = strtol(p, &end, 10);
			if (end == p)
				break;
			if (errno || pid <= 0) {
				ok = false;
				break;
			}
			if (*n == cap) {
				cap = cap ? cap * 2 : 8;
				pid_t *v = realloc(*out, cap * sizeof(*v));
				if (!v) {
					ok = false;
					break;
				}
				*out = v;
			}
			(*out)[(*n)++] = (pid_t)pid;
		}
	}
	hv_buf_free(&text);
	closedir(d);
	if (!ok) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return ok;
}

/* ---- harvest's own children (internal.h) ---- */

/* 0: a free slot. Read and written with atomics: a slot is claimed by a compare-and-swap. */
static pid_t own_kept[HV_OWN_CHILDREN_MAX];

void hv__own_child_add(pid_t pid)
{
	for (size_t i = 0; i < HV_OWN_CHILDREN_MAX; i++) {
		pid_t free_slot = 0;
		if (__atomic_compare_exchange_n(&own_kept[i], &free_slot, pid, false,
						__ATOMIC_RELEASE, __ATOMIC_RELAXED))
			return;
	}
}

void hv__own_child_remove(pid_t pid)
{
	for (size_t i = 0; i < HV_OWN_CHILDREN_MAX; i++) {
		pid_t was = pid;
		(void)__atomic_compare_exchange_n(&own_kept[i], &was, 0, false,
						  __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	}
}

static bool own_child(pid_t pid)
{
	for (size_t i = 0; i < HV_OWN_CHILDREN_MAX; i++)
		if (__atomic_load_n(&own_kept[i], __ATOMIC_ACQUIRE) == pid)
			return true;
	return false;
}

/* A child of the caller's that is the command's (or below it): neither one the caller had
 * before the run nor harvest's own. */
static bool commands_child(const runner *r, pid_t pid)
{
	return !was_child_before(r, pid) && !own_child(pid);
}

/* Whether the caller has no child but the leader, those it had before and harvest's own
 * (libmagic's spawner, started during the run by its first file): then nothing of the command
 * is left (a live descendant is a child of the caller, or below one, once the leader has
 * exited), and no orphan is waiting to be reaped. false when unknown. Only when this is false
 * is every process on the machine read from /proc (proc_scan): while the spawner was not
 * counted here, every `harvest run` that made a file paid for that scan at its end, three
 * system calls per process (0.6 ms for 67 processes on the project's VM). */
static bool nothing_left(const runner *r)
{
	pid_t *kids;
	size_t n;
	if (!own_children(&kids, &n))
		return false;
	bool none = true;
	for (size_t i = 0; i < n && none; i++)
		none = kids[i] == r->pid || !commands_child(r, kids[i]);
	free(kids);
	return none;
}

/* Marks the caller's descendants, except the children it had before the fork (and theirs)
 * and harvest's own (hv__own_child_add: libmagic's spawner, which execute.c may start at the
 * run's first change). A process whose parent is ours is ours: passes until nothing changes
 * (the depth of the tree, each pass n log n). */
static void mark_ours(const runner *r, proc_list *pl)
{
	for (size_t i = 0; i < pl->n; i++) {
		proc_ent *p = &pl->v[i];
		p->ours = p->ppid == r->self && commands_child(r, p->pid);
	}
	bool changed = true;
	while (changed) {
		changed = false;
		for (size_t i = 0; i < pl->n; i++) {
			proc_ent *p = &pl->v[i];
			if (p->ours || p->ppid == r->self || p->ppid <= 1)
				continue;
			proc_ent key = {.pid = p->ppid};
			const proc_ent *parent = bsearch(&key, pl->v, pl->n, sizeof(*pl->v), cmp_pid);
			if (parent && parent->ours)
				p->ours = changed = true;
		}
	}
}

/* Sends sig to every live descendant (the leader aside) found by a new scan; how many. */
static size_t signal_descendants(runner *r, int sig)
{
	if (!proc_scan(&r->procs))
		return 0;
	mark_ours(r, &r->procs);
	size_t n = 0;
	for (size_t i = 0; i < r->procs.n; i++) {
		const proc_ent *p = &r->procs.v[i];
		if (p->ours && !p->zombie && p->pid != r->pid) {
			kill(p->pid, sig);
			n++;
		}
	}
	return n;
}

static void signal_group(runner *r, int sig)
{
	kill(-r->pid, sig);
	if (!r->exited)
		kill(r->pid, sig); /* in case the leader left the group for another */
	if (r->opts->end_descendants)
		signal_descendants(r, sig);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {0, ms * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Once the command has exited and its pipes are closed: ends what it left behind (SIGTERM,
 * SIGKILL after the grace period; at once when the run was already being ended) and reaps
 * the orphans that reparented to the caller. The zombie leader is left for reap(). A process
 * SIGKILL cannot end (stuck in the kernel) is given up on GIVE_UP_MS after. */
static void end_leftovers(runner *r)
{
	if (!r->opts->end_descendants) {
		/* Survivors of SIGTERM that do not hold the pipes, while the zombie leader still
		 * reserves the group id. */
		if (r->kill_phase == 1)
			kill(-r->pid, SIGKILL);
		return;
	}
	int phase = r->kill_phase >= 1 ? 2 : 0; /* 0: nothing sent, 1: SIGTERM, 2: SIGKILL due */
	int64_t due = 0;
	for (;;) {
		if (r->exited && nothing_left(r))
			return;
		if (!proc_scan(&r->procs)) {
			if (phase > 0)
				kill(-r->pid, SIGKILL);
			return;
		}
		mark_ours(r, &r->procs);
		size_t alive = 0;
		for (size_t i = 0; i < r->procs.n; i++) {
			const proc_ent *p = &r->procs.v[i];
			if (!p->ours || p->pid == r->pid)
				continue;
			if (p->ppid == r->self)
				waitpid(p->pid, NULL, WNOHANG); /* an orphan: ours to reap */
			if (!p->zombie)
				alive++;
		}
		if (alive == 0)
			return;
		int64_t now = mono_ms();
		if (phase == 0) {
			signal_group(r, SIGTERM);
			signal_group(r, SIGCONT);
			phase = 1;
			due = now + HV_RUN_KILL_GRACE_MS;
		} else if (phase == 1 && now >= due) {
			phase = 2;
		}
		if (phase == 2) {
			phase = 3;
			due = now + GIVE_UP_MS;
		}
		if (phase == 3) {
			if (now >= due)
				return;
			signal_group(r, SIGKILL); /* again each time: it also reaches new forks */
		}
		sleep_ms(10);
	}
}

/* Starts ending the process group: sig now (SIGCONT so a stopped process receives it, as
 * timeout(1) does), SIGKILL after the grace period. */
static void start_kill_with(runner *r, int64_t now, int sig)
{
	if (r->kill_phase != 0)
		return;
	signal_group(r, sig);
	signal_group(r, SIGCONT);
	r->kill_phase = 1;
	r->next_kill = now + HV_RUN_KILL_GRACE_MS;
}

static void start_kill(runner *r, int64_t now)
{
	start_kill_with(r, now, SIGTERM);
}

static bool pipes_open(const runner *r)
{
	return r->out.fd >= 0 || r->err.fd >= 0;
}

static void leader_exited(runner *r, int64_t now)
{
	r->exited = true;
	close_fd(&r->pidfd);
	uint64_t linger = r->opts->linger_ms;
	r->linger_at = linger > (uint64_t)(NEVER - now) ? NEVER : now + (int64_t)linger;
	if (r->linger_at > r->deadline)
		r->linger_at = r->deadline;
}

/* Without a pidfd: has the leader exited? Leaves it a zombie (WNOWAIT). */
static bool leader_gone(const runner *r)
{
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
		return errno == ECHILD; /* someone else reaped it: nothing to wait for */
	return si.si_pid != 0;
}

/* The timed events: timeout, linger expiry, SIGKILL, giving up on escaped pipe holders. */
static hv_status timers(runner *r, int64_t now)
{
	if (!r->exited && r->kill_phase == 0 && now >= r->deadline) {
		r->timed_out = true;
		start_kill(r, now);
	}
	if (r->exited && r->kill_phase == 0 && pipes_open(r) && now >= r->linger_at) {
		r->lingered = true;
		start_kill(r, now);
	}
	if (r->kill_phase == 1 && now >= r->next_kill) {
		signal_group(r, SIGKILL);
		r->kill_phase = 2;
		r->next_kill = now + GIVE_UP_MS;
	}
	if (r->kill_phase == 2 && now >= r->next_kill) {
		/* Whatever still holds the pipes escaped the group: take what is buffered, stop. */
		r->kill_phase = 3;
		stream_state *ss[2] = {&r->out, &r->err};
		for (int i = 0; i < 2; i++) {
			if (ss[i]->fd < 0)
				continue;
			hv_status rc = stream_read(r, ss[i], true);
			if (rc != HV_OK)
				return rc;
			if (ss[i]->fd >= 0) {
				rc = stream_eof(r, ss[i]);
				if (rc != HV_OK)
					return rc;
			}
		}
		close_fd(&r->in_fd);
	}
	return HV_OK;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static hv_status run_loop(runner *r)
{
	while (!r->exited || pipes_open(r)) {
		int64_t now = mono_ms();
		if (!r->exited && r->pidfd < 0 && leader_gone(r))
			leader_exited(r, now);
		if (r->abort_status != HV_OK)
			start_kill(r, now);
		hv_status rc = timers(r, now);
		if (rc != HV_OK)
			return rc;
		if (r->exited && !pipes_open(r))
			break;

		int64_t wake = NEVER;
		if (!r->exited && r->kill_phase == 0)
			wake = min64(wake, r->deadline);
		if (r->exited && r->kill_phase == 0 && pipes_open(r))
			wake = min64(wake, r->linger_at);
		if (r->kill_phase == 1 || r->kill_phase == 2)
			wake = min64(wake, r->next_kill);
		if (!r->exited && r->pidfd < 0)
			wake = min64(wake, now + POLL_FALLBACK_MS);
		int timeout = -1;
		if (wake != NEVER)
			timeout = wake <= now ? 0 : (int)min64(wake - now, 1000000);

		struct pollfd pf[7];
		int n = 0, i_out = -1, i_err = -1, i_in = -1, i_pid = -1, i_cancel = -1, i_src = -1;
		int i_watch = -1;
		if (r->out.fd >= 0)
			pf[i_out = n++] = (struct pollfd){r->out.fd, POLLIN, 0};
		if (r->err.fd >= 0)
			pf[i_err = n++] = (struct pollfd){r->err.fd, POLLIN, 0};
		if (r->in_fd >= 0 && r->in_left > 0)
			pf[i_in = n++] = (struct pollfd){r->in_fd, POLLOUT, 0};
		else if (r->in_fd >= 0 && r->src_fd >= 0)
			pf[i_src = n++] = (struct pollfd){r->src_fd, POLLIN, 0};
		if (r->pidfd >= 0)
			pf[i_pid = n++] = (struct pollfd){r->pidfd, POLLIN, 0};
		if (r->cancel_fd >= 0 && !r->cancelled)
			pf[i_cancel = n++] = (struct pollfd){r->cancel_fd, POLLIN, 0};
		if (r->watch_fd >= 0)
			pf[i_watch = n++] = (struct pollfd){r->watch_fd, POLLIN, 0};
		int got = poll(pf, (nfds_t)n, timeout);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return hv_error_errno(HV_EIO, "poll", errno);
		}
		now = mono_ms();
		const short ready = POLLIN | POLLHUP | POLLERR;
		if (i_out >= 0 && (pf[i_out].revents & ready)) {
			rc = stream_read(r, &r->out, false);
			if (rc != HV_OK)
				return rc;
		}
		if (i_err >= 0 && (pf[i_err].revents & ready)) {
			rc = stream_read(r, &r->err, false);
			if (rc != HV_OK)
				return rc;
		}
		if (i_in >= 0 && pf[i_in].revents)
			feed_stdin(r);
		if (i_src >= 0 && (pf[i_src].revents & POLLNVAL))
			return hv_error_errno(HV_EIO, "standard input", EBADF);
		if (i_src >= 0 && pf[i_src].revents) {
			rc = read_source(r);
			if (rc != HV_OK)
				return rc;
		}
		if (i_pid >= 0 && (pf[i_pid].revents & ready))
			leader_exited(r, now);
		if (i_cancel >= 0 && (pf[i_cancel].revents & (ready | POLLNVAL))) {
			r->cancelled = true;
			/* The signal the caller caught, passed on (a Ctrl-C reaches the command as
			 * SIGINT: a Python program gets its KeyboardInterrupt); SIGTERM otherwise. */
			int sig = r->opts->cancel_signal ? *r->opts->cancel_signal : 0;
			start_kill_with(r, now, sig > 0 && sig < SIGRTMIN && sig != SIGKILL && sig != SIGSTOP
					       ? sig
					       : SIGTERM);
		}
		if (i_watch >= 0 && pf[i_watch].revents && !r->on_watch(r->watch_ctx))
			r->watch_fd = -1;
	}
	return HV_OK;
}

/* Waits for pid; its wait status, or -1 (errno set) when it cannot be had. */
static int reap(pid_t pid)
{
	int st = 0;
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	return st;
}

static hv_status finish_streams(runner *r, hv_run_result *out)
{
	stream_state *ss[2] = {&r->out, &r->err};
	for (int i = 0; i < 2; i++) {
		stream_state *s = ss[i];
		if (!s->kept.data && hv_buf_append(&s->kept, "", 0) != HV_OK)
			return HV_ENOMEM;
	}
	out->stdout_data = r->out.kept.data;
	out->stdout_len = r->out.kept.len;
	out->stdout_truncated = r->out.truncated;
	out->stdout_total = r->out.total;
	out->stderr_data = r->err.kept.data;
	out->stderr_len = r->err.kept.len;
	out->stderr_truncated = r->err.truncated;
	out->stderr_total = r->err.total;
	r->out.kept = (hv_buf){0};
	r->err.kept = (hv_buf){0};
	return HV_OK;
}

/* Makes the caller a child subreaper, and remembers the children it already has: they and
 * their descendants are not the command's. */
static hv_status become_subreaper(runner *r)
{
	int was = 0;
	if (prctl(PR_GET_CHILD_SUBREAPER, &was, 0, 0, 0) != 0)
		return hv_error_errno(HV_ECHILD, "PR_GET_CHILD_SUBREAPER", errno);
	if (!was && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
		return hv_error_errno(HV_ECHILD, "PR_SET_CHILD_SUBREAPER", errno);
	r->was_subreaper = was;
	/* No child at all (of any thread of ours, __WALL): nothing to list in /proc. */
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (waitid(P_ALL, 0, &si, WEXITED | WSTOPPED | WCONTINUED | WNOHANG | WNOWAIT | __WALL) != 0 &&
	    errno == ECHILD)
		return HV_OK;
	if (own_children(&r->before, &r->n_before))
		return HV_OK;
	if (!proc_scan(&r->procs))
		return HV_OK; /* no /proc: only the process group will be signalled */
	for (size_t i = 0; i < r->procs.n; i++) {
		if (r->procs.v[i].ppid != r->self)
			continue;
		pid_t *b = realloc(r->before, (r->n_before + 1) * sizeof(*b));
		if (!b)
			return hv_error_set(HV_ENOMEM, "out of memory");
		r->before = b;
		b[r->n_before++] = r->procs.v[i].pid;
	}
	return HV_OK;
}

static hv_status check_opts(const hv_run_opts *opts)
{
	if (!opts || !opts->argv || !opts->argv[0])
		return hv_error_set(HV_EUSAGE, "no command to run");
	if (opts->n_env && !opts->env)
		return hv_error_set(HV_EUSAGE, "env additions missing");
	for (size_t i = 0; i < opts->n_env; i++) {
		hv_status rc = hv_run_check_env(opts->env[i]);
		if (rc != HV_OK)
			return rc;
	}
	if (opts->stdin_len && !opts->stdin_data)
		return hv_error_set(HV_EUSAGE, "stdin length without data");
	if (opts->stdin_data && opts->stdin_fd >= 0)
		return hv_error_set(HV_EUSAGE, "stdin data and a stdin descriptor at once");
	return HV_OK;
}

/* Reports a command that could not be executed the way a shell would: a line on stderr. */
static hv_status spawn_failed(runner *r, hv_run_result *out, int err)
{
	const char *cmd = r->opts->argv[0];
	out->spawn_errno = err;
	out->exit_code = err == ENOENT ? 127 : 126;
	hv_buf msg = {0};
	hv_status rc;
	if (err == ENOENT && !strchr(cmd, '/'))
		rc = hv_buf_printf(&msg, "harvest: %s: command not found", cmd);
	else
		rc = hv_buf_printf(&msg, "harvest: %s: %s", cmd, strerror(err));
	if (rc == HV_OK)
		rc = hv_buf_append_char(&msg, '\n');
	if (rc == HV_OK)
		rc = deliver(r, &r->err, msg.data, msg.len);
	if (rc != HV_OK) {
		hv_buf_free(&msg);
		return rc;
	}
	msg.data[msg.len - 1] = '\0';
	out->message = msg.data;
	return HV_OK;
}

hv_status hv_run(const hv_run_opts *opts, hv_run_chunk_fn on_chunk, void *ctx,
		 hv_run_result *out)
{
	HV_NEED(out);
	memset(out, 0, sizeof(*out));
	HV_NEED(opts);
	return hv__run_watched(opts, on_chunk, ctx, out, -1, NULL, NULL);
}

hv_status hv__run_watched(const hv_run_opts *opts, hv_run_chunk_fn on_chunk, void *ctx,
			  hv_run_result *out, int watch_fd, bool (*on_watch)(void *),
			  void *watch_ctx)
{
	memset(out, 0, sizeof(*out));
	hv_status rc = check_opts(opts);
	if (rc != HV_OK)
		return rc;

	runner r = {.opts = opts, .on_chunk = on_chunk, .ctx = ctx, .pidfd = -1, .in_fd = -1,
		    .src_fd = -1, .cancel_fd = opts->cancel_fd, .deadline = NEVER,
		    .self = getpid(), .was_subreaper = -1, .watch_fd = on_watch ? watch_fd : -1,
		    .on_watch = on_watch, .watch_ctx = watch_ctx};
	r.out = (stream_state){.which = HV_STREAM_STDOUT, .fd = -1};
	r.err = (stream_state){.which = HV_STREAM_STDERR, .fd = -1};
	spawn_plan plan = {.dir_fd = -1, .in_fd = -1, .out_fd = -1, .err_fd = -1, .report_fd = -1};
	int report_rd = -1;
	int p[2];

	r.buf = malloc(READ_SIZE + 4);
	if (!r.buf) {
		rc = hv_error_set(HV_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = build_plan(&plan, opts)) != HV_OK)
		goto done;
	if (opts->cwd) {
		plan.dir_fd = above_stdio(open(opts->cwd, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
		if (plan.dir_fd < 0) {
			rc = hv_error_errno(HV_ENOTDIR, opts->cwd, errno);
			goto done;
		}
	}
	if (opts->stdin_data || opts->stdin_fd >= 0) {
		if (opts->stdin_fd >= 0 && !(r.in_buf = malloc(READ_SIZE))) {
			rc = hv_error_set(HV_ENOMEM, "out of memory");
			goto done;
		}
		if (make_pipe(p) != 0 || set_nonblock(p[1]) != 0) {
			rc = hv_error_errno(HV_ECHILD, "stdin pipe", errno);
			goto done;
		}
		plan.in_fd = p[0];
		r.in_fd = p[1];
		r.in_data = opts->stdin_data;
		r.in_left = opts->stdin_len;
		r.src_fd = opts->stdin_fd;
	} else {
		plan.in_fd = above_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC));
		if (plan.in_fd < 0) {
			rc = hv_error_errno(HV_ECHILD, "/dev/null", errno);
			goto done;
		}
	}
	if (make_pipe(p) != 0 || set_nonblock(p[0]) != 0) {
		rc = hv_error_errno(HV_ECHILD, "stdout pipe", errno);
		goto done;
	}
	r.out.fd = p[0];
	plan.out_fd = p[1];
	if (make_pipe(p) != 0 || set_nonblock(p[0]) != 0) {
		rc = hv_error_errno(HV_ECHILD, "stderr pipe", errno);
		goto done;
	}
	r.err.fd = p[0];
	plan.err_fd = p[1];
	if (make_pipe(p) != 0) {
		rc = hv_error_errno(HV_ECHILD, "pipe", errno);
		goto done;
	}
	report_rd = p[0];
	plan.report_fd = p[1];
	plan.parent = r.self;
	if (opts->end_descendants && (rc = become_subreaper(&r)) != HV_OK)
		goto done;

	if (opts->timeout_ms)
		r.deadline = mono_ms() + (int64_t)(opts->timeout_ms < (uint64_t)NEVER / 2
						   ? opts->timeout_ms : (uint64_t)NEVER / 2);
	out->started_at_ns = hv_clock_ns(CLOCK_REALTIME);
	int64_t start_ns = hv_clock_ns(CLOCK_MONOTONIC);

	sigset_t all, old_mask;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old_mask);
	/* Cancelled before it began (a SIGINT while the workspace was read): not started, as
	 * timeout(1) or a shell would not start it. Signals are blocked from here to the spawn,
	 * so one arriving later is seen once the child runs, and ends it. */
	struct pollfd cancel = {r.cancel_fd, POLLIN, 0};
	if (r.cancel_fd >= 0 && poll(&cancel, 1, 0) > 0) {
		pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
		rc = hv_error_set(HV_ECHILD, "%s: not started: the run was cancelled before it began",
				  opts->argv[0]);
		goto done;
	}
	r.pid = spawn_child(&plan, (char *const *)opts->argv);
	int fork_err = errno;
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	if (r.pid < 0) {
		r.pid = 0;
		rc = hv_error_errno(HV_ECHILD, opts->argv[0], fork_err);
		goto done;
	}
	out->pid = r.pid;
	setpgid(r.pid, r.pid); /* also here, so no signal to the group can precede the child's */
	close_fd(&plan.report_fd);
	close_fd(&plan.in_fd);
	close_fd(&plan.out_fd);
	close_fd(&plan.err_fd);
	close_fd(&plan.dir_fd);

	/* exec closes the report pipe: EOF means the command is running. */
	spawn_report report;
	ssize_t got;
	do
		got = read(report_rd, &report, sizeof(report));
	while (got < 0 && errno == EINTR);
	close_fd(&report_rd);
	if (got == (ssize_t)sizeof(report)) {
		reap(r.pid);
		close_fd(&r.out.fd);
		close_fd(&r.err.fd);
		close_fd(&r.in_fd);
		if (report.stage == 2)
			rc = spawn_failed(&r, out, report.err);
		else
			rc = hv_error_errno(HV_ECHILD, report.stage == 1 ? opts->cwd : "dup2",
					    report.err);
		goto ended;
	}

#ifdef SYS_pidfd_open
	r.pidfd = above_stdio((int)syscall(SYS_pidfd_open, r.pid, 0)); /* always close-on-exec */
#endif
	if (r.in_fd >= 0 && r.in_left == 0 && r.src_fd < 0)
		close_fd(&r.in_fd); /* empty stdin data: EOF at once */

	rc = run_loop(&r);
	if (rc != HV_OK) {
		/* A failure of ours mid-run: the command must not outlive it. */
		signal_group(&r, SIGKILL);
		r.kill_phase = 2;
	}
	/* When we ended the run and the leader and the pipes are gone before the SIGKILL was due,
	 * what is left (processes that survive SIGTERM without holding the pipes) gets it now. */
	end_leftovers(&r);
	int st = reap(r.pid);
	if (st < 0) {
		if (rc == HV_OK)
			rc = hv_error_set(HV_ECHILD, "%s: exit status lost (SIGCHLD ignored?): %s",
					  opts->argv[0], strerror(errno));
		out->exit_code = 125;
	} else if (WIFSIGNALED(st)) {
		out->term_signal = WTERMSIG(st);
		out->exit_code = 128 + WTERMSIG(st);
	} else {
		out->exit_code = WEXITSTATUS(st);
	}
	if (r.timed_out)
		out->exit_code = 124;
	out->timed_out = r.timed_out;
	out->cancelled = r.cancelled;
	out->lingered = r.lingered;

ended:
	if (rc == HV_OK)
		rc = r.abort_status;
	out->ended_at_ns = hv_clock_ns(CLOCK_REALTIME);
	out->duration_ms = (uint64_t)((hv_clock_ns(CLOCK_MONOTONIC) - start_ns) / 1000000);
	{
		hv_status frc = finish_streams(&r, out);
		if (rc == HV_OK && frc != HV_OK)
			rc = hv_error_set(frc, "out of memory");
	}
done:
	close_fd(&r.out.fd);
	close_fd(&r.err.fd);
	close_fd(&r.in_fd);
	close_fd(&r.pidfd);
	close_fd(&report_rd);
	close_fd(&plan.report_fd);
	close_fd(&plan.in_fd);
	close_fd(&plan.out_fd);
	close_fd(&plan.err_fd);
	close_fd(&plan.dir_fd);
	hv_buf_free(&r.out.kept);
	hv_buf_free(&r.err.kept);
	plan_free(&plan);
	free(r.buf);
	free(r.in_buf);
	free(r.before);
	free(r.procs.v);
	if (r.was_subreaper == 0)
		prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
	return rc;
}
