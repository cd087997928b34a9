/*
 * End-to-end test of the latency histograms' labels: with the real data
 * plane, inference requests are observed in
 * switchyard_request_duration_seconds and
 * switchyard_time_to_first_byte_seconds under their route and model, and
 * health probes, metrics scrapes, model listings and 404s (unknown path,
 * unknown model) are not observed at all.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

static const char *const CHAT = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":3,"
                                "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

static void test_latency_by_route_and_model(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char url[160];
    struct h_resp resp;
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(h_http_post_json(url, CHAT, &resp), 0);
        assert_int_equal(resp.status, 200);
        h_resp_fini(&resp);
    }
    snprintf(url, sizeof(url), "%s/v1/completions", f.base);
    assert_int_equal(
        h_http_post_json(url, "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"x\"}", &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
    /* Unknown model, unknown path, probes, a listing, scrapes. */
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    assert_int_equal(h_http_post_json(url, "{\"model\":\"nope\",\"messages\":[]}", &resp), 0);
    assert_int_equal(resp.status, 404);
    h_resp_fini(&resp);
    const char *paths[] = {"/nowhere", "/health", "/v1/models", "/metrics"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(url, sizeof(url), "%s%s", f.base, paths[i]);
        assert_int_equal(h_http_get(url, &resp), 0);
        h_resp_fini(&resp);
    }
    snprintf(url, sizeof(url), "%s/metrics", f.base);
    assert_int_equal(h_http_get(url, &resp), 0);
    const char *page = resp.body;
    assert_int_equal(
        h_metric_in(page,
                    "switchyard_request_duration_seconds_count{route=\"/v1/chat/completions\","
                    "model=\"" H_FLEET_MODEL "\"}"),
        3);
    assert_int_equal(
        h_metric_in(page, "switchyard_request_duration_seconds_count{route=\"/v1/completions\","
                          "model=\"" H_FLEET_MODEL "\"}"),
        1);
    assert_int_equal(
        h_metric_in(page,
                    "switchyard_time_to_first_byte_seconds_count{route=\"/v1/chat/completions\","
                    "model=\"" H_FLEET_MODEL "\"}"),
        3);
    assert_non_null(strstr(page, "switchyard_request_duration_seconds_bucket{route=\"/v1/chat/"
                                 "completions\",model=\"" H_FLEET_MODEL "\",le=\"+Inf\"} 3"));
    /* Nothing else is observed: every series is one of the two above. */
    const char *p = page;
    int series = 0;
    while ((p = strstr(p, "switchyard_request_duration_seconds_count{")) != NULL) {
        series++;
        p++;
    }
    assert_int_equal(series, 2);
    assert_null(strstr(page, "model=\"nope\""));
    assert_null(strstr(page, "duration_seconds_count{route=\"/health\""));
    assert_null(strstr(page, "duration_seconds_count{route=\"/metrics\""));
    assert_null(strstr(page, "duration_seconds_count{route=\"other\""));
    /* ...and they are all still counted. */
    assert_true(h_metric_in(page, "switchyard_requests_total{route=\"/health\",code=\"200\"}") >=
                1);
    assert_true(h_metric_in(page, "switchyard_requests_total{route=\"other\",code=\"404\"}") >= 1);
    assert_int_equal(
        h_metric_in(page, "switchyard_requests_total{route=\"/v1/chat/completions\",code=\"404\"}"),
        1);
    h_resp_fini(&resp);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_latency_by_route_and_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
