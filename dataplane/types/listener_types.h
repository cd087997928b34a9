/*
 * The listener's state in a loop (struct dp_lst, embedded in struct
 * dp_loop): types only, apart from listener.h's functions, so loop.h can
 * embed it without depending on the listener, which includes loop.h.
 * Touched only by listener.c once the loop's driver has cleared it.
 */
#ifndef SY_DATAPLANE_CORE_LISTENER_TYPES_H
#define SY_DATAPLANE_CORE_LISTENER_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "common/list_types.h"

struct MHD_Daemon;
struct dp_conn;
struct dp_lst_handlers;
struct dp_request;

/* A loop's HTTP side (in struct dp_loop; touched only by listener.c). */
struct dp_lst {
    struct MHD_Daemon *mhd;
    int listen_fd;                /* the daemon's listening socket (set once at start) */
    struct MHD_Daemon *plain;     /* dataplane.plain_listen's daemon, or NULL */
    struct list_node conns;       /* every open client connection (dp_conn.link), newest first */
    unsigned n_conns;             /* how many are on conns */
    struct list_node watch_queue; /* parked, not yet watched (dp_request.watch_link) */
    bool quiesced;                /* the daemon stopped accepting (dp_listener_quiesce ran) */
    bool due;                     /* run MHD at the end of this pass (a resume) */
    const struct dp_lst_handlers *handlers; /* borrowed, static */
    uint64_t next_sweep_ms;                 /* dp_listener_enforce_deadlines */
};

#endif
