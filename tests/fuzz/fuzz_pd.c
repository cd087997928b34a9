/*
 * Fuzz target: everything the P/D path reads from a client or a worker. The
 * input is two parts: a client body and a worker answer (the first two
 * bytes give the body's length, modulo the input). On them run: the
 * prefill leg's body, the decode leg's body from the prefill answer
 * (kv_transfer_params), the prefill usage, the merge of a non-streamed
 * decode answer, one SSE line's merge, and the stream filter fed the
 * answer in reads of a size the input chose, as the relay does.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/forward/pd.h"
#include "dataplane/forward/pd_body.h"
#include "dataplane/forward/pd_usage_filter.h"
#include "dataplane/types/request_types.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void filter_in_reads(const char *stream, size_t len, size_t step,
                            const struct dp_pd_usage *u)
{
    struct dp_pd_state pd;
    memset(&pd, 0, sizeof(pd));
    dp_pd_filter_init(&pd);
    pd.usage = *u;
    for (size_t off = 0; off < len; off += step) {
        size_t c = len - off < step ? len - off : step;
        const char *out = NULL;
        size_t ol = 0;
        dp_pd_filter(&pd, true, stream + off, c, &out, &ol);
        if (ol > 0 && out == NULL)
            abort();
        dp_pd_filter_commit(&pd, true, stream + off, c);
    }
    dp_pd_filter_fini(&pd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    size_t body_len = ((size_t)data[0] << 8 | data[1]) % (size - 2);
    const char *body = (const char *)data + 2;
    const char *resp = body + body_len;
    size_t resp_len = size - 2 - body_len;

    char *out = NULL;
    size_t out_len = 0;
    if (dp_pd_prefill_body(body, body_len, &out, &out_len) == 0 && strlen(out) != out_len)
        abort();
    free(out);
    out = NULL;

    char err[256];
    if (dp_pd_decode_body(body, body_len, resp, resp_len, &out, &out_len, err, sizeof(err)) == 0 &&
        strlen(out) != out_len)
        abort();
    free(out);
    out = NULL;

    struct dp_pd_usage u;
    memset(&u, 0, sizeof(u));
    dp_pd_prefill_usage(resp, resp_len, &u);
    if (dp_pd_merge_answer(resp, resp_len, &u, body, body_len, &out, &out_len) == 0)
        free(out);
    out = NULL;
    if (dp_pd_merge_line(resp, resp_len, &u, &out, &out_len) == 0)
        free(out);

    struct dp_pd_usage known = {.known = true, .cached_known = true, .prompt_tokens = 7};
    filter_in_reads(resp, resp_len, (size_t)data[0] % 64u + 1u, &known);
    return 0;
}
