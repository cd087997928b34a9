/*
 * Fuzz target: one msgpack payload of a worker's KV-event PUB message (or
 * of a replay reply), as the control plane's decoder reads it
 * (controlplane/kv/kv_event_decode.h). The worker is outside our trust: any
 * bytes may come.
 *
 * Oracle: a decoded batch keeps the decoder's promises (events within the
 * limits, every id and hash readable, LoRA names terminated within their
 * bound; token ids are not n_block_hashes * block_size for a group that
 * skipped masked blocks, so that is no promise: kv_apply checks it for
 * the group it routes on); decoding is
 * deterministic; and a batch that decodes under tight limits decodes the
 * same under the default ones.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/kv/kv_event_decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct kvd_decoder *big, *tight;

static void check(const struct kv_event_batch *b, size_t max_events)
{
    if (b->n_events > max_events)
        abort();
    for (size_t i = 0; i < b->n_events; i++) {
        const struct kv_event *e = &b->events[i];
        if (e->lora_name != NULL &&
            strnlen(e->lora_name, KVD_LORA_NAME_MAX + 1) > KVD_LORA_NAME_MAX)
            abort();
        /* Touch every id and hash: they must be readable. */
        volatile uint64_t sum = 0;
        for (size_t k = 0; k < e->n_block_hashes; k++)
            sum += e->block_hashes[k];
        for (size_t k = 0; k < e->n_token_ids; k++)
            sum += e->token_ids[k];
        (void)sum;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (big == NULL) {
        struct kvd_limits lim = {.max_events = 8, .max_hashes = 16, .max_token_ids = 64};
        big = kvd_create(NULL);
        tight = kvd_create(&lim);
        if (big == NULL || tight == NULL)
            abort();
    }
    struct kv_event_batch a, b, t;
    struct kvd_counts ca = {0}, cb = {0};
    char err[160];
    int ra = kvd_decode(big, data, size, &a, &ca, err, sizeof(err));
    if (ra == 0)
        check(&a, 4096);
    size_t n_a = a.n_events;
    int rt = kvd_decode(tight, data, size, &t, NULL, err, sizeof(err));
    if (rt == 0) {
        check(&t, 8);
        if (ra != 0 || t.n_events != n_a)
            abort();
    }
    int rb = kvd_decode(big, data, size, &b, &cb, err, sizeof(err));
    if (rb != ra || b.n_events != n_a || cb.unknown_fields != ca.unknown_fields ||
        cb.unknown_events != ca.unknown_events)
        abort();
    return 0;
}
