/*
 * KV-event load generator of the "scale" benchmark section
 * (tests/bench/sections/80-scale.sh): N publishers sending vLLM's exact
 * bytes (vllm/distributed/kv_events.py: multipart topic "", sequence as 8
 * bytes big-endian from 0, msgpack batch [ts, events, data_parallel_rank]
 * with events as tagged maps, as the mock's publisher sends them:
 * tests/mockworker/kv_events.c) at a total rate that rises step by step,
 * while it reads the control plane's own counters around each step.
 *
 * Publisher i binds tcp://127.0.0.1:(port-base + i) (or the i-th port of
 * --ports-file, one a line) and models a worker
 * whose cache holds --kv-blocks blocks: it stores chains of --chain blocks
 * (one BlockStored of one block each, parent = the previous block, 16 token
 * ids), and once full removes its oldest block (BlockRemoved) before each
 * store, so the holder index stays at N x kv-blocks facts and every event
 * is applied. An event is one BlockStored or BlockRemoved of one block (a
 * decode step's new block; prefill's many-block events are cheaper per
 * block). --batch events go in one batch, as one engine step's.
 *
 * The sockets are XPUB (identical to PUB on the wire) so that the start
 * waits until the control plane has subscribed to every publisher instead
 * of losing the first batches to ZeroMQ's slow joiner.
 *
 * Per step (--rates R1,R2,...; --seconds each): the control plane's
 * switchyard_kv_events_applied_total and lag histogram
 * (switchyard_kv_events_lag_seconds: a batch's ts to its events applied)
 * from its /metrics, its CPU time (/proc/PID/schedstat) before and after,
 * then a drain (until the applied count stops moving, at most 5 s) before
 * the lag is read. Prints "key value" lines:
 *   kvload_R_offered, _sent (events/s the generator managed),
 *   _applied (events/s applied within the step), _cpu_cores (control-plane
 *   CPU seconds per second), _per_cpu_s (events applied per control-plane
 *   CPU-second), _lag_p50_ms/_lag_p99_ms (bucket upper bounds; ">10000"
 *   shown as 10000+).
 *
 * Usage: micro_kvload --port-base P --publishers N --cp-pid PID
 *        --cp-metrics URL --rates R1,R2 [--seconds S] [--batch E]
 *        [--kv-blocks K] [--chain L] [--threads T] [--start-file F]
 * With --start-file, the steps wait until F exists (the sockets are bound
 * at once); without --cp-pid, F holds the control plane's pid.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <curl/curl.h>
#include <msgpack.h>
#include <zmq.h>

#include "common/proc.h"

#define BLOCK_TOKENS 16
#define MAX_THREADS  8
#define MAX_RATES    16
#define LAG_BUCKETS  32

struct publisher {
    void *sock;
    uint64_t seq;
    uint64_t next_hash;
    uint64_t *ring; /* stored hashes, oldest at ring_start */
    size_t ring_start, ring_n;
    uint64_t parent; /* the chain's last block, 0 = a chain starts */
    unsigned chain_left;
    bool removing; /* next event removes the oldest block */
};

struct gen {
    struct publisher *pubs;
    unsigned n_pubs;
    unsigned kv_blocks, chain, batch;
    unsigned threads;
    _Atomic uint64_t sent_events;
    _Atomic double rate; /* total events/s; 0 = idle */
    _Atomic bool stop;
};

struct worker_arg {
    struct gen *g;
    unsigned first, step; /* publishers first, first + step, ... */
};

static void pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_stored(msgpack_packer *pk, uint64_t h, uint64_t parent)
{
    msgpack_pack_map(pk, 11);
    pack_cstr(pk, "type");
    pack_cstr(pk, "BlockStored");
    pack_cstr(pk, "block_hashes");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, h);
    pack_cstr(pk, "parent_block_hash");
    if (parent != 0)
        msgpack_pack_uint64(pk, parent);
    else
        msgpack_pack_nil(pk);
    pack_cstr(pk, "token_ids");
    msgpack_pack_array(pk, BLOCK_TOKENS);
    for (unsigned t = 0; t < BLOCK_TOKENS; t++)
        msgpack_pack_uint32(pk, (uint32_t)((h >> (t % 48)) & 0xffffu) + t);
    pack_cstr(pk, "block_size");
    msgpack_pack_uint32(pk, BLOCK_TOKENS);
    pack_cstr(pk, "lora_id");
    msgpack_pack_nil(pk);
    pack_cstr(pk, "medium");
    pack_cstr(pk, "GPU");
    pack_cstr(pk, "lora_name");
    msgpack_pack_nil(pk);
    pack_cstr(pk, "extra_keys");
    msgpack_pack_array(pk, 1);
    msgpack_pack_nil(pk);
    pack_cstr(pk, "group_idx");
    msgpack_pack_uint32(pk, 0);
    pack_cstr(pk, "kv_cache_spec_kind");
    pack_cstr(pk, "full_attention");
}

static void pack_removed(msgpack_packer *pk, uint64_t h)
{
    msgpack_pack_map(pk, 4);
    pack_cstr(pk, "type");
    pack_cstr(pk, "BlockRemoved");
    pack_cstr(pk, "block_hashes");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, h);
    pack_cstr(pk, "medium");
    pack_cstr(pk, "GPU");
    pack_cstr(pk, "group_idx");
    msgpack_pack_uint32(pk, 0);
}

/* The next event of p: a removal of its oldest block when full, else a store. */
static void next_event(struct gen *g, struct publisher *p, msgpack_packer *pk)
{
    if (p->ring_n == g->kv_blocks) {
        uint64_t old = p->ring[p->ring_start];
        p->ring_start = (p->ring_start + 1) % g->kv_blocks;
        p->ring_n--;
        pack_removed(pk, old);
        return;
    }
    if (p->chain_left == 0) {
        p->parent = 0;
        p->chain_left = g->chain;
    }
    uint64_t h = p->next_hash++;
    pack_stored(pk, h, p->parent);
    p->parent = h;
    p->chain_left--;
    p->ring[(p->ring_start + p->ring_n) % g->kv_blocks] = h;
    p->ring_n++;
}

static void send_batch(struct gen *g, struct publisher *p, msgpack_sbuffer *sb)
{
    msgpack_sbuffer_clear(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, (double)now.tv_sec + (double)now.tv_nsec / 1e9);
    msgpack_pack_array(&pk, g->batch);
    for (unsigned e = 0; e < g->batch; e++)
        next_event(g, p, &pk);
    msgpack_pack_int(&pk, 0);
    unsigned char seq[8];
    for (int i = 0; i < 8; i++)
        seq[i] = (unsigned char)(p->seq >> (56 - 8 * i));
    p->seq++;
    zmq_send(p->sock, "", 0, ZMQ_SNDMORE);
    zmq_send(p->sock, seq, 8, ZMQ_SNDMORE);
    zmq_send(p->sock, sb->data, sb->size, 0);
}

/* Paced sender: keeps its share of the batches due since the rate was
 * set, round robin over its publishers, checking the clock every 1 ms. */
static void *sender_main(void *arg)
{
    struct worker_arg *wa = arg;
    struct gen *g = wa->g;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    unsigned cursor = wa->first;
    double rate_seen = -1;
    uint64_t t0 = 0, done = 0;
    while (!atomic_load(&g->stop)) {
        double rate = atomic_load(&g->rate);
        uint64_t now = proc_monotonic_ns();
        if (rate != rate_seen) {
            rate_seen = rate;
            t0 = now;
            done = 0;
        }
        double share = rate / g->threads / g->batch; /* batches/s of this thread */
        uint64_t due = (uint64_t)(share * (double)(now - t0) / 1e9);
        if (rate <= 0 || done >= due) {
            struct timespec ts = {0, 500000};
            nanosleep(&ts, NULL);
            continue;
        }
        /* At most 100 ms behind: a saturated generator does not burst later. */
        if (due - done > share / 10 + 1)
            done = due - (uint64_t)(share / 10);
        for (; done < due; done++) {
            send_batch(g, &g->pubs[cursor], &sb);
            cursor += wa->step;
            if (cursor >= g->n_pubs)
                cursor = wa->first;
            atomic_fetch_add_explicit(&g->sent_events, g->batch, memory_order_relaxed);
        }
    }
    msgpack_sbuffer_destroy(&sb);
    return NULL;
}

/* ---- the control plane's counters ------------------------------------------ */

struct page {
    char *data;
    size_t len;
};

static size_t collect(char *p, size_t s, size_t n, void *u)
{
    struct page *pg = u;
    char *d = realloc(pg->data, pg->len + s * n + 1);
    if (d == NULL)
        return 0;
    memcpy(d + pg->len, p, s * n);
    pg->data = d;
    pg->len += s * n;
    pg->data[pg->len] = '\0';
    return s * n;
}

struct snapshot {
    double applied; /* BlockStored + BlockRemoved applied */
    double lag_le[LAG_BUCKETS];
    double lag_cum[LAG_BUCKETS]; /* cumulative, +Inf last */
    size_t n_lag;
    uint64_t cpu_ns;
    uint64_t at_ns;
};

/* The process's CPU time in ns: the sum over its threads'
 * /proc/PID/task/TID/schedstat (ns precision; /proc/PID/schedstat alone is
 * the main thread's, /proc/PID/stat counts 10 ms ticks). */
static uint64_t cpu_ns(long pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    uint64_t sum = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        if (e->d_name[0] == '.')
            continue;
        char p2[300];
        snprintf(p2, sizeof(p2), "/proc/%ld/task/%s/schedstat", pid, e->d_name);
        FILE *f = fopen(p2, "re");
        unsigned long long ns = 0;
        if (f != NULL) {
            if (fscanf(f, "%llu", &ns) == 1)
                sum += ns;
            fclose(f);
        }
    }
    closedir(d);
    return sum;
}

static int take_snapshot(const char *url, long pid, struct snapshot *s)
{
    memset(s, 0, sizeof(*s));
    CURL *c = curl_easy_init();
    struct page pg = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &pg);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    s->cpu_ns = cpu_ns(pid);
    s->at_ns = proc_monotonic_ns();
    CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK || pg.data == NULL) {
        free(pg.data);
        return -EIO;
    }
    for (char *line = strtok(pg.data, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strncmp(line, "switchyard_kv_events_applied_total{type=\"Block", 46) == 0) {
            char *sp = strrchr(line, ' ');
            if (sp != NULL)
                s->applied += strtod(sp + 1, NULL);
        } else if (strncmp(line, "switchyard_kv_events_lag_seconds_bucket{", 40) == 0 &&
                   s->n_lag < LAG_BUCKETS) {
            char *le = strstr(line, "le=\"");
            char *sp = strrchr(line, ' ');
            if (le == NULL || sp == NULL)
                continue;
            s->lag_le[s->n_lag] = strncmp(le + 4, "+Inf", 4) == 0 ? INFINITY : strtod(le + 4, NULL);
            s->lag_cum[s->n_lag++] = strtod(sp + 1, NULL);
        }
    }
    free(pg.data);
    return 0;
}

/* The bound of the bucket holding quantile q of the batches between a and b. */
static double lag_quantile(const struct snapshot *a, const struct snapshot *b, double q)
{
    if (a->n_lag != b->n_lag || b->n_lag == 0)
        return NAN;
    double total = b->lag_cum[b->n_lag - 1] - a->lag_cum[a->n_lag - 1];
    if (total <= 0)
        return NAN;
    for (size_t i = 0; i < b->n_lag; i++)
        if (b->lag_cum[i] - a->lag_cum[i] >= q * total)
            return b->lag_le[i];
    return INFINITY;
}

static void print_ms(const char *key, double r, double s)
{
    if (isnan(s))
        printf("kvload_%.0f_%s n/a\n", r, key);
    else if (isinf(s))
        printf("kvload_%.0f_%s >10000\n", r, key);
    else
        printf("kvload_%.0f_%s %g\n", r, key, s * 1000);
}

/* Waits until every publisher has a subscriber (XPUB sees its subscribe). */
static int wait_subscribed(struct gen *g, int timeout_s)
{
    bool *seen = calloc(g->n_pubs, sizeof(bool));
    unsigned n_seen = 0;
    uint64_t deadline = proc_monotonic_ns() + (uint64_t)timeout_s * 1000000000ull;
    while (n_seen < g->n_pubs && proc_monotonic_ns() < deadline) {
        for (unsigned i = 0; i < g->n_pubs; i++) {
            char buf[64];
            while (zmq_recv(g->pubs[i].sock, buf, sizeof(buf), ZMQ_DONTWAIT) > 0) {
                if (buf[0] == 1 && !seen[i]) {
                    seen[i] = true;
                    n_seen++;
                }
            }
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    free(seen);
    fprintf(stderr, "kvload: %u of %u publishers subscribed\n", n_seen, g->n_pubs);
    return n_seen == g->n_pubs ? 0 : -ETIMEDOUT;
}

int main(int argc, char **argv)
{
    unsigned port_base = 0, n_pubs = 0, seconds = 5, threads = 1;
    long cp_pid = 0;
    const char *metrics = NULL, *rates_arg = NULL, *start_file = NULL, *ports_file = NULL;
    struct gen g = {.kv_blocks = 2048, .chain = 32, .batch = 16};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--port-base") == 0)
            port_base = (unsigned)atoi(v);
        else if (strcmp(k, "--publishers") == 0)
            n_pubs = (unsigned)atoi(v);
        else if (strcmp(k, "--cp-pid") == 0)
            cp_pid = atol(v);
        else if (strcmp(k, "--cp-metrics") == 0)
            metrics = v;
        else if (strcmp(k, "--rates") == 0)
            rates_arg = v;
        else if (strcmp(k, "--seconds") == 0)
            seconds = (unsigned)atoi(v);
        else if (strcmp(k, "--batch") == 0)
            g.batch = (unsigned)atoi(v);
        else if (strcmp(k, "--kv-blocks") == 0)
            g.kv_blocks = (unsigned)atoi(v);
        else if (strcmp(k, "--chain") == 0)
            g.chain = (unsigned)atoi(v);
        else if (strcmp(k, "--threads") == 0)
            threads = (unsigned)atoi(v);
        else if (strcmp(k, "--start-file") == 0)
            start_file = v;
        else if (strcmp(k, "--ports-file") == 0)
            ports_file = v;
        else {
            fprintf(stderr, "micro_kvload: unknown flag %s\n", k);
            return 2;
        }
    }
    if ((port_base == 0 && ports_file == NULL) || n_pubs == 0 ||
        (cp_pid == 0 && start_file == NULL) || metrics == NULL || rates_arg == NULL ||
        g.batch == 0 || g.kv_blocks == 0 || g.chain == 0 || threads == 0 || threads > MAX_THREADS ||
        port_base + n_pubs > 65536) {
        fprintf(stderr, "usage: micro_kvload --port-base P|--ports-file F --publishers N --cp-pid "
                        "PID|--start-file F "
                        "--cp-metrics URL --rates R1,R2 [--seconds S] [--batch E] "
                        "[--kv-blocks K] [--chain L] [--threads T]\n");
        return 2;
    }
    double rates[MAX_RATES];
    size_t n_rates = 0;
    for (const char *p = rates_arg; *p != '\0' && n_rates < MAX_RATES;) {
        rates[n_rates++] = strtod(p, (char **)&p);
        if (*p == ',')
            p++;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    void *zctx = zmq_ctx_new();
    zmq_ctx_set(zctx, ZMQ_IO_THREADS, 1);
    zmq_ctx_set(zctx, ZMQ_MAX_SOCKETS, (int)n_pubs + 64);
    g.n_pubs = n_pubs;
    g.threads = threads;
    g.pubs = calloc(n_pubs, sizeof(*g.pubs));
    FILE *ports = ports_file != NULL ? fopen(ports_file, "re") : NULL;
    if (ports_file != NULL && ports == NULL) {
        fprintf(stderr, "micro_kvload: %s: cannot open\n", ports_file);
        return 1;
    }
    for (unsigned i = 0; i < n_pubs; i++) {
        struct publisher *p = &g.pubs[i];
        p->ring = calloc(g.kv_blocks, sizeof(uint64_t));
        /* Hashes distinct across publishers, never 0 (0 = no parent here). */
        p->next_hash = ((uint64_t)(i + 1) << 40) | 1;
        p->sock = zmq_socket(zctx, ZMQ_XPUB);
        int hwm = 100000, zero = 0;
        zmq_setsockopt(p->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm));
        zmq_setsockopt(p->sock, ZMQ_LINGER, &zero, sizeof(zero));
        unsigned port = port_base + i;
        if (ports != NULL && fscanf(ports, "%u", &port) != 1) {
            fprintf(stderr, "micro_kvload: %s: fewer than %u ports\n", ports_file, n_pubs);
            return 1;
        }
        char ep[64];
        snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", port);
        if (p->ring == NULL || p->sock == NULL || zmq_bind(p->sock, ep) != 0) {
            fprintf(stderr, "micro_kvload: %s: %s\n", ep, zmq_strerror(zmq_errno()));
            return 1;
        }
    }
    /* The publishers are bound first, so their ports are taken before
     * the control plane that connects to them starts; the steps wait. */
    while (start_file != NULL && access(start_file, F_OK) != 0) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    if (start_file != NULL && cp_pid == 0) {
        FILE *f = fopen(start_file, "re");
        if (f == NULL || fscanf(f, "%ld", &cp_pid) != 1 || cp_pid <= 0) {
            fprintf(stderr, "micro_kvload: %s holds no control-plane pid\n", start_file);
            return 1;
        }
        fclose(f);
    }
    if (ports != NULL)
        fclose(ports);
    if (wait_subscribed(&g, 30) != 0)
        return 1;
    pthread_t tids[MAX_THREADS];
    struct worker_arg args[MAX_THREADS];
    for (unsigned t = 0; t < threads; t++) {
        args[t] = (struct worker_arg){.g = &g, .first = t, .step = threads};
        pthread_create(&tids[t], NULL, sender_main, &args[t]);
    }
    printf("kvload_publishers %u\nkvload_batch %u\nkvload_kv_blocks %u\n", n_pubs, g.batch,
           g.kv_blocks);
    for (size_t r = 0; r < n_rates; r++) {
        struct snapshot a, b, c;
        if (take_snapshot(metrics, cp_pid, &a) != 0)
            break;
        uint64_t sent0 = atomic_load(&g.sent_events);
        atomic_store(&g.rate, rates[r]);
        struct timespec ts = {(time_t)seconds, 0};
        nanosleep(&ts, NULL);
        atomic_store(&g.rate, 0.0);
        uint64_t sent1 = atomic_load(&g.sent_events);
        if (take_snapshot(metrics, cp_pid, &b) != 0)
            break;
        /* Drain: what was sent is applied (or the control plane gave up). */
        c = b;
        double last = b.applied;
        for (int i = 0; i < 50; i++) {
            struct timespec d = {0, 100000000};
            nanosleep(&d, NULL);
            if (take_snapshot(metrics, cp_pid, &c) != 0 || c.applied == last)
                break;
            last = c.applied;
        }
        double dt = (double)(b.at_ns - a.at_ns) / 1e9;
        double applied = b.applied - a.applied;
        double cpu = (double)(b.cpu_ns - a.cpu_ns) / 1e9;
        double rr = rates[r];
        printf("kvload_%.0f_offered %.0f\n", rr, rr);
        printf("kvload_%.0f_sent %.0f\n", rr, (double)(sent1 - sent0) / dt);
        printf("kvload_%.0f_applied %.0f\n", rr, applied / dt);
        printf("kvload_%.0f_cpu_cores %.3f\n", rr, cpu / dt);
        printf("kvload_%.0f_per_cpu_s %.0f\n", rr, cpu > 0 ? applied / cpu : 0);
        printf("kvload_%.0f_backlog %.0f\n", rr, c.applied - b.applied);
        print_ms("lag_p50_ms", rr, lag_quantile(&a, &c, 0.50));
        print_ms("lag_p99_ms", rr, lag_quantile(&a, &c, 0.99));
        fflush(stdout);
    }
    atomic_store(&g.stop, true);
    for (unsigned t = 0; t < threads; t++)
        pthread_join(tids[t], NULL);
    for (unsigned i = 0; i < n_pubs; i++) {
        zmq_close(g.pubs[i].sock);
        free(g.pubs[i].ring);
    }
    free(g.pubs);
    zmq_ctx_term(zctx);
    curl_global_cleanup();
    return 0;
}
