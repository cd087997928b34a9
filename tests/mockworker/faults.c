/*
 * Fault injection state and its JSON form (see faults.h). Validation is
 * all-or-nothing: a body with one bad field changes nothing, so a test that
 * sends a typo learns it from the 400 instead of running without the fault.
 */
#include "tests/mockworker/faults.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int mw_fault_state_init(struct mw_fault_state *fs)
{
    memset(fs, 0, sizeof(*fs));
    int rc = pthread_mutex_init(&fs->lock, NULL);
    return rc == 0 ? 0 : -rc;
}

void mw_fault_state_fini(struct mw_fault_state *fs)
{
    pthread_mutex_destroy(&fs->lock);
}

/* A JSON integer in [min, max]; booleans and reals are refused. */
static int get_int(const json_t *v, const char *key, int64_t min, int64_t max, int64_t *out,
                   char *err, size_t err_len)
{
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        snprintf(err, err_len, "fault '%s': expected an integer in %lld..%lld", key, (long long)min,
                 (long long)max);
        return -EINVAL;
    }
    *out = json_integer_value(v);
    return 0;
}

static int get_bool(const json_t *v, const char *key, bool *out, char *err, size_t err_len)
{
    if (!json_is_boolean(v)) {
        snprintf(err, err_len, "fault '%s': expected true or false", key);
        return -EINVAL;
    }
    *out = json_is_true(v);
    return 0;
}

#define MW_FAULT_MS_MAX     (24LL * 3600 * 1000)
#define MW_FAULT_CHUNKS_MAX (1LL << 32)

int mw_faults_merge_json(struct mw_faults *f, const json_t *obj, char *err, size_t err_len)
{
    if (!json_is_object(obj)) {
        snprintf(err, err_len, "expected a JSON object");
        return -EINVAL;
    }
    struct mw_faults next = *f;
    bool count_given = false;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        int64_t x = 0;
        int rc = 0;
        if (strcmp(key, "fail_status") == 0) {
            rc = get_int(v, key, 0, 599, &x, err, err_len);
            if (rc == 0 && x != 0 && x < 100) {
                snprintf(err, err_len, "fault 'fail_status': expected 0 or 100..599");
                rc = -EINVAL;
            }
            next.fail_status = (int)x;
        } else if (strcmp(key, "fail_count") == 0) {
            rc = get_int(v, key, -1, INT64_MAX, &x, err, err_len);
            next.fail_count = x;
            count_given = true;
        } else if (strcmp(key, "fail_body_hold_ms") == 0) {
            rc = get_int(v, key, 0, MW_FAULT_MS_MAX, &x, err, err_len);
            next.fail_body_hold_ms = (uint64_t)x;
        } else if (strcmp(key, "stall_before_headers_ms") == 0) {
            rc = get_int(v, key, 0, MW_FAULT_MS_MAX, &x, err, err_len);
            next.stall_before_headers_ms = (uint64_t)x;
        } else if (strcmp(key, "stall_after_chunks") == 0) {
            rc = get_int(v, key, 0, MW_FAULT_CHUNKS_MAX, &x, err, err_len);
            next.stall_after_chunks = (uint64_t)x;
        } else if (strcmp(key, "stall_ms") == 0) {
            rc = get_int(v, key, 0, MW_FAULT_MS_MAX, &x, err, err_len);
            next.stall_ms = (uint64_t)x;
        } else if (strcmp(key, "reset_after_chunks") == 0) {
            rc = get_int(v, key, 0, MW_FAULT_CHUNKS_MAX, &x, err, err_len);
            next.reset_after_chunks = (uint64_t)x;
        } else if (strcmp(key, "health_status") == 0) {
            rc = get_int(v, key, 0, 599, &x, err, err_len);
            if (rc == 0 && x != 0 && x < 100) {
                snprintf(err, err_len, "fault 'health_status': expected 0 or 100..599");
                rc = -EINVAL;
            }
            next.health_status = (int)x;
        } else if (strcmp(key, "extra_latency_ms") == 0) {
            rc = get_int(v, key, 0, MW_FAULT_MS_MAX, &x, err, err_len);
            next.extra_latency_ms = (uint64_t)x;
        } else if (strcmp(key, "stream_error") == 0) {
            if (!json_is_string(v) || json_string_length(v) >= sizeof(next.stream_error)) {
                snprintf(err, err_len, "fault 'stream_error': expected a string under %zu bytes",
                         sizeof(next.stream_error));
                rc = -EINVAL;
            } else {
                snprintf(next.stream_error, sizeof(next.stream_error), "%s", json_string_value(v));
            }
        } else if (strcmp(key, "fail_retry_after_s") == 0) {
            rc = get_int(v, key, 0, 86400, &x, err, err_len);
            next.fail_retry_after_s = (uint64_t)x;
        } else if (strcmp(key, "stream_error_after_chunks") == 0) {
            rc = get_int(v, key, 0, MW_FAULT_CHUNKS_MAX, &x, err, err_len);
            next.stream_error_after_chunks = (uint64_t)x;
        } else if (strcmp(key, "metrics_stall_ms") == 0) {
            rc = get_int(v, key, 0, MW_FAULT_MS_MAX, &x, err, err_len);
            next.metrics_stall_ms = (uint64_t)x;
        } else if (strcmp(key, "metrics_garbage") == 0) {
            if (!json_is_boolean(v)) {
                snprintf(err, err_len, "fault 'metrics_garbage': expected true or false");
                rc = -EINVAL;
            }
            next.metrics_garbage = json_is_true(v);
        } else if (strcmp(key, "kv_events_drop_batches") == 0) {
            rc = get_int(v, key, 0, MW_FAULT_CHUNKS_MAX, &x, err, err_len);
            next.kv_events_drop_batches = (uint64_t)x;
        } else if (strcmp(key, "kv_events_reorder") == 0) {
            rc = get_bool(v, key, &next.kv_events_reorder, err, err_len);
        } else if (strcmp(key, "kv_events_replay_off") == 0) {
            rc = get_bool(v, key, &next.kv_events_replay_off, err, err_len);
        } else if (strcmp(key, "response_id") == 0) {
            if (!json_is_string(v) || json_string_length(v) >= sizeof(next.response_id)) {
                snprintf(err, err_len, "fault 'response_id': expected a string under %zu bytes",
                         sizeof(next.response_id));
                rc = -EINVAL;
            } else {
                snprintf(next.response_id, sizeof(next.response_id), "%s", json_string_value(v));
            }
        } else {
            snprintf(err, err_len, "unknown fault field '%s'", key);
            rc = -EINVAL;
        }
        if (rc != 0)
            return rc;
    }
    /* A new fail_status without a count fails every request until turned off. */
    if (!count_given && json_object_get(obj, "fail_status") != NULL)
        next.fail_count = next.fail_status != 0 ? MW_FAIL_COUNT_UNLIMITED : 0;
    if (next.fail_status == 0)
        next.fail_count = 0;
    *f = next;
    return 0;
}

json_t *mw_faults_to_json(const struct mw_faults *f)
{
    json_t *o = json_pack(
        "{s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:s, s:I, s:I, s:b, s:I}", "fail_status",
        f->fail_status, "fail_count", (json_int_t)f->fail_count, "fail_body_hold_ms",
        (json_int_t)f->fail_body_hold_ms, "stall_before_headers_ms",
        (json_int_t)f->stall_before_headers_ms, "stall_after_chunks",
        (json_int_t)f->stall_after_chunks, "stall_ms", (json_int_t)f->stall_ms,
        "reset_after_chunks", (json_int_t)f->reset_after_chunks, "health_status", f->health_status,
        "extra_latency_ms", (json_int_t)f->extra_latency_ms, "stream_error", f->stream_error,
        "stream_error_after_chunks", (json_int_t)f->stream_error_after_chunks, "metrics_stall_ms",
        (json_int_t)f->metrics_stall_ms, "metrics_garbage", f->metrics_garbage,
        "fail_retry_after_s", (json_int_t)f->fail_retry_after_s);
    if (o != NULL) {
        json_object_set_new(o, "kv_events_drop_batches",
                            json_integer((json_int_t)f->kv_events_drop_batches));
        json_object_set_new(o, "kv_events_reorder", json_boolean(f->kv_events_reorder));
        json_object_set_new(o, "kv_events_replay_off", json_boolean(f->kv_events_replay_off));
        json_object_set_new(o, "response_id", json_string(f->response_id));
    }
    return o;
}

int mw_fault_state_update(struct mw_fault_state *fs, const char *body, size_t len,
                          struct mw_faults *out, char *err, size_t err_len)
{
    json_error_t jerr;
    json_t *obj = json_loadb(body, len, 0, &jerr);
    if (obj == NULL) {
        snprintf(err, err_len, "invalid JSON: %s", jerr.text);
        return -EINVAL;
    }
    pthread_mutex_lock(&fs->lock);
    int rc = mw_faults_merge_json(&fs->cur, obj, err, err_len);
    *out = fs->cur;
    pthread_mutex_unlock(&fs->lock);
    json_decref(obj);
    return rc;
}

void mw_fault_state_clear(struct mw_fault_state *fs)
{
    pthread_mutex_lock(&fs->lock);
    memset(&fs->cur, 0, sizeof(fs->cur));
    pthread_mutex_unlock(&fs->lock);
}

void mw_fault_state_get(struct mw_fault_state *fs, struct mw_faults *out)
{
    pthread_mutex_lock(&fs->lock);
    *out = fs->cur;
    pthread_mutex_unlock(&fs->lock);
}

void mw_fault_state_arrival(struct mw_fault_state *fs, struct mw_fault_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    pthread_mutex_lock(&fs->lock);
    const struct mw_faults *f = &fs->cur;
    if (f->fail_status != 0 && f->fail_count != 0) {
        plan->fail_status = f->fail_status;
        plan->fail_body_hold_ms = f->fail_body_hold_ms;
        plan->fail_retry_after_s = f->fail_retry_after_s;
        if (fs->cur.fail_count > 0)
            fs->cur.fail_count--;
    }
    plan->stall_before_headers_ms = f->stall_before_headers_ms;
    if (f->stall_ms > 0) {
        plan->stall_after_chunks = f->stall_after_chunks;
        plan->stall_ms = f->stall_ms;
    }
    plan->reset_after_chunks = f->reset_after_chunks;
    plan->extra_latency_ms = f->extra_latency_ms;
    memcpy(plan->stream_error, f->stream_error, sizeof(plan->stream_error));
    plan->stream_error_after_chunks = f->stream_error_after_chunks;
    pthread_mutex_unlock(&fs->lock);
}

int mw_fault_state_health(struct mw_fault_state *fs)
{
    pthread_mutex_lock(&fs->lock);
    int status = fs->cur.health_status;
    pthread_mutex_unlock(&fs->lock);
    return status != 0 ? status : 200;
}
