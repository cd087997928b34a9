/*
 * Worker URLs of id routes (see id_route.h). The query is rebuilt rather
 * than kept raw because libmicrohttpd gives the handler only the decoded
 * arguments; curl_easy_escape encodes each name and value again.
 */
#include "dataplane/http/id_route.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "dataplane/core/routes.h"
#include "dataplane/types/request_types.h"

_Static_assert(DP_ID_ROUTE_ID_MAX < DP_RESP_ID_MAX, "a valid id fits a request's resp_id");

struct id_query {
    char *out;
    size_t cap, len;
    bool first;
    int rc;
};

static void id_append(struct id_query *q, const char *s)
{
    size_t n = strlen(s);
    if (q->rc != 0 || q->len + n + 1 > q->cap) {
        q->rc = q->rc != 0 ? q->rc : -ENAMETOOLONG;
        return;
    }
    memcpy(q->out + q->len, s, n + 1);
    q->len += n;
}

static enum MHD_Result id_add_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    (void)kind;
    struct id_query *q = cls;
    if (key == NULL)
        return MHD_YES;
    char *k = curl_easy_escape(NULL, key, 0);
    char *v = value != NULL ? curl_easy_escape(NULL, value, 0) : NULL;
    if (k == NULL || (value != NULL && v == NULL)) {
        q->rc = -ENOMEM;
    } else {
        id_append(q, q->first ? "?" : "&");
        id_append(q, k);
        if (v != NULL) {
            id_append(q, "=");
            id_append(q, v);
        }
    }
    q->first = false;
    curl_free(k);
    curl_free(v);
    return q->rc == 0 ? MHD_YES : MHD_NO;
}

bool dp_id_route_id_is_valid(const char *id)
{
    size_t n = 0;
    for (; id[n] != '\0'; n++) {
        unsigned char c = (unsigned char)id[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok || n >= DP_ID_ROUTE_ID_MAX)
            return false;
    }
    return n > 0;
}

int dp_id_route_url(const struct dp_request *req, const char *base, char *out, size_t cap)
{
    if (!dp_id_route_id_is_valid(req->resp_id))
        return -EINVAL;
    const struct dp_route_row *row = dp_route_row(req->route);
    int n = snprintf(out, cap, "%s%s%s%s", base, row->upstream_path, req->resp_id,
                     row->id_suffix != NULL ? row->id_suffix : "");
    if (n < 0 || (size_t)n >= cap)
        return -ENAMETOOLONG;
    struct id_query q = {.out = out, .cap = cap, .len = (size_t)n, .first = true};
    if (req->conn != NULL)
        MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, id_add_arg, &q);
    return q.rc;
}
