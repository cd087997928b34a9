/* The types of curl_epoll.h: types only, including only types headers. */
#ifndef SY_COMMON_CURL_EPOLL_TYPES_H
#define SY_COMMON_CURL_EPOLL_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <curl/curl.h>

/* A finished transfer; result is curl's. Runs from cep_collect(). */
typedef void (*cep_done_fn)(void *user, CURL *easy, CURLcode result);

struct cep_opts {
    int epfd;       /* caller's epoll set; borrowed, outlives the struct cep */
    uint64_t tag;   /* high bits of data.u64 for curl sockets; low 32 bits 0 */
    bool park_idle; /* keep released sockets registered (see above) */
    cep_done_fn on_done;
    void *user;
    /* When set, a socket the epoll set refuses is logged as a warning,
     * "epoll_ctl on <log_name> socket <fd>: <error>" (the transfer is then
     * ended by curl's own timeouts); NULL: silent. Borrowed, static. */
    const char *log_name;
};

/* Caller storage; cep_init / cep_fini. Touch through the API only. */
struct cep {
    CURLM *multi;
    int epfd;
    uint64_t tag;
    bool park_idle;
    cep_done_fn on_done;
    void *user;
    const char *log_name;
    int64_t deadline_ms; /* curl's timer, monotonic ms; -1 = none */
    uint32_t *fds;       /* park_idle: a state word per descriptor number */
    size_t n_fds;
};

#endif
