/* harvest — everything libharvest offers, one header per concept. */
#ifndef HARVEST_H
#define HARVEST_H

#include "harvest/version.h"
#include "harvest/common.h"
#include "harvest/types.h"
#include "harvest/json.h"
#include "harvest/parse.h"
#include "harvest/walk.h"
#include "harvest/files.h"
#include "harvest/mime.h"
#include "harvest/store.h"
#include "harvest/collect.h"
#include "harvest/run.h"
#include "harvest/execute.h"
#include "harvest/archive.h"
#include "harvest/page.h"
#include "harvest/records.h"

#endif
