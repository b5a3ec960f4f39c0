/* Private to the collector and what shares its rules: the walk of a collect. Not installed. */
#ifndef HARVEST_COLLECT_INTERNAL_H
#define HARVEST_COLLECT_INTERNAL_H

#include "harvest/collect.h"
#include "harvest/walk.h"

/* Opens the walk a collect or a snapshot of dir makes with o: its excludes, and the default
 * ones (names starting with '.', and __pycache__) unless o->include_hidden; its threads and
 * xdev. `harvest mime DIR` walks the same way. */
int hv_collect_walk_open(hv_walk **w, const char *dir, const hv_collect_opts *o,
			 hv_walk_sort sort);

#endif
