/*
 * Workloads of the routing-quality benchmark (build/switchyard-bench):
 * parsed from a small YAML file under tests/bench/workloads/ and expanded,
 * with a fixed seed, into a plan — every request's body, session key and
 * open-loop arrival time (Poisson process). Also computes the workload's
 * prefix-cache hit-rate ceiling. Single-threaded; a plan owns its bodies.
 *
 * Two arrival models. By default every request is an arrival of its own
 * (at_s), sent whatever happened to earlier ones. A multi_turn workload
 * with `sequential_turns: true` models agents instead: the open-loop
 * Poisson process starts conversations (at rate / turns per second, so the
 * offered load is still `rate` requests/s), and a conversation sends turn
 * t+1 only once turn t has completed, after a think time (exponential,
 * mean think_ms). At most max_concurrency conversations run at once (0 =
 * no limit): a conversation due while that many run starts when one ends.
 * Conversations start during the first duration_s seconds; the run sends
 * nothing after that (what is in flight completes), and its throughput
 * and latencies are taken over [warmup_s, duration_s].
 *
 * A multi_turn workload may give every conversation's system prompt a
 * common head: `shared_system_tokens: N` puts the same N tokens (system
 * prompt and tool definitions of one agent framework) before each
 * conversation's own system_tokens. Without the key (or with 0) every
 * request is byte for byte what it was before the key existed. With
 * `private_head_share: f` about a share f of the conversations (chosen by
 * a hash of the seed and the conversation) get a head of the same length
 * of their own instead: one popular framework among agents of their own.
 *
 * `bypass_share: f` (any kind) sends a share f of the requests (drawn per
 * request from the seed) straight to the workers instead of through the
 * router, as clients or another router would: each group's (conversation's)
 * bypassing requests go to one worker chosen by a hash of the seed and the
 * group, so the workers compute prefixes the router never saw. The run's
 * hit rate and ceiling then count the routed requests only.
 */
#ifndef SY_TESTS_BENCH_WORKLOAD_H
#define SY_TESTS_BENCH_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum wl_kind {
    WL_KIND_NONE = 0,
    WL_KIND_SHARED_PREFIX, /* groups x prompts_per_group, one system prompt per group */
    WL_KIND_MULTI_TURN,    /* conversations x turns; each turn extends its history */
    WL_KIND_HOT_PREFIX,    /* `requests` over groups; group 0 carries hot_share of them */
};

/* A workload as written in its YAML file (after the quick overrides). */
struct wl_spec {
    char name[64];
    enum wl_kind kind;
    unsigned groups;               /* shared/hot prefix: distinct system prompts */
    unsigned prompts_per_group;    /* shared prefix */
    unsigned conversations;        /* multi-turn */
    unsigned turns;                /* multi-turn */
    unsigned requests;             /* hot prefix: total requests */
    double hot_share;              /* hot prefix: share of group 0 (0..1) */
    unsigned system_tokens;        /* system prompt length (4 bytes per token) */
    unsigned shared_system_tokens; /* multi-turn: common head of every system prompt; 0 = none */
    double private_head_share;     /* multi-turn with a shared head: share of conversations
                                      whose head is their own instead (0..1; 0 = none) */
    unsigned question_tokens;      /* per request (multi-turn: per user turn) */
    unsigned output_tokens;        /* max_tokens (multi-turn: also the replayed reply) */
    double rate; /* open-loop arrivals per second (sequential: offered requests/s) */
    uint64_t seed;
    bool sequential_turns;    /* multi-turn: turn t+1 after turn t completed */
    double think_ms;          /* sequential: mean think time before turns 1.. */
    unsigned max_concurrency; /* sequential: conversations at once; 0 = unlimited */
    double duration_s;        /* sequential: conversations start (and requests go) until then */
    double warmup_s;          /* sequential: measurement window starts then */
    double bypass_share;      /* share of requests sent straight to a worker (0..1) */
};

/* One planned request. */
struct wl_request {
    double at_s;      /* arrival, seconds after the start (sequential: its conversation's start) */
    double think_s;   /* sequential: wait after the previous turn completed; else 0 */
    unsigned group;   /* group or conversation */
    unsigned turn;    /* multi-turn: 0-based turn; else 0 */
    char session[24]; /* X-Session-Id */
    char *body;       /* JSON body (owned) */
    size_t body_len;
    char *text; /* the prompt text as the mock worker hashes it (owned) */
    size_t text_len;
    unsigned output_tokens;
    bool chat;        /* /v1/chat/completions, else /v1/completions */
    const char *auth; /* "Authorization: Bearer" key (borrowed; set by the caller), NULL = none */
    bool bypass;      /* bypass_share: sent straight to a worker, not through the router */
    uint32_t bypass_key; /* that worker: the bypass_key % n_workers-th --mock */
};

/* Sequential plans hold conversation-major requests: conversation c's turn
 * t is req[c * turns + t], conversations sorted by start. */
struct wl_plan {
    struct wl_request *req;
    size_t n;
    bool sequential;
    unsigned turns;           /* sequential: requests per conversation */
    unsigned max_concurrency; /* sequential: 0 = unlimited */
    double stop_s;            /* sequential: nothing is sent after this; else 0 */
    double warmup_s;          /* sequential: start of the measurement window */
};

/* Parses FILE into spec; with quick, the mapping under `quick:` overrides
 * the top-level keys. Returns 0 or -errno with a message naming the file,
 * line and key in err. */
int wl_parse_file(const char *path, bool quick, struct wl_spec *spec, char *err, size_t errlen);
/* Same, from a string (name used in messages). */
int wl_parse_string(const char *yaml, size_t len, const char *name, bool quick,
                    struct wl_spec *spec, char *err, size_t errlen);

/* Expands spec into plan (sorted by arrival). Returns 0 or -ENOMEM/-EINVAL. */
int wl_plan_build(const struct wl_spec *spec, struct wl_plan *plan);
void wl_plan_fini(struct wl_plan *plan);

/* Hit-rate ceiling: the share of prompt tokens served from cache by one LRU
 * cache holding capacity_blocks blocks of block_tokens tokens (the whole
 * fleet's KV capacity, as if an ideal router pooled it), fed the plan's
 * requests with the mock worker's block rules: order[0..n) (indices into
 * plan->req, e.g. the order a run sent them in), or with order NULL every
 * request in plan order. */
double wl_hit_ceiling(const struct wl_plan *plan, const size_t *order, size_t n,
                      unsigned block_tokens, size_t capacity_blocks);
/* The same cache fed every request, counting the routed ones only (those
 * without `bypass`): the ceiling of a run that bypasses the router. */
double wl_hit_ceiling_routed(const struct wl_plan *plan, const size_t *order, size_t n,
                             unsigned block_tokens, size_t capacity_blocks);

const char *wl_kind_name(enum wl_kind kind);

/* The spec's effective values as "key=value ..." (the keys its kind uses). */
void wl_spec_format(const struct wl_spec *spec, char *buf, size_t len);

#endif
