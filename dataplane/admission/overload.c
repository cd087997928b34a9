/*
 * Honest overload answers (see overload.h). Retry-After is read from the
 * worker's kept response headers: delta-seconds, or an HTTP date
 * (curl_getdate), whichever the worker sent.
 */
#include "dataplane/admission/overload.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "dataplane/types/request_types.h"

#define DP_OVERLOAD_RETRY_MAX 3600u

/* Seconds of the Retry-After among "Name: value\n" lines; 0 = none. */
static uint32_t overload_retry_after(const char *hdrs)
{
    for (const char *line = hdrs; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t len = eol != NULL ? (size_t)(eol - line) : strlen(line);
        if (len > 12 && strncasecmp(line, "retry-after:", 12) == 0) {
            char v[64];
            size_t n = len - 12 < sizeof(v) - 1 ? len - 12 : sizeof(v) - 1;
            memcpy(v, line + 12, n);
            v[n] = '\0';
            char *s = v;
            while (*s == ' ' || *s == '\t')
                s++;
            char *end;
            unsigned long secs = strtoul(s, &end, 10);
            if (end == s) {
                time_t at = curl_getdate(s, NULL);
                time_t now = time(NULL);
                secs = at > now ? (unsigned long)(at - now) : 1;
            }
            if (secs == 0)
                secs = 1;
            return secs > DP_OVERLOAD_RETRY_MAX ? DP_OVERLOAD_RETRY_MAX : (uint32_t)secs;
        }
        line = eol != NULL ? eol + 1 : NULL;
    }
    return 0;
}

void dp_overload_note(struct dp_request *req, long status)
{
    struct dp_adm_req *r = &req->adm;
    if (req->attempts <= 1 || r->overload_leg != req->leg) {
        /* The first attempt of a leg: earlier legs' outcomes do not count. */
        r->overloaded = 0;
        r->overload_retry_s = 0;
        r->overload_leg = req->leg;
    }
    if (status != 429 && status != 503)
        return;
    r->overloaded++;
    r->overload_status = (int)status;
    uint32_t ra = overload_retry_after(req->resp_hdrs);
    if (ra != 0 && (r->overload_retry_s == 0 || ra < r->overload_retry_s))
        r->overload_retry_s = ra;
}

bool dp_overload_all(struct dp_request *req, int *status)
{
    const struct dp_adm_req *r = &req->adm;
    if (req->attempts == 0 || r->overload_leg != req->leg || r->overloaded != req->attempts)
        return false;
    *status = r->overload_status;
    req->retry_after_s = r->overload_retry_s != 0 ? r->overload_retry_s : 1;
    return true;
}
