/*
 * Worker URLs parsed once for curl (see upstream_url.h): an open-addressing
 * table per loop, keyed by the URL string's XXH3.
 */
#include "dataplane/core/upstream_url.h"

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

static bool up_urls_grow(struct dp_up_urls *tab)
{
    size_t slots = tab->url_slots ? tab->url_slots * 2 : 64;
    struct dp_up_url *t = calloc(slots, sizeof(*t));
    if (t == NULL)
        return false;
    for (size_t i = 0; i < tab->url_slots; i++) {
        struct dp_up_url *old = &tab->urls[i];
        if (old->url == NULL)
            continue;
        t[up_url_free_slot(t, slots, XXH3_64bits(old->url, strlen(old->url)))] = *old;
    }
    free(tab->urls);
    tab->urls = t;
    tab->url_slots = slots;
    return true;
}

CURLU *dp_up_url_parsed(struct dp_up_urls *tab, const char *url)
{
    size_t len = strlen(url);
    uint64_t h = XXH3_64bits(url, len);
    if (tab->url_slots > 0) {
        for (size_t j = (size_t)h & (tab->url_slots - 1); tab->urls[j].url != NULL;
             j = (j + 1) & (tab->url_slots - 1))
            if (strcmp(tab->urls[j].url, url) == 0)
                return tab->urls[j].parsed;
    }
    if (tab->n_urls >= UP_URLS_MAX)
        return NULL;
    if ((tab->n_urls + 1) * 2 > tab->url_slots && !up_urls_grow(tab))
        return NULL;
    CURLU *parsed = curl_url();
    char *copy = strdup(url);
    if (parsed == NULL || copy == NULL ||
        curl_url_set(parsed, CURLUPART_URL, url, 0) != CURLUE_OK) {
        curl_url_cleanup(parsed);
        free(copy);
        return NULL;
    }
    tab->urls[up_url_free_slot(tab->urls, tab->url_slots, h)] =
        (struct dp_up_url){.url = copy, .parsed = parsed};
    tab->n_urls++;
    return parsed;
}

void dp_up_urls_fini(struct dp_up_urls *tab)
{
    for (size_t i = 0; i < tab->url_slots; i++) {
        free(tab->urls[i].url);
        curl_url_cleanup(tab->urls[i].parsed);
    }
    free(tab->urls);
    tab->urls = NULL;
    tab->n_urls = tab->url_slots = 0;
}
