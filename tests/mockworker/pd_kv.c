/*
 * kv_transfer_params in and out (see pd_kv.h). The field names and their
 * order follow vLLM's NixlConnector (request_finished on the prefill side,
 * the decode side's metadata).
 */
#include "tests/mockworker/pd_kv.h"

#include <stdio.h>
#include <string.h>

/* An array of integers (a flat remote_block_ids, or one group of it). */
static bool int_array(const json_t *a)
{
    if (!json_is_array(a))
        return false;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_integer(v))
            return false;
    }
    return true;
}

/* The number of blocks remote_block_ids names in the expected shape, or -1. */
static long long block_count(const json_t *ids, bool flat)
{
    if (flat)
        return int_array(ids) ? (long long)json_array_size(ids) : -1;
    if (!json_is_array(ids) || json_array_size(ids) == 0)
        return -1;
    size_t i;
    json_t *g;
    json_array_foreach(ids, i, g)
    {
        if (!int_array(g))
            return -1;
    }
    /* Every group covers the same tokens: the first one tells how many. */
    return (long long)json_array_size(json_array_get(ids, 0));
}

void mw_pd_parse_params(const json_t *body, bool flat, struct mw_infer *out)
{
    json_t *kv = json_object_get(body, "kv_transfer_params");
    if (!json_is_object(kv))
        return;
    out->do_remote_decode = json_is_true(json_object_get(kv, "do_remote_decode"));
    if (!json_is_true(json_object_get(kv, "do_remote_prefill")))
        return;
    json_t *host = json_object_get(kv, "remote_host");
    json_t *port = json_object_get(kv, "remote_port");
    if (!json_is_string(json_object_get(kv, "remote_engine_id")) || !json_is_string(host) ||
        !json_is_integer(port))
        return;
    long long n = block_count(json_object_get(kv, "remote_block_ids"), flat);
    if (n < 0)
        return;
    out->remote_prefill_valid = true;
    out->remote_blocks = (uint64_t)n;
    json_t *rid = json_object_get(kv, "remote_request_id");
    snprintf(out->remote_request_id, sizeof(out->remote_request_id), "%s",
             json_is_string(rid) ? json_string_value(rid) : "");
    snprintf(out->remote_host, sizeof(out->remote_host), "%s", json_string_value(host));
    json_int_t p = json_integer_value(port);
    out->remote_port = p > 0 && p < 65536 ? (uint16_t)p : 0;
}

json_t *mw_pd_answer_params(const struct mw_pd_answer *a)
{
    json_t *ids = json_array();
    for (size_t i = 0; ids != NULL && i < a->n_blocks; i++)
        json_array_append_new(ids, json_integer(a->block_ids[i]));
    if (ids != NULL && !a->flat) {
        json_t *groups = json_array();
        json_array_append_new(groups, ids); /* one KV-cache group */
        ids = groups;
    }
    if (ids == NULL)
        return NULL;
    if (a->push) {
        /* The decode side would receive the KV while the prefill runs. */
        json_decref(ids);
        return json_pack("{s:b, s:b, s:s, s:s, s:i, s:i, s:s, s:I, s:s}", "do_remote_prefill", 1,
                         "do_remote_decode", 0, "remote_engine_id", a->engine_id, "remote_host",
                         a->host, "remote_port", (int)a->port, "tp_size", 1, "remote_request_id",
                         a->request_id, "remote_num_tokens", (json_int_t)a->num_tokens,
                         "transfer_mode", "push");
    }
    return json_pack("{s:b, s:b, s:s, s:o, s:s, s:i, s:i, s:s, s:I, s:I}", "do_remote_prefill", 1,
                     "do_remote_decode", 0, "remote_engine_id", a->engine_id, "remote_block_ids",
                     ids, "remote_host", a->host, "remote_port", (int)a->port, "tp_size", 1,
                     "remote_request_id", a->request_id, "remote_num_tokens",
                     (json_int_t)a->num_tokens, "remote_blocks_expiry_time", (json_int_t)a->expiry);
}
