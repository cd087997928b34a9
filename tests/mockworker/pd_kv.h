/*
 * The mock worker's side of vLLM's NixlConnector protocol (docs/pd.md,
 * docs/mockworker.md): reading the kv_transfer_params a P/D router sends,
 * and writing the params a prefill worker answers with, in either shape of
 * remote_block_ids vLLM has used: one list per KV-cache group ([[4,5,6]],
 * vLLM since March 2026, the default) or flat ([4,5,6], before; flag
 * --kv-block-ids-shape flat). A worker accepts only its own shape, as a
 * vLLM of that version does, so a router that rewrites the params is caught.
 *
 * Kept apart from openai.c (the general wire format) so that P/D changes
 * stay in one file. Threading: pure functions; safe from any thread.
 */
#ifndef SY_TESTS_MOCKWORKER_PD_KV_H
#define SY_TESTS_MOCKWORKER_PD_KV_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/mockworker/openai.h"

/*
 * Fills out's kv fields from body's kv_transfer_params: do_remote_decode
 * (a prefill request for a remote decode), and for a decode request whose
 * params are usable (do_remote_prefill true, engine id, host and port,
 * remote_block_ids in this worker's shape) remote_prefill_valid,
 * remote_blocks, remote_request_id, remote_host and remote_port.
 */
void mw_pd_parse_params(const json_t *body, bool flat, struct mw_infer *out);

/* What a prefill answer's params say. Borrowed strings. */
struct mw_pd_answer {
    const char *engine_id;
    const char *host;
    uint16_t port;
    const uint32_t *block_ids; /* n_blocks ids, the tail block's included */
    size_t n_blocks;
    bool flat;              /* remote_block_ids flat, else one group */
    bool push;              /* push mode: no remote_block_ids, transfer_mode "push" */
    const char *request_id; /* remote_request_id: unique per prefill */
    uint64_t num_tokens;    /* remote_num_tokens: the prompt's tokens */
    int64_t expiry;         /* remote_blocks_expiry_time: unix seconds */
};

/* The prefill answer's kv_transfer_params as vLLM writes them, or NULL. */
json_t *mw_pd_answer_params(const struct mw_pd_answer *a);

#endif
