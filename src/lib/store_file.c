/* hv_write_file(): stored bytes out to a file the user named, without ever replacing what that
 * file is. `history get -o` used to rename a temporary file over FILE whatever it was, turning
 * /dev/null into a regular file and cutting hard links; here the kind of FILE decides:
 * a device or FIFO is written into, a file that the rename would change (other links, another
 * owner) is written in place, and only a new file or one this user alone owns and links is
 * replaced atomically. */
#include "harvest/store.h"
#include "fdio.h"
#include "internal.h"
#include "temp_name.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static hv_status fail(const char *path, int err)
{
	return hv_error_set(HV_EIO, "%s: %s", path, strerror(err));
}

/* The directory part of path (malloc'd: "." when none) and where the last component starts. */
static char *split_dir(const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	*base = slash ? slash + 1 : path;
	if (!slash)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

/* An output being written: into a temporary file of the destination's directory that commit
 * renames into place, or into what the destination already is (a device, a FIFO, a shared
 * regular file). */
struct hv_file_out {
	int fd;
	int dirfd;          /* the destination's directory (temporary file only), else -1 */
	/* The temporary file's name in dirfd; "" when writing in place. */
	char tmp[HV_TEMP_NAME_LEN + 1];
	char *path;         /* the destination as given, for messages */
	char *base;         /* its last component in dirfd (temporary file only) */
	bool replace;       /* the temporary file replaces an existing file */
	bool regular;       /* what fd is open on is a regular file */
	bool unnamed;       /* the temporary file has no name yet (O_TMPFILE) */
	mode_t mode;        /* the mode the replaced file had */
};

static void out_free(hv_file_out *o)
{
	if (o->fd >= 0)
		close(o->fd);
	if (o->dirfd >= 0) {
		if (o->tmp[0])
			unlinkat(o->dirfd, o->tmp, 0);
		close(o->dirfd);
	}
	free(o->path);
	free(o->base);
	free(o);
}

/* Opens what path already is, for writing in place, checking that what was opened is what
 * was looked at. */
static hv_status open_in_place(hv_file_out *o, const char *p, const struct stat *seen,
				bool follow)
{
	/* O_NONBLOCK: a FIFO without a reader fails at once (ENXIO) instead of waiting forever;
	 * O_NOCTTY: a terminal does not become harvest's. Never O_TRUNC before the checks.
	 * follow: p is a link to what seen describes (a pipe through /dev/stdout), checked by
	 * identity below like anything else opened here. */
	o->fd = open(p, O_WRONLY | (follow ? 0 : O_NOFOLLOW) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (o->fd < 0) {
		int err = errno;
		if (err == ENXIO && S_ISFIFO(seen->st_mode))
			return hv_error_set(HV_EIO, "%s: a FIFO that nobody reads", o->path);
		return fail(o->path, err);
	}
	struct stat sb;
	if (fstat(o->fd, &sb) != 0)
		return fail(o->path, errno);
	if (sb.st_dev != seen->st_dev || sb.st_ino != seen->st_ino)
		return hv_error_set(HV_EIO, "%s: replaced while being opened", o->path);
	/* Writes block again: a reader that is slow is waited for, like `cat > FIFO` does. */
	int fl = fcntl(o->fd, F_GETFL);
	if (fl < 0 || fcntl(o->fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
		return fail(o->path, errno);
	o->regular = S_ISREG(sb.st_mode);
	return HV_OK;
}

/* Decides how path is written (see hv_write_file) and opens it: HV_OK with *out, or a
 * failure (nothing left behind). */
static hv_status out_open(hv_file_out **out, const char *path, int flags)
{
	*out = NULL;
	if (!path || !*path)
		return hv_error_set(HV_EUSAGE, "hv_file_out_open: missing path");
	if (flags & ~HV_WRITE_FOLLOW)
		return hv_error_set(HV_EUSAGE, "%s: unknown write flags 0x%x", path,
				    (unsigned)(flags & ~HV_WRITE_FOLLOW));
	hv_file_out *o = calloc(1, sizeof(*o));
	if (!o || !(o->path = strdup(path))) {
		free(o);
		hv_error_set(HV_ENOMEM, "out of memory");
		return HV_ENOMEM;
	}
	o->fd = o->dirfd = -1;
	char *resolved = NULL;
	const char *p = path;
	struct stat sb;
	hv_status rc = HV_OK;
	bool magic = false; /* a link to a pipe or device that has no path: opened through it */
	bool exists = lstat(p, &sb) == 0;
	if (!exists && errno != ENOENT) {
		rc = fail(path, errno);
	} else if (exists && S_ISLNK(sb.st_mode)) {
		if (!(flags & HV_WRITE_FOLLOW)) {
			rc = hv_error_set(HV_EUSAGE, "%s: is a symbolic link (not followed)", path);
		} else if (!(resolved = realpath(path, NULL)) || lstat(resolved, &sb) != 0) {
			/* The final target, which must exist: a dangling link is refused. A link
			 * that leads to no path but to an open pipe or device (/dev/stdout, a
			 * /proc/self/fd/N of a pipe: "pipe:[N]") is written in place, as the
			 * shell's > does. */
			int err = errno;
			struct stat tsb;
			if (stat(path, &tsb) == 0 && !S_ISREG(tsb.st_mode) && !S_ISDIR(tsb.st_mode)) {
				sb = tsb;
				magic = true;
			} else {
				rc = hv_error_set(HV_EIO, "%s: cannot follow the symbolic link: %s",
						  path, strerror(err));
			}
		} else {
			p = resolved;
		}
	}
	if (rc == HV_OK && exists && S_ISDIR(sb.st_mode))
		rc = fail(path, EISDIR);
	if (rc == HV_OK && exists && S_ISSOCK(sb.st_mode))
		rc = hv_error_set(HV_EUSAGE, "%s: is a socket", path);
	bool shared = exists && S_ISREG(sb.st_mode) &&
		      (sb.st_nlink != 1 || sb.st_uid != geteuid() || sb.st_gid != getegid());
	bool in_place = exists && (!S_ISREG(sb.st_mode) || shared);
	if (rc == HV_OK && !in_place) {
		const char *base;
		char *dir = split_dir(p, &base);
		if (!dir || !(o->base = strdup(base))) {
			rc = hv_error_set(HV_ENOMEM, "out of memory");
		} else if ((o->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			rc = fail(path, errno);
		} else if (exists && faccessat(o->dirfd, ".", W_OK | X_OK, AT_EACCESS) != 0) {
			/* No temporary file can be made beside it: a file we may write, in a
			 * directory we may not, is still written (in place). */
			close(o->dirfd);
			o->dirfd = -1;
			in_place = true;
		} else {
			o->replace = exists;
			o->mode = exists ? sb.st_mode & 07777 : 0;
			o->regular = true;
			/* unnamed where it can be, so an interrupted write leaves nothing; else
			 * the short temporary name of temp_name.h, which fits wherever a name of
			 * NAME_MAX bytes fits */
			o->fd = hv_temp_create_unnamed(o->dirfd, o->tmp, O_WRONLY,
						       exists ? 0600 : 0666);
			o->unnamed = o->fd >= 0 && !o->tmp[0];
			if (o->fd < 0) {
				o->tmp[0] = '\0';
				rc = fail(path, errno);
			}
		}
		free(dir);
	}
	if (rc == HV_OK && in_place)
		rc = open_in_place(o, p, &sb, magic);
	free(resolved);
	if (rc != HV_OK) {
		out_free(o);
		return rc;
	}
	*out = o;
	return HV_OK;
}

/* Completes o and frees it: HV_OK or a failure. *raced says the failure is that something
 * appeared at the destination of a new file meanwhile (nothing is replaced then). */
static hv_status out_commit(hv_file_out *o, bool *raced)
{
	hv_status rc = HV_OK;
	*raced = false;
	if (o->regular) {
		/* In place, a longer old content must not outlive the new one. */
		off_t len = lseek(o->fd, 0, SEEK_CUR);
		if (len < 0 || ftruncate(o->fd, len) != 0)
			rc = fail(o->path, errno);
	}
	/* fsync of a device or FIFO may be meaningless (EINVAL): only a regular file must reach
	 * the disk. */
	if (rc == HV_OK && fsync(o->fd) != 0 && (o->regular || (errno != EINVAL && errno != EROFS)))
		rc = fail(o->path, errno);
	if (rc == HV_OK && o->replace && fchmod(o->fd, o->mode) != 0)
		rc = fail(o->path, errno);
	struct stat linked; /* the new file linked in place, while its close is pending */
	bool placed = false;
	if (rc == HV_OK && o->unnamed) {
		/* A new file is linked in place in one step (never replacing); one replacing
		 * another gets a temporary name first, renamed over it below. */
		int r = o->replace ? hv_temp_link_named(o->fd, o->dirfd, o->tmp)
				   : hv_temp_link(o->fd, o->dirfd, o->base);
		if (r == 0) {
			o->unnamed = false;
			placed = !o->replace && fstat(o->fd, &linked) == 0;
		} else if (!o->replace && errno == EEXIST) {
			*raced = true;
			rc = hv_error_set(HV_EIO, "%s: created by someone else while being written",
					  o->path);
		} else {
			rc = fail(o->path, errno);
		}
	}
	int fd = o->fd;
	o->fd = -1;
	if (close(fd) != 0 && rc == HV_OK) {
		rc = fail(o->path, errno);
		/* The new file is in place already: a failed write-back must not leave it there,
		 * as if complete (only the file linked here is removed, never one put there since). */
		struct stat now;
		if (placed && fstatat(o->dirfd, o->base, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
		    now.st_dev == linked.st_dev && now.st_ino == linked.st_ino)
			unlinkat(o->dirfd, o->base, 0);
	}
	if (rc == HV_OK && o->tmp[0]) {
		int r = o->replace ? renameat(o->dirfd, o->tmp, o->dirfd, o->base)
				   : renameat2(o->dirfd, o->tmp, o->dirfd, o->base, RENAME_NOREPLACE);
		if (r != 0 && !o->replace && (errno == EINVAL || errno == ENOSYS)) {
			/* No RENAME_NOREPLACE here: link() does not replace either. */
			r = linkat(o->dirfd, o->tmp, o->dirfd, o->base, 0);
			if (r == 0)
				unlinkat(o->dirfd, o->tmp, 0);
		}
		if (r == 0) {
			o->tmp[0] = '\0';
		} else if (errno == EEXIST) {
			*raced = true;
			rc = hv_error_set(HV_EIO, "%s: created by someone else while being written",
					  o->path);
		} else {
			rc = fail(o->path, errno);
		}
	}
	out_free(o);
	return rc;
}

hv_status hv_file_out_open(hv_file_out **out, const char *path, int flags)
{
	HV_NEED(out);
	return out_open(out, path, flags);
}

int hv_file_out_fd(const hv_file_out *o)
{
	return o ? o->fd : -1;
}

hv_status hv_file_out_commit(hv_file_out *o)
{
	if (!o)
		return hv_error_set(HV_EUSAGE, "hv_file_out_commit: no output");
	bool raced;
	return out_commit(o, &raced);
}

void hv_file_out_abort(hv_file_out *o)
{
	if (o)
		out_free(o);
}

hv_status hv_write_file(const char *path, const void *data, size_t len, int flags)
{
	if (!path || !*path || (len && !data))
		return hv_error_set(HV_EUSAGE, "hv_write_file: missing argument");
	hv_status rc = HV_OK;
	bool raced = true;
	/* A file made or swapped meanwhile by someone else: look again (a few times). */
	for (int attempt = 0; raced && attempt < 8; attempt++) {
		raced = false;
		hv_file_out *o;
		rc = out_open(&o, path, flags);
		if (rc != HV_OK || !o)
			break;
		if (hv_write_all(o->fd, data, len) != 0) {
			rc = fail(path, errno);
			out_free(o);
			break;
		}
		rc = out_commit(o, &raced);
	}
	if (raced)
		rc = hv_error_set(HV_EIO, "%s: keeps changing while being written", path);
	return rc;
}
