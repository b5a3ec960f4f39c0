/* walk_json — a program built against an installed libharvest: lists the directory given as
 * its argument, one FileInfo JSON object {name, path, is_dir, size} per line, sorted by name,
 * with harvest's walker and JSON writer. Exit status 0, or 1 with harvest's message. */
#include <harvest.h>

#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: walk_json DIR\n");
		return 2;
	}
	hv_walk_opts opts;
	hv_walk_opts_init(&opts);
	hv_walk *w = NULL;
	hv_json *j = NULL;
	hv_status rc = hv_walk_open(&w, argv[1], &opts);
	if (rc == HV_OK)
		rc = hv_json_new_fd(&j, STDOUT_FILENO, HV_CASE_SNAKE);
	const hv_entry *e;
	while (rc == HV_OK && (rc = hv_walk_next(w, &e)) >= 0 && rc != HV_DONE) {
		if (rc == HV_WARN) {
			fprintf(stderr, "walk_json: %s\n", hv_error_last());
			rc = HV_OK;
			continue;
		}
		hv_json_object_begin(j);
		hv_json_key(j, "name");
		hv_json_string(j, e->name, e->name_len);
		hv_json_key(j, "path");
		hv_json_string(j, e->path, e->path_len);
		/* is_dir and size are null when stat failed (a dangling symlink): never guessed */
		hv_json_key(j, "is_dir");
		if (e->have_stat)
			hv_json_bool(j, e->is_dir);
		else
			hv_json_null(j);
		hv_json_key(j, "size");
		if (e->have_stat)
			hv_json_uint(j, e->size);
		else
			hv_json_null(j);
		hv_json_object_end(j);
		hv_json_newline(j);
		rc = hv_json_status(j);
	}
	if (rc == HV_DONE)
		rc = HV_OK;
	if (j && hv_json_flush(j) != HV_OK && rc == HV_OK)
		rc = hv_json_status(j);
	if (rc != HV_OK)
		fprintf(stderr, "walk_json: %s\n", hv_error_last());
	hv_json_free(j);
	hv_walk_close(w);
	return rc == HV_OK ? 0 : 1;
}
