/*
 * The access log: one JSON line per client request (fields in
 * docs/operations.md, "Reading the access log"; the line is written by
 * access_log_line.h), to stderr or to the file of dataplane.access_log.
 *
 * The event loops never wait for it. Each loop appends its lines to a ring
 * of its own (spsc_ring.h, dataplane.access_log_buffer bytes); a line that
 * does not fit is dropped and counted in
 * switchyard_access_log_dropped_total. One writer thread empties the rings
 * into the file. A thread rather than non-blocking writes from the loops:
 * O_NONBLOCK means nothing for a regular file, so a write(2) to a slow or
 * stalled disk (writeback throttling, a full NFS server) would stop the
 * loop that made it, and with it every stream it serves. The writer
 * batches: after writing it waits DP_ALOG_BATCH_MS before looking again,
 * so a busy data plane makes a few large writes a second per loop, and an
 * idle one none (the writer sleeps until a loop wakes it, which a loop does
 * only when the writer said it was going to sleep).
 *
 * Log rotation: dp_alog_reopen (the data plane calls it on SIGUSR1) makes
 * the writer open the path again and write every later line there; lines
 * already in the rings go to whichever file is open when they are written,
 * none is lost. Rename the file, send SIGUSR1, and the old file is
 * complete once the new one appears.
 *
 * Threading: dp_alog_open / dp_alog_reopen / dp_alog_close on the main
 * thread; dp_alog_write on event-loop i for ring i (one producer per ring).
 */
#ifndef SY_DATAPLANE_ACCESS_LOG_H
#define SY_DATAPLANE_ACCESS_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

#define DP_ALOG_MAX_LOOPS 256u
#define DP_ALOG_BATCH_MS  10u

struct dp_alog;

/* True when dataplane.access_log asks for no log ("off" or ""). */
bool dp_alog_is_off(const char *setting);

/* Starts the log of cfg (dataplane.access_log, access_log_buffer): *out
 * NULL when it is off. dropped counts the lines dropped (owned by the
 * caller, outlives the log). 0, or -errno when the file cannot be opened
 * (the reason is logged). */
int dp_alog_open(const struct cfg *cfg, _Atomic uint64_t *dropped, struct dp_alog **out);

/* Writes every line still in the rings, stops the writer, closes the file.
 * NULL is a no-op. Call after the loops stopped. */
void dp_alog_close(struct dp_alog *log);

/* Event loop `index`: queues one line (with its '\n'); dropped and counted
 * when its ring is full. */
void dp_alog_write(struct dp_alog *log, unsigned index, const char *line, size_t len);

/* Asks the writer to open the file again (log rotation). Any thread. */
void dp_alog_reopen(struct dp_alog *log);

#endif
