/*
 * Fuzz target: the admin channel's framing and message decoding, what the
 * control plane reads from a data plane's socket (and the data plane from
 * the control plane's). The bytes are fed to a frame reader in reads of a
 * size the input picks; every complete frame is decoded with protobuf-c.
 *
 * Oracle: a decoded message re-encodes to exactly its announced packed
 * size and, when it carried no unknown fields, decodes again (protobuf-c's
 * own round trip).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* True when msg or a message field set in it (the oneof's active member
 * included) kept fields its schema does not know. */
static bool has_unknown_fields(const ProtobufCMessage *msg)
{
    if (msg->n_unknown_fields > 0)
        return true;
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE || f->label == PROTOBUF_C_LABEL_REPEATED)
            continue;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t active = *(const uint32_t *)((const char *)msg + f->quantifier_offset);
            if (active != f->id)
                continue;
        }
        const ProtobufCMessage *sub = *(ProtobufCMessage *const *)((const char *)msg + f->offset);
        if (sub != NULL && has_unknown_fields(sub))
            return true;
    }
    return false;
}

static void check_round_trip(const Switchyard__Admin__AdminMessage *m)
{
    size_t n = switchyard__admin__admin_message__get_packed_size(m);
    uint8_t *buf = malloc(n + 1);
    if (buf == NULL)
        return;
    if (switchyard__admin__admin_message__pack(m, buf) != n)
        abort();
    /* protobuf-c keeps unknown fields and writes them back as it read them,
     * except that it accepts an overlong tag 0 it refuses once rewritten
     * short: only a message without unknown fields must decode again. */
    Switchyard__Admin__AdminMessage *again = frame_decode(buf, n);
    if (again == NULL && !has_unknown_fields(&m->base))
        abort();
    frame_msg_free(again);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t)data[0] * 64u + 1u;
    static struct frame_reader r; /* large: not on the stack */
    frame_reader_init(&r);
    for (size_t off = 1; off < size;) {
        size_t n = size - off < step ? size - off : step;
        if (frame_reader_feed(&r, data + off, n) != 0)
            return 0; /* full without a frame: the channel closes such a peer */
        off += n;
        for (;;) {
            const uint8_t *payload;
            size_t len;
            int st = frame_reader_next(&r, &payload, &len);
            if (st < 0)
                return 0; /* oversized frame: the channel closes the peer */
            if (st == 0)
                break;
            Switchyard__Admin__AdminMessage *m = frame_decode(payload, len);
            if (m != NULL) {
                check_round_trip(m);
                frame_msg_free(m);
            }
            frame_reader_consume(&r);
        }
    }
    return 0;
}
