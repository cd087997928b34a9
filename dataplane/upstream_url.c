/*
 * Worker URLs parsed once for curl (see upstream_url.h): an open-addressing
 * table per loop, keyed by the URL string's XXH3.
 */
#include "dataplane/upstream_url.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define UP_URLS_MAX 4096u

struct dp_up_url {
    char *url; /* NULL: a free slot */
    CURLU *parsed;
};

/* The first free slot of table t (slots long) on the probe path of hash. */
static size_t up_url_free_slot(const struct dp_up_url *t, size_t slots, uint64_t hash)
{
    size_t j = (size_t)hash & (slots - 1);
    while (t[j].url != NULL)
        j = (j + 1) & (slots - 1);
    return j;
}

static bool up_urls_grow(struct dp_loop *loop)
{
    size_t slots = loop->url_slots ? loop->url_slots * 2 : 64;
    struct dp_up_url *t = calloc(slots, sizeof(*t));
    if (t == NULL)
        return false;
    for (size_t i = 0; i < loop->url_slots; i++) {
        struct dp_up_url *old = &loop->urls[i];
        if (old->url == NULL)
            continue;
        t[up_url_free_slot(t, slots, XXH3_64bits(old->url, strlen(old->url)))] = *old;
    }
    free(loop->urls);
    loop->urls = t;
    loop->url_slots = slots;
    return true;
}

CURLU *dp_up_url_parsed(struct dp_loop *loop, const char *url)
{
    size_t len = strlen(url);
    uint64_t h = XXH3_64bits(url, len);
    if (loop->url_slots > 0) {
        for (size_t j = (size_t)h & (loop->url_slots - 1); loop->urls[j].url != NULL;
             j = (j + 1) & (loop->url_slots - 1))
            if (strcmp(loop->urls[j].url, url) == 0)
                return loop->urls[j].parsed;
    }
    if (loop->n_urls >= UP_URLS_MAX)
        return NULL;
    if ((loop->n_urls + 1) * 2 > loop->url_slots && !up_urls_grow(loop))
        return NULL;
    CURLU *parsed = curl_url();
    char *copy = strdup(url);
    if (parsed == NULL || copy == NULL ||
        curl_url_set(parsed, CURLUPART_URL, url, 0) != CURLUE_OK) {
        curl_url_cleanup(parsed);
        free(copy);
        return NULL;
    }
    loop->urls[up_url_free_slot(loop->urls, loop->url_slots, h)] =
        (struct dp_up_url){.url = copy, .parsed = parsed};
    loop->n_urls++;
    return parsed;
}

void dp_up_urls_fini(struct dp_loop *loop)
{
    for (size_t i = 0; i < loop->url_slots; i++) {
        free(loop->urls[i].url);
        curl_url_cleanup(loop->urls[i].parsed);
    }
    free(loop->urls);
    loop->urls = NULL;
    loop->n_urls = loop->url_slots = 0;
}
