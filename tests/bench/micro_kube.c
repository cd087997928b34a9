/*
 * The driver of the "kube" benchmark section (tests/bench/sections/70-kube.sh):
 * Kubernetes discovery at scale against switchyard-fakekube. The section
 * starts the fake and a control plane with discovery.kubernetes; this
 * program creates the pods through the fake's control API and watches the
 * registry in the shared segment, which is what the data planes route on.
 *
 *   1. N Ready pods (one container port each), then the time until all N
 *      are workers;
 *   2. E events (pods toggled NotReady / Ready, each a MODIFIED), and the
 *      control plane's CPU time (/proc/PID/schedstat) from the first
 *      to the registry showing the last one, per 1,000 events;
 *   3. S pods added one at a time, each timed from its PUT to its worker in
 *      the registry: event -> routable, p50 / p99 / max;
 *   4. the control plane's VmRSS.
 *
 * Usage: micro_kube --fake URL --shm NAME --cp-pid PID [--pods N]
 *        [--events E] [--samples S]
 * Prints "key value" lines. Everything it talks to is on 127.0.0.1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/proc.h"
#include "shm/registry.h"
#include "shm/segment.h"

static CURL *g_easy;
static const char *g_fake;

static size_t discard(char *p, size_t s, size_t n, void *u)
{
    (void)p;
    (void)u;
    return s * n;
}

static int put_pod(const char *name, unsigned port, bool ready)
{
    char url[256], body[1024];
    snprintf(url, sizeof(url), "%s/fake/namespaces/default/pods/%s", g_fake, name);
    snprintf(body, sizeof(body),
             "{\"metadata\":{\"labels\":{\"app\":\"vllm\",\"switchyard.io/model\":\"mock\"}},"
             "\"spec\":{\"containers\":[{\"name\":\"vllm\",\"ports\":[{\"name\":\"http\","
             "\"containerPort\":%u}]}]},"
             "\"status\":{\"phase\":\"Running\",\"podIP\":\"127.0.0.1\",\"conditions\":[{\"type\":"
             "\"Ready\",\"status\":\"%s\"}]}}",
             port, ready ? "True" : "False");
    curl_easy_setopt(g_easy, CURLOPT_URL, url);
    curl_easy_setopt(g_easy, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(g_easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(g_easy, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(g_easy, CURLOPT_PROXY, "");
    CURLcode rc = curl_easy_perform(g_easy);
    long code = 0;
    curl_easy_getinfo(g_easy, CURLINFO_RESPONSE_CODE, &code);
    return rc == CURLE_OK && (code == 200 || code == 201) ? 0 : -EIO;
}

/* The process's CPU time in ns (/proc/PID/schedstat: ns precision, where
 * /proc/PID/stat counts 10 ms ticks). */
static uint64_t cpu_ns(long pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/schedstat", pid);
    FILE *f = fopen(path, "re");
    unsigned long long ns = 0;
    if (f != NULL) {
        if (fscanf(f, "%llu", &ns) != 1)
            ns = 0;
        fclose(f);
    }
    return ns;
}

static long rss_kb(long pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    FILE *f = fopen(path, "re");
    long kb = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kb;
}

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Waits until worker id exists with draining == want_draining (or, when
 * any_state, exists at all). Returns 0 or -ETIMEDOUT. */
static int wait_worker(struct shm_segment *seg, const char *id, bool any_state, bool want_draining,
                       uint64_t timeout_ms)
{
    uint64_t until = proc_monotonic_ms() + timeout_ms;
    while (proc_monotonic_ms() < until) {
        struct shm_worker_info w;
        if (shm_registry_find(seg, id, &w) == 0 && (any_state || w.draining == want_draining))
            return 0;
        nap_us(50);
    }
    return -ETIMEDOUT;
}

int main(int argc, char **argv)
{
    const char *shm = NULL;
    long cp_pid = 0, pods = 1000, events = 1000, samples = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--fake") == 0)
            g_fake = argv[i + 1];
        else if (strcmp(argv[i], "--shm") == 0)
            shm = argv[i + 1];
        else if (strcmp(argv[i], "--cp-pid") == 0)
            cp_pid = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--pods") == 0)
            pods = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--events") == 0)
            events = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--samples") == 0)
            samples = strtol(argv[i + 1], NULL, 10);
    }
    if (g_fake == NULL || shm == NULL || cp_pid <= 0 || pods < 1 || events < 1 || samples < 1) {
        fprintf(stderr, "usage: micro_kube --fake URL --shm NAME --cp-pid PID [--pods N] "
                        "[--events E] [--samples S]\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    g_easy = curl_easy_init();
    struct shm_segment seg;
    char err[256];
    uint64_t until = proc_monotonic_ms() + 10000;
    while (shm_segment_attach(&seg, shm, err, sizeof(err)) != 0) {
        if (proc_monotonic_ms() > until) {
            fprintf(stderr, "micro_kube: %s\n", err);
            return 1;
        }
        nap_us(20000);
    }
    char name[64];

    /* 1. N pods. */
    uint64_t t0 = proc_monotonic_ms();
    for (long i = 0; i < pods; i++) {
        snprintf(name, sizeof(name), "pod-%05ld", i);
        if (put_pod(name, 20000u + (unsigned)i, true) != 0) {
            fprintf(stderr, "micro_kube: PUT %s failed\n", name);
            return 1;
        }
    }
    snprintf(name, sizeof(name), "pod-%05ld", pods - 1);
    if (wait_worker(&seg, name, true, false, 60000) != 0) {
        fprintf(stderr, "micro_kube: the %ld pods never all became workers\n", pods);
        return 1;
    }
    printf("kube_pods %ld\n", pods);
    printf("kube_initial_ms %llu\n", (unsigned long long)(proc_monotonic_ms() - t0));

    /* 2. E events: toggle readiness; the last one's state says all arrived. */
    uint64_t c0 = cpu_ns(cp_pid);
    uint64_t e0 = proc_monotonic_ms();
    bool last_ready = true;
    for (long j = 0; j < events; j++) {
        long i = j % pods;
        bool ready = ((j / pods) % 2) == 1;
        snprintf(name, sizeof(name), "pod-%05ld", i);
        if (put_pod(name, 20000u + (unsigned)i, ready) != 0)
            return 1;
        last_ready = ready;
    }
    if (wait_worker(&seg, name, false, !last_ready, 60000) != 0) {
        fprintf(stderr, "micro_kube: the events never all arrived\n");
        return 1;
    }
    uint64_t c1 = cpu_ns(cp_pid);
    uint64_t e1 = proc_monotonic_ms();
    double cpu_ms = (double)(c1 - c0) / 1e6;
    printf("kube_events %ld\n", events);
    printf("kube_events_ms %llu\n", (unsigned long long)(e1 - e0));
    printf("kube_cpu_ms_per_1000_events %.1f\n", cpu_ms * 1000.0 / (double)events);

    /* 3. S single pods, event -> routable. */
    uint64_t *lat = calloc((size_t)samples, sizeof(*lat));
    if (lat == NULL)
        return 1;
    for (long s = 0; s < samples; s++) {
        snprintf(name, sizeof(name), "lat-%05ld", s);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (put_pod(name, 40000u + (unsigned)s, true) != 0)
            return 1;
        if (wait_worker(&seg, name, true, false, 10000) != 0) {
            fprintf(stderr, "micro_kube: %s never became a worker\n", name);
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        lat[s] =
            (uint64_t)(b.tv_sec - a.tv_sec) * 1000000u + (uint64_t)((b.tv_nsec - a.tv_nsec) / 1000);
    }
    qsort(lat, (size_t)samples, sizeof(*lat), cmp_u64);
    printf("kube_routable_samples %ld\n", samples);
    printf("kube_routable_p50_ms %.2f\n", (double)lat[samples / 2] / 1000.0);
    printf("kube_routable_p99_ms %.2f\n", (double)lat[(samples * 99) / 100] / 1000.0);
    printf("kube_routable_max_ms %.2f\n", (double)lat[samples - 1] / 1000.0);
    free(lat);

    /* 4. memory. */
    printf("kube_cp_rss_mib %.1f\n", (double)rss_kb(cp_pid) / 1024.0);
    shm_segment_close(&seg);
    curl_easy_cleanup(g_easy);
    curl_global_cleanup();
    return 0;
}
