/*
 * Decoding of one vLLM KV-event batch (the msgpack payload of one PUB
 * message) into struct kv_event_batch (kv_events.h).
 *
 * Accepted, because vLLM has sent each of them:
 *  - the batch as an array [ts, events, data_parallel_rank] (msgspec's
 *    array_like structs) or as a map {ts, events, data_parallel_rank};
 *    a missing or nil rank reads as -1;
 *  - each event as a map tagged by its "type" key (current vLLM) or as a
 *    positional array whose first element is the tag (before);
 *  - fields at their defaults omitted (map keys absent, trailing array
 *    elements absent): medium GPU, no parent, no LoRA;
 *  - block hashes as integers (vLLM's default, taken as unsigned 64-bit)
 *    or as bytes/strings (raw digests), reduced to the value of their last
 *    8 bytes big-endian, as vLLM's own int form is.
 *  - group_idx and kv_cache_spec_kind (hybrid models: one BlockStored per
 *    KV-cache group), and the request's cache_salt from extra_keys[0] of
 *    an event without a parent (see struct kv_event).
 * Unknown map keys, extra array elements and events with an unknown tag are
 * skipped and counted (a newer vLLM adds fields); a wrong type on a field
 * this decoder reads is an error.
 *
 * Bounded: the decoder owns fixed arrays sized by its limits at creation
 * and allocates nothing while decoding; a batch with more events, hashes or
 * token ids than the limits, nesting deeper than KVD_MAX_DEPTH or a LoRA
 * name over KVD_LORA_NAME_MAX bytes is refused with -E2BIG. An event that
 * is well formed but odd (token_ids not n_block_hashes * block_size, as a
 * sliding-window group sends them; block_size 0; a salt over KVD_SALT_MAX
 * bytes, marked salt_unreadable) is decoded as it is: whether it can be
 * applied is the index's call (kv_apply.h), and one such event must never
 * cost the whole batch, since a batch refused means the worker's holdings
 * are resynced.
 *
 * Threading: one decoder per thread; the batch it returns points into the
 * decoder and stays valid until its next decode or its destruction.
 */
#ifndef SY_CONTROLPLANE_KV_EVENT_DECODE_H
#define SY_CONTROLPLANE_KV_EVENT_DECODE_H

#include "controlplane/kv/kv_events.h"

#include <stddef.h>
#include <stdint.h>

#define KVD_MAX_DEPTH     32
#define KVD_LORA_NAME_MAX 255
#define KVD_SALT_MAX      4096

/* 0 = the default of that field. */
struct kvd_limits {
    size_t max_events;    /* default 4,096 */
    size_t max_hashes;    /* block hashes over all events, default 65,536 */
    size_t max_token_ids; /* over all events, default 1,048,576 */
};

/* What was skipped, added to by each decode (the caller resets). */
struct kvd_counts {
    uint64_t unknown_fields; /* map keys and array elements not known */
    uint64_t unknown_events; /* events whose tag is not known */
};

struct kvd_decoder;

/* limits may be NULL (defaults). Returns NULL when out of memory. */
struct kvd_decoder *kvd_create(const struct kvd_limits *limits);
void kvd_destroy(struct kvd_decoder *d);

/*
 * Decodes data[0..len) into *out (its seq is left 0: the caller knows it).
 * Returns 0, -EINVAL for malformed input or -E2BIG past a limit, with a
 * one-line reason in err. counts may be NULL.
 */
int kvd_decode(struct kvd_decoder *d, const void *data, size_t len, struct kv_event_batch *out,
               struct kvd_counts *counts, char *err, size_t err_len);

#endif
