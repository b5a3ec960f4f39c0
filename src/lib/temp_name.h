/* The temporary name of a file harvest writes before putting it in place (put's fallback when
 * O_TMPFILE cannot be named, history get -o, archive -o, a new database before its rename into
 * place) or only needs for a moment (the collector's spool where O_TMPFILE is missing): one
 * spelling, so a user, a test or a cleanup script that looks for what a killed harvest left
 * behind looks for one pattern. */
#ifndef HARVEST_TEMP_NAME_H
#define HARVEST_TEMP_NAME_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ".hv." and 6 random characters: 10 bytes, so it fits beside any destination name of
 * NAME_MAX bytes (a "FILE.tmp.XXXXXX" would not). */
#define HV_TEMP_PREFIX ".hv."
#define HV_TEMP_PREFIX_LEN (sizeof(HV_TEMP_PREFIX) - 1)
#define HV_TEMP_RANDOM_LEN 6
#define HV_TEMP_NAME_LEN (HV_TEMP_PREFIX_LEN + HV_TEMP_RANDOM_LEN)

/* A fresh temporary name into out (NUL-terminated). Not secret, only unlikely to be taken:
 * the caller creates it with O_EXCL and draws again (attempt + 1) on EEXIST, so a collision
 * costs a retry, never a file. */
static inline void hv_temp_name(char out[HV_TEMP_NAME_LEN + 1], unsigned attempt)
{
	static const char chars[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
	_Static_assert(sizeof(chars) - 1 == 64, "6 random bits per character");
	unsigned char r[HV_TEMP_RANDOM_LEN];
	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		/* No entropy yet (early boot): time, address and attempt bits. */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
			     (uint64_t)(uintptr_t)out ^ ((uint64_t)getpid() << 40) ^
			     ((uint64_t)attempt << 30);
		for (size_t i = 0; i < sizeof(r); i++, x >>= 6)
			r[i] = (unsigned char)x;
	}
	memcpy(out, HV_TEMP_PREFIX, HV_TEMP_PREFIX_LEN);
	for (size_t i = 0; i < sizeof(r); i++)
		out[HV_TEMP_PREFIX_LEN + i] = chars[r[i] & 63];
	out[HV_TEMP_NAME_LEN] = '\0';
}

/* How many names hv_temp_create_at draws before it gives up with EEXIST: a directory that
 * full of temporary files is a fault to report, not to loop on. */
#define HV_TEMP_ATTEMPTS 100

/* Creates a new file under a fresh temporary name in dirfd (AT_FDCWD: the current directory),
 * opened with flags (O_WRONLY or O_RDWR, and any more) and O_CREAT | O_EXCL | O_NOFOLLOW |
 * O_CLOEXEC, mode less the umask; draws another name while one is taken. Its name in name.
 * The descriptor, or -1 with errno set (and name undefined). */
static inline int hv_temp_create_at(int dirfd, char name[HV_TEMP_NAME_LEN + 1], int flags,
				    mode_t mode)
{
	for (unsigned attempt = 0; attempt < HV_TEMP_ATTEMPTS; attempt++) {
		hv_temp_name(name, attempt);
		int fd = openat(dirfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				mode);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	errno = EEXIST;
	return -1;
}

/* Creates the file to be written and then put in place in dirfd: unnamed (O_TMPFILE) where
 * the file system and /proc allow it, so a harvest killed while writing leaves nothing
 * behind, and name is ""; else as hv_temp_create_at, under the temporary name in name. flags
 * must hold O_WRONLY or O_RDWR. The descriptor, or -1 with errno set. */
static inline int hv_temp_create_unnamed(int dirfd, char name[HV_TEMP_NAME_LEN + 1], int flags,
					 mode_t mode)
{
	name[0] = '\0';
	if (access("/proc/self/fd", X_OK) == 0) {
		int fd = openat(dirfd, ".", O_TMPFILE | flags | O_CLOEXEC, mode);
		/* Not offered here (EOPNOTSUPP, or EISDIR/EINVAL from kernels and file systems
		 * that predate it): fall back to a name. Other errors would fail that way too. */
		if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
			return -1;
		if (fd >= 0) {
			/* It is named later through /proc/self/fd/N, which must be this process's
			 * own (a /proc of another PID namespace would name another file, or none). */
			char proc[32];
			struct stat a, b;
			snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
			if (fstat(fd, &a) == 0 && stat(proc, &b) == 0 && a.st_dev == b.st_dev &&
			    a.st_ino == b.st_ino)
				return fd;
			close(fd);
		}
	}
	return hv_temp_create_at(dirfd, name, flags, mode);
}

/* Gives the unnamed file fd (hv_temp_create_unnamed) the name name in dirfd; never replaces
 * (EEXIST). 0, or -1 with errno set. */
static inline int hv_temp_link(int fd, int dirfd, const char *name)
{
	char proc[32];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW);
}

/* Gives the unnamed file fd a fresh temporary name in dirfd, into name, to be renamed over
 * its destination. 0, or -1 with errno set (name "" then). */
static inline int hv_temp_link_named(int fd, int dirfd, char name[HV_TEMP_NAME_LEN + 1])
{
	for (unsigned attempt = 0; attempt < HV_TEMP_ATTEMPTS; attempt++) {
		hv_temp_name(name, attempt);
		if (hv_temp_link(fd, dirfd, name) == 0)
			return 0;
		if (errno != EEXIST)
			break;
	}
	int e = errno;
	name[0] = '\0';
	errno = e;
	return -1;
}

/* hv_temp_create_at for a directory given by its path: the file is dir/.hv.XXXXXX, its path
 * malloc'd in *path (the caller frees it; NULL on failure). -1 with errno set. */
static inline int hv_temp_create_in(const char *dir, char **path, int flags, mode_t mode)
{
	*path = NULL;
	size_t n = strlen(dir);
	char *p = malloc(n + 1 + HV_TEMP_NAME_LEN + 1);
	if (!p) {
		errno = ENOMEM;
		return -1;
	}
	int fd = -1;
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		memcpy(p, dir, n);
		p[n] = '/';
		fd = hv_temp_create_at(dfd, p + n + 1, flags, mode);
		int err = errno;
		close(dfd);
		errno = err;
	}
	if (fd < 0) {
		int err = errno;
		free(p);
		errno = err;
		return -1;
	}
	*path = p;
	return fd;
}

#endif
