/*
 * Unit tests of dp_up_request_sent (dataplane/forward/upstream.h), what a held
 * stream gives back once its request is out and its response has begun:
 * the request's upstream header list is freed, the trace context no longer
 * points into it (a later span rewrite is a no-op, not a write into freed
 * memory), and the easy handle of the attempt no longer refers to it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "dataplane/obs/journal.h"
#include "dataplane/obs/trace.h"
#include "dataplane/forward/upstream.h"

static void test_header_list_freed_once_sent(void **state)
{
    (void)state;
    struct dp_request *req = calloc(1, sizeof(*req));
    struct dp_journal *j = calloc(1, sizeof(*j));
    assert_non_null(req);
    assert_non_null(j);
    req->journal = j;
    j->traced = true;
    dp_trace_start(&j->trace, NULL);
    req->up_headers = curl_slist_append(NULL, "Content-Type: application/json");
    assert_non_null(req->up_headers);
    assert_int_equal(dp_journal_trace_header(req, &req->up_headers), 0);
    assert_non_null(j->trace.header);

    struct dp_attempt a = {.req = req, .easy = curl_easy_init()};
    assert_non_null(a.easy);
    assert_int_equal(curl_easy_setopt(a.easy, CURLOPT_HTTPHEADER, req->up_headers), CURLE_OK);
    dp_up_request_sent(&a);
    assert_null(req->up_headers);
    assert_null(j->trace.header);
    dp_trace_set_span(&j->trace, 42); /* nothing to rewrite any more */

    /* Without an easy handle (the transfer already detached) too. */
    req->up_headers = curl_slist_append(NULL, "X-A: b");
    assert_int_equal(dp_journal_trace_header(req, &req->up_headers), 0);
    struct dp_attempt b = {.req = req};
    dp_up_request_sent(&b);
    assert_null(req->up_headers);
    assert_null(j->trace.header);

    curl_easy_cleanup(a.easy);
    free(j);
    free(req);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_list_freed_once_sent),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
