/*
 * Unit tests of the latency histograms' labels (dataplane/obs/metrics.c,
 * included for its static functions): a request is observed under its
 * route and model only on an inference route and never for a 404; each
 * model keeps its own series, and past DP_MODEL_SERIES models every new
 * one lands in "other", so no client can grow the page without bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "dataplane/obs/metrics.c"

static void test_only_inference_routes_and_no_404(void **state)
{
    (void)state;
    struct dp_metrics m = {0};
    assert_int_equal(dp_metrics_init(&m, 4), 0);
    dp_metrics_request(&m, DP_ROUTE_CHAT, "llama", 200, 1000);
    dp_metrics_request(&m, DP_ROUTE_CHAT, "llama", 503, 1000);
    dp_metrics_request(&m, DP_ROUTE_CHAT, "llama", 404, 1000);    /* model not found */
    dp_metrics_request(&m, DP_ROUTE_HEALTH, "llama", 200, 1000);  /* a probe */
    dp_metrics_request(&m, DP_ROUTE_METRICS, "llama", 200, 1000); /* a scrape */
    dp_metrics_request(&m, DP_ROUTE_MODELS, "", 200, 1000);       /* a listing */
    dp_metrics_request(&m, DP_ROUTE_OTHER, "", 404, 1000);        /* no such route */
    dp_metrics_request(&m, DP_ROUTE_COMPLETIONS, "", 400, 1000);  /* no model */
    dp_metrics_ttfb(&m, DP_ROUTE_EMBEDDINGS, "llama", 500);
    assert_int_equal(atomic_load(&m.n_models), 1);
    struct dp_model_latency *l = &m.latency[0];
    assert_string_equal(l->model, "llama");
    assert_int_equal(histogram_count(&l->duration[DP_ROUTE_CHAT]), 2);
    assert_int_equal(histogram_count(&l->ttfb[DP_ROUTE_EMBEDDINGS]), 1);
    for (int r = 0; r < DP_ROUTE_COUNT; r++) {
        if (r != DP_ROUTE_CHAT)
            assert_int_equal(histogram_count(&l->duration[r]), 0);
        assert_int_equal(histogram_count(&m.latency[DP_MODEL_SERIES].duration[r]), 0);
    }
    /* Every request is still counted by route and status. */
    assert_int_equal(atomic_load(&m.requests[DP_ROUTE_HEALTH][200]), 1);
    assert_int_equal(atomic_load(&m.requests[DP_ROUTE_CHAT][404]), 1);
    dp_metrics_fini(&m);
}

static void test_models_are_bounded(void **state)
{
    (void)state;
    struct dp_metrics m = {0};
    assert_int_equal(dp_metrics_init(&m, 4), 0);
    char name[32];
    for (int i = 0; i < DP_MODEL_SERIES + 10; i++) {
        snprintf(name, sizeof(name), "model-%d", i);
        dp_metrics_request(&m, DP_ROUTE_CHAT, name, 200, 10);
        dp_metrics_request(&m, DP_ROUTE_CHAT, name, 200, 10);
    }
    assert_int_equal(atomic_load(&m.n_models), DP_MODEL_SERIES);
    for (int i = 0; i < DP_MODEL_SERIES; i++) {
        snprintf(name, sizeof(name), "model-%d", i);
        assert_string_equal(m.latency[i].model, name);
        assert_int_equal(histogram_count(&m.latency[i].duration[DP_ROUTE_CHAT]), 2);
    }
    assert_string_equal(m.latency[DP_MODEL_SERIES].model, "other");
    assert_int_equal(histogram_count(&m.latency[DP_MODEL_SERIES].duration[DP_ROUTE_CHAT]), 20);
    dp_metrics_fini(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_only_inference_routes_and_no_404),
        cmocka_unit_test(test_models_are_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
