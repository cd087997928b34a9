/*
 * The control plane's subscriber to vLLM's KV-cache events: one object, one
 * thread of its own that owns every ZeroMQ socket (ZeroMQ sockets are not
 * thread-safe), and the struct kv_event_sink (kv_events.h) it feeds.
 *
 * Per worker it subscribes to one publisher per data-parallel rank (vLLM
 * publishes rank r on the endpoint's port + r, and its replay socket on the
 * replay port + r) with a SUB socket, and checks each publisher's sequence
 * numbers:
 *  - the next number: decoded (kv_event_decode.h) and delivered;
 *  - a gap: the missing batches are asked from the replay endpoint (a
 *    DEALER socket sends the 8-byte start sequence, after the empty
 *    delimiter frame vLLM's ROUTER expects, and reads replies until the
 *    end marker, sequence -1, or a timeout; replies are (topic, seq,
 *    payload) as vLLM now sends them, or (seq, payload) as it did before),
 *    delivered in order, then the batch that showed the gap. No replay
 *    endpoint, no answer in time, or replies that do not cover the gap:
 *    on_forget (the index treats the worker as holding nothing known),
 *    then delivery goes on from that batch;
 *  - a number already delivered: a batch seen again with the same bytes
 *    (a reordered one that replay delivered already) is dropped; anything
 *    else means the publisher restarted (its numbers start again at 0):
 *    on_forget, then delivery goes on from that batch;
 *  - a batch that does not decode: counted, on_forget (what it said is
 *    lost), delivery goes on after it.
 * The first batch seen from a publisher starts its sequence. A worker
 * leaving the subscription set (it left the registry, or its endpoints
 * changed) is forgotten: on_forget, sockets closed.
 *
 * The sink is called on the subscriber's thread only, one call at a time,
 * batches of one publisher in sequence order. kvs_set_workers, kvs_stats,
 * kvs_worker_stats and kvs_metrics may be called from any thread.
 */
#ifndef SY_CONTROLPLANE_KV_SUBSCRIBER_H
#define SY_CONTROLPLANE_KV_SUBSCRIBER_H

#include "common/config.h"
#include "controlplane/kv/kv_events.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVS_ENDPOINT_MAX 280 /* a resolved tcp://HOST:PORT (an IPv6 host grows by its brackets) */
#define KVS_DP_MAX       64

struct prom_writer;
struct kv_subscriber;

/* One worker to subscribe to, as the control plane's registry says. */
struct kvs_worker_spec {
    uint32_t slot;
    uint32_t generation; /* a new generation is a new worker: forgotten, subscribed anew */
    char id[CFG_ID_MAX];
    char endpoint[KVS_ENDPOINT_MAX];        /* tcp://HOST:PORT of rank 0 (no '*': resolved) */
    char replay_endpoint[KVS_ENDPOINT_MAX]; /* "" = no replay: a gap is a resync */
    uint32_t data_parallel_size;            /* 1..KVS_DP_MAX publishers: port + rank */
};

/* 0 = the default. */
struct kvs_options {
    uint64_t replay_timeout_ms; /* a whole replay, default 2000 */
    uint64_t max_gap;           /* larger gaps are not asked for, default 10000 (vLLM's buffer) */
    size_t max_message_bytes;   /* a bigger message is dropped by ZeroMQ, default 64 MiB */
};

/* Counters, over all workers. */
struct kvs_stats {
    uint64_t batches; /* delivered, replayed ones included */
    uint64_t stored;  /* events by kind, in delivered batches */
    uint64_t removed;
    uint64_t cleared;
    uint64_t gaps;       /* sequence gaps seen */
    uint64_t replays;    /* replay requests sent */
    uint64_t replayed;   /* batches delivered from replay */
    uint64_t resyncs;    /* on_forget for a gap, a restart or an undecodable batch */
    uint64_t restarts;   /* of them: a publisher's sequence went back */
    uint64_t duplicates; /* batches seen again and dropped */
    uint64_t decode_errors;
    uint64_t unknown_fields; /* skipped by the decoder */
    uint64_t unknown_events;
};

/* Per worker, for /metrics and tests. */
struct kvs_worker_stats {
    char id[CFG_ID_MAX];
    uint32_t slot;
    uint64_t batches;
    uint64_t gaps;
    uint64_t resyncs;
    uint64_t decode_errors;
};

/*
 * Starts the thread. sink is copied (its ctx is borrowed and must outlive
 * the subscriber); opts may be NULL. Returns 0, -ENOMEM or -EIO.
 */
int kvs_create(const struct kv_event_sink *sink, const struct kvs_options *opts,
               struct kv_subscriber **out);

/* Stops the thread, closes every socket (no on_forget). NULL is a no-op. */
void kvs_destroy(struct kv_subscriber *s);

/*
 * The whole set of workers to follow (replaces the previous one; copied).
 * The thread applies it soon after: new workers are subscribed, workers
 * that left or whose spec changed are forgotten. Returns 0, -EINVAL (a
 * spec with a bad endpoint or rank count; nothing changes) or -ENOMEM.
 */
int kvs_set_workers(struct kv_subscriber *s, const struct kvs_worker_spec *w, size_t n);

void kvs_stats(struct kv_subscriber *s, struct kvs_stats *out);

/* Copies up to cap workers' counters; returns how many workers there are. */
size_t kvs_worker_stats(struct kv_subscriber *s, struct kvs_worker_stats *out, size_t cap);

/* Appends the switchyard_kv_events_* families (docs/metrics.md). */
void kvs_metrics(struct kv_subscriber *s, struct prom_writer *w);

/*
 * Resolves a configured endpoint for a worker: a host of '*' (vLLM's
 * default endpoint binds every address with it) or none (tcp://:5557)
 * becomes the host of worker_url (http(s)://HOST:PORT, brackets kept for
 * IPv6). Returns 0 or -EINVAL (not tcp://HOST:PORT) / -ENAMETOOLONG.
 */
int kvs_resolve_endpoint(const char *configured, const char *worker_url, char *out, size_t out_len);

#endif
