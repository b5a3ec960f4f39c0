/* Private to the MIME module: what mime.c needs from mime_refine.c. Not installed. */
#ifndef HARVEST_MIME_INTERNAL_H
#define HARVEST_MIME_INTERNAL_H

#include "harvest/mime.h"

/* The process-wide default refinement db ("/usr/share/mime"), parsed on the first call; later
 * calls, from any thread, get the same immutable db or the same error. */
hv_status hv_mime_default_db(const hv_mime_db **out);

#endif
