/*
 * CORS (see cors.h). Origins match exactly (scheme, host and port, as
 * browsers send them) or by "*"; header names case-insensitively.
 */
#include "dataplane/http/cors.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define DP_CORS_MAX_AGE "600" /* seconds a browser may cache a preflight (Starlette's) */

static bool dp_cors_has(const struct cfg_str_list *l, const char *v, bool nocase)
{
    for (size_t i = 0; i < l->n; i++)
        if ((nocase ? strcasecmp(l->item[i], v) : strcmp(l->item[i], v)) == 0)
            return true;
    return false;
}

bool dp_cors_enabled(const struct cfg_cors *c)
{
    return c->allowed_origins.n > 0;
}

bool dp_cors_is_preflight(const struct cfg_cors *c, struct MHD_Connection *conn, const char *method)
{
    return dp_cors_enabled(c) && strcmp(method, "OPTIONS") == 0 &&
           MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin") != NULL &&
           MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Method") !=
               NULL;
}

/* The Allow-Origin value for origin, or NULL when it is not allowed. */
static const char *dp_cors_origin(const struct cfg_cors *c, const char *origin)
{
    if (origin == NULL)
        return NULL;
    if (dp_cors_has(&c->allowed_origins, "*", false))
        return "*";
    return dp_cors_has(&c->allowed_origins, origin, false) ? origin : NULL;
}

void dp_cors_add_headers(const struct cfg_cors *c, struct MHD_Connection *conn,
                         struct MHD_Response *resp)
{
    if (!dp_cors_enabled(c) || conn == NULL)
        return;
    const char *allow =
        dp_cors_origin(c, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"));
    if (allow == NULL)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", allow);
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "X-Request-Id");
    if (strcmp(allow, "*") != 0)
        MHD_add_response_header(resp, "Vary", "Origin");
}

/* Every comma-separated name of requested must be allowed. */
static bool dp_cors_headers_ok(const struct cfg_cors *c, const char *requested)
{
    if (requested == NULL || dp_cors_has(&c->allowed_headers, "*", false))
        return true;
    const char *p = requested;
    while (*p != '\0') {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        size_t n = strcspn(p, ", \t");
        if (n == 0)
            break;
        char name[CFG_LIST_ITEM_MAX];
        if (n >= sizeof(name))
            return false;
        memcpy(name, p, n);
        name[n] = '\0';
        /* The CORS-safelisted request headers need no permission. */
        if (strcasecmp(name, "accept") != 0 && strcasecmp(name, "accept-language") != 0 &&
            strcasecmp(name, "content-language") != 0 && strcasecmp(name, "content-type") != 0 &&
            !dp_cors_has(&c->allowed_headers, name, true))
            return false;
        p += n;
    }
    return true;
}

/* method is one of the comma-separated tokens of allow. */
static bool dp_cors_method_ok(const char *allow, const char *method)
{
    size_t n = strlen(method);
    for (const char *p = allow; p != NULL && *p != '\0';) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t t = strcspn(p, ", ");
        if (t == n && n > 0 && strncmp(p, method, n) == 0)
            return true;
        p += t;
    }
    return false;
}

const char *dp_cors_check(const struct cfg_cors *c, const char *origin, const char *method,
                          const char *headers, const char *allow, const char **allow_origin,
                          char *list, size_t list_len, const char **allow_headers)
{
    const char *reason = NULL;
    *allow_origin = dp_cors_origin(c, origin);
    if (*allow_origin == NULL)
        reason = "Disallowed CORS origin";
    else if (method == NULL || !dp_cors_method_ok(allow, method))
        reason = "Disallowed CORS method";
    else if (!dp_cors_headers_ok(c, headers))
        reason = "Disallowed CORS headers";
    *allow_headers = NULL;
    if (dp_cors_has(&c->allowed_headers, "*", false) && headers != NULL) {
        *allow_headers = headers;
    } else if (c->allowed_headers.n > 0) {
        /* A list_len of DP_CORS_ALLOW_HEADERS_MAX holds every name; a
         * shorter one is cut, never overrun (at stops growing past it). */
        size_t at = 0;
        list[0] = '\0';
        for (size_t i = 0; i < c->allowed_headers.n && at < list_len; i++) {
            int n = snprintf(list + at, list_len - at, "%s%s", i ? ", " : "",
                             c->allowed_headers.item[i]);
            at += n > 0 ? (size_t)n : 0;
        }
        *allow_headers = list;
    }
    return reason;
}

int dp_cors_preflight(const struct cfg_cors *c, struct MHD_Connection *conn, const char *allow,
                      struct MHD_Response *resp, const char **reason)
{
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    const char *method =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Method");
    const char *headers =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    const char *allow_origin, *allow_headers;
    char list[DP_CORS_ALLOW_HEADERS_MAX];
    *reason = dp_cors_check(c, origin, method, headers, allow, &allow_origin, list, sizeof(list),
                            &allow_headers);
    MHD_add_response_header(resp, "Vary", "Origin");
    if (allow_origin != NULL)
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", allow_origin);
    char methods[64];
    snprintf(methods, sizeof(methods), "%s, OPTIONS", allow != NULL ? allow : "");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
    if (allow_headers != NULL)
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", allow_headers);
    MHD_add_response_header(resp, "Access-Control-Max-Age", DP_CORS_MAX_AGE);
    return *reason == NULL ? 200 : 400;
}
