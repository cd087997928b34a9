/*
 * A route's answer, and how a route that cannot answer at once delivers it
 * later. The admin REST server (admin_http.c) turns a reply into an HTTP
 * response; the routes (admin_routes.c) and the load reset (reset_load.c)
 * only fill replies. Keeping the type here, below all three, lets them share
 * it without any of them naming another: a route that answers later is
 * handed a struct adm_reply_later by the server and calls it, instead of
 * calling back into the server by name.
 *
 * Threading: the control plane's loop thread only.
 */
#ifndef SY_CONTROLPLANE_ADMIN_REPLY_H
#define SY_CONTROLPLANE_ADMIN_REPLY_H

#include <jansson.h>

/* A route's answer. Exactly one of json / text is set (or neither for an
 * empty body); the reply owns them until adm_reply_fini. Caller storage. */
struct adm_reply {
    unsigned status;
    json_t *json;
    char *text;        /* malloc'd; served as text/plain (Prometheus) */
    const char *allow; /* static; the Allow header of a 405 */
};

/* Frees the body and zeroes r. Safe on a zeroed reply. */
void adm_reply_fini(struct adm_reply *r);

/* Sets status and {"error": msg}. */
void adm_reply_error(struct adm_reply *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sets status and takes the json reference. */
void adm_reply_json(struct adm_reply *r, unsigned status, json_t *json);

/* Delivers the answer of a request that went asynchronous; takes reply's
 * contents (reply is left zeroed). Called exactly once per request. */
typedef void (*adm_reply_done_fn)(void *arg, struct adm_reply *reply);

/* Registered by the HTTP server for one request; copied by whoever will
 * answer it later. fn == NULL means "nobody is waiting". */
struct adm_reply_later {
    adm_reply_done_fn fn;
    void *arg;
};

/* Calls later->fn(later->arg, reply) and clears later. */
void adm_reply_deliver(struct adm_reply_later *later, struct adm_reply *reply);

#endif
