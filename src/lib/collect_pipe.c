/* The bounded read-ahead pipeline of a collect: its window of jobs and its worker threads. */
#include "collect_internal.h"
#include "sha256.h"
#include "internal.h"
#include "mime_internal.h"
#include "test_hook.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A memo entry (hvm_memo) that is not an answer but a failure: this byte, then the warning of
 * the file whose detection failed. */
#define MEMO_FAILED '\x01'

/* The smallest first read: a file of the kernel's (/proc/sys) whose size says 0 gives all its
 * bytes to the first read, and nothing to the next, which comes at an offset it does not
 * serve; asked for one byte, "4\t2\t30\n" would be read as "4". */
#define READ_FIRST_MIN 4096u

/* Reads all of fd (a regular file of expected size) into a new buffer, at most max bytes:
 * HV_OK, HV_WARN when it holds more than max, HV_EIO on a read error. */
static hv_status read_all(int fd, uint64_t expect, uint64_t max, const char *path,
			  unsigned char **out, size_t *len)
{
	if (max > SIZE_MAX / 4)
		max = SIZE_MAX / 4; /* more than memory holds; and max + 1 never wraps */
	uint64_t want = (expect < max ? expect : max) + 1;
	if (want < READ_FIRST_MIN)
		want = max < READ_FIRST_MIN ? max + 1 : READ_FIRST_MIN;
	size_t cap = (size_t)want;
	unsigned char *buf = malloc(cap);
	if (!buf)
		return hv_error_set(HV_ENOMEM, "out of memory");
	size_t n = 0;
	for (;;) {
		if (n == cap) {
			if (n > max) {
				free(buf);
				return HV_WARN;
			}
			size_t ncap = cap * 2 > max + 1 ? (size_t)max + 1 : cap * 2;
			unsigned char *p = realloc(buf, ncap);
			if (!p) {
				free(buf);
				return hv_error_set(HV_ENOMEM, "out of memory");
			}
			buf = p;
			cap = ncap;
		}
		ssize_t got = read(fd, buf + n, cap - n);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			free(buf);
			return hv_error_errno(HV_EIO, path, err);
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	if (n > max) {
		free(buf);
		return HV_WARN;
	}
	/* A small file read into the first read's page keeps only its bytes: a collection
	 * holding 100,000 contents in memory holds their sizes, not 100,000 pages. */
	if (cap - n > 64) {
		unsigned char *p = realloc(buf, n + 1);
		if (p)
			buf = p;
	}
	*out = buf;
	*len = n;
	return HV_OK;
}

/* The pieces a file is read in when it goes to the spool. */
#define SPOOL_PIECE (256u << 10)

/* A spooled read: what read_to_spool() found. */
struct spooled {
	uint64_t off, len;  /* where the content is in the spool, and its length */
	unsigned char *head; /* its first bytes (up to head_max): what libmagic looks at */
	size_t head_len;
};

/* Copies the n bytes at from to at, within the spool (a region that grew too small). */
static hv_status spool_move(hv_content_spool *s, uint64_t from, uint64_t to, uint64_t n,
			    unsigned char *piece)
{
	for (uint64_t done = 0; done < n;) {
		size_t k = n - done < SPOOL_PIECE ? (size_t)(n - done) : SPOOL_PIECE;
		int rc = hvc_spool_read(s, from + done, piece, k);
		if (rc == HV_OK)
			rc = hvc_spool_write(s, to + done, piece, k);
		if (rc != HV_OK)
			return rc;
		done += k;
	}
	return HV_OK;
}

/* Reads all of fd (a regular file of expected size) into a region of the spool, at most max
 * bytes, in pieces: the content is never whole in memory. Keeps its first head_max bytes in
 * out->head and its SHA-256 in sha. HV_OK, HV_WARN when it holds more than max, HV_EIO on a
 * read or spool error, HV_ENOMEM. */
static hv_status read_to_spool(hv_content_spool *s, int fd, uint64_t expect, uint64_t max,
			       size_t head_max, const char *path, struct spooled *out, char sha[65])
{
	memset(out, 0, sizeof(*out));
	uint64_t room = expect < max ? expect : max;
	out->off = hvc_spool_reserve(s, room);
	size_t head_cap = room < head_max ? (size_t)room : head_max;
	unsigned char *piece = malloc(SPOOL_PIECE);
	out->head = malloc(head_cap ? head_cap : 1);
	if (!piece || !out->head) {
		free(piece);
		free(out->head);
		out->head = NULL;
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	hv__sha256 digest;
	hv__sha256_init(&digest);
	int rc = HV_OK;
	while (rc == HV_OK) {
		ssize_t got = read(fd, piece, SPOOL_PIECE);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = hv_error_errno(HV_EIO, path, errno);
			break;
		}
		if (got == 0)
			break;
		size_t n = (size_t)got;
		if (out->len + n > max) {
			rc = HV_WARN;
			break;
		}
		if (out->len + n > room) {
			/* It grew since its fstat: a region twice as large (at most max), the
			 * bytes so far moved there. */
			uint64_t grown = room > max / 2 ? max : room * 2;
			if (grown < out->len + n)
				grown = out->len + n;
			uint64_t to = hvc_spool_reserve(s, grown);
			rc = spool_move(s, out->off, to, out->len, piece);
			if (rc != HV_OK)
				break;
			out->off = to;
			room = grown;
			/* (the piece was overwritten by the move: read it again) */
			if (lseek(fd, (off_t)out->len, SEEK_SET) < 0) {
				rc = hv_error_errno(HV_EIO, path, errno);
				break;
			}
			continue;
		}
		rc = hvc_spool_write(s, out->off + out->len, piece, n);
		if (rc != HV_OK)
			break;
		if (out->head_len < head_max) {
			size_t k = head_max - out->head_len < n ? head_max - out->head_len : n;
			if (out->head_len + k > head_cap) {
				size_t cap = head_cap * 2 > head_max ? head_max : head_cap * 2;
				if (cap < out->head_len + k)
					cap = out->head_len + k;
				unsigned char *h = realloc(out->head, cap);
				if (!h) {
					rc = hv_error_set(HV_ENOMEM, "out of memory");
					break;
				}
				out->head = h;
				head_cap = cap;
			}
			memcpy(out->head + out->head_len, piece, k);
			out->head_len += k;
		}
		hv__sha256_update(&digest, piece, n);
		out->len += n;
	}
	if (rc == HV_OK) {
		unsigned char md[32];
		hv__sha256_final(&digest, md);
		hv__sha256_to_hex(md, sha);
	}
	free(piece);
	if (rc != HV_OK) {
		free(out->head);
		out->head = NULL;
	}
	return rc;
}

/* ---- The read-ahead pipeline ----------------------------------------------------------
 *
 * Reading a file, its SHA-256 and above all its detection (libmagic takes about a millisecond
 * a file) run on worker threads, a window of files ahead of the collect loop. The loop itself
 * does everything that depends on order or on the walker and the store (one thread each): it
 * opens each file through the walker's directory descriptors, asks the MIME cache, and
 * finishes the files in walk order, applying the limits as it goes. So the result (its order,
 * the limits, every skip reason) is the one a single thread would give; only work on files
 * that a limit then skips can be wasted, at most a window of it. The loop works on queued
 * files itself rather than wait, so a collect of one file starts no thread; workers start
 * when two files wait, once the collect has queued enough work to pay for them
 * (pipe_wants_thread). The window holds at most HVC_PIPE_SLOTS files and PIPE_BYTES of their
 * sizes (always at least one file), which bounds the memory read ahead. */
#define PIPE_BYTES (16ull << 20)
#define PIPE_MIN_FDS_FOR_WORKERS 16

/* The next queued job, claimed; NULL if none. Under mu. */
static struct hvc_job *pipe_claim(struct hvc_pipe *p)
{
	while (p->next_claim < p->tail) {
		struct hvc_job *j = &p->slots[p->next_claim++ % HVC_PIPE_SLOTS];
		if (j->state == HVC_JOB_QUEUED) {
			j->state = HVC_JOB_CLAIMED;
			return j;
		}
	}
	return NULL;
}

/* Answers j from the memo of this collect's detections when it holds j's bytes; false when it
 * does not. */
static bool job_from_memo(struct hvc_job *j, hvm_memo *memo)
{
	j->raw = hvm_memo_get(memo, j->sha);
	if (!j->raw)
		return false;
	if (j->raw[0] != MEMO_FAILED) {
		j->detected = true; /* the same bytes, detected earlier */
		return true;
	}
	/* The same bytes killed or outran a worker earlier in this collect: the same answer and
	 * a warning, without another 10 s wait. */
	char *first = j->raw;
	j->raw = strdup("application/octet-stream");
	if (asprintf(&j->warning, "%s: the same bytes as %s", j->path, first + 1) < 0)
		j->warning = NULL;
	free(first);
	if (!j->raw || !j->warning)
		j->outcome = HVC_READ_NOMEM;
	return true;
}

/* Reads a claimed job's file: content and digest, and libmagic's answer from the memo. True
 * when libmagic must still look at it: neither the cache nor the memo gave an answer, and the
 * content does not show the racy file unchanged. Runs on any thread; touches only j. */
static bool job_load(struct hvc_job *j, const struct hvc_pipe *p, const hv_magic *magic)
{
	const hv_collect_opts *o = p->o;
	struct spooled sp = {0};
	int rc;
	hv__test_hook_call(HV__HOOK_COLLECT_BEFORE_READ, j->path);
	bool to_memory = !p->spool || hvc_spool_failed(p->spool);
	if (!to_memory) {
		rc = read_to_spool(p->spool, j->fd, j->fs.size, o->max_file_bytes,
				   hv_magic_bytes_max(magic), j->path, &sp, j->sha);
		if (rc == HV_OK) {
			/* Only the head stays in memory, and only until it is detected. */
			j->buf = sp.head;
			j->len = sp.head_len;
			j->spooled = true;
			j->spool_off = sp.off;
			j->spool_len = sp.len;
		} else if (rc == HV_EIO && hvc_spool_failed(p->spool)) {
			/* The spool is full (or failed): this file and the rest are read into
			 * memory, as without a spool, rather than lost (the collect warns once). */
			to_memory = lseek(j->fd, 0, SEEK_SET) == 0;
			if (!to_memory)
				rc = hv_error_errno(HV_EIO, j->path, errno);
		}
	}
	if (to_memory)
		rc = read_all(j->fd, j->fs.size, o->max_file_bytes, j->path, &j->buf, &j->len);
	if (rc == HV_WARN) {
		j->outcome = HVC_READ_TOO_LARGE;
		return false;
	}
	if (rc == HV_ENOMEM) {
		j->outcome = HVC_READ_NOMEM;
		return false;
	}
	if (rc != HV_OK) {
		j->outcome = HVC_READ_ERROR;
		j->error = strdup(hv_error_last());
		return false;
	}
	if (!j->spooled)
		hv__sha256_hex(j->buf, j->len, j->sha);
	j->outcome = HVC_READ_OK;
	if (j->racy && strcmp(j->sha, j->compare_sha) == 0) {
		j->outcome = HVC_READ_SAME;
		return false;
	}
	if (j->raw)
		return false;
	return !job_from_memo(j, p->memo);
}

/* libmagic's outcome for j: its status rc, its answer t and the message err of a status that
 * is not HV_OK (both malloc'd or NULL, and taken). */
static void job_detected(struct hvc_job *j, hvm_memo *memo, hv_status rc, char *t, char *err)
{
	if (rc == HV_OK) {
		free(err);
		if (t)
			hvm_memo_put(memo, j->sha, t);
		j->raw = t;
		j->detected = true;
		if (!j->raw)
			j->outcome = HVC_READ_NOMEM;
	} else if (rc == HV_WARN && t) {
		/* The worker died or hung on it: the file is still an artifact, typed octet-stream
		 * (not refined by its name) with a warning. That answer is never cached; within
		 * this collect the same bytes get it again at once (a thousand copies of a file
		 * that outruns the time limit would otherwise cost 10 s each). */
		j->raw = t;
		j->warning = err;
		char *failed = NULL;
		if (j->warning && asprintf(&failed, "%c%s", MEMO_FAILED, j->warning) >= 0) {
			hvm_memo_put(memo, j->sha, failed);
			free(failed);
		}
		if (!j->raw || !j->warning)
			j->outcome = HVC_READ_NOMEM;
	} else {
		free(t);
		j->error = err;
	}
}

/* After the read (and the detection): the head of a spooled content dropped, the file closed. */
static void job_end(struct hvc_job *j)
{
	if (j->outcome == HVC_READ_OK && !j->raw && !j->error)
		j->outcome = HVC_READ_NOMEM; /* a strdup failed */
	if (j->spooled) {
		free(j->buf); /* the head: detected now */
		j->buf = NULL;
		j->len = j->spool_len;
	}
	close(j->fd);
	j->fd = -1;
}

/* The most jobs a thread claims at once: their detections go to its libmagic worker in one
 * round trip (hvm_magic_buffers) where their bytes are small enough. */
#define PIPE_BATCH 8

static atomic_ulong copies_alone;

unsigned long hvc_copies_detected_alone(void)
{
	return atomic_load(&copies_alone);
}

/* Reads the n claimed jobs js and detects those that need it, together. A job with the same
 * bytes as an earlier one of the batch waits for that one's answer, as it would have found it
 * in the memo. Runs on any thread; touches only the jobs (and the memo). */
static void jobs_read(struct hvc_job **js, size_t n, const struct hvc_pipe *p, hv_magic *magic)
{
	const void *bufs[PIPE_BATCH];
	size_t lens[PIPE_BATCH], at[PIPE_BATCH];
	int fds[PIPE_BATCH];
	const char *paths[PIPE_BATCH];
	char *types[PIPE_BATCH], *errs[PIPE_BATCH];
	hv_status rcs[PIPE_BATCH];
	bool later[PIPE_BATCH] = {false};
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		struct hvc_job *j = js[i];
		if (!job_load(j, p, magic))
			continue;
		if (!magic) {
			/* The loop's, when no detector could be had (said once by the collect) */
			j->raw = strdup("application/octet-stream");
			j->untyped = true;
			if (!j->raw)
				j->outcome = HVC_READ_NOMEM;
			continue;
		}
		for (size_t e = 0; e < k && !later[i]; e++)
			later[i] = strcmp(js[at[e]]->sha, j->sha) == 0;
		if (later[i])
			continue;
		bufs[k] = j->buf;
		lens[k] = j->len;
		fds[k] = j->fd;
		paths[k] = j->path;
		at[k++] = i;
	}
	if (k > 0)
		hvm_magic_buffers(magic, k, bufs, lens, fds, paths, types, rcs, errs);
	for (size_t e = 0; e < k; e++)
		job_detected(js[at[e]], p->memo, rcs[e], types[e], errs[e]);
	for (size_t i = 0; i < n; i++) {
		struct hvc_job *j = js[i];
		/* The same bytes as one detected above: its answer (a failure that left none in the
		 * memo is asked again for this file alone). */
		if (later[i] && !job_from_memo(j, p->memo)) {
			atomic_fetch_add(&copies_alone, 1);
			const void *buf = j->buf;
			const char *path = j->path;
			hvm_magic_buffers(magic, 1, &buf, &j->len, &j->fd, &path, types, rcs, errs);
			job_detected(j, p->memo, rcs[0], types[0], errs[0]);
		}
		job_end(j);
	}
}

/* With mu held: reads the next queued jobs, up to PIPE_BATCH of them (mu released meanwhile),
 * or, when there is none, waits on idle. */
static void pipe_step(struct hvc_pipe *p, hv_magic *magic, pthread_cond_t *idle)
{
	struct hvc_job *js[PIPE_BATCH];
	size_t n = 0;
	while (n < PIPE_BATCH && (js[n] = pipe_claim(p)) != NULL)
		n++;
	if (n == 0) {
		pthread_cond_wait(idle, &p->mu);
		return;
	}
	pthread_mutex_unlock(&p->mu);
	jobs_read(js, n, p, magic);
	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < n; i++) {
		p->open_fds--; /* job_end closed it */
		js[i]->state = HVC_JOB_DONE;
	}
	pthread_cond_signal(&p->done_cv); /* the loop may be waiting for one of these */
}

/* Under mu: whether the job needs no more work. */
static bool job_finished(const struct hvc_job *j)
{
	return j->state == HVC_JOB_READY || j->state == HVC_JOB_DONE;
}

static void *pipe_worker(void *arg)
{
	struct hvc_pipe *p = arg;
	hv_magic *magic = NULL;
	if (hv_magic_open(&magic, NULL, 0) != HV_OK)
		return NULL; /* the loop does the work itself */
	pthread_mutex_lock(&p->mu);
	while (!p->stop)
		pipe_step(p, magic, &p->work_cv);
	pthread_mutex_unlock(&p->mu);
	hv_magic_close(magic);
	return NULL;
}

void hvc_job_clear(struct hvc_job *j)
{
	if (j->fd >= 0)
		close(j->fd);
	free(j->path);
	free(j->error);
	free(j->warning);
	free(j->raw);
	free(j->buf);
	memset(j, 0, sizeof(*j));
	j->fd = -1;
}

/* How many files the read-ahead window may hold open, of avail free descriptors. Each queued
 * file keeps its descriptor until it is read, and only the loop and the workers read them: if
 * the window could take the descriptors the walker needs, the loop would wait in the walker
 * for descriptors that only its own reading gives back. So the window takes a quarter of what
 * is free beyond the walker's own (the walker's directory cache, libmagic and SQLite compete
 * for the rest), at most HVC_PIPE_SLOTS; with none, the loop reads each file itself before it
 * walks on. */
int hvc_fd_budget(int avail)
{
	int spare = avail - HVC_WALK_FDS;
	if (spare <= 0)
		return 0;
	return spare / 4 < HVC_PIPE_SLOTS ? spare / 4 : HVC_PIPE_SLOTS;
}

/* max_fds: how many files the window may hold open (see hvc_fd_budget()). */
void hvc_pipe_init(struct hvc_pipe *p, const hv_collect_opts *o, int max_fds)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	p->o = o;
	p->memo = hvm_memo_new();
	long cpus = o->threads > 0 ? o->threads : hv_default_threads();
	p->max_threads = cpus > 1 ? (int)(cpus - 1) : 0; /* the loop is one more */
	if (p->max_threads > HVC_PIPE_MAX_THREADS)
		p->max_threads = HVC_PIPE_MAX_THREADS;
	for (size_t i = 0; i < HVC_PIPE_SLOTS; i++)
		p->slots[i].fd = -1;
	p->max_fds = max_fds;
	/* A worker's first act is to start its libmagic detector, which takes descriptors of its
	 * own (a socket, two while it is made, a memfd per large file): with so few to spare,
	 * the loop reads every file itself. */
	if (max_fds < PIPE_MIN_FDS_FOR_WORKERS)
		p->max_threads = 0;
}

/* Stops the workers and drops every job not finished. */
void hvc_pipe_destroy(struct hvc_pipe *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	for (; p->head < p->tail; p->head++)
		hvc_job_clear(&p->slots[p->head % HVC_PIPE_SLOTS]);
	pthread_cond_destroy(&p->done_cv);
	pthread_cond_destroy(&p->work_cv);
	pthread_mutex_destroy(&p->mu);
	hvm_memo_free(p->memo);
}

/* The job at the head, once it needs no more work (wait: work on queued jobs meanwhile, or
 * sleep until a worker is done); NULL when the window is empty or, without wait, when the
 * head is not done yet. */
struct hvc_job *hvc_pipe_head(struct hvc_pipe *p, hv_magic *magic, bool wait)
{
	pthread_mutex_lock(&p->mu);
	struct hvc_job *h = p->head < p->tail ? &p->slots[p->head % HVC_PIPE_SLOTS] : NULL;
	while (h && wait && !job_finished(h))
		pipe_step(p, magic, &p->done_cv);
	if (h && !job_finished(h))
		h = NULL;
	pthread_mutex_unlock(&p->mu);
	return h;
}

/* The next free slot at the tail (the caller has made room). */
struct hvc_job *hvc_pipe_slot(struct hvc_pipe *p)
{
	return &p->slots[p->tail % HVC_PIPE_SLOTS];
}

/* Whether a worker thread pays for itself yet. A thread's first file costs it a libmagic
 * detector of its own: a process forked and a database whose pages that process touches for
 * the first time, several milliseconds before its first answer. A collect of a handful of
 * files (a run that wrote ten plots) is done by the loop alone sooner than by two threads;
 * from a few dozen files, or megabytes to read and hash, on, the second thread wins. Under
 * mu. */
#define PIPE_FILES_FOR_THREADS 16
#define PIPE_BYTES_FOR_THREADS (4ull << 20)
static bool pipe_wants_thread(const struct hvc_pipe *p)
{
	return p->n_threads > 0 || p->queued_files >= PIPE_FILES_FOR_THREADS ||
	       p->queued_bytes >= PIPE_BYTES_FOR_THREADS;
}

/* Adds the job filled in at hvc_pipe_slot() to the window. */
void hvc_pipe_push(struct hvc_pipe *p, bool queued)
{
	pthread_mutex_lock(&p->mu);
	struct hvc_job *j = &p->slots[p->tail % HVC_PIPE_SLOTS];
	j->state = queued ? HVC_JOB_QUEUED : HVC_JOB_READY;
	p->tail++;
	if (queued) {
		p->window_bytes += j->fs.size;
		p->open_fds++;
		uint64_t waiting = 0;
		for (uint64_t i = p->next_claim; i < p->tail && waiting < 2; i++)
			waiting += p->slots[i % HVC_PIPE_SLOTS].state == HVC_JOB_QUEUED;
		p->queued_files++;
		p->queued_bytes += j->fs.size;
		if (waiting >= 2 && p->n_threads < p->max_threads && pipe_wants_thread(p) &&
		    pthread_create(&p->threads[p->n_threads], NULL, pipe_worker, p) == 0)
			p->n_threads++;
		pthread_cond_signal(&p->work_cv);
	}
	pthread_mutex_unlock(&p->mu);
}

/* How many descriptors the window's queued files hold. */
int hvc_pipe_open_fds(struct hvc_pipe *p)
{
	pthread_mutex_lock(&p->mu);
	int n = p->open_fds;
	pthread_mutex_unlock(&p->mu);
	return n;
}

/* Whether the window has no room for one more file of size bytes: no slot, too many bytes
 * read ahead, or (for a file to be opened) its descriptors all taken. */
bool hvc_pipe_full(struct hvc_pipe *p, uint64_t size, bool opens)
{
	uint64_t n = p->tail - p->head;
	if (n == HVC_PIPE_SLOTS || (n > 0 && p->window_bytes + size > PIPE_BYTES))
		return true;
	if (!opens)
		return false;
	int fds = hvc_pipe_open_fds(p);
	return fds > 0 && fds >= p->max_fds;
}

