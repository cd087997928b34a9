/*
 * Fixtures for the end-to-end tests of precise_cache_aware routing: the
 * prompts, the chain of block hashes the router computes for them, chat
 * turns read back from the debug headers, the KV holder index attached as
 * the data plane attaches it, tokenizers that fail, and a fleet whose mock
 * workers publish their KV-cache events. test_precise_routing fills the
 * holder index itself in front of a plain h_fleet; test_precise_e2e lets
 * the mocks' events fill it through the control plane (h_precise_fleet).
 *
 * The mock tokenizes 4 bytes of text a token (the id those bytes read
 * little-endian) and a chat prompt is each message's role then content, so
 * the test computes the same chain the router does without a tokenizer.
 * Main thread only; the processes belong to the harness context (teardown
 * stops them). Functions assert (cmocka): a fixture that cannot start or a
 * request that is not answered fails the test.
 */
#ifndef SY_TESTS_E2E_HARNESS_PRECISE_H
#define SY_TESTS_E2E_HARNESS_PRECISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_routed.h"

struct kvh_index;

#define H_PRECISE_BLOCK_SIZE  16 /* the mock's default --block-tokens, the policy's default */
#define H_PRECISE_BLOCK_TEXT  (4 * H_PRECISE_BLOCK_SIZE) /* bytes of text a block */
#define H_PRECISE_WAIT_MS     10000 /* the fleet's waits for events and counters */
#define H_PRECISE_MAX_WORKERS 4

/* The data plane of both tests: the debug headers name the worker and the
 * decision; one event loop means one tokenize cache, as predictable as one
 * router. */
#define H_PRECISE_DATAPLANE_EXTRA "debug_headers: true\nthreads: 1\n"
/* The policy section without speculative entries: an `affinity` decision
 * comes from the holder index alone. More keys may follow, indented by 2. */
#define H_PRECISE_POLICY_EXACT "precise_cache_aware:\n  speculative_ttl: 0ms\n"

/* ---- prompts, chains, chat turns ---------------------------------------- */

/* Content whose turn ("user" + content) is exactly `blocks` full blocks
 * (h_routed_text of that seed). */
char *h_precise_blocks(unsigned seed, size_t blocks);

/* The router's chain for one user message of H_FLEET_MODEL: the mock's
 * tokens of "user" + content in blocks of H_PRECISE_BLOCK_SIZE, seeded by
 * the model. Writes up to max hashes into out; returns how many. */
size_t h_precise_chain(const char *content, uint64_t *out, size_t max);

/* As h_precise_chain from another seed (a salted chain: tkc_salt_seed). */
size_t h_precise_chain_seeded(uint64_t seed, const char *content, uint64_t *out, size_t max);

/* A chat completion request of H_FLEET_MODEL with one user message
 * (malloc'd JSON; the caller frees it). */
char *h_precise_chat_body(const char *content, int max_tokens);

/* POSTs one chat turn to the data plane at base (h_routed_post): asserts
 * 200; the worker and the decision from the debug headers. */
void h_precise_chat(const char *base, const char *content, int max_tokens, char *worker,
                    size_t wlen, char *decision, size_t dlen);

/* ---- the holder index ---------------------------------------------------- */

/* h_wait_until condition on the data plane's struct h_proc: its log says
 * it attached the holder index. */
bool h_precise_dp_attached(void *dp);

/* Attaches "<shm_name>.kvholders" as the data plane does (kvh_attach); a
 * test may still write facts to it as the control plane would. kvh_destroy
 * detaches it. */
struct kvh_index *h_precise_attach_holders(const char *shm_name);

/* The registry slot of worker id in f's segment. */
uint32_t h_precise_slot(const struct h_fleet *f, const char *id);

/* ---- tokenizers that fail ------------------------------------------------ */

/* A tokenizer_url nothing listens at: every tokenize fails at once. */
void h_precise_dead_tokenizer(char *url, size_t len);

/* A tokenizer_url whose socket listens but never accepts nor answers:
 * every tokenize times out. Returns the socket; the caller closes it. */
int h_precise_silent_tokenizer(char *url, size_t len);

/* ---- a fleet with KV events on -------------------------------------------- */

/* One mock worker of an h_precise_fleet: it publishes its KV-cache events
 * on pub (and answers replays on replay), and its flags are kept so that it
 * restarts alike. */
struct h_precise_worker {
    char id[32];
    char pub[64], replay[64];
    char kv_events[192];  /* the worker's kv_events config ('*' = its host) */
    const char *argv[24]; /* the mock's flags */
};

/*
 * A router (fleet.cp, fleet.dp, fleet.base, fleet.seg) in front of n mocks
 * (fleet.mock[i], ids w1..wn) publishing KV-cache events the control plane
 * subscribes to; ix is the holder index as the data plane attaches it
 * (the test only reads it). Caller storage; h_precise_fleet_stop detaches.
 */
struct h_precise_fleet {
    struct h_fleet fleet;
    struct h_precise_worker w[H_PRECISE_MAX_WORKERS];
    struct kvh_index *ix;
    char cp_metrics[128]; /* the control plane's /metrics */
    char policy_extra[512];
    char dataplane_extra[1024];
    unsigned probes; /* probe prompts sent so far (each one fresh) */
};

struct h_precise_fleet_opts {
    size_t n;                     /* at most H_PRECISE_MAX_WORKERS */
    const char *kv_blocks;        /* the mocks' --kv-blocks, NULL = default */
    const char *policy_extra;     /* more precise_cache_aware keys, indented by 2;
                                   * NULL = "  tokenize_timeout: 2s\n" */
    const char *const *mock_args; /* more flags of every mock, NULL-terminated; NULL = none */
    const char *dataplane_extra;  /* more dataplane keys after H_PRECISE_DATAPLANE_EXTRA */
};

/*
 * Starts the mocks with KV events on, the control plane subscribing to each
 * and the data plane (H_PRECISE_POLICY_EXACT, H_PRECISE_DATAPLANE_EXTRA,
 * health probes every 100ms), attaches the holder index, and returns once
 * every subscription has joined and delivered a batch (a SUB socket misses
 * what is published before it joins, so each worker is probed until then).
 */
void h_precise_fleet_start(struct h_precise_fleet *f, const struct h_precise_fleet_opts *o);

/* Detaches the holder index and the segment (the processes stop at teardown). */
void h_precise_fleet_stop(struct h_precise_fleet *f);

/* One sample of the control plane's /metrics; -1 when absent (h_metric_at). */
long long h_precise_cp_metric(const struct h_precise_fleet *f, const char *sample);

/* Waits until the control plane's sample is at least want; fails the test
 * after H_PRECISE_WAIT_MS. */
void h_precise_wait_cp_metric_ge(const struct h_precise_fleet *f, const char *sample,
                                 long long want);

/* Turns of H_FLEET_MODEL with max_tokens 2: through the router (worker and
 * decision from the debug headers), or straight to worker i, bypassing it.
 * Both assert 200. */
void h_precise_fleet_chat(const struct h_precise_fleet *f, const char *content, char *worker,
                          size_t wlen, char *decision, size_t dlen);
void h_precise_fleet_chat_direct(const struct h_precise_fleet *f, size_t i, const char *content);

/* Sends worker i fresh one-block prompts (one event batch each) until the
 * control plane's sample is at least 1; fails the test after
 * H_PRECISE_WAIT_MS. */
void h_precise_fleet_probe_until(struct h_precise_fleet *f, size_t i, const char *sample);

/* Worker i stops and starts again on the same HTTP and ZeroMQ ports: an
 * empty cache, its sequence numbers from 0 again. */
void h_precise_fleet_restart_mock(struct h_precise_fleet *f, size_t i);

#endif
