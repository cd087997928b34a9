/*
 * Unit tests of the pod-to-worker mapping of Kubernetes discovery
 * (controlplane/sources/source_kubernetes_pod.h): which pods are workers (Ready,
 * Running, an IP, not terminating), the worker's id, url (port or
 * port_name, IPv6), model and role from labels, and what a half-filled or
 * odd pod gives.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "controlplane/kv/kv_subscriber.h"
#include "controlplane/sources/source_kubernetes_pod.h"

static void kube_cfg(struct cfg_kubernetes *k)
{
    struct cfg cfg;
    cfg_init_defaults(&cfg);
    *k = cfg.discovery.kubernetes;
    cfg_fini(&cfg);
}

static json_t *pod(const char *extra_labels, const char *ready, const char *phase, const char *ip,
                   bool terminating)
{
    char text[2048];
    snprintf(
        text, sizeof(text),
        "{\"metadata\":{\"name\":\"vllm-0\",\"uid\":\"u-1\",\"resourceVersion\":\"42\","
        "\"labels\":{\"app\":\"vllm\"%s}%s},"
        "\"spec\":{\"containers\":[{\"name\":\"side\"},{\"name\":\"vllm\",\"ports\":[{\"name\":"
        "\"metrics\",\"containerPort\":9400},{\"name\":\"http\",\"containerPort\":8001}]}]},"
        "\"status\":{\"phase\":\"%s\"%s%s%s,\"conditions\":[{\"type\":\"PodScheduled\","
        "\"status\":\"True\"},{\"type\":\"Ready\",\"status\":\"%s\"}]}}",
        extra_labels, terminating ? ",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"" : "", phase,
        ip != NULL ? ",\"podIP\":\"" : "", ip != NULL ? ip : "", ip != NULL ? "\"" : "", ready);
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    if (j == NULL)
        fail_msg("test pod JSON: %s", err.text);
    return j;
}

static void parse(json_t *j, const struct cfg_kubernetes *k, struct kube_pod *p)
{
    assert_int_equal(kube_pod_parse(j, k, p), 0);
    json_decref(j);
}

static void test_worker_rule(void **state)
{
    (void)state;
    struct cfg_kubernetes k;
    kube_cfg(&k);
    struct kube_pod p;
    parse(pod("", "True", "Running", "10.1.2.3", false), &k, &p);
    assert_true(kube_pod_is_worker(&p));
    assert_string_equal(p.id, "vllm-0");
    assert_string_equal(p.uid, "u-1");
    assert_string_equal(p.resource_version, "42");
    assert_string_equal(p.url, "http://10.1.2.3:8000");
    assert_string_equal(p.model, "");
    assert_int_equal(p.role, CFG_ROLE_REGULAR);

    parse(pod("", "False", "Running", "10.1.2.3", false), &k, &p);
    assert_false(kube_pod_is_worker(&p));
    parse(pod("", "True", "Pending", "10.1.2.3", false), &k, &p);
    assert_false(kube_pod_is_worker(&p));
    parse(pod("", "True", "Running", NULL, false), &k, &p);
    assert_false(kube_pod_is_worker(&p));
    assert_string_equal(p.url, "");
    parse(pod("", "True", "Running", "10.1.2.3", true), &k, &p);
    assert_false(kube_pod_is_worker(&p));
    assert_true(p.terminating);
}

static void test_port_name_ipv6_scheme(void **state)
{
    (void)state;
    struct cfg_kubernetes k;
    kube_cfg(&k);
    snprintf(k.port_name, sizeof(k.port_name), "http");
    snprintf(k.scheme, sizeof(k.scheme), "https");
    struct kube_pod p;
    parse(pod("", "True", "Running", "fd00::7", false), &k, &p);
    assert_string_equal(p.url, "https://[fd00::7]:8001");
    assert_true(kube_pod_is_worker(&p));
    snprintf(k.port_name, sizeof(k.port_name), "grpc");
    parse(pod("", "True", "Running", "10.0.0.1", false), &k, &p);
    assert_true(p.no_port);
    assert_false(kube_pod_is_worker(&p));
}

static void test_labels(void **state)
{
    (void)state;
    struct cfg_kubernetes k;
    kube_cfg(&k);
    struct kube_pod p;
    parse(pod(",\"switchyard.io/model\":\"llama-3-8b\",\"switchyard.io/role\":\"decode\"", "True",
              "Running", "10.0.0.1", false),
          &k, &p);
    assert_string_equal(p.model, "llama-3-8b");
    assert_int_equal(p.role, CFG_ROLE_DECODE);
    parse(pod(",\"switchyard.io/role\":\"boss\"", "True", "Running", "10.0.0.1", false), &k, &p);
    assert_int_equal(p.role, CFG_ROLE_REGULAR);
    assert_true(p.bad_role);
    /* Labels not configured: ignored. */
    k.model_label[0] = '\0';
    k.role_label[0] = '\0';
    parse(pod(",\"switchyard.io/model\":\"m\",\"switchyard.io/role\":\"prefill\"", "True",
              "Running", "10.0.0.1", false),
          &k, &p);
    assert_string_equal(p.model, "");
    assert_int_equal(p.role, CFG_ROLE_REGULAR);
}

/* The KV-event annotations; '*' resolves to the pod's IP (kv_subscriber.h). */
static void test_kv_events_annotations(void **state)
{
    (void)state;
    struct cfg_kubernetes k;
    kube_cfg(&k);
    struct kube_pod p;
    parse(pod("},\"annotations\":{\"switchyard.io/kv-events-endpoint\":\"tcp://*:5557\","
              "\"switchyard.io/kv-events-replay-endpoint\":\"tcp://*:5558\"",
              "True", "Running", "10.0.0.9", false),
          &k, &p);
    assert_string_equal(p.kv_events.endpoint, "tcp://*:5557");
    assert_string_equal(p.kv_events.replay_endpoint, "tcp://*:5558");
    assert_int_equal(p.kv_events.data_parallel_size, 1);
    assert_false(p.bad_kv_events);
    char ep[KVS_ENDPOINT_MAX];
    assert_int_equal(kvs_resolve_endpoint(p.kv_events.endpoint, p.url, ep, sizeof(ep)), 0);
    assert_string_equal(ep, "tcp://10.0.0.9:5557");
    assert_int_equal(kvs_resolve_endpoint("tcp://:5558", "http://[fd00::7]:8000", ep, sizeof(ep)),
                     0);
    assert_string_equal(ep, "tcp://[fd00::7]:5558");
    assert_int_equal(kvs_resolve_endpoint("tcp://10.1.1.1:9", "http://h:1", ep, sizeof(ep)), 0);
    assert_string_equal(ep, "tcp://10.1.1.1:9");
    assert_int_equal(kvs_resolve_endpoint("udp://x:1", "http://h:1", ep, sizeof(ep)), -EINVAL);

    parse(pod("},\"annotations\":{\"switchyard.io/kv-events-endpoint\":\"5557\"", "True", "Running",
              "10.0.0.9", false),
          &k, &p);
    assert_string_equal(p.kv_events.endpoint, "");
    assert_true(p.bad_kv_events);
    /* No annotation: no events, nothing wrong. */
    parse(pod("", "True", "Running", "10.0.0.9", false), &k, &p);
    assert_string_equal(p.kv_events.endpoint, "");
    assert_false(p.bad_kv_events);
}

static void test_ids_and_bad_pods(void **state)
{
    (void)state;
    char id[CFG_ID_MAX], id2[CFG_ID_MAX];
    char long1[200], long2[200];
    memset(long1, 'a', 150);
    long1[150] = '\0';
    memcpy(long2, long1, 150);
    long2[150] = 'b';
    long2[151] = '\0';
    kube_pod_worker_id(long1, id, sizeof(id));
    kube_pod_worker_id(long2, id2, sizeof(id2));
    assert_int_equal(strlen(id), CFG_ID_MAX - 1);
    assert_true(cfg_worker_id_is_valid(id));
    assert_string_not_equal(id, id2);

    struct cfg_kubernetes k;
    kube_cfg(&k);
    struct kube_pod p;
    json_t *j = json_loads("{\"metadata\":{\"name\":\"x\"}}", 0, NULL);
    assert_int_equal(kube_pod_parse(j, &k, &p), -EINVAL);
    json_decref(j);
    j = json_loads("{\"metadata\":{\"name\":\"x\",\"uid\":\"u\"},\"status\":7}", 0, NULL);
    assert_int_equal(kube_pod_parse(j, &k, &p), 0);
    assert_false(kube_pod_is_worker(&p));
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_rule),      cmocka_unit_test(test_port_name_ipv6_scheme),
        cmocka_unit_test(test_labels),           cmocka_unit_test(test_kv_events_annotations),
        cmocka_unit_test(test_ids_and_bad_pods),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
