/*
 * Unit tests of the admin channel's framing (proto/frame.c): round trips,
 * frames split across reads at every byte, several frames in one read,
 * oversize length prefixes, garbage and unknown payloads, end of stream,
 * and the writer's bound.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto/frame.h"

static long encode_ping(uint64_t request_id, uint64_t token, uint8_t *buf, size_t cap)
{
    Switchyard__Admin__Ping ping = SWITCHYARD__ADMIN__PING__INIT;
    ping.token = token;
    Switchyard__Admin__AdminMessage m = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
    m.request_id = request_id;
    m.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_PING;
    m.ping = &ping;
    return frame_encode(&m, buf, cap);
}

static void expect_ping(struct frame_reader *r, uint64_t request_id, uint64_t token)
{
    const uint8_t *p;
    size_t len;
    assert_int_equal(frame_reader_next(r, &p, &len), 1);
    Switchyard__Admin__AdminMessage *m = frame_decode(p, len);
    assert_non_null(m);
    assert_int_equal(m->body_case, SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_PING);
    assert_int_equal(m->request_id, request_id);
    assert_int_equal(m->ping->token, token);
    frame_msg_free(m);
    frame_reader_consume(r);
}

static void test_round_trip(void **state)
{
    (void)state;
    uint8_t buf[128];
    long n = encode_ping(7, 0xdeadbeef, buf, sizeof(buf));
    assert_true(n > (long)FRAME_HEADER_LEN);
    assert_int_equal(buf[0], 0);
    assert_int_equal(buf[3], (uint8_t)(n - FRAME_HEADER_LEN)); /* big-endian length */
    static struct frame_reader r;
    frame_reader_init(&r);
    assert_int_equal(frame_reader_feed(&r, buf, (size_t)n), 0);
    expect_ping(&r, 7, 0xdeadbeef);
    const uint8_t *p;
    size_t len;
    assert_int_equal(frame_reader_next(&r, &p, &len), 0);
}

static void test_partial_reads_every_split(void **state)
{
    (void)state;
    uint8_t buf[256];
    long n1 = encode_ping(1, 11, buf, sizeof(buf));
    long n2 = encode_ping(2, 22, buf + n1, sizeof(buf) - (size_t)n1);
    size_t total = (size_t)(n1 + n2);
    static struct frame_reader r;
    for (size_t split = 0; split <= total; split++) {
        frame_reader_init(&r);
        const uint8_t *p;
        size_t len;
        assert_int_equal(frame_reader_feed(&r, buf, split), 0);
        int got = 0;
        while (frame_reader_next(&r, &p, &len) == 1) {
            expect_ping(&r, (uint64_t)got + 1, (uint64_t)(got + 1) * 11);
            got++;
        }
        assert_int_equal(frame_reader_feed(&r, buf + split, total - split), 0);
        while (frame_reader_next(&r, &p, &len) == 1) {
            expect_ping(&r, (uint64_t)got + 1, (uint64_t)(got + 1) * 11);
            got++;
        }
        assert_int_equal(got, 2);
    }
}

static void test_fill_from_socket_byte_by_byte(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    static struct frame_reader r;
    frame_reader_init(&r);
    assert_int_equal(frame_reader_fill(&r, sv[0]), -EAGAIN);
    uint8_t buf[64];
    long n = encode_ping(3, 33, buf, sizeof(buf));
    const uint8_t *p;
    size_t len;
    for (long i = 0; i < n; i++) {
        assert_int_equal(frame_reader_next(&r, &p, &len), 0);
        assert_int_equal(write(sv[1], buf + i, 1), 1);
        assert_int_equal(frame_reader_fill(&r, sv[0]), 1);
    }
    /* A complete frame is held: fill reads no more until it is consumed. */
    assert_int_equal(frame_reader_fill(&r, sv[0]), 0);
    expect_ping(&r, 3, 33);
    close(sv[1]);
    assert_int_equal(frame_reader_fill(&r, sv[0]), -ECONNRESET);
    close(sv[0]);
}

static void test_oversize_prefix_is_refused_early(void **state)
{
    (void)state;
    static struct frame_reader r;
    frame_reader_init(&r);
    uint32_t n = FRAME_MAX_PAYLOAD + 1;
    uint8_t hdr[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    assert_int_equal(frame_reader_feed(&r, hdr, 3), 0);
    const uint8_t *p;
    size_t len;
    assert_int_equal(frame_reader_next(&r, &p, &len), 0);
    assert_int_equal(frame_reader_feed(&r, hdr + 3, 1), 0);
    assert_int_equal(frame_reader_next(&r, &p, &len), -EMSGSIZE);
    assert_int_equal(frame_reader_fill(&r, -1), -EMSGSIZE);

    /* Exactly the maximum is accepted (as framing). */
    frame_reader_init(&r);
    n = FRAME_MAX_PAYLOAD;
    uint8_t hdr2[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    assert_int_equal(frame_reader_feed(&r, hdr2, 4), 0);
    uint8_t *zeros = calloc(1, FRAME_MAX_PAYLOAD);
    assert_non_null(zeros);
    assert_int_equal(frame_reader_feed(&r, zeros, FRAME_MAX_PAYLOAD), 0);
    free(zeros);
    assert_int_equal(frame_reader_next(&r, &p, &len), 1);
    assert_int_equal(len, FRAME_MAX_PAYLOAD);
}

static void test_encode_refuses_oversize(void **state)
{
    (void)state;
    char *big = malloc(FRAME_MAX_PAYLOAD + 1);
    assert_non_null(big);
    memset(big, 'x', FRAME_MAX_PAYLOAD);
    big[FRAME_MAX_PAYLOAD] = '\0';
    Switchyard__Admin__Error err = SWITCHYARD__ADMIN__ERROR__INIT;
    err.message = big;
    Switchyard__Admin__AdminMessage m = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
    m.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_ERROR;
    m.error = &err;
    static uint8_t out[FRAME_HEADER_LEN + FRAME_MAX_PAYLOAD + 64];
    assert_int_equal(frame_encode(&m, out, sizeof(out)), -EMSGSIZE);
    static struct frame_writer w;
    frame_writer_init(&w);
    assert_int_equal(frame_writer_queue(&w, &m), -EMSGSIZE);
    assert_true(frame_writer_is_empty(&w));
    free(big);
}

static void test_garbage_and_unknown_payloads(void **state)
{
    (void)state;
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_null(frame_decode(garbage, sizeof(garbage)));
    /* Truncated varint. */
    const uint8_t truncated[] = {0x08, 0x80};
    assert_null(frame_decode(truncated, sizeof(truncated)));
    /* Empty: an AdminMessage without a body. */
    assert_null(frame_decode((const uint8_t *)"", 0));
    /* Only an unknown field 99 (a newer peer's member): body not set. */
    const uint8_t unknown[] = {0x9a, 0x06, 0x00};
    assert_null(frame_decode(unknown, sizeof(unknown)));
    /* A known member next to an unknown one still decodes. */
    uint8_t buf[64];
    long n = encode_ping(5, 55, buf, sizeof(buf));
    uint8_t mixed[80];
    memcpy(mixed, buf + FRAME_HEADER_LEN, (size_t)n - FRAME_HEADER_LEN);
    memcpy(mixed + n - FRAME_HEADER_LEN, unknown, sizeof(unknown));
    Switchyard__Admin__AdminMessage *m =
        frame_decode(mixed, (size_t)n - FRAME_HEADER_LEN + sizeof(unknown));
    assert_non_null(m);
    assert_int_equal(m->ping->token, 55);
    frame_msg_free(m);
}

static void test_writer_is_bounded_and_flushes(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    static struct frame_writer w;
    frame_writer_init(&w);
    Switchyard__Admin__Ping ping = SWITCHYARD__ADMIN__PING__INIT;
    Switchyard__Admin__AdminMessage m = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
    m.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_PING;
    m.ping = &ping;
    int rc;
    size_t queued = 0;
    while ((rc = frame_writer_queue(&w, &m)) == 0)
        queued++;
    assert_int_equal(rc, -ENOBUFS);
    assert_true(queued > 1000);
    /* The peer does not read: flush writes what fits, then -EAGAIN. */
    rc = frame_writer_flush(&w, sv[0]);
    assert_true(rc == -EAGAIN || rc == 0);
    /* Drain the peer and finish. */
    static struct frame_reader r;
    frame_reader_init(&r);
    size_t got = 0;
    while (got < queued) {
        long f = frame_reader_fill(&r, sv[1]);
        const uint8_t *p;
        size_t len;
        while (frame_reader_next(&r, &p, &len) == 1) {
            frame_reader_consume(&r);
            got++;
        }
        if (f == -EAGAIN)
            frame_writer_flush(&w, sv[0]);
    }
    assert_int_equal(frame_writer_flush(&w, sv[0]), 0);
    assert_true(frame_writer_is_empty(&w));
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_partial_reads_every_split),
        cmocka_unit_test(test_fill_from_socket_byte_by_byte),
        cmocka_unit_test(test_oversize_prefix_is_refused_early),
        cmocka_unit_test(test_encode_refuses_oversize),
        cmocka_unit_test(test_garbage_and_unknown_payloads),
        cmocka_unit_test(test_writer_is_bounded_and_flushes),
    };
    return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
