/* A whole run: snapshot, spawn and stream, collect what was produced, record. */
#include "harvest/execute.h"
#include "harvest/json.h"
#include "harvest/sys/store.h"
#include "changes.h"
#include "collect_internal.h"
#include "internal.h"
#include "mime_internal.h"
#include "run_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *hv_argv_json(const char *const *argv)
{
	hv_json *j;
	if (hv_json_new_buffer(&j, HV_CASE_SNAKE) != HV_OK)
		return NULL;
	hv_json_array_begin(j);
	for (size_t i = 0; argv && argv[i]; i++)
		hv_json_string(j, argv[i], strlen(argv[i]));
	hv_json_array_end(j);
	char *out = hv_json_buffer_strdup(j);
	hv_json_free(j);
	return out;
}

/* Without the history the store holds only the MIME cache: without that either, nothing
 * needs it, and it is never opened. */
static bool store_unneeded(const hv_execute_opts *o, const hv_collect_opts *co)
{
	return o->no_history && co->no_cache;
}

/* The store, opened through o->open_store the first time it is needed (co: the collect's
 * options, NULL for the history). A cache the caller marked optional that cannot be opened is
 * a warning to co->on_warning, and co collects without it. */
static hv_status need_store(hv_store **st, const hv_execute_opts *o, hv_collect_opts *co)
{
	if (*st || !o->open_store || (co && store_unneeded(o, co)))
		return HV_OK;
	*st = o->open_store(o->open_store_ctx);
	if (*st)
		return HV_OK;
	if (!co || !o->no_history || !o->cache_optional)
		return HV_EIO;
	static const char tail[] = "; collecting without the MIME cache";
	const char *why = hv_error_last();
	size_t len = strlen(why);
	char *msg = malloc(len + sizeof(tail));
	if (!msg)
		return hv_error_set(HV_ENOMEM, "out of memory");
	memcpy(msg, why, len);
	memcpy(msg + len, tail, sizeof(tail));
	if (co->on_warning)
		hv__call_message_fn(co->on_warning, co->ctx, msg);
	free(msg);
	co->no_cache = true;
	return HV_OK;
}

/* What the run's first change starts ahead of the collect, while the command still runs. */
struct first_change {
	const hv_execute_opts *o;
	bool open_store;    /* no store yet, and one to open through o->open_store */
	bool started;       /* the thread opening it */
	pthread_t thread;
	hv_store *st;       /* what that open gave (NULL: the collect opens it, and says why not) */
};

static void *open_store_early(void *arg)
{
	struct first_change *f = arg;
	f->st = f->o->open_store(f->o->open_store_ctx);
	return NULL;
}

/* The first event of a name below the root: files are being made. Their libmagic worker is
 * started (forked while this process has one thread: the spawner must be), then the store
 * is opened on a thread of its own, so neither waits for the command's end (opening SQLite,
 * its schema checks and WAL index took 3-5 ms of a 10-file run). */
static void on_first_change(void *ctx)
{
	struct first_change *f = ctx;
	hvm_worker_prestart();
	if (f->open_store)
		f->started = pthread_create(&f->thread, NULL, open_store_early, f) == 0;
}

/* The store the first change opened, once its thread is joined (NULL when none was). */
static hv_store *first_change_join(struct first_change *f)
{
	if (f->started) {
		(void)pthread_join(f->thread, NULL);
		f->started = false;
	}
	return f->st;
}

static hv_status execute(hv_store *st, const char *dir, const hv_execute_opts *o,
			 hv_run_chunk_fn on_chunk, void *ctx, hv_execution *out)
{
	memset(out, 0, sizeof(*out));
	char *root = realpath(dir, NULL);
	if (!root) {
		int err = errno;
		return hv_error_errno(HV_ENOTDIR, dir, err);
	}
	/* Bad options are refused before anything is recorded. */
	if (!o->run.argv || !o->run.argv[0] || !o->run.argv[0][0]) {
		free(root);
		return hv_error_set(HV_EUSAGE, "no command to run");
	}
	if (o->changes != HV_CHANGES_AUTO && o->changes != HV_CHANGES_EVENTS &&
	    o->changes != HV_CHANGES_SNAPSHOT) {
		free(root);
		return hv_error_set(HV_EUSAGE, "bad changes mode: %d", (int)o->changes);
	}
	if (!st && !o->open_store && (!o->no_history || !o->collect.no_cache)) {
		free(root);
		return hv_error_set(HV_EUSAGE,
				    "hv_execute: no store for the %s (give st or open_store, or set %s)",
				    o->no_history ? "MIME cache" : "history",
				    o->no_history ? "collect.no_cache" : "no_history");
	}
	for (size_t i = 0; i < o->run.n_env; i++) {
		if (hv_run_check_env(o->run.env[i]) != HV_OK) {
			free(root);
			return HV_EUSAGE;
		}
	}
	hv_collect_opts co = o->collect;
	co.since_snapshot = 0;
	/* With events, nothing is walked before the run, nor after it. Without them, the
	 * snapshot stays in memory: nothing of it is written, and the one walk after the run
	 * compares against it. */
	hv_changes *ch = NULL;
	hv_mem_snapshot *snap = NULL;
	int rc = HV_OK;
	if (o->changes != HV_CHANGES_SNAPSHOT) {
		rc = hv_changes_start(root, &co, &ch);
		if (rc != HV_OK && o->changes == HV_CHANGES_EVENTS) {
			rc = hv_error_set(HV_EIO, "--changes events: %s", hv_error_last());
			free(root);
			return rc;
		}
		if (rc != HV_OK && !(out->changes_note = strdup(hv_error_last()))) {
			free(root);
			return hv_error_set(HV_ENOMEM, "out of memory");
		}
		rc = HV_OK;
	}
	out->changes = ch ? "events" : "snapshot";
	/* With events nothing is listed before the run, under auto too: what the events cannot
	 * tell (an overflow, a mount below root...) is answered after it by the files changed
	 * since it started. */
	if (!ch)
		rc = hv_snapshot_take_mem(st, root, &co, &snap);
	char *command = NULL;
	int64_t recorded_start_ns = 0; /* the start the history records, when it does */
	if (rc == HV_OK && !o->no_history)
		rc = need_store(&st, o, NULL);
	/* What the run will need is checked with everything before it open, so a process short
	 * of descriptors is refused before a history row is begun for a command that could not
	 * have started (it was left "not recorded"). */
	_Static_assert(HVR_RUN_FDS >= HVC_WALK_FDS, "the run's need covers the walk's");
	int avail;
	if (rc == HV_OK)
		rc = hvc_check_fds(root, HVR_RUN_FDS - HVC_WALK_FDS, &avail);
	if (rc == HV_OK && !o->no_history) {
		command = hv_argv_json(o->run.argv);
		hv_run_start start = {.label = o->label, .command_json = command, .dir = root,
				     .host = o->host, .started_at_ns = hv_store_now_ns()};
		recorded_start_ns = start.started_at_ns;
		rc = command ? hv_store_run_begin(st, &start, &out->run_id)
			     : hv_error_set(HV_ENOMEM, "out of memory");
		if (rc == HV_OK)
			hv__store_file_note(st);
	}
	if (rc != HV_OK) {
		hv_changes_free(ch);
		hv_mem_snapshot_free(snap);
		free(command);
		free(root);
		return rc;
	}
	hv_run_opts ro = o->run;
	ro.cwd = root;
	/* The events are read while the command runs, on this thread (see hv_changes_pump). The
	 * first one below root says files are being made: their libmagic worker and the store
	 * get ready while the command runs. */
	struct first_change first = {
		.o = o, .open_store = !st && o->open_store && !store_unneeded(o, &o->collect)};
	if (ch)
		hv_changes_on_first(ch, on_first_change, &first);
	rc = hv__run_watched(&ro, on_chunk, ctx, &out->run, ch ? hv_changes_fd(ch) : -1,
			     ch ? hv_changes_pump : NULL, ch);
	/* Joined at once: from here on this thread is the only one, as before the run. */
	hv_store *early = first_change_join(&first);
	if (!st)
		st = early;
	if (rc != HV_OK) {
		/* Not run, or stopped (a callback's failure, harvest's own): what it produced is
		 * unknown, so the history ends it as not recorded, and it has no id to give out
		 * (a run ended as it should be is one whose artifacts are all there). */
		if (out->run_id) {
			hv_error_saved saved;
			hv_error_save(&saved);
			hv_run_end end = {.duration_ms = -1, .end_reason = HV_END_NOT_RECORDED};
			hv_store_run_finish(st, out->run_id, &end, NULL, 0);
			hv_error_restore(&saved, rc);
			out->run_id = 0;
		}
		hv_changes_free(ch);
		hv_mem_snapshot_free(snap);
		free(command);
		free(root);
		return rc;
	}
	/* The start the history shows: a page of this run, or anything else made from this
	 * result, then agrees with the history's (the command itself starts a few ms later). */
	if (recorded_start_ns)
		out->run.started_at_ns = recorded_start_ns;
	const hv_run_result *r = &out->run;
	out->end = (hv_run_end){
		.ended_at_ns = r->ended_at_ns,
		.has_exit_code = true,
		.exit_code = r->exit_code,
		.timed_out = r->timed_out,
		.end_reason = r->cancelled ? HV_END_CANCELLED : NULL,
		.duration_ms = (int64_t)r->duration_ms,
		.stdout_data = r->stdout_data,
		.stdout_len = r->stdout_len,
		.stdout_truncated = r->stdout_truncated,
		.stderr_data = r->stderr_data,
		.stderr_len = r->stderr_len,
		.stderr_truncated = r->stderr_truncated,
	};
	if (ch) {
		hv_change_set cs;
		hv_changes_stop(ch);
		out->collect_status = hv_changes_result(ch, st, &cs);
		const char *why = hv_changes_why(ch);
		if (out->collect_status == HV_EIO && why && o->changes == HV_CHANGES_AUTO) {
			out->changes = "ctime";
			free(out->changes_note);
			out->changes_note = strdup(why);
			out->collect_status = out->changes_note
						      ? hv_changes_result_since(ch, st, &cs)
						      : hv_error_set(HV_ENOMEM, "out of memory");
		}
		hv_changes_free(ch);
		if (out->collect_status == HV_OK) {
			hv_mem_snapshot_free(snap);
			snap = NULL;
			/* Files to type: their libmagic worker starts now unless it did with the
			 * first change, and gets ready while the store opens and the collect
			 * begins (a thread that drained the events is gone: nothing but this one
			 * runs). */
			if (cs.n > 0)
				hvm_worker_prestart();
			/* Nothing produced: no file needs the MIME cache, so the store is not
			 * opened (nor created) for it. */
			hv_collect_opts cco = co;
			if (!st && cs.n == 0 && o->open_store)
				cco.no_cache = true;
			else
				out->collect_status = need_store(&st, o, &cco);
			if (out->collect_status == HV_OK)
				out->collect_status =
					hv_collect_change_set(st, root, &cco, &cs, &out->files);
			hv_change_set_free(&cs);
		}
	} else {
		out->collect_status = need_store(&st, o, &co);
		if (out->collect_status == HV_OK)
			out->collect_status = hv_collect_since_mem(st, root, &co, snap, &out->files);
		hv_mem_snapshot_free(snap);
	}
	if (out->collect_status == HV_OK && out->run_id) {
		int64_t id = out->run_id;
		/* On a failure midway the store ends the run itself, as not recorded. */
		out->collect_status = hv_collection_record(st, out->files, NULL, &out->end, &id);
		/* A command that removed or replaced the database: the run went into a file no
		 * one can open again, so it has no id to give out. */
		if (out->collect_status == HV_OK)
			out->collect_status = hv__store_file_check(st);
		out->recording_failed = out->collect_status != HV_OK;
	} else if (out->collect_status != HV_OK && out->run_id) {
		/* Collecting failed: its artifacts are unknown. The history says so (end_reason
		 * not_recorded) rather than show a run that ended normally and produced nothing. */
		hv_error_saved saved;
		hv_error_save(&saved);
		hv_run_end end = out->end;
		end.end_reason = HV_END_NOT_RECORDED;
		hv_store_run_finish(st, out->run_id, &end, NULL, 0);
		hv_error_restore(&saved, out->collect_status);
	}
	if (out->collect_status != HV_OK) {
		/* The run is not completely recorded, so it has no id to give out. */
		out->run_id = 0;
	}
	free(command);
	free(root);
	return HV_OK;
}

hv_status hv_execute(hv_store *st, const char *dir, const hv_execute_opts *o,
		     hv_run_chunk_fn on_chunk, void *ctx, hv_execution *out)
{
	HV_NEED(out);
	memset(out, 0, sizeof(*out));
	HV_NEED(dir && o);
	hv_status rc = execute(st, dir, o, on_chunk, ctx, out);
	/* The child that handed the change events' descriptor over has long exited by now. */
	hv_changes_reap();
	return rc;
}

void hv_execute_opts_init(hv_execute_opts *o)
{
	memset(o, 0, sizeof(*o));
	hv_run_opts_init(&o->run);
	hv_collect_opts_init(&o->collect);
}

void hv_execution_free(hv_execution *e)
{
	if (!e)
		return;
	hv_run_result_free(&e->run);
	hv_collection_free(e->files);
	free(e->changes_note);
	memset(e, 0, sizeof(*e));
}
