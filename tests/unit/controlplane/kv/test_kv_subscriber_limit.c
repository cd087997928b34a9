/*
 * The KV-event subscriber follows a fleet larger than ZeroMQ's default
 * socket limit (1,023 a context): 1,100 publishers (XPUB sockets of this
 * test, on loopback) each see the subscriber's subscription arrive. Before
 * the subscriber raised its context's limit, the 1,024th SUB socket could
 * not be created and those workers' events were never read (the fleet
 * benchmark saw 1,023 of 4,096 publishers subscribed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#include "common/proc.h"
#include "controlplane/kv/kv_subscriber.h"

#define PUBS 1100

static void on_batch(void *ctx, uint32_t slot, const char *id, const struct kv_event_batch *b)
{
    (void)ctx;
    (void)slot;
    (void)id;
    (void)b;
}

static void on_forget(void *ctx, uint32_t slot, const char *id)
{
    (void)ctx;
    (void)slot;
    (void)id;
}

static void test_more_publishers_than_zmq_default(void **state)
{
    (void)state;
    void *zctx = zmq_ctx_new();
    assert_int_equal(zmq_ctx_set(zctx, ZMQ_MAX_SOCKETS, PUBS + 16), 0);
    void **pubs = calloc(PUBS, sizeof(*pubs));
    struct kvs_worker_spec *specs = calloc(PUBS, sizeof(*specs));
    bool *seen = calloc(PUBS, sizeof(*seen));
    assert_non_null(pubs);
    assert_non_null(specs);
    assert_non_null(seen);
    for (int i = 0; i < PUBS; i++) {
        pubs[i] = zmq_socket(zctx, ZMQ_XPUB);
        assert_non_null(pubs[i]);
        assert_int_equal(zmq_bind(pubs[i], "tcp://127.0.0.1:*"), 0);
        char ep[64];
        size_t len = sizeof(ep);
        assert_int_equal(zmq_getsockopt(pubs[i], ZMQ_LAST_ENDPOINT, ep, &len), 0);
        specs[i] =
            (struct kvs_worker_spec){.slot = (uint32_t)i, .generation = 1, .data_parallel_size = 1};
        snprintf(specs[i].id, sizeof(specs[i].id), "w%d", i);
        snprintf(specs[i].endpoint, sizeof(specs[i].endpoint), "%s", ep);
    }
    const struct kv_event_sink sink = {.on_batch = on_batch, .on_forget = on_forget};
    struct kv_subscriber *s = NULL;
    assert_int_equal(kvs_create(&sink, NULL, &s), 0);
    assert_int_equal(kvs_set_workers(s, specs, PUBS), 0);
    int n_seen = 0;
    uint64_t end = proc_monotonic_ms() + 20000;
    while (n_seen < PUBS && proc_monotonic_ms() < end) {
        for (int i = 0; i < PUBS; i++) {
            char msg[16];
            if (!seen[i] && zmq_recv(pubs[i], msg, sizeof(msg), ZMQ_DONTWAIT) > 0 && msg[0] == 1) {
                seen[i] = true;
                n_seen++;
            }
        }
        usleep(10000);
    }
    assert_int_equal(n_seen, PUBS);
    kvs_destroy(s);
    for (int i = 0; i < PUBS; i++) {
        int zero = 0;
        zmq_setsockopt(pubs[i], ZMQ_LINGER, &zero, sizeof(zero));
        zmq_close(pubs[i]);
    }
    zmq_ctx_term(zctx);
    free(seen);
    free(specs);
    free(pubs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_more_publishers_than_zmq_default),
    };
    return cmocka_run_group_tests_name("cp_kv_subscriber_limit", tests, NULL, NULL);
}
