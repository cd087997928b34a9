/*
 * The access-log line (see access_log_line.h). Field order is fixed so
 * lines read alike; absent values are null rather than missing, so a
 * reader never has to guess whether a field exists.
 */
#include "dataplane/obs/access_log_line.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dataplane/obs/journal.h"
#include "dataplane/core/loop.h"
#include "dataplane/core/json_writer.h"
#include "dataplane/core/routes.h"
#include "dataplane/types/request_types.h"

/* "2026-12-01T16:23:39.123Z" of a wall-clock time in ns. */
static void al_time(struct dp_jw *w, uint64_t ns)
{
    time_t s = (time_t)(ns / 1000000000u);
    struct tm tm;
    gmtime_r(&s, &tm);
    char t[40];
    size_t n = strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%S", &tm);
    int m = snprintf(t + n, sizeof(t) - n, ".%03uZ", (unsigned)((ns / 1000000u) % 1000u));
    dp_jw_lit(w, "\"");
    dp_jw_raw(w, t, n + (size_t)m);
    dp_jw_lit(w, "\"");
}

static void al_str_or_null(struct dp_jw *w, const char *s)
{
    if (s == NULL || s[0] == '\0')
        dp_jw_lit(w, "null");
    else
        dp_jw_str(w, s);
}

static void al_hex64(char *out, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++)
        out[i] = hex[(v >> (60 - 4 * i)) & 0xf];
}

static const char *al_disconnect(const struct dp_request *req, const struct dp_journal *j,
                                 bool client_left)
{
    if (j->disconnect == DP_PHASE_HEADERS)
        return "waiting_headers";
    if (j->disconnect == DP_PHASE_STREAM)
        return "streaming";
    if (client_left && req->phase == DP_REQ_RECEIVING)
        return "upload";
    return NULL;
}

static void al_attempts(struct dp_jw *w, const struct dp_journal *j)
{
    dp_jw_lit(w, "[");
    bool first = true;
    for (uint32_t i = 0; i < j->n_steps; i++) {
        const struct dp_jstep *s = &j->steps[i];
        if (s->kind != DP_JSTEP_ATTEMPT)
            continue;
        dp_jw_lit(w, first ? "{" : ",{");
        first = false;
        dp_jw_key(w, "worker");
        dp_jw_str(w, s->worker);
        if (s->leg != DP_JLEG_PLAIN) {
            dp_jw_lit(w, ",");
            dp_jw_key(w, "leg");
            dp_jw_str(w, dp_jleg_name(s->leg));
        }
        dp_jw_lit(w, ",");
        dp_jw_key(w, "decision");
        dp_jw_str(w, pol_decision_name(s->decision));
        dp_jw_lit(w, ",");
        dp_jw_key(w, "outcome");
        dp_jw_str(w, dp_jout_name(s->outcome));
        dp_jw_lit(w, ",");
        dp_jw_key(w, "status");
        if (s->status > 0)
            dp_jw_u64(w, (uint64_t)s->status);
        else
            dp_jw_lit(w, "null");
        dp_jw_lit(w, ",");
        dp_jw_key(w, "duration_ms");
        uint64_t end = s->end_ns != 0 ? s->end_ns : s->start_ns;
        dp_jw_u64(w, (end - s->start_ns) / 1000000u);
        dp_jw_lit(w, "}");
    }
    dp_jw_lit(w, "]");
}

size_t dp_alog_format(const struct dp_request *req, const struct dp_journal *j, int status,
                      bool client_left, uint64_t now_ms, char *buf, size_t cap)
{
    struct dp_jw w;
    dp_jw_init(&w, buf, cap);
    dp_jw_lit(&w, "{\"time\":");
    al_time(&w, j->start_ns);
    dp_jw_lit(&w, ",\"request_id\":");
    al_str_or_null(&w, req->request_id);
    dp_jw_lit(&w, ",\"method\":");
    dp_jw_str(&w, j->method);
    dp_jw_lit(&w, ",\"route\":");
    dp_jw_str(&w, dp_route_row(req->route)->label);
    dp_jw_lit(&w, ",\"model\":");
    al_str_or_null(&w, req->model);
    dp_jw_lit(&w, ",\"stream\":");
    dp_jw_lit(&w, req->stream ? "true" : "false");
    /* The API key's tenant when a keys file is on; without one every
     * request is the same anonymous tenant, which names nobody, and a
     * missing or unknown key names none either. */
    dp_jw_lit(&w, ",\"tenant\":");
    if (req->loop->sh->cfg->dataplane.api_keys_file[0] != '\0' && req->adm.tenant[0] != '\0' &&
        (req->adm.rejected == NULL || strcmp(req->adm.rejected, "unauthorized") != 0))
        dp_jw_str(&w, req->adm.tenant);
    else
        dp_jw_lit(&w, "null");
    dp_jw_lit(&w, ",\"worker\":");
    al_str_or_null(&w, req->worker_id);
    dp_jw_lit(&w, ",\"prefill_worker\":");
    al_str_or_null(&w, req->pd.prefill_worker);
    dp_jw_lit(&w, ",\"decision\":");
    if (req->decision != POL_DECISION_UNSET)
        dp_jw_str(&w, pol_decision_name(req->decision));
    else
        dp_jw_lit(&w, "null");
    dp_jw_lit(&w, ",\"attempts\":");
    al_attempts(&w, j);
    dp_jw_lit(&w, ",\"attempts_total\":");
    dp_jw_u64(&w, j->n_attempts);
    dp_jw_lit(&w, ",\"status\":");
    dp_jw_u64(&w, (uint64_t)(status > 0 ? status : 0));
    dp_jw_lit(&w, ",\"bytes_in\":");
    dp_jw_u64(&w, req->received_bytes);
    dp_jw_lit(&w, ",\"bytes_out\":");
    dp_jw_u64(&w, j->bytes_out);
    dp_jw_lit(&w, ",\"ttfb_ms\":");
    if (req->first_byte_ms != 0)
        dp_jw_u64(&w, req->first_byte_ms - req->start_ms);
    else
        dp_jw_lit(&w, "null");
    dp_jw_lit(&w, ",\"duration_ms\":");
    dp_jw_u64(&w, now_ms - req->start_ms);
    dp_jw_lit(&w, ",\"prompt_bytes\":");
    dp_jw_u64(&w,
              j->prompt_bytes > req->routing_text.len ? j->prompt_bytes : req->routing_text.len);
    dp_jw_lit(&w, ",\"disconnect\":");
    const char *gone = al_disconnect(req, j, client_left);
    if (gone != NULL)
        dp_jw_str(&w, gone);
    else
        dp_jw_lit(&w, "null");
    dp_jw_lit(&w, ",\"in_band_errors\":");
    dp_jw_u64(&w, req->in_band_error ? 1 : 0);
    dp_jw_lit(&w, ",\"trace_id\":");
    if (j->traced) {
        char id[34] = {'"'};
        al_hex64(id + 1, j->trace.trace_hi);
        al_hex64(id + 17, j->trace.trace_lo);
        id[33] = '"';
        dp_jw_raw(&w, id, sizeof(id));
    } else {
        dp_jw_lit(&w, "null");
    }
    dp_jw_lit(&w, "}\n");
    return dp_jw_ok(&w) ? w.len : 0;
}
