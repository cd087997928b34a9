/*
 * One admin-API request with libcurl's easy interface (see ctl_http.h).
 * Proxy variables are ignored, as the daemons ignore them: the admin API
 * is on loopback or a cluster address, and an http_proxy meant for the
 * internet must not receive the bearer token.
 */
#include "ctl/ctl_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "common/buf.h"

static size_t ctl_collect(char *data, size_t size, size_t n, void *arg)
{
    struct buf *b = arg;
    return buf_append(b, data, size * n) == 0 ? size * n : 0;
}

int ctl_http_request(const struct ctl_conn *c, const char *method, const char *path,
                     const char *body, struct ctl_answer *out)
{
    memset(out, 0, sizeof(*out));
    char url[1024];
    if ((size_t)snprintf(url, sizeof(url), "%s%s", c->base, path) >= sizeof(url)) {
        snprintf(out->err, sizeof(out->err), "admin URL too long");
        return -ENAMETOOLONG;
    }
    CURL *e = curl_easy_init();
    if (e == NULL) {
        snprintf(out->err, sizeof(out->err), "out of memory");
        return -ENOMEM;
    }
    struct buf b;
    buf_init(&b, CTL_ANSWER_MAX);
    struct curl_slist *hdrs = NULL;
    char auth[4200];
    if (c->token != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->token);
        hdrs = curl_slist_append(hdrs, auth);
        explicit_bzero(auth, sizeof(auth));
    }
    hdrs = curl_slist_append(hdrs, "Expect:");
    /* Every state-changing request says it is JSON, bodyless ones too: the
     * admin API refuses a POST without it (controlplane/admin/admin_guard.h),
     * so that no web page can send one through a browser. */
    if (body != NULL || strcmp(method, "GET") != 0)
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms < 5000 ? c->timeout_ms : 5000L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, ctl_collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    if (body != NULL) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
    }
    CURLcode res = curl_easy_perform(e);
    int rc = 0;
    if (res != CURLE_OK) {
        snprintf(out->err, sizeof(out->err), "cannot reach the admin API at %s: %s", c->base,
                 curl_easy_strerror(res));
        rc = b.err == -ENOMEM ? -ENOMEM : -EHOSTUNREACH;
    } else {
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &out->status);
        out->len = b.len;
        out->body = buf_detach(&b, NULL);
        if (out->body != NULL)
            out->json = json_loadb(out->body, out->len, 0, NULL);
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(e);
    buf_fini(&b);
    return rc;
}

void ctl_answer_fini(struct ctl_answer *a)
{
    json_decref(a->json);
    free(a->body);
    memset(a, 0, sizeof(*a));
}
