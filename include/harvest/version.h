/* harvest — the version of these headers, for a program to test at compile time; hv_version()
 * (types.h) is the version of the library it runs with. The build reads the version from this
 * file, so this is where it is set. */
#ifndef HARVEST_VERSION_H
#define HARVEST_VERSION_H

#define HV_VERSION "0.1.0"
#define HV_VERSION_MAJOR 0
#define HV_VERSION_MINOR 1
#define HV_VERSION_PATCH 0
/* MAJOR * 1000000 + MINOR * 1000 + PATCH: `#if HV_VERSION_NUMBER >= 1002000` for 1.2.0. */
#define HV_VERSION_NUMBER (HV_VERSION_MAJOR * 1000000 + HV_VERSION_MINOR * 1000 + HV_VERSION_PATCH)

#endif
