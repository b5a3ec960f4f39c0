/* Whole writes, and waits, on descriptors a caller may have left non-blocking (a pipe shared
 * with a Node.js parent gives EAGAIN, which is not an error for a writer that can wait): one
 * loop for the JSON writer, the file commands, `history get`, the stored-bytes writer and the
 * CLI's stdout; and the one read of a small /proc file. Not part of the public API. */
#ifndef HARVEST_FDIO_H
#define HARVEST_FDIO_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <unistd.h>

/* Reads a small file (of /proc, read in one call) into buf, NUL-terminated: its length, or -1
 * with errno set when it cannot be opened or read. */
static inline ssize_t hv_read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size - 1);
	int err = errno;
	close(fd);
	if (n < 0) {
		errno = err;
		return -1;
	}
	buf[n] = '\0';
	return n;
}

/* Waits until fd can be read (events POLLIN) or written (POLLOUT): 0, or -1 with errno set
 * when poll itself fails (then the caller fails too, rather than retry forever). */
static inline int hv_fd_wait(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};
	for (;;) {
		if (poll(&p, 1, -1) >= 0)
			return 0;
		if (errno != EINTR)
			return -1;
	}
}

/* Writes all n bytes of p to fd, waiting out EAGAIN and EINTR: 0, or -1 with errno set (EIO
 * for a write that took nothing). */
static inline int hv_write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w > 0) {
			c += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (hv_fd_wait(fd, POLLOUT) == 0)
				continue;
			return -1;
		}
		if (w == 0)
			errno = EIO;
		return -1;
	}
	return 0;
}

#endif
