/* The libmagic worker under its seccomp filter survives what libc does lazily with an open:
 * a thread arena's heap shrinking (which reads /proc/sys/vm/overcommit_memory the first time),
 * dates (the zone file) and error strings in a translated locale. The spawner is forked by a
 * thread other than the main one, in a UTF-8 locale with TZ unset, as a program that uses
 * libharvest from a thread pool does: the worker then allocates from that thread's arena.
 *
 * The test-only switch HARVEST_TEST_WORKER_FAULT=1 makes a file starting "HARVEST-TEST-LIBC"
 * exercise those paths in the worker before it is typed; the same bytes without the switch are
 * typed the same. Before the worker prepared libc, its first heap shrink killed it (SIGSYS). */
#include "testutil.h"
#include "harvest/mime.h"
#include "mime_internal.h"

#include <fcntl.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char libc_text[] = "HARVEST-TEST-LIBC: plain words, nothing else\n";

struct outcome {
	hv_status status[3];
	char type[3][64];
	char error[3][512];
	pid_t pid[3];
	bool locale_set;
};

static void type_one(hv_magic *m, const char *path, struct outcome *o, int i)
{
	o->pid[i] = hvm_magic_worker_pid(m);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	const char *t = NULL;
	o->status[i] = hv_magic_fd(m, fd, path, &t);
	close(fd);
	snprintf(o->type[i], sizeof(o->type[i]), "%s", t ? t : "(none)");
	snprintf(o->error[i], sizeof(o->error[i]), "%s",
		 o->status[i] == HV_OK ? "" : hv_error_last());
}

static void *in_thread(void *arg)
{
	struct outcome *o = arg;
	o->locale_set = setlocale(LC_ALL, "C.UTF-8") != NULL;
	/* The spawner is forked here, by this thread. */
	hv_magic_set_isolation(true, 0);
	hv_magic *m;
	if (hv_magic_open(&m, NULL, 0) != HV_OK)
		return NULL;
	char *dir = tu_mkdtemp();
	tu_write(dir, "libc", libc_text, strlen(libc_text));
	tu_write(dir, "plain", "plain words\n", 12);
	char *libc = tu_path(dir, "libc");
	char *plain = tu_path(dir, "plain");
	type_one(m, libc, o, 0);
	type_one(m, libc, o, 1); /* the same worker again: its heap has shrunk before */
	type_one(m, plain, o, 2);
	hv_magic_close(m);
	free(libc);
	free(plain);
	tu_rmrf(dir);
	free(dir);
	return NULL;
}

static void test_worker_survives_lazy_libc(void **state)
{
	(void)state;
	setenv("HARVEST_TEST_WORKER_FAULT", "1", 1);
	unsetenv("TZ");
	struct outcome o;
	memset(&o, 0, sizeof(o));
	for (int i = 0; i < 3; i++)
		o.status[i] = HV_EIO;
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, in_thread, &o), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(o.locale_set);
	for (int i = 0; i < 3; i++) {
		if (o.status[i] != HV_OK)
			print_message("file %d: %s\n", i, o.error[i]);
		assert_int_equal(o.status[i], HV_OK);
		assert_string_equal(o.type[i], "text/plain");
		/* one worker answered all three: none was killed and replaced */
		assert_true(o.pid[i] > 0);
		assert_int_equal(o.pid[i], o.pid[0]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_worker_survives_lazy_libc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
