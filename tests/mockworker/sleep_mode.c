/*
 * vLLM's sleep endpoints and gauge in the mock worker (see sleep_mode.h).
 */
#include "tests/mockworker/sleep_mode.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "tests/mockworker/cost_model.h"
#include "tests/mockworker/server.h"

static enum MHD_Result sleep_tag(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    (void)kind;
    unsigned *tags = cls;
    if (strcmp(key, "tags") != 0 || value == NULL)
        return MHD_YES;
    if (strcmp(value, "weights") == 0)
        *tags |= MW_SLEEP_TAG_WEIGHTS;
    else if (strcmp(value, "kv_cache") == 0)
        *tags |= MW_SLEEP_TAG_KV_CACHE;
    return MHD_YES;
}

static char *sleep_error(const char *message, size_t *len)
{
    json_t *j = json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", message, "type",
                          "BadRequestError", "param", "code", 400);
    char *body = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    *len = body != NULL ? strlen(body) : 0;
    return body;
}

int mw_sleep_handle(struct mw_server *s, struct MHD_Connection *conn, enum mw_sleep_op op,
                    char **body, size_t *len)
{
    *body = NULL;
    *len = 0;
    switch (op) {
    case MW_SLEEP_SLEEP: {
        const char *level = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "level");
        const char *mode = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "mode");
        uint32_t n = 1;
        if (level != NULL) {
            char *end = NULL;
            unsigned long v = strtoul(level, &end, 10);
            if (end == level || *end != '\0' || v < 1 || v > 2) {
                *body = sleep_error("sleep level must be 1 or 2", len);
                return 400;
            }
            n = (uint32_t)v;
        }
        mw_engine_sleep(&s->engine, n);
        log_info("engine sleeps (level %" PRIu32 ", mode %s)", n, mode != NULL ? mode : "abort");
        return 200;
    }
    case MW_SLEEP_WAKE_UP: {
        unsigned tags = 0;
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, sleep_tag, &tags);
        mw_server_wake(s, mw_engine_wake(&s->engine, tags));
        log_info("wake up the engine with tags: %s", tags == 0                      ? "all"
                                                     : tags == MW_SLEEP_TAG_WEIGHTS ? "weights"
                                                     : tags == MW_SLEEP_TAG_KV_CACHE
                                                         ? "kv_cache"
                                                         : "weights, kv_cache");
        return 200;
    }
    case MW_SLEEP_IS_SLEEPING: {
        struct mw_engine_snapshot snap;
        mw_engine_snapshot(&s->engine, &snap);
        json_t *j = json_pack("{s:b}", "is_sleeping", snap.sleep_level != 0);
        *body = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        *len = *body != NULL ? strlen(*body) : 0;
        return *body != NULL ? 200 : 500;
    }
    }
    return 500;
}

void mw_sleep_metrics(struct prom_writer *w, const char *model, uint32_t engines, uint32_t level)
{
    prom_family(w, "vllm:engine_sleep_state", PROM_GAUGE,
                "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
                "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
                "sleep level 2.");
    static const char *const states[] = {"awake", "weights_offloaded", "discard_all"};
    /* vLLM's order: every engine of one state, then the next state. */
    for (uint32_t k = 0; k < 3; k++) {
        for (uint32_t i = 0; i < engines; i++) {
            char engine[16];
            snprintf(engine, sizeof(engine), "%" PRIu32, i);
            bool on = k == 0 ? level == 0 : level == k;
            const struct prom_label labels[] = {
                {"model_name", model}, {"engine", engine}, {"sleep_state", states[k]}};
            prom_sample_text(w, "", labels, 3, on ? "1.0" : "0.0");
        }
    }
}
