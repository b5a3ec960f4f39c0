/* A collection's spooled contents (hv_collect_opts.spool_content): one unnamed temporary file
 * that the collector appends each final content to, so that what a collect holds in memory
 * is its read-ahead window, not the sum of its files. The file has no name (O_TMPFILE, else
 * unlinked at once): nothing is left behind by a harvest that is killed. */
#include "harvest/collect.h"
#include "collect_internal.h"
#include "internal.h"
#include "temp_name.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct hv_content_spool {
	int fd;
	uint64_t size; /* bytes written so far: the next content's offset */
	int failed;    /* the errno of the first write that failed (atomic), else 0 */
	char *dir;     /* where the file is, for messages */
};

/* An unnamed file in dir: O_TMPFILE where the file system has it, else a name removed at
 * once. -1 with errno set when neither works. */
static int unnamed_file(const char *dir)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0)
		return fd;
	/* the one temporary name of temp_name.h, for the moment before the unlink */
	char *tmp = NULL;
	fd = hv_temp_create_in(dir, &tmp, O_RDWR, 0600);
	if (fd >= 0)
		unlink(tmp);
	free(tmp);
	return fd;
}

hv_status hvc_spool_open(hv_content_spool **out)
{
	*out = NULL;
	const char *dir = getenv("TMPDIR");
	if (!dir || !*dir)
		dir = "/tmp";
	int fd = unnamed_file(dir);
	if (fd < 0)
		return hv_error_set(HV_EIO, "%s: no temporary file for the contents (kept in memory): %s",
				    dir, strerror(errno));
	hv_content_spool *s = calloc(1, sizeof(*s));
	if (!s || !(s->dir = strdup(dir))) {
		free(s);
		close(fd);
		return hv_error_set(HV_ENOMEM, "out of memory");
	}
	s->fd = fd;
	*out = s;
	return HV_OK;
}

uint64_t hvc_spool_reserve(hv_content_spool *s, uint64_t n)
{
	/* Any thread: the workers write the files they read, each into its own region. */
	return __atomic_fetch_add(&s->size, n, __ATOMIC_RELAXED);
}

hv_status hvc_spool_write(hv_content_spool *s, uint64_t off, const void *data, size_t n)
{
	const char *p = data;
	size_t done = 0;
	while (done < n) {
		ssize_t w = pwrite(s->fd, p + done, n - done, (off_t)(off + done));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int err = w < 0 ? errno : ENOSPC, none = 0;
			__atomic_compare_exchange_n(&s->failed, &none, err, false, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED);
			return hv_error_errno(HV_EIO, "the temporary file of the contents", err);
		}
		done += (size_t)w;
	}
	return HV_OK;
}

hv_status hvc_spool_put(hv_content_spool *s, const void *data, size_t n, uint64_t *off)
{
	*off = hvc_spool_reserve(s, n);
	return hvc_spool_write(s, *off, data, n);
}

hv_status hvc_spool_read(const hv_content_spool *s, uint64_t off, void *buf, size_t n)
{
	char *p = buf;
	size_t done = 0;
	while (done < n) {
		ssize_t r = pread(s->fd, p + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return hv_error_errno(HV_EIO, "the temporary file of the contents",
					      r < 0 ? errno : EIO);
		done += (size_t)r;
	}
	return HV_OK;
}

int hvc_spool_failed(const hv_content_spool *s)
{
	return __atomic_load_n(&s->failed, __ATOMIC_RELAXED);
}

const char *hvc_spool_dir(const hv_content_spool *s)
{
	return s->dir;
}

void hvc_spool_close(hv_content_spool *s)
{
	if (!s)
		return;
	close(s->fd);
	free(s->dir);
	free(s);
}

hv_status hv_collection_content_read(const hv_collection *c, const hv_output_file *f, uint64_t off,
				     void *buf, size_t n)
{
	HV_NEED(c && f && (buf || n == 0));
	if (off > f->content_len || n > f->content_len - off ||
	    (!f->content && !(f->spooled && c->spool)))
		return hv_error_set(HV_EUSAGE, "%s: no such part of the content", f->path);
	if (n == 0)
		return HV_OK;
	if (f->content) {
		memcpy(buf, f->content + off, n);
		return HV_OK;
	}
	return hvc_spool_read(c->spool, f->spool_off + off, buf, n);
}
