/*
 * Length-prefixed protobuf-c frames (see frame.h). Every buffer has a fixed
 * capacity; nothing here allocates except protobuf-c's own unpack.
 */
#include "proto/frame.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void frame_reader_init(struct frame_reader *r)
{
    r->len = 0;
}

static uint32_t frame_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void frame_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

int frame_reader_next(const struct frame_reader *r, const uint8_t **payload, size_t *len)
{
    if (r->len < FRAME_HEADER_LEN)
        return 0;
    uint32_t n = frame_get_be32(r->buf);
    if (n > FRAME_MAX_PAYLOAD)
        return -EMSGSIZE;
    if (r->len < FRAME_HEADER_LEN + (size_t)n)
        return 0;
    *payload = r->buf + FRAME_HEADER_LEN;
    *len = n;
    return 1;
}

void frame_reader_consume(struct frame_reader *r)
{
    const uint8_t *p;
    size_t n;
    if (frame_reader_next(r, &p, &n) != 1)
        return;
    size_t used = FRAME_HEADER_LEN + n;
    memmove(r->buf, r->buf + used, r->len - used);
    r->len -= used;
}

long frame_reader_fill(struct frame_reader *r, int fd)
{
    const uint8_t *p;
    size_t n;
    int st = frame_reader_next(r, &p, &n);
    if (st != 0)
        return st < 0 ? st : 0;
    if (r->len == sizeof(r->buf))
        return 0;
    ssize_t got = read(fd, r->buf + r->len, sizeof(r->buf) - r->len);
    if (got > 0) {
        r->len += (size_t)got;
        return (long)got;
    }
    if (got == 0)
        return -ECONNRESET;
    return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

int frame_reader_feed(struct frame_reader *r, const void *data, size_t len)
{
    if (len > sizeof(r->buf) - r->len)
        return -ENOSPC;
    memcpy(r->buf + r->len, data, len);
    r->len += len;
    return 0;
}

Switchyard__Admin__AdminMessage *frame_decode(const uint8_t *payload, size_t len)
{
    Switchyard__Admin__AdminMessage *m =
        switchyard__admin__admin_message__unpack(NULL, len, payload);
    if (m == NULL)
        return NULL;
    if (m->body_case == SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY__NOT_SET) {
        switchyard__admin__admin_message__free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

void frame_msg_free(Switchyard__Admin__AdminMessage *msg)
{
    if (msg != NULL)
        switchyard__admin__admin_message__free_unpacked(msg, NULL);
}

long frame_encode(const Switchyard__Admin__AdminMessage *msg, uint8_t *buf, size_t cap)
{
    size_t n = switchyard__admin__admin_message__get_packed_size(msg);
    if (n > FRAME_MAX_PAYLOAD || cap < FRAME_HEADER_LEN || n > cap - FRAME_HEADER_LEN)
        return -EMSGSIZE;
    frame_put_be32(buf, (uint32_t)n);
    switchyard__admin__admin_message__pack(msg, buf + FRAME_HEADER_LEN);
    return (long)(FRAME_HEADER_LEN + n);
}

void frame_writer_init(struct frame_writer *w)
{
    w->len = 0;
}

int frame_writer_queue(struct frame_writer *w, const Switchyard__Admin__AdminMessage *msg)
{
    size_t n = switchyard__admin__admin_message__get_packed_size(msg);
    if (n > FRAME_MAX_PAYLOAD)
        return -EMSGSIZE;
    if (FRAME_HEADER_LEN + n > sizeof(w->buf) - w->len)
        return -ENOBUFS;
    long put = frame_encode(msg, w->buf + w->len, sizeof(w->buf) - w->len);
    if (put < 0)
        return (int)put;
    w->len += (size_t)put;
    return 0;
}

int frame_writer_flush(struct frame_writer *w, int fd)
{
    while (w->len > 0) {
        ssize_t put = send(fd, w->buf, w->len, MSG_NOSIGNAL);
        if (put < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
        }
        memmove(w->buf, w->buf + put, w->len - (size_t)put);
        w->len -= (size_t)put;
    }
    return 0;
}

bool frame_writer_is_empty(const struct frame_writer *w)
{
    return w->len == 0;
}
