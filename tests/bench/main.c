/*
 * build/switchyard-bench — load generator of make bench (see
 * docs/benchmarks.md and tests/bench/run.sh).
 *
 *   switchyard-bench run --workload FILE [--quick] --url http://HOST:PORT
 *                        [--mock http://HOST:PORT]... [--kv-blocks N] [--block-tokens N]
 *                        [--json FILE] [--csv FILE] [--label NAME] [--rate R] [--seed S]
 *                        [--auth KEY_A[,KEY_B] [--auth-every N]]
 *                        [--duration-s S]
 *   switchyard-bench hold --url http://HOST:PORT --streams N --pid PID
 *                         [--hold-s S] [--ramp N/s] [--deadline-s S]
 *                         [--prompt-bytes N]
 *   switchyard-bench tokens --url URL[,URL...] --streams N --tokens T [--pid PID]...
 *                           [--window-s S] [--warmup-s S] [--spread-s S]
 *   switchyard-bench plan --workload FILE [--quick] [--kv-blocks N] [--block-tokens N] [--mocks N]
 *                         [--rate R] [--seed S] [--duration-s S]
 *   switchyard-bench pooled --window W0 W1 [--paired] A.csv... [-- B.csv...]
 *
 * tokens: keeps N streams of T tokens running (loadgen.h lg_tokens) and
 * prints the token events delivered in the window, tokens/s, the
 * client-side gap between a stream's tokens (p50/p99/p99.9) and the CPU of
 * the --pid processes (repeatable: nginx's master and workers) per token.
 *
 * pooled: TTFT p50 and p99 of several `run --csv` files' requests sent in
 * [W0, W1) s, taken together (pooled.h); with a second set after `--`,
 * also the ratio of the two sets' p99s and its bootstrap 95% interval;
 * with --paired (A's i-th run and B's i-th ran the same arrival plan) also
 * the paired interval.
 *
 * --rate R replaces the workload's arrival rate (requests/s; with
 * sequential_turns the offered load: conversations start at R / turns per
 * second). --seed S replaces the workload's seed: the same workload with
 * other arrival times and prompts (a benchmark's repetitions sample the
 * arrival process instead of replaying one draw of it). --duration-s S
 * replaces a sequential workload's duration_s (conversations start, and the
 * measurement window ends, at S): a longer window for a tail percentile
 * that needs more requests than the workload's own window holds.
 * --auth A[,B] sends "Authorization: Bearer" keys as two tenants: request
 * i carries B when i % N == N - 1 (--auth-every N, default 5: B sends a
 * fifth of the traffic), else A.
 *
 * A sequential workload's figures (workload.h) are taken over its window
 * [warmup_s, duration_s]: latencies of the requests sent in it, tokens/s
 * of the requests that completed in it; its hit-rate ceiling follows the
 * order in which the run sent the requests.
 *
 * --url may list several comma-separated router URLs (independent router
 * nodes, at most 8): requests go to them round robin, as behind a
 * round-robin front.
 *
 * A workload with bypass_share (workload.h) sends its bypassing requests
 * straight to the --mock workers (1 to 8), each group's to one of them;
 * hit_rate and hit_ceiling are then the routed requests' (from each
 * response's usage.prompt_tokens_details.cached_tokens), and the run also
 * prints `bypassed` (their count) and `fleet_hit_rate` (every request's,
 * from /mock/stats). The per-request CSV has each response's prompt_tokens
 * and cached_tokens; every request carries X-Request-Id bench-INDEX, so a
 * router's access log can be joined with it.
 *
 * Results go to stdout as "name value" lines (the format of the micro
 * benches), plus a JSON summary and a per-request CSV on request.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "tests/bench/loadgen.h"
#include "tests/bench/mockstats.h"
#include "tests/bench/pooled.h"
#include "tests/bench/workload.h"

struct opts {
    const char *cmd, *workload, *url, *json, *csv, *label;
    const char *mocks[MS_MAX_MOCKS];
    size_t n_mocks;
    bool quick;
    unsigned kv_blocks, block_tokens, plan_mocks;
    size_t streams;
    long pid; /* the first --pid */
    pid_t pids[LG_TOKENS_MAX_PIDS];
    size_t n_pids;
    unsigned tokens;
    double window_s, warmup_s, spread_s;
    double hold_s, ramp, deadline_s;
    size_t prompt_bytes; /* hold: padding of each stream's prompt */
    double rate;         /* > 0: overrides the workload's rate */
    bool has_seed;
    uint64_t seed;     /* with has_seed: overrides the workload's seed */
    double duration_s; /* > 0: overrides a sequential workload's duration_s */
    /* --auth A[,B] and --auth-every N: request i carries key B when
     * i % N == N - 1, else key A (two tenants, one with 1/N of the traffic). */
    char auth_a[128], auth_b[128];
    unsigned auth_every;
};

static void usage(void)
{
    fprintf(stderr,
            "usage: switchyard-bench run --workload FILE [--quick] --url URL [--mock URL]...\n"
            "                            [--kv-blocks N] [--block-tokens N] [--json FILE]\n"
            "                            [--csv FILE] [--label NAME] [--rate R] [--seed S]\n"
            "                            [--auth KEY_A[,KEY_B] [--auth-every N]]\n"
            "                            [--duration-s S]\n"
            "       switchyard-bench hold --url URL --streams N --pid PID [--hold-s S]\n"
            "                             [--ramp N] [--deadline-s S] [--prompt-bytes N]\n"
            "       switchyard-bench tokens --url URL[,URL...] --streams N --tokens T\n"
            "                               [--pid PID]... [--window-s S] [--warmup-s S]\n"
            "                               [--spread-s S]\n"
            "       switchyard-bench plan --workload FILE [--quick] [--kv-blocks N]\n"
            "                             [--block-tokens N] [--mocks N] [--rate R] [--seed S]\n"
            "                             [--duration-s S]\n"
            "       switchyard-bench pooled --window W0 W1 [--paired] A.csv... [-- B.csv...]\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.kv_blocks = 4096,
                       .block_tokens = 16,
                       .plan_mocks = 1,
                       .hold_s = 5,
                       .ramp = 2000,
                       .deadline_s = 60,
                       .tokens = 100,
                       .window_s = 5,
                       .warmup_s = 1,
                       .spread_s = 0.2,
                       .label = ""};
    if (argc < 2)
        return -EINVAL;
    o->cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            o->quick = true;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "switchyard-bench: %s needs a value\n", a);
            return -EINVAL;
        }
        i++;
        if (strcmp(a, "--workload") == 0)
            o->workload = v;
        else if (strcmp(a, "--url") == 0)
            o->url = v;
        else if (strcmp(a, "--json") == 0)
            o->json = v;
        else if (strcmp(a, "--csv") == 0)
            o->csv = v;
        else if (strcmp(a, "--label") == 0)
            o->label = v;
        else if (strcmp(a, "--mock") == 0 && o->n_mocks < MS_MAX_MOCKS)
            o->mocks[o->n_mocks++] = v;
        else if (strcmp(a, "--kv-blocks") == 0)
            o->kv_blocks = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--block-tokens") == 0)
            o->block_tokens = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--rate") == 0) {
            char *end;
            o->rate = strtod(v, &end);
            if (*end != '\0' || !(o->rate > 0 && o->rate <= 1e6)) {
                fprintf(stderr, "switchyard-bench: --rate: expected 0 < R <= 1e6, got '%s'\n", v);
                return -EINVAL;
            }
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (*end != '\0' || end == v || errno != 0 || v[0] == '-') {
                fprintf(stderr,
                        "switchyard-bench: --seed: expected an unsigned integer, got '%s'\n", v);
                return -EINVAL;
            }
            o->has_seed = true;
        } else if (strcmp(a, "--duration-s") == 0) {
            char *end;
            o->duration_s = strtod(v, &end);
            if (*end != '\0' || end == v || !(o->duration_s >= 0.1 && o->duration_s <= 86400)) {
                fprintf(
                    stderr,
                    "switchyard-bench: --duration-s: expected seconds in 0.1..86400, got '%s'\n",
                    v);
                return -EINVAL;
            }
        } else if (strcmp(a, "--auth") == 0) {
            const char *comma = strchr(v, ',');
            size_t la = comma != NULL ? (size_t)(comma - v) : strlen(v);
            if (la == 0 || la >= sizeof(o->auth_a) ||
                (comma != NULL &&
                 (strlen(comma + 1) == 0 || strlen(comma + 1) >= sizeof(o->auth_b)))) {
                fprintf(stderr, "switchyard-bench: --auth: expected KEY or KEY_A,KEY_B\n");
                return -EINVAL;
            }
            memcpy(o->auth_a, v, la);
            o->auth_a[la] = '\0';
            snprintf(o->auth_b, sizeof(o->auth_b), "%s", comma != NULL ? comma + 1 : v);
        } else if (strcmp(a, "--auth-every") == 0) {
            o->auth_every = (unsigned)strtoul(v, NULL, 10);
            if (o->auth_every < 2) {
                fprintf(stderr, "switchyard-bench: --auth-every: expected N >= 2\n");
                return -EINVAL;
            }
        } else if (strcmp(a, "--mocks") == 0)
            o->plan_mocks = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--streams") == 0)
            o->streams = strtoul(v, NULL, 10);
        else if (strcmp(a, "--pid") == 0) {
            long p = strtol(v, NULL, 10);
            if (o->n_pids == 0)
                o->pid = p;
            if (o->n_pids < LG_TOKENS_MAX_PIDS && p > 0)
                o->pids[o->n_pids++] = (pid_t)p;
        } else if (strcmp(a, "--tokens") == 0)
            o->tokens = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--window-s") == 0)
            o->window_s = strtod(v, NULL);
        else if (strcmp(a, "--warmup-s") == 0)
            o->warmup_s = strtod(v, NULL);
        else if (strcmp(a, "--spread-s") == 0)
            o->spread_s = strtod(v, NULL);
        else if (strcmp(a, "--hold-s") == 0)
            o->hold_s = strtod(v, NULL);
        else if (strcmp(a, "--ramp") == 0)
            o->ramp = strtod(v, NULL);
        else if (strcmp(a, "--deadline-s") == 0)
            o->deadline_s = strtod(v, NULL);
        else if (strcmp(a, "--prompt-bytes") == 0)
            o->prompt_bytes = strtoul(v, NULL, 10);
        else {
            fprintf(stderr, "switchyard-bench: unknown option %s\n", a);
            return -EINVAL;
        }
    }
    return 0;
}

/* A figure for JSON: null when there is none (no request measured). */
static json_t *jnum(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* "name value" with value "n/a" when there is none. */
static void put_ms(const char *name, double v)
{
    if (isfinite(v))
        printf("%s %.2f\n", name, v);
    else
        printf("%s n/a\n", name);
}

static int load_plan(const struct opts *o, struct wl_spec *spec, struct wl_plan *plan)
{
    char err[512];
    int rc = wl_parse_file(o->workload, o->quick, spec, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "switchyard-bench: %s\n", err);
        return rc;
    }
    if (o->rate > 0)
        spec->rate = o->rate;
    if (o->has_seed)
        spec->seed = o->seed;
    if (o->duration_s > 0) {
        if (!spec->sequential_turns || !(o->duration_s > spec->warmup_s)) {
            fprintf(stderr,
                    "switchyard-bench: --duration-s: sequential_turns workloads only, and above "
                    "warmup_s (%g s)\n",
                    spec->warmup_s);
            return -EINVAL;
        }
        spec->duration_s = o->duration_s;
    }
    rc = wl_plan_build(spec, plan);
    if (rc != 0)
        fprintf(stderr, "switchyard-bench: %s: cannot build the plan: %s\n", o->workload,
                strerror(-rc));
    return rc;
}

static int cmd_plan(const struct opts *o)
{
    struct wl_spec spec;
    struct wl_plan plan;
    if (o->workload == NULL || load_plan(o, &spec, &plan) != 0)
        return 2;
    size_t bytes = 0;
    for (size_t i = 0; i < plan.n; i++)
        bytes += plan.req[i].text_len;
    char desc[512];
    wl_spec_format(&spec, desc, sizeof(desc));
    printf("spec %s\n", desc);
    printf("workload %s\nkind %s\nrequests %zu\nduration_s %.2f\nmean_prompt_tokens %.1f\n"
           "hit_ceiling %.4f\n",
           spec.name, wl_kind_name(spec.kind), plan.n, plan.req[plan.n - 1].at_s,
           (double)bytes / 4.0 / (double)plan.n,
           wl_hit_ceiling(&plan, NULL, 0, o->block_tokens, (size_t)o->kv_blocks * o->plan_mocks));
    /* Sequential: the ceiling above feeds whole conversations one after
     * another (a run's own ceiling follows the order it sent them in). */
    if (plan.sequential)
        printf("conversations %zu\n", plan.n / plan.turns);
    wl_plan_fini(&plan);
    return 0;
}

static void write_csv(const char *path, const struct wl_plan *plan, const struct lg_result *res)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "switchyard-bench: %s: %s\n", path, strerror(errno));
        return;
    }
    /* The columns after sent are the client's breakdown (struct lg_result);
     * late_ms: how long after its planned arrival (open-loop plans) it was
     * handed to curl, the client's loop falling behind. prompt_tokens and
     * cached_tokens are the response's usage (0 when it had none). */
    fprintf(f, "index,group,turn,start_s,ttft_ms,e2e_ms,status,curl_rc,output_tokens,ok,sent,"
               "late_ms,sent_ms,connect_ms,curl_total_ms,new_conns,prompt_tokens,cached_tokens\n");
    for (size_t i = 0; i < plan->n; i++) {
        const struct lg_result *r = &res[i];
        bool open_loop = !plan->sequential && r->sent;
        fprintf(f, "%zu,%u,%u,%.6f,%.3f,%.3f,%ld,%d,%u,%d,%d,%.3f,%.3f,%.3f,%.3f,%ld,%u,%u\n", i,
                plan->req[i].group, plan->req[i].turn, r->start_s, r->ttft_s * 1e3, r->e2e_s * 1e3,
                r->status, r->curl_rc, r->output_tokens, r->ok ? 1 : 0, r->sent ? 1 : 0,
                open_loop ? (r->start_s - plan->req[i].at_s) * 1e3 : -1, r->sent_s * 1e3,
                r->connect_s * 1e3, r->curl_total_s * 1e3, r->new_conns, r->prompt_tokens,
                r->cached_tokens);
    }
    fclose(f);
}

static int cmd_run(const struct opts *o)
{
    if (o->workload == NULL || o->url == NULL) {
        usage();
        return 2;
    }
    struct wl_spec spec;
    struct wl_plan plan;
    if (load_plan(o, &spec, &plan) != 0)
        return 2;
    if (o->auth_a[0] != '\0') {
        unsigned every = o->auth_every != 0 ? o->auth_every : 5;
        for (size_t i = 0; i < plan.n; i++)
            plan.req[i].auth = i % every == every - 1 ? o->auth_b : o->auth_a;
    }
    struct lg_result *res = calloc(plan.n, sizeof(*res));
    double *ttft = calloc(plan.n, sizeof(*ttft)), *e2e = calloc(plan.n, sizeof(*e2e));
    struct ms_fleet *fleet = calloc(1, sizeof(*fleet));
    int status = 1;
    if (res == NULL || ttft == NULL || e2e == NULL || fleet == NULL)
        goto out;
    for (size_t i = 0; i < o->n_mocks; i++)
        snprintf(fleet->mock[i].url, sizeof(fleet->mock[i].url), "%s", o->mocks[i]);
    fleet->n = o->n_mocks;
    /* The workers, for the plan's bypassing requests (bypass_share). */
    size_t n_bypass = 0;
    for (size_t i = 0; i < plan.n; i++)
        n_bypass += plan.req[i].bypass;
    char direct[8 * 256] = "";
    for (size_t i = 0, len = 0; n_bypass > 0 && i < o->n_mocks; i++) {
        int m = snprintf(direct + len, sizeof(direct) - len, "%s%s", i > 0 ? "," : "", o->mocks[i]);
        if (m < 0 || (size_t)m >= sizeof(direct) - len) {
            fprintf(stderr, "switchyard-bench: bypass_share: too many --mock URLs (at most 8)\n");
            goto out;
        }
        len += (size_t)m;
    }
    if (n_bypass > 0 && (o->n_mocks == 0 || o->n_mocks > 8)) {
        fprintf(stderr, "switchyard-bench: bypass_share needs 1 to 8 workers (--mock)\n");
        goto out;
    }
    if (ms_reset(fleet) != 0) {
        fprintf(stderr, "switchyard-bench: cannot reset the mock workers\n");
        goto out;
    }
    if (fleet->n > 0 && ms_start(fleet, 100) != 0)
        goto out;
    double wall = 0;
    int rc = lg_replay(&plan, o->url, direct, res, &wall);
    int ms_rc = ms_stop(fleet);
    if (rc != 0 || ms_rc != 0) {
        fprintf(stderr, "switchyard-bench: run failed (%s)\n", strerror(rc != 0 ? -rc : EIO));
        goto out;
    }

    /* Sequential plans: figures over the window [warmup_s, duration_s]
     * (cut at the last completion if everything ended before it). */
    bool seq = plan.sequential;
    size_t ok = 0, failed = 0, unsent = 0, sent = 0, measured = 0, conversations = 0;
    unsigned long long out_tokens = 0;
    double last_end = 0;
    size_t *order = calloc(plan.n, sizeof(*order));
    if (order == NULL)
        goto out;
    for (size_t i = 0; i < plan.n; i++) {
        if (!res[i].sent) {
            unsent++;
            continue;
        }
        order[sent++] = i;
        conversations += seq && plan.req[i].turn == 0;
        if (!res[i].ok) {
            failed++;
            continue;
        }
        ok++;
        if (res[i].start_s + res[i].e2e_s > last_end)
            last_end = res[i].start_s + res[i].e2e_s;
    }
    double w0 = seq ? plan.warmup_s : 0,
           w1 = seq && plan.stop_s < last_end ? plan.stop_s : last_end;
    for (size_t i = 0; i < plan.n; i++) {
        if (!res[i].ok)
            continue;
        double end = res[i].start_s + res[i].e2e_s;
        if (!seq || (end >= w0 && end <= w1))
            out_tokens += res[i].output_tokens;
        if (seq && (res[i].start_s < w0 || res[i].start_s >= w1))
            continue;
        ttft[measured] = res[i].ttft_s * 1e3;
        e2e[measured] = res[i].e2e_s * 1e3;
        measured++;
    }
    /* Requests in the order they were sent (a stable sort by send time). */
    for (size_t i = 1; i < sent; i++) {
        size_t k = order[i], j = i;
        for (; j > 0 && res[order[j - 1]].start_s > res[k].start_s; j--)
            order[j] = order[j - 1];
        order[j] = k;
    }
    pl_sort(ttft, measured);
    pl_sort(e2e, measured);
    long long hit = 0, query = 0;
    double load_max = 0, load_sum = 0;
    for (size_t i = 0; i < fleet->n; i++) {
        const struct ms_mock *m = &fleet->mock[i];
        hit += m->hit_tokens;
        query += m->query_tokens;
        double mean = m->samples ? m->inflight_sum / m->samples : 0;
        load_sum += mean;
        if (mean > load_max)
            load_max = mean;
    }
    double load_mean = fleet->n ? load_sum / (double)fleet->n : 0;
    double hit_rate = query > 0 ? (double)hit / (double)query : 0;
    double fleet_hit_rate = hit_rate;
    double ceiling =
        wl_hit_ceiling(&plan, order, sent, o->block_tokens, (size_t)o->kv_blocks * fleet->n);
    /* With bypassing requests, hit rate and ceiling are those of the routed
     * ones (what the router decided), from each response's usage
     * (prompt_tokens_details.cached_tokens, as vLLM reports it). */
    unsigned long long r_hit = 0, r_query = 0;
    if (n_bypass > 0) {
        for (size_t i = 0; i < plan.n; i++)
            if (res[i].ok && !plan.req[i].bypass) {
                r_hit += res[i].cached_tokens;
                r_query += res[i].prompt_tokens;
            }
        hit_rate = r_query > 0 ? (double)r_hit / (double)r_query : 0;
        ceiling = wl_hit_ceiling_routed(&plan, order, sent, o->block_tokens,
                                        (size_t)o->kv_blocks * fleet->n);
    }
    free(order);
    double window = w1 - w0;
    double tok_s = window > 0 ? (double)out_tokens / window : 0;

    printf("requests %zu\nok %zu\nfailed %zu\nwall_s %.3f\n", plan.n, ok, failed, wall);
    if (seq)
        printf("sent %zu\nunsent %zu\nconversations %zu\nwindow_s %.3f\nwindow_from_s %.3f\n"
               "window_to_s %.3f\nmeasured %zu\n",
               sent, unsent, conversations, window, w0, w1, measured);
    put_ms("ttft_p50_ms", pl_rank(ttft, measured, 50));
    put_ms("ttft_p90_ms", pl_rank(ttft, measured, 90));
    put_ms("ttft_p99_ms", pl_rank(ttft, measured, 99));
    put_ms("e2e_p50_ms", pl_rank(e2e, measured, 50));
    put_ms("e2e_p99_ms", pl_rank(e2e, measured, 99));
    printf("output_tok_s %.1f\nhit_rate %.4f\nhit_ceiling %.4f\nload_max_mean %.2f\n", tok_s,
           hit_rate, ceiling, load_mean > 0 ? load_max / load_mean : 0);
    if (n_bypass > 0)
        printf("bypassed %zu\nfleet_hit_rate %.4f\n", n_bypass, fleet_hit_rate);
    for (size_t i = 0; i < fleet->n; i++)
        printf("worker%zu_requests %lld\n", i + 1, fleet->mock[i].requests);

    if (o->json != NULL) {
        json_t *workers = json_array();
        for (size_t i = 0; i < fleet->n; i++) {
            const struct ms_mock *m = &fleet->mock[i];
            json_array_append_new(workers,
                                  json_pack("{s:s,s:I,s:I,s:I,s:f}", "url", m->url, "requests",
                                            (json_int_t)m->requests, "prefix_hit_tokens",
                                            (json_int_t)m->hit_tokens, "prefix_query_tokens",
                                            (json_int_t)m->query_tokens, "mean_inflight",
                                            m->samples ? m->inflight_sum / m->samples : 0.0));
        }
        json_t *j = json_pack(
            "{s:s,s:s,s:s,s:I,s:I,s:I,s:f,s:f,s:o,s:o,s:o,s:o,s:o,s:f,s:f,s:f,s:f,s:o}", "workload",
            spec.name, "kind", wl_kind_name(spec.kind), "label", o->label, "requests",
            (json_int_t)plan.n, "ok", (json_int_t)ok, "failed", (json_int_t)failed, "rate",
            spec.rate, "wall_s", wall, "ttft_p50_ms", jnum(pl_rank(ttft, measured, 50)),
            "ttft_p90_ms", jnum(pl_rank(ttft, measured, 90)), "ttft_p99_ms",
            jnum(pl_rank(ttft, measured, 99)), "e2e_p50_ms", jnum(pl_rank(e2e, measured, 50)),
            "e2e_p99_ms", jnum(pl_rank(e2e, measured, 99)), "output_tok_s", tok_s, "hit_rate",
            hit_rate, "hit_ceiling", ceiling, "load_max_mean",
            load_mean > 0 ? load_max / load_mean : 0.0, "workers", workers);
        json_t *more =
            seq ? json_pack("{s:I,s:I,s:I,s:f,s:I}", "sent", (json_int_t)sent, "unsent",
                            (json_int_t)unsent, "conversations", (json_int_t)conversations,
                            "window_s", window, "measured", (json_int_t)measured)
                : NULL;
        if (j != NULL && more != NULL)
            json_object_update(j, more);
        json_decref(more);
        if (j == NULL || json_dump_file(j, o->json, JSON_INDENT(2)) != 0)
            fprintf(stderr, "switchyard-bench: cannot write %s\n", o->json);
        json_decref(j);
    }
    if (o->csv != NULL)
        write_csv(o->csv, &plan, res);
    status = 0;
out:
    free(fleet);
    free(res);
    free(ttft);
    free(e2e);
    wl_plan_fini(&plan);
    return status;
}

static int cmd_hold(const struct opts *o)
{
    if (o->url == NULL || o->streams == 0 || o->pid <= 0) {
        usage();
        return 2;
    }
    struct lg_hold_stats st;
    if (lg_hold(o->url, o->streams, o->ramp, o->hold_s, o->deadline_s, o->prompt_bytes,
                (pid_t)o->pid, &st) != 0)
        return 1;
    printf("streams %zu\nestablished %zu\nfailed %zu\nramp_s %.2f\n", o->streams, st.established,
           st.failed, st.ramp_s);
    printf("rss_before_kb %ld\nrss_kb %ld\nhwm_kb %ld\n", st.rss_before_kb, st.rss_kb, st.hwm_kb);
    printf("window_s %.2f\ncpu_window_s %.4f\nbytes_in_window %llu\n", st.window_s, st.cpu_window_s,
           st.bytes_in_window);
    return st.established == o->streams ? 0 : 1;
}

static int cmd_tokens(const struct opts *o)
{
    if (o->url == NULL || o->streams == 0 || o->tokens == 0 || !(o->window_s > 0)) {
        usage();
        return 2;
    }
    struct lg_tokens_opts to = {.base_url = o->url,
                                .streams = o->streams,
                                .tokens = o->tokens,
                                .warmup_s = o->warmup_s,
                                .window_s = o->window_s,
                                .spread_s = o->spread_s,
                                .n_pids = o->n_pids};
    memcpy(to.pids, o->pids, sizeof(to.pids));
    struct lg_tokens_stats st;
    int rc = lg_tokens(&to, &st);
    if (rc != 0) {
        fprintf(stderr, "switchyard-bench tokens: %s\n", strerror(-rc));
        return 1;
    }
    printf("streams %zu\nstreams_at_window %zu\ntokens_per_stream %u\n", o->streams,
           st.streams_at_window, o->tokens);
    printf("window_s %.2f\ntokens %llu\ntokens_per_s %.0f\n", st.window_s, st.tokens,
           (double)st.tokens / st.window_s);
    printf("streams_done %llu\nfailed %llu\ngaps %zu\n", st.streams_done, st.failed, st.gaps);
    printf("gap_p50_us %.1f\ngap_p99_us %.1f\ngap_p999_us %.1f\n", st.gap_p50_us, st.gap_p99_us,
           st.gap_p999_us);
    if (o->n_pids > 0)
        printf("cpu_s %.3f\ncpu_us_per_token %.2f\n", st.cpu_s,
               st.tokens > 0 ? st.cpu_s * 1e6 / (double)st.tokens : 0.0);
    else
        printf("cpu_s n/a\ncpu_us_per_token n/a\n");
    return st.tokens > 0 && st.failed == 0 ? 0 : 1;
}

/* Reads files[0..n) into runs (n entries); prints PREFIX_runs/_n/_p50_ms/_p99_ms. */
static int pooled_side(const char *prefix, char **files, size_t n, double w0, double w1,
                       struct pl_run *runs)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = pl_read_csv(files[i], w0, w1, &runs[i]);
        if (rc != 0) {
            fprintf(stderr, "switchyard-bench: %s: %s\n", files[i],
                    rc == -EINVAL ? "not a switchyard-bench run --csv file" : strerror(-rc));
            return rc;
        }
        total += runs[i].n;
    }
    printf("%s_runs %zu\n%s_n %zu\n", prefix, n, prefix, total);
    char name[32];
    snprintf(name, sizeof(name), "%s_p50_ms", prefix);
    put_ms(name, pl_pooled_pct(runs, n, 50));
    snprintf(name, sizeof(name), "%s_p99_ms", prefix);
    put_ms(name, pl_pooled_pct(runs, n, 99));
    return 0;
}

static int cmd_pooled(int argc, char **argv)
{
    char *end0 = NULL, *end1 = NULL;
    double w0 = argc >= 5 ? strtod(argv[3], &end0) : NAN,
           w1 = argc >= 5 ? strtod(argv[4], &end1) : NAN;
    if (argc < 6 || strcmp(argv[2], "--window") != 0 || end0 == argv[3] || *end0 != '\0' ||
        end1 == argv[4] || *end1 != '\0' || !(w1 > w0)) {
        usage();
        return 2;
    }
    int first = 5, sep = argc;
    bool paired = strcmp(argv[first], "--paired") == 0;
    if (paired)
        first++;
    for (int i = first; i < argc; i++)
        if (strcmp(argv[i], "--") == 0)
            sep = i;
    size_t n_a = (size_t)(sep - first), n_b = sep < argc ? (size_t)(argc - sep - 1) : 0;
    if (n_a == 0 || (sep < argc && n_b == 0)) {
        usage();
        return 2;
    }
    if (paired && n_a != n_b) {
        fprintf(stderr,
                "switchyard-bench: pooled --paired: %zu runs before --, %zu after: "
                "pairs need the same number on both sides\n",
                n_a, n_b);
        return 2;
    }
    struct pl_run *runs = calloc(n_a + n_b, sizeof(*runs));
    int rc = runs == NULL ? -ENOMEM : 0;
    if (rc == 0)
        rc = pooled_side("a", argv + first, n_a, w0, w1, runs);
    if (rc == 0 && n_b > 0)
        rc = pooled_side("b", argv + sep + 1, n_b, w0, w1, runs + n_a);
    if (rc == 0 && n_b > 0) {
        double lo, hi;
        double ra = pl_pooled_pct(runs, n_a, 99), rb = pl_pooled_pct(runs + n_a, n_b, 99);
        if (!(rb > 0) || pl_bootstrap_ratio(runs, n_a, runs + n_a, n_b, 99, 2000, 1, &lo, &hi) != 0)
            printf("ratio n/a\nratio_lo n/a\nratio_hi n/a\n");
        else
            printf("ratio %.3f\nratio_lo %.3f\nratio_hi %.3f\n", ra / rb, lo, hi);
        if (paired && (!(rb > 0) || pl_bootstrap_ratio_paired(runs, runs + n_a, n_a, 99, 2000, 1,
                                                              &lo, &hi) != 0))
            printf("paired_lo n/a\npaired_hi n/a\n");
        else if (paired)
            printf("paired_lo %.3f\npaired_hi %.3f\n", lo, hi);
    }
    for (size_t i = 0; runs != NULL && i < n_a + n_b; i++)
        pl_run_free(&runs[i]);
    free(runs);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage();
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "pooled") == 0)
        return cmd_pooled(argc, argv);
    if (parse_args(argc, argv, &o) != 0) {
        usage();
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = 2;
    if (strcmp(o.cmd, "run") == 0)
        rc = cmd_run(&o);
    else if (strcmp(o.cmd, "hold") == 0)
        rc = cmd_hold(&o);
    else if (strcmp(o.cmd, "tokens") == 0)
        rc = cmd_tokens(&o);
    else if (strcmp(o.cmd, "plan") == 0)
        rc = cmd_plan(&o);
    else
        usage();
    curl_global_cleanup();
    return rc;
}
