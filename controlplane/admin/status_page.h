/*
 * The status page: one self-contained HTML file (controlplane/admin/status_page.html,
 * embedded in the binary at build time) that the admin listener serves at
 * GET /. It is a static shell without any fleet data: the data it shows
 * comes from the admin API (GET /workers, GET /status), which the page
 * calls with the bearer token the operator gives it (URL fragment or form).
 * That is why GET / itself needs no token: a browser cannot attach an
 * Authorization header to a navigation, and the shell reveals nothing.
 * It is served with a Content-Security-Policy that lets it talk to its own
 * origin only, and never be framed.
 */
#ifndef SY_CONTROLPLANE_STATUS_PAGE_H
#define SY_CONTROLPLANE_STATUS_PAGE_H

#include <stddef.h>

/* The page's bytes (not NUL-terminated) and their count; static storage. */
const char *adm_status_page(size_t *len);

/* The Content-Security-Policy the page is served with. */
#define ADM_STATUS_PAGE_CSP                                                                        \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "                  \
    "connect-src 'self'; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; "       \
    "base-uri 'none'"

#endif
