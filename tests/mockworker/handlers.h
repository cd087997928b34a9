/*
 * The HTTP side of the mock worker: routing, the vLLM endpoints, the
 * /mock/ controls and the per-request state machine of an inference request
 * (receive, stall fault, fail fault, queue, prefill, generate, respond or
 * stream). The loops in server.c call these from libmicrohttpd's callbacks
 * and from their own events.
 *
 * Threading: every function runs on the thread of the request's loop.
 */
#ifndef SY_TESTS_MOCKWORKER_HANDLERS_H
#define SY_TESTS_MOCKWORKER_HANDLERS_H

#include "tests/mockworker/request.h"

#include <microhttpd.h>

/* MHD's access handler for loop (same arguments). */
enum MHD_Result mw_handle_access(struct mw_loop *loop, struct mw_server *server,
                                 struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *upload_data, size_t *upload_data_size, void **con_cls);

/*
 * The client of a parked request hung up (shutdown = false) or the server is
 * stopping (true): release its inflight count and engine slot now and make
 * the next callback fail. The caller unparks it afterwards.
 */
void mw_handle_gone(struct mw_req *req, bool shutdown);

/* MHD's completion callback: accounts the end and frees req (NULL is a no-op). */
void mw_handle_completed(struct mw_req *req, enum MHD_RequestTerminationCode toe);

#endif
