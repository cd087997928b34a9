/*
 * The release version of switchyard. The shared-memory layout version is a
 * separate number (shm/layout.h): it changes only when the segment's bytes do.
 */
#ifndef SY_COMMON_VERSION_H
#define SY_COMMON_VERSION_H

#define SY_VERSION "0.1.0"

#endif
