/*
 * What the admin REST routes share: borrowed pointers to the control
 * plane's parts, plus the reply type every route fills. Types only; the
 * objects are created and destroyed by controlplane.c, which outlives every
 * request. Everything here is touched by the control plane's loop thread
 * only.
 */
#ifndef SY_CONTROLPLANE_ADMIN_CTX_H
#define SY_CONTROLPLANE_ADMIN_CTX_H

#include <jansson.h>
#include <stdint.h>

#include "common/config.h"
#include "shm/segment.h"

struct hc_prober;
struct adm_channel;
struct cp_reset;
struct adm_http;
struct adm_pending;

/* Borrowed by every route; lives as long as the control plane's loop. */
struct adm_ctx {
    const struct cfg *cfg;
    struct shm_segment *seg;
    struct hc_prober *hc;
    struct adm_channel *chan;
    struct cp_reset *reset;
    struct adm_http *http;
    uint64_t started_ms; /* monotonic */
};

/* A route's answer. Exactly one of json / text is set (or neither for an
 * empty body); the reply owns them until adm_reply_fini. */
struct adm_reply {
    unsigned status;
    json_t *json;
    char *text;        /* malloc'd; served as text/plain (Prometheus) */
    const char *allow; /* static; the Allow header of a 405 */
};

void adm_reply_fini(struct adm_reply *r);

/* Sets status and {"error": msg}. */
void adm_reply_error(struct adm_reply *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sets status and takes the json reference. */
void adm_reply_json(struct adm_reply *r, unsigned status, json_t *json);

#endif
