/* File commands: copy a file out (cat), write one atomically (put), remove a file or a tree
 * (rm). See include/harvest/files.h for the guarantees; the comments here say how.
 *
 * Paths given by the caller are resolved by the kernel in one open(2) (the parent directory
 * for put and rm, the file itself for cat), so a symlink in the part of the path that exists
 * is followed as cat, mkdir -p and rm follow it. Everything harvest does after that is
 * relative to the descriptor it got, one component at a time with O_NOFOLLOW, so a component
 * swapped for a symlink mid-way is never followed. */
#include "harvest/files.h"
#include "harvest/walk.h"
#include "fdio.h"
#include "internal.h"
#include "temp_name.h"
#include "test_hook.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The copy buffer: big enough that syscalls cost little, small enough to be no concern. */
#define COPY_BUF (256 * 1024)

static bool is_missing(int e)
{
	return e == ENOENT || e == ENOTDIR;
}

/* read(2) that retries EINTR and waits out EAGAIN; returns what read returns. */
static ssize_t read_some(int fd, void *buf, size_t cap)
{
	for (;;) {
		ssize_t n = read(fd, buf, cap);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if ((errno == EAGAIN || errno == EWOULDBLOCK) && hv_fd_wait(fd, POLLIN) == 0)
			continue;
		return -1;
	}
}

/* ---- cat ------------------------------------------------------------------------------------ */

/* "path: not a regular file (fifo)" and friends: the type as the walker names it. */
static hv_status refuse_type(const char *path, mode_t mode)
{
	if (S_ISDIR(mode))
		return hv_error_errno(HV_EIO, path, EISDIR);
	return hv_error_set(HV_EIO, "%s: not a regular file (%s)", path,
			    hv_ftype_name(hv_ftype_from_mode(mode)));
}

hv_status hv_file_copy_to_fd(const char *path, int out_fd, const char *out_name)
{
	HV_NEED(path);
	if (!out_name)
		out_name = "output";
	/* A closed output: said as such, before the file opened below could take its number (and
	 * be taken for its own output). */
	if (fcntl(out_fd, F_GETFL) < 0)
		return hv_error_errno(HV_EIO, out_name, errno);
	/* O_NONBLOCK: opening a FIFO for reading must not wait for a writer; O_NOCTTY: a terminal
	 * must not become our controlling one. What was opened is checked before any read. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		struct stat sst;
		/* A UNIX socket cannot be opened (ENXIO): say what it is, as for a FIFO. */
		if (e == ENXIO && stat(path, &sst) == 0 && S_ISSOCK(sst.st_mode))
			return refuse_type(path, sst.st_mode);
		return hv_error_errno(is_missing(e) ? HV_ENOTDIR : HV_EIO, path, e);
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return hv_error_errno(HV_EIO, path, e);
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return refuse_type(path, st.st_mode);
	}
	/* `harvest cat f >> f` would read its own output until the disk is full. An empty f
	 * (`cat f > f` truncated it) has nothing to copy and ends at once, as GNU cat lets it. */
	struct stat ost;
	if (st.st_size > 0 && fstat(out_fd, &ost) == 0 && S_ISREG(ost.st_mode) &&
	    ost.st_dev == st.st_dev && ost.st_ino == st.st_ino) {
		close(fd);
		return hv_error_set(HV_EIO, "%s: input file is output file", path);
	}
	/* A regular file: back to blocking reads, which some file systems (FUSE, NFS) honour. */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

	char *buf = malloc(COPY_BUF);
	if (!buf) {
		close(fd);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	int rc = HV_OK;
	for (;;) {
		ssize_t n = read_some(fd, buf, COPY_BUF);
		if (n == 0)
			break;
		if (n < 0) {
			rc = hv_error_errno(HV_EIO, path, errno);
			break;
		}
		if (hv_write_all(out_fd, buf, (size_t)n) != 0) {
			rc = hv_error_errno(HV_EIO, out_name, errno);
			break;
		}
	}
	free(buf);
	close(fd);
	return rc;
}

/* ---- put ------------------------------------------------------------------------------------ */

void hv_file_write_opts_init(hv_file_write_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->mode = -1;
	opts->parents = true;
	opts->sync = true;
}

/* The last component of path (after trailing slashes were ruled out) and the length of the
 * directory part before it (0: none, the current directory; the root keeps its '/'). */
static const char *split_last(const char *path, size_t *dir_len)
{
	const char *slash = strrchr(path, '/');
	if (!slash) {
		*dir_len = 0;
		return path;
	}
	size_t d = (size_t)(slash - path);
	while (d > 0 && path[d - 1] == '/')
		d--;
	*dir_len = d == 0 ? 1 : d; /* "/x": the directory is "/" */
	return slash + 1;
}

static bool is_dot_or_dotdot(const char *name)
{
	return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* Opens the directory dir (len bytes of a path; 0: the current directory), following
 * symlinks as open(2) does: the part of the path the caller gave that exists. */
static int open_dir_path(const char *dir, size_t len)
{
	if (len == 0)
		return open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	char *d = malloc(len + 1);
	if (!d) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(d, dir, len);
	d[len] = '\0';
	int fd = open(d, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int e = errno;
	free(d);
	errno = e;
	return fd;
}

/* Opens the parent directory of a put's destination, creating what is missing: the longest
 * prefix that exists is opened in one call (symlinks in it followed, as mkdir -p follows
 * them); each directory after it is made with mkdirat and opened with O_NOFOLLOW, so one
 * swapped for a symlink between the two calls is refused instead of followed. Returns the
 * descriptor (O_PATH) or -1 with the error set. */
static int open_parent(const char *path, size_t dir_len, const hv_file_write_opts *o)
{
	int fd = open_dir_path(path, dir_len);
	if (fd >= 0)
		return fd;
	int e = errno;
	if (e != ENOENT || !o->parents) {
		hv_error_set(is_missing(e) && !o->parents ? HV_ENOTDIR : e == ENOMEM ? HV_ENOMEM : HV_EIO,
			     "%.*s: %s", (int)(dir_len ? dir_len : 1), dir_len ? path : ".",
			     strerror(e));
		return -1;
	}
	/* Back off to the longest prefix that exists, one component at a time. have: the length
	 * of a prefix known to be missing; k: where its last component starts. */
	size_t have = dir_len;
	for (;;) {
		size_t k = have;
		while (k > 0 && path[k - 1] != '/')
			k--;
		size_t cut = k;
		while (cut > 0 && path[cut - 1] == '/')
			cut--;
		/* 0: the current directory; 1 with cut 0: the root "/" */
		size_t open_len = k == 0 ? 0 : cut == 0 ? 1 : cut;
		fd = open_dir_path(path, open_len);
		if (fd >= 0) {
			have = k;
			break;
		}
		e = errno;
		if (e != ENOENT || open_len == 0 || cut == 0) {
			hv_error_set(e == ENOMEM ? HV_ENOMEM : HV_EIO, "%.*s: %s",
				     (int)(open_len ? open_len : 1), open_len ? path : ".", strerror(e));
			return -1;
		}
		have = cut;
	}
	/* Create and enter each remaining component. */
	size_t pos = have;
	while (pos < dir_len) {
		while (pos < dir_len && path[pos] == '/')
			pos++;
		size_t end = pos;
		while (end < dir_len && path[end] != '/')
			end++;
		if (end == pos)
			break;
		char *comp = malloc(end - pos + 1);
		if (!comp) {
			close(fd);
			hv_error_set(HV_ENOMEM, "out of memory");
			return -1;
		}
		memcpy(comp, path + pos, end - pos);
		comp[end - pos] = '\0';
		bool made = false;
		if (!is_dot_or_dotdot(comp)) {
			if (mkdirat(fd, comp, 0777) == 0)
				made = true;
			else if (errno != EEXIST) {
				e = errno;
				free(comp);
				close(fd);
				hv_error_set(HV_EIO, "%.*s: %s", (int)end, path, strerror(e));
				return -1;
			}
		}
		if (made && hv__test_hook_active(HV__HOOK_FILE_WRITE)) {
			char *shown = malloc(end + 1);
			if (shown) {
				memcpy(shown, path, end);
				shown[end] = '\0';
				hv__test_hook_call(HV__HOOK_FILE_WRITE, shown);
				free(shown);
			}
		}
		int next = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		e = errno;
		if (next < 0) {
			struct stat st;
			if ((e == ENOTDIR || e == ELOOP) &&
			    fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
				hv_error_set(HV_EIO, "%.*s: a symlink where a directory is made; not followed",
					     (int)end, path);
			else
				hv_error_set(HV_EIO, "%.*s: %s", (int)end, path, strerror(e));
			free(comp);
			close(fd);
			return -1;
		}
		free(comp);
		close(fd);
		fd = next;
		pos = end;
	}
	return fd;
}

struct put {
	const char *path;
	const char *name;   /* the destination's name in its directory */
	int dfd;            /* the destination's directory (O_PATH) */
	int fd;             /* the temporary file */
	bool unnamed;       /* fd is an O_TMPFILE file */
	char tmp[HV_TEMP_NAME_LEN + 1]; /* its name when it has one ("" otherwise) */
};

/* Creates the temporary file in the destination's directory (temp_name.h: unnamed where it
 * can be). */
static hv_status create_temp(struct put *p, mode_t mode)
{
	p->fd = hv_temp_create_unnamed(p->dfd, p->tmp, O_WRONLY, mode);
	p->unnamed = p->fd >= 0 && !p->tmp[0];
	if (p->fd >= 0)
		return HV_OK;
	int e = errno;
	p->tmp[0] = '\0';
	return hv_error_errno(HV_EIO, p->path, e);
}

/* Puts the finished temporary file in place of the destination. */
static hv_status install(struct put *p, bool dest_exists)
{
	if (p->unnamed) {
		/* A new destination is linked in one step: linkat never replaces, so a file someone
		 * made meanwhile is replaced by the rename below instead. */
		if (!dest_exists) {
			if (hv_temp_link(p->fd, p->dfd, p->name) == 0)
				return HV_OK;
			if (errno != EEXIST)
				return hv_error_errno(HV_EIO, p->path, errno);
		}
		if (hv_temp_link_named(p->fd, p->dfd, p->tmp) != 0)
			return hv_error_errno(HV_EIO, p->path, errno);
	}
	if (renameat(p->dfd, p->tmp, p->dfd, p->name) != 0)
		return hv_error_errno(HV_EIO, p->path, errno);
	p->tmp[0] = '\0'; /* it is the destination now */
	return HV_OK;
}

hv_status hv_file_write(const char *path, hv_file_read_fn read_fn, void *ctx,
			const hv_file_write_opts *opts)
{
	HV_NEED(path && read_fn);
	hv_file_write_opts defaults;
	if (!opts) {
		hv_file_write_opts_init(&defaults);
		opts = &defaults;
	}
	if (opts->mode > 07777 || opts->mode < -1)
		return hv_error_set(HV_EUSAGE, "mode %o: not a permission mode (at most 07777)",
				    (unsigned)opts->mode);
	size_t len = strlen(path);
	if (len == 0)
		return hv_error_set(HV_EUSAGE, "empty path");
	if (path[len - 1] == '/')
		return hv_error_set(HV_EUSAGE, "%s: not a file name (ends in '/')", path);
	struct put p = {.path = path, .fd = -1};
	size_t dir_len;
	p.name = split_last(path, &dir_len);
	if (is_dot_or_dotdot(p.name))
		return hv_error_set(HV_EUSAGE, "%s: not a file name", path);

	char *buf = malloc(COPY_BUF);
	if (!buf)
		return hv_error_set(HV_ENOMEM, "out of memory");
	p.dfd = open_parent(path, dir_len, opts);
	if (p.dfd < 0) {
		free(buf);
		return hv_error_last_status();
	}

	/* What is there now decides the mode and owner, and whether it may be replaced. */
	struct stat old;
	bool exists = fstatat(p.dfd, p.name, &old, AT_SYMLINK_NOFOLLOW) == 0;
	int rc = HV_OK;
	if (!exists && errno != ENOENT) {
		rc = hv_error_errno(HV_EIO, path, errno);
	} else if (exists && S_ISDIR(old.st_mode)) {
		rc = hv_error_errno(HV_EIO, path, EISDIR);
	} else if (exists && !S_ISREG(old.st_mode) && !S_ISLNK(old.st_mode)) {
		/* Renaming over /dev/null or a FIFO someone reads would break what uses it. */
		rc = hv_error_set(HV_EIO, "%s: not a regular file (%s); not replaced", path,
				  hv_ftype_name(hv_ftype_from_mode(old.st_mode)));
	}
	bool keep_old = exists && S_ISREG(old.st_mode);
	int mode = opts->mode >= 0 ? opts->mode : keep_old ? (int)(old.st_mode & 07777) : -1;
	/* A known final mode may be stricter than the umask's: the file is private (0600) until
	 * it gets it. Otherwise the kernel applies the umask (and a default ACL) itself. */
	if (rc == HV_OK)
		rc = create_temp(&p, mode >= 0 ? 0600 : 0666);

	while (rc == HV_OK) {
		size_t got = 0;
		hv_error_clear();
		rc = read_fn(ctx, buf, COPY_BUF, &got);
		if (rc > 0)
			rc = HV_OK; /* no failure (types.h): got says what was read */
		else if (rc < 0)
			rc = hv__callback_failed(rc, "the read callback");
		else if (rc == HV_OK && got > COPY_BUF)
			rc = hv_error_set(HV_EUSAGE, "%s: the read callback said it read %zu bytes "
						     "into a buffer of %zu",
					  path, got, (size_t)COPY_BUF);
		if (rc != HV_OK || got == 0)
			break;
		if (hv_write_all(p.fd, buf, got) != 0)
			rc = hv_error_errno(HV_EIO, path, errno);
	}
	free(buf);

	if (rc == HV_OK && keep_old && (old.st_uid != geteuid() || old.st_gid != getegid())) {
		/* Root replacing a user's file leaves it theirs; anyone else cannot give a file
		 * away, and gets what a rename-based editor gives: the file becomes theirs. */
		if (fchown(p.fd, old.st_uid, old.st_gid) != 0 && errno != EPERM)
			rc = hv_error_errno(HV_EIO, path, errno);
	}
	if (rc == HV_OK && mode >= 0 && fchmod(p.fd, (mode_t)mode) != 0)
		rc = hv_error_errno(HV_EIO, path, errno);
	/* Synced before the rename: a crash never leaves the new name on missing data. */
	if (rc == HV_OK && opts->sync && fsync(p.fd) != 0)
		rc = hv_error_errno(HV_EIO, path, errno);
	if (rc == HV_OK)
		hv__test_hook_call(HV__HOOK_FILE_WRITE, path);
	if (rc == HV_OK)
		rc = install(&p, exists);
	if (p.fd >= 0 && close(p.fd) != 0 && rc == HV_OK)
		rc = hv_error_errno(HV_EIO, path, errno);
	if (p.tmp[0])
		(void)unlinkat(p.dfd, p.tmp, 0);
	if (rc == HV_OK && opts->sync) {
		/* The rename itself made durable. Some file systems cannot sync a directory
		 * (EINVAL); the file is in place either way. */
		int d = openat(p.dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d >= 0) {
			if (fsync(d) != 0 && errno != EINVAL && errno != EROFS)
				rc = hv_error_errno(HV_EIO, path, errno);
			close(d);
		}
	}
	close(p.dfd);
	return rc;
}

struct fd_source {
	int fd;
	const char *name;
};

static hv_status read_from_fd(void *ctx, void *buf, size_t cap, size_t *got)
{
	const struct fd_source *s = ctx;
	ssize_t n = read_some(s->fd, buf, cap);
	if (n < 0)
		return hv_error_errno(HV_EIO, s->name, errno);
	*got = (size_t)n;
	return HV_OK;
}

hv_status hv_file_write_fd(const char *path, int in_fd, const char *in_name,
			   const hv_file_write_opts *opts)
{
	HV_NEED(path);
	struct fd_source s = {.fd = in_fd, .name = in_name ? in_name : "input"};
	return hv_file_write(path, read_from_fd, &s, opts);
}

struct buffer_source {
	const char *data;
	size_t left;
};

static hv_status read_from_buffer(void *ctx, void *buf, size_t cap, size_t *got)
{
	struct buffer_source *s = ctx;
	size_t n = s->left < cap ? s->left : cap;
	if (n)
		memcpy(buf, s->data, n);
	s->data += n;
	s->left -= n;
	*got = n;
	return HV_OK;
}

hv_status hv_file_write_buffer(const char *path, const void *data, size_t len,
			       const hv_file_write_opts *opts)
{
	HV_NEED(path && (data || len == 0));
	struct buffer_source s = {.data = data, .left = len};
	return hv_file_write(path, read_from_buffer, &s, opts);
}

/* ---- rm ------------------------------------------------------------------------------------- */

/* One directory of the tree being removed, on the explicit stack. */
struct frame {
	char *name;       /* its name in the parent (the caller's path for the top one) */
	int fd;           /* open (O_RDONLY|O_DIRECTORY), or -1: reopen through ".." */
	dev_t dev;
	ino_t ino;
	hv_buf pending;   /* subdirectories still to remove, NUL-separated */
	size_t next;      /* offset of the next one in pending */
	bool failed;      /* something below could not be removed (already reported) */
	int rescans;      /* times listed again because it was not empty at the end */
};

/* Descriptors kept open on the stack; deeper frames' are closed and reopened from below
 * through "..", checking device and inode, so any depth works within the process's limit. */
#define RM_OPEN_FRAMES 64

struct rm {
	const hv_remove_opts *o;
	struct frame *f;
	size_t n, cap;
	int status;       /* HV_OK, or HV_EIO once something failed */
	bool aborted;     /* lost track of where we are: stop */
};

/* "top/a/b/name": the path of an entry of the top frame, for messages only. */
static char *frame_path(const struct rm *r, const char *name)
{
	hv_buf b = {0};
	for (size_t i = 0; i < r->n; i++) {
		if (i > 0)
			hv_buf_append_char(&b, '/');
		hv_buf_append_str(&b, r->f[i].name);
	}
	if (name) {
		hv_buf_append_char(&b, '/');
		hv_buf_append_str(&b, name);
	}
	if (b.failed) {
		hv_buf_free(&b);
		return NULL;
	}
	return b.data;
}

/* Out of descriptors (EMFILE under a low `ulimit -n`, ENFILE): closes the oldest frame's that
 * is open but the top one's (frame_fd reopens it through ".." on the way back up), so the
 * depth a removal reaches does not depend on the limit. True when one was closed. */
static bool rm_relieve(struct rm *r, int err)
{
	if (err != EMFILE && err != ENFILE)
		return false;
	for (size_t i = 0; i + 1 < r->n; i++) {
		if (r->f[i].fd >= 0) {
			close(r->f[i].fd);
			r->f[i].fd = -1;
			return true;
		}
	}
	return false;
}

static void rm_report(struct rm *r, const char *name, const char *reason)
{
	char *p = frame_path(r, name);
	hv_error_set(HV_EIO, "%s: %s", p ? p : "(out of memory)", reason);
	free(p);
	r->status = HV_EIO;
	if (r->n > 0)
		r->f[r->n - 1].failed = true;
	if (r->o->on_error)
		hv__call_message_fn(r->o->on_error, r->o->ctx, hv_error_last());
}

/* Lists the top frame's directory: removes its entries that are not directories, and
 * queues the directories in its pending list. Returns 0, or -1 out of memory. */
static int rm_scan(struct rm *r)
{
	struct frame *f = &r->f[r->n - 1];
	/* The pending list restarts: a rescan finds what is still there. */
	hv_buf_truncate(&f->pending, 0);
	f->next = 0;
	int lfd;
	do
		lfd = openat(f->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	while (lfd < 0 && rm_relieve(r, errno));
	DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (!d) {
		int e = errno;
		if (lfd >= 0)
			close(lfd);
		rm_report(r, NULL, strerror(e));
		return 0;
	}
	for (;;) {
		errno = 0;
		/* cppcheck-suppress readdirCalled ; d is this call's own stream: readdir is then
		 * thread-safe (glibc, POSIX 2024), and readdir_r is deprecated */
		struct dirent *e = readdir(d);
		if (!e)
			break;
		const char *n = e->d_name;
		if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')))
			continue;
		/* Anything but a known directory is unlinked at once; unlinkat says EISDIR for a
		 * directory the listing did not type. */
		if (e->d_type != DT_DIR && unlinkat(f->fd, n, 0) == 0)
			continue;
		if (e->d_type == DT_DIR || errno == EISDIR) {
			if (hv_buf_append(&f->pending, n, strlen(n) + 1) != HV_OK) {
				closedir(d);
				return -1;
			}
		} else if (errno != ENOENT) {
			rm_report(r, n, strerror(errno));
		}
	}
	if (errno != 0)
		rm_report(r, NULL, strerror(errno));
	closedir(d);
	return 0;
}

/* Pushes a frame for the directory open as fd (named name in the top frame) and lists it.
 * Returns 0, or -1 out of memory (fd is then closed). */
static int rm_push(struct rm *r, const char *name, int fd)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		rm_report(r, name, strerror(e));
		return 0;
	}
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		struct frame *nf = realloc(r->f, cap * sizeof(*nf));
		if (!nf) {
			close(fd);
			return -1;
		}
		r->f = nf;
		r->cap = cap;
	}
	struct frame *f = &r->f[r->n];
	memset(f, 0, sizeof(*f));
	f->name = strdup(name);
	if (!f->name) {
		close(fd);
		return -1;
	}
	f->fd = fd;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	r->n++;
	if (r->n > RM_OPEN_FRAMES && r->f[r->n - 1 - RM_OPEN_FRAMES].fd >= 0) {
		close(r->f[r->n - 1 - RM_OPEN_FRAMES].fd);
		r->f[r->n - 1 - RM_OPEN_FRAMES].fd = -1;
	}
	return rm_scan(r);
}

/* The descriptor of frame i, reopened through ".." of frame i+1 when it was closed. */
static int frame_fd(struct rm *r, size_t i)
{
	if (r->f[i].fd >= 0)
		return r->f[i].fd;
	int fd;
	do
		fd = openat(r->f[i + 1].fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	while (fd < 0 && rm_relieve(r, errno));
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_dev != r->f[i].dev || st.st_ino != r->f[i].ino) {
		/* The directory was moved while we were below it: where ".." leads is not the
		 * tree we were asked to remove. */
		if (fd >= 0)
			close(fd);
		r->aborted = true;
		rm_report(r, NULL, "moved during the removal; stopped");
		return -1;
	}
	r->f[i].fd = fd;
	return fd;
}

static void frame_free(struct frame *f)
{
	if (f->fd >= 0)
		close(f->fd);
	free(f->name);
	hv_buf_free(&f->pending);
}

/* How often a directory found not empty after its listing was worked through is listed
 * again (entries made meanwhile, or a listing that missed some while we unlinked). */
#define RM_RESCANS 3

/* Enters the next pending subdirectory of the top frame f. Returns 0, or -1 out of memory. */
static int rm_enter(struct rm *r, struct frame *f)
{
	const char *child = f->pending.data + f->next;
	f->next += strlen(child) + 1;
	if (hv__test_hook_active(HV__HOOK_REMOVE)) {
		char *p = frame_path(r, child);
		if (p)
			hv__test_hook_call(HV__HOOK_REMOVE, p);
		free(p);
	}
	int cfd;
	do
		cfd = openat(f->fd, child, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	while (cfd < 0 && rm_relieve(r, errno));
	if (cfd >= 0)
		return rm_push(r, child, cfd);
	int e = errno;
	if (e == ENOTDIR || e == ELOOP) {
		/* Swapped for a symlink or a file since it was listed: removed itself, never
		 * entered. */
		if (unlinkat(f->fd, child, 0) != 0 && errno != ENOENT)
			rm_report(r, child, strerror(errno));
	} else if (e != ENOENT && unlinkat(f->fd, child, AT_REMOVEDIR) != 0) {
		/* Unreadable (EACCES) but empty is still removable; else the first error. */
		rm_report(r, child, strerror(e));
	}
	return 0;
}

/* Removes the tree of the directory name in pfd (st: its lstat), depth-first with the
 * explicit stack, never following a symlink. shown: the path for messages. */
static hv_status remove_tree(int pfd, const char *name, const char *shown, const struct stat *st,
			     const hv_remove_opts *o)
{
	struct rm r = {.o = o};
	hv__test_hook_call(HV__HOOK_REMOVE, shown);
	int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat fst;
	if (fd >= 0 && (fstat(fd, &fst) != 0 || fst.st_dev != st->st_dev || fst.st_ino != st->st_ino)) {
		close(fd);
		return hv_error_set(HV_EIO, "%s: changed while being removed; not removed", shown);
	}
	if (fd < 0) {
		int e = errno;
		/* Swapped for a symlink or a file since the lstat: not ours to follow. */
		if (e == ENOTDIR || e == ELOOP)
			return hv_error_set(HV_EIO, "%s: changed while being removed; not removed",
					    shown);
		/* Unreadable but empty is still removable. */
		if (unlinkat(pfd, name, AT_REMOVEDIR) == 0)
			return HV_OK;
		return hv_error_errno(e == ENOENT ? HV_ENOTDIR : HV_EIO, shown, e);
	}
	bool oom = rm_push(&r, shown, fd) != 0;
	while (r.n > 0 && !r.aborted && !oom) {
		struct frame *f = &r.f[r.n - 1];
		if (f->next < f->pending.len) {
			oom = rm_enter(&r, f) != 0;
			continue;
		}
		/* Everything below f is done: remove f itself, unless something below it could
		 * not be removed (reported already; rm(1) does not try either). */
		if (!f->failed) {
			int dfd = r.n == 1 ? pfd : frame_fd(&r, r.n - 2);
			if (dfd < 0)
				break;
			const char *fname = r.n == 1 ? name : f->name;
			if (unlinkat(dfd, fname, AT_REMOVEDIR) != 0 && errno != ENOENT) {
				if (errno == ENOTEMPTY && f->rescans < RM_RESCANS) {
					f->rescans++;
					oom = rm_scan(&r) != 0;
					continue;
				}
				rm_report(&r, NULL, strerror(errno));
			}
		}
		bool failed = f->failed;
		frame_free(f);
		r.n--;
		if (failed && r.n > 0)
			r.f[r.n - 1].failed = true;
	}
	for (size_t i = r.n; i-- > 0;)
		frame_free(&r.f[i]);
	free(r.f);
	if (oom)
		return hv_error_set(HV_ENOMEM, "out of memory");
	return r.status;
}

void hv_remove_opts_init(hv_remove_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
}

hv_status hv_remove(const char *path, const hv_remove_opts *opts)
{
	HV_NEED(path);
	static const hv_remove_opts defaults = {0};
	if (!opts)
		opts = &defaults;
	size_t len = strlen(path);
	if (len == 0)
		return hv_error_errno(HV_ENOTDIR, path, ENOENT);
	bool slash = path[len - 1] == '/';
	while (len > 0 && path[len - 1] == '/')
		len--;
	if (len == 0)
		return hv_error_set(HV_EUSAGE, "%s: refusing to remove '/'", path);
	char *clean = strndup(path, len);
	if (!clean)
		return hv_error_set(HV_ENOMEM, "out of memory");
	size_t dir_len;
	const char *name = split_last(clean, &dir_len);
	int rc;
	if (is_dot_or_dotdot(name)) {
		rc = hv_error_set(HV_EUSAGE, "%s: refusing to remove '.' or '..'", path);
		free(clean);
		return rc;
	}
	int pfd = open_dir_path(clean, dir_len);
	if (pfd < 0) {
		int e = errno;
		rc = hv_error_errno(is_missing(e) ? HV_ENOTDIR : HV_EIO, path, e);
		free(clean);
		return rc;
	}
	struct stat st;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		int e = errno;
		rc = hv_error_errno(is_missing(e) ? HV_ENOTDIR : HV_EIO, path, e);
	} else if (S_ISDIR(st.st_mode)) {
		rc = opts->recursive ? remove_tree(pfd, name, clean, &st, opts)
				     : hv_error_errno(HV_EIO, path, EISDIR);
	} else if (slash && S_ISLNK(st.st_mode)) {
		rc = hv_error_set(HV_EIO, "%s: a symlink, not followed (name it without the '/')",
				  path);
	} else if (slash) {
		rc = hv_error_errno(HV_ENOTDIR, path, ENOTDIR);
	} else if (unlinkat(pfd, name, 0) != 0) {
		int e = errno;
		rc = hv_error_errno(e == ENOENT ? HV_ENOTDIR : HV_EIO, path, e);
	} else {
		rc = HV_OK;
	}
	close(pfd);
	free(clean);
	return rc;
}
