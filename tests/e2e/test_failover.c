/*
 * End-to-end tests of processes dying or being reset under traffic, with
 * the real binaries: a dataplane SIGKILLed with requests in flight
 * (invariant 7: its load goes with its lease, another dataplane's load
 * stays), the control plane SIGKILLed and restarted while clients keep
 * sending (invariant 8: no client request fails, loads and API-added
 * workers survive), and reset_load hammered while requests flow
 * (invariant 4: no request is lost from the accounting).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "shm/load.h"
#include "shm/registry.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_holder.h"
#include "tests/e2e/harness_load.h"

#define SETTLE_MS  5000
#define TRAFFIC_MS 30000

/* ---- helpers ------------------------------------------------------------------ */

static long admin_request(struct h_fleet *f, const char *method, const char *path, const char *body,
                          struct h_resp *resp)
{
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)f->cfg.admin_port, path);
    const char *headers[] = {"Content-Type: application/json", NULL};
    struct h_req req = {.method = method, .url = url, .body = body, .headers = headers};
    assert_int_equal(h_http(&req, resp), 0);
    return resp->status;
}

static long long load_of_id(struct h_fleet *f, const char *id)
{
    struct shm_worker_info w;
    if (shm_registry_find(&f->seg, id, &w) != 0)
        return -1;
    return (long long)shm_load_of(&f->seg, w.slot, w.generation);
}

struct load_is {
    struct h_fleet *f;
    const char *id;
    long long want;
};

static bool load_reaches(void *arg)
{
    struct load_is *c = arg;
    return load_of_id(c->f, c->id) == c->want;
}

struct stat_is {
    const char *url;
    const char *key;
    long long want;
};

static bool mock_stat_reaches(void *arg)
{
    struct stat_is *c = arg;
    long long v = -1;
    return h_mock_stat_int(c->url, c->key, &v) == 0 && v == c->want;
}

struct ok_count {
    struct h_load *load;
    long want;
};

static bool traffic_ok_reaches(void *arg)
{
    struct ok_count *c = arg;
    struct h_load_result r;
    h_load_peek(c->load, &r);
    return r.ok >= c->want;
}

static long traffic_ok(struct h_load *l)
{
    struct h_load_result r;
    h_load_peek(l, &r);
    return r.ok;
}

static void assert_no_client_failure(const struct h_load_result *r)
{
    print_message("traffic: started %ld ok %ld aborted %ld http_error %ld truncated %ld "
                  "transport %ld%s%s\n",
                  r->started, r->ok, r->aborted, r->http_error, r->truncated, r->transport,
                  r->first_failure[0] ? "; first failure: " : "", r->first_failure);
    assert_int_equal(r->http_error, 0);
    assert_int_equal(r->truncated, 0);
    assert_int_equal(r->transport, 0);
    assert_int_equal(r->ok, r->started);
}

/* ---- a dataplane SIGKILLed with requests in flight ------------------------------ */

#define HEALTH_INTERVAL_MS 500

static void test_dataplane_sigkill_releases_only_its_load(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .health_interval = "500ms"});
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(&f.seg, "w1", &w), 0);
    /* Another dataplane (a lease holder) with 2 requests of its own on w1. */
    struct h_holder other;
    h_holder_start(&other, &(struct h_holder_spec){.shm = f.cfg.shm_name,
                                                   .slot = w.slot,
                                                   .generation = w.generation,
                                                   .guards = 2});
    /* 4 requests through the real dataplane, held before headers. */
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_before_headers_ms\":60000}"), 0);
    struct h_load *held;
    assert_int_equal(h_load_start(&(struct h_load_opts){.base = f.base,
                                                        .model = H_FLEET_MODEL,
                                                        .concurrency = 4,
                                                        .total = 4,
                                                        .stream_percent = 50,
                                                        .max_tokens = 4,
                                                        .request_timeout_ms = 60000,
                                                        .seed = 3},
                                  &held),
                     0);
    struct stat_is four = {.url = f.mock[0].url, .key = "inflight", .want = 4};
    assert_int_equal(h_wait_until(mock_stat_reaches, &four, SETTLE_MS), 0);
    struct load_is six = {.f = &f, .id = "w1", .want = 6};
    assert_int_equal(h_wait_until(load_reaches, &six, SETTLE_MS), 0);

    int64_t t0 = h_now_ms();
    assert_int_equal(h_proc_signal(f.dp, SIGKILL), 0);
    struct load_is two = {.f = &f, .id = "w1", .want = 2};
    assert_int_equal(h_wait_until(load_reaches, &two, 4 * HEALTH_INTERVAL_MS), 0);
    int64_t took = h_now_ms() - t0;
    print_message("the killed dataplane's load was gone %lld ms after SIGKILL\n", (long long)took);
    assert_true(took <= 2 * HEALTH_INTERVAL_MS);
    /* The other dataplane's 2 stay, and the worker saw the 4 go. */
    struct stat_is zero = {.url = f.mock[0].url, .key = "inflight", .want = 0};
    assert_int_equal(h_wait_until(mock_stat_reaches, &zero, SETTLE_MS), 0);
    assert_int_equal(load_of_id(&f, "w1"), 2);
    h_load_stop(held, true, NULL);
    h_holder_finish(&other);
    assert_int_equal(load_of_id(&f, "w1"), 0);
    assert_int_equal(shm_load_underflows(&f.seg), 0);
    h_fleet_stop(&f);
}

/* ---- the control plane SIGKILLed and restarted under traffic ------------------ */

static bool status_has_connected_dataplane(void *arg)
{
    struct h_fleet *f = arg;
    struct h_resp r;
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/status", (unsigned)f->cfg.admin_port);
    if (h_http_get(url, &r) != 0) {
        h_resp_fini(&r); /* a failed transfer may still hold buffers */
        return false;
    }
    bool ok = false;
    json_t *j = r.status == 200 ? h_resp_json(&r) : NULL;
    json_t *dps = json_object_get(j, "dataplanes");
    for (size_t i = 0; i < json_array_size(dps); i++)
        ok = ok || json_is_true(json_object_get(json_array_get(dps, i), "admin_channel"));
    json_decref(j);
    h_resp_fini(&r);
    return ok;
}

struct mocks_total {
    const char *const *urls;
    size_t n;
    long long want;
};

static bool mocks_inflight_total_is(void *arg)
{
    struct mocks_total *c = arg;
    long long sum = 0;
    for (size_t i = 0; i < c->n; i++) {
        long long v = -1;
        if (h_mock_stat_int(c->urls[i], "inflight", &v) != 0)
            return false;
        sum += v;
    }
    return sum == c->want;
}

static void test_controlplane_sigkill_under_traffic(void **state)
{
    (void)state;
    static const char *const mock_args[] = {"--tpot-ms", "2", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2, .mock_args = mock_args});
    /* A worker added through the API (it lives only in the segment). */
    struct h_mock extra;
    assert_int_equal(h_mock_start(&extra, "--model", H_FLEET_MODEL, "--tpot-ms", "2", NULL), 0);
    char body[256];
    snprintf(body, sizeof(body), "{\"url\":\"%s\",\"id\":\"api1\",\"model\":\"%s\"}", extra.url,
             H_FLEET_MODEL);
    struct h_resp resp;
    assert_int_equal(admin_request(&f, "POST", "/workers", body, &resp), 201);
    h_resp_fini(&resp);
    const char *ids[] = {"w1", "w2", "api1"};
    const char *urls[] = {f.mock[0].url, f.mock[1].url, extra.url};

    /* Hold 6 streams (spread by least load) so there is load to keep. */
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(h_mock_faults(urls[i], "{\"stall_after_chunks\":1,\"stall_ms\":60000}"),
                         0);
    struct h_load *held;
    assert_int_equal(h_load_start(&(struct h_load_opts){.base = f.base,
                                                        .model = H_FLEET_MODEL,
                                                        .concurrency = 6,
                                                        .total = 6,
                                                        .stream_percent = 100,
                                                        .max_tokens = 4,
                                                        .request_timeout_ms = 60000,
                                                        .seed = 5},
                                  &held),
                     0);
    long long held_load[3];
    struct mocks_total mt = {.urls = urls, .n = 3, .want = 6};
    assert_int_equal(h_wait_until(mocks_inflight_total_is, &mt, SETTLE_MS), 0);
    long long held_total = 0;
    for (size_t i = 0; i < 3; i++) {
        long long v = -1;
        assert_int_equal(h_mock_stat_int(urls[i], "inflight", &v), 0);
        struct load_is c = {.f = &f, .id = ids[i], .want = v};
        assert_int_equal(h_wait_until(load_reaches, &c, SETTLE_MS), 0);
        held_load[i] = v;
        held_total += v;
        assert_int_equal(h_mock_faults(urls[i], "{\"stall_after_chunks\":0,\"stall_ms\":0}"), 0);
    }
    assert_int_equal(held_total, 6);

    struct h_load *traffic;
    assert_int_equal(h_load_start(&(struct h_load_opts){.base = f.base,
                                                        .model = H_FLEET_MODEL,
                                                        .concurrency = 8,
                                                        .stream_percent = 50,
                                                        .max_tokens = 8,
                                                        .request_timeout_ms = 10000,
                                                        .seed = 11},
                                  &traffic),
                     0);
    struct ok_count oc = {.load = traffic, .want = 100};
    assert_int_equal(h_wait_until(traffic_ok_reaches, &oc, TRAFFIC_MS), 0);

    assert_int_equal(h_proc_signal(f.cp, SIGKILL), 0);
    assert_int_equal(h_proc_wait(f.cp, SETTLE_MS, NULL), 0);
    oc.want = traffic_ok(traffic) + 100; /* the dataplane serves alone */
    assert_int_equal(h_wait_until(traffic_ok_reaches, &oc, TRAFFIC_MS), 0);

    assert_int_equal(h_start_controlplane(f.cfg.path, &f.cp), 0);
    assert_int_equal(h_wait_until(status_has_connected_dataplane, &f, SETTLE_MS), 0);
    oc.want = traffic_ok(traffic) + 100;
    assert_int_equal(h_wait_until(traffic_ok_reaches, &oc, TRAFFIC_MS), 0);
    struct h_load_result r;
    h_load_stop(traffic, false, &r);
    assert_no_client_failure(&r);

    /* The held load is exactly what it was; the API worker is still there. */
    for (size_t i = 0; i < 3; i++) {
        struct load_is c = {.f = &f, .id = ids[i], .want = held_load[i]};
        assert_int_equal(h_wait_until(load_reaches, &c, SETTLE_MS), 0);
    }
    assert_int_equal(admin_request(&f, "GET", "/workers/api1", NULL, &resp), 200);
    json_t *j = h_resp_json(&resp);
    assert_string_equal(json_string_value(json_object_get(j, "url")), extra.url);
    assert_int_equal(json_integer_value(json_object_get(j, "load")), held_load[2]);
    json_decref(j);
    h_resp_fini(&resp);

    h_load_stop(held, true, NULL);
    for (size_t i = 0; i < 3; i++) {
        struct load_is c = {.f = &f, .id = ids[i], .want = 0};
        assert_int_equal(h_wait_until(load_reaches, &c, SETTLE_MS), 0);
    }
    assert_int_equal(shm_load_underflows(&f.seg), 0);
    h_fleet_stop(&f);
}

/* ---- reset_load while requests flow ------------------------------------------------ */

#define RESETS 40

static void test_reset_load_under_traffic_loses_nothing(void **state)
{
    (void)state;
    static const char *const mock_args[] = {"--tpot-ms", "1", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2, .mock_args = mock_args});
    struct h_load *traffic;
    assert_int_equal(h_load_start(&(struct h_load_opts){.base = f.base,
                                                        .model = H_FLEET_MODEL,
                                                        .concurrency = 3,
                                                        .stream_percent = 50,
                                                        .max_tokens = 4,
                                                        .request_timeout_ms = 10000,
                                                        .seed = 13},
                                  &traffic),
                     0);
    struct ok_count oc = {.load = traffic, .want = 20};
    assert_int_equal(h_wait_until(traffic_ok_reaches, &oc, TRAFFIC_MS), 0);
    int done = 0, refused = 0;
    for (int i = 0; i < RESETS; i++) {
        struct h_resp resp;
        long st = admin_request(&f, "POST", "/workers/w1/reset_load", NULL, &resp);
        h_resp_fini(&resp);
        assert_true(st == 200 || st == 409);
        if (st == 200)
            done++;
        else
            refused++;
    }
    print_message("reset_load under traffic: %d done, %d refused (requests in flight)\n", done,
                  refused);
    oc.want = traffic_ok(traffic) + 20;
    assert_int_equal(h_wait_until(traffic_ok_reaches, &oc, TRAFFIC_MS), 0);
    struct h_load_result r;
    h_load_stop(traffic, false, &r);
    assert_no_client_failure(&r);
    /* Nothing was discarded that was really in flight: every release found
     * its count, and both loads are back to exactly 0. */
    assert_int_equal(shm_load_underflows(&f.seg), 0);
    for (size_t i = 0; i < 2; i++) {
        char id[8];
        snprintf(id, sizeof(id), "w%zu", i + 1);
        struct load_is c = {.f = &f, .id = id, .want = 0};
        assert_int_equal(h_wait_until(load_reaches, &c, SETTLE_MS), 0);
    }
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_dataplane_sigkill_releases_only_its_load),
        H_TEST(test_controlplane_sigkill_under_traffic),
        H_TEST(test_reset_load_under_traffic_loses_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
