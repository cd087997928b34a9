/*
 * The e2e harness's one reader of Prometheus samples (contract in
 * harness.h). Tests check counters and gauges of the data plane's, the
 * control plane's and the mock workers' /metrics pages; they all read a
 * sample the same way, here, so that "the value of series X" means one
 * thing in every test: the line that starts with X followed by a space.
 *
 * No parsing of the exposition format beyond that: HELP and TYPE lines
 * never start with a series name, and a test that needs the whole page
 * (families, buckets, labels it does not know) reads the body itself.
 * Stateless; callable from any thread, like the HTTP helpers it uses.
 */
#include "tests/e2e/harness.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Finds the line "<sample> <value>": true and *value, or false. */
static bool h_metric_find(const char *text, const char *sample, long long *value)
{
    size_t n = strlen(sample);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, sample, n) == 0 && line[n] == ' ') {
            *value = strtoll(line + n + 1, NULL, 10);
            return true;
        }
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return false;
}

long long h_metric_in(const char *text, const char *sample)
{
    long long v;
    return h_metric_find(text, sample, &v) ? v : -1;
}

int h_metric_get(const char *url, const char *sample, long long *value)
{
    struct h_resp resp;
    int rc = h_http_get(url, &resp);
    *value = -1;
    if (rc == 0 && resp.status != 200)
        rc = -EPROTO;
    if (rc == 0 && !h_metric_find(resp.body, sample, value))
        rc = -ENOENT;
    h_resp_fini(&resp);
    return rc;
}

long long h_metric_at(const char *url, const char *sample)
{
    long long v;
    (void)h_metric_get(url, sample, &v);
    return v;
}
