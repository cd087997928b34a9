/*
 * switchyard-ctl's one way of talking to the admin API: a single blocking
 * HTTP request with libcurl, bearer token attached, answer read into a capped
 * buffer and parsed as JSON when it is JSON. A command-line client makes one
 * or two requests and exits, so there is no connection reuse and no event
 * loop: simple blocking calls are the right tool.
 *
 * Ownership: struct ctl_conn is caller storage and borrows its strings;
 * struct ctl_answer is caller storage, ctl_answer_fini frees what it owns.
 * One thread; curl_global_init must have run.
 */
#ifndef SY_CTL_CTL_HTTP_H
#define SY_CTL_CTL_HTTP_H

#include <stddef.h>

#include <jansson.h>

/* Largest answer read (a GET /workers of a full registry stays far below). */
#define CTL_ANSWER_MAX (32u << 20)

/* Where and how to reach the admin API. Borrowed strings. */
struct ctl_conn {
    const char *base;  /* "http://127.0.0.1:8081", no trailing slash */
    const char *token; /* NULL = send no Authorization header */
    long timeout_ms;   /* whole request */
};

/* One answer. status 0 = none arrived (err says why). */
struct ctl_answer {
    long status;
    char *body; /* NUL-terminated; owned; NULL when none */
    size_t len;
    json_t *json; /* the body parsed, or NULL when it is not JSON */
    char err[256];
};

/*
 * Sends method path (body may be NULL) and fills out. Returns 0 when an
 * answer arrived (any status), -EHOSTUNREACH when the admin API could not
 * be reached or did not answer in time (out->err says why), -ENOMEM.
 */
int ctl_http_request(const struct ctl_conn *c, const char *method, const char *path,
                     const char *body, struct ctl_answer *out);

void ctl_answer_fini(struct ctl_answer *a);

#endif
