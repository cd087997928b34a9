/*
 * The one curl-multi <-> epoll glue (curl's multi_socket interface driven
 * by the caller's epoll loop). curl tells us which sockets to watch and
 * when to call it back; this module mirrors that into an epoll set the
 * caller owns and keeps curl's deadline for the caller's epoll_wait
 * timeout. The caller stays in charge of its loop:
 *
 *   cep_init(&c, &opts)          once: creates the multi handle
 *   cep_add(&c, easy)            start a transfer (never from a curl callback)
 *   epoll_wait(..., cep_timeout_ms(&c, now))
 *   for each event whose data.u64 cep_owns(&c, data):
 *       cep_on_fd_event(&c, cep_fd_of(data), events)
 *   cep_on_timer(&c, now)        every pass: acts only when curl's deadline passed
 *   cep_collect(&c)              finished transfers -> opts.on_done(user, easy, result)
 *
 * Each curl socket is registered in opts.epfd with data.u64 = opts.tag |
 * fd, so one epoll set can serve curl and the caller's own descriptors
 * (give curl a tag whose low 32 bits are 0 and that no other descriptor
 * uses). With opts.park_idle, a socket curl lets go of between transfers
 * (kept-alive connection) stays registered and costs no epoll_ctl pair on
 * reuse; an event on such a parked socket unregisters it. Parking needs
 * cep_easy_setup() on every easy handle (open/close socket callbacks keep
 * the bookkeeping right when a descriptor number is reused).
 *
 * Invariants: curl callbacks only record (epoll interest, deadline);
 * handles are added and removed outside them. on_done runs from
 * cep_collect() for each transfer that finished; it must remove the handle
 * (cep_remove) before reusing or freeing it. The module never frees easy
 * handles; cep_fini() cleans up the multi handle only.
 *
 * Threading: a struct cep and its easy handles belong to one thread (the
 * loop that owns the epoll set); curl_global_init must have run before.
 *
 * Adoption: dataplane/forward/upstream.c's up_socket_cb/up_timer_cb/dp_up_collect
 * and their fd state words become a struct cep with park_idle and
 * tag = DP_TAG_CURL; the controlplane health prober already uses it
 * (tag 0 in its own inner epoll set).
 */
#ifndef SY_COMMON_CURL_EPOLL_H
#define SY_COMMON_CURL_EPOLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include "common/curl_epoll_types.h"

/* Creates the multi handle and installs the callbacks. Returns 0, -EINVAL or -ENOMEM. */
int cep_init(struct cep *c, const struct cep_opts *opts);

/* Cleans up the multi handle (remove your easy handles first). Safe on a zeroed struct. */
void cep_fini(struct cep *c);

/* The multi handle, for curl_multi_setopt (e.g. CURLMOPT_MAXCONNECTS). */
CURLM *cep_multi(const struct cep *c);

/* Sets the options parking relies on; call once per easy handle (no-op without park_idle). */
void cep_easy_setup(struct cep *c, CURL *easy);

/* curl_multi_add_handle / curl_multi_remove_handle. Return 0 or -EIO. */
int cep_add(struct cep *c, CURL *easy);
int cep_remove(struct cep *c, CURL *easy);

/* Whether an epoll event's data.u64 is one of this glue's sockets. */
bool cep_owns(const struct cep *c, uint64_t data);

/* The descriptor in such a data.u64. */
static inline int cep_fd_of(uint64_t data)
{
    return (int)(uint32_t)data;
}

/* Hands an epoll event on fd to curl (events: the epoll_event's events). */
void cep_on_fd_event(struct cep *c, int fd, uint32_t events);

/* Lets curl handle its timeouts when its deadline is at or before now_ms (monotonic). */
void cep_on_timer(struct cep *c, uint64_t now_ms);

/* curl's deadline in monotonic ms, or -1 when it wants none. */
int64_t cep_deadline_ms(const struct cep *c);

/* Milliseconds from now_ms to curl's deadline: -1 none, 0 due; capped at INT32_MAX. */
int cep_timeout_ms(const struct cep *c, uint64_t now_ms);

/* Calls on_done for every finished transfer. */
void cep_collect(struct cep *c);

#endif
