/* Whole writes, and waits, on descriptors a caller may have left non-blocking (a pipe shared
 * with a Node.js parent gives EAGAIN, which is not an error for a writer that can wait): one
 * loop for the JSON writer, the file commands, `history get`, the stored-bytes writer and the
 * CLI's stdout. Not part of the public API. */
#ifndef HARVEST_FDIO_H
#define HARVEST_FDIO_H

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <unistd.h>

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
