/*
 * The decode stream's usage rewriting (see pd_usage_filter.h).
 */
#include "dataplane/forward/pd_usage_filter.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/types/request_types.h"
#include "dataplane/forward/pd_body.h"
#include "common/buf.h"

#define PD_LINE_MAX (16u << 10) /* longest SSE line held back to rewrite */
#define PD_USAGE    "\"usage\":{"
/* A chunk's output: the held line and the chunk, rewritten. Chunks are at
 * most curl's buffer (4 KiB, upstream.c), so this never binds in use; past
 * it the chunk is relayed as it is, as when memory runs out. */
#define PD_OUT_MAX (1u << 20)

/* What pd_filter_commit does: nothing; hold the whole chunk; hold the
 * chunk's partial last line; drop what was held and stop rewriting. */
enum { PD_KEEP_NONE, PD_KEEP_ALL, PD_KEEP_TAIL, PD_KEEP_GIVE_UP };

void dp_pd_filter_init(struct dp_pd_state *pd)
{
    buf_init(&pd->line, PD_LINE_MAX);
    buf_init(&pd->fout, PD_OUT_MAX);
    pd->keep = PD_KEEP_NONE;
    pd->no_rewrite = false;
}

static int pd_out_add(struct dp_pd_state *pd, const char *p, size_t n)
{
    return buf_append(&pd->fout, p, n);
}

/* One whole line (n bytes, its '\n' included), its usage rewritten. */
static int pd_out_line(struct dp_pd_state *pd, const char *line, size_t n)
{
    if (memmem(line, n, PD_USAGE, sizeof(PD_USAGE) - 1) != NULL) {
        size_t body = n - 1;
        if (body > 0 && line[body - 1] == '\r')
            body--;
        char *o = NULL;
        size_t ol = 0;
        if (dp_pd_merge_line(line, body, &pd->usage, &o, &ol) == 0) {
            int rc = pd_out_add(pd, o, ol);
            free(o);
            return rc == 0 ? pd_out_add(pd, line + body, n - body) : rc;
        }
    }
    return pd_out_add(pd, line, n);
}

/*
 * The decode leg's relay filter: a stream's usage chunk gets the prefill's
 * prompt and cached tokens. Lines are rewritten whole, so a partial last
 * line is held back until its end arrives (at most PD_LINE_MAX bytes; a
 * longer one, never a usage chunk of vLLM's, ends the rewriting).
 */
void dp_pd_filter(struct dp_pd_state *pd, bool sse, const char *data, size_t len, const char **out,
                  size_t *out_len)
{
    *out = data;
    *out_len = len;
    pd->keep = PD_KEEP_NONE;
    if (!sse || !pd->usage.known || pd->no_rewrite || len == 0)
        return;
    const char *last = memrchr(data, '\n', len);
    if (pd->line.len == 0 && last == data + len - 1 &&
        memmem(data, len, PD_USAGE, sizeof(PD_USAGE) - 1) == NULL)
        return; /* whole lines, no usage: as they are */
    buf_reset(&pd->fout);
    if (last == NULL && pd->line.len + len <= PD_LINE_MAX) {
        pd->keep = PD_KEEP_ALL; /* all of it held back */
        *out_len = 0;
        return;
    }
    if (last == NULL) {
        /* Too long to hold: what was held, then the rest as it comes. */
        if (pd_out_add(pd, pd->line.data, pd->line.len) != 0 || pd_out_add(pd, data, len) != 0)
            return;
        pd->keep = PD_KEEP_GIVE_UP;
        *out = pd->fout.data;
        *out_len = pd->fout.len;
        return;
    }
    size_t upto = (size_t)(last - data) + 1;
    const char *nl = memchr(data, '\n', upto);
    size_t first = (size_t)(nl - data) + 1;
    int rc = 0;
    if (pd->line.len > 0) {
        char *joined = malloc(pd->line.len + first);
        if (joined == NULL)
            return;
        memcpy(joined, pd->line.data, pd->line.len);
        memcpy(joined + pd->line.len, data, first);
        rc = pd_out_line(pd, joined, pd->line.len + first);
        free(joined);
    } else {
        rc = pd_out_line(pd, data, first);
    }
    for (const char *p = data + first; rc == 0 && p < data + upto;) {
        nl = memchr(p, '\n', (size_t)(data + upto - p));
        rc = pd_out_line(pd, p, (size_t)(nl - p) + 1);
        p = nl + 1;
    }
    if (rc != 0 || len - upto > PD_LINE_MAX) {
        /* Out of memory, or a tail too long to hold: relay as is. */
        buf_reset(&pd->fout);
        if (pd_out_add(pd, pd->line.data, pd->line.len) != 0 || pd_out_add(pd, data, len) != 0)
            return;
        *out = pd->fout.data;
        *out_len = pd->fout.len;
        pd->keep = PD_KEEP_GIVE_UP;
        return;
    }
    pd->keep = PD_KEEP_TAIL;
    *out = pd->fout.data;
    *out_len = pd->fout.len;
}

void dp_pd_filter_commit(struct dp_pd_state *pd, bool sse, const char *data, size_t len)
{
    if (!sse || !pd->usage.known || pd->no_rewrite || len == 0)
        return;
    if (pd->keep == PD_KEEP_NONE)
        return;
    if (pd->keep == PD_KEEP_GIVE_UP) {
        buf_reset(&pd->line);
        pd->no_rewrite = true;
        return;
    }
    const char *last = memrchr(data, '\n', len);
    size_t from = pd->keep == PD_KEEP_ALL ? 0 : (size_t)(last - data) + 1;
    if (pd->keep == PD_KEEP_TAIL)
        buf_reset(&pd->line);
    size_t n = len - from;
    if (n == 0)
        return;
    /* The filter held back at most PD_LINE_MAX bytes: only memory can fail. */
    if (buf_append(&pd->line, data + from, n) != 0)
        pd->no_rewrite = true; /* the held bytes are lost with the rewriting: rare */
}

void dp_pd_filter_fini(struct dp_pd_state *pd)
{
    buf_fini(&pd->line);
    buf_fini(&pd->fout);
}
