/* hv_write_file(): stored bytes out to a file the user named, without ever replacing what that
 * file is. `history get -o` used to rename a temporary file over FILE whatever it was, turning
 * /dev/null into a regular file and cutting hard links; here the kind of FILE decides:
 * a device or FIFO is written into, a file that the rename would change (other links, another
 * owner) is written in place, and only a new file or one this user alone owns and links is
 * replaced atomically. */
#include "harvest/store.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int fail(const char *path, int err)
{
	return hv_error_set(HV_EIO, "%s: %s", path, strerror(err));
}

/* Writes into an open descriptor, then makes it durable. fsync of a device or FIFO may be
 * meaningless (EINVAL): only a regular file must reach the disk. */
static int fill(int fd, const char *path, const void *data, size_t len, bool regular)
{
	if (write_all(fd, data, len) != 0)
		return fail(path, errno);
	if (regular && ftruncate(fd, (off_t)len) != 0)
		return fail(path, errno);
	if (fsync(fd) != 0 && (regular || (errno != EINVAL && errno != EROFS)))
		return fail(path, errno);
	return HV_OK;
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

/* A new temporary file ".hv.XXXXXX" in dirfd: short, so it fits wherever a name of NAME_MAX
 * bytes fits. Its name in name[12]; created with mode (less the umask). */
static int make_temp(int dirfd, char name[12], mode_t mode)
{
	static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	for (int attempt = 0; attempt < 100; attempt++) {
		unsigned char r[6];
		if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
			uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16) ^ (uint64_t)attempt;
			memcpy(r, &t, sizeof(r));
		}
		memcpy(name, ".hv.", 4);
		for (int i = 0; i < 6; i++)
			name[4 + i] = digits[r[i] % (sizeof(digits) - 1)];
		name[10] = '\0';
		int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
				mode);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	errno = EEXIST;
	return -1;
}

/* The bytes in a temporary file of dir, then put at base. replace: over the file there, whose
 * mode the new one gets; else only where nothing is (HV_DONE when something is by now), with
 * the mode `>` would give (0666 less the umask). */
static int via_temp(int dirfd, const char *path, const char *base, const void *data,
		    size_t len, mode_t mode, bool replace)
{
	char tmp[12];
	int fd = make_temp(dirfd, tmp, replace ? 0600 : 0666);
	if (fd < 0)
		return fail(path, errno);
	int rc = fill(fd, path, data, len, true);
	if (rc == HV_OK && replace && fchmod(fd, mode) != 0)
		rc = fail(path, errno);
	if (close(fd) != 0 && rc == HV_OK)
		rc = fail(path, errno);
	if (rc == HV_OK) {
		int r = replace ? renameat(dirfd, tmp, dirfd, base)
				: renameat2(dirfd, tmp, dirfd, base, RENAME_NOREPLACE);
		if (r != 0 && !replace && (errno == EINVAL || errno == ENOSYS)) {
			/* No RENAME_NOREPLACE here: link() does not replace either. */
			r = linkat(dirfd, tmp, dirfd, base, 0);
			if (r == 0)
				unlinkat(dirfd, tmp, 0);
		}
		if (r != 0)
			rc = errno == EEXIST ? HV_DONE : fail(path, errno);
	}
	if (rc != HV_OK)
		unlinkat(dirfd, tmp, 0);
	return rc;
}

/* Writes into what path already is (a device, a FIFO, a shared regular file), checking that
 * what was opened is what was looked at. */
static int in_place(const char *path, const struct stat *seen, const void *data, size_t len)
{
	/* O_NONBLOCK: a FIFO without a reader fails at once (ENXIO) instead of waiting forever;
	 * O_NOCTTY: a terminal does not become harvest's. Never O_TRUNC before the checks. */
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		if (err == ENXIO && S_ISFIFO(seen->st_mode))
			return hv_error_set(HV_EIO, "%s: a FIFO that nobody reads", path);
		return fail(path, err);
	}
	struct stat sb;
	int rc = HV_OK;
	if (fstat(fd, &sb) != 0)
		rc = fail(path, errno);
	else if (sb.st_dev != seen->st_dev || sb.st_ino != seen->st_ino)
		rc = hv_error_set(HV_EIO, "%s: replaced while being opened", path);
	/* Writes block again: a reader that is slow is waited for, like `cat > FIFO` does. */
	int fl = rc == HV_OK ? fcntl(fd, F_GETFL) : -1;
	if (rc == HV_OK && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
		rc = fail(path, errno);
	if (rc == HV_OK)
		rc = fill(fd, path, data, len, S_ISREG(sb.st_mode));
	if (close(fd) != 0 && rc == HV_OK)
		rc = fail(path, errno);
	return rc;
}

hv_status hv_write_file(const char *path, const void *data, size_t len, int flags)
{
	if (!path || !*path || (len && !data))
		return hv_error_set(HV_EUSAGE, "hv_write_file: missing argument");
	char *resolved = NULL;
	int rc = HV_DONE;
	/* A file made or swapped meanwhile by someone else: look again (a few times). */
	for (int attempt = 0; rc == HV_DONE && attempt < 8; attempt++) {
		const char *p = path;
		struct stat sb;
		bool exists = lstat(p, &sb) == 0;
		if (!exists && errno != ENOENT) {
			rc = fail(path, errno);
			break;
		}
		if (exists && S_ISLNK(sb.st_mode)) {
			if (!(flags & HV_WRITE_FOLLOW)) {
				rc = hv_error_set(HV_EUSAGE, "%s: is a symbolic link (not followed)",
						  path);
				break;
			}
			free(resolved);
			/* The final target, which must exist: a dangling link is refused. */
			if (!(resolved = realpath(path, NULL)) || lstat(resolved, &sb) != 0) {
				rc = hv_error_set(HV_EIO, "%s: cannot follow the symbolic link: %s",
						  path, strerror(errno));
				break;
			}
			p = resolved;
		}
		if (exists && S_ISDIR(sb.st_mode)) {
			rc = fail(path, EISDIR);
			break;
		}
		if (exists && S_ISSOCK(sb.st_mode)) {
			rc = hv_error_set(HV_EUSAGE, "%s: is a socket", path);
			break;
		}
		bool shared = exists && S_ISREG(sb.st_mode) &&
			      (sb.st_nlink != 1 || sb.st_uid != geteuid() || sb.st_gid != getegid());
		if (exists && (!S_ISREG(sb.st_mode) || shared)) {
			rc = in_place(p, &sb, data, len);
			break;
		}
		const char *base;
		char *dir = split_dir(p, &base);
		if (!dir) {
			rc = hv_error_set(HV_ENOMEM, "out of memory");
			break;
		}
		int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dirfd < 0)
			rc = fail(path, errno);
		else if (exists && faccessat(dirfd, ".", W_OK | X_OK, AT_EACCESS) != 0)
			/* No temporary file can be made beside it: a file we may write, in a
			 * directory we may not, is still written (in place). */
			rc = in_place(p, &sb, data, len);
		else
			rc = via_temp(dirfd, path, base, data, len, exists ? sb.st_mode & 07777 : 0,
				      exists);
		if (dirfd >= 0)
			close(dirfd);
		free(dir);
	}
	if (rc == HV_DONE)
		rc = hv_error_set(HV_EIO, "%s: keeps changing while being written", path);
	free(resolved);
	return rc;
}
