/* harvest — everything libharvest offers, one header per concept. */
#ifndef HARVEST_H
#define HARVEST_H

#include "harvest/types.h"
#include "harvest/json.h"
#include "harvest/walk.h"
#include "harvest/files.h"

#endif
