/*
 * The public numbers of the shared-memory segment: its layout version, its
 * capacity limits, the sizes of a worker's string fields and the heartbeat
 * timing every process agrees on. Anyone may include this header; the
 * segment's bytes themselves (the structs) are private to shm/, in
 * shm/layout_private.h, and are read elsewhere only through shm/'s
 * functions.
 *
 * The sizes are the layout's own: the config loader must not accept a value
 * the layout cannot hold, so it is checked against these (shm/registry.c),
 * never the other way round. Changing any number here changes the segment's
 * bytes and therefore SHM_LAYOUT_VERSION.
 */
#ifndef SY_SHM_LAYOUT_H
#define SY_SHM_LAYOUT_H

/* Bumped whenever the segment's bytes change; a segment of another layout
 * version is refused on attach. */
/* 2: worker slots carry model aliases; 3: and load reports; 4: and running LoRA adapters */
#define SHM_LAYOUT_VERSION 4u

/* How often a lease holder and the control plane beat, and how the control
 * plane judges a lease whose holder stopped beating. Stored in the header so
 * every process agrees. */
#define SHM_HEARTBEAT_INTERVAL_MS 100u
#define SHM_HEARTBEAT_TIMEOUT_MS  5000u

#define SHM_MAX_DATAPLANES_LIMIT 64u /* the active-lease mask is 64 bits */

/* Bytes of a worker slot's string fields, NUL included (multiples of 8). */
#define SHM_ID_MAX    64
#define SHM_URL_MAX   256
#define SHM_MODEL_MAX 128
/* A worker's other model names (served aliases, adapters), '\n'-separated. */
#define SHM_ALIASES_MAX 256

#endif
